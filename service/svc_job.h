/* svc_job.h - decode and validate a generation job from a Kafka message.
 *
 * Encoding: msgpack or JSON, chosen by the content-type header
 * (application/json; application/msgpack, application/x-msgpack,
 * application/vnd.msgpack), else detected from the first byte: '{' (after
 * white space) is JSON, a msgpack map marker (0x80-0x8f, 0xde, 0xdf) is
 * msgpack. Both decode to one tree (cJSON), validated once.
 *
 * Three outcomes:
 *  - SVC_JOB_OK: a job to run;
 *  - SVC_JOB_DEAD: undecodable (not JSON/msgpack, truncated, trailing bytes,
 *    not an object/map, nesting deeper than 64, NUL inside a string): the
 *    message goes to the dead-letter topic; err says why;
 *  - SVC_JOB_INVALID: decodable but invalid (wrong type, out of range, unknown
 *    model, over a limit, a number anywhere that is not finite: JSON's 1e999
 *    or msgpack's inf/nan, which is invalid_field in both encodings): the job
 *    gets an `error` result with err->code (a
 *    stable name from SVC_JOB_ERRORS) and err->message (for a person); the
 *    job's id, encoding and metadata are filled as far as they were read.
 *
 * Fields (OpenAI names where they exist): id, model, prompt | messages |
 * tokens, tools (with messages), max_tokens (alias max_completion_tokens), temperature, top_p,
 * top_k, min_p, repetition_penalty, stop, seed, priority, deadline_ms,
 * ignore_eos, session_id, template, save, policy, return_confidence, stream, metadata.
 * Unknown fields are ignored (forward compatibility). docs/SERVICE.md and
 * schemas/job.schema.json are the reference.
 *
 * Chat messages are kept as a role/content list (msgs) for the engine,
 * which renders them with the model's chat template and tokenizes them so
 * that no content can forge a turn (engine.h, the client form); `prompt` holds
 * their contents joined with "\n", the rendering of a model without a
 * template (the stories model). A `prompt` is plain text unless the job
 * sets parse_special.
 *
 * Ownership: a decoded job owns every pointer in it; svc_job_free frees. */
#ifndef CK_SVC_JOB_H
#define CK_SVC_JOB_H
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h" /* eng_message, samp_params, ENG_MAX_STOPS */
/* Still here for svc_job.c (samp_params_check) and svc_result.c
 * (GEN_FINISH_CONTEXT), which include this header for them. */
#include "gen.h"
#include "samp.h"

#define SVC_JOB_ERRORS(X)                                                                             \
    X(INVALID_FIELD, "invalid_field", "a field has the wrong type or form")                           \
    X(MISSING_PROMPT, "missing_prompt", "the job has no prompt, messages or tokens")                  \
    X(OUT_OF_RANGE, "out_of_range", "a parameter is out of its range")                                \
    X(UNKNOWN_MODEL, "unknown_model", "this service does not serve that model")                       \
    X(MESSAGE_TOO_LARGE, "message_too_large", "the job message is over the size limit")               \
    X(PROMPT_TOO_LONG, "prompt_too_long", "the prompt has more tokens than allowed")                  \
    X(CONTEXT_EXCEEDED, "context_exceeded", "prompt + max_tokens exceed the context")                 \
    X(INVALID_POLICY, "invalid_policy", "the KV policy spec does not parse")                          \
    X(DEADLINE_EXCEEDED, "deadline_exceeded", "the job's deadline passed")                            \
    X(ENGINE_ERROR, "engine_error", "the engine failed on this job")                                  \
    X(RESULT_TOO_LARGE, "result_too_large", "the result is over Kafka's message size")                \
    X(UNKNOWN_TEMPLATE, "unknown_template", "the job names a template that does not exist")           \
    X(UNSUPPORTED_CHAT_TEMPLATE, "unsupported_chat_template",                                         \
      "the model's chat template uses Jinja outside the supported subset")                            \
    X(CHAT_TEMPLATE_EXCEPTION, "chat_template_exception", "the chat template refused these messages") \
    X(CHAT_TEMPLATE_ERROR, "chat_template_error", "the chat template failed on these messages")       \
    X(CHAT_TEMPLATE_LIMIT, "chat_template_limit", "rendering the chat template hit a limit")          \
    X(TOOLS_TOO_LARGE, "tools_too_large", "the job's tools are over their limits")

enum {
    SVC_JERR_NONE = 0,
#define SVC_JX_(name, code, msg) SVC_JERR_##name,
    SVC_JOB_ERRORS(SVC_JX_)
#undef SVC_JX_
};
const char *svc_job_error_code(int e); /* "invalid_field", ...; "none" for 0 */

enum { SVC_JOB_OK = 0, SVC_JOB_DEAD = 1, SVC_JOB_INVALID = 2 };
enum { SVC_ENC_JSON = 0, SVC_ENC_MSGPACK = 1 };

#define SVC_JOB_ID_MAX 256
#define SVC_JOB_STR_MAX 256          /* session_id, template, policy, each stop string */
#define SVC_JOB_TOKENS_MAX (1 << 24) /* ids in `tokens` (svc_config's max_prompt_tokens cap) */
/* `tools`: at most this many tools (OpenAI's own limit), containers nested
 * at most this deep from the array down (a tool's JSON schema nests
 * properties in items in properties...), and this many values in all; the
 * keys' and strings' bytes at most max_message_bytes (the job's own size
 * limit, which a compact msgpack job could otherwise pass). Over any:
 * tools_too_large. */
#define SVC_JOB_TOOLS_MAX 128
#define SVC_JOB_TOOLS_DEPTH 32
#define SVC_JOB_TOOLS_VALUES 65536

typedef struct svc_job_error {
    int code; /* SVC_JERR_* */
    char message[256];
} svc_job_error;

#define SVC_JOB_MAX_NAMES 32 /* model names (svc_models: 3 for each of 8 models, and auto) */

typedef struct svc_job_limits {
    size_t max_message_bytes;
    int max_tokens_cap;
    int default_max_tokens;                     /* 0: filled by the engine thread from the context */
    int vocab_size;                             /* token ids must be below it */
    int max_prompt_tokens;                      /* most ids in `tokens`; 0 (or over it): SVC_JOB_TOKENS_MAX */
    const char *model_names[SVC_JOB_MAX_NAMES]; /* names a job's `model` may take (NULL-terminated;
                                                   all NULL: any) */
} svc_job_limits;

typedef struct svc_job {
    char id[SVC_JOB_ID_MAX + 1];
    int encoding; /* SVC_ENC_*: the result is written in it */
    char *model;  /* as the job named it, NULL when absent */
    char *prompt; /* prompt text (NUL-terminated), or NULL; for messages their
                                 contents joined with "\n" */
    size_t prompt_len;
    eng_message *msgs; /* `messages` (n_msgs), role and content strings owned, or NULL */
    int n_msgs;
    /* `tools` (only with messages): what the chat template sees as `tools`,
     * a list of the job's tool dicts (svc_jv.h), or NULL (None). Owned: made
     * on the loop thread, read by the engine thread while the job is there
     * (one thread at a time: jinja values are not thread-safe). */
    jinja_value *tools;
    int parse_special; /* `parse_special`: special-token strings in `prompt` are tokens */
    int32_t *tokens;   /* or prompt ids as given */
    int n_tokens;
    samp_params samp;
    int max_tokens; /* 0 = not given */
    int n_stop;
    char *stop[ENG_MAX_STOPS];
    int ignore_eos;
    int stream; /* `stream`: partial records on the stream topic (svc_stream.h) */
    int priority;
    int64_t deadline_ms; /* budget from the message timestamp, 0 = none */
    char *policy;
    int return_confidence;
    char *session_id, *template_name;
    int save_template; /* `save`: the prompt text becomes template `template` */
    int prefill_only;  /* not from messages: a prewarm the service makes itself */
    cJSON *metadata;   /* echoed back, any JSON value */
} svc_job;

/* Decode `len` bytes. content_type may be NULL; fallback_id is the id when
 * the job has none (the Kafka key, else one the caller generated). */
int svc_job_decode(const void *data, size_t len, const char *content_type, const char *fallback_id,
                   const svc_job_limits *lim, svc_job *job, svc_job_error *err);
void svc_job_free(svc_job *job);

/* A job's `tools` (tools, not NULL) as the chat template sees them: an
 * array of tool objects, each passed as it is (apply_chat_template's rule:
 * OpenAI's {"type": "function", "function": {...}} or another template's
 * shape), within SVC_JOB_TOOLS_* and max_bytes of keys and strings. 0 with
 * *out the caller's (jinja_release); else SVC_JOB_INVALID, *out NULL, e says
 * why (invalid_field, tools_too_large). */
int svc_job_tools(const cJSON *tools, size_t max_bytes, jinja_value **out, svc_job_error *e);

/* Parse bytes as JSON or msgpack into a cJSON tree (the caller frees);
 * NULL with err filled when undecodable. *enc gets the encoding chosen. */
cJSON *svc_decode_tree(const void *data, size_t len, const char *content_type, int *enc, char *err,
                       size_t errlen);
/* 1 when a number anywhere in j is not finite (JSON's 1e999, msgpack's inf
 * and nan): no job field takes one, and JSON cannot carry it back. */
int svc_json_has_nonfinite(const cJSON *j);
/* Encode a cJSON tree as msgpack into a malloc'd buffer (*out, *len). */
int svc_msgpack_encode(const cJSON *tree, char **out, size_t *len);
/* Copy s (n bytes) as valid UTF-8 without NUL bytes (bad bytes become
 * U+FFFD) into a malloc'd NUL-terminated string. A left-to-right scan: at
 * each position either one character (svc_utf8_char) or one bad byte. */
char *svc_utf8_clean(const char *s, size_t n);
/* The bytes of the valid UTF-8 character at p (n bytes there): 1 to 4; 0
 * when p does not begin one (a NUL, a bad lead or continuation byte, an
 * overlong form, a surrogate, past U+10FFFF, or cut short by n). */
size_t svc_utf8_char(const unsigned char *p, size_t n);

#endif
