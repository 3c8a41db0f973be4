/* test_engine.c - the engine and its scheduler (engine.h) on stories260K:
 * greedy results equal gen_run's, admission stays inside the KV budget,
 * preempted sequences resume with the same tokens (from the warm tier or by
 * recomputation), priorities, aging, deadlines, cancellation, stop strings
 * while streaming, and a seeded soak of random arrivals and cancellations
 * that must leave no block and no request behind. The memory plan:
 * test_engine_memory.c. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "engine.h"
#include "gen.h"
#include "kv.h"
#include "model.h"
#include "kvpol.h"
#include "scheduler.h"
#include "tier.h"
#include "test_engine_util.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void config(eng_config *c) {
    eng_config_default(c);
    c->model_path = ck_test_model_path("stories260K.bin");
    c->tokenizer_path = ck_test_model_path("tok512.bin");
    c->backend = "cpu";
    c->threads = 1; /* one thread: attention mass sums in a fixed order */
    c->max_batch_tokens = 128;
    c->kv_budget_bytes = (size_t)4 << 20; /* 819 blocks of 4 tokens: room for every test */
}

static uint64_t submit(eng *e, const eng_request *r) {
    uint64_t id = 0;
    char err[256];
    int rc = eng_submit(e, r, &id, err, sizeof err);
    if (rc) fprintf(stderr, "eng_submit: %s (%s)\n", err, ck_strerror(rc));
    return rc ? 0 : id;
}

/* The single-sequence driver's greedy tokens, for reference. */
static int reference(const char *prompt, const char *policy, int max_tokens, int bs, int32_t *out, int *n_out,
                     int ignore_eos) {
    char err[256];
    model *m = NULL;
    backend *b = NULL;
    tier *warm = NULL;
    kvpol *pol = NULL;
    gen_ctx *g = NULL;
    kv_pool pool, pool8;
    memset(&pool, 0, sizeof pool);
    memset(&pool8, 0, sizeof pool8);
    gen_result r;
    memset(&r, 0, sizeof r);
    int rc = model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                        sizeof err);
    if (rc) return rc;
    be_options o = {
        .max_batch_tokens = 64, .n_kv_blocks = 1024, .block_size = bs, .n_threads = 1, .n_kv8_blocks = 1024};
    kvpol_config pc;
    int32_t ids[512];
    int n = 0;
    if ((rc = be_cpu_new(m, &o, &b, err, sizeof err))) goto out;
    if ((rc = kv_pool_init(&pool, 1024, bs)) || (rc = kv_pool_init(&pool8, 1024, bs))) goto out;
    if ((rc = kvpol_parse(policy, &pc, err, sizeof err))) goto out;
    tier_config tc;
    tier_config_default(&tc, b);
    tc.compress = pc.cache_compression;
    if ((rc = tier_new(&tc, &warm)) || (rc = kvpol_new(&pc, b, &pool, &pool8, warm, &pol))) goto out;
    if ((rc = tok_encode(m->tok, prompt, strlen(prompt), 1, ids, 512, &n))) goto out;
    if ((rc = gen_new(m, b, &pool, 0, &g))) goto out;
    gen_set_policy(g, pol);
    gen_params p;
    gen_params_default(&p);
    p.samp.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = ignore_eos;
    if ((rc = gen_run(g, ids, n, &p, &r))) goto out;
    *n_out = r.n_tokens;
    memcpy(out, r.tokens, (size_t)r.n_tokens * sizeof *out);
out:
    gen_result_free(&r);
    gen_free(g);
    kvpol_free(pol);
    tier_free(warm);
    kv_pool_free(&pool);
    kv_pool_free(&pool8);
    be_free(b);
    model_free(m);
    return rc;
}

static int same_tokens(const int32_t *a, int na, const int32_t *b, int nb) {
    if (na != nb) {
        fprintf(stderr, "  %d tokens vs %d\n", na, nb);
        return 0;
    }
    for (int i = 0; i < na; i++) {
        if (a[i] != b[i]) {
            fprintf(stderr, "  token %d differs: %d vs %d\n", i, a[i], b[i]);
            return 0;
        }
    }
    return 1;
}

/* Every request's stream agrees with its result. */
static int consistent(const got *g) {
    return g->terminal == 1 && (g->error || (g->n_tok == g->res_n && g->text_len == g->res_len &&
                                             !memcmp(g->tok, g->res_tok, (size_t)g->n_tok * sizeof *g->tok) &&
                                             !memcmp(g->text, g->res_text, g->text_len)));
}

static const char *prompts[] = {"Once upon a time", "Lily went to the park", "The cat sat on the mat",
                                "One day, a little boy named Tim"};

/* The engine's block size (eng_config block_size 0: the default). */
static int bs_of(const eng *e) { return kv_default_block_size(eng_model(e)->cfg.seq_len); }

/* ------------------------------------------------------------ the tests */

static void test_greedy_matches_gen(void) {
    const char *policies[] = {"full", "conf", "window:32", "conf-int8"};
    for (int p = 0; p < 4; p++) {
        eng_config c;
        config(&c);
        eng *e = open_engine(&c);
        CK_CHECK(e);
        int bs = bs_of(e);
        static run t;
        memset(&t, 0, sizeof t);
        uint64_t ids[4];
        for (int i = 0; i < 4; i++) { /* all at once: they share every batch */
            eng_request r;
            request(&r, prompts[i], 80);
            r.policy = policies[p];
            ids[i] = submit(e, &r);
            CK_CHECK(ids[i]);
        }
        CK_CHECK(drain(e, &t, 64, 10000, NULL, NULL) == 0);
        for (int i = 0; i < 4; i++) {
            got *g = track(&t, ids[i]);
            int32_t ref[MAXT];
            int nref = 0;
            CK_CHECK(reference(prompts[i], policies[p], 80, bs, ref, &nref, 0) == 0);
            CK_CHECK(consistent(g));
            CK_CHECK_MSG(same_tokens(g->res_tok, g->res_n, ref, nref), "policy %s prompt %d", policies[p], i);
        }
        eng_stats s;
        eng_get_stats(e, &s);
        CK_CHECK(s.hot_blocks_used == 0 && s.int8_bytes == 0 && s.warm_bytes == 0);
        CK_CHECK(s.finished == 4 && s.running == 0 && s.waiting == 0);
        eng_free(e);
    }
}

/* A prompt longer than a step is prefilled in chunks, mixed with other
 * sequences' decode tokens and prefill: still gen_run's tokens. */
static void test_chunked_prefill(void) {
    static char longp[2048];
    longp[0] = 0;
    for (int i = 0; i < 8; i++) strcat(longp, "Once upon a time, there was a little dog named Max. ");
    const char *ps[3] = {longp, prompts[1], prompts[3]};
    const char *policies[2] = {"full", "conf"};
    for (int p = 0; p < 2; p++) {
        eng_config c;
        config(&c);
        c.max_batch_tokens = 40;
        eng *e = open_engine(&c);
        CK_CHECK(e);
        static run t;
        memset(&t, 0, sizeof t);
        uint64_t ids[3];
        for (int i = 0; i < 3; i++) {
            eng_request r;
            request(&r, ps[i], 60);
            r.policy = policies[p];
            r.ignore_eos = 1;
            CK_CHECK((ids[i] = submit(e, &r)));
        }
        CK_CHECK(drain(e, &t, 64, 10000, NULL, NULL) == 0);
        for (int i = 0; i < 3; i++) {
            int32_t ref[MAXT];
            int nref = 0;
            CK_CHECK(reference(ps[i], policies[p], 60, bs_of(e), ref, &nref, 1) == 0);
            got *g = track(&t, ids[i]);
            CK_CHECK(consistent(g));
            CK_CHECK_MSG(same_tokens(g->res_tok, g->res_n, ref, nref), "policy %s prompt %d", policies[p], i);
        }
        eng_free(e);
    }
}

typedef struct budget_check {
    size_t budget;
    int max_running_seen, limit;
} budget_check;

static int check_budget(eng *e, void *arg) {
    budget_check *b = arg;
    eng_stats s;
    eng_get_stats(e, &s);
    if (s.hot_bytes > b->budget || s.hot_blocks_used > s.hot_blocks) return 1;
    if (s.running > b->max_running_seen) b->max_running_seen = s.running;
    return s.running > b->limit;
}

/* Full-policy requests whose whole sequences fit two at a time: never more
 * than two run, the pool stays inside the budget, all finish as alone. */
static void test_admission_budget(void) {
    eng_config c;
    config(&c);
    eng *e0 = open_engine(&c);
    CK_CHECK(e0);
    int bs = bs_of(e0);
    eng_stats s;
    eng_get_stats(e0, &s);
    size_t block = s.hot_capacity_bytes / (size_t)s.hot_blocks;
    eng_free(e0);
    /* "Once upon a time" is 5 tokens; + 100 - 1 written positions. */
    int per = (5 + 100 - 1 + bs - 1) / bs;
    c.kv_budget_bytes = block * (size_t)(2 * per + per / 2);
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    uint64_t ids[5];
    for (int i = 0; i < 5; i++) {
        eng_request r;
        request(&r, prompts[0], 100);
        r.policy = "full";
        r.ignore_eos = 1;
        CK_CHECK((ids[i] = submit(e, &r)));
    }
    budget_check bc = {c.kv_budget_bytes, 0, 2};
    CK_CHECK(drain(e, &t, 64, 10000, check_budget, &bc) == 0);
    CK_CHECK(bc.max_running_seen == 2);
    int32_t ref[MAXT];
    int nref = 0;
    CK_CHECK(reference(prompts[0], "full", 100, bs, ref, &nref, 1) == 0);
    for (int i = 0; i < 5; i++) {
        got *g = track(&t, ids[i]);
        CK_CHECK(consistent(g) && g->finish == GEN_FINISH_LENGTH);
        CK_CHECK(same_tokens(g->res_tok, g->res_n, ref, nref));
    }
    eng_get_stats(e, &s);
    CK_CHECK(s.preemptions == 0 && s.hot_blocks_used == 0);
    eng_free(e);
}

/* Tokens of one request run alone in an engine configured as c. */
static int engine_alone(const eng_config *c, const char *prompt, const char *policy, int max_tokens,
                        int32_t *out, int *n_out) {
    eng *e = open_engine(c);
    if (!e) return -1;
    static run t;
    memset(&t, 0, sizeof t);
    eng_request r;
    request(&r, prompt, max_tokens);
    r.policy = policy;
    r.ignore_eos = 1;
    uint64_t id = submit(e, &r);
    int rc = id ? drain(e, &t, 64, 10000, NULL, NULL) : -1;
    got *g = track(&t, id);
    if (!rc && g) {
        *n_out = g->res_n;
        memcpy(out, g->res_tok, (size_t)g->res_n * sizeof *out);
    }
    eng_free(e);
    return rc;
}

/* A low-priority request runs alone in a pool whose commitments hold one; a
 * high-priority one arrives: the first is preempted, the second runs, then
 * the first resumes and ends with the tokens of an uninterrupted run (and,
 * for full, of gen_run). warm_budget 0: the default tier, the blocks are
 * parked warm; 1 byte: no warm slot, so the sequence is recomputed. */
static void preempt_case(const char *policy, int pool_blocks, size_t warm_budget, int expect_recompute) {
    eng_config c;
    config(&c);
    c.warm_budget_bytes = warm_budget;
    eng *e0 = open_engine(&c);
    CK_CHECK(e0);
    int bs = bs_of(e0);
    eng_stats s;
    eng_get_stats(e0, &s);
    size_t block = s.hot_capacity_bytes / (size_t)s.hot_blocks;
    eng_free(e0);
    c.kv_budget_bytes = block * (size_t)pool_blocks;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    eng_request r;
    request(&r, prompts[0], 120);
    r.policy = policy;
    r.ignore_eos = 1;
    r.priority = 0;
    uint64_t low = submit(e, &r);
    CK_CHECK(low);
    eng_event ev[64];
    for (int i = 0; i < 30; i++) { /* low gets going */
        int n = 0;
        CK_CHECK(eng_step(e, ev, 64, &n) == 0);
        t.steps++;
        CK_CHECK(collect(&t, ev, n) == 0);
    }
    CK_CHECK(track(&t, low)->n_tok >= 20);
    request(&r, prompts[1], 120);
    r.policy = policy;
    r.ignore_eos = 1;
    r.priority = 5;
    uint64_t high = submit(e, &r);
    CK_CHECK(high);
    CK_CHECK(drain(e, &t, 64, 10000, NULL, NULL) == 0);
    got *gl = track(&t, low), *gh = track(&t, high);
    CK_CHECK(consistent(gl) && consistent(gh));
    CK_CHECK_MSG(gh->order == 0 && gl->order == 1, "orders %d %d, preemptions %llu %llu, n %d %d", gh->order,
                 gl->order, (unsigned long long)gh->preemptions, (unsigned long long)gl->preemptions,
                 gh->res_n, gl->res_n); /* high finished first */
    CK_CHECK(gl->preemptions == 1 && gh->preemptions == 0);
    eng_get_stats(e, &s);
    CK_CHECK(s.preemptions == 1);
    CK_CHECK((int)s.recomputes == expect_recompute);
    CK_CHECK(s.hot_blocks_used == 0 && s.warm_bytes == 0 && s.int8_bytes == 0);
    eng_free(e);
    int32_t ref[MAXT];
    int nref = 0;
    CK_CHECK(engine_alone(&c, prompts[0], policy, 120, ref, &nref) == 0);
    CK_CHECK_MSG(same_tokens(gl->res_tok, gl->res_n, ref, nref), "low, policy %s", policy);
    CK_CHECK(engine_alone(&c, prompts[1], policy, 120, ref, &nref) == 0);
    CK_CHECK(same_tokens(gh->res_tok, gh->res_n, ref, nref));
    if (!strcmp(policy, "full")) {
        CK_CHECK(reference(prompts[0], policy, 120, bs, ref, &nref, 1) == 0);
        CK_CHECK(same_tokens(gl->res_tok, gl->res_n, ref, nref));
    }
}

/* full: 31 blocks a request (5 + 119 positions); conf with a fixed 16-token
 * budget: its commitment is 7 blocks (newest + sink + 4 recent + 1). */
#define CONF16 ":min_size=16,base_size=16,max_size=16,recent_window=16,sink_tokens=4"
static void test_preempt_resume(void) { preempt_case("full", 40, 0, 0); }
static void test_preempt_resume_conf(void) { preempt_case("conf" CONF16, 12, 0, 0); }
static void test_preempt_resume_int8(void) { preempt_case("conf-int8" CONF16, 12, 0, 0); }
static void test_preempt_recompute(void) { preempt_case("full", 40, 1, 1); }

/* A continuation (resume_tokens, what a cascade hands a larger model):
 * the request computes them with its prompt and goes on; its result is the
 * uninterrupted run's, tokens and text, and its events release the
 * continuation's text first, then one TOKEN event per new token. */
static void test_resume_tokens(void) {
    eng_config c;
    config(&c);
    int32_t ref[MAXT];
    int nref = 0;
    CK_CHECK(engine_alone(&c, prompts[3], "full", 60, ref, &nref) == 0 && nref == 60);
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t, t0;
    memset(&t0, 0, sizeof t0);
    eng_request r;
    request(&r, prompts[3], 60);
    r.policy = "full";
    r.ignore_eos = 1;
    uint64_t id0 = submit(e, &r);
    CK_CHECK(id0 && drain(e, &t0, 64, 10000, NULL, NULL) == 0);
    const int ks[] = {1, 17, 59};
    for (int i = 0; i < 3; i++) {
        memset(&t, 0, sizeof t);
        r.resume_tokens = ref;
        r.n_resume = ks[i];
        uint64_t id = submit(e, &r);
        CK_CHECK(id && drain(e, &t, 64, 10000, NULL, NULL) == 0);
        got *g = track(&t, id), *g0 = track(&t0, id0);
        CK_CHECK_MSG(same_tokens(g->res_tok, g->res_n, ref, nref), "resume %d", ks[i]);
        CK_CHECK(g->res_len == g0->res_len && !memcmp(g->res_text, g0->res_text, g->res_len));
        CK_CHECK(g->terminal == 1 && g->n_tok == nref - ks[i] &&
                 !memcmp(g->tok, ref + ks[i], (size_t)g->n_tok * 4));
        CK_CHECK(g->text_len == g->res_len && !memcmp(g->text, g->res_text, g->text_len));
    }
    /* refused: as many as max_tokens, outside the vocabulary, with a session */
    uint64_t id;
    char err[256];
    int reason = 0;
    r.n_resume = 60;
    CK_CHECK(eng_submit_why(e, &r, &id, &reason, err, sizeof err) == CK_ETOOLONG &&
             reason == ENG_REJECT_CONTEXT);
    int32_t bad[2] = {1, 1 << 20};
    r.resume_tokens = bad;
    r.n_resume = 2;
    CK_CHECK(eng_submit_why(e, &r, &id, &reason, err, sizeof err) == CK_EINVAL &&
             reason == ENG_REJECT_INVALID);
    r.resume_tokens = ref;
    r.session_id = "s1";
    CK_CHECK(eng_submit_why(e, &r, &id, &reason, err, sizeof err) == CK_EINVAL &&
             reason == ENG_REJECT_INVALID);
    eng_free(e);
}

/* One at a time: higher priority first, ties in arrival order. */
static void test_priorities(void) {
    eng_config c;
    config(&c);
    c.max_running = 1;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    int prio[5] = {0, 1, 2, 1, 3};
    int want[5] = {4, 2, 1, 3, 0}; /* finish rank of each */
    uint64_t ids[5];
    for (int i = 0; i < 5; i++) {
        eng_request r;
        request(&r, prompts[i % 4], 10);
        r.ignore_eos = 1;
        r.priority = prio[i];
        CK_CHECK((ids[i] = submit(e, &r)));
    }
    CK_CHECK(drain(e, &t, 64, 10000, NULL, NULL) == 0);
    for (int i = 0; i < 5; i++) CK_CHECK_MSG(track(&t, ids[i])->order == want[i], "request %d", i);
    eng_stats s;
    eng_get_stats(e, &s);
    CK_CHECK(s.preemptions == 0);
    eng_free(e);
}

/* With aging, a low-priority request that has waited long enough goes
 * before a younger one of higher priority; without aging it does not. */
static void aging_case(int aging_ms, int low_first) {
    eng_config c;
    config(&c);
    c.max_running = 1;
    c.aging_ms = aging_ms;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    eng_request r;
    request(&r, prompts[0], 40);
    r.ignore_eos = 1;
    r.priority = 10; /* the blocker: outranks both */
    uint64_t blocker = submit(e, &r);
    eng_event ev[64];
    int n = 0;
    CK_CHECK(eng_step(e, ev, 64, &n) == 0); /* blocker admitted */
    CK_CHECK(collect(&t, ev, n) == 0);
    r.priority = 0;
    uint64_t low = submit(e, &r);
    sleep_ms(120); /* 6 levels of credit at 20 ms */
    r.priority = 3;
    uint64_t high = submit(e, &r);
    CK_CHECK(blocker && low && high);
    CK_CHECK(drain(e, &t, 64, 10000, NULL, NULL) == 0);
    CK_CHECK(track(&t, blocker)->order == 0);
    CK_CHECK(track(&t, low)->order == (low_first ? 1 : 2));
    CK_CHECK(track(&t, high)->order == (low_first ? 2 : 1));
    eng_free(e);
}

static void test_aging(void) { aging_case(20, 1); }
static void test_no_aging(void) { aging_case(0, 0); }

/* Starvation: a stream of higher-priority requests keeps arriving; with
 * aging the low one still finishes while they keep coming. */
static void test_no_starvation(void) {
    eng_config c;
    config(&c);
    c.max_running = 1;
    c.aging_ms = 10;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    eng_request r;
    request(&r, prompts[2], 8);
    r.ignore_eos = 1;
    r.priority = 2;
    CK_CHECK(submit(e, &r));
    r.priority = 0;
    uint64_t low = submit(e, &r);
    CK_CHECK(low);
    eng_event ev[64];
    int submitted = 0;
    for (int step = 0; step < 20000 && !track(&t, low)->terminal; step++) {
        if (step % 4 == 0 && submitted < 200) { /* always one more high waiting */
            r.priority = 2;
            CK_CHECK(submit(e, &r));
            submitted++;
        }
        int n = 0;
        CK_CHECK(eng_step(e, ev, 64, &n) == 0);
        CK_CHECK(collect(&t, ev, n) == 0);
        if (step % 4 == 0) sleep_ms(1);
    }
    CK_CHECK(track(&t, low)->terminal && track(&t, low)->finish == GEN_FINISH_LENGTH);
    CK_CHECK(submitted < 200); /* it finished while highs were still arriving */
    eng_free(e);
}

static void test_deadlines(void) {
    eng_config c;
    config(&c);
    c.max_running = 1;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    eng_request r;
    request(&r, prompts[0], 200);
    r.ignore_eos = 1;
    r.deadline_ms = eng_now_ms() + 200; /* 8 steps take a few ms, even under ASan */
    uint64_t running = submit(e, &r);
    r.deadline_ms = eng_now_ms() + 100;
    uint64_t waiting = submit(e, &r); /* never admitted: max_running 1 */
    r.deadline_ms = eng_now_ms() - 5; /* already past */
    uint64_t past = submit(e, &r);
    CK_CHECK(running && waiting && past);
    eng_event ev[64];
    for (int i = 0; i < 8; i++) {
        int n = 0;
        CK_CHECK(eng_step(e, ev, 64, &n) == 0);
        CK_CHECK(collect(&t, ev, n) == 0);
    }
    CK_CHECK(track(&t, past)->terminal && track(&t, past)->finish == ENG_FINISH_EXPIRED);
    sleep_ms(220);
    CK_CHECK(drain(e, &t, 64, 1000, NULL, NULL) == 0);
    got *gr = track(&t, running), *gw = track(&t, waiting);
    CK_CHECK(consistent(gr) && consistent(gw));
    CK_CHECK(gr->finish == ENG_FINISH_EXPIRED && gw->finish == ENG_FINISH_EXPIRED);
    CK_CHECK(gr->res_n >= 7 && gr->res_n < 200 && gr->res_len > 0); /* partial text */
    CK_CHECK(gw->res_n == 0);
    eng_stats s;
    eng_get_stats(e, &s);
    CK_CHECK(s.expired == 3 && s.hot_blocks_used == 0);
    eng_free(e);
}

static void test_cancel(void) {
    eng_config c;
    config(&c);
    c.max_running = 4;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    const char *pol[3] = {"conf-int8", "conf:min_size=8,base_size=8,max_size=8,recent_window=8,retry_pmax=0",
                          "full"};
    uint64_t ids[8];
    for (int i = 0; i < 8; i++) {
        eng_request r;
        request(&r, prompts[i % 4], 300);
        r.ignore_eos = 1;
        r.policy = pol[i % 3];
        CK_CHECK((ids[i] = submit(e, &r)));
    }
    eng_event ev[64];
    for (int i = 0; i < 60; i++) {
        int n = 0;
        CK_CHECK(eng_step(e, ev, 64, &n) == 0);
        CK_CHECK(collect(&t, ev, n) == 0);
    }
    eng_stats s;
    eng_get_stats(e, &s);
    CK_CHECK(s.running == 4 && s.waiting == 4 && s.hot_blocks_used > 0);
    CK_CHECK(s.int8_bytes > 0 && s.warm_bytes > 0); /* the policies are at work */
    for (int i = 0; i < 8; i++) CK_CHECK(eng_cancel(e, ids[i]) == 0);
    CK_CHECK(eng_cancel(e, ids[0]) == CK_ENOTFOUND);
    CK_CHECK(eng_cancel(e, 12345) == CK_ENOTFOUND);
    eng_get_stats(e, &s);
    CK_CHECK(s.hot_blocks_used == 0 && s.int8_bytes == 0 && s.warm_bytes == 0);
    CK_CHECK(s.running == 0 && s.waiting == 0 && !eng_idle(e)); /* events still to read */
    CK_CHECK(drain(e, &t, 3, 100, NULL, NULL) == 0);
    for (int i = 0; i < 8; i++) {
        got *g = track(&t, ids[i]);
        CK_CHECK(consistent(g) && g->finish == ENG_FINISH_CANCELLED);
    }
    CK_CHECK(eng_idle(e));
    eng_free(e);
}

/* Stop strings end the text before them, and streamed pieces never show a
 * stop string, even when events are read one at a time. */
static void test_stop_streaming(void) {
    eng_config c;
    config(&c);
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    eng_request r;
    request(&r, prompts[0], 200);
    r.n_stop = 2;
    r.stop[0] = "park.";
    r.stop[1] = "zzzz";
    uint64_t id = submit(e, &r);
    CK_CHECK(id);
    CK_CHECK(drain(e, &t, 1, 10000, NULL, NULL) == 0);
    got *g = track(&t, id);
    CK_CHECK(consistent(g));
    CK_CHECK(g->finish == GEN_FINISH_STOP);
    g->text[g->text_len] = 0;
    CK_CHECK(g->text_len > 10 && !strstr(g->text, "park."));
    CK_CHECK(!strcmp(g->text + g->text_len - 5, " the "));
    eng_free(e);
}

static void test_submit_errors(void) {
    eng_config c;
    config(&c);
    c.max_queue = 2;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    eng_request r;
    uint64_t id;
    char err[256];
    request(&r, prompts[0], 10);
    r.samp.temperature = -1;
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == CK_EINVAL);
    request(&r, prompts[0], 10);
    r.policy = "bogus";
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == CK_EINVAL && strstr(err, "bogus"));
    request(&r, prompts[0], 600);
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == CK_ETOOLONG);
    request(&r, prompts[0], 507); /* 5 + 507 = 512: fits exactly */
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == 0);
    int32_t bad[2] = {1, 9999};
    request(&r, prompts[0], 10);
    r.prompt = NULL;
    r.tokens = bad;
    r.n_tokens = 2;
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == CK_EINVAL);
    bad[1] = 300;
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == 0);
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == CK_EBUSY);
    eng_free(e); /* frees the two waiting requests */
    /* A pool smaller than one full request. */
    config(&c);
    c.kv_budget_bytes = 200000;
    e = open_engine(&c);
    CK_CHECK(e);
    request(&r, prompts[0], 400);
    r.policy = "full";
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == CK_ENOSPACE);
    r.policy = "conf";
    CK_CHECK(eng_submit(e, &r, &id, err, sizeof err) == 0);
    eng_free(e);
}

/* ---------------------------------------------------------------- soak */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int check_soak(eng *e, void *arg) {
    eng_stats s;
    eng_get_stats(e, &s);
    return s.hot_blocks_used > s.hot_blocks || s.running > 6;
}

static void soak(uint64_t seed, size_t warm_budget) {
    eng_config c;
    config(&c);
    c.max_running = 6;
    c.max_batch_tokens = 48;
    c.kv_budget_bytes = 60 * 5120; /* 60 blocks of 4 tokens: tight */
    c.warm_budget_bytes = warm_budget;
    c.aging_ms = 50;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    static run t;
    memset(&t, 0, sizeof t);
    const char *pol[] = {"full",
                         "conf",
                         "conf-int8",
                         "window:24",
                         "sinks:24",
                         "h2o:24",
                         "conf:min_size=8,base_size=16,recent_window=8"};
    uint64_t live[MAXR];
    int n_live = 0, submitted = 0, cancels = 0;
    uint64_t s = seed;
    eng_event ev[64];
    while (submitted < 120 || !eng_idle(e)) {
        if (submitted < 120 && rng_next(&s) % 3 == 0) {
            eng_request r;
            request(&r, prompts[rng_next(&s) % 4], 1 + (int)(rng_next(&s) % 60));
            r.policy = pol[rng_next(&s) % 7];
            r.priority = (int)(rng_next(&s) % 4);
            r.ignore_eos = (int)(rng_next(&s) % 2);
            if (rng_next(&s) % 4 == 0) {
                r.samp.temperature = 0.8f;
                r.samp.seed = rng_next(&s);
            }
            if (rng_next(&s) % 8 == 0) r.deadline_ms = eng_now_ms() + (int64_t)(rng_next(&s) % 50);
            uint64_t id = submit(e, &r);
            CK_CHECK(id);
            live[n_live++] = id;
            submitted++;
        }
        if (n_live && rng_next(&s) % 16 == 0) {
            int k = (int)(rng_next(&s) % (uint64_t)n_live);
            int rc = eng_cancel(e, live[k]);
            CK_CHECK(rc == 0 || rc == CK_ENOTFOUND);
            cancels += rc == 0;
            live[k] = live[--n_live];
        }
        int n = 0, max_ev = 1 + (int)(rng_next(&s) % 16);
        CK_CHECK(eng_step(e, ev, max_ev, &n) == 0);
        t.steps++;
        CK_CHECK(collect(&t, ev, n) == 0);
        CK_CHECK(check_soak(e, NULL) == 0);
        CK_CHECK(t.steps < 100000);
    }
    eng_stats st;
    eng_get_stats(e, &st);
    CK_CHECK(t.n == 120);
    for (int i = 0; i < t.n; i++) CK_CHECK_MSG(consistent(&t.g[i]), "request %d", i);
    CK_CHECK(st.hot_blocks_used == 0 && st.int8_bytes == 0 && st.warm_bytes == 0);
    CK_CHECK(st.running == 0 && st.waiting == 0 && st.submitted == 120);
    CK_CHECK(st.finished + st.failed == 120 && st.failed == 0);
    CK_CHECK(st.cancelled == (uint64_t)cancels);
    fprintf(stderr, "  soak %llu: %d steps, %llu preemptions (%llu recomputed), %d cancels, %llu expired\n",
            (unsigned long long)seed, t.steps, (unsigned long long)st.preemptions,
            (unsigned long long)st.recomputes, cancels, (unsigned long long)st.expired);
    CK_CHECK(st.preemptions > 0);
    eng_free(e);
}

static void test_soak(void) { soak(7, 0); }
static void test_soak_small_warm(void) { soak(11, 16 * 5120); }

int main(void) {
    CK_RUN(test_greedy_matches_gen);
    CK_RUN(test_chunked_prefill);
    CK_RUN(test_admission_budget);
    CK_RUN(test_preempt_resume);
    CK_RUN(test_preempt_resume_conf);
    CK_RUN(test_preempt_resume_int8);
    CK_RUN(test_preempt_recompute);
    CK_RUN(test_resume_tokens);
    CK_RUN(test_priorities);
    CK_RUN(test_aging);
    CK_RUN(test_no_aging);
    CK_RUN(test_no_starvation);
    CK_RUN(test_deadlines);
    CK_RUN(test_cancel);
    CK_RUN(test_stop_streaming);
    CK_RUN(test_submit_errors);
    CK_RUN(test_soak);
    CK_RUN(test_soak_small_warm);
    return ck_test_summary();
}
