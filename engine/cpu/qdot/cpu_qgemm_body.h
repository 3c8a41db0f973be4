/* cpu_qgemm_body.h - the 16-row x CPU_QGEMM_NC-column tiles of cpu_qgemm.h
 * at 512 bits, included by cpu_qgemm_avx512.c (AVX-512 F/BW/VL/DQ) and
 * cpu_qgemm_vnni.c (the same plus VNNI), which define QG_ISA to their
 * suffix.
 *
 * A 512-bit weight vector is one 4-element step of 16 rows: lanes 0-7 the
 * 32 bytes of group w0 at that step, lanes 8-15 those of w1 (qblock.h's
 * x8 layouts keep a step's 8 rows in 32 contiguous bytes). The step's 4
 * activation bytes of a column are one dword, broadcast to the 16 lanes by
 * the multiply's own load. Per block and column: one int32 accumulator
 * started at the weights' offset (-8 or -128 times the block's sum of
 * activations, from the q8_0s row), the block's dpbusd steps, then the x8
 * kernels' float step, acc + (dx dy) float(sum), in their order. */
#include "cpu_qgemm.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__F16C__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define QG_CAT2(a, b) a##b
#define QG_CAT(a, b) QG_CAT2(a, b)
#define QG_NAME(type) QG_CAT(QG_CAT(cpu_qgemm16_, type), QG_CAT(_, QG_ISA))

/* The 4 activation bytes at p in every 32-bit lane. */
static inline __m512i qg_bcast(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc + unsigned bytes u times signed bytes s, 4 at a time, into int32.
 * Without VNNI through maddubs's int16 pair sums: only Q4_0 takes this
 * route, u at most 15, so a pair is at most 2 x 15 x 128. */
static inline __m512i qg_dpbusd(__m512i acc, __m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

/* 32 bytes of each group at byte offset o of their blocks, side by side. */
static inline __m512i qg_pair(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* The 16 rows' block scales. */
static inline __m512 qg_dx(const uint16_t *d0, const uint16_t *d1) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)d0)), _mm_loadu_si128((const __m128i *)d1), 1));
}

/* ---------------------------------------------------------------- Q4_0 */

/* qblock_q4_0x8: step h (0..3) of a group is qs[32 h .. 32 h + 31], whose
 * low nibbles meet activation bytes 4h.. and high ones 16 + 4h... */
static inline __attribute__((always_inline)) void qg_q4_0(int n, const int ncols, float *s, const void *w0,
                                                          const void *w1, const void *a, size_t a_stride) {
    const qblock_q4_0x8 *x0 = w0, *x1 = w1;
    const int nb = n / QBLOCK_32;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const qblock_q8_0 *y[CPU_QGEMM_NC];
    const int16_t *ys[CPU_QGEMM_NC];
    __m512 acc[CPU_QGEMM_NC];
    for (int c = 0; c < ncols; c++) {
        acc[c] = _mm512_setzero_ps();
        y[c] = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride);
        ys[c] = (const int16_t *)(y[c] + nb);
    }
    for (int i = 0; i < nb; i++) {
        __m512i p[CPU_QGEMM_NC];
        for (int c = 0; c < ncols; c++) p[c] = _mm512_set1_epi32(-8 * ys[c][i]);
        for (int h = 0; h < 4; h++) {
            const __m512i b = qg_pair(x0[i].qs + 32 * h, x1[i].qs + 32 * h);
            const __m512i lo = _mm512_and_si512(b, m4), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
            for (int c = 0; c < ncols; c++) {
                p[c] = qg_dpbusd(p[c], lo, qg_bcast(y[c][i].qs + 4 * h));
                p[c] = qg_dpbusd(p[c], hi, qg_bcast(y[c][i].qs + 16 + 4 * h));
            }
        }
        const __m512 dx = qg_dx(x0[i].d, x1[i].d);
        for (int c = 0; c < ncols; c++)
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(_cvtsh_ss(y[c][i].d))),
                                     _mm512_cvtepi32_ps(p[c]), acc[c]);
    }
    for (int c = 0; c < ncols; c++) _mm512_storeu_ps(s + 16 * c, acc[c]);
}

/* cpu_qgemm16_<type>_<isa>: the tile with ncols a constant, so that its
 * accumulators stay in registers. */
#define QG_ENTRY(type)                                                                            \
    void QG_NAME(type)(int n, int ncols, float *s, const void *w0, const void *w1, const void *a, \
                       size_t a_stride) {                                                         \
        switch (ncols) {                                                                          \
        case 1: qg_##type(n, 1, s, w0, w1, a, a_stride); break;                                   \
        case 2: qg_##type(n, 2, s, w0, w1, a, a_stride); break;                                   \
        case 3: qg_##type(n, 3, s, w0, w1, a, a_stride); break;                                   \
        case 4: qg_##type(n, 4, s, w0, w1, a, a_stride); break;                                   \
        case 5: qg_##type(n, 5, s, w0, w1, a, a_stride); break;                                   \
        case 6: qg_##type(n, 6, s, w0, w1, a, a_stride); break;                                   \
        case 7: qg_##type(n, 7, s, w0, w1, a, a_stride); break;                                   \
        default: qg_##type(n, 8, s, w0, w1, a, a_stride); break;                                  \
        }                                                                                         \
    }
_Static_assert(CPU_QGEMM_NC == 8, "QG_ENTRY's cases");

QG_ENTRY(q4_0)

/* ---------------------------------------------------------------- Q8_0 */

#if defined(__AVX512VNNI__)
/* qblock_q8_0x8: step g (0..7) of a group is qs[32 g .. 32 g + 31]. Its
 * signed bytes made unsigned (xor 0x80: q + 128, one op a vector for all
 * the columns), so the product is sum (q + 128) y, and 128 sum(y) comes off
 * from the q8_0s row's block sums. At most 32 x 255 x 128 in int32. */
static inline __attribute__((always_inline)) void qg_q8_0(int n, const int ncols, float *s, const void *w0,
                                                          const void *w1, const void *a, size_t a_stride) {
    const qblock_q8_0x8 *x0 = w0, *x1 = w1;
    const int nb = n / QBLOCK_32;
    const __m512i sign = _mm512_set1_epi8((char)0x80);
    const qblock_q8_0 *y[CPU_QGEMM_NC];
    const int16_t *ys[CPU_QGEMM_NC];
    __m512 acc[CPU_QGEMM_NC];
    for (int c = 0; c < ncols; c++) {
        acc[c] = _mm512_setzero_ps();
        y[c] = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride);
        ys[c] = (const int16_t *)(y[c] + nb);
    }
    for (int i = 0; i < nb; i++) {
        __m512i p[CPU_QGEMM_NC];
        for (int c = 0; c < ncols; c++) p[c] = _mm512_set1_epi32(-128 * ys[c][i]);
        for (int g = 0; g < 8; g++) {
            const __m512i b = _mm512_xor_si512(
                qg_pair((const uint8_t *)x0[i].qs + 32 * g, (const uint8_t *)x1[i].qs + 32 * g), sign);
            for (int c = 0; c < ncols; c++) p[c] = _mm512_dpbusd_epi32(p[c], b, qg_bcast(y[c][i].qs + 4 * g));
        }
        const __m512 dx = qg_dx(x0[i].d, x1[i].d);
        for (int c = 0; c < ncols; c++)
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(_cvtsh_ss(y[c][i].d))),
                                     _mm512_cvtepi32_ps(p[c]), acc[c]);
    }
    for (int c = 0; c < ncols; c++) _mm512_storeu_ps(s + 16 * c, acc[c]);
}

QG_ENTRY(q8_0)
#endif

#endif
