/* svc_models.h - the models one confkvd serves: an engine thread each
 * (svc_et.h), their names, one memory plan over all of them, and the
 * cascade that routes `"model": "auto"` jobs by the small model's
 * confidence.
 *
 * Loading. The models load one after another, in the order configured, so
 * that one plan covers them all: each is planned against what max_memory_mb
 * leaves after the ones before it (eng_config.max_memory_mb), with its own
 * KV budget. loaded_cb fires once, when the last has loaded (ok) or the first
 * has failed. The models of a cascade must share a vocabulary
 * (eng_prompt_format's vocab_size and vocab_hash): checked when the second
 * loads, refused with both named otherwise.
 *
 * A job's model. svc_models_names lists what a job's `model` may say: each
 * model's configured name (for a single unnamed model: model_name, the
 * model's own name and its file stem), and "auto" with a
 * cascade. No `model`: default_model.
 *
 * The cascade (route=cascade, route_models=SMALL,LARGE). An auto job is
 * submitted to SMALL with the rule (svc_route.h); its engine thread feeds
 * the rule with every token and, when the rule fires, cancels the run and
 * hands back the accepted tokens (SVC_WORK_ESCALATE). svc_models then
 * submits the same job to LARGE with those tokens as the completion's
 * beginning (eng_request.resume_tokens: computed in one prefill with the
 * prompt), so the result's text starts with the accepted tokens' text. A
 * job moves at most once. An auto job SMALL refuses for its length
 * (context_exceeded, prompt_too_long) goes to LARGE from the prompt
 * (at_token 0). Every result says where it ran (svc_work.route_model,
 * escalated, at_token).
 *
 * Threads: every function on the loop thread. svc_models owns the engine
 * threads; a work's route state is allocated here and freed by
 * svc_work_clear. */
#ifndef CK_SVC_MODELS_H
#define CK_SVC_MODELS_H
#include <stdint.h>
#include <uv.h>

#include "svc_config.h"
#include "svc_et.h"
#include "svc_route.h"

#define SVC_MODELS_MAX SVC_CONFIG_MAX_MODELS
#define SVC_MODEL_AUTO (-2)

typedef struct svc_models svc_models;

/* Per-model figures for /metrics, /readyz and the metrics record. */
typedef struct svc_model_info {
    const char *name; /* what jobs call it (valid while the svc_models lives) */
    const char *path;
    svc_et *et;
    int loaded;
    uint64_t results;   /* results it produced (ok, expired or error, after routing) */
    uint64_t escalated; /* auto jobs moved off it (the cascade's small model) */
    uint64_t kept;      /* auto jobs that ended on it without moving (small model) */
    uint64_t received;  /* auto jobs moved onto it (the large model) */
} svc_model_info;

/* The engine options every model of cfg shares, from cfg (confkvd and
 * `confkv batch --local` alike): eng_config's defaults, then backend,
 * threads, limits, policy, tuning, tiers' budgets, the prefix cache and the
 * job limits; the cold store is the caller's (eo->eng.cold, NULL here).
 * Strings are borrowed from cfg. 0, or CK_EINVAL with err (a policy that
 * does not parse). */
int svc_models_opts(const svc_config *cfg, svc_et_opts *eo, char *err, size_t errlen);

/* Start loading cfg's models (in order; see above). eo: the engine options
 * every model shares (model_path, tokenizer_path, chat_template,
 * kv_budget_bytes and max_memory_mb are each model's). Callbacks fire on
 * the loop: done for each finished work (after the cascade's moves),
 * loaded once. 0, or CK_E* with err. */
int svc_models_start(uv_loop_t *loop, const svc_config *cfg, const svc_et_opts *eo, svc_et_done_cb done,
                     svc_et_loaded_cb loaded, void *ud, svc_models **out, char *err, size_t errlen);
/* Streamed works' deltas (svc_et_stream_cb, with the ud of
 * svc_models_start) go to cb from now on; NULL: nowhere. A work moved by the
 * cascade keeps its stream (svc_stream_restart). */
void svc_models_set_stream(svc_models *ms, svc_et_stream_cb cb);
/* Stop every engine thread (svc_et_stop); free. The loop must run once more. */
void svc_models_stop(svc_models *ms);

int svc_models_count(const svc_models *ms);
int svc_models_loaded(const svc_models *ms); /* all of them */
const svc_model_info *svc_models_info(const svc_models *ms, int i);
/* The engine thread of model i (0: the first configured; for templates). */
svc_et *svc_models_et(const svc_models *ms, int i);
/* The names a job's `model` may take, NULL-terminated (valid once loaded). */
const char *const *svc_models_names(const svc_models *ms);
/* Index of a job's model: name, NULL (the default) or "auto"
 * (SVC_MODEL_AUTO with a cascade); -1 when unknown. */
int svc_models_find(const svc_models *ms, const char *name);
/* Names for the log: "small,large"; the rule's canonical form (or ""). */
const char *svc_models_route(const svc_models *ms);
/* Hand a job to its model's engine thread. CK_ENOTFOUND: unknown model
 * (svc_job_decode has refused those already); CK_EINVAL with msg: an auto
 * job that cannot be moved (a session, a template, prefill_only). */
int svc_models_submit(svc_models *ms, svc_work *w, char *msg, size_t msglen);
/* To every engine thread: svc_et_flush / svc_et_flushed (all), svc_et_reload. */
void svc_models_flush(svc_models *ms, int timeout_ms);
int svc_models_flushed(svc_models *ms);
void svc_models_reload(svc_models *ms, const char *policy, int tuning, double window_s, double target);
/* A new cascade rule for auto jobs submitted from now on (SIGHUP); jobs
 * already running keep theirs. 0, or CK_EINVAL with err (nothing changed). */
int svc_models_set_rule(svc_models *ms, const char *spec, char *err, size_t errlen);

#endif
