/* tuner.c - CONF-KV thresholds that follow the load (tuner.h). */
#include "tuner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

void tuner_config_default(tuner_config *c) {
    memset(c, 0, sizeof *c);
    c->window_s = 30;
    c->target = 0.25;
    c->dead_band = 0.05;
    c->hysteresis = 2;
    c->min_samples = 64;
    c->max_step[TUNER_ENTROPY] = 0.1; /* the notes' step */
    c->max_step[TUNER_GAP] = 0.02;
    c->max_step[TUNER_PMAX] = 0.02;
    c->lo[TUNER_ENTROPY] = 1, c->hi[TUNER_ENTROPY] = 8;
    c->lo[TUNER_GAP] = 0.02, c->hi[TUNER_GAP] = 0.6;
    c->lo[TUNER_PMAX] = 0.2, c->hi[TUNER_PMAX] = 0.95;
}

const char *tuner_param_name(int signal) {
    static const char *const n[TUNER_N] = {"entropy_threshold", "prob_gap_threshold", "max_prob_threshold"};
    return signal >= 0 && signal < TUNER_N ? n[signal] : NULL;
}

static double clamp(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

static int config_ok(const tuner_config *c) {
    if (!(c->window_s > 0) || !(c->target > 0 && c->target < 1) ||
        !(c->dead_band >= 0 && c->dead_band < 0.5) || c->hysteresis < 1 || c->min_samples < 1)
        return 0;
    for (int s = 0; s < TUNER_N; s++)
        if (!(c->max_step[s] > 0) || !(c->lo[s] <= c->hi[s])) return 0;
    return 1;
}

int tuner_init(tuner *t, const tuner_config *c, const double th0[TUNER_N], double entropy_scale, int capacity,
               double now_s) {
    memset(t, 0, sizeof *t);
    if (!c || !config_ok(c) || !th0 || !(entropy_scale > 0) || capacity < c->min_samples ||
        capacity > (1 << 20))
        return CK_EINVAL;
    t->c = *c;
    t->entropy_scale = entropy_scale;
    t->capacity = capacity;
    for (int s = 0; s < TUNER_N; s++) {
        t->th[s] = clamp(th0[s], c->lo[s], c->hi[s]);
        if (!(t->res[s] = malloc((size_t)capacity * sizeof(float)))) goto nomem;
    }
    if (!(t->scratch = malloc((size_t)capacity * sizeof(float)))) goto nomem;
    t->rng = 0x9e3779b97f4a7c15ull;
    t->t0 = now_s;
    return 0;
nomem:
    tuner_free(t);
    return CK_ENOMEM;
}

void tuner_free(tuner *t) {
    if (!t) return;
    for (int s = 0; s < TUNER_N; s++) free(t->res[s]);
    free(t->scratch);
    memset(t, 0, sizeof *t);
}

static uint64_t next(tuner *t) {
    uint64_t x = t->rng;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return t->rng = x;
}

void tuner_observe(tuner *t, float entropy, float gap, float pmax) {
    if (!t->capacity || !isfinite(entropy) || !isfinite(gap) || !isfinite(pmax)) return;
    float v[TUNER_N] = {(float)(entropy / t->entropy_scale), gap, pmax};
    int slot;
    t->seen++;
    if (t->n_res < t->capacity)
        slot = t->n_res++;
    else {
        /* Reservoir sampling (Algorithm R): step i replaces a random slot
         * with probability capacity / i, so the kept ones are uniform. */
        uint64_t j = next(t) % t->seen;
        if (j >= (uint64_t)t->capacity) return;
        slot = (int)j;
    }
    for (int s = 0; s < TUNER_N; s++) t->res[s][slot] = v[s];
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Value below which a fraction q of the sorted x[0..n) lies (nearest rank). */
static double quantile(const float *x, int n, double q) {
    int k = (int)floor(q * n);
    if (k >= n) k = n - 1;
    if (k < 0) k = 0;
    return x[k];
}

int tuner_tick(tuner *t, double now_s, tuner_move *out) {
    if (!t->capacity || now_s - t->t0 < t->c.window_s) return 0;
    int n = t->n_res, moved = 0;
    t->windows++;
    if (n >= t->c.min_samples) {
        for (int s = 0; s < TUNER_N; s++) {
            memcpy(t->scratch, t->res[s], (size_t)n * sizeof(float));
            qsort(t->scratch, (size_t)n, sizeof(float), cmp_float);
            /* share uncertain under the current threshold, and the value
             * that would make it the target */
            int unc = 0;
            for (int i = 0; i < n; i++)
                unc += s == TUNER_ENTROPY ? t->scratch[i] > t->th[s] : t->scratch[i] < t->th[s];
            double share = (double)unc / n;
            double want = s == TUNER_ENTROPY ? quantile(t->scratch, n, 1 - t->c.target)
                                             : quantile(t->scratch, n, t->c.target);
            int dir = 0;
            if (share > t->c.target + t->c.dead_band)
                dir = s == TUNER_ENTROPY ? +1 : -1;
            else if (share < t->c.target - t->c.dead_band)
                dir = s == TUNER_ENTROPY ? -1 : +1;
            /* too many uncertain steps: entropy's threshold goes up, gap's
             * and pmax's go down (fewer steps fall below them) */
            if (!dir) {
                t->streak[s] = 0;
                continue;
            }
            t->streak[s] = (t->streak[s] * dir > 0) ? t->streak[s] + dir : dir;
            if (abs(t->streak[s]) < t->c.hysteresis) continue;
            double step = clamp(want - t->th[s], -t->c.max_step[s], t->c.max_step[s]);
            /* the quantile may sit on the wrong side when samples tie; never
             * move against the direction the share asks */
            if (step * dir <= 0) continue;
            double to = clamp(t->th[s] + step, t->c.lo[s], t->c.hi[s]);
            if (to == t->th[s]) continue;
            out[moved++] = (tuner_move){s, t->th[s], to, share, want, n};
            t->th[s] = to;
            t->moves++;
        }
    }
    t->n_res = 0;
    t->seen = 0;
    t->t0 = now_s;
    return moved;
}

int tuner_reset(tuner *t, const tuner_config *c, const double th0[TUNER_N], double now_s) {
    if (!c || !config_ok(c) || !th0 || t->capacity < c->min_samples) return CK_EINVAL;
    t->c = *c;
    for (int s = 0; s < TUNER_N; s++) {
        t->th[s] = clamp(th0[s], c->lo[s], c->hi[s]);
        t->streak[s] = 0;
    }
    t->n_res = 0;
    t->seen = 0;
    t->t0 = now_s;
    return 0;
}

void tuner_set(tuner *t, const double th[TUNER_N]) {
    for (int s = 0; s < TUNER_N; s++) {
        t->th[s] = clamp(th[s], t->c.lo[s], t->c.hi[s]);
        t->streak[s] = 0;
    }
}
