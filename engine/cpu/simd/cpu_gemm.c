/* cpu_gemm.c - matrix products on packed weights (cpu_gemm.h).
 *
 * A tile is RM tokens by RP panels: RM * RP * PV vector accumulators, PV =
 * GEMM_PANEL / vector width. Each step of k loads the RP * PV weight vectors
 * once, then for every token broadcasts x[m][k] and adds it times them. The
 * shapes, with AVX-512 (Zen 5 here: two full-width FMAs a cycle, four
 * cycles of latency, so at least eight sums must be in flight):
 *   batches: 8 tokens x 1 panel, 16 accumulators; 16 FMAs for 2 weight
 *            loads and 8 broadcasts, so the FMA units set the pace;
 *   one token (decode at batch 1, bound by memory): 1 token x 4 panels,
 *            8 accumulators over four adjacent panels, one stream.
 * With AVX2 and FMA the vectors are 8 wide and the tiles smaller (16
 * registers); without either, plain C with the same order of sums.
 *
 * Why the panel walks all its tokens before the next panel: the panel (K x
 * 32 floats, 36 KB at K = 288) stays in L1 or L2 while every token tile
 * reads it, so the weights come from memory once per call; the x rows (at
 * most GEMM_M_BLOCK of them) stay in L2. */
#include "cpu_gemm.h"

#include <string.h>

#include "cpu_features.h"

#define P GEMM_PANEL

size_t gemm_packed_floats(int n, int k) { return (size_t)((n + P - 1) / P) * P * (size_t)k; }

void gemm_pack(gemm_w *w, float *dst, const float *src, int n, int k) {
    int np = (n + P - 1) / P;
    for (int p = 0; p < np; p++)
        for (int kk = 0; kk < k; kk++) {
            float *d = dst + ((size_t)p * k + kk) * P;
            for (int c = 0; c < P; c++) {
                int r = p * P + c;
                d[c] = r < n ? src[(size_t)r * k + kk] : 0.0f;
            }
        }
    w->p = dst;
    w->n = n;
    w->k = k;
    w->kern = gemm_kernels_for(cpu_isa_detect());
}

void gemm_row(const gemm_w *w, int r, float *dst) {
    const float *s = w->p + (size_t)(r / P) * w->k * P + r % P;
    for (int kk = 0; kk < w->k; kk++) dst[kk] = s[(size_t)kk * P];
}

const gemm_kernels *gemm_kernels_for(int isa) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512) return &gemm_kernels_avx512;
    if (isa >= CPU_ISA_AVX2) return &gemm_kernels_avx2;
#endif
    (void)isa;
    return &gemm_kernels_c;
}

void gemm_panels(float *y, int ldy, const float *x, const gemm_w *w, int M, int p0, int p1, int accumulate) {
    if (p0 >= p1) return;
    for (int m0 = 0; m0 < M; m0 += GEMM_M_BLOCK) {
        int mb = M - m0 < GEMM_M_BLOCK ? M - m0 : GEMM_M_BLOCK;
        w->kern->block(y + (size_t)m0 * ldy, ldy, x + (size_t)m0 * w->k, w, mb, p0, p1, accumulate);
    }
}

/* The baseline (no vector extension beyond the target's): */
#define GEMM_ISA(name) name##_c
#define GEMM_ISA_NAME "c"
#include "cpu_gemm_body.h"
