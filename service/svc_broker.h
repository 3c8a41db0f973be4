/* svc_broker.h - an embedded Kafka broker: librdkafka's mock cluster.
 *
 * The mock cluster speaks the real Kafka protocol on a loopback port
 * (produce, fetch, consumer groups, offset commits, idempotent producers),
 * keeps everything in memory and runs on its own librdkafka thread, so it
 * never touches the caller's event loop. Any Kafka client on the machine can
 * use it. It dies with its process: `confkv broker` runs one standalone for
 * setups in which confkvd restarts.
 *
 * Limits: one broker, replication factor 1, data lost at exit; the port is
 * chosen by librdkafka (loopback, ephemeral). */
#ifndef CK_SVC_BROKER_H
#define CK_SVC_BROKER_H
#include <stddef.h>

typedef struct svc_broker svc_broker;

/* Start a one-broker cluster and create n_topics topics of `partitions`
 * partitions each. Returns 0 and *out; CK_EINVAL / CK_EIO with err filled. */
int svc_broker_start(int partitions, const char *const *topics, int n_topics, svc_broker **out, char *err,
                     size_t errlen);
/* "127.0.0.1:PORT" (valid until svc_broker_stop). */
const char *svc_broker_bootstraps(const svc_broker *b);
/* Stop the cluster (clients still connected see the broker go down). NULL ok. */
void svc_broker_stop(svc_broker *b);

#endif
