/* kvm.h - the KV manager: where every sequence's KV blocks are.
 *
 * The scheduler decides who runs; the KV manager decides where blocks go
 * (as vLLM v1's scheduler and kv_cache_manager). It owns the hot pools (f32
 * and int8), the warm tiers (f32, and int8 for compressing policies) and
 * the movers that carry plans out (mv.h), all sized at kvm_init. It
 * answers the scheduler's questions:
 *   - kvm_commitment: the pool blocks a request may hold at most, from its
 *     policy's steady-state need (kvpol_steady_blocks), or its whole prompt
 *     while it is prefilled;
 *   - kvm_place: reserve KV for n more tokens of a sequence: KVM_PLACED, or
 *     KVM_NO_ROOM (the scheduler then shrinks or preempts and asks again);
 *   - kvm_shrink: ask a sequence's policy to give blocks back;
 *   - kvm_park / kvm_resume: a preempted sequence's blocks to the warm tiers
 *     and back, unchanged, whatever its policy;
 *   - kvm_attach_prefix / kvm_publish: blocks copied in from and out to the
 *     prefix cache (pfx.h).
 * It never looks at a request's priority, and never tests a policy's kind.
 *
 * Not thread-safe: the engine thread owns it. */
#ifndef CK_KVMGR_H
#define CK_KVMGR_H
#include <stddef.h>
#include <stdint.h>

#include "cold.h"
#include "kv.h"
#include "kvpol.h"

struct backend;
struct tier;
struct mover;
struct pfx;

enum { KVM_NO_ROOM = 0, KVM_PLACED = 1 };

typedef struct kvm_config {
    struct backend *b; /* borrowed */
    int n_blocks;      /* hot pool blocks (f32; the int8 pool has as many) */
    int block_size;
    size_t warm_budget_bytes; /* each warm tier (0 = tier_config_default's) */
    cold_store *cold;         /* borrowed; NULL = no cold tier */
    uint64_t instance;        /* the tiers' key instance (bit 0 is the int8 tier's) */
    size_t staging_bytes;     /* a mover's batch buffer, at most (mv_batch_for) */
} kvm_config;

typedef struct kvm {
    struct backend *b;
    int bs;
    kv_pool pool, pool8;      /* hot f32 blocks; hot int8 blocks */
    struct tier *warm;        /* f32 (exact) warm tier: f32 policies, parked f32 blocks */
    struct tier *warm8;       /* int8 warm tier: compressing policies, parked int8 blocks */
    struct mover *mv, *mv8;   /* the plans of policies on warm / warm8 */
    size_t warm_budget_bytes; /* as resolved */
    float *blockbuf;          /* (one f32 block) in transit: parking, publishing */
    void *bytebuf;            /* (one int8 block) in transit */
} kvm;

/* Build everything (nothing is allocated after). Returns 0 or CK_E* with err. */
int kvm_init(kvm *k, const kvm_config *c, char *err, size_t errlen);
void kvm_free(kvm *k);
/* Bytes kvm_init allocates besides the pools and tiers (the memory plan). */
size_t kvm_host_bytes(size_t block_bytes, size_t block8_bytes, size_t staging_bytes);

/* A policy for a new sequence, on the mover of its tier. */
int kvm_policy_new(kvm *k, const kvpol_config *pc, kvpol **out);
/* Pool blocks a request may hold at most: its policy's steady need for a
 * sequence of n_prompt + limit tokens, or (prefilled = 0) its n_hist
 * tokens + 1 block while its prompt goes in. */
int kvm_commitment(const kvm *k, const kvpol_config *pc, int n_prompt, int limit, int n_hist, int prefilled);

/* Blocks n more tokens of s need; blocks free now. */
int kvm_need(const kvm *k, const kv_seq *s, int n);
static inline int kvm_free_blocks(const kvm *k) { return k->pool.n_free; }
/* Tokens from s's end that fit its current last block plus the free blocks. */
int kvm_fit_tokens(const kvm *k, const kv_seq *s);
/* Reserve KV for n tokens of s: KVM_PLACED, KVM_NO_ROOM (the pool is
 * short; blocks taken so far stay with s), or CK_E* (s is past its table). */
int kvm_place(kvm *k, kv_seq *s, int n);
/* Ask s's policy for `blocks` blocks back (kvpol_make_room). */
void kvm_shrink(kvm *k, kvpol *pol, kv_seq *s, int blocks);

/* Move every written hot block (f32 and int8) of s to the warm tiers (f32
 * blocks to the exact f32 tier, int8 ones to the int8 tier as they are);
 * blocks reserved but not yet written go back to the pool. `moved` is the
 * caller's (max_blocks) record of which blocks left, kept for kvm_resume.
 * Returns 0; CK_ENOSPACE when a tier has fewer free slots than the blocks
 * it would take (then nothing moved: the caller recomputes instead);
 * CK_EBACKEND/CK_E* when a block could not be read (s is then in an
 * unspecified state: release and reset it). */
int kvm_park(kvm *k, kv_seq *s, uint8_t *moved);
/* Pool blocks a parked s needs for its next n tokens: its f32 blocks
 * coming back, and the new blocks of the chunk. */
int kvm_resume_need(const kvm *k, const kv_seq *s, const uint8_t *moved, int n);
/* Recall what kvm_park moved, each block as soon as it is warm and its
 * pool has a free block: the rest stay recorded in `moved`. Returns 0 when
 * all are back; CK_EBUSY when some are not yet (being fetched from the cold
 * store, or no free pool block): call again later; CK_ESTATE when one was
 * lost: the sequence must be reset and recomputed. */
int kvm_resume(kvm *k, kv_seq *s, uint8_t *moved);
/* Give back every block of s but its f32 hot ones (warm slots in both
 * tiers, int8 blocks), through its policy; then, when reset, the f32 hot
 * blocks too (s can be computed again from position 0). */
void kvm_release(kvm *k, kvpol *pol, kv_seq *s, int reset);

/* Copy the first n_blocks blocks named `names` from the prefix cache into
 * s (empty); stops at the first one the cache no longer has or the pool
 * cannot take. Returns 0 or the backend's error. */
int kvm_attach_prefix(kvm *k, struct pfx *pfx, kv_seq *s, const uint64_t *names, int n_blocks);
/* Put s's hot blocks [0, n_blocks) into the prefix cache under `names`
 * (flags: PFX_PIN, PFX_PERSIST). Best effort: a block that cannot be read or
 * kept is skipped. */
void kvm_publish(kvm *k, struct pfx *pfx, const kv_seq *s, const uint64_t *names, int n_blocks, int flags);
/* Hot bytes now (f32 + int8 blocks in use). */
size_t kvm_hot_bytes(const kvm *k);

#endif
