/* svc_route.c - the cascade's escalation rule (svc_route.h). */
#include "svc_route.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

static const char *const SIG[3] = {"entropy", "gap", "pmax"};
static const char *const STAT[3] = {"mean", "min", "max"};

static int lookup(const char *s, size_t n, const char *const *t, int m) {
    for (int i = 0; i < m; i++)
        if (strlen(t[i]) == n && !strncmp(s, t[i], n)) return i;
    return -1;
}

/* One item [p, p + n). */
static int parse_item(svc_route_rule *r, const char *p, size_t n, char *err, size_t errlen) {
    char item[128];
    if (n >= sizeof item) {
        snprintf(err, errlen, "route rule item too long");
        return CK_EINVAL;
    }
    memcpy(item, p, n);
    item[n] = 0;
    if (!strcmp(item, "always")) return r->always = 1, 0;
    if (!strcmp(item, "never")) return r->never = 1, 0;
    if (!strcmp(item, "at=first")) return r->every = 0, 0;
    if (!strcmp(item, "at=every")) return r->every = 1, 0;
    if (!strncmp(item, "rewind=", 7)) {
        char *e;
        long v = strtol(item + 7, &e, 10);
        if (e == item + 7 || *e || v < 0 || v > SVC_ROUTE_MAX_WINDOW) {
            snprintf(err, errlen, "route rule '%s': rewind must be 0..%d", item, SVC_ROUTE_MAX_WINDOW);
            return CK_EINVAL;
        }
        r->rewind = (int)v;
        return 0;
    }
    if (!strncmp(item, "tokens=", 7)) {
        char *e;
        long v = strtol(item + 7, &e, 10);
        if (e == item + 7 || *e || v < 1 || v > SVC_ROUTE_MAX_WINDOW) {
            snprintf(err, errlen, "route rule '%s': tokens must be 1..%d", item, SVC_ROUTE_MAX_WINDOW);
            return CK_EINVAL;
        }
        r->tokens = (int)v;
        return 0;
    }
    /* STAT_SIGNAL OP X */
    const char *us = strchr(item, '_'), *op = strpbrk(item, "<>");
    if (!us || !op || us > op) goto bad;
    int st = lookup(item, (size_t)(us - item), STAT, 3), sg = lookup(us + 1, (size_t)(op - us - 1), SIG, 3);
    char *e;
    double x = strtod(op + 1, &e);
    if (st < 0 || sg < 0 || e == op + 1 || *e || !isfinite(x)) goto bad;
    if (r->n_cond == SVC_ROUTE_MAX_COND) {
        snprintf(err, errlen, "route rule: more than %d conditions", SVC_ROUTE_MAX_COND);
        return CK_EINVAL;
    }
    r->cond[r->n_cond++] = (svc_route_cond){st, sg, *op == '>', x};
    return 0;
bad:
    snprintf(err, errlen,
             "route rule item '%s': expected tokens=N, at=first|every, rewind=K, always, never, or "
             "{mean|min|max}_{entropy|gap|pmax}{<|>}X",
             item);
    return CK_EINVAL;
}

int svc_route_parse(const char *spec, svc_route_rule *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->tokens = 16;
    if (!spec || !*spec) spec = SVC_ROUTE_DEFAULT;
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",");
        if (!n) {
            snprintf(err, errlen, "route rule '%s': empty item", spec);
            return CK_EINVAL;
        }
        int rc = parse_item(r, p, n, err, errlen);
        if (rc) return rc;
        p += n;
        if (*p == ',') p++;
    }
    if (r->always && r->never) {
        snprintf(err, errlen, "route rule '%s': always and never", spec);
        return CK_EINVAL;
    }
    if (r->rewind > r->tokens) {
        snprintf(err, errlen, "route rule '%s': rewind=%d is more than tokens=%d", spec, r->rewind,
                 r->tokens);
        return CK_EINVAL;
    }
    if (!r->always && !r->never && !r->n_cond) {
        snprintf(err, errlen, "route rule '%s': no condition (add one, or always / never)", spec);
        return CK_EINVAL;
    }
    return 0;
}

void svc_route_name(const svc_route_rule *r, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "tokens=%d,at=%s", r->tokens, r->every ? "every" : "first");
    if (r->rewind) n += snprintf(buf + n, n < (int)cap ? cap - (size_t)n : 0, ",rewind=%d", r->rewind);
    if (r->always) n += snprintf(buf + n, n < (int)cap ? cap - (size_t)n : 0, ",always");
    if (r->never) n += snprintf(buf + n, n < (int)cap ? cap - (size_t)n : 0, ",never");
    for (int i = 0; i < r->n_cond; i++) {
        const svc_route_cond *c = &r->cond[i];
        n += snprintf(buf + n, n < (int)cap ? cap - (size_t)n : 0, ",%s_%s%c%g", STAT[c->stat],
                      SIG[c->signal], c->greater ? '>' : '<', c->x);
    }
}

void svc_route_begin(svc_route_state *s) {
    s->n = 0;
    s->decided = 0;
}

int svc_route_feed(const svc_route_rule *r, svc_route_state *s, float entropy, float gap, float pmax) {
    int w = r->tokens, slot = s->n % w;
    s->sig[SVC_ROUTE_ENTROPY][slot] = entropy;
    s->sig[SVC_ROUTE_GAP][slot] = gap;
    s->sig[SVC_ROUTE_PMAX][slot] = pmax;
    s->n++;
    if (s->n < w || s->decided || r->never) return 0;
    if (!r->every) s->decided = 1;
    if (r->always) return 1;
    /* the window is full: the last w tokens, in any order */
    for (int i = 0; i < r->n_cond; i++) {
        const svc_route_cond *c = &r->cond[i];
        const float *v = s->sig[c->signal];
        double acc = c->stat == SVC_ROUTE_MEAN ? 0 : v[0];
        for (int k = 0; k < w; k++) {
            if (c->stat == SVC_ROUTE_MEAN)
                acc += v[k];
            else if (c->stat == SVC_ROUTE_MIN)
                acc = v[k] < acc ? v[k] : acc;
            else
                acc = v[k] > acc ? v[k] : acc;
        }
        if (c->stat == SVC_ROUTE_MEAN) acc /= w;
        if (c->greater ? acc > c->x : acc < c->x) return 1;
    }
    return 0;
}

int svc_route_accepted(const svc_route_rule *r, const svc_route_state *s) {
    int a = s->n - r->rewind;
    return a > 0 ? a : 0;
}
