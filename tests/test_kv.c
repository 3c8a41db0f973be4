/* test_kv.c - block pool and block-table accounting. */
#include "ck_err.h"
#include "ck_test.h"
#include "kv.h"

static void test_pool(void) {
    kv_pool p;
    CK_CHECK(kv_pool_init(&p, 4, 16) == 0);
    int b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = kv_pool_alloc(&p, 7, i);
        CK_CHECK(b[i] >= 0 && b[i] < 4);
        CK_CHECK(p.owner[b[i]] == 7 && p.logical[b[i]] == i);
    }
    CK_CHECK(kv_pool_alloc(&p, 7, 4) == CK_ENOSPACE);
    CK_CHECK(kv_pool_used(&p) == 4);
    CK_CHECK(kv_pool_release(&p, b[2]) == 0);
    CK_CHECK(kv_pool_release(&p, b[2]) == CK_EINVAL); /* double release refused */
    CK_CHECK(kv_pool_release(&p, 99) == CK_EINVAL);
    CK_CHECK(kv_pool_used(&p) == 3);
    CK_CHECK(kv_pool_alloc(&p, 8, 0) == b[2]);
    kv_pool_free(&p);
}

static void test_seq_reserve_commit(void) {
    kv_pool p;
    kv_pool_init(&p, 8, 16);
    kv_seq s;
    CK_CHECK(kv_seq_init(&s, 1, 100, 16) == 0);
    CK_CHECK(s.max_blocks == 7);
    CK_CHECK(kv_seq_blocks_needed(&s, 1) == 1);
    CK_CHECK(kv_seq_blocks_needed(&s, 17) == 2);
    CK_CHECK(kv_seq_reserve(&s, &p, 17) == 0);
    CK_CHECK(kv_pool_used(&p) == 2 && s.n_hot == 2);
    kv_seq_commit(&s, 17);
    CK_CHECK(s.n_tokens == 17 && s.n_blocks == 2);
    CK_CHECK(kv_seq_block_tokens(&s, 0) == 16 && kv_seq_block_tokens(&s, 1) == 1);
    CK_CHECK(kv_seq_hot_tokens(&s) == 17);
    CK_CHECK(kv_seq_blocks_needed(&s, 15) == 0); /* fits in block 1 */
    CK_CHECK(kv_seq_reserve(&s, &p, 15) == 0);
    CK_CHECK(kv_pool_used(&p) == 2);
    kv_seq_commit(&s, 15);
    /* Past the table: refused. */
    CK_CHECK(kv_seq_reserve(&s, &p, 100) == CK_ETOOLONG);
    /* Pool exhaustion: partial progress is kept, the call can be retried. */
    kv_seq t;
    kv_seq_init(&t, 2, 200, 16);
    CK_CHECK(kv_seq_reserve(&t, &p, 16 * 7) == CK_ENOSPACE);
    CK_CHECK(kv_pool_used(&p) == 8);
    kv_seq_truncate(&s, &p, 10); /* frees block 1 */
    CK_CHECK(s.n_tokens == 10 && s.n_blocks == 1 && s.n_hot == 1 && kv_pool_used(&p) == 7);
    CK_CHECK(kv_seq_reserve(&t, &p, 16 * 7) == 0);
    kv_seq_reset(&s, &p);
    kv_seq_reset(&t, &p);
    CK_CHECK(kv_pool_used(&p) == 0 && s.n_hot == 0 && t.n_hot == 0);
    kv_seq_free(&s);
    kv_seq_free(&t);
    kv_pool_free(&p);
}

int main(void) {
    CK_RUN(test_pool);
    CK_RUN(test_seq_reserve_commit);
    return ck_test_summary();
}
