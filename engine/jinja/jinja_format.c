/* jinja_format.c - str.format(), Python's format mini-language (see
 * jinja_int.h).
 *
 * The format string: literal text with `{{` and `}}` for braces, and
 * replacement fields `{name!conv:spec}`: the name an index (or none, for
 * the next one), a keyword, then `.attr` and `[key]` steps (Jinja's sandbox
 * reads them as it reads `x.attr` and `x[key]`); conv `r` or `s`; the spec
 * may hold fields of its own, one level deep, as Python's.
 *
 * The spec, [[fill]align][sign][#][0][width][,|_][.precision][type], as
 * Python 3.11 applies it to a str (types s), an int or bool (b c d o x X,
 * and the float types), a float (e E f F g G %, and none); any other value
 * takes only an empty spec. What is refused as unsupported (not rendered
 * differently): the n type, the z flag, `!a`, zero padding with a grouping,
 * `#` on a float without a type, a float's precision over 1000, and
 * .format of a |safe string (markupsafe escapes the arguments). Widths are
 * bounded by max_output. Python's errors (an index out of range, a bad spec)
 * are chat_template_error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

typedef struct fspec {
    unsigned fill; /* a code point */
    int align;     /* 0 (the type's default), '<', '>', '=', '^' */
    int sign;      /* 0, '+', '-', ' ' */
    int alt, zero, group;
    long long width, prec; /* -1: not given */
    int type;              /* 0: none */
} fspec;

typedef struct fmt_ctx {
    const cargs *A;
    int auto_next; /* the next automatic index */
    int manual;    /* a field named by its index was met */
} fmt_ctx;

/* c is one of set's characters (never its terminating NUL) */
static int one_of(int c, const char *set) { return c && strchr(set, c) != NULL; }

static void *ferr(rctx *R, int line, const char *what) {
    return jinja__rerr(R, line, CK_EFORMAT, "line %d: format: %s", line, what);
}

/* Digits at s[*i..n) as a number (at most 18 digits, else -2); -1 when
 * there are none. */
static long long digits(const char *s, size_t *i, size_t n) {
    long long v = -1;
    size_t k = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        int d = s[(*i)++] - '0';
        /* the 19th digit would overflow; the rest are consumed, not summed */
        if (++k > 18)
            v = -2;
        else
            v = (v < 0 ? 0 : v) * 10 + d;
    }
    return v;
}

static int parse_spec(rctx *R, int line, const char *s, size_t n, fspec *f) {
    memset(f, 0, sizeof *f);
    f->fill = ' ';
    f->width = f->prec = -1;
    size_t i = 0, len = 0;
    unsigned c0 = n ? jinja__utf8_dec((const unsigned char *)s, 0, n, &len) : 0;
    int filled = 0;
    if (n > len && one_of(s[len], "<>=^")) {
        f->fill = c0;
        f->align = s[len];
        i = len + 1;
        filled = 1;
    } else if (n && one_of(s[0], "<>=^")) {
        f->align = s[0];
        i = 1;
    }
    if (i < n && one_of(s[i], "+- ")) f->sign = s[i++];
    if (i < n && s[i] == 'z')
        return jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: format: the z flag is not supported", line),
               -1;
    if (i < n && s[i] == '#') f->alt = 1, i++;
    if (i < n && s[i] == '0' && !filled) f->zero = 1, i++; /* else a digit of the width */
    long long w = digits(s, &i, n);
    if (w == -2 || w > (long long)R->lim->max_output) {
        jinja__sb_fail(R, line, CK_ETOOLONG);
        return -1;
    }
    f->width = w;
    if (i < n && (s[i] == ',' || s[i] == '_')) f->group = s[i++];
    if (i < n && s[i] == '.') {
        i++;
        f->prec = digits(s, &i, n);
        if (f->prec == -1) return ferr(R, line, "format specifier missing precision"), -1;
        if (f->prec == -2 || f->prec > (long long)R->lim->max_output) {
            jinja__sb_fail(R, line, CK_ETOOLONG);
            return -1;
        }
    }
    if (i < n && !(f->type = (unsigned char)s[i++])) return ferr(R, line, "invalid format specifier"), -1;
    if (i < n) return ferr(R, line, "invalid format specifier"), -1;
    if (f->type == 'n')
        return jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: format: the n type is not supported", line),
               -1;
    if (f->zero && f->group)
        return jinja__rerr(R, line, CK_EUNSUPPORTED,
                           "line %d: format: zero padding with a grouping is not supported", line),
               -1;
    if (f->zero) f->fill = '0'; /* and, for a number without an align, '=' (format_value) */
    return 0;
}

/* Insert the grouping separator into the leading digit run of t[from..):
 * every 3 digits (every 4 for `_` in b, o, x, X). */
static int group_digits(sbuf *t, size_t from, int sep, int every) {
    size_t end = from;
    while (end < t->n && ((t->p[end] >= '0' && t->p[end] <= '9') ||
                          (every == 4 && ((t->p[end] | 32) >= 'a' && (t->p[end] | 32) <= 'f'))))
        end++;
    size_t nd = end - from, ns = nd ? (nd - 1) / (size_t)every : 0;
    if (!ns) return 0;
    size_t old = t->n;
    for (size_t k = 0; k < ns; k++) {
        int rc = jinja__sb_ch(t, ' ');
        if (rc) return rc;
    }
    memmove(t->p + end + ns, t->p + end, old - end);
    t->p[t->n] = 0;
    /* spread the digits right to left, a separator every `every` */
    size_t src = end, dst = end + ns, cnt = 0;
    while (src > from) {
        t->p[--dst] = t->p[--src];
        if (++cnt % (size_t)every == 0 && src > from) t->p[--dst] = (char)sep;
    }
    return 0;
}

/* An int's digits (without sign) in base for type into t. */
static int int_digits(sbuf *t, unsigned long long u, int type, int alt) {
    char buf[80];
    int base = type == 'b' ? 2 : type == 'o' ? 8 : type == 'x' || type == 'X' ? 16 : 10;
    const char *dig = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    int k = (int)sizeof buf;
    do {
        buf[--k] = dig[u % (unsigned)base];
        u /= (unsigned)base;
    } while (u);
    int rc = 0;
    if (alt && base != 10) {
        char pre[3] = {'0', (char)(base == 2 ? 'b' : base == 8 ? 'o' : type), 0};
        rc = jinja__sb_cstr(t, pre);
    }
    return rc ? rc : jinja__sb_add(t, buf + k, sizeof buf - (size_t)k);
}

/* Python's format() of a float with a float type (or none) into t, sign
 * excluded (x >= 0 or NaN). */
static int float_body(rctx *R, int line, sbuf *t, double x, const fspec *f) {
    int type = f->type;
    long long prec = f->prec < 0 ? 6 : f->prec;
    if (prec > 1000)
        return jinja__rerr(R, line, CK_EUNSUPPORTED,
                           "line %d: format: a precision over 1000 is not supported", line),
               R->failed;
    char fmt[16], *buf = malloc(1400);
    if (!buf) return CK_ENOMEM;
    int rc = 0;
    if (!type && f->prec < 0) {
        jinja__py_float(x, buf, 1400);
    } else if (!type) {
        /* none with a precision: 'g' that switches to exponent notation at
         * exp >= p - 1 and keeps a digit after the point */
        if (f->alt) {
            free(buf);
            return jinja__rerr(R, line, CK_EUNSUPPORTED,
                               "line %d: format: '#' without a type is not supported", line),
                   R->failed;
        }
        long long p = prec ? prec : 1;
        snprintf(buf, 1400, "%.*e", (int)(p - 1), x);
        const char *e = strchr(buf, 'e');
        int ex = e ? atoi(e + 1) : 0;
        if (isfinite(x) && ex >= -4 && ex < p - 1) {
            /* p - 1 - ex >= 1 decimals: trailing zeros go, one digit stays */
            snprintf(buf, 1400, "%.*f", (int)(p - 1 - ex), x);
            size_t L = strlen(buf), dot = (size_t)(strchr(buf, '.') - buf);
            while (L > dot + 2 && buf[L - 1] == '0') buf[--L] = 0;
        } else if (isfinite(x)) {
            /* d.ddde+XX: trailing zeros of the significand go, and a bare point */
            char *ep = strchr(buf, 'e'), tail[16];
            snprintf(tail, sizeof tail, "%s", ep);
            size_t L = (size_t)(ep - buf);
            while (L > 1 && buf[L - 1] == '0') L--;
            if (L && buf[L - 1] == '.') L--;
            snprintf(buf + L, 1400 - L, "%s", tail);
        }
    } else {
        double v = type == '%' ? x * 100 : x;
        snprintf(fmt, sizeof fmt, "%%%s.*%c", f->alt ? "#" : "", type == '%' ? 'f' : type);
        snprintf(buf, 1400, fmt, (int)prec, v);
        if (type == '%') strcat(buf, "%");
    }
    rc = jinja__sb_cstr(t, buf);
    free(buf);
    return rc;
}

/* format(v, spec) appended to out. */
static int format_value(rctx *R, int line, sbuf *out, jinja_value *v, const char *spec, size_t sn,
                        int spec_data) {
    fspec f;
    if (sn == 0) return jinja__py_str(R, out, v, 0);
    if (parse_spec(R, line, spec, sn, &f)) return R->failed;
    int num = v->type == JV_INT || v->type == JV_BOOL || v->type == JV_FLOAT;
    if (!num && v->type != JV_STR)
        return jinja__rerr(R, line, CK_EFORMAT,
                           "line %d: format: unsupported format string passed to %s.__format__", line,
                           jinja__type_name(v)),
               R->failed;
    sbuf t = jinja__sb_for(R);
    int rc = 0, neg = 0;
    size_t body_at = 0; /* where the digits start, after the sign and prefix */
    if (v->type == JV_STR) {
        if (f.type && f.type != 's') {
            ferr(R, line, "unknown format code for object of type 'str'");
            return R->failed;
        }
        if (f.sign || f.alt || f.group || f.align == '=') {
            ferr(R, line, "sign, '#', grouping and '=' are not allowed in a string format specifier");
            return R->failed;
        }
        size_t cut = f.prec >= 0 ? jinja__utf8_offset(v->u.s.s, v->u.s.n, (size_t)f.prec) : v->u.s.n;
        rc = jinja__sb_addv(&t, v, 0, cut);
        if (!f.align) f.align = '<';
    } else if (v->type != JV_FLOAT && (!f.type || one_of(f.type, "bcdoxX"))) {
        long long x = jinja__num_i(v);
        if (f.prec >= 0) {
            ferr(R, line, "precision not allowed in integer format specifier");
            return R->failed;
        }
        unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        neg = x < 0;
        if (f.type == 'c') {
            char e[4];
            if (x < 0 || x > 0x10ffff || f.sign || f.alt || f.group) {
                ferr(R, line, "%c arg not in range or with a sign, '#' or grouping");
                return R->failed;
            }
            rc = jinja__sb_add(&t, e, jinja__utf8_enc((unsigned)x, e));
            neg = 0;
        } else {
            rc = int_digits(&t, u, f.type, f.alt);
            body_at = f.alt && f.type && f.type != 'd' ? 2 : 0;
            if (rc == 0 && f.group) rc = group_digits(&t, body_at, f.group, one_of(f.type, "boxX") ? 4 : 3);
        }
    } else if (!f.type || one_of(f.type, "eEfFgG%")) {
        double x = jinja__num_f(v);
        neg = !isnan(x) && signbit(x);
        rc = float_body(R, line, &t, fabs(x), &f); /* the sign apart; a NaN has none */
        if (rc == 0 && f.group) rc = group_digits(&t, 0, f.group, 3);
    } else {
        jinja__sb_free(&t);
        ferr(R, line, "unknown format code for a number");
        return R->failed;
    }
    if (rc) {
        jinja__sb_free(&t);
        return rc;
    }
    if (!f.align) f.align = f.zero ? '=' : '>';
    /* sign, then the padding around (or, for '=', inside) the body */
    char sign[2] = {0, 0};
    if (neg)
        sign[0] = '-';
    else if (v->type != JV_STR && (f.sign == '+' || f.sign == ' '))
        sign[0] = (char)f.sign;
    size_t cps = jinja__utf8_count(t.p ? t.p : "", t.n) + (sign[0] != 0);
    long long padn = f.width > (long long)cps ? f.width - (long long)cps : 0;
    long long left = f.align == '<' ? 0 : f.align == '^' ? padn / 2 : padn, right = padn - left;
    char fill[4];
    size_t fl = jinja__utf8_enc(f.fill, fill);
    size_t at = out->n;
    if (f.align == '=') {
        rc = jinja__sb_cstr(out, sign);
        if (rc == 0) rc = jinja__sb_add(out, t.p ? t.p : "", body_at);
    }
    for (long long k = 0; rc == 0 && k < left; k++) rc = jinja__sb_add(out, fill, fl);
    if (rc == 0 && spec_data) rc = jinja__sb_taint_from(out, at, 1);
    if (rc == 0 && f.align != '=') rc = jinja__sb_cstr(out, sign);
    jinja_value *body = NULL;
    if (rc == 0) {
        size_t skip = f.align == '=' ? body_at : 0;
        body = jinja__sb_take(R, line, &t);
        if (!body) rc = R->failed;
        if (rc == 0) rc = jinja__sb_addv(out, body, skip, body->u.s.n - skip);
    }
    jinja_release(body);
    jinja__sb_free(&t);
    at = out->n;
    for (long long k = 0; rc == 0 && k < right; k++) rc = jinja__sb_add(out, fill, fl);
    if (rc == 0 && spec_data) rc = jinja__sb_taint_from(out, at, 1);
    return rc;
}

static int expand(rctx *R, int line, sbuf *out, const jinja_value *fs, size_t from, size_t to, fmt_ctx *C,
                  int depth);

/* The value the field name s[0..n) names (a new reference), or NULL. As
 * Python's string.Formatter, which Jinja's sandbox formats with: an empty
 * name takes the next argument, a name of digits that one, and only these
 * two count as automatic and manual numbering; any other name reads its
 * first part (an index when digits, else a keyword, "" included) and
 * then its steps. */
static jinja_value *field_value(rctx *R, int line, const char *s, size_t n, fmt_ctx *C) {
    size_t i = 0, k = 0;
    while (i < n && s[i] != '.' && s[i] != '[') i++;
    long long idx = digits(s, &k, i);
    jinja_value *v = NULL;
    if (n == 0) {
        if (C->manual)
            return ferr(R, line,
                        "cannot switch from manual field specification to automatic field numbering");
        idx = C->auto_next++;
    } else if (k == n) {
        if (C->auto_next > 0)
            return ferr(R, line,
                        "cannot switch from automatic field numbering to manual field specification");
        C->manual = 1;
    }
    if (n == 0 || (i && k == i)) {
        if (idx < 0 || idx >= C->A->npos)
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: format: replacement index %lld out of range",
                               line, idx);
        v = jinja__jv_ref(C->A->pos[idx]);
    } else {
        for (int a = 0; a < C->A->nkw && !v; a++)
            if (C->A->kl[a] == i && memcmp(C->A->kn[a], s, i) == 0) v = jinja__jv_ref(C->A->kv[a]);
        if (!v)
            return jinja__rerr(R, line, CK_EFORMAT, "line %d: format: no keyword argument '%.*s'", line,
                               (int)(i > 64 ? 64 : i), s);
    }
    while (v && i < n) {
        size_t j = i + 1, e;
        jinja_value *nx;
        if (s[i] == '.') {
            for (e = j; e < n && s[e] != '.' && s[e] != '['; e++)
                ;
            nx = e > j ? jinja__get_attr(R, line, v, s + j, e - j)
                       : ferr(R, line, "empty attribute in format string");
            i = e;
        } else {
            for (e = j; e < n && s[e] != ']'; e++)
                ;
            if (e >= n || e == j) {
                jinja_release(v);
                return ferr(R, line, "missing ']' or empty index in format string");
            }
            size_t q = j;
            long long ix = digits(s, &q, e);
            jinja_value *key =
                q == e && ix >= 0 ? jinja__mk_int(R, line, ix) : jinja__rstr(R, line, s + j, e - j);
            nx = key ? jinja__get_item(R, line, v, key) : NULL;
            jinja_release(key);
            i = e + 1;
            if (i < n && s[i] != '.' && s[i] != '[') {
                jinja_release(nx);
                nx = ferr(R, line, "only '.' or '[' may follow ']' in format field specifier");
            }
        }
        jinja_release(v);
        v = nx;
    }
    return v;
}

/* One replacement field fs[from..to) (inside the braces) appended to out. */
static int field(rctx *R, int line, sbuf *out, const jinja_value *fs, size_t from, size_t to, fmt_ctx *C,
                 int depth) {
    const char *s = fs->u.s.s;
    size_t i = from;
    while (i < to && s[i] != ':' && s[i] != '!') {
        if (s[i] == '{') return ferr(R, line, "unexpected '{' in field name"), R->failed;
        if (s[i] == '[')
            while (i < to && s[i] != ']') i++;
        if (i < to) i++;
    }
    jinja_value *v = field_value(R, line, s + from, i - from, C);
    if (!v) return R->failed;
    int conv = 0, rc = 0;
    if (i < to && s[i] == '!') {
        conv = i + 1 < to ? s[i + 1] : -1;
        i += 2;
        if (i < to && s[i] != ':') conv = -1;
    }
    if (conv && conv != 'r' && conv != 's') {
        jinja_release(v);
        if (conv == 'a')
            return jinja__rerr(R, line, CK_EUNSUPPORTED, "line %d: format: !a is not supported", line),
                   R->failed;
        return ferr(R, line, "unknown conversion specifier"), R->failed;
    }
    if (conv) { /* !s: str(v); !r: repr(v); then formatted as a string */
        sbuf c = jinja__sb_for(R);
        rc = conv == 's' ? jinja__py_str(R, &c, v, 0) : jinja__py_repr(R, &c, v, 0);
        jinja_release(v);
        v = rc ? NULL : jinja__sb_take(R, line, &c);
        jinja__sb_free(&c);
        if (!v) return rc ? jinja__sb_fail(R, line, rc) : R->failed;
    }
    /* the spec, its own fields expanded first */
    jinja_value *spec = NULL;
    if (i < to && s[i] == ':') {
        i++;
        if (memchr(s + i, '{', to - i)) {
            if (depth >= 1) {
                jinja_release(v);
                return ferr(R, line, "max string recursion exceeded"), R->failed;
            }
            sbuf sb = jinja__sb_for(R);
            rc = expand(R, line, &sb, fs, i, to, C, depth + 1);
            spec = rc ? NULL : jinja__sb_take(R, line, &sb);
            jinja__sb_free(&sb);
        } else {
            spec = jinja__rsub(R, line, fs, i, to - i);
        }
        if (!spec) {
            jinja_release(v);
            return rc ? rc : R->failed;
        }
    }
    rc = format_value(R, line, out, v, spec ? spec->u.s.s : "", spec ? spec->u.s.n : 0,
                      spec && spec->u.s.nsp > 0);
    jinja_release(spec);
    jinja_release(v);
    return rc;
}

/* The format string fs[from..to) expanded into out. */
static int expand(rctx *R, int line, sbuf *out, const jinja_value *fs, size_t from, size_t to, fmt_ctx *C,
                  int depth) {
    const char *s = fs->u.s.s;
    size_t i = from, run = from;
    int rc = 0;
    while (rc == 0 && i < to) {
        if (s[i] != '{' && s[i] != '}') {
            i++;
            continue;
        }
        rc = jinja__sb_addv(out, fs, run, i - run);
        if (rc) break;
        if (i + 1 < to && s[i + 1] == s[i]) { /* {{ or }} */
            rc = jinja__sb_addv(out, fs, i, 1);
            i += 2;
            run = i;
            continue;
        }
        if (s[i] == '}') return ferr(R, line, "single '}' encountered in format string"), R->failed;
        size_t j = i + 1;
        for (int count = 1; j < to; j++) {
            if (s[j] == '{') count++;
            if (s[j] == '}' && --count == 0) break;
        }
        if (j >= to) return ferr(R, line, "expected '}' before end of string"), R->failed;
        if (jinja__tick(R, line)) return R->failed;
        rc = field(R, line, out, fs, i + 1, j, C, depth);
        i = j + 1;
        run = i;
    }
    if (rc == 0) rc = jinja__sb_addv(out, fs, run, i - run);
    return rc;
}

/* s.format(*args, **kwargs) */
jinja_value *jinja__str_format(rctx *R, int line, const jinja_value *s, const cargs *A) {
    if (s->safe)
        return jinja__rerr(
            R, line, CK_EUNSUPPORTED,
            "line %d: format of a |safe string (markupsafe escapes the arguments) is not supported", line);
    fmt_ctx C = {A, 0, 0};
    sbuf b = jinja__sb_for(R);
    int rc = expand(R, line, &b, s, 0, s->u.s.n, &C, 0);
    if (rc) {
        jinja__sb_free(&b);
        if (!R->failed) jinja__sb_fail(R, line, rc);
        return NULL;
    }
    return jinja__sb_take(R, line, &b);
}
