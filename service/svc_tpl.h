/* svc_tpl.h - confkvd's side of cache templates: usage counts in
 * Redis and prewarming (engine/kv/tpl.h has the records, the engine resolves
 * and caches them).
 *
 * Usage: every job that names a template adds one to its score in the
 * sorted set "<prefix>tpl-uses" (ZINCRBY), so any instance, and `confkv
 * templates list`, sees which are used most.
 *
 * Prewarm: for each template, one engine request with the template as its
 * prompt and prefill_only set: the engine fetches the template's KV blocks
 * from Redis (or computes those missing), pins them in the prefix cache and
 * persists them, so the next job using it computes only its own tokens.
 * At start-up (svc_tpl_tick, once the model is loaded and Redis is up) the
 * `top` most used are prewarmed; `POST /templates/prewarm` starts another
 * round (named templates, or the most used). One round runs at a time.
 *
 * Ownership: svc_tpl owns its works until the engine thread hands them back
 * (svc_work.own_done); svc_tpl_close before the engine thread stops leaves
 * works in flight to be freed by svc_tpl_free after it stopped. Loop thread
 * only. */
#ifndef CK_SVC_TEMPLATES_H
#define CK_SVC_TEMPLATES_H
#include <stdint.h>

#include "svc_et.h"
#include "svc_redis.h"

enum { SVC_TPL_IDLE = 0, SVC_TPL_LISTING = 1, SVC_TPL_RUNNING = 2, SVC_TPL_DONE = 3 };

typedef struct svc_tpl_stats {
    int state;                                 /* SVC_TPL_* of the latest round */
    int round_total, round_done, round_failed; /* the latest round */
    uint64_t prewarmed, failed;                /* templates, all rounds */
    uint64_t uses_counted;                     /* ZINCRBY sent */
    int startup_done;                          /* the start-up round ended (or there is none) */
} svc_tpl_stats;

typedef struct svc_tpl svc_tpl;

/* redis may be NULL (then nothing is counted or listed; named prewarms
 * still run: the engine may know the template from a `save` job). */
int svc_tpl_new(svc_redis *redis, svc_et *et, int top, svc_tpl **out);
void svc_tpl_free(svc_tpl *t);
/* A job used template `name`. */
void svc_tpl_used(svc_tpl *t, const char *name);
/* Start a round: the given names, or (n == 0) the `top` most used. Returns
 * 0; CK_EBUSY while a round runs; CK_ESTATE when n == 0 and Redis is down;
 * CK_EINVAL for a bad name. */
int svc_tpl_prewarm(svc_tpl *t, const char *const *names, int n);
/* Call periodically: starts the start-up round when it can. */
void svc_tpl_tick(svc_tpl *t, int model_loaded);
void svc_tpl_get_stats(const svc_tpl *t, svc_tpl_stats *s);
/* The engine thread is about to stop: forget the engine (works in flight
 * are freed by svc_tpl_free). */
void svc_tpl_close(svc_tpl *t);

#endif
