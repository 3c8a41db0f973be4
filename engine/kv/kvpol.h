/* kvpol.h - KV cache policies: which blocks of a sequence stay hot.
 *
 * A kvpol is one sequence's policy state. After every decode step the
 * engine hands it the step's confidence signals; the policy updates its hot
 * budget and moves blocks: demotes hot blocks that fall out of the budget and
 * recalls warm blocks that come back into it (tier.h holds them), or drops
 * blocks for good (policies without tiers).
 *
 * Named policies (kvpol_parse):
 *   full        every block stays hot
 *   window:N    the most recent N tokens
 *   sinks:N     4 sink tokens + the most recent tokens, N in all (StreamingLLM)
 *   h2o:N       heavy hitters by accumulated attention + recent tokens, N in all
 *   conf        CONF-KV: confidence-driven budget, importance x recency ranking,
 *               demotion to and recall from the warm tier
 *   conf-int8   conf with int8 KV (cache_compression)
 * A spec may carry parameters: "conf:min_size=32,recent_window=32".
 *
 * Decide, then move: the kvpol_plan_* calls only read the block table and
 * write a plan (mv.h); a mover executes it. kvpol_after_step and the
 * other one-call forms do both. Park/resume of a preempted sequence is the
 * KV manager's (kvm.h), not a policy's.
 *
 * Ownership: kvpol_new borrows the backend, pool and tier, which must outlive
 * the policy. No function allocates after kvpol_new. */
#ifndef CK_POLICY_H
#define CK_POLICY_H
#include <stddef.h>
#include <stdint.h>

#include "eng_types.h" /* samp_conf: the signals a step's token came with */
#include "kv.h"

/* A kind is the policies' business: no other module tests it (they ask
 * kvpol_steady_blocks, kvpol_can_shrink). kvpol_config is in eng_types.h:
 * the engine's configuration embeds a default policy. */
enum { KVPOL_FULL = 0, KVPOL_WINDOW, KVPOL_SINKS, KVPOL_H2O, KVPOL_CONF };

/* Defaults for a kind (the sweep's winners, docs/BENCHMARKS.md). */
void kvpol_config_default(kvpol_config *c, int kind);
/* kvpol_parse: eng_types.h */
/* Canonical spec of a config ("window:57", "conf", ...) into buf. */
void kvpol_name(const kvpol_config *c, char *buf, size_t cap);

typedef struct kvpol_stats {
    uint64_t demotions;      /* hot -> warm (or dropped) */
    uint64_t recalls;        /* warm -> hot */
    uint64_t drops;          /* blocks lost for good */
    uint64_t spills;         /* warm -> cold */
    uint64_t budget_changes; /* = budget_grows + budget_shrinks */
    uint64_t budget_grows, budget_shrinks;
    uint64_t breaker_trips;
    uint64_t compressions; /* f32 hot -> int8 hot */
    uint64_t retries;      /* uncertain steps rerun with recalled blocks */
    int budget;            /* current hot budget, tokens */
} kvpol_stats;

struct backend;
struct tier;
struct mover;
struct kv_plan;
typedef struct kvpol kvpol;

/* Pool blocks a sequence under policy c may hold at most once the policy
 * has settled (its commitment: engine.h, Scheduling), for a block size bs
 * and a whole sequence of full_blocks blocks: the whole sequence for full,
 * the window for window/sinks/h2o, the protected blocks and min_size for
 * conf. At most full_blocks. */
int kvpol_steady_blocks(const kvpol_config *c, int bs, int full_blocks);
/* 1 when the policy may shrink a sequence below its budget to make room for
 * others (kvpol_make_room under memory pressure): CONF-KV. */
int kvpol_can_shrink(const kvpol_config *c);
/* 1 when the policy keeps every block hot (full): a caller may skip the
 * policy altogether (the evaluator's reference run). */
int kvpol_keeps_all(const kvpol_config *c);
/* 1 while the circuit breaker holds this sequence at min_size (NULL: 0). */
int kvpol_breaker_engaged(const kvpol *p);

/* pool8: the int8 block pool for cache_compression's compressed hot blocks
 * (NULL, or a backend without int8 blocks: hot blocks stay f32 and only the
 * warm tier is int8). warm: NULL = demoted blocks are dropped. The policy
 * makes a mover of its own (mv.h) for these. */
int kvpol_new(const kvpol_config *c, struct backend *b, kv_pool *pool, kv_pool *pool8, struct tier *warm,
              kvpol **out);
/* The same with a shared mover (borrowed; it must outlive the policy): its
 * backend, pools and tier are the policy's. */
int kvpol_new_mv(const kvpol_config *c, struct mover *mv, kvpol **out);
/* A policy that only plans (kvpol_plan_*; no backend, nothing moves): for
 * tests and tools. pool: the hot pool (the circuit breaker reads its use);
 * int8: hot blocks may be compressed; tiered: a warm tier takes demoted
 * blocks. */
typedef struct kvpol_geom {
    int vocab;      /* the model's vocabulary (entropy thresholds scale with it) */
    int max_blocks; /* the longest sequence's block table */
    kv_pool *pool;
    int int8, tiered;
} kvpol_geom;
int kvpol_new_planner(const kvpol_config *c, const kvpol_geom *g, kvpol **out);
void kvpol_free(kvpol *p);
/* A new sequence starts (stats and signal state reset). */
void kvpol_begin(kvpol *p, kv_seq *s);

/* Plans. Each decides, from s's block table and the policy's state, which
 * blocks should be hot, and writes the moves that get there into a plan
 * (mv.h) owned by the policy, valid until its next plan; nothing moves.
 * The caller executes it with mv_run. */
/* After the prompt is in: the starting budget. */
int kvpol_plan_prefill(kvpol *p, kv_seq *s, const struct kv_plan **plan);
/* After a decode step with its signals: fold attention mass into
 * importance, move the budget. A warm tier's cold answers must have landed
 * first (mv_poll), as they decide what can be recalled. */
int kvpol_plan_step(kvpol *p, kv_seq *s, const samp_conf *conf, const struct kv_plan **plan);
/* 1 and a plan when the step just computed was uncertain (entropy above
 * retry_entropy or p_max below retry_pmax) and blocks of the sequence are
 * warm: recall the best of them up to retry_size tokens. Else 0. */
int kvpol_plan_retry(kvpol *p, kv_seq *s, const samp_conf *conf, const struct kv_plan **plan);
/* Shrink the hot set by `blocks` blocks (least important unprotected
 * first). CK_ENOSPACE for a policy that keeps everything (full). */
int kvpol_plan_room(kvpol *p, kv_seq *s, int blocks, const struct kv_plan **plan);

/* Plan and move in one call, with the policy's mover (CK_ESTATE for a
 * planner). */
/* After the prompt is in: apply the starting budget. */
int kvpol_after_prefill(kvpol *p, kv_seq *s);
/* After a decode step with its signals: fold attention mass into
 * importance, move the budget, demote and recall. Returns 0 or CK_E*. */
int kvpol_after_step(kvpol *p, kv_seq *s, const samp_conf *conf);
/* If the step just computed was uncertain (entropy above retry_entropy or
 * p_max below retry_pmax) and blocks of the sequence are warm, recall the
 * best of them up to retry_size tokens and return 1: the caller runs the
 * step again with them. Else 0. CONF-KV only. */
int kvpol_retry(kvpol *p, kv_seq *s, const samp_conf *conf);
/* The pool cannot give `blocks` more blocks: demote this sequence's least
 * important unprotected blocks. Returns 0 or CK_ENOSPACE. */
int kvpol_make_room(kvpol *p, kv_seq *s, int blocks);
/* Release the sequence's warm slots and int8 hot blocks (its f32 hot
 * blocks stay with it: kv_seq_reset releases those). */
void kvpol_end(kvpol *p, kv_seq *s);
/* The mover the policy's plans run with (NULL for a planner). */
struct mover *kvpol_mover(const kvpol *p);
const kvpol_stats *kvpol_get_stats(const kvpol *p);

#endif
