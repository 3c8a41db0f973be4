/* svc_kafka.h - the service's Kafka clients on a libuv loop: one consumer
 * (the jobs topic, in a consumer group) and one idempotent producer.
 *
 * Loop integration. Both clients' queues signal a pipe
 * (rd_kafka_queue_io_event_enable) watched by a uv_poll_t, and a 100 ms timer
 * polls as a safety net; each wake-up drains the queues (up to a budget, then
 * it reschedules itself), so no call here ever blocks the loop. Delivery
 * reports, rebalances, statistics and errors are all served on the loop
 * thread.
 *
 * At-least-once. librdkafka neither stores nor commits offsets by itself
 * (enable.auto.commit=false, enable.auto.offset.store=false, forced): we
 * commit, asynchronously from the loop, every kafka.auto.commit.interval.ms
 * (default 1 s), on a revoke and (synchronously) in svc_kafka_free. The
 * offset committed for a partition is the next one after its contiguous done
 * prefix: svc_kafka_done is called when a job's result has been delivered;
 * the consumed offsets sit in an ordered ring with a done flag, and the done
 * prefix is popped. When a revoke completes (below, "Revoke") the ring is
 * cleared and its epoch bumped, so late svc_kafka_done calls for messages of
 * the old assignment are ignored.
 *
 * Redelivery marks. Kafka does not tell a consumer that a message was
 * consumed before, so every commit also carries, as the offset's metadata,
 * a dispatch mark "confkv.mark=N": no consumer of the group has handed a
 * message at offset >= N of that partition to the service. The invariant is
 * kept by committing the mark before dispatching: a consumed message at
 * offset o is handed over only once the broker has acknowledged a commit
 * with a mark > o; until then it is held (in order; the partition is paused
 * when hold_pause, 1024, messages are held). The mark is asked mark_ahead
 * (svc_config.h, 256) offsets ahead, and renewed when dispatch gets within
 * half of that, so dispatch normally never waits, not even while a
 * rebalance holds the commits back for a few seconds (below, "Commits in a
 * rebalance"); regular commits are sent one at a time, so the
 * broker never sees a mark go down while we dispatch. After an assignment,
 * the committed offset and mark are read (rd_kafka_committed, on libuv's
 * thread pool; the partition's messages are held meanwhile): a message at
 * an offset below the previous mark, or at/below one this consumer already
 * dispatched (a re-fetch), gets svc_ktok.redelivered = 1.
 * Finished offsets. The committed offset is the low-water mark, and jobs
 * finish out of order, so the metadata also carries the finished offsets
 * above it (svc_offmd.h: "confkv.mark=N;done.v1=<bitmap>"); a new owner
 * reads them with the mark and does not run those jobs (stats
 * skipped_done); a set cut to fit counts in done_truncated. Malformed
 * metadata is refused with a logged reason (no finished set then).
 * Dispatch-ahead: a partition has at most dispatch_ahead (svc_config.h)
 * jobs dispatched and not done; later ones wait in the hold, so a revoke
 * abandons at most that many (svc_kafka_done lets the next go, on the
 * next loop turn).
 * The bookkeeping (ring, marks, hold) is svc_offsets.h, a module without
 * Kafka types that this one drives; here are the clients and the I/O.
 * Guarantee: a job handed to the service before a crash, a rebalance or a
 * stop, and consumed again, is always marked. False positives: after a
 * crash, up to mark_ahead offsets past the last dispatched one per
 * partition, and jobs dispatched but not finished (their result may never
 * have been produced); after a revoke or a clean stop the mark committed is
 * exactly the highest dispatched offset + 1, so none beyond those. Marks
 * written by others (no "confkv.mark=" prefix) count as no mark.
 *
 * Rebalancing. partition.assignment.strategy defaults to cooperative-sticky
 * (kafka.partition.assignment.strategy overrides it): a rebalance revokes
 * only the partitions that move, and the others keep running through it.
 *
 * Revoke. A revoked partition is not given back at once: it is paused, its
 * held messages are dropped (never dispatched) and later ones refused, and
 * the jobs already dispatched get up to revoke_grace_ms (svc_config.h) to
 * finish; the regular commits go on. When the last has finished, or at the
 * grace limit, the done offset and exact mark are committed and the
 * partitions unassigned (rd_kafka_incremental_unassign, or rd_kafka_assign
 * NULL under an eager strategy). librdkafka's group waits for that call
 * (join state wait-unassign-call) while we keep polling, so the loop never
 * blocks: the callback only starts the revoke, the timer and
 * svc_kafka_done end it. Jobs still running at the limit are abandoned to
 * the next owner (svc_kafka_stats.revoke_abandoned): their late completions
 * are ignored (epoch), and they are computed twice (revoke_rerun: those,
 * and finished ones the metadata's set could not carry). Another rebalance event
 * meanwhile ends the pending revoke first, so librdkafka sees our calls in
 * the order of its events. A lost assignment (the group evicted us) and the
 * teardown give partitions back at once.
 *
 * Commits in a rebalance. Regular commits wait from our JoinGroup request
 * to the SyncGroup response (seen by librdkafka interceptors), after a
 * commit refused REBALANCE_IN_PROGRESS, and after our own revoke, until the
 * assignment that ends the rebalance: librdkafka 2.0.2 drops the whole
 * assignment when a commit sent during a rejoin comes back
 * ILLEGAL_GENERATION (librdkafka #4059). A revoke's own commit goes before
 * the unassign, hence before the rejoin; should the group refuse it (the
 * mock cluster refuses every commit while members join, where a real
 * broker takes the current generation's), the finished jobs above the last
 * acknowledged offset run again at the next owner
 * (svc_kafka_stats.revoke_uncommitted).
 *
 * Backpressure. svc_kafka_pause pauses every assigned partition (also ones
 * assigned later); polling goes on, so the group does not evict us.
 *
 * Ownership: svc_kafka_new copies what it needs from the config; messages
 * handed to on_message are borrowed for the call. Teardown in two steps:
 * svc_kafka_close_handles (uv handles; the loop must then run until they
 * are closed), then svc_kafka_free (commits the done offsets, leaves the
 * group and destroys both clients: this blocks, so call it after the loop). */
#ifndef CK_SVC_KAFKA_H
#define CK_SVC_KAFKA_H
#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "svc_config.h"
#include "svc_offsets.h"

/* Identifies a consumed message for svc_kafka_done: partition, offset,
 * epoch, and redelivered (it may have been handed to a service before, see
 * above). */
typedef svc_offsets_tok svc_ktok;

typedef struct svc_kafka_cbs {
    void *ud;
    /* A consumed job message (m->err == 0), borrowed for the call. The
     * callee must call svc_kafka_done(tok) exactly once, now or later. */
    void (*on_message)(void *ud, const rd_kafka_message_t *m, svc_ktok tok);
    /* The group gave us an assignment (n partitions, possibly 0): the
     * consumer has joined the group (svc_kafka_stats.joined turned 1). */
    void (*on_assign)(void *ud, int n);
} svc_kafka_cbs;

/* Delivery report of a produced message: err is 0 when the broker has it. */
typedef void (*svc_kafka_dr_cb)(void *ud, rd_kafka_resp_err_t err);

#define SVC_KAFKA_MAX_LAG_PARTS 256

typedef struct svc_kafka_stats {
    int up;              /* a broker connection is up */
    int joined;          /* a member of the group: a rebalance gave us an assignment, even an empty one
                     (librdkafka calls the rebalance callback for every completed rebalance); 0
                     before, and again after the assignment was lost (session timeout) until the
                     next one. Readiness is this, not holding partitions. */
    int assigned;        /* partitions assigned */
    uint64_t rebalances; /* assignments received */
    int paused;          /* partitions are paused */
    uint64_t consumed, produced, delivered, delivery_failed, stored;
    uint64_t redelivered;        /* dispatched with svc_ktok.redelivered set */
    uint64_t revokes;            /* revokes that waited for their partitions' jobs (revoke_grace_ms) */
    uint64_t revoke_abandoned;   /* jobs still running when such a revoke gave its partitions back */
    uint64_t revoke_rerun;       /* those, and finished ones the commit metadata's set could not carry: the
                              next owner runs them again */
    uint64_t revoke_uncommitted; /* finished jobs above the acknowledged offset, or in the finished set, when
                                    a revoke's commit was refused: the next owner runs them again (at most) */
    uint64_t skipped_done;       /* consumed messages not run: a previous owner's commit metadata lists them
                                    finished (svc_offmd.h) */
    uint64_t done_truncated;     /* commits whose finished set did not fit in the metadata */
    int n_lag;                   /* partitions with a known consumer lag */
    int32_t lag_partition[SVC_KAFKA_MAX_LAG_PARTS];
    int64_t lag[SVC_KAFKA_MAX_LAG_PARTS];
} svc_kafka_stats;

typedef struct svc_kafka svc_kafka;

int svc_kafka_new(uv_loop_t *loop, const svc_config *c, const svc_kafka_cbs *cbs, svc_kafka **out, char *err,
                  size_t errlen);
/* Subscribe to the jobs topic (consumption starts on the next poll). */
int svc_kafka_subscribe(svc_kafka *k, char *err, size_t errlen);
/* Produce one message; headers (may be NULL) are taken over in every case.
 * CK_ERANGE: over message.max.bytes; CK_EBUSY: the queue is full; CK_EIO.
 * cb fires exactly once (from the loop) unless this returns an error. */
int svc_kafka_produce(svc_kafka *k, const char *topic, const void *key, size_t klen, const void *val,
                      size_t vlen, rd_kafka_headers_t *headers, svc_kafka_dr_cb cb, void *ud);
/* A consumed message is handled (its result delivered, or dead-lettered). */
void svc_kafka_done(svc_kafka *k, svc_ktok tok);
/* Pause (1) or resume (0) consumption; idempotent. */
void svc_kafka_pause(svc_kafka *k, int pause);
/* Commits not yet acknowledged: in flight, or due (an offset or mark moved,
 * or a rebalance held them back). The shutdown waits for 0 before it stops,
 * so a stop in the middle of a rebalance still commits its finished jobs. */
int svc_kafka_commits_pending(svc_kafka *k);
/* Messages still waiting in the producer (for the shutdown flush). */
int svc_kafka_outq_len(svc_kafka *k);
void svc_kafka_get_stats(const svc_kafka *k, svc_kafka_stats *s);
void svc_kafka_close_handles(svc_kafka *k);
void svc_kafka_free(svc_kafka *k);

#endif
