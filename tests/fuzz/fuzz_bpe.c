/* fuzz_bpe.c - the BPE tokenizers (tokenizer.h, tok_pre.h) on any bytes:
 * tok_encode_opts with and without special-token parsing, and tok_decode of
 * any ids, for each pre-tokenizer it implements and for Gemma 4's BPE.
 *
 * The vocabularies are built here, once, as vocabulary-only GGUF files read
 * back through gguf_open and tok_from_gguf (the path a downloaded model's
 * tokenizer takes), with a few merges (" t", "he", " the", "in", "ing",
 * digits) and the control tokens <|endoftext|>, <|im_start|>, <|im_end|>:
 * byte-level ones (tokenizer.ggml.model "gpt2": GPT-2's 256 byte
 * characters), one per `tokenizer.ggml.pre` value below, and a Gemma 4 one
 * (model "gemma4": UTF-8 pieces with "▁" for a space, a few letters, the 256
 * <0xXX> byte pieces). (The fuzz corpus is ours: llama.cpp's vocab files are
 * not copied.)
 *
 * Input: byte 0 bits 0-1 and 4-7 pick the vocabulary ((bits 0-1 | bits 4-7
 * << 2) modulo their count: 0-3 as before bits 4-7 were read), bit 2 parses
 * special tokens, bit 3 takes the rest as int32 ids to decode instead of
 * text. Text: it must encode (every byte has a piece); every id is inside the
 * vocabulary; without special parsing, decoding the ids one after another
 * gives back exactly the text (BPE loses nothing; for Gemma 4 a "▁" in the
 * text comes back as the space it stands for); a max one short of the count
 * gives CK_ETOOLONG with a count above it. Ids: any id decodes to a bounded
 * string (empty outside the vocabulary). */
#include "ck_err.h"
#include "fuzz.h"
#include "gguf.h"
#include "tokenizer.h"

/* byte-level vocabularies by `pre`; the last entry is Gemma 4's */
#define N_VOCABS 9
static const char *const pres[N_VOCABS] = {"gpt-2",  "llama-bpe", "qwen2", "smollm", "qwen35",
                                           "gpt-4o", "tekken",    "glm4",  "gemma4"};
static tokenizer *toks[N_VOCABS];

/* GPT-2's printable stand-in for byte b, as UTF-8 into out (3 bytes at most). */
static size_t byte_char(int b, char *out) {
    unsigned cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = (unsigned)b;
    } else {
        int n = 0; /* the bytes that are not printable, in order, from 256 */
        for (int c = 0; c < b; c++)
            n += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255));
        cp = 256u + (unsigned)n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* Gemma 4's pieces besides the merged ones and the byte pieces: its
 * space "▁", the letters and digits the merges start from, newlines */
static const char *const g4_chars[] = {"\xe2\x96\x81", "t",   "h", "e", "i", "n", "g", "1", "2", "a", "r",
                                       "\n",           "\n\n"};
#define N_G4_CHARS (int)(sizeof g4_chars / sizeof g4_chars[0])

/* The vocabulary of pre (byte-level), or Gemma 4's for "gemma4". */
static tokenizer *build(const char *pre) {
    enum { NB = 256, NM = 8, NS = 3, N = NB + N_G4_CHARS + NM + NS };
    static char store[N][40];
    const char *tokens[N];
    int32_t types[N];
    int n = 0;
    int g4 = strcmp(pre, "gemma4") == 0;
    for (int b = 0; b < NB; b++) {
        size_t l = g4 ? (size_t)snprintf(store[n], sizeof store[n], "<0x%02X>", b) : byte_char(b, store[n]);
        store[n][l] = 0;
        types[n] = g4 ? 6 : 1;
        tokens[n] = store[n];
        n++;
    }
    for (int i = 0; g4 && i < N_G4_CHARS; i++) {
        tokens[n] = g4_chars[i];
        types[n++] = 1;
    }
    /* merges "A B" and the pieces they make; a space is GPT-2's stand-in
     * character U+0120 in both, or Gemma 4's "▁" U+2581 */
    const char *ml[NM][2] = {{" ", "t"},  {"h", "e"}, {" t", "he"}, {"i", "n"},
                             {"in", "g"}, {"1", "2"}, {" ", "a"},   {"e", "r"}};
    const char *space = g4 ? "\xe2\x96\x81" : "\xc4\xa0";
    static char mstore[NM][40];
    const char *merges[NM];
    for (int i = 0; i < NM; i++) {
        char g[2][16];
        for (int k = 0; k < 2; k++) {
            const char *x = ml[i][k];
            snprintf(g[k], sizeof g[k], "%s%s", x[0] == ' ' ? space : "", x[0] == ' ' ? x + 1 : x);
        }
        snprintf(mstore[i], sizeof mstore[i], "%s %s", g[0], g[1]);
        merges[i] = mstore[i];
        snprintf(store[n], sizeof store[n], "%s%s", g[0], g[1]);
        types[n] = 1;
        tokens[n] = store[n];
        n++;
    }
    const char *specials[NS] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    const int eot = n; /* <|endoftext|>: bos and eos */
    for (int i = 0; i < NS; i++) {
        snprintf(store[n], sizeof store[n], "%s", specials[i]);
        types[n] = 3; /* control */
        tokens[n] = store[n];
        n++;
    }
    gguf_writer *w = NULL;
    char path[] = "/tmp/confkv-fuzz-bpe-XXXXXX", err[256];
    int fd = mkstemp(path);
    FUZZ_CHECK(fd >= 0);
    close(fd);
    FUZZ_CHECK(gguf_writer_new(&w) == 0);
    FUZZ_CHECK(gguf_writer_set_str(w, "general.architecture", "llama") == 0);
    FUZZ_CHECK(gguf_writer_set_str(w, "tokenizer.ggml.model", g4 ? "gemma4" : "gpt2") == 0);
    if (!g4) FUZZ_CHECK(gguf_writer_set_str(w, "tokenizer.ggml.pre", pre) == 0);
    FUZZ_CHECK(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, (uint64_t)n) == 0);
    FUZZ_CHECK(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n) == 0);
    FUZZ_CHECK(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, NM) == 0);
    FUZZ_CHECK(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)eot) == 0);
    FUZZ_CHECK(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eot) == 0);
    FUZZ_CHECK(gguf_writer_write(w, path, err, sizeof err) == 0);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    if (gguf_open(path, &f, err, sizeof err) || tok_from_gguf(f, &t, err, sizeof err)) {
        fprintf(stderr, "fuzz_bpe: vocabulary with pre %s: %s\n", pre, err);
        abort();
    }
    gguf_close(f);
    unlink(path);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (int i = 0; i < N_VOCABS; i++) {
        toks[i] = build(pres[i]);
        /* the vocabularies really merge and really parse their specials:
         * " thing" is " t" "h" "ing", "<|im_start|>" one control id */
        int32_t ids[16];
        int n = -1;
        FUZZ_CHECK(tok_encode_opts(toks[i], " thing", 6, 0, ids, 16, &n) == 0 && n == 3);
        FUZZ_CHECK(tok_encode_opts(toks[i], "<|im_start|>", 12, TOK_ENC_PARSE_SPECIAL, ids, 16, &n) == 0 &&
                   n == 1);
        FUZZ_CHECK(tok_encode_opts(toks[i], "<|im_start|>", 12, 0, ids, 16, &n) == 0 && n > 1);
    }
    return 0;
}

/* g4: tok is Gemma 4's, whose "▁" in the text is a space */
static void text_case(const tokenizer *tok, const uint8_t *text, size_t len, int special, int g4) {
    size_t cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    FUZZ_CHECK(ids != NULL);
    int n = -1;
    unsigned flags = special ? TOK_ENC_PARSE_SPECIAL : 0;
    FUZZ_CHECK(tok_encode_opts(tok, (const char *)text, len, flags, ids, (int)cap, &n) == 0);
    FUZZ_CHECK(n >= 0 && (size_t)n <= len);
    int V = tok_vocab_size(tok);
    char *back = malloc(len + 1), *text_as = malloc(len + 1);
    FUZZ_CHECK(back != NULL && text_as != NULL);
    size_t got = 0;
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < V);
        size_t pl;
        const char *p = tok_decode(tok, i ? ids[i - 1] : -1, ids[i], &pl);
        FUZZ_CHECK(p != NULL && pl <= len - got);
        memcpy(back + got, p, pl);
        got += pl;
    }
    if (!special) {
        /* what the text reads as: Gemma 4's "▁" is a space */
        size_t wl = 0;
        for (size_t i = 0; i < len; i++) {
            int esc = g4 && i + 2 < len && text[i] == 0xE2 && text[i + 1] == 0x96 && text[i + 2] == 0x81;
            text_as[wl++] = esc ? ' ' : (char)text[i];
            i += esc ? 2 : 0;
        }
        FUZZ_CHECK(got == wl && (wl == 0 || !memcmp(back, text_as, wl)));
    }
    if (n > 0) {
        int n2 = -1;
        int rc = tok_encode_opts(tok, (const char *)text, len, flags, ids, n - 1, &n2);
        FUZZ_CHECK(rc == CK_ETOOLONG && n2 >= n);
    }
    free(back);
    free(text_as);
    free(ids);
}

static void ids_case(const tokenizer *tok, const uint8_t *p, size_t len) {
    int prev = -1, V = tok_vocab_size(tok);
    for (size_t i = 0; i + 4 <= len; i += 4) {
        int32_t id = (int32_t)fuzz_rd32(p + i);
        if (!(p[i + 3] & 0x80)) id = (int32_t)(fuzz_rd32(p + i) % (uint32_t)(V + 8));
        size_t pl = 99;
        const char *s = tok_decode(tok, prev, id, &pl);
        FUZZ_CHECK(s != NULL);
        if (id < 0 || id >= V) FUZZ_CHECK(pl == 0);
        FUZZ_CHECK(pl <= 64);
        volatile char x = pl ? s[pl - 1] : 0;
        (void)x;
        prev = id;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned v = ((unsigned)(data[0] & 3) | (unsigned)(data[0] >> 4) << 2) % N_VOCABS;
    const tokenizer *tok = toks[v];
    if (data[0] & 8)
        ids_case(tok, data + 1, size - 1);
    else
        text_case(tok, data + 1, size - 1, (data[0] >> 2) & 1, v == N_VOCABS - 1);
    return 0;
}
