/* test_cpu_qdot_more.c - the dot kernels of engine/cpu/qdot/cpu_qdot_more.h (Q4_1,
 * Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS, MXFP4; C, AVX2, AVX-512).
 *
 * Data: random weight blocks (every byte random, then the f16 scales
 * overwritten with finite values of either sign, MXFP4's E8M0 exponent
 * with one of 2^-12 .. 2^-1), and also all-0x00 and
 * all-0xff quant bytes (the extremes of every field: maddubs saturation
 * would show there); random activations, also +-1 everywhere (every q8 at
 * +-127), quantized with engine/cpu/qdot/cpu_qact.c's reference quantizers. Row
 * lengths include an odd number of 32-blocks (the AVX-512 kernels' tail).
 *
 * Oracles:
 *  (a) every SIMD variant the CPU runs (__builtin_cpu_supports) against the
 *      C kernel: |s_isa - s_c| <= 1e-5 * sum_j |w_j a_j| (+1e-30), the sums
 *      of |terms| taken from the dequantized values below. The integer
 *      parts are exact in every variant; only the float additions across
 *      blocks may be ordered differently (f32 epsilon 6e-8 times at most a
 *      few hundred blocks stays well under 1e-5).
 *  (b) the C kernel against an independent second computation: the weights
 *      dequantized by quant_to_f32 (engine/format/quant.c, which is checked bit for
 *      bit against libggml elsewhere), the activations dequantized here
 *      (d * q, exact in double), dotted in double. Bound: 1e-5 * sum|terms|
 *      for the f32 rounding of the kernel (scale products, one multiply-add
 *      per block, the f32 dequantized weights), plus, for Q4_1/Q5_1, the
 *      Q8_1 block sum s that the kernel takes from the activation block: it
 *      is f16(d * sum q), so it may be off by half an f16 ulp, 2^-11 |s|,
 *      weighted by |m|.
 *  (c) the C kernel against the unquantized f32 activations, in double:
 *      bound sum_j |w_j| e_j, e_j the activation quantization error bound of
 *      j's block (q8_0 / q8_1: d16 / 2 + 128 |d - d16| with d = amax / 127
 *      and d16 its f16, quant.h's bound; q8_K: d / 2 with d the f32 scale,
 *      times 1 + 1e-6 for its own rounding), plus the bound of (b).
 * A short timing of each kernel on a 4096-element row is printed (not
 * checked): GB/s of weight bytes read. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_test.h"
#include "cpu_qact.h"
#include "cpu_qdot_more.h"
#include "qblock.h"
#include "quant.h"

typedef void (*vdot_fn)(int n, float *s, const void *w, const void *a);

enum { ISA_C, ISA_AVX2, ISA_AVX512, N_ISA };
static const char *isa_name[N_ISA] = {"c", "avx2", "avx512"};

typedef struct qtype {
    const char *name;
    int type, act, block, bytes;
    /* byte offsets of the f16 scales in a block; -1: none */
    int f16_off[2];
    int e8m0_off; /* byte offset of an E8M0 exponent (MXFP4); -1: none */
    vdot_fn fn[N_ISA];
} qtype;

#define FNS(t) \
    { cpu_vdot_##t##_c, cpu_vdot_##t##_avx2, cpu_vdot_##t##_avx512 }
static const qtype types[] = {
    {"q4_1", QB_Q4_1, QB_Q8_1, 32, sizeof(qblock_q4_1), {0, 2}, -1, FNS(q4_1)},
    {"q5_0", QB_Q5_0, QB_Q8_0, 32, sizeof(qblock_q5_0), {0, -1}, -1, FNS(q5_0)},
    {"q5_1", QB_Q5_1, QB_Q8_1, 32, sizeof(qblock_q5_1), {0, 2}, -1, FNS(q5_1)},
    {"iq4_nl", QB_IQ4_NL, QB_Q8_0, 32, sizeof(qblock_iq4_nl), {0, -1}, -1, FNS(iq4_nl)},
    {"q2_K", QB_Q2_K, QB_Q8_K, 256, sizeof(qblock_q2_K), {80, 82}, -1, FNS(q2_K)},
    {"q3_K", QB_Q3_K, QB_Q8_K, 256, sizeof(qblock_q3_K), {108, -1}, -1, FNS(q3_K)},
    {"q5_K", QB_Q5_K, QB_Q8_K, 256, sizeof(qblock_q5_K), {0, 2}, -1, FNS(q5_K)},
    {"iq4_xs", QB_IQ4_XS, QB_Q8_K, 256, sizeof(qblock_iq4_xs), {0, -1}, -1, FNS(iq4_xs)},
    {"mxfp4", QB_MXFP4, QB_Q8_0, 32, sizeof(qblock_mxfp4), {-1, -1}, 0, FNS(mxfp4)},
};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

_Static_assert(offsetof(qblock_q2_K, d) == 80 && offsetof(qblock_q2_K, dmin) == 82, "q2_K d");
_Static_assert(offsetof(qblock_q3_K, d) == 108, "q3_K d");
_Static_assert(offsetof(qblock_q4_1, m) == 2 && offsetof(qblock_q5_1, m) == 2, "m");
_Static_assert(offsetof(qblock_q5_K, dmin) == 2, "q5_K dmin");
_Static_assert(offsetof(qblock_mxfp4, e) == 0, "mxfp4 e");

static int isa_ok[N_ISA];

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); } /* [-1, 1) */

#define MAXN 4096
#define MAXB (MAXN / 32)

/* Buffers: weights (at most MAXB blocks of 24 bytes or 16 of 176), the
 * activations quantized (q8_1 rows are the largest: 36 bytes a 32), their
 * floats. */
static unsigned char g_w[MAXN * 2];
static unsigned char g_a[MAXN * 2];
static float g_x[MAXN], g_wf[MAXN];

/* Fill n elements of weights of t; pattern 0 random, 1 all quant bytes 0,
 * 2 all 0xff; scales random finite f16 in +-[2^-12, 2^-4) (the min or dmin
 * field included, either sign); an E8M0 exponent 2^-12 .. 2^-1 (117..128:
 * the levels, up to 12, are doubled, so the scale is 2^(e - 128)). */
static void make_weights(const qtype *t, int n, int pattern) {
    const int nb = n / t->block;
    for (int i = 0; i < nb * t->bytes; i++)
        g_w[i] = pattern == 0 ? (unsigned char)rnd() : pattern == 1 ? 0x00 : 0xff;
    for (int b = 0; b < nb; b++) {
        if (t->e8m0_off >= 0) g_w[(size_t)b * t->bytes + t->e8m0_off] = (unsigned char)(117 + rnd() % 12);
        for (int k = 0; k < 2; k++) {
            if (t->f16_off[k] < 0) continue;
            float v = (0.1f + 0.9f * (float)(rnd() % 1000) / 1000.0f) * 0.0625f;
            v = ldexpf(v, -(int)(rnd() % 8));
            if (rnd() & 1) v = -v;
            const uint16_t h = quant_f32_to_f16(v);
            memcpy(g_w + (size_t)b * t->bytes + t->f16_off[k], &h, 2);
        }
    }
}

/* Activations: pattern 0 random in [-1, 1) with a few spikes, 1 all +1,
 * 2 alternating +-1. */
static void make_acts(int n, int pattern) {
    for (int i = 0; i < n; i++) {
        if (pattern == 0)
            g_x[i] = frand() * ((rnd() % 17) ? 1.0f : 8.0f);
        else if (pattern == 1)
            g_x[i] = 1.0f;
        else
            g_x[i] = (i & 1) ? -1.0f : 1.0f;
    }
}

/* The exact values of the quantized activations (double), and each
 * element's quantization error bound against g_x. */
static void act_values(const qtype *t, int n, double *av, double *ebound) {
    if (t->act == QB_Q8_K) {
        const qblock_q8_K *y = (const qblock_q8_K *)g_a;
        for (int i = 0; i < n; i++) {
            const qblock_q8_K *b = &y[i / QBLOCK_K];
            av[i] = (double)b->d * b->qs[i % QBLOCK_K];
            ebound[i] = fabs((double)b->d) / 2 * (1 + 1e-6);
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        const int bi = i / 32, j = i % 32;
        uint16_t d16;
        int q;
        if (t->act == QB_Q8_0) {
            const qblock_q8_0 *b = (const qblock_q8_0 *)g_a + bi;
            d16 = b->d;
            q = b->qs[j];
        } else {
            const qblock_q8_1 *b = (const qblock_q8_1 *)g_a + bi;
            d16 = b->d;
            q = b->qs[j];
        }
        double amax = 0;
        for (int k = 0; k < 32; k++) amax = fmax(amax, fabs((double)g_x[bi * 32 + k]));
        const double d = amax / 127, dh = quant_f16_to_f32(d16);
        av[i] = dh * q;
        ebound[i] = dh / 2 + 128 * fabs(d - dh) + d * 1e-6 + 1e-30; /* slack: f32 d, x / d */
    }
}

/* For Q8_1 partners: the bound on the kernel's use of the stored block sum
 * s = f16(d * sum q) (d = amax / 127 unrounded, as llama.cpp's reference
 * writes it) in place of the exact d16 * sum q of the oracle: f16 rounding
 * (2^-11 relative, 2^-25 absolute for subnormals) plus |d - d16| |sum q|,
 * weighted by the weight block's |m|. */
static double q8_1_sum_bound(const qtype *t, int n) {
    if (t->act != QB_Q8_1) return 0;
    double e = 0;
    for (int b = 0; b < n / 32; b++) {
        const qblock_q8_1 *y = (const qblock_q8_1 *)g_a + b;
        uint16_t m16;
        memcpy(&m16, g_w + (size_t)b * t->bytes + 2, 2);
        double amax = 0, qsum = 0;
        for (int j = 0; j < 32; j++) {
            amax = fmax(amax, fabs((double)g_x[b * 32 + j]));
            qsum += y->qs[j];
        }
        const double d = amax / 127, dh = quant_f16_to_f32(y->d);
        const double s = quant_f16_to_f32(y->s);
        e += fabs((double)quant_f16_to_f32(m16)) *
             (ldexp(fabs(s), -11) * 1.001 + ldexp(1.0, -25) + (fabs(d - dh) + d * 1e-6) * fabs(qsum));
    }
    return e;
}

static int run_case(const qtype *t, int n, int wpat, int apat) {
    static double av[MAXN], eb[MAXN];
    make_weights(t, n, wpat);
    make_acts(n, apat);
    if (qact_row(t->act, g_x, g_a, n) != 0) {
        fprintf(stderr, "%s: qact_row failed for n %d\n", t->name, n);
        return 1;
    }
    if (quant_to_f32(t->type, g_w, g_wf, (uint64_t)n) != 0) {
        fprintf(stderr, "%s: quant_to_f32 failed\n", t->name);
        return 1;
    }
    act_values(t, n, av, eb);
    double ref = 0, ref_x = 0, sabs = 0, wq = 0;
    for (int i = 0; i < n; i++) {
        ref += (double)g_wf[i] * av[i];
        ref_x += (double)g_wf[i] * g_x[i];
        sabs += fabs((double)g_wf[i] * av[i]);
        wq += fabs((double)g_wf[i]) * eb[i];
    }
    const double tol_isa = 1e-5 * sabs + 1e-30;
    const double tol_b = 1e-5 * sabs + q8_1_sum_bound(t, n) + 1e-30;
    const double tol_c = tol_b + wq;
    float sc = NAN;
    t->fn[ISA_C](n, &sc, g_w, g_a);
    if (!(fabs(sc - ref) <= tol_b)) {
        fprintf(stderr, "%s n %d w%d a%d: c %.9g vs dequantized %.9g (tol %.3g)\n", t->name, n, wpat, apat,
                sc, ref, tol_b);
        return 1;
    }
    if (!(fabs(sc - ref_x) <= tol_c)) {
        fprintf(stderr, "%s n %d w%d a%d: c %.9g vs f32 activations %.9g (tol %.3g)\n", t->name, n, wpat,
                apat, sc, ref_x, tol_c);
        return 1;
    }
    for (int isa = ISA_AVX2; isa < N_ISA; isa++) {
        if (!isa_ok[isa]) continue;
        float si = NAN;
        t->fn[isa](n, &si, g_w, g_a);
        if (!(fabs(si - sc) <= tol_isa)) {
            fprintf(stderr, "%s n %d w%d a%d: %s %.9g vs c %.9g (tol %.3g)\n", t->name, n, wpat, apat,
                    isa_name[isa], si, sc, tol_isa);
            return 1;
        }
    }
    return 0;
}

static double g_worst[N_TYPES][N_ISA]; /* largest |s_isa - s_c| / sum|terms| seen */

static void test_type(int ti) {
    const qtype *t = &types[ti];
    const int ns32[] = {32, 7 * 32, 33 * 32, 4096};
    const int nsK[] = {256, 3 * 256, 4096};
    const int *ns = t->block == 32 ? ns32 : nsK;
    const int nn = t->block == 32 ? 4 : 3;
    for (int k = 0; k < nn; k++)
        for (int wpat = 0; wpat < 3; wpat++)
            for (int apat = 0; apat < 3; apat++)
                for (int rep = 0; rep < (wpat == 0 && apat == 0 ? 20 : 1); rep++)
                    CK_CHECK(run_case(t, ns[k], wpat, apat) == 0);
    /* the largest ISA-vs-C difference, for the report */
    for (int isa = ISA_AVX2; isa < N_ISA; isa++) {
        if (!isa_ok[isa]) continue;
        for (int rep = 0; rep < 50; rep++) {
            make_weights(t, 4096, 0);
            make_acts(4096, 0);
            CK_CHECK(qact_row(t->act, g_x, g_a, 4096) == 0);
            CK_CHECK(quant_to_f32(t->type, g_w, g_wf, 4096) == 0);
            static double av[MAXN], eb[MAXN];
            act_values(t, 4096, av, eb);
            double sabs = 0;
            for (int i = 0; i < 4096; i++) sabs += fabs((double)g_wf[i] * av[i]);
            float sc, si;
            t->fn[ISA_C](4096, &sc, g_w, g_a);
            t->fn[isa](4096, &si, g_w, g_a);
            const double r = fabs((double)si - sc) / sabs;
            if (r > g_worst[ti][isa]) g_worst[ti][isa] = r;
        }
    }
}

#define TYPE_TEST(i) \
    static void test_##i(void) { test_type(i); }
TYPE_TEST(0)
TYPE_TEST(1)
TYPE_TEST(2)
TYPE_TEST(3)
TYPE_TEST(4)
TYPE_TEST(5)
TYPE_TEST(6)
TYPE_TEST(7)
TYPE_TEST(8)

/* Thread CPU time, not wall time: the build machines are shared and a
 * wall clock would time the other processes too. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Throughput on a 4096-element row that stays in L1/L2: the kernels' own
 * speed, not memory's, per CPU second of this thread. Printed only. */
static void report_speed(void) {
    const int n = 4096;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const qtype *t = &types[ti];
        make_weights(t, n, 0);
        make_acts(n, 0);
        if (qact_row(t->act, g_x, g_a, n)) continue;
        fprintf(stderr, "%-7s", t->name);
        for (int isa = 0; isa < N_ISA; isa++) {
            if (!isa_ok[isa]) {
                fprintf(stderr, "  %s: not run", isa_name[isa]);
                continue;
            }
            volatile float sink = 0;
            int it = 0;
            const double t0 = now_s();
            double t1;
            do {
                for (int r = 0; r < 64; r++) {
                    float s;
                    t->fn[isa](n, &s, g_w, g_a);
                    sink += s;
                }
                it += 64;
                t1 = now_s();
            } while (t1 - t0 < 0.05);
            const double gbs = (double)it * (n / t->block) * t->bytes / (t1 - t0) / 1e9;
            fprintf(stderr, "  %s: %6.2f GB/s", isa_name[isa], gbs);
            if (isa > 0 && g_worst[ti][isa] > 0)
                fprintf(stderr, " (max rel diff %.2g)", g_worst[ti][isa]);
            else if (isa > 0)
                fprintf(stderr, " (bit-identical)");
            (void)sink;
        }
        fputc('\n', stderr);
    }
}

int main(void) {
    isa_ok[ISA_C] = 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    isa_ok[ISA_AVX2] =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    isa_ok[ISA_AVX512] = isa_ok[ISA_AVX2] && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512dq");
#endif
    for (int isa = 0; isa < N_ISA; isa++)
        fprintf(stderr, "isa %s: %s\n", isa_name[isa],
                isa_ok[isa] ? "tested" : "not on this CPU (compiled only)");
    CK_RUN(test_0);
    CK_RUN(test_1);
    CK_RUN(test_2);
    CK_RUN(test_3);
    CK_RUN(test_4);
    CK_RUN(test_5);
    CK_RUN(test_6);
    CK_RUN(test_7);
    CK_RUN(test_8);
    report_speed();
    return ck_test_summary();
}
