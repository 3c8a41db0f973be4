/* quant.c - ggml tensor types and conversions (see quant.h).
 *
 * The half-precision conversions use integer operations (and one float
 * multiply that is always exact), so the result never depends on the FPU's
 * rounding mode, flush-to-zero flags or floating-point contraction. They
 * are branch-free so that the row loops vectorise: on an AVX2/AVX-512
 * machine f16 <-> f32 runs at memory speed (~0.2-0.3 ns per element);
 * q8_0 quantisation, used only when converting, is ~3 ns per element. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "ck_err.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant.c assumes a little-endian host (GGUF data is little-endian)"
#endif

/* ------------------------------------------------------------------------
 * the type table
 * ------------------------------------------------------------------------ */

const char *quant_type_name(int type) {
    switch (type) {
    case QUANT_F32: return "f32";
    case QUANT_F16: return "f16";
    case QUANT_Q8_0: return "q8_0";
    case QUANT_BF16: return "bf16";
    default: return NULL;
    }
}

int quant_type_from_name(const char *s) {
    static const int types[] = {QUANT_F32, QUANT_F16, QUANT_Q8_0, QUANT_BF16};
    if (!s)
        return -1;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(s, quant_type_name(types[i])) == 0)
            return types[i];
    return -1;
}

int quant_block_size(int type) {
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16: return 1;
    case QUANT_Q8_0: return QUANT_Q8_0_BLOCK;
    default: return CK_EUNSUPPORTED;
    }
}

/* Bytes per block of quant_block_size(type) elements. */
static uint64_t block_bytes(int type) {
    switch (type) {
    case QUANT_F32: return 4;
    case QUANT_F16:
    case QUANT_BF16: return 2;
    case QUANT_Q8_0: return QUANT_Q8_0_BYTES;
    default: return 0;
    }
}

int quant_row_bytes(int type, uint64_t n_elems, uint64_t *out) {
    if (!out)
        return CK_EINVAL;
    int bs = quant_block_size(type);
    if (bs < 0)
        return bs;
    if (n_elems % (uint64_t)bs != 0)
        return CK_EFORMAT;
    uint64_t blocks = n_elems / (uint64_t)bs, bb = block_bytes(type);
    if (blocks > UINT64_MAX / bb)
        return CK_ERANGE;
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

static inline float bf16_to_f32(uint16_t h) {
    return f32_from_bits((uint32_t)h << 16);
}

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
    if (bs < 0)
        return bs;
    if (n % (uint64_t)bs != 0)
        return CK_EFORMAT;
    if (n > 0 && (!src || !dst))
        return CK_EINVAL;
    if (n > SIZE_MAX / sizeof(float))
        return CK_ERANGE;
    return 0;
}

int quant_to_f32(int type, const void *src, float *dst, uint64_t n) {
    int rc = check_args(type, src, dst, n);
    if (rc < 0 || n == 0)
        return rc;
    const uint8_t *s = src;
    switch (type) {
    case QUANT_F32:
        memcpy(dst, s, (size_t)n * 4);
        break;
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
    case QUANT_Q8_0:
        for (uint64_t b = 0; b < n / QUANT_Q8_0_BLOCK; b++) {
            const uint8_t *blk = s + b * QUANT_Q8_0_BYTES;
            float *y = dst + b * QUANT_Q8_0_BLOCK;
            uint16_t dh;
            memcpy(&dh, blk, 2);
            float d = f16_to_f32(dh);
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < QUANT_Q8_0_BLOCK; j++)
                y[j] = d * (float)q[j];
        }
        break;
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
    if (nonfinite)
        return CK_ERANGE;
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

int quant_from_f32(int type, const float *src, void *dst, uint64_t n) {
    int rc = check_args(type, src, dst, n);
    if (rc < 0 || n == 0)
        return rc;
    uint8_t *d = dst;
    switch (type) {
    case QUANT_F32:
        memcpy(d, src, (size_t)n * 4);
        break;
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
            rc = quantize_block_q8_0(src + b * QUANT_Q8_0_BLOCK,
                                     d + b * QUANT_Q8_0_BYTES);
            if (rc < 0)
                return rc;
        }
        break;
    }
    return 0;
}
