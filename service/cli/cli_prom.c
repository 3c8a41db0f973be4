/* cli_prom.c - Prometheus text format reader (cli_prom.h). */
#include "cli_prom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

static int is_name0(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
static int is_name(int c) { return is_name0(c) || (c >= '0' && c <= '9'); }

/* Cursor over one line [p, end). */
typedef struct cur {
    const char *p, *end;
} cur;

static void skip_ws(cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

/* Append n bytes to dst (cap bytes, *len used); 0, or -1 when full. */
static int put(char *dst, size_t cap, size_t *len, const char *s, size_t n) {
    if (*len + n >= cap) return -1;
    memcpy(dst + *len, s, n);
    *len += n;
    dst[*len] = 0;
    return 0;
}

/* {k="v",...}: re-printed canonically into labels. 0, CK_EFORMAT, CK_ETOOLONG. */
static int parse_labels(cur *c, char *labels) {
    size_t len = 0;
    labels[0] = 0;
    c->p++; /* '{' */
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 0;
        }
        if (len && put(labels, CLI_PROM_LABELS_MAX, &len, ",", 1)) return CK_ETOOLONG;
        const char *k = c->p;
        if (c->p >= c->end || !is_name0((unsigned char)*c->p)) return CK_EFORMAT;
        while (c->p < c->end && is_name((unsigned char)*c->p)) c->p++;
        if (put(labels, CLI_PROM_LABELS_MAX, &len, k, (size_t)(c->p - k))) return CK_ETOOLONG;
        skip_ws(c);
        if (c->p >= c->end || *c->p != '=') return CK_EFORMAT;
        c->p++;
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') return CK_EFORMAT;
        const char *v = c->p++;
        while (c->p < c->end && *c->p != '"') {
            if (*c->p == '\\') {
                if (c->p + 1 >= c->end) return CK_EFORMAT;
                char e = c->p[1];
                if (e != '\\' && e != '"' && e != 'n') return CK_EFORMAT;
                c->p++;
            }
            c->p++;
        }
        if (c->p >= c->end) return CK_EFORMAT; /* unterminated */
        c->p++;
        if (put(labels, CLI_PROM_LABELS_MAX, &len, "=", 1) ||
            put(labels, CLI_PROM_LABELS_MAX, &len, v, (size_t)(c->p - v)))
            return CK_ETOOLONG;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',')
            c->p++;
        else if (c->p >= c->end || *c->p != '}')
            return CK_EFORMAT;
    }
}

static int parse_value(cur *c, double *out) {
    char buf[64];
    size_t n = 0;
    while (c->p < c->end && *c->p != ' ' && *c->p != '\t') {
        if (n + 1 >= sizeof buf) return CK_EFORMAT;
        buf[n++] = *c->p++;
    }
    buf[n] = 0;
    if (!n) return CK_EFORMAT;
    if (!strcmp(buf, "+Inf") || !strcmp(buf, "Inf"))
        *out = INFINITY;
    else if (!strcmp(buf, "-Inf"))
        *out = -INFINITY;
    else if (!strcmp(buf, "NaN"))
        *out = NAN;
    else {
        char *e;
        *out = strtod(buf, &e);
        /* strtod also takes "inf", "nan", hex: the format has none of those */
        if (*e || strpbrk(buf, "xXiInN")) return CK_EFORMAT;
    }
    return 0;
}

static int parse_line(const char *p, const char *end, cli_prom_sample *s) {
    cur c = {p, end};
    const char *n0 = c.p;
    if (!is_name0((unsigned char)*c.p)) return CK_EFORMAT;
    while (c.p < c.end && is_name((unsigned char)*c.p)) c.p++;
    size_t nl = (size_t)(c.p - n0);
    if (nl >= CLI_PROM_NAME_MAX) return CK_ETOOLONG;
    memcpy(s->name, n0, nl);
    s->name[nl] = 0;
    s->labels[0] = 0;
    if (c.p < c.end && *c.p == '{') {
        int rc = parse_labels(&c, s->labels);
        if (rc) return rc;
    }
    skip_ws(&c);
    int rc = parse_value(&c, &s->value);
    if (rc) return rc;
    skip_ws(&c);
    if (c.p < c.end) { /* a timestamp: an integer */
        const char *t = c.p;
        if (*c.p == '-') c.p++;
        while (c.p < c.end && *c.p >= '0' && *c.p <= '9') c.p++;
        if (c.p == t || (c.p == t + 1 && *t == '-')) return CK_EFORMAT;
        skip_ws(&c);
        if (c.p < c.end) return CK_EFORMAT;
    }
    return 0;
}

int cli_prom_parse(const char *text, size_t len, int max_samples, cli_prom *out, char *err, size_t errlen) {
    out->s = NULL;
    out->n = 0;
    if (max_samples < 1) max_samples = 1;
    int cap = 0, lineno = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        lineno++;
        const char *q = p;
        while (q < le && (*q == ' ' || *q == '\t')) q++;
        const char *e = le;
        if (e > q && e[-1] == '\r') e--;
        if (q < e && *q != '#') {
            if (out->n == max_samples) {
                snprintf(err, errlen, "line %d: more than %d samples", lineno, max_samples);
                cli_prom_free(out);
                return CK_ETOOLONG;
            }
            if (out->n == cap) {
                int nc = cap ? (cap > max_samples / 2 ? max_samples : cap * 2) : 64;
                cli_prom_sample *ns = realloc(out->s, (size_t)nc * sizeof *ns);
                if (!ns) {
                    cli_prom_free(out);
                    snprintf(err, errlen, "out of memory");
                    return CK_ENOMEM;
                }
                out->s = ns;
                cap = nc;
            }
            int rc = parse_line(q, e, &out->s[out->n]);
            if (rc) {
                snprintf(err, errlen, "line %d: %s", lineno,
                         rc == CK_ETOOLONG ? "name or labels too long" : "not a Prometheus text sample");
                cli_prom_free(out);
                return rc;
            }
            out->n++;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

void cli_prom_free(cli_prom *p) {
    free(p->s);
    p->s = NULL;
    p->n = 0;
}

/* Does labels (canonical) hold the pair k="v" (also canonical)? */
static int has_pair(const char *labels, const char *pair, size_t pl) {
    for (const char *l = labels; *l;) {
        /* the pair at l, ending at a comma that is not inside quotes */
        if (!strncmp(l, pair, pl) && (l[pl] == 0 || l[pl] == ',')) return 1;
        const char *comma = l;
        int inq = 0;
        while (*comma && (inq || *comma != ',')) {
            if (*comma == '\\' && comma[1])
                comma++;
            else if (*comma == '"')
                inq = !inq;
            comma++;
        }
        if (!*comma) break;
        l = comma + 1;
    }
    return 0;
}

static int matches(const char *labels, const char *match) {
    if (!match || !*match) return 1;
    const char *m = match;
    while (*m) {
        const char *comma = m;
        int inq = 0;
        while (*comma && (inq || *comma != ',')) {
            if (*comma == '\\' && comma[1])
                comma++;
            else if (*comma == '"')
                inq = !inq;
            comma++;
        }
        if (!has_pair(labels, m, (size_t)(comma - m))) return 0;
        m = *comma ? comma + 1 : comma;
    }
    return 1;
}

double cli_prom_get(const cli_prom *p, const char *name, const char *match) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && matches(p->s[i].labels, match)) return p->s[i].value;
    return NAN;
}

double cli_prom_sum(const cli_prom *p, const char *name, const char *match) {
    double s = 0;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && matches(p->s[i].labels, match)) s += p->s[i].value;
    return s;
}

/* The le="..." value of a canonical label set; NAN when absent or bad. */
static double le_of(const char *labels) {
    const char *l = strstr(labels, "le=\"");
    while (l && l != labels && l[-1] != ',') l = strstr(l + 1, "le=\"");
    if (!l) return NAN;
    l += 4;
    if (!strncmp(l, "+Inf\"", 5)) return INFINITY;
    char *e;
    double v = strtod(l, &e);
    return *e == '"' ? v : NAN;
}

int cli_prom_hist(const cli_prom *p, const char *name, const char *match, double *le, double *cum, int cap) {
    char bucket[CLI_PROM_NAME_MAX + 8];
    snprintf(bucket, sizeof bucket, "%s_bucket", name);
    int n = 0;
    for (int i = 0; i < p->n && n < cap; i++) {
        if (strcmp(p->s[i].name, bucket) || !matches(p->s[i].labels, match)) continue;
        double b = le_of(p->s[i].labels);
        if (isnan(b)) continue;
        /* insertion in ascending order of le */
        int j = n++;
        while (j > 0 && le[j - 1] > b) {
            le[j] = le[j - 1];
            cum[j] = cum[j - 1];
            j--;
        }
        le[j] = b;
        cum[j] = p->s[i].value;
    }
    return n;
}

double cli_prom_quantile(const double *le, const double *cum, int n, double q) {
    if (n < 1 || !(cum[n - 1] > 0)) return NAN;
    double rank = q * cum[n - 1];
    for (int i = 0; i < n; i++) {
        if (cum[i] < rank) continue;
        if (isinf(le[i])) return i > 0 ? le[i - 1] : NAN;
        /* the first bucket's lower bound is 0, so one whose upper bound is not
         * above it answers its bound (as histogram_quantile does): from 0 to
         * a negative bound the line would leave the bucket */
        if (i == 0 && le[0] <= 0) return le[0];
        double lo = i > 0 ? le[i - 1] : 0, clo = i > 0 ? cum[i - 1] : 0;
        double in = cum[i] - clo;
        return in > 0 ? lo + (le[i] - lo) * (rank - clo) / in : le[i];
    }
    return le[n - 1];
}
