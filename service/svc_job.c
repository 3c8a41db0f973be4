/* svc_job.c - job decoding and validation (svc_job.h). */
#include "svc_job.h"

#include <ctype.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "kvpol.h"
#include "svc_jv.h"
#include "tpl.h"

#define MAX_DEPTH 64

const char *svc_job_error_code(int e) {
    switch (e) {
#define SVC_JX_(name, code, msg) \
    case SVC_JERR_##name: return code;
        SVC_JOB_ERRORS(SVC_JX_)
#undef SVC_JX_
    }
    return "none";
}

/* ------------------------------------------------------------------------ */
/* UTF-8 */

size_t svc_utf8_char(const unsigned char *p, size_t n) {
    if (n == 0) return 0;
    unsigned c = p[0];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || len > n || c == 0) return 0;
    for (size_t k = 1; k < len; k++)
        if ((p[k] & 0xc0) != 0x80) return 0;
    if (len == 1) return 1;
    uint32_t cp = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < len; k++) cp = (cp << 6) | (p[k] & 0x3f);
    int ok = (len == 2 && cp >= 0x80) || (len == 3 && cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff)) ||
             (len == 4 && cp >= 0x10000 && cp <= 0x10ffff);
    return ok ? len : 0;
}

char *svc_utf8_clean(const char *s, size_t n) {
    if (n > ((size_t)1 << 40)) return NULL;
    char *o = malloc(3 * n + 1); /* each bad byte may become 3 bytes */
    if (!o) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, w = 0;
    while (i < n) {
        size_t len = svc_utf8_char(p + i, n - i);
        if (len) {
            memcpy(o + w, p + i, len);
            w += len;
            i += len;
        } else {
            memcpy(o + w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    o[w] = 0;
    return o;
}

/* ------------------------------------------------------------------------ */
/* msgpack: a bounds check before msgpack-c, then msgpack_object -> cJSON */

static int be_len(const uint8_t *p, size_t n, size_t *pos, int bytes, uint64_t *v) {
    if (n - *pos < (size_t)bytes) return -1;
    uint64_t x = 0;
    for (int i = 0; i < bytes; i++) x = (x << 8) | p[*pos + (size_t)i];
    *pos += (size_t)bytes;
    *v = x;
    return 0;
}

/* Walk one object: every length inside the buffer, every container count at
 * most the bytes left (an element takes one byte at least), depth bounded.
 * msgpack-c allocates a container's declared count up front, so a 5-byte
 * message could otherwise ask it for gigabytes. */
static int mp_check(const uint8_t *p, size_t n, size_t *pos, int depth) {
    if (depth > MAX_DEPTH || *pos >= n) return -1;
    uint8_t b = p[(*pos)++];
    uint64_t len = 0, count = 0;
    int pairs = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return 0;
    if (b >= 0x80 && b <= 0x8f) {
        count = b & 0x0f;
        pairs = 1;
    } else if (b >= 0x90 && b <= 0x9f) {
        count = b & 0x0f;
    } else if (b >= 0xa0 && b <= 0xbf) {
        len = b & 0x1f;
        goto skip;
    } else {
        switch (b) {
        case 0xc4:
        case 0xd9:
            if (be_len(p, n, pos, 1, &len)) return -1;
            goto skip;
        case 0xc5:
        case 0xda:
            if (be_len(p, n, pos, 2, &len)) return -1;
            goto skip;
        case 0xc6:
        case 0xdb:
            if (be_len(p, n, pos, 4, &len)) return -1;
            goto skip;
        case 0xc7:
            if (be_len(p, n, pos, 1, &len)) return -1;
            len++;
            goto skip;
        case 0xc8:
            if (be_len(p, n, pos, 2, &len)) return -1;
            len++;
            goto skip;
        case 0xc9:
            if (be_len(p, n, pos, 4, &len)) return -1;
            len++;
            goto skip;
        case 0xca: len = 4; goto skip;
        case 0xcb: len = 8; goto skip;
        case 0xcc:
        case 0xd0: len = 1; goto skip;
        case 0xcd:
        case 0xd1: len = 2; goto skip;
        case 0xce:
        case 0xd2: len = 4; goto skip;
        case 0xcf:
        case 0xd3: len = 8; goto skip;
        case 0xd4: len = 2; goto skip;
        case 0xd5: len = 3; goto skip;
        case 0xd6: len = 5; goto skip;
        case 0xd7: len = 9; goto skip;
        case 0xd8: len = 17; goto skip;
        case 0xdc:
            if (be_len(p, n, pos, 2, &count)) return -1;
            break;
        case 0xdd:
            if (be_len(p, n, pos, 4, &count)) return -1;
            break;
        case 0xde:
            if (be_len(p, n, pos, 2, &count)) return -1;
            pairs = 1;
            break;
        case 0xdf:
            if (be_len(p, n, pos, 4, &count)) return -1;
            pairs = 1;
            break;
        default: return -1; /* 0xc1: never used */
        }
    }
    if (pairs) {
        if (count > (n - *pos) / 2) return -1;
        count *= 2;
    }
    if (count > n - *pos) return -1;
    for (uint64_t i = 0; i < count; i++)
        if (mp_check(p, n, pos, depth + 1)) return -1;
    return 0;
skip:
    if (len > n - *pos) return -1;
    *pos += (size_t)len;
    return 0;
}

/* A string or bin as a cJSON string. An empty one may come with a NULL
 * pointer from msgpack-c, so no byte function sees the pointer when n is 0. */
static cJSON *mp_str(const char *s, uint32_t n, const char **why) {
    if (n && memchr(s, 0, n)) {
        *why = "a string holds a NUL byte";
        return NULL;
    }
    char *c = n ? strndup(s, n) : strdup("");
    if (!c) return NULL;
    cJSON *j = cJSON_CreateString(c);
    free(c);
    return j;
}

/* Non-finite floats are kept (as in the JSON path, where 1e999 parses to an
 * infinity): the message decodes, and validation refuses the job with
 * invalid_field (svc_job_decode), so both encodings answer alike. */
static cJSON *mp_to_json(const msgpack_object *o, const char **why) {
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return cJSON_CreateNull();
    case MSGPACK_OBJECT_BOOLEAN: return cJSON_CreateBool(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return cJSON_CreateNumber((double)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return cJSON_CreateNumber((double)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return cJSON_CreateNumber(o->via.f64);
    case MSGPACK_OBJECT_STR: return mp_str(o->via.str.ptr, o->via.str.size, why);
    case MSGPACK_OBJECT_BIN: return mp_str(o->via.bin.ptr, o->via.bin.size, why);
    case MSGPACK_OBJECT_ARRAY: {
        cJSON *a = cJSON_CreateArray();
        for (uint32_t i = 0; a && i < o->via.array.size; i++) {
            cJSON *e = mp_to_json(&o->via.array.ptr[i], why);
            if (!e || !cJSON_AddItemToArray(a, e)) {
                cJSON_Delete(e);
                cJSON_Delete(a);
                return NULL;
            }
        }
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        cJSON *m = cJSON_CreateObject();
        for (uint32_t i = 0; m && i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR) {
                *why = "a map key is not a string";
                cJSON_Delete(m);
                return NULL;
            }
            cJSON *k = mp_str(kv->key.via.str.ptr, kv->key.via.str.size, why);
            cJSON *v = k ? mp_to_json(&kv->val, why) : NULL;
            if (!v || !cJSON_AddItemToObject(m, k->valuestring, v)) {
                cJSON_Delete(v);
                cJSON_Delete(k);
                cJSON_Delete(m);
                return NULL;
            }
            cJSON_Delete(k);
        }
        return m;
    }
    default: *why = "msgpack extension types are not accepted"; return NULL;
    }
}

static cJSON *decode_msgpack(const void *data, size_t len, char *err, size_t errlen) {
    size_t pos = 0;
    if (mp_check(data, len, &pos, 0)) {
        snprintf(err, errlen, "msgpack is truncated, malformed or nested deeper than %d", MAX_DEPTH);
        return NULL;
    }
    if (pos != len) {
        snprintf(err, errlen, "msgpack has %zu bytes after the object", len - pos);
        return NULL;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    cJSON *j = NULL;
    if (msgpack_unpack_next(&u, data, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        snprintf(err, errlen, "msgpack does not decode");
    } else {
        const char *why = "out of memory";
        if (!(j = mp_to_json(&u.data, &why))) snprintf(err, errlen, "msgpack: %s", why);
    }
    msgpack_unpacked_destroy(&u);
    return j;
}

/* Nesting depth of a JSON text, counted over brackets outside strings, so
 * that a hostile message cannot drive cJSON's recursion deep. */
static int json_depth_ok(const char *s, size_t n) {
    int d = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"')
            in_str = 1;
        else if (c == '{' || c == '[') {
            if (++d > MAX_DEPTH) return 0;
        } else if (c == '}' || c == ']')
            d--;
    }
    return 1;
}

static cJSON *decode_json(const char *s, size_t len, char *err, size_t errlen) {
    if (memchr(s, 0, len)) {
        snprintf(err, errlen, "JSON text holds a NUL byte");
        return NULL;
    }
    if (!json_depth_ok(s, len)) {
        snprintf(err, errlen, "JSON nested deeper than %d", MAX_DEPTH);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
    if (!j) {
        const char *e = cJSON_GetErrorPtr();
        size_t at = e && e >= s && e <= s + len ? (size_t)(e - s) : 0;
        snprintf(err, errlen, "JSON does not parse (near byte %zu)", at);
        return NULL;
    }
    while (end && end < s + len && isspace((unsigned char)*end)) end++;
    if (end && end < s + len) {
        snprintf(err, errlen, "JSON has %zu bytes after the object", (size_t)(s + len - end));
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

cJSON *svc_decode_tree(const void *data, size_t len, const char *ct, int *enc, char *err, size_t errlen) {
    const unsigned char *p = data;
    int e = -1;
    if (ct) {
        if (strstr(ct, "msgpack"))
            e = SVC_ENC_MSGPACK;
        else if (strstr(ct, "json"))
            e = SVC_ENC_JSON;
    }
    if (e < 0) {
        size_t i = 0;
        while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n')) i++;
        if (i < len && (p[i] == '{' || p[i] == '['))
            e = SVC_ENC_JSON;
        else if (len && ((p[0] >= 0x80 && p[0] <= 0x9f) || p[0] == 0xde || p[0] == 0xdf || p[0] == 0xdc ||
                         p[0] == 0xdd))
            e = SVC_ENC_MSGPACK;
    }
    *enc = e < 0 ? SVC_ENC_JSON : e;
    if (e < 0) {
        snprintf(err, errlen, "neither JSON nor msgpack (no content-type header; first byte 0x%02x)",
                 len ? p[0] : 0);
        return NULL;
    }
    if (!len) {
        snprintf(err, errlen, "empty message");
        return NULL;
    }
    return e == SVC_ENC_MSGPACK ? decode_msgpack(data, len, err, errlen)
                                : decode_json(data, len, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* msgpack encoding of a cJSON tree (results) */

/* 0, or -1 when the buffer could not grow (each msgpack_pack_* call says so,
 * and a result cut short must not be sent). Counts come from the tree we
 * built, so they fit the int cJSON counts in. */
static int mp_pack(msgpack_packer *pk, const cJSON *j) {
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        int obj = cJSON_IsObject(j);
        size_t n = 0;
        for (const cJSON *c = j->child; c; c = c->next) n++;
        if ((obj ? msgpack_pack_map(pk, n) : msgpack_pack_array(pk, n))) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            if (obj) {
                size_t kl = strlen(c->string);
                if (msgpack_pack_str(pk, kl) || msgpack_pack_str_body(pk, c->string, kl)) return -1;
            }
            if (mp_pack(pk, c)) return -1;
        }
        return 0;
    }
    if (cJSON_IsString(j)) {
        size_t l = strlen(j->valuestring);
        return msgpack_pack_str(pk, l) || msgpack_pack_str_body(pk, j->valuestring, l) ? -1 : 0;
    }
    if (cJSON_IsNumber(j)) {
        double v = j->valuedouble;
        if (v == floor(v) && fabs(v) < 9007199254740992.0) return msgpack_pack_int64(pk, (int64_t)v);
        return msgpack_pack_double(pk, v);
    }
    if (cJSON_IsBool(j)) return cJSON_IsTrue(j) ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    return msgpack_pack_nil(pk);
}

int svc_msgpack_encode(const cJSON *tree, char **out, size_t *len) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (mp_pack(&pk, tree) || !sb.data) {
        msgpack_sbuffer_destroy(&sb);
        return CK_ENOMEM;
    }
    *out = sb.data; /* sbuffer data is malloc'd: the caller frees it */
    *len = sb.size;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* validation */

static int fail(svc_job_error *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(svc_job_error *e, int code, const char *fmt, ...) {
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return SVC_JOB_INVALID;
}

static int get_str(cJSON *o, const char *name, size_t max, char **out, svc_job_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return fail(e, SVC_JERR_INVALID_FIELD, "'%s' must be a string", name);
    size_t n = strlen(v->valuestring);
    if (max && n > max) return fail(e, SVC_JERR_OUT_OF_RANGE, "'%s' is %zu bytes; at most %zu", name, n, max);
    if (!(*out = strdup(v->valuestring))) return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
    return 0;
}

/* A number field within [lo, hi]; integer when want_int. 1 when present. */
static int get_num(cJSON *o, const char *name, double lo, double hi, int want_int, double *out, int *rc,
                   svc_job_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) {
        *rc = fail(e, SVC_JERR_INVALID_FIELD, "'%s' must be a number", name);
        return 0;
    }
    double x = v->valuedouble;
    if (want_int && x != floor(x)) {
        *rc = fail(e, SVC_JERR_INVALID_FIELD, "'%s' must be an integer", name);
        return 0;
    }
    if (!(x >= lo && x <= hi)) {
        *rc = fail(e, SVC_JERR_OUT_OF_RANGE, "'%s' is %g; it must be in %g..%g", name, x, lo, hi);
        return 0;
    }
    *out = x;
    return 1;
}

static int get_bool(cJSON *o, const char *name, int *out, svc_job_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return fail(e, SVC_JERR_INVALID_FIELD, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A growable byte buffer, always NUL-terminated once it holds anything.
 * Every append goes through jb_add, which makes room first and refuses a
 * size that would wrap, so no caller writes a byte it has not checked. */
typedef struct jbuf {
    char *p;    /* malloc'd, owned; NULL until the first append */
    size_t len; /* bytes held, without the NUL */
    size_t cap; /* bytes allocated */
} jbuf;

static int jb_add(jbuf *b, const char *s, size_t n) {
    if (n > SIZE_MAX / 2 - b->len) return CK_ENOMEM; /* len + n + 1, and its doubling, cannot wrap */
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < need) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) return CK_ENOMEM;
        b->p = q;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

/* Text of a message's content: a string, or OpenAI's [{type: text, text}]. */
static int content_text(cJSON *c, jbuf *b, int idx, svc_job_error *e) {
    if (cJSON_IsString(c))
        return jb_add(b, c->valuestring, strlen(c->valuestring))
                   ? fail(e, SVC_JERR_ENGINE_ERROR, "out of memory")
                   : 0;
    if (cJSON_IsArray(c)) {
        cJSON *part;
        cJSON_ArrayForEach(part, c) {
            cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsString(t))
                return fail(e, SVC_JERR_INVALID_FIELD,
                            "messages[%d].content parts must be {\"type\": \"text\", \"text\": ...}", idx);
            int rc = content_text(t, b, idx, e);
            if (rc) return rc;
        }
        return 0;
    }
    return fail(e, SVC_JERR_INVALID_FIELD, "messages[%d].content must be a string or an array of text parts",
                idx);
}

/* `messages`: the role/content list (job->msgs) the engine thread renders
 * with the chat template, and their contents joined with "\n" (job->prompt),
 * the rendering without a template. Roles and contents are the user's data:
 * copied as they are (NUL-free UTF-8, svc_decode_tree), never interpreted. */
static int render_messages(cJSON *msgs, svc_job *job, svc_job_error *e) {
    if (!cJSON_IsArray(msgs) || !msgs->child)
        return fail(e, SVC_JERR_INVALID_FIELD, "'messages' must be a non-empty array");
    size_t count = 0;
    for (const cJSON *c = msgs->child; c; c = c->next) count++;
    /* below 2^28: a message takes 7 bytes at least, a job at most 2^30 (svc_config) */
    if (count > (1u << 28)) return fail(e, SVC_JERR_OUT_OF_RANGE, "too many messages");
    if (!(job->msgs = calloc(count, sizeof *job->msgs)))
        return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
    jbuf b = {0};
    int i = 0, rc = 0;
    cJSON *m;
    /* the empty string first: a prompt of empty contents is "" (or "\n"s), never NULL */
    if (jb_add(&b, "", 0)) return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
    cJSON_ArrayForEach(m, msgs) {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            rc = fail(e, SVC_JERR_INVALID_FIELD, "messages[%d] must be an object with a string 'role'", i);
            break;
        }
        jbuf cb = {0}; /* this message's content alone */
        if ((i > 0 && jb_add(&b, "\n", 1)) || jb_add(&cb, "", 0)) {
            free(cb.p);
            rc = fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
            break;
        }
        if ((rc = content_text(content, &cb, i, e))) {
            free(cb.p);
            break;
        }
        char *r = strdup(role->valuestring);
        job->msgs[i].role = r;
        job->msgs[i].content = cb.p;
        job->n_msgs = ++i;
        if (!r || jb_add(&b, cb.p, cb.len)) {
            rc = fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
            break;
        }
    }
    if (rc) {
        free(b.p);
        return rc;
    }
    job->prompt = b.p;
    job->prompt_len = b.len;
    return 0;
}

/* Elements of array a, counted up to `stop` at most (cJSON's own count is
 * an int that a long enough array would wrap). */
static size_t array_len(const cJSON *a, size_t stop) {
    size_t n = 0;
    for (const cJSON *c = a->child; c && n < stop; c = c->next) n++;
    return n;
}

/* 1 when a number in j is not finite. JSON's 1e999 parses to an infinity and
 * msgpack carries inf and nan; no field takes them, and metadata holding one
 * could not be written back as JSON. Depth is bounded by the decoders. */
int svc_json_has_nonfinite(const cJSON *j) {
    if (cJSON_IsNumber(j)) return !isfinite(j->valuedouble);
    for (const cJSON *c = j->child; c; c = c->next)
        if (svc_json_has_nonfinite(c)) return 1;
    return 0;
}

/* The job's `tokens`: each an integer id below the vocabulary, at most
 * SVC_JOB_TOKENS_MAX (or lim->max_prompt_tokens) of them, counted before
 * anything is allocated for them. */
static int get_tokens(cJSON *toks, const svc_job_limits *lim, svc_job *job, svc_job_error *e) {
    if (!cJSON_IsArray(toks) || !toks->child)
        return fail(e, SVC_JERR_INVALID_FIELD, "'tokens' must be a non-empty array of token ids");
    size_t max = lim->max_prompt_tokens > 0 && lim->max_prompt_tokens < SVC_JOB_TOKENS_MAX
                     ? (size_t)lim->max_prompt_tokens
                     : SVC_JOB_TOKENS_MAX;
    size_t n = array_len(toks, max + 1);
    if (n > max)
        return fail(e, SVC_JERR_PROMPT_TOO_LONG, "'tokens' holds more than %zu ids; the limit is %zu", max,
                    max);
    if (!(job->tokens = malloc(n * sizeof *job->tokens)))
        return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
    cJSON *t;
    cJSON_ArrayForEach(t, toks) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble))
            return fail(e, SVC_JERR_INVALID_FIELD, "tokens[%d] is not an integer", job->n_tokens);
        if (!(t->valuedouble >= 0 && t->valuedouble < lim->vocab_size))
            return fail(e, SVC_JERR_OUT_OF_RANGE, "tokens[%d] = %g is outside the vocabulary (0..%d)",
                        job->n_tokens, t->valuedouble, lim->vocab_size - 1);
        job->tokens[job->n_tokens++] = (int32_t)t->valuedouble;
    }
    return 0;
}

/* The size of a tools tree: its values, and its keys' and strings' bytes;
 * *depth the deepest nesting of containers (t itself is 1). Stops counting
 * past the limits (the answer is then only "over"). */
typedef struct tools_size {
    size_t values, bytes;
    int depth;
} tools_size;

static void measure(const cJSON *t, int depth, tools_size *z) {
    z->values++;
    if (t->string) z->bytes += strlen(t->string);
    if (cJSON_IsString(t)) z->bytes += strlen(t->valuestring);
    if (!cJSON_IsArray(t) && !cJSON_IsObject(t)) return;
    if (depth > z->depth) z->depth = depth;
    if (depth > SVC_JOB_TOOLS_DEPTH || z->values > SVC_JOB_TOOLS_VALUES) return;
    for (const cJSON *c = t->child; c; c = c->next) measure(c, depth + 1, z);
}

int svc_job_tools(const cJSON *tools, size_t max_bytes, jinja_value **out, svc_job_error *e) {
    *out = NULL;
    if (!cJSON_IsArray(tools))
        return fail(
            e, SVC_JERR_INVALID_FIELD,
            "'tools' must be an array of tool objects ({\"type\": \"function\", \"function\": {...}})");
    size_t n = array_len(tools, SVC_JOB_TOOLS_MAX + 1);
    if (n > SVC_JOB_TOOLS_MAX)
        return fail(e, SVC_JERR_TOOLS_TOO_LARGE, "'tools' holds more than %d tools", SVC_JOB_TOOLS_MAX);
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++)
        if (!cJSON_IsObject(t))
            return fail(e, SVC_JERR_INVALID_FIELD,
                        "tools[%d] must be an object ({\"type\": \"function\", \"function\": {...}})", i);
    tools_size z = {0, 0, 0};
    measure(tools, 1, &z);
    if (z.depth > SVC_JOB_TOOLS_DEPTH)
        return fail(e, SVC_JERR_TOOLS_TOO_LARGE, "'tools' nests deeper than %d levels", SVC_JOB_TOOLS_DEPTH);
    if (z.values > SVC_JOB_TOOLS_VALUES)
        return fail(e, SVC_JERR_TOOLS_TOO_LARGE, "'tools' holds more than %d values", SVC_JOB_TOOLS_VALUES);
    if (z.bytes > max_bytes)
        return fail(e, SVC_JERR_TOOLS_TOO_LARGE, "'tools' holds %zu bytes of text; the limit is %zu", z.bytes,
                    max_bytes);
    char why[160];
    int rc = svc_jv_from_json(tools, SVC_JOB_TOOLS_DEPTH, out, why, sizeof why);
    if (rc == CK_ENOMEM) return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
    if (rc) return fail(e, SVC_JERR_INVALID_FIELD, "'tools': %s", why);
    return 0;
}

static int parse_job(cJSON *o, const svc_job_limits *lim, svc_job *job, svc_job_error *e) {
    int rc = 0;
    double x;
    if ((rc = get_str(o, "model", SVC_JOB_STR_MAX, &job->model, e))) return rc;
    if (job->model && lim->model_names[0]) {
        int ok = 0;
        for (int i = 0; i < SVC_JOB_MAX_NAMES && lim->model_names[i]; i++)
            ok |= !strcmp(job->model, lim->model_names[i]);
        if (!ok) {
            char served[200];
            size_t n = 0;
            served[0] = 0;
            for (int i = 0; i < SVC_JOB_MAX_NAMES && lim->model_names[i] && n < sizeof served - 1; i++) {
                int k =
                    snprintf(served + n, sizeof served - n, "%s'%.40s'", i ? ", " : "", lim->model_names[i]);
                n = k < 0 ? n : n + (size_t)k < sizeof served ? n + (size_t)k : sizeof served - 1;
            }
            return fail(e, SVC_JERR_UNKNOWN_MODEL,
                        "model '%.64s' is not served here (this instance serves %s)", job->model, served);
        }
    }
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    cJSON *toks = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    if (cJSON_IsNull(prompt)) prompt = NULL;
    if (cJSON_IsNull(msgs)) msgs = NULL;
    if (cJSON_IsNull(toks)) toks = NULL;
    int given = !!prompt + !!msgs + !!toks;
    if (given == 0) return fail(e, SVC_JERR_MISSING_PROMPT, "give one of 'prompt', 'messages' or 'tokens'");
    if (given > 1)
        return fail(e, SVC_JERR_INVALID_FIELD, "give only one of 'prompt', 'messages' or 'tokens'");
    if (prompt) {
        /* OpenAI also allows a one-element array of strings */
        if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1) prompt = prompt->child;
        if (!cJSON_IsString(prompt)) return fail(e, SVC_JERR_INVALID_FIELD, "'prompt' must be a string");
        job->prompt_len = strlen(prompt->valuestring);
        if (!(job->prompt = strdup(prompt->valuestring)))
            return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
    } else if (msgs) {
        if ((rc = render_messages(msgs, job, e))) return rc;
    } else {
        if ((rc = get_tokens(toks, lim, job, e))) return rc;
    }
    /* `tools`: only with messages, whose template shows them (a prompt or
     * token ids have none) */
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
    if (tools && !cJSON_IsNull(tools)) {
        if (!msgs)
            return fail(
                e, SVC_JERR_INVALID_FIELD,
                "'tools' goes with 'messages' (the chat template shows them), not with 'prompt' or 'tokens'");
        if ((rc = svc_job_tools(tools, lim->max_message_bytes, &job->tools, e))) return rc;
    }
    if (get_num(o, "max_tokens", 1, lim->max_tokens_cap, 1, &x, &rc, e) ||
        get_num(o, "max_completion_tokens", 1, lim->max_tokens_cap, 1, &x, &rc, e))
        job->max_tokens = (int)x;
    if (rc) return rc;
    if (get_num(o, "temperature", 0, 2, 0, &x, &rc, e)) job->samp.temperature = (float)x;
    if (get_num(o, "top_p", 0, 1, 0, &x, &rc, e)) job->samp.top_p = (float)x;
    if (get_num(o, "top_k", 0, 1 << 20, 1, &x, &rc, e)) job->samp.top_k = (int)x;
    if (get_num(o, "min_p", 0, 1, 0, &x, &rc, e)) job->samp.min_p = (float)x;
    if (get_num(o, "repetition_penalty", 0.01, 100, 0, &x, &rc, e)) job->samp.repeat_penalty = (float)x;
    if (get_num(o, "seed", 0, 9007199254740991.0, 1, &x, &rc, e)) job->samp.seed = (uint64_t)x;
    if (get_num(o, "priority", -1000, 1000, 1, &x, &rc, e)) job->priority = (int)x;
    if (get_num(o, "deadline_ms", 1, 7 * 86400000.0, 1, &x, &rc, e)) job->deadline_ms = (int64_t)x;
    if (rc) return rc;
    if ((rc = get_bool(o, "return_confidence", &job->return_confidence, e)) ||
        (rc = get_bool(o, "ignore_eos", &job->ignore_eos, e)) ||
        (rc = get_bool(o, "parse_special", &job->parse_special, e)))
        return rc;
    cJSON *stop = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        if (cJSON_IsString(stop)) {
            if (!*stop->valuestring) return fail(e, SVC_JERR_INVALID_FIELD, "'stop' must not be empty");
            if (strlen(stop->valuestring) > SVC_JOB_STR_MAX)
                return fail(e, SVC_JERR_OUT_OF_RANGE, "a stop string is longer than %d bytes",
                            SVC_JOB_STR_MAX);
            if (!(job->stop[job->n_stop++] = strdup(stop->valuestring)))
                return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
        } else if (cJSON_IsArray(stop)) {
            if (array_len(stop, GEN_MAX_STOPS + 1) > GEN_MAX_STOPS)
                return fail(e, SVC_JERR_OUT_OF_RANGE, "at most %d stop strings", GEN_MAX_STOPS);
            cJSON *s;
            cJSON_ArrayForEach(s, stop) {
                if (!cJSON_IsString(s) || !*s->valuestring)
                    return fail(e, SVC_JERR_INVALID_FIELD, "'stop' must hold non-empty strings");
                if (strlen(s->valuestring) > SVC_JOB_STR_MAX)
                    return fail(e, SVC_JERR_OUT_OF_RANGE, "a stop string is longer than %d bytes",
                                SVC_JOB_STR_MAX);
                if (!(job->stop[job->n_stop++] = strdup(s->valuestring)))
                    return fail(e, SVC_JERR_ENGINE_ERROR, "out of memory");
            }
        } else {
            return fail(e, SVC_JERR_INVALID_FIELD, "'stop' must be a string or an array of strings");
        }
    }
    if ((rc = get_str(o, "session_id", SVC_JOB_STR_MAX, &job->session_id, e)) ||
        (rc = get_str(o, "template", SVC_JOB_STR_MAX, &job->template_name, e)) ||
        (rc = get_str(o, "policy", SVC_JOB_STR_MAX, &job->policy, e)) ||
        (rc = get_bool(o, "save", &job->save_template, e)))
        return rc;
    if (job->template_name && !tpl_name_ok(job->template_name))
        return fail(e, SVC_JERR_INVALID_FIELD, "'template' is 1 to %d bytes of A-Z a-z 0-9 . _ : -",
                    TPL_NAME_MAX);
    if (job->save_template && (!job->template_name || !job->prompt))
        return fail(e, SVC_JERR_INVALID_FIELD,
                    "'save' takes a 'template' name and a text 'prompt' (its text)");
    if (job->policy) {
        kvpol_config pc;
        char perr[200];
        if (kvpol_parse(job->policy, &pc, perr, sizeof perr))
            return fail(e, SVC_JERR_INVALID_POLICY, "policy '%.64s': %s", job->policy, perr);
    }
    return samp_params_check(&job->samp) ? fail(e, SVC_JERR_OUT_OF_RANGE, "sampling parameters out of range")
                                         : 0;
}

static void set_id(svc_job *job, cJSON *o, const char *fallback) {
    cJSON *id = o ? cJSON_GetObjectItemCaseSensitive(o, "id") : NULL;
    const char *s = NULL;
    char num[32];
    if (cJSON_IsString(id) && *id->valuestring && strlen(id->valuestring) <= SVC_JOB_ID_MAX)
        s = id->valuestring;
    else if (cJSON_IsNumber(id) && id->valuedouble == floor(id->valuedouble) &&
             fabs(id->valuedouble) < 1e15) {
        snprintf(num, sizeof num, "%.0f", id->valuedouble);
        s = num;
    }
    if (!s) s = fallback ? fallback : "";
    snprintf(job->id, sizeof job->id, "%s", s);
}

int svc_job_decode(const void *data, size_t len, const char *content_type, const char *fallback_id,
                   const svc_job_limits *lim, svc_job *job, svc_job_error *err) {
    memset(job, 0, sizeof *job);
    memset(err, 0, sizeof *err);
    samp_params_default(&job->samp);
    int enc;
    /* Over the size limit: not even decoded (the encoding is guessed for the reply). */
    if (len > lim->max_message_bytes) {
        const unsigned char *p = data;
        job->encoding = (content_type && strstr(content_type, "msgpack")) ||
                                (len && ((p[0] >= 0x80 && p[0] <= 0x8f) || p[0] == 0xde || p[0] == 0xdf))
                            ? SVC_ENC_MSGPACK
                            : SVC_ENC_JSON;
        set_id(job, NULL, fallback_id);
        return fail(err, SVC_JERR_MESSAGE_TOO_LARGE, "the message is %zu bytes; the limit is %zu", len,
                    lim->max_message_bytes);
    }
    cJSON *o = svc_decode_tree(data, len, content_type, &enc, err->message, sizeof err->message);
    job->encoding = enc;
    if (!o) {
        set_id(job, NULL, fallback_id);
        return SVC_JOB_DEAD;
    }
    if (!cJSON_IsObject(o)) {
        set_id(job, NULL, fallback_id);
        snprintf(err->message, sizeof err->message, "a job must be a %s",
                 enc ? "msgpack map" : "JSON object");
        cJSON_Delete(o);
        return SVC_JOB_DEAD;
    }
    set_id(job, o, fallback_id);
    /* `stream` first, like the id: a job refused below still gets its
     * stream's end record when it asked for a stream (docs/SERVICE.md). */
    int rc = get_bool(o, "stream", &job->stream, err);
    /* metadata is echoed in the error result too, unless it is what is wrong */
    cJSON *md = cJSON_DetachItemViaPointer(o, cJSON_GetObjectItemCaseSensitive(o, "metadata"));
    if (md && svc_json_has_nonfinite(md)) {
        cJSON_Delete(md);
        md = NULL;
        if (!rc)
            rc = fail(err, SVC_JERR_INVALID_FIELD,
                      "'metadata' holds a number that is not finite (1e999, inf, nan)");
    }
    job->metadata = md;
    for (cJSON *c = o->child; c && !rc; c = c->next)
        if (svc_json_has_nonfinite(c))
            rc = fail(err, SVC_JERR_INVALID_FIELD,
                      "'%.64s' holds a number that is not finite (1e999, inf, nan)", c->string);
    cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (!rc && id && !cJSON_IsNull(id) && strcmp(job->id, fallback_id ? fallback_id : "") == 0 &&
        !(cJSON_IsString(id) && !strcmp(id->valuestring, job->id)))
        rc = fail(err, SVC_JERR_INVALID_FIELD, "'id' must be a string of 1..%d bytes or an integer",
                  SVC_JOB_ID_MAX);
    if (!rc) rc = parse_job(o, lim, job, err);
    cJSON_Delete(o);
    return rc;
}

void svc_job_free(svc_job *job) {
    free(job->model);
    free(job->prompt);
    for (int i = 0; job->msgs && i < job->n_msgs; i++) {
        free((char *)job->msgs[i].role);
        free((char *)job->msgs[i].content);
    }
    free(job->msgs);
    jinja_release(job->tools);
    free(job->tokens);
    for (int i = 0; i < job->n_stop; i++) free(job->stop[i]);
    free(job->policy);
    free(job->session_id);
    free(job->template_name);
    cJSON_Delete(job->metadata);
    memset(job, 0, sizeof *job);
}
