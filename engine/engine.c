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
#include "scheduler.h"
#include "textbuf.h"
#include "tier.h"
#include "tokenizer.h"

/* ================================================================ requests */

enum { REQ_WAITING = 1, REQ_RUNNING = 2, REQ_DONE = 3 };

typedef struct req req;
struct req {
    sched_entry se;          /* first: a sched_entry * in a queue is a req * */
    req *prev, *next;        /* every live request (eng.all) */
    req *zombie_next;        /* delivered last event: freed at the next eng_step */
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
    int bs, max_ctx, vocab;
    size_t block_bytes;      /* one f32 block */
    sched_queue waitq, runq;
    int committed;           /* sum of the running requests' commitments */
    req *all;
    /* the step being built: sized at eng_new */
    int32_t *tok, *pos, *seqix, *out_row; /* (max_batch_tokens) */
    be_seq_view *views;      /* (max_running) */
    req **batch;             /* (max_running) sequences in the step */
    req **cand;              /* (max_running) the running set, best first */
    float *logits;           /* (max_running, vocab) */
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
            o->message = ck_strerror(p->error);
        }
        if (p->type != ENG_EV_TOKEN) { /* its last event: free it at the next call */
            r->zombie_next = e->zombies;
            e->zombies = r;
        }
    }
    if (e->pend_head == e->pend_n) e->pend_head = e->pend_n = 0;
}

/* ============================================================ life cycle */

static void free_req(eng *e, req *r) {
    if (r->prev) r->prev->next = r->next;
    else e->all = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r->hist);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->text);
    free(r->trace);
    free(r);
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
    return CK_OK;
}

static void take_out(eng *e, req *r) {
    if (r->state == REQ_RUNNING) {
        sched_remove(&e->runq, &r->se);
        e->committed -= r->commit;
    } else if (r->state == REQ_WAITING) {
        sched_remove(&e->waitq, &r->se);
    }
    if (r->deadline_ms) e->n_deadlines--;
    r->step_n = 0;
}

/* End a request with a FINISHED event (reason GEN_FINISH_* or ENG_FINISH_*). */
static void finish_req(eng *e, req *r, int reason) {
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
    o->cached_tokens = 0;
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
    take_out(e, r);
    release_run(e, r);
    r->state = REQ_DONE;
    pend *p = push_pend(e, ENG_EV_ERROR, r);
    p->error = error;
    e->st.failed++;
}

/* ============================================================= eng_new */

int eng_new(const eng_config *cfg, eng **out, char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = 0;
    if (!cfg || !cfg->model_path) {
        snprintf(err, errlen, "no model path");
        return CK_EINVAL;
    }
    eng_config c = *cfg;
    if (!c.backend) c.backend = "auto";
    if (!c.kv_budget_bytes) c.kv_budget_bytes = (size_t)64 << 20;
    if (c.max_running <= 0) c.max_running = 64;
    if (c.max_batch_tokens <= 0) c.max_batch_tokens = 512;
    if (c.max_queue <= 0) c.max_queue = 4096;
    if (c.aging_ms < 0 || c.block_size < 0 || c.threads < 0) {
        snprintf(err, errlen, "negative aging_ms, block_size or threads");
        return CK_EINVAL;
    }
    /* Every running sequence must be able to put its decode token in a step. */
    if (c.max_running > c.max_batch_tokens) c.max_running = c.max_batch_tokens;
    eng *e = calloc(1, sizeof *e);
    if (!e) return CK_ENOMEM;
    e->c = c;
    e->c.model_path = e->c.tokenizer_path = NULL; /* borrowed only for the load */
    e->next_id = 1;
    int rc = model_load(cfg->model_path, cfg->tokenizer_path, &e->m, err, errlen);
    if (rc) goto fail;
    const model_config *mc = &e->m->cfg;
    e->max_ctx = mc->seq_len;
    e->vocab = mc->vocab_size;
    e->bs = c.block_size > 0 ? c.block_size : kv_default_block_size(mc->seq_len);
    e->c.block_size = e->bs;
    size_t block_floats = (size_t)mc->n_layers * 2 * (size_t)e->bs * (size_t)(mc->n_kv_heads * mc->head_dim);
    e->block_bytes = block_floats * sizeof(float);
    size_t n_blocks = c.kv_budget_bytes / e->block_bytes;
    if (n_blocks < 1 || n_blocks > (1u << 30)) {
        snprintf(err, errlen, "a KV budget of %zu bytes holds %zu blocks of %zu bytes", c.kv_budget_bytes,
                 n_blocks, e->block_bytes);
        rc = CK_EINVAL;
        goto fail;
    }
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
    e->scratch = malloc((size_t)e->max_ctx * sizeof *e->scratch);
    rc = CK_ENOMEM;
    if (!e->tok || !e->pos || !e->seqix || !e->out_row || !e->views || !e->batch || !e->cand ||
        !e->logits || !e->scratch || ensure_pend(e, 2 * c.max_running + 64))
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
        release_run(e, r);
        free_req(e, r);
    }
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
    free(e->scratch);
    free(e->pend);
    free(e);
}

/* ============================================================ eng_submit */

int eng_submit(eng *e, const eng_request *q, uint64_t *id, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    err[0] = 0;
    if (!e || !q || !id) {
        snprintf(err, errlen, "NULL argument");
        return CK_EINVAL;
    }
    if (e->waitq.n >= e->c.max_queue) {
        snprintf(err, errlen, "the waiting queue is full (%d)", e->c.max_queue);
        return CK_EBUSY;
    }
    /* The prompt. */
    int n = 0, rc;
    if (q->prompt) {
        rc = tok_encode(e->m->tok, q->prompt, q->prompt_len, 1, e->scratch, e->max_ctx, &n);
        if (rc == CK_ETOOLONG) {
            snprintf(err, errlen, "the prompt is %d tokens; the context holds %d", n, e->max_ctx);
            return rc;
        }
        if (rc) {
            snprintf(err, errlen, "cannot tokenize the prompt: %s", ck_strerror(rc));
            return rc;
        }
    } else {
        if (!q->tokens || q->n_tokens <= 0) {
            snprintf(err, errlen, "no prompt");
            return CK_EINVAL;
        }
        if (q->n_tokens >= e->max_ctx) {
            snprintf(err, errlen, "the prompt is %d tokens; the context holds %d", q->n_tokens, e->max_ctx);
            return CK_ETOOLONG;
        }
        for (int i = 0; i < q->n_tokens; i++) {
            if (q->tokens[i] < 0 || q->tokens[i] >= e->vocab) {
                snprintf(err, errlen, "token %d at %d is outside the vocabulary (%d)", q->tokens[i], i, e->vocab);
                return CK_EINVAL;
            }
        }
        memcpy(e->scratch, q->tokens, (size_t)q->n_tokens * sizeof *e->scratch);
        n = q->n_tokens;
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
    r->commit = commit_blocks(e, r);
    if (!rc && r->commit > e->pool.n_blocks) {
        snprintf(err, errlen, "the request needs %d KV blocks hot; the pool has %d", r->commit,
                 e->pool.n_blocks);
        rc = CK_ENOSPACE;
    }
    if (rc) {
        free(r->hist);
        free(r->trace);
        free(r->text);
        for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
        free(r);
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
    sched_push(&e->waitq, &r->se); /* cannot fail: checked above */
    r->state = REQ_WAITING;
    r->next = e->all;
    if (e->all) e->all->prev = r;
    e->all = r;
    if (r->deadline_ms) e->n_deadlines++;
    e->st.submitted++;
    *id = r->id;
    return CK_OK;
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
    if (!w->started) return ceil_div(n, e->bs);
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
        int pending = w->n_hist - (w->started ? w->seq.n_tokens : 0);
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
static void on_logits(eng *e, req *r, float *logits) {
    int rc;
    if (!r->prefill_done) {
        r->prefill_done = 1;
        if ((rc = kvpol_after_prefill(r->pol, &r->seq))) {
            fail_req(e, r, rc);
            return;
        }
        e->committed -= r->commit; /* the prompt is in: the steady commitment */
        r->commit = commit_blocks(e, r);
        e->committed += r->commit;
    }
    samp_conf conf;
    samp_confidence(logits, e->vocab, &conf, NULL);
    /* An uncertain step under a reduced cache runs again with recalled blocks. */
    if (!r->retrying && kvpol_retry(r->pol, &r->seq, &conf) > 0) {
        r->seq.n_tokens--; /* rewrite the last position's KV in the next step */
        r->retrying = 1;
        return;
    }
    r->retrying = 0;
    int32_t next = samp_sample(r->sm, logits, r->hist, r->n_hist);
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
    if (!r->ignore_eos && (next == tok_eos(tk) || (e->m->stop_on_bos && next == tok_bos(tk)))) {
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
        tier_poll(e->warm);
        if (e->warm8) tier_poll(e->warm8);
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
    /* 5. Tokens. */
    for (int k = 0, row = 0; k < ns; k++) {
        req *r = e->batch[k];
        int ends = r->seq.n_tokens + r->step_n == r->n_hist;
        kv_seq_commit(&r->seq, r->step_n);
        r->step_n = 0;
        if (ends) on_logits(e, r, e->logits + (size_t)row++ * e->vocab);
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
    if (e->runq.n == 0 && e->waitq.n == 0) return CK_OK;
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
    return e->runq.n == 0 && e->waitq.n == 0 && e->pend_head == e->pend_n;
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
}
