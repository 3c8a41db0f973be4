/* tier.h - the warm tier (host memory, optionally int8) and the spill path
 * to the cold tier.
 *
 * A tier holds KV blocks that left the hot pool. Its memory is one slab of
 * fixed-size slots allocated at tier_new (budget_bytes / slot size), so
 * demotion and recall allocate nothing. When the slab is full, the least
 * recently used slot is spilled to the cold store (cold.h) if one is
 * attached, else dropped; either way the owning sequence's table is updated
 * (KV_TIER_COLD or KV_TIER_DROPPED) and counted. A cold block comes back by
 * tier_fetch, asynchronously: when the store answers (during tier_poll) the
 * block lands in a warm slot and the owner's entry turns KV_TIER_WARM again.
 * The engine never waits on the cold store. With a fingerprint, a spilled
 * block is written in coldfmt.h form (header, zstd, checksum) and a fetched
 * one is verified before it lands: a value that fails is an integrity
 * failure, counted and treated as a miss (the block is dropped), never KV.
 * Keys are "kv:<nonce>:<instance>:<record>:<generation>", the nonce random
 * per tier, so two processes sharing a store never read each other's spills.
 *
 * The tier keeps a back-pointer to the owning kv_seq of every slot and cold
 * record: a sequence must release its blocks (tier_release_seq) before its
 * kv_seq moves or is freed. One thread (the engine's) uses a tier. */
#ifndef CK_TIER_H
#define CK_TIER_H
#include <stddef.h>
#include <stdint.h>

#include "cold.h"
#include "kv.h"
#include "kvq.h"

struct backend;

typedef struct tier_config {
    kvq_shape shape;         /* block geometry */
    int compress;            /* store int8 (kvq.h) instead of f32 */
    size_t budget_bytes;     /* warm capacity */
    int max_cold;            /* cold records the tier can track */
    cold_store *cold;        /* borrowed; NULL = no cold tier (spills are drops) */
    uint64_t instance;       /* distinguishes this tier's keys in a shared store */
    const char *fingerprint; /* borrowed (model->fingerprint, 16 hex digits): cold
                             values are coldfmt.h blocks, verified on the way back;
                             NULL = the slot's raw bytes, checked by length only */
} tier_config;

/* Shape from the backend; budget 4x the hot pool; no compression; the
 * model's fingerprint (cold blocks in coldfmt.h form). */
void tier_config_default(tier_config *c, const struct backend *b);

typedef struct tier_stats {
    uint64_t puts, gets;     /* demotions in, recalls out */
    uint64_t spills;         /* warm -> cold writes started */
    uint64_t spill_failures; /* cold writes that failed (block dropped) */
    uint64_t fetches, fetch_hits, fetch_misses;
    uint64_t integrity_failures; /* fetched values coldfmt refused (counted in fetch_misses too) */
    uint64_t drops;              /* blocks lost (no cold tier, or it failed) */
    size_t bytes, peak_bytes;    /* warm bytes in use */
    int slots_used, n_slots;
} tier_stats;

typedef struct tier tier;

int tier_new(const tier_config *c, tier **out);
void tier_free(tier *t);
size_t tier_slot_bytes(const tier *t);

/* Store block data (f32, kv.h layout, n_tokens written) for (owner,
 * logical) and mark the owner's entry KV_TIER_WARM with its slot. Spills or
 * drops the LRU slot when full. Returns 0 or CK_ENOSPACE (no slot at all). */
int tier_put(tier *t, kv_seq *owner, int logical, const float *block, int n_tokens);
/* The same for a block already in int8 form (kvq.h bytes); only for a tier
 * with compress set (CK_EINVAL otherwise). */
int tier_put_raw(tier *t, kv_seq *owner, int logical, const void *bytes, int n_tokens);
/* Copy a compressed slot's bytes out (compress set) and free the slot. */
int tier_take_raw(tier *t, int slot, void *dst);
/* Expand slot into dst (f32 block) and free the slot. The caller turns the
 * owner's entry hot. Returns 0 or CK_EINVAL for a bad slot. */
int tier_take(tier *t, int slot, float *dst);
/* Raw bytes of a slot and whether they are int8 (for a backend that
 * attends over compressed blocks directly). */
const void *tier_slot_data(const tier *t, int slot);
/* Mark a slot as just used (LRU). */
void tier_touch(tier *t, int slot);
/* Ask the cold store for (owner, logical)'s block (entry KV_TIER_COLD).
 * Returns 0 when the request is in flight or already in flight. */
int tier_fetch(tier *t, kv_seq *owner, int logical);
/* Deliver cold-store completions (calls cold_poll). */
void tier_poll(tier *t);
/* Forget every warm slot and cold record of a sequence (deleting its cold
 * keys) and mark its entries empty. */
void tier_release_seq(tier *t, kv_seq *owner);
const tier_stats *tier_get_stats(const tier *t);
/* Blocks tier_put can take now without dropping one: the free slots, plus,
 * with a cold store attached, as many as it has cold records left (each put
 * past the free slots spills the least recently used slot). */
int tier_room(const tier *t);

#endif
