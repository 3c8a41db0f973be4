/* cpu_attn_tile.c - a prefill chunk's attention in tiles (cpu_attn_tile.h).
 *
 * Order of the loops: blocks outside, the tile's query rows inside, so a
 * block's K and V columns of the KV head (block_size x head_dim floats
 * each) stay in L1 while every row uses them; the rows' accumulators
 * (rows x head_dim) stay in L1/L2 across blocks. */
#include "cpu_attn_tile.h"

#include "cpu_features.h"

#include <math.h>
#include <string.h>

size_t attn_tile_scratch(const attn_shape *s, int rows, int n_blk, int mass) {
    /* accumulators, running max and sum, each (row, block)'s max and sum, one block's scores */
    return (size_t)rows * ((size_t)s->head_dim + 2) + (mass ? 2 * (size_t)rows * (size_t)n_blk : 0) +
           (size_t)s->block_size;
}

/* The rows [*t0, *tn) of the block at base (its first position) that a
 * query at p reads, window > 0 limiting it to (p - window, p]; 0 when none. */
static int rows_of(int base, int bs, int p, int window, int *t0, int *tn) {
    const int first = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    *t0 = first > base ? first - base : 0;
    *tn = p - base + 1 < bs ? p - base + 1 : bs;
    return *t0 < *tn;
}

#if defined(__x86_64__)
int attn_tile_step_ok_avx512(int hd);
float attn_tile_step_avx512(const float *qh, const float *k, const float *v, int kvd, int hd, int t0, int tn,
                            float scale, float *o, float *mx, float *sum, float *sc);
#endif

/* One query head (qh) over rows [t0, tn) of a block (k, v: its K and V
 * rows, from the head's columns): the scores into sc[t0, tn), the running
 * max *mx raised to theirs and the accumulator o (head_dim) and *sum
 * rescaled to it, then o += e^(score - max) x V row, *sum += those
 * weights. Returns their sum. */
typedef float (*step_fn)(const gemm_kernels *gk, const float *qh, const float *k, const float *v, int kvd,
                         int hd, int t0, int tn, float scale, float *o, float *mx, float *sum, float *sc);

/* The step through gk's dot and av (every ISA; head sizes of any kind). */
static float step_gk(const gemm_kernels *gk, const float *qh, const float *k, const float *v, int kvd, int hd,
                     int t0, int tn, float scale, float *o, float *mx, float *sum, float *sc) {
    float m = *mx;
    for (int t = t0; t < tn; t++) {
        sc[t] = gk->dot(qh, k + (size_t)t * kvd, hd) / scale;
        m = sc[t] > m ? sc[t] : m;
    }
    if (m > *mx) { /* the max grew: what was summed against the old one shrinks */
        const float c = expf(*mx - m);
        for (int d = 0; d < hd; d++) o[d] *= c;
        *sum *= c;
        *mx = m;
    }
    float e = 0.0f;
    for (int t = t0; t < tn; t++) {
        sc[t] = expf(sc[t] - m);
        e += sc[t];
    }
    gk->av(o, sc + t0, 0, v + (size_t)t0 * kvd, kvd, tn - t0, 1, hd, 1);
    *sum += e;
    return e;
}

#if defined(__x86_64__)
static float step_avx512(const gemm_kernels *gk, const float *qh, const float *k, const float *v, int kvd,
                         int hd, int t0, int tn, float scale, float *o, float *mx, float *sum, float *sc) {
    (void)gk;
    return attn_tile_step_avx512(qh, k, v, kvd, hd, t0, tn, scale, o, mx, sum, sc);
}
#endif

int attn_tile_run(const gemm_kernels *gk, int isa, const attn_tile *a, int g, int i0, int i1, float *mass,
                  float *scratch, size_t scratch_floats) {
    const attn_shape *s = &a->s;
    step_fn step = step_gk;
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512 && attn_tile_step_ok_avx512(s->head_dim)) step = step_avx512;
#endif
    (void)isa;
    const int hd = s->head_dim, kvd = s->kv_dim, bs = s->block_size, gqa = s->gqa, nb = a->n_blk;
    if (i0 < 0 || i1 > a->n_tok || i0 >= i1 || gqa < 1 || g < 0 || (g + 1) * gqa > s->n_heads || nb < 1)
        return -1;
    const int R = (i1 - i0) * gqa;
    if (attn_tile_scratch(s, R, nb, mass != NULL) > scratch_floats) return -1;
    float *acc = scratch, *mx = acc + (size_t)R * hd, *sum = mx + R;
    float *bmx = sum + R, *bsum = mass ? bmx + (size_t)R * nb : bmx, *sc = mass ? bsum + (size_t)R * nb : bmx;
    const float scale = sqrtf((float)hd);
    memset(acc, 0, (size_t)R * hd * sizeof *acc);
    for (int r = 0; r < R; r++) {
        const int h = g * gqa + r % gqa;
        /* a sink: the max starts at its logit and the sum at e^0, its term */
        mx[r] = s->sinks ? s->sinks[h] : -INFINITY;
        sum[r] = s->sinks ? 1.0f : 0.0f;
    }
    for (int b = 0; b < nb; b++) {
        const int base = a->blk_j[b] * bs;
        const float *k = a->blk[b] + (size_t)g * hd, *v = k + (size_t)bs * kvd;
        for (int r = 0; r < R; r++) {
            const int i = i0 + r / gqa, h = g * gqa + r % gqa;
            int t0, tn;
            if (mass) bsum[(size_t)r * nb + b] = 0.0f;
            if (!rows_of(base, bs, a->pos[i], a->window, &t0, &tn)) continue;
            const float *qh = a->q + (size_t)i * a->q_stride + (size_t)h * hd;
            const float e =
                step(gk, qh, k, v, kvd, hd, t0, tn, scale, acc + (size_t)r * hd, mx + r, sum + r, sc);
            if (mass) {
                bmx[(size_t)r * nb + b] = mx[r];
                bsum[(size_t)r * nb + b] = e;
            }
        }
    }
    for (int r = 0; r < R; r++)
        if (!(sum[r] > 0.0f)) return -1; /* a query saw no position: the caller's block list is short */
    for (int r = 0; r < R; r++) {
        const int i = i0 + r / gqa, h = g * gqa + r % gqa;
        float *dst = a->out + (size_t)i * a->out_stride + (size_t)h * hd;
        const float inv = 1.0f / sum[r], *o = acc + (size_t)r * hd;
        for (int d = 0; d < hd; d++) dst[d] = o[d] * inv;
    }
    if (mass)
        for (int b = 0; b < nb; b++) {
            float m = 0.0f;
            for (int r = 0; r < R; r++) {
                const float e = bsum[(size_t)r * nb + b];
                if (e > 0.0f) m += e * expf(bmx[(size_t)r * nb + b] - mx[r]) / sum[r];
            }
            mass[b] = m;
        }
    return 0;
}
