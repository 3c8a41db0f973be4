/* cpu_attn.h - one token's attention over f32 KV blocks, every head at once,
 * vectorized (AVX-512) for head sizes that are a multiple of 16.
 *
 * The CPU backend's general attention (backend_cpu.c) computes one score at
 * a time, each ending in a horizontal sum, then adds every V row into the
 * output through memory. Here 16 positions' partial dot products are
 * reduced together by one transposing tree (about 3 operations a score
 * instead of 10), the softmax is vectorized, and the output of a group of
 * heads stays in registers while the V rows stream past. Where the build or
 * the shape does not allow it (no AVX-512; head size 8, as in stories260K,
 * whose greedy output must match llama2.c's bit for bit), the caller uses
 * the general code.
 *
 * Thread safety: reads only its inputs, writes only att, out and mass.
 * Nothing is allocated. */
#ifndef CK_CPU_ATTN_H
#define CK_CPU_ATTN_H

#include <stddef.h>

typedef struct attn_shape {
    int n_heads, head_dim, kv_dim, block_size;
    int gqa; /* query heads per KV head */
} attn_shape;

/* A kernel: q (n_heads * head_dim) attends to n_blk blocks in order: blk[i] points at
 * block i's K rows of this layer (block_size rows of kv_dim floats, V rows
 * right after them), of which the first rows[i] count.
 * att: scratch, n_heads rows of att_stride floats, att_stride >= the sum of
 *      rows[]; holds each head's probabilities afterwards.
 * out: (n_heads * head_dim) the attention output.
 * mass: (n_blk) each block's probability, summed over heads.
 * Returns 0, or -1 when the shape is not supported (nothing written). */
typedef int (*attn_f32_fn)(const attn_shape *s, const float *q, const float *const *blk, const int *rows,
                           int n_blk, float *att, size_t att_stride, float *out, float *mass);

/* The kernel for this shape at ISA level isa (cpu_features.h), or NULL when
 * there is none (below AVX-512, or a head size it does not take). */
attn_f32_fn attn_f32_kernel(const attn_shape *s, int isa);

#endif
