/* cpu_gemm.h - the CPU backend's matrix products on packed weights,
 * y = x . w^T.
 *
 * Every projection multiplies M token rows by a weight matrix w (N, K). The
 * backend packs each matrix once, when it is created, into panels of
 * GEMM_PANEL output columns: panel p holds w[p*P .. p*P+P-1][k] for every k,
 * k-major, so one step of k reads P consecutive floats. The kernel then
 * broadcasts one x value and multiplies it into whole vectors of outputs:
 * no horizontal sums (a row-major dot-product tile spent a quarter of its
 * time reducing at K = 288), and one contiguous stream through memory per
 * matrix, which the hardware prefetcher follows without help.
 *
 * Each output is summed over k in order, one fused multiply-add at a time,
 * whatever M is and however the work is tiled or split between threads: a
 * token's projections are bit for bit the same at batch 1 and batch 64.
 *
 * Thread safety: gemm_panels writes only y's columns of panels [p0, p1), so
 * threads may share one call's y with disjoint panel ranges. Nothing here
 * allocates. */
#ifndef CK_CPU_GEMM_H
#define CK_CPU_GEMM_H

#include <stddef.h>

/* Output columns per panel; threads split work at panel boundaries. */
#define GEMM_PANEL 32

typedef struct gemm_w gemm_w;

/* The f32 kernels of one ISA (cpu_gemm_body.h, compiled per ISA: the
 * baseline build of cpu_gemm.c, cpu_gemm_avx2.c, cpu_gemm_avx512.c):
 *   block:  gemm_panels' work on one block of at most GEMM_M_BLOCK tokens;
 *   dot:    one row of w against x, K floats (the general attention's
 *           scores);
 *   qk:     att[h * att_stride + t] = dot(q head h, K row t's kv head
 *           h / gqa) / scale for t < tn, h < H (k: tn rows of kvd floats),
 *           asking for the span pf (pf_bytes, NULL: none) meanwhile;
 *   av:     out[h] += att[h * att_stride + t] * (V row t's kv head h / gqa)
 *           for t < tn, in order (v: tn rows of kvd floats); returns the sum
 *           of those att values (the block's mass);
 *   swiglu: o[c] = g[c] * sigmoid(g[c]) * u[c] for c in [n0, n1).
 * Sums are in the same order at every batch size within one ISA; between
 * ISAs they differ in rounding only (FMA, tree sums). */
typedef struct gemm_kernels {
    const char *isa;
    void (*block)(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1, int accumulate);
    float (*dot)(const float *w, const float *x, int K);
    void (*qk)(float *att, size_t att_stride, const float *q, const float *k, int kvd, int tn, int H, int hd,
               int gqa, float scale, const char *pf, size_t pf_bytes);
    float (*av)(float *out, const float *att, size_t att_stride, const float *v, int kvd, int tn, int H,
                int hd, int gqa);
    void (*swiglu)(float *o, const float *g, const float *u, int n0, int n1);
} gemm_kernels;

extern const gemm_kernels gemm_kernels_c, gemm_kernels_avx2, gemm_kernels_avx512;

/* The set for an ISA level (cpu_features.h): the best one at or below it. */
const gemm_kernels *gemm_kernels_for(int isa);

/* A packed matrix. p: ceil(n / GEMM_PANEL) panels of (k, GEMM_PANEL) floats,
 * the columns past n zero. The backend owns p. kern: the kernels its
 * products run with (gemm_pack sets the CPU's best; the backend may set
 * another level it selected). */
struct gemm_w {
    float *p;
    int n, k;
    const gemm_kernels *kern;
};

static inline int gemm_n_panels(const gemm_w *w) { return (w->n + GEMM_PANEL - 1) / GEMM_PANEL; }

/* Floats gemm_pack writes for an (n, k) matrix. */
size_t gemm_packed_floats(int n, int k);

/* Packs row-major src (n, k) into dst (gemm_packed_floats(n, k) floats) and
 * fills w to describe it. */
void gemm_pack(gemm_w *w, float *dst, const float *src, int n, int k);

/* Row r of the original matrix into dst (k floats): a strided gather, for
 * the token embedding that a tied classifier shares. */
void gemm_row(const gemm_w *w, int r, float *dst);

/* For m in [0, M) and the columns n < w->n of panels [p0, p1):
 *   y[m * ldy + n]  = sum_k x[m * w->k + k] * w[n][k]   (accumulate == 0)
 *   y[m * ldy + n] += that sum                          (accumulate != 0)
 * x: (M, w->k) row-major. Any M: batches above GEMM_M_BLOCK tokens are taken
 * a block at a time so the block's x rows stay in L2. */
void gemm_panels(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1, int accumulate);

#define GEMM_M_BLOCK 64

#endif
