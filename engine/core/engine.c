/* engine.c - the engine: its public API, the batched step, events
 * (engine.h). The rest of the engine's centre is in files of its own:
 *   rq.c    submit-time checks (each rejection with its ENG_REJECT_*
 *                reason), tokenization, session/template/prefix resolution;
 *   scheduler.c  who runs: admission, ordering, preemption choices;
 *   kvm.c      where blocks go: commitments, placement, park/resume,
 *                prefix blocks in and out, the pools, tiers and movers;
 *   mv.c      moves blocks as a policy's plan says (kvpol.c decides);
 *   eng_memory.c the configuration defaults and the memory plan;
 *   pipeline.c   a sequence's logits to its next token, text and stop.
 * eng_int.h has the request and engine structs they share.
 *
 * A running sequence's tokens are hist[0, n_hist): the prompt, then every
 * sampled token. Positions [0, seq.n_tokens) have KV; the rest are pending.
 * One pending token is a decode step; more are a prefill chunk (the prompt,
 * or the whole history again after a recomputation). A step ending at n_hist
 * yields logits, from which the next token is sampled. A retry (kvpol_retry)
 * just rewinds seq.n_tokens by one, so the last token is pending again.
 *
 * A step (iterate):
 *   1. expire requests past their deadline (sched_expire);
 *   2. running sequences, best first: one decode token each, then prefill
 *      chunks, placing their KV (sched_place_running: shrink sequences whose
 *      policy allows it, then preempt the worst running sequence);
 *   3. admit waiting requests, best first, while their commitment fits
 *      (sched_admit);
 *   4. one forward pass over everything placed;
 *   5. per sequence with logits: the token pipeline, events (on_logits).
 * Steps 1-3 and the batch assembly are the scheduling time in eng_stats. */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "ck_err.h"
#include "eng_int.h"
#include "kv.h"
#include "pipeline.h"
#include "pfx.h"
#include "scheduler.h"
#include "tb.h"
#include "tier.h"
#include "tokenizer.h"
#include "tuner.h"

/* Logits (rows x vocabulary) above which a step's confidence passes are
 * split between threads: about 100 us of work, four times what waking a
 * thread costs under OMP_WAIT_POLICY=passive. */
#define CONF_PAR_MIN ((size_t)1 << 17)

int64_t eng_now_ms(void) { return (int64_t)now_ms(); }
const model *eng_model(const eng *e) { return e->m; }
const eng_memory *eng_get_memory(const eng *e) { return &e->mem; }
int eng_max_context(const eng *e) { return e->max_ctx; }

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
            o->reason = p->reason;
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
void eng__free_loose(req *r) {
    free(r->hist);
    free(r->session);
    free(r->tpl);
    free(r->cont);
    free(r->bhash);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r);
}

static void free_req(eng *e, req *r) {
    if (r->prev)
        r->prev->next = r->next;
    else
        e->all = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r->text);
    free(r->trace);
    eng__free_loose(r);
}

/* Give back everything a started request holds: KV (hot, int8, warm),
 * policy, sampler. Safe on a request that never started. */
static void release_run(eng *e, req *r) {
    if (!r->started) return;
    kvm_release(&e->kv, r->pol, &r->seq, 1);
    if (r->pol) {
        r->pst = *kvpol_get_stats(r->pol);
        e->st.window_grows += r->pst.budget_grows;
        e->st.window_shrinks += r->pst.budget_shrinks;
        e->st.breaker_trips += r->pst.breaker_trips;
        e->st.reruns += r->pst.retries;
        e->st.recalls += r->pst.recalls;
        e->st.demotions += r->pst.demotions;
        kvpol_free(r->pol);
        r->pol = NULL;
    }
    kv_seq_free(&r->seq);
    samp_free(r->sm);
    r->sm = NULL;
    free(r->moved);
    r->moved = NULL;
    r->started = 0;
}

/* The first admission: block table, policy, sampler. */
int eng__start_run(eng *e, req *r) {
    int rc;
    e->next_owner = (e->next_owner + 1) & 0x3fffffff;
    if ((rc = kv_seq_init(&r->seq, e->next_owner, e->max_ctx, e->bs))) return rc;
    r->started = 1;
    r->moved = calloc((size_t)r->seq.max_blocks, 1);
    if (!r->moved) return CK_ENOMEM;
    if ((rc = kvm_policy_new(&e->kv, &r->pc, &r->pol))) return rc;
    if ((rc = samp_new(e->vocab, &r->samp, &r->sm))) return rc;
    kvpol_begin(r->pol, &r->seq);
    /* The prefix cache's blocks, copied in (admit reserved room for them). */
    if (e->pfx && (rc = kvm_attach_prefix(&e->kv, e->pfx, &r->seq, r->bhash, r->pfx_blocks))) return rc;
    r->cached = r->exact = r->seq.n_tokens;
    e->st.cached_tokens += (uint64_t)r->cached;
    return CK_OK;
}

/* Put r's exact full hot blocks among its first `upto` positions into the
 * prefix cache (flags: PFX_PIN, PFX_PERSIST). Best effort: a block that
 * cannot be read or kept is skipped. */
static void publish(eng *e, req *r, int upto, int flags) {
    if (!e->pfx || !r->started) return;
    if (upto > r->exact) upto = r->exact;
    if (upto > r->seq.n_tokens) upto = r->seq.n_tokens;
    int nb = upto / e->bs;
    kvm_publish(&e->kv, e->pfx, &r->seq, rq_block_names(e, r, nb), nb, flags);
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
        eng__slot_give(e, r);
    } else if (r->state == REQ_WAITING) {
        sched_remove(&e->waitq, &r->se);
    }
    if (r->deadline_ms) e->n_deadlines--;
    r->step_n = 0;
}

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
void eng__finish(eng *e, req *r, int reason) {
    if (r->internal) return end_internal(e, r, reason);
    if (r->session && (reason == GEN_FINISH_STOP || reason == GEN_FINISH_LENGTH) && e->sess) {
        /* The conversation so far, for the next turn: tokens, and KV in the
         * prefix cache and the cold store (idle sessions live there). */
        publish(e, r, r->n_hist, PFX_PERSIST);
        if (!sess_save(e->sess, r->session, r->hist, r->n_hist)) e->st.sessions_saved++;
        if (r->exact < r->n_hist - 1) rq_settle(e, r);
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
    o->warnings = r->warnings;
    kvpol_name(&r->pc, o->policy, sizeof o->policy);
    pend *p = push_pend(e, ENG_EV_FINISHED, r);
    p->off = r->emitted; /* what was held back */
    p->len = r->text_len - r->emitted;
    r->emitted = r->text_len;
    e->st.finished++;
    if (reason == ENG_FINISH_EXPIRED) e->st.expired++;
    if (reason == ENG_FINISH_CANCELLED) e->st.cancelled++;
}

/* End a request with an ERROR event (it is gone; no FINISHED follows). */
void eng__fail(eng *e, req *r, int error) {
    if (r->internal) return end_internal(e, r, -1);
    take_out(e, r);
    release_run(e, r);
    r->state = REQ_DONE;
    pend *p = push_pend(e, ENG_EV_ERROR, r);
    p->error = error;
    p->reason = r->reason ? r->reason : ENG_REJECT_ENGINE;
    e->st.failed++;
}

void eng__fail_unqueued(eng *e, req *r, int error) {
    r->state = REQ_DONE; /* out of the queue already */
    if (r->deadline_ms) e->n_deadlines--;
    release_run(e, r);
    pend *p = push_pend(e, ENG_EV_ERROR, r);
    p->error = error;
    p->reason = ENG_REJECT_ENGINE;
    e->st.failed++;
}

/* The same with a message of its own (kept in the request's text buffer,
 * which an erroring request does not otherwise use). */
static void fail_req_msg(eng *e, req *r, int error, int reason, const char *msg) {
    r->text_len = 0;
    if (tb_append(&r->text, &r->text_len, &r->text_cap, msg, strlen(msg))) r->text_len = 0;
    r->has_msg = 1;
    r->reason = reason;
    fail_req(e, r, error);
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
    int rc = eng__config_resolve(&c, err, errlen);
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
    if ((rc = eng__plan(&c, e->m, &e->mem, &pu, err, errlen))) goto fail;
    e->max_ctx = e->mem.max_ctx;
    e->vocab = mc->vocab_size;
    e->bs = pu.bs;
    e->c.block_size = e->bs;
    e->block_bytes = pu.block_bytes;
    size_t n_blocks = pu.n_blocks;
    if (model_state_floats(mc)) {
        const arch_info *ai = arch_by_id(mc->arch);
        e->hybrid = ai ? ai->name : "?";
    }
    be_options bo = {.max_batch_tokens = c.max_batch_tokens,
                     .n_kv_blocks = (int)n_blocks,
                     .block_size = e->bs,
                     .n_threads = c.threads,
                     .max_ctx = e->max_ctx,
                     .n_kv8_blocks = (int)n_blocks,
                     .n_state_slots = c.max_running};
    if ((rc = be_new(c.backend, e->m, &bo, &e->b, err, errlen))) goto fail;
    kvm_config kc = {.b = e->b,
                     .n_blocks = (int)n_blocks,
                     .block_size = e->bs,
                     .warm_budget_bytes = c.warm_budget_bytes,
                     .cold = c.cold,
                     .instance = (uint64_t)(uintptr_t)e << 1,
                     .staging_bytes = ENG_STAGING_BYTES};
    if ((rc = kvm_init(&e->kv, &kc, err, errlen))) goto fail;
    e->c.warm_budget_bytes = e->kv.warm_budget_bytes;
    tier_config tc;
    tier_config_default(&tc, e->b);
    /* a prefix's KV without the state after it is no start for a hybrid
     * model's sequence: no prefix cache (eng__plan counts none either) */
    if (!c.prefix_cache_off && !e->hybrid) {
        pfx_config pc = {.shape = tc.shape,
                         .budget_bytes =
                             c.prefix_cache_bytes ? c.prefix_cache_bytes : n_blocks * e->block_bytes,
                         .fingerprint = e->m->fingerprint,
                         .cold = c.cold,
                         .promote_hits = c.promote_hits < 0 ? 0
                                         : c.promote_hits   ? c.promote_hits
                                                            : 4};
        if ((rc = pfx_new(&pc, &e->pfx))) {
            snprintf(err, errlen, "prefix cache: %s", ck_strerror(rc));
            goto fail;
        }
    }
    sess_config sc = {.max_sessions = c.max_sessions,
                      .max_tokens = e->max_ctx,
                      .vocab = e->vocab,
                      .fingerprint = e->m->fingerprint,
                      .cold = c.cold};
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
    rc = CK_ENOMEM;
    if (e->hybrid) {
        if (!(e->slot_free = malloc(R * sizeof *e->slot_free))) goto fail;
        for (int i = 0; i < c.max_running; i++) e->slot_free[e->n_slot_free++] = c.max_running - 1 - i;
    }
    if (!e->tok || !e->pos || !e->seqix || !e->out_row || !e->views || !e->batch || !e->cand || !e->logits ||
        !e->conf || !e->amax || !e->scratch || ensure_pend(e, 2 * c.max_running + 64))
        goto fail;
    e->st.hot_blocks = (int)n_blocks;
    e->st.hot_capacity_bytes = n_blocks * e->block_bytes;
    /* The tuner's reservoir exists whether tuning is on or not, so a reload
     * can turn it on without allocating. */
    tuner_config tuc;
    tuner_config_default(&tuc);
    double th[TUNER_N] = {c.policy.entropy_threshold, c.policy.prob_gap_threshold,
                          c.policy.max_prob_threshold};
    if ((rc = tuner_init(&e->tun, &tuc, th, log((double)e->vocab) / log(32000.0), ENG_TUNE_SAMPLES,
                         now_ms() / 1e3)))
        goto fail;
    if ((rc = eng__tune_configure(e, c.tuning, c.tuning_window_s, c.tuning_target, err, errlen))) goto fail;
    /* last: a chat_template override that fails is reported after the model's own errors */
    if ((rc = rq_client_init(e, cfg, err, errlen))) goto fail;
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
    tuner_free(&e->tun);
    rq_client_free(e); /* before model_free: the chat template borrows the tokenizer */
    pfx_free(e->pfx);
    free(e->slot_free);
    sess_free(e->sess);
    tpl_cache_free(e->tpl);
    kvm_free(&e->kv);
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

int eng_submit(eng *e, const eng_request *q, uint64_t *id, char *err, size_t errlen) {
    return eng_submit_why(e, q, id, NULL, err, errlen);
}

int eng_submit_why(eng *e, const eng_request *q, uint64_t *id, int *reason, char *err, size_t errlen) {
    char dummy[8];
    int why;
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    if (!reason) reason = &why;
    err[0] = 0;
    *reason = ENG_REJECT_NONE;
    if (!e || !q || !id) {
        snprintf(err, errlen, "NULL argument");
        *reason = ENG_REJECT_INVALID;
        return CK_EINVAL;
    }
    req *r = NULL;
    int rc = rq_build(e, q, &r, reason, err, errlen);
    if (rc) goto err;
    r->id = e->next_id++;
    r->t_arrival = now_ms();
    r->se.priority = q->priority;
    r->se.arrival_ms = r->t_arrival;
    r->se.order = e->next_order++;
    rc = rq_resolve(e, r, reason, err, errlen);
    if (rc < 0) goto err;
    if (rc) {
        sched_push(&e->waitq, &r->se); /* cannot fail: checked in rq_build */
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
err:
    if (r) {
        free(r->trace);
        free(r->text);
        eng__free_loose(r);
    }
    if (!*reason) *reason = ENG_REJECT_ENGINE;
    if (!err[0]) snprintf(err, errlen, "%s", ck_strerror(rc));
    return rc;
}

/* ============================================================ scheduling */

int eng__slot_take(eng *e, req *r) {
    if (!e->hybrid || r->state_slot >= 0) return CK_OK;
    if (!e->n_slot_free) return CK_EBUSY;
    r->state_slot = e->slot_free[--e->n_slot_free];
    return CK_OK;
}

void eng__slot_give(eng *e, req *r) {
    if (r->state_slot < 0) return;
    e->slot_free[e->n_slot_free++] = r->state_slot;
    r->state_slot = -1;
}

void eng__recompute_reset(eng *e, req *r) {
    kvm_release(&e->kv, r->pol, &r->seq, 1);
    memset(r->moved, 0, (size_t)r->seq.max_blocks);
    r->swapped = 0;
    r->prefill_done = 0;
    r->exact = 0;
}

/* ========================================================= after forward */

/* A TOKEN event for the token the pipeline appended, with the text it released. */
static void emit_token(eng *e, req *r, const pipeline_out *o) {
    pend *p = push_pend(e, ENG_EV_TOKEN, r);
    p->token = o->token;
    p->conf = o->conf;
    p->off = o->off;
    p->len = o->len;
}

/* The logits of r's last pending token: after the prefill's own work, the
 * token pipeline (pipeline.h) gives the next token, its text and the stop
 * decision, as it does for gen_run. amax: the row's argmax from its
 * confidence pass (-1: the pass failed), the token of a plain greedy
 * request without a second pass over the logits. */
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
    /* The token pipeline (pipeline.h) over r's own fields, which keep their
     * names because the rest of this file reads them: handed over here,
     * taken back below, whatever pipeline_token answers. */
    const pipeline_rules ru = {.m = e->m,
                               .b = e->b,
                               .limit = r->limit,
                               .max_ctx = e->max_ctx,
                               .n_stop = r->n_stop,
                               .stop = (const char *const *)r->stop,
                               .ignore_eos = r->ignore_eos};
    pipeline_seq ps = {.seq = &r->seq,
                       .pol = r->pol,
                       .sm = r->sm,
                       .hist = r->hist,
                       .n_prompt = r->n_prompt,
                       .n_hist = r->n_hist,
                       .text = r->text,
                       .text_len = r->text_len,
                       .text_cap = r->text_cap,
                       .emitted = r->emitted,
                       .trace = r->want_trace ? r->trace : NULL,
                       .retrying = r->retrying,
                       .st = {.n_steps = r->n_steps,
                              .sum_entropy = r->sum_h,
                              .sum_gap = r->sum_gap,
                              .sum_pmax = r->sum_pmax,
                              .hot_token_steps = r->hot_steps,
                              .full_token_steps = r->full_steps,
                              .hot_peak_bytes = r->hot_peak}};
    pipeline_out o;
    rc = pipeline_token(&ru, &ps, logits, row_conf, amax, &o);
    if (ps.st.n_steps > r->n_steps && r->t_first <= 0) r->t_first = now_ms();
    e->st.tokens_generated += (uint64_t)(ps.n_hist - r->n_hist);
    e->st.hot_lookups += ps.st.hot_lookups;
    e->st.hot_hits += ps.st.hot_hits;
    r->n_hist = ps.n_hist;
    r->text = ps.text;
    r->text_len = ps.text_len;
    r->text_cap = ps.text_cap;
    r->emitted = ps.emitted;
    r->retrying = ps.retrying;
    r->n_steps = ps.st.n_steps;
    r->sum_h = ps.st.sum_entropy;
    r->sum_gap = ps.st.sum_gap;
    r->sum_pmax = ps.st.sum_pmax;
    r->hot_steps = ps.st.hot_token_steps;
    r->full_steps = ps.st.full_token_steps;
    r->hot_peak = ps.st.hot_peak_bytes;
    if (rc) {
        fail_req(e, r, rc);
        return;
    }
    if (o.action == PIPELINE_RETRY) {
        /* the last position's KV is rewritten in the next step */
        if (r->exact > r->seq.n_tokens) r->exact = r->seq.n_tokens;
        return;
    }
    if (o.appended) emit_token(e, r, &o);
    if (o.action == PIPELINE_END) finish_req(e, r, o.finish); /* the held-back text goes with the end */
}

/* ================================================================ a step */

static int iterate(eng *e) {
    double t0 = now_ms();
    e->stamp++;
    /* Room for this step's events: a token and an end per request at most. */
    if (ensure_pend(e, 2 * (e->runq.n + e->waitq.n) + 8)) return CK_ENOMEM;
    sched_expire(e);
    if (e->c.cold)
        cold_poll(e->c.cold); /* one poll of the shared store answers every tier, prefix and session */
    /* Requests whose cold-store answers are in join the queue. */
    for (req *r = e->resolving, *nx; r; r = nx) {
        nx = r->res_next;
        char msg[160];
        int reason = ENG_REJECT_NONE;
        int rc = rq_resolve(e, r, &reason, msg, sizeof msg);
        if (rc == 0) continue;
        if (rc < 0) {
            fail_req_msg(e, r, rc, reason, msg);
            continue;
        }
        take_out(e, r);
        sched_push(&e->waitq, &r->se);
        r->state = REQ_WAITING;
        if (r->deadline_ms) e->n_deadlines++; /* take_out counted it off */
    }
    /* 1. Running sequences, best first: decode tokens, then prefill chunks. */
    sched_place_running(e);
    /* 2. Admission. */
    sched_admit(e);
    /* 3. The batch. */
    int nt = 0, ns = 0, n_out = 0;
    for (int k = 0; k < e->runq.n; k++) {
        req *r = (req *)sched_rank(&e->runq, k);
        if (!r->step_n) continue;
        kv_seq *s = &r->seq;
        e->views[ns] = (be_seq_view){.blocks = s->hot,
                                     .n_blocks = s->n_blocks,
                                     .blocks8 = s->n_hot8 ? s->hot8 : NULL,
                                     .mass = s->mass,
                                     .state = r->state_slot >= 0 ? r->state_slot : 0};
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
    size_t hot = kvm_hot_bytes(&e->kv);
    if (hot > e->st.hot_peak_bytes) e->st.hot_peak_bytes = hot;
    if (e->runq.n > e->st.running_peak) e->st.running_peak = e->runq.n;
    double t1 = now_ms();
    /* 4. Forward. */
    if (nt > 0) {
        be_batch bt = {.n_tokens = nt,
                       .token = e->tok,
                       .pos = e->pos,
                       .seq = e->seqix,
                       .out_row = e->out_row,
                       .n_seqs = ns,
                       .seqs = e->views,
                       .n_out = n_out};
        int rc = e->b->ops->forward(e->b, &bt, e->logits);
        if (rc) return rc == CK_EBACKEND ? rc : CK_EBACKEND;
    }
    double t2 = now_ms();
    /* 5. Tokens. First every row's confidence: the pass reads a whole row of
     * logits and touches nothing else, so rows are split between the
     * backend's threads when there is enough of them (on a 32000-entry
     * vocabulary it is a tenth of a batch-32 step on one thread alone);
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
            /* the load's signals, for the default policy's thresholds
             * (engine work of the engine's own requests excluded) */
            if (e->tuning && !r->internal && e->amax[row] >= 0)
                tuner_observe(&e->tun, e->conf[row].entropy, e->conf[row].gap, e->conf[row].pmax);
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
    if (e->tuning) eng__tune_tick(e);
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
        int left =
            (e->pfx ? pfx_in_flight(e->pfx) : 0) + sess_in_flight(e->sess) + tpl_cache_in_flight(e->tpl);
        if (!left) return CK_OK;
        if (now_ms() >= end || !e->c.cold) return CK_EBUSY;
        cold_poll(e->c.cold);
        struct timespec ms = {0, 500000};
        nanosleep(&ms, NULL);
    }
}
