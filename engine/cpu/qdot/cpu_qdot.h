/* cpu_qdot.h - products of quantized weight matrices with activations, in
 * the weights' own bytes: the table of kernels per weight type
 * and ISA, and the matrix driver over rows, columns and threads.
 *
 * A weight row (K elements of a type, stored as the file stores it) is
 * multiplied with an activation row quantized to the type's partner format
 * (cpu_qact.h: q8_0, q8_1 or q8_K) by an integer dot product per block, as
 * llama.cpp does:
 *
 *   void cpu_vdot_<type>_<isa>(int n, float *s, const void *w, const void *a);
 *     *s = the dot of one weight row (n elements, n a multiple of the type's
 *     block, stored as `type` blocks at w) with one activation row
 *     quantized to the type's partner format at a.
 *
 * Q8_0, Q4_0, Q4_K and Q6_K are here (cpu_qdot_base_*.c), with
 * cpu_vdotn_* variants that take up to CPU_QDOT_NCOLS activation rows at
 * once (one weight row unpacked once for all of them: batches) and, for
 * Q8_0, Q4_0 and Q4_K, cpu_vdot2_* that take two weight rows with them
 * (batches of dot2_min_m rows and more, prefill). Q8_0, Q4_0, Q4_K,
 * Q6_K and MXFP4 matrices are repacked at load into groups of 8
 * interleaved rows (cpu_qdot_repack8, qblock.h's _x8 blocks) and run on cpu_vdot8_*, one
 * row a vector lane, at every batch size: the kernels above then serve
 * only a matrix's n % 8 last rows (and callers that keep the file's
 * layout). The x8 kernels have AVX-512 and VNNI versions too (512 bits,
 * cpu_qdot_x8_body.h): at batch 1 on a Zen 5 the AVX2 ones, not memory,
 * set the pace. The other
 * types are engine/cpu/qdot/cpu_qdot_more.h's. A type with no kernel for an ISA
 * takes the next one down (avx512 -> avx2 -> c); a type with no kernel at
 * all a generic one that expands the weight block with quant_to_f32 and
 * sums in f32 (correct, slow).
 *
 * Thread safety: the table is built once (cpu_qdot_init) and then only
 * read; the kernels and the driver write only their outputs. Nothing here
 * allocates. */
#ifndef CK_CPU_QDOT_H
#define CK_CPU_QDOT_H

#include <stddef.h>

#include "qblock.h"

/* Most activation rows a cpu_vdotn kernel takes at once. */
#define CPU_QDOT_NCOLS 4

typedef void (*cpu_vdot_fn)(int n, float *s, const void *w, const void *a);
/* s[c] = dot(w, a + c * a_stride bytes) for c < ncols (1..CPU_QDOT_NCOLS). */
typedef void (*cpu_vdotn_fn)(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
/* Two weight rows at once, w and w + w_stride bytes, each against ncols
 * (1..CPU_QDOT_NCOLS) activation rows:
 *   s[r * CPU_QDOT_NCOLS + c] = dot(weight row r, a + c * a_stride bytes)
 * The register block of batches and prefill (each activation block loaded
 * once for both rows, each weight block unpacked once for all columns), and
 * at batch 1 (ncols 1) the activation's loads shared by two rows. */
typedef void (*cpu_vdot2_fn)(int n, int ncols, float *s, const void *w, size_t w_stride, const void *a,
                             size_t a_stride);
/* Eight weight rows interleaved by cpu_qdot_repack8 (w: n / block of the
 * type's x8 blocks, qblock.h), each against ncols (1..CPU_QDOT_NCOLS)
 * activation rows:
 *   s[c * 8 + r] = dot(weight row r of the group, a + c * a_stride bytes)
 * One row a 32-bit lane: a block's integer sums, their conversion and
 * their scaling are one instruction each for the 8 rows, not one a row. */
typedef void (*cpu_vdot8_fn)(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
/* A 16-row tile of two x8 groups (w0, w1) against ncols activation rows
 * (cpu_qgemm.h): s[16 c + r]. */
typedef void (*cpu_qgemm_fn)(int n, int ncols, float *s, const void *w0, const void *w1, const void *a,
                             size_t a_stride);

/* One weight type as the table knows it. */
typedef struct cpu_qtype {
    int type;              /* QB_* of the weights */
    int act;               /* QB_Q8_0, QB_Q8_1 or QB_Q8_K: the activations' format */
    int block;             /* elements a block (32 or QBLOCK_K) */
    int block_bytes;       /* bytes a block */
    cpu_vdot_fn dot;       /* the kernel for the chosen ISA */
    cpu_vdotn_fn dotn;     /* the multi-row one; NULL: dot a row at a time */
    cpu_vdot2_fn dot2;     /* two weight rows x columns; NULL: dotn / dot per row */
    int dot2_min_m;        /* fewest activation rows at which dot2 beats dot / dotn */
    cpu_vdot8_fn dot8;     /* 8 interleaved rows; non-NULL: matrices of this type are
                            repacked at load (cpu_qdot_repack8) and run on it */
    int x8_bytes;          /* bytes of one x8 block (8 rows x block elements; qblock.h) */
    cpu_qgemm_fn gemm;     /* x8 tiles for CPU_QGEMM_MIN_M activation rows and more
                            (cpu_qgemm.h); NULL: dot8 at every M */
    const char *impl;      /* which: "avx2", "c", "generic" (dequantize + f32) ... */
    const char *x8_impl;   /* dot8's ISA ("vnni", "avx512", "avx2", "c"); NULL without dot8 */
    const char *gemm_impl; /* gemm's ISA; NULL without gemm */
} cpu_qtype;

#define CPU_QDOT_MAX_TYPES 16

/* The table for one ISA (cpu_features.h): every weight type confkv computes
 * on quantized. Owned by whoever holds it (a backend embeds one). */
typedef struct cpu_qdot {
    int isa;
    int n;
    cpu_qtype t[CPU_QDOT_MAX_TYPES];
} cpu_qdot;

/* Fill q for `isa` (CPU_ISA_*); the caller checked that the CPU runs it
 * (cpu_isa_select). Never fails: a missing kernel falls back as above. */
void cpu_qdot_init(cpu_qdot *q, int isa);

/* The entry of a weight type; NULL for f32/f16/bf16 (the packed f32 path)
 * and for types with no dequantizer either. */
const cpu_qtype *cpu_qdot_type(const cpu_qdot *q, int type);

/* A quantized matrix (n rows of k elements) in its file's bytes, or
 * repacked (x8). */
typedef struct cpu_qmat {
    const void *data; /* n rows of row_bytes (not owned): the file mapping's, or
                         with x8 cpu_qdot_repack8's layout of them */
    const cpu_qtype *t;
    int n, k;
    size_t row_bytes; /* k / t->block * t->block_bytes */
    int x8;           /* rows [0, n / 8 * 8) are groups of 8 interleaved rows (t->dot8),
                         k / block x8 blocks each; the n % 8 rows after them as the
                         file has them */
} cpu_qmat;

/* Bytes of an (n, k) matrix of type t in the x8 layout (cpu_qdot_repack8);
 * 0 when t has none. */
size_t cpu_qdot_x8_bytes(const cpu_qtype *t, int n, int k);

/* Writes the n rows of k elements at src (t->type, the file's layout) to
 * dst (cpu_qdot_x8_bytes bytes, not overlapping src) in the x8 layout: each
 * group of 8 rows as k / block x8 blocks, the n % 8 last rows copied as
 * they are. Returns 0, or CK_EINVAL when t has no x8 layout (t->dot8 NULL)
 * or k is not whole blocks. */
int cpu_qdot_repack8(const cpu_qtype *t, void *dst, const void *src, int n, int k);

/* For rows r in [r0, r1) of w and m in [0, M):
 *   y[m * ldy + r]  = dot(row r of w, activation row m)   (accumulate == 0)
 *   y[m * ldy + r] += that                                 (accumulate != 0)
 * a: M activation rows in w->t->act, a_stride bytes apart. Weight rows are
 * walked in order, eight at a time in an x8 matrix, else two at a time
 * where the type has a dot2 kernel (from dot2_min_m columns on), each
 * read from memory once for all M activation rows (which stay in the
 * caches); from CPU_QGEMM_MIN_M rows on, an x8 matrix whose type has
 * tiles goes to cpu_qgemm_rows. Threads may share y with disjoint row
 * ranges. */
void cpu_qdot_rows(float *y, int ldy, const void *a, size_t a_stride, const cpu_qmat *w, int M, int r0,
                   int r1, int accumulate);

/* ---- the kernels of this module (ISA variants in files of their own) ---- */
void cpu_vdot_q8_0_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q4_0_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q4_K_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q6_K_c(int n, float *s, const void *w, const void *a);
void cpu_vdot_q8_0_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q4_0_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q4_K_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdot_q6_K_avx2(int n, float *s, const void *w, const void *a);
void cpu_vdotn_q8_0_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdotn_q4_0_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdotn_q4_K_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdotn_q6_K_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot2_q8_0_avx2(int n, int ncols, float *s, const void *w, size_t w_stride, const void *a,
                         size_t a_stride);
void cpu_vdot2_q4_0_avx2(int n, int ncols, float *s, const void *w, size_t w_stride, const void *a,
                         size_t a_stride);
void cpu_vdot2_q4_K_avx2(int n, int ncols, float *s, const void *w, size_t w_stride, const void *a,
                         size_t a_stride);
/* a: QACT_Q8_0S rows (cpu_qact.h), whose block sums they read */
void cpu_vdot8_q4_0_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q4_0_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q8_0_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q8_0_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q4_K_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q4_K_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q6_K_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q6_K_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
/* MXFP4 x8 (a: QACT_Q8_0S rows): C in cpu_qdot_legacy_c.c, AVX2 in
 * cpu_qdot_base_avx2.c, AVX-512 and VNNI in cpu_qdot_x8_body.h */
void cpu_vdot8_mxfp4_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_mxfp4_avx2(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_mxfp4_avx512(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_mxfp4_vnni(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
/* the same at 512 bits (cpu_qdot_x8_body.h), without and with VNNI */
void cpu_vdot8_q4_0_avx512(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q8_0_avx512(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q4_K_avx512(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q6_K_avx512(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q4_0_vnni(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q8_0_vnni(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q4_K_vnni(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);
void cpu_vdot8_q6_K_vnni(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride);

/* The generic fallback: w's blocks expanded by quant_to_f32, a's by their
 * scales, summed in f32. `type` as in the table; for tests and types with
 * no kernel. Returns 0, or the quant_to_f32 error for a type it lacks. */
int cpu_vdot_generic(int type, int act, int n, float *s, const void *w, const void *a);

#endif
