/* ck_cuda_embed.cu - token embedding gather (ck_cuda.h gives the contract).
 * One thread block per token; threads stride over the row. */
#include "ck_cuda.h"

template <typename InT>
static __global__ void ck_embed_kernel(float *x, const InT *emb, const int32_t *token, int dim) {
    const int i = blockIdx.x;
    const InT *row = emb + (size_t)token[i] * dim;
    float *o = x + (size_t)i * dim;
    for (int k = threadIdx.x; k < dim; k += blockDim.x) o[k] = ck_load(row + k);
}

cudaError_t ck_cuda_embed(float *x, const void *emb, int emb_f16, const int32_t *token, int T, int dim,
                          cudaStream_t st) {
    if (T <= 0) return cudaSuccess;
    if (emb_f16)
        ck_embed_kernel<__half><<<T, 256, 0, st>>>(x, (const __half *)emb, token, dim);
    else
        ck_embed_kernel<float><<<T, 256, 0, st>>>(x, (const float *)emb, token, dim);
    return cudaGetLastError();
}
