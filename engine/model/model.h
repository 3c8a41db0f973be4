/* model.h - a Llama-family model: hyperparameters, typed weight views, tokenizer.
 *
 * Two file formats load into the same struct:
 *  - GGUF v2/v3, the architectures of arch.h's table (llama, qwen2, qwen3,
 *    smollm3, mistral3, qwen3moe, gpt-oss, lfm2, lfm2moe; gguf.h describes the container), read through that
 *    table: what a file asks for that the engine does not compute is
 *    refused at load;
 *  - the llama2.c checkpoint (seven int32 header fields, then float32 tensors)
 *    with its separate tokenizer file.
 * The format is detected from the first four bytes ("GGUF").
 *
 * Weights stay in their stored type (any of quant.h's weight types) inside a
 * read-only memory mapping; each backend computes on them as it chooses (the
 * CPU backend on quantized ones in these very bytes, so the mapping must
 * outlive it). Every
 * weight matrix is row-major (out_features, in_features): row r is the input
 * weights of output r, which is both llama2.c's and GGUF's order (ne[0] = in).
 *
 * Ownership: model_load returns a model that owns its mapping and tokenizer;
 * every pointer inside stays valid until model_free. A model is immutable
 * after load and may be shared by threads. */
#ifndef CK_MODEL_H
#define CK_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "tokenizer.h"

typedef struct model_config {
    int dim;          /* residual stream width */
    int hidden_dim;   /* FFN inner width (feed_forward_length; a MoE model computes none) */
    int n_layers;     /* transformer blocks */
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads; n_heads % n_kv_heads == 0 (GQA) */
    int head_dim;     /* values per q/k/v head: attention.key_length, else dim / n_heads */
    int vocab_size;   /* rows of the embedding and the classifier */
    int seq_len;      /* context length the model was trained for */
    float norm_eps;   /* RMSNorm epsilon (also of the qwen3 q/k head norms) */
    float rope_theta; /* RoPE base */
    /* Architecture (arch.h); all zero means plain llama, adjacent-pair RoPE,
     * no scaling (llama2.c checkpoints, and configs built by hand). */
    int arch;               /* ARCH_*; 0 is read as ARCH_LLAMA */
    int rope_style;         /* ARCH_ROPE_NORMAL (pairs (2i, 2i+1)) or ARCH_ROPE_NEOX (i, i+hd/2) */
    int rope_scaling;       /* ARCH_SCALING_* */
    float rope_factor;      /* rope.scaling.factor (0 or 1: none) */
    float rope_attn_factor; /* rope.scaling.attn_factor (0: 1) */
    int rope_orig_ctx;      /* YaRN's original context length */
    float yarn_ext_factor, yarn_beta_fast, yarn_beta_slow; /* YaRN's mix and range */
    float yarn_log_mul;    /* rope.scaling.yarn_log_multiplier (mistral3; 0 elsewhere): divides
                           YaRN's magnitude scale (arch_rope_freqs) */
    int no_rope_step;      /* the row's: layer l has no RoPE when (l + 1) % no_rope_step == 0
                           (smollm3: 4); 0: every layer has it */
    float attn_temp_scale; /* mistral3's attention.temperature_scale: each query is scaled by
                              arch_attn_temp(attn_temp_scale, attn_temp_floor, pos) after RoPE;
                              0: not scaled */
    int attn_temp_floor;   /* positions per step of that scale: the original context length */
    /* Mixture of experts (arch.h's ARCH_BLOCK_MOE); all zero for a dense model. */
    int n_expert;      /* experts of each layer (expert_count), 1..MODEL_MAX_EXPERTS */
    int n_expert_used; /* experts each token goes through (expert_used_count), 1..n_expert */
    int expert_ffn;    /* inner width of one expert (expert_feed_forward_length) */
    int expert_gating; /* the row's ARCH_GATING_*: how the router picks and weighs them */
    int expert_act;    /* the row's ARCH_ACT_*: the experts' gated activation */
    /* Sliding-window attention (arch.h's ARCH_READS_SWA); 0 for none. A
     * windowed layer's query at position p sees keys at (p - n_swa, p]. */
    int n_swa;      /* attention.sliding_window, in tokens; 0: no layer is windowed */
    int swa_period; /* attention.sliding_window_pattern: which layers (arch_layer_is_swa) */
    /* Short-convolution layers (arch.h's ARCH_BLOCK_SHORTCONV, lfm2); 0 for none. */
    int conv_l;        /* shortconv.l_cache: the taps of each channel's kernel; the state a
                          sequence carries through a convolution layer is its last
                          conv_l - 1 inputs (dim floats each) */
    int n_conv_layers; /* the layers that are short convolutions (model_layer.sc_in.n != 0) */
    int n_dense_lead;  /* lfm2moe's leading_dense_block_count: layers [0, n_dense_lead) have the
                          dense feed-forward, the others the experts; 0 elsewhere */
    /* gemma4 (arch.h's ARCH_READS_GEMMA4); all zero elsewhere. Its layers'
     * own head counts and head sizes are model_layer's (model_layer_geom);
     * n_heads is then the most any layer has, n_kv_heads that layer's,
     * head_dim the full layers' key_length. */
    int head_dim_swa;     /* windowed layers' key_length_swa (their RoPE turns all of it) */
    float rope_theta_swa; /* their RoPE base (rope.freq_base_swa) */
    int q_dim_max;        /* the widest layer's query row (n_heads x head_dim of that layer) */
    int kv_dim_max;       /* the widest layer's K (= V) row: a KV block's row for every layer */
    float emb_scale;      /* token embeddings multiplied by it (gemma4: sqrt(dim); Granite:
                             embedding_scale); 0: not scaled */
    float logit_softcap;  /* logits become cap tanh(logit / cap); 0: not capped */
    float kq_div;         /* scores are q.k / kq_div (gemma4: 1); 0: q.k / sqrt(head_dim) */
    int v_norm;           /* each V head RMS-normed with unit weight before it is stored */
    int ffn_act;          /* the dense feed-forward's ARCH_ACT_* (0: SwiGLU; gemma4: GELU) */
    int n_embd_pl;        /* gemma4's per-layer embeddings: P values a layer (E2B/E4B); 0: none */
    int n_kv_shared;      /* gemma4's last layers that attend over an earlier one's KV
                             (model_layer.kv_src); 0: none */
    /* Mamba2 layers (arch.h's ARCH_BLOCK_MAMBA2, granitehybrid); 0 for none. */
    int ssm_d_conv;   /* ssm.conv_kernel: taps of the causal convolution of x, B and C */
    int ssm_d_inner;  /* ssm.inner_size: x's (and z's, y's) width, ssm_n_head heads */
    int ssm_d_state;  /* ssm.state_size: N, the state of each channel */
    int ssm_n_group;  /* ssm.group_count: B and C come in groups of heads */
    int ssm_n_head;   /* ssm.time_step_rank: heads, each with its dt, A and D */
    int n_ssm_layers; /* the layers that are Mamba2 (model_layer.ssm_in.n != 0) */
    /* Granite's scalars (granitehybrid); 0: none. */
    /* (embedding_scale: emb_scale above) */
    float resid_scale; /* residual_scale: multiplies each block's output before the residual add */
    float attn_scale;  /* attention.scale: the attention's score scale, in the place of
                          1 / sqrt(head_dim) */
    float logit_scale; /* logit_scale: the logits are divided by it */
} model_config;

/* Columns of a Mamba2 layer's convolution: x, B and C. */
static inline size_t model_ssm_conv_ch(const model_config *c) {
    return (size_t)c->ssm_d_inner + 2 * (size_t)c->ssm_n_group * (size_t)c->ssm_d_state;
}

/* Floats of one Mamba2 layer's recurrent state: the convolution's last
 * ssm_d_conv - 1 inputs, then the (ssm_d_inner, ssm_d_state) scan state. */
static inline size_t model_ssm_state_floats(const model_config *c) {
    return (size_t)(c->ssm_d_conv - 1) * model_ssm_conv_ch(c) +
           (size_t)c->ssm_d_inner * (size_t)c->ssm_d_state;
}

/* Floats of one sequence's recurrent state: every convolution layer's last
 * conv_l - 1 inputs of dim channels, every Mamba2 layer's
 * model_ssm_state_floats (0 in a model without any). */
static inline size_t model_state_floats(const model_config *c) {
    return (c->n_conv_layers ? (size_t)c->n_conv_layers * (size_t)(c->conv_l - 1) * (size_t)c->dim : 0) +
           (c->n_ssm_layers ? (size_t)c->n_ssm_layers * model_ssm_state_floats(c) : 0);
}

/* Floats of a query row and of a K (= V) row at their widest: every layer
 * of a KV block has rows of model_kv_dim floats, a layer with fewer (gemma4)
 * filling their start. */
static inline int model_q_dim(const model_config *c) {
    return c->q_dim_max ? c->q_dim_max : c->n_heads * c->head_dim;
}
static inline int model_kv_dim(const model_config *c) {
    return c->kv_dim_max ? c->kv_dim_max : c->n_kv_heads * c->head_dim;
}

/* Most experts a layer may have (Qwen3's MoEs have 128; llama.cpp allows
 * more, and the CPU backend's scratch grows with the count). */
#define MODEL_MAX_EXPERTS 512

/* A typed view of one weight tensor: n elements of `type` (quant.h) at data. */
typedef struct model_tensor {
    int type;
    uint64_t n;
    const void *data;
} model_tensor;

typedef struct model_layer {
    model_tensor attn_norm; /* (dim) */
    model_tensor wq;        /* (n_heads * head_dim, dim) */
    model_tensor wk;        /* (n_kv_heads * head_dim, dim) */
    model_tensor wv;        /* (n_kv_heads * head_dim, dim) */
    model_tensor wo;        /* (dim, n_heads * head_dim) */
    model_tensor ffn_norm;  /* (dim) */
    model_tensor w1;        /* gate: (hidden_dim, dim) */
    model_tensor w2;        /* down: (dim, hidden_dim) */
    model_tensor w3;        /* up:   (hidden_dim, dim) */
    /* Optional (n == 0, data NULL when the file has none; arch.h says who has them): */
    model_tensor bq;     /* (n_heads * head_dim) added to q */
    model_tensor bk;     /* (n_kv_heads * head_dim) added to k */
    model_tensor bv;     /* (n_kv_heads * head_dim) added to v */
    model_tensor q_norm; /* (head_dim) RMSNorm weight of every q head, before RoPE */
    model_tensor k_norm; /* (head_dim) RMSNorm weight of every k head, before RoPE */
    model_tensor bo;     /* (dim) added after the output projection (gpt-oss) */
    model_tensor sinks;  /* (n_heads) each head's sink logit: one more term of its softmax's
                            denominator, with no value (gpt-oss) */
    /* A short-convolution layer's (lfm2; n == 0 in an attention layer, whose
     * wq, wk, wv, wo, q_norm, k_norm these replace): */
    model_tensor sc_conv; /* shortconv.conv     (dim, conv_l) each channel's kernel */
    model_tensor sc_in;   /* shortconv.in_proj  (3 * dim, dim): B, C, x */
    model_tensor sc_out;  /* shortconv.out_proj (dim, dim) */
    /* A Mamba2 layer's (granitehybrid; n == 0 in an attention layer, whose
     * wq, wk, wv, wo these replace). DI = ssm_d_inner, H = ssm_n_head,
     * NC = model_ssm_conv_ch: */
    model_tensor ssm_in;     /* ssm_in.weight     (2 DI + 2 n_group d_state + H, dim): z, xBC, dt */
    model_tensor ssm_conv;   /* ssm_conv1d.weight (NC, d_conv) each channel's taps */
    model_tensor ssm_conv_b; /* ssm_conv1d.bias   (NC), optional */
    model_tensor ssm_dt_b;   /* ssm_dt.bias       (H) */
    model_tensor ssm_a;      /* ssm_a             (H) each head's A (negative: -exp(A_log)) */
    model_tensor ssm_d;      /* ssm_d             (H) each head's skip D */
    model_tensor ssm_norm;   /* ssm_norm.weight   (DI): the grouped RMSNorm's */
    model_tensor ssm_out;    /* ssm_out.weight    (dim, DI) */
    /* Mixture of experts (n == 0 in a dense model, whose w1, w2, w3 these
     * replace in a MoE one, where those are empty). E = n_expert,
     * FE = expert_ffn; model_expert gives expert e's matrix. */
    model_tensor router;    /* ffn_gate_inp  (E, dim) */
    model_tensor gate_exps; /* ffn_gate_exps (E, FE, dim) */
    model_tensor up_exps;   /* ffn_up_exps   (E, FE, dim) */
    model_tensor down_exps; /* ffn_down_exps (E, dim, FE) */
    /* Their biases (gpt-oss; n == 0 where the file has none), f32 in the
     * files llama.cpp's converter writes: */
    model_tensor router_b;    /* ffn_gate_inp.bias  (E) */
    model_tensor gate_exps_b; /* ffn_gate_exps.bias (E, FE) */
    model_tensor up_exps_b;   /* ffn_up_exps.bias   (E, FE) */
    model_tensor down_exps_b; /* ffn_down_exps.bias (E, dim) */
    model_tensor probs_b;     /* exp_probs_b.bias   (E) lfm2moe's, added to choose the experts */
    /* gemma4 (n == 0 elsewhere) */
    model_tensor attn_post_norm; /* post_attention_norm (dim): the attention output's norm */
    model_tensor ffn_post_norm;  /* post_ffw_norm (dim): the feed-forward output's norm */
    model_tensor out_scale;      /* layer_output_scale (1): the residual stream scaled at the end */
    /* gemma4's experts beside its dense feed-forward (26B-A4B; n == 0 elsewhere) */
    model_tensor router_scale; /* ffn_gate_inp.scale (dim): the router's input rms(x) / sqrt(dim) times it */
    model_tensor pre_norm_2;   /* pre_ffw_norm_2 (dim): the experts' input norm */
    model_tensor post_norm_1;  /* post_ffw_norm_1 (dim): the dense part's output norm */
    model_tensor post_norm_2;  /* post_ffw_norm_2 (dim): the experts' output norm */
    model_tensor down_exps_s;  /* ffn_down_exps.scale (E): expert e's output times its own; optional */
    /* gemma4's per-layer attention geometry; 0 elsewhere (the config's:
     * model_layer_geom) */
    int n_heads, n_kv_heads, head_dim;
    int swa;    /* windowed (gemma4; elsewhere arch_layer_is_swa of the config's period) */
    int kv_src; /* gemma4's shared-KV layers: 1 + the layer whose KV it attends over (it writes
                   none and computes no K or V); 0: its own */
    /* gemma4's per-layer embedding (n == 0 elsewhere; P = n_embd_pl) */
    model_tensor ple_gate;      /* inp_gate (P, dim) */
    model_tensor ple_proj;      /* proj (dim, P) */
    model_tensor ple_post_norm; /* post_norm (dim) */
} model_layer;

/* The nine tensors of a layer, for code that visits each of them. */
#define MODEL_LAYER_TENSORS 9
static inline void model_layer_list(const model_layer *l, const model_tensor *t[MODEL_LAYER_TENSORS]) {
    t[0] = &l->attn_norm;
    t[1] = &l->wq;
    t[2] = &l->wk;
    t[3] = &l->wv;
    t[4] = &l->wo;
    t[5] = &l->ffn_norm;
    t[6] = &l->w1;
    t[7] = &l->w2;
    t[8] = &l->w3;
}

/* The optional tensors of a layer (each may have n == 0). */
#define MODEL_LAYER_EXTRAS 7
static inline void model_layer_extras(const model_layer *l, const model_tensor *t[MODEL_LAYER_EXTRAS]) {
    t[0] = &l->bq;
    t[1] = &l->bk;
    t[2] = &l->bv;
    t[3] = &l->q_norm;
    t[4] = &l->k_norm;
    t[5] = &l->bo;
    t[6] = &l->sinks;
}

/* The recurrent tensors of a layer, short-convolution and Mamba2 (each
 * n == 0 in an attention one). */
#define MODEL_LAYER_CONV 11
static inline void model_layer_conv(const model_layer *l, const model_tensor *t[MODEL_LAYER_CONV]) {
    t[0] = &l->sc_conv;
    t[1] = &l->sc_in;
    t[2] = &l->sc_out;
    t[3] = &l->ssm_in;
    t[4] = &l->ssm_conv;
    t[5] = &l->ssm_conv_b;
    t[6] = &l->ssm_dt_b;
    t[7] = &l->ssm_a;
    t[8] = &l->ssm_d;
    t[9] = &l->ssm_norm;
    t[10] = &l->ssm_out;
}

/* The mixture-of-experts tensors of a layer (each n == 0 in a dense model;
 * the biases also in a MoE without them). */
#define MODEL_LAYER_MOE 9
static inline void model_layer_moe(const model_layer *l, const model_tensor *t[MODEL_LAYER_MOE]) {
    t[0] = &l->router;
    t[1] = &l->gate_exps;
    t[2] = &l->up_exps;
    t[3] = &l->down_exps;
    t[4] = &l->router_b;
    t[5] = &l->gate_exps_b;
    t[6] = &l->up_exps_b;
    t[7] = &l->down_exps_b;
    t[8] = &l->probs_b;
}

/* Expert e's matrix of an expert tensor t of n_expert (gate_exps, up_exps,
 * down_exps): a view of its contiguous e-th slice, t->n / n_expert elements
 * of t's type. The loader checked that each slice is whole rows of whole
 * blocks, so the slice starts on a block. */
model_tensor model_expert(const model_tensor *t, int n_expert, int e);

/* Most layers a model may have (model_config_check). */
#define MODEL_MAX_LAYERS 1024

/* Largest head_dim (attention.key_length) a model may have. */
#define MODEL_MAX_HEAD_DIM 512

enum { MODEL_FMT_LLAMA2C = 1, MODEL_FMT_GGUF = 2 };

typedef struct model {
    model_config cfg;
    int format;              /* MODEL_FMT_* */
    int tied;                /* classifier shares the token embedding */
    model_tensor tok_emb;    /* (vocab_size, dim) */
    model_tensor out_norm;   /* (dim) */
    model_tensor wcls;       /* (vocab_size, dim); == tok_emb when tied */
    model_tensor rope_freqs; /* (head_dim / 2) RoPE frequency divisors; n == 0 when absent */
    /* gemma4's per-layer embeddings (n == 0 elsewhere; P = n_embd_pl, L layers) */
    model_tensor ple_tok;   /* per_layer_token_embd (vocab, L x P) */
    model_tensor ple_model; /* per_layer_model_proj (L x P, dim) */
    model_tensor ple_norm;  /* per_layer_proj_norm (P) */
    int has_bias;           /* some layer has a q, k or v bias */
    int has_qk_norm;        /* the layers have q/k head norms */
    model_layer *layers;    /* (n_layers) */
    tokenizer *tok;         /* owned */
    char name[64];          /* general.name, or the file's base name */
    char fingerprint[17];   /* 16 hex digits identifying config + weights */
    int stop_on_bos;        /* stories are separated by BOS: stop on it too */
    /* private */
    void *map_;
    size_t map_len_;
    void *gguf_; /* gguf_file* for GGUF models */
} model;

/* Layer l's query heads, KV heads and head size: its own (gemma4), else
 * the config's. */
static inline void model_layer_geom(const model *m, int l, int *n_heads, int *n_kv_heads, int *head_dim) {
    const model_layer *ly = &m->layers[l];
    *n_heads = ly->head_dim ? ly->n_heads : m->cfg.n_heads;
    *n_kv_heads = ly->head_dim ? ly->n_kv_heads : m->cfg.n_kv_heads;
    *head_dim = ly->head_dim ? ly->head_dim : m->cfg.head_dim;
}

/* Load a model. tokenizer_path is required for llama2.c checkpoints and
 * ignored (may be NULL) for GGUF, whose tokenizer is inside the file.
 * Returns 0 and sets *out, or a CK_E* code with a sentence in err. */
int model_load(const char *path, const char *tokenizer_path, model **out, char *err, size_t errlen);
void model_free(model *m);
/* 1 when the weights' bytes are a read-only private mapping of the model
 * file (GGUF), never written: their pages may be dropped from the resident
 * set (madvise MADV_DONTNEED) and fault back in from the file. */
int model_weights_in_file_map(const model *m);

/* Weight bytes one forward step reads when every weight is read once in its
 * stored type (the numerator of a bandwidth roofline); a MoE layer's
 * experts count n_expert_used / n_expert of their bytes, what one token
 * reads of them. */
uint64_t model_weight_bytes(const model *m);
/* Bytes of the model file (mapped read-only while the model lives). */
size_t model_file_bytes(const model *m);
/* Parameter count (elements of every weight tensor). */
uint64_t model_n_params(const model *m);

/* RoPE's per-pair frequencies (head_dim / 2 floats) and magnitude scale for
 * m, from its config and rope_freqs (arch_rope_freqs). Backends call it once
 * at creation. Returns 0, or CK_E* when rope_freqs cannot be read. */
int model_rope_freqs(const model *m, float *freq, float *mscale);

/* gemma4's windowed layers' RoPE frequencies (head_dim_swa / 2 floats):
 * base rope_theta_swa over the whole head, no divisors, no scaling. */
void model_rope_freqs_swa(const model *m, float *freq);

/* Validate a config: positive sizes, divisibility, limits that keep every
 * size computation inside int and size_t. head_dim 0 means dim / n_heads
 * (which must then divide); any other head_dim is taken as given (it must
 * be even, at most MODEL_MAX_HEAD_DIM). Fills err on failure. */
int model_config_check(const model_config *c, char *err, size_t errlen);

#endif
