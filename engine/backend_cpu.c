/* backend_cpu.c - the CPU backend: the reference forward pass (backend.h).
 *
 * Llama as llama2.c's run.c computes it (RMSNorm, RoPE on adjacent pairs,
 * grouped-query attention, SwiGLU), but over a batch of many tokens from many
 * sequences, so every projection is one matrix-matrix product, and over the
 * paged KV cache, so attention walks each sequence's block table.
 *
 * Why f32 at load: the projections go to OpenBLAS's sgemm, by far the fastest
 * kernel on these CPUs for batches above one token, and it takes f32 only.
 * F16/BF16/Q8_0 weights are converted once when the backend is created; the
 * price is memory (4 bytes a weight) and, at batch 1, bandwidth. The Q, K and
 * V projections are fused into one matrix, and the gate and up projections
 * into another, so a layer runs four products instead of seven.
 *
 * Threads: OpenMP (the same pool OpenBLAS's OpenMP build uses). Attention
 * runs one (token, head) pair per work item. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "backend.h"
#include "ck_err.h"
#include "kv.h"
#include "kvq.h"
#include "quant.h"

typedef struct cpu_layer {
    float *attn_norm; /* (dim) */
    float *wqkv;      /* (q_dim + 2 * kv_dim, dim): wq rows, then wk, then wv */
    float *wo;        /* (dim, q_dim) */
    float *ffn_norm;  /* (dim) */
    float *w13;       /* (2 * hidden_dim, dim): gate rows, then up rows */
    float *w2;        /* (dim, hidden_dim) */
} cpu_layer;

typedef struct cpu_backend {
    backend base;
    int n_threads;
    int q_dim, kv_dim, qkv_dim, max_ctx;
    /* weights, f32, owned */
    float *emb;       /* (vocab, dim) */
    float *out_norm;  /* (dim) */
    float *wcls;      /* (vocab, dim); == emb when tied */
    cpu_layer *layers;/* (n_layers) */
    float *inv_freq;  /* (head_dim / 2) RoPE frequencies */
    /* KV storage */
    float *kv;        /* (n_kv_blocks, kv_block_floats) */
    unsigned char *kv8; /* (n_kv8_blocks, kv8_block_bytes) int8 blocks, kvq.h layout */
    kvq_shape shape;
    /* activations, sized for max_batch_tokens (T) */
    float *x;         /* (T, dim) residual stream */
    float *xb;        /* (T, dim) normed input of a projection */
    float *qkv;       /* (T, qkv_dim) */
    float *att_out;   /* (T, q_dim) */
    float *h13;       /* (T, 2 * hidden_dim) */
    float *h;         /* (T, hidden_dim) */
    float *rope;      /* (T, head_dim) cos, sin interleaved per pair */
    float *scores;    /* (n_threads, max_ctx) attention scores, one row per thread */
    int32_t *hot_list;/* (T, max_blocks) per sequence of the batch: its resident logical
                         blocks in order, so attention skips the others without looking */
    int32_t *n_list;  /* (T) entries in each list */
    int max_blocks;   /* max_ctx / block_size, rounded up */
    size_t bytes;     /* everything above */
} cpu_backend;

/* ------------------------------------------------------------ the kernels */

/* One row of w against x (also every attention score): 4 independent
 * 8-wide accumulators keep the FMA units busy while the row streams in. */
static inline float row_dot(const float *restrict w, const float *restrict x, int K) {
#ifdef __AVX2__
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 16), _mm256_loadu_ps(x + k + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 24), _mm256_loadu_ps(x + k + 24), a3);
    }
    for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
    __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float s = _mm_cvtss_f32(h);
    for (; k < K; k++) s += w[k] * x[k];
    return s;
#else
    float s = 0.0f;
    for (int k = 0; k < K; k++) s += w[k] * x[k];
    return s;
#endif
}

/* y (M, N) = x (M, K) . w (N, K)^T + beta * y. This is where almost all the
 * time goes; one place to change the BLAS or write a kernel.
 * One token (decode at batch 1) is a matrix-vector product bound by memory
 * bandwidth: our own kernel streams the rows, split across threads when the
 * matrix is big enough to pay for waking them. More tokens go to sgemm. */
static void matmul(float *y, const float *x, const float *w, int M, int N, int K, float beta,
                   int threads) {
    if (M == 1) {
        int par = (size_t)N * K >= (1u << 16) ? threads : 1;
#pragma omp parallel for num_threads(par) schedule(static)
        for (int n = 0; n < N; n++) {
            float d = row_dot(w + (size_t)n * K, x, K);
            y[n] = beta == 0.0f ? d : d + beta * y[n];
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, beta, y, N);
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


/* Where logical block j of a view lives: f32 pointer, or int8 block. */
typedef struct blk_ref {
    const float *f;          /* K of this layer and head (V at + block_size * kv_dim) */
    const int8_t *q;         /* int8 K of this layer (V at + block_size * kv_dim) */
    const uint16_t *ks, *vs; /* f16 scales: per channel (this head's), per token */
} blk_ref;

static int block_ref(const cpu_backend *cb, const be_seq_view *v, int j, int layer, int kv_head,
                     blk_ref *r) {
    const int bs = cb->base.opt.block_size, hd = cb->base.m->cfg.head_dim, kvd = cb->kv_dim;
    int b = v->blocks[j];
    if (b >= 0) {
        r->f = cb->kv + (size_t)b * cb->base.kv_block_floats + (size_t)layer * 2 * bs * kvd +
               (size_t)kv_head * hd;
        r->q = NULL;
        return 1;
    }
    int b8 = v->blocks8 ? v->blocks8[j] : KV_NONE;
    if (b8 < 0) return 0;
    const unsigned char *base = cb->kv8 + (size_t)b8 * cb->base.kv8_block_bytes +
                                (size_t)layer * kvq_layer_bytes(&cb->shape);
    r->f = NULL;
    r->q = (const int8_t *)base + (size_t)kv_head * hd;
    const uint16_t *sc = (const uint16_t *)(base + 2 * (size_t)bs * kvd);
    r->ks = sc + (size_t)kv_head * hd;
    r->vs = sc + kvd;
    return 1;
}

/* One query head of one token over its sequence's hot blocks (f32 or int8).
 * Scores are kept in att[] in block order, so the two passes agree. */
static void attend_one(const cpu_backend *cb, int layer, const float *q, float *out, int pos,
                       int kv_head, const be_seq_view *v, const int32_t *list, int n_list,
                       float *att, float mass_scale) {
    const int bs = cb->base.opt.block_size, hd = cb->base.m->cfg.head_dim, kvd = cb->kv_dim;
    const float scale = sqrtf((float)hd);
    int last = pos / bs;
    if (last >= v->n_blocks) last = v->n_blocks - 1;
    float qs[hd];
    int n = 0;
    float mx = -INFINITY;
    blk_ref r;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        block_ref(cb, v, j, layer, kv_head, &r);
        int tn = j == pos / bs ? pos - j * bs + 1 : bs;
        if (r.f) {
            for (int t = 0; t < tn; t++) {
                float s = row_dot(q, r.f + (size_t)t * kvd, hd) / scale;
                att[n++] = s;
                if (s > mx) mx = s;
            }
        } else {
            /* k = k8 * ks per channel: fold the scales into the query once. */
            for (int i = 0; i < hd; i++) qs[i] = q[i] * quant_f16_to_f32(r.ks[i]);
            for (int t = 0; t < tn; t++) {
                const int8_t *k8 = r.q + (size_t)t * kvd;
                float s = 0.0f;
                for (int i = 0; i < hd; i++) s += qs[i] * (float)k8[i];
                s /= scale;
                att[n++] = s;
                if (s > mx) mx = s;
            }
        }
    }
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        att[i] = expf(att[i] - mx);
        sum += att[i];
    }
    for (int i = 0; i < n; i++) att[i] /= sum;
    /* Accumulate in a local row the compiler knows nothing else points to,
     * so the loops below vectorise. */
    float acc[hd];
    for (int i = 0; i < hd; i++) acc[i] = 0.0f;
    n = 0;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        block_ref(cb, v, j, layer, kv_head, &r);
        int tn = j == pos / bs ? pos - j * bs + 1 : bs;
        float m = 0.0f;
        if (r.f) {
            const float *val = r.f + (size_t)bs * kvd;
            for (int t = 0; t < tn; t++) {
                float a = att[n++];
                const float *restrict vt = val + (size_t)t * kvd;
                for (int i = 0; i < hd; i++) acc[i] += a * vt[i];
                m += a;
            }
        } else {
            const int8_t *v8 = r.q + (size_t)bs * kvd;
            for (int t = 0; t < tn; t++) {
                float a = att[n++];
                float av = a * quant_f16_to_f32(r.vs[t]);
                const int8_t *restrict vt = v8 + (size_t)t * kvd;
                for (int i = 0; i < hd; i++) acc[i] += av * (float)vt[i];
                m += a;
            }
        }
        if (v->mass) {
#pragma omp atomic
            v->mass[j] += m * mass_scale;
        }
    }
    memcpy(out, acc, (size_t)hd * sizeof *out);
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
        if (j >= v->n_blocks || v->blocks[j] < 0 || v->blocks[j] >= b->opt.n_kv_blocks)
            return CK_EINVAL;
        if (v->blocks8) /* int8 blocks must exist; the forward only reads them */
            for (int k = 0; k < v->n_blocks; k++)
                if (v->blocks8[k] >= b->opt.n_kv8_blocks) return CK_EINVAL;
    }
    /* rows 0..n_out-1, each once (a duplicate would leave a row unwritten) */
    return n_out == bt->n_out ? CK_OK : CK_EINVAL;
}

static int cpu_forward(backend *b, const be_batch *bt, float *logits) {
    cpu_backend *cb = (cpu_backend *)b;
    const model_config *c = &b->m->cfg;
    int rc = cpu_check_batch(cb, bt);
    if (rc) return rc;
    const int T = bt->n_tokens, D = c->dim, F = c->hidden_dim, hd = c->head_dim;
    const int QD = cb->q_dim, KVD = cb->kv_dim, QKV = cb->qkv_dim, bs = b->opt.block_size;
    const int gqa = c->n_heads / c->n_kv_heads;
    if (T == 0) return CK_OK;

    for (int i = 0; i < T; i++) {
        memcpy(cb->x + (size_t)i * D, cb->emb + (size_t)bt->token[i] * D, (size_t)D * sizeof(float));
        float *cs = cb->rope + (size_t)i * hd;
        for (int k = 0; k < hd / 2; k++) {
            float val = bt->pos[i] * cb->inv_freq[k];
            cs[2 * k] = cosf(val);
            cs[2 * k + 1] = sinf(val);
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
    /* Parallel regions only when there is enough work to pay for waking
     * threads: a tiny model at batch 1 runs faster on one. */
    const int par = (size_t)T * c->n_heads * 64 >= 4096 ? cb->n_threads : 1;

    for (int l = 0; l < c->n_layers; l++) {
        const cpu_layer *w = &cb->layers[l];
        for (int i = 0; i < T; i++)
            rmsnorm(cb->xb + (size_t)i * D, cb->x + (size_t)i * D, w->attn_norm, D, c->norm_eps);
        matmul(cb->qkv, cb->xb, w->wqkv, T, QKV, D, 0.0f, cb->n_threads);
        for (int i = 0; i < T; i++) {
            float *q = cb->qkv + (size_t)i * QKV;
            const float *cs = cb->rope + (size_t)i * hd;
            rope_rotate(q, cs, hd, c->n_heads);
            rope_rotate(q + QD, cs, hd, c->n_kv_heads);
            const be_seq_view *v = &bt->seqs[bt->seq[i]];
            int p = bt->pos[i];
            float *dst = cb->kv + (size_t)v->blocks[p / bs] * b->kv_block_floats +
                         (size_t)l * 2 * bs * KVD + (size_t)(p % bs) * KVD;
            memcpy(dst, q + QD, (size_t)KVD * sizeof(float));
            memcpy(dst + (size_t)bs * KVD, q + QD + KVD, (size_t)KVD * sizeof(float));
        }
#pragma omp parallel for num_threads(par) schedule(dynamic, 1)
        for (int w_ = 0; w_ < T * c->n_heads; w_++) {
            int i = w_ / c->n_heads, h = w_ % c->n_heads;
            float *att = cb->scores + (size_t)omp_get_thread_num() * cb->max_ctx;
            int q = bt->seq[i];
            attend_one(cb, l, cb->qkv + (size_t)i * QKV + (size_t)h * hd,
                       cb->att_out + (size_t)i * QD + (size_t)h * hd, bt->pos[i], h / gqa,
                       &bt->seqs[q], cb->hot_list + (size_t)q * cb->max_blocks, cb->n_list[q], att,
                       mass_scale);
        }
        matmul(cb->x, cb->att_out, w->wo, T, D, QD, 1.0f, cb->n_threads);
        for (int i = 0; i < T; i++)
            rmsnorm(cb->xb + (size_t)i * D, cb->x + (size_t)i * D, w->ffn_norm, D, c->norm_eps);
        matmul(cb->h13, cb->xb, w->w13, T, 2 * F, D, 0.0f, cb->n_threads);
        for (int i = 0; i < T; i++) {
            const float *g = cb->h13 + (size_t)i * 2 * F, *u = g + F;
            float *o = cb->h + (size_t)i * F;
            for (int k = 0; k < F; k++) o[k] = g[k] * (1.0f / (1.0f + expf(-g[k]))) * u[k];
        }
        matmul(cb->x, cb->h, w->w2, T, D, F, 1.0f, cb->n_threads);
    }
    /* Classifier only for the rows asked for (a prefill chunk needs one). */
    for (int i = 0; i < T; i++) {
        int r = bt->out_row[i];
        if (r >= 0) rmsnorm(cb->xb + (size_t)r * D, cb->x + (size_t)i * D, cb->out_norm, D, c->norm_eps);
    }
    if (bt->n_out) matmul(logits, cb->xb, cb->wcls, bt->n_out, c->vocab_size, D, 0.0f, cb->n_threads);
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
    if (cb->wcls != cb->emb) free(cb->wcls);
    free(cb->emb);
    free(cb->out_norm);
    if (cb->layers) {
        for (int l = 0; l < b->m->cfg.n_layers; l++) {
            cpu_layer *w = &cb->layers[l];
            free(w->attn_norm);
            free(w->wqkv);
            free(w->wo);
            free(w->ffn_norm);
            free(w->w13);
            free(w->w2);
        }
    }
    free(cb->layers);
    free(cb->inv_freq);
    free(cb->kv);
    free(cb->kv8);
    free(cb->x);
    free(cb->xb);
    free(cb->qkv);
    free(cb->att_out);
    free(cb->h13);
    free(cb->h);
    free(cb->rope);
    free(cb->scores);
    free(cb->hot_list);
    free(cb->n_list);
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

static float *alloc_floats(cpu_backend *cb, size_t n) {
    /* 64-byte aligned for the vector units; zeroed so unused KV is finite. */
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) {
        memset(p, 0, bytes);
        cb->bytes += bytes;
    }
    return p;
}

/* Convert tensors into consecutive rows of one f32 matrix. */
static int to_f32(float *dst, const model_tensor *t) {
    return quant_to_f32(t->type, t->data, dst, t->n);
}

int be_cpu_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen) {
    *out = NULL;
    const model_config *c = &m->cfg;
    if (o->max_batch_tokens <= 0 || o->n_kv_blocks <= 0 || o->block_size <= 0 || o->n_kv8_blocks < 0 ||
        o->max_ctx < 0 || o->max_ctx > c->seq_len) {
        snprintf(err, errlen, "cpu backend: invalid options (batch %d, blocks %d, block size %d, ctx %d)",
                 o->max_batch_tokens, o->n_kv_blocks, o->block_size, o->max_ctx);
        return CK_EINVAL;
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return CK_ENOMEM;
    backend *b = &cb->base;
    b->ops = &cpu_ops;
    b->m = m;
    b->opt = *o;
    if (!b->opt.max_ctx) b->opt.max_ctx = c->seq_len;
    cb->n_threads = o->n_threads > 0 ? o->n_threads : omp_get_num_procs();
    b->opt.n_threads = cb->n_threads;
    cb->q_dim = c->n_heads * c->head_dim;
    cb->kv_dim = c->n_kv_heads * c->head_dim;
    cb->qkv_dim = cb->q_dim + 2 * cb->kv_dim;
    cb->max_ctx = b->opt.max_ctx;
    b->kv_block_floats = (size_t)c->n_layers * 2 * (size_t)o->block_size * (size_t)cb->kv_dim;
    cb->shape = (kvq_shape){c->n_layers, o->block_size, cb->kv_dim};
    b->kv8_block_bytes = kvq_block_bytes(&cb->shape);
    const size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t T = (size_t)o->max_batch_tokens;
    int rc = CK_ENOMEM;

    if (!(cb->emb = alloc_floats(cb, V * D)) || !(cb->out_norm = alloc_floats(cb, D))) goto fail;
    if ((rc = to_f32(cb->emb, &m->tok_emb)) || (rc = to_f32(cb->out_norm, &m->out_norm))) goto fail;
    if (m->tied) {
        cb->wcls = cb->emb;
    } else {
        rc = CK_ENOMEM;
        if (!(cb->wcls = alloc_floats(cb, V * D))) goto fail;
        if ((rc = to_f32(cb->wcls, &m->wcls))) goto fail;
    }
    rc = CK_ENOMEM;
    if (!(cb->layers = calloc((size_t)c->n_layers, sizeof *cb->layers))) goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        cpu_layer *w = &cb->layers[l];
        rc = CK_ENOMEM;
        if (!(w->attn_norm = alloc_floats(cb, D)) || !(w->ffn_norm = alloc_floats(cb, D)) ||
            !(w->wqkv = alloc_floats(cb, (size_t)cb->qkv_dim * D)) ||
            !(w->wo = alloc_floats(cb, D * (size_t)cb->q_dim)) ||
            !(w->w13 = alloc_floats(cb, 2 * F * D)) || !(w->w2 = alloc_floats(cb, D * F)))
            goto fail;
        if ((rc = to_f32(w->attn_norm, &ml->attn_norm)) || (rc = to_f32(w->ffn_norm, &ml->ffn_norm)) ||
            (rc = to_f32(w->wqkv, &ml->wq)) ||
            (rc = to_f32(w->wqkv + (size_t)cb->q_dim * D, &ml->wk)) ||
            (rc = to_f32(w->wqkv + (size_t)(cb->q_dim + cb->kv_dim) * D, &ml->wv)) ||
            (rc = to_f32(w->wo, &ml->wo)) || (rc = to_f32(w->w13, &ml->w1)) ||
            (rc = to_f32(w->w13 + F * D, &ml->w3)) || (rc = to_f32(w->w2, &ml->w2)))
            goto fail;
    }
    rc = CK_ENOMEM;
    if (!(cb->inv_freq = alloc_floats(cb, (size_t)c->head_dim / 2))) goto fail;
    for (int k = 0; k < c->head_dim / 2; k++)
        cb->inv_freq[k] = 1.0f / powf(c->rope_theta, (float)(2 * k) / (float)c->head_dim);
    if (!(cb->kv = alloc_floats(cb, (size_t)o->n_kv_blocks * b->kv_block_floats)) ||
        !(cb->x = alloc_floats(cb, T * D)) || !(cb->xb = alloc_floats(cb, T * D)) ||
        !(cb->qkv = alloc_floats(cb, T * (size_t)cb->qkv_dim)) ||
        !(cb->att_out = alloc_floats(cb, T * (size_t)cb->q_dim)) ||
        !(cb->h13 = alloc_floats(cb, T * 2 * F)) || !(cb->h = alloc_floats(cb, T * F)) ||
        !(cb->rope = alloc_floats(cb, T * (size_t)c->head_dim)) ||
        !(cb->scores = alloc_floats(cb, (size_t)cb->n_threads * (size_t)cb->max_ctx)))
        goto fail;
    cb->max_blocks = (cb->max_ctx + o->block_size - 1) / o->block_size;
    if (!(cb->hot_list = malloc(T * (size_t)cb->max_blocks * sizeof *cb->hot_list)) ||
        !(cb->n_list = malloc(T * sizeof *cb->n_list)))
        goto fail;
    if (o->n_kv8_blocks > 0) {
        size_t bytes = (size_t)o->n_kv8_blocks * b->kv8_block_bytes;
        if (!(cb->kv8 = calloc(bytes, 1))) goto fail;
        cb->bytes += bytes;
    }
    openblas_set_num_threads(cb->n_threads);
    *out = b;
    return CK_OK;
fail:
    snprintf(err, errlen, "cpu backend: %s while preparing weights and buffers", ck_strerror(rc));
    cpu_destroy(b);
    return rc;
}
