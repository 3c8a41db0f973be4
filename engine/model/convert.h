/* convert.h - write models as GGUF: conversion of a loaded model, and
 * synthetic random-weight models of any shape.
 *
 * The GGUF written is what llama.cpp-style readers expect for the
 * architecture of the model (arch.h: llama, qwen2, qwen3, smollm3,
 * mistral3, qwen3moe, gpt-oss, lfm2, lfm2moe): the <arch>.* hyperparameters (RoPE scaling keys when scaled,
 * key_length/value_length when head_dim is not dim / n_heads, mistral3's
 * yarn_log_multiplier and temperature_scale when set, gpt-oss's
 * sliding_window), token_embd /
 * blk.N.* / output_norm / output tensors with ne[0] = input features, norms
 * in f32, and the
 * tokenizer inside (tokenizer.ggml.model "llama", pieces with U+2581 for the
 * space, scores, token types, BOS/EOS/UNK ids). */
#ifndef CK_CONVERT_H
#define CK_CONVERT_H
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Write m as GGUF with weight matrices in `type` (QUANT_F32, QUANT_F16,
 * QUANT_BF16, QUANT_Q8_0 or QUANT_MXFP4). A matrix whose rows are not a
 * multiple of the type's block (q8_0, mxfp4: 32) is written in f16 instead,
 * as llama.cpp does; a
 * MoE router in f32, and MXFP4 in a model with experts is llama.cpp's
 * MXFP4_MOE: the experts MXFP4, the other matrices Q8_0.
 * Returns 0 or CK_E* with err filled. */
int convert_write_gguf(const model *m, int type, const char *path, char *err, size_t errlen);

/* Zero means "the default" in every field but dim..ctx, so a caller may
 * set only the shape. */
typedef struct synth_params {
    int dim, n_layers, n_heads, n_kv_heads, hidden_dim, vocab_size, ctx;
    int type; /* QUANT_* of the weight matrices */
    uint64_t seed;
    float rope_theta;  /* 0: 10000 */
    int arch;          /* ARCH_* (arch.h), 0: llama. qwen2 adds random q/k/v biases,
                           qwen3 random q/k head norms */
    int head_dim;      /* 0: dim / n_heads; else written as key_length/value_length */
    int tied;          /* no output.weight: the classifier is the embedding */
    int rope_scaling;  /* ARCH_SCALING_*; NONE writes no scaling keys */
    float rope_factor; /* rope.scaling.factor (with LINEAR or YARN) */
    int rope_orig_ctx; /* rope.scaling.original_context_length; 0: not written */
    /* rope.scaling.attn_factor and YaRN's keys; 0: not written (the reader's
     * default: 1, yarn 1 / 32 / 1) */
    float rope_attn_factor, yarn_ext_factor, yarn_beta_fast, yarn_beta_slow;
    /* mistral3's rope.scaling.yarn_log_multiplier and attention.temperature_scale
     * (its query scale changes every original-context positions: rope_orig_ctx,
     * else ctx); 0: not written */
    float yarn_log_mul, attn_temp_scale;
    int rope_freqs;         /* write rope_freqs.weight: Llama 3.1's factors from the llama3
                           formula (factor 8, low 1, high 4, original context 8192) */
    const char *vocab_from; /* a GGUF whose tokenizer.* keys are copied, and whose token
                               count is the vocabulary (vocab_size ignored); NULL: synthetic */
    /* Mixture of experts: required (n_expert, n_expert_used) by an
     * architecture with experts (qwen3moe), refused by the others. The
     * router is written f32 (as llama.cpp's quantizer leaves it), the
     * experts in `type`. */
    int n_expert, n_expert_used;
    int expert_ffn; /* 0: hidden_dim / n_expert_used (llama.cpp's default) */
    /* gpt-oss's sliding window (attention.sliding_window), required by an
     * architecture that reads one (arch.h ARCH_READS_SWA), refused by the
     * others; swa_period: sliding_window_pattern, 0 the row's default (not
     * written then), -1 the pattern 0 (every layer windowed). gpt-oss also gets random q/k/v and output biases,
     * sink logits, router and expert biases, and experts whose gate and up
     * outputs reach its activation's clamp (+-7) now and then. With type
     * MXFP4 a model with experts is written as llama.cpp's MXFP4_MOE
     * writes it: experts MXFP4, the other matrices Q8_0. */
    int n_swa, swa_period;
    /* lfm2's short-convolution layers: conv_l taps (shortconv.l_cache, 0: 3,
     * the real models'), and which layers are attention: bit l of
     * attn_layers (layers < 64), 0: layer l when l % 3 == 2. The others are
     * convolution layers (head_count_kv written per layer, 0 for them).
     * Refused by the other architectures. */
    int conv_l;
    uint64_t attn_layers;
    /* lfm2moe's leading_dense_block_count: layers below it dense, the others
     * experts (with a random exp_probs_b); refused by the other architectures */
    int n_dense_lead;
    /* gemma4 (the 31B's layout): n_heads, n_kv_heads and head_dim are the
     * windowed layers' (head_count, head_count_kv, key_length_swa), these
     * the full ones': layer l is full when l % swa_period == swa_period - 1
     * (0: the default 6, as the 31B's five windowed layers to a full one),
     * its key_length head_dim_full (0: 2 head_dim), its KV heads
     * n_kv_heads_full (0: n_kv_heads / 2, at least 1), no attn_v (V = K),
     * RoPE on a quarter of its head through rope_freqs.weight (1e30 for the
     * pairs left unturned, as llama.cpp's converter writes it). rope_theta
     * is the full layers' base (0: 1e6), rope_theta_swa the windowed ones'
     * (0: 1e4); softcap final_logit_softcapping (0: 30). Norms and
     * layer_output_scale random around 1. n_swa required (attention.
     * sliding_window). */
    int head_dim_full, n_kv_heads_full;
    float rope_theta_swa, softcap;
    /* gemma4's E2B/E4B: n_embd_pl values a layer of per-layer embeddings
     * (embedding_length_per_layer_input), and the last n_kv_shared layers
     * without K or V of their own (attention.shared_kv_layers: layer
     * block_count - n_kv_shared - 1 must be full, the one before windowed);
     * 0: none */
    int n_embd_pl, n_kv_shared;
    /* granitehybrid's Mamba2 layers (the layers attn_layers leaves out, as
     * lfm2's): ssm.state_size (0: 16), group_count (0: 2), time_step_rank
     * (0: heads of 16 channels), conv_kernel (0: 4, the real models'); inner
     * size 2 dim (llama.cpp's only one). With Granite's scalars
     * (embedding 4, residual 0.5, attention 1 / head_dim, logits 6) and
     * rope.scaling.finetuned false (no RoPE, as Granite 4.0-H). Refused by
     * the other architectures. */
    int ssm_d_state, ssm_n_group, ssm_n_head, ssm_d_conv;
} synth_params;

/* Whether layer l of a synth lfm2 model with attn_layers (synth_params) is
 * attention. */
static inline int synth_lfm2_attn(uint64_t attn_layers, int l) {
    return attn_layers ? l < 64 && (attn_layers >> l & 1) : l % 3 == 2;
}

/* A random-weight model of the given shape and architecture, its vocabulary
 * copied from vocab_from, or made of the control pieces, 256 byte pieces (so
 * any text round-trips), printable characters, then letter n-grams up to
 * vocab_size. Returns 0 or CK_E* with err filled. */
int convert_synth(const synth_params *p, const char *path, char *err, size_t errlen);

#endif
