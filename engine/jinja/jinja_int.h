/* jinja_int.h - what the renderer's files share (private to engine/jinja/jinja*.c;
 * the API is jinja.h).
 *
 * Four parts: values (reference-counted tagged unions: jinja.c, with the
 * limits and error kinds), the lexer (Jinja's, with HF's trim_blocks +
 * lstrip_blocks: jinja_lex.c), the parser (a recursive descent over Jinja's
 * grammar into a small AST: jinja_parse.c for expressions, jinja_stmt.c for
 * tags), and the evaluator (scopes, operators, filters, tests, methods,
 * statements: jinja_rt.c for the render context and Python's
 * str/repr/==/<, jinja_ops.c for lookups and operators, jinja_methods.c
 * for methods and tests, jinja_filters.c, jinja_sort.c for the filters
 * that order and compare, jinja_format.c for str.format, jinja_eval.c for
 * calls, expressions, statements and jinja_render), with the text helpers
 * all of them use in jinja_text.c.
 *
 * Where Python and C differ the code follows Python: strings are indexed,
 * sliced and measured in code points, str() of a float is Python's repr,
 * `and`/`or` return an operand, integer division floors, and so on, because
 * the renderings must equal apply_chat_template's byte for byte.
 *
 * Names: a function or table that more than one file uses is declared here,
 * prefixed jinja__ (two underscores: internal); whatever one file alone uses
 * stays static there. */
#ifndef CK_JINJA_INT_H
#define CK_JINJA_INT_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "jinja.h"

/* ---- values */

enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_MACRO };
enum { FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME };
/* What a JV_LIST stands for in Python: a list (or a tuple), or an iterable
 * that Jinja's filters and methods give and that prints, measures and
 * serialises otherwise: a generator (map, select, reject, selectattr,
 * rejectattr, unique, items; reverse's iterator), a dict view (keys(),
 * values(), items()) or a range. */
enum { LK_LIST, LK_GEN, LK_KEYS, LK_VALUES, LK_ITEMS, LK_RANGE };

struct jnode;
struct jinja_value {
    int type;
    int refs;  /* < 0: immortal, a template's literal (so renders never write it) */
    int safe;  /* JV_STR made by |safe: a markupsafe.Markup in Jinja (see binop) */
    int dkeys; /* JV_DICT: its keys are data (a caller's dict, or keys computed from data) */
    union {
        int b;
        long long i;
        double f;
        /* JV_STR; JV_UNDEF's name (s may be NULL). sp: the provenance, nsp
         * [start, end) byte ranges (sp[2k], sp[2k+1]), sorted, disjoint and
         * not touching, of the bytes that came from the caller's data; the
         * other bytes are the template's (see jinja_render_spans) */
        struct {
            char *s;
            size_t n;
            size_t *sp;
            size_t nsp;
        } s;
        struct {
            jinja_value **v;
            size_t n, cap;
            int tuple;
            int kind;        /* LK_*: the items are all there, whatever the kind */
            int used;        /* LK_GEN: 0 fresh, 1 exhausted, 2 partly consumed */
            long long rg[3]; /* LK_RANGE: start, stop, step */
        } l;
        struct {
            char **k; /* a key's text: a string, or an int's decimal digits */
            size_t *kn;
            unsigned char *ki; /* 1: the key is that int (a template's {512: x}) */
            jinja_value **v;
            size_t n, cap;
        } d; /* JV_DICT, JV_NS */
        int fn;
        const struct jnode *m;
    } u;
};

/* ---- text: a bounded growing buffer with provenance */

typedef struct sbuf {
    char *p;
    size_t n, cap, max;
    size_t *sp, nsp, capsp; /* provenance of p[0..n), as a JV_STR's sp/nsp */
} sbuf;

/* ---- the lexer's tokens, the template and the parser */

enum { TK_EOF, TK_DATA, TK_VAR_B, TK_VAR_E, TK_BLK_B, TK_BLK_E, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP };

typedef struct token {
    int type, line;
    const char *p; /* NAME, OP, DATA: into the template's source; STR: decoded (lit) */
    size_t n;
    long long i;
    double f;
    jinja_value *lit; /* STR: the decoded string (immortal, the template's) */
} token;

typedef struct jnode jnode;

struct jinja_template {
    jinja_limits lim;
    char *src; /* normalised source: names and text point into it */
    size_t src_n;
    jnode *root;
    jnode **nodes; /* every node, for freeing */
    size_t n_nodes, cap_nodes;
    jinja_value **lits; /* every literal (immortal) */
    size_t n_lits, cap_lits;
};

typedef struct parser {
    jinja_template *t;
    token *tk;
    size_t n_tk, cap_tk, pos;
    int depth, loop_depth;
    int soft;           /* inside an `if` or `a if c else b`: see note_unknown */
    struct jnode **unk; /* unknown filters and tests met where Jinja refuses them */
    size_t n_unk, cap_unk;
    jinja_error *err;
    int failed;
} parser;

/* ---- the AST */

enum {
    /* expressions */
    E_LIT,
    E_NAME,
    E_ATTR,
    E_ITEM,
    E_SLICE,
    E_CALL,
    E_FILTER,
    E_TEST,
    E_BIN,
    E_NEG,
    E_POS,
    E_NOT,
    E_AND,
    E_OR,
    E_COND,
    E_LIST,
    E_TUPLE,
    E_DICT,
    E_SLOT, /* the text a filter block filters */
    /* statements */
    S_BODY,
    S_TEXT,
    S_OUT,
    S_IF,
    S_FOR,
    S_SET,
    S_SETNS,
    S_SETBLOCK,
    S_MACRO,
    S_BREAK,
    S_CONTINUE,
    S_SCOPE,
    S_FILTERBLOCK
};
enum {
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN
};

typedef struct nlist {
    jnode **v;
    int n, cap;
} nlist;

typedef struct slist {
    const char **v;
    size_t *len;
    int n, cap;
} slist;

/* One node; which fields a kind uses:
 *   E_LIT lit | E_NAME name | E_ATTR a.name | E_ITEM a[b] | E_SLICE a[b:c:d]
 *   E_CALL a(args, kw=kwv) | E_FILTER a|name(args, kw) | E_TEST a is [not:op] name(args)
 *   E_BIN a op b | E_NEG/E_POS/E_NOT a | E_AND/E_OR a b | E_COND b if a else c
 *   E_LIST/E_TUPLE args | E_DICT args: kwv
 *   S_BODY body | S_TEXT lit | S_OUT a | S_IF if a: body else: els
 *   S_FOR for names in a if b: body else: els | S_SET names = a
 *   S_SETNS name.name2 = a | S_SETBLOCK name: body
 *   S_MACRO name(names = kwv (NULL where no default)): body
 *   S_SCOPE body, in a scope of its own (a generation block)
 *   S_FILTERBLOCK filter a (a chain of E_FILTER down to an E_SLOT): body */
struct jnode {
    int kind, line, op;
    const char *name, *name2;
    size_t nlen, nlen2;
    jinja_value *lit;
    jnode *a, *b, *c, *d;
    nlist args, kwv, body, els;
    slist kw, names;
    int fid; /* E_FILTER / E_TEST: index in the table */
};

/* ---- the evaluator */

typedef struct frame {
    struct frame *parent;
    jinja_value *vars; /* a dict; `set` writes the innermost frame's */
} frame;

typedef struct rctx {
    const jinja_template *t;
    const jinja_limits *lim;
    jinja_error *err;
    int failed;
    uint64_t steps, iters;
    int line; /* the line of the last expression or statement evaluated */
    size_t alloc;
    int depth, max_depth;
    struct tm now;
    frame *top;        /* the template's own frame: macros run above it */
    jinja_value *slot; /* E_SLOT: the text of the filter block whose filters run */
    jinja_value **nss; /* namespaces made: emptied at the end (they can hold themselves) */
    size_t n_ns, cap_ns;
} rctx;

typedef struct jopts {
    int indent; /* < 0: none */
    int ensure_ascii, sort_keys;
    const char *item_sep, *key_sep;
    size_t item_sep_n, key_sep_n;
} jopts;

#define MAX_ARGS 16
typedef struct cargs {
    jinja_value *pos[MAX_ARGS];
    int npos;
    const char *kn[MAX_ARGS];
    size_t kl[MAX_ARGS];
    jinja_value *kv[MAX_ARGS];
    int nkw;
} cargs;

/* ---- jinja.c: limits, error kinds, values */

extern const char jinja__k_unsup[];
extern const char jinja__k_raise[];
extern const char jinja__k_error[];
extern const char jinja__k_limit[];
extern const char jinja__k_nomem[];
void jinja__set_err(jinja_error *err, int code, const char *kind, int line, const char *fmt, va_list ap);
void jinja__clear_err(jinja_error *err);
jinja_value *jinja__jv_ref(jinja_value *v);
jinja_value *jinja__jv_new(int type);
jinja_value *jinja__jv_str_plain(const char *s, size_t n);
long jinja__dict_find(const jinja_value *d, const char *k, size_t kn);
long jinja__dict_find_k(const jinja_value *d, const char *k, size_t kn, int ki);
long jinja__dict_find_v(const jinja_value *d, const jinja_value *key);
int jinja__dict_put(jinja_value *dict, const char *key, size_t kn, int ki, jinja_value *val);
int jinja__dict_set_cstr(jinja_value *d, const char *key, jinja_value *val);

/* ---- jinja_text.c: UTF-8, Python's whitespace, the growing buffer */

unsigned jinja__utf8_dec(const unsigned char *s, size_t i, size_t n, size_t *len);
size_t jinja__utf8_enc(unsigned cp, char *o);
int jinja__py_space(unsigned c);
size_t jinja__utf8_prev(const char *s, size_t start, size_t end);
size_t jinja__skip_space_fwd(const char *s, size_t i, size_t end);
size_t jinja__skip_space_back(const char *s, size_t start, size_t end);
size_t jinja__utf8_count(const char *s, size_t n);
size_t jinja__utf8_offset(const char *s, size_t n, size_t cp);
void jinja__sb_free(sbuf *b);
int jinja__sb_add(sbuf *b, const char *s, size_t n);
int jinja__sb_cstr(sbuf *b, const char *s);
int jinja__sb_ch(sbuf *b, char c);
int jinja__sb_addv(sbuf *b, const jinja_value *v, size_t off, size_t len);
int jinja__sb_taint_from(sbuf *b, size_t from, int tainted);
void jinja__py_float(double d, char *out, size_t outsz);

/* ---- jinja_lex.c: the lexer */

int jinja__perr(parser *P, int line, int code, const char *fmt, ...);
jinja_value *jinja__keep_lit(parser *P, jinja_value *v);
int jinja__lex(parser *P);

/* ---- jinja_parse.c: the parser's tokens and expressions */

extern const char *const jinja__filters[];
extern const char *const jinja__tests[];
int jinja__table_find(const char *const *tab, const char *s, size_t n);
jnode *jinja__new_node(parser *P, int kind, int line);
int jinja__nl_push(parser *P, nlist *l, jnode *e);
int jinja__sl_push(parser *P, slist *l, const char *s, size_t n);
token *jinja__cur(parser *P);
token *jinja__peek(parser *P, size_t k);
void jinja__advance(parser *P);
int jinja__tok_is(const token *t, int type, const char *s);
int jinja__is_op(parser *P, const char *s);
int jinja__is_name(parser *P, const char *s);
const char *jinja__tok_desc(const token *t, char *buf, size_t n);
int jinja__expect_op(parser *P, const char *s);
int jinja__expect_block_end(parser *P);
int jinja__enter(parser *P);
jnode *jinja__lit_node(parser *P, int line, jinja_value *v);
jnode *jinja__p_expr(parser *P, int with_cond);
jnode *jinja__p_filter(parser *P, jnode *e);

/* ---- jinja_rt.c: the render context, str/repr/tojson, comparisons */

void *jinja__rerr(rctx *R, int line, int code, const char *fmt, ...);
int jinja__charge(rctx *R, int line, size_t n);
int jinja__tick(rctx *R, int line);
int jinja__sb_fail(rctx *R, int line, int rc);
sbuf jinja__sb_for(rctx *R);
jinja_value *jinja__nomem(rctx *R, int line);
jinja_value *jinja__rstr(rctx *R, int line, const char *s, size_t n);
jinja_value *jinja__sb_take(rctx *R, int line, sbuf *b);
jinja_value *jinja__rsub(rctx *R, int line, const jinja_value *v, size_t off, size_t len);
jinja_value *jinja__rkey(rctx *R, int line, const jinja_value *d, size_t i);
int jinja__jv_tainted(const jinja_value *v, int depth);
jinja_value *jinja__rnew(rctx *R, int line, int type);
jinja_value *jinja__mk_int(rctx *R, int line, long long i);
jinja_value *jinja__mk_bool(rctx *R, int line, int b);
jinja_value *jinja__mk_float(rctx *R, int line, double f);
jinja_value *jinja__rundef(rctx *R, int line, const char *name, size_t n);
int jinja__rpush(rctx *R, int line, jinja_value *list, jinja_value *item);
int jinja__rset(rctx *R, int line, jinja_value *d, const char *k, size_t kn, jinja_value *v);
int jinja__rset_k(rctx *R, int line, jinja_value *d, const char *k, size_t kn, int ki, jinja_value *v);
const char *jinja__type_name(const jinja_value *v);
const char *jinja__undef_name(const jinja_value *v);
int jinja__truthy(const jinja_value *v);
int jinja__is_num(const jinja_value *v);
double jinja__num_f(const jinja_value *v);
long long jinja__num_i(const jinja_value *v);
int jinja__py_str(rctx *R, sbuf *b, const jinja_value *v, int depth);
int jinja__py_repr(rctx *R, sbuf *b, const jinja_value *v, int depth);
jinja_value *jinja__to_strv(rctx *R, int line, jinja_value *v);
int jinja__json_dump(rctx *R, int line, sbuf *b, const jinja_value *v, const jopts *o, int level);
int jinja__py_eq(rctx *R, const jinja_value *a, const jinja_value *b, int depth);
int jinja__py_order(rctx *R, int line, int op, const jinja_value *a, const jinja_value *b);
int jinja__py_in(rctx *R, int line, const jinja_value *needle, jinja_value *hay);

/* ---- jinja_ops.c: lookups and operators */

jinja_value *jinja__lookup(rctx *R, int line, frame *F, const char *name, size_t n);
jinja_value *jinja__get_attr(rctx *R, int line, jinja_value *obj, const char *name, size_t n);
jinja_value *jinja__get_item(rctx *R, int line, jinja_value *obj, jinja_value *key);
jinja_value *jinja__get_slice(rctx *R, int line, jinja_value *obj, jinja_value *const se[3]);
jinja_value *jinja__iter_list(rctx *R, int line, jinja_value *v);
int jinja__gen_take(rctx *R, int line, jinja_value *g);
jinja_value *jinja__mk_str_copy(rctx *R, int line, const jinja_value *v);
jinja_value *jinja__binop(rctx *R, int line, int op, jinja_value *a, jinja_value *b);

/* ---- jinja_methods.c: methods and tests */

jinja_value *jinja__str_strip(rctx *R, int line, const jinja_value *s, int which, const jinja_value *chars);
jinja_value *jinja__str_case(rctx *R, int line, const jinja_value *s, int mode);
jinja_value *jinja__str_replace(rctx *R, int line, const jinja_value *s, const jinja_value *old,
                                const jinja_value *new_, const jinja_value *count);
jinja_value *jinja__dict_items(rctx *R, int line, const jinja_value *d,
                               int what /* 0 items 1 keys 2 values */);
int jinja__name_is(const char *s, size_t n, const char *lit);
jinja_value *jinja__call_method(rctx *R, int line, jinja_value *obj, const char *m, size_t mn, const cargs *A,
                                int *handled);
int jinja__run_test(rctx *R, int line, const char *name, size_t n, jinja_value *v, const cargs *A);

/* ---- jinja_filters.c: filters */

jinja_value *jinja__apply_filter(rctx *R, int line, const char *name, size_t n, jinja_value *v,
                                 const cargs *A);
jinja_value *jinja__attr_walk(rctx *R, int line, jinja_value *item, const char *p, size_t n);
jinja_value *jinja__attr_path(rctx *R, int line, jinja_value *item, const jinja_value *path);

/* ---- jinja_sort.c: dictsort, sort, unique, min, max */

jinja_value *jinja__filter_sort(rctx *R, int line, const char *name, size_t n, jinja_value *v, const cargs *A,
                                int *handled);

/* ---- jinja_format.c: str.format */

jinja_value *jinja__str_format(rctx *R, int line, const jinja_value *s, const cargs *A);

/* ---- jinja_json.c: the from_json filter (Python's json.loads) */

jinja_value *jinja__from_json(rctx *R, int line, jinja_value *v, const cargs *A);

/* ---- jinja_eval.c: calls and arguments */

jinja_value *jinja__arg(const cargs *A, int i, const char *name);
int jinja__check_args(rctx *R, int line, const cargs *A, int max_pos, const char *what,
                      const char *const *allowed);

#endif
