/* jinja.c - the chat-template renderer (see jinja.h).
 *
 * Four parts, top to bottom: values (reference-counted tagged unions), the
 * lexer (Jinja's, with HF's trim_blocks + lstrip_blocks), the parser (a
 * recursive descent over Jinja's grammar into a small AST), and the
 * evaluator (scopes, operators, filters, tests, methods, statements).
 *
 * Where Python and C differ the code follows Python: strings are indexed,
 * sliced and measured in code points, str() of a float is Python's repr,
 * `and`/`or` return an operand, integer division floors, and so on, because
 * the renderings must equal apply_chat_template's byte for byte. */
#include "jinja.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

void jinja_limits_default(jinja_limits *l) {
    l->max_template = 1u << 20;
    l->max_depth = 64;
    l->max_output = 16u << 20;
    l->max_loop_iters = 1000000;
    l->max_steps = 20000000;
    l->max_alloc = 256u << 20;
}

static const char K_UNSUP[] = "unsupported_chat_template";
static const char K_RAISE[] = "chat_template_exception";
static const char K_ERROR[] = "chat_template_error";
static const char K_LIMIT[] = "chat_template_limit";
static const char K_NOMEM[] = "out_of_memory";

static void set_err(jinja_error *err, int code, const char *kind, int line, const char *fmt, va_list ap) {
    if (!err) return;
    err->code = code;
    err->kind = kind;
    err->line = line;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

static void clear_err(jinja_error *err) {
    if (!err) return;
    err->code = 0;
    err->kind = "";
    err->line = 0;
    err->msg[0] = 0;
}

/* =========================================================================
 * values */

enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_MACRO };
enum { FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME };

struct jnode;
struct jinja_value {
    int type;
    int refs; /* < 0: immortal, a template's literal (so renders never write it) */
    int safe; /* JV_STR made by |safe: a markupsafe.Markup in Jinja (see binop) */
    int dkeys; /* JV_DICT: its keys are data (a caller's dict, or keys computed from data) */
    union {
        int b;
        long long i;
        double f;
        /* JV_STR; JV_UNDEF's name (s may be NULL). sp: the provenance, nsp
         * [start, end) byte ranges (sp[2k], sp[2k+1]), sorted, disjoint and
         * not touching, of the bytes that came from the caller's data; the
         * other bytes are the template's (see jinja_render_spans) */
        struct { char *s; size_t n; size_t *sp; size_t nsp; } s;
        struct { jinja_value **v; size_t n, cap; int tuple; } l;
        struct { char **k; size_t *kn; jinja_value **v; size_t n, cap; } d; /* JV_DICT, JV_NS */
        int fn;
        const struct jnode *m;
    } u;
};

static jinja_value *jv_ref(jinja_value *v) {
    if (v && v->refs >= 0) v->refs++;
    return v;
}

static void jv_free_contents(jinja_value *v) {
    size_t i;
    switch (v->type) {
    case JV_STR: case JV_UNDEF: free(v->u.s.s); free(v->u.s.sp); break;
    case JV_LIST:
        for (i = 0; i < v->u.l.n; i++) jinja_release(v->u.l.v[i]);
        free(v->u.l.v);
        break;
    case JV_DICT: case JV_NS:
        for (i = 0; i < v->u.d.n; i++) { free(v->u.d.k[i]); jinja_release(v->u.d.v[i]); }
        free(v->u.d.k); free(v->u.d.kn); free(v->u.d.v);
        break;
    default: break;
    }
}

void jinja_release(jinja_value *v) {
    if (!v || v->refs < 0) return;
    if (--v->refs > 0) return;
    jv_free_contents(v);
    free(v);
}

static jinja_value *jv_new(int type) {
    jinja_value *v = calloc(1, sizeof *v);
    if (v) { v->type = type; v->refs = 1; }
    return v;
}

jinja_value *jinja_none(void) { return jv_new(JV_NONE); }
jinja_value *jinja_bool(int b) { jinja_value *v = jv_new(JV_BOOL); if (v) v->u.b = !!b; return v; }
jinja_value *jinja_int(long long i) { jinja_value *v = jv_new(JV_INT); if (v) v->u.i = i; return v; }
jinja_value *jinja_float(double f) { jinja_value *v = jv_new(JV_FLOAT); if (v) v->u.f = f; return v; }
/* A string of the template's own (no data bytes). */
static jinja_value *jv_str_plain(const char *s, size_t n) {
    jinja_value *v = jv_new(JV_STR);
    if (!v) return NULL;
    v->u.s.s = malloc(n + 1);
    if (!v->u.s.s) { free(v); return NULL; }
    if (n) memcpy(v->u.s.s, s, n);
    v->u.s.s[n] = 0;
    v->u.s.n = n;
    return v;
}
jinja_value *jinja_str(const char *s, size_t n) {
    jinja_value *v = jv_str_plain(s, n);
    if (v && n) {
        v->u.s.sp = malloc(2 * sizeof *v->u.s.sp);
        if (!v->u.s.sp) { jinja_release(v); return NULL; }
        v->u.s.sp[0] = 0;
        v->u.s.sp[1] = n;
        v->u.s.nsp = 1;
    }
    return v;
}
jinja_value *jinja_str_trusted(const char *s, size_t n) { return jv_str_plain(s, n); }
jinja_value *jinja_list(void) { return jv_new(JV_LIST); }
jinja_value *jinja_dict(void) {
    jinja_value *v = jv_new(JV_DICT);
    if (v) v->dkeys = 1;
    return v;
}

int jinja_list_append(jinja_value *list, jinja_value *item) {
    if (!item) return CK_ENOMEM;
    if (!list || list->type != JV_LIST) { jinja_release(item); return CK_EINVAL; }
    if (list->u.l.n == list->u.l.cap) {
        size_t nc = list->u.l.cap ? list->u.l.cap * 2 : 4;
        jinja_value **nv = realloc(list->u.l.v, nc * sizeof *nv);
        if (!nv) { jinja_release(item); return CK_ENOMEM; }
        list->u.l.v = nv;
        list->u.l.cap = nc;
    }
    list->u.l.v[list->u.l.n++] = item;
    return 0;
}

/* Index of key in a dict or namespace, or -1. Linear: chat dicts are small. */
static long dict_find(const jinja_value *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->u.d.n; i++)
        if (d->u.d.kn[i] == kn && memcmp(d->u.d.k[i], k, kn) == 0) return (long)i;
    return -1;
}

int jinja_dict_set(jinja_value *dict, const char *key, size_t kn, jinja_value *val) {
    if (!val) return CK_ENOMEM;
    if (!dict || (dict->type != JV_DICT && dict->type != JV_NS) || (!key && kn)) {
        jinja_release(val);
        return CK_EINVAL;
    }
    long at = dict_find(dict, key, kn);
    if (at >= 0) {
        jinja_release(dict->u.d.v[at]);
        dict->u.d.v[at] = val;
        return 0;
    }
    if (dict->u.d.n == dict->u.d.cap) {
        size_t nc = dict->u.d.cap ? dict->u.d.cap * 2 : 4;
        char **nk = realloc(dict->u.d.k, nc * sizeof *nk);
        if (nk) dict->u.d.k = nk;
        size_t *nl = realloc(dict->u.d.kn, nc * sizeof *nl);
        if (nl) dict->u.d.kn = nl;
        jinja_value **nv = realloc(dict->u.d.v, nc * sizeof *nv);
        if (nv) dict->u.d.v = nv;
        if (!nk || !nl || !nv) { jinja_release(val); return CK_ENOMEM; }
        dict->u.d.cap = nc;
    }
    char *k = malloc(kn + 1);
    if (!k) { jinja_release(val); return CK_ENOMEM; }
    if (kn) memcpy(k, key, kn);
    k[kn] = 0;
    dict->u.d.k[dict->u.d.n] = k;
    dict->u.d.kn[dict->u.d.n] = kn;
    dict->u.d.v[dict->u.d.n] = val;
    dict->u.d.n++;
    return 0;
}

static int dict_set_cstr(jinja_value *d, const char *key, jinja_value *val) {
    return jinja_dict_set(d, key, strlen(key), val);
}

int jinja_chat_vars(const jinja_message *msgs, size_t n, const char *bos, const char *eos,
                    int add_generation_prompt, jinja_value **out) {
    *out = NULL;
    if (n && !msgs) return CK_EINVAL;
    jinja_value *vars = jinja_dict(), *list = jinja_list();
    int rc = vars && list ? 0 : CK_ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!msgs[i].role || !msgs[i].content) { rc = CK_EINVAL; break; }
        jinja_value *m = jinja_dict();
        if (!m) { rc = CK_ENOMEM; break; }
        rc = dict_set_cstr(m, "role", jinja_str(msgs[i].role, strlen(msgs[i].role)));
        if (rc == 0) rc = dict_set_cstr(m, "content", jinja_str(msgs[i].content, strlen(msgs[i].content)));
        if (rc == 0) rc = jinja_list_append(list, m);
        else jinja_release(m);
    }
    if (rc == 0) { rc = dict_set_cstr(vars, "messages", list); list = NULL; }
    if (rc == 0) rc = dict_set_cstr(vars, "tools", jinja_none());
    if (rc == 0) rc = dict_set_cstr(vars, "documents", jinja_none());
    /* the vocabulary's own marker texts: trusted, as template text */
    if (rc == 0) rc = dict_set_cstr(vars, "bos_token", jinja_str_trusted(bos ? bos : "", bos ? strlen(bos) : 0));
    if (rc == 0) rc = dict_set_cstr(vars, "eos_token", jinja_str_trusted(eos ? eos : "", eos ? strlen(eos) : 0));
    if (rc == 0) rc = dict_set_cstr(vars, "add_generation_prompt", jinja_bool(add_generation_prompt));
    jinja_release(list);
    if (rc) { jinja_release(vars); return rc; }
    *out = vars;
    return 0;
}

/* =========================================================================
 * text helpers: UTF-8, Python's whitespace, a bounded growing buffer */

/* Decode one code point at s[i..n); *len gets its byte length. A byte that
 * does not start valid UTF-8 counts as one code point of its own value. */
static unsigned utf8_dec(const unsigned char *s, size_t i, size_t n, size_t *len) {
    unsigned c = s[i];
    int need = c >= 0xf0 && c < 0xf8 ? 3 : c >= 0xe0 && c < 0xf0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : 0;
    *len = 1;
    if (!need || n - i <= (size_t)need) return c;
    unsigned cp = c & (0x3fu >> need);
    for (int k = 1; k <= need; k++) {
        unsigned cc = s[i + k];
        if ((cc & 0xc0) != 0x80) return c;
        cp = cp << 6 | (cc & 0x3f);
    }
    *len = (size_t)need + 1;
    return cp;
}

static size_t utf8_enc(unsigned cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Python's str.isspace(), which str.strip(), str.split() and the regex \s of
 * Jinja's lexer use. */
static int py_space(unsigned c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* Start of the code point that ends at s[end) (end > start). */
static size_t utf8_prev(const char *s, size_t start, size_t end) {
    size_t i = end - 1;
    int back = 0;
    while (i > start && back < 3 && ((unsigned char)s[i] & 0xc0) == 0x80) { i--; back++; }
    size_t len;
    utf8_dec((const unsigned char *)s, i, end, &len);
    return i + len == end ? i : end - 1;
}

static size_t skip_space_fwd(const char *s, size_t i, size_t end) {
    while (i < end) {
        size_t len;
        if (!py_space(utf8_dec((const unsigned char *)s, i, end, &len))) break;
        i += len;
    }
    return i;
}

static size_t skip_space_back(const char *s, size_t start, size_t end) {
    while (end > start) {
        size_t p = utf8_prev(s, start, end), len;
        if (!py_space(utf8_dec((const unsigned char *)s, p, end, &len))) break;
        end = p;
    }
    return end;
}

static size_t utf8_count(const char *s, size_t n) {
    size_t c = 0, i = 0, len;
    while (i < n) { utf8_dec((const unsigned char *)s, i, n, &len); i += len; c++; }
    return c;
}

/* Byte offset of code point `cp` (cp <= count). */
static size_t utf8_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0, len;
    while (cp-- && i < n) { utf8_dec((const unsigned char *)s, i, n, &len); i += len; }
    return i;
}

typedef struct sbuf {
    char *p;
    size_t n, cap, max;
    size_t *sp, nsp, capsp; /* provenance of p[0..n), as a JV_STR's sp/nsp */
} sbuf;

static void sb_free(sbuf *b) {
    free(b->p);
    free(b->sp);
    b->p = NULL;
    b->sp = NULL;
    b->n = b->cap = b->nsp = b->capsp = 0;
}

/* Mark b's bytes [from, to) as data. Marks come in increasing order (a
 * buffer only grows at its end), so a mark that touches the last one
 * extends it. 0 or CK_ENOMEM. */
static int sb_span(sbuf *b, size_t from, size_t to) {
    if (from >= to) return 0;
    if (b->nsp && b->sp[2 * b->nsp - 1] >= from) {
        if (to > b->sp[2 * b->nsp - 1]) b->sp[2 * b->nsp - 1] = to;
        return 0;
    }
    if (b->nsp == b->capsp) {
        size_t nc = b->capsp ? b->capsp * 2 : 4;
        size_t *np = realloc(b->sp, 2 * nc * sizeof *np);
        if (!np) return CK_ENOMEM;
        b->sp = np;
        b->capsp = nc;
    }
    b->sp[2 * b->nsp] = from;
    b->sp[2 * b->nsp + 1] = to;
    b->nsp++;
    return 0;
}

/* 0, or CK_ETOOLONG past b->max, or CK_ENOMEM. */
static int sb_add(sbuf *b, const char *s, size_t n) {
    if (n > b->max - b->n) return CK_ETOOLONG;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return CK_ENOMEM;
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}
static int sb_cstr(sbuf *b, const char *s) { return sb_add(b, s, strlen(s)); }
static int sb_ch(sbuf *b, char c) { return sb_add(b, &c, 1); }

/* Append string v's bytes [off, off + len) with their provenance. */
static int sb_addv(sbuf *b, const jinja_value *v, size_t off, size_t len) {
    size_t at = b->n, end = off + len, lo = 0, hi = v->u.s.nsp;
    int rc = sb_add(b, v->u.s.s + off, len);
    /* the first span that ends after off: spans are sorted */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->u.s.sp[2 * mid + 1] <= off) lo = mid + 1;
        else hi = mid;
    }
    for (size_t k = lo; rc == 0 && k < v->u.s.nsp && v->u.s.sp[2 * k] < end; k++) {
        size_t a = v->u.s.sp[2 * k], z = v->u.s.sp[2 * k + 1];
        rc = sb_span(b, at + (a > off ? a : off) - off, at + (z < end ? z : end) - off);
    }
    return rc;
}

/* Mark b's bytes from `from` on as data when `tainted`: for results made
 * from data in ways not tracked byte by byte (repr, JSON escapes). */
static int sb_taint_from(sbuf *b, size_t from, int tainted) { return tainted ? sb_span(b, from, b->n) : 0; }

/* Python's repr() of a float (also str() and json.dumps of one). */
static void py_float(double d, char *out, size_t outsz) {
    if (isnan(d)) { snprintf(out, outsz, "nan"); return; }
    if (isinf(d)) { snprintf(out, outsz, d < 0 ? "-inf" : "inf"); return; }
    if (d == 0) { snprintf(out, outsz, signbit(d) ? "-0.0" : "0.0"); return; }
    char tmp[48];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp: [-]D[.DDD]e(+|-)XX: take the digits and the exponent apart */
    char digits[24];
    int nd = 0, neg = 0;
    const char *p = tmp;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    int ex = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    size_t left = outsz;
#define PUT_(c) do { if (left > 1) { *o++ = (c); left--; } } while (0)
    if (neg) PUT_('-');
    if (ex >= -4 && ex < 16) {
        if (ex >= 0) {
            for (int i = 0; i <= ex; i++) PUT_(i < nd ? digits[i] : '0');
            PUT_('.');
            if (nd > ex + 1) for (int i = ex + 1; i < nd; i++) PUT_(digits[i]);
            else PUT_('0');
        } else {
            PUT_('0'); PUT_('.');
            for (int i = 0; i < -ex - 1; i++) PUT_('0');
            for (int i = 0; i < nd; i++) PUT_(digits[i]);
        }
        *o = 0;
    } else {
        PUT_(digits[0]);
        if (nd > 1) { PUT_('.'); for (int i = 1; i < nd; i++) PUT_(digits[i]); }
        *o = 0;
        size_t used = (size_t)(o - out);
        snprintf(o, outsz - used, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
#undef PUT_
}

/* =========================================================================
 * the lexer: the template as Jinja's token stream
 *
 * Whitespace control as Jinja's lexer applies it with HF's settings:
 *  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`,
 *    `-#}` all whitespace after it;
 *  - trim_blocks: the first newline after a `%}` or `#}` goes;
 *  - lstrip_blocks: spaces and tabs from the start of a line to a `{%` or
 *    `{#` go (not before `{{`; `{%+` keeps them, `+%}` keeps the newline);
 *  - newlines are normalised to \n and one trailing newline is dropped
 *    (keep_trailing_newline=False). */

enum { TK_EOF, TK_DATA, TK_VAR_B, TK_VAR_E, TK_BLK_B, TK_BLK_E, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP };

typedef struct token {
    int type, line;
    const char *p; /* NAME, OP, DATA: into the template's source; STR: decoded (lit) */
    size_t n;
    long long i;
    double f;
    jinja_value *lit; /* STR: the decoded string (immortal, the template's) */
} token;

typedef struct jnode jnode;

struct jinja_template {
    jinja_limits lim;
    char *src; /* normalised source: names and text point into it */
    size_t src_n;
    jnode *root;
    jnode **nodes; /* every node, for freeing */
    size_t n_nodes, cap_nodes;
    jinja_value **lits; /* every literal (immortal) */
    size_t n_lits, cap_lits;
};

typedef struct parser {
    jinja_template *t;
    token *tk;
    size_t n_tk, cap_tk, pos;
    int depth, loop_depth;
    jinja_error *err;
    int failed;
} parser;

static int perr(parser *P, int line, int code, const char *fmt, ...) {
    if (P->failed) return P->failed;
    va_list ap;
    va_start(ap, fmt);
    set_err(P->err, code, code == CK_ENOMEM ? K_NOMEM : code == CK_ETOOLONG || code == CK_ERANGE ? K_LIMIT : K_UNSUP,
            line, fmt, ap);
    va_end(ap);
    P->failed = code;
    return code;
}

static jinja_value *keep_lit(parser *P, jinja_value *v) {
    if (!v) { perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__); return NULL; }
    jinja_template *t = P->t;
    if (t->n_lits == t->cap_lits) {
        size_t nc = t->cap_lits ? t->cap_lits * 2 : 64;
        jinja_value **nl = realloc(t->lits, nc * sizeof *nl);
        if (!nl) { jinja_release(v); perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__); return NULL; }
        t->lits = nl;
        t->cap_lits = nc;
    }
    v->refs = -1;
    t->lits[t->n_lits++] = v;
    return v;
}

static token *push_tok(parser *P, int type, int line, const char *p, size_t n) {
    if (P->n_tk == P->cap_tk) {
        size_t nc = P->cap_tk ? P->cap_tk * 2 : 256;
        token *nt = realloc(P->tk, nc * sizeof *nt);
        if (!nt) { perr(P, line, CK_ENOMEM, "%s: out of memory", __func__); return NULL; }
        P->tk = nt;
        P->cap_tk = nc;
    }
    token *t = &P->tk[P->n_tk++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line;
    t->p = p;
    t->n = n;
    return t;
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal's body s[0..n) decoded as Python's unicode-escape does
 * (Jinja's own unescaping); the result goes to the template's literals. */
static jinja_value *decode_string(parser *P, int line, const char *s, size_t n) {
    char *o = malloc(n + 1);
    if (!o) { perr(P, line, CK_ENOMEM, "%s: out of memory", __func__); return NULL; }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { o[j++] = s[i]; continue; }
        char c = s[++i];
        unsigned cp;
        int nh = 0;
        switch (c) {
        case '\n': break;
        case '\\': case '\'': case '"': o[j++] = c; break;
        case 'a': o[j++] = 7; break;
        case 'b': o[j++] = 8; break;
        case 'f': o[j++] = 12; break;
        case 'n': o[j++] = '\n'; break;
        case 'r': o[j++] = '\r'; break;
        case 't': o[j++] = '\t'; break;
        case 'v': o[j++] = 11; break;
        case 'x': nh = 2; break;
        case 'u': nh = 4; break;
        case 'U': nh = 8; break;
        case 'N':
            free(o);
            perr(P, line, CK_EUNSUPPORTED, "line %d: \\N{...} escapes in string literals are not supported", line);
            return NULL;
        default:
            if (c >= '0' && c <= '7') {
                cp = 0;
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') { cp = cp * 8 + (unsigned)(s[i] - '0'); i++; k++; }
                i--;
                j += utf8_enc(cp, o + j);
            } else {
                o[j++] = '\\';
                o[j++] = c;
            }
        }
        if (nh) {
            /* \xhh needs exactly its digits: Python refuses the literal otherwise */
            if (i + (size_t)nh >= n) goto bad;
            cp = 0;
            for (int k = 1; k <= nh; k++) {
                int h = hexval((unsigned char)s[i + k]);
                if (h < 0) goto bad;
                cp = cp * 16 + (unsigned)h;
            }
            if (cp > 0x10ffff) goto bad;
            i += (size_t)nh;
            /* the escape is at least as long as its UTF-8, so o has room */
            j += utf8_enc(cp, o + j);
        }
    }
    jinja_value *v = jv_str_plain(o, j);
    free(o);
    return keep_lit(P, v);
bad:
    free(o);
    perr(P, line, CK_EUNSUPPORTED, "line %d: malformed escape in a string literal", line);
    return NULL;
}

static int is_name0(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Digits with single underscores between them ((\d+_)*\d+) at s[i..n):
 * returns the end, or i when there are none. */
static size_t scan_digits(const char *s, size_t i, size_t n) {
    size_t j = i;
    if (j >= n || !is_digit(s[j])) return i;
    while (j < n && is_digit(s[j])) {
        j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) j++;
    }
    return j;
}

/* Tokens inside one {{ }} or {% %} from s[*pos]; stops after the end tag. */
static int lex_tag(parser *P, int is_block, size_t *pos, int *line, int *line_starting) {
    const char *s = P->t->src;
    size_t n = P->t->src_n, i = *pos;
    int balance = 0, open_line = *line, prev_dot = 0;
    for (;;) {
        /* whitespace (Jinja's \s+) */
        size_t w = skip_space_fwd(s, i, n);
        for (size_t k = i; k < w; k++) if (s[k] == '\n') (*line)++;
        i = w;
        if (i >= n) return perr(P, open_line, CK_EUNSUPPORTED, "line %d: unterminated %s tag", open_line,
                                is_block ? "{% %}" : "{{ }}");
        /* the end tag, unless inside brackets (as Jinja: `{{ {'a': 1}}}`) */
        if (balance == 0) {
            const char *end = is_block ? "%}" : "}}";
            int sign = (s[i] == '-' || (is_block && s[i] == '+')) && i + 3 <= n && memcmp(s + i + 1, end, 2) == 0
                           ? s[i] : 0;
            if (sign || (i + 1 < n && memcmp(s + i, end, 2) == 0)) {
                if (!push_tok(P, is_block ? TK_BLK_E : TK_VAR_E, *line, s + i, 2)) return P->failed;
                i += sign ? 3 : 2;
                size_t last = i - 1;
                if (sign == '-') {
                    size_t w2 = skip_space_fwd(s, i, n);
                    for (size_t k = i; k < w2; k++) if (s[k] == '\n') (*line)++;
                    if (w2 > i) last = w2 - 1;
                    i = w2;
                } else if (!sign && is_block && i < n && s[i] == '\n') {
                    (*line)++;
                    last = i;
                    i++;
                }
                *line_starting = s[last] == '\n';
                *pos = i;
                return 0;
            }
        }
        int c = (unsigned char)s[i];
        if (is_digit(c)) {
            size_t j = scan_digits(s, i, n), fe = j;
            int is_float = 0;
            if (!prev_dot) {
                /* float: digits (. digits)? (e[+-]digits)? with at least one of the two */
                size_t k = j;
                if (k < n && s[k] == '.' && scan_digits(s, k + 1, n) > k + 1) { k = scan_digits(s, k + 1, n); is_float = 1; }
                if (k < n && (s[k] == 'e' || s[k] == 'E')) {
                    size_t e = k + 1;
                    if (e < n && (s[e] == '+' || s[e] == '-')) e++;
                    size_t ee = scan_digits(s, e, n);
                    if (ee > e) { k = ee; is_float = 1; }
                }
                if (is_float) fe = k;
            }
            char num[64];
            size_t nn = 0;
            for (size_t k = i; k < fe && nn < sizeof num - 1; k++) if (s[k] != '_') num[nn++] = s[k];
            num[nn] = 0;
            token *t = push_tok(P, is_float ? TK_FLOAT : TK_INT, *line, s + i, fe - i);
            if (!t) return P->failed;
            if (is_float) t->f = strtod(num, NULL);
            else {
                errno = 0;
                unsigned long long u = strtoull(num, NULL, 10);
                if (errno || u > 9223372036854775807ULL)
                    return perr(P, *line, CK_EUNSUPPORTED, "line %d: integer literal too large", *line);
                t->i = (long long)u;
            }
            i = fe;
            prev_dot = 0;
            continue;
        }
        if (is_name0(c)) {
            size_t j = i + 1;
            while (j < n && (is_name0(s[j]) || is_digit(s[j]))) j++;
            if (!push_tok(P, TK_NAME, *line, s + i, j - i)) return P->failed;
            i = j;
            prev_dot = 0;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            int l0 = *line;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n) { if (s[j + 1] == '\n') (*line)++; j++; }
                else if (s[j] == '\n') (*line)++;
                j++;
            }
            if (j >= n) return perr(P, l0, CK_EUNSUPPORTED, "line %d: unterminated string literal", l0);
            token *t = push_tok(P, TK_STR, l0, s + i, j + 1 - i);
            if (!t) return P->failed;
            t->lit = decode_string(P, l0, s + i + 1, j - i - 1);
            if (!t->lit) return P->failed;
            i = j + 1;
            prev_dot = 0;
            continue;
        }
        static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                          "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        size_t k;
        for (k = 0; k < sizeof ops / sizeof *ops; k++) {
            size_t ol = strlen(ops[k]);
            if (i + ol <= n && memcmp(s + i, ops[k], ol) == 0) break;
        }
        if (k == sizeof ops / sizeof *ops)
            return perr(P, *line, CK_EUNSUPPORTED, "line %d: unexpected character '%c' in a tag", *line,
                        c >= 0x20 && c < 0x7f ? c : '?');
        size_t ol = strlen(ops[k]);
        if (c == '(' || c == '[' || c == '{') balance++;
        if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
        if (!push_tok(P, TK_OP, *line, s + i, ol)) return P->failed;
        prev_dot = c == '.';
        i += ol;
    }
}

static int lex(parser *P) {
    const char *s = P->t->src;
    size_t n = P->t->src_n, pos = 0;
    int line = 1, line_starting = 1;
    while (pos < n) {
        size_t q = pos;
        int kind = 0;
        while (q + 1 < n) {
            if (s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#')) { kind = s[q + 1]; break; }
            q++;
        }
        if (!kind) q = n;
        char sign = kind && q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+') ? s[q + 2] : 0;
        size_t tend = q;
        if (kind && sign == '-') {
            tend = skip_space_back(s, pos, q);
        } else if (kind && sign != '+' && kind != '{') {
            size_t l = q;
            while (l > pos && s[l - 1] != '\n') l--;
            if ((l > pos || line_starting) && l < q && skip_space_fwd(s, l, q) == q) tend = l;
        }
        if (tend > pos && !push_tok(P, TK_DATA, line, s + pos, tend - pos)) return P->failed;
        for (size_t k = pos; k < q; k++) if (s[k] == '\n') line++;
        if (!kind) break;
        size_t body = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t j = body;
            int l0 = line;
            while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}')) j++;
            if (j + 1 >= n) return perr(P, l0, CK_EUNSUPPORTED, "line %d: unterminated comment", l0);
            for (size_t k = body; k < j; k++) if (s[k] == '\n') line++;
            char esign = j > body && (s[j - 1] == '-' || s[j - 1] == '+') ? s[j - 1] : 0;
            size_t e = j + 2, last = j + 1;
            if (esign == '-') {
                size_t w = skip_space_fwd(s, e, n);
                for (size_t k = e; k < w; k++) if (s[k] == '\n') line++;
                if (w > e) last = w - 1;
                e = w;
            } else if (!esign && e < n && s[e] == '\n') {
                line++;
                last = e;
                e++;
            }
            line_starting = s[last] == '\n';
            pos = e;
            continue;
        }
        if (!push_tok(P, kind == '%' ? TK_BLK_B : TK_VAR_B, line, s + q, 2)) return P->failed;
        pos = body;
        if (lex_tag(P, kind == '%', &pos, &line, &line_starting)) return P->failed;
    }
    return push_tok(P, TK_EOF, line, s + n, 0) ? 0 : P->failed;
}

/* =========================================================================
 * the parser: tokens to an AST, following jinja2/parser.py's grammar
 *
 *   expr    := or ('if' or ('else' expr)?)?
 *   or      := and ('or' and)*          and := not ('and' not)*
 *   not     := 'not' not | compare      compare := math1 (cmpop math1)*
 *   math1   := concat (('+'|'-') concat)*   concat := math2 ('~' math2)*
 *   math2   := pow (('*'|'/'|'//'|'%') pow)*   pow := unary ('**' unary)*
 *   unary   := ('-'|'+') unary | primary postfix* (filter | test | call)*
 *
 * so a filter binds tighter than any operator: `a + b | trim` trims b. */

enum {
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_NEG, E_POS, E_NOT, E_AND, E_OR,
    E_COND, E_LIST, E_TUPLE, E_DICT,
    /* statements */
    S_BODY, S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETNS, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE
};
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT,
       OP_GE, OP_IN, OP_NOTIN };

typedef struct nlist {
    jnode **v;
    int n, cap;
} nlist;

typedef struct slist {
    const char **v;
    size_t *len;
    int n, cap;
} slist;

/* One node; which fields a kind uses:
 *   E_LIT lit | E_NAME name | E_ATTR a.name | E_ITEM a[b] | E_SLICE a[b:c:d]
 *   E_CALL a(args, kw=kwv) | E_FILTER a|name(args, kw) | E_TEST a is [not:op] name(args)
 *   E_BIN a op b | E_NEG/E_POS/E_NOT a | E_AND/E_OR a b | E_COND b if a else c
 *   E_LIST/E_TUPLE args | E_DICT args: kwv
 *   S_BODY body | S_TEXT lit | S_OUT a | S_IF if a: body else: els
 *   S_FOR for names in a if b: body else: els | S_SET names = a
 *   S_SETNS name.name2 = a | S_SETBLOCK name: body
 *   S_MACRO name(names = kwv (NULL where no default)): body */
struct jnode {
    int kind, line, op;
    const char *name, *name2;
    size_t nlen, nlen2;
    jinja_value *lit;
    jnode *a, *b, *c, *d;
    nlist args, kwv, body, els;
    slist kw, names;
    int fid; /* E_FILTER / E_TEST: index in the table */
};

static jnode *new_node(parser *P, int kind, int line) {
    jinja_template *t = P->t;
    if (t->n_nodes == t->cap_nodes) {
        size_t nc = t->cap_nodes ? t->cap_nodes * 2 : 128;
        jnode **nn = realloc(t->nodes, nc * sizeof *nn);
        if (!nn) { perr(P, line, CK_ENOMEM, "%s: out of memory", __func__); return NULL; }
        t->nodes = nn;
        t->cap_nodes = nc;
    }
    jnode *e = calloc(1, sizeof *e);
    if (!e) { perr(P, line, CK_ENOMEM, "%s: out of memory", __func__); return NULL; }
    e->kind = kind;
    e->line = line;
    t->nodes[t->n_nodes++] = e;
    return e;
}

static int nl_push(parser *P, nlist *l, jnode *e) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        jnode **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = e;
    return 0;
}

static int sl_push(parser *P, slist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        const char **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (nv) l->v = nv;
        size_t *nn = realloc(l->len, (size_t)nc * sizeof *nn);
        if (nn) l->len = nn;
        if (!nv || !nn) return perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__);
        l->cap = nc;
    }
    l->v[l->n] = s;
    l->len[l->n++] = n;
    return 0;
}

static token *cur(parser *P) { return &P->tk[P->pos]; }
static token *peek(parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->tk[i < P->n_tk ? i : P->n_tk - 1];
}
static void advance(parser *P) { if (P->tk[P->pos].type != TK_EOF) P->pos++; }
static int tok_is(const token *t, int type, const char *s) {
    return t->type == type && (!s || (t->n == strlen(s) && memcmp(t->p, s, t->n) == 0));
}
static int is_op(parser *P, const char *s) { return tok_is(cur(P), TK_OP, s); }
static int is_name(parser *P, const char *s) { return tok_is(cur(P), TK_NAME, s); }

static const char *tok_desc(const token *t, char *buf, size_t n) {
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "text";
    case TK_VAR_B: return "'{{'";
    case TK_VAR_E: return "'}}'";
    case TK_BLK_B: return "'{%'";
    case TK_BLK_E: return "'%}'";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}

static int expect_op(parser *P, const char *s) {
    if (is_op(P, s)) { advance(P); return 0; }
    char b[64];
    return perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '%s', found %s", cur(P)->line, s,
                tok_desc(cur(P), b, sizeof b));
}

static int expect_block_end(parser *P) {
    if (cur(P)->type == TK_BLK_E) { advance(P); return 0; }
    char b[64];
    return perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '%%}', found %s", cur(P)->line,
                tok_desc(cur(P), b, sizeof b));
}

static int enter(parser *P) {
    if (++P->depth > P->t->lim.max_depth)
        return perr(P, cur(P)->line, CK_ERANGE, "line %d: nesting deeper than %d", cur(P)->line, P->t->lim.max_depth);
    return 0;
}

/* The filters, tests and methods the renderer has: a name outside these
 * tables is refused when parsing (as Jinja refuses an unknown filter). */
static const char *const FILTERS[] = {
    "abs", "capitalize", "count", "d", "default", "first", "float", "int", "items", "join", "last", "length",
    "list", "lower", "map", "reject", "rejectattr", "replace", "reverse", "safe", "select", "selectattr",
    "string", "title", "tojson", "trim", "upper", NULL};
static const char *const TESTS[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float", "ge", "gt", "in",
    "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
    "string", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">=", NULL};

static int table_find(const char *const *tab, const char *s, size_t n) {
    for (int i = 0; tab[i]; i++)
        if (strlen(tab[i]) == n && memcmp(tab[i], s, n) == 0) return i;
    return -1;
}

static jnode *p_expr(parser *P, int with_cond);
static jnode *p_unary(parser *P, int with_filter);

static jnode *lit_node(parser *P, int line, jinja_value *v) {
    if (!v || !keep_lit(P, v)) return NULL;
    jnode *e = new_node(P, E_LIT, line);
    if (e) e->lit = v;
    return e;
}

/* Call arguments after '(' up to ')': positional, then name=value. */
static int p_call_args(parser *P, jnode *e) {
    if (expect_op(P, "(")) return P->failed;
    while (!is_op(P, ")")) {
        if (e->args.n + e->kwv.n > 0 && expect_op(P, ",")) return P->failed;
        if (is_op(P, ")")) break; /* trailing comma */
        if (is_op(P, "*") || is_op(P, "**"))
            return perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: *args and **kwargs are not supported",
                        cur(P)->line);
        if (cur(P)->type == TK_NAME && tok_is(peek(P, 1), TK_OP, "=")) {
            token *nt = cur(P);
            advance(P);
            advance(P);
            jnode *v = p_expr(P, 1);
            if (!v || sl_push(P, &e->kw, nt->p, nt->n) || nl_push(P, &e->kwv, v)) return P->failed ? P->failed : -1;
        } else {
            if (e->kwv.n)
                return perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: positional argument after keyword argument",
                            cur(P)->line);
            jnode *v = p_expr(P, 1);
            if (!v || nl_push(P, &e->args, v)) return P->failed ? P->failed : -1;
        }
    }
    advance(P);
    return 0;
}

static jnode *p_primary(parser *P) {
    token *t = cur(P);
    int line = t->line;
    if (enter(P)) return NULL;
    jnode *e = NULL;
    if (t->type == TK_NAME) {
        advance(P);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True")) e = lit_node(P, line, jinja_bool(1));
        else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False")) e = lit_node(P, line, jinja_bool(0));
        else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None")) e = lit_node(P, line, jinja_none());
        else if ((e = new_node(P, E_NAME, line))) { e->name = t->p; e->nlen = t->n; }
    } else if (t->type == TK_STR) {
        advance(P);
        if (cur(P)->type != TK_STR) {
            if ((e = new_node(P, E_LIT, line))) e->lit = t->lit;
        } else {
            /* adjacent literals concatenate, as in Python */
            sbuf b = {0};
            b.max = (size_t)-1;
            int rc = sb_add(&b, t->lit->u.s.s, t->lit->u.s.n);
            while (rc == 0 && cur(P)->type == TK_STR) {
                rc = sb_add(&b, cur(P)->lit->u.s.s, cur(P)->lit->u.s.n);
                advance(P);
            }
            if (rc) perr(P, line, CK_ENOMEM, "%s: out of memory", __func__);
            else e = lit_node(P, line, jv_str_plain(b.p, b.n));
            free(b.p);
        }
    } else if (t->type == TK_INT) {
        advance(P);
        e = lit_node(P, line, jinja_int(t->i));
    } else if (t->type == TK_FLOAT) {
        advance(P);
        e = lit_node(P, line, jinja_float(t->f));
    } else if (tok_is(t, TK_OP, "(")) {
        advance(P);
        if (is_op(P, ")")) {
            advance(P);
            if ((e = new_node(P, E_TUPLE, line))) e->op = 0;
        } else {
            jnode *first = p_expr(P, 1);
            if (!first) goto out;
            if (is_op(P, ",")) {
                e = new_node(P, E_TUPLE, line);
                if (!e || nl_push(P, &e->args, first)) { e = NULL; goto out; }
                while (is_op(P, ",")) {
                    advance(P);
                    if (is_op(P, ")")) break;
                    jnode *x = p_expr(P, 1);
                    if (!x || nl_push(P, &e->args, x)) { e = NULL; goto out; }
                }
            } else {
                e = first;
            }
            if (expect_op(P, ")")) e = NULL;
        }
    } else if (tok_is(t, TK_OP, "[")) {
        advance(P);
        e = new_node(P, E_LIST, line);
        while (e && !is_op(P, "]")) {
            if (e->args.n && expect_op(P, ",")) { e = NULL; break; }
            if (is_op(P, "]")) break;
            jnode *x = p_expr(P, 1);
            if (!x || nl_push(P, &e->args, x)) e = NULL;
        }
        if (e) advance(P);
    } else if (tok_is(t, TK_OP, "{")) {
        advance(P);
        e = new_node(P, E_DICT, line);
        while (e && !is_op(P, "}")) {
            if (e->args.n && expect_op(P, ",")) { e = NULL; break; }
            if (is_op(P, "}")) break;
            jnode *k = p_expr(P, 1);
            if (!k || expect_op(P, ":")) { e = NULL; break; }
            jnode *v = p_expr(P, 1);
            if (!v || nl_push(P, &e->args, k) || nl_push(P, &e->kwv, v)) e = NULL;
        }
        if (e) advance(P);
    } else {
        char b[64];
        perr(P, line, CK_EUNSUPPORTED, "line %d: unexpected %s in an expression", line, tok_desc(t, b, sizeof b));
    }
out:
    P->depth--;
    return P->failed ? NULL : e;
}

/* After '[': an index or a slice, up to ']'. */
static jnode *p_subscript(parser *P, jnode *obj) {
    int line = cur(P)->line;
    advance(P);
    jnode *parts[3] = {NULL, NULL, NULL};
    int nparts = 0, is_slice = 0;
    for (;;) {
        if (!is_op(P, ":") && !is_op(P, "]")) {
            if (nparts > 2) break;
            parts[nparts] = p_expr(P, 1);
            if (!parts[nparts]) return NULL;
        }
        if (is_op(P, ":")) {
            is_slice = 1;
            if (++nparts > 2) return perr(P, line, CK_EUNSUPPORTED, "line %d: malformed slice", line), NULL;
            advance(P);
            continue;
        }
        break;
    }
    if (expect_op(P, "]")) return NULL;
    /* x[] is not Jinja: an index needs its expression (a slice may omit all three) */
    if (!is_slice && !parts[0])
        return perr(P, line, CK_EUNSUPPORTED, "line %d: empty subscript []", line), NULL;
    jnode *e = new_node(P, is_slice ? E_SLICE : E_ITEM, line);
    if (!e) return NULL;
    e->a = obj;
    e->b = parts[0];
    e->c = parts[1];
    e->d = parts[2];
    return e;
}

static jnode *p_postfix(parser *P, jnode *e) {
    while (e) {
        int line = cur(P)->line;
        if (is_op(P, ".")) {
            advance(P);
            token *t = cur(P);
            if (t->type == TK_NAME) {
                advance(P);
                jnode *x = new_node(P, E_ATTR, line);
                if (!x) return NULL;
                x->a = e;
                x->name = t->p;
                x->nlen = t->n;
                e = x;
            } else if (t->type == TK_INT) {
                advance(P);
                jnode *x = new_node(P, E_ITEM, line);
                if (!x) return NULL;
                x->a = e;
                x->b = lit_node(P, line, jinja_int(t->i));
                if (!x->b) return NULL;
                e = x;
            } else {
                return perr(P, line, CK_EUNSUPPORTED, "line %d: expected a name after '.'", line), NULL;
            }
        } else if (is_op(P, "[")) {
            e = p_subscript(P, e);
        } else if (is_op(P, "(")) {
            jnode *x = new_node(P, E_CALL, line);
            if (!x) return NULL;
            x->a = e;
            if (p_call_args(P, x)) return NULL;
            e = x;
        } else {
            break;
        }
    }
    return e;
}

static jnode *p_filter_test(parser *P, jnode *e) {
    while (e) {
        int line = cur(P)->line;
        if (is_op(P, "|")) {
            advance(P);
            token *t = cur(P);
            if (t->type != TK_NAME) return perr(P, line, CK_EUNSUPPORTED, "line %d: expected a filter name", line), NULL;
            int id = table_find(FILTERS, t->p, t->n);
            if (id < 0)
                return perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported filter '%.*s'", line, (int)t->n, t->p), NULL;
            advance(P);
            jnode *x = new_node(P, E_FILTER, line);
            if (!x) return NULL;
            x->a = e;
            x->name = t->p;
            x->nlen = t->n;
            x->fid = id;
            if (is_op(P, "(") && p_call_args(P, x)) return NULL;
            e = x;
        } else if (is_name(P, "is")) {
            advance(P);
            int neg = 0;
            if (is_name(P, "not")) { neg = 1; advance(P); }
            token *t = cur(P);
            if (t->type != TK_NAME && !(t->type == TK_OP && table_find(TESTS, t->p, t->n) >= 0))
                return perr(P, line, CK_EUNSUPPORTED, "line %d: expected a test name after 'is'", line), NULL;
            int id = table_find(TESTS, t->p, t->n);
            if (id < 0)
                return perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported test '%.*s'", line, (int)t->n, t->p), NULL;
            advance(P);
            jnode *x = new_node(P, E_TEST, line);
            if (!x) return NULL;
            x->a = e;
            x->name = t->p;
            x->nlen = t->n;
            x->fid = id;
            x->op = neg;
            token *c = cur(P);
            if (tok_is(c, TK_OP, "(")) {
                if (p_call_args(P, x)) return NULL;
            } else if ((c->type == TK_NAME || c->type == TK_STR || c->type == TK_INT || c->type == TK_FLOAT ||
                        tok_is(c, TK_OP, "[") || tok_is(c, TK_OP, "{")) &&
                       !tok_is(c, TK_NAME, "else") && !tok_is(c, TK_NAME, "or") && !tok_is(c, TK_NAME, "and")) {
                if (tok_is(c, TK_NAME, "is"))
                    return perr(P, line, CK_EUNSUPPORTED, "line %d: tests cannot be chained", line), NULL;
                /* one bare argument: `x is divisibleby 3` */
                jnode *arg = p_postfix(P, p_primary(P));
                if (!arg || nl_push(P, &x->args, arg)) return NULL;
            }
            e = x;
        } else if (is_op(P, "(")) {
            jnode *x = new_node(P, E_CALL, line);
            if (!x) return NULL;
            x->a = e;
            if (p_call_args(P, x)) return NULL;
            e = x;
        } else {
            break;
        }
    }
    return e;
}

static jnode *p_unary(parser *P, int with_filter) {
    int line = cur(P)->line;
    if (enter(P)) return NULL;
    jnode *e;
    if (is_op(P, "-") || is_op(P, "+")) {
        int neg = is_op(P, "-");
        advance(P);
        jnode *x = p_unary(P, 0);
        e = x ? new_node(P, neg ? E_NEG : E_POS, line) : NULL;
        if (e) e->a = x;
    } else {
        e = p_primary(P);
    }
    e = p_postfix(P, e);
    if (with_filter) e = p_filter_test(P, e);
    P->depth--;
    return P->failed ? NULL : e;
}

static jnode *bin(parser *P, int line, int op, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *e = new_node(P, E_BIN, line);
    if (e) { e->op = op; e->a = a; e->b = b; }
    return e;
}

static jnode *p_pow(parser *P) {
    jnode *e = p_unary(P, 1);
    while (e && is_op(P, "**")) { int l = cur(P)->line; advance(P); e = bin(P, l, OP_POW, e, p_unary(P, 1)); }
    return e;
}
static jnode *p_math2(parser *P) {
    jnode *e = p_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV : is_op(P, "%") ? OP_MOD : -1;
        if (!e || op < 0) return e;
        int l = cur(P)->line;
        advance(P);
        e = bin(P, l, op, e, p_pow(P));
    }
}
static jnode *p_concat(parser *P) {
    jnode *e = p_math2(P);
    while (e && is_op(P, "~")) { int l = cur(P)->line; advance(P); e = bin(P, l, OP_CONCAT, e, p_math2(P)); }
    return e;
}
static jnode *p_math1(parser *P) {
    jnode *e = p_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : -1;
        if (!e || op < 0) return e;
        int l = cur(P)->line;
        advance(P);
        e = bin(P, l, op, e, p_concat(P));
    }
}
/* a < b < c is (a < b) and (b < c), as in Python (b evaluated twice: no
 * expression here has side effects). */
static jnode *p_compare(parser *P) {
    jnode *e = p_math1(P), *prev = e, *chain = NULL;
    for (;;) {
        int l = cur(P)->line, op = -1;
        if (is_op(P, "==")) op = OP_EQ;
        else if (is_op(P, "!=")) op = OP_NE;
        else if (is_op(P, "<")) op = OP_LT;
        else if (is_op(P, "<=")) op = OP_LE;
        else if (is_op(P, ">")) op = OP_GT;
        else if (is_op(P, ">=")) op = OP_GE;
        else if (is_name(P, "in")) op = OP_IN;
        else if (is_name(P, "not") && tok_is(peek(P, 1), TK_NAME, "in")) { op = OP_NOTIN; advance(P); }
        if (!prev || op < 0) break;
        advance(P);
        jnode *rhs = p_math1(P);
        jnode *c = bin(P, l, op, prev, rhs);
        if (!c) return NULL;
        if (!chain) chain = c;
        else {
            jnode *a = new_node(P, E_AND, l);
            if (!a) return NULL;
            a->a = chain;
            a->b = c;
            chain = a;
        }
        prev = rhs;
    }
    return P->failed ? NULL : chain ? chain : e;
}
static jnode *p_not(parser *P) {
    if (is_name(P, "not")) {
        int l = cur(P)->line;
        advance(P);
        if (enter(P)) return NULL;
        jnode *x = p_not(P);
        P->depth--;
        jnode *e = x ? new_node(P, E_NOT, l) : NULL;
        if (e) e->a = x;
        return e;
    }
    return p_compare(P);
}
static jnode *p_and(parser *P) {
    jnode *e = p_not(P);
    while (e && is_name(P, "and")) {
        int l = cur(P)->line;
        advance(P);
        jnode *r = p_not(P), *x = r ? new_node(P, E_AND, l) : NULL;
        if (!x) return NULL;
        x->a = e; x->b = r; e = x;
    }
    return e;
}
static jnode *p_or(parser *P) {
    jnode *e = p_and(P);
    while (e && is_name(P, "or")) {
        int l = cur(P)->line;
        advance(P);
        jnode *r = p_and(P), *x = r ? new_node(P, E_OR, l) : NULL;
        if (!x) return NULL;
        x->a = e; x->b = r; e = x;
    }
    return e;
}
static jnode *p_expr(parser *P, int with_cond) {
    if (enter(P)) return NULL;
    jnode *e = p_or(P);
    while (with_cond && e && is_name(P, "if")) {
        int l = cur(P)->line;
        advance(P);
        jnode *c = p_or(P), *other = NULL;
        if (!c) { e = NULL; break; }
        if (is_name(P, "else")) {
            advance(P);
            if (!(other = p_expr(P, 1))) { e = NULL; break; }
        }
        jnode *x = new_node(P, E_COND, l);
        if (!x) { e = NULL; break; }
        x->a = c; x->b = e; x->c = other;
        e = x;
    }
    P->depth--;
    return P->failed ? NULL : e;
}

/* ---- statements */

static int p_body(parser *P, nlist *body, const char *const *ends);

/* NAME (',' NAME)* into names: for-loop and set targets, macro parameters */
static int p_targets(parser *P, slist *names) {
    do {
        if (names->n) advance(P);
        token *t = cur(P);
        if (t->type != TK_NAME)
            return perr(P, t->line, CK_EUNSUPPORTED, "line %d: expected a variable name", t->line);
        if (sl_push(P, names, t->p, t->n)) return P->failed;
        advance(P);
    } while (is_op(P, ","));
    return 0;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};

/* After `{% if` or `{% elif`: the condition, the body and what follows. */
static jnode *p_if(parser *P, int line) {
    jnode *e = new_node(P, S_IF, line);
    if (!e || !(e->a = p_expr(P, 0)) || expect_block_end(P) || p_body(P, &e->body, END_IF)) return NULL;
    if (is_name(P, "elif")) {
        int l = cur(P)->line;
        advance(P);
        jnode *x = p_if(P, l);
        if (!x || nl_push(P, &e->els, x)) return NULL;
        return e; /* the nested if consumed endif */
    }
    if (is_name(P, "else")) {
        advance(P);
        if (expect_block_end(P) || p_body(P, &e->els, END_IF + 2)) return NULL;
    }
    advance(P); /* endif */
    return expect_block_end(P) ? NULL : e;
}

static jnode *p_stmt(parser *P) {
    token *t = cur(P);
    int line = t->line;
    if (t->type != TK_NAME) return perr(P, line, CK_EUNSUPPORTED, "line %d: expected a tag name after '{%%'", line), NULL;
    advance(P);
    jnode *e = NULL;
    if (tok_is(t, TK_NAME, "if")) {
        return p_if(P, line);
    } else if (tok_is(t, TK_NAME, "for")) {
        e = new_node(P, S_FOR, line);
        if (!e || p_targets(P, &e->names)) return NULL;
        if (!is_name(P, "in")) return perr(P, line, CK_EUNSUPPORTED, "line %d: expected 'in' in a for tag", line), NULL;
        advance(P);
        if (!(e->a = p_expr(P, 0))) return NULL;
        if (is_name(P, "if") && (advance(P), !(e->b = p_expr(P, 0)))) return NULL;
        if (is_name(P, "recursive"))
            return perr(P, line, CK_EUNSUPPORTED, "line %d: recursive for loops are not supported", line), NULL;
        if (expect_block_end(P)) return NULL;
        P->loop_depth++;
        int rc = p_body(P, &e->body, END_FOR);
        P->loop_depth--;
        if (rc) return NULL;
        if (is_name(P, "else")) {
            advance(P);
            if (expect_block_end(P) || p_body(P, &e->els, END_FOR2)) return NULL;
        }
        advance(P);
    } else if (tok_is(t, TK_NAME, "set")) {
        token *n1 = cur(P);
        if (n1->type == TK_NAME && tok_is(peek(P, 1), TK_OP, ".")) {
            token *n2 = peek(P, 2);
            if (n2->type != TK_NAME) return perr(P, line, CK_EUNSUPPORTED, "line %d: malformed set target", line), NULL;
            e = new_node(P, S_SETNS, line);
            if (!e) return NULL;
            e->name = n1->p; e->nlen = n1->n; e->name2 = n2->p; e->nlen2 = n2->n;
            advance(P); advance(P); advance(P);
            if (expect_op(P, "=") || !(e->a = p_expr(P, 1))) return NULL;
        } else {
            slist names = {0};
            if (p_targets(P, &names)) { free(names.v); free(names.len); return NULL; }
            if (is_op(P, "=")) {
                advance(P);
                e = new_node(P, S_SET, line);
                if (!e) { free(names.v); free(names.len); return NULL; }
                e->names = names;
                if (!(e->a = p_expr(P, 1))) return NULL;
                if (is_op(P, ","))
                    return perr(P, line, CK_EUNSUPPORTED, "line %d: tuple on the right of set is not supported", line),
                           NULL;
            } else if (cur(P)->type == TK_BLK_E && names.n == 1) {
                e = new_node(P, S_SETBLOCK, line);
                if (!e) { free(names.v); free(names.len); return NULL; }
                e->name = names.v[0]; e->nlen = names.len[0];
                free(names.v); free(names.len);
                advance(P);
                if (p_body(P, &e->body, END_SET)) return NULL;
                advance(P);
            } else {
                free(names.v); free(names.len);
                return perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported form of set (filtered block set?)", line),
                       NULL;
            }
        }
    } else if (tok_is(t, TK_NAME, "macro")) {
        token *n = cur(P);
        if (n->type != TK_NAME) return perr(P, line, CK_EUNSUPPORTED, "line %d: expected a macro name", line), NULL;
        advance(P);
        e = new_node(P, S_MACRO, line);
        if (!e || expect_op(P, "(")) return NULL;
        e->name = n->p; e->nlen = n->n;
        while (!is_op(P, ")")) {
            if (e->names.n && expect_op(P, ",")) return NULL;
            token *pn = cur(P);
            if (pn->type != TK_NAME) return perr(P, line, CK_EUNSUPPORTED, "line %d: expected a parameter name", line), NULL;
            advance(P);
            jnode *def = NULL;
            if (is_op(P, "=")) { advance(P); if (!(def = p_expr(P, 1))) return NULL; }
            if (sl_push(P, &e->names, pn->p, pn->n) || nl_push(P, &e->kwv, def)) return NULL;
        }
        advance(P);
        if (expect_block_end(P)) return NULL;
        int saved = P->loop_depth;
        P->loop_depth = 0;
        int rc = p_body(P, &e->body, END_MACRO);
        P->loop_depth = saved;
        if (rc) return NULL;
        advance(P);
    } else if (tok_is(t, TK_NAME, "break") || tok_is(t, TK_NAME, "continue")) {
        if (!P->loop_depth)
            return perr(P, line, CK_EUNSUPPORTED, "line %d: '%.*s' outside a for loop", line, (int)t->n, t->p), NULL;
        e = new_node(P, tok_is(t, TK_NAME, "break") ? S_BREAK : S_CONTINUE, line);
    } else if (tok_is(t, TK_NAME, "generation")) {
        /* HF's AssistantTracker: marks assistant text, renders its body */
        e = new_node(P, S_BODY, line);
        if (!e || expect_block_end(P) || p_body(P, &e->body, END_GEN)) return NULL;
        advance(P);
    } else {
        return perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported tag '%.*s'", line, (int)t->n, t->p), NULL;
    }
    if (!e || expect_block_end(P)) return NULL;
    return e;
}

/* Statements and text up to `{% <one of ends>` (left with the end's name
 * as the current token) or, when ends is NULL, the end of the template. */
static int p_body(parser *P, nlist *body, const char *const *ends) {
    int open_line = cur(P)->line;
    if (enter(P)) return P->failed;
    for (;;) {
        token *t = cur(P);
        jnode *e = NULL;
        if (t->type == TK_EOF) {
            if (!ends) break;
            int last = 0;
            while (ends[last + 1]) last++;
            perr(P, open_line, CK_EUNSUPPORTED, "line %d: missing {%% %s %%} for the block opened here", open_line,
                 ends[last]);
            break;
        }
        if (t->type == TK_DATA) {
            advance(P);
            jinja_value *v = jv_str_plain(t->p, t->n);
            if (!v) { perr(P, t->line, CK_ENOMEM, "%s: out of memory", __func__); break; }
            if (!(e = lit_node(P, t->line, v))) break;
            e->kind = S_TEXT;
        } else if (t->type == TK_VAR_B) {
            advance(P);
            e = new_node(P, S_OUT, t->line);
            if (!e || !(e->a = p_expr(P, 1))) break;
            if (cur(P)->type != TK_VAR_E) {
                char b[64];
                perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '}}', found %s", cur(P)->line,
                     tok_desc(cur(P), b, sizeof b));
                break;
            }
            advance(P);
        } else if (t->type == TK_BLK_B) {
            token *n = peek(P, 1);
            if (ends && n->type == TK_NAME && table_find(ends, n->p, n->n) >= 0) { advance(P); break; }
            if (n->type == TK_NAME &&
                (tok_is(n, TK_NAME, "endif") || tok_is(n, TK_NAME, "endfor") || tok_is(n, TK_NAME, "elif") ||
                 tok_is(n, TK_NAME, "else") || tok_is(n, TK_NAME, "endset") || tok_is(n, TK_NAME, "endmacro") ||
                 tok_is(n, TK_NAME, "endgeneration"))) {
                perr(P, n->line, CK_EUNSUPPORTED, "line %d: unexpected '%.*s'", n->line, (int)n->n, n->p);
                break;
            }
            advance(P);
            if (!(e = p_stmt(P))) break;
        } else {
            char b[64];
            perr(P, t->line, CK_EUNSUPPORTED, "line %d: unexpected %s", t->line, tok_desc(t, b, sizeof b));
            break;
        }
        if (nl_push(P, body, e)) break;
    }
    P->depth--;
    return P->failed;
}

void jinja_template_free(jinja_template *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_nodes; i++) {
        jnode *e = t->nodes[i];
        free(e->args.v); free(e->kwv.v); free(e->body.v); free(e->els.v);
        free(e->kw.v); free(e->kw.len); free(e->names.v); free(e->names.len);
        free(e);
    }
    free(t->nodes);
    for (size_t i = 0; i < t->n_lits; i++) {
        t->lits[i]->refs = 1;
        jinja_release(t->lits[i]);
    }
    free(t->lits);
    free(t->src);
    free(t);
}

int jinja_parse(const char *src, size_t len, const jinja_limits *limits, jinja_template **out, jinja_error *err) {
    clear_err(err);
    if (out) *out = NULL;
    parser P = {0};
    P.err = err;
    if (!out || (!src && len)) {
        perr(&P, 0, CK_EINVAL, "%s: invalid argument", __func__);
        if (err) err->kind = K_ERROR;
        return CK_EINVAL;
    }
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) return perr(&P, 0, CK_ENOMEM, "%s: out of memory", __func__);
    if (limits) t->lim = *limits;
    else jinja_limits_default(&t->lim);
    P.t = t;
    if (len > t->lim.max_template) {
        perr(&P, 0, CK_ETOOLONG, "%s: template of %zu bytes is over the limit of %zu", __func__, len, t->lim.max_template);
        goto fail;
    }
    /* newlines normalised to \n; one trailing newline dropped (Jinja's
     * keep_trailing_newline=False) */
    t->src = malloc(len + 1);
    if (!t->src) { perr(&P, 0, CK_ENOMEM, "%s: out of memory", __func__); goto fail; }
    size_t j = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { t->src[j++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else t->src[j++] = src[i];
    }
    if (j && t->src[j - 1] == '\n') j--;
    t->src[j] = 0;
    t->src_n = j;
    if (lex(&P)) goto fail;
    t->root = new_node(&P, S_BODY, 1);
    if (!t->root || p_body(&P, &t->root->body, NULL)) goto fail;
    free(P.tk);
    *out = t;
    return 0;
fail:
    free(P.tk);
    jinja_template_free(t);
    return P.failed ? P.failed : CK_EUNSUPPORTED;
}

/* =========================================================================
 * the evaluator */

typedef struct frame {
    struct frame *parent;
    jinja_value *vars; /* a dict; `set` writes the innermost frame's */
} frame;

typedef struct rctx {
    const jinja_template *t;
    const jinja_limits *lim;
    jinja_error *err;
    int failed;
    uint64_t steps, iters;
    size_t alloc;
    int depth, max_depth;
    struct tm now;
    frame *top;           /* the template's own frame: macros run above it */
    jinja_value **nss;    /* namespaces made: emptied at the end (they can hold themselves) */
    size_t n_ns, cap_ns;
} rctx;

enum { FL_OK = 0, FL_BREAK = 1, FL_CONTINUE = 2, FL_ERR = -1 };

static const char *kind_of(int code) {
    switch (code) {
    case CK_EUNSUPPORTED: return K_UNSUP;
    case CK_EINVAL: return K_RAISE;
    case CK_ENOMEM: return K_NOMEM;
    case CK_ERANGE: case CK_ETOOLONG: return K_LIMIT;
    default: return K_ERROR;
    }
}

static void *rerr(rctx *R, int line, int code, const char *fmt, ...) {
    if (R->failed) return NULL;
    va_list ap;
    va_start(ap, fmt);
    set_err(R->err, code, kind_of(code), line, fmt, ap);
    va_end(ap);
    R->failed = code;
    return NULL;
}

static int charge(rctx *R, int line, size_t n) {
    if (R->failed) return R->failed;
    if (n > R->lim->max_alloc - R->alloc || R->alloc > R->lim->max_alloc) {
        R->alloc = R->lim->max_alloc;
        rerr(R, line, CK_ERANGE, "line %d: the render made more than %zu bytes of values", line, R->lim->max_alloc);
        return R->failed;
    }
    R->alloc += n;
    return 0;
}

static int sb_fail(rctx *R, int line, int rc) {
    if (rc == CK_ETOOLONG)
        rerr(R, line, CK_ETOOLONG, "line %d: text longer than the limit of %zu bytes", line, R->lim->max_output);
    else if (rc)
        rerr(R, line, CK_ENOMEM, "line %d: out of memory", line);
    return R->failed;
}

static sbuf sb_for(rctx *R) {
    sbuf b = {0};
    b.max = R->lim->max_output;
    return b;
}

static jinja_value *nomem(rctx *R, int line) { return rerr(R, line, CK_ENOMEM, "line %d: out of memory", line); }

static jinja_value *rstr(rctx *R, int line, const char *s, size_t n) {
    if (n > R->lim->max_output) {
        sb_fail(R, line, CK_ETOOLONG);
        return NULL;
    }
    if (charge(R, line, n + sizeof(jinja_value))) return NULL;
    jinja_value *v = jv_str_plain(s, n);
    return v ? v : nomem(R, line);
}

/* The buffer's bytes and provenance become the string (b is emptied, also
 * on failure). */
static jinja_value *sb_take(rctx *R, int line, sbuf *b) {
    if (charge(R, line, b->n + 2 * b->nsp * sizeof(size_t) + sizeof(jinja_value))) { sb_free(b); return NULL; }
    jinja_value *v = jv_new(JV_STR);
    if (!v) { sb_free(b); return nomem(R, line); }
    if (!b->p) { b->p = malloc(1); if (!b->p) { free(v); sb_free(b); return nomem(R, line); } b->p[0] = 0; }
    v->u.s.s = b->p;
    v->u.s.n = b->n;
    v->u.s.sp = b->sp;
    v->u.s.nsp = b->nsp;
    b->p = NULL;
    b->sp = NULL;
    b->n = b->cap = b->nsp = b->capsp = 0;
    return v;
}

/* The bytes [off, off + len) of string v, with their provenance. */
static jinja_value *rsub(rctx *R, int line, const jinja_value *v, size_t off, size_t len) {
    if (!v->u.s.nsp) return rstr(R, line, v->u.s.s + off, len);
    sbuf b = sb_for(R);
    int rc = sb_addv(&b, v, off, len);
    if (rc) { sb_free(&b); sb_fail(R, line, rc); return NULL; }
    return sb_take(R, line, &b);
}

/* Key i of dict d as a string: data when d's keys are. */
static jinja_value *rkey(rctx *R, int line, const jinja_value *d, size_t i) {
    jinja_value *k = rstr(R, line, d->u.d.k[i], d->u.d.kn[i]);
    if (k && d->dkeys && k->u.s.n) {
        k->u.s.sp = malloc(2 * sizeof *k->u.s.sp);
        if (!k->u.s.sp) { jinja_release(k); return nomem(R, line); }
        k->u.s.sp[0] = 0;
        k->u.s.sp[1] = k->u.s.n;
        k->u.s.nsp = 1;
    }
    return k;
}

/* 1 when v holds any data: a string with data bytes, a dict with data keys,
 * or a list or dict holding such a value (depth-bounded: deeper counts as data). */
static int jv_tainted(const jinja_value *v, int depth) {
    if (depth > 256) return 1;
    switch (v->type) {
    case JV_STR: return v->u.s.nsp > 0;
    case JV_LIST:
        for (size_t i = 0; i < v->u.l.n; i++)
            if (jv_tainted(v->u.l.v[i], depth + 1)) return 1;
        return 0;
    case JV_DICT: case JV_NS:
        if (v->dkeys) return 1;
        for (size_t i = 0; i < v->u.d.n; i++)
            if (jv_tainted(v->u.d.v[i], depth + 1)) return 1;
        return 0;
    default: return 0;
    }
}

static jinja_value *rnew(rctx *R, int line, int type) {
    if (charge(R, line, sizeof(jinja_value))) return NULL;
    jinja_value *v = jv_new(type);
    return v ? v : nomem(R, line);
}
static jinja_value *mk_int(rctx *R, int line, long long i) {
    jinja_value *v = rnew(R, line, JV_INT);
    if (v) v->u.i = i;
    return v;
}
static jinja_value *mk_bool(rctx *R, int line, int b) {
    jinja_value *v = rnew(R, line, JV_BOOL);
    if (v) v->u.b = !!b;
    return v;
}
static jinja_value *mk_float(rctx *R, int line, double f) {
    jinja_value *v = rnew(R, line, JV_FLOAT);
    if (v) v->u.f = f;
    return v;
}
static jinja_value *rundef(rctx *R, int line, const char *name, size_t n) {
    jinja_value *v = rnew(R, line, JV_UNDEF);
    if (v && name && n) {
        if (n > 64) n = 64;
        v->u.s.s = malloc(n + 1);
        if (!v->u.s.s) { jinja_release(v); return nomem(R, line); }
        memcpy(v->u.s.s, name, n);
        v->u.s.s[n] = 0;
        v->u.s.n = n;
    }
    return v;
}
/* Takes item (also on failure). */
static int rpush(rctx *R, int line, jinja_value *list, jinja_value *item) {
    if (!item) return R->failed ? R->failed : CK_ENOMEM;
    if (charge(R, line, 2 * sizeof(void *))) { jinja_release(item); return R->failed; }
    if (jinja_list_append(list, item)) { nomem(R, line); return R->failed; }
    return 0;
}
static int rset(rctx *R, int line, jinja_value *d, const char *k, size_t kn, jinja_value *v) {
    if (!v) return R->failed ? R->failed : CK_ENOMEM;
    if (charge(R, line, kn + 4 * sizeof(void *))) { jinja_release(v); return R->failed; }
    if (jinja_dict_set(d, k, kn, v)) { nomem(R, line); return R->failed; }
    return 0;
}

static const char *type_name(const jinja_value *v) {
    static const char *const names[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
                                        "Namespace", "function", "macro"};
    if (v->type == JV_LIST && v->u.l.tuple) return "tuple";
    return names[v->type];
}

static const char *undef_name(const jinja_value *v) { return v->u.s.s ? v->u.s.s : "value"; }

static int truthy(const jinja_value *v) {
    switch (v->type) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.s.n > 0;
    case JV_LIST: return v->u.l.n > 0;
    case JV_DICT: return v->u.d.n > 0;
    default: return 1;
    }
}

static int is_num(const jinja_value *v) { return v->type == JV_INT || v->type == JV_BOOL || v->type == JV_FLOAT; }
static double num_f(const jinja_value *v) {
    return v->type == JV_FLOAT ? v->u.f : v->type == JV_INT ? (double)v->u.i : (double)v->u.b;
}
static long long num_i(const jinja_value *v) { return v->type == JV_INT ? v->u.i : v->u.b; }

/* ---- str() and repr(), Python's */

static int py_repr(rctx *R, sbuf *b, const jinja_value *v, int depth);

static int repr_str(sbuf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = sb_ch(b, q);
    size_t i = 0, len;
    while (rc == 0 && i < n) {
        unsigned c = utf8_dec((const unsigned char *)s, i, n, &len);
        char e[16];
        if (c == (unsigned)q || c == '\\') { e[0] = '\\'; e[1] = (char)c; rc = sb_add(b, e, 2); }
        else if (c == '\n') rc = sb_add(b, "\\n", 2);
        else if (c == '\r') rc = sb_add(b, "\\r", 2);
        else if (c == '\t') rc = sb_add(b, "\\t", 2);
        else if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) { snprintf(e, sizeof e, "\\x%02x", c); rc = sb_cstr(b, e); }
        else if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || c == 0x205f ||
                 (c >= 0x2060 && c <= 0x2064) || c == 0x3000 || c == 0xfeff) {
            snprintf(e, sizeof e, "\\u%04x", c);
            rc = sb_cstr(b, e);
        } else rc = sb_add(b, s + i, len);
        i += len;
    }
    return rc ? rc : sb_ch(b, q);
}

/* str(v) appended to b. Returns an sbuf code (0, CK_ETOOLONG, CK_ENOMEM) or
 * R->failed. */
static int py_str(rctx *R, sbuf *b, const jinja_value *v, int depth) {
    char tmp[48];
    switch (v->type) {
    case JV_UNDEF: return 0;
    case JV_NONE: return sb_cstr(b, "None");
    case JV_BOOL: return sb_cstr(b, v->u.b ? "True" : "False");
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", v->u.i); return sb_cstr(b, tmp);
    case JV_FLOAT: py_float(v->u.f, tmp, sizeof tmp); return sb_cstr(b, tmp);
    case JV_STR: return sb_addv(b, v, 0, v->u.s.n);
    case JV_FUNC: case JV_MACRO: return sb_cstr(b, "<function>");
    default: return py_repr(R, b, v, depth);
    }
}

static int py_repr(rctx *R, sbuf *b, const jinja_value *v, int depth) {
    if (depth > R->max_depth) {
        rerr(R, 0, CK_ERANGE, "values nested deeper than %d", R->max_depth);
        return R->failed;
    }
    int rc = 0;
    size_t at = b->n;
    switch (v->type) {
    case JV_UNDEF: return sb_cstr(b, "Undefined");
    case JV_STR: /* escapes and quotes: the whole repr of data is data */
        rc = repr_str(b, v->u.s.s, v->u.s.n);
        return rc ? rc : sb_taint_from(b, at, v->u.s.nsp > 0);
    case JV_LIST:
        rc = sb_ch(b, v->u.l.tuple ? '(' : '[');
        for (size_t i = 0; rc == 0 && i < v->u.l.n; i++) {
            if (i) rc = sb_add(b, ", ", 2);
            if (rc == 0) rc = py_repr(R, b, v->u.l.v[i], depth + 1);
        }
        if (rc == 0 && v->u.l.tuple && v->u.l.n == 1) rc = sb_ch(b, ',');
        return rc ? rc : sb_ch(b, v->u.l.tuple ? ')' : ']');
    case JV_DICT: case JV_NS:
        rc = v->type == JV_NS ? sb_cstr(b, "<Namespace {") : sb_ch(b, '{');
        for (size_t i = 0; rc == 0 && i < v->u.d.n; i++) {
            if (i) rc = sb_add(b, ", ", 2);
            at = b->n;
            if (rc == 0) rc = repr_str(b, v->u.d.k[i], v->u.d.kn[i]);
            if (rc == 0) rc = sb_taint_from(b, at, v->dkeys);
            if (rc == 0) rc = sb_add(b, ": ", 2);
            if (rc == 0) rc = py_repr(R, b, v->u.d.v[i], depth + 1);
        }
        return rc ? rc : sb_cstr(b, v->type == JV_NS ? "}>" : "}");
    default: return py_str(R, b, v, depth);
    }
}

/* str(v) as a new string value (v itself when it is one). */
static jinja_value *to_strv(rctx *R, int line, jinja_value *v) {
    if (v->type == JV_STR) return jv_ref(v);
    sbuf b = sb_for(R);
    int rc = py_str(R, &b, v, 0);
    if (rc) { sb_free(&b); sb_fail(R, line, rc); return NULL; }
    return sb_take(R, line, &b);
}

/* ---- HF's tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) */

typedef struct jopts {
    int indent; /* < 0: none */
    int ensure_ascii, sort_keys;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
} jopts;

static int json_str(sbuf *b, const char *s, size_t n, int ensure_ascii) {
    int rc = sb_ch(b, '"');
    size_t i = 0, len;
    while (rc == 0 && i < n) {
        unsigned c = utf8_dec((const unsigned char *)s, i, n, &len);
        char e[16];
        switch (c) {
        case '"': rc = sb_add(b, "\\\"", 2); break;
        case '\\': rc = sb_add(b, "\\\\", 2); break;
        case '\n': rc = sb_add(b, "\\n", 2); break;
        case '\r': rc = sb_add(b, "\\r", 2); break;
        case '\t': rc = sb_add(b, "\\t", 2); break;
        case '\b': rc = sb_add(b, "\\b", 2); break;
        case '\f': rc = sb_add(b, "\\f", 2); break;
        default:
            if (c < 0x20 || (ensure_ascii && c > 0x7f && c < 0x10000)) {
                snprintf(e, sizeof e, "\\u%04x", c);
                rc = sb_cstr(b, e);
            } else if (ensure_ascii && c >= 0x10000) {
                unsigned v = c - 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                rc = sb_cstr(b, e);
            } else {
                rc = sb_add(b, s + i, len);
            }
        }
        i += len;
    }
    return rc ? rc : sb_ch(b, '"');
}

static int json_nl(sbuf *b, const jopts *o, int level) {
    int rc = sb_ch(b, '\n');
    for (long k = 0; rc == 0 && k < (long)o->indent * level; k++) rc = sb_ch(b, ' ');
    return rc;
}

static int json_dump(rctx *R, int line, sbuf *b, const jinja_value *v, const jopts *o, int level) {
    char tmp[48];
    int rc = 0;
    if (level > R->max_depth) {
        rerr(R, line, CK_ERANGE, "line %d: tojson: values nested deeper than %d", line, R->max_depth);
        return R->failed;
    }
    switch (v->type) {
    case JV_NONE: return sb_cstr(b, "null");
    case JV_BOOL: return sb_cstr(b, v->u.b ? "true" : "false");
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", v->u.i); return sb_cstr(b, tmp);
    case JV_FLOAT:
        if (isnan(v->u.f)) return sb_cstr(b, "NaN");
        if (isinf(v->u.f)) return sb_cstr(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        py_float(v->u.f, tmp, sizeof tmp);
        return sb_cstr(b, tmp);
    case JV_STR: { /* escapes and quotes: the whole JSON string of data is data */
        size_t at = b->n;
        rc = json_str(b, v->u.s.s, v->u.s.n, o->ensure_ascii);
        return rc ? rc : sb_taint_from(b, at, v->u.s.nsp > 0);
    }
    case JV_LIST:
        if (!v->u.l.n) return sb_add(b, "[]", 2);
        rc = sb_ch(b, '[');
        for (size_t i = 0; rc == 0 && i < v->u.l.n; i++) {
            if (i) rc = sb_add(b, o->item_sep, o->item_sep_n);
            if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level + 1);
            if (rc == 0) rc = json_dump(R, line, b, v->u.l.v[i], o, level + 1);
        }
        if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level);
        return rc ? rc : sb_ch(b, ']');
    case JV_DICT: {
        if (!v->u.d.n) return sb_add(b, "{}", 2);
        size_t n = v->u.d.n, *ord = malloc(n * sizeof *ord);
        if (!ord) return CK_ENOMEM;
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (o->sort_keys) /* insertion sort on the bytes: UTF-8 order is code point order */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                    size_t a = ord[j - 1], c = ord[j], ka = v->u.d.kn[a], kc = v->u.d.kn[c];
                    int cmp = memcmp(v->u.d.k[a], v->u.d.k[c], ka < kc ? ka : kc);
                    if (cmp < 0 || (cmp == 0 && ka <= kc)) break;
                    ord[j - 1] = c;
                    ord[j] = a;
                }
        rc = sb_ch(b, '{');
        for (size_t i = 0; rc == 0 && i < n; i++) {
            size_t k = ord[i];
            if (i) rc = sb_add(b, o->item_sep, o->item_sep_n);
            if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level + 1);
            size_t at = b->n;
            if (rc == 0) rc = json_str(b, v->u.d.k[k], v->u.d.kn[k], o->ensure_ascii);
            if (rc == 0) rc = sb_taint_from(b, at, v->dkeys);
            if (rc == 0) rc = sb_add(b, o->key_sep, o->key_sep_n);
            if (rc == 0) rc = json_dump(R, line, b, v->u.d.v[k], o, level + 1);
        }
        free(ord);
        if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level);
        return rc ? rc : sb_ch(b, '}');
    }
    default:
        rerr(R, line, CK_EFORMAT, "line %d: tojson: object of type %s is not JSON serializable", line, type_name(v));
        return R->failed;
    }
}

/* ---- comparison */

/* 1 equal, 0 not, -1 error (too deep). Python's ==: numbers across int,
 * float and bool; lists and dicts by content; an undefined equals only an
 * undefined. */
static int py_eq(rctx *R, const jinja_value *a, const jinja_value *b, int depth) {
    if (depth > R->max_depth) { rerr(R, 0, CK_ERANGE, "values nested deeper than %d", R->max_depth); return -1; }
    if (a == b) return 1;
    if (is_num(a) && is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a->type != b->type) return 0;
    switch (a->type) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a->u.s.n == b->u.s.n && memcmp(a->u.s.s, b->u.s.s, a->u.s.n) == 0;
    case JV_LIST:
        if (a->u.l.n != b->u.l.n || a->u.l.tuple != b->u.l.tuple) return 0;
        for (size_t i = 0; i < a->u.l.n; i++) {
            int e = py_eq(R, a->u.l.v[i], b->u.l.v[i], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    case JV_DICT:
        if (a->u.d.n != b->u.d.n) return 0;
        for (size_t i = 0; i < a->u.d.n; i++) {
            long j = dict_find(b, a->u.d.k[i], a->u.d.kn[i]);
            if (j < 0) return 0;
            int e = py_eq(R, a->u.d.v[i], b->u.d.v[j], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    case JV_FUNC: return a->u.fn == b->u.fn;
    case JV_MACRO: return a->u.m == b->u.m;
    default: return 0;
    }
}

/* Python's <: -1 error, else 0/1 for the op. */
static int py_order(rctx *R, int line, int op, const jinja_value *a, const jinja_value *b) {
    int c;
    if (is_num(a) && is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT) {
            long long x = num_i(a), y = num_i(b);
            c = x < y ? -1 : x > y;
        } else {
            double x = num_f(a), y = num_f(b);
            if (isnan(x) || isnan(y)) return 0;
            c = x < y ? -1 : x > y;
        }
    } else if (a->type == JV_STR && b->type == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        c = memcmp(a->u.s.s, b->u.s.s, n);
        if (c == 0) c = a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
    } else {
        rerr(R, line, CK_EFORMAT, "line %d: '<' not supported between instances of '%s' and '%s'", line, type_name(a),
             type_name(b));
        return -1;
    }
    switch (op) {
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    default: return c >= 0;
    }
}

/* `needle in hay`: -1 error, else 0/1. */
static int py_in(rctx *R, int line, const jinja_value *needle, const jinja_value *hay) {
    switch (hay->type) {
    case JV_STR: {
        if (needle->type != JV_STR) {
            rerr(R, line, CK_EFORMAT, "line %d: 'in <string>' requires string as left operand, not %s", line,
                 type_name(needle));
            return -1;
        }
        size_t n = needle->u.s.n, h = hay->u.s.n;
        if (!n) return 1;
        for (size_t i = 0; i + n <= h; i++)
            if (memcmp(hay->u.s.s + i, needle->u.s.s, n) == 0) return 1;
        return 0;
    }
    case JV_LIST:
        for (size_t i = 0; i < hay->u.l.n; i++) {
            int e = py_eq(R, needle, hay->u.l.v[i], 0);
            if (e) return e;
        }
        return 0;
    case JV_DICT: case JV_NS:
        return needle->type == JV_STR && dict_find(hay, needle->u.s.s, needle->u.s.n) >= 0;
    case JV_UNDEF: return 0;
    default:
        rerr(R, line, CK_EFORMAT, "line %d: argument of type '%s' is not iterable", line, type_name(hay));
        return -1;
    }
}

/* ---- lookups */

static jinja_value *lookup(rctx *R, int line, frame *F, const char *name, size_t n) {
    for (frame *f = F; f; f = f->parent) {
        long i = dict_find(f->vars, name, n);
        if (i >= 0) return jv_ref(f->vars->u.d.v[i]);
    }
    return rundef(R, line, name, n);
}

static jinja_value *get_attr(rctx *R, int line, jinja_value *obj, const char *name, size_t n) {
    if (obj->type == JV_UNDEF)
        return rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (reading its attribute '%.*s')", line,
                    undef_name(obj), (int)(n > 64 ? 64 : n), name);
    if (obj->type == JV_DICT || obj->type == JV_NS) {
        long i = dict_find(obj, name, n);
        if (i >= 0) return jv_ref(obj->u.d.v[i]);
    }
    return rundef(R, line, name, n);
}

/* Python index i (negative from the end) into len, or -1 out of range. */
static long long py_index(long long i, size_t len) {
    if (i < 0) i += (long long)len;
    return i < 0 || (unsigned long long)i >= len ? -1 : i;
}

static jinja_value *get_item(rctx *R, int line, jinja_value *obj, jinja_value *key) {
    if (obj->type == JV_UNDEF)
        return rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (reading an item of it)", line, undef_name(obj));
    if ((obj->type == JV_DICT || obj->type == JV_NS) && key->type == JV_STR)
        return get_attr(R, line, obj, key->u.s.s, key->u.s.n);
    if ((key->type == JV_INT || key->type == JV_BOOL) && obj->type == JV_LIST) {
        long long i = py_index(num_i(key), obj->u.l.n);
        if (i >= 0) return jv_ref(obj->u.l.v[i]);
    }
    if ((key->type == JV_INT || key->type == JV_BOOL) && obj->type == JV_STR) {
        size_t cps = utf8_count(obj->u.s.s, obj->u.s.n);
        long long i = py_index(num_i(key), cps);
        if (i >= 0) {
            size_t a = utf8_offset(obj->u.s.s, obj->u.s.n, (size_t)i), len;
            utf8_dec((const unsigned char *)obj->u.s.s, a, obj->u.s.n, &len);
            return rsub(R, line, obj, a, len);
        }
    }
    if (key->type == JV_STR) return rundef(R, line, key->u.s.s, key->u.s.n);
    return rundef(R, line, NULL, 0);
}

/* Python's slice.indices(); 0 or -1 when a bound is not an integer. */
static int slice_bounds(rctx *R, int line, jinja_value *const se[3], size_t len, long long *start, long long *stop,
                        long long *step) {
    long long L = (long long)len, v[3];
    int given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = se[k] && se[k]->type != JV_NONE;
        if (given[k] && se[k]->type != JV_INT && se[k]->type != JV_BOOL) {
            rerr(R, line, CK_EFORMAT, "line %d: slice indices must be integers or None", line);
            return -1;
        }
        v[k] = given[k] ? num_i(se[k]) : 0;
    }
    *step = given[2] ? v[2] : 1;
    if (*step == 0) { rerr(R, line, CK_EFORMAT, "line %d: slice step cannot be zero", line); return -1; }
    int back = *step < 0;
    for (int k = 0; k < 2; k++) {
        long long x;
        if (!given[k]) x = k == 0 ? (back ? L - 1 : 0) : (back ? -1 : L);
        else {
            x = v[k];
            if (x < 0) { x += L; if (x < 0) x = back ? -1 : 0; }
            else if (x >= L) x = back ? L - 1 : L;
        }
        if (k == 0) *start = x; else *stop = x;
    }
    return 0;
}

static jinja_value *get_slice(rctx *R, int line, jinja_value *obj, jinja_value *const se[3]) {
    long long a, z, st;
    if (obj->type == JV_LIST) {
        if (slice_bounds(R, line, se, obj->u.l.n, &a, &z, &st)) return NULL;
        jinja_value *out = rnew(R, line, JV_LIST);
        if (!out) return NULL;
        out->u.l.tuple = obj->u.l.tuple;
        for (long long i = a; st > 0 ? i < z : i > z; i += st)
            if (rpush(R, line, out, jv_ref(obj->u.l.v[i]))) { jinja_release(out); return NULL; }
        return out;
    }
    if (obj->type == JV_STR) {
        const char *s = obj->u.s.s;
        size_t n = obj->u.s.n, cps = utf8_count(s, n);
        if (slice_bounds(R, line, se, cps, &a, &z, &st)) return NULL;
        if (st == 1) {
            if (z <= a) return rstr(R, line, "", 0);
            size_t ba = utf8_offset(s, n, (size_t)a), bz = ba + utf8_offset(s + ba, n - ba, (size_t)(z - a));
            return rsub(R, line, obj, ba, bz - ba);
        }
        size_t *off = malloc((cps + 1) * sizeof *off);
        if (!off) return nomem(R, line);
        size_t i = 0, k = 0, len;
        while (i < n) { off[k++] = i; utf8_dec((const unsigned char *)s, i, n, &len); i += len; }
        off[k] = n;
        sbuf b = sb_for(R);
        int rc = 0;
        for (long long j = a; rc == 0 && (st > 0 ? j < z : j > z); j += st)
            rc = sb_addv(&b, obj, off[j], off[j + 1] - off[j]);
        free(off);
        if (rc) { sb_free(&b); sb_fail(R, line, rc); return NULL; }
        return sb_take(R, line, &b);
    }
    if (obj->type == JV_UNDEF)
        return rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (slicing it)", line, undef_name(obj));
    return rerr(R, line, CK_EFORMAT, "line %d: '%s' object is not subscriptable", line, type_name(obj));
}

/* The items a for loop (or a filter) walks: a new list. Lists as they are,
 * dicts' keys, strings' code points; an undefined walks as empty. */
static jinja_value *iter_list(rctx *R, int line, jinja_value *v) {
    if (v->type == JV_LIST) return jv_ref(v);
    jinja_value *out = rnew(R, line, JV_LIST);
    if (!out) return NULL;
    if (v->type == JV_DICT) {
        for (size_t i = 0; i < v->u.d.n; i++)
            if (rpush(R, line, out, rkey(R, line, v, i))) { jinja_release(out); return NULL; }
    } else if (v->type == JV_STR) {
        size_t i = 0, len;
        while (i < v->u.s.n) {
            utf8_dec((const unsigned char *)v->u.s.s, i, v->u.s.n, &len);
            if (rpush(R, line, out, rsub(R, line, v, i, len))) { jinja_release(out); return NULL; }
            i += len;
        }
    } else if (v->type != JV_UNDEF) {
        jinja_release(out);
        return rerr(R, line, CK_EFORMAT, "line %d: '%s' object is not iterable", line, type_name(v));
    }
    return out;
}

/* ---- operators */

static jinja_value *mk_str_copy(rctx *R, int line, const jinja_value *v) { return rsub(R, line, v, 0, v->u.s.n); }

static jinja_value *binop(rctx *R, int line, int op, jinja_value *a, jinja_value *b) {
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (op == OP_CONCAT) {
        sbuf s = sb_for(R);
        int rc = py_str(R, &s, a, 0);
        if (rc == 0) rc = py_str(R, &s, b, 0);
        if (rc) { sb_free(&s); sb_fail(R, line, rc); return NULL; }
        return sb_take(R, line, &s);
    }
    if (is_num(a) && is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT && op != OP_DIV) {
            long long x = num_i(a), y = num_i(b), r = 0;
            int ovf = 0;
            switch (op) {
            case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
            case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
            case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
            case OP_FLOORDIV: case OP_MOD:
                if (y == 0) return rerr(R, line, CK_EFORMAT, "line %d: integer division or modulo by zero", line);
                if (x == LLONG_MIN && y == -1) { ovf = 1; break; }
                r = op == OP_FLOORDIV ? x / y : x % y;
                if (op == OP_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0))) r--;
                if (op == OP_MOD && r != 0 && ((r < 0) != (y < 0))) r += y;
                break;
            case OP_POW:
                if (y < 0) return mk_float(R, line, pow((double)x, (double)y));
                r = 1;
                for (long long k = 0; k < y && !ovf; k++) {
                    ovf = __builtin_mul_overflow(r, x, &r);
                    if (r == 0 || r == 1) break;
                    if (r == -1) { r = (y - k - 1) % 2 ? -r : r; break; }
                }
                break;
            }
            if (ovf) return rerr(R, line, CK_ERANGE, "line %d: integer overflow in '%s'", line, sym[op]);
            return mk_int(R, line, r);
        }
        double x = num_f(a), y = num_f(b), r = 0;
        switch (op) {
        case OP_ADD: r = x + y; break;
        case OP_SUB: r = x - y; break;
        case OP_MUL: r = x * y; break;
        case OP_DIV: case OP_FLOORDIV: case OP_MOD:
            if (y == 0) return rerr(R, line, CK_EFORMAT, "line %d: division by zero", line);
            if (op == OP_DIV) r = x / y;
            else if (op == OP_FLOORDIV) r = floor(x / y);
            else { r = fmod(x, y); if (r != 0 && ((r < 0) != (y < 0))) r += y; }
            break;
        case OP_POW: r = pow(x, y); break;
        }
        return mk_float(R, line, r);
    }
    if (op == OP_ADD && a->type == JV_STR && b->type == JV_STR) {
        /* Markup + str HTML-escapes the str in Jinja: refuse rather than
         * render something else than apply_chat_template */
        if (a->safe != b->safe)
            return rerr(R, line, CK_EUNSUPPORTED,
                        "line %d: '+' of a |safe string and a plain one (Jinja escapes HTML there) is not supported",
                        line);
        sbuf s = sb_for(R);
        int rc = sb_addv(&s, a, 0, a->u.s.n);
        if (rc == 0) rc = sb_addv(&s, b, 0, b->u.s.n);
        if (rc) { sb_free(&s); sb_fail(R, line, rc); return NULL; }
        return sb_take(R, line, &s);
    }
    if (op == OP_ADD && a->type == JV_LIST && b->type == JV_LIST && a->u.l.tuple == b->u.l.tuple) {
        jinja_value *out = rnew(R, line, JV_LIST);
        if (!out) return NULL;
        out->u.l.tuple = a->u.l.tuple;
        for (size_t i = 0; i < a->u.l.n + b->u.l.n; i++)
            if (rpush(R, line, out, jv_ref(i < a->u.l.n ? a->u.l.v[i] : b->u.l.v[i - a->u.l.n])))
                { jinja_release(out); return NULL; }
        return out;
    }
    if (op == OP_MUL && (a->type == JV_STR || a->type == JV_LIST || b->type == JV_STR || b->type == JV_LIST)) {
        jinja_value *seq = a->type == JV_STR || a->type == JV_LIST ? a : b, *cnt = seq == a ? b : a;
        if (cnt->type == JV_INT || cnt->type == JV_BOOL) {
            long long k = num_i(cnt) < 0 ? 0 : num_i(cnt);
            size_t unit = seq->type == JV_STR ? seq->u.s.n : seq->u.l.n * sizeof(void *);
            if (unit && (unsigned long long)k > R->lim->max_output / unit) {
                sb_fail(R, line, CK_ETOOLONG);
                return NULL;
            }
            if (seq->type == JV_STR) {
                sbuf s = sb_for(R);
                int rc = 0;
                for (long long i = 0; i < k && rc == 0; i++) rc = sb_addv(&s, seq, 0, seq->u.s.n);
                if (rc) { sb_free(&s); sb_fail(R, line, rc); return NULL; }
                return sb_take(R, line, &s);
            }
            jinja_value *out = rnew(R, line, JV_LIST);
            for (long long i = 0; out && i < k; i++)
                for (size_t j = 0; j < seq->u.l.n; j++)
                    if (rpush(R, line, out, jv_ref(seq->u.l.v[j]))) { jinja_release(out); return NULL; }
            return out;
        }
    }
    if (a->type == JV_UNDEF || b->type == JV_UNDEF)
        return rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (operand of '%s')", line,
                    undef_name(a->type == JV_UNDEF ? a : b), sym[op]);
    if (op == OP_MOD && a->type == JV_STR)
        return rerr(R, line, CK_EUNSUPPORTED, "line %d: string %% formatting is not supported", line);
    return rerr(R, line, CK_EFORMAT, "line %d: unsupported operand type(s) for %s: '%s' and '%s'", line, sym[op],
                type_name(a), type_name(b));
}

/* ---- call arguments, evaluated */

#define MAX_ARGS 16
typedef struct cargs {
    jinja_value *pos[MAX_ARGS];
    int npos;
    const char *kn[MAX_ARGS];
    size_t kl[MAX_ARGS];
    jinja_value *kv[MAX_ARGS];
    int nkw;
} cargs;

static void cargs_free(cargs *A) {
    for (int i = 0; i < A->npos; i++) jinja_release(A->pos[i]);
    for (int i = 0; i < A->nkw; i++) jinja_release(A->kv[i]);
    A->npos = A->nkw = 0;
}

/* Argument i, or the keyword argument `name`, or NULL (borrowed). */
static jinja_value *arg(const cargs *A, int i, const char *name) {
    if (i >= 0 && i < A->npos) return A->pos[i];
    for (int k = 0; name && k < A->nkw; k++)
        if (A->kl[k] == strlen(name) && memcmp(A->kn[k], name, A->kl[k]) == 0) return A->kv[k];
    return NULL;
}

/* A's keyword names must be among `allowed` (NULL-terminated) and at most
 * max_pos positional arguments given. */
static int check_args(rctx *R, int line, const cargs *A, int max_pos, const char *what, const char *const *allowed) {
    if (A->npos > max_pos) {
        rerr(R, line, CK_EFORMAT, "line %d: %s takes at most %d positional argument(s), %d given", line, what, max_pos,
             A->npos);
        return -1;
    }
    for (int k = 0; k < A->nkw; k++) {
        int ok = 0;
        for (int j = 0; allowed && allowed[j]; j++)
            if (A->kl[k] == strlen(allowed[j]) && memcmp(A->kn[k], allowed[j], A->kl[k]) == 0) ok = 1;
        if (!ok) {
            rerr(R, line, CK_EUNSUPPORTED, "line %d: %s: unsupported keyword argument '%.*s'", line, what, (int)A->kl[k],
                 A->kn[k]);
            return -1;
        }
    }
    return 0;
}

static jinja_value *ev(rctx *R, const jnode *e, frame *F);

static int eval_args(rctx *R, const jnode *e, frame *F, cargs *A) {
    A->npos = A->nkw = 0;
    if (e->args.n > MAX_ARGS || e->kwv.n > MAX_ARGS) {
        rerr(R, e->line, CK_EUNSUPPORTED, "line %d: more than %d arguments", e->line, MAX_ARGS);
        return -1;
    }
    for (int i = 0; i < e->args.n; i++) {
        if (!(A->pos[i] = ev(R, e->args.v[i], F))) { cargs_free(A); return -1; }
        A->npos++;
    }
    for (int i = 0; i < e->kwv.n; i++) {
        if (!(A->kv[i] = ev(R, e->kwv.v[i], F))) { cargs_free(A); return -1; }
        A->kn[i] = e->kw.v[i];
        A->kl[i] = e->kw.len[i];
        A->nkw++;
    }
    return 0;
}

/* ---- string operations (code points; case maps are ASCII only) */

static int cp_in(unsigned c, const char *set, size_t n) {
    size_t i = 0, len;
    while (i < n) {
        if (utf8_dec((const unsigned char *)set, i, n, &len) == c) return 1;
        i += len;
    }
    return 0;
}

/* str.strip / lstrip / rstrip: which = 3 both ends, 1 left, 2 right; chars
 * NULL = whitespace. */
static jinja_value *str_strip(rctx *R, int line, const jinja_value *s, int which, const jinja_value *chars) {
    const char *p = s->u.s.s;
    size_t a = 0, z = s->u.s.n, len;
    if (chars && chars->type != JV_NONE && chars->type != JV_STR)
        return rerr(R, line, CK_EFORMAT, "line %d: strip arg must be None or str", line);
    int ws = !chars || chars->type == JV_NONE;
    if (which & 1)
        while (a < z) {
            unsigned c = utf8_dec((const unsigned char *)p, a, z, &len);
            if (ws ? !py_space(c) : !cp_in(c, chars->u.s.s, chars->u.s.n)) break;
            a += len;
        }
    if (which & 2)
        while (z > a) {
            size_t q = utf8_prev(p, a, z);
            unsigned c = utf8_dec((const unsigned char *)p, q, z, &len);
            if (ws ? !py_space(c) : !cp_in(c, chars->u.s.s, chars->u.s.n)) break;
            z = q;
        }
    return rsub(R, line, s, a, z - a);
}

/* mode: 'u' upper, 'l' lower, 't' title, 'c' capitalize */
static jinja_value *str_case(rctx *R, int line, const jinja_value *s, int mode) {
    /* ASCII case maps keep every byte in place, and so its provenance */
    jinja_value *v = rsub(R, line, s, 0, s->u.s.n);
    if (!v) return NULL;
    char *p = v->u.s.s;
    int prev_cased = 0;
    for (size_t i = 0; i < v->u.s.n; i++) {
        char c = p[i];
        int lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
        int to_up = mode == 'u' || (mode == 't' && !prev_cased) || (mode == 'c' && i == 0);
        if (to_up && lo) p[i] = (char)(c - 32);
        else if (!to_up && up && mode != 'u') p[i] = (char)(c + 32);
        prev_cased = lo || up || (unsigned char)c >= 0x80;
    }
    return v;
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(h + i, n, nn) == 0) return h + i;
    return NULL;
}

static jinja_value *str_replace(rctx *R, int line, const jinja_value *s, const jinja_value *old,
                                const jinja_value *new_, const jinja_value *count) {
    if (!old || !new_ || old->type != JV_STR || new_->type != JV_STR)
        return rerr(R, line, CK_EFORMAT, "line %d: replace() takes two strings", line);
    long long max = count && count->type != JV_NONE ? num_i(count) : -1;
    sbuf b = sb_for(R);
    int rc = 0;
    const char *p = s->u.s.s, *end = p + s->u.s.n;
    long long done = 0;
    if (old->u.s.n == 0) {
        /* Python puts new between every code point and at both ends */
        size_t i = 0, len;
        while (rc == 0 && (max < 0 || done < max)) {
            rc = sb_addv(&b, new_, 0, new_->u.s.n);
            done++;
            if (i >= s->u.s.n) break;
            utf8_dec((const unsigned char *)p, i, s->u.s.n, &len);
            if (rc == 0) rc = sb_addv(&b, s, i, len);
            i += len;
        }
        if (rc == 0 && i < s->u.s.n) rc = sb_addv(&b, s, i, s->u.s.n - i);
    } else {
        while (rc == 0) {
            const char *hit = max >= 0 && done >= max ? NULL : find_bytes(p, (size_t)(end - p), old->u.s.s, old->u.s.n);
            if (!hit) { rc = sb_addv(&b, s, (size_t)(p - s->u.s.s), (size_t)(end - p)); break; }
            rc = sb_addv(&b, s, (size_t)(p - s->u.s.s), (size_t)(hit - p));
            if (rc == 0) rc = sb_addv(&b, new_, 0, new_->u.s.n);
            p = hit + old->u.s.n;
            done++;
            if (R->steps++ > R->lim->max_steps) rc = CK_ERANGE;
        }
    }
    if (rc == CK_ERANGE) { sb_free(&b); return rerr(R, line, CK_ERANGE, "line %d: step limit", line); }
    if (rc) { sb_free(&b); sb_fail(R, line, rc); return NULL; }
    return sb_take(R, line, &b);
}

static jinja_value *str_split(rctx *R, int line, const jinja_value *s, const jinja_value *sep, const jinja_value *maxs) {
    long long max = maxs && maxs->type != JV_NONE ? num_i(maxs) : -1;
    jinja_value *out = rnew(R, line, JV_LIST);
    if (!out) return NULL;
    const char *p = s->u.s.s;
    size_t n = s->u.s.n, i = 0;
    long long done = 0;
    if (!sep || sep->type == JV_NONE) {
        for (;;) {
            i = skip_space_fwd(p, i, n);
            if (i >= n) break;
            if (max >= 0 && done >= max) {
                size_t z = skip_space_back(p, i, n);
                if (rpush(R, line, out, rsub(R, line, s, i, z - i))) goto fail;
                break;
            }
            size_t j = i, len;
            while (j < n && !py_space(utf8_dec((const unsigned char *)p, j, n, &len))) j += len;
            if (rpush(R, line, out, rsub(R, line, s, i, j - i))) goto fail;
            done++;
            i = j;
        }
        return out;
    }
    if (sep->type != JV_STR) { rerr(R, line, CK_EFORMAT, "line %d: split() separator must be a string", line); goto fail; }
    if (!sep->u.s.n) { rerr(R, line, CK_EFORMAT, "line %d: split(): empty separator", line); goto fail; }
    for (;;) {
        const char *hit = max >= 0 && done >= max ? NULL : find_bytes(p + i, n - i, sep->u.s.s, sep->u.s.n);
        if (!hit) { if (rpush(R, line, out, rsub(R, line, s, i, n - i))) goto fail; break; }
        if (rpush(R, line, out, rsub(R, line, s, i, (size_t)(hit - (p + i))))) goto fail;
        i = (size_t)(hit - p) + sep->u.s.n;
        done++;
    }
    return out;
fail:
    jinja_release(out);
    return NULL;
}

/* startswith / endswith with a string or a tuple/list of strings */
static jinja_value *str_affix(rctx *R, int line, const jinja_value *s, const jinja_value *a, int end) {
    if (!a) return rerr(R, line, CK_EFORMAT, "line %d: %s() takes one argument", line, end ? "endswith" : "startswith");
    size_t n = a->type == JV_LIST ? a->u.l.n : 1;
    for (size_t i = 0; i < n; i++) {
        const jinja_value *x = a->type == JV_LIST ? a->u.l.v[i] : a;
        if (x->type != JV_STR)
            return rerr(R, line, CK_EFORMAT, "line %d: %s() argument must be str or a tuple of str", line,
                        end ? "endswith" : "startswith");
        if (x->u.s.n <= s->u.s.n &&
            memcmp(s->u.s.s + (end ? s->u.s.n - x->u.s.n : 0), x->u.s.s, x->u.s.n) == 0)
            return mk_bool(R, line, 1);
    }
    return mk_bool(R, line, 0);
}

static jinja_value *dict_items(rctx *R, int line, const jinja_value *d, int what /* 0 items 1 keys 2 values */) {
    jinja_value *out = rnew(R, line, JV_LIST);
    for (size_t i = 0; out && i < d->u.d.n; i++) {
        jinja_value *x;
        if (what == 2) x = jv_ref(d->u.d.v[i]);
        else if (what == 1) x = rkey(R, line, d, i);
        else {
            x = rnew(R, line, JV_LIST);
            if (x) {
                x->u.l.tuple = 1;
                if (rpush(R, line, x, rkey(R, line, d, i)) ||
                    rpush(R, line, x, jv_ref(d->u.d.v[i]))) { jinja_release(x); x = NULL; }
            }
        }
        if (rpush(R, line, out, x)) { jinja_release(out); return NULL; }
    }
    return out;
}

static int name_is(const char *s, size_t n, const char *lit) { return n == strlen(lit) && memcmp(s, lit, n) == 0; }

/* obj.name(args) for str and dict methods; *handled = 0 when obj has no
 * such method (the caller then reports it). */
static jinja_value *call_method(rctx *R, int line, jinja_value *obj, const char *m, size_t mn, const cargs *A,
                                int *handled) {
    *handled = 1;
    jinja_value *a0 = arg(A, 0, NULL), *a1 = arg(A, 1, NULL);
    if (obj->type == JV_STR) {
        if (name_is(m, mn, "strip")) return str_strip(R, line, obj, 3, a0);
        if (name_is(m, mn, "lstrip")) return str_strip(R, line, obj, 1, a0);
        if (name_is(m, mn, "rstrip")) return str_strip(R, line, obj, 2, a0);
        if (name_is(m, mn, "startswith")) return str_affix(R, line, obj, a0, 0);
        if (name_is(m, mn, "endswith")) return str_affix(R, line, obj, a0, 1);
        if (name_is(m, mn, "split")) return str_split(R, line, obj, arg(A, 0, "sep"), arg(A, 1, "maxsplit"));
        if (name_is(m, mn, "replace")) return str_replace(R, line, obj, a0, a1, arg(A, 2, "count"));
        if (name_is(m, mn, "upper")) return str_case(R, line, obj, 'u');
        if (name_is(m, mn, "lower")) return str_case(R, line, obj, 'l');
        if (name_is(m, mn, "title")) return str_case(R, line, obj, 't');
        if (name_is(m, mn, "capitalize")) return str_case(R, line, obj, 'c');
        if (name_is(m, mn, "find")) {
            if (!a0 || a0->type != JV_STR) return rerr(R, line, CK_EFORMAT, "line %d: find() takes a string", line);
            const char *hit = find_bytes(obj->u.s.s, obj->u.s.n, a0->u.s.s, a0->u.s.n);
            return mk_int(R, line, hit ? (long long)utf8_count(obj->u.s.s, (size_t)(hit - obj->u.s.s)) : -1);
        }
    } else if (obj->type == JV_DICT) {
        if (name_is(m, mn, "items")) return dict_items(R, line, obj, 0);
        if (name_is(m, mn, "keys")) return dict_items(R, line, obj, 1);
        if (name_is(m, mn, "values")) return dict_items(R, line, obj, 2);
        if (name_is(m, mn, "get")) {
            if (!a0) return rerr(R, line, CK_EFORMAT, "line %d: get() takes a key", line);
            long i = a0->type == JV_STR ? dict_find(obj, a0->u.s.s, a0->u.s.n) : -1;
            if (i >= 0) return jv_ref(obj->u.d.v[i]);
            return a1 ? jv_ref(a1) : rnew(R, line, JV_NONE);
        }
    }
    *handled = 0;
    return NULL;
}

/* ---- tests (`x is name`) */

static int ascii_case_all(const jinja_value *s, int upper) {
    int cased = 0;
    for (size_t i = 0; i < s->u.s.n; i++) {
        char c = s->u.s.s[i];
        if (c >= 'a' && c <= 'z') { if (upper) return 0; cased = 1; }
        if (c >= 'A' && c <= 'Z') { if (!upper) return 0; cased = 1; }
    }
    return cased;
}

/* 1 / 0, or -1 on error. */
static int run_test(rctx *R, int line, const char *name, size_t n, jinja_value *v, const cargs *A) {
    jinja_value *a0 = arg(A, 0, NULL);
#define IS(s) name_is(name, n, s)
    if (IS("defined")) return v->type != JV_UNDEF;
    if (IS("undefined")) return v->type == JV_UNDEF;
    if (IS("none")) return v->type == JV_NONE;
    if (IS("boolean")) return v->type == JV_BOOL;
    if (IS("true")) return v->type == JV_BOOL && v->u.b;
    if (IS("false")) return v->type == JV_BOOL && !v->u.b;
    if (IS("string")) return v->type == JV_STR;
    if (IS("number")) return is_num(v);
    if (IS("integer")) return v->type == JV_INT;
    if (IS("float")) return v->type == JV_FLOAT;
    if (IS("mapping")) return v->type == JV_DICT;
    if (IS("iterable")) return v->type == JV_STR || v->type == JV_LIST || v->type == JV_DICT || v->type == JV_UNDEF;
    if (IS("sequence")) return v->type == JV_STR || v->type == JV_LIST || v->type == JV_DICT || v->type == JV_UNDEF;
    if (IS("callable")) return v->type == JV_FUNC || v->type == JV_MACRO;
    if (IS("lower") || IS("upper")) return v->type == JV_STR && ascii_case_all(v, IS("upper"));
    if (!a0 && !IS("odd") && !IS("even")) {
        rerr(R, line, CK_EFORMAT, "line %d: test '%.*s' needs an argument", line, (int)n, name);
        return -1;
    }
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (v->type != JV_INT && v->type != JV_BOOL) {
            rerr(R, line, CK_EFORMAT, "line %d: test '%.*s' needs an integer", line, (int)n, name);
            return -1;
        }
        long long x = num_i(v), d = IS("divisibleby") ? (a0->type == JV_INT ? a0->u.i : 0) : 2;
        if (d == 0) { rerr(R, line, CK_EFORMAT, "line %d: divisibleby needs a nonzero integer", line); return -1; }
        int rem = x % d != 0;
        return IS("odd") ? rem : !rem;
    }
    if (IS("eq") || IS("equalto") || IS("==")) return py_eq(R, v, a0, 0);
    if (IS("ne") || IS("!=")) { int e = py_eq(R, v, a0, 0); return e < 0 ? e : !e; }
    if (IS("lt") || IS("<")) return py_order(R, line, OP_LT, v, a0);
    if (IS("le") || IS("<=")) return py_order(R, line, OP_LE, v, a0);
    if (IS("gt") || IS(">")) return py_order(R, line, OP_GT, v, a0);
    if (IS("ge") || IS(">=")) return py_order(R, line, OP_GE, v, a0);
    if (IS("in")) return py_in(R, line, v, a0);
    if (IS("sameas")) {
        if (v->type != a0->type) return 0;
        if (v->type == JV_NONE || v->type == JV_UNDEF) return 1;
        if (v->type == JV_BOOL) return v->u.b == a0->u.b;
        return v == a0;
    }
#undef IS
    rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported test '%.*s'", line, (int)n, name);
    return -1;
}

/* ---- filters */

static jinja_value *apply_filter(rctx *R, int line, const char *name, size_t n, jinja_value *v, const cargs *A);

static jinja_value *len_of(rctx *R, int line, const jinja_value *v) {
    switch (v->type) {
    case JV_STR: return mk_int(R, line, (long long)utf8_count(v->u.s.s, v->u.s.n));
    case JV_LIST: return mk_int(R, line, (long long)v->u.l.n);
    case JV_DICT: case JV_NS: return mk_int(R, line, (long long)v->u.d.n);
    case JV_UNDEF: return mk_int(R, line, 0);
    default: return rerr(R, line, CK_EFORMAT, "line %d: object of type '%s' has no len()", line, type_name(v));
    }
}

/* item's attribute for selectattr/map/join(attribute=): dotted names walk */
static jinja_value *attr_path(rctx *R, int line, jinja_value *item, const jinja_value *path) {
    if (path->type == JV_INT) return get_item(R, line, item, (jinja_value *)path);
    if (path->type != JV_STR) return rerr(R, line, CK_EFORMAT, "line %d: attribute must be a string", line);
    jinja_value *cur = jv_ref(item);
    const char *p = path->u.s.s, *end = p + path->u.s.n;
    while (cur) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        jinja_value *nx = get_attr(R, line, cur, p, len);
        jinja_release(cur);
        cur = nx;
        if (!dot) break;
        p = dot + 1;
    }
    return cur;
}

/* select / reject / selectattr / rejectattr */
static jinja_value *filter_select(rctx *R, int line, jinja_value *v, const cargs *A, int by_attr, int keep) {
    jinja_value *items = truthy(v) ? iter_list(R, line, v) : rnew(R, line, JV_LIST); /* Jinja: `if seq:` */
    if (!items) return NULL;
    jinja_value *out = rnew(R, line, JV_LIST);
    int first = by_attr ? 1 : 0;
    const jinja_value *tname = arg(A, first, NULL);
    if (by_attr && !arg(A, 0, NULL)) { rerr(R, line, CK_EFORMAT, "line %d: selectattr needs an attribute", line); goto fail; }
    if (tname && tname->type != JV_STR) { rerr(R, line, CK_EFORMAT, "line %d: test name must be a string", line); goto fail; }
    if (tname && table_find(TESTS, tname->u.s.s, tname->u.s.n) < 0) {
        rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported test '%s'", line, tname->u.s.s);
        goto fail;
    }
    cargs T = {0};
    for (int i = first + 1; i < A->npos; i++) T.pos[T.npos++] = A->pos[i];
    for (size_t i = 0; out && i < items->u.l.n; i++) {
        jinja_value *x = by_attr ? attr_path(R, line, items->u.l.v[i], arg(A, 0, NULL)) : jv_ref(items->u.l.v[i]);
        if (!x) goto fail;
        int r = tname ? run_test(R, line, tname->u.s.s, tname->u.s.n, x, &T) : truthy(x);
        jinja_release(x);
        if (r < 0) goto fail;
        if (r == keep && rpush(R, line, out, jv_ref(items->u.l.v[i]))) goto fail;
    }
    jinja_release(items);
    return out;
fail:
    jinja_release(items);
    jinja_release(out);
    return NULL;
}

static jinja_value *filter_map(rctx *R, int line, jinja_value *v, const cargs *A) {
    jinja_value *items = truthy(v) ? iter_list(R, line, v) : rnew(R, line, JV_LIST); /* Jinja: `if value:` */
    if (!items) return NULL;
    jinja_value *out = rnew(R, line, JV_LIST), *attr = arg(A, -1, "attribute"), *def = arg(A, -1, "default");
    jinja_value *fname = arg(A, 0, NULL);
    if (!attr && (!fname || fname->type != JV_STR)) {
        rerr(R, line, CK_EFORMAT, "line %d: map needs attribute= or a filter name", line);
        goto fail;
    }
    if (!attr && table_find(FILTERS, fname->u.s.s, fname->u.s.n) < 0) {
        rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported filter '%s'", line, fname->u.s.s);
        goto fail;
    }
    cargs T = {0};
    for (int i = 1; !attr && i < A->npos; i++) T.pos[T.npos++] = A->pos[i];
    for (size_t i = 0; out && i < items->u.l.n; i++) {
        jinja_value *x;
        if (attr) {
            x = attr_path(R, line, items->u.l.v[i], attr);
            if (x && x->type == JV_UNDEF && def) { jinja_release(x); x = jv_ref(def); }
        } else {
            x = apply_filter(R, line, fname->u.s.s, fname->u.s.n, items->u.l.v[i], &T);
        }
        if (rpush(R, line, out, x)) goto fail;
    }
    jinja_release(items);
    return out;
fail:
    jinja_release(items);
    jinja_release(out);
    return NULL;
}

static jinja_value *filter_tojson(rctx *R, int line, jinja_value *v, const cargs *A) {
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (check_args(R, line, A, 4, "tojson", kw)) return NULL;
    jopts o = {-1, 0, 0, ", ", ": ", 2, 2};
    jinja_value *ea = arg(A, 0, "ensure_ascii"), *ind = arg(A, 1, "indent"), *sep = arg(A, 2, "separators"),
                *sk = arg(A, 3, "sort_keys");
    if (ea) o.ensure_ascii = truthy(ea);
    if (sk) o.sort_keys = truthy(sk);
    if (ind && ind->type != JV_NONE) {
        if (ind->type != JV_INT || ind->u.i < 0 || ind->u.i > 64)
            return rerr(R, line, CK_EUNSUPPORTED, "line %d: tojson: indent must be an integer 0..64", line);
        o.indent = (int)ind->u.i;
        o.item_sep = ",";
        o.item_sep_n = 1;
    }
    if (sep && sep->type != JV_NONE) {
        if (sep->type != JV_LIST || sep->u.l.n != 2 || sep->u.l.v[0]->type != JV_STR || sep->u.l.v[1]->type != JV_STR)
            return rerr(R, line, CK_EFORMAT, "line %d: tojson: separators must be two strings", line);
        o.item_sep = sep->u.l.v[0]->u.s.s;
        o.item_sep_n = sep->u.l.v[0]->u.s.n;
        o.key_sep = sep->u.l.v[1]->u.s.s;
        o.key_sep_n = sep->u.l.v[1]->u.s.n;
    }
    sbuf b = sb_for(R);
    int rc = json_dump(R, line, &b, v, &o, 0);
    /* separators from data: everything between the values is data too */
    if (rc == 0 && sep && sep->type != JV_NONE) rc = sb_taint_from(&b, 0, jv_tainted(sep, 0));
    if (rc) { sb_free(&b); sb_fail(R, line, rc); return NULL; }
    return sb_take(R, line, &b);
}

static jinja_value *apply_filter(rctx *R, int line, const char *name, size_t n, jinja_value *v, const cargs *A) {
    jinja_value *a0 = arg(A, 0, NULL);
#define IS(s) name_is(name, n, s)
    if (IS("safe")) {
        if (v->type != JV_STR || v->safe) return jv_ref(v);
        jinja_value *m = mk_str_copy(R, line, v);
        if (m) m->safe = 1;
        return m;
    }
    if (IS("tojson")) return filter_tojson(R, line, v, A);
    if (IS("length") || IS("count")) return len_of(R, line, v);
    if (IS("default") || IS("d")) {
        jinja_value *def = arg(A, 0, "default_value"), *boolean = arg(A, 1, "boolean");
        int use = v->type == JV_UNDEF || (boolean && truthy(boolean) && !truthy(v));
        if (!use) return jv_ref(v);
        return def ? jv_ref(def) : rstr(R, line, "", 0);
    }
    if (IS("select") || IS("reject")) return filter_select(R, line, v, A, 0, IS("select"));
    if (IS("selectattr") || IS("rejectattr")) return filter_select(R, line, v, A, 1, IS("selectattr"));
    if (IS("map")) return filter_map(R, line, v, A);
    if (IS("list")) {
        jinja_value *l = iter_list(R, line, v);
        if (!l || l != v) return l;
        jinja_release(l);
        jinja_value *out = rnew(R, line, JV_LIST);
        for (size_t i = 0; out && i < v->u.l.n; i++)
            if (rpush(R, line, out, jv_ref(v->u.l.v[i]))) { jinja_release(out); return NULL; }
        return out;
    }
    if (IS("items")) {
        if (v->type == JV_UNDEF) return rnew(R, line, JV_LIST);
        if (v->type != JV_DICT) return rerr(R, line, CK_EFORMAT, "line %d: items: '%s' is not a mapping", line, type_name(v));
        return dict_items(R, line, v, 0);
    }
    if (IS("first") || IS("last")) {
        jinja_value *l = iter_list(R, line, v);
        if (!l) return NULL;
        jinja_value *r = l->u.l.n ? jv_ref(l->u.l.v[IS("first") ? 0 : l->u.l.n - 1]) : rundef(R, line, NULL, 0);
        jinja_release(l);
        return r;
    }
    if (IS("reverse")) {
        if (v->type == JV_STR) {
            jinja_value *m1 = mk_int(R, line, -1);
            if (!m1) return NULL;
            jinja_value *se[3] = {NULL, NULL, m1};
            jinja_value *r = get_slice(R, line, v, se);
            jinja_release(m1);
            return r;
        }
        jinja_value *l = iter_list(R, line, v);
        if (!l) return NULL;
        jinja_value *out = rnew(R, line, JV_LIST);
        for (size_t i = l->u.l.n; out && i-- > 0;)
            if (rpush(R, line, out, jv_ref(l->u.l.v[i]))) { jinja_release(out); out = NULL; }
        jinja_release(l);
        return out;
    }
    if (IS("join")) {
        jinja_value *l = iter_list(R, line, v), *sep = arg(A, 0, "d"), *attr = arg(A, 1, "attribute");
        if (!l) return NULL;
        if (sep && sep->type != JV_STR) { jinja_release(l); return rerr(R, line, CK_EFORMAT, "line %d: join separator must be a string", line); }
        sbuf b = sb_for(R);
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < l->u.l.n; i++) {
            if (i && sep) rc = sb_addv(&b, sep, 0, sep->u.s.n);
            jinja_value *x = attr ? attr_path(R, line, l->u.l.v[i], attr) : jv_ref(l->u.l.v[i]);
            if (!x) { rc = R->failed; break; }
            if (rc == 0) rc = py_str(R, &b, x, 0);
            jinja_release(x);
        }
        jinja_release(l);
        if (rc) { sb_free(&b); sb_fail(R, line, rc); return NULL; }
        return sb_take(R, line, &b);
    }
    if (IS("int")) {
        jinja_value *def = arg(A, 0, "default");
        if (v->type == JV_INT) return jv_ref(v);
        if (v->type == JV_BOOL) return mk_int(R, line, v->u.b);
        if (v->type == JV_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18) return mk_int(R, line, (long long)v->u.f);
        if (v->type == JV_STR && v->u.s.n && v->u.s.n < 64) {
            char buf[64], *e;
            memcpy(buf, v->u.s.s, v->u.s.n);
            buf[v->u.s.n] = 0;
            errno = 0;
            long long x = strtoll(buf, &e, 10);
            while (*e && py_space((unsigned char)*e)) e++;
            if (!*e && !errno) return mk_int(R, line, x);
            double d = strtod(buf, &e);
            while (*e && py_space((unsigned char)*e)) e++;
            if (!*e && isfinite(d) && fabs(d) < 9.2e18) return mk_int(R, line, (long long)d);
        }
        return def ? jv_ref(def) : mk_int(R, line, 0);
    }
    if (IS("float")) {
        jinja_value *def = arg(A, 0, "default");
        if (is_num(v)) return mk_float(R, line, num_f(v));
        if (v->type == JV_STR && v->u.s.n && v->u.s.n < 64) {
            char buf[64], *e;
            memcpy(buf, v->u.s.s, v->u.s.n);
            buf[v->u.s.n] = 0;
            double d = strtod(buf, &e);
            while (*e && py_space((unsigned char)*e)) e++;
            if (!*e && e != buf) return mk_float(R, line, d);
        }
        return def ? jv_ref(def) : mk_float(R, line, 0);
    }
    if (IS("abs")) {
        if (v->type == JV_FLOAT) return mk_float(R, line, fabs(v->u.f));
        if (v->type == JV_INT || v->type == JV_BOOL) {
            long long x = num_i(v);
            if (x == LLONG_MIN) return rerr(R, line, CK_ERANGE, "line %d: integer overflow in abs", line);
            return mk_int(R, line, x < 0 ? -x : x);
        }
        return rerr(R, line, CK_EFORMAT, "line %d: bad operand type for abs(): '%s'", line, type_name(v));
    }
    /* the rest work on str(v) */
    jinja_value *s = to_strv(R, line, v), *r = NULL;
    if (!s) return NULL;
    if (IS("string")) r = jv_ref(s);
    else if (IS("trim")) r = str_strip(R, line, s, 3, arg(A, 0, "chars"));
    else if (IS("upper")) r = str_case(R, line, s, 'u');
    else if (IS("lower")) r = str_case(R, line, s, 'l');
    else if (IS("title")) r = str_case(R, line, s, 't');
    else if (IS("capitalize")) r = str_case(R, line, s, 'c');
    else if (IS("replace")) r = str_replace(R, line, s, a0, arg(A, 1, "new"), arg(A, 2, "count"));
    else rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported filter '%.*s'", line, (int)n, name);
#undef IS
    jinja_release(s);
    return r;
}

/* ---- calls: builtins and macros */

static int exec_body(rctx *R, const nlist *body, frame *F, sbuf *out);

static jinja_value *call_builtin(rctx *R, int line, int fn, const cargs *A) {
    switch (fn) {
    case FN_RANGE: {
        long long a = 0, z, st = 1;
        for (int i = 0; i < A->npos; i++)
            if (A->pos[i]->type != JV_INT && A->pos[i]->type != JV_BOOL)
                return rerr(R, line, CK_EFORMAT, "line %d: range() takes integers", line);
        if (A->npos == 1) z = num_i(A->pos[0]);
        else if (A->npos == 2 || A->npos == 3) {
            a = num_i(A->pos[0]);
            z = num_i(A->pos[1]);
            if (A->npos == 3) st = num_i(A->pos[2]);
        } else return rerr(R, line, CK_EFORMAT, "line %d: range() takes 1 to 3 integers", line);
        if (st == 0) return rerr(R, line, CK_EFORMAT, "line %d: range() step must not be zero", line);
        jinja_value *out = rnew(R, line, JV_LIST);
        for (long long i = a; out && (st > 0 ? i < z : i > z); i += st) {
            if (++R->iters > R->lim->max_loop_iters) {
                jinja_release(out);
                return rerr(R, line, CK_ERANGE, "line %d: more than %llu loop iterations", line,
                            (unsigned long long)R->lim->max_loop_iters);
            }
            if (rpush(R, line, out, mk_int(R, line, i))) { jinja_release(out); return NULL; }
            if (__builtin_add_overflow(i, st, &(long long){0})) break;
        }
        return out;
    }
    case FN_NAMESPACE: case FN_DICT: {
        if (A->npos > (fn == FN_NAMESPACE ? 1 : 1))
            return rerr(R, line, CK_EFORMAT, "line %d: %s() takes keyword arguments", line, fn == FN_DICT ? "dict" : "namespace");
        jinja_value *d = rnew(R, line, fn == FN_NAMESPACE ? JV_NS : JV_DICT);
        if (!d) return NULL;
        if (fn == FN_NAMESPACE) {
            if (R->n_ns == R->cap_ns) {
                size_t nc = R->cap_ns ? R->cap_ns * 2 : 8;
                jinja_value **nn = realloc(R->nss, nc * sizeof *nn);
                if (!nn) { jinja_release(d); return nomem(R, line); }
                R->nss = nn;
                R->cap_ns = nc;
            }
            R->nss[R->n_ns++] = jv_ref(d);
        }
        if (A->npos == 1) {
            jinja_value *src = A->pos[0];
            if (src->type != JV_DICT && src->type != JV_NS) { jinja_release(d); return rerr(R, line, CK_EFORMAT, "line %d: expected a dict", line); }
            d->dkeys |= src->dkeys;
            for (size_t i = 0; i < src->u.d.n; i++)
                if (rset(R, line, d, src->u.d.k[i], src->u.d.kn[i], jv_ref(src->u.d.v[i]))) { jinja_release(d); return NULL; }
        }
        for (int i = 0; i < A->nkw; i++)
            if (rset(R, line, d, A->kn[i], A->kl[i], jv_ref(A->kv[i]))) { jinja_release(d); return NULL; }
        return d;
    }
    case FN_RAISE: {
        jinja_value *m = arg(A, 0, NULL);
        sbuf b = sb_for(R);
        b.max = 400;
        if (m) py_str(R, &b, m, 0);
        rerr(R, line, CK_EINVAL, "%s", b.p ? b.p : "");
        sb_free(&b);
        return NULL;
    }
    case FN_STRFTIME: {
        jinja_value *f = arg(A, 0, NULL);
        if (!f || f->type != JV_STR || f->u.s.n > 256 || memchr(f->u.s.s, 0, f->u.s.n))
            return rerr(R, line, CK_EFORMAT, "line %d: strftime_now() takes a format string (at most 256 bytes)", line);
        char buf[2048];
        size_t k = f->u.s.n ? strftime(buf, sizeof buf, f->u.s.s, &R->now) : 0;
        jinja_value *r = rstr(R, line, buf, k);
        if (r && f->u.s.nsp && k) { /* a format from data makes data */
            if (!(r->u.s.sp = malloc(2 * sizeof *r->u.s.sp))) { jinja_release(r); return nomem(R, line); }
            r->u.s.sp[0] = 0;
            r->u.s.sp[1] = k;
            r->u.s.nsp = 1;
        }
        return r;
    }
    }
    return rerr(R, line, CK_EUNSUPPORTED, "line %d: unknown builtin", line);
}

static jinja_value *call_macro(rctx *R, int line, const jnode *m, const cargs *A) {
    if (A->npos > m->names.n)
        return rerr(R, line, CK_EFORMAT, "line %d: macro '%.*s' takes %d argument(s), %d given", line, (int)m->nlen,
                    m->name, m->names.n, A->npos);
    frame f = {R->top, rnew(R, line, JV_DICT)};
    if (!f.vars) return NULL;
    for (int k = 0; k < A->nkw; k++) {
        int found = 0;
        for (int i = 0; i < m->names.n; i++)
            found |= m->names.len[i] == A->kl[k] && memcmp(A->kn[k], m->names.v[i], A->kl[k]) == 0;
        if (!found) {
            jinja_release(f.vars);
            return rerr(R, line, CK_EFORMAT, "line %d: macro '%.*s' takes no keyword argument '%.*s'", line,
                        (int)m->nlen, m->name, (int)A->kl[k], A->kn[k]);
        }
    }
    for (int i = 0; i < m->names.n; i++) {
        jinja_value *v = NULL;
        if (i < A->npos) v = jv_ref(A->pos[i]);
        for (int k = 0; !v && k < A->nkw; k++)
            if (A->kl[k] == m->names.len[i] && memcmp(A->kn[k], m->names.v[i], A->kl[k]) == 0) v = jv_ref(A->kv[k]);
        if (!v) v = m->kwv.v[i] ? ev(R, m->kwv.v[i], &f) : rundef(R, line, m->names.v[i], m->names.len[i]);
        if (rset(R, line, f.vars, m->names.v[i], m->names.len[i], v)) { jinja_release(f.vars); return NULL; }
    }
    sbuf b = sb_for(R);
    int rc = exec_body(R, &m->body, &f, &b);
    jinja_release(f.vars);
    if (rc < 0) { sb_free(&b); return NULL; }
    return sb_take(R, line, &b);
}

static jinja_value *eval_call(rctx *R, const jnode *e, frame *F) {
    cargs A;
    const jnode *callee = e->a;
    jinja_value *obj = NULL, *fn = NULL, *r = NULL;
    if (callee->kind == E_ATTR) {
        if (!(obj = ev(R, callee->a, F))) return NULL;
        if (obj->type == JV_UNDEF) {
            rerr(R, e->line, CK_EFORMAT, "line %d: '%s' is undefined (calling its '%.*s')", e->line, undef_name(obj),
                 (int)callee->nlen, callee->name);
            jinja_release(obj);
            return NULL;
        }
        if (obj->type == JV_STR || obj->type == JV_DICT || obj->type == JV_LIST) {
            long has_key = obj->type == JV_DICT ? dict_find(obj, callee->name, callee->nlen) : -1;
            if (has_key < 0 || (obj->u.d.v[has_key]->type != JV_MACRO && obj->u.d.v[has_key]->type != JV_FUNC)) {
                if (eval_args(R, e, F, &A)) { jinja_release(obj); return NULL; }
                int handled;
                r = call_method(R, e->line, obj, callee->name, callee->nlen, &A, &handled);
                cargs_free(&A);
                if (!handled)
                    rerr(R, e->line, CK_EUNSUPPORTED, "line %d: unsupported method '%.*s' of %s", e->line,
                         (int)callee->nlen, callee->name, type_name(obj));
                jinja_release(obj);
                return r;
            }
        }
        fn = get_attr(R, e->line, obj, callee->name, callee->nlen);
        jinja_release(obj);
    } else {
        fn = ev(R, callee, F);
    }
    if (!fn) return NULL;
    if (fn->type != JV_FUNC && fn->type != JV_MACRO) {
        if (fn->type == JV_UNDEF)
            rerr(R, e->line, CK_EFORMAT, "line %d: '%s' is undefined (called as a function)", e->line, undef_name(fn));
        else
            rerr(R, e->line, CK_EFORMAT, "line %d: '%s' object is not callable", e->line, type_name(fn));
        jinja_release(fn);
        return NULL;
    }
    if (eval_args(R, e, F, &A)) { jinja_release(fn); return NULL; }
    r = fn->type == JV_FUNC ? call_builtin(R, e->line, fn->u.fn, &A) : call_macro(R, e->line, fn->u.m, &A);
    cargs_free(&A);
    jinja_release(fn);
    return r;
}

/* ---- expressions */

static int tick(rctx *R, int line) {
    if (R->failed) return R->failed;
    if (++R->steps > R->lim->max_steps) {
        rerr(R, line, CK_ERANGE, "line %d: more than %llu evaluation steps", line, (unsigned long long)R->lim->max_steps);
        return R->failed;
    }
    return 0;
}

static jinja_value *ev_(rctx *R, const jnode *e, frame *F) {
    jinja_value *a = NULL, *b = NULL, *r = NULL;
    switch (e->kind) {
    case E_LIT: return jv_ref(e->lit);
    case E_NAME: return lookup(R, e->line, F, e->name, e->nlen);
    case E_ATTR:
        if (!(a = ev(R, e->a, F))) return NULL;
        r = get_attr(R, e->line, a, e->name, e->nlen);
        break;
    case E_ITEM:
        if (!(a = ev(R, e->a, F)) || !(b = ev(R, e->b, F))) break;
        r = get_item(R, e->line, a, b);
        break;
    case E_SLICE: {
        jinja_value *se[3] = {NULL, NULL, NULL};
        const jnode *sn[3] = {e->b, e->c, e->d};
        int ok = (a = ev(R, e->a, F)) != NULL;
        for (int k = 0; ok && k < 3; k++)
            if (sn[k] && !(se[k] = ev(R, sn[k], F))) ok = 0;
        if (ok) r = get_slice(R, e->line, a, se);
        for (int k = 0; k < 3; k++) jinja_release(se[k]);
        break;
    }
    case E_CALL: return eval_call(R, e, F);
    case E_FILTER: {
        cargs A;
        if (!(a = ev(R, e->a, F))) return NULL;
        if (eval_args(R, e, F, &A)) break;
        r = apply_filter(R, e->line, e->name, e->nlen, a, &A);
        cargs_free(&A);
        break;
    }
    case E_TEST: {
        cargs A;
        if (!(a = ev(R, e->a, F))) return NULL;
        if (eval_args(R, e, F, &A)) break;
        int t = run_test(R, e->line, e->name, e->nlen, a, &A);
        cargs_free(&A);
        if (t >= 0) r = mk_bool(R, e->line, e->op ? !t : t);
        break;
    }
    case E_BIN:
        if (!(a = ev(R, e->a, F)) || !(b = ev(R, e->b, F))) break;
        if (e->op == OP_EQ || e->op == OP_NE) {
            int q = py_eq(R, a, b, 0);
            if (q >= 0) r = mk_bool(R, e->line, e->op == OP_EQ ? q : !q);
        } else if (e->op >= OP_LT && e->op <= OP_GE) {
            int q = py_order(R, e->line, e->op, a, b);
            if (q >= 0) r = mk_bool(R, e->line, q);
        } else if (e->op == OP_IN || e->op == OP_NOTIN) {
            int q = py_in(R, e->line, a, b);
            if (q >= 0) r = mk_bool(R, e->line, e->op == OP_IN ? q : !q);
        } else {
            r = binop(R, e->line, e->op, a, b);
        }
        break;
    case E_NEG: case E_POS:
        if (!(a = ev(R, e->a, F))) return NULL;
        if (a->type == JV_FLOAT) r = mk_float(R, e->line, e->kind == E_NEG ? -a->u.f : a->u.f);
        else if (a->type == JV_INT || a->type == JV_BOOL) {
            long long x = num_i(a);
            if (e->kind == E_NEG && x == LLONG_MIN) rerr(R, e->line, CK_ERANGE, "line %d: integer overflow", e->line);
            else r = mk_int(R, e->line, e->kind == E_NEG ? -x : x);
        } else
            rerr(R, e->line, CK_EFORMAT, "line %d: bad operand type for unary %c: '%s'", e->line,
                 e->kind == E_NEG ? '-' : '+', type_name(a));
        break;
    case E_NOT:
        if (!(a = ev(R, e->a, F))) return NULL;
        r = mk_bool(R, e->line, !truthy(a));
        break;
    case E_AND: case E_OR:
        if (!(a = ev(R, e->a, F))) return NULL;
        if (truthy(a) == (e->kind == E_OR)) return a;
        jinja_release(a);
        return ev(R, e->b, F);
    case E_COND:
        if (!(a = ev(R, e->a, F))) return NULL;
        if (truthy(a)) r = ev(R, e->b, F);
        else r = e->c ? ev(R, e->c, F) : rundef(R, e->line, NULL, 0);
        break;
    case E_LIST: case E_TUPLE:
        r = rnew(R, e->line, JV_LIST);
        if (r) r->u.l.tuple = e->kind == E_TUPLE;
        for (int i = 0; r && i < e->args.n; i++)
            if (rpush(R, e->line, r, ev(R, e->args.v[i], F))) { jinja_release(r); r = NULL; }
        break;
    case E_DICT:
        r = rnew(R, e->line, JV_DICT);
        for (int i = 0; r && i < e->args.n; i++) {
            jinja_value *k = ev(R, e->args.v[i], F);
            if (k && k->type != JV_STR)
                rerr(R, e->line, CK_EUNSUPPORTED, "line %d: dict keys other than strings are not supported", e->line);
            if (k && k->type == JV_STR && k->u.s.nsp) r->dkeys = 1; /* keys are whole strings: any data taints them */
            if (!k || R->failed || rset(R, e->line, r, k->u.s.s, k->u.s.n, ev(R, e->kwv.v[i], F))) {
                jinja_release(k);
                jinja_release(r);
                r = NULL;
                break;
            }
            jinja_release(k);
        }
        break;
    default:
        rerr(R, e->line, CK_EUNSUPPORTED, "line %d: unsupported expression", e->line);
    }
    jinja_release(a);
    jinja_release(b);
    if (R->failed && r) { jinja_release(r); r = NULL; }
    return r;
}

static jinja_value *ev(rctx *R, const jnode *e, frame *F) {
    if (tick(R, e->line)) return NULL;
    if (++R->depth > R->max_depth) {
        R->depth--;
        return rerr(R, e->line, CK_ERANGE, "line %d: evaluation nested deeper than %d", e->line, R->max_depth);
    }
    jinja_value *r = ev_(R, e, F);
    R->depth--;
    return r;
}

/* ---- statements */

static int bind(rctx *R, int line, frame *F, const slist *names, jinja_value *v) {
    if (names->n == 1) return rset(R, line, F->vars, names->v[0], names->len[0], v);
    if (v->type != JV_LIST || v->u.l.n != (size_t)names->n) {
        rerr(R, line, CK_EFORMAT, "line %d: cannot unpack %s into %d names", line, type_name(v), names->n);
        jinja_release(v);
        return R->failed;
    }
    for (int i = 0; i < names->n; i++)
        if (rset(R, line, F->vars, names->v[i], names->len[i], jv_ref(v->u.l.v[i]))) { jinja_release(v); return R->failed; }
    jinja_release(v);
    return 0;
}

static int out_value(rctx *R, int line, sbuf *out, const jinja_value *v) {
    int rc = py_str(R, out, v, 0);
    return rc ? sb_fail(R, line, rc) : 0;
}

/* One iteration's `loop`: index, index0, revindex, revindex0, first, last,
 * length, previtem, nextitem, depth, depth0. */
static jinja_value *loop_var(rctx *R, int line, const jinja_value *items, size_t i) {
    size_t n = items->u.l.n;
    jinja_value *L = rnew(R, line, JV_DICT);
    if (!L) return NULL;
    if (rset(R, line, L, "index0", 6, mk_int(R, line, (long long)i)) ||
        rset(R, line, L, "index", 5, mk_int(R, line, (long long)i + 1)) ||
        rset(R, line, L, "revindex", 8, mk_int(R, line, (long long)(n - i))) ||
        rset(R, line, L, "revindex0", 9, mk_int(R, line, (long long)(n - i - 1))) ||
        rset(R, line, L, "first", 5, mk_bool(R, line, i == 0)) ||
        rset(R, line, L, "last", 4, mk_bool(R, line, i + 1 == n)) ||
        rset(R, line, L, "length", 6, mk_int(R, line, (long long)n)) ||
        rset(R, line, L, "depth", 5, mk_int(R, line, 1)) || rset(R, line, L, "depth0", 6, mk_int(R, line, 0)) ||
        (i > 0 && rset(R, line, L, "previtem", 8, jv_ref(items->u.l.v[i - 1]))) ||
        (i + 1 < n && rset(R, line, L, "nextitem", 8, jv_ref(items->u.l.v[i + 1])))) {
        jinja_release(L);
        return NULL;
    }
    return L;
}

static int exec_for(rctx *R, const jnode *s, frame *F, sbuf *out) {
    jinja_value *src = ev(R, s->a, F);
    if (!src) return FL_ERR;
    jinja_value *items = iter_list(R, s->line, src);
    jinja_release(src);
    if (!items) return FL_ERR;
    if (s->b) { /* `for x in y if c`: the loop sees only the items that pass */
        jinja_value *kept = rnew(R, s->line, JV_LIST);
        for (size_t i = 0; kept && i < items->u.l.n; i++) {
            frame f = {F, rnew(R, s->line, JV_DICT)};
            jinja_value *c = NULL;
            if (f.vars && bind(R, s->line, &f, &s->names, jv_ref(items->u.l.v[i])) == 0) c = ev(R, s->b, &f);
            int keep = c && truthy(c);
            jinja_release(c);
            jinja_release(f.vars);
            if (R->failed || (keep && rpush(R, s->line, kept, jv_ref(items->u.l.v[i])))) { jinja_release(kept); kept = NULL; }
        }
        jinja_release(items);
        if (!kept) return FL_ERR;
        items = kept;
    }
    int rc = FL_OK;
    if (items->u.l.n == 0) rc = exec_body(R, &s->els, F, out);
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (++R->iters > R->lim->max_loop_iters) {
            rerr(R, s->line, CK_ERANGE, "line %d: more than %llu loop iterations", s->line,
                 (unsigned long long)R->lim->max_loop_iters);
            rc = FL_ERR;
            break;
        }
        /* a new scope each iteration: a `set` inside does not outlive it */
        frame f = {F, rnew(R, s->line, JV_DICT)};
        if (!f.vars || rset(R, s->line, f.vars, "loop", 4, loop_var(R, s->line, items, i)) ||
            bind(R, s->line, &f, &s->names, jv_ref(items->u.l.v[i]))) {
            jinja_release(f.vars);
            rc = FL_ERR;
            break;
        }
        rc = exec_body(R, &s->body, &f, out);
        jinja_release(f.vars);
        if (rc == FL_CONTINUE) rc = FL_OK;
        if (rc == FL_BREAK) { rc = FL_OK; break; }
        if (rc < 0) break;
    }
    jinja_release(items);
    return rc;
}

static int exec_stmt(rctx *R, const jnode *s, frame *F, sbuf *out) {
    if (tick(R, s->line)) return FL_ERR;
    jinja_value *v;
    switch (s->kind) {
    case S_TEXT: {
        int rc = sb_add(out, s->lit->u.s.s, s->lit->u.s.n);
        return rc ? (sb_fail(R, s->line, rc), FL_ERR) : FL_OK;
    }
    case S_OUT:
        if (!(v = ev(R, s->a, F))) return FL_ERR;
        {
            int rc = out_value(R, s->line, out, v);
            jinja_release(v);
            return rc ? FL_ERR : FL_OK;
        }
    case S_IF:
        if (!(v = ev(R, s->a, F))) return FL_ERR;
        {
            int t = truthy(v);
            jinja_release(v);
            return exec_body(R, t ? &s->body : &s->els, F, out);
        }
    case S_FOR: return exec_for(R, s, F, out);
    case S_SET:
        if (!(v = ev(R, s->a, F))) return FL_ERR;
        return bind(R, s->line, F, &s->names, v) ? FL_ERR : FL_OK;
    case S_SETNS: {
        jinja_value *ns = lookup(R, s->line, F, s->name, s->nlen);
        if (!ns) return FL_ERR;
        if (ns->type != JV_NS) {
            rerr(R, s->line, CK_EFORMAT, "line %d: cannot assign attribute on non-namespace object '%.*s'", s->line,
                 (int)s->nlen, s->name);
            jinja_release(ns);
            return FL_ERR;
        }
        v = ev(R, s->a, F);
        int rc = v ? rset(R, s->line, ns, s->name2, s->nlen2, v) : FL_ERR;
        jinja_release(ns);
        return rc ? FL_ERR : FL_OK;
    }
    case S_SETBLOCK: {
        sbuf b = sb_for(R);
        int rc = exec_body(R, &s->body, F, &b);
        if (rc < 0) { sb_free(&b); return FL_ERR; }
        v = sb_take(R, s->line, &b);
        return v && rset(R, s->line, F->vars, s->name, s->nlen, v) == 0 ? rc : FL_ERR;
    }
    case S_MACRO:
        if (!(v = rnew(R, s->line, JV_MACRO))) return FL_ERR;
        v->u.m = s;
        return rset(R, s->line, F->vars, s->name, s->nlen, v) ? FL_ERR : FL_OK;
    case S_BREAK: return FL_BREAK;
    case S_CONTINUE: return FL_CONTINUE;
    case S_BODY: return exec_body(R, &s->body, F, out);
    }
    rerr(R, s->line, CK_EUNSUPPORTED, "line %d: unsupported statement", s->line);
    return FL_ERR;
}

static int exec_body(rctx *R, const nlist *body, frame *F, sbuf *out) {
    if (++R->depth > R->max_depth) {
        R->depth--;
        rerr(R, body->n ? body->v[0]->line : 0, CK_ERANGE, "render nested deeper than %d (recursive macro?)",
             R->max_depth);
        return FL_ERR;
    }
    int rc = FL_OK;
    for (int i = 0; i < body->n && rc == FL_OK; i++) rc = exec_stmt(R, body->v[i], F, out);
    R->depth--;
    return R->failed ? FL_ERR : rc;
}

int jinja_render(const jinja_template *t, jinja_value *vars, const struct tm *now, char **out, size_t *out_len,
                 jinja_error *err) {
    return jinja_render_spans(t, vars, now, out, out_len, NULL, NULL, err);
}

int jinja_render_spans(const jinja_template *t, jinja_value *vars, const struct tm *now, char **out,
                       size_t *out_len, jinja_span **spans, size_t *n_spans, jinja_error *err) {
    clear_err(err);
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    rctx R = {0};
    R.err = err;
    if (!t || !out || (vars && vars->type != JV_DICT)) {
        rerr(&R, 0, CK_EINVAL, "%s: invalid argument", __func__);
        if (err) err->kind = K_ERROR;
        return CK_EINVAL;
    }
    R.t = t;
    R.lim = &t->lim;
    /* expressions and bodies nest about four deep per parsed level, and a
     * chain `a + b + c ...` parses flat but evaluates nested */
    R.max_depth = t->lim.max_depth * 4;
    if (now) R.now = *now;
    else { time_t tt = time(NULL); localtime_r(&tt, &R.now); }

    jinja_value *globals = jv_new(JV_DICT), *top = jv_new(JV_DICT), *empty = NULL;
    static const char *const fnames[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
    static const int fids[] = {FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME};
    int rc = globals && top ? 0 : CK_ENOMEM;
    for (int i = 0; rc == 0 && i < 5; i++) {
        jinja_value *f = jv_new(JV_FUNC);
        if (f) f->u.fn = fids[i];
        rc = dict_set_cstr(globals, fnames[i], f);
    }
    if (!vars && rc == 0) { vars = empty = jv_new(JV_DICT); if (!vars) rc = CK_ENOMEM; }
    sbuf b = sb_for(&R);
    if (rc == 0) {
        frame fg = {NULL, globals}, fu = {&fg, vars}, ft = {&fu, top};
        R.top = &ft;
        if (exec_body(&R, &t->root->body, &ft, &b) < 0) rc = R.failed ? R.failed : CK_EFORMAT;
        else if (R.failed) rc = R.failed;
    } else {
        rerr(&R, 0, CK_ENOMEM, "%s: out of memory", __func__);
    }
    /* namespaces may hold themselves: empty them so every value is freed */
    for (size_t i = 0; i < R.n_ns; i++) {
        jinja_value *ns = R.nss[i];
        for (size_t k = 0; k < ns->u.d.n; k++) { free(ns->u.d.k[k]); jinja_release(ns->u.d.v[k]); }
        ns->u.d.n = 0;
        jinja_release(ns);
    }
    free(R.nss);
    jinja_release(top);
    jinja_release(globals);
    jinja_release(empty);
    if (rc) { sb_free(&b); return rc; }
    jinja_span *sp = NULL;
    int nomem_ = (spans && b.nsp && !(sp = malloc(b.nsp * sizeof *sp))) || (!b.p && !(b.p = calloc(1, 1)));
    if (nomem_) {
        free(sp);
        sb_free(&b);
        rerr(&R, 0, CK_ENOMEM, "%s: out of memory", __func__);
        return CK_ENOMEM;
    }
    for (size_t i = 0; sp && i < b.nsp; i++) {
        sp[i].start = b.sp[2 * i];
        sp[i].len = b.sp[2 * i + 1] - b.sp[2 * i];
    }
    if (spans) {
        *spans = sp;
        if (n_spans) *n_spans = sp ? b.nsp : 0;
    }
    free(b.sp);
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}
