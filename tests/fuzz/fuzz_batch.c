/* fuzz_batch.c - the Batch API JSONL reader of `confkv batch`
 * (service/cli/cli_batch.c: batch_read and parse_line, then write_line).
 *
 * This file includes cli_batch.c to reach its static reader. Input: the
 * whole input file. Checked: one request per non-empty line (a line's
 * trailing \r dropped), counted here independently; each has a custom_id;
 * each is either refused with a message or becomes a job that is a JSON
 * object whose "id" is that custom_id and that holds exactly one "id"; an
 * output line is written for each request. */
#include "cli_batch.c"

#include "fuzz.h"

/* Non-empty lines, as the Batch API counts them. */
static int count_lines(const uint8_t *d, size_t n) {
    int lines = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && d[i] != '\n') continue;
        size_t end = i;
        while (end > start && d[end - 1] == '\r') end--;
        lines += end > start;
        start = i + 1;
    }
    return lines;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f) return 0;
    batch b = {0};
    int rc = batch_read(f, &b);
    fclose(f);
    FUZZ_CHECK(rc == 0 || rc == CK_ENOMEM);
    if (rc == 0) FUZZ_CHECK(b.n == count_lines(data, size));
    FILE *null = fopen("/dev/null", "w");
    for (int i = 0; i < b.n; i++) {
        const breq *q = &b.r[i];
        FUZZ_CHECK(q->custom_id != NULL);
        FUZZ_CHECK((q->bad != NULL) != (q->job_json != NULL));
        if (q->job_json) {
            cJSON *j = cJSON_Parse(q->job_json);
            FUZZ_CHECK(cJSON_IsObject(j));
            int ids = 0;
            for (cJSON *c = j->child; c; c = c->next) ids += c->string && !strcmp(c->string, "id");
            FUZZ_CHECK(ids == 1);
            cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
            FUZZ_CHECK(cJSON_IsString(id) && !strcmp(id->valuestring, q->custom_id));
            cJSON_Delete(j);
        }
        if (null) write_line(null, q, i, "fuzz-model");
    }
    if (null) fclose(null);
    batch_clear(&b);
    return 0;
}
