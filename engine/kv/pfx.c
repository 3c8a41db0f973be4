/* pfx.c - the prefix cache: host slab, hash index, cold persistence (pfx.h). */
#include "pfx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "ck_err.h"
#include "coldfmt.h"
#include "coldkey.h"

enum { FROM_COMPUTE = 0, FROM_COLD = 1 };

typedef struct pslot {
    uint64_t hash;
    uint64_t stamp; /* LRU clock; 0 = free */
    int32_t next;   /* hash chain */
    int32_t logical;
    uint32_t hits;
    uint8_t pinned, persisted, from;
} pslot;

typedef struct pfetch {
    pfx *p;
    uint64_t hash; /* 0 = free record */
    int logical;
    int *waiter;
} pfetch;

struct pfx {
    pfx_config c;
    size_t block_bytes;
    int n_slots, n_buckets; /* n_buckets: a power of two */
    float *slab;
    pslot *slots;
    int32_t *bucket;
    int32_t *free_slots;
    int n_free;
    uint64_t clock;
    pfetch *fetch; /* (max_fetches) */
    int puts_in_flight, gets_in_flight;
    coldfmt *fmt;
    unsigned char *enc; /* (coldfmt_bound(block_bytes)) */
    float *dec;         /* (block_bytes) */
    pfx_stats st;
};

uint64_t pfx_root(const char *fingerprint) {
    return XXH64(fingerprint, strlen(fingerprint), 0x636f6e666b76ULL /* "confkv" */);
}

uint64_t pfx_next(uint64_t parent, const int32_t *tokens, int n) {
    /* Little-endian ids, so the name is the same on every host. */
    unsigned char buf[4 * 64];
    XXH64_hash_t h = parent;
    for (int i = 0; i < n;) {
        int k = 0;
        for (; i < n && k < 64; i++, k++) {
            uint32_t v = (uint32_t)tokens[i];
            buf[4 * k] = (unsigned char)v, buf[4 * k + 1] = (unsigned char)(v >> 8);
            buf[4 * k + 2] = (unsigned char)(v >> 16), buf[4 * k + 3] = (unsigned char)(v >> 24);
        }
        h = XXH64(buf, (size_t)4 * k, h);
    }
    return h ? h : 1; /* 0 marks a free fetch record */
}

int pfx_new(const pfx_config *c, pfx **out) {
    *out = NULL;
    if (c->shape.n_layers <= 0 || c->shape.block_size <= 0 || c->shape.kv_dim <= 0 || !c->fingerprint ||
        strlen(c->fingerprint) != 16 || c->promote_hits < 0 || c->max_fetches < 0)
        return CK_EINVAL;
    pfx *p = calloc(1, sizeof *p);
    if (!p) return CK_ENOMEM;
    p->c = *c;
    if (!p->c.max_fetches) p->c.max_fetches = 256;
    p->block_bytes = kvq_f32_bytes(&c->shape);
    size_t n = c->budget_bytes / p->block_bytes;
    if (n > (1u << 24)) n = 1u << 24;
    p->n_slots = (int)n;
    p->n_buckets = 16;
    while (p->n_buckets < 2 * p->n_slots) p->n_buckets <<= 1;
    size_t ns = n ? n : 1;
    p->slab = malloc(ns * p->block_bytes);
    p->slots = calloc(ns, sizeof *p->slots);
    p->free_slots = malloc(ns * sizeof *p->free_slots);
    p->bucket = malloc((size_t)p->n_buckets * sizeof *p->bucket);
    p->fetch = calloc((size_t)p->c.max_fetches, sizeof *p->fetch);
    int rc = CK_ENOMEM;
    if (!p->slab || !p->slots || !p->free_slots || !p->bucket || !p->fetch) goto fail;
    if (c->cold && (coldfmt_new(&p->fmt) || !(p->enc = malloc(coldfmt_bound(p->block_bytes))) ||
                    !(p->dec = malloc(p->block_bytes))))
        goto fail;
    for (int i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
    for (int i = 0; i < p->n_slots; i++) p->free_slots[i] = p->n_slots - 1 - i;
    p->n_free = p->n_slots;
    for (int i = 0; i < p->c.max_fetches; i++) p->fetch[i].p = p;
    p->st.n_slots = p->n_slots;
    *out = p;
    return CK_OK;
fail:
    pfx_free(p);
    return rc;
}

void pfx_free(pfx *p) {
    if (!p) return;
    /* Callbacks in flight point at us: let them land (bounded). */
    for (int i = 0; i < p->c.max_fetches && p->fetch; i++) p->fetch[i].waiter = NULL;
    struct timespec ms = {0, 1000000};
    for (int tries = 0; p->c.cold && pfx_in_flight(p) && tries < 1000; tries++) {
        cold_poll(p->c.cold);
        if (pfx_in_flight(p)) nanosleep(&ms, NULL);
    }
    free(p->slab);
    free(p->slots);
    free(p->free_slots);
    free(p->bucket);
    free(p->fetch);
    coldfmt_free(p->fmt);
    free(p->enc);
    free(p->dec);
    free(p);
}

static float *slot_data(const pfx *p, int s) {
    return p->slab + (size_t)s * (p->block_bytes / sizeof(float));
}
static int32_t *bucket_of(pfx *p, uint64_t h) { return &p->bucket[h & (uint64_t)(p->n_buckets - 1)]; }

static int lookup(const pfx *p, uint64_t h) {
    if (!p->n_slots) return -1;
    for (int s = p->bucket[h & (uint64_t)(p->n_buckets - 1)]; s >= 0; s = p->slots[s].next)
        if (p->slots[s].hash == h) return s;
    return -1;
}

static void unlink_slot(pfx *p, int s) {
    int32_t *link = bucket_of(p, p->slots[s].hash);
    while (*link != s) link = &p->slots[*link].next;
    *link = p->slots[s].next;
}

/* A free slot: the free stack, else the least recently used unpinned one. */
static int take_slot(pfx *p) {
    if (p->n_free) return p->free_slots[--p->n_free];
    int victim = -1;
    for (int i = 0; i < p->n_slots; i++)
        if (!p->slots[i].pinned && (victim < 0 || p->slots[i].stamp < p->slots[victim].stamp)) victim = i;
    if (victim < 0) return CK_ENOSPACE;
    unlink_slot(p, victim);
    p->st.evictions++;
    p->st.used--;
    p->st.bytes -= p->block_bytes;
    return victim;
}

/* Its cold key; the fingerprint was checked by pfx_new, so it always fits. */
static int key_of(const pfx *p, uint64_t h, char *buf, size_t cap) {
    int n = coldkey_pfx(buf, cap, NULL, p->c.fingerprint, h);
    return n < 0 ? n : CK_OK;
}

static void meta_of(const pfx *p, uint64_t h, int logical, coldfmt_meta *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->fingerprint, sizeof m->fingerprint, "%s", p->c.fingerprint);
    m->shape = p->c.shape;
    m->dtype = COLDFMT_F32;
    m->n_tokens = p->c.shape.block_size;
    m->logical = logical;
    m->tag = h;
    m->check_tag = 1;
}

static void put_done(void *ud, int status, const void *data, size_t len) {
    (void)data, (void)len;
    pfx *p = ud;
    p->puts_in_flight--;
    if (status) p->st.persist_failures++;
}

static void persist(pfx *p, int s) {
    pslot *ps = &p->slots[s];
    if (!p->c.cold || ps->persisted) return;
    coldfmt_meta m;
    meta_of(p, ps->hash, ps->logical, &m);
    size_t len = 0;
    char key[COLDKEY_MAX];
    if (key_of(p, ps->hash, key, sizeof key) ||
        coldfmt_encode(p->fmt, &m, slot_data(p, s), p->block_bytes, p->enc, coldfmt_bound(p->block_bytes),
                       &len) ||
        p->c.cold->ops->put(p->c.cold, key, p->enc, len, 0, put_done, p)) {
        p->st.persist_failures++;
        return;
    }
    ps->persisted = 1;
    p->puts_in_flight++;
    p->st.persisted++;
}

static void pin(pfx *p, int s) {
    if (p->slots[s].pinned || 2 * (p->st.pinned + 1) > p->n_slots) return;
    p->slots[s].pinned = 1;
    p->st.pinned++;
}

static int insert(pfx *p, uint64_t h, int logical, const float *block, int flags, int from) {
    int s = lookup(p, h);
    if (s < 0) {
        if (!p->n_slots) return CK_ENOSPACE;
        if ((s = take_slot(p)) < 0) return s;
        memcpy(slot_data(p, s), block, p->block_bytes);
        p->slots[s] =
            (pslot){.hash = h, .logical = logical, .from = (uint8_t)from, .persisted = from == FROM_COLD};
        int32_t *b = bucket_of(p, h);
        p->slots[s].next = *b;
        *b = s;
        p->st.inserts++;
        p->st.used++;
        p->st.bytes += p->block_bytes;
    }
    p->slots[s].stamp = ++p->clock;
    if (flags & PFX_PIN) pin(p, s);
    if (flags & PFX_PERSIST) persist(p, s);
    return CK_OK;
}

int pfx_insert(pfx *p, uint64_t hash, int logical, const float *block, int flags) {
    if (!p || !block || logical < 0) return CK_EINVAL;
    return insert(p, hash, logical, block, flags, FROM_COMPUTE);
}

int pfx_find(pfx *p, uint64_t hash, int *tier) {
    p->st.lookups++;
    int s = lookup(p, hash);
    if (s < 0) return -1;
    pslot *ps = &p->slots[s];
    ps->stamp = ++p->clock;
    ps->hits++;
    int t = ps->pinned ? PFX_HIT_TEMPLATE : ps->from == FROM_COLD ? PFX_HIT_COLD : PFX_HIT_WARM;
    if (t == PFX_HIT_TEMPLATE)
        p->st.hits_template++;
    else if (t == PFX_HIT_COLD)
        p->st.hits_cold++;
    else
        p->st.hits_warm++;
    /* Only the first use after a fetch counts as a cold hit. */
    if (ps->from == FROM_COLD) ps->from = FROM_COMPUTE;
    if (p->c.promote_hits && ps->hits == (uint32_t)p->c.promote_hits && !ps->pinned) {
        pin(p, s);
        persist(p, s);
        p->st.promotions++;
    }
    if (tier) *tier = t;
    return s;
}

int pfx_has(const pfx *p, uint64_t hash) { return lookup(p, hash) >= 0; }

const float *pfx_block(const pfx *p, int slot) {
    return slot >= 0 && slot < p->n_slots && p->slots[slot].stamp ? slot_data(p, slot) : NULL;
}

static void get_done(void *ud, int status, const void *data, size_t len) {
    pfetch *f = ud;
    pfx *p = f->p;
    p->gets_in_flight--;
    if (!status) {
        coldfmt_meta m;
        meta_of(p, f->hash, f->logical, &m);
        if (coldfmt_decode(p->fmt, &m, data, len, p->dec, p->block_bytes, NULL)) {
            p->st.integrity_failures++;
            status = CK_EFORMAT;
        } else if (insert(p, f->hash, f->logical, p->dec, 0, FROM_COLD)) {
            status = CK_ENOSPACE;
        }
    }
    if (status)
        p->st.fetch_misses++;
    else
        p->st.fetch_hits++;
    if (f->waiter) (*f->waiter)--;
    f->hash = 0;
    f->waiter = NULL;
}

int pfx_fetch(pfx *p, uint64_t hash, int logical, int *waiter) {
    if (!p->c.cold || !p->n_slots) return CK_ENOTFOUND;
    int i = 0;
    while (i < p->c.max_fetches && p->fetch[i].hash) i++;
    if (i == p->c.max_fetches) return CK_EBUSY;
    pfetch *f = &p->fetch[i];
    char key[COLDKEY_MAX];
    int rc = key_of(p, hash, key, sizeof key);
    if (rc) return rc;
    *f = (pfetch){p, hash, logical, waiter};
    rc = p->c.cold->ops->get(p->c.cold, key, get_done, f);
    if (rc) {
        f->hash = 0;
        f->waiter = NULL;
        return rc;
    }
    p->gets_in_flight++;
    p->st.fetches++;
    if (waiter) (*waiter)++;
    return CK_OK;
}

void pfx_forget_waiter(pfx *p, const int *waiter) {
    for (int i = 0; i < p->c.max_fetches; i++)
        if (p->fetch[i].waiter == waiter) p->fetch[i].waiter = NULL;
}

int pfx_in_flight(const pfx *p) { return p->puts_in_flight + p->gets_in_flight; }

const pfx_stats *pfx_get_stats(const pfx *p) { return &p->st; }
