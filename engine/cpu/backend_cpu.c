/* backend_cpu.c - the CPU backend: the reference forward pass (backend.h).
 *
 * Llama as llama2.c's run.c computes it (RMSNorm, RoPE on adjacent pairs,
 * grouped-query attention, SwiGLU), plus what arch.h's other rows add (q/k/v
 * biases, qwen3's q/k head norms, NEOX RoPE, RoPE frequencies with
 * rope_freqs and linear/YaRN scaling folded in at creation), but over a batch of many tokens from many
 * sequences, so every projection is one matrix-matrix product, and over the
 * paged KV cache, so attention walks each sequence's block table.
 *
 * Two kinds of weight matrix (cpu_mat):
 *  - f32, f16 and bf16 weights are converted once when the backend is
 *    created and packed into cpu_gemm.c's panels, whose kernel runs every
 *    batch size from one token (memory bound) to a prefill chunk (compute
 *    bound), measured faster than OpenBLAS's sgemm at all of them on these
 *    CPUs (sgemm packs the weights again at every call). The Q, K and V
 *    projections are fused into one matrix, so a layer runs four products.
 *  - quantized weights (Q8_0, Q4_0, the K-quants, ...) stay in the file's
 *    bytes, in the read-only mapping: no copy, so resident memory is about
 *    the file's size (issue 16). Each product quantizes its input rows to
 *    the weight type's 8-bit partner (cpu_qact.h) into scratch sized at
 *    creation, and cpu_qdot.c's integer kernels multiply the blocks
 *    directly; at batch 1 that streams the file's bytes, not 4 a weight.
 *    A type with an interleaved layout (Q4_0, Q8_0, Q4_K: 8 rows a block,
 *    one row a vector lane) is repacked at creation into a copy of about
 *    the same size (Q4_K 2.8 % more) whose mapped pages are then dropped,
 *    so memory stays about the file's size.
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "ck_err.h"
#include "cpu_attn.h"
#include "cpu_features.h"
#include "cpu_gemm.h"
#include "cpu_prefetch.h"
#include "cpu_qact.h"
#include "cpu_qdot.h"
#include "cpu_steal.h"
#include "cpu_team.h"
#include "kv.h"
#include "kvq.h"
#include "model.h"
#include "quant.h"

/* Most tokens a thread takes in a token-split step: its x rows of a layer
 * must stay in L2 (cpu_gemm.c's GEMM_M_BLOCK). */
#define TOKEN_SPLIT_MAX GEMM_M_BLOCK

/* One weight matrix (n, k): packed f32 (f.p != NULL, owned) or quantized
 * rows (q.data != NULL): in the file mapping, or repacked for a type with
 * an x8 layout (cpu_qdot_repack8) into the backend's x8 arena (or, should
 * it be full, into qown). */
typedef struct cpu_mat {
    gemm_w f;
    cpu_qmat q;
    void *qown; /* owned: the x8 copy q.data points at when it is not in the arena; else NULL */
} cpu_mat;

static inline int mat_n(const cpu_mat *w) { return w->f.p ? w->f.n : w->q.n; }

/* Activation formats of the quantized products, indexes of cpu_backend.xq */
enum { ACT_Q8_0, ACT_Q8_1, ACT_Q8_K, ACT_Q8_0S, ACT_N };

static int act_index(int fmt) {
    return fmt == QB_Q8_0 ? ACT_Q8_0 : fmt == QB_Q8_1 ? ACT_Q8_1 : fmt == QACT_Q8_0S ? ACT_Q8_0S : ACT_Q8_K;
}
static const int act_fmt[ACT_N] = {QB_Q8_0, QB_Q8_1, QB_Q8_K, QACT_Q8_0S};

typedef struct cpu_layer {
    float *attn_norm; /* (dim) */
    cpu_mat qkv[3];   /* f32: qkv[0] alone, (q_dim + 2 * kv_dim, dim), wq rows, then wk, then
                         wv; quantized: wq (q_dim, dim), wk, wv (kv_dim, dim) */
    int n_qkv;        /* 1 (fused) or 3 */
    float *bqkv;      /* (qkv_dim) q, k, v biases (0 where the file has none); NULL: no bias */
    float *q_norm;    /* (head_dim) RMSNorm weight of each q head (qwen3); NULL: none */
    float *k_norm;    /* (head_dim) the same for each k head */
    cpu_mat wo;       /* (dim, q_dim) */
    float *ffn_norm;  /* (dim) */
    cpu_mat w1, w3;   /* (hidden_dim, dim): gate, up (both f32 or both quantized) */
    cpu_mat w2;       /* (dim, hidden_dim) */
} cpu_layer;

typedef struct cpu_backend {
    backend base;
    int n_threads;
    int q_dim, kv_dim, qkv_dim, max_ctx;
    /* kernels, chosen at creation (cpu_features.h) */
    int isa;                /* CPU_ISA_* */
    const gemm_kernels *gk; /* the f32 panels, scores, SwiGLU */
    attn_f32_fn attn;       /* cpu_attn.h's kernel for this shape, or NULL: the general code */
    const char *attn_name;  /* its ISA's name (static) */
    cpu_qdot qd;            /* the quantized dots */
    /* weights: f32 ones owned and packed (cpu_gemm.h), quantized ones in the mapping */
    float *emb;         /* (vocab, dim) row-major; NULL when tied (rows come from wcls) or
                         quantized (rows dequantized from the mapping at lookup) */
    float *out_norm;    /* (dim) */
    cpu_mat wcls;       /* (vocab, dim) */
    cpu_layer *layers;  /* (n_layers) */
    size_t layer_bytes; /* every layer's matrices as the products read them */
    /* quantized input rows of the products (T rows each, xq_stride bytes apart):
     * index ACT_*, NULL where no matrix takes that format */
    unsigned char *xq[ACT_N];
    size_t xq_stride[ACT_N];
    unsigned char *xoq; /* (T) the classifier's input rows in its format (xo's rows);
                            NULL when the classifier is f32 */
    size_t xoq_stride;
    size_t emb_row_bytes; /* bytes of one row of the file's token embedding */
    float *inv_freq;      /* (head_dim / 2) RoPE frequencies of the pairs (model_rope_freqs:
                         rope_freqs factors and linear/YaRN scaling folded in) */
    float rope_mscale;    /* cos and sin are scaled by it (YaRN; 1 otherwise) */
    int rope_neox;        /* pairs (i, i + head_dim / 2) instead of (2i, 2i + 1) */
    /* KV storage */
    float *kv;          /* (n_kv_blocks, kv_block_floats) */
    unsigned char *kv8; /* (n_kv8_blocks, kv8_block_bytes) int8 blocks, kvq.h layout */
    kvq_shape shape;
    /* activations, sized for max_batch_tokens (T) */
    float *x;       /* (T, dim) residual stream */
    float *xb;      /* (T, dim) normed input of a projection */
    float *qkv;     /* (T, qkv_dim) */
    float *att_out; /* (T, q_dim) */
    float *h13;     /* (T, 2 * hidden_dim) */
    float *h;       /* (T, hidden_dim) */
    float *rope;    /* (T, head_dim) cos, sin interleaved per pair */
    float *scores;  /* (n_threads, scores_per_thread) per thread: attention scores
                         (n_heads, max_ctx), then int8 blocks' scaled queries (q_dim) */
    size_t scores_per_thread;
    int32_t *hot_list; /* (T, max_blocks) per sequence of the batch: its resident logical
                         blocks in order, so attention skips the others without looking */
    int32_t *n_list;   /* (T) entries in each list */
    int32_t *seq_last; /* (T) token_split's scratch: each sequence's last token */
    int *cut;          /* (n_threads + 1) token_split's cuts */
    double *share;     /* (n_threads) the batch's share each part of a token split gets,
                         learnt from how long the parts took (split_learn); sum 1 */
    double *done_s;    /* (n_threads) when each part finished its layers, seconds
                         after the split region began */
    double *cls_s;     /* (n_threads) each thread's seconds on its classifier panels */
    int *pcut;         /* (n_threads + 1) the classifier's panel cuts */
    cpu_steal *steal;  /* (n_threads) the ranges of a product's work stealing */
    cpu_team *team;    /* (n_threads) the products' and a token's attention's threads */
    float *xo;         /* (T, dim) the normed final states of the rows asked for */
    int max_blocks;    /* max_ctx / block_size, rounded up */
    /* cpu_attn.c's inputs, per thread (n_threads, max_blocks) each */
    attn_shape ashape;
    const float **att_blk;
    int *att_rows;
    float *att_mass;
    /* every x8 copy of a weight matrix, one after another: one allocation
     * on 2 MiB pages (x8_arena_new: why) */
    unsigned char *x8_arena;
    size_t x8_cap, x8_used;
    size_t bytes; /* everything above */
} cpu_backend;

/* ------------------------------------------------------------ the kernels */

/* Work below which a parallel section costs more than it saves. With
 * OMP_WAIT_POLICY=passive (confkv and confkvd set it) waking a sleeping
 * thread and waiting for it is a futex each way: about 25 us a region here,
 * measured, and the team's (cpu_team.h) the same once its threads sleep. So
 * a section must carry about 100 us of work: 8M multiply-adds
 * of a product (compute bound, about 90 G a second a core), 2M
 * multiply-adds of a batch's attention. Below the product threshold
 * stories260K's full-KV batches of 7 woke the second thread 6 times a step
 * and ran 35 % slower on two threads than on one.
 * A one-token step is different: its sections follow each other a few
 * microseconds apart, within the spin before a waiting thread sleeps
 * (cpu_team.h), so one costs about 1 us. From 256K weights
 * (150 KB of Q4_K, about 15 us to stream) a product is split, the 110M
 * shape's attention output (590K weights) included, which one thread used
 * to read alone while the other waited; from 32K multiply-adds its
 * attention's heads are (attend_heads). */
#define PAR_MIN_MACS (1u << 23)
#define PAR_MIN_WEIGHTS (1u << 18)
#define PAR_MIN_ATT_MACS (1u << 21)
#define PAR_MIN_HEAD_MACS (1u << 15)

/* Units a product over w is split into: panels of GEMM_PANEL columns (f32),
 * rows (quantized: a row is already hundreds of bytes). */
static int mat_units(const cpu_mat *w) { return w->f.p ? gemm_n_panels(&w->f) : w->q.n; }

/* Output columns [c0, c1) of units [u0, u1). */
static void unit_cols(const cpu_mat *w, int u0, int u1, int *c0, int *c1) {
    const int n = mat_n(w), per = w->f.p ? GEMM_PANEL : 1;
    *c0 = u0 * per < n ? u0 * per : n;
    *c1 = u1 * per < n ? u1 * per : n;
}

/* The quantized input rows of activation format fmt, from row `row0` on. */
static const void *xq_rows(const cpu_backend *cb, int fmt, int row0, size_t *stride) {
    const int a = act_index(fmt);
    *stride = cb->xq_stride[a];
    return cb->xq[a] + (size_t)row0 * cb->xq_stride[a];
}

/* Quantizes x (M rows of K) into rows row0.. of every format the mats take
 * (a no-op for f32 mats). */
static void quantize_in(cpu_backend *cb, const float *x, int M, int K, int row0, const cpu_mat *const *mats,
                        int n_mats) {
    int done = 0; /* formats already written, a bit each */
    for (int i = 0; i < n_mats; i++) {
        if (!mats[i]->q.data) continue;
        const int a = act_index(mats[i]->q.t->act);
        if (done & (1 << a)) continue;
        done |= 1 << a;
        for (int m = 0; m < M; m++)
            qact_row_isa(cb->isa, act_fmt[a], x + (size_t)m * K,
                         cb->xq[a] + (size_t)(row0 + m) * cb->xq_stride[a], K);
    }
}

/* Units [u0, u1) of y (M, ldy) (+)= x . w^T: f32 x rows for packed w, the
 * quantized rows from row0 for a quantized one. */
static void mat_part(const cpu_backend *cb, float *y, int ldy, const float *x, int row0, const cpu_mat *w,
                     int M, int u0, int u1, int accumulate) {
    if (w->f.p) {
        gemm_panels(y, ldy, x, &w->f, M, u0, u1, accumulate);
        return;
    }
    size_t stride;
    const void *a = xq_rows(cb, w->q.t->act, row0, &stride);
    cpu_qdot_rows(y, ldy, a, stride, &w->q, M, u0, u1, accumulate);
}

/* Threads for an (M, N, K) product: one where waking the others costs more
 * than it saves (measured: +24 % tokens/s at batch 1 on the stories15M shape
 * when only its classifier is split). */
static int gemm_threads(int M, int N, int K, int threads) {
    if (M == 1) return (size_t)N * K >= PAR_MIN_WEIGHTS ? threads : 1;
    return (size_t)M * N * K >= PAR_MIN_MACS ? threads : 1;
}

/* Units [g0, g1) of the mats' units one after the other: each mat's part,
 * its outputs after the previous mats' columns. */
static void mats_part(const cpu_backend *cb, float *y, int ldy, const float *x, int row0,
                      const cpu_mat *const *mats, int n_mats, int M, int g0, int g1, int accumulate) {
    for (int i = 0, c = 0, base = 0; i < n_mats && base < g1;
         c += mat_n(mats[i]), base += mat_units(mats[i]), i++) {
        const int nu = mat_units(mats[i]), u0 = g0 - base > 0 ? g0 - base : 0,
                  u1 = g1 - base < nu ? g1 - base : nu;
        if (u0 < u1) mat_part(cb, y + c, ldy, x, row0, mats[i], M, u0, u1, accumulate);
    }
}

/* The granule of a product's work stealing: 8 rows of a quantized matrix
 * (an interleaved group of cpu_qdot.h's 8-row kernels: one split inside
 * computes the whole group twice), one panel of an f32 one. */
static int steal_align(const cpu_mat *const *mats, int n_mats) {
    for (int i = 0; i < n_mats; i++)
        if (!mats[i]->f.p) return 8;
    return 1;
}

/* A product shared out on the team (cpu_team.h): its arguments, and what
 * a thread does with the units [u0, u1) it takes (matmul's mats, ffn_up's
 * SwiGLU, the classifier). */
typedef struct mm_job mm_job;
struct mm_job {
    const cpu_backend *cb;
    void (*units)(const mm_job *j, int u0, int u1);
    float *y; /* (M, ldy); the classifier's logits */
    int ldy;
    const float *x;
    int row0;
    const cpu_mat *const *mats;
    int n_mats, M, accumulate;
    float *h13;            /* ffn_up's scratch, y its h */
    int par, chunk, align; /* cpu_steal_init's: the team may run fewer threads
                              (OMP_THREAD_LIMIT), whose steals then take the rest */
};

static void mm_units(void *arg, int tid, int n) {
    const mm_job *j = arg;
    int u0, u1;
    (void)n;
    while (cpu_steal_take(j->cb->steal, tid, j->par, j->chunk, j->align, &u0, &u1)) j->units(j, u0, u1);
}

/* j's nu units on par threads of the team, by work stealing; here at
 * once when par <= 1. */
static void mm_run(cpu_backend *cb, mm_job *j, int nu, int par) {
    if (par <= 1) {
        j->units(j, 0, nu);
        return;
    }
    j->align = steal_align(j->mats, j->n_mats);
    j->chunk = cpu_steal_init(cb->steal, nu, par, j->align);
    j->par = par;
    cpu_team_run(cb->team, par, mm_units, j);
}

static void mats_units(const mm_job *j, int u0, int u1) {
    mats_part(j->cb, j->y, j->ldy, j->x, j->row0, j->mats, j->n_mats, j->M, u0, u1, j->accumulate);
}

/* y (M, ldy) = x (M, K) . [w_0; w_1; ...]^T (+ y when accumulate): the
 * mats' outputs side by side, w_i's from column sum of the previous n. This
 * is where almost all the time goes. Threads share out the units of all
 * the mats one after the other (the Q, K and V of a quantized layer are
 * three matrices) in one run of the team, by work stealing (cpu_steal.h),
 * so each reads its own ranges of the weights. row0:
 * the batch row of x's first row (where its quantized copy goes). */
static void matmul(cpu_backend *cb, float *y, int ldy, const float *x, int row0, const cpu_mat *const *mats,
                   int n_mats, int M, int accumulate, int threads) {
    const int K = mats[0]->f.p ? mats[0]->f.k : mats[0]->q.k;
    int N = 0, min_units = 1 << 30;
    for (int i = 0; i < n_mats; i++) {
        N += mat_n(mats[i]);
        if (mat_units(mats[i]) < min_units) min_units = mat_units(mats[i]);
    }
    quantize_in(cb, x, M, K, row0, mats, n_mats);
    int par = gemm_threads(M, N, K, threads), nu = 0;
    if (par > min_units) par = min_units;
    for (int i = 0; i < n_mats; i++) nu += mat_units(mats[i]);
    mm_job j = {.cb = cb,
                .units = mats_units,
                .y = y,
                .ldy = ldy,
                .x = x,
                .row0 = row0,
                .mats = mats,
                .n_mats = n_mats,
                .M = M,
                .accumulate = accumulate};
    mm_run(cb, &j, nu, par);
}

/* Units [u0, u1) of h = SwiGLU (see ffn_up). */
static void swiglu_part(const cpu_backend *cb, float *h, float *h13, const float *x, int row0,
                        const cpu_mat *w1, const cpu_mat *w3, int M, int u0, int u1) {
    if (u0 >= u1) return;
    const int F = mat_n(w1);
    mat_part(cb, h13, 2 * F, x, row0, w1, M, u0, u1, 0);
    mat_part(cb, h13 + F, 2 * F, x, row0, w3, M, u0, u1, 0);
    int n0, n1;
    unit_cols(w1, u0, u1, &n0, &n1);
    for (int i = 0; i < M; i++) {
        const float *g = h13 + (size_t)i * 2 * F, *u = g + F;
        cb->gk->swiglu(h + (size_t)i * F, g, u, n0, n1);
    }
}

static void swiglu_units(const mm_job *j, int u0, int u1) {
    swiglu_part(j->cb, j->y, j->h13, j->x, j->row0, j->mats[0], j->mats[1], j->M, u0, u1);
}

/* h (M, F) = SwiGLU(x . w1^T, x . w3^T), h13 (M, 2F) the scratch for the gate
 * then the up columns. Each thread computes the gate and the up columns of
 * its own units and applies the SwiGLU to them at once, so the SwiGLU pass
 * (a few percent of a batch-32 step on one thread) is split too, with no
 * barrier in between. */
static void ffn_up(cpu_backend *cb, float *h, float *h13, const float *x, int row0, const cpu_mat *w1,
                   const cpu_mat *w3, int M, int threads) {
    const int nu = mat_units(w1), K = w1->f.p ? w1->f.k : w1->q.k;
    const cpu_mat *mats[2] = {w1, w3};
    quantize_in(cb, x, M, K, row0, mats, 2);
    int par = gemm_threads(M, 2 * mat_n(w1), K, threads);
    if (par > nu) par = nu;
    const cpu_mat *const both[2] = {w1, w3};
    mm_job j = {.cb = cb,
                .units = swiglu_units,
                .y = h,
                .x = x,
                .row0 = row0,
                .mats = both,
                .n_mats = 2,
                .M = M,
                .h13 = h13};
    mm_run(cb, &j, nu, par);
}

/* llama2.c's rmsnorm, operation for operation, so greedy output matches it. */
static void rmsnorm(float *o, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
    ss /= n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++) o[j] = w[j] * (ss * x[j]);
}

/* RoPE on n_heads heads of v; cs (head_dim) holds cos, sin of each pair.
 * The adjacent pairs (2i, 2i + 1) of GGUF's llama weights: */
static void rope_rotate(float *v, const float *cs, int head_dim, int n_heads) {
    for (int h = 0; h < n_heads; h++) {
        float *p = v + h * head_dim;
        for (int i = 0; i < head_dim; i += 2) {
            float fcr = cs[i], fci = cs[i + 1];
            float v0 = p[i], v1 = p[i + 1];
            p[i] = v0 * fcr - v1 * fci;
            p[i + 1] = v0 * fci + v1 * fcr;
        }
    }
}

/* NEOX (qwen2, qwen3): pair i is (i, i + head_dim / 2). */
static void rope_rotate_neox(float *v, const float *cs, int head_dim, int n_heads) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = v + h * head_dim;
        for (int i = 0; i < half; i++) {
            float fcr = cs[2 * i], fci = cs[2 * i + 1];
            float v0 = p[i], v1 = p[i + half];
            p[i] = v0 * fcr - v1 * fci;
            p[i + half] = v0 * fci + v1 * fcr;
        }
    }
}

/* Where logical block j of a view lives: f32 pointer, or int8 block. */
typedef struct blk_ref {
    const float *f;          /* K rows of this layer, (block_size, kv_dim); V follows */
    const int8_t *q;         /* int8 K rows of this layer, the same shape; V follows */
    const uint16_t *ks, *vs; /* f16 scales: per channel (kv_dim), per token (block_size) */
} blk_ref;

static int block_ref(const cpu_backend *cb, const be_seq_view *v, int j, int layer, blk_ref *r) {
    const int bs = cb->base.opt.block_size, kvd = cb->kv_dim;
    int b = v->blocks[j];
    if (b >= 0) {
        r->f = cb->kv + (size_t)b * cb->base.kv_block_floats + (size_t)layer * 2 * bs * kvd;
        r->q = NULL;
        return 1;
    }
    int b8 = v->blocks8 ? v->blocks8[j] : KV_NONE;
    if (b8 < 0) return 0;
    const unsigned char *base =
        cb->kv8 + (size_t)b8 * cb->base.kv8_block_bytes + (size_t)layer * kvq_layer_bytes(&cb->shape);
    r->f = NULL;
    r->q = (const int8_t *)base;
    const uint16_t *sc = (const uint16_t *)(base + 2 * (size_t)bs * kvd);
    r->ks = sc;
    r->vs = sc + kvd;
    return 1;
}

/* Where a block's K and V rows of one layer lie (one contiguous span). */
static const char *block_span(const blk_ref *r, int bs, int kvd, size_t *bytes) {
    *bytes = 2 * (size_t)bs * kvd * (r->f ? sizeof(float) : 1);
    return r->f ? (const char *)r->f : (const char *)r->q;
}

/* The f32 blocks a cpu_attn.c kernel reads for the token at pos: their K
 * rows into cb->att_blk and their row counts into cb->att_rows, slot
 * `slot`. Returns their count, or -1 when a block is not f32 (the general
 * code must run). */
static int fast_blocks(const cpu_backend *cb, int layer, int pos, const be_seq_view *v, const int32_t *list,
                       int n_list, int slot) {
    const int bs = cb->base.opt.block_size;
    const float **blk = cb->att_blk + (size_t)slot * cb->max_blocks;
    int *rows = cb->att_rows + (size_t)slot * cb->max_blocks;
    int last = pos / bs, nb = 0;
    if (last >= v->n_blocks) last = v->n_blocks - 1;
    blk_ref r;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        if (!block_ref(cb, v, j, layer, &r) || !r.f) return -1;
        blk[nb] = r.f;
        rows[nb++] = j == pos / bs ? pos - j * bs + 1 : bs;
    }
    return nb;
}

/* Each listed block's attention mass into the sequence's, scaled. */
static void add_mass(const be_seq_view *v, const int32_t *list, const float *mass, int nb, float mass_scale) {
    if (v->mass)
        for (int li = 0; li < nb; li++) {
#pragma omp atomic
            v->mass[list[li]] += mass[li] * mass_scale;
        }
}

/* attend_token by cpu_attn.c when every block it reads is f32. Returns 1
 * when done, 0 when the general code must run. */
static int attend_fast(const cpu_backend *cb, int layer, const float *q, float *out, int pos,
                       const be_seq_view *v, const int32_t *list, int n_list, float *att, float mass_scale,
                       int slot) {
    const int nb = fast_blocks(cb, layer, pos, v, list, n_list, slot);
    float *mass = cb->att_mass + (size_t)slot * cb->max_blocks;
    if (nb < 0 || cb->attn(&cb->ashape, q, cb->att_blk + (size_t)slot * cb->max_blocks,
                           cb->att_rows + (size_t)slot * cb->max_blocks, nb, 0, cb->ashape.n_heads, att,
                           (size_t)cb->max_ctx, out, mass))
        return 0;
    add_mass(v, list, mass, nb, mass_scale);
    return 1;
}

typedef struct heads_job {
    const cpu_backend *cb;
    const float *q;
    float *out;
    int nb, par, chunk, align;
    _Atomic int bad;
} heads_job;

/* A thread's heads, taken by work stealing (cpu_steal.h), a run of them a
 * call. */
static void heads_part(void *arg, int t, int n) {
    heads_job *j = arg;
    const cpu_backend *cb = j->cb;
    int h0, h1;
    (void)n;
    while (cpu_steal_take(cb->steal, t, j->par, j->chunk, j->align, &h0, &h1))
        if (cb->attn(&cb->ashape, j->q, cb->att_blk, cb->att_rows, j->nb, h0, h1, cb->scores,
                     (size_t)cb->max_ctx, j->out, NULL))
            atomic_store(&j->bad, 1);
}

/* attend_fast for the one token of a batch of one, its heads split over
 * `threads` (a token split has nothing to split there, and the attention
 * would run on one thread while the others wait). Every head is computed
 * as attend_fast computes it and the mass summed afterwards in the same
 * order, so the bits are attend_fast's. Returns 1 when done, 0 when the
 * general code must run.
 *
 * The heads go by work stealing. Why: an even cut left the caller's six
 * heads taking 1.4x the worker's time (110M Q4_K_M, two threads, the Zen 5
 * of docs/BENCHMARKS.md section 12), and a cut learnt from the threads'
 * speeds, in whole heads, still left the caller waiting 12-16 % of each
 * attention run (timed in the team).
 * A take is at least half the heads a thread owns, in whole KV
 * groups (GQA's query heads that read the same K and V columns). Why: each
 * take walks every position of the context again, its heads' columns of
 * each K and V row; the KV is not in the caches (a step's weights stream
 * through them between two uses), and one head's 256 bytes a row, 3 KiB
 * apart, kept too few lines in flight. Takes of one head left each thread
 * reading its KV at 16 GB/s, half the weights' rate (14 % of a step at
 * 96 positions); takes of three heads made decode 4 % faster at 128
 * generated tokens and 7 % at 512 (BENCHMARKS 12, session 13). */
static int attend_heads(cpu_backend *cb, const be_batch *bt, int l, int i, int threads, float mass_scale) {
    const int q = bt->seq[i], H = cb->ashape.n_heads;
    const be_seq_view *v = &bt->seqs[q];
    const int32_t *list = cb->hot_list + (size_t)q * cb->max_blocks;
    const int nb = fast_blocks(cb, l, bt->pos[i], v, list, cb->n_list[q], 0);
    if (nb < 0) return 0;
    const float *qp = cb->qkv + (size_t)i * cb->qkv_dim;
    const int g = cb->ashape.gqa > 0 && H % cb->ashape.gqa == 0 ? cb->ashape.gqa : 1;
    heads_job j = {cb, qp, cb->att_out + (size_t)i * cb->q_dim, nb, threads, 0, g, 0};
    j.chunk = cpu_steal_init(cb->steal, H, threads, g);
    const int half = (H / (2 * threads) + g - 1) / g * g; /* half an owned range */
    if (half > j.chunk) j.chunk = half;
    cpu_team_run(cb->team, threads, heads_part, &j);
    if (atomic_load(&j.bad)) return 0; /* a refusal is every head's (the same shape): nothing kept */
    attn_block_mass(cb->scores, (size_t)cb->max_ctx, H, cb->att_rows, nb, cb->att_mass);
    add_mass(v, list, cb->att_mass, nb, mass_scale);
    return 1;
}

/* One token over its sequence's hot blocks (f32 or int8), every query head
 * at once. Why all heads together: a K or V row holds every kv head side by
 * side, so walking whole rows in order streams memory the prefetcher can
 * follow; one head per work item read 192-byte slices a row apart, and
 * batch-32 decode spent a third of its time waiting for them.
 * att: (n_heads, max_ctx) scores, each head's in block order so the two
 * passes agree; qs: (q_dim) scratch for int8 blocks' scaled queries. */
static void attend_token(const cpu_backend *cb, int layer, const float *q, float *restrict out, int pos,
                         const be_seq_view *v, const int32_t *list, int n_list, float *restrict att,
                         float *restrict qs, float mass_scale, int slot) {
    const model_config *c = &cb->base.m->cfg;
    const int bs = cb->base.opt.block_size, hd = c->head_dim, kvd = cb->kv_dim;
    const int H = c->n_heads, gqa = c->n_heads / c->n_kv_heads, ctx = cb->max_ctx;
    const float scale = sqrtf((float)hd);
    int last = pos / bs;
    if (last >= v->n_blocks) last = v->n_blocks - 1;
    int n = 0;
    blk_ref r;
    if (cb->attn && attend_fast(cb, layer, q, out, pos, v, list, n_list, att, mass_scale, slot)) return;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        const char *pf = NULL; /* the next block's rows */
        size_t pf_bytes = 0;
        if (li + 1 < n_list && list[li + 1] <= last) {
            block_ref(cb, v, list[li + 1], layer, &r);
            pf = block_span(&r, bs, kvd, &pf_bytes);
        }
        block_ref(cb, v, j, layer, &r);
        int tn = j == pos / bs ? pos - j * bs + 1 : bs;
        if (r.f) {
            cb->gk->qk(att + n, (size_t)ctx, q, r.f, kvd, tn, H, hd, gqa, scale, pf, pf_bytes);
            n += tn;
        } else {
            /* k = k8 * ks per channel: fold the scales into the queries once. */
            for (int h = 0; h < H; h++)
                for (int i = 0; i < hd; i++)
                    qs[h * hd + i] = q[h * hd + i] * quant_f16_to_f32(r.ks[(h / gqa) * hd + i]);
            for (int t = 0; t < tn; t++, n++) {
                prefetch_part(pf, pf_bytes, t, tn);
                const int8_t *k8 = r.q + (size_t)t * kvd;
                for (int h = 0; h < H; h++) {
                    const float *qh = qs + h * hd;
                    const int8_t *kh = k8 + (h / gqa) * hd;
                    float s = 0.0f;
                    for (int i = 0; i < hd; i++) s += qh[i] * (float)kh[i];
                    att[(size_t)h * ctx + n] = s / scale;
                }
            }
        }
    }
    for (int h = 0; h < H; h++) {
        float *a = att + (size_t)h * ctx, mx = -INFINITY, sum = 0.0f;
        for (int i = 0; i < n; i++) mx = a[i] > mx ? a[i] : mx;
        for (int i = 0; i < n; i++) {
            a[i] = expf(a[i] - mx);
            sum += a[i];
        }
        for (int i = 0; i < n; i++) a[i] /= sum;
    }
    memset(out, 0, (size_t)H * hd * sizeof *out);
    n = 0;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        block_ref(cb, v, j, layer, &r);
        int tn = j == pos / bs ? pos - j * bs + 1 : bs;
        float m = 0.0f;
        if (r.f) {
            m = cb->gk->av(out, att + n, (size_t)ctx, r.f + (size_t)bs * kvd, kvd, tn, H, hd, gqa);
            n += tn;
        } else {
            const int8_t *v8 = r.q + (size_t)bs * kvd;
            for (int t = 0; t < tn; t++, n++) {
                const int8_t *vt = v8 + (size_t)t * kvd;
                float vscale = quant_f16_to_f32(r.vs[t]);
                for (int h = 0; h < H; h++) {
                    float a = att[(size_t)h * ctx + n], av = a * vscale;
                    const int8_t *restrict vh = vt + (h / gqa) * hd;
                    float *restrict o = out + (size_t)h * hd;
                    for (int i = 0; i < hd; i++) o[i] += av * (float)vh[i];
                    m += a;
                }
            }
        }
        if (v->mass) {
#pragma omp atomic
            v->mass[j] += m * mass_scale;
        }
    }
}

/* ------------------------------------------------------------ the forward */

static int cpu_check_batch(const cpu_backend *cb, const be_batch *bt) {
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
    return n_out == bt->n_out ? CK_OK : CK_EINVAL;
}

/* attend_token for token i of the batch, with scratch slot `slot`. */
static void attend_batch_token(cpu_backend *cb, const be_batch *bt, int l, int i, int slot,
                               float mass_scale) {
    const model_config *c = &cb->base.m->cfg;
    float *att = cb->scores + (size_t)slot * cb->scores_per_thread;
    int q = bt->seq[i];
    attend_token(cb, l, cb->qkv + (size_t)i * cb->qkv_dim, cb->att_out + (size_t)i * cb->q_dim, bt->pos[i],
                 &bt->seqs[q], cb->hot_list + (size_t)q * cb->max_blocks, cb->n_list[q], att,
                 att + (size_t)c->n_heads * cb->max_ctx, mass_scale, slot);
}

/* One layer for tokens [i0, i1) of the batch (their rows of every activation
 * buffer). threads: how many the products and attention may wake; 1 inside a
 * token-split region, where the calling thread does it all with scratch slot
 * `slot` of cb->scores. */
static void layer_forward(cpu_backend *cb, const be_batch *bt, int l, int i0, int i1, int threads, int slot,
                          float mass_scale) {
    const model_config *c = &cb->base.m->cfg;
    const cpu_layer *w = &cb->layers[l];
    const int D = c->dim, F = c->hidden_dim, hd = c->head_dim, M = i1 - i0;
    const int QD = cb->q_dim, KVD = cb->kv_dim, QKV = cb->qkv_dim, bs = cb->base.opt.block_size;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D;
    float *qkv = cb->qkv + (size_t)i0 * QKV, *att_out = cb->att_out + (size_t)i0 * QD;

    for (int i = 0; i < M; i++) rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->attn_norm, D, c->norm_eps);
    const cpu_mat *qkv_mats[3] = {&w->qkv[0], &w->qkv[1], &w->qkv[2]};
    matmul(cb, qkv, QKV, xb, i0, qkv_mats, w->n_qkv, M, 0, threads);
    for (int i = i0; i < i1; i++) {
        float *q = cb->qkv + (size_t)i * QKV;
        const float *cs = cb->rope + (size_t)i * hd;
        if (w->bqkv)
            for (int j = 0; j < QKV; j++) q[j] += w->bqkv[j];
        if (w->q_norm) /* qwen3: each head normed on its own, before RoPE */
            for (int h = 0; h < c->n_heads; h++)
                rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, w->q_norm, hd, c->norm_eps);
        if (w->k_norm)
            for (int h = 0; h < c->n_kv_heads; h++)
                rmsnorm(q + QD + (size_t)h * hd, q + QD + (size_t)h * hd, w->k_norm, hd, c->norm_eps);
        if (cb->rope_neox) {
            rope_rotate_neox(q, cs, hd, c->n_heads);
            rope_rotate_neox(q + QD, cs, hd, c->n_kv_heads);
        } else {
            rope_rotate(q, cs, hd, c->n_heads);
            rope_rotate(q + QD, cs, hd, c->n_kv_heads);
        }
        const be_seq_view *v = &bt->seqs[bt->seq[i]];
        int p = bt->pos[i];
        float *dst = cb->kv + (size_t)v->blocks[p / bs] * cb->base.kv_block_floats +
                     (size_t)l * 2 * bs * KVD + (size_t)(p % bs) * KVD;
        memcpy(dst, q + QD, (size_t)KVD * sizeof(float));
        memcpy(dst + (size_t)bs * KVD, q + QD + KVD, (size_t)KVD * sizeof(float));
    }
    /* Parallel only when there is enough work to pay for waking threads: a
     * tiny model at batch 1 runs faster on one. Inside a token-split region
     * (threads == 1) no region at all: a nested one would still be set up. */
    size_t att_macs = 0; /* QK and AV: 2 q_dim multiply-adds a position */
    for (int i = i0; i < i1 && threads > 1; i++) att_macs += 2 * (size_t)QD * (size_t)(bt->pos[i] + 1);
    if (threads > 1 && M == 1 && cb->attn && att_macs >= PAR_MIN_HEAD_MACS &&
        attend_heads(cb, bt, l, i0, threads, mass_scale)) {
        /* done, split by heads */
    } else if (threads > 1 && att_macs >= PAR_MIN_ATT_MACS) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int i = i0; i < i1; i++) attend_batch_token(cb, bt, l, i, omp_get_thread_num(), mass_scale);
    } else {
        for (int i = i0; i < i1; i++) attend_batch_token(cb, bt, l, i, slot, mass_scale);
    }
    const cpu_mat *wo = &w->wo, *w2 = &w->w2;
    matmul(cb, x, D, att_out, i0, &wo, 1, M, 1, threads);
    for (int i = 0; i < M; i++) rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->ffn_norm, D, c->norm_eps);
    ffn_up(cb, cb->h + (size_t)i0 * F, cb->h13 + (size_t)i0 * 2 * F, xb, i0, &w->w1, &w->w3, M, threads);
    matmul(cb, x, D, cb->h + (size_t)i0 * F, i0, &w2, 1, M, 1, threads);
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
 * when the batch is better split by rows (too small, too big, or no cut). */
#define TOKEN_SPLIT_MIN 8
#define TOKEN_SPLIT_CACHED_BYTES ((size_t)8 << 20)
static int token_split(const cpu_backend *cb, const be_batch *bt, int *cut) {
    const int T = bt->n_tokens, nt = cb->n_threads;
    const int min = cb->layer_bytes <= TOKEN_SPLIT_CACHED_BYTES ? 2 : TOKEN_SPLIT_MIN;
    if (nt < 2 || T < min * nt || T > TOKEN_SPLIT_MAX * nt) return 0;
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

static double now_s(void) {
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

/* The classifier, logits (n_out, vocab) = xo . wcls^T, is the biggest product
 * of a step (a third of a batch-32 step on the stories15M shape). After a
 * token split, in the same region, its panels are cut by the learnt shares,
 * and the cut's timing teaches them in turn: measured here, one core's half
 * took 1.4x the other's. classify_splits: whether it is cut that way for
 * n_out rows. In a region of its own (classify) it is shared by work
 * stealing, as the layers' products are. */
static int classify_splits(const cpu_backend *cb, int n_out) {
    const cpu_mat *w = &cb->wcls;
    const int nt = cb->n_threads;
    return nt >= 2 && mat_units(w) >= 4 * nt && gemm_threads(n_out, mat_n(w), cb->base.m->cfg.dim, nt) >= nt;
}

/* Units [u0, u1) of the classifier: logits (n_out, vocab) from xo (f32
 * panels) or its quantized rows xoq. */
static void classify_units(const cpu_backend *cb, float *logits, int n_out, int u0, int u1) {
    const cpu_mat *w = &cb->wcls;
    if (w->f.p)
        gemm_panels(logits, w->f.n, cb->xo, &w->f, n_out, u0, u1, 0);
    else
        cpu_qdot_rows(logits, w->q.n, cb->xoq, cb->xoq_stride, &w->q, n_out, u0, u1, 0);
}

/* pcut[0..n_threads] from the shares, at least one unit a thread. */
static void classify_cuts(cpu_backend *cb) {
    const int np = mat_units(&cb->wcls), nt = cb->n_threads;
    int *cut = cb->pcut;
    double upto = 0.0;
    cut[0] = 0;
    for (int p = 0; p < nt; p++) {
        upto += cb->share[p];
        int c = p + 1 == nt ? np : (int)(np * upto + 0.5);
        cut[p + 1] = c < cut[p] + 1 ? cut[p] + 1 : c > np - (nt - 1 - p) ? np - (nt - 1 - p) : c;
    }
}

/* Thread t's panels, [pcut[t], pcut[t + 1]), timed into cls_s[t]. */
static void classify_part(cpu_backend *cb, float *logits, int n_out, int t) {
    const double t0 = now_s();
    classify_units(cb, logits, n_out, cb->pcut[t], cb->pcut[t + 1]);
    cb->cls_s[t] = now_s() - t0;
}

static void cls_units(const mm_job *j, int u0, int u1) { classify_units(j->cb, j->y, j->M, u0, u1); }

/* The classifier on the team (when the layers ran without a token split),
 * its units shared by work stealing (cpu_steal.h). */
static void classify(cpu_backend *cb, float *logits, int n_out) {
    const int nu = mat_units(&cb->wcls);
    int par = gemm_threads(n_out, mat_n(&cb->wcls), cb->base.m->cfg.dim, cb->n_threads);
    if (par > nu) par = nu;
    const cpu_mat *const w[1] = {&cb->wcls};
    mm_job j = {.cb = cb, .units = cls_units, .y = logits, .mats = w, .n_mats = 1, .M = n_out};
    mm_run(cb, &j, nu, par);
}

/* The final norm of tokens [i0, i1) that have an output row, into xo. */
static void out_norm(cpu_backend *cb, const be_batch *bt, int i0, int i1) {
    const model_config *c = &cb->base.m->cfg;
    const int D = c->dim;
    for (int i = i0; i < i1; i++) {
        int r = bt->out_row[i];
        if (r < 0) continue;
        rmsnorm(cb->xo + (size_t)r * D, cb->x + (size_t)i * D, cb->out_norm, D, c->norm_eps);
        if (cb->xoq)
            qact_row_isa(cb->isa, cb->wcls.q.t->act, cb->xo + (size_t)r * D,
                         cb->xoq + (size_t)r * cb->xoq_stride, D);
    }
}

static int cpu_forward(backend *b, const be_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    const model_config *c = &b->m->cfg;
    int rc = cpu_check_batch(cb, bt);
    if (rc) return rc;
    const int T = bt->n_tokens, D = c->dim, hd = c->head_dim;
    if (T == 0) return CK_OK;

    for (int i = 0; i < T; i++) {
        if (cb->emb)
            memcpy(cb->x + (size_t)i * D, cb->emb + (size_t)bt->token[i] * D, (size_t)D * sizeof(float));
        else if (cb->base.m->tied && cb->wcls.f.p)
            gemm_row(&cb->wcls.f, bt->token[i], cb->x + (size_t)i * D);
        else /* quantized: the token's row from the mapping (the shape was checked at creation) */
            quant_to_f32(b->m->tok_emb.type,
                         (const char *)b->m->tok_emb.data + (size_t)bt->token[i] * cb->emb_row_bytes,
                         cb->x + (size_t)i * D, (uint64_t)D);
        float *cs = cb->rope + (size_t)i * hd;
        const float ms = cb->rope_mscale; /* exactly 1 unless YaRN or attn_factor: x * 1 is x */
        for (int k = 0; k < hd / 2; k++) {
            float val = bt->pos[i] * cb->inv_freq[k];
            cs[2 * k] = cosf(val) * ms;
            cs[2 * k + 1] = sinf(val) * ms;
        }
    }
    const float mass_scale = 1.0f / (float)(c->n_layers * c->n_heads);
    /* Each sequence's resident blocks, listed once for every layer and head. */
    for (int q = 0; q < bt->n_seqs; q++) {
        const be_seq_view *v = &bt->seqs[q];
        int32_t *list = cb->hot_list + (size_t)q * cb->max_blocks, n = 0;
        int nb = v->n_blocks < cb->max_blocks ? v->n_blocks : cb->max_blocks;
        for (int j = 0; j < nb; j++)
            if (v->blocks[j] >= 0 || (v->blocks8 && v->blocks8[j] >= 0)) list[n++] = j;
        cb->n_list[q] = n;
    }
    /* The classifier runs only for the rows asked for (a prefill chunk needs
     * one): out_norm puts them in xo. */
    int *cut = cb->cut, parts = token_split(cb, bt, cut);
    if (!parts) {
        for (int l = 0; l < c->n_layers; l++) layer_forward(cb, bt, l, 0, T, cb->n_threads, 0, mass_scale);
        out_norm(cb, bt, 0, T);
        if (bt->n_out) classify(cb, logits, bt->n_out);
        return CK_OK;
    }
    /* Parts by thread number, striding by the team's size: the runtime may
     * give fewer threads than asked (OMP_THREAD_LIMIT, OMP_DYNAMIC), and
     * every part must still run. Part p uses scratch slot p. With a thread a
     * part, the classifier follows in the same region after a barrier: one
     * wake of the other threads a step instead of two (each 50-130 us on this
     * host's vCPUs, measured). */
    const int fuse = parts == cb->n_threads && bt->n_out && classify_splits(cb, bt->n_out);
    if (fuse) classify_cuts(cb);
    const double t0 = now_s();
    int team = 0;
#pragma omp parallel num_threads(parts)
    {
        const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        if (tid == 0) team = nth;
        for (int p = tid; p < parts; p += nth) {
            for (int l = 0; l < c->n_layers; l++)
                layer_forward(cb, bt, l, cut[p], cut[p + 1], 1, p, mass_scale);
            out_norm(cb, bt, cut[p], cut[p + 1]);
            cb->done_s[p] = now_s() - t0;
        }
        if (fuse && nth == parts) {
#pragma omp barrier
            classify_part(cb, logits, bt->n_out, tid);
        }
    }
    if (team == parts && parts == cb->n_threads) split_learn(cb->share, cut, parts, cb->done_s);
    if (fuse && team == parts)
        split_learn(cb->share, cb->pcut, parts, cb->cls_s);
    else if (bt->n_out)
        classify(cb, logits, bt->n_out);
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

static void cpu_destroy(backend *b) {
    cpu_backend *cb = (cpu_backend *)b;
    if (!cb) return;
    free(cb->wcls.f.p);
    free(cb->wcls.qown);
    free(cb->x8_arena);
    free(cb->emb);
    free(cb->out_norm);
    if (cb->layers) {
        for (int l = 0; l < b->m->cfg.n_layers; l++) {
            cpu_layer *w = &cb->layers[l];
            free(w->attn_norm);
            free(w->bqkv);
            free(w->q_norm);
            free(w->k_norm);
            for (int i = 0; i < 3; i++) free(w->qkv[i].f.p), free(w->qkv[i].qown);
            free(w->wo.f.p);
            free(w->wo.qown);
            free(w->ffn_norm);
            free(w->w1.f.p);
            free(w->w1.qown);
            free(w->w3.f.p);
            free(w->w3.qown);
            free(w->w2.f.p);
            free(w->w2.qown);
        }
    }
    free(cb->layers);
    free(cb->inv_freq);
    free(cb->kv);
    free(cb->kv8);
    free(cb->x);
    free(cb->xb);
    free(cb->xo);
    free(cb->qkv);
    free(cb->att_out);
    free(cb->h13);
    free(cb->h);
    free(cb->rope);
    free(cb->scores);
    free(cb->hot_list);
    free(cb->n_list);
    free(cb->seq_last);
    free(cb->cut);
    free(cb->share);
    free(cb->done_s);
    free(cb->cls_s);
    free(cb->pcut);
    free(cb->steal);
    cpu_team_free(cb->team);
    free(cb->att_blk);
    free(cb->att_rows);
    free(cb->att_mass);
    for (int a = 0; a < ACT_N; a++) free(cb->xq[a]);
    free(cb->xoq);
    free(cb);
}

static const be_ops cpu_ops = {
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

/* ----------------------------------------------------------- construction */

/* Buffers at least this big go on 2 MiB pages where the kernel allows it. */
#define HUGE_BYTES ((size_t)2 << 20)

/* Bytes alloc_floats takes for n floats (be_cpu_plan counts with it too). */
static size_t floats_bytes(size_t n) {
    size_t align = n * sizeof(float) >= HUGE_BYTES ? HUGE_BYTES : 64;
    size_t bytes = (n * sizeof(float) + align - 1) & ~(align - 1);
    return bytes ? bytes : 64;
}

static float *alloc_floats(cpu_backend *cb, size_t n) {
    /* 64-byte aligned for the vector units; zeroed so unused KV is finite.
     * Big ones (weights, the KV pool) are 2 MiB aligned and asked for huge
     * pages (transparent huge pages are often "madvise" only): a batch-32
     * step reads KV blocks scattered over the pool and every weight panel,
     * and with 4 KiB pages each 36 KB block took nine TLB entries. */
    size_t align = n * sizeof(float) >= HUGE_BYTES ? HUGE_BYTES : 64;
    size_t bytes = floats_bytes(n);
    float *p = aligned_alloc(align, bytes);
    if (p) {
#ifdef MADV_HUGEPAGE
        if (align == HUGE_BYTES) madvise(p, bytes, MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
        memset(p, 0, bytes);
        cb->bytes += bytes;
    }
    return p;
}

/* malloc, counted in cb->bytes (bookkeeping arrays; not zeroed). */
static void *alloc_bytes(cpu_backend *cb, size_t n) {
    void *p = malloc(n ? n : 1);
    if (p) cb->bytes += n;
    return p;
}

/* Bytes alloc_x8 takes for n bytes. */
static size_t x8_alloc_bytes(size_t n) { return (n + 63) & ~(size_t)63; }

/* The x8 arena: one buffer for all the x8 copies of a model's matrices,
 * cap bytes (the sum of x8_alloc_bytes over them), 2 MiB aligned with huge
 * pages asked for its whole 2 MiB pages. Why one: a matrix of a small
 * model is under 2 MiB (a 110M-shape layer's fused gate/up in Q4_K is
 * 1.8 MB), so copies of their own sat on 4 KiB pages, and batch-1 decode,
 * which streams every byte of them once a token, took a TLB miss every
 * 4 KiB (50 of a 110M Q4_K_M file's 68 MB). Not zeroed: the repack writes
 * every byte it hands out. */
static int x8_arena_new(cpu_backend *cb, size_t cap) {
    if (!cap) return CK_OK;
    void *p = NULL;
    if (posix_memalign(&p, HUGE_BYTES, cap)) return CK_ENOMEM;
#ifdef MADV_HUGEPAGE
    if (cap >= HUGE_BYTES)
        madvise(p, cap & ~(HUGE_BYTES - 1), MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
    cb->x8_arena = p;
    cb->x8_cap = cap;
    return CK_OK;
}

/* A buffer for an x8 copy of a matrix of n bytes, counted in cb->bytes:
 * the arena's next x8_alloc_bytes(n) (64-byte aligned), or, should the
 * arena not hold it (it is sized for every matrix, so only if the sizing
 * and the use disagree), a buffer of its own in *own. */
static void *alloc_x8(cpu_backend *cb, size_t n, void **own) {
    const size_t a = x8_alloc_bytes(n);
    *own = NULL;
    if (cb->x8_arena && cb->x8_cap - cb->x8_used >= a) {
        void *p = cb->x8_arena + cb->x8_used;
        cb->x8_used += a;
        cb->bytes += a;
        return p;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, a)) return NULL;
    cb->bytes += a;
    return *own = p;
}

/* Packs the (n, k) f32 rows in src into a buffer of its own (cpu_gemm.h),
 * run by the backend's kernels. */
static int pack(cpu_backend *cb, gemm_w *w, const float *src, int n, int k) {
    float *p = alloc_floats(cb, gemm_packed_floats(n, k));
    if (!p) return CK_ENOMEM;
    gemm_pack(w, p, src, n, k);
    w->kern = cb->gk;
    return CK_OK;
}

/* Convert tensors into consecutive rows of one f32 matrix. */
static int to_f32(float *dst, const model_tensor *t) { return quant_to_f32(t->type, t->data, dst, t->n); }

/* The kernel entry of an (n, k) weight tensor computed in its own bytes, or
 * NULL: f32/f16/bf16 (packed f32), or a row that is not whole blocks (the
 * conversion then reports the file's error). */
static const cpu_qtype *mat_qtype(const cpu_qdot *qd, const model_tensor *t, int k) {
    const cpu_qtype *q = cpu_qdot_type(qd, t->type);
    return q && k % q->block == 0 ? q : NULL;
}

/* The roles the construction and the plan walk alike: for each matrix its
 * tensor(s), shape and kind. f32 ones are packed (fused Q, K, V when all
 * three are); a quantized one is used in place. */
typedef struct mat_spec {
    const model_tensor *t; /* the tensor (for fused QKV: wq; wk and wv follow) */
    int n, k;
    const cpu_qtype *q; /* NULL: f32 packed */
} mat_spec;

/* The layer's matrices in order qkv[0..n_qkv), wo, w1, w3, w2; returns how
 * many (n_qkv + 4) and sets *n_qkv. */
static int layer_specs(const cpu_qdot *qd, const model *m, int l, mat_spec sp[7], int *n_qkv) {
    const model_config *c = &m->cfg;
    const model_layer *ml = &m->layers[l];
    const int D = c->dim, F = c->hidden_dim, QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    const cpu_qtype *qq = mat_qtype(qd, &ml->wq, D), *qk = mat_qtype(qd, &ml->wk, D),
                    *qv = mat_qtype(qd, &ml->wv, D);
    int n = 0;
    if (!qq && !qk && !qv) {
        sp[n++] = (mat_spec){&ml->wq, QD + 2 * KVD, D, NULL};
    } else {
        sp[n++] = (mat_spec){&ml->wq, QD, D, qq};
        sp[n++] = (mat_spec){&ml->wk, KVD, D, qk};
        sp[n++] = (mat_spec){&ml->wv, KVD, D, qv};
    }
    *n_qkv = n;
    sp[n++] = (mat_spec){&ml->wo, D, QD, mat_qtype(qd, &ml->wo, QD)};
    /* gate and up share their units (ffn_up): both quantized or both f32 */
    const cpu_qtype *q1 = mat_qtype(qd, &ml->w1, D), *q3 = mat_qtype(qd, &ml->w3, D);
    if (!q1 || !q3) q1 = q3 = NULL;
    sp[n++] = (mat_spec){&ml->w1, F, D, q1};
    sp[n++] = (mat_spec){&ml->w3, F, D, q3};
    sp[n++] = (mat_spec){&ml->w2, D, F, mat_qtype(qd, &ml->w2, F)};
    return n;
}

/* Bytes a matrix takes as the backend holds it: its packed f32 buffer, or
 * (quantized) its rows in the mapping, resident once read. */
static size_t spec_bytes(const mat_spec *sp) {
    if (!sp->q) return floats_bytes(gemm_packed_floats(sp->n, sp->k));
    return (size_t)sp->n * (size_t)(sp->k / sp->q->block) * (size_t)sp->q->block_bytes;
}

/* Bytes the backend holds for a matrix: spec_bytes, but an x8 copy as
 * alloc_x8 takes it (be_cpu_plan and make_mat count with it). */
static size_t held_bytes(const mat_spec *sp) {
    if (sp->q && sp->q->dot8) return x8_alloc_bytes(cpu_qdot_x8_bytes(sp->q, sp->n, sp->k));
    return spec_bytes(sp);
}

/* Bytes of one quantized input row of k elements for the formats, and the
 * most for any matrix: xq_stride per format (0: none). */
static void act_strides(const cpu_qdot *qd, const model *m, size_t stride[ACT_N]) {
    for (int a = 0; a < ACT_N; a++) stride[a] = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        mat_spec sp[7];
        int nq, n = layer_specs(qd, m, l, sp, &nq);
        for (int i = 0; i < n; i++) {
            if (!sp[i].q) continue;
            const int a = act_index(sp[i].q->act);
            size_t rb = qact_row_bytes(sp[i].q->act, sp[i].k);
            if (rb > stride[a]) stride[a] = rb;
        }
    }
}

/* Drops the pages of [p, p + n) that lie wholly inside it from this
 * process's resident set. Only for bytes of a GGUF file's mapping (read-only,
 * MAP_PRIVATE, never written): a later read faults them back in from the
 * file, so nothing is lost; on any other memory MADV_DONTNEED would zero it. */
static void drop_mapped(const model *m, const void *p, size_t n) {
    if (!model_weights_in_file_map(m)) return; /* not known to be a file mapping */
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    const uintptr_t b = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    const uintptr_t e = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
    if (e > b) (void)madvise((void *)b, e - b, MADV_DONTNEED); /* a hint: failure costs memory only */
}

/* Fills w from a spec: packs the f32 rows (tmp: scratch for the largest
 * one), points at the file's rows, or (a type with an x8 layout) repacks
 * them into a buffer of its own and drops the mapping's pages, so the copy
 * replaces the file's bytes in memory instead of adding to them. Counted
 * in cb->bytes as the plan counts them (held_bytes). */
static int make_mat(cpu_backend *cb, cpu_mat *w, const mat_spec *sp, float *tmp, const model_tensor *fused_k,
                    const model_tensor *fused_v, int kv_rows) {
    memset(w, 0, sizeof *w);
    if (sp->q) {
        w->q = (cpu_qmat){
            sp->t->data, sp->q, sp->n, sp->k, (size_t)(sp->k / sp->q->block) * sp->q->block_bytes, 0};
        if (!sp->q->dot8) {
            cb->bytes += spec_bytes(sp);
            return CK_OK;
        }
        const size_t bytes = spec_bytes(sp);
        void *p = alloc_x8(cb, cpu_qdot_x8_bytes(sp->q, sp->n, sp->k), &w->qown);
        if (!p) return CK_ENOMEM;
        int rc = cpu_qdot_repack8(sp->q, p, sp->t->data, sp->n, sp->k);
        if (rc) return rc; /* qown, if any, freed with the backend */
        w->q.data = p;
        w->q.x8 = 1;
        drop_mapped(cb->base.m, sp->t->data, bytes);
        return CK_OK;
    }
    int rc = to_f32(tmp, sp->t);
    if (!rc && fused_k) {
        const size_t q_rows = (size_t)(sp->n - 2 * kv_rows);
        if (!(rc = to_f32(tmp + q_rows * sp->k, fused_k)))
            rc = to_f32(tmp + (q_rows + kv_rows) * sp->k, fused_v);
    }
    return rc ? rc : pack(cb, &w->f, tmp, sp->n, sp->k);
}

/* Floats of the f32 scratch the construction converts matrices into: the
 * largest packed one (0 when every matrix is quantized). */
static size_t tmp_floats(const cpu_qdot *qd, const model *m) {
    size_t t = 0;
    const model_config *c = &m->cfg;
    if (!mat_qtype(qd, &m->wcls, c->dim)) t = (size_t)c->vocab_size * c->dim;
    for (int l = 0; l < c->n_layers; l++) {
        mat_spec sp[7];
        int nq, n = layer_specs(qd, m, l, sp, &nq);
        for (int i = 0; i < n; i++)
            if (!sp[i].q && (size_t)sp[i].n * sp[i].k > t) t = (size_t)sp[i].n * sp[i].k;
    }
    return t;
}

/* Size arithmetic that reports overflow instead of wrapping: a plan of
 * absurd options must fail, not come out small. */
typedef struct plan_acc {
    int over;
} plan_acc;

static size_t pmul(plan_acc *a, size_t x, size_t y) {
    size_t r;
    if (__builtin_mul_overflow(x, y, &r)) a->over = 1;
    return r;
}

static size_t padd(plan_acc *a, size_t x, size_t y) {
    size_t r;
    if (__builtin_add_overflow(x, y, &r)) a->over = 1;
    return r;
}

/* floats_bytes of x * y floats. */
static size_t pfloats(plan_acc *a, size_t x, size_t y) {
    size_t n = pmul(a, x, y);
    return n > SIZE_MAX / 8 ? (a->over = 1, 0) : floats_bytes(n);
}

static int cpu_options_ok(const model_config *c, const be_options *o) {
    return o->max_batch_tokens > 0 && o->n_kv_blocks > 0 && o->block_size > 0 && o->n_kv8_blocks >= 0 &&
           o->max_ctx >= 0 && o->max_ctx <= c->seq_len;
}

int be_cpu_default_threads(void) { return omp_get_num_procs(); }

/* Mirrors be_cpu_new allocation by allocation (a test holds the two equal). */
int be_cpu_plan(const model *m, const be_options *o, be_memory *p) {
    memset(p, 0, sizeof *p);
    const model_config *c = &m->cfg;
    if (!cpu_options_ok(c, o)) return CK_EINVAL;
    plan_acc a = {0};
    const int nt = o->n_threads > 0 ? o->n_threads : be_cpu_default_threads();
    const int ctx = o->max_ctx ? o->max_ctx : be_default_ctx(m);
    const size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t L = (size_t)c->n_layers, hd = (size_t)c->head_dim, T = (size_t)o->max_batch_tokens;
    const int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    const int qkv_dim = q_dim + 2 * kv_dim;
    const size_t max_blocks = ((size_t)ctx + (size_t)o->block_size - 1) / (size_t)o->block_size;
    p->max_ctx = ctx;
    p->n_threads = nt;
    /* weights: out_norm, the embedding when untied (an f32 copy, or the
     * file's quantized rows), the classifier, the layers, RoPE; packed f32
     * copies and mapped quantized bytes alike (spec_bytes) */
    cpu_qdot qd;
    cpu_qdot_init(&qd, CPU_ISA_C); /* which types are quantized does not depend on the ISA */
    size_t w = floats_bytes(D);
    const cpu_qtype *qemb = mat_qtype(&qd, &m->tok_emb, c->dim);
    if (!m->tied)
        w = padd(&a, w,
                 qemb ? spec_bytes(&(mat_spec){&m->tok_emb, c->vocab_size, c->dim, qemb})
                      : pfloats(&a, V, D));
    const mat_spec cls = {&m->wcls, c->vocab_size, c->dim, mat_qtype(&qd, &m->wcls, c->dim)};
    w = padd(&a, w, held_bytes(&cls));
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        mat_spec sp[7];
        int nq, n = layer_specs(&qd, m, l, sp, &nq);
        w = padd(&a, w, 2 * floats_bytes(D));
        for (int i = 0; i < n; i++) w = padd(&a, w, held_bytes(&sp[i]));
        /* the optional ones, where present */
        if (ml->bq.n || ml->bk.n || ml->bv.n) w = padd(&a, w, floats_bytes((size_t)qkv_dim));
        if (ml->q_norm.n) w = padd(&a, w, floats_bytes(hd));
        if (ml->k_norm.n) w = padd(&a, w, floats_bytes(hd));
    }
    p->weights = padd(&a, w, floats_bytes(hd / 2));
    /* KV pools */
    const size_t kv_block_floats = pmul(&a, pmul(&a, L * 2, (size_t)o->block_size), (size_t)kv_dim);
    p->kv = pfloats(&a, (size_t)o->n_kv_blocks, kv_block_floats);
    kvq_shape shape = {c->n_layers, o->block_size, kv_dim};
    p->kv8 = o->n_kv8_blocks > 0 ? pmul(&a, (size_t)o->n_kv8_blocks, kvq_block_bytes(&shape)) : 0;
    /* batch buffers: x, xb, xo; qkv; att_out; h13; h; rope; hot_list, n_list, seq_last */
    size_t act = 3 * pfloats(&a, T, D);
    act = padd(&a, act, pfloats(&a, T, (size_t)qkv_dim));
    act = padd(&a, act, pfloats(&a, T, (size_t)q_dim));
    act = padd(&a, act, pfloats(&a, T, 2 * F));
    act = padd(&a, act, pfloats(&a, T, F));
    act = padd(&a, act, pfloats(&a, T, hd));
    act = padd(&a, act, pmul(&a, pmul(&a, T, max_blocks), sizeof(int32_t)));
    act = padd(&a, act, 2 * T * sizeof(int32_t));
    /* the products' quantized input rows, and the classifier's */
    size_t xs[ACT_N];
    act_strides(&qd, m, xs);
    for (int i = 0; i < ACT_N; i++)
        if (xs[i]) act = padd(&a, act, pfloats(&a, T, (xs[i] + 3) / 4));
    if (cls.q) act = padd(&a, act, pfloats(&a, T, (qact_row_bytes(cls.q->act, c->dim) + 3) / 4));
    p->activations = act;
    /* per thread: scores (n_heads, ctx) + q_dim; attention's block pointers,
     * rows and mass; the split bookkeeping (cut, share, done_s, cls_s, pcut,
     * steal) */
    const size_t scores = (size_t)c->n_heads * (size_t)ctx + (size_t)q_dim;
    const size_t per_blk = sizeof(const float *) + sizeof(int) + sizeof(float);
    p->scratch_per_thread = padd(&a, pmul(&a, scores, sizeof(float)), pmul(&a, max_blocks, per_blk));
    size_t sc = pfloats(&a, (size_t)nt, scores);
    sc = padd(&a, sc, pmul(&a, pmul(&a, (size_t)nt, max_blocks), per_blk));
    sc = padd(&a, sc, 2 * ((size_t)nt + 1) * sizeof(int) + 3 * (size_t)nt * sizeof(double));
    sc = padd(&a, sc, (size_t)nt * sizeof(cpu_steal));
    p->scratch = sc;
    size_t t = padd(&a, p->weights, p->kv);
    t = padd(&a, t, p->kv8);
    t = padd(&a, t, p->activations);
    p->total = padd(&a, t, p->scratch);
    return a.over ? CK_ERANGE : CK_OK;
}

int be_cpu_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen) {
    *out = NULL;
    const model_config *c = &m->cfg;
    be_memory plan;
    int prc = be_cpu_plan(m, o, &plan);
    if (prc) {
        snprintf(err, errlen, "cpu backend: invalid options (batch %d, blocks %d, block size %d, ctx %d%s)",
                 o->max_batch_tokens, o->n_kv_blocks, o->block_size, o->max_ctx,
                 prc == CK_ERANGE ? ": sizes overflow" : "");
        return CK_EINVAL;
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return CK_ENOMEM;
    backend *b = &cb->base;
    b->ops = &cpu_ops;
    b->m = m;
    b->opt = *o;
    b->opt.max_ctx = plan.max_ctx;
    cb->n_threads = plan.n_threads;
    b->opt.n_threads = cb->n_threads;
    cb->q_dim = c->n_heads * c->head_dim;
    cb->kv_dim = c->n_kv_heads * c->head_dim;
    cb->qkv_dim = cb->q_dim + 2 * cb->kv_dim;
    cb->max_ctx = b->opt.max_ctx;
    cb->scores_per_thread = (size_t)c->n_heads * (size_t)cb->max_ctx + (size_t)cb->q_dim;
    b->kv_block_floats = (size_t)c->n_layers * 2 * (size_t)o->block_size * (size_t)cb->kv_dim;
    cb->shape = (kvq_shape){c->n_layers, o->block_size, cb->kv_dim};
    b->kv8_block_bytes = kvq_block_bytes(&cb->shape);
    const size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t T = (size_t)o->max_batch_tokens;
    int rc = CK_ENOMEM;

    /* Kernels for this CPU, or the level CONFKV_CPU_KERNELS forces. */
    char why[160] = "";
    int isa = cpu_isa_select(why, sizeof why);
    if (isa < 0) {
        snprintf(err, errlen, "cpu backend: %s", why);
        free(cb);
        return isa;
    }
    cb->isa = isa;
    cb->gk = gemm_kernels_for(isa);
    cpu_qdot_init(&cb->qd, isa);

    /* Each f32 matrix goes to f32 rows in tmp (the largest one's size), then
     * is packed into its own buffer; quantized ones stay where they are. */
    size_t tmp_n = tmp_floats(&cb->qd, m);
    float *tmp = tmp_n ? malloc(tmp_n * sizeof *tmp) : NULL;
    if ((tmp_n && !tmp) || !(cb->out_norm = alloc_floats(cb, D))) goto fail;
    if ((rc = to_f32(cb->out_norm, &m->out_norm))) goto fail;
    const cpu_qtype *qemb = mat_qtype(&cb->qd, &m->tok_emb, c->dim);
    uint64_t erb = 0;
    if ((rc = quant_row_bytes(m->tok_emb.type, (uint64_t)c->dim, &erb))) goto fail;
    cb->emb_row_bytes = (size_t)erb;
    if (!m->tied && !qemb) {
        rc = CK_ENOMEM;
        if (!(cb->emb = alloc_floats(cb, V * D))) goto fail;
        if ((rc = to_f32(cb->emb, &m->tok_emb))) goto fail;
    } else if (!m->tied) { /* rows read from the mapping at lookup */
        cb->bytes += spec_bytes(&(mat_spec){&m->tok_emb, c->vocab_size, c->dim, qemb});
    }
    const mat_spec cls = {&m->wcls, c->vocab_size, c->dim, mat_qtype(&cb->qd, &m->wcls, c->dim)};
    /* the x8 arena, sized for every matrix that make_mat repacks */
    size_t x8_cap = cls.q && cls.q->dot8 ? held_bytes(&cls) : 0;
    for (int l = 0; l < c->n_layers; l++) {
        mat_spec sp[7];
        int nq, n = layer_specs(&cb->qd, m, l, sp, &nq);
        for (int i = 0; i < n; i++)
            if (sp[i].q && sp[i].q->dot8) x8_cap += held_bytes(&sp[i]);
    }
    if ((rc = x8_arena_new(cb, x8_cap))) goto fail;
    if ((rc = make_mat(cb, &cb->wcls, &cls, tmp, NULL, NULL, 0))) goto fail;
    rc = CK_ENOMEM;
    if (!(cb->layers = calloc((size_t)c->n_layers, sizeof *cb->layers))) goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        cpu_layer *w = &cb->layers[l];
        rc = CK_ENOMEM;
        if (!(w->attn_norm = alloc_floats(cb, D)) || !(w->ffn_norm = alloc_floats(cb, D))) goto fail;
        if ((ml->bq.n || ml->bk.n || ml->bv.n) && !(w->bqkv = alloc_floats(cb, (size_t)cb->qkv_dim)))
            goto fail;
        if ((ml->q_norm.n && !(w->q_norm = alloc_floats(cb, (size_t)c->head_dim))) ||
            (ml->k_norm.n && !(w->k_norm = alloc_floats(cb, (size_t)c->head_dim))))
            goto fail;
        if ((ml->bq.n && (rc = to_f32(w->bqkv, &ml->bq))) ||
            (ml->bk.n && (rc = to_f32(w->bqkv + cb->q_dim, &ml->bk))) ||
            (ml->bv.n && (rc = to_f32(w->bqkv + cb->q_dim + cb->kv_dim, &ml->bv))) ||
            (ml->q_norm.n && (rc = to_f32(w->q_norm, &ml->q_norm))) ||
            (ml->k_norm.n && (rc = to_f32(w->k_norm, &ml->k_norm))))
            goto fail;
        if ((rc = to_f32(w->attn_norm, &ml->attn_norm)) || (rc = to_f32(w->ffn_norm, &ml->ffn_norm)))
            goto fail;
        mat_spec sp[7];
        int n = layer_specs(&cb->qd, m, l, sp, &w->n_qkv);
        cpu_mat *dst[7] = {&w->qkv[0], &w->qkv[1], &w->qkv[2]};
        dst[w->n_qkv] = &w->wo, dst[w->n_qkv + 1] = &w->w1, dst[w->n_qkv + 2] = &w->w3,
        dst[w->n_qkv + 3] = &w->w2;
        for (int i = 0; i < n; i++) {
            const int fused = i == 0 && w->n_qkv == 1;
            if ((rc = make_mat(cb, dst[i], &sp[i], tmp, fused ? &ml->wk : NULL, fused ? &ml->wv : NULL,
                               cb->kv_dim)))
                goto fail;
            cb->layer_bytes += spec_bytes(&sp[i]);
        }
    }
    free(tmp);
    tmp = NULL;
    /* the products' quantized input rows (T each), and the classifier's */
    act_strides(&cb->qd, m, cb->xq_stride);
    rc = CK_ENOMEM;
    for (int i = 0; i < ACT_N; i++)
        if (cb->xq_stride[i] &&
            !(cb->xq[i] = (unsigned char *)alloc_floats(cb, T * ((cb->xq_stride[i] + 3) / 4))))
            goto fail;
    if (cls.q) {
        cb->xoq_stride = qact_row_bytes(cls.q->act, c->dim);
        if (!(cb->xoq = (unsigned char *)alloc_floats(cb, T * ((cb->xoq_stride + 3) / 4)))) goto fail;
    }
    rc = CK_ENOMEM;
    if (!(cb->inv_freq = alloc_floats(cb, (size_t)c->head_dim / 2))) goto fail;
    if ((rc = model_rope_freqs(m, cb->inv_freq, &cb->rope_mscale))) goto fail;
    rc = CK_ENOMEM;
    cb->rope_neox = c->rope_style == ARCH_ROPE_NEOX;
    if (!(cb->kv = alloc_floats(cb, (size_t)o->n_kv_blocks * b->kv_block_floats)) ||
        !(cb->x = alloc_floats(cb, T * D)) || !(cb->xb = alloc_floats(cb, T * D)) ||
        !(cb->xo = alloc_floats(cb, T * D)) || !(cb->qkv = alloc_floats(cb, T * (size_t)cb->qkv_dim)) ||
        !(cb->att_out = alloc_floats(cb, T * (size_t)cb->q_dim)) ||
        !(cb->h13 = alloc_floats(cb, T * 2 * F)) || !(cb->h = alloc_floats(cb, T * F)) ||
        !(cb->rope = alloc_floats(cb, T * (size_t)c->head_dim)) ||
        !(cb->scores = alloc_floats(cb, (size_t)cb->n_threads * cb->scores_per_thread)))
        goto fail;
    cb->max_blocks = (cb->max_ctx + o->block_size - 1) / o->block_size;
    if (!(cb->hot_list = alloc_bytes(cb, T * (size_t)cb->max_blocks * sizeof *cb->hot_list)) ||
        !(cb->n_list = alloc_bytes(cb, T * sizeof *cb->n_list)) ||
        !(cb->seq_last = alloc_bytes(cb, T * sizeof *cb->seq_last)) ||
        !(cb->cut = alloc_bytes(cb, ((size_t)cb->n_threads + 1) * sizeof *cb->cut)) ||
        !(cb->share = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->share)) ||
        !(cb->done_s = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->done_s)) ||
        !(cb->cls_s = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->cls_s)) ||
        !(cb->pcut = alloc_bytes(cb, ((size_t)cb->n_threads + 1) * sizeof *cb->pcut)) ||
        !(cb->steal = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->steal)))
        goto fail;
    /* OMP_THREAD_LIMIT caps the team as it caps the OpenMP regions */
    const int lim = omp_get_thread_limit();
    if (cpu_team_new(cb->n_threads < lim ? cb->n_threads : lim, &cb->team)) goto fail;
    for (int p = 0; p < cb->n_threads; p++) cb->share[p] = 1.0 / cb->n_threads;
    cb->ashape = (attn_shape){c->n_heads, c->head_dim, cb->kv_dim, o->block_size, c->n_heads / c->n_kv_heads};
    cb->attn = attn_f32_kernel(&cb->ashape, cb->isa, &cb->attn_name);
    const size_t nb = (size_t)cb->n_threads * cb->max_blocks;
    if (!(cb->att_blk = alloc_bytes(cb, nb * sizeof *cb->att_blk)) ||
        !(cb->att_rows = alloc_bytes(cb, nb * sizeof *cb->att_rows)) ||
        !(cb->att_mass = alloc_bytes(cb, nb * sizeof *cb->att_mass)))
        goto fail;
    if (o->n_kv8_blocks > 0) {
        size_t bytes = (size_t)o->n_kv8_blocks * b->kv8_block_bytes;
        if (!(cb->kv8 = calloc(bytes, 1))) goto fail;
        cb->bytes += bytes;
    }
    *out = b;
    return CK_OK;
fail:
    free(tmp);
    snprintf(err, errlen, "cpu backend: %s while preparing weights and buffers", ck_strerror(rc));
    cpu_destroy(b);
    return rc;
}

/* ------------------------------------------------------------ reporting */

uint64_t be_cpu_step_bytes(const model *m) {
    const model_config *c = &m->cfg;
    cpu_qdot qd;
    cpu_qdot_init(&qd, CPU_ISA_C);
    uint64_t b = 0, t = 0;
    /* the classifier and the layers' matrices as the products read them;
     * the vectors (norms, biases) in f32 */
    const mat_spec cls = {&m->wcls, c->vocab_size, c->dim, mat_qtype(&qd, &m->wcls, c->dim)};
    b += cls.q ? spec_bytes(&cls) : 4 * (uint64_t)c->vocab_size * (uint64_t)c->dim;
    for (int l = 0; l < c->n_layers; l++) {
        mat_spec sp[7];
        int nq, n = layer_specs(&qd, m, l, sp, &nq);
        for (int i = 0; i < n; i++)
            b += sp[i].q ? spec_bytes(&sp[i]) : 4 * (uint64_t)sp[i].n * (uint64_t)sp[i].k;
        const model_tensor *x[MODEL_LAYER_EXTRAS];
        model_layer_extras(&m->layers[l], x);
        for (int i = 0; i < MODEL_LAYER_EXTRAS; i++) t += x[i]->n;
        t += 2 * (uint64_t)c->dim;
    }
    return b + 4 * (t + (uint64_t)c->dim);
}

int be_cpu_kernels(const backend *b, char *buf, size_t len) {
    if (!b || b->ops != &cpu_ops) return snprintf(buf, len, "%s", b ? b->ops->name : "none");
    const cpu_backend *cb = (const cpu_backend *)b;
    int n = snprintf(buf, len, "%s (f32 %s, attention %s", cpu_isa_name(cb->isa), cb->gk->isa,
                     cb->attn ? cb->attn_name : "general");
    int seen[CPU_QDOT_MAX_TYPES] = {0};
    const cpu_mat *all[2] = {&cb->wcls, NULL};
    for (int l = -1; l < b->m->cfg.n_layers; l++) {
        const cpu_mat *mats[8];
        int k = 0;
        if (l < 0)
            mats[k++] = all[0];
        else {
            const cpu_layer *w = &cb->layers[l];
            for (int i = 0; i < w->n_qkv; i++) mats[k++] = &w->qkv[i];
            mats[k++] = &w->wo, mats[k++] = &w->w1, mats[k++] = &w->w3, mats[k++] = &w->w2;
        }
        for (int i = 0; i < k; i++) {
            const cpu_qtype *t = mats[i]->q.t;
            if (!t) continue;
            const int ti = (int)(t - cb->qd.t);
            if (ti < 0 || ti >= CPU_QDOT_MAX_TYPES || seen[ti]) continue;
            seen[ti] = 1;
            if (n >= 0 && (size_t)n < len)
                n += snprintf(buf + n, len - (size_t)n, ", %s %s%s%s%s", quant_type_name(t->type), t->impl,
                              t->dotn ? "+rows" : "", t->dot8 ? "+x8 " : "", t->dot8 ? t->x8_impl : "");
        }
    }
    if (n >= 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, ")");
    return n;
}
