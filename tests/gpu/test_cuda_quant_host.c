/* test_cuda_quant_host.c - the GPU's dequantizers (kernels/ck_cuda_quant.cu's
 * ck_deq32, run on the host through be_cuda_qdequant_host) against
 * engine/format/quant.c's quant_to_f32, bit for bit, for every quantized type.
 * Needs no GPU: built with the CUDA backend, it runs everywhere (CI
 * included), so the decoders are checked even where the device tests skip.
 *
 * Data: random blocks (every byte random, the f16 scales finite of either
 * sign), also all-0x00 and all-0xff quant bytes, 64 rows of 512 elements. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "model.h"
#include "qblock.h"
#include "quant.h"

typedef struct qtype {
    const char *name;
    int type, block, bytes;
    int f16_off[2]; /* byte offsets of a block's f16 scales; -1: none */
} qtype;

static const qtype types[] = {
    {"q4_0", QB_Q4_0, 32, sizeof(qblock_q4_0), {0, -1}},
    {"q4_1", QB_Q4_1, 32, sizeof(qblock_q4_1), {0, 2}},
    {"q5_0", QB_Q5_0, 32, sizeof(qblock_q5_0), {0, -1}},
    {"q5_1", QB_Q5_1, 32, sizeof(qblock_q5_1), {0, 2}},
    {"q8_0", QB_Q8_0, 32, sizeof(qblock_q8_0), {0, -1}},
    {"iq4_nl", QB_IQ4_NL, 32, sizeof(qblock_iq4_nl), {0, -1}},
    {"q2_K", QB_Q2_K, 256, sizeof(qblock_q2_K), {80, 82}},
    {"q3_K", QB_Q3_K, 256, sizeof(qblock_q3_K), {108, -1}},
    {"q4_K", QB_Q4_K, 256, sizeof(qblock_q4_K), {0, 2}},
    {"q5_K", QB_Q5_K, 256, sizeof(qblock_q5_K), {0, 2}},
    {"q6_K", QB_Q6_K, 256, sizeof(qblock_q6_K), {208, -1}},
    {"iq4_xs", QB_IQ4_XS, 256, sizeof(qblock_iq4_xs), {0, -1}},
};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* n_blocks random blocks of t at w (see the header). */
static void make_blocks(const qtype *t, unsigned char *w, size_t n_blocks) {
    for (size_t i = 0; i < n_blocks * (size_t)t->bytes; i++) w[i] = (unsigned char)rnd();
    for (size_t b = 0; b < n_blocks; b++)
        for (int k = 0; k < 2; k++) {
            if (t->f16_off[k] < 0) continue;
            float v = ldexpf((0.1f + 0.9f * (float)(rnd() % 1000) / 1000.0f) * 0.0625f, -(int)(rnd() % 8));
            const uint16_t h = quant_f32_to_f16(rnd() & 1 ? -v : v);
            memcpy(w + b * (size_t)t->bytes + t->f16_off[k], &h, 2);
        }
}

static void test_decoders(void) {
    const int R = 64, K = 512;
    float *a = malloc((size_t)R * K * sizeof *a), *b = malloc((size_t)R * K * sizeof *b);
    unsigned char *w = malloc((size_t)R * K * 2);
    CK_CHECK(a && b && w);
    int bad = 0;
    for (int ti = 0; ti < N_TYPES && !bad; ti++) {
        const qtype *t = &types[ti];
        const size_t nb = (size_t)R * K / t->block;
        for (int pat = 0; pat < 3 && !bad; pat++) {
            make_blocks(t, w, nb);
            if (pat) /* the quant bytes all 0 or all 1 bits, the scales kept */
                for (size_t blk = 0; blk < nb; blk++)
                    for (int i = 0; i < t->bytes; i++) {
                        unsigned char *p = w + blk * t->bytes + i;
                        int is_scale = 0;
                        for (int k = 0; k < 2; k++)
                            if (t->f16_off[k] >= 0 && (i == t->f16_off[k] || i == t->f16_off[k] + 1))
                                is_scale = 1;
                        if (!is_scale) *p = pat == 1 ? 0x00 : 0xff;
                    }
            int rc = quant_to_f32(t->type, w, a, (uint64_t)R * K);
            int rc2 = be_cuda_qdequant_host(t->type, w, R, K, b);
            if (rc || rc2) {
                fprintf(stderr, "%s: quant_to_f32 %d, be_cuda_qdequant_host %d\n", t->name, rc, rc2);
                bad = 1;
            } else if (memcmp(a, b, (size_t)R * K * sizeof *a)) {
                size_t i = 0;
                while (!memcmp(&a[i], &b[i], sizeof *a)) i++;
                fprintf(stderr, "%s pattern %d: element %zu: gpu decoder %.9g, quant.c %.9g\n", t->name, pat,
                        i, (double)b[i], (double)a[i]);
                bad = 1;
            }
        }
        if (!bad) fprintf(stderr, "%-6s: %d x %d elements, 3 patterns, bit-identical\n", t->name, R, K);
    }
    free(a);
    free(b);
    free(w);
    CK_CHECK(!bad);
}

static void test_refusals(void) {
    float y[64];
    unsigned char w[256] = {0};
    CK_CHECK(be_cuda_qdequant_host(QB_MXFP4, w, 1, 32, y) == CK_EUNSUPPORTED); /* no CUDA kernel */
    CK_CHECK(be_cuda_qdequant_host(QB_F32, w, 1, 32, y) == CK_EUNSUPPORTED);
    CK_CHECK(be_cuda_qdequant_host(QB_Q4_K, w, 1, 32, y) == CK_EUNSUPPORTED); /* K % 256 */
    CK_CHECK(be_cuda_qdequant_host(QB_Q4_0, NULL, 1, 32, y) == CK_EINVAL);
}

/* A model the CPU computes but CUDA has no kernel for (MXFP4 matrices) is
 * refused by name when the backend is made, before any device is touched:
 * so on every machine, GPU or not. */
static void test_mxfp4_model_refused(void) {
    char path[] = "/tmp/confkv-cuda-mxfp4-XXXXXX", err[512] = "";
    const int fd = mkstemp(path);
    CK_CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    synth_params p;
    memset(&p, 0, sizeof p);
    p.dim = 64, p.n_layers = 1, p.n_heads = 2, p.n_kv_heads = 1, p.hidden_dim = 128;
    p.vocab_size = 512, p.ctx = 64, p.type = QUANT_MXFP4, p.seed = 3;
    model *m = NULL;
    CK_CHECK_MSG(convert_synth(&p, path, err, sizeof err) == 0, "%s", err);
    CK_CHECK_MSG(model_load(path, NULL, &m, err, sizeof err) == 0, "%s", err);
    if (m) {
        be_options o;
        memset(&o, 0, sizeof o);
        o.max_batch_tokens = 16, o.n_kv_blocks = 8, o.block_size = 16, o.n_threads = 1;
        backend *b = NULL;
        const int rc = be_cuda_new(m, &o, &b, err, sizeof err);
        CK_CHECK_MSG(rc == CK_EUNSUPPORTED && !b, "%s: %s", ck_errname(rc), err);
        CK_CHECK_MSG(strstr(err, "tensor token_embd: weight type mxfp4 has no CUDA kernel") != NULL, "'%s'",
                     err);
        fprintf(stderr, "refused: %s\n", err);
        model_free(m);
    }
    unlink(path);
}

int main(void) {
    CK_RUN(test_decoders);
    CK_RUN(test_refusals);
    CK_RUN(test_mxfp4_model_refused);
    return ck_test_summary();
}
