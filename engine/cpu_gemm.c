/* cpu_gemm.c - y = x . w^T for a few dozen token rows (cpu_gemm.h).
 *
 * Both operands are row-major along K, so each output is a dot product. A
 * tile computes 4 weight rows x 4 tokens: 16 independent vector accumulators
 * (enough to hide the FMA latency), fed by 8 loads per 16 FMAs; the 4 weight
 * rows (4 * K floats) stay in L1 while the tile walks every token. The 16
 * sums are reduced at the end with horizontal adds, 4 at a time, into 4
 * adjacent outputs of one token row.
 *
 * Vectors are 16 wide with AVX-512 (the Zen 5 cores this was tuned on have
 * full-width 512-bit FMAs, which OpenBLAS 0.3.21's Haswell kernels leave
 * unused), 8 wide with AVX2 and FMA, and plain C otherwise; the build's
 * -march decides. Rows should start 64-byte aligned (K a multiple of 16 with
 * an aligned base): with rows split across cache lines a test ran a
 * quarter slower. */
#include "cpu_gemm.h"

#include <stddef.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define GEMM_SIMD 1
typedef __m512 vec;
#define VW 16
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
/* to 8 lanes: the two halves added */
#define vhalf(v) _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1))
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GEMM_SIMD 1
typedef __m256 vec;
#define VW 8
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vhalf(v) (v)
#endif

#define TN GEMM_TILE_N /* weight rows per tile */
#define TM 4           /* tokens per tile */

#ifdef GEMM_SIMD
/* [sum(a), sum(b), sum(c), sum(d)] of four vectors. */
static inline __m128 hsum4(vec va, vec vb, vec vc, vec vd) {
    __m256 a = vhalf(va), b = vhalf(vb), c = vhalf(vc), d = vhalf(vd);
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd); /* low half: lanes 0-3, high half: lanes 4-7 */
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* One tile of rn <= TN weight rows (from n) by rm <= TM tokens (from m).
 * Always inlined with constant rn and rm, so the compiler unrolls the loops
 * and keeps acc[][] in registers. */
static inline __attribute__((always_inline)) void tile(float *y, int ldy, const float *x,
                                                       const float *w, int K, int rn, int rm,
                                                       int accumulate) {
    vec acc[TN][TM];
    for (int i = 0; i < TN; i++)
        for (int j = 0; j < TM; j++) acc[i][j] = vzero();
    int k = 0;
    for (; k + VW <= K; k += VW) {
        vec wv[TN], xv[TM];
        /* Each vector is loaded once into a register: left alone, GCC folds
         * one operand into every FMA as a memory operand, 20 loads instead
         * of 8 per 16 FMAs, and the loads, not the FMAs, set the pace. */
        for (int i = 0; i < rn; i++) {
            wv[i] = vload(w + (size_t)i * K + k);
            __asm__("" : "+x"(wv[i]));
        }
        for (int j = 0; j < rm; j++) {
            xv[j] = vload(x + (size_t)j * K + k);
            __asm__("" : "+x"(xv[j]));
        }
        for (int i = 0; i < rn; i++)
            for (int j = 0; j < rm; j++) acc[i][j] = vfma(wv[i], xv[j], acc[i][j]);
    }
    for (int j = 0; j < rm; j++) {
        float s[4];
        _mm_storeu_ps(s, hsum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
        for (int i = 0; i < rn; i++) {
            for (int kk = k; kk < K; kk++) s[i] += w[(size_t)i * K + kk] * x[(size_t)j * K + kk];
            float *o = y + (size_t)j * ldy + i;
            *o = accumulate ? *o + s[i] : s[i];
        }
    }
}
#else
static inline void tile(float *y, int ldy, const float *x, const float *w, int K, int rn, int rm,
                        int accumulate) {
    for (int j = 0; j < rm; j++)
        for (int i = 0; i < rn; i++) {
            const float *wr = w + (size_t)i * K, *xr = x + (size_t)j * K;
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += wr[k] * xr[k];
            float *o = y + (size_t)j * ldy + i;
            *o = accumulate ? *o + s : s;
        }
}
#endif

/* Ask for part t of `parts` of a span (64-byte lines) ahead of its use. */
static inline void prefetch_part(const char *p, size_t bytes, int t, int parts) {
    size_t per = (bytes / (size_t)parts + 63) & ~(size_t)63, o = per * (size_t)t;
    size_t e = o + per < bytes ? o + per : bytes;
    for (; o < e; o += 64) __builtin_prefetch(p + o);
}

/* Every token against rn weight rows, in tiles of TM tokens; the last
 * M % TM tokens get a narrower tile of their own. Meanwhile the rows of a
 * tile further on (pf, pf_bytes; NULL for none) are asked for, a slice per
 * token tile: a big matrix (the classifier) streams from DRAM, and without
 * this its loads waited (one core on the classifier's shape: about 85
 * GFLOP/s without, 100 with). Asked all at once, the requests fill the miss
 * buffers and stall as long as the misses would have. */
static inline __attribute__((always_inline)) void row_tile(float *y, int ldy, const float *x,
                                                           const float *w, int M, int K, int rn,
                                                           int accumulate, const char *pf,
                                                           size_t pf_bytes) {
    int m = 0, parts = M / TM > 0 ? M / TM : 1;
    if (pf && M < TM) prefetch_part(pf, pf_bytes, 0, 1);
    for (; m + TM <= M; m += TM) {
        if (pf) prefetch_part(pf, pf_bytes, m / TM, parts);
        tile(y + (size_t)m * ldy, ldy, x + (size_t)m * K, w, K, rn, TM, accumulate);
    }
    float *ym = y + (size_t)m * ldy;
    const float *xm = x + (size_t)m * K;
    switch (M - m) {
    case 3: tile(ym, ldy, xm, w, K, rn, 3, accumulate); break;
    case 2: tile(ym, ldy, xm, w, K, rn, 2, accumulate); break;
    case 1: tile(ym, ldy, xm, w, K, rn, 1, accumulate); break;
    default: break;
    }
}

#define PFD 2 /* how many tiles ahead rows are asked for */

void gemm_rows(float *y, int ldy, const float *x, const float *w, int M, int K, int n0, int n1,
               int accumulate) {
    const size_t tile_bytes = (size_t)TN * K * sizeof(float);
    int n = n0;
    for (; n + TN <= n1; n += TN) {
        const char *pf = n + (PFD + 1) * TN <= n1 ? (const char *)(w + (size_t)(n + PFD * TN) * K) : NULL;
        row_tile(y + n, ldy, x, w + (size_t)n * K, M, K, TN, accumulate, pf, tile_bytes);
    }
    const float *wn = w + (size_t)n * K;
    switch (n1 - n) {
    case 3: row_tile(y + n, ldy, x, wn, M, K, 3, accumulate, NULL, 0); break;
    case 2: row_tile(y + n, ldy, x, wn, M, K, 2, accumulate, NULL, 0); break;
    case 1: row_tile(y + n, ldy, x, wn, M, K, 1, accumulate, NULL, 0); break;
    default: break;
    }
}
