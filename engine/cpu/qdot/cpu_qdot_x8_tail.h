/* cpu_qdot_x8_tail.h - the float end of a super-block in the Q4_K and Q6_K
 * 8-row (x8) kernels (and of an MXFP4 block, with its scales' decoding), one column at a time: shared by the AVX2 ones
 * (cpu_qdot_base_avx2.c) and the 512-bit ones (cpu_qdot_x8_body.h, built
 * twice: AVX-512 and VNNI). Each of them makes a block's exact int32 sums
 * of the 8 rows its own way; from there on the work is this, in this
 * order, so that their results are equal bit for bit (test_cpu_qdot). One
 * copy of it keeps that so. 256-bit AVX2 + FMA only, so that it compiles
 * the same under either set of flags. */
#ifndef CK_CPU_QDOT_X8_TAIL_H
#define CK_CPU_QDOT_X8_TAIL_H

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <stdint.h>

#include "qblock.h"

/* Q4_K: acc + dx dy sumi - dm dy summ, summ the rows' mins (x->m) against
 * the activations' 32-element sums (pairs of y->bsums); dx, dm the rows'
 * scales of the block (x->d, x->dmin), converted once for all columns. */
static inline __attribute__((always_inline)) __m256 x8_q4_K_tail(__m256 acc, const qblock_q4_Kx8 *x,
                                                                 __m256 dx, __m256 dm, const qblock_q8_K *y,
                                                                 __m256i sumi) {
    /* hadd: dwords 0, 1, 4, 5 are the sub-block sum pairs (0,1), (2,3), (4,5), (6,7) */
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    const __m256i hs = _mm256_hadd_epi16(bs, bs);
    __m256i summ = _mm256_setzero_si256();
    static const int pidx[4] = {0, 1, 4, 5};
    for (int p = 0; p < 4; p++) {
        const __m256i mv = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)x->m[p]));
        summ = _mm256_add_epi32(
            summ, _mm256_madd_epi16(mv, _mm256_permutevar8x32_epi32(hs, _mm256_set1_epi32(pidx[p]))));
    }
    const __m256 yd = _mm256_set1_ps(y->d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, yd), _mm256_cvtepi32_ps(sumi), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dm, yd), _mm256_cvtepi32_ps(summ), acc);
}

/* Q6_K: acc + dx yd (sumi - 32 off), the quants' -32 taken off once a
 * block (off: sum_s sc_s bsums_s). */
static inline __attribute__((always_inline)) __m256 x8_q6_K_tail(__m256 acc, __m256 dx, float yd,
                                                                 __m256i sumi, __m256i off) {
    const __m256i si = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
    return _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(yd)), _mm256_cvtepi32_ps(si), acc);
}

/* MXFP4's levels plus 12 (qblock_mxfp4_values[q] + 12, 0..24): unsigned
 * bytes, the operand maddubs and vpdpbusd take unsigned, looked up by
 * nibble with one byte shuffle. The x8 kernels take 12 sum(y) off a block's
 * sum after (the q8_0s row's block sums), so it stays exact. */
static const uint8_t x8_mxfp4_u[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* The 8 rows' MXFP4 scales 2^(e - 128) (qblock_e8m0_half_bits) from their
 * E8M0 bytes: (e - 1) << 23 as f32 bits, below e = 2 the subnormals
 * 2^21 << e. */
static inline __attribute__((always_inline)) __m256 x8_e8m0_half(const uint8_t *e) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)e));
    const __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(nrm, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v)));
}

/* MXFP4: acc + (dx dy) (sumi - 12 ysum), dx the rows' scales of the block
 * (x8_e8m0_half), ysum the activation block's sum (the levels' +12 off). */
static inline __attribute__((always_inline)) __m256 x8_mxfp4_tail(__m256 acc, __m256 dx, float dy,
                                                                  __m256i sumi, int ysum) {
    const __m256i si = _mm256_sub_epi32(sumi, _mm256_set1_epi32(12 * ysum));
    return _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(dy)), _mm256_cvtepi32_ps(si), acc);
}

#endif

#endif
