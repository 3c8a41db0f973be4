/* test_tier.c - the warm tier and the cold path: demote + recall is exact
 * for f32 and within kvq's stated bound for int8; spills go to the cold
 * store and come back; a failing or absent cold store drops blocks, counts
 * them, and never crashes. Every test ends with no slot in use. */
#include <stdlib.h>

#include "ck_err.h"
#include "ck_test.h"
#include "cold.h"
#include "kv.h"
#include "kvq.h"
#include "tier.h"

static const kvq_shape shape = {3, 8, 24}; /* layers, block size, kv_dim */

static void fill(float *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 8.0f;
    }
}

static size_t nfloats(void) { return kvq_f32_bytes(&shape) / sizeof(float); }

static tier *mk(int compress, int slots, cold_store *cold) {
    tier_config c = {.shape = shape, .compress = compress, .max_cold = 64, .cold = cold, .instance = 7};
    c.budget_bytes = (size_t)slots * (compress ? kvq_block_bytes(&shape) : kvq_f32_bytes(&shape));
    tier *t = NULL;
    return tier_new(&c, &t) ? NULL : t;
}

static void test_f32_exact(void) {
    size_t n = nfloats();
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    kv_seq s;
    kv_seq_init(&s, 1, 64, 8);
    tier *t = mk(0, 4, NULL);
    CK_CHECK(t && a && b);
    fill(a, n, 1);
    CK_CHECK(tier_put(t, &s, 2, a, 8) == 0);
    CK_CHECK(s.tier[2] == KV_TIER_WARM && s.slot[2] >= 0);
    CK_CHECK(tier_take(t, s.slot[2], b) == 0);
    CK_CHECK(memcmp(a, b, n * sizeof *a) == 0);
    CK_CHECK(tier_get_stats(t)->slots_used == 0);
    CK_CHECK(tier_take(t, 0, b) == CK_EINVAL); /* taken already */
    tier_free(t);
    kv_seq_free(&s);
    free(a);
    free(b);
}

/* |x - x'| <= max|x| / 254 (1 + 2^-10) over the channel (keys) or token (values). */
static void test_int8_bound(void) {
    size_t n = nfloats();
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    kv_seq s;
    kv_seq_init(&s, 1, 64, 8);
    tier *t = mk(1, 4, NULL);
    CK_CHECK(t);
    fill(a, n, 2);
    int ntok = 5; /* a partly written block: positions 5..7 come back as 0 */
    CK_CHECK(tier_put(t, &s, 0, a, ntok) == 0);
    CK_CHECK(tier_take(t, s.slot[0], b) == 0);
    const int bs = shape.block_size, kvd = shape.kv_dim;
    for (int l = 0; l < shape.n_layers; l++) {
        const float *K = a + (size_t)l * 2 * bs * kvd, *V = K + (size_t)bs * kvd;
        const float *K2 = b + (size_t)l * 2 * bs * kvd, *V2 = K2 + (size_t)bs * kvd;
        for (int c = 0; c < kvd; c++) {
            float m = 0;
            for (int tk = 0; tk < ntok; tk++) m = fmaxf(m, fabsf(K[tk * kvd + c]));
            for (int tk = 0; tk < ntok; tk++)
                CK_CHECK_NEAR(K2[tk * kvd + c], K[tk * kvd + c], m / 254.0f * 1.001f + 1e-7f);
        }
        for (int tk = 0; tk < bs; tk++) {
            float m = 0;
            for (int c = 0; c < kvd; c++) m = fmaxf(m, fabsf(V[tk * kvd + c]));
            for (int c = 0; c < kvd; c++) {
                if (tk >= ntok) {
                    CK_CHECK(V2[tk * kvd + c] == 0 && K2[tk * kvd + c] == 0);
                } else {
                    CK_CHECK_NEAR(V2[tk * kvd + c], V[tk * kvd + c], m / 254.0f * 1.001f + 1e-7f);
                }
            }
        }
    }
    /* raw put/take round-trips the compressed bytes */
    unsigned char *raw = malloc(kvq_block_bytes(&shape)), *raw2 = malloc(kvq_block_bytes(&shape));
    kvq_quantize(&shape, a, ntok, raw);
    CK_CHECK(tier_put_raw(t, &s, 1, raw, ntok) == 0);
    CK_CHECK(tier_take_raw(t, s.slot[1], raw2) == 0);
    CK_CHECK(!memcmp(raw, raw2, kvq_block_bytes(&shape)));
    CK_CHECK(tier_get_stats(t)->slots_used == 0);
    free(raw);
    free(raw2);
    tier_free(t);
    kv_seq_free(&s);
    free(a);
    free(b);
}

/* Four blocks into a 2-slot tier: the two least recently used go cold,
 * come back by fetch, byte for byte. */
static void test_spill_and_fetch(void) {
    size_t n = nfloats();
    cold_store *cold = NULL;
    CK_CHECK(cold_mem_new(&cold) == 0);
    tier *t = mk(0, 2, cold);
    kv_seq s;
    kv_seq_init(&s, 1, 64, 8);
    float *blk[4], *back = malloc(n * sizeof *back);
    for (int j = 0; j < 4; j++) {
        blk[j] = malloc(n * sizeof(float));
        fill(blk[j], n, 10 + (unsigned)j);
        CK_CHECK(tier_put(t, &s, j, blk[j], 8) == 0);
    }
    CK_CHECK(s.tier[0] == KV_TIER_COLD && s.tier[1] == KV_TIER_COLD);
    CK_CHECK(s.tier[2] == KV_TIER_WARM && s.tier[3] == KV_TIER_WARM);
    tier_poll(t); /* the puts complete */
    CK_CHECK(cold_mem_count(cold) == 2);
    CK_CHECK(tier_take(t, s.slot[3], back) == 0); /* frees a slot */
    CK_CHECK(tier_fetch(t, &s, 0) == 0);
    CK_CHECK(s.tier[0] == KV_TIER_COLD); /* asynchronous: not yet */
    tier_poll(t);
    CK_CHECK(s.tier[0] == KV_TIER_WARM);
    CK_CHECK(tier_take(t, s.slot[0], back) == 0);
    CK_CHECK(!memcmp(back, blk[0], n * sizeof(float)));
    const tier_stats *st = tier_get_stats(t);
    CK_CHECK(st->spills == 2 && st->fetch_hits == 1 && st->drops == 0);
    CK_CHECK(cold_mem_count(cold) == 1); /* the fetched key was deleted */
    tier_release_seq(t, &s);             /* block 1 (cold) and block 2 (warm) */
    tier_poll(t);
    CK_CHECK(cold_mem_count(cold) == 0 && st->slots_used == 0);
    for (int j = 0; j < 4; j++) free(blk[j]);
    free(back);
    tier_free(t);
    cold_free(cold);
    kv_seq_free(&s);
}

/* A store that fails every put and get: blocks are dropped and counted. */
static void test_failing_cold_store(void) {
    size_t n = nfloats();
    cold_store *cold = NULL;
    CK_CHECK(cold_mem_new(&cold) == 0);
    tier *t = mk(0, 1, cold);
    kv_seq s;
    kv_seq_init(&s, 1, 64, 8);
    float *a = malloc(n * sizeof *a);
    fill(a, n, 3);
    cold_mem_set_failing(cold, 1, 1);
    CK_CHECK(tier_put(t, &s, 0, a, 8) == 0);
    CK_CHECK(tier_put(t, &s, 1, a, 8) == 0); /* spills block 0: the put fails later */
    CK_CHECK(s.tier[0] == KV_TIER_COLD);
    tier_poll(t);
    CK_CHECK(s.tier[0] == KV_TIER_DROPPED);
    const tier_stats *st = tier_get_stats(t);
    CK_CHECK(st->spill_failures == 1 && st->drops == 1);
    /* gets fail too: a block that made it to the store comes back as a drop */
    cold_mem_set_failing(cold, 0, 1);
    CK_CHECK(tier_put(t, &s, 2, a, 8) == 0); /* spills block 1, this put succeeds */
    tier_poll(t);
    CK_CHECK(s.tier[1] == KV_TIER_COLD);
    CK_CHECK(tier_take(t, s.slot[2], a) == 0);
    CK_CHECK(tier_fetch(t, &s, 1) == 0);
    tier_poll(t);
    CK_CHECK(s.tier[1] == KV_TIER_DROPPED && st->fetch_misses == 1 && st->drops == 2);
    /* no store at all: spills are drops */
    tier *t2 = mk(0, 1, NULL);
    kv_seq s2;
    kv_seq_init(&s2, 2, 64, 8);
    CK_CHECK(tier_put(t2, &s2, 0, a, 8) == 0 && tier_put(t2, &s2, 1, a, 8) == 0);
    CK_CHECK(s2.tier[0] == KV_TIER_DROPPED && tier_get_stats(t2)->drops == 1);
    tier_release_seq(t2, &s2);
    CK_CHECK(tier_get_stats(t2)->slots_used == 0);
    tier_release_seq(t, &s);
    tier_poll(t);
    CK_CHECK(st->slots_used == 0);
    free(a);
    tier_free(t);
    tier_free(t2);
    cold_free(cold);
    kv_seq_free(&s);
    kv_seq_free(&s2);
}

int main(void) {
    CK_RUN(test_f32_exact);
    CK_RUN(test_int8_bound);
    CK_RUN(test_spill_and_fetch);
    CK_RUN(test_failing_cold_store);
    return ck_test_summary();
}
