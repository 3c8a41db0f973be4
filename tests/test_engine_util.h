/* test_engine_util.h - what the engine test programs (test_engine.c,
 * test_engine_memory.c) share: an engine opened from a config, greedy
 * requests, and the events of its steps collected per request. */
#ifndef TEST_ENGINE_UTIL_H
#define TEST_ENGINE_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine.h"

#define MAXR 256 /* requests a test tracks */
#define MAXT 512 /* tokens per request */

/* What the events said about one request. */
typedef struct got {
    uint64_t id;
    int n_tok;
    int32_t tok[MAXT];
    char text[8192]; /* the pieces, concatenated */
    size_t text_len;
    int terminal; /* FINISHED or ERROR events seen */
    int finish, error;
    int order; /* rank among finished requests */
    int32_t res_tok[MAXT];
    int res_n;
    char res_text[8192];
    size_t res_len;
    uint64_t preemptions;
    int first_step; /* step of the first token, -1 none */
} got;

typedef struct run {
    got g[MAXR];
    int n;
    int n_finished;
    int steps;
} run;

static got *track(run *t, uint64_t id) {
    for (int i = 0; i < t->n; i++)
        if (t->g[i].id == id) return &t->g[i];
    if (t->n == MAXR) return NULL;
    got *g = &t->g[t->n++];
    memset(g, 0, sizeof *g);
    g->id = id;
    g->first_step = -1;
    return g;
}

/* Take in one step's events. Returns 0, or -1 on an inconsistency. */
static int collect(run *t, const eng_event *ev, int n) {
    for (int i = 0; i < n; i++) {
        got *g = track(t, ev[i].id);
        if (!g || g->terminal) return -1; /* nothing may follow the last event */
        if (ev[i].type == ENG_EV_TOKEN || ev[i].type == ENG_EV_FINISHED) {
            if (g->text_len + ev[i].piece_len >= sizeof g->text) return -1;
            memcpy(g->text + g->text_len, ev[i].piece, ev[i].piece_len);
            g->text_len += ev[i].piece_len;
        }
        if (ev[i].type == ENG_EV_TOKEN) {
            if (g->n_tok == MAXT) return -1;
            if (g->first_step < 0) g->first_step = t->steps;
            g->tok[g->n_tok++] = ev[i].token;
        } else if (ev[i].type == ENG_EV_FINISHED) {
            const eng_result *r = ev[i].result;
            g->terminal++;
            g->finish = r->finish;
            g->order = t->n_finished++;
            g->res_n = r->n_tokens < MAXT ? r->n_tokens : MAXT;
            memcpy(g->res_tok, r->tokens, (size_t)g->res_n * sizeof *g->res_tok);
            g->res_len = r->text_len < sizeof g->res_text ? r->text_len : sizeof g->res_text - 1;
            memcpy(g->res_text, r->text, g->res_len);
            g->preemptions = r->preemptions;
            if (r->text[r->text_len] != 0) return -1;
        } else if (ev[i].type == ENG_EV_ERROR) {
            g->terminal++;
            g->error = ev[i].error;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Step until idle (or max_steps). check(e, arg) after every step, if given. */
static int drain(eng *e, run *t, int max_events, int max_steps, int (*check)(eng *, void *), void *arg) {
    eng_event ev[64];
    if (max_events > 64) max_events = 64;
    for (int s = 0; s < max_steps; s++) {
        if (eng_idle(e)) return 0;
        int n = 0, rc = eng_step(e, ev, max_events, &n);
        if (rc) return rc;
        t->steps++;
        if (collect(t, ev, n)) return -1;
        if (check && check(e, arg)) return -2;
    }
    return eng_idle(e) ? 0 : -3;
}

static eng *open_engine(const eng_config *c) {
    eng *e = NULL;
    char err[256];
    if (eng_new(c, &e, err, sizeof err)) fprintf(stderr, "eng_new: %s\n", err);
    return e;
}

static void request(eng_request *r, const char *prompt, int max_tokens) {
    memset(r, 0, sizeof *r);
    samp_params_default(&r->samp);
    r->samp.temperature = 0;
    r->prompt = prompt;
    r->prompt_len = strlen(prompt);
    r->max_tokens = max_tokens;
}

#endif
