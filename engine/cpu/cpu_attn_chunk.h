/* cpu_attn_chunk.h - a prefill chunk's attention by tiles (cpu/simd's
 * cpu_attn_tile.h) for the attention layer kind (cpu_layer_attn.c).
 *
 * The span's tokens go in runs of one sequence; each run of two tokens or
 * more is cut into tiles of queries, and each (tile, KV head) walks the
 * run's KV blocks once. A run of one token (a decode step batched with a
 * prefill chunk) has nothing to share its blocks with: it goes through the
 * caller's token path (`token`). It takes a span when the layer's
 * token-by-token path would run cpu_attn.h's vector kernels (a head size
 * they take; below AVX2 and for stories260K's head size of 8 the general
 * code keeps llama2.c's bits), a run of the span has two tokens or more,
 * and every block such a run reads is f32. Otherwise (a decode batch, an
 * int8 block of CONF-KV's tier, a scratch slot too small) the caller's
 * token path runs and nothing here was written. */
#ifndef CK_CPU_ATTN_CHUNK_H
#define CK_CPU_ATTN_CHUNK_H

#include "cpu_layer.h"

/* The attention of span s's tokens (their K and V rows already written),
 * the lone ones by token(cb, bt, s->l, i, slot, s->mass_scale):
 * cb->att_out's rows, and each block's mass added into its sequence's
 * (times s->mass_scale). Returns 1 when done, 0 when the token path must
 * run (nothing written), -1 when a tile refused what the checks before it
 * passed (a fault here: the token path must run, and the masses of the
 * tiles and lone tokens that ran are then counted twice). Uses cb->scores' slots as scratch, and
 * cb->att_blk / cb->att_rows slot s->slot for a run's block list. */
typedef void (*cpu_attn_token_fn)(cpu_backend *cb, const be_batch *bt, int l, int i, int slot,
                                  float mass_scale);
int cpu_attn_chunk(cpu_backend *cb, const cpu_span *s, cpu_attn_token_fn token);

#endif
