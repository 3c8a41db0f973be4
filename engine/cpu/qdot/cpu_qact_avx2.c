/* cpu_qact_avx2.c - cpu_qact.c's q8_K, q8_0, q8_1 and q8_0s quantizers with AVX2
 * (built with its flags, engine/CMakeLists.txt; qact_row_isa calls them
 * only at CPU_ISA_AVX2 and up). The same bytes as the portable ones, which
 * test_cpu_qdot checks: the same float operations on each element (one
 * multiply, then ggml's rounding), only eight at a time.
 *
 * Why: the portable q8_K takes 2.3 us a row of 768 or 2048 (measured on a
 * Zen 5), serial work between the products (the other threads wait for
 * it), 48 times a step of the 110M shape: 7 % of a two-thread batch-1 step.
 *
 * A block holding a NaN or an infinity is the portable code's: there the
 * result depends on the elements' order (ggml's MAX keeps a NaN until the
 * next number), which eight lanes at a time do not keep. The build is ISO
 * C (-std=c11), so GCC contracts no multiply and add into an FMA. */
#include "cpu_qact.h"

#if defined(__AVX2__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

static inline float hmax8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* Whether any of the n floats at x (n a multiple of 8) is a NaN or an
 * infinity. */
static inline int any_nonfinite(const float *x, int n) {
    const __m256 big = _mm256_set1_ps(3.40282347e38f), sign = _mm256_set1_ps(-0.0f);
    __m256 bad = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8)
        bad = _mm256_or_ps(bad,
                           _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), big, _CMP_NLE_UQ));
    return _mm256_movemask_ps(bad) != 0;
}

/* The low bytes of 32 int32 lanes (a..d, in order), as the scalar code's
 * (int8_t) casts take them: masked, so the unsigned saturating packs keep
 * them exactly, then the packs' 128-bit interleave undone. */
static inline __m256i low_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i m = _mm256_set1_epi32(0xff);
    const __m256i ab = _mm256_packus_epi32(_mm256_and_si256(a, m), _mm256_and_si256(b, m));
    const __m256i cd = _mm256_packus_epi32(_mm256_and_si256(c, m), _mm256_and_si256(d, m));
    return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void qact_q8_K_avx2(const float *x, qblock_q8_K *y, int k) {
    if (k <= 0 || k % QBLOCK_K) return;
    const __m256 sign = _mm256_set1_ps(-0.0f), magic = _mm256_set1_ps(12582912.0f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff), half = _mm256_set1_epi32(0x00400000),
                  top = _mm256_set1_epi32(127);
    for (int i = 0; i < k / QBLOCK_K; i++, x += QBLOCK_K) {
        if (any_nonfinite(x, QBLOCK_K)) {
            qact_q8_K(x, &y[i], QBLOCK_K);
            continue;
        }
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < QBLOCK_K; j += 8)
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        const float amax = hmax8(mx);
        if (!amax) {
            y[i].d = 0.0f;
            memset(y[i].qs, 0, sizeof y[i].qs);
            memset(y[i].bsums, 0, sizeof y[i].bsums);
            continue;
        }
        /* the scalar's max: the first element of the largest |x| */
        float max = 0.0f;
        const __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < QBLOCK_K; j += 8) {
            const int m = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
            if (m) {
                max = x[j + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int j = 0; j < QBLOCK_K; j += 32) {
            __m256i v[4];
            for (int u = 0; u < 4; u++) {
                /* nearest_int(iscale * x): the float's mantissa after adding 1.5 * 2^23 */
                const __m256 f = _mm256_add_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * u)), magic);
                v[u] = _mm256_min_epi32(
                    _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(f), mant), half), top);
            }
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), low_bytes(v[0], v[1], v[2], v[3]));
        }
        for (int j = 0; j < QBLOCK_K / 16; j++) {
            const __m256i q = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(y[i].qs + 16 * j)));
            const __m256i s = _mm256_madd_epi16(q, _mm256_set1_epi16(1));
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
            y[i].bsums[j] = (int16_t)_mm_cvtsi128_si32(h);
        }
        y[i].d = 1.0f / iscale;
    }
}

/* One finite block of 32 as the portable q8_0 and q8_1 make it: *d the
 * scale, qs the quants. */
static inline void q8_block(const float *x, float *d, int8_t *qs) {
    const __m256 sign = _mm256_set1_ps(-0.0f), halfp = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < QBLOCK_32; j += 8)
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    *d = hmax8(mx) / 127.0f;
    const __m256 vid = _mm256_set1_ps(*d ? 1.0f / *d : 0.0f);
    __m256i v[4];
    for (int u = 0; u < 4; u++) {
        /* roundf: ties away from zero. The truncated part is exact, and so
         * is what is left of it */
        const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * u), vid);
        const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), halfp, _CMP_GE_OQ);
        const __m256 step = _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(sign, p)));
        v[u] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
    }
    _mm256_storeu_si256((__m256i *)qs, low_bytes(v[0], v[1], v[2], v[3]));
}

/* The sum of 32 int8. */
static inline int sum32(const int8_t *qs) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)qs);
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    return _mm_cvtsi128_si32(h);
}

void qact_q8_0_avx2(const float *x, qblock_q8_0 *y, int k) {
    if (k <= 0 || k % QBLOCK_32) return;
    for (int i = 0; i < k / QBLOCK_32; i++, x += QBLOCK_32) {
        if (any_nonfinite(x, QBLOCK_32)) {
            qact_q8_0(x, &y[i], QBLOCK_32);
            continue;
        }
        float d;
        q8_block(x, &d, y[i].qs);
        y[i].d = quant_f32_to_f16(d);
    }
}

void qact_q8_1_avx2(const float *x, qblock_q8_1 *y, int k) {
    if (k <= 0 || k % QBLOCK_32) return;
    for (int i = 0; i < k / QBLOCK_32; i++, x += QBLOCK_32) {
        if (any_nonfinite(x, QBLOCK_32)) {
            qact_q8_1(x, &y[i], QBLOCK_32);
            continue;
        }
        float d;
        q8_block(x, &d, y[i].qs);
        y[i].d = quant_f32_to_f16(d);
        y[i].s = quant_f32_to_f16((float)sum32(y[i].qs) * d);
    }
}

void qact_q8_0s_avx2(const float *x, void *y, int k) {
    if (k <= 0 || k % QBLOCK_32) return;
    const int nb = k / QBLOCK_32;
    qblock_q8_0 *b = y;
    int16_t *sums = (int16_t *)(b + nb);
    qact_q8_0_avx2(x, b, k);
    for (int i = 0; i < nb; i++) sums[i] = (int16_t)sum32(b[i].qs);
}

#endif
