/* jinja_filters.c - the evaluator's filters (see jinja_int.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

/* ---- filters */

static jinja_value *len_of(rctx *R, int line, const jinja_value *v) {
    switch (v->type) {
    case JV_STR: return jinja__mk_int(R, line, (long long)jinja__utf8_count(v->u.s.s, v->u.s.n));
    case JV_LIST:
        if (v->u.l.kind == LK_GEN)
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: object of type 'generator' has no len()", line);
        return jinja__mk_int(R, line, (long long)v->u.l.n);
    case JV_DICT:
    case JV_NS: return jinja__mk_int(R, line, (long long)v->u.d.n);
    case JV_UNDEF: return jinja__mk_int(R, line, 0);
    default:
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: object of type '%s' has no len()", line,
                           jinja__type_name(v));
    }
}

/* item's attribute at the path p[0..n) (Jinja's make_attrgetter): dotted
 * parts walk, and a part of digits reads an index. */
jinja_value *jinja__attr_walk(rctx *R, int line, jinja_value *item, const char *p, size_t n) {
    jinja_value *cur = jinja__jv_ref(item);
    const char *end = p + n;
    while (cur) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p), k = 0;
        long long idx = 0;
        while (k < len && k < 18 && p[k] >= '0' && p[k] <= '9') idx = idx * 10 + (p[k++] - '0');
        jinja_value *nx;
        if (len && k == len) {
            jinja_value *key = jinja__mk_int(R, line, idx);
            nx = key ? jinja__get_item(R, line, cur, key) : NULL;
            jinja_release(key);
        } else {
            nx = jinja__get_attr(R, line, cur, p, len);
        }
        jinja_release(cur);
        cur = nx;
        if (!dot) break;
        p = dot + 1;
    }
    return cur;
}

/* item's attribute= for selectattr/map/join/unique/min/max: a path or an index */
jinja_value *jinja__attr_path(rctx *R, int line, jinja_value *item, const jinja_value *path) {
    if (path->type == JV_INT) return jinja__get_item(R, line, item, (jinja_value *)path);
    if (path->type != JV_STR)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: attribute must be a string", line);
    return jinja__attr_walk(R, line, item, path->u.s.s, path->u.s.n);
}

/* select / reject / selectattr / rejectattr */
static jinja_value *filter_select(rctx *R, int line, jinja_value *v, const cargs *A, int by_attr, int keep) {
    jinja_value *items = jinja__truthy(v) ? jinja__iter_list(R, line, v)
                                          : jinja__rnew(R, line, JV_LIST); /* Jinja: `if seq:` */
    if (!items) return NULL;
    jinja_value *out = jinja__rnew(R, line, JV_LIST);
    int first = by_attr ? 1 : 0;
    const jinja_value *tname = jinja__arg(A, first, NULL);
    if (by_attr && !jinja__arg(A, 0, NULL)) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: selectattr needs an attribute", line);
        goto fail;
    }
    if (tname && tname->type != JV_STR) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: test name must be a string", line);
        goto fail;
    }
    if (tname && jinja__table_find(jinja__tests, tname->u.s.s, tname->u.s.n) < 0) {
        jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported test '%s'", line, tname->u.s.s);
        goto fail;
    }
    cargs T = {0};
    for (int i = first + 1; i < A->npos; i++) T.pos[T.npos++] = A->pos[i];
    for (size_t i = 0; out && i < items->u.l.n; i++) {
        jinja_value *x = by_attr ? jinja__attr_path(R, line, items->u.l.v[i], jinja__arg(A, 0, NULL))
                                 : jinja__jv_ref(items->u.l.v[i]);
        if (!x) goto fail;
        int r = tname ? jinja__run_test(R, line, tname->u.s.s, tname->u.s.n, x, &T) : jinja__truthy(x);
        jinja_release(x);
        if (r < 0) goto fail;
        if (r == keep && jinja__rpush(R, line, out, jinja__jv_ref(items->u.l.v[i]))) goto fail;
    }
    jinja_release(items);
    if (out) out->u.l.kind = LK_GEN; /* Jinja's select and reject are generators */
    return out;
fail:
    jinja_release(items);
    jinja_release(out);
    return NULL;
}

static jinja_value *filter_map(rctx *R, int line, jinja_value *v, const cargs *A) {
    jinja_value *items = jinja__truthy(v) ? jinja__iter_list(R, line, v)
                                          : jinja__rnew(R, line, JV_LIST); /* Jinja: `if value:` */
    if (!items) return NULL;
    jinja_value *out = jinja__rnew(R, line, JV_LIST), *attr = jinja__arg(A, -1, "attribute"),
                *def = jinja__arg(A, -1, "default");
    jinja_value *fname = jinja__arg(A, 0, NULL);
    if (!attr && (!fname || fname->type != JV_STR)) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: map needs attribute= or a filter name", line);
        goto fail;
    }
    if (!attr && jinja__table_find(jinja__filters, fname->u.s.s, fname->u.s.n) < 0) {
        jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported filter '%s'", line, fname->u.s.s);
        goto fail;
    }
    cargs T = {0};
    for (int i = 1; !attr && i < A->npos; i++) T.pos[T.npos++] = A->pos[i];
    for (size_t i = 0; out && i < items->u.l.n; i++) {
        jinja_value *x;
        if (attr) {
            x = jinja__attr_path(R, line, items->u.l.v[i], attr);
            if (x && x->type == JV_UNDEF && def) {
                jinja_release(x);
                x = jinja__jv_ref(def);
            }
        } else {
            x = jinja__apply_filter(R, line, fname->u.s.s, fname->u.s.n, items->u.l.v[i], &T);
        }
        if (jinja__rpush(R, line, out, x)) goto fail;
    }
    jinja_release(items);
    if (out) out->u.l.kind = LK_GEN; /* Jinja's map is a generator */
    return out;
fail:
    jinja_release(items);
    jinja_release(out);
    return NULL;
}

static jinja_value *filter_tojson(rctx *R, int line, jinja_value *v, const cargs *A) {
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (jinja__check_args(R, line, A, 4, "tojson", kw)) return NULL;
    jopts o = {-1, 0, 0, ", ", ": ", 2, 2};
    jinja_value *ea = jinja__arg(A, 0, "ensure_ascii"), *ind = jinja__arg(A, 1, "indent"),
                *sep = jinja__arg(A, 2, "separators"), *sk = jinja__arg(A, 3, "sort_keys");
    if (ea) o.ensure_ascii = jinja__truthy(ea);
    if (sk) o.sort_keys = jinja__truthy(sk);
    if (ind && ind->type != JV_NONE) {
        if (ind->type != JV_INT || ind->u.i < 0 || ind->u.i > 64)
            return jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: tojson: indent must be an integer 0..64",
                               line);
        o.indent = (int)ind->u.i;
        o.item_sep = ",";
        o.item_sep_n = 1;
    }
    if (sep && sep->type != JV_NONE) {
        if (sep->type != JV_LIST || sep->u.l.n != 2 || sep->u.l.v[0]->type != JV_STR ||
            sep->u.l.v[1]->type != JV_STR)
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: tojson: separators must be two strings", line);
        o.item_sep = sep->u.l.v[0]->u.s.s;
        o.item_sep_n = sep->u.l.v[0]->u.s.n;
        o.key_sep = sep->u.l.v[1]->u.s.s;
        o.key_sep_n = sep->u.l.v[1]->u.s.n;
    }
    sbuf b = jinja__sb_for(R);
    int rc = jinja__json_dump(R, line, &b, v, &o, 0);
    /* separators from data: everything between the values is data too */
    if (rc == 0 && sep && sep->type != JV_NONE) rc = jinja__sb_taint_from(&b, 0, jinja__jv_tainted(sep, 0));
    if (rc) {
        jinja__sb_free(&b);
        jinja__sb_fail(R, line, rc);
        return NULL;
    }
    return jinja__sb_take(R, line, &b);
}

/* The length of the line break at s[i] that Python's str.splitlines()
 * splits at (\r\n is one), or 0. */
static size_t line_break(const char *s, size_t i, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[i] == '\r') return i + 1 < n && u[i + 1] == '\n' ? 2 : 1;
    if (u[i] == '\n' || u[i] == 0x0b || u[i] == 0x0c || (u[i] >= 0x1c && u[i] <= 0x1e)) return 1;
    if (u[i] == 0xc2 && i + 1 < n && u[i + 1] == 0x85) return 2; /* U+0085 */
    if (u[i] == 0xe2 && i + 2 < n && u[i + 1] == 0x80 && (u[i + 2] == 0xa8 || u[i + 2] == 0xa9))
        return 3; /* U+2028, U+2029 */
    return 0;
}

static int add_indent(sbuf *b, const jinja_value *with, long long spaces) {
    static const char sp[] = "                                                                ";
    if (with) return jinja__sb_addv(b, with, 0, with->u.s.n);
    int rc = 0;
    for (long long k = spaces; rc == 0 && k > 0; k -= 64) rc = jinja__sb_add(b, sp, k < 64 ? (size_t)k : 64);
    return rc;
}

/* indent(width=4, first=False, blank=False), jinja2 3.x: the lines of
 * (s + "\n").splitlines() joined by "\n", each but the first indented by
 * width spaces (or the string width), empty ones only when blank; first
 * indents the first line too. */
static jinja_value *filter_indent(rctx *R, int line, jinja_value *v, const cargs *A) {
    static const char *const kw[] = {"width", "first", "blank", NULL};
    if (jinja__check_args(R, line, A, 3, "indent", kw)) return NULL;
    jinja_value *w = jinja__arg(A, 0, "width"), *fa = jinja__arg(A, 1, "first"),
                *ba = jinja__arg(A, 2, "blank");
    const jinja_value *with = NULL;
    long long spaces = 4;
    if (v->type != JV_STR)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: indent: can only indent a string, not '%s'", line,
                           jinja__type_name(v));
    if (w && w->type == JV_STR)
        with = w;
    else if (w && (w->type == JV_INT || w->type == JV_BOOL))
        spaces = jinja__num_i(w);
    else if (w)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: indent: width must be an integer or a string",
                           line);
    int first = fa && jinja__truthy(fa), blank = ba && jinja__truthy(ba), tainted = jinja__jv_tainted(v, 0);
    sbuf t = jinja__sb_for(R), b = jinja__sb_for(R);
    int rc = jinja__sb_addv(&t, v, 0, v->u.s.n);
    if (rc == 0) rc = jinja__sb_ch(&t, '\n');
    jinja_value *tv = rc ? NULL : jinja__sb_take(R, line, &t);
    if (!tv) {
        jinja__sb_free(&t);
        return rc ? (jinja__sb_fail(R, line, rc), NULL) : NULL;
    }
    if (first) rc = add_indent(&b, with, spaces);
    size_t i = 0, n = tv->u.s.n, prev = 0, prev_br = 0;
    for (int k = 0; rc == 0 && i < n; k++) {
        size_t j = i, br = 0;
        while (j < n && !(br = line_break(tv->u.s.s, j, n))) j++;
        if (k > 0) {
            /* the break before this line becomes "\n": its own byte when it
             * was one, else data when any of s was */
            size_t at = b.n;
            rc = prev_br == 1 && tv->u.s.s[prev] == '\n' ? jinja__sb_addv(&b, tv, prev, 1)
                                                         : jinja__sb_ch(&b, '\n');
            if (rc == 0 && !(prev_br == 1 && tv->u.s.s[prev] == '\n'))
                rc = jinja__sb_taint_from(&b, at, tainted);
            if (rc == 0 && (blank || j > i)) rc = add_indent(&b, with, spaces);
        }
        if (rc == 0) rc = jinja__sb_addv(&b, tv, i, j - i);
        prev = j;
        prev_br = br;
        i = j + br;
    }
    jinja_release(tv);
    if (rc) {
        jinja__sb_free(&b);
        jinja__sb_fail(R, line, rc);
        return NULL;
    }
    jinja_value *r = jinja__sb_take(R, line, &b);
    if (r) r->safe = v->safe; /* a Markup stays one */
    return r;
}

jinja_value *jinja__apply_filter(rctx *R, int line, const char *name, size_t n, jinja_value *v,
                                 const cargs *A) {
    jinja_value *a0 = jinja__arg(A, 0, NULL);
    int handled;
    jinja_value *sorted = jinja__filter_sort(R, line, name, n, v, A, &handled);
    if (handled) return sorted;
#define IS(s) jinja__name_is(name, n, s)
    if (IS("indent")) return filter_indent(R, line, v, A);
    if (IS("safe")) {
        if (v->type != JV_STR || v->safe) return jinja__jv_ref(v);
        jinja_value *m = jinja__mk_str_copy(R, line, v);
        if (m) m->safe = 1;
        return m;
    }
    if (IS("tojson")) return filter_tojson(R, line, v, A);
    if (IS("from_json")) return jinja__from_json(R, line, v, A);
    if (IS("length") || IS("count")) return len_of(R, line, v);
    if (IS("default") || IS("d")) {
        jinja_value *def = jinja__arg(A, 0, "default_value"), *boolean = jinja__arg(A, 1, "boolean");
        int use = v->type == JV_UNDEF || (boolean && jinja__truthy(boolean) && !jinja__truthy(v));
        if (!use) return jinja__jv_ref(v);
        return def ? jinja__jv_ref(def) : jinja__rstr(R, line, "", 0);
    }
    if (IS("select") || IS("reject")) return filter_select(R, line, v, A, 0, IS("select"));
    if (IS("selectattr") || IS("rejectattr")) return filter_select(R, line, v, A, 1, IS("selectattr"));
    if (IS("map")) return filter_map(R, line, v, A);
    if (IS("list")) {
        jinja_value *l = jinja__iter_list(R, line, v);
        if (!l || l != v) return l;
        jinja_release(l);
        jinja_value *out = jinja__rnew(R, line, JV_LIST);
        for (size_t i = 0; out && i < v->u.l.n; i++)
            if (jinja__rpush(R, line, out, jinja__jv_ref(v->u.l.v[i]))) {
                jinja_release(out);
                return NULL;
            }
        return out;
    }
    if (IS("items")) { /* a generator of the (key, value) pairs */
        if (v->type != JV_UNDEF && v->type != JV_DICT)
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: items: '%s' is not a mapping", line,
                               jinja__type_name(v));
        jinja_value *r =
            v->type == JV_DICT ? jinja__dict_items(R, line, v, 0) : jinja__rnew(R, line, JV_LIST);
        if (r) r->u.l.kind = LK_GEN;
        return r;
    }
    if (IS("first") && v->type == JV_LIST && v->u.l.kind == LK_GEN) { /* takes one item of a generator */
        if (jinja__gen_take(R, line, v)) return NULL;
        if (v->u.l.used || !v->u.l.n) {
            v->u.l.used = 1;
            return jinja__rundef(R, line, NULL, 0);
        }
        v->u.l.used = v->u.l.n > 1 ? 2 : 1;
        return jinja__jv_ref(v->u.l.v[0]);
    }
    if (IS("last") && v->type == JV_LIST && v->u.l.kind == LK_GEN)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: 'generator' object is not reversible", line);
    if (IS("first") || IS("last")) {
        jinja_value *l = jinja__iter_list(R, line, v);
        if (!l) return NULL;
        jinja_value *r = l->u.l.n ? jinja__jv_ref(l->u.l.v[IS("first") ? 0 : l->u.l.n - 1])
                                  : jinja__rundef(R, line, NULL, 0);
        jinja_release(l);
        return r;
    }
    if (IS("reverse")) {
        if (v->type == JV_STR) {
            jinja_value *m1 = jinja__mk_int(R, line, -1);
            if (!m1) return NULL;
            jinja_value *se[3] = {NULL, NULL, m1};
            jinja_value *r = jinja__get_slice(R, line, v, se);
            jinja_release(m1);
            return r;
        }
        /* reversed(v), an iterator; of a generator, which reversed()
         * refuses, Jinja makes a reversed list */
        int gen = !(v->type == JV_LIST && v->u.l.kind == LK_GEN);
        jinja_value *l = jinja__iter_list(R, line, v);
        if (!l) return NULL;
        jinja_value *out = jinja__rnew(R, line, JV_LIST);
        for (size_t i = l->u.l.n; out && i-- > 0;)
            if (jinja__rpush(R, line, out, jinja__jv_ref(l->u.l.v[i]))) {
                jinja_release(out);
                out = NULL;
            }
        jinja_release(l);
        if (out && gen) out->u.l.kind = LK_GEN;
        return out;
    }
    if (IS("join")) {
        jinja_value *l = jinja__iter_list(R, line, v), *sep = jinja__arg(A, 0, "d"),
                    *attr = jinja__arg(A, 1, "attribute");
        if (!l) return NULL;
        if (sep && sep->type != JV_STR) {
            jinja_release(l);
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: join separator must be a string", line);
        }
        sbuf b = jinja__sb_for(R);
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < l->u.l.n; i++) {
            if (i && sep) rc = jinja__sb_addv(&b, sep, 0, sep->u.s.n);
            jinja_value *x = attr ? jinja__attr_path(R, line, l->u.l.v[i], attr) : jinja__jv_ref(l->u.l.v[i]);
            if (!x) {
                rc = R->failed;
                break;
            }
            if (rc == 0) rc = jinja__py_str(R, &b, x, 0);
            jinja_release(x);
        }
        jinja_release(l);
        if (rc) {
            jinja__sb_free(&b);
            jinja__sb_fail(R, line, rc);
            return NULL;
        }
        return jinja__sb_take(R, line, &b);
    }
    if (IS("int")) {
        jinja_value *def = jinja__arg(A, 0, "default");
        if (v->type == JV_INT) return jinja__jv_ref(v);
        if (v->type == JV_BOOL) return jinja__mk_int(R, line, v->u.b);
        if (v->type == JV_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18)
            return jinja__mk_int(R, line, (long long)v->u.f);
        if (v->type == JV_STR && v->u.s.n && v->u.s.n < 64) {
            char buf[64], *e;
            memcpy(buf, v->u.s.s, v->u.s.n);
            buf[v->u.s.n] = 0;
            errno = 0;
            long long x = strtoll(buf, &e, 10);
            while (*e && jinja__py_space((unsigned char)*e)) e++;
            if (!*e && !errno) return jinja__mk_int(R, line, x);
            double d = strtod(buf, &e);
            while (*e && jinja__py_space((unsigned char)*e)) e++;
            if (!*e && isfinite(d) && fabs(d) < 9.2e18) return jinja__mk_int(R, line, (long long)d);
        }
        return def ? jinja__jv_ref(def) : jinja__mk_int(R, line, 0);
    }
    if (IS("float")) {
        jinja_value *def = jinja__arg(A, 0, "default");
        if (jinja__is_num(v)) return jinja__mk_float(R, line, jinja__num_f(v));
        if (v->type == JV_STR && v->u.s.n && v->u.s.n < 64) {
            char buf[64], *e;
            memcpy(buf, v->u.s.s, v->u.s.n);
            buf[v->u.s.n] = 0;
            double d = strtod(buf, &e);
            while (*e && jinja__py_space((unsigned char)*e)) e++;
            if (!*e && e != buf) return jinja__mk_float(R, line, d);
        }
        return def ? jinja__jv_ref(def) : jinja__mk_float(R, line, 0);
    }
    if (IS("abs")) {
        if (v->type == JV_FLOAT) return jinja__mk_float(R, line, fabs(v->u.f));
        if (v->type == JV_INT || v->type == JV_BOOL) {
            long long x = jinja__num_i(v);
            if (x == LLONG_MIN)
                return jinja__rerr(R, line, CK_ERANGE, "line %d: integer overflow in abs", line);
            return jinja__mk_int(R, line, x < 0 ? -x : x);
        }
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: bad operand type for abs(): '%s'", line,
                           jinja__type_name(v));
    }
    /* the rest work on str(v) */
    jinja_value *s = jinja__to_strv(R, line, v), *r = NULL;
    if (!s) return NULL;
    if (IS("string"))
        r = jinja__jv_ref(s);
    else if (IS("trim"))
        r = jinja__str_strip(R, line, s, 3, jinja__arg(A, 0, "chars"));
    else if (IS("upper"))
        r = jinja__str_case(R, line, s, 'u');
    else if (IS("lower"))
        r = jinja__str_case(R, line, s, 'l');
    else if (IS("title"))
        r = jinja__str_case(R, line, s, 't');
    else if (IS("capitalize"))
        r = jinja__str_case(R, line, s, 'c');
    else if (IS("replace"))
        r = jinja__str_replace(R, line, s, a0, jinja__arg(A, 1, "new"), jinja__arg(A, 2, "count"));
    else
        jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported filter '%.*s'", line, (int)n, name);
#undef IS
    jinja_release(s);
    return r;
}
