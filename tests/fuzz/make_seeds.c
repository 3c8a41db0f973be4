/* make_seeds.c - writes the binary seed inputs of tests/fuzz/corpus/ with
 * the project's own writers (gguf_writer, convert_synth, coldfmt_encode,
 * tpl_encode, sess_save), so the seeds are what confkv itself produces.
 *
 * Usage: fuzz_make_seeds CORPUS_DIR   (writes into CORPUS_DIR/<target>/;
 * the folders must exist). The text seeds are plain files in the
 * repository; ops/scripts/fuzz.sh does not need this program. Every seed
 * carries the harness's leading control byte(s) where the harness has one
 * (fuzz_<target>.c says which). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_err.h"
#include "cold.h"
#include "coldfmt.h"
#include "convert.h"
#include "gguf.h"
#include "quant.h"
#include "sess.h"
#include "tpl.h"

static const char *dir;

static void put(const char *target, const char *name, const void *prefix, size_t plen, const void *data,
                size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || (plen && fwrite(prefix, 1, plen, f) != plen) || (len && fwrite(data, 1, len, f) != len) ||
        fclose(f)) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(1);
    }
}

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void gguf_seeds(void) {
    char err[512], tmp[] = "/tmp/confkv-seed-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) exit(1);
    close(fd);
    /* one of each value type, string arrays, and three tensors */
    gguf_writer *w;
    if (gguf_writer_new(&w)) exit(1);
    uint8_t u8 = 7;
    int16_t i16 = -3;
    gguf_writer_set_val(w, "t.u8", GGUF_TYPE_UINT8, &u8);
    gguf_writer_set_val(w, "t.i16", GGUF_TYPE_INT16, &i16);
    gguf_writer_set_u32(w, "t.u32", 42);
    gguf_writer_set_i32(w, "t.i32", -42);
    gguf_writer_set_u64(w, "t.u64", 1ull << 40);
    gguf_writer_set_i64(w, "t.i64", -(1ll << 40));
    gguf_writer_set_f32(w, "t.f32", 0.5f);
    gguf_writer_set_f64(w, "t.f64", -2.25);
    gguf_writer_set_bool(w, "t.bool", 1);
    gguf_writer_set_str(w, "general.architecture", "llama");
    const char *strs[] = {"a", "bc", ""};
    gguf_writer_set_arr_str(w, "t.strs", strs, NULL, 3);
    int32_t ints[4] = {1, -2, 3, -4};
    gguf_writer_set_arr(w, "t.ints", GGUF_TYPE_INT32, ints, 4);
    float f[64];
    for (int i = 0; i < 64; i++) f[i] = (float)i / 8;
    uint64_t ne1[1] = {8}, ne2[2] = {8, 4}, ne3[3] = {32, 1, 2};
    gguf_writer_add_tensor(w, "a", QUANT_F32, 1, ne1, f);
    gguf_writer_add_tensor(w, "b.weight", QUANT_F32, 2, ne2, f);
    uint64_t qb = 0;
    quant_row_bytes(QUANT_Q8_0, 32, &qb);
    unsigned char q[2 * 64] = {0};
    if (qb * 2 <= sizeof q) gguf_writer_add_tensor(w, "c.q8", QUANT_Q8_0, 3, ne3, q);
    if (gguf_writer_write(w, tmp, err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    gguf_writer_free(w);
    size_t len;
    void *b = slurp(tmp, &len);
    put("gguf", "types.gguf", NULL, 0, b, len);
    free(b);

    /* a tensor of each quantized weight type (one or two blocks of
     * patterned bytes; any bytes are valid blocks): their row sizes */
    if (gguf_writer_new(&w)) exit(1);
    static const int qt[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1,   QUANT_Q2_K,   QUANT_Q3_K,
                             QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K, QUANT_IQ4_NL, QUANT_IQ4_XS, QUANT_MXFP4};
    static unsigned char qbytes[2 * 210];
    for (size_t i = 0; i < sizeof qbytes; i++) qbytes[i] = (unsigned char)(i * 37 + 11);
    for (size_t i = 0; i < sizeof qt / sizeof qt[0]; i++) {
        uint64_t ne[2] = {(uint64_t)quant_block_size(qt[i]), 1 + i % 2};
        gguf_writer_add_tensor(w, quant_type_name(qt[i]), qt[i], 2, ne, qbytes);
    }
    if (gguf_writer_write(w, tmp, err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    gguf_writer_free(w);
    b = slurp(tmp, &len);
    put("gguf", "types-quant.gguf", NULL, 0, b, len);
    free(b);

    /* tiny models: the loader's input, and the container's too */
    synth_params ps[] = {
        {.dim = 8,
         .n_layers = 1,
         .n_heads = 2,
         .n_kv_heads = 1,
         .hidden_dim = 16,
         .vocab_size = 354,
         .ctx = 16,
         .type = QUANT_F32,
         .seed = 1},
        {.dim = 32,
         .n_layers = 2,
         .n_heads = 4,
         .n_kv_heads = 2,
         .hidden_dim = 32,
         .vocab_size = 360,
         .ctx = 8,
         .type = QUANT_Q8_0,
         .seed = 2},
        {.dim = 16,
         .n_layers = 1,
         .n_heads = 2,
         .n_kv_heads = 2,
         .hidden_dim = 8,
         .vocab_size = 354,
         .ctx = 4,
         .type = QUANT_F16,
         .seed = 3},
        {.dim = 32, /* MXFP4 matrices; hidden 48: ffn_down's rows are not whole blocks (f16) */
         .n_layers = 1,
         .n_heads = 2,
         .n_kv_heads = 1,
         .hidden_dim = 48,
         .vocab_size = 354,
         .ctx = 8,
         .type = QUANT_MXFP4,
         .seed = 4},
        /* qwen3moe: the expert keys and the 3-D expert tensors */
        {.dim = 8,
         .n_layers = 1,
         .n_heads = 2,
         .n_kv_heads = 1,
         .hidden_dim = 16,
         .vocab_size = 354,
         .ctx = 16,
         .type = QUANT_F32,
         .seed = 4,
         .arch = ARCH_QWEN3MOE,
         .n_expert = 4,
         .n_expert_used = 2,
         .expert_ffn = 8},
        {.dim = 32,
         .n_layers = 2,
         .n_heads = 2,
         .n_kv_heads = 1,
         .hidden_dim = 32,
         .vocab_size = 354,
         .ctx = 8,
         .type = QUANT_Q8_0,
         .seed = 5,
         .arch = ARCH_QWEN3MOE,
         .n_expert = 3,
         .n_expert_used = 1,
         .expert_ffn = 32},
        /* gpt-oss: the sliding-window keys, sinks, the output, router and
         * expert biases; f32, and MXFP4 as llama.cpp's MXFP4_MOE (experts
         * MXFP4, the other matrices q8_0) */
        {.dim = 8,
         .n_layers = 2,
         .n_heads = 2,
         .n_kv_heads = 1,
         .hidden_dim = 16,
         .vocab_size = 354,
         .ctx = 16,
         .type = QUANT_F32,
         .seed = 6,
         .arch = ARCH_GPT_OSS,
         .n_expert = 4,
         .n_expert_used = 2,
         .expert_ffn = 8,
         .n_swa = 4},
        {.dim = 32,
         .n_layers = 2,
         .n_heads = 2,
         .n_kv_heads = 1,
         .hidden_dim = 32,
         .vocab_size = 354,
         .ctx = 8,
         .type = QUANT_MXFP4,
         .seed = 7,
         .arch = ARCH_GPT_OSS,
         .n_expert = 3,
         .n_expert_used = 2,
         .expert_ffn = 32,
         .n_swa = 3},
    };
    const char *names[] = {"synth-f32.gguf",         "synth-q8_0.gguf",         "synth-f16.gguf",
                           "synth-mxfp4.gguf",       "synth-qwen3moe-f32.gguf", "synth-qwen3moe-q8_0.gguf",
                           "synth-gpt-oss-f32.gguf", "synth-gpt-oss-mxfp4.gguf"};
    for (int i = 0; i < (int)(sizeof ps / sizeof ps[0]); i++) {
        if (convert_synth(&ps[i], tmp, err, sizeof err)) {
            fprintf(stderr, "make_seeds: %s\n", err);
            exit(1);
        }
        b = slurp(tmp, &len);
        put("model", names[i], NULL, 0, b, len);
        if (i == 0) put("gguf", names[i], NULL, 0, b, len);
        free(b);
    }
    remove(tmp);
}

/* llama2.c files: a tokenizer of n pieces, and a checkpoint for vocab 512. */
static void llama2c_seeds(void) {
    for (int n = 3; n <= 300; n += 297) {
        size_t cap = 4 + (size_t)n * 32, len = 0;
        unsigned char *b = malloc(cap);
        int32_t max_len = 6;
        memcpy(b, &max_len, 4);
        len = 4;
        for (int i = 0; i < n; i++) {
            char piece[16];
            int pl = i < 3 ? snprintf(piece, sizeof piece, "%s",
                                      i == 0   ? "<unk>"
                                      : i == 1 ? "\n<s>\n"
                                               : "\n</s>\n")
                     : i < 259
                         ? snprintf(piece, sizeof piece, "<0x%02X>", i - 3)
                         : snprintf(piece, sizeof piece, "%c%c", 'a' + (i - 259) % 26, i % 2 ? ' ' : 'e');
            float sc = (float)-i;
            int32_t l32 = pl;
            memcpy(b + len, &sc, 4);
            memcpy(b + len + 4, &l32, 4);
            memcpy(b + len + 8, piece, (size_t)pl);
            len += 8 + (size_t)pl;
        }
        uint16_t v = (uint16_t)(n - 1); /* the harness adds 1 */
        put("tokfile", n == 3 ? "vocab3.bin" : "vocab300.bin", &v, 2, b, len);
        free(b);
    }
    /* dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 512, seq 4 */
    for (int tied = 1; tied >= 0; tied--) {
        int32_t h[7] = {8, 16, 1, 2, 1, tied ? 512 : -512, 4};
        uint64_t D = 8, F = 16, L = 1, KV = 4, V = 512, rope = 4 * 2;
        uint64_t nf = V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D + 3 * L * F * D + D +
                      2 * rope + (tied ? 0 : V * D);
        size_t len = 28 + 4 * nf;
        unsigned char *b = calloc(1, len);
        memcpy(b, h, 28);
        for (uint64_t i = 0; i < nf; i++) {
            float x = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
            memcpy(b + 28 + 4 * i, &x, 4);
        }
        put("llama2c", tied ? "tiny-tied.bin" : "tiny-untied.bin", NULL, 0, b, len);
        free(b);
    }
}

static void cold_seeds(void) {
    static const kvq_shape shapes[2] = {{2, 4, 8}, {1, 16, 32}};
    coldfmt *cf;
    if (coldfmt_new(&cf)) exit(1);
    for (int ctl = 0; ctl < 4; ctl++) {
        coldfmt_meta m;
        memset(&m, 0, sizeof m);
        memcpy(m.fingerprint, "0123456789abcdef", 17);
        m.shape = shapes[ctl & 1];
        m.dtype = ctl & 2 ? COLDFMT_INT8 : COLDFMT_F32;
        m.n_tokens = m.shape.block_size / 2;
        m.logical = ctl;
        m.tag = 0x1122334455667788ull;
        size_t raw = coldfmt_payload_bytes(&m.shape, m.dtype), cap = coldfmt_bound(raw), len = 0;
        unsigned char *p = calloc(1, raw), *v = malloc(cap);
        if (m.dtype == COLDFMT_F32) {
            float *x = (float *)(void *)p;
            for (size_t i = 0; i < raw / 4; i++) x[i] = (float)(i % 7) - 3;
        } else {
            float *x = calloc(1, kvq_f32_bytes(&m.shape));
            for (size_t i = 0; i < kvq_f32_bytes(&m.shape) / 4; i++) x[i] = (float)(i % 5) - 2;
            kvq_quantize(&m.shape, x, m.n_tokens, p);
            free(x);
        }
        if (coldfmt_encode(cf, &m, p, raw, v, cap, &len)) exit(1);
        unsigned char c = (unsigned char)(ctl | 4); /* the tag checked */
        char name[64];
        snprintf(name, sizeof name, "%s-shape%d.ckvb", m.dtype == COLDFMT_F32 ? "f32" : "int8", ctl & 1);
        put("coldblock", name, &c, 1, v, len);
        free(p);
        free(v);
    }
    coldfmt_free(cf);
}

static void got(void *ud, int status, const void *data, size_t len) {
    if (status) return;
    unsigned char c = 0;
    put("session", ud, &c, 1, data, len);
}

static void session_template_seeds(void) {
    cold_store *cold;
    if (cold_mem_new(&cold)) exit(1);
    sess_config c = {
        .max_sessions = 4, .max_tokens = 64, .vocab = 512, .fingerprint = "0123456789abcdef", .cold = cold};
    sess_store *s;
    if (sess_new(&c, &s)) exit(1);
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 37) % 512;
    sess_save(s, "a", ids, 1);
    sess_save(s, "b", ids, 64);
    for (int i = 0; i < 10; i++) cold_poll(cold);
    cold->ops->get(cold, "sess:a", got, "one-token.ckss");
    cold->ops->get(cold, "sess:b", got, "64-tokens.ckss");
    for (int i = 0; i < 10; i++) cold_poll(cold);
    sess_free(s);
    cold_free(cold);

    const char *texts[] = {"", "You are a helpful storyteller.\n", "Once upon a time\x00 there was \xff."};
    const size_t lens[] = {0, 31, 33};
    const char *names[] = {"fz", "fz", "system.v1:a-b_c"};
    for (int i = 0; i < 3; i++) {
        char *rec;
        size_t len;
        if (tpl_encode(names[i], 1700000000000ll + i, texts[i], lens[i], &rec, &len)) exit(1);
        unsigned char ctl = i < 2 ? 2 : 0;
        char name[32];
        snprintf(name, sizeof name, "record%d.tpl", i);
        put("template", name, &ctl, 1, rec, len);
        free(rec);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
        return 2;
    }
    dir = argv[1];
    gguf_seeds();
    llama2c_seeds();
    cold_seeds();
    session_template_seeds();
    return 0;
}
