/* llamacpp_vecdot.c - confkv's MXFP4 and IQ4_NL row products against
 * ggml's ggml_vec_dot_<type>_q8_0, the functions llama.cpp's CPU backend
 * multiplies a weight row with a q8_0 activation row by.
 *
 * The oracle is node-llama-cpp's prebuilt CPU backend: one library a CPU
 * level (libggml-cpu-<level>.so beside libggml-base.so), each exporting the
 * vec_dot functions built for its level. This program dlopen()s
 *   x64       the baseline (SSE2): the scalar loop of ggml's generic code,
 *             the order of operations of our portable C kernel, so the two
 *             must agree bit for bit;
 *   haswell   AVX2 + FMA: ggml's vector loop (two blocks a step, two
 *             accumulators), against each of our kernels this CPU runs
 *             (cpu_qdot_init at every level up to cpu_isa_detect's);
 * where the CPU runs them. The activations are ours (cpu_qact.c's q8_0,
 * the same bytes as ggml's quantize_row_q8_0: test_cpu_qdot); the weights
 * random nibbles with sane scales (MXFP4: exponents 2^-12 .. 2^-1; IQ4_NL:
 * f16 d of either sign), also all-0x00 / all-0xff nibbles, rows of 32 to
 * 4096 elements including odd block counts (the vector loops' tails).
 *
 * Criterion for the vector levels: |ours - ggml| <= 1e-5 * sum_j |w_j a_j|
 * (test_cpu_qdot's bound: the integer sums are exact, only the order of
 * the float additions across blocks differs). The largest difference seen,
 * relative to that sum, is printed for MXFP4 and IQ4_NL side by side.
 *
 * Exit 0 pass, 1 fail, 77 (skip) when the libraries are not there.
 * Usage: llamacpp_vecdot LIBDIR */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "cpu_qact.h"
#include "cpu_qdot.h"
#include "qblock.h"
#include "quant.h"

/* ggml-cpu.h's ggml_vec_dot_t */
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nrc);

static uint64_t g_s = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) {
    g_s ^= g_s >> 12;
    g_s ^= g_s << 25;
    g_s ^= g_s >> 27;
    return g_s * 2685821657736338717ull;
}
static float frand(void) { return (float)((double)(rnd() >> 11) * 0x1p-53 * 2.0 - 1.0); }

enum { MAXN = 4096 };

/* n elements of weights: pattern 0 random nibbles, 1 all 0x00, 2 all 0xff */
static void make_weights(int type, unsigned char *w, int n, int pat) {
    const int nb = n / 32;
    for (int b = 0; b < nb; b++) {
        unsigned char *qs;
        if (type == QB_MXFP4) {
            qblock_mxfp4 *x = (qblock_mxfp4 *)w + b;
            x->e = (uint8_t)(117 + rnd() % 12);
            qs = x->qs;
        } else {
            qblock_iq4_nl *x = (qblock_iq4_nl *)w + b;
            float d = ldexpf(0.5f + 0.5f * (float)(rnd() % 1000) / 1000.0f, -(int)(rnd() % 10) - 4);
            x->d = quant_f32_to_f16(rnd() & 1 ? -d : d);
            qs = x->qs;
        }
        for (int j = 0; j < 16; j++) qs[j] = pat == 0 ? (unsigned char)rnd() : pat == 1 ? 0x00 : 0xff;
    }
}

/* sum_j |w_j a_j| from the dequantized rows (quant_to_f32, bit-exact with
 * ggml: llamacpp_dequant) */
static double abs_terms(int type, const unsigned char *w, const unsigned char *a, int n) {
    static float wf[MAXN];
    if (quant_to_f32(type, w, wf, (uint64_t)n)) return NAN;
    double m = 0;
    for (int e = 0; e < n; e++) {
        const qblock_q8_0 *y = (const qblock_q8_0 *)a + e / 32;
        m += fabs((double)wf[e] * quant_f16_to_f32(y->d) * y->qs[e % 32]);
    }
    return m;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: llamacpp_vecdot LIBDIR\n");
        return 2;
    }
    static const struct {
        const char *lib;
        int vector; /* 0: scalar (bit-exact against our C), 1: AVX2 */
        const char *need;
    } levels[] = {{"libggml-cpu-x64.so", 0, NULL}, {"libggml-cpu-haswell.so", 1, "avx2"}};
    static const struct {
        int type;
        const char *fn;
    } types[] = {{QB_MXFP4, "ggml_vec_dot_mxfp4_q8_0"}, {QB_IQ4_NL, "ggml_vec_dot_iq4_nl_q8_0"}};
    static const int ns[] = {32, 64, 96, 7 * 32, 33 * 32, 1024, 4096};
    static unsigned char w[MAXN / 32 * 18], a[MAXN / 32 * 34];
    static float x[MAXN];
    const int best = cpu_isa_detect();
    int fails = 0, ran = 0;
    __builtin_cpu_init();
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
        if (levels[li].need && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                 __builtin_cpu_supports("f16c"))) {
            printf("%s: not on this CPU, not run\n", levels[li].lib);
            continue;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", argv[1], levels[li].lib);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            printf("%s: %s\n", levels[li].lib, dlerror());
            continue;
        }
        /* ggml's CPU code reads f16 through a table that ggml_cpu_init fills */
        void (*cpu_init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
        if (!cpu_init) {
            printf("FAIL: %s has no ggml_cpu_init\n", levels[li].lib);
            fails++;
            dlclose(h);
            continue;
        }
        cpu_init();
        ran++;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const int type = types[ti].type;
            ggml_vec_dot_fn gd = (ggml_vec_dot_fn)dlsym(h, types[ti].fn);
            if (!gd) {
                printf("FAIL: %s has no %s\n", levels[li].lib, types[ti].fn);
                fails++;
                continue;
            }
            /* ours: the C kernel against the scalar level; every level this
             * CPU runs against the vector one */
            const int top = levels[li].vector ? best : CPU_ISA_C;
            for (int isa = CPU_ISA_C; isa <= top; isa++) {
                cpu_qdot qd;
                cpu_qdot_init(&qd, isa);
                const cpu_qtype *t = cpu_qdot_type(&qd, type);
                long cases = 0, bad = 0, same = 0;
                double worst = 0;
                for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
                    for (int pat = 0; pat < 3; pat++)
                        for (int rep = 0; rep < (pat ? 2 : 40); rep++) {
                            const int n = ns[k];
                            make_weights(type, w, n, pat);
                            for (int i = 0; i < n; i++) x[i] = frand() * (rnd() % 17 ? 1.0f : 8.0f);
                            if (qact_row(QB_Q8_0, x, a, n)) return 1;
                            float ours = NAN, theirs = NAN;
                            t->dot(n, &ours, w, a);
                            gd(n, &theirs, 0, w, 0, a, 0, 1);
                            const double mag = abs_terms(type, w, a, n), diff = fabs((double)ours - theirs);
                            cases++;
                            same += memcmp(&ours, &theirs, 4) == 0;
                            if (mag > 0 && diff / mag > worst) worst = diff / mag;
                            const int ok = levels[li].vector ? diff <= 1e-5 * mag + 1e-30
                                                             : memcmp(&ours, &theirs, 4) == 0;
                            if (!ok && bad++ < 3)
                                fprintf(stderr, "  %s %s n %d pattern %d: ours (%s) %.9g, ggml %.9g\n",
                                        quant_type_name(type), levels[li].lib, n, pat, t->impl, ours, theirs);
                        }
                printf("%-7s ours %-6s vs %-22s %4ld rows: %4ld bit-identical, largest |diff| / sum|w a| "
                       "%.2g%s\n",
                       quant_type_name(type), t->impl, levels[li].lib, cases, same, worst,
                       bad ? " FAIL" : "");
                fails += bad != 0;
            }
        }
        dlclose(h);
    }
    if (!ran) {
        printf("SKIP: no libggml-cpu library could be opened under %s\n", argv[1]);
        return 77;
    }
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
