/* cli_loadgen.c - `confkv loadgen`: the load of `confkv bench --scenario
 * serve`, sent through Kafka to a running confkvd, with the client's view of
 * throughput and latency.
 *
 * Requests arrive as a Poisson process at --rate per second, from the same
 * seeded generator as the serve bench, so both see the same arrival times
 * for the same --seed. Each job carries --prompt-tokens token ids (BOS, then
 * ids drawn from the seed in [3, --vocab)) as `tokens`, greedy sampling,
 * `max_tokens` = --gen-tokens and `ignore_eos`, so every job costs the same
 * as a serve-bench request. One thread produces each job when its time
 * comes and consumes the results topic (assigned at its end offsets before
 * the first job, no consumer group), so a job's latency is the time from its
 * produce call to the arrival of its result, both on this process's
 * monotonic clock.
 *
 * Waiting. Between arrivals the thread sleeps in ppoll() on a pipe that
 * librdkafka writes when a result lands in the consumer's queue
 * (rd_kafka_queue_io_event_enable), with the time to the next arrival as a
 * nanosecond timeout: a result is taken as soon as it arrives, a job is sent
 * on time, and nothing spins (rd_kafka_consumer_poll's millisecond timeout
 * would have to spin through the last millisecond before each arrival, on
 * a machine that the engine under test shares). The results consumer asks for
 * fetch.wait.max.ms = --fetch-wait-ms (1): a real broker answers a fetch as
 * soon as data arrives whatever the wait, but librdkafka's mock broker (`confkv
 * broker`) answers an empty fetch only when the wait has passed, so the wait
 * is paid on every result (about 1.3 ms at 1 ms, 1.7 ms at 2 ms; 0 would
 * make the client and the broker spin on empty fetches).
 *
 * Output (--json: one object): requests, completed, failed, wall_s (first
 * produce to last result), requests_per_s, tokens_per_s (completion tokens
 * over wall_s), latency_{p50,p90,p99,mean}_ms, service_ttft_{p50,p99}_ms
 * (the results' timings.ttft_ms: from consumption by confkvd to the first
 * token), ttft_{p50,p99}_ms (an end-to-end estimate: service ttft plus the
 * time the job and its result spent outside confkvd's engine path, i.e.
 * latency - total_ms + ttft_ms), outside_{p50,p99}_ms (latency - total_ms:
 * Kafka both ways plus the service's own queues). */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "jw.h"

static void help(void) {
    printf(
        "usage: confkv loadgen --brokers HOST:PORT [options]\n\n"
        "Send the serve bench's load (Poisson arrivals, fixed prompt and generation lengths) to confkvd\n"
        "through Kafka; print throughput and the latency from produce to result.\n\n"
        "  --brokers B          Kafka bootstrap servers (required)\n"
        "  --topic T            jobs topic (confkv.jobs)\n"
        "  --results-topic T    results topic (confkv.results)\n"
        "  --requests N         jobs in all (100)\n"
        "  --rate R             arrivals per second, Poisson (10; 0 = all at once)\n"
        "  --prompt-tokens P    prompt length, BOS included (16)\n"
        "  --gen-tokens G       tokens generated per job, EOS ignored (128)\n"
        "  --vocab V            prompt ids are drawn from [3, V) (512)\n"
        "  --model NAME         the job's `model` field (none)\n"
        "  --seed S             arrivals and prompts (1)\n"
        "  --timeout S          give up S seconds after the last job was sent (120)\n"
        "  --fetch-wait-ms W    fetch.wait.max.ms of the results consumer (1; see the mock broker note\n"
        "                       in docs/SERVICE.md)\n"
        "  --per-job FILE       also write one line per job: index sent_s recv_s total_ms ttft_ms back_ms\n"
        "                       (back_ms: the result's CreateTime to its arrival, ms resolution)\n"
        "  --json               one JSON object on stdout\n");
}

static double mean(const double *v, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    return n ? s / (double)n : 0;
}

static void sorted(double *v, size_t n) { cli_sort_doubles(v, n); }

/* Per job: what the client saw. */
typedef struct lg_job {
    double arrival; /* planned, s from start */
    double sent;    /* produce call, s from start (-1: not yet) */
    double recv;    /* result received (-1: not yet) */
    double ttft_ms, total_ms;
    double back_ms; /* result's CreateTime (confkvd's produce call) to its arrival, wall clock */
    int completion_tokens, ok;
} lg_job;

static rd_kafka_t *client(rd_kafka_type_t type, const char *brokers, const char *fetch_wait, char *err,
                          size_t errlen) {
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    const char *kv[][2] = {
        {"bootstrap.servers", brokers},
        {"client.id", "confkv-loadgen"},
        {type == RD_KAFKA_PRODUCER ? "client.id" : "group.id",
         "confkv-loadgen"}, /* assign() only: never joins */
        {type == RD_KAFKA_PRODUCER ? "linger.ms" : "fetch.wait.max.ms",
         type == RD_KAFKA_PRODUCER ? "0" : fetch_wait},
        {type == RD_KAFKA_PRODUCER ? "acks" : "enable.partition.eof",
         type == RD_KAFKA_PRODUCER ? "all" : "false"},
        {"socket.nagle.disable", "true"}, /* no 40 ms delayed-ACK stalls on small requests */
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (rd_kafka_conf_set(c, kv[i][0], kv[i][1], err, errlen) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(c);
            return NULL;
        }
    rd_kafka_t *rk = rd_kafka_new(type, c, err, errlen);
    if (!rk) rd_kafka_conf_destroy(c); /* on failure the conf is still ours */
    return rk;
}

/* Assign every partition of topic at its current end: only results of this
 * run are seen. */
static int assign_at_end(rd_kafka_t *cons, const char *topic, char *err, size_t errlen) {
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(cons, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rkt ? rd_kafka_metadata(cons, 0, rkt, &md, 10000) : RD_KAFKA_RESP_ERR__FAIL;
    int rc = -1;
    if (e || !md || md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt < 1) {
        snprintf(err, errlen, "no metadata for topic %s: %s", topic,
                 rd_kafka_err2str(e                     ? e
                                  : md && md->topic_cnt ? md->topics[0].err
                                                        : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        goto out;
    }
    int n = md->topics[0].partition_cnt;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int i = 0; i < n; i++) {
        int32_t p = md->topics[0].partitions[i].id;
        int64_t lo = 0, hi = 0;
        e = rd_kafka_query_watermark_offsets(cons, topic, p, &lo, &hi, 10000);
        if (e) {
            snprintf(err, errlen, "watermarks of %s [%d]: %s", topic, p, rd_kafka_err2str(e));
            rd_kafka_topic_partition_list_destroy(l);
            goto out;
        }
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = hi;
    }
    e = rd_kafka_assign(cons, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        snprintf(err, errlen, "assign %s: %s", topic, rd_kafka_err2str(e));
    else
        rc = 0;
out:
    if (md) rd_kafka_metadata_destroy(md);
    if (rkt) rd_kafka_topic_destroy(rkt);
    return rc;
}

static char *job_json(const char *id, const int32_t *ids, int P, int G, const char *model) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", id);
    if (model) cJSON_AddStringToObject(o, "model", model);
    cJSON *t = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; t && i < P; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(ids[i]));
    cJSON_AddNumberToObject(o, "max_tokens", G);
    cJSON_AddNumberToObject(o, "temperature", 0);
    cJSON_AddBoolToObject(o, "ignore_eos", 1);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* A result message: fill in its job (ids are "<prefix><index>"). Returns 1
 * when it was one of ours, seen for the first time. */
static int take_result(const rd_kafka_message_t *m, const char *prefix, lg_job *jobs, int n, double now) {
    cJSON *r = cJSON_ParseWithLength(m->payload, m->len);
    if (!r) return 0;
    int took = 0;
    cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
    size_t pl = strlen(prefix);
    if (cJSON_IsString(id) && !strncmp(id->valuestring, prefix, pl)) {
        char *end;
        long i = strtol(id->valuestring + pl, &end, 10);
        if (!*end && i >= 0 && i < n && jobs[i].recv < 0) {
            lg_job *j = &jobs[i];
            j->recv = now;
            rd_kafka_timestamp_type_t tst;
            int64_t ts = rd_kafka_message_timestamp(m, &tst);
            struct timespec w;
            clock_gettime(CLOCK_REALTIME, &w);
            j->back_ms = ts > 0 && tst == RD_KAFKA_TIMESTAMP_CREATE_TIME
                             ? (double)w.tv_sec * 1e3 + (double)w.tv_nsec / 1e6 - (double)ts
                             : -1;
            cJSON *st = cJSON_GetObjectItemCaseSensitive(r, "status");
            j->ok = cJSON_IsString(st) && !strcmp(st->valuestring, "ok");
            cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usage");
            cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
            j->completion_tokens = cJSON_IsNumber(ct) ? (int)ct->valuedouble : 0;
            cJSON *tm = cJSON_GetObjectItemCaseSensitive(r, "timings");
            cJSON *tt = cJSON_GetObjectItemCaseSensitive(tm, "ttft_ms");
            cJSON *tot = cJSON_GetObjectItemCaseSensitive(tm, "total_ms");
            j->ttft_ms = cJSON_IsNumber(tt) ? tt->valuedouble : 0;
            j->total_ms = cJSON_IsNumber(tot) ? tot->valuedouble : 0;
            took = 1;
        }
    }
    cJSON_Delete(r);
    return took;
}

int cli_loadgen(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "loadgen", 0};
    const char *brokers = NULL, *topic = "confkv.jobs", *rtopic = "confkv.results", *model = NULL,
               *per_job = NULL;
    int n = 100, P = 16, G = 128, V = 512, json = 0, fetch_wait = 1;
    float rate = 10, timeout = 120;
    uint64_t seed = 1;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_str(&a, "--brokers", &brokers) || cli_str(&a, "--topic", &topic) ||
            cli_str(&a, "--results-topic", &rtopic) || cli_str(&a, "--model", &model) ||
            cli_str(&a, "--per-job", &per_job) || cli_int(&a, "--requests", 1, 1 << 20, &n) ||
            cli_float(&a, "--rate", 0, 1e6, &rate) || cli_int(&a, "--prompt-tokens", 1, 1 << 16, &P) ||
            cli_int(&a, "--gen-tokens", 1, 1 << 20, &G) || cli_int(&a, "--vocab", 4, 1 << 24, &V) ||
            cli_u64(&a, "--seed", &seed) || cli_float(&a, "--timeout", 1, 86400, &timeout) ||
            cli_int(&a, "--fetch-wait-ms", 0, 10000, &fetch_wait))
            continue;
        if (cli_flag(&a, "--json"))
            json = 1;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (!brokers) {
        cli_error(&a, "--brokers is required");
        return 2;
    }
    char err[512], fw[16];
    snprintf(fw, sizeof fw, "%d", fetch_wait);
    int rc = 1, wake[2] = {-1, -1};
    rd_kafka_t *prod = NULL, *cons = NULL;
    rd_kafka_queue_t *cq = NULL;
    lg_job *jobs = calloc((size_t)n, sizeof *jobs);
    int32_t *ids = malloc((size_t)P * sizeof *ids);
    double *lat = malloc((size_t)n * sizeof *lat), *sttft = malloc((size_t)n * sizeof *sttft);
    double *ttft = malloc((size_t)n * sizeof *ttft), *outside = malloc((size_t)n * sizeof *outside);
    if (!jobs || !ids || !lat || !sttft || !ttft || !outside) {
        cli_error(&a, "out of memory");
        goto out;
    }
    if (!(prod = client(RD_KAFKA_PRODUCER, brokers, fw, err, sizeof err)) ||
        !(cons = client(RD_KAFKA_CONSUMER, brokers, fw, err, sizeof err))) {
        cli_error(&a, "%s", err);
        goto out;
    }
    /* Results wake us through a pipe (see "Waiting" above). */
    if (!(cq = rd_kafka_queue_get_consumer(cons)) || pipe2(wake, O_NONBLOCK | O_CLOEXEC)) {
        cli_error(&a, "cannot set up the results queue");
        goto out;
    }
    rd_kafka_queue_io_event_enable(cq, wake[1], "r", 1);
    if (assign_at_end(cons, rtopic, err, sizeof err)) {
        cli_error(&a, "%s", err);
        goto out;
    }
    uint64_t rs = seed, ps = seed ^ 0x10ad9e4ull;
    for (int i = 0; i < n; i++) {
        jobs[i].arrival = rate > 0 ? (i ? jobs[i - 1].arrival : 0) - log(cli_rng_unit(&rs)) / rate : 0;
        jobs[i].sent = jobs[i].recv = -1;
    }
    char prefix[64];
    snprintf(prefix, sizeof prefix, "lg-%d-%llu-", (int)getpid(), (unsigned long long)seed);
    if (!json)
        fprintf(stderr, "confkv loadgen: %d jobs at %g/s, %d + %d tokens, to %s on %s ...\n", n, (double)rate,
                P, G, topic, brokers);
    /* A ping first, outside the clock: an invalid job (no prompt) that
     * confkvd answers with an error result at once. It warms up both of our
     * clients (metadata, connections, the first fetch) and checks that
     * confkvd is there. */
    char ping[96];
    snprintf(ping, sizeof ping, "%sping", prefix);
    char pv[160];
    snprintf(pv, sizeof pv, "{\"id\": \"%s\"}", ping);
    if (rd_kafka_producev(prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(ping, strlen(ping)),
                          RD_KAFKA_V_VALUE(pv, strlen(pv)), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_END)) {
        cli_error(&a, "cannot produce to %s", topic);
        goto out;
    }
    int ponged = 0;
    for (double tp = cli_now(); !ponged && cli_now() - tp < timeout;) {
        rd_kafka_poll(prod, 0);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(cons, 100);
        if (!m) continue;
        ponged = !m->err && m->key_len == strlen(ping) && !memcmp(m->key, ping, m->key_len);
        rd_kafka_message_destroy(m);
    }
    if (!ponged) {
        cli_error(&a, "no answer from confkvd within %g s (is it running on %s?)", (double)timeout, brokers);
        goto out;
    }
    int next = 0, got = 0;
    double t0 = cli_now(), t_last_sent = 0, t_last = 0;
    while (got < n) {
        double now = cli_now() - t0;
        while (next < n && jobs[next].arrival <= now) {
            char id[96];
            snprintf(id, sizeof id, "%s%d", prefix, next);
            ids[0] = 1; /* BOS */
            for (int k = 1; k < P; k++) ids[k] = 3 + (int32_t)(cli_rng_next(&ps) % (uint64_t)(V - 3));
            char *v = job_json(id, ids, P, G, model);
            if (!v) {
                cli_error(&a, "out of memory");
                goto out;
            }
            jobs[next].sent = cli_now() - t0;
            rd_kafka_resp_err_t e =
                rd_kafka_producev(prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(id, strlen(id)),
                                  RD_KAFKA_V_VALUE(v, strlen(v)), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE),
                                  RD_KAFKA_V_HEADER("content-type", "application/json", -1), RD_KAFKA_V_END);
            if (e) {
                free(v); /* not taken on failure */
                if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                    rd_kafka_poll(prod, 10);
                    continue;
                }
                cli_error(&a, "produce: %s", rd_kafka_err2str(e));
                goto out;
            }
            t_last_sent = jobs[next].sent;
            next++;
        }
        rd_kafka_poll(prod, 0);
        now = cli_now() - t0;
        if (next == n && now - (t_last > t_last_sent ? t_last : t_last_sent) > timeout) {
            cli_error(&a, "timed out: %d of %d results", got, n);
            break;
        }
        /* Sleep until a result arrives or the next arrival is due, then take
         * every result queued. */
        double wait = next < n ? jobs[next].arrival - now : 0.1;
        if (wait > 0.1) wait = 0.1;
        if (wait > 0) {
            struct pollfd pf = {wake[0], POLLIN, 0};
            struct timespec ts = {0, (long)(wait * 1e9)};
            if (ppoll(&pf, 1, &ts, NULL) > 0) {
                char buf[64];
                while (read(wake[0], buf, sizeof buf) > 0) {}
            }
        }
        for (rd_kafka_message_t *m = rd_kafka_consumer_poll(cons, 0); m;
             m = rd_kafka_consumer_poll(cons, 0)) {
            if (!m->err && take_result(m, prefix, jobs, n, cli_now() - t0)) {
                got++;
                t_last = cli_now() - t0;
            }
            rd_kafka_message_destroy(m);
        }
    }
    if (per_job) {
        FILE *f = fopen(per_job, "w");
        if (!f) cli_error(&a, "cannot write %s", per_job);
        for (int i = 0; f && i < n; i++)
            fprintf(f, "%d %.6f %.6f %.3f %.3f %.3f\n", i, jobs[i].sent, jobs[i].recv, jobs[i].total_ms,
                    jobs[i].ttft_ms, jobs[i].back_ms);
        if (f) fclose(f);
    }
    /* Figures */
    size_t nl = 0;
    int completed = 0, failed = 0;
    uint64_t tokens = 0;
    double first = -1, last = 0;
    for (int i = 0; i < n; i++) {
        lg_job *j = &jobs[i];
        if (j->sent >= 0 && (first < 0 || j->sent < first)) first = j->sent;
        if (j->recv < 0) {
            failed++;
            continue;
        }
        if (j->recv > last) last = j->recv;
        if (!j->ok) {
            failed++;
            continue;
        }
        completed++;
        tokens += (uint64_t)j->completion_tokens;
        double l = 1e3 * (j->recv - j->sent);
        lat[nl] = l;
        sttft[nl] = j->ttft_ms;
        ttft[nl] = l - j->total_ms + j->ttft_ms;
        outside[nl] = l - j->total_ms;
        nl++;
    }
    double lat_mean = mean(lat, nl);
    sorted(lat, nl);
    sorted(sttft, nl);
    sorted(ttft, nl);
    sorted(outside, nl);
    double wall = last > first && first >= 0 ? last - first : 0;
    if (json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "scenario"), jw_str(&w, "kafka");
        jw_key(&w, "requests"), jw_int(&w, n);
        jw_key(&w, "rate"), jw_num(&w, rate);
        jw_key(&w, "prompt_tokens"), jw_int(&w, P);
        jw_key(&w, "gen_tokens"), jw_int(&w, G);
        jw_key(&w, "completed"), jw_int(&w, completed);
        jw_key(&w, "failed"), jw_int(&w, failed);
        jw_key(&w, "wall_s"), jw_num(&w, wall);
        jw_key(&w, "requests_per_s"), jw_num(&w, wall > 0 ? completed / wall : 0);
        jw_key(&w, "tokens_per_s"), jw_num(&w, wall > 0 ? (double)tokens / wall : 0);
        jw_key(&w, "generated_tokens"), jw_int(&w, (int64_t)tokens);
        jw_key(&w, "latency_p50_ms"), jw_num(&w, cli_quantile(lat, nl, 0.5));
        jw_key(&w, "latency_p90_ms"), jw_num(&w, cli_quantile(lat, nl, 0.9));
        jw_key(&w, "latency_p99_ms"), jw_num(&w, cli_quantile(lat, nl, 0.99));
        jw_key(&w, "latency_mean_ms"), jw_num(&w, lat_mean);
        jw_key(&w, "ttft_p50_ms"), jw_num(&w, cli_quantile(ttft, nl, 0.5));
        jw_key(&w, "ttft_p99_ms"), jw_num(&w, cli_quantile(ttft, nl, 0.99));
        jw_key(&w, "service_ttft_p50_ms"), jw_num(&w, cli_quantile(sttft, nl, 0.5));
        jw_key(&w, "service_ttft_p99_ms"), jw_num(&w, cli_quantile(sttft, nl, 0.99));
        jw_key(&w, "outside_p50_ms"), jw_num(&w, cli_quantile(outside, nl, 0.5));
        jw_key(&w, "outside_p99_ms"), jw_num(&w, cli_quantile(outside, nl, 0.99));
        jw_obj_end(&w);
        putchar('\n');
    } else {
        printf("completed %d, failed %d in %.2f s: %.2f requests/s, %.1f tokens/s\n", completed, failed, wall,
               wall > 0 ? completed / wall : 0, wall > 0 ? (double)tokens / wall : 0);
        printf("latency p50 %.1f ms, p90 %.1f ms, p99 %.1f ms; ttft (estimate) p50 %.1f ms, p99 %.1f ms; "
               "outside the engine p50 %.1f ms, p99 %.1f ms\n",
               cli_quantile(lat, nl, 0.5), cli_quantile(lat, nl, 0.9), cli_quantile(lat, nl, 0.99),
               cli_quantile(ttft, nl, 0.5), cli_quantile(ttft, nl, 0.99), cli_quantile(outside, nl, 0.5),
               cli_quantile(outside, nl, 0.99));
    }
    rc = failed ? 1 : 0;
out:
    if (cq) {
        rd_kafka_queue_io_event_enable(cq, -1, NULL, 0);
        rd_kafka_queue_destroy(cq);
    }
    for (int i = 0; i < 2; i++)
        if (wake[i] >= 0) close(wake[i]);
    if (prod) {
        rd_kafka_flush(prod, 5000);
        rd_kafka_destroy(prod);
    }
    if (cons) {
        rd_kafka_consumer_close(cons);
        rd_kafka_destroy(cons);
    }
    free(jobs);
    free(ids);
    free(lat);
    free(sttft);
    free(ttft);
    free(outside);
    return rc;
}
