/* cpu_qdot_legacy_avx2.c - AVX2 (+FMA, F16C) dot products for Q4_1, Q5_0,
 * Q5_1, IQ4_NL and MXFP4 (cpu_qdot_more.h; the arithmetic is
 * cpu_qdot_legacy_c.c's).
 *
 * One 32-element block is one 256-bit register of 32 bytes: the 16 packed
 * bytes are spread so the low nibbles (elements 0..15) fill the low 128-bit
 * lane and the high nibbles (16..31) the high lane, which is the order of
 * the activation block's 32 int8. vpmaddubsw multiplies unsigned weight
 * bytes by signed activation bytes and adds pairs into int16 (no overflow:
 * 2 * 31 * 127 or 2 * 127 * 127 < 32767), vpmaddwd with ones adds pairs into
 * 8 int32: an exact integer partial sum of the block. Signed weights (Q5_0's
 * q - 16, IQ4_NL's and MXFP4's levels) take the usual sign trick:
 * |w| * (a * sign(w)).
 * The block's 8 int32 become floats and are multiplied-added by the block's
 * scale into 8 float accumulators, reduced once at the end: the same
 * products as the C kernel, added in another order.
 *
 * Each function carries its ISA in a target attribute, so this file builds
 * whatever the compiler's default flags are; the caller runs it only where
 * the CPU has AVX2, FMA and F16C. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu_qdot_more.h"
#include "qblock.h"

#define CK_AVX2 __attribute__((target("avx2,fma,f16c")))

static inline CK_AVX2 float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline CK_AVX2 float f16(uint16_t h) { return _cvtsh_ss(h); }

/* An MXFP4 block's scale, 2^(e - 128) (qblock.h). */
static inline CK_AVX2 float e8m0_half(uint8_t e) {
    const uint32_t b = qblock_e8m0_half_bits(e);
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* 16 packed bytes -> 32 nibbles: low nibbles in bytes 0..15, high in 16..31. */
static inline CK_AVX2 __m256i nibbles32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* The 32 bits of a Q5 block's qh (element j's fifth bit is bit j) as 32
 * bytes, 0xff where the bit is set: every byte i first gets byte i / 8 of
 * the word, then is tested against its own bit i % 8. */
static inline CK_AVX2 __m256i bits_to_bytes(const uint8_t qh[4]) {
    const uint32_t w = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    const __m256i sel =
        _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w), sel);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* 8 int32 sums of pairs of unsigned u times signed s (bytes). */
static inline CK_AVX2 __m256i dot_us(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* The same for signed x times signed y. */
static inline CK_AVX2 __m256i dot_ss(__m256i x, __m256i y) {
    return dot_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

CK_AVX2 void cpu_vdot_q4_1_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q4_1 *x = w;
    const qblock_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int b = 0; b < n / QBLOCK_32; b++) {
        const __m256i q = nibbles32(x[b].qs);
        const __m256i a8 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256 dd = _mm256_set1_ps(f16(x[b].d) * f16(y[b].d));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(dot_us(q, a8)), acc);
        mins += f16(x[b].m) * f16(y[b].s);
    }
    *s = hsum8(acc) + mins;
}

CK_AVX2 void cpu_vdot_q5_1_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q5_1 *x = w;
    const qblock_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int b = 0; b < n / QBLOCK_32; b++) {
        const __m256i hi = _mm256_and_si256(bits_to_bytes(x[b].qh), _mm256_set1_epi8(0x10));
        const __m256i q = _mm256_or_si256(nibbles32(x[b].qs), hi);
        const __m256i a8 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256 dd = _mm256_set1_ps(f16(x[b].d) * f16(y[b].d));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(dot_us(q, a8)), acc);
        mins += f16(x[b].m) * f16(y[b].s);
    }
    *s = hsum8(acc) + mins;
}

CK_AVX2 void cpu_vdot_q5_0_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q5_0 *x = w;
    const qblock_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / QBLOCK_32; b++) {
        /* q - 16 as a signed byte: the nibble where the fifth bit is set,
         * nibble - 16 = nibble | 0xf0 where it is clear */
        const __m256i clear = _mm256_andnot_si256(bits_to_bytes(x[b].qh), _mm256_set1_epi8((char)0xf0));
        const __m256i q = _mm256_or_si256(nibbles32(x[b].qs), clear);
        const __m256i a8 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256 dd = _mm256_set1_ps(f16(x[b].d) * f16(y[b].d));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(dot_ss(q, a8)), acc);
    }
    *s = hsum8(acc);
}

CK_AVX2 void cpu_vdot_iq4_nl_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_iq4_nl *x = w;
    const qblock_q8_0 *y = a;
    const __m128i t = _mm_loadu_si128((const __m128i *)qblock_iq4nl_values);
    const __m256i table = _mm256_set_m128i(t, t);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / QBLOCK_32; b++) {
        /* vpshufb looks each nibble up in the 16 levels (per 128-bit lane,
         * hence the table in both) */
        const __m256i q = _mm256_shuffle_epi8(table, nibbles32(x[b].qs));
        const __m256i a8 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256 dd = _mm256_set1_ps(f16(x[b].d) * f16(y[b].d));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(dot_ss(q, a8)), acc);
    }
    *s = hsum8(acc);
}

CK_AVX2 void cpu_vdot_mxfp4_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_mxfp4 *x = w;
    const qblock_q8_0 *y = a;
    const __m128i t = _mm_loadu_si128((const __m128i *)qblock_mxfp4_values);
    const __m256i table = _mm256_set_m128i(t, t);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < n / QBLOCK_32; b++) {
        /* as IQ4_NL: the nibbles looked up in the 16 (doubled E2M1) levels */
        const __m256i q = _mm256_shuffle_epi8(table, nibbles32(x[b].qs));
        const __m256i a8 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256 dd = _mm256_set1_ps(f16(y[b].d) * e8m0_half(x[b].e));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(dot_ss(q, a8)), acc);
    }
    *s = hsum8(acc);
}
