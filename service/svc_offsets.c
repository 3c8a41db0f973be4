/* svc_offsets.c - offset ring, dispatch marks and hold (svc_offsets.h). */
#include "svc_offsets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "svc_offmd.h"

typedef struct held {
    void *msg;
    int64_t off;
} held;

/* One partition. Ring and hold are kept linear: live entries in
 * [head, head + n), compacted when the end of the array is reached. */
typedef struct part {
    uint32_t epoch; /* bumped when the ring is cleared: stale done calls are ignored */
    uint32_t agen;  /* bumped on every assign/revoke */
    int assigned;
    int revoking; /* revoked, its dispatched jobs finishing: nothing more is dispatched */
    int64_t *off;
    uint8_t *done;
    int head, n, cap;
    int running; /* entries of the ring not done (dispatched, not finished) */
    /* commit state, valid while assigned */
    int known;         /* the committed offset and the previous mark were read */
    int dirty;         /* next changed since it was last committed */
    int64_t next;      /* offset to commit: contiguous done prefix + 1 (-1: none yet) */
    int64_t prev_mark; /* earlier owners may have dispatched every offset below it (-1: no mark) */
    int64_t acked;     /* the broker holds a mark >= this: we dispatch only offsets below it */
    int64_t mark;      /* highest mark asked for (>= acked) */
    int64_t hi;        /* highest offset dispatched in this assignment (-1: none) */
    int64_t sent_mark; /* mark in the commit in flight */
    int64_t sent_next; /* offset in the commit in flight */
    int64_t
        committed; /* the group's offset as last known: read at assignment, then acknowledged (-1: none) */
    uint32_t sent_agen; /* agen when that commit was sent */
    /* The previous owners' finished set (svc_offmd.h), read with the
     * committed offset: bit i set when offset skip_base + i is finished.
     * Such a message is not dispatched (cbs.skip), only marked done; the
     * set goes on into our own commits until its offsets are consumed. */
    uint8_t *skip;
    int skip_bytes;
    int64_t skip_base;
    held *hold;
    int hhead, nhold, cap_hold, hold_paused;
} part;

struct svc_offsets {
    svc_offsets_config c;
    part *parts;
    int n;
    int n_assigned; /* partitions assigned (the auto dispatch-ahead bound) */
};

void svc_offsets_config_default(svc_offsets_config *c) {
    memset(c, 0, sizeof *c);
    /* The dispatch mark runs this many offsets ahead of the dispatched ones:
     * a larger value means fewer commit round trips that can hold dispatch,
     * a smaller one fewer jobs wrongly marked redelivered after a crash (at
     * most this many per partition). */
    c->mark_ahead = 64;
    c->hold_pause = 1024;
    c->max_partition = 1000000;
    c->max_ring = 1 << 22;
}

int svc_offsets_new(const svc_offsets_config *c, svc_offsets **out) {
    *out = NULL;
    if (c->mark_ahead < 2 || c->hold_pause < 1 || c->max_partition < 0 || c->max_ring < 1 ||
        c->dispatch_ahead < 0 || c->dispatch_slots < 0 || !c->cbs.dispatch || !c->cbs.drop || !c->cbs.commit)
        return CK_EINVAL;
    svc_offsets *o = calloc(1, sizeof *o);
    if (!o) return CK_ENOMEM;
    o->c = *c;
    *out = o;
    return CK_OK;
}

static void hold_clear(svc_offsets *o, part *t) {
    /* Take the entries off first: cbs.drop sees a consistent table. */
    int h = t->hhead, n = t->nhold;
    t->hhead = t->nhold = 0;
    t->hold_paused = 0;
    for (int i = 0; i < n; i++) o->c.cbs.drop(o->c.cbs.ud, t->hold[h + i].msg);
}

void svc_offsets_free(svc_offsets *o) {
    if (!o) return;
    for (int p = 0; p < o->n; p++) {
        hold_clear(o, &o->parts[p]);
        free(o->parts[p].off);
        free(o->parts[p].done);
        free(o->parts[p].hold);
        free(o->parts[p].skip);
    }
    free(o->parts);
    free(o);
}

int svc_offsets_n(const svc_offsets *o) { return o->n; }

/* Partition p, or NULL when it has no state (never assigned: the same as
 * unassigned). */
static part *get(const svc_offsets *o, int32_t p) { return p >= 0 && p < o->n ? &o->parts[p] : NULL; }

/* ------------------------------------------------------------------ ring */

static void ring_reset(part *t) {
    t->epoch++;
    t->head = t->n = 0;
    t->running = 0; /* their done calls are stale now */
}

static int ring_push(const svc_offsets *o, part *t, int64_t off) {
    if (t->head + t->n == t->cap) {
        if (t->head > 0) {
            memmove(t->off, t->off + t->head, (size_t)t->n * sizeof *t->off);
            memmove(t->done, t->done + t->head, (size_t)t->n);
            t->head = 0;
        }
        if (t->n == t->cap) {
            if (t->cap >= o->c.max_ring) return CK_ERANGE;
            int cap = t->cap ? 2 * t->cap : 64;
            if (cap > o->c.max_ring) cap = o->c.max_ring;
            int64_t *of = realloc(t->off, (size_t)cap * sizeof *of);
            if (!of) return CK_ENOMEM;
            t->off = of;
            uint8_t *d = realloc(t->done, (size_t)cap);
            if (!d) return CK_ENOMEM;
            t->done = d;
            t->cap = cap;
        }
    }
    t->off[t->head + t->n] = off;
    t->done[t->head + t->n] = 0;
    t->n++;
    t->running++;
    return CK_OK;
}

int svc_offsets_done(svc_offsets *o, svc_offsets_tok tok) {
    part *t = get(o, tok.partition);
    if (!t || t->epoch != tok.epoch || t->n == 0) return 0;
    /* binary search: offsets increase along the ring */
    int lo = t->head, hi = t->head + t->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->off[mid] == tok.offset) {
            /* the finished set in the commit metadata changes */
            if (!t->done[mid]) {
                if (t->assigned) t->dirty = 1;
                t->running--;
            }
            t->done[mid] = 1;
            break;
        }
        if (t->off[mid] < tok.offset)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    int64_t last = -1;
    while (t->n > 0 && t->done[t->head]) {
        last = t->off[t->head];
        t->head++;
        t->n--;
    }
    if (t->n == 0) t->head = 0;
    if (last >= 0 && t->assigned && last + 1 > t->next) {
        t->next = last + 1; /* committed by the next regular commit */
        t->dirty = 1;
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ assignment */

int svc_offsets_assign(svc_offsets *o, int32_t p, int assigned) {
    if (p < 0 || p > o->c.max_partition) return CK_EINVAL;
    if (p >= o->n) {
        int n = p + 1 > 2 * o->n ? p + 1 : 2 * o->n;
        if (n > o->c.max_partition + 1) n = o->c.max_partition + 1;
        part *t = realloc(o->parts, (size_t)n * sizeof *t);
        if (!t) return CK_ENOMEM;
        memset(t + o->n, 0, (size_t)(n - o->n) * sizeof *t);
        o->parts = t;
        o->n = n;
    }
    part *t = &o->parts[p];
    ring_reset(t);
    hold_clear(o, t);
    t->agen++;
    o->n_assigned += !!assigned - t->assigned;
    t->assigned = !!assigned;
    t->revoking = 0;
    t->known = t->dirty = 0;
    t->next = t->prev_mark = t->hi = -1;
    t->acked = t->mark = t->sent_mark = 0;
    t->sent_next = t->committed = -1;
    free(t->skip);
    t->skip = NULL;
    t->skip_bytes = 0;
    t->skip_base = -1;
    return CK_OK;
}

int svc_offsets_assigned(const svc_offsets *o, int32_t p) {
    const part *t = get(o, p);
    return t && t->assigned;
}

int svc_offsets_revoke_begin(svc_offsets *o, int32_t p) {
    part *t = get(o, p);
    if (!t || !t->assigned) return CK_ESTATE;
    t->revoking = 1;
    hold_clear(o, t); /* never dispatched: the next owner consumes them */
    return CK_OK;
}

int svc_offsets_revoking(const svc_offsets *o, int32_t p) {
    const part *t = get(o, p);
    return t && t->assigned && t->revoking;
}

int svc_offsets_outstanding(const svc_offsets *o, int32_t p) {
    const part *t = get(o, p);
    int n = 0;
    for (int i = 0; t && i < t->n; i++) n += !t->done[t->head + i];
    return n;
}

int svc_offsets_uncommitted(const svc_offsets *o, int32_t p) {
    const part *t = get(o, p);
    if (!t || !t->n) return 0;
    uint8_t bits[SVC_OFFMD_DONE_MAX];
    int nb;
    int64_t base = t->next >= 0 ? t->next : t->off[t->head];
    return svc_offsets_outstanding(o, p) + svc_offsets_done_set(o, p, base, bits, SVC_OFFMD_DONE_MAX, &nb);
}

int svc_offsets_done_set(const svc_offsets *o, int32_t p, int64_t base, uint8_t *bits, int cap, int *nbytes) {
    const part *t = get(o, p);
    int left = 0, n = 0;
    *nbytes = 0;
    if (!t || cap <= 0 || base < 0) return 0;
    memset(bits, 0, (size_t)cap);
    int64_t nbits = (int64_t)cap * 8;
    for (int i = 0; i < t->n; i++) {
        int64_t x = t->off[t->head + i];
        if (!t->done[t->head + i] || x < base) continue;
        if (x - base >= nbits) {
            left++;
            continue;
        }
        bits[(x - base) / 8] |= (uint8_t)(1u << ((x - base) % 8));
        if ((x - base) / 8 + 1 > n) n = (int)((x - base) / 8 + 1);
    }
    /* the previous owners' set, for offsets not consumed yet (consumed
     * ones are in the ring, done) */
    for (int64_t j = 0; t->skip && j < (int64_t)t->skip_bytes * 8; j++) {
        int64_t x = t->skip_base + j;
        if (!(t->skip[j / 8] >> (j % 8) & 1) || x < base || x <= t->hi) continue;
        if (x - base >= nbits) {
            left++;
            continue;
        }
        bits[(x - base) / 8] |= (uint8_t)(1u << ((x - base) % 8));
        if ((x - base) / 8 + 1 > n) n = (int)((x - base) / 8 + 1);
    }
    *nbytes = n;
    return left;
}

int svc_offsets_count_assigned(const svc_offsets *o) { return o->n_assigned; }

int svc_offsets_dispatch_bound(const svc_offsets *o) {
    if (o->c.dispatch_ahead > 0) return o->c.dispatch_ahead;
    if (o->c.dispatch_slots <= 0) return INT32_MAX;
    /* Twice the engine's share of each partition: the engine stays full
     * while half the partitions have work, and a revoke abandons at most
     * this many jobs of a partition. */
    int n = o->n_assigned > 0 ? o->n_assigned : 1;
    int64_t b = (2 * (int64_t)o->c.dispatch_slots + n - 1) / n;
    return b < 8 ? 8 : b > INT32_MAX ? INT32_MAX : (int)b;
}

/* -------------------------------------------------------- marks, dispatch */

/* Make sure a mark above offset off is asked for. */
static void want_mark(svc_offsets *o, part *t, int64_t off) {
    if (!t->known || t->next < 0 || off + o->c.mark_ahead / 2 < t->mark) return;
    t->mark = off + o->c.mark_ahead;
    if (t->prev_mark > t->mark) t->mark = t->prev_mark;
    o->c.cbs.commit(o->c.cbs.ud);
}

/* 1 when offset off is in p's previous owners' finished set. */
static int skip_has(const part *t, int64_t off) {
    if (!t->skip || off < t->skip_base || off - t->skip_base >= (int64_t)t->skip_bytes * 8) return 0;
    int64_t i = off - t->skip_base;
    return t->skip[i / 8] >> (i % 8) & 1;
}

static void dispatch(svc_offsets *o, int32_t p, int64_t off, void *msg) {
    part *t = &o->parts[p];
    svc_offsets_tok tok = {p, off, 0, 0};
    /* A message at or below the last one seen means a re-fetch: start over. */
    if (t->n > 0 && off <= t->off[t->head + t->n - 1]) ring_reset(t);
    if (ring_push(o, t, off) == CK_OK)
        tok.epoch = t->epoch;
    else
        tok.epoch = t->epoch - 1; /* untracked: its done is ignored */
    /* Below an earlier owner's mark, or at/below what we dispatched
     * ourselves: it may have been processed before. */
    tok.redelivered = off < t->prev_mark || off <= t->hi;
    if (off > t->hi) t->hi = off;
    want_mark(o, t, off);
    if (skip_has(t, off)) {
        /* finished by an earlier owner (its commit metadata says so): not
         * run again; its offset counts as done */
        if (o->c.cbs.skip)
            o->c.cbs.skip(o->c.cbs.ud, msg, tok);
        else
            o->c.cbs.drop(o->c.cbs.ud, msg);
        svc_offsets_done(o, tok);
        return;
    }
    o->c.cbs.dispatch(o->c.cbs.ud, msg, tok);
}

/* Hold msg until the broker has a mark above off. 0 or CK_ENOMEM. */
static int hold(svc_offsets *o, int32_t p, part *t, int64_t off, void *msg) {
    if (t->hhead + t->nhold == t->cap_hold) {
        if (t->hhead > 0) {
            memmove(t->hold, t->hold + t->hhead, (size_t)t->nhold * sizeof *t->hold);
            t->hhead = 0;
        }
        if (t->nhold == t->cap_hold) {
            int cap = t->cap_hold ? 2 * t->cap_hold : 64;
            held *h = realloc(t->hold, (size_t)cap * sizeof *h);
            if (!h) return CK_ENOMEM;
            t->hold = h;
            t->cap_hold = cap;
        }
    }
    t->hold[t->hhead + t->nhold++] = (held){msg, off};
    if (t->nhold >= o->c.hold_pause && !t->hold_paused) {
        /* The mark is late (the coordinator is slow or away), or dispatch-ahead
         * is full (a backlog): stop fetching until the hold empties. */
        t->hold_paused = 1;
        if (o->c.cbs.hold_pause) o->c.cbs.hold_pause(o->c.cbs.ud, p, 1, t->nhold);
    }
    return CK_OK;
}

int svc_offsets_consumed(svc_offsets *o, int32_t p, int64_t off, void *msg) {
    part *t = get(o, p);
    /* not (or no longer) ours, or being handed over: its owner consumes it */
    if (!t || !t->assigned || t->revoking) return CK_ESTATE;
    if (t->known && t->next < 0) t->next = off; /* no committed offset: start here */
    if (t->known && t->nhold == 0 && off < t->acked && t->running < svc_offsets_dispatch_bound(o)) {
        dispatch(o, p, off, msg);
        return CK_OK;
    }
    if (hold(o, p, t, off, msg)) return CK_ENOMEM;
    if (t->known) want_mark(o, t, off);
    return CK_OK;
}

int svc_offsets_releasable(const svc_offsets *o, int32_t p) {
    const part *t = get(o, p);
    return t && t->assigned && !t->revoking && t->known && t->nhold > 0 && t->hold[t->hhead].off < t->acked &&
           t->running < svc_offsets_dispatch_bound(o);
}

void svc_offsets_release(svc_offsets *o) {
    int bound = svc_offsets_dispatch_bound(o);
    for (int32_t p = 0; p < o->n; p++) {
        part *t = &o->parts[p];
        if (!t->assigned || t->revoking || !t->known || t->nhold == 0) continue;
        uint32_t agen = t->agen;
        while (t->nhold > 0 && t->hold[t->hhead].off < t->acked && t->running < bound) {
            held h = t->hold[t->hhead++];
            t->nhold--;
            dispatch(o, p, h.off, h.msg);
            t = &o->parts[p];
            if (t->agen != agen) break; /* revoked meanwhile: the rest was dropped */
        }
        if (t->agen != agen) continue;
        if (t->nhold) {
            want_mark(o, t, t->hold[t->hhead].off);
        } else {
            t->hhead = 0;
            if (t->hold_paused) {
                t->hold_paused = 0;
                if (o->c.cbs.hold_pause) o->c.cbs.hold_pause(o->c.cbs.ud, p, 0, 0);
            }
        }
    }
}

/* --------------------------------------------------------- committed read */

int svc_offsets_unknown(const svc_offsets *o, int32_t p, uint32_t *agen) {
    const part *t = get(o, p);
    if (!t || !t->assigned || t->known) return 0;
    *agen = t->agen;
    return 1;
}

int svc_offsets_wants(const svc_offsets *o, int32_t p, uint32_t agen) {
    const part *t = get(o, p);
    return t && t->assigned && t->agen == agen && !t->known;
}

int svc_offsets_committed(svc_offsets *o, int32_t p, uint32_t agen, int64_t committed, int64_t prev_mark,
                          const uint8_t *done, int done_bytes) {
    if (!svc_offsets_wants(o, p, agen)) return 0;
    part *t = &o->parts[p];
    if (committed >= 0 && done && done_bytes > 0 && done_bytes <= SVC_OFFMD_DONE_MAX) {
        /* without memory the set is left out: its jobs run again */
        t->skip = malloc((size_t)done_bytes);
        if (t->skip) {
            memcpy(t->skip, done, (size_t)done_bytes);
            t->skip_bytes = done_bytes;
            t->skip_base = committed;
        }
    }
    t->known = 1;
    t->prev_mark = prev_mark;
    t->acked = t->mark = prev_mark > 0 ? prev_mark : 0;
    t->next = committed >= 0 ? committed : t->nhold ? t->hold[t->hhead].off : -1;
    t->committed = committed >= 0 ? committed : -1;
    if (t->nhold) want_mark(o, t, t->hold[t->hhead + t->nhold - 1].off);
    return 1;
}

/* ---------------------------------------------------------------- commits */

int svc_offsets_commit_due(const svc_offsets *o, int32_t p, int64_t *offset, int64_t *mark) {
    const part *t = get(o, p);
    if (!t || !t->assigned || !t->known || t->next < 0 || !(t->dirty || t->mark > t->acked)) return 0;
    *offset = t->next;
    *mark = t->mark;
    return 1;
}

void svc_offsets_commit_sent(svc_offsets *o, int32_t p) {
    part *t = get(o, p);
    if (!t) return;
    t->sent_mark = t->mark;
    t->sent_next = t->next;
    t->sent_agen = t->agen;
    t->dirty = 0;
}

void svc_offsets_commit_unsent(svc_offsets *o, int32_t p) {
    part *t = get(o, p);
    if (t) t->dirty = 1;
}

int svc_offsets_commit_result(svc_offsets *o, int32_t p, int ok) {
    part *t = get(o, p);
    if (!t || !t->assigned || t->agen != t->sent_agen) return 0; /* an answer for an older assignment */
    if (ok && t->sent_next > t->committed) t->committed = t->sent_next;
    if (!ok) {
        t->dirty = 1; /* sent again by the next commit */
    } else if (t->sent_mark > t->acked) {
        t->acked = t->sent_mark;
        return 1;
    }
    return 0;
}

int svc_offsets_final(const svc_offsets *o, int32_t p, int64_t *offset, int64_t *mark) {
    const part *t = get(o, p);
    if (!t || !t->assigned || !t->known || t->next < 0) return 0;
    int64_t m = t->hi + 1;
    if (t->prev_mark > m) m = t->prev_mark;
    if (t->next > m) m = t->next;
    *offset = t->next;
    *mark = m;
    return 1;
}

int svc_offsets_metadata(const svc_offsets *o, int32_t p, int64_t offset, int64_t mark, char *buf, size_t cap,
                         int *left_out) {
    uint8_t bits[SVC_OFFMD_DONE_MAX];
    int nb = 0;
    *left_out = svc_offsets_done_set(o, p, offset, bits, SVC_OFFMD_DONE_MAX, &nb);
    return svc_offmd_format(buf, cap, mark, bits, nb);
}

int64_t svc_offsets_acked_offset(const svc_offsets *o, int32_t p) {
    const part *t = get(o, p);
    return t && t->assigned ? t->committed : -1;
}

int svc_offsets_hold_paused(const svc_offsets *o, int32_t p) {
    const part *t = get(o, p);
    return t && t->hold_paused;
}

void svc_offsets_drop_held(svc_offsets *o) {
    for (int p = 0; p < o->n; p++) hold_clear(o, &o->parts[p]);
}

/* ------------------------------------------------------------------ marks */

int svc_offsets_mark_format(char *buf, size_t cap, int64_t mark) {
    return svc_offmd_format(buf, cap, mark, NULL, 0);
}

int64_t svc_offsets_mark_parse(const void *md, size_t n) {
    svc_offmd m;
    const char *why;
    return svc_offmd_parse(md, n, &m, &why) ? -1 : m.mark;
}
