/* fuzz_llama2c.c - the llama2.c checkpoint reader (model.h, model_load of a
 * file not starting with "GGUF").
 *
 * Input: a whole checkpoint. Its tokenizer file is the shared stories260K
 * tok512.bin (vocabulary 512) when present ($CONFKV_FUZZ_MODELS, else the
 * compiled-in CONFKV_SHARED_MODELS), else a 512-piece one made at start;
 * a checkpoint whose vocab_size is not 512 fails at the tokenizer, after the
 * checkpoint's own checks. Checked, when it loads: every weight view has
 * the element count of its shape and lies inside the mapping. */
#include <sys/stat.h>

#include "ck_err.h"
#include "fuzz.h"
#include "model.h"

/* libFuzzer gives a harness no context pointer: the tokenizer path chosen
 * once at start-up is the one piece of state kept between inputs. */
static char tok_path[4096];

/* A 512-piece llama2.c tokenizer (unk, bos, eos, the 256 byte pieces, then
 * letter pairs) in a memfd that stays open for the run; its path in path. */
static void write_tokenizer(char *path, size_t cap) {
    size_t len = 4;
    unsigned char *b = malloc(4 + 512 * (8 + 16));
    if (!b) abort();
    int32_t max_len = 6;
    memcpy(b, &max_len, 4);
    for (int i = 0; i < 512; i++) {
        char piece[16];
        int pl;
        if (i < 3)
            pl = snprintf(piece, sizeof piece, "%s", i == 0 ? "<unk>" : i == 1 ? "\n<s>\n" : "\n</s>\n");
        else if (i < 259)
            pl = snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else
            pl = snprintf(piece, sizeof piece, "%c%c", 'a' + (i - 259) % 26, 'a' + (i - 259) / 26);
        float score = (float)-i;
        int32_t l32 = pl;
        memcpy(b + len, &score, 4);
        memcpy(b + len + 4, &l32, 4);
        memcpy(b + len + 8, piece, (size_t)pl);
        len += 8 + (size_t)pl;
    }
    if (fuzz_memfile(b, len, path, cap) < 0) abort();
    free(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("CONFKV_FUZZ_MODELS");
#ifdef CONFKV_SHARED_MODELS
    if (!dir) dir = CONFKV_SHARED_MODELS;
#endif
    struct stat st;
    if (dir) snprintf(tok_path, sizeof tok_path, "%s/tok512.bin", dir);
    if (!dir || stat(tok_path, &st)) {
        write_tokenizer(tok_path, sizeof tok_path);
        fprintf(stderr, "fuzz_llama2c: no shared tok512.bin: using a generated one\n");
    }
    return 0;
}

static void check_tensor(const model *m, const model_tensor *t, uint64_t want) {
    FUZZ_CHECK(t->n == want && t->data != NULL);
    const char *base = m->map_, *p = t->data;
    uint64_t bytes = 4 * t->n;
    FUZZ_CHECK(p >= base && (uint64_t)(p - base) <= m->map_len_ &&
               bytes <= m->map_len_ - (uint64_t)(p - base));
    volatile unsigned char x = ((const unsigned char *)p)[0];
    x ^= ((const unsigned char *)p)[bytes - 1];
    (void)x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* model_load tells GGUF by its magic: keep this target on llama2.c */
    if (size >= 4 && !memcmp(data, "GGUF", 4)) return 0;
    char path[64], err[512];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    model *m = NULL;
    int rc = model_load(path, tok_path, &m, err, sizeof err);
    close(fd);
    if (rc) {
        FUZZ_CHECK(rc < 0 && m == NULL);
        FUZZ_CHECK(memchr(err, 0, sizeof err));
        return 0;
    }
    const model_config *c = &m->cfg;
    char why[256];
    FUZZ_CHECK(m->format == MODEL_FMT_LLAMA2C);
    FUZZ_CHECK(model_config_check(c, why, sizeof why) == 0);
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    uint64_t KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    check_tensor(m, &m->tok_emb, V * D);
    check_tensor(m, &m->out_norm, D);
    check_tensor(m, &m->wcls, V * D);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        check_tensor(m, &ly->attn_norm, D);
        check_tensor(m, &ly->wq, D * D);
        check_tensor(m, &ly->wk, KV * D);
        check_tensor(m, &ly->wv, KV * D);
        check_tensor(m, &ly->wo, D * D);
        check_tensor(m, &ly->ffn_norm, D);
        check_tensor(m, &ly->w1, F * D);
        check_tensor(m, &ly->w2, D * F);
        check_tensor(m, &ly->w3, F * D);
    }
    FUZZ_CHECK(tok_vocab_size(m->tok) == c->vocab_size);
    model_free(m);
    return 0;
}
