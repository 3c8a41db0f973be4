/* svc_client.h - a blocking Kafka client for the CLI's `submit` and `batch`:
 * produce jobs, then collect their results.
 *
 * Before producing, the client reads the end offset of every results
 * partition and starts reading there, so no result of ours can slip past;
 * a result is matched to a job by its key (the job id). This is CLI code:
 * it blocks (never use it inside confkvd's loop). */
#ifndef CK_SVC_CLIENT_H
#define CK_SVC_CLIENT_H
#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct svc_client svc_client;

/* Connect. results_topic may be NULL (produce only). */
int svc_client_new(const char *brokers, const char *jobs_topic, const char *results_topic, svc_client **out,
                   char *err, size_t errlen);
/* Queue one job (JSON text); kafka_correlationId = id. */
/* key: the Kafka message key (NULL = the id); jobs of one session share
 * their session id as key, so they land on one partition, hence one
 * confkvd instance. */
int svc_client_send(svc_client *c, const char *id, const char *key, const char *json, size_t len, char *err,
                    size_t errlen);
/* Wait until every queued job is acknowledged by the broker; returns the
 * number of jobs that failed to be delivered (or -1 on timeout). */
int svc_client_flush(svc_client *c, double timeout_s);
/* Called once per job id with its first result: the decoded tree (borrowed)
 * and the raw bytes. */
typedef void (*svc_client_result_cb)(void *ud, int index, const cJSON *result, const char *raw, size_t len);
/* Also read the stream topic (streamed jobs' partial records,
 * docs/SERVICE.md), from its current end like the results: cb gets every
 * record of a waited-for job as it arrives (decoded, borrowed), and
 * svc_client_wait then also waits for each job's end record (done: true).
 * Call before sending. 0, or CK_EIO with err. */
typedef void (*svc_client_stream_cb)(void *ud, int index, const cJSON *record);
int svc_client_stream(svc_client *c, const char *stream_topic, svc_client_stream_cb cb, void *ud, char *err,
                      size_t errlen);
/* Collect the results of ids[0..n) until all arrived (and, with
 * svc_client_stream, all their streams ended) or timeout_s passed.
 * Returns how many are missing. */
int svc_client_wait(svc_client *c, const char *const *ids, int n, double timeout_s, svc_client_result_cb cb,
                    void *ud);
void svc_client_free(svc_client *c);

#endif
