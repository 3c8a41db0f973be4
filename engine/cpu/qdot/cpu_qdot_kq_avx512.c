/* cpu_qdot_kq_avx512.c - AVX-512 (F, BW, VL, DQ) dot products for Q2_K,
 * Q3_K, Q5_K and IQ4_XS against Q8_K (cpu_qdot_more.h; derivation in
 * cpu_qdot_kq_c.c, register layout as cpu_qdot_kq_avx2.c's, two of its
 * 32-byte groups per 512-bit register):
 *   Q2_K, Q3_K: the 64 bytes of qs in one load, half h = elements
 *     128 h + 32 i .. + 31 for shift 2 i; the four 128-bit lanes carry
 *     sub-blocks 2i, 2i+1, 8+2i, 9+2i and get those scales.
 *   Q5_K: qs[64 p .. 64 p + 63] covers chunks c = 2p, 2p+1; low nibbles
 *     are sub-blocks 4p and 4p+2, high nibbles 4p+1 and 4p+3.
 *   IQ4_XS: sub-blocks k and k+1 (32 bytes of qs, 64 activations in a row).
 * Integer sums stay exact and the per-super-block float step is the C
 * kernel's, so results equal cpu_vdot_*_c bit for bit.
 *
 * Built with target attributes; run only where the CPU reports AVX-512 F,
 * BW, VL and DQ. (test_cpu_qdot runs it against the C kernel only on such
 * a CPU; elsewhere it is compiled, not run.) */
#include <immintrin.h>
#include <stdint.h>

#include "cpu_qdot_kq.h"
#include "cpu_qdot_more.h"
#include "qblock.h"

#define CK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

static inline CK_AVX512 float f16(uint16_t h) { return _cvtsh_ss(h); }

static inline CK_AVX512 __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
static inline CK_AVX512 __m512i act_pair(const int8_t *a0, const int8_t *a1) {
    return join256(_mm256_loadu_si256((const __m256i *)a0), _mm256_loadu_si256((const __m256i *)a1));
}
/* int16 scales, one per 128-bit lane, lane 0 first */
static inline CK_AVX512 __m512i lane_scales4(int s0, int s1, int s2, int s3) {
    return join256(_mm256_set_m128i(_mm_set1_epi16((short)s1), _mm_set1_epi16((short)s0)),
                   _mm256_set_m128i(_mm_set1_epi16((short)s3), _mm_set1_epi16((short)s2)));
}

CK_AVX512 void cpu_vdot_q2_K_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_q2_K *x = w;
    const qblock_q8_K *y = a;
    const __m512i m3 = _mm512_set1_epi8(3);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        const uint8_t *sc = x[b].scales;
        const __m512i bits = _mm512_loadu_si512((const void *)x[b].qs);
        __m512i acc = _mm512_setzero_si512();
        for (int i = 0; i < 4; i++) {
            const int k = 2 * i;
            const __m512i q = _mm512_and_si512(_mm512_srli_epi16(bits, 2 * i), m3);
            const __m512i a8 = act_pair(y[b].qs + 32 * i, y[b].qs + 128 + 32 * i);
            const __m512i sv =
                lane_scales4(sc[k] & 0x0f, sc[k + 1] & 0x0f, sc[k + 8] & 0x0f, sc[k + 9] & 0x0f);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(q, a8), sv));
        }
        int msum = 0;
        for (int k = 0; k < 16; k++) msum += y[b].bsums[k] * (sc[k] >> 4);
        const float dall = y[b].d * f16(x[b].d);
        const float dmin = y[b].d * f16(x[b].dmin);
        sum += dall * (float)_mm512_reduce_add_epi32(acc) - dmin * (float)msum;
    }
    *s = sum;
}

CK_AVX512 void cpu_vdot_q3_K_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_q3_K *x = w;
    const qblock_q8_K *y = a;
    const __m512i m3 = _mm512_set1_epi8(3), m1 = _mm512_set1_epi8(1);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        int sc[16];
        q3k_scales(x[b].scales, sc);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[b].hmask);
        /* half 1's high bits are hmask bits 4..7: pre-shift that half by 4 */
        const __m512i hmx = join256(hm, _mm256_srli_epi16(hm, 4));
        const __m512i bits = _mm512_loadu_si512((const void *)x[b].qs);
        __m512i acc = _mm512_setzero_si512();
        for (int i = 0; i < 4; i++) {
            const int k = 2 * i;
            const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(bits, 2 * i), m3);
            const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(hmx, i), m1);
            const __m512i u = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 2));
            const __m512i a8 = act_pair(y[b].qs + 32 * i, y[b].qs + 128 + 32 * i);
            const __m512i sv = lane_scales4(sc[k], sc[k + 1], sc[k + 8], sc[k + 9]);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, a8), sv));
        }
        int corr = 0;
        for (int k = 0; k < 16; k++) corr += sc[k] * y[b].bsums[k];
        sum += f16(x[b].d) * y[b].d * (float)(_mm512_reduce_add_epi32(acc) - 4 * corr);
    }
    *s = sum;
}

CK_AVX512 void cpu_vdot_q5_K_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_q5_K *x = w;
    const qblock_q8_K *y = a;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m1 = _mm512_set1_epi8(1);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        int sc[8], mn[8], msum = 0;
        for (int k = 0; k < 8; k++) {
            k4_scale_min(x[b].scales, k, &sc[k], &mn[k]);
            msum += mn[k] * (y[b].bsums[2 * k] + y[b].bsums[2 * k + 1]);
        }
        const __m256i hb = _mm256_loadu_si256((const __m256i *)x[b].qh);
        /* chunk c's fifth bits are qh bits 2c, 2c+1: the high half (odd c)
         * pre-shifted by 2 */
        const __m512i hx = join256(hb, _mm256_srli_epi16(hb, 2));
        __m512i acc = _mm512_setzero_si512();
        for (int p = 0; p < 2; p++) {
            const __m512i bits = _mm512_loadu_si512((const void *)(x[b].qs + 64 * p));
            const __m512i h0 = _mm512_and_si512(_mm512_srli_epi16(hx, 4 * p), m1);
            const __m512i h1 = _mm512_and_si512(_mm512_srli_epi16(hx, 4 * p + 1), m1);
            const __m512i q0 = _mm512_or_si512(_mm512_and_si512(bits, m4), _mm512_slli_epi16(h0, 4));
            const __m512i q1 =
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bits, 4), m4), _mm512_slli_epi16(h1, 4));
            const int8_t *a8 = y[b].qs + 128 * p;
            const __m512i a0 = act_pair(a8, a8 + 64), a1 = act_pair(a8 + 32, a8 + 96);
            const __m512i s0 =
                join256(_mm256_set1_epi16((short)sc[4 * p]), _mm256_set1_epi16((short)sc[4 * p + 2]));
            const __m512i s1 =
                join256(_mm256_set1_epi16((short)sc[4 * p + 1]), _mm256_set1_epi16((short)sc[4 * p + 3]));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(q0, a0), s0));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(q1, a1), s1));
        }
        const float d = f16(x[b].d) * y[b].d;
        const float dmin = f16(x[b].dmin) * y[b].d;
        sum += d * (float)_mm512_reduce_add_epi32(acc) - dmin * (float)msum;
    }
    *s = sum;
}

CK_AVX512 void cpu_vdot_iq4_xs_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_iq4_xs *x = w;
    const qblock_q8_K *y = a;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qblock_iq4nl_values));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        __m512i acc = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
            const __m128i v0 = _mm_loadu_si128((const __m128i *)(x[b].qs + 16 * k));
            const __m128i v1 = _mm_loadu_si128((const __m128i *)(x[b].qs + 16 * k + 16));
            const __m512i nib = _mm512_and_si512(join256(_mm256_set_m128i(_mm_srli_epi16(v0, 4), v0),
                                                         _mm256_set_m128i(_mm_srli_epi16(v1, 4), v1)),
                                                 m4);
            const __m512i q = _mm512_shuffle_epi8(table, nib);
            const __m512i a8 = _mm512_loadu_si512((const void *)(y[b].qs + 32 * k));
            /* |q| times a negated where q < 0 (no vpsignb in AVX-512) */
            const __mmask64 neg = _mm512_movepi8_mask(q);
            const __m512i as = _mm512_mask_sub_epi8(a8, neg, _mm512_setzero_si512(), a8);
            const __m512i p = _mm512_maddubs_epi16(_mm512_abs_epi8(q), as);
            const __m512i sv = join256(_mm256_set1_epi16((short)iq4xs_scale(&x[b], k)),
                                       _mm256_set1_epi16((short)iq4xs_scale(&x[b], k + 1)));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(p, sv));
        }
        sum += f16(x[b].d) * y[b].d * (float)_mm512_reduce_add_epi32(acc);
    }
    *s = sum;
}
