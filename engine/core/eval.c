/* eval.c - policy evaluation: references, forced and free runs (eval.h). */
#include "eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "gen.h"
#include "tier.h"

typedef struct eval_prompt {
    int32_t *ids; /* prompt, BOS first */
    int n;
    int32_t *ref; /* reference continuation (gen_tokens) */
    int n_ref;
    int32_t *probe; /* the probe name's tokens (as it appears after a space) */
    int n_probe;
    int probe_from;
} eval_prompt;

struct eval_ctx {
    const model *m;
    backend *b;
    kv_pool *pool, *pool8;
    gen_ctx *g;
    int gen_tokens;
    eval_prompt *p;
    int n, cap;
};

int eval_new(const model *m, backend *b, kv_pool *pool, kv_pool *pool8, int gen_tokens, eval_ctx **out) {
    *out = NULL;
    eval_ctx *e = calloc(1, sizeof *e);
    if (!e) return CK_ENOMEM;
    e->m = m;
    e->b = b;
    e->pool = pool;
    e->pool8 = pool8;
    e->gen_tokens = gen_tokens;
    int rc = gen_new(m, b, pool, 0, &e->g);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return CK_OK;
}

void eval_free(eval_ctx *e) {
    if (!e) return;
    for (int i = 0; i < e->n; i++) {
        free(e->p[i].ids);
        free(e->p[i].ref);
        free(e->p[i].probe);
    }
    free(e->p);
    gen_free(e->g);
    free(e);
}

int eval_n_prompts(const eval_ctx *e) { return e->n; }

int eval_add_prompt(eval_ctx *e, const char *text, const char *probe_name, int probe_from) {
    if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 64;
        eval_prompt *p = realloc(e->p, (size_t)cap * sizeof *p);
        if (!p) return CK_ENOMEM;
        e->p = p;
        e->cap = cap;
    }
    eval_prompt *p = &e->p[e->n];
    memset(p, 0, sizeof *p);
    int max = e->b->opt.max_ctx, rc = CK_ENOMEM;
    if (!(p->ids = malloc((size_t)max * sizeof *p->ids))) goto fail;
    if ((rc = tok_encode(e->m->tok, text, strlen(text), 1, p->ids, max, &p->n))) goto fail;
    if (p->n + e->gen_tokens >= max) {
        rc = CK_ETOOLONG;
        goto fail;
    }
    if (probe_name) {
        char buf[128];
        snprintf(buf, sizeof buf, " %s", probe_name);
        p->probe = malloc(64 * sizeof *p->probe);
        if (!p->probe) goto fail;
        /* the name mid-sentence: after a space, without BOS; drop the
         * dummy-prefix space piece if the tokenizer split it off */
        if ((rc = tok_encode(e->m->tok, buf + 1, strlen(buf + 1), 0, p->probe, 64, &p->n_probe))) goto fail;
        p->probe_from = probe_from;
    }
    gen_params gp;
    gen_params_default(&gp);
    gp.samp.temperature = 0;
    gp.max_tokens = e->gen_tokens;
    gp.ignore_eos = 1;
    gen_set_policy(e->g, NULL);
    gen_result r;
    if ((rc = gen_run(e->g, p->ids, p->n, &gp, &r))) goto fail;
    p->ref = r.tokens;
    p->n_ref = r.n_tokens;
    r.tokens = NULL;
    gen_result_free(&r);
    e->n++;
    return CK_OK;
fail:
    free(p->ids);
    free(p->probe);
    return rc;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

int eval_policy(eval_ctx *e, const kvpol_config *c, int free_run, double full_nll, eval_row *row) {
    memset(row, 0, sizeof *row);
    kvpol_name(c, row->policy, sizeof row->policy);
    tier_config tc;
    tier_config_default(&tc, e->b);
    tc.compress = c->cache_compression;
    tier *warm = NULL;
    kvpol *pol = NULL;
    int rc = tier_new(&tc, &warm);
    if (!rc) rc = kvpol_new(c, e->b, e->pool, e->pool8, warm, &pol);
    if (rc) goto out;
    gen_set_policy(e->g, kvpol_keeps_all(c) ? NULL : pol);
    double nll = 0, hot = 0, full = 0, hotb = 0, fullb = 0, secs = 0, match = 0, peak = 0, free_ret = 0;
    long steps = 0, agree = 0, probe_n = 0, probe_hit = 0;
    uint64_t recalls = 0, demotions = 0;
    for (int i = 0; i < e->n; i++) {
        eval_prompt *p = &e->p[i];
        gen_params gp;
        gen_params_default(&gp);
        gp.samp.temperature = 0;
        gp.force = p->ref;
        gp.n_force = p->n_ref;
        gen_result r;
        if ((rc = gen_run(e->g, p->ids, p->n, &gp, &r))) goto out;
        for (int t = 0; t < r.n_tokens; t++) {
            nll -= r.logp[t];
            agree += r.argmax[t] == p->ref[t];
        }
        steps += r.n_tokens;
        hot += r.hot_token_steps;
        full += r.full_token_steps;
        hotb += r.hot_byte_steps;
        fullb += r.full_byte_steps;
        secs += r.decode_s;
        if (r.full_peak_tokens > 0 && (double)r.hot_peak_tokens / r.full_peak_tokens > peak)
            peak = (double)r.hot_peak_tokens / r.full_peak_tokens;
        const kvpol_stats *ks = kvpol_get_stats(pol);
        if (!kvpol_keeps_all(c)) {
            recalls += ks->recalls;
            demotions += ks->demotions;
        }
        /* Probe: the name's first token where the reference repeats it late. */
        for (int t = p->probe_from; p->n_probe && t + p->n_probe <= r.n_tokens; t++) {
            if (memcmp(p->ref + t, p->probe, (size_t)p->n_probe * sizeof *p->probe)) continue;
            probe_n++;
            probe_hit += r.argmax[t] == p->ref[t];
        }
        gen_result_free(&r);
        if (free_run) {
            gen_params_default(&gp);
            gp.samp.temperature = 0;
            gp.max_tokens = p->n_ref;
            gp.ignore_eos = 1;
            if ((rc = gen_run(e->g, p->ids, p->n, &gp, &r))) goto out;
            match += common_prefix(r.tokens, r.n_tokens, p->ref, p->n_ref);
            free_ret += r.full_token_steps > 0 ? r.hot_token_steps / r.full_token_steps : 1;
            gen_result_free(&r);
        }
    }
    double n = steps ? (double)steps : 1;
    row->nll = nll / n;
    row->ppl = exp(row->nll);
    row->nll_delta_pct = full_nll > 0 ? 100.0 * (row->nll - full_nll) / full_nll : 0;
    row->top1_agreement = agree / n;
    row->kv_retained_mean = full > 0 ? hot / full : 1;
    row->kv_retained_peak = peak;
    row->kv_hot_bytes_ratio = fullb > 0 ? hotb / fullb : 1;
    row->greedy_match_tokens_mean = free_run && e->n ? match / e->n : 0;
    row->free_kv_retained_mean = free_run && e->n ? free_ret / e->n : 0;
    row->recalls_per_1k = 1000.0 * (double)recalls / n;
    row->demotions_per_1k = 1000.0 * (double)demotions / n;
    row->tokens_per_s = secs > 0 ? steps / secs : 0;
    row->probe_occurrences = (int)probe_n;
    row->probe_accuracy = probe_n ? (double)probe_hit / (double)probe_n : 0;
out:
    gen_set_policy(e->g, NULL);
    kvpol_free(pol);
    tier_free(warm);
    return rc;
}

int eval_match(eval_ctx *e, const kvpol_config *c, double target, double tol, const char *target_name,
               double full_nll, eval_row *row) {
    /* kv_retained_mean grows with the budget: bisect on it (integers). */
    kvpol_config k = *c;
    int lo = 1, hi = e->b->opt.max_ctx, rc;
    eval_row best, cur;
    double best_err = INFINITY;
    memset(&best, 0, sizeof best);
    for (int it = 0; it < 20 && lo <= hi; it++) {
        k.budget = (lo + hi) / 2;
        if ((rc = eval_policy(e, &k, 0, full_nll, &cur))) return rc;
        double err = fabs(cur.kv_retained_mean - target) / target;
        if (err < best_err) {
            best_err = err;
            best = cur;
            best.greedy_match_tokens_mean = k.budget; /* remember the budget */
        }
        if (err <= tol / 2) break;
        if (cur.kv_retained_mean < target)
            lo = k.budget + 1;
        else
            hi = k.budget - 1;
    }
    k.budget = (int)best.greedy_match_tokens_mean;
    /* the chosen budget again, with the free runs */
    if ((rc = eval_policy(e, &k, 1, full_nll, row))) return rc;
    snprintf(row->matched_to, sizeof row->matched_to, "%s", target_name);
    return CK_OK;
}
