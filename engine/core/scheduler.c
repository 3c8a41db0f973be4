/* scheduler.c - the scheduler: sorted queues of requests (scheduler.h), and
 * the step's admission, ordering and preemption choices (eng_int.h). */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "eng_int.h"

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
        if (sched_before(q, q->v[mid], e))
            hi = mid;
        else
            lo = mid + 1;
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

/* ============================================================ the step's
 * scheduling (eng_int.h): who runs in this step, and who is preempted. The
 * scheduler decides; the KV manager (kvm.h) answers whether blocks can
 * be placed, and moves them. */

/* Running -> waiting: blocks to the warm tier, or reset for recomputation.
 * A hybrid model's sequence is always recomputed: its recurrent state does
 * not move with parked blocks, and its slot goes back, so it starts over
 * from position 0, where the backend starts the state from zero. */
static void preempt(eng *e, req *v) {
    sched_remove(&e->runq, &v->se);
    e->committed -= v->commit;
    e->left += v->step_n;
    v->step_n = 0;
    eng__slot_give(e, v);
    int rc = e->hybrid ? CK_EUNSUPPORTED : kvm_park(&e->kv, &v->seq, v->moved);
    v->swapped = rc == CK_OK;
    if (rc) { /* the tier is full (or a block could not be read): start over later */
        eng__recompute_reset(e, v);
        e->st.recomputes++;
    }
    v->state = REQ_WAITING;
    sched_push(&e->waitq, &v->se); /* room: the queue holds max_queue + max_running */
    v->preemptions++;
    e->st.preemptions++;
}

/* Make `need` pool blocks free: ask the policies that may shrink (worst
 * first, each once a step, never one still in its prefill), then, when
 * may_preempt, preempt the worst running sequences, which may be r itself.
 * Returns 1 when the blocks are free. */
static int room(eng *e, req *r, int need, int may_preempt) {
    for (int k = 0; k < e->runq.n && kvm_free_blocks(&e->kv) < need; k++) {
        req *s = (req *)e->runq.v[k];
        if (!kvpol_can_shrink(&s->pc) || !s->prefill_done || s->shrink_stamp == e->stamp) continue;
        s->shrink_stamp = e->stamp;
        kvm_shrink(&e->kv, s->pol, &s->seq, need - kvm_free_blocks(&e->kv));
    }
    while (may_preempt && kvm_free_blocks(&e->kv) < need && e->runq.n > 0) {
        req *v = (req *)sched_worst(&e->runq);
        preempt(e, v);
        if (v == r) return 0;
    }
    return kvm_free_blocks(&e->kv) >= need;
}

/* Place *n tokens of r (a running chunk may shrink to what fits). Returns
 * 1 when r has *n tokens in the step. */
static int place(eng *e, req *r, int *n, int may_preempt) {
    int need = kvm_need(&e->kv, &r->seq, *n);
    if (need > kvm_free_blocks(&e->kv) && !room(e, r, need, may_preempt)) {
        if (r->state != REQ_RUNNING || *n == 1) return 0;
        int fit = kvm_fit_tokens(&e->kv, &r->seq);
        if (fit <= 0) return 0;
        if (fit < *n) *n = fit;
    }
    int rc = kvm_place(&e->kv, &r->seq, *n);
    if (rc == KVM_NO_ROOM) return 0;
    if (rc < 0) {
        fail_req(e, r, rc);
        return 0;
    }
    r->step_n = *n;
    e->left -= *n;
    return 1;
}

/* Pool blocks a waiting request needs to run its next chunk of n tokens. */
static int need_now(const eng *e, const req *w, int n) {
    if (!w->started) return w->pfx_blocks + ceil_div(n, e->bs); /* cached blocks, then the chunk */
    if (!w->swapped) return kvm_need(&e->kv, &w->seq, n);
    return kvm_resume_need(&e->kv, &w->seq, w->moved, n);
}

/* May w preempt v? Only a request of higher priority that also ranks before
 * it (aging: a running request cannot be displaced by one that arrived more
 * than aging_ms per priority level after it, so nothing starves). */
static int outranks(const eng *e, const req *w, const req *v) {
    return w->se.priority > v->se.priority && sched_before(&e->waitq, &w->se, &v->se);
}

/* Would preempting every running request w outranks let it in? */
static int preempting_helps(const eng *e, const req *w) {
    int freed = 0, count = 0;
    for (int k = 0; k < e->runq.n; k++) {
        const req *v = (const req *)e->runq.v[k];
        if (!outranks(e, w, v)) break; /* worst first: the rest rank higher */
        freed += v->commit;
        count++;
    }
    return count && e->committed - freed + w->commit <= e->kv.pool.n_blocks &&
           e->runq.n - count < e->c.max_running;
}

void sched_admit(eng *e) {
    while (e->left > 0 && e->waitq.n > 0) {
        req *w = (req *)sched_best(&e->waitq);
        w->commit = commit_blocks(e, w);
        /* A slot and a commitment that fits. */
        while (e->runq.n >= e->c.max_running || e->committed + w->commit > e->kv.pool.n_blocks) {
            req *v = (req *)sched_worst(&e->runq);
            if (!v || !outranks(e, w, v) || !preempting_helps(e, w)) return;
            preempt(e, v);
        }
        int pending = w->n_hist - (w->started ? w->seq.n_tokens : w->pfx_blocks * e->bs);
        int n = pending < e->left ? pending : e->left;
        int need = need_now(e, w, n);
        if (need > kvm_free_blocks(&e->kv)) room(e, NULL, need, 0);
        while (need > kvm_free_blocks(&e->kv)) {
            req *v = (req *)sched_worst(&e->runq);
            if (!v || !outranks(e, w, v)) return;
            preempt(e, v);
        }
        if (eng__slot_take(e, w)) return; /* no state slot free: it waits */
        sched_remove(&e->waitq, &w->se);
        int rc = CK_OK;
        if (!w->started) rc = eng__start_run(e, w);
        if (!rc && w->swapped) {
            rc = kvm_resume(&e->kv, &w->seq, w->moved);
            if (rc == CK_EBUSY || rc == CK_ENOSPACE) { /* cold fetch in flight; try later */
                eng__slot_give(e, w);
                sched_push(&e->waitq, &w->se);
                return;
            }
            if (rc == CK_ESTATE) { /* a block was lost: recompute */
                eng__recompute_reset(e, w);
                e->st.recomputes++;
                rc = CK_OK;
            }
            w->swapped = 0;
        }
        if (rc) {
            eng__slot_give(e, w);
            eng__fail_unqueued(e, w, rc);
            continue;
        }
        w->state = REQ_RUNNING;
        w->commit = commit_blocks(e, w);
        sched_push(&e->runq, &w->se);
        e->committed += w->commit;
        if (w->t_admit <= 0) w->t_admit = now_ms();
        pending = w->n_hist - w->seq.n_tokens;
        n = pending < e->left ? pending : e->left;
        place(e, w, &n, 0);
    }
}

void sched_place_running(eng *e) {
    e->left = e->c.max_batch_tokens;
    int nc = 0;
    for (int k = 0; k < e->runq.n; k++) {
        e->cand[nc] = (req *)sched_rank(&e->runq, k);
        e->cand[nc++]->step_n = 0;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < nc && e->left > 0; k++) {
            req *r = e->cand[k];
            if (r->state != REQ_RUNNING || r->step_n) continue;
            int pending = r->n_hist - r->seq.n_tokens;
            if ((pending == 1) != (pass == 0)) continue;
            int n = pending < e->left ? pending : e->left;
            place(e, r, &n, pass == 0);
        }
    }
}

void sched_expire(eng *e) {
    if (!e->n_deadlines) return;
    int64_t now = eng_now_ms();
    for (req *r = e->resolving, *nx; r; r = nx) {
        nx = r->res_next;
        if (r->deadline_ms && now >= r->deadline_ms) finish_req(e, r, ENG_FINISH_EXPIRED);
    }
    sched_queue *qs[2] = {&e->runq, &e->waitq};
    for (int k = 0; k < 2; k++) {
        for (int i = qs[k]->n - 1; i >= 0; i--) {
            req *r = (req *)qs[k]->v[i];
            if (i < qs[k]->n && r->deadline_ms && now >= r->deadline_ms) finish_req(e, r, ENG_FINISH_EXPIRED);
        }
    }
}
