/* model_keys.c - GGUF keys as model.c reads them: integers and floats of
 * an architecture's prefix with llama.cpp's defaults, gemma4's per-layer
 * keys, and each feature's keys (RoPE scaling, experts, sliding window,
 * short convolution, Mamba2) (model_keys.h). */
#include "model_keys.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int model_gguf_int_key(gguf_file *f, const char *key, int required, int dflt, int *out, const char *path,
                       char *err, size_t errlen) {
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

/* "<arch>.<suffix>" as an int (gguf_int_key's rules). */
int model_arch_int(gguf_file *f, const arch_info *a, const char *suffix, int required, int dflt, int *out,
                   const char *path, char *err, size_t errlen) {
    char key[128];
    return model_gguf_int_key(f, arch_key(key, sizeof key, a, suffix), required, dflt, out, path, err,
                              errlen);
}

/* "<arch>.<suffix>" as a finite float, dflt when absent. */
int model_arch_float(gguf_file *f, const arch_info *a, const char *suffix, float dflt, float *out,
                     const char *path, char *err, size_t errlen) {
    char key[128];
    double d;
    int rc = gguf_get_float(f, arch_key(key, sizeof key, a, suffix), &d);
    if (rc == CK_ENOTFOUND) {
        *out = dflt;
        return CK_OK;
    }
    if (rc || !(d > -1e30 && d < 1e30)) {
        seterr(err, errlen, "%s: metadata '%s' is not a finite number", path, key);
        return CK_EFORMAT;
    }
    *out = (float)d;
    return CK_OK;
}

/* "<arch>.<suffix>" for each of n layers (llama.cpp's get_key_or_arr): one
 * integer for all of them, or an array of n integers or bools; absent, dflt
 * for all (or an error when required). Each must lie in lo..hi. */
static int layer_ints(gguf_file *f, const arch_info *a, const char *suffix, int n, int required, int dflt,
                      int lo, int hi, int *out, const char *path, char *err, size_t errlen) {
    char key[128];
    arch_key(key, sizeof key, a, suffix);
    int64_t v;
    int et, rc = gguf_get_int(f, key, &v);
    uint64_t cnt = 0;
    const void *data = NULL;
    if (rc == CK_OK) {
        for (int l = 0; l < n; l++) out[l] = v >= lo && v <= hi ? (int)v : lo - 1;
    } else if ((rc = gguf_get_arr(f, key, &et, &cnt, &data)) == CK_ENOTFOUND && !required) {
        for (int l = 0; l < n; l++) out[l] = dflt;
        return CK_OK;
    } else if (rc || cnt != (uint64_t)n ||
               (et != GGUF_TYPE_BOOL && et != GGUF_TYPE_INT32 && et != GGUF_TYPE_UINT32)) {
        seterr(err, errlen, "%s: metadata '%s' is %s", path, key,
               rc == CK_ENOTFOUND ? "missing" : "not an integer nor an array of one per layer");
        return CK_EFORMAT;
    } else {
        const unsigned char *p = data;
        for (int l = 0; l < n; l++) {
            int64_t x;
            if (et == GGUF_TYPE_BOOL) {
                x = p[l] != 0;
            } else if (et == GGUF_TYPE_INT32) {
                int32_t i32;
                memcpy(&i32, p + 4 * (size_t)l, 4);
                x = i32;
            } else {
                uint32_t u32;
                memcpy(&u32, p + 4 * (size_t)l, 4);
                x = u32;
            }
            out[l] = x >= lo && x <= hi ? (int)x : lo - 1;
        }
    }
    for (int l = 0; l < n; l++)
        if (out[l] < lo) {
            seterr(err, errlen, "%s: metadata '%s' of layer %d is outside %d..%d", path, key, l, lo, hi);
            return CK_EFORMAT;
        }
    return CK_OK;
}

/* gemma4's keys (ARCH_READS_GEMMA4): the per-layer head counts, which
 * layers are windowed, the windowed layers' head size and RoPE, the final
 * soft cap; what the engine does not compute (shared KV layers, per-layer
 * embeddings, RoPE over part of a head other than by rope_freqs, RoPE
 * scaling) refused by name. Fills the layers' geometry (m->layers exists)
 * and the config's maxima. Called once head_dim and rope_theta are final. */
int model_gemma4_keys(gguf_file *f, const arch_info *a, model *m, const char *path, char *err,
                      size_t errlen) {
    model_config *c = &m->cfg;
    const int L = c->n_layers;
    int *nh = NULL, *nkv = NULL, *swa = NULL, rc = CK_ENOMEM;
    if (!(nh = malloc(3 * (size_t)L * sizeof *nh))) return CK_ENOMEM;
    nkv = nh + L;
    swa = nkv + L;
    int shared = 0, pl = 0, rd = 0, rd_swa = 0, kl_swa = 0, vl_swa = 0;
    float cap = 0;
    if ((rc = layer_ints(f, a, ARCH_KEY_HEAD_COUNT, L, 1, 0, 1, MODEL_MAX_HEADS, nh, path, err, errlen)) ||
        (rc = layer_ints(f, a, ARCH_KEY_HEAD_COUNT_KV, L, 0, -1, 1, MODEL_MAX_HEADS, nkv, path, err,
                         errlen)) ||
        (rc = layer_ints(f, a, ARCH_KEY_SWA_PATTERN, L, 1, 0, 0, INT32_MAX, swa, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_SWA, 1, 0, &c->n_swa, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_KEY_LENGTH_SWA, 0, c->head_dim, &kl_swa, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_VALUE_LENGTH_SWA, 0, kl_swa, &vl_swa, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_ROPE_DIMS, 0, c->head_dim, &rd, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_ROPE_DIMS_SWA, 0, rd, &rd_swa, path, err, errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_ROPE_FREQ_BASE_SWA, ARCH_DEFAULT_ROPE_BASE, &c->rope_theta_swa,
                               path, err, errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_FINAL_SOFTCAP, 0, &cap, path, err, errlen)))
        goto out;
    /* the E2B/E4B's: absent is 0, as llama.cpp reads them (its converter writes 0) */
    int64_t v;
    char key[128];
    if (!gguf_get_int(f, arch_key(key, sizeof key, a, ARCH_KEY_SHARED_KV), &v)) {
        if (v < 0 || v > L - 2) {
            seterr(err, errlen, "%s: gemma4 %s = %lld: at most block_count - 2 (%d)", path,
                   ARCH_KEY_SHARED_KV, (long long)v, L - 2);
            rc = CK_EFORMAT;
            goto out;
        }
        shared = (int)v;
    }
    if (!gguf_get_int(f, arch_key(key, sizeof key, a, ARCH_KEY_EMB_PER_LAYER), &v)) {
        if (v < 0 || v > MODEL_MAX_DIM) {
            seterr(err, errlen, "%s: gemma4 %s = %lld out of 0..%d", path, ARCH_KEY_EMB_PER_LAYER,
                   (long long)v, MODEL_MAX_DIM);
            rc = CK_EFORMAT;
            goto out;
        }
        pl = (int)v;
    }
    rc = CK_EUNSUPPORTED;
    if (kl_swa != vl_swa || kl_swa % 2 || kl_swa > MODEL_MAX_HEAD_DIM || rd != c->head_dim ||
        rd_swa != kl_swa) {
        seterr(err, errlen,
               "%s: gemma4 key_length_swa %d, value_length_swa %d, rope.dimension_count %d (head %d), "
               "rope.dimension_count_swa %d: only whole even heads up to %d turned whole are computed",
               path, kl_swa, vl_swa, rd, c->head_dim, rd_swa, MODEL_MAX_HEAD_DIM);
        goto out;
    }
    if (c->rope_scaling != ARCH_SCALING_NONE && c->rope_factor > 0 && c->rope_factor != 1) {
        seterr(err, errlen, "%s: gemma4 with rope scaling %s is not computed by the engine", path,
               arch_scaling_name(c->rope_scaling));
        goto out;
    }
    if (!(c->rope_theta_swa > 1 && c->rope_theta_swa < 1e12) || !(cap >= 0)) {
        seterr(err, errlen, "%s: gemma4 rope.freq_base_swa %g or final_logit_softcapping %g out of range",
               path, c->rope_theta_swa, cap);
        rc = CK_EFORMAT;
        goto out;
    }
    c->head_dim_swa = kl_swa;
    c->n_heads = c->n_kv_heads = 1;
    c->q_dim_max = c->kv_dim_max = 0;
    for (int l = 0; l < L; l++) {
        model_layer *ly = &m->layers[l];
        ly->swa = swa[l] != 0;
        ly->n_heads = nh[l];
        ly->n_kv_heads = nkv[l] < 0 ? nh[l] : nkv[l];
        ly->head_dim = ly->swa ? kl_swa : c->head_dim;
        if (ly->n_heads % ly->n_kv_heads) {
            seterr(err, errlen, "%s: layer %d: head_count %d is not a multiple of head_count_kv %d", path, l,
                   ly->n_heads, ly->n_kv_heads);
            rc = CK_EFORMAT;
            goto out;
        }
        if (ly->n_heads > c->n_heads) {
            c->n_heads = ly->n_heads;
            c->n_kv_heads = ly->n_kv_heads;
        }
        if (ly->n_heads * ly->head_dim > c->q_dim_max) c->q_dim_max = ly->n_heads * ly->head_dim;
        if (ly->n_kv_heads * ly->head_dim > c->kv_dim_max) c->kv_dim_max = ly->n_kv_heads * ly->head_dim;
    }
    /* the last `shared` layers attend over the KV of the last earlier layer of their kind
     * (llama.cpp's reuse: n_layer - shared - 2 for a windowed one, - 1 for a full one) */
    for (int l = L - shared; l < L; l++) {
        const int src = L - shared - (m->layers[l].swa ? 2 : 1);
        const model_layer *s = &m->layers[src];
        if (s->swa != m->layers[l].swa || s->n_kv_heads != m->layers[l].n_kv_heads) {
            seterr(
                err, errlen,
                "%s: gemma4 layer %d shares the KV of layer %d, which is not of its kind (%s): not computed",
                path, l, src, m->layers[l].swa ? "windowed" : "full");
            rc = CK_EUNSUPPORTED;
            goto out;
        }
        m->layers[l].kv_src = src + 1;
    }
    c->n_kv_shared = shared;
    c->n_embd_pl = pl;
    if (c->n_swa > c->seq_len) c->n_swa = c->seq_len;
    c->emb_scale = sqrtf((float)c->dim);
    c->logit_softcap = cap;
    c->kq_div = 1.0f;
    c->v_norm = 1;
    c->ffn_act = a->act;
    rc = CK_OK;
out:
    free(nh);
    return rc;
}
/* RoPE scaling keys, as llama.cpp's llama_model::load_hparams and
 * llama_context read them: the type defaults to "linear", whose factor
 * defaults to 0 (no scaling); "none" ignores the factor; YaRN's mix is 1
 * unless the file says otherwise. A type the engine does not compute
 * (longrope, llama3 spelled as a type, ...) is refused by name. */
int model_rope_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                    size_t errlen) {
    char key[128];
    const char *s;
    size_t len;
    int rc, type = ARCH_SCALING_LINEAR;
    arch_key(key, sizeof key, a, ARCH_KEY_ROPE_SCALING_TYPE);
    if ((rc = gguf_get_str(f, key, &s, &len)) == CK_OK) {
        if ((type = arch_scaling_from_name(s, len)) < 0) {
            seterr(err, errlen, "%s: %s \"%.*s\" is not computed by the engine (none, linear, yarn)", path,
                   key, (int)(len < 40 ? len : 40), s);
            return CK_EUNSUPPORTED;
        }
    } else if (rc != CK_ENOTFOUND) {
        seterr(err, errlen, "%s: metadata '%s' is not a string", path, key);
        return CK_EFORMAT;
    }
    float factor = 0, lm = 0;
    arch_key(key, sizeof key, a, ARCH_KEY_ROPE_SCALING_FACTOR);
    if ((rc = model_arch_float(
             f, a, gguf_find_key(f, key) >= 0 ? ARCH_KEY_ROPE_SCALING_FACTOR : ARCH_KEY_ROPE_SCALE_LINEAR, 0,
             &factor, path, err, errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_ROPE_SCALING_ATTN_FACTOR, 1, &c->rope_attn_factor, path, err,
                               errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_YARN_LOG_MUL, 0, &lm, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_ROPE_SCALING_ORIG_CTX, 0, c->seq_len, &c->rope_orig_ctx, path,
                             err, errlen)))
        return rc;
    if (factor == 0) factor = 1; /* llama.cpp: factor 0 means no scaling */
    if (type == ARCH_SCALING_NONE) factor = 1;
    if (!(factor > 0 && factor < 1e6) || !(c->rope_attn_factor > 0 && c->rope_attn_factor < 1e6)) {
        seterr(err, errlen, "%s: rope scaling factor %g or attn_factor %g out of range", path, factor,
               c->rope_attn_factor);
        return CK_EFORMAT;
    }
    /* llama.cpp reads it for mistral3 (and the DeepSeek family, not in the
     * table); for the others it does not, and a value other than 0 is
     * refused here rather than ignored. */
    if (lm != 0 && !(a->keys & ARCH_READS_YARN_LOG_MUL)) {
        seterr(err, errlen, "%s: %s.%s = %g is not computed by the engine", path, a->name,
               ARCH_KEY_YARN_LOG_MUL, lm);
        return CK_EUNSUPPORTED;
    }
    if (!(lm >= 0 && lm <= 1e3)) {
        seterr(err, errlen, "%s: %s.%s = %g is outside 0..1000", path, a->name, ARCH_KEY_YARN_LOG_MUL, lm);
        return CK_EFORMAT;
    }
    c->yarn_log_mul = lm;
    if (type == ARCH_SCALING_LINEAR && factor == 1) type = ARCH_SCALING_NONE;
    c->rope_scaling = type;
    c->rope_factor = factor;
    c->yarn_ext_factor = 0;
    c->yarn_beta_fast = ARCH_DEFAULT_BETA_FAST;
    c->yarn_beta_slow = ARCH_DEFAULT_BETA_SLOW;
    if (type == ARCH_SCALING_YARN &&
        ((rc = model_arch_float(f, a, ARCH_KEY_YARN_EXT_FACTOR, 1, &c->yarn_ext_factor, path, err, errlen)) ||
         (rc = model_arch_float(f, a, ARCH_KEY_YARN_BETA_FAST, ARCH_DEFAULT_BETA_FAST, &c->yarn_beta_fast,
                                path, err, errlen)) ||
         (rc = model_arch_float(f, a, ARCH_KEY_YARN_BETA_SLOW, ARCH_DEFAULT_BETA_SLOW, &c->yarn_beta_slow,
                                path, err, errlen))))
        return rc;
    if (type == ARCH_SCALING_YARN && !(c->yarn_beta_fast > 0 && c->yarn_beta_slow > 0)) {
        seterr(err, errlen, "%s: yarn beta_fast %g / beta_slow %g must be positive", path, c->yarn_beta_fast,
               c->yarn_beta_slow);
        return CK_EFORMAT;
    }
    return CK_OK;
}

/* Mistral 3's query scale (llama.cpp's mistral3 hparams): temperature_scale,
 * default 0 (none); when set, its positions per step are YaRN's original
 * context (rope.scaling.original_context_length, else context_length). */
int model_attn_temp_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                         size_t errlen) {
    c->attn_temp_scale = 0;
    c->attn_temp_floor = 0;
    if (!(a->keys & ARCH_READS_ATTN_TEMP)) return CK_OK;
    int rc = model_arch_float(f, a, ARCH_KEY_ATTN_TEMP_SCALE, 0, &c->attn_temp_scale, path, err, errlen);
    if (rc) return rc;
    if (!(c->attn_temp_scale > -1e3f && c->attn_temp_scale < 1e3f)) {
        seterr(err, errlen, "%s: %s.%s = %g is outside -1000..1000", path, a->name, ARCH_KEY_ATTN_TEMP_SCALE,
               c->attn_temp_scale);
        return CK_EFORMAT;
    }
    if (c->attn_temp_scale != 0) c->attn_temp_floor = c->rope_orig_ctx;
    return CK_OK;
}

/* The mixture-of-experts keys, bounded before anything is sized from them.
 * Without expert_feed_forward_length an expert is feed_forward_length /
 * expert_used_count wide (llama.cpp's qwen3moe default); without
 * feed_forward_length (which llama.cpp does not require either, and the
 * experts do not use) hidden_dim is the experts' width. */
int model_expert_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                      size_t errlen) {
    int rc;
    if ((rc = model_arch_int(f, a, ARCH_KEY_EXPERT_COUNT, 1, 0, &c->n_expert, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_EXPERT_USED_COUNT, 1, 0, &c->n_expert_used, path, err, errlen)))
        return rc;
    if (c->n_expert > MODEL_MAX_EXPERTS) {
        seterr(err, errlen, "%s: %s.%s = %d is above the %d experts the engine allows", path, a->name,
               ARCH_KEY_EXPERT_COUNT, c->n_expert, MODEL_MAX_EXPERTS);
        return CK_EFORMAT;
    }
    if (c->n_expert_used > c->n_expert) {
        seterr(err, errlen, "%s: %s.%s = %d is more than the %d experts (%s)", path, a->name,
               ARCH_KEY_EXPERT_USED_COUNT, c->n_expert_used, c->n_expert, ARCH_KEY_EXPERT_COUNT);
        return CK_EFORMAT;
    }
    const int dflt = c->hidden_dim / c->n_expert_used;
    if ((rc = model_arch_int(f, a, ARCH_KEY_EXPERT_FFN, !dflt, dflt, &c->expert_ffn, path, err, errlen)))
        return rc;
    if (!c->hidden_dim) c->hidden_dim = c->expert_ffn;
    return CK_OK;
}

/* "<arch>.<suffix>", when the file has it, must be an integer equal to
 * want: a *_swa variant the engine does not compute apart. */
static int swa_same_int(gguf_file *f, const arch_info *a, const char *suffix, int want, const char *path,
                        char *err, size_t errlen) {
    int v = want, rc = model_arch_int(f, a, suffix, 0, want, &v, path, err, errlen);
    if (rc) return rc;
    if (v != want) {
        seterr(err, errlen, "%s: %s.%s = %d differs from the full layers' %d: not computed by the engine",
               path, a->name, suffix, v, want);
        return CK_EUNSUPPORTED;
    }
    return CK_OK;
}

/* sliding_window_pattern: an integer >= 0 (0: every layer windowed), the
 * row's period when absent. llama.cpp skips a per-layer array here and
 * keeps its default; an array is refused rather than read as that. */
static int swa_pattern(gguf_file *f, const arch_info *a, int *period, const char *path, char *err,
                       size_t errlen) {
    char key[128];
    int64_t v;
    arch_key(key, sizeof key, a, ARCH_KEY_SWA_PATTERN);
    int rc = gguf_get_int(f, key, &v);
    if (rc == CK_ENOTFOUND) {
        *period = a->swa_period;
        return CK_OK;
    }
    if (rc || v < 0 || v > MODEL_MAX_LAYERS) {
        seterr(err, errlen,
               "%s: metadata '%s' is not an integer in 0..%d (a per-layer array is not computed)", path, key,
               MODEL_MAX_LAYERS);
        return CK_EFORMAT;
    }
    *period = (int)v;
    return CK_OK;
}

/* Sliding-window attention (ARCH_READS_SWA rows): the window, required,
 * at most the context; which layers; and the *_swa variants of the head
 * and RoPE keys, which must not differ (one RoPE table and one head size
 * serve every layer). Called once head_dim and rope_theta are final. */
int model_swa_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                   size_t errlen) {
    c->n_swa = c->swa_period = 0;
    if (!(a->keys & ARCH_READS_SWA)) return CK_OK;
    int rc;
    float base = c->rope_theta;
    if ((rc = model_arch_int(f, a, ARCH_KEY_SWA, 1, 0, &c->n_swa, path, err, errlen)) ||
        (rc = swa_pattern(f, a, &c->swa_period, path, err, errlen)) ||
        (rc = swa_same_int(f, a, ARCH_KEY_KEY_LENGTH_SWA, c->head_dim, path, err, errlen)) ||
        (rc = swa_same_int(f, a, ARCH_KEY_VALUE_LENGTH_SWA, c->head_dim, path, err, errlen)) ||
        (rc = swa_same_int(f, a, ARCH_KEY_ROPE_DIMS_SWA, c->head_dim, path, err, errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_ROPE_FREQ_BASE_SWA, c->rope_theta, &base, path, err, errlen)))
        return rc;
    if (base != c->rope_theta) {
        seterr(err, errlen, "%s: %s.%s = %g differs from rope.freq_base %g: not computed by the engine", path,
               a->name, ARCH_KEY_ROPE_FREQ_BASE_SWA, base, c->rope_theta);
        return CK_EUNSUPPORTED;
    }
    /* a window past the context masks nothing: bounded by it, so sizes from it stay small */
    if (c->n_swa > c->seq_len) c->n_swa = c->seq_len;
    return CK_OK;
}

/* Entry l of a per-layer integer array (UINT32 or INT32), or -1. */
int64_t model_arr_int_at(int type, const void *data, uint64_t l) {
    /* a GGUF array's data need not be 4-byte aligned: copied out */
    if (type == GGUF_TYPE_UINT32) {
        uint32_t v;
        memcpy(&v, (const unsigned char *)data + 4 * l, 4);
        return v;
    }
    if (type == GGUF_TYPE_INT32) {
        int32_t v;
        memcpy(&v, (const unsigned char *)data + 4 * l, 4);
        return v;
    }
    return -1;
}

/* head_count_kv of a hybrid: a scalar (every layer attention) or one entry
 * a layer, 0 for a recurrent layer. Sets c->n_kv_heads (the attention
 * layers' count, which must be one value), *n_rec (the 0 entries) and
 * *kv_arr / *kv_type (NULL for a scalar) for the layer checks. */
static int gguf_kv_per_layer(gguf_file *f, const arch_info *a, model_config *c, const void **kv_arr,
                             int *kv_type, int *n_rec, const char *path, char *err, size_t errlen) {
    char key[128];
    arch_key(key, sizeof key, a, ARCH_KEY_HEAD_COUNT_KV);
    uint64_t n = 0;
    *n_rec = 0;
    if (gguf_get_arr(f, key, kv_type, &n, kv_arr)) {
        *kv_arr = NULL; /* a scalar: every layer is attention */
        return model_arch_int(f, a, ARCH_KEY_HEAD_COUNT_KV, 0, c->n_heads, &c->n_kv_heads, path, err, errlen);
    }
    if (n != (uint64_t)c->n_layers || (*kv_type != GGUF_TYPE_UINT32 && *kv_type != GGUF_TYPE_INT32)) {
        seterr(err, errlen, "%s: %s holds %llu entries (not u32/i32 ones, or not block_count %d)", path, key,
               (unsigned long long)n, c->n_layers);
        return CK_EFORMAT;
    }
    c->n_kv_heads = 0;
    for (uint64_t l = 0; l < n; l++) {
        const int64_t v = model_arr_int_at(*kv_type, *kv_arr, l);
        if (v == 0) {
            (*n_rec)++;
        } else if (v < 0 || v > MODEL_MAX_HEADS || (c->n_kv_heads && v != c->n_kv_heads)) {
            seterr(err, errlen,
                   "%s: %s[%llu] = %lld: per-layer head counts must be 0 (recurrent) or one "
                   "value up to %d",
                   path, key, (unsigned long long)l, (long long)v, MODEL_MAX_HEADS);
            return CK_EUNSUPPORTED;
        } else {
            c->n_kv_heads = (int)v;
        }
    }
    if (!c->n_kv_heads) c->n_kv_heads = c->n_heads; /* no attention layer: sizes only */
    return CK_OK;
}

/* lfm2's shortconv.l_cache, and its head_count_kv (gguf_kv_per_layer: 0
 * for a short-convolution layer). Sets c->conv_l, c->n_kv_heads and
 * c->n_conv_layers. A sliding window is refused (not computed). */
int model_shortconv_keys(gguf_file *f, const arch_info *a, model_config *c, const void **kv_arr, int *kv_type,
                         const char *path, char *err, size_t errlen) {
    int rc, swa = 0;
    *kv_arr = NULL;
    if ((rc = model_arch_int(f, a, ARCH_KEY_SHORTCONV_L_CACHE, 1, 0, &c->conv_l, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_SWA, 0, 0, &swa, path, err, errlen)))
        return rc;
    if (c->conv_l < 2 || c->conv_l > ARCH_MAX_CONV_L) {
        seterr(err, errlen, "%s: %s.%s = %d is outside 2..%d", path, a->name, ARCH_KEY_SHORTCONV_L_CACHE,
               c->conv_l, ARCH_MAX_CONV_L);
        return CK_EFORMAT;
    }
    if (swa > 0) {
        seterr(err, errlen, "%s: %s.%s = %d: lfm2's sliding-window attention is not computed by the engine",
               path, a->name, ARCH_KEY_SWA, swa);
        return CK_EUNSUPPORTED;
    }
    return gguf_kv_per_layer(f, a, c, kv_arr, kv_type, &c->n_conv_layers, path, err, errlen);
}

/* granitehybrid's ssm.* keys (bounded before they size anything), its
 * head_count_kv (gguf_kv_per_layer: 0 for a Mamba2 layer), and Granite's
 * scalars; rope.scaling.finetuned false turns RoPE off on every layer. */
int model_mamba2_keys(gguf_file *f, const arch_info *a, model_config *c, const void **kv_arr, int *kv_type,
                      const char *path, char *err, size_t errlen) {
    int rc;
    *kv_arr = NULL;
    if ((rc = model_arch_int(f, a, ARCH_KEY_SSM_CONV, 1, 0, &c->ssm_d_conv, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_SSM_INNER, 1, 0, &c->ssm_d_inner, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_SSM_STATE, 1, 0, &c->ssm_d_state, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_SSM_GROUPS, 1, 0, &c->ssm_n_group, path, err, errlen)) ||
        (rc = model_arch_int(f, a, ARCH_KEY_SSM_HEADS, 1, 0, &c->ssm_n_head, path, err, errlen)))
        return rc;
    const int di = c->ssm_d_inner, ng = c->ssm_n_group, nh = c->ssm_n_head;
    if (c->ssm_d_conv < 2 || c->ssm_d_conv > ARCH_MAX_CONV_L || c->ssm_d_state < 1 ||
        c->ssm_d_state > ARCH_MAX_SSM_STATE || di < 1 || di > 4 * MODEL_MAX_DIM || ng < 1 || nh < 1 ||
        di % ng || di % nh || nh % ng) {
        seterr(err, errlen,
               "%s: %s.ssm.* conv_kernel %d (2..%d), state_size %d (1..%d), inner_size %d (1..%d), "
               "group_count %d, time_step_rank %d (inner_size a multiple of both, time_step_rank of "
               "group_count): not a shape the engine computes",
               path, a->name, c->ssm_d_conv, ARCH_MAX_CONV_L, c->ssm_d_state, ARCH_MAX_SSM_STATE, di,
               4 * MODEL_MAX_DIM, ng, nh);
        return CK_EFORMAT;
    }
    int rope = 1;
    char key[128];
    if (gguf_get_bool(f, arch_key(key, sizeof key, a, ARCH_KEY_ROPE_FINETUNED), &rope) == CK_OK && !rope)
        c->no_rope_step = 1; /* (l + 1) % 1 == 0: no layer has RoPE */
    if ((rc = model_arch_float(f, a, ARCH_KEY_EMBD_SCALE, 0, &c->emb_scale, path, err, errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_RESID_SCALE, 0, &c->resid_scale, path, err, errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_ATTN_SCALE, 0, &c->attn_scale, path, err, errlen)) ||
        (rc = model_arch_float(f, a, ARCH_KEY_LOGIT_SCALE, 0, &c->logit_scale, path, err, errlen)))
        return rc;
    return gguf_kv_per_layer(f, a, c, kv_arr, kv_type, &c->n_ssm_layers, path, err, errlen);
}
