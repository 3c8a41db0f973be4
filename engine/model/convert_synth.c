/* convert_synth.c - synthetic models at any shape (convert.h's
 * convert_synth): every architecture of the table, random weights from a
 * seed, a synthetic vocabulary or one copied from a GGUF. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "ck_err.h"
#include "convert.h"
#include "convert_int.h"
#include "gguf.h"
#include "quant.h"

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
    if ((rc = convert_copy_tokenizer_keys(w, f)))
        snprintf(err, errlen, "synth: copying the tokenizer keys of %s: %s", path, ck_strerror(rc));
    gguf_close(f);
    return rc;
}

/* gemma4's geometry of synth_params (convert.h): whether layer l is a full
 * (unwindowed) one, its head size and KV heads. */
typedef struct g4_shape {
    int period, hd_swa, hd_full, kv_swa, kv_full;
} g4_shape;

static g4_shape g4_of(const synth_params *p, const model_config *c) {
    g4_shape g = {c->swa_period > 0 ? c->swa_period : 6, c->head_dim,
                  p->head_dim_full ? p->head_dim_full : 2 * c->head_dim, c->n_kv_heads,
                  p->n_kv_heads_full ? p->n_kv_heads_full : (c->n_kv_heads / 2 > 0 ? c->n_kv_heads / 2 : 1)};
    return g;
}

static int g4_full(const g4_shape *g, int l) { return l % g->period == g->period - 1; }

/* gemma4's keys as llama.cpp's converter writes them: head_count one
 * integer, head_count_kv and sliding_window_pattern one per layer, the two
 * head sizes and RoPE widths, the windowed layers' base, the soft cap, and
 * the E2B/E4B keys at 0. */
static int synth_gemma4_keys(gguf_writer *w, const synth_params *p, const model_config *c) {
    const arch_info *a = arch_by_id(ARCH_GEMMA4);
    const g4_shape g = g4_of(p, c);
    char k[128];
    int rc = 0;
    uint32_t *kv = malloc((size_t)c->n_layers * sizeof *kv);
    uint8_t *swa = malloc((size_t)c->n_layers);
    if (!kv || !swa) {
        free(kv);
        free(swa);
        return CK_ENOMEM;
    }
    for (int l = 0; l < c->n_layers; l++) {
        swa[l] = !g4_full(&g, l);
        kv[l] = (uint32_t)(swa[l] ? g.kv_swa : g.kv_full);
    }
#define KEY(suffix) arch_key(k, sizeof k, a, suffix)
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_HEAD_COUNT), (uint32_t)c->n_heads);
    rc |= gguf_writer_set_arr(w, KEY(ARCH_KEY_HEAD_COUNT_KV), GGUF_TYPE_UINT32, kv, (uint64_t)c->n_layers);
    rc |= gguf_writer_set_arr(w, KEY(ARCH_KEY_SWA_PATTERN), GGUF_TYPE_BOOL, swa, (uint64_t)c->n_layers);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_SWA), (uint32_t)c->n_swa);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_KEY_LENGTH), (uint32_t)g.hd_full);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_VALUE_LENGTH), (uint32_t)g.hd_full);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_KEY_LENGTH_SWA), (uint32_t)g.hd_swa);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_VALUE_LENGTH_SWA), (uint32_t)g.hd_swa);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_ROPE_DIMS), (uint32_t)g.hd_full);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_ROPE_DIMS_SWA), (uint32_t)g.hd_swa);
    rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_ROPE_FREQ_BASE_SWA),
                              p->rope_theta_swa > 0 ? p->rope_theta_swa : 10000.0f);
    rc |= gguf_writer_set_f32(w, KEY(ARCH_KEY_FINAL_SOFTCAP), p->softcap > 0 ? p->softcap : 30.0f);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_SHARED_KV), (uint32_t)p->n_kv_shared);
    rc |= gguf_writer_set_u32(w, KEY(ARCH_KEY_EMB_PER_LAYER), (uint32_t)p->n_embd_pl);
#undef KEY
    free(kv);
    free(swa);
    return rc ? CK_ENOMEM : CK_OK;
}

/* One gemma4 layer's tensors: the projections (no attn_v on a full layer),
 * the q/k head norms, the four norms and layer_output_scale random around
 * 1 (unequal, so a norm left out or misplaced shows), the GELU
 * feed-forward. */
static int synth_gemma4_layer(gguf_writer *w, convert_bufs *bb, const synth_params *p, const model_config *c,
                              int l, float *tmp, uint64_t *s, int dtype) {
    const g4_shape g = g4_of(p, c);
    const int full = g4_full(&g, l);
    const uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim;
    const uint64_t HD = (uint64_t)(full ? g.hd_full : g.hd_swa);
    const uint64_t Q = (uint64_t)c->n_heads * HD, KV = (uint64_t)(full ? g.kv_full : g.kv_swa) * HD;
    struct {
        int at;
        uint64_t cols, rows; /* rows 0: a vector around 1 */
    } t[] = {
        {ARCH_T_ATTN_NORM, D, 0},     {ARCH_T_ATTN_Q, D, Q},          {ARCH_T_ATTN_K, D, KV},
        {ARCH_T_ATTN_V, D, KV},       {ARCH_T_ATTN_OUT, Q, D},        {ARCH_T_ATTN_Q_NORM, HD, 0},
        {ARCH_T_ATTN_K_NORM, HD, 0},  {ARCH_T_ATTN_POST_NORM, D, 0},  {ARCH_T_FFN_NORM, D, 0},
        {ARCH_T_FFN_GATE, D, F},      {ARCH_T_FFN_UP, D, F},          {ARCH_T_FFN_DOWN, F, D},
        {ARCH_T_FFN_POST_NORM, D, 0}, {ARCH_T_LAYER_OUT_SCALE, 1, 0},
    };
    const int shared = l >= c->n_layers - p->n_kv_shared; /* no K, V of its own */
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (t[i].at == ARCH_T_ATTN_V && full) continue; /* V = K */
        if (shared && (t[i].at == ARCH_T_ATTN_K || t[i].at == ARCH_T_ATTN_V || t[i].at == ARCH_T_ATTN_K_NORM))
            continue;
        char tn[96];
        arch_tensor_file_name(tn, sizeof tn, t[i].at, l);
        int rc;
        if (!t[i].rows) {
            convert_fill_uniform(tmp, t[i].cols, 0.5f, s);
            for (uint64_t k = 0; k < t[i].cols; k++) tmp[k] += 1.0f;
            rc = convert_add_f32(w, bb, tn, tmp, t[i].cols, 1, QUANT_F32);
        } else {
            convert_fill_uniform(tmp, t[i].cols * t[i].rows, sqrtf(3.0f / (float)t[i].cols), s);
            rc = convert_add_f32(w, bb, tn, tmp, t[i].cols, t[i].rows, dtype);
        }
        if (rc) return rc;
    }
    if (p->n_embd_pl) { /* the per-layer embedding's gate, projection and norm */
        const uint64_t P = (uint64_t)p->n_embd_pl;
        const struct {
            int at;
            uint64_t cols, rows;
        } e[] = {{ARCH_T_PLE_INP_GATE, D, P}, {ARCH_T_PLE_PROJ, P, D}, {ARCH_T_PLE_POST_NORM, D, 0}};
        for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
            char tn[96];
            arch_tensor_file_name(tn, sizeof tn, e[i].at, l);
            int rc;
            if (!e[i].rows) {
                convert_fill_uniform(tmp, e[i].cols, 0.5f, s);
                for (uint64_t k = 0; k < e[i].cols; k++) tmp[k] += 1.0f;
                rc = convert_add_f32(w, bb, tn, tmp, e[i].cols, 1, QUANT_F32);
            } else {
                convert_fill_uniform(tmp, e[i].cols * e[i].rows, sqrtf(3.0f / (float)e[i].cols), s);
                rc = convert_add_f32(w, bb, tn, tmp, e[i].cols, e[i].rows, dtype);
            }
            if (rc) return rc;
        }
    }
    if (!c->n_expert) return CK_OK;
    /* the 26B-A4B's experts beside the dense part: the router (logits of
     * variance about 1 from its input rms(x) / sqrt(dim) x scale), its
     * scale, each expert's gate, up, down, the per-expert output scale and
     * the three norms around 1 */
    const uint64_t E = (uint64_t)c->n_expert, FE = (uint64_t)c->expert_ffn;
    char tn[96];
    arch_tensor_file_name(tn, sizeof tn, ARCH_T_FFN_GATE_INP, l);
    convert_fill_uniform(tmp, E * D, sqrtf(3.0f), s);
    int rc = convert_add_f32(w, bb, tn, tmp, D, E, QUANT_F32);
    struct {
        int at;
        uint64_t cols, rows;
    } e[] = {{ARCH_T_FFN_GATE_EXPS, D, FE}, {ARCH_T_FFN_UP_EXPS, D, FE}, {ARCH_T_FFN_DOWN_EXPS, FE, D}};
    for (size_t i = 0; !rc && i < sizeof e / sizeof e[0]; i++) {
        arch_tensor_file_name(tn, sizeof tn, e[i].at, l);
        rc = convert_add_experts(w, bb, tn, e[i].cols, e[i].rows, E, p->type, NULL,
                                 sqrtf(3.0f / (float)e[i].cols), s, tmp);
    }
    const struct {
        int at;
        uint64_t n;
    } v[] = {{ARCH_T_FFN_GATE_INP_S, D},
             {ARCH_T_FFN_DOWN_EXPS_S, E},
             {ARCH_T_FFN_PRE_NORM_2, D},
             {ARCH_T_FFN_POST_NORM_1, D},
             {ARCH_T_FFN_POST_NORM_2, D}};
    for (size_t i = 0; !rc && i < sizeof v / sizeof v[0]; i++) {
        arch_tensor_file_name(tn, sizeof tn, v[i].at, l);
        convert_fill_uniform(tmp, v[i].n, 0.5f, s);
        for (uint64_t k = 0; k < v[i].n; k++) tmp[k] += 1.0f;
        rc = convert_add_f32(w, bb, tn, tmp, v[i].n, 1, QUANT_F32);
    }
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
    /* gemma4's experts are optional (the 26B-A4B has them, the 31B not) */
    const int moe = arch_has_block(a, ARCH_BLOCK_MOE) && (c.arch != ARCH_GEMMA4 || p->n_expert > 0);
    if ((c.arch != ARCH_GEMMA4 && moe != (p->n_expert > 0)) ||
        (!moe && (p->n_expert_used || p->expert_ffn))) {
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
    if (c.arch != ARCH_GEMMA4 && (swa != (p->n_swa > 0) || p->swa_period < -1 || (!swa && p->swa_period))) {
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
    const int g4 = c.arch == ARCH_GEMMA4;
    if (g4 && (p->n_swa <= 0 || p->swa_period < 0 || p->rope_freqs || p->rope_scaling != ARCH_SCALING_NONE)) {
        snprintf(err, errlen,
                 "synth: gemma4 needs a sliding window (n_swa > 0, period >= 0) and writes its own "
                 "rope_freqs, no rope scaling");
        return CK_EINVAL;
    }
    if (!g4 && (p->head_dim_full || p->n_kv_heads_full || p->rope_theta_swa > 0 || p->softcap > 0 ||
                p->n_embd_pl || p->n_kv_shared)) {
        snprintf(err, errlen,
                 "synth: architecture %s has no full-layer head shape, second RoPE base or soft cap",
                 a->name);
        return CK_EINVAL;
    }
    if (g4) {
        c.n_swa = p->n_swa;
        c.swa_period = p->swa_period;
        c.norm_eps = 1e-6f; /* Gemma's */
        if (!(p->rope_theta > 0)) c.rope_theta = 1e6f;
    } else {
        c.n_swa = p->n_swa;
        c.swa_period = p->swa_period > 0 ? p->swa_period : p->swa_period < 0 ? 0 : a->swa_period;
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
        c.emb_scale = 4.0f, c.resid_scale = 0.5f, c.logit_scale = 6.0f;
    }
    c.expert_gating = moe ? a->gating : 0;
    c.expert_act = moe ? a->act : 0;
    gguf_writer *w = NULL;
    convert_bufs bb = {0};
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
    if ((rc = convert_write_hparams(w, &c, name, p->type, 0)) || (g4 && (rc = synth_gemma4_keys(w, p, &c))) ||
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
            gguf_writer_set_f32(w, arch_key(k, sizeof k, a, ARCH_KEY_EMBD_SCALE), c.emb_scale) ||
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
    if (g4) {                               /* the full layers' wider heads, the per-layer embeddings */
        const g4_shape g = g4_of(p, &c);
        const uint64_t LP = (uint64_t)p->n_embd_pl * (uint64_t)c.n_layers;
        if ((uint64_t)c.n_heads * (uint64_t)g.hd_full * D > biggest)
            biggest = (uint64_t)c.n_heads * (uint64_t)g.hd_full * D;
        if (LP * (V > D ? V : D) > biggest) biggest = LP * (V > D ? V : D);
    }
    rc = CK_ENOMEM;
    if (!(tmp = malloc((size_t)biggest * sizeof *tmp))) goto out;
    /* Variance 1/fan_in keeps activations O(1) through the layers. */
    const int dtype = convert_dense_type(p->type, moe);
    convert_fill_uniform(tmp, V * D, 1.0f, &s);
    if ((rc = convert_add_f32(w, &bb, "token_embd.weight", tmp, D, V, dtype))) goto out;
    if (p->rope_freqs) {
        arch_llama3_freq_factors(c.head_dim, c.rope_theta, 8.0f, 1.0f, 4.0f, 8192, tmp);
        if ((rc = convert_add_f32(w, &bb, "rope_freqs.weight", tmp, HD / 2, 1, QUANT_F32))) goto out;
    }
    if (g4 && p->n_embd_pl) { /* the per-layer embeddings' token rows, projection and norm */
        const uint64_t LP = (uint64_t)p->n_embd_pl * (uint64_t)c.n_layers;
        convert_fill_uniform(tmp, V * LP, 1.0f, &s);
        if ((rc = convert_add_f32(w, &bb, "per_layer_token_embd.weight", tmp, LP, V, dtype))) goto out;
        convert_fill_uniform(tmp, LP * D, sqrtf(3.0f / (float)D), &s);
        if ((rc = convert_add_f32(w, &bb, "per_layer_model_proj.weight", tmp, D, LP, dtype))) goto out;
        convert_fill_uniform(tmp, (uint64_t)p->n_embd_pl, 0.5f, &s);
        for (int k = 0; k < p->n_embd_pl; k++) tmp[k] += 1.0f;
        if ((rc = convert_add_f32(w, &bb, "per_layer_proj_norm.weight", tmp, (uint64_t)p->n_embd_pl, 1,
                                  QUANT_F32)))
            goto out;
    }
    if (g4) { /* the full layers' "proportional" RoPE: a quarter of each head turns */
        const g4_shape g = g4_of(p, &c);
        const int half = g.hd_full / 2, turned = g.hd_full / 8;
        for (int i = 0; i < half; i++) tmp[i] = i < turned ? 1.0f : 1e30f;
        if ((rc = convert_add_f32(w, &bb, "rope_freqs.weight", tmp, (uint64_t)half, 1, QUANT_F32))) goto out;
    }
    /* gpt-oss's norm before the experts is post_attention_norm */
    const char *ffn_norm = a->need[ARCH_T_ATTN_POST_NORM] ? "post_attention_norm" : "ffn_norm";
    /* gpt-oss's experts: gate and up outputs of standard deviation 3, so
     * that its activation's clamp at +-7 bites now and then (as it does in
     * the real model) and a backend without it is seen to differ */
    const float gate_up_gain = a->act == ARCH_ACT_SWIGLU_OAI ? 3.0f : 1.0f;
    for (int l = 0; l < c.n_layers; l++) {
        if (g4) {
            if ((rc = synth_gemma4_layer(w, &bb, p, &c, l, tmp, &s, dtype))) goto out;
            continue;
        }
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
                convert_fill_uniform(tmp, t[i].cols * t[i].rows, sqrtf(3.0f / (float)t[i].cols), &s);
            if ((rc = convert_add_f32(w, &bb, tn, tmp, t[i].cols, t[i].rows, norm ? QUANT_F32 : dtype)))
                goto out;
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
                convert_fill_uniform(tmp, sc[i].cols * sc[i].rows, sqrtf(3.0f / (float)sc[i].cols), &s);
                if ((rc = convert_add_f32(w, &bb, tn, tmp, sc[i].cols, sc[i].rows, i ? dtype : QUANT_F32)))
                    goto out;
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
                convert_fill_uniform(tmp, n, m[i].a, &s);
                for (uint64_t k = 0; k < n; k++) tmp[k] += m[i].base;
                if (m[i].at == ARCH_T_SSM_A) /* A = -exp(A_log), as the converter writes it */
                    for (uint64_t k = 0; k < n; k++) tmp[k] = -expf(tmp[k]);
                if ((rc = convert_add_f32(w, &bb, tn, tmp, m[i].cols, m[i].rows,
                                          m[i].mat ? dtype : QUANT_F32)))
                    goto out;
            }
        }
        /* the router (logits of variance about 1: a spread softmax), then each
         * expert's gate, up and down as a dense layer's */
        if (layer_moe) {
            char tn[96];
            if (lead) { /* lfm2moe's choice bias: the size of the sigmoids' spread */
                arch_tensor_file_name(tn, sizeof tn, ARCH_T_FFN_EXP_PROBS_B, l);
                convert_fill_uniform(tmp, E, 0.3f, &s);
                if ((rc = convert_add_f32(w, &bb, tn, tmp, E, 1, QUANT_F32))) goto out;
            }
            arch_tensor_file_name(tn, sizeof tn, ARCH_T_FFN_GATE_INP, l);
            convert_fill_uniform(tmp, E * D, sqrtf(3.0f / (float)D), &s);
            if ((rc = convert_add_f32(w, &bb, tn, tmp, D, E, QUANT_F32))) goto out;
            struct {
                int at;
                uint64_t cols, rows;
            } e[] = {
                {ARCH_T_FFN_GATE_EXPS, D, FE}, {ARCH_T_FFN_UP_EXPS, D, FE}, {ARCH_T_FFN_DOWN_EXPS, FE, D}};
            for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
                arch_tensor_file_name(tn, sizeof tn, e[i].at, l);
                const float gain = e[i].at == ARCH_T_FFN_DOWN_EXPS ? 1.0f : gate_up_gain;
                if ((rc = convert_add_experts(w, &bb, tn, e[i].cols, e[i].rows, E, p->type, NULL,
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
            convert_fill_uniform(tmp, x[i].n, x[i].a, &s);
            for (uint64_t k = 0; k < x[i].n; k++) tmp[k] += x[i].base;
            if ((rc = convert_add_f32(w, &bb, tn, tmp, x[i].n, 1, QUANT_F32))) goto out;
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
            convert_fill_uniform(tmp, g[i].cols * g[i].rows, g[i].a, &s);
            for (uint64_t k = 0; k < g[i].cols * g[i].rows; k++) tmp[k] += g[i].base;
            if ((rc = convert_add_f32(w, &bb, tn, tmp, g[i].cols, g[i].rows, QUANT_F32))) goto out;
        }
    }
    for (uint64_t k = 0; k < D; k++) tmp[k] = 1.0f;
    if ((rc = convert_add_f32(
             w, &bb,
             arch_tensor_name(a->need[ARCH_T_TOKEN_EMBD_NORM] ? ARCH_T_TOKEN_EMBD_NORM : ARCH_T_OUTPUT_NORM),
             tmp, D, 1, QUANT_F32)))
        goto out;
    if (!p->tied) {
        convert_fill_uniform(tmp, V * D, sqrtf(3.0f / (float)D) * 4.0f, &s);
        if ((rc = convert_add_f32(w, &bb, "output.weight", tmp, D, V, dtype))) goto out;
    }
    rc = gguf_writer_write(w, path, err, errlen);
    if (rc) goto done;
out:
    if (rc) snprintf(err, errlen, "synth: %s", ck_strerror(rc));
done:
    free(tmp);
    gguf_writer_free(w);
    convert_bufs_free(&bb);
    return rc;
}
