/* cold.h - the cold tier as the engine sees it: an asynchronous key/value
 * store (Redis in the service, cold_mem.c in memory for tests and the CLI).
 *
 * Contract, for every implementation:
 *  - put/get/del only queue the request and return at once: 0 when accepted,
 *    a negative CK_E* when refused (then the callback never fires).
 *  - Callbacks fire only inside cold_poll(), on the thread that calls it
 *    (the engine thread), exactly once per accepted request.
 *  - get's callback: status 0 with the value (borrowed for the duration of
 *    the callback), CK_ENOTFOUND on a miss, CK_EIO when the store failed.
 *  - put's callback: status 0 when stored, CK_EIO otherwise.
 *  - put's flags: COLD_PUT_PERSIST asks that the value never expire (cache
 *    template records); without it a store may expire the value after its
 *    configured TTL (svc_redis.h). Stores without expiry ignore the flag.
 *  - Keys are built by coldkey.h, never spelled by hand.
 *  - A store may be down: requests then fail fast through their callbacks,
 *    and the engine carries on without the cold tier. */
#ifndef CK_COLD_H
#define CK_COLD_H
#include <stddef.h>

/* put flags */
#define COLD_PUT_PERSIST 1u /* never expires */

typedef void (*cold_cb)(void *ud, int status, const void *data, size_t len);

typedef struct cold_store cold_store;
typedef struct cold_ops {
    int (*put)(cold_store *s, const char *key, const void *data, size_t len, unsigned flags, cold_cb cb,
               void *ud);
    int (*get)(cold_store *s, const char *key, cold_cb cb, void *ud);
    int (*del)(cold_store *s, const char *key);
    void (*poll)(cold_store *s);
    void (*destroy)(cold_store *s);
} cold_ops;

struct cold_store {
    const cold_ops *ops;
};

static inline void cold_poll(cold_store *s) {
    if (s) s->ops->poll(s);
}
static inline void cold_free(cold_store *s) {
    if (s) s->ops->destroy(s);
}

/* In-memory store (cold_mem.c). Values are copied. */
int cold_mem_new(cold_store **out);
/* The flags of the last put under key (tests: was a template record written
 * to persist?); CK_ENOTFOUND when the store holds no such key. */
int cold_mem_put_flags(const cold_store *s, const char *key);
/* Make the next puts/gets fail (tests): each flag is "fail from now on". */
void cold_mem_set_failing(cold_store *s, int fail_put, int fail_get);
/* Entries and bytes held. */
size_t cold_mem_count(const cold_store *s);
size_t cold_mem_bytes(const cold_store *s);

#endif
