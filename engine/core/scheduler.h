/* scheduler.h - the scheduler's queues: requests ordered by priority, aging and
 * arrival.
 *
 * A sched_queue is a sorted array of pointers to sched_entry, which the
 * caller embeds in its own request struct (the queue never owns or moves
 * them). The engine keeps two: the waiting queue, ordered by effective
 * priority, and the running set, ordered by plain priority so that its worst
 * entry is the preemption victim (lowest priority, latest arrival).
 *
 * Order. With aging (aging_ms > 0) an entry's effective priority is
 *     priority + (now - arrival_ms) / aging_ms
 * i.e. one level for every aging_ms waited, accrued continuously. Because
 * `now` is common to all entries, comparing effective priorities is the same
 * as comparing the fixed key  priority * aging_ms - arrival_ms : the order
 * never changes while entries wait, so a sorted array (or a heap) stays
 * valid, and a request of priority p that arrived at t ranks with one of
 * priority p + 1 arriving at t + aging_ms. Without aging the order is
 * priority, then arrival. Ties go to the earlier submission (`order`).
 *
 * Costs: insert and remove are O(n) (binary search, then a memmove of
 * pointers and an index update); best, worst and rank lookups are O(1). For
 * the few thousand entries a queue holds this is microseconds.
 *
 * Not thread-safe: the engine thread owns the queues. */
#ifndef CK_SCHEDULER_H
#define CK_SCHEDULER_H
#include <stdint.h>

typedef struct sched_entry {
    int priority;      /* higher runs first */
    double arrival_ms; /* on the caller's clock (aging) */
    uint64_t order;    /* submission order, unique: breaks ties */
    int index;         /* position in its queue (rank from the worst), -1 when in none */
} sched_entry;

typedef struct sched_queue {
    sched_entry **v; /* (cap) sorted worst first: v[0] worst, v[n - 1] best */
    int n, cap;
    double aging_ms; /* 0 = no aging */
} sched_queue;

/* Allocate room for cap entries. Returns 0, CK_EINVAL (cap < 1, aging < 0)
 * or CK_ENOMEM. */
int sched_queue_init(sched_queue *q, int cap, double aging_ms);
void sched_queue_free(sched_queue *q);
/* 1 when a ranks strictly before b (would be picked first) in q's order. */
int sched_before(const sched_queue *q, const sched_entry *a, const sched_entry *b);
/* Insert e (not in any queue: index == -1). Returns 0 or CK_EBUSY when full. */
int sched_push(sched_queue *q, sched_entry *e);
/* Take e out of q (it must be in q); e->index becomes -1. */
void sched_remove(sched_queue *q, sched_entry *e);
/* The rank-th best entry (0 = best), NULL past the end. */
static inline sched_entry *sched_rank(const sched_queue *q, int rank) {
    return rank >= 0 && rank < q->n ? q->v[q->n - 1 - rank] : (sched_entry *)0;
}
static inline sched_entry *sched_best(const sched_queue *q) { return sched_rank(q, 0); }
static inline sched_entry *sched_worst(const sched_queue *q) { return q->n ? q->v[0] : (sched_entry *)0; }

#endif
