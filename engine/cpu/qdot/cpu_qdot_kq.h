/* cpu_qdot_kq.h - the K-quants' packed sub-block scales, unpacked (internal
 * to cpu_qdot_kq_*.c: the C, AVX2 and AVX-512 kernels read the scales the
 * same way, so they live here once). Pure functions of the 12 bytes. */
#ifndef CK_CPU_QDOT_KQ_H
#define CK_CPU_QDOT_KQ_H
#include <stdint.h>

#include "qblock.h"

/* Q3_K's 16 six-bit scales (before the -32) from its 12 packed bytes:
 * scale k's low 4 bits are the low (k < 8) or high (k >= 8) nibble of byte
 * k % 8, its high 2 bits are bits 2 (k / 4) .. 2 (k / 4) + 1 of byte
 * 8 + k % 4. */
static inline void q3k_scales(const uint8_t p[QBLOCK_K_SCALES], int out[16]) {
    for (int k = 0; k < 16; k++) {
        const int lo = k < 8 ? p[k] & 0x0f : p[k - 8] >> 4;
        const int hi = (p[8 + k % 4] >> (2 * (k / 4))) & 3;
        out[k] = (lo | hi << 4) - 32;
    }
}

/* The same 16 scales minus 32 as 16 int8, four to a little-endian word
 * (out[0] = scales 0..3, ...): word arithmetic on the three 4-byte groups
 * of the 12 bytes, for the SIMD kernels. Low nibbles of bytes 0..3 (4..7)
 * are scales 0..3 (4..7), their high nibbles scales 8..11 (12..15); bits
 * 2j, 2j+1 of bytes 8..11 are the high bits of scales 4j .. 4j+3. */
static inline void q3k_scales_packed(const uint8_t p[QBLOCK_K_SCALES], uint32_t out[4]) {
    const uint32_t a0 = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    const uint32_t a1 = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    const uint32_t t = (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    /* bytewise x - 32 (mod 256) with x in 0..63: (x | 0x80) - 32 cannot
     * borrow from the next byte, and flipping the top bit back gives it */
    const uint32_t w[4] = {(a0 & lo4) | ((t & hi2) << 4), (a1 & lo4) | (((t >> 2) & hi2) << 4),
                           ((a0 >> 4) & lo4) | (((t >> 4) & hi2) << 4),
                           ((a1 >> 4) & lo4) | (((t >> 6) & hi2) << 4)};
    for (int k = 0; k < 4; k++) out[k] = ((w[k] | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
}

/* Q4_K/Q5_K's 8 six-bit scales and mins from their 12 packed bytes:
 * sub-blocks 0..3 keep the low 6 bits of bytes k (scale) and k + 4 (min);
 * sub-blocks 4..7 take a nibble of byte k + 4 and the 2 top bits of bytes
 * k - 4 (scale) and k (min). */
static inline void k4_scale_min(const uint8_t p[QBLOCK_K_SCALES], int k, int *sc, int *m) {
    if (k < 4) {
        *sc = p[k] & 63;
        *m = p[k + 4] & 63;
    } else { /* k is 4..7 (8 sub-blocks): p[k + 4] is at most p[11] */
        // cppcheck-suppress arrayIndexOutOfBoundsCond
        *sc = (p[k + 4] & 0x0f) | (p[k - 4] >> 6) << 4;
        // cppcheck-suppress arrayIndexOutOfBoundsCond
        *m = (p[k + 4] >> 4) | (p[k] >> 6) << 4;
    }
}

/* IQ4_XS sub-block k's 6-bit scale minus 32: a nibble of scales_l[k / 2]
 * and 2 bits of scales_h. */
static inline int iq4xs_scale(const qblock_iq4_xs *x, int k) {
    return (((x->scales_l[k / 2] >> (4 * (k % 2))) & 0x0f) | ((x->scales_h >> (2 * k)) & 3) << 4) - 32;
}

#endif
