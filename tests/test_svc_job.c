/* test_svc_job.c - job decoding and validation, msgpack safety, results,
 * configuration (svc_job.h, svc_result.h, svc_config.h). */
#include <stdint.h>

#include "ck_err.h"
#include "ck_test.h"
#include "jinja.h"
#include "svc_config.h"
#include "svc_job.h"
#include "svc_result.h"

static svc_job_limits lim(void) {
    svc_job_limits l = {.max_message_bytes = 4096,
                        .max_tokens_cap = 100,
                        .vocab_size = 512,
                        .model_names = {"stories260K", NULL}};
    return l;
}

static int decode(const char *s, size_t n, const char *ct, svc_job *j, svc_job_error *e) {
    svc_job_limits l = lim();
    return svc_job_decode(s, n, ct, "fallback", &l, j, e);
}

static void test_json_ok(void) {
    const char *s =
        "{\"id\":\"a\",\"prompt\":\"hi\",\"max_tokens\":5,\"temperature\":0,\"stop\":[\"x\",\"y\"],"
        "\"priority\":2,\"session_id\":\"s\",\"metadata\":{\"k\":[1,2]},\"model\":\"stories260K\"}";
    svc_job j;
    svc_job_error e;
    CK_CHECK(decode(s, strlen(s), NULL, &j, &e) == SVC_JOB_OK);
    CK_CHECK(!strcmp(j.id, "a") && !strcmp(j.prompt, "hi") && j.max_tokens == 5);
    CK_CHECK(j.samp.temperature == 0 && j.n_stop == 2 && j.priority == 2 && j.encoding == SVC_ENC_JSON);
    CK_CHECK(j.metadata && cJSON_IsObject(j.metadata) && !strcmp(j.session_id, "s"));
    svc_job_free(&j);
}

static void test_messages_and_fallback_id(void) {
    const char *s = "{\"messages\":[{\"role\":\"system\",\"content\":\"A\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"B\"}]}]}";
    svc_job j;
    svc_job_error e;
    CK_CHECK(decode(s, strlen(s), "application/json", &j, &e) == SVC_JOB_OK);
    CK_CHECK(!strcmp(j.prompt, "A\nB") && !strcmp(j.id, "fallback"));
    svc_job_free(&j);
}

static void expect_invalid(const char *s, const char *code) {
    svc_job j;
    svc_job_error e;
    int rc = decode(s, strlen(s), NULL, &j, &e);
    CK_CHECK_MSG(rc == SVC_JOB_INVALID && !strcmp(svc_job_error_code(e.code), code), "%s -> rc %d %s (%s)", s,
                 rc, svc_job_error_code(e.code), e.message);
    CK_CHECK(e.message[0]);
    svc_job_free(&j);
}

static void test_invalid(void) {
    expect_invalid("{\"prompt\":1}", "invalid_field");
    expect_invalid("{\"prompt\":\"x\",\"max_tokens\":\"3\"}", "invalid_field");
    expect_invalid("{\"prompt\":\"x\",\"max_tokens\":1.5}", "invalid_field");
    expect_invalid("{\"prompt\":\"x\",\"max_tokens\":101}", "out_of_range");
    expect_invalid("{\"prompt\":\"x\",\"temperature\":-0.1}", "out_of_range");
    expect_invalid("{\"prompt\":\"x\",\"top_p\":2}", "out_of_range");
    expect_invalid("{\"prompt\":\"x\",\"priority\":1e9}", "out_of_range");
    expect_invalid("{\"prompt\":\"x\",\"model\":\"other\"}", "unknown_model");
    expect_invalid("{\"tokens\":[1,512]}", "out_of_range");
    expect_invalid("{\"max_tokens\":3}", "missing_prompt");
    expect_invalid("{\"prompt\":\"x\",\"tokens\":[1]}", "invalid_field");
    expect_invalid("{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}",
                   "out_of_range");
    expect_invalid("{\"prompt\":\"x\",\"policy\":\"bogus\"}", "invalid_policy");
    expect_invalid("{\"prompt\":\"x\",\"return_confidence\":1}", "invalid_field");
}

static void expect_dead(const void *s, size_t n, const char *ct) {
    svc_job j;
    svc_job_error e;
    int rc = decode(s, n, ct, &j, &e);
    CK_CHECK_MSG(rc == SVC_JOB_DEAD, "rc %d (%s)", rc, e.message);
    CK_CHECK(e.message[0]);
    svc_job_free(&j);
}

static void test_undecodable(void) {
    expect_dead("hello", 5, NULL);
    expect_dead("{\"prompt\":", 10, NULL);
    expect_dead("{} x", 4, NULL);
    expect_dead("[1,2]", 5, NULL);
    expect_dead("", 0, "application/json");
    /* msgpack: a map declaring 2^32-1 entries in 5 bytes (must not allocate) */
    expect_dead("\xdf\xff\xff\xff\xff", 5, NULL);
    expect_dead("\xdd\xff\xff\xff\xff", 5, "application/msgpack");
    /* truncated: {"prompt": "abc"} cut short */
    expect_dead("\x81\xa6prompt\xa3"
                "ab",
                11, NULL);
    /* trailing bytes */
    expect_dead("\x80\x00", 2, NULL);
    /* a non-string key */
    expect_dead("\x81\x01\x02", 3, NULL);
    /* NUL in a string */
    expect_dead("\x81\xa6prompt\xa3"
                "a\0b",
                12, NULL);
    /* deep nesting */
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    expect_dead(deep, 200, NULL);
    uint8_t mp[100];
    for (int i = 0; i < 100; i++) mp[i] = 0x91;
    mp[99] = 0x00;
    expect_dead(mp, 100, "application/msgpack");
    /* random bytes never crash */
    uint32_t x = 12345;
    uint8_t buf[256];
    for (int t = 0; t < 20000; t++) {
        size_t n = (size_t)(t % 255) + 1;
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            buf[i] = (uint8_t)(x >> 24);
        }
        if (t % 3 == 0) buf[0] = 0x80 | (buf[0] & 0x0f);
        svc_job j;
        svc_job_error e;
        decode((const char *)buf, n, NULL, &j, &e);
        svc_job_free(&j);
    }
}

static void test_msgpack_job(void) {
    /* {"id": "m", "prompt": "hi", "max_tokens": 3} */
    const char m[] = "\x83\xa2id\xa1m\xa6prompt\xa2hi\xaamax_tokens\x03";
    svc_job j;
    svc_job_error e;
    CK_CHECK(decode(m, sizeof m - 1, NULL, &j, &e) == SVC_JOB_OK);
    CK_CHECK(j.encoding == SVC_ENC_MSGPACK && !strcmp(j.id, "m") && j.max_tokens == 3);
    /* result in msgpack decodes back to the same tree */
    cJSON *r = svc_result_build(&j, NULL, SVC_JERR_OUT_OF_RANGE, "msg", NULL, "model", "inst");
    char *out;
    size_t n;
    CK_CHECK(r && svc_result_encode(r, SVC_ENC_MSGPACK, &out, &n) == 0);
    int enc;
    char err[200];
    cJSON *back = svc_decode_tree(out, n, NULL, &enc, err, sizeof err);
    CK_CHECK_MSG(back && enc == SVC_ENC_MSGPACK, "%s", err);
    CK_CHECK(cJSON_Compare(r, back, 1));
    cJSON *ec = cJSON_GetObjectItem(cJSON_GetObjectItem(back, "error"), "code");
    CK_CHECK(cJSON_IsString(ec) && !strcmp(ec->valuestring, "out_of_range"));
    cJSON_Delete(back);
    cJSON_Delete(r);
    free(out);
    svc_job_free(&j);
}

static void test_too_large(void) {
    char *big = malloc(5000);
    memset(big, ' ', 5000);
    big[0] = '{';
    big[4999] = '}';
    svc_job j;
    svc_job_error e;
    CK_CHECK(decode(big, 5000, NULL, &j, &e) == SVC_JOB_INVALID);
    CK_CHECK(!strcmp(svc_job_error_code(e.code), "message_too_large") && !strcmp(j.id, "fallback"));
    svc_job_free(&j);
    free(big);
}

static void test_utf8(void) {
    char *s = svc_utf8_clean("a\xff"
                             "b\xc3\xa9\0c\xed\xa0\x80",
                             10);
    CK_CHECK(s && !strcmp(s, "a\xef\xbf\xbd"
                             "b\xc3\xa9\xef\xbf\xbd"
                             "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
    free(s);
    char *b = svc_base64("foobar", 6);
    CK_CHECK(!strcmp(b, "Zm9vYmFy"));
    free(b);
    b = svc_base64("fo", 2);
    CK_CHECK(!strcmp(b, "Zm8="));
    free(b);
}

static void test_config(void) {
    char *argv[] = {"confkvd",          "--http-port",        "0", "--kafka.sasl.password", "pw",
                    "--kafka-embedded", "--max-tokens-cap=7", NULL};
    svc_config c;
    char err[256];
    CK_CHECK_MSG(svc_config_load(&c, 7, argv, err, sizeof err) == 0, "%s", err);
    CK_CHECK(c.http_port == 0 && c.kafka_embedded == 1 && c.max_tokens_cap == 7);
    CK_CHECK(!strcmp(svc_config_get(&c, "kafka.sasl.password"), "pw"));
    CK_CHECK(svc_config_is_secret("kafka.sasl.password") && svc_config_is_secret("kafka.ssl.key.pem"));
    CK_CHECK(!svc_config_is_secret("kafka.bootstrap.servers"));
    CK_CHECK(svc_config_is_secret("kafka.sasl.oauthbearer.token") && svc_config_is_secret("redis"));
    /* what `confkv batch --local` takes: the models' and engines' keys, in
     * either spelling, and --config; not the service's own, nor unknown ones */
    CK_CHECK(svc_config_engine_flag("--model") && svc_config_engine_flag("--route-rule=tokens=4,never"));
    CK_CHECK(svc_config_engine_flag("--max_memory_mb") && svc_config_engine_flag("--config"));
    CK_CHECK(!svc_config_engine_flag("--http-port") && !svc_config_engine_flag("--redis"));
    CK_CHECK(!svc_config_engine_flag("--kafka.bootstrap.servers") &&
             !svc_config_engine_flag("--no-such-key"));
    CK_CHECK(!svc_config_engine_flag("model") && !svc_config_engine_flag("--"));
    /* the service's token counts are no secret (`token` marks one only in kafka.* keys) */
    CK_CHECK(!svc_config_is_secret("default_max_tokens") && !svc_config_is_secret("max_tokens_cap") &&
             !svc_config_is_secret("max_prompt_tokens"));
    svc_config_free(&c);
    char *bad[] = {"confkvd", "--max-inflight", "0", NULL};
    CK_CHECK(svc_config_load(&c, 3, bad, err, sizeof err) != 0 && strstr(err, "max_inflight"));
    svc_config_free(&c);
}

/* `model` given several times (NAME=PATH and options), and the cascade's
 * keys: what svc_config_load makes of them, and what it refuses. */
static void test_config_models(void) {
    svc_config c;
    char err[512];
    char *two[] = {"confkvd",
                   "--model",
                   "small=/m/s.bin,tokenizer=/m/t.bin,kv_budget_mb=8",
                   "--model",
                   "large=/m/l.gguf,chat_template=/t.jinja",
                   "--route",
                   "cascade",
                   "--route-models",
                   "small,large",
                   "--route-rule",
                   "tokens=4,rewind=2,always",
                   "--default-model",
                   "auto",
                   NULL};
    CK_CHECK_MSG(svc_config_load(&c, 13, two, err, sizeof err) == 0, "%s", err);
    CK_CHECK(c.n_models == 2 && !strcmp(c.models[0].name, "small") && !strcmp(c.models[0].path, "/m/s.bin") &&
             !strcmp(c.models[0].tokenizer, "/m/t.bin") && c.models[0].kv_budget_mb == 8 &&
             !c.models[0].chat_template);
    CK_CHECK(!strcmp(c.models[1].name, "large") && !strcmp(c.models[1].path, "/m/l.gguf") &&
             !strcmp(c.models[1].chat_template, "/t.jinja") && !c.models[1].tokenizer);
    CK_CHECK(c.route_cascade && c.route_small == 0 && c.route_large == 1 && !strcmp(c.model, "/m/s.bin"));
    svc_config_free(&c);
    /* a bare path, even one with '=' after a '/', is the single unnamed model */
    char *one[] = {"confkvd", "--model", "/dir/a=b.gguf", NULL};
    CK_CHECK_MSG(svc_config_load(&c, 3, one, err, sizeof err) == 0, "%s", err);
    CK_CHECK(c.n_models == 1 && !c.models[0].name && !strcmp(c.models[0].path, "/dir/a=b.gguf") &&
             !c.route_cascade);
    svc_config_free(&c);
    struct {
        const char *a[6];
        const char *why;
    } bad[] = {
        {{"--model", "a=/x", "--model", "a=/y"}, "given twice"},
        {{"--model", "/x", "--model", "b=/y"}, "needs a name"},
        {{"--model", "a=/x,kv_budget_mb=0"}, "kv_budget_mb"},
        {{"--model", "a=/x,threads=2"}, "unknown option 'threads'"},
        {{"--model", "auto=/x"}, "'auto'"},
        {{"--model", "a=/x", "--route", "cascade"}, "route_models"},
        {{"--model", "a=/x", "--route-models", "a,a"}, "route is off"},
        {{"--model", "a=/x", "--default-model", "auto"}, "default_model"},
        {{"--model", "a=/x", "--model-name", "n"}, "model_name"},
        {{"--model", "a=/x", "--route", "sometimes"}, "route"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[8] = {"confkvd"};
        int argc = 1;
        for (int k = 0; k < 6 && bad[i].a[k]; k++) argv[argc++] = (char *)bad[i].a[k];
        err[0] = 0;
        int rc = svc_config_load(&c, argc, argv, err, sizeof err);
        CK_CHECK_MSG(rc == CK_EINVAL && strstr(err, bad[i].why), "case %zu: rc %d, '%s'", i, rc, err);
        svc_config_free(&c);
    }
}

/* ------------------------------------------------------------------------ */
/* hostile messages */

#define MP(lit) lit, sizeof lit - 1 /* a msgpack literal and its length (it may hold NULs) */

static int decode_lim(const void *s, size_t n, const char *ct, const svc_job_limits *l, svc_job *j,
                      svc_job_error *e) {
    return svc_job_decode(s, n, ct, "fallback", l, j, e);
}

/* "messages" of n copies of `msg` (a JSON object text) joined by commas. */
static char *json_messages(const char *msg, int n, size_t *len) {
    size_t ml = strlen(msg), cap = 32 + (size_t)n * (ml + 1);
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t w = (size_t)snprintf(s, cap, "{\"id\":\"many\",\"messages\":[");
    for (int i = 0; i < n; i++) {
        if (i) s[w++] = ',';
        memcpy(s + w, msg, ml);
        w += ml;
    }
    memcpy(s + w, "]}", 3);
    *len = w + 2;
    return s;
}

/* The rendered prompt must be exactly n-1 newlines: an empty content adds no
 * text, and the separators are all that is left (the buffer must grow for
 * them alone, past its first 256 bytes). */
static void test_empty_content_messages(void) {
    svc_job_limits l = lim();
    l.max_message_bytes = 2u << 20;
    static const int counts[] = {1, 2, 256, 257, 258, 300, 1000, 30000};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        int n = counts[c];
        size_t len;
        char *s = json_messages("{\"role\":\"user\",\"content\":[]}", n, &len);
        CK_CHECK(s);
        svc_job j;
        svc_job_error e;
        int rc = decode_lim(s, len, NULL, &l, &j, &e);
        free(s);
        CK_CHECK_MSG(rc == SVC_JOB_OK, "n %d: rc %d %s", n, rc, e.message);
        CK_CHECK_MSG(j.prompt && j.prompt_len == (size_t)(n - 1) && strlen(j.prompt) == j.prompt_len,
                     "n %d: len %zu", n, j.prompt_len);
        for (size_t i = 0; i < j.prompt_len; i++) CK_CHECK(j.prompt[i] == '\n');
        svc_job_free(&j);
    }
    if (counts[7] == 30000) { /* a job of about 900 KB, as tests/svc/bad_input.sh sends */
        size_t len;
        char *s = json_messages("{\"role\":\"user\",\"content\":[]}", 30000, &len);
        CK_CHECK(s && len > 850000);
        free(s);
    }
    /* mixed: text, empty arrays, empty strings, parts */
    const char *m =
        "{\"messages\":[{\"role\":\"a\",\"content\":\"xy\"},{\"role\":\"b\",\"content\":[]},"
        "{\"role\":\"c\",\"content\":\"\"},{\"role\":\"d\",\"content\":[{\"type\":\"text\",\"text\":\"\"},"
        "{\"type\":\"text\",\"text\":\"z\"}]}]}";
    svc_job j;
    svc_job_error e;
    CK_CHECK(decode(m, strlen(m), NULL, &j, &e) == SVC_JOB_OK);
    CK_CHECK_MSG(!strcmp(j.prompt, "xy\n\n\nz") && j.prompt_len == 6, "'%s'", j.prompt);
    svc_job_free(&j);
    /* one long content after many empty ones: the buffer grows past both */
    size_t big = 5000, len = 0;
    char *s = malloc(big + 2000 * 32 + 64);
    CK_CHECK(s);
    len += (size_t)sprintf(s, "{\"messages\":[");
    for (int i = 0; i < 2000; i++) len += (size_t)sprintf(s + len, "{\"role\":\"u\",\"content\":[]},");
    len += (size_t)sprintf(s + len, "{\"role\":\"u\",\"content\":\"");
    memset(s + len, 'q', big);
    len += big;
    len += (size_t)sprintf(s + len, "\"}]}");
    svc_job_limits l2 = lim();
    l2.max_message_bytes = 1u << 20;
    int rc = decode_lim(s, len, NULL, &l2, &j, &e);
    free(s);
    CK_CHECK_MSG(rc == SVC_JOB_OK, "%s", e.message);
    CK_CHECK(j.prompt_len == 2000 + big && strlen(j.prompt) == j.prompt_len);
    CK_CHECK(j.prompt[1999] == '\n' && j.prompt[2000] == 'q' && j.prompt[j.prompt_len - 1] == 'q');
    svc_job_free(&j);
}

/* The same in msgpack: 30,000 {"role": "user", "content": []} in an array32. */
static void test_empty_content_msgpack(void) {
    static const uint8_t one[] = "\x82\xa4role\xa4user\xa7"
                                 "content\x90";
    size_t ol = sizeof one - 1, n = 30000, len = 0;
    uint8_t *m = malloc(32 + n * ol);
    CK_CHECK(m);
    static const uint8_t head[] = "\x81\xa8messages\xdd";
    memcpy(m, head, sizeof head - 1);
    len = sizeof head - 1;
    for (int k = 3; k >= 0; k--) m[len++] = (uint8_t)(n >> (8 * k));
    for (size_t i = 0; i < n; i++, len += ol) memcpy(m + len, one, ol);
    svc_job_limits l = lim();
    l.max_message_bytes = 1u << 20;
    svc_job j;
    svc_job_error e;
    int rc = decode_lim(m, len, NULL, &l, &j, &e);
    free(m);
    CK_CHECK_MSG(rc == SVC_JOB_OK, "rc %d %s", rc, e.message);
    CK_CHECK(j.encoding == SVC_ENC_MSGPACK && j.prompt_len == n - 1 && strspn(j.prompt, "\n") == n - 1);
    svc_job_free(&j);
}

/* Empty keys and strings in msgpack (msgpack-c may give them a NULL pointer):
 * they decode; a job without a prompt is then missing_prompt. */
static void test_msgpack_empty_strings(void) {
    static const struct {
        const char *m;
        size_t n;
        int rc;
        const char *code;
    } cases[] = {
        {MP("\x81\xa0\xc0"), SVC_JOB_INVALID, "missing_prompt"},         /* {"": nil}, fixstr */
        {MP("\x81\xd9\x00\xc0"), SVC_JOB_INVALID, "missing_prompt"},     /* str8 key of 0 bytes */
        {MP("\xde\x00\x01\xa0\xc0"), SVC_JOB_INVALID, "missing_prompt"}, /* map16 of {"": nil}: 5 bytes */
        {MP("\xdf\x00\x00\x00\x01\xda\x00\x00\xc0"), SVC_JOB_INVALID, "missing_prompt"},
        {MP("\x82\xa0\xa0\xa6prompt\xa2hi"), SVC_JOB_OK, NULL}, /* {"": "", "prompt": "hi"} */
        {MP("\x81\xa6prompt\xa0"), SVC_JOB_OK, NULL},           /* prompt "" */
        {MP("\x81\xa6prompt\xc4\x00"), SVC_JOB_OK, NULL},       /* prompt: empty bin */
        {MP("\x82\xa6prompt\xa1x\xa8metadata\x81\xa0\xa0"), SVC_JOB_OK, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        svc_job j;
        svc_job_error e;
        int rc = decode(cases[i].m, cases[i].n, NULL, &j, &e);
        CK_CHECK_MSG(rc == cases[i].rc &&
                         (!cases[i].code || !strcmp(svc_job_error_code(e.code), cases[i].code)),
                     "case %zu: rc %d %s (%s)", i, rc, svc_job_error_code(e.code), e.message);
        if (rc == SVC_JOB_OK)
            CK_CHECK(j.prompt && strlen(j.prompt) == j.prompt_len && j.encoding == SVC_ENC_MSGPACK);
        if (i == 5 || i == 6) CK_CHECK(j.prompt_len == 0);
        if (i == 7) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(j.metadata, "");
            CK_CHECK(cJSON_IsString(v) && !*v->valuestring);
            /* and the metadata goes back out through the encoder unchanged */
            char *out;
            size_t n;
            CK_CHECK(svc_msgpack_encode(j.metadata, &out, &n) == 0);
            CK_CHECK(n == 3 && !memcmp(out, "\x81\xa0\xa0", 3));
            free(out);
        }
        svc_job_free(&j);
    }
}

/* A number that is not finite anywhere is invalid_field, in both encodings,
 * and the job keeps its id (it gets an error result, not a dead letter). */
static void expect_nonfinite(const void *m, size_t n, const char *what) {
    svc_job j;
    svc_job_error e;
    int rc = decode(m, n, NULL, &j, &e);
    CK_CHECK_MSG(rc == SVC_JOB_INVALID && e.code == SVC_JERR_INVALID_FIELD, "%s: rc %d %s (%s)", what, rc,
                 svc_job_error_code(e.code), e.message);
    CK_CHECK_MSG(strstr(e.message, "not finite") && !strcmp(j.id, "nf"), "%s: %s / id %s", what, e.message,
                 j.id);
    /* never echoed back: a result could not carry it as JSON */
    CK_CHECK(!j.metadata || !cJSON_IsObject(j.metadata) || cJSON_GetArraySize(j.metadata) == 1);
    svc_job_free(&j);
}

static void test_nonfinite(void) {
    static const char *json[] = {
        "{\"id\":\"nf\",\"prompt\":\"x\",\"metadata\":{\"a\":1e999}}",
        "{\"id\":\"nf\",\"prompt\":\"x\",\"metadata\":{\"a\":[1,{\"b\":-1e999}]}}",
        "{\"id\":\"nf\",\"prompt\":\"x\",\"metadata\":1e999}",
        "{\"id\":\"nf\",\"prompt\":\"x\",\"temperature\":1e999}",
        "{\"id\":\"nf\",\"prompt\":\"x\",\"top_p\":-1e999}",
        "{\"id\":\"nf\",\"prompt\":\"x\",\"max_tokens\":1e999}",
        "{\"id\":\"nf\",\"prompt\":\"x\",\"seed\":-1e999}",
        "{\"id\":\"nf\",\"tokens\":[1,1e999]}",
        "{\"id\":\"nf\",\"prompt\":\"x\",\"unknown_field\":[1e400]}",
    };
    for (size_t i = 0; i < sizeof json / sizeof json[0]; i++)
        expect_nonfinite(json[i], strlen(json[i]), json[i]);
    /* metadata wrong, but the rest is fine: the job still gets no metadata */
    svc_job j;
    svc_job_error e;
    CK_CHECK(decode(json[0], strlen(json[0]), NULL, &j, &e) == SVC_JOB_INVALID && j.metadata == NULL);
    svc_job_free(&j);
    /* a bad parameter leaves good metadata to be echoed */
    const char *s = "{\"id\":\"nf\",\"prompt\":\"x\",\"temperature\":1e999,\"metadata\":{\"k\":2}}";
    CK_CHECK(decode(s, strlen(s), NULL, &j, &e) == SVC_JOB_INVALID && cJSON_IsObject(j.metadata));
    svc_job_free(&j);
    /* large but finite numbers are still fine in metadata */
    s = "{\"id\":\"nf\",\"prompt\":\"x\",\"metadata\":{\"a\":1e308,\"b\":-1e308,\"c\":4.9e-324}}";
    CK_CHECK_MSG(decode(s, strlen(s), NULL, &j, &e) == SVC_JOB_OK, "%s", e.message);
    svc_job_free(&j);
    /* msgpack: float64 +inf / -inf / nan, float32 +inf (decodable: an error result, not a dead letter) */
    static const struct {
        const char *m;
        size_t n;
    } mp[] = {
        {MP("\x83\xa2id\xa2nf\xa6prompt\xa1x\xa8metadata\xcb\x7f\xf0\x00\x00\x00\x00\x00\x00")},
        {MP("\x83\xa2id\xa2nf\xa6prompt\xa1x\xabtemperature\xcb\xff\xf0\x00\x00\x00\x00\x00\x00")},
        {MP("\x83\xa2id\xa2nf\xa6prompt\xa1x\xa5top_p\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00")},
        {MP("\x83\xa2id\xa2nf\xa6prompt\xa1x\xa8metadata\x91\xca\x7f\x80\x00\x00")},
    };
    for (size_t i = 0; i < sizeof mp / sizeof mp[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "msgpack case %zu", i);
        expect_nonfinite(mp[i].m, mp[i].n, what);
    }
}

/* tokens: a long array is copied id for id; past the limit it is refused
 * before anything is allocated for it. */
static char *json_tokens(int n, size_t *len) {
    char *s = malloc(32 + (size_t)n * 5);
    if (!s) return NULL;
    size_t w = (size_t)sprintf(s, "{\"tokens\":[");
    for (int i = 0; i < n; i++) w += (size_t)sprintf(s + w, i ? ",%d" : "%d", i % 512);
    w += (size_t)sprintf(s + w, "]}");
    *len = w;
    return s;
}

static void test_huge_tokens(void) {
    svc_job_limits l = lim();
    l.max_message_bytes = 4u << 20;
    size_t len;
    svc_job j;
    svc_job_error e;
    char *s = json_tokens(200000, &len);
    CK_CHECK(s);
    int rc = decode_lim(s, len, NULL, &l, &j, &e);
    free(s);
    CK_CHECK_MSG(rc == SVC_JOB_OK && j.n_tokens == 200000, "rc %d n %d %s", rc, j.n_tokens, e.message);
    for (int i = 0; i < j.n_tokens; i++)
        CK_CHECK_MSG(j.tokens[i] == i % 512, "tokens[%d] = %d", i, j.tokens[i]);
    svc_job_free(&j);
    l.max_prompt_tokens = 1000;
    for (int n = 999; n <= 1001; n++) {
        s = json_tokens(n, &len);
        CK_CHECK(s);
        rc = decode_lim(s, len, NULL, &l, &j, &e);
        free(s);
        if (n <= 1000)
            CK_CHECK_MSG(rc == SVC_JOB_OK && j.n_tokens == n, "n %d: %s", n, e.message);
        else
            CK_CHECK_MSG(rc == SVC_JOB_INVALID && e.code == SVC_JERR_PROMPT_TOO_LONG && !j.tokens, "n %d: %s",
                         n, e.message);
        svc_job_free(&j);
    }
    /* msgpack array32 of 300,000 positive fixints, under a limit of 1000 */
    size_t n = 300000;
    uint8_t *m = malloc(16 + n);
    CK_CHECK(m);
    memcpy(m, "\x81\xa6tokens\xdd", 9);
    for (int k = 3; k >= 0; k--) m[9 + 3 - k] = (uint8_t)(n >> (8 * k));
    for (size_t i = 0; i < n; i++) m[13 + i] = (uint8_t)(i % 128);
    rc = decode_lim(m, 13 + n, NULL, &l, &j, &e);
    CK_CHECK_MSG(rc == SVC_JOB_INVALID && e.code == SVC_JERR_PROMPT_TOO_LONG, "rc %d %s", rc, e.message);
    svc_job_free(&j);
    l.max_prompt_tokens = 0;
    rc = decode_lim(m, 13 + n, NULL, &l, &j, &e);
    free(m);
    CK_CHECK_MSG(rc == SVC_JOB_OK && j.n_tokens == (int)n && j.tokens[n - 1] == (int32_t)((n - 1) % 128),
                 "%s", e.message);
    svc_job_free(&j);
}

/* What a template sees of a decoded job's tools: `tools|tojson`. */
static char *tools_json(jinja_value *tools) {
    static const char T[] = "{% if tools is none %}None{% else %}{{ tools | tojson }}{% endif %}";
    jinja_template *t = NULL;
    jinja_error err;
    jinja_value *vars = jinja_dict();
    char *out = NULL;
    if (vars && !jinja_parse(T, strlen(T), NULL, &t, &err) &&
        !jinja_dict_set(vars, "tools", 5, tools ? jinja_ref(tools) : jinja_none()))
        jinja_render(t, vars, NULL, &out, NULL, &err);
    jinja_release(vars);
    jinja_template_free(t);
    return out;
}

/* A job's `tools`: passed to the template as sent (key order, numbers,
 * booleans, null), only with messages, within its limits. */
static void test_tools(void) {
    const char *s =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"z\":{\"type\":\"integer\",\"enum\":[1,2]},\"a\":{\"default\":0.5,"
        "\"x\":null,\"b\":true}},\"required\":[\"z\"]}}}]}";
    svc_job j;
    svc_job_error e;
    int rc = decode(s, strlen(s), NULL, &j, &e);
    CK_CHECK_MSG(rc == SVC_JOB_OK && j.tools, "rc %d %s", rc, e.message);
    char *got = tools_json(j.tools);
    const char *want =
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"z\": {\"type\": \"integer\", "
        "\"enum\": [1, 2]}, \"a\": {\"default\": 0.5, \"x\": null, \"b\": true}}, \"required\": "
        "[\"z\"]}}}]";
    CK_CHECK_MSG(got && !strcmp(got, want), "%s", got ? got : "(null)");
    free(got);
    svc_job_free(&j);
    /* none, null and an empty list: None, None, [] (as transformers passes them) */
    const char *n1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":null}";
    CK_CHECK(decode(n1, strlen(n1), NULL, &j, &e) == SVC_JOB_OK && j.tools == NULL);
    svc_job_free(&j);
    const char *n2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[]}";
    CK_CHECK(decode(n2, strlen(n2), NULL, &j, &e) == SVC_JOB_OK && j.tools);
    got = tools_json(j.tools);
    CK_CHECK(got && !strcmp(got, "[]"));
    free(got);
    svc_job_free(&j);
    /* refusals */
    expect_invalid("{\"prompt\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "invalid_field");
    expect_invalid("{\"tokens\":[1],\"tools\":[{\"type\":\"function\"}]}", "invalid_field");
    expect_invalid("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{\"type\":\"function\"}}",
                   "invalid_field");
    expect_invalid("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":\"f\"}", "invalid_field");
    expect_invalid("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{},1]}",
                   "invalid_field");
    expect_invalid("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"n\":1e300}]}",
                   "invalid_field");
    /* the tools array is level 1, a tool 2: 30 arrays inside reach the limit, 31 pass it */
    char deep[512];
    for (int extra = 0; extra < 2; extra++) {
        int k = snprintf(deep, sizeof deep,
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"a\":");
        for (int i = 0; i < SVC_JOB_TOOLS_DEPTH - 2 + extra; i++) deep[k++] = '[';
        for (int i = 0; i < SVC_JOB_TOOLS_DEPTH - 2 + extra; i++) deep[k++] = ']';
        snprintf(deep + k, sizeof deep - (size_t)k, "}]}");
        if (extra) {
            expect_invalid(deep, "tools_too_large");
        } else {
            CK_CHECK_MSG(decode(deep, strlen(deep), NULL, &j, &e) == SVC_JOB_OK, "%s", e.message);
            svc_job_free(&j);
        }
    }
    /* more tools than SVC_JOB_TOOLS_MAX, more values than SVC_JOB_TOOLS_VALUES */
    size_t cap = 400000;
    char *big = malloc(cap);
    CK_CHECK(big != NULL);
    if (!big) return;
    svc_job_limits l = lim();
    l.max_message_bytes = cap;
    int k = snprintf(big, cap, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[");
    for (int i = 0; i <= SVC_JOB_TOOLS_MAX; i++)
        k += snprintf(big + k, cap - (size_t)k, "%s{}", i ? "," : "");
    snprintf(big + k, cap - (size_t)k, "]}");
    rc = svc_job_decode(big, strlen(big), NULL, "f", &l, &j, &e);
    CK_CHECK_MSG(rc == SVC_JOB_INVALID && e.code == SVC_JERR_TOOLS_TOO_LARGE, "rc %d %s", rc, e.message);
    svc_job_free(&j);
    k = snprintf(big, cap, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"a\":[");
    for (int i = 0; i < SVC_JOB_TOOLS_VALUES; i++)
        k += snprintf(big + k, cap - (size_t)k, "%s0", i ? "," : "");
    snprintf(big + k, cap - (size_t)k, "]}]}");
    rc = svc_job_decode(big, strlen(big), NULL, "f", &l, &j, &e);
    CK_CHECK_MSG(rc == SVC_JOB_INVALID && e.code == SVC_JERR_TOOLS_TOO_LARGE, "rc %d %s", rc, e.message);
    svc_job_free(&j);
    free(big);
    /* text over the byte limit (the CLI's and a msgpack job's bound) */
    cJSON *t = cJSON_Parse("[{\"description\":\"0123456789\"}]");
    jinja_value *jv = NULL;
    CK_CHECK(t && svc_job_tools(t, 8, &jv, &e) == SVC_JOB_INVALID && e.code == SVC_JERR_TOOLS_TOO_LARGE &&
             !jv);
    CK_CHECK(t && svc_job_tools(t, 64, &jv, &e) == 0 && jv);
    jinja_release(jv);
    cJSON_Delete(t);
}

/* The result says what the engine changed (eng_result.warnings). */
static void test_result_warnings(void) {
    const char *s = "{\"id\":\"w\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    svc_job j;
    svc_job_error e;
    CK_CHECK(decode(s, strlen(s), NULL, &j, &e) == SVC_JOB_OK);
    svc_work w;
    memset(&w, 0, sizeof w);
    w.status = SVC_WORK_OK;
    cJSON *r0 = svc_result_build(&j, &w, 0, NULL, NULL, "model", "inst");
    CK_CHECK(r0 && !cJSON_GetObjectItem(r0, "warnings"));
    w.warnings = ENG_WARN_SYSTEM_MERGED;
    cJSON *r1 = svc_result_build(&j, &w, 0, NULL, NULL, "model", "inst");
    cJSON *wa = cJSON_GetObjectItem(r1, "warnings");
    CK_CHECK(cJSON_IsArray(wa) && cJSON_GetArraySize(wa) == 1 && cJSON_IsString(wa->child) &&
             strstr(wa->child->valuestring, "system message merged"));
    cJSON_Delete(r0);
    cJSON_Delete(r1);
    svc_job_free(&j);
}

/* `stream`: a boolean, read before the other fields, so a job refused for
 * another field still says it wanted a stream (its end record is sent). */
static void test_stream(void) {
    svc_job j;
    svc_job_error e;
    const char *ok = "{\"prompt\":\"hi\",\"stream\":true}";
    CK_CHECK(decode(ok, strlen(ok), NULL, &j, &e) == SVC_JOB_OK && j.stream == 1);
    svc_job_free(&j);
    const char *off = "{\"prompt\":\"hi\",\"stream\":null}";
    CK_CHECK(decode(off, strlen(off), NULL, &j, &e) == SVC_JOB_OK && j.stream == 0);
    svc_job_free(&j);
    const char *bad = "{\"prompt\":\"hi\",\"stream\":\"yes\"}";
    CK_CHECK(decode(bad, strlen(bad), NULL, &j, &e) == SVC_JOB_INVALID && j.stream == 0);
    CK_CHECK_MSG(e.code == SVC_JERR_INVALID_FIELD && strstr(e.message, "'stream'"), "%s", e.message);
    svc_job_free(&j);
    const char *later = "{\"prompt\":\"hi\",\"stream\":true,\"temperature\":\"hot\",\"metadata\":[1]}";
    CK_CHECK(decode(later, strlen(later), NULL, &j, &e) == SVC_JOB_INVALID && j.stream == 1);
    CK_CHECK(e.code == SVC_JERR_INVALID_FIELD && cJSON_IsArray(j.metadata));
    svc_job_free(&j);
    /* the UTF-8 scan the stream's cuts share with svc_utf8_clean */
    CK_CHECK(svc_utf8_char((const unsigned char *)"\xe2\x82\xac", 3) == 3);
    CK_CHECK(svc_utf8_char((const unsigned char *)"\xe2\x82", 2) == 0);
    CK_CHECK(svc_utf8_char((const unsigned char *)"\xed\xa0\x80", 3) == 0); /* a surrogate */
    CK_CHECK(svc_utf8_char((const unsigned char *)"", 1) == 0);             /* NUL */
}

int main(void) {
    CK_RUN(test_json_ok);
    CK_RUN(test_stream);
    CK_RUN(test_messages_and_fallback_id);
    CK_RUN(test_invalid);
    CK_RUN(test_undecodable);
    CK_RUN(test_msgpack_job);
    CK_RUN(test_too_large);
    CK_RUN(test_utf8);
    CK_RUN(test_config);
    CK_RUN(test_config_models);
    CK_RUN(test_empty_content_messages);
    CK_RUN(test_empty_content_msgpack);
    CK_RUN(test_msgpack_empty_strings);
    CK_RUN(test_nonfinite);
    CK_RUN(test_huge_tokens);
    CK_RUN(test_tools);
    CK_RUN(test_result_warnings);
    return ck_test_summary();
}
