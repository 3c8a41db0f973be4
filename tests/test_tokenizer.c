/* test_tokenizer.c - the BPE tokenizer against tok512.bin (stories260K's
 * vocabulary), a naive reference BPE written independently below, round
 * trips, malformed files, and the work bound of tok_encode. Vocabularies
 * built from arrays and GGUF files: test_tokenizer_vocab.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ck_err.h"
#include "ck_test.h"
#include "tokenizer.h"

static tokenizer *tk; /* tok512.bin, loaded once */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* ---------------------------------------------------------------------------
 * naive reference: O(n^2) rescans, linear vocabulary search, tokens as copied
 * strings. Uses only the public piece/type/score accessors. */

typedef struct {
    char s[64];
    size_t n;
    int id;
    int mergeable;
} rtok;

static int ref_find(const tokenizer *t, const char *s, size_t n) {
    for (int i = 0; i < tok_vocab_size(t); i++) {
        int ty = tok_type(t, i);
        if (ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_USER) continue;
        if (i == tok_bos(t) || i == tok_eos(t) || i == tok_unk(t)) continue;
        size_t pl;
        const char *p = tok_piece(t, i, &pl);
        if (pl == n && n > 0 && memcmp(p, s, n) == 0) return i;
    }
    return -1;
}

static int ref_byte(const tokenizer *t, unsigned b) {
    char want[8];
    snprintf(want, sizeof want, "<0x%02X>", b);
    for (int i = 0; i < tok_vocab_size(t); i++) {
        size_t pl;
        const char *p = tok_piece(t, i, &pl);
        if (tok_type(t, i) == TOK_TYPE_BYTE && pl == 6 && memcmp(p, want, 6) == 0) return i;
    }
    return -1;
}

/* how many bytes form the codepoint at s (n bytes left) */
static size_t ref_cp(const unsigned char *s, size_t n) {
    size_t need;
    if (s[0] <= 0x7F)
        need = 1;
    else if (s[0] >= 0xC0 && s[0] <= 0xDF)
        need = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF)
        need = 3;
    else if (s[0] >= 0xF0 && s[0] <= 0xF7)
        need = 4;
    else
        need = 1;
    if (need > n) return 1;
    for (size_t k = 1; k < need; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 1;
    return need;
}

/* returns count, ids in out (capacity cap) */
static int ref_encode(const tokenizer *t, const char *text, size_t len, int bos, int *out, int cap) {
    static rtok tk_[4096];
    int n = 0, m = 0;
    if (bos) out[m++] = tok_bos(t);
    if (len == 0) return m;
    /* dummy prefix */
    tk_[n].s[0] = ' ';
    tk_[n].n = 1;
    tk_[n].id = ref_find(t, " ", 1);
    tk_[n].mergeable = 1;
    n++;
    size_t i = 0;
    while (i < len) {
        size_t c = ref_cp((const unsigned char *)text + i, len - i);
        int id = ref_find(t, text + i, c);
        if (id >= 0) {
            memcpy(tk_[n].s, text + i, c);
            tk_[n].n = c;
            tk_[n].id = id;
            tk_[n].mergeable = 1;
            n++;
        } else {
            for (size_t k = 0; k < c; k++) {
                tk_[n].s[0] = text[i + k];
                tk_[n].n = 1;
                tk_[n].id = ref_byte(t, (unsigned char)text[i + k]);
                tk_[n].mergeable = 0;
                n++;
            }
        }
        i += c;
    }
    for (;;) {
        int best = -1, best_id = -1;
        float best_score = 0;
        for (int k = 0; k + 1 < n; k++) {
            if (!tk_[k].mergeable || !tk_[k + 1].mergeable) continue;
            char buf[128];
            memcpy(buf, tk_[k].s, tk_[k].n);
            memcpy(buf + tk_[k].n, tk_[k + 1].s, tk_[k + 1].n);
            int id = ref_find(t, buf, tk_[k].n + tk_[k + 1].n);
            if (id >= 0 && (best < 0 || tok_score(t, id) > best_score)) {
                best = k;
                best_id = id;
                best_score = tok_score(t, id);
            }
        }
        if (best < 0) break;
        memcpy(tk_[best].s + tk_[best].n, tk_[best + 1].s, tk_[best + 1].n);
        tk_[best].n += tk_[best + 1].n;
        tk_[best].id = best_id;
        memmove(&tk_[best + 1], &tk_[best + 2], (size_t)(n - best - 2) * sizeof tk_[0]);
        n--;
    }
    for (int k = 0; k < n && m < cap; k++) out[m++] = tk_[k].id;
    return m;
}

/* ---------------------------------------------------------------------------
 * helpers */

/* decode ids into buf; returns length */
static size_t decode_all(const tokenizer *t, const int32_t *ids, int n, char *buf, size_t cap) {
    size_t o = 0;
    int prev = -1;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *p = tok_decode(t, prev, ids[i], &l);
        if (o + l > cap) return (size_t)-1;
        memcpy(buf + o, p, l);
        o += l;
        prev = ids[i];
    }
    return o;
}

/* encode with and without BOS, check round trip, control ids, local optimum.
 * Returns 0 when all holds, else a line number. */
static int check_string(const tokenizer *t, const char *s, size_t len) {
    int cap = (int)len + 4;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    char *dec = malloc(len + 8);
    int n, bad = 0;
    if (tok_encode(t, s, len, 1, ids, cap, &n) != 0) {
        bad = __LINE__;
        goto out;
    }
    if (n < 1 || ids[0] != tok_bos(t)) {
        bad = __LINE__;
        goto out;
    }
    if (len == 0 && n != 1) {
        bad = __LINE__;
        goto out;
    }
    for (int i = 1; i < n; i++) {
        int ty = tok_type(t, ids[i]);
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ids[i] == tok_bos(t) ||
            ids[i] == tok_eos(t)) {
            bad = __LINE__;
            goto out;
        }
    }
    /* local optimum: no adjacent mergeable pair concatenates to a piece */
    for (int i = 1; i + 1 < n; i++) {
        if (tok_type(t, ids[i]) == TOK_TYPE_BYTE || tok_type(t, ids[i + 1]) == TOK_TYPE_BYTE) continue;
        size_t la, lb;
        const char *a = tok_piece(t, ids[i], &la), *b = tok_piece(t, ids[i + 1], &lb);
        char buf[64];
        if (la + lb > sizeof buf) continue;
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        if (ref_find(t, buf, la + lb) >= 0) {
            bad = __LINE__;
            goto out;
        }
    }
    size_t dl = decode_all(t, ids, n, dec, len + 8);
    if (dl != len || memcmp(dec, s, len) != 0) {
        bad = __LINE__;
        goto out;
    }
    /* without BOS the dummy prefix's space stays */
    int n2;
    if (tok_encode(t, s, len, 0, ids, cap, &n2) != 0) {
        bad = __LINE__;
        goto out;
    }
    if (n2 != (len ? n - 1 : 0)) {
        bad = __LINE__;
        goto out;
    }
    dl = decode_all(t, ids, n2, dec, len + 8);
    if (len > 0 && (dl != len + 1 || dec[0] != ' ' || memcmp(dec + 1, s, len) != 0)) {
        bad = __LINE__;
        goto out;
    }
out:
    free(ids);
    free(dec);
    return bad;
}

static int same_as_ref(const tokenizer *t, const char *s, size_t len) {
    int32_t ids[256];
    int ref[256], n;
    if (tok_encode(t, s, len, 1, ids, 256, &n) != 0) return 0;
    int m = ref_encode(t, s, len, 1, ref, 256);
    if (m != n) return 0;
    for (int i = 0; i < n; i++)
        if (ids[i] != ref[i]) return 0;
    return 1;
}

static const char *samples[] = {
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "Hello, world! \xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "tabs\tand\nnewlines\n\n",
    "Lily's mom said, \"Lily, let's go to the park.\"",
    "\xe2\x84\xa2\xe2\x80\x8a", /* pieces 507 and 511 */
    "caf\xc3\xa9 na\xc3\xaf"
    "ve \xc3\xbc"
    "ber \xc3\x9f",                                                             /* Latin-1 range */
    "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7", /* ZWJ family */
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c",
    "<0x41> <s> </s> <unk>", /* control/byte look-alikes */
    "a",
    " ",
    "\x80\x80 stray \xc3 truncated \xe2\x82 and \xff\xfe",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
};

/* ---------------------------------------------------------------------------
 * tests */

static void test_load(void) {
    CK_CHECK(tk != NULL);
    CK_CHECK(tok_vocab_size(tk) == 512);
    CK_CHECK(tok_bos(tk) == 1 && tok_eos(tk) == 2 && tok_unk(tk) == 0);
    CK_CHECK(tok_type(tk, 0) == TOK_TYPE_UNKNOWN);
    CK_CHECK(tok_type(tk, 1) == TOK_TYPE_CONTROL && tok_type(tk, 2) == TOK_TYPE_CONTROL);
    for (int i = 3; i < 259; i++) CK_CHECK(tok_type(tk, i) == TOK_TYPE_BYTE);
    for (int i = 259; i < 512; i++) CK_CHECK(tok_type(tk, i) == TOK_TYPE_NORMAL);
    size_t l;
    const char *p = tok_piece(tk, 259, &l);
    CK_CHECK(l == 2 && memcmp(p, " t", 2) == 0);
    CK_CHECK(tok_score(tk, 260) == -1.0f);
    CK_CHECK(tok_piece(tk, 512, &l) == NULL && l == 0);
    CK_CHECK(tok_piece(tk, -1, NULL) == NULL);
    CK_CHECK(tok_type(tk, 9999) == 0);
}

static void test_oracle_prompt(void) {
    /* llama2.c's encode() of the oracle prompt, with BOS */
    static const int32_t want[] = {1, 403, 407, 261, 378};
    int32_t ids[16];
    int n;
    CK_CHECK(tok_encode(tk, "Once upon a time", 16, 1, ids, 16, &n) == 0);
    CK_CHECK(n == 5);
    for (int i = 0; i < 5; i++) CK_CHECK_MSG(ids[i] == want[i], "id %d: %d", i, ids[i]);
    CK_CHECK(same_as_ref(tk, "Once upon a time", 16));
    /* and llama2.c's output for a mixed string (computed with its algorithm) */
    static const int32_t want2[] = {1,   346, 306, 414, 432, 263, 304, 341, 443, 410, 485, 410,
                                    233, 154, 168, 233, 159, 175, 410, 243, 162, 155, 131};
    const char *s = samples[2];
    int32_t ids2[64];
    CK_CHECK(tok_encode(tk, s, strlen(s), 1, ids2, 64, &n) == 0);
    CK_CHECK(n == (int)(sizeof want2 / sizeof want2[0]));
    for (int i = 0; i < n; i++) CK_CHECK_MSG(ids2[i] == want2[i], "id %d: %d", i, ids2[i]);
}

static void test_vs_reference(void) {
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++)
        CK_CHECK_MSG(same_as_ref(tk, samples[i], strlen(samples[i])), "sample %zu", i);
    /* random strings over a mixed alphabet */
    static const char *alpha[] = {"a",
                                  "e",
                                  "t",
                                  "h",
                                  " ",
                                  " ",
                                  "o",
                                  "n",
                                  "s",
                                  "d",
                                  ",",
                                  ".",
                                  "\n",
                                  "T",
                                  "\xc3\xa9",
                                  "\xe2\x84\xa2",
                                  "\xf0\x9f\x98\x80",
                                  "\x80",
                                  "\xff",
                                  "\x01",
                                  "'",
                                  "\""};
    char buf[128];
    for (int it = 0; it < 400; it++) {
        size_t n = 0, want = rnd() % 40;
        while (n < want) {
            const char *a = alpha[rnd() % (sizeof alpha / sizeof alpha[0])];
            size_t al = strlen(a);
            memcpy(buf + n, a, al);
            n += al;
        }
        CK_CHECK_MSG(same_as_ref(tk, buf, n), "random string %d", it);
        CK_CHECK_MSG(check_string(tk, buf, n) == 0, "random string %d", it);
    }
}

static void test_roundtrip(void) {
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        int line = check_string(tk, samples[i], strlen(samples[i]));
        CK_CHECK_MSG(line == 0, "sample %zu fails at line %d", i, line);
    }
    CK_CHECK(check_string(tk, "", 0) == 0);
    /* every byte alone, and all of 0x00..0xFF in one string */
    char all[256];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        CK_CHECK_MSG(check_string(tk, &c, 1) == 0, "byte %d", b);
        all[b] = (char)b;
    }
    CK_CHECK(check_string(tk, all, 256) == 0);
    CK_CHECK(check_string(tk, all + 1, 255) == 0);
    /* a NUL inside the text is encoded, not a terminator */
    int32_t ids[8];
    int n;
    CK_CHECK(tok_encode(tk, "a\0b", 3, 0, ids, 8, &n) == 0);
    CK_CHECK(n == 3 && ids[1] == 3); /* " a", <0x00>, "b" */
}

static void test_random_bytes(void) {
    char buf[64];
    for (int it = 0; it < 2000; it++) {
        size_t n = rnd() % 48;
        for (size_t k = 0; k < n; k++) buf[k] = (char)(rnd() & 0xFF);
        int line = check_string(tk, buf, n);
        CK_CHECK_MSG(line == 0, "iteration %d fails at line %d", it, line);
        if (it < 300) CK_CHECK_MSG(same_as_ref(tk, buf, n), "iteration %d", it);
    }
}

static void test_long(void) {
    /* 200 KB of story-like text: fast (heap merges) and still a round trip */
    static const char *words[] = {"Once",
                                  "upon",
                                  "a",
                                  "time",
                                  "there",
                                  "was",
                                  "little",
                                  "girl",
                                  "named",
                                  "Lily.",
                                  "She",
                                  "loved",
                                  "to",
                                  "play",
                                  "\xc3\xa9t\xc3\xa9",
                                  "\xf0\x9f\x98\x80!",
                                  "\n"};
    size_t cap = 200000, n = 0;
    char *s = malloc(cap + 32);
    CK_CHECK(s != NULL);
    while (n < cap) {
        const char *w = words[rnd() % (sizeof words / sizeof words[0])];
        size_t wl = strlen(w);
        memcpy(s + n, w, wl);
        n += wl;
        s[n++] = ' ';
    }
    int line = check_string(tk, s, n);
    free(s);
    CK_CHECK_MSG(line == 0, "fails at line %d", line);
}

static void test_too_long(void) {
    int32_t ids[4];
    int n = -1;
    CK_CHECK(tok_encode(tk, "Once upon a time", 16, 1, ids, 4, &n) == CK_ETOOLONG);
    CK_CHECK(n == 5); /* the count needed */
    CK_CHECK(tok_encode(tk, "Once upon a time", 16, 1, NULL, 0, &n) == CK_ETOOLONG && n == 5);
    CK_CHECK(tok_encode(tk, "Once upon a time", 16, 1, ids, 5 - 1, &n) == CK_ETOOLONG);
    CK_CHECK(tok_encode(tk, "", 0, 1, ids, 0, &n) == CK_ETOOLONG && n == 1);
    CK_CHECK(tok_encode(tk, NULL, 0, 0, NULL, 0, &n) == 0 && n == 0);
    CK_CHECK(tok_encode(tk, NULL, 3, 0, ids, 4, &n) == CK_EINVAL);
    CK_CHECK(tok_encode(NULL, "a", 1, 0, ids, 4, &n) == CK_EINVAL);
}

static void test_decode(void) {
    size_t l;
    const char *p = tok_decode(tk, 5, 3 + 'A', &l);
    CK_CHECK(l == 1 && p[0] == 'A');
    p = tok_decode(tk, 1, 3 + ' ', &l); /* a byte piece keeps its space after BOS */
    CK_CHECK(l == 1 && p[0] == ' ');
    p = tok_decode(tk, 1, 3, &l);
    CK_CHECK(l == 1 && p[0] == '\0');
    p = tok_decode(tk, 7, 1, &l);
    CK_CHECK(l == 0 && p && p[0] == '\0');
    p = tok_decode(tk, 7, 2, &l);
    CK_CHECK(l == 0);
    p = tok_decode(tk, 1, 403, &l); /* " Once" after BOS */
    CK_CHECK(l == 4 && memcmp(p, "Once", 4) == 0);
    p = tok_decode(tk, 403, 407, &l);
    CK_CHECK(l == 5 && memcmp(p, " upon", 5) == 0);
    p = tok_decode(tk, 1, 600, &l);
    CK_CHECK(l == 0 && p != NULL);
    p = tok_decode(tk, 1, -3, &l);
    CK_CHECK(l == 0 && p != NULL);
}

static void test_from_arrays(void) {
    int n = tok_vocab_size(tk);
    char **pieces = calloc((size_t)n, sizeof *pieces);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = calloc((size_t)n, sizeof *types);
    CK_CHECK(pieces && lens && scores && types);
    int has_u2581 = 0;
    for (int i = 0; i < n; i++) {
        char buf[64];
        size_t l;
        CK_CHECK(tok_piece_gguf(tk, i, buf, sizeof buf, &l) == 0);
        CK_CHECK(strlen(buf) == l);
        if (strstr(buf, "\xe2\x96\x81")) has_u2581 = 1;
        CK_CHECK(strchr(buf, ' ') == NULL);
        pieces[i] = malloc(l + 1);
        memcpy(pieces[i], buf, l + 1);
        lens[i] = l;
        scores[i] = tok_score(tk, i);
        types[i] = tok_type(tk, i);
    }
    CK_CHECK(has_u2581);
    CK_CHECK(strcmp(pieces[0], "<unk>") == 0 && strcmp(pieces[1], "<s>") == 0 &&
             strcmp(pieces[2], "</s>") == 0 && strcmp(pieces[259], "\xe2\x96\x81t") == 0);
    size_t l;
    char small[3];
    CK_CHECK(tok_piece_gguf(tk, 259, small, sizeof small, &l) == CK_ETOOLONG && l == 4);
    CK_CHECK(tok_piece_gguf(tk, 512, small, sizeof small, &l) == CK_EINVAL);

    char err[256] = "";
    tokenizer *a = NULL, *b = NULL;
    /* types inferred, lengths given */
    CK_CHECK_MSG(tok_from_arrays(n, (const char *const *)pieces, lens, scores, NULL, 1, 2, 0, &a, err,
                                 sizeof err) == 0,
                 "%s", err);
    /* types given, lengths from strlen */
    CK_CHECK_MSG(tok_from_arrays(n, (const char *const *)pieces, NULL, scores, types, 1, 2, 0, &b, err,
                                 sizeof err) == 0,
                 "%s", err);
    for (int i = 0; i < n; i++) {
        CK_CHECK(tok_type(a, i) == tok_type(tk, i));
        CK_CHECK(tok_type(b, i) == tok_type(tk, i));
        if (i < 3) continue;
        size_t l1, l2;
        const char *p1 = tok_piece(tk, i, &l1), *p2 = tok_piece(a, i, &l2);
        CK_CHECK_MSG(l1 == l2 && memcmp(p1, p2, l1) == 0, "piece %d", i);
    }
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        int32_t x[256], y[256], z[256];
        int nx, ny, nz;
        const char *s = samples[i];
        CK_CHECK(tok_encode(tk, s, strlen(s), 1, x, 256, &nx) == 0);
        CK_CHECK(tok_encode(a, s, strlen(s), 1, y, 256, &ny) == 0);
        CK_CHECK(tok_encode(b, s, strlen(s), 1, z, 256, &nz) == 0);
        CK_CHECK_MSG(nx == ny && nx == nz, "sample %zu", i);
        for (int k = 0; k < nx; k++) CK_CHECK_MSG(x[k] == y[k] && x[k] == z[k], "sample %zu", i);
    }
    /* the GGUF form of bos/eos is "<s>" etc. already: written back unchanged */
    char buf[16];
    CK_CHECK(tok_piece_gguf(a, 1, buf, sizeof buf, &l) == 0 && strcmp(buf, "<s>") == 0);
    tok_free(a);
    tok_free(b);

    /* no scores: every merge ties, still a valid, round-tripping encoding */
    CK_CHECK(
        tok_from_arrays(n, (const char *const *)pieces, lens, NULL, NULL, 1, 2, 0, &a, err, sizeof err) == 0);
    CK_CHECK(check_string(a, samples[1], strlen(samples[1])) == 0);
    CK_CHECK(same_as_ref(a, samples[1], strlen(samples[1])));
    tok_free(a);

    /* no byte pieces, no unk: unknown bytes cannot be encoded */
    CK_CHECK(tok_from_arrays(2, (const char *const *)(const char *[]){"a", "\xe2\x96\x81"}, NULL, NULL, NULL,
                             -1, -1, -1, &a, err, sizeof err) == 0);
    int32_t ids[8];
    int m;
    CK_CHECK(tok_encode(a, "a a", 3, 1, ids, 8, &m) == 0 && m == 4); /* no BOS in vocab */
    CK_CHECK(ids[0] == 1 && ids[1] == 0 && ids[2] == 1 && ids[3] == 0);
    CK_CHECK(tok_encode(a, "b", 1, 0, ids, 8, &m) == CK_ENOTFOUND);
    tok_free(a);

    /* bad arguments */
    a = (tokenizer *)1;
    err[0] = 0;
    CK_CHECK(tok_from_arrays(n, (const char *const *)pieces, lens, scores, NULL, 1, 2, 600, &a, err,
                             sizeof err) == CK_EINVAL &&
             a == NULL && err[0]);
    int32_t badtypes[2] = {1, 9};
    CK_CHECK(tok_from_arrays(2, (const char *const *)pieces, lens, NULL, badtypes, -1, -1, -1, &a, err,
                             sizeof err) == CK_EFORMAT);
    float nan_scores[2] = {0, NAN};
    CK_CHECK(tok_from_arrays(2, (const char *const *)pieces, lens, nan_scores, NULL, -1, -1, -1, &a, err,
                             sizeof err) == CK_EFORMAT);
    CK_CHECK(tok_from_arrays(0, (const char *const *)pieces, lens, NULL, NULL, -1, -1, -1, &a, err,
                             sizeof err) == CK_EINVAL);
    for (int i = 0; i < n; i++) free(pieces[i]);
    free(pieces);
    free(lens);
    free(scores);
    free(types);
}

/* write bytes to a fresh temporary file; returns its path in buf */
static int write_tmp(char *path, size_t cap, const void *data, size_t n) {
    snprintf(path, cap, "/tmp/ck_tok_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    ssize_t w = n ? write(fd, data, n) : 0;
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

static void test_malformed(void) {
    FILE *f = fopen(ck_test_model_path("tok512.bin"), "rb");
    CK_CHECK(f != NULL);
    static unsigned char good[8192];
    size_t size = fread(good, 1, sizeof good, f);
    fclose(f);
    CK_CHECK(size == 6227);
    char path[64], err[256];
    tokenizer *t;

    /* every truncation is refused with a message */
    for (size_t cut = 0; cut < size; cut += (cut < 64 ? 1 : 7)) {
        CK_CHECK(write_tmp(path, sizeof path, good, cut) == 0);
        err[0] = 0;
        t = (tokenizer *)1;
        int rc = tok_load_llama2c(path, 512, &t, err, sizeof err);
        unlink(path);
        CK_CHECK_MSG(rc == CK_EFORMAT && t == NULL && err[0], "cut %zu: rc %d", cut, rc);
    }
    /* the last byte missing */
    CK_CHECK(write_tmp(path, sizeof path, good, size - 1) == 0);
    CK_CHECK(tok_load_llama2c(path, 512, &t, err, sizeof err) == CK_EFORMAT);
    unlink(path);

    /* piece lengths: negative, huge, one past the end */
    static unsigned char bad[8192];
    const int32_t lens[] = {-1, INT32_MIN, INT32_MAX, 0x10000000, 7000};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        memcpy(bad, good, size);
        /* piece 259's length field: header 4, then pieces 0..258 */
        size_t pos = 4;
        for (int i = 0; i < 259; i++) {
            int32_t l;
            memcpy(&l, bad + pos + 4, 4);
            pos += 8 + (size_t)l;
        }
        memcpy(bad + pos + 4, &lens[k], 4);
        CK_CHECK(write_tmp(path, sizeof path, bad, size) == 0);
        err[0] = 0;
        int rc = tok_load_llama2c(path, 512, &t, err, sizeof err);
        unlink(path);
        CK_CHECK_MSG(rc == CK_EFORMAT && err[0], "len %d: rc %d", (int)lens[k], rc);
    }
    /* negative max_token_length */
    memcpy(bad, good, size);
    int32_t neg = -5;
    memcpy(bad, &neg, 4);
    CK_CHECK(write_tmp(path, sizeof path, bad, size) == 0);
    CK_CHECK(tok_load_llama2c(path, 512, &t, err, sizeof err) == CK_EFORMAT);
    unlink(path);
    /* NaN score */
    memcpy(bad, good, size);
    float nanv = NAN;
    memcpy(bad + 4, &nanv, 4);
    CK_CHECK(write_tmp(path, sizeof path, bad, size) == 0);
    CK_CHECK(tok_load_llama2c(path, 512, &t, err, sizeof err) == CK_EFORMAT);
    unlink(path);

    /* the model claims more pieces than the file has; absurd sizes */
    const char *real = ck_test_model_path("tok512.bin");
    CK_CHECK(tok_load_llama2c(real, 513, &t, err, sizeof err) == CK_EFORMAT && t == NULL);
    CK_CHECK(tok_load_llama2c(real, 100000, &t, err, sizeof err) == CK_EFORMAT);
    CK_CHECK(tok_load_llama2c(real, 2, &t, err, sizeof err) == CK_EINVAL);
    CK_CHECK(tok_load_llama2c(real, -1, &t, err, sizeof err) == CK_EINVAL);
    CK_CHECK(tok_load_llama2c(real, INT32_MAX, &t, err, sizeof err) == CK_EINVAL);
    CK_CHECK(tok_load_llama2c("/nonexistent/tok.bin", 512, &t, err, sizeof err) == CK_EIO);
    CK_CHECK(strstr(err, "/nonexistent/tok.bin") != NULL);
    /* fewer pieces than the file has is fine (trailing bytes ignored) */
    CK_CHECK(tok_load_llama2c(real, 300, &t, NULL, 0) == 0);
    CK_CHECK(tok_vocab_size(t) == 300);
    tok_free(t);
    tok_free(NULL);
}

/* ---------------------------------------------------------------------------
 * the work bound of tok_encode */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_max_piece_len(void) {
    size_t want = 1;
    for (int i = 0; i < tok_vocab_size(tk); i++) {
        int ty = tok_type(tk, i);
        if ((ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_USER) || i == tok_bos(tk) || i == tok_eos(tk) ||
            i == tok_unk(tk))
            continue;
        size_t l;
        tok_piece(tk, i, &l);
        if (l > want) want = l;
    }
    CK_CHECK_MSG(tok_max_piece_len(tk) == (int)want && want == 7, "%d vs %zu", tok_max_piece_len(tk),
                 want); /* " friend", " little" */
    CK_CHECK(tok_max_piece_len(NULL) == 0);
}

static void test_encode_bound(void) {
    /* 1 MiB of story text: the 2048-id limit is refused without encoding */
    enum { MIB = 1 << 20, LIMIT = 2048 };
    static const char story[] = "Once upon a time, there was a little girl named Lily. ";
    char *big = malloc(MIB);
    int32_t *ids = malloc(sizeof *ids * (MIB + 2));
    CK_CHECK(big && ids);
    for (size_t i = 0; i < MIB; i++) big[i] = story[i % (sizeof story - 1)];
    int n_fast = -1, n_full = -1;
    double t0 = now_s();
    int rc_fast = tok_encode(tk, big, MIB, 1, ids, LIMIT, &n_fast);
    double t1 = now_s();
    int rc_full = tok_encode(tk, big, MIB, 1, ids, MIB + 2, &n_full);
    double t2 = now_s();
    fprintf(stderr,
            "    1 MiB prompt, limit %d: refused in %.6f s (lower bound %d); "
            "encoding it all takes %.3f s (%d ids)\n",
            LIMIT, t1 - t0, n_fast, t2 - t1, n_full);
    CK_CHECK(rc_fast == CK_ETOOLONG && rc_full == 0);
    /* the lower bound is a true one, and above the limit */
    CK_CHECK_MSG(n_fast > LIMIT && n_fast <= n_full, "%d vs %d", n_fast, n_full);
    CK_CHECK(n_fast == 1 + (MIB + 1 + 6) / 7);
    CK_CHECK_MSG(t1 - t0 < 0.1 * (t2 - t1) + 0.001, "refusal took %.6f s", t1 - t0);

    /* right at the limit: " friend" is the longest piece (7 bytes), so
     * "friend friend ... friend" (K times, 7K - 1 bytes; 7K with the dummy
     * prefix) needs exactly K ids: accepted with max K + 1 (BOS) */
    enum { K = 1000 };
    size_t len = 7 * (size_t)K - 1;
    memcpy(big, "friend", 6);
    for (int k = 1; k < K; k++) memcpy(big + 6 + 7 * (k - 1), " friend", 7);
    CK_CHECK(len > TOK_EXACT_COUNT_BYTES);
    int n = -1;
    int rc = tok_encode(tk, big, len, 1, ids, K + 1, &n);
    CK_CHECK_MSG(rc == 0 && n == K + 1, "rc %d n %d", rc, n);
    CK_CHECK(ids[0] == tok_bos(tk));
    for (int k = 1; k <= K; k++) CK_CHECK_MSG(ids[k] == 374, "id %d at %d", ids[k], k);
    /* without BOS, K ids suffice */
    CK_CHECK(tok_encode(tk, big, len, 0, ids, K, &n) == 0 && n == K);
    /* one id fewer: refused at once, the count exact here */
    CK_CHECK(tok_encode(tk, big, len, 1, ids, K, &n) == CK_ETOOLONG && n == K + 1);
    /* one byte more ("!"): K + 1 ids after BOS, so max K + 1 is refused at
     * once, and max K + 2 accepted */
    big[len] = '!';
    CK_CHECK(tok_encode(tk, big, len + 1, 1, ids, K + 1, &n) == CK_ETOOLONG && n == K + 2);
    CK_CHECK(tok_encode(tk, big, len + 1, 1, ids, K + 2, &n) == 0 && n == K + 2);
    /* below TOK_EXACT_COUNT_BYTES the count stays exact even with max 0 */
    CK_CHECK(tok_encode(tk, big, 4095, 0, NULL, 0, &n) == CK_ETOOLONG);
    int n2 = -1;
    CK_CHECK(tok_encode(tk, big, 4095, 0, ids, MIB, &n2) == 0 && n == n2);
    free(big);
    free(ids);
}

/* tok_vocab_diff / tok_vocab_hash: the same arrays are one vocabulary,
 * one piece, BOS or the size changed is another (and the first differing
 * id is named). */
static void test_vocab_identity(void) {
    const char *p1[] = {"<unk>", "<s>", "</s>", "a", "b", " ab"};
    const char *p2[] = {"<unk>", "<s>", "</s>", "a", "c", " ab"};
    tokenizer *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    char err[256], ha[17], hb[17], hc[17];
    CK_CHECK(tok_from_arrays(6, p1, NULL, NULL, NULL, 1, 2, 0, &a, err, sizeof err) == 0);
    CK_CHECK(tok_from_arrays(6, p1, NULL, NULL, NULL, 1, 2, 0, &b, err, sizeof err) == 0);
    CK_CHECK(tok_from_arrays(6, p2, NULL, NULL, NULL, 1, 2, 0, &c, err, sizeof err) == 0);
    CK_CHECK(tok_from_arrays(6, p1, NULL, NULL, NULL, 2, 1, 0, &d, err, sizeof err) == 0);
    CK_CHECK(tok_vocab_diff(a, b) == -1 && tok_vocab_diff(a, c) == 4 && tok_vocab_diff(a, d) == 0);
    CK_CHECK(tok_vocab_diff(a, tk) == 0); /* 6 pieces against 512 */
    CK_CHECK(tok_vocab_hash(a, ha) == 0 && tok_vocab_hash(b, hb) == 0 && tok_vocab_hash(c, hc) == 0);
    CK_CHECK(strlen(ha) == 16 && !strcmp(ha, hb) && strcmp(ha, hc));
    CK_CHECK(tok_vocab_hash(d, hc) == 0 && strcmp(ha, hc));
    tok_free(a);
    tok_free(b);
    tok_free(c);
    tok_free(d);
}

int main(void) {
    char err[256] = "";
    int rc = tok_load_llama2c(ck_test_model_path("tok512.bin"), 512, &tk, err, sizeof err);
    if (rc != 0) fprintf(stderr, "load: %s (%s)\n", err, ck_errname(rc));
    CK_RUN(test_load);
    CK_RUN(test_vocab_identity);
    if (tk) {
        CK_RUN(test_oracle_prompt);
        CK_RUN(test_vs_reference);
        CK_RUN(test_roundtrip);
        CK_RUN(test_random_bytes);
        CK_RUN(test_long);
        CK_RUN(test_too_long);
        CK_RUN(test_decode);
        CK_RUN(test_from_arrays);
        CK_RUN(test_malformed);
        CK_RUN(test_max_piece_len);
        CK_RUN(test_encode_bound);
    }
    tok_free(tk);
    return ck_test_summary();
}
