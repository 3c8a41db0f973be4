/* cpu_attn_avx2.c - one token's attention over f32 KV blocks (cpu_attn.h), with AVX2 + FMA
 * (built with its flags, engine/CMakeLists.txt; cpu_attn.c calls it only
 * where cpu_features.h found AVX2).
 *
 * The passes of cpu_attn_avx512.c at half the width:
 *   scores: 8 positions at a time (across the blocks' bounds) and each
 *           head, the 8 partial products (head_dim / 8 FMAs each, the
 *           query vector loaded once for the 8) go through one
 *           transposing add tree into a vector of 8 scores;
 *   softmax: per head, vectorized (vexp256_ps);
 *   values: output accumulators in registers (12 of the 16 vector
 *           registers: a group of heads, or half of a head of 128) while
 *           the V rows stream past in order.
 * Why: the general code's score a row_dot with its own horizontal sum,
 * and its values added through memory, takes 13 % of a batch-1 decode step
 * on the stories110M shape (perf, one thread, 144 positions). */
#include "cpu_attn.h"
#include "cpu_attn_walk.h"
#include "cpu_prefetch.h"
#include "cpu_vexp.h"

#include <math.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define HV_MAX 16  /* head_dim / 8 at most: head_dim <= 128 */
#define ACC_MAX 12 /* output vectors kept in registers in the values pass */

int attn_f32_supported_avx2(const attn_shape *s) {
    return s->head_dim > 0 && s->head_dim % 16 == 0 && s->head_dim / 8 <= HV_MAX && s->gqa > 0 &&
           s->n_heads > 0 && s->n_heads % s->gqa == 0 && s->kv_dim == s->n_heads / s->gqa * s->head_dim &&
           s->block_size > 0;
}

/* Lane i of the result = the sum of p[i]'s 8 lanes: two levels of hadd
 * (pairs, then quadruples, within each 128-bit half), then the halves of
 * positions 0-3 and 4-7 crossed and added. */
static inline __m256 hsum8(const __m256 *p) {
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(p[4], p[5]), _mm256_hadd_ps(p[6], p[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

/* The scores pass, HV = head_dim / 8 a constant once inlined. The
 * positions go 8 at a time across the blocks' bounds (cpu_attn_walk.h),
 * and the rows 8 positions ahead are asked for, this thread's heads'
 * columns of them, a part each head. */
static inline __attribute__((always_inline)) void scores(const attn_shape *s, const float *q,
                                                         const float *const *blk, const int *rows, int n_blk,
                                                         int h0, int h1, float *att, size_t stride,
                                                         const int HV) {
    const int hd = s->head_dim, H = h1 - h0;
    const size_t kvd = (size_t)s->kv_dim;
    const __m256 vscale = _mm256_set1_ps(sqrtf((float)hd));
    size_t c0, cb;
    attn_head_cols(s, h0, h1, &c0, &cb);
    kv_walk w = kv_walk_start(blk, rows, n_blk), ahead = w;
    for (int i = 0; i < 8; i++) kv_walk_next(&ahead, kvd, 0);
    for (int n = 0, c = 8; c == 8; n += c) {
        const float *k[8], *pf[8];
        for (c = 0; c < 8; c++)
            if (!(k[c] = kv_walk_next(&w, kvd, 0))) break;
        if (!c) break;
        for (int t = 0; t < 8; t++) pf[t] = kv_walk_next(&ahead, kvd, 0);
        for (int h = h0; h < h1; h++) {
            const float *qh = q + (size_t)h * hd;
            const size_t col = (size_t)(h / s->gqa) * hd;
            /* a few lines of each row ahead a head (cpu_prefetch.h) */
            for (int t = 0; t < 8; t++)
                if (pf[t]) prefetch_part((const char *)(pf[t] + c0), cb, h - h0, H);
            __m256 p[8];
            for (int t = 0; t < 8; t++) p[t] = _mm256_setzero_ps();
            if (c == 8) {
                for (int j = 0; j < HV; j++) {
                    const __m256 qv = _mm256_loadu_ps(qh + 8 * j);
                    for (int t = 0; t < 8; t++)
                        p[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[t] + col + 8 * j), p[t]);
                }
            } else { /* the last positions: no rows past them */
                for (int j = 0; j < HV; j++) {
                    const __m256 qv = _mm256_loadu_ps(qh + 8 * j);
                    for (int t = 0; t < c; t++)
                        p[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[t] + col + 8 * j), p[t]);
                }
            }
            const __m256 sc = _mm256_div_ps(hsum8(p), vscale);
            float *a = att + (size_t)h * stride + n;
            if (c == 8) {
                _mm256_storeu_ps(a, sc);
            } else {
                float tmp[8];
                _mm256_storeu_ps(tmp, sc);
                for (int t = 0; t < c; t++) a[t] = tmp[t];
            }
        }
    }
}

/* The mask of the first r lanes (0 <= r <= 8). */
static inline __m256i lanes(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hmax8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

static inline float hadd8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* Heads [h0, h1)'s scores [0, n) into probabilities; the tail masked, so
 * every position goes through the same code. sinks (NULL: none): each
 * head's sink logit joins the max and the sum (cpu_attn.h). */
static void softmax(float *att, size_t stride, int h0, int h1, int n, const float *sinks) {
    for (int h = h0; h < h1; h++) {
        float *a = att + (size_t)h * stride;
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int i = 0; i < n; i += 8) {
            const __m256i m = lanes(n - i);
            const __m256 x = _mm256_blendv_ps(mx, _mm256_maskload_ps(a + i, m), _mm256_castsi256_ps(m));
            mx = _mm256_max_ps(mx, x);
        }
        float mv = hmax8(mx);
        if (sinks && sinks[h] > mv) mv = sinks[h];
        const __m256 vmx = _mm256_set1_ps(mv);
        __m256 sum = _mm256_setzero_ps();
        for (int i = 0; i < n; i += 8) {
            const __m256i m = lanes(n - i);
            const __m256 e = _mm256_and_ps(vexp256_ps(_mm256_sub_ps(_mm256_maskload_ps(a + i, m), vmx)),
                                           _mm256_castsi256_ps(m));
            _mm256_maskstore_ps(a + i, m, e);
            sum = _mm256_add_ps(sum, e);
        }
        const __m256 vs = _mm256_set1_ps(hadd8(sum) + (sinks ? expf(sinks[h] - mv) : 0.0f));
        for (int i = 0; i < n; i += 8) {
            const __m256i m = lanes(n - i);
            _mm256_maskstore_ps(a + i, m, _mm256_div_ps(_mm256_maskload_ps(a + i, m), vs));
        }
    }
}

/* The values pass, HV constant once inlined. The V rows go past in chunks
 * of 8 (24 KiB on the stories110M shape: in L1); for each chunk, heads in
 * groups of G whose G * JC output vectors fit in registers (JC = HV, or
 * half of it past ACC_MAX) are loaded from out, summed over the chunk's
 * rows and stored back. Each output is still summed over positions in
 * order. Why chunks: the whole context a group at a time reads every V
 * row once a group, 12 times a token for 12 heads of 64 here, and at 544
 * positions the rows do not stay in the caches between groups: 7 % slower
 * than the general code (measured). */
static inline __attribute__((always_inline)) void values(const attn_shape *s, const float *const *blk,
                                                         const int *rows, int n_blk, int hb, int he,
                                                         const float *att, size_t stride, float *out,
                                                         const int HV) {
    const int hd = s->head_dim, kvd = s->kv_dim, bs = s->block_size;
    const int G = HV <= ACC_MAX ? ACC_MAX / HV : 1, JC = HV <= ACC_MAX ? HV : (HV + 1) / 2;
    for (int h = hb; h < he; h++)
        for (int j = 0; j < HV; j++) _mm256_storeu_ps(out + (size_t)h * hd + 8 * j, _mm256_setzero_ps());
    /* the V rows two chunks ahead, this thread's columns, a part each group of heads */
    const size_t voff = (size_t)bs * kvd;
    size_t c0, cb;
    attn_head_cols(s, hb, he, &c0, &cb);
    kv_walk ahead = kv_walk_start(blk, rows, n_blk);
    for (int i = 0; i < 16; i++) kv_walk_next(&ahead, (size_t)kvd, voff);
    const int groups = (he - hb + G - 1) / G;
    int n = 0;
    for (int b = 0; b < n_blk; b++) {
        const float *v = blk[b] + voff;
        for (int t0 = 0; t0 < rows[b]; t0 += 8) {
            const int c = rows[b] - t0 < 8 ? rows[b] - t0 : 8;
            const float *pf[8];
            for (int t = 0; t < c; t++) pf[t] = kv_walk_next(&ahead, (size_t)kvd, voff);
            for (int h0 = hb; h0 < he; h0 += G) {
                const int g = he - h0 < G ? he - h0 : G;
                for (int j0 = 0; j0 < HV; j0 += JC) {
                    const int jn = HV - j0 < JC ? HV - j0 : JC;
                    __m256 acc[ACC_MAX];
                    for (int hh = 0; hh < G && hh < g; hh++)
                        for (int j = 0; j < JC && j < jn; j++)
                            acc[hh * JC + j] = _mm256_loadu_ps(out + (size_t)(h0 + hh) * hd + 8 * (j0 + j));
                    for (int t = 0; t < c; t++) {
                        if (pf[t] && j0 == 0)
                            prefetch_part((const char *)(pf[t] + c0), cb, (h0 - hb) / G, groups);
                        const float *vt = v + (size_t)(t0 + t) * kvd;
                        for (int hh = 0; hh < G && hh < g; hh++) {
                            const __m256 a = _mm256_set1_ps(att[(size_t)(h0 + hh) * stride + n + t]);
                            const float *vh = vt + (size_t)((h0 + hh) / s->gqa) * hd + 8 * j0;
                            for (int j = 0; j < JC && j < jn; j++)
                                acc[hh * JC + j] =
                                    _mm256_fmadd_ps(a, _mm256_loadu_ps(vh + 8 * j), acc[hh * JC + j]);
                        }
                    }
                    for (int hh = 0; hh < G && hh < g; hh++)
                        for (int j = 0; j < JC && j < jn; j++)
                            _mm256_storeu_ps(out + (size_t)(h0 + hh) * hd + 8 * (j0 + j), acc[hh * JC + j]);
                }
            }
            n += c;
        }
    }
}

int attn_f32_avx2(const attn_shape *s, const float *q, const float *const *blk, const int *rows, int n_blk,
                  int h0, int h1, float *att, size_t att_stride, float *out, float *mass) {
    if (!attn_f32_supported_avx2(s) || !attn_args_ok(s, rows, n_blk, h0, h1, att_stride)) return -1;
    int n = 0;
    for (int b = 0; b < n_blk; b++) n += rows[b];
#define CASE(hv)                                                       \
    case hv:                                                           \
        scores(s, q, blk, rows, n_blk, h0, h1, att, att_stride, hv);   \
        softmax(att, att_stride, h0, h1, n, s->sinks);                 \
        values(s, blk, rows, n_blk, h0, h1, att, att_stride, out, hv); \
        break;
    switch (s->head_dim / 8) {
        CASE(2) CASE(4) CASE(6) CASE(8) CASE(10) CASE(12) CASE(14) CASE(16) default : return -1;
    }
#undef CASE
    if (mass) attn_block_mass(att + (size_t)h0 * att_stride, att_stride, h1 - h0, rows, n_blk, mass);
    return 0;
}

#endif
