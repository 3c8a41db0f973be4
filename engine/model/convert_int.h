/* convert_int.h - what convert.c (GGUF export) and convert_synth.c
 * (synthetic models) share: tensor buffers kept until the writer writes,
 * adding f32 data as a tensor of a type, the hyperparameter keys, the
 * tokenizer keys, a seeded uniform fill. Private to engine/model/. */
#ifndef CK_CONVERT_INT_H
#define CK_CONVERT_INT_H
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "model.h"

/* Tensor buffers must live until gguf_writer_write: they are kept in a list
 * and freed together. */
typedef struct convert_bufs {
    void **p;
    int n, cap;
} convert_bufs;

/* Frees every buffer kept. */
void convert_bufs_free(convert_bufs *b);
/* An f32 tensor (rows x cols, cols innermost) converted to type (f16 where
 * cols is not a multiple of its block). */
int convert_add_f32(gguf_writer *w, convert_bufs *bb, const char *name, const float *src, uint64_t cols,
                    uint64_t rows, int type);
/* An expert tensor of E (rows x cols) matrices converted to type, one at a
 * time through tmp (rows * cols floats): src's expert slices, or uniform in
 * [-a, a] from *s when src is NULL; 2-D when E is 1, as ggml writes it. */
int convert_add_experts(gguf_writer *w, convert_bufs *bb, const char *name, uint64_t cols, uint64_t rows,
                        uint64_t E, int type, const model_tensor *src, float a, uint64_t *s, float *tmp);
/* The type of a model's non-expert matrices for a requested type. */
int convert_dense_type(int type, int has_experts);
/* The general.* and <arch>.* keys of c. */
int convert_write_hparams(gguf_writer *w, const model_config *c, const char *name, int type, int stop_on_bos);
/* x[0..n) uniform in [-a, a) from the seed state s (splitmix64). */
void convert_fill_uniform(float *x, uint64_t n, float a, uint64_t *s);

/* Copies every tokenizer.* key of f into w, byte for byte. */
int convert_copy_tokenizer_keys(gguf_writer *w, const gguf_file *f);

#endif
