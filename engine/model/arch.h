/* arch.h - the architecture table: what each GGUF `general.architecture`
 * the engine computes asks of the file.
 *
 * Architectures are data (as llama.cpp's llama-arch.cpp): one row per
 * architecture gives its name, its RoPE style and, for every tensor the
 * engine knows, whether that architecture requires it, allows it, or does
 * not have it. Hyperparameters are read as "<arch>.<suffix>" with the
 * suffixes below (gguf-py's constants.py names). model.c reads a file
 * through this table only: an architecture not in it, a tensor the table
 * does not know or the architecture does not have, a missing required
 * tensor, or a RoPE scaling type not listed here is refused at load with a
 * message naming it; nothing is skipped silently.
 *
 * Adding an architecture: a row in arch.c's table, plus compute for any
 * tensor, RoPE style or layer block it is the first to use (a layer kind of
 * engine/cpu/, kernels/).
 *
 * Everything here is static data or pure functions: no state, no
 * allocation, safe from any thread. */
#ifndef CK_ARCH_H
#define CK_ARCH_H
#include <stddef.h>

enum arch_id {
    ARCH_LLAMA = 1,
    ARCH_QWEN2 = 2,
    ARCH_QWEN3 = 3,
    ARCH_SMOLLM3 = 4,
    ARCH_MISTRAL3 = 5,
    ARCH_QWEN3MOE = 6,
    ARCH_GPT_OSS = 7,
    ARCH_LFM2 = 8,
    ARCH_LFM2MOE = 9,
    ARCH_GEMMA4 = 10,
    ARCH_GRANITEHYBRID = 11
};

/* How RoPE pairs the elements of a head of hd values. NORMAL (llama): the
 * adjacent pair (2i, 2i + 1), GGUF's permuted llama weights; NEOX (qwen2,
 * qwen3, qwen3moe, gpt-oss): the halves (i, i + hd / 2). Pair i turns by pos * freq[i] either
 * way. */
enum arch_rope { ARCH_ROPE_NORMAL = 0, ARCH_ROPE_NEOX = 1 };

/* <arch>.rope.scaling.type values the engine computes (llama.cpp's names). */
enum arch_scaling { ARCH_SCALING_NONE = 0, ARCH_SCALING_LINEAR = 1, ARCH_SCALING_YARN = 2 };

/* Every tensor the engine knows. Per-layer ones are named
 * "blk.<layer>.<name>" in the file, the others "<name>". */
enum arch_tensor {
    ARCH_T_TOKEN_EMBD,  /* token_embd.weight    (vocab, dim) */
    ARCH_T_OUTPUT_NORM, /* output_norm.weight   (dim) */
    ARCH_T_OUTPUT,      /* output.weight        (vocab, dim); absent: tied to token_embd */
    ARCH_T_ROPE_FREQS,  /* rope_freqs.weight    (head_dim / 2) frequency divisors (Llama 3.1) */
    ARCH_T_ATTN_NORM,   /* blk.N.attn_norm.weight   (dim) */
    ARCH_T_ATTN_Q,      /* blk.N.attn_q.weight      (n_heads * head_dim, dim) */
    ARCH_T_ATTN_K,      /* blk.N.attn_k.weight      (n_kv_heads * head_dim, dim) */
    ARCH_T_ATTN_V,      /* blk.N.attn_v.weight      (n_kv_heads * head_dim, dim) */
    ARCH_T_ATTN_OUT,    /* blk.N.attn_output.weight (dim, n_heads * head_dim) */
    ARCH_T_ATTN_Q_B,    /* blk.N.attn_q.bias        (n_heads * head_dim) */
    ARCH_T_ATTN_K_B,    /* blk.N.attn_k.bias        (n_kv_heads * head_dim) */
    ARCH_T_ATTN_V_B,    /* blk.N.attn_v.bias        (n_kv_heads * head_dim) */
    ARCH_T_ATTN_Q_NORM, /* blk.N.attn_q_norm.weight (head_dim): RMSNorm of each q head */
    ARCH_T_ATTN_K_NORM, /* blk.N.attn_k_norm.weight (head_dim): RMSNorm of each k head */
    ARCH_T_FFN_NORM,    /* blk.N.ffn_norm.weight    (dim) */
    ARCH_T_FFN_GATE,    /* blk.N.ffn_gate.weight    (hidden_dim, dim) */
    ARCH_T_FFN_DOWN,    /* blk.N.ffn_down.weight    (dim, hidden_dim) */
    ARCH_T_FFN_UP,      /* blk.N.ffn_up.weight      (hidden_dim, dim) */
    /* Mixture of experts (E = expert_count, FE = expert_feed_forward_length);
     * a 3-D tensor is E matrices one after another, expert e's the e-th. */
    ARCH_T_FFN_GATE_INP,  /* blk.N.ffn_gate_inp.weight  (E, dim): the router */
    ARCH_T_FFN_GATE_EXPS, /* blk.N.ffn_gate_exps.weight (E, FE, dim) */
    ARCH_T_FFN_UP_EXPS,   /* blk.N.ffn_up_exps.weight   (E, FE, dim) */
    ARCH_T_FFN_DOWN_EXPS, /* blk.N.ffn_down_exps.weight (E, dim, FE) */
    /* gpt-oss (llama.cpp's openai-moe) */
    ARCH_T_ATTN_OUT_B,      /* blk.N.attn_output.bias         (dim) added after the output projection */
    ARCH_T_ATTN_SINKS,      /* blk.N.attn_sinks.weight        (n_heads) each head's sink logit */
    ARCH_T_ATTN_POST_NORM,  /* blk.N.post_attention_norm.weight (dim): gpt-oss's norm before the
                               experts, in the place of ffn_norm */
    ARCH_T_FFN_GATE_INP_B,  /* blk.N.ffn_gate_inp.bias        (E) added to the router's logits */
    ARCH_T_FFN_GATE_EXPS_B, /* blk.N.ffn_gate_exps.bias       (E, FE) */
    ARCH_T_FFN_UP_EXPS_B,   /* blk.N.ffn_up_exps.bias         (E, FE) */
    ARCH_T_FFN_DOWN_EXPS_B, /* blk.N.ffn_down_exps.bias       (E, dim) */
    /* lfm2 (LFM2 / LFM2.5): short-convolution layers beside attention ones */
    ARCH_T_TOKEN_EMBD_NORM, /* token_embd_norm.weight (dim): lfm2's final norm, in the place of
                               output_norm (llama.cpp's name for it) */
    ARCH_T_SHORTCONV_CONV,  /* blk.N.shortconv.conv.weight     (dim, l_cache): each channel's
                               causal kernel, its last tap on the current token */
    ARCH_T_SHORTCONV_IN,    /* blk.N.shortconv.in_proj.weight  (3 * dim, dim): B, C, x rows */
    ARCH_T_SHORTCONV_OUT,   /* blk.N.shortconv.out_proj.weight (dim, dim) */
    ARCH_T_FFN_EXP_PROBS_B, /* blk.N.exp_probs_b.bias (E): lfm2moe's bias added to the router's
                               probabilities to choose the experts (not to weigh them) */
    /* gemma4 (its post_attention_norm is the attention output's norm, before
     * the residual add; its ffn_norm the one before the feed-forward) */
    ARCH_T_FFN_POST_NORM,   /* blk.N.post_ffw_norm.weight      (dim): the feed-forward output's norm */
    ARCH_T_LAYER_OUT_SCALE, /* blk.N.layer_output_scale.weight (1): the residual stream is scaled
                               by it at the end of the layer */
    /* gemma4's experts beside its dense feed-forward (26B-A4B) */
    ARCH_T_FFN_GATE_INP_S,  /* blk.N.ffn_gate_inp.scale   (dim): the router's input, rms(x) / sqrt(dim),
                               times it */
    ARCH_T_FFN_PRE_NORM_2,  /* blk.N.pre_ffw_norm_2.weight  (dim): the experts' input norm */
    ARCH_T_FFN_POST_NORM_1, /* blk.N.post_ffw_norm_1.weight (dim): the dense part's output norm */
    ARCH_T_FFN_POST_NORM_2, /* blk.N.post_ffw_norm_2.weight (dim): the experts' output norm */
    ARCH_T_FFN_DOWN_EXPS_S, /* blk.N.ffn_down_exps.scale    (E): each expert's output times its own */
    /* gemma4's per-layer embeddings (E2B/E4B; P = embedding_length_per_layer_input, L layers) */
    ARCH_T_PLE_TOKEN_EMBD, /* per_layer_token_embd.weight (vocab, L x P): each token's P a layer */
    ARCH_T_PLE_MODEL_PROJ, /* per_layer_model_proj.weight (L x P, dim): the embedding's share */
    ARCH_T_PLE_PROJ_NORM,  /* per_layer_proj_norm.weight  (P): its norm, a layer's P at a time */
    ARCH_T_PLE_INP_GATE,   /* blk.N.inp_gate.weight       (P, dim): the layer's output, gated */
    ARCH_T_PLE_PROJ,       /* blk.N.proj.weight           (dim, P): back to the stream */
    ARCH_T_PLE_POST_NORM,  /* blk.N.post_norm.weight      (dim): its norm before the add */
    /* granitehybrid's Mamba2 layers (DI = ssm.inner_size, H = ssm.time_step_rank,
     * NC = DI + 2 ssm.group_count ssm.state_size) */
    ARCH_T_SSM_IN,       /* blk.N.ssm_in.weight     (2 DI + 2 n_group d_state + H, dim) */
    ARCH_T_SSM_CONV1D,   /* blk.N.ssm_conv1d.weight (NC, d_conv) */
    ARCH_T_SSM_CONV1D_B, /* blk.N.ssm_conv1d.bias   (NC) */
    ARCH_T_SSM_DT_B,     /* blk.N.ssm_dt.bias       (H) */
    ARCH_T_SSM_A,        /* blk.N.ssm_a             (H, 1) */
    ARCH_T_SSM_D,        /* blk.N.ssm_d             (H, 1) */
    ARCH_T_SSM_NORM,     /* blk.N.ssm_norm.weight   (n_group, DI / n_group) */
    ARCH_T_SSM_OUT,      /* blk.N.ssm_out.weight    (dim, DI) */
    ARCH_T_COUNT
};

/* What an architecture asks of a tensor. */
enum arch_need { ARCH_NO = 0, ARCH_OPTIONAL = 1, ARCH_REQUIRED = 2 };

/* The blocks a layer runs, in order, each adding its output into the
 * residual stream: the layer kinds a backend computes (engine/cpu/
 * cpu_layer.h). ATTN: norm, Q/K/V, RoPE, attention over the KV cache
 * (with the row's sinks and sliding window where it has them), output
 * projection; FFN: norm, the SwiGLU feed-forward; MOE: norm, the router,
 * the expert_used_count experts it picks (arch_info.gating says how and
 * with what weights), each one's gated feed-forward (arch_info.act)
 * weighted and summed (llama.cpp's build_moe_ffn). A backend refuses a
 * model with a block it has no kind for, naming it. */
enum arch_block {
    ARCH_BLOCK_END = 0,
    ARCH_BLOCK_ATTN = 1,
    ARCH_BLOCK_FFN = 2,
    ARCH_BLOCK_MOE = 3,
    ARCH_BLOCK_SHORTCONV = 4,
    ARCH_BLOCK_MAMBA2 = 5
};
/* MAMBA2 (granitehybrid; llama.cpp's build_mamba2_layer): norm, ssm_in to
 * z, xBC, dt; a depthwise causal convolution of xBC (d_conv taps, its last
 * d_conv - 1 inputs the sequence's state) plus bias, silu; x, B, C from it;
 * per head h with dt' = softplus(dt + dt_bias), the selective scan
 * s = exp(dt' A_h) s + dt' B x, y = C s + D_h x (s the sequence's state);
 * y * silu(z), an RMSNorm over each of n_group groups, ssm_out. Like
 * SHORTCONV, each layer of a row with ATTN has one of the two (per-layer
 * head_count_kv: 0 for a Mamba2 layer). */
/* SHORTCONV (lfm2): norm, in_proj to B, C, x (dim each), a depthwise causal
 * convolution of B * x over the sequence with l_cache taps whose last
 * l_cache - 1 inputs are the sequence's recurrent state, C times that,
 * out_proj. In a row with both ATTN and SHORTCONV each layer has one of the
 * two (per-layer head_count_kv: 0 for a convolution layer); the kind a
 * layer has not is skipped. */
/* gemma4's rows are attention, ffn, moe: the MOE block runs on the layers
 * with a router only (the 26B-A4B's; the 31B has none), beside the dense
 * one, their outputs each normed, summed, normed again and added
 * (arch_info.keys ARCH_READS_GEMMA4). */
#define ARCH_MAX_BLOCKS 4

/* How a MOE block picks its experts and weighs them (llama.cpp's
 * llama_expert_gating_func_type and norm_w, as each graph passes them).
 * SOFTMAX_NORM (qwen3moe): p = softmax over all the router's logits, the k
 * most probable, their p divided by their sum (clamped below at 2^-14).
 * SOFTMAX_WEIGHT (gpt-oss): the k largest logits, weights the softmax over
 * those k alone. */
enum arch_gating {
    ARCH_GATING_SOFTMAX_NORM = 0,
    ARCH_GATING_SOFTMAX_WEIGHT = 1,
    ARCH_GATING_SIGMOID_NORM = 2
};
/* SIGMOID_NORM (lfm2moe, llama.cpp's gating func 2 with exp_probs_b and
 * norm_w): p = sigmoid of each logit, the k largest p + exp_probs_b chosen,
 * their p (without the bias) divided by their sum (clamped below at
 * 2^-14). */

/* The gated activation of a MOE block's experts, h = act(gate, up).
 * SWIGLU: silu(gate) * up. SWIGLU_OAI (gpt-oss; ggml's swiglu_oai with
 * llama.cpp's alpha 1.702 and limit 7): x = min(gate, limit),
 * y = clamp(up, -limit, limit), h = x / (1 + exp(-alpha x)) * (y + 1).
 * GELU (gemma4, its dense feed-forward too: arch_info.act): h = gelu(gate)
 * * up, gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) x (1 + 0.044715 x^2))). */
enum arch_act { ARCH_ACT_SWIGLU = 0, ARCH_ACT_SWIGLU_OAI = 1, ARCH_ACT_GELU = 2 };
#define ARCH_OAI_ALPHA 1.702f
#define ARCH_OAI_LIMIT 7.0f

/* Keys only some architectures read (arch_info.keys), as llama.cpp reads
 * them for those alone. Elsewhere a yarn_log_multiplier other than 0 is
 * refused and temperature_scale is not read (llama.cpp ignores it there). */
#define ARCH_READS_YARN_LOG_MUL 1u /* rope.scaling.yarn_log_multiplier: computed (model.c) */
#define ARCH_READS_ATTN_TEMP 2u    /* attention.temperature_scale: the query's position scale */
/* attention.sliding_window (required) and sliding_window_pattern (default
 * arch_info.swa_period): a window on some layers' attention (gpt-oss).
 * Those architectures also have their *_swa variants of key_length,
 * value_length, rope.dimension_count and rope.freq_base checked: one that
 * differs from the full layers' value is refused (not computed). */
#define ARCH_READS_SWA 4u
/* shortconv.l_cache (required, 2..ARCH_MAX_CONV_L) and a per-layer
 * attention.head_count_kv array whose 0 entries are the convolution layers
 * (lfm2). attention.sliding_window, which llama.cpp's lfm2 reads as
 * optional, is refused when above 0 (not computed). */
#define ARCH_READS_SHORTCONV 8u
#define ARCH_KEY_SHORTCONV_L_CACHE "shortconv.l_cache"
/* leading_dense_block_count (default 0): the first layers have the dense
 * feed-forward, the others the experts (lfm2moe); expert_gating_func
 * (required) must be the row's gating (2, sigmoid, for lfm2moe). A row
 * with both FFN and MOE blocks reads them; each layer has one of the two. */
#define ARCH_READS_DENSE_LEAD 16u
#define ARCH_KEY_DENSE_LEAD "leading_dense_block_count"
#define ARCH_KEY_EXPERT_GATING "expert_gating_func"
#define ARCH_LLAMA_GATING_SIGMOID 2 /* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID */
#define ARCH_MAX_CONV_L 16
/* gemma4 (llama.cpp's gemma4 graph): head_count and head_count_kv per
 * layer (an integer, or an array of block_count); sliding_window_pattern a
 * per-layer array (bool or integer; nonzero: windowed), required; the
 * windowed layers' own key_length_swa (= value_length_swa) and
 * rope.dimension_count_swa, and rope.freq_base_swa (default 10000); the
 * full layers' rope_freqs divisors; final_logit_softcapping. Its compute:
 * embeddings scaled by sqrt(dim), a unit RMSNorm of each V head, V = K
 * where a layer has no attn_v, attention scores unscaled (1, not
 * 1/sqrt(head_dim)), the norms after the attention and the feed-forward,
 * GELU (tanh form) for the gate, logits capped as cap tanh(l / cap).
 * attention.shared_kv_layers and embedding_length_per_layer_input
 * (E2B/E4B) other than 0 are refused by name. */
#define ARCH_READS_GEMMA4 32u
/* ssm.conv_kernel (2..ARCH_MAX_CONV_L), ssm.inner_size, ssm.state_size,
 * ssm.group_count, ssm.time_step_rank (all required; inner_size a multiple
 * of group_count and of time_step_rank, time_step_rank of group_count), and
 * head_count_kv per layer as ARCH_READS_SHORTCONV's, 0 for a Mamba2 layer
 * (granitehybrid). */
#define ARCH_READS_MAMBA2 64u
#define ARCH_KEY_SSM_CONV "ssm.conv_kernel"
#define ARCH_KEY_SSM_INNER "ssm.inner_size"
#define ARCH_KEY_SSM_STATE "ssm.state_size"
#define ARCH_KEY_SSM_GROUPS "ssm.group_count"
#define ARCH_KEY_SSM_HEADS "ssm.time_step_rank"
#define ARCH_MAX_SSM_STATE 256
/* Granite's scalars, each optional (0: none): embedding_scale,
 * residual_scale, attention.scale, logit_scale (model_config says where
 * they apply); rope.scaling.finetuned (default true): false turns RoPE off
 * on every layer (Granite 4.0-H's attention has none). */
#define ARCH_READS_GRANITE 128u
#define ARCH_KEY_EMBD_SCALE "embedding_scale"
#define ARCH_KEY_RESID_SCALE "residual_scale"
#define ARCH_KEY_ATTN_SCALE "attention.scale"
#define ARCH_KEY_LOGIT_SCALE "logit_scale"
#define ARCH_KEY_ROPE_FINETUNED "rope.scaling.finetuned"

typedef struct arch_info {
    const char *name;                      /* general.architecture, and the key prefix */
    int id;                                /* ARCH_* */
    int rope;                              /* ARCH_ROPE_* */
    unsigned char need[ARCH_T_COUNT];      /* ARCH_NO / ARCH_OPTIONAL / ARCH_REQUIRED */
    const char *adds;                      /* one line: what it adds to the plain Llama compute */
    unsigned char blocks[ARCH_MAX_BLOCKS]; /* ARCH_BLOCK_* of every layer, in order; END-terminated
                                              when fewer */
    int no_rope_step;                      /* layer l has no RoPE when (l + 1) % no_rope_step == 0
                                              (SmolLM3: 4, fixed by llama.cpp, not a key); 0: all have it */
    unsigned keys;                         /* ARCH_READS_* */
    int gating;                            /* ARCH_GATING_* of its MOE block */
    int act;                               /* ARCH_ACT_* of its experts */
    int swa_period;                        /* sliding_window_pattern's default (llama.cpp's
                                              graph constant; ARCH_READS_SWA only) */
} arch_info;

/* Key suffixes, read as "<arch>.<suffix>" (gguf-py constants.py). */
#define ARCH_KEY_CONTEXT_LENGTH "context_length"
#define ARCH_KEY_EMBEDDING_LENGTH "embedding_length"
#define ARCH_KEY_BLOCK_COUNT "block_count"
#define ARCH_KEY_FEED_FORWARD_LENGTH "feed_forward_length"
#define ARCH_KEY_HEAD_COUNT "attention.head_count"
#define ARCH_KEY_HEAD_COUNT_KV "attention.head_count_kv"             /* default head_count */
#define ARCH_KEY_RMS_EPS "attention.layer_norm_rms_epsilon"          /* default 1e-5 */
#define ARCH_KEY_KEY_LENGTH "attention.key_length"                   /* default dim / head_count */
#define ARCH_KEY_VALUE_LENGTH "attention.value_length"               /* default dim / head_count */
#define ARCH_KEY_ROPE_FREQ_BASE "rope.freq_base"                     /* default 10000 */
#define ARCH_KEY_ROPE_DIMS "rope.dimension_count"                    /* default key_length */
#define ARCH_KEY_ROPE_SCALING_TYPE "rope.scaling.type"               /* default "linear" (llama.cpp) */
#define ARCH_KEY_ROPE_SCALING_FACTOR "rope.scaling.factor"           /* default 0: no scaling */
#define ARCH_KEY_ROPE_SCALE_LINEAR "rope.scale_linear"               /* the old name of factor */
#define ARCH_KEY_ROPE_SCALING_ATTN_FACTOR "rope.scaling.attn_factor" /* default 1 */
#define ARCH_KEY_ROPE_SCALING_ORIG_CTX "rope.scaling.original_context_length" /* default context_length */
#define ARCH_KEY_YARN_EXT_FACTOR "rope.scaling.yarn_ext_factor"               /* default 1 for yarn, else 0 */
#define ARCH_KEY_YARN_BETA_FAST "rope.scaling.yarn_beta_fast"                 /* default 32 */
#define ARCH_KEY_YARN_BETA_SLOW "rope.scaling.yarn_beta_slow"                 /* default 1 */
#define ARCH_KEY_YARN_LOG_MUL "rope.scaling.yarn_log_multiplier" /* default 0; ARCH_READS_YARN_LOG_MUL */
#define ARCH_KEY_ATTN_TEMP_SCALE "attention.temperature_scale"   /* default 0 (none); ARCH_READS_ATTN_TEMP */
/* Sliding-window attention: read for ARCH_READS_SWA rows only. */
#define ARCH_KEY_SWA "attention.sliding_window"                 /* required: the window, in tokens */
#define ARCH_KEY_SWA_PATTERN "attention.sliding_window_pattern" /* default arch_info.swa_period */
#define ARCH_KEY_KEY_LENGTH_SWA "attention.key_length_swa"      /* must equal key_length */
#define ARCH_KEY_VALUE_LENGTH_SWA "attention.value_length_swa"  /* must equal value_length */
#define ARCH_KEY_ROPE_DIMS_SWA "rope.dimension_count_swa"       /* must equal rope.dimension_count */
#define ARCH_KEY_ROPE_FREQ_BASE_SWA "rope.freq_base_swa"        /* must equal rope.freq_base */
/* gemma4 (ARCH_READS_GEMMA4) */
#define ARCH_KEY_FINAL_SOFTCAP "final_logit_softcapping" /* default 0: none */
#define ARCH_KEY_SHARED_KV \
    "attention.shared_kv_layers" /* default 0: the last N layers
                                                                     attend over an earlier one's KV */
#define ARCH_KEY_EMB_PER_LAYER \
    "embedding_length_per_layer_input" /* default 0: no per-layer
                                                                     embeddings */
/* Mixture of experts: read for architectures with an ARCH_BLOCK_MOE only. */
#define ARCH_KEY_EXPERT_COUNT "expert_count"           /* required */
#define ARCH_KEY_EXPERT_USED_COUNT "expert_used_count" /* required, 1..expert_count */
#define ARCH_KEY_EXPERT_FFN \
    "expert_feed_forward_length" /* default feed_forward_length /
                                                            expert_used_count (llama.cpp) */

/* llama.cpp's defaults for what the file leaves out. */
#define ARCH_DEFAULT_RMS_EPS 1e-5f
#define ARCH_DEFAULT_ROPE_BASE 10000.0f
#define ARCH_DEFAULT_BETA_FAST 32.0f
#define ARCH_DEFAULT_BETA_SLOW 1.0f

/* The row for general.architecture (len bytes, not NUL-terminated), or
 * NULL when the engine does not compute that architecture. */
const arch_info *arch_find(const char *name, size_t len);
/* The row for an ARCH_* id, or NULL. */
const arch_info *arch_by_id(int id);
/* Rows in table order: i in [0, arch_count()). */
int arch_count(void);
const arch_info *arch_at(int i);
/* Names of the architectures, comma-separated, for messages ("llama, qwen2, ..."). */
const char *arch_names(void);
/* Whether layer `layer` of an architecture with no_rope_step `step` applies
 * RoPE: llama.cpp's smollm3 rule, (layer + 1) % step != 0; always for step 0. */
int arch_layer_has_rope(int step, int layer);
/* Whether layer `layer` attends through a sliding window, for a
 * sliding_window_pattern `period`: llama.cpp's set_swa_pattern (dense
 * last), layer % period < period - 1; every layer for period 0. (gpt-oss's
 * 2: the even layers, the odd ones see everything.) */
int arch_layer_is_swa(int period, int layer);
/* Whether a key at position key_pos is outside the window of n_swa tokens
 * of a query at query_pos: llama.cpp's is_masked_swa (standard),
 * query_pos - key_pos >= n_swa. A query sees the n_swa positions
 * (query_pos - n_swa, query_pos]. */
int arch_swa_masked(int n_swa, int query_pos, int key_pos);

/* The name of an ARCH_BLOCK_* ("attention", "ffn", "moe"), or "?". */
const char *arch_block_name(int block);
/* Whether a's layers have block (an ARCH_BLOCK_*). */
int arch_has_block(const arch_info *a, int block);

/* "<arch>.<suffix>" into buf (cap bytes). Returns buf. */
char *arch_key(char *buf, size_t cap, const arch_info *a, const char *suffix);

/* Tensor t's name without the "blk.N." prefix ("attn_q.bias"), and whether
 * it is per layer. */
const char *arch_tensor_name(int t);
int arch_tensor_per_layer(int t);
/* The full file name of tensor t (layer ignored when not per layer). */
void arch_tensor_file_name(char *buf, size_t cap, int t, int layer);

/* Which table tensor a file's tensor name is: sets *t and *layer (-1 when
 * not per layer) and returns 0, or returns -1 when the name is none of them
 * (or its layer number is not a plain decimal below n_layers). */
int arch_parse_tensor(const char *name, int n_layers, int *t, int *layer);

/* ARCH_SCALING_* of a rope.scaling.type string (len bytes), or -1. */
int arch_scaling_from_name(const char *s, size_t len);
const char *arch_scaling_name(int scaling);

/* RoPE as the model asks for it, after the file's keys and llama.cpp's
 * defaults (see model.c). */
typedef struct arch_rope_params {
    int n_dims;                 /* rotated values per head (== head_dim) */
    float freq_base;            /* theta */
    int scaling;                /* ARCH_SCALING_* */
    float factor;               /* rope.scaling.factor; the angle is divided by it (1: none) */
    int orig_ctx;               /* YaRN's original context length */
    float attn_factor;          /* rope.scaling.attn_factor */
    float ext_factor;           /* YaRN's extrapolation mix (1 for yarn, 0 otherwise by default) */
    float beta_fast, beta_slow; /* YaRN's correction range, in rotations */
    float log_mul;              /* rope.scaling.yarn_log_multiplier (mistral3); 0: none */
} arch_rope_params;

/* The per-pair frequencies and the magnitude scale of RoPE, computed once at
 * load: pair i of a head turns by pos * freq[i], and its cos and sin are
 * multiplied by *mscale. freq_factors (n_dims / 2 divisors, rope_freqs.weight)
 * may be NULL. The formulas are ggml's rope (ops.cpp rope_yarn): with
 * base_i = freq_base^(-2i / n_dims) / ff_i and s = 1 / factor,
 *   none/linear: freq_i = base_i * s                  (s = 1 for none)
 *   yarn:        freq_i = base_i * (s (1 - r_i) + r_i), r_i = ramp_i * ext_factor,
 *                ramp_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1),
 *                lo/hi = floor/ceil of n_dims ln(orig_ctx / (beta 2 pi)) / (2 ln base)
 *                for beta_fast/beta_slow, clamped to [0, n_dims - 1];
 *   mscale = attn_factor, times 1 + 0.1 ln(factor) under yarn when
 *            ext_factor != 0 and factor > 1 (llama.cpp's context scaling),
 *            divided there by 1 + 0.1 log_mul ln(factor) when log_mul != 0
 *            (llama_context's yarn_attn_factor with mscale 1 and
 *            mscale_all_dim log_mul: 1 for Ministral 3, whose mscale is then
 *            attn_factor alone).
 * With no scaling and no factors freq_i is exactly 1 / powf(base, 2i / n_dims)
 * and mscale exactly 1: the plain Llama path of before, bit for bit. */
void arch_rope_freqs(const arch_rope_params *p, const float *freq_factors, float *freq, float *mscale);

/* Mistral 3's query scale at position pos (llama.cpp's "llama 4" attention
 * temperature, llm_graph_input_attn_temp): 1 + scale ln(floor(pos / floor_ctx)
 * + 1), in llama.cpp's precision (the division in float, the rest in double,
 * rounded to float once). floor_ctx > 0: the original context length.
 * Piecewise constant: it changes every floor_ctx positions. */
float arch_attn_temp(float scale, int floor_ctx, int pos);

/* The Llama 3.1 frequency divisors ("llama3" rope scaling) that a converter
 * writes as rope_freqs.weight: for n_dims / 2 pairs of base freq_base, with
 * HF's factor, low_freq_factor, high_freq_factor and original context. */
void arch_llama3_freq_factors(int n_dims, float freq_base, float factor, float low_freq_factor,
                              float high_freq_factor, int orig_ctx, float *out);

#endif
