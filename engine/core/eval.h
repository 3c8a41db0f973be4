/* eval.h - compare KV policies on quality per byte.
 *
 * For each prompt, the full cache generates a greedy reference continuation
 * of gen_tokens tokens (end-of-text tokens do not stop it). Then, per
 * policy, two runs over every prompt:
 *  - forced: the reference tokens are fed back with the policy deciding at
 *    every step what stays hot; each step's log-probability of the reference
 *    token and its argmax are recorded (so the compressed cache is in the
 *    loop, and all policies see the same tokens);
 *  - free: greedy decoding under the policy, compared with the reference.
 * Memory figures come from the forced runs. Every run is gen_run, so every
 * token goes through the engine's token pipeline (pipeline.h); forcing is its
 * `force` option, not a loop of its own. One eval_ctx per thread. */
#ifndef CK_EVAL_H
#define CK_EVAL_H
#include <stdint.h>

#include "backend.h"
#include "kv.h"
#include "model.h"
#include "kvpol.h"

typedef struct eval_row {
    char policy[64];           /* canonical name, e.g. "window:57" */
    char matched_to[64];       /* "" unless budget-matched */
    double kv_retained_mean;   /* sum hot tokens / sum full tokens over steps */
    double kv_retained_peak;   /* max hot tokens / max full tokens (per run, worst) */
    double kv_hot_bytes_ratio; /* like retained_mean, in bytes (int8 at real size) */
    double nll, ppl, nll_delta_pct;
    double top1_agreement; /* argmax == reference token */
    double greedy_match_tokens_mean;
    double free_kv_retained_mean; /* free runs: mean over prompts of each run's hot / full token-steps
                                     (what confkvd reports per job as kv.retained_mean) */
    double recalls_per_1k, demotions_per_1k;
    double tokens_per_s;   /* forced decode */
    int probe_occurrences; /* probe names after the probe start, in references */
    double probe_accuracy; /* of those, fraction whose first token the policy predicts */
} eval_row;

typedef struct eval_ctx eval_ctx;

/* Borrow m, b, pool and pool8 (int8 blocks; may be empty). */
int eval_new(const model *m, backend *b, kv_pool *pool, kv_pool *pool8, int gen_tokens, eval_ctx **out);
void eval_free(eval_ctx *e);
/* Add a prompt (text; BOS is prepended) and compute its reference.
 * probe_name: NULL, or a word whose occurrences at completion positions >=
 * probe_from are scored. Returns 0 or CK_E*. */
int eval_add_prompt(eval_ctx *e, const char *text, const char *probe_name, int probe_from);
int eval_n_prompts(const eval_ctx *e);
/* Run a policy over every prompt. free_run: also the free greedy runs.
 * `full_nll` (the full policy's nll, or 0) gives nll_delta_pct. */
int eval_policy(eval_ctx *e, const kvpol_config *c, int free_run, double full_nll, eval_row *row);
/* Search the budget of a fixed-budget policy (window, sinks, h2o) whose
 * kv_retained_mean is closest to target (stops within tol, relative), and
 * fill row with that run (matched_to = target_name). */
int eval_match(eval_ctx *e, const kvpol_config *c, double target, double tol, const char *target_name,
               double full_nll, eval_row *row);

#endif
