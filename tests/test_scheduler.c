/* test_scheduler.c - the scheduler's queues (scheduler.h): priority order,
 * ties by submission, aging as a fixed key, capacity, removal, and the
 * invariants (sorted, indexes right) under random pushes and removals. */
#include <stdint.h>

#include "ck_err.h"
#include "ck_test.h"
#include "scheduler.h"

static sched_entry entry(int prio, double arrival, uint64_t order) {
    sched_entry e = {prio, arrival, order, -1};
    return e;
}

static void test_priority_then_order(void) {
    sched_queue q;
    CK_CHECK(sched_queue_init(&q, 8, 0) == 0);
    sched_entry e[5] = {entry(0, 0, 0), entry(2, 1, 1), entry(1, 2, 2), entry(2, 3, 3), entry(-1, 4, 4)};
    for (int i = 0; i < 5; i++) CK_CHECK(sched_push(&q, &e[i]) == 0);
    int want[5] = {1, 3, 2, 0, 4}; /* best first */
    for (int r = 0; r < 5; r++) CK_CHECK(sched_rank(&q, r) == &e[want[r]]);
    CK_CHECK(sched_rank(&q, 5) == NULL && sched_rank(&q, -1) == NULL);
    CK_CHECK(sched_best(&q) == &e[1] && sched_worst(&q) == &e[4]);
    sched_remove(&q, &e[1]);
    CK_CHECK(e[1].index == -1 && sched_best(&q) == &e[3] && q.n == 4);
    sched_remove(&q, &e[1]); /* not in the queue: no-op */
    CK_CHECK(q.n == 4);
    sched_queue_free(&q);
}

/* Effective priority = priority + waited / aging_ms: a request that waited
 * one aging period longer ranks with one a level higher. */
static void test_aging_key(void) {
    sched_queue q;
    CK_CHECK(sched_queue_init(&q, 4, 1000) == 0);
    sched_entry old_low = entry(0, 0, 0), young_high = entry(1, 1500, 1), recent_high = entry(1, 500, 2);
    CK_CHECK(sched_before(&q, &old_low, &young_high));  /* waited 1.5 levels longer */
    CK_CHECK(sched_before(&q, &recent_high, &old_low)); /* only 0.5 levels */
    sched_entry tie = entry(1, 1000, 3);                /* exactly one level: arrival order */
    CK_CHECK(sched_before(&q, &old_low, &tie) && !sched_before(&q, &tie, &old_low));
    CK_CHECK(sched_push(&q, &young_high) == 0 && sched_push(&q, &old_low) == 0 &&
             sched_push(&q, &recent_high) == 0);
    CK_CHECK(sched_rank(&q, 0) == &recent_high && sched_rank(&q, 1) == &old_low &&
             sched_rank(&q, 2) == &young_high);
    /* Without aging, priority alone. */
    sched_queue p;
    CK_CHECK(sched_queue_init(&p, 4, 0) == 0);
    CK_CHECK(sched_before(&p, &young_high, &old_low));
    sched_queue_free(&p);
    sched_queue_free(&q);
}

static void test_capacity(void) {
    sched_queue q;
    CK_CHECK(sched_queue_init(&q, 0, 0) == CK_EINVAL);
    CK_CHECK(sched_queue_init(&q, 1, -1) == CK_EINVAL);
    CK_CHECK(sched_queue_init(&q, 2, 0) == 0);
    sched_entry e[3] = {entry(0, 0, 0), entry(0, 0, 1), entry(5, 0, 2)};
    CK_CHECK(sched_push(&q, &e[0]) == 0 && sched_push(&q, &e[1]) == 0);
    CK_CHECK(sched_push(&q, &e[2]) == CK_EBUSY && e[2].index == -1);
    sched_remove(&q, &e[0]);
    CK_CHECK(sched_push(&q, &e[2]) == 0 && sched_best(&q) == &e[2]);
    sched_queue_free(&q);
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int invariants(const sched_queue *q) {
    for (int i = 0; i < q->n; i++) {
        if (q->v[i]->index != i) return 0;
        if (i > 0 && sched_before(q, q->v[i - 1], q->v[i])) return 0; /* worst first */
    }
    return 1;
}

static void test_random(void) {
    enum { N = 300 };
    static sched_entry e[N];
    sched_queue q;
    CK_CHECK(sched_queue_init(&q, N, 250) == 0);
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < N; i++) e[i] = entry((int)(rng(&s) % 5) - 2, (double)(rng(&s) % 5000), (uint64_t)i);
    for (int it = 0; it < 5000; it++) {
        sched_entry *x = &e[rng(&s) % N];
        if (x->index < 0)
            CK_CHECK(sched_push(&q, x) == 0);
        else
            sched_remove(&q, x);
        CK_CHECK(invariants(&q));
    }
    /* Popping best first gives a non-increasing sequence. */
    sched_entry *prev = NULL;
    while (q.n) {
        sched_entry *b = sched_best(&q);
        CK_CHECK(!prev || !sched_before(&q, b, prev));
        sched_remove(&q, b);
        prev = b;
    }
    sched_queue_free(&q);
}

int main(void) {
    CK_RUN(test_priority_then_order);
    CK_RUN(test_aging_key);
    CK_RUN(test_capacity);
    CK_RUN(test_random);
    return ck_test_summary();
}
