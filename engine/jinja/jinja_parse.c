/* jinja_parse.c - the template's parser, and jinja_parse (see jinja_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja_int.h"

/* =========================================================================
 * the parser: tokens to an AST, following jinja2/parser.py's grammar
 *
 *   expr    := or ('if' or ('else' expr)?)?
 *   or      := and ('or' and)*          and := not ('and' not)*
 *   not     := 'not' not | compare      compare := math1 (cmpop math1)*
 *   math1   := concat (('+'|'-') concat)*   concat := math2 ('~' math2)*
 *   math2   := pow (('*'|'/'|'//'|'%') pow)*   pow := unary ('**' unary)*
 *   unary   := ('-'|'+') unary | primary postfix* (filter | test | call)*
 *
 * so a filter binds tighter than any operator: `a + b | trim` trims b. */

static jnode *new_node(parser *P, int kind, int line) {
    jinja_template *t = P->t;
    if (t->n_nodes == t->cap_nodes) {
        size_t nc = t->cap_nodes ? t->cap_nodes * 2 : 128;
        jnode **nn = realloc(t->nodes, nc * sizeof *nn);
        if (!nn) {
            jinja__perr(P, line, CK_ENOMEM, "%s: out of memory", __func__);
            return NULL;
        }
        t->nodes = nn;
        t->cap_nodes = nc;
    }
    jnode *e = calloc(1, sizeof *e);
    if (!e) {
        jinja__perr(P, line, CK_ENOMEM, "%s: out of memory", __func__);
        return NULL;
    }
    e->kind = kind;
    e->line = line;
    t->nodes[t->n_nodes++] = e;
    return e;
}

static int nl_push(parser *P, nlist *l, jnode *e) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        jnode **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return jinja__perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = e;
    return 0;
}

static int sl_push(parser *P, slist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        const char **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (nv) l->v = nv;
        size_t *nn = realloc(l->len, (size_t)nc * sizeof *nn);
        if (nn) l->len = nn;
        if (!nv || !nn) return jinja__perr(P, 0, CK_ENOMEM, "%s: out of memory", __func__);
        l->cap = nc;
    }
    l->v[l->n] = s;
    l->len[l->n++] = n;
    return 0;
}

static token *cur(parser *P) { return &P->tk[P->pos]; }
static token *peek(parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->tk[i < P->n_tk ? i : P->n_tk - 1];
}
static void advance(parser *P) {
    if (P->tk[P->pos].type != TK_EOF) P->pos++;
}
static int tok_is(const token *t, int type, const char *s) {
    return t->type == type && (!s || (t->n == strlen(s) && memcmp(t->p, s, t->n) == 0));
}
static int is_op(parser *P, const char *s) { return tok_is(cur(P), TK_OP, s); }
static int is_name(parser *P, const char *s) { return tok_is(cur(P), TK_NAME, s); }

static const char *tok_desc(const token *t, char *buf, size_t n) {
    switch (t->type) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "text";
    case TK_VAR_B: return "'{{'";
    case TK_VAR_E: return "'}}'";
    case TK_BLK_B: return "'{%'";
    case TK_BLK_E: return "'%}'";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}

static int expect_op(parser *P, const char *s) {
    if (is_op(P, s)) {
        advance(P);
        return 0;
    }
    char b[64];
    return jinja__perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '%s', found %s", cur(P)->line, s,
                       tok_desc(cur(P), b, sizeof b));
}

static int expect_block_end(parser *P) {
    if (cur(P)->type == TK_BLK_E) {
        advance(P);
        return 0;
    }
    char b[64];
    return jinja__perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '%%}', found %s", cur(P)->line,
                       tok_desc(cur(P), b, sizeof b));
}

static int enter(parser *P) {
    if (++P->depth > P->t->lim.max_depth)
        return jinja__perr(P, cur(P)->line, CK_ERANGE, "line %d: nesting deeper than %d", cur(P)->line,
                           P->t->lim.max_depth);
    return 0;
}

/* The filters, tests and methods the renderer has: a name outside these
 * tables is refused when parsing (as Jinja refuses an unknown filter). */
const char *const jinja__filters[] = {
    "abs",        "capitalize", "count",      "d",       "default", "first", "float",
    "int",        "items",      "join",       "last",    "length",  "list",  "lower",
    "map",        "reject",     "rejectattr", "replace", "reverse", "safe",  "select",
    "selectattr", "string",     "title",      "tojson",  "trim",    "upper", NULL};
const char *const jinja__tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq",       "equalto",  "even",   "false", "float",
    "ge",      "gt",       "in",      "integer",     "iterable", "le",       "lower",  "lt",    "mapping",
    "ne",      "none",     "number",  "odd",         "sameas",   "sequence", "string", "true",  "undefined",
    "upper",   "==",       "!=",      "<",           "<=",       ">",        ">=",     NULL};

int jinja__table_find(const char *const *tab, const char *s, size_t n) {
    for (int i = 0; tab[i]; i++)
        if (strlen(tab[i]) == n && memcmp(tab[i], s, n) == 0) return i;
    return -1;
}

static jnode *p_expr(parser *P, int with_cond);
static jnode *p_unary(parser *P, int with_filter);

static jnode *lit_node(parser *P, int line, jinja_value *v) {
    if (!v || !jinja__keep_lit(P, v)) return NULL;
    jnode *e = new_node(P, E_LIT, line);
    if (e) e->lit = v;
    return e;
}

/* Call arguments after '(' up to ')': positional, then name=value. */
static int p_call_args(parser *P, jnode *e) {
    if (expect_op(P, "(")) return P->failed;
    while (!is_op(P, ")")) {
        if (e->args.n + e->kwv.n > 0 && expect_op(P, ",")) return P->failed;
        if (is_op(P, ")")) break; /* trailing comma */
        if (is_op(P, "*") || is_op(P, "**"))
            return jinja__perr(P, cur(P)->line, CK_EUNSUPPORTED,
                               "line %d: *args and **kwargs are not supported", cur(P)->line);
        if (cur(P)->type == TK_NAME && tok_is(peek(P, 1), TK_OP, "=")) {
            token *nt = cur(P);
            advance(P);
            advance(P);
            jnode *v = p_expr(P, 1);
            if (!v || sl_push(P, &e->kw, nt->p, nt->n) || nl_push(P, &e->kwv, v))
                return P->failed ? P->failed : -1;
        } else {
            if (e->kwv.n)
                return jinja__perr(P, cur(P)->line, CK_EUNSUPPORTED,
                                   "line %d: positional argument after keyword argument", cur(P)->line);
            jnode *v = p_expr(P, 1);
            if (!v || nl_push(P, &e->args, v)) return P->failed ? P->failed : -1;
        }
    }
    advance(P);
    return 0;
}

static jnode *p_primary(parser *P) {
    token *t = cur(P);
    int line = t->line;
    if (enter(P)) return NULL;
    jnode *e = NULL;
    if (t->type == TK_NAME) {
        advance(P);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True"))
            e = lit_node(P, line, jinja_bool(1));
        else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False"))
            e = lit_node(P, line, jinja_bool(0));
        else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None"))
            e = lit_node(P, line, jinja_none());
        else if ((e = new_node(P, E_NAME, line))) {
            e->name = t->p;
            e->nlen = t->n;
        }
    } else if (t->type == TK_STR) {
        advance(P);
        if (cur(P)->type != TK_STR) {
            if ((e = new_node(P, E_LIT, line))) e->lit = t->lit;
        } else {
            /* adjacent literals concatenate, as in Python */
            sbuf b = {0};
            b.max = (size_t)-1;
            int rc = jinja__sb_add(&b, t->lit->u.s.s, t->lit->u.s.n);
            while (rc == 0 && cur(P)->type == TK_STR) {
                rc = jinja__sb_add(&b, cur(P)->lit->u.s.s, cur(P)->lit->u.s.n);
                advance(P);
            }
            if (rc)
                jinja__perr(P, line, CK_ENOMEM, "%s: out of memory", __func__);
            else
                e = lit_node(P, line, jinja__jv_str_plain(b.p, b.n));
            free(b.p);
        }
    } else if (t->type == TK_INT) {
        advance(P);
        e = lit_node(P, line, jinja_int(t->i));
    } else if (t->type == TK_FLOAT) {
        advance(P);
        e = lit_node(P, line, jinja_float(t->f));
    } else if (tok_is(t, TK_OP, "(")) {
        advance(P);
        if (is_op(P, ")")) {
            advance(P);
            if ((e = new_node(P, E_TUPLE, line))) e->op = 0;
        } else {
            jnode *first = p_expr(P, 1);
            if (!first) goto out;
            if (is_op(P, ",")) {
                e = new_node(P, E_TUPLE, line);
                if (!e || nl_push(P, &e->args, first)) {
                    e = NULL;
                    goto out;
                }
                while (is_op(P, ",")) {
                    advance(P);
                    if (is_op(P, ")")) break;
                    jnode *x = p_expr(P, 1);
                    if (!x || nl_push(P, &e->args, x)) {
                        e = NULL;
                        goto out;
                    }
                }
            } else {
                e = first;
            }
            if (expect_op(P, ")")) e = NULL;
        }
    } else if (tok_is(t, TK_OP, "[")) {
        advance(P);
        e = new_node(P, E_LIST, line);
        while (e && !is_op(P, "]")) {
            if (e->args.n && expect_op(P, ",")) {
                e = NULL;
                break;
            }
            if (is_op(P, "]")) break;
            jnode *x = p_expr(P, 1);
            if (!x || nl_push(P, &e->args, x)) e = NULL;
        }
        if (e) advance(P);
    } else if (tok_is(t, TK_OP, "{")) {
        advance(P);
        e = new_node(P, E_DICT, line);
        while (e && !is_op(P, "}")) {
            if (e->args.n && expect_op(P, ",")) {
                e = NULL;
                break;
            }
            if (is_op(P, "}")) break;
            jnode *k = p_expr(P, 1);
            if (!k || expect_op(P, ":")) {
                e = NULL;
                break;
            }
            jnode *v = p_expr(P, 1);
            if (!v || nl_push(P, &e->args, k) || nl_push(P, &e->kwv, v)) e = NULL;
        }
        if (e) advance(P);
    } else {
        char b[64];
        jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: unexpected %s in an expression", line,
                    tok_desc(t, b, sizeof b));
    }
out:
    P->depth--;
    return P->failed ? NULL : e;
}

/* After '[': an index or a slice, up to ']'. */
static jnode *p_subscript(parser *P, jnode *obj) {
    int line = cur(P)->line;
    advance(P);
    jnode *parts[3] = {NULL, NULL, NULL};
    int nparts = 0, is_slice = 0;
    for (;;) {
        if (!is_op(P, ":") && !is_op(P, "]")) {
            if (nparts > 2) break;
            parts[nparts] = p_expr(P, 1);
            if (!parts[nparts]) return NULL;
        }
        if (is_op(P, ":")) {
            is_slice = 1;
            if (++nparts > 2)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: malformed slice", line), NULL;
            advance(P);
            continue;
        }
        break;
    }
    if (expect_op(P, "]")) return NULL;
    /* x[] is not Jinja: an index needs its expression (a slice may omit all three) */
    if (!is_slice && !parts[0])
        return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: empty subscript []", line), NULL;
    jnode *e = new_node(P, is_slice ? E_SLICE : E_ITEM, line);
    if (!e) return NULL;
    e->a = obj;
    e->b = parts[0];
    e->c = parts[1];
    e->d = parts[2];
    return e;
}

static jnode *p_postfix(parser *P, jnode *e) {
    while (e) {
        int line = cur(P)->line;
        if (is_op(P, ".")) {
            advance(P);
            token *t = cur(P);
            if (t->type == TK_NAME) {
                advance(P);
                jnode *x = new_node(P, E_ATTR, line);
                if (!x) return NULL;
                x->a = e;
                x->name = t->p;
                x->nlen = t->n;
                e = x;
            } else if (t->type == TK_INT) {
                advance(P);
                jnode *x = new_node(P, E_ITEM, line);
                if (!x) return NULL;
                x->a = e;
                x->b = lit_node(P, line, jinja_int(t->i));
                if (!x->b) return NULL;
                e = x;
            } else {
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a name after '.'", line),
                       NULL;
            }
        } else if (is_op(P, "[")) {
            e = p_subscript(P, e);
        } else if (is_op(P, "(")) {
            jnode *x = new_node(P, E_CALL, line);
            if (!x) return NULL;
            x->a = e;
            if (p_call_args(P, x)) return NULL;
            e = x;
        } else {
            break;
        }
    }
    return e;
}

static jnode *p_filter_test(parser *P, jnode *e) {
    while (e) {
        int line = cur(P)->line;
        if (is_op(P, "|")) {
            advance(P);
            token *t = cur(P);
            if (t->type != TK_NAME)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a filter name", line), NULL;
            int id = jinja__table_find(jinja__filters, t->p, t->n);
            if (id < 0)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported filter '%.*s'", line,
                                   (int)t->n, t->p),
                       NULL;
            advance(P);
            jnode *x = new_node(P, E_FILTER, line);
            if (!x) return NULL;
            x->a = e;
            x->name = t->p;
            x->nlen = t->n;
            x->fid = id;
            if (is_op(P, "(") && p_call_args(P, x)) return NULL;
            e = x;
        } else if (is_name(P, "is")) {
            advance(P);
            int neg = 0;
            if (is_name(P, "not")) {
                neg = 1;
                advance(P);
            }
            token *t = cur(P);
            if (t->type != TK_NAME && !(t->type == TK_OP && jinja__table_find(jinja__tests, t->p, t->n) >= 0))
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a test name after 'is'",
                                   line),
                       NULL;
            int id = jinja__table_find(jinja__tests, t->p, t->n);
            if (id < 0)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported test '%.*s'", line,
                                   (int)t->n, t->p),
                       NULL;
            advance(P);
            jnode *x = new_node(P, E_TEST, line);
            if (!x) return NULL;
            x->a = e;
            x->name = t->p;
            x->nlen = t->n;
            x->fid = id;
            x->op = neg;
            token *c = cur(P);
            if (tok_is(c, TK_OP, "(")) {
                if (p_call_args(P, x)) return NULL;
            } else if ((c->type == TK_NAME || c->type == TK_STR || c->type == TK_INT || c->type == TK_FLOAT ||
                        tok_is(c, TK_OP, "[") || tok_is(c, TK_OP, "{")) &&
                       !tok_is(c, TK_NAME, "else") && !tok_is(c, TK_NAME, "or") &&
                       !tok_is(c, TK_NAME, "and")) {
                if (tok_is(c, TK_NAME, "is"))
                    return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: tests cannot be chained", line),
                           NULL;
                /* one bare argument: `x is divisibleby 3` */
                jnode *arg = p_postfix(P, p_primary(P));
                if (!arg || nl_push(P, &x->args, arg)) return NULL;
            }
            e = x;
        } else if (is_op(P, "(")) {
            jnode *x = new_node(P, E_CALL, line);
            if (!x) return NULL;
            x->a = e;
            if (p_call_args(P, x)) return NULL;
            e = x;
        } else {
            break;
        }
    }
    return e;
}

static jnode *p_unary(parser *P, int with_filter) {
    int line = cur(P)->line;
    if (enter(P)) return NULL;
    jnode *e;
    if (is_op(P, "-") || is_op(P, "+")) {
        int neg = is_op(P, "-");
        advance(P);
        jnode *x = p_unary(P, 0);
        e = x ? new_node(P, neg ? E_NEG : E_POS, line) : NULL;
        if (e) e->a = x;
    } else {
        e = p_primary(P);
    }
    e = p_postfix(P, e);
    if (with_filter) e = p_filter_test(P, e);
    P->depth--;
    return P->failed ? NULL : e;
}

static jnode *bin(parser *P, int line, int op, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *e = new_node(P, E_BIN, line);
    if (e) {
        e->op = op;
        e->a = a;
        e->b = b;
    }
    return e;
}

static jnode *p_pow(parser *P) {
    jnode *e = p_unary(P, 1);
    while (e && is_op(P, "**")) {
        int l = cur(P)->line;
        advance(P);
        e = bin(P, l, OP_POW, e, p_unary(P, 1));
    }
    return e;
}
static jnode *p_math2(parser *P) {
    jnode *e = p_pow(P);
    for (;;) {
        int op = is_op(P, "*")    ? OP_MUL
                 : is_op(P, "/")  ? OP_DIV
                 : is_op(P, "//") ? OP_FLOORDIV
                 : is_op(P, "%")  ? OP_MOD
                                  : -1;
        if (!e || op < 0) return e;
        int l = cur(P)->line;
        advance(P);
        e = bin(P, l, op, e, p_pow(P));
    }
}
static jnode *p_concat(parser *P) {
    jnode *e = p_math2(P);
    while (e && is_op(P, "~")) {
        int l = cur(P)->line;
        advance(P);
        e = bin(P, l, OP_CONCAT, e, p_math2(P));
    }
    return e;
}
static jnode *p_math1(parser *P) {
    jnode *e = p_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : -1;
        if (!e || op < 0) return e;
        int l = cur(P)->line;
        advance(P);
        e = bin(P, l, op, e, p_concat(P));
    }
}
/* a < b < c is (a < b) and (b < c), as in Python (b evaluated twice: no
 * expression here has side effects). */
static jnode *p_compare(parser *P) {
    jnode *e = p_math1(P), *prev = e, *chain = NULL;
    for (;;) {
        int l = cur(P)->line, op = -1;
        if (is_op(P, "=="))
            op = OP_EQ;
        else if (is_op(P, "!="))
            op = OP_NE;
        else if (is_op(P, "<"))
            op = OP_LT;
        else if (is_op(P, "<="))
            op = OP_LE;
        else if (is_op(P, ">"))
            op = OP_GT;
        else if (is_op(P, ">="))
            op = OP_GE;
        else if (is_name(P, "in"))
            op = OP_IN;
        else if (is_name(P, "not") && tok_is(peek(P, 1), TK_NAME, "in")) {
            op = OP_NOTIN;
            advance(P);
        }
        if (!prev || op < 0) break;
        advance(P);
        jnode *rhs = p_math1(P);
        jnode *c = bin(P, l, op, prev, rhs);
        if (!c) return NULL;
        if (!chain)
            chain = c;
        else {
            jnode *a = new_node(P, E_AND, l);
            if (!a) return NULL;
            a->a = chain;
            a->b = c;
            chain = a;
        }
        prev = rhs;
    }
    return P->failed ? NULL : chain ? chain : e;
}
static jnode *p_not(parser *P) {
    if (is_name(P, "not")) {
        int l = cur(P)->line;
        advance(P);
        if (enter(P)) return NULL;
        jnode *x = p_not(P);
        P->depth--;
        jnode *e = x ? new_node(P, E_NOT, l) : NULL;
        if (e) e->a = x;
        return e;
    }
    return p_compare(P);
}
static jnode *p_and(parser *P) {
    jnode *e = p_not(P);
    while (e && is_name(P, "and")) {
        int l = cur(P)->line;
        advance(P);
        jnode *r = p_not(P), *x = r ? new_node(P, E_AND, l) : NULL;
        if (!x) return NULL;
        x->a = e;
        x->b = r;
        e = x;
    }
    return e;
}
static jnode *p_or(parser *P) {
    jnode *e = p_and(P);
    while (e && is_name(P, "or")) {
        int l = cur(P)->line;
        advance(P);
        jnode *r = p_and(P), *x = r ? new_node(P, E_OR, l) : NULL;
        if (!x) return NULL;
        x->a = e;
        x->b = r;
        e = x;
    }
    return e;
}
static jnode *p_expr(parser *P, int with_cond) {
    if (enter(P)) return NULL;
    jnode *e = p_or(P);
    while (with_cond && e && is_name(P, "if")) {
        int l = cur(P)->line;
        advance(P);
        jnode *c = p_or(P), *other = NULL;
        if (!c) {
            e = NULL;
            break;
        }
        if (is_name(P, "else")) {
            advance(P);
            if (!(other = p_expr(P, 1))) {
                e = NULL;
                break;
            }
        }
        jnode *x = new_node(P, E_COND, l);
        if (!x) {
            e = NULL;
            break;
        }
        x->a = c;
        x->b = e;
        x->c = other;
        e = x;
    }
    P->depth--;
    return P->failed ? NULL : e;
}

/* ---- statements */

static int p_body(parser *P, nlist *body, const char *const *ends);

/* NAME (',' NAME)* into names: for-loop and set targets, macro parameters */
static int p_targets(parser *P, slist *names) {
    do {
        if (names->n) advance(P);
        token *t = cur(P);
        if (t->type != TK_NAME)
            return jinja__perr(P, t->line, CK_EUNSUPPORTED, "line %d: expected a variable name", t->line);
        if (sl_push(P, names, t->p, t->n)) return P->failed;
        advance(P);
    } while (is_op(P, ","));
    return 0;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};

/* After `{% if` or `{% elif`: the condition, the body and what follows. */
static jnode *p_if(parser *P, int line) {
    jnode *e = new_node(P, S_IF, line);
    if (!e || !(e->a = p_expr(P, 0)) || expect_block_end(P) || p_body(P, &e->body, END_IF)) return NULL;
    if (is_name(P, "elif")) {
        int l = cur(P)->line;
        advance(P);
        jnode *x = p_if(P, l);
        if (!x || nl_push(P, &e->els, x)) return NULL;
        return e; /* the nested if consumed endif */
    }
    if (is_name(P, "else")) {
        advance(P);
        if (expect_block_end(P) || p_body(P, &e->els, END_IF + 2)) return NULL;
    }
    advance(P); /* endif */
    return expect_block_end(P) ? NULL : e;
}

static jnode *p_stmt(parser *P) {
    token *t = cur(P);
    int line = t->line;
    if (t->type != TK_NAME)
        return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a tag name after '{%%'", line), NULL;
    advance(P);
    jnode *e = NULL;
    if (tok_is(t, TK_NAME, "if")) {
        return p_if(P, line);
    } else if (tok_is(t, TK_NAME, "for")) {
        e = new_node(P, S_FOR, line);
        if (!e || p_targets(P, &e->names)) return NULL;
        if (!is_name(P, "in"))
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected 'in' in a for tag", line), NULL;
        advance(P);
        if (!(e->a = p_expr(P, 0))) return NULL;
        if (is_name(P, "if") && (advance(P), !(e->b = p_expr(P, 0)))) return NULL;
        if (is_name(P, "recursive"))
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: recursive for loops are not supported",
                               line),
                   NULL;
        if (expect_block_end(P)) return NULL;
        P->loop_depth++;
        int rc = p_body(P, &e->body, END_FOR);
        P->loop_depth--;
        if (rc) return NULL;
        if (is_name(P, "else")) {
            advance(P);
            if (expect_block_end(P) || p_body(P, &e->els, END_FOR2)) return NULL;
        }
        advance(P);
    } else if (tok_is(t, TK_NAME, "set")) {
        token *n1 = cur(P);
        if (n1->type == TK_NAME && tok_is(peek(P, 1), TK_OP, ".")) {
            token *n2 = peek(P, 2);
            if (n2->type != TK_NAME)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: malformed set target", line), NULL;
            e = new_node(P, S_SETNS, line);
            if (!e) return NULL;
            e->name = n1->p;
            e->nlen = n1->n;
            e->name2 = n2->p;
            e->nlen2 = n2->n;
            advance(P);
            advance(P);
            advance(P);
            if (expect_op(P, "=") || !(e->a = p_expr(P, 1))) return NULL;
        } else {
            slist names = {0};
            if (p_targets(P, &names)) {
                free(names.v);
                free(names.len);
                return NULL;
            }
            if (is_op(P, "=")) {
                advance(P);
                e = new_node(P, S_SET, line);
                if (!e) {
                    free(names.v);
                    free(names.len);
                    return NULL;
                }
                e->names = names;
                if (!(e->a = p_expr(P, 1))) return NULL;
                if (is_op(P, ","))
                    return jinja__perr(P, line, CK_EUNSUPPORTED,
                                       "line %d: tuple on the right of set is not supported", line),
                           NULL;
            } else if (cur(P)->type == TK_BLK_E && names.n == 1) {
                e = new_node(P, S_SETBLOCK, line);
                if (!e) {
                    free(names.v);
                    free(names.len);
                    return NULL;
                }
                e->name = names.v[0];
                e->nlen = names.len[0];
                free(names.v);
                free(names.len);
                advance(P);
                if (p_body(P, &e->body, END_SET)) return NULL;
                advance(P);
            } else {
                free(names.v);
                free(names.len);
                return jinja__perr(P, line, CK_EUNSUPPORTED,
                                   "line %d: unsupported form of set (filtered block set?)", line),
                       NULL;
            }
        }
    } else if (tok_is(t, TK_NAME, "macro")) {
        token *n = cur(P);
        if (n->type != TK_NAME)
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a macro name", line), NULL;
        advance(P);
        e = new_node(P, S_MACRO, line);
        if (!e || expect_op(P, "(")) return NULL;
        e->name = n->p;
        e->nlen = n->n;
        while (!is_op(P, ")")) {
            if (e->names.n && expect_op(P, ",")) return NULL;
            token *pn = cur(P);
            if (pn->type != TK_NAME)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a parameter name", line),
                       NULL;
            advance(P);
            jnode *def = NULL;
            if (is_op(P, "=")) {
                advance(P);
                if (!(def = p_expr(P, 1))) return NULL;
            }
            if (sl_push(P, &e->names, pn->p, pn->n) || nl_push(P, &e->kwv, def)) return NULL;
        }
        advance(P);
        if (expect_block_end(P)) return NULL;
        int saved = P->loop_depth;
        P->loop_depth = 0;
        int rc = p_body(P, &e->body, END_MACRO);
        P->loop_depth = saved;
        if (rc) return NULL;
        advance(P);
    } else if (tok_is(t, TK_NAME, "break") || tok_is(t, TK_NAME, "continue")) {
        if (!P->loop_depth)
            return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: '%.*s' outside a for loop", line,
                               (int)t->n, t->p),
                   NULL;
        e = new_node(P, tok_is(t, TK_NAME, "break") ? S_BREAK : S_CONTINUE, line);
    } else if (tok_is(t, TK_NAME, "generation")) {
        /* HF's AssistantTracker: marks assistant text, renders its body */
        e = new_node(P, S_BODY, line);
        if (!e || expect_block_end(P) || p_body(P, &e->body, END_GEN)) return NULL;
        advance(P);
    } else {
        return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: unsupported tag '%.*s'", line, (int)t->n,
                           t->p),
               NULL;
    }
    if (!e || expect_block_end(P)) return NULL;
    return e;
}

/* Statements and text up to `{% <one of ends>` (left with the end's name
 * as the current token) or, when ends is NULL, the end of the template. */
static int p_body(parser *P, nlist *body, const char *const *ends) {
    int open_line = cur(P)->line;
    if (enter(P)) return P->failed;
    for (;;) {
        token *t = cur(P);
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
            advance(P);
            jinja_value *v = jinja__jv_str_plain(t->p, t->n);
            if (!v) {
                jinja__perr(P, t->line, CK_ENOMEM, "%s: out of memory", __func__);
                break;
            }
            if (!(e = lit_node(P, t->line, v))) break;
            e->kind = S_TEXT;
        } else if (t->type == TK_VAR_B) {
            advance(P);
            e = new_node(P, S_OUT, t->line);
            if (!e || !(e->a = p_expr(P, 1))) break;
            if (cur(P)->type != TK_VAR_E) {
                char b[64];
                jinja__perr(P, cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '}}', found %s",
                            cur(P)->line, tok_desc(cur(P), b, sizeof b));
                break;
            }
            advance(P);
        } else if (t->type == TK_BLK_B) {
            token *n = peek(P, 1);
            if (ends && n->type == TK_NAME && jinja__table_find(ends, n->p, n->n) >= 0) {
                advance(P);
                break;
            }
            if (n->type == TK_NAME &&
                (tok_is(n, TK_NAME, "endif") || tok_is(n, TK_NAME, "endfor") || tok_is(n, TK_NAME, "elif") ||
                 tok_is(n, TK_NAME, "else") || tok_is(n, TK_NAME, "endset") ||
                 tok_is(n, TK_NAME, "endmacro") || tok_is(n, TK_NAME, "endgeneration"))) {
                jinja__perr(P, n->line, CK_EUNSUPPORTED, "line %d: unexpected '%.*s'", n->line, (int)n->n,
                            n->p);
                break;
            }
            advance(P);
            if (!(e = p_stmt(P))) break;
        } else {
            char b[64];
            jinja__perr(P, t->line, CK_EUNSUPPORTED, "line %d: unexpected %s", t->line,
                        tok_desc(t, b, sizeof b));
            break;
        }
        if (nl_push(P, body, e)) break;
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
    t->root = new_node(&P, S_BODY, 1);
    if (!t->root || p_body(&P, &t->root->body, NULL)) goto fail;
    free(P.tk);
    *out = t;
    return 0;
fail:
    free(P.tk);
    jinja_template_free(t);
    return P.failed ? P.failed : CK_EUNSUPPORTED;
}
