/* engine.c - the engine: requests, the batched step, events (engine.h).
 *
 * A request lives in one heap struct from eng_submit until its FINISHED (or
 * ERROR) event has been delivered and the next eng_step begins; the struct
 * never moves, because the warm tier keeps pointers to its kv_seq. It is in
 * the waiting queue, in the running set, or done (only waiting for its last
 * event to be read).
 *
 * A running sequence's tokens are hist[0, n_hist): the prompt, then every
 * sampled token. Positions [0, seq.n_tokens) have KV; the rest are pending.
 * One pending token is a decode step; more are a prefill chunk (the prompt,
 * or the whole history again after a recomputation). A step ending at n_hist
 * yields logits, from which the next token is sampled. A retry (kvpol_retry)
 * just rewinds seq.n_tokens by one, so the last token is pending again.
 *
 * A step (iterate):
 *   1. expire requests past their deadline;
 *   2. running sequences, best first: one decode token each, then prefill
 *      chunks, reserving their KV (room(): shrink CONF-KV sequences, then
 *      preempt the worst running sequence);
 *   3. admit waiting requests, best first, while their commitment fits;
 *   4. one forward pass over everything placed;
 *   5. per sequence with logits: confidence, retry, sampling, policy, stop
 *      rules, events (on_logits).
 * Steps 1-3 and the batch assembly are the scheduling time in eng_stats. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "ck_err.h"
#include "kv.h"
#include "kvq.h"
#include "prefix.h"
#include "scheduler.h"
#include "textbuf.h"
#include "tier.h"
#include "tokenizer.h"

/* Logits (rows x vocabulary) above which a step's confidence passes are
 * split between threads: about 100 us of work, four times what waking a
 * thread costs under OMP_WAIT_POLICY=passive. */
#define CONF_PAR_MIN ((size_t)1 << 17)

/* ================================================================ requests */

/* RESOLVING: waiting for the cold store (its session, its prefix blocks)
 * before it can join the queue; on eng.resolving, not in a queue. */
enum { REQ_WAITING = 1, REQ_RUNNING = 2, REQ_DONE = 3, REQ_RESOLVING = 4 };
enum { RES_SESSION = 1, RES_TEMPLATE = 2, RES_PREFIX = 3 };

typedef struct req req;
struct req {
    sched_entry se;          /* first: a sched_entry * in a queue is a req * */
    req *prev, *next;        /* every live request (eng.all) */
    req *zombie_next;        /* delivered last event: freed at the next eng_step */
    req *res_next;           /* eng.resolving */
    uint64_t id, user_tag;
    int state;               /* REQ_* */
    /* the request, copied */
    int32_t *hist;           /* (n_prompt + limit) the prompt, then the completion */
    int n_prompt, n_hist, limit;
    samp_params samp;
    int n_stop;
    char *stop[GEN_MAX_STOPS];
    int ignore_eos, want_trace;
    kvpol_config pc;
    int64_t deadline_ms;
    /* prefixes and sessions */
    char *session;           /* session id, or NULL */
    char *tpl;               /* template name to resolve, or NULL */
    int32_t *cont;           /* (n_cont) the prompt as a continuation (no BOS) */
    int n_cont, max_tokens;  /* max_tokens as asked (0 = up to the context) */
    int stage, pending;      /* RES_* while resolving; cold answers awaited */
    int fetched_session, fetched_tpl, fetched_prefix, has_prefix; /* asked the cold store; prefix given */
    int has_msg;             /* an ERROR event's message is in text */
    int internal;            /* the engine's own (a session's settling): no events */
    int prefill_only, keep_prefix;
    int n_keep;              /* leading tokens whose blocks are pinned and persisted (a template) */
    int n_session;           /* tokens of hist that are the session's context */
    uint64_t *bhash;         /* (max_ctx / bs + 1) prefix names of hist's blocks */
    int n_bhash;             /* computed so far */
    int pfx_blocks;          /* leading blocks the prefix cache had at resolution */
    int cached;              /* tokens copied from the prefix cache */
    int exact;               /* positions whose KV saw every earlier block hot (f32) */
    int step_exact;          /* this step reads every block hot */
    int commit;              /* pool blocks counted for it while running */
    /* run state, from its first admission to its end */
    int started;
    kv_seq seq;
    kvpol *pol;
    sampler *sm;
    uint8_t *moved;          /* (seq.max_blocks) blocks a preemption parked warm */
    int swapped;             /* preempted, blocks warm: resume instead of recompute */
    int prefill_done;        /* kvpol_after_prefill ran for the current KV */
    int retrying;            /* the pending token is a rerun: no retry check again */
    int step_n;              /* tokens it has in the step being built */
    uint64_t shrink_stamp;   /* step at which room() last shrank it */
    /* results */
    char *text;
    size_t text_len, text_cap, emitted; /* emitted: bytes released in events */
    samp_conf *trace;        /* (limit) when want_trace */
    int n_steps;             /* sampling steps (the EOS one included) */
    double sum_h, sum_gap, sum_pmax;
    double hot_steps, full_steps;
    size_t hot_peak;
    kvpol_stats pst;         /* the policy's, kept when it is freed */
    uint64_t preemptions;
    double t_arrival, t_admit, t_first, t_finish; /* ms, engine clock */
    eng_result res;
};

typedef struct pend {
    int type;                /* ENG_EV_* */
    req *r;
    int32_t token;
    samp_conf conf;
    size_t off, len;         /* piece: r->text + off, at delivery time */
    int error;
} pend;

struct eng {
    eng_config c;
    model *m;
    backend *b;
    kv_pool pool, pool8;
    tier *warm, *warm8;      /* f32 tier; int8 tier (made when a request needs it) */
    int bs, max_ctx, vocab;  /* max_ctx: the planned context (eng_fit_context), <= seq_len */
    size_t block_bytes;      /* one f32 block */
    eng_memory mem;          /* the plan eng_new followed */
    sched_queue waitq, runq;
    int committed;           /* sum of the running requests' commitments */
    req *all;
    /* the step being built: sized at eng_new */
    int32_t *tok, *pos, *seqix, *out_row; /* (max_batch_tokens) */
    be_seq_view *views;      /* (max_running) */
    req **batch;             /* (max_running) sequences in the step */
    req **cand;              /* (max_running) the running set, best first */
    float *logits;           /* (max_running, vocab) */
    samp_conf *conf;         /* (max_running) each logits row's confidence */
    int32_t *amax;           /* (max_running) each row's argmax, -1 when its confidence failed */
    int32_t *scratch;        /* (max_ctx) prompt ids at submit */
    int left;                /* tokens still free in the step */
    uint64_t stamp;          /* step counter */
    /* events not yet delivered: pend[pend_head, pend_n) */
    pend *pend;
    int pend_head, pend_n, pend_cap;
    req *zombies;
    uint64_t next_id, next_order;
    int next_owner;          /* labels pool blocks (kv_pool.owner) */
    int n_deadlines;         /* live requests with a deadline */
    int broken;              /* CK_EBACKEND once the backend failed */
    pfx *pfx;                /* prefix cache, NULL when off */
    sess_store *sess;
    tpl_cache *tpl;
    req *resolving;          /* REQ_RESOLVING requests */
    int n_resolving;
    float *blockbuf;         /* (one f32 block) publishing */
    eng_stats st;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

int64_t eng_now_ms(void) { return (int64_t)now_ms(); }

void eng_config_default(eng_config *c) {
    memset(c, 0, sizeof *c);
    c->backend = "auto";
    c->threads = 0;
    c->block_size = 0;
    c->kv_budget_bytes = (size_t)64 << 20;
    c->warm_budget_bytes = 0;
    c->max_running = 64;
    c->max_batch_tokens = 512;
    c->max_queue = 4096;
    c->aging_ms = 1000;
    kvpol_config_default(&c->policy, KVPOL_CONF);
}

const model *eng_model(const eng *e) { return e->m; }

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* Pool blocks a request may hold at most once its policy has settled (see
 * engine.h, Scheduling); the whole prompt while it is being prefilled. */
static int commit_blocks(const eng *e, const req *r) {
    const kvpol_config *c = &r->pc;
    const int bs = e->bs;
    int full = ceil_div(r->n_prompt + r->limit - 1 > 0 ? r->n_prompt + r->limit - 1 : 1, bs);
    int steady;
    switch (c->kind) {
    case KVPOL_FULL: steady = full; break;
    case KVPOL_CONF: {
        /* protected: the newest block, the sink blocks, the recent window;
         * then ranked blocks up to min_size; +1 for a block opened at a
         * boundary before the policy demotes. */
        int prot = 1 + ceil_div(c->sink_tokens, bs) + ceil_div(c->recent_window, bs);
        int least = ceil_div(c->min_size, bs) + 1;
        steady = (prot > least ? prot : least) + 1;
        break;
    }
    default: steady = ceil_div(c->budget, bs) + 2; break;
    }
    if (!r->prefill_done) {
        int pre = ceil_div(r->n_hist, bs) + 1;
        if (pre > steady) steady = pre;
    }
    return steady < full ? steady : full;
}

/* ================================================================= events */

static int ensure_pend(eng *e, int extra) {
    if (e->pend_head > 0 && e->pend_head == e->pend_n) e->pend_head = e->pend_n = 0;
    if (e->pend_n + extra <= e->pend_cap) return CK_OK;
    if (e->pend_head > 0) { /* compact first */
        memmove(e->pend, e->pend + e->pend_head, (size_t)(e->pend_n - e->pend_head) * sizeof *e->pend);
        e->pend_n -= e->pend_head;
        e->pend_head = 0;
        if (e->pend_n + extra <= e->pend_cap) return CK_OK;
    }
    int cap = e->pend_cap ? e->pend_cap : 64;
    while (cap < e->pend_n + extra) cap *= 2;
    pend *p = realloc(e->pend, (size_t)cap * sizeof *p);
    if (!p) return CK_ENOMEM;
    e->pend = p;
    e->pend_cap = cap;
    return CK_OK;
}

/* Room was made by ensure_pend before the step (or the cancel) began. */
static pend *push_pend(eng *e, int type, req *r) {
    pend *p = &e->pend[e->pend_n++];
    memset(p, 0, sizeof *p);
    p->type = type;
    p->r = r;
    return p;
}

static void deliver(eng *e, eng_event *ev, int max_events, int *n) {
    while (*n < max_events && e->pend_head < e->pend_n) {
        pend *p = &e->pend[e->pend_head++];
        req *r = p->r;
        eng_event *o = &ev[(*n)++];
        memset(o, 0, sizeof *o);
        o->type = p->type;
        o->id = r->id;
        o->user_tag = r->user_tag;
        if (p->type == ENG_EV_TOKEN || p->type == ENG_EV_FINISHED) {
            o->piece = r->text + p->off;
            o->piece_len = p->len;
        }
        if (p->type == ENG_EV_TOKEN) {
            o->token = p->token;
            o->conf = p->conf;
        } else if (p->type == ENG_EV_FINISHED) {
            o->result = &r->res;
        } else {
            o->error = p->error;
            o->message = r->has_msg ? r->text : ck_strerror(p->error);
        }
        if (p->type != ENG_EV_TOKEN) { /* its last event: free it at the next call */
            r->zombie_next = e->zombies;
            e->zombies = r;
        }
    }
    if (e->pend_head == e->pend_n) e->pend_head = e->pend_n = 0;
}

/* ============================================================ life cycle */

/* Free what a request owns besides its text and trace, and the request
 * (one that never joined the engine's lists: all of it). */
static void free_loose(req *r) {
    free(r->hist);
    free(r->session);
    free(r->tpl);
    free(r->cont);
    free(r->bhash);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r);
}

static void free_req(eng *e, req *r) {
    if (r->prev) r->prev->next = r->next;
    else e->all = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r->text);
    free(r->trace);
    free_loose(r);
}

/* Give back everything a started request holds: KV (hot, int8, warm),
 * policy, sampler. Safe on a request that never started. */
static void release_run(eng *e, req *r) {
    if (!r->started) return;
    if (r->pc.cache_compression && r->seq.hot) tier_release_seq(e->warm, &r->seq); /* preempted f32 blocks */
    if (r->pol) {
        kvpol_end(r->pol, &r->seq);
        r->pst = *kvpol_get_stats(r->pol);
        kvpol_free(r->pol);
        r->pol = NULL;
    }
    if (r->seq.hot) kv_seq_reset(&r->seq, &e->pool);
    kv_seq_free(&r->seq);
    samp_free(r->sm);
    r->sm = NULL;
    free(r->moved);
    r->moved = NULL;
    r->started = 0;
}

/* The first admission: block table, policy, sampler. */
static int start_run(eng *e, req *r) {
    int rc;
    e->next_owner = (e->next_owner + 1) & 0x3fffffff;
    if ((rc = kv_seq_init(&r->seq, e->next_owner, e->max_ctx, e->bs))) return rc;
    r->started = 1;
    r->moved = calloc((size_t)r->seq.max_blocks, 1);
    if (!r->moved) return CK_ENOMEM;
    tier *warm = r->pc.cache_compression ? e->warm8 : e->warm;
    if ((rc = kvpol_new(&r->pc, e->b, &e->pool, &e->pool8, warm, &r->pol))) return rc;
    if ((rc = samp_new(e->vocab, &r->samp, &r->sm))) return rc;
    kvpol_begin(r->pol, &r->seq);
    /* The prefix cache's blocks, copied in (admit reserved room for them). */
    for (int j = 0; j < r->pfx_blocks && e->pfx; j++) {
        int tier, slot = pfx_find(e->pfx, r->bhash[j], &tier);
        if (slot < 0 || kv_seq_reserve(&r->seq, &e->pool, e->bs)) break;
        if ((rc = e->b->ops->kv_write(e->b, r->seq.hot[j], pfx_block(e->pfx, slot)))) return rc;
        kv_seq_commit(&r->seq, e->bs);
    }
    r->cached = r->exact = r->seq.n_tokens;
    e->st.cached_tokens += (uint64_t)r->cached;
    return CK_OK;
}

/* Names of hist's first n blocks (computed once, extended on demand). */
static const uint64_t *block_names(eng *e, req *r, int n) {
    for (; r->n_bhash < n; r->n_bhash++) {
        int j = r->n_bhash;
        uint64_t parent = j ? r->bhash[j - 1] : pfx_root(e->m->fingerprint);
        r->bhash[j] = pfx_next(parent, r->hist + (size_t)j * e->bs, e->bs);
    }
    return r->bhash;
}

/* Put r's exact full hot blocks among its first `upto` positions into the
 * prefix cache (flags: PFX_PIN, PFX_PERSIST). Best effort: a block that
 * cannot be read or kept is skipped. */
static void publish(eng *e, req *r, int upto, int flags) {
    if (!e->pfx || !r->started) return;
    if (upto > r->exact) upto = r->exact;
    if (upto > r->seq.n_tokens) upto = r->seq.n_tokens;
    int nb = upto / e->bs;
    const uint64_t *h = block_names(e, r, nb);
    for (int j = 0; j < nb; j++) {
        int blk = r->seq.hot[j];
        if (blk == KV_NONE) continue;
        if (!pfx_has(e->pfx, h[j]) && e->b->ops->kv_read(e->b, blk, e->blockbuf)) continue;
        pfx_insert(e->pfx, h[j], j, e->blockbuf, flags);
    }
}

static void take_out(eng *e, req *r) {
    if (r->state == REQ_RESOLVING) {
        req **link = &e->resolving;
        while (*link != r) link = &(*link)->res_next;
        *link = r->res_next;
        e->n_resolving--;
        if (e->pfx) pfx_forget_waiter(e->pfx, &r->pending);
        if (e->sess) sess_forget_waiter(e->sess, &r->pending);
        if (e->tpl) tpl_cache_forget_waiter(e->tpl, &r->pending);
    } else if (r->state == REQ_RUNNING) {
        sched_remove(&e->runq, &r->se);
        e->committed -= r->commit;
    } else if (r->state == REQ_WAITING) {
        sched_remove(&e->waitq, &r->se);
    }
    if (r->deadline_ms) e->n_deadlines--;
    r->step_n = 0;
}

static void settle(eng *e, const req *r);

/* An internal request ends without events: straight to the zombies. */
static void end_internal(eng *e, req *r, int reason) {
    if (reason == GEN_FINISH_LENGTH) publish(e, r, r->n_hist, PFX_PERSIST);
    take_out(e, r);
    release_run(e, r);
    r->state = REQ_DONE;
    r->zombie_next = e->zombies;
    e->zombies = r;
}

/* End a request with a FINISHED event (reason GEN_FINISH_* or ENG_FINISH_*). */
static void finish_req(eng *e, req *r, int reason) {
    if (r->internal) return end_internal(e, r, reason);
    if (r->session && (reason == GEN_FINISH_STOP || reason == GEN_FINISH_LENGTH) && e->sess) {
        /* The conversation so far, for the next turn: tokens, and KV in the
         * prefix cache and the cold store (idle sessions live there). */
        publish(e, r, r->n_hist, PFX_PERSIST);
        if (!sess_save(e->sess, r->session, r->hist, r->n_hist)) e->st.sessions_saved++;
        if (r->exact < r->n_hist - 1) settle(e, r);
    }
    take_out(e, r);
    release_run(e, r);
    r->state = REQ_DONE;
    r->t_finish = now_ms();
    eng_result *o = &r->res;
    memset(o, 0, sizeof *o);
    o->finish = reason;
    o->text = r->text;
    o->text_len = r->text_len;
    o->tokens = r->hist + r->n_prompt;
    o->n_tokens = r->n_hist - r->n_prompt;
    o->trace = r->want_trace ? r->trace : NULL;
    o->prompt_tokens = r->n_prompt;
    o->cached_tokens = r->cached;
    o->session_tokens = r->n_session;
    if (r->n_steps) {
        o->mean_entropy = r->sum_h / r->n_steps;
        o->mean_gap = r->sum_gap / r->n_steps;
        o->mean_pmax = r->sum_pmax / r->n_steps;
    }
    o->queue_ms = (r->t_admit > 0 ? r->t_admit : r->t_finish) - r->t_arrival;
    o->ttft_ms = (r->t_first > 0 ? r->t_first : r->t_finish) - r->t_arrival;
    o->total_ms = r->t_finish - r->t_arrival;
    o->kv_retained_mean = r->full_steps > 0 ? r->hot_steps / r->full_steps : 1.0;
    o->hot_peak_bytes = r->hot_peak;
    o->recalls = r->pst.recalls;
    o->demotions = r->pst.demotions;
    o->spills = r->pst.spills;
    o->preemptions = r->preemptions;
    pend *p = push_pend(e, ENG_EV_FINISHED, r);
    p->off = r->emitted; /* what was held back */
    p->len = r->text_len - r->emitted;
    r->emitted = r->text_len;
    e->st.finished++;
    if (reason == ENG_FINISH_EXPIRED) e->st.expired++;
    if (reason == ENG_FINISH_CANCELLED) e->st.cancelled++;
}

/* End a request with an ERROR event (it is gone; no FINISHED follows). */
static void fail_req(eng *e, req *r, int error) {
    if (r->internal) return end_internal(e, r, -1);
    take_out(e, r);
    release_run(e, r);
    r->state = REQ_DONE;
    pend *p = push_pend(e, ENG_EV_ERROR, r);
    p->error = error;
    e->st.failed++;
}

/* The same with a message of its own (kept in the request's text buffer,
 * which an erroring request does not otherwise use). */
static void fail_req_msg(eng *e, req *r, int error, const char *msg) {
    r->text_len = 0;
    if (tb_append(&r->text, &r->text_len, &r->text_cap, msg, strlen(msg))) r->text_len = 0;
    r->has_msg = 1;
    fail_req(e, r, error);
}

/* ========================================================= memory plan */

/* Defaults filled in, as eng_new uses the config. */
static int config_resolve(eng_config *c, char *err, size_t errlen) {
    if (!c->backend) c->backend = "auto";
    if (!c->kv_budget_bytes) c->kv_budget_bytes = (size_t)64 << 20;
    if (c->max_running <= 0) c->max_running = 64;
    if (c->max_batch_tokens <= 0) c->max_batch_tokens = 512;
    if (c->max_queue <= 0) c->max_queue = 4096;
    if (c->aging_ms < 0 || c->block_size < 0 || c->threads < 0 || c->max_context < 0) {
        snprintf(err, errlen, "negative aging_ms, block_size, threads or max_context");
        return CK_EINVAL;
    }
    if (c->max_memory_mb > SIZE_MAX >> 20) {
        snprintf(err, errlen, "max_memory_mb %zu is out of range", c->max_memory_mb);
        return CK_EINVAL;
    }
    /* Every running sequence must be able to put its decode token in a step. */
    if (c->max_running > c->max_batch_tokens) c->max_running = c->max_batch_tokens;
    return CK_OK;
}

static void human(size_t b, char *out, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(out, n, "%zu B", b);
    else snprintf(out, n, v >= 100 ? "%.0f %s" : "%.1f %s", v, unit[u]);
}

int eng_memory_describe(const eng_memory *p, char *buf, size_t len) {
    char t[16], w[16], kv[16], kv8[16], wa[16], pf[16], act[16], h[16], sc[16], spt[16], f[16];
    human(p->total, t, sizeof t);
    human(p->be.weights, w, sizeof w);
    human(p->be.kv, kv, sizeof kv);
    human(p->be.kv8, kv8, sizeof kv8);
    human(p->warm, wa, sizeof wa);
    human(p->prefix, pf, sizeof pf);
    human(p->be.activations, act, sizeof act);
    human(p->host, h, sizeof h);
    human(p->be.scratch, sc, sizeof sc);
    human(p->be.scratch_per_thread, spt, sizeof spt);
    human(p->file_bytes, f, sizeof f);
    return snprintf(buf, len,
                    "planned %s at context %d (weights %s, KV %s, int8 KV %s, warm %s, prefix %s, "
                    "batch %s, engine %s, scratch %s = %d x %s; file %s mapped)",
                    t, p->max_ctx, w, kv, kv8, wa, pf, act, h, sc, p->be.n_threads, spt, f);
}

int eng_fit_context(const model *m, int max_context, size_t max_memory_mb, int block_size,
                    eng_plan_cb plan, void *ud, eng_memory *p, char *err, size_t errlen) {
    const int seq = m->cfg.seq_len, bs = block_size > 0 ? block_size : 1;
    int ctx = max_context > 0 ? (max_context < seq ? max_context : seq) : be_default_ctx(m);
    int rc = plan(ud, ctx, p);
    if (rc) {
        snprintf(err, errlen, "planning memory for context %d: %s", ctx, ck_strerror(rc));
        return rc;
    }
    p->limit_mb = max_memory_mb;
    if (!max_memory_mb || max_memory_mb > SIZE_MAX >> 20) return CK_OK;
    const size_t limit = max_memory_mb << 20;
    if (p->total <= limit) return CK_OK;
    if (max_context <= 0 && ctx > bs) {
        /* The default yields: the largest whole number of blocks below it
         * that fits (every size grows with the context, so bisect). */
        int lo = 1, hi = (ctx - 1) / bs, found = 0;
        eng_memory q, best;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2;
            if (!plan(ud, mid * bs, &q) && q.total <= limit) {
                best = q;
                found = 1;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        if (found) {
            *p = best;
            p->limit_mb = max_memory_mb;
            return CK_OK;
        }
        if ((rc = plan(ud, bs, p))) return rc; /* the least it could plan, for the message */
        p->limit_mb = max_memory_mb;
    }
    char d[400];
    eng_memory_describe(p, d, sizeof d);
    snprintf(err, errlen, "%s exceeds max_memory_mb=%zu%s", d, max_memory_mb,
             max_context > 0 ? " (lower max_context)" : "");
    return CK_ENOSPACE;
}

/* What eng_new builds for one context: its backend options, then tiers. */
typedef struct eng_plan_ud {
    const eng_config *c;
    const model *m;
    int bs;
    size_t n_blocks, block_bytes;
} eng_plan_ud;

static int eng_plan_at(void *ud_, int ctx, eng_memory *p) {
    const eng_plan_ud *u = ud_;
    const eng_config *c = u->c;
    const model_config *mc = &u->m->cfg;
    memset(p, 0, sizeof *p);
    be_options bo = {.max_batch_tokens = c->max_batch_tokens, .n_kv_blocks = (int)u->n_blocks,
                     .block_size = u->bs, .n_threads = c->threads, .max_ctx = ctx,
                     .n_kv8_blocks = (int)u->n_blocks};
    int rc = be_cpu_plan(u->m, &bo, &p->be);
    if (rc) return rc;
    /* tier.c and prefix.c: a slab of whole slots, at least one, capped */
    kvq_shape shape = {mc->n_layers, u->bs, mc->n_kv_heads * mc->head_dim};
    size_t warm_budget = c->warm_budget_bytes ? c->warm_budget_bytes : 4 * u->n_blocks * u->block_bytes;
    size_t slot = kvq_f32_bytes(&shape), n = warm_budget / slot;
    n = n > (1u << 30) ? 1u << 30 : n ? n : 1;
    p->warm = n * slot;
    if (c->policy.cache_compression) {
        slot = kvq_block_bytes(&shape);
        n = warm_budget / slot;
        n = n > (1u << 30) ? 1u << 30 : n ? n : 1;
        p->warm += n * slot;
    }
    if (!c->prefix_cache_off) {
        size_t budget = c->prefix_cache_bytes ? c->prefix_cache_bytes : u->n_blocks * u->block_bytes;
        n = budget / u->block_bytes;
        n = n > (1u << 24) ? 1u << 24 : n ? n : 1;
        p->prefix = n * u->block_bytes;
    }
    /* eng_new's buffers: logits, the step arrays, the prompt scratch, a block,
     * and the two pools' bookkeeping (three int32 a block each) */
    const size_t R = (size_t)c->max_running, T = (size_t)c->max_batch_tokens;
    p->host = R * (size_t)mc->vocab_size * sizeof(float) + 4 * T * sizeof(int32_t) +
              (size_t)ctx * sizeof(int32_t) + u->block_bytes + 2 * 3 * u->n_blocks * sizeof(int32_t);
    p->total = p->be.total + p->warm + p->prefix + p->host;
    p->max_ctx = ctx;
    p->file_bytes = model_file_bytes(u->m);
    return CK_OK;
}

/* The plan, and the pool geometry eng_new builds with. */
static int plan_config(const eng_config *c, const model *m, eng_memory *p, eng_plan_ud *u, char *err,
                       size_t errlen) {
    const model_config *mc = &m->cfg;
    u->c = c;
    u->m = m;
    u->bs = c->block_size > 0 ? c->block_size : kv_default_block_size(mc->seq_len);
    u->block_bytes = (size_t)mc->n_layers * 2 * (size_t)u->bs * (size_t)(mc->n_kv_heads * mc->head_dim) *
                     sizeof(float);
    u->n_blocks = c->kv_budget_bytes / u->block_bytes;
    if (u->n_blocks < 1 || u->n_blocks > (1u << 30)) {
        snprintf(err, errlen, "a KV budget of %zu bytes holds %zu blocks of %zu bytes", c->kv_budget_bytes,
                 u->n_blocks, u->block_bytes);
        return CK_EINVAL;
    }
    return eng_fit_context(m, c->max_context, c->max_memory_mb, u->bs, eng_plan_at, u, p, err, errlen);
}

int eng_memory_plan(const eng_config *cfg, const model *m, eng_memory *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    eng_config c = *cfg;
    int rc = config_resolve(&c, err, errlen);
    if (rc) return rc;
    eng_plan_ud u;
    return plan_config(&c, m, p, &u, err, errlen);
}

const eng_memory *eng_get_memory(const eng *e) { return &e->mem; }
int eng_max_context(const eng *e) { return e->max_ctx; }

/* ============================================================= eng_new */

int eng_new(const eng_config *cfg, eng **out, char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = 0;
    if (!cfg || !cfg->model_path) {
        snprintf(err, errlen, "no model path");
        return CK_EINVAL;
    }
    eng_config c = *cfg;
    int rc = config_resolve(&c, err, errlen);
    if (rc) return rc;
    eng *e = calloc(1, sizeof *e);
    if (!e) return CK_ENOMEM;
    e->c = c;
    e->c.model_path = e->c.tokenizer_path = NULL; /* borrowed only for the load */
    e->next_id = 1;
    rc = model_load(cfg->model_path, cfg->tokenizer_path, &e->m, err, errlen);
    if (rc) goto fail;
    const model_config *mc = &e->m->cfg;
    /* Plan first: a load past max_memory_mb stops here, before the backend
     * allocates anything (the model is only mapped so far). */
    eng_plan_ud pu;
    if ((rc = plan_config(&c, e->m, &e->mem, &pu, err, errlen))) goto fail;
    e->max_ctx = e->mem.max_ctx;
    e->vocab = mc->vocab_size;
    e->bs = pu.bs;
    e->c.block_size = e->bs;
    e->block_bytes = pu.block_bytes;
    size_t n_blocks = pu.n_blocks;
    be_options bo = {.max_batch_tokens = c.max_batch_tokens,
                     .n_kv_blocks = (int)n_blocks,
                     .block_size = e->bs,
                     .n_threads = c.threads,
                     .max_ctx = e->max_ctx,
                     .n_kv8_blocks = (int)n_blocks};
    if ((rc = be_new(c.backend, e->m, &bo, &e->b, err, errlen))) goto fail;
    if ((rc = kv_pool_init(&e->pool, (int)n_blocks, e->bs)) ||
        (rc = kv_pool_init(&e->pool8, (int)n_blocks, e->bs))) {
        snprintf(err, errlen, "KV pool: %s", ck_strerror(rc));
        goto fail;
    }
    tier_config tc;
    tier_config_default(&tc, e->b);
    if (c.warm_budget_bytes) tc.budget_bytes = c.warm_budget_bytes;
    e->c.warm_budget_bytes = tc.budget_bytes;
    tc.cold = c.cold;
    tc.max_cold = c.cold ? tc.max_cold : 0;
    tc.instance = (uint64_t)(uintptr_t)e << 1;
    if ((rc = tier_new(&tc, &e->warm))) {
        snprintf(err, errlen, "warm tier: %s", ck_strerror(rc));
        goto fail;
    }
    if (c.policy.cache_compression) {
        tc.compress = 1;
        tc.instance |= 1;
        if ((rc = tier_new(&tc, &e->warm8))) {
            snprintf(err, errlen, "int8 warm tier: %s", ck_strerror(rc));
            goto fail;
        }
    }
    if (!c.prefix_cache_off) {
        pfx_config pc = {.shape = tc.shape,
                         .budget_bytes = c.prefix_cache_bytes ? c.prefix_cache_bytes : n_blocks * e->block_bytes,
                         .fingerprint = e->m->fingerprint,
                         .cold = c.cold,
                         .promote_hits = c.promote_hits < 0 ? 0 : c.promote_hits ? c.promote_hits : 4};
        if ((rc = pfx_new(&pc, &e->pfx))) {
            snprintf(err, errlen, "prefix cache: %s", ck_strerror(rc));
            goto fail;
        }
    }
    sess_config sc = {.max_sessions = c.max_sessions, .max_tokens = e->max_ctx, .vocab = e->vocab,
                      .fingerprint = e->m->fingerprint, .cold = c.cold};
    if ((rc = sess_new(&sc, &e->sess)) || (rc = tpl_cache_new(256, 10000, c.cold, &e->tpl))) {
        snprintf(err, errlen, "sessions and templates: %s", ck_strerror(rc));
        goto fail;
    }
    if ((rc = sched_queue_init(&e->waitq, c.max_queue + c.max_running, c.aging_ms)) ||
        (rc = sched_queue_init(&e->runq, c.max_running, c.aging_ms)))
        goto fail;
    size_t T = (size_t)c.max_batch_tokens, R = (size_t)c.max_running;
    e->tok = malloc(T * sizeof *e->tok);
    e->pos = malloc(T * sizeof *e->pos);
    e->seqix = malloc(T * sizeof *e->seqix);
    e->out_row = malloc(T * sizeof *e->out_row);
    e->views = malloc(R * sizeof *e->views);
    e->batch = malloc(R * sizeof *e->batch);
    e->cand = malloc(R * sizeof *e->cand);
    e->logits = malloc(R * (size_t)e->vocab * sizeof *e->logits);
    e->conf = malloc(R * sizeof *e->conf);
    e->amax = malloc(R * sizeof *e->amax);
    e->scratch = malloc((size_t)e->max_ctx * sizeof *e->scratch);
    e->blockbuf = malloc(e->block_bytes);
    rc = CK_ENOMEM;
    if (!e->tok || !e->pos || !e->seqix || !e->out_row || !e->views || !e->batch || !e->cand ||
        !e->logits || !e->conf || !e->amax || !e->scratch || !e->blockbuf || ensure_pend(e, 2 * c.max_running + 64))
        goto fail;
    e->st.hot_blocks = (int)n_blocks;
    e->st.hot_capacity_bytes = n_blocks * e->block_bytes;
    *out = e;
    return CK_OK;
fail:
    if (errlen && !err[0]) snprintf(err, errlen, "%s", ck_strerror(rc));
    eng_free(e);
    return rc;
}

void eng_free(eng *e) {
    if (!e) return;
    while (e->all) {
        req *r = e->all;
        if (r->state == REQ_RESOLVING) take_out(e, r);
        release_run(e, r);
        free_req(e, r);
    }
    pfx_free(e->pfx);
    sess_free(e->sess);
    tpl_cache_free(e->tpl);
    free(e->blockbuf);
    tier_free(e->warm);
    tier_free(e->warm8);
    kv_pool_free(&e->pool);
    kv_pool_free(&e->pool8);
    be_free(e->b);
    model_free(e->m);
    sched_queue_free(&e->waitq);
    sched_queue_free(&e->runq);
    free(e->tok);
    free(e->pos);
    free(e->seqix);
    free(e->out_row);
    free(e->views);
    free(e->batch);
    free(e->cand);
    free(e->logits);
    free(e->conf);
    free(e->amax);
    free(e->scratch);
    free(e->pend);
    free(e);
}

/* ============================================================ eng_submit */

/* Tokenize `what` (the prefix or the prompt) into out (room ids at most). */
static int encode(eng *e, const char *text, size_t len, int bos, int32_t *out, int room, int *n, const char *what,
                  char *err, size_t errlen) {
    int rc = tok_encode(e->m->tok, text, len, bos, out, room, n);
    if (rc == CK_ETOOLONG) snprintf(err, errlen, "the %s is %d tokens; the context holds %d", what, *n, room);
    else if (rc) snprintf(err, errlen, "cannot tokenize the %s: %s", what, ck_strerror(rc));
    return rc;
}


/* Is an earlier turn of r's session still live? Then r waits for it. */
static int session_busy(const eng *e, const req *r) {
    for (const req *o = e->all; o; o = o->next)
        if (o != r && o->session && o->state != REQ_DONE && o->id < r->id && !strcmp(o->session, r->session))
            return 1;
    return 0;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* r's tokens become head (n_head: a session's context, or a template's
 * tokens) followed by the prompt as a continuation. */
static int take_tokens(eng *e, req *r, const int32_t *head, int n_head, int n_session, char *err, size_t errlen) {
    int n = n_head + r->n_cont;
    int limit = r->max_tokens ? r->max_tokens : e->max_ctx - n;
    if (n >= e->max_ctx || limit > e->max_ctx - n) {
        snprintf(err, errlen, "%s (%d) + prompt (%d) + max_tokens (%d) exceed the context (%d)",
                 n_session ? "session context" : "template", n_head, r->n_cont, limit, e->max_ctx);
        return CK_ETOOLONG;
    }
    int32_t *h = malloc((size_t)(n + limit) * sizeof *h);
    samp_conf *tr = r->trace ? malloc((size_t)limit * sizeof *tr) : NULL;
    if (!h || (r->trace && !tr)) {
        free(h);
        free(tr);
        return CK_ENOMEM;
    }
    memcpy(h, head, (size_t)n_head * sizeof *h);
    if (r->n_cont) memcpy(h + n_head, r->cont, (size_t)r->n_cont * sizeof *h);
    free(r->hist);
    r->hist = h;
    if (r->trace) {
        free(r->trace);
        r->trace = tr;
    }
    r->n_prompt = r->n_hist = n;
    r->limit = limit;
    r->n_session = n_session;
    if (n_session) r->n_keep = 0; /* a session's context is not a template */
    r->n_bhash = 0;
    r->commit = commit_blocks(e, r);
    if (r->commit > e->pool.n_blocks) {
        snprintf(err, errlen, "the request needs %d KV blocks hot; the pool has %d", r->commit, e->pool.n_blocks);
        return CK_ENOSPACE;
    }
    return CK_OK;
}

/* Move r toward the queue: its session's context (host, else the cold
 * store), then its prefix blocks (the cold copies of those the host lacks,
 * for a request that names a session or a prefix: only those are written
 * there). Returns 1 ready, 0 waiting for the cold store (r->pending
 * answers), or a CK_E* error with err filled. */
static int resolve(eng *e, req *r, char *err, size_t errlen) {
    if (r->pending) return 0;
    if (r->stage == RES_SESSION) {
        if (session_busy(e, r)) return 0;
        const int32_t *ctx;
        int nc, rc;
        if (sess_find(e->sess, r->session, &ctx, &nc)) {
            if ((rc = take_tokens(e, r, ctx, nc, nc, err, errlen))) return rc;
            e->st.sessions_resumed++;
            r->stage = RES_PREFIX; /* the context began with the template, if any */
        } else if (!r->fetched_session && e->c.cold) {
            r->fetched_session = 1;
            if (!sess_fetch(e->sess, r->session, &r->pending)) return 0;
        }
        if (r->stage == RES_SESSION) /* a new session, or one that is gone */
            r->stage = r->tpl ? RES_TEMPLATE : RES_PREFIX;
    }
    if (r->stage == RES_TEMPLATE) {
        const char *text;
        size_t len;
        int64_t now = (int64_t)now_ms();
        if (!tpl_cache_find(e->tpl, r->tpl, now, &text, &len)) {
            if (!r->fetched_tpl && e->c.cold) {
                r->fetched_tpl = 1;
                if (!tpl_cache_fetch(e->tpl, r->tpl, now, &r->pending)) return 0;
            }
            if (!r->fetched_tpl || !tpl_cache_find(e->tpl, r->tpl, now, &text, &len)) {
                snprintf(err, errlen, "unknown template %s", r->tpl);
                return CK_ENOTFOUND;
            }
        }
        int n = 0, rc;
        if ((rc = encode(e, text, len, 1, e->scratch, e->max_ctx, &n, "template", err, errlen)) ||
            (rc = take_tokens(e, r, e->scratch, n, 0, err, errlen)))
            return rc;
        r->has_prefix = 1;
        r->n_keep = n; /* a template's blocks stay pinned and persisted */
        r->stage = RES_PREFIX;
    }
    int nb = e->pfx ? (r->n_prompt - 1) / e->bs : 0; /* the last prompt token is always computed */
    if (nb <= 0) return 1;
    const uint64_t *h = block_names(e, r, nb);
    int k = 0;
    while (k < nb && pfx_has(e->pfx, h[k])) k++;
    if (k < nb && !r->fetched_prefix && e->c.cold && (r->session || r->keep_prefix || r->has_prefix)) {
        r->fetched_prefix = 1;
        for (int j = k; j < nb; j++)
            if (pfx_fetch(e->pfx, h[j], j, &r->pending)) break;
        if (r->pending) return 0;
    }
    r->pfx_blocks = k;
    e->st.prefix_lookups += (uint64_t)nb;
    return 1;
}

int eng_submit(eng *e, const eng_request *q, uint64_t *id, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    err[0] = 0;
    if (!e || !q || !id) {
        snprintf(err, errlen, "NULL argument");
        return CK_EINVAL;
    }
    if (e->waitq.n + e->n_resolving >= e->c.max_queue) {
        snprintf(err, errlen, "the waiting queue is full (%d)", e->c.max_queue);
        return CK_EBUSY;
    }
    if (q->session_id && (!q->session_id[0] || strlen(q->session_id) > SESS_ID_MAX)) {
        snprintf(err, errlen, "a session id is 1 to %d bytes", SESS_ID_MAX);
        return CK_EINVAL;
    }
    if (q->template_name && !tpl_name_ok(q->template_name)) {
        snprintf(err, errlen, "a template name is 1 to %d bytes of A-Z a-z 0-9 . _ : -", TPL_NAME_MAX);
        return CK_EINVAL;
    }
    if (q->save_template && (!q->template_name || !q->prompt || q->prefix)) {
        snprintf(err, errlen, "saving a template takes a name and a prompt text (and no prefix)");
        return CK_EINVAL;
    }
    int use_tpl = q->template_name && !q->save_template;
    /* The prompt: [BOS prefix] prompt, in e->scratch. */
    int n = 0, rc;
    if (q->prefix && (rc = encode(e, q->prefix, q->prefix_len, 1, e->scratch, e->max_ctx, &n, "prefix", err, errlen)))
        return rc;
    if (q->prompt) {
        int k = 0;
        if ((rc = encode(e, q->prompt, q->prompt_len, n == 0, e->scratch + n, e->max_ctx - n, &k, "prompt", err, errlen)))
            return rc;
        n += k;
    } else if (q->tokens && q->n_tokens > 0) {
        if (n + q->n_tokens >= e->max_ctx) {
            snprintf(err, errlen, "the prompt is %d tokens; the context holds %d", n + q->n_tokens, e->max_ctx);
            return CK_ETOOLONG;
        }
        for (int i = 0; i < q->n_tokens; i++) {
            if (q->tokens[i] < 0 || q->tokens[i] >= e->vocab) {
                snprintf(err, errlen, "token %d at %d is outside the vocabulary (%d)", q->tokens[i], i, e->vocab);
                return CK_EINVAL;
            }
        }
        memcpy(e->scratch + n, q->tokens, (size_t)q->n_tokens * sizeof *e->scratch);
        n += q->n_tokens;
    } else if (!q->prefix) {
        snprintf(err, errlen, "no prompt");
        return CK_EINVAL;
    }
    if (n <= 0) {
        snprintf(err, errlen, "empty prompt");
        return CK_EINVAL;
    }
    if (q->max_tokens < 0) {
        snprintf(err, errlen, "max_tokens %d < 0", q->max_tokens);
        return CK_EINVAL;
    }
    int limit = q->max_tokens ? q->max_tokens : e->max_ctx - n;
    if (n >= e->max_ctx || limit > e->max_ctx - n) {
        snprintf(err, errlen, "prompt (%d) + max_tokens (%d) exceed the context (%d)", n, limit, e->max_ctx);
        return CK_ETOOLONG;
    }
    if (samp_params_check(&q->samp)) {
        snprintf(err, errlen, "sampling parameters out of range");
        return CK_EINVAL;
    }
    if (q->n_stop < 0 || q->n_stop > GEN_MAX_STOPS) {
        snprintf(err, errlen, "n_stop %d outside 0..%d", q->n_stop, GEN_MAX_STOPS);
        return CK_EINVAL;
    }
    for (int i = 0; i < q->n_stop; i++) {
        if (!q->stop[i]) {
            snprintf(err, errlen, "stop string %d is NULL", i);
            return CK_EINVAL;
        }
    }
    kvpol_config pc = e->c.policy;
    if (q->policy && (rc = kvpol_parse(q->policy, &pc, err, errlen))) return rc;
    if (pc.cache_compression && !e->warm8) {
        tier_config tc;
        tier_config_default(&tc, e->b);
        tc.budget_bytes = e->c.warm_budget_bytes;
        tc.cold = e->c.cold;
        tc.max_cold = e->c.cold ? tc.max_cold : 0;
        tc.compress = 1;
        tc.instance = (uint64_t)(uintptr_t)e << 1 | 1;
        if ((rc = tier_new(&tc, &e->warm8))) {
            snprintf(err, errlen, "int8 warm tier: %s", ck_strerror(rc));
            return rc;
        }
    }

    req *r = calloc(1, sizeof *r);
    if (!r) return CK_ENOMEM;
    r->se.index = -1;
    r->n_prompt = r->n_hist = n;
    r->limit = limit;
    r->pc = pc;
    r->hist = malloc((size_t)(n + limit) * sizeof *r->hist);
    r->trace = q->want_trace ? malloc((size_t)limit * sizeof *r->trace) : NULL;
    rc = r->hist && (!q->want_trace || r->trace) ? tb_append(&r->text, &r->text_len, &r->text_cap, "", 0)
                                                  : CK_ENOMEM;
    for (int i = 0; !rc && i < q->n_stop; i++) {
        if (!(r->stop[i] = strdup(q->stop[i]))) rc = CK_ENOMEM;
        r->n_stop = i + 1;
    }
    r->max_tokens = q->max_tokens;
    r->has_prefix = q->prefix != NULL;
    r->prefill_only = q->prefill_only;
    r->keep_prefix = q->keep_prefix;
    if (!rc && e->pfx && !(r->bhash = malloc(((size_t)e->max_ctx / e->bs + 1) * sizeof *r->bhash))) rc = CK_ENOMEM;
    if (!rc && q->session_id && !(r->session = strdup(q->session_id))) rc = CK_ENOMEM;
    if (!rc && use_tpl && !(r->tpl = strdup(q->template_name))) rc = CK_ENOMEM;
    if (!rc && (r->session || r->tpl)) {
        /* The prompt as it follows a context or a template: no BOS. */
        if (q->prompt) {
            int k = 0;
            if (!(r->cont = malloc((size_t)e->max_ctx * sizeof *r->cont)))
                rc = CK_ENOMEM;
            else
                rc = encode(e, q->prompt, q->prompt_len, 0, r->cont, e->max_ctx, &k, "prompt", err, errlen);
            r->n_cont = k;
        } else if (q->tokens && q->n_tokens > 0) {
            int skip = q->tokens[0] == tok_bos(e->m->tok);
            r->n_cont = q->n_tokens - skip;
            if (r->n_cont > 0 && (r->cont = malloc((size_t)r->n_cont * sizeof *r->cont)))
                memcpy(r->cont, q->tokens + skip, (size_t)r->n_cont * sizeof *r->cont);
            else if (r->n_cont > 0)
                rc = CK_ENOMEM;
        }
    }
    r->commit = commit_blocks(e, r);
    if (!rc && r->commit > e->pool.n_blocks) {
        snprintf(err, errlen, "the request needs %d KV blocks hot; the pool has %d", r->commit,
                 e->pool.n_blocks);
        rc = CK_ENOSPACE;
    }
    if (rc) {
        free(r->trace);
        free(r->text);
        r->text = NULL, r->trace = NULL;
        free_loose(r);
        if (!err[0]) snprintf(err, errlen, "%s", ck_strerror(rc));
        return rc;
    }
    memcpy(r->hist, e->scratch, (size_t)n * sizeof *r->hist);
    r->samp = q->samp;
    r->ignore_eos = q->ignore_eos;
    r->want_trace = q->want_trace;
    r->deadline_ms = q->deadline_ms;
    r->user_tag = q->user_tag;
    r->id = e->next_id++;
    r->t_arrival = now_ms();
    r->se.priority = q->priority;
    r->se.arrival_ms = r->t_arrival;
    r->se.order = e->next_order++;
    if (q->save_template) {
        if ((rc = tpl_cache_save(e->tpl, q->template_name, q->prompt, q->prompt_len, (int64_t)now_ms(), wall_ms()))) {
            snprintf(err, errlen, "cannot save template %s: %s", q->template_name, ck_strerror(rc));
            free(r->trace);
            free(r->text);
            free_loose(r);
            return rc;
        }
        r->keep_prefix = 1;
    }
    if (r->keep_prefix) r->n_keep = r->n_prompt;
    r->stage = r->session ? RES_SESSION : r->tpl ? RES_TEMPLATE : RES_PREFIX;
    rc = resolve(e, r, err, errlen);
    if (rc < 0) {
        free(r->trace);
        free(r->text);
        free_loose(r);
        return rc;
    }
    if (rc) {
        sched_push(&e->waitq, &r->se); /* cannot fail: checked above */
        r->state = REQ_WAITING;
    } else {
        r->state = REQ_RESOLVING;
        r->res_next = e->resolving;
        e->resolving = r;
        e->n_resolving++;
    }
    r->next = e->all;
    if (e->all) e->all->prev = r;
    e->all = r;
    if (r->deadline_ms) e->n_deadlines++;
    e->st.submitted++;
    *id = r->id;
    return CK_OK;
}

/* A session turn whose later KV was computed with a reduced CONF-KV cache
 * left those blocks unpublished (not exact). Recompute the conversation's
 * KV once, with the full cache and at low priority, as a prefill of its own
 * (the exact part comes from the prefix cache): the next turn then reuses
 * all of it, and sees the same KV a fresh run on the conversation would. The
 * next turn waits for it (session_busy). Best effort: skipped when it does
 * not fit. */
static void settle(eng *e, const req *r) {
    if (!e->pfx || r->n_hist >= e->max_ctx) return;
    eng_request q;
    memset(&q, 0, sizeof q);
    samp_params_default(&q.samp);
    q.samp.temperature = 0;
    q.tokens = r->hist;
    q.n_tokens = r->n_hist;
    q.max_tokens = 1;
    q.prefill_only = 1;
    q.policy = "full";
    q.priority = r->se.priority - 1;
    uint64_t id;
    if (eng_submit(e, &q, &id, NULL, 0)) return;
    req *s = e->all; /* eng_submit puts the newest first */
    if (s->id != id || !(s->session = strdup(r->session))) {
        if (s->id == id) finish_req(e, s, ENG_FINISH_CANCELLED); /* cannot happen but on ENOMEM */
        return;
    }
    s->internal = 1;
    e->st.submitted--;
    e->st.session_settles++;
}

/* ============================================================ scheduling */

/* Reset a sequence to be computed again from hist[0]. */
static void recompute_reset(eng *e, req *r) {
    if (r->pc.cache_compression) tier_release_seq(e->warm, &r->seq);
    kvpol_end(r->pol, &r->seq);
    kv_seq_reset(&r->seq, &e->pool);
    memset(r->moved, 0, (size_t)r->seq.max_blocks);
    r->swapped = 0;
    r->prefill_done = 0;
    r->exact = 0;
}

/* Running -> waiting: blocks to the warm tier, or reset for recomputation. */
static void preempt(eng *e, req *v) {
    sched_remove(&e->runq, &v->se);
    e->committed -= v->commit;
    e->left += v->step_n;
    v->step_n = 0;
    int rc = kvpol_preempt(v->pol, &v->seq, v->moved, e->warm);
    v->swapped = rc == CK_OK;
    if (rc) { /* the tier is full (or a block could not be read): start over later */
        recompute_reset(e, v);
        e->st.recomputes++;
    }
    v->state = REQ_WAITING;
    sched_push(&e->waitq, &v->se); /* room: the queue holds max_queue + max_running */
    v->preemptions++;
    e->st.preemptions++;
}

/* Make `need` pool blocks free: shrink CONF-KV sequences (worst first, each
 * once a step, never one still in its prefill), then, when may_preempt,
 * preempt the worst running sequences, which may be r itself. Returns 1
 * when the blocks are free. */
static int room(eng *e, req *r, int need, int may_preempt) {
    for (int k = 0; k < e->runq.n && e->pool.n_free < need; k++) {
        req *s = (req *)e->runq.v[k];
        if (s->pc.kind != KVPOL_CONF || !s->prefill_done || s->shrink_stamp == e->stamp) continue;
        s->shrink_stamp = e->stamp;
        kvpol_make_room(s->pol, &s->seq, need - e->pool.n_free);
    }
    while (may_preempt && e->pool.n_free < need && e->runq.n > 0) {
        req *v = (req *)sched_worst(&e->runq);
        preempt(e, v);
        if (v == r) return 0;
    }
    return e->pool.n_free >= need;
}

/* Tokens from r's end that fit its current last block plus the free blocks. */
static int fit_tokens(const eng *e, const req *r) {
    const kv_seq *s = &r->seq;
    int in_block = s->n_tokens % e->bs, j = s->n_tokens / e->bs;
    int room_here = in_block && j < s->max_blocks && s->hot[j] != KV_NONE ? e->bs - in_block : 0;
    return room_here + e->pool.n_free * e->bs;
}

/* Reserve KV for *n tokens of r (a chunk may shrink to what fits). Returns
 * 1 when r has *n tokens in the step. */
static int place(eng *e, req *r, int *n, int may_preempt) {
    int need = kv_seq_blocks_needed(&r->seq, *n);
    if (need > e->pool.n_free && !room(e, r, need, may_preempt)) {
        if (r->state != REQ_RUNNING || *n == 1) return 0;
        int fit = fit_tokens(e, r);
        if (fit <= 0) return 0;
        if (fit < *n) *n = fit;
    }
    int rc = kv_seq_reserve(&r->seq, &e->pool, *n);
    if (rc == CK_ENOSPACE) return 0;
    if (rc) {
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
    if (!w->swapped) return kv_seq_blocks_needed(&w->seq, n);
    int f32, i8;
    kvpol_resume_blocks(w->pol, &w->seq, w->moved, &f32, &i8);
    const kv_seq *s = &w->seq;
    int extra = 0;
    for (int j = s->n_tokens / e->bs; j <= (s->n_tokens + n - 1) / e->bs && j < s->max_blocks; j++)
        extra += !w->moved[j] && s->hot[j] == KV_NONE;
    return f32 + extra;
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
    return count && e->committed - freed + w->commit <= e->pool.n_blocks &&
           e->runq.n - count < e->c.max_running;
}

static void admit(eng *e) {
    while (e->left > 0 && e->waitq.n > 0) {
        req *w = (req *)sched_best(&e->waitq);
        w->commit = commit_blocks(e, w);
        /* A slot and a commitment that fits. */
        while (e->runq.n >= e->c.max_running || e->committed + w->commit > e->pool.n_blocks) {
            req *v = (req *)sched_worst(&e->runq);
            if (!v || !outranks(e, w, v) || !preempting_helps(e, w)) return;
            preempt(e, v);
        }
        int pending = w->n_hist - (w->started ? w->seq.n_tokens : w->pfx_blocks * e->bs);
        int n = pending < e->left ? pending : e->left;
        int need = need_now(e, w, n);
        if (need > e->pool.n_free) room(e, NULL, need, 0);
        while (need > e->pool.n_free) {
            req *v = (req *)sched_worst(&e->runq);
            if (!v || !outranks(e, w, v)) return;
            preempt(e, v);
        }
        sched_remove(&e->waitq, &w->se);
        int rc = CK_OK;
        if (!w->started) rc = start_run(e, w);
        if (!rc && w->swapped) {
            rc = kvpol_resume(w->pol, &w->seq, w->moved, e->warm);
            if (rc == CK_EBUSY || rc == CK_ENOSPACE) { /* cold fetch in flight; try later */
                sched_push(&e->waitq, &w->se);
                return;
            }
            if (rc == CK_ESTATE) { /* a block was lost: recompute */
                recompute_reset(e, w);
                e->st.recomputes++;
                rc = CK_OK;
            }
            w->swapped = 0;
        }
        if (rc) {
            w->state = REQ_DONE; /* out of the queue already */
            if (w->deadline_ms) e->n_deadlines--;
            release_run(e, w);
            pend *p = push_pend(e, ENG_EV_ERROR, w);
            p->error = rc;
            e->st.failed++;
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

static void expire(eng *e) {
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

/* ========================================================= after forward */

/* Release text up to `end` with a TOKEN event. */
static void emit_token(eng *e, req *r, int32_t token, const samp_conf *conf, size_t end) {
    pend *p = push_pend(e, ENG_EV_TOKEN, r);
    p->token = token;
    p->conf = *conf;
    p->off = r->emitted;
    p->len = end > r->emitted ? end - r->emitted : 0;
    if (end > r->emitted) r->emitted = end;
}

/* The logits of r's last pending token: the next token, as gen_run does. */
/* amax: the row's argmax from its confidence pass (-1: none), the token of
 * a plain greedy request without a second pass over the logits. */
static void on_logits(eng *e, req *r, float *logits, const samp_conf *row_conf, int32_t amax) {
    int rc;
    if (!r->prefill_done) {
        r->prefill_done = 1;
        /* Its prompt's blocks, for the next request that begins the same
         * way: now, before the policy demotes any of them. */
        publish(e, r, r->n_prompt, r->session ? PFX_PERSIST : 0);
        if (r->n_keep) publish(e, r, r->n_keep, PFX_PIN | PFX_PERSIST);
        if ((rc = kvpol_after_prefill(r->pol, &r->seq))) {
            fail_req(e, r, rc);
            return;
        }
        e->committed -= r->commit; /* the prompt is in: the steady commitment */
        r->commit = commit_blocks(e, r);
        e->committed += r->commit;
        if (r->prefill_only) {
            finish_req(e, r, GEN_FINISH_LENGTH);
            return;
        }
    }
    samp_conf conf = *row_conf;
    /* An uncertain step under a reduced cache runs again with recalled blocks. */
    if (!r->retrying && kvpol_retry(r->pol, &r->seq, &conf) > 0) {
        r->seq.n_tokens--; /* rewrite the last position's KV in the next step */
        if (r->exact > r->seq.n_tokens) r->exact = r->seq.n_tokens;
        r->retrying = 1;
        return;
    }
    r->retrying = 0;
    int32_t next =
        amax >= 0 && samp_plain_greedy(r->sm) ? amax : samp_sample(r->sm, logits, r->hist, r->n_hist);
    if (next < 0) {
        fail_req(e, r, next);
        return;
    }
    int gen = r->n_hist - r->n_prompt;
    if (r->t_first <= 0) r->t_first = now_ms();
    r->n_steps++;
    r->sum_h += conf.entropy;
    r->sum_gap += conf.gap;
    r->sum_pmax += conf.pmax;
    if (r->want_trace) r->trace[gen] = conf;
    /* KV accounting: what attention just read. */
    int hot = kv_seq_hot_tokens(&r->seq), hot8 = kv_seq_hot8_tokens(&r->seq);
    e->st.hot_lookups += (uint64_t)r->seq.n_blocks;
    e->st.hot_hits += (uint64_t)(r->seq.n_hot + r->seq.n_hot8);
    r->hot_steps += hot;
    r->full_steps += r->seq.n_tokens;
    double hb = (double)(hot - hot8) * ((double)e->block_bytes / e->bs) +
                (double)hot8 * ((double)e->b->kv8_block_bytes / e->bs);
    if (hb > (double)r->hot_peak) r->hot_peak = (size_t)hb;
    if ((rc = kvpol_after_step(r->pol, &r->seq, &conf))) {
        fail_req(e, r, rc);
        return;
    }
    const tokenizer *tk = e->m->tok;
    if (!r->ignore_eos && (tok_is_eog(tk, next) || (e->m->stop_on_bos && next == tok_bos(tk)))) {
        finish_req(e, r, GEN_FINISH_STOP);
        return;
    }
    int32_t prev = r->hist[r->n_hist - 1];
    r->hist[r->n_hist++] = next;
    e->st.tokens_generated++;
    size_t len, before = r->text_len;
    const char *piece = tok_decode(tk, prev, next, &len);
    if ((rc = tb_append(&r->text, &r->text_len, &r->text_cap, piece, len))) {
        fail_req(e, r, rc);
        return;
    }
    const char *const *stops = (const char *const *)r->stop;
    int reason = -1;
    if (tb_cut_stop(r->text, &r->text_len, stops, r->n_stop, before)) reason = GEN_FINISH_STOP;
    else if (gen + 1 >= r->limit || r->n_hist >= e->max_ctx) reason = GEN_FINISH_LENGTH;
    size_t end = reason >= 0 ? r->text_len : r->text_len - tb_stop_holdback(r->text, r->text_len, stops, r->n_stop);
    emit_token(e, r, next, &conf, end);
    if (reason >= 0) finish_req(e, r, reason);
}

/* ================================================================ a step */

static int iterate(eng *e) {
    double t0 = now_ms();
    e->stamp++;
    /* Room for this step's events: a token and an end per request at most. */
    if (ensure_pend(e, 2 * (e->runq.n + e->waitq.n) + 8)) return CK_ENOMEM;
    expire(e);
    if (e->c.cold) {
        tier_poll(e->warm); /* one poll of the shared store answers every tier, prefix and session */
        if (e->warm8) tier_poll(e->warm8);
    }
    /* Requests whose cold-store answers are in join the queue. */
    for (req *r = e->resolving, *nx; r; r = nx) {
        nx = r->res_next;
        char msg[160];
        int rc = resolve(e, r, msg, sizeof msg);
        if (rc == 0) continue;
        if (rc < 0) {
            fail_req_msg(e, r, rc, msg);
            continue;
        }
        take_out(e, r);
        sched_push(&e->waitq, &r->se);
        r->state = REQ_WAITING;
        if (r->deadline_ms) e->n_deadlines++; /* take_out counted it off */
    }
    e->left = e->c.max_batch_tokens;
    /* 1. Running sequences, best first: decode tokens, then prefill chunks. */
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
    /* 2. Admission. */
    admit(e);
    /* 3. The batch. */
    int nt = 0, ns = 0, n_out = 0;
    for (int k = 0; k < e->runq.n; k++) {
        req *r = (req *)sched_rank(&e->runq, k);
        if (!r->step_n) continue;
        kv_seq *s = &r->seq;
        e->views[ns] = (be_seq_view){.blocks = s->hot, .n_blocks = s->n_blocks,
                                     .blocks8 = s->n_hot8 ? s->hot8 : NULL, .mass = s->mass};
        r->step_exact = s->n_hot == s->n_blocks && s->n_hot8 == 0 && r->exact == s->n_tokens;
        int ends = s->n_tokens + r->step_n == r->n_hist;
        for (int i = 0; i < r->step_n; i++, nt++) {
            e->tok[nt] = r->hist[s->n_tokens + i];
            e->pos[nt] = s->n_tokens + i;
            e->seqix[nt] = ns;
            e->out_row[nt] = ends && i == r->step_n - 1 ? n_out++ : -1;
        }
        if (r->step_n > 1 || !r->prefill_done) e->st.tokens_prefilled += (uint64_t)r->step_n;
        e->batch[ns++] = r;
    }
    size_t hot = (size_t)kv_pool_used(&e->pool) * e->block_bytes +
                 (size_t)kv_pool_used(&e->pool8) * e->b->kv8_block_bytes;
    if (hot > e->st.hot_peak_bytes) e->st.hot_peak_bytes = hot;
    if (e->runq.n > e->st.running_peak) e->st.running_peak = e->runq.n;
    double t1 = now_ms();
    /* 4. Forward. */
    if (nt > 0) {
        be_batch bt = {.n_tokens = nt, .token = e->tok, .pos = e->pos, .seq = e->seqix,
                       .out_row = e->out_row, .n_seqs = ns, .seqs = e->views, .n_out = n_out};
        int rc = e->b->ops->forward(e->b, &bt, e->logits);
        if (rc) return rc == CK_EBACKEND ? rc : CK_EBACKEND;
    }
    double t2 = now_ms();
    /* 5. Tokens. First every row's confidence: the pass reads a whole row of
     * logits and touches nothing else, so rows are split between the
     * backend's threads when there is enough of them (on a 32000-entry
     * vocabulary it was a tenth of a batch-32 step on this thread alone);
     * the rest changes the engine's state and runs here, in order. */
    const int conf_threads =
        e->b->opt.n_threads > 1 && (size_t)n_out * (size_t)e->vocab >= CONF_PAR_MIN ? e->b->opt.n_threads : 1;
#pragma omp parallel for num_threads(conf_threads) schedule(static) if (conf_threads > 1)
    for (int i = 0; i < n_out; i++) {
        int am;
        e->amax[i] = samp_confidence(e->logits + (size_t)i * e->vocab, e->vocab, &e->conf[i], &am) ? -1 : am;
    }
    for (int k = 0, row = 0; k < ns; k++) {
        req *r = e->batch[k];
        int ends = r->seq.n_tokens + r->step_n == r->n_hist;
        if (r->step_exact) r->exact = r->seq.n_tokens + r->step_n;
        kv_seq_commit(&r->seq, r->step_n);
        r->step_n = 0;
        if (ends) {
            on_logits(e, r, e->logits + (size_t)row * e->vocab, &e->conf[row], e->amax[row]);
            row++;
        }
    }
    double t3 = now_ms();
    e->st.steps++;
    e->st.last_batch_tokens = nt;
    e->st.last_batch_seqs = ns;
    e->st.step_ms_last = t3 - t0;
    e->st.sched_ms_last = t1 - t0;
    e->st.step_ms_total += t3 - t0;
    e->st.sched_ms_total += t1 - t0;
    e->st.forward_ms_total += t2 - t1;
    e->st.token_ms_total += t3 - t2;
    return CK_OK;
}

int eng_step(eng *e, eng_event *events, int max_events, int *n_events) {
    if (!e || !n_events || max_events < 0 || (max_events > 0 && !events)) return CK_EINVAL;
    *n_events = 0;
    if (e->broken) return e->broken;
    while (e->zombies) {
        req *r = e->zombies;
        e->zombies = r->zombie_next;
        free_req(e, r);
    }
    deliver(e, events, max_events, n_events);
    if (e->pend_head < e->pend_n) return CK_OK; /* drain first */
    if (e->runq.n == 0 && e->waitq.n == 0 && !e->n_resolving) return CK_OK;
    int rc = iterate(e);
    if (rc) {
        e->broken = rc == CK_ENOMEM ? 0 : rc;
        return rc;
    }
    deliver(e, events, max_events, n_events);
    return CK_OK;
}

int eng_cancel(eng *e, uint64_t id) {
    if (!e) return CK_EINVAL;
    for (req *r = e->resolving; r; r = r->res_next) {
        if (r->id != id) continue;
        if (ensure_pend(e, 1)) return CK_ENOMEM;
        finish_req(e, r, ENG_FINISH_CANCELLED);
        return CK_OK;
    }
    sched_queue *qs[2] = {&e->runq, &e->waitq};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < qs[k]->n; i++) {
            req *r = (req *)qs[k]->v[i];
            if (r->id != id) continue;
            if (ensure_pend(e, 1)) return CK_ENOMEM;
            finish_req(e, r, ENG_FINISH_CANCELLED);
            return CK_OK;
        }
    }
    return CK_ENOTFOUND;
}

int eng_idle(const eng *e) {
    return e->runq.n == 0 && e->waitq.n == 0 && !e->n_resolving && e->pend_head == e->pend_n;
}

int eng_flush(eng *e, int timeout_ms) {
    double end = now_ms() + timeout_ms;
    for (;;) {
        int left = (e->pfx ? pfx_in_flight(e->pfx) : 0) + sess_in_flight(e->sess) + tpl_cache_in_flight(e->tpl);
        if (!left) return CK_OK;
        if (now_ms() >= end || !e->c.cold) return CK_EBUSY;
        cold_poll(e->c.cold);
        struct timespec ms = {0, 500000};
        nanosleep(&ms, NULL);
    }
}

void eng_get_stats(const eng *e, eng_stats *s) {
    *s = e->st;
    s->running = e->runq.n;
    s->waiting = e->waitq.n;
    s->hot_blocks_used = kv_pool_used(&e->pool);
    s->hot_blocks = e->pool.n_blocks;
    s->hot_bytes = (size_t)s->hot_blocks_used * e->block_bytes;
    s->hot_capacity_bytes = (size_t)e->pool.n_blocks * e->block_bytes;
    s->int8_bytes = (size_t)kv_pool_used(&e->pool8) * e->b->kv8_block_bytes;
    s->warm_bytes = tier_get_stats(e->warm)->bytes + (e->warm8 ? tier_get_stats(e->warm8)->bytes : 0);
    const tier_stats *tiers[2] = {tier_get_stats(e->warm), e->warm8 ? tier_get_stats(e->warm8) : NULL};
    s->cold_spills = s->cold_fetch_hits = s->cold_fetch_misses = s->integrity_failures = 0;
    for (int i = 0; i < 2; i++) {
        if (!tiers[i]) continue;
        s->cold_spills += tiers[i]->spills;
        s->cold_fetch_hits += tiers[i]->fetch_hits;
        s->cold_fetch_misses += tiers[i]->fetch_misses;
        s->integrity_failures += tiers[i]->integrity_failures;
    }
    if (e->pfx) {
        const pfx_stats *p = pfx_get_stats(e->pfx);
        s->prefix_hits_warm = p->hits_warm;
        s->prefix_hits_cold = p->hits_cold;
        s->prefix_hits_template = p->hits_template;
        s->prefix_promotions = p->promotions;
        s->prefix_persisted = p->persisted;
        s->prefix_integrity_failures = p->integrity_failures;
        s->prefix_bytes = p->bytes;
        s->prefix_pinned = p->pinned;
        s->integrity_failures += p->integrity_failures;
    }
    const sess_stats *ss = sess_get_stats(e->sess);
    s->sessions_fetched = ss->cold_hits;
    s->session_misses = ss->misses;
    s->session_integrity_failures = ss->integrity_failures;
    s->integrity_failures += ss->integrity_failures;
    s->resolving = e->n_resolving;
    const tpl_cache_stats *ts = tpl_cache_get_stats(e->tpl);
    s->template_fetches = ts->fetches;
    s->template_misses = ts->fetch_misses;
    s->template_saves = ts->saves;
    s->integrity_failures += ts->integrity_failures;
}
