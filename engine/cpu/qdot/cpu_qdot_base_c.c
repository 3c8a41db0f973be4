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

/* Q4_0 x8 (cpu_qdot.h): the 8 rows' integer sums per block as the
 * AVX2 kernel forms them, sum q y - 8 sum y with sum y the q8_0s row's. */
void cpu_vdot8_q4_0_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    const qblock_q4_0x8 *x = w;
    const int nb = n / QBLOCK_32;
    for (int c = 0; c < ncols; c++) {
        const qblock_q8_0 *y = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride);
        const int16_t *ysum = (const int16_t *)(y + nb);
        float sum[8] = {0};
        for (int i = 0; i < nb; i++) {
            const float dy = quant_f16_to_f32(y[i].d);
            for (int r = 0; r < 8; r++) {
                int si = 0;
                for (int h = 0; h < 4; h++)
                    for (int b = 0; b < 4; b++) {
                        const int q = x[i].qs[32 * h + 4 * r + b];
                        si += (q & 0x0f) * y[i].qs[4 * h + b] + (q >> 4) * y[i].qs[16 + 4 * h + b];
                    }
                si -= 8 * ysum[i];
                sum[r] += (float)si * (quant_f16_to_f32(x[i].d[r]) * dy);
            }
        }
        for (int r = 0; r < 8; r++) s[8 * c + r] = sum[r];
    }
}

/* Q8_0 x8 (cpu_qdot.h). */
void cpu_vdot8_q8_0_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    const qblock_q8_0x8 *x = w;
    const int nb = n / QBLOCK_32;
    for (int c = 0; c < ncols; c++) {
        const qblock_q8_0 *y = (const qblock_q8_0 *)((const char *)a + (size_t)c * a_stride);
        float sum[8] = {0};
        for (int i = 0; i < nb; i++) {
            const float dy = quant_f16_to_f32(y[i].d);
            for (int r = 0; r < 8; r++) {
                int si = 0;
                for (int g = 0; g < 8; g++)
                    for (int b = 0; b < 4; b++) si += x[i].qs[32 * g + 4 * r + b] * y[i].qs[4 * g + b];
                sum[r] += (float)si * (quant_f16_to_f32(x[i].d[r]) * dy);
            }
        }
        for (int r = 0; r < 8; r++) s[8 * c + r] = sum[r];
    }
}

/* Q4_K x8 (cpu_qdot.h): per row as cpu_vdot_q4_K_c, from the unpacked
 * scales and mins. */
void cpu_vdot8_q4_K_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    const qblock_q4_Kx8 *x = w;
    const int nb = n / QBLOCK_K;
    for (int c = 0; c < ncols; c++) {
        const qblock_q8_K *y = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride);
        float sum[8] = {0};
        for (int i = 0; i < nb; i++)
            for (int r = 0; r < 8; r++) {
                int sumi = 0, summ = 0;
                for (int j = 0; j < 4; j++) {
                    int lo = 0, hi = 0;
                    for (int h = 0; h < 8; h++)
                        for (int b = 0; b < 4; b++) {
                            const int q = x[i].qs[32 * (8 * j + h) + 4 * r + b];
                            lo += (q & 0x0f) * y[i].qs[64 * j + 4 * h + b];
                            hi += (q >> 4) * y[i].qs[64 * j + 32 + 4 * h + b];
                        }
                    sumi += x[i].sc[2 * j][r] * lo + x[i].sc[2 * j + 1][r] * hi;
                    summ += x[i].m[j][r][0] * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) +
                            x[i].m[j][r][1] * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
                }
                const float d = y[i].d * quant_f16_to_f32(x[i].d[r]),
                            dmin = y[i].d * quant_f16_to_f32(x[i].dmin[r]);
                sum[r] += d * (float)sumi - dmin * (float)summ;
            }
        for (int r = 0; r < 8; r++) s[8 * c + r] = sum[r];
    }
}

/* Q6_K x8 (cpu_qdot.h): per row as cpu_vdot_q6_K_c, each quant read back
 * from qblock_q6_Kx8's regrouped bits. */
void cpu_vdot8_q6_K_c(int n, int ncols, float *s, const void *w, const void *a, size_t a_stride) {
    const qblock_q6_Kx8 *x = w;
    const int nb = n / QBLOCK_K;
    for (int c = 0; c < ncols; c++) {
        const qblock_q8_K *y = (const qblock_q8_K *)((const char *)a + (size_t)c * a_stride);
        float sum[8] = {0};
        for (int i = 0; i < nb; i++)
            for (int r = 0; r < 8; r++) {
                int sumi = 0;
                for (int t = 0; t < 16; t++) {
                    const uint8_t *q = x[i].qs + 96 * t + 4 * r;
                    int p = 0;
                    for (int b = 0; b < 4; b++) {
                        const int top = q[b] >> 6 | (q[32 + b] >> 6) << 2 | (q[64 + b] >> 6) << 4;
                        for (int v = 0; v < 3; v++)
                            p += ((q[32 * v + b] & 63) - 32) * y[i].qs[16 * t + 4 * v + b];
                        p += (top - 32) * y[i].qs[16 * t + 12 + b];
                    }
                    sumi += x[i].sc[t / 2][r][t % 2] * p;
                }
                sum[r] += y[i].d * quant_f16_to_f32(x[i].d[r]) * (float)sumi;
            }
        for (int r = 0; r < 8; r++) s[8 * c + r] = sum[r];
    }
}
