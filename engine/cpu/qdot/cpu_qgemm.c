/* cpu_qgemm.c - the tile driver of cpu_qgemm.h. */
#include "cpu_qgemm.h"

#include <string.h>
#include <time.h>

#include "cpu_qact.h"

/* Bytes of weights a block of groups keeps in L2 while every activation
 * panel sweeps it: a quarter of a Zen 4's (1 MiB) or a Xeon's (2 MiB) L2,
 * which leaves room for the panel, the outputs and the other thread of a
 * core. */
#define QGEMM_BLOCK_BYTES (256u << 10)

/* Tile t's results s (cpu_qgemm16 layout) for the nc columns from m into
 * y, only rows in [r0, r1): group g (rows 8g..) then, when two, g + 1. */
static void store_tile(float *y, int ldy, const float *s, int nc, int m, int g, int two, int r0, int r1,
                       int accumulate) {
    for (int h = 0; h < 1 + two; h++) {
        const int base = 8 * (g + h), j0 = r0 > base ? r0 - base : 0, j1 = r1 < base + 8 ? r1 - base : 8;
        for (int c = 0; c < nc; c++) {
            float *o = y + (size_t)(m + c) * ldy + base;
            const float *v = s + 16 * c + 8 * h;
            if (j0 == 0 && j1 == 8) { /* a constant count: vector moves */
                if (accumulate)
                    for (int j = 0; j < 8; j++) o[j] += v[j];
                else
                    for (int j = 0; j < 8; j++) o[j] = v[j];
            } else if (accumulate)
                for (int j = j0; j < j1; j++) o[j] += v[j];
            else
                for (int j = j0; j < j1; j++) o[j] = v[j];
        }
    }
}

void cpu_qgemm_rows(float *y, int ldy, const void *a, size_t a_stride, const cpu_qmat *w, int M, int r0,
                    int r1, int accumulate) {
    const cpu_qtype *t = w->t;
    const size_t gbytes = (size_t)(w->k / t->block) * (size_t)t->x8_bytes;
    const int g0 = r0 / 8, g1 = (r1 + 7) / 8;
    int per = (int)(QGEMM_BLOCK_BYTES / gbytes) & ~1; /* groups a block, whole tiles */
    if (per < 2) per = 2;
    for (int gb = g0; gb < g1; gb += per) {
        const int ge = gb + per < g1 ? gb + per : g1;
        for (int m = 0; m < M; m += CPU_QGEMM_NC) {
            const int nc = M - m < CPU_QGEMM_NC ? M - m : CPU_QGEMM_NC;
            const char *am = (const char *)a + (size_t)m * a_stride;
            for (int g = gb; g < ge; g += 2) {
                const int two = g + 1 < ge;
                const char *wg = (const char *)w->data + (size_t)g * gbytes;
                float s[16 * CPU_QGEMM_NC];
                /* a lone group is computed twice in the tile's two halves:
                 * only a range's last one, at most */
                t->gemm(w->k, nc, s, wg, two ? wg + gbytes : wg, am, a_stride);
                store_tile(y, ldy, s, nc, m, g, two, r0, r1, accumulate);
            }
        }
    }
}

/* The calibration's row length: whole blocks of every type with tiles. */
#define PEAK_K 256

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cpu_qgemm_peak(const cpu_qtype *t, double seconds) {
    /* two groups' x8 blocks (at most 2 x 8 Q8_0 ones) and the activation
     * rows, zeros: the instructions' time does not depend on the values,
     * and zero scales keep the float steps free of subnormals */
    unsigned char w[2 * 8 * sizeof(qblock_q8_0x8)] __attribute__((aligned(64)));
    unsigned char a[CPU_QGEMM_NC * 320] __attribute__((aligned(64)));
    float s[16 * CPU_QGEMM_NC];
    if (!t || !t->gemm || PEAK_K % t->block) return 0;
    const size_t gb = (size_t)(PEAK_K / t->block) * (size_t)t->x8_bytes, ab = qact_row_bytes(t->act, PEAK_K);
    if (2 * gb > sizeof w || !ab || CPU_QGEMM_NC * ab > sizeof a) return 0;
    memset(w, 0, sizeof w);
    memset(a, 0, sizeof a);
    /* the best window of 64 tiles (about 15 us of a Zen 4's): the rate of
     * a core the thread has to itself, not of one the host shares out */
    const double t0 = now_s();
    double t1 = t0, best = 0;
    do {
        const double w0 = t1;
        for (int r = 0; r < 64; r++) t->gemm(PEAK_K, CPU_QGEMM_NC, s, w, w + gb, a, ab);
        t1 = now_s();
        if (t1 > w0 && (best == 0 || t1 - w0 < best)) best = t1 - w0;
    } while (t1 - t0 < seconds);
    return best > 0 ? 64.0 * 16.0 * CPU_QGEMM_NC * PEAK_K / best : 0;
}
