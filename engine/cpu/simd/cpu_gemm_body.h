/* cpu_gemm_body.h - the packed f32 kernels, compiled once per ISA
 * (cpu_gemm.c: baseline C; cpu_gemm_avx2.c; cpu_gemm_avx512.c). Each
 * includer defines GEMM_ISA(name) to suffix the names it exports, and gets
 * the vector code its compile flags allow (__AVX512F__, __AVX2__ + __FMA__,
 * else plain C with the same order of sums). Not a header of its own
 * module: only those three files include it. */
#include <math.h>
#include <string.h>

#include "cpu_gemm.h"
#include "cpu_prefetch.h"

#define P GEMM_PANEL

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#include "cpu_vexp.h"

#if defined(__AVX512F__)
typedef __m512 vec;
#define VW 16
#define TILE_M 8 /* tokens per batch tile */
#define ONE_RP 4 /* panels per one-token tile */
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define vadd(a, b) _mm512_add_ps(a, b)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vset1(p) _mm512_set1_ps(*(p))
#else
typedef __m256 vec;
#define VW 8
#define TILE_M 3
#define ONE_RP 2
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define vadd(a, b) _mm256_add_ps(a, b)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vset1(p) _mm256_broadcast_ss(p)
#endif
#define PV (P / VW)

/* Stores one token's accumulators of one panel: the first `valid` columns. */
static inline __attribute__((always_inline)) void put(float *y, const vec *a, int valid, int accumulate) {
    if (valid == P) {
        for (int v = 0; v < PV; v++) vstore(y + v * VW, accumulate ? vadd(vload(y + v * VW), a[v]) : a[v]);
        return;
    }
    float t[P];
    for (int v = 0; v < PV; v++) vstore(t + v * VW, a[v]);
    for (int c = 0; c < valid; c++) y[c] = accumulate ? y[c] + t[c] : t[c];
}

/* rm tokens (x rows from x, y rows from y) by rp panels from wp; `valid`:
 * columns of the last panel that exist (the others are padding). pf: a
 * slice of memory to ask for meanwhile (NULL for none), evenly over the K
 * steps: pf_step floats of it a step, in 1/65536 of a float (one or two
 * lines a step). Always inlined with constant rm and rp, so acc[][] lives
 * in registers. */
static inline __attribute__((always_inline)) void tile(float *y, int ldy, const float *x, const float *wp,
                                                       int K, int rm, int rp, int valid, int accumulate,
                                                       const float *pf, size_t pf_step) {
    vec acc[TILE_M][ONE_RP * PV];
    for (int m = 0; m < rm; m++)
        for (int j = 0; j < rp * PV; j++) acc[m][j] = vzero();
    const size_t ps = (size_t)K * P; /* floats per panel */
    for (int k = 0; k < K; k++) {
        vec wv[ONE_RP * PV];
        if (pf) {
            /* pf_step: floats of the slice per step of k, in 1/65536 */
            const float *a = pf + (((size_t)k * pf_step) >> 16);
            __builtin_prefetch(a);
            if (pf_step > ((size_t)16 << 16)) __builtin_prefetch(a + 16);
        }
        for (int j = 0; j < rp * PV; j++) {
            wv[j] = vload(wp + (size_t)(j / PV) * ps + (size_t)k * P + (j % PV) * VW);
            /* Keep each weight vector in a register for all rm tokens: left
             * alone, GCC folds the load into every FMA as a memory operand. */
            if (rm > 1) __asm__("" : "+x"(wv[j]));
        }
        for (int m = 0; m < rm; m++) {
            vec xb = vset1(x + (size_t)m * K + k);
            for (int j = 0; j < rp * PV; j++) acc[m][j] = vfma(xb, wv[j], acc[m][j]);
        }
    }
    for (int m = 0; m < rm; m++)
        for (int pp = 0; pp < rp; pp++)
            put(y + (size_t)m * ldy + pp * P, &acc[m][pp * PV], pp == rp - 1 ? valid : P, accumulate);
}

/* Columns valid in panel p of w. */
static inline int valid_cols(const gemm_w *w, int p) {
    int v = w->n - p * P;
    return v < P ? v : P;
}

/* One block of at most GEMM_M_BLOCK tokens against panels [p0, p1). */
static void block(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1, int accumulate) {
    const int K = w->k;
    const size_t ps = (size_t)K * P;
    if (M == 1) {
        int p = p0;
        for (; p + ONE_RP <= p1; p += ONE_RP)
            tile(y + p * P, ldy, x, w->p + p * ps, K, 1, ONE_RP, valid_cols(w, p + ONE_RP - 1), accumulate,
                 NULL, 0);
        float *yp = y + p * P;
        const float *wp = w->p + p * ps;
        int valid = valid_cols(w, p1 - 1);
        switch (p1 - p) {
#if ONE_RP > 3
        case 3: tile(yp, ldy, x, wp, K, 1, 3, valid, accumulate, NULL, 0); break;
#endif
#if ONE_RP > 2
        case 2: tile(yp, ldy, x, wp, K, 1, 2, valid, accumulate, NULL, 0); break;
#endif
        case 1: tile(yp, ldy, x, wp, K, 1, 1, valid, accumulate, NULL, 0); break;
        default: break;
        }
        return;
    }
    for (int p = p0; p < p1; p++) {
        const float *wp = w->p + p * ps;
        /* The weights stream from DRAM (both threads read all of them in a
         * token-split step) and a tile consumes them faster than one core's
         * misses return, so the panel's token tiles ask for the next panel
         * meanwhile, each for its own slice. Asked for by the first tile
         * alone, two lines every eight cycles, the requests outrun the
         * core's miss buffers and stall the multiply-adds behind them;
         * spread over every tile, batch-32 decode on the stories15M shape
         * runs 12 % faster (measured). */
        const float *pf = p + 1 < p1 ? wp + ps : NULL;
        const int valid = valid_cols(w, p), nt = (M + TILE_M - 1) / TILE_M;
        const size_t slice = (ps + (size_t)nt - 1) / (size_t)nt, step = (slice << 16) / (size_t)K;
        float *yp = y + p * P;
        int m = 0;
        for (; m + TILE_M <= M; m += TILE_M)
            tile(yp + (size_t)m * ldy, ldy, x + (size_t)m * K, wp, K, TILE_M, 1, valid, accumulate,
                 pf ? pf + (size_t)(m / TILE_M) * slice : NULL, step);
        float *ym = yp + (size_t)m * ldy;
        const float *xm = x + (size_t)m * K;
        const float *pfm = pf ? pf + (size_t)(m / TILE_M) * slice : NULL;
        switch (M - m) {
#if TILE_M > 7
        case 7: tile(ym, ldy, xm, wp, K, 7, 1, valid, accumulate, pfm, step); break;
        case 6: tile(ym, ldy, xm, wp, K, 6, 1, valid, accumulate, pfm, step); break;
        case 5: tile(ym, ldy, xm, wp, K, 5, 1, valid, accumulate, pfm, step); break;
        case 4: tile(ym, ldy, xm, wp, K, 4, 1, valid, accumulate, pfm, step); break;
        case 3: tile(ym, ldy, xm, wp, K, 3, 1, valid, accumulate, pfm, step); break;
#endif
        case 2: tile(ym, ldy, xm, wp, K, 2, 1, valid, accumulate, pfm, step); break;
        case 1: tile(ym, ldy, xm, wp, K, 1, 1, valid, accumulate, pfm, step); break;
        default: break;
        }
    }
}

#else /* plain C: the same sums in the same order */

static void block(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1, int accumulate) {
    const int K = w->k;
    for (int p = p0; p < p1; p++) {
        const float *wp = w->p + (size_t)p * K * P;
        for (int m = 0; m < M; m++)
            for (int c = 0; c < P && p * P + c < w->n; c++) {
                float s = 0.0f;
                for (int k = 0; k < K; k++) s += x[(size_t)m * K + k] * wp[(size_t)k * P + c];
                float *o = y + (size_t)m * ldy + p * P + c;
                *o = accumulate ? *o + s : s;
            }
    }
}
#endif

/* ------------------------------------------------- row dot and SwiGLU */

/* One row of w against x (every attention score of the general code): 4
 * independent 8-wide accumulators keep the FMA units busy. */
static inline float row_dot(const float *restrict w, const float *restrict x, int K) {
#if defined(__AVX2__) && defined(__FMA__)
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 16), _mm256_loadu_ps(x + k + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 24), _mm256_loadu_ps(x + k + 24), a3);
    }
    for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
    __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float s = _mm_cvtss_f32(h);
    for (; k < K; k++) s += w[k] * x[k];
    return s;
#else
    float s = 0.0f;
    for (int k = 0; k < K; k++) s += w[k] * x[k];
    return s;
#endif
}

static void qk(float *att, size_t att_stride, const float *q, const float *k, int kvd, int tn, int H, int hd,
               int gqa, float scale, const char *pf, size_t pf_bytes) {
    for (int t = 0; t < tn; t++) {
        prefetch_part(pf, pf_bytes, t, tn);
        const float *kt = k + (size_t)t * kvd;
        for (int h = 0; h < H; h++)
            att[(size_t)h * att_stride + t] =
                row_dot(q + (size_t)h * hd, kt + (size_t)(h / gqa) * hd, hd) / scale;
    }
}

/* out[h] += att[h][t] * V row t's kv head h / gqa, for t < tn in order;
 * returns the sum of the weights (the block's attention mass). Plain C
 * loops: the compile flags vectorize them, and without FMA contraction
 * (ISO C) every ISA gives the same bits. */
static float av(float *restrict out, const float *att, size_t att_stride, const float *v, int kvd, int tn,
                int H, int hd, int gqa) {
    float m = 0.0f;
    for (int t = 0; t < tn; t++) {
        const float *vt = v + (size_t)t * kvd;
        for (int h = 0; h < H; h++) {
            const float a = att[(size_t)h * att_stride + t];
            const float *restrict vh = vt + (size_t)(h / gqa) * hd;
            float *restrict o = out + (size_t)h * hd;
            for (int i = 0; i < hd; i++) o[i] += a * vh[i];
            m += a;
        }
    }
    return m;
}

static void swiglu(float *o, const float *g, const float *u, int n0, int n1) {
#if defined(__AVX512F__)
    /* g * (1 / (1 + e^-g)) * u with e^-g by vexp_ps (a call to expf a
     * column cost 4 % of a batch-32 step); the tail masked so that every
     * column goes through the same code */
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int k = n0; k < n1; k += 16) {
        __mmask16 m = n1 - k >= 16 ? 0xFFFF : (__mmask16)((1u << (n1 - k)) - 1);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + k), uv = _mm512_maskz_loadu_ps(m, u + k);
        __m512 e = vexp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        __m512 sg = _mm512_div_ps(one, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(o + k, m, _mm512_mul_ps(_mm512_mul_ps(gv, sg), uv));
    }
#else
    for (int k = n0; k < n1; k++) o[k] = g[k] * (1.0f / (1.0f + expf(-g[k]))) * u[k];
#endif
}

const gemm_kernels GEMM_ISA(gemm_kernels) = {GEMM_ISA_NAME, block, row_dot, qk, av, swiglu};
