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
 *  - the metadata string (ours vs others'), the ring bound, the hold bound.
 * Messages are fake pointers (offset + 1), never dereferenced. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
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

static void *M(int64_t off) { return (void *)(intptr_t)(off + 1); }

static rec *setup(int mark_ahead, int hold_pause, int max_ring) {
    rec *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    svc_offsets_config c;
    svc_offsets_config_default(&c);
    if (mark_ahead) c.mark_ahead = mark_ahead;
    if (hold_pause) c.hold_pause = hold_pause;
    if (max_ring) c.max_ring = max_ring;
    c.cbs = (svc_offsets_cbs){r, r_dispatch, r_drop, r_pause, r_commit};
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
    return svc_offsets_committed(r->o, p, agen, committed, prev_mark) == 1;
}

static void test_config(void) {
    svc_offsets_config c;
    svc_offsets_config_default(&c);
    CK_CHECK(c.mark_ahead == 64 && c.hold_pause == 1024 && c.max_partition == 1000000);
    svc_offsets *o = NULL;
    CK_CHECK(svc_offsets_new(&c, &o) == CK_EINVAL && !o); /* no callbacks */
    rec r = {0};
    c.cbs = (svc_offsets_cbs){&r, r_dispatch, r_drop, NULL, r_commit};
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
    CK_CHECK(svc_offsets_committed(r->o, 3, agen, -1, -1) == 1);
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
    CK_CHECK(svc_offsets_committed(r->o, 1, agen, 5, svc_offsets_mark_parse("confkv.mark=8", 13)) == 1);
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
    CK_CHECK(svc_offsets_committed(r->o, 2, agen_old, 3, 5) == 0);
    CK_CHECK(svc_offsets_committed(r->o, 2, agen, 3, 5) == 1);
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
    CK_CHECK(svc_offsets_unknown(r->o, 7, &agen) && svc_offsets_committed(r->o, 7, agen, 0, -1) == 1);
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
    CK_CHECK(svc_offsets_uncommitted(r->o, 2) == 2); /* 13 is done, behind 12 */
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
    /* uncommitted: everything from the model's first offset not done */
    int first = 0;
    while (first < 200 && model_done[first]) first++;
    CK_CHECK(next_of(r, 5) == first && svc_offsets_uncommitted(r->o, 5) == 200 - first);
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
    return ck_test_summary();
}
