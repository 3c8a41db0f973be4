/* policy.h - KV cache policies: which blocks of a sequence stay hot.
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
 * Ownership: kvpol_new borrows the backend, pool and tier, which must outlive
 * the policy. No function allocates after kvpol_new. */
#ifndef CK_POLICY_H
#define CK_POLICY_H
#include <stddef.h>
#include <stdint.h>

#include "kv.h"
#include "sampler.h"

enum { KVPOL_FULL = 0, KVPOL_WINDOW, KVPOL_SINKS, KVPOL_H2O, KVPOL_CONF };

typedef struct kvpol_config {
    int kind;                 /* KVPOL_* */
    int budget;               /* tokens (window, sinks, h2o) */
    int sink_tokens;          /* always-hot first tokens */
    int recent_window;        /* always-hot most recent tokens */
    int min_size;             /* CONF-KV budget floor, tokens */
    int base_size;            /* CONF-KV starting budget */
    int max_size;             /* CONF-KV budget ceiling */
    float scaling_factor;     /* fraction of the distance to max/min moved per step */
    float entropy_threshold;  /* nats; above = uncertain */
    float prob_gap_threshold; /* p1 - p2 below = uncertain */
    float max_prob_threshold; /* p_max below = uncertain */
    int adaptive;             /* thresholds=adaptive: calibrate from running quantiles */
    float signal_ema;         /* smoothing of the three signals (weight of the new value) */
    float score_ema;          /* decay of the attention-mass importance per step */
    float recency_weight;     /* importance bonus of recent blocks */
    int hysteresis;           /* steps a direction must hold before the budget moves */
    float retry_entropy;      /* nats (32k scale): a step above it reruns with recalled blocks; 0 = off */
    float retry_pmax;         /* a step whose p_max is below it reruns likewise; 0 = off */
    int retry_size;           /* budget, tokens, of a rerun step */
    int cache_compression;    /* int8 KV (warm, and hot blocks outside the recent window) */
    float breaker_threshold;  /* hot use / pool size that forces minimum budgets */
    float breaker_release;    /* ... until use falls below this */
} kvpol_config;

/* Defaults for a kind (the values that won the sweep, docs/BENCHMARKS.md). */
void kvpol_config_default(kvpol_config *c, int kind);
/* Parse a policy spec (see above). Returns 0 or CK_EINVAL with err filled. */
int kvpol_parse(const char *spec, kvpol_config *c, char *err, size_t errlen);
/* Canonical spec of a config ("window:57", "conf", ...) into buf. */
void kvpol_name(const kvpol_config *c, char *buf, size_t cap);

typedef struct kvpol_stats {
    uint64_t demotions;   /* hot -> warm (or dropped) */
    uint64_t recalls;     /* warm -> hot */
    uint64_t drops;       /* blocks lost for good */
    uint64_t spills;      /* warm -> cold */
    uint64_t budget_changes;
    uint64_t breaker_trips;
    uint64_t compressions; /* f32 hot -> int8 hot */
    uint64_t retries;      /* uncertain steps rerun with recalled blocks */
    int budget;           /* current hot budget, tokens */
} kvpol_stats;

struct backend;
struct tier;
typedef struct kvpol kvpol;

/* pool8: the int8 block pool for cache_compression's compressed hot blocks
 * (NULL, or a backend without int8 blocks: hot blocks stay f32 and only the
 * warm tier is int8). warm: NULL = demoted blocks are dropped. */
int kvpol_new(const kvpol_config *c, struct backend *b, kv_pool *pool, kv_pool *pool8,
              struct tier *warm, kvpol **out);
void kvpol_free(kvpol *p);
/* A new sequence starts (stats and signal state reset). */
void kvpol_begin(kvpol *p, kv_seq *s);
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
const kvpol_stats *kvpol_get_stats(const kvpol *p);

/* ============================================================ preemption
 * For the scheduler (engine.h): park a whole sequence in the warm tier and
 * bring it back unchanged, whatever the policy kind. `moved` is the caller's
 * (max_blocks) record of which blocks left and where, kept between the two
 * calls. `f32t` is where f32 hot blocks go: an f32 tier keeps them exact
 * (NULL: the policy's own tier, which quantizes them when it compresses);
 * int8 hot blocks go to the policy's tier as they are. A sequence with
 * blocks in f32t must also be released from it (tier_release_seq) when it
 * ends: kvpol_end only knows the policy's tier. */

/* Move every written hot block (f32 and int8) of s to the warm tiers;
 * blocks reserved but not yet written go back to the pool. Returns 0;
 * CK_ENOSPACE when a tier is missing or has fewer free slots than the
 * blocks it would take (then nothing moved: the caller recomputes instead);
 * CK_EBACKEND/CK_E* when a block could not be read (the sequence is then in
 * an unspecified state: release and reset it). */
int kvpol_preempt(kvpol *p, kv_seq *s, uint8_t *moved, struct tier *f32t);
/* Pool blocks kvpol_resume will take: f32 and int8. */
int kvpol_resume_blocks(const kvpol *p, const kv_seq *s, const uint8_t *moved, int *f32, int *i8);
/* Recall the blocks kvpol_preempt moved, in the form they left in (f32t as
 * given to kvpol_preempt), each as soon as it is warm and its pool has a
 * free block: the rest stay recorded in `moved` for the next call. Returns
 * 0 when all are back; CK_EBUSY when some are not yet (being fetched from
 * the cold store, or no free pool block): call again later (after
 * tier_poll); CK_ESTATE when one was lost (dropped by a tier): the sequence
 * must be reset and recomputed. The policy's statistics do not count these
 * moves. */
int kvpol_resume(kvpol *p, kv_seq *s, uint8_t *moved, struct tier *f32t);

#endif
