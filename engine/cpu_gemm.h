/* cpu_gemm.h - the CPU backend's small-batch matrix product, y = x . w^T.
 *
 * Decode at batch B multiplies B token rows by every weight matrix. sgemm
 * first packs both operands into its own layout; at B of a few dozen that
 * packing is paid for every weight once per step and cost as much as a third
 * of the arithmetic (OpenBLAS's incopy was 13% of batch-32 decode). Here each
 * tile of 4 weight rows is read where it lies and used for all B tokens while
 * it sits in L1, so the weights stream from memory once per call.
 *
 * Thread safety: the function writes only y rows' [n0, n1) columns, so
 * threads may share one call's y as long as their ranges are disjoint. It
 * allocates nothing. */
#ifndef CK_CPU_GEMM_H
#define CK_CPU_GEMM_H

/* Rows per weight tile: split n ranges between threads at multiples of it,
 * or the remainder falls to a slower edge loop. */
#define GEMM_TILE_N 4

/* For m in [0, M) and n in [n0, n1):
 *   y[m * ldy + n] = sum_k x[m * K + k] * w[n * K + k]   (accumulate == 0)
 *   y[m * ldy + n] += that sum                           (accumulate != 0)
 * x: (M, K) row-major; w: (N, K) row-major, N >= n1. */
void gemm_rows(float *y, int ldy, const float *x, const float *w, int M, int K, int n0, int n1,
               int accumulate);

#endif
