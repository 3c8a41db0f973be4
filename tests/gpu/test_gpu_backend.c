/* test_gpu_backend.c - the CUDA backend against the CPU reference.
 *
 * Without a usable GPU (no driver, no device) it prints "skipped: no GPU"
 * and exits with 77, which ctest counts as skipped (SKIP_RETURN_CODE).
 *
 * With one, on stories260K (f32 weights, so the CUDA backend computes in
 * f32 too), the same batches run on both backends, each with its own KV
 * storage and identical block tables:
 *   - a mixed batch of prefill chunks and decode tokens from three
 *     sequences, a decode step, a step with a block marked KV_NONE, and a
 *     second prefill chunk: logits within a normalised error
 *     max|a - b| / max|b| <= 1e-3, attention mass per block within 1e-4
 *     (absolute, on masses that sum to the number of query tokens);
 *   - greedy decoding of 64 tokens from BOS: identical tokens;
 *   - kv_read / kv_write of a block; int8 blocks (kv_compress, kv_expand,
 *     kv8_read, kv8_write) byte for byte engine/format/kvq.c's; attention over an
 *     int8 hot block (the same int8 bytes on both backends);
 *   - the device's confidence (entropy, gap, p_max, argmax) against
 *     samp_confidence on the same logits;
 *   - the f16-weight path (CONFKV_CUDA_WEIGHTS=f16): the first batch within
 *     a looser bound of 3e-2 (f16 weights and product inputs, f32
 *     accumulation);
 *   - malformed batches are refused with CK_EINVAL. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "ck_err.h"
#include "ck_test.h"
#include "kv.h"
#include "kvq.h"
#include "model.h"
#include "samp.h"

#define BS 16   /* tokens per block */
#define MAXB 32 /* blocks per sequence: 512 / 16 */
#define NSEQ 4  /* sequences 0..2 for batches, 3 for greedy */
#define TMAX 64 /* max_batch_tokens */
#define TOL_F32 1e-3
#define TOL_F16 3e-2
#define N_KV8 4 /* int8 pool blocks */

static model *g_m;
static backend *g_cpu, *g_cuda;
static int32_t g_tables[NSEQ][MAXB]; /* sequence s owns pool blocks s * MAXB + j */
static float g_mass_cpu[NSEQ][MAXB], g_mass_cuda[NSEQ][MAXB];
static float *g_lc, *g_lg; /* (TMAX, vocab) logits, cpu and cuda */
static uint32_t g_rng = 12345u;

static int rnd_token(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return 3 + (int)((g_rng >> 8) % (uint32_t)(g_m->cfg.vocab_size - 3));
}

static be_options test_options(void) {
    be_options o;
    memset(&o, 0, sizeof o);
    o.max_batch_tokens = TMAX;
    o.n_kv_blocks = NSEQ * MAXB;
    o.block_size = BS;
    o.n_threads = 2;
    o.max_ctx = 0;
    o.n_kv8_blocks = N_KV8;
    return o;
}

/* A batch under construction. */
typedef struct tbatch {
    int n, n_out;
    int32_t token[TMAX], pos[TMAX], seq[TMAX], out_row[TMAX];
    int n_blocks[NSEQ];     /* view lengths (default MAXB) */
    int none_seq, none_blk; /* one table entry shown as KV_NONE (-1: none) */
    int b8;                 /* ... and, when >= 0, as this int8 block instead */
} tbatch;

static void tb_init(tbatch *t) {
    memset(t, 0, sizeof *t);
    for (int s = 0; s < NSEQ; s++) t->n_blocks[s] = MAXB;
    t->none_seq = -1;
    t->b8 = -1;
}

static void tb_add(tbatch *t, int seq, int pos, int token, int want_logits) {
    t->token[t->n] = token;
    t->pos[t->n] = pos;
    t->seq[t->n] = seq;
    t->out_row[t->n] = want_logits ? t->n_out++ : -1;
    t->n++;
}

/* Run t on backend b with mass accumulating into mass[NSEQ][MAXB]. */
static int tb_run(const tbatch *t, backend *b, float *logits, float mass[NSEQ][MAXB]) {
    static int32_t shown[NSEQ][MAXB], shown8[NSEQ][MAXB];
    be_seq_view v[NSEQ];
    memcpy(shown, g_tables, sizeof shown);
    for (int s = 0; s < NSEQ; s++)
        for (int j = 0; j < MAXB; j++) shown8[s][j] = KV_NONE;
    if (t->none_seq >= 0) {
        shown[t->none_seq][t->none_blk] = KV_NONE;
        shown8[t->none_seq][t->none_blk] = t->b8;
    }
    for (int s = 0; s < NSEQ; s++) {
        v[s].blocks = shown[s];
        v[s].n_blocks = t->n_blocks[s];
        v[s].blocks8 = t->b8 >= 0 ? shown8[s] : NULL;
        v[s].mass = mass[s];
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

static double norm_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* Run t on the CPU and on cuda; compare logits (tolerance tol) and, when
 * check_mass, the mass each block received in this step. Returns 0 or 1
 * after printing why. */
static int compare_step(const tbatch *t, backend *cuda, double tol, int check_mass, const char *what) {
    memset(g_mass_cpu, 0, sizeof g_mass_cpu);
    memset(g_mass_cuda, 0, sizeof g_mass_cuda);
    int rc1 = tb_run(t, g_cpu, g_lc, g_mass_cpu), rc2 = tb_run(t, cuda, g_lg, g_mass_cuda);
    if (rc1 || rc2) {
        fprintf(stderr, "%s: forward failed: cpu %d, cuda %d\n", what, rc1, rc2);
        return 1;
    }
    const size_t n = (size_t)t->n_out * g_m->cfg.vocab_size;
    double e = norm_err(g_lg, g_lc, n);
    fprintf(stderr, "%s: %d tokens, %d rows, normalised logits error %.3g (bound %.0e)\n", what, t->n,
            t->n_out, e, tol);
    if (!(e <= tol)) return 1;
    if (!check_mass) return 0;
    for (int s = 0; s < NSEQ; s++) {
        int q = 0;
        for (int i = 0; i < t->n; i++) q += t->seq[i] == s;
        double sum_c = 0, sum_g = 0;
        for (int j = 0; j < MAXB; j++) {
            sum_c += g_mass_cpu[s][j];
            sum_g += g_mass_cuda[s][j];
            if (fabs((double)g_mass_cpu[s][j] - (double)g_mass_cuda[s][j]) > 1e-4) {
                fprintf(stderr, "%s: seq %d block %d mass cpu %g cuda %g\n", what, s, j,
                        (double)g_mass_cpu[s][j], (double)g_mass_cuda[s][j]);
                return 1;
            }
        }
        /* each query token adds 1 in total */
        if (fabs(sum_g - q) > 1e-3 * (q ? q : 1) || fabs(sum_c - q) > 1e-3 * (q ? q : 1)) {
            fprintf(stderr, "%s: seq %d mass sums cpu %g cuda %g, want %d\n", what, s, sum_c, sum_g, q);
            return 1;
        }
    }
    return 0;
}

/* The first batch: prefill chunks of three sequences (one with logits for
 * every token), 60 tokens crossing block boundaries. */
static void first_batch(tbatch *t) {
    tb_init(t);
    for (int p = 0; p < 20; p++) tb_add(t, 0, p, p ? rnd_token() : 1, p == 19);
    for (int p = 0; p < 7; p++) tb_add(t, 1, p, p ? rnd_token() : 1, 1);
    for (int p = 0; p < 33; p++) tb_add(t, 2, p, p ? rnd_token() : 1, p == 32);
}

/* ------------------------------------------------------------ the tests */

static void test_batches(void) {
    tbatch t;
    first_batch(&t);
    CK_CHECK(compare_step(&t, g_cuda, TOL_F32, 1, "prefill mix") == 0);

    /* decode: one token per sequence, in an order that is not seq order */
    tb_init(&t);
    tb_add(&t, 2, 33, rnd_token(), 1);
    tb_add(&t, 0, 20, rnd_token(), 1);
    tb_add(&t, 1, 7, rnd_token(), 1);
    CK_CHECK(compare_step(&t, g_cuda, TOL_F32, 1, "decode") == 0);

    /* skipping: sequence 2 loses logical block 1; sequence 0's view is
     * just long enough */
    tb_init(&t);
    t.none_seq = 2;
    t.none_blk = 1;
    t.n_blocks[0] = 2;
    tb_add(&t, 0, 21, rnd_token(), 1);
    tb_add(&t, 2, 34, rnd_token(), 1);
    CK_CHECK(compare_step(&t, g_cuda, TOL_F32, 1, "KV_NONE block") == 0);

    /* a second prefill chunk (positions 8..40 of sequence 1) with a decode
     * token of sequence 0 in the middle */
    tb_init(&t);
    for (int p = 8; p < 41; p++) {
        tb_add(&t, 1, p, rnd_token(), p == 40);
        if (p == 20) tb_add(&t, 0, 22, rnd_token(), 1);
    }
    CK_CHECK(compare_step(&t, g_cuda, TOL_F32, 1, "second chunk") == 0);
    CK_CHECK(g_cuda->ops->memory_bytes(g_cuda) > 0);
}

static void test_greedy(void) {
    int32_t toks[2][65];
    backend *bk[2] = {g_cpu, g_cuda};
    for (int k = 0; k < 2; k++) {
        int tok = 1;
        for (int p = 0; p < 65; p++) {
            tbatch t;
            tb_init(&t);
            tb_add(&t, 3, p, tok, 1);
            float *lg = k ? g_lg : g_lc;
            int rc = tb_run(&t, bk[k], lg, k ? g_mass_cuda : g_mass_cpu);
            CK_CHECK_MSG(rc == 0, "%s forward at %d: %d", bk[k]->ops->name, p, rc);
            tok = samp_argmax(lg, g_m->cfg.vocab_size);
            toks[k][p] = tok;
        }
    }
    for (int p = 0; p < 64; p++)
        CK_CHECK_MSG(toks[0][p] == toks[1][p], "greedy token %d: cpu %d, cuda %d", p, toks[0][p], toks[1][p]);
    fprintf(stderr, "greedy: 64 tokens identical\n");
}

/* (On a failed check this test returns early and leaks its buffers.) */
static void test_kv_blocks(void) {
    const size_t n = g_cuda->kv_block_floats;
    const kvq_shape sh = {g_m->cfg.n_layers, BS, g_m->cfg.n_kv_heads * g_m->cfg.head_dim};
    const size_t qb = kvq_block_bytes(&sh);
    const be_ops *op = g_cuda->ops;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    unsigned char *q_ref = malloc(qb), *q_dev = NULL;
    CK_CHECK(a && b && c && q_ref && be_cuda_host_alloc(qb, (void **)&q_dev) == 0);
    /* block 0 of sequence 0 is full (positions 0..15 written by test_batches) */
    CK_CHECK(g_cpu->ops->kv_read(g_cpu, g_tables[0][0], a) == 0);
    CK_CHECK(op->kv_read(g_cuda, g_tables[0][0], b) == 0);
    CK_CHECK_MSG(norm_err(b, a, n) <= TOL_F32, "KV block error %g", norm_err(b, a, n));
    /* write a pattern into an unused block, read it back exactly */
    const int spare = NSEQ * MAXB - 1;
    for (size_t i = 0; i < n; i++) c[i] = (float)((int)(i % 97) - 48) * 0.125f;
    CK_CHECK(op->kv_write(g_cuda, spare, c) == 0);
    CK_CHECK(op->kv_read(g_cuda, spare, a) == 0);
    CK_CHECK(memcmp(a, c, n * sizeof *a) == 0);
    /* int8: the device's bytes are kvq_quantize's, full block and partial */
    CK_CHECK(op->kv_compress && op->kv_expand && op->kv8_read && op->kv8_write);
    CK_CHECK(g_cuda->kv8_block_bytes == qb);
    for (int nt = BS; nt >= 5; nt -= BS - 5) {
        kvq_quantize(&sh, b, nt, q_ref);
        memset(q_dev, 0xAB, qb);
        CK_CHECK(op->kv_compress(g_cuda, g_tables[0][0], nt, 0) == 0);
        CK_CHECK(op->kv8_read(g_cuda, 0, q_dev) == 0);
        size_t diff = 0;
        for (size_t i = 0; i < qb; i++) diff += q_ref[i] != q_dev[i];
        CK_CHECK_MSG(diff == 0, "int8 block (%d tokens): %zu of %zu bytes differ", nt, diff, qb);
    }
    /* and back: the device's expansion is kvq_dequantize's */
    kvq_dequantize(&sh, q_ref, c);
    CK_CHECK(op->kv8_write(g_cuda, 1, q_ref) == 0);
    CK_CHECK(op->kv_expand(g_cuda, 1, spare) == 0);
    CK_CHECK(op->kv_read(g_cuda, spare, a) == 0);
    CK_CHECK(memcmp(a, c, n * sizeof *a) == 0);
    CK_CHECK(op->kv_compress(g_cuda, 0, BS + 1, 0) == CK_EINVAL);
    CK_CHECK(op->kv_compress(g_cuda, 0, BS, N_KV8) == CK_EINVAL);
    CK_CHECK(op->kv_expand(g_cuda, -1, 0) == CK_EINVAL);
    CK_CHECK(op->kv8_read(g_cuda, N_KV8, q_dev) == CK_EINVAL);
    CK_CHECK(op->kv_read(g_cuda, NSEQ * MAXB, a) == CK_EINVAL);
    free(a);
    free(b);
    free(c);
    free(q_ref);
    be_cuda_host_free(q_dev);
}

/* Attention over an int8 hot block: sequence 0's first block compressed
 * on the device, the same bytes written into the CPU's int8 pool, then a
 * decode step that sees logical block 0 only in int8 form. */
static void test_int8_attention(void) {
    unsigned char *q = malloc(g_cuda->kv8_block_bytes);
    CK_CHECK(q && g_cpu->kv8_block_bytes == g_cuda->kv8_block_bytes);
    CK_CHECK(g_cuda->ops->kv_compress(g_cuda, g_tables[0][0], BS, 2) == 0);
    CK_CHECK(g_cuda->ops->kv8_read(g_cuda, 2, q) == 0);
    CK_CHECK(g_cpu->ops->kv8_write(g_cpu, 2, q) == 0);
    free(q);
    tbatch t;
    tb_init(&t);
    t.none_seq = 0;
    t.none_blk = 0;
    t.b8 = 2;
    tb_add(&t, 0, 23, rnd_token(), 1);
    tb_add(&t, 2, 35, rnd_token(), 1);
    CK_CHECK(compare_step(&t, g_cuda, TOL_F32, 1, "int8 block") == 0);
    /* an int8 entry past the pool is refused */
    t.b8 = N_KV8;
    CK_CHECK(tb_run(&t, g_cuda, g_lg, g_mass_cuda) == CK_EINVAL);
}

static void test_confidence(void) {
    tbatch t;
    first_batch(&t); /* new tokens: from here on the two backends' KV differ */
    memset(g_mass_cuda, 0, sizeof g_mass_cuda);
    CK_CHECK(tb_run(&t, g_cuda, g_lg, g_mass_cuda) == 0);
    be_cuda_conf dc[TMAX];
    CK_CHECK(be_cuda_confidence(g_cuda, t.n_out, dc) == 0);
    CK_CHECK(be_cuda_confidence(g_cuda, t.n_out + 1, dc) == CK_EINVAL);
    const int V = g_m->cfg.vocab_size;
    for (int r = 0; r < t.n_out; r++) {
        samp_conf hc;
        int amax = -1;
        CK_CHECK(samp_confidence(g_lg + (size_t)r * V, V, &hc, &amax) == 0);
        CK_CHECK_MSG(dc[r].argmax == amax, "row %d argmax %d vs %d", r, dc[r].argmax, amax);
        CK_CHECK_NEAR(dc[r].entropy, hc.entropy, 1e-4 * (1 + hc.entropy));
        CK_CHECK_NEAR(dc[r].pmax, hc.pmax, 1e-5);
        CK_CHECK_NEAR(dc[r].gap, hc.gap, 1e-5);
    }
}

static void test_f16_weights(void) {
    char err[256];
    backend *c16 = NULL, *cpu = NULL;
    be_options o = test_options();
    setenv("CONFKV_CUDA_WEIGHTS", "f16", 1);
    int rc = be_cuda_new(g_m, &o, &c16, err, sizeof err);
    unsetenv("CONFKV_CUDA_WEIGHTS");
    CK_CHECK_MSG(rc == 0, "%s", err);
    rc = be_cpu_new(g_m, &o, &cpu, err, sizeof err);
    if (rc) {
        be_free(c16);
        CK_CHECK_MSG(rc == 0, "%s", err);
    }
    /* compare_step runs on g_cpu: swap in a fresh CPU backend with empty KV */
    backend *keep = g_cpu;
    g_cpu = cpu;
    tbatch t;
    first_batch(&t);
    int bad = compare_step(&t, c16, TOL_F16, 0, "f16 weights");
    g_cpu = keep;
    fprintf(stderr, "f16 weights: %zu device bytes (f32: %zu)\n", c16->ops->memory_bytes(c16),
            g_cuda->ops->memory_bytes(g_cuda));
    be_free(c16);
    be_free(cpu);
    CK_CHECK(!bad);
}

static void test_bad_batches(void) {
    tbatch t;
    tb_init(&t);
    tb_add(&t, 0, 0, g_m->cfg.vocab_size, 1); /* token out of range */
    CK_CHECK(tb_run(&t, g_cuda, g_lg, g_mass_cuda) == CK_EINVAL);
    tb_init(&t);
    t.none_seq = 0;
    t.none_blk = 0;
    tb_add(&t, 0, 3, 5, 1); /* own block not hot */
    CK_CHECK(tb_run(&t, g_cuda, g_lg, g_mass_cuda) == CK_EINVAL);
    tb_init(&t);
    tb_add(&t, 0, 3, 5, 1);
    tb_add(&t, 1, 3, 5, 1);
    t.out_row[1] = 0; /* two tokens for one row */
    CK_CHECK(tb_run(&t, g_cuda, g_lg, g_mass_cuda) == CK_EINVAL);
    tb_init(&t);
    tb_add(&t, 0, 512, 5, 1); /* past the context */
    CK_CHECK(tb_run(&t, g_cuda, g_lg, g_mass_cuda) == CK_EINVAL);
    tb_init(&t);
    t.n_blocks[0] = 0;
    tb_add(&t, 0, 0, 5, 1); /* empty table */
    CK_CHECK(tb_run(&t, g_cuda, g_lg, g_mass_cuda) == CK_EINVAL);
}

int main(void) {
    if (!be_cuda_available()) {
        printf("skipped: no GPU\n");
        return 77;
    }
    char err[256];
    int rc = model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &g_m, err,
                        sizeof err);
    if (rc) {
        fprintf(stderr, "model_load: %s\n", err);
        return 1;
    }
    be_options o = test_options();
    if ((rc = be_cpu_new(g_m, &o, &g_cpu, err, sizeof err)) ||
        (rc = be_cuda_new(g_m, &o, &g_cuda, err, sizeof err))) {
        fprintf(stderr, "backend: %s (%s)\n", err, ck_errname(rc));
        be_free(g_cpu);
        model_free(g_m);
        return 1;
    }
    for (int s = 0; s < NSEQ; s++)
        for (int j = 0; j < MAXB; j++) g_tables[s][j] = s * MAXB + j;
    g_lc = calloc((size_t)TMAX * g_m->cfg.vocab_size, sizeof *g_lc);
    g_lg = calloc((size_t)TMAX * g_m->cfg.vocab_size, sizeof *g_lg);
    if (!g_lc || !g_lg) return 1;

    CK_RUN(test_batches);
    CK_RUN(test_greedy);
    CK_RUN(test_kv_blocks);
    CK_RUN(test_int8_attention);
    CK_RUN(test_confidence);
    CK_RUN(test_f16_weights);
    CK_RUN(test_bad_batches);

    free(g_lc);
    free(g_lg);
    be_free(g_cuda);
    be_free(g_cpu);
    model_free(g_m);
    return ck_test_summary();
}
