/* backend_cuda_int.h - what the CUDA backend's files share (private to
 * kernels/backend_cuda*.cu): its state, the device's weight matrices, and
 * the error paths.
 *
 * backend_cuda.cu runs a batch (the products, the forward pass, the KV
 * block operations, the extras of backend_cuda.h); backend_cuda_build.cu
 * creates and destroys the backend: every device buffer is sized and
 * allocated there, once. The cuda_backend owns every pointer in it. */
#ifndef CK_BACKEND_CUDA_INT_H
#define CK_BACKEND_CUDA_INT_H
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
int cu_fail(cuda_backend *cb, const char *func, const char *call, const char *why);

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

/* At creation: a sentence in err instead of the log; returns rc. */
int cu_seterr(char *err, size_t errlen, int rc, const char *what, const char *why);
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

/* The ops table (backend_cuda.cu): a backend is CUDA's when its ops are these. */
extern const be_ops cu_ops_table_;
/* Bytes of one int8 KV block (backend_cuda.cu). */
size_t cu_kv8_bytes(const cuda_backend *cb);

/* backend_cuda_build.cu: frees everything cb holds, and cb; */
void cu_destroy(backend *b);
/* cudaMalloc that counts into cb->bytes (a zero size still gets a pointer); */
cudaError_t cu_malloc(cuda_backend *cb, void **p, size_t bytes);
/* cudaFree of a pointer or NULL; */
void cu_free_dev(void *p);
/* picks and checks the device, creates the streams and cuBLAS (a sentence
 * in err on failure). */
int cu_init_device(cuda_backend *cb, char *err, size_t errlen);

#endif
