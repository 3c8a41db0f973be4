/* backend_cpu.c - the CPU backend: the reference forward pass (backend.h).
 *
 * Llama as llama2.c's run.c computes it (RMSNorm, RoPE on adjacent pairs,
 * grouped-query attention, SwiGLU), plus what arch.h's other rows add (q/k/v
 * biases, qwen3's q/k head norms, NEOX RoPE, RoPE frequencies with
 * rope_freqs and linear/YaRN scaling folded in at creation, qwen3moe's
 * mixture of experts, gpt-oss's sinks, sliding window, biases and
 * biased experts), but over a
 * batch of many tokens from many sequences, so every projection is one
 * matrix-matrix product, and over the paged KV cache, so attention walks
 * each sequence's block table.
 *
 * This file is the step: the embedding, then for each layer the layer kinds
 * the architecture table lists (cpu_layer.h: attention, the dense
 * feed-forward or the mixture of experts), then the final norm and the classifier; and the KV block
 * copies. The kinds, the products and the construction are files of their
 * own (cpu_backend.h says which).
 *
 * Kernels are chosen at creation from the CPU's features (cpu_features.h;
 * CONFKV_CPU_KERNELS forces a level): the f32 panels, the attention and the
 * quantized dots each come in C, AVX2 and AVX-512 builds.
 *
 * Threads: the products (the weight rows or panels between threads, by
 * work stealing) and a lone token's attention heads run on the backend's
 * own team (cpu_team.h: waits that spin as long as they usually last, then
 * sleep); batched decode splits the batch by sequence instead
 * (token_split) and a batch's attention by token, in OpenMP regions. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "cpu_layer.h"

const cpu_layer_kind *cpu_layer_for(int block) {
    switch (block) {
    case ARCH_BLOCK_ATTN: return &cpu_layer_attn;
    case ARCH_BLOCK_FFN: return &cpu_layer_ffn;
    case ARCH_BLOCK_MOE: return &cpu_layer_moe;
    case ARCH_BLOCK_SHORTCONV: return &cpu_layer_shortconv;
    case ARCH_BLOCK_MAMBA2: return &cpu_layer_mamba2;
    default: return NULL;
    }
}

static int cpu_check_batch(cpu_backend *cb, const be_batch *bt) {
    const backend *b = &cb->base;
    if (bt->n_tokens < 0 || bt->n_tokens > b->opt.max_batch_tokens) return CK_EINVAL;
    if (bt->n_out < 0 || bt->n_out > b->opt.max_batch_tokens) return CK_EINVAL;
    if (bt->n_seqs < 0 || bt->n_seqs > b->opt.max_batch_tokens) return CK_EINVAL;
    int n_out = 0;
    for (int i = 0; i < bt->n_tokens; i++) {
        if (bt->token[i] < 0 || bt->token[i] >= b->m->cfg.vocab_size) return CK_EINVAL;
        if (bt->pos[i] < 0 || bt->pos[i] >= cb->max_ctx) return CK_EINVAL;
        if (bt->seq[i] < 0 || bt->seq[i] >= bt->n_seqs) return CK_EINVAL;
        if (bt->out_row[i] >= bt->n_out) return CK_EINVAL;
        n_out += bt->out_row[i] >= 0;
        const be_seq_view *v = &bt->seqs[bt->seq[i]];
        int j = bt->pos[i] / b->opt.block_size;
        if (j >= v->n_blocks || v->blocks[j] < 0 || v->blocks[j] >= b->opt.n_kv_blocks) return CK_EINVAL;
        if (v->blocks8) /* int8 blocks must exist; the forward only reads them */
            for (int k = 0; k < v->n_blocks; k++)
                if (v->blocks8[k] >= b->opt.n_kv8_blocks) return CK_EINVAL;
    }
    /* rows 0..n_out-1, each once (a duplicate would leave a row unwritten) */
    return n_out != bt->n_out ? CK_EINVAL : cpu_shortconv_check(cb, bt);
}

/* One layer for tokens [i0, i1) of the batch: its kinds in order. */
static void layer_forward(cpu_backend *cb, const be_batch *bt, int l, int i0, int i1, int threads, int slot,
                          float mass_scale) {
    const cpu_span s = {bt, l, i0, i1, threads, slot, mass_scale};
    for (int k = 0; cb->kinds[k]; k++) cb->kinds[k]->forward(cb, &s);
}

/* Batched decode splits the batch by tokens rather than the weights by rows:
 * each thread runs every layer for its own sequences, so a step waits for its
 * threads twice (after the layers, after the classifier) instead of at every
 * product and every attention, 5 times a layer (31 a step at 6 layers). On
 * a loaded machine a thread that loses its core holds up every one of those
 * waits. The price is that every thread streams all the weights, which at
 * TOKEN_SPLIT_MIN tokens a thread the arithmetic still pays for; weights
 * that fit in the caches (TOKEN_SPLIT_CACHED_BYTES) cost nothing to read
 * twice, and then two tokens a thread are worth splitting (stories260K's
 * full-KV batches of 7: 1.4x the tokens/s of one thread).
 * A sequence's tokens must stay on one thread (a token attends to the K and V
 * that earlier tokens of its sequence write in the same layer), so the cuts
 * fall only between sequences. Fills cut[0..parts] and returns parts, or 0
 * when the batch is better split by rows (too small, too big, or no cut).
 * Never for a mixture of experts that the caches do not hold: each part's
 * tokens choose most of the experts (16 tokens of 8 among 128: 82 of
 * them), so the parts would read the experts' weights 1.5 times over,
 * where the experts shared out on the team (cpu_layer_moe.c) read them
 * once. Measured on a Qwen3-30B-A3B shape at batch 32 on two threads (AMD
 * EPYC Zen 4, a loaded host): 116-125 tokens/s split, 162-171 not. */
#define TOKEN_SPLIT_MIN 8
#define TOKEN_SPLIT_CACHED_BYTES ((size_t)8 << 20)
static int token_split(const cpu_backend *cb, const be_batch *bt, int *cut) {
    const int T = bt->n_tokens, nt = cb->n_threads;
    const int min = cb->layer_bytes <= TOKEN_SPLIT_CACHED_BYTES ? 2 : TOKEN_SPLIT_MIN;
    if (nt < 2 || T < min * nt || T > TOKEN_SPLIT_MAX * nt) return 0;
    if (cb->base.m->cfg.n_expert && cb->layer_bytes > TOKEN_SPLIT_CACHED_BYTES) return 0;
    int32_t *last = cb->seq_last;
    for (int q = 0; q < bt->n_seqs; q++) last[q] = -1;
    for (int i = 0; i < T; i++) last[bt->seq[i]] = i;
    int parts = 0, reach = -1;
    double upto = cb->share[0]; /* the batch's fraction before the next cut */
    cut[0] = 0;
    for (int i = 0; i < T && parts + 1 < nt; i++) {
        if (last[bt->seq[i]] > reach) reach = last[bt->seq[i]];
        /* after token i no sequence continues: a cut may fall here */
        if (reach == i && i + 1 >= (int)(T * upto + 0.5)) {
            cut[++parts] = i + 1;
            upto += cb->share[parts];
        }
    }
    if (cut[parts] < T) cut[++parts] = T;
    for (int p = 0; p < parts; p++)
        if (cut[p + 1] - cut[p] > TOKEN_SPLIT_MAX || cut[p + 1] - cut[p] < min / 2) return 0;
    return parts >= 2 ? parts : 0;
}

double cpu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a split of some work into `parts` parts [cut[p], cut[p + 1]) (tokens,
 * or the classifier's panels), one per thread, part p done done[p] seconds
 * after it could begin (the array is overwritten): moves each thread's share
 * towards what would have made them finish together, taking work per second
 * as its speed. Why learn it: the two halves of a batch-32 step of equal work finished 10-15 % apart, run after run (a
 * thread woken late, a core that a neighbour shares), and the step waits
 * for the later one. Damped (a quarter of the way each step) against one
 * slow step, and bounded so no part falls below half an even share. Output
 * is the same whatever the cut: a token's computation does not depend on
 * which thread runs it or with which others. */
static void split_learn(double *share, const int *cut, int parts, double *done) {
    double *speed = done, sum = 0.0; /* work a second, in place */
    for (int p = 0; p < parts; p++)
        if (!(done[p] > 0.0)) return; /* clock trouble: keep the shares */
    for (int p = 0; p < parts; p++) {
        speed[p] = (double)(cut[p + 1] - cut[p]) / done[p];
        sum += speed[p];
    }
    const double lo = 0.5 / parts, hi = 1.5 / parts;
    double tot = 0.0;
    for (int p = 0; p < parts; p++) {
        double sh = 0.75 * share[p] + 0.25 * speed[p] / sum;
        share[p] = sh < lo ? lo : sh > hi ? hi : sh;
        tot += share[p];
    }
    for (int p = 0; p < parts; p++) share[p] /= tot;
}

static int cpu_forward_rows(backend *b, const be_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    const model_config *c = &b->m->cfg;
    int rc = cpu_check_batch(cb, bt);
    if (rc) return rc;
    const int T = bt->n_tokens;
    if (T == 0) return CK_OK;

    cpu_embed(cb, bt);
    for (int k = 0; cb->kinds[k]; k++)
        if (cb->kinds[k]->prepare) cb->kinds[k]->prepare(cb, bt);
    /* over the attention layers only: a token's mass still adds to 1 in lfm2 */
    const int n_rec = c->n_conv_layers + c->n_ssm_layers;
    const int n_attn = c->n_layers > n_rec ? c->n_layers - n_rec : 1;
    const float mass_scale = 1.0f / (float)(n_attn * c->n_heads);
    /* The classifier runs only for the rows asked for (a prefill chunk needs
     * one): out_norm puts them in xo. */
    int *cut = cb->cut, parts = token_split(cb, bt, cut);
    if (!parts) {
        for (int l = 0; l < c->n_layers; l++) layer_forward(cb, bt, l, 0, T, cb->n_threads, 0, mass_scale);
        cpu_out_norm(cb, bt, 0, T);
        if (bt->n_out) cpu_classify(cb, logits, bt->n_out);
        return CK_OK;
    }
    /* Parts by thread number, striding by the team's size: the runtime may
     * give fewer threads than asked (OMP_THREAD_LIMIT, OMP_DYNAMIC), and
     * every part must still run. Part p uses scratch slot p. With a thread a
     * part, the classifier follows in the same region after a barrier: one
     * wake of the other threads a step instead of two (each 50-130 us on this
     * host's vCPUs, measured). */
    const int fuse = parts == cb->n_threads && bt->n_out && cpu_classify_splits(cb, bt->n_out);
    if (fuse) cpu_classify_cuts(cb);
    const double t0 = cpu_now_s();
    int team = 0;
#pragma omp parallel num_threads(parts)
    {
        const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        if (tid == 0) team = nth;
        for (int p = tid; p < parts; p += nth) {
            for (int l = 0; l < c->n_layers; l++)
                layer_forward(cb, bt, l, cut[p], cut[p + 1], 1, p, mass_scale);
            cpu_out_norm(cb, bt, cut[p], cut[p + 1]);
            cb->done_s[p] = cpu_now_s() - t0;
        }
        if (fuse && nth == parts) {
#pragma omp barrier
            cpu_classify_part(cb, logits, bt->n_out, tid);
        }
    }
    if (team == parts && parts == cb->n_threads) split_learn(cb->share, cut, parts, cb->done_s);
    if (fuse && team == parts)
        split_learn(cb->share, cb->pcut, parts, cb->cls_s);
    else if (bt->n_out)
        cpu_classify(cb, logits, bt->n_out);
    return CK_OK;
}

/* The step, and gemma4's soft cap on its logits: cap tanh(l / cap), in
 * ggml's operations (l times 1 / cap, tanh, times cap). */
static int cpu_forward(backend *b, const be_batch *bt, float *logits) {
    int rc = cpu_forward_rows(b, bt, logits);
    const float cap = b->m->cfg.logit_softcap;
    if (rc || cap <= 0 || !bt->n_tokens) return rc;
    const float inv = 1.0f / cap;
    const size_t n = (size_t)bt->n_out * (size_t)b->m->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) logits[i] = tanhf(logits[i] * inv) * cap;
    return CK_OK;
}

static int cpu_kv_read(backend *b, int block, float *dst) {
    cpu_backend *cb = (cpu_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks) return CK_EINVAL;
    memcpy(dst, cb->kv + (size_t)block * b->kv_block_floats, b->kv_block_floats * sizeof(float));
    return CK_OK;
}

static int cpu_kv_write(backend *b, int block, const float *src) {
    cpu_backend *cb = (cpu_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks) return CK_EINVAL;
    memcpy(cb->kv + (size_t)block * b->kv_block_floats, src, b->kv_block_floats * sizeof(float));
    return CK_OK;
}

static int cpu_kv_compress(backend *b, int block, int n_tokens, int block8) {
    cpu_backend *cb = (cpu_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks || block8 < 0 || block8 >= b->opt.n_kv8_blocks ||
        n_tokens < 0 || n_tokens > b->opt.block_size)
        return CK_EINVAL;
    kvq_quantize(&cb->shape, cb->kv + (size_t)block * b->kv_block_floats, n_tokens,
                 cb->kv8 + (size_t)block8 * b->kv8_block_bytes);
    return CK_OK;
}

static int cpu_kv_expand(backend *b, int block8, int block) {
    cpu_backend *cb = (cpu_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks || block8 < 0 || block8 >= b->opt.n_kv8_blocks)
        return CK_EINVAL;
    kvq_dequantize(&cb->shape, cb->kv8 + (size_t)block8 * b->kv8_block_bytes,
                   cb->kv + (size_t)block * b->kv_block_floats);
    return CK_OK;
}

static int cpu_kv8_read(backend *b, int block8, void *dst) {
    cpu_backend *cb = (cpu_backend *)b;
    if (block8 < 0 || block8 >= b->opt.n_kv8_blocks) return CK_EINVAL;
    memcpy(dst, cb->kv8 + (size_t)block8 * b->kv8_block_bytes, b->kv8_block_bytes);
    return CK_OK;
}

static int cpu_kv8_write(backend *b, int block8, const void *src) {
    cpu_backend *cb = (cpu_backend *)b;
    if (block8 < 0 || block8 >= b->opt.n_kv8_blocks) return CK_EINVAL;
    memcpy(cb->kv8 + (size_t)block8 * b->kv8_block_bytes, src, b->kv8_block_bytes);
    return CK_OK;
}

static size_t cpu_memory_bytes(const backend *b) { return ((const cpu_backend *)b)->bytes; }

const be_ops cpu_backend_ops = {
    .name = "cpu",
    .forward = cpu_forward,
    .kv_read = cpu_kv_read,
    .kv_write = cpu_kv_write,
    .memory_bytes = cpu_memory_bytes,
    .destroy = cpu_destroy,
    .kv_compress = cpu_kv_compress,
    .kv_expand = cpu_kv_expand,
    .kv8_read = cpu_kv8_read,
    .kv8_write = cpu_kv8_write,
};
