/* cpu_attn_tile.h - a prefill chunk's attention in tiles: the queries of one
 * sequence that share a KV head walk its f32 KV blocks once, block by block,
 * with an online softmax (a running max and sum per query head, the output
 * accumulator rescaled when the max grows).
 *
 * Why: token by token, each query re-reads every KV block of its context,
 * so a prompt of P tokens reads its KV P times. Here a tile of queries
 * (attn_tile_rows) reads a block's K and V rows of one KV head once, while
 * they sit in L1, and every query of the tile takes its scores and weighted
 * sum from them.
 *
 * The layer's features: GQA (the tile's rows are its tokens x the query
 * heads of the KV head), a sink logit per head (the running max starts at
 * the sink, the sum at 1: the sink is one more denominator term with no
 * value), the sliding window (a query at p reads positions (p - window, p])
 * and causal masking inside the chunk (each query reads up to its own
 * position). RoPE and the queries' position scale are applied before.
 *
 * The attention mass CONF-KV's policies accumulate needs each position's
 * normalised probability, which the online softmax knows only at the end.
 * Each (query head, block) keeps the running max it summed its block's
 * exponentials against and that sum (two floats, not the scores): at the
 * end the block's mass is sum * e^(max_then - max_final) / sum_final, a few
 * exponentials per block instead of a second pass over the scores.
 *
 * Scores, weighted sums: at ISA level AVX-512 (cpu_features.h) and head
 * sizes a multiple of 16 up to 128, cpu_attn_tile_avx512.c; otherwise the
 * gemm_kernels of the caller's ISA (cpu_gemm.h: dot, av). A test may force
 * each ISA.
 * Results equal cpu_attn.h's token-by-token kernels within float rounding
 * (the sums run in another order). Nothing is allocated; thread safety: a
 * call writes only its out rows, its mass and its scratch. */
#ifndef CK_CPU_ATTN_TILE_H
#define CK_CPU_ATTN_TILE_H

#include <stddef.h>

#include "cpu_attn.h"
#include "cpu_gemm.h"

typedef struct attn_tile {
    attn_shape s;            /* the layer's shape (its sinks) */
    int window;              /* > 0: a query at p sees (p - window, p]; 0: everything to p */
    const float *q;          /* n_tok rows, row i at q + i * q_stride: n_heads * head_dim */
    size_t q_stride;         /* floats */
    const int *pos;          /* (n_tok) each query's position */
    int n_tok;               /* queries */
    const float *const *blk; /* (n_blk) each block's K rows (block_size x kv_dim, V rows after) */
    const int *blk_j;        /* (n_blk) each block's logical index: positions j * block_size.. */
    int n_blk;               /* blocks, in increasing blk_j; every block a query reads is here */
    float *out;              /* n_tok rows at out + i * out_stride: n_heads * head_dim */
    size_t out_stride;       /* floats */
} attn_tile;

/* Floats of scratch attn_tile_run needs for rows query rows (tokens x gqa)
 * over n_blk blocks, with the mass (mass != 0) or without. */
size_t attn_tile_scratch(const attn_shape *s, int rows, int n_blk, int mass);

/* KV head g's query heads, at ISA level isa (gk: that level's kernels), for queries [i0, i1) of a: their out rows, and
 * into mass (n_blk floats, or NULL: not computed) each block's attention
 * mass summed over those queries and heads (=, not +=). scratch:
 * attn_tile_scratch(&a->s, (i1 - i0) * gqa, a->n_blk, mass != NULL)
 * floats. Returns 0, or -1 (nothing written) when the range, the scratch
 * or a query's positions (none visible among the blocks) is out of bounds. */
int attn_tile_run(const gemm_kernels *gk, int isa, const attn_tile *a, int g, int i0, int i1, float *mass,
                  float *scratch, size_t scratch_floats);

#endif
