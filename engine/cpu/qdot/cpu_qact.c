/* cpu_qact.c - activation quantizers (cpu_qact.h). Written after
 * ggml-quants.c's reference functions, operation for operation: the same
 * float arithmetic in the same order, so the same bytes. */
#include "cpu_qact.h"

#include <math.h>
#include <string.h>

#include "cpu_features.h"
#include "quant.h"

size_t qact_row_bytes(int fmt, int k) {
    if (k <= 0) return 0;
    switch (fmt) {
    case QB_Q8_0: return k % QBLOCK_32 ? 0 : (size_t)(k / QBLOCK_32) * sizeof(qblock_q8_0);
    case QB_Q8_1: return k % QBLOCK_32 ? 0 : (size_t)(k / QBLOCK_32) * sizeof(qblock_q8_1);
    case QB_Q8_K: return k % QBLOCK_K ? 0 : (size_t)(k / QBLOCK_K) * sizeof(qblock_q8_K);
    case QACT_Q8_0S:
        return k % QBLOCK_32 ? 0 : (size_t)(k / QBLOCK_32) * (sizeof(qblock_q8_0) + sizeof(int16_t));
    default: return 0;
    }
}

void qact_q8_0(const float *x, qblock_q8_0 *y, int k) {
    if (k <= 0 || k % QBLOCK_32) return;
    for (int i = 0; i < k / QBLOCK_32; i++, x += QBLOCK_32) {
        float amax = 0.0f;
        for (int j = 0; j < QBLOCK_32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]); /* ggml's MAX */
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QBLOCK_32; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void qact_q8_1(const float *x, qblock_q8_1 *y, int k) {
    if (k <= 0 || k % QBLOCK_32) return;
    for (int i = 0; i < k / QBLOCK_32; i++, x += QBLOCK_32) {
        float amax = 0.0f;
        for (int j = 0; j < QBLOCK_32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]); /* ggml's MAX */
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QBLOCK_32 / 2; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            y[i].qs[QBLOCK_32 / 2 + j] = (int8_t)roundf(x[QBLOCK_32 / 2 + j] * id);
            sum += y[i].qs[j] + y[i].qs[QBLOCK_32 / 2 + j];
        }
        y[i].s = quant_f32_to_f16((float)sum * d);
    }
}

/* ggml's nearest_int: round half to even through the float's mantissa
 * (valid for |f| <= 2^22, which |x / d| <= 127 keeps). */
static inline int nearest_int(float f) {
    float v = f + 12582912.0f;
    int i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void qact_q8_K(const float *x, qblock_q8_K *y, int k) {
    if (k <= 0 || k % QBLOCK_K) return;
    for (int i = 0; i < k / QBLOCK_K; i++, x += QBLOCK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QBLOCK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            y[i].d = 0.0f;
            memset(y[i].qs, 0, sizeof y[i].qs);
            memset(y[i].bsums, 0, sizeof y[i].bsums); /* ggml leaves them stale; zero is their value */
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QBLOCK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QBLOCK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

void qact_q8_0s(const float *x, void *y, int k) {
    if (k <= 0 || k % QBLOCK_32) return;
    const int nb = k / QBLOCK_32;
    qblock_q8_0 *b = y;
    int16_t *sums = (int16_t *)(b + nb); /* 2-aligned: 34 bytes a block */
    qact_q8_0(x, b, k);
    for (int i = 0; i < nb; i++) {
        int s = 0; /* |s| <= 32 * 127: fits */
        for (int j = 0; j < QBLOCK_32; j++) s += b[i].qs[j];
        sums[i] = (int16_t)s;
    }
}

int qact_row(int fmt, const float *x, void *y, int k) {
    if (!qact_row_bytes(fmt, k)) return -1;
    switch (fmt) {
    case QB_Q8_0: qact_q8_0(x, y, k); return 0;
    case QB_Q8_1: qact_q8_1(x, y, k); return 0;
    case QACT_Q8_0S: qact_q8_0s(x, y, k); return 0;
    default: qact_q8_K(x, y, k); return 0;
    }
}

int qact_row_isa(int isa, int fmt, const float *x, void *y, int k) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX2 && qact_row_bytes(fmt, k)) switch (fmt) {
        case QB_Q8_0: qact_q8_0_avx2(x, y, k); return 0;
        case QB_Q8_1: qact_q8_1_avx2(x, y, k); return 0;
        case QACT_Q8_0S: qact_q8_0s_avx2(x, y, k); return 0;
        case QB_Q8_K: qact_q8_K_avx2(x, y, k); return 0;
        default: break;
        }
#endif
    (void)isa;
    return qact_row(fmt, x, y, k);
}
