/* svc_tpl.c - template usage counts and prewarm rounds (svc_tpl.h). */
#include "svc_tpl.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "coldkey.h"
#include "svc_log.h"
#include "tpl.h"

#define MAX_ROUND 4096

/* One prewarm request in the engine. */
typedef struct pw {
    svc_work w; /* first: the engine thread hands back &w */
    svc_job job;
    struct svc_tpl *t;
    struct pw *next;
} pw;

struct svc_tpl {
    svc_redis *redis;
    svc_et *et;
    int top;
    int closed;
    int startup_started;
    pw *live; /* in the engine */
    svc_tpl_stats st;
};

int svc_tpl_new(svc_redis *redis, svc_et *et, int top, svc_tpl **out) {
    *out = NULL;
    if (top < 0) return CK_EINVAL;
    svc_tpl *t = calloc(1, sizeof *t);
    if (!t) return CK_ENOMEM;
    t->redis = redis;
    t->et = et;
    t->top = top;
    t->st.startup_done = !redis || top == 0;
    *out = t;
    return CK_OK;
}

static void pw_free(pw *p) {
    svc_work_clear(&p->w);
    svc_job_free(&p->job);
    free(p);
}

void svc_tpl_free(svc_tpl *t) {
    if (!t) return;
    while (t->live) {
        pw *p = t->live;
        t->live = p->next;
        pw_free(p);
    }
    free(t);
}

void svc_tpl_close(svc_tpl *t) {
    if (t) t->closed = 1;
}

static void incr_done(void *ud, const redisReply *reply) {
    (void)ud;
    if (!reply || reply->type == REDIS_REPLY_ERROR) svc_log(SVC_LOG_WARN, "template_use_not_counted", NULL);
}

void svc_tpl_used(svc_tpl *t, const char *name) {
    if (!t || !t->redis || !tpl_name_ok(name)) return;
    char key[COLDKEY_NS_KEY_MAX];
    int kl = coldkey_tpl_uses(key, sizeof key, svc_redis_prefix(t->redis));
    if (kl < 0) return; /* cannot happen: svc_redis_new bounds the prefix */
    const char *argv[4] = {"ZINCRBY", key, "1", name};
    size_t lens[4] = {7, (size_t)kl, 1, strlen(name)};
    if (!svc_redis_command(t->redis, incr_done, t, 4, argv, lens)) t->st.uses_counted++;
}

static void round_end(svc_tpl *t) {
    t->st.state = SVC_TPL_DONE;
    svc_log(SVC_LOG_INFO, "prewarm_done", "templates=%d failed=%d", t->st.round_done, t->st.round_failed);
    if (t->startup_started) t->st.startup_done = 1;
}

static void pw_done(svc_work *w) {
    pw *p = (pw *)w;
    svc_tpl *t = p->t;
    pw **link = &t->live;
    while (*link != p) link = &(*link)->next;
    *link = p->next;
    if (w->status == SVC_WORK_OK) {
        t->st.round_done++;
        t->st.prewarmed++;
        svc_log(SVC_LOG_INFO, "template_prewarmed", "name=%s tokens=%d cached=%d ms=%.1f",
                p->job.template_name, w->prompt_tokens, w->cached_tokens, w->total_ms);
    } else {
        t->st.round_failed++;
        t->st.failed++;
        svc_log(SVC_LOG_WARN, "template_prewarm_failed", "name=%s error=\"%s\"", p->job.template_name,
                w->err_msg);
    }
    pw_free(p);
    if (!t->live && t->st.state == SVC_TPL_RUNNING) round_end(t);
}

/* Hand one template to the engine. */
static int submit(svc_tpl *t, const char *name) {
    pw *p = calloc(1, sizeof *p);
    if (!p) return CK_ENOMEM;
    p->t = t;
    p->job.template_name = strdup(name);
    p->job.prompt = strdup("");
    samp_params_default(&p->job.samp);
    p->job.samp.temperature = 0;
    p->job.max_tokens = 1;
    p->job.prefill_only = 1;
    snprintf(p->job.id, sizeof p->job.id, "prewarm:%s", name);
    if (!p->job.template_name || !p->job.prompt) {
        pw_free(p);
        return CK_ENOMEM;
    }
    p->w.job = &p->job;
    p->w.t_enqueue_ms = eng_now_ms();
    p->w.own_done = pw_done;
    p->next = t->live;
    t->live = p;
    t->st.round_total++;
    svc_et_submit(t->et, &p->w);
    return CK_OK;
}

static void start_round(svc_tpl *t, const char *const *names, int n) {
    t->st.state = SVC_TPL_RUNNING;
    t->st.round_total = t->st.round_done = t->st.round_failed = 0;
    for (int i = 0; i < n && !t->closed; i++)
        if (submit(t, names[i])) t->st.round_failed++;
    svc_log(SVC_LOG_INFO, "prewarm_started", "templates=%d", t->st.round_total);
    if (!t->live) round_end(t);
}

static void top_done(void *ud, const redisReply *reply) {
    svc_tpl *t = ud;
    if (t->closed) return;
    const char *names[MAX_ROUND];
    int n = 0;
    if (!reply || reply->type != REDIS_REPLY_ARRAY) {
        svc_log(SVC_LOG_WARN, "prewarm_list_failed", "reply=%s", reply ? "unexpected" : "none");
    } else {
        for (size_t i = 0; i < reply->elements && n < MAX_ROUND; i++) {
            const redisReply *e = reply->element[i];
            /* a member is a name only if it is one (the set is outside data) */
            if (e && e->type == REDIS_REPLY_STRING && e->len <= TPL_NAME_MAX && strlen(e->str) == e->len &&
                tpl_name_ok(e->str))
                names[n++] = e->str;
        }
    }
    start_round(t, names, n);
}

int svc_tpl_prewarm(svc_tpl *t, const char *const *names, int n) {
    if (t->st.state == SVC_TPL_LISTING || t->st.state == SVC_TPL_RUNNING) return CK_EBUSY;
    if (n > MAX_ROUND) return CK_EINVAL;
    for (int i = 0; i < n; i++)
        if (!tpl_name_ok(names[i])) return CK_EINVAL;
    if (n > 0) {
        start_round(t, names, n);
        return CK_OK;
    }
    if (!t->redis) return CK_ESTATE;
    char key[COLDKEY_NS_KEY_MAX], stop[16];
    int kl = coldkey_tpl_uses(key, sizeof key, svc_redis_prefix(t->redis));
    if (kl < 0) return kl;
    snprintf(stop, sizeof stop, "%d", (t->top > 0 ? t->top : 8) - 1);
    const char *argv[4] = {"ZREVRANGE", key, "0", stop};
    size_t lens[4] = {9, (size_t)kl, 1, strlen(stop)};
    int rc = svc_redis_command(t->redis, top_done, t, 4, argv, lens);
    if (rc) return rc;
    t->st.state = SVC_TPL_LISTING;
    return CK_OK;
}

void svc_tpl_tick(svc_tpl *t, int model_loaded) {
    if (!t || t->startup_started || t->st.startup_done || !model_loaded || t->closed) return;
    if (svc_tpl_prewarm(t, NULL, 0)) return; /* Redis not up yet: next tick */
    t->startup_started = 1;
}

void svc_tpl_get_stats(const svc_tpl *t, svc_tpl_stats *s) { *s = t->st; }
