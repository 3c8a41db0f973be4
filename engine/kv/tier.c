/* tier.c - warm slots, spills to the cold store, fetches back (tier.h). */
#include "tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "ck_err.h"
#include "coldfmt.h"
#include "coldkey.h"

enum { REC_FREE = 0, REC_STORING, REC_STORED, REC_LOADING };

typedef struct slot_meta {
    kv_seq *owner; /* NULL when free */
    int logical;
    int n_tokens;
    uint64_t stamp; /* LRU clock */
} slot_meta;

typedef struct cold_rec {
    tier *t;
    kv_seq *owner; /* NULL once the owner let go (orphan) */
    int logical;
    int n_tokens;
    int state;    /* REC_* */
    uint32_t gen; /* bumped at each reuse: part of the key */
} cold_rec;

struct tier {
    tier_config c;
    size_t slot_bytes;
    unsigned char *slab; /* (n_slots, slot_bytes) */
    slot_meta *slots;
    int32_t *free_slots;
    int n_free;
    cold_rec *recs; /* (max_cold) */
    int32_t *free_recs;
    int n_free_recs;
    uint64_t clock;
    uint64_t nonce;     /* random: this tier's keys are its own */
    coldfmt *fmt;       /* NULL when c.fingerprint is (raw values) */
    unsigned char *enc; /* (coldfmt_bound(slot_bytes)) an encoded spill */
    unsigned char *dec; /* (slot_bytes) a fetched block being verified */
    tier_stats st;
};

void tier_config_default(tier_config *c, const backend *b) {
    memset(c, 0, sizeof *c);
    c->shape.n_layers = b->m->cfg.n_layers;
    c->shape.block_size = b->opt.block_size;
    c->shape.kv_dim = model_kv_dim(&b->m->cfg);
    c->budget_bytes = 4 * (size_t)b->opt.n_kv_blocks * b->kv_block_floats * sizeof(float);
    c->max_cold = 1 << 16;
    c->fingerprint = b->m->fingerprint;
}

/* Not a secret, only distinct per process and tier: urandom, else the clock. */
static uint64_t make_nonce(const void *salt) {
    uint64_t n = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&n, sizeof n, 1, f) != 1) n = 0;
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    n ^= (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40 ^
         (uint64_t)(uintptr_t)salt;
    return n;
}

size_t tier_slot_bytes(const tier *t) { return t->slot_bytes; }

int tier_new(const tier_config *c, tier **out) {
    *out = NULL;
    if (c->shape.n_layers <= 0 || c->shape.block_size <= 0 || c->shape.kv_dim <= 0 || c->max_cold < 0)
        return CK_EINVAL;
    tier *t = calloc(1, sizeof *t);
    if (!t) return CK_ENOMEM;
    t->c = *c;
    t->slot_bytes = c->compress ? kvq_block_bytes(&c->shape) : kvq_f32_bytes(&c->shape);
    size_t n = c->budget_bytes / t->slot_bytes;
    if (n > (1u << 30)) n = 1u << 30;
    t->st.n_slots = (int)n;
    size_t ns = n ? n : 1, nr = c->max_cold ? (size_t)c->max_cold : 1;
    t->slab = malloc(ns * t->slot_bytes);
    t->slots = calloc(ns, sizeof *t->slots);
    t->free_slots = malloc(ns * sizeof *t->free_slots);
    t->recs = calloc(nr, sizeof *t->recs);
    t->free_recs = malloc(nr * sizeof *t->free_recs);
    t->nonce = make_nonce(t);
    if (c->fingerprint && c->cold) {
        coldfmt_meta m = {.shape = c->shape, .dtype = c->compress ? COLDFMT_INT8 : COLDFMT_F32};
        snprintf(m.fingerprint, sizeof m.fingerprint, "%s", c->fingerprint);
        if (strlen(c->fingerprint) != 16 || coldfmt_payload_bytes(&m.shape, m.dtype) != t->slot_bytes) {
            tier_free(t);
            return CK_EINVAL;
        }
        if (coldfmt_new(&t->fmt) || !(t->enc = malloc(coldfmt_bound(t->slot_bytes))) ||
            !(t->dec = malloc(t->slot_bytes))) {
            tier_free(t);
            return CK_ENOMEM;
        }
    }
    if (!t->slab || !t->slots || !t->free_slots || !t->recs || !t->free_recs) {
        tier_free(t);
        return CK_ENOMEM;
    }
    for (int i = 0; i < (int)n; i++) t->free_slots[i] = (int32_t)n - 1 - i;
    t->n_free = (int)n;
    for (int i = 0; i < c->max_cold; i++) {
        t->recs[i].t = t;
        t->free_recs[i] = c->max_cold - 1 - i;
    }
    t->n_free_recs = c->max_cold;
    *out = t;
    return CK_OK;
}

void tier_free(tier *t) {
    if (!t) return;
    /* Requests still in flight hold pointers to our records: drain them. */
    if (t->c.cold && t->recs) {
        for (int i = 0; i < t->c.max_cold; i++) t->recs[i].owner = NULL;
        for (int tries = 0; tries < 1000; tries++) {
            int busy = 0;
            for (int i = 0; i < t->c.max_cold && !busy; i++)
                busy = t->recs[i].state == REC_STORING || t->recs[i].state == REC_LOADING;
            if (!busy) break;
            cold_poll(t->c.cold);
        }
    }
    free(t->slab);
    free(t->slots);
    free(t->free_slots);
    free(t->recs);
    free(t->free_recs);
    coldfmt_free(t->fmt);
    free(t->enc);
    free(t->dec);
    free(t);
}

static unsigned char *slot_ptr(const tier *t, int s) { return t->slab + (size_t)s * t->slot_bytes; }

/* Record rec's cold key. It cannot fail: rec >= 0 and the key, about 60
 * bytes, fits in the COLDKEY_MAX bytes every caller gives. */
static void key_of(const tier *t, int rec, char *buf, size_t cap) {
    (void)coldkey_kv(buf, cap, NULL, t->nonce, t->c.instance, rec, t->recs[rec].gen);
}

/* What a cold value of record rec must say about itself (coldfmt.h); the
 * tag is a hash of its key, so a value under another key is refused. */
static void meta_of(const tier *t, int rec, const char *key, coldfmt_meta *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->fingerprint, sizeof m->fingerprint, "%s", t->c.fingerprint);
    m->shape = t->c.shape;
    m->dtype = t->c.compress ? COLDFMT_INT8 : COLDFMT_F32;
    m->n_tokens = t->recs[rec].n_tokens;
    m->logical = t->recs[rec].logical;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    m->tag = h;
    m->check_tag = 1;
}

static void free_slot(tier *t, int s) {
    t->slots[s].owner = NULL;
    t->free_slots[t->n_free++] = s;
    t->st.slots_used--;
    t->st.bytes -= t->slot_bytes;
}

static void free_rec(tier *t, int r) {
    t->recs[r].state = REC_FREE;
    t->recs[r].owner = NULL;
    t->recs[r].gen++;
    t->free_recs[t->n_free_recs++] = r;
}

static void drop_block(tier *t, kv_seq *owner, int logical) {
    if (owner) {
        owner->tier[logical] = KV_TIER_DROPPED;
        owner->slot[logical] = KV_NONE;
    }
    t->st.drops++;
}

static void put_done(void *ud, int status, const void *data, size_t len) {
    cold_rec *r = ud;
    tier *t = r->t;
    int ri = (int)(r - t->recs);
    if (status) {
        t->st.spill_failures++;
        if (r->owner) drop_block(t, r->owner, r->logical);
        free_rec(t, ri);
        return;
    }
    if (!r->owner) { /* the sequence ended while the write was in flight */
        char key[COLDKEY_MAX];
        key_of(t, ri, key, sizeof key);
        t->c.cold->ops->del(t->c.cold, key);
        free_rec(t, ri);
        return;
    }
    r->state = REC_STORED;
}

/* Make room: move the least recently used slot to the cold store (or drop
 * it). Linear in the slot count, which is fine for the thousands of slots a
 * host holds; a heap would pay off beyond that. */
static void spill_lru(tier *t) {
    int victim = -1;
    for (int i = 0; i < t->st.n_slots; i++)
        if (t->slots[i].owner && (victim < 0 || t->slots[i].stamp < t->slots[victim].stamp)) victim = i;
    if (victim < 0) return;
    slot_meta *sm = &t->slots[victim];
    kv_seq *owner = sm->owner;
    int logical = sm->logical;
    if (!t->c.cold || t->n_free_recs == 0) {
        drop_block(t, owner, logical);
        free_slot(t, victim);
        return;
    }
    int ri = t->free_recs[--t->n_free_recs];
    cold_rec *r = &t->recs[ri];
    r->owner = owner;
    r->logical = logical;
    r->n_tokens = sm->n_tokens;
    r->state = REC_STORING;
    char key[COLDKEY_MAX];
    key_of(t, ri, key, sizeof key);
    t->st.spills++;
    const void *val = slot_ptr(t, victim);
    size_t len = t->slot_bytes;
    if (t->fmt) {
        coldfmt_meta m;
        meta_of(t, ri, key, &m);
        val = t->enc;
        if (coldfmt_encode(t->fmt, &m, slot_ptr(t, victim), t->slot_bytes, t->enc,
                           coldfmt_bound(t->slot_bytes), &len))
            len = 0; /* cannot happen: the meta comes from tier_new's checked config */
    }
    if (!len || t->c.cold->ops->put(t->c.cold, key, val, len, 0, put_done, r)) {
        t->st.spill_failures++;
        free_rec(t, ri);
        drop_block(t, owner, logical);
    } else {
        owner->tier[logical] = KV_TIER_COLD;
        owner->slot[logical] = ri;
    }
    free_slot(t, victim);
}

static int take_slot(tier *t) {
    if (t->n_free == 0) spill_lru(t);
    if (t->n_free == 0) return CK_ENOSPACE;
    int s = t->free_slots[--t->n_free];
    t->st.slots_used++;
    t->st.bytes += t->slot_bytes;
    if (t->st.bytes > t->st.peak_bytes) t->st.peak_bytes = t->st.bytes;
    return s;
}

int tier_put(tier *t, kv_seq *owner, int logical, const float *block, int n_tokens) {
    int s = take_slot(t);
    if (s < 0) {
        drop_block(t, owner, logical);
        return s;
    }
    if (t->c.compress)
        kvq_quantize(&t->c.shape, block, n_tokens, slot_ptr(t, s));
    else
        memcpy(slot_ptr(t, s), block, t->slot_bytes);
    t->slots[s] = (slot_meta){owner, logical, n_tokens, ++t->clock};
    owner->tier[logical] = KV_TIER_WARM;
    owner->slot[logical] = s;
    t->st.puts++;
    return CK_OK;
}

int tier_put_raw(tier *t, kv_seq *owner, int logical, const void *bytes, int n_tokens) {
    if (!t->c.compress) return CK_EINVAL;
    int s = take_slot(t);
    if (s < 0) {
        drop_block(t, owner, logical);
        return s;
    }
    memcpy(slot_ptr(t, s), bytes, t->slot_bytes);
    t->slots[s] = (slot_meta){owner, logical, n_tokens, ++t->clock};
    owner->tier[logical] = KV_TIER_WARM;
    owner->slot[logical] = s;
    t->st.puts++;
    return CK_OK;
}

int tier_take_raw(tier *t, int slot, void *dst) {
    if (!t->c.compress || slot < 0 || slot >= t->st.n_slots || !t->slots[slot].owner) return CK_EINVAL;
    memcpy(dst, slot_ptr(t, slot), t->slot_bytes);
    free_slot(t, slot);
    t->st.gets++;
    return CK_OK;
}

int tier_take(tier *t, int slot, float *dst) {
    if (slot < 0 || slot >= t->st.n_slots || !t->slots[slot].owner) return CK_EINVAL;
    if (t->c.compress)
        kvq_dequantize(&t->c.shape, slot_ptr(t, slot), dst);
    else
        memcpy(dst, slot_ptr(t, slot), t->slot_bytes);
    free_slot(t, slot);
    t->st.gets++;
    return CK_OK;
}

const void *tier_slot_data(const tier *t, int slot) {
    if (slot < 0 || slot >= t->st.n_slots || !t->slots[slot].owner) return NULL;
    return slot_ptr(t, slot);
}

void tier_touch(tier *t, int slot) {
    if (slot >= 0 && slot < t->st.n_slots && t->slots[slot].owner) t->slots[slot].stamp = ++t->clock;
}

static void get_done(void *ud, int status, const void *data, size_t len) {
    cold_rec *r = ud;
    tier *t = r->t;
    int ri = (int)(r - t->recs);
    char key[COLDKEY_MAX];
    key_of(t, ri, key, sizeof key);
    kv_seq *owner = r->owner;
    if (!owner) { /* sequence gone meanwhile */
        t->c.cold->ops->del(t->c.cold, key);
        free_rec(t, ri);
        return;
    }
    if (!status && t->fmt) {
        coldfmt_meta m;
        meta_of(t, ri, key, &m);
        if (coldfmt_decode(t->fmt, &m, data, len, t->dec, t->slot_bytes, NULL)) {
            t->st.integrity_failures++;
            status = CK_EFORMAT;
        } else {
            data = t->dec;
            len = t->slot_bytes;
        }
    }
    if (status || len != t->slot_bytes) {
        t->st.fetch_misses++;
        drop_block(t, owner, r->logical);
        if (status != CK_ENOTFOUND) t->c.cold->ops->del(t->c.cold, key); /* failed or wrong: let it go */
        free_rec(t, ri);
        return;
    }
    int s = take_slot(t);
    if (s < 0) {
        drop_block(t, owner, r->logical);
    } else {
        memcpy(slot_ptr(t, s), data, len);
        t->slots[s] = (slot_meta){owner, r->logical, r->n_tokens, ++t->clock};
        owner->tier[r->logical] = KV_TIER_WARM;
        owner->slot[r->logical] = s;
        t->st.fetch_hits++;
    }
    t->c.cold->ops->del(t->c.cold, key);
    free_rec(t, ri);
}

int tier_fetch(tier *t, kv_seq *owner, int logical) {
    if (owner->tier[logical] != KV_TIER_COLD || !t->c.cold) return CK_EINVAL;
    int ri = owner->slot[logical];
    if (ri < 0 || ri >= t->c.max_cold || t->recs[ri].owner != owner) return CK_EINVAL;
    cold_rec *r = &t->recs[ri];
    if (r->state != REC_STORED) return CK_OK; /* still being written, or already loading */
    char key[COLDKEY_MAX];
    key_of(t, ri, key, sizeof key);
    int rc = t->c.cold->ops->get(t->c.cold, key, get_done, r);
    if (rc) return rc;
    r->state = REC_LOADING;
    t->st.fetches++;
    return CK_OK;
}

void tier_poll(tier *t) { cold_poll(t->c.cold); }

void tier_release_seq(tier *t, kv_seq *owner) {
    for (int i = 0; i < t->st.n_slots; i++)
        if (t->slots[i].owner == owner) free_slot(t, i);
    for (int i = 0; i < t->c.max_cold; i++) {
        cold_rec *r = &t->recs[i];
        if (r->state == REC_FREE || r->owner != owner) continue;
        if (r->state == REC_STORED) {
            char key[COLDKEY_MAX];
            key_of(t, i, key, sizeof key);
            t->c.cold->ops->del(t->c.cold, key);
            free_rec(t, i);
        } else {
            r->owner = NULL; /* its callback frees it */
        }
    }
    for (int j = 0; j < owner->max_blocks; j++) {
        if (owner->tier[j] == KV_TIER_WARM || owner->tier[j] == KV_TIER_COLD) {
            owner->tier[j] = KV_TIER_DROPPED;
            owner->slot[j] = KV_NONE;
        }
    }
}

const tier_stats *tier_get_stats(const tier *t) { return &t->st; }

int tier_room(const tier *t) {
    /* With a cold store every put past the free slots spills the LRU slot
     * (possibly one put a moment ago), so a sequence larger than the whole
     * tier still fits: through it, into the store. */
    if (t->c.cold && t->st.n_slots > 0) return t->n_free + t->n_free_recs;
    return t->n_free;
}
