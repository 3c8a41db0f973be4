/* tuner.h - CONF-KV's thresholds tuned to the load (config tuning=adaptive).
 *
 * The deployment notes' rule: every time window, raise the entropy
 * threshold by 0.1 when the average entropy is above 3.8, lower it when it
 * is below 3.2, "similarly for the other parameters". What that rule keeps
 * steady is the share of steps the policy treats as uncertain: a load whose
 * text gets harder raises every step's entropy, and with fixed thresholds
 * CONF-KV would grow every window (memory) for text that is merely harder
 * on average, not locally uncertain. So the tuner holds that share at a
 * target, per signal:
 *
 *   entropy  uncertain when above its threshold: target share = P(H > th)
 *   gap      uncertain when p1 - p2 is below:    target share = P(gap < th)
 *   pmax     uncertain when p1 is below:         target share = P(p1 < th)
 *
 * Every window (tuning_window_s) it takes the quantile of the window's
 * samples that would give the target share, and moves the threshold toward
 * it, with three guards against oscillation:
 *   dead band   no move while the share measured under the current
 *               threshold is within target +- dead_band;
 *   step limit  a move is at most max_step (per signal, in its units);
 *   hysteresis  a move happens only after `hysteresis` consecutive windows
 *               asked for the same direction;
 * and hard bounds [lo, hi] per signal. Windows with fewer than min_samples
 * steps change nothing.
 *
 * Units: the entropy threshold is in the policy's configured units (nats for
 * a 32k vocabulary, kvpol_config.entropy_threshold); tuner_observe takes the
 * model's raw entropy and divides it by entropy_scale (ln V / ln 32000).
 *
 * Samples: a reservoir of `capacity` per window (uniform over the window's
 * steps, deterministic xorshift), so a window costs O(capacity log capacity)
 * at its end and nothing per step beyond a store. Everything is allocated
 * in tuner_init. Not thread-safe: the engine thread owns it. */
#ifndef CK_TUNER_H
#define CK_TUNER_H
#include <stddef.h>
#include <stdint.h>

enum { TUNER_ENTROPY = 0, TUNER_GAP, TUNER_PMAX, TUNER_N };

typedef struct tuner_config {
    double window_s;                 /* seconds per window */
    double target;                   /* share of steps to treat as uncertain, per signal */
    double dead_band;                /* no move while |share - target| <= dead_band */
    int hysteresis;                  /* windows in a row asking the same direction before a move */
    int min_samples;                 /* fewer steps in a window: no decision */
    double max_step[TUNER_N];        /* largest move per window */
    double lo[TUNER_N], hi[TUNER_N]; /* bounds of each threshold */
} tuner_config;

/* The defaults: target 0.25, dead band 0.05, hysteresis 2, 64 samples, steps
 * 0.1 nats / 0.02 / 0.02 (the notes' 0.1 for entropy), bounds entropy
 * [1, 8] nats, gap [0.02, 0.6], pmax [0.2, 0.95]; window_s 30. */
void tuner_config_default(tuner_config *c);

/* One threshold's move, reported by tuner_tick. */
typedef struct tuner_move {
    int signal;      /* TUNER_* */
    double from, to; /* threshold before and after */
    double share;    /* share of the window's steps uncertain under `from` */
    double quantile; /* the window's value that would give the target */
    int samples;     /* steps in the window */
} tuner_move;

typedef struct tuner {
    tuner_config c;
    double th[TUNER_N]; /* current thresholds */
    double entropy_scale;
    float *res[TUNER_N]; /* (capacity) reservoir of this window */
    float *scratch;      /* (capacity) sorted copy at the window's end */
    int capacity, n_res; /* reservoir size, filled */
    uint64_t seen;       /* steps observed this window */
    uint64_t rng;
    double t0;               /* window start, seconds (tuner_tick's clock) */
    int streak[TUNER_N];     /* +-k: k windows in a row asked up / down */
    uint64_t windows, moves; /* totals */
} tuner;

/* th0: starting thresholds (entropy in config units, gap, pmax), clamped to
 * the bounds. capacity: reservoir size (>= min_samples, <= 1 << 20).
 * Returns 0, CK_EINVAL (bad config), CK_ENOMEM. */
int tuner_init(tuner *t, const tuner_config *c, const double th0[TUNER_N], double entropy_scale, int capacity,
               double now_s);
void tuner_free(tuner *t);
/* One decode step's signals (the model's raw entropy in nats). */
void tuner_observe(tuner *t, float entropy, float gap, float pmax);
/* At now_s: when a window has ended, decide, start the next window, write
 * the moves into out (room for TUNER_N) and return how many (0..3); before
 * the window's end, return 0 and do nothing. */
int tuner_tick(tuner *t, double now_s, tuner_move *out);
/* Start over with a new config and thresholds (a config reload), keeping
 * the buffers: the window restarts at now_s. CK_EINVAL (nothing changed) for
 * a bad config. */
int tuner_reset(tuner *t, const tuner_config *c, const double th0[TUNER_N], double now_s);
/* Move to new thresholds at once (a config reload), streaks cleared. */
void tuner_set(tuner *t, const double th[TUNER_N]);
/* "entropy_threshold", "prob_gap_threshold", "max_prob_threshold": the
 * kvpol_config parameter each signal tunes. */
const char *tuner_param_name(int signal);

#endif
