/* test_kvpol_plan.c - policies decide without a backend: each plan
 * (kvpol.h kvpol_plan_*, mv.h kv_plan) is checked against block lists
 * worked out by hand from the policy's rule, and planning moves nothing
 * (the block table and the pool are as before). Also the steady-state
 * commitments (kvpol_steady_blocks) against their formulas. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
#include "kv.h"
#include "mv.h"
#include "kvpol.h"

#define BS 4
#define MAXTOK 512

static kv_pool pool;

/* A sequence of n tokens whose blocks are all hot (reserved from pool). */
static void hot_seq(kv_seq *s, int n) {
    kv_seq_init(s, 7, MAXTOK, BS);
    CK_CHECK(kv_seq_reserve(s, &pool, n) == 0);
    kv_seq_commit(s, n);
}

/* Block j leaves the pool and is marked in tier t (WARM / COLD), as the
 * mover would have left it. */
static void mark(kv_seq *s, int j, int t) {
    kv_pool_release(&pool, s->hot[j]);
    s->hot[j] = KV_NONE;
    s->n_hot--;
    s->tier[j] = (uint8_t)t;
    s->slot[j] = t == KV_TIER_WARM ? j : KV_NONE;
}

static kvpol *planner(const char *spec, int int8, int tiered) {
    kvpol_config c;
    char err[128];
    if (kvpol_parse(spec, &c, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", spec, err);
        return NULL;
    }
    kvpol_geom g = {.vocab = 512, .max_blocks = MAXTOK / BS, .pool = &pool, .int8 = int8, .tiered = tiered};
    kvpol *p = NULL;
    return kvpol_new_planner(&c, &g, &p) ? NULL : p;
}

static int list_is(const int32_t *v, int n, const int32_t *want, int nw) {
    if (n != nw) return 0;
    for (int i = 0; i < n; i++)
        if (v[i] != want[i]) return 0;
    return 1;
}

/* A snapshot of what must not change while planning. */
typedef struct snap {
    int n_hot, n_free;
    int32_t hot[MAXTOK / BS];
    uint8_t tier[MAXTOK / BS];
} snap;

static void take(snap *a, const kv_seq *s) {
    a->n_hot = s->n_hot;
    a->n_free = pool.n_free;
    memcpy(a->hot, s->hot, sizeof a->hot);
    memcpy(a->tier, s->tier, sizeof a->tier);
}

static int same(const snap *a, const kv_seq *s) {
    return a->n_hot == s->n_hot && a->n_free == pool.n_free && !memcmp(a->hot, s->hot, sizeof a->hot) &&
           !memcmp(a->tier, s->tier, sizeof a->tier);
}

/* window:16 on 40 tokens (10 blocks of 4): the newest block, then blocks
 * whose end is within 16 tokens of the end while the budget lasts: 9, 8,
 * 7, 6 (block 5 ends 16 tokens back: out). Everything else is dropped. */
static void test_window(void) {
    kvpol *p = planner("window:16", 0, 1);
    CK_CHECK(p != NULL);
    kv_seq s;
    hot_seq(&s, 40);
    kvpol_begin(p, &s);
    snap a;
    take(&a, &s);
    const kv_plan *pl = NULL;
    CK_CHECK(kvpol_plan_prefill(p, &s, &pl) == 0 && pl);
    const int32_t want[] = {0, 1, 2, 3, 4, 5};
    CK_CHECK_MSG(list_is(pl->demote, pl->n_demote, want, 6), "window demotes %d blocks", pl->n_demote);
    CK_CHECK(pl->n_up == 0);
    CK_CHECK(pl->drop == 1); /* a window forgets: no warm tier for it */
    CK_CHECK(same(&a, &s));  /* a plan moves nothing */
    kv_seq_reset(&s, &pool);
    kv_seq_free(&s);
    kvpol_free(p);
}

/* sinks:16 on 40 tokens: the sink block 0 (4 sink tokens), the newest
 * block 9, then 8 and 7 fill the 16-token budget; 1..6 go. */
static void test_sinks(void) {
    kvpol *p = planner("sinks:16", 0, 1);
    CK_CHECK(p != NULL);
    kv_seq s;
    hot_seq(&s, 40);
    kvpol_begin(p, &s);
    const kv_plan *pl = NULL;
    CK_CHECK(kvpol_plan_prefill(p, &s, &pl) == 0);
    const int32_t want[] = {1, 2, 3, 4, 5, 6};
    CK_CHECK_MSG(list_is(pl->demote, pl->n_demote, want, 6), "sinks demotes %d blocks", pl->n_demote);
    CK_CHECK(pl->n_up == 0);
    kv_seq_reset(&s, &pool);
    kv_seq_free(&s);
    kvpol_free(p);
}

/* full keeps everything and refuses to shrink. */
static void test_full(void) {
    kvpol *p = planner("full", 0, 1);
    CK_CHECK(p != NULL);
    kv_seq s;
    hot_seq(&s, 40);
    kvpol_begin(p, &s);
    const kv_plan *pl = NULL;
    samp_conf unsure = {.entropy = 5, .gap = 0.01f, .pmax = 0.1f};
    CK_CHECK(kvpol_plan_step(p, &s, &unsure, &pl) == 0 && pl->n_demote == 0 && pl->n_up == 0);
    CK_CHECK(kvpol_plan_room(p, &s, 3, &pl) == CK_ENOSPACE);
    CK_CHECK(kvpol_plan_retry(p, &s, &unsure, &pl) == 0);
    CK_CHECK(!kvpol_can_shrink(&(kvpol_config){.kind = KVPOL_FULL}));
    kv_seq_reset(&s, &pool);
    kv_seq_free(&s);
    kvpol_free(p);
}

/* conf (budget 56 tokens > 40): every available block is wanted. Warm
 * blocks 2 and 3 come back (recall), cold block 5 is fetched, nothing is
 * demoted; with int8 hot blocks every full hot block but the newest is
 * compressed and warm ones come back as int8. */
static void test_conf_recall_fetch_compress(void) {
    for (int int8 = 0; int8 < 2; int8++) {
        kvpol *p = planner(int8 ? "conf-int8" : "conf", int8, 1);
        CK_CHECK(p != NULL);
        kv_seq s;
        hot_seq(&s, 40);
        mark(&s, 2, KV_TIER_WARM);
        mark(&s, 3, KV_TIER_WARM);
        mark(&s, 5, KV_TIER_COLD);
        kvpol_begin(p, &s);
        snap a;
        take(&a, &s);
        const kv_plan *pl = NULL;
        CK_CHECK(kvpol_plan_prefill(p, &s, &pl) == 0);
        CK_CHECK(pl->n_demote == 0 && pl->drop == 0);
        if (!int8) {
            const int32_t up[] = {2, 3, 5};
            const uint8_t op[] = {MV_RECALL, MV_RECALL, MV_FETCH};
            CK_CHECK(list_is(pl->up, pl->n_up, up, 3) && !memcmp(pl->up_op, op, 3));
        } else {
            /* 0..8 in order, 9 (the tail) stays f32 */
            const int32_t up[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
            const uint8_t op[] = {MV_COMPRESS, MV_COMPRESS, MV_RECALL8,  MV_RECALL8, MV_COMPRESS,
                                  MV_FETCH,    MV_COMPRESS, MV_COMPRESS, MV_COMPRESS};
            CK_CHECK_MSG(list_is(pl->up, pl->n_up, up, 9) && !memcmp(pl->up_op, op, 9), "int8 plan: %d ups",
                         pl->n_up);
        }
        CK_CHECK(same(&a, &s));
        /* Without a tier a cold block cannot be fetched: it is not planned. */
        kvpol *q = planner("conf", 0, 0);
        CK_CHECK(q != NULL);
        kvpol_begin(q, &s);
        CK_CHECK(kvpol_plan_prefill(q, &s, &pl) == 0);
        CK_CHECK(pl->drop == 1);
        for (int i = 0; i < pl->n_up; i++) CK_CHECK(pl->up_op[i] != MV_FETCH);
        kvpol_free(q);
        for (int j = 0; j < s.n_blocks; j++) s.tier[j] = s.hot[j] != KV_NONE ? KV_TIER_HOT : KV_TIER_EMPTY;
        kv_seq_reset(&s, &pool);
        kv_seq_free(&s);
        kvpol_free(p);
    }
}

/* conf under pressure: plan_room(k) re-selects for (hot - k blocks) tokens.
 * The protected blocks (sink block 0, the recent window of 16 tokens: 4
 * blocks, the newest) never go, and what stays hot fits the smaller budget
 * to within the protected blocks. */
static void test_conf_room(void) {
    kvpol *p = planner("conf", 0, 1);
    CK_CHECK(p != NULL);
    kv_seq s;
    hot_seq(&s, 200);                                                         /* 50 blocks */
    for (int j = 0; j < s.n_blocks; j++) s.score[j] = (float)((j * 37) % 11); /* a ranking */
    kvpol_begin(p, &s);
    const kv_plan *pl = NULL;
    CK_CHECK(kvpol_plan_room(p, &s, 40, &pl) == 0);
    uint8_t gone[64] = {0};
    for (int i = 0; i < pl->n_demote; i++) gone[pl->demote[i]] = 1;
    CK_CHECK(!gone[0] && !gone[49] && !gone[48] && !gone[47] && !gone[46]);
    int kept = 0;
    for (int j = 0; j < s.n_blocks; j++) kept += !gone[j];
    /* budget = 200 - 40 * 4 = 40 tokens: 10 blocks (the protected 6 among them) */
    CK_CHECK_MSG(kept == 10, "kept %d blocks", kept);
    CK_CHECK(pl->n_up == 0);
    CK_CHECK(kvpol_can_shrink(&(kvpol_config){.kind = KVPOL_CONF}));
    kv_seq_reset(&s, &pool);
    kv_seq_free(&s);
    kvpol_free(p);
}

/* A retry: only CONF-KV, only when uncertain (p_max below retry_pmax 0.5),
 * only with a warm block; then the plan recalls it. */
static void test_conf_retry(void) {
    kvpol *p = planner("conf", 0, 1);
    CK_CHECK(p != NULL);
    kv_seq s;
    hot_seq(&s, 40);
    kvpol_begin(p, &s);
    samp_conf sure = {.entropy = 0.1f, .gap = 0.9f, .pmax = 0.95f};
    samp_conf unsure = {.entropy = 3, .gap = 0.05f, .pmax = 0.3f};
    const kv_plan *pl = NULL;
    CK_CHECK(kvpol_plan_retry(p, &s, &unsure, &pl) == 0); /* nothing warm */
    mark(&s, 4, KV_TIER_WARM);
    CK_CHECK(kvpol_plan_retry(p, &s, &sure, &pl) == 0); /* confident */
    CK_CHECK(kvpol_plan_retry(p, &s, &unsure, &pl) == 1);
    const int32_t up[] = {4};
    CK_CHECK(list_is(pl->up, pl->n_up, up, 1) && pl->up_op[0] == MV_RECALL);
    kvpol *w = planner("window:16", 0, 1);
    CK_CHECK(w != NULL);
    kvpol_begin(w, &s);
    CK_CHECK(kvpol_plan_retry(w, &s, &unsure, &pl) == 0);
    kvpol_free(w);
    s.tier[4] = KV_TIER_EMPTY;
    kv_seq_reset(&s, &pool);
    kv_seq_free(&s);
    kvpol_free(p);
}

/* The CONF-KV budget moves down on confident steps to min_size, and plans
 * then demote what falls outside it (warm: tiered). */
static void test_conf_budget_plan(void) {
    kvpol *p = planner("conf:min_size=16,base_size=32,max_size=64,hysteresis=1,signal_ema=1", 0, 1);
    CK_CHECK(p != NULL);
    kv_seq s;
    hot_seq(&s, 120); /* 30 blocks */
    kvpol_begin(p, &s);
    samp_conf sure = {.entropy = 0.01f, .gap = 0.99f, .pmax = 0.995f};
    const kv_plan *pl = NULL;
    for (int i = 0; i < 20; i++) CK_CHECK(kvpol_plan_step(p, &s, &sure, &pl) == 0);
    CK_CHECK(kvpol_get_stats(p)->budget == 16);
    CK_CHECK(pl->drop == 0);
    /* protected: block 0 (sinks), the newest (29) and the blocks ending
     * within 16 tokens of the end (26..28): 5 blocks, already past the
     * 16-token budget, so no ranked block joins them and the other 25 go
     * (the planner moved nothing, so each plan starts from all 30 hot) */
    CK_CHECK_MSG(pl->n_demote == 25, "%d demotions", pl->n_demote);
    kv_seq_reset(&s, &pool);
    kv_seq_free(&s);
    kvpol_free(p);
}

static void test_steady_blocks(void) {
    kvpol_config c;
    char err[64];
    /* full: the whole sequence */
    CK_CHECK(kvpol_parse("full", &c, err, sizeof err) == 0 && kvpol_steady_blocks(&c, 4, 100) == 100);
    /* window:64 at 4-token blocks: 16 blocks + 2 (a block opened before the demotion, a partial one) */
    CK_CHECK(kvpol_parse("window:64", &c, err, sizeof err) == 0 && kvpol_steady_blocks(&c, 4, 100) == 18);
    CK_CHECK(kvpol_steady_blocks(&c, 4, 10) == 10); /* never more than the whole */
    /* conf defaults (sinks 4, recent 16, min 56) at 4: protected 1 + 1 + 4 = 6,
     * min_size 14 + 1 = 15; the larger + 1 = 16 */
    CK_CHECK(kvpol_parse("conf", &c, err, sizeof err) == 0 && kvpol_steady_blocks(&c, 4, 100) == 16);
    /* conf with a long recent window: protected 1 + 1 + 25 = 27 wins, + 1 */
    CK_CHECK(kvpol_parse("conf:recent_window=100", &c, err, sizeof err) == 0 &&
             kvpol_steady_blocks(&c, 4, 100) == 28);
}

/* Every test gave its blocks back. */
static void test_no_leak(void) { CK_CHECK(kv_pool_used(&pool) == 0); }

int main(void) {
    kv_pool_init(&pool, 256, BS);
    CK_RUN(test_window);
    CK_RUN(test_sinks);
    CK_RUN(test_full);
    CK_RUN(test_conf_recall_fetch_compress);
    CK_RUN(test_conf_room);
    CK_RUN(test_conf_retry);
    CK_RUN(test_conf_budget_plan);
    CK_RUN(test_steady_blocks);
    CK_RUN(test_no_leak);
    kv_pool_free(&pool);
    return ck_test_summary();
}
