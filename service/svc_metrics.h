/* svc_metrics.h - the service's metrics, rendered in the Prometheus text
 * exposition format (GET /metrics) and as a JSON record (metrics topic).
 *
 * Every name starts with confkv_; counters end in _total, latencies are
 * histograms in seconds, sizes in bytes (Prometheus base units), so
 * `promtool check metrics` passes. The loop thread owns svc_metrics; the
 * engine thread keeps its own svc_hist of batch sizes and hands a copy over
 * with its stats snapshot. Nothing here locks. */
#ifndef CK_SVC_METRICS_H
#define CK_SVC_METRICS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "svc_kafka.h"

#define SVC_HIST_MAX 20

/* A histogram with fixed upper bounds (le), counts per bucket (not cumulative). */
typedef struct svc_hist {
    int n; /* bounds, +Inf excluded */
    double le[SVC_HIST_MAX];
    uint64_t count[SVC_HIST_MAX + 1];
    double sum;
    uint64_t total;
} svc_hist;

void svc_hist_init(svc_hist *h, const double *le, int n);
void svc_hist_observe(svc_hist *h, double v);

enum { SVC_ST_OK = 0, SVC_ST_ERROR = 1, SVC_ST_EXPIRED = 2, SVC_ST_N = 3 };

typedef struct svc_metrics {
    uint64_t jobs[SVC_ST_N];     /* results by status */
    uint64_t errors_by_code[16]; /* error results by SVC_JERR_* */
    uint64_t jobs_consumed, jobs_redelivered, dead_letters, results_failed;
    uint64_t prompt_tokens, completion_tokens, cached_tokens;
    svc_hist queue_s, ttft_s, total_s;    /* latency, seconds */
    svc_hist itl_s;                       /* mean inter-token latency of each job, seconds */
    svc_hist entropy, gap, pmax;          /* per-job mean confidence signals */
    svc_hist kv_retained, hot_peak_bytes; /* hot window: retained fraction, peak bytes */
    uint64_t recalls, demotions, spills;
    uint64_t stream_records, stream_failed; /* streamed jobs' partial records: produced, not delivered */
} svc_metrics;

void svc_metrics_init(svc_metrics *m);
/* Histogram bounds for batch sizes (sequences per step). */
void svc_metrics_batch_hist_init(svc_hist *h);

/* One model's part of a rendering (svc_models.h): its engine's figures
 * carry a `model` label. */
typedef struct svc_metrics_model {
    const char *name;
    int loaded;
    const eng_stats *eng;               /* NULL before the model is loaded */
    const svc_hist *batch;              /* sequences per engine step */
    uint64_t results;                   /* results it produced */
    uint64_t escalated, kept, received; /* the cascade: moved off it, kept on it, moved onto it */
} svc_metrics_model;

/* Everything a rendering shows, gathered by the service. */
typedef struct svc_metrics_view {
    const svc_metrics *m;
    const svc_metrics_model *models; /* (n_models); [0] is the first configured */
    int n_models;
    const char *route; /* the cascade's "small,large" or NULL; route_rule */
    const char *route_rule;
    int route_small;                     /* the cascade's small model (index into models) */
    const svc_kafka_stats *kafka;        /* NULL when not connected */
    const struct svc_redis_stats *redis; /* NULL when no cold tier is configured */
    int ready, model_loaded, inflight, draining;
    double uptime_s;
    const char *model, *instance;
} svc_metrics_view;

/* Prometheus text format into f. */
void svc_metrics_render(const svc_metrics_view *v, FILE *f);
/* One JSON object (the metrics record; schemas/metrics.schema.json). */
void svc_metrics_json(const svc_metrics_view *v, FILE *f);

#endif
