/* sess.c - session contexts by id, host LRU + cold store (sess.h). */
#include "sess.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "ck_err.h"
#include "coldkey.h"

_Static_assert(SESS_ID_MAX <= COLDKEY_NAME_MAX, "a session id must fit a cold key");

#define SESS_HEADER 36

typedef struct sess_entry {
    char id[SESS_ID_MAX + 1];
    int32_t *tok;
    int n, cap;
    uint64_t stamp; /* 0 = free */
} sess_entry;

typedef struct sess_get {
    sess_store *s;
    char id[SESS_ID_MAX + 1];
    int *waiter;
    int used;
    struct sess_get *next;
} sess_get;

struct sess_store {
    sess_config c;
    sess_entry *e; /* (max_sessions) */
    uint64_t clock;
    sess_get *gets; /* in flight (malloc'd; a session fetch is per request, not per token) */
    int puts_in_flight, gets_in_flight;
    unsigned char *buf; /* (SESS_HEADER + 4 * max_tokens) an encoded value */
    sess_stats st;
};

static void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
    p[3] = (unsigned char)(v >> 24);
}
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int id_ok(const char *id) {
    size_t n = id ? strlen(id) : 0;
    return n > 0 && n <= SESS_ID_MAX;
}

int sess_new(const sess_config *c, sess_store **out) {
    *out = NULL;
    if (c->max_sessions < 0 || c->max_tokens <= 0 || c->vocab <= 0 || !c->fingerprint ||
        strlen(c->fingerprint) != 16)
        return CK_EINVAL;
    sess_store *s = calloc(1, sizeof *s);
    if (!s) return CK_ENOMEM;
    s->c = *c;
    if (!s->c.max_sessions) s->c.max_sessions = 1024;
    s->e = calloc((size_t)s->c.max_sessions, sizeof *s->e);
    s->buf = malloc(SESS_HEADER + 4 * (size_t)c->max_tokens);
    if (!s->e || !s->buf) {
        sess_free(s);
        return CK_ENOMEM;
    }
    *out = s;
    return CK_OK;
}

void sess_free(sess_store *s) {
    if (!s) return;
    for (sess_get *g = s->gets; g; g = g->next) g->waiter = NULL;
    struct timespec ms = {0, 1000000};
    for (int tries = 0; s->c.cold && sess_in_flight(s) && tries < 1000; tries++) {
        cold_poll(s->c.cold);
        if (sess_in_flight(s)) nanosleep(&ms, NULL);
    }
    while (s->gets) { /* never answered: the store is gone with us */
        sess_get *g = s->gets;
        s->gets = g->next;
        free(g);
    }
    for (int i = 0; s->e && i < s->c.max_sessions; i++) free(s->e[i].tok);
    free(s->e);
    free(s->buf);
    free(s);
}

static sess_entry *find(sess_store *s, const char *id) {
    for (int i = 0; i < s->c.max_sessions; i++)
        if (s->e[i].stamp && !strcmp(s->e[i].id, id)) return &s->e[i];
    return NULL;
}

/* Copy into the host map (replacing, or taking the LRU entry). */
static int keep(sess_store *s, const char *id, const int32_t *tok, int n) {
    sess_entry *e = find(s, id);
    if (!e) {
        e = &s->e[0];
        for (int i = 0; i < s->c.max_sessions; i++) {
            if (!s->e[i].stamp) {
                e = &s->e[i];
                break;
            }
            if (s->e[i].stamp < e->stamp) e = &s->e[i];
        }
        if (!e->stamp) s->st.sessions++;
        snprintf(e->id, sizeof e->id, "%s", id);
        e->n = 0;
    }
    if (n > e->cap) {
        int32_t *t = realloc(e->tok, (size_t)n * sizeof *t);
        if (!t) return CK_ENOMEM;
        e->tok = t;
        e->cap = n;
    }
    memcpy(e->tok, tok, (size_t)n * sizeof *tok);
    e->n = n;
    e->stamp = ++s->clock;
    return CK_OK;
}

int sess_find(sess_store *s, const char *id, const int32_t **tok, int *n) {
    sess_entry *e = id_ok(id) ? find(s, id) : NULL;
    if (!e) return 0;
    e->stamp = ++s->clock;
    *tok = e->tok;
    *n = e->n;
    return 1;
}

static void put_done(void *ud, int status, const void *data, size_t len) {
    (void)data, (void)len;
    sess_store *s = ud;
    s->puts_in_flight--;
    if (status) s->st.save_failures++;
}

int sess_save(sess_store *s, const char *id, const int32_t *tok, int n) {
    if (!id_ok(id) || n <= 0 || n > s->c.max_tokens || !tok) return CK_EINVAL;
    int rc = keep(s, id, tok, n);
    if (rc) return rc;
    s->st.saves++;
    if (!s->c.cold) return CK_OK;
    unsigned char *b = s->buf;
    memcpy(b, "CKSS", 4);
    b[4] = 1, b[5] = 0, b[6] = b[7] = 0;
    memcpy(b + 8, s->c.fingerprint, 16);
    wr32(b + 24, (uint32_t)n);
    for (int i = 0; i < n; i++) wr32(b + SESS_HEADER + 4 * i, (uint32_t)tok[i]);
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, b, 28);
    XXH64_update(&st, b + SESS_HEADER, 4 * (size_t)n);
    uint64_t h = XXH64_digest(&st);
    wr32(b + 28, (uint32_t)h);
    wr32(b + 32, (uint32_t)(h >> 32));
    char key[COLDKEY_MAX];
    if (coldkey_sess(key, sizeof key, NULL, id) < 0 ||
        s->c.cold->ops->put(s->c.cold, key, b, SESS_HEADER + 4 * (size_t)n, 0, put_done, s)) {
        s->st.save_failures++;
        return CK_OK; /* the host copy stands */
    }
    s->puts_in_flight++;
    return CK_OK;
}

/* Check a cold value; 0 and the ids in s->buf's tail when it is sound. */
static int decode(sess_store *s, const unsigned char *v, size_t len, int *n) {
    if (len < SESS_HEADER || memcmp(v, "CKSS", 4) || v[4] != 1 || v[5] || v[6] || v[7] ||
        memcmp(v + 8, s->c.fingerprint, 16))
        return CK_EFORMAT;
    uint32_t k = rd32(v + 24);
    if (k == 0 || k > (uint32_t)s->c.max_tokens || len != SESS_HEADER + 4 * (size_t)k) return CK_EFORMAT;
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, v, 28);
    XXH64_update(&st, v + SESS_HEADER, 4 * (size_t)k);
    if (XXH64_digest(&st) != rd64(v + 28)) return CK_EFORMAT;
    int32_t *ids = (int32_t *)(void *)(s->buf + SESS_HEADER);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t id = rd32(v + SESS_HEADER + 4 * i);
        if (id >= (uint32_t)s->c.vocab) return CK_EFORMAT;
        ids[i] = (int32_t)id;
    }
    *n = (int)k;
    return CK_OK;
}

static void get_done(void *ud, int status, const void *data, size_t len) {
    sess_get *g = ud;
    sess_store *s = g->s;
    s->gets_in_flight--;
    int n = 0;
    if (!status && decode(s, data, len, &n)) {
        s->st.integrity_failures++;
        status = CK_EFORMAT;
    }
    /* A newer save here wins over what the store had. */
    if (!status && !find(s, g->id) && !keep(s, g->id, (const int32_t *)(void *)(s->buf + SESS_HEADER), n))
        s->st.cold_hits++;
    else if (status)
        s->st.misses++;
    if (g->waiter) (*g->waiter)--;
    sess_get **link = &s->gets;
    while (*link != g) link = &(*link)->next;
    *link = g->next;
    free(g);
}

int sess_fetch(sess_store *s, const char *id, int *waiter) {
    if (!id_ok(id)) return CK_EINVAL;
    if (!s->c.cold) return CK_ENOTFOUND;
    sess_get *g = calloc(1, sizeof *g);
    if (!g) return CK_ENOMEM;
    g->s = s;
    snprintf(g->id, sizeof g->id, "%s", id);
    g->waiter = waiter;
    char key[COLDKEY_MAX];
    if (coldkey_sess(key, sizeof key, NULL, id) < 0) { /* cannot happen: id_ok checked it */
        free(g);
        return CK_EINVAL;
    }
    g->next = s->gets;
    s->gets = g;
    int rc = s->c.cold->ops->get(s->c.cold, key, get_done, g);
    if (rc) {
        s->gets = g->next;
        free(g);
        return rc;
    }
    s->gets_in_flight++;
    if (waiter) (*waiter)++;
    return CK_OK;
}

void sess_forget_waiter(sess_store *s, const int *waiter) {
    for (sess_get *g = s->gets; g; g = g->next)
        if (g->waiter == waiter) g->waiter = NULL;
}

int sess_in_flight(const sess_store *s) { return s->puts_in_flight + s->gets_in_flight; }

const sess_stats *sess_get_stats(const sess_store *s) { return &s->st; }
