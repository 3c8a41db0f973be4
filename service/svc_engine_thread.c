/* svc_engine_thread.c - the engine thread and its two queues (svc_engine_thread.h). */
#include "svc_engine_thread.h"

#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "svc_log.h"

#define MAX_EVENTS 256

struct svc_et {
    uv_loop_t *loop;
    uv_async_t async;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* guarded by mu */
    svc_work *in_head, *in_tail, *out_head, *out_tail;
    int stop, loaded, load_failed, load_reported;
    int flush_ms, flush_req, flushed;  /* svc_et_flush */
    char load_err[512];
    eng_stats stats;
    svc_hist batch;
    /* set before loaded turns 1, read-only afterwards */
    int vocab, ctx;
    eng_memory mem;       /* the engine's memory plan, copied at load */
    char model_name[64];
    chat_model_info chat_info;
    chat_template *chat;  /* the template for `messages` (NULL when the model's fails to parse) */
    jinja_error chat_err; /* why, when chat is NULL: each `messages` job gets this error */
    /* engine thread only */
    svc_et_opts o;
    eng *e;
    int32_t *ids;                 /* (ctx) tokenization scratch */
    svc_work *pending;            /* refused with CK_EBUSY: submit again */
    svc_et_done_cb done;
    svc_et_loaded_cb loaded_cb;
    void *ud;
};

void svc_work_clear(svc_work *w) {
    free(w->text);
    free(w->trace);
    free(w->trace_ids);
    w->text = NULL;
    w->trace = NULL;
    w->trace_ids = NULL;
    w->n_trace = 0;
}

/* ------------------------------------------------------------------------ */
/* engine thread */

static void complete(svc_et *t, svc_work *w) {
    w->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->out_tail) t->out_tail->next = w;
    else t->out_head = w;
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

/* A chat-template failure as the job's error code (the jinja kind's). */
static void fail_chat(svc_et *t, svc_work *w, const jinja_error *je) {
    int code = je->code == CK_EUNSUPPORTED               ? SVC_JERR_UNSUPPORTED_CHAT_TEMPLATE
               : je->code == CK_EINVAL                   ? SVC_JERR_CHAT_TEMPLATE_EXCEPTION
               : je->code == CK_EFORMAT                  ? SVC_JERR_CHAT_TEMPLATE_ERROR
               : je->code == CK_ERANGE || je->code == CK_ETOOLONG ? SVC_JERR_CHAT_TEMPLATE_LIMIT
                                                         : SVC_JERR_ENGINE_ERROR;
    char msg[256];
    snprintf(msg, sizeof msg, "chat template: %.200s", je->msg);
    fail(t, w, code, msg);
}

/* `messages`: rendered with the chat template and tokenized under chat.h's
 * anti-forgery rule into t->ids. 0, or the work was failed. */
static int chat_ids(svc_et *t, svc_work *w, int limit, int *n) {
    const svc_job *j = w->job;
    char msg[256];
    if (!t->chat) {
        fail_chat(t, w, &t->chat_err);
        return -1;
    }
    char *text = NULL;
    size_t len = 0, ns = 0;
    jinja_span *sp = NULL;
    jinja_error je;
    int rc = chat_render(t->chat, j->msgs, (size_t)j->n_msgs, 1, NULL, &text, &len, &sp, &ns, &je);
    if (rc) {
        fail_chat(t, w, &je);
        return -1;
    }
    size_t most = (size_t)limit * (size_t)tok_max_piece_len(eng_model(t->e)->tok);
    if (len > most) {
        snprintf(msg, sizeof msg, "the prompt is %zu bytes (the rendered chat); %d tokens (the limit) hold at most %zu bytes", len,
                 limit, most);
        rc = -1;
        fail(t, w, SVC_JERR_PROMPT_TOO_LONG, msg);
    } else if ((rc = chat_tokenize(t->chat, text, len, sp, ns, t->ids, limit, n))) {
        if (rc == CK_ETOOLONG) {
            snprintf(msg, sizeof msg, "the chat is %d tokens or more; the limit is %d", *n, limit);
            fail(t, w, SVC_JERR_PROMPT_TOO_LONG, msg);
        } else {
            snprintf(msg, sizeof msg, "cannot tokenize the chat: %s", ck_strerror(rc));
            fail(t, w, SVC_JERR_INVALID_FIELD, msg);
        }
    }
    free(text);
    free(sp);
    return rc ? -1 : 0;
}

/* Tokenize, check the limits, submit. */
static void start_work(svc_et *t, svc_work *w) {
    const svc_job *j = w->job;
    char msg[256];
    int limit = t->o.max_prompt_tokens > 0 && t->o.max_prompt_tokens < t->ctx ? t->o.max_prompt_tokens : t->ctx;
    const int32_t *ids;
    int n = 0;
    if (j->msgs && !j->save_template) {
        if (chat_ids(t, w, limit, &n)) return;
        ids = t->ids;
    } else if (j->prompt) {
        const tokenizer *tok = eng_model(t->e)->tok;
        /* A token stands for tok_max_piece_len bytes at most, so a longer
         * prompt than limit * that cannot fit: refused in O(1), before
         * tok_encode spends time (and memory) proportional to a 1 MB prompt. */
        size_t most = (size_t)limit * (size_t)tok_max_piece_len(tok);
        if (j->prompt_len > most) {
            snprintf(msg, sizeof msg, "the prompt is %zu bytes; %d tokens (the limit) hold at most %zu bytes", j->prompt_len,
                     limit, most);
            return fail(t, w, SVC_JERR_PROMPT_TOO_LONG, msg);
        }
        /* plain text unless the job says its prompt is trusted (parse_special) */
        int rc = t->chat ? chat_tokenize_text(t->chat, j->prompt, j->prompt_len, j->parse_special, t->ids, limit, &n)
                         : tok_encode_opts(tok, j->prompt, j->prompt_len,
                                           TOK_ENC_ADD_SPECIAL | (j->parse_special ? TOK_ENC_PARSE_SPECIAL : 0),
                                           t->ids, limit, &n);
        /* ETOOLONG: counted past the limit, or refused up front by the
         * tokenizer's own byte bound (then n says nothing); ERANGE alike */
        if (rc == CK_ETOOLONG || rc == CK_ERANGE) {
            if (n > limit) snprintf(msg, sizeof msg, "the prompt is %d tokens or more; the limit is %d", n, limit);
            else snprintf(msg, sizeof msg, "the prompt (%zu bytes) is over the limit of %d tokens", j->prompt_len, limit);
            return fail(t, w, SVC_JERR_PROMPT_TOO_LONG, msg);
        }
        if (rc) {
            snprintf(msg, sizeof msg, "cannot tokenize the prompt: %s", ck_strerror(rc));
            return fail(t, w, SVC_JERR_INVALID_FIELD, msg);
        }
        ids = t->ids;
    } else {
        n = j->n_tokens;
        if (n > limit) {
            snprintf(msg, sizeof msg, "the prompt is %d tokens; the limit is %d", n, limit);
            return fail(t, w, SVC_JERR_PROMPT_TOO_LONG, msg);
        }
        ids = j->tokens;
    }
    int max_tokens = j->max_tokens;
    if (max_tokens == 0) { /* not given: the default, within the context */
        max_tokens = t->o.default_max_tokens;
        if (n + max_tokens > t->ctx) max_tokens = t->ctx - n;
        if (max_tokens < 1) {
            snprintf(msg, sizeof msg, "the prompt (%d tokens) fills the context (%d)", n, t->ctx);
            return fail(t, w, SVC_JERR_CONTEXT_EXCEEDED, msg);
        }
    } else if (n + max_tokens > t->ctx) {
        snprintf(msg, sizeof msg, "prompt (%d tokens) + max_tokens (%d) exceed the context (%d)", n, max_tokens, t->ctx);
        return fail(t, w, SVC_JERR_CONTEXT_EXCEEDED, msg);
    }
    eng_request r;
    memset(&r, 0, sizeof r);
    r.tokens = ids;
    r.n_tokens = n;
    r.samp = j->samp;
    r.max_tokens = max_tokens;
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
    if (j->save_template) {
        r.save_template = 1;
        r.tokens = NULL;
        r.n_tokens = 0;
        r.prompt = j->prompt;
        r.prompt_len = j->prompt_len;
    }
    uint64_t id;
    char err[256] = "";
    int rc = eng_submit(t->e, &r, &id, err, sizeof err);
    if (rc == CK_EBUSY) {
        w->next = t->pending;
        t->pending = w;
        return;
    }
    if (rc == CK_ETOOLONG) return fail(t, w, SVC_JERR_CONTEXT_EXCEEDED, *err ? err : "prompt + max_tokens exceed the context");
    if (rc == CK_EINVAL) return fail(t, w, SVC_JERR_OUT_OF_RANGE, *err ? err : "invalid parameters");
    if (rc) {
        snprintf(msg, sizeof msg, "engine: %.200s", *err ? err : ck_strerror(rc));
        return fail(t, w, SVC_JERR_ENGINE_ERROR, msg);
    }
}

static void finished(svc_et *t, svc_work *w, const eng_result *r) {
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

/* The chat template: the configured file, else the model's. An override
 * that cannot be read or parsed fails the load (the operator asked for it);
 * a model template that does not parse leaves t->chat NULL and its error for
 * every `messages` job, while `prompt` and `tokens` jobs still run. */
static int load_chat(svc_et *t, char *err, size_t errlen) {
    const model *m = eng_model(t->e);
    const char *src = NULL;
    size_t len = 0;
    char *file = NULL;
    int source = CHAT_SRC_MODEL, rc;
    if (t->o.chat_template) {
        FILE *f = fopen(t->o.chat_template, "rb");
        size_t cap = (1u << 20) + 1;
        if (f && (file = malloc(cap))) len = fread(file, 1, cap, f);
        int bad = !f || !file || ferror(f) || len == cap || len == 0;
        if (f) fclose(f);
        if (bad) {
            snprintf(err, errlen, "chat_template %s: cannot read it (1 byte to 1 MiB)", t->o.chat_template);
            free(file);
            return CK_EIO;
        }
        src = file;
        source = CHAT_SRC_OVERRIDE;
    } else if (chat_template_in_model(m, &src, &len)) {
        src = NULL;
        len = 0;
    }
    rc = chat_new(m->tok, src, len, source, &t->chat, &t->chat_err);
    free(file);
    if (rc && source == CHAT_SRC_OVERRIDE) {
        snprintf(err, errlen, "chat_template %.200s: %s: %.250s", t->o.chat_template, t->chat_err.kind, t->chat_err.msg);
        return rc;
    }
    chat_model_describe(m, NULL, t->chat, &t->chat_info);
    if (rc) { /* the model's own template: report it, refuse `messages` jobs with it */
        t->chat_info.template_source = "model";
        svc_log(SVC_LOG_WARN, "chat_template_unusable", "kind=%s msg=\"%.200s\"", t->chat_err.kind, t->chat_err.msg);
    }
    svc_log(SVC_LOG_INFO, "prompt_format", "arch=%s tokenizer=%s pre=%s chat_template=%s template_hash=%s",
            t->chat_info.arch, t->chat_info.tok_model, t->chat_info.tok_pre[0] ? t->chat_info.tok_pre : "-",
            t->chat_info.template_source, t->chat_info.template_hash[0] ? t->chat_info.template_hash : "-");
    return 0;
}

static void *thread_main(void *arg) {
    svc_et *t = arg;
    char err[512] = "";
    int rc = eng_new(&t->o.eng, &t->e, err, sizeof err);
    if (!rc) {
        const model *m = eng_model(t->e);
        t->vocab = m->cfg.vocab_size;
        t->ctx = eng_max_context(t->e); /* the planned context, <= the model's */
        t->mem = *eng_get_memory(t->e);
        snprintf(t->model_name, sizeof t->model_name, "%s", m->name);
        if (!(t->ids = malloc((size_t)t->ctx * sizeof *t->ids))) rc = CK_ENOMEM;
    }
    if (!rc) rc = load_chat(t, err, sizeof err);
    pthread_mutex_lock(&t->mu);
    if (rc) {
        t->load_failed = 1;
        snprintf(t->load_err, sizeof t->load_err, "%s", *err ? err : ck_strerror(rc));
    } else {
        t->loaded = 1;
    }
    pthread_mutex_unlock(&t->mu);
    uv_async_send(&t->async);
    if (rc) return NULL;

    eng_event *ev = malloc(MAX_EVENTS * sizeof *ev);
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (!t->stop && !t->in_head && !t->pending && eng_idle(t->e) && !(t->flush_req && !t->flushed)) {
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
        for (int i = 0; i < n; i++) {
            svc_work *w = (svc_work *)(uintptr_t)ev[i].user_tag;
            if (!w) continue;
            if (ev[i].type == ENG_EV_FINISHED && ev[i].result) {
                finished(t, w, ev[i].result);
            } else if (ev[i].type == ENG_EV_ERROR) {
                char msg[256];
                snprintf(msg, sizeof msg, "engine: %s%s%s", ck_strerror(ev[i].error), ev[i].message ? ": " : "",
                         ev[i].message ? ev[i].message : "");
                fail(t, w,
                     ev[i].error == CK_ETOOLONG    ? SVC_JERR_CONTEXT_EXCEEDED
                     : ev[i].error == CK_ENOTFOUND ? SVC_JERR_UNKNOWN_TEMPLATE
                                                   : SVC_JERR_ENGINE_ERROR,
                     msg);
            }
        }
        eng_stats s;
        eng_get_stats(t->e, &s);
        pthread_mutex_lock(&t->mu);
        t->stats = s;
        if (s.last_batch_seqs > 0) svc_hist_observe(&t->batch, s.last_batch_seqs);
        pthread_mutex_unlock(&t->mu);
    }
    free(ev);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* loop side */

static void async_cb(uv_async_t *h) {
    svc_et *t = h->data;
    pthread_mutex_lock(&t->mu);
    svc_work *out = t->out_head;
    t->out_head = t->out_tail = NULL;
    int report = !t->load_reported && (t->loaded || t->load_failed);
    if (report) t->load_reported = 1;
    int ok = t->loaded && !t->load_failed;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", t->load_err);
    pthread_mutex_unlock(&t->mu);
    if (report && t->loaded_cb) t->loaded_cb(t->ud, ok, msg);
    while (out) {
        svc_work *nx = out->next;
        out->next = NULL;
        t->done(t->ud, out);
        out = nx;
    }
}

int svc_et_start(uv_loop_t *loop, const svc_et_opts *o, svc_et_done_cb done, svc_et_loaded_cb loaded, void *ud,
                 svc_et **out) {
    *out = NULL;
    svc_et *t = calloc(1, sizeof *t);
    if (!t) return CK_ENOMEM;
    t->loop = loop;
    t->o = *o;
    t->done = done;
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
    if (t->in_tail) t->in_tail->next = w;
    else t->in_head = w;
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
const chat_model_info *svc_et_chat_info(const svc_et *t) { return svc_et_loaded(t) ? &t->chat_info : NULL; }

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
    chat_free(t->chat); /* borrows the model's tokenizer: before the engine goes */
    eng_free(t->e);
    free(t->ids);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    uv_close((uv_handle_t *)&t->async, free_et);
}
