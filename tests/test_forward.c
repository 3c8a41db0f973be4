/* test_forward.c - the CPU forward pass: batching and chunked prefill give
 * the same logits as running one token at a time (a dense model, and a
 * qwen3moe one, whose batches group the tokens by expert); converted f16 /
 * q8_0 weights stay within a stated bound of f32. */
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "kv.h"
#include "model.h"
#include "quant.h"

static model *load(void) {
    char err[256];
    model *m = NULL;
    if (model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                   sizeof err))
        fprintf(stderr, "%s\n", err);
    return m;
}

/* max |a - b| / max |b|: the error normalised by the logits' scale. */
static double norm_err(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return s > 0 ? d / s : d;
}

enum { NSEQ = 3, MAXLEN = 48 };
static const int lens[NSEQ] = {5, 23, 41};

/* Logits of every position of every sequence, one token per forward call. */
static int run_single(const model *m, float *ref) {
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = 1, .n_kv_blocks = 64, .block_size = 16, .n_threads = 1};
    if (be_cpu_new(m, &o, &b, err, sizeof err)) return -1;
    kv_pool pool;
    kv_pool_init(&pool, 64, 16);
    int V = m->cfg.vocab_size;
    for (int s = 0; s < NSEQ; s++) {
        kv_seq q;
        kv_seq_init(&q, s, m->cfg.seq_len, 16);
        for (int p = 0; p < lens[s]; p++) {
            int32_t tok = (int32_t)((7 * s + 13 * p + 1) % V), pos = p, six = 0, row = 0;
            if (kv_seq_reserve(&q, &pool, 1)) return -1;
            be_seq_view v = {.blocks = q.hot, .n_blocks = q.n_blocks};
            be_batch bt = {1, &tok, &pos, &six, &row, 1, &v, 1};
            if (b->ops->forward(b, &bt, ref + ((size_t)s * MAXLEN + p) * V)) return -1;
            kv_seq_commit(&q, 1);
        }
        kv_seq_reset(&q, &pool);
        kv_seq_free(&q);
    }
    kv_pool_free(&pool);
    be_free(b);
    return 0;
}

/* Logits of a fixed 40-token sequence (all positions) under model m. */
static int seq_logits(const model *m, float *out) {
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = 40, .n_kv_blocks = 8, .block_size = 16, .n_threads = 2};
    if (be_cpu_new(m, &o, &b, err, sizeof err)) return -1;
    int32_t tok[40], pos[40], six[40] = {0}, row[40];
    int32_t blocks[3] = {0, 1, 2};
    for (int i = 0; i < 40; i++) {
        tok[i] = (int32_t)((31 * i + 5) % m->cfg.vocab_size);
        pos[i] = i;
        row[i] = i;
    }
    be_seq_view v = {.blocks = blocks, .n_blocks = 3};
    be_batch bt = {40, tok, pos, six, row, 1, &v, 40};
    int rc = b->ops->forward(b, &bt, out);
    be_free(b);
    return rc;
}

/* m's logits in batches (three sequences in chunks, split by token across
 * two threads) within bound of one token a call. */
static void batch_equals_single(const model *m, double bound) {
    int V = m->cfg.vocab_size;
    float *ref = calloc((size_t)NSEQ * MAXLEN * V, sizeof(float));
    float *got = calloc((size_t)NSEQ * MAXLEN * V, sizeof(float));
    CK_CHECK(ref && got);
    CK_CHECK(run_single(m, ref) == 0);

    /* All three sequences at once, in chunks of up to 7 tokens each per step
     * (the first sequence one token a step, as a decode beside prefills: a
     * lone token among the tiled runs, cpu_attn_chunk.c): the chunks
     * interleave prefill of long sequences with the short one's. */
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = 32, .n_kv_blocks = 64, .block_size = 16, .n_threads = 2};
    CK_CHECK(be_cpu_new(m, &o, &b, err, sizeof err) == 0);
    kv_pool pool;
    kv_pool_init(&pool, 64, 16);
    kv_seq q[NSEQ];
    for (int s = 0; s < NSEQ; s++) kv_seq_init(&q[s], s, m->cfg.seq_len, 16);
    int done[NSEQ] = {0};
    float *logits = malloc((size_t)32 * V * sizeof(float));
    for (int round = 0; round < 20; round++) {
        int32_t tok[32], pos[32], six[32], row[32], where[32];
        int n = 0;
        be_seq_view v[NSEQ];
        int chunk[NSEQ] = {0};
        for (int s = 0; s < NSEQ; s++) {
            const int most = s == 0 ? 1 : 7;
            int c = lens[s] - done[s] < most ? lens[s] - done[s] : most;
            CK_CHECK(kv_seq_reserve(&q[s], &pool, c) == 0);
            chunk[s] = c;
            for (int i = 0; i < c; i++) {
                int p = done[s] + i;
                tok[n] = (int32_t)((7 * s + 13 * p + 1) % V);
                pos[n] = p;
                six[n] = s;
                row[n] = n;
                where[n] = s * MAXLEN + p;
                n++;
            }
            v[s] = (be_seq_view){.blocks = q[s].hot, .n_blocks = q[s].n_blocks};
        }
        if (!n) break;
        be_batch bt = {n, tok, pos, six, row, NSEQ, v, n};
        CK_CHECK(b->ops->forward(b, &bt, logits) == 0);
        for (int i = 0; i < n; i++)
            memcpy(got + (size_t)where[i] * V, logits + (size_t)i * V, (size_t)V * sizeof(float));
        for (int s = 0; s < NSEQ; s++) {
            kv_seq_commit(&q[s], chunk[s]);
            done[s] += chunk[s];
        }
    }
    for (int s = 0; s < NSEQ; s++)
        for (int p = 0; p < lens[s]; p++) {
            size_t off = ((size_t)s * MAXLEN + p) * V;
            double e = norm_err(got + off, ref + off, (size_t)V);
            CK_CHECK_MSG(e <= bound, "seq %d pos %d: normalised error %g", s, p, e);
        }
    for (int s = 0; s < NSEQ; s++) {
        kv_seq_reset(&q[s], &pool);
        kv_seq_free(&q[s]);
    }
    CK_CHECK(kv_pool_used(&pool) == 0);
    kv_pool_free(&pool);
    be_free(b);
    free(logits);
    free(ref);
    free(got);
}

static void test_batch_equals_single(void) {
    model *m = load();
    CK_CHECK(m);
    if (m) batch_equals_single(m, 1e-5);
    model_free(m);
}

/* A qwen3moe model of shape sp: a batch's tokens grouped by expert give
 * what each alone gives, f32 and re-typed to q8_0; a re-type to f32
 * (convert_write_gguf's expert tensors) gives the same logits. */
static void moe_batch_equals_single(const synth_params *sp) {
    char dir[] = "/tmp/confkv-fwd-moe-XXXXXX", path[256], path2[256], err[256];
    CK_CHECK(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/moe.gguf", dir);
    model *m = NULL, *g = NULL;
    CK_CHECK_MSG(convert_synth(sp, path, err, sizeof err) == 0, "%s", err);
    CK_CHECK_MSG(model_load(path, NULL, &m, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    batch_equals_single(m, 1e-5);
    const int V = m->cfg.vocab_size;
    float *ref = malloc((size_t)40 * V * sizeof(float)), *got = malloc((size_t)40 * V * sizeof(float));
    CK_CHECK(ref && got && seq_logits(m, ref) == 0);
    const int types[2] = {QUANT_F32, QUANT_Q8_0};
    for (int i = 0; i < 2; i++) {
        snprintf(path2, sizeof path2, "%s/moe-%s.gguf", dir, quant_type_name(types[i]));
        CK_CHECK_MSG(convert_write_gguf(m, types[i], path2, err, sizeof err) == 0, "%s", err);
        CK_CHECK_MSG(model_load(path2, NULL, &g, err, sizeof err) == 0, "%s", err);
        if (!g) continue;
        CK_CHECK(g->cfg.n_expert == sp->n_expert && g->cfg.n_expert_used == sp->n_expert_used &&
                 g->cfg.expert_ffn == sp->expert_ffn && g->layers[0].gate_exps.type == types[i] &&
                 g->layers[0].router.type == QUANT_F32);
        if (types[i] == QUANT_F32) {
            CK_CHECK(seq_logits(g, got) == 0);
            CK_CHECK_MSG(norm_err(got, ref, (size_t)40 * V) == 0, "re-typed f32 differs");
        } else {
            batch_equals_single(g, 1e-5);
        }
        model_free(g);
        g = NULL;
        unlink(path2);
    }
    free(ref);
    free(got);
    model_free(m);
    unlink(path);
    rmdir(dir);
}

/* A gpt-oss model (sinks, a window of 12 on layers 0 and 2, biases, 8
 * experts, 2 a token by top logits, the clamped SwiGLU): batches of
 * several sequences, the window crossing blocks of 16, give what each
 * token alone gives, f32 and re-typed as MXFP4 (llama.cpp's MXFP4_MOE mix:
 * experts MXFP4, the other matrices q8_0); a re-type to f32 (every gpt-oss
 * tensor through convert_write_gguf) gives the same logits. */
static void test_gpt_oss_batch_equals_single(void) {
    char dir[] = "/tmp/confkv-fwd-oss-XXXXXX", path[256], path2[256], err[256];
    CK_CHECK(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/oss.gguf", dir);
    synth_params sp = {.dim = 64,
                       .n_layers = 3,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 128,
                       .vocab_size = 512,
                       .ctx = 128,
                       .type = QUANT_F32,
                       .seed = 5,
                       .arch = ARCH_GPT_OSS,
                       .head_dim = 32,
                       .n_expert = 8,
                       .n_expert_used = 2,
                       .expert_ffn = 64,
                       .n_swa = 12};
    model *m = NULL, *g = NULL;
    CK_CHECK_MSG(convert_synth(&sp, path, err, sizeof err) == 0, "%s", err);
    CK_CHECK_MSG(model_load(path, NULL, &m, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    batch_equals_single(m, 1e-5);
    const int V = m->cfg.vocab_size;
    float *ref = malloc((size_t)40 * V * sizeof(float)), *got = malloc((size_t)40 * V * sizeof(float));
    CK_CHECK(ref && got && seq_logits(m, ref) == 0);
    const int types[2] = {QUANT_F32, QUANT_MXFP4};
    for (int i = 0; i < 2; i++) {
        snprintf(path2, sizeof path2, "%s/oss-%s.gguf", dir, quant_type_name(types[i]));
        CK_CHECK_MSG(convert_write_gguf(m, types[i], path2, err, sizeof err) == 0, "%s", err);
        CK_CHECK_MSG(model_load(path2, NULL, &g, err, sizeof err) == 0, "%s", err);
        if (!g) continue;
        CK_CHECK(g->cfg.n_swa == 12 && g->cfg.swa_period == 2 && g->layers[0].gate_exps.type == types[i] &&
                 g->layers[0].wq.type == (types[i] == QUANT_MXFP4 ? QUANT_Q8_0 : QUANT_F32) &&
                 g->layers[0].router.type == QUANT_F32 && g->layers[1].sinks.n == 4);
        if (types[i] == QUANT_F32) {
            CK_CHECK(seq_logits(g, got) == 0);
            CK_CHECK_MSG(norm_err(got, ref, (size_t)40 * V) == 0, "re-typed f32 differs");
        } else {
            batch_equals_single(g, 1e-5);
        }
        model_free(g);
        g = NULL;
        unlink(path2);
    }
    free(ref);
    free(got);
    model_free(m);
    unlink(path);
    rmdir(dir);
}

/* gpt-oss's window and sinks over int8 KV blocks (the general code, a
 * window starting inside an int8 block) against the same KV expanded back
 * to f32 (the vector kernels): the token at position 40 of a window of 12
 * sees 29..40, rows 13..15 of block 1 and 0..8 of block 2; layer 1, not
 * windowed, all 41. */
static void test_gpt_oss_int8_window(void) {
    char dir[] = "/tmp/confkv-fwd-oss8-XXXXXX", path[256], err[256];
    CK_CHECK(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/oss.gguf", dir);
    synth_params sp = {.dim = 64,
                       .n_layers = 3,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 128,
                       .vocab_size = 512,
                       .ctx = 128,
                       .type = QUANT_F32,
                       .seed = 9,
                       .arch = ARCH_GPT_OSS,
                       .head_dim = 32,
                       .n_expert = 8,
                       .n_expert_used = 2,
                       .expert_ffn = 64,
                       .n_swa = 12};
    model *m = NULL;
    backend *b = NULL;
    CK_CHECK_MSG(convert_synth(&sp, path, err, sizeof err) == 0, "%s", err);
    CK_CHECK_MSG(model_load(path, NULL, &m, err, sizeof err) == 0, "%s", err);
    be_options o = {
        .max_batch_tokens = 40, .n_kv_blocks = 8, .block_size = 16, .n_threads = 1, .n_kv8_blocks = 2};
    if (m) CK_CHECK_MSG(be_cpu_new(m, &o, &b, err, sizeof err) == 0, "%s", err);
    if (b) {
        const int V = m->cfg.vocab_size;
        float *logits = malloc((size_t)40 * V * sizeof(float)), *a = malloc((size_t)V * sizeof(float)),
              *c = malloc((size_t)V * sizeof(float));
        int32_t tok[40], pos[40], six[40] = {0}, row[40], blocks[3] = {0, 1, 2};
        for (int i = 0; i < 40; i++) tok[i] = (int32_t)((31 * i + 5) % V), pos[i] = row[i] = i;
        be_seq_view v = {.blocks = blocks, .n_blocks = 3};
        be_batch bt = {40, tok, pos, six, row, 1, &v, 40};
        CK_CHECK(logits && a && c && b->ops->forward(b, &bt, logits) == 0);
        /* blocks 0 and 1 to int8 (0, 1), and back to f32 blocks 3 and 4 */
        CK_CHECK(b->ops->kv_compress(b, 0, 16, 0) == 0 && b->ops->kv_compress(b, 1, 16, 1) == 0 &&
                 b->ops->kv_expand(b, 0, 3) == 0 && b->ops->kv_expand(b, 1, 4) == 0);
        int32_t t40 = 7, p40 = 40, s40 = 0, r40 = 0;
        int32_t hot8[3] = {KV_NONE, KV_NONE, 2}, b8[3] = {0, 1, KV_NONE}, hot32[3] = {3, 4, 2};
        be_seq_view v8 = {.blocks = hot8, .blocks8 = b8, .n_blocks = 3},
                    v32 = {.blocks = hot32, .n_blocks = 3};
        be_batch one = {1, &t40, &p40, &s40, &r40, 1, &v8, 1};
        CK_CHECK(b->ops->forward(b, &one, a) == 0);
        one.seqs = &v32;
        CK_CHECK(b->ops->forward(b, &one, c) == 0);
        double e = norm_err(a, c, (size_t)V);
        fprintf(stderr, "  int8 blocks vs the same expanded to f32: normalised error %.3g\n", e);
        CK_CHECK_MSG(e <= 1e-5, "int8 window/sinks path differs: %g", e);
        free(logits);
        free(a);
        free(c);
    }
    be_free(b);
    model_free(m);
    unlink(path);
    rmdir(dir);
}

/* 8 experts, 2 a token: small enough that every batch runs on one thread
 * (split by token in batch_equals_single). */
static void test_moe_batch_equals_single(void) {
    const synth_params sp = {.dim = 64,
                             .n_layers = 2,
                             .n_heads = 4,
                             .n_kv_heads = 2,
                             .hidden_dim = 128,
                             .vocab_size = 512,
                             .ctx = 128,
                             .type = QUANT_F32,
                             .seed = 5,
                             .arch = ARCH_QWEN3MOE,
                             .n_expert = 8,
                             .n_expert_used = 2,
                             .expert_ffn = 64};
    moe_batch_equals_single(&sp);
}

/* 16 experts, 4 a token, at a size whose batches (from 6 tokens) share the
 * experts out on the team, f32 and q8_0 (x8 rows) alike, not split by
 * token (cpu_layer_moe.c; backend_cpu.c's token_split). */
static void test_moe_team_batch_equals_single(void) {
    const synth_params sp = {.dim = 256,
                             .n_layers = 2,
                             .n_heads = 4,
                             .n_kv_heads = 2,
                             .hidden_dim = 512,
                             .vocab_size = 512,
                             .ctx = 128,
                             .type = QUANT_F32,
                             .seed = 6,
                             .arch = ARCH_QWEN3MOE,
                             .n_expert = 16,
                             .n_expert_used = 4,
                             .expert_ffn = 512};
    moe_batch_equals_single(&sp);
}

/* Bad batches are refused, not run. */
static void test_bad_batch(void) {
    model *m = load();
    CK_CHECK(m);
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = 4, .n_kv_blocks = 4, .block_size = 16, .n_threads = 1};
    CK_CHECK(be_cpu_new(m, &o, &b, err, sizeof err) == 0);
    int32_t blocks[2] = {0, KV_NONE};
    be_seq_view v = {.blocks = blocks, .n_blocks = 2};
    float logits[512];
    int32_t tok = 1, pos = 0, six = 0, row = 0;
    be_batch ok = {1, &tok, &pos, &six, &row, 1, &v, 1};
    CK_CHECK(b->ops->forward(b, &ok, logits) == 0);
    int32_t badtok = 512;
    be_batch bt = ok;
    bt.token = &badtok;
    CK_CHECK(b->ops->forward(b, &bt, logits) == CK_EINVAL);
    int32_t badpos = 16; /* block 1 is not hot */
    bt = ok;
    bt.pos = &badpos;
    CK_CHECK(b->ops->forward(b, &bt, logits) == CK_EINVAL);
    bt = ok;
    bt.n_tokens = 5;
    CK_CHECK(b->ops->forward(b, &bt, logits) == CK_EINVAL);
    be_free(b);
    model_free(m);
}

/* Stated bounds (normalised max error of the logits over 40 positions):
 * f16 <= 5e-3, bf16 <= 3e-2, q8_0 <= 3e-2. */
static void test_types_against_f32(void) {
    model *m = load();
    CK_CHECK(m);
    int V = m->cfg.vocab_size;
    float *ref = malloc((size_t)40 * V * sizeof(float)), *got = malloc((size_t)40 * V * sizeof(float));
    CK_CHECK(seq_logits(m, ref) == 0);
    char dir[] = "/tmp/confkv-fwd-XXXXXX";
    CK_CHECK(mkdtemp(dir));
    struct {
        int type;
        double bound;
    } t[] = {{QUANT_F32, 1e-6}, {QUANT_F16, 5e-3}, {QUANT_BF16, 3e-2}, {QUANT_Q8_0, 3e-2}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char path[256], err[256];
        snprintf(path, sizeof path, "%s/m-%s.gguf", dir, quant_type_name(t[i].type));
        CK_CHECK_MSG(convert_write_gguf(m, t[i].type, path, err, sizeof err) == 0, "%s", err);
        model *g = NULL;
        CK_CHECK_MSG(model_load(path, NULL, &g, err, sizeof err) == 0, "%s", err);
        CK_CHECK(seq_logits(g, got) == 0);
        double e = norm_err(got, ref, (size_t)40 * V);
        fprintf(stderr, "  %-5s normalised logits error %.3g (bound %g)\n", quant_type_name(t[i].type), e,
                t[i].bound);
        CK_CHECK_MSG(e <= t[i].bound, "%s error %g > %g", quant_type_name(t[i].type), e, t[i].bound);
        model_free(g);
        unlink(path);
    }
    rmdir(dir);
    free(ref);
    free(got);
    model_free(m);
}

int main(void) {
    CK_RUN(test_batch_equals_single);
    CK_RUN(test_moe_batch_equals_single);
    CK_RUN(test_gpt_oss_batch_equals_single);
    CK_RUN(test_gpt_oss_int8_window);
    CK_RUN(test_moe_team_batch_equals_single);
    CK_RUN(test_bad_batch);
    CK_RUN(test_types_against_f32);
    return ck_test_summary();
}
