/* svc_service.c - confkvd's event loop and job flow (svc_service.h). */
#include "svc_service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "ck_err.h"
#include "svc_broker.h"
#include "svc_et.h"
#include "svc_http.h"
#include "svc_job.h"
#include "svc_kafka.h"
#include "svc_log.h"
#include "svc_metrics.h"
#include "svc_models.h"
#include "svc_redis.h"
#include "svc_result.h"
#include "svc_service_int.h"
#include "svc_stream.h"
#include "svc_tpl.h"

#define MAX_PRODUCE_ATTEMPTS 3

/* One consumed message, from consumption to the delivery of what it produced. */
typedef struct rec {
    svc_work w; /* first: the engine thread hands back &w */
    svc_job job;
    struct svc_service *s;
    struct rec *prev, *next;
    svc_ktok tok;
    svc_origin origin;
    char corr_id[SVC_JOB_ID_MAX + 1];
    char reply_topic[250];
    char *payload; /* what is being produced (kept for retries) */
    size_t payload_len;
    const char *out_topic;
    int attempts, in_engine, is_dlq, status;
    /* streaming (svc_stream.h): the next record's seq; the end record is
     * out, and the result it waits for (produced once the end is delivered) */
    int64_t stream_seq;
    int stream_closed, pend_w, pend_code;
    char pend_msg[256];
} rec;

double svc_service_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void finish_service(svc_service *s);

/* ------------------------------------------------------------------------ */
/* readiness */

static int prewarm_pending(const svc_service *s) {
    if (!s->cfg->prewarm_wait || !s->tpl) return 0;
    svc_tpl_stats ts;
    svc_tpl_get_stats(s->tpl, &ts);
    return !ts.startup_done;
}

/* Readiness is "can take work": the model loaded, Kafka reachable, the
 * consumer a member of its group, not draining (and, with prewarm_wait,
 * the start-up prewarm done). Holding partitions is not part of it: a
 * group with more members than partitions leaves some idle, and they are
 * ready all the same (confkv_kafka_partitions_assigned says who works).
 * NULL when ready, else why not (/readyz's "reason"). */
const char *svc_service_not_ready(const svc_service *s) {
    svc_kafka_stats ks = {0};
    if (s->kafka) svc_kafka_get_stats(s->kafka, &ks);
    if (s->draining) return "draining";
    if (!s->loaded) return "the model is not loaded yet";
    if (!s->kafka || !ks.up) return "no Kafka broker is reachable";
    if (!ks.joined) return "the consumer has not joined its group yet";
    if (prewarm_pending(s)) return "the start-up prewarm is not done (prewarm_wait)";
    return NULL;
}

static int is_ready(const svc_service *s) { return !svc_service_not_ready(s); }

static void write_ready_file(svc_service *s) {
    if (s->ready_written || !is_ready(s)) return;
    s->ready_written = 1;
    char http[300];
    snprintf(http, sizeof http, "%s:%d", s->cfg->http_host, s->http ? svc_http_port(s->http) : 0);
    svc_log(SVC_LOG_INFO, "ready", "bootstrap_servers=%s http=%s model=%s", s->bootstrap, http,
            s->model_name);
    if (!s->cfg->ready_file) return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->cfg->ready_file);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        svc_log(SVC_LOG_ERROR, "ready_file_failed", "path=%s err=%s", tmp, strerror(errno));
        return;
    }
    fprintf(f, "{\"bootstrap_servers\": \"%s\", \"http\": \"%s\"}\n", s->bootstrap, http);
    if (fclose(f) || rename(tmp, s->cfg->ready_file))
        svc_log(SVC_LOG_ERROR, "ready_file_failed", "path=%s err=%s", s->cfg->ready_file, strerror(errno));
}

/* ------------------------------------------------------------------------ */
/* records and producing */

static void backpressure(svc_service *s) {
    int pause = s->draining || s->inflight >= s->cfg->max_inflight;
    int resume = !s->draining && s->inflight <= s->cfg->max_inflight / 2;
    if (pause && !s->paused) {
        s->paused = 1;
        svc_kafka_pause(s->kafka, 1);
    } else if (resume && s->paused) {
        s->paused = 0;
        svc_kafka_pause(s->kafka, 0);
    }
}

static void rec_free(svc_service *s, rec *r) {
    if (r->prev)
        r->prev->next = r->next;
    else
        s->recs = r->next;
    if (r->next) r->next->prev = r->prev;
    s->inflight--;
    svc_work_clear(&r->w);
    svc_job_free(&r->job);
    free(r->payload);
    free(r);
}

static int produce(rec *r);

static void dr_cb(void *ud, rd_kafka_resp_err_t err) {
    rec *r = ud;
    svc_service *s = r->s;
    if (err) {
        if (++r->attempts < MAX_PRODUCE_ATTEMPTS && !s->stopping && produce(r) == 0) return;
        /* Given up: the offset stays unstored, so the job is redelivered
         * after a restart or rebalance (at-least-once). */
        s->metrics.results_failed++;
        svc_log(SVC_LOG_ERROR, "result_lost", "id=%s partition=%d offset=%lld err=%s", r->job.id,
                r->tok.partition, (long long)r->tok.offset, rd_kafka_err2name(err));
    } else {
        svc_kafka_done(s->kafka, r->tok);
    }
    rec_free(s, r);
    backpressure(s);
}

static int produce(rec *r) {
    svc_service *s = r->s;
    rd_kafka_headers_t *h = rd_kafka_headers_new(4);
    if (r->is_dlq) {
        char num[32];
        rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
        rd_kafka_header_add(h, "kafka_dlt-original-topic", -1, r->origin.topic, -1);
        snprintf(num, sizeof num, "%d", r->origin.partition);
        rd_kafka_header_add(h, "kafka_dlt-original-partition", -1, num, -1);
        snprintf(num, sizeof num, "%lld", (long long)r->origin.offset);
        rd_kafka_header_add(h, "kafka_dlt-original-offset", -1, num, -1);
    } else {
        rd_kafka_header_add(h, "content-type", -1,
                            r->job.encoding == SVC_ENC_MSGPACK ? "application/msgpack" : "application/json",
                            -1);
        rd_kafka_header_add(h, "kafka_correlationId", -1, r->corr_id[0] ? r->corr_id : r->job.id, -1);
    }
    const char *key = r->job.id;
    int rc =
        svc_kafka_produce(s->kafka, r->out_topic, key, strlen(key), r->payload, r->payload_len, h, dr_cb, r);
    return rc;
}

/* Produce what a record resolved to; on failure to even queue it, drop it
 * without storing its offset (redelivered later). */
static void send_result(rec *r, const svc_work *w, int err_code, const char *err_msg);

static void send_rec(rec *r) {
    svc_service *s = r->s;
    int rc = produce(r);
    if (rc == CK_ERANGE && !r->is_dlq && r->job.metadata) {
        /* Too large for Kafka (a big metadata echo or trace): send a small
         * error result instead, so the partition does not stall. */
        cJSON_Delete(r->job.metadata);
        r->job.metadata = NULL;
        r->job.return_confidence = 0;
        free(r->payload);
        r->payload = NULL;
        char msg[160];
        snprintf(msg, sizeof msg, "the result was over Kafka's message.max.bytes (%zu bytes)",
                 r->payload_len);
        send_result(r, NULL, SVC_JERR_RESULT_TOO_LARGE, msg);
        return;
    }
    if (rc) {
        s->metrics.results_failed++;
        rec_free(s, r);
        backpressure(s);
    }
}

static void count_result(svc_service *s, rec *r, const svc_work *w, int err_code) {
    int st = w ? (w->status == SVC_WORK_OK        ? SVC_ST_OK
                  : w->status == SVC_WORK_EXPIRED ? SVC_ST_EXPIRED
                                                  : SVC_ST_ERROR)
               : SVC_ST_ERROR;
    s->metrics.jobs[st]++;
    if (w && w->status == SVC_WORK_ERROR) err_code = w->err_code;
    if (st == SVC_ST_ERROR && err_code > 0 && err_code < 16) s->metrics.errors_by_code[err_code]++;
    char q[300];
    svc_log(
        st == SVC_ST_ERROR ? SVC_LOG_WARN : SVC_LOG_INFO, "job_done",
        "id=%s status=%s partition=%d offset=%lld prompt_tokens=%d completion_tokens=%d total_ms=%.1f%s%s",
        svc_log_str(q, sizeof q, r->job.id, strlen(r->job.id)),
        st == SVC_ST_OK        ? "ok"
        : st == SVC_ST_EXPIRED ? "expired"
                               : "error",
        r->tok.partition, (long long)r->tok.offset, w ? w->prompt_tokens : 0, w ? w->completion_tokens : 0,
        w ? w->total_ms : 0.0, st == SVC_ST_ERROR ? " code=" : "",
        st == SVC_ST_ERROR ? svc_job_error_code(err_code) : "");
    if (!w || w->status != SVC_WORK_OK) return;
    if (r->job.template_name) svc_tpl_used(s->tpl, r->job.template_name);
    svc_metrics *m = &s->metrics;
    m->prompt_tokens += (uint64_t)w->prompt_tokens;
    m->completion_tokens += (uint64_t)w->completion_tokens;
    m->cached_tokens += (uint64_t)w->cached_tokens;
    svc_hist_observe(&m->queue_s, w->queue_ms / 1e3);
    svc_hist_observe(&m->ttft_s, w->ttft_ms / 1e3);
    svc_hist_observe(&m->total_s, w->total_ms / 1e3);
    /* inter-token latency: the job's mean time between its tokens */
    if (w->completion_tokens > 1)
        svc_hist_observe(&m->itl_s, (w->total_ms - w->ttft_ms) / 1e3 / (w->completion_tokens - 1));
    if (w->completion_tokens > 0) {
        svc_hist_observe(&m->entropy, w->mean_entropy);
        svc_hist_observe(&m->gap, w->mean_gap);
        svc_hist_observe(&m->pmax, w->mean_pmax);
        svc_hist_observe(&m->kv_retained, w->kv_retained_mean);
        svc_hist_observe(&m->hot_peak_bytes, (double)w->hot_peak_bytes);
    }
    m->recalls += w->recalls;
    m->demotions += w->demotions;
    m->spills += w->spills;
}

/* ------------------------------------------------------------------------ */
/* streamed jobs' records (docs/SERVICE.md, Streaming) */

/* A partial record's delivery: only counted (the result is what counts). */
static void stream_dr(void *ud, rd_kafka_resp_err_t err) {
    svc_service *s = ud;
    if (err) s->metrics.stream_failed++;
}

/* Produce {"id", "seq", "delta", "done"[, "error"]} on the stream topic,
 * keyed by the job id (one partition: in order), in the job's encoding.
 * raw: n bytes of text at a UTF-8 boundary, cleaned like the result's text.
 * error: the end record's (borrowed; NULL: null). 0, or CK_E* (counted). */
static int stream_send(svc_service *s, rec *r, const char *raw, size_t n, int done, const cJSON *error,
                       svc_kafka_dr_cb cb, void *ud) {
    cJSON *o = cJSON_CreateObject();
    char *delta = svc_utf8_clean(raw ? raw : "", raw ? n : 0), *payload = NULL;
    size_t len = 0;
    int rc = CK_ENOMEM;
    if (o && delta) {
        cJSON_AddStringToObject(o, "id", r->job.id);
        cJSON_AddNumberToObject(o, "seq", (double)r->stream_seq);
        cJSON_AddStringToObject(o, "delta", delta);
        cJSON_AddBoolToObject(o, "done", done);
        if (done) {
            cJSON *e = error ? cJSON_Duplicate(error, 1) : cJSON_CreateNull();
            if (e) cJSON_AddItemToObject(o, "error", e);
        }
        rc = svc_result_encode(o, r->job.encoding, &payload, &len);
    }
    cJSON_Delete(o);
    free(delta);
    if (!rc) {
        rd_kafka_headers_t *h = rd_kafka_headers_new(2);
        rd_kafka_header_add(h, "content-type", -1,
                            r->job.encoding == SVC_ENC_MSGPACK ? "application/msgpack" : "application/json",
                            -1);
        rd_kafka_header_add(h, "kafka_correlationId", -1, r->corr_id[0] ? r->corr_id : r->job.id, -1);
        rc = svc_kafka_produce(s->kafka, s->cfg->topic_stream, r->job.id, strlen(r->job.id), payload, len, h,
                               cb, ud);
        free(payload);
    }
    if (rc) {
        s->metrics.stream_failed++;
        char q[300];
        svc_log(SVC_LOG_WARN, "stream_record_failed", "id=%s seq=%lld done=%d err=%s",
                svc_log_str(q, sizeof q, r->job.id, strlen(r->job.id)), (long long)r->stream_seq, done,
                ck_errname(rc));
        return rc;
    }
    r->stream_seq++;
    s->metrics.stream_records++;
    return 0;
}

/* A delta the engine thread cut (svc_et_stream_cb): the work is still in
 * the engine; only its job (read-only there too) and the record's own
 * streaming fields are touched. */
static void on_stream(void *ud, svc_work *w, const char *delta, size_t n) {
    svc_service *s = ud;
    rec *r = (rec *)w;
    if (s->stopping || r->stream_closed) return;
    stream_send(s, r, delta, n, 0, NULL, stream_dr, s);
}

static void send_result(rec *r, const svc_work *w, int err_code, const char *err_msg);

/* The end record has been delivered (or not): now the result. */
static void stream_end_dr(void *ud, rd_kafka_resp_err_t err) {
    rec *r = ud;
    svc_service *s = r->s;
    if (err) s->metrics.stream_failed++;
    if (s->stopping) return; /* the record is freed with the rest */
    send_result(r, r->pend_w ? &r->w : NULL, r->pend_code, r->pend_msg[0] ? r->pend_msg : NULL);
}

/* A streamed job's end: the rest of its text (the result's, after what the
 * deltas carried) with done=true and the result's error (null when ok).
 * Returns 0 when the record is on its way (the result follows its delivery,
 * so the end is on the broker before the result is); else the result goes
 * at once. */
static int stream_end(rec *r, const svc_work *w, int err_code, const char *err_msg) {
    svc_service *s = r->s;
    cJSON *t = svc_result_build(&r->job, w, err_code, err_msg, &r->origin, s->model_name, s->instance);
    if (!t) return CK_ENOMEM;
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(t, "error");
    int has_text = w && w->status != SVC_WORK_ERROR && w->text;
    const char *text = has_text ? w->text : NULL;
    size_t len = has_text ? w->text_len : 0, off = 0;
    cJSON *diverged = NULL;
    if (svc_stream_rest(w ? w->stream : NULL, text, len, &off)) {
        /* cannot happen with models of one vocabulary (svc_models.h); said
         * rather than sending text that does not add up */
        char q[300];
        svc_log(SVC_LOG_ERROR, "stream_diverged", "id=%s",
                svc_log_str(q, sizeof q, r->job.id, strlen(r->job.id)));
        diverged = cJSON_CreateObject();
        cJSON_AddStringToObject(diverged, "code", "stream_diverged");
        cJSON_AddStringToObject(diverged, "message",
                                "the deltas sent do not begin the result's text: use the result's text");
        error = diverged;
        off = len;
    }
    r->pend_w = w != NULL;
    r->pend_code = err_code;
    snprintf(r->pend_msg, sizeof r->pend_msg, "%s", err_msg ? err_msg : "");
    int rc = stream_send(s, r, text ? text + off : NULL, len - off, 1, cJSON_IsNull(error) ? NULL : error,
                         stream_end_dr, r);
    cJSON_Delete(diverged);
    cJSON_Delete(t);
    return rc;
}

/* Build, encode and send the result of a record (a streamed job's end
 * record first: the result then follows its delivery). */
static void send_result(rec *r, const svc_work *w, int err_code, const char *err_msg) {
    svc_service *s = r->s;
    if (r->job.stream && !r->stream_closed) {
        r->stream_closed = 1;
        if (stream_end(r, w, err_code, err_msg) == 0) return;
    }
    count_result(s, r, w, err_code);
    cJSON *t = svc_result_build(&r->job, w, err_code, err_msg, &r->origin, s->model_name, s->instance);
    int rc = t ? svc_result_encode(t, r->job.encoding, &r->payload, &r->payload_len) : CK_ENOMEM;
    cJSON_Delete(t);
    if (rc) {
        svc_log(SVC_LOG_ERROR, "result_encode_failed", "id=%s", r->job.id);
        s->metrics.results_failed++;
        rec_free(s, r);
        return;
    }
    r->out_topic = r->reply_topic[0] ? r->reply_topic : s->cfg->topic_results;
    send_rec(r);
}

static void et_done(void *ud, svc_work *w) {
    svc_service *s = ud;
    if (w->own_done) { /* a prewarm */
        w->own_done(w);
        return;
    }
    rec *r = (rec *)w;
    r->in_engine = 0;
    if (s->stopping) return; /* the record is freed with the rest */
    send_result(r, w, 0, NULL);
}

/* ------------------------------------------------------------------------ */
/* consuming */

static int header(const rd_kafka_message_t *m, const char *const *names, char *out, size_t cap) {
    rd_kafka_headers_t *h = NULL;
    if (rd_kafka_message_headers(m, &h) || !h) return 0;
    for (; *names; names++) {
        const void *v;
        size_t n;
        if (rd_kafka_header_get_last(h, *names, &v, &n) == 0 && v && n < cap) {
            memcpy(out, v, n);
            out[n] = 0;
            if (!memchr(out, 0, n)) return 1;
        }
    }
    out[0] = 0;
    return 0;
}

static int valid_topic(const char *t) {
    size_t n = strlen(t);
    if (n == 0 || n > 249 || !strcmp(t, ".") || !strcmp(t, "..")) return 0;
    for (; *t; t++)
        if (!((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || (*t >= '0' && *t <= '9') || *t == '.' ||
              *t == '_' || *t == '-'))
            return 0;
    return 1;
}

static void on_message(void *ud, const rd_kafka_message_t *m, svc_ktok tok) {
    svc_service *s = ud;
    s->metrics.jobs_consumed++;
    rec *r = calloc(1, sizeof *r);
    if (!r) {
        svc_log(SVC_LOG_ERROR, "out_of_memory", "partition=%d offset=%lld", m->partition,
                (long long)m->offset);
        return; /* never done: redelivered after a restart */
    }
    r->s = s;
    r->tok = tok;
    r->origin.topic = s->cfg->topic_jobs;
    r->origin.partition = m->partition;
    r->origin.offset = m->offset;
    /* redelivery marks: set by svc_kafka from the committed dispatch mark */
    r->origin.redelivered = tok.redelivered;
    if (tok.redelivered) s->metrics.jobs_redelivered++;
    r->next = s->recs;
    if (s->recs) s->recs->prev = r;
    s->recs = r;
    s->inflight++;
    backpressure(s);

    static const char *ct_names[] = {"content-type", "Content-Type", "contentType", NULL};
    static const char *corr_names[] = {"kafka_correlationId", "correlation-id", "correlation_id",
                                       "correlationId", NULL};
    static const char *reply_names[] = {"kafka_replyTopic", "reply-topic", "reply_topic", "replyTopic", NULL};
    char ct[128];
    int have_ct = header(m, ct_names, ct, sizeof ct);
    header(m, corr_names, r->corr_id, sizeof r->corr_id);
    if (header(m, reply_names, r->reply_topic, sizeof r->reply_topic) && !valid_topic(r->reply_topic)) {
        svc_log(SVC_LOG_WARN, "bad_reply_topic", "partition=%d offset=%lld", m->partition,
                (long long)m->offset);
        r->reply_topic[0] = 0;
    }
    /* id fallback: the key when it is printable text, else topic-partition-offset */
    char fallback[SVC_JOB_ID_MAX + 1];
    int key_ok = m->key && m->key_len > 0 && m->key_len <= SVC_JOB_ID_MAX;
    for (size_t i = 0; key_ok && i < m->key_len; i++) {
        unsigned char c = ((const unsigned char *)m->key)[i];
        key_ok = c >= 0x20 && c != 0x7f;
    }
    if (key_ok) {
        memcpy(fallback, m->key, m->key_len);
        fallback[m->key_len] = 0;
    } else {
        snprintf(fallback, sizeof fallback, "%s-%d-%lld", s->cfg->topic_jobs, m->partition,
                 (long long)m->offset);
    }
    svc_job_error e;
    int rc = svc_job_decode(m->payload, m->payload ? m->len : 0, have_ct ? ct : NULL, fallback, &s->lim,
                            &r->job, &e);
    if (rc == SVC_JOB_DEAD) {
        char q[300];
        svc_log(SVC_LOG_WARN, "dead_letter", "partition=%d offset=%lld bytes=%zu error=%s", m->partition,
                (long long)m->offset, m->len, svc_log_str(q, sizeof q, e.message, strlen(e.message)));
        s->metrics.dead_letters++;
        r->is_dlq = 1;
        r->payload = svc_dlq_build(m, e.message, s->instance, &r->payload_len);
        r->out_topic = s->cfg->topic_dlq;
        if (!r->payload) {
            rec_free(s, r);
            return;
        }
        send_rec(r);
        return;
    }
    if (rc == SVC_JOB_INVALID) {
        send_result(r, NULL, e.code, e.message);
        return;
    }
    /* Deadline: a budget from the message's timestamp. */
    rd_kafka_timestamp_type_t tt;
    int64_t ts = rd_kafka_message_timestamp(m, &tt);
    int64_t now = eng_now_ms();
    r->w.t_enqueue_ms = now;
    if (r->job.deadline_ms > 0) {
        int64_t left = (ts > 0 ? ts : wall_ms()) + r->job.deadline_ms - wall_ms();
        if (left <= 0) {
            r->w.status = SVC_WORK_EXPIRED;
            r->w.finish = ENG_FINISH_EXPIRED;
            send_result(r, &r->w, 0, NULL);
            return;
        }
        r->w.deadline_eng_ms = now + left;
    }
    r->w.job = &r->job;
    if (r->job.stream && !(r->w.stream = svc_stream_new(s->cfg->stream_interval_ms))) {
        send_result(r, NULL, SVC_JERR_ENGINE_ERROR, "out of memory");
        return;
    }
    char msg[200];
    if ((rc = svc_models_submit(s->models, &r->w, msg, sizeof msg))) {
        send_result(r, NULL, rc == CK_ENOTFOUND ? SVC_JERR_UNKNOWN_MODEL : SVC_JERR_INVALID_FIELD,
                    rc == CK_ENOTFOUND ? "this service does not serve that model" : msg);
        return;
    }
    r->in_engine = 1;
}

/* The group's assignment, with or without partitions: we are a member. */
static void on_assign(void *ud, int n) {
    svc_service *s = ud;
    (void)n;
    write_ready_file(s);
}

/* ------------------------------------------------------------------------ */
/* engine loaded */

static void on_loaded(void *ud, int ok, const char *msg) {
    svc_service *s = ud;
    if (!ok) {
        svc_log(SVC_LOG_ERROR, "model_load_failed", "model=%s error=\"%s\"", s->cfg->model, msg);
        s->exit_code = 1;
        finish_service(s);
        return;
    }
    s->loaded = 1;
    /* svc_models logged each model and its plan. The first model's name
     * stands for the instance where one name is asked (build_info, the
     * ready line, results of jobs that never reached a model). */
    snprintf(s->model_name, sizeof s->model_name, "%s", svc_models_info(s->models, 0)->name);
    s->lim.vocab_size = svc_et_vocab(svc_models_et(s->models, 0));
    const char *const *names = svc_models_names(s->models);
    for (int i = 0; i < SVC_JOB_MAX_NAMES - 1 && names[i]; i++) s->lim.model_names[i] = names[i];
    char err[512];
    if (svc_kafka_subscribe(s->kafka, err, sizeof err)) {
        svc_log(SVC_LOG_ERROR, "subscribe_failed", "error=\"%s\"", err);
        s->exit_code = 1;
        finish_service(s);
        return;
    }
    write_ready_file(s);
}

/* ------------------------------------------------------------------------ */
/* timers, signals, shutdown */

static void metrics_cb(uv_timer_t *t) {
    svc_service *s = t->data;
    size_t len = 0;
    char *b = svc_admin_render(s, 1, &len);
    if (!b) return;
    rd_kafka_headers_t *h = rd_kafka_headers_new(1);
    rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
    svc_kafka_produce(s->kafka, s->cfg->topic_metrics, s->instance, strlen(s->instance), b, len, h, NULL,
                      NULL);
    free(b);
}

static void close_cb_noop(uv_handle_t *h) { (void)h; }

static void finish_service(svc_service *s) {
    if (s->stopping) return;
    s->stopping = 1;
    s->draining = 1;
    int left = 0;
    for (rec *r = s->recs; r; r = r->next) left++;
    svc_log(SVC_LOG_INFO, "stopping", "unfinished=%d (left uncommitted: redelivered later)", left);
    uv_timer_stop(&s->metrics_timer);
    uv_timer_stop(&s->drain_timer);
    uv_timer_stop(&s->tick_timer);
    uv_close((uv_handle_t *)&s->metrics_timer, close_cb_noop);
    uv_close((uv_handle_t *)&s->drain_timer, close_cb_noop);
    uv_close((uv_handle_t *)&s->tick_timer, close_cb_noop);
    svc_tpl_close(s->tpl);
    uv_close((uv_handle_t *)&s->sigterm, close_cb_noop);
    uv_close((uv_handle_t *)&s->sigint, close_cb_noop);
    uv_close((uv_handle_t *)&s->sighup, close_cb_noop);
    svc_http_close(s->http);
    s->http = NULL;
    svc_models_stop(s->models); /* joins the engine threads: no more completions */
    s->models = NULL;
    svc_redis_close(s->redis); /* after the engine: nothing uses the store any more */
    s->redis = NULL;
    svc_kafka_close_handles(s->kafka);
}

static void drain_cb(uv_timer_t *t) {
    svc_service *s = t->data;
    int outq = s->kafka ? svc_kafka_outq_len(s->kafka) : 0;
    /* The finished jobs' offsets committed too: a rebalance may hold the
     * commits back for a while (svc_kafka.h); not while no broker is up. */
    svc_kafka_stats ks = {0};
    if (s->kafka) svc_kafka_get_stats(s->kafka, &ks);
    if (s->inflight == 0 && outq == 0 && ks.up && svc_kafka_commits_pending(s->kafka) &&
        svc_service_now() - s->t_drain <= s->cfg->drain_timeout_s)
        return;
    if (s->inflight == 0 && outq == 0) {
        /* Then the engine's cold writes (the sessions of the jobs just
         * finished, templates): Redis I/O runs on this loop, so the engine
         * thread waits for it while the loop keeps turning. */
        if (s->models && s->redis && !s->flush_asked) {
            s->flush_asked = 1;
            double left = s->cfg->drain_timeout_s - (svc_service_now() - s->t_drain);
            svc_models_flush(s->models, left > 0.1 ? (int)(left * 1000) : 100);
        }
        if (s->models && s->redis && !svc_models_flushed(s->models) &&
            svc_service_now() - s->t_drain <= s->cfg->drain_timeout_s)
            return;
        svc_log(SVC_LOG_INFO, "drained", "seconds=%.2f", svc_service_now() - s->t_drain);
        finish_service(s);
    } else if (svc_service_now() - s->t_drain > s->cfg->drain_timeout_s) {
        svc_log(SVC_LOG_WARN, "drain_timeout", "inflight=%d producer_queue=%d", s->inflight, outq);
        finish_service(s);
    }
}

static void tick_cb(uv_timer_t *t) {
    svc_service *s = t->data;
    int before = is_ready(s);
    svc_tpl_tick(s->tpl, s->loaded && !s->draining);
    if (!before && is_ready(s)) write_ready_file(s);
    /* The tuner moved a threshold (the engine thread logged it): a metrics
     * record now, not at the next period, so the topic has every move. */
    eng_stats es;
    svc_hist batch;
    uint64_t moves = 0;
    for (int i = 0; s->models && i < svc_models_count(s->models); i++)
        if (svc_et_stats(svc_models_et(s->models, i), &es, &batch)) moves += es.tune_moves;
    if (s->models && s->kafka && moves != s->tune_moves_seen) {
        s->tune_moves_seen = moves;
        metrics_cb(&s->metrics_timer);
    }
}

/* SIGHUP: build the configuration again from the same argv, environment and
 * file (svc_config_load: same precedence), and apply what can change while
 * running: the default policy and the tuning keys, for jobs that reach the
 * engine from now on. A configuration that does not load, or a policy that
 * does not parse, is refused with a log line and nothing changes; other
 * keys that changed are named in the log (they need a restart). */
static void reload_cb(uv_signal_t *h, int sig) {
    (void)sig;
    svc_service *s = h->data;
    svc_config nc;
    char err[1024] = "";
    int rc = svc_config_load(&nc, s->cfg->argc, s->cfg->argv, err, sizeof err);
    kvpol_config pc;
    svc_route_rule rr;
    if (!rc && nc.policy && kvpol_parse(nc.policy, &pc, err, sizeof err)) rc = CK_EINVAL;
    if (!rc && svc_route_parse(nc.route_rule, &rr, err, sizeof err)) rc = CK_EINVAL;
    if (rc) {
        svc_log(SVC_LOG_WARN, "config_reload", "status=refused error=\"%s\" (the running values stay)",
                rc == 1 ? "--help" : err);
        svc_config_free(&nc);
        return;
    }
    char ignored[512] = "";
    size_t il = 0;
    static const char *const live[] = {"policy", "tuning", "tuning_window_s", "tuning_target", "route_rule"};
    for (int i = 0; i < nc.n_kv; i++) {
        const char *k = nc.kv[i].key, *old = svc_config_get(s->cfg, k);
        int is_live = 0;
        for (size_t j = 0; j < sizeof live / sizeof live[0]; j++) is_live |= !strcmp(k, live[j]);
        if (is_live || (old && !strcmp(old, nc.kv[i].value))) continue;
        if (il < sizeof ignored - 1)
            il += (size_t)snprintf(ignored + il, sizeof ignored - il, "%s%s", il ? "," : "", k);
    }
    svc_log(SVC_LOG_INFO, "config_reload", "status=loaded policy=\"%s\" tuning=%s%s%s",
            nc.policy ? nc.policy : "conf", nc.tuning, *ignored ? " restart_needed=" : "", ignored);
    if (s->models && s->cfg->route_cascade) { /* the cascade's rule, for auto jobs from now on */
        char before[300];
        snprintf(before, sizeof before, "%s", svc_models_route(s->models));
        if (!svc_models_set_rule(s->models, nc.route_rule, err, sizeof err) &&
            strcmp(before, svc_models_route(s->models)))
            svc_log(SVC_LOG_INFO, "config_reload", "status=applied route_rule=\"%s\"",
                    svc_models_route(s->models));
    }
    if (s->models)
        svc_models_reload(s->models, nc.policy ? nc.policy : "conf", svc_config_tuning(&nc),
                          nc.tuning_window_s, nc.tuning_target);
    svc_config_free(&nc);
}

static void signal_cb(uv_signal_t *h, int sig) {
    svc_service *s = h->data;
    if (s->draining) {
        svc_log(SVC_LOG_WARN, "signal_again", "signal=%d action=stop_now", sig);
        finish_service(s);
        return;
    }
    svc_log(SVC_LOG_INFO, "draining", "signal=%d inflight=%d timeout_s=%g", sig, s->inflight,
            s->cfg->drain_timeout_s);
    s->draining = 1;
    s->t_drain = svc_service_now();
    backpressure(s);
    uv_timer_start(&s->drain_timer, drain_cb, 0, 50);
}

/* ------------------------------------------------------------------------ */

int svc_service_run(svc_config *cfg) {
    svc_service *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = cfg;
    s->t_start = svc_service_now();
    svc_metrics_init(&s->metrics);
    s->lim.max_message_bytes = (size_t)cfg->max_message_bytes;
    s->lim.max_tokens_cap = cfg->max_tokens_cap;
    s->lim.default_max_tokens = cfg->default_max_tokens;
    s->lim.max_prompt_tokens = cfg->max_prompt_tokens;
    if (cfg->instance)
        snprintf(s->instance, sizeof s->instance, "%s", cfg->instance);
    else if (gethostname(s->instance, sizeof s->instance - 16) == 0) {
        size_t n = strlen(s->instance);
        snprintf(s->instance + n, sizeof s->instance - n, "-%d", (int)getpid());
    }
    char err[1024] = "";
    int rc = 0;
    uv_loop_init(&s->loop);
    if (!cfg->model) {
        fprintf(stderr, "confkvd: --model is required (try --help)\n");
        rc = 2;
        goto out;
    }
    if (cfg->kafka_embedded) {
        const char *topics[] = {cfg->topic_jobs, cfg->topic_results, cfg->topic_metrics, cfg->topic_dlq,
                                cfg->topic_stream};
        if (svc_broker_start(cfg->embedded_partitions, topics, 5, &s->broker, err, sizeof err)) goto fail;
        snprintf(s->bootstrap, sizeof s->bootstrap, "%s", svc_broker_bootstraps(s->broker));
        /* The embedded broker replaces any configured one. */
        svc_kv *kv = NULL;
        for (int i = 0; i < cfg->n_kv; i++)
            if (!strcmp(cfg->kv[i].key, "kafka.bootstrap.servers")) kv = &cfg->kv[i];
        char *b = strdup(s->bootstrap);
        if (!b) goto fail;
        if (kv) {
            free(kv->value);
            kv->value = b;
        } else {
            /* not set anywhere: add it */
            if (cfg->n_kv == cfg->cap_kv) {
                svc_kv *n = realloc(cfg->kv, (size_t)(cfg->cap_kv + 8) * sizeof *n);
                if (!n) {
                    free(b);
                    goto fail;
                }
                cfg->kv = n;
                cfg->cap_kv += 8;
            }
            cfg->kv[cfg->n_kv].key = strdup("kafka.bootstrap.servers");
            cfg->kv[cfg->n_kv].value = b;
            cfg->kv[cfg->n_kv].source = SVC_SRC_FLAG;
            if (!cfg->kv[cfg->n_kv].key) goto fail;
            cfg->n_kv++;
        }
        printf("confkvd: embedded Kafka broker at %s\n", s->bootstrap);
        fflush(stdout);
        svc_log(SVC_LOG_INFO, "embedded_broker", "bootstrap_servers=%s partitions=%d", s->bootstrap,
                cfg->embedded_partitions);
    } else {
        const char *b = svc_config_get(cfg, "kafka.bootstrap.servers");
        snprintf(s->bootstrap, sizeof s->bootstrap, "%s", b ? b : "");
    }
    svc_kafka_cbs kc = {s, on_message, on_assign};
    if (svc_kafka_new(&s->loop, cfg, &kc, &s->kafka, err, sizeof err)) goto fail;
    if (svc_http_start(&s->loop, cfg->http_host, cfg->http_port, svc_admin_http, s, &s->http, err,
                       sizeof err))
        goto fail;
    svc_log(SVC_LOG_INFO, "http_listening", "address=%s:%d", cfg->http_host, svc_http_port(s->http));
    svc_et_opts eo;
    if (svc_models_opts(cfg, &eo, err, sizeof err)) goto fail;
    /* ---- cold tier: Redis (svc_redis.h), used by the engine thread's tiers */
    if (cfg->redis) {
        svc_redis_config rc_;
        svc_redis_config_default(&rc_);
        rc_.url = cfg->redis;
        rc_.prefix = cfg->redis_prefix;
        rc_.ttl_s = cfg->redis_ttl_s;
        rc_.max_inflight_bytes = (size_t)cfg->redis_max_inflight_mb << 20;
        rc_.timeout_ms = cfg->redis_timeout_ms;
        if (svc_redis_new(&s->loop, &rc_, &s->redis, err, sizeof err)) goto fail;
        eo.eng.cold = svc_redis_store(s->redis);
    }
    /* ---- */
    if (svc_models_start(&s->loop, cfg, &eo, et_done, on_loaded, s, &s->models, err, sizeof err)) goto fail;
    svc_models_set_stream(s->models, on_stream);
    /* templates are the first model's */
    if (svc_tpl_new(s->redis, svc_models_et(s->models, 0), cfg->prewarm_top, &s->tpl)) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    uv_signal_init(&s->loop, &s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    s->sigterm.data = s->sigint.data = s;
    uv_signal_start(&s->sigterm, signal_cb, SIGTERM);
    uv_signal_start(&s->sigint, signal_cb, SIGINT);
    uv_signal_init(&s->loop, &s->sighup);
    s->sighup.data = s;
    uv_signal_start(&s->sighup, reload_cb, SIGHUP);
    uv_timer_init(&s->loop, &s->metrics_timer);
    uv_timer_init(&s->loop, &s->drain_timer);
    uv_timer_init(&s->loop, &s->tick_timer);
    s->metrics_timer.data = s->drain_timer.data = s->tick_timer.data = s;
    uv_timer_start(&s->tick_timer, tick_cb, 100, 100);
    if (cfg->metrics_interval_s > 0) {
        uint64_t ms = (uint64_t)(cfg->metrics_interval_s * 1000);
        uv_timer_start(&s->metrics_timer, metrics_cb, ms, ms);
    }
    svc_log(SVC_LOG_INFO, "starting", "model=%s brokers=%s group=%s jobs=%s results=%s", cfg->model,
            s->bootstrap, cfg->group, cfg->topic_jobs, cfg->topic_results);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    rc = s->exit_code;
    goto out;
fail:
    fprintf(stderr, "confkvd: %s\n", err);
    svc_log(SVC_LOG_ERROR, "startup_failed", "error=\"%s\"", err);
    rc = 1;
    svc_models_stop(s->models);
    s->models = NULL;
    svc_redis_close(s->redis);
    s->redis = NULL;
    svc_http_close(s->http);
    svc_kafka_close_handles(s->kafka);
    uv_run(&s->loop, UV_RUN_DEFAULT);
out:
    /* After the loop: leave the group (commits stored offsets), free. */
    svc_kafka_free(s->kafka);
    s->kafka = NULL;
    while (s->recs) rec_free(s, s->recs);
    svc_broker_stop(s->broker);
    svc_tpl_free(s->tpl);
    if (uv_loop_close(&s->loop)) svc_log(SVC_LOG_WARN, "loop_not_closed", NULL);
    svc_log(SVC_LOG_INFO, "stopped", "exit_code=%d", rc);
    free(s);
    return rc;
}
