/* convert.h - write models as GGUF: conversion of a loaded model, and
 * synthetic random-weight models of any shape.
 *
 * The GGUF written is what llama.cpp-style readers expect for architecture
 * "llama": the llama.* hyperparameters, token_embd / blk.N.* / output_norm /
 * output tensors with ne[0] = input features, norms in f32, and the
 * tokenizer inside (tokenizer.ggml.model "llama", pieces with U+2581 for the
 * space, scores, token types, BOS/EOS/UNK ids). */
#ifndef CK_CONVERT_H
#define CK_CONVERT_H
#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Write m as GGUF with weight matrices in `type` (QUANT_F32, QUANT_F16,
 * QUANT_BF16 or QUANT_Q8_0). A matrix whose rows are not a multiple of the
 * type's block (q8_0: 32) is written in f16 instead, as llama.cpp does.
 * Returns 0 or CK_E* with err filled. */
int convert_write_gguf(const model *m, int type, const char *path, char *err, size_t errlen);

typedef struct synth_params {
    int dim, n_layers, n_heads, n_kv_heads, hidden_dim, vocab_size, ctx;
    int type;       /* QUANT_* of the weight matrices */
    uint64_t seed;
    float rope_theta;
} synth_params;

/* A random-weight Llama of the given shape, its vocabulary made of the
 * control pieces, 256 byte pieces (so any text round-trips), printable
 * characters, then letter n-grams up to vocab_size. Returns 0 or CK_E*. */
int convert_synth(const synth_params *p, const char *path, char *err, size_t errlen);

#endif
