/* eng_tune.c - the default policy's thresholds under the load: the tuner
 * (tuner.h) inside the engine, and the reload of the defaults new requests
 * take (engine.h: eng_set_defaults, eng_take_tune_moves). */
#include <stdio.h>
#include <string.h>

#include "ck_err.h"
#include "eng_int.h"
#include "engine.h"
#include "tuner.h"

/* Tuning on/off, its window and target, starting from the default policy's
 * thresholds now. Allocates nothing (the tuner was sized in eng_new). */
int eng__tune_configure(eng *e, int on, double window_s, double target, char *err, size_t errlen) {
    tuner_config tc;
    tuner_config_default(&tc);
    if (window_s > 0) tc.window_s = window_s;
    if (target > 0) tc.target = target;
    const kvpol_config *p = &e->c.policy;
    double th[TUNER_N] = {p->entropy_threshold, p->prob_gap_threshold, p->max_prob_threshold};
    int rc = tuner_reset(&e->tun, &tc, th, now_ms() / 1e3);
    if (rc) {
        snprintf(err, errlen, "tuning: window %g s, target %g: out of range", window_s, target);
        return rc;
    }
    e->tuning = on;
    e->c.tuning = on;
    e->c.tuning_window_s = tc.window_s;
    e->c.tuning_target = tc.target;
    return CK_OK;
}

/* At a window's end: the moves go into the default policy (new requests),
 * the stats and the ring eng_take_tune_moves reads. */
void eng__tune_tick(eng *e) {
    tuner_move mv[TUNER_N];
    int n = tuner_tick(&e->tun, now_ms() / 1e3, mv);
    e->st.tune_windows = e->tun.windows;
    for (int i = 0; i < n; i++) {
        float *th[TUNER_N] = {&e->c.policy.entropy_threshold, &e->c.policy.prob_gap_threshold,
                              &e->c.policy.max_prob_threshold};
        *th[mv[i].signal] = (float)mv[i].to;
        e->st.tune_moves++;
        if (e->n_moves == ENG_TUNE_RING) { /* the oldest goes */
            memmove(e->moves, e->moves + 1, (ENG_TUNE_RING - 1) * sizeof *e->moves);
            e->n_moves--;
        }
        e->moves[e->n_moves++] = (eng_tune_move){
            tuner_param_name(mv[i].signal), mv[i].from, mv[i].to, mv[i].share, mv[i].quantile, mv[i].samples};
    }
}

int eng_take_tune_moves(eng *e, eng_tune_move *out, int max) {
    int n = e->n_moves < max ? e->n_moves : max;
    memcpy(out, e->moves, (size_t)n * sizeof *out);
    memmove(e->moves, e->moves + n, (size_t)(e->n_moves - n) * sizeof *e->moves);
    e->n_moves -= n;
    return n;
}

int eng_set_defaults(eng *e, const char *policy, int tuning, double window_s, double target, char *err,
                     size_t errlen) {
    kvpol_config pc = e->c.policy;
    int rc;
    if (policy && (rc = kvpol_parse(policy, &pc, err, errlen))) return rc;
    /* check the tuning values before changing anything */
    tuner_config tc;
    tuner_config_default(&tc);
    if (window_s > 0) tc.window_s = window_s;
    if (target > 0) tc.target = target;
    if (!(tc.target < 1) || !(tc.window_s > 0)) {
        snprintf(err, errlen, "tuning: window %g s, target %g: out of range", window_s, target);
        return CK_EINVAL;
    }
    e->c.policy = pc;
    if (tuning < 0)
        tuning = e->tuning, window_s = window_s > 0 ? window_s : e->c.tuning_window_s,
        target = target > 0 ? target : e->c.tuning_target;
    return eng__tune_configure(e, tuning, window_s, target, err, errlen);
}
