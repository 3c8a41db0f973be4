/* quant.c - ggml tensor types and conversions (see quant.h).
 *
 * The half-precision conversions use integer operations (and one float
 * multiply that is always exact), so the result never depends on the FPU's
 * rounding mode, flush-to-zero flags or floating-point contraction. They
 * are branch-free so that the row loops vectorise: on an AVX2/AVX-512
 * machine f16 <-> f32 runs at memory speed (~0.2-0.3 ns per element);
 * q8_0 quantisation, used only when converting, is ~3 ns per element.
 * The block dequantisers are plain per-element loops written to give
 * ggml's floats bit for bit (see "dequantisation" below). */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "ck_err.h"
#include "qblock.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant.c assumes a little-endian host (GGUF data is little-endian)"
#endif

/* ------------------------------------------------------------------------
 * the type table
 * ------------------------------------------------------------------------ */

#define SAME_ID(t) ((int)QUANT_##t == (int)QB_##t)
_Static_assert(SAME_ID(F32) && SAME_ID(F16) && SAME_ID(Q4_0) && SAME_ID(Q4_1) && SAME_ID(Q5_0) &&
                   SAME_ID(Q5_1) && SAME_ID(Q8_0) && SAME_ID(Q8_1) && SAME_ID(Q2_K) && SAME_ID(Q3_K) &&
                   SAME_ID(Q4_K) && SAME_ID(Q5_K) && SAME_ID(Q6_K) && SAME_ID(Q8_K) && SAME_ID(IQ4_NL) &&
                   SAME_ID(IQ4_XS) && SAME_ID(BF16) && SAME_ID(MXFP4),
               "quant.h and qblock.h disagree on a ggml type id");
#undef SAME_ID
_Static_assert(QUANT_Q8_0_BYTES == sizeof(qblock_q8_0) && QUANT_Q8_0_BLOCK == QBLOCK_32, "q8_0");

/* One row per type confkv knows: block elements, block bytes, whether a
 * file may hold it (weights) and whether quant_from_f32 writes it. */
static const struct quant_info {
    int type;
    const char *name;
    int block, bytes;
    unsigned weight : 1, encode : 1;
} quant_types[] = {
    {QUANT_F32, "f32", 1, 4, 1, 1},
    {QUANT_F16, "f16", 1, 2, 1, 1},
    {QUANT_Q4_0, "q4_0", QBLOCK_32, sizeof(qblock_q4_0), 1, 0},
    {QUANT_Q4_1, "q4_1", QBLOCK_32, sizeof(qblock_q4_1), 1, 0},
    {QUANT_Q5_0, "q5_0", QBLOCK_32, sizeof(qblock_q5_0), 1, 0},
    {QUANT_Q5_1, "q5_1", QBLOCK_32, sizeof(qblock_q5_1), 1, 0},
    {QUANT_Q8_0, "q8_0", QBLOCK_32, sizeof(qblock_q8_0), 1, 1},
    {QUANT_Q8_1, "q8_1", QBLOCK_32, sizeof(qblock_q8_1), 0, 0},
    {QUANT_Q2_K, "q2_K", QBLOCK_K, sizeof(qblock_q2_K), 1, 0},
    {QUANT_Q3_K, "q3_K", QBLOCK_K, sizeof(qblock_q3_K), 1, 0},
    {QUANT_Q4_K, "q4_K", QBLOCK_K, sizeof(qblock_q4_K), 1, 0},
    {QUANT_Q5_K, "q5_K", QBLOCK_K, sizeof(qblock_q5_K), 1, 0},
    {QUANT_Q6_K, "q6_K", QBLOCK_K, sizeof(qblock_q6_K), 1, 0},
    {QUANT_Q8_K, "q8_K", QBLOCK_K, sizeof(qblock_q8_K), 0, 0},
    {QUANT_IQ4_NL, "iq4_nl", QBLOCK_32, sizeof(qblock_iq4_nl), 1, 0},
    {QUANT_IQ4_XS, "iq4_xs", QBLOCK_K, sizeof(qblock_iq4_xs), 1, 0},
    {QUANT_BF16, "bf16", 1, 2, 1, 1},
    {QUANT_MXFP4, "mxfp4", QBLOCK_32, sizeof(qblock_mxfp4), 1, 1},
};

static const struct quant_info *info_of(int type) {
    for (size_t i = 0; i < sizeof quant_types / sizeof quant_types[0]; i++)
        if (quant_types[i].type == type) return &quant_types[i];
    return NULL;
}

/* Every id ggml's enum ggml_type has had (ggml.h), by id; the removed ones
 * under their old names. Only for messages about files confkv refuses. */
static const char *const ggml_names[] = {
    "f32",      "f16",      "q4_0",    "q4_1",  "q4_2",       "q4_3",       "q5_0",       "q5_1",
    "q8_0",     "q8_1",     "q2_K",    "q3_K",  "q4_K",       "q5_K",       "q6_K",       "q8_K",
    "iq2_xxs",  "iq2_xs",   "iq3_xxs", "iq1_s", "iq4_nl",     "iq3_s",      "iq2_s",      "iq4_xs",
    "i8",       "i16",      "i32",     "i64",   "f64",        "iq1_m",      "bf16",       "q4_0_4_4",
    "q4_0_4_8", "q4_0_8_8", "tq1_0",   "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4",
    "nvfp4",    "q1_0",     "q2_0",
};
_Static_assert(sizeof ggml_names / sizeof ggml_names[0] == 43, "ggml ids 0..42");

const char *quant_type_name(int type) {
    const struct quant_info *q = info_of(type);
    return q ? q->name : NULL;
}

const char *quant_ggml_type_name(int type) {
    if (type < 0 || (size_t)type >= sizeof ggml_names / sizeof ggml_names[0]) return NULL;
    return ggml_names[type];
}

int quant_is_weight_type(int type) {
    const struct quant_info *q = info_of(type);
    return q && q->weight;
}

int quant_can_encode(int type) {
    const struct quant_info *q = info_of(type);
    return q && q->encode;
}

int quant_type_from_name(const char *s) {
    if (!s) return -1;
    for (size_t i = 0; i < sizeof quant_types / sizeof quant_types[0]; i++)
        if (strcmp(s, quant_types[i].name) == 0) return quant_types[i].type;
    return -1;
}

int quant_block_size(int type) {
    const struct quant_info *q = info_of(type);
    return q ? q->block : CK_EUNSUPPORTED;
}

int quant_block_bytes(int type) {
    const struct quant_info *q = info_of(type);
    return q ? q->bytes : CK_EUNSUPPORTED;
}

int quant_row_bytes(int type, uint64_t n_elems, uint64_t *out) {
    if (!out) return CK_EINVAL;
    const struct quant_info *q = info_of(type);
    if (!q) return CK_EUNSUPPORTED;
    if (n_elems % (uint64_t)q->block != 0) return CK_EFORMAT;
    uint64_t blocks = n_elems / (uint64_t)q->block, bb = (uint64_t)q->bytes;
    if (blocks > UINT64_MAX / bb) return CK_ERANGE;
    *out = blocks * bb;
    return 0;
}

/* ------------------------------------------------------------------------
 * scalar conversions
 * ------------------------------------------------------------------------ */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Both half conversions compute every case and select with masks (not
 * ternaries, which GCC turns back into branches), so that the row loops
 * below have no control flow and vectorise. */
static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu; /* exponent and mantissa */
    /* normal: rebias the exponent by 127 - 15; inf/nan: by 255 - 31 */
    uint32_t is_special = 0u - (uint32_t)(em >= 0x7c00u); /* all ones */
    uint32_t normal = (em << 13) + (112u << 23) + (is_special & (112u << 23));
    /* a NaN comes out quiet (payload kept), as ggml's conversion does: it
     * multiplies by a float, and the FPU quiets signalling NaNs; a quiet
     * bit set here makes f16 rows bit-identical to its to_float */
    normal |= (0u - (uint32_t)(em > 0x7c00u)) & 0x400000u;
    /* zero or subnormal: em * 2^-24, exact (and a normal float) */
    uint32_t sub = f32_bits((float)em * 0x1p-24f);
    uint32_t is_normal = 0u - (uint32_t)(em >= 0x0400u);
    return f32_from_bits(sign | (normal & is_normal) | (sub & ~is_normal));
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    /* normal: rebias, then drop 13 mantissa bits rounding to nearest even
     * (add 0xfff plus the lowest kept bit); a carry out of the mantissa
     * correctly bumps the exponent, up to 0x7c00 (inf) from 65520 on */
    uint32_t n = ax - (112u << 23);
    uint32_t hn = (n + 0xfffu + ((n >> 13) & 1u)) >> 13;
    /* below 2^-14, an f16 subnormal or zero: the 24-bit significand
     * shifted right by 126 - e (14 for e = 112; at 25 and more everything
     * rounds to 0, the tie at 2^-25 too), rounding to nearest even */
    uint32_t e = ax >> 23;
    uint32_t shift = 126u - (e < 95u ? 95u : e > 112u ? 112u : e); /* 14..31 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t hs = (m + ((1u << (shift - 1u)) - 1u) + ((m >> shift) & 1u)) >> shift;
    /* nan: quiet it, keep the top of the payload; >= 65520 or inf: inf */
    uint32_t is_nan = 0u - (uint32_t)(ax > 0x7f800000u);
    uint32_t hi = 0x7c00u | (is_nan & (0x200u | ((ax >> 13) & 0x3ffu)));
    uint32_t is_hi = 0u - (uint32_t)(ax >= 0x477ff000u);
    uint32_t is_sub = 0u - (uint32_t)(ax < 0x38800000u);
    uint32_t r = (hi & is_hi) | (hs & is_sub) | (hn & ~(is_hi | is_sub));
    return (uint16_t)(sign | r);
}

static inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: force quiet, as ggml */
        return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

float quant_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t quant_f32_to_f16(float f) { return f32_to_f16(f); }
float quant_bf16_to_f32(uint16_t h) { return bf16_to_f32(h); }
uint16_t quant_f32_to_bf16(float f) { return f32_to_bf16(f); }

/* ------------------------------------------------------------------------
 * row conversions
 * ------------------------------------------------------------------------ */

/* Checks shared by both directions. */
static int check_args(int type, const void *src, const void *dst, uint64_t n) {
    int bs = quant_block_size(type);
    if (bs <= 0) /* a known type's block is >= 1 element */
        return bs < 0 ? bs : CK_EUNSUPPORTED;
    if (n % (uint64_t)bs != 0) return CK_EFORMAT;
    if (n > 0 && (!src || !dst)) return CK_EINVAL;
    if (n > SIZE_MAX / sizeof(float)) return CK_ERANGE;
    return 0;
}

/* ------------------------------------------------------------------------
 * dequantisation: one function a block type
 *
 * Each mirrors ggml's dequantize_row_<type> (ggml-quants.c) in the order of
 * its float operations, which is what makes the floats bit-identical: the
 * integer parts (bit unpacking) may be written any way, but a scale product
 * such as dl = d * sc is rounded to a float before it multiplies q, and
 * dl * q - ml is two roundings, never one fused multiply-add. So each
 * product and difference is a statement of its own: GCC in ISO C mode
 * (-std=c11, as CMakeLists.txt sets) never contracts, and clang's default
 * (-ffp-contract=on) contracts only within one expression.
 *
 * Layouts (qblock.h), element e of a block:
 *   q4_0/q4_1/iq4_nl  e < 16: low nibble of qs[e]; e >= 16: high nibble of
 *                     qs[e - 16]
 *   q5_0/q5_1         the same 4 bits, and bit e of the 32-bit qh as bit 4
 *   q2_K/q3_K         2 bits: qs[32 (e / 128) + e % 32] >> 2 ((e % 128) / 32);
 *                     scale index e / 16; q3_K's third bit is bit e / 32 of
 *                     hmask[e % 32], and a clear bit means q - 4
 *   q4_K/q5_K         chunks of 64 use 32 bytes of qs: e % 64 < 32 the low
 *                     nibble of qs[32 (e / 64) + e % 32], else the high one;
 *                     sub-block (scale, min) e / 32; q5_K's fifth bit is bit
 *                     e / 32 of qh[e % 32]
 *   q6_K              halves of 128 (h = e / 128), quarters k = (e % 128) / 32,
 *                     l = e % 32: 4 bits from ql[64 h + 32 (k & 1) + l] (low
 *                     nibble for k < 2, high for k >= 2), 2 bits
 *                     (qh[32 h + l] >> 2 k) & 3 above them; scale e / 16
 *   iq4_xs            sub-blocks of 32 as iq4_nl blocks, qs 16 bytes each
 *   mxfp4             as iq4_nl, its levels qblock_mxfp4_values
 * ------------------------------------------------------------------------ */

/* a row of blocks: b is the i-th block of `type` at s */
#define BLOCK(type, s, i) ((const type *)((s) + (i) * sizeof(type)))

static void deq_q4_0(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_q4_0 *b = BLOCK(qblock_q4_0, s, i);
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            y[j] = (float)((b->qs[j] & 0xf) - 8) * d;
            y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_q4_1 *b = BLOCK(qblock_q4_1, s, i);
        const float d = f16_to_f32(b->d), m = f16_to_f32(b->m);
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            float lo = (float)(b->qs[j] & 0xf) * d, hi = (float)(b->qs[j] >> 4) * d;
            y[j] = lo + m;
            y[j + 16] = hi + m;
        }
    }
}

static void deq_q5_0(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_q5_0 *b = BLOCK(qblock_q5_0, s, i);
        const float d = f16_to_f32(b->d);
        uint32_t qh;
        memcpy(&qh, b->qh, 4); /* little-endian: bit e is element e's */
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            int lo = (b->qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void deq_q5_1(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_q5_1 *b = BLOCK(qblock_q5_1, s, i);
        const float d = f16_to_f32(b->d), m = f16_to_f32(b->m);
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            int lo = (b->qs[j] & 0xf) | (int)((qh >> j) & 1) << 4;
            int hi = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            float xlo = (float)lo * d, xhi = (float)hi * d;
            y[j] = xlo + m;
            y[j + 16] = xhi + m;
        }
    }
}

static void deq_q8_0(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_q8_0 *b = BLOCK(qblock_q8_0, s, i);
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QBLOCK_32; j++) y[j] = (float)b->qs[j] * d;
    }
}

/* ggml has no to_float for q8_1 (an activation type); s = d * sum(qs) is
 * redundant for the values. */
static void deq_q8_1(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_q8_1 *b = BLOCK(qblock_q8_1, s, i);
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QBLOCK_32; j++) y[j] = (float)b->qs[j] * d;
    }
}

/* q2_K: 16 sub-blocks of 16, scales[g] = 4-bit scale | 4-bit min << 4;
 * x = (d * sc) * q - (dmin * mn). Element e = 16 g + l: the 32 bytes
 * qs[32 (e / 128) ..] hold four 2-bit planes, plane (e % 128) / 32; the
 * loops walk g so that a plane's shift is fixed in the inner loop. */
static void deq_q2_K(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_K) {
        const qblock_q2_K *b = BLOCK(qblock_q2_K, s, i);
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        for (int g = 0; g < QBLOCK_K / 16; g++) {
            const float dl = d * (float)(b->scales[g] & 0xf);
            const float ml = dmin * (float)(b->scales[g] >> 4);
            const uint8_t *qs = b->qs + 32 * (g / 8) + 16 * (g % 2);
            const int shift = 2 * ((g % 8) / 2);
            for (int l = 0; l < 16; l++) {
                float p = dl * (float)((qs[l] >> shift) & 3);
                y[16 * g + l] = p - ml;
            }
        }
    }
}

/* The 16 6-bit scales of q3_K, 0..63, from their 12 bytes: the low 4 bits
 * of scale g are the low (g < 8) or high (g >= 8) nibble of byte g % 8, the
 * top 2 bits are bits 2 (g / 4) .. 2 (g / 4) + 1 of byte 8 + g % 4. */
static int q3_K_scale(const uint8_t *sc, int g) {
    int lo = g < 8 ? sc[g] & 0xf : sc[g - 8] >> 4;
    int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    return lo | hi << 4;
}

/* q3_K: x = (d * (sc - 32)) * (q - 4 * !hbit), q the 2 low bits (laid out
 * as q2_K's), hbit bit e / 32 of hmask[e % 32]. */
static void deq_q3_K(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_K) {
        const qblock_q3_K *b = BLOCK(qblock_q3_K, s, i);
        const float d = f16_to_f32(b->d);
        for (int g = 0; g < QBLOCK_K / 16; g++) {
            const float dl = d * (float)(q3_K_scale(b->scales, g) - 32);
            const uint8_t *qs = b->qs + 32 * (g / 8) + 16 * (g % 2);
            const uint8_t *hm = b->hmask + 16 * (g % 2);
            const int shift = 2 * ((g % 8) / 2), hbit = g / 2; /* = e / 32 */
            for (int l = 0; l < 16; l++) {
                int q = (qs[l] >> shift) & 3, h = (hm[l] >> hbit) & 1;
                y[16 * g + l] = dl * (float)(q - 4 + 4 * h);
            }
        }
    }
}

/* The 8 (scale, min) pairs of q4_K/q5_K, 6 bits each, from 12 bytes (ggml's
 * get_scale_min_k4): pairs 0..3 are the low 6 bits of bytes j and j + 4;
 * pairs 4..7 take 4 low bits from byte j + 4 (scale: low nibble, min: high
 * nibble) and their top 2 bits from the top of bytes j - 4 and j. */
static void k4_scale_min(const uint8_t *sc, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 0xf) | (sc[j - 4] >> 6) << 4;
        *min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

/* q4_K: x = (d * sc) * q - (dmin * mn) per sub-block of 32. */
static void deq_q4_K(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_K) {
        const qblock_q4_K *b = BLOCK(qblock_q4_K, s, i);
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        for (int g = 0; g < QBLOCK_K / 32; g++) {
            int sc, mn;
            k4_scale_min(b->scales, g, &sc, &mn);
            const float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *qs = b->qs + 32 * (g / 2);
            for (int l = 0; l < 32; l++) {
                int q = g % 2 ? qs[l] >> 4 : qs[l] & 0xf;
                float p = dl * (float)q;
                y[32 * g + l] = p - ml;
            }
        }
    }
}

/* q5_K: q4_K's nibbles plus a fifth bit, bit g of qh[l]. */
static void deq_q5_K(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_K) {
        const qblock_q5_K *b = BLOCK(qblock_q5_K, s, i);
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        for (int g = 0; g < QBLOCK_K / 32; g++) {
            int sc, mn;
            k4_scale_min(b->scales, g, &sc, &mn);
            const float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *qs = b->qs + 32 * (g / 2);
            for (int l = 0; l < 32; l++) {
                int q = (g % 2 ? qs[l] >> 4 : qs[l] & 0xf) | ((b->qh[l] >> g) & 1) << 4;
                float p = dl * (float)q;
                y[32 * g + l] = p - ml;
            }
        }
    }
}

/* q6_K: x = (d * sc) * (q - 32), sc int8 per sub-block of 16. Halves of
 * 128 (h), quarters k of 32: 4 bits from ql[64 h + 32 (k & 1) + l] (low
 * nibble for k < 2, high for k >= 2), 2 bits (qh[32 h + l] >> 2 k) & 3. */
static void deq_q6_K(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_K) {
        const qblock_q6_K *b = BLOCK(qblock_q6_K, s, i);
        const float d = f16_to_f32(b->d);
        for (int g = 0; g < QBLOCK_K / 16; g++) { /* e = 16 g + l */
            const int h = g / 8, k = (g % 8) / 2, l0 = 16 * (g % 2);
            const uint8_t *ql = b->ql + 64 * h + 32 * (k & 1) + l0, *qh = b->qh + 32 * h + l0;
            const int nshift = k < 2 ? 0 : 4;
            const float dl = d * (float)b->scales[g];
            for (int l = 0; l < 16; l++) {
                int q = ((ql[l] >> nshift) & 0xf) | ((qh[l] >> (2 * k)) & 3) << 4;
                y[16 * g + l] = dl * (float)(q - 32);
            }
        }
    }
}

/* q8_K: d is an f32; ggml's dequantize_row_q8_K (not in its type traits). */
static void deq_q8_K(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_K) {
        const qblock_q8_K *b = BLOCK(qblock_q8_K, s, i);
        const float d = b->d;
        for (int j = 0; j < QBLOCK_K; j++) y[j] = d * (float)b->qs[j];
    }
}

static void deq_iq4_nl(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_iq4_nl *b = BLOCK(qblock_iq4_nl, s, i);
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            y[j] = d * (float)qblock_iq4nl_values[b->qs[j] & 0xf];
            y[j + 16] = d * (float)qblock_iq4nl_values[b->qs[j] >> 4];
        }
    }
}

/* iq4_xs: sub-block g's 6-bit scale is nibble g % 2 of scales_l[g / 2]
 * with bits 2g, 2g + 1 of scales_h on top; x = (d * (sc - 32)) * T[q]. */
static void deq_iq4_xs(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++) {
        const qblock_iq4_xs *b = BLOCK(qblock_iq4_xs, s, i);
        const float d = f16_to_f32(b->d);
        for (int g = 0; g < QBLOCK_K / 32; g++, y += 32) {
            int sc = ((b->scales_l[g / 2] >> (4 * (g % 2))) & 0xf) | ((b->scales_h >> (2 * g)) & 3) << 4;
            const float dl = d * (float)(sc - 32);
            const uint8_t *qs = b->qs + 16 * g;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)qblock_iq4nl_values[qs[j] & 0xf];
                y[j + 16] = dl * (float)qblock_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* mxfp4: x = F[q] * 2^(e - 128), one product (exact unless it leaves
 * f32's range: e >= 253 with the largest levels overflows to inf, as in
 * ggml). */
static void deq_mxfp4(const uint8_t *s, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, y += QBLOCK_32) {
        const qblock_mxfp4 *b = BLOCK(qblock_mxfp4, s, i);
        const float d = f32_from_bits(qblock_e8m0_half_bits(b->e));
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            y[j] = (float)qblock_mxfp4_values[b->qs[j] & 0xf] * d;
            y[j + 16] = (float)qblock_mxfp4_values[b->qs[j] >> 4] * d;
        }
    }
}

#undef BLOCK

int quant_to_f32(int type, const void *src, float *dst, uint64_t n) {
    int rc = check_args(type, src, dst, n);
    if (rc < 0 || n == 0) return rc;
    const uint8_t *s = src;
    const uint64_t nb = n / (uint64_t)quant_block_size(type);
    switch (type) {
    case QUANT_F32: memcpy(dst, s, (size_t)n * 4); break;
    case QUANT_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        break;
    case QUANT_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
        break;
    case QUANT_Q4_0: deq_q4_0(s, dst, nb); break;
    case QUANT_Q4_1: deq_q4_1(s, dst, nb); break;
    case QUANT_Q5_0: deq_q5_0(s, dst, nb); break;
    case QUANT_Q5_1: deq_q5_1(s, dst, nb); break;
    case QUANT_Q8_0: deq_q8_0(s, dst, nb); break;
    case QUANT_Q8_1: deq_q8_1(s, dst, nb); break;
    case QUANT_Q2_K: deq_q2_K(s, dst, nb); break;
    case QUANT_Q3_K: deq_q3_K(s, dst, nb); break;
    case QUANT_Q4_K: deq_q4_K(s, dst, nb); break;
    case QUANT_Q5_K: deq_q5_K(s, dst, nb); break;
    case QUANT_Q6_K: deq_q6_K(s, dst, nb); break;
    case QUANT_Q8_K: deq_q8_K(s, dst, nb); break;
    case QUANT_IQ4_NL: deq_iq4_nl(s, dst, nb); break;
    case QUANT_IQ4_XS: deq_iq4_xs(s, dst, nb); break;
    case QUANT_MXFP4: deq_mxfp4(s, dst, nb); break;
    }
    return 0;
}

/* One q8_0 block, as ggml's quantize_row_q8_0_ref. */
static int quantize_block_q8_0(const float *x, uint8_t *blk) {
    float amax = 0.0f;
    uint32_t nonfinite = 0;
    for (int j = 0; j < QUANT_Q8_0_BLOCK; j++) {
        float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
        nonfinite |= (f32_bits(x[j]) & 0x7f800000u) == 0x7f800000u;
    }
    if (nonfinite) return CK_ERANGE;
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t dh = f32_to_f16(d);
    if ((dh & 0x7c00u) == 0x7c00u) /* scale overflowed f16 */
        return CK_ERANGE;
    memcpy(blk, &dh, 2);
    int8_t *q = (int8_t *)(blk + 2);
    for (int j = 0; j < QUANT_Q8_0_BLOCK; j++) {
        /* roundf (half away from zero) spelt so that it vectorises: the
         * fraction v - trunc(v) is exact. |v| <= 127 + rounding. */
        float v = x[j] * id, t = truncf(v), fr = v - t;
        t += (float)(fr >= 0.5f) - (float)(fr <= -0.5f);
        q[j] = (int8_t)t;
    }
    return 0;
}

/* One mxfp4 block, as ggml's quantize_row_mxfp4_ref: the exponent from
 * floorf(log2f(max|x|)) (libm's log2f, as ggml's: for a max just below a
 * power of two it may round up to it, and the bytes follow it), each
 * element the first level of least |F[i] * d - x| (so 0 is +0, index 0). */
static int quantize_block_mxfp4(const float *x, uint8_t *blk) {
    float amax = 0.0f;
    uint32_t nonfinite = 0;
    for (int j = 0; j < QBLOCK_32; j++) {
        amax = amax < fabsf(x[j]) ? fabsf(x[j]) : amax;
        nonfinite |= (f32_bits(x[j]) & 0x7f800000u) == 0x7f800000u;
    }
    if (nonfinite) return CK_ERANGE;
    uint8_t e = 0;
    if (amax > 0.0f) {
        /* an integer in [-24, 253] (log2f of the least subnormal is -149,
         * of FLT_MAX rounds to 128); ggml casts it to uint8_t directly,
         * which C leaves undefined below 0 and x86 does as int, then its
         * low byte: the same here, defined */
        const float l = floorf(log2f(amax)) - 2.0f + 127.0f;
        e = (uint8_t)(unsigned)(int)l;
    }
    const float d = f32_from_bits(qblock_e8m0_half_bits(e));
    blk[0] = e;
    for (int j = 0; j < QBLOCK_32 / 2; j++) {
        int q[2];
        for (int h = 0; h < 2; h++) {
            const float v = x[j + 16 * h];
            int best = 0;
            float best_err = fabsf((float)qblock_mxfp4_values[0] * d - v);
            for (int i = 1; i < 16; i++) {
                const float err = fabsf((float)qblock_mxfp4_values[i] * d - v);
                if (err < best_err) {
                    best = i;
                    best_err = err;
                }
            }
            q[h] = best;
        }
        blk[1 + j] = (uint8_t)(q[0] | q[1] << 4);
    }
    return 0;
}

int quant_from_f32(int type, const float *src, void *dst, uint64_t n) {
    int rc = check_args(type, src, dst, n);
    if (rc < 0) return rc;
    if (!quant_can_encode(type)) return CK_EUNSUPPORTED;
    if (n == 0) return 0;
    uint8_t *d = dst;
    switch (type) {
    case QUANT_F32: memcpy(d, src, (size_t)n * 4); break;
    case QUANT_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_f16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case QUANT_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case QUANT_Q8_0:
        for (uint64_t b = 0; b < n / QUANT_Q8_0_BLOCK; b++) {
            rc = quantize_block_q8_0(src + b * QUANT_Q8_0_BLOCK, d + b * QUANT_Q8_0_BYTES);
            if (rc < 0) return rc;
        }
        break;
    case QUANT_MXFP4:
        for (uint64_t b = 0; b < n / QBLOCK_32; b++) {
            rc = quantize_block_mxfp4(src + b * QBLOCK_32, d + b * sizeof(qblock_mxfp4));
            if (rc < 0) return rc;
        }
        break;
    }
    return 0;
}
