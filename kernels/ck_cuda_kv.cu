/* ck_cuda_kv.cu - writes into the paged KV pool, and the int8 form of a
 * block (ck_cuda.h gives the contracts; backend_cuda.h the int8 layout).
 *
 * Int8: keys get one scale per channel (per layer, over the block's tokens),
 * because key outliers sit in fixed channels; values get one scale per token
 * (per layer, over its channels). Symmetric: scale = max|x| / 127,
 * q = round(x / scale) clamped to [-127, 127]; an all-zero group gets scale
 * 0 and q = 0. Dequantised, each element is within scale / 2 of the
 * original. */
#include "ck_cuda.h"

/* ------------------------------------------------------------ KV write */

static __global__ void ck_kv_write_kernel(float *kv, size_t block_floats, int layer, int bs,
                                          int kv_dim, const float *qkv, int qkv_stride, int q_dim,
                                          const int32_t *pos, const int32_t *cseq,
                                          const int32_t *seq_off, const int32_t *blocks) {
    const int i = blockIdx.x, p = pos[i];
    const int b = blocks[seq_off[cseq[i]] + p / bs];
    float *dst = kv + (size_t)b * block_floats + (size_t)layer * 2 * bs * kv_dim +
                 (size_t)(p % bs) * kv_dim;
    const float *k = qkv + (size_t)i * qkv_stride + q_dim, *v = k + kv_dim;
    for (int c = threadIdx.x; c < kv_dim; c += blockDim.x) {
        dst[c] = k[c];
        dst[(size_t)bs * kv_dim + c] = v[c];
    }
}

cudaError_t ck_cuda_kv_write(float *kv, size_t block_floats, int layer, int block_size,
                             int kv_dim, const float *qkv, int qkv_stride, int q_dim,
                             const int32_t *pos, const int32_t *cseq, const int32_t *seq_off,
                             const int32_t *blocks, int T, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    const int threads = kv_dim >= 256 ? 256 : 64;
    ck_kv_write_kernel<<<T, threads, 0, st>>>(kv, block_floats, layer, block_size, kv_dim, qkv,
                                              qkv_stride, q_dim, pos, cseq, seq_off, blocks);
    return cudaGetLastError();
}

/* ------------------------------------------------------------ int8 */

/* Where layer l's pieces sit in the int8 form (see backend_cuda.h). */
static __device__ __forceinline__ float *ck_q8_kscale(void *base, int l, int bs, int kvd) {
    return (float *)base + (size_t)l * (kvd + bs);
}
static __device__ __forceinline__ signed char *ck_q8_k(void *base, int L, int l, int bs, int kvd) {
    return (signed char *)((float *)base + (size_t)L * (kvd + bs)) + (size_t)l * 2 * bs * kvd;
}

static __device__ __forceinline__ signed char ck_q8_round(float x, float scale) {
    if (scale == 0.0f) return 0;
    int q = __float2int_rn(x / scale);
    q = q > 127 ? 127 : (q < -127 ? -127 : q);
    return (signed char)q;
}

/* Keys: grid (n_layers), threads stride over channels; each thread scans its
 * channel over the block's tokens (reads coalesced across the warp). */
static __global__ void ck_kq_kernel(const float *src, void *dst, int L, int bs, int kvd) {
    const int l = blockIdx.x;
    const float *k = src + (size_t)l * 2 * bs * kvd;
    float *ks = ck_q8_kscale(dst, l, bs, kvd);
    signed char *q = ck_q8_k(dst, L, l, bs, kvd);
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) {
        float amax = 0.0f;
        for (int t = 0; t < bs; t++) amax = fmaxf(amax, fabsf(k[(size_t)t * kvd + c]));
        const float scale = amax / 127.0f;
        ks[c] = scale;
        for (int t = 0; t < bs; t++) q[(size_t)t * kvd + c] = ck_q8_round(k[(size_t)t * kvd + c], scale);
    }
}

/* Values: grid (block_size, n_layers), one thread block per token row. */
static __global__ void ck_vq_kernel(const float *src, void *dst, int L, int bs, int kvd) {
    __shared__ float sh[32];
    const int t = blockIdx.x, l = blockIdx.y;
    const float *v = src + (size_t)l * 2 * bs * kvd + (size_t)bs * kvd + (size_t)t * kvd;
    float *vs = ck_q8_kscale(dst, l, bs, kvd) + kvd;
    signed char *q = ck_q8_k(dst, L, l, bs, kvd) + (size_t)bs * kvd + (size_t)t * kvd;
    float amax = 0.0f;
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) amax = fmaxf(amax, fabsf(v[c]));
    amax = ck_block_max(amax, sh);
    const float scale = amax / 127.0f;
    if (threadIdx.x == 0) vs[t] = scale;
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) q[c] = ck_q8_round(v[c], scale);
}

/* Dequantise: grid (block_size, n_layers); each thread block rebuilds row t
 * of K and of V of one layer. */
static __global__ void ck_kv_deq_kernel(const void *src, float *dst, int L, int bs, int kvd) {
    const int t = blockIdx.x, l = blockIdx.y;
    void *base = const_cast<void *>(src);
    const float *ks = ck_q8_kscale(base, l, bs, kvd), *vs = ks + kvd;
    const signed char *qk = ck_q8_k(base, L, l, bs, kvd) + (size_t)t * kvd;
    const signed char *qv = qk + (size_t)bs * kvd;
    float *k = dst + (size_t)l * 2 * bs * kvd + (size_t)t * kvd, *v = k + (size_t)bs * kvd;
    const float vscale = vs[t];
    for (int c = threadIdx.x; c < kvd; c += blockDim.x) {
        k[c] = (float)qk[c] * ks[c];
        v[c] = (float)qv[c] * vscale;
    }
}

cudaError_t ck_cuda_kv_quantize(const float *src, void *dst, int n_layers, int block_size,
                                int kv_dim, cudaStream_t st) {
    const int threads = kv_dim >= 256 ? 256 : 64;
    ck_kq_kernel<<<n_layers, threads, 0, st>>>(src, dst, n_layers, block_size, kv_dim);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    ck_vq_kernel<<<dim3(block_size, n_layers), threads, 0, st>>>(src, dst, n_layers, block_size,
                                                                  kv_dim);
    return cudaGetLastError();
}

cudaError_t ck_cuda_kv_dequantize(const void *src, float *dst, int n_layers, int block_size,
                                  int kv_dim, cudaStream_t st) {
    const int threads = kv_dim >= 256 ? 256 : 64;
    ck_kv_deq_kernel<<<dim3(block_size, n_layers), threads, 0, st>>>(src, dst, n_layers,
                                                                      block_size, kv_dim);
    return cudaGetLastError();
}
