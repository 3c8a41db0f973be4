/* backend.h - where the forward pass runs: the CPU reference, or CUDA.
 *
 * A backend is an opaque handle plus a table of functions (as ggml's
 * backends). It owns a copy of the weights in the form it computes with, the
 * KV block storage (kv.h gives the layout) and every activation buffer, all
 * sized at creation from be_options: forward() allocates nothing.
 *
 * A batch is a plain struct of parallel arrays: any mix of prefill chunks and
 * decode tokens from many sequences. For each token the backend writes its K
 * and V into the sequence's hot block for its position (the caller reserved
 * it), then attends over every hot block of that sequence at positions <= its
 * own. Blocks marked KV_NONE are skipped: that is how a policy's smaller
 * cache takes effect, with no copy.
 *
 * Threading: one thread calls into a backend at a time. */
#ifndef CK_BACKEND_H
#define CK_BACKEND_H
#include <stddef.h>
#include <stdint.h>

#include "eng_types.h"
#include "model.h"

/* One sequence as the forward pass sees it. */
typedef struct be_seq_view {
    const int32_t *blocks; /* (n_blocks) pool block of each logical block, KV_NONE = not hot */
    int n_blocks;
    const int32_t *blocks8; /* (n_blocks) or NULL: int8 block (kvq.h layout) of a logical
                              block that is hot in compressed form, KV_NONE otherwise;
                              used where blocks[j] is KV_NONE */
    float *mass;            /* (n_blocks) or NULL: += attention mass each logical block
                              received, averaged over layers and heads, summed over this
                              sequence's query tokens in the batch (so each adds 1) */
    int state;              /* its recurrent state slot, [0, be_options.n_state_slots), in a
                               model with recurrent layers (model_state_floats > 0): a
                               sequence whose first token of the batch is at position 0
                               starts from a zero state; any other must continue exactly
                               where the slot's last batch ended, else forward returns
                               CK_EINVAL. Sequences of one batch hold distinct slots.
                               Ignored in a model without recurrent layers. */
} be_seq_view;

typedef struct be_batch {
    int n_tokens;
    const int32_t *token;   /* (n_tokens) token ids */
    const int32_t *pos;     /* (n_tokens) absolute positions */
    const int32_t *seq;     /* (n_tokens) index into seqs */
    const int32_t *out_row; /* (n_tokens) row of the logits output, or -1 for none */
    int n_seqs;
    const be_seq_view *seqs; /* (n_seqs) */
    int n_out;               /* logits rows the caller wants (max out_row + 1) */
} be_batch;

typedef struct be_options {
    int max_batch_tokens; /* largest n_tokens forward() will be given */
    int n_kv_blocks;      /* hot KV pool size in blocks */
    int block_size;       /* tokens per block */
    int n_threads;        /* CPU threads (0 = all cores) */
    int max_ctx;          /* longest sequence (<= model seq_len; 0 = be_default_ctx) */
    int n_kv8_blocks;     /* int8 KV pool size in blocks (0 = none) */
    int n_state_slots;    /* recurrent state slots (model_state_floats each) for a model with
                             recurrent layers: the most sequences that may be under way at
                             once (0 = 1); ignored in a model without */
} be_options;

/* The context a backend is sized for when be_options.max_ctx is 0: the
 * model's, but at most BE_DEFAULT_MAX_CTX tokens. Why a cap: a file's header
 * may claim any context up to model.c's limit (2^20) whatever its weights
 * hold, and the attention scratch is n_heads x max_ctx floats a thread: 4
 * GiB a thread for 1024 heads at 2^20. A longer context must be asked for
 * (eng_config.max_context, the `max_context` key, --max-context). */
#define BE_DEFAULT_MAX_CTX 8192
static inline int be_default_ctx(const model *m) {
    return m->cfg.seq_len < BE_DEFAULT_MAX_CTX ? m->cfg.seq_len : BE_DEFAULT_MAX_CTX;
}

/* be_memory (what a backend will hold) is in eng_types.h: the engine's
 * public memory plan embeds it. */

typedef struct backend backend;

typedef struct be_ops {
    const char *name;
    /* Run the batch. logits: (n_out, vocab_size) floats in host memory.
     * Returns 0, CK_EINVAL for a batch that breaks the options or the KV
     * layout (token id, position, block), CK_EBACKEND on device failure. */
    int (*forward)(backend *b, const be_batch *batch, float *logits);
    /* Copy one KV block (kv_block_bytes) out to / in from host memory. */
    int (*kv_read)(backend *b, int block, float *dst);
    int (*kv_write)(backend *b, int block, const float *src);
    /* Bytes of device/host memory this backend holds (weights, KV, work). */
    size_t (*memory_bytes)(const backend *b);
    void (*destroy)(backend *b);
    /* (optional, NULL when absent) int8 hot blocks (kvq.h): compress f32 block `block`
     * (n_tokens written) into int8 block `block8`; expand it back; copy an
     * int8 block out to / in from host memory (kvq_block_bytes). */
    int (*kv_compress)(backend *b, int block, int n_tokens, int block8);
    int (*kv_expand)(backend *b, int block8, int block);
    int (*kv8_read)(backend *b, int block8, void *dst);
    int (*kv8_write)(backend *b, int block8, const void *src);
    /* (optional, NULL = the mover loops over kv_read / kv_write) Copy n f32
     * blocks at once, dst/src holding them one after another (n *
     * kv_block_floats): a device backend can queue a whole plan's copies on
     * one stream (mv.h). Same returns as kv_read / kv_write. */
    int (*kv_read_batch)(backend *b, const int32_t *blocks, int n, float *dst);
    int (*kv_write_batch)(backend *b, const int32_t *blocks, int n, const float *src);
} be_ops;

struct backend {
    const be_ops *ops;
    const model *m;
    be_options opt;
    size_t kv_block_floats; /* n_layers * 2 * block_size * kv_dim */
    size_t kv8_block_bytes; /* kvq_block_bytes: one int8 block, scales included */
};

/* Create the CPU backend (the reference). f32/f16/bf16 weights are
 * converted to packed f32 at load; quantized ones are computed on in the
 * model's mapping, in their own bytes (see engine/cpu/cpu_build.c for why). Kernels
 * are chosen from the CPU's features, or CONFKV_CPU_KERNELS
 * (cpu_features.h: CK_EINVAL / CK_EUNSUPPORTED for a bad or absent level).
 * Returns 0 or CK_E* with err filled. The model must outlive the backend. */
int be_cpu_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen);

/* Bytes of weights one CPU forward step reads whatever its batch: every
 * matrix as it is computed on (quantized: the file's bytes; f32/f16/bf16:
 * 4 bytes a weight), the vectors in f32; not the embedding (a gather). The
 * numerator of `confkv bench`'s bandwidth roofline. */
uint64_t be_cpu_step_bytes(const model *m);

/* The int8 roofline of a prefill on this CPU at ISA level isa (the caller
 * checked that the CPU runs it): *macs_per_token = the multiply-adds of one
 * token's dense layer products whose weight type has register tiles
 * (cpu_qgemm.h: Q4_0, Q4_K, Q6_K from AVX-512, Q8_0 with VNNI; not the
 * classifier, not the experts); *macs_per_s = what `threads` threads run
 * in the tiles of the type that holds most of those, on operands in L1,
 * for about `seconds`. Both 0 when no matrix has tiles (an f32 model, a
 * CPU below AVX-512). The denominator of `confkv bench`'s compute_fraction.
 * Returns 0. */
int be_cpu_int8_peak(const model *m, int isa, int threads, double seconds, double *macs_per_s,
                     double *macs_per_token);

/* A line naming the kernels a CPU backend runs, e.g. "avx2 (f32 avx2,
 * attention general, q4_K avx2+rows, q6_K avx2+rows)", into buf; another
 * backend's name otherwise. Returns snprintf's count. */
int be_cpu_kernels(const backend *b, char *buf, size_t len);

/* Threads a CPU backend runs when be_options.n_threads is 0: every CPU this
 * process may use (omp_get_num_procs: its affinity mask at start-up). */
int be_cpu_default_threads(void);

/* The CPU backend's plan for (m, o): the bytes be_cpu_new holds (and
 * memory_bytes then reports), computed without allocating: its allocations
 * plus the mapped bytes of the quantized weights it computes on in place
 * (be_memory.weights has both). A transient f32 copy of the largest f32
 * matrix during the load comes on top. Returns 0,
 * CK_EINVAL for options be_cpu_new refuses, CK_ERANGE when a size overflows
 * size_t. The CUDA backend holds about as much, in device memory. */
int be_cpu_plan(const model *m, const be_options *o, be_memory *p);

/* Create a backend by name: "cpu", "cuda" (when compiled in), or "auto"
 * (cuda when a device is present, else cpu). The CUDA backend is the shared
 * object libconfkv_cuda.so, opened on the first call that asks for it
 * (backend.c says where it is looked for; $CONFKV_CUDA_MODULE overrides)
 * and kept open; "auto" opens it only where the NVIDIA driver is installed.
 * A module that is missing or does not load is CK_EUNSUPPORTED with its
 * path and the loader's message in err ("auto": that message on stderr and
 * the CPU backend); so is a model the CUDA backend does not compute (a
 * layer kind with no CUDA kernel, qwen3moe's experts), named in err ("auto":
 * on stderr, and the CPU backend computes it). Programs that create backends from several threads at
 * once are safe: dlopen is. */
int be_new(const char *name, const model *m, const be_options *o, backend **out, char *err, size_t errlen);
/* Names of the backends compiled in, NULL-terminated. */
const char *const *be_compiled(void);

static inline void be_free(backend *b) {
    if (b) b->ops->destroy(b);
}

#endif
