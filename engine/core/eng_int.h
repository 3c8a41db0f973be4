/* eng_int.h - the engine's internals, shared by its own files: engine.c
 * (the public API, the step, events), rq.c (a request's resolution and
 * submit-time checks) and scheduler.c (admission, ordering, preemption).
 * Not for the service: it includes engine.h only.
 *
 * A request lives in one heap struct from eng_submit until its FINISHED (or
 * ERROR) event has been delivered and the next eng_step begins; the struct
 * never moves, because the warm tier keeps pointers to its kv_seq. */
#ifndef CK_ENG_INT_H
#define CK_ENG_INT_H
#include <time.h>

#include "chat.h"
#include "engine.h"
#include "gen.h"
#include "kv.h"
#include "kvm.h"
#include "model.h"
#include "kvpol.h"
#include "tuner.h"
#include "pfx.h"
#include "samp.h"
#include "scheduler.h"
#include "sess.h"
#include "tpl.h"

/* RESOLVING: waiting for the cold store (its session, its prefix blocks)
 * before it can join the queue; on eng.resolving, not in a queue. */
enum { REQ_WAITING = 1, REQ_RUNNING = 2, REQ_DONE = 3, REQ_RESOLVING = 4 };
enum { RES_SESSION = 1, RES_TEMPLATE = 2, RES_PREFIX = 3 };

typedef struct req req;
struct req {
    sched_entry se;   /* first: a sched_entry * in a queue is a req * */
    req *prev, *next; /* every live request (eng.all) */
    req *zombie_next; /* delivered last event: freed at the next eng_step */
    req *res_next;    /* eng.resolving */
    uint64_t id, user_tag;
    int state; /* REQ_* */
    /* the request, copied */
    int32_t *hist; /* (n_prompt + limit) the prompt, then the completion */
    int n_prompt, n_hist, limit;
    samp_params samp;
    int n_stop;
    char *stop[GEN_MAX_STOPS];
    int ignore_eos, want_trace;
    kvpol_config pc;
    int64_t deadline_ms;
    /* prefixes and sessions */
    char *session;          /* session id, or NULL */
    char *tpl;              /* template name to resolve, or NULL */
    int32_t *cont;          /* (n_cont) the prompt as a continuation (no BOS) */
    int n_cont, max_tokens; /* max_tokens as asked (0 = up to the context) */
    int stage, pending;     /* RES_* while resolving; cold answers awaited */
    int fetched_session, fetched_tpl, fetched_prefix, has_prefix; /* asked the cold store; prefix given */
    int has_msg;                                                  /* an ERROR event's message is in text */
    int reason;   /* ENG_REJECT_* of its ERROR event (0: ENG_REJECT_ENGINE) */
    int internal; /* the engine's own (a session's settling): no events */
    int prefill_only, keep_prefix;
    int n_keep;      /* leading tokens whose blocks are pinned and persisted (a template) */
    int n_session;   /* tokens of hist that are the session's context */
    uint64_t *bhash; /* (max_ctx / bs + 1) prefix names of hist's blocks */
    int n_bhash;     /* computed so far */
    int pfx_blocks;  /* leading blocks the prefix cache had at resolution */
    int cached;      /* tokens copied from the prefix cache */
    int exact;       /* positions whose KV saw every earlier block hot (f32) */
    int step_exact;  /* this step reads every block hot */
    int commit;      /* pool blocks counted for it while running */
    /* run state, from its first admission to its end */
    int started;
    kv_seq seq;
    kvpol *pol;
    sampler *sm;
    uint8_t *moved;        /* (seq.max_blocks) blocks a preemption parked warm */
    int swapped;           /* preempted, blocks warm: resume instead of recompute */
    int prefill_done;      /* kvpol_after_prefill ran for the current KV */
    int retrying;          /* the pending token is a rerun: no retry check again */
    int step_n;            /* tokens it has in the step being built */
    uint64_t shrink_stamp; /* step at which room() last shrank it */
    int state_slot;        /* its recurrent state slot while running (a hybrid model): taken at
                              admission, given back when it leaves the running queue; -1 */
    /* results */
    char *text;
    size_t text_len, text_cap, emitted; /* emitted: bytes released in events */
    samp_conf *trace;                   /* (limit) when want_trace */
    int n_steps;                        /* sampling steps (the EOS one included) */
    double sum_h, sum_gap, sum_pmax;
    double hot_steps, full_steps;
    size_t hot_peak;
    kvpol_stats pst; /* the policy's, kept when it is freed */
    uint64_t preemptions;
    double t_arrival, t_admit, t_first, t_finish; /* ms, engine clock */
    eng_result res;
    int warnings; /* ENG_WARN_* bits of the client form (the chat's rendering), for res */
};

typedef struct pend {
    int type; /* ENG_EV_* */
    req *r;
    int32_t token;
    samp_conf conf;
    size_t off, len;   /* piece: r->text + off, at delivery time */
    int error, reason; /* ENG_EV_ERROR: CK_E*, ENG_REJECT_* */
} pend;

/* eng_tune.c: tuning on/off from the default policy's thresholds now
 * (allocates nothing), and a step's end: a closed window's moves. */
struct eng;
int eng__tune_configure(struct eng *e, int on, double window_s, double target, char *err, size_t errlen);
void eng__tune_tick(struct eng *e);

#define ENG_TUNE_SAMPLES 4096 /* the tuner's reservoir: steps kept per window */
#define ENG_TUNE_RING 16      /* moves kept for eng_take_tune_moves */

struct eng {
    eng_config c;
    model *m;
    backend *b;
    kvm kv;                 /* the KV manager: pools, tiers, movers (kvm.h) */
    int bs, max_ctx, vocab; /* max_ctx: the planned context (eng_fit_context), <= seq_len */
    size_t block_bytes;     /* one f32 block */
    eng_memory mem;         /* the plan eng_new followed */
    sched_queue waitq, runq;
    int committed; /* sum of the running requests' commitments */
    req *all;
    /* the step being built: sized at eng_new */
    int32_t *tok, *pos, *seqix, *out_row; /* (max_batch_tokens) */
    be_seq_view *views;                   /* (max_running) */
    req **batch;                          /* (max_running) sequences in the step */
    req **cand;                           /* (max_running) the running set, best first */
    float *logits;                        /* (max_running, vocab) */
    samp_conf *conf;                      /* (max_running) each logits row's confidence */
    int32_t *amax;                        /* (max_running) each row's argmax, -1 when its confidence failed */
    int32_t *scratch;                     /* (max_ctx) prompt ids at submit */
    /* The client form (rq.c): */
    int32_t *client_ids;  /* (max_ctx) its prompt ids */
    chat_template *chat;  /* for `messages`; NULL when the model's does not parse */
    jinja_error chat_err; /* why, when chat is NULL */
    eng_prompt_format pf; /* eng_get_prompt_format */
    int left;             /* tokens still free in the step */
    uint64_t stamp;       /* step counter */
    /* events not yet delivered: pend[pend_head, pend_n) */
    pend *pend;
    int pend_head, pend_n, pend_cap;
    req *zombies;
    uint64_t next_id, next_order;
    int next_owner; /* labels pool blocks (kv_pool.owner) */
    /* A model whose layers keep a recurrent state (model_state_floats > 0,
     * lfm2): one backend state slot a running sequence, max_running of
     * them. What the state cannot follow is refused or off (rq.c, eng_new,
     * scheduler.c's preempt): docs/ARCHITECTURE.md, Recurrent state. */
    const char *hybrid; /* the architecture's name when it is such a model; NULL */
    int32_t *slot_free; /* (max_running) the free slots, a stack */
    int n_slot_free;
    int n_deadlines; /* live requests with a deadline */
    int broken;      /* CK_EBACKEND once the backend failed */
    pfx *pfx;        /* prefix cache, NULL when off */
    sess_store *sess;
    tpl_cache *tpl;
    req *resolving; /* REQ_RESOLVING requests */
    int n_resolving;
    eng_stats st;
    /* The default policy's thresholds under the load (tuner.h, eng_set_defaults) */
    tuner tun;
    int tuning;                         /* 1: the tuner moves e->c.policy's thresholds */
    eng_tune_move moves[ENG_TUNE_RING]; /* not yet taken by eng_take_tune_moves */
    int n_moves;
};

static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* Pool blocks a request may hold at most once its policy has settled (see
 * engine.h, Scheduling); the whole prompt while it is being prefilled. The
 * KV manager answers from the policy's steady need. */
static inline int commit_blocks(const eng *e, const req *r) {
    return kvm_commitment(&e->kv, &r->pc, r->n_prompt, r->limit, r->n_hist, r->prefill_done);
}

/* Staging of a KV mover's batch, at most (mv.h). */
#define ENG_STAGING_BYTES ((size_t)8 << 20)

/* ------------------------------------------------------------ eng_memory.c */

/* What eng_new builds for one context: its backend options, then tiers. */
typedef struct eng_plan_ud {
    const eng_config *c;
    const model *m;
    int bs;
    size_t n_blocks, block_bytes;
} eng_plan_ud;
/* Defaults filled in (eng_config_default's), ranges checked. */
int eng__config_resolve(eng_config *c, char *err, size_t errlen);
/* The plan, and the pool geometry eng_new builds with (u). */
int eng__plan(const eng_config *c, const model *m, eng_memory *p, eng_plan_ud *u, char *err, size_t errlen);

/* ------------------------------------------------ engine.c, for the others */

/* End a request with a FINISHED event (reason GEN_FINISH_* or ENG_FINISH_*). */
void eng__finish(eng *e, req *r, int reason);
/* End a request with an ERROR event (it is gone; no FINISHED follows). */
void eng__fail(eng *e, req *r, int error);
/* The same for one already out of every queue (admission failed). */
void eng__fail_unqueued(eng *e, req *r, int error);
/* The first admission: block table, policy, sampler, prefix blocks. */
int eng__start_run(eng *e, req *r);
/* Reset a sequence to be computed again from hist[0]. */
void eng__recompute_reset(eng *e, req *r);
/* A hybrid model's state slot for r as it becomes running: 0, or CK_EBUSY
 * when none is free (it waits). Giving it back is a no-op without one.
 * A no-op (0) for any other model. */
int eng__slot_take(eng *e, req *r);
void eng__slot_give(eng *e, req *r);
/* Free a request that never joined the engine's lists, all of it. */
void eng__free_loose(req *r);
static inline void finish_req(eng *e, req *r, int reason) { eng__finish(e, r, reason); }
static inline void fail_req(eng *e, req *r, int error) { eng__fail(e, r, error); }

/* ------------------------------------------------------------ rq.c */

/* Check q and build its request (not yet in any list): tokens, limits,
 * stop strings, policy, session/template names. Returns 0 with *out, or a
 * CK_E* code with err and *reason (ENG_REJECT_*) filled; *out is then NULL
 * or a partial request for the caller to free (its text and trace, then
 * eng__free_loose). */
int rq_build(eng *e, const eng_request *q, req **out, int *reason, char *err, size_t errlen);
/* Move r toward the queue (its session, template and prefix blocks).
 * Returns 1 ready, 0 waiting for the cold store, or CK_E* with err and
 * *reason (ENG_REJECT_*). */
int rq_resolve(eng *e, req *r, int *reason, char *err, size_t errlen);
/* At eng_new, once the model is loaded: the chat template (c->chat_template,
 * else the model's) and the client form's buffer. 0, or CK_E* with err (an
 * override that cannot be read or parsed). rq_client_free undoes it (safe
 * on a zeroed engine). */
int rq_client_init(eng *e, const eng_config *c, char *err, size_t errlen);
void rq_client_free(eng *e);
/* Names of hist's first n blocks (computed once, extended on demand). */
const uint64_t *rq_block_names(eng *e, req *r, int n);
/* A session turn computed under a reduced cache: recompute its KV once with
 * the full cache, as an internal request (rq.c says why). */
void rq_settle(eng *e, const req *r);

/* ---------------------------------------------------------- scheduler.c */

/* Expire requests past their deadline. */
void sched_expire(eng *e);
/* Running sequences, best first: a decode token each, then prefill chunks. */
void sched_place_running(eng *e);
/* Admit waiting requests, best first, while their commitments fit. */
void sched_admit(eng *e);

#endif
