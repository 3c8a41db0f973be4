/* cpu_layer.h - the CPU forward pass's layer kinds: one interface, one file
 * each (private to engine/cpu/).
 *
 * A layer of the model is a sequence of blocks that the architecture table
 * names (arch.h, arch_info.blocks: attention, then the dense feed-forward
 * or the mixture of experts). Each block kind is a
 * cpu_layer_kind: its own file computes it, reading the residual stream
 * cb->x of the span's tokens and adding its output back into it. The step
 * (backend_cpu.c) calls, for each layer, each kind's forward in the table's
 * order; before the layers, each kind's prepare once per batch.
 *
 * Adding a kind: a file cpu_layer_<kind>.c with its cpu_layer_kind, an
 * ARCH_BLOCK_* for it, and a line in cpu_layer_for (backend_cpu.c). Its
 * weights go in cpu_layer (cpu_backend.h) and cpu_build.c.
 *
 * Around the layers, cpu_layer_norm.c holds the normalisation, the token
 * embedding and the classifier. */
#ifndef CK_CPU_LAYER_H
#define CK_CPU_LAYER_H
#include "cpu_backend.h"

/* The rows a kind computes: tokens [i0, i1) of the batch, layer l. */
typedef struct cpu_span {
    const be_batch *bt;
    int l;            /* the layer */
    int i0, i1;       /* the tokens: their rows of every activation buffer */
    int threads;      /* how many the products and attention may wake; 1 inside a
                         token-split region, where the calling thread does it all */
    int slot;         /* the scratch slot (of cb->scores, the attention inputs) to use when
                         threads == 1 */
    float mass_scale; /* attention mass a block receives is scaled by it (1 / (layers x heads)) */
} cpu_span;

typedef struct cpu_layer_kind {
    const char *name; /* as arch_block_name gives it */
    /* Once per batch, before any layer (optional: NULL): what every layer
     * of this kind shares for the batch (RoPE tables, each sequence's
     * resident blocks). One thread; allocates nothing. */
    void (*prepare)(cpu_backend *cb, const be_batch *bt);
    /* The span's tokens through this block of layer s->l. */
    void (*forward)(cpu_backend *cb, const cpu_span *s);
} cpu_layer_kind;

extern const cpu_layer_kind cpu_layer_attn;      /* cpu_layer_attn.c */
extern const cpu_layer_kind cpu_layer_ffn;       /* cpu_layer_ffn.c */
extern const cpu_layer_kind cpu_layer_moe;       /* cpu_layer_moe.c */
extern const cpu_layer_kind cpu_layer_shortconv; /* cpu_layer_shortconv.c */
extern const cpu_layer_kind cpu_layer_mamba2;    /* cpu_layer_mamba2.c */

/* A layer whose weights have no block of a kind is skipped by that kind:
 * lfm2's layers are attention or short convolution, each. */

/* Whether the batch's sequences may run their recurrent layers: distinct
 * state slots in range, each sequence's tokens at consecutive positions
 * starting at 0 or at its slot's next position (cpu_layer_shortconv.c).
 * CK_OK, or CK_EINVAL; CK_OK in a model without recurrent layers. */
int cpu_shortconv_check(cpu_backend *cb, const be_batch *bt);
/* Once a batch, after the check, by the recurrent kind of the model (the
 * short-convolution or the Mamba2 one): fresh sequences' slots to zero,
 * and every slot's next position. */
void cpu_state_prepare(cpu_backend *cb, const be_batch *bt);

/* The kind that computes an ARCH_BLOCK_*, or NULL: none (backend_cpu.c). */
const cpu_layer_kind *cpu_layer_for(int block);

/* -------------------------------------------------------- cpu_layer_ffn.c */

/* h (M, F) = SwiGLU(x . w1^T, x . w3^T) for M rows of x (K = w1's k), F =
 * w1's n; h13 (M, 2F) scratch; row0 the batch row of x's first row (its
 * quantized copy's). The dense feed-forward's, and each expert's. */
void cpu_ffn_swiglu(cpu_backend *cb, float *h, float *h13, const float *x, int row0, const cpu_mat *w1,
                    const cpu_mat *w3, int M, int threads);

/* An expert's gated activation when it is not the plain SwiGLU
 * (cpu_layer_moe.c): fn turns columns [n0, n1) of one row's gate g and up
 * u (F each, writable: biases are added in place) into h's, with the
 * arguments in the struct (the expert's biases, the activation's
 * constants). */
typedef struct cpu_glu cpu_glu;
struct cpu_glu {
    void (*fn)(const cpu_glu *glu, float *h, float *g, float *u, int n0, int n1);
    const float *gate_b, *up_b; /* (F) each, or NULL */
    float alpha, limit;
};

/* ------------------------------------------------------- cpu_layer_norm.c */

/* llama2.c's rmsnorm, operation for operation: o = w * x / rms(x). */
void cpu_rmsnorm(float *o, const float *x, const float *w, int n, float eps);
/* The token embedding's rows of the batch's tokens into cb->x (gemma4:
 * times sqrt(dim), then its per-layer inputs into cb->ple). */
void cpu_embed(cpu_backend *cb, const be_batch *bt);
/* gemma4's per-layer embedding of layer l on rows [i0, i0 + M) at the end
 * of the layer: x += RMSNorm(proj . (gelu(gate . x) * ple_l)); none when
 * the model has none. */
void cpu_ple_apply(cpu_backend *cb, int l, int i0, int M, int threads);
/* The final norm of tokens [i0, i1) that have an output row, into xo (and
 * its quantized form for a quantized classifier). */
void cpu_out_norm(cpu_backend *cb, const be_batch *bt, int i0, int i1);
/* Whether the classifier of n_out rows is cut by the learnt shares in a
 * token split's region (cpu_classify_cuts, cpu_classify_part) rather than
 * shared on the team (cpu_classify). */
int cpu_classify_splits(const cpu_backend *cb, int n_out);
void cpu_classify_cuts(cpu_backend *cb);
/* Thread t's panels, [pcut[t], pcut[t + 1]), timed into cls_s[t]. */
void cpu_classify_part(cpu_backend *cb, float *logits, int n_out, int t);
/* logits (n_out, vocab) = xo . wcls^T on the team. */
void cpu_classify(cpu_backend *cb, float *logits, int n_out);

#endif
