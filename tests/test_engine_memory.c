/* test_engine_memory.c - the memory plan: be_cpu_plan against what
 * be_cpu_new then allocates, and a crafted model that claims 1024 heads and
 * a 2^20 context: capped by default, refused or shrunk to fit under
 * max_memory_mb, the engine refusing a limit below its plan before it
 * builds anything. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "engine.h"
#include "model.h"
#include "quant.h"
#include "test_engine_util.h"

/* be_cpu_plan against what be_cpu_new then allocated (its own count, kept
 * allocation by allocation): equal, whatever the options. */
static void plan_matches(const model *m, const be_options *o) {
    be_memory p;
    backend *b = NULL;
    char err[256];
    CK_CHECK(be_cpu_plan(m, o, &p) == 0);
    CK_CHECK_MSG(be_cpu_new(m, o, &b, err, sizeof err) == 0, "%s", err);
    size_t got = b->ops->memory_bytes(b);
    int ctx = b->opt.max_ctx, nt = b->opt.n_threads;
    be_free(b);
    CK_CHECK_MSG(p.total == got, "plan %zu, allocated %zu", p.total, got);
    CK_CHECK(p.max_ctx == ctx && p.n_threads == nt);
    CK_CHECK(p.total == p.weights + p.kv + p.kv8 + p.activations + p.scratch + p.state);
    /* the attention scores alone: n_heads x ctx floats a thread */
    CK_CHECK(p.scratch_per_thread >= (size_t)m->cfg.n_heads * (size_t)ctx * sizeof(float));
    CK_CHECK(p.scratch >= (size_t)nt * (size_t)m->cfg.n_heads * (size_t)ctx * sizeof(float));
}

static void test_memory_plan_matches_backend(void) {
    model *m = NULL;
    char err[256];
    CK_CHECK_MSG(model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                            sizeof err) == 0,
                 "%s", err);
    be_options o1 = {.max_batch_tokens = 64, .n_kv_blocks = 128, .block_size = 4, .n_threads = 1};
    be_options o2 = {.max_batch_tokens = 7,
                     .n_kv_blocks = 33,
                     .block_size = 16,
                     .n_threads = 2,
                     .max_ctx = 100,
                     .n_kv8_blocks = 5};
    be_options bad = {.max_batch_tokens = 7, .n_kv_blocks = 33, .block_size = 16, .max_ctx = 513};
    be_memory p;
    int ok = 1;
    plan_matches(m, &o1);
    ok = !ck_test_cur_failed_;
    if (ok) plan_matches(m, &o2);
    ok = ok && !ck_test_cur_failed_;
    int rc_bad = be_cpu_plan(m, &bad, &p); /* past the model's context (512) */
    model_free(m);
    CK_CHECK(ok);
    CK_CHECK(rc_bad == CK_EINVAL);
}

/* A 9 MB GGUF that claims 1024 heads and a 2^20 context: at its own
 * context it would get n_heads x 2^20 floats (4 GiB) of scratch a thread. */
static const char *crafted_model(char *path, size_t n) {
    snprintf(path, n, "/tmp/ck_test_engine_crafted_%ld.gguf", (long)getpid());
    synth_params sp = {.dim = 2048,
                       .n_layers = 1,
                       .n_heads = 1024,
                       .n_kv_heads = 1,
                       .hidden_dim = 32,
                       .vocab_size = 400,
                       .ctx = 1 << 20,
                       .type = QUANT_Q8_0,
                       .seed = 3};
    char err[256];
    if (convert_synth(&sp, path, err, sizeof err)) {
        fprintf(stderr, "convert_synth: %s\n", err);
        return NULL;
    }
    return path;
}

static void crafted_config(eng_config *c, const char *path) {
    eng_config_default(c);
    c->model_path = path;
    c->backend = "cpu";
    c->threads = 2;
    c->max_running = 4;
    c->max_batch_tokens = 16;
    c->kv_budget_bytes = (size_t)1 << 20;
    c->warm_budget_bytes = (size_t)1 << 20;
    c->prefix_cache_off = 1;
}

static void test_memory_crafted(void) {
    char path[256], err[512];
    CK_CHECK(crafted_model(path, sizeof path));
    model *m = NULL;
    int rc = model_load(path, NULL, &m, err, sizeof err);
    if (rc) unlink(path);
    CK_CHECK_MSG(rc == 0, "%s", err);
    const size_t file = model_file_bytes(m);
    const int H = m->cfg.n_heads;
    eng_config c;
    eng_memory p;

    /* By default: the context is capped, the scratch is tens of MiB. */
    crafted_config(&c, path);
    int rc_def = eng_memory_plan(&c, m, &p, err, sizeof err);
    eng_memory def = p;

    /* Asked for the whole 2^20 under 4 GiB: refused, naming the sizes. Two
     * threads of 1024 x 2^20 floats are 8 GiB (computed here, not read). */
    c.max_context = 1 << 20;
    c.max_memory_mb = 4096;
    char err_big[512] = "";
    int rc_big = eng_memory_plan(&c, m, &p, err_big, sizeof err_big);
    const double scratch_gib = 2.0 * H * (double)(1 << 20) * 4 / (1 << 30);

    /* A low limit without max_context: the context shrinks to fit, and one
     * block more would not. */
    crafted_config(&c, path);
    c.max_memory_mb = 64;
    int rc_fit = eng_memory_plan(&c, m, &p, err, sizeof err);
    eng_memory fit = p;
    c.max_context = fit.max_ctx + 16;
    char err_next[512] = "";
    int rc_next = eng_memory_plan(&c, m, &p, err_next, sizeof err_next);

    /* The backend by itself: max_ctx 0 is the default rule, and its plan is
     * what it allocates. */
    be_options bo = {.max_batch_tokens = 16, .n_kv_blocks = 64, .block_size = 16, .n_threads = 2};
    plan_matches(m, &bo);
    int plan_ok = !ck_test_cur_failed_;
    ck_test_cur_failed_ = 0;
    model_free(m);

    /* The engine: loads by default with the capped context and generates;
     * refuses a limit below its plan, before building anything. */
    crafted_config(&c, path);
    eng *e = open_engine(&c);
    int e_ctx = e ? eng_max_context(e) : -1;
    size_t e_total = e ? eng_get_memory(e)->total : 0;
    int n_tok = -1;
    if (e) {
        static run t;
        memset(&t, 0, sizeof t);
        eng_request r;
        request(&r, "Once upon a time", 4);
        r.ignore_eos = 1;
        uint64_t id;
        if (!eng_submit(e, &r, &id, err, sizeof err) && !drain(e, &t, 64, 1000, NULL, NULL)) {
            got *g = track(&t, id);
            n_tok = g ? g->n_tok : -1;
        }
        eng_free(e);
    }
    crafted_config(&c, path);
    c.max_memory_mb = 1;
    e = NULL;
    char err_one[512] = "";
    int rc_one = eng_new(&c, &e, err_one, sizeof err_one);
    eng_free(e);
    unlink(path);

    CK_CHECK(file < ((size_t)16 << 20)); /* a small file ... */
    CK_CHECK(H == 1024 && def.max_ctx == BE_DEFAULT_MAX_CTX);
    CK_CHECK_MSG(rc_def == 0, "%s", err);
    /* ... gets the scores of the capped context, 32 MiB a thread, not GiB */
    CK_CHECK(def.be.scratch_per_thread >= (size_t)H * BE_DEFAULT_MAX_CTX * 4);
    CK_CHECK(def.be.scratch_per_thread < ((size_t)40 << 20));
    CK_CHECK(def.total < ((size_t)256 << 20));
    CK_CHECK(def.total == def.be.total + def.warm + def.prefix + def.host && def.prefix == 0);
    CK_CHECK_MSG(rc_big == CK_ENOSPACE, "rc %d: %s", rc_big, err_big);
    char want[64];
    snprintf(want, sizeof want, "scratch %.1f GiB = 2 x %.1f GiB", scratch_gib, scratch_gib / 2);
    CK_CHECK_MSG(strstr(err_big, want) && strstr(err_big, "exceeds max_memory_mb=4096") &&
                     strstr(err_big, "at context 1048576") && strstr(err_big, "weights "),
                 "'%s' lacks '%s'", err_big, want);
    CK_CHECK_MSG(rc_fit == 0, "%s", err);
    CK_CHECK(fit.total <= ((size_t)64 << 20) && fit.max_ctx < BE_DEFAULT_MAX_CTX && fit.max_ctx > 1024);
    CK_CHECK(fit.max_ctx % 16 == 0 && fit.limit_mb == 64);
    CK_CHECK_MSG(rc_next == CK_ENOSPACE, "context %d + 16 fits too: %s", fit.max_ctx, err_next);
    CK_CHECK(plan_ok);
    CK_CHECK(e_ctx == BE_DEFAULT_MAX_CTX && e_total == def.total);
    CK_CHECK_MSG(n_tok == 4, "%d tokens", n_tok);
    CK_CHECK_MSG(rc_one == CK_ENOSPACE && strstr(err_one, "exceeds max_memory_mb=1") &&
                     strstr(err_one, "planned "),
                 "rc %d: %s", rc_one, err_one);
}

int main(void) {
    CK_RUN(test_memory_plan_matches_backend);
    CK_RUN(test_memory_crafted);
    return ck_test_summary();
}
