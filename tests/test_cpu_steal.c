/* test_cpu_steal.c - work stealing over a product's units
 * (engine/cpu/cpu_steal.h): every unit is taken exactly once, whatever the
 * number of units, threads and alignment, when all the threads take at
 * once (pthreads here, so ThreadSanitizer sees the stealing's atomics in
 * ops/scripts/test.sh) and when fewer threads run than the ranges were cut
 * for; every chunk starts on a multiple of align; a thread's own chunks
 * come in order from its range's front and shrink as it empties. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ck_test.h"
#include "cpu_steal.h"

#define MAX_PAR 8
#define MAX_UNITS 40000

typedef struct run {
    cpu_steal r[MAX_PAR];
    int nu, par, chunk, align;
    _Atomic int taken[MAX_UNITS];
    _Atomic int bad_align;
} run;

typedef struct arg {
    run *run;
    int me;
} arg;

static void *taker(void *p) {
    const arg *a = p;
    run *r = a->run;
    int u0, u1;
    while (cpu_steal_take(r->r, a->me, r->par, r->chunk, r->align, &u0, &u1)) {
        if (u0 % r->align || u1 <= u0) atomic_fetch_add(&r->bad_align, 1);
        for (int u = u0; u < u1; u++) atomic_fetch_add(&r->taken[u], 1);
    }
    return NULL;
}

/* nu units cut for par threads, `threads` of which take (the others' ranges
 * then go by stealing). */
static void check(int nu, int par, int align, int threads) {
    run *r = calloc(1, sizeof *r);
    CK_CHECK(r != NULL);
    if (!r) return;
    r->nu = nu, r->par = par, r->align = align;
    r->chunk = cpu_steal_init(r->r, nu, par, align);
    CK_CHECK_MSG(r->chunk >= align && r->chunk % align == 0, "chunk %d, align %d", r->chunk, align);
    pthread_t th[MAX_PAR];
    arg args[MAX_PAR];
    for (int t = 0; t < threads; t++) {
        args[t] = (arg){r, t};
        CK_CHECK(pthread_create(&th[t], NULL, taker, &args[t]) == 0);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    int missing = 0, twice = 0;
    for (int u = 0; u < nu; u++) {
        const int k = atomic_load(&r->taken[u]);
        missing += k == 0, twice += k > 1;
    }
    CK_CHECK_MSG(missing == 0 && twice == 0,
                 "%d units, %d ranges, align %d, %d threads: %d missing, %d twice", nu, par, align, threads,
                 missing, twice);
    CK_CHECK_MSG(atomic_load(&r->bad_align) == 0, "%d chunks empty or off align %d",
                 atomic_load(&r->bad_align), align);
    free(r);
}

static void test_every_unit_once(void) {
    static const int nus[] = {1, 7, 8, 9, 96, 100, 768, 2304, 4096, 32000, 39999};
    static const int aligns[] = {1, 8};
    for (size_t i = 0; i < sizeof nus / sizeof nus[0]; i++)
        for (size_t a = 0; a < 2; a++)
            for (int par = 1; par <= MAX_PAR; par *= 2)
                for (int threads = 1; threads <= par; threads++) check(nus[i], par, aligns[a], threads);
}

/* One thread alone: its own takes shrink (a third of what is left), and it
 * then empties the others' ranges. */
static void test_guided(void) {
    cpu_steal r[2];
    const int chunk = cpu_steal_init(r, 9600, 2, 8);
    CK_CHECK_MSG(chunk == 152, "chunk %d", chunk); /* a 32nd of 4800, rounded up to 8 */
    int u0, u1, prev = 1 << 30, n = 0, own = 0;
    while (cpu_steal_take(r, 0, 2, chunk, 8, &u0, &u1)) {
        if (u1 <= 4800) { /* its own range, in order from the front */
            CK_CHECK(u0 == own);
            CK_CHECK_MSG(u1 - u0 <= prev, "take %d: %d after %d", n, u1 - u0, prev);
            prev = u1 - u0;
            own = u1;
        }
        n++;
    }
    CK_CHECK(own == 4800);
    CK_CHECK_MSG(n < 60, "%d takes for 9600 units", n);
}

int main(void) {
    CK_RUN(test_every_unit_once);
    CK_RUN(test_guided);
    return ck_test_summary();
}
