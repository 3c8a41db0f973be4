/* test_svc_route.c - the cascade's escalation rule (svc_route.h).
 *
 * Oracle: the statistics of the window computed here from the fed
 * sequence directly (mean/min/max of the last N values), and the rule's
 * documented meaning: decide once after N tokens (at=first) or after each
 * token from the N-th (at=every), escalate when any condition holds. */
#include <stdint.h>

#include "ck_err.h"
#include "ck_test.h"
#include "svc_route.h"

static svc_route_state st; /* 3 KB: not on the stack of each case */

static void test_parse(void) {
    svc_route_rule r;
    char err[256], name[256];
    CK_CHECK(svc_route_parse(NULL, &r, err, sizeof err) == 0);
    CK_CHECK(r.tokens == 16 && !r.every && r.n_cond == 2);
    svc_route_name(&r, name, sizeof name);
    CK_CHECK_MSG(!strcmp(name, "tokens=16,at=first,mean_entropy>1.5,min_pmax<0.05"), "%s", name);
    CK_CHECK(svc_route_parse("tokens=4,at=every,max_gap<0.2", &r, err, sizeof err) == 0);
    CK_CHECK(r.tokens == 4 && r.every && r.n_cond == 1 && r.cond[0].stat == SVC_ROUTE_MAX &&
             r.cond[0].signal == SVC_ROUTE_GAP && !r.cond[0].greater && r.cond[0].x == 0.2);
    /* rewind: kept, printed, and the accepted count it gives */
    CK_CHECK(svc_route_parse("tokens=4,rewind=3,always", &r, err, sizeof err) == 0);
    svc_route_name(&r, name, sizeof name);
    CK_CHECK_MSG(!strcmp(name, "tokens=4,at=first,rewind=3,always"), "%s", name);
    svc_route_begin(&st);
    int moved = 0;
    for (int i = 0; i < 4 && !moved; i++) moved = svc_route_feed(&r, &st, 1, 0, 0);
    CK_CHECK(moved && st.n == 4 && svc_route_accepted(&r, &st) == 1);
    r.rewind = 4;
    CK_CHECK(svc_route_accepted(&r, &st) == 0);
    const char *bad[] = {"tokens=0",
                         "tokens=257",
                         "tokens=x",
                         "mean_entropy",
                         "avg_entropy>1",
                         "mean_foo>1",
                         "mean_entropy>",
                         "mean_entropy>nan",
                         "always,never",
                         "tokens=8",
                         "a,,b",
                         "at=last",
                         "tokens=4,rewind=5,always",
                         "rewind=-1,always",
                         "mean_entropy>1,mean_entropy>1,mean_entropy>1,mean_entropy>1,mean_entropy>1,"
                         "mean_entropy>1,mean_entropy>1,mean_entropy>1,mean_entropy>1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CK_CHECK_MSG(svc_route_parse(bad[i], &r, err, sizeof err) == CK_EINVAL, "'%s' accepted", bad[i]);
        CK_CHECK(err[0]);
    }
}

/* The window statistics, computed independently of svc_route.c. */
static double stat_of(const float *v, int from, int n, int stat) {
    double acc = stat == SVC_ROUTE_MEAN ? 0 : v[from];
    for (int i = from; i < from + n; i++) {
        if (stat == SVC_ROUTE_MEAN)
            acc += v[i];
        else if (stat == SVC_ROUTE_MIN && v[i] < acc)
            acc = v[i];
        else if (stat == SVC_ROUTE_MAX && v[i] > acc)
            acc = v[i];
    }
    return stat == SVC_ROUTE_MEAN ? acc / n : acc;
}

/* at=first: the decision comes exactly at token N, once. */
static void test_first(void) {
    svc_route_rule r;
    char err[128];
    CK_CHECK(svc_route_parse("tokens=4,mean_entropy>2", &r, err, sizeof err) == 0);
    float ent[12] = {3, 3, 3, 3, 0, 0, 0, 0, 9, 9, 9, 9};
    svc_route_begin(&st);
    int moved_at = -1;
    for (int i = 0; i < 12 && moved_at < 0; i++)
        if (svc_route_feed(&r, &st, ent[i], 0.5f, 0.5f)) moved_at = i;
    CK_CHECK_MSG(moved_at == 3, "moved at %d", moved_at);
    /* the window's mean is below at token 4: stays, and never decides again */
    float calm[12] = {1, 1, 1, 1, 9, 9, 9, 9, 9, 9, 9, 9};
    svc_route_begin(&st);
    for (int i = 0; i < 12; i++) CK_CHECK(svc_route_feed(&r, &st, calm[i], 0.5f, 0.5f) == 0);
}

/* at=every over a sliding window: escalates at the first token whose last
 * N values satisfy a condition, as computed here. */
static void test_every_matches_independent_window(void) {
    svc_route_rule r;
    char err[128];
    CK_CHECK(svc_route_parse("tokens=5,at=every,min_pmax<0.1,max_gap<0.05", &r, err, sizeof err) == 0);
    float pmax[64], gap[64];
    uint64_t x = 12345;
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < 64; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            pmax[i] = 0.08f + (float)((x >> 40) % 1000) / 1000.0f;
            gap[i] = 0.03f + (float)((x >> 20) % 1000) / 1000.0f;
        }
        int expect = -1;
        for (int i = 4; i < 64 && expect < 0; i++)
            if (stat_of(pmax, i - 4, 5, SVC_ROUTE_MIN) < 0.1 || stat_of(gap, i - 4, 5, SVC_ROUTE_MAX) < 0.05)
                expect = i;
        svc_route_begin(&st);
        int got = -1;
        for (int i = 0; i < 64 && got < 0; i++)
            if (svc_route_feed(&r, &st, 1.0f, gap[i], pmax[i])) got = i;
        CK_CHECK_MSG(got == expect, "trial %d: moved at %d, expected %d", trial, got, expect);
    }
}

static void test_always_never(void) {
    svc_route_rule r;
    char err[128];
    CK_CHECK(svc_route_parse("tokens=3,always", &r, err, sizeof err) == 0);
    svc_route_begin(&st);
    CK_CHECK(svc_route_feed(&r, &st, 0, 1, 1) == 0);
    CK_CHECK(svc_route_feed(&r, &st, 0, 1, 1) == 0);
    CK_CHECK(svc_route_feed(&r, &st, 0, 1, 1) == 1);
    CK_CHECK(svc_route_parse("tokens=1,never", &r, err, sizeof err) == 0);
    svc_route_begin(&st);
    for (int i = 0; i < 300; i++) CK_CHECK(svc_route_feed(&r, &st, 99, 0, 0) == 0);
}

int main(void) {
    CK_RUN(test_parse);
    CK_RUN(test_first);
    CK_RUN(test_every_matches_independent_window);
    CK_RUN(test_always_never);
    return ck_test_summary();
}
