/* test_request.c - the client form of eng_request (engine/core/rq.c) on
 * stories260K: the engine tokenizes a prompt or chat messages, applies the
 * client's limits and rejects with a stable reason and sentence. Oracles:
 * the tokenizer itself (the same text tokenized here and submitted as ids
 * must give the same completion), the context (512) and the limits given,
 * and chat.h's rule for a model without a template (the contents joined
 * with "\n"); a Jinja override that raises, that loops past the renderer's
 * limit, or that does not parse; one without a system role, whose chat
 * gets a leading system message merged and says so (eng_result.warnings);
 * `tools` reaching the template, refused without messages or a template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_err.h"
#include "ck_test.h"
#include "engine.h"
#include "jinja.h"
#include "model.h"
#include "tokenizer.h"

typedef struct out {
    int done, error, reason, n;
    int32_t ids[600];
    char text[4096];
    int prompt_tokens;
    int warnings; /* eng_result.warnings */
} out;

static void config(eng_config *c) {
    eng_config_default(c);
    c->model_path = ck_test_model_path("stories260K.bin");
    c->tokenizer_path = ck_test_model_path("tok512.bin");
    c->backend = "cpu";
    c->threads = 1;
    c->kv_budget_bytes = (size_t)4 << 20;
}

static eng *open_engine(const eng_config *c, char *err, size_t errlen) {
    eng *e = NULL;
    if (eng_new(c, &e, err, errlen)) return NULL;
    return e;
}

static void greedy(eng_request *r, int max_tokens) {
    memset(r, 0, sizeof *r);
    samp_params_default(&r->samp);
    r->samp.temperature = 0;
    r->max_tokens = max_tokens;
    r->ignore_eos = 1;
}

/* Submit and run one request to its end. Returns eng_submit's code; *reason
 * and err as it filled them; *o the result (o->done) or the ERROR event. */
static int run1(eng *e, const eng_request *r, int *reason, char *err, size_t errlen, out *o) {
    uint64_t id;
    memset(o, 0, sizeof *o);
    int rc = eng_submit_why(e, r, &id, reason, err, errlen);
    if (rc) return rc;
    eng_event ev[64];
    for (int s = 0; s < 10000 && !eng_idle(e); s++) {
        int n = 0;
        if (eng_step(e, ev, 64, &n)) return CK_EBACKEND;
        for (int i = 0; i < n; i++) {
            if (ev[i].id != id) continue;
            if (ev[i].type == ENG_EV_FINISHED) {
                const eng_result *res = ev[i].result;
                o->done = 1;
                o->n = res->n_tokens < 600 ? res->n_tokens : 600;
                memcpy(o->ids, res->tokens, (size_t)o->n * sizeof *o->ids);
                snprintf(o->text, sizeof o->text, "%.*s", (int)res->text_len, res->text);
                o->prompt_tokens = res->prompt_tokens;
                o->warnings = res->warnings;
            } else if (ev[i].type == ENG_EV_ERROR) {
                o->error = ev[i].error;
                o->reason = ev[i].reason;
            }
        }
    }
    return 0;
}

static int same(const out *a, const out *b) {
    return a->done && b->done && a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) &&
           !strcmp(a->text, b->text) && a->prompt_tokens == b->prompt_tokens;
}

/* The same text as client prompt and as ids from the tokenizer: one result. */
static void test_prompt_is_its_tokens(void) {
    eng_config c;
    config(&c);
    char err[256];
    eng *e = open_engine(&c, err, sizeof err);
    CK_CHECK_MSG(e, "%s", err);
    if (!e) return;
    const char *texts[] = {"Once upon a time", "", "<s> hello </s>", "h\xc3\xa9llo w\xc3\xb6rld"};
    for (int i = 0; i < 4; i++) {
        for (int special = 0; special < 2; special++) {
            int32_t ids[64];
            int n = 0, reason = -1;
            unsigned fl = TOK_ENC_ADD_SPECIAL | (special ? TOK_ENC_PARSE_SPECIAL : 0);
            CK_CHECK(tok_encode_opts(eng_model(e)->tok, texts[i], strlen(texts[i]), fl, ids, 64, &n) == 0);
            eng_request r;
            out a, b;
            greedy(&r, 12);
            r.tokens = ids;
            r.n_tokens = n;
            CK_CHECK(run1(e, &r, &reason, err, sizeof err, &a) == 0 && a.done);
            greedy(&r, 12);
            r.client_form = 1;
            r.prompt = texts[i];
            r.prompt_len = strlen(texts[i]);
            r.parse_special = special;
            CK_CHECK_MSG(run1(e, &r, &reason, err, sizeof err, &b) == 0 && reason == ENG_REJECT_NONE, "%s",
                         err);
            CK_CHECK_MSG(same(&a, &b) && b.n == 12 && b.prompt_tokens == n,
                         "text %d special %d: %d/%d tokens", i, special, a.n, b.n);
        }
    }
    /* messages without a template: the contents joined with "\n" */
    eng_message m[2] = {{"system", "Be nice."}, {"user", "The dog"}};
    eng_request r;
    out a, b;
    int reason;
    greedy(&r, 10);
    r.client_form = 1;
    r.prompt = "Be nice.\nThe dog";
    r.prompt_len = strlen(r.prompt);
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &a) == 0);
    greedy(&r, 10);
    r.client_form = 1;
    r.messages = m;
    r.n_messages = 2;
    r.prompt = "ignored: the messages are the prompt";
    r.prompt_len = strlen(r.prompt);
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &b) == 0);
    CK_CHECK(same(&a, &b));
    /* tools need a template to show them: refused, not dropped */
    jinja_value *tools = jinja_list();
    r.tools = tools;
    CK_CHECK(tools && run1(e, &r, &reason, err, sizeof err, &b) == CK_EINVAL &&
             reason == ENG_REJECT_PROMPT_INVALID);
    CK_CHECK_MSG(strstr(err, "tools need a chat template"), "%s", err);
    jinja_release(tools);
    r.tools = NULL;
    const eng_prompt_format *pf = eng_get_prompt_format(e);
    CK_CHECK(!strcmp(pf->template_source, "none") && !pf->template_error_kind &&
             !strcmp(pf->tok_model, "llama2c"));
    eng_free(e);
}

/* The limits, in the order they fire, each with its reason and sentence. */
static void test_limits(void) {
    eng_config c;
    config(&c);
    char err[256];
    eng *e = open_engine(&c, err, sizeof err);
    CK_CHECK_MSG(e, "%s", err);
    if (!e) return;
    int ctx = eng_max_context(e);
    CK_CHECK(ctx == 512);
    const tokenizer *tok = eng_model(e)->tok;
    size_t piece = (size_t)tok_max_piece_len(tok);
    /* "x " * k is 2k + 2 ids here (BOS, then the pairs; tokenize to be sure) */
    char *big = malloc(4 * (size_t)ctx * piece + 16);
    CK_CHECK(big);
    if (!big) return;
    int32_t *ids = malloc(2048 * sizeof *ids);
    int k_at = -1; /* the k whose prompt is exactly the context */
    for (int k = ctx / 2 - 4; k < ctx / 2 + 4 && k_at < 0; k++) {
        for (int i = 0; i < k; i++) memcpy(big + 2 * i, "x ", 2);
        int n = 0;
        if (!tok_encode_opts(tok, big, 2 * (size_t)k, TOK_ENC_ADD_SPECIAL, ids, 2048, &n) && n == ctx)
            k_at = k;
    }
    CK_CHECK(k_at > 0);
    eng_request r;
    out o;
    int reason;
    char want[256];
    /* bytes: refused before tokenizing */
    size_t nb = (size_t)ctx * piece + 1;
    memset(big, 'a', nb);
    greedy(&r, 5);
    r.client_form = 1;
    r.prompt = big;
    r.prompt_len = nb;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG &&
             reason == ENG_REJECT_PROMPT_TOO_LONG);
    snprintf(want, sizeof want, "the prompt is %zu bytes; %d tokens (the limit) hold at most %zu bytes", nb,
             ctx, (size_t)ctx * piece);
    CK_CHECK_MSG(!strcmp(err, want), "%s", err);
    /* max_prompt_tokens below the context */
    for (int i = 0; i < 10; i++) memcpy(big + 2 * i, "x ", 2);
    r.prompt_len = 20; /* 22 ids */
    r.max_prompt_tokens = 21;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG &&
             reason == ENG_REJECT_PROMPT_TOO_LONG);
    CK_CHECK_MSG(!strcmp(err, "the prompt is 22 tokens or more; the limit is 21"), "%s", err);
    r.max_prompt_tokens = 22;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == 0 && o.done && o.prompt_tokens == 22);
    /* ids given: the same limit */
    for (int i = 0; i < 30; i++) ids[i] = i ? 407 : 1;
    greedy(&r, 5);
    r.client_form = 1;
    r.tokens = ids;
    r.n_tokens = 30;
    r.max_prompt_tokens = 29;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG &&
             reason == ENG_REJECT_PROMPT_TOO_LONG);
    CK_CHECK_MSG(!strcmp(err, "the prompt is 30 tokens; the limit is 29"), "%s", err);
    /* exactly the context: nothing left for a default, nor for max_tokens 1 */
    for (int i = 0; i < k_at; i++) memcpy(big + 2 * i, "x ", 2);
    greedy(&r, 0);
    r.client_form = 1;
    r.prompt = big;
    r.prompt_len = 2 * (size_t)k_at;
    r.default_max_tokens = 256;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG && reason == ENG_REJECT_CONTEXT);
    snprintf(want, sizeof want, "the prompt (%d tokens) fills the context (%d)", ctx, ctx);
    CK_CHECK_MSG(!strcmp(err, want), "%s", err);
    r.max_tokens = 1;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG && reason == ENG_REJECT_CONTEXT);
    snprintf(want, sizeof want, "prompt (%d tokens) + max_tokens (1) exceed the context (%d)", ctx, ctx);
    CK_CHECK_MSG(!strcmp(err, want), "%s", err);
    /* one token short: the default is cut to the one left */
    r.prompt_len -= 2; /* 510 ids */
    r.max_tokens = 0;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == 0 && o.done && o.n == 2 &&
             o.prompt_tokens == ctx - 2);
    /* the default when there is room; 0 = up to the context */
    greedy(&r, 0);
    r.client_form = 1;
    r.prompt = "Once upon a time";
    r.prompt_len = strlen(r.prompt);
    r.default_max_tokens = 7;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == 0 && o.done && o.n == 7);
    r.default_max_tokens = 0;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == 0 && o.done && o.n == ctx - 5);
    r.max_tokens = ctx - 4; /* 5 + 508 > 512 */
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG && reason == ENG_REJECT_CONTEXT);
    snprintf(want, sizeof want, "prompt (5 tokens) + max_tokens (%d) exceed the context (%d)", ctx - 4, ctx);
    CK_CHECK_MSG(!strcmp(err, want), "%s", err);
    /* a chat too long in bytes, then in tokens */
    memset(big, 'a', nb);
    big[nb] = 0;
    eng_message m = {"user", big};
    greedy(&r, 5);
    r.client_form = 1;
    r.messages = &m;
    r.n_messages = 1;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG &&
             reason == ENG_REJECT_PROMPT_TOO_LONG);
    CK_CHECK_MSG(strstr(err, "bytes (the rendered chat)") != NULL, "%s", err);
    for (int i = 0; i < 300; i++) memcpy(big + 2 * i, "x ", 2);
    big[600] = 0;
    CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_ETOOLONG &&
             reason == ENG_REJECT_PROMPT_TOO_LONG);
    snprintf(want, sizeof want, "the chat is 602 tokens or more; the limit is %d", ctx);
    CK_CHECK_MSG(!strcmp(err, want), "%s", err);
    free(ids);
    free(big);
    eng_free(e);
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = fwrite(text, 1, strlen(text), f);
    return fclose(f) || n != strlen(text) ? -1 : 0;
}

/* A chat_template override: its failures at render (raise_exception, an
 * output past the renderer's limit) reject with their reasons; one that
 * cannot be read or parsed fails the load. */
static void test_chat_override(void) {
    char dir[] = "/tmp/ck_test_request_XXXXXX", path[64], err[512];
    CK_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/t.jinja", dir);
    CK_CHECK(
        write_file(
            path,
            "{% if messages[0].role == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
            "{% if messages[0].role == 'loop' %}{% for i in range(100000000) %}xxxxxxxx{% endfor %}"
            "{% endif %}{% if messages[0].role == 'bad' %}{{ raise_exception('bad role') }}{% endif %}"
            "{% if tools %}{{ tools[0] }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}") ==
        0);
    eng_config c;
    config(&c);
    c.chat_template = path;
    eng *e = open_engine(&c, err, sizeof err);
    CK_CHECK_MSG(e, "%s", err);
    if (e) {
        const eng_prompt_format *pf = eng_get_prompt_format(e);
        CK_CHECK(!strcmp(pf->template_source, "override") && strlen(pf->template_hash) == 16);
        eng_message m = {"bad", "x"};
        eng_request r;
        out o;
        int reason;
        greedy(&r, 5);
        r.client_form = 1;
        r.messages = &m;
        r.n_messages = 1;
        CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == CK_EINVAL &&
                 reason == ENG_REJECT_CHAT_TEMPLATE_EXCEPTION);
        CK_CHECK_MSG(!strncmp(err, "chat template: ", 15) && strstr(err, "bad role"), "%s", err);
        /* the template raises on a system role: the system message joins the
         * user's ("Once\nupon a time": the same ids as that prompt text) */
        eng_message sys[2] = {{"system", "Once"}, {"user", "upon a time"}};
        r.messages = sys;
        r.n_messages = 2;
        CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == 0 && o.done);
        CK_CHECK_MSG(o.warnings == ENG_WARN_SYSTEM_MERGED, "warnings %d", o.warnings);
        CK_CHECK(eng_warning_text(ENG_WARN_SYSTEM_MERGED) &&
                 strstr(eng_warning_text(ENG_WARN_SYSTEM_MERGED), "system message merged"));
        out o2;
        eng_request p;
        greedy(&p, 5);
        p.client_form = 1;
        p.prompt = "Once\nupon a time";
        p.prompt_len = strlen(p.prompt);
        CK_CHECK(run1(e, &p, &reason, err, sizeof err, &o2) == 0 && same(&o, &o2) && o2.warnings == 0);
        /* tools: the template sees them (a different prompt), not with a prompt */
        jinja_value *tools = jinja_list();
        CK_CHECK(tools && jinja_list_append(tools, jinja_str("T ", 2)) == 0);
        r.messages = sys + 1;
        r.n_messages = 1;
        r.tools = tools;
        CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == 0 && o.done && o.warnings == 0);
        p.prompt = "T upon a time";
        p.prompt_len = strlen(p.prompt);
        CK_CHECK(run1(e, &p, &reason, err, sizeof err, &o2) == 0 && same(&o, &o2));
        p.tools = tools;
        CK_CHECK(run1(e, &p, &reason, err, sizeof err, &o2) == CK_EINVAL && reason == ENG_REJECT_INVALID);
        jinja_release(tools);
        r.tools = NULL;
        r.messages = &m;
        m.role = "loop";
        CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) != 0 && reason == ENG_REJECT_CHAT_TEMPLATE_LIMIT);
        CK_CHECK_MSG(!strncmp(err, "chat template: ", 15), "%s", err);
        m.role = "user";
        m.content = "Once upon a time";
        CK_CHECK(run1(e, &r, &reason, err, sizeof err, &o) == 0 && o.done && o.prompt_tokens == 5);
        eng_free(e);
    }
    /* unparsable, and unreadable: the load fails with the file's name */
    CK_CHECK(write_file(path, "{% for m in messages %}{{ m | wordwrap }}{% endfor %}") == 0);
    config(&c);
    c.chat_template = path;
    e = open_engine(&c, err, sizeof err);
    CK_CHECK_MSG(!e && strstr(err, path) && strstr(err, "unsupported_chat_template"), "%s", err);
    eng_free(e);
    unlink(path);
    e = open_engine(&c, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "chat_template %s: cannot read it (1 byte to 1 MiB)", path);
    CK_CHECK_MSG(!e && !strcmp(err, want), "%s", err);
    eng_free(e);
    rmdir(dir);
}

int main(void) {
    CK_RUN(test_prompt_is_its_tokens);
    CK_RUN(test_limits);
    CK_RUN(test_chat_override);
    return ck_test_summary();
}
