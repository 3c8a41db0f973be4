/* test_arch_refusals.c - what the architecture table (arch.h) refuses,
 * each named in the message: an unknown architecture, an unknown scaling
 * type, an unknown tensor, a missing required tensor, expert counts out of
 * bounds, gpt-oss's keys and tensors that do not fit, lfm2's (and the CPU
 * backend's refusal of a batch that would not continue a recurrent state).
 * Each case rewrites a model confkv synth wrote and loads it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "gguf.h"
#include "kv.h"
#include "model.h"
#include "quant.h"
#include "test_arch_params.h"

static char dir[64];

static const char *tmp(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* ------------------------------------------------------------ refusals */

/* A copy of the GGUF at src with key `key` set to the string `val` (or
 * left out when val is NULL and key is set), tensor `drop` left out, and
 * a 1-D tensor `add` of n f32 zeros added. */
/* rewrite's work: key set to the string val, or (val NULL, key given)
 * to the u32 uval. */
static int rewrite_kv(const char *src, const char *dst, const char *key, const char *val, uint32_t uval,
                      const char *drop, const char *add, uint64_t n) {
    gguf_file *f = NULL;
    gguf_writer *w = NULL;
    char err[256];
    if (gguf_open(src, &f, err, sizeof err) || gguf_writer_new(&w)) return -1;
    int rc = 0;
    float *zeros = calloc(n ? n : 1, sizeof *zeros);
    for (int i = 0; i < gguf_n_kv(f) && !rc; i++) {
        const char *k = gguf_key_at(f, i);
        int type = gguf_kv_type(f, i);
        if (!strcmp(k, "general.alignment") || (key && !strcmp(k, key))) continue;
        if (type == GGUF_TYPE_STRING) {
            const char *s;
            size_t len;
            char buf[512];
            gguf_get_str(f, k, &s, &len);
            snprintf(buf, sizeof buf, "%.*s", (int)(len < 511 ? len : 511), s);
            rc = gguf_writer_set_str(w, k, buf);
        } else if (type == GGUF_TYPE_ARRAY) {
            int et;
            uint64_t cnt;
            const void *data;
            gguf_get_arr(f, k, &et, &cnt, &data);
            if (et != GGUF_TYPE_STRING) {
                rc = gguf_writer_set_arr(w, k, et, data, cnt);
                continue;
            }
            const char **ss = malloc(cnt * sizeof *ss);
            size_t *lens = malloc(cnt * sizeof *lens);
            for (uint64_t j = 0; j < cnt; j++) gguf_get_arr_str(f, k, j, &ss[j], &lens[j]);
            rc = gguf_writer_set_arr_str(w, k, ss, lens, cnt);
            free(ss);
            free(lens);
        } else {
            const void *v;
            gguf_get_val(f, k, &type, &v);
            rc = gguf_writer_set_val(w, k, type, v);
        }
    }
    if (key && val) rc |= gguf_writer_set_str(w, key, val);
    if (key && !val) rc |= gguf_writer_set_u32(w, key, uval);
    for (int i = 0; i < gguf_n_tensors(f) && !rc; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (drop && !strcmp(t->name, drop)) continue;
        rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    if (add && !rc) rc = gguf_writer_add_tensor(w, add, QUANT_F32, 1, &n, zeros);
    if (!rc) rc = gguf_writer_write(w, dst, err, sizeof err);
    gguf_writer_free(w);
    gguf_close(f);
    free(zeros);
    return rc ? -1 : 0;
}

static int rewrite(const char *src, const char *dst, const char *key, const char *val, const char *drop,
                   const char *add, uint64_t n) {
    return rewrite_kv(src, dst, val ? key : NULL, val, 0, drop, add, n);
}

static int rewrite_u32(const char *src, const char *dst, const char *key, uint32_t v) {
    return rewrite_kv(src, dst, key, NULL, v, NULL, NULL, 0);
}

static int refused(const char *path, const char *n1, const char *n2) {
    char err[512] = "";
    model *m = NULL;
    if (!model_load(path, NULL, &m, err, sizeof err)) {
        model_free(m);
        fprintf(stderr, "  %s loaded, expected a refusal\n", path);
        return 0;
    }
    if (!strstr(err, n1) || (n2 && !strstr(err, n2))) {
        fprintf(stderr, "  message '%s' lacks '%s' / '%s'\n", err, n1, n2 ? n2 : "");
        return 0;
    }
    return 1;
}

static void test_refusals(void) {
    char err[512];
    synth_params sp = base_params(ARCH_QWEN3);
    const char *q3 = tmp("q3.gguf"), *bad = tmp("bad.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, q3, err, sizeof err), "%s", err);
    model *m = NULL;
    CK_CHECK_MSG(!model_load(q3, NULL, &m, err, sizeof err), "%s", err); /* the copy itself loads */
    model_free(m);
    CK_CHECK(rewrite(q3, bad, NULL, NULL, NULL, NULL, 0) == 0);
    CK_CHECK_MSG(!model_load(bad, NULL, &m, err, sizeof err), "%s", err);
    model_free(m);
    /* unknown architecture */
    CK_CHECK(rewrite(q3, bad, "general.architecture", "mamba", NULL, NULL, 0) == 0);
    CK_CHECK(refused(bad, "architecture", "\"mamba\""));
    /* unknown rope scaling type */
    CK_CHECK(rewrite(q3, bad, "qwen3.rope.scaling.type", "longrope", NULL, NULL, 0) == 0);
    CK_CHECK(refused(bad, "qwen3.rope.scaling.type", "\"longrope\""));
    /* a tensor the table does not know, and one it knows but qwen3 has not */
    CK_CHECK(rewrite(q3, bad, NULL, NULL, NULL, "blk.1.attn_output.bias", 64) == 0);
    CK_CHECK(refused(bad, "blk.1.attn_output.bias", "qwen3"));
    CK_CHECK(rewrite(q3, bad, NULL, NULL, NULL, "rope_freqs.weight", 8) == 0);
    CK_CHECK(refused(bad, "rope_freqs.weight", NULL));
    /* a missing required tensor */
    CK_CHECK(rewrite(q3, bad, NULL, NULL, "blk.1.attn_k_norm.weight", NULL, 0) == 0);
    CK_CHECK(refused(bad, "blk.1.attn_k_norm.weight", "missing"));
    /* a bias of the wrong length */
    CK_CHECK(rewrite(q3, bad, NULL, NULL, NULL, "blk.0.attn_q.bias", 7) == 0);
    CK_CHECK(refused(bad, "blk.0.attn_q.bias", "shape"));
    /* smollm3 has no rope_freqs; mistral3 none of its optional output and FFN
     * biases or experts (llama.cpp's, not computed here) */
    synth_params s3 = base_params(ARCH_SMOLLM3);
    s3.n_layers = 4;
    const char *sm = tmp("s3.gguf");
    CK_CHECK_MSG(!convert_synth(&s3, sm, err, sizeof err), "%s", err);
    CK_CHECK(rewrite(sm, bad, NULL, NULL, NULL, "rope_freqs.weight", 8) == 0);
    CK_CHECK(refused(bad, "rope_freqs.weight", "smollm3"));
    synth_params m3 = base_params(ARCH_MISTRAL3);
    m3.attn_temp_scale = 0.1f;
    const char *mi = tmp("m3r.gguf");
    CK_CHECK_MSG(!convert_synth(&m3, mi, err, sizeof err), "%s", err);
    CK_CHECK(rewrite(mi, bad, NULL, NULL, NULL, "blk.0.attn_output.bias", 64) == 0);
    CK_CHECK(refused(bad, "blk.0.attn_output.bias", "mistral3"));
    CK_CHECK(rewrite(mi, bad, NULL, NULL, NULL, "blk.1.ffn_gate_inp.weight", 64) == 0);
    CK_CHECK(refused(bad, "blk.1.ffn_gate_inp.weight", "mistral3"));
    /* its temperature must be a number */
    CK_CHECK(rewrite(mi, bad, "mistral3.attention.temperature_scale", "0.1", NULL, NULL, 0) == 0);
    CK_CHECK(refused(bad, "mistral3.attention.temperature_scale", NULL));
    /* synth writes the keys only for the architecture that reads them */
    synth_params l3 = base_params(ARCH_LLAMA);
    l3.attn_temp_scale = 0.1f;
    CK_CHECK(convert_synth(&l3, bad, err, sizeof err) == CK_EINVAL && strstr(err, "temperature_scale"));
    unlink(sm);
    unlink(mi);
    unlink(q3);
    unlink(bad);
}

/* qwen3moe's keys and tensors: bounds, and what it has not. */
static void test_refusals_moe(void) {
    char err[512];
    synth_params sp = base_params(ARCH_QWEN3MOE);
    sp.n_expert = 4;
    sp.n_expert_used = 2;
    sp.expert_ffn = 32;
    const char *src = tmp("moe.gguf"), *bad = tmp("bad.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, src, err, sizeof err), "%s", err);
    model *m = NULL;
    CK_CHECK_MSG(!model_load(src, NULL, &m, err, sizeof err), "%s", err);
    CK_CHECK(m && m->cfg.n_expert == 4 && m->cfg.n_expert_used == 2 && m->cfg.expert_ffn == 32);
    if (m) { /* expert e's view is the e-th slice */
        model_tensor e3 = model_expert(&m->layers[1].down_exps, 4, 3);
        CK_CHECK(e3.n == 64 * 32 &&
                 (const float *)e3.data == (const float *)m->layers[1].down_exps.data + 3 * 64 * 32);
        CK_CHECK(!model_expert(&m->layers[1].down_exps, 4, 4).data);
    }
    model_free(m);
    /* used > count, count above the limit, no count at all */
    CK_CHECK(rewrite_u32(src, bad, "qwen3moe.expert_used_count", 5) == 0);
    CK_CHECK(refused(bad, "qwen3moe.expert_used_count", "expert_count"));
    CK_CHECK(rewrite_u32(src, bad, "qwen3moe.expert_count", 100000) == 0);
    CK_CHECK(refused(bad, "qwen3moe.expert_count", "512"));
    CK_CHECK(rewrite_kv(src, bad, "qwen3moe.expert_count", "four", 0, NULL, NULL, 0) == 0);
    CK_CHECK(refused(bad, "qwen3moe.expert_count", NULL));
    /* experts of a width the tensors do not have */
    CK_CHECK(rewrite_u32(src, bad, "qwen3moe.expert_feed_forward_length", 48) == 0);
    CK_CHECK(refused(bad, "ffn_gate_exps", "shape"));
    /* a shared expert (Qwen2-MoE's, not qwen3moe's), a dense FFN tensor */
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.0.ffn_gate_inp_shexp.weight", 64) == 0);
    CK_CHECK(refused(bad, "blk.0.ffn_gate_inp_shexp.weight", "qwen3moe"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.1.ffn_up.weight", 64) == 0);
    CK_CHECK(refused(bad, "blk.1.ffn_up.weight", "qwen3moe"));
    /* a missing expert tensor, one of the wrong shape */
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.1.ffn_down_exps.weight", NULL, 0) == 0);
    CK_CHECK(refused(bad, "blk.1.ffn_down_exps.weight", "missing"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.0.ffn_up_exps.weight", "blk.0.ffn_up_exps.weight", 64) == 0);
    CK_CHECK(refused(bad, "blk.0.ffn_up_exps.weight", "shape"));
    /* synth asks for experts where they belong */
    sp.n_expert = 0;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "experts"));
    sp = base_params(ARCH_QWEN3);
    sp.n_expert = 4;
    sp.n_expert_used = 1;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "no experts"));
    unlink(src);
    unlink(bad);
}

/* gpt-oss's keys and tensors: what llama.cpp requires, the window's
 * bounds, the *_swa variants the engine does not compute apart. */
static void test_refusals_gpt_oss(void) {
    char err[512];
    synth_params sp = gpt_oss_params();
    const char *src = tmp("oss.gguf"), *bad = tmp("bad.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, src, err, sizeof err), "%s", err);
    model *m = NULL;
    CK_CHECK_MSG(!model_load(src, NULL, &m, err, sizeof err), "%s", err);
    CK_CHECK(m && m->cfg.n_swa == 11 && m->cfg.swa_period == 2 &&
             m->cfg.expert_gating == ARCH_GATING_SOFTMAX_WEIGHT && m->cfg.expert_act == ARCH_ACT_SWIGLU_OAI &&
             m->layers[2].sinks.n == 4 && m->layers[0].gate_exps_b.n == 8 * 48 &&
             m->layers[1].down_exps_b.n == 8 * 64 && m->layers[0].bo.n == 64);
    model_free(m);
    /* the pattern: read when written, 0 allowed (every layer), an array or a string refused */
    CK_CHECK(rewrite_u32(src, bad, "gpt-oss.attention.sliding_window_pattern", 0) == 0);
    CK_CHECK_MSG(!model_load(bad, NULL, &m, err, sizeof err) && m->cfg.swa_period == 0, "%s", err);
    model_free(m);
    m = NULL;
    CK_CHECK(rewrite(src, bad, "gpt-oss.attention.sliding_window_pattern", "2", NULL, NULL, 0) == 0);
    CK_CHECK(refused(bad, "gpt-oss.attention.sliding_window_pattern", NULL));
    /* a window of 0 (it would hide even the token itself) */
    CK_CHECK(rewrite_kv(src, bad, "gpt-oss.attention.sliding_window", NULL, 0, NULL, NULL, 0) == 0);
    CK_CHECK(refused(bad, "gpt-oss.attention.sliding_window", NULL));
    /* a head size, rotation or RoPE base of its own on the windowed layers */
    CK_CHECK(rewrite_u32(src, bad, "gpt-oss.attention.key_length_swa", 64) == 0);
    CK_CHECK(refused(bad, "gpt-oss.attention.key_length_swa", "differs"));
    CK_CHECK(rewrite_u32(src, bad, "gpt-oss.rope.dimension_count_swa", 16) == 0);
    CK_CHECK(refused(bad, "gpt-oss.rope.dimension_count_swa", "differs"));
    CK_CHECK(rewrite_u32(src, bad, "gpt-oss.rope.freq_base_swa", 10000) == 0);
    CK_CHECK(refused(bad, "gpt-oss.rope.freq_base_swa", "differs"));
    CK_CHECK(rewrite_u32(src, bad, "gpt-oss.attention.key_length_swa", 32) == 0); /* the same: read */
    CK_CHECK_MSG(!model_load(bad, NULL, &m, err, sizeof err), "%s", err);
    model_free(m);
    /* required tensors: the sinks, the output bias, output.weight (no tying), an expert bias */
    static const char *const req[] = {"blk.2.attn_sinks.weight", "blk.0.attn_output.bias",
                                      "output.weight",           "blk.1.ffn_down_exps.bias",
                                      "blk.0.ffn_gate_inp.bias", "blk.1.post_attention_norm.weight"};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        CK_CHECK(rewrite(src, bad, NULL, NULL, req[i], NULL, 0) == 0);
        CK_CHECK(refused(bad, req[i], "missing"));
    }
    /* tensors gpt-oss has not: ffn_norm (its norm is post_attention_norm), q/k norms */
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.0.ffn_norm.weight", 64) == 0);
    CK_CHECK(refused(bad, "blk.0.ffn_norm.weight", "gpt-oss"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.1.attn_q_norm.weight", 32) == 0);
    CK_CHECK(refused(bad, "blk.1.attn_q_norm.weight", "gpt-oss"));
    /* sinks of the wrong length */
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.0.attn_sinks.weight", "blk.0.attn_sinks.weight", 5) == 0);
    CK_CHECK(refused(bad, "blk.0.attn_sinks.weight", "shape"));
    /* the others read no window; synth asks for one where it belongs, refuses tying */
    sp.n_swa = 0;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "sliding window"));
    sp = gpt_oss_params();
    sp.tied = 1;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "output.weight"));
    sp = base_params(ARCH_QWEN3MOE);
    sp.n_expert = 4;
    sp.n_expert_used = 2;
    sp.n_swa = 8;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "no sliding window"));
    unlink(src);
    unlink(bad);
}

/* lfm2: l_cache out of range, a sliding window, per-layer head counts that
 * differ, a layer without its kind's tensors or with the other kind's, the
 * final norm under its lfm2 name; synth's own checks. */
static void test_refusals_lfm2(void) {
    char err[512];
    synth_params sp = base_params(ARCH_LFM2); /* 2 layers: 0 convolution, 1 attention... */
    sp.n_layers = 4;                          /* ...of 4: 0, 1, 3 convolution, 2 attention */
    const char *src = tmp("lfm2.gguf"), *bad = tmp("bad.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, src, err, sizeof err), "%s", err);
    model *m = NULL;
    CK_CHECK_MSG(!model_load(src, NULL, &m, err, sizeof err), "%s", err);
    CK_CHECK(m && m->cfg.conv_l == 3 && m->cfg.n_conv_layers == 3 && m->cfg.n_kv_heads == 2 &&
             m->layers[0].sc_in.n == 3 * 64 * 64 && m->layers[2].sc_in.n == 0 && m->layers[2].wq.n &&
             model_state_floats(&m->cfg) == 3 * 2 * 64);
    model_free(m);
    CK_CHECK(rewrite_u32(src, bad, "lfm2.shortconv.l_cache", 1) == 0);
    CK_CHECK(refused(bad, "lfm2.shortconv.l_cache", "outside 2..16"));
    CK_CHECK(rewrite_u32(src, bad, "lfm2.shortconv.l_cache", 17) == 0);
    CK_CHECK(refused(bad, "lfm2.shortconv.l_cache", "outside 2..16"));
    CK_CHECK(rewrite_u32(src, bad, "lfm2.attention.sliding_window", 8) == 0);
    CK_CHECK(refused(bad, "lfm2.attention.sliding_window", "not computed"));
    /* a scalar head_count_kv: every layer attention, so layer 0 lacks attn_q */
    CK_CHECK(rewrite_u32(src, bad, "lfm2.attention.head_count_kv", 2) == 0);
    CK_CHECK(refused(bad, "layer 0 is an attention layer", "attn_q is missing"));
    /* the kinds' tensors */
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.3.shortconv.in_proj.weight", NULL, 0) == 0);
    CK_CHECK(refused(bad, "layer 3 is a short-convolution layer", "shortconv.in_proj is missing"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.2.attn_k_norm.weight", NULL, 0) == 0);
    CK_CHECK(refused(bad, "layer 2 is an attention layer", "attn_k_norm is missing"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.0.attn_q_norm.weight", 16) == 0);
    CK_CHECK(refused(bad, "layer 0 is a short-convolution layer", "attn_q_norm is there"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.1.shortconv.conv.weight", "blk.1.shortconv.conv.weight", 3) ==
             0);
    CK_CHECK(refused(bad, "blk.1.shortconv.conv.weight", "shape"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, "token_embd_norm.weight", NULL, 0) == 0);
    CK_CHECK(refused(bad, "token_embd_norm.weight", "missing"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "output_norm.weight", 64) == 0);
    CK_CHECK(refused(bad, "output_norm.weight", "lfm2"));
    /* synth: taps in range, and only for lfm2 */
    sp.conv_l = 1;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "conv_l"));
    sp = base_params(ARCH_QWEN3);
    sp.conv_l = 3;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "no short-convolution"));
    unlink(src);
    unlink(bad);
}

/* granitehybrid: ssm.* keys out of range or inconsistent, a layer without
 * its kind's tensors or with the other kind's, the MoE variant (Granite
 * 4.0-H Tiny / Small: ffn_gate_inp) and attention's output bias by name;
 * synth's own checks. */
static void test_refusals_granitehybrid(void) {
    char err[512];
    synth_params sp = base_params(ARCH_GRANITEHYBRID);
    sp.n_layers = 4; /* 0, 1, 3 Mamba2, 2 attention */
    const char *src = tmp("gh.gguf"), *bad = tmp("bad.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, src, err, sizeof err), "%s", err);
    model *m = NULL;
    CK_CHECK_MSG(!model_load(src, NULL, &m, err, sizeof err), "%s", err);
    /* dim 64: inner 128, 8 heads of 16, 2 groups, state 16, 4 taps; conv channels 128 + 64 */
    CK_CHECK(m && m->cfg.n_ssm_layers == 3 && m->cfg.ssm_d_inner == 128 && m->cfg.ssm_n_head == 8 &&
             m->cfg.ssm_n_group == 2 && m->cfg.ssm_d_state == 16 && m->cfg.ssm_d_conv == 4 &&
             m->cfg.no_rope_step == 1 && m->cfg.emb_scale == 4.0f && m->cfg.resid_scale == 0.5f &&
             m->cfg.logit_scale == 6.0f && m->cfg.attn_scale == 1.0f / 16 &&
             m->layers[0].ssm_in.n == (2 * 128 + 64 + 8) * 64 && !m->layers[0].wq.n && m->layers[2].wq.n &&
             !m->layers[2].ssm_in.n &&
             model_state_floats(&m->cfg) == 3 * ((size_t)3 * (128 + 64) + (size_t)128 * 16));
    model_free(m);
    CK_CHECK(rewrite_u32(src, bad, "granitehybrid.ssm.conv_kernel", 1) == 0);
    CK_CHECK(refused(bad, "granitehybrid.ssm.* conv_kernel 1", "not a shape"));
    CK_CHECK(rewrite_u32(src, bad, "granitehybrid.ssm.time_step_rank", 7) == 0);
    CK_CHECK(refused(bad, "time_step_rank 7", "not a shape"));
    CK_CHECK(rewrite_u32(src, bad, "granitehybrid.ssm.state_size", 257) == 0);
    CK_CHECK(refused(bad, "state_size 257", "not a shape"));
    CK_CHECK(rewrite_u32(src, bad, "granitehybrid.ssm.group_count", 3) == 0);
    CK_CHECK(refused(bad, "group_count 3", "not a shape"));
    /* a scalar head_count_kv: every layer attention, so layer 0 lacks attn_q */
    CK_CHECK(rewrite_u32(src, bad, "granitehybrid.attention.head_count_kv", 2) == 0);
    CK_CHECK(refused(bad, "layer 0 is an attention layer", "attn_q is missing"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.3.ssm_d", NULL, 0) == 0);
    CK_CHECK(refused(bad, "layer 3 is a Mamba2 layer", "ssm_d is missing"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.0.attn_v.bias", 32) == 0);
    CK_CHECK(refused(bad, "layer 0 is a Mamba2 layer", "q/k/v biases"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.1.ssm_conv1d.weight", "blk.1.ssm_conv1d.weight", 3) == 0);
    CK_CHECK(refused(bad, "blk.1.ssm_conv1d.weight", "shape"));
    /* the MoE variant and the optional biases llama.cpp reads: not computed */
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.0.ffn_gate_inp.weight", 64 * 4) == 0);
    CK_CHECK(refused(bad, "blk.0.ffn_gate_inp.weight", "granitehybrid"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.2.attn_output.bias", 64) == 0);
    CK_CHECK(refused(bad, "blk.2.attn_output.bias", "granitehybrid"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.2.ffn_up.bias", 96) == 0);
    CK_CHECK(refused(bad, "blk.2.ffn_up.bias", "granitehybrid"));
    /* synth: a Mamba2 shape llama.cpp computes, and only for granitehybrid */
    sp.ssm_n_head = 3;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "time_step_rank 3"));
    sp = base_params(ARCH_LFM2);
    sp.ssm_d_state = 8;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "no Mamba2"));
    unlink(src);
    unlink(bad);
}

/* lfm2moe: the dense lead past the layers, a gating other than sigmoid, a
 * layer with the other kind's feed-forward or without its choice bias. */
static void test_refusals_lfm2moe(void) {
    char err[512];
    synth_params sp = base_params(ARCH_LFM2MOE);
    sp.n_layers = 3;
    sp.n_expert = 4;
    sp.n_expert_used = 2;
    sp.n_dense_lead = 1; /* layer 0 dense, 1 and 2 experts */
    const char *src = tmp("lfm2moe.gguf"), *bad = tmp("bad.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, src, err, sizeof err), "%s", err);
    model *m = NULL;
    CK_CHECK_MSG(!model_load(src, NULL, &m, err, sizeof err), "%s", err);
    CK_CHECK(m && m->cfg.n_dense_lead == 1 && m->cfg.expert_gating == ARCH_GATING_SIGMOID_NORM &&
             m->layers[0].w1.n && !m->layers[0].router.n && m->layers[1].probs_b.n == 4 &&
             !m->layers[2].w1.n);
    model_free(m);
    CK_CHECK(rewrite_u32(src, bad, "lfm2moe.leading_dense_block_count", 4) == 0);
    CK_CHECK(refused(bad, "lfm2moe.leading_dense_block_count", "past the 3 layers"));
    CK_CHECK(rewrite_u32(src, bad, "lfm2moe.expert_gating_func", 1) == 0);
    CK_CHECK(refused(bad, "lfm2moe.expert_gating_func", "sigmoid"));
    CK_CHECK(rewrite_u32(src, bad, "lfm2moe.leading_dense_block_count", 2) == 0);
    CK_CHECK(refused(bad, "layer 1 has the dense feed-forward", "ffn_gate is missing"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, "blk.2.exp_probs_b.bias", NULL, 0) == 0);
    CK_CHECK(refused(bad, "layer 2 has experts", "exp_probs_b is missing"));
    sp.n_dense_lead = 4;
    CK_CHECK(convert_synth(&sp, bad, err, sizeof err) == CK_EINVAL && strstr(err, "n_dense_lead"));
    unlink(src);
    unlink(bad);
}

/* The CPU backend's recurrent state: a sequence continues its slot exactly
 * or starts at 0; slots distinct and in range; a forward that would read
 * another sequence's state is refused (CK_EINVAL), not computed. */
static void test_lfm2_state_slots(void) {
    char err[512];
    synth_params sp = base_params(ARCH_LFM2);
    const char *src = tmp("lfm2s.gguf");
    model *m = NULL;
    backend *b = NULL;
    CK_CHECK_MSG(!convert_synth(&sp, src, err, sizeof err) && !model_load(src, NULL, &m, err, sizeof err),
                 "%s", err);
    be_options o = {.max_batch_tokens = 8,
                    .n_kv_blocks = 4,
                    .block_size = 16,
                    .n_threads = 1,
                    .max_ctx = 64,
                    .n_state_slots = 2};
    CK_CHECK_MSG(m && !be_cpu_new(m, &o, &b, err, sizeof err), "%s", err);
    be_memory plan;
    CK_CHECK(b && !be_cpu_plan(m, &o, &plan) && plan.state == 2 * (model_state_floats(&m->cfg) * 4 + 4) &&
             plan.total == b->ops->memory_bytes(b));
    kv_pool pool;
    kv_seq q;
    CK_CHECK(!kv_pool_init(&pool, 4, 16) && !kv_seq_init(&q, 0, 64, 16) && !kv_seq_reserve(&q, &pool, 16));
    float *logits = malloc(2 * (size_t)m->cfg.vocab_size * sizeof *logits);
    int32_t tok[4] = {5, 6, 7, 8}, pos[4], six[4] = {0, 0, 1, 1}, row[4] = {-1, -1, -1, -1};
    be_seq_view v[2] = {{.blocks = q.hot, .n_blocks = q.n_blocks, .state = 0},
                        {.blocks = q.hot, .n_blocks = q.n_blocks, .state = 1}};
    struct {
        int p0, p1, n_seqs, s0, s1, rc; /* positions of the two pairs of tokens, slots */
    } c[] = {
        {0, 0, 2, 0, 1, CK_OK},     /* both start: slot 0 next 2, slot 1 next 2 */
        {2, 4, 2, 0, 1, CK_EINVAL}, /* slot 1 would skip 2 and 3 */
        {2, 2, 2, 0, 0, CK_EINVAL}, /* one slot for two sequences */
        {2, 2, 2, 0, 2, CK_EINVAL}, /* no slot 2 */
        {2, 2, 2, 1, 0, CK_OK},     /* each continues, slots given in either order */
        {4, 0, 2, 0, 1, CK_OK},     /* slot 1 starts over at 0 */
        {5, 0, 1, 0, 0, CK_EINVAL}, /* slot 0's next is 6 */
    };
    for (size_t i = 0; b && logits && i < sizeof c / sizeof c[0]; i++) {
        pos[0] = c[i].p0, pos[1] = c[i].p0 + 1, pos[2] = c[i].p1, pos[3] = c[i].p1 + 1;
        v[0].state = c[i].s0, v[1].state = c[i].s1;
        be_batch bt = {c[i].n_seqs == 2 ? 4 : 2, tok, pos, six, row, c[i].n_seqs, v, 0};
        int rc = b->ops->forward(b, &bt, logits);
        CK_CHECK_MSG(rc == c[i].rc, "case %zu: %d, expected %d", i, rc, c[i].rc);
    }
    free(logits);
    kv_seq_reset(&q, &pool);
    kv_seq_free(&q);
    kv_pool_free(&pool);
    be_free(b);
    model_free(m);
    unlink(src);
}

/* gemma4's: shared KV layers whose source is not of their kind, per-layer
 * embeddings the key asks for and the file lacks, a
 * windowed layer's RoPE over part of its head, a head count not a multiple
 * of its layer's KV heads, a router without the rest of the experts, the
 * fused ffn_gate_up_exps: each by name. */
static void test_refusals_gemma4(void) {
    char err[512];
    synth_params sp = g4_params();
    const char *src = tmp("g4.gguf"), *bad = tmp("g4bad.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, src, err, sizeof err), "%s", err);
    CK_CHECK(rewrite_u32(src, bad, "gemma4.attention.shared_kv_layers", 2) == 0);
    CK_CHECK(refused(bad, "shares the KV of layer 2", "not of its kind"));
    CK_CHECK(rewrite_u32(src, bad, "gemma4.attention.shared_kv_layers", 5) == 0);
    CK_CHECK(refused(bad, "shared_kv_layers", "at most"));
    CK_CHECK(rewrite_u32(src, bad, "gemma4.embedding_length_per_layer_input", 256) == 0);
    CK_CHECK(refused(bad, "embedding_length_per_layer_input", "disagree"));
    CK_CHECK(rewrite(src, bad, "general.architecture", "gemma4", "blk.0.attn_k.weight", NULL, 0) == 0);
    CK_CHECK(refused(bad, "blk.0.attn_k.weight", "missing"));
    CK_CHECK(rewrite_u32(src, bad, "gemma4.rope.dimension_count_swa", 16) == 0);
    CK_CHECK(refused(bad, "rope.dimension_count_swa 16", NULL));
    CK_CHECK(rewrite_u32(src, bad, "gemma4.attention.head_count", 3) == 0);
    CK_CHECK(refused(bad, "head_count 3", "head_count_kv"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.0.ffn_gate_inp.weight", 64) == 0);
    CK_CHECK(refused(bad, "ffn_gate_inp.weight", "other expert tensors"));
    CK_CHECK(rewrite(src, bad, NULL, NULL, NULL, "blk.0.ffn_gate_up_exps.weight", 64) == 0);
    CK_CHECK(refused(bad, "blk.0.ffn_gate_up_exps.weight", "gemma4"));
    CK_CHECK(rewrite(src, bad, "general.architecture", "gemma4", "blk.1.post_ffw_norm.weight", NULL, 0) == 0);
    CK_CHECK(refused(bad, "blk.1.post_ffw_norm.weight", "missing"));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/confkv-arch-refusals-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    CK_RUN(test_refusals);
    CK_RUN(test_refusals_moe);
    CK_RUN(test_refusals_gpt_oss);
    CK_RUN(test_refusals_lfm2);
    CK_RUN(test_lfm2_state_slots);
    CK_RUN(test_refusals_lfm2moe);
    CK_RUN(test_refusals_gemma4);
    CK_RUN(test_refusals_granitehybrid);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return ck_test_summary();
}
