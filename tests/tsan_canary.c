/* The TSan build's canary (ctest tsan_canary, CONFKV_SANITIZE=thread only):
 * proves the pass can fail. Two C11 threads, made by thrd_create as
 * librdkafka makes its own (so through tests/tsan_c11_threads.c), first bump
 * a counter under a mtx_t, which TSan must see as ordered, then write a plain
 * int with no lock at all, which TSan must report. ctest passes it when the
 * output names canary_racy and does not name canary_locked. */
#include <stdio.h>
#include <threads.h>

typedef struct {
    mtx_t mu;
    int locked; /* guarded by mu */
    int racy;   /* guarded by nothing: the race */
    int phase;  /* guarded by mu: 2 once both threads did their locked part */
    cnd_t cv;
} canary;

static void __attribute__((noinline)) canary_locked(canary *c) {
    mtx_lock(&c->mu);
    c->locked++;
    c->phase++;
    cnd_broadcast(&c->cv);
    while (c->phase < 2) cnd_wait(&c->cv, &c->mu);
    mtx_unlock(&c->mu);
}

static void __attribute__((noinline)) canary_racy(canary *c) { c->racy++; }

static int worker(void *p) {
    canary *c = p;
    canary_locked(c);
    canary_racy(c);
    return 7;
}

int main(void) {
    canary c = {.locked = 0};
    if (mtx_init(&c.mu, mtx_plain) != thrd_success || cnd_init(&c.cv) != thrd_success) return 2;
    thrd_t a, b;
    if (thrd_create(&a, worker, &c) != thrd_success || thrd_create(&b, worker, &c) != thrd_success) return 2;
    int ra = 0, rb = 0;
    thrd_join(a, &ra);
    thrd_join(b, &rb);
    /* the joins order these reads after both threads: no report here */
    printf("locked=%d racy=%d results=%d,%d\n", c.locked, c.racy, ra, rb);
    if (c.locked != 2 || ra != 7 || rb != 7) printf("canary: BAD (thread results lost)\n");
    mtx_destroy(&c.mu);
    cnd_destroy(&c.cv);
    return 0;
}
