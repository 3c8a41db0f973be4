/* svc_broker.c - the embedded mock Kafka cluster (svc_broker.h). */
#include "svc_broker.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

struct svc_broker {
    rd_kafka_t *rk; /* the handle that owns the cluster */
    rd_kafka_mock_cluster_t *mc;
    char bootstraps[256];
};

int svc_broker_start(int partitions, const char *const *topics, int n_topics, svc_broker **out, char *err,
                     size_t errlen) {
    *out = NULL;
    if (partitions < 1 || partitions > 100000 || n_topics < 0) {
        snprintf(err, errlen, "partitions must be in 1..100000");
        return CK_EINVAL;
    }
    svc_broker *b = calloc(1, sizeof *b);
    if (!b) return CK_ENOMEM;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[512];
    /* Quiet the owner handle: it never connects anywhere. */
    rd_kafka_conf_set(conf, "log_level", "3", e, sizeof e);
    /* The mock's accepted sockets take TCP_NODELAY from this handle's
     * configuration: with Nagle on, a second response pending on one
     * connection waits for the client's delayed ACK (40 ms stalls, the
     * p99 of a job through Kafka). */
    rd_kafka_conf_set(conf, "socket.nagle.disable", "true", e, sizeof e);
    b->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof e); /* takes conf on success */
    if (!b->rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "embedded broker: %s", e);
        free(b);
        return CK_EIO;
    }
    b->mc = rd_kafka_mock_cluster_new(b->rk, 1);
    if (!b->mc) {
        snprintf(err, errlen, "embedded broker: cannot create the mock cluster");
        svc_broker_stop(b);
        return CK_EIO;
    }
    snprintf(b->bootstraps, sizeof b->bootstraps, "%s", rd_kafka_mock_cluster_bootstraps(b->mc));
    for (int i = 0; i < n_topics; i++) {
        rd_kafka_resp_err_t r = rd_kafka_mock_topic_create(b->mc, topics[i], partitions, 1);
        if (r) {
            snprintf(err, errlen, "embedded broker: topic %s: %s", topics[i], rd_kafka_err2str(r));
            svc_broker_stop(b);
            return CK_EIO;
        }
    }
    *out = b;
    return 0;
}

const char *svc_broker_bootstraps(const svc_broker *b) { return b->bootstraps; }

void svc_broker_stop(svc_broker *b) {
    if (!b) return;
    if (b->mc) rd_kafka_mock_cluster_destroy(b->mc);
    if (b->rk) rd_kafka_destroy(b->rk);
    free(b);
}
