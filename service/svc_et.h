/* svc_et.h - the engine on a thread of its own, talking to the
 * loop through two queues.
 *
 *   loop thread                         engine thread
 *   svc_et_submit(work) --[in queue, mutex + condvar]--> eng_submit (the client
 *                                                        form: the engine tokenizes
 *                                                        and checks), eng_step...
 *   done_cb(work) <--[out queue + uv_async_send]-------- finished / failed
 *
 * uv_async_send coalesces wake-ups, so each wake-up drains the whole out
 * queue. A streamed job (svc_work.stream) also sends deltas of its text
 * through a third queue (engine thread -> loop, malloc'd copies), cut after
 * each step when due (svc_stream.h); a wake-up hands the deltas over before
 * the finished works, so a job's deltas all come before its done_cb. The engine thread loads the model first (svc_et_loaded turns true,
 * loaded_cb fires on the loop), then sleeps on the condition variable
 * whenever the engine is idle and no work waits.
 *
 * A work item is owned by the loop; between svc_et_submit and its done_cb the
 * engine thread reads its job and writes its result fields, and the loop
 * must not touch it. After svc_et_stop returns, works never completed are the
 * loop's again (their done_cb will not fire). */
#ifndef CK_SVC_ENGINE_THREAD_H
#define CK_SVC_ENGINE_THREAD_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "engine.h"
#include "svc_job.h"
#include "svc_metrics.h"
#include "svc_route.h"
#include "svc_stream.h"

/* SVC_WORK_ESCALATE: the cascade's rule moved the job off this (small)
 * model; `accepted` holds the tokens the next model continues after. Only
 * for works with a route rule; svc_models handles it, never the service. */
enum { SVC_WORK_OK = 0, SVC_WORK_ERROR = 1, SVC_WORK_EXPIRED = 2, SVC_WORK_ESCALATE = 3 };

typedef struct svc_work {
    struct svc_work *next; /* queue link (owned by whichever queue holds it) */
    /* in (set by the loop before submit) */
    const svc_job *job;                   /* borrowed until done_cb */
    int64_t deadline_eng_ms;              /* on eng_now_ms()'s clock, 0 = none */
    int64_t t_enqueue_ms;                 /* eng_now_ms() when the message was consumed */
    void *ud;                             /* the loop's */
    void (*own_done)(struct svc_work *w); /* the loop's: when set, its done_cb hands the work
                                    here (the service's own works: template prewarms) */
    /* the cascade (svc_models.h): set by the loop before submit */
    const svc_route_rule *route; /* feed the rule with every token (NULL = no cascade here) */
    svc_route_state *route_st;   /* its state (malloc'd by svc_models with the rule route points
                                    to: one block, freed by svc_work_clear) */
    const int32_t *resume;       /* (n_resume) the completion begins with these (eng_request) */
    int n_resume;
    int model_ix; /* the model (svc_models) the work is on */
    /* streaming: set by the loop before submit when the job asked for it
     * (malloc'd, freed by svc_work_clear); the engine thread feeds it and
     * takes deltas while the work is there; snext links the engine thread's
     * streamed works (its own) */
    svc_stream *stream;
    struct svc_work *snext;
    /* out (set by the engine thread) */
    int status;   /* SVC_WORK_* */
    int err_code; /* SVC_JERR_* when status is ERROR */
    char err_msg[256];
    char *text; /* malloc'd, text_len bytes + NUL */
    size_t text_len;
    int finish; /* GEN_FINISH_* or ENG_FINISH_* */
    int prompt_tokens, completion_tokens, cached_tokens;
    double mean_entropy, mean_gap, mean_pmax;
    double queue_ms, ttft_ms, total_ms;
    char policy[64]; /* the KV policy it ran under (canonical) */
    int warnings;    /* ENG_WARN_* bits: what the engine changed in the request (the result's `warnings`) */
    double kv_retained_mean;
    size_t hot_peak_bytes;
    uint64_t recalls, demotions, spills, preemptions;
    int32_t *trace_ids; /* (n_trace), when the job asked for confidence */
    samp_conf *trace;   /* (n_trace) */
    int n_trace;
    /* the cascade, out: ESCALATE's accepted tokens (malloc'd, with their
     * trace when the job asked for confidence); the route a result reports */
    int32_t *accepted;
    samp_conf *accepted_trace;
    int n_accepted;
    int escalate_at;         /* engine thread: the rule fired with this many accepted (-1: not) */
    uint64_t eng_id;         /* engine thread: the request's id in its engine */
    const char *route_model; /* the model that produced the result (svc_models' name) */
    int escalated, at_token; /* moved by the cascade; the small model's tokens kept */
} svc_work;

/* Free what the engine thread allocated in a work (text, trace, accepted). */
void svc_work_clear(svc_work *w);

typedef struct svc_et_opts {
    eng_config eng;            /* strings borrowed until svc_et_stop */
    const char *chat_template; /* a Jinja file for `messages` instead of the model's
                                    template (NULL = the model's): eng_config.chat_template */
    int max_prompt_tokens;     /* 0 = the context (eng_request's client form) */
    int default_max_tokens;    /* likewise; 0 = up to the context */
} svc_et_opts;

typedef void (*svc_et_done_cb)(void *ud, svc_work *w);
/* A delta of a streamed work's text (raw bytes, borrowed for the call; a
 * UTF-8 boundary: svc_stream.h), on the loop while the work is still in the
 * engine: the callee may read the work's job, nothing else of it. */
typedef void (*svc_et_stream_cb)(void *ud, svc_work *w, const char *delta, size_t n);
/* Model loaded (ok = 1) or failed (ok = 0, msg says why). */
typedef void (*svc_et_loaded_cb)(void *ud, int ok, const char *msg);

typedef struct svc_et svc_et;

/* Start the thread (it loads the model). Callbacks fire on the loop;
 * stream may be NULL (deltas are then not cut). */
int svc_et_start(uv_loop_t *loop, const svc_et_opts *o, svc_et_done_cb done, svc_et_stream_cb stream,
                 svc_et_loaded_cb loaded, void *ud, svc_et **out);
/* Hand a work to the engine thread; never blocks on the engine. */
void svc_et_submit(svc_et *t, svc_work *w);
int svc_et_loaded(const svc_et *t);
/* Model facts (valid once loaded): vocabulary, context, name. */
int svc_et_vocab(const svc_et *t);
int svc_et_ctx(const svc_et *t);
/* The memory plan the engine was built by (valid once loaded). */
const eng_memory *svc_et_memory(const svc_et *t);
const char *svc_et_model_name(const svc_et *t);
/* Engine stats are read under a lock; these are fixed at load. */
/* The model's prompt format: architecture, tokenizer model + pre, chat
 * template source and hash (valid once loaded; NULL before). */
const eng_prompt_format *svc_et_chat_info(const svc_et *t);
/* Snapshot of the engine's stats and batch-size histogram (0 when not loaded). */
int svc_et_stats(svc_et *t, eng_stats *s, svc_hist *batch);
/* Ask the engine thread to wait, once idle, until the cold store has
 * answered every write (eng_flush, at most timeout_ms): for a graceful
 * shutdown, while the loop still runs Redis. svc_et_flushed turns 1 when
 * done (or at once when there is no cold store). */
void svc_et_flush(svc_et *t, int timeout_ms);
int svc_et_flushed(svc_et *t);
/* Stop the thread (after its current step), join it, free the engine, close
 * the async handle (the loop must run once more for the close). */
/* New defaults for jobs submitted from now on (SIGHUP's reload): the
 * default policy (a spec; NULL or "" keeps it) and the tuning (engine.h,
 * eng_set_defaults). Applied on the engine thread between steps, which logs
 * event=config_reload with the outcome; jobs already in the engine keep
 * what they were given. Any thread. */
void svc_et_reload(svc_et *t, const char *policy, int tuning, double window_s, double target);
void svc_et_stop(svc_et *t);

#endif
