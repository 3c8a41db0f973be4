/* qblock.h - the byte layouts of ggml's quantized blocks, as GGUF files
 * store them (little-endian, packed, no padding). One place for them: the
 * dequantizers (quant.c), the CPU dot products (cpu_q*.c) and the CUDA
 * kernels all read these structs.
 *
 * Two block sizes: 32 elements for the "legacy" types, IQ4_NL and MXFP4, 256 (a
 * "super-block", QBLOCK_K) for the K-quants and IQ4_XS, whose sub-blocks of
 * 16 or 32 elements carry 4- to 8-bit scales quantized against the
 * super-block's f16 scale(s). Scales named d/dmin/m are IEEE binary16,
 * stored as uint16_t (quant_f16_to_f32 reads them); MXFP4's scale is one
 * E8M0 byte, a bare power of two (qblock_e8m0_half_bits).
 *
 * Activations: a weight type is multiplied with activations quantized to the
 * type's partner (qblock_q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, qblock_q8_1 for
 * Q4_1/Q5_1, qblock_q8_K for the K-quants and IQ4_XS), as llama.cpp does, so
 * the rounding of the products is the same as the oracle's.
 *
 * The _Static_asserts hold every size to the GGUF format's. */
#ifndef CK_QBLOCK_H
#define CK_QBLOCK_H
#include <stdint.h>

#define QBLOCK_32 32       /* elements of a legacy / IQ4_NL / MXFP4 block */
#define QBLOCK_K 256       /* elements of a K-quant / IQ4_XS super-block */
#define QBLOCK_K_SCALES 12 /* bytes of the packed 6-bit scales of Q3_K/Q4_K/Q5_K */

/* ggml type ids (GGUF tensor info "type"). Only those confkv knows. */
enum qblock_type {
    QB_F32 = 0,
    QB_F16 = 1,
    QB_Q4_0 = 2,
    QB_Q4_1 = 3,
    QB_Q5_0 = 6,
    QB_Q5_1 = 7,
    QB_Q8_0 = 8,
    QB_Q8_1 = 9,
    QB_Q2_K = 10,
    QB_Q3_K = 11,
    QB_Q4_K = 12,
    QB_Q5_K = 13,
    QB_Q6_K = 14,
    QB_Q8_K = 15,
    QB_IQ4_NL = 20,
    QB_IQ4_XS = 23,
    QB_BF16 = 30,
    QB_MXFP4 = 39,
};

/* C11 and C++ (the CUDA kernels include this file) spell it differently. */
#ifdef __cplusplus
#define QBLOCK_ASSERT(c, m) static_assert(c, m)
#else
#define QBLOCK_ASSERT(c, m) _Static_assert(c, m)
#endif

#pragma pack(push, 1)
/* x = d * (q - 8), q the 4-bit nibble: low nibbles are elements 0..15,
 * high nibbles 16..31. */
typedef struct qblock_q4_0 {
    uint16_t d;
    uint8_t qs[QBLOCK_32 / 2];
} qblock_q4_0;
/* x = d * q + m */
typedef struct qblock_q4_1 {
    uint16_t d, m;
    uint8_t qs[QBLOCK_32 / 2];
} qblock_q4_1;
/* 5-bit q = nibble | (bit j of qh) << 4; x = d * (q - 16) */
typedef struct qblock_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QBLOCK_32 / 2];
} qblock_q5_0;
/* x = d * q + m */
typedef struct qblock_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[QBLOCK_32 / 2];
} qblock_q5_1;
/* x = d * q */
typedef struct qblock_q8_0 {
    uint16_t d;
    int8_t qs[QBLOCK_32];
} qblock_q8_0;
/* activations for Q4_1/Q5_1: s = d * sum(qs) */
typedef struct qblock_q8_1 {
    uint16_t d, s;
    int8_t qs[QBLOCK_32];
} qblock_q8_1;
/* 16 sub-blocks of 16: scales[i] = 4-bit scale | 4-bit min << 4 */
typedef struct qblock_q2_K {
    uint8_t scales[QBLOCK_K / 16];
    uint8_t qs[QBLOCK_K / 4];
    uint16_t d, dmin;
} qblock_q2_K;
/* 16 sub-blocks of 16: 2 low bits in qs, the high bit in hmask, 6-bit
 * signed scales (offset 32) packed in 12 bytes */
typedef struct qblock_q3_K {
    uint8_t hmask[QBLOCK_K / 8];
    uint8_t qs[QBLOCK_K / 4];
    uint8_t scales[QBLOCK_K_SCALES];
    uint16_t d;
} qblock_q3_K;
/* 8 sub-blocks of 32: 6-bit scales and mins packed in 12 bytes */
typedef struct qblock_q4_K {
    uint16_t d, dmin;
    uint8_t scales[QBLOCK_K_SCALES];
    uint8_t qs[QBLOCK_K / 2];
} qblock_q4_K;
typedef struct qblock_q5_K {
    uint16_t d, dmin;
    uint8_t scales[QBLOCK_K_SCALES];
    uint8_t qh[QBLOCK_K / 8];
    uint8_t qs[QBLOCK_K / 2];
} qblock_q5_K;
/* 16 sub-blocks of 16: 4 low bits in ql, 2 high in qh, int8 scales;
 * x = d * scale * (q - 32) */
typedef struct qblock_q6_K {
    uint8_t ql[QBLOCK_K / 2];
    uint8_t qh[QBLOCK_K / 4];
    int8_t scales[QBLOCK_K / 16];
    uint16_t d;
} qblock_q6_K;
/* activations for the K-quants and IQ4_XS: d is a float; bsums[i] = the
 * sum of qs[16 i .. 16 i + 15] */
typedef struct qblock_q8_K {
    float d;
    int8_t qs[QBLOCK_K];
    int16_t bsums[QBLOCK_K / 16];
} qblock_q8_K;
/* x = d * kvalues_iq4nl[nibble] (non-linear 16-entry table) */
typedef struct qblock_iq4_nl {
    uint16_t d;
    uint8_t qs[QBLOCK_32 / 2];
} qblock_iq4_nl;
/* 8 sub-blocks of 32 with 6-bit scales (offset 32): 4 low bits in
 * scales_l, 2 high bits in scales_h */
typedef struct qblock_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QBLOCK_K / 64];
    uint8_t qs[QBLOCK_K / 2];
} qblock_iq4_xs;
/* OCP microscaling FP4 (gpt-oss's expert weights): x = 2^(e - 128) *
 * qblock_mxfp4_values[nibble], the nibbles laid out as Q4_0's (low: elements
 * 0..15, high: 16..31). The table holds the E2M1 values doubled (integers),
 * so the scale is halved: 2^(e - 127) / 2. */
typedef struct qblock_mxfp4 {
    uint8_t e; /* E8M0: a biased exponent, no sign, no mantissa */
    uint8_t qs[QBLOCK_32 / 2];
} qblock_mxfp4;
/* Not a file format: 8 rows' Q4_0 blocks of the same 32 columns,
 * interleaved at load by cpu_qdot_repack8 so that a product has one row a
 * 32-bit lane (cpu_qdot.h). d[r] is row r's scale; qs[32 h + 4 r + b] is
 * row r's qs[4 h + b] (h 0..3, b 0..3), so the low nibbles of qs[32 h ..
 * 32 h + 31] are elements 4h..4h+3 of each row, the high ones 16+4h... The
 * same 144 bytes as the 8 blocks. */
typedef struct qblock_q4_0x8 {
    uint16_t d[8];
    uint8_t qs[8 * QBLOCK_32 / 2];
} qblock_q4_0x8;
/* Likewise 8 rows' Q8_0 blocks: qs[32 g + 4 r + b] is row r's qs[4 g + b]
 * (g 0..7, b 0..3). 272 bytes, as the 8 blocks. */
typedef struct qblock_q8_0x8 {
    uint16_t d[8];
    int8_t qs[8 * QBLOCK_32];
} qblock_q8_0x8;
/* Likewise 8 rows' MXFP4 blocks: e[r] is row r's E8M0 scale, qs as
 * qblock_q4_0x8's (qs[32 h + 4 r + b] is row r's qs[4 h + b]). 136 bytes,
 * as the 8 blocks. */
typedef struct qblock_mxfp4x8 {
    uint8_t e[8];
    uint8_t qs[8 * QBLOCK_32 / 2];
} qblock_mxfp4x8;
/* 8 rows' Q4_K super-blocks, their 6-bit scales and mins unpacked to bytes
 * (a product then reads them as vectors instead of unpacking 12 bytes a
 * row): sc[s][r] the scale of sub-block s (of 32 elements) of row r;
 * m[p][r][k] the min of sub-block 2p + k; qs[32 (8 j + h) + 4 r + b] is row
 * r's qs[32 j + 4 h + b] (j 0..3, h 0..7, b 0..3). 1184 bytes against the
 * 8 blocks' 1152 (2.8 % more). */
typedef struct qblock_q4_Kx8 {
    uint16_t d[8], dmin[8];
    uint8_t sc[8][8];
    uint8_t m[4][8][2];
    uint8_t qs[8 * QBLOCK_K / 2];
} qblock_q4_Kx8;
/* 8 rows' Q6_K super-blocks. d[r] is row r's scale; sc[p][r][k] row r's
 * int8 scale of sub-block 2p + k (of 16 elements), so one widening load
 * gives each row's pair (a madd against the activations' bsums) and a byte
 * shuffle each scale doubled in its lane. The 6-bit quants q (0..63, before
 * the -32) are regrouped, not split 4 + 2 as the file splits them: for
 * sub-block t and row r, element 16 t + 4 w + b (w 0..2, b 0..3) is the low
 * 6 bits of qs[96 t + 32 w + 4 r + b], and element 16 t + 12 + b has bits
 * 2w, 2w + 1 of its q in the top 2 bits of that same byte. A sub-block's 4
 * vectors of quants are then 3 loads and 11 bit operations for 8 rows (the
 * file's split takes 17 for one row's 4). 1680 bytes, as the 8 blocks. */
typedef struct qblock_q6_Kx8 {
    uint16_t d[8];
    int8_t sc[8][8][2];
    uint8_t qs[8 * QBLOCK_K * 3 / 4];
} qblock_q6_Kx8;
#pragma pack(pop)

QBLOCK_ASSERT(sizeof(qblock_q6_Kx8) == 8 * 210, "q6_Kx8");
QBLOCK_ASSERT(sizeof(qblock_q4_0x8) == 8 * 18, "q4_0x8");
QBLOCK_ASSERT(sizeof(qblock_q8_0x8) == 8 * 34, "q8_0x8");
QBLOCK_ASSERT(sizeof(qblock_mxfp4x8) == 8 * 17, "mxfp4x8");
QBLOCK_ASSERT(sizeof(qblock_q4_Kx8) == 1184, "q4_Kx8");
QBLOCK_ASSERT(sizeof(qblock_q4_0) == 18, "q4_0");
QBLOCK_ASSERT(sizeof(qblock_q4_1) == 20, "q4_1");
QBLOCK_ASSERT(sizeof(qblock_q5_0) == 22, "q5_0");
QBLOCK_ASSERT(sizeof(qblock_q5_1) == 24, "q5_1");
QBLOCK_ASSERT(sizeof(qblock_q8_0) == 34, "q8_0");
QBLOCK_ASSERT(sizeof(qblock_q8_1) == 36, "q8_1");
QBLOCK_ASSERT(sizeof(qblock_q2_K) == 84, "q2_K");
QBLOCK_ASSERT(sizeof(qblock_q3_K) == 110, "q3_K");
QBLOCK_ASSERT(sizeof(qblock_q4_K) == 144, "q4_K");
QBLOCK_ASSERT(sizeof(qblock_q5_K) == 176, "q5_K");
QBLOCK_ASSERT(sizeof(qblock_q6_K) == 210, "q6_K");
QBLOCK_ASSERT(sizeof(qblock_q8_K) == 292, "q8_K");
QBLOCK_ASSERT(sizeof(qblock_iq4_nl) == 18, "iq4_nl");
QBLOCK_ASSERT(sizeof(qblock_iq4_xs) == 136, "iq4_xs");
QBLOCK_ASSERT(sizeof(qblock_mxfp4) == 17, "mxfp4");

/* IQ4_NL / IQ4_XS's 16 levels (the GGUF format's table). */
static const int8_t qblock_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

/* MXFP4's 16 levels: the E2M1 codes' values {0, 0.5, 1, 1.5, 2, 3, 4, 6}
 * (sign bit 3: the same negated, -0 as 0) doubled, as ggml's kvalues_mxfp4. */
static const int8_t qblock_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The bits of the f32 2^(e - 128): an E8M0 scale halved, to go with the
 * doubled levels above (ggml's ggml_e8m0_to_fp32_half). e = 0 and 1 are the
 * subnormals 2^-128 and 2^-127; 255, the format's NaN, is read as 2^127, as
 * ggml reads it. Bits, not a float, so C and C++ (the CUDA kernels) share
 * it; memcpy them into a float. */
static inline uint32_t qblock_e8m0_half_bits(uint8_t e) {
    return e < 2 ? UINT32_C(0x00200000) << e : (uint32_t)(e - 1) << 23;
}

#endif
