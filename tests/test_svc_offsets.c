/* test_svc_offsets.c - the consumer's offset bookkeeping (svc_offsets.h),
 * without Kafka: a recorder stands in for svc_kafka.c's callbacks, and the
 * test plays the broker (answers to the committed-offset read, commit
 * acknowledgements).
 *
 *  - the committed low-water mark under done calls in every order, against
 *    a plain model (the first offset not done, or the last + 1);
 *  - dispatch marks: a message goes only below an acknowledged mark, the
 *    mark is asked mark_ahead ahead and renewed within mark_ahead / 2;
 *  - redelivery marking after an assignment with a previous mark, and after
 *    a re-fetch; revoke (late done calls ignored, held messages dropped
 *    exactly once, stale answers ignored);
 *  - a revoke with a grace: held messages dropped, later ones refused, the
 *    dispatched ones still finishing and moving the offset, outstanding
 *    counted against a plain model; the acknowledged committed offset;
 *  - the metadata string (ours vs others'), the ring bound, the hold bound;
 *  - the finished set in the metadata (svc_offmd.h): base64url against
 *    vectors from Python's base64.urlsafe_b64encode, malformed metadata
 *    refused with a reason, the set of a commit against a model of the
 *    done offsets, a next owner skipping exactly those, the cut at
 *    SVC_OFFMD_DONE_MAX bytes counted.
 * Messages are fake pointers (offset + 1), never dereferenced. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
#include "svc_offmd.h"
#include "svc_offsets.h"

#define MAXREC 4096

typedef struct rec {
    svc_offsets *o;
    int n_disp;
    svc_offsets_tok tok[MAXREC];
    void *msg[MAXREC];
    int n_drop;
    void *dropped[MAXREC];
    int commits;
    int pauses, resumes, last_held;
    int done_inline; /* call svc_offsets_done from inside dispatch */
    int n_skip;
    int64_t skipped[MAXREC];
} rec;

static void r_dispatch(void *ud, void *msg, svc_offsets_tok tok) {
    rec *r = ud;
    if (r->n_disp < MAXREC) {
        r->tok[r->n_disp] = tok;
        r->msg[r->n_disp] = msg;
    }
    r->n_disp++;
    if (r->done_inline) svc_offsets_done(r->o, tok);
}
static void r_drop(void *ud, void *msg) {
    rec *r = ud;
    if (r->n_drop < MAXREC) r->dropped[r->n_drop] = msg;
    r->n_drop++;
}
static void r_pause(void *ud, int32_t p, int pause, int held) {
    rec *r = ud;
    (void)p;
    if (pause)
        r->pauses++, r->last_held = held;
    else
        r->resumes++;
}
static void r_commit(void *ud) { ((rec *)ud)->commits++; }
static void r_skip(void *ud, void *msg, svc_offsets_tok tok) {
    rec *r = ud;
    (void)msg;
    if (r->n_skip < MAXREC) r->skipped[r->n_skip] = tok.offset;
    r->n_skip++;
}

static void *M(int64_t off) { return (void *)(intptr_t)(off + 1); }

static int g_dispatch_ahead, g_dispatch_slots; /* for the next setup */

static rec *setup(int mark_ahead, int hold_pause, int max_ring) {
    rec *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    svc_offsets_config c;
    svc_offsets_config_default(&c);
    if (mark_ahead) c.mark_ahead = mark_ahead;
    if (hold_pause) c.hold_pause = hold_pause;
    if (max_ring) c.max_ring = max_ring;
    c.dispatch_ahead = g_dispatch_ahead;
    c.dispatch_slots = g_dispatch_slots;
    c.cbs = (svc_offsets_cbs){r, r_dispatch, r_drop, r_pause, r_commit, r_skip};
    if (svc_offsets_new(&c, &r->o)) {
        free(r);
        return NULL;
    }
    return r;
}
static void teardown(rec *r) {
    if (!r) return;
    svc_offsets_free(r->o);
    free(r);
}

/* The broker acknowledges the commit due for p (if any): returns its mark,
 * or -1 when none was due. */
static int64_t ack(rec *r, int32_t p) {
    int64_t off, mark;
    if (!svc_offsets_commit_due(r->o, p, &off, &mark)) return -1;
    svc_offsets_commit_sent(r->o, p);
    if (svc_offsets_commit_result(r->o, p, 1)) svc_offsets_release(r->o);
    return mark;
}

/* The offset a regular commit would carry for p (-1: none due). */
static int64_t next_of(const rec *r, int32_t p) {
    int64_t off, mark;
    return svc_offsets_final(r->o, p, &off, &mark) ? off : -1;
}

/* Assign p and answer the committed read at once. */
static int assign_known(rec *r, int32_t p, int64_t committed, int64_t prev_mark) {
    uint32_t agen = 0;
    if (svc_offsets_assign(r->o, p, 1) || !svc_offsets_unknown(r->o, p, &agen)) return 0;
    return svc_offsets_committed(r->o, p, agen, committed, prev_mark, NULL, 0) == 1;
}

static void test_config(void) {
    svc_offsets_config c;
    svc_offsets_config_default(&c);
    CK_CHECK(c.mark_ahead == 64 && c.hold_pause == 1024 && c.max_partition == 1000000);
    svc_offsets *o = NULL;
    CK_CHECK(svc_offsets_new(&c, &o) == CK_EINVAL && !o); /* no callbacks */
    rec r = {0};
    c.cbs = (svc_offsets_cbs){&r, r_dispatch, r_drop, NULL, r_commit, NULL};
    c.mark_ahead = 1;
    CK_CHECK(svc_offsets_new(&c, &o) == CK_EINVAL);
    c.mark_ahead = 64;
    CK_CHECK(svc_offsets_new(&c, &o) == 0 && o);
    CK_CHECK(svc_offsets_n(o) == 0 && svc_offsets_count_assigned(o) == 0);
    svc_offsets_free(o);
    svc_offsets_free(NULL);
}

/* Offsets 100, 101, 103, ... (gaps, as a compacted topic has), done in a
 * random order; after each done the committed offset must be the last
 * offset of the contiguous done prefix + 1 (the committed one while none
 * is done). */
static void test_low_water(void) {
    rec *r = setup(0, 0, 0);
    CK_CHECK(r);
    CK_CHECK(assign_known(r, 0, 100, -1));
    enum { N = 300 };
    int64_t off[N];
    for (int i = 0, o = 100; i < N; i++, o += 1 + (i % 3 == 0)) off[i] = o;
    CK_CHECK(svc_offsets_consumed(r->o, 0, off[0], M(off[0])) == 0);
    CK_CHECK(r->n_disp == 0); /* no acknowledged mark yet */
    CK_CHECK(ack(r, 0) == off[0] + 64 && r->n_disp == 1);
    for (int i = 1; i < N; i++) {
        CK_CHECK(svc_offsets_consumed(r->o, 0, off[i], M(off[i])) == 0);
        ack(r, 0); /* keep the mark ahead */
    }
    CK_CHECK_MSG(r->n_disp == N, "%d dispatched", r->n_disp);
    for (int i = 0; i < N; i++)
        CK_CHECK(r->tok[i].offset == off[i] && r->msg[i] == M(off[i]) && !r->tok[i].redelivered);
    int order[N], done[N] = {0};
    for (int i = 0; i < N; i++) order[i] = i;
    srand(7);
    for (int i = N - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int64_t expect_prev = 100;
    for (int s = 0; s < N; s++) {
        int i = order[s];
        done[i] = 1;
        int first = 0;
        while (first < N && done[first]) first++;
        int64_t expect = first == 0 ? 100 : off[first - 1] + 1; /* across a gap: the last done + 1 */
        int moved = svc_offsets_done(r->o, r->tok[i]);
        CK_CHECK_MSG(moved == (expect != expect_prev), "step %d: moved %d", s, moved);
        CK_CHECK_MSG(next_of(r, 0) == expect, "step %d: next %lld, want %lld", s, (long long)next_of(r, 0),
                     (long long)expect);
        expect_prev = expect;
    }
    /* a second done, and one for an offset never dispatched, change nothing */
    CK_CHECK(svc_offsets_done(r->o, r->tok[5]) == 0);
    svc_offsets_tok ghost = r->tok[0];
    ghost.offset = 103; /* a gap: never dispatched */
    CK_CHECK(svc_offsets_done(r->o, ghost) == 0 && next_of(r, 0) == off[N - 1] + 1);
    int64_t o2, m2;
    CK_CHECK(svc_offsets_commit_due(r->o, 0, &o2, &m2) && o2 == off[N - 1] + 1);
    teardown(r);
}

/* When a message may go, when a mark is asked for and renewed. */
static void test_marks(void) {
    rec *r = setup(64, 0, 0);
    CK_CHECK(r);
    CK_CHECK(svc_offsets_assign(r->o, 3, 1) == 0);
    uint32_t agen;
    CK_CHECK(svc_offsets_unknown(r->o, 3, &agen));
    /* unknown committed offset: held, no mark asked */
    CK_CHECK(svc_offsets_consumed(r->o, 3, 0, M(0)) == 0);
    CK_CHECK(r->n_disp == 0 && r->commits == 0);
    int64_t o, m;
    CK_CHECK(!svc_offsets_commit_due(r->o, 3, &o, &m));
    /* no committed offset in the group: start at the first held one */
    CK_CHECK(svc_offsets_committed(r->o, 3, agen, -1, -1, NULL, 0) == 1);
    CK_CHECK(!svc_offsets_unknown(r->o, 3, &agen));
    CK_CHECK(r->commits == 1 && r->n_disp == 0);
    svc_offsets_release(r->o);
    CK_CHECK(r->n_disp == 0); /* not acknowledged yet */
    CK_CHECK(svc_offsets_commit_due(r->o, 3, &o, &m) && o == 0 && m == 64);
    svc_offsets_commit_sent(r->o, 3);
    /* still due until acknowledged (svc_kafka.c sends one commit at a time) */
    CK_CHECK(svc_offsets_commit_due(r->o, 3, &o, &m) && m == 64);
    CK_CHECK(svc_offsets_commit_result(r->o, 3, 1) == 1);
    svc_offsets_release(r->o);
    CK_CHECK(r->n_disp == 1 && r->tok[0].offset == 0 && r->tok[0].partition == 3);
    /* 1..31 go at once, asking nothing: still more than 32 below the mark */
    for (int64_t i = 1; i < 32; i++) CK_CHECK(svc_offsets_consumed(r->o, 3, i, M(i)) == 0);
    CK_CHECK(r->n_disp == 32 && r->commits == 1);
    /* 32 is within 32 of 64: it goes, and the mark is renewed to 96 */
    CK_CHECK(svc_offsets_consumed(r->o, 3, 32, M(32)) == 0);
    CK_CHECK(r->n_disp == 33 && r->commits == 2);
    CK_CHECK(svc_offsets_commit_due(r->o, 3, &o, &m) && m == 96);
    svc_offsets_commit_sent(r->o, 3);
    /* not acknowledged yet: 33..63 still go (below 64), 64 is held */
    for (int64_t i = 33; i < 64; i++) CK_CHECK(svc_offsets_consumed(r->o, 3, i, M(i)) == 0);
    CK_CHECK(r->n_disp == 64 && r->commits == 2);
    CK_CHECK(svc_offsets_consumed(r->o, 3, 64, M(64)) == 0);
    CK_CHECK(r->n_disp == 64);
    /* 65 is held behind 64 (order kept) */
    CK_CHECK(svc_offsets_consumed(r->o, 3, 65, M(65)) == 0 && r->n_disp == 64);
    /* a failed commit: sent again, nothing released */
    CK_CHECK(svc_offsets_commit_result(r->o, 3, 0) == 0);
    CK_CHECK(svc_offsets_commit_due(r->o, 3, &o, &m) && m == 96 + 32);
    svc_offsets_commit_sent(r->o, 3);
    CK_CHECK(svc_offsets_commit_result(r->o, 3, 1) == 1);
    svc_offsets_release(r->o);
    CK_CHECK(r->n_disp == 66 && r->tok[64].offset == 64 && r->tok[65].offset == 65);
    for (int i = 0; i < 66; i++) CK_CHECK(!r->tok[i].redelivered);
    teardown(r);
}

/* After an assignment whose previous owners marked offset 8: 5..7 are
 * redelivered, 8 and 9 are not; a re-fetch marks what we dispatched. */
static void test_redelivery(void) {
    rec *r = setup(64, 0, 0);
    CK_CHECK(r);
    CK_CHECK(svc_offsets_assign(r->o, 1, 1) == 0);
    for (int64_t i = 5; i < 10; i++) CK_CHECK(svc_offsets_consumed(r->o, 1, i, M(i)) == 0);
    uint32_t agen;
    CK_CHECK(svc_offsets_unknown(r->o, 1, &agen));
    CK_CHECK(svc_offsets_committed(r->o, 1, agen, 5, svc_offsets_mark_parse("confkv.mark=8", 13), NULL, 0) ==
             1);
    /* the mark acknowledged is the previous one (8): 5..7 go at once */
    svc_offsets_release(r->o);
    CK_CHECK(r->n_disp == 3);
    for (int i = 0; i < 3; i++) CK_CHECK(r->tok[i].offset == 5 + i && r->tok[i].redelivered == 1);
    /* a mark above the held ones was asked for (9 + 64) */
    int64_t o, m;
    CK_CHECK(svc_offsets_commit_due(r->o, 1, &o, &m) && o == 5 && m == 73);
    CK_CHECK(ack(r, 1) == 73);
    CK_CHECK(r->n_disp == 5 && r->tok[3].offset == 8 && r->tok[4].offset == 9);
    CK_CHECK(!r->tok[3].redelivered && !r->tok[4].redelivered);
    CK_CHECK(svc_offsets_consumed(r->o, 1, 10, M(10)) == 0 && r->n_disp == 6 && !r->tok[5].redelivered);
    /* re-fetch (a seek back): 9 again is marked, the ring starts over */
    svc_offsets_tok old9 = r->tok[4], old10 = r->tok[5];
    CK_CHECK(svc_offsets_consumed(r->o, 1, 9, M(9)) == 0 && r->n_disp == 7);
    CK_CHECK(r->tok[6].offset == 9 && r->tok[6].redelivered && r->tok[6].epoch != old9.epoch);
    CK_CHECK(svc_offsets_consumed(r->o, 1, 10, M(10)) == 0 && r->tok[7].redelivered);
    CK_CHECK(svc_offsets_consumed(r->o, 1, 11, M(11)) == 0 && !r->tok[8].redelivered);
    /* the old ring's done calls are ignored: 5..8 were never done */
    CK_CHECK(svc_offsets_done(r->o, old9) == 0 && svc_offsets_done(r->o, old10) == 0);
    CK_CHECK(next_of(r, 1) == 5);
    CK_CHECK(svc_offsets_done(r->o, r->tok[6]) == 1 && next_of(r, 1) == 10);
    /* exact final mark: highest dispatched + 1 */
    CK_CHECK(svc_offsets_final(r->o, 1, &o, &m) && o == 10 && m == 12);
    teardown(r);
}

/* Revoke: held messages dropped once, late done calls and stale answers
 * ignored, nothing to commit; assigned again: a fresh state. */
static void test_revoke(void) {
    rec *r = setup(64, 0, 0);
    CK_CHECK(r);
    CK_CHECK(assign_known(r, 2, 0, -1));
    CK_CHECK(svc_offsets_consumed(r->o, 2, 0, M(0)) == 0);
    ack(r, 2);
    for (int64_t i = 1; i < 5; i++) CK_CHECK(svc_offsets_consumed(r->o, 2, i, M(i)) == 0);
    CK_CHECK(r->n_disp == 5);
    /* 64..66 held (mark 64 acknowledged, renewal not yet) */
    for (int64_t i = 64; i < 67; i++) CK_CHECK(svc_offsets_consumed(r->o, 2, i, M(i)) == 0);
    CK_CHECK(r->n_disp == 5);
    int64_t o, m;
    CK_CHECK(svc_offsets_commit_due(r->o, 2, &o, &m));
    svc_offsets_commit_sent(r->o, 2); /* in flight across the revoke */
    CK_CHECK(svc_offsets_final(r->o, 2, &o, &m) && o == 0 && m == 5);
    CK_CHECK(svc_offsets_assign(r->o, 2, 0) == 0);
    CK_CHECK(!svc_offsets_assigned(r->o, 2) && svc_offsets_count_assigned(r->o) == 0);
    CK_CHECK(r->n_drop == 3 && r->dropped[0] == M(64) && r->dropped[1] == M(65) && r->dropped[2] == M(66));
    for (int i = 0; i < 5; i++) CK_CHECK(svc_offsets_done(r->o, r->tok[i]) == 0);
    CK_CHECK(!svc_offsets_commit_due(r->o, 2, &o, &m) && !svc_offsets_final(r->o, 2, &o, &m));
    CK_CHECK(svc_offsets_commit_result(r->o, 2, 1) == 0); /* the old commit's answer */
    CK_CHECK(svc_offsets_consumed(r->o, 2, 67, M(67)) == CK_ESTATE);
    /* assigned again; the answer asked under the old assignment is stale */
    uint32_t agen_old;
    CK_CHECK(svc_offsets_assign(r->o, 2, 1) == 0 && svc_offsets_unknown(r->o, 2, &agen_old));
    CK_CHECK(svc_offsets_assign(r->o, 2, 1) == 0); /* again (a rebalance in between) */
    uint32_t agen;
    CK_CHECK(svc_offsets_unknown(r->o, 2, &agen) && agen != agen_old);
    CK_CHECK(!svc_offsets_wants(r->o, 2, agen_old));
    CK_CHECK(svc_offsets_committed(r->o, 2, agen_old, 3, 5, NULL, 0) == 0);
    CK_CHECK(svc_offsets_committed(r->o, 2, agen, 3, 5, NULL, 0) == 1);
    /* the previous owner (us) marked 5: 3 and 4 come back redelivered */
    CK_CHECK(svc_offsets_consumed(r->o, 2, 3, M(3)) == 0 && svc_offsets_consumed(r->o, 2, 5, M(5)) == 0);
    CK_CHECK(r->n_disp == 6 && r->tok[5].offset == 3 && r->tok[5].redelivered);
    for (int i = 0; i < 5; i++) CK_CHECK(svc_offsets_done(r->o, r->tok[i]) == 0); /* still the old epoch */
    CK_CHECK(next_of(r, 2) == 3);
    CK_CHECK(svc_offsets_done(r->o, r->tok[5]) == 1 && next_of(r, 2) == 4);
    /* a done call from inside dispatch (a job finished at once) */
    r->done_inline = 1;
    CK_CHECK(ack(r, 2) > 5 && r->n_disp == 7 && r->tok[6].offset == 5 && !r->tok[6].redelivered);
    /* 4 was never consumed (a gap): the ring holds dispatched offsets only */
    CK_CHECK(next_of(r, 2) == 6);
    teardown(r);
}

static void test_mark_strings(void) {
    char b[48];
    CK_CHECK(svc_offsets_mark_format(b, sizeof b, 123) == 15 && !strcmp(b, "confkv.mark=123"));
    CK_CHECK(svc_offsets_mark_format(b, 15, 123) == CK_ETOOLONG);
    CK_CHECK(svc_offsets_mark_format(b, sizeof b, 0) == 13 && !strcmp(b, "confkv.mark=0"));
    CK_CHECK(svc_offsets_mark_parse(b, 13) == 0);
    struct {
        const char *s;
        int64_t v;
    } cases[] = {
        {"confkv.mark=123", 123},
        {"confkv.mark=0", 0},
        {"confkv.mark=922337203685477580", 922337203685477580LL},
        {"confkv.mark=9223372036854775799", 9223372036854775799LL}, /* the largest taken */
        {"confkv.mark=9223372036854775800", -1}, /* refused: the check before the last digit is coarse */
        {"confkv.mark=9223372036854775807", -1},
        {"confkv.mark=99999999999999999999", -1}, /* 20 digits */
        {"confkv.mark=", -1},
        {"confkv.mark=12a", -1},
        {"confkv.mark=-5", -1},
        {"confkv.mark= 5", -1},
        {"confkv.mark5", -1},
        {"other.mark=5", -1},
        {"", -1},
        {"kafka-streams metadata", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CK_CHECK_MSG(svc_offsets_mark_parse(cases[i].s, strlen(cases[i].s)) == cases[i].v, "'%s'",
                     cases[i].s);
    CK_CHECK(svc_offsets_mark_parse(NULL, 5) == -1);
    /* not NUL-terminated: only n bytes are read */
    char raw[16];
    memcpy(raw, "confkv.mark=42xx", 16);
    CK_CHECK(svc_offsets_mark_parse(raw, 14) == 42 && svc_offsets_mark_parse(raw, 16) == -1);
    CK_CHECK(svc_offsets_mark_parse("confkv.mark=4\0"
                                    "2",
                                    15) == -1); /* an embedded NUL */
}

/* The ring holds max_ring offsets: past it a message still goes, but its
 * done is ignored (stale epoch); partitions past max_partition are refused;
 * the hold pauses its partition at hold_pause and resumes when it empties. */
static void test_bounds(void) {
    rec *r = setup(64, 3, 4);
    CK_CHECK(r);
    CK_CHECK(assign_known(r, 0, 0, 1000)); /* a previous mark far ahead: dispatch at once */
    for (int64_t i = 0; i < 5; i++) CK_CHECK(svc_offsets_consumed(r->o, 0, i, M(i)) == 0);
    CK_CHECK(r->n_disp == 5);
    for (int i = 0; i < 4; i++) CK_CHECK(r->tok[i].epoch == r->tok[0].epoch);
    CK_CHECK(r->tok[4].epoch != r->tok[0].epoch); /* ring full: untracked */
    for (int i = 0; i < 4; i++) svc_offsets_done(r->o, r->tok[i]);
    CK_CHECK(next_of(r, 0) == 4);
    CK_CHECK(svc_offsets_done(r->o, r->tok[4]) == 0 && next_of(r, 0) == 4);
    /* room again once popped */
    CK_CHECK(svc_offsets_consumed(r->o, 0, 5, M(5)) == 0 && r->tok[5].epoch == r->tok[0].epoch);
    /* partitions */
    CK_CHECK(svc_offsets_assign(r->o, -1, 1) == CK_EINVAL);
    CK_CHECK(svc_offsets_assign(r->o, 1000001, 1) == CK_EINVAL);
    CK_CHECK(svc_offsets_consumed(r->o, 999, 0, M(0)) == CK_ESTATE);
    CK_CHECK(svc_offsets_consumed(r->o, -3, 0, M(0)) == CK_ESTATE);
    CK_CHECK(svc_offsets_done(r->o, (svc_offsets_tok){-3, 0, 0, 0}) == 0);
    svc_offsets_commit_unsent(r->o, 999999); /* no state: nothing */
    CK_CHECK(svc_offsets_assign(r->o, 7, 1) == 0 && svc_offsets_n(r->o) >= 8);
    /* the hold: paused at 3 held, once; resumed when released */
    for (int64_t i = 0; i < 4; i++) CK_CHECK(svc_offsets_consumed(r->o, 7, i, M(i)) == 0);
    CK_CHECK(r->pauses == 1 && r->last_held == 3 && svc_offsets_hold_paused(r->o, 7));
    uint32_t agen;
    CK_CHECK(svc_offsets_unknown(r->o, 7, &agen) &&
             svc_offsets_committed(r->o, 7, agen, 0, -1, NULL, 0) == 1);
    int before = r->n_disp;
    CK_CHECK(ack(r, 7) == 3 + 64);
    CK_CHECK(r->n_disp == before + 4 && r->resumes == 1 && !svc_offsets_hold_paused(r->o, 7));
    /* drop_held: each held message handed back once */
    CK_CHECK(svc_offsets_assign(r->o, 4, 1) == 0);
    for (int64_t i = 0; i < 70; i++) CK_CHECK(svc_offsets_consumed(r->o, 4, i, M(i)) == 0);
    int drops = r->n_drop;
    svc_offsets_drop_held(r->o);
    CK_CHECK(r->n_drop == drops + 70);
    for (int i = 0; i < 70; i++) CK_CHECK(r->dropped[drops + i] == M(i));
    svc_offsets_drop_held(r->o);
    CK_CHECK(r->n_drop == drops + 70);
    /* free drops what is still held */
    CK_CHECK(svc_offsets_consumed(r->o, 4, 70, M(70)) == 0);
    svc_offsets_free(r->o);
    r->o = NULL;
    CK_CHECK(r->n_drop == drops + 71);
    teardown(r);
}

/* Revoke with a grace (svc_offsets_revoke_begin): nothing more is
 * dispatched, held messages go back, the dispatched jobs still finish and
 * move the offset to commit; outstanding follows a plain count. */
static void test_revoke_grace(void) {
    rec *r = setup(8, 0, 0);
    CK_CHECK(r);
    CK_CHECK(svc_offsets_revoke_begin(r->o, 2) == CK_ESTATE); /* never assigned */
    CK_CHECK(assign_known(r, 2, 10, -1));
    CK_CHECK(svc_offsets_acked_offset(r->o, 2) == 10); /* the group's offset as read */
    for (int64_t off = 10; off < 14; off++) CK_CHECK(svc_offsets_consumed(r->o, 2, off, M(off)) == 0);
    CK_CHECK(ack(r, 2) == 18 && r->n_disp == 4);
    /* 18 and 19 are held (not below the acknowledged mark 18) */
    CK_CHECK(svc_offsets_consumed(r->o, 2, 18, M(18)) == 0 && svc_offsets_consumed(r->o, 2, 19, M(19)) == 0);
    CK_CHECK(r->n_disp == 4 && svc_offsets_outstanding(r->o, 2) == 4);
    CK_CHECK(svc_offsets_done(r->o, r->tok[1]) == 0); /* 11: a gap at 10 */
    CK_CHECK(svc_offsets_outstanding(r->o, 2) == 3);
    CK_CHECK(svc_offsets_done(r->o, r->tok[0]) == 1 && next_of(r, 2) == 12);

    CK_CHECK(!svc_offsets_revoking(r->o, 2));
    CK_CHECK(svc_offsets_revoke_begin(r->o, 2) == 0 && svc_offsets_revoking(r->o, 2));
    CK_CHECK(r->n_drop == 2 && r->dropped[0] == M(18) && r->dropped[1] == M(19));
    /* commits go on (the mark asked for 18 and 19 too); an acknowledged
     * one moves the known committed offset and releases nothing */
    CK_CHECK(ack(r, 2) == 26 && svc_offsets_acked_offset(r->o, 2) == 12 && r->n_disp == 4);
    /* later messages are refused (the caller frees them), none dispatched */
    CK_CHECK(svc_offsets_consumed(r->o, 2, 14, M(14)) == CK_ESTATE);
    svc_offsets_release(r->o);
    CK_CHECK(r->n_disp == 4 && svc_offsets_outstanding(r->o, 2) == 2);
    /* the running jobs finish: the offset still moves, as do commits */
    CK_CHECK(svc_offsets_uncommitted(r->o, 2) == 2);
    CK_CHECK(svc_offsets_done(r->o, r->tok[3]) == 0 && svc_offsets_outstanding(r->o, 2) == 1);
    CK_CHECK(svc_offsets_uncommitted(r->o, 2) == 1); /* 13 is done, behind 12: in the metadata */
    CK_CHECK(svc_offsets_done(r->o, r->tok[2]) == 1 && svc_offsets_outstanding(r->o, 2) == 0);
    CK_CHECK(svc_offsets_uncommitted(r->o, 2) == 0);
    int64_t off, mark;
    CK_CHECK(svc_offsets_final(r->o, 2, &off, &mark) && off == 14 && mark == 14);
    CK_CHECK(ack(r, 2) == 26 && svc_offsets_acked_offset(r->o, 2) == 14);
    /* the revoke ends: fresh state, late done calls ignored */
    CK_CHECK(svc_offsets_assign(r->o, 2, 0) == 0 && !svc_offsets_revoking(r->o, 2));
    CK_CHECK(svc_offsets_acked_offset(r->o, 2) == -1 && svc_offsets_outstanding(r->o, 2) == 0);
    CK_CHECK(svc_offsets_done(r->o, r->tok[3]) == 0);

    /* outstanding against a model: dispatch 200, finish a random half */
    CK_CHECK(assign_known(r, 5, 0, -1));
    int base = r->n_disp, fin = 0;
    for (int64_t o = 0; o < 200; o++) {
        CK_CHECK(svc_offsets_consumed(r->o, 5, o, M(o)) == 0);
        if (o % 4 == 0) ack(r, 5);
    }
    ack(r, 5);
    CK_CHECK(r->n_disp - base == 200);
    uint32_t seed = 7;
    unsigned char model_done[200] = {0};
    for (int i = 0; i < 200; i++) {
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) & 1) {
            svc_offsets_done(r->o, r->tok[base + i]);
            model_done[i] = 1;
            fin++;
        }
    }
    CK_CHECK(svc_offsets_revoke_begin(r->o, 5) == 0);
    CK_CHECK(svc_offsets_outstanding(r->o, 5) == 200 - fin);
    /* the offset: the model's first not done; run again: only those not
     * done (the finished ones above it travel in the metadata) */
    int first = 0;
    while (first < 200 && model_done[first]) first++;
    CK_CHECK(next_of(r, 5) == first && svc_offsets_uncommitted(r->o, 5) == 200 - fin);
    teardown(r);
}

static void test_offmd_strings(void) {
    char b[SVC_OFFMD_MAX];
    svc_offmd m;
    const char *why;
    /* vectors: Python base64.urlsafe_b64encode, '=' stripped */
    struct {
        const uint8_t d[4];
        int n;
        const char *s;
    } v[] = {
        {{0x01}, 1, "confkv.mark=7;done.v1=AQ"},
        {{0xff, 0x00, 0x80}, 3, "confkv.mark=7;done.v1=_wCA"},
        {{0x02, 0x00, 0x00, 0x04}, 4, "confkv.mark=7;done.v1=AgAABA"},
        {{0xfb, 0xef, 0xbe}, 3, "confkv.mark=7;done.v1=----"},
        {{0x01, 0x00, 0x00}, 3, "confkv.mark=7;done.v1=AQ"}, /* trailing zero bytes trimmed */
        {{0}, 1, "confkv.mark=7"},                           /* nothing left: no set */
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int n = svc_offmd_format(b, sizeof b, 7, v[i].d, v[i].n);
        CK_CHECK_MSG(n == (int)strlen(v[i].s) && !strcmp(b, v[i].s), "'%s' vs '%s'", b, v[i].s);
        CK_CHECK(svc_offmd_parse(b, (size_t)n, &m, &why) == 0 && m.mark == 7);
        int want = v[i].n;
        while (want > 0 && v[i].d[want - 1] == 0) want--;
        CK_CHECK(m.done_bytes == want && !memcmp(m.done, v[i].d, (size_t)want));
    }
    CK_CHECK(svc_offmd_format(b, sizeof b, -1, NULL, 0) == CK_EINVAL);
    CK_CHECK(svc_offmd_format(b, sizeof b, 1, v[0].d, SVC_OFFMD_DONE_MAX + 1) == CK_EINVAL);
    CK_CHECK(svc_offmd_format(b, 20, 7, v[1].d, 3) == CK_ETOOLONG);
    /* the largest set fits in SVC_OFFMD_MAX with the largest mark */
    uint8_t full[SVC_OFFMD_DONE_MAX];
    memset(full, 0xa5, sizeof full);
    int n = svc_offmd_format(b, sizeof b, INT64_MAX / 10, full, SVC_OFFMD_DONE_MAX);
    CK_CHECK(n > 0 && n < SVC_OFFMD_MAX && n < 4096);
    CK_CHECK(svc_offmd_parse(b, (size_t)n, &m, &why) == 0 && m.done_bytes == SVC_OFFMD_DONE_MAX &&
             !memcmp(m.done, full, sizeof full));
    /* others' metadata: no mark, no set, no error */
    CK_CHECK(svc_offmd_parse("kafka-streams", 13, &m, &why) == 0 && m.mark == -1 && !m.done_bytes && !why);
    CK_CHECK(svc_offmd_parse(NULL, 0, &m, &why) == 0 && m.mark == -1);
    /* ours, malformed: refused with a reason; the mark kept when its part is sound */
    struct {
        const char *s;
        int64_t mark;
    } bad[] = {
        {"confkv.mark=", -1},
        {"confkv.mark=x;done.v1=AQ", -1},
        {"confkv.mark=5;", 5},
        {"confkv.mark=5;done.v2=AQ", 5},
        {"confkv.mark=5;done.v1=", 5},
        {"confkv.mark=5;done.v1=A", 5},    /* a length base64 never has */
        {"confkv.mark=5;done.v1=AR", 5},   /* nonzero padding bits */
        {"confkv.mark=5;done.v1=AQ=", 5},  /* padding is not written */
        {"confkv.mark=5;done.v1=A+/Q", 5}, /* base64, not base64url */
        {"confkv.mark=5;done.v1=AQ;x", 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        CK_CHECK_MSG(svc_offmd_parse(bad[i].s, strlen(bad[i].s), &m, &why) == CK_EINVAL && why && *why &&
                         m.mark == bad[i].mark && !m.done_bytes,
                     "'%s'", bad[i].s);
    }
    /* too long: one character past the largest set */
    static char big[SVC_OFFMD_MAX + 8];
    int bl = snprintf(big, sizeof big, "confkv.mark=5;done.v1=");
    int chars = (SVC_OFFMD_DONE_MAX * 8 + 5) / 6 + 4;
    memset(big + bl, 'A', (size_t)chars);
    CK_CHECK(svc_offmd_parse(big, (size_t)(bl + chars), &m, &why) == CK_EINVAL && !m.done_bytes);
    /* only n bytes are read */
    CK_CHECK(svc_offmd_parse("confkv.mark=5;done.v1=AQxx", 24, &m, &why) == 0 && m.done_bytes == 1);
}

/* A commit's finished set against a model; the next owner skips it. */
static void test_done_set(void) {
    rec *r = setup(0, 0, 0);
    CK_CHECK(r != NULL);
    if (!r) return;
    CK_CHECK(assign_known(r, 1, 10, -1));
    for (int64_t o = 10; o < 40; o++) CK_CHECK(svc_offsets_consumed(r->o, 1, o, M(o)) == 0);
    ack(r, 1);
    CK_CHECK(r->n_disp == 30);
    /* finish every offset whose (o * 7) % 5 != 0, but not 10 */
    uint8_t model[8] = {0};
    int fin = 0;
    for (int i = 1; i < 30; i++) {
        if ((i * 7) % 5 == 0) continue;
        svc_offsets_done(r->o, r->tok[i]);
        model[i / 8] |= (uint8_t)(1u << (i % 8));
        fin++;
    }
    CK_CHECK(next_of(r, 1) == 10 && svc_offsets_outstanding(r->o, 1) == 30 - fin);
    /* a done above the low-water mark makes a commit due (its set changed) */
    int64_t off, mark;
    CK_CHECK(svc_offsets_commit_due(r->o, 1, &off, &mark) && off == 10);
    char md[SVC_OFFMD_MAX];
    int left = -1, n = svc_offsets_metadata(r->o, 1, 10, 50, md, sizeof md, &left);
    CK_CHECK(n > 0 && left == 0);
    svc_offmd m;
    const char *why;
    CK_CHECK(svc_offmd_parse(md, (size_t)n, &m, &why) == 0 && m.mark == 50);
    CK_CHECK(m.done_bytes == 4 && !memcmp(m.done, model, 4));
    /* nothing but the abandoned runs again */
    CK_CHECK(svc_offsets_uncommitted(r->o, 1) == 30 - fin);

    /* the next owner: skips exactly the set, runs the rest */
    uint32_t agen;
    CK_CHECK(svc_offsets_assign(r->o, 1, 0) == 0 && svc_offsets_assign(r->o, 1, 1) == 0);
    CK_CHECK(svc_offsets_unknown(r->o, 1, &agen));
    CK_CHECK(svc_offsets_committed(r->o, 1, agen, 10, 50, m.done, m.done_bytes) == 1);
    /* before any is consumed, the set goes on into its own commits */
    left = -1;
    n = svc_offsets_metadata(r->o, 1, 10, 50, md, sizeof md, &left);
    CK_CHECK(n > 0 && svc_offmd_parse(md, (size_t)n, &m, &why) == 0 && !memcmp(m.done, model, 4));
    int d0 = r->n_disp;
    for (int64_t o = 10; o < 40; o++) CK_CHECK(svc_offsets_consumed(r->o, 1, o, M(o)) == 0);
    ack(r, 1);
    CK_CHECK(r->n_skip == fin && r->n_disp - d0 == 30 - fin);
    for (int i = 0; i < r->n_skip; i++) {
        int64_t j = r->skipped[i] - 10;
        CK_CHECK(model[j / 8] >> (j % 8) & 1);
    }
    for (int i = d0; i < r->n_disp; i++) svc_offsets_done(r->o, r->tok[i]);
    CK_CHECK(next_of(r, 1) == 40 && svc_offsets_uncommitted(r->o, 1) == 0);
    n = svc_offsets_metadata(r->o, 1, 40, 50, md, sizeof md, &left);
    CK_CHECK(n == (int)strlen("confkv.mark=50") && left == 0); /* nothing above 40 */
    teardown(r);

    /* the cut: offsets 1..13000 done, 0 running: 12,288 fit */
    r = setup(0, 0, 0);
    CK_CHECK(r != NULL);
    if (!r) return;
    CK_CHECK(assign_known(r, 0, 0, -1));
    CK_CHECK(svc_offsets_consumed(r->o, 0, 0, M(0)) == 0);
    ack(r, 0);
    r->done_inline = 1;
    for (int64_t o = 1; o <= 13000; o++) {
        CK_CHECK(svc_offsets_consumed(r->o, 0, o, M(o)) == 0);
        if (o % 16 == 0) ack(r, 0);
    }
    ack(r, 0);
    CK_CHECK(r->n_disp == 13001 && next_of(r, 0) == 0);
    n = svc_offsets_metadata(r->o, 0, 0, 13002, md, sizeof md, &left);
    CK_CHECK(n > 0 && n < SVC_OFFMD_MAX && left == 13000 - (SVC_OFFMD_DONE_MAX * 8 - 1));
    CK_CHECK(svc_offmd_parse(md, (size_t)n, &m, &why) == 0 && m.done_bytes == SVC_OFFMD_DONE_MAX);
    CK_CHECK(m.done[0] == 0xfe && m.done[SVC_OFFMD_DONE_MAX - 1] == 0xff);
    CK_CHECK(svc_offsets_uncommitted(r->o, 0) == 1 + left);
    teardown(r);
}

/* Dispatch-ahead: at most the bound of a partition's jobs are dispatched
 * and not done; a done lets the next held one go; a revoke abandons only
 * the dispatched ones. The auto bound against its formula. */
static void test_dispatch_ahead(void) {
    g_dispatch_ahead = 3;
    rec *r = setup(0, 0, 0);
    g_dispatch_ahead = 0;
    CK_CHECK(r != NULL);
    if (!r) return;
    CK_CHECK(svc_offsets_dispatch_bound(r->o) == 3);
    CK_CHECK(assign_known(r, 0, 0, -1) && assign_known(r, 1, 0, -1));
    for (int64_t o = 0; o < 10; o++) CK_CHECK(svc_offsets_consumed(r->o, 0, o, M(o)) == 0);
    ack(r, 0);
    CK_CHECK(r->n_disp == 3 && r->tok[2].offset == 2 && !svc_offsets_releasable(r->o, 0));
    /* another partition has its own bound */
    CK_CHECK(svc_offsets_consumed(r->o, 1, 0, M(100)) == 0);
    ack(r, 1);
    CK_CHECK(r->n_disp == 4 && r->tok[3].partition == 1);
    /* out of order: 1 finishes; 3 may go */
    svc_offsets_done(r->o, r->tok[1]);
    CK_CHECK(svc_offsets_releasable(r->o, 0));
    svc_offsets_release(r->o);
    CK_CHECK(r->n_disp == 5 && r->tok[4].offset == 3 && !svc_offsets_releasable(r->o, 0));
    CK_CHECK(svc_offsets_outstanding(r->o, 0) == 3);
    /* a job finished at once (inside dispatch) frees its place at once */
    r->done_inline = 1;
    svc_offsets_done(r->o, r->tok[0]);
    svc_offsets_release(r->o);
    CK_CHECK(r->n_disp == 11 && r->tok[10].offset == 9); /* 4..9, each done inline */
    r->done_inline = 0;
    for (int64_t o = 10; o < 20; o++) CK_CHECK(svc_offsets_consumed(r->o, 0, o, M(o)) == 0);
    ack(r, 0);
    CK_CHECK(svc_offsets_outstanding(r->o, 0) == 3 && r->tok[r->n_disp - 1].offset == 10); /* 2, 3, 10 */
    teardown(r);

    /* revoke: the held are dropped, only the bound is abandoned */
    g_dispatch_ahead = 4;
    r = setup(0, 0, 0);
    g_dispatch_ahead = 0;
    CK_CHECK(r != NULL);
    if (!r) return;
    CK_CHECK(assign_known(r, 2, 0, -1));
    for (int64_t o = 0; o < 50; o++) CK_CHECK(svc_offsets_consumed(r->o, 2, o, M(o)) == 0);
    ack(r, 2);
    CK_CHECK(r->n_disp == 4 && svc_offsets_revoke_begin(r->o, 2) == 0);
    CK_CHECK(r->n_drop == 46 && svc_offsets_outstanding(r->o, 2) == 4 &&
             svc_offsets_uncommitted(r->o, 2) == 4);
    teardown(r);

    /* auto: 2 * slots / assigned, at least 8 */
    g_dispatch_slots = 64;
    r = setup(0, 0, 0);
    g_dispatch_slots = 0;
    CK_CHECK(r != NULL);
    if (!r) return;
    CK_CHECK(svc_offsets_dispatch_bound(r->o) == 128);
    for (int32_t p = 0; p < 3; p++) CK_CHECK(assign_known(r, p, 0, -1));
    CK_CHECK(svc_offsets_dispatch_bound(r->o) == 43); /* ceil(128 / 3) */
    for (int32_t p = 3; p < 32; p++) CK_CHECK(assign_known(r, p, 0, -1));
    CK_CHECK(svc_offsets_dispatch_bound(r->o) == 8);
    CK_CHECK(svc_offsets_assign(r->o, 31, 0) == 0 && svc_offsets_count_assigned(r->o) == 31);
    teardown(r);
    r = setup(0, 0, 0); /* neither: no bound */
    CK_CHECK(r && svc_offsets_dispatch_bound(r->o) == INT32_MAX);
    teardown(r);
}

int main(void) {
    CK_RUN(test_config);
    CK_RUN(test_low_water);
    CK_RUN(test_marks);
    CK_RUN(test_redelivery);
    CK_RUN(test_revoke);
    CK_RUN(test_revoke_grace);
    CK_RUN(test_mark_strings);
    CK_RUN(test_bounds);
    CK_RUN(test_offmd_strings);
    CK_RUN(test_done_set);
    CK_RUN(test_dispatch_ahead);
    return ck_test_summary();
}
