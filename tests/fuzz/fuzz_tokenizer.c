/* fuzz_tokenizer.c - tok_encode of any bytes and tok_decode of any ids
 * (tokenizer.h).
 *
 * The tokenizer is the shared stories260K tok512.bin ($CONFKV_FUZZ_MODELS,
 * else the compiled-in CONFKV_SHARED_MODELS), or, when that file is absent,
 * a small vocabulary built here with tok_from_arrays: the control pieces,
 * all 256 byte pieces, a space, letters and a few merges.
 *
 * Input: byte 0 picks the test. Even: the rest is text; it must encode
 * (both vocabularies have every byte piece), every id must be inside the
 * vocabulary, and decoding the ids one after another must give back the
 * text exactly (the dummy-prefix space is dropped after BOS). A small max
 * must give CK_ETOOLONG with the count needed. Odd: the rest is int32 ids,
 * each decoded after the previous one: any id, in range or not, decodes to
 * a bounded string. */
#include <sys/stat.h>

#include "ck_err.h"
#include "fuzz.h"
#include "tokenizer.h"

/* libFuzzer gives a harness no context pointer: the tokenizer built once at
 * start-up is the one piece of state kept between inputs (read-only). */
static tokenizer *tok;

static tokenizer *builtin_vocab(void) {
    enum { N = 3 + 256 + 1 + 26 + 6 };
    static char buf[N][8];
    const char *pieces[N];
    float scores[N];
    int n = 0;
    const char *fixed[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) snprintf(buf[n++], 8, "%s", fixed[i]);
    for (int b = 0; b < 256; b++) snprintf(buf[n++], 8, "<0x%02X>", b);
    snprintf(buf[n++], 8, " ");
    for (int c = 0; c < 26; c++) snprintf(buf[n++], 8, "%c", 'a' + c);
    const char *merges[] = {" t", "th", "he", " the", "an", "and"};
    for (int i = 0; i < 6; i++) snprintf(buf[n++], 8, "%s", merges[i]);
    for (int i = 0; i < n; i++) {
        pieces[i] = buf[i];
        scores[i] = i >= N - 6 ? (float)(i - (N - 6)) : -(float)i;
    }
    tokenizer *t = NULL;
    char err[256];
    if (tok_from_arrays(n, pieces, NULL, scores, NULL, 1, 2, 0, &t, err, sizeof err)) {
        fprintf(stderr, "fuzz_tokenizer: built-in vocabulary: %s\n", err);
        abort();
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("CONFKV_FUZZ_MODELS");
#ifdef CONFKV_SHARED_MODELS
    if (!dir) dir = CONFKV_SHARED_MODELS;
#endif
    char path[4096], err[256];
    struct stat st;
    if (dir) snprintf(path, sizeof path, "%s/tok512.bin", dir);
    if (dir && !stat(path, &st) && !tok_load_llama2c(path, 512, &tok, err, sizeof err)) return 0;
    fprintf(stderr, "fuzz_tokenizer: no shared tok512.bin: using the built-in vocabulary\n");
    tok = builtin_vocab();
    return 0;
}

static void text_case(const uint8_t *text, size_t len) {
    size_t cap = 2 * len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    FUZZ_CHECK(ids != NULL);
    int n = -1;
    int rc = tok_encode(tok, (const char *)text, len, 1, ids, (int)cap, &n);
    FUZZ_CHECK(rc == 0);
    /* BOS, then at most the dummy prefix and one id per byte */
    FUZZ_CHECK(n >= 1 && (size_t)n <= len + 2);
    FUZZ_CHECK(ids[0] == tok_bos(tok));
    int V = tok_vocab_size(tok);
    char *back = malloc(len + 1);
    FUZZ_CHECK(back != NULL);
    size_t got = 0;
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < V);
        size_t pl;
        const char *p = tok_decode(tok, i ? ids[i - 1] : -1, ids[i], &pl);
        FUZZ_CHECK(p != NULL && pl <= len - got);
        memcpy(back + got, p, pl);
        got += pl;
    }
    FUZZ_CHECK(got == len && (len == 0 || !memcmp(back, text, len)));
    if (n > 1) {
        int n2 = -1;
        FUZZ_CHECK(tok_encode(tok, (const char *)text, len, 1, ids, n - 1, &n2) == CK_ETOOLONG && n2 == n);
    }
    free(back);
    free(ids);
}

static void ids_case(const uint8_t *p, size_t len) {
    int prev = -1;
    for (size_t i = 0; i + 4 <= len; i += 4) {
        int32_t id = (int32_t)fuzz_rd32(p + i);
        /* mostly ids near the vocabulary, sometimes any int32 */
        if (!(p[i + 3] & 0x80)) id = (int32_t)(fuzz_rd32(p + i) % (uint32_t)(tok_vocab_size(tok) + 8));
        size_t pl = 99;
        const char *s = tok_decode(tok, prev, id, &pl);
        FUZZ_CHECK(s != NULL);
        if (id < 0 || id >= tok_vocab_size(tok)) FUZZ_CHECK(pl == 0);
        size_t want;
        const char *piece = tok_piece(tok, id, &want);
        FUZZ_CHECK(pl <= (piece ? want : 0) || pl == 1);
        volatile char x = pl ? s[pl - 1] : 0;
        (void)x;
        prev = id;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1)
        ids_case(data + 1, size - 1);
    else
        text_case(data + 1, size - 1);
    return 0;
}
