/* test_pipeline.c - the token pipeline (pipeline.h) without a forward pass:
 * crafted logits in, and the tokens, text, released bytes, stop decisions
 * and accounting checked against what those logits and the tokenizer imply
 * (one-hot logits: the token is known; their softmax is in closed form). */
#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "kv.h"
#include "model.h"
#include "pipeline.h"
#include "samp.h"
#include "tokenizer.h"

#define BS 4
#define MAXT 256
#define HOT 20.0f /* the one-hot logit; every other logit is 0 */

/* A sequence with its KV bookkeeping, and no backend behind it. */
typedef struct fix {
    model *m;
    backend b; /* only the sizes: pipeline_token reads no weights */
    kv_pool pool;
    kv_seq seq;
    int32_t hist[MAXT];
    float *logits;
    sampler *sm;
    pipeline_rules ru;
    pipeline_seq ps;
    char rel[4096]; /* every released byte, in order */
    size_t n_rel;
    int V;
} fix;

static int fix_open(fix *f, const char *prompt, float temperature, uint64_t seed) {
    memset(f, 0, sizeof *f);
    char err[256];
    int rc = model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &f->m, err,
                        sizeof err);
    if (rc) return rc;
    const model_config *c = &f->m->cfg;
    f->V = c->vocab_size;
    f->b.m = f->m;
    f->b.opt.block_size = BS;
    f->b.opt.max_ctx = MAXT;
    f->b.kv_block_floats = (size_t)c->n_layers * 2 * BS * (size_t)(c->n_kv_heads * c->head_dim);
    f->b.kv8_block_bytes = 1; /* no int8 blocks here */
    if ((rc = kv_pool_init(&f->pool, MAXT / BS, BS)) || (rc = kv_seq_init(&f->seq, 0, MAXT, BS))) return rc;
    if (!(f->logits = malloc((size_t)f->V * sizeof *f->logits))) return CK_ENOMEM;
    samp_params sp;
    samp_params_default(&sp);
    sp.temperature = temperature;
    sp.seed = seed;
    if ((rc = samp_new(f->V, &sp, &f->sm))) return rc;
    int n = 0;
    if ((rc = tok_encode(f->m->tok, prompt, strlen(prompt), 1, f->hist, MAXT, &n))) return rc;
    /* The prompt's KV is "written". */
    if ((rc = kv_seq_reserve(&f->seq, &f->pool, n))) return rc;
    kv_seq_commit(&f->seq, n);
    f->ru = (pipeline_rules){.m = f->m, .b = &f->b, .limit = 100, .max_ctx = MAXT};
    f->ps = (pipeline_seq){.seq = &f->seq, .sm = f->sm, .hist = f->hist, .n_prompt = n, .n_hist = n};
    return CK_OK;
}

static void fix_close(fix *f) {
    kv_seq_reset(&f->seq, &f->pool);
    kv_seq_free(&f->seq);
    kv_pool_free(&f->pool);
    samp_free(f->sm);
    free(f->logits);
    free(f->ps.text);
    model_free(f->m);
}

static void one_hot(fix *f, int k) {
    for (int i = 0; i < f->V; i++) f->logits[i] = 0;
    f->logits[k] = HOT;
}

/* One step: logits one-hot on k (k < 0: keep f->logits), then what the
 * caller of a PIPELINE_NEXT does: the new token's KV is written. */
static int step(fix *f, int k, pipeline_out *o) {
    if (k >= 0) one_hot(f, k);
    int rc = pipeline_token(&f->ru, &f->ps, f->logits, NULL, -1, o);
    if (rc) return rc;
    if (o->off != f->n_rel) return CK_ESTATE; /* released bytes are contiguous */
    if (f->n_rel + o->len > sizeof f->rel) return CK_ERANGE;
    if (o->len) memcpy(f->rel + f->n_rel, f->ps.text + o->off, o->len); /* text may still be NULL */
    f->n_rel += o->len;
    if (o->action == PIPELINE_NEXT) {
        if ((rc = kv_seq_reserve(&f->seq, &f->pool, 1))) return rc;
        kv_seq_commit(&f->seq, 1);
    }
    return CK_OK;
}

/* The tokens of `text` as they follow BOS. */
static int ids_of(const fix *f, const char *text, int32_t *ids, int *n) {
    int32_t tmp[MAXT];
    int rc = tok_encode(f->m->tok, text, strlen(text), 1, tmp, MAXT, n);
    if (rc) return rc;
    memcpy(ids, tmp + 1, (size_t)(--*n) * sizeof *ids);
    return CK_OK;
}

/* p of the hot token, and log p of any other, under one_hot. */
static double p_hot(int V) { return exp(HOT) / (exp(HOT) + (V - 1)); }
static double logp_cold(int V) { return -log(exp(HOT) + (V - 1)); }

/* Greedy: the one-hot tokens, in order; the text is theirs; the limit ends it. */
static void test_greedy_text_limit(void) {
    static fix f;
    CK_CHECK(fix_open(&f, "", 0, 0) == 0);
    int32_t ids[MAXT];
    int n = 0;
    const char *want = "Once upon a time, there was a little girl";
    CK_CHECK(ids_of(&f, want, ids, &n) == 0 && n >= 4);
    f.ru.limit = n;
    pipeline_out o;
    for (int i = 0; i < n; i++) {
        CK_CHECK(step(&f, ids[i], &o) == 0);
        CK_CHECK(o.token == ids[i] && o.appended);
        CK_CHECK(o.action == (i < n - 1 ? PIPELINE_NEXT : PIPELINE_END));
    }
    CK_CHECK(o.finish == PIPELINE_FINISH_LENGTH);
    CK_CHECK(f.ps.n_hist == 1 + n && !memcmp(f.hist + 1, ids, (size_t)n * sizeof *ids));
    CK_CHECK_MSG(f.ps.text_len == strlen(want) && !strcmp(f.ps.text, want), "text '%s'", f.ps.text);
    CK_CHECK(f.n_rel == f.ps.text_len && !memcmp(f.rel, want, f.n_rel)); /* no stops: nothing held back */
    const pipeline_stats *st = &f.ps.st;
    CK_CHECK(st->n_steps == n && st->retries == 0);
    CK_CHECK_NEAR(st->sum_pmax, n * p_hot(f.V), 1e-4 * n);
    /* Attention read the whole cache at each step: 1, 2, ..., n tokens. */
    const model_config *c = &f.m->cfg;
    double tok_bytes = (double)c->n_layers * 2 * c->n_kv_heads * c->head_dim * sizeof(float);
    double sum = (double)n * (n + 1) / 2;
    CK_CHECK_NEAR(st->full_token_steps, sum, 0);
    CK_CHECK_NEAR(st->hot_token_steps, sum, 0);
    CK_CHECK_NEAR(st->hot_byte_steps, sum * tok_bytes, 1e-6 * sum * tok_bytes);
    CK_CHECK_NEAR(st->full_byte_steps, sum * tok_bytes, 1e-6 * sum * tok_bytes);
    CK_CHECK(st->hot_peak_tokens == n && st->full_peak_tokens == n);
    CK_CHECK(st->hot_peak_bytes == (size_t)(n * tok_bytes));
    CK_CHECK(st->hot_lookups > 0 && st->hot_hits == st->hot_lookups);
    /* A sequence that ended has no room for another token. */
    CK_CHECK(step(&f, ids[0], &o) == CK_EINVAL);
    fix_close(&f);
}

/* A stop string across two tokens: the text is cut before it, and its first
 * bytes were never released before that. */
static void test_stop_holdback(void) {
    static fix f;
    CK_CHECK(fix_open(&f, "", 0, 0) == 0);
    int32_t ids[MAXT];
    int n = 0;
    CK_CHECK(ids_of(&f, "Once upon a time, there was", ids, &n) == 0);
    const char *stops[2] = {"zzz", "a time"};
    f.ru.stop = stops;
    f.ru.n_stop = 2;
    pipeline_out o;
    int i = 0;
    for (; i < n; i++) {
        CK_CHECK(step(&f, ids[i], &o) == 0);
        /* Released text is always a prefix of what the completion keeps. */
        CK_CHECK(f.n_rel <= strlen("Once upon ") && !memcmp(f.rel, "Once upon ", f.n_rel));
        if (f.ps.text_len >= 1 && f.ps.text[f.ps.text_len - 1] == 'a' && o.action == PIPELINE_NEXT)
            CK_CHECK(f.n_rel == f.ps.text_len - 1); /* "a" may begin "a time" */
        if (o.action == PIPELINE_END) break;
    }
    CK_CHECK(i < n && o.action == PIPELINE_END && o.finish == PIPELINE_FINISH_STOP && o.appended);
    CK_CHECK_MSG(!strcmp(f.ps.text, "Once upon "), "text '%s'", f.ps.text);
    CK_CHECK(f.n_rel == f.ps.text_len && f.ps.emitted == f.ps.text_len); /* the end releases all */
    fix_close(&f);
}

/* End-of-text ends a sequence without joining it; ignore_eos keeps going. */
static void test_eos(void) {
    static fix f;
    CK_CHECK(fix_open(&f, "Once", 0, 0) == 0);
    int eos = -1;
    for (int i = 0; i < f.V && eos < 0; i++)
        if (tok_is_eog(f.m->tok, i)) eos = i;
    CK_CHECK(eos >= 0);
    int n0 = f.ps.n_hist;
    pipeline_out o;
    CK_CHECK(step(&f, eos, &o) == 0);
    CK_CHECK(o.action == PIPELINE_END && o.finish == PIPELINE_FINISH_STOP && !o.appended && o.token == eos);
    CK_CHECK(f.ps.n_hist == n0 && f.ps.text_len == 0 && o.len == 0 && f.ps.st.n_steps == 1);
    fix_close(&f);
    CK_CHECK(fix_open(&f, "Once", 0, 0) == 0);
    f.ru.ignore_eos = 1;
    CK_CHECK(step(&f, eos, &o) == 0);
    CK_CHECK(o.action == PIPELINE_NEXT && o.appended && f.ps.n_hist == n0 + 1 && f.hist[n0] == eos);
    fix_close(&f);
}

/* The context limit ends a sequence where prompt + completion reach it. */
static void test_context_limit(void) {
    static fix f;
    CK_CHECK(fix_open(&f, "Once upon a time", 0, 0) == 0);
    f.ru.max_ctx = f.ps.n_prompt + 3;
    pipeline_out o;
    for (int i = 0; i < 3; i++) {
        CK_CHECK(step(&f, 300 + i, &o) == 0);
        CK_CHECK(o.action == (i < 2 ? PIPELINE_NEXT : PIPELINE_END));
    }
    CK_CHECK(o.finish == PIPELINE_FINISH_LENGTH && f.ps.n_hist == f.ru.max_ctx);
    CK_CHECK(step(&f, 300, &o) == CK_EINVAL);
    fix_close(&f);
}

/* Teacher forcing: the forced tokens go in whatever the logits say, with
 * log p and the argmax recorded; neither end-of-text nor a stop string ends
 * the run before its length. */
static void test_force(void) {
    static fix f;
    CK_CHECK(fix_open(&f, "Once", 0, 0) == 0);
    int eos = -1;
    for (int i = 0; i < f.V && eos < 0; i++)
        if (tok_is_eog(f.m->tok, i)) eos = i;
    int32_t force[6];
    int n = 0;
    CK_CHECK(ids_of(&f, "upon a time", force, &n) == 0 && n >= 3 && n <= 4);
    force[n++] = eos;
    force[n++] = force[0];
    double logp[6];
    int32_t amax[6];
    const char *stops[1] = {"upon"};
    f.ru = (pipeline_rules){
        .m = f.m, .b = &f.b, .limit = n, .max_ctx = MAXT, .stop = stops, .n_stop = 1, .force = force};
    f.ps.sm = NULL; /* forcing needs no sampler */
    f.ps.logp = logp;
    f.ps.argmax = amax;
    pipeline_out o;
    for (int i = 0; i < n; i++) {
        int hot = i == 1 ? force[1] : 7; /* step 1: the model agrees */
        CK_CHECK(step(&f, hot, &o) == 0);
        CK_CHECK(o.token == force[i] && o.appended && o.action == (i < n - 1 ? PIPELINE_NEXT : PIPELINE_END));
        CK_CHECK(amax[i] == hot);
        CK_CHECK_NEAR(logp[i], i == 1 ? log(p_hot(f.V)) : logp_cold(f.V), 1e-9);
    }
    CK_CHECK(o.finish == PIPELINE_FINISH_LENGTH && f.ps.n_hist == f.ps.n_prompt + n);
    CK_CHECK(strstr(f.ps.text, "upon") != NULL); /* not cut */
    fix_close(&f);
}

/* Sampling: the pipeline's token is the sampler's draw over the same logits
 * and history (a second sampler with the same seed replays it). */
static void test_sampled_matches_sampler(void) {
    static fix f;
    CK_CHECK(fix_open(&f, "Once upon a time", 0.8f, 42) == 0);
    samp_params sp;
    samp_params_default(&sp);
    sp.temperature = 0.8f;
    sp.seed = 42;
    sampler *ref = NULL;
    CK_CHECK(samp_new(f.V, &sp, &ref) == 0);
    float *copy = malloc((size_t)f.V * sizeof *copy);
    CK_CHECK(copy);
    uint32_t x = 12345;
    int n_distinct = 0, last = -1;
    pipeline_out o;
    for (int i = 0; i < 40; i++) {
        for (int k = 0; k < f.V; k++) {
            x = x * 1664525u + 1013904223u;
            f.logits[k] = (float)(x >> 8) / (float)(1u << 24) * 4.0f;
        }
        memcpy(copy, f.logits, (size_t)f.V * sizeof *copy);
        int want = samp_sample(ref, copy, f.hist, f.ps.n_hist);
        CK_CHECK(want >= 0);
        f.ru.ignore_eos = 1;
        CK_CHECK(step(&f, -1, &o) == 0);
        CK_CHECK_MSG(o.token == want, "step %d: %d vs %d", i, o.token, want);
        n_distinct += o.token != last;
        last = o.token;
    }
    CK_CHECK(n_distinct > 10); /* it did sample */
    free(copy);
    samp_free(ref);
    fix_close(&f);
}

int main(void) {
    CK_RUN(test_greedy_text_limit);
    CK_RUN(test_stop_holdback);
    CK_RUN(test_eos);
    CK_RUN(test_context_limit);
    CK_RUN(test_force);
    CK_RUN(test_sampled_matches_sampler);
    return ck_test_summary();
}
