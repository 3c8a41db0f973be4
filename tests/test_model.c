/* test_model.c - malformed model files are refused with a clear message and
 * no crash: truncated llama2.c checkpoints, absurd dimensions, GGUF models
 * with missing tensors, wrong shapes, unknown architectures. (The GGUF
 * container's truncations and mutations are in test_gguf_malformed.c.) */
#include <stdlib.h>
#include <unistd.h>

#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"

static char dir[64];

static const char *tmp(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc((size_t)l);
    if (p && fread(p, 1, (size_t)l, f) != (size_t)l) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)l;
    return p;
}

/* Expect a load failure with a message. */
static int refused(const char *path, const char *tok, const char *needle) {
    char err[512] = "";
    model *m = NULL;
    int rc = model_load(path, tok, &m, err, sizeof err);
    if (rc == 0) {
        model_free(m);
        fprintf(stderr, "  %s: loaded, expected a refusal\n", path);
        return 0;
    }
    if (!err[0] || (needle && !strstr(err, needle))) {
        fprintf(stderr, "  %s: message '%s' lacks '%s'\n", path, err, needle ? needle : "");
        return 0;
    }
    return 1;
}

static void test_llama2c_malformed(void) {
    size_t n;
    unsigned char *buf = read_file(ck_test_model_path("stories260K.bin"), &n);
    const char *tok = ck_test_model_path("tok512.bin");
    CK_CHECK(buf);
    /* Truncations: every header cut, then cuts through the weights. */
    size_t cuts[] = {0, 3, 27, 28, 100, n / 2, n - 4};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        CK_CHECK(write_file(tmp("cut.bin"), buf, cuts[i]) == 0);
        CK_CHECK(refused(tmp("cut.bin"), tok, NULL));
    }
    /* Absurd header fields. */
    struct {
        int field;
        int32_t v;
        const char *needle;
    } bad[] = {
        {0, 0, "dim"},           {0, -5, "dim"},     {0, 1 << 30, "dim"},
        {2, 100000, "n_layers"}, {3, 7, "multiple"}, {4, 3, "multiple"},
        {5, 1 << 30, "vocab"},   {6, 0, "seq_len"},  {1, 1 << 30, "hidden"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char *c = malloc(n);
        memcpy(c, buf, n);
        memcpy(c + 4 * bad[i].field, &bad[i].v, 4);
        CK_CHECK(write_file(tmp("bad.bin"), c, n) == 0);
        free(c);
        CK_CHECK_MSG(refused(tmp("bad.bin"), tok, bad[i].needle), "field %d = %d", bad[i].field, bad[i].v);
    }
    /* No tokenizer, a missing file, a directory. */
    CK_CHECK(refused(ck_test_model_path("stories260K.bin"), NULL, "tokenizer"));
    CK_CHECK(refused(tmp("does-not-exist"), tok, "No such file"));
    CK_CHECK(refused(dir, tok, NULL));
    free(buf);
}

/* Build a GGUF from the reference model, then break one thing in it. */
typedef void (*mutate_fn)(gguf_writer *w, const model *m);

static int write_variant(const model *m, const char *path, const char *skip_tensor, const char *arch,
                         int bad_shape) {
    gguf_writer *w = NULL;
    if (gguf_writer_new(&w)) return -1;
    const model_config *c = &m->cfg;
    gguf_writer_set_str(w, "general.architecture", arch);
    char key[128];
#define U32(k, v)                                    \
    do {                                             \
        snprintf(key, sizeof key, "%s.%s", arch, k); \
        gguf_writer_set_u32(w, key, (uint32_t)(v));  \
    } while (0)
    U32("context_length", c->seq_len);
    U32("embedding_length", c->dim);
    U32("block_count", bad_shape == 2 ? 1024 : c->n_layers); /* 2: more layers than tensors */
    U32("feed_forward_length", c->hidden_dim);
    U32("attention.head_count", c->n_heads);
    U32("attention.head_count_kv", c->n_kv_heads);
#undef U32
    /* tokenizer */
    int V = c->vocab_size;
    char **pieces = calloc((size_t)V, sizeof *pieces);
    size_t *lens = calloc((size_t)V, sizeof *lens);
    for (int i = 0; i < V; i++) {
        pieces[i] = malloc(64);
        tok_piece_gguf(m->tok, i, pieces[i], 64, &lens[i]);
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, lens, (uint64_t)V);
    struct {
        const char *name;
        const model_tensor *t;
        uint64_t cols, rows;
    } ts[64];
    int nt = 0;
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim;
    uint64_t KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    static char names[64][64];
    ts[nt].name = "token_embd.weight", ts[nt].t = &m->tok_emb, ts[nt].cols = D, ts[nt++].rows = (uint64_t)V;
    ts[nt].name = "output_norm.weight", ts[nt].t = &m->out_norm, ts[nt].cols = D, ts[nt++].rows = 1;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        struct {
            const char *n;
            const model_tensor *t;
            uint64_t cols, rows;
        } lt[] = {{"attn_norm", &ly->attn_norm, D, 1},
                  {"attn_q", &ly->wq, D, D},
                  {"attn_k", &ly->wk, D, KV},
                  {"attn_v", &ly->wv, D, KV},
                  {"attn_output", &ly->wo, D, D},
                  {"ffn_norm", &ly->ffn_norm, D, 1},
                  {"ffn_gate", &ly->w1, D, F},
                  {"ffn_down", &ly->w2, F, D},
                  {"ffn_up", &ly->w3, D, F}};
        for (int i = 0; i < 9; i++) {
            snprintf(names[nt], sizeof names[nt], "blk.%d.%s.weight", l, lt[i].n);
            ts[nt].name = names[nt];
            ts[nt].t = lt[i].t;
            ts[nt].cols = lt[i].cols;
            ts[nt++].rows = lt[i].rows;
        }
    }
    for (int i = 0; i < nt; i++) {
        if (skip_tensor && !strcmp(ts[i].name, skip_tensor)) continue;
        uint64_t ne[2] = {ts[i].cols, ts[i].rows};
        if (bad_shape == 1 && !strcmp(ts[i].name, "blk.1.attn_k.weight")) {
            ne[0] = ts[i].rows; /* transposed: (KV, D) read as (D, KV) */
            ne[1] = ts[i].cols;
        }
        gguf_writer_add_tensor(w, ts[i].name, QUANT_F32, ts[i].rows > 1 ? 2 : 1, ne, ts[i].t->data);
    }
    char err[256];
    int rc = gguf_writer_write(w, path, err, sizeof err);
    gguf_writer_free(w);
    for (int i = 0; i < V; i++) free(pieces[i]);
    free(pieces);
    free(lens);
    return rc;
}

static void test_gguf_malformed(void) {
    char err[256];
    model *m = NULL;
    CK_CHECK(model_load(ck_test_model_path("stories260K.bin"), ck_test_model_path("tok512.bin"), &m, err,
                        sizeof err) == 0);
    /* The hand-built variant loads (so the refusals below are about the one
     * thing broken in each). */
    CK_CHECK(write_variant(m, tmp("ok.gguf"), NULL, "llama", 0) == 0);
    model *ok = NULL;
    CK_CHECK_MSG(model_load(tmp("ok.gguf"), NULL, &ok, err, sizeof err) == 0, "%s", err);
    CK_CHECK(ok->tied && ok->cfg.n_kv_heads == 4);
    model_free(ok);
    CK_CHECK(write_variant(m, tmp("miss.gguf"), "blk.3.ffn_up.weight", "llama", 0) == 0);
    CK_CHECK(refused(tmp("miss.gguf"), NULL, "blk.3.ffn_up.weight"));
    CK_CHECK(write_variant(m, tmp("shape.gguf"), NULL, "llama", 1) == 0);
    CK_CHECK(refused(tmp("shape.gguf"), NULL, "shape"));
    /* 1024 layers claimed, the few of the file present: refused on the count, before the
     * layer table is sized from it */
    CK_CHECK(write_variant(m, tmp("layers.gguf"), NULL, "llama", 2) == 0);
    CK_CHECK(refused(tmp("layers.gguf"), NULL, "block_count 1024 needs 9216 tensors"));
    CK_CHECK(write_variant(m, tmp("arch.gguf"), NULL, "mamba", 0) == 0);
    CK_CHECK(refused(tmp("arch.gguf"), NULL, "architecture"));
    /* Truncated conversions of a valid file. */
    CK_CHECK(convert_write_gguf(m, QUANT_F16, tmp("f16.gguf"), err, sizeof err) == 0);
    size_t n;
    unsigned char *buf = read_file(tmp("f16.gguf"), &n);
    CK_CHECK(buf);
    for (size_t cut = 0; cut < n; cut += n / 97 + 1) {
        CK_CHECK(write_file(tmp("cut.gguf"), buf, cut) == 0);
        CK_CHECK_MSG(refused(tmp("cut.gguf"), NULL, NULL), "cut at %zu", cut);
    }
    free(buf);
    model_free(m);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/confkv-model-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    CK_RUN(test_llama2c_malformed);
    CK_RUN(test_gguf_malformed);
    int rc = ck_test_summary();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = rc ? rc : 0;
    return rc;
}
