/* chat.c - chat messages to prompt tokens (see chat.h). */
#include "chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "gguf.h"
#include "model.h"

/* One special token that may be cut out of template text. */
typedef struct chat_special {
    const char *s; /* the tokenizer's piece text (borrowed) */
    size_t n;
    int32_t id;
} chat_special;

struct chat_template {
    const tokenizer *tok; /* borrowed */
    jinja_template *jt;   /* NULL: no template (contents joined with "\n") */
    int source;           /* CHAT_SRC_* */
    char hash[17];
    char *bos, *eos; /* the texts of BOS / EOS ("" when none) */
    int system_role; /* chat_has_system_role: the probe's answer */
    /* special tokens by first byte: first[b] .. first[b + 1] in sp, each
     * range longest first (leftmost-longest matching) */
    chat_special *sp;
    size_t n_sp;
    size_t first[257];
};

int chat_template_in_gguf(const gguf_file *f, const char **src, size_t *len) {
    *src = NULL;
    *len = 0;
    if (!f) return CK_ENOTFOUND;
    int rc = gguf_get_str(f, "tokenizer.chat_template", src, len);
    if (rc == 0 && *len == 0) rc = CK_ENOTFOUND;
    if (rc) {
        *src = NULL;
        *len = 0;
    }
    return rc;
}

static char *piece_text(const tokenizer *tok, int id) {
    size_t n = 0;
    const char *p = id >= 0 ? tok_piece(tok, id, &n) : NULL;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

static int cmp_special(const void *a, const void *b) {
    const chat_special *x = a, *y = b;
    unsigned char fx = (unsigned char)x->s[0], fy = (unsigned char)y->s[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->n != y->n) return x->n > y->n ? -1 : 1; /* longest first */
    return x->id < y->id ? -1 : x->id > y->id;     /* duplicates: the lowest id wins */
}

static void set_err(jinja_error *err, int code, const char *kind, const char *msg) {
    if (!err) return;
    err->code = code;
    err->kind = kind;
    err->line = 0;
    snprintf(err->msg, sizeof err->msg, "%s", msg);
}

/* The variables of one render: jinja_chat_vars's, and `tools` when given
 * (a reference taken, dropped with *vars). */
static int make_vars(const chat_template *c, const chat_message *msgs, size_t n, jinja_value *tools,
                     int add_generation_prompt, jinja_value **vars) {
    /* engine.h's eng_message, chat.h's chat_message and jinja.h's jinja_message are one shape */
    int rc = jinja_chat_vars((const jinja_message *)msgs, n, c->bos, c->eos, add_generation_prompt, vars);
    if (rc == 0 && tools && (rc = jinja_dict_set(*vars, "tools", 5, jinja_ref(tools)))) {
        jinja_release(*vars);
        *vars = NULL;
    }
    return rc;
}

/* Does the template render a system role? A probe render of a system and a
 * user message (tools an empty list, so that templates which walk `tools`
 * unguarded still render) answers: yes when the system content is in the
 * text. A template that fails on the probe has none. Only running out of
 * memory is an error. */
static int probe_system_role(const chat_template *c, int *yes) {
    static const char needle[] = "System message";
    const chat_message probe[2] = {{"system", needle}, {"user", "User message"}};
    jinja_value *tools = jinja_list(), *vars = NULL;
    *yes = 0;
    if (!tools) return CK_ENOMEM;
    int rc = make_vars(c, probe, 2, tools, 1, &vars);
    jinja_release(tools);
    if (rc) return rc;
    struct tm now = {.tm_year = 124, .tm_mon = 0, .tm_mday = 1, .tm_hour = 12}; /* fixed: no clock read */
    char *text = NULL;
    jinja_error je;
    rc = jinja_render(c->jt, vars, &now, &text, NULL, &je);
    jinja_release(vars);
    if (rc == CK_ENOMEM) return rc;
    *yes = rc == 0 && strstr(text, needle) != NULL;
    free(text);
    return 0;
}

int chat_new(const tokenizer *tok, const char *src, size_t len, int source, chat_template **out,
             jinja_error *err) {
    *out = NULL;
    if (!tok || (len && !src)) {
        set_err(err, CK_EINVAL, "chat_template_error", "chat_new: invalid argument");
        return CK_EINVAL;
    }
    chat_template *c = calloc(1, sizeof *c);
    if (!c) goto nomem;
    c->tok = tok;
    c->source = len ? source : CHAT_SRC_NONE;
    if (!(c->bos = piece_text(tok, tok_bos(tok))) || !(c->eos = piece_text(tok, tok_eos(tok)))) goto nomem;
    if (len) {
        int rc = jinja_parse(src, len, NULL, &c->jt, err);
        if (rc) {
            chat_free(c);
            return rc;
        }
        uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
        for (size_t i = 0; i < len; i++) {
            h ^= (unsigned char)src[i];
            h *= 1099511628211ull;
        }
        snprintf(c->hash, sizeof c->hash, "%016llx", (unsigned long long)h);
        if (probe_system_role(c, &c->system_role)) goto nomem;
    } else {
        c->system_role = 1; /* the joined text has no roles to refuse */
    }
    /* the pieces that become tokens only where the template wrote them:
     * CONTROL and UNKNOWN (TOK_ENC_PARSE_SPECIAL's), and USER ones, which
     * plain text would cut out anywhere (Gemma 4's <|tool_call>) */
    int nv = tok_vocab_size(tok);
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0;
        for (int id = 0; id < nv; id++) {
            int ty = tok_type(tok, id);
            size_t n = 0;
            const char *p = tok_piece(tok, id, &n);
            if ((ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_UNKNOWN && ty != TOK_TYPE_USER) || !p || !n)
                continue;
            if (pass) c->sp[k] = (chat_special){p, n, id};
            k++;
        }
        if (pass == 0) {
            c->n_sp = k;
            if (k && !(c->sp = malloc(k * sizeof *c->sp))) goto nomem;
        }
    }
    if (c->n_sp) qsort(c->sp, c->n_sp, sizeof *c->sp, cmp_special);
    for (int b = 0, k = 0; b <= 256; b++) {
        while ((size_t)k < c->n_sp && (unsigned char)c->sp[k].s[0] < b) k++;
        c->first[b] = (size_t)k;
    }
    c->first[256] = c->n_sp;
    *out = c;
    return 0;
nomem:
    chat_free(c);
    set_err(err, CK_ENOMEM, "out_of_memory", "chat_new: out of memory");
    return CK_ENOMEM;
}

void chat_free(chat_template *c) {
    if (!c) return;
    jinja_template_free(c->jt);
    free(c->bos);
    free(c->eos);
    free(c->sp);
    free(c);
}

int chat_source(const chat_template *c) { return c ? c->source : CHAT_SRC_NONE; }
const char *chat_source_name(int s) {
    return s == CHAT_SRC_MODEL ? "model" : s == CHAT_SRC_OVERRIDE ? "override" : "none";
}
const char *chat_template_hash(const chat_template *c) { return c ? c->hash : ""; }
const char *chat_bos_text(const chat_template *c) { return c ? c->bos : ""; }
const char *chat_eos_text(const chat_template *c) { return c ? c->eos : ""; }
int chat_has_system_role(const chat_template *c) { return c ? c->system_role : 1; }

const char *chat_warning_text(int bit) {
    switch (bit) {
    case CHAT_WARN_SYSTEM_MERGED:
        return "system message merged into the next turn: the chat template has no system role";
    case CHAT_WARN_SYSTEM_DROPPED:
        return "system message dropped: the chat template has no system role and the chat has no other "
               "message";
    }
    return NULL;
}

/* The merge of a leading system message into the next message (llama.cpp's
 * rule for a template without a system role): *out (malloc'd, the caller
 * frees it with *merged, the joined content) holds the chat to render. */
static int merge_system(const chat_message *msgs, size_t n, chat_message **out, size_t *n_out, char **merged,
                        int *warnings) {
    *out = NULL;
    *merged = NULL;
    *n_out = n - 1;
    if (n == 1) {
        *warnings |= CHAT_WARN_SYSTEM_DROPPED;
        return 0;
    }
    size_t a = strlen(msgs[0].content), b = strlen(msgs[1].content);
    if (a > SIZE_MAX - 2 - b) return CK_ETOOLONG;
    chat_message *m = malloc((n - 1) * sizeof *m);
    char *s = malloc(a + b + 2);
    if (!m || !s) {
        free(m);
        free(s);
        return CK_ENOMEM;
    }
    memcpy(s, msgs[0].content, a);
    s[a] = '\n';
    memcpy(s + a + 1, msgs[1].content, b + 1);
    m[0] = (chat_message){msgs[1].role, s};
    if (n > 2) memcpy(m + 1, msgs + 2, (n - 2) * sizeof *m);
    *out = m;
    *merged = s;
    *warnings |= CHAT_WARN_SYSTEM_MERGED;
    return 0;
}

int chat_render(const chat_template *c, const chat_input *in, char **text, size_t *len, jinja_span **spans,
                size_t *n_spans, int *warnings, jinja_error *err) {
    int warn = 0;
    *text = NULL;
    if (len) *len = 0;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (warnings) *warnings = 0;
    if (!c || !in || !in->msgs || in->n == 0) {
        set_err(err, CK_EINVAL, "chat_template_error", "chat_render: no messages");
        return CK_EINVAL;
    }
    const chat_message *msgs = in->msgs;
    size_t n = in->n;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            set_err(err, CK_EINVAL, "chat_template_error", "chat_render: a message without role or content");
            return CK_EINVAL;
        }
    if (!c->jt) { /* no template: the contents, one per line, all data */
        if (in->tools) {
            set_err(err, CK_EINVAL, "chat_template_error",
                    "tools need a chat template; this model has none (its messages are joined as text)");
            return CK_EINVAL;
        }
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            size_t k = strlen(msgs[i].content) + (i > 0);
            if (k > SIZE_MAX - 1 - total) {
                set_err(err, CK_ETOOLONG, "chat_template_limit", "chat_render: too long");
                return CK_ETOOLONG;
            }
            total += k;
        }
        char *p = malloc(total + 1);
        jinja_span *sp = total && spans ? malloc(sizeof *sp) : NULL;
        if (!p || (total && spans && !sp)) {
            free(p);
            free(sp);
            set_err(err, CK_ENOMEM, "out_of_memory", "chat_render: out of memory");
            return CK_ENOMEM;
        }
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            if (i) p[at++] = '\n';
            size_t k = strlen(msgs[i].content);
            memcpy(p + at, msgs[i].content, k);
            at += k;
        }
        p[at] = 0;
        if (sp) {
            sp->start = 0;
            sp->len = total;
        }
        *text = p;
        if (len) *len = total;
        if (spans) {
            *spans = sp;
            if (n_spans) *n_spans = sp ? 1 : 0;
        }
        return 0;
    }
    chat_message *merged_msgs = NULL;
    char *merged = NULL;
    int rc = 0;
    if (!c->system_role && strcmp(msgs[0].role, "system") == 0) {
        if ((rc = merge_system(msgs, n, &merged_msgs, &n, &merged, &warn))) {
            set_err(err, rc, rc == CK_ENOMEM ? "out_of_memory" : "chat_template_limit",
                    "chat_render: cannot merge the system message");
            return rc;
        }
        msgs = merged_msgs;
    }
    jinja_value *vars;
    rc = make_vars(c, msgs, n, in->tools, in->add_generation_prompt, &vars);
    free(merged_msgs); /* jinja_chat_vars copied the strings */
    free(merged);
    if (rc) {
        set_err(err, rc, rc == CK_ENOMEM ? "out_of_memory" : "chat_template_error",
                "chat_render: cannot build the variables");
        return rc;
    }
    rc = jinja_render_spans(c->jt, vars, in->now, text, len, spans, n_spans, err);
    jinja_release(vars);
    if (rc == 0 && warnings) *warnings = warn;
    return rc;
}

/* Encode text[a, z) as plain text (no special parsing, user-defined
 * pieces included: chat_tokenize matched the template's) into out + *n. */
static int encode_run(const chat_template *c, const char *text, size_t a, size_t z, int32_t *out, int max,
                      int *n) {
    if (a >= z) return 0;
    int got = 0;
    int rc = tok_encode_opts(c->tok, text + a, z - a, TOK_ENC_NO_USER, out + *n, max - *n, &got);
    if (rc == CK_ETOOLONG) {
        *n = got > max - *n ? *n + got : max + 1; /* a lower bound above max */
        return rc;
    }
    if (rc) return rc;
    *n += got;
    return 0;
}

/* The longest special token at text[i..) whose bytes all lie in [i, tz)
 * (template bytes up to the next data span), or NULL. */
static const chat_special *special_at(const chat_template *c, const char *text, size_t i, size_t tz) {
    unsigned char b = (unsigned char)text[i];
    for (size_t k = c->first[b]; k < c->first[b + 1]; k++) {
        const chat_special *s = &c->sp[k];
        if (s->n <= tz - i && memcmp(text + i, s->s, s->n) == 0) return s;
    }
    return NULL;
}

int chat_tokenize(const chat_template *c, const char *text, size_t len, const jinja_span *spans,
                  size_t n_spans, int32_t *out, int max, int *n_out) {
    *n_out = 0;
    if (!c || (len && !text) || (n_spans && !spans) || max < 0 || (max && !out)) return CK_EINVAL;
    int n = 0, bos = tok_bos(c->tok), eos = tok_eos(c->tok), add_bos = tok_adds_bos(c->tok) && bos >= 0;
    /* room for a BOS in front: encode from out + 1, move down if not needed */
    if (add_bos) {
        if (max < 1) {
            *n_out = 1;
            return CK_ETOOLONG;
        }
        n = 1;
    }
    size_t run = 0, i = 0, k = 0; /* run: start of the text not yet encoded; k: next data span */
    int rc = 0;
    while (i < len && rc == 0) {
        while (k < n_spans && spans[k].start + spans[k].len <= i) k++;
        if (k < n_spans && spans[k].start <= i) { /* inside data: skip the span */
            i = spans[k].start + spans[k].len;
            continue;
        }
        size_t tz = k < n_spans ? spans[k].start : len; /* template bytes end here */
        if (tz > len) return CK_EINVAL;
        const chat_special *s = c->n_sp ? special_at(c, text, i, tz) : NULL;
        if (!s) {
            i++;
            continue;
        }
        rc = encode_run(c, text, run, i, out, max, &n);
        if (rc) break;
        if (n >= max) {
            n = max + 1;
            rc = CK_ETOOLONG;
            break;
        }
        out[n++] = s->id;
        i += s->n;
        run = i;
    }
    if (rc == 0) rc = encode_run(c, text, run, len, out, max, &n);
    if (rc == 0 && add_bos) {
        if (n > 1 && out[1] == bos) { /* the template wrote its BOS: no second one */
            memmove(out, out + 1, (size_t)(n - 1) * sizeof *out);
            n--;
        } else {
            out[0] = bos;
        }
    }
    if (rc == 0 && tok_adds_eos(c->tok) && eos >= 0 && !(n > 0 && out[n - 1] == eos)) {
        if (n >= max) {
            n = max + 1;
            rc = CK_ETOOLONG;
        } else
            out[n++] = eos;
    }
    *n_out = n;
    return rc;
}

int chat_tokenize_text(const chat_template *c, const char *text, size_t len, int parse_special, int32_t *out,
                       int max, int *n_out) {
    jinja_span all = {0, len};
    return chat_tokenize(c, text, len, parse_special || !len ? NULL : &all, parse_special || !len ? 0 : 1,
                         out, max, n_out);
}

/* model.h keeps the GGUF handle private (gguf_); its tokenizer.* keys are
 * read here, read-only, as the model's own loader reads them. */
static const gguf_file *model_gguf(const model *m) {
    return m && m->format == MODEL_FMT_GGUF ? (const gguf_file *)m->gguf_ : NULL;
}

int chat_template_in_model(const model *m, const char **src, size_t *len) {
    return chat_template_in_gguf(model_gguf(m), src, len);
}

static void copy_key(const gguf_file *f, const char *key, char *buf, size_t cap, const char *dflt) {
    const char *s;
    size_t n;
    if (f && gguf_get_str(f, key, &s, &n) == 0) {
        if (n >= cap) n = cap - 1;
        memcpy(buf, s, n);
        buf[n] = 0;
        for (size_t i = 0; i < n; i++) /* for logs and JSON: printable ASCII, no quote or backslash */
            if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] > 0x7e || buf[i] == '"' ||
                buf[i] == '\\')
                buf[i] = '?';
    } else {
        snprintf(buf, cap, "%s", dflt);
    }
}

void chat_model_describe(const model *m, const gguf_file *f, const chat_template *c, chat_model_info *info) {
    memset(info, 0, sizeof *info);
    if (!f) f = model_gguf(m);
    if (f) {
        copy_key(f, "general.architecture", info->arch, sizeof info->arch, "");
        copy_key(f, "tokenizer.ggml.model", info->tok_model, sizeof info->tok_model, "");
        copy_key(f, "tokenizer.ggml.pre", info->tok_pre, sizeof info->tok_pre,
                 strcmp(info->tok_model, "gpt2") ? "" : "default");
    } else {
        snprintf(info->arch, sizeof info->arch, "llama");
        snprintf(info->tok_model, sizeof info->tok_model, "llama2c");
    }
    info->template_source = chat_source_name(chat_source(c));
    snprintf(info->template_hash, sizeof info->template_hash, "%s", chat_template_hash(c));
}
