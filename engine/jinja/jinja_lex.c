/* jinja_lex.c - the template's lexer (see jinja_int.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

/* =========================================================================
 * the lexer: the template as Jinja's token stream
 *
 * Whitespace control as Jinja's lexer applies it with HF's settings:
 *  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`,
 *    `-#}` all whitespace after it;
 *  - trim_blocks: the first newline after a `%}` or `#}` goes;
 *  - lstrip_blocks: spaces and tabs from the start of a line to a `{%` or
 *    `{#` go (not before `{{`; `{%+` keeps them, `+%}` keeps the newline);
 *  - newlines are normalised to \n and one trailing newline is dropped
 *    (keep_trailing_newline=False). */

int jinja__perr(parser *P, int line, int code, const char *fmt, ...) {
    if (P->failed) return P->failed;
    va_list ap;
    va_start(ap, fmt);
    jinja__set_err(P->err, code,
                   code == CK_ENOMEM                          ? jinja__k_nomem
                   : code == CK_ETOOLONG || code == CK_ERANGE ? jinja__k_limit
                                                              : jinja__k_unsup,
                   line, fmt, ap);
    va_end(ap);
    P->failed = code;
    return code;
}

jinja_value *jinja__keep_lit(parser *P, jinja_value *v) {
    if (!v) {
        jinja__perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__);
        return NULL;
    }
    jinja_template *t = P->t;
    if (t->n_lits == t->cap_lits) {
        size_t nc = t->cap_lits ? t->cap_lits * 2 : 64;
        jinja_value **nl = realloc(t->lits, nc * sizeof *nl);
        if (!nl) {
            jinja_release(v);
            jinja__perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__);
            return NULL;
        }
        t->lits = nl;
        t->cap_lits = nc;
    }
    v->refs = -1;
    t->lits[t->n_lits++] = v;
    return v;
}

static token *push_tok(parser *P, int type, int line, const char *p, size_t n) {
    if (P->n_tk == P->cap_tk) {
        size_t nc = P->cap_tk ? P->cap_tk * 2 : 256;
        token *nt = realloc(P->tk, nc * sizeof *nt);
        if (!nt) {
            jinja__perr(P, line, CK_ENOMEM, "%s: out of memory", __func__);
            return NULL;
        }
        P->tk = nt;
        P->cap_tk = nc;
    }
    token *t = &P->tk[P->n_tk++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line;
    t->p = p;
    t->n = n;
    return t;
}

static int hexval(int c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A string literal's body s[0..n) decoded as Python's unicode-escape does
 * (Jinja's own unescaping); the result goes to the template's literals. */
static jinja_value *decode_string(parser *P, int line, const char *s, size_t n) {
    char *o = malloc(n + 1);
    if (!o) {
        jinja__perr(P, line, CK_ENOMEM, "%s: out of memory", __func__);
        return NULL;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[j++] = s[i];
            continue;
        }
        char c = s[++i];
        unsigned cp;
        int nh = 0;
        switch (c) {
        case '\n': break;
        case '\\':
        case '\'':
        case '"': o[j++] = c; break;
        case 'a': o[j++] = 7; break;
        case 'b': o[j++] = 8; break;
        case 'f': o[j++] = 12; break;
        case 'n': o[j++] = '\n'; break;
        case 'r': o[j++] = '\r'; break;
        case 't': o[j++] = '\t'; break;
        case 'v': o[j++] = 11; break;
        case 'x': nh = 2; break;
        case 'u': nh = 4; break;
        case 'U': nh = 8; break;
        case 'N':
            free(o);
            jinja__perr(P, line, CK_EUNSUPPORTED,
                        "line %d: \\N{...} escapes in string literals are not supported", line);
            return NULL;
        default:
            if (c >= '0' && c <= '7') {
                cp = 0;
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
                    cp = cp * 8 + (unsigned)(s[i] - '0');
                    i++;
                    k++;
                }
                i--;
                j += jinja__utf8_enc(cp, o + j);
            } else {
                o[j++] = '\\';
                o[j++] = c;
            }
        }
        if (nh) {
            /* \xhh needs exactly its digits: Python refuses the literal otherwise */
            if (i + (size_t)nh >= n) goto bad;
            cp = 0;
            for (int k = 1; k <= nh; k++) {
                int h = hexval((unsigned char)s[i + k]);
                if (h < 0) goto bad;
                cp = cp * 16 + (unsigned)h;
            }
            if (cp > 0x10ffff) goto bad;
            i += (size_t)nh;
            /* the escape is at least as long as its UTF-8, so o has room */
            j += jinja__utf8_enc(cp, o + j);
        }
    }
    jinja_value *v = jinja__jv_str_plain(o, j);
    free(o);
    return jinja__keep_lit(P, v);
bad:
    free(o);
    jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: malformed escape in a string literal", line);
    return NULL;
}

static int is_name0(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Digits with single underscores between them ((\d+_)*\d+) at s[i..n):
 * returns the end, or i when there are none. */
static size_t scan_digits(const char *s, size_t i, size_t n) {
    size_t j = i;
    if (j >= n || !is_digit(s[j])) return i;
    while (j < n && is_digit(s[j])) {
        j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) j++;
    }
    return j;
}

/* Tokens inside one {{ }} or {% %} from s[*pos]; stops after the end tag. */
static int lex_tag(parser *P, int is_block, size_t *pos, int *line, int *line_starting) {
    const char *s = P->t->src;
    size_t n = P->t->src_n, i = *pos;
    int balance = 0, open_line = *line, prev_dot = 0;
    for (;;) {
        /* whitespace (Jinja's \s+) */
        size_t w = jinja__skip_space_fwd(s, i, n);
        for (size_t k = i; k < w; k++)
            if (s[k] == '\n') (*line)++;
        i = w;
        if (i >= n)
            return jinja__perr(P, open_line, CK_EUNSUPPORTED, "line %d: unterminated %s tag", open_line,
                               is_block ? "{% %}" : "{{ }}");
        /* the end tag, unless inside brackets (as Jinja: `{{ {'a': 1}}}`) */
        if (balance == 0) {
            const char *end = is_block ? "%}" : "}}";
            int sign =
                (s[i] == '-' || (is_block && s[i] == '+')) && i + 3 <= n && memcmp(s + i + 1, end, 2) == 0
                    ? s[i]
                    : 0;
            if (sign || (i + 1 < n && memcmp(s + i, end, 2) == 0)) {
                if (!push_tok(P, is_block ? TK_BLK_E : TK_VAR_E, *line, s + i, 2)) return P->failed;
                i += sign ? 3 : 2;
                size_t last = i - 1;
                if (sign == '-') {
                    size_t w2 = jinja__skip_space_fwd(s, i, n);
                    for (size_t k = i; k < w2; k++)
                        if (s[k] == '\n') (*line)++;
                    if (w2 > i) last = w2 - 1;
                    i = w2;
                } else if (!sign && is_block && i < n && s[i] == '\n') {
                    (*line)++;
                    last = i;
                    i++;
                }
                *line_starting = s[last] == '\n';
                *pos = i;
                return 0;
            }
        }
        int c = (unsigned char)s[i];
        if (is_digit(c)) {
            size_t j = scan_digits(s, i, n), fe = j;
            int is_float = 0;
            if (!prev_dot) {
                /* float: digits (. digits)? (e[+-]digits)? with at least one of the two */
                size_t k = j;
                if (k < n && s[k] == '.' && scan_digits(s, k + 1, n) > k + 1) {
                    k = scan_digits(s, k + 1, n);
                    is_float = 1;
                }
                if (k < n && (s[k] == 'e' || s[k] == 'E')) {
                    size_t e = k + 1;
                    if (e < n && (s[e] == '+' || s[e] == '-')) e++;
                    size_t ee = scan_digits(s, e, n);
                    if (ee > e) {
                        k = ee;
                        is_float = 1;
                    }
                }
                if (is_float) fe = k;
            }
            char num[64];
            size_t nn = 0;
            for (size_t k = i; k < fe && nn < sizeof num - 1; k++)
                if (s[k] != '_') num[nn++] = s[k];
            num[nn] = 0;
            token *t = push_tok(P, is_float ? TK_FLOAT : TK_INT, *line, s + i, fe - i);
            if (!t) return P->failed;
            if (is_float)
                t->f = strtod(num, NULL);
            else {
                errno = 0;
                unsigned long long u = strtoull(num, NULL, 10);
                if (errno || u > 9223372036854775807ULL)
                    return jinja__perr(P, *line, CK_EUNSUPPORTED, "line %d: integer literal too large",
                                       *line);
                t->i = (long long)u;
            }
            i = fe;
            prev_dot = 0;
            continue;
        }
        if (is_name0(c)) {
            size_t j = i + 1;
            while (j < n && (is_name0(s[j]) || is_digit(s[j]))) j++;
            if (!push_tok(P, TK_NAME, *line, s + i, j - i)) return P->failed;
            i = j;
            prev_dot = 0;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            int l0 = *line;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n) {
                    if (s[j + 1] == '\n') (*line)++;
                    j++;
                } else if (s[j] == '\n')
                    (*line)++;
                j++;
            }
            if (j >= n)
                return jinja__perr(P, l0, CK_EUNSUPPORTED, "line %d: unterminated string literal", l0);
            token *t = push_tok(P, TK_STR, l0, s + i, j + 1 - i);
            if (!t) return P->failed;
            t->lit = decode_string(P, l0, s + i + 1, j - i - 1);
            if (!t->lit) return P->failed;
            i = j + 1;
            prev_dot = 0;
            continue;
        }
        static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                          "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                          ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
        size_t k;
        for (k = 0; k < sizeof ops / sizeof *ops; k++) {
            size_t ol = strlen(ops[k]);
            if (i + ol <= n && memcmp(s + i, ops[k], ol) == 0) break;
        }
        if (k == sizeof ops / sizeof *ops)
            return jinja__perr(P, *line, CK_EUNSUPPORTED, "line %d: unexpected character '%c' in a tag",
                               *line, c >= 0x20 && c < 0x7f ? c : '?');
        size_t ol = strlen(ops[k]);
        if (c == '(' || c == '[' || c == '{') balance++;
        if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
        if (!push_tok(P, TK_OP, *line, s + i, ol)) return P->failed;
        prev_dot = c == '.';
        i += ol;
    }
}

int jinja__lex(parser *P) {
    const char *s = P->t->src;
    size_t n = P->t->src_n, pos = 0;
    int line = 1, line_starting = 1;
    while (pos < n) {
        size_t q = pos;
        int kind = 0;
        while (q + 1 < n) {
            if (s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#')) {
                kind = s[q + 1];
                break;
            }
            q++;
        }
        if (!kind) q = n;
        char sign = kind && q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+') ? s[q + 2] : 0;
        size_t tend = q;
        if (kind && sign == '-') {
            tend = jinja__skip_space_back(s, pos, q);
        } else if (kind && sign != '+' && kind != '{') {
            size_t l = q;
            while (l > pos && s[l - 1] != '\n') l--;
            if ((l > pos || line_starting) && l < q && jinja__skip_space_fwd(s, l, q) == q) tend = l;
        }
        if (tend > pos && !push_tok(P, TK_DATA, line, s + pos, tend - pos)) return P->failed;
        for (size_t k = pos; k < q; k++)
            if (s[k] == '\n') line++;
        if (!kind) break;
        size_t body = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t j = body;
            int l0 = line;
            while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}')) j++;
            if (j + 1 >= n) return jinja__perr(P, l0, CK_EUNSUPPORTED, "line %d: unterminated comment", l0);
            for (size_t k = body; k < j; k++)
                if (s[k] == '\n') line++;
            char esign = j > body && (s[j - 1] == '-' || s[j - 1] == '+') ? s[j - 1] : 0;
            size_t e = j + 2, last = j + 1;
            if (esign == '-') {
                size_t w = jinja__skip_space_fwd(s, e, n);
                for (size_t k = e; k < w; k++)
                    if (s[k] == '\n') line++;
                if (w > e) last = w - 1;
                e = w;
            } else if (!esign && e < n && s[e] == '\n') {
                line++;
                last = e;
                e++;
            }
            line_starting = s[last] == '\n';
            pos = e;
            continue;
        }
        if (!push_tok(P, kind == '%' ? TK_BLK_B : TK_VAR_B, line, s + q, 2)) return P->failed;
        pos = body;
        if (lex_tag(P, kind == '%', &pos, &line, &line_starting)) return P->failed;
    }
    return push_tok(P, TK_EOF, line, s + n, 0) ? 0 : P->failed;
}
