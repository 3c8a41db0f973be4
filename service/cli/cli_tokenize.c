/* cli_tokenize.c - `confkv tokenize`: text to token ids, as JSON arrays.
 *
 * Reads only the tokenizer: a GGUF file's tokenizer.ggml.* keys (so
 * llama.cpp's vocab-only ggml-vocab-*.gguf files work), or a llama2.c
 * checkpoint with its --tokenizer file. The ids are what the engine would
 * feed the model for that text; with --no-bos none of the vocabulary's
 * added tokens (BOS, EOS) are added, which is how llama.cpp's vocab tests
 * (test-tokenizer-0) compare. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "cli.h"
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

static void help(void) {
    printf("usage: confkv tokenize --model M [--tokenizer T] [--no-bos] [--parse-special]\n"
           "                       (TEXT | -- TEXT | --file F)\n"
           "\n"
           "Print the token ids of TEXT as one JSON array (the whole argument, newlines\n"
           "and all), or of each line of file F (without its newline) as one array a line.\n"
           "\n"
           "  --model M          a GGUF model or vocab-only GGUF file (llama.cpp's\n"
           "                     ggml-vocab-*.gguf), or a llama2.c checkpoint\n"
           "  --tokenizer T      the llama2.c tokenizer file (llama2.c checkpoints only)\n"
           "  --no-bos           add no special tokens (neither BOS nor EOS)\n"
           "  --parse-special    control-token strings in the text (<|im_start|>, <s>)\n"
           "                     become those tokens; without it they are plain text\n"
           "  --                 the next argument is TEXT even if it starts with '-'\n");
}

/* Encode and print one array; returns 0 or 1 (message printed). */
static int print_ids(cli_args *a, const tokenizer *t, const char *text, size_t len, unsigned flags,
                     int32_t **ids, int *cap) {
    int n = 0;
    int rc = tok_encode_opts(t, text, len, flags, *ids, *cap, &n);
    /* too many for the buffer: n is the count (or, for long text refused
     * unencoded, a lower bound of it: then a second try gives the count) */
    for (int tries = 0; rc == CK_ETOOLONG && n > *cap && tries < 2; tries++) {
        int32_t *grown = realloc(*ids, (size_t)n * sizeof *grown);
        if (!grown) {
            cli_error(a, "out of memory for %d ids", n);
            return 1;
        }
        *ids = grown;
        *cap = n;
        rc = tok_encode_opts(t, text, len, flags, *ids, *cap, &n);
    }
    if (rc) {
        cli_error(a, "cannot tokenize: %s", ck_strerror(rc));
        return 1;
    }
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)(*ids)[i]);
    fputs("]\n", stdout);
    return 0;
}

int cli_tokenize(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "tokenize", 0};
    const char *model_path = NULL, *tok_path = NULL, *file = NULL, *text = NULL;
    int no_bos = 0, parse_special = 0;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_str(&a, "--model", &model_path) || cli_str(&a, "--tokenizer", &tok_path) ||
            cli_str(&a, "--file", &file))
            continue;
        if (cli_flag(&a, "--no-bos")) {
            no_bos = 1;
        } else if (cli_flag(&a, "--parse-special")) {
            parse_special = 1;
        } else if (cli_flag(&a, "--")) {
            if (a.i >= a.argc) {
                cli_error(&a, "'--' needs the TEXT after it");
                return 2;
            }
            if (text) {
                cli_error(&a, "one TEXT only (quote it)");
                return 2;
            }
            text = a.argv[a.i++];
        } else if (a.argv[a.i][0] != '-' || a.argv[a.i][1] == '\0') {
            if (text) {
                cli_error(&a, "one TEXT only (quote it): '%s'", a.argv[a.i]);
                return 2;
            }
            text = a.argv[a.i++];
        } else {
            return cli_unknown(&a);
        }
    }
    if (a.bad) return 2;
    if (!model_path) {
        cli_error(&a, "--model is required (try --help)");
        return 2;
    }
    if (!text == !file) {
        cli_error(&a, "give either TEXT or --file F (try --help)");
        return 2;
    }

    cli_vocab v;
    FILE *in = NULL;
    int32_t *ids = NULL;
    char *line = NULL;
    int exit_code = cli_vocab_open(&a, model_path, tok_path, &v);
    if (exit_code) return exit_code;
    exit_code = 1;
    const tokenizer *t = v.tok;

    unsigned flags = (no_bos ? 0 : TOK_ENC_ADD_SPECIAL) | (parse_special ? TOK_ENC_PARSE_SPECIAL : 0);
    int cap = 256;
    if (!(ids = malloc((size_t)cap * sizeof *ids))) {
        cli_error(&a, "out of memory");
        goto out;
    }
    if (text) {
        exit_code = print_ids(&a, t, text, strlen(text), flags, &ids, &cap);
        goto out;
    }
    in = strcmp(file, "-") ? fopen(file, "rb") : stdin;
    if (!in) {
        cli_error(&a, "cannot open %s", file);
        goto out;
    }
    size_t lcap = 0;
    ssize_t ll;
    exit_code = 0;
    while ((ll = getline(&line, &lcap, in)) >= 0) {
        size_t l = (size_t)ll;
        if (l > 0 && line[l - 1] == '\n') l--;
        if (print_ids(&a, t, line, l, flags, &ids, &cap)) {
            exit_code = 1;
            break;
        }
    }
    if (ferror(in)) {
        cli_error(&a, "read error on %s", file);
        exit_code = 1;
    }

out:
    if (in && in != stdin) fclose(in);
    free(line);
    free(ids);
    cli_vocab_close(&v);
    if (fflush(stdout) != 0) exit_code = 1;
    return exit_code;
}
