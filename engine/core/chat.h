/* chat.h - chat messages to prompt tokens, with the model's own template,
 * so that no user can forge a turn.
 *
 * The template (a GGUF's `tokenizer.chat_template`, or an override text) is
 * rendered by jinja.h as Hugging Face's apply_chat_template renders it, with
 * messages, tools (undefined when a request has none, as llama.cpp's
 * server leaves it; documents likewise),
 * add_generation_prompt, and bos_token / eos_token set to the vocabulary's
 * own BOS / EOS piece texts. A template without a system role gets a
 * leading system message merged into the next one, as llama.cpp does
 * (chat_render). The rendered text mixes the
 * template's literals (turn markers such as <|im_start|>) with the caller's
 * data (roles and contents); jinja_render_spans says which byte is which.
 *
 * The anti-forgery rule (chat_tokenize): a special-token string (a CONTROL,
 * UNKNOWN or USER piece: <|im_start|>, <|eot_id|>, <s>, Gemma 4's
 * <|tool_call>) becomes that token only
 * where every one of its bytes came from the template; anywhere else it is
 * tokenized as the plain characters it is. Matching is leftmost-longest, as
 * Hugging Face's added-token matcher. The text between two such tokens is
 * encoded as one run (tok_encode_opts with TOK_ENC_NO_USER, without
 * TOK_ENC_PARSE_SPECIAL),
 * template and data bytes together, so an honest prompt gets exactly the ids
 * that tokenizing the whole rendering with special parsing gives (HF's
 * apply_chat_template(tokenize=True), llama.cpp's server).
 *
 * BOS: when the vocabulary adds one (tok_adds_bos) it is added unless the
 * ids already start with it, i.e. unless the template wrote bos_token
 * itself (llama.cpp strips a rendered leading bos_token for the same
 * reason: no double BOS). EOS likewise at the end when tok_adds_eos.
 *
 * A model without a template (the stories model): the contents joined with
 * "\n", all data, encoded as a plain prompt (BOS as the vocabulary asks).
 *
 * Errors are jinja.h's (jinja_error.kind is the job's error code:
 * unsupported_chat_template, chat_template_exception, chat_template_error,
 * chat_template_limit, out_of_memory); a template that exists but fails is
 * an error, never a silent fallback to the joined text.
 *
 * Lifetime: a chat_template borrows its tokenizer (which must outlive it),
 * is immutable after chat_new, and may be used by several threads at once. */
#ifndef CK_CHAT_H
#define CK_CHAT_H
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "jinja.h"
#include "tokenizer.h"

typedef struct gguf_file gguf_file;

/* Where the template came from. */
enum { CHAT_SRC_NONE = 0, CHAT_SRC_MODEL = 1, CHAT_SRC_OVERRIDE = 2 };

typedef struct chat_message {
    const char *role;    /* NUL-terminated UTF-8, data (may be anything a user sent) */
    const char *content; /* NUL-terminated UTF-8, data */
} chat_message;

typedef struct chat_template chat_template; /* opaque */

/* The template text a GGUF file carries (tokenizer.chat_template), borrowed
 * from the mapping (not NUL-terminated): 0, or CK_ENOTFOUND when the file has
 * none (or an empty one), CK_EFORMAT when the key is not a string. */
int chat_template_in_gguf(const gguf_file *f, const char **src, size_t *len);

/* Parse src[0..len) (NULL / 0 = no template, source CHAT_SRC_NONE) for
 * tokenizer tok (borrowed). source: CHAT_SRC_MODEL or CHAT_SRC_OVERRIDE, as
 * reported by chat_source. On success *out is the caller's (chat_free). On
 * failure *out is NULL and err (jinja's) says why. */
int chat_new(const tokenizer *tok, const char *src, size_t len, int source, chat_template **out,
             jinja_error *err);
void chat_free(chat_template *c);

/* CHAT_SRC_*; and "none" / "model" / "override". */
int chat_source(const chat_template *c);
const char *chat_source_name(int source);
/* 16 hex digits (FNV-1a 64 of the template text), "" without a template. */
const char *chat_template_hash(const chat_template *c);
/* The bos_token / eos_token texts templates see ("" when the vocabulary has none). */
const char *chat_bos_text(const chat_template *c);
const char *chat_eos_text(const chat_template *c);

/* What one render takes. */
typedef struct chat_input {
    const chat_message *msgs; /* (n >= 1) borrowed for the call */
    size_t n;
    /* The template's `tools`: a list of tool dicts as the client sent them
     * (apply_chat_template passes them as they are, key order kept), or
     * NULL for none (the template sees None, as transformers passes it).
     * Borrowed for the call and left as it was found; no other thread may
     * use it meanwhile (jinja values are not thread-safe). A model without
     * a template cannot show tools: CK_EINVAL (chat_template_error). */
    jinja_value *tools;
    int add_generation_prompt;
    const struct tm *now; /* what strftime_now formats (Llama 3's date); NULL = the current local time */
} chat_input;

/* What a render changed in the chat (chat_render's *warnings, bits). */
enum {
    /* The template has no system role (chat_has_system_role): the leading
     * system message's content, "\n" and the next message's content became
     * that next message, and the system message was dropped. */
    CHAT_WARN_SYSTEM_MERGED = 1,
    /* The same, but the system message was the only one: dropped. */
    CHAT_WARN_SYSTEM_DROPPED = 2,
};
/* One sentence for one CHAT_WARN_* bit (static); NULL for anything else. */
const char *chat_warning_text(int bit);

/* Whether the template renders a system role, decided once by chat_new
 * with a probe render of a system and a user message (tools an empty list,
 * as llama.cpp probes): it does when the rendering holds the system
 * message's content; a template that fails on the probe, or that never
 * prints that content, does not. 1 without a template. */
int chat_has_system_role(const chat_template *c);

/* Render in->msgs with the template. When the template has no system role
 * and the first message's role is "system", the chat is rendered as
 * llama.cpp renders it: the system content is prepended with "\n" to the
 * next message's content (all data), or dropped when it is the only
 * message; *warnings (may be NULL) gets the CHAT_WARN_* bits of what was
 * changed, 0 when nothing. *text: malloc'd, NUL-terminated, *len bytes;
 * *spans / *n_spans (may both be NULL when not wanted): the data byte
 * ranges, as jinja_render_spans (malloc'd or NULL). Returns 0 / CK_E*. */
int chat_render(const chat_template *c, const chat_input *in, char **text, size_t *len, jinja_span **spans,
                size_t *n_spans, int *warnings, jinja_error *err);

/* Token ids of a rendering under the anti-forgery rule above. Writes at most
 * max ids into out and sets *n_out. Returns 0; CK_ETOOLONG when more than
 * max are needed (*n_out a lower bound of the count, above max); the other
 * codes of tok_encode_opts. spans: as chat_render gave them. */
int chat_tokenize(const chat_template *c, const char *text, size_t len, const jinja_span *spans,
                  size_t n_spans, int32_t *out, int max, int *n_out);

/* Plain text (a job's `prompt`) to ids: with parse_special, special-token
 * strings anywhere in it are those tokens (trusted text); without, none is.
 * BOS / EOS as chat_tokenize. */
int chat_tokenize_text(const chat_template *c, const char *text, size_t len, int parse_special, int32_t *out,
                       int max, int *n_out);

/* ---- what a model's prompt format is, for logs, /readyz and version */
struct model;
typedef struct chat_model_info {
    char arch[32];      /* general.architecture ("llama" for llama2.c checkpoints) */
    char tok_model[16]; /* tokenizer.ggml.model: "llama", "gpt2"; "llama2c" for a llama2.c tokenizer */
    char tok_pre[48];   /* tokenizer.ggml.pre ("default" when absent; "" for SentencePiece) */
    const char *template_source; /* "none", "model", "override" (static) */
    char template_hash[17];      /* chat_template_hash, "" without one */
} chat_model_info;

/* The template text inside model m's GGUF (borrowed, valid while m lives):
 * as chat_template_in_gguf; CK_ENOTFOUND for llama2.c checkpoints. */
int chat_template_in_model(const struct model *m, const char **src, size_t *len);
/* Fill *info for model m (a GGUF file f may stand in for m, for vocab-only
 * files: pass m NULL) and template c (may be NULL). */
void chat_model_describe(const struct model *m, const gguf_file *f, const chat_template *c,
                         chat_model_info *info);

#endif
