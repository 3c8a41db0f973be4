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

/* acc + the int16 pair products of u and s, into int32. */
static inline __m512i qg_dpwssd(__m512i acc, __m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(u, s));
#endif
}

/* 32 bytes of each group at byte offset o of their blocks, side by side. */
static inline __m512i qg_pair(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* The 16 rows' block scales. */
static inline __m512 qg_dx(const uint16_t *d0, const uint16_t *d1) {
    return _mm512_cvtph_ps(
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)d0)),
                                _mm_loadu_si128((const __m128i *)d1), 1));
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

/* ---------------------------------------------------------------- Q4_K */

/* qblock_q4_Kx8: step h (0..7) of part j (0..3) is qs[256 j + 32 h ..],
 * whose low nibbles are sub-block 2j's elements 4h.. (activation bytes
 * 64 j + 4 h) and high ones sub-block 2j + 1's (64 j + 32 + 4 h). A
 * sub-block's sum (at most 32 x 15 x 128: past int16, so not the x8
 * kernels' int16 pairs) times the rows' 6-bit scale in int32, one
 * sub-block at a time so that a column holds 3 registers (the second
 * pass reloads the part's bytes from L1); the mins meet the activations'
 * 32-sums once a super-block. Then x8_q4_K_tail's float steps. */
static inline __attribute__((always_inline)) void qg_q4_K(int n, const int ncols, float *s, const void *w0,
                                                          const void *w1, const void *a, size_t a_stride) {
    const qblock_q4_Kx8 *x0 = w0, *x1 = w1;
    const int nb = n / QBLOCK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const qblock_q8_K *y[CPU_QGEMM_NC];
    __m512 acc[CPU_QGEMM_NC];
    for (int c = 0; c < ncols; c++) {
        acc[c] = _mm512_setzero_ps();
        y[c] = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        __m512i sumi[CPU_QGEMM_NC];
        for (int c = 0; c < ncols; c++) sumi[c] = _mm512_setzero_si512();
        for (int sb = 0; sb < 8; sb++) { /* sub-block sb: part sb / 2, its low (even) or high nibbles */
            const int j = sb / 2, high = sb % 2;
            const __m512i sc =
                _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)x0[i].sc[sb]),
                                                        _mm_loadl_epi64((const __m128i *)x1[i].sc[sb])));
            __m512i p[CPU_QGEMM_NC];
            for (int c = 0; c < ncols; c++) p[c] = _mm512_setzero_si512();
            for (int h = 0; h < 8; h++) {
                const __m512i b = qg_pair(x0[i].qs + 256 * j + 32 * h, x1[i].qs + 256 * j + 32 * h);
                const __m512i q =
                    high ? _mm512_and_si512(_mm512_srli_epi16(b, 4), m4) : _mm512_and_si512(b, m4);
                for (int c = 0; c < ncols; c++)
                    p[c] = qg_dpbusd(p[c], q, qg_bcast(y[c][i].qs + 64 * j + 32 * high + 4 * h));
            }
            for (int c = 0; c < ncols; c++) sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(p[c], sc));
        }
        /* each row's mins of sub-blocks 2p, 2p + 1 as an int16 pair */
        __m512i mv[4];
        for (int p = 0; p < 4; p++)
            mv[p] = _mm512_cvtepu8_epi16(
                _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)x0[i].m[p])),
                                        _mm_loadu_si128((const __m128i *)x1[i].m[p]), 1));
        const __m512 dx = qg_dx(x0[i].d, x1[i].d), dm = qg_dx(x0[i].dmin, x1[i].dmin);
        for (int c = 0; c < ncols; c++) {
            /* the activations' 32-sums as int16 pairs: dwords 0, 1, 4, 5 */
            const __m256i bs = _mm256_loadu_si256((const __m256i *)y[c][i].bsums);
            const __m512i hs = _mm512_castsi256_si512(_mm256_hadd_epi16(bs, bs));
            __m512i summ = _mm512_setzero_si512();
            static const int pidx[4] = {0, 1, 4, 5};
            for (int p = 0; p < 4; p++)
                summ = _mm512_add_epi32(
                    summ, _mm512_madd_epi16(mv[p], _mm512_permutexvar_epi32(_mm512_set1_epi32(pidx[p]), hs)));
            const __m512 yd = _mm512_set1_ps(y[c][i].d);
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, yd), _mm512_cvtepi32_ps(sumi[c]), acc[c]);
            acc[c] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, yd), _mm512_cvtepi32_ps(summ), acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) _mm512_storeu_ps(s + 16 * c, acc[c]);
}

QG_ENTRY(q4_K)

/* ---------------------------------------------------------------- Q6_K */

/* qblock_q6_Kx8: sub-block t (16 elements) of a group is qs[96 t ..], three
 * 32-byte steps whose low 6 bits are elements 4w.. (w 0..2) and whose top
 * bit pairs make the fourth step (elements 12..15). Each pair of steps
 * summed in int16 (2 x 2 x 63 x 127 fits), then one madd with the rows'
 * int16 scale doubled in its lane. The quants' -32 comes off as
 * sum (-32 sc) bsums, -32 sc an int16 (at most 4096 in magnitude), in the
 * same int32 sum: the x8 kernels' sumi - 32 off, the same integer. */
static inline __attribute__((always_inline)) void qg_q6_K(int n, const int ncols, float *s, const void *w0,
                                                          const void *w1, const void *a, size_t a_stride) {
    const qblock_q6_Kx8 *x0 = w0, *x1 = w1;
    const int nb = n / QBLOCK_K;
    const __m512i m6 = _mm512_set1_epi8(63), top = _mm512_set1_epi8((char)0xc0);
    /* per 128-bit lane (4 rows): each row's scale of sub-block 2p (dupa) or 2p + 1 (dupb) in both halves */
    const __m512i dupa =
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13));
    const __m512i dupb =
        _mm512_broadcast_i32x4(_mm_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15));
    const qblock_q8_K *y[CPU_QGEMM_NC];
    __m512 acc[CPU_QGEMM_NC];
    for (int c = 0; c < ncols; c++) {
        acc[c] = _mm512_setzero_ps();
        y[c] = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        __m512i sumi[CPU_QGEMM_NC];
        for (int c = 0; c < ncols; c++) sumi[c] = _mm512_setzero_si512();
        for (int p = 0; p < 8; p++) {
            /* each row's int16 scales of sub-blocks 2p, 2p + 1: rows 0-7 of w0, then of w1 */
            const __m512i sp = _mm512_cvtepi8_epi16(
                _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)x0[i].sc[p])),
                                        _mm_loadu_si128((const __m128i *)x1[i].sc[p]), 1));
            const __m512i off = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(sp, 5));
            for (int c = 0; c < ncols; c++) {
                int32_t b2;
                memcpy(&b2, y[c][i].bsums + 2 * p, 4);
                sumi[c] = qg_dpwssd(sumi[c], off, _mm512_set1_epi32(b2));
            }
            for (int k = 0; k < 2; k++) {
                const int t = 2 * p + k;
                const __m512i sct = _mm512_shuffle_epi8(sp, k ? dupb : dupa);
                __m512i v[3];
                for (int w = 0; w < 3; w++)
                    v[w] = qg_pair(x0[i].qs + 96 * t + 32 * w, x1[i].qs + 96 * t + 32 * w);
                const __m512i q0 = _mm512_and_si512(v[0], m6), q1 = _mm512_and_si512(v[1], m6),
                              q2 = _mm512_and_si512(v[2], m6);
                const __m512i q3 =
                    _mm512_or_si512(_mm512_or_si512(_mm512_srli_epi16(_mm512_and_si512(v[0], top), 6),
                                                    _mm512_srli_epi16(_mm512_and_si512(v[1], top), 4)),
                                    _mm512_srli_epi16(_mm512_and_si512(v[2], top), 2));
                for (int c = 0; c < ncols; c++) {
                    const int8_t *yq = y[c][i].qs + 16 * t;
                    const __m512i p0 = _mm512_add_epi16(_mm512_maddubs_epi16(q0, qg_bcast(yq)),
                                                        _mm512_maddubs_epi16(q1, qg_bcast(yq + 4)));
                    const __m512i p1 = _mm512_add_epi16(_mm512_maddubs_epi16(q2, qg_bcast(yq + 8)),
                                                        _mm512_maddubs_epi16(q3, qg_bcast(yq + 12)));
                    sumi[c] = qg_dpwssd(qg_dpwssd(sumi[c], p0, sct), p1, sct);
                }
            }
        }
        const __m512 dx = qg_dx(x0[i].d, x1[i].d);
        for (int c = 0; c < ncols; c++)
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(y[c][i].d)),
                                     _mm512_cvtepi32_ps(sumi[c]), acc[c]);
    }
    for (int c = 0; c < ncols; c++) _mm512_storeu_ps(s + 16 * c, acc[c]);
}

QG_ENTRY(q6_K)

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
