/* test_cpu_attn_tile.c - cpu_attn_tile.c, a chunk's attention by tiles,
 * against two independent computations of the same attention: a double
 * precision one from the definition (softmax over each query's visible
 * positions, with the sink in the denominator), and cpu_attn.h's
 * token-by-token kernels, one call a query (the path a chunk took before
 * tiles). Outputs and each block's attention mass (summed over the chunk's
 * queries and heads) are compared, on random data over many shapes:
 * chunks of 1-70 queries, contexts crossing block bounds, GQA 1/2/4, head
 * sizes 64 and 128, block sizes 8 and 16, a window and sinks on and off,
 * the chunk cut into tiles at random; every ISA level this CPU runs in
 * turn (gemm_kernels_for). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_test.h"
#include "cpu_attn.h"
#include "cpu_attn_tile.h"
#include "cpu_features.h"
#include "cpu_gemm.h"

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

typedef struct tcase {
    int H, gqa, hd, bs, ctx0, M, window, sinks;
} tcase;

static int first_of(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

/* One case at one ISA level; returns 0 when every comparison holds. */
static int run_case(const tcase *c, int isa) {
    const int H = c->H, hd = c->hd, gqa = c->gqa, kvd = H / gqa * hd, bs = c->bs, M = c->M;
    const int P = c->ctx0 + M, nb = (P + bs - 1) / bs, qd = H * hd;
    attn_shape s = {H, hd, kvd, bs, gqa, NULL};
    float *kv = malloc(sizeof(float) * (size_t)nb * 2 * bs * kvd),
          *q = malloc(sizeof(float) * (size_t)M * qd);
    float *out_t = calloc((size_t)M * qd, sizeof(float)), *out_k = calloc((size_t)M * qd, sizeof(float));
    float sinks[16], *mass_t = calloc((size_t)nb, sizeof(float)), *mass_k = calloc((size_t)nb, sizeof(float));
    double *mass_r = calloc((size_t)nb, sizeof(double)), *out_r = calloc((size_t)M * qd, sizeof(double));
    const float **blk = malloc(sizeof *blk * (size_t)nb);
    int *blk_j = malloc(sizeof(int) * (size_t)nb), *pos = malloc(sizeof(int) * (size_t)M);
    int *rows = malloc(sizeof(int) * (size_t)nb);
    const size_t stride = (size_t)P, scr_n = attn_tile_scratch(&s, M * gqa, nb, 1);
    float *att = malloc(sizeof(float) * (size_t)H * stride), *scr = malloc(sizeof(float) * scr_n);
    float *mass1 = malloc(sizeof(float) * (size_t)nb);
    double *sc = malloc(sizeof(double) * (size_t)P);
    int bad = 0;
    for (size_t i = 0; i < (size_t)nb * 2 * bs * kvd; i++) kv[i] = frand();
    for (size_t i = 0; i < (size_t)M * qd; i++) q[i] = frand() * 3.0f; /* scores of a few units */
    for (int h = 0; h < H; h++) sinks[h] = frand() * 2.0f;
    if (c->sinks) s.sinks = sinks;
    /* the blocks in reverse order in memory: the pool's are anywhere */
    for (int j = 0; j < nb; j++) blk[j] = kv + (size_t)(nb - 1 - j) * 2 * bs * kvd, blk_j[j] = j;
    for (int i = 0; i < M; i++) pos[i] = c->ctx0 + i;

    /* the definition, in double */
    for (int i = 0; i < M; i++)
        for (int h = 0; h < H; h++) {
            const int p = pos[i], f = first_of(p, c->window), g = h / gqa;
            double mx = c->sinks ? sinks[h] : -INFINITY, sum = 0.0;
            for (int t = f; t <= p; t++) {
                const float *k = blk[t / bs] + (size_t)(t % bs) * kvd + (size_t)g * hd;
                double d = 0.0;
                for (int e = 0; e < hd; e++) d += (double)q[(size_t)i * qd + h * hd + e] * k[e];
                sc[t] = d / sqrt((double)hd);
                mx = sc[t] > mx ? sc[t] : mx;
            }
            for (int t = f; t <= p; t++) sum += exp(sc[t] - mx);
            if (c->sinks) sum += exp(sinks[h] - mx);
            for (int t = f; t <= p; t++) {
                const double w = exp(sc[t] - mx) / sum;
                const float *v = blk[t / bs] + (size_t)bs * kvd + (size_t)(t % bs) * kvd + (size_t)g * hd;
                for (int e = 0; e < hd; e++) out_r[(size_t)i * qd + h * hd + e] += w * v[e];
                mass_r[t / bs] += w;
            }
        }

    /* the token path: cpu_attn.h's kernel a query at a time (AVX2 and up) */
    attn_f32_fn kern = attn_f32_kernel(&s, isa, NULL);
    const float **kb = malloc(sizeof *kb * (size_t)nb);
    for (int i = 0; kern && i < M; i++) {
        const int p = pos[i], f = first_of(p, c->window);
        int n = 0, j0 = -1;
        for (int j = f / bs; j <= p / bs; j++) {
            const int t0 = f > j * bs ? f - j * bs : 0, tn = j == p / bs ? p - j * bs + 1 : bs;
            if (j0 < 0) j0 = j;
            kb[n] = blk[j] + (size_t)t0 * kvd, rows[n++] = tn - t0;
        }
        if (kern(&s, q + (size_t)i * qd, kb, rows, n, 0, H, att, stride, out_k + (size_t)i * qd, mass1)) {
            fprintf(stderr, "  the token kernel refused H %d hd %d\n", H, hd);
            bad = 1;
            break;
        }
        for (int b = 0; b < n; b++) mass_k[j0 + b] += mass1[b];
    }
    free(kb);

    /* tiles: the chunk cut at random, every KV head */
    const gemm_kernels *gk = gemm_kernels_for(isa);
    for (int i0 = 0, i1; i0 < M && !bad; i0 = i1) {
        i1 = i0 + 1 + (int)((frand() + 1.0f) * 0.5f * 24.0f);
        if (i1 > M) i1 = M;
        for (int g = 0; g < H / gqa; g++) {
            attn_tile a = {s, c->window, q, (size_t)qd, pos, M, blk, blk_j, nb, out_t, (size_t)qd};
            if (attn_tile_run(gk, isa, &a, g, i0, i1, mass1, scr, scr_n)) {
                fprintf(stderr, "  attn_tile_run refused\n");
                bad = 1;
                break;
            }
            for (int b = 0; b < nb; b++) mass_t[b] += mass1[b];
        }
    }
    /* bounds: values of order 1, sums of up to a few hundred terms in float */
    for (size_t e = 0; e < (size_t)M * qd && !bad; e++) {
        if (fabs(out_t[e] - out_r[e]) > 2e-5 || (kern && fabsf(out_t[e] - out_k[e]) > 2e-5)) {
            fprintf(stderr, "  out[%zu]: tiles %.9g, token kernel %.9g, double %.9g\n", e, out_t[e], out_k[e],
                    out_r[e]);
            bad = 1;
        }
    }
    for (int b = 0; b < nb && !bad; b++) {
        const double tol = 1e-5 * (1.0 + mass_r[b]);
        if (fabs(mass_t[b] - mass_r[b]) > tol || (kern && fabs(mass_t[b] - mass_k[b]) > tol)) {
            fprintf(stderr, "  mass[%d]: tiles %.9g, token kernel %.9g, double %.9g\n", b, mass_t[b],
                    mass_k[b], mass_r[b]);
            bad = 1;
        }
    }
    if (bad)
        fprintf(stderr, "  case H %d gqa %d hd %d bs %d ctx0 %d M %d window %d sinks %d isa %s\n", H, gqa, hd,
                bs, c->ctx0, M, c->window, c->sinks, cpu_isa_name(isa));
    free(kv), free(q), free(out_t), free(out_k), free(mass_t), free(mass_k), free(mass_r), free(out_r);
    free(blk), free(blk_j), free(pos), free(rows), free(att), free(scr), free(mass1), free(sc);
    return bad;
}

static void test_tiles_match(void) {
    const int isa_max = cpu_isa_detect();
    int n = 0;
    for (int isa = CPU_ISA_C; isa <= isa_max; isa++)
        for (int k = 0; k < 40; k++) {
            tcase c;
            c.gqa = (int[]){1, 2, 4}[k % 3];
            c.H = c.gqa * (1 + k % 2 + (k % 5 == 0));
            c.hd = k % 4 == 3 ? 128 : 64;
            c.bs = k % 2 ? 16 : 8;
            c.ctx0 = (int)((frand() + 1.0f) * 0.5f * 150.0f);
            c.M = 1 + (int)((frand() + 1.0f) * 0.5f * 70.0f);
            c.window = k % 3 == 1 ? 1 + (int)((frand() + 1.0f) * 0.5f * 60.0f) : 0;
            c.sinks = k % 4 == 1 || k % 4 == 2;
            CK_CHECK(run_case(&c, isa) == 0);
            n++;
        }
    CK_CHECK(n >= 40);
}

/* What the scratch cannot hold, or a range outside the chunk, is refused
 * with nothing written. */
static void test_tile_refusals(void) {
    attn_shape s = {2, 64, 128, 8, 1, NULL};
    float kv[2 * 8 * 128] = {0}, q[128] = {0}, out[128], scr[4096], mass[1];
    const float *blk[1] = {kv};
    int blk_j[1] = {0}, pos[1] = {3};
    attn_tile a = {s, 0, q, 128, pos, 1, blk, blk_j, 1, out, 128};
    const gemm_kernels *gk = gemm_kernels_for(CPU_ISA_C);
    for (int i = 0; i < 128; i++) out[i] = 7.0f;
    CK_CHECK(attn_tile_run(gk, CPU_ISA_C, &a, 0, 0, 1, mass, scr, attn_tile_scratch(&s, 1, 1, 1) - 1) == -1);
    CK_CHECK(attn_tile_run(gk, CPU_ISA_C, &a, 2, 0, 1, mass, scr, 4096) == -1);
    CK_CHECK(attn_tile_run(gk, CPU_ISA_C, &a, 0, 0, 2, mass, scr, 4096) == -1);
    blk_j[0] = 1; /* the query's positions are in no block given */
    CK_CHECK(attn_tile_run(gk, CPU_ISA_C, &a, 0, 0, 1, mass, scr, 4096) == -1);
    for (int i = 0; i < 128; i++) CK_CHECK(out[i] == 7.0f);
    blk_j[0] = 0;
    CK_CHECK(attn_tile_run(gk, CPU_ISA_C, &a, 1, 0, 1, mass, scr, 4096) == 0);
    CK_CHECK_NEAR(mass[0], 1.0, 1e-6); /* one head, all its probability in the one block */
}

int main(void) {
    CK_RUN(test_tiles_match);
    CK_RUN(test_tile_refusals);
    return ck_test_summary();
}
