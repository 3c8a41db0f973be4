/* cpu_qdot_legacy_c.c - portable C dot products for the 32-element types
 * Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 (cpu_qdot_more.h). These are the reference
 * that the SIMD variants are tested against.
 *
 * The derivation, per block of 32 (w block x, activation block y):
 *   Q4_1 . Q8_1:  x_j = dx q_j + mx,  y_j ~ dy a_j, ys = dy sum_j a_j (stored
 *                 in y as the f16 `s`), so
 *                 sum_j x_j y_j = dx dy sum_j q_j a_j + mx (dy sum_j a_j)
 *                               = dx dy isum + mx ys.
 *   Q5_1 . Q8_1:  the same, with 5-bit q_j.
 *   Q5_0 . Q8_0:  x_j = dx (q_j - 16): dx dy sum_j (q_j - 16) a_j.
 *   IQ4_NL . Q8_0: x_j = dx v[q_j] (the 16-level table): dx dy sum_j v[q_j] a_j.
 *   MXFP4 . Q8_0: x_j = 2^(e - 128) F[q_j] (F the doubled E2M1 levels):
 *                 (dy 2^(e - 128)) sum_j F[q_j] a_j, the scale product
 *                 in that order (ggml_vec_dot_mxfp4_q8_0; a product of two
 *                 floats either way).
 * The integer sums are exact (|isum| <= 32 * 127 * 127 fits an int); the
 * float work is one multiply-add per block, in block order, as llama.cpp's
 * reference does it. */
#include <stdint.h>
#include <string.h>

#include "cpu_qdot.h"
#include "cpu_qdot_more.h"
#include "qblock.h"
#include "quant.h"

/* Element j's (j < 32) fifth bit of a Q5 block: bit j of the little-endian
 * word qh (the high bits of the low nibbles are bits 0..15, of the high
 * nibbles 16..31). */
static inline uint32_t q5_high_bits(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void cpu_vdot_q4_1_c(int n, float *s, const void *w, const void *a) {
    const qblock_q4_1 *x = w;
    const qblock_q8_1 *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_32; b++) {
        int isum = 0;
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            isum += (x[b].qs[j] & 0x0f) * y[b].qs[j];
            isum += (x[b].qs[j] >> 4) * y[b].qs[j + 16];
        }
        const float dd = quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d);
        sum += dd * (float)isum + quant_f16_to_f32(x[b].m) * quant_f16_to_f32(y[b].s);
    }
    *s = sum;
}

void cpu_vdot_q5_1_c(int n, float *s, const void *w, const void *a) {
    const qblock_q5_1 *x = w;
    const qblock_q8_1 *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_32; b++) {
        const uint32_t qh = q5_high_bits(x[b].qh);
        int isum = 0;
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            const int q0 = (x[b].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int q1 = (x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            isum += q0 * y[b].qs[j] + q1 * y[b].qs[j + 16];
        }
        const float dd = quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d);
        sum += dd * (float)isum + quant_f16_to_f32(x[b].m) * quant_f16_to_f32(y[b].s);
    }
    *s = sum;
}

void cpu_vdot_q5_0_c(int n, float *s, const void *w, const void *a) {
    const qblock_q5_0 *x = w;
    const qblock_q8_0 *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_32; b++) {
        const uint32_t qh = q5_high_bits(x[b].qh);
        int isum = 0;
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            const int q0 = ((x[b].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4) - 16;
            const int q1 = ((x[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
            isum += q0 * y[b].qs[j] + q1 * y[b].qs[j + 16];
        }
        sum += quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d) * (float)isum;
    }
    *s = sum;
}

void cpu_vdot_iq4_nl_c(int n, float *s, const void *w, const void *a) {
    const qblock_iq4_nl *x = w;
    const qblock_q8_0 *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_32; b++) {
        int isum = 0;
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            isum += qblock_iq4nl_values[x[b].qs[j] & 0x0f] * y[b].qs[j];
            isum += qblock_iq4nl_values[x[b].qs[j] >> 4] * y[b].qs[j + 16];
        }
        sum += quant_f16_to_f32(x[b].d) * quant_f16_to_f32(y[b].d) * (float)isum;
    }
    *s = sum;
}

void cpu_vdot_mxfp4_c(int n, float *s, const void *w, const void *a) {
    const qblock_mxfp4 *x = w;
    const qblock_q8_0 *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_32; b++) {
        int isum = 0;
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            isum += qblock_mxfp4_values[x[b].qs[j] & 0x0f] * y[b].qs[j];
            isum += qblock_mxfp4_values[x[b].qs[j] >> 4] * y[b].qs[j + 16];
        }
        const uint32_t eb = qblock_e8m0_half_bits(x[b].e);
        float de;
        memcpy(&de, &eb, 4);
        sum += quant_f16_to_f32(y[b].d) * de * (float)isum;
    }
    *s = sum;
}

/* MXFP4 x8 (cpu_qdot.h, qblock_mxfp4x8): each row as cpu_vdot_mxfp4_c
 * computes it, the same integer sum and the same float steps, so the two
 * give the same bits. a: QACT_Q8_0S rows, read as q8_0 (the vector x8
 * kernels use their block sums). */
void cpu_vdot8_mxfp4_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    const qblock_mxfp4x8 *x = w;
    const int nb = n / QBLOCK_32;
    for (int c = 0; c < ncols; c++) {
        const qblock_q8_0 *y = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride);
        float sum[8] = {0};
        for (int i = 0; i < nb; i++) {
            const float dy = quant_f16_to_f32(y[i].d);
            for (int r = 0; r < 8; r++) {
                int si = 0;
                for (int h = 0; h < 4; h++)
                    for (int b = 0; b < 4; b++) {
                        const int q = x[i].qs[32 * h + 4 * r + b];
                        si += qblock_mxfp4_values[q & 0x0f] * y[i].qs[4 * h + b] +
                              qblock_mxfp4_values[q >> 4] * y[i].qs[16 + 4 * h + b];
                    }
                const uint32_t eb = qblock_e8m0_half_bits(x[i].e[r]);
                float de;
                memcpy(&de, &eb, 4);
                sum[r] += dy * de * (float)si;
            }
        }
        for (int r = 0; r < 8; r++) s[8 * c + r] = sum[r];
    }
}
