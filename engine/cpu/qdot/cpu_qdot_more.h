/* cpu_qdot_more.h - dot products of one quantized weight row with one
 * quantized activation row, for the weight types Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q5_K, IQ4_NL, IQ4_XS and MXFP4 (cpu_qdot.c's table holds these
 * next to the Q8_0/Q4_0/Q4_K/Q6_K kernels).
 *
 *   void cpu_vdot_<type>_<isa>(int n, float *s, const void *w, const void *a);
 *
 * *s = the dot of n elements: w holds n / block(type) blocks of `type`
 * (engine/format/qblock.h), a the same row's activations quantized to the type's
 * partner format:
 *   q4_1, q5_1        -> qblock_q8_1  (blocks of 32)
 *   q5_0, iq4_nl,
 *   mxfp4             -> qblock_q8_0  (blocks of 32)
 *   q2_K, q3_K, q5_K,
 *   iq4_xs            -> qblock_q8_K  (super-blocks of 256)
 * n must be a positive multiple of the block (32 or QBLOCK_K); the caller
 * (the backend, which checked the tensor's shape at load) guarantees it and
 * nothing here checks. w and a may be unaligned (they point into a file
 * mapping and scratch). The functions only read w and a, write *s, keep no
 * state and are safe to call from any number of threads.
 *
 * The arithmetic is llama.cpp's ggml_vec_dot_<type>_q8_<x>: per block the
 * products of the integer quants are summed exactly in integers, scaled by
 * the product of the two blocks' scales, and the blocks' float sums added;
 * the "min" or "offset" parts use the activation block's stored sums (q8_1
 * s, q8_K bsums), as there. So a kernel's result differs from the oracle's
 * only in the order of the float additions across blocks.
 *
 * ISAs: _c is portable C (the reference the others are tested against);
 * _avx2 needs AVX2, FMA and F16C; _avx512 needs AVX-512 F, BW, VL and DQ
 * (plus AVX2/FMA/F16C). The caller picks one from the CPU's features at
 * start-up (cpu_qdot.c); calling a variant the CPU lacks is an illegal
 * instruction. The _avx2 integer sums are exact, so for the K-quants (one
 * float step per super-block, in the C order) they equal _c bit for bit;
 * for the 32-element types they keep per-lane float accumulators and differ
 * from _c by float rounding only. */
#ifndef CK_CPU_QDOT_MORE_H
#define CK_CPU_QDOT_MORE_H

/* the 32-element types */
void cpu_vdot_q4_1_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q4_1_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q4_1_avx512(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_0_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_0_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_0_avx512(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_1_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_1_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_1_avx512(int n, float *s, const void *w, const void *a);
void cpu_vdot_iq4_nl_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_iq4_nl_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_iq4_nl_avx512(int n, float *s, const void *w, const void *a);
void cpu_vdot_mxfp4_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_mxfp4_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_mxfp4_avx512(int n, float *s, const void *w, const void *a);
/* the 256-element types */
void cpu_vdot_q2_K_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q2_K_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q2_K_avx512(int n, float *s, const void *w, const void *a);
void cpu_vdot_q3_K_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q3_K_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q3_K_avx512(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_K_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_K_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q5_K_avx512(int n, float *s, const void *w, const void *a);
void cpu_vdot_iq4_xs_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_iq4_xs_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_iq4_xs_avx512(int n, float *s, const void *w, const void *a);

#endif
