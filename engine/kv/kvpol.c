/* kvpol.c - KV policies: full, window, sinks, h2o and CONF-KV (kvpol.h).
 *
 * Every policy works the same way after each step: decide a budget in
 * tokens, mark the blocks that should be hot (protected ones first, then the
 * best-ranked others until the budget is spent), then demote what is hot but
 * unwanted and recall what is wanted but warm. Only the budget rule and the
 * ranking differ:
 *   window   budget fixed, rank = recency only
 *   sinks    budget fixed, first block protected, then recency
 *   h2o      budget fixed, half recent, half by accumulated attention
 *   conf     budget from the smoothed confidence signals; first block and
 *            recent_window protected; rank = attention EMA + recency bonus;
 *            demoted blocks go warm (not lost) and come back when ranked in.
 * Block granularity: a block is hot or not as a whole, so budgets are met to
 * within one block (the most recent block is always hot: it is being written).
 *
 * Decide, then move: select_target marks the wanted set, build_plan turns it
 * into a plan (demote these, recall/fetch/compress those), and the mover
 * (mv.c) carries it out. Nothing here touches the backend or a tier. */
#include "kvpol.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"
#include "mv.h"
#include "tier.h"

struct kvpol {
    kvpol_config c;
    mover *mv;     /* executes the plans (NULL: a planner) */
    int own_mv;    /* kvpol_new made it */
    kv_pool *pool; /* the hot pool (the breaker reads its use) */
    int int8;      /* hot blocks outside the tail become int8 */
    int has_tier;  /* demoted blocks can go warm */
    int vocab;
    int max_blocks;
    int32_t *order;       /* (max_blocks) candidates, ranked */
    float *rank;          /* (max_blocks) */
    uint8_t *want;        /* (max_blocks) target hot set */
    int32_t *demote, *up; /* (max_blocks) the plan's lists */
    uint8_t *up_op;       /* (max_blocks) */
    kv_plan plan;
    /* per-sequence state (kvpol_begin resets it) */
    float budget;
    float ema_h, ema_gap, ema_pmax;
    int have_ema;
    int dir, dir_run;
    int breaker;
    uint32_t step;
    float th_h, th_gap, th_pmax; /* thresholds in use (adaptive moves them) */
    float th_retry;
    kvpol_stats st;
};

/* The defaults are the winners of the sweep in docs/BENCHMARKS.md ("The
 * defaults": stories260K, eval set). */
void kvpol_config_default(kvpol_config *c, int kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->budget = 128;
    c->sink_tokens = 4;
    c->recent_window = 16;
    c->min_size = 56;
    c->base_size = 56;
    c->max_size = 80;
    c->scaling_factor = 0.8f;
    c->entropy_threshold = 3.5f; /* for a 32k vocabulary; scaled by ln(V)/ln(32000) */
    c->prob_gap_threshold = 0.2f;
    c->max_prob_threshold = 0.7f;
    c->adaptive = 0;
    c->signal_ema = 0.5f;
    c->score_ema = 0.9f;
    c->recency_weight = 0.05f;
    c->hysteresis = 2;
    c->retry_entropy = 0;
    c->retry_pmax = 0.5f;
    c->retry_size = 160;
    c->cache_compression = 0;
    c->breaker_threshold = 0.9f;
    c->breaker_release = 0.75f;
}

static int parse_param(kvpol_config *c, const char *k, size_t kl, const char *v, char *err, size_t errlen) {
    char *end;
    double x = strtod(v, &end);
    int is_num = end != v && (*end == 0 || *end == ',');
#define KEY(name) (kl == strlen(name) && !strncmp(k, name, kl))
    if (KEY("thresholds")) {
        if (!strncmp(v, "adaptive", 8))
            c->adaptive = 1;
        else if (!strncmp(v, "fixed", 5))
            c->adaptive = 0;
        else
            goto bad;
        return 0;
    }
    if (KEY("cache_compression")) {
        if (!strncmp(v, "on", 2) || !strncmp(v, "1", 1) || !strncmp(v, "true", 4))
            c->cache_compression = 1;
        else if (!strncmp(v, "off", 3) || !strncmp(v, "0", 1) || !strncmp(v, "false", 5))
            c->cache_compression = 0;
        else
            goto bad;
        return 0;
    }
    if (!is_num) goto bad;
    struct {
        const char *n;
        int *i;
        float *f;
        double lo, hi;
    } t[] = {
        {"budget", &c->budget, NULL, 1, 1 << 24},
        {"sink_tokens", &c->sink_tokens, NULL, 0, 1 << 16},
        {"recent_window", &c->recent_window, NULL, 0, 1 << 24},
        {"min_size", &c->min_size, NULL, 1, 1 << 24},
        {"base_size", &c->base_size, NULL, 1, 1 << 24},
        {"max_size", &c->max_size, NULL, 1, 1 << 24},
        {"hysteresis", &c->hysteresis, NULL, 1, 1000},
        {"scaling_factor", NULL, &c->scaling_factor, 0.01, 1},
        {"entropy_threshold", NULL, &c->entropy_threshold, 0, 100},
        {"prob_gap_threshold", NULL, &c->prob_gap_threshold, 0, 1},
        {"max_prob_threshold", NULL, &c->max_prob_threshold, 0, 1},
        {"signal_ema", NULL, &c->signal_ema, 0.001, 1},
        {"score_ema", NULL, &c->score_ema, 0, 1},
        {"recency_weight", NULL, &c->recency_weight, 0, 1000},
        {"retry_entropy", NULL, &c->retry_entropy, 0, 100},
        {"retry_pmax", NULL, &c->retry_pmax, 0, 1},
        {"retry_size", &c->retry_size, NULL, 1, 1 << 24},
        {"breaker_threshold", NULL, &c->breaker_threshold, 0.01, 1},
        {"breaker_release", NULL, &c->breaker_release, 0, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!KEY(t[i].n)) continue;
        if (!(x >= t[i].lo && x <= t[i].hi)) {
            snprintf(err, errlen, "%s = %g is outside %g..%g", t[i].n, x, t[i].lo, t[i].hi);
            return CK_EINVAL;
        }
        if (t[i].i)
            *t[i].i = (int)x;
        else
            *t[i].f = (float)x;
        return 0;
    }
#undef KEY
    snprintf(err, errlen, "unknown policy parameter '%.*s'", (int)kl, k);
    return CK_EINVAL;
bad:
    snprintf(err, errlen, "bad value for '%.*s'", (int)kl, k);
    return CK_EINVAL;
}

int kvpol_parse(const char *spec, kvpol_config *c, char *err, size_t errlen) {
    static const struct {
        const char *name;
        int kind, int8, needs_n;
    } kinds[] = {
        {"full", KVPOL_FULL, 0, 0}, {"window", KVPOL_WINDOW, 0, 1}, {"sinks", KVPOL_SINKS, 0, 1},
        {"h2o", KVPOL_H2O, 0, 1},   {"conf", KVPOL_CONF, 0, 0},     {"conf-int8", KVPOL_CONF, 1, 0},
    };
    if (!spec || !*spec) {
        snprintf(err, errlen, "empty policy");
        return CK_EINVAL;
    }
    size_t kl = strcspn(spec, ":");
    int k = -1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i].name) == kl && !strncmp(spec, kinds[i].name, kl)) k = (int)i;
    if (k < 0) {
        snprintf(err, errlen, "unknown policy '%.*s' (full, window:N, sinks:N, h2o:N, conf, conf-int8)",
                 (int)kl, spec);
        return CK_EINVAL;
    }
    kvpol_config_default(c, kinds[k].kind);
    c->cache_compression = kinds[k].int8;
    int have_n = 0;
    const char *p = spec + kl;
    while (*p == ':' || *p == ',') {
        p++;
        size_t il = strcspn(p, ",");
        const char *eq = memchr(p, '=', il);
        if (!eq) {
            char *end;
            long n = strtol(p, &end, 10);
            if (end != p + il || n < 1 || n > (1 << 24) || !kinds[k].needs_n) {
                snprintf(err, errlen, "bad policy argument '%.*s'", (int)il, p);
                return CK_EINVAL;
            }
            c->budget = (int)n;
            have_n = 1;
        } else if (parse_param(c, p, (size_t)(eq - p), eq + 1, err, errlen)) {
            return CK_EINVAL;
        } else if (eq - p == 6 && !strncmp(p, "budget", 6)) {
            have_n = 1;
        }
        p += il;
    }
    if (kinds[k].needs_n && !have_n) {
        snprintf(err, errlen, "policy '%s' needs a size, e.g. %s:128", kinds[k].name, kinds[k].name);
        return CK_EINVAL;
    }
    if (c->min_size > c->max_size || c->base_size < c->min_size || c->base_size > c->max_size) {
        snprintf(err, errlen, "need min_size <= base_size <= max_size");
        return CK_EINVAL;
    }
    return CK_OK;
}

void kvpol_name(const kvpol_config *c, char *buf, size_t cap) {
    switch (c->kind) {
    case KVPOL_FULL: snprintf(buf, cap, "full"); break;
    case KVPOL_WINDOW: snprintf(buf, cap, "window:%d", c->budget); break;
    case KVPOL_SINKS: snprintf(buf, cap, "sinks:%d", c->budget); break;
    case KVPOL_H2O: snprintf(buf, cap, "h2o:%d", c->budget); break;
    default: snprintf(buf, cap, "%s", c->cache_compression ? "conf-int8" : "conf"); break;
    }
}

int kvpol_steady_blocks(const kvpol_config *c, int bs, int full) {
    int steady;
    switch (c->kind) {
    case KVPOL_FULL: steady = full; break;
    case KVPOL_CONF: {
        /* protected: the newest block, the sink blocks, the recent window;
         * then ranked blocks up to min_size; +1 for a block opened at a
         * boundary before the policy demotes. */
        int prot = 1 + (c->sink_tokens + bs - 1) / bs + (c->recent_window + bs - 1) / bs;
        int least = (c->min_size + bs - 1) / bs + 1;
        steady = (prot > least ? prot : least) + 1;
        break;
    }
    default: steady = (c->budget + bs - 1) / bs + 2; break;
    }
    return steady < full ? steady : full;
}

int kvpol_can_shrink(const kvpol_config *c) { return c->kind == KVPOL_CONF; }
int kvpol_keeps_all(const kvpol_config *c) { return c->kind == KVPOL_FULL; }
int kvpol_breaker_engaged(const kvpol *p) { return p && p->breaker; }

/* Everything but the mover: the plan's arrays and the per-sequence state. */
static int pol_alloc(const kvpol_config *c, int vocab, int max_blocks, kv_pool *pool, kvpol **out) {
    *out = NULL;
    if (max_blocks < 1) return CK_EINVAL;
    kvpol *p = calloc(1, sizeof *p);
    if (!p) return CK_ENOMEM;
    p->c = *c;
    p->pool = pool;
    p->vocab = vocab;
    p->max_blocks = max_blocks;
    p->order = malloc((size_t)max_blocks * sizeof *p->order);
    p->rank = malloc((size_t)max_blocks * sizeof *p->rank);
    p->want = malloc((size_t)max_blocks);
    p->demote = malloc((size_t)max_blocks * sizeof *p->demote);
    p->up = malloc((size_t)max_blocks * sizeof *p->up);
    p->up_op = malloc((size_t)max_blocks);
    if (!p->order || !p->rank || !p->want || !p->demote || !p->up || !p->up_op) {
        kvpol_free(p);
        return CK_ENOMEM;
    }
    p->plan.demote = p->demote;
    p->plan.up = p->up;
    p->plan.up_op = p->up_op;
    *out = p;
    return CK_OK;
}

/* Compressed hot blocks need an int8 pool, a backend that has them, and a
 * compressing warm tier to demote them into. */
static int int8_ok(const kvpol_config *c, const backend *b, const kv_pool *pool8) {
    return c->cache_compression && pool8 && b->ops->kv_compress && b->ops->kv8_read && b->ops->kv8_write &&
           b->ops->kv_expand;
}

static int with_mover(const kvpol_config *c, mover *mv, int own, kvpol **out) {
    const backend *b = mv_backend(mv);
    int max_blocks = (b->opt.max_ctx + b->opt.block_size - 1) / b->opt.block_size;
    int rc = pol_alloc(c, b->m->cfg.vocab_size, max_blocks, mv_pool(mv), out);
    if (rc) {
        if (own) mv_free(mv);
        return rc;
    }
    kvpol *p = *out;
    p->mv = mv;
    p->own_mv = own;
    p->int8 = int8_ok(c, b, mv_pool8(mv));
    p->has_tier = mv_tier(mv) != NULL;
    return CK_OK;
}

int kvpol_new(const kvpol_config *c, backend *b, kv_pool *pool, kv_pool *pool8, tier *warm, kvpol **out) {
    *out = NULL;
    mover *mv;
    int rc = mv_new(b, pool, int8_ok(c, b, pool8) ? pool8 : NULL, warm, 1, &mv);
    if (rc) return rc;
    return with_mover(c, mv, 1, out);
}

int kvpol_new_mv(const kvpol_config *c, mover *mv, kvpol **out) {
    *out = NULL;
    if (!mv) return CK_EINVAL;
    return with_mover(c, mv, 0, out);
}

int kvpol_new_planner(const kvpol_config *c, const kvpol_geom *g, kvpol **out) {
    *out = NULL;
    if (!g || !g->pool || g->vocab < 2) return CK_EINVAL;
    int rc = pol_alloc(c, g->vocab, g->max_blocks, g->pool, out);
    if (rc) return rc;
    (*out)->int8 = c->cache_compression && g->int8;
    (*out)->has_tier = g->tiered;
    return CK_OK;
}

void kvpol_free(kvpol *p) {
    if (!p) return;
    if (p->own_mv) mv_free(p->mv);
    free(p->order);
    free(p->rank);
    free(p->want);
    free(p->demote);
    free(p->up);
    free(p->up_op);
    free(p);
}

const kvpol_stats *kvpol_get_stats(const kvpol *p) { return &p->st; }
mover *kvpol_mover(const kvpol *p) { return p->mv; }

void kvpol_begin(kvpol *p, kv_seq *s) {
    (void)s;
    memset(&p->st, 0, sizeof p->st);
    p->budget = (float)(p->c.kind == KVPOL_CONF ? p->c.base_size : p->c.budget);
    p->have_ema = 0;
    p->dir = p->dir_run = 0;
    p->breaker = 0;
    p->step = 0;
    /* Entropy grows with log(vocabulary): the configured threshold is for a
     * 32k vocabulary, rescaled to this model's. */
    float lv = logf((float)p->vocab) / logf(32000.0f);
    p->th_h = p->c.entropy_threshold * lv;
    p->th_gap = p->c.prob_gap_threshold;
    p->th_pmax = p->c.max_prob_threshold;
    p->th_retry = p->c.retry_entropy * lv;
    p->st.budget = (int)p->budget;
}

/* ------------------------------------------------------------- the target */

/* Demoted blocks go warm (CONF-KV with a tier) or are dropped. */
static int tiered(const kvpol *p) { return p->has_tier && p->c.kind == KVPOL_CONF; }

/* Heap sort of idx[0..n) by key descending; no allocation. */
static void sift(int32_t *idx, const float *key, int n, int i) {
    for (;;) {
        int m = i, l = 2 * i + 1, r = l + 1;
        if (l < n && key[idx[l]] < key[idx[m]]) m = l;
        if (r < n && key[idx[r]] < key[idx[m]]) m = r;
        if (m == i) return;
        int32_t t = idx[i];
        idx[i] = idx[m];
        idx[m] = t;
        i = m;
    }
}

static void sort_desc(int32_t *idx, const float *key, int n) {
    for (int i = n / 2 - 1; i >= 0; i--) sift(idx, key, n, i);
    for (int e = n - 1; e > 0; e--) {
        int32_t t = idx[0];
        idx[0] = idx[e];
        idx[e] = t;
        sift(idx, key, e, 0);
    }
}

/* Does logical block j stay f32 under cache_compression? Only the block
 * being written: int8 is near-lossless here (docs/BENCHMARKS.md), so every
 * full block is worth compressing. */
static int in_f32_tail(const kvpol *p, const kv_seq *s, int j) {
    (void)p;
    return j == s->n_blocks - 1;
}

static int available(const kv_seq *s, int j) {
    return s->tier[j] == KV_TIER_HOT || s->tier[j] == KV_TIER_WARM || s->tier[j] == KV_TIER_COLD;
}

/* Mark the target set in p->want for a budget of `budget` tokens. */
static void select_target(kvpol *p, const kv_seq *s, int budget) {
    const int n = s->n_blocks, bs = s->block_size;
    memset(p->want, 0, (size_t)n);
    int used = 0;
    if (n == 0) return;
    /* The newest block is always hot: the next position may be written into it. */
    p->want[n - 1] = 1;
    used += kv_seq_block_tokens(s, n - 1);
    int kind = p->c.kind;
    if (kind == KVPOL_SINKS || kind == KVPOL_CONF) {
        int sink_blocks = (p->c.sink_tokens + bs - 1) / bs;
        for (int j = 0; j < sink_blocks && j < n - 1; j++) {
            if (!available(s, j)) continue;
            p->want[j] = 1;
            used += kv_seq_block_tokens(s, j);
        }
    }
    int recent = kind == KVPOL_WINDOW || kind == KVPOL_SINKS ? budget
                 : kind == KVPOL_H2O                         ? budget / 2
                                                             : p->c.recent_window;
    for (int j = n - 2; j >= 0; j--) {
        int t = kv_seq_block_tokens(s, j);
        if (p->want[j]) continue;
        if (!available(s, j)) break;
        /* Recent tokens are protected whole; the window-like policies stop
         * at their budget, CONF-KV's protected window may pass it. */
        int inside = s->n_tokens - (j + 1) * bs < recent;
        if (!inside) break;
        if (kind != KVPOL_CONF && used + t > budget) break;
        p->want[j] = 1;
        used += t;
    }
    if (kind != KVPOL_H2O && kind != KVPOL_CONF) return;
    /* Rank the rest. */
    int m = 0;
    for (int j = 0; j < n - 1; j++) {
        if (p->want[j] || !available(s, j)) continue;
        p->order[m++] = j;
        p->rank[j] = s->score[j];
        if (kind == KVPOL_CONF) p->rank[j] += p->c.recency_weight * (float)(j + 1) / (float)n;
    }
    sort_desc(p->order, p->rank, m);
    for (int i = 0; i < m; i++) {
        int j = p->order[i], t = kv_seq_block_tokens(s, j);
        if (used + t > budget) continue; /* a smaller block may still fit */
        p->want[j] = 1;
        used += t;
    }
}

/* The moves from the block table to the target: demote what is hot but
 * unwanted (first: it frees the pool blocks the recalls take), then, for
 * what is wanted, recall it if warm, fetch it if cold, compress it if it
 * should be int8. Every block's move is known here: demotions never touch
 * a wanted block. */
static const kv_plan *build_plan(kvpol *p, const kv_seq *s) {
    kv_plan *pl = &p->plan;
    pl->n_demote = pl->n_up = 0;
    pl->drop = !tiered(p);
    for (int j = 0; j < s->n_blocks; j++)
        if (!p->want[j] && (s->hot[j] != KV_NONE || s->hot8[j] != KV_NONE)) p->demote[pl->n_demote++] = j;
    for (int j = 0; j < s->n_blocks; j++) {
        if (!p->want[j]) continue;
        int int8 = p->int8 && !in_f32_tail(p, s, j), op = 0;
        if (s->tier[j] == KV_TIER_WARM)
            op = int8 ? MV_RECALL8 : MV_RECALL;
        else if (s->tier[j] == KV_TIER_COLD && p->has_tier)
            op = MV_FETCH;
        else if (int8 && s->hot[j] != KV_NONE)
            op = MV_COMPRESS;
        if (!op) continue;
        p->up[pl->n_up] = j;
        p->up_op[pl->n_up++] = (uint8_t)op;
    }
    return pl;
}

static const kv_plan *no_moves(kvpol *p) {
    p->plan.n_demote = p->plan.n_up = 0;
    p->plan.drop = !tiered(p);
    return &p->plan;
}

/* ------------------------------------------------------------ the budget */

/* Robbins-Monro quantile tracking: th converges to the q-quantile of x. */
static float track_quantile(float th, float x, float q, float eta) {
    return th + eta * (q - (x <= th ? 1.0f : 0.0f));
}

static void update_budget(kvpol *p, const samp_conf *conf) {
    const kvpol_config *c = &p->c;
    float a = c->signal_ema;
    if (!p->have_ema) {
        p->ema_h = conf->entropy;
        p->ema_gap = conf->gap;
        p->ema_pmax = conf->pmax;
        p->have_ema = 1;
    } else {
        p->ema_h += a * (conf->entropy - p->ema_h);
        p->ema_gap += a * (conf->gap - p->ema_gap);
        p->ema_pmax += a * (conf->pmax - p->ema_pmax);
    }
    if (c->adaptive) {
        /* Flag about the least confident third of steps on each signal. */
        float lv = logf((float)p->vocab);
        p->th_h = track_quantile(p->th_h, conf->entropy, 0.67f, 0.01f * lv);
        p->th_gap = track_quantile(p->th_gap, conf->gap, 0.33f, 0.01f);
        p->th_pmax = track_quantile(p->th_pmax, conf->pmax, 0.33f, 0.01f);
    }
    int uncertain = p->ema_h > p->th_h || p->ema_gap < p->th_gap || p->ema_pmax < p->th_pmax;
    int dir = uncertain ? 1 : -1;
    p->dir_run = dir == p->dir ? p->dir_run + 1 : 1;
    p->dir = dir;
    float old = p->budget;
    if (p->dir_run >= c->hysteresis) {
        if (dir > 0)
            p->budget = fminf((float)c->max_size, p->budget / c->scaling_factor);
        else
            p->budget = fmaxf((float)c->min_size, p->budget * c->scaling_factor);
    }
    /* The circuit breaker: a pool nearly full forces minimum budgets. */
    float use = p->pool->n_blocks ? (float)kv_pool_used(p->pool) / (float)p->pool->n_blocks : 0;
    if (!p->breaker && use > c->breaker_threshold) {
        p->breaker = 1;
        p->st.breaker_trips++;
    } else if (p->breaker && use < c->breaker_release) {
        p->breaker = 0;
    }
    if (p->breaker) p->budget = (float)c->min_size;
    if ((int)p->budget != (int)old) {
        p->st.budget_changes++;
        if ((int)p->budget > (int)old)
            p->st.budget_grows++;
        else
            p->st.budget_shrinks++;
    }
    p->st.budget = (int)p->budget;
}

/* Fold the attention mass of the last step into each block's importance. */
static void fold_mass(kvpol *p, kv_seq *s) {
    float d = p->c.kind == KVPOL_H2O ? 1.0f : p->c.score_ema;
    p->step++;
    for (int j = 0; j < s->n_blocks; j++) {
        if (s->hot[j] == KV_NONE && s->hot8[j] == KV_NONE) continue; /* warm blocks keep their score */
        if (s->mass[j] > 0) s->last_use[j] = p->step;
        s->score[j] = d * s->score[j] + s->mass[j];
        s->mass[j] = 0;
    }
}

/* ------------------------------------------------------------- the plans */

int kvpol_plan_prefill(kvpol *p, kv_seq *s, const kv_plan **plan) {
    fold_mass(p, s);
    if (p->c.kind == KVPOL_FULL) {
        *plan = no_moves(p);
        return CK_OK;
    }
    select_target(p, s, (int)p->budget);
    *plan = build_plan(p, s);
    return CK_OK;
}

int kvpol_plan_step(kvpol *p, kv_seq *s, const samp_conf *conf, const kv_plan **plan) {
    fold_mass(p, s);
    if (p->c.kind == KVPOL_FULL) {
        *plan = no_moves(p);
        return CK_OK;
    }
    if (p->c.kind == KVPOL_CONF) update_budget(p, conf);
    select_target(p, s, (int)p->budget);
    *plan = build_plan(p, s);
    return CK_OK;
}

int kvpol_plan_retry(kvpol *p, kv_seq *s, const samp_conf *conf, const kv_plan **plan) {
    if (p->c.kind != KVPOL_CONF) return 0;
    int uncertain = (p->th_retry > 0 && conf->entropy > p->th_retry) || conf->pmax < p->c.retry_pmax;
    if (!uncertain) return 0;
    int warm = 0;
    for (int j = 0; j < s->n_blocks && !warm; j++) warm = s->tier[j] == KV_TIER_WARM;
    if (!warm) return 0;
    select_target(p, s, p->c.retry_size);
    *plan = build_plan(p, s);
    return 1;
}

int kvpol_plan_room(kvpol *p, kv_seq *s, int blocks, const kv_plan **plan) {
    if (p->c.kind == KVPOL_FULL) return CK_ENOSPACE;
    /* Shrink the budget by what is needed and re-select. */
    int bs = s->block_size;
    int hot = kv_seq_hot_tokens(s);
    int budget = hot - blocks * bs;
    if (budget < 1) budget = 1;
    select_target(p, s, budget);
    *plan = build_plan(p, s);
    return CK_OK;
}

/* ------------------------------------------------- plan, then move */

static int run(kvpol *p, kv_seq *s, const kv_plan *pl) {
    if (!p->mv) return CK_ESTATE;
    mv_counts c = {0};
    int rc = mv_run(p->mv, s, pl, &c);
    p->st.demotions += c.demoted;
    p->st.drops += c.dropped;
    p->st.recalls += c.recalled;
    p->st.compressions += c.compressed;
    return rc;
}

int kvpol_after_prefill(kvpol *p, kv_seq *s) {
    const kv_plan *pl;
    int rc = kvpol_plan_prefill(p, s, &pl);
    if (rc || (!pl->n_demote && !pl->n_up)) return rc;
    return run(p, s, pl);
}

int kvpol_after_step(kvpol *p, kv_seq *s, const samp_conf *conf) {
    const kv_plan *pl;
    if (p->c.kind != KVPOL_FULL && p->mv) mv_poll(p->mv);
    int rc = kvpol_plan_step(p, s, conf, &pl);
    if (rc || (!pl->n_demote && !pl->n_up)) return rc;
    return run(p, s, pl);
}

int kvpol_retry(kvpol *p, kv_seq *s, const samp_conf *conf) {
    const kv_plan *pl;
    if (!kvpol_plan_retry(p, s, conf, &pl)) return 0;
    uint64_t before = p->st.recalls;
    int rc = run(p, s, pl);
    if (rc) return rc;
    p->st.retries++;
    return p->st.recalls > before;
}

int kvpol_make_room(kvpol *p, kv_seq *s, int blocks) {
    const kv_plan *pl;
    int rc = kvpol_plan_room(p, s, blocks, &pl);
    if (rc) return rc;
    if ((rc = run(p, s, pl))) return rc;
    return p->pool->n_free >= blocks ? CK_OK : CK_ENOSPACE;
}

void kvpol_end(kvpol *p, kv_seq *s) {
    if (!p->mv) return;
    if (mv_tier(p->mv)) tier_release_seq(mv_tier(p->mv), s);
    kv_pool *pool8 = mv_pool8(p->mv);
    for (int j = 0; j < s->max_blocks && s->n_hot8; j++) {
        if (s->hot8[j] == KV_NONE) continue;
        kv_pool_release(pool8, s->hot8[j]);
        s->hot8[j] = KV_NONE;
        s->n_hot8--;
    }
}
