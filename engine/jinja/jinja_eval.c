/* jinja_eval.c - the evaluator proper: calls, expressions, statements, and
 * jinja_render (see jinja_int.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "jinja_int.h"

/* what executing a statement gives: go on, pass a break or continue up, or fail */
enum { FL_OK = 0, FL_BREAK = 1, FL_CONTINUE = 2, FL_ERR = -1 };

/* ---- call arguments, evaluated */

static void cargs_free(cargs *A) {
    for (int i = 0; i < A->npos; i++) jinja_release(A->pos[i]);
    for (int i = 0; i < A->nkw; i++) jinja_release(A->kv[i]);
    A->npos = A->nkw = 0;
}

/* Argument i, or the keyword argument `name`, or NULL (borrowed). */
jinja_value *jinja__arg(const cargs *A, int i, const char *name) {
    if (i >= 0 && i < A->npos) return A->pos[i];
    for (int k = 0; name && k < A->nkw; k++)
        if (A->kl[k] == strlen(name) && memcmp(A->kn[k], name, A->kl[k]) == 0) return A->kv[k];
    return NULL;
}

/* A's keyword names must be among `allowed` (NULL-terminated) and at most
 * max_pos positional arguments given. */
int jinja__check_args(rctx *R, int line, const cargs *A, int max_pos, const char *what,
                      const char *const *allowed) {
    if (A->npos > max_pos) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: %s takes at most %d positional argument(s), %d given",
                    line, what, max_pos, A->npos);
        return -1;
    }
    for (int k = 0; k < A->nkw; k++) {
        int ok = 0;
        for (int j = 0; allowed && allowed[j]; j++)
            if (A->kl[k] == strlen(allowed[j]) && memcmp(A->kn[k], allowed[j], A->kl[k]) == 0) ok = 1;
        if (!ok) {
            jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: %s: unsupported keyword argument '%.*s'", line,
                        what, (int)A->kl[k], A->kn[k]);
            return -1;
        }
    }
    return 0;
}

static jinja_value *ev(rctx *R, const jnode *e, frame *F);

static int eval_args(rctx *R, const jnode *e, frame *F, cargs *A) {
    A->npos = A->nkw = 0;
    if (e->args.n > MAX_ARGS || e->kwv.n > MAX_ARGS) {
        jinja__rerr(R, e->line, CK_EUNSUPPORTED, "line %d: more than %d arguments", e->line, MAX_ARGS);
        return -1;
    }
    for (int i = 0; i < e->args.n; i++) {
        if (!(A->pos[i] = ev(R, e->args.v[i], F))) {
            cargs_free(A);
            return -1;
        }
        A->npos++;
    }
    for (int i = 0; i < e->kwv.n; i++) {
        if (!(A->kv[i] = ev(R, e->kwv.v[i], F))) {
            cargs_free(A);
            return -1;
        }
        A->kn[i] = e->kw.v[i];
        A->kl[i] = e->kw.len[i];
        A->nkw++;
    }
    return 0;
}

/* ---- calls: builtins and macros */

static int exec_body(rctx *R, const nlist *body, frame *F, sbuf *out);

static jinja_value *call_builtin(rctx *R, int line, int fn, const cargs *A) {
    switch (fn) {
    case FN_RANGE: {
        long long a = 0, z, st = 1;
        for (int i = 0; i < A->npos; i++)
            if (A->pos[i]->type != JV_INT && A->pos[i]->type != JV_BOOL)
                return jinja__rerr(R, line, CK_EFORMAT, "line %d: range() takes integers", line);
        if (A->npos == 1)
            z = jinja__num_i(A->pos[0]);
        else if (A->npos == 2 || A->npos == 3) {
            a = jinja__num_i(A->pos[0]);
            z = jinja__num_i(A->pos[1]);
            if (A->npos == 3) st = jinja__num_i(A->pos[2]);
        } else
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: range() takes 1 to 3 integers", line);
        if (st == 0) return jinja__rerr(R, line, CK_EFORMAT, "line %d: range() step must not be zero", line);
        jinja_value *out = jinja__rnew(R, line, JV_LIST);
        if (out) { /* a range object: prints as range(a, z[, st]) */
            out->u.l.kind = LK_RANGE;
            out->u.l.rg[0] = a;
            out->u.l.rg[1] = z;
            out->u.l.rg[2] = st;
        }
        for (long long i = a; out && (st > 0 ? i < z : i > z); i += st) {
            if (++R->iters > R->lim->max_loop_iters) {
                jinja_release(out);
                return jinja__rerr(R, line, CK_ERANGE, "line %d: more than %llu loop iterations", line,
                                   (unsigned long long)R->lim->max_loop_iters);
            }
            if (jinja__rpush(R, line, out, jinja__mk_int(R, line, i))) {
                jinja_release(out);
                return NULL;
            }
            if (__builtin_add_overflow(i, st, &(long long){0})) break;
        }
        return out;
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        if (A->npos > (fn == FN_NAMESPACE ? 1 : 1))
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: %s() takes keyword arguments", line,
                               fn == FN_DICT ? "dict" : "namespace");
        jinja_value *d = jinja__rnew(R, line, fn == FN_NAMESPACE ? JV_NS : JV_DICT);
        if (!d) return NULL;
        if (fn == FN_NAMESPACE) {
            if (R->n_ns == R->cap_ns) {
                size_t nc = R->cap_ns ? R->cap_ns * 2 : 8;
                jinja_value **nn = realloc(R->nss, nc * sizeof *nn);
                if (!nn) {
                    jinja_release(d);
                    return jinja__nomem(R, line);
                }
                R->nss = nn;
                R->cap_ns = nc;
            }
            R->nss[R->n_ns++] = jinja__jv_ref(d);
        }
        if (A->npos == 1 && A->pos[0]->type == JV_LIST && fn == FN_DICT) {
            /* dict(pairs): each item a (key, value) of two */
            jinja_value *l = jinja__iter_list(R, line, A->pos[0]);
            for (size_t i = 0; l && i < l->u.l.n; i++) {
                const jinja_value *p = l->u.l.v[i];
                char digits[24];
                if (p->type != JV_LIST || p->u.l.kind != LK_LIST || p->u.l.n != 2 ||
                    (p->u.l.v[0]->type != JV_STR && p->u.l.v[0]->type != JV_INT)) {
                    jinja__rerr(R, line, CK_EFORMAT,
                                "line %d: dict(): item %zu is not a (string or int, value) pair", line, i);
                    break;
                }
                const jinja_value *k = p->u.l.v[0];
                int ki = k->type == JV_INT;
                size_t kn = ki ? (size_t)snprintf(digits, sizeof digits, "%lld", k->u.i) : k->u.s.n;
                d->dkeys |= !ki && k->u.s.nsp > 0;
                if (jinja__rset_k(R, line, d, ki ? digits : k->u.s.s, kn, ki, jinja__jv_ref(p->u.l.v[1])))
                    break;
            }
            jinja_release(l);
            if (R->failed) {
                jinja_release(d);
                return NULL;
            }
        } else if (A->npos == 1) {
            jinja_value *src = A->pos[0];
            if (src->type != JV_DICT && src->type != JV_NS) {
                jinja_release(d);
                return jinja__rerr(R, line, CK_EFORMAT, "line %d: expected a dict", line);
            }
            d->dkeys |= src->dkeys;
            for (size_t i = 0; i < src->u.d.n; i++)
                if (jinja__rset_k(R, line, d, src->u.d.k[i], src->u.d.kn[i], src->u.d.ki[i],
                                  jinja__jv_ref(src->u.d.v[i]))) {
                    jinja_release(d);
                    return NULL;
                }
        }
        for (int i = 0; i < A->nkw; i++)
            if (jinja__rset(R, line, d, A->kn[i], A->kl[i], jinja__jv_ref(A->kv[i]))) {
                jinja_release(d);
                return NULL;
            }
        return d;
    }
    case FN_RAISE: {
        jinja_value *m = jinja__arg(A, 0, NULL);
        sbuf b = jinja__sb_for(R);
        b.max = 400;
        if (m) jinja__py_str(R, &b, m, 0);
        jinja__rerr(R, line, CK_EINVAL, "%s", b.p ? b.p : "");
        jinja__sb_free(&b);
        return NULL;
    }
    case FN_STRFTIME: {
        jinja_value *f = jinja__arg(A, 0, NULL);
        if (!f || f->type != JV_STR || f->u.s.n > 256 || memchr(f->u.s.s, 0, f->u.s.n))
            return jinja__rerr(R, line, CK_EFORMAT,
                               "line %d: strftime_now() takes a format string (at most 256 bytes)", line);
        char buf[2048];
        size_t k = f->u.s.n ? strftime(buf, sizeof buf, f->u.s.s, &R->now) : 0;
        jinja_value *r = jinja__rstr(R, line, buf, k);
        if (r && f->u.s.nsp && k) { /* a format from data makes data */
            if (!(r->u.s.sp = malloc(2 * sizeof *r->u.s.sp))) {
                jinja_release(r);
                return jinja__nomem(R, line);
            }
            r->u.s.sp[0] = 0;
            r->u.s.sp[1] = k;
            r->u.s.nsp = 1;
        }
        return r;
    }
    }
    return jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: unknown builtin", line);
}

static jinja_value *call_macro(rctx *R, int line, const jnode *m, const cargs *A) {
    if (A->npos > m->names.n)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: macro '%.*s' takes %d argument(s), %d given", line,
                           (int)m->nlen, m->name, m->names.n, A->npos);
    frame f = {R->top, jinja__rnew(R, line, JV_DICT)};
    if (!f.vars) return NULL;
    for (int k = 0; k < A->nkw; k++) {
        int found = 0;
        for (int i = 0; i < m->names.n; i++)
            found |= m->names.len[i] == A->kl[k] && memcmp(A->kn[k], m->names.v[i], A->kl[k]) == 0;
        if (!found) {
            jinja_release(f.vars);
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: macro '%.*s' takes no keyword argument '%.*s'",
                               line, (int)m->nlen, m->name, (int)A->kl[k], A->kn[k]);
        }
    }
    for (int i = 0; i < m->names.n; i++) {
        jinja_value *v = NULL;
        if (i < A->npos) v = jinja__jv_ref(A->pos[i]);
        for (int k = 0; !v && k < A->nkw; k++)
            if (A->kl[k] == m->names.len[i] && memcmp(A->kn[k], m->names.v[i], A->kl[k]) == 0)
                v = jinja__jv_ref(A->kv[k]);
        if (!v)
            v = m->kwv.v[i] ? ev(R, m->kwv.v[i], &f) : jinja__rundef(R, line, m->names.v[i], m->names.len[i]);
        if (jinja__rset(R, line, f.vars, m->names.v[i], m->names.len[i], v)) {
            jinja_release(f.vars);
            return NULL;
        }
    }
    sbuf b = jinja__sb_for(R);
    int rc = exec_body(R, &m->body, &f, &b);
    jinja_release(f.vars);
    if (rc < 0) {
        jinja__sb_free(&b);
        return NULL;
    }
    return jinja__sb_take(R, line, &b);
}

static jinja_value *eval_call(rctx *R, const jnode *e, frame *F) {
    cargs A;
    const jnode *callee = e->a;
    jinja_value *obj = NULL, *fn = NULL, *r = NULL;
    if (callee->kind == E_ATTR) {
        if (!(obj = ev(R, callee->a, F))) return NULL;
        if (obj->type == JV_UNDEF) {
            jinja__rerr(R, e->line, CK_EFORMAT, "line %d: '%s' is undefined (calling its '%.*s')", e->line,
                        jinja__undef_name(obj), (int)callee->nlen, callee->name);
            jinja_release(obj);
            return NULL;
        }
        if (obj->type == JV_STR || obj->type == JV_DICT || obj->type == JV_LIST) {
            long has_key = obj->type == JV_DICT ? jinja__dict_find(obj, callee->name, callee->nlen) : -1;
            if (has_key < 0 ||
                (obj->u.d.v[has_key]->type != JV_MACRO && obj->u.d.v[has_key]->type != JV_FUNC)) {
                if (eval_args(R, e, F, &A)) {
                    jinja_release(obj);
                    return NULL;
                }
                int handled;
                r = jinja__call_method(R, e->line, obj, callee->name, callee->nlen, &A, &handled);
                cargs_free(&A);
                if (!handled)
                    jinja__rerr(R, e->line, CK_EUNSUPPORTED, "line %d: unsupported method '%.*s' of %s",
                                e->line, (int)callee->nlen, callee->name, jinja__type_name(obj));
                jinja_release(obj);
                return r;
            }
        }
        fn = jinja__get_attr(R, e->line, obj, callee->name, callee->nlen);
        jinja_release(obj);
    } else {
        fn = ev(R, callee, F);
    }
    if (!fn) return NULL;
    if (fn->type != JV_FUNC && fn->type != JV_MACRO) {
        if (fn->type == JV_UNDEF)
            jinja__rerr(R, e->line, CK_EFORMAT, "line %d: '%s' is undefined (called as a function)", e->line,
                        jinja__undef_name(fn));
        else
            jinja__rerr(R, e->line, CK_EFORMAT, "line %d: '%s' object is not callable", e->line,
                        jinja__type_name(fn));
        jinja_release(fn);
        return NULL;
    }
    if (eval_args(R, e, F, &A)) {
        jinja_release(fn);
        return NULL;
    }
    r = fn->type == JV_FUNC ? call_builtin(R, e->line, fn->u.fn, &A) : call_macro(R, e->line, fn->u.m, &A);
    cargs_free(&A);
    jinja_release(fn);
    return r;
}

/* ---- expressions */

static jinja_value *ev_(rctx *R, const jnode *e, frame *F) {
    jinja_value *a = NULL, *b = NULL, *r = NULL;
    switch (e->kind) {
    case E_LIT: return jinja__jv_ref(e->lit);
    case E_NAME: return jinja__lookup(R, e->line, F, e->name, e->nlen);
    case E_ATTR:
        if (!(a = ev(R, e->a, F))) return NULL;
        r = jinja__get_attr(R, e->line, a, e->name, e->nlen);
        break;
    case E_ITEM:
        if (!(a = ev(R, e->a, F)) || !(b = ev(R, e->b, F))) break;
        r = jinja__get_item(R, e->line, a, b);
        break;
    case E_SLICE: {
        jinja_value *se[3] = {NULL, NULL, NULL};
        const jnode *sn[3] = {e->b, e->c, e->d};
        int ok = (a = ev(R, e->a, F)) != NULL;
        for (int k = 0; ok && k < 3; k++)
            if (sn[k] && !(se[k] = ev(R, sn[k], F))) ok = 0;
        if (ok) r = jinja__get_slice(R, e->line, a, se);
        for (int k = 0; k < 3; k++) jinja_release(se[k]);
        break;
    }
    case E_CALL: return eval_call(R, e, F);
    case E_FILTER: {
        cargs A;
        if (e->fid < 0) /* met where Jinja refuses it only when it runs */
            return jinja__rerr(R, e->line, CK_EUNSUPPORTED, "line %d: unsupported filter '%.*s'", e->line,
                               (int)e->nlen, e->name);
        if (!(a = ev(R, e->a, F))) return NULL;
        if (eval_args(R, e, F, &A)) break;
        r = jinja__apply_filter(R, e->line, e->name, e->nlen, a, &A);
        cargs_free(&A);
        break;
    }
    case E_TEST: {
        cargs A;
        if (e->fid < 0)
            return jinja__rerr(R, e->line, CK_EUNSUPPORTED, "line %d: unsupported test '%.*s'", e->line,
                               (int)e->nlen, e->name);
        if (!(a = ev(R, e->a, F))) return NULL;
        if (eval_args(R, e, F, &A)) break;
        int t = jinja__run_test(R, e->line, e->name, e->nlen, a, &A);
        cargs_free(&A);
        if (t >= 0) r = jinja__mk_bool(R, e->line, e->op ? !t : t);
        break;
    }
    case E_BIN:
        if (!(a = ev(R, e->a, F)) || !(b = ev(R, e->b, F))) break;
        if (e->op == OP_EQ || e->op == OP_NE) {
            int q = jinja__py_eq(R, a, b, 0);
            if (q >= 0) r = jinja__mk_bool(R, e->line, e->op == OP_EQ ? q : !q);
        } else if (e->op >= OP_LT && e->op <= OP_GE) {
            int q = jinja__py_order(R, e->line, e->op, a, b);
            if (q >= 0) r = jinja__mk_bool(R, e->line, q);
        } else if (e->op == OP_IN || e->op == OP_NOTIN) {
            int q = jinja__py_in(R, e->line, a, b);
            if (q >= 0) r = jinja__mk_bool(R, e->line, e->op == OP_IN ? q : !q);
        } else {
            r = jinja__binop(R, e->line, e->op, a, b);
        }
        break;
    case E_NEG:
    case E_POS:
        if (!(a = ev(R, e->a, F))) return NULL;
        if (a->type == JV_FLOAT)
            r = jinja__mk_float(R, e->line, e->kind == E_NEG ? -a->u.f : a->u.f);
        else if (a->type == JV_INT || a->type == JV_BOOL) {
            long long x = jinja__num_i(a);
            if (e->kind == E_NEG && x == LLONG_MIN)
                jinja__rerr(R, e->line, CK_ERANGE, "line %d: integer overflow", e->line);
            else
                r = jinja__mk_int(R, e->line, e->kind == E_NEG ? -x : x);
        } else
            jinja__rerr(R, e->line, CK_EFORMAT, "line %d: bad operand type for unary %c: '%s'", e->line,
                        e->kind == E_NEG ? '-' : '+', jinja__type_name(a));
        break;
    case E_NOT:
        if (!(a = ev(R, e->a, F))) return NULL;
        r = jinja__mk_bool(R, e->line, !jinja__truthy(a));
        break;
    case E_AND:
    case E_OR:
        if (!(a = ev(R, e->a, F))) return NULL;
        if (jinja__truthy(a) == (e->kind == E_OR)) return a;
        jinja_release(a);
        return ev(R, e->b, F);
    case E_COND:
        if (!(a = ev(R, e->a, F))) return NULL;
        if (jinja__truthy(a))
            r = ev(R, e->b, F);
        else
            r = e->c ? ev(R, e->c, F) : jinja__rundef(R, e->line, NULL, 0);
        break;
    case E_LIST:
    case E_TUPLE:
        r = jinja__rnew(R, e->line, JV_LIST);
        if (r) r->u.l.tuple = e->kind == E_TUPLE;
        for (int i = 0; r && i < e->args.n; i++)
            if (jinja__rpush(R, e->line, r, ev(R, e->args.v[i], F))) {
                jinja_release(r);
                r = NULL;
            }
        break;
    case E_DICT:
        r = jinja__rnew(R, e->line, JV_DICT);
        for (int i = 0; r && i < e->args.n; i++) {
            jinja_value *k = ev(R, e->args.v[i], F);
            char digits[24];
            if (k && k->type != JV_STR && k->type != JV_INT)
                jinja__rerr(R, e->line, CK_EUNSUPPORTED,
                            "line %d: dict keys other than strings and integers are not supported", e->line);
            if (k && k->type == JV_STR && k->u.s.nsp)
                r->dkeys = 1; /* keys are whole strings: any data taints them */
            int ki = k && k->type == JV_INT;
            size_t kn = ki ? (size_t)snprintf(digits, sizeof digits, "%lld", k->u.i) : k ? k->u.s.n : 0;
            if (!k || R->failed ||
                jinja__rset_k(R, e->line, r, ki ? digits : k->u.s.s, kn, ki, ev(R, e->kwv.v[i], F))) {
                jinja_release(k);
                jinja_release(r);
                r = NULL;
                break;
            }
            jinja_release(k);
        }
        break;
    case E_SLOT: return jinja__jv_ref(R->slot);
    default: jinja__rerr(R, e->line, CK_EUNSUPPORTED, "line %d: unsupported expression", e->line);
    }
    jinja_release(a);
    jinja_release(b);
    if (R->failed && r) {
        jinja_release(r);
        r = NULL;
    }
    return r;
}

static jinja_value *ev(rctx *R, const jnode *e, frame *F) {
    if (jinja__tick(R, e->line)) return NULL;
    if (++R->depth > R->max_depth) {
        R->depth--;
        return jinja__rerr(R, e->line, CK_ERANGE, "line %d: evaluation nested deeper than %d", e->line,
                           R->max_depth);
    }
    jinja_value *r = ev_(R, e, F);
    R->depth--;
    return r;
}

/* ---- statements */

static int bind(rctx *R, int line, frame *F, const slist *names, jinja_value *v) {
    if (names->n == 1) return jinja__rset(R, line, F->vars, names->v[0], names->len[0], v);
    if (v->type != JV_LIST || v->u.l.n != (size_t)names->n) {
        jinja__rerr(R, line, CK_EFORMAT, "line %d: cannot unpack %s into %d names", line, jinja__type_name(v),
                    names->n);
        jinja_release(v);
        return R->failed;
    }
    for (int i = 0; i < names->n; i++)
        if (jinja__rset(R, line, F->vars, names->v[i], names->len[i], jinja__jv_ref(v->u.l.v[i]))) {
            jinja_release(v);
            return R->failed;
        }
    jinja_release(v);
    return 0;
}

static int out_value(rctx *R, int line, sbuf *out, const jinja_value *v) {
    int rc = jinja__py_str(R, out, v, 0);
    return rc ? jinja__sb_fail(R, line, rc) : 0;
}

/* One iteration's `loop`: index, index0, revindex, revindex0, first, last,
 * length, previtem, nextitem, depth, depth0. */
static jinja_value *loop_var(rctx *R, int line, const jinja_value *items, size_t i) {
    size_t n = items->u.l.n;
    jinja_value *L = jinja__rnew(R, line, JV_DICT);
    if (!L) return NULL;
    if (jinja__rset(R, line, L, "index0", 6, jinja__mk_int(R, line, (long long)i)) ||
        jinja__rset(R, line, L, "index", 5, jinja__mk_int(R, line, (long long)i + 1)) ||
        jinja__rset(R, line, L, "revindex", 8, jinja__mk_int(R, line, (long long)(n - i))) ||
        jinja__rset(R, line, L, "revindex0", 9, jinja__mk_int(R, line, (long long)(n - i - 1))) ||
        jinja__rset(R, line, L, "first", 5, jinja__mk_bool(R, line, i == 0)) ||
        jinja__rset(R, line, L, "last", 4, jinja__mk_bool(R, line, i + 1 == n)) ||
        jinja__rset(R, line, L, "length", 6, jinja__mk_int(R, line, (long long)n)) ||
        jinja__rset(R, line, L, "depth", 5, jinja__mk_int(R, line, 1)) ||
        jinja__rset(R, line, L, "depth0", 6, jinja__mk_int(R, line, 0)) ||
        (i > 0 && jinja__rset(R, line, L, "previtem", 8, jinja__jv_ref(items->u.l.v[i - 1]))) ||
        (i + 1 < n && jinja__rset(R, line, L, "nextitem", 8, jinja__jv_ref(items->u.l.v[i + 1])))) {
        jinja_release(L);
        return NULL;
    }
    return L;
}

static int exec_for(rctx *R, const jnode *s, frame *F, sbuf *out) {
    jinja_value *src = ev(R, s->a, F);
    if (!src) return FL_ERR;
    jinja_value *items = jinja__iter_list(R, s->line, src);
    jinja_release(src);
    if (!items) return FL_ERR;
    /* a generator is being consumed: partly while the loop runs (the body may
     * not walk it again), wholly when the loop ends without a break */
    jinja_value *gen = items->u.l.kind == LK_GEN ? jinja__jv_ref(items) : NULL;
    if (gen) gen->u.l.used = 2;
    if (s->b) { /* `for x in y if c`: the loop sees only the items that pass */
        jinja_value *kept = jinja__rnew(R, s->line, JV_LIST);
        for (size_t i = 0; kept && i < items->u.l.n; i++) {
            frame f = {F, jinja__rnew(R, s->line, JV_DICT)};
            jinja_value *c = NULL;
            if (f.vars && bind(R, s->line, &f, &s->names, jinja__jv_ref(items->u.l.v[i])) == 0)
                c = ev(R, s->b, &f);
            int keep = c && jinja__truthy(c);
            jinja_release(c);
            jinja_release(f.vars);
            if (R->failed || (keep && jinja__rpush(R, s->line, kept, jinja__jv_ref(items->u.l.v[i])))) {
                jinja_release(kept);
                kept = NULL;
            }
        }
        jinja_release(items);
        if (!kept) {
            jinja_release(gen);
            return FL_ERR;
        }
        items = kept;
    }
    int broke = 0;
    int rc = FL_OK;
    if (items->u.l.n == 0) rc = exec_body(R, &s->els, F, out);
    for (size_t i = 0; i < items->u.l.n; i++) {
        if (++R->iters > R->lim->max_loop_iters) {
            jinja__rerr(R, s->line, CK_ERANGE, "line %d: more than %llu loop iterations", s->line,
                        (unsigned long long)R->lim->max_loop_iters);
            rc = FL_ERR;
            break;
        }
        /* a new scope each iteration: a `set` inside does not outlive it */
        frame f = {F, jinja__rnew(R, s->line, JV_DICT)};
        if (!f.vars || jinja__rset(R, s->line, f.vars, "loop", 4, loop_var(R, s->line, items, i)) ||
            bind(R, s->line, &f, &s->names, jinja__jv_ref(items->u.l.v[i]))) {
            jinja_release(f.vars);
            rc = FL_ERR;
            break;
        }
        rc = exec_body(R, &s->body, &f, out);
        jinja_release(f.vars);
        if (rc == FL_CONTINUE) rc = FL_OK;
        if (rc == FL_BREAK) {
            rc = FL_OK;
            broke = i + 1 < items->u.l.n;
            break;
        }
        if (rc < 0) break;
    }
    if (gen && !broke) gen->u.l.used = 1;
    jinja_release(gen);
    jinja_release(items);
    return rc;
}

/* The text of s's body, run in a scope of its own (a set or filter block:
 * a `set` inside does not outlive it), or NULL. */
static jinja_value *exec_scope(rctx *R, const jnode *s, frame *F) {
    frame f = {F, jinja__rnew(R, s->line, JV_DICT)};
    if (!f.vars) return NULL;
    sbuf b = jinja__sb_for(R);
    int rc = exec_body(R, &s->body, &f, &b);
    jinja_release(f.vars);
    if (rc < 0) {
        jinja__sb_free(&b);
        return NULL;
    }
    return jinja__sb_take(R, s->line, &b);
}

static int exec_stmt(rctx *R, const jnode *s, frame *F, sbuf *out) {
    if (jinja__tick(R, s->line)) return FL_ERR;
    jinja_value *v;
    switch (s->kind) {
    case S_TEXT: {
        int rc = jinja__sb_add(out, s->lit->u.s.s, s->lit->u.s.n);
        return rc ? (jinja__sb_fail(R, s->line, rc), FL_ERR) : FL_OK;
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
            int t = jinja__truthy(v);
            jinja_release(v);
            return exec_body(R, t ? &s->body : &s->els, F, out);
        }
    case S_FOR: return exec_for(R, s, F, out);
    case S_SET:
        if (!(v = ev(R, s->a, F))) return FL_ERR;
        return bind(R, s->line, F, &s->names, v) ? FL_ERR : FL_OK;
    case S_SETNS: {
        jinja_value *ns = jinja__lookup(R, s->line, F, s->name, s->nlen);
        if (!ns) return FL_ERR;
        if (ns->type != JV_NS) {
            jinja__rerr(R, s->line, CK_EFORMAT,
                        "line %d: cannot assign attribute on non-namespace object '%.*s'", s->line,
                        (int)s->nlen, s->name);
            jinja_release(ns);
            return FL_ERR;
        }
        v = ev(R, s->a, F);
        int rc = v ? jinja__rset(R, s->line, ns, s->name2, s->nlen2, v) : FL_ERR;
        jinja_release(ns);
        return rc ? FL_ERR : FL_OK;
    }
    case S_SETBLOCK:
        if (!(v = exec_scope(R, s, F))) return FL_ERR;
        return jinja__rset(R, s->line, F->vars, s->name, s->nlen, v) ? FL_ERR : FL_OK;
    case S_FILTERBLOCK: {
        jinja_value *text = exec_scope(R, s, F), *slot = R->slot;
        if (!text) return FL_ERR;
        R->slot = text;
        v = ev(R, s->a, F);
        R->slot = slot;
        jinja_release(text);
        int rc = v ? out_value(R, s->line, out, v) : FL_ERR;
        jinja_release(v);
        return rc ? FL_ERR : FL_OK;
    }
    case S_SCOPE: {
        frame f = {F, jinja__rnew(R, s->line, JV_DICT)};
        int rc = f.vars ? exec_body(R, &s->body, &f, out) : FL_ERR;
        jinja_release(f.vars);
        return rc < 0 ? FL_ERR : FL_OK;
    }
    case S_MACRO:
        if (!(v = jinja__rnew(R, s->line, JV_MACRO))) return FL_ERR;
        v->u.m = s;
        return jinja__rset(R, s->line, F->vars, s->name, s->nlen, v) ? FL_ERR : FL_OK;
    case S_BREAK: return FL_BREAK;
    case S_CONTINUE: return FL_CONTINUE;
    case S_BODY: return exec_body(R, &s->body, F, out);
    }
    jinja__rerr(R, s->line, CK_EUNSUPPORTED, "line %d: unsupported statement", s->line);
    return FL_ERR;
}

static int exec_body(rctx *R, const nlist *body, frame *F, sbuf *out) {
    if (++R->depth > R->max_depth) {
        R->depth--;
        jinja__rerr(R, body->n ? body->v[0]->line : 0, CK_ERANGE,
                    "render nested deeper than %d (recursive macro?)", R->max_depth);
        return FL_ERR;
    }
    int rc = FL_OK;
    for (int i = 0; i < body->n && rc == FL_OK; i++) rc = exec_stmt(R, body->v[i], F, out);
    R->depth--;
    return R->failed ? FL_ERR : rc;
}

int jinja_render(const jinja_template *t, jinja_value *vars, const struct tm *now, char **out,
                 size_t *out_len, jinja_error *err) {
    return jinja_render_spans(t, vars, now, out, out_len, NULL, NULL, err);
}

int jinja_render_spans(const jinja_template *t, jinja_value *vars, const struct tm *now, char **out,
                       size_t *out_len, jinja_span **spans, size_t *n_spans, jinja_error *err) {
    jinja__clear_err(err);
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    rctx R = {0};
    R.err = err;
    if (!t || !out || (vars && vars->type != JV_DICT)) {
        jinja__rerr(&R, 0, CK_EINVAL, "%s: invalid argument", __func__);
        if (err) err->kind = jinja__k_error;
        return CK_EINVAL;
    }
    R.t = t;
    R.lim = &t->lim;
    /* expressions and bodies nest about four deep per parsed level, and a
     * chain `a + b + c ...` parses flat but evaluates nested */
    R.max_depth = t->lim.max_depth * 4;
    if (now)
        R.now = *now;
    else {
        time_t tt = time(NULL);
        localtime_r(&tt, &R.now);
    }

    jinja_value *globals = jinja__jv_new(JV_DICT), *top = jinja__jv_new(JV_DICT), *empty = NULL;
    static const char *const fnames[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
    static const int fids[] = {FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME};
    int rc = globals && top ? 0 : CK_ENOMEM;
    for (int i = 0; rc == 0 && i < 5; i++) {
        jinja_value *f = jinja__jv_new(JV_FUNC);
        if (f) f->u.fn = fids[i];
        rc = jinja__dict_set_cstr(globals, fnames[i], f);
    }
    if (!vars && rc == 0) {
        vars = empty = jinja__jv_new(JV_DICT);
        if (!vars) rc = CK_ENOMEM;
    }
    sbuf b = jinja__sb_for(&R);
    if (rc == 0) {
        frame fg = {NULL, globals}, fu = {&fg, vars}, ft = {&fu, top};
        R.top = &ft;
        if (exec_body(&R, &t->root->body, &ft, &b) < 0)
            rc = R.failed ? R.failed : CK_EFORMAT;
        else if (R.failed)
            rc = R.failed;
    } else {
        jinja__rerr(&R, 0, CK_ENOMEM, "%s: out of memory", __func__);
    }
    /* namespaces may hold themselves: empty them so every value is freed */
    for (size_t i = 0; i < R.n_ns; i++) {
        jinja_value *ns = R.nss[i];
        for (size_t k = 0; k < ns->u.d.n; k++) {
            free(ns->u.d.k[k]);
            jinja_release(ns->u.d.v[k]);
        }
        ns->u.d.n = 0;
        jinja_release(ns);
    }
    free(R.nss);
    jinja_release(top);
    jinja_release(globals);
    jinja_release(empty);
    if (rc) {
        jinja__sb_free(&b);
        return rc;
    }
    jinja_span *sp = NULL;
    int nomem_ = (spans && b.nsp && !(sp = malloc(b.nsp * sizeof *sp))) || (!b.p && !(b.p = calloc(1, 1)));
    if (nomem_) {
        free(sp);
        jinja__sb_free(&b);
        jinja__rerr(&R, 0, CK_ENOMEM, "%s: out of memory", __func__);
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
