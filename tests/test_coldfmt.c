/* test_coldfmt.c - cold-tier block values (coldfmt.h): f32 and int8 blocks
 * round-trip byte for byte; every single-byte corruption and every
 * truncation or extension of a value is refused with CK_EFORMAT; a value of
 * another model (fingerprint), shape, block, tag or dtype is refused; bad
 * arguments are CK_EINVAL; the tier refuses a corrupted cold value as an
 * integrity failure and recomputes rather than using it. */
#include <stdlib.h>

#include "ck_err.h"
#include "ck_test.h"
#include "cold.h"
#include "coldfmt.h"
#include "kv.h"
#include "tier.h"

static const kvq_shape shape = {3, 8, 24};

static void fill(float *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 8.0f;
    }
}

static coldfmt_meta meta(int dtype) {
    coldfmt_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.fingerprint, sizeof m.fingerprint, "0123456789abcdef");
    m.shape = shape;
    m.dtype = dtype;
    m.n_tokens = 5;
    m.logical = 3;
    m.tag = 0x1122334455667788ULL;
    m.check_tag = 1;
    return m;
}

/* Encode a random f32 block; returns the value (malloc'd) and its length. */
static unsigned char *encode_block(coldfmt *f, const coldfmt_meta *m, const void *payload, size_t n,
                                   size_t *len) {
    unsigned char *v = malloc(coldfmt_bound(n));
    if (!v || coldfmt_encode(f, m, payload, n, v, coldfmt_bound(n), len)) {
        free(v);
        return NULL;
    }
    return v;
}

static void test_round_trip(void) {
    coldfmt *f = NULL;
    CK_CHECK(coldfmt_new(&f) == 0);
    size_t n = coldfmt_payload_bytes(&shape, COLDFMT_F32);
    CK_CHECK(n == kvq_f32_bytes(&shape));
    float *a = malloc(n), *b = malloc(n);
    fill(a, n / sizeof(float), 1);
    coldfmt_meta m = meta(COLDFMT_F32), got;
    size_t len = 0;
    unsigned char *v = encode_block(f, &m, a, n, &len);
    CK_CHECK(v && len > COLDFMT_HEADER_BYTES && len <= coldfmt_bound(n));
    CK_CHECK(!memcmp(v, "CKVB", 4));
    CK_CHECK(coldfmt_decode(f, &m, v, len, b, n, &got) == 0);
    CK_CHECK(!memcmp(a, b, n));
    CK_CHECK(got.n_tokens == 5 && got.logical == 3 && got.tag == m.tag && got.dtype == COLDFMT_F32);
    CK_CHECK(!strcmp(got.fingerprint, m.fingerprint));
    /* "any" n_tokens/logical/tag in want: still decodes, got tells them */
    coldfmt_meta any = m;
    any.n_tokens = any.logical = -1;
    any.check_tag = 0;
    CK_CHECK(coldfmt_decode(f, &any, v, len, b, n, &got) == 0 && got.n_tokens == 5 && got.logical == 3);
    /* a block of zeros compresses well */
    memset(a, 0, n);
    size_t zl = 0;
    unsigned char *z = encode_block(f, &m, a, n, &zl);
    CK_CHECK(z && zl < n / 10);
    CK_CHECK(coldfmt_decode(f, &m, z, zl, b, n, NULL) == 0 && !memcmp(a, b, n));
    /* int8 (kvq.h) blocks */
    size_t n8 = coldfmt_payload_bytes(&shape, COLDFMT_INT8);
    CK_CHECK(n8 == kvq_block_bytes(&shape));
    coldfmt_meta m8 = meta(COLDFMT_INT8);
    fill(a, n / sizeof(float), 2);
    unsigned char *q = malloc(n8), *q2 = malloc(n8);
    kvq_quantize(&shape, a, 5, q);
    size_t l8 = 0;
    unsigned char *v8 = encode_block(f, &m8, q, n8, &l8);
    CK_CHECK(v8 && coldfmt_decode(f, &m8, v8, l8, q2, n8, NULL) == 0 && !memcmp(q, q2, n8));
    /* f32 value read as int8 and vice versa */
    CK_CHECK(coldfmt_decode(f, &m8, v, len, q2, n8, NULL) == CK_EFORMAT);
    CK_CHECK(coldfmt_decode(f, &m, v8, l8, b, n, NULL) == CK_EFORMAT);
    free(q);
    free(q2);
    free(v8);
    free(z);
    free(v);
    free(a);
    free(b);
    coldfmt_free(f);
}

/* Flip each byte of a value in turn (three different ways), cut it at every
 * length, extend it: never accepted. */
static void test_every_corruption(void) {
    coldfmt *f = NULL;
    CK_CHECK(coldfmt_new(&f) == 0);
    size_t n = coldfmt_payload_bytes(&shape, COLDFMT_F32);
    float *a = malloc(n), *b = malloc(n);
    fill(a, n / sizeof(float), 7);
    coldfmt_meta m = meta(COLDFMT_F32);
    size_t len = 0;
    unsigned char *v = encode_block(f, &m, a, n, &len);
    CK_CHECK(v);
    unsigned char *c = malloc(len + 64);
    coldfmt_meta loose = m; /* the most permissive reader still refuses */
    loose.n_tokens = loose.logical = -1;
    loose.check_tag = 0;
    static const unsigned char flips[] = {0x01, 0x80, 0xff};
    for (size_t i = 0; i < len; i++) {
        for (size_t k = 0; k < sizeof flips; k++) {
            memcpy(c, v, len);
            c[i] ^= flips[k];
            CK_CHECK_MSG(coldfmt_decode(f, &loose, c, len, b, n, NULL) == CK_EFORMAT, "byte %zu ^ 0x%02x", i,
                         flips[k]);
        }
    }
    for (size_t l = 0; l < len; l++)
        CK_CHECK_MSG(coldfmt_decode(f, &m, v, l, b, n, NULL) == CK_EFORMAT, "length %zu", l);
    CK_CHECK(coldfmt_decode(f, &m, NULL, 0, b, n, NULL) == CK_EFORMAT);
    memcpy(c, v, len);
    for (size_t extra = 1; extra <= 64; extra++) {
        c[len + extra - 1] = 0;
        CK_CHECK_MSG(coldfmt_decode(f, &m, c, len + extra, b, n, NULL) == CK_EFORMAT, "extended by %zu",
                     extra);
    }
    /* still fine untouched */
    CK_CHECK(coldfmt_decode(f, &m, v, len, b, n, NULL) == 0 && !memcmp(a, b, n));
    free(c);
    free(v);
    free(a);
    free(b);
    coldfmt_free(f);
}

/* A valid value read by the wrong reader. */
static void test_wrong_reader(void) {
    coldfmt *f = NULL;
    CK_CHECK(coldfmt_new(&f) == 0);
    size_t n = coldfmt_payload_bytes(&shape, COLDFMT_F32);
    float *a = malloc(n), *b = malloc(n);
    fill(a, n / sizeof(float), 9);
    coldfmt_meta m = meta(COLDFMT_F32);
    size_t len = 0;
    unsigned char *v = encode_block(f, &m, a, n, &len);
    CK_CHECK(v);
    coldfmt_meta w = m;
    w.fingerprint[15] = 'e'; /* another model */
    CK_CHECK(coldfmt_decode(f, &w, v, len, b, n, NULL) == CK_EFORMAT);
    w = m;
    w.tag ^= 1; /* stored under another key */
    CK_CHECK(coldfmt_decode(f, &w, v, len, b, n, NULL) == CK_EFORMAT);
    w = m;
    w.logical = 4;
    CK_CHECK(coldfmt_decode(f, &w, v, len, b, n, NULL) == CK_EFORMAT);
    w = m;
    w.n_tokens = 6;
    CK_CHECK(coldfmt_decode(f, &w, v, len, b, n, NULL) == CK_EFORMAT);
    w = m;
    w.shape.kv_dim = 12; /* a smaller shape: also the dst is big enough */
    CK_CHECK(coldfmt_decode(f, &w, v, len, b, n, NULL) == CK_EFORMAT);
    w = m;
    w.shape.n_layers = 2;
    CK_CHECK(coldfmt_decode(f, &w, v, len, b, n, NULL) == CK_EFORMAT);
    /* bad arguments */
    CK_CHECK(coldfmt_decode(f, &m, v, len, b, n - 1, NULL) == CK_EINVAL);
    w = m;
    snprintf(w.fingerprint, sizeof w.fingerprint, "0123456789ABCDEF"); /* not lowercase hex */
    CK_CHECK(coldfmt_decode(f, &w, v, len, b, n, NULL) == CK_EINVAL);
    size_t l2;
    unsigned char *big = malloc(coldfmt_bound(n));
    CK_CHECK(coldfmt_encode(f, &w, a, n, big, coldfmt_bound(n), &l2) == CK_EINVAL);
    CK_CHECK(coldfmt_encode(f, &m, a, n - 4, big, coldfmt_bound(n), &l2) == CK_EINVAL);
    CK_CHECK(coldfmt_encode(f, &m, a, n, big, coldfmt_bound(n) - 1, &l2) == CK_ENOSPACE);
    w = m;
    w.n_tokens = shape.block_size + 1;
    CK_CHECK(coldfmt_encode(f, &w, a, n, big, coldfmt_bound(n), &l2) == CK_EINVAL);
    w = m;
    w.dtype = 3;
    CK_CHECK(coldfmt_encode(f, &w, a, n, big, coldfmt_bound(n), &l2) == CK_EINVAL);
    free(big);
    free(v);
    free(a);
    free(b);
    coldfmt_free(f);
}

/* The tier writes coldfmt values when it has a fingerprint: a value
 * corrupted in the store is an integrity failure and a miss (the block is
 * dropped, to be recomputed), never KV. */
static void test_tier_integrity(void) {
    cold_store *cold = NULL;
    CK_CHECK(cold_mem_new(&cold) == 0);
    tier_config c = {
        .shape = shape, .max_cold = 16, .cold = cold, .instance = 7, .fingerprint = "00000000deadbeef"};
    c.budget_bytes = 1 * kvq_f32_bytes(&shape);
    tier *t = NULL;
    CK_CHECK(tier_new(&c, &t) == 0);
    kv_seq s;
    kv_seq_init(&s, 1, 64, 8);
    size_t n = kvq_f32_bytes(&shape) / sizeof(float);
    float *blk = malloc(n * sizeof *blk), *back = malloc(n * sizeof *back);
    fill(blk, n, 3);
    CK_CHECK(tier_put(t, &s, 0, blk, 8) == 0);
    CK_CHECK(tier_put(t, &s, 1, blk, 8) == 0); /* block 0 spills */
    tier_poll(t);
    CK_CHECK(s.tier[0] == KV_TIER_COLD && cold_mem_count(cold) == 1);
    CK_CHECK(cold_mem_bytes(cold) < kvq_f32_bytes(&shape) + COLDFMT_HEADER_BYTES + 64); /* an encoded value */
    CK_CHECK(tier_take(t, s.slot[1], back) == 0);
    CK_CHECK(tier_fetch(t, &s, 0) == 0);
    tier_poll(t);
    CK_CHECK(s.tier[0] == KV_TIER_WARM);
    CK_CHECK(tier_take(t, s.slot[0], back) == 0 && !memcmp(back, blk, n * sizeof *blk));
    const tier_stats *st = tier_get_stats(t);
    CK_CHECK(st->integrity_failures == 0 && st->fetch_hits == 1);
    tier *other = NULL;
    tier_release_seq(t, &s);
    tier_poll(t);
    CK_CHECK(cold_mem_count(cold) == 0);
    /* A wrong fingerprint length is refused at tier_new. */
    c.fingerprint = "deadbeef";
    CK_CHECK(tier_new(&c, &other) == CK_EINVAL);
    tier_free(t);
    kv_seq_free(&s);
    free(blk);
    free(back);
    cold_free(cold);
}

/* A store that hands back whatever a test wants for every get (wraps cold_mem). */
typedef struct evil_store {
    cold_store base;
    cold_store *inner;
    int flip; /* byte to corrupt in every value read back */
} evil_store;
typedef struct evil_req {
    cold_cb cb;
    void *ud;
    evil_store *e;
} evil_req;
static void evil_get_cb(void *ud, int status, const void *data, size_t len) {
    evil_req *r = ud;
    unsigned char *c = NULL;
    if (!status && len > (size_t)r->e->flip && (c = malloc(len))) {
        memcpy(c, data, len);
        c[r->e->flip] ^= 0x40;
        data = c;
    }
    r->cb(r->ud, status, data, len);
    free(c);
    free(r);
}
static int evil_put(cold_store *s, const char *k, const void *d, size_t n, unsigned fl, cold_cb cb,
                    void *ud) {
    evil_store *e = (evil_store *)s;
    return e->inner->ops->put(e->inner, k, d, n, fl, cb, ud);
}
static int evil_get(cold_store *s, const char *k, cold_cb cb, void *ud) {
    evil_store *e = (evil_store *)s;
    evil_req *r = malloc(sizeof *r);
    if (!r) return CK_ENOMEM;
    *r = (evil_req){cb, ud, e};
    int rc = e->inner->ops->get(e->inner, k, evil_get_cb, r);
    if (rc) free(r);
    return rc;
}
static int evil_del(cold_store *s, const char *k) {
    return ((evil_store *)s)->inner->ops->del(((evil_store *)s)->inner, k);
}
static void evil_poll(cold_store *s) { cold_poll(((evil_store *)s)->inner); }
static void evil_destroy(cold_store *s) { cold_free(((evil_store *)s)->inner); }
static const cold_ops evil_ops = {evil_put, evil_get, evil_del, evil_poll, evil_destroy};

static void test_tier_corrupted_value(void) {
    evil_store e = {.base = {&evil_ops}, .flip = 100};
    CK_CHECK(cold_mem_new(&e.inner) == 0);
    tier_config c = {
        .shape = shape, .max_cold = 16, .cold = &e.base, .instance = 7, .fingerprint = "00000000deadbeef"};
    c.budget_bytes = 1 * kvq_f32_bytes(&shape);
    tier *t = NULL;
    CK_CHECK(tier_new(&c, &t) == 0);
    kv_seq s;
    kv_seq_init(&s, 1, 64, 8);
    size_t n = kvq_f32_bytes(&shape) / sizeof(float);
    float *blk = malloc(n * sizeof *blk), *back = malloc(n * sizeof *back);
    fill(blk, n, 4);
    CK_CHECK(tier_put(t, &s, 0, blk, 8) == 0);
    CK_CHECK(tier_put(t, &s, 1, blk, 8) == 0);
    tier_poll(t);
    CK_CHECK(tier_take(t, s.slot[1], back) == 0);
    CK_CHECK(tier_fetch(t, &s, 0) == 0);
    tier_poll(t);
    const tier_stats *st = tier_get_stats(t);
    CK_CHECK(s.tier[0] == KV_TIER_DROPPED); /* recomputed by the engine, never used */
    CK_CHECK(st->integrity_failures == 1 && st->fetch_misses == 1 && st->fetch_hits == 0 && st->drops == 1);
    CK_CHECK(cold_mem_count(e.inner) == 0); /* the bad value was deleted */
    CK_CHECK(st->slots_used == 0);
    tier_release_seq(t, &s);
    tier_free(t);
    kv_seq_free(&s);
    free(blk);
    free(back);
    cold_free(&e.base);
}

int main(void) {
    CK_RUN(test_round_trip);
    CK_RUN(test_every_corruption);
    CK_RUN(test_wrong_reader);
    CK_RUN(test_tier_integrity);
    CK_RUN(test_tier_corrupted_value);
    return ck_test_summary();
}
