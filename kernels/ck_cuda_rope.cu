/* ck_cuda_rope.cu - RoPE on adjacent pairs (ck_cuda.h gives the contract).
 *
 * Same frequencies as the CPU backend: inv_freq[k] = 1 / powf(theta, 2k /
 * head_dim), computed once on the host and uploaded, and the angle is the
 * float product pos * inv_freq[k]. One thread block per token; threads
 * stride over the (head, pair) grid of the Q heads followed by the K heads,
 * which sit next to each other in the qkv row. */
#include "ck_cuda.h"

static __global__ void ck_rope_kernel(float *qkv, int qkv_stride, const int32_t *pos,
                                      const float *inv_freq, int n_pairs, int half_hd) {
    const int i = blockIdx.x;
    float *row = qkv + (size_t)i * qkv_stride;
    const float p = (float)pos[i];
    for (int w = threadIdx.x; w < n_pairs; w += blockDim.x) {
        const int head = w / half_hd, k = w % half_hd;
        const float val = p * inv_freq[k];
        const float fcr = cosf(val), fci = sinf(val);
        float *v = row + (size_t)head * 2 * half_hd + 2 * k;
        const float v0 = v[0], v1 = v[1];
        v[0] = v0 * fcr - v1 * fci;
        v[1] = v0 * fci + v1 * fcr;
    }
}

cudaError_t ck_cuda_rope(float *qkv, int qkv_stride, const int32_t *pos, const float *inv_freq,
                         int T, int n_heads, int n_kv_heads, int head_dim, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    const int half_hd = head_dim / 2, n_pairs = (n_heads + n_kv_heads) * half_hd;
    const int threads = n_pairs >= 256 ? 256 : 64;
    ck_rope_kernel<<<T, threads, 0, st>>>(qkv, qkv_stride, pos, inv_freq, n_pairs, half_hd);
    return cudaGetLastError();
}
