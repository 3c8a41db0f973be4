/* cpu_gemm.c - matrix products on packed weights (cpu_gemm.h).
 *
 * A tile is RM tokens by RP panels: RM * RP * PV vector accumulators, PV =
 * GEMM_PANEL / vector width. Each step of k loads the RP * PV weight vectors
 * once, then for every token broadcasts x[m][k] and adds it times them. The
 * shapes, with AVX-512 (Zen 5 here: two full-width FMAs a cycle, four
 * cycles of latency, so at least eight sums must be in flight):
 *   batches: 8 tokens x 1 panel, 16 accumulators; 16 FMAs for 2 weight
 *            loads and 8 broadcasts, so the FMA units set the pace;
 *   one token (decode at batch 1, bound by memory): 1 token x 4 panels,
 *            8 accumulators over four adjacent panels, one stream.
 * With AVX2 and FMA the vectors are 8 wide and the tiles smaller (16
 * registers); without either, plain C with the same order of sums.
 *
 * Why the panel walks all its tokens before the next panel: the panel (K x
 * 32 floats, 36 KB at K = 288) stays in L1 or L2 while every token tile
 * reads it, so the weights come from memory once per call; the x rows (at
 * most GEMM_M_BLOCK of them) stay in L2. */
#include "cpu_gemm.h"

#include <string.h>

#define P GEMM_PANEL

size_t gemm_packed_floats(int n, int k) { return (size_t)((n + P - 1) / P) * P * (size_t)k; }

void gemm_pack(gemm_w *w, float *dst, const float *src, int n, int k) {
    int np = (n + P - 1) / P;
    for (int p = 0; p < np; p++)
        for (int kk = 0; kk < k; kk++) {
            float *d = dst + ((size_t)p * k + kk) * P;
            for (int c = 0; c < P; c++) {
                int r = p * P + c;
                d[c] = r < n ? src[(size_t)r * k + kk] : 0.0f;
            }
        }
    w->p = dst;
    w->n = n;
    w->k = k;
}

void gemm_row(const gemm_w *w, int r, float *dst) {
    const float *s = w->p + (size_t)(r / P) * w->k * P + r % P;
    for (int kk = 0; kk < w->k; kk++) dst[kk] = s[(size_t)kk * P];
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>

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
static inline __attribute__((always_inline)) void put(float *y, const vec *a, int valid,
                                                      int accumulate) {
    if (valid == P) {
        for (int v = 0; v < PV; v++)
            vstore(y + v * VW, accumulate ? vadd(vload(y + v * VW), a[v]) : a[v]);
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
static inline __attribute__((always_inline)) void tile(float *y, int ldy, const float *x,
                                                       const float *wp, int K, int rm, int rp,
                                                       int valid, int accumulate, const float *pf,
                                                       size_t pf_step) {
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
static void block(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1,
                  int accumulate) {
    const int K = w->k;
    const size_t ps = (size_t)K * P;
    if (M == 1) {
        int p = p0;
        for (; p + ONE_RP <= p1; p += ONE_RP)
            tile(y + p * P, ldy, x, w->p + p * ps, K, 1, ONE_RP, valid_cols(w, p + ONE_RP - 1),
                 accumulate, NULL, 0);
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
         * alone, two lines every eight cycles, the requests outran the
         * core's miss buffers and stalled the multiply-adds behind them;
         * spread over every tile, batch-32 decode on the stories15M shape
         * ran 12 % faster (docs/BENCHMARKS.md). */
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

static void block(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1,
                  int accumulate) {
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

void gemm_panels(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1,
                 int accumulate) {
    if (p0 >= p1) return;
    for (int m0 = 0; m0 < M; m0 += GEMM_M_BLOCK) {
        int mb = M - m0 < GEMM_M_BLOCK ? M - m0 : GEMM_M_BLOCK;
        block(y + (size_t)m0 * ldy, ldy, x + (size_t)m0 * w->k, w, mb, p0, p1, accumulate);
    }
}
