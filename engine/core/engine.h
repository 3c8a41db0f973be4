/* engine.h - the inference engine as a service drives it: submit requests,
 * step the batch, collect events.
 *
 * One engine owns a model, a backend, the hot KV pool (sized from a byte
 * budget), the int8 pool, the warm tier and the scheduler. Each eng_step
 * builds one batch: one decode token for every running sequence plus
 * chunks of prefill for sequences being admitted, within max_batch_tokens
 * and max_running, runs it, samples, applies each sequence's KV policy, and
 * reports what happened as events.
 *
 * Scheduling. Waiting requests are ordered by effective priority (priority
 * plus one for every `aging_ms` waited, so nothing starves), then arrival.
 * The credit accrues continuously, so the order is fixed at arrival (see
 * scheduler.h); running sequences are ranked the same way. A request is admitted
 * only when the hot pool can hold what it needs next (its prompt's next
 * chunk, or its policy's minimum): each running sequence keeps a commitment
 * of pool blocks (what its policy needs at most in steady state: the whole
 * sequence for full, the window for window/sinks/h2o, the protected blocks
 * and min_size for conf; the whole prompt while it is prefilled), and a
 * request is admitted only while the commitments fit the pool. Under memory
 * pressure the engine first shrinks CONF-KV sequences (kvpol_make_room), then
 * preempts the running sequence of lowest effective priority, latest
 * arrival: its blocks are demoted to the warm tier and it waits again,
 * resuming later without recomputation; if the warm tier cannot take them,
 * it is reset and recomputed from its prompt and the tokens generated so
 * far. A waiting request of higher priority that also ranks before the
 * worst running one preempts it when it does not fit. A request past its
 * deadline finishes with reason ENG_FINISH_EXPIRED. docs/SCHEDULER.md has
 * the details.
 *
 * Threading: an engine is not thread-safe. One thread (the engine thread)
 * calls every function; another thread talks to it through its own queue.
 *
 * Return codes: 0 success; CK_EINVAL bad argument; CK_ENOMEM; CK_EBUSY the
 * waiting queue is full (submit again later); CK_ENOTFOUND unknown id;
 * CK_ETOOLONG prompt + max_tokens past the context; CK_ENOTFOUND (ERROR
 * event) an unknown template; CK_ENOSPACE (submit) the
 * request's policy needs more KV blocks than the whole hot pool has;
 * CK_EBACKEND the backend failed (the engine is unusable after that).
 * Every refusal, at submit or in an ERROR event, also carries a stable
 * reason from one table (ENG_REJECT_MAP: eng_submit_why, eng_event.reason),
 * for a client to map without reading CK_E* codes or messages.
 *
 * Prefixes and sessions. Full KV blocks of prompts (and of session
 * conversations) go to a prefix cache keyed by the tokens before and in them
 * (pfx.h); a later request whose tokens begin the same way copies them
 * instead of computing them. Only exact blocks go there: those computed
 * while every earlier block was hot in f32, so a reduced CONF-KV cache never
 * leaks into another request. A request with a session id continues its
 * session (sess.h): when the context is not in memory, the request waits
 * (not in the queue) for the cold store's answer, and for the cold copies of
 * its prefix blocks; a second turn of a session waits for the first to end.
 * A finished turn (stop or length) saves the context and persists its
 * blocks. */
#ifndef CK_ENGINE_H
#define CK_ENGINE_H
#include <stddef.h>
#include <stdint.h>

#include "eng_types.h" /* samp_params, samp_conf, kvpol_config, be_memory: plain data */

/* The one public header of the engine: it includes no internal header. The
 * model and the cold store are opaque here (model.h, cold.h for whoever
 * looks inside: the service implements the cold store; it hands the engine
 * its jobs' text in the client form of eng_request). */
typedef struct model model;
typedef struct cold_store cold_store;
typedef struct jinja_value jinja_value; /* jinja.h: the values a chat template sees */

#define ENG_MAX_STOPS 8 /* stop strings of a request, at most (= gen.h's GEN_MAX_STOPS) */
/* eng_result.finish: the run ended by length or a stop (the values of gen.h's
 * GEN_FINISH_LENGTH and GEN_FINISH_STOP), or as ENG_FINISH_* below says. */
enum { ENG_FINISH_LENGTH = 0, ENG_FINISH_STOP = 1 };

typedef struct eng_config {
    const char *model_path;     /* GGUF or llama2.c checkpoint */
    const char *tokenizer_path; /* llama2.c only */
    const char *backend;        /* "cpu", "cuda", "auto" */
    int threads;                /* CPU threads, 0 = all cores */
    int block_size;             /* tokens per KV block (0 = kv_default_block_size of the
                                    model's context: 16, fewer for short contexts) */
    size_t kv_budget_bytes;     /* hot KV pool, f32 blocks (0 = 64 MiB) */
    size_t warm_budget_bytes;   /* warm tier (0 = 4x the hot budget) */
    int max_running;            /* sequences decoding at once (64; at most max_batch_tokens) */
    int max_batch_tokens;       /* tokens per step, decode + prefill (512) */
    int max_queue;              /* waiting requests at most (4096) */
    int aging_ms;               /* one priority level per aging_ms waited (1000) */
    kvpol_config policy;        /* default policy (kvpol_parse; default: conf) */
    cold_store *cold;           /* borrowed; NULL = no cold tier */
    /* Prefix cache and sessions (pfx.h, sess.h). */
    size_t prefix_cache_bytes; /* host slab for prefix blocks (0 = the hot budget) */
    int prefix_cache_off;      /* no prefix cache: every prompt is computed */
    int promote_hits;          /* hits that make a prefix block a template (0 = 4; -1 = never) */
    int max_sessions;          /* session contexts kept in host memory (0 = 1024) */
    /* Memory bounds (docs/ARCHITECTURE.md, Memory plan). */
    int max_context;      /* tokens a sequence may hold, at most the model's (0 = the
                                    model's, at most BE_DEFAULT_MAX_CTX, less where
                                    max_memory_mb needs it) */
    size_t max_memory_mb; /* refuse a load whose plan exceeds this (0 = no limit) */
    /* The chat template of requests that give `messages` (a client form):
     * this Jinja file (1 byte to 1 MiB) instead of the model's
     * tokenizer.chat_template. A file that cannot be read or parsed fails
     * the load; a model template that does not parse does not (prompts and
     * tokens still run; each `messages` request is refused with its error). */
    const char *chat_template; /* borrowed for eng_new only; NULL = the model's */
    /* Thresholds that follow the load (tuner.h): the default policy's three
     * thresholds move, window by window, so the share of decode steps CONF-KV
     * treats as uncertain stays at tuning_target. New requests under the
     * default policy take them; running ones and requests naming a policy
     * keep theirs. */
    int tuning;             /* 0 = off (the default), 1 = adaptive */
    double tuning_window_s; /* seconds per window (0 = 30) */
    double tuning_target;   /* share of uncertain steps (0 = 0.25) */
} eng_config;

/* backend "auto", every core, block size 0, 64 MiB hot, warm 0, 64 running,
 * 512 tokens a step, 4096 waiting, aging 1000 ms, policy conf, no cold tier. */
void eng_config_default(eng_config *c);

/* A chat message of eng_request.messages (chat.h's chat_message). */
typedef struct eng_message {
    const char *role;    /* NUL-terminated UTF-8 */
    const char *content; /* NUL-terminated UTF-8 */
} eng_message;

typedef struct eng_request {
    const char *prompt; /* text (BOS prepended), or NULL when tokens given */
    size_t prompt_len;
    const int32_t *tokens; /* prompt ids (taken as given: include BOS yourself) */
    int n_tokens;
    samp_params samp;
    int max_tokens; /* completion tokens at most; 0 = up to the context */
    int n_stop;
    const char *stop[ENG_MAX_STOPS];
    int ignore_eos;
    int want_trace;      /* per-token confidence in the finished event */
    const char *policy;  /* policy spec for this request, NULL = the default */
    int priority;        /* higher runs first */
    int64_t deadline_ms; /* on eng_now_ms()'s clock; 0 = none */
    uint64_t user_tag;   /* opaque, echoed in every event */
    /* Prefixes and sessions. The tokens run are, in order: the session's
     * context when session_id names one this engine or its cold store knows
     * (then `prefix` is ignored: the context began with it); else BOS and
     * `prefix` when given; then the prompt (without BOS when something came
     * before it, with SentencePiece's leading space as always). Leading
     * blocks found in the prefix cache are copied, not computed
     * (eng_result.cached_tokens). */
    const char *session_id; /* NULL = none; at most 256 bytes (sess.h: SESS_ID_MAX) */
    const char *prefix;     /* text (a template's), or NULL */
    size_t prefix_len;
    int keep_prefix;           /* pin the prompt's blocks and write them to the cold store */
    const char *template_name; /* a template's text is the prefix (tpl.h; fetched from the
                                    cold store when not known here; unknown: CK_ENOTFOUND) */
    int save_template;         /* instead: the prompt text becomes template_name (saved here
                                    and in the cold store) and runs as a kept prefix */
    int prefill_only;          /* compute (or fetch) the prompt's KV, generate nothing */
    /* A continuation (a cascade moving a job to a larger model of the same
     * vocabulary): the completion begins with these ids, made elsewhere.
     * They are computed with the prompt (one prefill, not decode steps),
     * count in max_tokens and in the result's tokens, and their text
     * leads the result's text (and is released with the first TOKEN event);
     * their trace entries are zero and they are not in the means. At most
     * max_tokens - 1 of them; not with a session, a template or
     * prefill_only. Borrowed for the call. */
    const int32_t *resume_tokens;
    int n_resume;
    /* The client form (a service's job): when set, the engine makes the
     * prompt ids as the vocabulary and the chat template ask (chat.h), and
     * applies the client's limits, before everything above runs on those
     * ids as if they were `tokens`:
     *  - `messages` are rendered with the chat template and tokenized so that
     *    no content can forge a turn; else `prompt` text is tokenized with
     *    BOS/EOS as the vocabulary asks, special-token strings becoming
     *    tokens only with parse_special (trusted text); else `tokens`;
     *  - more ids than max_prompt_tokens (0, or over it: the context):
     *    ENG_REJECT_PROMPT_TOO_LONG (a text longer than the limit's most bytes
     *    is refused before it is tokenized);
     *  - max_tokens 0 becomes default_max_tokens (0: the context), cut to
     *    what the context leaves (none left: ENG_REJECT_CONTEXT); a given one past the context:
     *    ENG_REJECT_CONTEXT.
     * With save_template the ids are only checked; the template is the
     * prompt text, as above. */
    int client_form;
    const eng_message *messages; /* (n_messages) or NULL; borrowed for the call */
    int n_messages;
    /* The chat template's `tools` (jinja.h values: a list of the client's
     * tool dicts, as apply_chat_template passes them), or NULL: the
     * template sees None. Only with messages (else ENG_REJECT_INVALID); a
     * model without a template cannot show them (ENG_REJECT_PROMPT_INVALID).
     * Borrowed for the call: eng_submit renders the chat before it returns
     * and keeps no reference. No other thread may use the value meanwhile
     * (jinja values are not thread-safe). */
    jinja_value *tools;
    int parse_special;
    int max_prompt_tokens;
    int default_max_tokens;
} eng_request;

/* Why the engine refused a request, at eng_submit or later in an ERROR
 * event: one stable code per rule, so that a client (the service) maps each
 * to its own error code without reading CK_E* codes or messages.
 *   X(name, value, what) */
#define ENG_REJECT_MAP(X)                                                                        \
    X(INVALID, 1, "a parameter is invalid or out of range")                                      \
    X(CONTEXT, 2,                                                                                \
      "prompt (with a session's context or a template) + max_tokens exceed "                     \
      "the context")                                                                             \
    X(QUEUE_FULL, 3, "the waiting queue is full: submit again later")                            \
    X(KV_ROOM, 4, "the request needs more KV blocks hot than the pool has")                      \
    X(UNKNOWN_TEMPLATE, 5,                                                                       \
      "the request names a template this engine and its cold store "                             \
      "do not know")                                                                             \
    X(ENGINE, 6, "the engine failed on this request (memory, backend, a stored text)")           \
    X(PROMPT_TOO_LONG, 7, "the prompt has more tokens than the client allows (client form)")     \
    X(PROMPT_INVALID, 8, "the prompt text or the chat cannot be tokenized (client form)")        \
    X(CHAT_TEMPLATE_UNSUPPORTED, 9, "the chat template uses Jinja outside the supported subset") \
    X(CHAT_TEMPLATE_EXCEPTION, 10, "the chat template refused these messages")                   \
    X(CHAT_TEMPLATE_ERROR, 11, "the chat template failed on these messages")                     \
    X(CHAT_TEMPLATE_LIMIT, 12, "rendering the chat template hit a limit")                        \
    X(CHAT_TEMPLATE_FAILED, 13, "rendering the chat template failed otherwise (memory)")

enum {
    ENG_REJECT_NONE = 0,
#define ENG_RJ_(name, value, what) ENG_REJECT_##name = value,
    ENG_REJECT_MAP(ENG_RJ_)
#undef ENG_RJ_
        ENG_REJECT_COUNT
};

enum { ENG_EV_TOKEN = 1, ENG_EV_FINISHED = 2, ENG_EV_ERROR = 3 };
enum { ENG_FINISH_EXPIRED = 10, ENG_FINISH_CANCELLED = 11 }; /* besides ENG_FINISH_LENGTH/STOP */

/* What a finished request reports. */
typedef struct eng_result {
    int finish;       /* ENG_FINISH_* (LENGTH and STOP are GEN_FINISH_*'s values) */
    const char *text; /* completion text (text_len bytes, NUL-terminated) */
    size_t text_len;
    const int32_t *tokens; /* completion ids */
    int n_tokens;
    const samp_conf *trace; /* (n_tokens) when want_trace, else NULL */
    int prompt_tokens;
    int cached_tokens;  /* prompt tokens whose KV was reused, not computed */
    int session_tokens; /* of prompt_tokens: the session's earlier context */
    double mean_entropy, mean_gap, mean_pmax;
    double queue_ms, ttft_ms, total_ms;
    double kv_retained_mean; /* hot tokens / full tokens over its decode steps */
    size_t hot_peak_bytes;
    uint64_t recalls, demotions, spills, preemptions;
    char policy[64]; /* the policy it ran under, canonical (kvpol_name) */
    int warnings;    /* ENG_WARN_* bits: what the client form changed in the request */
} eng_result;

/* eng_result.warnings (chat.h's CHAT_WARN_*): the chat template has no system
 * role, so the leading system message was merged into the next message
 * (content, "\n", content), or dropped when it was the only one. */
enum { ENG_WARN_SYSTEM_MERGED = 1, ENG_WARN_SYSTEM_DROPPED = 2 };
/* One sentence for one ENG_WARN_* bit (static), NULL for anything else. */
const char *eng_warning_text(int bit);

typedef struct eng_event {
    int type; /* ENG_EV_* */
    uint64_t id;
    uint64_t user_tag;
    /* ENG_EV_TOKEN */
    int32_t token;
    const char *piece; /* text released with it (piece_len bytes): the token's
                                    piece, except that bytes which may begin a stop string
                                    are held back until the next token shows they do not
                                    (ENG_EV_FINISHED: what was still held back). The
                                    pieces of a request's events add up to its result
                                    text. */
    size_t piece_len;
    samp_conf conf;
    /* ENG_EV_FINISHED */
    const eng_result *result;
    /* ENG_EV_ERROR (the request is gone) */
    int error;  /* CK_E* */
    int reason; /* ENG_REJECT_* */
    const char *message;
} eng_event;
/* Every pointer in an event stays valid until the next eng_step or
 * eng_cancel call. Each request gets exactly one FINISHED or ERROR event,
 * after all of its TOKEN events. */

typedef struct eng_stats {
    int running, waiting;
    uint64_t submitted, finished, expired, cancelled, failed, preemptions;
    uint64_t steps, tokens_generated, tokens_prefilled;
    int last_batch_tokens, last_batch_seqs;
    size_t hot_bytes, hot_capacity_bytes, warm_bytes, int8_bytes;
    size_t warm_capacity_bytes; /* the warm tiers' slabs (the memory plan's warm) */
    uint64_t cold_spills, cold_fetch_hits, cold_fetch_misses;
    uint64_t integrity_failures; /* cold blocks refused on reload (checksum, fingerprint, shape) */
    int hot_blocks_used, hot_blocks;
    double step_ms_last, sched_ms_last; /* time of the last step; of which scheduling */
    double sched_ms_total, step_ms_total;
    /* The scheduler's accounting: */
    double forward_ms_total; /* of step_ms_total: the backend's forward passes */
    double token_ms_total;   /* of step_ms_total: confidence, sampling, policy, text */
    uint64_t recomputes;     /* preemptions that fell back to recomputation */
    int running_peak;        /* most sequences running in one step */
    size_t hot_peak_bytes;   /* most hot KV bytes (f32 + int8) in one step */
    /* Cache hits per tier, in blocks. hot: at every decode step, the blocks a
     * sequence has written (lookups) and those attention read hot (hits).
     * warm/cold/template: prompt blocks looked up in the prefix cache at
     * admission (prefix_lookups) and found there, fetched from the cold
     * store, or pinned as a template. */
    uint64_t hot_lookups, hot_hits;
    uint64_t prefix_lookups, prefix_hits_warm, prefix_hits_cold, prefix_hits_template;
    uint64_t prefix_promotions, prefix_persisted, prefix_integrity_failures;
    uint64_t cached_tokens; /* prompt tokens copied instead of computed */
    size_t prefix_bytes;    /* host prefix cache in use */
    int prefix_pinned;      /* blocks pinned (templates) */
    uint64_t sessions_saved, sessions_resumed, sessions_fetched, session_misses;
    uint64_t session_integrity_failures;
    uint64_t session_settles; /* turns whose KV was recomputed with the full cache (engine.c) */
    int resolving;            /* requests waiting on the cold store (session, prefix) */
    uint64_t template_fetches, template_misses, template_saves;
    /* CONF-KV, summed over finished requests (kvpol.h, kvpol_stats) */
    uint64_t window_grows, window_shrinks; /* hot budget moves */
    uint64_t breaker_trips;                /* the circuit breaker engaged (pool past breaker_threshold) */
    int breaker_engaged;                   /* running sequences whose breaker holds them at min_size now */
    uint64_t reruns;                       /* uncertain steps rerun with recalled blocks */
    uint64_t recalls, demotions;           /* blocks moved warm -> hot, hot -> warm (or dropped) */
    /* The default policy's thresholds now (tuned when tuning is on), and the
     * tuner's work: windows closed, thresholds moved. */
    double threshold_entropy, threshold_gap, threshold_pmax;
    uint64_t tune_windows, tune_moves;
} eng_stats;

/* The memory a load will hold, computed before anything large is allocated
 * (the model file is only mapped by then). */
typedef struct eng_memory {
    be_memory be;      /* the backend's: weights, hot and int8 KV, batch, scratch */
    size_t warm;       /* warm tier slab(s) */
    size_t prefix;     /* prefix cache slab (0 when off) */
    size_t host;       /* the engine's own step buffers (logits of max_running rows, ...) */
    size_t total;      /* be.total + warm + prefix + host */
    size_t file_bytes; /* the model file, mapped read-only (page cache: not in total) */
    int max_ctx;       /* the context everything is sized for */
    size_t limit_mb;   /* max_memory_mb it was planned against (0 = none) */
} eng_memory;

/* Sizes of one candidate context `ctx` for eng_fit_context: fill p (at least
 * total and max_ctx), return 0 or CK_E*. */
typedef int (*eng_plan_cb)(void *ud, int ctx, eng_memory *p);

/* The context rule, once for every loader (the engine, the CLI's backend):
 * max_context > 0 is taken as asked (capped at the model's context) and
 * refused when its plan exceeds max_memory_mb; 0 means be_default_ctx,
 * lowered to the largest multiple of block_size that fits max_memory_mb.
 * Refusal: CK_ENOSPACE with err naming the planned sizes (eng_memory_describe).
 * On success *p is the plan at the chosen context. */
int eng_fit_context(const model *m, int max_context, size_t max_memory_mb, int block_size, eng_plan_cb plan,
                    void *ud, eng_memory *p, char *err, size_t errlen);
/* The plan eng_new would follow for config c and the loaded model m: the
 * context by eng_fit_context, then every pool's size. Returns as it. */
int eng_memory_plan(const eng_config *c, const model *m, eng_memory *p, char *err, size_t errlen);
/* One line for a person: "planned 8.6 GiB at context 1048576 (weights ...,
 * KV ..., ..., scratch 8.0 GiB = 2 x 4.0 GiB)". Returns snprintf's count. */
int eng_memory_describe(const eng_memory *p, char *buf, size_t len);

typedef struct eng eng;

/* Loads the model, plans (eng_memory_plan: a plan past max_memory_mb is
 * refused before the backend allocates), then builds everything. */
int eng_new(const eng_config *c, eng **out, char *err, size_t errlen);
/* The plan the engine was built by, and its context (what a request may
 * hold: prompt + completion < it). */
const eng_memory *eng_get_memory(const eng *e);
int eng_max_context(const eng *e);
void eng_free(eng *e);
const model *eng_model(const eng *e);
/* The model's prompt format, for logs and /readyz: architecture, tokenizer
 * model and pre-tokenizer, the chat template's source and hash, and, when
 * the model's own template does not parse, why (then `messages` requests
 * are refused with that error). Printable ASCII, no quote or backslash,
 * except template_error. Valid while e lives. */
typedef struct eng_prompt_format {
    char arch[32];                   /* general.architecture ("llama" for llama2.c checkpoints) */
    char tok_model[16];              /* "llama", "gpt2"; "llama2c" for a llama2.c tokenizer */
    char tok_pre[48];                /* tokenizer.ggml.pre ("" for SentencePiece) */
    const char *template_source;     /* "none", "model", "override" (static) */
    char template_hash[17];          /* 16 hex digits, "" without a template */
    const char *template_error_kind; /* jinja's kind (static) when the template is unusable, else NULL */
    char template_error[512];        /* its message */
    /* The vocabulary's identity: its size and tok_vocab_hash (16 hex
     * digits; "" when it could not be computed). Two models with the same
     * hash give the same ids the same meaning (a cascade's check). */
    int vocab_size;
    char vocab_hash[17];
} eng_prompt_format;
const eng_prompt_format *eng_get_prompt_format(const eng *e);
/* Queue a request. Everything it points to is copied. On success *id is
 * set (ids are never reused). Invalid parameters: CK_EINVAL with err. A
 * deadline already past is accepted and expires at the next step. */
int eng_submit(eng *e, const eng_request *r, uint64_t *id, char *err, size_t errlen);
/* The same, and why a request was refused: *reason (may be NULL) is
 * ENG_REJECT_NONE on success, else the rule it broke (ENG_REJECT_MAP). */
int eng_submit_why(eng *e, const eng_request *r, uint64_t *id, int *reason, char *err, size_t errlen);
/* 1 when name can name a template (1 to 128 bytes of A-Z a-z 0-9 . _ : -; tpl.h). */
int eng_template_name_ok(const char *name);
/* "INVALID", "CONTEXT", ... ("NONE" for 0, "ENGINE" for values not in the table). */
const char *eng_reject_name(int reason);
/* Run one batched iteration (nothing when idle) and write at most
 * max_events events; *n_events tells how many. Events that do not fit wait
 * for the next call (tokens are never lost); while events of earlier
 * iterations are still waiting after filling `events`, the call only
 * delivers them and runs no iteration (so the queue cannot grow without
 * bound). Returns 0 or CK_EBACKEND (then every later call does too). */
int eng_step(eng *e, eng_event *events, int max_events, int *n_events);
/* Cancel a waiting or running request: its memory is released and a
 * FINISHED event with ENG_FINISH_CANCELLED comes from the next eng_step.
 * CK_ENOTFOUND for an id that is unknown or already finished. */
int eng_cancel(eng *e, uint64_t id);
/* Nothing running, waiting, or left to report. */
int eng_idle(const eng *e);
/* Wait until every cold-store write (sessions, prefix blocks) is answered,
 * polling the store, at most timeout_ms. For a graceful shutdown: the store
 * must still be serving. Returns 0, or CK_EBUSY with writes left. */
int eng_flush(eng *e, int timeout_ms);
void eng_get_stats(const eng *e, eng_stats *s);

/* Change the defaults new requests take (a config reload): the default
 * policy (a kvpol_parse spec; NULL = keep it) and the tuning (0/1, window,
 * target as in eng_config; tuning < 0 = keep it). Running and waiting
 * requests keep what they were given. Turning tuning on starts the tuner
 * from the new policy's thresholds; a new policy while tuning restarts it
 * there. Returns 0, or CK_EINVAL (err says why) with nothing changed. */
int eng_set_defaults(eng *e, const char *policy, int tuning, double window_s, double target, char *err,
                     size_t errlen);

/* One threshold move of the tuner (tuner.h's tuner_move, in plain terms). */
typedef struct eng_tune_move {
    const char *param; /* "entropy_threshold", "prob_gap_threshold", "max_prob_threshold" */
    double from, to, share, quantile;
    int samples;
} eng_tune_move;
/* The moves made since the last call (at most max; older ones beyond the
 * engine's ring of 16 are counted in eng_stats.tune_moves only). */
int eng_take_tune_moves(eng *e, eng_tune_move *out, int max);
/* Milliseconds on the engine's monotonic clock (for deadlines). */
int64_t eng_now_ms(void);

#endif
