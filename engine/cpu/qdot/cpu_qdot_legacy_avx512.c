/* cpu_qdot_legacy_avx512.c - AVX-512 (F, BW, VL, DQ) dot products for Q4_1,
 * Q5_0, Q5_1, IQ4_NL and MXFP4 (cpu_qdot_more.h; arithmetic of
 * cpu_qdot_legacy_c.c, layout of cpu_qdot_legacy_avx2.c).
 *
 * Two 32-element blocks per 512-bit register: block b's 32 bytes in the low
 * half, block b + 1's in the high half, so one vpmaddubsw/vpmaddwd pair
 * gives 8 exact int32 partial sums of each block, and one multiply-add with
 * a register holding b's scale in the low 8 lanes and b + 1's in the high 8
 * accumulates both. The Q5 fifth bits need no shuffle here: the two qh
 * words are one 64-bit mask register, bit i <-> byte i. AVX-512 has no
 * vpsignb, so the signed weights' sign trick is |w| (vpabsb) times the
 * activation negated under the mask of w's sign bits. An odd last block
 * runs on 256-bit registers (VL).
 *
 * Built with target attributes, like the AVX2 file; run only where the CPU
 * reports AVX-512 F, BW, VL and DQ. (test_cpu_qdot runs it against the C
 * kernel only on such a CPU; elsewhere it is compiled, not run.) */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu_qdot_more.h"
#include "qblock.h"

#define CK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

static inline CK_AVX512 float f16(uint16_t h) { return _cvtsh_ss(h); }

/* An MXFP4 block's scale, 2^(e - 128) (qblock.h). */
static inline CK_AVX512 float e8m0_half(uint8_t e) {
    const uint32_t b = qblock_e8m0_half_bits(e);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline CK_AVX512 uint32_t qh_word(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* 16 packed bytes -> 32 nibbles: low nibbles in bytes 0..15, high in 16..31. */
static inline CK_AVX512 __m256i nib32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

/* Blocks b and b + 1's nibbles / activations side by side. */
static inline CK_AVX512 __m512i nib64(const uint8_t *qs0, const uint8_t *qs1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(nib32(qs0)), nib32(qs1), 1);
}
static inline CK_AVX512 __m512i act64(const int8_t *a0, const int8_t *a1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a0)),
                              _mm256_loadu_si256((const __m256i *)a1), 1);
}
static inline CK_AVX512 __m512 scales2(float d0, float d1) {
    return _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
}

static inline CK_AVX512 __m512i dot_us512(__m512i u, __m512i s) {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}
/* signed x times signed y: |x| * (y negated where x < 0) */
static inline CK_AVX512 __m512i dot_ss512(__m512i x, __m512i y) {
    const __mmask64 neg = _mm512_movepi8_mask(x);
    const __m512i ys = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
    return dot_us512(_mm512_abs_epi8(x), ys);
}
static inline CK_AVX512 __m256i dot_us256(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
static inline CK_AVX512 __m256i dot_ss256(__m256i x, __m256i y) {
    return dot_us256(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline CK_AVX512 float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

CK_AVX512 void cpu_vdot_q4_1_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_q4_1 *x = w;
    const qblock_q8_1 *y = a;
    const int nb = n / QBLOCK_32;
    __m512 acc = _mm512_setzero_ps();
    float mins = 0.0f;
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m512i p = dot_us512(nib64(x[b].qs, x[b + 1].qs), act64(y[b].qs, y[b + 1].qs));
        const __m512 dd = scales2(f16(x[b].d) * f16(y[b].d), f16(x[b + 1].d) * f16(y[b + 1].d));
        acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p), acc);
        mins += f16(x[b].m) * f16(y[b].s) + f16(x[b + 1].m) * f16(y[b + 1].s);
    }
    float tail = 0.0f;
    if (b < nb) {
        const __m256i p = dot_us256(nib32(x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        tail = hsum256(_mm256_mul_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p)));
        mins += f16(x[b].m) * f16(y[b].s);
    }
    *s = _mm512_reduce_add_ps(acc) + tail + mins;
}

CK_AVX512 void cpu_vdot_q5_1_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_q5_1 *x = w;
    const qblock_q8_1 *y = a;
    const int nb = n / QBLOCK_32;
    __m512 acc = _mm512_setzero_ps();
    float mins = 0.0f;
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        const __mmask64 hb = (__mmask64)qh_word(x[b].qh) | (__mmask64)qh_word(x[b + 1].qh) << 32;
        const __m512i q =
            _mm512_or_si512(nib64(x[b].qs, x[b + 1].qs), _mm512_maskz_mov_epi8(hb, _mm512_set1_epi8(0x10)));
        const __m512i p = dot_us512(q, act64(y[b].qs, y[b + 1].qs));
        const __m512 dd = scales2(f16(x[b].d) * f16(y[b].d), f16(x[b + 1].d) * f16(y[b + 1].d));
        acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p), acc);
        mins += f16(x[b].m) * f16(y[b].s) + f16(x[b + 1].m) * f16(y[b + 1].s);
    }
    float tail = 0.0f;
    if (b < nb) {
        const __m256i hi = _mm256_maskz_mov_epi8((__mmask32)qh_word(x[b].qh), _mm256_set1_epi8(0x10));
        const __m256i q = _mm256_or_si256(nib32(x[b].qs), hi);
        const __m256i p = dot_us256(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        tail = hsum256(_mm256_mul_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p)));
        mins += f16(x[b].m) * f16(y[b].s);
    }
    *s = _mm512_reduce_add_ps(acc) + tail + mins;
}

CK_AVX512 void cpu_vdot_q5_0_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_q5_0 *x = w;
    const qblock_q8_0 *y = a;
    const int nb = n / QBLOCK_32;
    __m512 acc = _mm512_setzero_ps();
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        /* q - 16: the nibble where the fifth bit is set, nibble | 0xf0
         * (nibble - 16 as a byte) where it is clear */
        const __mmask64 hb = (__mmask64)qh_word(x[b].qh) | (__mmask64)qh_word(x[b + 1].qh) << 32;
        const __m512i nib = nib64(x[b].qs, x[b + 1].qs);
        const __m512i q = _mm512_or_si512(nib, _mm512_maskz_mov_epi8(~hb, _mm512_set1_epi8((char)0xf0)));
        const __m512i p = dot_ss512(q, act64(y[b].qs, y[b + 1].qs));
        const __m512 dd = scales2(f16(x[b].d) * f16(y[b].d), f16(x[b + 1].d) * f16(y[b + 1].d));
        acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p), acc);
    }
    float tail = 0.0f;
    if (b < nb) {
        const __mmask32 clear = ~(__mmask32)qh_word(x[b].qh);
        const __m256i q =
            _mm256_or_si256(nib32(x[b].qs), _mm256_maskz_mov_epi8(clear, _mm256_set1_epi8((char)0xf0)));
        const __m256i p = dot_ss256(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        tail = hsum256(_mm256_mul_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p)));
    }
    *s = _mm512_reduce_add_ps(acc) + tail;
}

CK_AVX512 void cpu_vdot_iq4_nl_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_iq4_nl *x = w;
    const qblock_q8_0 *y = a;
    const int nb = n / QBLOCK_32;
    const __m128i t = _mm_loadu_si128((const __m128i *)qblock_iq4nl_values);
    const __m512i table = _mm512_broadcast_i32x4(t); /* vpshufb looks up per 128-bit lane */
    __m512 acc = _mm512_setzero_ps();
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m512i q = _mm512_shuffle_epi8(table, nib64(x[b].qs, x[b + 1].qs));
        const __m512i p = dot_ss512(q, act64(y[b].qs, y[b + 1].qs));
        const __m512 dd = scales2(f16(x[b].d) * f16(y[b].d), f16(x[b + 1].d) * f16(y[b + 1].d));
        acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p), acc);
    }
    float tail = 0.0f;
    if (b < nb) {
        const __m256i q = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nib32(x[b].qs));
        const __m256i p = dot_ss256(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        tail = hsum256(_mm256_mul_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p)));
    }
    *s = _mm512_reduce_add_ps(acc) + tail;
}

CK_AVX512 void cpu_vdot_mxfp4_avx512(int n, float *s, const void *w, const void *a) {
    const qblock_mxfp4 *x = w;
    const qblock_q8_0 *y = a;
    const int nb = n / QBLOCK_32;
    const __m128i t = _mm_loadu_si128((const __m128i *)qblock_mxfp4_values);
    const __m512i table = _mm512_broadcast_i32x4(t);
    __m512 acc = _mm512_setzero_ps();
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m512i q = _mm512_shuffle_epi8(table, nib64(x[b].qs, x[b + 1].qs));
        const __m512i p = dot_ss512(q, act64(y[b].qs, y[b + 1].qs));
        const __m512 dd = scales2(f16(y[b].d) * e8m0_half(x[b].e), f16(y[b + 1].d) * e8m0_half(x[b + 1].e));
        acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p), acc);
    }
    float tail = 0.0f;
    if (b < nb) {
        const __m256i q = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nib32(x[b].qs));
        const __m256i p = dot_ss256(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        tail = hsum256(_mm256_mul_ps(_mm256_set1_ps(f16(y[b].d) * e8m0_half(x[b].e)), _mm256_cvtepi32_ps(p)));
    }
    *s = _mm512_reduce_add_ps(acc) + tail;
}
