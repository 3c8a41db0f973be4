/* mv.h - the one place KV blocks move: it executes a policy's plan
 * (kvpol.h: which blocks to demote, recall, fetch, compress) between the
 * hot pools, the warm tier and the cold store, through the backend.
 *
 * Decide, then move: a policy only looks at a sequence's block table and
 * writes a kv_plan; the mover does every read, write and tier call. Block
 * copies go in batches of up to `batch` blocks through the backend's
 * kv_read_batch / kv_write_batch when it has them (a device backend queues a
 * whole batch on one copy stream), else block by block through kv_read /
 * kv_write. Batching changes no result: the pool allocations, tier puts and
 * releases happen in the plan's order, only the copies are grouped.
 *
 * Ownership: mv_new borrows the backend, the pools and the tier, which must
 * outlive the mover; it allocates its staging buffers (batch blocks) once,
 * and nothing after. One mover serves every sequence whose blocks go to its
 * tier (the engine has one per warm tier). Not thread-safe. */
#ifndef CK_MOVER_H
#define CK_MOVER_H
#include <stddef.h>
#include <stdint.h>

#include "kv.h"

struct backend;
struct tier;

/* What to do with a block that is wanted hot (kv_plan.up_op). */
enum {
    MV_RECALL = 1,  /* warm -> hot f32 block */
    MV_RECALL8 = 2, /* warm -> hot int8 block */
    MV_FETCH = 3,   /* cold -> warm (asynchronous: hot in a later plan) */
    MV_COMPRESS = 4 /* f32 hot -> int8 hot */
};

/* A policy's decision for one sequence. demote[] come first (they free the
 * pool blocks the recalls take), then up[] in order; an up entry that finds
 * its pool full stops the rest (the next step tries again). The arrays are
 * the policy's, max_blocks long, valid until its next plan. */
typedef struct kv_plan {
    int n_demote;
    const int32_t *demote; /* logical blocks that leave the hot pools */
    int drop;              /* demoted f32 blocks are dropped (no warm tier for them) */
    int n_up;
    const int32_t *up;    /* logical blocks wanted hot, ascending */
    const uint8_t *up_op; /* (n_up) MV_* */
} kv_plan;

/* What a plan did (added to the caller's counts). */
typedef struct mv_counts {
    uint64_t demoted;    /* blocks out of the hot pools (warm or dropped) */
    uint64_t dropped;    /* of which lost for good, and recalls that found a block gone */
    uint64_t recalled;   /* warm -> hot */
    uint64_t compressed; /* f32 hot -> int8 hot */
} mv_counts;

typedef struct mover mover;

/* pool8: int8 hot blocks (NULL: none). warm: NULL = demoted blocks are
 * dropped. batch: blocks per batched copy (at least 1). Returns 0,
 * CK_EINVAL or CK_ENOMEM. */
int mv_new(struct backend *b, kv_pool *pool, kv_pool *pool8, struct tier *warm, int batch, mover **out);
void mv_free(mover *m);
/* Blocks per batch that fit a staging budget of `bytes` (1 to 16): what the
 * engine sizes its movers with. */
int mv_batch_for(size_t bytes, size_t block_bytes);
/* Bytes mv_new allocates for `batch` blocks (the memory plan counts them). */
size_t mv_staging_bytes(int batch, size_t block_bytes, size_t block8_bytes);

struct backend *mv_backend(const mover *m);
kv_pool *mv_pool(const mover *m);
kv_pool *mv_pool8(const mover *m); /* NULL when int8 hot blocks are off */
struct tier *mv_tier(const mover *m);

/* Execute plan p on s. Returns 0, or the backend's error of a block that
 * could not be read out (the sequence is then as far as the plan got).
 * A block the tier cannot keep, or that cannot come back, is dropped and
 * counted (mv_counts). */
int mv_run(mover *m, kv_seq *s, const kv_plan *p, mv_counts *c);
/* One block back from the tier: warm slot -> a new pool block (int8 when
 * as_int8). CK_ENOSPACE when that pool is full (nothing changed); 0
 * otherwise, with the block hot, or dropped when it could not be read
 * (c->dropped counts it; c may be NULL). */
int mv_recall(mover *m, kv_seq *s, int j, int as_int8, mv_counts *c);
/* Answers the cold store has for this mover's tier land warm. */
void mv_poll(mover *m);

#endif
