/* ck_cuda_quant.cu - products with quantized weights on the GPU:
 * every GGUF weight type confkv reads (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) stays in its file bytes in device
 * memory, rows contiguous as the file has them (a row of K elements is
 * K / block blocks).
 *
 * One decoder per type, ck_deq32<T>(row, c, v): the 32 floats of the row's
 * c-th group of 32 elements (a whole block for the 32-element types; one
 * eighth of a super-block for the 256-element ones), with the float
 * operations of ggml's dequantize_row_<type> in the same order, each
 * rounded on its own (__fmul_rn / __fadd_rn / __fsub_rn stop nvcc from
 * fusing them), so a dequantized value equals engine/format/quant.c's, and so
 * libggml's, bit for bit. Three kernels use it:
 *   - ck_qgemv: decode and small batches (M <= CK_QGEMV_MAX_M tokens). One
 *     warp per weight row; lane l takes groups l, l + 32, ... of the row, so
 *     the warp reads consecutive blocks (or consecutive parts of one
 *     super-block) and each weight byte is read once from memory for all M
 *     tokens; f32 accumulators, one warp sum per token at the end.
 *   - ck_qdequant: groups into f32 or f16 rows, for batches: the backend
 *     expands a slice of rows into scratch and runs cublasGemmEx on it, and
 *     for the token embedding, which is a row lookup and is expanded once at
 *     upload.
 * Blocks are 2-byte aligned at best (18, 20, 22, ... bytes), so the
 * decoders read bytes and assemble the f16 scales themselves. */
#include "ck_cuda.h"

extern "C" {
#include "qblock.h"
}

#include <stddef.h>

#include "backend_cuda.h"

extern "C" {
#include "ck_err.h"
}

/* qblock_iq4nl_values again, for the device (a host static const is not
 * visible there); tests/gpu compares the dequantized values with quant.c's,
 * which reads the host table, so a difference would show. */
__constant__ signed char ck_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113};

/* ------------------------------------------------------------ the types */

int ck_cuda_qtype_shape(int type, int *block, int *bytes) {
    int bl = QBLOCK_32, by = 0;
    switch (type) {
    case QB_Q4_0: by = sizeof(qblock_q4_0); break;
    case QB_Q4_1: by = sizeof(qblock_q4_1); break;
    case QB_Q5_0: by = sizeof(qblock_q5_0); break;
    case QB_Q5_1: by = sizeof(qblock_q5_1); break;
    case QB_Q8_0: by = sizeof(qblock_q8_0); break;
    case QB_IQ4_NL: by = sizeof(qblock_iq4_nl); break;
    case QB_Q2_K:
        bl = QBLOCK_K;
        by = sizeof(qblock_q2_K);
        break;
    case QB_Q3_K:
        bl = QBLOCK_K;
        by = sizeof(qblock_q3_K);
        break;
    case QB_Q4_K:
        bl = QBLOCK_K;
        by = sizeof(qblock_q4_K);
        break;
    case QB_Q5_K:
        bl = QBLOCK_K;
        by = sizeof(qblock_q5_K);
        break;
    case QB_Q6_K:
        bl = QBLOCK_K;
        by = sizeof(qblock_q6_K);
        break;
    case QB_IQ4_XS:
        bl = QBLOCK_K;
        by = sizeof(qblock_iq4_xs);
        break;
    default: return 0;
    }
    if (block) *block = bl;
    if (bytes) *bytes = by;
    return 1;
}

/* ------------------------------------------------------------ decoders */

static __host__ __device__ __forceinline__ float ck_f16at(const unsigned char *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
}

/* The decoders also run on the host (be_cuda_qdequant_host: tests check
 * them against quant.c without a GPU). On the device each product and sum
 * is rounded on its own by the _rn intrinsics; the host compiler targets
 * plain x86-64 or arm64 here (no -ffast-math) and keeps the same separate
 * roundings. */
#ifdef __CUDA_ARCH__
#define CK_MUL(a, b) __fmul_rn(a, b)
#define CK_ADD(a, b) __fadd_rn(a, b)
#define CK_SUB(a, b) __fsub_rn(a, b)
#define CK_IQ4NL ck_iq4nl
#define CK_UNROLL _Pragma("unroll")
#else
static inline float ck_mul_host(float a, float b) { return a * b; }
static inline float ck_add_host(float a, float b) { return a + b; }
static inline float ck_sub_host(float a, float b) { return a - b; }
#define CK_MUL(a, b) ck_mul_host(a, b)
#define CK_ADD(a, b) ck_add_host(a, b)
#define CK_SUB(a, b) ck_sub_host(a, b)
#define CK_IQ4NL qblock_iq4nl_values
#define CK_UNROLL
#endif

template <int T> struct ck_qt;
#define CK_QT(T, S, BL) \
    template <> struct ck_qt<T> { static constexpr int block = BL, bytes = (int)sizeof(S); };
CK_QT(QB_Q4_0, qblock_q4_0, 32)
CK_QT(QB_Q4_1, qblock_q4_1, 32)
CK_QT(QB_Q5_0, qblock_q5_0, 32)
CK_QT(QB_Q5_1, qblock_q5_1, 32)
CK_QT(QB_Q8_0, qblock_q8_0, 32)
CK_QT(QB_IQ4_NL, qblock_iq4_nl, 32)
CK_QT(QB_Q2_K, qblock_q2_K, 256)
CK_QT(QB_Q3_K, qblock_q3_K, 256)
CK_QT(QB_Q4_K, qblock_q4_K, 256)
CK_QT(QB_Q5_K, qblock_q5_K, 256)
CK_QT(QB_Q6_K, qblock_q6_K, 256)
CK_QT(QB_IQ4_XS, qblock_iq4_xs, 256)
#undef CK_QT

#define OFF(S, f) ((int)offsetof(S, f))

/* v[0..31] = elements 32 c .. 32 c + 31 of the row at `row`. Element
 * layouts as engine/format/quant.c's comment lists them. */
template <int T>
static __host__ __device__ __forceinline__ void ck_deq32(const unsigned char *row, int c, float *v) {
    if constexpr (ck_qt<T>::block == 32) {
        const unsigned char *b = row + (size_t)c * ck_qt<T>::bytes;
        if constexpr (T == QB_Q8_0) {
            const float d = ck_f16at(b);
            CK_UNROLL
            for (int l = 0; l < 32; l++) v[l] = CK_MUL((float)(signed char)b[2 + l], d);
        } else {
            /* nibble pairs: element l < 16 is the low nibble of qs[l],
             * element l + 16 the high one; Q5's fifth bit is bit l of qh */
            const int qs_off = T == QB_Q4_0   ? OFF(qblock_q4_0, qs)
                               : T == QB_Q4_1 ? OFF(qblock_q4_1, qs)
                               : T == QB_Q5_0 ? OFF(qblock_q5_0, qs)
                               : T == QB_Q5_1 ? OFF(qblock_q5_1, qs)
                                              : OFF(qblock_iq4_nl, qs);
            const float d = ck_f16at(b);
            float m = 0.0f;
            if constexpr (T == QB_Q4_1 || T == QB_Q5_1) m = ck_f16at(b + 2);
            unsigned qh = 0;
            if constexpr (T == QB_Q5_0 || T == QB_Q5_1) {
                const int o = T == QB_Q5_0 ? OFF(qblock_q5_0, qh) : OFF(qblock_q5_1, qh);
                qh = b[o] | b[o + 1] << 8 | b[o + 2] << 16 | (unsigned)b[o + 3] << 24;
            }
            CK_UNROLL
            for (int l = 0; l < 16; l++) {
                const int byte = b[qs_off + l];
                int lo = byte & 0x0f, hi = byte >> 4;
                if constexpr (T == QB_IQ4_NL) {
                    v[l] = CK_MUL(d, (float)CK_IQ4NL[lo]);
                    v[l + 16] = CK_MUL(d, (float)CK_IQ4NL[hi]);
                } else {
                    if constexpr (T == QB_Q5_0 || T == QB_Q5_1) {
                        lo |= (int)((qh >> l) & 1) << 4;
                        hi |= (int)((qh >> (l + 16)) & 1) << 4;
                    }
                    if constexpr (T == QB_Q4_0) {
                        lo -= 8;
                        hi -= 8;
                    }
                    if constexpr (T == QB_Q5_0) {
                        lo -= 16;
                        hi -= 16;
                    }
                    v[l] = CK_MUL((float)lo, d);
                    v[l + 16] = CK_MUL((float)hi, d);
                    if constexpr (T == QB_Q4_1 || T == QB_Q5_1) {
                        v[l] = CK_ADD(v[l], m);
                        v[l + 16] = CK_ADD(v[l + 16], m);
                    }
                }
            }
        }
    } else {
        const unsigned char *b = row + (size_t)(c >> 3) * ck_qt<T>::bytes;
        const int g = c & 7; /* elements 32 g .. 32 g + 31 of the super-block */
        if constexpr (T == QB_Q2_K || T == QB_Q3_K) {
            /* 2 bits: qs[32 (g / 4) + l] >> 2 (g % 4); scale (32 g + l) / 16 */
            const int qs_off = T == QB_Q2_K ? OFF(qblock_q2_K, qs) : OFF(qblock_q3_K, qs);
            const unsigned char *qs = b + qs_off + 32 * (g >> 2);
            const int shift = 2 * (g & 3);
            if constexpr (T == QB_Q2_K) {
                const float d = ck_f16at(b + OFF(qblock_q2_K, d));
                const float dmin = ck_f16at(b + OFF(qblock_q2_K, dmin));
                CK_UNROLL
                for (int half = 0; half < 2; half++) {
                    const int sc = b[OFF(qblock_q2_K, scales) + 2 * g + half];
                    const float dl = CK_MUL(d, (float)(sc & 0x0f));
                    const float ml = CK_MUL(dmin, (float)(sc >> 4));
                    CK_UNROLL
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        v[l] = CK_SUB(CK_MUL(dl, (float)((qs[l] >> shift) & 3)), ml);
                }
            } else {
                const float d = ck_f16at(b + OFF(qblock_q3_K, d));
                const unsigned char *p = b + OFF(qblock_q3_K, scales);
                const unsigned char *hm = b + OFF(qblock_q3_K, hmask);
                CK_UNROLL
                for (int half = 0; half < 2; half++) {
                    /* 6-bit scale k: a nibble of byte k % 8, 2 bits of byte 8 + k % 4 */
                    const int k = 2 * g + half;
                    const int lo4 = k < 8 ? p[k] & 0x0f : p[k - 8] >> 4;
                    const int hi2 = (p[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
                    const float dl = CK_MUL(d, (float)((lo4 | hi2 << 4) - 32));
                    CK_UNROLL
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int q = (qs[l] >> shift) & 3;
                        const int h = (hm[l] >> g) & 1; /* bit e / 32 of hmask[e % 32] */
                        v[l] = CK_MUL(dl, (float)(q - (h ? 0 : 4)));
                    }
                }
            }
        } else if constexpr (T == QB_Q4_K || T == QB_Q5_K) {
            /* nibble g % 2 of qs[32 (g / 2) + l]; (scale, min) pair g */
            const int so = T == QB_Q4_K ? OFF(qblock_q4_K, scales) : OFF(qblock_q5_K, scales);
            const int qo = T == QB_Q4_K ? OFF(qblock_q4_K, qs) : OFF(qblock_q5_K, qs);
            const unsigned char *p = b + so;
            int sc, mn;
            if (g < 4) {
                sc = p[g] & 63;
                mn = p[g + 4] & 63;
            } else {
                sc = (p[g + 4] & 0x0f) | (p[g - 4] >> 6) << 4;
                mn = (p[g + 4] >> 4) | (p[g] >> 6) << 4;
            }
            const float dl = CK_MUL(ck_f16at(b), (float)sc);
            const float ml = CK_MUL(ck_f16at(b + 2), (float)mn);
            const unsigned char *qs = b + qo + 32 * (g >> 1);
            const int shift = 4 * (g & 1);
            CK_UNROLL
            for (int l = 0; l < 32; l++) {
                int q = (qs[l] >> shift) & 0x0f;
                if constexpr (T == QB_Q5_K) q |= ((b[OFF(qblock_q5_K, qh) + l] >> g) & 1) << 4;
                v[l] = CK_SUB(CK_MUL(dl, (float)q), ml);
            }
        } else if constexpr (T == QB_Q6_K) {
            /* h = g / 4, k = g % 4: 4 bits of ql[64 h + 32 (k & 1) + l]
             * (low nibble for k < 2), 2 bits (qh[32 h + l] >> 2 k) & 3 */
            const int h = g >> 2, k = g & 3;
            const unsigned char *ql = b + OFF(qblock_q6_K, ql) + 64 * h + 32 * (k & 1);
            const unsigned char *qh = b + OFF(qblock_q6_K, qh) + 32 * h;
            const float d = ck_f16at(b + OFF(qblock_q6_K, d));
            CK_UNROLL
            for (int half = 0; half < 2; half++) {
                const float dl = CK_MUL(d, (float)(signed char)b[OFF(qblock_q6_K, scales) + 2 * g + half]);
                CK_UNROLL
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    const int q = ((ql[l] >> (4 * (k >> 1))) & 0x0f) | ((qh[l] >> (2 * k)) & 3) << 4;
                    v[l] = CK_MUL(dl, (float)(q - 32));
                }
            }
        } else { /* QB_IQ4_XS: sub-block g is an IQ4_NL block with a 6-bit scale */
            const int sh = b[OFF(qblock_iq4_xs, scales_h)] | b[OFF(qblock_iq4_xs, scales_h) + 1] << 8;
            const int ls = ((b[OFF(qblock_iq4_xs, scales_l) + (g >> 1)] >> (4 * (g & 1))) & 0x0f) |
                           ((sh >> (2 * g)) & 3) << 4;
            const float dl = CK_MUL(ck_f16at(b), (float)(ls - 32));
            const unsigned char *qs = b + OFF(qblock_iq4_xs, qs) + 16 * g;
            CK_UNROLL
            for (int l = 0; l < 16; l++) {
                v[l] = CK_MUL(dl, (float)CK_IQ4NL[qs[l] & 0x0f]);
                v[l + 16] = CK_MUL(dl, (float)CK_IQ4NL[qs[l] >> 4]);
            }
        }
    }
}

/* ------------------------------------------------------------ kernels */

/* y[m][n] = sum_k x[m][k] w[n][k] (+ beta y[m][n]) for m < M <= MAXM,
 * n < N; one warp per n. x rows (ldx apart) are float or half. */
template <int T, typename XT>
static __global__ void ck_qgemv_kernel(const unsigned char *w, size_t row_bytes, int N, int K, const XT *x,
                                       int ldx, int M, float *y, int ldy, float beta) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= N) return; /* whole warps leave together: n is per warp */
    const unsigned char *row = w + (size_t)n * row_bytes;
    float acc[CK_QGEMV_MAX_M];
#pragma unroll
    for (int m = 0; m < CK_QGEMV_MAX_M; m++) acc[m] = 0.0f;
    const int groups = K / 32;
    for (int c = lane; c < groups; c += 32) {
        float v[32];
        ck_deq32<T>(row, c, v);
#pragma unroll
        for (int m = 0; m < CK_QGEMV_MAX_M; m++) {
            if (m >= M) break;
            const XT *xr = x + (size_t)m * ldx + 32 * c;
            float s = 0.0f;
#pragma unroll
            for (int l = 0; l < 32; l++) s = fmaf(v[l], ck_load(xr + l), s);
            acc[m] += s;
        }
    }
#pragma unroll
    for (int m = 0; m < CK_QGEMV_MAX_M; m++) {
        if (m >= M) break;
        const float s = ck_warp_sum(acc[m]);
        if (lane == 0) {
            float *o = y + (size_t)m * ldy + n;
            *o = beta != 0.0f ? s + beta * *o : s;
        }
    }
}

/* dst[r][k] (row-major, K a row) = the dequantized weights of rows
 * 0..rows-1 at w, one thread per group of 32. */
template <int T, typename OutT>
static __global__ void ck_qdequant_kernel(const unsigned char *w, size_t row_bytes, int K, size_t n_groups,
                                          OutT *dst) {
    const int gpr = K / 32; /* groups a row */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_groups;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / gpr;
        const int c = (int)(i % gpr);
        float v[32];
        ck_deq32<T>(w + r * row_bytes, c, v);
        OutT *o = dst + r * K + 32 * (size_t)c;
#pragma unroll
        for (int l = 0; l < 32; l++) ck_store(o + l, v[l]);
    }
}

/* ------------------------------------------------------------ launchers */

template <typename XT>
static cudaError_t ck_qgemv_launch(int type, const void *w, int N, int K, const XT *x, int ldx, int M,
                                   float *y, int ldy, float beta, cudaStream_t st) {
    int block, bytes;
    if (!ck_cuda_qtype_shape(type, &block, &bytes) || N < 0 || K <= 0 || K % block || M < 0 ||
        M > CK_QGEMV_MAX_M)
        return cudaErrorInvalidValue;
    if (N == 0 || M == 0) return cudaSuccess;
    const size_t rb = (size_t)(K / block) * bytes;
    const int warps = 4; /* rows a thread block */
    const unsigned grid = (unsigned)((N + warps - 1) / warps);
    const unsigned char *wp = (const unsigned char *)w;
    /* a switch of macro cases: clang-format cannot lay it out stably */
    // clang-format off
#define CASE(T) \
    case T: ck_qgemv_kernel<T, XT><<<grid, 32 * warps, 0, st>>>(wp, rb, N, K, x, ldx, M, y, ldy, beta); break;
    switch (type) {
        CASE(QB_Q4_0)
        CASE(QB_Q4_1)
        CASE(QB_Q5_0)
        CASE(QB_Q5_1)
        CASE(QB_Q8_0)
        CASE(QB_IQ4_NL)
        CASE(QB_Q2_K)
        CASE(QB_Q3_K)
        CASE(QB_Q4_K)
        CASE(QB_Q5_K)
        CASE(QB_Q6_K)
        CASE(QB_IQ4_XS)
        default: return cudaErrorInvalidValue;
    }
#undef CASE
    // clang-format on
    return cudaGetLastError();
}

cudaError_t ck_cuda_qgemv(int type, const void *w, int N, int K, const void *x, int x_f16, int ldx, int M,
                          float *y, int ldy, float beta, cudaStream_t st) {
    if (x_f16) return ck_qgemv_launch(type, w, N, K, (const __half *)x, ldx, M, y, ldy, beta, st);
    return ck_qgemv_launch(type, w, N, K, (const float *)x, ldx, M, y, ldy, beta, st);
}

template <typename OutT>
static cudaError_t ck_qdequant_launch(int type, const void *w, int rows, int K, OutT *dst, cudaStream_t st) {
    int block, bytes;
    if (!ck_cuda_qtype_shape(type, &block, &bytes) || rows < 0 || K <= 0 || K % block)
        return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    const size_t rb = (size_t)(K / block) * bytes, ng = (size_t)rows * (K / 32);
    const int threads = 256;
    const size_t want = (ng + threads - 1) / threads;
    const unsigned grid = (unsigned)(want < 65536 ? want : 65536);
    const unsigned char *wp = (const unsigned char *)w;
    /* a switch of macro cases: clang-format cannot lay it out stably */
    // clang-format off
#define CASE(T) \
    case T: ck_qdequant_kernel<T, OutT><<<grid, threads, 0, st>>>(wp, rb, K, ng, dst); break;
    switch (type) {
        CASE(QB_Q4_0)
        CASE(QB_Q4_1)
        CASE(QB_Q5_0)
        CASE(QB_Q5_1)
        CASE(QB_Q8_0)
        CASE(QB_IQ4_NL)
        CASE(QB_Q2_K)
        CASE(QB_Q3_K)
        CASE(QB_Q4_K)
        CASE(QB_Q5_K)
        CASE(QB_Q6_K)
        CASE(QB_IQ4_XS)
        default: return cudaErrorInvalidValue;
    }
#undef CASE
    // clang-format on
    return cudaGetLastError();
}

cudaError_t ck_cuda_qdequant(int type, const void *w, int rows, int K, void *dst, int out_f16,
                             cudaStream_t st) {
    if (out_f16) return ck_qdequant_launch(type, w, rows, K, (__half *)dst, st);
    return ck_qdequant_launch(type, w, rows, K, (float *)dst, st);
}

/* ------------------------------------------------------------ host copy */

/* The same decoders on the host: dst (rows, K) floats. For tests. */
template <int T> static void ck_qdequant_host_t(const unsigned char *w, int rows, int K, float *dst) {
    const size_t rb = (size_t)(K / ck_qt<T>::block) * ck_qt<T>::bytes;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < K / 32; c++) ck_deq32<T>(w + (size_t)r * rb, c, dst + (size_t)r * K + 32 * c);
}

extern "C" int be_cuda_qdequant_host(int type, const void *w, int rows, int K, float *dst) {
    int block;
    if (!w || !dst || rows < 0 || K <= 0) return CK_EINVAL;
    if (!ck_cuda_qtype_shape(type, &block, NULL) || K % block) return CK_EUNSUPPORTED;
    const unsigned char *wp = (const unsigned char *)w;
    /* a switch of macro cases: clang-format cannot lay it out stably */
    // clang-format off
#define CASE(T) \
    case T: ck_qdequant_host_t<T>(wp, rows, K, dst); break;
    switch (type) {
        CASE(QB_Q4_0)
        CASE(QB_Q4_1)
        CASE(QB_Q5_0)
        CASE(QB_Q5_1)
        CASE(QB_Q8_0)
        CASE(QB_IQ4_NL)
        CASE(QB_Q2_K)
        CASE(QB_Q3_K)
        CASE(QB_Q4_K)
        CASE(QB_Q5_K)
        CASE(QB_Q6_K)
        CASE(QB_IQ4_XS)
        default: return cudaErrorInvalidValue;
    }
#undef CASE
    // clang-format on
    return CK_OK;
}
