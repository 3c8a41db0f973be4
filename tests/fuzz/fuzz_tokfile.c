/* fuzz_tokfile.c - the llama2.c tokenizer file reader (tokenizer.h,
 * tok_load_llama2c).
 *
 * Input: bytes 0-1 (little-endian) give the vocabulary size the model would
 * ask for (1..4096); the rest is the file. Checked, when it loads: the size
 * is the one asked for; every piece, score, type and GGUF spelling of every
 * id can be read; a text encodes to ids inside the vocabulary (or fails
 * with a documented code) and every id decodes. */
#include <math.h>

#include "ck_err.h"
#include "fuzz.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int vocab = 1 + (int)(((uint32_t)data[0] | (uint32_t)data[1] << 8) % 4096);
    char path[64], err[512];
    int fd = fuzz_memfile(data + 2, size - 2, path, sizeof path);
    if (fd < 0) return 0;
    tokenizer *t = NULL;
    int rc = tok_load_llama2c(path, vocab, &t, err, sizeof err);
    close(fd);
    if (rc) {
        FUZZ_CHECK(rc < 0 && t == NULL);
        FUZZ_CHECK(memchr(err, 0, sizeof err));
        return 0;
    }
    FUZZ_CHECK(tok_vocab_size(t) == vocab);
    for (int id = -1; id <= vocab; id++) {
        size_t len = 1;
        const char *p = tok_piece(t, id, &len);
        if (id < 0 || id == vocab) {
            FUZZ_CHECK(p == NULL && len == 0);
            continue;
        }
        FUZZ_CHECK(p != NULL && p[len] == 0);
        FUZZ_CHECK(!isnan(tok_score(t, id)));
        int ty = tok_type(t, id);
        FUZZ_CHECK(ty >= TOK_TYPE_NORMAL && ty <= TOK_TYPE_BYTE);
        size_t need = 0;
        FUZZ_CHECK(tok_piece_gguf(t, id, NULL, 0, &need) == CK_ETOOLONG);
        char *g = malloc(need + 1);
        FUZZ_CHECK(g != NULL);
        size_t got = 0;
        FUZZ_CHECK(tok_piece_gguf(t, id, g, need + 1, &got) == 0 && got == need && g[got] == 0);
        free(g);
        size_t dl;
        FUZZ_CHECK(tok_decode(t, id > 0 ? id - 1 : -1, id, &dl) != NULL);
    }
    static const char text[] = "Once upon a time, \xe2\x96\x81 \xff\x00 end";
    int32_t ids[256];
    int n = 0;
    rc = tok_encode(t, text, sizeof text - 1, 1, ids, 256, &n);
    FUZZ_CHECK(rc == 0 || rc == CK_ENOTFOUND);
    if (rc == 0)
        for (int i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
    tok_free(t);
    return 0;
}
