/* gen.c - one sequence, prefill then decode (gen.h). */
#include "gen.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "pipeline.h"
#include "kvpol.h"
#include "tb.h"

struct gen_ctx {
    const model *m;
    backend *b;
    kv_pool *pool;
    kvpol *pol; /* borrowed, may be NULL */
    kv_seq seq;
    sampler *samp;
    float *logits; /* (vocab) */
    int32_t *pos;  /* (max_batch_tokens) batch arrays */
    int32_t *seqix;
    int32_t *out_row;
};

void gen_params_default(gen_params *p) {
    memset(p, 0, sizeof *p);
    samp_params_default(&p->samp);
    p->max_tokens = 256;
}

const char *gen_finish_name(int finish) { return finish == GEN_FINISH_STOP ? "stop" : "length"; }

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
    be_seq_view v = {.blocks = g->seq.hot,
                     .n_blocks = g->seq.n_blocks,
                     .blocks8 = g->seq.n_hot8 ? g->seq.hot8 : NULL,
                     .mass = g->seq.mass};
    be_batch bt = {.n_tokens = n,
                   .token = tokens,
                   .pos = g->pos,
                   .seq = g->seqix,
                   .out_row = g->out_row,
                   .n_seqs = 1,
                   .seqs = &v,
                   .n_out = 1};
    rc = g->b->ops->forward(g->b, &bt, g->logits);
    if (rc) return rc;
    kv_seq_commit(&g->seq, n);
    return CK_OK;
}

int gen_run(gen_ctx *g, const int32_t *prompt, int n_prompt, const gen_params *p, gen_result *r) {
    memset(r, 0, sizeof *r);
    const model_config *c = &g->m->cfg;
    const int max_ctx = g->b->opt.max_ctx;
    if (n_prompt <= 0 || !prompt) return CK_EINVAL;
    if (n_prompt >= max_ctx) return CK_ETOOLONG;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size) return CK_EINVAL;
    /* A sampler per run: its parameters and seed are the request's. */
    sampler *sm = NULL;
    int rc = samp_new(c->vocab_size, &p->samp, &sm);
    if (rc) return rc;
    samp_free(g->samp);
    g->samp = sm;
    r->n_prompt = n_prompt;
    /* Everything the token loop writes, sized now: a completion has at most
     * limit tokens, and no more than the context leaves after the prompt. */
    const int limit = p->force ? p->n_force : p->max_tokens;
    const int cap = limit < max_ctx - n_prompt ? (limit > 0 ? limit : 0) : max_ctx - n_prompt;
    pipeline_seq ps = {
        .seq = &g->seq, .pol = g->pol, .sm = g->samp, .n_prompt = n_prompt, .n_hist = n_prompt};
    rc = CK_ENOMEM;
    if (!(ps.hist = malloc(((size_t)n_prompt + (size_t)cap) * sizeof *ps.hist))) goto out;
    if (p->want_trace && cap && !(r->trace = malloc((size_t)cap * sizeof *r->trace))) goto out;
    if (p->force && cap &&
        (!(r->logp = malloc((size_t)cap * sizeof *r->logp)) ||
         !(r->argmax = malloc((size_t)cap * sizeof *r->argmax))))
        goto out;
    if ((rc = tb_append(&ps.text, &ps.text_len, &ps.text_cap, "", 0))) goto out;
    memcpy(ps.hist, prompt, (size_t)n_prompt * sizeof *ps.hist);
    ps.trace = r->trace;
    ps.logp = r->logp;
    ps.argmax = r->argmax;
    r->cap_ = (size_t)cap;
    if (g->pol) kvpol_begin(g->pol, &g->seq);

    /* Prefill in chunks of the batch size; logits only for the last token. */
    double t0 = now_s();
    for (int i = 0; i < n_prompt;) {
        int n = n_prompt - i;
        if (n > g->b->opt.max_batch_tokens) n = g->b->opt.max_batch_tokens;
        if ((rc = step(g, prompt + i, n))) goto end;
        i += n;
    }
    if (g->pol && (rc = kvpol_after_prefill(g->pol, &g->seq))) goto end;
    double t1 = now_s();
    r->prefill_s = t1 - t0;

    /* Decode: the token pipeline chooses, this loop only runs the forward
     * passes it asks for. */
    const pipeline_rules ru = {.m = g->m,
                               .b = g->b,
                               .limit = limit,
                               .max_ctx = max_ctx,
                               .n_stop = p->n_stop,
                               .stop = p->stop,
                               .ignore_eos = p->ignore_eos,
                               .force = p->force,
                               .tap = p->on_logits,
                               .tap_ud = p->on_logits_ud};
    r->finish = GEN_FINISH_LENGTH;
    while (ps.n_hist - n_prompt < limit) {
        pipeline_out o;
        if ((rc = pipeline_token(&ru, &ps, g->logits, NULL, -1, &o))) break;
        if (o.action == PIPELINE_END) {
            r->finish = o.finish;
            break;
        }
        /* PIPELINE_RETRY: the last token again, over the blocks recalled for it */
        if ((rc = step(g, o.action == PIPELINE_RETRY ? &ps.hist[ps.n_hist - 1] : &o.token, 1))) break;
    }
    r->decode_s = now_s() - t1;
end:
    if (g->pol) kvpol_end(g->pol, &g->seq);
out:
    kv_seq_reset(&g->seq, g->pool);
    r->text = ps.text;
    r->text_len = ps.text_len;
    r->n_tokens = ps.n_hist - n_prompt;
    /* The completion moves to the front of hist, which becomes r->tokens. */
    if (ps.hist) memmove(ps.hist, ps.hist + n_prompt, (size_t)r->n_tokens * sizeof *ps.hist);
    r->tokens = ps.hist;
    const pipeline_stats *st = &ps.st;
    r->sum_entropy = st->sum_entropy;
    r->sum_gap = st->sum_gap;
    r->sum_pmax = st->sum_pmax;
    r->hot_token_steps = st->hot_token_steps;
    r->full_token_steps = st->full_token_steps;
    r->hot_peak_tokens = st->hot_peak_tokens;
    r->full_peak_tokens = st->full_peak_tokens;
    r->hot_byte_steps = st->hot_byte_steps;
    r->full_byte_steps = st->full_byte_steps;
    r->hot_peak_bytes = st->hot_peak_bytes;
    r->retries = st->retries;
    if (rc) gen_result_free(r);
    return rc;
}
