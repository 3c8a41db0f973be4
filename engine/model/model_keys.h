/* model_keys.h - GGUF keys as model.c reads them (private to
 * engine/model/): an architecture's integers and floats with llama.cpp's
 * defaults, gemma4's per-layer keys, and the loader's limits. Every
 * function fills err ("<path>: ...") and returns a CK_E* code on failure. */
#ifndef CK_MODEL_KEYS_H
#define CK_MODEL_KEYS_H
#include <stddef.h>

#include "arch.h"
#include "gguf.h"
#include "model.h"

/* Limits that keep every size computation of the engine inside int range
 * and reject absurd headers before anything is allocated. */
#define MODEL_MAX_DIM (1 << 16)
#define MODEL_MAX_HIDDEN (1 << 18)
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_VOCAB (1 << 22)
#define MODEL_MAX_CTX (1 << 20)

/* key as a positive int: dflt when absent and not required. */
int model_gguf_int_key(gguf_file *f, const char *key, int required, int dflt, int *out, const char *path,
                       char *err, size_t errlen);
/* "<arch>.<suffix>" as an int (model_gguf_int_key's rules). */
int model_arch_int(gguf_file *f, const arch_info *a, const char *suffix, int required, int dflt, int *out,
                   const char *path, char *err, size_t errlen);
/* "<arch>.<suffix>" as a finite float, dflt when absent. */
int model_arch_float(gguf_file *f, const arch_info *a, const char *suffix, float dflt, float *out,
                     const char *path, char *err, size_t errlen);
/* gemma4's keys (ARCH_READS_GEMMA4) into m's config and layers (which
 * exist): per-layer head counts, the windowed layers, their head size and
 * RoPE, the soft cap, per-layer embeddings' width, shared-KV layers; what
 * the engine does not compute refused by name. Called once head_dim and
 * rope_theta are final. */
int model_gemma4_keys(gguf_file *f, const arch_info *a, model *m, const char *path, char *err, size_t errlen);

/* The keys of each feature model.c loads, into c (each fills err and
 * returns a CK_E* code; what the engine does not compute refused by name):
 * RoPE scaling; mistral3's query temperature; the experts' counts; the
 * sliding window and its pattern; lfm2's short convolution and
 * granitehybrid's Mamba2 with Granite's scalars, each with its per-layer
 * head_count_kv array (*kv_arr, *kv_type: NULL when a scalar; entry 0 is
 * a recurrent layer, model_arr_int_at reads it). */
int model_rope_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                    size_t errlen);
int model_attn_temp_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                         size_t errlen);
int model_expert_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                      size_t errlen);
int model_swa_keys(gguf_file *f, const arch_info *a, model_config *c, const char *path, char *err,
                   size_t errlen);
int model_shortconv_keys(gguf_file *f, const arch_info *a, model_config *c, const void **kv_arr, int *kv_type,
                         const char *path, char *err, size_t errlen);
int model_mamba2_keys(gguf_file *f, const arch_info *a, model_config *c, const void **kv_arr, int *kv_type,
                      const char *path, char *err, size_t errlen);
int64_t model_arr_int_at(int type, const void *data, uint64_t l);

#endif
