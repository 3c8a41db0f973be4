/* test_pfx.c - the prefix cache (pfx.h), session contexts
 * (sess.h) and what the engine does with them, on stories260K with the
 * in-memory cold store:
 *  - a request that begins like an earlier one copies its blocks
 *    (cached_tokens) and generates exactly what a cold engine generates;
 *  - turn 2 of a session reuses turn 1's KV and equals a fresh run on the
 *    whole conversation's tokens; a second engine on the same store (a
 *    restart) resumes the session from the cold store;
 *  - a template (prefix, kept) is prewarmed by one engine and found by
 *    another through the cold store; a corrupted value is a counted miss;
 *  - CONF-KV requests publish only blocks computed with the full cache;
 *  - the unit contracts of pfx_* and sess_* (LRU, pins, formats). */
#include <stdint.h>
#include <stdlib.h>

#include "ck_err.h"
#include "ck_test.h"
#include "cold.h"
#include "engine.h"
#include "model.h"
#include "pfx.h"
#include "sess.h"
#include "tpl.h"
#include "tokenizer.h"

typedef struct out {
    int finish, error;
    int32_t tok[512];
    int n_tok;
    char text[8192];
    int cached, session_tokens, prompt_tokens;
    double ttft_ms;
} out;

static eng *open_engine(cold_store *cold, const char *policy) {
    eng_config c;
    eng_config_default(&c);
    c.model_path = ck_test_model_path("stories260K.bin");
    c.tokenizer_path = ck_test_model_path("tok512.bin");
    c.backend = "cpu";
    c.threads = 1;
    c.kv_budget_bytes = 4 << 20;
    c.cold = cold;
    if (policy) kvpol_parse(policy, &c.policy, NULL, 0);
    eng *e = NULL;
    char err[256];
    if (eng_new(&c, &e, err, sizeof err)) fprintf(stderr, "eng_new: %s\n", err);
    return e;
}

static void req_default(eng_request *q) {
    memset(q, 0, sizeof *q);
    samp_params_default(&q->samp);
    q->samp.temperature = 0;
    q->max_tokens = 40;
    q->ignore_eos = 1;
}

/* Run one request to its end. Returns 0, or -1 when it never ended. */
static int run1(eng *e, const eng_request *q, out *o) {
    memset(o, 0, sizeof *o);
    uint64_t id;
    char err[256];
    int rc = eng_submit(e, q, &id, err, sizeof err);
    if (rc) {
        o->error = rc;
        return 0;
    }
    eng_event ev[64];
    for (int it = 0; it < 100000; it++) {
        int n = 0;
        if (eng_step(e, ev, 64, &n)) return -1;
        for (int i = 0; i < n; i++) {
            if (ev[i].id != id) continue;
            if (ev[i].type == ENG_EV_ERROR) {
                o->error = ev[i].error;
                return 0;
            }
            if (ev[i].type == ENG_EV_FINISHED) {
                const eng_result *r = ev[i].result;
                o->finish = r->finish;
                o->n_tok = r->n_tokens < 512 ? r->n_tokens : 512;
                memcpy(o->tok, r->tokens, (size_t)o->n_tok * sizeof *o->tok);
                snprintf(o->text, sizeof o->text, "%.*s", (int)r->text_len, r->text);
                o->cached = r->cached_tokens;
                o->session_tokens = r->session_tokens;
                o->prompt_tokens = r->prompt_tokens;
                o->ttft_ms = r->ttft_ms;
                return 0;
            }
        }
    }
    return -1;
}

static const char *LONG_PROMPT =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "friends. One day, she saw a big red ball";

static void test_prefix_reuse(void) {
    eng *e = open_engine(NULL, "full"), *cold = open_engine(NULL, "full");
    CK_CHECK(e && cold);
    eng_request q;
    req_default(&q);
    q.prompt = LONG_PROMPT;
    q.prompt_len = strlen(LONG_PROMPT);
    out a, b, c;
    CK_CHECK(!run1(e, &q, &a) && !a.error);
    CK_CHECK(!run1(e, &q, &b) && !b.error);
    CK_CHECK(!run1(cold, &q, &c) && !c.error);
    CK_CHECK_MSG(a.cached == 0, "first run cached %d", a.cached);
    int bs = 4; /* kv_default_block_size(512) */
    CK_CHECK_MSG(b.cached >= a.prompt_tokens - 1 - bs && b.cached % bs == 0, "cached %d of %d", b.cached,
                 b.prompt_tokens);
    CK_CHECK(b.n_tok == c.n_tok && !memcmp(b.tok, c.tok, (size_t)b.n_tok * sizeof *b.tok));
    CK_CHECK(!strcmp(b.text, c.text));
    eng_stats st;
    eng_get_stats(e, &st);
    CK_CHECK(st.prefix_hits_warm * bs == (uint64_t)b.cached && st.cached_tokens == (uint64_t)b.cached);
    eng_free(e);
    eng_free(cold);
}

/* The conversation's tokens: turn 1's prompt and completion, then turn 2's
 * prompt as a continuation (no BOS). */
static int conversation(const eng *e, const out *t1, const int32_t *p1, int n1, const char *p2,
                        int32_t *dst) {
    memcpy(dst, p1, (size_t)n1 * sizeof *dst);
    memcpy(dst + n1, t1->tok, (size_t)t1->n_tok * sizeof *dst);
    int k = 0;
    if (tok_encode(eng_model(e)->tok, p2, strlen(p2), 0, dst + n1 + t1->n_tok, 512 - n1 - t1->n_tok, &k))
        return -1;
    return n1 + t1->n_tok + k;
}

static void test_session(void) {
    cold_store *cs = NULL;
    CK_CHECK(!cold_mem_new(&cs));
    eng *e = open_engine(cs, "full"), *fresh = open_engine(NULL, "full");
    CK_CHECK(e && fresh);
    const char *p1 = "Lily saw a cat in the garden.", *p2 = "Then the cat ran to the tree.";
    eng_request q;
    req_default(&q);
    q.session_id = "s1";
    q.prompt = p1;
    q.prompt_len = strlen(p1);
    q.max_tokens = 30;
    out t1, t2, ref, t3;
    CK_CHECK(!run1(e, &q, &t1) && !t1.error && t1.session_tokens == 0);
    q.prompt = p2;
    q.prompt_len = strlen(p2);
    CK_CHECK(!run1(e, &q, &t2) && !t2.error);
    int32_t p1tok[128], conv[512];
    int n1 = 0;
    CK_CHECK(!tok_encode(eng_model(e)->tok, p1, strlen(p1), 1, p1tok, 128, &n1));
    CK_CHECK_MSG(t2.session_tokens == n1 + t1.n_tok, "session tokens %d, turn 1 had %d + %d",
                 t2.session_tokens, n1, t1.n_tok);
    CK_CHECK_MSG(t2.cached >= n1 + t1.n_tok - 4, "turn 2 cached %d of %d", t2.cached, n1 + t1.n_tok);
    int nc = conversation(e, &t1, p1tok, n1, p2, conv);
    CK_CHECK(nc == t2.prompt_tokens);
    eng_request f;
    req_default(&f);
    f.tokens = conv;
    f.n_tokens = nc;
    f.max_tokens = 30;
    CK_CHECK(!run1(fresh, &f, &ref) && !ref.error);
    CK_CHECK_MSG(!strcmp(ref.text, t2.text), "session turn 2 '%s' vs fresh '%s'", t2.text, ref.text);
    CK_CHECK(eng_flush(e, 1000) == CK_OK);
    eng_free(e); /* a restart: the session lives on in the store */
    e = open_engine(cs, "full");
    CK_CHECK(e);
    const char *p3 = "The end.";
    q.prompt = p3;
    q.prompt_len = strlen(p3);
    CK_CHECK(!run1(e, &q, &t3) && !t3.error);
    CK_CHECK_MSG(t3.session_tokens == t2.prompt_tokens + t2.n_tok, "turn 3 resumed %d tokens",
                 t3.session_tokens);
    CK_CHECK_MSG(t3.cached >= t3.session_tokens - 4, "turn 3 cached %d of %d", t3.cached, t3.session_tokens);
    eng_stats st;
    eng_get_stats(e, &st);
    CK_CHECK(st.sessions_fetched == 1 && st.prefix_hits_cold > 0 && st.integrity_failures == 0);
    eng_free(e);
    eng_free(fresh);
    cold_free(cs);
}

static void test_template_and_corruption(void) {
    cold_store *cs = NULL;
    CK_CHECK(!cold_mem_new(&cs));
    eng *e = open_engine(cs, "conf");
    CK_CHECK(e);
    eng_request q;
    req_default(&q);
    q.prefix = LONG_PROMPT;
    q.prefix_len = strlen(LONG_PROMPT);
    q.keep_prefix = 1;
    q.prefill_only = 1;
    out w;
    CK_CHECK(!run1(e, &q, &w) && !w.error && w.n_tok == 0);
    eng_stats st;
    eng_get_stats(e, &st);
    int nb = (w.prompt_tokens - 1) / 4;
    CK_CHECK_MSG(st.prefix_pinned == nb && st.prefix_persisted == (uint64_t)nb,
                 "pinned %d persisted %llu of %d", st.prefix_pinned, (unsigned long long)st.prefix_persisted,
                 nb);
    CK_CHECK(eng_flush(e, 1000) == CK_OK);
    eng_free(e);
    /* Another engine: the template's blocks come from the store. */
    e = open_engine(cs, "conf");
    eng *ref = open_engine(NULL, "conf");
    CK_CHECK(e && ref);
    const char *user = "The ball rolled away.";
    req_default(&q);
    q.prefix = LONG_PROMPT;
    q.prefix_len = strlen(LONG_PROMPT);
    q.prompt = user;
    q.prompt_len = strlen(user);
    out a, b;
    CK_CHECK(!run1(e, &q, &a) && !a.error);
    CK_CHECK(!run1(ref, &q, &b) && !b.error);
    CK_CHECK_MSG(a.cached == nb * 4, "cached %d, want %d", a.cached, nb * 4);
    CK_CHECK(!strcmp(a.text, b.text));
    eng_free(e);
    /* Corrupt one stored block: a third engine counts it and computes. */
    const model *m = eng_model(ref);
    int32_t ids[512];
    int n = 0;
    CK_CHECK(!tok_encode(m->tok, LONG_PROMPT, strlen(LONG_PROMPT), 1, ids, 512, &n));
    uint64_t h = pfx_next(pfx_root(m->fingerprint), ids, 4);
    h = pfx_next(h, ids + 4, 4); /* block 1 */
    char key[64];
    snprintf(key, sizeof key, "pfx:%s:%016llx", m->fingerprint, (unsigned long long)h);
    CK_CHECK(!cs->ops->put(cs, key, "garbage", 7, 0, NULL, NULL) || 1);
    cold_poll(cs);
    e = open_engine(cs, "conf");
    CK_CHECK(e);
    CK_CHECK(!run1(e, &q, &a) && !a.error);
    CK_CHECK(!strcmp(a.text, b.text));
    CK_CHECK_MSG(a.cached == 4, "cached %d: only block 0 precedes the bad one", a.cached);
    eng_get_stats(e, &st);
    CK_CHECK(st.prefix_integrity_failures == 1 && st.integrity_failures >= 1);
    eng_free(e);
    eng_free(ref);
    cold_free(cs);
}

/* A CONF-KV session turn past its window: the blocks it computed after
 * demoting some are not exact, so they are not published as they are; the
 * engine recomputes the conversation once with the full cache (a settle)
 * and the next turn reuses all of it and equals a fresh run. */
static void test_conf_publishes_exact_only(void) {
    eng *e = open_engine(NULL, "conf"), *ref = open_engine(NULL, "conf");
    CK_CHECK(e && ref);
    eng_request q;
    req_default(&q);
    q.session_id = "long";
    q.prompt = "Once upon a time";
    q.prompt_len = strlen(q.prompt);
    q.max_tokens = 300; /* far past the 56..80-token window */
    out t1, t2, r;
    CK_CHECK(!run1(e, &q, &t1) && !t1.error);
    eng_stats st;
    eng_get_stats(e, &st);
    CK_CHECK_MSG(st.session_settles == 1, "settles %llu", (unsigned long long)st.session_settles);
    /* Before the settle ran, only the exact early blocks were published. */
    CK_CHECK_MSG(st.cached_tokens == 0 && st.prefix_bytes > 0, "prefix bytes %zu", st.prefix_bytes);
    q.prompt = "The end.";
    q.prompt_len = strlen(q.prompt);
    q.max_tokens = 20;
    CK_CHECK(!run1(e, &q, &t2) && !t2.error);
    CK_CHECK(t2.session_tokens > 300);
    CK_CHECK_MSG(t2.cached >= t2.session_tokens - 4, "cached %d of %d", t2.cached, t2.session_tokens);
    int32_t conv[512];
    int32_t p1[16];
    int n1 = 0;
    CK_CHECK(!tok_encode(eng_model(e)->tok, "Once upon a time", 16, 1, p1, 16, &n1));
    int nc = conversation(e, &t1, p1, n1, "The end.", conv);
    eng_request f;
    req_default(&f);
    f.tokens = conv;
    f.n_tokens = nc;
    f.max_tokens = 20;
    CK_CHECK(!run1(ref, &f, &r) && !r.error);
    CK_CHECK_MSG(!strcmp(r.text, t2.text), "'%s' vs '%s'", t2.text, r.text);
    eng_free(e);
    eng_free(ref);
}

/* Named templates: saved by a job on one engine, used by name on another
 * (through the store), unknown names refused, damaged records ignored. */
static void test_named_template(void) {
    cold_store *cs = NULL;
    CK_CHECK(!cold_mem_new(&cs));
    eng *e = open_engine(cs, "full"), *ref = open_engine(NULL, "full");
    CK_CHECK(e && ref);
    eng_request q;
    req_default(&q);
    q.template_name = "story";
    q.save_template = 1;
    q.prompt = LONG_PROMPT;
    q.prompt_len = strlen(LONG_PROMPT);
    q.max_tokens = 1;
    out s, a, b, u;
    CK_CHECK(!run1(e, &q, &s) && !s.error);
    CK_CHECK(eng_flush(e, 1000) == CK_OK);
    eng_free(e);
    e = open_engine(cs, "full");
    CK_CHECK(e);
    req_default(&q);
    q.template_name = "story";
    q.prompt = "The ball rolled away.";
    q.prompt_len = strlen(q.prompt);
    CK_CHECK(!run1(e, &q, &a) && !a.error);
    eng_request r;
    req_default(&r);
    r.prefix = LONG_PROMPT;
    r.prefix_len = strlen(LONG_PROMPT);
    r.prompt = q.prompt;
    r.prompt_len = q.prompt_len;
    CK_CHECK(!run1(ref, &r, &b) && !b.error);
    CK_CHECK(a.prompt_tokens == b.prompt_tokens && !strcmp(a.text, b.text));
    CK_CHECK_MSG(a.cached >= s.prompt_tokens - 1 - 4, "cached %d of the template's %d", a.cached,
                 s.prompt_tokens);
    q.template_name = "nope";
    CK_CHECK(!run1(e, &q, &u) && u.error == CK_ENOTFOUND);
    /* A damaged record is no template. */
    CK_CHECK(
        !cs->ops->put(cs, "tpl:bad", "confkv-template 1\nname bad\n", 27, COLD_PUT_PERSIST, NULL, NULL) || 1);
    cold_poll(cs);
    q.template_name = "bad";
    CK_CHECK(!run1(e, &q, &u) && u.error == CK_ENOTFOUND);
    eng_stats st;
    eng_get_stats(e, &st);
    CK_CHECK(st.integrity_failures >= 1 && st.template_misses >= 2);
    eng_free(e);
    eng_free(ref);
    cold_free(cs);
}

static void test_tpl_format(void) {
    char *b;
    size_t n;
    CK_CHECK(!tpl_encode("sys.v1", 1700000000000LL, "You are kind.", 13, &b, &n));
    tpl_record r;
    CK_CHECK(!tpl_decode(b, n, "sys.v1", &r) && r.text_len == 13 && !memcmp(r.text, "You are kind.", 13));
    CK_CHECK(r.created_ms == 1700000000000LL);
    CK_CHECK(tpl_decode(b, n, "other", &r) == CK_EFORMAT);
    for (size_t i = 0; i < n; i++) { /* every truncation and every flipped byte is refused */
        CK_CHECK(tpl_decode(b, i, NULL, &r) == CK_EFORMAT);
        b[i] ^= 0x20;
        int rc = tpl_decode(b, n, "sys.v1", &r);
        b[i] ^= 0x20;
        CK_CHECK_MSG(rc == CK_EFORMAT, "flip at %zu accepted", i);
    }
    free(b);
    CK_CHECK(tpl_encode("bad name", 0, "x", 1, &b, &n) == CK_EINVAL);
    CK_CHECK(!tpl_name_ok("") && !tpl_name_ok("a/b") && tpl_name_ok("a:b-c_d.e"));
}

static void test_pfx_unit(void) {
    kvq_shape sh = {.n_layers = 2, .block_size = 4, .kv_dim = 8};
    size_t bb = kvq_f32_bytes(&sh);
    cold_store *cs = NULL;
    CK_CHECK(!cold_mem_new(&cs));
    pfx_config c = {.shape = sh,
                    .budget_bytes = 4 * bb,
                    .fingerprint = "0123456789abcdef",
                    .cold = cs,
                    .promote_hits = 2};
    pfx *p = NULL;
    CK_CHECK(!pfx_new(&c, &p));
    float blk[4][256];
    for (int i = 0; i < 4; i++)
        for (size_t k = 0; k < bb / 4; k++) blk[i][k] = (float)(i * 1000 + (int)k);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t r = pfx_root("0123456789abcdef"), h1 = pfx_next(r, toks, 4), h2 = pfx_next(h1, toks + 4, 4);
    CK_CHECK(h1 != h2 && h1 == pfx_next(r, toks, 4) && pfx_next(pfx_root("0123456789abcdee"), toks, 4) != h1);
    CK_CHECK(!pfx_insert(p, h1, 0, blk[0], PFX_PIN));
    CK_CHECK(!pfx_insert(p, h2, 1, blk[1], 0));
    int tier = 0, s = pfx_find(p, h1, &tier);
    CK_CHECK(s >= 0 && tier == PFX_HIT_TEMPLATE && !memcmp(pfx_block(p, s), blk[0], bb));
    /* Fill past capacity: the pinned block stays, LRU unpinned ones go. */
    for (int i = 0; i < 6; i++) CK_CHECK(!pfx_insert(p, 100 + (uint64_t)i, i, blk[2], 0));
    CK_CHECK(pfx_has(p, h1) && !pfx_has(p, h2));
    CK_CHECK(pfx_get_stats(p)->evictions >= 3);
    /* Promotion after two hits persists; another cache fetches it back. */
    CK_CHECK(!pfx_insert(p, h2, 1, blk[1], 0));
    CK_CHECK(pfx_find(p, h2, NULL) >= 0 && pfx_find(p, h2, NULL) >= 0);
    CK_CHECK(pfx_get_stats(p)->promotions == 1 && pfx_get_stats(p)->persisted == 1);
    cold_poll(cs);
    pfx *q = NULL;
    CK_CHECK(!pfx_new(&c, &q));
    int waiter = 0;
    CK_CHECK(!pfx_fetch(q, h2, 1, &waiter) && waiter == 1);
    CK_CHECK(!pfx_fetch(q, h1, 0, &waiter) && waiter == 2); /* never persisted: a miss */
    cold_poll(cs);
    CK_CHECK(waiter == 0);
    s = pfx_find(q, h2, &tier);
    CK_CHECK(s >= 0 && tier == PFX_HIT_COLD && !memcmp(pfx_block(q, s), blk[1], bb));
    CK_CHECK(!pfx_has(q, h1) && pfx_get_stats(q)->fetch_misses == 1);
    /* The right value under the wrong name is refused. */
    pfx_free(q);
    q = NULL;
    CK_CHECK(!pfx_new(&c, &q));
    CK_CHECK(!pfx_fetch(q, h2 ^ 1, 1, &waiter)); /* a miss: nothing there */
    cold_poll(cs);
    CK_CHECK(!pfx_has(q, h2 ^ 1));
    pfx_free(q);
    pfx_free(p);
    cold_free(cs);
}

static void test_sess_unit(void) {
    cold_store *cs = NULL;
    CK_CHECK(!cold_mem_new(&cs));
    sess_config c = {
        .max_sessions = 2, .max_tokens = 64, .vocab = 100, .fingerprint = "0123456789abcdef", .cold = cs};
    sess_store *s = NULL;
    CK_CHECK(!sess_new(&c, &s));
    int32_t a[3] = {1, 5, 7}, b[2] = {1, 9};
    CK_CHECK(!sess_save(s, "a", a, 3) && !sess_save(s, "b", b, 2) && !sess_save(s, "c", b, 2));
    const int32_t *t;
    int n;
    CK_CHECK(!sess_find(s, "a", &t, &n)); /* the LRU one left the host map */
    CK_CHECK(sess_find(s, "c", &t, &n) && n == 2);
    CK_CHECK(sess_save(s, "", a, 3) == CK_EINVAL && sess_save(s, "x", a, 65) == CK_EINVAL);
    cold_poll(cs);
    int w = 0;
    CK_CHECK(!sess_fetch(s, "a", &w) && w == 1);
    cold_poll(cs);
    CK_CHECK(w == 0 && sess_find(s, "a", &t, &n) && n == 3 && !memcmp(t, a, sizeof a));
    /* Damage: a flipped id, a short value, another model's record. */
    CK_CHECK(!cs->ops->put(cs, "sess:bad", "CKSS\x01\x00\x00\x00", 8, 0, NULL, NULL) || 1);
    cold_poll(cs);
    CK_CHECK(!sess_fetch(s, "bad", &w));
    cold_poll(cs);
    const int32_t *t2;
    CK_CHECK(!sess_find(s, "bad", &t2, &n) && sess_get_stats(s)->integrity_failures == 1);
    sess_config c2 = c;
    c2.fingerprint = "fedcba9876543210";
    sess_store *o = NULL;
    CK_CHECK(!sess_new(&c2, &o));
    CK_CHECK(!sess_fetch(o, "b", &w));
    cold_poll(cs);
    CK_CHECK(!sess_find(o, "b", &t2, &n) && sess_get_stats(o)->integrity_failures == 1);
    sess_free(o);
    sess_free(s);
    cold_free(cs);
}

int main(void) {
    CK_RUN(test_pfx_unit);
    CK_RUN(test_sess_unit);
    CK_RUN(test_prefix_reuse);
    CK_RUN(test_session);
    CK_RUN(test_template_and_corruption);
    CK_RUN(test_conf_publishes_exact_only);
    CK_RUN(test_named_template);
    CK_RUN(test_tpl_format);
    return ck_test_summary();
}
