/* svc_admin.c - confkvd's HTTP endpoints (svc_service_int.h): /healthz,
 * /readyz, /metrics (Prometheus text and JSON), /templates/prewarm. They
 * run on the loop thread and read the service's state as it stands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "svc_service_int.h"

/* A rendering's figures; es, batch and mm have room for every model. */
static void view(svc_service *s, svc_metrics_view *v, eng_stats *es, svc_hist *batch, svc_metrics_model *mm,
                 svc_kafka_stats *ks, svc_redis_stats *rs) {
    memset(v, 0, sizeof *v);
    v->m = &s->metrics;
    int n = svc_models_count(s->models);
    for (int i = 0; i < n; i++) {
        const svc_model_info *mi = svc_models_info(s->models, i);
        memset(&mm[i], 0, sizeof mm[i]);
        mm[i].name = mi->name[0] ? mi->name : mi->path;
        mm[i].loaded = mi->loaded;
        mm[i].results = mi->results;
        mm[i].escalated = mi->escalated;
        mm[i].kept = mi->kept;
        mm[i].received = mi->received;
        if (mi->et && svc_et_stats(mi->et, &es[i], &batch[i])) {
            mm[i].eng = &es[i];
            mm[i].batch = &batch[i];
        }
    }
    v->models = mm;
    v->n_models = n;
    if (s->models && *svc_models_route(s->models)) {
        v->route = s->cfg->route_models;
        v->route_rule = svc_models_route(s->models);
        v->route_small = s->cfg->route_small;
    }
    if (s->kafka) {
        svc_kafka_get_stats(s->kafka, ks);
        v->kafka = ks;
    }
    if (s->redis) {
        svc_redis_get_stats(s->redis, rs);
        v->redis = rs;
    }
    v->ready = !svc_service_not_ready(s);
    v->model_loaded = s->loaded;
    v->inflight = s->inflight;
    v->draining = s->draining;
    v->uptime_s = svc_service_now() - s->t_start;
    v->model = s->model_name;
    v->instance = s->instance;
}

char *svc_admin_render(svc_service *s, int json, size_t *len) {
    svc_metrics_view v;
    eng_stats es[SVC_MODELS_MAX];
    svc_hist batch[SVC_MODELS_MAX];
    svc_metrics_model mm[SVC_MODELS_MAX];
    svc_kafka_stats ks = {0};
    svc_redis_stats rs;
    view(s, &v, es, batch, mm, &ks, &rs);
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    if (json)
        svc_metrics_json(&v, f);
    else
        svc_metrics_render(&v, f);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* POST /templates/prewarm, body {"names": ["a", ...]} or empty/{} for the
 * most used. 202 started, 400 bad body, 409 a round runs, 503 no Redis. */
static void http_prewarm(svc_service *s, const svc_http_req *q, svc_http_resp *r) {
    r->content_type = "application/json";
    const char *names[64];
    int n = 0, bad = 0;
    cJSON *body = q->body_len ? cJSON_ParseWithLength(q->body, q->body_len) : NULL;
    if (q->body_len && !cJSON_IsObject(body)) bad = 1;
    cJSON *arr = body ? cJSON_GetObjectItemCaseSensitive(body, "names") : NULL;
    if (arr && (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > 64)) bad = 1;
    cJSON *it;
    if (!bad && arr) cJSON_ArrayForEach(it, arr) {
            if (!cJSON_IsString(it) || !eng_template_name_ok(it->valuestring))
                bad = 1;
            else
                names[n++] = it->valuestring;
        }
    int rc = bad ? CK_EINVAL : !s->loaded ? CK_ESTATE : svc_tpl_prewarm(s->tpl, names, n);
    svc_tpl_stats ts;
    svc_tpl_get_stats(s->tpl, &ts);
    r->status = rc == CK_OK ? 202 : rc == CK_EINVAL ? 400 : rc == CK_EBUSY ? 409 : 503;
    const char *why = rc == CK_OK       ? ""
                      : rc == CK_EINVAL ? "body must be {\"names\": [template names]}"
                      : rc == CK_EBUSY  ? "a prewarm round is running"
                      : !s->loaded      ? "the model is not loaded yet"
                                        : "Redis is not connected";
    if (asprintf(&r->body, "{\"started\": %s, \"templates\": %d, \"error\": \"%s\"}\n", rc ? "false" : "true",
                 rc  ? 0
                 : n ? n
                     : -1,
                 why) < 0)
        r->body = NULL;
    r->len = r->body ? strlen(r->body) : 0;
    cJSON_Delete(body);
}

static const char *prewarm_state(const svc_service *s) {
    static const char *names[] = {"idle", "listing", "running", "done"};
    if (!s->tpl) return "idle";
    svc_tpl_stats ts;
    svc_tpl_get_stats(s->tpl, &ts);
    return names[ts.state & 3];
}

/* A name as a JSON string's content: model names are file names or
 * configured names; anything else than printable ASCII without quotes and
 * backslashes is left out. */
static void plain(char *dst, size_t cap, const char *src) {
    size_t n = 0;
    for (; src && *src && n + 1 < cap; src++)
        if (*src >= 0x20 && *src < 0x7f && *src != '"' && *src != '\\') dst[n++] = *src;
    dst[n] = 0;
}

/* /readyz's per-model part: [{"name", "loaded", "arch", "vocab_size", "vocab_hash"}, ...] */
static const char *models_json(const svc_service *s, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; s->models && i < svc_models_count(s->models); i++) {
        const svc_model_info *mi = svc_models_info(s->models, i);
        const eng_prompt_format *pf = mi->et ? svc_et_chat_info(mi->et) : NULL;
        char name[64];
        plain(name, sizeof name, mi->name[0] ? mi->name : mi->path);
        int k = snprintf(buf + n, cap - n,
                         "%s{\"name\": \"%s\", \"loaded\": %s, \"arch\": \"%s\", \"vocab_size\": %d, "
                         "\"vocab_hash\": \"%s\"}",
                         i ? ", " : "", name, mi->loaded ? "true" : "false", pf ? pf->arch : "",
                         pf ? pf->vocab_size : 0, pf ? pf->vocab_hash : "");
        if (k < 0 || (size_t)k >= cap - n) break;
        n += (size_t)k;
    }
    return buf;
}

/* /readyz's cascade: {"mode": "cascade", "small", "large", "rule"} or null. */
static const char *route_json(const svc_service *s, char *buf, size_t cap) {
    const svc_config *c = s->cfg;
    if (!s->models || !c->route_cascade) return "null";
    char small[64], large[64];
    plain(small, sizeof small, c->models[c->route_small].name);
    plain(large, sizeof large, c->models[c->route_large].name);
    snprintf(buf, cap, "{\"mode\": \"cascade\", \"small\": \"%s\", \"large\": \"%s\", \"rule\": \"%s\"}",
             small, large, svc_models_route(s->models));
    return buf;
}

void svc_admin_http(void *ud, const svc_http_req *q, svc_http_resp *r) {
    svc_service *s = ud;
    const char *path = q->path;
    if (!strcmp(path, "/templates/prewarm")) {
        if (strcmp(q->method, "POST")) {
            r->status = 405;
            return;
        }
        return http_prewarm(s, q, r);
    }
    if (!strcmp(q->method, "POST")) {
        r->status =
            path[0] && (!strcmp(path, "/metrics") || !strcmp(path, "/healthz") || !strcmp(path, "/readyz"))
                ? 405
                : 404;
        return;
    }
    if (!strcmp(path, "/metrics")) {
        r->body = svc_admin_render(s, 0, &r->len);
        r->status = r->body ? 200 : 503;
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (!strcmp(path, "/healthz") || !strcmp(path, "/v2/health/live")) {
        r->status = 200;
    } else if (!strcmp(path, "/readyz") || !strcmp(path, "/v2/health/ready")) {
        svc_kafka_stats ks = {0};
        if (s->kafka) svc_kafka_get_stats(s->kafka, &ks);
        const char *why = svc_service_not_ready(s);
        int ready = !why;
        /* Redis down is a degradation (no cold tier), not unreadiness. */
        svc_redis_stats rs = {0};
        if (s->redis) svc_redis_get_stats(s->redis, &rs);
        char *b = NULL;
        /* the prompt format (chat_model_describe keeps these printable ASCII) */
        const eng_prompt_format *ci = s->models ? svc_et_chat_info(svc_models_et(s->models, 0)) : NULL;
        char models[4096], route[512];
        if (asprintf(&b,
                     "{\"ready\": %s, \"reason\": %s%s%s, \"model_loaded\": %s, \"kafka_connected\": %s, "
                     "\"group_joined\": %s, \"partitions_assigned\": %d, \"draining\": %s, "
                     "\"redis\": \"%s\", \"prewarm\": \"%s\", \"arch\": \"%s\", \"tokenizer\": \"%s\", "
                     "\"tokenizer_pre\": \"%s\", \"chat_template\": \"%s\", \"chat_template_hash\": \"%s\", "
                     "\"models\": [%s], \"route\": %s}\n",
                     ready ? "true" : "false", why ? "\"" : "", why ? why : "null", why ? "\"" : "",
                     s->loaded ? "true" : "false", ks.up ? "true" : "false", ks.joined ? "true" : "false",
                     ks.assigned, s->draining ? "true" : "false",
                     !s->redis ? "off"
                     : rs.up   ? "up"
                               : "down",
                     prewarm_state(s), ci ? ci->arch : "", ci ? ci->tok_model : "", ci ? ci->tok_pre : "",
                     ci ? ci->template_source : "", ci ? ci->template_hash : "",
                     models_json(s, models, sizeof models), route_json(s, route, sizeof route)) < 0)
            b = NULL;
        r->status = ready ? 200 : 503;
        r->body = b;
        r->len = b ? strlen(b) : 0;
        r->content_type = "application/json";
    }
}
