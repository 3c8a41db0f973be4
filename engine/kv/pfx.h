/* pfx.h - the prefix cache: full KV blocks kept by content, so a request
 * whose tokens begin like an earlier one's skips computing them.
 *
 * A block is named by a hash chain: h(0) = pfx_root(fingerprint), and block j
 * of a token sequence is h(j+1) = pfx_next(h(j), its block_size tokens). The
 * name covers every token before the block and the model, so equal names
 * mean equal KV (XXH64: a collision is a 2^-64 event per pair).
 *
 * Tiers. Blocks live in a host slab (the warm tier for prefixes: f32, exact),
 * least recently used first out. A pinned block (a template's) is never
 * evicted; pins are capped at half the slab. A block written with
 * PFX_PERSIST also goes to the cold store (cold.h) under
 * "pfx:<fingerprint>:<hash>" in coldfmt.h form (tag = its hash, logical =
 * its index), so another process, or this one after a restart, can fetch it
 * back: pfx_fetch starts a get, and the answer, verified, lands in the slab
 * during cold_poll. A value that fails verification is an integrity failure
 * and a miss, never KV. A block hit promote_hits times is persisted and
 * pinned by itself (a prefix used often becomes a template).
 *
 * Waiters. pfx_fetch counts each started get in *waiter and decrements it
 * when the answer is in (hit or miss); pfx_forget_waiter detaches a waiter
 * that goes away first. One thread (the engine's) uses a cache; nothing is
 * allocated after pfx_new except by the cold store. */
#ifndef CK_PREFIX_H
#define CK_PREFIX_H
#include <stddef.h>
#include <stdint.h>

#include "cold.h"
#include "kvq.h"

enum { PFX_PIN = 1, PFX_PERSIST = 2 };
/* Where a block was found (pfx_find's *tier). */
enum { PFX_HIT_WARM = 1, PFX_HIT_COLD = 2, PFX_HIT_TEMPLATE = 3 };

typedef struct pfx_config {
    kvq_shape shape;         /* block geometry: f32 blocks, kv.h layout */
    size_t budget_bytes;     /* host slab (0 = no host cache: everything misses) */
    const char *fingerprint; /* borrowed: model->fingerprint, 16 hex digits */
    cold_store *cold;        /* borrowed; NULL = host only */
    int promote_hits;        /* hits that promote a block (0 = never) */
    int max_fetches;         /* cold gets in flight at most (256) */
} pfx_config;

typedef struct pfx_stats {
    uint64_t lookups;                             /* pfx_find calls */
    uint64_t hits_warm, hits_cold, hits_template; /* by where the block came from */
    uint64_t inserts, evictions, promotions;
    uint64_t persisted; /* cold writes started */
    uint64_t persist_failures;
    uint64_t fetches, fetch_hits, fetch_misses;
    uint64_t integrity_failures;
    int used, pinned, n_slots;
    size_t bytes;
} pfx_stats;

typedef struct pfx pfx;

int pfx_new(const pfx_config *c, pfx **out);
/* Waits (polling the store, at most about a second) for writes in flight. */
void pfx_free(pfx *p);

uint64_t pfx_root(const char *fingerprint);
uint64_t pfx_next(uint64_t parent, const int32_t *tokens, int n);

/* The slot holding block `hash`, or -1. A hit counts toward promotion and
 * *tier (may be NULL) says how it got here. */
int pfx_find(pfx *p, uint64_t hash, int *tier);
/* Is the block here? No counting, no LRU touch. */
int pfx_has(const pfx *p, uint64_t hash);
const float *pfx_block(const pfx *p, int slot);
/* Copy an f32 block (block index `logical` of its sequence) in under hash.
 * Already present: only adds the flags (pin, persist once). Returns 0;
 * CK_ENOSPACE when every slot is pinned. */
int pfx_insert(pfx *p, uint64_t hash, int logical, const float *block, int flags);
/* Ask the cold store for block `hash` (index `logical`). Returns 0 when the
 * get started (*waiter incremented); CK_ENOTFOUND without a cold store;
 * CK_EBUSY when max_fetches are in flight; the store's refusal. */
int pfx_fetch(pfx *p, uint64_t hash, int logical, int *waiter);
void pfx_forget_waiter(pfx *p, const int *waiter);
/* Cold requests (writes and gets) not yet answered. */
int pfx_in_flight(const pfx *p);
const pfx_stats *pfx_get_stats(const pfx *p);

#endif
