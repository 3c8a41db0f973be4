/* jinja_sort.c - the filters that order or compare items: dictsort, sort,
 * unique, min and max, with jinja2's semantics (see jinja_int.h).
 *
 * Each compares keys: an item, or its attribute= (a dotted path, for sort a
 * comma-separated list of them compared in turn), a string lowered unless
 * case_sensitive (ASCII, as the lower filter). Python's sorted() is stable,
 * also with reverse=True (equal keys keep their order), and compares with
 * `<` alone, so keys that Python cannot order (None, a dict, a str with an
 * int) fail as Python's TypeError does. min and max keep the first of equal
 * extremes; unique keeps the first item of each key, by Python's ==. Every
 * comparison counts one evaluation step, so a long list stops at
 * max_steps, and the work arrays are counted against max_alloc. */
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

/* v as a sort key: a string lowered unless cs, anything else as it is.
 * Takes v. */
static jinja_value *fold(rctx *R, int line, jinja_value *v, int cs) {
    if (!v || cs || v->type != JV_STR) return v;
    jinja_value *l = jinja__str_case(R, line, v, 'l');
    jinja_release(v);
    return l;
}

/* The key of item: the item, or its attribute= path's value. multi
 * (sort's keys, Jinja's make_multi_attrgetter): a list of the values of the
 * comma-separated paths, also of one path or of the item itself, so that
 * equal keys (two None) are never ordered with `<`. */
static jinja_value *key_of(rctx *R, int line, jinja_value *item, const jinja_value *attr, int multi, int cs) {
    int none = !attr || attr->type == JV_NONE;
    if (!multi) return fold(R, line, none ? jinja__jv_ref(item) : jinja__attr_path(R, line, item, attr), cs);
    jinja_value *k = jinja__rnew(R, line, JV_LIST);
    if (k && (none || attr->type != JV_STR)) {
        jinja_value *x = none ? jinja__jv_ref(item) : jinja__attr_path(R, line, item, attr);
        if (jinja__rpush(R, line, k, fold(R, line, x, cs))) {
            jinja_release(k);
            return NULL;
        }
        return k;
    }
    const char *p = k ? attr->u.s.s : NULL, *end = k ? p + attr->u.s.n : NULL;
    while (k) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);
        if (jinja__rpush(R, line, k, fold(R, line, jinja__attr_walk(R, line, item, p, len), cs))) {
            jinja_release(k);
            return NULL;
        }
        if (!comma) break;
        p = comma + 1;
    }
    return k;
}

/* 1 when keys[a] sorts before keys[b] (rev: after), 0 if not, -1 on error. */
static int before(rctx *R, int line, jinja_value *const *keys, size_t a, size_t b, int rev) {
    if (jinja__tick(R, line)) return -1;
    return rev ? jinja__py_order(R, line, OP_LT, keys[b], keys[a])
               : jinja__py_order(R, line, OP_LT, keys[a], keys[b]);
}

/* Stable merge sort of the indexes ord[0..n) by keys (tmp: n more). */
static int merge_sort(rctx *R, int line, jinja_value *const *keys, size_t *ord, size_t *tmp, size_t n,
                      int rev) {
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                /* the right one goes first only when strictly before: ties keep their order */
                int r = before(R, line, keys, ord[j], ord[i], rev);
                if (r < 0) return -1;
                tmp[k++] = r ? ord[j++] : ord[i++];
            }
            while (i < mid) tmp[k++] = ord[i++];
            while (j < hi) tmp[k++] = ord[j++];
        }
        memcpy(ord, tmp, n * sizeof *ord);
    }
    return 0;
}

/* items sorted by keys (both of n; keys released here), a new list. */
static jinja_value *sorted(rctx *R, int line, jinja_value *items, jinja_value **keys, int rev) {
    size_t n = items->u.l.n, *ord = NULL;
    jinja_value *out = NULL;
    if (jinja__charge(R, line, 2 * n * sizeof *ord)) goto done;
    if (n && !(ord = malloc(2 * n * sizeof *ord))) {
        jinja__nomem(R, line);
        goto done;
    }
    for (size_t i = 0; i < n; i++) ord[i] = i;
    if (n && merge_sort(R, line, keys, ord, ord + n, n, rev)) goto done; /* n == 0: ord is NULL */
    out = jinja__rnew(R, line, JV_LIST);
    for (size_t i = 0; out && i < n; i++)
        if (jinja__rpush(R, line, out, jinja__jv_ref(items->u.l.v[ord[i]]))) {
            jinja_release(out);
            out = NULL;
        }
done:
    for (size_t i = 0; i < n; i++) jinja_release(keys[i]);
    free(keys);
    free(ord);
    return out;
}

/* A key array of n, counted against max_alloc; NULL on failure. */
static jinja_value **new_keys(rctx *R, int line, size_t n) {
    if (jinja__charge(R, line, n * sizeof(jinja_value *))) return NULL;
    jinja_value **keys = calloc(n ? n : 1, sizeof *keys);
    if (!keys) jinja__nomem(R, line);
    return keys;
}

/* dictsort(case_sensitive=False, by='key', reverse=False): the (key,
 * value) pairs sorted by key or by value. */
static jinja_value *dictsort(rctx *R, int line, jinja_value *v, const cargs *A) {
    static const char *const kw[] = {"case_sensitive", "by", "reverse", NULL};
    if (jinja__check_args(R, line, A, 3, "dictsort", kw)) return NULL;
    jinja_value *cs = jinja__arg(A, 0, "case_sensitive"), *by = jinja__arg(A, 1, "by"),
                *rev = jinja__arg(A, 2, "reverse");
    int pos = 0;
    if (by && !(by->type == JV_STR && (jinja__name_is(by->u.s.s, by->u.s.n, "key") ||
                                       (pos = jinja__name_is(by->u.s.s, by->u.s.n, "value")))))
        return jinja__rerr(R, line, CK_EFORMAT,
                           "line %d: dictsort: you can only sort by either \"key\" or \"value\"", line);
    if (v->type != JV_DICT)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: dictsort: '%s' is not a mapping", line,
                           jinja__type_name(v));
    jinja_value *items = jinja__dict_items(R, line, v, 0),
                **keys = items ? new_keys(R, line, items->u.l.n) : NULL;
    if (!keys) {
        jinja_release(items);
        return NULL;
    }
    for (size_t i = 0; i < items->u.l.n; i++)
        if (!(keys[i] = fold(R, line, jinja__jv_ref(items->u.l.v[i]->u.l.v[pos]), cs && jinja__truthy(cs)))) {
            for (size_t k = 0; k < i; k++) jinja_release(keys[k]);
            free(keys);
            jinja_release(items);
            return NULL;
        }
    jinja_value *out = sorted(R, line, items, keys, rev && jinja__truthy(rev));
    jinja_release(items);
    return out;
}

/* sort(reverse=False, case_sensitive=False, attribute=None) */
static jinja_value *sort(rctx *R, int line, jinja_value *v, const cargs *A) {
    static const char *const kw[] = {"reverse", "case_sensitive", "attribute", NULL};
    if (jinja__check_args(R, line, A, 3, "sort", kw)) return NULL;
    jinja_value *rev = jinja__arg(A, 0, "reverse"), *cs = jinja__arg(A, 1, "case_sensitive"),
                *attr = jinja__arg(A, 2, "attribute");
    jinja_value *items = jinja__iter_list(R, line, v),
                **keys = items ? new_keys(R, line, items->u.l.n) : NULL;
    if (!keys) {
        jinja_release(items);
        return NULL;
    }
    for (size_t i = 0; i < items->u.l.n; i++)
        if (!(keys[i] = key_of(R, line, items->u.l.v[i], attr, 1, cs && jinja__truthy(cs)))) {
            for (size_t k = 0; k < i; k++) jinja_release(keys[k]);
            free(keys);
            jinja_release(items);
            return NULL;
        }
    jinja_value *out = sorted(R, line, items, keys, rev && jinja__truthy(rev));
    jinja_release(items);
    return out;
}

/* Python's hash() accepts it: not a list, dict or namespace, nor a tuple
 * holding one. */
static int hashable(const jinja_value *v, int depth) {
    if (depth > 256) return 0;
    if (v->type == JV_DICT || v->type == JV_NS) return 0;
    if (v->type != JV_LIST) return 1;
    if (!v->u.l.tuple) return 0;
    for (size_t i = 0; i < v->u.l.n; i++)
        if (!hashable(v->u.l.v[i], depth + 1)) return 0;
    return 1;
}

/* unique(case_sensitive=False, attribute=None): the first item of each key,
 * in their order. */
static jinja_value *unique(rctx *R, int line, jinja_value *v, const cargs *A) {
    static const char *const kw[] = {"case_sensitive", "attribute", NULL};
    if (jinja__check_args(R, line, A, 2, "unique", kw)) return NULL;
    jinja_value *cs = jinja__arg(A, 0, "case_sensitive"), *attr = jinja__arg(A, 1, "attribute");
    jinja_value *items = jinja__iter_list(R, line, v), *seen = jinja__rnew(R, line, JV_LIST),
                *out = jinja__rnew(R, line, JV_LIST);
    for (size_t i = 0; items && seen && out && i < items->u.l.n; i++) {
        jinja_value *k = key_of(R, line, items->u.l.v[i], attr, 0, cs && jinja__truthy(cs));
        if (!k) goto fail;
        if (!hashable(k, 0)) {
            jinja__rerr(R, line, CK_EFORMAT, "line %d: unique: unhashable type: '%s'", line,
                        jinja__type_name(k));
            jinja_release(k);
            goto fail;
        }
        int dup = 0;
        for (size_t j = 0; !dup && j < seen->u.l.n; j++) {
            if (jinja__tick(R, line) || (dup = jinja__py_eq(R, k, seen->u.l.v[j], 0)) < 0) {
                jinja_release(k);
                goto fail;
            }
        }
        if (dup)
            jinja_release(k);
        else if (jinja__rpush(R, line, seen, k) || jinja__rpush(R, line, out, jinja__jv_ref(items->u.l.v[i])))
            goto fail;
    }
    if (!items || !seen || !out) goto fail;
    jinja_release(items);
    jinja_release(seen);
    out->u.l.kind = LK_GEN; /* Jinja's unique is a generator */
    return out;
fail:
    jinja_release(items);
    jinja_release(seen);
    jinja_release(out);
    return NULL;
}

/* min / max(case_sensitive=False, attribute=None): the first smallest
 * (largest) item; undefined when there is none. */
static jinja_value *extreme(rctx *R, int line, jinja_value *v, const cargs *A, int is_max) {
    static const char *const kw[] = {"case_sensitive", "attribute", NULL};
    if (jinja__check_args(R, line, A, 2, is_max ? "max" : "min", kw)) return NULL;
    jinja_value *cs = jinja__arg(A, 0, "case_sensitive"), *attr = jinja__arg(A, 1, "attribute");
    jinja_value *items = jinja__iter_list(R, line, v);
    if (!items) return NULL;
    if (!items->u.l.n) {
        jinja_release(items);
        return jinja__rundef(R, line, NULL, 0);
    }
    size_t best = 0;
    jinja_value *bk = key_of(R, line, items->u.l.v[0], attr, 0, cs && jinja__truthy(cs));
    for (size_t i = 1; bk && i < items->u.l.n; i++) {
        jinja_value *k = key_of(R, line, items->u.l.v[i], attr, 0, cs && jinja__truthy(cs));
        int r = k && !jinja__tick(R, line) ? jinja__py_order(R, line, is_max ? OP_GT : OP_LT, k, bk) : -1;
        if (r < 0) {
            jinja_release(k);
            jinja_release(bk);
            bk = NULL;
        } else if (r) {
            jinja_release(bk);
            bk = k;
            best = i;
        } else {
            jinja_release(k);
        }
    }
    jinja_value *out = bk ? jinja__jv_ref(items->u.l.v[best]) : NULL;
    jinja_release(bk);
    jinja_release(items);
    return out;
}

/* The filters of this file; *handled = 0 for any other name. */
jinja_value *jinja__filter_sort(rctx *R, int line, const char *name, size_t n, jinja_value *v, const cargs *A,
                                int *handled) {
    *handled = 1;
    if (jinja__name_is(name, n, "dictsort")) return dictsort(R, line, v, A);
    if (jinja__name_is(name, n, "sort")) return sort(R, line, v, A);
    if (jinja__name_is(name, n, "unique")) return unique(R, line, v, A);
    if (jinja__name_is(name, n, "min")) return extreme(R, line, v, A, 0);
    if (jinja__name_is(name, n, "max")) return extreme(R, line, v, A, 1);
    *handled = 0;
    return NULL;
}
