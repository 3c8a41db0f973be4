/* llamacpp_tokenize.c - llama.cpp's tokenizer as the oracle for confkv's.
 *
 * Loads a GGUF's vocabulary only (llama_model_params.vocab_only: no tensors,
 * no backend) with llama.cpp's public C API and tokenizes each case of a
 * file with llama_tokenize (parse_special false; add_special as --add-special
 * says). The cases file holds the texts back to back, each ended by a NUL
 * byte (a text cannot hold one), so newlines and all travel unchanged.
 *
 * Stdout: a first line "bos B add_bos A" (llama_vocab_bos, -1 for none, and
 * llama_vocab_get_add_bos), then one line a case: its ids, space-separated
 * (an empty line for no ids). tests/oracle/tok_pre_suite.py compares them
 * with `confkv tokenize`. Exit 0, 1 on a runtime failure, 2 on a usage error.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void log_cb(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* The whole of a file, NUL-terminated; NULL on failure. */
static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    bool add_special = false;
    const char *model = NULL, *cases = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--add-special") == 0)
            add_special = true;
        else if (!model)
            model = argv[i];
        else if (!cases)
            cases = argv[i];
        else
            model = NULL, i = argc;
    }
    if (!model || !cases) {
        fprintf(stderr, "usage: llamacpp_tokenize [--add-special] VOCAB.gguf CASES\n");
        return 2;
    }
    size_t len;
    char *text = read_all(cases, &len);
    if (!text) {
        fprintf(stderr, "llamacpp_tokenize: cannot read %s\n", cases);
        return 1;
    }
    llama_log_set(log_cb, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(model, mp);
    if (!m) {
        fprintf(stderr, "llamacpp_tokenize: cannot load %s\n", model);
        free(text);
        return 1;
    }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    printf("bos %d add_bos %d\n", (int)llama_vocab_bos(v), llama_vocab_get_add_bos(v) ? 1 : 0);
    int rc = 0, cap = 1024;
    llama_token *ids = malloc((size_t)cap * sizeof *ids);
    for (size_t pos = 0; ids && pos < len;) {
        size_t n = strlen(text + pos);
        int got = llama_tokenize(v, text + pos, (int32_t)n, ids, cap, add_special, false);
        if (got < 0) { /* -got ids needed */
            llama_token *nid = realloc(ids, (size_t)-got * sizeof *ids);
            if (!nid) {
                fprintf(stderr, "llamacpp_tokenize: out of memory\n");
                rc = 1;
                break;
            }
            ids = nid;
            cap = -got;
            got = llama_tokenize(v, text + pos, (int32_t)n, ids, cap, add_special, false);
        }
        if (got < 0) {
            fprintf(stderr, "llamacpp_tokenize: llama_tokenize returned %d\n", got);
            rc = 1;
            break;
        }
        for (int i = 0; i < got; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        putchar('\n');
        pos += n + 1;
    }
    if (!ids) {
        fprintf(stderr, "llamacpp_tokenize: out of memory\n");
        rc = 1;
    }
    free(ids);
    llama_model_free(m);
    llama_backend_free();
    free(text);
    return rc;
}
