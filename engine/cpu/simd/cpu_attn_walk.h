/* cpu_attn_walk.h - the attention kernels' walk over a sequence's positions
 * across its KV blocks, and the columns of a range of heads (cpu_attn.h's
 * block layout: block_size K rows of kv_dim floats, then as many V rows).
 *
 * Why a walk, not a loop per block: a kernel's scores pass sums 16
 * (AVX-512) or 8 (AVX2) positions in one add tree, and with blocks of 8
 * (the default below a context of 2048, kv.h) or 4 a loop per block left
 * half the tree or more empty. Walking across the blocks' bounds keeps it
 * full. A second walk, some positions ahead, names the rows to ask for
 * early (cpu_prefetch.h): KV blocks lie anywhere in the pool, where the
 * hardware prefetcher loses the stream.
 *
 * Why the columns: threads that split the heads each read their heads'
 * columns of every row; a thread that asked for whole rows pulled its
 * partners' columns into its own caches too, and two threads read the KV
 * twice (110M shape, 12 heads of 64, two threads: 1.3-2x the attention
 * time, by context). */
#ifndef CK_CPU_ATTN_WALK_H
#define CK_CPU_ATTN_WALK_H

#include <stddef.h>

#include "cpu_attn.h"

typedef struct kv_walk {
    const float *const *blk; /* the blocks' K rows, in order */
    const int *rows;         /* positions in each */
    int n_blk, b, t;         /* now at block b, row t */
} kv_walk;

static inline kv_walk kv_walk_start(const float *const *blk, const int *rows, int n_blk) {
    return (kv_walk){blk, rows, n_blk, 0, 0};
}

/* The row of w's position (its K row plus `off` floats: 0 for K,
 * block_size * kv_dim for V) and a step to the next position; NULL past
 * the last one. */
static inline const float *kv_walk_next(kv_walk *w, size_t kv_dim, size_t off) {
    while (w->b < w->n_blk && w->t >= w->rows[w->b]) w->b++, w->t = 0;
    if (w->b >= w->n_blk) return NULL;
    return w->blk[w->b] + off + (size_t)w->t++ * kv_dim;
}

/* The columns of a K or V row that heads [h0, h1) read: from float *c0,
 * *bytes of them. */
static inline void attn_head_cols(const attn_shape *s, int h0, int h1, size_t *c0, size_t *bytes) {
    const size_t k0 = (size_t)(h0 / s->gqa), k1 = (size_t)((h1 - 1) / s->gqa) + 1;
    *c0 = k0 * (size_t)s->head_dim;
    *bytes = (k1 - k0) * (size_t)s->head_dim * sizeof(float);
}

#endif
