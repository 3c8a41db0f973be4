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
    if ((key->type == JV_INT || key->type == JV_BOOL) && obj->type == JV_LIST) {
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
    if (obj->type == JV_LIST) {
        if (slice_bounds(R, line, se, obj->u.l.n, &a, &z, &st)) return NULL;
        jinja_value *out = jinja__rnew(R, line, JV_LIST);
        if (!out) return NULL;
        out->u.l.tuple = obj->u.l.tuple;
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

/* The items a for loop (or a filter) walks: a new list. Lists as they are,
 * dicts' keys, strings' code points; an undefined walks as empty. */
jinja_value *jinja__iter_list(rctx *R, int line, jinja_value *v) {
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

jinja_value *jinja__binop(rctx *R, int line, int op, jinja_value *a, jinja_value *b) {
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
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
        /* Markup + str HTML-escapes the str in Jinja: refuse rather than
         * render something else than apply_chat_template */
        if (a->safe != b->safe)
            return jinja__rerr(
                R, line, CK_EUNSUPPORTED,
                "line %d: '+' of a |safe string and a plain one (Jinja escapes HTML there) is not supported",
                line);
        sbuf s = jinja__sb_for(R);
        int rc = jinja__sb_addv(&s, a, 0, a->u.s.n);
        if (rc == 0) rc = jinja__sb_addv(&s, b, 0, b->u.s.n);
        if (rc) {
            jinja__sb_free(&s);
            jinja__sb_fail(R, line, rc);
            return NULL;
        }
        return jinja__sb_take(R, line, &s);
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
                return jinja__sb_take(R, line, &s);
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
