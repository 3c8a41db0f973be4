/* backend_cuda.cu - the CUDA backend (backend_cuda.h, backend.h).
 *
 * The forward pass follows the CPU backend (engine/cpu/) step for step, so the two can be
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
 * Quantized weights (every GGUF type of ck_cuda_qtype_shape) stay
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
 * expands every quantized tensor at upload instead (every product then a
 * cuBLAS f16 GEMM: a baseline to compare the quantized path with).
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
 * pool in engine/format/kvq.h's layout. kv_compress / kv_expand run kvq.c's
 * arithmetic on the device (the bytes match kvq_quantize's), and attention
 * reads an int8 block where the f32 entry is KV_NONE, as backend_cpu.c does;
 * in the device's block table such an entry is CK_CUDA_ENC8(block8).
 *
 * Streams: the forward pass and cuBLAS run on one stream; KV block copies,
 * compression and expansion on a second one. forward() waits for its stream
 * before it returns, and each block operation for its own, so they never
 * overlap. */
#include "backend_cuda_int.h"

/* ------------------------------------------------------------ errors */

int cu_fail(cuda_backend *cb, const char *func, const char *call, const char *why) {
    fprintf(stderr, "confkv cuda: %s: %s: %s\n", func, call, why);
    if (cb) {
        cb->last_n_out = 0;
        (void)cudaStreamSynchronize(cb->st);
        (void)cudaGetLastError();
    }
    return CK_EBACKEND;
}

int cu_seterr(char *err, size_t errlen, int rc, const char *what, const char *why) {
    if (err && errlen) snprintf(err, errlen, "cuda backend: %s: %s", what, why);
    return rc;
}

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
size_t cu_kv8_bytes(const cuda_backend *cb) {
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

const be_ops cu_ops_table_ = {
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
