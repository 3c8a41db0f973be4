/* fuzz_template.c - cache-template records read back from the cold store
 * (tpl.h: the "tpl:<name>" value).
 *
 * Input: byte 0 bit 0 asks the harness to repair the record's xxh64 line
 * (so mutated headers and texts get past the checksum); bit 1 makes
 * tpl_decode expect the name "fz" instead of any name; the rest is the value.
 * Checked: tpl_decode returns 0 or CK_EFORMAT; an accepted record is the
 * canonical encoding of what it says (tpl_encode of its name, created_ms and
 * text gives back exactly the value: one record has one spelling), its text
 * inside the value. Then the same value through the real path: put in an
 * in-memory store, tpl_cache_fetch, tpl_cache_find agree with tpl_decode. */
#include <xxhash.h>

#include "ck_err.h"
#include "cold.h"
#include "fuzz.h"
#include "tpl.h"

/* Rewrite the 16 hex digits after "\nxxh64 " with the XXH64 of what follows
 * the blank line (when the value has both). */
static void repair(char *v, size_t len) {
    const char *key = "\nxxh64 ";
    char *k = memmem(v, len, key, strlen(key));
    if (!k || (size_t)(k - v) + 7 + 16 + 2 > len || k[23] != '\n' || k[24] != '\n') return;
    char *text = k + 25;
    size_t tl = len - (size_t)(text - v);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64(text, tl, 0));
    memcpy(k + 7, hex, 16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t len = size - 1;
    char *v = malloc(len ? len : 1);
    FUZZ_CHECK(v != NULL);
    memcpy(v, data + 1, len);
    if (data[0] & 1) repair(v, len);
    const char *want = data[0] & 2 ? "fz" : NULL;

    tpl_record r;
    int rc = tpl_decode(v, len, want, &r);
    FUZZ_CHECK(rc == 0 || rc == CK_EFORMAT);
    if (rc == 0) {
        FUZZ_CHECK(tpl_name_ok(r.name));
        if (want) FUZZ_CHECK(!strcmp(r.name, want));
        FUZZ_CHECK(r.created_ms >= 0 && r.text_len <= TPL_TEXT_MAX);
        FUZZ_CHECK(r.text >= v && r.text_len <= len && (size_t)(r.text - v) == len - r.text_len);
        char *enc = NULL;
        size_t elen = 0;
        FUZZ_CHECK(tpl_encode(r.name, r.created_ms, r.text, r.text_len, &enc, &elen) == 0);
        FUZZ_CHECK(elen == len && !memcmp(enc, v, len));
        free(enc);
    }

    /* the cache, as the engine reads a template another instance saved */
    cold_store *cold = NULL;
    FUZZ_CHECK(cold_mem_new(&cold) == 0);
    tpl_cache *c = NULL;
    FUZZ_CHECK(tpl_cache_new(4, 1000, cold, &c) == 0);
    FUZZ_CHECK(cold->ops->put(cold, "tpl:fz", v, len, COLD_PUT_PERSIST, NULL, NULL) == 0);
    cold_poll(cold);
    int waiter = 0;
    FUZZ_CHECK(tpl_cache_fetch(c, "fz", 0, &waiter) == 0 && waiter == 1);
    for (int i = 0; i < 100 && tpl_cache_in_flight(c); i++) cold_poll(cold);
    FUZZ_CHECK(waiter == 0 && tpl_cache_in_flight(c) == 0);
    const char *text = NULL;
    size_t tl = 0;
    int found = tpl_cache_find(c, "fz", 0, &text, &tl);
    tpl_record r2;
    int ok = tpl_decode(v, len, "fz", &r2) == 0;
    FUZZ_CHECK(found == ok);
    if (found) FUZZ_CHECK(tl == r2.text_len && (tl == 0 || !memcmp(text, r2.text, tl)));
    const tpl_cache_stats *st = tpl_cache_get_stats(c);
    FUZZ_CHECK(st->integrity_failures == (uint64_t)!ok);
    tpl_cache_free(c);
    cold_free(cold);
    free(v);
    return 0;
}
