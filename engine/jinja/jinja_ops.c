/* jinja_ops.c - the evaluator's lookups (names, attributes, items, slices)
 * and operators (see jinja_int.h). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "ck_err.h"
#include "jinja_int.h"

/* ---- lookups */

jinja_value *jinja__lookup(rctx *R, int line, frame *F, const char *name, size_t n) {
    for (frame *f = F; f; f = f->parent) {
        long i = jinja__dict_find(f->vars, name, n);
        if (i >= 0) return jinja__jv_ref(f->vars->u.d.v[i]);
    }
    return jinja__rundef(R, line, name, n);
}

jinja_value *jinja__get_attr(rctx *R, int line, jinja_value *obj, const char *name, size_t n) {
    if (obj->type == JV_UNDEF)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (reading its attribute '%.*s')",
                           line, jinja__undef_name(obj), (int)(n > 64 ? 64 : n), name);
    if (obj->type == JV_DICT || obj->type == JV_NS) {
        long i = jinja__dict_find(obj, name, n);
        if (i >= 0) return jinja__jv_ref(obj->u.d.v[i]);
    }
    return jinja__rundef(R, line, name, n);
}

/* Python index i (negative from the end) into len, or -1 out of range. */
static long long py_index(long long i, size_t len) {
    if (i < 0) i += (long long)len;
    return i < 0 || (unsigned long long)i >= len ? -1 : i;
}

jinja_value *jinja__get_item(rctx *R, int line, jinja_value *obj, jinja_value *key) {
    if (obj->type == JV_UNDEF)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (reading an item of it)", line,
                           jinja__undef_name(obj));
    if ((obj->type == JV_DICT || obj->type == JV_NS) && key->type == JV_STR)
        return jinja__get_attr(R, line, obj, key->u.s.s, key->u.s.n);
    if (obj->type == JV_DICT) {
        long i = jinja__dict_find_v(obj, key);
        if (i >= 0) return jinja__jv_ref(obj->u.d.v[i]);
    }
    /* a generator or dict view has no items by index (Jinja: undefined) */
    if ((key->type == JV_INT || key->type == JV_BOOL) && obj->type == JV_LIST &&
        (obj->u.l.kind == LK_LIST || obj->u.l.kind == LK_RANGE)) {
        long long i = py_index(jinja__num_i(key), obj->u.l.n);
        if (i >= 0) return jinja__jv_ref(obj->u.l.v[i]);
    }
    if ((key->type == JV_INT || key->type == JV_BOOL) && obj->type == JV_STR) {
        size_t cps = jinja__utf8_count(obj->u.s.s, obj->u.s.n);
        long long i = py_index(jinja__num_i(key), cps);
        if (i >= 0) {
            size_t a = jinja__utf8_offset(obj->u.s.s, obj->u.s.n, (size_t)i), len;
            jinja__utf8_dec((const unsigned char *)obj->u.s.s, a, obj->u.s.n, &len);
            return jinja__rsub(R, line, obj, a, len);
        }
    }
    if (key->type == JV_STR) return jinja__rundef(R, line, key->u.s.s, key->u.s.n);
    return jinja__rundef(R, line, NULL, 0);
}

/* Python's slice.indices(); 0 or -1 when a bound is not an integer. */
static int slice_bounds(rctx *R, int line, jinja_value *const se[3], size_t len, long long *start,
                        long long *stop, long long *step) {
    long long L = (long long)len, v[3];
    int given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = se[k] && se[k]->type != JV_NONE;
        if (given[k] && se[k]->type != JV_INT && se[k]->type != JV_BOOL) {
            jinja__rerr(R, line, CK_EFORMAT, "line %d: slice indices must be integers or None", line);
            return -1;
        }
        v[k] = given[k] ? jinja__num_i(se[k]) : 0;
    }
    *step = given[2] ? v[2] : 1;
    if (*step == 0) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: slice step cannot be zero", line);
        return -1;
    }
    int back = *step < 0;
    for (int k = 0; k < 2; k++) {
        long long x;
        if (!given[k])
            x = k == 0 ? (back ? L - 1 : 0) : (back ? -1 : L);
        else {
            x = v[k];
            if (x < 0) {
                x += L;
                if (x < 0) x = back ? -1 : 0;
            } else if (x >= L)
                x = back ? L - 1 : L;
        }
        if (k == 0)
            *start = x;
        else
            *stop = x;
    }
    return 0;
}

jinja_value *jinja__get_slice(rctx *R, int line, jinja_value *obj, jinja_value *const se[3]) {
    long long a, z, st;
    if (obj->type == JV_LIST && obj->u.l.kind != LK_LIST && obj->u.l.kind != LK_RANGE)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: '%s' object is not subscriptable", line,
                           jinja__type_name(obj)); /* Jinja slices with Python's [], not its getitem */
    if (obj->type == JV_LIST) {
        if (slice_bounds(R, line, se, obj->u.l.n, &a, &z, &st)) return NULL;
        jinja_value *out = jinja__rnew(R, line, JV_LIST);
        if (!out) return NULL;
        out->u.l.tuple = obj->u.l.tuple;
        if (obj->u.l.kind == LK_RANGE) { /* a slice of a range is a range, as Python computes it */
            const long long *g = obj->u.l.rg;
            long long *o = out->u.l.rg, t0, t1;
            out->u.l.kind = LK_RANGE;
            if (__builtin_mul_overflow(a, g[2], &t0) || __builtin_add_overflow(g[0], t0, &o[0]) ||
                __builtin_mul_overflow(z, g[2], &t1) || __builtin_add_overflow(g[0], t1, &o[1]) ||
                __builtin_mul_overflow(g[2], st, &o[2])) {
                jinja_release(out);
                return jinja__rerr(R, line, CK_ERANGE, "line %d: integer overflow slicing a range", line);
            }
        }
        for (long long i = a; st > 0 ? i < z : i > z; i += st)
            if (jinja__rpush(R, line, out, jinja__jv_ref(obj->u.l.v[i]))) {
                jinja_release(out);
                return NULL;
            }
        return out;
    }
    if (obj->type == JV_STR) {
        const char *s = obj->u.s.s;
        size_t n = obj->u.s.n, cps = jinja__utf8_count(s, n);
        if (slice_bounds(R, line, se, cps, &a, &z, &st)) return NULL;
        if (st == 1) {
            if (z <= a) return jinja__rstr(R, line, "", 0);
            size_t ba = jinja__utf8_offset(s, n, (size_t)a),
                   bz = ba + jinja__utf8_offset(s + ba, n - ba, (size_t)(z - a));
            return jinja__rsub(R, line, obj, ba, bz - ba);
        }
        size_t *off = malloc((cps + 1) * sizeof *off);
        if (!off) return jinja__nomem(R, line);
        size_t i = 0, k = 0, len;
        while (i < n) {
            off[k++] = i;
            jinja__utf8_dec((const unsigned char *)s, i, n, &len);
            i += len;
        }
        off[k] = n;
        sbuf b = jinja__sb_for(R);
        int rc = 0;
        for (long long j = a; rc == 0 && (st > 0 ? j < z : j > z); j += st)
            rc = jinja__sb_addv(&b, obj, off[j], off[j + 1] - off[j]);
        free(off);
        if (rc) {
            jinja__sb_free(&b);
            jinja__sb_fail(R, line, rc);
            return NULL;
        }
        return jinja__sb_take(R, line, &b);
    }
    if (obj->type == JV_UNDEF)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (slicing it)", line,
                           jinja__undef_name(obj));
    return jinja__rerr(R, line, CK_EFORMAT, "line %d: '%s' object is not subscriptable", line,
                       jinja__type_name(obj));
}

/* A generator about to be consumed: 0, or refused once it was partly
 * consumed (Python would go on where it stopped, which is not modelled). */
int jinja__gen_take(rctx *R, int line, jinja_value *g) {
    if (g->u.l.used != 2) return 0;
    jinja__rerr(R, line, CK_EUNSUPPORTED,
                "line %d: a generator (map, select, ...) used again after a partial use is not supported",
                line);
    return R->failed;
}

/* The items a for loop (or a filter) walks: a new list. Lists as they are,
 * dicts' keys, strings' code points; an undefined walks as empty. A
 * generator walks once: it is exhausted after, and walks as empty. */
jinja_value *jinja__iter_list(rctx *R, int line, jinja_value *v) {
    if (v->type == JV_LIST && v->u.l.kind == LK_GEN) {
        if (jinja__gen_take(R, line, v)) return NULL;
        if (v->u.l.used) return jinja__rnew(R, line, JV_LIST);
        v->u.l.used = 1;
    }
    if (v->type == JV_LIST) return jinja__jv_ref(v);
    jinja_value *out = jinja__rnew(R, line, JV_LIST);
    if (!out) return NULL;
    if (v->type == JV_DICT) {
        for (size_t i = 0; i < v->u.d.n; i++)
            if (jinja__rpush(R, line, out, jinja__rkey(R, line, v, i))) {
                jinja_release(out);
                return NULL;
            }
    } else if (v->type == JV_STR) {
        size_t i = 0, len;
        while (i < v->u.s.n) {
            jinja__utf8_dec((const unsigned char *)v->u.s.s, i, v->u.s.n, &len);
            if (jinja__rpush(R, line, out, jinja__rsub(R, line, v, i, len))) {
                jinja_release(out);
                return NULL;
            }
            i += len;
        }
    } else if (v->type != JV_UNDEF) {
        jinja_release(out);
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: '%s' object is not iterable", line,
                           jinja__type_name(v));
    }
    return out;
}

/* ---- operators */

jinja_value *jinja__mk_str_copy(rctx *R, int line, const jinja_value *v) {
    return jinja__rsub(R, line, v, 0, v->u.s.n);
}

/* markupsafe's escape() of string v appended to b: & < > ' " as entities;
 * an entity is data when any of v is (a byte's provenance is not kept
 * through its entity). */
static int html_escape(sbuf *b, const jinja_value *v) {
    size_t run = 0;
    int rc = 0, tainted = v->u.s.nsp > 0;
    for (size_t i = 0; rc == 0 && i <= v->u.s.n; i++) {
        const char *ent = NULL;
        if (i < v->u.s.n) switch (v->u.s.s[i]) {
            case '&': ent = "&amp;"; break;
            case '<': ent = "&lt;"; break;
            case '>': ent = "&gt;"; break;
            case '\'': ent = "&#39;"; break;
            case '"': ent = "&#34;"; break;
            default: continue;
            }
        rc = jinja__sb_addv(b, v, run, i - run);
        if (rc == 0 && ent) {
            size_t at = b->n;
            rc = jinja__sb_cstr(b, ent);
            if (rc == 0) rc = jinja__sb_taint_from(b, at, tainted);
        }
        run = i + 1;
    }
    return rc;
}

jinja_value *jinja__binop(rctx *R, int line, int op, jinja_value *a, jinja_value *b) {
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (op != OP_CONCAT &&
        ((a->type == JV_LIST && a->u.l.kind != LK_LIST) || (b->type == JV_LIST && b->u.l.kind != LK_LIST)))
        return jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: '%s' on a %s is not supported", line, sym[op],
                           jinja__type_name(a->type == JV_LIST && a->u.l.kind != LK_LIST ? a : b));
    if (op == OP_CONCAT) {
        sbuf s = jinja__sb_for(R);
        int rc = jinja__py_str(R, &s, a, 0);
        if (rc == 0) rc = jinja__py_str(R, &s, b, 0);
        if (rc) {
            jinja__sb_free(&s);
            jinja__sb_fail(R, line, rc);
            return NULL;
        }
        return jinja__sb_take(R, line, &s);
    }
    if (jinja__is_num(a) && jinja__is_num(b)) {
        if (a->type != JV_FLOAT && b->type != JV_FLOAT && op != OP_DIV) {
            long long x = jinja__num_i(a), y = jinja__num_i(b), r = 0;
            int ovf = 0;
            switch (op) {
            case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
            case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
            case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
            case OP_FLOORDIV:
            case OP_MOD:
                if (y == 0)
                    return jinja__rerr(R, line, CK_EFORMAT, "line %d: integer division or modulo by zero",
                                       line);
                if (x == LLONG_MIN && y == -1) {
                    ovf = 1;
                    break;
                }
                r = op == OP_FLOORDIV ? x / y : x % y;
                if (op == OP_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0))) r--;
                if (op == OP_MOD && r != 0 && ((r < 0) != (y < 0))) r += y;
                break;
            case OP_POW:
                if (y < 0) return jinja__mk_float(R, line, pow((double)x, (double)y));
                r = 1;
                for (long long k = 0; k < y && !ovf; k++) {
                    ovf = __builtin_mul_overflow(r, x, &r);
                    if (r == 0 || r == 1) break;
                    if (r == -1) {
                        r = (y - k - 1) % 2 ? -r : r;
                        break;
                    }
                }
                break;
            }
            if (ovf)
                return jinja__rerr(R, line, CK_ERANGE, "line %d: integer overflow in '%s'", line, sym[op]);
            return jinja__mk_int(R, line, r);
        }
        double x = jinja__num_f(a), y = jinja__num_f(b), r = 0;
        switch (op) {
        case OP_ADD: r = x + y; break;
        case OP_SUB: r = x - y; break;
        case OP_MUL: r = x * y; break;
        case OP_DIV:
        case OP_FLOORDIV:
        case OP_MOD:
            if (y == 0) return jinja__rerr(R, line, CK_EFORMAT, "line %d: division by zero", line);
            if (op == OP_DIV)
                r = x / y;
            else if (op == OP_FLOORDIV)
                r = floor(x / y);
            else {
                r = fmod(x, y);
                if (r != 0 && ((r < 0) != (y < 0))) r += y;
            }
            break;
        case OP_POW: r = pow(x, y); break;
        }
        return jinja__mk_float(R, line, r);
    }
    if (op == OP_ADD && a->type == JV_STR && b->type == JV_STR) {
        /* a |safe string is a markupsafe Markup: Markup + str (and str +
         * Markup) HTML-escapes the str, and the sum is a Markup */
        sbuf s = jinja__sb_for(R);
        int rc = a->safe || !b->safe ? jinja__sb_addv(&s, a, 0, a->u.s.n) : html_escape(&s, a);
        if (rc == 0) rc = b->safe || !a->safe ? jinja__sb_addv(&s, b, 0, b->u.s.n) : html_escape(&s, b);
        if (rc) {
            jinja__sb_free(&s);
            jinja__sb_fail(R, line, rc);
            return NULL;
        }
        jinja_value *r = jinja__sb_take(R, line, &s);
        if (r) r->safe = a->safe || b->safe;
        return r;
    }
    if (op == OP_ADD && a->type == JV_LIST && b->type == JV_LIST && a->u.l.tuple == b->u.l.tuple) {
        jinja_value *out = jinja__rnew(R, line, JV_LIST);
        if (!out) return NULL;
        out->u.l.tuple = a->u.l.tuple;
        for (size_t i = 0; i < a->u.l.n + b->u.l.n; i++)
            if (jinja__rpush(R, line, out,
                             jinja__jv_ref(i < a->u.l.n ? a->u.l.v[i] : b->u.l.v[i - a->u.l.n]))) {
                jinja_release(out);
                return NULL;
            }
        return out;
    }
    if (op == OP_MUL &&
        (a->type == JV_STR || a->type == JV_LIST || b->type == JV_STR || b->type == JV_LIST)) {
        jinja_value *seq = a->type == JV_STR || a->type == JV_LIST ? a : b, *cnt = seq == a ? b : a;
        if (cnt->type == JV_INT || cnt->type == JV_BOOL) {
            long long k = jinja__num_i(cnt) < 0 ? 0 : jinja__num_i(cnt);
            size_t unit = seq->type == JV_STR ? seq->u.s.n : seq->u.l.n * sizeof(void *);
            if (unit && (unsigned long long)k > R->lim->max_output / unit) {
                jinja__sb_fail(R, line, CK_ETOOLONG);
                return NULL;
            }
            if (seq->type == JV_STR) {
                sbuf s = jinja__sb_for(R);
                int rc = 0;
                for (long long i = 0; i < k && rc == 0; i++) rc = jinja__sb_addv(&s, seq, 0, seq->u.s.n);
                if (rc) {
                    jinja__sb_free(&s);
                    jinja__sb_fail(R, line, rc);
                    return NULL;
                }
                jinja_value *r = jinja__sb_take(R, line, &s);
                if (r) r->safe = seq->safe; /* Markup * n is a Markup */
                return r;
            }
            jinja_value *out = jinja__rnew(R, line, JV_LIST);
            for (long long i = 0; out && i < k; i++)
                for (size_t j = 0; j < seq->u.l.n; j++)
                    if (jinja__rpush(R, line, out, jinja__jv_ref(seq->u.l.v[j]))) {
                        jinja_release(out);
                        return NULL;
                    }
            return out;
        }
    }
    if (a->type == JV_UNDEF || b->type == JV_UNDEF)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: '%s' is undefined (operand of '%s')", line,
                           jinja__undef_name(a->type == JV_UNDEF ? a : b), sym[op]);
    if (op == OP_MOD && a->type == JV_STR)
        return jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: string %% formatting is not supported", line);
    return jinja__rerr(R, line, CK_EFORMAT, "line %d: unsupported operand type(s) for %s: '%s' and '%s'",
                       line, sym[op], jinja__type_name(a), jinja__type_name(b));
}
