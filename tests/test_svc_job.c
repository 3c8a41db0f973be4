/* test_svc_job.c - job decoding and validation, msgpack safety, results,
 * configuration (svc_job.h, svc_result.h, svc_config.h). */
#include <stdint.h>

#include "ck_test.h"
#include "svc_config.h"
#include "svc_job.h"
#include "svc_result.h"

static svc_job_limits lim(void) {
    svc_job_limits l = {.max_message_bytes = 4096, .max_tokens_cap = 100, .vocab_size = 512,
                        .model_names = {"stories260K", NULL}};
    return l;
}

static int decode(const char *s, size_t n, const char *ct, svc_job *j, svc_job_error *e) {
    svc_job_limits l = lim();
    return svc_job_decode(s, n, ct, "fallback", &l, j, e);
}

static void test_json_ok(void) {
    const char *s = "{\"id\":\"a\",\"prompt\":\"hi\",\"max_tokens\":5,\"temperature\":0,\"stop\":[\"x\",\"y\"],"
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
    CK_CHECK_MSG(rc == SVC_JOB_INVALID && !strcmp(svc_job_error_code(e.code), code), "%s -> rc %d %s (%s)", s, rc,
                 svc_job_error_code(e.code), e.message);
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
    expect_invalid("{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}", "out_of_range");
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
    expect_dead("\x81\xa6prompt\xa3" "ab", 11, NULL);
    /* trailing bytes */
    expect_dead("\x80\x00", 2, NULL);
    /* a non-string key */
    expect_dead("\x81\x01\x02", 3, NULL);
    /* NUL in a string */
    expect_dead("\x81\xa6prompt\xa3" "a\0b", 12, NULL);
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
    char *s = svc_utf8_clean("a\xff" "b\xc3\xa9\0c\xed\xa0\x80", 10);
    CK_CHECK(s && !strcmp(s, "a\xef\xbf\xbd" "b\xc3\xa9\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
    free(s);
    char *b = svc_base64("foobar", 6);
    CK_CHECK(!strcmp(b, "Zm9vYmFy"));
    free(b);
    b = svc_base64("fo", 2);
    CK_CHECK(!strcmp(b, "Zm8="));
    free(b);
}

static void test_config(void) {
    char *argv[] = {"confkvd", "--http-port", "0", "--kafka.sasl.password", "pw", "--kafka-embedded",
                    "--max-tokens-cap=7", NULL};
    svc_config c;
    char err[256];
    CK_CHECK_MSG(svc_config_load(&c, 7, argv, err, sizeof err) == 0, "%s", err);
    CK_CHECK(c.http_port == 0 && c.kafka_embedded == 1 && c.max_tokens_cap == 7);
    CK_CHECK(!strcmp(svc_config_get(&c, "kafka.sasl.password"), "pw"));
    CK_CHECK(svc_config_is_secret("kafka.sasl.password") && svc_config_is_secret("kafka.ssl.key.pem"));
    CK_CHECK(!svc_config_is_secret("kafka.bootstrap.servers"));
    svc_config_free(&c);
    char *bad[] = {"confkvd", "--max-inflight", "0", NULL};
    CK_CHECK(svc_config_load(&c, 3, bad, err, sizeof err) != 0 && strstr(err, "max_inflight"));
    svc_config_free(&c);
}

int main(void) {
    CK_RUN(test_json_ok);
    CK_RUN(test_messages_and_fallback_id);
    CK_RUN(test_invalid);
    CK_RUN(test_undecodable);
    CK_RUN(test_msgpack_job);
    CK_RUN(test_too_large);
    CK_RUN(test_utf8);
    CK_RUN(test_config);
    return ck_test_summary();
}
