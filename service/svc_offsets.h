/* svc_offsets.h - the consumer's offset bookkeeping, without Kafka: which
 * consumed offsets are done, the offset to commit, the dispatch marks by
 * which a later consumer tells a redelivered job, and the messages held
 * until a mark covers them. svc_kafka.h ("At-least-once", "Redelivery
 * marks") says why; svc_kafka.c drives this module from librdkafka's events
 * and does the I/O. No librdkafka or libuv type appears here, so
 * tests/test_svc_offsets.c runs it alone.
 *
 * Per partition p:
 *  - the ring: the offsets dispatched in this assignment, increasing, each
 *    with a done flag. The contiguous done prefix is popped; the offset to
 *    commit ("next") is the last popped + 1, the committed low-water mark.
 *    A dispatch at or below the newest offset in the ring (a re-fetch) and
 *    every assign/revoke clear it and bump its epoch, so done calls for
 *    older messages are ignored. The ring holds at most max_ring offsets; a
 *    message dispatched when it is full carries a stale epoch (its done is
 *    ignored: it is consumed again after a restart, as when memory runs out).
 *  - the marks: "acked", the mark the broker acknowledged (offsets below it
 *    may be dispatched), "mark", the highest asked for. A mark is asked for
 *    mark_ahead offsets past the offset in question, and asked for again
 *    when an offset gets within mark_ahead / 2 of it (want_mark: cbs.commit
 *    fires).
 *  - "known": the committed offset and the previous owners' mark were read
 *    (svc_offsets_committed). Until then every message is held.
 *  - the hold: messages not dispatchable yet, oldest first, as opaque
 *    pointers (svc_kafka.c's rd_kafka_message_t). The module owns a held
 *    message and hands it back exactly once, to cbs.dispatch or cbs.drop.
 *
 * Redelivered: a message is marked when its offset is below the previous
 * owners' mark or at/below the highest offset this assignment dispatched.
 *
 * Callbacks carry cbs.ud and fire synchronously, inside the call that causes
 * them; cbs.dispatch may call svc_offsets_done (a job finished at once).
 * Partitions are numbered 0..max_partition. One thread uses a table. */
#ifndef CK_SVC_OFFSETS_H
#define CK_SVC_OFFSETS_H
#include <stddef.h>
#include <stdint.h>

/* Identifies a dispatched message for svc_offsets_done. */
typedef struct svc_offsets_tok {
    int32_t partition;
    int64_t offset;
    uint32_t epoch;
    uint8_t redelivered; /* it may have been handed to a service before */
} svc_offsets_tok;

typedef struct svc_offsets_cbs {
    void *ud;
    /* Hand msg to the service; msg is the callee's from now on. */
    void (*dispatch)(void *ud, void *msg, svc_offsets_tok tok);
    /* A held message is let go (its partition was assigned again or revoked,
     * svc_offsets_drop_held, svc_offsets_free): free it. */
    void (*drop)(void *ud, void *msg);
    /* Stop (pause 1) fetching partition p: held messages reached hold_pause
     * (held = how many); or (pause 0) the hold emptied again. */
    void (*hold_pause)(void *ud, int32_t p, int pause, int held);
    /* A mark was asked for: send a commit (svc_offsets_commit_due). */
    void (*commit)(void *ud);
    /* (optional) A message the previous owners finished (their commit
     * metadata's finished set) is not dispatched: msg is the callee's (as
     * with dispatch), and its offset counts as done. NULL: cbs.drop. */
    void (*skip)(void *ud, void *msg, svc_offsets_tok tok);
} svc_offsets_cbs;

typedef struct svc_offsets_config {
    int mark_ahead;    /* 64 */
    int hold_pause;    /* held messages of a partition before it is paused (1024) */
    int max_partition; /* highest partition number (1000000) */
    int max_ring;      /* dispatched offsets tracked per partition (1 << 22) */
    /* Dispatch-ahead: a partition's dispatched jobs not done yet, at most;
     * its later messages are held meanwhile (a revoke drops them: the next
     * owner consumes them; it abandons only the dispatched ones). > 0: that
     * bound; 0: auto from dispatch_slots (the engine's sequences at once):
     * 2 * dispatch_slots / assigned partitions, at least 8; both 0 (the
     * default): no bound. */
    int dispatch_ahead;
    int dispatch_slots;
    svc_offsets_cbs cbs; /* dispatch, drop and commit required; hold_pause optional */
} svc_offsets_config;

typedef struct svc_offsets svc_offsets;

void svc_offsets_config_default(svc_offsets_config *c);
/* 0, CK_EINVAL (a bound < 1, mark_ahead < 2, dispatch_ahead or
 * dispatch_slots < 0, a required callback missing),
 * CK_ENOMEM. */
int svc_offsets_new(const svc_offsets_config *c, svc_offsets **out);
/* Drops the held messages (cbs.drop) and frees. Safe on NULL. */
void svc_offsets_free(svc_offsets *o);

/* Partitions 0..n-1 may have state (loops over every partition stop here). */
int svc_offsets_n(const svc_offsets *o);

/* Partition p was assigned (1) or revoked (0): fresh state either way, held
 * messages dropped (the next owner consumes them again), the ring's epoch
 * bumped. 0, CK_EINVAL (p out of range), CK_ENOMEM. */
int svc_offsets_assign(svc_offsets *o, int32_t p, int assigned);
int svc_offsets_assigned(const svc_offsets *o, int32_t p);
int svc_offsets_count_assigned(const svc_offsets *o);

/* Revoking, with a grace (svc_kafka.h, "Revoke"): svc_offsets_revoke_begin
 * drops p's held messages (never dispatched: the next owner consumes them)
 * and refuses its later messages (svc_offsets_consumed: CK_ESTATE), while
 * the ring, its epoch and the commits go on, so the dispatched jobs that
 * finish still move the offset to commit; svc_offsets_assign(p, 0) ends it.
 * CK_ESTATE when p is not assigned. svc_offsets_revoking: 1 in between.
 * svc_offsets_outstanding: p's dispatched offsets not done yet (those a
 * revoke would abandon). svc_offsets_uncommitted: what a next owner runs
 * again: those, and the done offsets above the offset to commit that its
 * metadata cannot carry (past SVC_OFFMD_DONE_MAX * 8 offsets). */
int svc_offsets_revoke_begin(svc_offsets *o, int32_t p);
int svc_offsets_revoking(const svc_offsets *o, int32_t p);
int svc_offsets_outstanding(const svc_offsets *o, int32_t p);
int svc_offsets_uncommitted(const svc_offsets *o, int32_t p);

/* A consumed message at offset off of p: dispatched now (cbs.dispatch) when
 * the acknowledged mark is above off and nothing is held before it, else
 * held. 0: msg taken; CK_ESTATE: p is not assigned; CK_ENOMEM: it could not
 * be held. On an error msg stays the caller's. */
int svc_offsets_consumed(svc_offsets *o, int32_t p, int64_t off, void *msg);

/* A dispatched message is handled. 1 when the offset to commit moved, 0
 * otherwise (a stale epoch, an offset not in the ring, a gap before it). */
int svc_offsets_done(svc_offsets *o, svc_offsets_tok tok);

/* Reading the committed offsets after an assignment. svc_offsets_unknown:
 * 1 when p is assigned and its committed offset not read yet, with the
 * assignment's generation in *agen. svc_offsets_wants: 1 when an answer
 * asked for under agen still applies. svc_offsets_committed applies one:
 * committed is the group's offset (< 0: none), prev_mark the previous
 * owners' mark (svc_offmd_parse; -1: none), done[0..done_bytes) their
 * finished set (svc_offmd.h: bit i, offset committed + i; NULL/0: none;
 * copied, at most SVC_OFFMD_DONE_MAX bytes, else ignored): those messages
 * go to cbs.skip instead of cbs.dispatch. Returns 1 when applied (held
 * messages may be dispatchable: svc_offsets_release), 0 when stale. */
int svc_offsets_unknown(const svc_offsets *o, int32_t p, uint32_t *agen);
int svc_offsets_wants(const svc_offsets *o, int32_t p, uint32_t agen);
int svc_offsets_committed(svc_offsets *o, int32_t p, uint32_t agen, int64_t committed, int64_t prev_mark,
                          const uint8_t *done, int done_bytes);

/* Dispatch, in order, every held message an acknowledged mark covers, as
 * far as dispatch-ahead allows. svc_offsets_releasable: 1 when p has such a
 * message now (after a done freed a place). svc_offsets_dispatch_bound: the
 * dispatch-ahead bound in force (INT32_MAX: none). */
void svc_offsets_release(svc_offsets *o);
int svc_offsets_releasable(const svc_offsets *o, int32_t p);
int svc_offsets_dispatch_bound(const svc_offsets *o);

/* The regular commit. svc_offsets_commit_due: 1 when p has an offset or a
 * mark to send, with them. svc_offsets_commit_sent: it went out (one commit
 * at a time: the broker never sees a mark go down). commit_unsent: it could
 * not be sent (retried by the next commit). commit_result: the broker's
 * answer for p (ok 1: the mark sent is acknowledged); returns 1 when held
 * messages may now be dispatchable. */
int svc_offsets_commit_due(const svc_offsets *o, int32_t p, int64_t *offset, int64_t *mark);
void svc_offsets_commit_sent(svc_offsets *o, int32_t p);
void svc_offsets_commit_unsent(svc_offsets *o, int32_t p);
int svc_offsets_commit_result(svc_offsets *o, int32_t p, int ok);
/* The last commit of p before dispatch stops (revoke, shutdown): 1 with the
 * offset and the exact mark (highest dispatched + 1, never below the
 * previous owners' mark or the offset), so a clean stop leaves no false
 * redelivery marks; 0 when there is nothing to commit. */
int svc_offsets_final(const svc_offsets *o, int32_t p, int64_t *offset, int64_t *mark);

/* The finished set to commit with offset base (svc_offmd.h): bit i of
 * bits[0..cap) set when base + i is done (a dispatched job finished, or in
 * the previous owners' set and not consumed yet); *nbytes: the bytes up to
 * the last set bit. Returns how many finished offsets did not fit. */
int svc_offsets_done_set(const svc_offsets *o, int32_t p, int64_t base, uint8_t *bits, int cap, int *nbytes);

/* The commit metadata of p for offset and mark (svc_offmd_format, with
 * svc_offsets_done_set's finished set) into buf (cap >= SVC_OFFMD_MAX):
 * its length or a negative code; *left_out: finished offsets that did not
 * fit (they run again at a next owner). */
int svc_offsets_metadata(const svc_offsets *o, int32_t p, int64_t offset, int64_t mark, char *buf, size_t cap,
                         int *left_out);

/* The group's committed offset of p as this consumer last knew it: read
 * after the assignment, then moved by acknowledged regular commits; -1
 * when none (or p is not assigned). What a next owner would start from,
 * should a later commit fail. */
int64_t svc_offsets_acked_offset(const svc_offsets *o, int32_t p);

/* 1 while p is paused because its hold is full. */
int svc_offsets_hold_paused(const svc_offsets *o, int32_t p);
/* Drop every held message (cbs.drop), before the messages' owner goes. */
void svc_offsets_drop_held(svc_offsets *o);

/* "confkv.mark=N" into buf (svc_offmd_format without a finished set): its
 * length, or CK_ETOOLONG (no NUL needed on the wire, but one is written). */
int svc_offsets_mark_format(char *buf, size_t cap, int64_t mark);
/* Commit metadata (n bytes, from the broker: any bytes) -> its mark N
 * (svc_offmd_parse); -1 for anything else (no mark, malformed metadata, or
 * another tool's). */
int64_t svc_offsets_mark_parse(const void *md, size_t n);

#endif
