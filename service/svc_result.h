/* svc_result.h - result and dead-letter records.
 *
 * A result is built as a tree (cJSON) and encoded in the job's encoding
 * (JSON or msgpack), so both encodings carry the same fields
 * (schemas/result.schema.json). The Kafka side (key = job id,
 * correlation-id header, reply-topic override) is the service's.
 *
 * A dead-letter record is always JSON (schemas/dead-letter.schema.json):
 * the error and the original message (topic, partition, offset, timestamp,
 * key and value in base64 (the value cut to its first 256 KiB), headers). */
#ifndef CK_SVC_RESULT_H
#define CK_SVC_RESULT_H
#include <cjson/cJSON.h>
#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "svc_et.h"
#include "svc_job.h"

typedef struct svc_origin {
    const char *topic;
    int32_t partition;
    int64_t offset;
    int redelivered; /* consumed before by this group (at-least-once duplicate) */
} svc_origin;

/* A result for a job. w: the engine's outcome (NULL when the job failed
 * before the engine: then status is error with err_code/err_msg). Returns a
 * tree the caller deletes, NULL when out of memory. */
cJSON *svc_result_build(const svc_job *job, const svc_work *w, int err_code, const char *err_msg,
                        const svc_origin *o, const char *model, const char *instance);
/* Encode in SVC_ENC_JSON or SVC_ENC_MSGPACK into a malloc'd buffer. */
int svc_result_encode(const cJSON *r, int encoding, char **out, size_t *len);
#define SVC_DLQ_MAX_VALUE (256 * 1024)
/* A dead-letter record for message m (JSON text, malloc'd). */
char *svc_dlq_build(const rd_kafka_message_t *m, const char *error, const char *instance, size_t *len);
/* Base64 of n bytes (malloc'd, NUL-terminated). */
char *svc_base64(const void *data, size_t n);

#endif
