/* cpu_qdot_kq_c.c - portable C dot products for the 256-element types Q2_K,
 * Q3_K, Q5_K and IQ4_XS against Q8_K activations (cpu_qdot_more.h). The
 * reference the SIMD variants are tested against.
 *
 * A Q8_K super-block y holds a float scale dy, 256 int8 a_j and bsums[k] =
 * sum of a_j over the 16 elements 16k .. 16k+15. For each type, with the
 * element layout of qblock.h / the GGUF format:
 *
 *   Q2_K: x_j = d sc_k q_j - dmin m_k  (k = j / 16, sc_k and m_k the low and
 *         high nibble of scales[k], q_j 2 bits). So
 *         sum_j x_j y_j = d dy sum_k sc_k sum_{j in k} q_j a_j
 *                       - dmin dy sum_k m_k bsums[k]:
 *         the mins need only bsums, never the 256 products.
 *   Q3_K: x_j = d (s_k - 32) (q_j - 4 h'_j), k = j / 16, s_k 6 bits, q_j the
 *         2 low bits, h'_j = 1 where the hmask bit is clear. One float
 *         product per super-block: d dy sum_k (s_k - 32) sum (q_j - 4 h'_j) a_j.
 *   Q5_K: x_j = d sc_k q_j - dmin m_k, k = j / 32 (8 sub-blocks of 32, 6-bit
 *         sc/m), q_j 5 bits; the mins use bsums[2k] + bsums[2k+1].
 *   IQ4_XS: x_j = d (ls_k - 32) v[q_j], k = j / 32, v the IQ4_NL table.
 * All integer sums are exact in int (|sum| < 2^31 with room); the float work
 * per super-block is done once, in the order written here. */
#include <stdint.h>

#include "cpu_qdot_kq.h"
#include "cpu_qdot_more.h"
#include "qblock.h"
#include "quant.h"

void cpu_vdot_q2_K_c(int n, float *s, const void *w, const void *a) {
    const qblock_q2_K *x = w;
    const qblock_q8_K *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        int isum = 0, msum = 0;
        for (int k = 0; k < 16; k++) msum += y[b].bsums[k] * (x[b].scales[k] >> 4);
        /* element j = 128 h + 32 i + l: bits 2i..2i+1 of qs[32 h + l];
         * sub-block j / 16 = 8 h + 2 i + l / 16 */
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++) {
                const uint8_t *q = x[b].qs + 32 * h;
                const int8_t *a8 = y[b].qs + 128 * h + 32 * i;
                const int k = 8 * h + 2 * i;
                int s0 = 0, s1 = 0;
                for (int l = 0; l < 16; l++) {
                    s0 += ((q[l] >> (2 * i)) & 3) * a8[l];
                    s1 += ((q[l + 16] >> (2 * i)) & 3) * a8[l + 16];
                }
                isum += (x[b].scales[k] & 0x0f) * s0 + (x[b].scales[k + 1] & 0x0f) * s1;
            }
        const float dall = y[b].d * quant_f16_to_f32(x[b].d);
        const float dmin = y[b].d * quant_f16_to_f32(x[b].dmin);
        sum += dall * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}

void cpu_vdot_q3_K_c(int n, float *s, const void *w, const void *a) {
    const qblock_q3_K *x = w;
    const qblock_q8_K *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        int sc[16], isum = 0;
        q3k_scales(x[b].scales, sc);
        /* element j = 128 h + 32 i + l: low bits as Q2_K, the high bit is
         * bit 4 h + i of hmask[l]; sub-block 8 h + 2 i + l / 16 */
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++) {
                const uint8_t *q = x[b].qs + 32 * h;
                const int8_t *a8 = y[b].qs + 128 * h + 32 * i;
                const int k = 8 * h + 2 * i, hb = 4 * h + i;
                int s0 = 0, s1 = 0;
                for (int l = 0; l < 16; l++) {
                    s0 += (((q[l] >> (2 * i)) & 3) - ((x[b].hmask[l] >> hb) & 1 ? 0 : 4)) * a8[l];
                    s1 += (((q[l + 16] >> (2 * i)) & 3) - ((x[b].hmask[l + 16] >> hb) & 1 ? 0 : 4)) *
                          a8[l + 16];
                }
                isum += sc[k] * s0 + sc[k + 1] * s1;
            }
        sum += quant_f16_to_f32(x[b].d) * y[b].d * (float)isum;
    }
    *s = sum;
}

void cpu_vdot_q5_K_c(int n, float *s, const void *w, const void *a) {
    const qblock_q5_K *x = w;
    const qblock_q8_K *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        int isum = 0, msum = 0;
        for (int k = 0; k < 8; k++) {
            int sc, m, ksum = 0;
            k4_scale_min(x[b].scales, k, &sc, &m);
            msum += m * (y[b].bsums[2 * k] + y[b].bsums[2 * k + 1]);
            /* element j = 64 c + 32 hi + l (k = 2 c + hi): nibble hi of
             * qs[32 c + l], fifth bit = bit k of qh[l] */
            const int c = k / 2, hi = k % 2;
            for (int l = 0; l < 32; l++) {
                const int q = ((x[b].qs[32 * c + l] >> (4 * hi)) & 0x0f) | ((x[b].qh[l] >> k) & 1) << 4;
                ksum += q * y[b].qs[32 * k + l];
            }
            isum += sc * ksum;
        }
        const float d = quant_f16_to_f32(x[b].d) * y[b].d;
        const float dmin = quant_f16_to_f32(x[b].dmin) * y[b].d;
        sum += d * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}

void cpu_vdot_iq4_xs_c(int n, float *s, const void *w, const void *a) {
    const qblock_iq4_xs *x = w;
    const qblock_q8_K *y = a;
    float sum = 0.0f;
    for (int b = 0; b < n / QBLOCK_K; b++) {
        int isum = 0;
        for (int k = 0; k < 8; k++) {
            const uint8_t *q = x[b].qs + 16 * k;
            const int8_t *a8 = y[b].qs + 32 * k;
            int ksum = 0;
            for (int l = 0; l < 16; l++)
                ksum +=
                    qblock_iq4nl_values[q[l] & 0x0f] * a8[l] + qblock_iq4nl_values[q[l] >> 4] * a8[l + 16];
            isum += iq4xs_scale(&x[b], k) * ksum;
        }
        sum += quant_f16_to_f32(x[b].d) * y[b].d * (float)isum;
    }
    *s = sum;
}
