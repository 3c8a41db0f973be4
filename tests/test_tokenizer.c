/* test_tokenizer.c - the BPE tokenizer against tok512.bin (stories260K's
 * vocabulary), a naive reference BPE written independently below, round
 * trips, and malformed files. */
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

/* ---------------------------------------------------------------------------
 * many pieces chosen to collide in the old fixed hash
 *
 * The old index: slot = (h ^ (h >> 29)) & (cap - 1), h = FNV-1a-64 of the
 * piece, cap the power of two >= 2n, linear probing. Pieces whose home slots
 * fall in a window W much smaller than n pile into one run: each insertion
 * and each lookup that lands in it walks the run (O(n) each; 50,000 such
 * pieces took 5 s to load). Here the pieces are 4-byte UTF-8-shaped
 * codepoints (lead F0..F7, three continuation bytes), each looked up whole
 * by tok_encode, so encoding them is an exact oracle of the index: the text
 * of piece i encodes to [" ", i]. */

static uint64_t old_slot_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static void test_colliding_pieces(void) {
    enum { N = 50000, SPACE = N, DUP = N + 1, V = N + 2, WINDOW = 4096 };
    const size_t mask = (1u << 17) - 1; /* old cap for V pieces: 131072 */
    char(*cp)[4] = malloc(sizeof *cp * V);
    const char **pieces = malloc(sizeof *pieces * V);
    size_t *lens = malloc(sizeof *lens * V);
    int32_t *ids = malloc(sizeof *ids * (2 * N + 4));
    CK_CHECK(cp && pieces && lens && ids);
    int got = 0;
    for (uint32_t c = 0; c < (1u << 21) && got < N; c++) {
        char b[4] = {(char)(0xF0 | (c >> 18)), (char)(0x80 | ((c >> 12) & 63)),
                     (char)(0x80 | ((c >> 6) & 63)), (char)(0x80 | (c & 63))};
        if ((old_slot_hash(b, 4) & mask) < WINDOW) memcpy(cp[got++], b, 4);
    }
    CK_CHECK_MSG(got == N, "only %d candidates", got);
    for (int i = 0; i < N; i++) pieces[i] = cp[i], lens[i] = 4;
    pieces[SPACE] = " ", lens[SPACE] = 1;
    pieces[DUP] = cp[777], lens[DUP] = 4; /* a duplicate: the first id wins */
    tokenizer *t = NULL;
    char err[256] = "";
    double t0 = now_s();
    int rc = tok_from_arrays(V, pieces, lens, NULL, NULL, -1, -1, -1, &t, err, sizeof err);
    double t1 = now_s();
    CK_CHECK_MSG(rc == 0, "%s", err);
    int bad = -1, n;
    for (int i = 0; i < N && bad < 0; i++)
        if (tok_encode(t, cp[i], 4, 0, ids, 4, &n) != 0 || n != 2 || ids[0] != SPACE || ids[1] != i) bad = i;
    double t2 = now_s();
    /* all of them in one text: N + 1 ids, no merges (no 8-byte pieces) */
    char *text = (char *)cp;
    int rc_all = tok_encode(t, text, 4 * (size_t)N, 0, ids, 2 * N + 4, &n);
    double t3 = now_s();
    int bad_all = rc_all != 0 || n != N + 1 || ids[0] != SPACE;
    for (int i = 0; !bad_all && i < N; i++) bad_all = ids[i + 1] != i;
    size_t dl;
    const char *dp = tok_piece(t, DUP, &dl);
    int dup_ok = dl == 4 && memcmp(dp, cp[777], 4) == 0 && tok_type(t, DUP) == TOK_TYPE_NORMAL;
    tok_free(t);
    free(cp);
    free(pieces);
    free(lens);
    free(ids);
    fprintf(stderr,
            "    %d pieces homed in %d of 131072 old slots: load %.3f s, %d one-piece "
            "encodes %.3f s, one %d-byte encode %.3f s\n",
            N, WINDOW, t1 - t0, N, t2 - t1, 4 * N, t3 - t2);
    CK_CHECK_MSG(bad < 0, "piece %d does not encode to itself", bad);
    CK_CHECK(!bad_all && dup_ok);
    CK_CHECK_MSG(t3 - t0 < 20.0, "took %.1f s", t3 - t0); /* generous */
}

/* ---------------------------------------------------------------------------
 * GGUF vocabularies (tok_from_gguf): tiny files written here, expected ids
 * worked out by hand from the merge rules in tokenizer.h */

#include "gguf.h"

typedef struct {
    const char *model, *pre;
    int n;
    const char *const *tokens;
    const int32_t *types;
    const float *scores;
    int n_merges;
    const char *const *merges;
    int bos, eos, eot;                      /* -1: key absent */
    int add_bos, add_eos, add_space_prefix; /* -1: key absent */
} vocab_spec;

/* Write spec as a vocab-only GGUF, load it; returns tok_from_gguf's code. */
static int vocab_load(const vocab_spec *v, tokenizer **out, char *err, size_t errlen) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/ck_tokv_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return CK_EIO;
    close(fd);
    gguf_writer *w = NULL;
    int rc = gguf_writer_new(&w);
    if (!rc) rc = gguf_writer_set_str(w, "tokenizer.ggml.model", v->model);
    if (!rc && v->pre) rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre);
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tokens, NULL, (uint64_t)v->n);
    if (!rc && v->types)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, (uint64_t)v->n);
    if (!rc && v->scores)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, (uint64_t)v->n);
    if (!rc && v->merges)
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merges, NULL, (uint64_t)v->n_merges);
    if (!rc && v->bos >= 0) rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (!rc && v->eos >= 0) rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (!rc && v->eot >= 0) rc = gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot);
    if (!rc && v->add_bos >= 0) rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    if (!rc && v->add_eos >= 0) rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos);
    if (!rc && v->add_space_prefix >= 0)
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    if (!rc) rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    if (!rc) rc = gguf_open(path, &f, err, errlen);
    if (!rc) rc = tok_from_gguf(f, out, err, errlen);
    gguf_close(f); /* the tokenizer borrows nothing from the file */
    unlink(path);
    return rc;
}

/* encode text and compare with want (n_want ids) */
static int enc_is(const tokenizer *t, const char *text, unsigned flags, const int32_t *want, int n_want) {
    int32_t ids[64];
    int n = -1;
    int rc = tok_encode_opts(t, text, strlen(text), flags, ids, 64, &n);
    int ok = rc == 0 && n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
    if (!ok) {
        fprintf(stderr, "  encode '%s' (flags %u): rc %d, %d ids:", text, flags, rc, n);
        for (int i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", (int)ids[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}
#define ENC_IS(t, text, flags, ...)                        \
    enc_is(t, text, flags, (const int32_t[]){__VA_ARGS__}, \
           (int)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))

/* byte-level BPE: "Ġ" is the space of GPT-2's byte alphabet */
static const char *const bpe_tokens[] = {"<|endoftext|>",
                                         "<|im_start|>",
                                         "<|im_end|>",
                                         "a",
                                         "b",
                                         "c",
                                         "\xc4\xa0",
                                         "<",
                                         "|",
                                         "i",
                                         "m",
                                         "_",
                                         "s",
                                         "t",
                                         "r",
                                         ">",
                                         "ab",
                                         "\xc4\xa0"
                                         "ab",
                                         "abc",
                                         "[USR]"};
static const int32_t bpe_types[] = {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4};
static const char *const bpe_merges[] = {"a b", "\xc4\xa0 ab", "ab c"};

static vocab_spec bpe_spec(void) {
    vocab_spec v = {"gpt2", "gpt-2", 20, bpe_tokens, bpe_types, NULL, 3, bpe_merges, -1, 0, -1, -1, -1, -1};
    return v;
}

static void test_gguf_bpe(void) {
    char err[256] = "";
    tokenizer *t = NULL;
    vocab_spec v = bpe_spec();
    int rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(tok_kind(t) == TOK_KIND_BPE && tok_vocab_size(t) == 20);
    /* "ab" | " abc": a+b (rank 0); then " "+ab (rank 1) beats ab+c (rank 2) */
    int ok = ENC_IS(t, "ab abc", 0, 16, 17, 5);
    CK_CHECK(ok);
    /* no BOS asked by the file (gpt2 default), eos 0 never added */
    CK_CHECK(ENC_IS(t, "ab", TOK_ENC_ADD_SPECIAL, 16));
    /* control strings are plain text without parse_special: "<|" "im" "_"
     * "start" "|>" "a" by the gpt-2 split, each word by its bytes */
    CK_CHECK(ENC_IS(t, "<|im_start|>a", 0, 7, 8, 9, 10, 11, 12, 13, 3, 14, 13, 8, 15, 3));
    CK_CHECK(ENC_IS(t, "<|im_start|>a", TOK_ENC_PARSE_SPECIAL, 1, 3));
    CK_CHECK(ENC_IS(t, "ab<|im_end|><|im_start|>", TOK_ENC_PARSE_SPECIAL, 16, 2, 1));
    /* a user-defined token is cut out always */
    CK_CHECK(ENC_IS(t, "a[USR]b", 0, 3, 19, 4));
    /* decoding: raw bytes back; control pieces print nothing */
    size_t l;
    const char *p = tok_decode(t, -1, 17, &l);
    CK_CHECK(l == 3 && memcmp(p, " ab", 3) == 0);
    p = tok_decode(t, -1, 1, &l);
    CK_CHECK(l == 0);
    p = tok_decode(t, -1, 19, &l);
    CK_CHECK(l == 5 && memcmp(p, "[USR]", 5) == 0);
    char buf[16];
    CK_CHECK(tok_piece_gguf(t, 17, buf, sizeof buf, &l) == 0 && l == 4 &&
             memcmp(buf,
                    "\xc4\xa0"
                    "ab",
                    4) == 0);
    /* end of generation: eos, and the EOG texts <|endoftext|>, <|im_end|> */
    CK_CHECK(tok_is_eog(t, 0) && tok_is_eog(t, 2));
    CK_CHECK(!tok_is_eog(t, 1) && !tok_is_eog(t, 3) && !tok_is_eog(t, 19) && !tok_is_eog(t, 99));
    tok_free(t);

    /* add_bos / add_eos from the file; an explicit eot joins the set */
    v.bos = 1;
    v.add_bos = 1;
    v.add_eos = 1;
    v.eot = 19;
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(ENC_IS(t, "ab", TOK_ENC_ADD_SPECIAL, 1, 16, 0));
    CK_CHECK(ENC_IS(t, "ab", 0, 16));
    CK_CHECK(tok_eot(t) == 19 && tok_is_eog(t, 19));
    tok_free(t);

    /* without the ab+c merge no merge reaches the piece "abc" ... */
    v = bpe_spec();
    v.n_merges = 2;
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(ENC_IS(t, "abc", 0, 16, 5));
    tok_free(t);
    /* ... but Llama 3's pre-tokenizer takes a word that is a piece whole
     * (ignore_merges), and adds BOS by default */
    v.pre = "llama-bpe";
    v.bos = 1;
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(tok_adds_bos(t) == 1);
    CK_CHECK(ENC_IS(t, "abc", TOK_ENC_ADD_SPECIAL, 1, 18));
    tok_free(t);
}

static void test_gguf_spm(void) {
    static const char *const tokens[] = {"<unk>",
                                         "<s>",
                                         "</s>",
                                         "\xe2\x96\x81",
                                         "a",
                                         "b",
                                         "\xe2\x96\x81"
                                         "a",
                                         "ab",
                                         "\xe2\x96\x81"
                                         "ab",
                                         "<0x63>"};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6};
    static const float scores[] = {0, 0, 0, -5, -6, -6, -1, -2, -0.5f, 0};
    vocab_spec v = {"llama", NULL, 10, tokens, types, scores, 0, NULL, -1, -1, -1, -1, -1, -1};
    char err[256] = "";
    tokenizer *t = NULL;
    int rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(tok_kind(t) == TOK_KIND_SPM && tok_bos(t) == 1 && tok_eos(t) == 2);
    /* " ab": " "+a (-1) before a+b (-2), then " a"+b = " ab" (-0.5) */
    CK_CHECK(ENC_IS(t, "ab", 0, 8));
    CK_CHECK(ENC_IS(t, "ab", TOK_ENC_ADD_SPECIAL, 1, 8)); /* llama default: BOS, no EOS */
    CK_CHECK(ENC_IS(t, "abc", 0, 8, 9));                  /* c: byte fallback */
    /* "<s>" is text without parse_special: " " then <, s, > as UNK (no byte
     * pieces for them), then "ab" */
    CK_CHECK(ENC_IS(t, "<s>ab", 0, 3, 0, 0, 0, 7));
    /* with it: BOS, and the text after a special token gets its own prefix */
    CK_CHECK(ENC_IS(t, "<s>ab", TOK_ENC_PARSE_SPECIAL, 1, 8));
    CK_CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1));
    tok_free(t);

    v.add_space_prefix = 0;
    v.add_eos = 1;
    v.add_bos = 0;
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(ENC_IS(t, "ab", TOK_ENC_ADD_SPECIAL, 7, 2));
    CK_CHECK(ENC_IS(t, "ab", 0, 7));
    tok_free(t);
}

/* Hostile or malformed vocabularies are refused with a sentence, never
 * crash, and stay fast. */
static void test_gguf_refused(void) {
    char err[256];
    tokenizer *t = NULL;
    vocab_spec v = bpe_spec();
    static const char *const bad_lines[][3] = {
        {"a b", "ab", NULL}, {"a b", "a ", NULL}, {" a", "a b", NULL}, {"a b", "", NULL}};
    for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; i++) {
        v.merges = bad_lines[i];
        v.n_merges = 2;
        err[0] = 0;
        int rc = vocab_load(&v, &t, err, sizeof err);
        CK_CHECK_MSG(rc == CK_EFORMAT && t == NULL && strstr(err, "merge"), "case %zu: %d %s", i, rc, err);
    }
    /* unknown model and pre-tokenizer: refused by name */
    v = bpe_spec();
    v.pre = "tekken";
    int rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK(rc == CK_EUNSUPPORTED && strstr(err, "tekken"));
    v = bpe_spec();
    v.model = "t5";
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK(rc == CK_EUNSUPPORTED && strstr(err, "t5"));
    /* gpt2 without merges */
    v = bpe_spec();
    v.merges = NULL;
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK(rc == CK_EFORMAT && strstr(err, "merges"));

    /* 200,000 merges that are all the same pair, then the one that matters:
     * the duplicates keep rank 0, and a pair outside the byte alphabet (a raw
     * control byte) can never apply and is skipped */
    enum { NM = 200000 };
    const char **many = malloc(NM * sizeof *many);
    CK_CHECK(many);
    for (int i = 0; i < NM; i++) many[i] = "a b";
    many[NM - 2] = "\x01 b";
    many[NM - 1] = "ab c";
    v = bpe_spec();
    v.merges = many;
    v.n_merges = NM;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = vocab_load(&v, &t, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    free(many);
    CK_CHECK_MSG(rc == 0, "%s", err);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "  %d duplicate merges loaded in %.3f s\n", NM, s);
    CK_CHECK_MSG(s < 5.0, "took %.1f s", s);
    /* no "Ġ ab" merge now: a+b, then ab+c */
    CK_CHECK(ENC_IS(t, "ab abc", 0, 16, 6, 18));
    tok_free(t);

    /* a merges count far past what the file holds: the reader refuses it */
    char path[64];
    snprintf(path, sizeof path, "/tmp/ck_tokh_XXXXXX");
    int fd = mkstemp(path);
    CK_CHECK(fd >= 0);
    unsigned char hdr[4 + 4 + 8 + 8 + 8 + 21 + 4 + 4 + 8];
    size_t o = 0;
    memcpy(hdr, "GGUF", 4);
    o = 4;
    uint32_t ver = 3, ty_arr = GGUF_TYPE_ARRAY, ty_str = GGUF_TYPE_STRING;
    uint64_t nt = 0, nkv = 1, klen = 21, count = (uint64_t)1 << 40;
    memcpy(hdr + o, &ver, 4), o += 4;
    memcpy(hdr + o, &nt, 8), o += 8;
    memcpy(hdr + o, &nkv, 8), o += 8;
    memcpy(hdr + o, &klen, 8), o += 8;
    memcpy(hdr + o, "tokenizer.ggml.merges", 21), o += 21;
    memcpy(hdr + o, &ty_arr, 4), o += 4;
    memcpy(hdr + o, &ty_str, 4), o += 4;
    memcpy(hdr + o, &count, 8), o += 8;
    CK_CHECK(write(fd, hdr, o) == (ssize_t)o);
    close(fd);
    gguf_file *f = NULL;
    rc = gguf_open(path, &f, err, sizeof err);
    unlink(path);
    CK_CHECK_MSG(rc == CK_EFORMAT && f == NULL, "%d %s", rc, err);
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
    CK_RUN(test_colliding_pieces);
    CK_RUN(test_gguf_bpe);
    CK_RUN(test_gguf_spm);
    CK_RUN(test_gguf_refused);
    tok_free(tk);
    return ck_test_summary();
}
