/* svc_kstats.h - librdkafka's statistics JSON (statistics.interval.ms), read
 * for svc_kafka_stats: whether any broker is up, and the consumer lag per
 * partition of the jobs topic. Outside bytes (librdkafka's, but parsed as
 * any JSON): every field is type- and range-checked. */
#ifndef CK_SVC_KSTATS_H
#define CK_SVC_KSTATS_H
#include <stddef.h>

#include "svc_kafka.h"

/* Parse json[0..len) and update st->up, st->n_lag, st->lag_partition and
 * st->lag (at most SVC_KAFKA_MAX_LAG_PARTS partitions of topic). Unparsable
 * JSON leaves st as it was. */
void svc_kstats_parse(const char *json, size_t len, const char *topic, svc_kafka_stats *st);

#endif
