/* svc_models.c - several models, one memory plan, the cascade (svc_models.h). */
#include "svc_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "svc_log.h"

typedef struct slot {
    struct svc_models *ms; /* the engine thread's callbacks get the slot */
    int ix;
    svc_model_info info;
    char name[64], own[64], stem[64]; /* configured (or model_name), the model's own, file stem */
    svc_et_opts eo;                   /* this model's engine options */
} slot;

struct svc_models {
    uv_loop_t *loop;
    const svc_config *cfg;
    svc_et_opts base;
    slot s[SVC_MODELS_MAX];
    int n, n_loaded, failed, reported;
    int def; /* default model: an index or SVC_MODEL_AUTO */
    int cascade, small, large;
    svc_route_rule rule;
    char route_name[300];
    size_t used_bytes; /* the plans of the models loaded so far */
    const char *names[SVC_JOB_MAX_NAMES];
    svc_et_done_cb done;
    svc_et_stream_cb stream; /* svc_models_set_stream; NULL: none */
    svc_et_loaded_cb loaded;
    void *ud;
};

/* ------------------------------------------------------------ the cascade */

/* An auto job's rule and state, one allocation: st first, so that
 * svc_work_clear's free(route_st) frees it all. */
typedef struct route_mem {
    svc_route_state st;
    svc_route_rule rule;
} route_mem;

/* Move an auto job from the small model to the large one, continuing after
 * the `at` tokens accepted (svc_work.accepted). */
static void move_to_large(svc_models *ms, svc_work *w, int at) {
    ms->s[ms->small].info.escalated++;
    ms->s[ms->large].info.received++;
    w->route = NULL; /* at most once */
    w->model_ix = ms->large;
    w->escalated = 1;
    w->at_token = at;
    w->route_model = ms->s[ms->large].name;
    w->resume = at > 0 ? w->accepted : NULL;
    w->n_resume = at;
    if (w->stream) svc_stream_restart(w->stream); /* the large model's text begins with the accepted text */
    w->status = SVC_WORK_OK;
    w->err_code = 0;
    w->err_msg[0] = 0;
    svc_log(SVC_LOG_DEBUG, "route_escalate", "id=%s from=%s to=%s at_token=%d", w->job ? w->job->id : "",
            ms->s[ms->small].name, ms->s[ms->large].name, at);
    svc_et_submit(ms->s[ms->large].info.et, w);
}

/* A streamed work's delta: to the service as it is. */
static void on_stream(void *ud, svc_work *w, const char *delta, size_t n) {
    svc_models *ms = ((slot *)ud)->ms;
    if (ms->stream) ms->stream(ms->ud, w, delta, n);
}

void svc_models_set_stream(svc_models *ms, svc_et_stream_cb cb) { ms->stream = cb; }

/* Every work an engine thread finishes comes here first. */
static void on_done(void *ud, svc_work *w) {
    svc_models *ms = ((slot *)ud)->ms;
    if (w->own_done) return ms->done(ms->ud, w); /* the service's own (a prewarm) */
    if (w->status == SVC_WORK_ESCALATE) return move_to_large(ms, w, w->n_accepted);
    if (w->route && w->status == SVC_WORK_ERROR &&
        (w->err_code == SVC_JERR_CONTEXT_EXCEEDED || w->err_code == SVC_JERR_PROMPT_TOO_LONG))
        return move_to_large(ms, w, 0); /* too long for the small model: the large one from the prompt */
    if (w->route) ms->s[ms->small].info.kept++;
    /* The accepted tokens' confidence is the small model's: the large one
     * computed them in its prefill, where it chose nothing. */
    if (w->escalated && w->accepted_trace && w->trace && w->n_trace >= w->n_accepted)
        memcpy(w->trace, w->accepted_trace, (size_t)w->n_accepted * sizeof *w->trace);
    if (w->model_ix >= 0 && w->model_ix < ms->n) ms->s[w->model_ix].info.results++;
    ms->done(ms->ud, w);
}

int svc_models_submit(svc_models *ms, svc_work *w, char *msg, size_t msglen) {
    const svc_job *j = w->job;
    int ix = svc_models_find(ms, j->model);
    if (ix == -1) return CK_ENOTFOUND;
    w->route = NULL;
    w->escalated = 0;
    w->at_token = -1;
    w->resume = NULL;
    w->n_resume = 0;
    if (ix == SVC_MODEL_AUTO) {
        if (j->session_id || j->template_name || j->prefill_only || j->save_template) {
            snprintf(
                msg, msglen,
                "model auto (the cascade) does not take a session, a template or prefill_only: name a model");
            return CK_EINVAL;
        }
        /* The work's own copy of the rule: a reload (svc_models_set_rule)
         * changes it for later jobs only, and the engine thread reads
         * this one without a lock. */
        route_mem *rm = (route_mem *)w->route_st;
        if (!rm && !(rm = malloc(sizeof *rm))) {
            snprintf(msg, msglen, "out of memory");
            return CK_ENOMEM;
        }
        rm->rule = ms->rule;
        w->route_st = &rm->st;
        w->route = &rm->rule;
        ix = ms->small;
    }
    w->model_ix = ix;
    w->route_model = ms->s[ix].name;
    svc_et_submit(ms->s[ix].info.et, w);
    return 0;
}

/* ------------------------------------------------------------ loading */

static void on_slot_loaded(void *ud, int ok, const char *msg);

static int start_slot(svc_models *ms, int i, char *err, size_t errlen) {
    slot *sl = &ms->s[i];
    const svc_model_spec *sp = &ms->cfg->models[i];
    sl->eo = ms->base;
    sl->eo.eng.model_path = sp->path;
    sl->eo.eng.tokenizer_path = sp->tokenizer ? sp->tokenizer : ms->cfg->tokenizer;
    sl->eo.chat_template = sp->chat_template ? sp->chat_template : ms->cfg->chat_template;
    long kv = sp->kv_budget_mb ? sp->kv_budget_mb : ms->cfg->kv_budget_mb;
    sl->eo.eng.kv_budget_bytes = kv ? (size_t)kv << 20 : 0;
    /* One plan over every model: this one gets what the ones before it left. */
    size_t limit = ms->base.eng.max_memory_mb;
    if (limit) {
        size_t used_mb = (ms->used_bytes + ((size_t)1 << 20) - 1) >> 20;
        if (used_mb >= limit) {
            snprintf(
                err, errlen,
                "model %s: the models before it plan %zu MiB of max_memory_mb=%zu: nothing is left for it",
                sl->name[0] ? sl->name : sp->path, used_mb, limit);
            return CK_ENOSPACE;
        }
        sl->eo.eng.max_memory_mb = limit - used_mb;
    }
    return svc_et_start(ms->loop, &sl->eo, on_done, on_stream, on_slot_loaded, sl, &sl->info.et);
}

static void fail_load(svc_models *ms, const char *msg) {
    if (ms->reported) return;
    ms->reported = 1;
    ms->failed = 1;
    ms->loaded(ms->ud, 0, msg);
}

/* The names of a loaded slot: configured, else model_name or the model's own. */
static void name_slot(svc_models *ms, slot *sl) {
    const svc_model_spec *sp = &ms->cfg->models[sl->ix];
    snprintf(sl->own, sizeof sl->own, "%s", svc_et_model_name(sl->info.et));
    snprintf(sl->stem, sizeof sl->stem, "%s", sl->own);
    char *dot = strrchr(sl->stem, '.'); /* "stories260K.bin" is also "stories260K" */
    if (dot && dot != sl->stem) *dot = 0;
    snprintf(sl->name, sizeof sl->name, "%s",
             sp->name              ? sp->name
             : ms->cfg->model_name ? ms->cfg->model_name
                                   : sl->own);
    sl->info.name = sl->name;
}

static void all_loaded(svc_models *ms) {
    int k = 0;
    for (int i = 0; i < ms->n; i++) {
        slot *sl = &ms->s[i];
        ms->names[k++] = sl->name;
        if (!ms->cfg->models[i].name) { /* the single unnamed model: also its own name and file stem */
            ms->names[k++] = sl->own;
            ms->names[k++] = sl->stem;
        }
    }
    if (ms->cascade) ms->names[k++] = "auto";
    ms->names[k] = NULL;
    if (ms->n > 1)
        svc_log(SVC_LOG_INFO, "memory_plan_total", "models=%d total=%zu max_memory_mb=%zu", ms->n,
                ms->used_bytes, ms->base.eng.max_memory_mb);
    if (ms->cascade)
        svc_log(SVC_LOG_INFO, "route", "mode=cascade small=%s large=%s rule=\"%s\"", ms->s[ms->small].name,
                ms->s[ms->large].name, ms->route_name);
    ms->reported = 1;
    ms->loaded(ms->ud, 1, "");
}

static void on_slot_loaded(void *ud, int ok, const char *msg) {
    slot *sl = ud;
    svc_models *ms = sl->ms;
    const svc_model_spec *sp = &ms->cfg->models[sl->ix];
    char err[700];
    if (!ok) {
        if (sp->name)
            snprintf(err, sizeof err, "model %s (%s): %s", sp->name, sp->path, msg);
        else /* the loader's message names the file already, most often */
            snprintf(err, sizeof err, "%s%s%s", strstr(msg, sp->path) ? "" : sp->path,
                     strstr(msg, sp->path) ? "" : ": ", msg);
        return fail_load(ms, err);
    }
    name_slot(ms, sl);
    sl->info.loaded = 1;
    ms->n_loaded++;
    const eng_memory *mp = svc_et_memory(sl->info.et);
    ms->used_bytes += mp->total;
    svc_log(SVC_LOG_INFO, "model_loaded", "model=%s vocab=%d context=%d path=%s", sl->name,
            svc_et_vocab(sl->info.et), svc_et_ctx(sl->info.et), sp->path);
    char plan[512];
    eng_memory_describe(mp, plan, sizeof plan);
    svc_log(
        SVC_LOG_INFO, "memory_plan",
        "model=%s total=%zu weights=%zu kv=%zu kv8=%zu warm=%zu prefix=%zu batch=%zu engine=%zu scratch=%zu "
        "state=%zu threads=%d context=%d max_memory_mb=%zu summary=\"%s\"",
        sl->name, mp->total, mp->be.weights, mp->be.kv, mp->be.kv8, mp->warm, mp->prefix, mp->be.activations,
        mp->host, mp->be.scratch, mp->be.state, mp->be.n_threads, mp->max_ctx, mp->limit_mb, plan);
    /* The cascade hands token ids from one model to the other: they must
     * mean the same text. Checked once both are in. */
    if (ms->cascade && (sl->ix == ms->small || sl->ix == ms->large) && ms->s[ms->small].info.loaded &&
        ms->s[ms->large].info.loaded) {
        const eng_prompt_format *a = svc_et_chat_info(ms->s[ms->small].info.et);
        const eng_prompt_format *b = svc_et_chat_info(ms->s[ms->large].info.et);
        if (!a || !b || !a->vocab_hash[0] || a->vocab_size != b->vocab_size ||
            strcmp(a->vocab_hash, b->vocab_hash)) {
            snprintf(
                err, sizeof err,
                "route_models %s,%s do not share a vocabulary (%d tokens, hash %s; %d tokens, hash %s): a "
                "cascade moves token ids from one to the other",
                ms->s[ms->small].name, ms->s[ms->large].name, a ? a->vocab_size : 0, a ? a->vocab_hash : "",
                b ? b->vocab_size : 0, b ? b->vocab_hash : "");
            return fail_load(ms, err);
        }
    }
    if (ms->failed) return;
    if (sl->ix + 1 < ms->n) {
        if (start_slot(ms, sl->ix + 1, err, sizeof err)) fail_load(ms, err);
        return;
    }
    all_loaded(ms);
}

int svc_models_opts(const svc_config *cfg, svc_et_opts *eo, char *err, size_t errlen) {
    memset(eo, 0, sizeof *eo);
    eng_config_default(&eo->eng);
    eo->eng.model_path = cfg->model;
    eo->eng.tokenizer_path = cfg->tokenizer;
    eo->chat_template = cfg->chat_template;
    eo->eng.backend = cfg->backend;
    eo->eng.threads = cfg->threads;
    eo->eng.max_running = cfg->max_running;
    eo->eng.max_queue = cfg->max_queue;
    if (cfg->kv_budget_mb) eo->eng.kv_budget_bytes = (size_t)cfg->kv_budget_mb << 20;
    eo->eng.max_context = cfg->max_context;
    eo->eng.max_memory_mb = (size_t)cfg->max_memory_mb;
    if (cfg->policy && kvpol_parse(cfg->policy, &eo->eng.policy, err, errlen)) return CK_EINVAL;
    eo->eng.tuning = svc_config_tuning(cfg);
    eo->eng.tuning_window_s = cfg->tuning_window_s;
    eo->eng.tuning_target = cfg->tuning_target;
    if (cfg->warm_budget_kb) eo->eng.warm_budget_bytes = (size_t)cfg->warm_budget_kb << 10;
    eo->eng.prefix_cache_bytes = (size_t)cfg->prefix_cache_mb << 20;
    eo->eng.prefix_cache_off = !cfg->prefix_cache;
    eo->eng.max_sessions = cfg->max_sessions;
    eo->max_prompt_tokens = cfg->max_prompt_tokens;
    eo->default_max_tokens = cfg->default_max_tokens;
    return 0;
}

int svc_models_start(uv_loop_t *loop, const svc_config *cfg, const svc_et_opts *eo, svc_et_done_cb done,
                     svc_et_loaded_cb loaded, void *ud, svc_models **out, char *err, size_t errlen) {
    *out = NULL;
    if (cfg->n_models < 1 || cfg->n_models > SVC_MODELS_MAX) {
        snprintf(err, errlen, "--model is required (try --help)");
        return CK_EINVAL;
    }
    svc_models *ms = calloc(1, sizeof *ms);
    if (!ms) return CK_ENOMEM;
    ms->loop = loop;
    ms->cfg = cfg;
    ms->base = *eo;
    ms->n = cfg->n_models;
    ms->done = done;
    ms->loaded = loaded;
    ms->ud = ud;
    ms->cascade = cfg->route_cascade;
    ms->small = cfg->route_small;
    ms->large = cfg->route_large;
    ms->def = 0;
    int rc;
    if (ms->cascade) {
        if ((rc = svc_route_parse(cfg->route_rule, &ms->rule, err, errlen))) {
            free(ms);
            return rc;
        }
        svc_route_name(&ms->rule, ms->route_name, sizeof ms->route_name);
    }
    for (int i = 0; i < ms->n; i++) {
        ms->s[i].ms = ms;
        ms->s[i].ix = i;
        ms->s[i].info.path = cfg->models[i].path;
        ms->s[i].info.name = ms->s[i].name;
        snprintf(ms->s[i].name, sizeof ms->s[i].name, "%s", cfg->models[i].name ? cfg->models[i].name : "");
    }
    if (cfg->default_model)
        ms->def =
            !strcmp(cfg->default_model, "auto") ? SVC_MODEL_AUTO : svc_models_find(ms, cfg->default_model);
    if (ms->def == -1) ms->def = 0; /* svc_config_load has checked the name */
    if ((rc = start_slot(ms, 0, err, errlen))) {
        free(ms);
        if (!*err) snprintf(err, errlen, "cannot start the engine thread");
        return rc;
    }
    *out = ms;
    return 0;
}

void svc_models_stop(svc_models *ms) {
    if (!ms) return;
    for (int i = 0; i < ms->n; i++) svc_et_stop(ms->s[i].info.et);
    free(ms);
}

int svc_models_loaded(const svc_models *ms) { return ms && ms->n_loaded == ms->n && !ms->failed; }
const svc_model_info *svc_models_info(const svc_models *ms, int i) {
    return ms && i >= 0 && i < ms->n ? &ms->s[i].info : NULL;
}
svc_et *svc_models_et(const svc_models *ms, int i) {
    return ms && i >= 0 && i < ms->n ? ms->s[i].info.et : NULL;
}
const char *const *svc_models_names(const svc_models *ms) { return ms->names; }
const char *svc_models_route(const svc_models *ms) { return ms->cascade ? ms->route_name : ""; }

int svc_models_find(const svc_models *ms, const char *name) {
    if (!name) return ms->def;
    if (!strcmp(name, "auto")) return ms->cascade ? SVC_MODEL_AUTO : -1;
    for (int i = 0; i < ms->n; i++) {
        const slot *sl = &ms->s[i];
        if (sl->name[0] && !strcmp(name, sl->name)) return i;
        if (!ms->cfg->models[i].name && sl->info.loaded &&
            (!strcmp(name, sl->own) || !strcmp(name, sl->stem)))
            return i;
    }
    return -1;
}

void svc_models_flush(svc_models *ms, int timeout_ms) {
    for (int i = 0; i < ms->n; i++)
        if (ms->s[i].info.et) svc_et_flush(ms->s[i].info.et, timeout_ms);
}

int svc_models_flushed(svc_models *ms) {
    for (int i = 0; i < ms->n; i++)
        if (ms->s[i].info.et && !svc_et_flushed(ms->s[i].info.et)) return 0;
    return 1;
}

void svc_models_reload(svc_models *ms, const char *policy, int tuning, double window_s, double target) {
    for (int i = 0; i < ms->n; i++)
        if (ms->s[i].info.et) svc_et_reload(ms->s[i].info.et, policy, tuning, window_s, target);
}
int svc_models_count(const svc_models *ms) { return ms ? ms->n : 0; }

int svc_models_set_rule(svc_models *ms, const char *spec, char *err, size_t errlen) {
    svc_route_rule r;
    int rc = svc_route_parse(spec, &r, err, errlen);
    if (rc) return rc;
    ms->rule = r;
    svc_route_name(&ms->rule, ms->route_name, sizeof ms->route_name);
    return 0;
}
