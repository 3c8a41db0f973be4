/* cpu_qdot_base_c.c - Q8_0, Q4_0, Q4_K and Q6_K dot products in portable C
 * (cpu_qdot.h): the reference the vector kernels are tested against, and
 * what runs on a CPU without AVX2. Per block the integer products are
 * summed exactly, then scaled by the two blocks' scales in float, as
 * llama.cpp's ggml_vec_dot_<type>_q8_<x> generic code does. */
#include <stdint.h>

#include "cpu_qdot.h"
#include "quant.h"

void cpu_vdot_q8_0_c(int n, float *s, const void *w, const void *a) {
    const qblock_q8_0 *x = w;
    const qblock_q8_0 *y = a;
    float sum = 0.0f;
    for (int i = 0; i < n / QBLOCK_32; i++) {
        int si = 0;
        for (int j = 0; j < QBLOCK_32; j++) si += x[i].qs[j] * y[i].qs[j];
        sum += (float)si * (quant_f16_to_f32(x[i].d) * quant_f16_to_f32(y[i].d));
    }
    *s = sum;
}

void cpu_vdot_q4_0_c(int n, float *s, const void *w, const void *a) {
    const qblock_q4_0 *x = w;
    const qblock_q8_0 *y = a;
    float sum = 0.0f;
    for (int i = 0; i < n / QBLOCK_32; i++) {
        int si = 0;
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            si += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
            si += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QBLOCK_32 / 2];
        }
        sum += (float)si * (quant_f16_to_f32(x[i].d) * quant_f16_to_f32(y[i].d));
    }
    *s = sum;
}

/* Q4_K's 6-bit scale and min of sub-block k (of 8) from the 12 packed bytes
 * (ggml's get_scale_min_k4). */
static inline void scale_min_k4(const uint8_t *q, int k, int *sc, int *m) {
    if (k < 4) {
        *sc = q[k] & 63;
        *m = q[k + 4] & 63;
    } else {
        *sc = (q[k + 4] & 0x0f) | ((q[k - 4] >> 6) << 4);
        *m = (q[k + 4] >> 4) | ((q[k] >> 6) << 4);
    }
}

/* x = d * sc * q - dmin * m per sub-block of 32: the q part against the
 * activations, the m part against their 16-element sums (bsums). */
void cpu_vdot_q4_K_c(int n, float *s, const void *w, const void *a) {
    const qblock_q4_K *x = w;
    const qblock_q8_K *y = a;
    float sum = 0.0f;
    for (int i = 0; i < n / QBLOCK_K; i++) {
        int sumi = 0, summ = 0;
        for (int j = 0; j < QBLOCK_K / 64; j++) {
            const uint8_t *q = x[i].qs + 32 * j;
            const int8_t *a8 = y[i].qs + 64 * j;
            int sc0, m0, sc1, m1, lo = 0, hi = 0;
            scale_min_k4(x[i].scales, 2 * j, &sc0, &m0);
            scale_min_k4(x[i].scales, 2 * j + 1, &sc1, &m1);
            for (int l = 0; l < 32; l++) {
                lo += (q[l] & 0x0f) * a8[l];
                hi += (q[l] >> 4) * a8[l + 32];
            }
            sumi += sc0 * lo + sc1 * hi;
            summ += m0 * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) +
                    m1 * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
        }
        const float d = y[i].d * quant_f16_to_f32(x[i].d), dmin = y[i].d * quant_f16_to_f32(x[i].dmin);
        sum += d * (float)sumi - dmin * (float)summ;
    }
    *s = sum;
}

/* x = d * scale * (q - 32), q = 4 low bits in ql, 2 high in qh. */
void cpu_vdot_q6_K_c(int n, float *s, const void *w, const void *a) {
    const qblock_q6_K *x = w;
    const qblock_q8_K *y = a;
    float sum = 0.0f;
    for (int i = 0; i < n / QBLOCK_K; i++) {
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h, *a8 = y[i].qs + 128 * h;
            int p[8] = {0}; /* sub-block sums: (l / 16) + 2 * quarter */
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                p[is + 0] += ((int)((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32) * a8[l];
                p[is + 2] += ((int)((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32) * a8[l + 32];
                p[is + 4] += ((int)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32) * a8[l + 64];
                p[is + 6] += ((int)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32) * a8[l + 96];
            }
            for (int k = 0; k < 8; k++) sumi += sc[k] * p[k];
        }
        sum += y[i].d * quant_f16_to_f32(x[i].d) * (float)sumi;
    }
    *s = sum;
}
