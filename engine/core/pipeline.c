/* pipeline.c - the token pipeline (pipeline.h). */
#include "pipeline.h"

#include <math.h>

#include "ck_err.h"
#include "kvpol.h"
#include "tb.h"
#include "tokenizer.h"

/* log softmax(x)[k], in double: eval's per-token log-likelihood. */
static double log_softmax_at(const float *x, int n, int k) {
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    /* s >= 1: the maximum's own term is exp(0) */
    // cppcheck-suppress invalidFunctionArg
    return (double)x[k] - mx - log(s);
}

/* KV accounting for one step: what attention just read. */
static void account(const pipeline_rules *ru, pipeline_seq *s) {
    const backend *b = ru->b;
    const int bs = b->opt.block_size;
    const double tok_f32 = (double)b->kv_block_floats * sizeof(float) / bs;
    const double tok_i8 = (double)b->kv8_block_bytes / bs;
    const kv_seq *q = s->seq;
    pipeline_stats *st = &s->st;
    int hot = kv_seq_hot_tokens(q), hot8 = kv_seq_hot8_tokens(q), full = q->n_tokens;
    st->hot_lookups += (uint64_t)q->n_blocks;
    st->hot_hits += (uint64_t)(q->n_hot + q->n_hot8);
    st->hot_token_steps += hot;
    st->full_token_steps += full;
    double hb = (double)(hot - hot8) * tok_f32 + (double)hot8 * tok_i8;
    st->hot_byte_steps += hb;
    st->full_byte_steps += (double)full * tok_f32;
    if (hb > (double)st->hot_peak_bytes) st->hot_peak_bytes = (size_t)hb;
    if (hot > st->hot_peak_tokens) st->hot_peak_tokens = hot;
    if (full > st->full_peak_tokens) st->full_peak_tokens = full;
}

int pipeline_token(const pipeline_rules *ru, pipeline_seq *s, float *logits, const samp_conf *conf_in,
                   int32_t amax, pipeline_out *out) {
    if (!ru || !s || !logits || !out || !ru->m || !ru->b || !s->seq || !s->hist) return CK_EINVAL;
    const int n_vocab = ru->m->cfg.vocab_size;
    const int n_gen = s->n_hist - s->n_prompt;
    /* A sequence that reached a limit has ended: hist has no room. */
    if (n_gen < 0 || n_gen >= ru->limit || s->n_hist >= ru->max_ctx) return CK_EINVAL;
    *out = (pipeline_out){.action = PIPELINE_NEXT, .token = -1, .off = s->emitted};
    samp_conf conf;
    if (conf_in) {
        conf = *conf_in;
    } else {
        int am = -1;
        amax = samp_confidence(logits, n_vocab, &conf, &am) ? -1 : am;
    }
    /* 1. An uncertain step under a reduced cache may be worth running again
     * with the blocks the policy recalls for it; once per step. Never in a
     * model whose layers keep a recurrent state (lfm2): the state has taken
     * in the token's input already, and a rerun would take it twice. */
    if (s->pol && !s->retrying && !model_state_floats(&ru->m->cfg) &&
        kvpol_retry(s->pol, s->seq, &conf) > 0) {
        s->seq->n_tokens--; /* the caller rewrites the last position's KV */
        s->retrying = 1;
        s->st.retries++;
        out->action = PIPELINE_RETRY;
        out->conf = conf;
        return CK_OK;
    }
    s->retrying = 0;
    int rc;
    /* 2. */
    if (ru->tap && (rc = ru->tap(ru->tap_ud, n_gen, logits, n_vocab))) return rc;
    /* 3. The token. A plain greedy sampler would only find again the argmax
     * the confidence pass found. */
    int32_t next;
    if (ru->force) {
        next = ru->force[n_gen];
        if (next < 0 || next >= n_vocab) return CK_EINVAL;
        if (s->logp) s->logp[n_gen] = log_softmax_at(logits, n_vocab, next);
        if (s->argmax) s->argmax[n_gen] = amax;
    } else {
        if (!s->sm) return CK_EINVAL;
        next = amax >= 0 && samp_plain_greedy(s->sm) ? amax : samp_sample(s->sm, logits, s->hist, s->n_hist);
        if (next < 0) return next;
    }
    out->token = next;
    out->conf = conf;
    /* 4. */
    s->st.n_steps++;
    s->st.sum_entropy += conf.entropy;
    s->st.sum_gap += conf.gap;
    s->st.sum_pmax += conf.pmax;
    if (s->trace) s->trace[n_gen] = conf;
    account(ru, s);
    /* 5. */
    if (s->pol && (rc = kvpol_after_step(s->pol, s->seq, &conf))) return rc;
    /* 6. End-of-text: the token is not part of the completion; nothing is
     * released here (the caller releases text + emitted with the end). */
    const tokenizer *tk = ru->m->tok;
    if (!ru->force && !ru->ignore_eos &&
        (tok_is_eog(tk, next) || (ru->m->stop_on_bos && next == tok_bos(tk)))) {
        out->action = PIPELINE_END;
        out->finish = PIPELINE_FINISH_STOP;
        return CK_OK;
    }
    int32_t prev = s->hist[s->n_hist - 1];
    s->hist[s->n_hist++] = next;
    out->appended = 1;
    size_t len, before = s->text_len;
    const char *piece = tok_decode(tk, prev, next, &len);
    if ((rc = tb_append(&s->text, &s->text_len, &s->text_cap, piece, len))) return rc;
    /* 7. Forced tokens are scored, not answered: no stop strings. */
    const char *const *stops = ru->force ? NULL : ru->stop;
    const int n_stop = ru->force ? 0 : ru->n_stop;
    if (tb_cut_stop(s->text, &s->text_len, stops, n_stop, before)) {
        out->action = PIPELINE_END;
        out->finish = PIPELINE_FINISH_STOP;
    } else if (n_gen + 1 >= ru->limit || s->n_hist >= ru->max_ctx) {
        out->action = PIPELINE_END;
        out->finish = PIPELINE_FINISH_LENGTH;
    }
    /* 8. */
    size_t end = out->action == PIPELINE_END
                     ? s->text_len
                     : s->text_len - tb_stop_holdback(s->text, s->text_len, stops, n_stop);
    out->off = s->emitted;
    out->len = end > s->emitted ? end - s->emitted : 0;
    if (end > s->emitted) s->emitted = end;
    return CK_OK;
}
