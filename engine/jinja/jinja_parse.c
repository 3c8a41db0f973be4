/* jinja_parse.c - the parser's tokens and expressions (see jinja_int.h);
 * statements and jinja_parse are jinja_stmt.c. */
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

jnode *jinja__new_node(parser *P, int kind, int line) {
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

int jinja__nl_push(parser *P, nlist *l, jnode *e) {
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

int jinja__sl_push(parser *P, slist *l, const char *s, size_t n) {
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

token *jinja__cur(parser *P) { return &P->tk[P->pos]; }
token *jinja__peek(parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->tk[i < P->n_tk ? i : P->n_tk - 1];
}
void jinja__advance(parser *P) {
    if (P->tk[P->pos].type != TK_EOF) P->pos++;
}
int jinja__tok_is(const token *t, int type, const char *s) {
    return t->type == type && (!s || (t->n == strlen(s) && memcmp(t->p, s, t->n) == 0));
}
int jinja__is_op(parser *P, const char *s) { return jinja__tok_is(jinja__cur(P), TK_OP, s); }
int jinja__is_name(parser *P, const char *s) { return jinja__tok_is(jinja__cur(P), TK_NAME, s); }

const char *jinja__tok_desc(const token *t, char *buf, size_t n) {
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

int jinja__expect_op(parser *P, const char *s) {
    if (jinja__is_op(P, s)) {
        jinja__advance(P);
        return 0;
    }
    char b[64];
    return jinja__perr(P, jinja__cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '%s', found %s",
                       jinja__cur(P)->line, s, jinja__tok_desc(jinja__cur(P), b, sizeof b));
}

int jinja__expect_block_end(parser *P) {
    if (jinja__cur(P)->type == TK_BLK_E) {
        jinja__advance(P);
        return 0;
    }
    char b[64];
    return jinja__perr(P, jinja__cur(P)->line, CK_EUNSUPPORTED, "line %d: expected '%%}', found %s",
                       jinja__cur(P)->line, jinja__tok_desc(jinja__cur(P), b, sizeof b));
}

int jinja__enter(parser *P) {
    if (++P->depth > P->t->lim.max_depth)
        return jinja__perr(P, jinja__cur(P)->line, CK_ERANGE, "line %d: nesting deeper than %d",
                           jinja__cur(P)->line, P->t->lim.max_depth);
    return 0;
}

/* The filters, tests and methods the renderer has: a name outside these
 * tables is refused when parsing (as Jinja refuses an unknown filter). */
const char *const jinja__filters[] = {
    "abs",    "capitalize", "count",  "d",          "default", "dictsort", "first", "float",  "from_json",
    "indent", "int",        "items",  "join",       "last",    "length",   "list",  "lower",  "map",
    "max",    "min",        "reject", "rejectattr", "replace", "reverse",  "safe",  "select", "selectattr",
    "sort",   "string",     "title",  "tojson",     "trim",    "unique",   "upper", NULL};
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

static jnode *p_unary(parser *P, int with_filter);

jnode *jinja__lit_node(parser *P, int line, jinja_value *v) {
    if (!v || !jinja__keep_lit(P, v)) return NULL;
    jnode *e = jinja__new_node(P, E_LIT, line);
    if (e) e->lit = v;
    return e;
}

/* Call arguments after '(' up to ')': positional, then name=value. */
static int p_call_args(parser *P, jnode *e) {
    if (jinja__expect_op(P, "(")) return P->failed;
    while (!jinja__is_op(P, ")")) {
        if (e->args.n + e->kwv.n > 0 && jinja__expect_op(P, ",")) return P->failed;
        if (jinja__is_op(P, ")")) break; /* trailing comma */
        if (jinja__is_op(P, "*") || jinja__is_op(P, "**"))
            return jinja__perr(P, jinja__cur(P)->line, CK_EUNSUPPORTED,
                               "line %d: *args and **kwargs are not supported", jinja__cur(P)->line);
        if (jinja__cur(P)->type == TK_NAME && jinja__tok_is(jinja__peek(P, 1), TK_OP, "=")) {
            token *nt = jinja__cur(P);
            jinja__advance(P);
            jinja__advance(P);
            jnode *v = jinja__p_expr(P, 1);
            if (!v || jinja__sl_push(P, &e->kw, nt->p, nt->n) || jinja__nl_push(P, &e->kwv, v))
                return P->failed ? P->failed : -1;
        } else {
            if (e->kwv.n)
                return jinja__perr(P, jinja__cur(P)->line, CK_EUNSUPPORTED,
                                   "line %d: positional argument after keyword argument",
                                   jinja__cur(P)->line);
            jnode *v = jinja__p_expr(P, 1);
            if (!v || jinja__nl_push(P, &e->args, v)) return P->failed ? P->failed : -1;
        }
    }
    jinja__advance(P);
    return 0;
}

static jnode *p_primary(parser *P) {
    token *t = jinja__cur(P);
    int line = t->line;
    if (jinja__enter(P)) return NULL;
    jnode *e = NULL;
    if (t->type == TK_NAME) {
        jinja__advance(P);
        if (jinja__tok_is(t, TK_NAME, "true") || jinja__tok_is(t, TK_NAME, "True"))
            e = jinja__lit_node(P, line, jinja_bool(1));
        else if (jinja__tok_is(t, TK_NAME, "false") || jinja__tok_is(t, TK_NAME, "False"))
            e = jinja__lit_node(P, line, jinja_bool(0));
        else if (jinja__tok_is(t, TK_NAME, "none") || jinja__tok_is(t, TK_NAME, "None"))
            e = jinja__lit_node(P, line, jinja_none());
        else if ((e = jinja__new_node(P, E_NAME, line))) {
            e->name = t->p;
            e->nlen = t->n;
        }
    } else if (t->type == TK_STR) {
        jinja__advance(P);
        if (jinja__cur(P)->type != TK_STR) {
            if ((e = jinja__new_node(P, E_LIT, line))) e->lit = t->lit;
        } else {
            /* adjacent literals concatenate, as in Python */
            sbuf b = {0};
            b.max = (size_t)-1;
            int rc = jinja__sb_add(&b, t->lit->u.s.s, t->lit->u.s.n);
            while (rc == 0 && jinja__cur(P)->type == TK_STR) {
                rc = jinja__sb_add(&b, jinja__cur(P)->lit->u.s.s, jinja__cur(P)->lit->u.s.n);
                jinja__advance(P);
            }
            if (rc)
                jinja__perr(P, line, CK_ENOMEM, "%s: out of memory", __func__);
            else
                e = jinja__lit_node(P, line, jinja__jv_str_plain(b.p, b.n));
            free(b.p);
        }
    } else if (t->type == TK_INT) {
        jinja__advance(P);
        e = jinja__lit_node(P, line, jinja_int(t->i));
    } else if (t->type == TK_FLOAT) {
        jinja__advance(P);
        e = jinja__lit_node(P, line, jinja_float(t->f));
    } else if (jinja__tok_is(t, TK_OP, "(")) {
        jinja__advance(P);
        if (jinja__is_op(P, ")")) {
            jinja__advance(P);
            if ((e = jinja__new_node(P, E_TUPLE, line))) e->op = 0;
        } else {
            jnode *first = jinja__p_expr(P, 1);
            if (!first) goto out;
            if (jinja__is_op(P, ",")) {
                e = jinja__new_node(P, E_TUPLE, line);
                if (!e || jinja__nl_push(P, &e->args, first)) {
                    e = NULL;
                    goto out;
                }
                while (jinja__is_op(P, ",")) {
                    jinja__advance(P);
                    if (jinja__is_op(P, ")")) break;
                    jnode *x = jinja__p_expr(P, 1);
                    if (!x || jinja__nl_push(P, &e->args, x)) {
                        e = NULL;
                        goto out;
                    }
                }
            } else {
                e = first;
            }
            if (jinja__expect_op(P, ")")) e = NULL;
        }
    } else if (jinja__tok_is(t, TK_OP, "[")) {
        jinja__advance(P);
        e = jinja__new_node(P, E_LIST, line);
        while (e && !jinja__is_op(P, "]")) {
            if (e->args.n && jinja__expect_op(P, ",")) {
                e = NULL;
                break;
            }
            if (jinja__is_op(P, "]")) break;
            jnode *x = jinja__p_expr(P, 1);
            if (!x || jinja__nl_push(P, &e->args, x)) e = NULL;
        }
        if (e) jinja__advance(P);
    } else if (jinja__tok_is(t, TK_OP, "{")) {
        jinja__advance(P);
        e = jinja__new_node(P, E_DICT, line);
        while (e && !jinja__is_op(P, "}")) {
            if (e->args.n && jinja__expect_op(P, ",")) {
                e = NULL;
                break;
            }
            if (jinja__is_op(P, "}")) break;
            jnode *k = jinja__p_expr(P, 1);
            if (!k || jinja__expect_op(P, ":")) {
                e = NULL;
                break;
            }
            jnode *v = jinja__p_expr(P, 1);
            if (!v || jinja__nl_push(P, &e->args, k) || jinja__nl_push(P, &e->kwv, v)) e = NULL;
        }
        if (e) jinja__advance(P);
    } else {
        char b[64];
        jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: unexpected %s in an expression", line,
                    jinja__tok_desc(t, b, sizeof b));
    }
out:
    P->depth--;
    return P->failed ? NULL : e;
}

/* After '[': an index or a slice, up to ']'. */
static jnode *p_subscript(parser *P, jnode *obj) {
    int line = jinja__cur(P)->line;
    jinja__advance(P);
    jnode *parts[3] = {NULL, NULL, NULL};
    int nparts = 0, is_slice = 0;
    for (;;) {
        if (!jinja__is_op(P, ":") && !jinja__is_op(P, "]")) {
            if (nparts > 2) break;
            parts[nparts] = jinja__p_expr(P, 1);
            if (!parts[nparts]) return NULL;
        }
        if (jinja__is_op(P, ":")) {
            is_slice = 1;
            if (++nparts > 2)
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: malformed slice", line), NULL;
            jinja__advance(P);
            continue;
        }
        break;
    }
    if (jinja__expect_op(P, "]")) return NULL;
    /* x[] is not Jinja: an index needs its expression (a slice may omit all three) */
    if (!is_slice && !parts[0])
        return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: empty subscript []", line), NULL;
    jnode *e = jinja__new_node(P, is_slice ? E_SLICE : E_ITEM, line);
    if (!e) return NULL;
    e->a = obj;
    e->b = parts[0];
    e->c = parts[1];
    e->d = parts[2];
    return e;
}

static jnode *p_postfix(parser *P, jnode *e) {
    while (e) {
        int line = jinja__cur(P)->line;
        if (jinja__is_op(P, ".")) {
            jinja__advance(P);
            token *t = jinja__cur(P);
            if (t->type == TK_NAME) {
                jinja__advance(P);
                jnode *x = jinja__new_node(P, E_ATTR, line);
                if (!x) return NULL;
                x->a = e;
                x->name = t->p;
                x->nlen = t->n;
                e = x;
            } else if (t->type == TK_INT) {
                jinja__advance(P);
                jnode *x = jinja__new_node(P, E_ITEM, line);
                if (!x) return NULL;
                x->a = e;
                x->b = jinja__lit_node(P, line, jinja_int(t->i));
                if (!x->b) return NULL;
                e = x;
            } else {
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a name after '.'", line),
                       NULL;
            }
        } else if (jinja__is_op(P, "[")) {
            e = p_subscript(P, e);
        } else if (jinja__is_op(P, "(")) {
            jnode *x = jinja__new_node(P, E_CALL, line);
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

/* A filter or test that is not in the tables: Jinja refuses it when the
 * template is compiled, except where it may never run: in an `if` (its
 * condition and branches) or an `a if c else b`, and not inside a for loop,
 * macro, set block, filter block or generation block nested there (each a
 * scope of its own, compiled strictly again). There it is refused only when
 * evaluated (`{% if args is string %}{{ args|from_json }}{% endif %}`
 * renders while args is not a string). The parser notes each one met
 * outside such a place; p_expr forgets those of an expression that turns
 * out to be a conditional one, and jinja_parse refuses what is left. */
static int note_unknown(parser *P, jnode *x) {
    if (P->soft) return 0;
    if (P->n_unk == P->cap_unk) {
        size_t nc = P->cap_unk ? P->cap_unk * 2 : 8;
        jnode **nu = realloc(P->unk, nc * sizeof *nu);
        if (!nu) return jinja__perr(P, x->line, CK_ENOMEM, "%s: out of memory", __func__);
        P->unk = nu;
        P->cap_unk = nc;
    }
    P->unk[P->n_unk++] = x;
    return 0;
}

/* After the '|' (or `{% filter`): NAME, its arguments, applied to e. */
jnode *jinja__p_filter(parser *P, jnode *e) {
    token *t = jinja__cur(P);
    int line = t->line;
    if (t->type != TK_NAME)
        return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a filter name", line), NULL;
    jinja__advance(P);
    jnode *x = jinja__new_node(P, E_FILTER, line);
    if (!x) return NULL;
    x->a = e;
    x->name = t->p;
    x->nlen = t->n;
    x->fid = jinja__table_find(jinja__filters, t->p, t->n);
    if (x->fid < 0 && note_unknown(P, x)) return NULL;
    if (jinja__is_op(P, "(") && p_call_args(P, x)) return NULL;
    return x;
}

static jnode *p_filter_test(parser *P, jnode *e) {
    while (e) {
        int line = jinja__cur(P)->line;
        if (jinja__is_op(P, "|")) {
            jinja__advance(P);
            e = jinja__p_filter(P, e);
        } else if (jinja__is_name(P, "is")) {
            jinja__advance(P);
            int neg = 0;
            if (jinja__is_name(P, "not")) {
                neg = 1;
                jinja__advance(P);
            }
            token *t = jinja__cur(P);
            if (t->type != TK_NAME && !(t->type == TK_OP && jinja__table_find(jinja__tests, t->p, t->n) >= 0))
                return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: expected a test name after 'is'",
                                   line),
                       NULL;
            jinja__advance(P);
            jnode *x = jinja__new_node(P, E_TEST, line);
            if (!x) return NULL;
            x->a = e;
            x->name = t->p;
            x->nlen = t->n;
            x->fid = jinja__table_find(jinja__tests, t->p, t->n);
            x->op = neg;
            if (x->fid < 0 && note_unknown(P, x)) return NULL;
            token *c = jinja__cur(P);
            if (jinja__tok_is(c, TK_OP, "(")) {
                if (p_call_args(P, x)) return NULL;
            } else if ((c->type == TK_NAME || c->type == TK_STR || c->type == TK_INT || c->type == TK_FLOAT ||
                        jinja__tok_is(c, TK_OP, "[") || jinja__tok_is(c, TK_OP, "{")) &&
                       !jinja__tok_is(c, TK_NAME, "else") && !jinja__tok_is(c, TK_NAME, "or") &&
                       !jinja__tok_is(c, TK_NAME, "and")) {
                if (jinja__tok_is(c, TK_NAME, "is"))
                    return jinja__perr(P, line, CK_EUNSUPPORTED, "line %d: tests cannot be chained", line),
                           NULL;
                /* one bare argument: `x is divisibleby 3` */
                jnode *arg = p_postfix(P, p_primary(P));
                if (!arg || jinja__nl_push(P, &x->args, arg)) return NULL;
            }
            e = x;
        } else if (jinja__is_op(P, "(")) {
            jnode *x = jinja__new_node(P, E_CALL, line);
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
    int line = jinja__cur(P)->line;
    if (jinja__enter(P)) return NULL;
    jnode *e;
    if (jinja__is_op(P, "-") || jinja__is_op(P, "+")) {
        int neg = jinja__is_op(P, "-");
        jinja__advance(P);
        jnode *x = p_unary(P, 0);
        e = x ? jinja__new_node(P, neg ? E_NEG : E_POS, line) : NULL;
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
    jnode *e = jinja__new_node(P, E_BIN, line);
    if (e) {
        e->op = op;
        e->a = a;
        e->b = b;
    }
    return e;
}

static jnode *p_pow(parser *P) {
    jnode *e = p_unary(P, 1);
    while (e && jinja__is_op(P, "**")) {
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        e = bin(P, l, OP_POW, e, p_unary(P, 1));
    }
    return e;
}
static jnode *p_math2(parser *P) {
    jnode *e = p_pow(P);
    for (;;) {
        int op = jinja__is_op(P, "*")    ? OP_MUL
                 : jinja__is_op(P, "/")  ? OP_DIV
                 : jinja__is_op(P, "//") ? OP_FLOORDIV
                 : jinja__is_op(P, "%")  ? OP_MOD
                                         : -1;
        if (!e || op < 0) return e;
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        e = bin(P, l, op, e, p_pow(P));
    }
}
static jnode *p_concat(parser *P) {
    jnode *e = p_math2(P);
    while (e && jinja__is_op(P, "~")) {
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        e = bin(P, l, OP_CONCAT, e, p_math2(P));
    }
    return e;
}
static jnode *p_math1(parser *P) {
    jnode *e = p_concat(P);
    for (;;) {
        int op = jinja__is_op(P, "+") ? OP_ADD : jinja__is_op(P, "-") ? OP_SUB : -1;
        if (!e || op < 0) return e;
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        e = bin(P, l, op, e, p_concat(P));
    }
}
/* a < b < c is (a < b) and (b < c), as in Python (b evaluated twice: no
 * expression here has side effects). */
static jnode *p_compare(parser *P) {
    jnode *e = p_math1(P), *prev = e, *chain = NULL;
    for (;;) {
        int l = jinja__cur(P)->line, op = -1;
        if (jinja__is_op(P, "=="))
            op = OP_EQ;
        else if (jinja__is_op(P, "!="))
            op = OP_NE;
        else if (jinja__is_op(P, "<"))
            op = OP_LT;
        else if (jinja__is_op(P, "<="))
            op = OP_LE;
        else if (jinja__is_op(P, ">"))
            op = OP_GT;
        else if (jinja__is_op(P, ">="))
            op = OP_GE;
        else if (jinja__is_name(P, "in"))
            op = OP_IN;
        else if (jinja__is_name(P, "not") && jinja__tok_is(jinja__peek(P, 1), TK_NAME, "in")) {
            op = OP_NOTIN;
            jinja__advance(P);
        }
        if (!prev || op < 0) break;
        jinja__advance(P);
        jnode *rhs = p_math1(P);
        jnode *c = bin(P, l, op, prev, rhs);
        if (!c) return NULL;
        if (!chain)
            chain = c;
        else {
            jnode *a = jinja__new_node(P, E_AND, l);
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
    if (jinja__is_name(P, "not")) {
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        if (jinja__enter(P)) return NULL;
        jnode *x = p_not(P);
        P->depth--;
        jnode *e = x ? jinja__new_node(P, E_NOT, l) : NULL;
        if (e) e->a = x;
        return e;
    }
    return p_compare(P);
}
static jnode *p_and(parser *P) {
    jnode *e = p_not(P);
    while (e && jinja__is_name(P, "and")) {
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        jnode *r = p_not(P), *x = r ? jinja__new_node(P, E_AND, l) : NULL;
        if (!x) return NULL;
        x->a = e;
        x->b = r;
        e = x;
    }
    return e;
}
static jnode *p_or(parser *P) {
    jnode *e = p_and(P);
    while (e && jinja__is_name(P, "or")) {
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        jnode *r = p_and(P), *x = r ? jinja__new_node(P, E_OR, l) : NULL;
        if (!x) return NULL;
        x->a = e;
        x->b = r;
        e = x;
    }
    return e;
}
jnode *jinja__p_expr(parser *P, int with_cond) {
    if (jinja__enter(P)) return NULL;
    size_t unk_mark = P->n_unk;
    int soft = P->soft;
    jnode *e = p_or(P);
    while (with_cond && e && jinja__is_name(P, "if")) {
        int l = jinja__cur(P)->line;
        jinja__advance(P);
        P->n_unk = unk_mark; /* a conditional expression: see note_unknown */
        P->soft = 1;
        jnode *c = p_or(P), *other = NULL;
        if (c && jinja__is_name(P, "else")) {
            jinja__advance(P);
            other = jinja__p_expr(P, 1);
            if (!other) c = NULL;
        }
        P->soft = soft;
        if (!c) {
            e = NULL;
            break;
        }
        jnode *x = jinja__new_node(P, E_COND, l);
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
