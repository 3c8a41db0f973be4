/* cpu_qdot_x8_body.h - the 8-row (x8) products at 512 bits: cpu_vdot8_*
 * for Q4_0, Q8_0, Q4_K, Q6_K and MXFP4 (cpu_qdot.h's contract, qblock.h's x8
 * layouts), included by cpu_qdot_x8_avx512.c (AVX-512 F/BW/VL/DQ) and by
 * cpu_qdot_x8_vnni.c (the same plus VNNI), which define X8_ISA to their
 * suffix. With __AVX512VNNI__ the byte products go straight to int32 sums
 * (vpdpbusd: no int16 stage, no widening madd); without it they take
 * AVX2's route (maddubs into int16, madd into int32), twice as wide.
 *
 * Why 512 bits: on a Zen 5 (2 vCPUs, 2026-12-02) the AVX2 x8 kernels run at
 * 30-46 GB/s over a 4 MiB matrix that sits in the caches, where a plain
 * read runs at 86 GB/s, and at 0.74-0.86 of the read loop over a 160 MiB
 * one: batch-1 decode with them is bound by their arithmetic, not by memory.
 *
 * How: an x8 block keeps a row a 32-bit lane, 8 lanes a 256-bit vector of
 * 4 activation elements each. A 512-bit load takes two such vectors (two
 * groups of 4 elements, or two Q6_K sub-blocks), and the activation vector
 * that meets it carries the first group's 4 bytes in lanes 0-7 and the
 * second's in lanes 8-15 (one permute of the row's bytes, vpermd). The two
 * halves hold partial sums of the same 8 rows; they are added where a
 * block's integer sum becomes float. Every integer sum is exact, as in the
 * AVX2 kernels (the same bounds), and the float work after it is theirs,
 * in their order: the results equal the AVX2 kernels' bit for bit, so a
 * model's logits do not depend on which of them ran (test_cpu_qdot). */
#include "cpu_qdot.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__F16C__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu_prefetch.h"
#include "cpu_qdot_x8_tail.h"

#define X8_CAT2(a, b) a##b
#define X8_CAT(a, b) X8_CAT2(a, b)
#define X8_NAME(type) X8_CAT(X8_CAT(cpu_vdot8_, type), X8_CAT(_, X8_ISA))

static inline float x8_f16(uint16_t h) { return _cvtsh_ss(h); }

/* The activation dwords i (lanes 0-7) and j (lanes 8-15) of v. */
#define X8_PAIR(v, i, j) \
    _mm512_permutexvar_epi32(_mm512_set_epi32(j, j, j, j, j, j, j, j, i, i, i, i, i, i, i, i), v)

/* The 8 rows' int32 sums: the two halves of a 512-bit sum added. */
static inline __m256i x8_fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* acc + unsigned bytes u times signed bytes s, 4 at a time, into int32.
 * Without VNNI through maddubs's int16 pair sums, which cannot saturate
 * here: u is at most 63 (nibbles, 6-bit quants) or 128 (|q8_0|), s at most
 * 127 in magnitude, and 2 x 128 x 127 < 32767. */
static inline __m512i x8_dpbusd(__m512i acc, __m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

/* ---------------------------------------------------------------- Q4_0 */

/* qblock_q4_0x8: qs[32 h + 4 r + b] holds row r's nibbles of elements
 * 4h + b (low) and 16 + 4h + b (high), h 0..3: two 512-bit loads a block.
 * The activations' dwords 0-3 meet the low nibbles, 4-7 the high ones. The
 * nibbles' -8 comes off as 8 sum(y) from the q8_0s row's block sums, split
 * 4 + 4 over the two halves, whose fold takes it off once. */
static inline __attribute__((always_inline)) void x8_q4_0(int n, const int ncols, float *s, const void *w,
                                                          const void *a, size_t a_stride) {
    const qblock_q4_0x8 *x = w;
    const int nb = n / QBLOCK_32;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const qblock_q8_0 *y[CPU_QDOT_NCOLS];
    const int16_t *ys[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_0 *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
        ys[c] = (const int16_t *)(y[c] + nb);
    }
    for (int i = 0; i < nb; i++) {
        for (int l = 0; l < 3; l++) x8_prefetch((const char *)&x[i] + 64 * l); /* the block's 144 bytes */
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].d));
        const __m512i b0 = _mm512_loadu_si512(x[i].qs), b1 = _mm512_loadu_si512(x[i].qs + 64);
        const __m512i l0 = _mm512_and_si512(b0, m4), h0 = _mm512_and_si512(_mm512_srli_epi16(b0, 4), m4);
        const __m512i l1 = _mm512_and_si512(b1, m4), h1 = _mm512_and_si512(_mm512_srli_epi16(b1, 4), m4);
        for (int c = 0; c < ncols; c++) {
            const __m512i yv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[c][i].qs));
            __m512i p = _mm512_set1_epi32(-4 * ys[c][i]);
            p = x8_dpbusd(p, l0, X8_PAIR(yv, 0, 1));
            p = x8_dpbusd(p, h0, X8_PAIR(yv, 4, 5));
            p = x8_dpbusd(p, l1, X8_PAIR(yv, 2, 3));
            p = x8_dpbusd(p, h1, X8_PAIR(yv, 6, 7));
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(x8_f16(y[c][i].d))),
                                     _mm256_cvtepi32_ps(x8_fold(p)), acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

/* --------------------------------------------------------------- MXFP4 */

/* qblock_mxfp4x8: Q4_0's nibble layout, each nibble looked up as its
 * level + 12 (x8_mxfp4_u: one byte shuffle a vector for the 8 rows), so the
 * products are Q4_0's, and 12 sum(y) comes off after (-6 sum(y) in each
 * half, as Q4_0's -4). Without VNNI maddubs's pair sums reach 2 x 24 x 127:
 * no saturation. */
static inline __attribute__((always_inline)) void x8_mxfp4(int n, const int ncols, float *s, const void *w,
                                                           const void *a, size_t a_stride) {
    const qblock_mxfp4x8 *x = w;
    const int nb = n / QBLOCK_32;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x8_mxfp4_u));
    const qblock_q8_0 *y[CPU_QDOT_NCOLS];
    const int16_t *ys[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_0 *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
        ys[c] = (const int16_t *)(y[c] + nb);
    }
    for (int i = 0; i < nb; i++) {
        for (int l = 0; l < 3; l++) x8_prefetch((const char *)&x[i] + 64 * l); /* the block's 136 bytes */
        const __m256 dx = x8_e8m0_half(x[i].e);
        const __m512i b0 = _mm512_loadu_si512(x[i].qs), b1 = _mm512_loadu_si512(x[i].qs + 64);
        const __m512i l0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(b0, m4));
        const __m512i h0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(b0, 4), m4));
        const __m512i l1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(b1, m4));
        const __m512i h1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(b1, 4), m4));
        for (int c = 0; c < ncols; c++) {
            const __m512i yv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[c][i].qs));
            __m512i p = _mm512_setzero_si512();
            p = x8_dpbusd(p, l0, X8_PAIR(yv, 0, 1));
            p = x8_dpbusd(p, h0, X8_PAIR(yv, 4, 5));
            p = x8_dpbusd(p, l1, X8_PAIR(yv, 2, 3));
            p = x8_dpbusd(p, h1, X8_PAIR(yv, 6, 7));
            acc[c] = x8_mxfp4_tail(acc[c], dx, x8_f16(y[c][i].d), x8_fold(p), ys[c][i]);
        }
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

/* ---------------------------------------------------------------- Q8_0 */

/* qblock_q8_0x8: qs[32 g + 4 r + b] is row r's element 4g + b, g 0..7:
 * four 512-bit loads a block. Signed weights: |q| meets the activations
 * with q's sign (negated under the mask of q's sign bits), as AVX2's
 * sign trick. */
static inline __attribute__((always_inline)) void x8_q8_0(int n, const int ncols, float *s, const void *w,
                                                          const void *a, size_t a_stride) {
    const qblock_q8_0x8 *x = w;
    const int nb = n / QBLOCK_32;
    const qblock_q8_0 *y[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_0 *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        for (int l = 0; l < 5; l++) x8_prefetch((const char *)&x[i] + 64 * l); /* the block's 272 bytes */
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].d));
        __m512i u[4];
        __mmask64 neg[4];
        for (int g = 0; g < 4; g++) {
            const __m512i q = _mm512_loadu_si512(x[i].qs + 64 * g);
            u[g] = _mm512_abs_epi8(q);
            neg[g] = _mm512_movepi8_mask(q);
        }
        for (int c = 0; c < ncols; c++) {
            const __m512i yv = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[c][i].qs));
            __m512i p = _mm512_setzero_si512();
            for (int g = 0; g < 4; g++) {
                const __m512i yp = X8_PAIR(yv, 2 * g, 2 * g + 1);
                p = x8_dpbusd(p, u[g], _mm512_mask_sub_epi8(yp, neg[g], _mm512_setzero_si512(), yp));
            }
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(x8_f16(y[c][i].d))),
                                     _mm256_cvtepi32_ps(x8_fold(p)), acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

/* ---------------------------------------------------------------- Q4_K */

/* A load of Q4_K nibbles' high halves, as x8_q4_K's products take them.
 * With VNNI they stay in place: (b & 0xf0) . y is 16 (b >> 4) . y exactly
 * (at most 16 x 240 x 128 in vpdpbusd's int32), and x8_q4_K shifts the sum
 * back down once, one op a load fewer. Without, maddubs's int16 pair sums
 * would saturate (2 x 240 x 127), so they are shifted down here. */
static inline __m512i x8_q4_K_hi(__m512i b, __m512i m4) {
#if defined(__AVX512VNNI__)
    return _mm512_andnot_si512(m4, b);
#else
    return _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
#endif
}

/* qblock_q4_Kx8: for part j (sub-blocks 2j, low nibbles, and 2j + 1, high)
 * qs[32 (8j + h) + 4 r + b], h 0..7: four 512-bit loads a part, their
 * activations at y.qs + 64 j (low) and + 64 j + 32 (high). A sub-block's
 * exact int32 sum (at most 8 x 4 x 15 x 127) times the rows' scale (each
 * scale in both halves); the mins meet the activations' 32-sums once a
 * super-block, in 256 bits as the AVX2 kernel. */
static inline __attribute__((always_inline)) void x8_q4_K(int n, const int ncols, float *s, const void *w,
                                                          const void *a, size_t a_stride) {
    const qblock_q4_Kx8 *x = w;
    const int nb = n / QBLOCK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const qblock_q8_K *y[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_K *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        __m512i sumi[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) sumi[c] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const uint8_t *qj = x[i].qs + 256 * j;
            for (int l = 0; l < 4; l++) x8_prefetch(qj + 64 * l); /* this part's 256 bytes */
#if defined(__AVX512VNNI__)
            /* The vector ALUs set the pace here (Zen 5: every op below is
             * one of theirs), so fewer of them: the high nibbles stay in
             * place (x8_q4_K_hi), and the two sub-blocks' sums, each within
             * int16 (16 x 15 x 128), meet their scales in one vpdpwssd as
             * int16 pairs (low: sub-block 2j, high: 2j + 1). The same
             * integers as the mullo form, so the same bits. Measured on a
             * 400 KB matrix in L2, one thread of a Zen 5, 6 pairs alternated
             * with the mullo form: 85-87 GB/s against its 81-82 at 768
             * columns, 95-97 against 88-91 at 2048. */
            const __m128i sv =
                _mm_loadu_si128((const __m128i *)x[i].sc[2 * j]); /* 2j's 8 rows, then 2j + 1's */
            const __m512i sc2 =
                _mm512_broadcast_i64x4(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sv, _mm_srli_si128(sv, 8))));
#else
            __m128i sv = _mm_loadl_epi64((const __m128i *)x[i].sc[2 * j]);
            const __m512i scl = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(sv, sv));
            sv = _mm_loadl_epi64((const __m128i *)x[i].sc[2 * j + 1]);
            const __m512i sch = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(sv, sv));
#endif
            __m512i lo[4], hi[4];
            for (int h = 0; h < 4; h++) {
                const __m512i b = _mm512_loadu_si512(qj + 64 * h);
                lo[h] = _mm512_and_si512(b, m4);
                hi[h] = x8_q4_K_hi(b, m4);
            }
            for (int c = 0; c < ncols; c++) {
                const __m512i yv = _mm512_loadu_si512(y[c][i].qs + 64 * j);
                __m512i pl = _mm512_setzero_si512(), ph = _mm512_setzero_si512();
                for (int h = 0; h < 4; h++) {
                    pl = x8_dpbusd(pl, lo[h], X8_PAIR(yv, 2 * h, 2 * h + 1));
                    ph = x8_dpbusd(ph, hi[h], X8_PAIR(yv, 8 + 2 * h, 9 + 2 * h));
                }
#if defined(__AVX512VNNI__)
                /* pl's low 16 bits, (ph / 16)'s in the high 16 */
                const __m512i pair = _mm512_mask_blend_epi16(0xAAAAAAAAu, pl, _mm512_slli_epi32(ph, 12));
                sumi[c] = _mm512_dpwssd_epi32(sumi[c], pair, sc2);
#else
                sumi[c] = _mm512_add_epi32(
                    sumi[c], _mm512_add_epi32(_mm512_mullo_epi32(pl, scl), _mm512_mullo_epi32(ph, sch)));
#endif
            }
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].d));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].dmin));
        for (int c = 0; c < ncols; c++)
            acc[c] = x8_q4_K_tail(acc[c], &x[i], dx, dm, &y[c][i], x8_fold(sumi[c]));
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

/* ---------------------------------------------------------------- Q6_K */

/* qblock_q6_Kx8: sub-block t's quants at qs + 96 t, three 256-bit vectors
 * (the low 6 bits of each byte, and a fourth vector from their top bit
 * pairs). A 512-bit vector takes sub-blocks 2p and 2p + 1 (two loads
 * joined), so its lanes 0-7 meet activation dwords 4t.. and 8-15 those of
 * t + 1. Each pair of products summed in int16 (2 x 2 x 63 x 127 fits),
 * then one madd with the rows' int16 scale (sub-block 2p's in the low half,
 * 2p + 1's in the high one). The quants' -32 comes off once a super-block
 * as 32 sum sc bsums, as the AVX2 kernel. */
static inline __attribute__((always_inline)) void x8_q6_K(int n, const int ncols, float *s, const void *w,
                                                          const void *a, size_t a_stride) {
    const qblock_q6_Kx8 *x = w;
    const int nb = n / QBLOCK_K;
    const __m512i m6 = _mm512_set1_epi8(63), top = _mm512_set1_epi8((char)0xc0);
    /* each row's dword of two int16 scales (sub-blocks 2p, 2p + 1): the first doubled in the low half,
     * the second doubled in the high half */
    const __m512i dup =
        _mm512_set_epi8(15, 14, 15, 14, 11, 10, 11, 10, 7, 6, 7, 6, 3, 2, 3, 2, 15, 14, 15, 14, 11, 10, 11,
                        10, 7, 6, 7, 6, 3, 2, 3, 2, 13, 12, 13, 12, 9, 8, 9, 8, 5, 4, 5, 4, 1, 0, 1, 0, 13,
                        12, 13, 12, 9, 8, 9, 8, 5, 4, 5, 4, 1, 0, 1, 0);
    const qblock_q8_K *y[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_K *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        __m512i sumi[CPU_QDOT_NCOLS];
        __m256i off[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
            sumi[c] = _mm512_setzero_si512();
            off[c] = _mm256_setzero_si256();
        }
        for (int p = 0; p < 8; p++) {
            const __m256i sp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].sc[p]));
            const __m512i sct = _mm512_shuffle_epi8(_mm512_broadcast_i64x4(sp), dup);
            const uint8_t *qp = x[i].qs + 192 * p;
            for (int l = 0; l < 3; l++) x8_prefetch(qp + 64 * l); /* the pair's 192 bytes */
            __m512i bv[3];
            for (int v = 0; v < 3; v++)
                bv[v] = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(qp + 32 * v))),
                    _mm256_loadu_si256((const __m256i *)(qp + 96 + 32 * v)), 1);
            const __m512i q0 = _mm512_and_si512(bv[0], m6), q1 = _mm512_and_si512(bv[1], m6),
                          q2 = _mm512_and_si512(bv[2], m6);
            const __m512i q3 =
                _mm512_or_si512(_mm512_or_si512(_mm512_srli_epi16(_mm512_and_si512(bv[0], top), 6),
                                                _mm512_srli_epi16(_mm512_and_si512(bv[1], top), 4)),
                                _mm512_srli_epi16(_mm512_and_si512(bv[2], top), 2));
            for (int c = 0; c < ncols; c++) {
                int32_t b2;
                memcpy(&b2, y[c][i].bsums + 2 * p, 4);
                off[c] = _mm256_add_epi32(off[c], _mm256_madd_epi16(sp, _mm256_set1_epi32(b2)));
                const __m512i yv =
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y[c][i].qs + 32 * p)));
                const __m512i p0 = _mm512_add_epi16(_mm512_maddubs_epi16(q0, X8_PAIR(yv, 0, 4)),
                                                    _mm512_maddubs_epi16(q1, X8_PAIR(yv, 1, 5)));
                const __m512i p1 = _mm512_add_epi16(_mm512_maddubs_epi16(q2, X8_PAIR(yv, 2, 6)),
                                                    _mm512_maddubs_epi16(q3, X8_PAIR(yv, 3, 7)));
#if defined(__AVX512VNNI__)
                sumi[c] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sumi[c], p0, sct), p1, sct);
#else
                sumi[c] = _mm512_add_epi32(
                    sumi[c], _mm512_add_epi32(_mm512_madd_epi16(p0, sct), _mm512_madd_epi16(p1, sct)));
#endif
            }
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].d));
        for (int c = 0; c < ncols; c++)
            acc[c] = x8_q6_K_tail(acc[c], dx, y[c][i].d, x8_fold(sumi[c]), off[c]);
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

/* cpu_vdot8_<type>_<isa>: the kernel with ncols a constant, so that its
 * accumulators stay in registers. */
#define X8_ENTRY(type)                                                                              \
    void X8_NAME(type)(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) { \
        switch (ncols) {                                                                            \
        case 1: x8_##type(n, 1, s, w, a, a_stride); break;                                          \
        case 2: x8_##type(n, 2, s, w, a, a_stride); break;                                          \
        case 3: x8_##type(n, 3, s, w, a, a_stride); break;                                          \
        default: x8_##type(n, 4, s, w, a, a_stride); break;                                         \
        }                                                                                           \
    }

X8_ENTRY(q4_0)
X8_ENTRY(q8_0)
X8_ENTRY(q4_K)
X8_ENTRY(q6_K)
X8_ENTRY(mxfp4)

#endif
