/* model.h - a Llama-family model: hyperparameters, typed weight views, tokenizer.
 *
 * Two file formats load into the same struct:
 *  - GGUF v2/v3, architecture "llama" (gguf.h describes the container);
 *  - the llama2.c checkpoint (seven int32 header fields, then float32 tensors)
 *    with its separate tokenizer file.
 * The format is detected from the first four bytes ("GGUF").
 *
 * Weights stay in their stored type (f32, f16, bf16, q8_0) inside a read-only
 * memory mapping; each backend converts them to what it computes with. Every
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

#include "tokenizer.h"

typedef struct model_config {
    int dim;         /* residual stream width */
    int hidden_dim;  /* FFN inner width */
    int n_layers;    /* transformer blocks */
    int n_heads;     /* query heads */
    int n_kv_heads;  /* key/value heads; n_heads % n_kv_heads == 0 (GQA) */
    int head_dim;    /* dim / n_heads */
    int vocab_size;  /* rows of the embedding and the classifier */
    int seq_len;     /* context length the model was trained for */
    float norm_eps;  /* RMSNorm epsilon */
    float rope_theta;/* RoPE base; rotation of adjacent pairs (i, i+1) */
} model_config;

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
} model_layer;

/* The nine tensors of a layer, for code that visits each of them. */
#define MODEL_LAYER_TENSORS 9
static inline void model_layer_list(const model_layer *l, const model_tensor *t[MODEL_LAYER_TENSORS]) {
    t[0] = &l->attn_norm; t[1] = &l->wq; t[2] = &l->wk; t[3] = &l->wv; t[4] = &l->wo;
    t[5] = &l->ffn_norm; t[6] = &l->w1; t[7] = &l->w2; t[8] = &l->w3;
}

enum { MODEL_FMT_LLAMA2C = 1, MODEL_FMT_GGUF = 2 };

typedef struct model {
    model_config cfg;
    int format;              /* MODEL_FMT_* */
    int tied;                /* classifier shares the token embedding */
    model_tensor tok_emb;    /* (vocab_size, dim) */
    model_tensor out_norm;   /* (dim) */
    model_tensor wcls;       /* (vocab_size, dim); == tok_emb when tied */
    model_layer *layers;     /* (n_layers) */
    tokenizer *tok;          /* owned */
    char name[64];           /* general.name, or the file's base name */
    char fingerprint[17];    /* 16 hex digits identifying config + weights */
    int stop_on_bos;         /* stories are separated by BOS: stop on it too */
    /* private */
    void *map_;
    size_t map_len_;
    void *gguf_;             /* gguf_file* for GGUF models */
} model;

/* Load a model. tokenizer_path is required for llama2.c checkpoints and
 * ignored (may be NULL) for GGUF, whose tokenizer is inside the file.
 * Returns 0 and sets *out, or a CK_E* code with a sentence in err. */
int model_load(const char *path, const char *tokenizer_path, model **out,
               char *err, size_t errlen);
void model_free(model *m);

/* Weight bytes one forward step reads when every weight is read once in its
 * stored type (the numerator of a bandwidth roofline). */
uint64_t model_weight_bytes(const model *m);
/* Parameter count (elements of every weight tensor). */
uint64_t model_n_params(const model *m);

/* Validate a config: positive sizes, divisibility, limits that keep every
 * size computation inside int and size_t. Fills err on failure. */
int model_config_check(const model_config *c, char *err, size_t errlen);

#endif
