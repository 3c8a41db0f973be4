/* ck_cuda_swiglu.cu - SwiGLU: silu(gate) * up (ck_cuda.h gives the contract).
 * The gate and up halves of each row come from one fused product, as on the
 * CPU. Grid-stride over all T * F outputs. */
#include "ck_cuda.h"

template <typename OutT>
static __global__ void ck_swiglu_kernel(OutT *out, const float *h13, size_t n, int F) {
    for (size_t w = (size_t)blockIdx.x * blockDim.x + threadIdx.x; w < n;
         w += (size_t)gridDim.x * blockDim.x) {
        const size_t i = w / (size_t)F, k = w % (size_t)F;
        const float g = h13[i * 2 * F + k], u = h13[i * 2 * F + F + k];
        ck_store(out + w, g * (1.0f / (1.0f + expf(-g))) * u);
    }
}

cudaError_t ck_cuda_swiglu(void *out, int out_f16, const float *h13, int T, int F, cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    const size_t n = (size_t)T * F;
    const int threads = 256;
    size_t want = (n + threads - 1) / threads;
    unsigned grid = (unsigned)(want < 65536 ? want : 65536);
    if (out_f16)
        ck_swiglu_kernel<__half><<<grid, threads, 0, st>>>((__half *)out, h13, n, F);
    else
        ck_swiglu_kernel<float><<<grid, threads, 0, st>>>((float *)out, h13, n, F);
    return cudaGetLastError();
}
