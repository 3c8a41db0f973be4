/* cpu_attn.h - one token's attention over f32 KV blocks, a range of heads
 * at once, vectorized (AVX-512 or AVX2 + FMA) for head sizes that are a
 * multiple of 16.
 *
 * The CPU backend's general attention (backend_cpu.c) computes one score at
 * a time, each ending in a horizontal sum, then adds every V row into the
 * output through memory. Here 16 (AVX-512) or 8 (AVX2) positions' partial
 * dot products are reduced together by one transposing tree (about 3
 * operations a score instead of 10), the softmax is vectorized, and the
 * output of a group of heads stays in registers while the V rows stream
 * past. Where the build or the shape does not allow it (below AVX2; head
 * size 8, as in stories260K, whose greedy output must match llama2.c's bit
 * for bit), the caller uses the general code.
 *
 * Why a range of heads: a decode at batch 1 has one token to attend, so
 * its threads split the heads (each head's work is the same whoever runs
 * it, so the split changes no bit).
 *
 * Thread safety: reads only its inputs, writes only att's and out's rows
 * of its heads, and mass; calls on disjoint head ranges with mass NULL may
 * share att and out. Nothing is allocated. */
#ifndef CK_CPU_ATTN_H
#define CK_CPU_ATTN_H

#include <stddef.h>

typedef struct attn_shape {
    int n_heads, head_dim, kv_dim, block_size;
    int gqa;            /* query heads per KV head */
    const float *sinks; /* (n_heads) each head's sink logit, or NULL: none. A sink is one more
                           term of the head's softmax denominator, exp(sink - max), with no
                           value (ggml's soft_max with sinks): the probabilities then sum to
                           less than 1, and the max the exponents subtract includes it */
} attn_shape;

/* A kernel: heads [h0, h1) of q (n_heads * head_dim) attend to n_blk
 * blocks in order: blk[i] points at block i's K rows of this layer
 * (block_size rows of kv_dim floats, V rows right after them), of which the
 * first rows[i] count.
 * att: scratch, n_heads rows of att_stride floats, att_stride >= the sum of
 *      rows[]; rows h0..h1-1 hold those heads' probabilities afterwards.
 * out: (n_heads * head_dim) the attention output; heads h0..h1-1 written.
 * mass: (n_blk) each block's probability summed over the heads
 *      (attn_block_mass), or NULL: not computed (a caller that split the
 *      heads sums them once all are done, in the one order).
 * Returns 0, or -1 when the shape or range is not supported (nothing
 * written). */
typedef int (*attn_f32_fn)(const attn_shape *s, const float *q, const float *const *blk, const int *rows,
                           int n_blk, int h0, int h1, float *att, size_t att_stride, float *out, float *mass);

/* Whether the arguments every kernel takes are in range, whatever its ISA:
 * heads [h0, h1) within s's, and n_blk blocks of rows[] holding at least
 * one position and at most att_stride. */
int attn_args_ok(const attn_shape *s, const int *rows, int n_blk, int h0, int h1, size_t att_stride);

/* mass[b] = the sum over heads [0, n_heads), then over block b's rows, of
 * att's probabilities (rows[] and att as above): a block's attention mass,
 * in the order every kernel and caller uses. */
void attn_block_mass(const float *att, size_t att_stride, int n_heads, const int *rows, int n_blk,
                     float *mass);

/* The kernel for this shape at ISA level isa (cpu_features.h), or NULL when
 * there is none (below AVX2, or a head size it does not take); *name (when
 * name is not NULL) its ISA's name, a static string, or "general". */
attn_f32_fn attn_f32_kernel(const attn_shape *s, int isa, const char **name);

#endif
