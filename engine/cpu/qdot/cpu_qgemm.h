/* cpu_qgemm.h - the products of x8 matrices (cpu_qdot.h) with many
 * activation rows at once: prefill chunks and large batches.
 *
 * The x8 kernels (cpu_vdot8_*) take 8 weight rows against at most
 * CPU_QDOT_NCOLS activation rows, and at 512 bits each activation row's
 * 4-byte groups must be shuffled (one vpermd a pair) to meet the 8 rows'
 * lanes. With many activation rows the work is the other way round: a
 * register tile of 16 weight rows (two x8 groups side by side, one 32-bit
 * lane each) against CPU_QGEMM_NC activation rows, each activation group of
 * 4 bytes broadcast from memory straight into the multiply (vpdpbusd's
 * {1to16}), and the weight vectors (loaded, unpacked) shared by all the
 * columns. No second copy of the weights: the tiles read the x8 groups as
 * cpu_qdot_repack8 wrote them; the activations are the rows cpu_qact.h
 * wrote once a product (q8_0s: their block sums take off the weights'
 * offsets, -8 for Q4_0's nibbles and -128 for Q8_0's bytes made unsigned).
 *
 *   void cpu_qgemm16_<type>_<isa>(int n, int ncols, float *s, const void *w0,
 *                                 const void *w1, const void *a, size_t a_stride);
 *     s[16 c + r] = dot(row r of the group at w0 (r < 8) or row r - 8 of
 *     the group at w1, activation row a + c * a_stride bytes), c < ncols
 *     (1..CPU_QGEMM_NC); w1 may equal w0.
 *
 * Every integer sum is exact and the float work after it is the x8
 * kernels', in their order: a tile's results equal cpu_vdot8_* of the same
 * level bit for bit (tests/test_cpu_qgemm.c), so a model's outputs do not
 * depend on which of the two ran. Q4_0, Q4_K and Q6_K at AVX-512 and
 * VNNI, Q8_0 at VNNI only (without VNNI its unsigned bytes would saturate
 * maddubs's int16 pairs); the AVX2 x8 kernels already are this tile at 256
 * bits (8 rows, 4 columns, broadcast activations) and serve as they are.
 *
 * Measured (one thread of an AMD EPYC Zen 4, 2026-12-03, best of 12
 * alternated runs, a 768 x 768 matrix in L2, 512 activation rows), tiles
 * against the x8 kernels: Q4_0 161 / 88 GMAC/s, Q8_0 160 / 75, Q4_K 127 /
 * 105 (at K 2048: 163 / 106), Q6_K 127 / 83. With 16384 x 2048 weights
 * streaming from memory they lose below 8 rows (0.6-0.9x at 1 and 4), are
 * even at 8 and win from 16 (1.13-1.52x): CPU_QGEMM_MIN_M.
 *
 * Thread safety: pure functions of their arguments; nothing allocated. */
#ifndef CK_CPU_QGEMM_H
#define CK_CPU_QGEMM_H

#include <stddef.h>

#include "cpu_qdot.h"

/* Activation rows of a tile: 8 float and 8 int32 accumulators, 16 of the 32
 * 512-bit registers. */
#define CPU_QGEMM_NC 8

/* Fewest activation rows at which cpu_qdot_rows takes the tiles: below it
 * the x8 kernels' 4 columns a pass serve (decode, small batches). */
#define CPU_QGEMM_MIN_M 16

/* Rows [r0, r1) of w's x8 part (r1 <= w->n / 8 * 8; w->t->gemm non-NULL)
 * against M activation rows, as cpu_qdot_rows: y[m * ldy + r] (+)= dot. The
 * weights a block of groups at a time (about an L2's share), every
 * CPU_QGEMM_NC activation rows swept over the block's tiles, so that the
 * block stays in L2 and the activation panel in L1. A range that starts or
 * ends inside a group computes the whole group and stores only its rows. */
void cpu_qgemm_rows(float *y, int ldy, const void *a, size_t a_stride, const cpu_qmat *w, int M, int r0,
                    int r1, int accumulate);

/* Int8 multiply-adds a second one thread runs in t's tiles (t->gemm
 * non-NULL) on operands that stay in L1 (16 rows of 256 elements against
 * CPU_QGEMM_NC activation rows, over and over for about `seconds`): the
 * ceiling of the products on this machine, by the instructions that do
 * them (confkv bench's compute_fraction). 0 when t has no tiles. */
double cpu_qgemm_peak(const cpu_qtype *t, double seconds);

void cpu_qgemm16_q4_0_avx512(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                             size_t a_stride);
void cpu_qgemm16_q4_0_vnni(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                           size_t a_stride);
void cpu_qgemm16_q4_K_avx512(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                             size_t a_stride);
void cpu_qgemm16_q4_K_vnni(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                           size_t a_stride);
void cpu_qgemm16_q6_K_avx512(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                             size_t a_stride);
void cpu_qgemm16_q6_K_vnni(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                           size_t a_stride);
void cpu_qgemm16_q8_0_vnni(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                           size_t a_stride);

#endif
