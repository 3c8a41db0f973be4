/* svc_result.c - results and dead-letter records (svc_result.h). */
#include "svc_result.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"

static const char *finish_name(int f) {
    switch (f) {
    case GEN_FINISH_STOP: return "stop";
    case GEN_FINISH_LENGTH:
    case GEN_FINISH_CONTEXT: return "length";
    case ENG_FINISH_EXPIRED: return "expired";
    case ENG_FINISH_CANCELLED: return "cancelled";
    }
    return "unknown";
}

static void add_str_or_null(cJSON *o, const char *k, const char *v) {
    if (v)
        cJSON_AddStringToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

cJSON *svc_result_build(const svc_job *job, const svc_work *w, int err_code, const char *err_msg,
                        const svc_origin *o, const char *model, const char *instance) {
    cJSON *r = cJSON_CreateObject();
    if (!r) return NULL;
    int status = w ? w->status : SVC_WORK_ERROR;
    if (w && w->status == SVC_WORK_ERROR) {
        err_code = w->err_code;
        err_msg = w->err_msg;
    }
    cJSON_AddStringToObject(r, "id", job->id);
    cJSON_AddStringToObject(r, "status",
                            status == SVC_WORK_OK        ? "ok"
                            : status == SVC_WORK_EXPIRED ? "expired"
                                                         : "error");
    if (w && status != SVC_WORK_ERROR) {
        char *text = svc_utf8_clean(w->text ? w->text : "", w->text ? w->text_len : 0);
        cJSON_AddStringToObject(r, "text", text ? text : "");
        free(text);
        cJSON_AddStringToObject(r, "finish_reason", finish_name(w->finish));
    } else {
        cJSON_AddNullToObject(r, "text");
        cJSON_AddNullToObject(r, "finish_reason");
    }
    cJSON *u = cJSON_AddObjectToObject(r, "usage");
    int pt = w ? w->prompt_tokens : 0, ct = w ? w->completion_tokens : 0;
    cJSON_AddNumberToObject(u, "prompt_tokens", pt);
    cJSON_AddNumberToObject(u, "completion_tokens", ct);
    cJSON_AddNumberToObject(u, "total_tokens", pt + ct);
    cJSON_AddNumberToObject(u, "cached_tokens", w ? w->cached_tokens : 0);
    if (w && status != SVC_WORK_ERROR) {
        cJSON *kv = cJSON_AddObjectToObject(r, "kv");
        cJSON_AddStringToObject(kv, "policy", w->policy);
        cJSON_AddNumberToObject(kv, "retained_mean", w->kv_retained_mean);
        cJSON_AddNumberToObject(kv, "hot_peak_bytes", (double)w->hot_peak_bytes);
        cJSON_AddNumberToObject(kv, "recalls", (double)w->recalls);
        cJSON_AddNumberToObject(kv, "demotions", (double)w->demotions);
        cJSON_AddNumberToObject(kv, "spills", (double)w->spills);
        cJSON *c = cJSON_AddObjectToObject(r, "confidence");
        cJSON_AddNumberToObject(c, "mean_entropy", w->mean_entropy);
        cJSON_AddNumberToObject(c, "mean_gap", w->mean_gap);
        cJSON_AddNumberToObject(c, "mean_pmax", w->mean_pmax);
        if (job->return_confidence && w->trace) {
            cJSON *tr = cJSON_AddArrayToObject(c, "trace");
            for (int i = 0; tr && i < w->n_trace; i++) {
                cJSON *e = cJSON_CreateObject();
                if (!e) break;
                cJSON_AddNumberToObject(e, "id", w->trace_ids[i]);
                cJSON_AddNumberToObject(e, "entropy", w->trace[i].entropy);
                cJSON_AddNumberToObject(e, "gap", w->trace[i].gap);
                cJSON_AddNumberToObject(e, "pmax", w->trace[i].pmax);
                cJSON_AddItemToArray(tr, e);
            }
        }
        cJSON *t = cJSON_AddObjectToObject(r, "timings");
        cJSON_AddNumberToObject(t, "queue_ms", w->queue_ms);
        cJSON_AddNumberToObject(t, "ttft_ms", w->ttft_ms);
        cJSON_AddNumberToObject(t, "total_ms", w->total_ms);
    } else {
        cJSON_AddNullToObject(r, "kv");
        cJSON_AddNullToObject(r, "confidence");
        cJSON_AddNullToObject(r, "timings");
    }
    /* what the engine changed in the job (a system message merged into the
     * next turn...), one sentence each; absent when nothing */
    if (w && status != SVC_WORK_ERROR && w->warnings) {
        cJSON *wa = cJSON_AddArrayToObject(r, "warnings");
        for (int bit = 1; wa && bit > 0 && bit <= w->warnings; bit <<= 1)
            if ((w->warnings & bit) && eng_warning_text(bit))
                cJSON_AddItemToArray(wa, cJSON_CreateString(eng_warning_text(bit)));
    }
    if (status == SVC_WORK_ERROR || status == SVC_WORK_EXPIRED) {
        cJSON *e = cJSON_AddObjectToObject(r, "error");
        int code = status == SVC_WORK_EXPIRED ? SVC_JERR_DEADLINE_EXCEEDED : err_code;
        cJSON_AddStringToObject(e, "code", svc_job_error_code(code));
        cJSON_AddStringToObject(e, "message",
                                status == SVC_WORK_EXPIRED && (!err_msg || !*err_msg)
                                    ? "the job's deadline passed before it finished"
                                : err_msg ? err_msg
                                          : "");
    } else {
        cJSON_AddNullToObject(r, "error");
    }
    if (job->metadata)
        cJSON_AddItemToObject(r, "metadata", cJSON_Duplicate(job->metadata, 1));
    else
        cJSON_AddNullToObject(r, "metadata");
    add_str_or_null(r, "session_id", job->session_id);
    add_str_or_null(r, "template", job->template_name);
    /* The model that produced it, and how the job got there (svc_models.h):
     * named, or the cascade's small model, or moved to the large one after
     * at_token accepted tokens. null: the job never reached a model. */
    if (w && w->route_model) {
        cJSON_AddStringToObject(r, "model", w->route_model);
        cJSON *rt = cJSON_AddObjectToObject(r, "route");
        cJSON_AddStringToObject(rt, "model", w->route_model);
        cJSON_AddBoolToObject(rt, "escalated", w->escalated);
        if (w->escalated)
            cJSON_AddNumberToObject(rt, "at_token", w->at_token);
        else
            cJSON_AddNullToObject(rt, "at_token");
    } else {
        cJSON_AddStringToObject(r, "model", model ? model : "");
        cJSON_AddNullToObject(r, "route");
    }
    cJSON_AddStringToObject(r, "instance", instance ? instance : "");
    cJSON_AddBoolToObject(r, "redelivered", o && o->redelivered);
    if (o) {
        cJSON *s = cJSON_AddObjectToObject(r, "source");
        cJSON_AddStringToObject(s, "topic", o->topic ? o->topic : "");
        cJSON_AddNumberToObject(s, "partition", o->partition);
        cJSON_AddNumberToObject(s, "offset", (double)o->offset);
    }
    return r;
}

int svc_result_encode(const cJSON *r, int encoding, char **out, size_t *len) {
    if (encoding == SVC_ENC_MSGPACK) return svc_msgpack_encode(r, out, len);
    char *s = cJSON_PrintUnformatted(r);
    if (!s) return CK_ENOMEM;
    *out = s;
    *len = strlen(s);
    return 0;
}

char *svc_base64(const void *data, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *w++ = tab[v >> 18];
        *w++ = tab[(v >> 12) & 63];
        *w++ = tab[(v >> 6) & 63];
        *w++ = tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        *w++ = tab[v >> 18];
        *w++ = tab[(v >> 12) & 63];
        *w++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *w++ = '=';
    }
    *w = 0;
    return o;
}

char *svc_dlq_build(const rd_kafka_message_t *m, const char *error, const char *instance, size_t *len) {
    cJSON *r = cJSON_CreateObject();
    if (!r) return NULL;
    cJSON *e = cJSON_AddObjectToObject(r, "error");
    cJSON_AddStringToObject(e, "code", "undecodable");
    char *msg = svc_utf8_clean(error, strlen(error));
    cJSON_AddStringToObject(e, "message", msg ? msg : "");
    free(msg);
    cJSON *o = cJSON_AddObjectToObject(r, "original");
    cJSON_AddStringToObject(o, "topic", m->rkt ? rd_kafka_topic_name(m->rkt) : "");
    cJSON_AddNumberToObject(o, "partition", m->partition);
    cJSON_AddNumberToObject(o, "offset", (double)m->offset);
    rd_kafka_timestamp_type_t tt;
    int64_t ts = rd_kafka_message_timestamp(m, &tt);
    cJSON_AddNumberToObject(o, "timestamp_ms", (double)ts);
    char *k = m->key ? svc_base64(m->key, m->key_len) : NULL;
    add_str_or_null(o, "key_base64", k);
    free(k);
    /* The original value, cut to SVC_DLQ_MAX_VALUE bytes so that the record
     * stays under Kafka's message size. */
    size_t keep = m->len > SVC_DLQ_MAX_VALUE ? SVC_DLQ_MAX_VALUE : m->len;
    char *v = svc_base64(m->payload ? m->payload : "", m->payload ? keep : 0);
    cJSON_AddStringToObject(o, "value_base64", v ? v : "");
    free(v);
    cJSON_AddNumberToObject(o, "value_bytes", (double)m->len);
    cJSON_AddBoolToObject(o, "value_truncated", keep < m->len);
    rd_kafka_headers_t *hdrs = NULL;
    cJSON *h = cJSON_AddObjectToObject(o, "headers");
    if (rd_kafka_message_headers(m, &hdrs) == 0 && hdrs) {
        const char *name;
        const void *val;
        size_t vl;
        for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &vl) == 0 && i < 64; i++) {
            char *c = svc_utf8_clean(val ? val : "", val ? vl : 0);
            char *cn = svc_utf8_clean(name, strlen(name));
            if (c && cn && !cJSON_GetObjectItemCaseSensitive(h, cn)) cJSON_AddStringToObject(h, cn, c);
            free(c);
            free(cn);
        }
    }
    cJSON_AddStringToObject(r, "instance", instance ? instance : "");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cJSON_AddNumberToObject(r, "ts_ms", (double)now.tv_sec * 1000 + (double)(now.tv_nsec / 1000000));
    char *s = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    if (s) *len = strlen(s);
    return s;
}
