/* ck_cuda_rope.cu - the q/k preparation before attention: biases, the
 * qwen3 head norms, and RoPE (ck_cuda.h gives the contracts).
 *
 * Same frequencies as the CPU backend: inv_freq[k] from model_rope_freqs
 * (1 / powf(theta, 2k / head_dim), with rope_freqs divisors and linear/YaRN
 * scaling folded in), computed once on the host and uploaded; the angle is
 * the float product pos * inv_freq[k], cos and sin times mscale (1 except
 * YaRN or rope.scaling.attn_factor). One thread block per token; threads
 * stride over the (head, pair) grid of the Q heads followed by the K heads,
 * which sit next to each other in the qkv row. */
#include "ck_cuda.h"

static __global__ void ck_rope_kernel(float *qkv, int qkv_stride, const int32_t *pos, const float *inv_freq,
                                      int n_pairs, int half_hd, int neox, float mscale) {
    const int i = blockIdx.x;
    float *row = qkv + (size_t)i * qkv_stride;
    const float p = (float)pos[i];
    for (int w = threadIdx.x; w < n_pairs; w += blockDim.x) {
        const int head = w / half_hd, k = w % half_hd;
        const float val = p * inv_freq[k];
        const float fcr = cosf(val) * mscale, fci = sinf(val) * mscale;
        /* adjacent pairs (2k, 2k + 1), or NEOX's halves (k, k + hd / 2) */
        float *v = row + (size_t)head * 2 * half_hd + (neox ? k : 2 * k);
        const int o = neox ? half_hd : 1;
        const float v0 = v[0], v1 = v[o];
        v[0] = v0 * fcr - v1 * fci;
        v[o] = v0 * fci + v1 * fcr;
    }
}

cudaError_t ck_cuda_rope(float *qkv, int qkv_stride, const int32_t *pos, const float *inv_freq, int T,
                         int n_heads, int n_kv_heads, int head_dim, int neox, float mscale, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    const int half_hd = head_dim / 2, n_pairs = (n_heads + n_kv_heads) * half_hd;
    const int threads = n_pairs >= 256 ? 256 : 64;
    ck_rope_kernel<<<T, threads, 0, st>>>(qkv, qkv_stride, pos, inv_freq, n_pairs, half_hd, neox, mscale);
    return cudaGetLastError();
}

/* Bias first (the whole row), then each q and k head normed by one thread:
 * simple rather than fast, as a head is at most CK_CUDA_MAX_HEAD_DIM values
 * and this runs once a layer. The sums are in the CPU backend's order
 * (serial, float), so the two agree closely. */
static __global__ void ck_qkv_prep_kernel(float *qkv, int qkv_stride, const float *bias, int qkv_dim,
                                          const float *q_norm, const float *k_norm, float eps, int n_heads,
                                          int n_kv_heads, int hd) {
    float *row = qkv + (size_t)blockIdx.x * qkv_stride;
    if (bias)
        for (int j = threadIdx.x; j < qkv_dim; j += blockDim.x) row[j] += bias[j];
    if (!q_norm && !k_norm) return;
    __syncthreads();
    for (int h = threadIdx.x; h < n_heads + n_kv_heads; h += blockDim.x) {
        const float *w = h < n_heads ? q_norm : k_norm;
        if (!w) continue;
        float *v = row + (size_t)h * hd;
        float ss = 0.0f;
        for (int j = 0; j < hd; j++) ss += v[j] * v[j];
        ss = 1.0f / sqrtf(ss / hd + eps);
        for (int j = 0; j < hd; j++) v[j] = w[j] * (ss * v[j]);
    }
}

cudaError_t ck_cuda_qkv_prep(float *qkv, int qkv_stride, const float *bias, int qkv_dim, const float *q_norm,
                             const float *k_norm, float eps, int T, int n_heads, int n_kv_heads, int head_dim,
                             cudaStream_t st) {
    if (T <= 0 || (!bias && !q_norm && !k_norm)) return cudaSuccess;
    ck_qkv_prep_kernel<<<T, 128, 0, st>>>(qkv, qkv_stride, bias, qkv_dim, q_norm, k_norm, eps, n_heads,
                                          n_kv_heads, head_dim);
    return cudaGetLastError();
}
