/* llamacpp_bench.c - llama.cpp's decode speed on a file, the loop `confkv
 * bench` runs, for ops/scripts/bench_vs_llamacpp.sh.
 *
 * Against llama.cpp's public C API only (llama.h, ggml-backend.h): B
 * sequences each get an untimed prefill of P tokens (one llama_decode of
 * all B x P, the last token of each asking for logits), then G timed decode
 * steps of B tokens, one a sequence, each sequence's next token the argmax
 * of its logits (lowest id on ties). Token ids are confkv bench's: prompt
 * token i of sequence s is 3 + (131 s + 17 i) mod (V - 3), the first
 * decoded token of s is 3 + s mod (V - 3).
 *
 * llama.cpp runs with its defaults, as a user gets it: weight repacking for
 * the CPU (use_extra_bufts) on, flash attention and KV types as it chooses;
 * one CPU backend variant: by default (--cpu-variant best) the one llama.cpp
 * itself would load on this CPU, the highest ggml_backend_score() of the
 * libggml-cpu-*.so in --libdir (0: the CPU lacks its instructions), as
 * ggml_backend_load_best does; or one by name (haswell: AVX2 + FMA + F16C;
 * a variant the CPU lacks would die of SIGILL). "cpu_backend" in the
 * output names the one loaded.
 * --no-repack turns the repacking off. --poll N (0..100) runs llama.cpp's
 * threads from a threadpool of that polling level (llama.cpp's default is
 * 50: its threads spin between ops; 0 sleeps, as confkv's OpenMP threads
 * do with OMP_WAIT_POLICY=passive; on a host whose cores are shared with
 * other work, spinning threads can lose their cores for whole time slices).
 *
 * Stdout: one JSON line {"batch":B,"threads":T,"prompt_tokens":P,
 * "gen_tokens":G,"decode_s":S,"tokens_per_s_aggregate":B*G/S,
 * "tokens_per_s_per_sequence":G/S,"prefill_s":S,"cpu_backend":"...",
 * "repack":0|1,"poll":N or -1 (the default),"llama_cpp":"<llama_version()>","last_ids":[...]}. Exit 0,
 * 1 on a runtime failure, 2 on a usage error. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"

static void usage(FILE *f) {
    fprintf(f, "usage: llamacpp_bench --model M.gguf --libdir DIR [--batch B] [--prompt-tokens P]\n"
               "                      [--gen-tokens G] [--threads T] [--cpu-variant NAME] [--no-repack]\n"
               "                      [--poll 0..100]\n"
               "                      [--verbose]\n"
               "defaults: batch 1, 32 prompt tokens, 128 generated, 1 thread, variant best (the one\n"
               "llama.cpp would load on this CPU; or a libggml-cpu-NAME.so's NAME, e.g. haswell)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    const int *verbose = ud;
    if (*verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The CPU variant llama.cpp would load here: the libggml-cpu-NAME.so in
 * libdir whose ggml_backend_score() is highest (each library's own check of
 * this CPU's features; 0 where it cannot run). NAME into out; -1 when none
 * scores above 0. */
static int best_variant(const char *libdir, char *out, size_t len) {
    DIR *d = opendir(libdir);
    if (!d) return -1;
    int best = 0;
    const struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name, *pre = "libggml-cpu-";
        const size_t nl = strlen(n), pl = strlen(pre);
        if (nl <= pl + 3 || strncmp(n, pre, pl) || strcmp(n + nl - 3, ".so") || nl - pl - 3 >= len) continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", libdir, n) >= (int)sizeof path) continue;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
        const int sc = score ? score() : 0;
        if (sc > best) {
            best = sc;
            memcpy(out, n + pl, nl - pl - 3);
            out[nl - pl - 3] = 0;
        }
        dlclose(h);
    }
    closedir(d);
    return best > 0 ? 0 : -1;
}

/* A positive int argument in [1, max]; -1 after a message. */
static int int_arg(const char *name, const char *v, long max) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > max) {
        fprintf(stderr, "llamacpp_bench: %s wants 1..%ld, not \"%s\"\n", name, max, v);
        return -1;
    }
    return (int)n;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *libdir = NULL, *variant = "best";
    char best[65];
    int batch = 1, prompt = 32, gen = 128, threads = 1, verbose = 0, repack = 1, poll = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--verbose")) {
            verbose = 1;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            repack = 0;
            continue;
        }
        if (!v) {
            fprintf(stderr, "llamacpp_bench: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        int *num = !strcmp(a, "--batch")           ? &batch
                   : !strcmp(a, "--prompt-tokens") ? &prompt
                   : !strcmp(a, "--gen-tokens")    ? &gen
                   : !strcmp(a, "--threads")       ? &threads
                                                   : NULL;
        if (!strcmp(a, "--poll")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 0 || n > 100) {
                fprintf(stderr, "llamacpp_bench: --poll wants 0..100, not \"%s\"\n", v);
                return 2;
            }
            poll = (int)n;
        } else if (num) {
            if ((*num = int_arg(a, v, 1 << 16)) < 0) return 2;
        } else if (!strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--libdir"))
            libdir = v;
        else if (!strcmp(a, "--cpu-variant"))
            variant = v;
        else {
            fprintf(stderr, "llamacpp_bench: unknown argument %s\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!model_path || !libdir) {
        usage(stderr);
        return 2;
    }
    if (strchr(variant, '/') || strlen(variant) > 64) {
        fprintf(stderr, "llamacpp_bench: bad --cpu-variant \"%s\"\n", variant);
        return 2;
    }
    if (!strcmp(variant, "best")) {
        if (best_variant(libdir, best, sizeof best)) {
            fprintf(stderr, "llamacpp_bench: no libggml-cpu-*.so in %s runs on this CPU\n", libdir);
            return 1;
        }
        variant = best;
    }
    if ((long)batch * prompt > (1L << 24)) {
        fprintf(stderr, "llamacpp_bench: batch x prompt tokens too large\n");
        return 2;
    }

    struct llama_model *model = NULL;
    struct llama_context *ctx = NULL;
    struct ggml_threadpool *tp = NULL;
    typedef struct ggml_threadpool *(*tp_new_fn)(struct ggml_threadpool_params *);
    typedef void (*tp_free_fn)(struct ggml_threadpool *);
    tp_free_fn tp_free = NULL;
    struct llama_batch bt = {0};
    int have_batch = 0, rc = 1;
    int32_t *next = NULL;
    llama_log_set(log_cb, &verbose);
    char lib[4096];
    if (snprintf(lib, sizeof lib, "%s/libggml-cpu-%s.so", libdir, variant) >= (int)sizeof lib) {
        fprintf(stderr, "llamacpp_bench: --libdir too long\n");
        return 2;
    }
    ggml_backend_reg_t reg = ggml_backend_load(lib);
    if (!reg) {
        fprintf(stderr, "llamacpp_bench: cannot load the CPU backend %s\n", lib);
        return 1;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = repack != 0;
    if (!(model = llama_model_load_from_file(model_path, mp))) {
        fprintf(stderr, "llamacpp_bench: llama.cpp cannot load %s\n", model_path);
        goto out;
    }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (V <= 3) {
        fprintf(stderr, "llamacpp_bench: vocabulary of %d tokens\n", V);
        goto out;
    }
    struct llama_context_params cp = llama_context_default_params();
    const int n_tok = batch * prompt > batch ? batch * prompt : batch;
    cp.n_ctx = (uint32_t)(batch * (prompt + gen + 8));
    cp.n_batch = (uint32_t)n_tok;
    cp.n_seq_max = (uint32_t)batch;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    if (!(ctx = llama_init_from_model(model, cp))) {
        fprintf(stderr, "llamacpp_bench: llama_init_from_model failed\n");
        goto out;
    }
    if (poll >= 0) { /* the CPU backend's own entry points, by name (as llama.cpp's tools) */
        tp_new_fn tp_new = (tp_new_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
        tp_free = (tp_free_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free");
        struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
        tpp.poll = (uint32_t)poll;
        if (!tp_new || !tp_free || !(tp = tp_new(&tpp))) {
            fprintf(stderr, "llamacpp_bench: cannot make a threadpool (poll %d)\n", poll);
            goto out;
        }
        llama_attach_threadpool(ctx, tp, tp);
    }
    bt = llama_batch_init(n_tok, 0, 1);
    have_batch = 1;
    if (!(next = malloc((size_t)batch * sizeof *next))) {
        fprintf(stderr, "llamacpp_bench: out of memory\n");
        goto out;
    }
    /* prefill, untimed */
    double t0 = now_s();
    bt.n_tokens = 0;
    for (int s = 0; s < batch; s++)
        for (int i = 0; i < prompt; i++) {
            const int k = bt.n_tokens++;
            bt.token[k] = (int32_t)(3 + ((long)s * 131 + (long)i * 17) % (V - 3));
            bt.pos[k] = i;
            bt.n_seq_id[k] = 1;
            bt.seq_id[k][0] = s;
            bt.logits[k] = i == prompt - 1;
        }
    int32_t d = llama_decode(ctx, bt);
    if (d) {
        fprintf(stderr, "llamacpp_bench: prefill llama_decode returned %d\n", d);
        goto out;
    }
    const double prefill_s = now_s() - t0;
    for (int s = 0; s < batch; s++) next[s] = 3 + s % (V - 3);
    t0 = now_s();
    for (int step = 0; step < gen; step++) {
        bt.n_tokens = batch;
        for (int s = 0; s < batch; s++) {
            bt.token[s] = next[s];
            bt.pos[s] = prompt + step;
            bt.n_seq_id[s] = 1;
            bt.seq_id[s][0] = s;
            bt.logits[s] = 1;
        }
        if ((d = llama_decode(ctx, bt))) {
            fprintf(stderr, "llamacpp_bench: llama_decode returned %d at step %d\n", d, step);
            goto out;
        }
        for (int s = 0; s < batch; s++) {
            const float *lg = llama_get_logits_ith(ctx, s);
            if (!lg) {
                fprintf(stderr, "llamacpp_bench: no logits for sequence %d at step %d\n", s, step);
                goto out;
            }
            next[s] = argmax(lg, V);
        }
    }
    const double decode_s = now_s() - t0;
    printf("{\"batch\":%d,\"threads\":%d,\"prompt_tokens\":%d,\"gen_tokens\":%d,\"decode_s\":%.6f,"
           "\"tokens_per_s_aggregate\":%.3f,\"tokens_per_s_per_sequence\":%.3f,\"prefill_s\":%.6f,"
           "\"cpu_backend\":\"%s\",\"repack\":%d,\"poll\":%d,\"llama_cpp\":\"%s\",\"last_ids\":[",
           batch, threads, prompt, gen, decode_s, batch * (double)gen / decode_s, gen / decode_s, prefill_s,
           variant, repack, poll, llama_version());
    for (int s = 0; s < batch && s < 8; s++) printf("%s%d", s ? "," : "", next[s]);
    printf("]}\n");
    rc = 0;
out:
    free(next);
    if (have_batch) llama_batch_free(bt);
    llama_free(ctx);
    if (tp) tp_free(tp);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
