/* jinja_stmt.c - the parser's statements (tags), and jinja_parse (see
 * jinja_int.h); tokens and expressions are jinja_parse.c. */
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

/* ---- statements */

static int p_body(parser *P, nlist *body, const char *const *ends);

/* NAME (',' NAME)* into names: for-loop and set targets, macro parameters */
static int p_targets(parser *P, slist *names) {
    do {
        if (names->n) jinja__advance(P);
        token *t = jinja__cur(P);
        if (t->type != TK_NAME)
            return jinja__perr(P, t->line, CK_EUNSUPPORTED, "line %d: expected a variable name", t->line);
        if (jinja__sl_push(P, names, t->p, t->n)) return P->failed;
        jinja__advance(P);
    } while (jinja__is_op(P, ","));
    return 0;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};

/* After `{% if` or `{% elif`: the condition, the body and what follows. */
static jnode *p_if(parser *P, int line) {
    jnode *e = jinja__new_node(P, S_IF, line);
    if (!e || !(e->a = jinja__p_expr(P, 0)) || jinja__expect_block_end(P) || p_body(P, &e->body, END_IF))
        return NULL;
    if (jinja__is_name(P, "elif")) {
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        jnode *x = p_if(P, l);
        if (!x || jinja__nl_push(P, &e->els, x)) return NULL;
        return e; /* the nested if consumed endif */
    }
    if (jinja__is_name(P, "else")) {
        jinja__advance(P);
        if (jinja__expect_block_end(P) || p_body(P, &e->els, END_IF + 2)) return NULL;
    }
    jinja__advance(P); /* endif */
    return jinja__expect_block_end(P) ? NULL : e;
}

/* A body that runs in a scope of its own (a set, filter or generation
 * block): Jinja compiles it strictly (see note_unknown in jinja_parse.c),
 * and a break or continue cannot leave it. */
static int p_inner_body(parser *P, nlist *body, const char *const *ends) {
    int loops = P->loop_depth;
    P->soft = 0;
    P->loop_depth = 0;
    int rc = p_body(P, body, ends);
    P->loop_depth = loops;
    return rc;
}

static jnode *p_stmt_(parser *P) {
    token *t = jinja__cur(P);
    int line = t->line;
    if (t->type != TK_NAME)
        return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a tag name after '{%%'", line), NULL;
    jinja__advance(P);
    jnode *e = NULL;
    if (jinja__tok_is(t, TK_NAME, "if")) {
        return p_if(P, line);
    } else if (jinja__tok_is(t, TK_NAME, "for")) {
        e = jinja__new_node(P, S_FOR, line);
        if (!e || p_targets(P, &e->names)) return NULL;
        if (!jinja__is_name(P, "in"))
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected 'in' in a for tag", line), NULL;
        jinja__advance(P);
        if (!(e->a = jinja__p_expr(P, 0))) return NULL;
        P->soft = 0; /* the loop's filter and bodies are a scope of their own */
        if (jinja__is_name(P, "if") && (jinja__advance(P), !(e->b = jinja__p_expr(P, 0)))) return NULL;
        if (jinja__is_name(P, "recursive"))
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: recursive for loops are not supported",
                               line),
                   NULL;
        if (jinja__expect_block_end(P)) return NULL;
        P->loop_depth++;
        int rc = p_body(P, &e->body, END_FOR);
        P->loop_depth--;
        if (rc) return NULL;
        if (jinja__is_name(P, "else")) {
            jinja__advance(P);
            if (jinja__expect_block_end(P) || p_body(P, &e->els, END_FOR2)) return NULL;
        }
        jinja__advance(P);
    } else if (jinja__tok_is(t, TK_NAME, "set")) {
        token *n1 = jinja__cur(P);
        if (n1->type == TK_NAME && jinja__tok_is(jinja__peek(P, 1), TK_OP, ".")) {
            token *n2 = jinja__peek(P, 2);
            if (n2->type != TK_NAME)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: malformed set target", line), NULL;
            e = jinja__new_node(P, S_SETNS, line);
            if (!e) return NULL;
            e->name = n1->p;
            e->nlen = n1->n;
            e->name2 = n2->p;
            e->nlen2 = n2->n;
            jinja__advance(P);
            jinja__advance(P);
            jinja__advance(P);
            if (jinja__expect_op(P, "=") || !(e->a = jinja__p_expr(P, 1))) return NULL;
        } else {
            slist names = {0};
            if (p_targets(P, &names)) {
                free(names.v);
                free(names.len);
                return NULL;
            }
            if (jinja__is_op(P, "=")) {
                jinja__advance(P);
                e = jinja__new_node(P, S_SET, line);
                if (!e) {
                    free(names.v);
                    free(names.len);
                    return NULL;
                }
                e->names = names;
                if (!(e->a = jinja__p_expr(P, 1))) return NULL;
                if (jinja__is_op(P, ","))
                    return jinja__perr(P, line, CK_EUNSUPPORTED,
                                       "line %d: tuple on the right of set is not supported", line),
                           NULL;
            } else if (jinja__cur(P)->type == TK_BLK_E && names.n == 1) {
                e = jinja__new_node(P, S_SETBLOCK, line);
                if (!e) {
                    free(names.v);
                    free(names.len);
                    return NULL;
                }
                e->name = names.v[0];
                e->nlen = names.len[0];
                free(names.v);
                free(names.len);
                jinja__advance(P);
                if (p_inner_body(P, &e->body, END_SET)) return NULL;
                jinja__advance(P);
            } else {
                free(names.v);
                free(names.len);
                return jinja__perr(P, line, CK_EUNSUPPORTED,
                                   "line %d: unsupported form of set (filtered block set?)", line),
                       NULL;
            }
        }
    } else if (jinja__tok_is(t, TK_NAME, "macro")) {
        token *n = jinja__cur(P);
        if (n->type != TK_NAME)
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a macro name", line), NULL;
        jinja__advance(P);
        e = jinja__new_node(P, S_MACRO, line);
        if (!e || jinja__expect_op(P, "(")) return NULL;
        e->name = n->p;
        e->nlen = n->n;
        P->soft = 0;
        while (!jinja__is_op(P, ")")) {
            if (e->names.n && jinja__expect_op(P, ",")) return NULL;
            token *pn = jinja__cur(P);
            if (pn->type != TK_NAME)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a parameter name", line),
                       NULL;
            jinja__advance(P);
            jnode *def = NULL;
            if (jinja__is_op(P, "=")) {
                jinja__advance(P);
                if (!(def = jinja__p_expr(P, 1))) return NULL;
            }
            if (jinja__sl_push(P, &e->names, pn->p, pn->n) || jinja__nl_push(P, &e->kwv, def)) return NULL;
        }
        jinja__advance(P);
        if (jinja__expect_block_end(P)) return NULL;
        int saved = P->loop_depth;
        P->loop_depth = 0;
        int rc = p_body(P, &e->body, END_MACRO);
        P->loop_depth = saved;
        if (rc) return NULL;
        jinja__advance(P);
    } else if (jinja__tok_is(t, TK_NAME, "break") || jinja__tok_is(t, TK_NAME, "continue")) {
        if (!P->loop_depth)
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: '%.*s' outside a for loop", line,
                               (int)t->n, t->p),
                   NULL;
        e = jinja__new_node(P, jinja__tok_is(t, TK_NAME, "break") ? S_BREAK : S_CONTINUE, line);
    } else if (jinja__tok_is(t, TK_NAME, "generation")) {
        /* HF's AssistantTracker: marks assistant text; a call block, whose
         * body renders in a scope of its own */
        e = jinja__new_node(P, S_SCOPE, line);
        if (!e || jinja__expect_block_end(P) || p_inner_body(P, &e->body, END_GEN)) return NULL;
        jinja__advance(P);
    } else if (jinja__tok_is(t, TK_NAME, "filter")) {
        /* {% filter f(args)|g %}body{% endfilter %}: the filters applied to
         * the body's text, E_SLOT standing for it */
        P->soft = 0;
        e = jinja__new_node(P, S_FILTERBLOCK, line);
        jnode *slot = e ? jinja__new_node(P, E_SLOT, line) : NULL;
        if (!slot || !(e->a = jinja__p_filter(P, slot))) return NULL;
        while (jinja__is_op(P, "|"))
            if (jinja__advance(P), !(e->a = jinja__p_filter(P, e->a))) return NULL;
        if (jinja__expect_block_end(P) || p_inner_body(P, &e->body, END_FILTER)) return NULL;
        jinja__advance(P);
    } else {
        return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported tag '%.*s'", line, (int)t->n,
                           t->p),
               NULL;
    }
    if (!e || jinja__expect_block_end(P)) return NULL;
    return e;
}

/* A statement; an `if` makes its condition and branches soft (see
 * note_unknown in jinja_parse.c) and each statement leaves the softness it
 * found. */
static jnode *p_stmt(parser *P) {
    int soft = P->soft;
    if (jinja__tok_is(jinja__cur(P), TK_NAME, "if")) P->soft = 1;
    jnode *e = p_stmt_(P);
    P->soft = soft;
    return e;
}

/* Statements and text up to `{% <one of ends>` (left with the end's name
 * as the current token) or, when ends is NULL, the end of the template. */
static int p_body(parser *P, nlist *body, const char *const *ends) {
    int open_line = jinja__cur(P)->line;
    if (jinja__enter(P)) return P->failed;
    for (;;) {
        token *t = jinja__cur(P);
        jnode *e = NULL;
        if (t->type == TK_EOF) {
            if (!ends) break;
            int last = 0;
            while (ends[last + 1]) last++;
            jinja__perr(P, open_line, CK_EUNSUPPORTED,
                        "line %d: missing {%% %s %%} for the block opened here", open_line, ends[last]);
            break;
        }
        if (t->type == TK_DATA) {
            jinja__advance(P);
            jinja_value *v = jinja__jv_str_plain(t->p, t->n);
            if (!v) {
                jinja__perr(P, t->line, CK_ENOMEM, "%s: out of memory", __func__);
                break;
            }
            if (!(e = jinja__lit_node(P, t->line, v))) break;
            e->kind = S_TEXT;
        } else if (t->type == TK_VAR_B) {
            jinja__advance(P);
            e = jinja__new_node(P, S_OUT, t->line);
            if (!e || !(e->a = jinja__p_expr(P, 1))) break;
            if (jinja__cur(P)->type != TK_VAR_E) {
                char b[64];
                jinja__perr(P, jinja__cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '}}', found %s",
                            jinja__cur(P)->line, jinja__tok_desc(jinja__cur(P), b, sizeof b));
                break;
            }
            jinja__advance(P);
        } else if (t->type == TK_BLK_B) {
            token *n = jinja__peek(P, 1);
            if (ends && n->type == TK_NAME && jinja__table_find(ends, n->p, n->n) >= 0) {
                jinja__advance(P);
                break;
            }
            if (n->type == TK_NAME &&
                (jinja__tok_is(n, TK_NAME, "endif") || jinja__tok_is(n, TK_NAME, "endfor") ||
                 jinja__tok_is(n, TK_NAME, "elif") || jinja__tok_is(n, TK_NAME, "else") ||
                 jinja__tok_is(n, TK_NAME, "endset") || jinja__tok_is(n, TK_NAME, "endmacro") ||
                 jinja__tok_is(n, TK_NAME, "endgeneration") || jinja__tok_is(n, TK_NAME, "endfilter"))) {
                jinja__perr(P, n->line, CK_EUNSUPPORTED, "line %d: unexpected '%.*s'", n->line, (int)n->n,
                            n->p);
                break;
            }
            jinja__advance(P);
            if (!(e = p_stmt(P))) break;
        } else {
            char b[64];
            jinja__perr(P, t->line, CK_EUNSUPPORTED, "line %d: unexpected %s", t->line,
                        jinja__tok_desc(t, b, sizeof b));
            break;
        }
        if (jinja__nl_push(P, body, e)) break;
    }
    P->depth--;
    return P->failed;
}

void jinja_template_free(jinja_template *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_nodes; i++) {
        jnode *e = t->nodes[i];
        free(e->args.v);
        free(e->kwv.v);
        free(e->body.v);
        free(e->els.v);
        free(e->kw.v);
        free(e->kw.len);
        free(e->names.v);
        free(e->names.len);
        free(e);
    }
    free(t->nodes);
    for (size_t i = 0; i < t->n_lits; i++) {
        t->lits[i]->refs = 1;
        jinja_release(t->lits[i]);
    }
    free(t->lits);
    free(t->src);
    free(t);
}

int jinja_parse(const char *src, size_t len, const jinja_limits *limits, jinja_template **out,
                jinja_error *err) {
    jinja__clear_err(err);
    if (out) *out = NULL;
    parser P = {0};
    P.err = err;
    if (!out || (!src && len)) {
        jinja__perr(&P, 0, CK_EINVAL, "%s: invalid argument", __func__);
        if (err) err->kind = jinja__k_error;
        return CK_EINVAL;
    }
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) return jinja__perr(&P, 0, CK_ENOMEM, "%s: out of memory", __func__);
    if (limits)
        t->lim = *limits;
    else
        jinja_limits_default(&t->lim);
    P.t = t;
    if (len > t->lim.max_template) {
        jinja__perr(&P, 0, CK_ETOOLONG, "%s: template of %zu bytes is over the limit of %zu", __func__, len,
                    t->lim.max_template);
        goto fail;
    }
    /* newlines normalised to \n; one trailing newline dropped (Jinja's
     * keep_trailing_newline=False) */
    t->src = malloc(len + 1);
    if (!t->src) {
        jinja__perr(&P, 0, CK_ENOMEM, "%s: out of memory", __func__);
        goto fail;
    }
    size_t j = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            t->src[j++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else
            t->src[j++] = src[i];
    }
    if (j && t->src[j - 1] == '\n') j--;
    t->src[j] = 0;
    t->src_n = j;
    if (jinja__lex(&P)) goto fail;
    t->root = jinja__new_node(&P, S_BODY, 1);
    if (!t->root || p_body(&P, &t->root->body, NULL)) goto fail;
    if (P.n_unk) {
        const jnode *x = P.unk[0];
        jinja__perr(&P, x->line, CK_EUNSUPPORTED, "line %d: unsupported %s '%.*s'", x->line,
                    x->kind == E_FILTER ? "filter" : "test", (int)x->nlen, x->name);
        goto fail;
    }
    free(P.tk);
    free(P.unk);
    *out = t;
    return 0;
fail:
    free(P.tk);
    free(P.unk);
    jinja_template_free(t);
    return P.failed ? P.failed : CK_EUNSUPPORTED;
}
