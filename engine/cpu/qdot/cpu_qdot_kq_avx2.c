/* cpu_qdot_kq_avx2.c - AVX2 (+FMA, F16C) dot products for Q2_K, Q3_K, Q5_K
 * and IQ4_XS against Q8_K (cpu_qdot_more.h; the derivation is in
 * cpu_qdot_kq_c.c).
 *
 * A super-block's 256 activations are 8 registers of 32 int8. The weight
 * quants are rebuilt as 32 unsigned bytes in the same element order (Q2_K
 * and Q3_K: 2-bit fields of qs[32 h .. 32 h + 31] shifted by 2 i for
 * elements 128 h + 32 i .. + 31; Q5_K: the nibbles of qs[32 c ..] for
 * elements 64 c .. + 63 with the fifth bit from qh; IQ4_XS: the table's
 * levels looked up with vpshufb), multiplied with vpmaddubsw into int16
 * pair sums (at most 2 * 31 * 127, or 2 * 127 * 127 for IQ4_XS, both below
 * 32767) and weighted by the sub-block scales with vpmaddwd, whose int16
 * scale vector holds the scale of the 16 elements of its 128-bit lane (the
 * scales are widened once a super-block and picked per register with
 * vpshufb). So
 * the super-block's integer sum is exact, the float step once per
 * super-block is the C kernel's, and the result equals cpu_vdot_*_c bit for
 * bit (the test checks it against the stated tolerance all the same).
 *
 * Q3_K's values are q - 4 h' (h' = 1 where the hmask bit is clear), i.e.
 * u - 4 with u = q + 4 hbit in 0..7: the kernel multiplies u and removes
 * 4 * sum_k s_k bsums[k] afterwards, from the activation's own sums. */
#include <immintrin.h>
#include <stdint.h>

#include "cpu_qdot_kq.h"
#include "cpu_qdot_more.h"
#include "qblock.h"

#define CK_AVX2 __attribute__((target("avx2,fma,f16c")))

static inline CK_AVX2 int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline CK_AVX2 float f16(uint16_t h) { return _cvtsh_ss(h); }

/* idx[i] for vpshufb on a register whose both lanes hold 8 int16 scales:
 * the low lane gets scale 2 i in every int16, the high lane scale 2 i + 1 */
static inline CK_AVX2 void pair_shuffles(__m256i idx[4]) {
    for (int i = 0; i < 4; i++)
        idx[i] = _mm256_set_m128i(_mm_set1_epi16((short)((4 * i + 3) << 8 | (4 * i + 2))),
                                  _mm_set1_epi16((short)((4 * i + 1) << 8 | (4 * i))));
}

/* Sub-blocks k = 8 h + 2 i and k + 1 of a Q2_K/Q3_K super-block: the
 * 2-bit field (or Q3_K's 3-bit u) at shift 2 i of qs half h times the
 * activations 128 h + 32 i .., weighted by sc (both lanes: scales 8 h ..
 * 8 h + 7 as int16) through idx[i]. */
static inline CK_AVX2 __m256i kq_pair(__m256i q, const int8_t *a8, __m256i sc, __m256i idx) {
    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)a8));
    return _mm256_madd_epi16(p, _mm256_shuffle_epi8(sc, idx));
}

CK_AVX2 void cpu_vdot_q2_K_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q2_K *x = w;
    const qblock_q8_K *y = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i idx[4];
    pair_shuffles(idx);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[b].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
        /* the mins: sum_k m_k bsums[k], 16 int16 products added in pairs */
        const __m256i msum = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)y[b].bsums));
        const __m256i sch[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                _mm256_permute2x128_si256(sc16, sc16, 0x11)};
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
            for (int i = 0; i < 4; i++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * i), m3);
                acc = _mm256_add_epi32(acc, kq_pair(q, y[b].qs + 128 * h + 32 * i, sch[h], idx[i]));
            }
        }
        const float dall = y[b].d * f16(x[b].d);
        const float dmin = y[b].d * f16(x[b].dmin);
        sum += dall * (float)hsum_i32(acc) - dmin * (float)hsum_i32(msum);
    }
    *s = sum;
}

CK_AVX2 void cpu_vdot_q3_K_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q3_K *x = w;
    const qblock_q8_K *y = a;
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    __m256i idx[4];
    pair_shuffles(idx);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        uint32_t sw[4];
        q3k_scales_packed(x[b].scales, sw);
        const __m256i sc16 =
            _mm256_cvtepi8_epi16(_mm_set_epi32((int)sw[3], (int)sw[2], (int)sw[1], (int)sw[0]));
        const __m256i sch[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                _mm256_permute2x128_si256(sc16, sc16, 0x11)};
        /* u = q + 4 hbit; the -4 of every element comes back as
         * -4 sum_k s_k bsums[k] */
        __m256i acc =
            _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[b].bsums)), 2);
        acc = _mm256_sub_epi32(_mm256_setzero_si256(), acc);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[b].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
            for (int i = 0; i < 4; i++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * i), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + i), m1);
                const __m256i u = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                acc = _mm256_add_epi32(acc, kq_pair(u, y[b].qs + 128 * h + 32 * i, sch[h], idx[i]));
            }
        }
        sum += f16(x[b].d) * y[b].d * (float)hsum_i32(acc);
    }
    *s = sum;
}

CK_AVX2 void cpu_vdot_q5_K_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q5_K *x = w;
    const qblock_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m1 = _mm256_set1_epi8(1);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)x[b].qh);
        __m256i acc = _mm256_setzero_si256();
        int msum = 0;
        for (int c = 0; c < 4; c++) {
            int sc0, m0, sc1, mn1;
            k4_scale_min(x[b].scales, 2 * c, &sc0, &m0);
            k4_scale_min(x[b].scales, 2 * c + 1, &sc1, &mn1);
            msum += m0 * (y[b].bsums[4 * c] + y[b].bsums[4 * c + 1]) +
                    mn1 * (y[b].bsums[4 * c + 2] + y[b].bsums[4 * c + 3]);
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * c));
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), m1);
            const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), m1);
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(h0, 4));
            const __m256i q1 =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), _mm256_slli_epi16(h1, 4));
            const __m256i a0 = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * c));
            const __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * c + 32));
            acc = _mm256_add_epi32(
                acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q0, a0), _mm256_set1_epi16((short)sc0)));
            acc = _mm256_add_epi32(
                acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q1, a1), _mm256_set1_epi16((short)sc1)));
        }
        const float d = f16(x[b].d) * y[b].d;
        const float dmin = f16(x[b].dmin) * y[b].d;
        sum += d * (float)hsum_i32(acc) - dmin * (float)msum;
    }
    *s = sum;
}

CK_AVX2 void cpu_vdot_iq4_xs_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_iq4_xs *x = w;
    const qblock_q8_K *y = a;
    const __m128i t = _mm_loadu_si128((const __m128i *)qblock_iq4nl_values);
    const __m256i table = _mm256_set_m128i(t, t), m4 = _mm256_set1_epi8(0x0f);
    __m256i idx[4];
    pair_shuffles(idx);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        int16_t ls[8];
        for (int k = 0; k < 8; k++) ls[k] = (int16_t)iq4xs_scale(&x[b], k);
        const __m128i l8 = _mm_loadu_si128((const __m128i *)ls);
        const __m256i scb = _mm256_set_m128i(l8, l8);
        __m256i acc = _mm256_setzero_si256();
        for (int k = 0; k < 8; k += 2) {
            /* sub-blocks k and k + 1 in one load: bytes 0..15 are k's, 16..31
             * k + 1's; their low nibbles are elements 0..15 of each, the
             * high nibbles 16..31, so the activations are regrouped by lane
             * to match (low lane: k, high lane: k + 1) */
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x[b].qs + 16 * k));
            const __m256i qlo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
            const __m256i qhi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            const __m256i a0 = _mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * k));
            const __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * k + 32));
            const __m256i alo = _mm256_permute2x128_si256(a0, a1, 0x20);
            const __m256i ahi = _mm256_permute2x128_si256(a0, a1, 0x31);
            /* |q| (a sign(q)): each int16 pair sum at most 2 * 127 * 127; the
             * two halves' sums added in int16 could reach 4 * 127 * 127, so
             * they are widened first */
            const __m256i plo = _mm256_maddubs_epi16(_mm256_sign_epi8(qlo, qlo), _mm256_sign_epi8(alo, qlo));
            const __m256i phi = _mm256_maddubs_epi16(_mm256_sign_epi8(qhi, qhi), _mm256_sign_epi8(ahi, qhi));
            const __m256i sc = _mm256_shuffle_epi8(scb, idx[k / 2]); /* lanes: ls[k], ls[k + 1] */
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(plo, sc));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(phi, sc));
        }
        sum += f16(x[b].d) * y[b].d * (float)hsum_i32(acc);
    }
    *s = sum;
}
