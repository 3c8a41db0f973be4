/* llamacpp_quantize.c - llama.cpp's quantizer, for the files confkv must read.
 *
 * Usage: llamacpp_quantize IN.gguf OUT.gguf FTYPE [--threads N]
 *   FTYPE  one of the names below (llama.h's LLAMA_FTYPE_MOSTLY_<FTYPE>)
 *
 * Calls the public llama_model_quantize (llama.h) with llama.cpp's default
 * parameters and the ftype: the same code as llama.cpp's `llama-quantize`
 * tool, so OUT has the per-tensor type mix that tool gives (Q4_K_M: q6_K
 * for attn_v, ffn_down and output, q4_K for the rest, ...). No importance
 * matrix: none of these ftypes needs one. IN is an f32 or f16 GGUF; rows
 * whose width is not a multiple of a K-quant's 256 fall back to another
 * type in llama.cpp, so tests make models whose widths are.
 *
 * Stdout: one JSON line {"ftype":"Q4_K_M","ftype_id":15,"bytes":N (OUT's
 * size),"quantize_s":S}. Exit 0, 1 when llama.cpp fails, 2 on a usage
 * error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "llama.h"

static const struct {
    const char *name;
    enum llama_ftype ftype;
} ftypes[] = {
    {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
    {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
    {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},
    {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},
    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S},
    {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L},
    {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
    {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
    {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},
    {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL},
    {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
    /* gpt-oss's own: 3-D expert tensors MXFP4, other matrices Q8_0 */
    {"MXFP4_MOE", LLAMA_FTYPE_MOSTLY_MXFP4_MOE},
};

/* llama.cpp logs every tensor it quantizes: errors only. */
static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void usage(FILE *f) {
    fprintf(f, "usage: llamacpp_quantize IN.gguf OUT.gguf FTYPE [--threads N]\n  FTYPE:");
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++) fprintf(f, " %s", ftypes[i].name);
    fputc('\n', f);
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    int threads = 1;
    if (argc == 6 && !strcmp(argv[4], "--threads")) {
        char *end;
        long n = strtol(argv[5], &end, 10);
        if (*end || n < 1 || n > 256) {
            fprintf(stderr, "llamacpp_quantize: --threads wants 1..256, not \"%s\"\n", argv[5]);
            return 2;
        }
        threads = (int)n;
    } else if (argc != 4) {
        usage(stderr);
        return 2;
    }
    const char *in = argv[1], *out = argv[2], *name = argv[3];
    size_t k = 0;
    while (k < sizeof ftypes / sizeof ftypes[0] && strcmp(ftypes[k].name, name)) k++;
    if (k == sizeof ftypes / sizeof ftypes[0]) {
        fprintf(stderr, "llamacpp_quantize: unknown FTYPE %s\n", name);
        usage(stderr);
        return 2;
    }

    llama_log_set(log_cb, NULL);
    llama_backend_init();
    struct llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = ftypes[k].ftype;
    qp.nthread = threads;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint32_t rc = llama_model_quantize(in, out, &qp);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    llama_backend_free();
    if (rc != 0) {
        fprintf(stderr, "llamacpp_quantize: llama_model_quantize(%s -> %s, %s) returned %u\n", in, out, name,
                rc);
        return 1;
    }
    struct stat st;
    if (stat(out, &st) != 0) {
        fprintf(stderr, "llamacpp_quantize: no %s after quantizing\n", out);
        return 1;
    }
    printf("{\"ftype\":\"%s\",\"ftype_id\":%d,\"bytes\":%lld,\"quantize_s\":%.3f}\n", name,
           (int)ftypes[k].ftype, (long long)st.st_size,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
