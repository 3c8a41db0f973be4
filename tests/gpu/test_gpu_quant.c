/* test_gpu_quant.c - quantized weights on the GPU (kernels/ck_cuda_quant.cu
 * and the CUDA backend's product path) against the CPU.
 *
 * Without a usable GPU it prints "skipped: no GPU" and exits 77.
 *
 *  1. Every quantized type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K,
 *     Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS): N = 67 rows (not a multiple of the
 *     GEMV's 4 rows a thread block) of K = 512 random blocks (every byte
 *     random, f16 scales overwritten with finite values of either sign),
 *     through be_cuda_qmatmul (the backend's own path) for M = 1, 3, 8
 *     (GEMV) and 9, 40 (dequantize + cuBLAS), with f32 and with f16
 *     inputs. Oracles:
 *       - the device's dequantization to f32 equals engine/format/quant.c's
 *         quant_to_f32 bit for bit (memcmp);
 *       - y against sum_k w[n][k] x[m][k] in double, w from quant_to_f32, x
 *         as the device saw it (rounded to f16 when f16): f32 weights
 *         (GEMV, and f32 slices) within 1e-4 * sum_k |w x| (f32
 *         accumulation of K = 512 terms: at most about K 2^-24 = 3e-5
 *         relative to that sum); f16 slices within (2^-11 + 1e-4) sum |w x|
 *         + 2^-25 sum |x| (each weight rounded to f16: half an ulp
 *         relative, 2^-25 absolute below f16's normal range).
 *  2. Q4_K with N x K = 4100 x 4096 > 2^24 elements: the batch path's
 *     slicing into two expansions, same bound.
 *  3. A model: stories260K with attn_q, attn_k, attn_output and ffn_gate
 *     quantized to q8_0 (quant_from_f32) while attn_v, ffn_up and ffn_down
 *     stay f32, so fused QKV and gate/up matrices have a quantized and a
 *     float segment: the CPU backend and the CUDA backend on the same
 *     batches (a 60-token prefill mix: the dequantize + cuBLAS path; a
 *     3-token decode step: the GEMV), normalised logits error max|a - b| /
 *     max|b| <= 3e-2 (test_gpu_backend's bound for f16 weights; here f16
 *     product inputs and f16 float weights), with the quantized weights
 *     kept and with CONFKV_CUDA_QUANT=expand. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "ck_err.h"
#include "ck_test.h"
#include "kv.h"
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
static float frand(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); }

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

/* y (M, N) on the device against the double reference; returns 0 or 1. */
static int check_product(const qtype *t, const unsigned char *w, int N, int K, int M, int x_f16,
                         int check_deq) {
    const size_t nw = (size_t)N * K;
    float *x = malloc((size_t)M * K * sizeof *x), *xr = malloc((size_t)M * K * sizeof *xr);
    float *y = malloc((size_t)M * N * sizeof *y), *wf = malloc(nw * sizeof *wf);
    float *deq = check_deq ? malloc(nw * sizeof *deq) : NULL;
    int bad = 1;
    if (!x || !xr || !y || !wf || (check_deq && !deq)) goto out;
    for (size_t i = 0; i < (size_t)M * K; i++) {
        x[i] = frand();
        xr[i] = x_f16 ? quant_f16_to_f32(quant_f32_to_f16(x[i])) : x[i];
    }
    if (quant_to_f32(t->type, w, wf, nw)) {
        fprintf(stderr, "%s: quant_to_f32 failed\n", t->name);
        goto out;
    }
    int rc = be_cuda_qmatmul(t->type, w, N, K, x, M, x_f16, y, deq);
    if (rc) {
        fprintf(stderr, "%s: be_cuda_qmatmul: %s\n", t->name, ck_errname(rc));
        goto out;
    }
    if (deq && memcmp(deq, wf, nw * sizeof *wf)) {
        size_t i = 0;
        while (i < nw && !memcmp(&deq[i], &wf[i], sizeof *wf)) i++;
        fprintf(stderr, "%s: device dequantization differs at %zu: %.9g vs %.9g\n", t->name, i,
                (double)deq[i], (double)wf[i]);
        goto out;
    }
    const int f16_slices = M > 8 && x_f16;
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = 0, sabs = 0, xabs = 0;
            for (int k = 0; k < K; k++) {
                const double p = (double)wf[(size_t)n * K + k] * xr[(size_t)m * K + k];
                ref += p;
                sabs += fabs(p);
                xabs += fabs((double)xr[(size_t)m * K + k]);
            }
            const double tol =
                f16_slices ? (ldexp(1, -11) + 1e-4) * sabs + ldexp(1, -25) * xabs : 1e-4 * sabs;
            const double e = fabs((double)y[(size_t)m * N + n] - ref);
            if (!(e <= tol + 1e-30)) {
                fprintf(stderr, "%s M %d f16 %d: y[%d][%d] = %.9g, want %.9g (tol %.3g)\n", t->name, M, x_f16,
                        m, n, (double)y[(size_t)m * N + n], ref, tol);
                goto out;
            }
            if (sabs > 0 && e / sabs > worst) worst = e / sabs;
        }
    fprintf(stderr, "%-6s N %d K %d M %2d %s: max |err| / sum|w x| = %.2g\n", t->name, N, K, M,
            x_f16 ? "f16" : "f32", worst);
    bad = 0;
out:
    free(x);
    free(xr);
    free(y);
    free(wf);
    free(deq);
    return bad;
}

static void test_types(void) {
    const int N = 67, K = 512, Ms[] = {1, 3, 8, 9, 40};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const qtype *t = &types[ti];
        const size_t nb = (size_t)N * K / t->block;
        unsigned char *w = malloc(nb * t->bytes);
        CK_CHECK(w);
        make_blocks(t, w, nb);
        int bad = 0;
        for (int mi = 0; mi < 5 && !bad; mi++)
            for (int f = 0; f < 2 && !bad; f++) bad = check_product(t, w, N, K, Ms[mi], f, mi == 0 && f == 0);
        free(w);
        CK_CHECK_MSG(!bad, "%s", t->name);
    }
}

static void test_slices(void) {
    const qtype *t = &types[8]; /* q4_K */
    const int N = 4100, K = 4096;
    const size_t nb = (size_t)N * K / t->block;
    unsigned char *w = malloc(nb * t->bytes);
    CK_CHECK(w);
    make_blocks(t, w, nb);
    int bad = check_product(t, w, N, K, 9, 1, 0);
    free(w);
    CK_CHECK(!bad);
}

/* ------------------------------------------------------------ a model */

#define BS 16
#define MAXB 32
#define NSEQ 3
#define TMAX 64

static double norm_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

typedef struct tbatch {
    int n, n_out;
    int32_t token[TMAX], pos[TMAX], seq[TMAX], out_row[TMAX];
} tbatch;

static void tb_add(tbatch *t, int seq, int pos, int token, int want) {
    t->token[t->n] = token;
    t->pos[t->n] = pos;
    t->seq[t->n] = seq;
    t->out_row[t->n] = want ? t->n_out++ : -1;
    t->n++;
}

static int tb_run(const tbatch *t, backend *b, float *logits) {
    static int32_t tables[NSEQ][MAXB];
    be_seq_view v[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        for (int j = 0; j < MAXB; j++) tables[s][j] = s * MAXB + j;
        v[s].blocks = tables[s];
        v[s].n_blocks = MAXB;
        v[s].blocks8 = NULL;
        v[s].mass = NULL;
    }
    be_batch bt = {
        .n_tokens = t->n,
        .token = t->token,
        .pos = t->pos,
        .seq = t->seq,
        .out_row = t->out_row,
        .n_seqs = NSEQ,
        .seqs = v,
        .n_out = t->n_out,
    };
    return b->ops->forward(b, &bt, logits);
}

/* Quantize tensor *t (f32) to q8_0 into a new buffer; the caller restores
 * the tensor and frees the buffer. */
static void *to_q8_0(model_tensor *t) {
    uint64_t bytes = 0;
    if (t->type != QUANT_F32 || quant_row_bytes(QUANT_Q8_0, t->n, &bytes)) return NULL;
    void *q = malloc(bytes);
    if (!q || quant_from_f32(QUANT_Q8_0, t->data, q, t->n)) {
        free(q);
        return NULL;
    }
    t->type = QUANT_Q8_0;
    t->data = q;
    return q;
}

static void test_model(void) {
    char err[256];
    model *m = NULL;
    int rc = model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                        sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    const int L = m->cfg.n_layers, V = m->cfg.vocab_size;
    model_layer *saved = malloc((size_t)L * sizeof *saved);
    void **bufs = calloc((size_t)L * 4, sizeof *bufs);
    float *lc = malloc((size_t)TMAX * V * sizeof *lc), *lg = malloc((size_t)TMAX * V * sizeof *lg);
    backend *cpu = NULL, *cuda = NULL;
    int bad = 1, nq = 0;
    if (!saved || !bufs || !lc || !lg) goto out;
    memcpy(saved, m->layers, (size_t)L * sizeof *saved);
    for (int l = 0; l < L; l++) {
        model_tensor *q[4] = {&m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wo, &m->layers[l].w1};
        for (int k = 0; k < 4; k++)
            if (!(bufs[nq++] = to_q8_0(q[k]))) {
                fprintf(stderr, "quantizing layer %d tensor %d failed\n", l, k);
                goto out;
            }
    }
    be_options o;
    memset(&o, 0, sizeof o);
    o.max_batch_tokens = TMAX;
    o.n_kv_blocks = NSEQ * MAXB;
    o.block_size = BS;
    o.n_threads = 2;
    for (int expand = 0; expand < 2; expand++) {
        if (expand) setenv("CONFKV_CUDA_QUANT", "expand", 1);
        rc = be_cpu_new(m, &o, &cpu, err, sizeof err);
        if (!rc) rc = be_cuda_new(m, &o, &cuda, err, sizeof err);
        unsetenv("CONFKV_CUDA_QUANT");
        if (rc) {
            fprintf(stderr, "backend: %s (%s)\n", err, ck_errname(rc));
            goto out;
        }
        tbatch t;
        memset(&t, 0, sizeof t);
        uint32_t tok = 7;
        for (int p = 0; p < 20; p++)
            tb_add(&t, 0, p, p ? (int)(3 + (tok = tok * 1103515245u + 12345u) % (V - 3)) : 1, p == 19);
        for (int p = 0; p < 7; p++)
            tb_add(&t, 1, p, p ? (int)(3 + (tok = tok * 1103515245u + 12345u) % (V - 3)) : 1, 1);
        for (int p = 0; p < 33; p++)
            tb_add(&t, 2, p, p ? (int)(3 + (tok = tok * 1103515245u + 12345u) % (V - 3)) : 1, p == 32);
        for (int step = 0; step < 2; step++) {
            if (step) { /* decode: one token a sequence */
                memset(&t, 0, sizeof t);
                tb_add(&t, 2, 33, 9, 1);
                tb_add(&t, 0, 20, 11, 1);
                tb_add(&t, 1, 7, 13, 1);
            }
            const int r1 = tb_run(&t, cpu, lc), r2 = tb_run(&t, cuda, lg);
            if (r1 || r2) {
                fprintf(stderr, "forward: cpu %d cuda %d\n", r1, r2);
                goto out;
            }
            const double e = norm_err(lg, lc, (size_t)t.n_out * V);
            fprintf(
                stderr,
                "q8_0 mix, %s, %s (%d tokens): normalised logits error %.3g (bound 3e-2), %zu device bytes\n",
                expand ? "expanded at upload" : "kept quantized", step ? "decode" : "prefill", t.n, e,
                cuda->ops->memory_bytes(cuda));
            if (!(e <= 3e-2)) goto out;
        }
        be_free(cuda);
        be_free(cpu);
        cuda = cpu = NULL;
    }
    bad = 0;
out:
    be_free(cuda);
    be_free(cpu);
    if (saved) memcpy(m->layers, saved, (size_t)L * sizeof *saved);
    for (int i = 0; bufs && i < nq; i++) free(bufs[i]);
    free(bufs);
    free(saved);
    free(lc);
    free(lg);
    model_free(m);
    CK_CHECK(!bad);
}

int main(void) {
    if (!be_cuda_available()) {
        printf("skipped: no GPU\n");
        return 77;
    }
    CK_RUN(test_types);
    CK_RUN(test_slices);
    CK_RUN(test_model);
    return ck_test_summary();
}
