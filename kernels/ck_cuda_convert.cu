/* ck_cuda_convert.cu - weight conversion at upload: ggml types to f32/f16.
 *
 * The backend copies a tensor's stored bytes to a device staging buffer and
 * this kernel writes them out in the type the backend computes with, so the
 * host never touches the values (ck_cuda.h gives the contract). f32, f16
 * and bf16 are converted here; the quantized types go to ck_cuda_quant.cu's
 * dequantizer, which reads blocks of any alignment. */
#include "ck_cuda.h"

extern "C" {
#include "quant.h"
}

template <typename OutT>
static __global__ void ck_convert_kernel(const unsigned char *raw, int type, size_t n, OutT *dst) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v;
        switch (type) {
        case QUANT_F32: v = ((const float *)raw)[i]; break;
        case QUANT_F16: v = __half2float(__ushort_as_half(((const unsigned short *)raw)[i])); break;
        default: /* QUANT_BF16 (the launcher admits nothing else) */
            v = __uint_as_float((unsigned)((const unsigned short *)raw)[i] << 16);
            break;
        }
        ck_store(dst + i, v);
    }
}

cudaError_t ck_cuda_convert(const void *raw, int type, size_t n, void *dst, int out_f16, cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    int block;
    if (ck_cuda_qtype_shape(type, &block, NULL)) {
        /* n / block "rows" of one block each: the same bytes, in order */
        if (n % (size_t)block || n / (size_t)block > 0x7fffffff) return cudaErrorInvalidValue;
        return ck_cuda_qdequant(type, raw, (int)(n / (size_t)block), block, dst, out_f16, st);
    }
    if (type != QUANT_F32 && type != QUANT_F16 && type != QUANT_BF16) return cudaErrorInvalidValue;
    const int threads = 256;
    size_t want = (n + threads - 1) / threads;
    unsigned grid = (unsigned)(want < 65536 ? want : 65536);
    if (out_f16)
        ck_convert_kernel<__half>
            <<<grid, threads, 0, st>>>((const unsigned char *)raw, type, n, (__half *)dst);
    else
        ck_convert_kernel<float><<<grid, threads, 0, st>>>((const unsigned char *)raw, type, n, (float *)dst);
    return cudaGetLastError();
}
