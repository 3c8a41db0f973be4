/* cpu_attn_avx512.c - one token's attention over f32 KV blocks (cpu_attn.h), with AVX-512
 * (built with its flags, engine/CMakeLists.txt; cpu_attn.c calls it only
 * where cpu_features.h found AVX-512).
 *
 * Three passes, as in the general code, so the probabilities exist whole
 * (the policy reads each block's attention mass):
 *   scores: 16 positions at a time (across the blocks' bounds) and each
 *           head, the 16 partial products (head_dim / 16 FMAs each) go
 *           through one transposing add tree into a vector of 16 scores,
 *           each score's sum the same whichever slot it has;
 *   softmax: per head, vectorized, exp by range reduction and a degree-7
 *           polynomial (within 2 ulp of expf), divided by the sum as
 *           llama2.c divides;
 *   values: the V rows in chunks of 8; per chunk and group of heads, the
 *           outputs in registers while the chunk's rows stream past, so
 *           each output is summed over positions in the same order as the
 *           general code.
 * Measured on the stories15M shape at batch 32 (head size 48): the same
 * attention in about half the time of the general code. */
#include "cpu_attn.h"
#include "cpu_attn_walk.h"
#include "cpu_prefetch.h"
#include "cpu_vexp.h"

#include <math.h>

#if defined(__AVX512F__)
#include <immintrin.h>

#define HV_MAX 8   /* head_dim / 16 at most: head_dim <= 128 */
#define ACC_MAX 24 /* output vectors kept in registers in the values pass */

int attn_f32_supported_avx512(const attn_shape *s) {
    return s->head_dim > 0 && s->head_dim % 16 == 0 && s->head_dim / 16 <= HV_MAX && s->gqa > 0 &&
           s->n_heads > 0 && s->n_heads % s->gqa == 0 && s->kv_dim == s->n_heads / s->gqa * s->head_dim &&
           s->block_size > 0;
}

/* Lane i of the result = the sum of v[i]'s 16 lanes. Four levels: pairs of
 * vectors interleaved and added, then quadruples, then the 128-bit quarters
 * twice; 15 adds and 30 shuffles for 16 sums. */
static inline __m512 hsum16(const __m512 *v) {
    __m512 s[8], r[4], x[2];
    for (int i = 0; i < 8; i++)
        s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        r[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++)
        x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* The scores pass, HV = head_dim / 16 a constant once inlined. The
 * positions go 16 at a time across the blocks' bounds (cpu_attn_walk.h),
 * and the rows 16 positions ahead are asked for, this thread's heads'
 * columns of them, a part each head. */
static inline __attribute__((always_inline)) void scores(const attn_shape *s, const float *q,
                                                         const float *const *blk, const int *rows, int n_blk,
                                                         int h0, int h1, float *att, size_t stride,
                                                         const int HV) {
    const int hd = s->head_dim, H = h1 - h0;
    const size_t kvd = (size_t)s->kv_dim;
    const __m512 vscale = _mm512_set1_ps(sqrtf((float)hd));
    size_t c0, cb;
    attn_head_cols(s, h0, h1, &c0, &cb);
    kv_walk w = kv_walk_start(blk, rows, n_blk), ahead = w;
    for (int i = 0; i < 16; i++) kv_walk_next(&ahead, kvd, 0);
    for (int n = 0, c = 16; c == 16; n += c) {
        const float *k[16], *pf[16];
        for (c = 0; c < 16; c++)
            if (!(k[c] = kv_walk_next(&w, kvd, 0))) break;
        if (!c) break;
        for (int t = 0; t < 16; t++) pf[t] = kv_walk_next(&ahead, kvd, 0);
        for (int h = h0; h < h1; h++) {
            const float *qh = q + (size_t)h * hd;
            const size_t col = (size_t)(h / s->gqa) * hd;
            __m512 qv[HV_MAX], p[16];
            for (int j = 0; j < HV; j++) qv[j] = _mm512_loadu_ps(qh + 16 * j);
            for (int t = 0; t < 16; t++) {
                /* a few lines at a time: asked in bursts, the requests
                 * filled the miss buffers and the core waited on them */
                if (pf[t]) prefetch_part((const char *)(pf[t] + c0), cb, h - h0, H);
                __m512 a = _mm512_setzero_ps();
                if (t < c)
                    for (int j = 0; j < HV; j++)
                        a = _mm512_fmadd_ps(qv[j], _mm512_loadu_ps(k[t] + col + 16 * j), a);
                p[t] = a;
            }
            _mm512_mask_storeu_ps(att + (size_t)h * stride + n, (__mmask16)((1u << c) - 1),
                                  _mm512_div_ps(hsum16(p), vscale));
        }
    }
}

/* Heads [h0, h1)'s scores [0, n) into probabilities. sinks (NULL: none):
 * each head's sink logit joins the max and the sum (cpu_attn.h). */
static void softmax(float *att, size_t stride, int h0, int h1, int n, const float *sinks) {
    for (int h = h0; h < h1; h++) {
        float *a = att + (size_t)h * stride;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int i = 0; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, a + i));
        }
        float mv = _mm512_reduce_max_ps(mx);
        if (sinks && sinks[h] > mv) mv = sinks[h];
        const __m512 vmx = _mm512_set1_ps(mv);
        __m512 sum = _mm512_setzero_ps();
        for (int i = 0; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            __m512 e = vexp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i), vmx));
            _mm512_mask_storeu_ps(a + i, m, e);
            sum = _mm512_mask_add_ps(sum, m, sum, e);
        }
        const __m512 vs = _mm512_set1_ps(_mm512_reduce_add_ps(sum) + (sinks ? expf(sinks[h] - mv) : 0.0f));
        for (int i = 0; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            _mm512_mask_storeu_ps(a + i, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, a + i), vs));
        }
    }
}

/* The values pass, HV constant once inlined. The V rows go past in chunks
 * of VCHUNK; for each chunk, heads in groups of G whose G * HV output
 * vectors fit in registers are loaded from out, summed over the chunk's
 * rows and stored back, so each output is still one chain of FMAs over the
 * positions in order (the same bits as a group's whole-context pass). Why
 * chunks: a whole-context pass a group reads every V row once a group
 * (twice a token for 12 heads of 64, 11 times for 32 heads of 128), and at
 * a few hundred positions the rows do not stay in the caches between
 * groups: in the AVX2 kernel that is 7 % slower than the general code
 * (cpu_attn_avx2.c). */
#define VCHUNK 8
static inline __attribute__((always_inline)) void values(const attn_shape *s, const float *const *blk,
                                                         const int *rows, int n_blk, int hb, int he,
                                                         const float *att, size_t stride, float *out,
                                                         const int HV) {
    const int hd = s->head_dim, kvd = s->kv_dim, bs = s->block_size;
    const int G = ACC_MAX / HV;
    for (int h = hb; h < he; h++)
        for (int j = 0; j < HV; j++) _mm512_storeu_ps(out + (size_t)h * hd + 16 * j, _mm512_setzero_ps());
    /* the V rows two chunks ahead, this thread's columns, a part each group of heads */
    const size_t voff = (size_t)bs * kvd;
    size_t c0, cb;
    attn_head_cols(s, hb, he, &c0, &cb);
    kv_walk ahead = kv_walk_start(blk, rows, n_blk);
    for (int i = 0; i < 2 * VCHUNK; i++) kv_walk_next(&ahead, (size_t)kvd, voff);
    const int groups = (he - hb + G - 1) / G;
    int n = 0;
    for (int b = 0; b < n_blk; b++) {
        const float *v = blk[b] + voff;
        for (int t0 = 0; t0 < rows[b]; t0 += VCHUNK) {
            const int c = rows[b] - t0 < VCHUNK ? rows[b] - t0 : VCHUNK;
            const float *pf[VCHUNK];
            for (int t = 0; t < c; t++) pf[t] = kv_walk_next(&ahead, (size_t)kvd, voff);
            for (int h0 = hb; h0 < he; h0 += G) {
                const int g = he - h0 < G ? he - h0 : G;
                __m512 acc[ACC_MAX];
                for (int hh = 0; hh < G && hh < g; hh++)
                    for (int j = 0; j < HV; j++)
                        acc[hh * HV + j] = _mm512_loadu_ps(out + (size_t)(h0 + hh) * hd + 16 * j);
                for (int t = 0; t < c; t++) {
                    if (pf[t]) prefetch_part((const char *)(pf[t] + c0), cb, (h0 - hb) / G, groups);
                    const float *vt = v + (size_t)(t0 + t) * kvd;
                    for (int hh = 0; hh < G && hh < g; hh++) {
                        const __m512 a = _mm512_set1_ps(att[(size_t)(h0 + hh) * stride + n + t]);
                        const float *vh = vt + (size_t)((h0 + hh) / s->gqa) * hd;
                        for (int j = 0; j < HV; j++)
                            acc[hh * HV + j] =
                                _mm512_fmadd_ps(a, _mm512_loadu_ps(vh + 16 * j), acc[hh * HV + j]);
                    }
                }
                for (int hh = 0; hh < G && hh < g; hh++)
                    for (int j = 0; j < HV; j++)
                        _mm512_storeu_ps(out + (size_t)(h0 + hh) * hd + 16 * j, acc[hh * HV + j]);
            }
            n += c;
        }
    }
}

int attn_f32_avx512(const attn_shape *s, const float *q, const float *const *blk, const int *rows, int n_blk,
                    int h0, int h1, float *att, size_t att_stride, float *out, float *mass) {
    if (!attn_f32_supported_avx512(s) || !attn_args_ok(s, rows, n_blk, h0, h1, att_stride)) return -1;
    int n = 0;
    for (int b = 0; b < n_blk; b++) n += rows[b];
#define CASE(hv)                                                       \
    case hv:                                                           \
        scores(s, q, blk, rows, n_blk, h0, h1, att, att_stride, hv);   \
        softmax(att, att_stride, h0, h1, n, s->sinks);                 \
        values(s, blk, rows, n_blk, h0, h1, att, att_stride, out, hv); \
        break;
    switch (s->head_dim / 16) {
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) default : return -1;
    }
#undef CASE
    if (mass) attn_block_mass(att + (size_t)h0 * att_stride, att_stride, h1 - h0, rows, n_blk, mass);
    return 0;
}

#endif
