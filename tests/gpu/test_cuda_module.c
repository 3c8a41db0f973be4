/* test_cuda_module.c - the CUDA backend is loaded on demand (backend.c):
 * a process on the CPU does not map it (nor the CUDA runtime and cuBLAS
 * under it), asking for "cuda" opens it from where it was built, and a
 * module that is missing or is not one is refused with its path, not a
 * crash. A model with a layer kind the module has no kernel for (qwen3moe's
 * and gpt-oss's experts) is refused by "cuda" naming it, and "auto" runs it
 * on the CPU; so is gpt-oss's attention (a window, sinks, an output bias)
 * on any architecture's layers, and lfm2's short convolutions.
 * Linked with the engine only (not libconfkv_cuda.so), as confkv and
 * confkvd are. Needs no GPU; on a machine with one, "cuda" and "auto" may
 * create the CUDA backend, and that is checked too. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "model.h"
#include "quant.h"

static model *g_m;

/* 1 when a mapping of this process names a file containing `needle`. */
static int mapped(const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static be_options options(void) {
    be_options o;
    memset(&o, 0, sizeof o);
    o.max_batch_tokens = 8;
    o.n_kv_blocks = 4;
    o.block_size = 16;
    o.n_threads = 1;
    return o;
}

static void test_cpu_maps_nothing(void) {
    be_options o = options();
    backend *b = NULL;
    char err[512] = "";
    CK_CHECK(mapped("libconfkv_cuda") == 0);
    CK_CHECK(be_new("cpu", g_m, &o, &b, err, sizeof err) == 0);
    CK_CHECK(b && !strcmp(b->ops->name, "cpu"));
    be_free(b);
    CK_CHECK(mapped("libconfkv_cuda") == 0 && mapped("libcublas") == 0 && mapped("libcudart") == 0);
}

static void test_auto(void) {
    be_options o = options();
    backend *b = NULL;
    char err[512] = "";
    CK_CHECK(be_new("auto", g_m, &o, &b, err, sizeof err) == 0);
    CK_CHECK(b != NULL);
    if (!b) return;
    /* backend.c never closes what it opened, so RTLD_NOLOAD tells whether
     * it found the driver */
    const int driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != NULL;
    if (!strcmp(b->ops->name, "cpu")) {
        if (!driver) CK_CHECK(mapped("libconfkv_cuda") == 0 && mapped("libcublas") == 0);
    } else {
        CK_CHECK(!strcmp(b->ops->name, "cuda") && driver);
    }
    be_free(b);
}

static void test_bad_module(void) {
    be_options o = options();
    backend *b = NULL;
    char err[512] = "", junk[] = "/tmp/confkv_cuda_module_XXXXXX";
    CK_CHECK(setenv("CONFKV_CUDA_MODULE", "/nonexistent/libconfkv_cuda.so", 1) == 0);
    CK_CHECK(be_new("cuda", g_m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
    CK_CHECK_MSG(strstr(err, "CONFKV_CUDA_MODULE=/nonexistent/libconfkv_cuda.so"), "err: %s", err);
    /* a file that is not a shared object: the loader's refusal, named */
    int fd = mkstemp(junk);
    CK_CHECK(fd >= 0);
    if (fd < 0) return;
    CK_CHECK(write(fd, "not an ELF file\n", 16) == 16);
    close(fd);
    CK_CHECK(setenv("CONFKV_CUDA_MODULE", junk, 1) == 0);
    err[0] = 0;
    CK_CHECK(be_new("cuda", g_m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
    CK_CHECK_MSG(strstr(err, "cannot load the CUDA backend") && strstr(err, junk), "err: %s", err);
    unlink(junk);
    unsetenv("CONFKV_CUDA_MODULE");
    CK_CHECK(mapped("libcublas") == 0);
}

/* Asking for "cuda" opens the module built beside this tree: it then runs
 * (a GPU) or says why not in its own words (no device), never "not found". */
static void test_cuda_opens_module(void) {
    be_options o = options();
    backend *b = NULL;
    char err[512] = "";
    int rc = be_new("cuda", g_m, &o, &b, err, sizeof err);
    CK_CHECK(mapped("libconfkv_cuda") == 1);
    if (rc == 0) {
        CK_CHECK(b && !strcmp(b->ops->name, "cuda"));
        be_free(b);
    } else {
        CK_CHECK(!b && err[0]);
        CK_CHECK_MSG(!strstr(err, "not found") && !strstr(err, "cannot load"), "err: %s", err);
    }
}

/* qwen3moe: no CUDA kernel for its experts, with a GPU or without. */
static void test_moe_refused(void) {
    char path[] = "/tmp/confkv_cuda_moe_XXXXXX", err[512] = "";
    int fd = mkstemp(path);
    CK_CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    synth_params sp = {.dim = 64,
                       .n_layers = 1,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 64,
                       .vocab_size = 400,
                       .ctx = 64,
                       .type = QUANT_F32,
                       .seed = 1,
                       .arch = ARCH_QWEN3MOE,
                       .n_expert = 4,
                       .n_expert_used = 2,
                       .expert_ffn = 32};
    model *m = NULL;
    CK_CHECK_MSG(!convert_synth(&sp, path, err, sizeof err) && !model_load(path, NULL, &m, err, sizeof err),
                 "%s", err);
    if (m) {
        be_options o = options();
        backend *b = NULL;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
        CK_CHECK_MSG(strstr(err, "layer kind moe has no CUDA kernel"), "err: %s", err);
        CK_CHECK(be_new("auto", m, &o, &b, err, sizeof err) == 0 && b && !strcmp(b->ops->name, "cpu"));
        be_free(b);
    }
    model_free(m);
    unlink(path);
}

/* gemma4: refused naming the first of its features (per-layer head
 * shapes), `auto` on the CPU; each of its other features, given by hand to
 * a llama model CUDA otherwise runs, refused by its own name. */
static void test_gemma4_refused(void) {
    char path[] = "/tmp/confkv_cuda_g4_XXXXXX", err[512] = "";
    int fd = mkstemp(path);
    CK_CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    synth_params sp = {.dim = 64,
                       .n_layers = 3,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 64,
                       .vocab_size = 400,
                       .ctx = 64,
                       .type = QUANT_F32,
                       .seed = 1,
                       .arch = ARCH_GEMMA4,
                       .head_dim = 16,
                       .swa_period = 3,
                       .n_swa = 8};
    model *m = NULL;
    be_options o = options();
    backend *b = NULL;
    CK_CHECK_MSG(!convert_synth(&sp, path, err, sizeof err) && !model_load(path, NULL, &m, err, sizeof err),
                 "%s", err);
    if (m) {
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
        CK_CHECK_MSG(strstr(err, "gemma4") && strstr(err, "per-layer head counts"), "err: %s", err);
        CK_CHECK(be_new("auto", m, &o, &b, err, sizeof err) == 0 && b && !strcmp(b->ops->name, "cpu"));
        be_free(b);
        b = NULL;
    }
    model_free(m);
    m = NULL;
    sp = (synth_params){.dim = 64,
                        .n_layers = 1,
                        .n_heads = 4,
                        .n_kv_heads = 2,
                        .hidden_dim = 64,
                        .vocab_size = 400,
                        .ctx = 64,
                        .type = QUANT_F32,
                        .seed = 1};
    CK_CHECK_MSG(!convert_synth(&sp, path, err, sizeof err) && !model_load(path, NULL, &m, err, sizeof err),
                 "%s", err);
    if (m) {
        static const float one[64] = {1};
        const model_config keep = m->cfg;
        m->cfg.v_norm = 1;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && strstr(err, "normed V"));
        m->cfg = keep;
        m->cfg.kq_div = 1;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && strstr(err, "unscaled"));
        m->cfg = keep;
        m->cfg.ffn_act = ARCH_ACT_GELU;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && strstr(err, "GELU"));
        m->cfg = keep;
        m->cfg.logit_softcap = 30;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED &&
                 strstr(err, "soft-capping"));
        m->cfg = keep;
        m->cfg.n_embd_pl = 64;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED &&
                 strstr(err, "per-layer embed"));
        m->cfg = keep;
        m->cfg.n_kv_shared = 1;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && strstr(err, "shared KV"));
        m->cfg = keep;
        m->layers[0].ffn_post_norm = (model_tensor){QUANT_F32, 64, one};
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && strstr(err, "norms after"));
        m->layers[0].ffn_post_norm = (model_tensor){0, 0, NULL};
        CK_CHECK(!b);
    }
    model_free(m);
    unlink(path);
}

/* gpt-oss: refused for its experts by name; its attention's window, sinks
 * and output bias refused on a model whose blocks CUDA has (a llama model
 * given them here by hand: no architecture in the table has them without
 * experts, and none may slip through if one comes to). */
static void test_gpt_oss_refused(void) {
    char path[] = "/tmp/confkv_cuda_oss_XXXXXX", err[512] = "";
    int fd = mkstemp(path);
    CK_CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    synth_params sp = {.dim = 64,
                       .n_layers = 2,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 64,
                       .vocab_size = 400,
                       .ctx = 64,
                       .type = QUANT_F32,
                       .seed = 1,
                       .arch = ARCH_GPT_OSS,
                       .n_expert = 4,
                       .n_expert_used = 2,
                       .expert_ffn = 32,
                       .n_swa = 8};
    model *m = NULL;
    be_options o = options();
    backend *b = NULL;
    CK_CHECK_MSG(!convert_synth(&sp, path, err, sizeof err) && !model_load(path, NULL, &m, err, sizeof err),
                 "%s", err);
    if (m) {
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
        CK_CHECK_MSG(strstr(err, "gpt-oss") && strstr(err, "layer kind moe has no CUDA kernel"), "err: %s",
                     err);
        CK_CHECK(be_new("auto", m, &o, &b, err, sizeof err) == 0 && b && !strcmp(b->ops->name, "cpu"));
        be_free(b);
        b = NULL;
    }
    model_free(m);
    m = NULL;
    sp = (synth_params){.dim = 64,
                        .n_layers = 1,
                        .n_heads = 4,
                        .n_kv_heads = 2,
                        .hidden_dim = 64,
                        .vocab_size = 400,
                        .ctx = 64,
                        .type = QUANT_F32,
                        .seed = 1};
    CK_CHECK_MSG(!convert_synth(&sp, path, err, sizeof err) && !model_load(path, NULL, &m, err, sizeof err),
                 "%s", err);
    if (m) {
        static const float sinks[4] = {1, 1, 1, 1};
        m->cfg.n_swa = 8;
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
        CK_CHECK_MSG(strstr(err, "sliding-window attention"), "err: %s", err);
        m->cfg.n_swa = 0;
        m->layers[0].sinks = (model_tensor){QUANT_F32, 4, sinks};
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
        CK_CHECK_MSG(strstr(err, "attention sinks"), "err: %s", err);
        m->layers[0].sinks = (model_tensor){0, 0, NULL};
    }
    model_free(m);
    unlink(path);
}

/* lfm2 and granitehybrid: refused by name for their recurrent layers
 * (short convolution, Mamba2: blocks the CUDA pass has not, and their
 * state); "auto" runs them on the CPU. */
static void hybrid_refused(int arch, const char *name, const char *why) {
    char path[] = "/tmp/confkv_cuda_hybrid_XXXXXX", err[512] = "";
    int fd = mkstemp(path);
    CK_CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    synth_params sp = {.dim = 64,
                       .n_layers = 3,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 64,
                       .vocab_size = 400,
                       .ctx = 64,
                       .type = QUANT_F32,
                       .seed = 1,
                       .arch = arch};
    model *m = NULL;
    be_options o = options();
    backend *b = NULL;
    CK_CHECK_MSG(!convert_synth(&sp, path, err, sizeof err) && !model_load(path, NULL, &m, err, sizeof err),
                 "%s", err);
    if (m) {
        CK_CHECK(be_new("cuda", m, &o, &b, err, sizeof err) == CK_EUNSUPPORTED && !b);
        CK_CHECK_MSG(strstr(err, name) && strstr(err, why), "err: %s", err);
        CK_CHECK(be_new("auto", m, &o, &b, err, sizeof err) == 0 && b && !strcmp(b->ops->name, "cpu"));
        be_free(b);
    }
    model_free(m);
    unlink(path);
}

static void test_lfm2_refused(void) { hybrid_refused(ARCH_LFM2, "lfm2", "shortconv has no CUDA kernel"); }

static void test_granitehybrid_refused(void) {
    hybrid_refused(ARCH_GRANITEHYBRID, "granitehybrid", "mamba2 has no CUDA kernel");
}

int main(void) {
    char err[256];
    if (access(ck_test_model_path("stories260K.bin"), R_OK)) {
        printf("skipped: no %s\n", ck_test_model_path("stories260K.bin"));
        return 77;
    }
    int rc = model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &g_m, err,
                        sizeof err);
    if (rc) {
        fprintf(stderr, "model_load: %s\n", err);
        return 1;
    }
    CK_RUN(test_cpu_maps_nothing);
    CK_RUN(test_bad_module);
    CK_RUN(test_auto);
    CK_RUN(test_cuda_opens_module);
    CK_RUN(test_moe_refused);
    CK_RUN(test_gpt_oss_refused);
    CK_RUN(test_lfm2_refused);
    CK_RUN(test_gemma4_refused);
    CK_RUN(test_granitehybrid_refused);
    model_free(g_m);
    return ck_test_summary();
}
