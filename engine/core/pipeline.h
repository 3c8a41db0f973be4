/* pipeline.h - the token pipeline: one sequence's logits in; its next token,
 * its text and the stop decision out.
 *
 * Every generated token of every caller goes through pipeline_token, once: the
 * engine (engine.c, many sequences per forward pass) and the single-sequence
 * driver (gen.c: `confkv generate`, `confkv eval`) differ only in how they
 * run the forward passes. For one sequence's logits pipeline_token does, in this
 * order:
 *   1. the retry check: an uncertain step under a reduced cache asks to be
 *      run again with the blocks the policy recalls (kvpol_retry);
 *   2. the logits tap (rules.tap, optional);
 *   3. the token: a forced one (teacher forcing, for eval), the argmax the
 *      confidence pass found (plain greedy), or the sampler's draw;
 *   4. confidence sums and trace, KV accounting (what attention just read);
 *   5. the policy's after-step (kvpol_after_step);
 *   6. end-of-text; else the token joins the history and its piece the text;
 *   7. stop strings, the length limit, the context limit;
 *   8. how much of the text may be shown now (a stop string's first bytes
 *      are held back until it is known not to be one).
 * The caller then forwards the new token (PIPELINE_NEXT), forwards the last one
 * again (PIPELINE_RETRY), or ends the sequence (PIPELINE_END).
 *
 * Nothing here allocates except the text buffer's doubling (tb.h);
 * every array is the caller's, sized for the sequence at its start. */
#ifndef CK_PIPELINE_H
#define CK_PIPELINE_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "kv.h"
#include "model.h"
#include "samp.h"

struct kvpol;

/* Why a sequence ended (gen.h's GEN_FINISH_* and the engine's FINISHED
 * reasons are these values). */
enum { PIPELINE_FINISH_LENGTH = 0, PIPELINE_FINISH_STOP = 1 };

/* What the caller does next (pipeline_out.action). */
enum {
    PIPELINE_NEXT = 0,  /* the token joined hist[]: forward it, then call again */
    PIPELINE_RETRY = 1, /* seq->n_tokens went back by one: forward hist[n_hist - 1]
                           again, then call again with its new logits */
    PIPELINE_END = 2    /* the sequence is over: pipeline_out.finish says why */
};

/* A sequence's rules, fixed from its first token to its last. Every pointer
 * is borrowed and must outlive the sequence. */
typedef struct pipeline_rules {
    const model *m;   /* tokenizer (pieces, end-of-text), stop_on_bos */
    const backend *b; /* KV block sizes, for the byte accounting */
    int limit;        /* completion tokens at most, >= 1 */
    int max_ctx;      /* it ends when prompt + completion reach this */
    int n_stop;
    const char *const *stop; /* (n_stop) the text ends before the first one found */
    int ignore_eos;          /* end-of-text tokens do not end it */
    /* Teacher forcing (eval): when force != NULL, force[i] is completion
     * token i instead of a choice (there must be limit of them), each step's
     * log p(force[i]) and argmax are recorded, and neither end-of-text nor a
     * stop string ends the sequence. */
    const int32_t *force;
    /* Logits tap (optional): called with the logits the token is chosen
     * from (after a retry, before the sampler's penalty touches them),
     * borrowed for the call; step = completion tokens so far. A nonzero
     * return is pipeline_token's error. */
    int (*tap)(void *ud, int step, const float *logits, int n_vocab);
    void *tap_ud;
} pipeline_rules;

/* Sums over a sequence's steps (a step: one token chosen, the end-of-text
 * one included). */
typedef struct pipeline_stats {
    int n_steps;
    int retries; /* steps run again (PIPELINE_RETRY) */
    double sum_entropy, sum_gap, sum_pmax;
    /* KV accounting: what attention read at each step, in tokens ... */
    double hot_token_steps, full_token_steps;
    int hot_peak_tokens, full_peak_tokens;
    /* ... and in bytes (int8 blocks at their real size, scales included;
     * the full cache all f32) */
    double hot_byte_steps, full_byte_steps;
    size_t hot_peak_bytes;
    uint64_t hot_lookups, hot_hits; /* logical blocks read; of them hot */
} pipeline_stats;

/* One sequence's token state. The caller owns it and every buffer in it,
 * sets it up before the first pipeline_token (zero what it does not use) and
 * reads the results from it; pipeline_token only writes inside the bounds
 * given. cap below = min(limit, max_ctx - n_prompt), the most completion
 * tokens the sequence can have. */
typedef struct pipeline_seq {
    kv_seq *seq;          /* its KV; a retry rewinds seq->n_tokens by one */
    struct kvpol *pol;    /* NULL: everything stays hot, no retries */
    sampler *sm;          /* the request's sampler; unused (may be NULL) with force */
    int32_t *hist;        /* (n_prompt + cap) the prompt, then the completion */
    int n_prompt, n_hist; /* n_hist starts at n_prompt */
    char *text;           /* the completion's text (tb.h); free() it */
    size_t text_len, text_cap;
    size_t emitted;   /* bytes of text released so far (pipeline_out.off/len) */
    samp_conf *trace; /* (cap) each step's confidence, or NULL */
    double *logp;     /* (cap) with force: log p(forced token), or NULL */
    int32_t *argmax;  /* (cap) with force: the model's argmax, or NULL */
    int retrying;     /* the pending token is a rerun: no second retry check */
    pipeline_stats st;
} pipeline_seq;

typedef struct pipeline_out {
    int action;      /* PIPELINE_* */
    int finish;      /* with PIPELINE_END: PIPELINE_FINISH_* */
    int32_t token;   /* this step's token (at end-of-text: not in hist) */
    int appended;    /* the token joined hist and text */
    samp_conf conf;  /* its confidence */
    size_t off, len; /* text bytes released by this step: text + off, len of them;
                             at a stop string or a limit all the rest, at end-of-text
                             none (the caller releases text + emitted with the end) */
} pipeline_out;

/* Take one step of the token pipeline (see the top of this file) for the
 * sequence s whose last pending position's logits (m->cfg.vocab_size floats;
 * the sampler's penalty may change them in place) are `logits`.
 * conf/amax: the confidence pass's result over these logits (samp_confidence;
 * amax < 0 when it failed), or conf == NULL for pipeline_token to run it.
 * Returns 0 and *out; a CK_E* code (the sampler's, the policy's, the tap's,
 * CK_ENOMEM for the text, CK_EINVAL when s is full: no room left in hist).
 * After an error s is consistent up to the failed part: the caller ends the
 * sequence. */
int pipeline_token(const pipeline_rules *ru, pipeline_seq *s, float *logits, const samp_conf *conf,
                   int32_t amax, pipeline_out *out);

#endif
