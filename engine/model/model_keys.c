/* model_keys.c - GGUF keys as model.c reads them: integers and floats of
 * an architecture's prefix with llama.cpp's defaults, and gemma4's
 * per-layer keys (model_keys.h). */
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
