/* jw.c - streaming JSON writer (jw.h). */
#include "jw.h"

#include <math.h>
#include <string.h>

void jw_init(jw *w, FILE *f) {
    memset(w, 0, sizeof *w);
    w->f = f;
    w->first[0] = 1;
}

static void sep(jw *w) {
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (!w->first[w->depth]) fputs(", ", w->f);
    w->first[w->depth] = 0;
}

static void open(jw *w, char c) {
    sep(w);
    fputc(c, w->f);
    if (w->depth + 1 < JW_MAX_DEPTH) w->depth++;
    w->first[w->depth] = 1;
}

static void close_(jw *w, char c) {
    fputc(c, w->f);
    if (w->depth > 0) w->depth--;
}

void jw_obj(jw *w) { open(w, '{'); }
void jw_obj_end(jw *w) { close_(w, '}'); }
void jw_arr(jw *w) { open(w, '['); }
void jw_arr_end(jw *w) { close_(w, ']'); }

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 2 && c < 0xC2) return 0;                  /* overlong */
    if (len == 3 && c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (len == 3 && c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    if (len == 4 && (c > 0xF4 || (c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

void jw_escape(FILE *f, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            i++;
        } else if (c == '\n') {
            fputs("\\n", f);
            i++;
        } else if (c == '\t') {
            fputs("\\t", f);
            i++;
        } else if (c == '\r') {
            fputs("\\r", f);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else {
            size_t l = utf8_len(p + i, n - i);
            if (!l) {
                fputs("\\ufffd", f);
                i++;
            } else {
                fwrite(p + i, 1, l, f);
                i += l;
            }
        }
    }
    fputc('"', f);
}

void jw_key(jw *w, const char *k) {
    sep(w);
    jw_escape(w->f, k, strlen(k));
    fputs(": ", w->f);
    w->after_key = 1;
}

void jw_strn(jw *w, const char *s, size_t n) {
    sep(w);
    jw_escape(w->f, s, n);
}

void jw_str(jw *w, const char *s) { jw_strn(w, s, strlen(s)); }

void jw_int(jw *w, int64_t v) {
    sep(w);
    fprintf(w->f, "%lld", (long long)v);
}

void jw_num(jw *w, double v) {
    sep(w);
    if (isfinite(v))
        fprintf(w->f, "%.9g", v);
    else
        fputs("null", w->f);
}

void jw_bool(jw *w, int v) {
    sep(w);
    fputs(v ? "true" : "false", w->f);
}

void jw_null(jw *w) {
    sep(w);
    fputs("null", w->f);
}
