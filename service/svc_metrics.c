/* svc_metrics.c - Prometheus text format and the metrics record (svc_metrics.h). */
#include "svc_metrics.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "jw.h"
#include "svc_job.h"
#include "svc_redis.h"

void svc_hist_init(svc_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n > SVC_HIST_MAX ? SVC_HIST_MAX : n;
    memcpy(h->le, le, (size_t)h->n * sizeof *le);
}

void svc_hist_observe(svc_hist *h, double v) {
    if (!isfinite(v)) return;
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->total++;
}

void svc_metrics_init(svc_metrics *m) {
    static const double lat[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                 0.5,   1,      2.5,   5,    10,    30,   60};
    static const double ent[] = {0.1, 0.25, 0.5, 1, 1.5, 2, 3, 4, 6};
    static const double unit[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1};
    static const double bytes[] = {4096,    16384,    65536,    262144,   1048576,
                                   4194304, 16777216, 67108864, 268435456};
    memset(m, 0, sizeof *m);
    svc_hist_init(&m->queue_s, lat, 15);
    svc_hist_init(&m->ttft_s, lat, 15);
    svc_hist_init(&m->total_s, lat, 15);
    svc_hist_init(&m->itl_s, lat, 15);
    svc_hist_init(&m->entropy, ent, 9);
    svc_hist_init(&m->gap, unit, 12);
    svc_hist_init(&m->pmax, unit, 12);
    svc_hist_init(&m->kv_retained, unit, 12);
    svc_hist_init(&m->hot_peak_bytes, bytes, 9);
}

void svc_metrics_batch_hist_init(svc_hist *h) {
    static const double b[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    svc_hist_init(h, b, 9);
}

static void head(FILE *f, const char *name, const char *type, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(FILE *f, const char *name, const char *help, const svc_hist *h) {
    head(f, name, "histogram", help);
    uint64_t c = 0;
    for (int i = 0; i < h->n; i++) {
        c += h->count[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)c);
    }
    c += h->count[h->n];
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)c, name,
            h->sum, name, (unsigned long long)h->total);
}

static void one(FILE *f, const char *name, const char *type, const char *help, double v) {
    head(f, name, type, help);
    fprintf(f, "%s %.17g\n", name, v);
}

/* ------------------------------------------------- per-model series */

/* A label value as Prometheus takes it (no quote, backslash or newline). */
static void label(FILE *f, const char *s) {
    for (; s && *s; s++)
        if (*s != '"' && *s != '\\' && *s != '\n') fputc(*s, f);
}

enum { K_INT, K_U64, K_SIZE, K_DBL };
#define ES(field, kind) \
    { offsetof(eng_stats, field), kind }

static double field_of(const eng_stats *e, size_t off, int kind) {
    const char *p = (const char *)e + off;
    int i;
    uint64_t u;
    size_t z;
    double d;
    switch (kind) {
    case K_INT: memcpy(&i, p, sizeof i); return i;
    case K_U64: memcpy(&u, p, sizeof u); return (double)u;
    case K_SIZE: memcpy(&z, p, sizeof z); return (double)z;
    default: memcpy(&d, p, sizeof d); return d;
    }
}

/* One engine family: a sample per loaded model, {model="..."} first, then
 * the family's own label (lkey=lval[i]) when it has one. scale multiplies. */
typedef struct efield {
    size_t off; /* in eng_stats */
    int kind;   /* K_* */
} efield;
typedef struct efam {
    const char *name, *type, *help, *lkey;
    int n; /* samples per model: 1, or the number of lval/field pairs */
    const char *lval[4];
    efield fld[4];
    double scale;
} efam;

static void engine_family(const svc_metrics_view *v, FILE *f, const efam *fm) {
    head(f, fm->name, fm->type, fm->help);
    for (int mi = 0; mi < v->n_models; mi++) {
        const eng_stats *e = v->models[mi].eng;
        if (!e) continue;
        for (int i = 0; i < fm->n; i++) {
            fprintf(f, "%s{model=\"", fm->name);
            label(f, v->models[mi].name);
            if (fm->lkey) fprintf(f, "\",%s=\"%s", fm->lkey, fm->lval[i]);
            fprintf(f, "\"} %.17g\n",
                    field_of(e, fm->fld[i].off, fm->fld[i].kind) * (fm->scale ? fm->scale : 1));
        }
    }
}

static void model_hist(FILE *f, const char *name, const char *help, const svc_metrics_view *v) {
    head(f, name, "histogram", help);
    for (int mi = 0; mi < v->n_models; mi++) {
        const svc_hist *h = v->models[mi].batch;
        if (!h) continue;
        uint64_t c = 0;
        for (int i = 0; i <= h->n; i++) {
            c += h->count[i];
            fprintf(f, "%s_bucket{model=\"", name);
            label(f, v->models[mi].name);
            if (i < h->n)
                fprintf(f, "\",le=\"%g\"} %llu\n", h->le[i], (unsigned long long)c);
            else
                fprintf(f, "\",le=\"+Inf\"} %llu\n", (unsigned long long)c);
        }
        fprintf(f, "%s_sum{model=\"", name);
        label(f, v->models[mi].name);
        fprintf(f, "\"} %.9g\n%s_count{model=\"", h->sum, name);
        label(f, v->models[mi].name);
        fprintf(f, "\"} %llu\n", (unsigned long long)h->total);
    }
}

/* Every figure of an engine, one family each, a sample per model. */
static void engine_series(const svc_metrics_view *v, FILE *f) {
    static const efam fams[] = {
        {"confkv_engine_running", "gauge", "Sequences decoding.", NULL, 1, {0}, {ES(running, K_INT)}, 0},
        {"confkv_engine_waiting",
         "gauge",
         "Requests waiting in the engine.",
         NULL,
         1,
         {0},
         {ES(waiting, K_INT)},
         0},
        {"confkv_engine_steps_total", "counter", "Engine steps run.", NULL, 1, {0}, {ES(steps, K_U64)}, 0},
        {"confkv_preemptions_total",
         "counter",
         "Sequences preempted under memory pressure.",
         NULL,
         1,
         {0},
         {ES(preemptions, K_U64)},
         0},
        {"confkv_engine_step_seconds_total",
         "counter",
         "Time spent in engine steps.",
         NULL,
         1,
         {0},
         {ES(step_ms_total, K_DBL)},
         1e-3},
        {"confkv_kv_bytes",
         "gauge",
         "KV bytes in use, by tier.",
         "tier",
         3,
         {"hot", "warm", "int8"},
         {ES(hot_bytes, K_SIZE), ES(warm_bytes, K_SIZE), ES(int8_bytes, K_SIZE)},
         0},
        {"confkv_kv_hot_capacity_bytes",
         "gauge",
         "Hot KV pool size.",
         NULL,
         1,
         {0},
         {ES(hot_capacity_bytes, K_SIZE)},
         0},
        {"confkv_kv_capacity_bytes",
         "gauge",
         "KV memory each tier is sized for (warm: host, int8).",
         "tier",
         2,
         {"hot", "warm"},
         {ES(hot_capacity_bytes, K_SIZE), ES(warm_capacity_bytes, K_SIZE)},
         0},
        {"confkv_kv_window_changes_total",
         "counter",
         "CONF-KV hot window moves, by direction.",
         "direction",
         2,
         {"grow", "shrink"},
         {ES(window_grows, K_U64), ES(window_shrinks, K_U64)},
         0},
        {"confkv_kv_breaker_trips_total",
         "counter",
         "Times a sequence's circuit breaker engaged (hot pool past breaker_threshold).",
         NULL,
         1,
         {0},
         {ES(breaker_trips, K_U64)},
         0},
        {"confkv_kv_breaker_engaged",
         "gauge",
         "Running sequences held at their minimum budget by the breaker.",
         NULL,
         1,
         {0},
         {ES(breaker_engaged, K_INT)},
         0},
        {"confkv_kv_reruns_total",
         "counter",
         "Uncertain steps rerun with recalled blocks.",
         NULL,
         1,
         {0},
         {ES(reruns, K_U64)},
         0},
        {"confkv_policy_threshold",
         "gauge",
         "The default policy's thresholds now (tuned under tuning=adaptive).",
         "param",
         3,
         {"entropy_threshold", "prob_gap_threshold", "max_prob_threshold"},
         {ES(threshold_entropy, K_DBL), ES(threshold_gap, K_DBL), ES(threshold_pmax, K_DBL)},
         0},
        {"confkv_tuning_windows_total",
         "counter",
         "Tuning windows closed.",
         NULL,
         1,
         {0},
         {ES(tune_windows, K_U64)},
         0},
        {"confkv_tuning_moves_total",
         "counter",
         "Threshold moves made by the tuner.",
         NULL,
         1,
         {0},
         {ES(tune_moves, K_U64)},
         0},
        {"confkv_kv_spills_total",
         "counter",
         "KV blocks written from the warm tier to the cold tier.",
         NULL,
         1,
         {0},
         {ES(cold_spills, K_U64)},
         0},
        {"confkv_kv_cold_fetches_total",
         "counter",
         "KV blocks fetched back from the cold tier, by result.",
         "result",
         2,
         {"hit", "miss"},
         {ES(cold_fetch_hits, K_U64), ES(cold_fetch_misses, K_U64)},
         0},
        {"confkv_kv_integrity_failures_total",
         "counter",
         "Cold KV blocks refused on reload (checksum, model fingerprint or shape mismatch).",
         NULL,
         1,
         {0},
         {ES(integrity_failures, K_U64)},
         0},
        /* Hit rates per tier (engine.h, eng_stats): hot = blocks a decode
         * step found hot among those written; warm/cold/template = prompt
         * blocks found in the prefix cache, fetched from Redis, or pinned. */
        {"confkv_cache_lookups_total",
         "counter",
         "KV block lookups, by tier.",
         "tier",
         2,
         {"hot", "prefix"},
         {ES(hot_lookups, K_U64), ES(prefix_lookups, K_U64)},
         0},
        {"confkv_cache_hits_total",
         "counter",
         "KV block lookups served, by tier.",
         "tier",
         4,
         {"hot", "warm", "cold", "template"},
         {ES(hot_hits, K_U64), ES(prefix_hits_warm, K_U64), ES(prefix_hits_cold, K_U64),
          ES(prefix_hits_template, K_U64)},
         0},
        {"confkv_prefix_cache_bytes",
         "gauge",
         "Host memory holding prefix KV blocks.",
         NULL,
         1,
         {0},
         {ES(prefix_bytes, K_SIZE)},
         0},
        {"confkv_prefix_pinned_blocks",
         "gauge",
         "Prefix blocks pinned (templates).",
         NULL,
         1,
         {0},
         {ES(prefix_pinned, K_INT)},
         0},
        {"confkv_prefix_promotions_total",
         "counter",
         "Prefix blocks promoted to templates by use.",
         NULL,
         1,
         {0},
         {ES(prefix_promotions, K_U64)},
         0},
        {"confkv_prefix_persisted_total",
         "counter",
         "Prefix blocks written to the cold tier.",
         NULL,
         1,
         {0},
         {ES(prefix_persisted, K_U64)},
         0},
        {"confkv_sessions_total",
         "counter",
         "Session events.",
         "event",
         4,
         {"saved", "resumed", "fetched", "missed"},
         {ES(sessions_saved, K_U64), ES(sessions_resumed, K_U64), ES(sessions_fetched, K_U64),
          ES(session_misses, K_U64)},
         0},
        {"confkv_templates_total",
         "counter",
         "Template records, by event.",
         "event",
         3,
         {"fetched", "missed", "saved"},
         {ES(template_fetches, K_U64), ES(template_misses, K_U64), ES(template_saves, K_U64)},
         0},
        {"confkv_cached_tokens_total",
         "counter",
         "Prompt tokens whose KV was copied, not computed.",
         NULL,
         1,
         {0},
         {ES(cached_tokens, K_U64)},
         0},
    };
    head(f, "confkv_model_info", "gauge", "The models this instance serves (value 1), loaded or not.");
    for (int mi = 0; mi < v->n_models; mi++) {
        fprintf(f, "confkv_model_info{model=\"");
        label(f, v->models[mi].name);
        fprintf(f, "\",loaded=\"%s\"} 1\n", v->models[mi].loaded ? "true" : "false");
    }
    head(f, "confkv_model_results_total", "counter", "Results produced, by the model that produced them.");
    for (int mi = 0; mi < v->n_models; mi++) {
        fprintf(f, "confkv_model_results_total{model=\"");
        label(f, v->models[mi].name);
        fprintf(f, "\"} %llu\n", (unsigned long long)v->models[mi].results);
    }
    if (v->route) {
        head(f, "confkv_route_jobs_total", "counter",
             "Cascade (model auto) jobs, by outcome: kept on the small model or escalated to the large one.");
        for (int mi = v->route_small; mi == v->route_small && mi < v->n_models; mi++) {
            const svc_metrics_model *mm = &v->models[mi];
            fprintf(f, "confkv_route_jobs_total{model=\"");
            label(f, mm->name);
            fprintf(f, "\",outcome=\"kept\"} %llu\nconfkv_route_jobs_total{model=\"",
                    (unsigned long long)mm->kept);
            label(f, mm->name);
            fprintf(f, "\",outcome=\"escalated\"} %llu\n", (unsigned long long)mm->escalated);
        }
    }
    model_hist(f, "confkv_batch_sequences", "Sequences in each engine step.", v);
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) engine_family(v, f, &fams[i]);
    head(f, "confkv_cache_hit_ratio", "gauge",
         "Hits over lookups, by tier (prefix tiers over prefix lookups).");
    for (int mi = 0; mi < v->n_models; mi++) {
        const eng_stats *e = v->models[mi].eng;
        if (!e) continue;
        double pl = e->prefix_lookups ? (double)e->prefix_lookups : 1;
        const char *tier[4] = {"hot", "warm", "cold", "template"};
        double r[4] = {e->hot_lookups ? (double)e->hot_hits / (double)e->hot_lookups : 0,
                       (double)e->prefix_hits_warm / pl, (double)e->prefix_hits_cold / pl,
                       (double)e->prefix_hits_template / pl};
        for (int i = 0; i < 4; i++) {
            fprintf(f, "confkv_cache_hit_ratio{model=\"");
            label(f, v->models[mi].name);
            fprintf(f, "\",tier=\"%s\"} %.6f\n", tier[i], r[i]);
        }
    }
    head(f, "confkv_kv_blocks", "gauge", "Hot KV blocks, by state.");
    for (int mi = 0; mi < v->n_models; mi++) {
        const eng_stats *e = v->models[mi].eng;
        if (!e) continue;
        for (int i = 0; i < 2; i++) {
            fprintf(f, "confkv_kv_blocks{model=\"");
            label(f, v->models[mi].name);
            fprintf(f, "\",tier=\"hot\",state=\"%s\"} %d\n", i ? "total" : "used",
                    i ? e->hot_blocks : e->hot_blocks_used);
        }
    }
}

void svc_metrics_render(const svc_metrics_view *v, FILE *f) {
    const svc_metrics *m = v->m;
    static const char *st[] = {"ok", "error", "expired"};
    head(f, "confkv_build_info", "gauge", "Build and model of this instance (value 1).");
    fprintf(f, "confkv_build_info{version=\"%s\",model=\"", CONFKV_VERSION);
    label(f, v->n_models ? v->models[0].name : "");
    fprintf(f, "\"} 1\n");
    one(f, "confkv_up_seconds", "gauge", "Seconds since the process started.", v->uptime_s);
    one(f, "confkv_ready", "gauge",
        "1 when it can take work: model loaded, Kafka reachable, group joined, not draining.", v->ready);
    one(f, "confkv_model_loaded", "gauge", "1 when the model is loaded.", v->model_loaded);
    one(f, "confkv_draining", "gauge", "1 while shutting down.", v->draining);
    head(f, "confkv_jobs_total", "counter", "Results produced, by status.");
    for (int i = 0; i < SVC_ST_N; i++)
        fprintf(f, "confkv_jobs_total{status=\"%s\"} %llu\n", st[i], (unsigned long long)m->jobs[i]);
    head(f, "confkv_job_errors_total", "counter", "Error results, by error code.");
    for (int i = 1; i <= SVC_JERR_RESULT_TOO_LARGE && i < 16; i++)
        fprintf(f, "confkv_job_errors_total{code=\"%s\"} %llu\n", svc_job_error_code(i),
                (unsigned long long)m->errors_by_code[i]);
    one(f, "confkv_jobs_consumed_total", "counter", "Job messages consumed.", (double)m->jobs_consumed);
    one(f, "confkv_jobs_redelivered_total", "counter", "Jobs consumed again after a restart or rebalance.",
        (double)m->jobs_redelivered);
    one(f, "confkv_dead_letters_total", "counter", "Undecodable messages sent to the dead-letter topic.",
        (double)m->dead_letters);
    one(f, "confkv_result_delivery_failures_total", "counter", "Results the broker did not take.",
        (double)m->results_failed);
    one(f, "confkv_stream_records_total", "counter", "Partial-result records produced for streamed jobs.",
        (double)m->stream_records);
    one(f, "confkv_stream_delivery_failures_total", "counter",
        "Partial-result records the broker did not take (the result still follows).",
        (double)m->stream_failed);
    one(f, "confkv_jobs_inflight", "gauge", "Jobs consumed whose result is not yet delivered.", v->inflight);
    head(f, "confkv_tokens_total", "counter", "Tokens, by kind.");
    fprintf(f,
            "confkv_tokens_total{kind=\"prompt\"} %llu\nconfkv_tokens_total{kind=\"completion\"} %llu\n"
            "confkv_tokens_total{kind=\"cached\"} %llu\n",
            (unsigned long long)m->prompt_tokens, (unsigned long long)m->completion_tokens,
            (unsigned long long)m->cached_tokens);
    hist(f, "confkv_queue_seconds", "Time from consumption to the first prefill step.", &m->queue_s);
    hist(f, "confkv_ttft_seconds", "Time from consumption to the first token.", &m->ttft_s);
    hist(f, "confkv_request_seconds", "Time from consumption to the last token.", &m->total_s);
    hist(f, "confkv_inter_token_seconds", "Mean time between a job's tokens, per job.", &m->itl_s);
    hist(f, "confkv_entropy_nats", "Mean next-token entropy of each job.", &m->entropy);
    hist(f, "confkv_prob_gap_ratio", "Mean top-1 minus top-2 probability of each job.", &m->gap);
    hist(f, "confkv_prob_max_ratio", "Mean top-1 probability of each job.", &m->pmax);
    hist(f, "confkv_kv_retained_ratio", "Hot window: mean fraction of a job's KV kept hot.", &m->kv_retained);
    hist(f, "confkv_kv_hot_peak_bytes", "Hot window: peak hot KV bytes of each job.", &m->hot_peak_bytes);
    head(f, "confkv_kv_moves_total", "counter", "KV blocks moved between tiers by the policies.");
    fprintf(f,
            "confkv_kv_moves_total{kind=\"recall\"} %llu\nconfkv_kv_moves_total{kind=\"demotion\"} %llu\n"
            "confkv_kv_moves_total{kind=\"spill\"} %llu\n",
            (unsigned long long)m->recalls, (unsigned long long)m->demotions, (unsigned long long)m->spills);
    engine_series(v, f);
    const svc_kafka_stats *k = v->kafka;
    one(f, "confkv_kafka_up", "gauge", "1 when a Kafka broker connection is up.", k ? k->up : 0);
    const svc_redis_stats *r = v->redis;
    one(f, "confkv_redis_configured", "gauge", "1 when a Redis cold tier is configured.", r ? 1 : 0);
    one(f, "confkv_redis_up", "gauge", "1 when the Redis cold tier is connected (0: not configured).",
        r ? r->up : 0);
    if (r) {
        head(f, "confkv_cold_requests_total", "counter", "Cold-tier requests accepted, by operation.");
        fprintf(f,
                "confkv_cold_requests_total{op=\"put\"} %llu\nconfkv_cold_requests_total{op=\"get\"} %llu\n"
                "confkv_cold_requests_total{op=\"del\"} %llu\n",
                (unsigned long long)r->requests[0], (unsigned long long)r->requests[1],
                (unsigned long long)r->requests[2]);
        head(f, "confkv_cold_gets_total", "counter", "Cold-tier reads answered, by result.");
        fprintf(f,
                "confkv_cold_gets_total{result=\"hit\"} %llu\nconfkv_cold_gets_total{result=\"miss\"} %llu\n",
                (unsigned long long)r->hits, (unsigned long long)r->misses);
        one(f, "confkv_cold_failures_total", "counter",
            "Cold-tier requests that failed (Redis down, error, timeout).", (double)r->failures);
        one(f, "confkv_cold_busy_total", "counter",
            "Cold-tier requests refused: bytes in flight at the bound.", (double)r->busy);
        one(f, "confkv_cold_bad_replies_total", "counter",
            "Redis replies refused (error, wrong type or size).", (double)r->bad_replies);
        head(f, "confkv_cold_bytes_total", "counter", "Cold-tier value bytes, by direction.");
        fprintf(f,
                "confkv_cold_bytes_total{direction=\"written\"} "
                "%llu\nconfkv_cold_bytes_total{direction=\"read\"} %llu\n",
                (unsigned long long)r->bytes_written, (unsigned long long)r->bytes_read);
        one(f, "confkv_cold_inflight_bytes", "gauge", "Cold-tier bytes accepted and not yet delivered.",
            (double)r->inflight_bytes);
        one(f, "confkv_redis_reconnects_total", "counter", "Redis connections re-established after a loss.",
            (double)r->reconnects);
        one(f, "confkv_redis_disconnects_total", "counter", "Redis connections lost or dropped.",
            (double)r->disconnects);
        one(f, "confkv_redis_timeouts_total", "counter", "Redis replies later than the timeout.",
            (double)r->timeouts);
        hist(f, "confkv_redis_roundtrip_seconds", "Redis request to reply.", &r->rtt_s);
    }
    if (k) {
        one(f, "confkv_kafka_group_joined", "gauge",
            "1 while the consumer is a member of its group (with or without partitions).", k->joined);
        one(f, "confkv_kafka_partitions_assigned", "gauge", "Jobs partitions assigned to this instance.",
            k->assigned);
        one(f, "confkv_kafka_rebalances_total", "counter", "Assignments received from the group.",
            (double)k->rebalances);
        one(f, "confkv_kafka_revokes_total", "counter",
            "Revokes whose partitions' running jobs were given revoke_grace_ms to finish.",
            (double)k->revokes);
        one(f, "confkv_kafka_revoke_abandoned_total", "counter",
            "Jobs still running at a revoke's grace limit, left to the partition's next owner.",
            (double)k->revoke_abandoned);
        one(f, "confkv_kafka_revoke_rerun_total", "counter",
            "Jobs a revoke left to the partition's next owner to run again: the abandoned ones, and "
            "finished ones past what the commit metadata can carry.",
            (double)k->revoke_rerun);
        one(f, "confkv_kafka_revoke_uncommitted_total", "counter",
            "Finished jobs whose revoke commit the group refused: the next owner runs them again.",
            (double)k->revoke_uncommitted);
        one(f, "confkv_kafka_skipped_done_total", "counter",
            "Consumed jobs not run: a previous owner's commit metadata lists them finished.",
            (double)k->skipped_done);
        one(f, "confkv_kafka_done_truncated_total", "counter",
            "Commits whose finished set did not fit in the commit metadata (the rest runs again).",
            (double)k->done_truncated);
        one(f, "confkv_kafka_paused", "gauge", "1 while consumption is paused (backpressure).", k->paused);
        one(f, "confkv_kafka_offsets_stored_total", "counter", "Offset stores (completed low-water marks).",
            (double)k->stored);
        head(f, "confkv_kafka_consumer_lag", "gauge", "Messages behind the end of each jobs partition.");
        for (int i = 0; i < k->n_lag; i++)
            fprintf(f, "confkv_kafka_consumer_lag{partition=\"%d\"} %lld\n", k->lag_partition[i],
                    (long long)k->lag[i]);
    }
}

static void jhist(jw *w, const char *name, const svc_hist *h) {
    jw_key(w, name);
    jw_obj(w);
    jw_key(w, "count");
    jw_int(w, (int64_t)h->total);
    jw_key(w, "mean");
    jw_num(w, h->total ? h->sum / (double)h->total : 0);
    jw_obj_end(w);
}

static void jengine(jw *w, const eng_stats *e) {
    jw_obj(w);
    jw_key(w, "running");
    jw_int(w, e->running);
    jw_key(w, "waiting");
    jw_int(w, e->waiting);
    jw_key(w, "preemptions");
    jw_int(w, (int64_t)e->preemptions);
    jw_key(w, "hot_kv_bytes");
    jw_int(w, (int64_t)e->hot_bytes);
    jw_key(w, "warm_kv_bytes");
    jw_int(w, (int64_t)e->warm_bytes);
    jw_key(w, "window_grows");
    jw_int(w, (int64_t)e->window_grows);
    jw_key(w, "window_shrinks");
    jw_int(w, (int64_t)e->window_shrinks);
    jw_key(w, "breaker_trips");
    jw_int(w, (int64_t)e->breaker_trips);
    /* the default policy's thresholds now: a record is also sent at
     * once whenever the tuner moves one (svc_service.c, tick_cb) */
    jw_key(w, "threshold_entropy");
    jw_num(w, e->threshold_entropy);
    jw_key(w, "threshold_gap");
    jw_num(w, e->threshold_gap);
    jw_key(w, "threshold_pmax");
    jw_num(w, e->threshold_pmax);
    jw_key(w, "tune_moves");
    jw_int(w, (int64_t)e->tune_moves);
    jw_obj_end(w);
}

void svc_metrics_json(const svc_metrics_view *v, FILE *f) {
    const svc_metrics *m = v->m;
    jw w;
    jw_init(&w, f);
    jw_obj(&w);
    jw_key(&w, "type");
    jw_str(&w, "confkv.metrics");
    jw_key(&w, "ts_ms");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    jw_int(&w, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    jw_key(&w, "instance");
    jw_str(&w, v->instance ? v->instance : "");
    jw_key(&w, "model");
    jw_str(&w, v->model ? v->model : "");
    jw_key(&w, "uptime_s");
    jw_num(&w, v->uptime_s);
    jw_key(&w, "ready");
    jw_bool(&w, v->ready);
    jw_key(&w, "jobs");
    jw_obj(&w);
    jw_key(&w, "ok");
    jw_int(&w, (int64_t)m->jobs[SVC_ST_OK]);
    jw_key(&w, "error");
    jw_int(&w, (int64_t)m->jobs[SVC_ST_ERROR]);
    jw_key(&w, "expired");
    jw_int(&w, (int64_t)m->jobs[SVC_ST_EXPIRED]);
    jw_key(&w, "consumed");
    jw_int(&w, (int64_t)m->jobs_consumed);
    jw_key(&w, "redelivered");
    jw_int(&w, (int64_t)m->jobs_redelivered);
    jw_key(&w, "dead_letters");
    jw_int(&w, (int64_t)m->dead_letters);
    jw_key(&w, "inflight");
    jw_int(&w, v->inflight);
    jw_obj_end(&w);
    jw_key(&w, "tokens");
    jw_obj(&w);
    jw_key(&w, "prompt");
    jw_int(&w, (int64_t)m->prompt_tokens);
    jw_key(&w, "completion");
    jw_int(&w, (int64_t)m->completion_tokens);
    jw_key(&w, "cached");
    jw_int(&w, (int64_t)m->cached_tokens);
    jw_obj_end(&w);
    jw_key(&w, "latency_s");
    jw_obj(&w);
    jhist(&w, "queue", &m->queue_s);
    jhist(&w, "ttft", &m->ttft_s);
    jhist(&w, "total", &m->total_s);
    jhist(&w, "inter_token", &m->itl_s);
    jw_obj_end(&w);
    if (v->n_models && v->models[0].eng) {
        jw_key(&w, "engine"); /* the first model's (as with one model) */
        jengine(&w, v->models[0].eng);
    }
    jw_key(&w, "models");
    jw_arr(&w);
    for (int mi = 0; mi < v->n_models; mi++) {
        const svc_metrics_model *mm = &v->models[mi];
        jw_obj(&w);
        jw_key(&w, "name");
        jw_str(&w, mm->name ? mm->name : "");
        jw_key(&w, "loaded");
        jw_bool(&w, mm->loaded);
        jw_key(&w, "results");
        jw_int(&w, (int64_t)mm->results);
        if (v->route) {
            jw_key(&w, "route_kept");
            jw_int(&w, (int64_t)mm->kept);
            jw_key(&w, "route_escalated");
            jw_int(&w, (int64_t)mm->escalated);
            jw_key(&w, "route_received");
            jw_int(&w, (int64_t)mm->received);
        }
        if (mm->eng) {
            jw_key(&w, "engine");
            jengine(&w, mm->eng);
        }
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    if (v->route) {
        jw_key(&w, "route");
        jw_obj(&w);
        jw_key(&w, "mode");
        jw_str(&w, "cascade");
        jw_key(&w, "models");
        jw_str(&w, v->route);
        jw_key(&w, "rule");
        jw_str(&w, v->route_rule ? v->route_rule : "");
        jw_obj_end(&w);
    }
    if (v->redis) {
        const svc_redis_stats *r = v->redis;
        jw_key(&w, "redis");
        jw_obj(&w);
        jw_key(&w, "up");
        jw_bool(&w, r->up);
        jw_key(&w, "requests");
        jw_int(&w, (int64_t)(r->requests[0] + r->requests[1] + r->requests[2]));
        jw_key(&w, "failures");
        jw_int(&w, (int64_t)r->failures);
        jw_key(&w, "bytes_written");
        jw_int(&w, (int64_t)r->bytes_written);
        jw_key(&w, "bytes_read");
        jw_int(&w, (int64_t)r->bytes_read);
        jw_key(&w, "reconnects");
        jw_int(&w, (int64_t)r->reconnects);
        jw_obj_end(&w);
    }
    if (v->kafka) {
        jw_key(&w, "kafka");
        jw_obj(&w);
        jw_key(&w, "up");
        jw_bool(&w, v->kafka->up);
        jw_key(&w, "partitions");
        jw_int(&w, v->kafka->assigned);
        jw_key(&w, "paused");
        jw_bool(&w, v->kafka->paused);
        int64_t lag = 0;
        for (int i = 0; i < v->kafka->n_lag; i++) lag += v->kafka->lag[i];
        jw_key(&w, "consumer_lag");
        jw_int(&w, lag);
        jw_key(&w, "revokes");
        jw_int(&w, (int64_t)v->kafka->revokes);
        jw_key(&w, "revoke_abandoned");
        jw_int(&w, (int64_t)v->kafka->revoke_abandoned);
        jw_key(&w, "revoke_rerun");
        jw_int(&w, (int64_t)v->kafka->revoke_rerun);
        jw_key(&w, "revoke_uncommitted");
        jw_int(&w, (int64_t)v->kafka->revoke_uncommitted);
        jw_key(&w, "skipped_done");
        jw_int(&w, (int64_t)v->kafka->skipped_done);
        jw_key(&w, "done_truncated");
        jw_int(&w, (int64_t)v->kafka->done_truncated);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
}
