/* arch.c - the architecture table and RoPE's per-pair frequencies (arch.h). */
#include "arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor names, in enum arch_tensor order; per_layer ones get "blk.N.". */
static const struct {
    const char *name;
    int per_layer;
} tensors[ARCH_T_COUNT] = {
    [ARCH_T_TOKEN_EMBD] = {"token_embd.weight", 0},
    [ARCH_T_OUTPUT_NORM] = {"output_norm.weight", 0},
    [ARCH_T_OUTPUT] = {"output.weight", 0},
    [ARCH_T_ROPE_FREQS] = {"rope_freqs.weight", 0},
    [ARCH_T_ATTN_NORM] = {"attn_norm.weight", 1},
    [ARCH_T_ATTN_Q] = {"attn_q.weight", 1},
    [ARCH_T_ATTN_K] = {"attn_k.weight", 1},
    [ARCH_T_ATTN_V] = {"attn_v.weight", 1},
    [ARCH_T_ATTN_OUT] = {"attn_output.weight", 1},
    [ARCH_T_ATTN_Q_B] = {"attn_q.bias", 1},
    [ARCH_T_ATTN_K_B] = {"attn_k.bias", 1},
    [ARCH_T_ATTN_V_B] = {"attn_v.bias", 1},
    [ARCH_T_ATTN_Q_NORM] = {"attn_q_norm.weight", 1},
    [ARCH_T_ATTN_K_NORM] = {"attn_k_norm.weight", 1},
    [ARCH_T_FFN_NORM] = {"ffn_norm.weight", 1},
    [ARCH_T_FFN_GATE] = {"ffn_gate.weight", 1},
    [ARCH_T_FFN_DOWN] = {"ffn_down.weight", 1},
    [ARCH_T_FFN_UP] = {"ffn_up.weight", 1},
    [ARCH_T_FFN_GATE_INP] = {"ffn_gate_inp.weight", 1},
    [ARCH_T_FFN_GATE_EXPS] = {"ffn_gate_exps.weight", 1},
    [ARCH_T_FFN_UP_EXPS] = {"ffn_up_exps.weight", 1},
    [ARCH_T_FFN_DOWN_EXPS] = {"ffn_down_exps.weight", 1},
    [ARCH_T_ATTN_OUT_B] = {"attn_output.bias", 1},
    [ARCH_T_ATTN_SINKS] = {"attn_sinks.weight", 1},
    [ARCH_T_ATTN_POST_NORM] = {"post_attention_norm.weight", 1},
    [ARCH_T_FFN_GATE_INP_B] = {"ffn_gate_inp.bias", 1},
    [ARCH_T_FFN_GATE_EXPS_B] = {"ffn_gate_exps.bias", 1},
    [ARCH_T_FFN_UP_EXPS_B] = {"ffn_up_exps.bias", 1},
    [ARCH_T_FFN_DOWN_EXPS_B] = {"ffn_down_exps.bias", 1},
    [ARCH_T_TOKEN_EMBD_NORM] = {"token_embd_norm.weight", 0},
    [ARCH_T_SHORTCONV_CONV] = {"shortconv.conv.weight", 1},
    [ARCH_T_SHORTCONV_IN] = {"shortconv.in_proj.weight", 1},
    [ARCH_T_SHORTCONV_OUT] = {"shortconv.out_proj.weight", 1},
    [ARCH_T_FFN_EXP_PROBS_B] = {"exp_probs_b.bias", 1},
    [ARCH_T_FFN_POST_NORM] = {"post_ffw_norm.weight", 1},
    [ARCH_T_LAYER_OUT_SCALE] = {"layer_output_scale.weight", 1},
    [ARCH_T_FFN_GATE_INP_S] = {"ffn_gate_inp.scale", 1},
    [ARCH_T_FFN_PRE_NORM_2] = {"pre_ffw_norm_2.weight", 1},
    [ARCH_T_FFN_POST_NORM_1] = {"post_ffw_norm_1.weight", 1},
    [ARCH_T_FFN_POST_NORM_2] = {"post_ffw_norm_2.weight", 1},
    [ARCH_T_FFN_DOWN_EXPS_S] = {"ffn_down_exps.scale", 1},
    [ARCH_T_PLE_TOKEN_EMBD] = {"per_layer_token_embd.weight", 0},
    [ARCH_T_PLE_MODEL_PROJ] = {"per_layer_model_proj.weight", 0},
    [ARCH_T_PLE_PROJ_NORM] = {"per_layer_proj_norm.weight", 0},
    [ARCH_T_PLE_INP_GATE] = {"inp_gate.weight", 1},
    [ARCH_T_PLE_PROJ] = {"proj.weight", 1},
    [ARCH_T_PLE_POST_NORM] = {"post_norm.weight", 1},
    [ARCH_T_SSM_IN] = {"ssm_in.weight", 1},
    [ARCH_T_SSM_CONV1D] = {"ssm_conv1d.weight", 1},
    [ARCH_T_SSM_CONV1D_B] = {"ssm_conv1d.bias", 1},
    [ARCH_T_SSM_DT_B] = {"ssm_dt.bias", 1},
    [ARCH_T_SSM_A] = {"ssm_a", 1},
    [ARCH_T_SSM_D] = {"ssm_d", 1},
    [ARCH_T_SSM_NORM] = {"ssm_norm.weight", 1},
    [ARCH_T_SSM_OUT] = {"ssm_out.weight", 1},
};

/* What every one of them has: the plain Llama attention block, and the
 * norm before the feed-forward (dense or experts). */
#define R ARCH_REQUIRED
#define O ARCH_OPTIONAL
#define LLAMA_ATTN                                                                                  \
    [ARCH_T_TOKEN_EMBD] = R, [ARCH_T_OUTPUT_NORM] = R, [ARCH_T_OUTPUT] = O, [ARCH_T_ATTN_NORM] = R, \
    [ARCH_T_ATTN_Q] = R, [ARCH_T_ATTN_K] = R, [ARCH_T_ATTN_V] = R, [ARCH_T_ATTN_OUT] = R,           \
    [ARCH_T_FFN_NORM] = R
/* The plain Llama block: attention and the dense SwiGLU feed-forward. */
#define LLAMA_CORE LLAMA_ATTN, [ARCH_T_FFN_GATE] = R, [ARCH_T_FFN_DOWN] = R, [ARCH_T_FFN_UP] = R

/* Every layer of the dense ones: attention, then the SwiGLU feed-forward. */
#define LLAMA_BLOCKS \
    { ARCH_BLOCK_ATTN, ARCH_BLOCK_FFN }

/* The q/k/v biases are optional in all, as llama.cpp's create_tensor_qkv
 * takes them (Qwen2 files have them; a Llama with them computes them too).
 * rope_freqs only in llama and mistral3 (llama.cpp reads it for those
 * graphs only). */
static const arch_info table[] = {
    {"llama",
     ARCH_LLAMA,
     ARCH_ROPE_NORMAL,
     {LLAMA_CORE, [ARCH_T_ROPE_FREQS] = O, [ARCH_T_ATTN_Q_B] = O, [ARCH_T_ATTN_K_B] = O,
      [ARCH_T_ATTN_V_B] = O},
     "Llama 2/3.x, Mistral, TinyLlama, SmolLM2: adjacent-pair RoPE, optional rope_freqs "
     "(Llama 3.1 factors), rope scaling none/linear/yarn",
     LLAMA_BLOCKS,
     0,
     0,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
    {"qwen2",
     ARCH_QWEN2,
     ARCH_ROPE_NEOX,
     {LLAMA_CORE, [ARCH_T_ATTN_Q_B] = O, [ARCH_T_ATTN_K_B] = O, [ARCH_T_ATTN_V_B] = O},
     "Qwen2/2.5: q/k/v biases, NEOX RoPE",
     LLAMA_BLOCKS,
     0,
     0,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
    {"qwen3",
     ARCH_QWEN3,
     ARCH_ROPE_NEOX,
     {LLAMA_CORE, [ARCH_T_ATTN_Q_B] = O, [ARCH_T_ATTN_K_B] = O, [ARCH_T_ATTN_V_B] = O,
      [ARCH_T_ATTN_Q_NORM] = R, [ARCH_T_ATTN_K_NORM] = R},
     "Qwen3: RMSNorm of each q and k head before RoPE, NEOX RoPE, head_dim from key_length",
     LLAMA_BLOCKS,
     0,
     0,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
    /* llama.cpp's smollm3: Llama's tensors (no rope_freqs), every fourth
     * layer without RoPE; the step is the graph's constant, not a key. */
    {"smollm3",
     ARCH_SMOLLM3,
     ARCH_ROPE_NORMAL,
     {LLAMA_CORE, [ARCH_T_ATTN_Q_B] = O, [ARCH_T_ATTN_K_B] = O, [ARCH_T_ATTN_V_B] = O},
     "SmolLM3: no RoPE on every fourth layer (layer l with (l + 1) % 4 == 0)",
     LLAMA_BLOCKS,
     4,
     0,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
    /* llama.cpp's mistral3 (Mistral Small 3.x, Ministral 3): Llama's
     * tensors and rope_freqs; its optional attn_output and FFN biases and
     * its MoE form are not in the table, so a file with them is refused. */
    {"mistral3",
     ARCH_MISTRAL3,
     ARCH_ROPE_NORMAL,
     {LLAMA_CORE, [ARCH_T_ROPE_FREQS] = O, [ARCH_T_ATTN_Q_B] = O, [ARCH_T_ATTN_K_B] = O,
      [ARCH_T_ATTN_V_B] = O},
     "Mistral Small 3.x, Ministral 3: queries scaled by 1 + temperature_scale "
     "ln(floor(pos / original context) + 1), YaRN's yarn_log_multiplier",
     LLAMA_BLOCKS,
     0,
     ARCH_READS_YARN_LOG_MUL | ARCH_READS_ATTN_TEMP,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
    /* no dense feed-forward, no shared expert: a file with either is refused
     * as having a tensor qwen3moe has not */
    {"qwen3moe",
     ARCH_QWEN3MOE,
     ARCH_ROPE_NEOX,
     {LLAMA_ATTN, [ARCH_T_ATTN_Q_B] = O, [ARCH_T_ATTN_K_B] = O, [ARCH_T_ATTN_V_B] = O,
      [ARCH_T_ATTN_Q_NORM] = R, [ARCH_T_ATTN_K_NORM] = R, [ARCH_T_FFN_GATE_INP] = R,
      [ARCH_T_FFN_GATE_EXPS] = R, [ARCH_T_FFN_UP_EXPS] = R, [ARCH_T_FFN_DOWN_EXPS] = R},
     "Qwen3 MoE (Qwen3-30B-A3B): qwen3's attention, then a mixture of SwiGLU experts, the top "
     "expert_used_count of a softmax router, their weights renormalised",
     {ARCH_BLOCK_ATTN, ARCH_BLOCK_MOE},
     0,
     0,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
    /* llama.cpp's openai-moe (gpt-oss-20b/120b): every tensor its loader
     * requires is required here too (output.weight included: it ties
     * none); the q/k/v biases are create_tensor_qkv's optional ones. The
     * norm before the experts is post_attention_norm, not ffn_norm. The
     * window's period 2 is the graph's default (even layers windowed). */
    {"gpt-oss",
     ARCH_GPT_OSS,
     ARCH_ROPE_NEOX,
     {[ARCH_T_TOKEN_EMBD] = R,     [ARCH_T_OUTPUT_NORM] = R,     [ARCH_T_OUTPUT] = R,
      [ARCH_T_ATTN_NORM] = R,      [ARCH_T_ATTN_Q] = R,          [ARCH_T_ATTN_K] = R,
      [ARCH_T_ATTN_V] = R,         [ARCH_T_ATTN_OUT] = R,        [ARCH_T_ATTN_Q_B] = O,
      [ARCH_T_ATTN_K_B] = O,       [ARCH_T_ATTN_V_B] = O,        [ARCH_T_ATTN_OUT_B] = R,
      [ARCH_T_ATTN_SINKS] = R,     [ARCH_T_ATTN_POST_NORM] = R,  [ARCH_T_FFN_GATE_INP] = R,
      [ARCH_T_FFN_GATE_INP_B] = R, [ARCH_T_FFN_GATE_EXPS] = R,   [ARCH_T_FFN_UP_EXPS] = R,
      [ARCH_T_FFN_DOWN_EXPS] = R,  [ARCH_T_FFN_GATE_EXPS_B] = R, [ARCH_T_FFN_UP_EXPS_B] = R,
      [ARCH_T_FFN_DOWN_EXPS_B] = R},
     "gpt-oss (OpenAI gpt-oss-20b/120b): attention with an output bias and a sink logit per head, a "
     "sliding window on alternate layers, then experts with biases chosen by the top logits "
     "(softmax over the chosen), clamped SwiGLU",
     {ARCH_BLOCK_ATTN, ARCH_BLOCK_MOE},
     0,
     ARCH_READS_SWA,
     ARCH_GATING_SOFTMAX_WEIGHT,
     ARCH_ACT_SWIGLU_OAI,
     2},
    /* llama.cpp's lfm2 (LFM2-350M/700M/1.2B/2.6B, LFM2.5): the attention
     * tensors and the short-convolution ones are optional here because each
     * layer has one set or the other (its head_count_kv entry says which);
     * model.c requires the whole set of the layer's kind and refuses the
     * other's. Its q/k head norms are required on attention layers. No
     * q/k/v biases (llama.cpp's loader reads none for it). */
    {"lfm2",
     ARCH_LFM2,
     ARCH_ROPE_NEOX,
     {[ARCH_T_TOKEN_EMBD] = R,
      [ARCH_T_TOKEN_EMBD_NORM] = R,
      [ARCH_T_OUTPUT] = O,
      [ARCH_T_ATTN_NORM] = R,
      [ARCH_T_ATTN_Q] = O,
      [ARCH_T_ATTN_K] = O,
      [ARCH_T_ATTN_V] = O,
      [ARCH_T_ATTN_OUT] = O,
      [ARCH_T_ATTN_Q_NORM] = O,
      [ARCH_T_ATTN_K_NORM] = O,
      [ARCH_T_SHORTCONV_CONV] = O,
      [ARCH_T_SHORTCONV_IN] = O,
      [ARCH_T_SHORTCONV_OUT] = O,
      [ARCH_T_FFN_NORM] = R,
      [ARCH_T_FFN_GATE] = R,
      [ARCH_T_FFN_DOWN] = R,
      [ARCH_T_FFN_UP] = R},
     "LFM2 / LFM2.5: short-convolution layers (gated depthwise causal conv, a recurrent state per "
     "sequence) beside qwen3-style attention layers, then the dense SwiGLU; final norm "
     "token_embd_norm",
     {ARCH_BLOCK_ATTN, ARCH_BLOCK_SHORTCONV, ARCH_BLOCK_FFN},
     0,
     ARCH_READS_SHORTCONV,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
    /* llama.cpp's lfm2moe (LFM2-8B-A1B, LFM2-24B-A2B): lfm2's layers, the
     * first leading_dense_block_count with the dense feed-forward, the
     * others with experts chosen by sigmoid + exp_probs_b; model.c requires
     * each layer's set and refuses the other's, as for the operator. */
    {"lfm2moe",
     ARCH_LFM2MOE,
     ARCH_ROPE_NEOX,
     {[ARCH_T_TOKEN_EMBD] = R,     [ARCH_T_TOKEN_EMBD_NORM] = R, [ARCH_T_OUTPUT] = O,
      [ARCH_T_ATTN_NORM] = R,      [ARCH_T_ATTN_Q] = O,          [ARCH_T_ATTN_K] = O,
      [ARCH_T_ATTN_V] = O,         [ARCH_T_ATTN_OUT] = O,        [ARCH_T_ATTN_Q_NORM] = O,
      [ARCH_T_ATTN_K_NORM] = O,    [ARCH_T_SHORTCONV_CONV] = O,  [ARCH_T_SHORTCONV_IN] = O,
      [ARCH_T_SHORTCONV_OUT] = O,  [ARCH_T_FFN_NORM] = R,        [ARCH_T_FFN_GATE] = O,
      [ARCH_T_FFN_DOWN] = O,       [ARCH_T_FFN_UP] = O,          [ARCH_T_FFN_GATE_INP] = O,
      [ARCH_T_FFN_GATE_EXPS] = O,  [ARCH_T_FFN_UP_EXPS] = O,     [ARCH_T_FFN_DOWN_EXPS] = O,
      [ARCH_T_FFN_EXP_PROBS_B] = O},
     "LFM2 MoE (LFM2-8B-A1B): lfm2's layers, the first leading_dense_block_count with the dense "
     "SwiGLU, the others with SwiGLU experts chosen by sigmoid + exp_probs_b, their sigmoids "
     "renormalised",
     {ARCH_BLOCK_ATTN, ARCH_BLOCK_SHORTCONV, ARCH_BLOCK_FFN, ARCH_BLOCK_MOE},
     0,
     ARCH_READS_SHORTCONV | ARCH_READS_DENSE_LEAD,
     ARCH_GATING_SIGMOID_NORM,
     ARCH_ACT_SWIGLU,
     0},
    /* llama.cpp's gemma4: attn_v optional (V = K), rope_freqs the full
     * layers' divisors; the 26B-A4B's experts optional, beside the dense
     * feed-forward on the layers with a router (their tensors all there or
     * none: model.c); the fused ffn_gate_up_exps and the E2B/E4B's per-layer
     * embeddings are not in the table, so a file with them is refused. */
    {"gemma4",
     ARCH_GEMMA4,
     ARCH_ROPE_NEOX,
     {[ARCH_T_TOKEN_EMBD] = R,     [ARCH_T_OUTPUT_NORM] = R,     [ARCH_T_OUTPUT] = O,
      [ARCH_T_ROPE_FREQS] = O,     [ARCH_T_ATTN_NORM] = R,       [ARCH_T_ATTN_Q] = R,
      [ARCH_T_ATTN_K] = O,         [ARCH_T_ATTN_V] = O,          [ARCH_T_ATTN_OUT] = R,
      [ARCH_T_ATTN_Q_NORM] = R,    [ARCH_T_ATTN_K_NORM] = O,     [ARCH_T_ATTN_POST_NORM] = R,
      [ARCH_T_FFN_NORM] = R,       [ARCH_T_FFN_GATE] = R,        [ARCH_T_FFN_DOWN] = R,
      [ARCH_T_FFN_UP] = R,         [ARCH_T_FFN_POST_NORM] = R,   [ARCH_T_LAYER_OUT_SCALE] = O,
      [ARCH_T_FFN_GATE_INP] = O,   [ARCH_T_FFN_GATE_INP_S] = O,  [ARCH_T_FFN_GATE_EXPS] = O,
      [ARCH_T_FFN_UP_EXPS] = O,    [ARCH_T_FFN_DOWN_EXPS] = O,   [ARCH_T_FFN_DOWN_EXPS_S] = O,
      [ARCH_T_FFN_PRE_NORM_2] = O, [ARCH_T_FFN_POST_NORM_1] = O, [ARCH_T_FFN_POST_NORM_2] = O,
      [ARCH_T_PLE_TOKEN_EMBD] = O, [ARCH_T_PLE_MODEL_PROJ] = O,  [ARCH_T_PLE_PROJ_NORM] = O,
      [ARCH_T_PLE_INP_GATE] = O,   [ARCH_T_PLE_PROJ] = O,        [ARCH_T_PLE_POST_NORM] = O},
     "Gemma 4 (31B, 26B-A4B): windowed and full layers with their own head size, head counts and "
     "RoPE base (the full ones' partial RoPE by rope_freqs), V = K without attn_v, normed V, "
     "unscaled scores, GELU, norms after attention and feed-forward, experts beside the dense "
     "feed-forward where a layer has a router, embeddings times sqrt(dim), logits soft-capped",
     {ARCH_BLOCK_ATTN, ARCH_BLOCK_FFN, ARCH_BLOCK_MOE},
     0,
     ARCH_READS_GEMMA4,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_GELU,
     0},
    /* llama.cpp's granitehybrid with the dense feed-forward (Granite 4.0-H
     * Micro; the MoE ones, Tiny and Small, have ffn_gate_inp and are
     * refused by name). Attention and Mamba2 tensors are optional here
     * because each layer has one set (head_count_kv says which); model.c
     * requires the whole set of the layer's kind and refuses the other's.
     * No attn_output or FFN biases (llama.cpp's optional ones): refused. */
    {"granitehybrid",
     ARCH_GRANITEHYBRID,
     ARCH_ROPE_NORMAL,
     {[ARCH_T_TOKEN_EMBD] = R, [ARCH_T_OUTPUT_NORM] = R,  [ARCH_T_OUTPUT] = O,   [ARCH_T_ATTN_NORM] = R,
      [ARCH_T_ATTN_Q] = O,     [ARCH_T_ATTN_K] = O,       [ARCH_T_ATTN_V] = O,   [ARCH_T_ATTN_OUT] = O,
      [ARCH_T_ATTN_Q_B] = O,   [ARCH_T_ATTN_K_B] = O,     [ARCH_T_ATTN_V_B] = O, [ARCH_T_SSM_IN] = O,
      [ARCH_T_SSM_CONV1D] = O, [ARCH_T_SSM_CONV1D_B] = O, [ARCH_T_SSM_DT_B] = O, [ARCH_T_SSM_A] = O,
      [ARCH_T_SSM_D] = O,      [ARCH_T_SSM_NORM] = O,     [ARCH_T_SSM_OUT] = O,  [ARCH_T_FFN_NORM] = R,
      [ARCH_T_FFN_GATE] = R,   [ARCH_T_FFN_DOWN] = R,     [ARCH_T_FFN_UP] = R},
     "Granite 4.0-H (dense): Mamba2 layers (selective scan, a recurrent state per sequence) beside "
     "attention layers (RoPE off with rope.scaling.finetuned false), the dense SwiGLU; Granite's "
     "embedding, residual, attention and logit scales",
     {ARCH_BLOCK_ATTN, ARCH_BLOCK_MAMBA2, ARCH_BLOCK_FFN},
     0,
     ARCH_READS_MAMBA2 | ARCH_READS_GRANITE,
     ARCH_GATING_SOFTMAX_NORM,
     ARCH_ACT_SWIGLU,
     0},
};
#undef R
#undef O
#undef LLAMA_ATTN
#undef LLAMA_CORE
#undef LLAMA_BLOCKS

#define N_ARCH ((int)(sizeof table / sizeof table[0]))

const arch_info *arch_find(const char *name, size_t len) {
    for (int i = 0; i < N_ARCH; i++)
        if (strlen(table[i].name) == len && !memcmp(table[i].name, name, len)) return &table[i];
    return NULL;
}

const arch_info *arch_by_id(int id) {
    for (int i = 0; i < N_ARCH; i++)
        if (table[i].id == id) return &table[i];
    return NULL;
}

int arch_count(void) { return N_ARCH; }

const arch_info *arch_at(int i) { return i >= 0 && i < N_ARCH ? &table[i] : NULL; }

const char *arch_names(void) {
    return "llama, qwen2, qwen3, smollm3, mistral3, qwen3moe, gpt-oss, lfm2, lfm2moe, gemma4, granitehybrid";
}

int arch_layer_has_rope(int step, int layer) { return step <= 0 || (layer + 1) % step != 0; }

int arch_layer_is_swa(int period, int layer) { return period <= 0 || layer % period < period - 1; }

int arch_swa_masked(int n_swa, int query_pos, int key_pos) { return query_pos - key_pos >= n_swa; }

char *arch_key(char *buf, size_t cap, const arch_info *a, const char *suffix) {
    snprintf(buf, cap, "%s.%s", a->name, suffix);
    return buf;
}

const char *arch_block_name(int block) {
    switch (block) {
    case ARCH_BLOCK_ATTN: return "attention";
    case ARCH_BLOCK_FFN: return "ffn";
    case ARCH_BLOCK_MOE: return "moe";
    case ARCH_BLOCK_SHORTCONV: return "shortconv";
    case ARCH_BLOCK_MAMBA2: return "mamba2";
    default: return "?";
    }
}

int arch_has_block(const arch_info *a, int block) {
    for (int k = 0; a && k < ARCH_MAX_BLOCKS && a->blocks[k] != ARCH_BLOCK_END; k++)
        if (a->blocks[k] == block) return 1;
    return 0;
}

const char *arch_tensor_name(int t) { return t >= 0 && t < ARCH_T_COUNT ? tensors[t].name : "?"; }

int arch_tensor_per_layer(int t) { return t >= 0 && t < ARCH_T_COUNT && tensors[t].per_layer; }

void arch_tensor_file_name(char *buf, size_t cap, int t, int layer) {
    if (arch_tensor_per_layer(t))
        snprintf(buf, cap, "blk.%d.%s", layer, arch_tensor_name(t));
    else
        snprintf(buf, cap, "%s", arch_tensor_name(t));
}

int arch_parse_tensor(const char *name, int n_layers, int *t, int *layer) {
    if (!strncmp(name, "blk.", 4)) {
        const char *p = name + 4;
        long l = 0;
        int digits = 0;
        /* plain decimal, no sign, no leading zero (so one name, one tensor) */
        while (*p >= '0' && *p <= '9' && digits < 8) {
            l = l * 10 + (*p++ - '0');
            digits++;
        }
        if (!digits || *p != '.' || (digits > 1 && name[4] == '0') || l >= n_layers) return -1;
        p++;
        for (int i = 0; i < ARCH_T_COUNT; i++)
            if (tensors[i].per_layer && !strcmp(p, tensors[i].name)) {
                *t = i;
                *layer = (int)l;
                return 0;
            }
        return -1;
    }
    for (int i = 0; i < ARCH_T_COUNT; i++)
        if (!tensors[i].per_layer && !strcmp(name, tensors[i].name)) {
            *t = i;
            *layer = -1;
            return 0;
        }
    return -1;
}

static const char *const scaling_names[] = {"none", "linear", "yarn"};

int arch_scaling_from_name(const char *s, size_t len) {
    for (int i = 0; i < 3; i++)
        if (strlen(scaling_names[i]) == len && !memcmp(scaling_names[i], s, len)) return i;
    return -1;
}

const char *arch_scaling_name(int scaling) {
    return scaling >= 0 && scaling < 3 ? scaling_names[scaling] : "?";
}

/* ggml_rope_yarn_corr_dim: the pair index whose wavelength fits n_rot
 * rotations into orig_ctx positions. */
static float corr_dim(int n_dims, int orig_ctx, float n_rot, float base) {
    return (float)n_dims * logf((float)orig_ctx / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void arch_rope_freqs(const arch_rope_params *p, const float *freq_factors, float *freq, float *mscale) {
    const int half = p->n_dims / 2;
    const int scaled = p->scaling != ARCH_SCALING_NONE && p->factor != 1.0f;
    const float s = scaled ? 1.0f / p->factor : 1.0f;
    const float ext = p->scaling == ARCH_SCALING_YARN ? p->ext_factor : 0.0f;
    float lo = 0, hi = 0;
    if (ext != 0.0f) {
        lo = fmaxf(0.0f, floorf(corr_dim(p->n_dims, p->orig_ctx, p->beta_fast, p->freq_base)));
        hi = fminf((float)(p->n_dims - 1),
                   ceilf(corr_dim(p->n_dims, p->orig_ctx, p->beta_slow, p->freq_base)));
    }
    for (int i = 0; i < half; i++) {
        /* unscaled, a frequency is exactly this expression (no factor applied, not even 1) */
        float f = 1.0f / powf(p->freq_base, (float)(2 * i) / (float)p->n_dims);
        if (freq_factors) f /= freq_factors[i];
        if (ext != 0.0f) {
            float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);
            float r = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext;
            f *= s * (1.0f - r) + r;
        } else if (scaled) {
            f *= s;
        }
        freq[i] = f;
    }
    float m = p->attn_factor > 0 ? p->attn_factor : 1.0f;
    if (ext != 0.0f && scaled && p->factor > 1.0f) {
        m *= 1.0f + 0.1f * logf(p->factor);
        if (p->log_mul != 0.0f) m /= 1.0f + 0.1f * p->log_mul * logf(p->factor);
    }
    *mscale = m;
}

float arch_attn_temp(float scale, int floor_ctx, int pos) {
    const float q = (float)pos / (float)floor_ctx; /* llama.cpp: float position over uint32 */
    return (float)(log(floor(q) + 1.0) * scale + 1.0);
}

void arch_llama3_freq_factors(int n_dims, float freq_base, float factor, float low_freq_factor,
                              float high_freq_factor, int orig_ctx, float *out) {
    const double low_wavelen = orig_ctx / low_freq_factor, high_wavelen = orig_ctx / high_freq_factor;
    for (int i = 0; i < n_dims / 2; i++) {
        double f = 1.0 / pow(freq_base, (double)(2 * i) / n_dims);
        double wavelen = 2 * M_PI / f;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = factor;
        } else {
            double smooth = (orig_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}
