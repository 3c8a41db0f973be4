/* svc_kafka.c - consumer + idempotent producer on a libuv loop (svc_kafka.h). */
#include "svc_kafka.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_err.h"
#include "svc_kstats.h"
#include "svc_log.h"
#include "svc_offmd.h"
#include "svc_offsets.h"

#define POLL_BUDGET 512           /* messages handled per wake-up before yielding */
#define SAFETY_POLL_MS 100        /* timer poll, in case an io event was missed */
#define COMMIT_INTERVAL_MS 1000   /* default period of the offset commit (kafka.auto.commit.interval.ms) */
#define COMMITTED_TIMEOUT_MS 5000 /* rd_kafka_committed, on a worker thread */
#define FETCH_RETRY_MS 1000       /* after a failed read of the committed offsets */

/* One produce in flight: the caller's callback. */
typedef struct kpend {
    svc_kafka_dr_cb cb;
    void *ud;
} kpend;

struct svc_kafka {
    uv_loop_t *loop;
    svc_kafka_cbs cbs;
    rd_kafka_t *cons, *prod;
    rd_kafka_queue_t *cq, *pq; /* consumer queue, producer main queue */
    int cpipe[2], ppipe[2];
    uv_poll_t cpoll, ppoll;
    uv_timer_t timer, kick;
    int handles_open;
    char *topic;      /* jobs topic */
    svc_offsets *off; /* per partition of the jobs topic: ring, marks, hold */
    int paused;
    int closing;         /* teardown: delivery reports no longer reach callers */
    int handles_closing; /* svc_kafka_close_handles was called */
    uv_timer_t ctimer;   /* offset commits */
    int commit_inflight, commit_again;
    /* Regular commits wait while the group rebalances. librdkafka 2.0.2
     * takes a commit answered ILLEGAL_GENERATION for a lost assignment even
     * in the middle of a rebalance (librdkafka #4059, fixed upstream by
     * #4908), and a commit sent after our JoinGroup is answered so once the
     * generation has moved on: every partition would be dropped and
     * assigned again. joining: from our JoinGroup request to the SyncGroup
     * response (set by interceptors on librdkafka's broker thread).
     * commit_hold: a commit was refused REBALANCE_IN_PROGRESS (the group
     * rebalances, our JoinGroup will follow), or our cooperative revoke
     * ended (librdkafka rejoins right after the assignment callback that
     * follows it: rejoin_next); cleared by the assignment that ends the
     * rebalance. */
    atomic_int joining;
    int commit_hold, rejoin_next;
    int fetch_inflight;   /* a rd_kafka_committed on the thread pool */
    uint64_t fetch_after; /* uv_now before which no new fetch starts (retry backoff) */
    int release;          /* held messages may be dispatchable */
    /* A revoke waiting for its partitions' dispatched jobs (svc_kafka.h,
     * "Revoke"): the partitions, whether the protocol is cooperative, when
     * it began and when the grace ends (uv_now). NULL when none. */
    rd_kafka_topic_partition_list_t *rv;
    int rv_coop;
    uint64_t rv_t0, rv_deadline;
    int revoke_grace_ms;
    /* Per partition: its acknowledged committed offset when its revoke
     * commit went out (-1: none), to count what a refused one leaves to the
     * next owner. n_racked entries. */
    int64_t *racked;
    int32_t n_racked;
    svc_offmd md; /* a committed read's metadata, parsed (too large for the stack of a callback) */
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

static const char *consumer_only[] = {"group.id",
                                      "enable.auto.commit",
                                      "enable.auto.offset.store",
                                      "auto.offset.reset",
                                      "auto.commit.interval.ms",
                                      "session.timeout.ms",
                                      "max.poll.interval.ms",
                                      "partition.assignment.strategy",
                                      "group.instance.id",
                                      "heartbeat.interval.ms",
                                      "isolation.level",
                                      NULL};
static const char *producer_only[] = {"enable.idempotence",
                                      "acks",
                                      "linger.ms",
                                      "partitioner",
                                      "compression.type",
                                      "message.timeout.ms",
                                      "retries",
                                      "queue.buffering.max.messages",
                                      "batch.size",
                                      NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return 1;
    return 0;
}

static int conf_set_cb(void *ud, const char *name, const char *value) {
    conf_ctx *c = ud;
    if (!strcmp(name, "transactional.id")) { /* produce outside a transaction would fail */
        snprintf(c->err, c->errlen, "kafka.transactional.id: exactly-once results are not implemented");
        return CK_EINVAL;
    }
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
    svc_log(level <= 3   ? SVC_LOG_ERROR
            : level <= 4 ? SVC_LOG_WARN
            : level <= 6 ? SVC_LOG_INFO
                         : SVC_LOG_DEBUG,
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

/* Interceptors on the consumer (librdkafka's broker thread: atomics only).
 * Protocol API keys: JoinGroup 11, SyncGroup 14. */
static rd_kafka_resp_err_t on_request_sent(rd_kafka_t *rk, int sockfd, const char *brokername,
                                           int32_t brokerid, int16_t ApiKey, int16_t ApiVersion,
                                           int32_t CorrId, size_t size, void *ic_opaque) {
    svc_kafka *k = ic_opaque;
    if (ApiKey == 11) atomic_store(&k->joining, 1);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_response_received(rd_kafka_t *rk, int sockfd, const char *brokername,
                                                int32_t brokerid, int16_t ApiKey, int16_t ApiVersion,
                                                int32_t CorrId, size_t size, int64_t rtt,
                                                rd_kafka_resp_err_t err, void *ic_opaque) {
    svc_kafka *k = ic_opaque;
    if (ApiKey == 14) atomic_store(&k->joining, 0); /* whatever its answer: a failed sync rejoins */
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
                                  size_t errstr_size) {
    rd_kafka_resp_err_t e =
        rd_kafka_interceptor_add_on_request_sent(rk, "confkv", on_request_sent, ic_opaque);
    if (!e) e = rd_kafka_interceptor_add_on_response_received(rk, "confkv", on_response_received, ic_opaque);
    if (e) snprintf(errstr, errstr_size, "interceptors: %s", rd_kafka_err2str(e));
    return e;
}

/* Statistics JSON (statistics.interval.ms): svc_kstats.h. */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    svc_kafka *k = opaque;
    svc_kstats_parse(json, len, k->topic, &k->st);
    return 0; /* librdkafka frees json */
}

/* ------------------------------------------------------------------------ */
/* offsets and marks (svc_offsets.h keeps the state; here are its effects) */

static void revoke_check(svc_kafka *k);

static void kick_cb(uv_timer_t *t);

void svc_kafka_done(svc_kafka *k, svc_ktok tok) {
    if (svc_offsets_done(k->off, tok)) k->st.stored++; /* committed by the commit timer (commit_send) */
    if (k->rv) revoke_check(k);                        /* its partition's last job, maybe */
    if (!k->handles_closing && svc_offsets_releasable(k->off, tok.partition)) {
        /* a place under dispatch_ahead: its held messages go on the next turn, not inside this call */
        k->release = 1;
        uv_timer_start(&k->kick, kick_cb, 0, 0);
    }
}

/* Append partition p's commit (next offset, mark as metadata) to l. */
static void add_commit(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int32_t p, int64_t offset,
                       int64_t mark) {
    char md[SVC_OFFMD_MAX];
    int left = 0, n = svc_offsets_metadata(k->off, p, offset, mark, md, sizeof md, &left);
    if (left) k->st.done_truncated++; /* those finished jobs run again at a next owner */
    rd_kafka_topic_partition_t *e = rd_kafka_topic_partition_list_add(l, k->topic, p);
    e->offset = offset;
    e->metadata = n > 0 ? malloc((size_t)n) : NULL; /* freed with the list */
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
        if (pe)
            svc_log(SVC_LOG_WARN, "commit_failed", "partition=%d offset=%lld err=%s", e->partition,
                    (long long)e->offset, rd_kafka_err2name(pe));
        if (pe == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS) k->commit_hold = 1;
        if (strcmp(e->topic, k->topic)) continue;
        if (!regular) {
            /* A revoke's commit refused: the finished jobs above the last
             * acknowledged offset, and those of its finished set, are done
             * again by the next owner (at most: the last acknowledged set
             * may hold some). */
            if (pe && e->partition >= 0 && e->partition < k->n_racked) {
                int64_t from = k->racked[e->partition] > 0 ? k->racked[e->partition] : 0;
                int64_t n = e->offset > from ? e->offset - from : 0, done = 0;
                const char *why;
                if (!svc_offmd_parse(e->metadata, e->metadata_size, &k->md, &why))
                    for (int b = 0; b < k->md.done_bytes * 8; b++) done += k->md.done[b / 8] >> (b % 8) & 1;
                k->st.revoke_uncommitted += (uint64_t)(n + done);
                if (n + done > 0)
                    svc_log(SVC_LOG_WARN, "revoke_commit_failed",
                            "partition=%d offset=%lld acked=%lld done=%lld err=%s", e->partition,
                            (long long)e->offset, (long long)k->racked[e->partition], (long long)done,
                            rd_kafka_err2name(pe));
            }
            continue;
        }
        /* held messages below an acknowledged mark may go (poll_consumer) */
        if (svc_offsets_commit_result(k->off, e->partition, pe == 0)) k->release = 1;
    }
    if (err == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS) k->commit_hold = 1;
    if (regular && k->commit_again && !k->commit_hold) {
        k->commit_again = 0;
        commit_send(k);
    }
}

/* Commit, asynchronously, every partition whose offset or mark moved. One
 * regular commit is in flight at a time, so the broker sees marks in the
 * order we asked for them (a later commit never lowers one). */
static void commit_send(svc_kafka *k) {
    if (k->closing || !k->cons) return;
    if (k->commit_inflight || k->commit_hold || atomic_load(&k->joining)) {
        k->commit_again = 1;
        return;
    }
    rd_kafka_topic_partition_list_t *l = NULL;
    for (int32_t p = 0; p < svc_offsets_n(k->off); p++) {
        int64_t offset, mark;
        if (!svc_offsets_commit_due(k->off, p, &offset, &mark)) continue;
        if (!l && !(l = rd_kafka_topic_partition_list_new(4))) return;
        add_commit(k, l, p, offset, mark);
        svc_offsets_commit_sent(k->off, p);
    }
    if (!l) return;
    rd_kafka_resp_err_t e = rd_kafka_commit_queue(k->cons, l, k->cq, commit_cb, k);
    if (e) {
        /* Not sent (no callback will come): the timer tries again. */
        svc_log(SVC_LOG_WARN, "commit_failed", "err=%s", rd_kafka_err2name(e));
        for (int i = 0; i < l->cnt; i++) svc_offsets_commit_unsent(k->off, l->elems[i].partition);
    } else {
        k->commit_inflight = 1;
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* ------------------------------------------------------------------------ */
/* dispatch and hold */

static void pause_list(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int pause) {
    rd_kafka_resp_err_t e =
        pause ? rd_kafka_pause_partitions(k->cons, l) : rd_kafka_resume_partitions(k->cons, l);
    if (e) svc_log(SVC_LOG_WARN, pause ? "pause_failed" : "resume_failed", "err=%s", rd_kafka_err2name(e));
}

static void pause_one(svc_kafka *k, int32_t p, int pause) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    if (!l) return;
    rd_kafka_topic_partition_list_add(l, k->topic, p);
    pause_list(k, l, pause);
    rd_kafka_topic_partition_list_destroy(l);
}

/* svc_offsets callbacks. */

/* Hand message msg (ours from now on) to the service. */
static void off_dispatch(void *ud, void *msg, svc_offsets_tok tok) {
    svc_kafka *k = ud;
    rd_kafka_message_t *m = msg;
    if (tok.redelivered) k->st.redelivered++;
    if (k->cbs.on_message) k->cbs.on_message(k->cbs.ud, m, tok);
    rd_kafka_message_destroy(m);
}

static void off_skip(void *ud, void *msg, svc_offsets_tok tok) {
    svc_kafka *k = ud;
    k->st.skipped_done++;
    rd_kafka_message_destroy(msg);
}

static void off_drop(void *ud, void *msg) {
    (void)ud;
    rd_kafka_message_destroy(msg);
}

static void off_hold_pause(void *ud, int32_t p, int pause, int held) {
    svc_kafka *k = ud;
    if (pause) {
        /* The mark is late (the coordinator is slow or away), or dispatch-ahead
         * is full (a backlog): stop fetching until the hold empties. */
        pause_one(k, p, 1);
        svc_log(SVC_LOG_WARN, "partition_held", "partition=%d held=%d", p, held);
    } else if (!k->paused) {
        pause_one(k, p, 0);
    }
}

static void off_commit(void *ud) { commit_send(ud); }

/* Dispatch the held messages that the acknowledged marks now cover. */
static void release_held(svc_kafka *k) {
    k->release = 0;
    if (k->handles_closing) return;
    svc_offsets_release(k->off);
}

/* A consumed message: dispatched now when the broker has a mark above its
 * offset, else held (in order) until it does. */
static void on_consumed(svc_kafka *k, rd_kafka_message_t *m) {
    int rc = svc_offsets_consumed(k->off, m->partition, m->offset, m);
    if (rc == CK_ESTATE) {
        /* Not (or no longer) ours: its owner consumes it. */
        svc_log(SVC_LOG_DEBUG, "message_dropped", "partition=%d offset=%lld", m->partition,
                (long long)m->offset);
        rd_kafka_message_destroy(m);
    } else if (rc) {
        svc_log(SVC_LOG_ERROR, "out_of_memory", "partition=%d offset=%lld", m->partition,
                (long long)m->offset);
        rd_kafka_message_destroy(m); /* never done: redelivered after a restart */
    }
}

/* ------------------------------------------------------------------------ */
/* committed offsets and marks, read on a worker thread after an assignment */

typedef struct kfetch {
    uv_work_t req;
    svc_kafka *k;
    rd_kafka_topic_partition_list_t *l;
    uint32_t *agen; /* per element: the partition's assignment generation when asked */
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
        if (!svc_offsets_wants(k->off, e->partition, f->agen[i])) continue;
        if (e->err) {
            svc_log(SVC_LOG_WARN, "committed_read_failed", "partition=%d err=%s", e->partition,
                    rd_kafka_err2name(e->err));
            failed = 1;
            continue;
        }
        const char *why;
        if (svc_offmd_parse(e->metadata, e->metadata_size, &k->md, &why)) /* no finished set then */
            svc_log(SVC_LOG_WARN, "commit_metadata_refused", "partition=%d reason=\"%s\"", e->partition, why);
        svc_log(SVC_LOG_INFO, "partition_committed", "partition=%d offset=%lld mark=%lld done_bytes=%d",
                e->partition, (long long)e->offset, (long long)k->md.mark, k->md.done_bytes);
        if (svc_offsets_committed(k->off, e->partition, f->agen[i], e->offset, k->md.mark, k->md.done,
                                  k->md.done_bytes))
            k->release = 1;
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
    uint32_t agen;
    for (int32_t p = 0; p < svc_offsets_n(k->off); p++) n += svc_offsets_unknown(k->off, p, &agen);
    if (!n) return;
    kfetch *f = calloc(1, sizeof *f);
    if (!f) return;
    f->k = k;
    f->l = rd_kafka_topic_partition_list_new(n);
    f->agen = malloc((size_t)n * sizeof *f->agen);
    if (!f->l || !f->agen) goto fail;
    for (int32_t p = 0; p < svc_offsets_n(k->off); p++) {
        if (!svc_offsets_unknown(k->off, p, &agen)) continue;
        f->agen[f->l->cnt] = agen;
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
        /* Partitions paused because their mark is late, or being revoked,
         * stay paused. */
        for (int i = l->cnt - 1; !pause && i >= 0; i--) {
            if (!strcmp(l->elems[i].topic, k->topic) &&
                (svc_offsets_hold_paused(k->off, l->elems[i].partition) ||
                 svc_offsets_revoking(k->off, l->elems[i].partition)))
                rd_kafka_topic_partition_list_del_by_idx(l, i);
        }
        if (l->cnt) pause_list(k, l, pause);
        rd_kafka_topic_partition_list_destroy(l);
    }
    svc_log(SVC_LOG_INFO, pause ? "consumer_paused" : "consumer_resumed", NULL);
}

static void mark(svc_kafka *k, rd_kafka_topic_partition_list_t *l, int assigned) {
    for (int i = 0; i < l->cnt; i++) {
        if (strcmp(l->elems[i].topic, k->topic)) continue;
        /* Fails only for a partition number past max_partition, or without
         * memory: the partition stays untracked, its messages dropped. */
        (void)svc_offsets_assign(k->off, l->elems[i].partition, assigned);
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
        int32_t p = parts->elems[i].partition;
        int64_t offset, mark;
        if (!svc_offsets_final(k->off, p, &offset, &mark)) continue;
        add_commit(k, l, p, offset, mark);
        if (p >= k->n_racked) {
            int32_t n = p + 1 > 2 * k->n_racked ? p + 1 : 2 * k->n_racked;
            int64_t *r = realloc(k->racked, (size_t)n * sizeof *r);
            if (!r) continue;
            for (int32_t j = k->n_racked; j < n; j++) r[j] = -1;
            k->racked = r;
            k->n_racked = n;
        }
        k->racked[p] = svc_offsets_acked_offset(k->off, p);
    }
    if (l->cnt) {
        /* The opaque is not k: commit_cb does not take it for the regular commit. */
        rd_kafka_resp_err_t e = rd_kafka_commit_queue(k->cons, l, k->cq, commit_cb, NULL);
        if (e) svc_log(SVC_LOG_WARN, "commit_failed", "err=%s on=revoke", rd_kafka_err2name(e));
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Give the revoked partitions in parts back to librdkafka: commit their
 * done offsets with the exact marks, forget them, unassign. */
static void revoke_finish(svc_kafka *k, rd_kafka_topic_partition_list_t *parts, int coop) {
    commit_revoked(k, parts); /* sent before the unassign, so before librdkafka's rejoin */
    k->commit_hold = 1;
    k->rejoin_next = coop && !rd_kafka_assignment_lost(k->cons);
    mark(k, parts, 0);
    /* librdkafka keeps a partition's pause across assignments: one given
     * back paused (by its revoke, a full hold or backpressure) would stay
     * so should it come back to us. */
    pause_list(k, parts, 0);
    if (coop) {
        rd_kafka_error_t *e = rd_kafka_incremental_unassign(k->cons, parts);
        if (e) {
            svc_log(SVC_LOG_WARN, "unassign_failed", "err=%s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    } else {
        rd_kafka_assign(k->cons, NULL);
    }
    k->st.assigned = svc_offsets_count_assigned(k->off);
}

/* The pending revoke (k->rv) ends: every dispatched job of its partitions
 * finished, or the grace ran out (forced), or another rebalance event came.
 * Jobs still running are abandoned to the next owner. */
static void revoke_end(svc_kafka *k, const char *why) {
    rd_kafka_topic_partition_list_t *l = k->rv;
    if (!l) return;
    k->rv = NULL;
    int abandoned = 0, rerun = 0;
    for (int i = 0; i < l->cnt; i++) {
        if (strcmp(l->elems[i].topic, k->topic)) continue;
        abandoned += svc_offsets_outstanding(k->off, l->elems[i].partition);
        rerun += svc_offsets_uncommitted(k->off, l->elems[i].partition);
    }
    k->st.revoke_abandoned += (uint64_t)abandoned;
    k->st.revoke_rerun += (uint64_t)rerun;
    revoke_finish(k, l, k->rv_coop);
    svc_log(abandoned ? SVC_LOG_WARN : SVC_LOG_INFO, "partitions_revoked",
            "count=%d total=%d waited_ms=%llu abandoned=%d rerun=%d end=%s", l->cnt, k->st.assigned,
            (unsigned long long)(uv_now(k->loop) - k->rv_t0), abandoned, rerun, why);
    rd_kafka_topic_partition_list_destroy(l);
}

/* Called when a job is done and by the timer: end the pending revoke once
 * its partitions have no job running, or at the grace limit. */
static void revoke_check(svc_kafka *k) {
    if (!k->rv) return;
    int left = 0;
    for (int i = 0; i < k->rv->cnt && !left; i++)
        if (!strcmp(k->rv->elems[i].topic, k->topic))
            left += svc_offsets_outstanding(k->off, k->rv->elems[i].partition);
    if (!left)
        revoke_end(k, "drained");
    else if (uv_now(k->loop) >= k->rv_deadline)
        revoke_end(k, "grace");
}

/* Revoked partitions: stop taking their jobs (paused; held messages
 * dropped, later ones refused), and give them back once the jobs already
 * dispatched have finished, or at revoke_grace_ms (revoke_check). The loop
 * keeps running meanwhile; librdkafka waits for our unassign call. */
static void revoke_begin(svc_kafka *k, rd_kafka_topic_partition_list_t *parts, int coop) {
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(parts);
    if (!l) {
        revoke_finish(k, parts, coop);
        return;
    }
    pause_list(k, l, 1);
    for (int i = 0; i < l->cnt; i++)
        if (!strcmp(l->elems[i].topic, k->topic))
            (void)svc_offsets_revoke_begin(k->off, l->elems[i].partition);
    k->rv = l;
    k->rv_coop = coop;
    k->rv_t0 = uv_now(k->loop);
    k->rv_deadline = k->rv_t0 + (uint64_t)k->revoke_grace_ms;
    k->st.revokes++;
    svc_log(SVC_LOG_INFO, "partitions_revoking", "count=%d grace_ms=%d", l->cnt, k->revoke_grace_ms);
    revoke_check(k); /* nothing running: at once */
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque) {
    svc_kafka *k = opaque;
    int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    /* librdkafka waits for the pending revoke's unassign before it moves
     * on; should anything come first, the revoke ends now, so the calls
     * reach librdkafka in the order of its events. */
    revoke_end(k, "rebalance");
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        /* The rebalance ended (joining says whether another began); but
         * after our revoke, librdkafka rejoins when this returns. */
        if (k->rejoin_next)
            k->rejoin_next = 0;
        else
            k->commit_hold = 0;
        mark(k, parts, 1);
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_assign(rk, parts);
            if (e) rd_kafka_error_destroy(e);
        } else {
            rd_kafka_assign(rk, parts);
        }
        if (k->paused && parts->cnt) pause_list(k, parts, 1);
        k->st.assigned = svc_offsets_count_assigned(k->off);
        svc_log(SVC_LOG_INFO, "partitions_assigned", "count=%d total=%d protocol=%s", parts->cnt,
                k->st.assigned, coop ? "cooperative" : "eager");
        if (!k->st.joined) svc_log(SVC_LOG_INFO, "group_joined", "partitions=%d", k->st.assigned);
        k->st.joined = 1;
        k->st.rebalances++;
        k->st.up = 1;
        k->fetch_after = 0;
        fetch_start(k); /* their messages are held until the marks are known */
        if (k->cbs.on_assign) k->cbs.on_assign(k->cbs.ud, k->st.assigned);
        commit_send(k); /* what waited for the rebalance to end */
    } else if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
        /* A plain rebalance keeps us a member (joined stays 1 while we
         * rejoin); a lost assignment (the group evicted us: session or poll
         * timeout) does not, and its partitions are another's already: no
         * grace. Neither in teardown (svc_kafka_free committed already). */
        int lost = rd_kafka_assignment_lost(rk);
        if (lost && k->st.joined) {
            k->st.joined = 0;
            svc_log(SVC_LOG_WARN, "group_left", "reason=assignment_lost partitions=%d", parts->cnt);
        }
        if (lost || k->closing || k->revoke_grace_ms <= 0) {
            revoke_finish(k, parts, coop);
            svc_log(SVC_LOG_INFO, "partitions_revoked", "count=%d total=%d waited_ms=0 end=%s", parts->cnt,
                    k->st.assigned,
                    lost         ? "lost"
                    : k->closing ? "close"
                                 : "no_grace");
        } else {
            revoke_begin(k, parts, coop);
        }
    } else {
        /* Any other rebalance error: librdkafka asks to clear the assignment. */
        svc_log(SVC_LOG_WARN, "rebalance_error", "err=%s", rd_kafka_err2name(err));
        mark(k, parts, 0);
        if (coop) {
            rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, parts);
            if (e) rd_kafka_error_destroy(e);
        } else {
            rd_kafka_assign(rk, NULL);
        }
        k->st.assigned = svc_offsets_count_assigned(k->off);
    }
}

/* ------------------------------------------------------------------------ */
/* polling */

static void drain_pipe(int fd) {
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {}
}

static void poll_producer(svc_kafka *k) { rd_kafka_poll(k->prod, 0); }

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
    fetch_start(k);  /* retries a failed read after its backoff */
    revoke_check(k); /* the grace limit */
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
        /* Incremental rebalancing: a member joining or leaving moves only
         * the partitions that change owner; the others keep running. */
        {"partition.assignment.strategy", "cooperative-sticky"},
        {"statistics.interval.ms", "1000"}, /* kafka_up and the lag within a second */
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
            svc_log(SVC_LOG_WARN, "kafka_setting_ignored",
                    "key=%s value=%s reason=\"confkvd commits offsets itself\"", key, v);
        rd_kafka_conf_set(conf, forced[i], "false", e, sizeof e);
    }
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (consumer) {
        rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
        rd_kafka_conf_interceptor_add_on_new(conf, "confkv", on_new, k);
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

int svc_kafka_new(uv_loop_t *loop, const svc_config *c, const svc_kafka_cbs *cbs, svc_kafka **out, char *err,
                  size_t errlen) {
    *out = NULL;
    if (!svc_config_get(c, "kafka.bootstrap.servers")) {
        snprintf(err, errlen, "no Kafka brokers: give --brokers HOST:PORT or --kafka-embedded");
        return CK_EINVAL;
    }
    svc_kafka *k = calloc(1, sizeof *k);
    if (!k) return CK_ENOMEM;
    k->loop = loop;
    k->cbs = *cbs;
    k->revoke_grace_ms = c->revoke_grace_ms;
    atomic_init(&k->joining, 0);
    k->cpipe[0] = k->cpipe[1] = k->ppipe[0] = k->ppipe[1] = -1;
    if (!(k->topic = strdup(c->topic_jobs))) goto nomem;
    svc_offsets_config oc;
    svc_offsets_config_default(&oc);
    if (c->mark_ahead >= 2) oc.mark_ahead = c->mark_ahead;
    oc.dispatch_ahead = c->dispatch_ahead > 0 ? c->dispatch_ahead : 0;
    oc.dispatch_slots = c->max_running > 0 ? c->max_running : 0;
    oc.cbs = (svc_offsets_cbs){k, off_dispatch, off_drop, off_hold_pause, off_commit, off_skip};
    if (svc_offsets_new(&oc, &k->off)) goto nomem;
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
        return e == RD_KAFKA_RESP_ERR__QUEUE_FULL          ? CK_EBUSY
               : e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? CK_ERANGE
                                                           : CK_EIO;
    }
    k->st.produced++;
    return 0;
}

int svc_kafka_commits_pending(svc_kafka *k) {
    if (!k->cons) return 0;
    int n = k->commit_inflight;
    int64_t offset, mark;
    for (int32_t p = 0; p < svc_offsets_n(k->off); p++)
        n += svc_offsets_commit_due(k->off, p, &offset, &mark);
    return n;
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
    if (k->cons)
        svc_log(SVC_LOG_INFO, "kafka_totals", "consumed=%llu skipped_done=%llu done_truncated=%llu",
                (unsigned long long)k->st.consumed, (unsigned long long)k->st.skipped_done,
                (unsigned long long)k->st.done_truncated);
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
    if (k->off) svc_offsets_drop_held(k->off); /* the messages are the consumer's: before it goes */
    if (k->cons) {
        /* Commit the done offsets with exact marks (nothing more is
         * dispatched), synchronously, then leave the group. */
        int np = k->off ? svc_offsets_n(k->off) : 0;
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(np > 0 ? np : 1);
        for (int32_t p = 0; l && p < np; p++) {
            int64_t offset, mark;
            if (svc_offsets_final(k->off, p, &offset, &mark)) add_commit(k, l, p, offset, mark);
        }
        if (l && l->cnt) {
            rd_kafka_resp_err_t e = rd_kafka_commit(k->cons, l, 0);
            if (e) svc_log(SVC_LOG_WARN, "final_commit_failed", "err=%s", rd_kafka_err2name(e));
        }
        if (l) rd_kafka_topic_partition_list_destroy(l);
        if (k->rv) {
            /* A revoke in its grace (the drain gave its jobs their time,
             * and the commit above has their offsets): give it back before
             * closing, so librdkafka is not left waiting for the call. */
            for (int i = 0; i < k->rv->cnt; i++)
                if (!strcmp(k->rv->elems[i].topic, k->topic))
                    (void)svc_offsets_assign(k->off, k->rv->elems[i].partition, 0);
            if (k->rv_coop) {
                rd_kafka_error_t *e = rd_kafka_incremental_unassign(k->cons, k->rv);
                if (e) rd_kafka_error_destroy(e);
            } else {
                rd_kafka_assign(k->cons, NULL);
            }
            rd_kafka_topic_partition_list_destroy(k->rv);
            k->rv = NULL;
        }
        rd_kafka_consumer_close(k->cons);
        rd_kafka_destroy(k->cons);
    }
    for (int i = 0; i < 2; i++) {
        if (k->cpipe[i] >= 0) close(k->cpipe[i]);
        if (k->ppipe[i] >= 0) close(k->ppipe[i]);
    }
    if (k->rv) rd_kafka_topic_partition_list_destroy(k->rv); /* no consumer was made */
    svc_offsets_free(k->off);
    free(k->racked);
    free(k->topic);
    free(k);
}
