/* tpl.c - template records (tpl.h). */
#include "tpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "ck_err.h"
#include "coldkey.h"

_Static_assert(TPL_NAME_MAX <= COLDKEY_NAME_MAX, "a template name must fit a cold key");

int tpl_name_ok(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > TPL_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

int tpl_encode(const char *name, int64_t created_ms, const char *text, size_t text_len, char **out,
               size_t *len) {
    *out = NULL;
    if (!tpl_name_ok(name) || text_len > TPL_TEXT_MAX || (!text && text_len) || created_ms < 0)
        return CK_EINVAL;
    char head[TPL_NAME_MAX + 160];
    int h = snprintf(head, sizeof head,
                     "confkv-template 1\nname %s\ncreated_ms %lld\nbytes %zu\nxxh64 %016llx\n\n", name,
                     (long long)created_ms, text_len, (unsigned long long)XXH64(text, text_len, 0));
    if (h < 0 || (size_t)h >= sizeof head) return CK_EINVAL;
    char *b = malloc((size_t)h + text_len);
    if (!b) return CK_ENOMEM;
    memcpy(b, head, (size_t)h);
    if (text_len) memcpy(b + h, text, text_len);
    *out = b;
    *len = (size_t)h + text_len;
    return CK_OK;
}

/* One header line "<key> <value>\n" at *p (end e): the value, bounded. */
static int line(const char **p, const char *e, const char *key, char *val, size_t cap) {
    size_t k = strlen(key);
    const char *s = *p;
    if ((size_t)(e - s) < k + 2 || memcmp(s, key, k) || s[k] != ' ') return CK_EFORMAT;
    s += k + 1;
    const char *nl = memchr(s, '\n', (size_t)(e - s));
    /* A NUL would cut the value short and let "5\0junk" pass as 5. */
    if (!nl || nl == s || (size_t)(nl - s) >= cap || memchr(s, 0, (size_t)(nl - s))) return CK_EFORMAT;
    memcpy(val, s, (size_t)(nl - s));
    val[nl - s] = 0;
    *p = nl + 1;
    return CK_OK;
}

/* Decimal without leading zeros, or hex of fixed width: one spelling per
 * number, so a record has exactly one encoding (tpl_encode's). */
static int parse_u64(const char *s, int base, uint64_t max, uint64_t *out) {
    if (!*s || (base == 10 && s[0] == '0' && s[1])) return CK_EFORMAT;
    uint64_t v = 0;
    for (; *s; s++) {
        int d = *s >= '0' && *s <= '9' ? *s - '0' : base == 16 && *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
        if (d < 0 || v > (max - (uint64_t)d) / (uint64_t)base) return CK_EFORMAT;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return CK_OK;
}

int tpl_decode(const void *data, size_t len, const char *want_name, tpl_record *r) {
    memset(r, 0, sizeof *r);
    static const char magic[] = "confkv-template 1\n";
    if (!data || len < sizeof magic - 1 || memcmp(data, magic, sizeof magic - 1)) return CK_EFORMAT;
    const char *p = data, *e = p + len; /* after the check: no arithmetic on NULL */
    p += sizeof magic - 1;
    char v[TPL_NAME_MAX + 2];
    uint64_t created, bytes, sum;
    if (line(&p, e, "name", r->name, sizeof r->name) || !tpl_name_ok(r->name) ||
        (want_name && strcmp(r->name, want_name)))
        return CK_EFORMAT;
    if (line(&p, e, "created_ms", v, 21) || parse_u64(v, 10, (uint64_t)INT64_MAX, &created))
        return CK_EFORMAT;
    if (line(&p, e, "bytes", v, 21) || parse_u64(v, 10, TPL_TEXT_MAX, &bytes)) return CK_EFORMAT;
    if (line(&p, e, "xxh64", v, 17) || strlen(v) != 16 || parse_u64(v, 16, UINT64_MAX, &sum))
        return CK_EFORMAT;
    if (p >= e || *p != '\n') return CK_EFORMAT;
    p++;
    if ((uint64_t)(e - p) != bytes || XXH64(p, (size_t)bytes, 0) != sum) return CK_EFORMAT;
    r->created_ms = (int64_t)created;
    r->text = p;
    r->text_len = (size_t)bytes;
    return CK_OK;
}

/* ================================================================ cache */

typedef struct tpl_entry {
    char name[TPL_NAME_MAX + 1];
    char *text;
    size_t len;
    int64_t at_ms;  /* when fetched (fresh until at_ms + fresh_ms) */
    int saved_here; /* never goes stale */
    uint64_t stamp; /* LRU; 0 = free */
} tpl_entry;

typedef struct tpl_get {
    tpl_cache *c;
    char name[TPL_NAME_MAX + 1];
    int64_t at_ms;
    int *waiter;
    struct tpl_get *next;
} tpl_get;

struct tpl_cache {
    int max, fresh_ms;
    cold_store *cold;
    tpl_entry *e;
    uint64_t clock;
    tpl_get *gets;
    int puts_in_flight, gets_in_flight;
    tpl_cache_stats st;
};

int tpl_cache_new(int max_entries, int fresh_ms, cold_store *cold, tpl_cache **out) {
    *out = NULL;
    if (max_entries <= 0 || fresh_ms < 0) return CK_EINVAL;
    tpl_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->e = calloc((size_t)max_entries, sizeof *c->e))) {
        free(c);
        return CK_ENOMEM;
    }
    c->max = max_entries;
    c->fresh_ms = fresh_ms;
    c->cold = cold;
    *out = c;
    return CK_OK;
}

void tpl_cache_free(tpl_cache *c) {
    if (!c) return;
    for (tpl_get *g = c->gets; g; g = g->next) g->waiter = NULL;
    struct timespec ms = {0, 1000000};
    for (int tries = 0; c->cold && tpl_cache_in_flight(c) && tries < 1000; tries++) {
        cold_poll(c->cold);
        if (tpl_cache_in_flight(c)) nanosleep(&ms, NULL);
    }
    while (c->gets) {
        tpl_get *g = c->gets;
        c->gets = g->next;
        free(g);
    }
    for (int i = 0; i < c->max; i++) free(c->e[i].text);
    free(c->e);
    free(c);
}

static tpl_entry *entry(tpl_cache *c, const char *name) {
    for (int i = 0; i < c->max; i++)
        if (c->e[i].stamp && !strcmp(c->e[i].name, name)) return &c->e[i];
    return NULL;
}

static int keep(tpl_cache *c, const char *name, const char *text, size_t len, int64_t at_ms, int saved) {
    char *t = malloc(len ? len : 1);
    if (!t) return CK_ENOMEM;
    if (len) memcpy(t, text, len);
    tpl_entry *e = entry(c, name);
    if (!e) {
        e = &c->e[0];
        for (int i = 0; i < c->max; i++) {
            if (!c->e[i].stamp) {
                e = &c->e[i];
                break;
            }
            if (c->e[i].stamp < e->stamp) e = &c->e[i];
        }
        snprintf(e->name, sizeof e->name, "%s", name);
    }
    free(e->text);
    e->text = t;
    e->len = len;
    e->at_ms = at_ms;
    e->saved_here = saved;
    e->stamp = ++c->clock;
    return CK_OK;
}

int tpl_cache_find(tpl_cache *c, const char *name, int64_t now_ms, const char **text, size_t *len) {
    tpl_entry *e = tpl_name_ok(name) ? entry(c, name) : NULL;
    if (!e || (!e->saved_here && c->cold && now_ms - e->at_ms > c->fresh_ms)) return 0;
    e->stamp = ++c->clock;
    *text = e->text;
    *len = e->len;
    return 1;
}

static void put_done(void *ud, int status, const void *data, size_t len) {
    (void)data, (void)len;
    tpl_cache *c = ud;
    c->puts_in_flight--;
    if (status) c->st.save_failures++;
}

int tpl_cache_save(tpl_cache *c, const char *name, const char *text, size_t len, int64_t now_ms,
                   int64_t wall_ms) {
    char *rec;
    size_t rlen;
    int rc = tpl_encode(name, wall_ms, text, len, &rec, &rlen);
    if (rc) return rc;
    if ((rc = keep(c, name, text, len, now_ms, 1))) {
        free(rec);
        return rc;
    }
    c->st.saves++;
    if (c->cold) {
        /* Templates are shared by every instance and outlive any one job:
         * their records never expire (they are deleted by `confkv templates`). */
        char key[COLDKEY_MAX];
        if (coldkey_tpl(key, sizeof key, NULL, name) < 0 ||
            c->cold->ops->put(c->cold, key, rec, rlen, COLD_PUT_PERSIST, put_done, c))
            c->st.save_failures++;
        else
            c->puts_in_flight++;
    }
    free(rec);
    return CK_OK;
}

static void get_done(void *ud, int status, const void *data, size_t len) {
    tpl_get *g = ud;
    tpl_cache *c = g->c;
    c->gets_in_flight--;
    tpl_record r;
    if (!status && tpl_decode(data, len, g->name, &r)) {
        c->st.integrity_failures++;
        status = CK_EFORMAT;
    }
    if (!status) {
        tpl_entry *e = entry(c, g->name);
        if (!(e && e->saved_here) && keep(c, g->name, r.text, r.text_len, g->at_ms, 0)) status = CK_ENOMEM;
    }
    if (status)
        c->st.fetch_misses++;
    else
        c->st.fetch_hits++;
    if (status == CK_ENOTFOUND) { /* gone from the store: forget a stale copy */
        tpl_entry *e = entry(c, g->name);
        if (e && !e->saved_here) {
            free(e->text);
            memset(e, 0, sizeof *e);
        }
    }
    if (g->waiter) (*g->waiter)--;
    tpl_get **link = &c->gets;
    while (*link != g) link = &(*link)->next;
    *link = g->next;
    free(g);
}

int tpl_cache_fetch(tpl_cache *c, const char *name, int64_t now_ms, int *waiter) {
    if (!tpl_name_ok(name)) return CK_EINVAL;
    if (!c->cold) return CK_ENOTFOUND;
    tpl_get *g = calloc(1, sizeof *g);
    if (!g) return CK_ENOMEM;
    g->c = c;
    snprintf(g->name, sizeof g->name, "%s", name);
    g->at_ms = now_ms;
    g->waiter = waiter;
    g->next = c->gets;
    c->gets = g;
    char key[COLDKEY_MAX];
    int rc = coldkey_tpl(key, sizeof key, NULL, name);
    if (rc >= 0) rc = c->cold->ops->get(c->cold, key, get_done, g);
    if (rc) {
        c->gets = g->next;
        free(g);
        return rc;
    }
    c->gets_in_flight++;
    c->st.fetches++;
    if (waiter) (*waiter)++;
    return CK_OK;
}

void tpl_cache_forget_waiter(tpl_cache *c, const int *waiter) {
    for (tpl_get *g = c->gets; g; g = g->next)
        if (g->waiter == waiter) g->waiter = NULL;
}

int tpl_cache_in_flight(const tpl_cache *c) { return c->puts_in_flight + c->gets_in_flight; }

const tpl_cache_stats *tpl_cache_get_stats(const tpl_cache *c) { return &c->st; }
