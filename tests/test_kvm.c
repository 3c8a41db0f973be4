/* test_kvm.c - the KV manager's answers: placement says "placed" or "no
 * room" exactly when the pool can or cannot hold the tokens, commitments
 * follow the policies' steady needs, a parked sequence frees its blocks
 * and comes back bit-exact (so the scheduler can preempt and ask again), a
 * tier too small to park in says so and moves nothing, and the mover's
 * batched plans keep every block's bytes. Runs on the CPU backend with the
 * shared stories260K model (block contents are written by the test). */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "kv.h"
#include "kvm.h"
#include "mv.h"
#include "kvpol.h"
#include "tier.h"

#define BS 4
#define NB 12

static model *m;
static backend *b;

static int setup(void) {
    char err[256];
    if (model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                   sizeof err))
        return -1;
    be_options o = {
        .max_batch_tokens = 64, .n_kv_blocks = NB, .block_size = BS, .n_threads = 1, .n_kv8_blocks = NB};
    return be_cpu_new(m, &o, &b, err, sizeof err) ? -1 : 0;
}

static int new_kvm(kvm *k, size_t warm_bytes) {
    char err[256];
    kvm_config c = {.b = b,
                    .n_blocks = NB,
                    .block_size = BS,
                    .warm_budget_bytes = warm_bytes,
                    .instance = 42,
                    .staging_bytes = (size_t)1 << 20};
    return kvm_init(k, &c, err, sizeof err);
}

/* Block contents that name their sequence, block and position. */
static void pattern(float *v, size_t n, int seq, int j) {
    for (size_t i = 0; i < n; i++) v[i] = (float)(seq * 1000003 + j * 7919) + (float)i * 0.25f;
}

/* Write every hot block of s with its pattern. */
static void fill(kv_seq *s, int seq) {
    float *v = malloc(b->kv_block_floats * sizeof *v);
    for (int j = 0; j < s->n_blocks; j++) {
        pattern(v, b->kv_block_floats, seq, j);
        CK_CHECK(b->ops->kv_write(b, s->hot[j], v) == 0);
    }
    free(v);
}

/* 1 when every block of s is hot and holds its pattern. */
static int intact(const kv_seq *s, int seq) {
    float *v = malloc(b->kv_block_floats * sizeof *v), *w = malloc(b->kv_block_floats * sizeof *w);
    int ok = 1;
    for (int j = 0; j < s->n_blocks && ok; j++) {
        if (s->hot[j] == KV_NONE || s->tier[j] != KV_TIER_HOT || b->ops->kv_read(b, s->hot[j], v)) {
            ok = 0;
            break;
        }
        pattern(w, b->kv_block_floats, seq, j);
        ok = !memcmp(v, w, b->kv_block_floats * sizeof *v);
    }
    free(v);
    free(w);
    return ok;
}

/* Placement: 12 blocks of 4 tokens. "placed" while they last, then "no
 * room"; kvm_need and kvm_fit_tokens count as the pool does. */
static void test_place(void) {
    kvm k;
    CK_CHECK(new_kvm(&k, 0) == 0);
    kv_seq a, c;
    kv_seq_init(&a, 1, 256, BS);
    kv_seq_init(&c, 2, 256, BS);
    CK_CHECK(kvm_need(&k, &a, 10) == 3);
    CK_CHECK(kvm_place(&k, &a, 10) == KVM_PLACED);
    kv_seq_commit(&a, 10);
    CK_CHECK(kvm_free_blocks(&k) == NB - 3);
    CK_CHECK(kvm_need(&k, &a, 2) == 0); /* block 2 has room for 2 more */
    CK_CHECK(kvm_fit_tokens(&k, &a) == 2 + (NB - 3) * BS);
    CK_CHECK(kvm_place(&k, &c, (NB - 3) * BS) == KVM_PLACED);
    kv_seq_commit(&c, (NB - 3) * BS);
    CK_CHECK(kvm_free_blocks(&k) == 0);
    CK_CHECK(kvm_place(&k, &a, 2) == KVM_PLACED); /* the partial block takes them */
    kv_seq_commit(&a, 2);
    CK_CHECK(kvm_place(&k, &a, 1) == KVM_NO_ROOM);
    CK_CHECK(kvm_fit_tokens(&k, &a) == 0);
    /* past the block table: an error, not "no room" */
    kv_seq t;
    kv_seq_init(&t, 3, 8, BS);
    CK_CHECK(kvm_place(&k, &t, 9) == CK_ETOOLONG);
    kv_seq_free(&t);
    kv_seq_reset(&a, &k.pool);
    kv_seq_reset(&c, &k.pool);
    CK_CHECK(kvm_free_blocks(&k) == NB);
    kv_seq_free(&a);
    kv_seq_free(&c);
    kvm_free(&k);
}

/* Commitments, in blocks of 4: prompt 10 + limit 30 = 39 positions, 10
 * blocks in all. full holds all 10; window:8 holds 2 + 2; while the
 * prompt is in, at least its blocks + 1. */
static void test_commitment(void) {
    kvm k;
    CK_CHECK(new_kvm(&k, 0) == 0);
    kvpol_config full, win, conf;
    char err[64];
    CK_CHECK(kvpol_parse("full", &full, err, sizeof err) == 0);
    CK_CHECK(kvpol_parse("window:8", &win, err, sizeof err) == 0);
    CK_CHECK(kvpol_parse("conf", &conf, err, sizeof err) == 0);
    CK_CHECK(kvm_commitment(&k, &full, 10, 30, 10, 1) == 10);
    CK_CHECK(kvm_commitment(&k, &win, 10, 30, 10, 1) == 4);
    CK_CHECK(kvm_commitment(&k, &win, 10, 30, 30, 0) == 9);   /* 30 tokens prefilling: 8 blocks + 1 */
    CK_CHECK(kvm_commitment(&k, &conf, 10, 30, 10, 1) == 10); /* conf's 16 capped at the whole 10 */
    CK_CHECK(kvm_commitment(&k, &conf, 100, 100, 100, 1) == 16);
    kvm_free(&k);
}

/* The scheduler's loop, as vLLM's: a sequence gets "no room", another is
 * parked (its blocks go warm, the pool is free again), the first is
 * placed; then the second resumes and its KV is bit-exact. */
static void test_park_then_place(void) {
    kvm k;
    CK_CHECK(new_kvm(&k, 0) == 0);
    kv_seq a, c;
    kv_seq_init(&a, 1, 256, BS);
    kv_seq_init(&c, 2, 256, BS);
    uint8_t *moved = calloc((size_t)a.max_blocks, 1);
    CK_CHECK(kvm_place(&k, &a, 10 * BS) == KVM_PLACED); /* 10 blocks */
    kv_seq_commit(&a, 10 * BS);
    fill(&a, 1);
    CK_CHECK(kvm_place(&k, &a, 4) == KVM_PLACED); /* reserved past the written end: 1 more block */
    CK_CHECK(kvm_free_blocks(&k) == 1);
    CK_CHECK(kvm_place(&k, &c, 3 * BS) == KVM_NO_ROOM);
    kv_seq_reset(&c, &k.pool); /* what it took before the answer goes back */
    CK_CHECK(kvm_park(&k, &a, moved) == 0);
    CK_CHECK(kvm_free_blocks(&k) == NB && a.n_hot == 0 && a.n_blocks == 10);
    CK_CHECK(kvm_resume_need(&k, &a, moved, 1) == 11); /* 10 back, 1 new for the next token */
    CK_CHECK(kvm_place(&k, &c, 3 * BS) == KVM_PLACED);
    kv_seq_commit(&c, 3 * BS);
    fill(&c, 2);
    /* Only 9 blocks are free now: a partial resume says "busy" and keeps the rest. */
    CK_CHECK(kvm_resume(&k, &a, moved) == CK_EBUSY);
    CK_CHECK(kvm_free_blocks(&k) == 0 && a.n_hot == NB - 3);
    kv_seq_reset(&c, &k.pool);
    CK_CHECK(kvm_resume(&k, &a, moved) == 0);
    CK_CHECK_MSG(intact(&a, 1), "the parked sequence came back changed");
    CK_CHECK(kvm_free_blocks(&k) == NB - 10);
    kvm_release(&k, NULL, &a, 1);
    CK_CHECK(kvm_free_blocks(&k) == NB);
    free(moved);
    kv_seq_free(&a);
    kv_seq_free(&c);
    kvm_free(&k);
}

/* A warm tier with room for 2 blocks cannot park 5: CK_ENOSPACE, and the
 * sequence is untouched (the scheduler recomputes it instead). */
static void test_park_no_room(void) {
    kvm k;
    size_t slot = b->kv_block_floats * sizeof(float);
    CK_CHECK(new_kvm(&k, 2 * slot) == 0);
    kv_seq a;
    kv_seq_init(&a, 1, 256, BS);
    uint8_t *moved = calloc((size_t)a.max_blocks, 1);
    CK_CHECK(kvm_place(&k, &a, 5 * BS) == KVM_PLACED);
    kv_seq_commit(&a, 5 * BS);
    fill(&a, 3);
    CK_CHECK(kvm_park(&k, &a, moved) == CK_ENOSPACE);
    CK_CHECK(a.n_hot == 5 && kvm_free_blocks(&k) == NB - 5 && intact(&a, 3));
    kvm_release(&k, NULL, &a, 1);
    free(moved);
    kv_seq_free(&a);
    kvm_free(&k);
}

/* A plan through the engine's shared mover (batches of up to 16): demote
 * 6 blocks to the warm tier, then recall them; the bytes are the same and
 * the counts add up. A policy on the mover plans the same moves. */
static void test_mover_batches(void) {
    kvm k;
    CK_CHECK(new_kvm(&k, 0) == 0);
    kv_seq a;
    kv_seq_init(&a, 1, 256, BS);
    CK_CHECK(kvm_place(&k, &a, 10 * BS) == KVM_PLACED);
    kv_seq_commit(&a, 10 * BS);
    fill(&a, 4);
    int32_t dem[] = {1, 2, 3, 4, 5, 6};
    kv_plan out = {.n_demote = 6, .demote = dem, .drop = 0};
    mv_counts c = {0};
    CK_CHECK(mv_run(k.mv, &a, &out, &c) == 0);
    CK_CHECK(c.demoted == 6 && c.dropped == 0 && a.n_hot == 4 && kvm_free_blocks(&k) == NB - 4);
    for (int i = 0; i < 6; i++) CK_CHECK(a.tier[dem[i]] == KV_TIER_WARM);
    uint8_t ops[6] = {MV_RECALL, MV_RECALL, MV_RECALL, MV_RECALL, MV_RECALL, MV_RECALL};
    kv_plan back = {.n_up = 6, .up = dem, .up_op = ops};
    CK_CHECK(mv_run(k.mv, &a, &back, &c) == 0);
    CK_CHECK(c.recalled == 6 && a.n_hot == 10);
    CK_CHECK_MSG(intact(&a, 4), "a batched round trip changed a block");
    /* A full pool stops the rest of a plan: 2 free blocks, 3 recalls asked. */
    kv_plan out3 = {.n_demote = 3, .demote = dem, .drop = 0};
    CK_CHECK(mv_run(k.mv, &a, &out3, &c) == 0);
    kv_seq t;
    kv_seq_init(&t, 2, 256, BS);
    CK_CHECK(kvm_place(&k, &t, (NB - 10 + 1) * BS) == KVM_PLACED); /* leaves 2 free */
    kv_plan back3 = {.n_up = 3, .up = dem, .up_op = ops};
    mv_counts c3 = {0};
    CK_CHECK(mv_run(k.mv, &a, &back3, &c3) == 0);
    CK_CHECK(c3.recalled == 2 && a.tier[dem[2]] == KV_TIER_WARM && kvm_free_blocks(&k) == 0);
    kv_seq_reset(&t, &k.pool);
    kv_seq_free(&t);
    tier_release_seq(k.warm, &a);
    for (int j = 0; j < a.n_blocks; j++)
        if (a.tier[j] == KV_TIER_WARM) a.tier[j] = KV_TIER_EMPTY;
    kv_seq_reset(&a, &k.pool);
    CK_CHECK(kvm_free_blocks(&k) == NB);
    kv_seq_free(&a);
    kvm_free(&k);
}

int main(void) {
    if (setup()) return 1;
    CK_RUN(test_place);
    CK_RUN(test_commitment);
    CK_RUN(test_park_then_place);
    CK_RUN(test_park_no_room);
    CK_RUN(test_mover_batches);
    be_free(b);
    model_free(m);
    return ck_test_summary();
}
