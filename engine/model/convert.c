/* convert.c - GGUF export and synthetic models (convert.h). */
#include "convert.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "ck_err.h"
#include "gguf.h"
#include "quant.h"

static void fill_uniform(float *x, uint64_t n, float a, uint64_t *s);

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
static int add_f32(gguf_writer *w, bufs *bb, const char *name, const float *src, uint64_t cols, uint64_t rows,
                   int type) {
    if (quant_block_size(type) > 1 && cols % (uint64_t)quant_block_size(type)) type = QUANT_F16;
    uint64_t nb;
    int rc = quant_row_bytes(type, cols * rows, &nb);
    if (rc) return rc;
    void *dst = bufs_alloc(bb, (size_t)nb);
    if (!dst) return CK_ENOMEM;
    if ((rc = quant_from_f32(type, src, dst, cols * rows))) return rc;
    uint64_t ne[2] = {cols, rows};
    return gguf_writer_add_tensor(w, name, type, rows > 1 ? 2 : 1, ne, dst);
}

/* An expert tensor of E (rows x cols) matrices converted to `type`, one
 * expert at a time through tmp (rows * cols floats): each from src's expert
 * slice (model_expert) when src is given, else uniform in [-a, a] from *s.
 * Written 3-D, or 2-D when E is 1 (ggml drops trailing dimensions of 1,
 * and llama.cpp's reader takes it so). */
static int add_experts(gguf_writer *w, bufs *bb, const char *name, uint64_t cols, uint64_t rows, uint64_t E,
                       int type, const model_tensor *src, float a, uint64_t *s, float *tmp) {
    if (quant_block_size(type) > 1 && cols % (uint64_t)quant_block_size(type)) type = QUANT_F16;
    uint64_t nb, per;
    int rc = quant_row_bytes(type, cols * rows * E, &nb);
    if (rc || (rc = quant_row_bytes(type, cols * rows, &per))) return rc;
    unsigned char *dst = bufs_alloc(bb, (size_t)nb);
    if (!dst) return CK_ENOMEM;
    for (uint64_t e = 0; e < E; e++) {
        if (src) {
            model_tensor v = model_expert(src, (int)E, (int)e);
            if (!v.data || v.n != cols * rows) return CK_EINVAL;
            if ((rc = quant_to_f32(v.type, v.data, tmp, v.n))) return rc;
        } else {
            fill_uniform(tmp, cols * rows, a, s);
        }
        if ((rc = quant_from_f32(type, tmp, dst + (size_t)(e * per), cols * rows))) return rc;
    }
    uint64_t ne[3] = {cols, rows, E};
    return gguf_writer_add_tensor(w, name, type, E > 1 ? 3 : 2, ne, dst);
}

/* Same, from a model tensor of any type. */
static int add_tensor(gguf_writer *w, bufs *bb, const char *name, const model_tensor *t, uint64_t cols,
                      uint64_t rows, int type) {
    float *f = malloc((size_t)(cols * rows) * sizeof *f);
    if (!f) return CK_ENOMEM;
    int rc = quant_to_f32(t->type, t->data, f, cols * rows);
    if (!rc) rc = add_f32(w, bb, name, f, cols, rows, type);
    free(f);
    return rc;
}

/* The type of a model's matrices other than the experts: `type`, but
 * Q8_0 in a model with experts written MXFP4, as llama.cpp's MXFP4_MOE
 * quantizes them (experts MXFP4, the other matrices Q8_0; the router and
 * the vectors stay f32 either way). */
static int dense_type(int type, int has_experts) {
    return type == QUANT_MXFP4 && has_experts ? QUANT_Q8_0 : type;
}

static int file_type_of(int type) {
    /* llama.cpp's general.file_type: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32,
     * MOSTLY_MXFP4_MOE 38 (llama.cpp's only MXFP4 one; informational) */
    switch (type) {
    case QUANT_F16: return 1;
    case QUANT_Q8_0: return 7;
    case QUANT_BF16: return 32;
    case QUANT_MXFP4: return 38;
    default: return 0;
    }
}

static int write_hparams(gguf_writer *w, const model_config *c, const char *name, int type, int stop_on_bos) {
    const arch_info *a = arch_by_id(c->arch ? c->arch : ARCH_LLAMA);
    if (!a) return CK_EINVAL;
    char k[128];
    int rc = 0;
#define KEY(suffix) arch_key(k, sizeof k, a, suffix)
    rc |= gguf_writer_set_str(w, "general.architecture", a->name);
    rc |= gguf_writer_set_str(w, "general.name", name);
    rc |= gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type_of(type));
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_CONTEXT_LENGTH), (uint32_t)c->seq_len);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EMBEDDING_LENGTH), (uint32_t)c->dim);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_BLOCK_COUNT), (uint32_t)c->n_layers);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_FEED_FORWARD_LENGTH), (uint32_t)c->hidden_dim);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_ROPE_DIMS), (uint32_t)c->head_dim);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_HEAD_COUNT), (uint32_t)c->n_heads);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_HEAD_COUNT_KV), (uint32_t)c->n_kv_heads);
    if (c->head_dim * c->n_heads != c->dim) {
        rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_KEY_LENGTH), (uint32_t)c->head_dim);
        rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_VALUE_LENGTH), (uint32_t)c->head_dim);
    }
    rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_RMS_EPS), c->norm_eps);
    rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_ROPE_FREQ_BASE), c->rope_theta);
    if (c->rope_scaling != ARCH_SCALING_NONE) {
        rc |= gguf_writer_set_str(w, KEY(ARCH_KEY_ROPE_SCALING_TYPE), arch_scaling_name(c->rope_scaling));
        rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_ROPE_SCALING_FACTOR), c->rope_factor);
        if (c->rope_orig_ctx)
            rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_ROPE_SCALING_ORIG_CTX), (uint32_t)c->rope_orig_ctx);
    }
    if (c->rope_attn_factor != 0 && c->rope_attn_factor != 1)
        rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_ROPE_SCALING_ATTN_FACTOR), c->rope_attn_factor);
    if (c->rope_scaling == ARCH_SCALING_YARN) {
        /* written when not llama.cpp's default, so its llama loader (which
         * reads none of them) and ours agree on files with the defaults */
        if (c->yarn_ext_factor != 0 && c->yarn_ext_factor != 1)
            rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_YARN_EXT_FACTOR), c->yarn_ext_factor);
        if (c->yarn_beta_fast != 0 && c->yarn_beta_fast != ARCH_DEFAULT_BETA_FAST)
            rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_YARN_BETA_FAST), c->yarn_beta_fast);
        if (c->yarn_beta_slow != 0 && c->yarn_beta_slow != ARCH_DEFAULT_BETA_SLOW)
            rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_YARN_BETA_SLOW), c->yarn_beta_slow);
    }
    /* mistral3's keys, where the architecture reads them (arch.h) and they are set */
    if ((a->keys & ARCH_READS_YARN_LOG_MUL) && c->yarn_log_mul != 0)
        rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_YARN_LOG_MUL), c->yarn_log_mul);
    if ((a->keys & ARCH_READS_ATTN_TEMP) && c->attn_temp_scale != 0)
        rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_ATTN_TEMP_SCALE), c->attn_temp_scale);
    if (c->n_expert) {
        rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EXPERT_COUNT), (uint32_t)c->n_expert);
        rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EXPERT_USED_COUNT), (uint32_t)c->n_expert_used);
        rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EXPERT_FFN), (uint32_t)c->expert_ffn);
    }
    /* the window where the architecture reads one; the pattern only when
     * not the row's default, as llama.cpp's converter leaves it out */
    if ((a->keys & ARCH_READS_SWA) && c->n_swa) {
        rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_SWA), (uint32_t)c->n_swa);
        if (c->swa_period != a->swa_period)
            rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_SWA_PATTERN), (uint32_t)c->swa_period);
    }
    rc |= gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)c->vocab_size);
    rc |= gguf_writer_set_bool(w, "confkv.stop_on_bos", stop_on_bos);
#undef KEY
    return rc ? CK_ENOMEM : CK_OK;
}

static int copy_tokenizer_keys(gguf_writer *w, const gguf_file *f);

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
    if (!rc)
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, lens,
                                     (uint64_t)V);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)V);
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)V);
    if (!rc && tok_bos(t) >= 0)
        rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)tok_bos(t));
    if (!rc && tok_eos(t) >= 0)
        rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)tok_eos(t));
    if (!rc && tok_unk(t) >= 0)
        rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)tok_unk(t));
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
    /* Files of the other block types come from llama.cpp's quantizer:
     * confkv reads them but does not write them. */
    if (!quant_can_encode(type)) {
        const char *name = quant_type_name(type);
        snprintf(err, errlen, "convert: cannot write %s%s%d%s (writes f32, f16, bf16, q8_0, mxfp4)",
                 name ? name : "type ", name ? " (" : "", type, name ? ")" : "");
        return CK_EUNSUPPORTED;
    }
    const model_config *c = &m->cfg;
    if (c->conv_l || c->ssm_d_conv) {
        snprintf(err, errlen,
                 "convert: architecture %s (short-convolution or Mamba2 layers) is not written by the "
                 "converter; llama.cpp's writes it",
                 arch_by_id(c->arch) ? arch_by_id(c->arch)->name : "?");
        return CK_EUNSUPPORTED;
    }
    gguf_writer *w = NULL;
    bufs bb = {0};
    int rc = gguf_writer_new(&w);
    if (rc) goto out;
    /* A GGUF source keeps its own tokenizer keys (a BPE vocabulary's merges and
     * pre-tokenizer, the chat template): rebuilt from the tokenizer, they
     * would be SentencePiece's. A llama2.c source has only pieces and scores. */
    const gguf_file *src = m->format == MODEL_FMT_GGUF ? (const gguf_file *)m->gguf_ : NULL;
    if ((rc = write_hparams(w, c, m->name, type, m->stop_on_bos)) ||
        (rc = src ? copy_tokenizer_keys(w, src) : write_vocab(w, m->tok)))
        goto out;
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    uint64_t Q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    uint64_t KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    const int dtype = dense_type(type, c->n_expert > 0);
    if ((rc = add_tensor(w, &bb, "token_embd.weight", &m->tok_emb, D, V, dtype))) goto out;
    const arch_info *ai = arch_by_id(c->arch ? c->arch : ARCH_LLAMA);
    /* gpt-oss's norm before the experts is post_attention_norm */
    const char *ffn_norm = ai && ai->need[ARCH_T_ATTN_POST_NORM] ? "post_attention_norm" : "ffn_norm";
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        struct {
            const char *n;
            const model_tensor *t;
            uint64_t cols, rows;
            int ty;
        } t[] = {
            {"attn_norm", &ly->attn_norm, D, 1, QUANT_F32},
            {"attn_q", &ly->wq, D, Q, dtype},
            {"attn_k", &ly->wk, D, KV, dtype},
            {"attn_v", &ly->wv, D, KV, dtype},
            {"attn_output", &ly->wo, Q, D, dtype},
            {ffn_norm, &ly->ffn_norm, D, 1, QUANT_F32},
            {"ffn_gate", &ly->w1, D, F, type},
            {"ffn_down", &ly->w2, F, D, type},
            {"ffn_up", &ly->w3, D, F, type},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (!t[i].t->n) continue; /* a MoE layer's dense feed-forward */
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, t[i].n);
            if ((rc = add_tensor(w, &bb, name, t[i].t, t[i].cols, t[i].rows, t[i].ty))) goto out;
        }
        if (ly->router.n) { /* the router stays f32, as llama.cpp's quantizer leaves it */
            uint64_t E = (uint64_t)c->n_expert, FE = (uint64_t)c->expert_ffn;
            char name[96];
            arch_tensor_file_name(name, sizeof name, ARCH_T_FFN_GATE_INP, l);
            if ((rc = add_tensor(w, &bb, name, &ly->router, D, E, QUANT_F32))) goto out;
            struct {
                int at;
                const model_tensor *t;
                uint64_t cols, rows;
            } e[] = {{ARCH_T_FFN_GATE_EXPS, &ly->gate_exps, D, FE},
                     {ARCH_T_FFN_UP_EXPS, &ly->up_exps, D, FE},
                     {ARCH_T_FFN_DOWN_EXPS, &ly->down_exps, FE, D}};
            rc = CK_ENOMEM;
            float *tmp = malloc((size_t)(D * FE) * sizeof *tmp);
            for (size_t i = 0; tmp && i < sizeof e / sizeof e[0]; i++) {
                arch_tensor_file_name(name, sizeof name, e[i].at, l);
                if ((rc = add_experts(w, &bb, name, e[i].cols, e[i].rows, E, type, e[i].t, 0, NULL, tmp)))
                    break;
            }
            free(tmp);
            if (rc) goto out;
        }
        /* the optional ones, in f32 as llama.cpp's converters write them */
        struct {
            int at;
            const model_tensor *t;
            uint64_t cols, rows;
        } x[] = {
            {ARCH_T_ATTN_Q_B, &ly->bq, Q, 1},
            {ARCH_T_ATTN_K_B, &ly->bk, KV, 1},
            {ARCH_T_ATTN_V_B, &ly->bv, KV, 1},
            {ARCH_T_ATTN_Q_NORM, &ly->q_norm, (uint64_t)c->head_dim, 1},
            {ARCH_T_ATTN_K_NORM, &ly->k_norm, (uint64_t)c->head_dim, 1},
            {ARCH_T_ATTN_OUT_B, &ly->bo, D, 1},
            {ARCH_T_ATTN_SINKS, &ly->sinks, (uint64_t)c->n_heads, 1},
            {ARCH_T_FFN_GATE_INP_B, &ly->router_b, (uint64_t)c->n_expert, 1},
            {ARCH_T_FFN_GATE_EXPS_B, &ly->gate_exps_b, (uint64_t)c->expert_ffn, (uint64_t)c->n_expert},
            {ARCH_T_FFN_UP_EXPS_B, &ly->up_exps_b, (uint64_t)c->expert_ffn, (uint64_t)c->n_expert},
            {ARCH_T_FFN_DOWN_EXPS_B, &ly->down_exps_b, D, (uint64_t)c->n_expert},
        };
        for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
            if (!x[i].t->n) continue;
            char name[96];
            arch_tensor_file_name(name, sizeof name, x[i].at, l);
            if ((rc = add_tensor(w, &bb, name, x[i].t, x[i].cols, x[i].rows, QUANT_F32))) goto out;
        }
    }
    if (m->rope_freqs.n &&
        (rc = add_tensor(w, &bb, "rope_freqs.weight", &m->rope_freqs, m->rope_freqs.n, 1, QUANT_F32)))
        goto out;
    if ((rc = add_tensor(w, &bb, "output_norm.weight", &m->out_norm, D, 1, QUANT_F32))) goto out;
    if (!m->tied && (rc = add_tensor(w, &bb, "output.weight", &m->wcls, D, V, dtype))) goto out;
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
    char(*pieces)[16] = calloc((size_t)V, sizeof *pieces);
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
                if (alpha[d] == '_') {
                    memcpy(p + o, "\xe2\x96\x81", 3);
                    o += 3;
                } else
                    p[o++] = alpha[d];
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

/* Copies every tokenizer.* key of f into w (pieces, scores, types, merges,
 * special ids, flags, pre-tokenizer, chat template): what the tokenizer of a
 * re-typed or synthetic model reads, byte for byte. */
static int copy_tokenizer_keys(gguf_writer *w, const gguf_file *f) {
    const char **ss = NULL;
    size_t *lens = NULL;
    int rc = CK_OK, et;
    uint64_t n = 0;
    for (int i = 0; i < gguf_n_kv(f) && !rc; i++) {
        const char *key = gguf_key_at(f, i);
        if (strncmp(key, "tokenizer.", 10)) continue;
        int type = gguf_kv_type(f, i);
        if (type == GGUF_TYPE_STRING) {
            const char *s;
            size_t len;
            char *str;
            if ((rc = gguf_get_str(f, key, &s, &len))) break;
            if (memchr(s, 0, len) || !(str = malloc(len + 1))) {
                rc = memchr(s, 0, len) ? CK_EFORMAT : CK_ENOMEM;
                break;
            }
            memcpy(str, s, len);
            str[len] = 0;
            rc = gguf_writer_set_str(w, key, str);
            free(str);
        } else if (type == GGUF_TYPE_ARRAY) {
            const void *data;
            if ((rc = gguf_get_arr(f, key, &et, &n, &data))) break;
            if (et != GGUF_TYPE_STRING) {
                rc = gguf_writer_set_arr(w, key, et, data, n);
                continue;
            }
            const size_t cnt = (size_t)(n ? n : 1);
            if (!(ss = malloc(cnt * sizeof *ss)) || !(lens = malloc(cnt * sizeof *lens))) {
                rc = CK_ENOMEM;
                break;
            }
            for (uint64_t j = 0; j < n && !rc; j++) rc = gguf_get_arr_str(f, key, j, &ss[j], &lens[j]);
            if (!rc) rc = gguf_writer_set_arr_str(w, key, ss, lens, n);
            free(ss);
            free(lens);
            ss = NULL;
            lens = NULL;
        } else {
            const void *v;
            if (!(rc = gguf_get_val(f, key, &type, &v))) rc = gguf_writer_set_val(w, key, type, v);
        }
    }
    free(ss);
    free(lens);
    return rc;
}

/* Copies every tokenizer.* key of the GGUF at path into w, and sets *n_vocab
 * to its tokenizer.ggml.tokens count. */
static int copy_vocab(gguf_writer *w, const char *path, int *n_vocab, char *err, size_t errlen) {
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, errlen);
    if (rc) return rc;
    int et;
    uint64_t n = 0;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, NULL) || et != GGUF_TYPE_STRING || n < 3 ||
        n > (1u << 22)) {
        snprintf(err, errlen, "synth: %s: tokenizer.ggml.tokens missing, not strings, or not 3..%d of them",
                 path, 1 << 22);
        gguf_close(f);
        return CK_EFORMAT;
    }
    *n_vocab = (int)n;
    if ((rc = copy_tokenizer_keys(w, f)))
        snprintf(err, errlen, "synth: copying the tokenizer keys of %s: %s", path, ck_strerror(rc));
    gguf_close(f);
    return rc;
}

int convert_synth(const synth_params *p, const char *path, char *err, size_t errlen) {
    model_config c = {.dim = p->dim,
                      .hidden_dim = p->hidden_dim,
                      .n_layers = p->n_layers,
                      .n_heads = p->n_heads,
                      .n_kv_heads = p->n_kv_heads ? p->n_kv_heads : p->n_heads,
                      .vocab_size = p->vocab_size,
                      .seq_len = p->ctx,
                      .norm_eps = 1e-5f,
                      .rope_theta = p->rope_theta > 0 ? p->rope_theta : 10000.0f,
                      .head_dim = p->head_dim,
                      .arch = p->arch ? p->arch : ARCH_LLAMA,
                      .rope_scaling = p->rope_scaling,
                      .rope_factor = p->rope_factor,
                      .rope_orig_ctx = p->rope_orig_ctx,
                      .rope_attn_factor = p->rope_attn_factor,
                      .yarn_ext_factor = p->yarn_ext_factor,
                      .yarn_beta_fast = p->yarn_beta_fast,
                      .yarn_beta_slow = p->yarn_beta_slow,
                      .yarn_log_mul = p->yarn_log_mul,
                      .attn_temp_scale = p->attn_temp_scale,
                      .attn_temp_floor = p->rope_orig_ctx ? p->rope_orig_ctx : p->ctx};
    const arch_info *a = arch_by_id(c.arch);
    if (!a) {
        snprintf(err, errlen, "synth: unknown architecture id %d (%s)", p->arch, arch_names());
        return CK_EINVAL;
    }
    if (c.rope_scaling < ARCH_SCALING_NONE || c.rope_scaling > ARCH_SCALING_YARN ||
        (c.rope_scaling != ARCH_SCALING_NONE && !(c.rope_factor > 0))) {
        snprintf(err, errlen, "synth: rope scaling %s needs a factor > 0", arch_scaling_name(c.rope_scaling));
        return CK_EINVAL;
    }
    if ((p->yarn_log_mul != 0 && !(a->keys & ARCH_READS_YARN_LOG_MUL)) ||
        (p->attn_temp_scale != 0 && !(a->keys & ARCH_READS_ATTN_TEMP))) {
        snprintf(err, errlen, "synth: architecture %s reads no %s", a->name,
                 p->yarn_log_mul != 0 ? ARCH_KEY_YARN_LOG_MUL : ARCH_KEY_ATTN_TEMP_SCALE);
        return CK_EINVAL;
    }
    const int moe = arch_has_block(a, ARCH_BLOCK_MOE);
    if (moe != (p->n_expert > 0) || (!moe && (p->n_expert_used || p->expert_ffn))) {
        snprintf(err, errlen, "synth: architecture %s %s", a->name,
                 moe ? "needs experts (n_expert, n_expert_used)" : "has no experts");
        return CK_EINVAL;
    }
    if (moe) {
        c.n_expert = p->n_expert;
        c.n_expert_used = p->n_expert_used;
        c.expert_ffn =
            p->expert_ffn ? p->expert_ffn : (p->n_expert_used ? p->hidden_dim / p->n_expert_used : 0);
    }
    if (p->rope_freqs && a->need[ARCH_T_ROPE_FREQS] == ARCH_NO) {
        snprintf(err, errlen, "synth: architecture %s has no rope_freqs.weight", a->name);
        return CK_EINVAL;
    }
    if (p->tied && a->need[ARCH_T_OUTPUT] == ARCH_REQUIRED) {
        snprintf(err, errlen, "synth: architecture %s requires output.weight (no tied classifier)", a->name);
        return CK_EINVAL;
    }
    const int swa = (a->keys & ARCH_READS_SWA) != 0;
    if (swa != (p->n_swa > 0) || p->swa_period < -1 || (!swa && p->swa_period)) {
        snprintf(err, errlen, "synth: architecture %s %s", a->name,
                 swa ? "needs a sliding window (n_swa > 0, period >= -1)" : "has no sliding window");
        return CK_EINVAL;
    }
    const int conv = (a->keys & ARCH_READS_SHORTCONV) != 0, ssm = (a->keys & ARCH_READS_MAMBA2) != 0;
    if (!ssm && (p->ssm_d_state || p->ssm_n_group || p->ssm_n_head || p->ssm_d_conv)) {
        snprintf(err, errlen, "synth: architecture %s has no Mamba2 layers", a->name);
        return CK_EINVAL;
    }
    if ((!conv && (p->conv_l || (p->attn_layers && !ssm))) ||
        (conv && (p->conv_l == 1 || p->conv_l < 0 || p->conv_l > ARCH_MAX_CONV_L))) {
        snprintf(err, errlen, "synth: architecture %s %s", a->name,
                 conv ? "needs conv_l in 2..16" : "has no short-convolution layers");
        return CK_EINVAL;
    }
    const int lead = (a->keys & ARCH_READS_DENSE_LEAD) != 0;
    if ((!lead && p->n_dense_lead) || p->n_dense_lead < 0 || p->n_dense_lead > p->n_layers) {
        snprintf(err, errlen, "synth: architecture %s %s", a->name,
                 lead ? "needs n_dense_lead in 0..n_layers" : "has no leading dense layers");
        return CK_EINVAL;
    }
    c.n_dense_lead = p->n_dense_lead;
    if (conv) {
        c.conv_l = p->conv_l ? p->conv_l : 3;
        for (int l = 0; l < c.n_layers; l++) c.n_conv_layers += !synth_lfm2_attn(p->attn_layers, l);
    }
    if (ssm) { /* granitehybrid: Mamba2 where lfm2 has convolutions, Granite's scalars */
        c.ssm_d_conv = p->ssm_d_conv ? p->ssm_d_conv : 4;
        c.ssm_d_inner = 2 * c.dim;
        c.ssm_d_state = p->ssm_d_state ? p->ssm_d_state : 16;
        c.ssm_n_group = p->ssm_n_group ? p->ssm_n_group : 2;
        c.ssm_n_head = p->ssm_n_head ? p->ssm_n_head : c.ssm_d_inner / 16;
        if (c.ssm_d_conv < 2 || c.ssm_d_conv > ARCH_MAX_CONV_L || c.ssm_d_state < 1 ||
            c.ssm_d_state > ARCH_MAX_SSM_STATE || c.ssm_n_group < 1 || c.ssm_n_head < 1 ||
            c.ssm_d_inner % c.ssm_n_head || c.ssm_n_head % c.ssm_n_group) {
            snprintf(err, errlen,
                     "synth: Mamba2 conv_kernel %d (2..%d), state_size %d (1..%d), time_step_rank %d (a "
                     "divisor of 2 dim = %d), group_count %d (a divisor of time_step_rank)",
                     c.ssm_d_conv, ARCH_MAX_CONV_L, c.ssm_d_state, ARCH_MAX_SSM_STATE, c.ssm_n_head,
                     c.ssm_d_inner, c.ssm_n_group);
            return CK_EINVAL;
        }
        for (int l = 0; l < c.n_layers; l++) c.n_ssm_layers += !synth_lfm2_attn(p->attn_layers, l);
        c.no_rope_step = 1;
        c.embd_scale = 4.0f, c.resid_scale = 0.5f, c.logit_scale = 6.0f;
    }
    c.n_swa = p->n_swa;
    c.swa_period = p->swa_period > 0 ? p->swa_period : p->swa_period < 0 ? 0 : a->swa_period;
    c.expert_gating = moe ? a->gating : 0;
    c.expert_act = moe ? a->act : 0;
    gguf_writer *w = NULL;
    bufs bb = {0};
    float *tmp = NULL;
    uint64_t s = p->seed;
    int rc = gguf_writer_new(&w);
    if (rc) goto out;
    if (p->vocab_from && (rc = copy_vocab(w, p->vocab_from, &c.vocab_size, err, errlen))) goto done;
    char why[200];
    if (model_config_check(&c, why, sizeof why)) {
        snprintf(err, errlen, "synth: %s", why);
        rc = CK_EINVAL;
        goto done;
    }
    if (!p->vocab_from && c.vocab_size < 259 + 95) {
        snprintf(err, errlen, "synth: vocab %d is too small (at least 354: controls, bytes, characters)",
                 c.vocab_size);
        rc = CK_EINVAL;
        goto done;
    }
    if (!p->vocab_from && c.vocab_size > 259 + 95 + 1 + 27 * 27 + 27 * 27 * 27 + 27 * 27 * 27 * 27) {
        snprintf(err, errlen, "synth: vocab %d is larger than the n-gram vocabulary can fill", c.vocab_size);
        rc = CK_EINVAL;
        goto done;
    }
    if (!quant_can_encode(p->type)) {
        const char *tn = quant_type_name(p->type);
        snprintf(err, errlen, "synth: cannot write %s%s%d%s (writes f32, f16, bf16, q8_0, mxfp4)",
                 tn ? tn : "type ", tn ? " (" : "", p->type, tn ? ")" : "");
        rc = CK_EUNSUPPORTED;
        goto done;
    }
    if (!c.head_dim) c.head_dim = c.dim / c.n_heads;
    char name[96];
    snprintf(name, sizeof name, "synth-%s-d%d-l%d-h%d-kv%d-hd%d-f%d-v%d", a->name, c.dim, c.n_layers,
             c.n_heads, c.n_kv_heads, c.head_dim, moe ? c.expert_ffn : c.hidden_dim, c.vocab_size);
    if (moe) {
        size_t len = strlen(name);
        snprintf(name + len, sizeof name - len, "-e%d-k%d", c.n_expert, c.n_expert_used);
    }
    if ((rc = write_hparams(w, &c, name, p->type, 0)) ||
        (!p->vocab_from && (rc = synth_vocab(w, c.vocab_size))))
        goto out;
    if (conv || ssm) { /* head_count_kv per layer: 0 for a recurrent layer */
        char k[128];
        uint32_t kv[MODEL_MAX_LAYERS];
        for (int l = 0; l < c.n_layers; l++)
            kv[l] = synth_lfm2_attn(p->attn_layers, l) ? (uint32_t)c.n_kv_heads : 0;
        if ((conv && gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_SHORTCONV_L_CACHE),
                                         (uint32_t)c.conv_l)) ||
            gguf_writer_set_arr(w, arch_key(k, sizeof k, a, ARCH_KEY_HEAD_COUNT_KV), GGUF_TYPE_UINT32, kv,
                                (uint64_t)c.n_layers)) {
            rc = CK_ENOMEM;
            goto out;
        }
    }
    if (ssm) {
        char k[128];
        c.attn_scale = 1.0f / (float)(c.head_dim ? c.head_dim : c.dim / c.n_heads);
        if (gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_SSM_CONV), (uint32_t)c.ssm_d_conv) ||
            gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_SSM_INNER), (uint32_t)c.ssm_d_inner) ||
            gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_SSM_STATE), (uint32_t)c.ssm_d_state) ||
            gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_SSM_GROUPS), (uint32_t)c.ssm_n_group) ||
            gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_SSM_HEADS), (uint32_t)c.ssm_n_head) ||
            gguf_writer_set_bool(w, arch_key(k, sizeof k, a, ARCH_KEY_ROPE_FINETUNED), 0) ||
            gguf_writer_set_f32(w, arch_key(k, sizeof k, a, ARCH_KEY_EMBD_SCALE), c.embd_scale) ||
            gguf_writer_set_f32(w, arch_key(k, sizeof k, a, ARCH_KEY_RESID_SCALE), c.resid_scale) ||
            gguf_writer_set_f32(w, arch_key(k, sizeof k, a, ARCH_KEY_ATTN_SCALE), c.attn_scale) ||
            gguf_writer_set_f32(w, arch_key(k, sizeof k, a, ARCH_KEY_LOGIT_SCALE), c.logit_scale)) {
            rc = CK_ENOMEM;
            goto out;
        }
    }
    if (lead) { /* lfm2moe: the dense lead, llama.cpp's sigmoid gating */
        char k[128];
        if (gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_DENSE_LEAD), (uint32_t)c.n_dense_lead) ||
            gguf_writer_set_u32(w, arch_key(k, sizeof k, a, ARCH_KEY_EXPERT_GATING),
                                ARCH_LLAMA_GATING_SIGMOID)) {
            rc = CK_ENOMEM;
            goto out;
        }
    }
    uint64_t D = (uint64_t)c.dim, F = (uint64_t)c.hidden_dim, V = (uint64_t)c.vocab_size;
    uint64_t HD = (uint64_t)c.head_dim;
    uint64_t Q = (uint64_t)c.n_heads * HD;
    uint64_t KV = (uint64_t)c.n_kv_heads * HD;
    uint64_t E = (uint64_t)c.n_expert, FE = (uint64_t)c.expert_ffn;
    uint64_t biggest = V * D > F * D ? V * D : F * D;
    if (Q * D > biggest) biggest = Q * D;         /* attn_q, attn_output: more than V * D for a small vocab */
    if (3 * D * D > biggest) biggest = 3 * D * D; /* lfm2's in_proj */
    const uint64_t SDI = (uint64_t)c.ssm_d_inner, SGN = (uint64_t)c.ssm_n_group * (uint64_t)c.ssm_d_state,
                   SH = (uint64_t)c.ssm_n_head, SNC = SDI + 2 * SGN, SIN = 2 * SDI + 2 * SGN + SH;
    if (SIN * D > biggest) biggest = SIN * D; /* granitehybrid's ssm_in */
    if (SNC * (uint64_t)c.ssm_d_conv > biggest) biggest = SNC * (uint64_t)c.ssm_d_conv;
    if (E * D > biggest) biggest = E * D;   /* the router */
    if (FE * D > biggest) biggest = FE * D; /* one expert's matrix */
    if (E * FE > biggest) biggest = E * FE; /* the experts' gate and up biases */
    rc = CK_ENOMEM;
    if (!(tmp = malloc((size_t)biggest * sizeof *tmp))) goto out;
    /* Variance 1/fan_in keeps activations O(1) through the layers. */
    const int dtype = dense_type(p->type, moe);
    fill_uniform(tmp, V * D, 1.0f, &s);
    if ((rc = add_f32(w, &bb, "token_embd.weight", tmp, D, V, dtype))) goto out;
    if (p->rope_freqs) {
        arch_llama3_freq_factors(c.head_dim, c.rope_theta, 8.0f, 1.0f, 4.0f, 8192, tmp);
        if ((rc = add_f32(w, &bb, "rope_freqs.weight", tmp, HD / 2, 1, QUANT_F32))) goto out;
    }
    /* gpt-oss's norm before the experts is post_attention_norm */
    const char *ffn_norm = a->need[ARCH_T_ATTN_POST_NORM] ? "post_attention_norm" : "ffn_norm";
    /* gpt-oss's experts: gate and up outputs of standard deviation 3, so
     * that its activation's clamp at +-7 bites now and then (as it does in
     * the real model) and a backend without it is seen to differ */
    const float gate_up_gain = a->act == ARCH_ACT_SWIGLU_OAI ? 3.0f : 1.0f;
    for (int l = 0; l < c.n_layers; l++) {
        struct {
            const char *n;
            uint64_t cols, rows;
        } t[] = {
            {"attn_norm", D, 1}, {"attn_q", D, Q},      {"attn_k", D, KV},
            {"attn_v", D, KV},   {"attn_output", Q, D}, {ffn_norm, D, 1},
            {"ffn_gate", D, F},  {"ffn_down", F, D},    {"ffn_up", D, F},
        };
        /* lfm2's convolution layer: its three tensors in the place of attention's four */
        const int conv_layer = conv && !synth_lfm2_attn(p->attn_layers, l);
        const int ssm_layer = ssm && !synth_lfm2_attn(p->attn_layers, l); /* granitehybrid's Mamba2 */
        const int layer_moe = moe && l >= c.n_dense_lead; /* lfm2moe: experts after the dense lead */
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (layer_moe && !strncmp(t[i].n, "ffn_", 4) && strcmp(t[i].n, "ffn_norm"))
                continue; /* experts */
            if ((conv_layer || ssm_layer) && i >= 1 && i <= 4) continue;
            char tn[96];
            snprintf(tn, sizeof tn, "blk.%d.%s.weight", l, t[i].n);
            int norm = t[i].rows == 1;
            if (norm)
                for (uint64_t k = 0; k < t[i].cols; k++) tmp[k] = 1.0f;
            else
                fill_uniform(tmp, t[i].cols * t[i].rows, sqrtf(3.0f / (float)t[i].cols), &s);
            if ((rc = add_f32(w, &bb, tn, tmp, t[i].cols, t[i].rows, norm ? QUANT_F32 : dtype))) goto out;
        }
        if (conv_layer) { /* taps of variance about 1 / conv_l; in_proj, out_proj as the others */
            struct {
                int at;
                uint64_t cols, rows;
            } sc[] = {{ARCH_T_SHORTCONV_CONV, (uint64_t)c.conv_l, D},
                      {ARCH_T_SHORTCONV_IN, D, 3 * D},
                      {ARCH_T_SHORTCONV_OUT, D, D}};
            for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
                char tn[96];
                arch_tensor_file_name(tn, sizeof tn, sc[i].at, l);
                fill_uniform(tmp, sc[i].cols * sc[i].rows, sqrtf(3.0f / (float)sc[i].cols), &s);
                if ((rc = add_f32(w, &bb, tn, tmp, sc[i].cols, sc[i].rows, i ? dtype : QUANT_F32))) goto out;
            }
        }
        if (ssm_layer) { /* Mamba2: taps and their bias; dt_bias in [-2, 1] and A in -[1, 4.5]
                            (decays exp(softplus(dt) A) from near 0 to near 1); D and the
                            grouped norm around 1, unequal so a mix-up shows */
            struct {
                int at;
                uint64_t cols, rows;
                float a, base;
                int mat;
            } m[] = {
                {ARCH_T_SSM_IN, D, SIN, sqrtf(3.0f / (float)D), 0, 1},
                {ARCH_T_SSM_CONV1D, (uint64_t)c.ssm_d_conv, SNC, sqrtf(3.0f / (float)c.ssm_d_conv), 0, 0},
                {ARCH_T_SSM_CONV1D_B, SNC, 1, 0.5f, 0, 0},
                {ARCH_T_SSM_DT_B, SH, 1, 1.5f, -0.5f, 0},
                {ARCH_T_SSM_A, 1, SH, 0.75f, 0.75f, 0},
                {ARCH_T_SSM_D, 1, SH, 0.5f, 1, 0},
                {ARCH_T_SSM_NORM, SDI / (uint64_t)c.ssm_n_group, (uint64_t)c.ssm_n_group, 0.5f, 1, 0},
                {ARCH_T_SSM_OUT, SDI, D, sqrtf(3.0f / (float)SDI), 0, 1}};
            for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
                char tn[96];
                arch_tensor_file_name(tn, sizeof tn, m[i].at, l);
                const uint64_t n = m[i].cols * m[i].rows;
                fill_uniform(tmp, n, m[i].a, &s);
                for (uint64_t k = 0; k < n; k++) tmp[k] += m[i].base;
                if (m[i].at == ARCH_T_SSM_A) /* A = -exp(A_log), as the converter writes it */
                    for (uint64_t k = 0; k < n; k++) tmp[k] = -expf(tmp[k]);
                if ((rc = add_f32(w, &bb, tn, tmp, m[i].cols, m[i].rows, m[i].mat ? dtype : QUANT_F32)))
                    goto out;
            }
        }
        /* the router (logits of variance about 1: a spread softmax), then each
         * expert's gate, up and down as a dense layer's */
        if (layer_moe) {
            char tn[96];
            if (lead) { /* lfm2moe's choice bias: the size of the sigmoids' spread */
                arch_tensor_file_name(tn, sizeof tn, ARCH_T_FFN_EXP_PROBS_B, l);
                fill_uniform(tmp, E, 0.3f, &s);
                if ((rc = add_f32(w, &bb, tn, tmp, E, 1, QUANT_F32))) goto out;
            }
            arch_tensor_file_name(tn, sizeof tn, ARCH_T_FFN_GATE_INP, l);
            fill_uniform(tmp, E * D, sqrtf(3.0f / (float)D), &s);
            if ((rc = add_f32(w, &bb, tn, tmp, D, E, QUANT_F32))) goto out;
            struct {
                int at;
                uint64_t cols, rows;
            } e[] = {
                {ARCH_T_FFN_GATE_EXPS, D, FE}, {ARCH_T_FFN_UP_EXPS, D, FE}, {ARCH_T_FFN_DOWN_EXPS, FE, D}};
            for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
                arch_tensor_file_name(tn, sizeof tn, e[i].at, l);
                const float gain = e[i].at == ARCH_T_FFN_DOWN_EXPS ? 1.0f : gate_up_gain;
                if ((rc = add_experts(w, &bb, tn, e[i].cols, e[i].rows, E, p->type, NULL,
                                      gain * sqrtf(3.0f / (float)e[i].cols), &s, tmp)))
                    goto out;
            }
        }
        /* qwen2's biases (as big as the projections' outputs: Qwen2.5's are
         * large); qwen3's head norms around 1, unequal so a mix-up shows */
        struct {
            int at;
            uint64_t n;
            float a, base;
        } x[] = {
            {ARCH_T_ATTN_Q_B, Q, 1.0f, 0},     {ARCH_T_ATTN_K_B, KV, 1.0f, 0},
            {ARCH_T_ATTN_V_B, KV, 1.0f, 0},    {ARCH_T_ATTN_Q_NORM, HD, 0.5f, 1},
            {ARCH_T_ATTN_K_NORM, HD, 0.5f, 1},
        };
        /* the optional q/k/v biases: qwen2's and gpt-oss's real models have them */
        const int qkv_b = c.arch == ARCH_QWEN2 || c.arch == ARCH_GPT_OSS;
        for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
            int want = qkv_b  ? x[i].at <= ARCH_T_ATTN_V_B
                       : conv ? !conv_layer && x[i].at >= ARCH_T_ATTN_Q_NORM /* lfm2: attention's */
                              : a->need[x[i].at] == ARCH_REQUIRED;
            if (!want) continue;
            char tn[96];
            arch_tensor_file_name(tn, sizeof tn, x[i].at, l);
            fill_uniform(tmp, x[i].n, x[i].a, &s);
            for (uint64_t k = 0; k < x[i].n; k++) tmp[k] += x[i].base;
            if ((rc = add_f32(w, &bb, tn, tmp, x[i].n, 1, QUANT_F32))) goto out;
        }
        /* gpt-oss's: the output bias, sink logits in [0, 3] (a sink then
         * takes a real share of a head's softmax over a few dozen keys), the
         * router's and the experts' biases (rows of E for the experts') */
        struct {
            int at;
            uint64_t cols, rows;
            float a, base;
        } g[] = {
            {ARCH_T_ATTN_OUT_B, D, 1, 0.5f, 0},     {ARCH_T_ATTN_SINKS, (uint64_t)c.n_heads, 1, 1.5f, 1.5f},
            {ARCH_T_FFN_GATE_INP_B, E, 1, 0.5f, 0}, {ARCH_T_FFN_GATE_EXPS_B, FE, E, 0.5f, 0},
            {ARCH_T_FFN_UP_EXPS_B, FE, E, 0.5f, 0}, {ARCH_T_FFN_DOWN_EXPS_B, D, E, 0.5f, 0},
        };
        for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
            if (a->need[g[i].at] != ARCH_REQUIRED) continue;
            char tn[96];
            arch_tensor_file_name(tn, sizeof tn, g[i].at, l);
            fill_uniform(tmp, g[i].cols * g[i].rows, g[i].a, &s);
            for (uint64_t k = 0; k < g[i].cols * g[i].rows; k++) tmp[k] += g[i].base;
            if ((rc = add_f32(w, &bb, tn, tmp, g[i].cols, g[i].rows, QUANT_F32))) goto out;
        }
    }
    for (uint64_t k = 0; k < D; k++) tmp[k] = 1.0f;
    if ((rc = add_f32(
             w, &bb,
             arch_tensor_name(a->need[ARCH_T_TOKEN_EMBD_NORM] ? ARCH_T_TOKEN_EMBD_NORM : ARCH_T_OUTPUT_NORM),
             tmp, D, 1, QUANT_F32)))
        goto out;
    if (!p->tied) {
        fill_uniform(tmp, V * D, sqrtf(3.0f / (float)D) * 4.0f, &s);
        if ((rc = add_f32(w, &bb, "output.weight", tmp, D, V, dtype))) goto out;
    }
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
