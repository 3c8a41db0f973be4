/* jinja.c - the chat-template renderer's front (see jinja.h): its limits, its
 * error kinds and the values a template sees. The lexer, parser and
 * evaluator are the other jinja_*.c files (map in jinja_int.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

void jinja_limits_default(jinja_limits *l) {
    l->max_template = 1u << 20;
    l->max_depth = 64;
    l->max_output = 16u << 20;
    l->max_loop_iters = 1000000;
    l->max_steps = 20000000;
    l->max_alloc = 256u << 20;
}

const char jinja__k_unsup[] = "unsupported_chat_template";
const char jinja__k_raise[] = "chat_template_exception";
const char jinja__k_error[] = "chat_template_error";
const char jinja__k_limit[] = "chat_template_limit";
const char jinja__k_nomem[] = "out_of_memory";

void jinja__set_err(jinja_error *err, int code, const char *kind, int line, const char *fmt, va_list ap) {
    if (!err) return;
    err->code = code;
    err->kind = kind;
    err->line = line;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

void jinja__clear_err(jinja_error *err) {
    if (!err) return;
    err->code = 0;
    err->kind = "";
    err->line = 0;
    err->msg[0] = 0;
}

/* =========================================================================
 * values */

jinja_value *jinja__jv_ref(jinja_value *v) {
    if (v && v->refs >= 0) v->refs++;
    return v;
}

jinja_value *jinja_ref(jinja_value *v) { return jinja__jv_ref(v); }

static void jv_free_contents(jinja_value *v) {
    size_t i;
    switch (v->type) {
    case JV_STR:
    case JV_UNDEF:
        free(v->u.s.s);
        free(v->u.s.sp);
        break;
    case JV_LIST:
        for (i = 0; i < v->u.l.n; i++) jinja_release(v->u.l.v[i]);
        free(v->u.l.v);
        break;
    case JV_DICT:
    case JV_NS:
        for (i = 0; i < v->u.d.n; i++) {
            free(v->u.d.k[i]);
            jinja_release(v->u.d.v[i]);
        }
        free(v->u.d.k);
        free(v->u.d.kn);
        free(v->u.d.ki);
        free(v->u.d.v);
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

jinja_value *jinja__jv_new(int type) {
    jinja_value *v = calloc(1, sizeof *v);
    if (v) {
        v->type = type;
        v->refs = 1;
    }
    return v;
}

jinja_value *jinja_none(void) { return jinja__jv_new(JV_NONE); }
jinja_value *jinja_bool(int b) {
    jinja_value *v = jinja__jv_new(JV_BOOL);
    if (v) v->u.b = !!b;
    return v;
}
jinja_value *jinja_int(long long i) {
    jinja_value *v = jinja__jv_new(JV_INT);
    if (v) v->u.i = i;
    return v;
}
jinja_value *jinja_float(double f) {
    jinja_value *v = jinja__jv_new(JV_FLOAT);
    if (v) v->u.f = f;
    return v;
}
/* A string of the template's own (no data bytes). */
jinja_value *jinja__jv_str_plain(const char *s, size_t n) {
    jinja_value *v = jinja__jv_new(JV_STR);
    if (!v) return NULL;
    v->u.s.s = malloc(n + 1);
    if (!v->u.s.s) {
        free(v);
        return NULL;
    }
    if (n) memcpy(v->u.s.s, s, n);
    v->u.s.s[n] = 0;
    v->u.s.n = n;
    return v;
}
jinja_value *jinja_str(const char *s, size_t n) {
    jinja_value *v = jinja__jv_str_plain(s, n);
    if (v && n) {
        v->u.s.sp = malloc(2 * sizeof *v->u.s.sp);
        if (!v->u.s.sp) {
            jinja_release(v);
            return NULL;
        }
        v->u.s.sp[0] = 0;
        v->u.s.sp[1] = n;
        v->u.s.nsp = 1;
    }
    return v;
}
jinja_value *jinja_str_trusted(const char *s, size_t n) { return jinja__jv_str_plain(s, n); }
jinja_value *jinja_list(void) { return jinja__jv_new(JV_LIST); }
jinja_value *jinja_dict(void) {
    jinja_value *v = jinja__jv_new(JV_DICT);
    if (v) v->dkeys = 1;
    return v;
}

int jinja_list_append(jinja_value *list, jinja_value *item) {
    if (!item) return CK_ENOMEM;
    if (!list || list->type != JV_LIST) {
        jinja_release(item);
        return CK_EINVAL;
    }
    if (list->u.l.n == list->u.l.cap) {
        size_t nc = list->u.l.cap ? list->u.l.cap * 2 : 4;
        jinja_value **nv = realloc(list->u.l.v, nc * sizeof *nv);
        if (!nv) {
            jinja_release(item);
            return CK_ENOMEM;
        }
        list->u.l.v = nv;
        list->u.l.cap = nc;
    }
    list->u.l.v[list->u.l.n++] = item;
    return 0;
}

/* Index of the key k[0..kn) in a dict or namespace, a string (ki 0) or an
 * int's digits (ki 1), or -1. Linear: chat dicts are small. */
long jinja__dict_find_k(const jinja_value *d, const char *k, size_t kn, int ki) {
    for (size_t i = 0; i < d->u.d.n; i++)
        if (d->u.d.kn[i] == kn && d->u.d.ki[i] == ki && memcmp(d->u.d.k[i], k, kn) == 0) return (long)i;
    return -1;
}

/* Index of the string key k, or -1. */
long jinja__dict_find(const jinja_value *d, const char *k, size_t kn) {
    return jinja__dict_find_k(d, k, kn, 0);
}

/* Index of the key value key (a string, or a number equal to an int: Python's
 * 512.0 and True find 512 and 1), or -1. */
long jinja__dict_find_v(const jinja_value *d, const jinja_value *key) {
    if (key->type == JV_STR) return jinja__dict_find_k(d, key->u.s.s, key->u.s.n, 0);
    double f = key->type == JV_FLOAT ? key->u.f : 0;
    if (key->type == JV_INT || key->type == JV_BOOL ||
        (key->type == JV_FLOAT && f == f && f >= -9e18 && f <= 9e18 && f == (double)(long long)f)) {
        char t[24];
        int n = snprintf(t, sizeof t, "%lld",
                         key->type == JV_FLOAT ? (long long)f
                         : key->type == JV_INT ? key->u.i
                                               : key->u.b);
        return jinja__dict_find_k(d, t, (size_t)n, 1);
    }
    return -1;
}

int jinja_dict_set(jinja_value *dict, const char *key, size_t kn, jinja_value *val) {
    return jinja__dict_put(dict, key, kn, 0, val);
}

/* jinja_dict_set of a string key (ki 0) or an int's digits (ki 1). */
int jinja__dict_put(jinja_value *dict, const char *key, size_t kn, int ki, jinja_value *val) {
    if (!val) return CK_ENOMEM;
    if (!dict || (dict->type != JV_DICT && dict->type != JV_NS) || (!key && kn)) {
        jinja_release(val);
        return CK_EINVAL;
    }
    long at = jinja__dict_find_k(dict, key, kn, ki);
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
        unsigned char *ni = realloc(dict->u.d.ki, nc * sizeof *ni);
        if (ni) dict->u.d.ki = ni;
        jinja_value **nv = realloc(dict->u.d.v, nc * sizeof *nv);
        if (nv) dict->u.d.v = nv;
        if (!nk || !nl || !ni || !nv) {
            jinja_release(val);
            return CK_ENOMEM;
        }
        dict->u.d.cap = nc;
    }
    char *k = malloc(kn + 1);
    if (!k) {
        jinja_release(val);
        return CK_ENOMEM;
    }
    if (kn) memcpy(k, key, kn);
    k[kn] = 0;
    dict->u.d.k[dict->u.d.n] = k;
    dict->u.d.kn[dict->u.d.n] = kn;
    dict->u.d.ki[dict->u.d.n] = (unsigned char)ki;
    dict->u.d.v[dict->u.d.n] = val;
    dict->u.d.n++;
    return 0;
}

int jinja__dict_set_cstr(jinja_value *d, const char *key, jinja_value *val) {
    return jinja_dict_set(d, key, strlen(key), val);
}

int jinja_chat_vars(const jinja_message *msgs, size_t n, const char *bos, const char *eos,
                    int add_generation_prompt, jinja_value **out) {
    *out = NULL;
    if (n && !msgs) return CK_EINVAL;
    jinja_value *vars = jinja_dict(), *list = jinja_list();
    int rc = vars && list ? 0 : CK_ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            rc = CK_EINVAL;
            break;
        }
        jinja_value *m = jinja_dict();
        if (!m) {
            rc = CK_ENOMEM;
            break;
        }
        rc = jinja__dict_set_cstr(m, "role", jinja_str(msgs[i].role, strlen(msgs[i].role)));
        if (rc == 0)
            rc = jinja__dict_set_cstr(m, "content", jinja_str(msgs[i].content, strlen(msgs[i].content)));
        if (rc == 0)
            rc = jinja_list_append(list, m);
        else
            jinja_release(m);
    }
    if (rc == 0) {
        rc = jinja__dict_set_cstr(vars, "messages", list);
        list = NULL;
    }
    /* the vocabulary's own marker texts: trusted, as template text */
    if (rc == 0)
        rc =
            jinja__dict_set_cstr(vars, "bos_token", jinja_str_trusted(bos ? bos : "", bos ? strlen(bos) : 0));
    if (rc == 0)
        rc =
            jinja__dict_set_cstr(vars, "eos_token", jinja_str_trusted(eos ? eos : "", eos ? strlen(eos) : 0));
    if (rc == 0) rc = jinja__dict_set_cstr(vars, "add_generation_prompt", jinja_bool(add_generation_prompt));
    jinja_release(list);
    if (rc) {
        jinja_release(vars);
        return rc;
    }
    *out = vars;
    return 0;
}
