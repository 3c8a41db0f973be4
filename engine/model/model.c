/* model.c - load Llama-family models from GGUF or llama2.c files (model.h). */
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch.h"
#include "ck_err.h"
#include "gguf.h"
#include "model_keys.h"
#include "quant.h"

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int model_config_check(const model_config *c, char *err, size_t errlen) {
    struct {
        const char *name;
        int v, max;
    } f[] = {
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
    if (!c->head_dim && c->dim % c->n_heads) {
        seterr(err, errlen, "dim %d is not a multiple of n_heads %d", c->dim, c->n_heads);
        return CK_EFORMAT;
    }
    if (c->n_heads % c->n_kv_heads) {
        seterr(err, errlen, "n_heads %d is not a multiple of n_kv_heads %d", c->n_heads, c->n_kv_heads);
        return CK_EFORMAT;
    }
    const int hd = c->head_dim ? c->head_dim : c->dim / c->n_heads;
    if (hd % 2) {
        seterr(err, errlen, "head_dim %d is odd (RoPE rotates pairs)", hd);
        return CK_EFORMAT;
    }
    if (hd < 2 || hd > MODEL_MAX_HEAD_DIM) {
        seterr(err, errlen, "head_dim %d is outside 2..%d", hd, MODEL_MAX_HEAD_DIM);
        return CK_EFORMAT;
    }
    if (c->vocab_size < 3) {
        seterr(err, errlen, "vocab_size %d is too small", c->vocab_size);
        return CK_EFORMAT;
    }
    if (c->no_rope_step < 0 || (c->attn_temp_scale != 0 && c->attn_temp_floor <= 0)) {
        seterr(err, errlen, "no_rope_step %d or attention temperature floor %d out of range", c->no_rope_step,
               c->attn_temp_floor);
        return CK_EFORMAT;
    }
    if (!(c->norm_eps > 0 && c->norm_eps < 1) || !(c->rope_theta > 1 && c->rope_theta < 1e12)) {
        seterr(err, errlen, "norm_eps %g or rope_theta %g out of range", c->norm_eps, c->rope_theta);
        return CK_EFORMAT;
    }
    if (c->n_swa < 0 || c->n_swa > MODEL_MAX_CTX || c->swa_period < 0 || c->swa_period > MODEL_MAX_LAYERS ||
        c->expert_gating < ARCH_GATING_SOFTMAX_NORM || c->expert_gating > ARCH_GATING_SIGMOID_NORM ||
        c->expert_act < ARCH_ACT_SWIGLU || c->expert_act > ARCH_ACT_GELU) {
        seterr(err, errlen,
               "sliding window %d (0..%d), its period %d (0..%d), gating %d or activation %d out of range",
               c->n_swa, MODEL_MAX_CTX, c->swa_period, MODEL_MAX_LAYERS, c->expert_gating, c->expert_act);
        return CK_EFORMAT;
    }
    /* experts: all zero (dense), or every one of the three in range */
    if ((c->n_expert || c->n_expert_used || c->expert_ffn) &&
        (c->n_expert < 1 || c->n_expert > MODEL_MAX_EXPERTS || c->n_expert_used < 1 ||
         c->n_expert_used > c->n_expert || c->expert_ffn < 1 || c->expert_ffn > MODEL_MAX_HIDDEN)) {
        seterr(err, errlen, "experts %d (1..%d), used %d (1..experts), expert ffn %d (1..%d): out of range",
               c->n_expert, MODEL_MAX_EXPERTS, c->n_expert_used, c->expert_ffn, MODEL_MAX_HIDDEN);
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
static int load_llama2c(model *m, const char *path, const char *tok_path, char *err, size_t errlen) {
    if (m->map_len_ < 7 * sizeof(int32_t)) {
        seterr(err, errlen, "%s: file too short for a llama2.c header (%zu bytes)", path, m->map_len_);
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
    c->arch = ARCH_LLAMA;
    c->rope_style = ARCH_ROPE_NORMAL;
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
    uint64_t need = V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D + 3 * L * F * D + D +
                    2 * rope + (m->tied ? 0 : V * D);
    uint64_t have = (m->map_len_ - 28) / 4;
    if (need > have) {
        seterr(err, errlen, "%s: truncated llama2.c checkpoint: header needs %llu floats, file has %llu",
               path, (unsigned long long)need, (unsigned long long)have);
        return CK_EFORMAT;
    }
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return CK_ENOMEM;
    /* a llama2.c checkpoint is its header then little-endian floats */
    // cppcheck-suppress invalidPointerCast
    const float *p = (const float *)((const char *)m->map_ + 28);
#define TAKE(t, count)        \
    do {                      \
        (t).type = QUANT_F32; \
        (t).n = (count);      \
        (t).data = p;         \
        p += (count);         \
    } while (0)
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
    if (m->tied)
        m->wcls = emb;
    else
        TAKE(m->wcls, V * D);
#undef TAKE
    for (uint64_t l = 0; l < L; l++) {
        model_layer *ly = &m->layers[l];
#define SLICE(dst, src, per)                                \
    do {                                                    \
        (dst).type = QUANT_F32;                             \
        (dst).n = (per);                                    \
        (dst).data = (const float *)(src).data + l * (per); \
    } while (0)
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

/* Find tensor `name`, check its shape (ne0 = in, ne1 = out, ne2 = the
 * experts of a 3-D expert tensor; ne1 = 0 for a vector, ne2 = 0 for a 2-D
 * one) and a type we can compute with, and fill a view. */
static int gguf_weight(gguf_file *f, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2, int optional,
                       model_tensor *t, const char *path, char *err, size_t errlen) {
    const gguf_tensor *g = gguf_find_tensor(f, name);
    if (!g) {
        if (optional) return CK_ENOTFOUND;
        seterr(err, errlen, "%s: tensor '%s' is missing", path, name);
        return CK_EFORMAT;
    }
    /* ggml writes no trailing dimension of 1 (an expert tensor of one
     * expert is 2-D), and llama.cpp's reader takes that: so do we */
    const uint64_t want[3] = {ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1};
    const uint32_t max_dims = ne2 ? 3 : ne1 ? 2 : 1;
    int ok = g->n_dims >= 1 && g->n_dims <= max_dims;
    for (uint32_t i = 0; ok && i < 3; i++) ok = (i < g->n_dims ? g->ne[i] : 1) == want[i];
    if (!ok) {
        seterr(err, errlen,
               "%s: tensor '%s' has shape [%llu, %llu, %llu] (%u dims), expected [%llu, %llu, %llu]", path,
               name, (unsigned long long)g->ne[0], (unsigned long long)(g->n_dims > 1 ? g->ne[1] : 1),
               (unsigned long long)(g->n_dims > 2 ? g->ne[2] : 1), g->n_dims, (unsigned long long)ne0,
               (unsigned long long)(ne1 ? ne1 : 1), (unsigned long long)(ne2 ? ne2 : 1));
        return CK_EFORMAT;
    }
    if (!quant_type_name(g->type)) {
        seterr(err, errlen, "%s: tensor '%s' has unsupported type %d", path, name, g->type);
        return CK_EUNSUPPORTED;
    }
    t->type = g->type;
    t->n = ne0 * (ne1 ? ne1 : 1) * (ne2 ? ne2 : 1);
    t->data = g->data;
    return CK_OK;
}

static int gguf_tokenizer(model *m, gguf_file *f, const char *path, char *err, size_t errlen) {
    char why[256] = "";
    int rc = tok_from_gguf(f, &m->tok, why, sizeof why);
    if (rc) {
        seterr(err, errlen, "%s: %s", path, why);
        return rc;
    }
    if (tok_vocab_size(m->tok) != m->cfg.vocab_size) {
        seterr(err, errlen, "%s: %d tokenizer tokens but the embedding has %d rows", path,
               tok_vocab_size(m->tok), m->cfg.vocab_size);
        return CK_EFORMAT;
    }
    return CK_OK;
}

/* Layer l of a granitehybrid file: the Mamba2 set (conv1d's bias optional)
 * or attention's, not both. */
static int ssm_layer_check(const model_layer *ly, int l, int ssm, const char *path, char *err,
                           size_t errlen) {
    const struct {
        const model_tensor *t;
        int ssm; /* the kind that has it */
        const char *name;
    } k[] = {{&ly->wq, 0, "attn_q"},         {&ly->wk, 0, "attn_k"},      {&ly->wv, 0, "attn_v"},
             {&ly->wo, 0, "attn_output"},    {&ly->ssm_in, 1, "ssm_in"},  {&ly->ssm_conv, 1, "ssm_conv1d"},
             {&ly->ssm_dt_b, 1, "ssm_dt"},   {&ly->ssm_a, 1, "ssm_a"},    {&ly->ssm_d, 1, "ssm_d"},
             {&ly->ssm_norm, 1, "ssm_norm"}, {&ly->ssm_out, 1, "ssm_out"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (!!k[i].t->data == (k[i].ssm == ssm)) continue;
        seterr(err, errlen, "%s: layer %d is %s layer (head_count_kv %s 0) but blk.%d.%s %s", path, l,
               ssm ? "a Mamba2" : "an attention", ssm ? "==" : "!=", l, k[i].name,
               k[i].t->data ? "is there" : "is missing");
        return CK_EFORMAT;
    }
    if (!ssm && (ly->bq.data || ly->bk.data || ly->bv.data) && !(ly->bq.data && ly->bk.data && ly->bv.data)) {
        seterr(err, errlen, "%s: layer %d has some of the q/k/v biases, not all three", path, l);
        return CK_EFORMAT;
    }
    if (ssm && (ly->bq.data || ly->bk.data || ly->bv.data)) {
        seterr(err, errlen, "%s: layer %d is a Mamba2 layer but has q/k/v biases", path, l);
        return CK_EFORMAT;
    }
    return CK_OK;
}

/* Layer l of an lfm2 file: whether it is a convolution layer, and that it
 * has the whole tensor set of its kind and none of the other's. */
static int conv_layer_check(const model_layer *ly, int l, int conv, const char *path, char *err,
                            size_t errlen) {
    const struct {
        const model_tensor *t;
        int conv; /* the kind that has it */
        const char *name;
    } k[] = {{&ly->wq, 0, "attn_q"},
             {&ly->wk, 0, "attn_k"},
             {&ly->wv, 0, "attn_v"},
             {&ly->wo, 0, "attn_output"},
             {&ly->q_norm, 0, "attn_q_norm"},
             {&ly->k_norm, 0, "attn_k_norm"},
             {&ly->sc_conv, 1, "shortconv.conv"},
             {&ly->sc_in, 1, "shortconv.in_proj"},
             {&ly->sc_out, 1, "shortconv.out_proj"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (!!k[i].t->data == (k[i].conv == conv)) continue;
        seterr(err, errlen, "%s: layer %d is %s layer (head_count_kv %s 0) but blk.%d.%s %s", path, l,
               conv ? "a short-convolution" : "an attention", conv ? "==" : "!=", l, k[i].name,
               k[i].t->data ? "is there" : "is missing");
        return CK_EFORMAT;
    }
    return CK_OK;
}

/* Layer l of an lfm2moe file: the dense feed-forward's three tensors, or
 * (moe) the router, the three expert tensors and exp_probs_b; not both. */
static int dense_lead_check(const model_layer *ly, int l, int moe, const char *path, char *err,
                            size_t errlen) {
    const struct {
        const model_tensor *t;
        int moe; /* the kind that has it */
        const char *name;
    } k[] = {{&ly->w1, 0, "ffn_gate"},
             {&ly->w2, 0, "ffn_down"},
             {&ly->w3, 0, "ffn_up"},
             {&ly->router, 1, "ffn_gate_inp"},
             {&ly->gate_exps, 1, "ffn_gate_exps"},
             {&ly->up_exps, 1, "ffn_up_exps"},
             {&ly->down_exps, 1, "ffn_down_exps"},
             {&ly->probs_b, 1, "exp_probs_b"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (!!k[i].t->data == (k[i].moe == moe)) continue;
        seterr(err, errlen, "%s: layer %d has %s (leading_dense_block_count) but blk.%d.%s %s", path, l,
               moe ? "experts" : "the dense feed-forward", l, k[i].name,
               k[i].t->data ? "is there" : "is missing");
        return CK_EFORMAT;
    }
    return CK_OK;
}

/* Every tensor of the file must be one the table knows and the
 * architecture has: a tensor the engine would not compute is refused, not
 * skipped. */
static int gguf_known_tensors(gguf_file *f, const arch_info *a, int n_layers, const char *path, char *err,
                              size_t errlen) {
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const char *name = gguf_tensor_at(f, i)->name;
        int t, layer;
        if (arch_parse_tensor(name, n_layers, &t, &layer) || a->need[t] == ARCH_NO) {
            seterr(err, errlen, "%s: tensor '%.80s' is not one the engine computes for architecture %s", path,
                   name, a->name);
            return CK_EUNSUPPORTED;
        }
    }
    return CK_OK;
}

/* Table tensor t (of layer l) into *dst with shape (ne0, ne1, ne2):
 * required ones must be there; optional ones absent leave *dst empty. */
static int arch_weight(gguf_file *f, const arch_info *a, int t, int l, uint64_t ne0, uint64_t ne1,
                       uint64_t ne2, model_tensor *dst, const char *path, char *err, size_t errlen) {
    memset(dst, 0, sizeof *dst);
    if (a->need[t] == ARCH_NO) return CK_OK;
    char name[96];
    arch_tensor_file_name(name, sizeof name, t, l);
    int rc = gguf_weight(f, name, ne0, ne1, ne2, a->need[t] == ARCH_OPTIONAL, dst, path, err, errlen);
    if (rc == CK_ENOTFOUND) {
        memset(dst, 0, sizeof *dst);
        return CK_OK;
    }
    return rc;
}

static int load_gguf(model *m, const char *path, char *err, size_t errlen) {
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, errlen);
    if (rc) return rc;
    m->gguf_ = f;
    const char *s;
    size_t len;
    if (gguf_get_str(f, "general.architecture", &s, &len)) {
        seterr(err, errlen, "%s: general.architecture is missing or not a string", path);
        return CK_EFORMAT;
    }
    const arch_info *a = arch_find(s, len);
    if (!a) {
        seterr(err, errlen, "%s: general.architecture \"%.*s\" is not one the engine computes (%s)", path,
               (int)(len < 40 ? len : 40), s, arch_names());
        return CK_EUNSUPPORTED;
    }
    model_config *c = &m->cfg;
    c->arch = a->id;
    c->rope_style = a->rope;
    const int g4 = (a->keys & ARCH_READS_GEMMA4) != 0;
    /* gemma4's experts are optional: read where the file has expert_count */
    char ekey[128];
    int64_t ev;
    const int moe =
        arch_has_block(a, ARCH_BLOCK_MOE) &&
        (!g4 || gguf_get_int(f, arch_key(ekey, sizeof ekey, a, ARCH_KEY_EXPERT_COUNT), &ev) != CK_ENOTFOUND);
    if (g4) c->n_heads = c->n_kv_heads = 1; /* per layer: gguf_gemma4, once the layers exist */
    if ((rc = model_arch_int(f, a, ARCH_KEY_CONTEXT_LENGTH, 1, 0, &c->seq_len, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_EMBEDDING_LENGTH, 1, 0, &c->dim, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_BLOCK_COUNT, 1, 0, &c->n_layers, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_FEED_FORWARD_LENGTH, !moe || g4, 0, &c->hidden_dim, path, err,
                             errlen)) ||
        (!g4 && (rc = model_arch_int(f, a, ARCH_KEY_HEAD_COUNT, 1, 0, &c->n_heads, path, err, errlen))) ||
        (moe && (rc = model_expert_keys(f, a, c, path, err, errlen))))
        return rc;
    if (a->keys & ARCH_READS_DENSE_LEAD) { /* lfm2moe: the dense lead, the router's gating */
        int gating = 0;
        if ((rc = model_arch_int(f, a, ARCH_KEY_DENSE_LEAD, 0, 0, &c->n_dense_lead, path, err, errlen)) ||
            (rc = model_arch_int(f, a, ARCH_KEY_EXPERT_GATING, 1, 0, &gating, path, err, errlen)))
            return rc;
        if (c->n_dense_lead > c->n_layers || gating != ARCH_LLAMA_GATING_SIGMOID) {
            char key[128];
            if (c->n_dense_lead > c->n_layers)
                seterr(err, errlen, "%s: %s = %d is past the %d layers: not computed by the engine", path,
                       arch_key(key, sizeof key, a, ARCH_KEY_DENSE_LEAD), c->n_dense_lead, c->n_layers);
            else
                seterr(err, errlen, "%s: %s = %d: the engine computes %d (sigmoid) alone", path,
                       arch_key(key, sizeof key, a, ARCH_KEY_EXPERT_GATING), gating,
                       ARCH_LLAMA_GATING_SIGMOID);
            return CK_EUNSUPPORTED;
        }
    }
    const void *kv_arr = NULL; /* lfm2's per-layer head_count_kv */
    int kv_type = 0;
    if ((rc = a->keys & ARCH_READS_SHORTCONV
                  ? model_shortconv_keys(f, a, c, &kv_arr, &kv_type, path, err, errlen)
              : g4                          ? CK_OK
              : a->keys & ARCH_READS_MAMBA2 ? model_mamba2_keys(f, a, c, &kv_arr, &kv_type, path, err, errlen)
                                            : model_arch_int(f, a, ARCH_KEY_HEAD_COUNT_KV, 0, c->n_heads,
                                                             &c->n_kv_heads, path, err, errlen)))
        return rc;
    /* head_dim: key_length when given (Qwen3, Gemma-like shapes), else dim / heads */
    int kl = 0, vl = 0, rd = 0;
    if ((rc = model_arch_int(f, a, ARCH_KEY_KEY_LENGTH, 0, 0, &kl, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_VALUE_LENGTH, 0, kl, &vl, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_ROPE_DIMS, 0, 0, &rd, path, err, errlen)))
        return rc;
    if (kl != vl) {
        seterr(err, errlen, "%s: %s.%s %d differs from key_length %d: not computed by the engine", path,
               a->name, ARCH_KEY_VALUE_LENGTH, vl, kl);
        return CK_EUNSUPPORTED;
    }
    if (g4 && !kl) {
        seterr(err, errlen, "%s: gemma4 needs %s.%s (its full layers' head size)", path, a->name,
               ARCH_KEY_KEY_LENGTH);
        return CK_EFORMAT;
    }
    c->head_dim = kl;
    if ((rc = model_arch_float(f, a, ARCH_KEY_RMS_EPS, ARCH_DEFAULT_RMS_EPS, &c->norm_eps, path, err,
                               errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_ROPE_FREQ_BASE, ARCH_DEFAULT_ROPE_BASE, &c->rope_theta, path,
                               err, errlen)) ||
        (rc = model_rope_keys(f, a, c, path, err, errlen)) ||
        (rc = model_attn_temp_keys(f, a, c, path, err, errlen)))
        return rc;
    if (!c->no_rope_step) c->no_rope_step = a->no_rope_step; /* gguf_mamba2 may have set 1 */
    if (moe) {
        c->expert_gating = a->gating;
        c->expert_act = a->act;
    }
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] > MODEL_MAX_VOCAB) {
        seterr(err, errlen, "%s: token_embd.weight missing or not a 2-D tensor of at most %d rows", path,
               MODEL_MAX_VOCAB);
        return CK_EFORMAT;
    }
    c->vocab_size = (int)emb->ne[1];
    char why[200];
    if (model_config_check(c, why, sizeof why)) {
        seterr(err, errlen, "%s: %s", path, why);
        return CK_EFORMAT;
    }
    if (!c->head_dim) c->head_dim = c->dim / c->n_heads;
    if (rd && rd != c->head_dim) {
        seterr(err, errlen, "%s: %s.%s %d != head_dim %d (partial RoPE): not computed by the engine", path,
               a->name, ARCH_KEY_ROPE_DIMS, rd, c->head_dim);
        return CK_EUNSUPPORTED;
    }
    if ((rc = model_swa_keys(f, a, c, path, err, errlen)) ||
        (rc = gguf_known_tensors(f, a, c->n_layers, path, err, errlen)))
        return rc;
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    const uint64_t HDF = (uint64_t)c->head_dim; /* the full layers' (rope_freqs) */
    uint64_t E = (uint64_t)c->n_expert, FE = (uint64_t)c->expert_ffn;
    if ((rc = arch_weight(f, a, ARCH_T_TOKEN_EMBD, -1, D, V, 0, &m->tok_emb, path, err, errlen)) ||
        (rc = arch_weight(f, a, a->need[ARCH_T_TOKEN_EMBD_NORM] ? ARCH_T_TOKEN_EMBD_NORM : ARCH_T_OUTPUT_NORM,
                          -1, D, 0, 0, &m->out_norm, path, err, errlen)) ||
        (rc = arch_weight(f, a, ARCH_T_OUTPUT, -1, D, V, 0, &m->wcls, path, err, errlen)) ||
        (rc = arch_weight(f, a, ARCH_T_ROPE_FREQS, -1, HDF / 2, 0, 0, &m->rope_freqs, path, err, errlen)))
        return rc;
    if (!m->wcls.data) { /* no output.weight: the classifier is the embedding */
        m->tied = 1;
        m->wcls = m->tok_emb;
    }
    /* Tie the count to the file before it sizes an allocation: each layer
     * is nine tensors (eight in a short-convolution one), and the file
     * lists them all. */
    const int per_layer = a->keys & ARCH_READS_SHORTCONV ? 8 : MODEL_LAYER_TENSORS;
    if ((uint64_t)c->n_layers * (uint64_t)per_layer > (uint64_t)gguf_n_tensors(f)) {
        seterr(err, errlen, "%s: block_count %d needs %d tensors, the file has %d", path, c->n_layers,
               c->n_layers * per_layer, gguf_n_tensors(f));
        return CK_EFORMAT;
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return CK_ENOMEM;
    if (g4 && (rc = model_gemma4_keys(f, a, m, path, err, errlen))) return rc;
    const uint64_t PL = (uint64_t)c->n_embd_pl, LP = PL * (uint64_t)c->n_layers;
    if (g4 &&
        ((rc = arch_weight(f, a, ARCH_T_PLE_TOKEN_EMBD, -1, LP, V, 0, &m->ple_tok, path, err, errlen)) ||
         (rc = arch_weight(f, a, ARCH_T_PLE_MODEL_PROJ, -1, D, LP, 0, &m->ple_model, path, err, errlen)) ||
         (rc = arch_weight(f, a, ARCH_T_PLE_PROJ_NORM, -1, PL, 0, 0, &m->ple_norm, path, err, errlen))))
        return rc;
    if (g4 && (!m->ple_tok.n != !PL || !m->ple_model.n != !PL || !m->ple_norm.n != !PL)) {
        seterr(err, errlen, "%s: gemma4's per-layer embedding tensors and %s %llu disagree", path,
               ARCH_KEY_EMB_PER_LAYER, (unsigned long long)PL);
        return CK_EFORMAT;
    }
    /* Mamba2's shapes (all 0 elsewhere, where its tensors are ARCH_NO) */
    const uint64_t SDI = (uint64_t)c->ssm_d_inner, SG = (uint64_t)c->ssm_n_group,
                   SH = (uint64_t)c->ssm_n_head, SK = (uint64_t)c->ssm_d_conv,
                   SGN = SG * (uint64_t)c->ssm_d_state;
    /* the norm before the feed-forward: gpt-oss names it post_attention_norm
     * (and has no ffn_norm); gemma4's post_attention_norm is its own */
    const int ffn_norm = a->need[ARCH_T_FFN_NORM] == ARCH_NO ? ARCH_T_ATTN_POST_NORM : ARCH_T_FFN_NORM;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *ly = &m->layers[l];
        int nhl, nkvl, hdl;
        model_layer_geom(m, l, &nhl, &nkvl, &hdl);
        const uint64_t H = (uint64_t)nhl, HD = (uint64_t)hdl;
        const uint64_t Q = H * HD, KV = (uint64_t)nkvl * HD;
        struct {
            int t;
            uint64_t ne0, ne1, ne2;
            model_tensor *dst;
        } w[] = {
            {ARCH_T_ATTN_NORM, D, 0, 0, &ly->attn_norm},
            {ARCH_T_ATTN_Q, D, Q, 0, &ly->wq},
            {ARCH_T_ATTN_K, D, KV, 0, &ly->wk},
            {ARCH_T_ATTN_V, D, KV, 0, &ly->wv},
            {ARCH_T_ATTN_OUT, Q, D, 0, &ly->wo},
            {ffn_norm, D, 0, 0, &ly->ffn_norm},
            {ARCH_T_FFN_GATE, D, F, 0, &ly->w1},
            {ARCH_T_FFN_DOWN, F, D, 0, &ly->w2},
            {ARCH_T_FFN_UP, D, F, 0, &ly->w3},
            {ARCH_T_ATTN_Q_B, Q, 0, 0, &ly->bq},
            {ARCH_T_ATTN_K_B, KV, 0, 0, &ly->bk},
            {ARCH_T_ATTN_V_B, KV, 0, 0, &ly->bv},
            {ARCH_T_ATTN_Q_NORM, HD, 0, 0, &ly->q_norm},
            {ARCH_T_ATTN_K_NORM, HD, 0, 0, &ly->k_norm},
            {ARCH_T_FFN_GATE_INP, D, E, 0, &ly->router},
            {ARCH_T_FFN_GATE_EXPS, D, FE, E, &ly->gate_exps},
            {ARCH_T_FFN_UP_EXPS, D, FE, E, &ly->up_exps},
            {ARCH_T_FFN_DOWN_EXPS, FE, D, E, &ly->down_exps},
            {ARCH_T_ATTN_OUT_B, D, 0, 0, &ly->bo},
            {ARCH_T_ATTN_SINKS, H, 0, 0, &ly->sinks},
            {ARCH_T_FFN_GATE_INP_B, E, 0, 0, &ly->router_b},
            {ARCH_T_FFN_GATE_EXPS_B, FE, E, 0, &ly->gate_exps_b},
            {ARCH_T_FFN_UP_EXPS_B, FE, E, 0, &ly->up_exps_b},
            {ARCH_T_FFN_DOWN_EXPS_B, D, E, 0, &ly->down_exps_b},
            {ARCH_T_SHORTCONV_CONV, (uint64_t)c->conv_l, D, 0, &ly->sc_conv},
            {ARCH_T_SHORTCONV_IN, D, 3 * D, 0, &ly->sc_in},
            {ARCH_T_SHORTCONV_OUT, D, D, 0, &ly->sc_out},
            {ARCH_T_FFN_EXP_PROBS_B, E, 0, 0, &ly->probs_b},
            {ARCH_T_FFN_POST_NORM, D, 0, 0, &ly->ffn_post_norm},
            {ARCH_T_LAYER_OUT_SCALE, 1, 0, 0, &ly->out_scale},
            {ARCH_T_FFN_GATE_INP_S, D, 0, 0, &ly->router_scale},
            {ARCH_T_FFN_PRE_NORM_2, D, 0, 0, &ly->pre_norm_2},
            {ARCH_T_FFN_POST_NORM_1, D, 0, 0, &ly->post_norm_1},
            {ARCH_T_FFN_POST_NORM_2, D, 0, 0, &ly->post_norm_2},
            {ARCH_T_FFN_DOWN_EXPS_S, E, 0, 0, &ly->down_exps_s},
            {ARCH_T_PLE_INP_GATE, D, PL, 0, &ly->ple_gate},
            {ARCH_T_PLE_PROJ, PL, D, 0, &ly->ple_proj},
            {ARCH_T_PLE_POST_NORM, D, 0, 0, &ly->ple_post_norm},
            {ffn_norm == ARCH_T_FFN_NORM ? ARCH_T_ATTN_POST_NORM : ARCH_T_COUNT, D, 0, 0,
             &ly->attn_post_norm},
            {ARCH_T_SSM_IN, D, 2 * SDI + 2 * SGN + SH, 0, &ly->ssm_in},
            {ARCH_T_SSM_CONV1D, SK, SDI + 2 * SGN, 0, &ly->ssm_conv},
            {ARCH_T_SSM_CONV1D_B, SDI + 2 * SGN, 0, 0, &ly->ssm_conv_b},
            {ARCH_T_SSM_DT_B, SH, 0, 0, &ly->ssm_dt_b},
            {ARCH_T_SSM_A, 1, SH, 0, &ly->ssm_a},
            {ARCH_T_SSM_D, 1, SH, 0, &ly->ssm_d},
            {ARCH_T_SSM_NORM, SG ? SDI / SG : 0, SG, 0, &ly->ssm_norm},
            {ARCH_T_SSM_OUT, SDI, D, 0, &ly->ssm_out},
        };
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (w[i].t != ARCH_T_COUNT && (rc = arch_weight(f, a, w[i].t, l, w[i].ne0, w[i].ne1, w[i].ne2,
                                                            w[i].dst, path, err, errlen)))
                return rc;
        if (a->keys & ARCH_READS_SHORTCONV &&
            (rc = conv_layer_check(ly, l, kv_arr && model_arr_int_at(kv_type, kv_arr, (uint64_t)l) == 0, path,
                                   err, errlen)))
            return rc;
        if (a->keys & ARCH_READS_MAMBA2 &&
            (rc = ssm_layer_check(ly, l, kv_arr && model_arr_int_at(kv_type, kv_arr, (uint64_t)l) == 0, path,
                                  err, errlen)))
            return rc;
        if (a->keys & ARCH_READS_DENSE_LEAD &&
            (rc = dense_lead_check(ly, l, l >= c->n_dense_lead, path, err, errlen)))
            return rc;
        if (g4 && !ly->wv.data) ly->wv = (model_tensor){0}; /* V = K (gemma4's full layers) */
        if (g4 && ly->kv_src) /* a shared-KV layer: any K and V of its own go unused */
            ly->wk = ly->wv = ly->k_norm = (model_tensor){0};
        if (g4 && !ly->kv_src && (!ly->wk.data || !ly->k_norm.data)) {
            seterr(err, errlen, "%s: tensor 'blk.%d.%s' is missing", path, l,
                   arch_tensor_name(ly->wk.data ? ARCH_T_ATTN_K_NORM : ARCH_T_ATTN_K));
            return CK_EFORMAT;
        }
        if (g4 && (!ly->ple_gate.n != !PL || !ly->ple_proj.n != !PL || !ly->ple_post_norm.n != !PL)) {
            seterr(err, errlen, "%s: gemma4 layer %d's per-layer embedding tensors and %s %llu disagree",
                   path, l, ARCH_KEY_EMB_PER_LAYER, (unsigned long long)PL);
            return CK_EFORMAT;
        }
        if (g4) { /* a layer's experts: all their tensors, or none of them */
            const int r = ly->router.n != 0;
            const model_tensor *e[7] = {&ly->router_scale, &ly->gate_exps,   &ly->up_exps,    &ly->down_exps,
                                        &ly->pre_norm_2,   &ly->post_norm_1, &ly->post_norm_2};
            for (int i = 0; i < 7; i++)
                if ((e[i]->n != 0) != r) {
                    seterr(err, errlen,
                           "%s: gemma4 layer %d has %s ffn_gate_inp.weight but %s its other expert tensors "
                           "(ffn_gate_inp.scale, ffn_{gate,up,down}_exps, pre_ffw_norm_2, post_ffw_norm_1/2)",
                           path, l, r ? "an" : "no", r ? "not all of" : "some of");
                    return CK_EFORMAT;
                }
        }
        m->has_bias |= ly->bq.data || ly->bk.data || ly->bv.data;
        m->has_qk_norm |= ly->q_norm.data || ly->k_norm.data;
    }
    float freq[MODEL_MAX_HEAD_DIM / 2], mscale;
    if (model_rope_freqs(m, freq, &mscale)) {
        seterr(err, errlen, "%s: rope_freqs.weight holds a value that is not a positive finite number", path);
        return CK_EFORMAT;
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
        const model_tensor *x[MODEL_LAYER_EXTRAS];
        model_layer_extras(&m->layers[l], x);
        for (int i = 0; i < MODEL_LAYER_EXTRAS; i++)
            if (x[i]->n) h = tensor_hash(h, x[i]);
        const model_tensor *e[MODEL_LAYER_MOE];
        model_layer_moe(&m->layers[l], e);
        for (int i = 0; i < MODEL_LAYER_MOE; i++)
            if (e[i]->n) h = tensor_hash(h, e[i]);
        const model_tensor *sc[MODEL_LAYER_CONV];
        model_layer_conv(&m->layers[l], sc);
        for (int i = 0; i < MODEL_LAYER_CONV; i++)
            if (sc[i]->n) h = tensor_hash(h, sc[i]);
    }
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        const model_tensor *g[11] = {&ly->attn_post_norm, &ly->ffn_post_norm, &ly->out_scale,
                                     &ly->router_scale,   &ly->pre_norm_2,    &ly->post_norm_1,
                                     &ly->post_norm_2,    &ly->down_exps_s,   &ly->ple_gate,
                                     &ly->ple_proj,       &ly->ple_post_norm};
        for (int i = 0; i < 11; i++)
            if (g[i]->n) h = tensor_hash(h, g[i]);
    }
    if (m->rope_freqs.n) h = tensor_hash(h, &m->rope_freqs);
    if (m->ple_tok.n) h = tensor_hash(tensor_hash(tensor_hash(h, &m->ple_tok), &m->ple_model), &m->ple_norm);
    snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx", (unsigned long long)h);
}

/* -------------------------------------------------------------------- API */

int model_load(const char *path, const char *tokenizer_path, model **out, char *err, size_t errlen) {
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

int model_rope_freqs(const model *m, float *freq, float *mscale) {
    const model_config *c = &m->cfg;
    float ff[MODEL_MAX_HEAD_DIM / 2];
    const int half = c->head_dim / 2;
    if (m->rope_freqs.n) {
        if (m->rope_freqs.n != (uint64_t)half) return CK_EINVAL;
        int rc = quant_to_f32(m->rope_freqs.type, m->rope_freqs.data, ff, m->rope_freqs.n);
        if (rc) return rc;
        for (int i = 0; i < half; i++)
            if (!(ff[i] > 0 && ff[i] <= FLT_MAX))
                return CK_EFORMAT; /* divisors of the angle (gemma4's
                                                                       1e30: a pair left unturned) */
    }
    arch_rope_params p = {
        .n_dims = c->head_dim,
        .freq_base = c->rope_theta,
        .scaling = c->rope_scaling,
        .factor = c->rope_factor > 0 ? c->rope_factor : 1.0f,
        .orig_ctx = c->rope_orig_ctx ? c->rope_orig_ctx : c->seq_len,
        .attn_factor = c->rope_attn_factor > 0 ? c->rope_attn_factor : 1.0f,
        .ext_factor = c->yarn_ext_factor,
        .beta_fast = c->yarn_beta_fast,
        .beta_slow = c->yarn_beta_slow,
        .log_mul = c->yarn_log_mul,
    };
    arch_rope_freqs(&p, m->rope_freqs.n ? ff : NULL, freq, mscale);
    return CK_OK;
}

void model_rope_freqs_swa(const model *m, float *freq) {
    const model_config *c = &m->cfg;
    arch_rope_params p = {.n_dims = c->head_dim_swa,
                          .freq_base = c->rope_theta_swa,
                          .scaling = ARCH_SCALING_NONE,
                          .factor = 1.0f,
                          .orig_ctx = c->seq_len,
                          .attn_factor = 1.0f};
    float mscale;
    arch_rope_freqs(&p, NULL, freq, &mscale);
}

int model_weights_in_file_map(const model *m) { return m && m->format == MODEL_FMT_GGUF && m->gguf_; }
