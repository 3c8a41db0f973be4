/* svc_kafka.c - consumer + idempotent producer on a libuv loop (svc_kafka.h). */
#include "svc_kafka.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_err.h"
#include "svc_log.h"

#define POLL_BUDGET 512      /* messages handled per wake-up before yielding */
#define SAFETY_POLL_MS 100   /* timer poll, in case an io event was missed */
#define COMMIT_INTERVAL_MS 1000 /* default period of the offset commit (kafka.auto.commit.interval.ms) */
/* The dispatch mark runs this many offsets ahead of the dispatched ones: a
 * larger value means fewer commit round trips that can hold dispatch, a
 * smaller one fewer jobs wrongly marked redelivered after a crash (at most
 * this many per partition). */
#define MARK_AHEAD 64
#define HOLD_PAUSE 1024      /* held messages of a partition before it is paused */
#define COMMITTED_TIMEOUT_MS 5000 /* rd_kafka_committed, on a worker thread */
#define FETCH_RETRY_MS 1000  /* after a failed read of the committed offsets */
#define MARK_PREFIX "confkv.mark="

/* Per partition of the jobs topic: the consumed offsets waiting for their
 * result (a ring kept linear: entries live in [head, head + n), compacted
 * when it is full), and the commit state (see "redelivery marks" in
 * svc_kafka.h). */
typedef struct ktrack {
    uint32_t epoch;      /* bumped when the ring is cleared: stale svc_kafka_done calls are ignored */
    uint32_t agen;       /* bumped on every assign/revoke of the partition */
    int assigned;
    int64_t *off;
    uint8_t *done;
    int head, n, cap;
    /* commit state, valid while assigned */
    int known;           /* the committed offset and the previous mark were read */
    int dirty;           /* next changed since it was last committed */
    int64_t next;        /* offset to commit: contiguous done prefix + 1 (-1: none yet) */
    int64_t prev_mark;   /* earlier owners may have dispatched every offset below it (-1: no mark) */
    int64_t acked;       /* the broker holds a mark >= this: we dispatch only offsets below it */
    int64_t mark;        /* highest mark asked for (>= acked) */
    int64_t hi;          /* highest offset dispatched in this assignment (-1: none) */
    int64_t sent_mark;   /* mark in the commit in flight */
    uint32_t sent_agen;  /* agen when that commit was sent */
    /* messages not dispatched yet (mark unknown or not yet acked), oldest first */
    rd_kafka_message_t **hold;
    int nhold, cap_hold, hold_paused;
} ktrack;

/* One produce in flight: the caller's callback. */
typedef struct kpend {
    svc_kafka_dr_cb cb;
    void *ud;
} kpend;

struct svc_kafka {
    uv_loop_t *loop;
    svc_kafka_cbs cbs;
    rd_kafka_t *cons, *prod;
    rd_kafka_queue_t *cq, *pq;       /* consumer queue, producer main queue */
    int cpipe[2], ppipe[2];
    uv_poll_t cpoll, ppoll;
    uv_timer_t timer, kick;
    int handles_open;
    char *topic;                      /* jobs topic */
    ktrack *track;                    /* indexed by partition */
    int n_track;
    int paused;
    int closing;                      /* teardown: delivery reports no longer reach callers */
    int handles_closing;              /* svc_kafka_close_handles was called */
    uv_timer_t ctimer;                /* offset commits */
    int commit_inflight, commit_again;
    int fetch_inflight;               /* a rd_kafka_committed on the thread pool */
    uint64_t fetch_after;             /* uv_now before which no new fetch starts (retry backoff) */
    int release;                      /* held messages may be dispatchable */
    svc_kafka_stats st;
};

/* ------------------------------------------------------------------------ */
/* configuration */

typedef struct conf_ctx {
    rd_kafka_conf_t *conf;
    char *err;
    size_t errlen;
    int consumer;
} conf_ctx;

static const char *consumer_only[] = {"group.id", "enable.auto.commit", "enable.auto.offset.store",
                                      "auto.offset.reset", "auto.commit.interval.ms",
                                      "session.timeout.ms", "max.poll.interval.ms",
                                      "partition.assignment.strategy", "group.instance.id",
                                      "heartbeat.interval.ms", "isolation.level", NULL};
static const char *producer_only[] = {"enable.idempotence", "acks", "linger.ms", "partitioner",
                                      "compression.type", "message.timeout.ms", "retries",
                                      "queue.buffering.max.messages", "batch.size", NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return 1;
    return 0;
}

static int conf_set_cb(void *ud, const char *name, const char *value) {
    conf_ctx *c = ud;
    /* Keys of the other client kind are skipped, so librdkafka does not warn. */
    if (c->consumer ? in_list(producer_only, name) : in_list(consumer_only, name)) return 0;
    char e[512];
    if (rd_kafka_conf_set(c->conf, name, value, e, sizeof e) != RD_KAFKA_CONF_OK) {
        snprintf(c->err, c->errlen, "kafka.%s: %s", name, e);
        return CK_EINVAL;
    }
    return 0;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    char q[600];
    svc_log(level <= 3 ? SVC_LOG_ERROR : level <= 4 ? SVC_LOG_WARN : level <= 6 ? SVC_LOG_INFO : SVC_LOG_DEBUG,
            "kafka_log", "client=%s facility=%s msg=%s", rd_kafka_name(rk), fac,
            svc_log_str(q, sizeof q, buf, strlen(buf)));
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    svc_kafka *k = opaque;
    char q[600];
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) k->st.up = 0;
    svc_log(err == RD_KAFKA_RESP_ERR__FATAL ? SVC_LOG_ERROR : SVC_LOG_WARN, "kafka_error",
            "client=%s code=%s msg=%s", rd_kafka_name(rk), rd_kafka_err2name(err),
            svc_log_str(q, sizeof q, reason, strlen(reason)));
}

/* Statistics JSON (statistics.interval.ms): consumer lag per partition of
 * the jobs topic and whether any broker is up. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    svc_kafka *k = opaque;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return 0;
    cJSON *brokers = cJSON_GetObjectItemCaseSensitive(root, "brokers"), *b;
    int up = 0;
    cJSON_ArrayForEach(b, brokers) {
        cJSON *state = cJSON_GetObjectItemCaseSensitive(b, "state");
        cJSON *nodeid = cJSON_GetObjectItemCaseSensitive(b, "nodeid");
        if (cJSON_IsString(state) && !strcmp(state->valuestring, "UP") && cJSON_IsNumber(nodeid) &&
            nodeid->valuedouble >= 0)
            up = 1;
    }
    k->st.up = up;
    cJSON *topics = cJSON_GetObjectItemCaseSensitive(root, "topics");
    cJSON *t = cJSON_GetObjectItemCaseSensitive(topics, k->topic);
    cJSON *parts = cJSON_GetObjectItemCaseSensitive(t, "partitions"), *p;
    int n = 0;
    cJSON_ArrayForEach(p, parts) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(p, "partition");
        cJSON *lag = cJSON_GetObjectItemCaseSensitive(p, "consumer_lag");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || !cJSON_IsNumber(lag) || lag->valuedouble < 0)
            continue;
        if (n == SVC_KAFKA_MAX_LAG_PARTS) break;
        k->st.lag_partition[n] = (int32_t)id->valuedouble;
        k->st.lag[n] = (int64_t)lag->valuedouble;
        n++;
    }
    k->st.n_lag = n;
    cJSON_Delete(root);
    return 0; /* librdkafka frees json */
}

/* ------------------------------------------------------------------------ */
/* offset tracking */

static ktrack *track_get(svc_kafka *k, int32_t p) {
    if (p < 0 || p > 1000000) return NULL;
    if (p >= k->n_track) {
        int n = p + 1 > 2 * k->n_track ? p + 1 : 2 * k->n_track;
        ktrack *t = realloc(k->track, (size_t)n * sizeof *t);
        if (!t) return NULL;
        memset(t + k->n_track, 0, (size_t)(n - k->n_track) * sizeof *t);
        k->track = t;
        k->n_track = n;
    }
    return &k->track[p];
}

static void track_reset(ktrack *t) {
    t->epoch++;
    t->head = t->n = 0;
}

static int track_push(ktrack *t, int64_t off) {
    if (t->head + t->n == t->cap) {
        if (t->head > 0) {
            memmove(t->off, t->off + t->head, (size_t)t->n * sizeof *t->off);
            memmove(t->done, t->done + t->head, (size_t)t->n);
            t->head = 0;
        }
        if (t->n == t->cap) {
            int cap = t->cap ? 2 * t->cap : 64;
            int64_t *o = realloc(t->off, (size_t)cap * sizeof *o);
            if (!o) return CK_ENOMEM;
            t->off = o;
            uint8_t *d = realloc(t->done, (size_t)cap);
            if (!d) return CK_ENOMEM;
            t->done = d;
            t->cap = cap;
        }
    }
    t->off[t->head + t->n] = off;
    t->done[t->head + t->n] = 0;
    t->n++;
    return 0;
}

static void hold_clear(ktrack *t) {
    for (int i = 0; i < t->nhold; i++) rd_kafka_message_destroy(t->hold[i]);
    t->nhold = 0;
    t->hold_paused = 0;
}

/* The partition was assigned (1) or revoked (0): a fresh state either way;
 * held messages are dropped (the next owner consumes them again). */
static void track_assign(ktrack *t, int assigned) {
    track_reset(t);
    hold_clear(t);
    t->agen++;
    t->assigned = assigned;
    t->known = t->dirty = 0;
    t->next = t->prev_mark = t->hi = -1;
    t->acked = t->mark = t->sent_mark = 0;
}

void svc_kafka_done(svc_kafka *k, svc_ktok tok) {
    if (tok.partition < 0 || tok.partition >= k->n_track) return;
    ktrack *t = &k->track[tok.partition];
    if (t->epoch != tok.epoch || t->n == 0) return;
    /* binary search: offsets increase along the ring */
    int lo = t->head, hi = t->head + t->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->off[mid] == tok.offset) {
            t->done[mid] = 1;
            break;
        }
        if (t->off[mid] < tok.offset) lo = mid + 1;
        else hi = mid - 1;
    }
    int64_t last = -1;
    while (t->n > 0 && t->done[t->head]) {
        last = t->off[t->head];
        t->head++;
        t->n--;
    }
    if (t->n == 0) t->head = 0;
    if (last >= 0 && t->assigned && last + 1 > t->next) {
        /* committed by the commit timer (commit_send) */
        t->next = last + 1;
        t->dirty = 1;
        k->st.stored++;
    }
}

/* ------------------------------------------------------------------------ */
/* redelivery marks: commits with metadata (svc_kafka.h) */

/* "confkv.mark=N" -> N; -1 for anything else (no mark, or another tool's). */
static int64_t parse_mark(const void *md, size_t n) {
    size_t pl = sizeof MARK_PREFIX - 1;
    if (!md || n <= pl || n > pl + 19 || memcmp(md, MARK_PREFIX, pl)) return -1;
    const char *s = (const char *)md + pl;
    int64_t v = 0;
    for (size_t i = 0; i < n - pl; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* The mark a partition's commit carries. While we dispatch it is the mark
 * asked for (never below what the broker already has); when we stop
 * dispatching (revoke, shutdown) it can shrink to exactly what was
 * dispatched, so that a clean stop leaves no false redelivery marks. */
static int64_t mark_to_commit(const ktrack *t, int final) {
    if (!final) return t->mark;
    int64_t m = t->hi + 1;
    if (t->prev_mark > m) m = t->prev_mark;
    if (t->next > m) m = t->next;
    return m;
}

/* Append partition p's commit (next offset, mark as metadata) to l. */
static void add_commit(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int32_t p, const ktrack *t, int final) {
    char md[48];
    int n = snprintf(md, sizeof md, MARK_PREFIX "%" PRId64, mark_to_commit(t, final));
    rd_kafka_topic_partition_t *e = rd_kafka_topic_partition_list_add(l, k->topic, p);
    e->offset = t->next;
    e->metadata = malloc((size_t)n); /* freed with the list */
    if (e->metadata) {
        memcpy(e->metadata, md, (size_t)n);
        e->metadata_size = (size_t)n;
    }
}

static void commit_send(svc_kafka *k);

static void commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *offsets,
                      void *commit_opaque) {
    svc_kafka *k = rd_kafka_opaque(rk);
    int regular = commit_opaque == (void *)k; /* else a revoke commit: nothing to track */
    if (regular) k->commit_inflight = 0;
    if (k->closing) return;
    for (int i = 0; offsets && i < offsets->cnt; i++) {
        rd_kafka_topic_partition_t *e = &offsets->elems[i];
        rd_kafka_resp_err_t pe = err ? err : e->err;
        if (pe) svc_log(SVC_LOG_WARN, "commit_failed", "partition=%d offset=%lld err=%s", e->partition,
                        (long long)e->offset, rd_kafka_err2name(pe));
        if (!regular || strcmp(e->topic, k->topic)) continue;
        ktrack *t = track_get(k, e->partition);
        if (!t || !t->assigned || t->agen != t->sent_agen) continue;
        if (pe) {
            t->dirty = 1; /* sent again by the timer */
        } else if (t->sent_mark > t->acked) {
            t->acked = t->sent_mark;
            k->release = 1; /* held messages below it may go (poll_consumer) */
        }
    }
    if (regular && k->commit_again) {
        k->commit_again = 0;
        commit_send(k);
    }
}

/* Commit, asynchronously, every partition whose offset or mark moved. One
 * regular commit is in flight at a time, so the broker sees marks in the
 * order we asked for them (a later commit never lowers one). */
static void commit_send(svc_kafka *k) {
    if (k->closing || !k->cons) return;
    if (k->commit_inflight) {
        k->commit_again = 1;
        return;
    }
    rd_kafka_topic_partition_list_t *l = NULL;
    for (int p = 0; p < k->n_track; p++) {
        ktrack *t = &k->track[p];
        if (!t->assigned || !t->known || t->next < 0 || !(t->dirty || t->mark > t->acked)) continue;
        if (!l && !(l = rd_kafka_topic_partition_list_new(4))) return;
        add_commit(k, l, p, t, 0);
        t->sent_mark = t->mark;
        t->sent_agen = t->agen;
        t->dirty = 0;
    }
    if (!l) return;
    rd_kafka_resp_err_t e = rd_kafka_commit_queue(k->cons, l, k->cq, commit_cb, k);
    if (e) {
        /* Not sent (no callback will come): the timer tries again. */
        svc_log(SVC_LOG_WARN, "commit_failed", "err=%s", rd_kafka_err2name(e));
        for (int i = 0; i < l->cnt; i++) {
            ktrack *t = track_get(k, l->elems[i].partition);
            if (t) t->dirty = 1;
        }
    } else {
        k->commit_inflight = 1;
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Make sure a mark above offset off is asked for. */
static void want_mark(svc_kafka *k, ktrack *t, int64_t off) {
    if (!t->known || t->next < 0 || off + MARK_AHEAD / 2 < t->mark) return;
    t->mark = off + MARK_AHEAD;
    if (t->prev_mark > t->mark) t->mark = t->prev_mark;
    commit_send(k);
}

/* ------------------------------------------------------------------------ */
/* dispatch and hold */

static void pause_list(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int pause) {
    rd_kafka_resp_err_t e = pause ? rd_kafka_pause_partitions(k->cons, l) : rd_kafka_resume_partitions(k->cons, l);
    if (e) svc_log(SVC_LOG_WARN, pause ? "pause_failed" : "resume_failed", "err=%s", rd_kafka_err2name(e));
}

static void pause_one(svc_kafka *k, int32_t p, int pause) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    if (!l) return;
    rd_kafka_topic_partition_list_add(l, k->topic, p);
    pause_list(k, l, pause);
    rd_kafka_topic_partition_list_destroy(l);
}

/* Hand message m (ours from now on) to the service. */
static void dispatch(svc_kafka *k, ktrack *t, rd_kafka_message_t *m) {
    svc_ktok tok = {m->partition, m->offset, 0, 0};
    if (t) {
        /* A message at or below the last one seen means a re-fetch: start over. */
        if (t->n > 0 && m->offset <= t->off[t->head + t->n - 1]) track_reset(t);
        if (track_push(t, m->offset) == 0) tok.epoch = t->epoch;
        else tok.epoch = t->epoch - 1; /* untracked: its done is ignored */
        /* Below an earlier owner's mark, or at/below what we dispatched
         * ourselves: it may have been processed before. */
        tok.redelivered = m->offset < t->prev_mark || m->offset <= t->hi;
        if (m->offset > t->hi) t->hi = m->offset;
        want_mark(k, t, m->offset);
    }
    if (tok.redelivered) k->st.redelivered++;
    if (k->cbs.on_message) k->cbs.on_message(k->cbs.ud, m, tok);
    rd_kafka_message_destroy(m);
}

/* Hold m until the broker has a mark above its offset. 0, or CK_ENOMEM
 * (then m is still the caller's). */
static int hold(svc_kafka *k, ktrack *t, rd_kafka_message_t *m) {
    if (t->nhold == t->cap_hold) {
        int cap = t->cap_hold ? 2 * t->cap_hold : 64;
        rd_kafka_message_t **h = realloc(t->hold, (size_t)cap * sizeof *h);
        if (!h) return CK_ENOMEM;
        t->hold = h;
        t->cap_hold = cap;
    }
    t->hold[t->nhold++] = m;
    if (t->nhold >= HOLD_PAUSE && !t->hold_paused) {
        /* The mark is late (the coordinator is slow or away): stop fetching. */
        t->hold_paused = 1;
        pause_one(k, m->partition, 1);
        svc_log(SVC_LOG_WARN, "partition_held", "partition=%d held=%d", m->partition, t->nhold);
    }
    return 0;
}

/* Dispatch the held messages that the acknowledged marks now cover. */
static void release_held(svc_kafka *k) {
    k->release = 0;
    if (k->handles_closing) return;
    for (int p = 0; p < k->n_track; p++) {
        ktrack *t = &k->track[p];
        if (!t->assigned || !t->known || t->nhold == 0) continue;
        int i = 0;
        uint32_t agen = t->agen;
        while (i < t->nhold && t->hold[i]->offset < t->acked) {
            rd_kafka_message_t *m = t->hold[i++];
            dispatch(k, t, m);
            if (t->agen != agen) break; /* revoked meanwhile: held messages were dropped */
        }
        if (t->agen != agen) continue;
        memmove(t->hold, t->hold + i, (size_t)(t->nhold - i) * sizeof *t->hold);
        t->nhold -= i;
        if (t->nhold) want_mark(k, t, t->hold[0]->offset);
        else if (t->hold_paused) {
            t->hold_paused = 0;
            if (!k->paused) pause_one(k, p, 0);
        }
    }
}

/* A consumed message: dispatched now when the broker has a mark above its
 * offset, else held (in order) until it does. */
static void on_consumed(svc_kafka *k, rd_kafka_message_t *m) {
    ktrack *t = track_get(k, m->partition);
    if (!t || !t->assigned) {
        /* Not (or no longer) ours: its owner consumes it. */
        svc_log(SVC_LOG_DEBUG, "message_dropped", "partition=%d offset=%lld", m->partition, (long long)m->offset);
        rd_kafka_message_destroy(m);
        return;
    }
    if (t->known && t->next < 0) t->next = m->offset; /* no committed offset: start here */
    if (t->known && t->nhold == 0 && m->offset < t->acked) {
        dispatch(k, t, m);
        return;
    }
    if (hold(k, t, m)) {
        svc_log(SVC_LOG_ERROR, "out_of_memory", "partition=%d offset=%lld", m->partition, (long long)m->offset);
        rd_kafka_message_destroy(m); /* never done: redelivered after a restart */
        return;
    }
    if (t->known) want_mark(k, t, m->offset);
}

/* ------------------------------------------------------------------------ */
/* committed offsets and marks, read on a worker thread after an assignment */

typedef struct kfetch {
    uv_work_t req;
    svc_kafka *k;
    rd_kafka_topic_partition_list_t *l;
    uint32_t *agen;          /* per element: the partition's agen when asked */
    rd_kafka_resp_err_t err;
} kfetch;

static void fetch_work(uv_work_t *req) {
    kfetch *f = req->data;
    f->err = rd_kafka_committed(f->k->cons, f->l, COMMITTED_TIMEOUT_MS); /* thread-safe, blocking */
}

static void fetch_start(svc_kafka *k);

static void fetch_done(uv_work_t *req, int status) {
    kfetch *f = req->data;
    svc_kafka *k = f->k;
    k->fetch_inflight = 0;
    int failed = status != 0 || f->err;
    if (failed)
        svc_log(SVC_LOG_WARN, "committed_read_failed", "err=%s",
                status ? uv_err_name(status) : rd_kafka_err2name(f->err));
    for (int i = 0; !failed && i < f->l->cnt; i++) {
        rd_kafka_topic_partition_t *e = &f->l->elems[i];
        ktrack *t = track_get(k, e->partition);
        if (!t || !t->assigned || t->agen != f->agen[i] || t->known) continue;
        if (e->err) {
            svc_log(SVC_LOG_WARN, "committed_read_failed", "partition=%d err=%s", e->partition,
                    rd_kafka_err2name(e->err));
            failed = 1;
            continue;
        }
        t->known = 1;
        t->prev_mark = parse_mark(e->metadata, e->metadata_size);
        t->acked = t->mark = t->prev_mark > 0 ? t->prev_mark : 0;
        t->next = e->offset >= 0 ? e->offset : t->nhold ? t->hold[0]->offset : -1;
        svc_log(SVC_LOG_INFO, "partition_committed", "partition=%d offset=%lld mark=%lld", e->partition,
                (long long)e->offset, (long long)t->prev_mark);
        k->release = 1;
        if (t->nhold) want_mark(k, t, t->hold[t->nhold - 1]->offset);
    }
    rd_kafka_topic_partition_list_destroy(f->l);
    free(f->agen);
    free(f);
    if (failed) k->fetch_after = uv_now(k->loop) + FETCH_RETRY_MS;
    if (k->handles_closing) return;
    if (k->release) release_held(k);
    fetch_start(k); /* partitions assigned meanwhile, or failed ones (after the backoff) */
}

/* Read the committed offsets and marks of the assigned partitions not yet
 * known, on libuv's thread pool (rd_kafka_committed blocks). */
static void fetch_start(svc_kafka *k) {
    if (k->fetch_inflight || k->handles_closing || k->closing || uv_now(k->loop) < k->fetch_after) return;
    int n = 0;
    for (int p = 0; p < k->n_track; p++) n += k->track[p].assigned && !k->track[p].known;
    if (!n) return;
    kfetch *f = calloc(1, sizeof *f);
    if (!f) return;
    f->k = k;
    f->l = rd_kafka_topic_partition_list_new(n);
    f->agen = malloc((size_t)n * sizeof *f->agen);
    if (!f->l || !f->agen) goto fail;
    for (int p = 0; p < k->n_track; p++) {
        if (!k->track[p].assigned || k->track[p].known) continue;
        f->agen[f->l->cnt] = k->track[p].agen;
        rd_kafka_topic_partition_list_add(f->l, k->topic, p);
    }
    f->req.data = f;
    if (uv_queue_work(k->loop, &f->req, fetch_work, fetch_done)) goto fail;
    k->fetch_inflight = 1;
    return;
fail:
    if (f->l) rd_kafka_topic_partition_list_destroy(f->l);
    free(f->agen);
    free(f);
    k->fetch_after = uv_now(k->loop) + FETCH_RETRY_MS;
}

/* ------------------------------------------------------------------------ */
/* rebalance and pause */

void svc_kafka_pause(svc_kafka *k, int pause) {
    if (!k->cons || k->paused == !!pause) return;
    k->paused = !!pause;
    k->st.paused = k->paused;
    rd_kafka_topic_partition_list_t *l = NULL;
    if (rd_kafka_assignment(k->cons, &l) == 0 && l) {
        /* Partitions paused because their mark is late stay paused. */
        for (int i = l->cnt - 1; !pause && i >= 0; i--) {
            ktrack *t = strcmp(l->elems[i].topic, k->topic) ? NULL : track_get(k, l->elems[i].partition);
            if (t && t->hold_paused) rd_kafka_topic_partition_list_del_by_idx(l, i);
        }
        if (l->cnt) pause_list(k, l, pause);
        rd_kafka_topic_partition_list_destroy(l);
    }
    svc_log(SVC_LOG_INFO, pause ? "consumer_paused" : "consumer_resumed", NULL);
}

static void mark(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int assigned) {
    for (int i = 0; i < l->cnt; i++) {
        if (strcmp(l->elems[i].topic, k->topic)) continue;
        ktrack *t = track_get(k, l->elems[i].partition);
        if (t) track_assign(t, assigned);
    }
}

/* Revoked partitions: commit their offset and exact dispatch mark (async;
 * librdkafka sends it before the group moves on). */
static void commit_revoked(svc_kafka *k, rd_kafka_topic_partition_list_t *parts) {
    if (k->closing) return; /* svc_kafka_free committed already */
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(parts->cnt > 0 ? parts->cnt : 1);
    if (!l) return;
    for (int i = 0; i < parts->cnt; i++) {
        if (strcmp(parts->elems[i].topic, k->topic)) continue;
        ktrack *t = track_get(k, parts->elems[i].partition);
        if (t && t->assigned && t->known && t->next >= 0) add_commit(k, l, parts->elems[i].partition, t, 1);
    }
    if (l->cnt) {
        /* The opaque is not k: commit_cb does not take it for the regular commit. */
        rd_kafka_resp_err_t e = rd_kafka_commit_queue(k->cons, l, k->cq, commit_cb, NULL);
        if (e) svc_log(SVC_LOG_WARN, "commit_failed", "err=%s on=revoke", rd_kafka_err2name(e));
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static int count_assigned(svc_kafka *k) {
    int n = 0;
    for (int i = 0; i < k->n_track; i++) n += k->track[i].assigned;
    return n;
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque) {
    svc_kafka *k = opaque;
    int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        mark(k, parts, 1);
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
            if (e) rd_kafka_error_destroy(e);
        } else {
            rd_kafka_assign(rk, parts);
        }
        if (k->paused && parts->cnt) pause_list(k, parts, 1);
        k->st.assigned = count_assigned(k);
        svc_log(SVC_LOG_INFO, "partitions_assigned", "count=%d total=%d", parts->cnt, k->st.assigned);
        k->st.up = 1;
        k->fetch_after = 0;
        fetch_start(k); /* their messages are held until the marks are known */
        if (k->cbs.on_assign) k->cbs.on_assign(k->cbs.ud, k->st.assigned);
    } else {
        /* Revoked: in-flight jobs of these partitions will be redelivered to
         * their new owner (marked: they are below our mark); their late
         * completions are ignored (epoch). */
        commit_revoked(k, parts);
        mark(k, parts, 0);
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, parts);
            if (e) rd_kafka_error_destroy(e);
        } else {
            rd_kafka_assign(rk, NULL);
        }
        k->st.assigned = count_assigned(k);
        svc_log(SVC_LOG_INFO, "partitions_revoked", "count=%d total=%d", parts->cnt, k->st.assigned);
    }
}

/* ------------------------------------------------------------------------ */
/* polling */

static void drain_pipe(int fd) {
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

static void poll_producer(svc_kafka *k) { rd_kafka_poll(k->prod, 0); }

static void kick_cb(uv_timer_t *t);

static void poll_consumer(svc_kafka *k) {
    if (k->handles_closing) return;
    for (int i = 0; i < POLL_BUDGET; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(k->cons, 0);
        /* commit_cb (served inside the poll) may have acknowledged marks */
        if (k->release) release_held(k);
        if (!m) return;
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                svc_log(SVC_LOG_WARN, "consume_error", "err=%s msg=%s", rd_kafka_err2name(m->err),
                        rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        k->st.consumed++;
        on_consumed(k, m);
    }
    /* Budget spent with messages left: come back on the next loop turn. */
    uv_timer_start(&k->kick, kick_cb, 0, 0);
}

static void kick_cb(uv_timer_t *t) { poll_consumer(t->data); }

static void cpoll_cb(uv_poll_t *h, int status, int events) {
    svc_kafka *k = h->data;
    drain_pipe(k->cpipe[0]);
    poll_consumer(k);
}

static void ppoll_cb(uv_poll_t *h, int status, int events) {
    svc_kafka *k = h->data;
    drain_pipe(k->ppipe[0]);
    poll_producer(k);
}

static void timer_cb(uv_timer_t *t) {
    svc_kafka *k = t->data;
    poll_producer(k);
    poll_consumer(k);
    fetch_start(k); /* retries a failed read after its backoff */
}

static void ctimer_cb(uv_timer_t *t) { commit_send(t->data); }

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    svc_kafka *k = opaque;
    kpend *p = m->_private;
    if (m->err) {
        k->st.delivery_failed++;
        svc_log(SVC_LOG_ERROR, "delivery_failed", "topic=%s err=%s", rd_kafka_topic_name(m->rkt),
                rd_kafka_err2name(m->err));
    } else {
        k->st.delivered++;
    }
    if (p) {
        if (p->cb && !k->closing) p->cb(p->ud, m->err);
        free(p);
    }
}

/* ------------------------------------------------------------------------ */
/* setup and teardown */

static rd_kafka_t *make_client(svc_kafka *k, const svc_config *c, int consumer, char *err, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[512];
    /* Defaults first; every kafka.* key of the configuration overrides them. */
    const char *defs[][2] = {
        {"client.id", consumer ? "confkvd-consumer" : "confkvd-producer"},
        {"group.id", c->group},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"auto.offset.reset", "earliest"},
        {"statistics.interval.ms", "5000"},
        {"enable.idempotence", "true"},
        {"partitioner", "murmur2_random"},
        {"linger.ms", "2"},
        {"socket.nagle.disable", "true"}, /* small requests: no 40 ms delayed-ACK stalls */
        {"topic.metadata.refresh.interval.ms", "10000"},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        if (consumer ? in_list(producer_only, defs[i][0]) : in_list(consumer_only, defs[i][0])) continue;
        if (!consumer && !strcmp(defs[i][0], "statistics.interval.ms")) continue;
        if (rd_kafka_conf_set(conf, defs[i][0], defs[i][1], e, sizeof e) != RD_KAFKA_CONF_OK) {
            snprintf(err, errlen, "kafka default %s: %s", defs[i][0], e);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    conf_ctx cc = {conf, err, errlen, consumer};
    if (svc_config_each_kafka(c, conf_set_cb, &cc)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    /* Commits are ours (offset + redelivery mark, svc_kafka.h): librdkafka
     * must neither store nor commit offsets by itself. */
    static const char *forced[] = {"enable.auto.commit", "enable.auto.offset.store"};
    for (size_t i = 0; consumer && i < sizeof forced / sizeof forced[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "kafka.%s", forced[i]);
        const char *v = svc_config_get(c, key);
        if (v && strcmp(v, "false"))
            svc_log(SVC_LOG_WARN, "kafka_setting_ignored", "key=%s value=%s reason=\"confkvd commits offsets itself\"",
                    key, v);
        rd_kafka_conf_set(conf, forced[i], "false", e, sizeof e);
    }
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (consumer) {
        rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
        rd_kafka_conf_set_stats_cb(conf, stats_cb);
    } else {
        rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    }
    rd_kafka_t *rk = rd_kafka_new(consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf, e, sizeof e);
    if (!rk) { /* conf is still ours */
        rd_kafka_conf_destroy(conf);
        snprintf(err, errlen, "kafka %s: %s", consumer ? "consumer" : "producer", e);
    }
    return rk;
}

static int open_pipe(int fds[2]) { return pipe2(fds, O_NONBLOCK | O_CLOEXEC) ? CK_EIO : 0; }

int svc_kafka_new(uv_loop_t *loop, const svc_config *c, const svc_kafka_cbs *cbs, svc_kafka **out,
                  char *err, size_t errlen) {
    *out = NULL;
    if (!svc_config_get(c, "kafka.bootstrap.servers")) {
        snprintf(err, errlen, "no Kafka brokers: give --brokers HOST:PORT or --kafka-embedded");
        return CK_EINVAL;
    }
    svc_kafka *k = calloc(1, sizeof *k);
    if (!k) return CK_ENOMEM;
    k->loop = loop;
    k->cbs = *cbs;
    k->cpipe[0] = k->cpipe[1] = k->ppipe[0] = k->ppipe[1] = -1;
    if (!(k->topic = strdup(c->topic_jobs))) goto nomem;
    if (!(k->cons = make_client(k, c, 1, err, errlen))) goto fail;
    if (!(k->prod = make_client(k, c, 0, err, errlen))) goto fail;
    rd_kafka_poll_set_consumer(k->cons); /* main queue (stats, errors) into the consumer queue */
    k->cq = rd_kafka_queue_get_consumer(k->cons);
    k->pq = rd_kafka_queue_get_main(k->prod);
    if (!k->cq || !k->pq || open_pipe(k->cpipe) || open_pipe(k->ppipe)) {
        snprintf(err, errlen, "kafka: cannot set up event queues: %s", strerror(errno));
        goto fail;
    }
    rd_kafka_queue_io_event_enable(k->cq, k->cpipe[1], "c", 1);
    rd_kafka_queue_io_event_enable(k->pq, k->ppipe[1], "p", 1);
    uv_poll_init(loop, &k->cpoll, k->cpipe[0]);
    uv_poll_init(loop, &k->ppoll, k->ppipe[0]);
    uv_timer_init(loop, &k->timer);
    uv_timer_init(loop, &k->kick);
    uv_timer_init(loop, &k->ctimer);
    k->cpoll.data = k->ppoll.data = k->timer.data = k->kick.data = k->ctimer.data = k;
    k->handles_open = 5;
    uv_poll_start(&k->cpoll, UV_READABLE, cpoll_cb);
    uv_poll_start(&k->ppoll, UV_READABLE, ppoll_cb);
    uv_timer_start(&k->timer, timer_cb, SAFETY_POLL_MS, SAFETY_POLL_MS);
    /* kafka.auto.commit.interval.ms keeps its meaning: the commit period. */
    const char *ci = svc_config_get(c, "kafka.auto.commit.interval.ms");
    long ms = ci ? strtol(ci, NULL, 10) : COMMIT_INTERVAL_MS;
    if (ms <= 0 || ms > 3600000) ms = COMMIT_INTERVAL_MS;
    uv_timer_start(&k->ctimer, ctimer_cb, (uint64_t)ms, (uint64_t)ms);
    *out = k;
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    svc_kafka_free(k);
    return CK_EIO;
}

int svc_kafka_subscribe(svc_kafka *k, char *err, size_t errlen) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, k->topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->cons, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        snprintf(err, errlen, "subscribe %s: %s", k->topic, rd_kafka_err2str(e));
        return CK_EIO;
    }
    return 0;
}

int svc_kafka_produce(svc_kafka *k, const char *topic, const void *key, size_t klen, const void *val,
                      size_t vlen, rd_kafka_headers_t *headers, svc_kafka_dr_cb cb, void *ud) {
    kpend *p = malloc(sizeof *p);
    if (!p) {
        if (headers) rd_kafka_headers_destroy(headers);
        return CK_ENOMEM;
    }
    p->cb = cb;
    p->ud = ud;
    rd_kafka_resp_err_t e;
    if (headers)
        e = rd_kafka_producev(k->prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, klen),
                              RD_KAFKA_V_VALUE((void *)val, vlen), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_OPAQUE(p), RD_KAFKA_V_END);
    else
        e = rd_kafka_producev(k->prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, klen),
                              RD_KAFKA_V_VALUE((void *)val, vlen), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_OPAQUE(p), RD_KAFKA_V_END);
    if (e) {
        /* On failure the headers are still ours (librdkafka's producev contract). */
        if (headers) rd_kafka_headers_destroy(headers);
        free(p);
        svc_log(SVC_LOG_ERROR, "produce_failed", "topic=%s err=%s", topic, rd_kafka_err2name(e));
        return e == RD_KAFKA_RESP_ERR__QUEUE_FULL ? CK_EBUSY : e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? CK_ERANGE : CK_EIO;
    }
    k->st.produced++;
    return 0;
}

int svc_kafka_outq_len(svc_kafka *k) { return k->prod ? rd_kafka_outq_len(k->prod) : 0; }

void svc_kafka_get_stats(const svc_kafka *k, svc_kafka_stats *s) { *s = k->st; }

static void handle_closed(uv_handle_t *h) {
    svc_kafka *k = h->data;
    k->handles_open--;
}

void svc_kafka_close_handles(svc_kafka *k) {
    if (!k || !k->handles_open || k->handles_closing) return;
    k->handles_closing = 1;
    uv_close((uv_handle_t *)&k->ctimer, handle_closed);
    uv_close((uv_handle_t *)&k->cpoll, handle_closed);
    uv_close((uv_handle_t *)&k->ppoll, handle_closed);
    uv_close((uv_handle_t *)&k->timer, handle_closed);
    uv_close((uv_handle_t *)&k->kick, handle_closed);
}

void svc_kafka_free(svc_kafka *k) {
    if (!k) return;
    k->closing = 1;
    if (k->cq) {
        rd_kafka_queue_io_event_enable(k->cq, -1, NULL, 0);
        rd_kafka_queue_destroy(k->cq);
    }
    if (k->pq) {
        rd_kafka_queue_io_event_enable(k->pq, -1, NULL, 0);
        rd_kafka_queue_destroy(k->pq);
    }
    if (k->prod) {
        rd_kafka_flush(k->prod, 5000);
        rd_kafka_destroy(k->prod);
    }
    for (int i = 0; i < k->n_track; i++) hold_clear(&k->track[i]); /* before the consumer goes */
    if (k->cons) {
        /* Commit the done offsets with exact marks (nothing more is
         * dispatched), synchronously, then leave the group. */
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(k->n_track > 0 ? k->n_track : 1);
        for (int p = 0; l && p < k->n_track; p++) {
            ktrack *t = &k->track[p];
            if (t->assigned && t->known && t->next >= 0) add_commit(k, l, p, t, 1);
        }
        if (l && l->cnt) {
            rd_kafka_resp_err_t e = rd_kafka_commit(k->cons, l, 0);
            if (e) svc_log(SVC_LOG_WARN, "final_commit_failed", "err=%s", rd_kafka_err2name(e));
        }
        if (l) rd_kafka_topic_partition_list_destroy(l);
        rd_kafka_consumer_close(k->cons);
        rd_kafka_destroy(k->cons);
    }
    for (int i = 0; i < 2; i++) {
        if (k->cpipe[i] >= 0) close(k->cpipe[i]);
        if (k->ppipe[i] >= 0) close(k->ppipe[i]);
    }
    for (int i = 0; i < k->n_track; i++) {
        free(k->track[i].off);
        free(k->track[i].done);
        free(k->track[i].hold);
    }
    free(k->track);
    free(k->topic);
    free(k);
}
