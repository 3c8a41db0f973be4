/* fuzz_session.c - session records read back from the cold store
 * (sess.h: the "sess:<id>" value), through the real path: the value is
 * put in an in-memory store (cold_mem.c), sess_fetch asks for it, and the
 * store's answer goes through sess.c's check.
 *
 * Input: byte 0 bit 0 asks the harness to repair the record's XXH64 first
 * (so mutated lengths and ids get past the checksum); the rest is the value.
 * Checked: the fetch completes (the waiter returns to 0, nothing stays in
 * flight); the value is either a miss counted as an integrity failure or a
 * hit whose tokens are exactly the value's ids, each below the vocabulary,
 * 1..max_tokens of them. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "ck_err.h"
#include "cold.h"
#include "fuzz.h"
#include "sess.h"

#define FP "0123456789abcdef"
#define VOCAB 512
#define MAX_TOKENS 64
#define HEADER 36

static uint32_t rd32(const unsigned char *p) { return fuzz_rd32(p); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t len = size - 1;
    unsigned char *v = malloc(len ? len : 1);
    FUZZ_CHECK(v != NULL);
    memcpy(v, data + 1, len);
    if ((data[0] & 1) && len >= HEADER) {
        uint64_t k = rd32(v + 24);
        if (len == HEADER + 4 * k) {
            XXH64_state_t st;
            XXH64_reset(&st, 0);
            XXH64_update(&st, v, 28);
            XXH64_update(&st, v + HEADER, 4 * (size_t)k);
            uint64_t h = XXH64_digest(&st);
            for (int i = 0; i < 8; i++) v[28 + i] = (unsigned char)(h >> (8 * i));
        }
    }
    cold_store *cold = NULL;
    FUZZ_CHECK(cold_mem_new(&cold) == 0);
    sess_config c = {
        .max_sessions = 4, .max_tokens = MAX_TOKENS, .vocab = VOCAB, .fingerprint = FP, .cold = cold};
    sess_store *s = NULL;
    FUZZ_CHECK(sess_new(&c, &s) == 0);
    /* the value as another instance would have stored it (cold_mem copies) */
    FUZZ_CHECK(cold->ops->put(cold, "sess:fz", v, len, 0, NULL, NULL) == 0);
    cold_poll(cold);
    int waiter = 0;
    FUZZ_CHECK(sess_fetch(s, "fz", &waiter) == 0 && waiter == 1);
    for (int i = 0; i < 100 && sess_in_flight(s); i++) cold_poll(cold);
    FUZZ_CHECK(waiter == 0 && sess_in_flight(s) == 0);
    const sess_stats *st = sess_get_stats(s);
    const int32_t *tok = NULL;
    int n = 0;
    int found = sess_find(s, "fz", &tok, &n);
    if (found) {
        FUZZ_CHECK(st->cold_hits == 1 && st->integrity_failures == 0);
        FUZZ_CHECK(n >= 1 && n <= MAX_TOKENS && len == HEADER + 4 * (size_t)n);
        FUZZ_CHECK(!memcmp(v, "CKSS", 4) && !memcmp(v + 8, FP, 16));
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(tok[i] >= 0 && tok[i] < VOCAB);
            FUZZ_CHECK((uint32_t)tok[i] == rd32(v + HEADER + 4 * i));
        }
    } else {
        FUZZ_CHECK(st->cold_hits == 0 && st->integrity_failures == 1);
    }
    sess_free(s);
    cold_free(cold);
    free(v);
    return 0;
}
