/* test_engine_hybrid.c - the engine with a model whose layers keep a
 * recurrent state (lfm2 and granitehybrid, synthetic): every running sequence holds its own
 * state slot, so sequences batched together, prefilled in small chunks
 * beside others' decode tokens, give the tokens of each one run alone; a
 * preempted sequence gives its slot back and is recomputed from its first
 * token, and still ends with those tokens; what the state cannot follow
 * (sessions, cache templates, keep_prefix, policy retries) is refused
 * naming the feature and the architecture; the plan holds max_running
 * slots and no prefix cache. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "engine.h"
#include "model.h"
#include "quant.h"
#include "test_engine_util.h"

static char path[64];
static const char *arch_name; /* the model's architecture, which the refusals name */
static size_t want_state;     /* its state floats a sequence, from the synth parameters */

static void config(eng_config *c) {
    eng_config_default(c);
    c->model_path = path;
    c->backend = "cpu";
    c->threads = 1;
    c->max_batch_tokens = 64;
    c->max_running = 4;
    c->kv_budget_bytes = (size_t)4 << 20;
}

static uint64_t submit(eng *e, const eng_request *r, char *err, size_t errlen, int *rc_out) {
    uint64_t id = 0;
    int rc = eng_submit(e, r, &id, err, errlen);
    if (rc_out) *rc_out = rc;
    return rc ? 0 : id;
}

static const char *prompts[] = {"Once upon a time", "Lily went to the park with her red ball",
                                "The cat sat on the mat", "One day, a little boy named Tim saw a big dog"};

/* The tokens of one request run alone in an engine configured as c. */
static int alone(const eng_config *c, const char *prompt, int max_tokens, int32_t *out, int *n_out) {
    eng *e = open_engine(c);
    if (!e) return -1;
    static run t;
    memset(&t, 0, sizeof t);
    eng_request r;
    request(&r, prompt, max_tokens);
    r.policy = "full";
    r.ignore_eos = 1;
    char err[256];
    uint64_t id = submit(e, &r, err, sizeof err, NULL);
    int rc = id ? drain(e, &t, 64, 10000, NULL, NULL) : -1;
    got *g = track(&t, id);
    if (!rc && g) {
        *n_out = g->res_n;
        memcpy(out, g->res_tok, (size_t)g->res_n * sizeof *out);
    }
    eng_free(e);
    return rc;
}

static int same(const got *g, const int32_t *ref, int nref) {
    if (g->res_n != nref) return 0;
    for (int i = 0; i < nref; i++)
        if (g->res_tok[i] != ref[i]) return 0;
    return 1;
}

/* Four at once, prefill chunks of 5 tokens between the others' decode
 * tokens: each equals its run alone (whole prompt in one batch). */
static void test_batched_equals_alone(void) {
    eng_config c;
    config(&c);
    c.max_batch_tokens = 5;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    if (!e) return;
    static run t;
    memset(&t, 0, sizeof t);
    uint64_t ids[4];
    char err[256];
    for (int i = 0; i < 4; i++) {
        eng_request r;
        request(&r, prompts[i], 24);
        r.policy = "full";
        r.ignore_eos = 1;
        CK_CHECK((ids[i] = submit(e, &r, err, sizeof err, NULL)));
    }
    CK_CHECK(drain(e, &t, 64, 10000, NULL, NULL) == 0);
    eng_free(e);
    config(&c);
    for (int i = 0; i < 4; i++) {
        int32_t ref[MAXT];
        int nref = 0;
        got *g = track(&t, ids[i]);
        CK_CHECK(alone(&c, prompts[i], 24, ref, &nref) == 0 && nref == 24);
        CK_CHECK_MSG(g->terminal == 1 && !g->error && same(g, ref, nref), "prompt %d", i);
    }
}

/* One running slot: a low-priority request is preempted by a high one,
 * gives its slot back, and is recomputed from its first token. */
static void test_preempt_recomputes(void) {
    eng_config c;
    config(&c);
    c.max_running = 1;
    eng *e = open_engine(&c);
    CK_CHECK(e);
    if (!e) return;
    static run t;
    memset(&t, 0, sizeof t);
    char err[256];
    eng_request r;
    request(&r, prompts[0], 40);
    r.policy = "full";
    r.ignore_eos = 1;
    uint64_t low = submit(e, &r, err, sizeof err, NULL);
    eng_event ev[64];
    for (int i = 0; i < 10; i++) {
        int n = 0;
        CK_CHECK(eng_step(e, ev, 64, &n) == 0);
        t.steps++;
        CK_CHECK(collect(&t, ev, n) == 0);
    }
    CK_CHECK(track(&t, low)->n_tok >= 5);
    request(&r, prompts[1], 40);
    r.policy = "full";
    r.ignore_eos = 1;
    r.priority = 5;
    uint64_t high = submit(e, &r, err, sizeof err, NULL);
    CK_CHECK(low && high);
    CK_CHECK(drain(e, &t, 64, 10000, NULL, NULL) == 0);
    eng_stats s;
    eng_get_stats(e, &s);
    CK_CHECK_MSG(s.preemptions == 1 && s.recomputes == 1, "preemptions %llu, recomputes %llu",
                 (unsigned long long)s.preemptions, (unsigned long long)s.recomputes);
    eng_free(e);
    int32_t ref[MAXT];
    int nref = 0;
    CK_CHECK(alone(&c, prompts[0], 40, ref, &nref) == 0);
    CK_CHECK(same(track(&t, low), ref, nref) && track(&t, low)->preemptions == 1);
    CK_CHECK(alone(&c, prompts[1], 40, ref, &nref) == 0);
    CK_CHECK(same(track(&t, high), ref, nref));
}

/* What the state cannot follow, refused naming it and the architecture. */
static void test_refusals(void) {
    eng_config c;
    config(&c);
    eng *e = open_engine(&c);
    CK_CHECK(e);
    if (!e) return;
    struct {
        const char *session, *tpl, *policy;
        int keep;
        const char *named;
    } k[] = {{"s1", NULL, NULL, 0, "sessions"},
             {NULL, "t1", NULL, 0, "cache templates"},
             {NULL, NULL, NULL, 1, "keep_prefix"},
             {NULL, NULL, "conf:retry_pmax=0.5", 0, "retries"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        eng_request r;
        request(&r, prompts[0], 8);
        r.session_id = k[i].session;
        r.template_name = k[i].tpl;
        r.policy = k[i].policy;
        r.keep_prefix = k[i].keep;
        char err[256] = "";
        int rc = 0;
        CK_CHECK(!submit(e, &r, err, sizeof err, &rc) && rc == CK_EUNSUPPORTED);
        CK_CHECK_MSG(strstr(err, k[i].named) && strstr(err, arch_name), "err: %s", err);
    }
    /* the plan: a slot a running sequence, no prefix cache */
    const eng_memory *p = eng_get_memory(e);
    const size_t sf = model_state_floats(&eng_model(e)->cfg);
    CK_CHECK(sf == want_state && p->prefix == 0 &&
             p->be.state == (size_t)c.max_running * (sf * sizeof(float) + sizeof(int32_t)));
    char d[512];
    eng_memory_describe(p, d, sizeof d);
    CK_CHECK_MSG(strstr(d, "recurrent state"), "%s", d);
    eng_free(e);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/confkv-hybrid-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    /* 4 layers: 0, 1, 3 short convolutions (3 taps), 2 attention */
    synth_params sp = {.dim = 64,
                       .n_layers = 4,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 96,
                       .vocab_size = 512,
                       .ctx = 256,
                       .type = QUANT_F32,
                       .seed = 5,
                       .arch = ARCH_LFM2};
    char err[256];
    for (int k = 0; k < 2; k++) {
        if (k == 1) { /* granitehybrid: 0, 1, 3 Mamba2 (inner 128, 8 heads, 2 groups, state 16,
                         4 taps), 2 attention */
            sp.arch = ARCH_GRANITEHYBRID;
        }
        arch_name = k ? "granitehybrid" : "lfm2";
        want_state = k ? 3 * ((size_t)3 * (128 + 2 * 2 * 16) + (size_t)128 * 16) : 3 * 2 * 64;
        if (convert_synth(&sp, path, err, sizeof err)) {
            fprintf(stderr, "synth: %s\n", err);
            return 1;
        }
        fprintf(stderr, "%s:\n", arch_name);
        CK_RUN(test_batched_equals_alone);
        CK_RUN(test_preempt_recomputes);
        CK_RUN(test_refusals);
    }
    unlink(path);
    return ck_test_summary();
}
