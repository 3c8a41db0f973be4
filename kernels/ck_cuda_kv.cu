/* ck_cuda_kv.cu - writes into the paged KV pool, and the int8 form of a
 * block (ck_cuda.h gives the contracts).
 *
 * Int8: the bytes of engine/format/kvq.c's kvq_quantize, operation for operation
 * (same layout, same scale = max|x| / 127, same roundf(x * (1 / scale))
 * clamped to [-127, 127], unwritten positions 0), so a block compressed here
 * is read back by kvq_dequantize and the other way round. Keys get one scale
 * per channel (key outliers sit in fixed channels), values one per token. */
#include <cuda_fp16.h>

#include "ck_cuda.h"

/* ------------------------------------------------------------ KV write */

static __global__ void ck_kv_write_kernel(float *kv, size_t block_floats, int layer, int bs, int kv_dim,
                                          const float *qkv, int qkv_stride, int q_dim, const int32_t *pos,
                                          const int32_t *cseq, const int32_t *seq_off,
                                          const int32_t *blocks) {
    const int i = blockIdx.x, p = pos[i];
    const int b = blocks[seq_off[cseq[i]] + p / bs];
    float *dst = kv + (size_t)b * block_floats + (size_t)layer * 2 * bs * kv_dim + (size_t)(p % bs) * kv_dim;
    const float *k = qkv + (size_t)i * qkv_stride + q_dim, *v = k + kv_dim;
    for (int c = threadIdx.x; c < kv_dim; c += blockDim.x) {
        dst[c] = k[c];
        dst[(size_t)bs * kv_dim + c] = v[c];
    }
}

cudaError_t ck_cuda_kv_write(float *kv, size_t block_floats, int layer, int block_size, int kv_dim,
                             const float *qkv, int qkv_stride, int q_dim, const int32_t *pos,
                             const int32_t *cseq, const int32_t *seq_off, const int32_t *blocks, int T,
                             cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    const int threads = kv_dim >= 256 ? 256 : 64;
    ck_kv_write_kernel<<<T, threads, 0, st>>>(kv, block_floats, layer, block_size, kv_dim, qkv, qkv_stride,
                                              q_dim, pos, cseq, seq_off, blocks);
    return cudaGetLastError();
}

/* ------------------------------------------------------------ int8 */

/* Layer l of the int8 form (kvq.h): int8 k[bs][kvd], int8 v[bs][kvd], f16
 * ks[kvd], f16 vs[bs]. kvd is even (head_dim is), so the halves are 2-byte
 * aligned. */
static __device__ __forceinline__ unsigned char *ck_q8_layer(void *base, int l, int bs, int kvd) {
    const size_t layer_bytes = 2 * (size_t)bs * kvd + sizeof(__half) * ((size_t)kvd + bs);
    return (unsigned char *)base + (size_t)l * layer_bytes;
}

/* kvq_scale_f16: the half that is >= the scale (round up), as a float too. */
static __device__ __forceinline__ __half ck_scale_h(float scale) { return __float2half_ru(scale); }

/* kvq.c's rounding: round half away from zero of x * (1 / scale). */
static __device__ __forceinline__ signed char ck_q8(float x, float inv) {
    const float r = roundf(x * inv);
    return (signed char)(r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r));
}

/* Keys: grid (n_layers), threads stride over channels; each thread scans its
 * channel over the written tokens (reads coalesced across the warp). */
static __global__ void ck_kq_kernel(const float *src, void *dst, int bs, int kvd, int n_tokens) {
    const int l = blockIdx.x;
    const float *k = src + (size_t)l * 2 * bs * kvd;
    unsigned char *base = ck_q8_layer(dst, l, bs, kvd);
    signed char *q = (signed char *)base;
    __half *ks = (__half *)(base + 2 * (size_t)bs * kvd);
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) {
        float m = 0.0f;
        for (int t = 0; t < n_tokens; t++) m = fmaxf(m, fabsf(k[(size_t)t * kvd + c]));
        const __half hs = ck_scale_h(m / 127.0f);
        const float scale = __half2float(hs), inv = scale > 0.0f ? 1.0f / scale : 0.0f;
        ks[c] = hs;
        for (int t = 0; t < bs; t++)
            q[(size_t)t * kvd + c] = t < n_tokens ? ck_q8(k[(size_t)t * kvd + c], inv) : 0;
    }
}

/* Values: grid (block_size, n_layers), one thread block per token row. */
static __global__ void ck_vq_kernel(const float *src, void *dst, int bs, int kvd, int n_tokens) {
    __shared__ float sh[32];
    const int t = blockIdx.x, l = blockIdx.y;
    const float *v = src + (size_t)l * 2 * bs * kvd + (size_t)bs * kvd + (size_t)t * kvd;
    unsigned char *base = ck_q8_layer(dst, l, bs, kvd);
    signed char *q = (signed char *)base + (size_t)bs * kvd + (size_t)t * kvd;
    __half *vs = (__half *)(base + 2 * (size_t)bs * kvd) + kvd;
    if (t >= n_tokens) { /* block-uniform branch: unwritten rows are 0 */
        for (int c = threadIdx.x; c < kvd; c += blockDim.x) q[c] = 0;
        if (threadIdx.x == 0) vs[t] = __float2half(0.0f);
        return;
    }
    float m = 0.0f;
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) m = fmaxf(m, fabsf(v[c]));
    m = ck_block_max(m, sh);
    const __half hs = ck_scale_h(m / 127.0f);
    const float scale = __half2float(hs), inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    if (threadIdx.x == 0) vs[t] = hs;
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) q[c] = ck_q8(v[c], inv);
}

/* Dequantise: grid (block_size, n_layers); each thread block rebuilds row t
 * of K and of V of one layer. */
static __global__ void ck_kv_deq_kernel(const void *src, float *dst, int bs, int kvd) {
    const int t = blockIdx.x, l = blockIdx.y;
    const unsigned char *base = ck_q8_layer(const_cast<void *>(src), l, bs, kvd);
    const signed char *qk = (const signed char *)base + (size_t)t * kvd;
    const signed char *qv = qk + (size_t)bs * kvd;
    const __half *ks = (const __half *)(base + 2 * (size_t)bs * kvd), *vs = ks + kvd;
    float *k = dst + (size_t)l * 2 * bs * kvd + (size_t)t * kvd, *v = k + (size_t)bs * kvd;
    const float vscale = __half2float(vs[t]);
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) {
        k[c] = (float)qk[c] * __half2float(ks[c]);
        v[c] = (float)qv[c] * vscale;
    }
}

cudaError_t ck_cuda_kv_quantize(const float *src, int n_tokens, void *dst, int n_layers, int block_size,
                                int kv_dim, cudaStream_t st) {
    const int threads = kv_dim >= 256 ? 256 : 64;
    ck_kq_kernel<<<n_layers, threads, 0, st>>>(src, dst, block_size, kv_dim, n_tokens);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    ck_vq_kernel<<<dim3(block_size, n_layers), threads, 0, st>>>(src, dst, block_size, kv_dim, n_tokens);
    return cudaGetLastError();
}

cudaError_t ck_cuda_kv_dequantize(const void *src, float *dst, int n_layers, int block_size, int kv_dim,
                                  cudaStream_t st) {
    const int threads = kv_dim >= 256 ? 256 : 64;
    ck_kv_deq_kernel<<<dim3(block_size, n_layers), threads, 0, st>>>(src, dst, block_size, kv_dim);
    return cudaGetLastError();
}
