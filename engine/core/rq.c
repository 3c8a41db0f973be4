/* rq.c - a request from eng_submit to the queue (eng_int.h): the
 * submit-time checks, each rejection with its stable reason (engine.h,
 * ENG_REJECT_*), tokenization, and the resolution of its session, template
 * and prefix blocks, which may wait for the cold store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "eng_int.h"
#include "tb.h"
#include "tokenizer.h"

/* Fill err and *reason; returns rc. */
static int reject(int *reason, int why, int rc) {
    *reason = why;
    return rc;
}

/* Tokenize `what` (the prefix or the prompt) into out (room ids at most).
 * `fail` is the reason of a failure other than length: the client's text
 * (ENG_REJECT_INVALID) or a stored template's (ENG_REJECT_ENGINE). */
static int encode(eng *e, const char *text, size_t len, int bos, int32_t *out, int room, int *n,
                  const char *what, int fail, int *reason, char *err, size_t errlen) {
    int rc = tok_encode(e->m->tok, text, len, bos, out, room, n);
    if (rc == CK_ETOOLONG)
        snprintf(err, errlen, "the %s is %d tokens; the context holds %d", what, *n, room);
    else if (rc)
        snprintf(err, errlen, "cannot tokenize the %s: %s", what, ck_strerror(rc));
    if (rc) *reason = rc == CK_ETOOLONG ? ENG_REJECT_CONTEXT : rc == CK_EINVAL ? fail : ENG_REJECT_ENGINE;
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

/* The pool must be able to hold what the request needs hot at once. */
static int check_commit(eng *e, req *r, int *reason, char *err, size_t errlen) {
    r->commit = commit_blocks(e, r);
    if (r->commit <= e->kv.pool.n_blocks) return CK_OK;
    snprintf(err, errlen, "the request needs %d KV blocks hot; the pool has %d", r->commit,
             e->kv.pool.n_blocks);
    return reject(reason, ENG_REJECT_KV_ROOM, CK_ENOSPACE);
}

/* r's tokens become head (n_head: a session's context, or a template's
 * tokens) followed by the prompt as a continuation. */
static int take_tokens(eng *e, req *r, const int32_t *head, int n_head, int n_session, int *reason, char *err,
                       size_t errlen) {
    int n = n_head + r->n_cont;
    int limit = r->max_tokens ? r->max_tokens : e->max_ctx - n;
    if (n >= e->max_ctx || limit > e->max_ctx - n) {
        snprintf(err, errlen, "%s (%d) + prompt (%d) + max_tokens (%d) exceed the context (%d)",
                 n_session ? "session context" : "template", n_head, r->n_cont, limit, e->max_ctx);
        return reject(reason, ENG_REJECT_CONTEXT, CK_ETOOLONG);
    }
    int32_t *h = malloc((size_t)(n + limit) * sizeof *h);
    samp_conf *tr = r->trace ? malloc((size_t)limit * sizeof *tr) : NULL;
    if (!h || (r->trace && !tr)) {
        free(h);
        free(tr);
        return reject(reason, ENG_REJECT_ENGINE, CK_ENOMEM);
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
    return check_commit(e, r, reason, err, errlen);
}

const uint64_t *rq_block_names(eng *e, req *r, int n) {
    for (; r->n_bhash < n; r->n_bhash++) {
        int j = r->n_bhash;
        uint64_t parent = j ? r->bhash[j - 1] : pfx_root(e->m->fingerprint);
        r->bhash[j] = pfx_next(parent, r->hist + (size_t)j * e->bs, e->bs);
    }
    return r->bhash;
}

/* Move r toward the queue: its session's context (host, else the cold
 * store), then its prefix blocks (the cold copies of those the host lacks,
 * for a request that names a session or a prefix: only those are written
 * there). Returns 1 ready, 0 waiting for the cold store (r->pending
 * answers), or a CK_E* error with err and *reason filled. */
int rq_resolve(eng *e, req *r, int *reason, char *err, size_t errlen) {
    if (r->pending) return 0;
    if (r->stage == RES_SESSION) {
        if (session_busy(e, r)) return 0;
        const int32_t *ctx;
        int nc, rc;
        if (sess_find(e->sess, r->session, &ctx, &nc)) {
            if ((rc = take_tokens(e, r, ctx, nc, nc, reason, err, errlen))) return rc;
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
                return reject(reason, ENG_REJECT_UNKNOWN_TEMPLATE, CK_ENOTFOUND);
            }
        }
        int n = 0, rc;
        if ((rc = encode(e, text, len, 1, e->scratch, e->max_ctx, &n, "template", ENG_REJECT_ENGINE, reason,
                         err, errlen)) ||
            (rc = take_tokens(e, r, e->scratch, n, 0, reason, err, errlen)))
            return rc;
        r->has_prefix = 1;
        r->n_keep = n; /* a template's blocks stay pinned and persisted */
        r->stage = RES_PREFIX;
    }
    int nb = e->pfx ? (r->n_prompt - 1) / e->bs : 0; /* the last prompt token is always computed */
    if (nb <= 0) return 1;
    const uint64_t *h = rq_block_names(e, r, nb);
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

/* The checks that need nothing allocated: names, the prompt (tokenized into
 * e->scratch: [BOS prefix] prompt), limits, sampling, stops, the policy. */
static int check(eng *e, const eng_request *q, int *n_out, int *limit_out, kvpol_config *pc, int *reason,
                 char *err, size_t errlen) {
    if (e->waitq.n + e->n_resolving >= e->c.max_queue) {
        snprintf(err, errlen, "the waiting queue is full (%d)", e->c.max_queue);
        return reject(reason, ENG_REJECT_QUEUE_FULL, CK_EBUSY);
    }
    if (q->session_id && (!q->session_id[0] || strlen(q->session_id) > SESS_ID_MAX)) {
        snprintf(err, errlen, "a session id is 1 to %d bytes", SESS_ID_MAX);
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    if (q->template_name && !tpl_name_ok(q->template_name)) {
        snprintf(err, errlen, "a template name is 1 to %d bytes of A-Z a-z 0-9 . _ : -", TPL_NAME_MAX);
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    if (q->save_template && (!q->template_name || !q->prompt || q->prefix)) {
        snprintf(err, errlen, "saving a template takes a name and a prompt text (and no prefix)");
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    /* A hybrid model's sequence must be computed from its first token: a
     * session's context, a template's or a kept prefix's KV is reused from
     * a cache that holds no recurrent state. */
    const char *no_state = q->session_id      ? "sessions"
                           : q->template_name ? "cache templates"
                           : q->keep_prefix   ? "keep_prefix (the prefix cache)"
                                              : NULL;
    if (e->hybrid && no_state) {
        snprintf(err, errlen, "%s are not supported for architecture %s (its layers keep a recurrent state)",
                 no_state, e->hybrid);
        return reject(reason, ENG_REJECT_INVALID, CK_EUNSUPPORTED);
    }
    int n = 0, rc;
    if (q->prefix && (rc = encode(e, q->prefix, q->prefix_len, 1, e->scratch, e->max_ctx, &n, "prefix",
                                  ENG_REJECT_INVALID, reason, err, errlen)))
        return rc;
    if (q->prompt) {
        int k = 0;
        if ((rc = encode(e, q->prompt, q->prompt_len, n == 0, e->scratch + n, e->max_ctx - n, &k, "prompt",
                         ENG_REJECT_INVALID, reason, err, errlen)))
            return rc;
        n += k;
    } else if (q->tokens && q->n_tokens > 0) {
        if (n + q->n_tokens >= e->max_ctx) {
            snprintf(err, errlen, "the prompt is %d tokens; the context holds %d", n + q->n_tokens,
                     e->max_ctx);
            return reject(reason, ENG_REJECT_CONTEXT, CK_ETOOLONG);
        }
        for (int i = 0; i < q->n_tokens; i++) {
            if (q->tokens[i] < 0 || q->tokens[i] >= e->vocab) {
                snprintf(err, errlen, "token %d at %d is outside the vocabulary (%d)", q->tokens[i], i,
                         e->vocab);
                return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
            }
        }
        memcpy(e->scratch + n, q->tokens, (size_t)q->n_tokens * sizeof *e->scratch);
        n += q->n_tokens;
    } else if (!q->prefix) {
        snprintf(err, errlen, "no prompt");
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    if (n <= 0) {
        snprintf(err, errlen, "empty prompt");
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    if (q->max_tokens < 0) {
        snprintf(err, errlen, "max_tokens %d < 0", q->max_tokens);
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    int limit = q->max_tokens ? q->max_tokens : e->max_ctx - n;
    if (n >= e->max_ctx || limit > e->max_ctx - n) {
        snprintf(err, errlen, "prompt (%d) + max_tokens (%d) exceed the context (%d)", n, limit, e->max_ctx);
        return reject(reason, ENG_REJECT_CONTEXT, CK_ETOOLONG);
    }
    if (q->n_resume) {
        if (q->n_resume < 0 || !q->resume_tokens || q->n_resume >= limit) {
            snprintf(err, errlen, "%d resume tokens: 0 to max_tokens - 1 (%d) of them", q->n_resume,
                     limit - 1);
            return reject(reason, ENG_REJECT_CONTEXT, CK_ETOOLONG);
        }
        if (q->session_id || q->template_name || q->prefill_only || q->prefix) {
            snprintf(err, errlen,
                     "resume tokens do not go with a session, a template, a prefix or prefill_only");
            return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
        }
        for (int i = 0; i < q->n_resume; i++) {
            if (q->resume_tokens[i] < 0 || q->resume_tokens[i] >= e->vocab) {
                snprintf(err, errlen, "resume token %d at %d is outside the vocabulary (%d)",
                         q->resume_tokens[i], i, e->vocab);
                return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
            }
        }
    }
    if (samp_params_check(&q->samp)) {
        snprintf(err, errlen, "sampling parameters out of range");
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    if (q->n_stop < 0 || q->n_stop > GEN_MAX_STOPS) {
        snprintf(err, errlen, "n_stop %d outside 0..%d", q->n_stop, GEN_MAX_STOPS);
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    for (int i = 0; i < q->n_stop; i++) {
        if (!q->stop[i]) {
            snprintf(err, errlen, "stop string %d is NULL", i);
            return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
        }
    }
    *pc = e->c.policy;
    if (q->policy && (rc = kvpol_parse(q->policy, pc, err, errlen)))
        return reject(reason, ENG_REJECT_INVALID, rc);
    /* A retry reruns a step's token, whose input the recurrent state has
     * already taken in: off for a hybrid model, refused when asked for. */
    if (e->hybrid && q->policy && strstr(q->policy, "retry")) {
        snprintf(err, errlen,
                 "policy retries are not supported for architecture %s (its layers keep a "
                 "recurrent state)",
                 e->hybrid);
        return reject(reason, ENG_REJECT_INVALID, CK_EUNSUPPORTED);
    }
    if (e->hybrid) pc->retry_entropy = pc->retry_pmax = 0;
    *n_out = n;
    *limit_out = limit;
    return CK_OK;
}

/* Copy the request into r (allocated, zeroed): everything it points to. */
static int fill(eng *e, req *r, const eng_request *q, int n, int limit, int *reason, char *err,
                size_t errlen) {
    int use_tpl = q->template_name && !q->save_template;
    r->n_prompt = r->n_hist = n;
    r->limit = limit;
    r->hist = malloc((size_t)(n + limit) * sizeof *r->hist);
    r->trace = q->want_trace ? malloc((size_t)limit * sizeof *r->trace) : NULL;
    int rc = r->hist && (!q->want_trace || r->trace) ? tb_append(&r->text, &r->text_len, &r->text_cap, "", 0)
                                                     : CK_ENOMEM;
    for (int i = 0; !rc && i < q->n_stop; i++) {
        if (!(r->stop[i] = strdup(q->stop[i]))) rc = CK_ENOMEM;
        r->n_stop = i + 1;
    }
    r->max_tokens = q->max_tokens;
    r->has_prefix = q->prefix != NULL;
    r->prefill_only = q->prefill_only;
    r->keep_prefix = q->keep_prefix;
    if (!rc && e->pfx && !(r->bhash = malloc(((size_t)e->max_ctx / e->bs + 1) * sizeof *r->bhash)))
        rc = CK_ENOMEM;
    if (!rc && q->session_id && !(r->session = strdup(q->session_id))) rc = CK_ENOMEM;
    if (!rc && use_tpl && !(r->tpl = strdup(q->template_name))) rc = CK_ENOMEM;
    if (!rc && (r->session || r->tpl)) {
        /* The prompt as it follows a context or a template: no BOS. */
        if (q->prompt) {
            int k = 0;
            if (!(r->cont = malloc((size_t)e->max_ctx * sizeof *r->cont)))
                rc = CK_ENOMEM;
            else
                rc = encode(e, q->prompt, q->prompt_len, 0, r->cont, e->max_ctx, &k, "prompt",
                            ENG_REJECT_INVALID, reason, err, errlen);
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
    if (rc) return *reason ? rc : reject(reason, ENG_REJECT_ENGINE, rc);
    if ((rc = check_commit(e, r, reason, err, errlen))) return rc;
    memcpy(r->hist, e->scratch, (size_t)n * sizeof *r->hist);
    /* A continuation's ids join the history as completion tokens, with their
     * text: the prefill computes them with the prompt (scheduler.c prefills
     * up to n_hist), and the pipeline then goes on from the last one. */
    for (int i = 0; i < q->n_resume; i++) {
        size_t len;
        const char *piece = tok_decode(e->m->tok, r->hist[r->n_hist - 1], q->resume_tokens[i], &len);
        if ((rc = tb_append(&r->text, &r->text_len, &r->text_cap, piece, len)))
            return reject(reason, ENG_REJECT_ENGINE, rc);
        if (r->trace) r->trace[i] = (samp_conf){0};
        r->hist[r->n_hist++] = q->resume_tokens[i];
    }
    r->samp = q->samp;
    r->ignore_eos = q->ignore_eos;
    r->want_trace = q->want_trace;
    r->deadline_ms = q->deadline_ms;
    r->user_tag = q->user_tag;
    if (q->save_template) {
        if ((rc = tpl_cache_save(e->tpl, q->template_name, q->prompt, q->prompt_len, (int64_t)now_ms(),
                                 wall_ms()))) {
            snprintf(err, errlen, "cannot save template %s: %s", q->template_name, ck_strerror(rc));
            return reject(reason, ENG_REJECT_ENGINE, rc);
        }
        r->keep_prefix = 1;
    }
    if (r->keep_prefix) r->n_keep = r->n_prompt;
    r->stage = r->session ? RES_SESSION : r->tpl ? RES_TEMPLATE : RES_PREFIX;
    return CK_OK;
}

/* ------------------------------------------------------ the client form */

/* A chat template failure as its reason (by jinja's code), with its message. */
static int chat_reject(const jinja_error *je, int *reason, char *err, size_t errlen) {
    int why = je->code == CK_EUNSUPPORTED                        ? ENG_REJECT_CHAT_TEMPLATE_UNSUPPORTED
              : je->code == CK_EINVAL                            ? ENG_REJECT_CHAT_TEMPLATE_EXCEPTION
              : je->code == CK_EFORMAT                           ? ENG_REJECT_CHAT_TEMPLATE_ERROR
              : je->code == CK_ERANGE || je->code == CK_ETOOLONG ? ENG_REJECT_CHAT_TEMPLATE_LIMIT
                                                                 : ENG_REJECT_CHAT_TEMPLATE_FAILED;
    snprintf(err, errlen, "chat template: %.200s", je->msg);
    return reject(reason, why, je->code ? je->code : CK_EFORMAT);
}

/* `messages`: rendered with the chat template and tokenized under chat.h's
 * anti-forgery rule into e->client_ids (limit ids at most); *warnings gets
 * what the rendering changed (CHAT_WARN_*, which are ENG_WARN_*). */
static int client_chat(eng *e, const eng_request *q, int limit, int *n, int *warnings, int *reason, char *err,
                       size_t errlen) {
    if (!e->chat) return chat_reject(&e->chat_err, reason, err, errlen);
    if (q->n_messages < 0) {
        snprintf(err, errlen, "n_messages %d < 0", q->n_messages);
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    for (int i = 0; i < q->n_messages; i++) {
        if (!q->messages[i].role || !q->messages[i].content) {
            snprintf(err, errlen, "message %d has no role or no content", i);
            return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
        }
    }
    if (q->tools && chat_source(e->chat) == CHAT_SRC_NONE) {
        snprintf(err, errlen,
                 "tools need a chat template; this model has none (its messages are joined as text)");
        return reject(reason, ENG_REJECT_PROMPT_INVALID, CK_EINVAL);
    }
    /* engine.h's eng_message is chat.h's chat_message, field for field */
    chat_message *msgs = malloc((size_t)(q->n_messages ? q->n_messages : 1) * sizeof *msgs);
    if (!msgs) return reject(reason, ENG_REJECT_ENGINE, CK_ENOMEM);
    for (int i = 0; i < q->n_messages; i++)
        msgs[i] = (chat_message){q->messages[i].role, q->messages[i].content};
    char *text = NULL;
    size_t len = 0, ns = 0;
    jinja_span *sp = NULL;
    jinja_error je;
    chat_input in = {msgs, (size_t)q->n_messages, q->tools, 1, NULL};
    int rc = chat_render(e->chat, &in, &text, &len, &sp, &ns, warnings, &je);
    free(msgs);
    if (rc) return chat_reject(&je, reason, err, errlen);
    /* a token stands for tok_max_piece_len bytes at most: see client_ids */
    size_t most = (size_t)limit * (size_t)tok_max_piece_len(e->m->tok);
    if (len > most) {
        snprintf(err, errlen,
                 "the prompt is %zu bytes (the rendered chat); %d tokens (the limit) hold at most %zu bytes",
                 len, limit, most);
        rc = reject(reason, ENG_REJECT_PROMPT_TOO_LONG, CK_ETOOLONG);
    } else if ((rc = chat_tokenize(e->chat, text, len, sp, ns, e->client_ids, limit, n))) {
        if (rc == CK_ETOOLONG) {
            snprintf(err, errlen, "the chat is %d tokens or more; the limit is %d", *n, limit);
            reject(reason, ENG_REJECT_PROMPT_TOO_LONG, rc);
        } else {
            snprintf(err, errlen, "cannot tokenize the chat: %s", ck_strerror(rc));
            reject(reason, ENG_REJECT_PROMPT_INVALID, rc);
        }
    }
    free(text);
    free(sp);
    return rc;
}

/* The client form (engine.h): the prompt ids into *ids / *n, the limits
 * checked, max_tokens resolved into *max_tokens. The checks fire in this
 * order, each with its own sentence: the prompt's bytes, its tokens, the
 * context. */
static int client_ids(eng *e, const eng_request *q, const int32_t **ids, int *n_out, int *max_tokens,
                      int *warnings, int *reason, char *err, size_t errlen) {
    int limit =
        q->max_prompt_tokens > 0 && q->max_prompt_tokens < e->max_ctx ? q->max_prompt_tokens : e->max_ctx;
    int n = 0, rc;
    *ids = e->client_ids;
    if (q->messages && !q->save_template) {
        if ((rc = client_chat(e, q, limit, &n, warnings, reason, err, errlen))) return rc;
    } else if (q->prompt) {
        const tokenizer *tok = e->m->tok;
        /* A token stands for tok_max_piece_len bytes at most, so a longer
         * prompt than limit * that cannot fit: refused in O(1), before
         * tokenizing spends time (and memory) proportional to a 1 MB prompt. */
        size_t most = (size_t)limit * (size_t)tok_max_piece_len(tok);
        if (q->prompt_len > most) {
            snprintf(err, errlen, "the prompt is %zu bytes; %d tokens (the limit) hold at most %zu bytes",
                     q->prompt_len, limit, most);
            return reject(reason, ENG_REJECT_PROMPT_TOO_LONG, CK_ETOOLONG);
        }
        /* plain text unless the client says its prompt is trusted (parse_special) */
        rc = e->chat ? chat_tokenize_text(e->chat, q->prompt, q->prompt_len, q->parse_special, e->client_ids,
                                          limit, &n)
                     : tok_encode_opts(tok, q->prompt, q->prompt_len,
                                       TOK_ENC_ADD_SPECIAL | (q->parse_special ? TOK_ENC_PARSE_SPECIAL : 0),
                                       e->client_ids, limit, &n);
        /* ETOOLONG: counted past the limit, or refused up front by the
         * tokenizer's own byte bound (then n says nothing); ERANGE alike */
        if (rc == CK_ETOOLONG || rc == CK_ERANGE) {
            if (n > limit)
                snprintf(err, errlen, "the prompt is %d tokens or more; the limit is %d", n, limit);
            else
                snprintf(err, errlen, "the prompt (%zu bytes) is over the limit of %d tokens", q->prompt_len,
                         limit);
            return reject(reason, ENG_REJECT_PROMPT_TOO_LONG, CK_ETOOLONG);
        }
        if (rc) {
            snprintf(err, errlen, "cannot tokenize the prompt: %s", ck_strerror(rc));
            return reject(reason, ENG_REJECT_PROMPT_INVALID, rc);
        }
    } else {
        n = q->n_tokens;
        if (n > limit) {
            snprintf(err, errlen, "the prompt is %d tokens; the limit is %d", n, limit);
            return reject(reason, ENG_REJECT_PROMPT_TOO_LONG, CK_ETOOLONG);
        }
        *ids = q->tokens;
    }
    int mt = q->max_tokens;
    if (mt == 0) { /* not given: the default, within the context */
        mt = q->default_max_tokens > 0 ? q->default_max_tokens : e->max_ctx;
        if (n + mt > e->max_ctx) mt = e->max_ctx - n;
        if (mt < 1) {
            snprintf(err, errlen, "the prompt (%d tokens) fills the context (%d)", n, e->max_ctx);
            return reject(reason, ENG_REJECT_CONTEXT, CK_ETOOLONG);
        }
    } else if (mt > 0 && n + mt > e->max_ctx) {
        snprintf(err, errlen, "prompt (%d tokens) + max_tokens (%d) exceed the context (%d)", n, mt,
                 e->max_ctx);
        return reject(reason, ENG_REJECT_CONTEXT, CK_ETOOLONG);
    }
    *n_out = n;
    *max_tokens = mt;
    return CK_OK;
}

int rq_client_init(eng *e, const eng_config *c, char *err, size_t errlen) {
    const model *m = e->m;
    const char *src = NULL;
    size_t len = 0;
    char *file = NULL;
    int source = CHAT_SRC_MODEL, rc;
    if (!(e->client_ids = malloc((size_t)e->max_ctx * sizeof *e->client_ids))) return CK_ENOMEM;
    if (c->chat_template) {
        FILE *f = fopen(c->chat_template, "rb");
        size_t cap = (1u << 20) + 1;
        if (f && (file = malloc(cap))) len = fread(file, 1, cap, f);
        int bad = !f || !file || ferror(f) || len == cap || len == 0;
        if (f) fclose(f);
        if (bad) {
            snprintf(err, errlen, "chat_template %s: cannot read it (1 byte to 1 MiB)", c->chat_template);
            free(file);
            return CK_EIO;
        }
        src = file;
        source = CHAT_SRC_OVERRIDE;
    } else if (chat_template_in_model(m, &src, &len)) {
        src = NULL;
        len = 0;
    }
    rc = chat_new(m->tok, src, len, source, &e->chat, &e->chat_err);
    free(file);
    e->c.chat_template = NULL; /* borrowed for eng_new only */
    if (rc && source == CHAT_SRC_OVERRIDE) {
        snprintf(err, errlen, "chat_template %.200s: %s: %.250s", c->chat_template, e->chat_err.kind,
                 e->chat_err.msg);
        return rc;
    }
    chat_model_info ci;
    chat_model_describe(m, NULL, e->chat, &ci);
    eng_prompt_format *pf = &e->pf;
    memset(pf, 0, sizeof *pf);
    pf->vocab_size = tok_vocab_size(m->tok);
    if (tok_vocab_hash(m->tok, pf->vocab_hash)) pf->vocab_hash[0] = 0; /* out of memory: no identity */
    _Static_assert(sizeof pf->arch == sizeof ci.arch && sizeof pf->tok_model == sizeof ci.tok_model &&
                       sizeof pf->tok_pre == sizeof ci.tok_pre &&
                       sizeof pf->template_hash == sizeof ci.template_hash,
                   "engine.h's eng_prompt_format is chat.h's chat_model_info");
    memcpy(pf->arch, ci.arch, sizeof pf->arch);
    memcpy(pf->tok_model, ci.tok_model, sizeof pf->tok_model);
    memcpy(pf->tok_pre, ci.tok_pre, sizeof pf->tok_pre);
    memcpy(pf->template_hash, ci.template_hash, sizeof pf->template_hash);
    pf->template_source = ci.template_source;
    if (rc) { /* the model's own template: `messages` requests get its error */
        pf->template_source = "model";
        pf->template_error_kind = e->chat_err.kind;
        snprintf(pf->template_error, sizeof pf->template_error, "%s", e->chat_err.msg);
    }
    return CK_OK;
}

void rq_client_free(eng *e) {
    chat_free(e->chat); /* borrows the model's tokenizer: before the model goes */
    e->chat = NULL;
    free(e->client_ids);
    e->client_ids = NULL;
}

const eng_prompt_format *eng_get_prompt_format(const eng *e) { return &e->pf; }

int rq_build(eng *e, const eng_request *q, req **out, int *reason, char *err, size_t errlen) {
    int n = 0, limit = 0, rc;
    kvpol_config pc;
    *out = NULL;
    eng_request cq;
    int warnings = 0;
    if (q->tools && (!q->client_form || !q->messages || q->save_template)) {
        snprintf(err, errlen, "tools go with messages (in the client form)");
        return reject(reason, ENG_REJECT_INVALID, CK_EINVAL);
    }
    if (q->client_form) { /* its ids, then on as a request of tokens */
        const int32_t *ids;
        int nc, mt;
        if ((rc = client_ids(e, q, &ids, &nc, &mt, &warnings, reason, err, errlen))) return rc;
        cq = *q;
        cq.client_form = 0;
        cq.messages = NULL;
        cq.n_messages = 0;
        cq.tools = NULL;
        cq.max_tokens = mt;
        if (q->save_template) { /* the template is the text itself */
            cq.tokens = NULL;
            cq.n_tokens = 0;
        } else {
            cq.prompt = NULL;
            cq.prompt_len = 0;
            cq.tokens = ids;
            cq.n_tokens = nc;
        }
        q = &cq;
    }
    if ((rc = check(e, q, &n, &limit, &pc, reason, err, errlen))) return rc;
    req *r = calloc(1, sizeof *r);
    if (!r) return reject(reason, ENG_REJECT_ENGINE, CK_ENOMEM);
    r->se.index = -1;
    r->state_slot = -1;
    r->pc = pc;
    r->warnings = warnings;
    *out = r; /* on failure too: the caller frees it */
    return fill(e, r, q, n, limit, reason, err, errlen);
}

/* A session turn whose later KV was computed with a reduced CONF-KV cache
 * left those blocks unpublished (not exact). Recompute the conversation's
 * KV once, with the full cache and at low priority, as a prefill of its own
 * (the exact part comes from the prefix cache): the next turn then reuses
 * all of it, and sees the same KV a fresh run on the conversation would. The
 * next turn waits for it (session_busy). Best effort: skipped when it does
 * not fit. */
void rq_settle(eng *e, const req *r) {
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

const char *eng_reject_name(int reason) {
    switch (reason) {
    case ENG_REJECT_NONE: return "NONE";
#define ENG_RJ_(name, value, what) \
    case value: return #name;
        ENG_REJECT_MAP(ENG_RJ_)
#undef ENG_RJ_
    default: return "ENGINE";
    }
}

/* engine.h restates these so that it needs no internal header. */
_Static_assert(ENG_MAX_STOPS == GEN_MAX_STOPS, "engine.h's ENG_MAX_STOPS is gen.h's GEN_MAX_STOPS");
_Static_assert((int)ENG_WARN_SYSTEM_MERGED == (int)CHAT_WARN_SYSTEM_MERGED &&
                   (int)ENG_WARN_SYSTEM_DROPPED == (int)CHAT_WARN_SYSTEM_DROPPED,
               "engine.h's warnings are chat.h's");
_Static_assert((int)ENG_FINISH_LENGTH == (int)GEN_FINISH_LENGTH &&
                   (int)ENG_FINISH_STOP == (int)GEN_FINISH_STOP,
               "engine.h's finish reasons are gen.h's");

int eng_template_name_ok(const char *name) { return tpl_name_ok(name); }

const char *eng_warning_text(int bit) { return chat_warning_text(bit); }
