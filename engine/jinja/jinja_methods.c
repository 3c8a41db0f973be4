/* jinja_methods.c - the evaluator's string and dict methods and its tests
 * (`x is name`) (see jinja_int.h). */
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

/* ---- string operations (code points; case maps are ASCII only) */

static int cp_in(unsigned c, const char *set, size_t n) {
    size_t i = 0, len;
    while (i < n) {
        if (jinja__utf8_dec((const unsigned char *)set, i, n, &len) == c) return 1;
        i += len;
    }
    return 0;
}

/* str.strip / lstrip / rstrip: which = 3 both ends, 1 left, 2 right; chars
 * NULL = whitespace. */
jinja_value *jinja__str_strip(rctx *R, int line, const jinja_value *s, int which, const jinja_value *chars) {
    const char *p = s->u.s.s;
    size_t a = 0, z = s->u.s.n, len;
    if (chars && chars->type != JV_NONE && chars->type != JV_STR)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: strip arg must be None or str", line);
    int ws = !chars || chars->type == JV_NONE;
    if (which & 1)
        while (a < z) {
            unsigned c = jinja__utf8_dec((const unsigned char *)p, a, z, &len);
            if (ws ? !jinja__py_space(c) : !cp_in(c, chars->u.s.s, chars->u.s.n)) break;
            a += len;
        }
    if (which & 2)
        while (z > a) {
            size_t q = jinja__utf8_prev(p, a, z);
            unsigned c = jinja__utf8_dec((const unsigned char *)p, q, z, &len);
            if (ws ? !jinja__py_space(c) : !cp_in(c, chars->u.s.s, chars->u.s.n)) break;
            z = q;
        }
    return jinja__rsub(R, line, s, a, z - a);
}

/* mode: 'u' upper, 'l' lower, 't' title, 'c' capitalize */
jinja_value *jinja__str_case(rctx *R, int line, const jinja_value *s, int mode) {
    /* ASCII case maps keep every byte in place, and so its provenance */
    jinja_value *v = jinja__rsub(R, line, s, 0, s->u.s.n);
    if (!v) return NULL;
    char *p = v->u.s.s;
    int prev_cased = 0;
    for (size_t i = 0; i < v->u.s.n; i++) {
        char c = p[i];
        int lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
        int to_up = mode == 'u' || (mode == 't' && !prev_cased) || (mode == 'c' && i == 0);
        if (to_up && lo)
            p[i] = (char)(c - 32);
        else if (!to_up && up && mode != 'u')
            p[i] = (char)(c + 32);
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

jinja_value *jinja__str_replace(rctx *R, int line, const jinja_value *s, const jinja_value *old,
                                const jinja_value *new_, const jinja_value *count) {
    if (!old || !new_ || old->type != JV_STR || new_->type != JV_STR)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: replace() takes two strings", line);
    long long max = count && count->type != JV_NONE ? jinja__num_i(count) : -1;
    sbuf b = jinja__sb_for(R);
    int rc = 0;
    const char *p = s->u.s.s, *end = p + s->u.s.n;
    long long done = 0;
    if (old->u.s.n == 0) {
        /* Python puts new between every code point and at both ends */
        size_t i = 0, len;
        while (rc == 0 && (max < 0 || done < max)) {
            rc = jinja__sb_addv(&b, new_, 0, new_->u.s.n);
            done++;
            if (i >= s->u.s.n) break;
            jinja__utf8_dec((const unsigned char *)p, i, s->u.s.n, &len);
            if (rc == 0) rc = jinja__sb_addv(&b, s, i, len);
            i += len;
        }
        if (rc == 0 && i < s->u.s.n) rc = jinja__sb_addv(&b, s, i, s->u.s.n - i);
    } else {
        while (rc == 0) {
            const char *hit =
                max >= 0 && done >= max ? NULL : find_bytes(p, (size_t)(end - p), old->u.s.s, old->u.s.n);
            if (!hit) {
                rc = jinja__sb_addv(&b, s, (size_t)(p - s->u.s.s), (size_t)(end - p));
                break;
            }
            rc = jinja__sb_addv(&b, s, (size_t)(p - s->u.s.s), (size_t)(hit - p));
            if (rc == 0) rc = jinja__sb_addv(&b, new_, 0, new_->u.s.n);
            p = hit + old->u.s.n;
            done++;
            if (R->steps++ > R->lim->max_steps) rc = CK_ERANGE;
        }
    }
    if (rc == CK_ERANGE) {
        jinja__sb_free(&b);
        return jinja__rerr(R, line, CK_ERANGE, "line %d: step limit", line);
    }
    if (rc) {
        jinja__sb_free(&b);
        jinja__sb_fail(R, line, rc);
        return NULL;
    }
    return jinja__sb_take(R, line, &b);
}

static jinja_value *str_split(rctx *R, int line, const jinja_value *s, const jinja_value *sep,
                              const jinja_value *maxs) {
    long long max = maxs && maxs->type != JV_NONE ? jinja__num_i(maxs) : -1;
    jinja_value *out = jinja__rnew(R, line, JV_LIST);
    if (!out) return NULL;
    const char *p = s->u.s.s;
    size_t n = s->u.s.n, i = 0;
    long long done = 0;
    if (!sep || sep->type == JV_NONE) {
        for (;;) {
            i = jinja__skip_space_fwd(p, i, n);
            if (i >= n) break;
            if (max >= 0 && done >= max) {
                size_t z = jinja__skip_space_back(p, i, n);
                if (jinja__rpush(R, line, out, jinja__rsub(R, line, s, i, z - i))) goto fail;
                break;
            }
            size_t j = i, len;
            while (j < n && !jinja__py_space(jinja__utf8_dec((const unsigned char *)p, j, n, &len))) j += len;
            if (jinja__rpush(R, line, out, jinja__rsub(R, line, s, i, j - i))) goto fail;
            done++;
            i = j;
        }
        return out;
    }
    if (sep->type != JV_STR) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: split() separator must be a string", line);
        goto fail;
    }
    if (!sep->u.s.n) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: split(): empty separator", line);
        goto fail;
    }
    for (;;) {
        const char *hit = max >= 0 && done >= max ? NULL : find_bytes(p + i, n - i, sep->u.s.s, sep->u.s.n);
        if (!hit) {
            if (jinja__rpush(R, line, out, jinja__rsub(R, line, s, i, n - i))) goto fail;
            break;
        }
        if (jinja__rpush(R, line, out, jinja__rsub(R, line, s, i, (size_t)(hit - (p + i))))) goto fail;
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
    if (!a)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: %s() takes one argument", line,
                           end ? "endswith" : "startswith");
    size_t n = a->type == JV_LIST ? a->u.l.n : 1;
    for (size_t i = 0; i < n; i++) {
        const jinja_value *x = a->type == JV_LIST ? a->u.l.v[i] : a;
        if (x->type != JV_STR)
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: %s() argument must be str or a tuple of str",
                               line, end ? "endswith" : "startswith");
        if (x->u.s.n <= s->u.s.n &&
            memcmp(s->u.s.s + (end ? s->u.s.n - x->u.s.n : 0), x->u.s.s, x->u.s.n) == 0)
            return jinja__mk_bool(R, line, 1);
    }
    return jinja__mk_bool(R, line, 0);
}

jinja_value *jinja__dict_items(rctx *R, int line, const jinja_value *d,
                               int what /* 0 items 1 keys 2 values */) {
    jinja_value *out = jinja__rnew(R, line, JV_LIST);
    for (size_t i = 0; out && i < d->u.d.n; i++) {
        jinja_value *x;
        if (what == 2)
            x = jinja__jv_ref(d->u.d.v[i]);
        else if (what == 1)
            x = jinja__rkey(R, line, d, i);
        else {
            x = jinja__rnew(R, line, JV_LIST);
            if (x) {
                x->u.l.tuple = 1;
                if (jinja__rpush(R, line, x, jinja__rkey(R, line, d, i)) ||
                    jinja__rpush(R, line, x, jinja__jv_ref(d->u.d.v[i]))) {
                    jinja_release(x);
                    x = NULL;
                }
            }
        }
        if (jinja__rpush(R, line, out, x)) {
            jinja_release(out);
            return NULL;
        }
    }
    return out;
}

int jinja__name_is(const char *s, size_t n, const char *lit) {
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* obj.name(args) for str and dict methods; *handled = 0 when obj has no
 * such method (the caller then reports it). */
jinja_value *jinja__call_method(rctx *R, int line, jinja_value *obj, const char *m, size_t mn, const cargs *A,
                                int *handled) {
    *handled = 1;
    jinja_value *a0 = jinja__arg(A, 0, NULL), *a1 = jinja__arg(A, 1, NULL);
    if (obj->type == JV_STR) {
        if (jinja__name_is(m, mn, "strip")) return jinja__str_strip(R, line, obj, 3, a0);
        if (jinja__name_is(m, mn, "lstrip")) return jinja__str_strip(R, line, obj, 1, a0);
        if (jinja__name_is(m, mn, "rstrip")) return jinja__str_strip(R, line, obj, 2, a0);
        if (jinja__name_is(m, mn, "startswith")) return str_affix(R, line, obj, a0, 0);
        if (jinja__name_is(m, mn, "endswith")) return str_affix(R, line, obj, a0, 1);
        if (jinja__name_is(m, mn, "split"))
            return str_split(R, line, obj, jinja__arg(A, 0, "sep"), jinja__arg(A, 1, "maxsplit"));
        if (jinja__name_is(m, mn, "replace"))
            return jinja__str_replace(R, line, obj, a0, a1, jinja__arg(A, 2, "count"));
        if (jinja__name_is(m, mn, "upper")) return jinja__str_case(R, line, obj, 'u');
        if (jinja__name_is(m, mn, "lower")) return jinja__str_case(R, line, obj, 'l');
        if (jinja__name_is(m, mn, "title")) return jinja__str_case(R, line, obj, 't');
        if (jinja__name_is(m, mn, "capitalize")) return jinja__str_case(R, line, obj, 'c');
        if (jinja__name_is(m, mn, "format")) return jinja__str_format(R, line, obj, A);
        if (jinja__name_is(m, mn, "find")) {
            if (!a0 || a0->type != JV_STR)
                return jinja__rerr(R, line, CK_EFORMAT, "line %d: find() takes a string", line);
            const char *hit = find_bytes(obj->u.s.s, obj->u.s.n, a0->u.s.s, a0->u.s.n);
            return jinja__mk_int(
                R, line, hit ? (long long)jinja__utf8_count(obj->u.s.s, (size_t)(hit - obj->u.s.s)) : -1);
        }
    } else if (obj->type == JV_DICT) {
        /* the views dict_items, dict_keys, dict_values */
        int what = jinja__name_is(m, mn, "items")    ? 0
                   : jinja__name_is(m, mn, "keys")   ? 1
                   : jinja__name_is(m, mn, "values") ? 2
                                                     : -1;
        if (what >= 0) {
            jinja_value *r = jinja__dict_items(R, line, obj, what);
            if (r) r->u.l.kind = what == 0 ? LK_ITEMS : what == 1 ? LK_KEYS : LK_VALUES;
            return r;
        }
        if (jinja__name_is(m, mn, "get")) {
            if (!a0) return jinja__rerr(R, line, CK_EFORMAT, "line %d: get() takes a key", line);
            long i = jinja__dict_find_v(obj, a0);
            if (i >= 0) return jinja__jv_ref(obj->u.d.v[i]);
            return a1 ? jinja__jv_ref(a1) : jinja__rnew(R, line, JV_NONE);
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
        if (c >= 'a' && c <= 'z') {
            if (upper) return 0;
            cased = 1;
        }
        if (c >= 'A' && c <= 'Z') {
            if (!upper) return 0;
            cased = 1;
        }
    }
    return cased;
}

/* 1 / 0, or -1 on error. */
int jinja__run_test(rctx *R, int line, const char *name, size_t n, jinja_value *v, const cargs *A) {
    jinja_value *a0 = jinja__arg(A, 0, NULL);
#define IS(s) jinja__name_is(name, n, s)
    if (IS("defined")) return v->type != JV_UNDEF;
    if (IS("undefined")) return v->type == JV_UNDEF;
    if (IS("none")) return v->type == JV_NONE;
    if (IS("boolean")) return v->type == JV_BOOL;
    if (IS("true")) return v->type == JV_BOOL && v->u.b;
    if (IS("false")) return v->type == JV_BOOL && !v->u.b;
    if (IS("string")) return v->type == JV_STR;
    if (IS("number")) return jinja__is_num(v);
    if (IS("integer")) return v->type == JV_INT;
    if (IS("float")) return v->type == JV_FLOAT;
    if (IS("mapping")) return v->type == JV_DICT;
    if (IS("iterable"))
        return v->type == JV_STR || v->type == JV_LIST || v->type == JV_DICT || v->type == JV_UNDEF;
    if (IS("sequence")) /* len() and items by index: not a generator or a dict view */
        return v->type == JV_STR || v->type == JV_DICT || v->type == JV_UNDEF ||
               (v->type == JV_LIST && (v->u.l.kind == LK_LIST || v->u.l.kind == LK_RANGE));
    if (IS("callable")) return v->type == JV_FUNC || v->type == JV_MACRO;
    if (IS("lower") || IS("upper")) return v->type == JV_STR && ascii_case_all(v, IS("upper"));
    if (!a0 && !IS("odd") && !IS("even")) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: test '%.*s' needs an argument", line, (int)n, name);
        return -1;
    }
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (v->type != JV_INT && v->type != JV_BOOL) {
            jinja__rerr(R, line, CK_EFORMAT, "line %d: test '%.*s' needs an integer", line, (int)n, name);
            return -1;
        }
        long long x = jinja__num_i(v), d = IS("divisibleby") ? (a0->type == JV_INT ? a0->u.i : 0) : 2;
        if (d == 0) {
            jinja__rerr(R, line, CK_EFORMAT, "line %d: divisibleby needs a nonzero integer", line);
            return -1;
        }
        int rem = x % d != 0;
        return IS("odd") ? rem : !rem;
    }
    if (IS("eq") || IS("equalto") || IS("==")) return jinja__py_eq(R, v, a0, 0);
    if (IS("ne") || IS("!=")) {
        int e = jinja__py_eq(R, v, a0, 0);
        return e < 0 ? e : !e;
    }
    if (IS("lt") || IS("<")) return jinja__py_order(R, line, OP_LT, v, a0);
    if (IS("le") || IS("<=")) return jinja__py_order(R, line, OP_LE, v, a0);
    if (IS("gt") || IS(">")) return jinja__py_order(R, line, OP_GT, v, a0);
    if (IS("ge") || IS(">=")) return jinja__py_order(R, line, OP_GE, v, a0);
    if (IS("in")) return jinja__py_in(R, line, v, a0);
    if (IS("sameas")) {
        if (v->type != a0->type) return 0;
        if (v->type == JV_NONE || v->type == JV_UNDEF) return 1;
        if (v->type == JV_BOOL) return v->u.b == a0->u.b;
        return v == a0;
    }
#undef IS
    jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: unsupported test '%.*s'", line, (int)n, name);
    return -1;
}
