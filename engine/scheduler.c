/* scheduler.c - sorted queues of requests (scheduler.h). */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

int sched_queue_init(sched_queue *q, int cap, double aging_ms) {
    memset(q, 0, sizeof *q);
    if (cap < 1 || !(aging_ms >= 0)) return CK_EINVAL;
    q->v = malloc((size_t)cap * sizeof *q->v);
    if (!q->v) return CK_ENOMEM;
    q->cap = cap;
    q->aging_ms = aging_ms;
    return CK_OK;
}

void sched_queue_free(sched_queue *q) {
    free(q->v);
    memset(q, 0, sizeof *q);
}

int sched_before(const sched_queue *q, const sched_entry *a, const sched_entry *b) {
    if (q->aging_ms > 0) {
        double ka = a->priority * q->aging_ms - a->arrival_ms;
        double kb = b->priority * q->aging_ms - b->arrival_ms;
        if (ka != kb) return ka > kb;
    } else if (a->priority != b->priority) {
        return a->priority > b->priority;
    }
    return a->order < b->order;
}

int sched_push(sched_queue *q, sched_entry *e) {
    if (q->n == q->cap) return CK_EBUSY;
    /* First position whose entry ranks before e: e goes just below it. */
    int lo = 0, hi = q->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (sched_before(q, q->v[mid], e)) hi = mid;
        else lo = mid + 1;
    }
    memmove(q->v + lo + 1, q->v + lo, (size_t)(q->n - lo) * sizeof *q->v);
    q->v[lo] = e;
    q->n++;
    for (int i = lo; i < q->n; i++) q->v[i]->index = i;
    return CK_OK;
}

void sched_remove(sched_queue *q, sched_entry *e) {
    int i = e->index;
    if (i < 0 || i >= q->n || q->v[i] != e) return;
    memmove(q->v + i, q->v + i + 1, (size_t)(q->n - i - 1) * sizeof *q->v);
    q->n--;
    for (int k = i; k < q->n; k++) q->v[k]->index = k;
    e->index = -1;
}
