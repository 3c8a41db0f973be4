/* policy.c - KV policies: full, window, sinks, h2o and CONF-KV (policy.h).
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
 * within one block (the most recent block is always hot: it is being written). */
#include "policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"
#include "tier.h"

struct kvpol {
    kvpol_config c;
    backend *b;
    kv_pool *pool;
    kv_pool *pool8;   /* int8 hot blocks, or NULL */
    tier *warm;
    int max_blocks;
    float *blockbuf;  /* (kv_block_floats) one block in transit */
    void *bytebuf;    /* (kv8_block_bytes) one int8 block in transit */
    int32_t *order;   /* (max_blocks) candidates, ranked */
    float *rank;      /* (max_blocks) */
    uint8_t *want;    /* (max_blocks) target hot set */
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

/* The defaults won the sweep in docs/BENCHMARKS.md (stories260K, eval set). */
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

static int parse_param(kvpol_config *c, const char *k, size_t kl, const char *v, char *err,
                       size_t errlen) {
    char *end;
    double x = strtod(v, &end);
    int is_num = end != v && (*end == 0 || *end == ',');
#define KEY(name) (kl == strlen(name) && !strncmp(k, name, kl))
    if (KEY("thresholds")) {
        if (!strncmp(v, "adaptive", 8)) c->adaptive = 1;
        else if (!strncmp(v, "fixed", 5)) c->adaptive = 0;
        else goto bad;
        return 0;
    }
    if (KEY("cache_compression")) {
        if (!strncmp(v, "on", 2) || !strncmp(v, "1", 1) || !strncmp(v, "true", 4)) c->cache_compression = 1;
        else if (!strncmp(v, "off", 3) || !strncmp(v, "0", 1) || !strncmp(v, "false", 5)) c->cache_compression = 0;
        else goto bad;
        return 0;
    }
    if (!is_num) goto bad;
    struct { const char *n; int *i; float *f; double lo, hi; } t[] = {
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
        if (t[i].i) *t[i].i = (int)x;
        else *t[i].f = (float)x;
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
    static const struct { const char *name; int kind, int8, needs_n; } kinds[] = {
        {"full", KVPOL_FULL, 0, 0},   {"window", KVPOL_WINDOW, 0, 1}, {"sinks", KVPOL_SINKS, 0, 1},
        {"h2o", KVPOL_H2O, 0, 1},     {"conf", KVPOL_CONF, 0, 0},     {"conf-int8", KVPOL_CONF, 1, 0},
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

int kvpol_new(const kvpol_config *c, backend *b, kv_pool *pool, kv_pool *pool8, tier *warm,
              kvpol **out) {
    *out = NULL;
    kvpol *p = calloc(1, sizeof *p);
    if (!p) return CK_ENOMEM;
    p->c = *c;
    p->b = b;
    p->pool = pool;
    p->warm = warm;
    /* Compressed hot blocks need an int8 pool, a backend that has them, and
     * a compressing warm tier to demote them into. */
    if (c->cache_compression && pool8 && b->ops->kv_compress && b->ops->kv8_read &&
        b->ops->kv8_write && b->ops->kv_expand)
        p->pool8 = pool8;
    p->max_blocks = (b->opt.max_ctx + b->opt.block_size - 1) / b->opt.block_size;
    p->blockbuf = malloc(b->kv_block_floats * sizeof(float));
    p->order = malloc((size_t)p->max_blocks * sizeof *p->order);
    p->rank = malloc((size_t)p->max_blocks * sizeof *p->rank);
    p->want = malloc((size_t)p->max_blocks);
    p->bytebuf = malloc(b->kv8_block_bytes ? b->kv8_block_bytes : 1);
    if (!p->blockbuf || !p->order || !p->rank || !p->want || !p->bytebuf) {
        kvpol_free(p);
        return CK_ENOMEM;
    }
    *out = p;
    return CK_OK;
}

void kvpol_free(kvpol *p) {
    if (!p) return;
    free(p->blockbuf);
    free(p->bytebuf);
    free(p->order);
    free(p->rank);
    free(p->want);
    free(p);
}

const kvpol_stats *kvpol_get_stats(const kvpol *p) { return &p->st; }

void kvpol_begin(kvpol *p, kv_seq *s) {
    memset(&p->st, 0, sizeof p->st);
    p->budget = (float)(p->c.kind == KVPOL_CONF ? p->c.base_size : p->c.budget);
    p->have_ema = 0;
    p->dir = p->dir_run = 0;
    p->breaker = 0;
    p->step = 0;
    /* Entropy grows with log(vocabulary): the configured threshold is for a
     * 32k vocabulary, rescaled to this model's. */
    float lv = logf((float)p->b->m->cfg.vocab_size) / logf(32000.0f);
    p->th_h = p->c.entropy_threshold * lv;
    p->th_gap = p->c.prob_gap_threshold;
    p->th_pmax = p->c.max_prob_threshold;
    p->th_retry = p->c.retry_entropy * lv;
    p->st.budget = (int)p->budget;
}

/* ------------------------------------------------------------- moving */

static int tiered(const kvpol *p) { return p->warm && p->c.kind == KVPOL_CONF; }

/* Hot (f32 or int8) -> warm, or dropped for policies without tiers. */
static int demote(kvpol *p, kv_seq *s, int j) {
    int rc;
    if (s->hot8[j] != KV_NONE) {
        int b8 = s->hot8[j];
        if ((rc = p->b->ops->kv8_read(p->b, b8, p->bytebuf))) return rc;
        tier_put_raw(p->warm, s, j, p->bytebuf, kv_seq_block_tokens(s, j)); /* drops on failure */
        kv_pool_release(p->pool8, b8);
        s->hot8[j] = KV_NONE;
        s->n_hot8--;
        p->st.demotions++;
        return CK_OK;
    }
    int blk = s->hot[j];
    if (tiered(p)) {
        if ((rc = p->b->ops->kv_read(p->b, blk, p->blockbuf))) return rc;
        tier_put(p->warm, s, j, p->blockbuf, kv_seq_block_tokens(s, j)); /* drops on failure */
    } else {
        s->tier[j] = KV_TIER_DROPPED;
        p->st.drops++;
    }
    kv_pool_release(p->pool, blk);
    s->hot[j] = KV_NONE;
    s->n_hot--;
    p->st.demotions++;
    return CK_OK;
}

static void lost(kvpol *p, kv_seq *s, int j) {
    s->tier[j] = KV_TIER_DROPPED;
    s->slot[j] = KV_NONE;
    p->st.drops++;
}

/* Warm -> hot: into an int8 block when `as_int8` (and the slot is int8),
 * else into an f32 block. CK_ENOSPACE when the pool is full. */
static int recall(kvpol *p, kv_seq *s, int j, int as_int8) {
    if (as_int8) {
        int b8 = kv_pool_alloc(p->pool8, s->id, j);
        if (b8 < 0) return b8;
        if (tier_take_raw(p->warm, s->slot[j], p->bytebuf) || p->b->ops->kv8_write(p->b, b8, p->bytebuf)) {
            kv_pool_release(p->pool8, b8);
            lost(p, s, j);
            return CK_OK;
        }
        s->hot8[j] = b8;
        s->n_hot8++;
    } else {
        int blk = kv_pool_alloc(p->pool, s->id, j);
        if (blk < 0) return blk;
        int rc = tier_take(p->warm, s->slot[j], p->blockbuf);
        if (!rc) rc = p->b->ops->kv_write(p->b, blk, p->blockbuf);
        if (rc) {
            kv_pool_release(p->pool, blk);
            lost(p, s, j);
            return CK_OK;
        }
        s->hot[j] = blk;
        s->n_hot++;
    }
    s->tier[j] = KV_TIER_HOT;
    s->slot[j] = KV_NONE;
    p->st.recalls++;
    return CK_OK;
}

/* f32 hot -> int8 hot (cache_compression, outside the recent window). */
static int compress(kvpol *p, kv_seq *s, int j) {
    int b8 = kv_pool_alloc(p->pool8, s->id, j);
    if (b8 < 0) return b8;
    int rc = p->b->ops->kv_compress(p->b, s->hot[j], kv_seq_block_tokens(s, j), b8);
    if (rc) {
        kv_pool_release(p->pool8, b8);
        return rc;
    }
    kv_pool_release(p->pool, s->hot[j]);
    s->hot[j] = KV_NONE;
    s->n_hot--;
    s->hot8[j] = b8;
    s->n_hot8++;
    p->st.compressions++;
    return CK_OK;
}

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
static void select_target(kvpol *p, kv_seq *s, int budget) {
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

static int apply_target(kvpol *p, kv_seq *s) {
    int rc;
    /* Demote first: it frees the pool blocks the recalls take. */
    for (int j = 0; j < s->n_blocks; j++)
        if (!p->want[j] && (s->hot[j] != KV_NONE || s->hot8[j] != KV_NONE) && (rc = demote(p, s, j)))
            return rc;
    for (int j = 0; j < s->n_blocks; j++) {
        if (!p->want[j]) continue;
        int int8 = p->pool8 && !in_f32_tail(p, s, j);
        if (s->tier[j] == KV_TIER_WARM) {
            if (recall(p, s, j, int8) == CK_ENOSPACE) break; /* pool full: try next step */
        } else if (s->tier[j] == KV_TIER_COLD && p->warm) {
            tier_fetch(p->warm, s, j); /* arrives warm in a later step */
        } else if (int8 && s->hot[j] != KV_NONE) {
            if (compress(p, s, j) == CK_ENOSPACE) break;
        }
    }
    return CK_OK;
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
        float lv = logf((float)p->b->m->cfg.vocab_size);
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
        if (dir > 0) p->budget = fminf((float)c->max_size, p->budget / c->scaling_factor);
        else p->budget = fmaxf((float)c->min_size, p->budget * c->scaling_factor);
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
    if ((int)p->budget != (int)old) p->st.budget_changes++;
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

int kvpol_after_prefill(kvpol *p, kv_seq *s) {
    fold_mass(p, s);
    if (p->c.kind == KVPOL_FULL) return CK_OK;
    select_target(p, s, (int)p->budget);
    return apply_target(p, s);
}

int kvpol_after_step(kvpol *p, kv_seq *s, const samp_conf *conf) {
    fold_mass(p, s);
    if (p->c.kind == KVPOL_FULL) return CK_OK;
    if (p->c.kind == KVPOL_CONF) update_budget(p, conf);
    if (p->warm) tier_poll(p->warm);
    select_target(p, s, (int)p->budget);
    return apply_target(p, s);
}

int kvpol_retry(kvpol *p, kv_seq *s, const samp_conf *conf) {
    if (p->c.kind != KVPOL_CONF) return 0;
    int uncertain = (p->th_retry > 0 && conf->entropy > p->th_retry) || conf->pmax < p->c.retry_pmax;
    if (!uncertain) return 0;
    int warm = 0;
    for (int j = 0; j < s->n_blocks && !warm; j++) warm = s->tier[j] == KV_TIER_WARM;
    if (!warm) return 0;
    select_target(p, s, p->c.retry_size);
    uint64_t before = p->st.recalls;
    int rc = apply_target(p, s);
    if (rc) return rc;
    p->st.retries++;
    return p->st.recalls > before;
}

int kvpol_make_room(kvpol *p, kv_seq *s, int blocks) {
    if (p->c.kind == KVPOL_FULL) return CK_ENOSPACE;
    /* Shrink the budget by what is needed and re-select. */
    int bs = s->block_size;
    int hot = kv_seq_hot_tokens(s);
    int budget = hot - blocks * bs;
    if (budget < 1) budget = 1;
    select_target(p, s, budget);
    int rc = apply_target(p, s);
    if (rc) return rc;
    return p->pool->n_free >= blocks ? CK_OK : CK_ENOSPACE;
}

void kvpol_end(kvpol *p, kv_seq *s) {
    if (p->warm) tier_release_seq(p->warm, s);
    for (int j = 0; j < s->max_blocks && s->n_hot8; j++) {
        if (s->hot8[j] == KV_NONE) continue;
        kv_pool_release(p->pool8, s->hot8[j]);
        s->hot8[j] = KV_NONE;
        s->n_hot8--;
    }
}

/* ============================================================ preemption
 * Added for the scheduler (engine.c): a preempted sequence's hot blocks go
 * to a warm tier whatever the policy kind, and come back as they were.
 * moved[j]: 0 stayed, 1 int8 block in the policy's tier (raw bytes),
 * 2 f32 block in the f32 tier (`f32t`, or the policy's tier). */

enum { MOVED_NONE = 0, MOVED_INT8 = 1, MOVED_F32 = 2 };

int kvpol_preempt(kvpol *p, kv_seq *s, uint8_t *moved, struct tier *f32t) {
    const int written = (s->n_tokens + s->block_size - 1) / s->block_size;
    memset(moved, 0, (size_t)s->max_blocks);
    if (!f32t) f32t = p->warm;
    int n8 = 0, n32 = 0;
    for (int j = 0; j < written; j++) {
        n8 += s->hot8[j] != KV_NONE;
        n32 += s->hot8[j] == KV_NONE && s->hot[j] != KV_NONE;
    }
    if ((n8 && !p->warm) || (n32 && !f32t)) return CK_ENOSPACE;
    /* Room: free slots, or ones the tier can spill to the cold store. */
    const tier *t8 = n8 ? p->warm : NULL, *t32 = n32 ? f32t : NULL;
    if (t8 == t32 && t8 && tier_room(t8) < n8 + n32) return CK_ENOSPACE;
    if (t8 && tier_room(t8) < n8) return CK_ENOSPACE;
    if (t32 && tier_room(t32) < n32) return CK_ENOSPACE;
    /* Blocks reserved but not yet written hold nothing: back to the pool. */
    for (int j = written; j < s->n_blocks; j++) {
        if (s->hot[j] == KV_NONE) continue;
        kv_pool_release(p->pool, s->hot[j]);
        s->hot[j] = KV_NONE;
        s->tier[j] = KV_TIER_EMPTY;
        s->n_hot--;
    }
    if (s->n_blocks > written) s->n_blocks = written;
    for (int j = 0; j < written; j++) {
        int rc;
        if (s->hot8[j] != KV_NONE) {
            int b8 = s->hot8[j];
            if ((rc = p->b->ops->kv8_read(p->b, b8, p->bytebuf))) return rc;
            if ((rc = tier_put_raw(p->warm, s, j, p->bytebuf, kv_seq_block_tokens(s, j)))) return rc;
            kv_pool_release(p->pool8, b8);
            s->hot8[j] = KV_NONE;
            s->n_hot8--;
            moved[j] = MOVED_INT8;
        } else if (s->hot[j] != KV_NONE) {
            int blk = s->hot[j];
            if ((rc = p->b->ops->kv_read(p->b, blk, p->blockbuf))) return rc;
            if ((rc = tier_put(f32t, s, j, p->blockbuf, kv_seq_block_tokens(s, j)))) return rc;
            kv_pool_release(p->pool, blk);
            s->hot[j] = KV_NONE;
            s->n_hot--;
            moved[j] = MOVED_F32;
        }
    }
    return CK_OK;
}

int kvpol_resume_blocks(const kvpol *p, const kv_seq *s, const uint8_t *moved, int *f32, int *i8) {
    *f32 = *i8 = 0;
    for (int j = 0; j < s->n_blocks; j++) {
        *i8 += moved[j] == MOVED_INT8;
        *f32 += moved[j] == MOVED_F32;
    }
    return CK_OK;
}

int kvpol_resume(kvpol *p, kv_seq *s, uint8_t *moved, struct tier *f32t) {
    if (!f32t) f32t = p->warm;
    /* Block by block, as each is warm and a pool block is free: a sequence
     * longer than the warm tier comes back from the cold store a part at a
     * time (waiting for all of it to be warm at once could never end). */
    uint64_t recalls = p->st.recalls, drops = p->st.drops;
    int busy = 0, lost_any = 0, rc = CK_OK;
    for (int j = 0; j < s->n_blocks && !rc; j++) {
        if (!moved[j]) continue;
        tier *t = moved[j] == MOVED_INT8 ? p->warm : f32t;
        if (s->tier[j] == KV_TIER_COLD) {
            if (tier_fetch(t, s, j)) lost_any = 1, moved[j] = MOVED_NONE;
            else busy = 1; /* arrives warm during a later tier_poll */
            continue;
        }
        if (s->tier[j] != KV_TIER_WARM) {
            lost_any = 1;
            moved[j] = MOVED_NONE;
            continue;
        }
        if (moved[j] == MOVED_INT8) {
            if (!p->pool8 || !p->pool8->n_free) {
                busy = 1;
                continue;
            }
            rc = recall(p, s, j, 1);
            lost_any |= !rc && s->tier[j] != KV_TIER_HOT;
        } else {
            if (!p->pool->n_free) {
                busy = 1;
                continue;
            }
            int blk = kv_pool_alloc(p->pool, s->id, j);
            if (blk < 0) return blk;
            if (tier_take(f32t, s->slot[j], p->blockbuf) || p->b->ops->kv_write(p->b, blk, p->blockbuf)) {
                kv_pool_release(p->pool, blk);
                s->tier[j] = KV_TIER_DROPPED;
                s->slot[j] = KV_NONE;
                lost_any = 1;
            } else {
                s->hot[j] = blk;
                s->n_hot++;
                s->tier[j] = KV_TIER_HOT;
                s->slot[j] = KV_NONE;
            }
        }
        moved[j] = MOVED_NONE;
    }
    /* Not the policy's doing: keep its statistics about its own decisions. */
    p->st.recalls = recalls;
    p->st.drops = drops;
    if (rc) return rc;
    if (lost_any) return CK_ESTATE;
    return busy ? CK_EBUSY : CK_OK;
}
