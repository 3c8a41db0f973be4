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

/* A packed matrix. p: ceil(n / GEMM_PANEL) panels of (k, GEMM_PANEL) floats,
 * the columns past n zero. The backend owns p. */
typedef struct gemm_w {
    float *p;
    int n, k;
} gemm_w;

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
void gemm_panels(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1,
                 int accumulate);

#define GEMM_M_BLOCK 64

#endif
