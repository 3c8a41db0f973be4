/* gen.c - one sequence, prefill then decode (gen.h). */
#include "gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "policy.h"
#include "textbuf.h"

struct gen_ctx {
    const model *m;
    backend *b;
    kv_pool *pool;
    kvpol *pol;      /* borrowed, may be NULL */
    kv_seq seq;
    sampler *samp;
    float *logits;   /* (vocab) */
    int32_t *pos;    /* (max_batch_tokens) batch arrays */
    int32_t *seqix;
    int32_t *out_row;
};

void gen_params_default(gen_params *p) {
    memset(p, 0, sizeof *p);
    samp_params_default(&p->samp);
    p->max_tokens = 256;
}

const char *gen_finish_name(int finish) {
    return finish == GEN_FINISH_STOP ? "stop" : "length";
}

void gen_result_free(gen_result *r) {
    free(r->tokens);
    free(r->trace);
    free(r->logp);
    free(r->argmax);
    free(r->text);
    memset(r, 0, sizeof *r);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int gen_new(const model *m, backend *b, kv_pool *pool, int seq_id, gen_ctx **out) {
    *out = NULL;
    gen_ctx *g = calloc(1, sizeof *g);
    if (!g) return CK_ENOMEM;
    g->m = m;
    g->b = b;
    g->pool = pool;
    int T = b->opt.max_batch_tokens, rc;
    if ((rc = kv_seq_init(&g->seq, seq_id, b->opt.max_ctx, b->opt.block_size))) goto fail;
    rc = CK_ENOMEM;
    g->logits = malloc((size_t)m->cfg.vocab_size * sizeof *g->logits);
    g->pos = malloc((size_t)T * sizeof *g->pos);
    g->seqix = calloc((size_t)T, sizeof *g->seqix);
    g->out_row = malloc((size_t)T * sizeof *g->out_row);
    if (!g->logits || !g->pos || !g->seqix || !g->out_row) goto fail;
    *out = g;
    return CK_OK;
fail:
    gen_free(g);
    return rc;
}

void gen_free(gen_ctx *g) {
    if (!g) return;
    if (g->pool) kv_seq_reset(&g->seq, g->pool);
    kv_seq_free(&g->seq);
    samp_free(g->samp);
    free(g->logits);
    free(g->pos);
    free(g->seqix);
    free(g->out_row);
    free(g);
}

void gen_set_policy(gen_ctx *g, kvpol *pol) { g->pol = pol; }

/* Forward n tokens of the sequence starting at its current end; logits of
 * the last one land in g->logits. */
static int step(gen_ctx *g, const int32_t *tokens, int n) {
    int rc = kv_seq_reserve(&g->seq, g->pool, n);
    if (rc == CK_ENOSPACE && g->pol) {
        /* The pool is shared: ask the policy to make room, then retry. */
        if ((rc = kvpol_make_room(g->pol, &g->seq, kv_seq_blocks_needed(&g->seq, n))) == 0)
            rc = kv_seq_reserve(&g->seq, g->pool, n);
    }
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        g->pos[i] = g->seq.n_tokens + i;
        g->out_row[i] = i == n - 1 ? 0 : -1;
    }
    be_seq_view v = {.blocks = g->seq.hot, .n_blocks = g->seq.n_blocks,
                     .blocks8 = g->seq.n_hot8 ? g->seq.hot8 : NULL, .mass = g->seq.mass};
    be_batch bt = {.n_tokens = n, .token = tokens, .pos = g->pos, .seq = g->seqix,
                   .out_row = g->out_row, .n_seqs = 1, .seqs = &v, .n_out = 1};
    rc = g->b->ops->forward(g->b, &bt, g->logits);
    if (rc) return rc;
    kv_seq_commit(&g->seq, n);
    return CK_OK;
}

static int grow(gen_result *r, int want_trace, int force) {
    size_t cap = r->cap_ ? r->cap_ * 2 : 64;
    int32_t *t = realloc(r->tokens, cap * sizeof *t);
    if (!t) return CK_ENOMEM;
    r->tokens = t;
    if (want_trace) {
        samp_conf *c = realloc(r->trace, cap * sizeof *c);
        if (!c) return CK_ENOMEM;
        r->trace = c;
    }
    if (force) {
        double *lp = realloc(r->logp, cap * sizeof *lp);
        if (!lp) return CK_ENOMEM;
        r->logp = lp;
        int32_t *am = realloc(r->argmax, cap * sizeof *am);
        if (!am) return CK_ENOMEM;
        r->argmax = am;
    }
    r->cap_ = cap;
    return CK_OK;
}

static double log_softmax_at(const float *x, int n, int k) {
    float mx = x[0];
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return (double)x[k] - mx - log(s);
}

int gen_run(gen_ctx *g, const int32_t *prompt, int n_prompt, const gen_params *p, gen_result *r) {
    memset(r, 0, sizeof *r);
    const model_config *c = &g->m->cfg;
    if (n_prompt <= 0 || !prompt) return CK_EINVAL;
    if (n_prompt >= g->b->opt.max_ctx) return CK_ETOOLONG;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size) return CK_EINVAL;
    /* A sampler per run: its parameters and seed are the request's. */
    sampler *sm = NULL;
    int rc = samp_new(c->vocab_size, &p->samp, &sm);
    if (rc) return rc;
    samp_free(g->samp);
    g->samp = sm;
    r->n_prompt = n_prompt;
    size_t text_cap = 0;
    if ((rc = tb_append(&r->text, &r->text_len, &text_cap, "", 0))) goto out;
    if (g->pol) kvpol_begin(g->pol, &g->seq);

    /* Prefill in chunks of the batch size; logits only for the last token. */
    double t0 = now_s();
    for (int i = 0; i < n_prompt;) {
        int n = n_prompt - i;
        if (n > g->b->opt.max_batch_tokens) n = g->b->opt.max_batch_tokens;
        if ((rc = step(g, prompt + i, n))) goto out;
        i += n;
    }
    if (g->pol && (rc = kvpol_after_prefill(g->pol, &g->seq))) goto out;
    double t1 = now_s();
    r->prefill_s = t1 - t0;

    int32_t prev = prompt[n_prompt - 1];
    const int32_t *hist = prompt; /* history for the repetition penalty */
    int32_t *histbuf = NULL;
    int limit = p->force ? p->n_force : p->max_tokens;
    histbuf = malloc(((size_t)n_prompt + (size_t)(limit > 0 ? limit : 0) + 1) * sizeof *histbuf);
    if (!histbuf) {
        rc = CK_ENOMEM;
        goto out;
    }
    memcpy(histbuf, prompt, (size_t)n_prompt * sizeof *histbuf);
    hist = histbuf;
    r->finish = GEN_FINISH_LENGTH;
    const int bs = g->b->opt.block_size;
    const double tok_f32 = (double)g->b->kv_block_floats * sizeof(float) / bs;
    const double tok_i8 = (double)g->b->kv8_block_bytes / bs;
    while (r->n_tokens < limit) {
        if ((size_t)r->n_tokens == r->cap_ && (rc = grow(r, p->want_trace, p->force != NULL)))
            break;
        samp_conf conf;
        int amax = 0;
        samp_confidence(g->logits, c->vocab_size, &conf, &amax);
        /* An uncertain step under a reduced cache may be worth running again
         * with the blocks the policy recalls for it (kvpol_retry). */
        if (g->pol && kvpol_retry(g->pol, &g->seq, &conf) > 0) {
            g->seq.n_tokens--; /* rewrite the last position's KV */
            if ((rc = step(g, &prev, 1))) break;
            samp_confidence(g->logits, c->vocab_size, &conf, &amax);
            r->retries++;
        }
        if (p->on_logits &&
            (rc = p->on_logits(p->on_logits_ud, r->n_tokens, g->logits, c->vocab_size)))
            break;
        int32_t next;
        if (p->force) {
            next = p->force[r->n_tokens];
            r->logp[r->n_tokens] = log_softmax_at(g->logits, c->vocab_size, next);
            r->argmax[r->n_tokens] = amax;
        } else {
            next = samp_sample(g->samp, g->logits, hist, n_prompt + r->n_tokens);
            if (next < 0) {
                rc = next;
                break;
            }
        }
        r->sum_entropy += conf.entropy;
        r->sum_gap += conf.gap;
        r->sum_pmax += conf.pmax;
        if (p->want_trace) r->trace[r->n_tokens] = conf;
        /* KV accounting for this step: what attention just read. */
        int hot = kv_seq_hot_tokens(&g->seq), full = g->seq.n_tokens;
        int hot8 = kv_seq_hot8_tokens(&g->seq);
        r->hot_token_steps += hot;
        r->full_token_steps += full;
        double hb = (double)(hot - hot8) * tok_f32 + (double)hot8 * tok_i8;
        r->hot_byte_steps += hb;
        r->full_byte_steps += (double)full * tok_f32;
        if (hb > (double)r->hot_peak_bytes) r->hot_peak_bytes = (size_t)hb;
        if (hot > r->hot_peak_tokens) r->hot_peak_tokens = hot;
        if (full > r->full_peak_tokens) r->full_peak_tokens = full;
        if (g->pol && (rc = kvpol_after_step(g->pol, &g->seq, &conf))) break;

        if (!p->force && !p->ignore_eos && (tok_is_eog(g->m->tok, next) ||
                          (g->m->stop_on_bos && next == tok_bos(g->m->tok)))) {
            r->finish = GEN_FINISH_STOP;
            break;
        }
        r->tokens[r->n_tokens++] = next;
        histbuf[n_prompt + r->n_tokens - 1] = next;
        size_t len, before = r->text_len;
        const char *piece = tok_decode(g->m->tok, prev, next, &len);
        if ((rc = tb_append(&r->text, &r->text_len, &text_cap, piece, len))) break;
        prev = next;
        if (!p->force && tb_cut_stop(r->text, &r->text_len, p->stop, p->n_stop, before)) {
            r->finish = GEN_FINISH_STOP;
            break;
        }
        if (r->n_tokens >= limit) break;
        if (g->seq.n_tokens + 1 >= g->b->opt.max_ctx) {
            r->finish = GEN_FINISH_LENGTH;
            break;
        }
        if ((rc = step(g, &next, 1))) break;
    }
    r->decode_s = now_s() - t1;
    free(histbuf);
out:
    if (g->pol) kvpol_end(g->pol, &g->seq);
    kv_seq_reset(&g->seq, g->pool);
    if (rc) gen_result_free(r);
    return rc;
}
