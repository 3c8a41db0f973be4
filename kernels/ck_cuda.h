/* ck_cuda.h - the CUDA kernels behind backend_cuda.cu (internal, C++ only).
 *
 * Each kernel lives in a ck_cuda_<what>.cu file of its own and is reached
 * through a host launcher declared here. A launcher enqueues its kernel on
 * the given stream and returns cudaGetLastError(): launch-configuration
 * errors show up at once, faults inside the kernel at the next synchronising
 * call. Launchers allocate nothing and never synchronise.
 *
 * Conventions, as in backend_cpu.c: every matrix is row-major; T is the
 * number of tokens in the batch; the KV pool is kv.h's layout, in floats:
 *     block b, layer l:  K[block_size][kv_dim] then V[block_size][kv_dim]
 * and the int8 pool is kvq.h's layout (one block: kv8_block_bytes).
 * The batch's sequences are "compact": the backend numbers the sequences
 * that appear in the batch 0..n-1, and their block tables are concatenated:
 * sequence s owns blocks[seq_off[s] .. seq_off[s] + seq_nblk[s]) and, in the
 * same places, mass[] (attention mass per logical block). A table entry e is
 * an f32 pool block when e >= 0, nothing when e == -1 (KV_NONE), and int8
 * pool block CK_CUDA_DEC8(e) when e <= -2. */
#ifndef CK_CUDA_H
#define CK_CUDA_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* Largest head_dim the attention kernel handles (8 values per lane). */
#define CK_CUDA_MAX_HEAD_DIM 256

/* Block-table entries for int8 pool blocks (see above). */
#define CK_CUDA_ENC8(b8) (-(b8)-2)
#define CK_CUDA_DEC8(e) (-(e)-2)

/* ------------------------------------------------------------ helpers */

/* Store a float as float or as half (round to nearest even). */
static __device__ __forceinline__ void ck_store(float *p, float v) { *p = v; }
static __device__ __forceinline__ void ck_store(__half *p, float v) { *p = __float2half_rn(v); }
static __device__ __forceinline__ float ck_load(const float *p) { return *p; }
static __device__ __forceinline__ float ck_load(const __half *p) { return __half2float(*p); }

/* Sum over a warp; every lane gets the same value (the butterfly adds each
 * pair in both orders, which are equal, so lanes agree bit for bit). */
static __device__ __forceinline__ float ck_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float ck_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024).
 * Every thread gets the result. sh: 32 floats of shared memory; the call
 * ends with a barrier so sh may be reused right after. */
static __device__ __forceinline__ float ck_block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ck_warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : 0.0f;
    r = ck_warp_sum(r);
    __syncthreads();
    return r;
}
static __device__ __forceinline__ float ck_block_max(float v, float *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ck_warp_max(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : -INFINITY;
    r = ck_warp_max(r);
    __syncthreads();
    return r;
}

/* ------------------------------------------------------------ launchers */

/* ck_cuda_convert.cu: n elements of ggml type `type` (quant.h ids: f32, f16,
 * bf16, or a quantized type of ck_cuda_qtype_shape) at raw (device memory,
 * 4-byte aligned) into n floats (out_f16 = 0) or halves (out_f16 = 1) at
 * dst. n is a multiple of a quantized type's block. */
cudaError_t ck_cuda_convert(const void *raw, int type, size_t n, void *dst, int out_f16, cudaStream_t st);

/* ck_cuda_embed.cu: x[i] = emb[token[i]] as floats, i < T. emb: (vocab, dim)
 * floats or halves (emb_f16). */
cudaError_t ck_cuda_embed(float *x, const void *emb, int emb_f16, const int32_t *token, int T, int dim,
                          cudaStream_t st);

/* ck_cuda_rmsnorm.cu: out[r] = w * x[src[r]] / sqrt(mean(x[src[r]]^2) + eps)
 * for r < n_rows, as llama2.c computes it; src NULL means src[r] = r. out:
 * (n_rows, dim) floats or halves (out_f16). */
cudaError_t ck_cuda_rmsnorm(void *out, int out_f16, const float *x, const int32_t *src, const float *w,
                            int n_rows, int dim, float eps, cudaStream_t st);

/* ck_cuda_rope.cu: rotate the pairs of the first n_heads + n_kv_heads
 * heads of each row of qkv (T, qkv_stride) (the Q heads, then the K heads)
 * by pos[i] * inv_freq[k], cos and sin times mscale; pair k is (2k, 2k + 1),
 * or (k, k + head_dim / 2) when neox. */
cudaError_t ck_cuda_rope(float *qkv, int qkv_stride, const int32_t *pos, const float *inv_freq, int T,
                         int n_heads, int n_kv_heads, int head_dim, int neox, float mscale, cudaStream_t st);

/* ck_cuda_rope.cu: before RoPE, each row of qkv (T, qkv_stride) += bias
 * (qkv_dim; NULL: none), then each Q head RMSNormed with q_norm and each K
 * head with k_norm (head_dim each; NULL: not normed), eps as the model's. */
cudaError_t ck_cuda_qkv_prep(float *qkv, int qkv_stride, const float *bias, int qkv_dim, const float *q_norm,
                             const float *k_norm, float eps, int T, int n_heads, int n_kv_heads, int head_dim,
                             cudaStream_t st);

/* ck_cuda_swiglu.cu: out[i][k] = silu(h13[i][k]) * h13[i][F + k], out (T, F)
 * floats or halves. */
cudaError_t ck_cuda_swiglu(void *out, int out_f16, const float *h13, int T, int F, cudaStream_t st);

/* ck_cuda_kv.cu: write row i's K (qkv[i][q_dim ..]) and V (qkv[i][q_dim +
 * kv_dim ..]) for `layer` into the hot block of its position. The backend
 * checked that every such block is a pool block. */
cudaError_t ck_cuda_kv_write(float *kv, size_t block_floats, int layer, int block_size, int kv_dim,
                             const float *qkv, int qkv_stride, int q_dim, const int32_t *pos,
                             const int32_t *cseq, const int32_t *seq_off, const int32_t *blocks, int T,
                             cudaStream_t st);

/* ck_cuda_kv.cu: int8 form of one block, byte for byte engine/format/kvq.h's:
 * quantize the block at src (block_floats floats, first n_tokens positions
 * written) into dst, or expand src into dst. */
cudaError_t ck_cuda_kv_quantize(const float *src, int n_tokens, void *dst, int n_layers, int block_size,
                                int kv_dim, cudaStream_t st);
cudaError_t ck_cuda_kv_dequantize(const void *src, float *dst, int n_layers, int block_size, int kv_dim,
                                  cudaStream_t st);

/* ck_cuda_attn.cu: paged attention for `layer`, one (token, head) per thread
 * block: out[i][h*hd ..] (floats or halves) = softmax(q k / sqrt(hd)) v over
 * the hot blocks (f32 or int8) of token i's sequence at positions <= pos[i];
 * KV_NONE entries are skipped. mass[seq_off[s] + j] += the attention token
 * i's head put on logical block j, times mass_scale. head_dim <=
 * CK_CUDA_MAX_HEAD_DIM. */
typedef struct ck_attn_args {
    const float *qkv; /* (T, qkv_stride): Q heads first */
    int qkv_stride;
    void *out; /* (T, n_heads * head_dim) */
    int out_f16;
    const float *kv; /* the f32 pool */
    size_t block_floats;
    const unsigned char *kv8; /* the int8 pool (kvq.h layout), or NULL */
    size_t kv8_block_bytes;
    int layer, block_size, kv_dim, head_dim, n_heads, n_kv_heads;
    const int32_t *pos, *cseq, *seq_off, *blocks;
    float *mass; /* (total blocks) or NULL */
    float mass_scale;
    int T;
} ck_attn_args;
cudaError_t ck_cuda_attention(const ck_attn_args *a, cudaStream_t st);

/* ck_cuda_quant.cu: weights kept in a GGUF quantized type (QB_* ids of
 * engine/format/qblock.h: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_XS), as rows of blocks exactly as the file stores them
 * (row n at w + n * (K / block) * bytes, device memory, 2-byte aligned).
 *
 * ck_cuda_qtype_shape: 1 and the type's elements and bytes a block (either
 * pointer may be NULL) for those types, 0 for any other (f32, f16, ...).
 * Host code, no CUDA call. */
int ck_cuda_qtype_shape(int type, int *block, int *bytes);

/* Most token rows one ck_cuda_qgemv takes (the backend uses the GEMV for
 * batches up to this, dequantize + cuBLAS above). */
#define CK_QGEMV_MAX_M 8

/* y[m * ldy + n] = sum_k x[m * ldx + k] w[n][k] (+ beta * y[m * ldy + n]
 * when beta != 0; y is not read when beta == 0) for m < M, n < N: the
 * weights (N, K) of `type` read in place, x floats or halves (x_f16),
 * f32 accumulation. K a multiple of the type's block, M <=
 * CK_QGEMV_MAX_M; cudaErrorInvalidValue otherwise. */
cudaError_t ck_cuda_qgemv(int type, const void *w, int N, int K, const void *x, int x_f16, int ldx, int M,
                          float *y, int ldy, float beta, cudaStream_t st);

/* dst (rows, K) row-major, floats or halves (out_f16) = rows 0..rows-1 of
 * the weights at w, dequantized with ggml's float operations (the f32
 * values equal engine/format/quant.c's quant_to_f32 bit for bit). */
cudaError_t ck_cuda_qdequant(int type, const void *w, int rows, int K, void *dst, int out_f16,
                             cudaStream_t st);

/* ck_cuda_conf.cu: per row of logits (n_rows, vocab): entropy of the softmax
 * in nats, p_max, gap = p_max - p_second, and the argmax (lowest index on a
 * tie), in one pass with an online softmax. out: 4 words per row laid out as
 * be_cuda_conf (backend_cuda.h). */
cudaError_t ck_cuda_confidence(const float *logits, int n_rows, int vocab, void *out, cudaStream_t st);

#endif
