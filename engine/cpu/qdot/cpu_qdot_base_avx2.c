/* cpu_qdot_base_avx2.c - Q8_0, Q4_0, Q4_K and Q6_K dot products with AVX2,
 * FMA and F16C (cpu_qdot.h; built with -mavx2 -mfma -mf16c, called only
 * where cpu_features says the CPU has them).
 *
 * The shapes are llama.cpp's AVX2 ones (ggml-cpu/arch/x86/quants.c): bytes
 * multiplied by _mm256_maddubs_epi16 (unsigned x signed, so a signed weight
 * lends its sign to the activation first), pairs summed into 32-bit lanes
 * by _mm256_madd_epi16, one float multiply-add per block. The integer sums
 * are exact; only the float sums across blocks are ordered differently from
 * the C kernels.
 *
 * The vdotn variants take up to CPU_QDOT_NCOLS activation rows for one
 * weight row: each weight block is loaded and unpacked once for all of
 * them, which is most of the work besides the multiplies at batch sizes
 * above one. The vdot2 variants (Q8_0, Q4_0, Q4_K) take two weight rows
 * as well: a register block of 2 rows x 4 columns. The vdot8 ones (end of
 * the file) take 8 rows repacked one a 32-bit lane (qblock.h's _x8
 * blocks), so a block's conversion, scaling and multiply-add are one
 * instruction for the 8 rows. */
#include "cpu_qdot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu_prefetch.h"
#include "cpu_qdot_x8_tail.h"

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

static inline float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 32 signed bytes x 32 signed bytes, summed in 8 int32 lanes and made float. */
static inline __m256 mul_sum_i8(__m256i x, __m256i y) {
    const __m256i dot = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot));
}

/* The f16 scales of 8 consecutive blocks, `stride` bytes apart, as 8 floats:
 * one conversion for 8 blocks instead of a scalar one each (at batch 1
 * scalar conversions would be half of a Q4_0 block's instructions). */
static inline __m256 scales8(const void *p, size_t stride) {
    const unsigned char *b = p;
    uint16_t h[8];
    for (int k = 0; k < 8; k++) memcpy(&h[k], b + (size_t)k * stride, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* Lane k of v in every lane. */
static inline __m256 lane(__m256 v, int k) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k)); }

/* 32 nibbles (16 bytes) -> 32 bytes 0..15: low nibbles first, then high. */
static inline __m256i nibbles32(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* ---------------------------------------------------------- Q8_0, Q4_0 */

/* The two 32-element weight types: a block of either is the f16 scale d
 * (first, so a block's address is its d's) and 32 quants, and their
 * kernels differ only in w32_qs and the block's size. Passed as a
 * constant, so each public function below compiles to its own type's code
 * (the bodies are always inlined; no branch on it is left at run time). */
enum w32_type { W32_Q8_0, W32_Q4_0 };

static inline __attribute__((always_inline)) size_t w32_bytes(const int t) {
    return t == W32_Q4_0 ? sizeof(qblock_q4_0) : sizeof(qblock_q8_0);
}

/* Block i of row w, of type t (indexed as its type's array, as x[i]). */
static inline __attribute__((always_inline)) const void *w32_blk(const int t, const void *w, int i) {
    if (t == W32_Q4_0) return (const qblock_q4_0 *)w + i;
    return (const qblock_q8_0 *)w + i;
}

/* The scale of block i. */
static inline __attribute__((always_inline)) float w32_d(const int t, const void *w, int i) {
    return f16(*(const uint16_t *)w32_blk(t, w, i));
}

/* The one difference between the Q8_0 and Q4_0 kernels: block i's quants
 * as 32 signed bytes (Q8_0's as stored, Q4_0's nibbles less 8). */
static inline __attribute__((always_inline)) __m256i w32_qs(const int t, const void *w, int i) {
    const void *b = w32_blk(t, w, i);
    if (t == W32_Q4_0) return _mm256_sub_epi8(nibbles32(((const qblock_q4_0 *)b)->qs), _mm256_set1_epi8(8));
    return _mm256_loadu_si256((const __m256i *)((const qblock_q8_0 *)b)->qs);
}

static inline __attribute__((always_inline)) void vdot_32(const int t, int n, float *s, const void *w,
                                                          const void *a) {
    const qblock_q8_0 *y = a;
    const int nb = n / QBLOCK_32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    /* eight blocks a step, their scales converted at once; alternate blocks
     * into two sums, so a block's multiply-add need not wait for the last */
    for (; i + 8 <= nb; i += 8) {
        const __m256 d = _mm256_mul_ps(scales8(w32_blk(t, w, i), w32_bytes(t)), scales8(&y[i].d, sizeof *y));
        for (int k = 0; k < 8; k += 2) {
            const __m256 q0 =
                mul_sum_i8(w32_qs(t, w, i + k), _mm256_loadu_si256((const __m256i *)y[i + k].qs));
            const __m256 q1 =
                mul_sum_i8(w32_qs(t, w, i + k + 1), _mm256_loadu_si256((const __m256i *)y[i + k + 1].qs));
            acc0 = _mm256_fmadd_ps(lane(d, k), q0, acc0);
            acc1 = _mm256_fmadd_ps(lane(d, k + 1), q1, acc1);
        }
    }
    for (; i + 1 < nb; i += 2) {
        const __m256i x0 = w32_qs(t, w, i);
        const __m256i x1 = w32_qs(t, w, i + 1);
        const __m256 q0 = mul_sum_i8(x0, _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256 q1 = mul_sum_i8(x1, _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(w32_d(t, w, i) * f16(y[i].d)), q0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(w32_d(t, w, i + 1) * f16(y[i + 1].d)), q1, acc1);
    }
    for (; i < nb; i++) {
        const __m256 q = mul_sum_i8(w32_qs(t, w, i), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(w32_d(t, w, i) * f16(y[i].d)), q, acc0);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1));
}

void cpu_vdot_q8_0_avx2(int n, float *s, const void *w, const void *a) { vdot_32(W32_Q8_0, n, s, w, a); }
void cpu_vdot_q4_0_avx2(int n, float *s, const void *w, const void *a) { vdot_32(W32_Q4_0, n, s, w, a); }

static inline __attribute__((always_inline)) void dotn_32(const int t, int n, const int ncols, float *s,
                                                          const void *w, const void *a, size_t a_stride) {
    const int nb = n / QBLOCK_32;
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) acc[c] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= nb; i += 8) { /* scales 8 blocks at a time, as vdot_32 */
        const __m256 dx = scales8(w32_blk(t, w, i), w32_bytes(t));
        __m256 d[CPU_QDOT_NCOLS];
        for (int c = 0; c < ncols; c++)
            d[c] = _mm256_mul_ps(
                dx, scales8(&((const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride) + i)->d,
                            sizeof(qblock_q8_0)));
        for (int k = 0; k < 8; k++) {
            const __m256i qx = w32_qs(t, w, i + k);
            const __m256i ax = _mm256_sign_epi8(qx, qx);
            for (int c = 0; c < ncols; c++) {
                const qblock_q8_0 *y = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride) + i + k;
                const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), qx);
                const __m256 q =
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)));
                acc[c] = _mm256_fmadd_ps(lane(d[c], k), q, acc[c]);
            }
        }
    }
    for (; i < nb; i++) {
        const __m256i qx = w32_qs(t, w, i);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        const float dx = w32_d(t, w, i);
        for (int c = 0; c < ncols; c++) {
            const qblock_q8_0 *y = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride) + i;
            const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), qx);
            const __m256 q =
                _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy)));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16(y->d)), q, acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) s[c] = hsum8(acc[c]);
}

/* ncols a constant in each case: the accumulators then live in registers
 * (indexed by a variable count they went to the stack at every block). */
static inline __attribute__((always_inline)) void vdotn_32(const int t, int n, int ncols, float *s,
                                                           const void *w, const void *a, size_t a_stride) {
    switch (ncols) {
    case 1: dotn_32(t, n, 1, s, w, a, a_stride); break;
    case 2: dotn_32(t, n, 2, s, w, a, a_stride); break;
    case 3: dotn_32(t, n, 3, s, w, a, a_stride); break;
    default: dotn_32(t, n, 4, s, w, a, a_stride); break;
    }
}

void cpu_vdotn_q8_0_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    vdotn_32(W32_Q8_0, n, ncols, s, w, a, a_stride);
}
void cpu_vdotn_q4_0_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    vdotn_32(W32_Q4_0, n, ncols, s, w, a, a_stride);
}

/* ------------------------------------------------------------------ Q4_K */

/* The 8 scales and 8 mins of a Q4_K block, unpacked from 12 bytes into
 * 16 bytes: utmp[0..1] the scales, utmp[2..3] the mins (ggml's order). */
static inline void q4k_unpack(const uint8_t *scales, uint32_t utmp[4]) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    memcpy(utmp, scales, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
}

/* Broadcast 16-bit scale pair j (of 8) across the vector. */
static inline __m256i scale_pair(__m256i scales, int j) {
    const __m256i sh = _mm256_set1_epi16((short)(2 * j | (2 * j + 1) << 8));
    return _mm256_shuffle_epi8(scales, sh);
}

/* Q4_K block i against one q8_K block: d * sum_j sc_j * (q . a) in float
 * lanes (returned), dmin * sum_j m_j * bsums_j into *mins. */
void cpu_vdot_q4_K_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q4_K *x = w;
    const qblock_q8_K *y = a;
    const int nb = n / QBLOCK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float d = y[i].d * f16(x[i].d), dmin = -y[i].d * f16(x[i].dmin);
        uint32_t utmp[4];
        q4k_unpack(x[i].scales, utmp);
        const __m256i mins_and_scales =
            _mm256_cvtepu8_epi16(_mm_set_epi32((int)utmp[3], (int)utmp[2], (int)utmp[1], (int)utmp[0]));
        const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m128i q8s =
            _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
        const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        const __m256i scales = _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < QBLOCK_K / 64; j++) {
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *)q4);
            q4 += 32;
            const __m256i q4l = _mm256_and_si256(q4bits, m4);
            const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            const __m256i q8l = _mm256_loadu_si256((const __m256i *)q8);
            const __m256i q8h = _mm256_loadu_si256((const __m256i *)(q8 + 32));
            q8 += 64;
            const __m256i pl = _mm256_madd_epi16(scale_pair(scales, 2 * j), _mm256_maddubs_epi16(q4l, q8l));
            const __m256i ph =
                _mm256_madd_epi16(scale_pair(scales, 2 * j + 1), _mm256_maddubs_epi16(q4h, q8h));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    *s = hsum8(acc) + _mm_cvtss_f32(acc_m);
}

static inline __attribute__((always_inline)) void dotn_q4_K(int n, const int ncols, float *s, const void *w,
                                                            const void *a, size_t a_stride) {
    const qblock_q4_K *x = w;
    const int nb = n / QBLOCK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[CPU_QDOT_NCOLS];
    __m128 acc_m[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) acc[c] = _mm256_setzero_ps(), acc_m[c] = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        uint32_t utmp[4];
        q4k_unpack(x[i].scales, utmp);
        const __m256i mins_and_scales =
            _mm256_cvtepu8_epi16(_mm_set_epi32((int)utmp[3], (int)utmp[2], (int)utmp[1], (int)utmp[0]));
        const __m128i mins = _mm256_extracti128_si256(mins_and_scales, 1);
        const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        const __m256i scales = _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        const float dx = f16(x[i].d), mx = -f16(x[i].dmin);
        __m256i ql[4], qh[4];
        for (int j = 0; j < 4; j++) {
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            ql[j] = _mm256_and_si256(q4bits, m4);
            qh[j] = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
        }
        for (int c = 0; c < ncols; c++) {
            const qblock_q8_K *y = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride) + i;
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y->bsums);
            const __m128i q8s =
                _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
            acc_m[c] =
                _mm_fmadd_ps(_mm_set1_ps(mx * y->d), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), acc_m[c]);
            __m256i sumi = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                const __m256i q8l = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j));
                const __m256i q8h = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j + 32));
                const __m256i pl =
                    _mm256_madd_epi16(scale_pair(scales, 2 * j), _mm256_maddubs_epi16(ql[j], q8l));
                const __m256i ph =
                    _mm256_madd_epi16(scale_pair(scales, 2 * j + 1), _mm256_maddubs_epi16(qh[j], q8h));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y->d), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) {
        __m128 m = _mm_add_ps(acc_m[c], _mm_movehl_ps(acc_m[c], acc_m[c]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        s[c] = hsum8(acc[c]) + _mm_cvtss_f32(m);
    }
}

/* ncols a constant in each case: the accumulators then live in registers
 * (indexed by a variable count they went to the stack at every block). */
void cpu_vdotn_q4_K_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    switch (ncols) {
    case 1: dotn_q4_K(n, 1, s, w, a, a_stride); break;
    case 2: dotn_q4_K(n, 2, s, w, a, a_stride); break;
    case 3: dotn_q4_K(n, 3, s, w, a, a_stride); break;
    default: dotn_q4_K(n, 4, s, w, a, a_stride); break;
    }
}

/* ------------------------------------------------------------------ Q6_K */

/* The 6-bit quants (0..63, before the -32) of one half (128 elements) of a
 * Q6_K block: q[0..3] = elements 0-31, 32-63, 64-95, 96-127 of the half. */
static inline void q6k_half(const uint8_t *ql, const uint8_t *qh, __m256i q[4]) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    const __m256i b1 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i b2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i bh = _mm256_loadu_si256((const __m256i *)qh);
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4);
    const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2);
    const __m256i h2 = _mm256_and_si256(bh, _mm256_set1_epi8(48));
    const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(-64)), 2);
    q[0] = _mm256_or_si256(_mm256_and_si256(b1, m15), h0);
    q[1] = _mm256_or_si256(_mm256_and_si256(b2, m15), h1);
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), h2);
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15), h3);
}

/* Scales k and k + 1 (of the 16 in sc), each over 8 int16 lanes: the 16
 * lanes of one 32-element part. One byte shuffle and a widening, as
 * llama.cpp's get_scale_shuffle (two broadcasts from memory and an insert
 * would be a third of the batch-1 kernel's instructions). */
static inline __m256i scale16(__m128i sc, int k) {
    const __m128i sh = _mm_set_epi8((char)(k + 1), (char)(k + 1), (char)(k + 1), (char)(k + 1), (char)(k + 1),
                                    (char)(k + 1), (char)(k + 1), (char)(k + 1), (char)k, (char)k, (char)k,
                                    (char)k, (char)k, (char)k, (char)k, (char)k);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, sh));
}

/* sum q * a - 32 * sum a per sub-block, as sum (q . a) with q unsigned
 * (maddubs) and the 32 * bsums part taken off once per block. */
void cpu_vdot_q6_K_avx2(int n, float *s, const void *w, const void *a) {
    const qblock_q6_K *x = w;
    const qblock_q8_K *y = a;
    const int nb = n / QBLOCK_K;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float d = y[i].d * f16(x[i].d);
        const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i scales_16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i q8sclsub = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6k_half(x[i].ql + 64 * h, x[i].qh + 32 * h, q);
            const int8_t *q8 = y[i].qs + 128 * h;
            for (int p = 0; p < 4; p++) {
                const __m256i p16 =
                    _mm256_maddubs_epi16(q[p], _mm256_loadu_si256((const __m256i *)(q8 + 32 * p)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale16(sc8, 8 * h + 2 * p), p16));
            }
        }
        sumi = _mm256_sub_epi32(sumi, q8sclsub);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum8(acc);
}

static inline __attribute__((always_inline)) void dotn_q6_K(int n, const int ncols, float *s, const void *w,
                                                            const void *a, size_t a_stride) {
    const qblock_q6_K *x = w;
    const int nb = n / QBLOCK_K;
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) acc[c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m256i scales_16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const float dx = f16(x[i].d);
        __m256i q[8], sc[8];
        q6k_half(x[i].ql, x[i].qh, q);
        q6k_half(x[i].ql + 64, x[i].qh + 32, q + 4);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        for (int p = 0; p < 8; p++) sc[p] = scale16(sc8, 2 * p);
        for (int c = 0; c < ncols; c++) {
            const qblock_q8_K *y = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride) + i;
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y->bsums);
            __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(),
                                            _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5));
            for (int p = 0; p < 8; p++) {
                const __m256i p16 =
                    _mm256_maddubs_epi16(q[p], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * p)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc[p], p16));
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y->d), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) s[c] = hsum8(acc[c]);
}

/* ncols a constant in each case: the accumulators then live in registers
 * (indexed by a variable count they went to the stack at every block). */
void cpu_vdotn_q6_K_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    switch (ncols) {
    case 1: dotn_q6_K(n, 1, s, w, a, a_stride); break;
    case 2: dotn_q6_K(n, 2, s, w, a, a_stride); break;
    case 3: dotn_q6_K(n, 3, s, w, a, a_stride); break;
    default: dotn_q6_K(n, 4, s, w, a, a_stride); break;
    }
}

/* ------------------------------------ two weight rows x columns (dot2) */

/* Q8_0 or Q4_0 (t, as vdot_32), two weight rows x ncols columns. Here the
 * types differ in more than w32_qs; both branches on t are resolved at
 * compile time:
 * - Q4_0 against q8_0 without the sign trick: the nibbles q (0..15) stay
 *   unsigned for maddubs, and sum (q - 8) y = sum q y - 8 sum y, the
 *   second term one maddubs per activation block shared by both rows.
 *   Pair sums stay within int16 (15 * 127 * 2 = 3810; minus 8 * 127 * 2
 *   still inside).
 * - Q8_0: signed weights, so the sign trick stays, its |w| shared by the
 *   columns and each activation load by both rows. */
static inline __attribute__((always_inline)) void dot2_32(const int t, int n, const int ncols, float *s,
                                                          const void *w, size_t w_stride, const void *a,
                                                          size_t a_stride) {
    const void *x0 = w, *x1 = (const char *)w + w_stride;
    const int nb = n / QBLOCK_32;
    const __m256i ones = _mm256_set1_epi16(1), eight = _mm256_set1_epi8(8);
    __m256 acc0[CPU_QDOT_NCOLS], acc1[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) acc0[c] = acc1[c] = _mm256_setzero_ps();
    /* the per-block float scales dx * dy of 8 blocks from i on, for both
     * rows and ncols columns, stored so that the inner loop broadcasts each
     * from memory (a load, not a shuffle: the shuffle port is the maddubs
     * one) */
    _Alignas(32) float dd[2][CPU_QDOT_NCOLS][8];
    for (int i = 0; i < nb; i += 8) {
        const int kn = nb - i < 8 ? nb - i : 8;
        if (kn == 8) {
            const __m256 dx0 = scales8(w32_blk(t, x0, i), w32_bytes(t));
            const __m256 dx1 = scales8(w32_blk(t, x1, i), w32_bytes(t));
            for (int c = 0; c < ncols; c++) {
                const __m256 dy =
                    scales8(&((const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride) + i)->d,
                            sizeof(qblock_q8_0));
                _mm256_store_ps(dd[0][c], _mm256_mul_ps(dx0, dy));
                _mm256_store_ps(dd[1][c], _mm256_mul_ps(dx1, dy));
            }
        } else
            for (int c = 0; c < ncols; c++)
                for (int k = 0; k < kn; k++) {
                    const qblock_q8_0 *y =
                        (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride) + i + k;
                    dd[0][c][k] = w32_d(t, x0, i + k) * f16(y->d);
                    dd[1][c][k] = w32_d(t, x1, i + k) * f16(y->d);
                }
        for (int k = 0; k < kn; k++) {
            /* u: maddubs's unsigned operand (Q4_0's nibbles, Q8_0's |w|);
             * q: Q8_0's signed bytes, whose signs go to the activations */
            __m256i q0, q1, u0, u1;
            if (t == W32_Q4_0) {
                u0 = q0 = nibbles32(((const qblock_q4_0 *)w32_blk(t, x0, i + k))->qs);
                u1 = q1 = nibbles32(((const qblock_q4_0 *)w32_blk(t, x1, i + k))->qs);
            } else {
                q0 = w32_qs(t, x0, i + k);
                q1 = w32_qs(t, x1, i + k);
                u0 = _mm256_sign_epi8(q0, q0);
                u1 = _mm256_sign_epi8(q1, q1);
            }
            for (int c = 0; c < ncols; c++) {
                const qblock_q8_0 *y = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride) + i + k;
                const __m256i yv = _mm256_loadu_si256((const __m256i *)y->qs);
                __m256i p0, p1;
                if (t == W32_Q4_0) {
                    const __m256i corr = _mm256_maddubs_epi16(eight, yv);
                    p0 = _mm256_madd_epi16(ones, _mm256_sub_epi16(_mm256_maddubs_epi16(u0, yv), corr));
                    p1 = _mm256_madd_epi16(ones, _mm256_sub_epi16(_mm256_maddubs_epi16(u1, yv), corr));
                } else {
                    p0 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(u0, _mm256_sign_epi8(yv, q0)));
                    p1 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(u1, _mm256_sign_epi8(yv, q1)));
                }
                acc0[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[0][c][k]), _mm256_cvtepi32_ps(p0), acc0[c]);
                acc1[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[1][c][k]), _mm256_cvtepi32_ps(p1), acc1[c]);
            }
        }
    }
    for (int c = 0; c < ncols; c++) {
        s[c] = hsum8(acc0[c]);
        s[CPU_QDOT_NCOLS + c] = hsum8(acc1[c]);
    }
}

static inline __attribute__((always_inline)) void dot2_q4_0(int n, const int ncols, float *s, const void *w,
                                                            size_t w_stride, const void *a, size_t a_stride) {
    dot2_32(W32_Q4_0, n, ncols, s, w, w_stride, a, a_stride);
}
static inline __attribute__((always_inline)) void dot2_q8_0(int n, const int ncols, float *s, const void *w,
                                                            size_t w_stride, const void *a, size_t a_stride) {
    dot2_32(W32_Q8_0, n, ncols, s, w, w_stride, a, a_stride);
}

/* Q4_K: a block walked in four 64-element parts, each part's nibbles of
 * both rows unpacked once for all columns and each activation load shared
 * by the two rows; integer sums per row and column to the block's end.
 * (Unpacking whole blocks first, as dotn_q4_K does, spills 16 vectors to
 * the stack and runs slower than one row at a time.) */
static inline __attribute__((always_inline)) void dot2_q4_K(int n, const int ncols, float *s, const void *w,
                                                            size_t w_stride, const void *a, size_t a_stride) {
    const qblock_q4_K *x0 = w, *x1 = (const qblock_q4_K *)((const char *)w + w_stride);
    const int nb = n / QBLOCK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc0[CPU_QDOT_NCOLS], acc1[CPU_QDOT_NCOLS];
    __m128 accm0[CPU_QDOT_NCOLS], accm1[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++)
        acc0[c] = acc1[c] = _mm256_setzero_ps(), accm0[c] = accm1[c] = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        uint32_t u0[4], u1[4];
        q4k_unpack(x0[i].scales, u0);
        q4k_unpack(x1[i].scales, u1);
        const __m256i ms0 =
            _mm256_cvtepu8_epi16(_mm_set_epi32((int)u0[3], (int)u0[2], (int)u0[1], (int)u0[0]));
        const __m256i ms1 =
            _mm256_cvtepu8_epi16(_mm_set_epi32((int)u1[3], (int)u1[2], (int)u1[1], (int)u1[0]));
        const __m128i sc0 = _mm256_extracti128_si256(ms0, 0), sc1 = _mm256_extracti128_si256(ms1, 0);
        const __m256i scales0 = _mm256_insertf128_si256(_mm256_castsi128_si256(sc0), sc0, 1);
        const __m256i scales1 = _mm256_insertf128_si256(_mm256_castsi128_si256(sc1), sc1, 1);
        __m256i sumi0[CPU_QDOT_NCOLS], sumi1[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) sumi0[c] = sumi1[c] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i b0 = _mm256_loadu_si256((const __m256i *)(x0[i].qs + 32 * j));
            const __m256i b1 = _mm256_loadu_si256((const __m256i *)(x1[i].qs + 32 * j));
            const __m256i l0 = _mm256_and_si256(b0, m4), h0 = _mm256_and_si256(_mm256_srli_epi16(b0, 4), m4);
            const __m256i l1 = _mm256_and_si256(b1, m4), h1 = _mm256_and_si256(_mm256_srli_epi16(b1, 4), m4);
            const __m256i s0l = scale_pair(scales0, 2 * j), s0h = scale_pair(scales0, 2 * j + 1);
            const __m256i s1l = scale_pair(scales1, 2 * j), s1h = scale_pair(scales1, 2 * j + 1);
            for (int c = 0; c < ncols; c++) {
                const qblock_q8_K *y = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride) + i;
                const __m256i q8l = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j));
                const __m256i q8h = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * j + 32));
                sumi0[c] = _mm256_add_epi32(
                    sumi0[c], _mm256_add_epi32(_mm256_madd_epi16(s0l, _mm256_maddubs_epi16(l0, q8l)),
                                               _mm256_madd_epi16(s0h, _mm256_maddubs_epi16(h0, q8h))));
                sumi1[c] = _mm256_add_epi32(
                    sumi1[c], _mm256_add_epi32(_mm256_madd_epi16(s1l, _mm256_maddubs_epi16(l1, q8l)),
                                               _mm256_madd_epi16(s1h, _mm256_maddubs_epi16(h1, q8h))));
            }
        }
        const __m128i mins0 = _mm256_extracti128_si256(ms0, 1), mins1 = _mm256_extracti128_si256(ms1, 1);
        const float dx0 = f16(x0[i].d), dx1 = f16(x1[i].d), mx0 = -f16(x0[i].dmin), mx1 = -f16(x1[i].dmin);
        for (int c = 0; c < ncols; c++) {
            const qblock_q8_K *y = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride) + i;
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y->bsums);
            const __m128i q8s =
                _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
            acc0[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx0 * y->d), _mm256_cvtepi32_ps(sumi0[c]), acc0[c]);
            acc1[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx1 * y->d), _mm256_cvtepi32_ps(sumi1[c]), acc1[c]);
            accm0[c] =
                _mm_fmadd_ps(_mm_set1_ps(mx0 * y->d), _mm_cvtepi32_ps(_mm_madd_epi16(mins0, q8s)), accm0[c]);
            accm1[c] =
                _mm_fmadd_ps(_mm_set1_ps(mx1 * y->d), _mm_cvtepi32_ps(_mm_madd_epi16(mins1, q8s)), accm1[c]);
        }
    }
    for (int c = 0; c < ncols; c++) {
        __m128 m = _mm_add_ps(accm0[c], _mm_movehl_ps(accm0[c], accm0[c]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        s[c] = hsum8(acc0[c]) + _mm_cvtss_f32(m);
        m = _mm_add_ps(accm1[c], _mm_movehl_ps(accm1[c], accm1[c]));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        s[CPU_QDOT_NCOLS + c] = hsum8(acc1[c]) + _mm_cvtss_f32(m);
    }
}

#define DOT2_ENTRY(t)                                                                                    \
    void cpu_vdot2_##t##_avx2(int n, int ncols, float *s, const void *w, size_t w_stride, const void *a, \
                              size_t a_stride) {                                                         \
        switch (ncols) { /* constants: the accumulators stay in registers */                             \
        case 1: dot2_##t(n, 1, s, w, w_stride, a, a_stride); break;                                      \
        case 2: dot2_##t(n, 2, s, w, w_stride, a, a_stride); break;                                      \
        case 3: dot2_##t(n, 3, s, w, w_stride, a, a_stride); break;                                      \
        default: dot2_##t(n, 4, s, w, w_stride, a, a_stride); break;                                     \
        }                                                                                                \
    }
DOT2_ENTRY(q4_0)
DOT2_ENTRY(q8_0)
DOT2_ENTRY(q4_K)

/* ------------------------------------- Q4_0, 8 interleaved rows (dot8) */

/* One row a 32-bit lane (qblock_q4_0x8): the 4 bytes of activation
 * elements 4h..4h+3 broadcast to all lanes (a load, not a shuffle) meet
 * each row's 4 nibbles of them in one maddubs; a block's 8 maddubs are
 * summed in int16 (8 x 2 x 15 x 127 = 30480 fits), made int32 once, and the
 * -8 of the nibbles taken off as 8 sum(y), which the q8_0s row carries.
 * Per block and column that is 8 maddubs, 8 adds, one madd, one conversion
 * and one multiply-add for all 8 rows, where dot2 spends about 6 a row. */
static inline __attribute__((always_inline)) void dot8_q4_0(int n, const int ncols, float *s, const void *w,
                                                            const void *a, size_t a_stride) {
    const qblock_q4_0x8 *x = w;
    const int nb = n / QBLOCK_32;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
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
        __m256i p[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) p[c] = _mm256_setzero_si256();
        for (int h = 0; h < 4; h++) {
            const __m256i b = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m256i lo = _mm256_and_si256(b, m4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
            for (int c = 0; c < ncols; c++) {
                int32_t l4, h4;
                memcpy(&l4, y[c][i].qs + 4 * h, 4);
                memcpy(&h4, y[c][i].qs + 16 + 4 * h, 4);
                p[c] =
                    _mm256_add_epi16(p[c], _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(l4)),
                                                            _mm256_maddubs_epi16(hi, _mm256_set1_epi32(h4))));
            }
        }
        for (int c = 0; c < ncols; c++) {
            const __m256i si =
                _mm256_sub_epi32(_mm256_madd_epi16(p[c], ones), _mm256_set1_epi32(8 * ys[c][i]));
            const __m256 d = _mm256_mul_ps(dx, _mm256_set1_ps(f16(y[c][i].d)));
            acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(si), acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

/* cpu_vdot8_<type>_avx2: dot8_<type> with ncols a constant, so that its
 * accumulators stay in registers. */
#define X8_ENTRY(type)                                                                     \
    void cpu_vdot8_##type##_avx2(int n, int ncols, float *s, const void *w, const void *a, \
                                 size_t a_stride) {                                        \
        switch (ncols) {                                                                   \
        case 1: dot8_##type(n, 1, s, w, a, a_stride); break;                               \
        case 2: dot8_##type(n, 2, s, w, a, a_stride); break;                               \
        case 3: dot8_##type(n, 3, s, w, a, a_stride); break;                               \
        default: dot8_##type(n, 4, s, w, a, a_stride); break;                              \
        }                                                                                  \
    }

X8_ENTRY(q4_0)

/* MXFP4, 8 interleaved rows (qblock_mxfp4x8, Q4_0's nibble layout): each
 * nibble looked up as its level + 12 (x8_mxfp4_u, one shuffle for the 8
 * rows), then Q4_0's products. A maddubs pair reaches 2 x 24 x 127, so the
 * int16 sums take two of the four groups (4 x 6096 fits) before a madd
 * makes them int32; 12 sum(y) comes off with the block's float step. */
static inline __attribute__((always_inline)) void dot8_mxfp4(int n, const int ncols, float *s, const void *w,
                                                             const void *a, size_t a_stride) {
    const qblock_mxfp4x8 *x = w;
    const int nb = n / QBLOCK_32;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x8_mxfp4_u));
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
        __m256i p[CPU_QDOT_NCOLS], p16[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) p[c] = p16[c] = _mm256_setzero_si256();
        for (int h = 0; h < 4; h++) {
            const __m256i b = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(b, m4));
            const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(b, 4), m4));
            for (int c = 0; c < ncols; c++) {
                int32_t l4, h4;
                memcpy(&l4, y[c][i].qs + 4 * h, 4);
                memcpy(&h4, y[c][i].qs + 16 + 4 * h, 4);
                p16[c] = _mm256_add_epi16(p16[c],
                                          _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(l4)),
                                                           _mm256_maddubs_epi16(hi, _mm256_set1_epi32(h4))));
                if (h % 2) {
                    p[c] = _mm256_add_epi32(p[c], _mm256_madd_epi16(p16[c], ones));
                    p16[c] = _mm256_setzero_si256();
                }
            }
        }
        for (int c = 0; c < ncols; c++) acc[c] = x8_mxfp4_tail(acc[c], dx, f16(y[c][i].d), p[c], ys[c][i]);
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

X8_ENTRY(mxfp4)

/* Q8_0, 8 interleaved rows: signed weights, so the sign trick per 4
 * elements (|w| shared by the columns); a maddubs pair reaches 2 x 127 x
 * 127, so each is made int32 at once (no int16 sums as Q4_0's). */
static inline __attribute__((always_inline)) void dot8_q8_0(int n, const int ncols, float *s, const void *w,
                                                            const void *a, size_t a_stride) {
    const qblock_q8_0x8 *x = w;
    const int nb = n / QBLOCK_32;
    const __m256i ones = _mm256_set1_epi16(1);
    const qblock_q8_0 *y[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_0 *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        for (int l = 0; l < 5; l++) x8_prefetch((const char *)&x[i] + 64 * l); /* the block's 272 bytes */
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].d));
        __m256i p[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) p[c] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * g));
            const __m256i u = _mm256_sign_epi8(q, q);
            for (int c = 0; c < ncols; c++) {
                int32_t y4;
                memcpy(&y4, y[c][i].qs + 4 * g, 4);
                const __m256i sy = _mm256_sign_epi8(_mm256_set1_epi32(y4), q);
                p[c] = _mm256_add_epi32(p[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u, sy), ones));
            }
        }
        for (int c = 0; c < ncols; c++) {
            const __m256 d = _mm256_mul_ps(dx, _mm256_set1_ps(f16(y[c][i].d)));
            acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p[c]), acc[c]);
        }
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

X8_ENTRY(q8_0)

/* Q4_K, 8 interleaved rows (qblock_q4_Kx8): per sub-block of 32, the 8
 * maddubs of the rows' nibbles with the broadcast activations are summed in
 * int16 (as Q4_0's), then one madd with the rows' scales (each lane's
 * pair (sc, sc)) makes them int32; the mins meet the activations' 32-sums
 * (pairs of bsums) in four madds a block. About half the instructions of
 * eight single-row products, and no scale unpacking in the loop. */
static inline __attribute__((always_inline)) void dot8_q4_K(int n, const int ncols, float *s, const void *w,
                                                            const void *a, size_t a_stride) {
    const qblock_q4_Kx8 *x = w;
    const int nb = n / QBLOCK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const qblock_q8_K *y[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_K *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        __m256i sumi[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m128i s0 = _mm_loadl_epi64((const __m128i *)x[i].sc[2 * j]);
            const __m128i s1 = _mm_loadl_epi64((const __m128i *)x[i].sc[2 * j + 1]);
            const __m256i scl = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s0, s0));
            const __m256i sch = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s1, s1));
            __m256i pl[CPU_QDOT_NCOLS], ph[CPU_QDOT_NCOLS];
            for (int c = 0; c < CPU_QDOT_NCOLS; c++) pl[c] = ph[c] = _mm256_setzero_si256();
            for (int l = 0; l < 4; l++) x8_prefetch(x[i].qs + 256 * j + 64 * l); /* this part's 256 bytes */
            for (int h = 0; h < 8; h++) {
                const __m256i b = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * (8 * j + h)));
                const __m256i lo = _mm256_and_si256(b, m4),
                              hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
                for (int c = 0; c < ncols; c++) {
                    int32_t l4, h4;
                    memcpy(&l4, y[c][i].qs + 64 * j + 4 * h, 4);
                    memcpy(&h4, y[c][i].qs + 64 * j + 32 + 4 * h, 4);
                    pl[c] = _mm256_add_epi16(pl[c], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(l4)));
                    ph[c] = _mm256_add_epi16(ph[c], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(h4)));
                }
            }
            for (int c = 0; c < ncols; c++)
                sumi[c] = _mm256_add_epi32(
                    sumi[c], _mm256_add_epi32(_mm256_madd_epi16(pl[c], scl), _mm256_madd_epi16(ph[c], sch)));
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].d));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].dmin));
        for (int c = 0; c < ncols; c++) acc[c] = x8_q4_K_tail(acc[c], &x[i], dx, dm, &y[c][i], sumi[c]);
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

X8_ENTRY(q4_K)

/* Q6_K, 8 interleaved rows (qblock_q6_Kx8): a sub-block's 16 quants of the
 * 8 rows are 4 vectors of 8 rows x 4 elements, unpacked from 3 loads (3
 * masks for the low 6 bits of each byte, the fourth vector from the 3
 * bytes' top bit pairs) and met by 4 broadcast activation words in 4
 * maddubs; each pair of those is summed in int16 (2 x 2 x 63 x 127 =
 * 32004 fits) and made int32 by one madd with the rows' scale. The -32 of
 * the quants is taken off once a block as 32 sum_s sc_s bsums_s, one madd
 * a pair of sub-blocks. Where the single-row kernel unpacks, shuffles its
 * scales and converts per row, here it is once for 8. */
static inline __attribute__((always_inline)) void dot8_q6_K(int n, const int ncols, float *s, const void *w,
                                                            const void *a, size_t a_stride) {
    const qblock_q6_Kx8 *x = w;
    const int nb = n / QBLOCK_K;
    const __m256i m6 = _mm256_set1_epi8(63), top = _mm256_set1_epi8((char)0xc0);
    /* in each row's dword (int16 scales of sub-blocks 2p, 2p + 1): the first doubled, the second doubled */
    const __m256i dup0 = _mm256_set_epi8(13, 12, 13, 12, 9, 8, 9, 8, 5, 4, 5, 4, 1, 0, 1, 0, 13, 12, 13, 12,
                                         9, 8, 9, 8, 5, 4, 5, 4, 1, 0, 1, 0);
    const __m256i dup1 = _mm256_set_epi8(15, 14, 15, 14, 11, 10, 11, 10, 7, 6, 7, 6, 3, 2, 3, 2, 15, 14, 15,
                                         14, 11, 10, 11, 10, 7, 6, 7, 6, 3, 2, 3, 2);
    const qblock_q8_K *y[CPU_QDOT_NCOLS];
    __m256 acc[CPU_QDOT_NCOLS];
    for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const qblock_q8_K *)((const char *)a + (size_t)(c < ncols ? c : 0) * a_stride);
    }
    for (int i = 0; i < nb; i++) {
        __m256i sumi[CPU_QDOT_NCOLS], off[CPU_QDOT_NCOLS];
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) sumi[c] = off[c] = _mm256_setzero_si256();
        for (int p = 0; p < 8; p++) {
            const __m256i sp = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].sc[p]));
            for (int c = 0; c < ncols; c++) {
                int32_t b2;
                memcpy(&b2, y[c][i].bsums + 2 * p, 4);
                off[c] = _mm256_add_epi32(off[c], _mm256_madd_epi16(sp, _mm256_set1_epi32(b2)));
            }
            for (int k = 0; k < 2; k++) {
                const int t = 2 * p + k;
                const __m256i sct = _mm256_shuffle_epi8(sp, k ? dup1 : dup0);
                const uint8_t *qp = x[i].qs + 96 * t;
                if (k == 0) /* the 192 bytes of quants of a sub-block pair */
                    for (int l = 0; l < 3; l++) x8_prefetch(qp + 64 * l);
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)qp);
                const __m256i b1 = _mm256_loadu_si256((const __m256i *)(qp + 32));
                const __m256i b2 = _mm256_loadu_si256((const __m256i *)(qp + 64));
                const __m256i q0 = _mm256_and_si256(b0, m6), q1 = _mm256_and_si256(b1, m6),
                              q2 = _mm256_and_si256(b2, m6);
                const __m256i q3 =
                    _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(b0, top), 6),
                                                    _mm256_srli_epi16(_mm256_and_si256(b1, top), 4)),
                                    _mm256_srli_epi16(_mm256_and_si256(b2, top), 2));
                for (int c = 0; c < ncols; c++) {
                    const int8_t *a8 = y[c][i].qs + 16 * t;
                    int32_t a0, a1, a2, a3;
                    memcpy(&a0, a8, 4);
                    memcpy(&a1, a8 + 4, 4);
                    memcpy(&a2, a8 + 8, 4);
                    memcpy(&a3, a8 + 12, 4);
                    const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(q0, _mm256_set1_epi32(a0)),
                                                        _mm256_maddubs_epi16(q1, _mm256_set1_epi32(a1)));
                    const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(q2, _mm256_set1_epi32(a2)),
                                                        _mm256_maddubs_epi16(q3, _mm256_set1_epi32(a3)));
                    sumi[c] = _mm256_add_epi32(
                        sumi[c], _mm256_add_epi32(_mm256_madd_epi16(p0, sct), _mm256_madd_epi16(p1, sct)));
                }
            }
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x[i].d));
        for (int c = 0; c < ncols; c++) acc[c] = x8_q6_K_tail(acc[c], dx, y[c][i].d, sumi[c], off[c]);
    }
    for (int c = 0; c < ncols; c++) _mm256_storeu_ps(s + 8 * c, acc[c]);
}

X8_ENTRY(q6_K)

#endif
