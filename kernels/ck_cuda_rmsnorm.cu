/* ck_cuda_rmsnorm.cu - RMSNorm of rows, optionally gathered (ck_cuda.h).
 *
 * One thread block per output row. The operations are llama2.c's (mean of
 * squares, + eps, 1 / sqrtf, w * (s * x)); only the order of the sum
 * differs from the CPU's, which is within float rounding. The gather (src)
 * serves the final norm, which runs only for the rows that want logits. */
#include "ck_cuda.h"

template <typename OutT>
static __global__ void ck_rmsnorm_kernel(OutT *out, const float *x, const int32_t *src, const float *w,
                                         int dim, float eps) {
    __shared__ float sh[32];
    const int r = blockIdx.x;
    const float *xr = x + (size_t)(src ? src[r] : r) * dim;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < dim; k += blockDim.x) ss += xr[k] * xr[k];
    ss = ck_block_sum(ss, sh);
    ss /= (float)dim;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    OutT *o = out + (size_t)r * dim;
    for (int k = threadIdx.x; k < dim; k += blockDim.x) ck_store(o + k, w[k] * (ss * xr[k]));
}

cudaError_t ck_cuda_rmsnorm(void *out, int out_f16, const float *x, const int32_t *src, const float *w,
                            int n_rows, int dim, float eps, cudaStream_t st) {
    if (n_rows <= 0) return cudaSuccess;
    const int threads = dim >= 1024 ? 1024 : (dim >= 256 ? 256 : 64);
    if (out_f16)
        ck_rmsnorm_kernel<__half><<<n_rows, threads, 0, st>>>((__half *)out, x, src, w, dim, eps);
    else
        ck_rmsnorm_kernel<float><<<n_rows, threads, 0, st>>>((float *)out, x, src, w, dim, eps);
    return cudaGetLastError();
}
