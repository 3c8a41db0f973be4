/* model.c - load Llama-family models from GGUF or llama2.c files (model.h). */
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_err.h"
#include "gguf.h"
#include "quant.h"

/* Limits that keep every size computation of the engine inside int range
 * and reject absurd headers before anything is allocated. */
#define MODEL_MAX_DIM (1 << 16)
#define MODEL_MAX_HIDDEN (1 << 18)
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_VOCAB (1 << 22)
#define MODEL_MAX_CTX (1 << 20)

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int model_config_check(const model_config *c, char *err, size_t errlen) {
    struct { const char *name; int v, max; } f[] = {
        {"dim", c->dim, MODEL_MAX_DIM},
        {"hidden_dim", c->hidden_dim, MODEL_MAX_HIDDEN},
        {"n_layers", c->n_layers, MODEL_MAX_LAYERS},
        {"n_heads", c->n_heads, MODEL_MAX_HEADS},
        {"n_kv_heads", c->n_kv_heads, MODEL_MAX_HEADS},
        {"vocab_size", c->vocab_size, MODEL_MAX_VOCAB},
        {"seq_len", c->seq_len, MODEL_MAX_CTX},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i].v <= 0 || f[i].v > f[i].max) {
            seterr(err, errlen, "%s = %d is outside 1..%d", f[i].name, f[i].v, f[i].max);
            return CK_EFORMAT;
        }
    }
    if (c->dim % c->n_heads) {
        seterr(err, errlen, "dim %d is not a multiple of n_heads %d", c->dim, c->n_heads);
        return CK_EFORMAT;
    }
    if (c->n_heads % c->n_kv_heads) {
        seterr(err, errlen, "n_heads %d is not a multiple of n_kv_heads %d", c->n_heads,
               c->n_kv_heads);
        return CK_EFORMAT;
    }
    if ((c->dim / c->n_heads) % 2) {
        seterr(err, errlen, "head_dim %d is odd (RoPE rotates pairs)", c->dim / c->n_heads);
        return CK_EFORMAT;
    }
    if (c->vocab_size < 3) {
        seterr(err, errlen, "vocab_size %d is too small", c->vocab_size);
        return CK_EFORMAT;
    }
    if (!(c->norm_eps > 0 && c->norm_eps < 1) || !(c->rope_theta > 1 && c->rope_theta < 1e12)) {
        seterr(err, errlen, "norm_eps %g or rope_theta %g out of range", c->norm_eps, c->rope_theta);
        return CK_EFORMAT;
    }
    return CK_OK;
}

static int map_file(const char *path, void **map, size_t *len, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "%s: %s", path, strerror(errno));
        return CK_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        seterr(err, errlen, "%s: not a regular file", path);
        close(fd);
        return CK_EIO;
    }
    if (st.st_size == 0) {
        seterr(err, errlen, "%s: empty file", path);
        close(fd);
        return CK_EFORMAT;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        seterr(err, errlen, "%s: mmap: %s", path, strerror(errno));
        return CK_EIO;
    }
    *map = p;
    *len = (size_t)st.st_size;
    return CK_OK;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ---------------------------------------------------------------- llama2.c */

/* The llama2.c checkpoint: int32 dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size (negative: separate classifier), seq_len; then f32
 * token_embedding (vocab, dim), rms_att (L, dim), wq (L, dim, dim), wk (L,
 * kv_dim, dim), wv (L, kv_dim, dim), wo (L, dim, dim), rms_ffn (L, dim), w1
 * (L, hidden, dim), w2 (L, dim, hidden), w3 (L, hidden, dim), rms_final (dim),
 * two legacy RoPE tables (seq_len, head_dim / 2) each, then wcls (vocab, dim)
 * when vocab_size was negative. */
static int load_llama2c(model *m, const char *path, const char *tok_path, char *err,
                        size_t errlen) {
    if (m->map_len_ < 7 * sizeof(int32_t)) {
        seterr(err, errlen, "%s: file too short for a llama2.c header (%zu bytes)", path,
               m->map_len_);
        return CK_EFORMAT;
    }
    int32_t h[7];
    memcpy(h, m->map_, sizeof h);
    model_config *c = &m->cfg;
    c->dim = h[0];
    c->hidden_dim = h[1];
    c->n_layers = h[2];
    c->n_heads = h[3];
    c->n_kv_heads = h[4];
    m->tied = h[5] > 0;
    c->vocab_size = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -h[5] : h[5]);
    c->seq_len = h[6];
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    char why[200];
    if (model_config_check(c, why, sizeof why)) {
        seterr(err, errlen, "%s: not a valid llama2.c checkpoint: %s", path, why);
        return CK_EFORMAT;
    }
    c->head_dim = c->dim / c->n_heads;
    uint64_t D = (uint64_t)c->dim, L = (uint64_t)c->n_layers, F = (uint64_t)c->hidden_dim;
    uint64_t KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, V = (uint64_t)c->vocab_size;
    uint64_t rope = (uint64_t)c->seq_len * (uint64_t)(c->head_dim / 2);
    /* All factors are bounded above, so these products cannot overflow 64 bits. */
    uint64_t need = V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D +
                    3 * L * F * D + D + 2 * rope + (m->tied ? 0 : V * D);
    uint64_t have = (m->map_len_ - 28) / 4;
    if (need > have) {
        seterr(err, errlen,
               "%s: truncated llama2.c checkpoint: header needs %llu floats, file has %llu",
               path, (unsigned long long)need, (unsigned long long)have);
        return CK_EFORMAT;
    }
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return CK_ENOMEM;
    const float *p = (const float *)((const char *)m->map_ + 28);
#define TAKE(t, count) do { (t).type = QUANT_F32; (t).n = (count); (t).data = p; p += (count); } while (0)
    model_tensor emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3;
    TAKE(emb, V * D);
    TAKE(rms_att, L * D);
    TAKE(wq, L * D * D);
    TAKE(wk, L * KV * D);
    TAKE(wv, L * KV * D);
    TAKE(wo, L * D * D);
    TAKE(rms_ffn, L * D);
    TAKE(w1, L * F * D);
    TAKE(w2, L * D * F);
    TAKE(w3, L * F * D);
    TAKE(m->out_norm, D);
    p += 2 * rope;
    m->tok_emb = emb;
    if (m->tied) m->wcls = emb;
    else TAKE(m->wcls, V * D);
#undef TAKE
    for (uint64_t l = 0; l < L; l++) {
        model_layer *ly = &m->layers[l];
#define SLICE(dst, src, per) do { (dst).type = QUANT_F32; (dst).n = (per); \
        (dst).data = (const float *)(src).data + l * (per); } while (0)
        SLICE(ly->attn_norm, rms_att, D);
        SLICE(ly->wq, wq, D * D);
        SLICE(ly->wk, wk, KV * D);
        SLICE(ly->wv, wv, KV * D);
        SLICE(ly->wo, wo, D * D);
        SLICE(ly->ffn_norm, rms_ffn, D);
        SLICE(ly->w1, w1, F * D);
        SLICE(ly->w2, w2, D * F);
        SLICE(ly->w3, w3, F * D);
#undef SLICE
    }
    if (!tok_path) {
        seterr(err, errlen, "%s: a llama2.c checkpoint needs --tokenizer", path);
        return CK_EINVAL;
    }
    int rc = tok_load_llama2c(tok_path, c->vocab_size, &m->tok, err, errlen);
    if (rc) return rc;
    m->format = MODEL_FMT_LLAMA2C;
    m->stop_on_bos = 1; /* llama2.c story models separate stories with BOS */
    snprintf(m->name, sizeof m->name, "%s", base_name(path));
    return CK_OK;
}

/* -------------------------------------------------------------------- GGUF */

static int gguf_int_key(gguf_file *f, const char *key, int required, int dflt, int *out,
                        const char *path, char *err, size_t errlen) {
    int64_t v;
    int rc = gguf_get_int(f, key, &v);
    if (rc == CK_ENOTFOUND && !required) {
        *out = dflt;
        return CK_OK;
    }
    if (rc) {
        seterr(err, errlen, "%s: metadata '%s': %s", path, key,
               rc == CK_ENOTFOUND ? "missing" : "not an integer in range");
        return CK_EFORMAT;
    }
    if (v <= 0 || v > INT32_MAX) {
        seterr(err, errlen, "%s: metadata '%s' = %lld out of range", path, key, (long long)v);
        return CK_EFORMAT;
    }
    *out = (int)v;
    return CK_OK;
}

/* Find tensor `name`, check its shape (ne0 = in, ne1 = out; ne1 = 0 for a
 * vector) and a type we can compute with, and fill a view. */
static int gguf_weight(gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1, int optional,
                       model_tensor *t, const char *path, char *err, size_t errlen) {
    const gguf_tensor *g = gguf_find_tensor(f, name);
    if (!g) {
        if (optional) return CK_ENOTFOUND;
        seterr(err, errlen, "%s: tensor '%s' is missing", path, name);
        return CK_EFORMAT;
    }
    uint32_t want_dims = ne1 ? 2 : 1;
    int ok = g->n_dims == want_dims && g->ne[0] == ne0 && (ne1 == 0 || g->ne[1] == ne1);
    if (!ok) {
        seterr(err, errlen, "%s: tensor '%s' has shape [%llu, %llu] (%u dims), expected [%llu, %llu]",
               path, name, (unsigned long long)g->ne[0], (unsigned long long)g->ne[1], g->n_dims,
               (unsigned long long)ne0, (unsigned long long)(ne1 ? ne1 : 1));
        return CK_EFORMAT;
    }
    if (!quant_type_name(g->type)) {
        seterr(err, errlen, "%s: tensor '%s' has unsupported type %d", path, name, g->type);
        return CK_EUNSUPPORTED;
    }
    t->type = g->type;
    t->n = ne0 * (ne1 ? ne1 : 1);
    t->data = g->data;
    return CK_OK;
}

static int gguf_tokenizer(model *m, gguf_file *f, const char *path, char *err, size_t errlen) {
    const char *s;
    size_t len;
    if (gguf_get_str(f, "tokenizer.ggml.model", &s, &len) || len != 5 || memcmp(s, "llama", 5)) {
        seterr(err, errlen, "%s: tokenizer.ggml.model must be \"llama\" (SentencePiece BPE)", path);
        return CK_EUNSUPPORTED;
    }
    int et;
    uint64_t n;
    const void *data;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, &data) || et != GGUF_TYPE_STRING) {
        seterr(err, errlen, "%s: tokenizer.ggml.tokens missing or not a string array", path);
        return CK_EFORMAT;
    }
    if (n != (uint64_t)m->cfg.vocab_size) {
        seterr(err, errlen, "%s: %llu tokenizer tokens but the embedding has %d rows", path,
               (unsigned long long)n, m->cfg.vocab_size);
        return CK_EFORMAT;
    }
    int V = m->cfg.vocab_size, rc = CK_ENOMEM;
    const char **pieces = calloc((size_t)V, sizeof *pieces);
    size_t *lens = calloc((size_t)V, sizeof *lens);
    float *scores = NULL;
    int32_t *types = NULL;
    if (!pieces || !lens) goto out;
    for (int i = 0; i < V; i++) {
        if (gguf_get_arr_str(f, "tokenizer.ggml.tokens", (uint64_t)i, &pieces[i], &lens[i])) {
            rc = CK_EFORMAT;
            seterr(err, errlen, "%s: tokenizer token %d unreadable", path, i);
            goto out;
        }
    }
    if (!gguf_get_arr(f, "tokenizer.ggml.scores", &et, &n, &data)) {
        if (et != GGUF_TYPE_FLOAT32 || n != (uint64_t)V) {
            rc = CK_EFORMAT;
            seterr(err, errlen, "%s: tokenizer.ggml.scores must be %d float32", path, V);
            goto out;
        }
        if (!(scores = malloc((size_t)V * sizeof *scores))) goto out;
        memcpy(scores, data, (size_t)V * sizeof *scores); /* may be unaligned in the file */
    }
    if (!gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n, &data)) {
        if ((et != GGUF_TYPE_INT32 && et != GGUF_TYPE_UINT32) || n != (uint64_t)V) {
            rc = CK_EFORMAT;
            seterr(err, errlen, "%s: tokenizer.ggml.token_type must be %d int32", path, V);
            goto out;
        }
        if (!(types = malloc((size_t)V * sizeof *types))) goto out;
        memcpy(types, data, (size_t)V * sizeof *types);
    }
    int bos = 1, eos = 2, unk = 0;
    if ((rc = gguf_int_key(f, "tokenizer.ggml.bos_token_id", 0, 1, &bos, path, err, errlen)) ||
        (rc = gguf_int_key(f, "tokenizer.ggml.eos_token_id", 0, 2, &eos, path, err, errlen)))
        goto out;
    int64_t u;
    if (!gguf_get_int(f, "tokenizer.ggml.unknown_token_id", &u)) unk = (int)(u >= 0 && u < V ? u : 0);
    if (bos >= V || eos >= V) {
        rc = CK_EFORMAT;
        seterr(err, errlen, "%s: BOS %d or EOS %d outside the vocabulary", path, bos, eos);
        goto out;
    }
    rc = tok_from_arrays(V, pieces, lens, scores, types, bos, eos, unk, &m->tok, err, errlen);
out:
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    return rc;
}

static int load_gguf(model *m, const char *path, char *err, size_t errlen) {
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, errlen);
    if (rc) return rc;
    m->gguf_ = f;
    const char *s;
    size_t len;
    if (gguf_get_str(f, "general.architecture", &s, &len) || len != 5 || memcmp(s, "llama", 5)) {
        seterr(err, errlen, "%s: general.architecture must be \"llama\"", path);
        return CK_EUNSUPPORTED;
    }
    model_config *c = &m->cfg;
    if ((rc = gguf_int_key(f, "llama.context_length", 1, 0, &c->seq_len, path, err, errlen)) ||
        (rc = gguf_int_key(f, "llama.embedding_length", 1, 0, &c->dim, path, err, errlen)) ||
        (rc = gguf_int_key(f, "llama.block_count", 1, 0, &c->n_layers, path, err, errlen)) ||
        (rc = gguf_int_key(f, "llama.feed_forward_length", 1, 0, &c->hidden_dim, path, err, errlen)) ||
        (rc = gguf_int_key(f, "llama.attention.head_count", 1, 0, &c->n_heads, path, err, errlen)) ||
        (rc = gguf_int_key(f, "llama.attention.head_count_kv", 0, c->n_heads, &c->n_kv_heads, path,
                           err, errlen)))
        return rc;
    double d;
    c->norm_eps = gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &d) ? 1e-5f : (float)d;
    c->rope_theta = gguf_get_float(f, "llama.rope.freq_base", &d) ? 10000.0f : (float)d;
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] > MODEL_MAX_VOCAB) {
        seterr(err, errlen, "%s: token_embd.weight missing or not a 2-D tensor of at most %d rows",
               path, MODEL_MAX_VOCAB);
        return CK_EFORMAT;
    }
    c->vocab_size = (int)emb->ne[1];
    char why[200];
    if (model_config_check(c, why, sizeof why)) {
        seterr(err, errlen, "%s: %s", path, why);
        return CK_EFORMAT;
    }
    c->head_dim = c->dim / c->n_heads;
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    uint64_t Q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    uint64_t KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    if ((rc = gguf_weight(f, "token_embd.weight", D, V, 0, &m->tok_emb, path, err, errlen)) ||
        (rc = gguf_weight(f, "output_norm.weight", D, 0, 0, &m->out_norm, path, err, errlen)))
        return rc;
    rc = gguf_weight(f, "output.weight", D, V, 1, &m->wcls, path, err, errlen);
    if (rc == CK_ENOTFOUND) {
        m->tied = 1;
        m->wcls = m->tok_emb;
    } else if (rc) {
        return rc;
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return CK_ENOMEM;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *ly = &m->layers[l];
        struct { const char *n; uint64_t ne0, ne1; model_tensor *t; } w[] = {
            {"attn_norm", D, 0, &ly->attn_norm}, {"attn_q", D, Q, &ly->wq},
            {"attn_k", D, KV, &ly->wk},           {"attn_v", D, KV, &ly->wv},
            {"attn_output", Q, D, &ly->wo},       {"ffn_norm", D, 0, &ly->ffn_norm},
            {"ffn_gate", D, F, &ly->w1},          {"ffn_down", F, D, &ly->w2},
            {"ffn_up", D, F, &ly->w3},
        };
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, w[i].n);
            if ((rc = gguf_weight(f, name, w[i].ne0, w[i].ne1, 0, w[i].t, path, err, errlen)))
                return rc;
        }
    }
    if ((rc = gguf_tokenizer(m, f, path, err, errlen))) return rc;
    int b = 0;
    m->stop_on_bos = !gguf_get_bool(f, "confkv.stop_on_bos", &b) && b;
    if (!gguf_get_str(f, "general.name", &s, &len) && len > 0)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(len < 63 ? len : 63), s);
    else
        snprintf(m->name, sizeof m->name, "%s", base_name(path));
    m->format = MODEL_FMT_GGUF;
    return CK_OK;
}

/* ------------------------------------------------------------- fingerprint */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* Config and a sample of every tensor (its first and last 4 KiB): cheap at
 * load, and two models that differ anywhere that matters differ here. */
static uint64_t tensor_hash(uint64_t h, const model_tensor *t) {
    uint64_t nb = 0;
    quant_row_bytes(t->type, t->n, &nb);
    h = fnv(h, &t->type, sizeof t->type);
    h = fnv(h, &t->n, sizeof t->n);
    size_t head = nb < 4096 ? (size_t)nb : 4096;
    h = fnv(h, t->data, head);
    if (nb > 4096) h = fnv(h, (const char *)t->data + nb - 4096, 4096);
    return h;
}

static void fingerprint(model *m) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = fnv(h, &m->cfg, sizeof m->cfg);
    h = tensor_hash(h, &m->tok_emb);
    h = tensor_hash(h, &m->out_norm);
    h = tensor_hash(h, &m->wcls);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(&m->layers[l], t);
        for (int i = 0; i < MODEL_LAYER_TENSORS; i++) h = tensor_hash(h, t[i]);
    }
    snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx", (unsigned long long)h);
}

/* -------------------------------------------------------------------- API */

int model_load(const char *path, const char *tokenizer_path, model **out, char *err,
               size_t errlen) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return CK_ENOMEM;
    int rc;
    if (!path) {
        seterr(err, errlen, "no model path given");
        rc = CK_EINVAL;
        goto fail;
    }
    /* Peek at the magic to pick the format; GGUF maps the file itself. */
    if ((rc = map_file(path, &m->map_, &m->map_len_, err, errlen))) goto fail;
    if (m->map_len_ >= 4 && !memcmp(m->map_, "GGUF", 4)) {
        munmap(m->map_, m->map_len_);
        m->map_ = NULL;
        rc = load_gguf(m, path, err, errlen);
    } else {
        rc = load_llama2c(m, path, tokenizer_path, err, errlen);
    }
    if (rc) goto fail;
    fingerprint(m);
    *out = m;
    return CK_OK;
fail:
    model_free(m);
    return rc;
}

void model_free(model *m) {
    if (!m) return;
    free(m->layers);
    tok_free(m->tok);
    if (m->map_) munmap(m->map_, m->map_len_);
    gguf_close(m->gguf_);
    free(m);
}

static uint64_t tensor_bytes(const model_tensor *t) {
    uint64_t nb = 0;
    quant_row_bytes(t->type, t->n, &nb);
    return nb;
}

uint64_t model_weight_bytes(const model *m) {
    uint64_t b = tensor_bytes(&m->out_norm) + tensor_bytes(&m->wcls);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(&m->layers[l], t);
        for (int i = 0; i < MODEL_LAYER_TENSORS; i++) b += tensor_bytes(t[i]);
    }
    /* The embedding is a gather of one row per token, not a full read. */
    return b + tensor_bytes(&m->tok_emb) / (uint64_t)m->cfg.vocab_size;
}

uint64_t model_n_params(const model *m) {
    uint64_t n = m->tok_emb.n + m->out_norm.n + (m->tied ? 0 : m->wcls.n);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(&m->layers[l], t);
        for (int i = 0; i < MODEL_LAYER_TENSORS; i++) n += t[i]->n;
    }
    return n;
}
