/* test_svc_stream.c - a streamed job's deltas (svc_stream.h), without Kafka.
 *
 * Oracle: the result's own cleaning (svc_utf8_clean) of the whole text.
 *  - UTF-8: texts of valid characters (1 to 4 bytes), bad bytes, NULs,
 *    overlong forms, surrogates and truncated sequences, fed in random
 *    pieces and cut whenever a delta is due: the deltas, each cleaned, then
 *    the rest, cleaned, add up to the whole text cleaned; on valid UTF-8
 *    every delta is valid UTF-8 by itself (no character split);
 *  - the cut by hand: a euro sign byte by byte, a lead byte followed by
 *    ASCII (one bad byte, not held), a 4-byte character cut short;
 *  - coalescing: the first delta at once, the next after interval_ms;
 *  - the cascade: the last `hold` tokens' text held back; a restart
 *    replays what was sent without sending it twice, and a run that does
 *    not begin with it is refused (svc_stream_rest). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
#include "svc_job.h"
#include "svc_stream.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

/* Append one random unit: a valid character, or (when bad) something the
 * scan must treat byte by byte. */
static size_t unit(unsigned char *o, int bad) {
    static const unsigned char bads[][4] = {
        {0xe2, 0x41}, {0xc0, 0xaf}, {0xed, 0xa0, 0x80}, {0xf4, 0x90, 0x80, 0x80}, {0x80},
        {0xff},       {0x00},       {0xf0, 0x9f},
    };
    static const size_t bad_len[] = {2, 2, 3, 4, 1, 1, 1, 2};
    if (bad) {
        int k = (int)(next() % 8);
        memcpy(o, bads[k], bad_len[k]);
        return bad_len[k];
    }
    switch (next() % 4) {
    case 0: o[0] = (unsigned char)(0x20 + next() % 95); return 1;
    case 1: o[0] = 0xc3, o[1] = 0xa9; return 2;                            /* é */
    case 2: o[0] = 0xe2, o[1] = 0x82, o[2] = 0xac; return 3;               /* € */
    default: o[0] = 0xf0, o[1] = 0x9f, o[2] = 0x98, o[3] = 0x80; return 4; /* 😀 */
    }
}

/* Feed text in random pieces (one token each), take due deltas, and
 * compare the cleaned concatenation with the cleaned whole. */
static int run_case(const unsigned char *text, size_t n, int valid) {
    svc_stream *s = svc_stream_new(0);
    if (!s) return 0;
    char *got = malloc(3 * n + 64);
    size_t glen = 0, i = 0;
    int ok = got != NULL;
    while (ok && i < n) {
        size_t k = 1 + next() % 5;
        if (k > n - i) k = n - i;
        ok = svc_stream_feed(s, (const char *)text + i, k) == 0;
        svc_stream_token(s, 0);
        i += k;
        const char *d;
        size_t dn = svc_stream_take(s, (int64_t)i, &d);
        if (!dn) continue;
        char *c = svc_utf8_clean(d, dn);
        ok = ok && c;
        if (!ok) break;
        if (valid && (strlen(c) != dn || memcmp(c, d, dn))) ok = 0; /* a split character */
        memcpy(got + glen, c, strlen(c));
        glen += strlen(c);
        free(c);
    }
    size_t off = 0;
    ok = ok && svc_stream_rest(s, (const char *)text, n, &off) == 0;
    char *rest = ok ? svc_utf8_clean((const char *)text + off, n - off) : NULL;
    char *whole = svc_utf8_clean((const char *)text, n);
    if (ok && rest && whole) {
        memcpy(got + glen, rest, strlen(rest));
        glen += strlen(rest);
        ok = glen == strlen(whole) && !memcmp(got, whole, glen);
    } else {
        ok = 0;
    }
    free(rest);
    free(whole);
    free(got);
    svc_stream_free(s);
    return ok;
}

static void test_random_texts(void) {
    unsigned char text[600];
    for (int c = 0; c < 2000; c++) {
        int valid = c % 2 == 0;
        size_t n = 0, want = 1 + next() % 120;
        while (n < want) n += unit(text + n, !valid && next() % 4 == 0);
        CK_CHECK_MSG(run_case(text, n, valid), "case %d (%s, %zu bytes)", c,
                     valid ? "valid" : "with bad bytes", n);
    }
}

static void test_cuts(void) {
    CK_CHECK(svc_stream_utf8_cut("\xe2\x82", 2) == 0);
    CK_CHECK(svc_stream_utf8_cut("ab\xe2\x82", 4) == 2);
    CK_CHECK(svc_stream_utf8_cut("ab\xe2\x82\xac", 5) == 5);
    CK_CHECK(svc_stream_utf8_cut("\xe2\x41", 2) == 2);      /* bad lead: one byte, not held */
    CK_CHECK(svc_stream_utf8_cut("x\xf0\x9f\x98", 4) == 1); /* a 4-byte character cut short */
    CK_CHECK(svc_stream_utf8_cut("\x80\x80", 2) == 2);      /* stray continuation bytes */
    CK_CHECK(svc_stream_utf8_cut("\xc0", 1) == 0);          /* may still be followed: held */
    CK_CHECK(svc_stream_utf8_cut("\xc0\xaf", 2) == 2);      /* overlong: two bad bytes */
    svc_stream *s = svc_stream_new(0);
    CK_CHECK(s);
    const char *d;
    const char euro[] = "\xe2\x82\xac";
    for (int i = 0; i < 2; i++) {
        CK_CHECK(svc_stream_feed(s, euro + i, 1) == 0);
        svc_stream_token(s, 0);
        CK_CHECK(!svc_stream_due(s, 0) && svc_stream_take(s, 0, &d) == 0);
    }
    CK_CHECK(svc_stream_feed(s, euro + 2, 1) == 0);
    svc_stream_token(s, 0);
    CK_CHECK(svc_stream_due(s, 0));
    CK_CHECK(svc_stream_take(s, 0, &d) == 3 && !memcmp(d, euro, 3));
    svc_stream_free(s);
}

static void test_interval(void) {
    svc_stream *s = svc_stream_new(50);
    const char *d;
    CK_CHECK(s);
    CK_CHECK(!svc_stream_due(s, 1000)); /* nothing yet */
    svc_stream_feed(s, "a", 1);
    svc_stream_token(s, 0);
    CK_CHECK(svc_stream_due(s, 1000)); /* the first at once */
    CK_CHECK(svc_stream_take(s, 1000, &d) == 1);
    svc_stream_feed(s, "bc", 2);
    svc_stream_token(s, 0);
    CK_CHECK(!svc_stream_due(s, 1049));
    CK_CHECK(svc_stream_due(s, 1050));
    CK_CHECK(svc_stream_take(s, 1050, &d) == 2 && !memcmp(d, "bc", 2));
    CK_CHECK(s->deltas == 2);
    svc_stream_free(s);
}

static void test_cascade(void) {
    svc_stream *s = svc_stream_new(0);
    const char *d;
    CK_CHECK(s);
    /* rewind=2: after tokens a, b, c only "a" can no longer be dropped */
    const char *toks[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 3; i++) {
        svc_stream_feed(s, toks[i], 1);
        svc_stream_token(s, 2);
    }
    CK_CHECK(svc_stream_take(s, 0, &d) == 1 && d[0] == 'a');
    svc_stream_feed(s, toks[3], 1);
    svc_stream_token(s, 2);
    CK_CHECK(svc_stream_take(s, 0, &d) == 1 && d[0] == 'b');
    /* moved after 2 accepted tokens ("ab"): the large model's text replays them */
    svc_stream_restart(s);
    svc_stream_feed(s, "a", 1);
    svc_stream_token(s, 0);
    CK_CHECK(!svc_stream_due(s, 0));
    svc_stream_feed(s, "bX", 2); /* "b" replayed, "X" new */
    svc_stream_token(s, 0);
    CK_CHECK(svc_stream_take(s, 0, &d) == 1 && d[0] == 'X');
    size_t off;
    CK_CHECK(svc_stream_rest(s, "abXyz", 5, &off) == 0 && off == 3);
    CK_CHECK(svc_stream_rest(s, "abY", 3, &off) == CK_ESTATE);
    CK_CHECK(svc_stream_rest(s, "ab", 2, &off) == CK_ESTATE);
    CK_CHECK(svc_stream_rest(NULL, "ab", 2, &off) == 0 && off == 0);
    /* a run that does not begin with what was sent: nothing more is cut */
    svc_stream_restart(s);
    svc_stream_feed(s, "zzzz", 4);
    svc_stream_token(s, 0);
    CK_CHECK(s->diverged && !svc_stream_due(s, 0));
    CK_CHECK(svc_stream_rest(s, "zzzz", 4, &off) == CK_ESTATE);
    svc_stream_free(s);
}

int main(void) {
    CK_RUN(test_cuts);
    CK_RUN(test_random_texts);
    CK_RUN(test_interval);
    CK_RUN(test_cascade);
    return ck_test_summary();
}
