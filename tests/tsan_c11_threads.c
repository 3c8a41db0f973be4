/* C11 threads on top of pthreads, linked only into the ThreadSanitizer build
 * (CONFKV_SANITIZE=thread) of the programs that load librdkafka.
 *
 * Why: librdkafka (Debian's build) uses C11 threads (thrd_create, mtx_lock,
 * cnd_wait, call_once). glibc >= 2.34 implements them by calling its own
 * pthread functions internally, not through the PLT, so GCC 12's TSan runtime
 * never sees them: a thread made by thrd_create has no TSan state and the
 * first malloc in it crashes ("SEGV on unknown address 0x...c38" in
 * SizeClassAllocator64LocalCache::Allocate, thread rdk:mock), and the mutexes
 * and condition variables that order librdkafka's threads with ours would be
 * invisible (false races on buffers handed over). Defined here, in the
 * executable, these definitions take precedence over glibc's for every
 * library (the executable comes first in the lookup scope), and each one calls
 * the public pthread function, which TSan intercepts. Nothing is suppressed:
 * librdkafka's own code is not instrumented either way, ours is.
 *
 * The layouts match glibc's: mtx_t and cnd_t are unions over the pthread
 * objects' storage, once_flag wraps a pthread_once_t, thrd_t is pthread_t.
 * The return codes follow C11 (thrd_success, thrd_busy, thrd_timedout, ...).
 * Not built outside the TSan build. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

_Static_assert(sizeof(mtx_t) >= sizeof(pthread_mutex_t), "mtx_t holds a pthread mutex");
_Static_assert(sizeof(cnd_t) >= sizeof(pthread_cond_t), "cnd_t holds a pthread cond");
_Static_assert(sizeof(once_flag) == sizeof(pthread_once_t), "once_flag is a pthread_once_t");
_Static_assert(sizeof(thrd_t) == sizeof(pthread_t), "thrd_t is a pthread_t");

static int c11_code(int rc) {
    switch (rc) {
    case 0: return thrd_success;
    case EBUSY: return thrd_busy;
    case ETIMEDOUT: return thrd_timedout;
    case ENOMEM: return thrd_nomem;
    default: return thrd_error;
    }
}

/* The start routine and its argument, freed by the new thread. */
typedef struct {
    thrd_start_t fn;
    void *arg;
} c11_start;

static void *c11_trampoline(void *p) {
    c11_start s = *(c11_start *)p;
    free(p);
    /* As glibc does: the int result travels as a pointer to thrd_join. */
    return (void *)(intptr_t)s.fn(s.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg) {
    c11_start *s = malloc(sizeof *s);
    if (!s) return thrd_nomem;
    s->fn = fn;
    s->arg = arg;
    int rc = pthread_create((pthread_t *)thr, NULL, c11_trampoline, s);
    if (rc) free(s);
    return c11_code(rc);
}

int thrd_join(thrd_t thr, int *res) {
    void *r = NULL;
    int rc = pthread_join((pthread_t)thr, &r);
    if (!rc && res) *res = (int)(intptr_t)r;
    return c11_code(rc);
}

int thrd_detach(thrd_t thr) { return c11_code(pthread_detach((pthread_t)thr)); }

void call_once(once_flag *flag, void (*fn)(void)) { pthread_once((pthread_once_t *)flag, fn); }

int mtx_init(mtx_t *m, int type) {
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a)) return thrd_error;
    pthread_mutexattr_settype(&a, (type & mtx_recursive) ? PTHREAD_MUTEX_RECURSIVE : PTHREAD_MUTEX_NORMAL);
    int rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return c11_code(rc);
}

int mtx_lock(mtx_t *m) { return c11_code(pthread_mutex_lock((pthread_mutex_t *)m)); }
int mtx_trylock(mtx_t *m) { return c11_code(pthread_mutex_trylock((pthread_mutex_t *)m)); }
int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts) {
    return c11_code(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}
int mtx_unlock(mtx_t *m) { return c11_code(pthread_mutex_unlock((pthread_mutex_t *)m)); }
void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }

int cnd_init(cnd_t *c) { return c11_code(pthread_cond_init((pthread_cond_t *)c, NULL)); }
int cnd_signal(cnd_t *c) { return c11_code(pthread_cond_signal((pthread_cond_t *)c)); }
int cnd_broadcast(cnd_t *c) { return c11_code(pthread_cond_broadcast((pthread_cond_t *)c)); }
int cnd_wait(cnd_t *c, mtx_t *m) {
    return c11_code(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts) {
    return c11_code(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}
void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }
