/* svc_client.c - blocking job producer and result collector (svc_client.h). */
#include "svc_client.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "svc_job.h"

struct svc_client {
    rd_kafka_t *prod, *cons;
    char *jobs_topic;
    int delivered, failed, sent;
    rd_kafka_topic_partition_list_t *asg; /* what the consumer reads: results (and stream) partitions */
    char *stream_topic;                   /* svc_client_stream; NULL: none */
    svc_client_stream_cb stream_cb;
    void *stream_ud;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    svc_client *c = opaque;
    if (m->err)
        c->failed++;
    else
        c->delivered++;
}

static rd_kafka_t *client(svc_client *c, int consumer, const char *brokers, char *err, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[512];
    const char *kv[][2] = {
        {"bootstrap.servers", brokers},
        {"client.id", "confkv-cli"},
        {consumer ? "enable.auto.commit" : "enable.idempotence", consumer ? "false" : "true"},
        {consumer ? "group.id" : "partitioner", consumer ? "confkv-cli" : "murmur2_random"},
        {"log_level", "3"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], e, sizeof e) != RD_KAFKA_CONF_OK) {
            snprintf(err, errlen, "%s: %s", kv[i][0], e);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    rd_kafka_conf_set_opaque(conf, c);
    if (!consumer) rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf, e, sizeof e);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "%s", e);
    }
    return rk;
}

/* Add every partition of topic, at its current end, to what the consumer
 * reads, and assign it all. */
static int assign_at_end(svc_client *c, const char *topic, char *err, size_t errlen) {
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *t = rd_kafka_topic_new(c->cons, topic, NULL);
    rd_kafka_resp_err_t e = rd_kafka_metadata(c->cons, 0, t, &md, 10000);
    rd_kafka_topic_destroy(t);
    if (e || !md || md->topic_cnt != 1 || md->topics[0].err) {
        snprintf(err, errlen, "topic %s: %s", topic,
                 rd_kafka_err2str(e                     ? e
                                  : md && md->topic_cnt ? md->topics[0].err
                                                        : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        if (md) rd_kafka_metadata_destroy(md);
        return CK_EIO;
    }
    if (!c->asg) c->asg = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
    rd_kafka_topic_partition_list_t *l = c->asg;
    for (int i = 0; i < md->topics[0].partition_cnt; i++) {
        int32_t p = md->topics[0].partitions[i].id;
        int64_t lo = 0, hi = 0;
        e = rd_kafka_query_watermark_offsets(c->cons, topic, p, &lo, &hi, 10000);
        if (e) {
            snprintf(err, errlen, "topic %s partition %d: %s", topic, p, rd_kafka_err2str(e));
            rd_kafka_metadata_destroy(md);
            return CK_EIO;
        }
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = hi;
    }
    rd_kafka_metadata_destroy(md);
    e = rd_kafka_assign(c->cons, l);
    if (e) {
        snprintf(err, errlen, "assign: %s", rd_kafka_err2str(e));
        return CK_EIO;
    }
    return 0;
}

int svc_client_new(const char *brokers, const char *jobs_topic, const char *results_topic, svc_client **out,
                   char *err, size_t errlen) {
    *out = NULL;
    svc_client *c = calloc(1, sizeof *c);
    if (!c || !(c->jobs_topic = strdup(jobs_topic))) {
        free(c);
        return CK_ENOMEM;
    }
    if (!(c->prod = client(c, 0, brokers, err, errlen))) goto fail;
    if (results_topic) {
        if (!(c->cons = client(c, 1, brokers, err, errlen))) goto fail;
        if (assign_at_end(c, results_topic, err, errlen)) goto fail;
    }
    *out = c;
    return 0;
fail:
    svc_client_free(c);
    return CK_EIO;
}

int svc_client_stream(svc_client *c, const char *stream_topic, svc_client_stream_cb cb, void *ud, char *err,
                      size_t errlen) {
    if (!c->cons) {
        snprintf(err, errlen, "the stream is read with the results: give a results topic");
        return CK_EINVAL;
    }
    free(c->stream_topic);
    if (!(c->stream_topic = strdup(stream_topic))) {
        snprintf(err, errlen, "out of memory");
        return CK_ENOMEM;
    }
    c->stream_cb = cb;
    c->stream_ud = ud;
    return assign_at_end(c, stream_topic, err, errlen);
}

int svc_client_send(svc_client *c, const char *id, const char *key, const char *json, size_t len, char *err,
                    size_t errlen) {
    if (!key) key = id;
    rd_kafka_headers_t *h = rd_kafka_headers_new(2);
    rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
    rd_kafka_header_add(h, "kafka_correlationId", -1, id, -1);
    for (;;) {
        rd_kafka_resp_err_t e =
            rd_kafka_producev(c->prod, RD_KAFKA_V_TOPIC(c->jobs_topic), RD_KAFKA_V_KEY(key, strlen(key)),
                              RD_KAFKA_V_VALUE((void *)json, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
        if (!e) break;
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(c->prod, 100);
            continue;
        }
        rd_kafka_headers_destroy(h);
        snprintf(err, errlen, "produce: %s", rd_kafka_err2str(e));
        return CK_EIO;
    }
    c->sent++;
    rd_kafka_poll(c->prod, 0);
    return 0;
}

int svc_client_flush(svc_client *c, double timeout_s) {
    if (rd_kafka_flush(c->prod, (int)(timeout_s * 1000)) != RD_KAFKA_RESP_ERR_NO_ERROR) return -1;
    return c->failed;
}

int svc_client_wait(svc_client *c, const char *const *ids, int n, double timeout_s, svc_client_result_cb cb,
                    void *ud) {
    if (!c->cons) return n;
    char *seen = calloc((size_t)n + 1, 1), *ended = calloc((size_t)n + 1, 1);
    if (!seen || !ended) {
        free(seen);
        free(ended);
        return n;
    }
    int missing = n, open = c->stream_topic ? n : 0;
    double end = now_s() + timeout_s;
    while ((missing > 0 || open > 0) && now_s() < end) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->cons, 100);
        if (!m) continue;
        if (!m->err && m->key && c->stream_topic && !strcmp(rd_kafka_topic_name(m->rkt), c->stream_topic)) {
            for (int i = 0; i < n; i++) {
                if (ended[i] || strlen(ids[i]) != m->key_len || memcmp(ids[i], m->key, m->key_len)) continue;
                int enc;
                char e[256];
                cJSON *t = svc_decode_tree(m->payload, m->len, NULL, &enc, e, sizeof e);
                if (cJSON_IsObject(t)) {
                    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "done"))) {
                        ended[i] = 1;
                        open--;
                    }
                    if (c->stream_cb) c->stream_cb(c->stream_ud, i, t);
                }
                cJSON_Delete(t);
                break;
            }
        } else if (!m->err && m->key) {
            /* match by key (the job id); linear in n, fine for CLI batches */
            for (int i = 0; i < n; i++) {
                if (seen[i] || strlen(ids[i]) != m->key_len || memcmp(ids[i], m->key, m->key_len)) continue;
                int enc;
                char e[256];
                cJSON *t = svc_decode_tree(m->payload, m->len, NULL, &enc, e, sizeof e);
                if (t) {
                    seen[i] = 1;
                    missing--;
                    cb(ud, i, t, m->payload, m->len);
                    cJSON_Delete(t);
                }
                break;
            }
        }
        rd_kafka_message_destroy(m);
    }
    free(seen);
    free(ended);
    return missing > 0 ? missing : open;
}

void svc_client_free(svc_client *c) {
    if (!c) return;
    if (c->prod) {
        rd_kafka_flush(c->prod, 5000);
        rd_kafka_destroy(c->prod);
    }
    if (c->cons) {
        rd_kafka_consumer_close(c->cons);
        rd_kafka_destroy(c->cons);
    }
    if (c->asg) rd_kafka_topic_partition_list_destroy(c->asg);
    free(c->stream_topic);
    free(c->jobs_topic);
    free(c);
}
