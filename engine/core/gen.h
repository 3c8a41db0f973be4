/* gen.h - generate text for one sequence: prefill, then decode.
 *
 * The single-sequence driver behind `confkv generate` and `confkv eval`
 * (the scheduler in engine.h batches many sequences). It only runs the
 * forward passes: every token, its confidence, its text and the stop
 * decision come from the token pipeline (pipeline.h), the engine's own, so
 * the two cannot drift apart. A gen_ctx borrows a backend and its KV pool
 * and owns one sequence's block table, a sampler and a logits buffer, all
 * sized at gen_new; a run allocates its result arrays once, at its start.
 *
 * If a policy (kvpol.h) is attached, it runs after every decode step and
 * decides which blocks stay hot for the next one. */
#ifndef CK_GEN_H
#define CK_GEN_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "kv.h"
#include "model.h"
#include "pipeline.h"
#include "samp.h"

struct kvpol;

#define GEN_MAX_STOPS 8

typedef struct gen_params {
    samp_params samp;
    int max_tokens; /* completion tokens at most */
    int n_stop;
    const char *stop[GEN_MAX_STOPS]; /* stop strings (borrowed); the text ends before one */
    int want_trace;                  /* keep every token's confidence */
    int ignore_eos;                  /* do not stop on EOS/BOS (benchmarks, eval) */
    /* Teacher forcing (eval): when force != NULL, decode these tokens instead
     * of sampling, and report each step's log-probability of the forced token. */
    const int32_t *force;
    int n_force;
    /* Logits tap (optional): called once a step with the logits the sampler
     * is about to see (step 0 = after the prompt, step i = after completion
     * token i-1), borrowed for the call. A nonzero return ends the run with
     * that code. For `confkv generate --dump-logits`. */
    int (*on_logits)(void *ud, int step, const float *logits, int n_vocab);
    void *on_logits_ud;
} gen_params;

void gen_params_default(gen_params *p);

/* The pipeline's reasons (pipeline.h), which ends a full context with
 * LENGTH; CONTEXT is the service's (svc_result.c). */
enum {
    GEN_FINISH_LENGTH = PIPELINE_FINISH_LENGTH,
    GEN_FINISH_STOP = PIPELINE_FINISH_STOP,
    GEN_FINISH_CONTEXT = 2
};

typedef struct gen_result {
    int n_prompt;     /* prompt tokens (BOS included) */
    int n_tokens;     /* completion tokens */
    int32_t *tokens;  /* (n_tokens) completion ids */
    samp_conf *trace; /* (n_tokens) when want_trace */
    double *logp;     /* (n_tokens) log p(token) under the model, when force */
    int32_t *argmax;  /* (n_tokens) the model's argmax at each step, when force */
    char *text;       /* completion text, NUL-terminated (may hold NUL bytes: use text_len) */
    size_t text_len;
    int finish; /* GEN_FINISH_* */
    double sum_entropy, sum_gap, sum_pmax;
    double prefill_s, decode_s;
    /* KV accounting, in tokens, summed over decode steps */
    double hot_token_steps, full_token_steps;
    int hot_peak_tokens, full_peak_tokens;
    /* the same in bytes: int8 blocks at their real size, scales included;
     * the full cache is all f32 */
    double hot_byte_steps, full_byte_steps;
    size_t hot_peak_bytes;
    int retries; /* steps run again with a larger cache (kvpol_retry) */
    size_t cap_; /* entries the arrays above were sized for */
} gen_result;

void gen_result_free(gen_result *r);
const char *gen_finish_name(int finish); /* "length", "stop" */

typedef struct gen_ctx gen_ctx;

/* The context borrows b and pool (both must outlive it) and owns its
 * sequence. max_ctx: longest sequence, <= the backend's. */
int gen_new(const model *m, backend *b, kv_pool *pool, int seq_id, gen_ctx **out);
void gen_free(gen_ctx *g);
/* Attach a policy (borrowed; NULL = keep everything hot). */
void gen_set_policy(gen_ctx *g, struct kvpol *pol);
/* Run one generation from `prompt` (BOS included by the caller). The
 * sequence starts empty and is reset at the end. Returns 0 or a CK_E* code
 * (CK_ETOOLONG if the prompt does not fit the context, CK_ENOSPACE if the
 * KV pool cannot hold what the policy keeps hot). */
int gen_run(gen_ctx *g, const int32_t *prompt, int n_prompt, const gen_params *p, gen_result *r);

#endif
