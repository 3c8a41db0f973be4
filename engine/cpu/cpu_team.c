/* cpu_team.c - the CPU backend's threads for its short parallel sections
 * (cpu_team.h). */
#include "cpu_team.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "ck_err.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define team_pause() _mm_pause()
#else
#define team_pause() __asm__ __volatile__("" ::: "memory")
#endif

/* A word threads wait on for a change, and how many sleep on it (so that a
 * change wakes nobody with a syscall unless someone sleeps). */
typedef struct team_word {
    _Atomic uint32_t v;
    _Atomic uint32_t sleepers;
    char pad[64 - 2 * sizeof(uint32_t)];
} team_word;

typedef struct team_worker {
    cpu_team *t;
    int tid;
} team_worker;

struct cpu_team {
    int size;
    pthread_t *threads;   /* (size - 1) */
    team_worker *workers; /* (size - 1) */
    /* the job, written by the caller before it bumps `go` */
    cpu_team_fn fn;
    void *arg;
    int n;
    int stop;
    team_word go;          /* the job's number: bumped for each job and for the stop */
    team_word fin;         /* the number of the last job every worker has finished */
    _Atomic uint32_t done; /* workers finished with the current job */
    _Atomic int spin;      /* how long a wait spins before it sleeps (cpu_team.h) */
    char pad[64 - sizeof(int)];
};

static void futex_wait(_Atomic uint32_t *w, uint32_t val) {
#if defined(__linux__)
    (void)syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)w, (void)val;
    sched_yield();
#endif
}

static void futex_wake(_Atomic uint32_t *w) {
#if defined(__linux__)
    (void)syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)w;
#endif
}

/* Returns once w->v != val. Spins first, as long as the team's spin says;
 * a change seen while spinning doubles that spin, a sleep halves it. The
 * sleeper count and the value are sequentially consistent on both sides
 * (here: count up, then read the value; team_set: write the value, then
 * read the count), so a waker either sees the sleeper or the sleeper sees
 * the new value before it sleeps. */
static void team_wait(cpu_team *t, team_word *w, uint32_t val) {
    const int lim = atomic_load_explicit(&t->spin, memory_order_relaxed);
    for (int i = 0; i < lim; i++) {
        if (atomic_load_explicit(&w->v, memory_order_acquire) != val) {
            if (lim < CPU_TEAM_SPIN_MAX)
                atomic_store_explicit(&t->spin, lim * 2 < CPU_TEAM_SPIN_MAX ? lim * 2 : CPU_TEAM_SPIN_MAX,
                                      memory_order_relaxed);
            return;
        }
        team_pause();
    }
    if (lim > CPU_TEAM_SPIN_MIN)
        atomic_store_explicit(&t->spin, lim / 2 > CPU_TEAM_SPIN_MIN ? lim / 2 : CPU_TEAM_SPIN_MIN,
                              memory_order_relaxed);
    atomic_fetch_add(&w->sleepers, 1);
    while (atomic_load(&w->v) == val) futex_wait(&w->v, val);
    atomic_fetch_sub(&w->sleepers, 1);
}

static void team_set(team_word *w, uint32_t val) {
    atomic_store(&w->v, val);
    if (atomic_load(&w->sleepers)) futex_wake(&w->v);
}

static void *worker_main(void *p) {
    const team_worker *me = p;
    cpu_team *t = me->t;
    uint32_t seen = 0;
    for (;;) {
        team_wait(t, &t->go, seen);
        seen = atomic_load_explicit(&t->go.v, memory_order_acquire);
        if (t->stop) break;
        if (me->tid < t->n) t->fn(t->arg, me->tid, t->n);
        /* the last worker to finish says so, with the job's number */
        if (atomic_fetch_add_explicit(&t->done, 1, memory_order_acq_rel) + 1 == (uint32_t)t->size - 1)
            team_set(&t->fin, seen);
    }
    return NULL;
}

static void team_stop(cpu_team *t, int started) {
    t->stop = 1;
    team_set(&t->go, atomic_load_explicit(&t->go.v, memory_order_relaxed) + 1);
    for (int i = 0; i < started; i++) pthread_join(t->threads[i], NULL);
}

int cpu_team_new(int n_threads, cpu_team **out) {
    *out = NULL;
    if (n_threads < 1) return CK_EINVAL;
    cpu_team *t = calloc(1, sizeof *t);
    if (!t) return CK_ENOMEM;
    t->size = n_threads;
    atomic_init(&t->spin, CPU_TEAM_SPIN_MIN);
    if (n_threads > 1) {
        t->threads = calloc((size_t)n_threads - 1, sizeof *t->threads);
        t->workers = calloc((size_t)n_threads - 1, sizeof *t->workers);
        if (!t->threads || !t->workers) {
            t->size = 1; /* no worker started */
            cpu_team_free(t);
            return CK_ENOMEM;
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        t->workers[i] = (team_worker){t, i + 1};
        if (pthread_create(&t->threads[i], NULL, worker_main, &t->workers[i])) {
            team_stop(t, i);
            t->size = 1; /* nothing left to stop in cpu_team_free */
            cpu_team_free(t);
            return CK_ENOMEM;
        }
    }
    *out = t;
    return CK_OK;
}

int cpu_team_size(const cpu_team *t) { return t->size; }

void cpu_team_run(cpu_team *t, int n, cpu_team_fn fn, void *arg) {
    if (n > t->size) n = t->size;
    if (n <= 1 || t->size == 1) {
        fn(arg, 0, 1);
        return;
    }
    const uint32_t job = atomic_load_explicit(&t->go.v, memory_order_relaxed) + 1;
    t->fn = fn, t->arg = arg, t->n = n;
    atomic_store_explicit(&t->done, 0, memory_order_relaxed);
    team_set(&t->go, job); /* publishes the job and the reset above */
    fn(arg, 0, n);
    team_wait(t, &t->fin, job - 1);
    /* every worker's writes are visible: fin was set after the last one's
     * acq_rel add, and read here with acquire */
}

void cpu_team_free(cpu_team *t) {
    if (!t) return;
    if (t->size > 1 && t->threads) team_stop(t, t->size - 1);
    free(t->threads);
    free(t->workers);
    free(t);
}
