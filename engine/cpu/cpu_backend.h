/* cpu_backend.h - the CPU backend's state, shared by its files (private to
 * engine/cpu/; the rest of the engine sees backend.h's table only).
 *
 * Who does what:
 *  - backend_cpu.c    the step: checks a batch, runs the layer kinds of each
 *                     layer in the order the architecture table gives (by
 *                     token split or on the team), then the classifier; the
 *                     KV block copies; the ops table.
 *  - cpu_layer_*.c    the layer kinds (cpu_layer.h): attention, the dense
 *                     feed-forward, the mixture of experts, and the norms,
 *                     embedding and classifier around them.
 *  - cpu_mm.c         the products: where almost all the time goes.
 *  - cpu_build.c      construction and destruction (every buffer sized from
 *                     the options, once), the memory plan, reporting.
 *
 * Ownership: the cpu_backend owns every pointer in it (freed by
 * cpu_destroy), except the quantized matrices' rows that point into the
 * model's file mapping (cpu_mat.q.data with x8 == 0), which the model owns
 * and must outlive the backend. */
#ifndef CK_CPU_BACKEND_H
#define CK_CPU_BACKEND_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_attn.h"
#include "cpu_gemm.h"
#include "cpu_qact.h"
#include "cpu_qdot.h"
#include "cpu_steal.h"
#include "cpu_team.h"
#include "kvq.h"

/* Most tokens a thread takes in a token-split step: its x rows of a layer
 * must stay in L2 (cpu_gemm.c's GEMM_M_BLOCK). */
#define TOKEN_SPLIT_MAX GEMM_M_BLOCK

/* Work below which a parallel section costs more than it saves. With
 * OMP_WAIT_POLICY=passive (confkv and confkvd set it) waking a sleeping
 * thread and waiting for it is a futex each way: about 25 us a region here,
 * measured, and the team's (cpu_team.h) the same once its threads sleep. So
 * a section must carry about 100 us of work: 8M multiply-adds
 * of a product (compute bound, about 90 G a second a core), 2M
 * multiply-adds of a batch's attention. Without the product threshold
 * stories260K's full-KV batches of 7 would wake the second thread 6 times a
 * step and run 35 % slower on two threads than on one (measured).
 * A one-token step is different: its sections follow each other a few
 * microseconds apart, within the spin before a waiting thread sleeps
 * (cpu_team.h), so one costs about 1 us. From 256K weights
 * (150 KB of Q4_K, about 15 us to stream) a product is split, the 110M
 * shape's attention output (590K weights) included, which one thread would
 * otherwise read alone while the other waits; from 32K multiply-adds its
 * attention's heads are (cpu_layer_attn.c). */
#define PAR_MIN_MACS (1u << 23)
#define PAR_MIN_WEIGHTS (1u << 18)
#define PAR_MIN_ATT_MACS (1u << 21)
#define PAR_MIN_HEAD_MACS (1u << 15)

/* One weight matrix (n, k): packed f32 (f.p != NULL, owned) or quantized
 * rows (q.data != NULL): in the file mapping, or repacked for a type with
 * an x8 layout (cpu_qdot_repack8) into the backend's x8 arena (or, should
 * it be full, into qown). */
typedef struct cpu_mat {
    gemm_w f;
    cpu_qmat q;
    void *qown; /* owned: the x8 copy q.data points at when it is not in the arena; else NULL */
} cpu_mat;

static inline int cpu_mat_n(const cpu_mat *w) { return w->f.p ? w->f.n : w->q.n; }
static inline int cpu_mat_k(const cpu_mat *w) { return w->f.p ? w->f.k : w->q.k; }

/* Activation formats of the quantized products, indexes of cpu_backend.xq */
enum { ACT_Q8_0, ACT_Q8_1, ACT_Q8_K, ACT_Q8_0S, ACT_N };

static inline int cpu_act_index(int fmt) {
    return fmt == QB_Q8_0 ? ACT_Q8_0 : fmt == QB_Q8_1 ? ACT_Q8_1 : fmt == QACT_Q8_0S ? ACT_Q8_0S : ACT_Q8_K;
}

/* The attention layer kind's weights (cpu_layer_attn.c). */
typedef struct cpu_attn_w {
    float *norm;    /* (dim) attn_norm */
    cpu_mat qkv[3]; /* f32: qkv[0] alone, (q_dim + 2 * kv_dim, dim), wq rows, then wk, then
                       wv; quantized: wq (q_dim, dim), wk, wv (kv_dim, dim); the layer's
                       own q_dim and kv_dim (gemma4's differ by layer); without wv (V = K)
                       no V rows, no wv */
    int n_qkv;      /* 1 (fused), 3, or 2 (quantized, V = K) */
    float *bqkv;    /* (qkv_dim) q, k, v biases (0 where the file has none); NULL: no bias */
    float *q_norm;  /* (head_dim) RMSNorm weight of each q head (qwen3); NULL: none */
    float *k_norm;  /* (head_dim) the same for each k head */
    cpu_mat wo;     /* (dim, q_dim) */
    float *bo;      /* (dim) added after wo (gpt-oss); NULL: none */
    float *sinks;   /* (n_heads) each head's sink logit, in its softmax's denominator only
                       (gpt-oss); NULL: none */
    int rope;       /* 1: RoPE on q and k; 0: none (smollm3's every fourth layer, arch.h) */
    int window;     /* a query at p sees keys at (p - window, p] (gpt-oss's windowed layers);
                       0: every earlier key */
    /* the layer's geometry (model_layer_geom): its q rows are n_heads x head_dim, its K
     * and V rows n_kv_heads x head_dim, at the start of the KV block's kv_dim-wide rows */
    int n_heads, n_kv_heads, head_dim;
    int rope_swa;     /* RoPE from the windowed layers' table (gemma4: rope_swa, inv_freq_swa) */
    float kq_div;     /* scores are q.k / kq_div: sqrt(head_dim), gemma4's 1 */
    int v_is_k;       /* no wv: V is the K projection (before k_norm and RoPE) */
    float *post_norm; /* (dim) RMSNorm of the output projection before it is added (gemma4);
                         NULL: none */
    int kv_layer;     /* the layer whose KV rows it writes and reads: its own, or (gemma4's
                         shared-KV layers, which write none and have only wq) an earlier one's */
} cpu_attn_w;

/* The dense feed-forward layer kind's weights (cpu_layer_ffn.c). */
typedef struct cpu_ffn_w {
    float *norm;      /* (dim) ffn_norm */
    cpu_mat w1, w3;   /* (hidden_dim, dim): gate, up (both f32 or both quantized) */
    cpu_mat w2;       /* (dim, hidden_dim) */
    float *post_norm; /* (dim) RMSNorm of the output before it is added (gemma4); NULL: none */
    float *out_scale; /* (1) the whole residual stream scaled by it after the layer (gemma4's
                         layer_output_scale); NULL: none */
} cpu_ffn_w;

/* The mixture-of-experts layer kind's weights (cpu_layer_moe.c). Each
 * expert's matrices are cpu_mats of their own over its slice of the file's
 * 3-D tensors (model_expert), in the dense ones' forms. */
typedef struct cpu_moe_w {
    float *norm;    /* (dim) ffn_norm */
    cpu_mat router; /* (n_expert, dim) ffn_gate_inp */
    cpu_mat *exps;  /* (3 * n_expert) expert e's gate at 3e, up at 3e + 1 ((expert_ffn, dim),
                       both f32 or both quantized), down at 3e + 2 ((dim, expert_ffn)) */
    /* the biases (gpt-oss); NULL where the file has none */
    float *router_b;      /* (n_expert) added to the router's logits */
    float *gate_b, *up_b; /* (n_expert, expert_ffn) added to each expert's gate and up outputs */
    float *down_b;        /* (n_expert, dim) added to each expert's output */
    float *probs_b;       /* (n_expert) added to the sigmoids to choose the experts (lfm2moe) */
    /* gemma4's (26B-A4B), norm then being pre_ffw_norm_2; NULL elsewhere */
    float *router_scale; /* (dim) the router's input: rms-normed x / sqrt(dim) times it */
    float *post_norm_1;  /* (dim) the dense part's output norm (cpu_layer_ffn.c) */
    float *post_norm_2;  /* (dim) the experts' output norm */
    float *down_scale;   /* (n_expert) each expert's output times its own; NULL: none */
} cpu_moe_w;

/* The short-convolution layer kind's weights (cpu_layer_shortconv.c);
 * all zero in an attention layer. */
typedef struct cpu_conv_w {
    float *norm;   /* (dim) attn_norm, the operator norm */
    float *kern;   /* (dim, conv_l) each channel's taps, the last on the current token */
    cpu_mat in;    /* (3 * dim, dim) in_proj: B, C, x */
    cpu_mat out;   /* (dim, dim) out_proj */
    int state_off; /* floats from a slot's start to this layer's (conv_l - 1, dim) state */
} cpu_conv_w;

/* gemma4's per-layer embedding of a layer (cpu_layer_norm.c); zero elsewhere. */
typedef struct cpu_ple_w {
    cpu_mat gate;     /* (P, dim) inp_gate */
    cpu_mat proj;     /* (dim, P) proj */
    float *post_norm; /* (dim); NULL: the model has none */
} cpu_ple_w;

/* The Mamba2 layer kind's weights (cpu_layer_mamba2.c); all zero in an
 * attention layer. DI = ssm_d_inner, H = ssm_n_head, NC = model_ssm_conv_ch. */
typedef struct cpu_ssm_w {
    float *norm;      /* (dim) attn_norm, the operator norm */
    cpu_mat in;       /* (2 DI + 2 n_group d_state + H, dim) ssm_in: z, xBC, dt */
    float *kern;      /* (NC, d_conv) each channel's taps, the last on the current token */
    float *kern_b;    /* (NC) the convolution's bias, or NULL */
    float *head;      /* (3, H) dt_bias, A, D */
    float *gnorm;     /* (DI) the grouped RMSNorm's weight */
    cpu_mat out;      /* (dim, DI) ssm_out */
    size_t state_off; /* floats from a slot's start to this layer's state: the convolution's
                         (d_conv - 1, NC) inputs, oldest first, then the (H, DI / H, d_state) scan */
} cpu_ssm_w;

/* A layer's weights: attn or conv (lfm2's layers have one of the two), and
 * ffn or moe as its architecture's blocks say (lfm2moe: the first layers
 * ffn, the others moe; gemma4: both where it has experts); a kind skips a
 * layer without its weights (norm NULL). */
typedef struct cpu_layer {
    cpu_conv_w conv;
    cpu_ssm_w ssm; /* granitehybrid's Mamba2 layers (then attn is zero) */
    cpu_attn_w attn;
    cpu_ffn_w ffn;
    cpu_moe_w moe;
    cpu_ple_w ple;
} cpu_layer;

struct cpu_layer_kind;

typedef struct cpu_backend {
    backend base;
    int n_threads;
    int q_dim, kv_dim, qkv_dim, max_ctx;
    /* the layer kinds every layer runs, in order (cpu_layer.h; from the
     * architecture table's blocks), NULL-terminated */
    const struct cpu_layer_kind *kinds[ARCH_MAX_BLOCKS + 1];
    /* kernels, chosen at creation (cpu_features.h) */
    int isa;                /* CPU_ISA_* */
    const gemm_kernels *gk; /* the f32 panels, scores, SwiGLU */
    attn_f32_fn attn;       /* cpu_attn.h's kernel for this shape, or NULL: the general code */
    const char *attn_name;  /* its ISA's name (static) */
    cpu_qdot qd;            /* the quantized dots */
    /* weights: f32 ones owned and packed (cpu_gemm.h), quantized ones in the mapping */
    float *emb;         /* (vocab, dim) row-major; NULL when tied (rows come from wcls) or
                         quantized (rows dequantized from the mapping at lookup) */
    float *out_norm;    /* (dim) */
    cpu_mat wcls;       /* (vocab, dim) */
    cpu_layer *layers;  /* (n_layers) */
    size_t layer_bytes; /* every layer's matrices as the products read them */
    /* quantized input rows of the products (T rows each, xq_stride bytes apart):
     * index ACT_*, NULL where no matrix takes that format */
    unsigned char *xq[ACT_N];
    size_t xq_stride[ACT_N];
    unsigned char *xoq; /* (T) the classifier's input rows in its format (xo's rows);
                            NULL when the classifier is f32 */
    size_t xoq_stride;
    size_t emb_row_bytes; /* bytes of one row of the file's token embedding */
    float *inv_freq;      /* (head_dim / 2) RoPE frequencies of the pairs (model_rope_freqs:
                         rope_freqs factors and linear/YaRN scaling folded in) */
    float rope_mscale;    /* cos and sin are scaled by it (YaRN; 1 otherwise) */
    int rope_neox;        /* pairs (i, i + head_dim / 2) instead of (2i, 2i + 1) */
    float *inv_freq_swa;  /* (head_dim_swa / 2) gemma4's windowed layers' frequencies; NULL: none */
    float *rope_swa;      /* (T, head_dim_swa) their cos, sin (as rope); NULL: none */
    float *q_scale;       /* (T) each token's query scale after RoPE (mistral3's temperature,
                             arch_attn_temp); NULL when the model has none */
    /* KV storage */
    float *kv;          /* (n_kv_blocks, kv_block_floats) */
    unsigned char *kv8; /* (n_kv8_blocks, kv8_block_bytes) int8 blocks, kvq.h layout */
    kvq_shape shape;
    /* activations, sized for max_batch_tokens (T) */
    float *x;       /* (T, dim) residual stream */
    float *xb;      /* (T, dim) normed input of a projection */
    float *qkv;     /* (T, qkv_dim) */
    float *att_out; /* (T, q_dim) */
    float *h13;     /* (R, 2 * F), F the feed-forward's width: hidden_dim, or a MoE
                       model's expert_ffn; R = T, or a MoE model's n_threads x T (a
                       T-row part for each thread: cpu_layer_moe.c) */
    float *h;       /* (R, F) */
    /* the mixture of experts' (cpu_layer_moe.c); NULL in a dense model */
    float *moe_p;          /* (T, n_expert) router logits, then probabilities */
    int32_t *moe_sel;      /* (T, n_expert_used) each token's experts, most probable first */
    float *moe_wt;         /* (T, n_expert_used) their weights */
    int32_t *moe_tok;      /* (T x n_expert_used) the span's (token, expert) pairs by expert:
                              the tokens (batch rows), from row i0 x n_expert_used on */
    float *moe_gw;         /* (T x n_expert_used) the pairs' weights */
    int32_t *moe_off;      /* (n_threads, 2 n_expert + 1) per scratch slot: expert e's pairs
                              are [off[e], off[e + 1]), then the experts with any, ascending */
    unsigned char *moe_xg; /* (n_threads x T) rows of moe_xrow bytes: an expert's tokens'
                              inputs in its gate's form (cpu_in_rows), then in up's where
                              that differs, gathered, one T-row part per thread */
    unsigned char *moe_hq; /* (T x n_expert_used) rows of moe_hrow bytes: each pair's
                              SwiGLU in its down matrix's form, in moe_tok's order */
    float *moe_y;          /* (T, dim) one expert's outputs (a batch shares it by columns) */
    /* gemma4's per-layer embeddings (cpu_layer_norm.c); NULL / zero elsewhere */
    cpu_mat ple_model; /* (L x P, dim) per_layer_model_proj */
    float *ple_norm;   /* (P) per_layer_proj_norm */
    float *ple;        /* (T, L x P) each token's inputs of every layer, from the batch's start */
    float *ple_h;      /* (T, P) a layer's gated rows */
    float *moe_acc;    /* (T, dim) gemma4's experts beside a dense part: the router's input,
                              then the experts' sum (the dense part's output is in xo); NULL
                              elsewhere */
    size_t moe_xrow, moe_hrow;
    float *rope;   /* (T, head_dim) cos, sin interleaved per pair */
    float *scores; /* (n_threads, scores_per_thread) per thread: attention scores
                      (n_heads, max_ctx), then int8 blocks' scaled queries (q_dim) */
    size_t scores_per_thread;
    int32_t *hot_list; /* (T, max_blocks) per sequence of the batch: its resident logical
                         blocks in order, so attention skips the others without looking */
    int32_t *n_list;   /* (T) entries in each list */
    int32_t *seq_last; /* (T) token_split's scratch: each sequence's last token */
    int *cut;          /* (n_threads + 1) token_split's cuts */
    double *share;     /* (n_threads) the batch's share each part of a token split gets,
                         learnt from how long the parts took (split_learn); sum 1 */
    double *done_s;    /* (n_threads) when each part finished its layers, seconds
                         after the split region began */
    double *cls_s;     /* (n_threads) each thread's seconds on its classifier panels */
    int *pcut;         /* (n_threads + 1) the classifier's panel cuts */
    cpu_steal *steal;  /* (n_threads) the ranges of a product's work stealing */
    cpu_team *team;    /* (n_threads) the products' and a token's attention's threads */
    float *xo;         /* (T, dim) the normed final states of the rows asked for */
    /* recurrent layers' (cpu_layer_shortconv.c); NULL in a model without */
    float *state;       /* (n_state_slots, model_state_floats) each slot's convolution inputs,
                           per layer (conv_l - 1, dim), oldest first */
    int32_t *state_pos; /* (n_state_slots) the position a slot's next token must have */
    size_t state_floats;
    float *conv_bcx; /* (T, 3 * dim) in_proj's B, C, x */
    float *conv_y;   /* (T, dim) C times the convolution, out_proj's input */
    float *ssm_zx;   /* (T, 2 DI + 2 n_group d_state + H) ssm_in's z, xBC, dt (Mamba2) */
    float *ssm_y;    /* (T, DI) the scan's output, then ssm_out's input */
    int max_blocks;  /* max_ctx / block_size, rounded up */
    /* cpu_attn.c's inputs, per thread (n_threads, max_blocks) each */
    attn_shape ashape;
    const float **att_blk;
    int *att_rows;
    float *att_mass;
    /* every x8 copy of a weight matrix, one after another: one allocation
     * on 2 MiB pages (cpu_build.c's x8_arena_new: why) */
    unsigned char *x8_arena;
    size_t x8_cap, x8_used;
    size_t bytes; /* everything above */
} cpu_backend;

/* ------------------------------------------------------------ cpu_mm.c */

/* A product shared out on the team (cpu_team.h): its arguments, and what
 * a thread does with the units [u0, u1) it takes (cpu_matmul's mats, the
 * feed-forward's SwiGLU, the classifier). */
typedef struct cpu_mm_job cpu_mm_job;
struct cpu_mm_job {
    const cpu_backend *cb;
    void (*units)(const cpu_mm_job *j, int u0, int u1);
    float *y; /* (M, ldy); the classifier's logits */
    int ldy;
    const float *x;
    int row0;
    const cpu_mat *const *mats;
    int n_mats, M, accumulate;
    float *h13;            /* the feed-forward's scratch, y its h */
    int par, chunk, align; /* cpu_steal_init's: the team may run fewer threads
                              (OMP_THREAD_LIMIT), whose steals then take the rest */
};

/* Units a product over w is split into: panels of GEMM_PANEL columns (f32),
 * rows (quantized: a row is already hundreds of bytes). */
int cpu_mat_units(const cpu_mat *w);
/* Output columns [c0, c1) of units [u0, u1). */
void cpu_unit_cols(const cpu_mat *w, int u0, int u1, int *c0, int *c1);
/* A product's input rows in w's own form, for callers that lay them out
 * themselves (the mixture of experts gathers each expert's tokens): f32
 * for a packed w, else w's activation format (cpu_qact.h). Bytes of one
 * row (w's k elements): */
size_t cpu_in_row_bytes(const cpu_mat *w);
/* M rows of x (w's k floats each) into dst, cpu_in_row_bytes(w) apart. */
void cpu_in_rows(const cpu_backend *cb, const cpu_mat *w, const float *x, int M, void *dst);
/* Units [u0, u1) of y (M, ldy) (+)= in . w^T, in: M rows as cpu_in_rows
 * writes them. One thread; threads may share y with disjoint units. */
void cpu_in_part(float *y, int ldy, const void *in, const cpu_mat *w, int M, int u0, int u1, int accumulate);
/* Threads for an (M, N, K) product: one where waking the others costs more
 * than it saves. */
int cpu_gemm_threads(int M, int N, int K, int threads);
/* Quantizes x (M rows of K) into rows row0.. of every format the mats take
 * (a no-op for f32 mats). */
void cpu_quantize_in(cpu_backend *cb, const float *x, int M, int K, int row0, const cpu_mat *const *mats,
                     int n_mats);
/* Units [u0, u1) of y (M, ldy) (+)= x . w^T: f32 x rows for packed w, the
 * quantized rows from row0 for a quantized one. */
void cpu_mat_part(const cpu_backend *cb, float *y, int ldy, const float *x, int row0, const cpu_mat *w, int M,
                  int u0, int u1, int accumulate);
/* j's nu units on par threads of the team, by work stealing; here at
 * once when par <= 1. */
void cpu_mm_run(cpu_backend *cb, cpu_mm_job *j, int nu, int par);
/* y (M, ldy) = x (M, K) . [w_0; w_1; ...]^T (+ y when accumulate). */
void cpu_matmul(cpu_backend *cb, float *y, int ldy, const float *x, int row0, const cpu_mat *const *mats,
                int n_mats, int M, int accumulate, int threads);

/* -------------------------------------------------------- backend_cpu.c */

/* The ops table: a backend is the CPU's when its ops are these. */
extern const be_ops cpu_backend_ops;
/* Seconds on the monotonic clock (the split's and the classifier's timing). */
double cpu_now_s(void);

/* ----------------------------------------------------------- cpu_build.c */

/* Frees everything cb owns, and cb; NULL is a no-op. */
void cpu_destroy(backend *b);

#endif
