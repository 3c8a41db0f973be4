/* quant.h - ggml tensor types and their conversions to and from f32.
 *
 * confkv reads weights stored in GGUF files (gguf.h). Each tensor has a ggml
 * type id; confkv knows these (the byte layouts of the quantized blocks are
 * in qblock.h, one struct a type):
 *
 *   id  name     block  bytes  element value (d, m: f16 scales of the block)
 *    0  f32          1      4  IEEE binary32
 *    1  f16          1      2  IEEE binary16 (half)
 *    2  q4_0        32     18  d * (q - 8), q 4 bits
 *    3  q4_1        32     20  d * q + m, q 4 bits
 *    6  q5_0        32     22  d * (q - 16), q 5 bits
 *    7  q5_1        32     24  d * q + m, q 5 bits
 *    8  q8_0        32     34  d * q, q int8
 *    9  q8_1        32     36  d * q, q int8 (activations only)
 *   10  q2_K       256     84  d * sc * q - dmin * mn, 4-bit sc/mn per 16
 *   11  q3_K       256    110  d * (sc - 32) * (q - 4), 6-bit sc per 16
 *   12  q4_K       256    144  d * sc * q - dmin * mn, 6-bit sc/mn per 32
 *   13  q5_K       256    176  as q4_K with 5-bit q
 *   14  q6_K       256    210  d * sc * (q - 32), int8 sc per 16
 *   15  q8_K       256    292  d * q, d an f32 (activations only)
 *   20  iq4_nl      32     18  d * T[q], T the 16-level table of qblock.h
 *   23  iq4_xs     256    136  d * (sc - 32) * T[q], 6-bit sc per 32
 *   30  bf16         1      2  bfloat16: the upper 16 bits of a binary32
 *   39  mxfp4       32     17  2^(e - 128) * F[q], e an 8-bit exponent (E8M0),
 *                              F the doubled E2M1 levels of qblock.h
 *
 * Every one of them can be read (quant_to_f32); a model file may hold all but
 * the two activation types q8_1 and q8_K (quant_is_weight_type), which
 * llama.cpp never writes to a file. f32, f16, bf16, q8_0 and mxfp4 can
 * also be written (quant_from_f32); files of the other types come from
 * llama.cpp's quantizer. Any other id is "unknown" and functions taking a type return
 * CK_EUNSUPPORTED for it; quant_ggml_type_name still names the ids ggml has
 * defined, for error messages ("unsupported ggml type iq2_xxs (16)").
 *
 * The layouts are exactly ggml's, so files written by llama.cpp's tools and
 * by ours are interchangeable; q8_0 and mxfp4 quantisation give the same
 * bytes as ggml's reference quantize_row_q8_0 / quantize_row_mxfp4 (the
 * latter also checked against libggml-base), and every dequantisation gives the same
 * floats, bit for bit, as ggml's to_float (tests/llamacpp/llamacpp_dequant.c
 * checks it against libggml-base).
 *
 * Rounding: f32 -> f16 and f32 -> bf16 round to nearest, ties to even; f16
 * overflows to +-inf (IEEE), subnormals are kept, NaN stays NaN (quiet).
 * f16 -> f32 and f32 -> bf16 turn a NaN into a quiet NaN (payload kept),
 * like ggml; bf16 -> f32 keeps every bit, like ggml.
 *
 * These run when a model is loaded or converted, or once a row, not per
 * element of a product: plain loops, so the compiler can vectorise them.
 * Everything here is pure: no state, no allocation, thread-safe. */
#ifndef CK_QUANT_H
#define CK_QUANT_H
#include <stddef.h>
#include <stdint.h>

/* The ggml ids (the same values as qblock.h's QB_*). */
enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_IQ4_NL = 20,
    QUANT_IQ4_XS = 23,
    QUANT_BF16 = 30,
    QUANT_MXFP4 = 39,
};

#define QUANT_Q8_0_BLOCK 32 /* elements per q8_0 block */
#define QUANT_Q8_0_BYTES 34 /* bytes per q8_0 block: f16 d + 32 int8 */

/* Name of a type confkv knows, as ggml spells it ("f32", "q8_0", "q4_K",
 * "iq4_xs"; the table above); NULL for an unknown id. The string is static. */
const char *quant_type_name(int type);

/* ggml's name for any id ggml has defined (known to confkv or not:
 * "iq2_xxs" for 16; removed ones such as 4 are "q4_2"), for messages; NULL
 * past them. The string is static. */
const char *quant_ggml_type_name(int type);

/* 1 if a model file may hold tensors of `type` (a known type other than
 * the activation types q8_1 and q8_K), else 0. */
int quant_is_weight_type(int type);

/* 1 if quant_from_f32 can write `type` (f32, f16, bf16, q8_0, mxfp4),
 * else 0. */
int quant_can_encode(int type);

/* Type id for a name as returned by quant_type_name (case-sensitive);
 * -1 if the name is unknown or s is NULL. */
int quant_type_from_name(const char *s);

/* Elements per block: 1 for f32/f16/bf16, 32 or 256 for the block types
 * (the table above); CK_EUNSUPPORTED for an unknown type. A row's element
 * count must be a multiple of it. */
int quant_block_size(int type);

/* Bytes per block of quant_block_size(type) elements (4 for f32, 144 for
 * q4_K, ...); CK_EUNSUPPORTED for an unknown type. */
int quant_block_bytes(int type);

/* Bytes that n_elems elements of `type` take, in *out.
 * Returns 0; CK_EUNSUPPORTED for an unknown type; CK_EFORMAT if n_elems is
 * not a multiple of the block size; CK_ERANGE if the size overflows
 * uint64_t; CK_EINVAL if out is NULL. *out is untouched on error. */
int quant_row_bytes(int type, uint64_t n_elems, uint64_t *out);

/* Convert n elements stored as `type` at src into n floats at dst.
 * src may be unaligned (it usually points into a file mapping); src and dst
 * must not overlap. n must be a multiple of quant_block_size(type).
 * The floats are those of ggml's to_float for the type, bit for bit, with
 * the same order of float operations. Every byte pattern is a valid block:
 * an inf or NaN scale gives inf or NaN elements, as in ggml.
 * Returns 0; CK_EUNSUPPORTED, CK_EFORMAT as quant_row_bytes; CK_EINVAL for a
 * NULL pointer with n > 0. */
int quant_to_f32(int type, const void *src, float *dst, uint64_t n);

/* Convert n floats at src into `type` at dst (quant_row_bytes(type, n)
 * bytes; dst may be unaligned; no overlap). Only the types of
 * quant_can_encode (CK_EUNSUPPORTED for the others). For q8_0 each block
 * of 32 gets d = max|x| / 127 (stored as f16) and q = round(x / d), as ggml
 * does; every element then satisfies |x - d16 * q| <= d16 / 2 + 128 * |d - d16|.
 * For mxfp4 each block of 32 gets e = floor(log2f(max|x|)) + 125 (0 for an
 * all-zero block) and each element the nearest level F[q] * 2^(e - 128)
 * (the first of equals: +0, never -0), as ggml's quantize_row_mxfp4_ref,
 * log2f included, so the bytes are ggml's. A block whose max|x| is below
 * 2^-125 has no exponent ggml can write; ggml's float-to-uint8_t cast then
 * keeps the low byte of the (negative) integer on x86, and so does this:
 * e in 232..255, every q 0, the block reads as zeros.
 * Returns 0; the errors of quant_to_f32; and for q8_0 and mxfp4 CK_ERANGE if
 * an input is inf or NaN, for q8_0 also if a block's scale does not fit in
 * f16 (max|x| > ~8.3e6); dst then holds garbage. f16 and bf16 never fail on
 * values: they overflow to inf as IEEE does. */
int quant_from_f32(int type, const float *src, void *dst, uint64_t n);

/* Scalar half <-> float. Exact for f16 -> f32; round to nearest even for
 * f32 -> f16 (see above). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);

/* Scalar bfloat16 <-> float (f32 -> bf16 rounds to nearest even). */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

#endif
