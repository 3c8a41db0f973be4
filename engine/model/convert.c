/* convert.c - GGUF export (convert.h), and the writer helpers convert_synth.c
 * shares (convert_int.h). */
#include "convert.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "ck_err.h"
#include "gguf.h"
#include "convert_int.h"
#include "quant.h"

static void *bufs_alloc(convert_bufs *b, size_t n) {
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

void convert_bufs_free(convert_bufs *b) {
    for (int i = 0; i < b->n; i++) free(b->p[i]);
    free(b->p);
}

/* Add an f32 tensor (rows x cols, cols innermost) converted to `type`. */
int convert_add_f32(gguf_writer *w, convert_bufs *bb, const char *name, const float *src, uint64_t cols,
                    uint64_t rows, int type) {
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
int convert_add_experts(gguf_writer *w, convert_bufs *bb, const char *name, uint64_t cols, uint64_t rows,
                        uint64_t E, int type, const model_tensor *src, float a, uint64_t *s, float *tmp) {
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
            convert_fill_uniform(tmp, cols * rows, a, s);
        }
        if ((rc = quant_from_f32(type, tmp, dst + (size_t)(e * per), cols * rows))) return rc;
    }
    uint64_t ne[3] = {cols, rows, E};
    return gguf_writer_add_tensor(w, name, type, E > 1 ? 3 : 2, ne, dst);
}

/* Same, from a model tensor of any type. */
static int add_tensor(gguf_writer *w, convert_bufs *bb, const char *name, const model_tensor *t,
                      uint64_t cols, uint64_t rows, int type) {
    float *f = malloc((size_t)(cols * rows) * sizeof *f);
    if (!f) return CK_ENOMEM;
    int rc = quant_to_f32(t->type, t->data, f, cols * rows);
    if (!rc) rc = convert_add_f32(w, bb, name, f, cols, rows, type);
    free(f);
    return rc;
}

/* The type of a model's matrices other than the experts: `type`, but
 * Q8_0 in a model with experts written MXFP4, as llama.cpp's MXFP4_MOE
 * quantizes them (experts MXFP4, the other matrices Q8_0; the router and
 * the vectors stay f32 either way). */
int convert_dense_type(int type, int has_experts) {
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

int convert_write_hparams(gguf_writer *w, const model_config *c, const char *name, int type,
                          int stop_on_bos) {
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
    if (c->arch == ARCH_GEMMA4) { /* its head keys: synth_gemma4_keys */
        if (c->n_expert) {
            rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EXPERT_COUNT), (uint32_t)c->n_expert);
            rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EXPERT_USED_COUNT), (uint32_t)c->n_expert_used);
            rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EXPERT_FFN), (uint32_t)c->expert_ffn);
        }
        rc |= gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)c->vocab_size);
        rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_RMS_EPS), c->norm_eps);
        rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_ROPE_FREQ_BASE), c->rope_theta);
        rc |= gguf_writer_set_bool(w, "confkv.stop_on_bos", stop_on_bos);
        return rc ? CK_ENOMEM : CK_OK;
    }
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

int convert_copy_tokenizer_keys(gguf_writer *w, const gguf_file *f);

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
    if (c->arch == ARCH_GEMMA4) { /* per-layer shapes and keys this writer does not know */
        snprintf(err, errlen, "convert: writing a gemma4 model is not implemented");
        return CK_EUNSUPPORTED;
    }
    gguf_writer *w = NULL;
    convert_bufs bb = {0};
    int rc = gguf_writer_new(&w);
    if (rc) goto out;
    /* A GGUF source keeps its own tokenizer keys (a BPE vocabulary's merges and
     * pre-tokenizer, the chat template): rebuilt from the tokenizer, they
     * would be SentencePiece's. A llama2.c source has only pieces and scores. */
    const gguf_file *src = m->format == MODEL_FMT_GGUF ? (const gguf_file *)m->gguf_ : NULL;
    if ((rc = convert_write_hparams(w, c, m->name, type, m->stop_on_bos)) ||
        (rc = src ? convert_copy_tokenizer_keys(w, src) : write_vocab(w, m->tok)))
        goto out;
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    uint64_t Q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    uint64_t KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    const int dtype = convert_dense_type(type, c->n_expert > 0);
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
                if ((rc = convert_add_experts(w, &bb, name, e[i].cols, e[i].rows, E, type, e[i].t, 0, NULL,
                                              tmp)))
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
    convert_bufs_free(&bb);
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
void convert_fill_uniform(float *x, uint64_t n, float a, uint64_t *s) {
    for (uint64_t i = 0; i < n; i++) {
        double u = (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
        x[i] = (float)((2.0 * u - 1.0) * a);
    }
}

/* Copies every tokenizer.* key of f into w (pieces, scores, types, merges,
 * special ids, flags, pre-tokenizer, chat template): what the tokenizer of a
 * re-typed or synthetic model reads, byte for byte. */
int convert_copy_tokenizer_keys(gguf_writer *w, const gguf_file *f) {
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
