/* test_tuner.c - the load-following thresholds (tuner.h).
 *
 * Oracle: the test draws its own samples from known distributions and
 * computes, by sorting them itself, the share a threshold leaves uncertain
 * and the quantile the tuner should head for; the tuner must move toward
 * it, by at most max_step a window, only after `hysteresis` windows, never
 * past its bounds, and not at all inside the dead band. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ck_err.h"
#include "ck_test.h"
#include "tuner.h"

static uint64_t rng = 88172645463325252ull;
static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* A window of n steps: entropy uniform in [e0, e1] nats (raw), gap and
 * pmax uniform in [g0, g1] and [p0, p1]. */
static void feed(tuner *t, int n, double e0, double e1, double g0, double g1, double p0, double p1) {
    for (int i = 0; i < n; i++)
        tuner_observe(t, (float)(e0 + (e1 - e0) * uniform()), (float)(g0 + (g1 - g0) * uniform()),
                      (float)(p0 + (p1 - p0) * uniform()));
}

static tuner_config cfg(void) {
    tuner_config c;
    tuner_config_default(&c);
    c.window_s = 1;
    return c;
}

/* At the target share (entropy uniform in [0, 4]: th 3 leaves 25% above)
 * nothing moves, window after window. */
static void test_steady_load_no_moves(void) {
    tuner t;
    tuner_config c = cfg();
    double th[3] = {3.0, 0.25, 0.25};
    CK_CHECK(tuner_init(&t, &c, th, 1.0, 4096, 0) == 0);
    tuner_move mv[3];
    for (int w = 1; w <= 20; w++) {
        /* gap/pmax uniform in [0, 1]: P(< 0.25) = 25% */
        feed(&t, 2000, 0, 4, 0, 1, 0, 1);
        CK_CHECK_MSG(tuner_tick(&t, w, mv) == 0, "window %d moved %s", w, tuner_param_name(mv[0].signal));
    }
    CK_CHECK(t.th[0] == 3.0 && t.th[1] == 0.25 && t.th[2] == 0.25);
    CK_CHECK(t.windows == 20 && t.moves == 0);
    tuner_free(&t);
}

/* The load gets harder (entropy + 2 nats): the entropy threshold climbs
 * toward the new 75th percentile (5 nats), 0.1 a window, starting at the
 * second window (hysteresis 2), and stops inside the dead band. */
static void test_harder_load_raises_entropy_threshold(void) {
    tuner t;
    tuner_config c = cfg();
    double th[3] = {3.0, 0.25, 0.25};
    CK_CHECK(tuner_init(&t, &c, th, 1.0, 4096, 0) == 0);
    tuner_move mv[3];
    CK_CHECK(tuner_tick(&t, 0.5, mv) == 0); /* mid-window: nothing */
    double prev = t.th[0];
    int first_move = -1, w;
    for (w = 1; w <= 40; w++) {
        feed(&t, 2000, 2, 6, 0, 1, 0, 1);
        int n = tuner_tick(&t, w, mv);
        for (int i = 0; i < n; i++) {
            CK_CHECK(mv[i].signal == TUNER_ENTROPY); /* gap and pmax kept their share */
            CK_CHECK(mv[i].to > mv[i].from);
            CK_CHECK_MSG(mv[i].to - mv[i].from <= c.max_step[0] + 1e-9, "step %g", mv[i].to - mv[i].from);
            CK_CHECK_NEAR(mv[i].quantile, 5.0, 0.15);
            if (first_move < 0) first_move = w;
        }
        CK_CHECK(t.th[0] >= prev);
        prev = t.th[0];
    }
    CK_CHECK_MSG(first_move == 2, "first move at window %d", first_move);
    /* Settled: within the dead band of the target share. The share under
     * th for U[2, 6] is (6 - th) / 4, so |share - 0.25| <= 0.05 means th in
     * [4.8, 5.2]. */
    CK_CHECK_MSG(t.th[0] >= 4.8 - 1e-9 && t.th[0] <= 5.2 + 1e-9, "settled at %g", t.th[0]);
    tuner_free(&t);
}

/* Alternating easy and hard windows: each asks the opposite direction, so
 * with hysteresis 2 the threshold never moves (no oscillation). */
static void test_alternating_load_holds(void) {
    tuner t;
    tuner_config c = cfg();
    double th[3] = {3.0, 0.25, 0.25};
    CK_CHECK(tuner_init(&t, &c, th, 1.0, 4096, 0) == 0);
    tuner_move mv[3];
    for (int w = 1; w <= 30; w++) {
        if (w & 1)
            feed(&t, 2000, 2, 6, 0, 1, 0, 1);
        else
            feed(&t, 2000, 0, 2, 0, 1, 0, 1);
        CK_CHECK(tuner_tick(&t, w, mv) == 0);
    }
    CK_CHECK(t.th[0] == 3.0);
    tuner_free(&t);
}

/* Confident text (gap and pmax high): too few steps below their thresholds,
 * so both rise; never past hi. Entropy scaled: raw nats / entropy_scale. */
static void test_gap_pmax_rise_bounded(void) {
    tuner t;
    tuner_config c = cfg();
    c.hi[TUNER_GAP] = 0.3;
    double th[3] = {3.0, 0.25, 0.25};
    /* raw entropy U[0, 2] at scale 0.5 is U[0, 4] in config units: steady */
    CK_CHECK(tuner_init(&t, &c, th, 0.5, 4096, 0) == 0);
    tuner_move mv[3];
    for (int w = 1; w <= 60; w++) {
        feed(&t, 2000, 0, 2, 0.5, 1, 0.6, 1);
        int n = tuner_tick(&t, w, mv);
        for (int i = 0; i < n; i++) {
            CK_CHECK(mv[i].signal != TUNER_ENTROPY);
            CK_CHECK(mv[i].to > mv[i].from);
        }
    }
    CK_CHECK_MSG(t.th[0] == 3.0, "entropy moved to %g", t.th[0]);
    CK_CHECK_MSG(t.th[1] == 0.3, "gap at %g, bound 0.3", t.th[1]); /* its quantile (0.625) is past hi */
    /* pmax U[0.6, 1]: 25% below 0.7 */
    CK_CHECK_MSG(fabs(t.th[2] - 0.7) <= 0.02 + 0.05 * 0.4, "pmax at %g", t.th[2]);
    tuner_free(&t);
}

/* Too few steps in a window: no decision; reservoir over capacity still
 * gives the right quantile (uniform sample of the window). */
static void test_min_samples_and_reservoir(void) {
    tuner t;
    tuner_config c = cfg();
    c.hysteresis = 1;
    double th[3] = {3.0, 0.25, 0.25};
    CK_CHECK(tuner_init(&t, &c, th, 1.0, 256, 0) == 0);
    tuner_move mv[3];
    feed(&t, 10, 6, 8, 0, 1, 0, 1);
    CK_CHECK(tuner_tick(&t, 1, mv) == 0);
    /* 100,000 steps through a 256-slot reservoir: the 75th percentile of
     * U[4, 8] is 7; a uniform sample of 256 has it within about +-0.25 */
    feed(&t, 100000, 4, 8, 0, 1, 0, 1);
    int n = tuner_tick(&t, 2, mv);
    CK_CHECK(n == 1 && mv[0].signal == TUNER_ENTROPY && mv[0].samples == 256);
    CK_CHECK_NEAR(mv[0].quantile, 7.0, 0.35);
    CK_CHECK_NEAR(mv[0].to, 3.1, 1e-9);
    tuner_free(&t);
}

static void test_bad_config(void) {
    tuner t;
    tuner_config c = cfg();
    double th[3] = {3, 0.2, 0.2};
    c.target = 0;
    CK_CHECK(tuner_init(&t, &c, th, 1, 256, 0) == CK_EINVAL);
    c = cfg();
    CK_CHECK(tuner_init(&t, &c, th, 1, 8, 0) == CK_EINVAL); /* capacity < min_samples */
    CK_CHECK(tuner_init(&t, &c, th, 0, 256, 0) == CK_EINVAL);
    c.lo[1] = 0.9;
    CK_CHECK(tuner_init(&t, &c, th, 1, 256, 0) == CK_EINVAL);
    c = cfg();
    double wild[3] = {100, -1, 2};
    CK_CHECK(tuner_init(&t, &c, wild, 1, 256, 0) == 0); /* clamped */
    CK_CHECK(t.th[0] == c.hi[0] && t.th[1] == c.lo[1] && t.th[2] == c.hi[2]);
    tuner_observe(&t, NAN, 0.1f, 0.1f); /* ignored */
    CK_CHECK(t.seen == 0);
    tuner_free(&t);
}

int main(void) {
    CK_RUN(test_steady_load_no_moves);
    CK_RUN(test_harder_load_raises_entropy_threshold);
    CK_RUN(test_alternating_load_holds);
    CK_RUN(test_gap_pmax_rise_bounded);
    CK_RUN(test_min_samples_and_reservoir);
    CK_RUN(test_bad_config);
    return ck_test_summary();
}
