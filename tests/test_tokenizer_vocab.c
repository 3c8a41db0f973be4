/* test_tokenizer_vocab.c - vocabularies built from arrays and from GGUF
 * files: the piece index under pieces chosen to collide in a fixed hash,
 * byte-level BPE, Gemma 4 and SentencePiece GGUF vocabularies encoding as
 * worked out by hand, and hostile or malformed GGUF vocabularies refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ck_err.h"
#include "ck_test.h"
#include "gguf.h"
#include "tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------------
 * many pieces chosen to collide in a fixed (unseeded) hash
 *
 * A fixed index: slot = (h ^ (h >> 29)) & (cap - 1), h = FNV-1a-64 of the
 * piece, cap the power of two >= 2n, linear probing. Pieces whose home slots
 * fall in a window W much smaller than n pile into one run: each insertion
 * and each lookup that lands in it walks the run (O(n) each; 50,000 such
 * pieces take 5 s to load in it). Here the pieces are 4-byte UTF-8-shaped
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
    const size_t mask = (1u << 17) - 1; /* that index's cap for V pieces: 131072 */
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

/* Gemma 4 (tokenizer.ggml.model "gemma4"): BPE over UTF-8 pieces with "▁"
 * for a space, split only at newlines, byte fallback to <0xXX>. */
enum { G4_FIXED = 16, G4_N = G4_FIXED + 256 };
#define G4_BYTE(b) (G4_FIXED + (b))

static void test_gguf_gemma4(void) {
    static const char *const fixed[G4_FIXED] = {
        "<pad>", "<eos>",        "<bos>", "<unk>", "<|turn>",       "<turn|>",        "<|tool_response>",
        "</s>",  "\xe2\x96\x81", "h",     "i",     "\xe2\x96\x81h", "\xe2\x96\x81hi", "\n",
        "\n\n",  "\xc3\xa9"};
    static const int32_t fixed_types[G4_FIXED] = {3, 3, 3, 3, 3, 3, 4, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    /* no "i▁" piece: the merge that makes it leaves a symbol no piece covers */
    static const char *const merges[] = {"\xe2\x96\x81 h", "\xe2\x96\x81h i", "i \xe2\x96\x81"};
    static char bytes[256][8];
    const char *tokens[G4_N];
    int32_t types[G4_N];
    for (int i = 0; i < G4_FIXED; i++) tokens[i] = fixed[i], types[i] = fixed_types[i];
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[G4_BYTE(b)] = bytes[b];
        types[G4_BYTE(b)] = 6;
    }
    /* the file's pre and add_bos_token are overruled, as llama.cpp does */
    vocab_spec v = {"gemma4", "tekken", G4_N, tokens, types, NULL, 3, merges, 2, 1, -1, 0, -1, 0};
    char err[256] = "";
    tokenizer *t = NULL;
    int rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(tok_kind(t) == TOK_KIND_BPE && tok_bos(t) == 2 && tok_eos(t) == 1 && tok_adds_bos(t) == 1);
    /* one word, spaces and all: ▁+h (rank 0) at both places, then ▁h+i */
    CK_CHECK(ENC_IS(t, " hi hi", 0, 12, 12));
    CK_CHECK(ENC_IS(t, " hi", TOK_ENC_ADD_SPECIAL, 2, 12));
    /* a literal "▁" in the text is a space */
    CK_CHECK(ENC_IS(t, "\xe2\x96\x81hi", 0, 12));
    CK_CHECK(ENC_IS(t, "hi", 0, 9, 10));
    /* codepoints are the symbols: "é" is a piece; "ü" and "x" fall back to bytes */
    CK_CHECK(ENC_IS(t, "\xc3\xa9\xc3\xbcx", 0, 15, G4_BYTE(0xC3), G4_BYTE(0xBC), G4_BYTE('x')));
    /* i+▁ merges into "i▁", no piece: its bytes, the space as "▁"'s three */
    CK_CHECK(ENC_IS(t, "hi ", 0, 9, G4_BYTE('i'), G4_BYTE(0xE2), G4_BYTE(0x96), G4_BYTE(0x81)));
    /* newlines are words of their own; a run that is a piece is taken whole
     * (no merge makes "\n\n"), else it merges as any word */
    CK_CHECK(ENC_IS(t, "hi\n\n hi", 0, 9, 10, 14, 12));
    CK_CHECK(ENC_IS(t, "\n\n\n", 0, 13, 13, 13));
    /* control tokens only with parse_special; plain text otherwise */
    CK_CHECK(ENC_IS(t, "<|turn>hi", TOK_ENC_PARSE_SPECIAL, 4, 9, 10));
    CK_CHECK(ENC_IS(t, "<|turn>hi", 0, G4_BYTE('<'), G4_BYTE('|'), G4_BYTE('t'), G4_BYTE('u'), G4_BYTE('r'),
                    G4_BYTE('n'), G4_BYTE('>'), 9, 10));
    /* end of generation: eos, <turn|>, <|tool_response> (made CONTROL); with
     * <|tool_response> in the vocabulary "</s>" is plain text (llama.cpp's rule) */
    CK_CHECK(tok_is_eog(t, 1) && tok_is_eog(t, 5) && tok_is_eog(t, 6));
    CK_CHECK(tok_type(t, 6) == TOK_TYPE_CONTROL);
    CK_CHECK(!tok_is_eog(t, 7) && tok_type(t, 7) == TOK_TYPE_NORMAL);
    /* decoding: spaces back, byte pieces as their byte, control pieces nothing */
    size_t l;
    const char *p = tok_decode(t, 2, 12, &l);
    CK_CHECK(l == 3 && memcmp(p, " hi", 3) == 0);
    p = tok_decode(t, -1, G4_BYTE(0xC3), &l);
    CK_CHECK(l == 1 && (unsigned char)p[0] == 0xC3);
    p = tok_decode(t, -1, 4, &l);
    CK_CHECK(l == 0);
    /* the GGUF spelling comes back as the file wrote it */
    char buf[32];
    CK_CHECK(tok_piece_gguf(t, 12, buf, sizeof buf, &l) == 0 && l == 5 &&
             memcmp(buf, "\xe2\x96\x81hi", 5) == 0);
    CK_CHECK(tok_piece_gguf(t, 4, buf, sizeof buf, &l) == 0 && l == 7 && memcmp(buf, "<|turn>", 7) == 0);
    /* a piece stands for its written length of text ("▁hi" is 5 bytes) */
    CK_CHECK(tok_max_piece_len(t) >= 5);
    tok_free(t);

    /* "gemma4" as the pre-tokenizer of a gpt2 vocabulary is the same tokenizer */
    v.model = "gpt2";
    v.pre = "gemma4";
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(ENC_IS(t, " hi hi", 0, 12, 12));
    tok_free(t);

    /* Gemma 4 without merges is refused */
    v.model = "gemma4";
    v.merges = NULL;
    rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK(rc == CK_EFORMAT && t == NULL && strstr(err, "merges"));
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
    v.pre = "deepseek-llm";
    int rc = vocab_load(&v, &t, err, sizeof err);
    CK_CHECK(rc == CK_EUNSUPPORTED && strstr(err, "deepseek-llm"));
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

int main(void) {
    CK_RUN(test_colliding_pieces);
    CK_RUN(test_gguf_bpe);
    CK_RUN(test_gguf_gemma4);
    CK_RUN(test_gguf_spm);
    CK_RUN(test_gguf_refused);
    return ck_test_summary();
}
