/* quant.h - ggml tensor types and their conversions to and from f32.
 *
 * confkv reads weights stored in GGUF files (gguf.h). Each tensor has a ggml
 * type id; we know four of them:
 *
 *   id  name   element layout (little-endian)
 *    0  f32    IEEE binary32
 *    1  f16    IEEE binary16 (half)
 *    8  q8_0   blocks of 32 elements, 34 bytes each:
 *              uint16 d (an f16 scale), then int8 q[32]; x[i] = d * q[i]
 *   30  bf16   bfloat16: the upper 16 bits of a binary32
 *
 * Any other id is "unknown" and functions taking a type return
 * CK_EUNSUPPORTED for it. The layouts are exactly ggml's, so files written by
 * llama.cpp's tools and by ours are interchangeable, and q8_0 quantisation
 * gives the same bytes as ggml's reference quantize_row_q8_0.
 *
 * Rounding: f32 -> f16 and f32 -> bf16 round to nearest, ties to even; f16
 * overflows to +-inf (IEEE), subnormals are kept, NaN stays NaN (quiet).
 * f32 -> bf16 turns a NaN into a quiet NaN, like ggml.
 *
 * These run when a model is loaded or converted, not per token, but are
 * plain loops without per-element indirection so the compiler can vectorise
 * them. Everything here is pure: no state, no allocation, thread-safe. */
#ifndef CK_QUANT_H
#define CK_QUANT_H
#include <stddef.h>
#include <stdint.h>

enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q8_0 = 8,
    QUANT_BF16 = 30,
};

#define QUANT_Q8_0_BLOCK 32   /* elements per q8_0 block */
#define QUANT_Q8_0_BYTES 34   /* bytes per q8_0 block: f16 d + 32 int8 */

/* Name of a type ("f32", "f16", "q8_0", "bf16"); NULL for an unknown id.
 * The string is static. */
const char *quant_type_name(int type);

/* Type id for a name as returned by quant_type_name (case-sensitive);
 * -1 if the name is unknown or s is NULL. */
int quant_type_from_name(const char *s);

/* Elements per block: 1 for f32/f16/bf16, 32 for q8_0; CK_EUNSUPPORTED for
 * an unknown type. A row's element count must be a multiple of it. */
int quant_block_size(int type);

/* Bytes that n_elems elements of `type` take, in *out.
 * Returns 0; CK_EUNSUPPORTED for an unknown type; CK_EFORMAT if n_elems is
 * not a multiple of the block size; CK_ERANGE if the size overflows
 * uint64_t; CK_EINVAL if out is NULL. *out is untouched on error. */
int quant_row_bytes(int type, uint64_t n_elems, uint64_t *out);

/* Convert n elements stored as `type` at src into n floats at dst.
 * src may be unaligned (it usually points into a file mapping); src and dst
 * must not overlap. n must be a multiple of quant_block_size(type).
 * Returns 0; CK_EUNSUPPORTED, CK_EFORMAT as quant_row_bytes; CK_EINVAL for a
 * NULL pointer with n > 0. */
int quant_to_f32(int type, const void *src, float *dst, uint64_t n);

/* Convert n floats at src into `type` at dst (quant_row_bytes(type, n)
 * bytes; dst may be unaligned; no overlap). For q8_0 each block of 32 gets
 * d = max|x| / 127 (stored as f16) and q = round(x / d), as ggml does; every
 * element then satisfies |x - d16 * q| <= d16 / 2 + 128 * |d - d16|.
 * Returns 0; the errors of quant_to_f32; and for q8_0 CK_ERANGE if an input
 * is inf or NaN or a block's scale does not fit in f16 (max|x| > ~8.3e6),
 * in which case dst holds garbage. f16 and bf16 never fail on values: they
 * overflow to inf as IEEE does. */
int quant_from_f32(int type, const float *src, void *dst, uint64_t n);

/* Scalar half <-> float. Exact for f16 -> f32; round to nearest even for
 * f32 -> f16 (see above). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);

/* Scalar bfloat16 <-> float (f32 -> bf16 rounds to nearest even). */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

#endif
