/* jinja_rt.c - the evaluator's base: the render context (errors, the
 * allocation bound, making values), truthiness, Python's str() and repr(),
 * HF's tojson and Python's comparisons (see jinja_int.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

static const char *kind_of(int code) {
    switch (code) {
    case CK_EUNSUPPORTED: return jinja__k_unsup;
    case CK_EINVAL: return jinja__k_raise;
    case CK_ENOMEM: return jinja__k_nomem;
    case CK_ERANGE:
    case CK_ETOOLONG: return jinja__k_limit;
    default: return jinja__k_error;
    }
}

void *jinja__rerr(rctx *R, int line, int code, const char *fmt, ...) {
    if (R->failed) return NULL;
    va_list ap;
    va_start(ap, fmt);
    jinja__set_err(R->err, code, kind_of(code), line, fmt, ap);
    va_end(ap);
    R->failed = code;
    return NULL;
}

/* Count n bytes of values made against max_alloc: 0, or R->failed. */
int jinja__charge(rctx *R, int line, size_t n) {
    if (R->failed) return R->failed;
    if (n > R->lim->max_alloc - R->alloc || R->alloc > R->lim->max_alloc) {
        R->alloc = R->lim->max_alloc;
        jinja__rerr(R, line, CK_ERANGE, "line %d: the render made more than %zu bytes of values", line,
                    R->lim->max_alloc);
        return R->failed;
    }
    R->alloc += n;
    return 0;
}

/* One evaluation step against max_steps: 0, or R->failed. */
int jinja__tick(rctx *R, int line) {
    if (R->failed) return R->failed;
    R->line = line;
    if (++R->steps > R->lim->max_steps) {
        jinja__rerr(R, line, CK_ERANGE, "line %d: more than %llu evaluation steps", line,
                    (unsigned long long)R->lim->max_steps);
        return R->failed;
    }
    return 0;
}

int jinja__sb_fail(rctx *R, int line, int rc) {
    if (rc == CK_ETOOLONG)
        jinja__rerr(R, line, CK_ETOOLONG, "line %d: text longer than the limit of %zu bytes", line,
                    R->lim->max_output);
    else if (rc)
        jinja__rerr(R, line, CK_ENOMEM, "line %d: out of memory", line);
    return R->failed;
}

sbuf jinja__sb_for(rctx *R) {
    sbuf b = {0};
    b.max = R->lim->max_output;
    return b;
}

jinja_value *jinja__nomem(rctx *R, int line) {
    return jinja__rerr(R, line, CK_ENOMEM, "line %d: out of memory", line);
}

jinja_value *jinja__rstr(rctx *R, int line, const char *s, size_t n) {
    if (n > R->lim->max_output) {
        jinja__sb_fail(R, line, CK_ETOOLONG);
        return NULL;
    }
    if (jinja__charge(R, line, n + sizeof(jinja_value))) return NULL;
    jinja_value *v = jinja__jv_str_plain(s, n);
    return v ? v : jinja__nomem(R, line);
}

/* The buffer's bytes and provenance become the string (b is emptied, also
 * on failure). */
jinja_value *jinja__sb_take(rctx *R, int line, sbuf *b) {
    if (jinja__charge(R, line, b->n + 2 * b->nsp * sizeof(size_t) + sizeof(jinja_value))) {
        jinja__sb_free(b);
        return NULL;
    }
    jinja_value *v = jinja__jv_new(JV_STR);
    if (!v) {
        jinja__sb_free(b);
        return jinja__nomem(R, line);
    }
    if (!b->p) {
        b->p = malloc(1);
        if (!b->p) {
            free(v);
            jinja__sb_free(b);
            return jinja__nomem(R, line);
        }
        b->p[0] = 0;
    }
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
jinja_value *jinja__rsub(rctx *R, int line, const jinja_value *v, size_t off, size_t len) {
    if (!v->u.s.nsp) return jinja__rstr(R, line, v->u.s.s + off, len);
    sbuf b = jinja__sb_for(R);
    int rc = jinja__sb_addv(&b, v, off, len);
    if (rc) {
        jinja__sb_free(&b);
        jinja__sb_fail(R, line, rc);
        return NULL;
    }
    return jinja__sb_take(R, line, &b);
}

/* Key i of dict d: an int, or a string that is data when d's keys are. */
jinja_value *jinja__rkey(rctx *R, int line, const jinja_value *d, size_t i) {
    if (d->u.d.ki[i]) return jinja__mk_int(R, line, strtoll(d->u.d.k[i], NULL, 10));
    jinja_value *k = jinja__rstr(R, line, d->u.d.k[i], d->u.d.kn[i]);
    if (k && d->dkeys && k->u.s.n) {
        k->u.s.sp = malloc(2 * sizeof *k->u.s.sp);
        if (!k->u.s.sp) {
            jinja_release(k);
            return jinja__nomem(R, line);
        }
        k->u.s.sp[0] = 0;
        k->u.s.sp[1] = k->u.s.n;
        k->u.s.nsp = 1;
    }
    return k;
}

/* 1 when v holds any data: a string with data bytes, a dict with data keys,
 * or a list or dict holding such a value (depth-bounded: deeper counts as data). */
int jinja__jv_tainted(const jinja_value *v, int depth) {
    if (depth > 256) return 1;
    switch (v->type) {
    case JV_STR: return v->u.s.nsp > 0;
    case JV_LIST:
        for (size_t i = 0; i < v->u.l.n; i++)
            if (jinja__jv_tainted(v->u.l.v[i], depth + 1)) return 1;
        return 0;
    case JV_DICT:
    case JV_NS:
        if (v->dkeys) return 1;
        for (size_t i = 0; i < v->u.d.n; i++)
            if (jinja__jv_tainted(v->u.d.v[i], depth + 1)) return 1;
        return 0;
    default: return 0;
    }
}

jinja_value *jinja__rnew(rctx *R, int line, int type) {
    if (jinja__charge(R, line, sizeof(jinja_value))) return NULL;
    jinja_value *v = jinja__jv_new(type);
    return v ? v : jinja__nomem(R, line);
}
jinja_value *jinja__mk_int(rctx *R, int line, long long i) {
    jinja_value *v = jinja__rnew(R, line, JV_INT);
    if (v) v->u.i = i;
    return v;
}
jinja_value *jinja__mk_bool(rctx *R, int line, int b) {
    jinja_value *v = jinja__rnew(R, line, JV_BOOL);
    if (v) v->u.b = !!b;
    return v;
}
jinja_value *jinja__mk_float(rctx *R, int line, double f) {
    jinja_value *v = jinja__rnew(R, line, JV_FLOAT);
    if (v) v->u.f = f;
    return v;
}
jinja_value *jinja__rundef(rctx *R, int line, const char *name, size_t n) {
    jinja_value *v = jinja__rnew(R, line, JV_UNDEF);
    if (v && name && n) {
        if (n > 64) n = 64;
        v->u.s.s = malloc(n + 1);
        if (!v->u.s.s) {
            jinja_release(v);
            return jinja__nomem(R, line);
        }
        memcpy(v->u.s.s, name, n);
        v->u.s.s[n] = 0;
        v->u.s.n = n;
    }
    return v;
}
/* Takes item (also on failure). */
int jinja__rpush(rctx *R, int line, jinja_value *list, jinja_value *item) {
    if (!item) return R->failed ? R->failed : CK_ENOMEM;
    if (jinja__charge(R, line, 2 * sizeof(void *))) {
        jinja_release(item);
        return R->failed;
    }
    if (jinja_list_append(list, item)) {
        jinja__nomem(R, line);
        return R->failed;
    }
    return 0;
}
int jinja__rset(rctx *R, int line, jinja_value *d, const char *k, size_t kn, jinja_value *v) {
    return jinja__rset_k(R, line, d, k, kn, 0, v);
}
/* d[k] = v for a string key (ki 0) or an int's digits (ki 1). Takes v. */
int jinja__rset_k(rctx *R, int line, jinja_value *d, const char *k, size_t kn, int ki, jinja_value *v) {
    if (!v) return R->failed ? R->failed : CK_ENOMEM;
    if (jinja__charge(R, line, kn + 5 * sizeof(void *))) {
        jinja_release(v);
        return R->failed;
    }
    if (jinja__dict_put(d, k, kn, ki, v)) {
        jinja__nomem(R, line);
        return R->failed;
    }
    return 0;
}

const char *jinja__type_name(const jinja_value *v) {
    static const char *const names[] = {"undefined", "NoneType", "bool",      "int",      "float", "str",
                                        "list",      "dict",     "Namespace", "function", "macro"};
    static const char *const kinds[] = {"list",        "generator",  "dict_keys",
                                        "dict_values", "dict_items", "range"};
    if (v->type == JV_LIST && v->u.l.tuple) return "tuple";
    if (v->type == JV_LIST) return kinds[v->u.l.kind];
    return names[v->type];
}

const char *jinja__undef_name(const jinja_value *v) { return v->u.s.s ? v->u.s.s : "value"; }

int jinja__truthy(const jinja_value *v) {
    switch (v->type) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.s.n > 0;
    case JV_LIST: return v->u.l.n > 0 || v->u.l.kind == LK_GEN; /* a generator is always true */
    case JV_DICT: return v->u.d.n > 0;
    default: return 1;
    }
}

int jinja__is_num(const jinja_value *v) {
    return v->type == JV_INT || v->type == JV_BOOL || v->type == JV_FLOAT;
}
double jinja__num_f(const jinja_value *v) {
    return v->type == JV_FLOAT ? v->u.f : v->type == JV_INT ? (double)v->u.i : (double)v->u.b;
}
long long jinja__num_i(const jinja_value *v) { return v->type == JV_INT ? v->u.i : v->u.b; }

/* ---- str() and repr(), Python's */

static int repr_str(sbuf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = jinja__sb_ch(b, q);
    size_t i = 0, len;
    while (rc == 0 && i < n) {
        unsigned c = jinja__utf8_dec((const unsigned char *)s, i, n, &len);
        char e[16];
        if (c == (unsigned)q || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            rc = jinja__sb_add(b, e, 2);
        } else if (c == '\n')
            rc = jinja__sb_add(b, "\\n", 2);
        else if (c == '\r')
            rc = jinja__sb_add(b, "\\r", 2);
        else if (c == '\t')
            rc = jinja__sb_add(b, "\\t", 2);
        else if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) {
            snprintf(e, sizeof e, "\\x%02x", c);
            rc = jinja__sb_cstr(b, e);
        } else if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
                   c == 0x205f || (c >= 0x2060 && c <= 0x2064) || c == 0x3000 || c == 0xfeff) {
            snprintf(e, sizeof e, "\\u%04x", c);
            rc = jinja__sb_cstr(b, e);
        } else
            rc = jinja__sb_add(b, s + i, len);
        i += len;
    }
    return rc ? rc : jinja__sb_ch(b, q);
}

/* str(v) appended to b. Returns an sbuf code (0, CK_ETOOLONG, CK_ENOMEM) or
 * R->failed. */
int jinja__py_str(rctx *R, sbuf *b, const jinja_value *v, int depth) {
    char tmp[48];
    switch (v->type) {
    case JV_UNDEF: return 0;
    case JV_NONE: return jinja__sb_cstr(b, "None");
    case JV_BOOL: return jinja__sb_cstr(b, v->u.b ? "True" : "False");
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", v->u.i); return jinja__sb_cstr(b, tmp);
    case JV_FLOAT: jinja__py_float(v->u.f, tmp, sizeof tmp); return jinja__sb_cstr(b, tmp);
    case JV_STR: return jinja__sb_addv(b, v, 0, v->u.s.n);
    case JV_FUNC:
    case JV_MACRO: return jinja__sb_cstr(b, "<function>");
    default: return jinja__py_repr(R, b, v, depth);
    }
}

/* repr(v) appended to b (a string quoted and escaped), as jinja__py_str. */
int jinja__py_repr(rctx *R, sbuf *b, const jinja_value *v, int depth) {
    if (depth > R->max_depth) {
        jinja__rerr(R, 0, CK_ERANGE, "values nested deeper than %d", R->max_depth);
        return R->failed;
    }
    int rc = 0;
    size_t at = b->n;
    switch (v->type) {
    case JV_UNDEF: return jinja__sb_cstr(b, "Undefined");
    case JV_STR: /* escapes and quotes: the whole repr of data is data */
        rc = repr_str(b, v->u.s.s, v->u.s.n);
        return rc ? rc : jinja__sb_taint_from(b, at, v->u.s.nsp > 0);
    case JV_LIST: {
        char tmp[80];
        if (v->u.l.kind == LK_GEN) { /* Python prints its address */
            jinja__rerr(R, R->line, CK_EUNSUPPORTED,
                        "line %d: printing a %s (an iterator) is not supported: add |list", R->line,
                        jinja__type_name(v));
            return R->failed;
        }
        if (v->u.l.kind == LK_RANGE) {
            if (v->u.l.rg[2] == 1)
                snprintf(tmp, sizeof tmp, "range(%lld, %lld)", v->u.l.rg[0], v->u.l.rg[1]);
            else
                snprintf(tmp, sizeof tmp, "range(%lld, %lld, %lld)", v->u.l.rg[0], v->u.l.rg[1],
                         v->u.l.rg[2]);
            return jinja__sb_cstr(b, tmp);
        }
        if (v->u.l.kind != LK_LIST) { /* dict_keys([...]) */
            rc = jinja__sb_cstr(b, jinja__type_name(v));
            if (rc == 0) rc = jinja__sb_ch(b, '(');
        }
        if (rc == 0) rc = jinja__sb_ch(b, v->u.l.tuple ? '(' : '[');
        for (size_t i = 0; rc == 0 && i < v->u.l.n; i++) {
            if (i) rc = jinja__sb_add(b, ", ", 2);
            if (rc == 0) rc = jinja__py_repr(R, b, v->u.l.v[i], depth + 1);
        }
        if (rc == 0 && v->u.l.tuple && v->u.l.n == 1) rc = jinja__sb_ch(b, ',');
        if (rc == 0) rc = jinja__sb_ch(b, v->u.l.tuple ? ')' : ']');
        return rc || v->u.l.kind == LK_LIST ? rc : jinja__sb_ch(b, ')');
    }
    case JV_DICT:
    case JV_NS:
        rc = v->type == JV_NS ? jinja__sb_cstr(b, "<Namespace {") : jinja__sb_ch(b, '{');
        for (size_t i = 0; rc == 0 && i < v->u.d.n; i++) {
            if (i) rc = jinja__sb_add(b, ", ", 2);
            at = b->n;
            if (rc == 0)
                rc = v->u.d.ki[i] ? jinja__sb_add(b, v->u.d.k[i], v->u.d.kn[i])
                                  : repr_str(b, v->u.d.k[i], v->u.d.kn[i]);
            if (rc == 0 && !v->u.d.ki[i]) rc = jinja__sb_taint_from(b, at, v->dkeys);
            if (rc == 0) rc = jinja__sb_add(b, ": ", 2);
            if (rc == 0) rc = jinja__py_repr(R, b, v->u.d.v[i], depth + 1);
        }
        return rc ? rc : jinja__sb_cstr(b, v->type == JV_NS ? "}>" : "}");
    default: return jinja__py_str(R, b, v, depth);
    }
}

/* str(v) as a new string value (v itself when it is one). */
jinja_value *jinja__to_strv(rctx *R, int line, jinja_value *v) {
    if (v->type == JV_STR) return jinja__jv_ref(v);
    sbuf b = jinja__sb_for(R);
    int rc = jinja__py_str(R, &b, v, 0);
    if (rc) {
        jinja__sb_free(&b);
        jinja__sb_fail(R, line, rc);
        return NULL;
    }
    return jinja__sb_take(R, line, &b);
}

/* ---- HF's tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) */

static int json_str(sbuf *b, const char *s, size_t n, int ensure_ascii) {
    int rc = jinja__sb_ch(b, '"');
    size_t i = 0, len;
    while (rc == 0 && i < n) {
        unsigned c = jinja__utf8_dec((const unsigned char *)s, i, n, &len);
        char e[16];
        switch (c) {
        case '"': rc = jinja__sb_add(b, "\\\"", 2); break;
        case '\\': rc = jinja__sb_add(b, "\\\\", 2); break;
        case '\n': rc = jinja__sb_add(b, "\\n", 2); break;
        case '\r': rc = jinja__sb_add(b, "\\r", 2); break;
        case '\t': rc = jinja__sb_add(b, "\\t", 2); break;
        case '\b': rc = jinja__sb_add(b, "\\b", 2); break;
        case '\f': rc = jinja__sb_add(b, "\\f", 2); break;
        default:
            if (c < 0x20 || (ensure_ascii && c > 0x7f && c < 0x10000)) {
                snprintf(e, sizeof e, "\\u%04x", c);
                rc = jinja__sb_cstr(b, e);
            } else if (ensure_ascii && c >= 0x10000) {
                unsigned v = c - 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                rc = jinja__sb_cstr(b, e);
            } else {
                rc = jinja__sb_add(b, s + i, len);
            }
        }
        i += len;
    }
    return rc ? rc : jinja__sb_ch(b, '"');
}

static int json_nl(sbuf *b, const jopts *o, int level) {
    int rc = jinja__sb_ch(b, '\n');
    for (long k = 0; rc == 0 && k < (long)o->indent * level; k++) rc = jinja__sb_ch(b, ' ');
    return rc;
}

int jinja__json_dump(rctx *R, int line, sbuf *b, const jinja_value *v, const jopts *o, int level) {
    char tmp[48];
    int rc = 0;
    if (level > R->max_depth) {
        jinja__rerr(R, line, CK_ERANGE, "line %d: tojson: values nested deeper than %d", line, R->max_depth);
        return R->failed;
    }
    switch (v->type) {
    case JV_NONE: return jinja__sb_cstr(b, "null");
    case JV_BOOL: return jinja__sb_cstr(b, v->u.b ? "true" : "false");
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", v->u.i); return jinja__sb_cstr(b, tmp);
    case JV_FLOAT:
        if (isnan(v->u.f)) return jinja__sb_cstr(b, "NaN");
        if (isinf(v->u.f)) return jinja__sb_cstr(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        jinja__py_float(v->u.f, tmp, sizeof tmp);
        return jinja__sb_cstr(b, tmp);
    case JV_STR: { /* escapes and quotes: the whole JSON string of data is data */
        size_t at = b->n;
        rc = json_str(b, v->u.s.s, v->u.s.n, o->ensure_ascii);
        return rc ? rc : jinja__sb_taint_from(b, at, v->u.s.nsp > 0);
    }
    case JV_LIST:
        if (v->u.l.kind != LK_LIST) {
            jinja__rerr(R, line, CK_EFORMAT, "line %d: tojson: object of type %s is not JSON serializable",
                        line, jinja__type_name(v));
            return R->failed;
        }
        if (!v->u.l.n) return jinja__sb_add(b, "[]", 2);
        rc = jinja__sb_ch(b, '[');
        for (size_t i = 0; rc == 0 && i < v->u.l.n; i++) {
            if (i) rc = jinja__sb_add(b, o->item_sep, o->item_sep_n);
            if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level + 1);
            if (rc == 0) rc = jinja__json_dump(R, line, b, v->u.l.v[i], o, level + 1);
        }
        if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level);
        return rc ? rc : jinja__sb_ch(b, ']');
    case JV_DICT: {
        if (!v->u.d.n) return jinja__sb_add(b, "{}", 2);
        size_t n = v->u.d.n, *ord = malloc(n * sizeof *ord);
        if (!ord) return CK_ENOMEM;
        for (size_t i = 0; i < n; i++) ord[i] = i;
        /* sort_keys: insertion sort, strings on their bytes (UTF-8 order is
         * code point order), int keys as numbers; Python cannot order the two */
        for (size_t i = 1; o->sort_keys && i < n; i++)
            for (size_t j = i; j > 0; j--) {
                size_t a = ord[j - 1], c = ord[j], ka = v->u.d.kn[a], kc = v->u.d.kn[c];
                if (v->u.d.ki[a] != v->u.d.ki[c]) {
                    free(ord);
                    jinja__rerr(R, line, CK_EFORMAT,
                                "line %d: tojson: '<' not supported between instances of 'int' and 'str'",
                                line);
                    return R->failed;
                }
                int cmp;
                if (v->u.d.ki[a]) {
                    long long x = strtoll(v->u.d.k[a], NULL, 10), y = strtoll(v->u.d.k[c], NULL, 10);
                    cmp = x < y ? -1 : x > y;
                } else {
                    cmp = memcmp(v->u.d.k[a], v->u.d.k[c], ka < kc ? ka : kc);
                    if (cmp == 0) cmp = ka < kc ? -1 : ka > kc;
                }
                if (cmp <= 0) break;
                ord[j - 1] = c;
                ord[j] = a;
            }
        rc = jinja__sb_ch(b, '{');
        for (size_t i = 0; rc == 0 && i < n; i++) {
            size_t k = ord[i];
            if (i) rc = jinja__sb_add(b, o->item_sep, o->item_sep_n);
            if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level + 1);
            size_t at = b->n;
            if (rc == 0) rc = json_str(b, v->u.d.k[k], v->u.d.kn[k], o->ensure_ascii); /* json.dumps: "512" */
            if (rc == 0) rc = jinja__sb_taint_from(b, at, v->dkeys && !v->u.d.ki[k]);
            if (rc == 0) rc = jinja__sb_add(b, o->key_sep, o->key_sep_n);
            if (rc == 0) rc = jinja__json_dump(R, line, b, v->u.d.v[k], o, level + 1);
        }
        free(ord);
        if (rc == 0 && o->indent >= 0) rc = json_nl(b, o, level);
        return rc ? rc : jinja__sb_ch(b, '}');
    }
    default:
        jinja__rerr(R, line, CK_EFORMAT, "line %d: tojson: object of type %s is not JSON serializable", line,
                    jinja__type_name(v));
        return R->failed;
    }
}

/* ---- comparison */

/* 1 equal, 0 not, -1 error (too deep). Python's ==: numbers across int,
 * float and bool; lists and dicts by content; an undefined equals only an
 * undefined. */
int jinja__py_eq(rctx *R, const jinja_value *a, const jinja_value *b, int depth) {
    if (depth > R->max_depth) {
        jinja__rerr(R, 0, CK_ERANGE, "values nested deeper than %d", R->max_depth);
        return -1;
    }
    if (a == b) return 1;
    if (jinja__is_num(a) && jinja__is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT) return jinja__num_i(a) == jinja__num_i(b);
        return jinja__num_f(a) == jinja__num_f(b);
    }
    if (a->type != b->type) return 0;
    switch (a->type) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a->u.s.n == b->u.s.n && memcmp(a->u.s.s, b->u.s.s, a->u.s.n) == 0;
    case JV_LIST:
        if (a->u.l.kind == LK_KEYS || a->u.l.kind == LK_ITEMS || b->u.l.kind == LK_KEYS ||
            b->u.l.kind == LK_ITEMS) {
            jinja__rerr(R, 0, CK_EUNSUPPORTED, "comparing dict views (sets in Python) is not supported");
            return -1;
        }
        /* generators and values views are equal only to themselves */
        if (a->u.l.kind != b->u.l.kind || a->u.l.kind == LK_GEN || a->u.l.kind == LK_VALUES) return 0;
        if (a->u.l.n != b->u.l.n || a->u.l.tuple != b->u.l.tuple) return 0;
        for (size_t i = 0; i < a->u.l.n; i++) {
            int e = jinja__py_eq(R, a->u.l.v[i], b->u.l.v[i], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    case JV_DICT:
        if (a->u.d.n != b->u.d.n) return 0;
        for (size_t i = 0; i < a->u.d.n; i++) {
            long j = jinja__dict_find_k(b, a->u.d.k[i], a->u.d.kn[i], a->u.d.ki[i]);
            if (j < 0) return 0;
            int e = jinja__py_eq(R, a->u.d.v[i], b->u.d.v[j], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    case JV_FUNC: return a->u.fn == b->u.fn;
    case JV_MACRO: return a->u.m == b->u.m;
    default: return 0;
    }
}

/* Python's comparison of a and b for the ordering op: numbers across
 * int, float and bool; strings by code point; lists (and tuples) of the
 * same kind lexicographically: the first items that differ (by ==) decide,
 * else the lengths. -1 on error (anything else: Python's TypeError). */
static int py_order(rctx *R, int line, int op, const jinja_value *a, const jinja_value *b, int depth) {
    int c;
    if (depth > R->max_depth) {
        jinja__rerr(R, line, CK_ERANGE, "line %d: values nested deeper than %d", line, R->max_depth);
        return -1;
    }
    if (a->type == JV_LIST && b->type == JV_LIST && a->u.l.tuple == b->u.l.tuple && a->u.l.kind == LK_LIST &&
        b->u.l.kind == LK_LIST) {
        size_t n = a->u.l.n < b->u.l.n ? a->u.l.n : b->u.l.n;
        for (size_t i = 0; i < n; i++) {
            int e = jinja__py_eq(R, a->u.l.v[i], b->u.l.v[i], depth + 1);
            if (e < 0) return -1;
            if (!e) return py_order(R, line, op, a->u.l.v[i], b->u.l.v[i], depth + 1);
        }
        c = a->u.l.n < b->u.l.n ? -1 : a->u.l.n > b->u.l.n;
    } else if (jinja__is_num(a) && jinja__is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT) {
            long long x = jinja__num_i(a), y = jinja__num_i(b);
            c = x < y ? -1 : x > y;
        } else {
            double x = jinja__num_f(a), y = jinja__num_f(b);
            if (isnan(x) || isnan(y)) return 0;
            c = x < y ? -1 : x > y;
        }
    } else if (a->type == JV_STR && b->type == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        c = memcmp(a->u.s.s, b->u.s.s, n);
        if (c == 0) c = a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
    } else {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: '<' not supported between instances of '%s' and '%s'",
                    line, jinja__type_name(a), jinja__type_name(b));
        return -1;
    }
    switch (op) {
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    default: return c >= 0;
    }
}

int jinja__py_order(rctx *R, int line, int op, const jinja_value *a, const jinja_value *b) {
    return py_order(R, line, op, a, b, 0);
}

/* `needle in hay`: -1 error, else 0/1. */
int jinja__py_in(rctx *R, int line, const jinja_value *needle, jinja_value *hay) {
    switch (hay->type) {
    case JV_STR: {
        if (needle->type != JV_STR) {
            jinja__rerr(R, line, CK_EFORMAT, "line %d: 'in <string>' requires string as left operand, not %s",
                        line, jinja__type_name(needle));
            return -1;
        }
        size_t n = needle->u.s.n, h = hay->u.s.n;
        if (!n) return 1;
        for (size_t i = 0; i + n <= h; i++)
            if (memcmp(hay->u.s.s + i, needle->u.s.s, n) == 0) return 1;
        return 0;
    }
    case JV_LIST: {
        /* a generator is consumed up to what is found */
        if (hay->u.l.kind == LK_GEN && jinja__gen_take(R, line, hay)) return -1;
        size_t n = hay->u.l.kind == LK_GEN && hay->u.l.used == 1 ? 0 : hay->u.l.n;
        for (size_t i = 0; i < n; i++) {
            int e = jinja__py_eq(R, needle, hay->u.l.v[i], 0);
            if (e && hay->u.l.kind == LK_GEN) hay->u.l.used = i + 1 < n ? 2 : 1;
            if (e) return e;
        }
        if (hay->u.l.kind == LK_GEN) hay->u.l.used = 1;
        return 0;
    }
    case JV_DICT:
    case JV_NS: return jinja__dict_find_v(hay, needle) >= 0;
    case JV_UNDEF: return 0;
    default:
        jinja__rerr(R, line, CK_EFORMAT, "line %d: argument of type '%s' is not iterable", line,
                    jinja__type_name(hay));
        return -1;
    }
}
