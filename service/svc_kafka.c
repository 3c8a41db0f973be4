/* svc_kafka.c - consumer + idempotent producer on a libuv loop (svc_kafka.h). */
#include "svc_kafka.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_err.h"
#include "svc_log.h"

#define POLL_BUDGET 512      /* messages handled per wake-up before yielding */
#define SAFETY_POLL_MS 100   /* timer poll, in case an io event was missed */

/* Consumed offsets of one partition, oldest first (a ring kept linear:
 * entries live in [head, head + n), compacted when head passes cap / 2). */
typedef struct ktrack {
    uint32_t epoch;
    int assigned;
    int64_t *off;
    uint8_t *done;
    int head, n, cap;
} ktrack;

/* One produce in flight: the caller's callback. */
typedef struct kpend {
    svc_kafka_dr_cb cb;
    void *ud;
} kpend;

struct svc_kafka {
    uv_loop_t *loop;
    svc_kafka_cbs cbs;
    rd_kafka_t *cons, *prod;
    rd_kafka_queue_t *cq, *pq;       /* consumer queue, producer main queue */
    int cpipe[2], ppipe[2];
    uv_poll_t cpoll, ppoll;
    uv_timer_t timer, kick;
    int handles_open;
    char *topic;                      /* jobs topic */
    ktrack *track;                    /* indexed by partition */
    int n_track;
    int paused;
    int closing;                      /* teardown: delivery reports no longer reach callers */
    svc_kafka_stats st;
};

/* ------------------------------------------------------------------------ */
/* configuration */

typedef struct conf_ctx {
    rd_kafka_conf_t *conf;
    char *err;
    size_t errlen;
    int consumer;
} conf_ctx;

static const char *consumer_only[] = {"group.id", "enable.auto.commit", "enable.auto.offset.store",
                                      "auto.offset.reset", "auto.commit.interval.ms",
                                      "session.timeout.ms", "max.poll.interval.ms",
                                      "partition.assignment.strategy", "group.instance.id",
                                      "heartbeat.interval.ms", "isolation.level", NULL};
static const char *producer_only[] = {"enable.idempotence", "acks", "linger.ms", "partitioner",
                                      "compression.type", "message.timeout.ms", "retries",
                                      "queue.buffering.max.messages", "batch.size", NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return 1;
    return 0;
}

static int conf_set_cb(void *ud, const char *name, const char *value) {
    conf_ctx *c = ud;
    /* Keys of the other client kind are skipped, so librdkafka does not warn. */
    if (c->consumer ? in_list(producer_only, name) : in_list(consumer_only, name)) return 0;
    char e[512];
    if (rd_kafka_conf_set(c->conf, name, value, e, sizeof e) != RD_KAFKA_CONF_OK) {
        snprintf(c->err, c->errlen, "kafka.%s: %s", name, e);
        return CK_EINVAL;
    }
    return 0;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    char q[600];
    svc_log(level <= 3 ? SVC_LOG_ERROR : level <= 4 ? SVC_LOG_WARN : level <= 6 ? SVC_LOG_INFO : SVC_LOG_DEBUG,
            "kafka_log", "client=%s facility=%s msg=%s", rd_kafka_name(rk), fac,
            svc_log_str(q, sizeof q, buf, strlen(buf)));
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    svc_kafka *k = opaque;
    char q[600];
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) k->st.up = 0;
    svc_log(err == RD_KAFKA_RESP_ERR__FATAL ? SVC_LOG_ERROR : SVC_LOG_WARN, "kafka_error",
            "client=%s code=%s msg=%s", rd_kafka_name(rk), rd_kafka_err2name(err),
            svc_log_str(q, sizeof q, reason, strlen(reason)));
}

/* Statistics JSON (statistics.interval.ms): consumer lag per partition of
 * the jobs topic and whether any broker is up. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    svc_kafka *k = opaque;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return 0;
    cJSON *brokers = cJSON_GetObjectItemCaseSensitive(root, "brokers"), *b;
    int up = 0;
    cJSON_ArrayForEach(b, brokers) {
        cJSON *state = cJSON_GetObjectItemCaseSensitive(b, "state");
        cJSON *nodeid = cJSON_GetObjectItemCaseSensitive(b, "nodeid");
        if (cJSON_IsString(state) && !strcmp(state->valuestring, "UP") && cJSON_IsNumber(nodeid) &&
            nodeid->valuedouble >= 0)
            up = 1;
    }
    k->st.up = up;
    cJSON *topics = cJSON_GetObjectItemCaseSensitive(root, "topics");
    cJSON *t = cJSON_GetObjectItemCaseSensitive(topics, k->topic);
    cJSON *parts = cJSON_GetObjectItemCaseSensitive(t, "partitions"), *p;
    int n = 0;
    cJSON_ArrayForEach(p, parts) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(p, "partition");
        cJSON *lag = cJSON_GetObjectItemCaseSensitive(p, "consumer_lag");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || !cJSON_IsNumber(lag) || lag->valuedouble < 0)
            continue;
        if (n == SVC_KAFKA_MAX_LAG_PARTS) break;
        k->st.lag_partition[n] = (int32_t)id->valuedouble;
        k->st.lag[n] = (int64_t)lag->valuedouble;
        n++;
    }
    k->st.n_lag = n;
    cJSON_Delete(root);
    return 0; /* librdkafka frees json */
}

/* ------------------------------------------------------------------------ */
/* offset tracking */

static ktrack *track_get(svc_kafka *k, int32_t p) {
    if (p < 0 || p > 1000000) return NULL;
    if (p >= k->n_track) {
        int n = p + 1 > 2 * k->n_track ? p + 1 : 2 * k->n_track;
        ktrack *t = realloc(k->track, (size_t)n * sizeof *t);
        if (!t) return NULL;
        memset(t + k->n_track, 0, (size_t)(n - k->n_track) * sizeof *t);
        k->track = t;
        k->n_track = n;
    }
    return &k->track[p];
}

static void track_reset(ktrack *t) {
    t->epoch++;
    t->head = t->n = 0;
}

static int track_push(ktrack *t, int64_t off) {
    if (t->head + t->n == t->cap) {
        if (t->head > 0) {
            memmove(t->off, t->off + t->head, (size_t)t->n * sizeof *t->off);
            memmove(t->done, t->done + t->head, (size_t)t->n);
            t->head = 0;
        }
        if (t->n == t->cap) {
            int cap = t->cap ? 2 * t->cap : 64;
            int64_t *o = realloc(t->off, (size_t)cap * sizeof *o);
            if (!o) return CK_ENOMEM;
            t->off = o;
            uint8_t *d = realloc(t->done, (size_t)cap);
            if (!d) return CK_ENOMEM;
            t->done = d;
            t->cap = cap;
        }
    }
    t->off[t->head + t->n] = off;
    t->done[t->head + t->n] = 0;
    t->n++;
    return 0;
}

static void store_offset(svc_kafka *k, int32_t p, int64_t next) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, k->topic, p)->offset = next;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(k->cons, l);
    if (!e) e = l->elems[0].err;
    if (e) svc_log(SVC_LOG_DEBUG, "offset_store_failed", "partition=%d offset=%lld err=%s", p, (long long)next,
                   rd_kafka_err2name(e));
    else k->st.stored++;
    rd_kafka_topic_partition_list_destroy(l);
}

void svc_kafka_done(svc_kafka *k, svc_ktok tok) {
    if (tok.partition < 0 || tok.partition >= k->n_track) return;
    ktrack *t = &k->track[tok.partition];
    if (t->epoch != tok.epoch || t->n == 0) return;
    /* binary search: offsets increase along the ring */
    int lo = t->head, hi = t->head + t->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->off[mid] == tok.offset) {
            t->done[mid] = 1;
            break;
        }
        if (t->off[mid] < tok.offset) lo = mid + 1;
        else hi = mid - 1;
    }
    int64_t last = -1;
    while (t->n > 0 && t->done[t->head]) {
        last = t->off[t->head];
        t->head++;
        t->n--;
    }
    if (t->n == 0) t->head = 0;
    if (last >= 0 && t->assigned) store_offset(k, tok.partition, last + 1);
}

/* ------------------------------------------------------------------------ */
/* rebalance and pause */

static void pause_list(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int pause) {
    rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(k->cons, l) : rd_kafka_resume_partitions(k->cons, l);
    if (e) svc_log(SVC_LOG_WARN, pause ? "pause_failed" : "resume_failed", "err=%s", rd_kafka_err2name(e));
}

void svc_kafka_pause(svc_kafka *k, int pause) {
    if (!k->cons || k->paused == !!pause) return;
    k->paused = !!pause;
    k->st.paused = k->paused;
    rd_kafka_topic_partition_list_t *l = NULL;
    if (rd_kafka_assignment(k->cons, &l) == 0 && l) {
        if (l->cnt) pause_list(k, l, pause);
        rd_kafka_topic_partition_list_destroy(l);
    }
    svc_log(SVC_LOG_INFO, pause ? "consumer_paused" : "consumer_resumed", NULL);
}

static void mark(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int assigned) {
    for (int i = 0; i < l->cnt; i++) {
        if (strcmp(l->elems[i].topic, k->topic)) continue;
        ktrack *t = track_get(k, l->elems[i].partition);
        if (!t) continue;
        track_reset(t);
        t->assigned = assigned;
    }
}

static int count_assigned(svc_kafka *k) {
    int n = 0;
    for (int i = 0; i < k->n_track; i++) n += k->track[i].assigned;
    return n;
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque) {
    svc_kafka *k = opaque;
    int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        mark(k, parts, 1);
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
            if (e) rd_kafka_error_destroy(e);
        } else {
            rd_kafka_assign(rk, parts);
        }
        if (k->paused && parts->cnt) pause_list(k, parts, 1);
        k->st.assigned = count_assigned(k);
        svc_log(SVC_LOG_INFO, "partitions_assigned", "count=%d total=%d", parts->cnt, k->st.assigned);
        k->st.up = 1;
        if (k->cbs.on_assign) k->cbs.on_assign(k->cbs.ud, k->st.assigned);
    } else {
        /* Revoked: in-flight jobs of these partitions will be redelivered to
         * their new owner; their late completions are ignored (epoch). */
        mark(k, parts, 0);
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, parts);
            if (e) rd_kafka_error_destroy(e);
        } else {
            rd_kafka_assign(rk, NULL);
        }
        k->st.assigned = count_assigned(k);
        svc_log(SVC_LOG_INFO, "partitions_revoked", "count=%d total=%d", parts->cnt, k->st.assigned);
    }
}

/* ------------------------------------------------------------------------ */
/* polling */

static void drain_pipe(int fd) {
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

static void poll_producer(svc_kafka *k) { rd_kafka_poll(k->prod, 0); }

static void kick_cb(uv_timer_t *t);

static void poll_consumer(svc_kafka *k) {
    for (int i = 0; i < POLL_BUDGET; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(k->cons, 0);
        if (!m) return;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                svc_log(SVC_LOG_WARN, "consume_error", "err=%s msg=%s", rd_kafka_err2name(m->err),
                        rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        k->st.consumed++;
        ktrack *t = track_get(k, m->partition);
        svc_ktok tok = {m->partition, m->offset, 0};
        if (t) {
            /* A message at or below the last one seen means a re-fetch: start over. */
            if (t->n > 0 && m->offset <= t->off[t->head + t->n - 1]) track_reset(t);
            if (track_push(t, m->offset) == 0) tok.epoch = t->epoch;
            else tok.epoch = t->epoch - 1; /* untracked: its done is ignored */
        }
        if (k->cbs.on_message) k->cbs.on_message(k->cbs.ud, m, tok);
        rd_kafka_message_destroy(m);
    }
    /* Budget spent with messages left: come back on the next loop turn. */
    uv_timer_start(&k->kick, kick_cb, 0, 0);
}

static void kick_cb(uv_timer_t *t) { poll_consumer(t->data); }

static void cpoll_cb(uv_poll_t *h, int status, int events) {
    svc_kafka *k = h->data;
    drain_pipe(k->cpipe[0]);
    poll_consumer(k);
}

static void ppoll_cb(uv_poll_t *h, int status, int events) {
    svc_kafka *k = h->data;
    drain_pipe(k->ppipe[0]);
    poll_producer(k);
}

static void timer_cb(uv_timer_t *t) {
    svc_kafka *k = t->data;
    poll_producer(k);
    poll_consumer(k);
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    svc_kafka *k = opaque;
    kpend *p = m->_private;
    if (m->err) {
        k->st.delivery_failed++;
        svc_log(SVC_LOG_ERROR, "delivery_failed", "topic=%s err=%s", rd_kafka_topic_name(m->rkt),
                rd_kafka_err2name(m->err));
    } else {
        k->st.delivered++;
    }
    if (p) {
        if (p->cb && !k->closing) p->cb(p->ud, m->err);
        free(p);
    }
}

/* ------------------------------------------------------------------------ */
/* setup and teardown */

static rd_kafka_t *make_client(svc_kafka *k, const svc_config *c, int consumer, char *err, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[512];
    /* Defaults first; every kafka.* key of the configuration overrides them. */
    const char *defs[][2] = {
        {"client.id", consumer ? "confkvd-consumer" : "confkvd-producer"},
        {"group.id", c->group},
        {"enable.auto.commit", "true"},
        {"enable.auto.offset.store", "false"},
        {"auto.offset.reset", "earliest"},
        {"statistics.interval.ms", "5000"},
        {"enable.idempotence", "true"},
        {"partitioner", "murmur2_random"},
        {"linger.ms", "2"},
        {"topic.metadata.refresh.interval.ms", "10000"},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        if (consumer ? in_list(producer_only, defs[i][0]) : in_list(consumer_only, defs[i][0])) continue;
        if (!consumer && !strcmp(defs[i][0], "statistics.interval.ms")) continue;
        if (rd_kafka_conf_set(conf, defs[i][0], defs[i][1], e, sizeof e) != RD_KAFKA_CONF_OK) {
            snprintf(err, errlen, "kafka default %s: %s", defs[i][0], e);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    conf_ctx cc = {conf, err, errlen, consumer};
    if (svc_config_each_kafka(c, conf_set_cb, &cc)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (consumer) {
        rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
        rd_kafka_conf_set_stats_cb(conf, stats_cb);
    } else {
        rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    }
    rd_kafka_t *rk = rd_kafka_new(consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf, e, sizeof e);
    if (!rk) { /* conf is still ours */
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "kafka %s: %s", consumer ? "consumer" : "producer", e);
    }
    return rk;
}

static int open_pipe(int fds[2]) { return pipe2(fds, O_NONBLOCK | O_CLOEXEC) ? CK_EIO : 0; }

int svc_kafka_new(uv_loop_t *loop, const svc_config *c, const svc_kafka_cbs *cbs, svc_kafka **out,
                  char *err, size_t errlen) {
    *out = NULL;
    if (!svc_config_get(c, "kafka.bootstrap.servers")) {
        snprintf(err, errlen, "no Kafka brokers: give --brokers HOST:PORT or --kafka-embedded");
        return CK_EINVAL;
    }
    svc_kafka *k = calloc(1, sizeof *k);
    if (!k) return CK_ENOMEM;
    k->loop = loop;
    k->cbs = *cbs;
    k->cpipe[0] = k->cpipe[1] = k->ppipe[0] = k->ppipe[1] = -1;
    if (!(k->topic = strdup(c->topic_jobs))) goto nomem;
    if (!(k->cons = make_client(k, c, 1, err, errlen))) goto fail;
    if (!(k->prod = make_client(k, c, 0, err, errlen))) goto fail;
    rd_kafka_poll_set_consumer(k->cons); /* main queue (stats, errors) into the consumer queue */
    k->cq = rd_kafka_queue_get_consumer(k->cons);
    k->pq = rd_kafka_queue_get_main(k->prod);
    if (!k->cq || !k->pq || open_pipe(k->cpipe) || open_pipe(k->ppipe)) {
        snprintf(err, errlen, "kafka: cannot set up event queues: %s", strerror(errno));
        goto fail;
    }
    rd_kafka_queue_io_event_enable(k->cq, k->cpipe[1], "c", 1);
    rd_kafka_queue_io_event_enable(k->pq, k->ppipe[1], "p", 1);
    uv_poll_init(loop, &k->cpoll, k->cpipe[0]);
    uv_poll_init(loop, &k->ppoll, k->ppipe[0]);
    uv_timer_init(loop, &k->timer);
    uv_timer_init(loop, &k->kick);
    k->cpoll.data = k->ppoll.data = k->timer.data = k->kick.data = k;
    k->handles_open = 4;
    uv_poll_start(&k->cpoll, UV_READABLE, cpoll_cb);
    uv_poll_start(&k->ppoll, UV_READABLE, ppoll_cb);
    uv_timer_start(&k->timer, timer_cb, SAFETY_POLL_MS, SAFETY_POLL_MS);
    *out = k;
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    svc_kafka_free(k);
    return CK_EIO;
}

int svc_kafka_subscribe(svc_kafka *k, char *err, size_t errlen) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, k->topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->cons, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        snprintf(err, errlen, "subscribe %s: %s", k->topic, rd_kafka_err2str(e));
        return CK_EIO;
    }
    return 0;
}

int svc_kafka_produce(svc_kafka *k, const char *topic, const void *key, size_t klen, const void *val,
                      size_t vlen, rd_kafka_headers_t *headers, svc_kafka_dr_cb cb, void *ud) {
    kpend *p = malloc(sizeof *p);
    if (!p) {
        if (headers) rd_kafka_headers_destroy(headers);
        return CK_ENOMEM;
    }
    p->cb = cb;
    p->ud = ud;
    rd_kafka_resp_err_t e;
    if (headers)
        e = rd_kafka_producev(k->prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, klen),
                              RD_KAFKA_V_VALUE((void *)val, vlen), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_OPAQUE(p), RD_KAFKA_V_END);
    else
        e = rd_kafka_producev(k->prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, klen),
                              RD_KAFKA_V_VALUE((void *)val, vlen), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_OPAQUE(p), RD_KAFKA_V_END);
    if (e) {
        /* On failure the headers are still ours (librdkafka's producev contract). */
        if (headers) rd_kafka_headers_destroy(headers);
        free(p);
        svc_log(SVC_LOG_ERROR, "produce_failed", "topic=%s err=%s", topic, rd_kafka_err2name(e));
        return e == RD_KAFKA_RESP_ERR__QUEUE_FULL ? CK_EBUSY : e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? CK_ERANGE : CK_EIO;
    }
    k->st.produced++;
    return 0;
}

int svc_kafka_outq_len(svc_kafka *k) { return k->prod ? rd_kafka_outq_len(k->prod) : 0; }

void svc_kafka_get_stats(const svc_kafka *k, svc_kafka_stats *s) { *s = k->st; }

static void handle_closed(uv_handle_t *h) {
    svc_kafka *k = h->data;
    k->handles_open--;
}

void svc_kafka_close_handles(svc_kafka *k) {
    if (!k || !k->handles_open) return;
    uv_close((uv_handle_t *)&k->cpoll, handle_closed);
    uv_close((uv_handle_t *)&k->ppoll, handle_closed);
    uv_close((uv_handle_t *)&k->timer, handle_closed);
    uv_close((uv_handle_t *)&k->kick, handle_closed);
}

void svc_kafka_free(svc_kafka *k) {
    if (!k) return;
    k->closing = 1;
    if (k->cq) {
        rd_kafka_queue_io_event_enable(k->cq, -1, NULL, 0);
        rd_kafka_queue_destroy(k->cq);
    }
    if (k->pq) {
        rd_kafka_queue_io_event_enable(k->pq, -1, NULL, 0);
        rd_kafka_queue_destroy(k->pq);
    }
    if (k->prod) {
        rd_kafka_flush(k->prod, 5000);
        rd_kafka_destroy(k->prod);
    }
    if (k->cons) {
        /* Commit what was stored, leave the group. */
        rd_kafka_resp_err_t e = rd_kafka_commit(k->cons, NULL, 0);
        if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
            svc_log(SVC_LOG_WARN, "final_commit_failed", "err=%s", rd_kafka_err2name(e));
        rd_kafka_consumer_close(k->cons);
        rd_kafka_destroy(k->cons);
    }
    for (int i = 0; i < 2; i++) {
        if (k->cpipe[i] >= 0) close(k->cpipe[i]);
        if (k->ppipe[i] >= 0) close(k->ppipe[i]);
    }
    for (int i = 0; i < k->n_track; i++) {
        free(k->track[i].off);
        free(k->track[i].done);
    }
    free(k->track);
    free(k->topic);
    free(k);
}
