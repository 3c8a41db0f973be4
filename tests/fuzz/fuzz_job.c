/* fuzz_job.c - the job decoder (svc_job.h): JSON and msgpack, with every
 * content-type header the service knows (and none, and a wrong one).
 *
 * Input: byte 0 picks the content type, the rest is the Kafka message.
 * Checked: svc_job_decode returns one of its three outcomes; a decoded job
 * keeps its limits (id and strings within their maxima, ids below the
 * vocabulary, a NUL-terminated prompt of prompt_len bytes, tools only with
 * messages). And the tree
 * svc_decode_tree builds survives msgpack and JSON round trips unchanged
 * (svc_msgpack_encode, cJSON's printer): the two decoders agree. */
#include <cjson/cJSON.h>
#include <math.h>

#include "fuzz.h"
#include "svc_job.h"

static const char *const ctypes[] = {NULL,
                                     "application/json",
                                     "application/msgpack",
                                     "application/x-msgpack",
                                     "application/vnd.msgpack",
                                     "text/plain",
                                     "application/json; charset=utf-8"};
#define N_CTYPES (sizeof ctypes / sizeof ctypes[0])

/* Trees cJSON_Compare can judge: finite numbers (NaN never equals itself)
 * and no repeated key in an object (Compare looks keys up by name). */
static int comparable(const cJSON *t) {
    if (cJSON_IsNumber(t) && !isfinite(t->valuedouble)) return 0;
    for (const cJSON *c = t->child; c; c = c->next) {
        if (cJSON_IsObject(t))
            for (const cJSON *d = c->next; d; d = d->next)
                if (c->string && d->string && !strcmp(c->string, d->string)) return 0;
        if (!comparable(c)) return 0;
    }
    return 1;
}

static void check_round_trips(const uint8_t *data, size_t size, const char *ct) {
    char err[256];
    int enc = -1;
    cJSON *t = svc_decode_tree(data, size, ct, &enc, err, sizeof err);
    if (!t) {
        FUZZ_CHECK(memchr(err, 0, sizeof err));
        return;
    }
    FUZZ_CHECK(enc == SVC_ENC_JSON || enc == SVC_ENC_MSGPACK);
    if (comparable(t)) {
        char *mp = NULL;
        size_t mlen = 0;
        if (!svc_msgpack_encode(t, &mp, &mlen)) {
            int enc2 = -1;
            cJSON *u = svc_decode_tree(mp, mlen, "application/msgpack", &enc2, err, sizeof err);
            FUZZ_CHECK(u != NULL);
            FUZZ_CHECK(enc2 == SVC_ENC_MSGPACK);
            FUZZ_CHECK(cJSON_Compare(t, u, 1));
            cJSON_Delete(u);
            free(mp);
        }
        char *js = cJSON_PrintUnformatted(t);
        if (js) {
            int enc3 = -1;
            cJSON *v = svc_decode_tree(js, strlen(js), "application/json", &enc3, err, sizeof err);
            FUZZ_CHECK(v != NULL);
            FUZZ_CHECK(cJSON_Compare(t, v, 1));
            cJSON_Delete(v);
            free(js);
        }
    }
    cJSON_Delete(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *ct = ctypes[data[0] % N_CTYPES];
    data++;
    size--;
    svc_job_limits lim = {.max_message_bytes = 1 << 20,
                          .max_tokens_cap = 4096,
                          .default_max_tokens = 0,
                          .vocab_size = 512,
                          .model_names = {"stories260K", "confkv", NULL}};
    svc_job job;
    svc_job_error err;
    memset(&job, 0, sizeof job);
    memset(&err, 0, sizeof err);
    int rc = svc_job_decode(data, size, ct, "fuzz-fallback-id", &lim, &job, &err);
    FUZZ_CHECK(rc == SVC_JOB_OK || rc == SVC_JOB_DEAD || rc == SVC_JOB_INVALID);
    FUZZ_CHECK(memchr(err.message, 0, sizeof err.message));
    FUZZ_CHECK(memchr(job.id, 0, sizeof job.id));
    if (rc == SVC_JOB_OK) {
        FUZZ_CHECK(job.encoding == SVC_ENC_JSON || job.encoding == SVC_ENC_MSGPACK);
        FUZZ_CHECK(job.prompt || job.n_tokens > 0);
        FUZZ_CHECK(!job.tools || job.msgs); /* tools only with messages */
        if (job.prompt) FUZZ_CHECK(strlen(job.prompt) == job.prompt_len);
        for (int i = 0; i < job.n_tokens; i++)
            FUZZ_CHECK(job.tokens[i] >= 0 && job.tokens[i] < lim.vocab_size);
        FUZZ_CHECK(job.n_stop >= 0 && job.n_stop <= GEN_MAX_STOPS);
        for (int i = 0; i < job.n_stop; i++) FUZZ_CHECK(strlen(job.stop[i]) <= SVC_JOB_STR_MAX);
        FUZZ_CHECK(job.max_tokens >= 0 && job.max_tokens <= lim.max_tokens_cap);
        if (job.session_id) FUZZ_CHECK(strlen(job.session_id) <= SVC_JOB_STR_MAX);
        if (job.template_name) FUZZ_CHECK(strlen(job.template_name) <= SVC_JOB_STR_MAX);
        if (job.policy) FUZZ_CHECK(strlen(job.policy) <= SVC_JOB_STR_MAX);
        if (job.metadata) {
            char *m = cJSON_PrintUnformatted(job.metadata);
            free(m);
        }
    } else if (rc == SVC_JOB_INVALID) {
        FUZZ_CHECK(err.code > SVC_JERR_NONE);
        FUZZ_CHECK(strcmp(svc_job_error_code(err.code), "none") != 0);
    }
    svc_job_free(&job);
    check_round_trips(data, size, ct);
    return 0;
}
