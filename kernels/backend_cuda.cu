/* backend_cuda.cu - the CUDA backend (backend_cuda.h, backend.h).
 *
 * The forward pass follows backend_cpu.c step for step, so the two can be
 * compared with a tight tolerance (tests/gpu/test_gpu_backend.c):
 *   embed -> per layer [RMSNorm, QKV product, RoPE, KV write, paged
 *   attention, output product (+= residual), RMSNorm, gate/up product,
 *   SwiGLU, down product (+= residual)] -> final norm of the rows that want
 *   logits -> classifier.
 * Q, K and V are one fused matrix, gate and up another, as on the CPU.
 *
 * Projections: cublasGemmEx with FP32 compute. With f32 weights the inputs
 * are the f32 activations; with f16 weights (f16/bf16 models, and every
 * model with a quantized tensor) the kernel that produces a product's
 * input writes it as f16 directly (RMSNorm, attention, SwiGLU), since
 * cuBLAS wants A and B of one type; outputs stay f32.
 *
 * Quantized weights (issue 16: every GGUF type of ck_cuda_qtype_shape) stay
 * in their file bytes on the device: a matrix is a cu_mat of up to three
 * row segments (QKV and gate/up are fused, and a Q4_K_M file mixes Q4_K
 * and Q6_K within them), each one allocation in one type. Batches of up to
 * CK_QGEMV_MAX_M tokens multiply quantized segments with ck_cuda_qgemv,
 * which reads the blocks directly (decode is memory-bound: a Q4_K row costs
 * 0.56 bytes an element instead of f16's 2); larger batches expand
 * CU_DEQ_ELEMS-element slices of rows to f16 in a scratch buffer and run
 * cublasGemmEx on each slice. The token embedding is a row lookup, not a
 * product: a quantized one is expanded to f16 at upload (and a tied
 * classifier then multiplies that f16 copy). CONFKV_CUDA_QUANT=expand
 * expands every quantized tensor at upload instead (the path before issue
 * 16, kept for comparison).
 *
 * The batch: the host checks it as the CPU backend does (and a little more:
 * every block id that is copied, and one token per logits row), numbers the
 * sequences that appear in it 0..n-1, concatenates their block tables (at
 * most max_ctx / block_size + 1 entries each: no position past max_ctx is
 * ever attended) and sends token, pos, sequence, logits-row gather and the
 * tables to the device in one copy. Attention mass accumulates on the
 * device over all layers and heads and is added into each be_seq_view.mass
 * on the host after the step.
 *
 * Int8 hot blocks (be_options.n_kv8_blocks, be_seq_view.blocks8): a second
 * pool in engine/kvq.h's layout. kv_compress / kv_expand run kvq.c's
 * arithmetic on the device (the bytes match kvq_quantize's), and attention
 * reads an int8 block where the f32 entry is KV_NONE, as backend_cpu.c does;
 * in the device's block table such an entry is CK_CUDA_ENC8(block8).
 *
 * Streams: the forward pass and cuBLAS run on one stream; KV block copies,
 * compression and expansion on a second one. forward() waits for its stream
 * before it returns, and each block operation for its own, so they never
 * overlap. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend_cuda.h"
#include "ck_cuda.h"

extern "C" {
#include "ck_err.h"
#include "kv.h"
#include "kvq.h"
#include "quant.h"
}

#define CU_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLAS workspace (Hopper: 32 MiB) */
#define CU_STAGING_ELEMS ((uint64_t)1 << 24)  /* weight upload chunk, multiple of 256 */
#define CU_DEQ_ELEMS ((size_t)1 << 24)        /* dequantize scratch for batches, elements */
#define CU_WFLOAT (-1)                        /* cu_seg.type of f32/f16 weights (cb->wf16) */

/* One segment of a weight matrix: `rows` rows of K elements, in the
 * backend's float type (type CU_WFLOAT) or kept in a quantized type (QB_*
 * of qblock.h, rows of blocks as in the file). */
typedef struct cu_seg {
    void *w;
    int type;
    int rows;
} cu_seg;

/* A weight matrix (N, K), N the sum of the segments' rows, segment s's
 * outputs at columns [sum of the rows before s, + rows). owned: the
 * segments' memory is this matrix's to free (not so for a classifier tied
 * to the embedding). */
typedef struct cu_mat {
    int nseg, K, owned;
    cu_seg seg[3];
} cu_mat;

typedef struct cu_layer {
    float *attn_norm;       /* (dim) */
    float *ffn_norm;        /* (dim) */
    cu_mat wqkv;            /* (q_dim + 2 * kv_dim, dim): wq rows, then wk, then wv */
    float *bqkv;            /* (qkv_dim) q, k, v biases (0 where absent); NULL: none */
    float *q_norm, *k_norm; /* (head_dim) qwen3's head norms; NULL: none */
    cu_mat wo;              /* (dim, q_dim) */
    cu_mat w13;             /* (2 * hidden_dim, dim): gate rows, then up rows */
    cu_mat w2;              /* (dim, hidden_dim) */
} cu_layer;

typedef struct cuda_backend {
    backend base;
    int dev;
    int wf16;    /* float weights (and product inputs) are f16, else f32 */
    int qexpand; /* CONFKV_CUDA_QUANT=expand: quantized tensors expanded at upload */
    int q_dim, kv_dim, qkv_dim, max_ctx;
    int tbl_cap;      /* block-table entries per sequence: max_ctx / block_size + 1 */
    cudaStream_t st;  /* forward pass and cuBLAS */
    cudaStream_t cst; /* KV block copies */
    cublasHandle_t blas;
    void *blas_ws; /* CU_WORKSPACE_BYTES */
    /* weights (device) */
    void *emb;         /* (vocab, dim) floats or halves (wf16), whatever the file's type */
    cu_mat wcls;       /* (vocab, dim); one unowned float segment at emb when tied */
    void *deq;         /* (CU_DEQ_ELEMS) f16/f32 scratch for batch products; NULL: no quantized weights */
    float *out_norm;   /* (dim) */
    cu_layer *layers;  /* (n_layers), host array of device pointers */
    float *inv_freq;   /* (head_dim / 2) RoPE frequencies (model_rope_freqs) */
    float rope_mscale; /* cos and sin are scaled by it */
    /* KV storage (device) */
    float *kv;          /* (n_kv_blocks, kv_block_floats) */
    unsigned char *kv8; /* (n_kv8_blocks, kv8_block_bytes) int8 blocks, kvq.h layout; or NULL */
    /* activations (device), T = max_batch_tokens */
    float *x;       /* (T, dim) residual stream */
    float *xb;      /* (T, dim) normed input of a product (f32 weights only) */
    float *att_out; /* (T, q_dim) attention output (f32 weights only) */
    float *h;       /* (T, hidden_dim) SwiGLU output (f32 weights only) */
    __half *xh;     /* (T, max(dim, q_dim, hidden_dim)) product input (f16 weights only) */
    float *qkv;     /* (T, qkv_dim) */
    float *h13;     /* (T, 2 * hidden_dim) */
    float *logits;  /* (T, vocab) */
    float *mass;    /* (T * tbl_cap) attention mass per copied table entry */
    float *conf;    /* (T, 4) be_cuda_conf rows */
    int32_t *ints;  /* (5 T + T * tbl_cap) batch arrays, layout of h_ints */
    /* pinned host mirrors */
    int32_t *h_ints;      /* token[T], pos[T], cseq[T], out_tok[T], seq_off[T], blocks[T * tbl_cap] */
    float *h_mass;        /* (T * tbl_cap) */
    be_cuda_conf *h_conf; /* (T) */
    /* host scratch for packing a batch */
    int hash_cap;      /* power of two >= 2 T */
    int32_t *hash_key; /* (hash_cap) be_batch sequence index, -1 = empty */
    int32_t *hash_val; /* (hash_cap) compact sequence index */
    int32_t *cs_view;  /* (T) be_batch sequence index of each compact sequence */
    int32_t *cs_nblk;  /* (T) table entries copied for each compact sequence */
    int last_n_out;    /* logits rows on the device from the last forward */
    size_t bytes;      /* device bytes held */
} cuda_backend;

/* ------------------------------------------------------------ errors */

/* The single run-time error path: log and turn into CK_EBACKEND. Waits for
 * the stream (ignoring its result) so no half-done step overlaps what the
 * caller does next. */
static int cu_fail(cuda_backend *cb, const char *func, const char *call, const char *why) {
    fprintf(stderr, "confkv cuda: %s: %s: %s\n", func, call, why);
    if (cb) {
        cb->last_n_out = 0;
        (void)cudaStreamSynchronize(cb->st);
        (void)cudaGetLastError();
    }
    return CK_EBACKEND;
}

#define CU_RT(call)                                                                         \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) return cu_fail(cb, __func__, #call, cudaGetErrorString(e_)); \
    } while (0)
#define CU_BLAS(call)                                                                                    \
    do {                                                                                                 \
        cublasStatus_t s_ = (call);                                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) return cu_fail(cb, __func__, #call, cublasGetStatusString(s_)); \
    } while (0)

/* At creation: a sentence in err instead of the log. */
static int cu_seterr(char *err, size_t errlen, int rc, const char *what, const char *why) {
    if (err && errlen) snprintf(err, errlen, "cuda backend: %s: %s", what, why);
    return rc;
}
#define CU_NEW(call, what)                                                            \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            (void)cudaGetLastError();                                                 \
            return cu_seterr(err, errlen, CK_EBACKEND, what, cudaGetErrorString(e_)); \
        }                                                                             \
    } while (0)
#define CU_NEW_BLAS(call, what)                                                          \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return cu_seterr(err, errlen, CK_EBACKEND, what, cublasGetStatusString(s_)); \
    } while (0)

/* ------------------------------------------------------------ products */

/* cuBLAS for a float matrix: y (M, N), row stride ldy, = x (M, K) . w (N,
 * K)^T + beta * y, all row-major; y is f32, x and w are f32 or f16
 * (cb->wf16). cuBLAS is column-major: there y is an (N, M) matrix with
 * leading dimension ldy, y^T = w . x^T, where w's memory reads as (K, N),
 * so it is taken transposed, and x's as (K, M), taken as is. */
static cublasStatus_t cu_gemm(cuda_backend *cb, float *y, int ldy, const void *x, const void *w, int M, int N,
                              int K, float beta) {
    const float alpha = 1.0f;
    const cudaDataType_t t = cb->wf16 ? CUDA_R_16F : CUDA_R_32F;
    return cublasGemmEx(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, t, K, x, t, K, &beta, y,
                        CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* y (M, N) = x (M, K) . w^T + beta * y for the matrix w (N, K) segment by
 * segment: float segments through cuBLAS; quantized ones with the GEMV for
 * M <= CK_QGEMV_MAX_M, else expanded a slice of rows at a time into cb->deq
 * and multiplied from there (the slices run in stream order, so the scratch
 * is free again when the next expansion starts). Returns 0 or CK_EBACKEND
 * (logged). */
static int cu_matmul(cuda_backend *cb, float *y, const void *x, const cu_mat *w, int M, float beta) {
    int N = 0;
    for (int s = 0; s < w->nseg; s++) N += w->seg[s].rows;
    const int K = w->K;
    for (int s = 0, n0 = 0; s < w->nseg; n0 += w->seg[s].rows, s++) {
        const cu_seg *g = &w->seg[s];
        if (g->type == CU_WFLOAT) {
            CU_BLAS(cu_gemm(cb, y + n0, N, x, g->w, M, g->rows, K, beta));
        } else if (M <= CK_QGEMV_MAX_M) {
            CU_RT(ck_cuda_qgemv(g->type, g->w, g->rows, K, x, cb->wf16, K, M, y + n0, N, beta, cb->st));
        } else {
            int block = 0, bytes = 0;
            (void)ck_cuda_qtype_shape(g->type, &block, &bytes);
            const size_t rb = (size_t)(K / block) * bytes;
            const int slice = (int)(CU_DEQ_ELEMS / (size_t)K); /* >= 1: K <= CU_DEQ_ELEMS at upload */
            for (int r0 = 0; r0 < g->rows; r0 += slice) {
                const int nr = g->rows - r0 < slice ? g->rows - r0 : slice;
                CU_RT(ck_cuda_qdequant(g->type, (const char *)g->w + (size_t)r0 * rb, nr, K, cb->deq,
                                       cb->wf16, cb->st));
                CU_BLAS(cu_gemm(cb, y + n0 + r0, N, x, cb->deq, M, nr, K, beta));
            }
        }
    }
    return CK_OK;
}

#define CU_MM(call)        \
    do {                   \
        int r_ = (call);   \
        if (r_) return r_; \
    } while (0)

/* ------------------------------------------------------------ the batch */

/* Check bt and pack it into h_ints (layout above). Returns 0 or CK_EINVAL;
 * *n_cs: sequences in the batch, *n_blk: table entries copied, *any_mass:
 * some sequence wants mass. Mirrors cpu_check_batch. */
static int cu_pack_batch(cuda_backend *cb, const be_batch *bt, int *n_cs_out, int *n_blk_out, int *any_mass) {
    const backend *b = &cb->base;
    const int T = bt->n_tokens, bs = b->opt.block_size, Tmax = b->opt.max_batch_tokens;
    int32_t *tok = cb->h_ints, *pos = tok + Tmax, *cseq = pos + Tmax, *out_tok = cseq + Tmax;
    int32_t *seq_off = out_tok + Tmax, *blocks = seq_off + Tmax;
    if (!bt->token || !bt->pos || !bt->seq || !bt->out_row || bt->n_seqs <= 0 || !bt->seqs) return CK_EINVAL;
    for (int r = 0; r < bt->n_out; r++) out_tok[r] = -1;
    for (int k = 0; k < cb->hash_cap; k++) cb->hash_key[k] = -1;
    int n_cs = 0, n_blk = 0, n_rows = 0;
    *any_mass = 0;
    for (int i = 0; i < T; i++) {
        const int t = bt->token[i], p = bt->pos[i], s = bt->seq[i], r = bt->out_row[i];
        if (t < 0 || t >= b->m->cfg.vocab_size) return CK_EINVAL;
        if (p < 0 || p >= cb->max_ctx) return CK_EINVAL;
        if (s < 0 || s >= bt->n_seqs) return CK_EINVAL;
        if (r >= bt->n_out) return CK_EINVAL;
        unsigned hk = ((unsigned)s * 2654435761u) & (unsigned)(cb->hash_cap - 1);
        while (cb->hash_key[hk] != -1 && cb->hash_key[hk] != s) hk = (hk + 1) & (unsigned)(cb->hash_cap - 1);
        int cs;
        if (cb->hash_key[hk] == s) {
            cs = cb->hash_val[hk];
        } else {
            const be_seq_view *v = &bt->seqs[s];
            if (v->n_blocks < 0 || (v->n_blocks > 0 && !v->blocks)) return CK_EINVAL;
            const int nb = v->n_blocks < cb->tbl_cap ? v->n_blocks : cb->tbl_cap;
            for (int j = 0; j < nb; j++) {
                const int32_t blk = v->blocks[j];
                const int32_t b8 = v->blocks8 ? v->blocks8[j] : KV_NONE;
                if (blk >= b->opt.n_kv_blocks || b8 >= b->opt.n_kv8_blocks) return CK_EINVAL;
                blocks[n_blk + j] = blk >= 0 ? blk : (b8 >= 0 ? CK_CUDA_ENC8(b8) : KV_NONE);
            }
            if (v->blocks8) /* as the CPU: every int8 entry must exist */
                for (int j = nb; j < v->n_blocks; j++)
                    if (v->blocks8[j] >= b->opt.n_kv8_blocks) return CK_EINVAL;
            cs = n_cs++;
            seq_off[cs] = n_blk;
            cb->cs_nblk[cs] = nb;
            cb->cs_view[cs] = s;
            n_blk += nb;
            if (v->mass) *any_mass = 1;
            cb->hash_key[hk] = s;
            cb->hash_val[hk] = cs;
        }
        const int j = p / bs;
        /* the token's own block is written: it must be an f32 pool block */
        if (j >= cb->cs_nblk[cs] || blocks[seq_off[cs] + j] < 0) return CK_EINVAL;
        tok[i] = t;
        pos[i] = p;
        cseq[i] = cs;
        if (r >= 0) {
            if (out_tok[r] != -1) return CK_EINVAL; /* two tokens for one row */
            out_tok[r] = i;
            n_rows++;
        }
    }
    if (n_rows != bt->n_out) return CK_EINVAL; /* rows must be 0..n_out-1, each once */
    *n_cs_out = n_cs;
    *n_blk_out = n_blk;
    return CK_OK;
}

/* ------------------------------------------------------------ the forward */

static int cu_forward(backend *b, const be_batch *bt, float *logits) {
    cuda_backend *cb = (cuda_backend *)b;
    const model_config *c = &b->m->cfg;
    const int T = bt->n_tokens, Tmax = b->opt.max_batch_tokens;
    if (T < 0 || T > Tmax || bt->n_out < 0 || bt->n_out > Tmax) return CK_EINVAL;
    if (T == 0) return CK_OK;
    if (bt->n_out > 0 && !logits) return CK_EINVAL;
    int n_cs = 0, n_blk = 0, any_mass = 0;
    int rc = cu_pack_batch(cb, bt, &n_cs, &n_blk, &any_mass);
    if (rc) return rc;
    cb->last_n_out = 0;

    const int D = c->dim, F = c->hidden_dim, hd = c->head_dim, V = c->vocab_size;
    const int QD = cb->q_dim, KVD = cb->kv_dim, QKV = cb->qkv_dim, bs = b->opt.block_size;
    const int f16 = cb->wf16, n_out = bt->n_out;
    const int32_t *d_tok = cb->ints, *d_pos = d_tok + Tmax, *d_cseq = d_pos + Tmax;
    const int32_t *d_out_tok = d_cseq + Tmax, *d_seq_off = d_out_tok + Tmax;
    const int32_t *d_blocks = d_seq_off + Tmax;
    void *norm_in = f16 ? (void *)cb->xh : (void *)cb->xb;
    void *att_in = f16 ? (void *)cb->xh : (void *)cb->att_out;
    void *ffn_in = f16 ? (void *)cb->xh : (void *)cb->h;
    cudaStream_t st = cb->st;

    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(cudaMemcpyAsync(cb->ints, cb->h_ints, (5 * (size_t)Tmax + (size_t)n_blk) * sizeof(int32_t),
                          cudaMemcpyHostToDevice, st));
    if (any_mass && n_blk) CU_RT(cudaMemsetAsync(cb->mass, 0, (size_t)n_blk * sizeof(float), st));
    CU_RT(ck_cuda_embed(cb->x, cb->emb, f16, d_tok, T, D, st));

    ck_attn_args at;
    memset(&at, 0, sizeof at);
    at.qkv = cb->qkv;
    at.qkv_stride = QKV;
    at.out = att_in;
    at.out_f16 = f16;
    at.kv = cb->kv;
    at.block_floats = b->kv_block_floats;
    at.kv8 = cb->kv8;
    at.kv8_block_bytes = b->kv8_block_bytes;
    at.block_size = bs;
    at.kv_dim = KVD;
    at.head_dim = hd;
    at.n_heads = c->n_heads;
    at.n_kv_heads = c->n_kv_heads;
    at.pos = d_pos;
    at.cseq = d_cseq;
    at.seq_off = d_seq_off;
    at.blocks = d_blocks;
    at.mass = any_mass ? cb->mass : NULL;
    at.mass_scale = 1.0f / (float)(c->n_layers * c->n_heads);
    at.T = T;

    for (int l = 0; l < c->n_layers; l++) {
        const cu_layer *w = &cb->layers[l];
        CU_RT(ck_cuda_rmsnorm(norm_in, f16, cb->x, NULL, w->attn_norm, T, D, c->norm_eps, st));
        CU_MM(cu_matmul(cb, cb->qkv, norm_in, &w->wqkv, T, 0.0f));
        CU_RT(ck_cuda_qkv_prep(cb->qkv, QKV, w->bqkv, QKV, w->q_norm, w->k_norm, c->norm_eps, T, c->n_heads,
                               c->n_kv_heads, hd, st));
        CU_RT(ck_cuda_rope(cb->qkv, QKV, d_pos, cb->inv_freq, T, c->n_heads, c->n_kv_heads, hd,
                           c->rope_style == ARCH_ROPE_NEOX, cb->rope_mscale, st));
        CU_RT(ck_cuda_kv_write(cb->kv, b->kv_block_floats, l, bs, KVD, cb->qkv, QKV, QD, d_pos, d_cseq,
                               d_seq_off, d_blocks, T, st));
        at.layer = l;
        CU_RT(ck_cuda_attention(&at, st));
        CU_MM(cu_matmul(cb, cb->x, att_in, &w->wo, T, 1.0f));
        CU_RT(ck_cuda_rmsnorm(norm_in, f16, cb->x, NULL, w->ffn_norm, T, D, c->norm_eps, st));
        CU_MM(cu_matmul(cb, cb->h13, norm_in, &w->w13, T, 0.0f));
        CU_RT(ck_cuda_swiglu(ffn_in, f16, cb->h13, T, F, st));
        CU_MM(cu_matmul(cb, cb->x, ffn_in, &w->w2, T, 1.0f));
    }
    /* Classifier only for the rows asked for (a prefill chunk needs one). */
    if (n_out) {
        CU_RT(ck_cuda_rmsnorm(norm_in, f16, cb->x, d_out_tok, cb->out_norm, n_out, D, c->norm_eps, st));
        CU_MM(cu_matmul(cb, cb->logits, norm_in, &cb->wcls, n_out, 0.0f));
        CU_RT(cudaMemcpyAsync(logits, cb->logits, (size_t)n_out * V * sizeof(float), cudaMemcpyDeviceToHost,
                              st));
    }
    if (any_mass && n_blk)
        CU_RT(
            cudaMemcpyAsync(cb->h_mass, cb->mass, (size_t)n_blk * sizeof(float), cudaMemcpyDeviceToHost, st));
    CU_RT(cudaStreamSynchronize(st));
    if (any_mass) {
        const int32_t *seq_off = cb->h_ints + 4 * (size_t)Tmax;
        for (int cs = 0; cs < n_cs; cs++) {
            const be_seq_view *v = &bt->seqs[cb->cs_view[cs]];
            if (!v->mass) continue;
            const float *src = cb->h_mass + seq_off[cs];
            for (int j = 0; j < cb->cs_nblk[cs]; j++) v->mass[j] += src[j];
        }
    }
    cb->last_n_out = n_out;
    return CK_OK;
}

/* ------------------------------------------------------------ KV blocks */

static int cu_kv_read(backend *b, int block, float *dst) {
    cuda_backend *cb = (cuda_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks || !dst) return CK_EINVAL;
    const size_t n = b->kv_block_floats;
    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(
        cudaMemcpyAsync(dst, cb->kv + (size_t)block * n, n * sizeof(float), cudaMemcpyDeviceToHost, cb->cst));
    CU_RT(cudaStreamSynchronize(cb->cst));
    return CK_OK;
}

static int cu_kv_write(backend *b, int block, const float *src) {
    cuda_backend *cb = (cuda_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks || !src) return CK_EINVAL;
    const size_t n = b->kv_block_floats;
    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(
        cudaMemcpyAsync(cb->kv + (size_t)block * n, src, n * sizeof(float), cudaMemcpyHostToDevice, cb->cst));
    CU_RT(cudaStreamSynchronize(cb->cst));
    return CK_OK;
}

/* kvq_block_bytes, from kvq.h's inline layer size (this library does not
 * link the engine's objects). */
static size_t cu_kv8_bytes(const cuda_backend *cb) {
    const kvq_shape sh = {cb->base.m->cfg.n_layers, cb->base.opt.block_size, cb->kv_dim};
    return (size_t)sh.n_layers * kvq_layer_bytes(&sh);
}

static int cu_kv_compress(backend *b, int block, int n_tokens, int block8) {
    cuda_backend *cb = (cuda_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks || block8 < 0 || block8 >= b->opt.n_kv8_blocks ||
        n_tokens < 0 || n_tokens > b->opt.block_size)
        return CK_EINVAL;
    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(ck_cuda_kv_quantize(cb->kv + (size_t)block * b->kv_block_floats, n_tokens,
                              cb->kv8 + (size_t)block8 * b->kv8_block_bytes, b->m->cfg.n_layers,
                              b->opt.block_size, cb->kv_dim, cb->cst));
    CU_RT(cudaStreamSynchronize(cb->cst));
    return CK_OK;
}

static int cu_kv_expand(backend *b, int block8, int block) {
    cuda_backend *cb = (cuda_backend *)b;
    if (block < 0 || block >= b->opt.n_kv_blocks || block8 < 0 || block8 >= b->opt.n_kv8_blocks)
        return CK_EINVAL;
    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(ck_cuda_kv_dequantize(cb->kv8 + (size_t)block8 * b->kv8_block_bytes,
                                cb->kv + (size_t)block * b->kv_block_floats, b->m->cfg.n_layers,
                                b->opt.block_size, cb->kv_dim, cb->cst));
    CU_RT(cudaStreamSynchronize(cb->cst));
    return CK_OK;
}

static int cu_kv8_read(backend *b, int block8, void *dst) {
    cuda_backend *cb = (cuda_backend *)b;
    if (block8 < 0 || block8 >= b->opt.n_kv8_blocks || !dst) return CK_EINVAL;
    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(cudaMemcpyAsync(dst, cb->kv8 + (size_t)block8 * b->kv8_block_bytes, b->kv8_block_bytes,
                          cudaMemcpyDeviceToHost, cb->cst));
    CU_RT(cudaStreamSynchronize(cb->cst));
    return CK_OK;
}

static int cu_kv8_write(backend *b, int block8, const void *src) {
    cuda_backend *cb = (cuda_backend *)b;
    if (block8 < 0 || block8 >= b->opt.n_kv8_blocks || !src) return CK_EINVAL;
    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(cudaMemcpyAsync(cb->kv8 + (size_t)block8 * b->kv8_block_bytes, src, b->kv8_block_bytes,
                          cudaMemcpyHostToDevice, cb->cst));
    CU_RT(cudaStreamSynchronize(cb->cst));
    return CK_OK;
}

static size_t cu_memory_bytes(const backend *b) { return ((const cuda_backend *)b)->bytes; }

/* ------------------------------------------------------------ destruction */

static void cu_free_dev(void *p) {
    if (p) (void)cudaFree(p);
}

static void cu_mat_free(cu_mat *mt) {
    if (mt->owned)
        for (int s = 0; s < mt->nseg; s++) cu_free_dev(mt->seg[s].w);
    mt->nseg = 0;
}

static void cu_destroy(backend *b) {
    cuda_backend *cb = (cuda_backend *)b;
    if (!cb) return;
    (void)cudaSetDevice(cb->dev);
    if (cb->st) (void)cudaStreamSynchronize(cb->st);
    if (cb->cst) (void)cudaStreamSynchronize(cb->cst);
    cu_mat_free(&cb->wcls);
    cu_free_dev(cb->emb);
    cu_free_dev(cb->deq);
    cu_free_dev(cb->out_norm);
    if (cb->layers) {
        for (int l = 0; l < b->m->cfg.n_layers; l++) {
            cu_layer *w = &cb->layers[l];
            cu_free_dev(w->attn_norm);
            cu_free_dev(w->ffn_norm);
            cu_mat_free(&w->wqkv);
            cu_free_dev(w->bqkv);
            cu_free_dev(w->q_norm);
            cu_free_dev(w->k_norm);
            cu_mat_free(&w->wo);
            cu_mat_free(&w->w13);
            cu_mat_free(&w->w2);
        }
        free(cb->layers);
    }
    cu_free_dev(cb->inv_freq);
    cu_free_dev(cb->kv);
    cu_free_dev(cb->kv8);
    cu_free_dev(cb->x);
    cu_free_dev(cb->xb);
    cu_free_dev(cb->att_out);
    cu_free_dev(cb->h);
    cu_free_dev(cb->xh);
    cu_free_dev(cb->qkv);
    cu_free_dev(cb->h13);
    cu_free_dev(cb->logits);
    cu_free_dev(cb->mass);
    cu_free_dev(cb->conf);
    cu_free_dev(cb->ints);
    if (cb->h_ints) (void)cudaFreeHost(cb->h_ints);
    if (cb->h_mass) (void)cudaFreeHost(cb->h_mass);
    if (cb->h_conf) (void)cudaFreeHost(cb->h_conf);
    if (cb->blas) (void)cublasDestroy(cb->blas);
    cu_free_dev(cb->blas_ws);
    if (cb->st) (void)cudaStreamDestroy(cb->st);
    if (cb->cst) (void)cudaStreamDestroy(cb->cst);
    (void)cudaGetLastError();
    free(cb->hash_key);
    free(cb->hash_val);
    free(cb->cs_view);
    free(cb->cs_nblk);
    free(cb);
}

static const be_ops cu_ops_table_ = {
    "cuda",          /* name */
    cu_forward,      /* forward */
    cu_kv_read,      /* kv_read */
    cu_kv_write,     /* kv_write */
    cu_memory_bytes, /* memory_bytes */
    cu_destroy,      /* destroy */
    cu_kv_compress,  /* kv_compress */
    cu_kv_expand,    /* kv_expand */
    cu_kv8_read,     /* kv8_read */
    cu_kv8_write,    /* kv8_write */
    NULL,            /* kv_read_batch: the mover loops over kv_read */
    NULL,            /* kv_write_batch: and kv_write */
};

/* ------------------------------------------------------------ construction */

/* cudaMalloc that counts; zero-sized requests still get a valid pointer. */
static cudaError_t cu_malloc(cuda_backend *cb, void **p, size_t bytes) {
    if (!bytes) bytes = 256;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess)
        cb->bytes += bytes;
    else
        *p = NULL;
    return e;
}

/* Bytes of n elements of a type we upload (f32, f16, bf16, or a quantized
 * type of ck_cuda_qtype_shape with n a multiple of its block). */
static uint64_t cu_raw_bytes(int type, uint64_t n) {
    int block = 1, bytes = 0;
    switch (type) {
    case QUANT_F32: return n * 4;
    case QUANT_F16:
    case QUANT_BF16: return n * 2;
    default: (void)ck_cuda_qtype_shape(type, &block, &bytes); return n / (uint64_t)block * (uint64_t)bytes;
    }
}

/* Upload tensor t (n elements) into dst, as f16 (dst_f16) or f32, through
 * the staging buffer, in chunks of CU_STAGING_ELEMS elements. */
static int cu_upload(cuda_backend *cb, void *staging, void *dst, int dst_f16, const model_tensor *t,
                     uint64_t n, const char *name, char *err, size_t errlen) {
    char what[96];
    int block = 1;
    if (t->type != QUANT_F32 && t->type != QUANT_F16 && t->type != QUANT_BF16 &&
        !ck_cuda_qtype_shape(t->type, &block, NULL)) {
        snprintf(what, sizeof what, "tensor %s", name);
        return cu_seterr(err, errlen, CK_EUNSUPPORTED, what, "weight type not supported");
    }
    if (t->n != n || !t->data || n % (uint64_t)block) {
        snprintf(what, sizeof what, "tensor %s", name);
        return cu_seterr(err, errlen, CK_EFORMAT, what, "unexpected element count");
    }
    const size_t esize = dst_f16 ? 2 : 4;
    snprintf(what, sizeof what, "uploading %s", name);
    for (uint64_t off = 0; off < n; off += CU_STAGING_ELEMS) {
        const uint64_t cnt = n - off < CU_STAGING_ELEMS ? n - off : CU_STAGING_ELEMS;
        const char *src = (const char *)t->data + cu_raw_bytes(t->type, off);
        CU_NEW(cudaMemcpyAsync(staging, src, cu_raw_bytes(t->type, cnt), cudaMemcpyHostToDevice, cb->st),
               what);
        CU_NEW(ck_cuda_convert(staging, t->type, cnt, (char *)dst + off * esize, dst_f16, cb->st), what);
    }
    return CK_OK;
}

/* The device type of a tensor of `type`: kept as it is when quantized
 * (unless CONFKV_CUDA_QUANT=expand), else the backend's float type. */
static int cu_dev_type(const cuda_backend *cb, int type) {
    return !cb->qexpand && ck_cuda_qtype_shape(type, NULL, NULL) ? type : CU_WFLOAT;
}

/* One tensor of a (possibly fused) matrix: its rows, in matrix order. */
typedef struct cu_part {
    const char *name;
    const model_tensor *t;
    int rows;
} cu_part;

/* Fill mat (K columns) from the n parts p[i], in that order: consecutive
 * tensors of one device type share a segment (one allocation); float
 * tensors are converted (cu_upload), quantized ones copied byte for byte.
 * *any_q is set when a segment is quantized. On error the segments made so
 * far stay in mat for cu_mat_free. */
static int cu_upload_mat(cuda_backend *cb, void *staging, cu_mat *mat, const cu_part *p, int n, int K,
                         int *any_q, char *err, size_t errlen) {
    char what[96];
    mat->K = K;
    mat->owned = 1;
    mat->nseg = 0;
    for (int i = 0; i < n;) {
        const int dt = cu_dev_type(cb, p[i].t->type);
        int j = i, nr = 0;
        while (j < n && cu_dev_type(cb, p[j].t->type) == dt) nr += p[j++].rows;
        size_t rb = (size_t)K * (cb->wf16 ? 2 : 4); /* bytes a row on the device */
        if (dt != CU_WFLOAT) {
            int block = 0, bytes = 0;
            (void)ck_cuda_qtype_shape(dt, &block, &bytes);
            if (K % block || (size_t)K > CU_DEQ_ELEMS) {
                snprintf(what, sizeof what, "tensor %s", p[i].name);
                return cu_seterr(err, errlen, CK_EFORMAT, what,
                                 "row length not a multiple of its type's block (or over 2^24)");
            }
            rb = (size_t)(K / block) * (size_t)bytes;
            *any_q = 1;
        }
        cu_seg *g = &mat->seg[mat->nseg];
        g->type = dt;
        g->rows = nr;
        snprintf(what, sizeof what, "allocating %s", p[i].name);
        CU_NEW(cu_malloc(cb, &g->w, (size_t)nr * rb), what);
        mat->nseg++;
        for (int k = i, r = 0; k < j; r += p[k].rows, k++) {
            char *dst = (char *)g->w + (size_t)r * rb;
            const uint64_t ne = (uint64_t)p[k].rows * (uint64_t)K;
            if (dt == CU_WFLOAT) {
                int rc = cu_upload(cb, staging, dst, cb->wf16, p[k].t, ne, p[k].name, err, errlen);
                if (rc) return rc;
                continue;
            }
            if (p[k].t->n != ne || !p[k].t->data) {
                snprintf(what, sizeof what, "tensor %s", p[k].name);
                return cu_seterr(err, errlen, CK_EFORMAT, what, "unexpected element count");
            }
            snprintf(what, sizeof what, "uploading %s", p[k].name);
            CU_NEW(cudaMemcpy(dst, p[k].t->data, (size_t)p[k].rows * rb, cudaMemcpyHostToDevice), what);
        }
        i = j;
    }
    return CK_OK;
}

static int cu_model_is_f32(const model *m) {
    if (m->tok_emb.type != QUANT_F32 || m->wcls.type != QUANT_F32) return 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(&m->layers[l], t);
        for (int k = 0; k < MODEL_LAYER_TENSORS; k++)
            if (t[k]->type != QUANT_F32) return 0;
    }
    return 1;
}

static int cu_init_device(cuda_backend *cb, char *err, size_t errlen) {
    cudaDeviceProp prop;
    CU_NEW(cudaGetDevice(&cb->dev), "cudaGetDevice");
    CU_NEW(cudaGetDeviceProperties(&prop, cb->dev), "cudaGetDeviceProperties");
    if (prop.major < 9) {
        char why[256];
        snprintf(why, sizeof why, "%.100s has compute capability %d.%d; the kernels need 9.0+", prop.name,
                 prop.major, prop.minor);
        return cu_seterr(err, errlen, CK_EUNSUPPORTED, "device", why);
    }
    CU_NEW(cudaStreamCreateWithFlags(&cb->st, cudaStreamNonBlocking), "creating the compute stream");
    CU_NEW(cudaStreamCreateWithFlags(&cb->cst, cudaStreamNonBlocking), "creating the copy stream");
    CU_NEW_BLAS(cublasCreate(&cb->blas), "cublasCreate");
    /* Stream first: cublasSetStream resets the workspace to cuBLAS's own pool. */
    CU_NEW_BLAS(cublasSetStream(cb->blas, cb->st), "cublasSetStream");
    CU_NEW(cu_malloc(cb, &cb->blas_ws, CU_WORKSPACE_BYTES), "allocating the cuBLAS workspace");
    CU_NEW_BLAS(cublasSetWorkspace(cb->blas, cb->blas_ws, CU_WORKSPACE_BYTES), "cublasSetWorkspace");
    /* No TF32: CUBLAS_COMPUTE_32F products stay in full f32. */
    CU_NEW_BLAS(cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return CK_OK;
}

static int cu_init_weights(cuda_backend *cb, char *err, size_t errlen) {
    const model *m = cb->base.m;
    const model_config *c = &m->cfg;
    const size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t QKV = (size_t)cb->qkv_dim, QD = (size_t)cb->q_dim, KVD = (size_t)cb->kv_dim;
    const size_t ws = cb->wf16 ? 2 : 4;
    void *staging = NULL;
    int rc = CK_OK;
    cudaError_t e = cu_malloc(cb, &staging, CU_STAGING_ELEMS * 4);
    if (e != cudaSuccess)
        return cu_seterr(err, errlen, CK_EBACKEND, "allocating the upload buffer", cudaGetErrorString(e));
#define UP(dst, f16, t, n, name) \
    if ((rc = cu_upload(cb, staging, dst, f16, t, n, name, err, errlen))) goto out
    int any_q = 0;
#define UPM(mat, K, parts)                                                                                \
    if ((rc = cu_upload_mat(cb, staging, &(mat), parts, (int)(sizeof parts / sizeof parts[0]), K, &any_q, \
                            err, errlen)))                                                                \
    goto out
#define ALLOC(p, bytes, what)                                                  \
    if ((e = cu_malloc(cb, (void **)&(p), bytes)) != cudaSuccess) {            \
        rc = cu_seterr(err, errlen, CK_EBACKEND, what, cudaGetErrorString(e)); \
        goto out;                                                              \
    }
    ALLOC(cb->emb, V * D * ws, "allocating the embedding");
    ALLOC(cb->out_norm, D * 4, "allocating the output norm");
    UP(cb->emb, cb->wf16, &m->tok_emb, V * D, "token_embd");
    UP(cb->out_norm, 0, &m->out_norm, D, "output_norm");
    if (m->tied) {
        cb->wcls.nseg = 1;
        cb->wcls.K = (int)D;
        cb->wcls.owned = 0;
        cb->wcls.seg[0].w = cb->emb;
        cb->wcls.seg[0].type = CU_WFLOAT;
        cb->wcls.seg[0].rows = (int)V;
    } else {
        const cu_part cls[] = {{"output", &m->wcls, (int)V}};
        UPM(cb->wcls, (int)D, cls);
    }
    cb->layers = (cu_layer *)calloc((size_t)c->n_layers, sizeof *cb->layers);
    if (!cb->layers) {
        rc = cu_seterr(err, errlen, CK_ENOMEM, "layer table", "out of host memory");
        goto out;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        cu_layer *w = &cb->layers[l];
        ALLOC(w->attn_norm, D * 4, "allocating layer weights");
        ALLOC(w->ffn_norm, D * 4, "allocating layer weights");
        UP(w->attn_norm, 0, &ml->attn_norm, D, "attn_norm");
        UP(w->ffn_norm, 0, &ml->ffn_norm, D, "ffn_norm");
        const cu_part qkv[] = {
            {"attn_q", &ml->wq, (int)QD}, {"attn_k", &ml->wk, (int)KVD}, {"attn_v", &ml->wv, (int)KVD}};
        const cu_part wo[] = {{"attn_output", &ml->wo, (int)D}};
        const cu_part w13[] = {{"ffn_gate", &ml->w1, (int)F}, {"ffn_up", &ml->w3, (int)F}};
        const cu_part w2[] = {{"ffn_down", &ml->w2, (int)D}};
        UPM(w->wqkv, (int)D, qkv);
        UPM(w->wo, (int)QD, wo);
        UPM(w->w13, (int)D, w13);
        UPM(w->w2, (int)F, w2);
        if (ml->bq.n || ml->bk.n || ml->bv.n) {
            ALLOC(w->bqkv, QKV * 4, "allocating layer biases");
            if ((e = cudaMemset(w->bqkv, 0, QKV * 4)) != cudaSuccess) {
                rc = cu_seterr(err, errlen, CK_EBACKEND, "clearing layer biases", cudaGetErrorString(e));
                goto out;
            }
            if (ml->bq.n) UP(w->bqkv, 0, &ml->bq, QD, "attn_q.bias");
            if (ml->bk.n) UP(w->bqkv + QD, 0, &ml->bk, KVD, "attn_k.bias");
            if (ml->bv.n) UP(w->bqkv + QD + KVD, 0, &ml->bv, KVD, "attn_v.bias");
        }
        if (ml->q_norm.n) {
            ALLOC(w->q_norm, (size_t)c->head_dim * 4, "allocating layer norms");
            UP(w->q_norm, 0, &ml->q_norm, (size_t)c->head_dim, "attn_q_norm");
        }
        if (ml->k_norm.n) {
            ALLOC(w->k_norm, (size_t)c->head_dim * 4, "allocating layer norms");
            UP(w->k_norm, 0, &ml->k_norm, (size_t)c->head_dim, "attn_k_norm");
        }
    }
    if (any_q) ALLOC(cb->deq, CU_DEQ_ELEMS * ws, "allocating the dequantization scratch");
#undef UP
#undef UPM
#undef ALLOC
out:
    /* The staging buffer is reused chunk after chunk: wait before freeing. */
    e = cudaStreamSynchronize(cb->st);
    if (!rc && e != cudaSuccess)
        rc = cu_seterr(err, errlen, CK_EBACKEND, "uploading weights", cudaGetErrorString(e));
    (void)cudaFree(staging);
    cb->bytes -= CU_STAGING_ELEMS * 4;
    return rc;
}

static int cu_init_buffers(cuda_backend *cb, char *err, size_t errlen) {
    const backend *b = &cb->base;
    const model_config *c = &b->m->cfg;
    const size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t T = (size_t)b->opt.max_batch_tokens, tbl = T * (size_t)cb->tbl_cap;
    const int hd = c->head_dim;

    float *inv = (float *)malloc((size_t)(hd / 2 ? hd / 2 : 1) * sizeof(float));
    if (!inv) return cu_seterr(err, errlen, CK_ENOMEM, "RoPE table", "out of host memory");
    if (model_rope_freqs(b->m, inv, &cb->rope_mscale)) {
        free(inv);
        return cu_seterr(err, errlen, CK_EFORMAT, "RoPE table", "rope_freqs.weight unreadable");
    }
    cudaError_t e = cu_malloc(cb, (void **)&cb->inv_freq, (size_t)(hd / 2) * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpy(cb->inv_freq, inv, (size_t)(hd / 2) * sizeof(float), cudaMemcpyHostToDevice);
    free(inv);
    CU_NEW(e, "uploading the RoPE table");

    const size_t kv_bytes = (size_t)b->opt.n_kv_blocks * b->kv_block_floats * sizeof(float);
    CU_NEW(cu_malloc(cb, (void **)&cb->kv, kv_bytes), "allocating the KV pool");
    /* zeroed so that unused KV is finite, as on the CPU */
    CU_NEW(cudaMemset(cb->kv, 0, kv_bytes), "clearing the KV pool");
    if (b->opt.n_kv8_blocks > 0) {
        const size_t kv8_bytes = (size_t)b->opt.n_kv8_blocks * b->kv8_block_bytes;
        CU_NEW(cu_malloc(cb, (void **)&cb->kv8, kv8_bytes), "allocating the int8 KV pool");
        CU_NEW(cudaMemset(cb->kv8, 0, kv8_bytes), "clearing the int8 KV pool");
    }

    CU_NEW(cu_malloc(cb, (void **)&cb->x, T * D * 4), "allocating activations");
    if (cb->wf16) {
        size_t w = D > F ? D : F;
        if ((size_t)cb->q_dim > w) w = (size_t)cb->q_dim;
        CU_NEW(cu_malloc(cb, (void **)&cb->xh, T * w * 2), "allocating activations");
    } else {
        CU_NEW(cu_malloc(cb, (void **)&cb->xb, T * D * 4), "allocating activations");
        CU_NEW(cu_malloc(cb, (void **)&cb->att_out, T * (size_t)cb->q_dim * 4), "allocating activations");
        CU_NEW(cu_malloc(cb, (void **)&cb->h, T * F * 4), "allocating activations");
    }
    CU_NEW(cu_malloc(cb, (void **)&cb->qkv, T * (size_t)cb->qkv_dim * 4), "allocating activations");
    CU_NEW(cu_malloc(cb, (void **)&cb->h13, T * 2 * F * 4), "allocating activations");
    CU_NEW(cu_malloc(cb, (void **)&cb->logits, T * V * 4), "allocating the logits");
    CU_NEW(cu_malloc(cb, (void **)&cb->mass, tbl * 4), "allocating the mass buffer");
    CU_NEW(cu_malloc(cb, (void **)&cb->conf, T * sizeof(be_cuda_conf)), "allocating the confidence buffer");
    const size_t n_ints = 5 * T + tbl;
    CU_NEW(cu_malloc(cb, (void **)&cb->ints, n_ints * 4), "allocating the batch arrays");
    CU_NEW(cudaHostAlloc((void **)&cb->h_ints, n_ints * 4, cudaHostAllocDefault),
           "allocating pinned batch arrays");
    CU_NEW(cudaHostAlloc((void **)&cb->h_mass, tbl * 4, cudaHostAllocDefault),
           "allocating the pinned mass buffer");
    CU_NEW(cudaHostAlloc((void **)&cb->h_conf, T * sizeof(be_cuda_conf), cudaHostAllocDefault),
           "allocating the pinned confidence buffer");
    memset(cb->h_ints, 0, n_ints * 4);

    cb->hash_cap = 1;
    while ((size_t)cb->hash_cap < 2 * T) cb->hash_cap <<= 1;
    cb->hash_key = (int32_t *)malloc((size_t)cb->hash_cap * sizeof(int32_t));
    cb->hash_val = (int32_t *)malloc((size_t)cb->hash_cap * sizeof(int32_t));
    cb->cs_view = (int32_t *)malloc(T * sizeof(int32_t));
    cb->cs_nblk = (int32_t *)malloc(T * sizeof(int32_t));
    if (!cb->hash_key || !cb->hash_val || !cb->cs_view || !cb->cs_nblk)
        return cu_seterr(err, errlen, CK_ENOMEM, "batch scratch", "out of host memory");
    return CK_OK;
}

extern "C" int be_cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it: it is not sticky, but keep state clean */
        return 0;
    }
    return n > 0;
}

extern "C" int be_cuda_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen) {
    if (!out) return CK_EINVAL;
    *out = NULL;
    if (!m || !o) return cu_seterr(err, errlen, CK_EINVAL, "options", "NULL model or options");
    const model_config *c = &m->cfg;
    if (o->max_batch_tokens <= 0 || o->n_kv_blocks <= 0 || o->block_size <= 0 || o->n_kv8_blocks < 0 ||
        o->max_ctx < 0 || o->max_ctx > c->seq_len) {
        if (err && errlen)
            snprintf(err, errlen,
                     "cuda backend: invalid options (batch %d, blocks %d, block size %d, ctx %d)",
                     o->max_batch_tokens, o->n_kv_blocks, o->block_size, o->max_ctx);
        return CK_EINVAL;
    }
    if (c->head_dim > CK_CUDA_MAX_HEAD_DIM || c->head_dim % 2 || c->n_kv_heads <= 0 ||
        c->n_heads % c->n_kv_heads || c->n_heads > 65535) {
        char why[96];
        snprintf(why, sizeof why, "head_dim %d / %d heads not supported (head_dim <= %d)", c->head_dim,
                 c->n_heads, CK_CUDA_MAX_HEAD_DIM);
        return cu_seterr(err, errlen, CK_EUNSUPPORTED, "model", why);
    }
    const int max_ctx = o->max_ctx ? o->max_ctx : be_default_ctx(m); /* as the CPU backend */
    const long long tbl_cap = (long long)max_ctx / o->block_size + 1;
    /* The int32 batch arrays and offsets must stay inside int. */
    if ((long long)o->max_batch_tokens * (tbl_cap + 5) > 0x3fffffffLL)
        return cu_seterr(err, errlen, CK_EINVAL, "options", "max_batch_tokens x context blocks too large");
    if (!be_cuda_available())
        return cu_seterr(err, errlen, CK_EBACKEND, "device", "no CUDA device or driver");

    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) return cu_seterr(err, errlen, CK_ENOMEM, "backend", "out of host memory");
    backend *b = &cb->base;
    b->ops = &cu_ops_table_;
    b->m = m;
    b->opt = *o;
    b->opt.max_ctx = max_ctx;
    b->opt.n_threads = 1;
    cb->q_dim = c->n_heads * c->head_dim;
    cb->kv_dim = c->n_kv_heads * c->head_dim;
    cb->qkv_dim = cb->q_dim + 2 * cb->kv_dim;
    cb->max_ctx = max_ctx;
    cb->tbl_cap = (int)tbl_cap;
    b->kv_block_floats = (size_t)c->n_layers * 2 * (size_t)o->block_size * (size_t)cb->kv_dim;
    b->kv8_block_bytes = cu_kv8_bytes(cb);
    cb->wf16 = !cu_model_is_f32(m);
    const char *wenv = getenv("CONFKV_CUDA_WEIGHTS");
    if (wenv && !strcmp(wenv, "f32")) cb->wf16 = 0;
    if (wenv && !strcmp(wenv, "f16")) cb->wf16 = 1;
    const char *qenv = getenv("CONFKV_CUDA_QUANT");
    cb->qexpand = qenv && !strcmp(qenv, "expand");

    int rc;
    if ((rc = cu_init_device(cb, err, errlen)) || (rc = cu_init_weights(cb, err, errlen)) ||
        (rc = cu_init_buffers(cb, err, errlen))) {
        cu_destroy(b);
        return rc;
    }
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cu_destroy(b);
        return cu_seterr(err, errlen, CK_EBACKEND, "finishing setup", cudaGetErrorString(e));
    }
    *out = b;
    return CK_OK;
}

/* ------------------------------------------------------------ extras */

extern "C" int be_cuda_is(const backend *b) { return b && b->ops == &cu_ops_table_; }

extern "C" int be_cuda_confidence(backend *b, int n_rows, be_cuda_conf *out) {
    if (!be_cuda_is(b) || !out) return CK_EINVAL;
    cuda_backend *cb = (cuda_backend *)b;
    if (n_rows < 0 || n_rows > cb->last_n_out) return CK_EINVAL;
    if (n_rows == 0) return CK_OK;
    CU_RT(cudaSetDevice(cb->dev));
    CU_RT(ck_cuda_confidence(cb->logits, n_rows, b->m->cfg.vocab_size, cb->conf, cb->st));
    CU_RT(cudaMemcpyAsync(cb->h_conf, cb->conf, (size_t)n_rows * sizeof(be_cuda_conf), cudaMemcpyDeviceToHost,
                          cb->st));
    CU_RT(cudaStreamSynchronize(cb->st));
    memcpy(out, cb->h_conf, (size_t)n_rows * sizeof(be_cuda_conf));
    return CK_OK;
}

extern "C" int be_cuda_host_alloc(size_t bytes, void **out) {
    if (!out) return CK_EINVAL;
    *out = NULL;
    cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        *out = NULL;
        cuda_backend *cb = NULL;
        return cu_fail(cb, __func__, "cudaHostAlloc", cudaGetErrorString(e));
    }
    return CK_OK;
}

extern "C" void be_cuda_host_free(void *p) {
    if (p) (void)cudaFreeHost(p);
}

/* ------------------------------------------------------------ test hook */

extern "C" int be_cuda_qmatmul(int type, const void *w, int N, int K, const float *x, int M, int x_f16,
                               float *y, float *deq) {
    int block = 0, bytes = 0;
    if (!w || !x || !y || N <= 0 || K <= 0 || M <= 0) return CK_EINVAL;
    if (!ck_cuda_qtype_shape(type, &block, &bytes) || K % block || (size_t)K > CU_DEQ_ELEMS)
        return CK_EUNSUPPORTED;
    if (!be_cuda_available()) return CK_EBACKEND;
    /* a backend with only what cu_matmul reads: streams, cuBLAS, scratch */
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) return CK_ENOMEM;
    cb->wf16 = x_f16;
    char err[256] = "";
    const size_t errlen = sizeof err;
    const size_t wbytes = (size_t)N * (size_t)(K / block) * (size_t)bytes;
    const size_t xs = x_f16 ? 2 : 4, nx = (size_t)M * K;
    void *dw = NULL, *dx = NULL, *dd = NULL, *hx = NULL;
    float *dy = NULL;
    cu_mat mt;
    int rc = cu_init_device(cb, err, errlen);
    if (rc) goto out;
    rc = CK_EBACKEND;
    hx = malloc(nx * xs);
    if (!hx) {
        rc = CK_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nx; i++) {
        if (x_f16)
            ((__half *)hx)[i] = __float2half_rn(x[i]);
        else
            ((float *)hx)[i] = x[i];
    }
    if (cu_malloc(cb, &dw, wbytes) || cu_malloc(cb, &dx, nx * xs) ||
        cu_malloc(cb, (void **)&dy, (size_t)M * N * 4) || cu_malloc(cb, &cb->deq, CU_DEQ_ELEMS * xs) ||
        (deq && cu_malloc(cb, &dd, (size_t)N * K * 4)))
        goto out;
    if (cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice) ||
        cudaMemcpy(dx, hx, nx * xs, cudaMemcpyHostToDevice))
        goto out;
    mt.nseg = 1;
    mt.K = K;
    mt.owned = 0;
    mt.seg[0].w = dw;
    mt.seg[0].type = type;
    mt.seg[0].rows = N;
    if (cu_matmul(cb, dy, dx, &mt, M, 0.0f)) goto out;
    if (deq && ck_cuda_qdequant(type, dw, N, K, dd, 0, cb->st)) goto out;
    if (cudaStreamSynchronize(cb->st) || cudaMemcpy(y, dy, (size_t)M * N * 4, cudaMemcpyDeviceToHost) ||
        (deq && cudaMemcpy(deq, dd, (size_t)N * K * 4, cudaMemcpyDeviceToHost)))
        goto out;
    rc = CK_OK;
out:
    if (rc && err[0]) fprintf(stderr, "confkv cuda: %s: %s\n", __func__, err);
    (void)cudaGetLastError();
    free(hx);
    cu_free_dev(dw);
    cu_free_dev(dx);
    cu_free_dev(dy);
    cu_free_dev(dd);
    cu_destroy(&cb->base); /* frees cb->deq, the streams and cuBLAS */
    return rc;
}
