/* svc_service_int.h - what confkvd's loop (svc_service.c) shares with its
 * HTTP endpoints (svc_admin.c); private to those two files. The loop owns
 * every field; svc_admin.c reads them on the same loop thread. */
#ifndef CK_SVC_SERVICE_INT_H
#define CK_SVC_SERVICE_INT_H
#include <stdint.h>
#include <uv.h>

#include "svc_broker.h"
#include "svc_config.h"
#include "svc_http.h"
#include "svc_job.h"
#include "svc_kafka.h"
#include "svc_metrics.h"
#include "svc_models.h"
#include "svc_redis.h"
#include "svc_tpl.h"

struct rec;

typedef struct svc_service {
    uv_loop_t loop;
    svc_config *cfg;
    svc_broker *broker;
    svc_kafka *kafka;
    svc_models *models; /* the engine threads, one a model (svc_models.h) */
    svc_http *http;
    svc_redis *redis; /* cold tier; NULL when not configured */
    svc_tpl *tpl;     /* template usage and prewarm */
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t metrics_timer, drain_timer, tick_timer;
    uint64_t tune_moves_seen; /* the tuner's moves already published as records */
    int flush_asked;          /* draining: the engine thread flushes cold writes */
    svc_metrics metrics;
    struct rec *recs; /* the in-flight records (svc_service.c) */
    int inflight, paused, loaded, ready_written, draining, stopping, exit_code;
    double t_start, t_drain;
    char instance[128], model_name[64];
    char bootstrap[256];
    svc_job_limits lim;
} svc_service;

/* Monotonic seconds. */
double svc_service_now(void);
/* NULL when ready to take work, else why not (/readyz's "reason"). */
const char *svc_service_not_ready(const svc_service *s);

/* /metrics (Prometheus text, json 0) or the JSON view (json 1); malloc'd,
 * the caller frees it; *len its length. */
char *svc_admin_render(svc_service *s, int json, size_t *len);
/* The HTTP handler (svc_http.h's callback; ud is the service). */
void svc_admin_http(void *ud, const svc_http_req *q, svc_http_resp *r);

#endif
