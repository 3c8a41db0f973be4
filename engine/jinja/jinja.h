/* jinja.h - a chat-template renderer: the subset of Jinja that models'
 * `tokenizer.chat_template`s use, rendered as Hugging Face's
 * apply_chat_template renders them (ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks and the loopcontrols extension; HF's tojson,
 * raise_exception and strftime_now). docs/CHAT_TEMPLATES.md lists the subset.
 *
 * Templates come from model files off the internet, so every limit is
 * explicit (jinja_limits) and enforced: template size, nesting depth at parse
 * and at render, output size, loop iterations, evaluation steps and bytes
 * allocated. A hostile template ends in an error, never a crash or a hang.
 *
 * Use: jinja_parse once per template; build the variables (a dict: see
 * jinja_chat_vars, or the value API); jinja_render as often as needed. A
 * parsed template is immutable: several threads may render it at once, each
 * with its own variables.
 *
 * Errors: every function returns 0 or a negative CK_E* code (ck_err.h) and,
 * when given a jinja_error, fills it. Its `kind` is the error code a client
 * sees:
 *   unsupported_chat_template  a construct outside the subset, or a template
 *                              that is not valid Jinja (CK_EUNSUPPORTED);
 *                              msg names the construct, line where it is
 *   chat_template_exception    the template called raise_exception(msg):
 *                              the messages do not suit this model (CK_EINVAL);
 *                              msg is the template's own text
 *   chat_template_error        the template failed on these variables (an
 *                              undefined attribute, a type error...) (CK_EFORMAT)
 *   chat_template_limit        a jinja_limits bound was hit (CK_ERANGE;
 *                              CK_ETOOLONG for template and output size)
 *   out_of_memory              (CK_ENOMEM) */
#ifndef CK_JINJA_H
#define CK_JINJA_H
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct jinja_limits {
    size_t max_template;     /* bytes of template source (default 1 MiB) */
    int max_depth;           /* nesting of blocks and expressions when parsing,
                                 of expressions and macro calls when rendering (64) */
    size_t max_output;       /* bytes of rendered text (16 MiB) */
    uint64_t max_loop_iters; /* for-loop iterations and range() items, all loops
                                 of one render together (1,000,000) */
    uint64_t max_steps;      /* expression and statement evaluations per render
                                 (20,000,000: about a second of work) */
    size_t max_alloc;        /* bytes of strings and containers made during one
                                 render, counted as made, not as live (256 MiB) */
} jinja_limits;

void jinja_limits_default(jinja_limits *l);

typedef struct jinja_error {
    int code;         /* the CK_E* code the call returned */
    const char *kind; /* one of the kinds above (static), "" when code is 0 */
    int line;         /* 1-based template line, 0 when not tied to one */
    char msg[512];
} jinja_error;

/* ---- values --------------------------------------------------------------
 * The variables a template sees: none, booleans, integers, floats, UTF-8
 * strings, lists and dicts with string keys (insertion-ordered, as Python's).
 * Values are reference counted; each constructor returns a value holding one
 * reference that the caller owns, or NULL when out of memory. */
typedef struct jinja_value jinja_value;

jinja_value *jinja_none(void);
jinja_value *jinja_bool(int b);
jinja_value *jinja_int(long long i);
jinja_value *jinja_float(double f);
/* Copies s[0..n). The string is the caller's data: every byte of it, and
 * of whatever the template makes from it, is reported as data by
 * jinja_render_spans (see there). */
jinja_value *jinja_str(const char *s, size_t n);
/* As jinja_str, but trusted: its bytes count as the template's own. Only
 * for text that is no user's, e.g. the vocabulary's bos_token/eos_token. */
jinja_value *jinja_str_trusted(const char *s, size_t n);
jinja_value *jinja_list(void);
jinja_value *jinja_dict(void);
/* Append item to list. Takes the caller's reference to item, also on
 * failure (so `jinja_list_append(l, jinja_str(...))` leaks nothing); item NULL
 * gives CK_ENOMEM. CK_EINVAL when list is not a list. */
int jinja_list_append(jinja_value *list, jinja_value *item);
/* Set dict[key] (key copied; an existing key keeps its place). Takes val as
 * jinja_list_append does. */
int jinja_dict_set(jinja_value *dict, const char *key, size_t key_len, jinja_value *val);
/* jinja_dict's keys are data too (a template that prints the keys of a
 * caller's dict prints data); keys of dicts the template builds from its
 * own literals are the template's. */
/* Take one more reference to v (returned; NULL is fine), e.g. to put a
 * value the caller keeps into a dict with jinja_dict_set. */
jinja_value *jinja_ref(jinja_value *v);
/* Drop one reference; frees the value when it was the last. NULL is fine. */
void jinja_release(jinja_value *v);

/* One chat message: a role and its text (both NUL-terminated UTF-8). */
typedef struct jinja_message {
    const char *role;
    const char *content;
} jinja_message;

/* The variables of a chat without tools: messages (a list of {role,
 * content} dicts), bos_token, eos_token (NULL = ""), add_generation_prompt.
 * tools and documents are left undefined, as llama.cpp's server leaves
 * them (transformers would pass None): a template that walks `tools`
 * unguarded walks nothing. Roles and contents are data
 * (jinja_str: a user may send the role "<|im_start|>"); bos_token and
 * eos_token are trusted (jinja_str_trusted). The caller owns *out and may
 * add further variables to it with jinja_dict_set (enable_thinking, tools...). */
int jinja_chat_vars(const jinja_message *msgs, size_t n_msgs, const char *bos_token, const char *eos_token,
                    int add_generation_prompt, jinja_value **out);

/* ---- templates ----------------------------------------------------------- */
typedef struct jinja_template jinja_template;

/* Parse src[0..len) (UTF-8; need not be NUL-terminated). limits: NULL = the
 * defaults; they are copied into the template and bound its renders too.
 * On success *out is the caller's, freed with jinja_template_free. On
 * failure *out is NULL and err says what and where. */
int jinja_parse(const char *src, size_t len, const jinja_limits *limits, jinja_template **out,
                jinja_error *err);
void jinja_template_free(jinja_template *t);

/* Render t with the variables of dict vars (borrowed: render takes and drops
 * references but leaves it as it found it; no other thread may change it
 * meanwhile). now: the time strftime_now() formats (NULL = the current local
 * time); pass a fixed one for reproducible renders. On success *out is a
 * malloc'd NUL-terminated string (the caller frees it) of *out_len bytes
 * (out_len may be NULL). On failure *out is NULL. */
int jinja_render(const jinja_template *t, jinja_value *vars, const struct tm *now, char **out,
                 size_t *out_len, jinja_error *err);

/* One range of rendered bytes that came from the caller's data. */
typedef struct jinja_span {
    size_t start, len;
} jinja_span;

/* jinja_render plus the provenance of the text: *spans (malloc'd, the
 * caller frees; NULL when there is none) gets *n_spans ranges, sorted,
 * disjoint and never touching, of the bytes that came from data (jinja_str
 * values); every other byte came from the template's literals or trusted
 * strings. The rule is conservative, so that data can never pass for
 * template text: concatenation (+, ~, join), slicing and indexing, the
 * strip family, split, replace, case maps and iteration keep each byte's
 * provenance exactly; a repr() or tojson of a data string, with its quotes
 * and escapes, is data as a whole; so are the keys of a caller's dict, a
 * strftime_now of a format from data and tojson with data separators.
 * Numbers, booleans and none print as template text (their text is fixed
 * by the formatting, not chosen by the caller). spans may be NULL (then it
 * is jinja_render); on failure *spans is NULL. */
int jinja_render_spans(const jinja_template *t, jinja_value *vars, const struct tm *now, char **out,
                       size_t *out_len, jinja_span **spans, size_t *n_spans, jinja_error *err);

#endif
