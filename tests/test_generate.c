/* test_generate.c - greedy generation reproduces the llama2.c oracle of
 * ../shared/models/README.md token for token: from the llama2.c files, from
 * a GGUF conversion (f32), and the f16/q8_0 conversions report agreement. */
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "gen.h"
#include "kv.h"
#include "model.h"
#include "quant.h"

/* The oracle text: the first fenced block after "Greedy from BOS" in the
 * shared README (read at run time, so the test follows the shared file). */
static char *read_oracle(void) {
    FILE *f = fopen(ck_test_model_path("README.md"), "r");
    if (!f) return NULL;
    static char line[4096];
    char *out = calloc(1, 65536);
    int state = 0;
    size_t n = 0;
    while (out && fgets(line, sizeof line, f)) {
        if (state == 0 && !strncmp(line, "Greedy from BOS", 15))
            state = 1;
        else if (state == 1 && !strncmp(line, "```", 3))
            state = 2;
        else if (state == 2 && !strncmp(line, "```", 3))
            break;
        else if (state == 2) {
            size_t l = strlen(line);
            if (n + l < 65535) memcpy(out + n, line, l), n += l;
        }
    }
    fclose(f);
    if (n && out[n - 1] == '\n') out[--n] = 0; /* the program's final newline */
    return out;
}

/* Greedy completion of `prompt` with `max_tokens`, into r. */
static int greedy(const model *m, const char *prompt, int max_tokens, gen_result *r) {
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = 64, .n_kv_blocks = 32, .block_size = 16, .n_threads = 1};
    int rc = be_cpu_new(m, &o, &b, err, sizeof err);
    if (rc) return rc;
    kv_pool pool;
    kv_pool_init(&pool, 32, 16);
    gen_ctx *g = NULL;
    int32_t ids[512];
    int n = 0;
    rc = tok_encode(m->tok, prompt, strlen(prompt), 1, ids, 512, &n);
    if (!rc) rc = gen_new(m, b, &pool, 0, &g);
    gen_params p;
    gen_params_default(&p);
    p.samp.temperature = 0;
    p.max_tokens = max_tokens;
    p.want_trace = 1;
    if (!rc) rc = gen_run(g, ids, n, &p, r);
    gen_free(g);
    if (kv_pool_used(&pool) != 0) rc = CK_ESTATE; /* every block came back */
    kv_pool_free(&pool);
    be_free(b);
    return rc;
}

static model *load(void) {
    char err[256];
    model *m = NULL;
    if (model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                   sizeof err))
        fprintf(stderr, "%s\n", err);
    return m;
}

static void test_oracle_llama2c(void) {
    char *oracle = read_oracle();
    CK_CHECK(oracle && strlen(oracle) > 500);
    model *m = load();
    CK_CHECK(m);
    gen_result r;
    /* llama2.c's 256 steps from BOS print 256 tokens. */
    CK_CHECK(greedy(m, "", 256, &r) == 0);
    CK_CHECK(r.n_tokens == 256);
    CK_CHECK_MSG(r.text_len == strlen(oracle) && !memcmp(r.text, oracle, r.text_len), "got:\n%s", r.text);
    gen_result_free(&r);
    /* With the prompt, the prompt text plus completion is the same text. */
    CK_CHECK(greedy(m, "Once upon a time", 256 - 4, &r) == 0);
    CK_CHECK(r.n_prompt == 5);
    const char *p = "Once upon a time";
    CK_CHECK(!strncmp(oracle, p, strlen(p)));
    CK_CHECK_MSG(!strcmp(r.text, oracle + strlen(p)), "got:\n%s", r.text);
    /* The trace holds sane probabilities. */
    for (int i = 0; i < r.n_tokens; i++) {
        CK_CHECK(r.trace[i].pmax > 0 && r.trace[i].pmax <= 1.0f + 1e-6f);
        CK_CHECK(r.trace[i].gap >= 0 && r.trace[i].gap <= r.trace[i].pmax);
        CK_CHECK(r.trace[i].entropy >= 0 && r.trace[i].entropy <= logf(512.0f) + 1e-3f);
    }
    gen_result_free(&r);
    model_free(m);
    free(oracle);
}

static void test_oracle_gguf(void) {
    char *oracle = read_oracle();
    CK_CHECK(oracle);
    model *m = load();
    CK_CHECK(m);
    gen_result ref;
    CK_CHECK(greedy(m, "", 256, &ref) == 0);
    char dir[] = "/tmp/confkv-gen-XXXXXX";
    CK_CHECK(mkdtemp(dir));
    int types[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char path[256], err[256];
        snprintf(path, sizeof path, "%s/m.gguf", dir);
        CK_CHECK_MSG(convert_write_gguf(m, types[i], path, err, sizeof err) == 0, "%s", err);
        model *g = NULL;
        CK_CHECK_MSG(model_load(path, NULL, &g, err, sizeof err) == 0, "%s", err);
        CK_CHECK(g->stop_on_bos == 1 && g->cfg.vocab_size == 512);
        gen_result r;
        CK_CHECK(greedy(g, "", 256, &r) == 0);
        int agree = 0;
        while (agree < r.n_tokens && agree < ref.n_tokens && r.tokens[agree] == ref.tokens[agree]) agree++;
        fprintf(stderr, "  gguf %-5s greedy tokens agreeing with the llama2.c oracle: %d / %d\n",
                quant_type_name(types[i]), agree, ref.n_tokens);
        if (types[i] == QUANT_F32) {
            CK_CHECK(agree == ref.n_tokens && r.n_tokens == ref.n_tokens);
            CK_CHECK(!strcmp(r.text, oracle));
        }
        gen_result_free(&r);
        model_free(g);
        unlink(path);
    }
    rmdir(dir);
    gen_result_free(&ref);
    model_free(m);
    free(oracle);
}

/* Stop strings cut the text before them and finish with "stop". */
static void test_stop_string(void) {
    model *m = load();
    CK_CHECK(m);
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = 64, .n_kv_blocks = 32, .block_size = 16, .n_threads = 1};
    CK_CHECK(be_cpu_new(m, &o, &b, err, sizeof err) == 0);
    kv_pool pool;
    kv_pool_init(&pool, 32, 16);
    gen_ctx *g = NULL;
    CK_CHECK(gen_new(m, b, &pool, 0, &g) == 0);
    int32_t bos = 1;
    gen_params p;
    gen_params_default(&p);
    p.samp.temperature = 0;
    p.max_tokens = 200;
    p.n_stop = 1;
    p.stop[0] = "Lily";
    gen_result r;
    CK_CHECK(gen_run(g, &bos, 1, &p, &r) == 0);
    CK_CHECK(r.finish == GEN_FINISH_STOP);
    CK_CHECK_MSG(!strcmp(r.text, "Once upon a time, there was a little girl named "), "got '%s'", r.text);
    gen_result_free(&r);
    /* max_tokens ends with "length". */
    p.n_stop = 0;
    p.max_tokens = 3;
    CK_CHECK(gen_run(g, &bos, 1, &p, &r) == 0);
    CK_CHECK(r.finish == GEN_FINISH_LENGTH && r.n_tokens == 3);
    gen_result_free(&r);
    gen_free(g);
    CK_CHECK(kv_pool_used(&pool) == 0);
    kv_pool_free(&pool);
    be_free(b);
    model_free(m);
}

int main(void) {
    CK_RUN(test_oracle_llama2c);
    CK_RUN(test_oracle_gguf);
    CK_RUN(test_stop_string);
    return ck_test_summary();
}
