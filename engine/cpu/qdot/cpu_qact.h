/* cpu_qact.h - activations quantized to the 8-bit partner formats of the
 * weight types (qblock.h), as llama.cpp's reference quantizers
 * (quantize_row_q8_0_ref, _q8_1_ref, _q8_K_ref in ggml-quants.c) write them,
 * byte for byte, so that an integer dot product of a weight row with them
 * rounds as the oracle's does.
 *
 *   q8_0: per 32: d = amax / 127 (stored f16), q = roundf(x / d)
 *   q8_1: as q8_0, plus s = f16(d * sum(q))
 *   q8_K: per 256: d = max / -127 with max the element of largest |x|
 *         (kept f32), q = min(127, nearest_int(x / d)) (ties to even), and
 *         bsums[j] = sum of q[16 j .. 16 j + 15]
 *   q8_0s (QACT_Q8_0S, confkv's own, not a ggml type): a q8_0 row, byte
 *         for byte, then one int16 per block, sum(q) of that block. Q4_0's
 *         interleaved kernels take it: sum (q4 - 8) y = sum q4 y - 8 sum y,
 *         and the second term, the same for every weight row, is then read
 *         instead of computed per row; MXFP4's likewise (its levels + 12,
 *         then 12 sum y off). Kernels that want q8_0 read its
 *         blocks unchanged (the row is just longer).
 *
 * Pure functions: no state, no allocation, thread-safe. x and y must not
 * overlap; k must be a multiple of the format's block (qact_row_bytes says
 * 0 otherwise, and the functions then do nothing). */
#ifndef CK_CPU_QACT_H
#define CK_CPU_QACT_H

#include <stddef.h>

#include "qblock.h"

/* Activation format id of q8_0s: outside ggml's type ids (qblock.h). */
#define QACT_Q8_0S 0x100

/* Bytes of one row of k elements in format fmt (QB_Q8_0, QB_Q8_1, QB_Q8_K,
 * QACT_Q8_0S);
 * 0 for another format or a k that is not a multiple of its block. */
size_t qact_row_bytes(int fmt, int k);

void qact_q8_0(const float *x, qblock_q8_0 *y, int k);
void qact_q8_1(const float *x, qblock_q8_1 *y, int k);
void qact_q8_K(const float *x, qblock_q8_K *y, int k);
/* y: qact_row_bytes(QACT_Q8_0S, k) bytes, 2-byte aligned. */
void qact_q8_0s(const float *x, void *y, int k);

/* One row of k floats into fmt at y (qact_row_bytes(fmt, k) bytes).
 * Returns 0, or -1 for an unknown format or a bad k (nothing written). */
int qact_row(int fmt, const float *x, void *y, int k);

/* qact_row with the quantizers of ISA level isa (cpu_features.h; the
 * caller checked that the CPU runs it): from CPU_ISA_AVX2 up,
 * cpu_qact_avx2.c's, byte for byte the portable ones' results. */
int qact_row_isa(int isa, int fmt, const float *x, void *y, int k);

/* cpu_qact_avx2.c (x86-64 only) */
void qact_q8_K_avx2(const float *x, qblock_q8_K *y, int k);
void qact_q8_0_avx2(const float *x, qblock_q8_0 *y, int k);
void qact_q8_1_avx2(const float *x, qblock_q8_1 *y, int k);
void qact_q8_0s_avx2(const float *x, void *y, int k);

#endif
