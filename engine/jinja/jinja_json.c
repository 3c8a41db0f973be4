/* jinja_json.c - the from_json filter: a JSON text to template values, as
 * Python's json.loads reads it (DeepSeek's templates parse a tool call's
 * string arguments with it).
 *
 * Python's rules, kept here: whitespace is space, tab, CR and LF only; a
 * number without fraction or exponent is an int, else a float (strtod
 * rounds correctly, as Python's float() does; 1e400 is inf); NaN, Infinity
 * and -Infinity are read; a string may not hold a raw control character;
 * \uXXXX escapes pair surrogates; an object keeps its first key's place
 * and its last value for a repeated key; anything after the value but
 * whitespace is an error ("Extra data"). Where Python would make what a
 * template value cannot hold it is an error instead: an int beyond 64 bits,
 * a lone surrogate (no UTF-8 for it).
 *
 * The text is data when the string was (a job's arguments): its strings and
 * keys are data too, so from_json cannot turn a caller's text into template
 * text. Every value costs a step and its bytes (max_steps, max_alloc);
 * nesting is bounded by max_depth. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

typedef struct jp {
    rctx *R;
    int line;
    const char *s;
    size_t n, i;
    int data; /* the source string is (partly) data */
} jp;

static jinja_value *bad(jp *p, const char *what) {
    return jinja__rerr(p->R, p->line, CK_EFORMAT, "line %d: from_json: %s at char %zu", p->line, what, p->i);
}

static void ws(jp *p) {
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int lit(jp *p, const char *w) {
    size_t k = strlen(w);
    if (p->n - p->i < k || memcmp(p->s + p->i, w, k)) return 0;
    p->i += k;
    return 1;
}

static int hex4(jp *p, unsigned *out) {
    if (p->n - p->i < 4) return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i + k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + (unsigned)d;
    }
    p->i += 4;
    *out = v;
    return 0;
}

/* A string's text after its opening quote, into b (decoded): 0, 1 when
 * the error is reported, or the buffer's CK_E* (too long, out of memory). */
static int str_body(jp *p, sbuf *b) {
    for (;;) {
        size_t run = p->i;
        while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' && (unsigned char)p->s[p->i] >= 0x20)
            p->i++;
        int rc = p->i > run ? jinja__sb_add(b, p->s + run, p->i - run) : 0;
        if (rc) return rc;
        if (p->i >= p->n) return bad(p, "unterminated string"), 1;
        char c = p->s[p->i];
        if (c == '"') {
            p->i++;
            return 0;
        }
        if (c != '\\') return bad(p, "invalid control character in a string"), 1;
        if (++p->i >= p->n) return bad(p, "unterminated string"), 1;
        char e = p->s[p->i++], one = 0;
        switch (e) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p, &cp)) return bad(p, "invalid \\uXXXX escape"), 1;
            if (cp >= 0xD800 && cp < 0xDC00) {
                size_t at = p->i;
                if (p->n - p->i >= 2 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                    p->i += 2;
                    if (hex4(p, &lo)) return bad(p, "invalid \\uXXXX escape"), 1;
                    if (lo >= 0xDC00 && lo < 0xE000)
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else
                        p->i = at;
                }
            }
            if (cp >= 0xD800 && cp < 0xE000) return bad(p, "a lone surrogate (no UTF-8 for it)"), 1;
            char u[4];
            if ((rc = jinja__sb_add(b, u, jinja__utf8_enc(cp, u)))) return rc;
            continue;
        }
        default: return bad(p, "invalid escape"), 1;
        }
        if ((rc = jinja__sb_ch(b, one))) return rc;
    }
}

static jinja_value *string(jp *p) {
    sbuf b = jinja__sb_for(p->R);
    int rc = str_body(p, &b);
    if (rc == 0) rc = jinja__sb_taint_from(&b, 0, p->data);
    if (rc) {
        jinja__sb_free(&b);
        if (rc < 0) jinja__sb_fail(p->R, p->line, rc);
        return NULL;
    }
    return jinja__sb_take(p->R, p->line, &b);
}

static jinja_value *number(jp *p) {
    size_t at = p->i;
    int isf = 0;
    if (p->s[p->i] == '-') p->i++;
    if (p->i < p->n && p->s[p->i] == '0') {
        p->i++;
    } else if (p->i < p->n && p->s[p->i] >= '1' && p->s[p->i] <= '9') {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    } else {
        p->i = at;
        return bad(p, "expecting value");
    }
    /* a fraction or exponent without digits ends the number before it, as
     * Python's scanner does (then "Extra data" or a missing delimiter) */
    if (p->n - p->i >= 2 && p->s[p->i] == '.' && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9') {
        isf = 1;
        p->i++;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        size_t k = p->i + 1;
        if (k < p->n && (p->s[k] == '+' || p->s[k] == '-')) k++;
        if (k < p->n && p->s[k] >= '0' && p->s[k] <= '9') {
            isf = 1;
            while (k < p->n && p->s[k] >= '0' && p->s[k] <= '9') k++;
            p->i = k;
        }
    }
    size_t len = p->i - at;
    char tmp[64], *buf = tmp;
    if (len >= sizeof tmp) { /* strtod wants a NUL: the long ones on the heap, charged */
        if (jinja__charge(p->R, p->line, len + 1)) return NULL;
        buf = malloc(len + 1);
        if (!buf) return jinja__nomem(p->R, p->line);
    }
    memcpy(buf, p->s + at, len);
    buf[len] = 0;
    jinja_value *v;
    if (isf) {
        v = jinja__mk_float(p->R, p->line, strtod(buf, NULL));
    } else {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        v = errno == ERANGE ? (p->i = at, bad(p, "an integer beyond 64 bits"))
                            : jinja__mk_int(p->R, p->line, x);
    }
    if (buf != tmp) free(buf);
    return v;
}

static jinja_value *value(jp *p, int depth);

static jinja_value *array(jp *p, int depth) {
    jinja_value *l = jinja__rnew(p->R, p->line, JV_LIST);
    if (!l) return NULL;
    ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return l;
    }
    for (;;) {
        jinja_value *x = value(p, depth);
        if (!x || jinja__rpush(p->R, p->line, l, x)) break;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == ']') {
            p->i++;
            return l;
        }
        bad(p, "expecting ',' delimiter");
        break;
    }
    jinja_release(l);
    return NULL;
}

static jinja_value *object(jp *p, int depth) {
    jinja_value *d = jinja__rnew(p->R, p->line, JV_DICT);
    if (!d) return NULL;
    d->dkeys = p->data;
    ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        return d;
    }
    for (;;) {
        ws(p);
        if (p->i >= p->n || p->s[p->i] != '"') {
            bad(p, "expecting property name enclosed in double quotes");
            break;
        }
        p->i++;
        jinja_value *k = string(p);
        if (!k) break;
        ws(p);
        if (p->i >= p->n || p->s[p->i] != ':') {
            jinja_release(k);
            bad(p, "expecting ':' delimiter");
            break;
        }
        p->i++;
        jinja_value *x = value(p, depth);
        /* a key is looked up among the others: count those steps */
        p->R->steps += d->u.d.n;
        int rc = x ? jinja__rset(p->R, p->line, d, k->u.s.s, k->u.s.n, x) : -1;
        jinja_release(k);
        if (rc) break;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            return d;
        }
        bad(p, "expecting ',' delimiter");
        break;
    }
    jinja_release(d);
    return NULL;
}

static jinja_value *value(jp *p, int depth) {
    if (jinja__tick(p->R, p->line)) return NULL;
    if (depth > p->R->lim->max_depth)
        return jinja__rerr(p->R, p->line, CK_ERANGE, "line %d: from_json: nesting deeper than %d", p->line,
                           p->R->lim->max_depth);
    ws(p);
    if (p->i >= p->n) return bad(p, "expecting value");
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        p->i++;
        return c == '{' ? object(p, depth + 1) : array(p, depth + 1);
    }
    if (c == '"') {
        p->i++;
        return string(p);
    }
    if (lit(p, "null")) return jinja__rnew(p->R, p->line, JV_NONE);
    if (lit(p, "true")) return jinja__mk_bool(p->R, p->line, 1);
    if (lit(p, "false")) return jinja__mk_bool(p->R, p->line, 0);
    if (lit(p, "NaN")) return jinja__mk_float(p->R, p->line, NAN);
    if (lit(p, "Infinity")) return jinja__mk_float(p->R, p->line, INFINITY);
    if (lit(p, "-Infinity")) return jinja__mk_float(p->R, p->line, -INFINITY);
    return number(p);
}

jinja_value *jinja__from_json(rctx *R, int line, jinja_value *v, const cargs *A) {
    if (jinja__check_args(R, line, A, 0, "from_json", NULL)) return NULL;
    if (v->type != JV_STR)
        return jinja__rerr(R, line, CK_EFORMAT, "line %d: from_json: the JSON object must be str, not %s",
                           line, jinja__type_name(v));
    jp p = {R, line, v->u.s.s, v->u.s.n, 0, v->u.s.nsp > 0};
    jinja_value *x = value(&p, 0);
    if (!x) return NULL;
    ws(&p);
    if (p.i < p.n) {
        jinja_release(x);
        return bad(&p, "extra data");
    }
    return x;
}
