/* llamacpp_logits.c - llama.cpp as the oracle for confkv's logits.
 *
 * Loads a GGUF with llama.cpp (its public C API only, llama.h and
 * ggml-backend.h), runs greedy decoding for K steps and writes what
 * `confkv generate --dump-logits FILE --dump-steps K` writes: K x n_vocab
 * little-endian float32, step 0 = the logits after the prompt, step i = after
 * the i-th greedy token. tests/llamacpp/compare_logits.py compares the two.
 *
 * The settings are the ones that make llama.cpp's arithmetic closest to
 * confkv's reference path, so that what is left is the engines' difference:
 *   - flash attention off (LLAMA_FLASH_ATTN_TYPE_DISABLED): softmax(QK^T)V
 *     in f32, as confkv's CPU attention;
 *   - an f32 KV cache (type_k = type_v = GGML_TYPE_F32): llama.cpp's default
 *     is f16, which alone moves the logits by ~1e-3;
 *   - no weight repacking (use_extra_bufts = false) and no GPU layers;
 *   - one CPU backend variant loaded by name (--cpu-variant, default haswell:
 *     AVX2 + FMA + F16C), not ggml_backend_load_all_from_path's pick: the
 *     pick depends on the machine, and a variant the CPU lacks would die of
 *     SIGILL rather than fail.
 *
 * Stdout: one JSON line {"prompt_ids":[...], "ids":[...], "n_vocab":V,
 * "steps":K, "load_s":S (llama_model_load_from_file), "decode_s":S (the K
 * llama_decode calls, the prompt's included), "cpu_backend":"...",
 * "llama_cpp":"<llama_version()>"}; "ids" are the greedy tokens
 * (argmax, lowest id on ties), one a step. Exit 0, 1 on a runtime failure,
 * 2 on a usage error. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"

#define MAX_IDS 65536 /* prompt ids given with --ids, at most */

static void usage(FILE *f) {
    fprintf(f, "usage: llamacpp_logits --model M.gguf --libdir DIR (--prompt TEXT | --ids I,J,..)\n"
               "                       --steps K --out FILE [--threads N] [--cpu-variant NAME]\n"
               "                       [--verbose]\n\n"
               "  --libdir DIR        llama.cpp's prebuilt libraries (libggml-cpu-NAME.so)\n"
               "  --prompt TEXT       tokenized by llama.cpp, BOS added as the model says\n"
               "  --ids I,J,..        prompt token ids as they are (no BOS added)\n"
               "  --steps K           logits of K steps (the prompt's, then K-1 greedy tokens)\n"
               "  --out FILE          K x n_vocab little-endian float32\n"
               "  --cpu-variant NAME  CPU backend library to load (default haswell)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* llama.cpp and ggml log through here: quiet unless --verbose, errors always. */
static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    const int *verbose = ud;
    if (*verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* "12,5,7" -> ids; 0, or -1 after a message (empty, non-numeric, out of
 * [0, n_vocab) is checked later, once the vocabulary is known). */
static int parse_ids(const char *s, int32_t *ids, int cap, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "%s: --ids: bad number at \"%s\"\n", __func__, s);
            return -1;
        }
        if (*n == cap) {
            fprintf(stderr, "%s: --ids: more than %d ids\n", __func__, cap);
            return -1;
        }
        ids[(*n)++] = (int32_t)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s) {
            fprintf(stderr, "%s: --ids: expected ',' at \"%s\"\n", __func__, s);
            return -1;
        }
    }
    if (*n == 0) {
        fprintf(stderr, "%s: --ids: no ids\n", __func__);
        return -1;
    }
    return 0;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *libdir = NULL, *prompt = NULL, *ids_arg = NULL;
    const char *out_path = NULL, *variant = "haswell";
    int steps = 0, threads = 1, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--verbose")) {
            verbose = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "llamacpp_logits: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        if (!strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--libdir"))
            libdir = v;
        else if (!strcmp(a, "--prompt"))
            prompt = v;
        else if (!strcmp(a, "--ids"))
            ids_arg = v;
        else if (!strcmp(a, "--out"))
            out_path = v;
        else if (!strcmp(a, "--cpu-variant"))
            variant = v;
        else if (!strcmp(a, "--steps") || !strcmp(a, "--threads")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > (1 << 20)) {
                fprintf(stderr, "llamacpp_logits: %s wants 1..%d, not \"%s\"\n", a, 1 << 20, v);
                return 2;
            }
            if (a[2] == 's')
                steps = (int)n;
            else
                threads = (int)n;
        } else {
            fprintf(stderr, "llamacpp_logits: unknown argument %s\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!model_path || !libdir || !out_path || !steps || !prompt == !ids_arg) {
        usage(stderr);
        return 2;
    }
    /* The variant names a file in libdir: no path separators in it. */
    if (strchr(variant, '/') || strlen(variant) > 64) {
        fprintf(stderr, "llamacpp_logits: bad --cpu-variant \"%s\"\n", variant);
        return 2;
    }

    int32_t *ids = NULL, *gen = NULL, n_prompt = 0;
    float *dump = NULL;
    struct llama_model *model = NULL;
    struct llama_context *ctx = NULL;
    FILE *out = NULL;
    int rc = 1;

    llama_log_set(log_cb, &verbose);
    char lib[4096];
    if (snprintf(lib, sizeof lib, "%s/libggml-cpu-%s.so", libdir, variant) >= (int)sizeof lib) {
        fprintf(stderr, "llamacpp_logits: --libdir too long\n");
        return 2;
    }
    ggml_backend_reg_t reg = ggml_backend_load(lib);
    if (!reg) {
        fprintf(stderr, "llamacpp_logits: cannot load the CPU backend %s\n", lib);
        return 1;
    }
    llama_backend_init();

    double t0 = now_s();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "llamacpp_logits: llama.cpp cannot load %s\n", model_path);
        goto out;
    }
    double load_s = now_s() - t0;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    if (n_vocab <= 0) {
        fprintf(stderr, "llamacpp_logits: the model has no vocabulary\n");
        goto out;
    }

    if (ids_arg) {
        if (!(ids = malloc(MAX_IDS * sizeof *ids))) goto oom;
        if (parse_ids(ids_arg, ids, MAX_IDS, &n_prompt)) {
            rc = 2;
            goto out;
        }
    } else {
        size_t len = strlen(prompt);
        if (len > (size_t)INT32_MAX / 2) {
            fprintf(stderr, "llamacpp_logits: the prompt is too long\n");
            goto out;
        }
        /* About a token a byte at most (byte fallback), plus the specials
         * and a space prefix; a negative count is the size it needs. */
        int cap = (int)len + 8;
        if (!(ids = malloc((size_t)cap * sizeof *ids))) goto oom;
        n_prompt = llama_tokenize(vocab, prompt, (int32_t)len, ids, cap, true, false);
        if (n_prompt < 0 && n_prompt != INT32_MIN) {
            cap = -n_prompt;
            int32_t *bigger = realloc(ids, (size_t)cap * sizeof *ids);
            if (!bigger) goto oom;
            ids = bigger;
            n_prompt = llama_tokenize(vocab, prompt, (int32_t)len, ids, cap, true, false);
        }
        if (n_prompt <= 0) {
            fprintf(stderr, "llamacpp_logits: llama_tokenize returned %d\n", n_prompt);
            goto out;
        }
    }
    for (int i = 0; i < n_prompt; i++)
        if (ids[i] >= n_vocab) {
            fprintf(stderr, "llamacpp_logits: prompt id %d is past the vocabulary (%d)\n", ids[i], n_vocab);
            goto out;
        }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + steps + 16);
    cp.n_batch = (uint32_t)n_prompt; /* the prompt in one llama_decode */
    cp.n_ubatch = (uint32_t)n_prompt;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.offload_kqv = false;
    cp.op_offload = false;
    cp.no_perf = true;
    if (!(ctx = llama_init_from_model(model, cp))) {
        fprintf(stderr, "llamacpp_logits: llama_init_from_model failed\n");
        goto out;
    }

    gen = malloc((size_t)steps * sizeof *gen);
    dump = malloc((size_t)n_vocab * sizeof *dump);
    if (!gen || !dump) goto oom;
    if (!(out = fopen(out_path, "wb"))) {
        fprintf(stderr, "llamacpp_logits: cannot create %s\n", out_path);
        goto out;
    }
    /* Step 0 decodes the prompt; llama_batch_get_one asks for the last
     * token's logits only. Each later step decodes the previous argmax. */
    struct llama_batch batch = llama_batch_get_one(ids, n_prompt);
    double t1 = now_s();
    for (int s = 0; s < steps; s++) {
        int32_t d = llama_decode(ctx, batch);
        if (d != 0) {
            fprintf(stderr, "llamacpp_logits: llama_decode returned %d at step %d\n", d, s);
            goto out;
        }
        const float *lg = llama_get_logits_ith(ctx, -1);
        if (!lg) {
            fprintf(stderr, "llamacpp_logits: no logits at step %d\n", s);
            goto out;
        }
        memcpy(dump, lg, (size_t)n_vocab * sizeof *dump);
        if (fwrite(dump, sizeof *dump, (size_t)n_vocab, out) != (size_t)n_vocab) {
            fprintf(stderr, "llamacpp_logits: cannot write %s\n", out_path);
            goto out;
        }
        gen[s] = argmax(dump, n_vocab);
        batch = llama_batch_get_one(&gen[s], 1);
    }
    double decode_s = now_s() - t1;
    if (fclose(out)) {
        out = NULL;
        fprintf(stderr, "llamacpp_logits: cannot write %s\n", out_path);
        goto out;
    }
    out = NULL;

    printf("{\"prompt_ids\":[");
    for (int i = 0; i < n_prompt; i++) printf("%s%d", i ? "," : "", ids[i]);
    printf("],\"ids\":[");
    for (int i = 0; i < steps; i++) printf("%s%d", i ? "," : "", gen[i]);
    printf("],\"n_vocab\":%d,\"steps\":%d,\"load_s\":%.3f,\"decode_s\":%.3f,\"cpu_backend\":\"%s\","
           "\"llama_cpp\":\"%s\"}\n",
           n_vocab, steps, load_s, decode_s, variant, llama_version());
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "llamacpp_logits: out of memory\n");
out:
    if (out) fclose(out);
    free(dump);
    free(gen);
    free(ids);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
