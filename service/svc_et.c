/* svc_et.c - the engine thread and its two queues (svc_et.h). */
#include "svc_et.h"

#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "cold.h"  /* the service's own store (svc_redis.c), polled while idle */
#include "model.h" /* its vocabulary size and name */
#include "svc_log.h"

#define MAX_EVENTS 256

/* A streamed work's delta on its way to the loop. */
typedef struct chunk {
    struct chunk *next;
    svc_work *w;
    size_t len;
    char data[]; /* len bytes */
} chunk;

struct svc_et {
    uv_loop_t *loop;
    uv_async_t async;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* guarded by mu */
    svc_work *in_head, *in_tail, *out_head, *out_tail;
    chunk *ch_head, *ch_tail; /* deltas of streamed works, in order */
    int stop, loaded, load_failed, load_reported;
    int flush_ms, flush_req, flushed; /* svc_et_flush */
    char load_err[512];
    eng_stats stats;
    svc_hist batch;
    /* svc_et_reload: new defaults for later jobs, applied between steps */
    int reload_req, reload_tuning;
    char reload_policy[256]; /* "" = keep the policy */
    double reload_window_s, reload_target;
    /* set before loaded turns 1, read-only afterwards */
    int vocab, ctx;
    eng_memory mem; /* the engine's memory plan, copied at load */
    char model_name[64];
    eng_prompt_format pf; /* the model's prompt format, copied at load */
    /* engine thread only */
    svc_et_opts o;
    eng *e;
    svc_work *pending;   /* refused with CK_EBUSY: submit again */
    svc_work *streaming; /* streamed works in the engine (linked by snext) */
    svc_et_done_cb done;
    svc_et_stream_cb stream_cb;
    svc_et_loaded_cb loaded_cb;
    void *ud;
};

void svc_work_clear(svc_work *w) {
    free(w->text);
    free(w->trace);
    free(w->trace_ids);
    free(w->accepted);
    free(w->accepted_trace);
    free(w->route_st);
    svc_stream_free(w->stream);
    w->stream = NULL;
    w->route_st = NULL;
    w->route = NULL;
    w->text = NULL;
    w->trace = NULL;
    w->trace_ids = NULL;
    w->n_trace = 0;
    w->accepted = NULL;
    w->accepted_trace = NULL;
    w->n_accepted = 0;
}

/* ------------------------------------------------------------------------ */
/* engine thread */

/* The work leaves the engine: off the streamed list (the loop owns its
 * stream from now on). */
static void stream_unlink(svc_et *t, svc_work *w) {
    if (!w->stream) return;
    for (svc_work **p = &t->streaming; *p; p = &(*p)->snext)
        if (*p == w) {
            *p = w->snext;
            break;
        }
    w->snext = NULL;
}

/* Cut a streamed work's due delta and queue it for the loop. */
static void stream_emit(svc_et *t, svc_work *w, int64_t now) {
    if (!svc_stream_due(w->stream, now)) return;
    const char *d;
    size_t n = svc_stream_take(w->stream, now, &d);
    if (!n) return;
    chunk *c = malloc(sizeof *c + n);
    if (!c) { /* the text stays in the result; this delta is folded into the end */
        w->stream->sent -= n;
        return;
    }
    c->next = NULL;
    c->w = w;
    c->len = n;
    memcpy(c->data, d, n);
    pthread_mutex_lock(&t->mu);
    if (t->ch_tail)
        t->ch_tail->next = c;
    else
        t->ch_head = c;
    t->ch_tail = c;
    pthread_mutex_unlock(&t->mu);
    uv_async_send(&t->async);
}

/* The text of a streamed work's event: fed, and for a token, how much of
 * it the cascade may still drop (svc_stream.h). */
static void stream_event(svc_work *w, const eng_event *ev) {
    if (ev->piece_len) svc_stream_feed(w->stream, ev->piece, ev->piece_len);
    if (ev->type != ENG_EV_TOKEN) return;
    int hold = 0;
    if (w->route) {
        /* at=first, decided and staying: nothing more can be dropped */
        int stays = !w->route->every && w->route_st->decided && w->escalate_at < 0;
        hold = stays || w->route->never ? 0 : w->route->rewind;
    }
    svc_stream_token(w->stream, hold);
}

static void complete(svc_et *t, svc_work *w) {
    stream_unlink(t, w);
    w->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->out_tail)
        t->out_tail->next = w;
    else
        t->out_head = w;
    t->out_tail = w;
    pthread_mutex_unlock(&t->mu);
    uv_async_send(&t->async);
}

static void fail(svc_et *t, svc_work *w, int code, const char *msg) {
    w->status = SVC_WORK_ERROR;
    w->err_code = code;
    snprintf(w->err_msg, sizeof w->err_msg, "%s", msg);
    complete(t, w);
}

/* The engine's reasons for refusing a request (engine.h, ENG_REJECT_MAP),
 * one job error code each. engine_prefix: the message is the engine's,
 * shown as "engine: ..." (a submit-time INVALID or CONTEXT, and the client
 * form's prompt and chat reasons, are the job's own fault and read as the
 * engine's sentence alone). */
typedef struct reject_map {
    int jerr; /* SVC_JERR_* */
    int engine_prefix;
    const char *fallback; /* when the engine gave no sentence */
} reject_map;

static const reject_map *reject_of(int reason) {
    static const reject_map map[ENG_REJECT_COUNT] = {
        [ENG_REJECT_NONE] = {SVC_JERR_ENGINE_ERROR, 1, NULL},
        [ENG_REJECT_INVALID] = {SVC_JERR_OUT_OF_RANGE, 0, "invalid parameters"},
        [ENG_REJECT_CONTEXT] = {SVC_JERR_CONTEXT_EXCEEDED, 0, "prompt + max_tokens exceed the context"},
        [ENG_REJECT_QUEUE_FULL] = {SVC_JERR_ENGINE_ERROR, 1, NULL}, /* not an error: submitted again */
        [ENG_REJECT_KV_ROOM] = {SVC_JERR_ENGINE_ERROR, 1, NULL},
        [ENG_REJECT_UNKNOWN_TEMPLATE] = {SVC_JERR_UNKNOWN_TEMPLATE, 1, NULL},
        [ENG_REJECT_ENGINE] = {SVC_JERR_ENGINE_ERROR, 1, NULL},
        [ENG_REJECT_PROMPT_TOO_LONG] = {SVC_JERR_PROMPT_TOO_LONG, 0, "the prompt is over the limit"},
        [ENG_REJECT_PROMPT_INVALID] = {SVC_JERR_INVALID_FIELD, 0, "cannot tokenize the prompt"},
        [ENG_REJECT_CHAT_TEMPLATE_UNSUPPORTED] = {SVC_JERR_UNSUPPORTED_CHAT_TEMPLATE, 0, "chat template"},
        [ENG_REJECT_CHAT_TEMPLATE_EXCEPTION] = {SVC_JERR_CHAT_TEMPLATE_EXCEPTION, 0, "chat template"},
        [ENG_REJECT_CHAT_TEMPLATE_ERROR] = {SVC_JERR_CHAT_TEMPLATE_ERROR, 0, "chat template"},
        [ENG_REJECT_CHAT_TEMPLATE_LIMIT] = {SVC_JERR_CHAT_TEMPLATE_LIMIT, 0, "chat template"},
        [ENG_REJECT_CHAT_TEMPLATE_FAILED] = {SVC_JERR_ENGINE_ERROR, 0, "chat template"},
    };
    return reason > 0 && reason < ENG_REJECT_COUNT ? &map[reason] : &map[ENG_REJECT_ENGINE];
}

/* Submit the job in the engine's client form: the engine tokenizes its
 * prompt or messages and checks the limits (engine.h); a refusal comes
 * back with its reason, mapped by reject_of. */
static void start_work(svc_et *t, svc_work *w) {
    const svc_job *j = w->job;
    char msg[256];
    eng_request r;
    memset(&r, 0, sizeof r);
    r.client_form = 1;
    r.messages = j->msgs;
    r.n_messages = j->n_msgs;
    r.tools = j->tools; /* rendered within eng_submit_why, on this thread */
    r.prompt = j->prompt;
    r.prompt_len = j->prompt_len;
    r.parse_special = j->parse_special;
    r.tokens = j->tokens;
    r.n_tokens = j->n_tokens;
    r.max_prompt_tokens = t->o.max_prompt_tokens;
    r.default_max_tokens = t->o.default_max_tokens;
    r.samp = j->samp;
    r.max_tokens = j->max_tokens;
    r.n_stop = j->n_stop;
    for (int i = 0; i < j->n_stop; i++) r.stop[i] = j->stop[i];
    r.ignore_eos = j->ignore_eos;
    r.want_trace = j->return_confidence;
    r.policy = j->policy;
    r.priority = j->priority;
    r.deadline_ms = w->deadline_eng_ms;
    r.user_tag = (uint64_t)(uintptr_t)w;
    /* Sessions and templates: the engine prepends the context or the
     * template (it drops the prompt's BOS then). A template being saved is
     * the prompt's text itself. */
    r.session_id = j->session_id;
    r.template_name = j->template_name;
    r.prefill_only = j->prefill_only;
    r.save_template = j->save_template;
    r.resume_tokens = w->resume;
    r.n_resume = w->n_resume;
    w->escalate_at = -1;
    if (w->route) svc_route_begin(w->route_st);
    uint64_t id;
    char err[256] = "";
    int reason = ENG_REJECT_NONE;
    int rc = eng_submit_why(t->e, &r, &id, &reason, err, sizeof err);
    if (!rc) {
        w->eng_id = id;
        if (w->stream && t->stream_cb) {
            w->snext = t->streaming;
            t->streaming = w;
        }
        return;
    }
    if (reason == ENG_REJECT_QUEUE_FULL) { /* submit again after the next step */
        w->next = t->pending;
        t->pending = w;
        return;
    }
    const reject_map *rm = reject_of(reason);
    if (!rm->engine_prefix) return fail(t, w, rm->jerr, *err ? err : rm->fallback);
    snprintf(msg, sizeof msg, "engine: %.200s", *err ? err : ck_strerror(rc));
    fail(t, w, rm->jerr, msg);
}

/* The cascade's rule moved the job: its cancelled run's first accepted
 * tokens (and their confidence when asked) go back to the loop, which
 * continues the job on the large model (svc_models.c). */
static void escalated(svc_et *t, svc_work *w, const eng_result *r) {
    int n = w->escalate_at < r->n_tokens ? w->escalate_at : r->n_tokens;
    w->status = SVC_WORK_ESCALATE;
    w->n_accepted = 0;
    if (n > 0) {
        w->accepted = malloc((size_t)n * sizeof *w->accepted);
        if (r->trace) w->accepted_trace = malloc((size_t)n * sizeof *w->accepted_trace);
        if (!w->accepted || (r->trace && !w->accepted_trace)) {
            w->status = SVC_WORK_ERROR;
            w->err_code = SVC_JERR_ENGINE_ERROR;
            snprintf(w->err_msg, sizeof w->err_msg, "out of memory moving the job to the large model");
        } else {
            memcpy(w->accepted, r->tokens, (size_t)n * sizeof *w->accepted);
            if (r->trace) memcpy(w->accepted_trace, r->trace, (size_t)n * sizeof *w->accepted_trace);
            w->n_accepted = n;
        }
    }
    complete(t, w);
}

static void finished(svc_et *t, svc_work *w, const eng_result *r) {
    if (w->escalate_at >= 0 && r->finish == ENG_FINISH_CANCELLED) return escalated(t, w, r);
    int64_t now = eng_now_ms();
    double handoff = 0; /* loop -> engine: counted in the job's queue time */
    w->finish = r->finish;
    w->status = r->finish == ENG_FINISH_EXPIRED ? SVC_WORK_EXPIRED : SVC_WORK_OK;
    if (r->finish == ENG_FINISH_CANCELLED) {
        w->status = SVC_WORK_ERROR;
        w->err_code = SVC_JERR_ENGINE_ERROR;
        snprintf(w->err_msg, sizeof w->err_msg, "cancelled");
    }
    w->text = malloc(r->text_len + 1);
    if (w->text) {
        if (r->text_len) memcpy(w->text, r->text, r->text_len);
        w->text[r->text_len] = 0;
        w->text_len = r->text_len;
    }
    w->prompt_tokens = r->prompt_tokens;
    w->completion_tokens = r->n_tokens;
    snprintf(w->policy, sizeof w->policy, "%s", r->policy);
    w->cached_tokens = r->cached_tokens;
    w->mean_entropy = r->mean_entropy;
    w->mean_gap = r->mean_gap;
    w->mean_pmax = r->mean_pmax;
    w->total_ms = (double)(now - w->t_enqueue_ms);
    handoff = w->total_ms - r->total_ms;
    if (handoff < 0) handoff = 0;
    w->queue_ms = r->queue_ms + handoff;
    w->ttft_ms = r->ttft_ms + handoff;
    w->kv_retained_mean = r->kv_retained_mean;
    w->hot_peak_bytes = r->hot_peak_bytes;
    w->recalls = r->recalls;
    w->demotions = r->demotions;
    w->spills = r->spills;
    w->preemptions = r->preemptions;
    w->warnings = r->warnings;
    if (r->trace && r->n_tokens > 0 && r->tokens) {
        w->trace = malloc((size_t)r->n_tokens * sizeof *w->trace);
        w->trace_ids = malloc((size_t)r->n_tokens * sizeof *w->trace_ids);
        if (w->trace && w->trace_ids) {
            memcpy(w->trace, r->trace, (size_t)r->n_tokens * sizeof *w->trace);
            memcpy(w->trace_ids, r->tokens, (size_t)r->n_tokens * sizeof *w->trace_ids);
            w->n_trace = r->n_tokens;
        }
    }
    complete(t, w);
}

/* The prompt format the engine loaded (its chat template: the configured
 * file, else the model's), in the log. A model template that does not
 * parse is a warning: the engine refuses `messages` jobs with its error,
 * while `prompt` and `tokens` jobs still run. */
static void log_prompt_format(const eng_prompt_format *pf) {
    if (pf->template_error_kind)
        svc_log(SVC_LOG_WARN, "chat_template_unusable", "kind=%s msg=\"%.200s\"", pf->template_error_kind,
                pf->template_error);
    svc_log(SVC_LOG_INFO, "prompt_format", "arch=%s tokenizer=%s pre=%s chat_template=%s template_hash=%s",
            pf->arch, pf->tok_model, pf->tok_pre[0] ? pf->tok_pre : "-", pf->template_source,
            pf->template_hash[0] ? pf->template_hash : "-");
}

/* A config reload (svc_et_reload), on this thread between steps: later
 * submissions take the new defaults; requests already in the engine keep
 * theirs. */
static void apply_reload(svc_et *t, const char *policy, int tuning, double window_s, double target) {
    char err[256] = "";
    int rc = eng_set_defaults(t->e, *policy ? policy : NULL, tuning, window_s, target, err, sizeof err);
    if (rc) {
        svc_log(SVC_LOG_WARN, "config_reload", "status=refused error=\"%s\"", err);
        return;
    }
    eng_stats s;
    eng_get_stats(t->e, &s);
    pthread_mutex_lock(&t->mu);
    t->stats = s;
    pthread_mutex_unlock(&t->mu);
    svc_log(SVC_LOG_INFO, "config_reload",
            "status=applied policy=\"%s\" tuning=%s entropy_threshold=%.4g prob_gap_threshold=%.4g "
            "max_prob_threshold=%.4g",
            *policy ? policy : "(unchanged)", tuning ? "adaptive" : "off", s.threshold_entropy,
            s.threshold_gap, s.threshold_pmax);
}

static void *thread_main(void *arg) {
    svc_et *t = arg;
    char err[512] = "";
    eng_config ec = t->o.eng;
    ec.chat_template = t->o.chat_template;
    int rc = eng_new(&ec, &t->e, err, sizeof err);
    if (!rc) {
        const model *m = eng_model(t->e);
        t->vocab = m->cfg.vocab_size;
        t->ctx = eng_max_context(t->e); /* the planned context, <= the model's */
        t->mem = *eng_get_memory(t->e);
        snprintf(t->model_name, sizeof t->model_name, "%s", m->name);
        t->pf = *eng_get_prompt_format(t->e);
        log_prompt_format(&t->pf);
    }
    pthread_mutex_lock(&t->mu);
    if (rc) {
        t->load_failed = 1;
        snprintf(t->load_err, sizeof t->load_err, "%s", *err ? err : ck_strerror(rc));
    } else {
        t->loaded = 1;
        eng_get_stats(t->e, &t->stats); /* /metrics has the engine's figures before the first job */
    }
    pthread_mutex_unlock(&t->mu);
    uv_async_send(&t->async);
    if (rc) return NULL;

    eng_event *ev = malloc(MAX_EVENTS * sizeof *ev);
    svc_work **cancel = malloc(MAX_EVENTS * sizeof *cancel);
    if (!cancel) {
        free(ev);
        ev = NULL;
    }
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (!t->stop && !t->in_head && !t->pending && !t->reload_req && eng_idle(t->e) &&
               !(t->flush_req && !t->flushed)) {
            if (!t->o.eng.cold) {
                pthread_cond_wait(&t->cv, &t->mu);
                continue;
            }
            /* With a cold store, wake every 50 ms while idle: its completions
             * (and the deletes they trigger) are delivered only by polls on
             * this thread, and an idle engine makes none. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            pthread_mutex_unlock(&t->mu);
            cold_poll(t->o.eng.cold);
            pthread_mutex_lock(&t->mu);
        }
        svc_work *in = t->in_head;
        t->in_head = t->in_tail = NULL;
        int reload = t->reload_req, r_tuning = t->reload_tuning;
        char r_policy[256];
        double r_window = t->reload_window_s, r_target = t->reload_target;
        snprintf(r_policy, sizeof r_policy, "%s", t->reload_policy);
        t->reload_req = 0;
        int stop = t->stop, flush = t->flush_req && !t->flushed && eng_idle(t->e);
        pthread_mutex_unlock(&t->mu);
        if (flush) { /* graceful shutdown: every session and template write lands first */
            int frc = eng_flush(t->e, t->flush_ms);
            if (frc) svc_log(SVC_LOG_WARN, "cold_flush_incomplete", "timeout_ms=%d", t->flush_ms);
            pthread_mutex_lock(&t->mu);
            t->flushed = 1;
            pthread_mutex_unlock(&t->mu);
        }
        if (stop) {
            /* Works not yet submitted go back to the loop's care untouched. */
            break;
        }
        if (reload) apply_reload(t, r_policy, r_tuning, r_window, r_target);
        /* Refused earlier (queue full): try again first, in arrival order. */
        svc_work *p = t->pending, *rev = NULL;
        t->pending = NULL;
        while (p) {
            svc_work *nx = p->next;
            p->next = rev;
            rev = p;
            p = nx;
        }
        for (svc_work *w = rev, *nx; w; w = nx) {
            nx = w->next;
            start_work(t, w);
        }
        for (svc_work *w = in, *nx; w; w = nx) {
            nx = w->next;
            start_work(t, w);
        }
        if (eng_idle(t->e)) continue;
        int n = 0;
        rc = ev ? eng_step(t->e, ev, MAX_EVENTS, &n) : CK_ENOMEM;
        if (rc) {
            svc_log(SVC_LOG_ERROR, "engine_step_failed", "err=%s", ck_errname(rc));
            if (rc == CK_EBACKEND || rc == CK_ENOMEM) {
                /* The engine is unusable; report and wait for the stop. */
                pthread_mutex_lock(&t->mu);
                t->load_failed = 1;
                snprintf(t->load_err, sizeof t->load_err, "engine failed: %s", ck_strerror(rc));
                while (!t->stop) pthread_cond_wait(&t->cv, &t->mu);
                pthread_mutex_unlock(&t->mu);
                break;
            }
        }
        /* The cascade: a work on its small model feeds the rule with each
         * token; when it says move, the request is cancelled after this
         * loop (an eng_cancel would end the events' pointers' life), and
         * its FINISHED (cancelled) event hands it back as ESCALATE. */
        int n_cancel = 0;
        for (int i = 0; i < n; i++) {
            svc_work *w = (svc_work *)(uintptr_t)ev[i].user_tag;
            if (!w) continue;
            if (ev[i].type == ENG_EV_TOKEN && w->route && w->escalate_at < 0 &&
                svc_route_feed(w->route, w->route_st, ev[i].conf.entropy, ev[i].conf.gap, ev[i].conf.pmax)) {
                w->escalate_at = svc_route_accepted(w->route, w->route_st);
                cancel[n_cancel++] = w;
            }
            /* before finished() below: the work is the loop's after it */
            if (w->stream && (ev[i].type == ENG_EV_TOKEN || ev[i].type == ENG_EV_FINISHED))
                stream_event(w, &ev[i]);
            if (ev[i].type != ENG_EV_TOKEN && w->escalate_at >= 0 &&
                !(ev[i].type == ENG_EV_FINISHED && ev[i].result &&
                  ev[i].result->finish == ENG_FINISH_CANCELLED)) {
                /* it ended by itself in the step the rule fired: kept */
                for (int k = 0; k < n_cancel; k++)
                    if (cancel[k] == w) cancel[k] = cancel[--n_cancel];
                w->escalate_at = -1;
            }
            if (ev[i].type == ENG_EV_FINISHED && ev[i].result) {
                finished(t, w, ev[i].result);
            } else if (ev[i].type == ENG_EV_ERROR) {
                char msg[256];
                snprintf(msg, sizeof msg, "engine: %s%s%s", ck_strerror(ev[i].error),
                         ev[i].message ? ": " : "", ev[i].message ? ev[i].message : "");
                fail(t, w, reject_of(ev[i].reason)->jerr, msg);
            }
        }
        /* CK_ENOTFOUND: it finished in this step (its FINISHED came above,
         * as a job kept on the small model). */
        for (int i = 0; i < n_cancel; i++)
            if (eng_cancel(t->e, cancel[i]->eng_id)) cancel[i]->escalate_at = -1;
        /* Streamed works still in the engine: their due deltas (a work
         * that got no token this step may have text waiting out its
         * interval). */
        if (t->streaming) {
            int64_t now = eng_now_ms();
            for (svc_work *w = t->streaming; w; w = w->snext) stream_emit(t, w, now);
        }
        eng_tune_move mv[16];
        int nm = eng_take_tune_moves(t->e, mv, 16);
        for (int i = 0; i < nm; i++)
            svc_log(SVC_LOG_INFO, "tune", "param=%s from=%.4g to=%.4g share=%.3f quantile=%.4g samples=%d",
                    mv[i].param, mv[i].from, mv[i].to, mv[i].share, mv[i].quantile, mv[i].samples);
        eng_stats s;
        eng_get_stats(t->e, &s);
        pthread_mutex_lock(&t->mu);
        t->stats = s;
        if (s.last_batch_seqs > 0) svc_hist_observe(&t->batch, s.last_batch_seqs);
        pthread_mutex_unlock(&t->mu);
    }
    free(ev);
    free(cancel);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* loop side */

static void async_cb(uv_async_t *h) {
    svc_et *t = h->data;
    pthread_mutex_lock(&t->mu);
    svc_work *out = t->out_head;
    t->out_head = t->out_tail = NULL;
    chunk *ch = t->ch_head;
    t->ch_head = t->ch_tail = NULL;
    int report = !t->load_reported && (t->loaded || t->load_failed);
    if (report) t->load_reported = 1;
    int ok = t->loaded && !t->load_failed;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", t->load_err);
    pthread_mutex_unlock(&t->mu);
    if (report && t->loaded_cb) t->loaded_cb(t->ud, ok, msg);
    /* deltas first: every one of a work was queued before it finished */
    while (ch) {
        chunk *nx = ch->next;
        t->stream_cb(t->ud, ch->w, ch->data, ch->len);
        free(ch);
        ch = nx;
    }
    while (out) {
        svc_work *nx = out->next;
        out->next = NULL;
        t->done(t->ud, out);
        out = nx;
    }
}

int svc_et_start(uv_loop_t *loop, const svc_et_opts *o, svc_et_done_cb done, svc_et_stream_cb stream,
                 svc_et_loaded_cb loaded, void *ud, svc_et **out) {
    *out = NULL;
    svc_et *t = calloc(1, sizeof *t);
    if (!t) return CK_ENOMEM;
    t->loop = loop;
    t->o = *o;
    t->done = done;
    t->stream_cb = stream;
    t->loaded_cb = loaded;
    t->ud = ud;
    svc_metrics_batch_hist_init(&t->batch);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    uv_async_init(loop, &t->async, async_cb);
    t->async.data = t;
    if (pthread_create(&t->th, NULL, thread_main, t)) {
        uv_close((uv_handle_t *)&t->async, NULL);
        return CK_EIO; /* t is freed by the close: see svc_et_stop; here it leaks one struct */
    }
    t->started = 1;
    *out = t;
    return 0;
}

void svc_et_submit(svc_et *t, svc_work *w) {
    w->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->in_tail)
        t->in_tail->next = w;
    else
        t->in_head = w;
    t->in_tail = w;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void svc_et_flush(svc_et *t, int timeout_ms) {
    pthread_mutex_lock(&t->mu);
    t->flush_ms = timeout_ms;
    t->flush_req = 1;
    if (!t->o.eng.cold || !t->loaded || t->load_failed) t->flushed = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

int svc_et_flushed(svc_et *t) {
    pthread_mutex_lock(&t->mu);
    int f = t->flushed;
    pthread_mutex_unlock(&t->mu);
    return f;
}

/* Under mu: load_failed also turns 1 later, on the engine thread, when a step
 * fails for good (thread_main), while the loop asks here for every metrics
 * tick (svc_et_stats). The cast: mu is a lock, not part of the value. */
int svc_et_loaded(const svc_et *t) {
    if (!t) return 0;
    pthread_mutex_t *mu = (pthread_mutex_t *)&t->mu;
    pthread_mutex_lock(mu);
    int ok = t->load_reported && t->loaded && !t->load_failed;
    pthread_mutex_unlock(mu);
    return ok;
}
int svc_et_vocab(const svc_et *t) { return t->vocab; }
int svc_et_ctx(const svc_et *t) { return t->ctx; }
const eng_memory *svc_et_memory(const svc_et *t) { return &t->mem; }
const char *svc_et_model_name(const svc_et *t) { return t->model_name; }
const eng_prompt_format *svc_et_chat_info(const svc_et *t) { return svc_et_loaded(t) ? &t->pf : NULL; }

int svc_et_stats(svc_et *t, eng_stats *s, svc_hist *batch) {
    if (!svc_et_loaded(t)) return 0;
    pthread_mutex_lock(&t->mu);
    *s = t->stats;
    *batch = t->batch;
    pthread_mutex_unlock(&t->mu);
    return 1;
}

static void free_et(uv_handle_t *h) { free(h->data); }

void svc_et_stop(svc_et *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->started) pthread_join(t->th, NULL);
    for (chunk *c = t->ch_head, *nx; c; c = nx) { /* deltas never handed over */
        nx = c->next;
        free(c);
    }
    t->ch_head = t->ch_tail = NULL;
    eng_free(t->e);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    uv_close((uv_handle_t *)&t->async, free_et);
}

void svc_et_reload(svc_et *t, const char *policy, int tuning, double window_s, double target) {
    pthread_mutex_lock(&t->mu);
    snprintf(t->reload_policy, sizeof t->reload_policy, "%s", policy ? policy : "");
    t->reload_tuning = tuning;
    t->reload_window_s = window_s;
    t->reload_target = target;
    t->reload_req = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}
