/* convert.c - GGUF export and synthetic models (convert.h). */
#include "convert.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "gguf.h"
#include "quant.h"

/* Tensor buffers must live until gguf_writer_write: they are kept in a list
 * and freed together. */
typedef struct bufs {
    void **p;
    int n, cap;
} bufs;

static void *bufs_alloc(bufs *b, size_t n) {
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 64;
        void **p = realloc(b->p, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        b->p = p;
        b->cap = cap;
    }
    void *q = malloc(n ? n : 1);
    if (q) b->p[b->n++] = q;
    return q;
}

static void bufs_free(bufs *b) {
    for (int i = 0; i < b->n; i++) free(b->p[i]);
    free(b->p);
}

/* Add an f32 tensor (rows x cols, cols innermost) converted to `type`. */
static int add_f32(gguf_writer *w, bufs *bb, const char *name, const float *src, uint64_t cols,
                   uint64_t rows, int type) {
    if (type == QUANT_Q8_0 && cols % 32) type = QUANT_F16;
    uint64_t nb;
    int rc = quant_row_bytes(type, cols * rows, &nb);
    if (rc) return rc;
    void *dst = bufs_alloc(bb, (size_t)nb);
    if (!dst) return CK_ENOMEM;
    if ((rc = quant_from_f32(type, src, dst, cols * rows))) return rc;
    uint64_t ne[2] = {cols, rows};
    return gguf_writer_add_tensor(w, name, type, rows > 1 ? 2 : 1, ne, dst);
}

/* Same, from a model tensor of any type. */
static int add_tensor(gguf_writer *w, bufs *bb, const char *name, const model_tensor *t,
                      uint64_t cols, uint64_t rows, int type) {
    float *f = malloc((size_t)(cols * rows) * sizeof *f);
    if (!f) return CK_ENOMEM;
    int rc = quant_to_f32(t->type, t->data, f, cols * rows);
    if (!rc) rc = add_f32(w, bb, name, f, cols, rows, type);
    free(f);
    return rc;
}

static int file_type_of(int type) {
    /* llama.cpp's general.file_type: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32 */
    switch (type) {
    case QUANT_F16: return 1;
    case QUANT_Q8_0: return 7;
    case QUANT_BF16: return 32;
    default: return 0;
    }
}

static int write_hparams(gguf_writer *w, const model_config *c, const char *name, int type,
                         int stop_on_bos) {
    int rc = 0;
    rc |= gguf_writer_set_str(w, "general.architecture", "llama");
    rc |= gguf_writer_set_str(w, "general.name", name);
    rc |= gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type_of(type));
    rc |= gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c->seq_len);
    rc |= gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    rc |= gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    rc |= gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
    rc |= gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    rc |= gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    rc |= gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    rc |= gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);
    rc |= gguf_writer_set_f32(w, "llama.rope.freq_base", c->rope_theta);
    rc |= gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
    rc |= gguf_writer_set_bool(w, "confkv.stop_on_bos", stop_on_bos);
    return rc ? CK_ENOMEM : CK_OK;
}

/* Pieces, scores and types of a tokenizer, pieces in GGUF form. */
static int write_vocab(gguf_writer *w, const tokenizer *t) {
    int V = tok_vocab_size(t), rc = CK_ENOMEM;
    char **pieces = calloc((size_t)V, sizeof *pieces);
    size_t *lens = calloc((size_t)V, sizeof *lens);
    float *scores = malloc((size_t)V * sizeof *scores);
    int32_t *types = malloc((size_t)V * sizeof *types);
    if (!pieces || !lens || !scores || !types) goto out;
    for (int i = 0; i < V; i++) {
        size_t len = 0;
        tok_piece_gguf(t, i, NULL, 0, &len); /* asks for the length */
        if (!(pieces[i] = malloc(len + 1))) goto out;
        if ((rc = tok_piece_gguf(t, i, pieces[i], len + 1, &lens[i]))) goto out;
        scores[i] = tok_score(t, i);
        types[i] = tok_type(t, i);
    }
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces,
                                          lens, (uint64_t)V);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)V);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)V);
    if (!rc && tok_bos(t) >= 0) rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)tok_bos(t));
    if (!rc && tok_eos(t) >= 0) rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)tok_eos(t));
    if (!rc && tok_unk(t) >= 0) rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)tok_unk(t));
out:
    if (pieces)
        for (int i = 0; i < V; i++) free(pieces[i]);
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    return rc;
}

int convert_write_gguf(const model *m, int type, const char *path, char *err, size_t errlen) {
    if (!quant_type_name(type)) {
        snprintf(err, errlen, "convert: unsupported output type %d", type);
        return CK_EUNSUPPORTED;
    }
    const model_config *c = &m->cfg;
    gguf_writer *w = NULL;
    bufs bb = {0};
    int rc = gguf_writer_new(&w);
    if (rc) goto out;
    if ((rc = write_hparams(w, c, m->name, type, m->stop_on_bos)) || (rc = write_vocab(w, m->tok)))
        goto out;
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    uint64_t Q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    uint64_t KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    if ((rc = add_tensor(w, &bb, "token_embd.weight", &m->tok_emb, D, V, type))) goto out;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        struct { const char *n; const model_tensor *t; uint64_t cols, rows; int ty; } t[] = {
            {"attn_norm", &ly->attn_norm, D, 1, QUANT_F32}, {"attn_q", &ly->wq, D, Q, type},
            {"attn_k", &ly->wk, D, KV, type},               {"attn_v", &ly->wv, D, KV, type},
            {"attn_output", &ly->wo, Q, D, type},           {"ffn_norm", &ly->ffn_norm, D, 1, QUANT_F32},
            {"ffn_gate", &ly->w1, D, F, type},              {"ffn_down", &ly->w2, F, D, type},
            {"ffn_up", &ly->w3, D, F, type},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].n);
            if ((rc = add_tensor(w, &bb, name, t[i].t, t[i].cols, t[i].rows, t[i].ty))) goto out;
        }
    }
    if ((rc = add_tensor(w, &bb, "output_norm.weight", &m->out_norm, D, 1, QUANT_F32))) goto out;
    if (!m->tied && (rc = add_tensor(w, &bb, "output.weight", &m->wcls, D, V, type))) goto out;
    rc = gguf_writer_write(w, path, err, errlen);
    if (rc) goto done;
out:
    if (rc) snprintf(err, errlen, "convert: %s", ck_strerror(rc));
done:
    gguf_writer_free(w);
    bufs_free(&bb);
    return rc;
}

/* ------------------------------------------------------------- synthetic */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [-a, a]: variance a^2 / 3. */
static void fill_uniform(float *x, uint64_t n, float a, uint64_t *s) {
    for (uint64_t i = 0; i < n; i++) {
        double u = (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
        x[i] = (float)((2.0 * u - 1.0) * a);
    }
}

static int synth_vocab(gguf_writer *w, int V) {
    int rc = CK_ENOMEM;
    char (*pieces)[16] = calloc((size_t)V, sizeof *pieces);
    const char **ptrs = calloc((size_t)V, sizeof *ptrs);
    float *scores = malloc((size_t)V * sizeof *scores);
    int32_t *types = malloc((size_t)V * sizeof *types);
    if (!pieces || !ptrs || !scores || !types) goto out;
    strcpy(pieces[0], "<unk>");
    strcpy(pieces[1], "<s>");
    strcpy(pieces[2], "</s>");
    types[0] = 2;
    types[1] = types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(pieces[3 + b], 16, "<0x%02X>", b);
        types[3 + b] = 6;
    }
    for (int i = 0; i < 259; i++) scores[i] = 0;
    int n = 259;
    /* Printable characters, then n-grams of "a".."z" and the space (U+2581
     * in GGUF form), shortest first: every n-gram is a merge of two pieces
     * already present, so BPE can reach it. */
    for (int ch = 33; ch < 127 && n < V; ch++, n++) {
        pieces[n][0] = (char)ch;
        pieces[n][1] = 0;
    }
    if (n < V) strcpy(pieces[n++], "\xe2\x96\x81");
    const char *alpha = "abcdefghijklmnopqrstuvwxyz_";
    for (int len = 2; len <= 4 && n < V; len++) {
        long total = 1;
        for (int k = 0; k < len; k++) total *= 27;
        for (long code = 0; code < total && n < V; code++) {
            char *p = pieces[n];
            long c = code;
            int o = 0;
            for (int k = 0; k < len; k++) {
                int d = (int)(c % 27);
                c /= 27;
                if (alpha[d] == '_') { memcpy(p + o, "\xe2\x96\x81", 3); o += 3; }
                else p[o++] = alpha[d];
            }
            p[o] = 0;
            n++;
        }
    }
    if (n < V) {
        rc = CK_EINVAL;
        goto out;
    }
    for (int i = 259; i < V; i++) {
        scores[i] = -(float)(i - 259); /* earlier (shorter) pieces merge first */
        types[i] = 1;
    }
    for (int i = 0; i < V; i++) ptrs[i] = pieces[i];
    rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptrs, NULL, (uint64_t)V);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)V);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)V);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!rc) rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
out:
    free(pieces);
    free(ptrs);
    free(scores);
    free(types);
    return rc;
}

int convert_synth(const synth_params *p, const char *path, char *err, size_t errlen) {
    model_config c = {.dim = p->dim, .hidden_dim = p->hidden_dim, .n_layers = p->n_layers,
                      .n_heads = p->n_heads, .n_kv_heads = p->n_kv_heads ? p->n_kv_heads : p->n_heads,
                      .vocab_size = p->vocab_size, .seq_len = p->ctx, .norm_eps = 1e-5f,
                      .rope_theta = p->rope_theta > 0 ? p->rope_theta : 10000.0f};
    char why[200];
    if (model_config_check(&c, why, sizeof why)) {
        snprintf(err, errlen, "synth: %s", why);
        return CK_EINVAL;
    }
    if (c.vocab_size < 259 + 95) {
        snprintf(err, errlen, "synth: vocab %d is too small (at least 354: controls, bytes, characters)",
                 c.vocab_size);
        return CK_EINVAL;
    }
    if (c.vocab_size > 259 + 95 + 1 + 27 * 27 + 27 * 27 * 27 + 27 * 27 * 27 * 27) {
        snprintf(err, errlen, "synth: vocab %d is larger than the n-gram vocabulary can fill",
                 c.vocab_size);
        return CK_EINVAL;
    }
    if (!quant_type_name(p->type)) {
        snprintf(err, errlen, "synth: unsupported type");
        return CK_EUNSUPPORTED;
    }
    c.head_dim = c.dim / c.n_heads;
    gguf_writer *w = NULL;
    bufs bb = {0};
    float *tmp = NULL;
    uint64_t s = p->seed;
    int rc = gguf_writer_new(&w);
    if (rc) goto out;
    char name[64];
    snprintf(name, sizeof name, "synth-d%d-l%d-h%d-kv%d-f%d-v%d", c.dim, c.n_layers, c.n_heads,
             c.n_kv_heads, c.hidden_dim, c.vocab_size);
    if ((rc = write_hparams(w, &c, name, p->type, 0)) || (rc = synth_vocab(w, c.vocab_size))) goto out;
    uint64_t D = (uint64_t)c.dim, F = (uint64_t)c.hidden_dim, V = (uint64_t)c.vocab_size;
    uint64_t Q = (uint64_t)c.n_heads * (uint64_t)c.head_dim;
    uint64_t KV = (uint64_t)c.n_kv_heads * (uint64_t)c.head_dim;
    uint64_t biggest = V * D > F * D ? V * D : F * D;
    rc = CK_ENOMEM;
    if (!(tmp = malloc((size_t)biggest * sizeof *tmp))) goto out;
    /* Variance 1/fan_in keeps activations O(1) through the layers. */
    fill_uniform(tmp, V * D, 1.0f, &s);
    if ((rc = add_f32(w, &bb, "token_embd.weight", tmp, D, V, p->type))) goto out;
    for (int l = 0; l < c.n_layers; l++) {
        struct { const char *n; uint64_t cols, rows; } t[] = {
            {"attn_norm", D, 1}, {"attn_q", D, Q},      {"attn_k", D, KV},
            {"attn_v", D, KV},   {"attn_output", Q, D}, {"ffn_norm", D, 1},
            {"ffn_gate", D, F},  {"ffn_down", F, D},    {"ffn_up", D, F},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            char tn[96];
            snprintf(tn, sizeof tn, "blk.%d.%s.weight", l, t[i].n);
            int norm = t[i].rows == 1;
            if (norm)
                for (uint64_t k = 0; k < t[i].cols; k++) tmp[k] = 1.0f;
            else
                fill_uniform(tmp, t[i].cols * t[i].rows, sqrtf(3.0f / (float)t[i].cols), &s);
            if ((rc = add_f32(w, &bb, tn, tmp, t[i].cols, t[i].rows, norm ? QUANT_F32 : p->type)))
                goto out;
        }
    }
    for (uint64_t k = 0; k < D; k++) tmp[k] = 1.0f;
    if ((rc = add_f32(w, &bb, "output_norm.weight", tmp, D, 1, QUANT_F32))) goto out;
    fill_uniform(tmp, V * D, sqrtf(3.0f / (float)D) * 4.0f, &s);
    if ((rc = add_f32(w, &bb, "output.weight", tmp, D, V, p->type))) goto out;
    rc = gguf_writer_write(w, path, err, errlen);
    if (rc) goto done;
out:
    if (rc) snprintf(err, errlen, "synth: %s", ck_strerror(rc));
done:
    free(tmp);
    gguf_writer_free(w);
    bufs_free(&bb);
    return rc;
}
