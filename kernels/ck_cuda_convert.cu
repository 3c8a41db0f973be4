/* ck_cuda_convert.cu - weight conversion at upload: ggml types to f32/f16.
 *
 * The backend copies a tensor's stored bytes to a device staging buffer and
 * this kernel writes them out in the type the backend computes with, so the
 * host never touches the values (ck_cuda.h gives the contract). q8_0 blocks
 * are 34 bytes (f16 d, int8 q[32]) and so only 2-byte aligned: the scale is
 * read byte by byte. */
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
        case QUANT_F32:
            v = ((const float *)raw)[i];
            break;
        case QUANT_F16:
            v = __half2float(__ushort_as_half(((const unsigned short *)raw)[i]));
            break;
        case QUANT_BF16:
            v = __uint_as_float((unsigned)((const unsigned short *)raw)[i] << 16);
            break;
        default: { /* QUANT_Q8_0 */
            const unsigned char *blk = raw + (i / QUANT_Q8_0_BLOCK) * QUANT_Q8_0_BYTES;
            unsigned short d16 = (unsigned short)(blk[0] | (blk[1] << 8));
            float d = __half2float(__ushort_as_half(d16));
            v = d * (float)(signed char)blk[2 + i % QUANT_Q8_0_BLOCK];
            break;
        }
        }
        ck_store(dst + i, v);
    }
}

cudaError_t ck_cuda_convert(const void *raw, int type, size_t n, void *dst, int out_f16,
                            cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    if (type != QUANT_F32 && type != QUANT_F16 && type != QUANT_BF16 && type != QUANT_Q8_0)
        return cudaErrorInvalidValue;
    const int threads = 256;
    size_t want = (n + threads - 1) / threads;
    unsigned grid = (unsigned)(want < 65536 ? want : 65536);
    if (out_f16)
        ck_convert_kernel<__half><<<grid, threads, 0, st>>>((const unsigned char *)raw, type, n,
                                                             (__half *)dst);
    else
        ck_convert_kernel<float><<<grid, threads, 0, st>>>((const unsigned char *)raw, type, n,
                                                            (float *)dst);
    return cudaGetLastError();
}
