/* jinja_text.c - the renderer's text helpers (see jinja_int.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

/* =========================================================================
 * text helpers: UTF-8, Python's whitespace, a bounded growing buffer */

/* Decode one code point at s[i..n); *len gets its byte length. A byte that
 * does not start valid UTF-8 counts as one code point of its own value. */
unsigned jinja__utf8_dec(const unsigned char *s, size_t i, size_t n, size_t *len) {
    unsigned c = s[i];
    int need = c >= 0xf0 && c < 0xf8 ? 3 : c >= 0xe0 && c < 0xf0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : 0;
    *len = 1;
    if (!need || n - i <= (size_t)need) return c;
    unsigned cp = c & (0x3fu >> need);
    for (int k = 1; k <= need; k++) {
        unsigned cc = s[i + k];
        if ((cc & 0xc0) != 0x80) return c;
        cp = cp << 6 | (cc & 0x3f);
    }
    *len = (size_t)need + 1;
    return cp;
}

size_t jinja__utf8_enc(unsigned cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Python's str.isspace(), which str.strip(), str.split() and the regex \s of
 * Jinja's lexer use. */
int jinja__py_space(unsigned c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* Start of the code point that ends at s[end) (end > start). */
size_t jinja__utf8_prev(const char *s, size_t start, size_t end) {
    size_t i = end - 1;
    int back = 0;
    while (i > start && back < 3 && ((unsigned char)s[i] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    size_t len;
    jinja__utf8_dec((const unsigned char *)s, i, end, &len);
    return i + len == end ? i : end - 1;
}

size_t jinja__skip_space_fwd(const char *s, size_t i, size_t end) {
    while (i < end) {
        size_t len;
        if (!jinja__py_space(jinja__utf8_dec((const unsigned char *)s, i, end, &len))) break;
        i += len;
    }
    return i;
}

size_t jinja__skip_space_back(const char *s, size_t start, size_t end) {
    while (end > start) {
        size_t p = jinja__utf8_prev(s, start, end), len;
        if (!jinja__py_space(jinja__utf8_dec((const unsigned char *)s, p, end, &len))) break;
        end = p;
    }
    return end;
}

size_t jinja__utf8_count(const char *s, size_t n) {
    size_t c = 0, i = 0, len;
    while (i < n) {
        jinja__utf8_dec((const unsigned char *)s, i, n, &len);
        i += len;
        c++;
    }
    return c;
}

/* Byte offset of code point `cp` (cp <= count). */
size_t jinja__utf8_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0, len;
    while (cp-- && i < n) {
        jinja__utf8_dec((const unsigned char *)s, i, n, &len);
        i += len;
    }
    return i;
}

void jinja__sb_free(sbuf *b) {
    free(b->p);
    free(b->sp);
    b->p = NULL;
    b->sp = NULL;
    b->n = b->cap = b->nsp = b->capsp = 0;
}

/* Mark b's bytes [from, to) as data. Marks come in increasing order (a
 * buffer only grows at its end), so a mark that touches the last one
 * extends it. 0 or CK_ENOMEM. */
static int sb_span(sbuf *b, size_t from, size_t to) {
    if (from >= to) return 0;
    if (b->nsp && b->sp[2 * b->nsp - 1] >= from) {
        if (to > b->sp[2 * b->nsp - 1]) b->sp[2 * b->nsp - 1] = to;
        return 0;
    }
    if (b->nsp == b->capsp) {
        size_t nc = b->capsp ? b->capsp * 2 : 4;
        size_t *np = realloc(b->sp, 2 * nc * sizeof *np);
        if (!np) return CK_ENOMEM;
        b->sp = np;
        b->capsp = nc;
    }
    b->sp[2 * b->nsp] = from;
    b->sp[2 * b->nsp + 1] = to;
    b->nsp++;
    return 0;
}

/* 0, or CK_ETOOLONG past b->max, or CK_ENOMEM. */
int jinja__sb_add(sbuf *b, const char *s, size_t n) {
    if (n > b->max - b->n) return CK_ETOOLONG;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return CK_ENOMEM;
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}
int jinja__sb_cstr(sbuf *b, const char *s) { return jinja__sb_add(b, s, strlen(s)); }
int jinja__sb_ch(sbuf *b, char c) { return jinja__sb_add(b, &c, 1); }

/* Append string v's bytes [off, off + len) with their provenance. */
int jinja__sb_addv(sbuf *b, const jinja_value *v, size_t off, size_t len) {
    size_t at = b->n, end = off + len, lo = 0, hi = v->u.s.nsp;
    int rc = jinja__sb_add(b, v->u.s.s + off, len);
    /* the first span that ends after off: spans are sorted */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->u.s.sp[2 * mid + 1] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; rc == 0 && k < v->u.s.nsp && v->u.s.sp[2 * k] < end; k++) {
        size_t a = v->u.s.sp[2 * k], z = v->u.s.sp[2 * k + 1];
        rc = sb_span(b, at + (a > off ? a : off) - off, at + (z < end ? z : end) - off);
    }
    return rc;
}

/* Mark b's bytes from `from` on as data when `tainted`: for results made
 * from data in ways not tracked byte by byte (repr, JSON escapes). */
int jinja__sb_taint_from(sbuf *b, size_t from, int tainted) { return tainted ? sb_span(b, from, b->n) : 0; }

/* Python's repr() of a float (also str() and json.dumps of one). */
void jinja__py_float(double d, char *out, size_t outsz) {
    if (isnan(d)) {
        snprintf(out, outsz, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(out, outsz, d < 0 ? "-inf" : "inf");
        return;
    }
    if (d == 0) {
        snprintf(out, outsz, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char tmp[48];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp: [-]D[.DDD]e(+|-)XX: take the digits and the exponent apart */
    char digits[24] = {0}; /* every byte read is written first; zeroed for cppcheck */
    int nd = 0, neg = 0;
    const char *p = tmp;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    int ex = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    size_t left = outsz;
#define PUT_(c)         \
    do {                \
        if (left > 1) { \
            *o++ = (c); \
            left--;     \
        }               \
    } while (0)
    if (neg) PUT_('-');
    if (ex >= -4 && ex < 16) {
        if (ex >= 0) {
            for (int i = 0; i <= ex; i++) PUT_(i < nd ? digits[i] : '0');
            PUT_('.');
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++) PUT_(digits[i]);
            else
                PUT_('0');
        } else {
            PUT_('0');
            PUT_('.');
            for (int i = 0; i < -ex - 1; i++) PUT_('0');
            for (int i = 0; i < nd; i++) PUT_(digits[i]);
        }
        *o = 0;
    } else {
        PUT_(digits[0]);
        if (nd > 1) {
            PUT_('.');
            for (int i = 1; i < nd; i++) PUT_(digits[i]);
        }
        *o = 0;
        size_t used = (size_t)(o - out);
        snprintf(o, outsz - used, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
#undef PUT_
}
