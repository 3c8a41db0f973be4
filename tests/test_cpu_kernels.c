/* test_cpu_kernels.c - the CPU backend's kernels against plain references
 * computed in double precision:
 *   cpu_gemm.c: packed products (values, accumulate mode, a leading
 *               dimension wider than N, bitwise batch and thread-split
 *               invariance, the row gather);
 *   cpu_attn.c: vectorized attention (outputs, probabilities, block mass,
 *               refused shapes).
 * Every ISA level this CPU runs (cpu_features.h) is checked: the f32
 * kernels by each level's set. (AVX-512 paths run only on a CPU that has
 * it; elsewhere they are compiled, not run, and the test says so.)
 * Inputs come from a local xorshift generator with fixed seeds, so a
 * failure is the same on every run. The whole forward pass against a
 * scalar Llama: test_cpu_kernels_forward.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_test.h"
#include "cpu_attn.h"
#include "cpu_features.h"
#include "cpu_gemm.h"

/* ---------------------------------------------------------------- inputs */

/* The ISA level the f32 kernel checks run at (each in turn). */
static int cur_isa;

/* attn_f32_kernel at cur_isa, run; -1 where there is no kernel. */
static int attn_f32(const attn_shape *s, const float *q, const float *const *blk, const int *rows, int n_blk,
                    float *att, size_t att_stride, float *out, float *mass) {
    attn_f32_fn f = attn_f32_kernel(s, cur_isa, NULL);
    return f ? f(s, q, blk, rows, n_blk, 0, s->n_heads, att, att_stride, out, mass) : -1;
}

static int attn_f32_supported(const attn_shape *s) { return attn_f32_kernel(s, cur_isa, NULL) != NULL; }

/* xorshift64*: its state is the caller's, so each case is reproducible. */
typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [-a, a): 24 random bits, so 2u - 1 is exact in a float. */
static float rng_unif(rng *r, float a) {
    double u = (double)(rng_next(r) >> 40) / 16777216.0;
    return (float)(2.0 * u - 1.0) * a;
}

static void fill(rng *r, float *x, size_t n, float a) {
    for (size_t i = 0; i < n; i++) x[i] = rng_unif(r, a);
}

/* 64-byte aligned floats, as the backend packs into; the size rounded up to
 * a multiple of the alignment, which C11's aligned_alloc (and ASan) want. */
static float *alloc_aligned(size_t n) {
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

/* ------------------------------------------------------------ cpu_gemm.c */

/* ref (M, N) = x . w^T in double, and mag (M, N) = |x| . |w|^T: the scale of
 * the rounding error that a float sum of those products can make. */
static void gemm_naive(double *ref, double *mag, const float *x, const float *w, int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)m * K + k] * w[(size_t)n * K + k];
                s += p;
                a += fabs(p);
            }
            ref[(size_t)m * N + n] = s;
            mag[(size_t)m * N + n] = a;
        }
}

/* y (rows ldy apart) against old + scale * ref (old NULL: zero), each
 * element within the rounding bound of a K-term float sum plus one add:
 * (K + 2) units of float rounding (2^-24) times the magnitudes that went into
 * it. Returns 0, or -1 after printing the first element out of bounds. */
static int gemm_compare(const float *y, int ldy, const float *old, const double *ref, const double *mag,
                        double scale, int M, int N, int K, const char *what) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)m * N + n;
            double o = old ? old[i] : 0.0, want = o + scale * ref[i];
            double tol = 1.01 * (K + 2) * 0x1p-24 * (scale * mag[i] + fabs(o)) + 1e-30,
                   got = y[(size_t)m * ldy + n];
            if (!(fabs(got - want) <= tol)) {
                fprintf(stderr, "  gemm %s M %d N %d K %d: y[%d][%d] = %.9g, want %.9g (tol %.3g)\n", what, M,
                        N, K, m, n, got, want, tol);
                return -1;
            }
        }
    return 0;
}

/* Columns [N, ldy) of every row of y still hold the sentinel: they belong
 * to whatever the caller keeps beside the product. */
static int gemm_pad_intact(const float *y, int ldy, int M, int N, int K, float sentinel) {
    for (int m = 0; m < M; m++)
        for (int n = N; n < ldy; n++)
            if (y[(size_t)m * ldy + n] != sentinel) {
                fprintf(stderr, "  gemm M %d N %d K %d: padding y[%d][%d] overwritten with %g\n", M, N, K, m,
                        n, y[(size_t)m * ldy + n]);
                return -1;
            }
    return 0;
}

/* One shape: plain, accumulate, and both again with ldy = N + 3. */
static int gemm_shape_ok(rng *r, int M, int N, int K) {
    const int ldy = N + 3;
    const float sentinel = -12345.5f;
    float *w = malloc((size_t)N * K * sizeof(float)), *x = malloc((size_t)M * K * sizeof(float));
    float *pk = alloc_aligned(gemm_packed_floats(N, K));
    float *y = malloc((size_t)M * ldy * sizeof(float)), *old = malloc((size_t)M * N * sizeof(float));
    double *ref = malloc((size_t)M * N * sizeof(double)), *mag = malloc((size_t)M * N * sizeof(double));
    int rc = -1;
    if (!w || !x || !pk || !y || !old || !ref || !mag) goto out;
    fill(r, w, (size_t)N * K, 1.0f);
    fill(r, x, (size_t)M * K, 1.0f);
    fill(r, old, (size_t)M * N, 1.0f);
    gemm_w pw;
    gemm_pack(&pw, pk, w, N, K);
    pw.kern = gemm_kernels_for(cur_isa);
    const int np = gemm_n_panels(&pw);
    gemm_naive(ref, mag, x, w, M, N, K);

    gemm_panels(y, N, x, &pw, M, 0, np, 0);
    if (gemm_compare(y, N, NULL, ref, mag, 1.0, M, N, K, "plain")) goto out;
    memcpy(y, old, (size_t)M * N * sizeof(float));
    gemm_panels(y, N, x, &pw, M, 0, np, 1);
    if (gemm_compare(y, N, old, ref, mag, 1.0, M, N, K, "accumulate")) goto out;

    for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = sentinel;
    gemm_panels(y, ldy, x, &pw, M, 0, np, 0);
    if (gemm_compare(y, ldy, NULL, ref, mag, 1.0, M, N, K, "ldy") ||
        gemm_pad_intact(y, ldy, M, N, K, sentinel))
        goto out;
    /* y held the product: adding it again doubles it exactly. */
    gemm_panels(y, ldy, x, &pw, M, 0, np, 1);
    if (gemm_compare(y, ldy, NULL, ref, mag, 2.0, M, N, K, "ldy accumulate") ||
        gemm_pad_intact(y, ldy, M, N, K, sentinel))
        goto out;
    rc = 0;
out:
    free(w);
    free(x);
    free(pk);
    free(y);
    free(old);
    free(ref);
    free(mag);
    return rc;
}

/* M covers one token, each remainder tile, whole tiles, and more than
 * GEMM_M_BLOCK; N one column, partial, whole and several panels; K from one
 * step to the stories15M width. */
static void test_gemm_against_naive(void) {
    static const int Ms[] = {1, 2, 3, 5, 7, 8, 9, 16, 17, 64, 65, 130};
    static const int Ns[] = {1, 31, 32, 33, 100, 864};
    static const int Ks[] = {1, 8, 37, 288};
    for (cur_isa = 0; cur_isa <= cpu_isa_detect(); cur_isa++) {
        rng r = {0x243F6A8885A308D3ULL};
        fprintf(stderr, "  kernels %s\n", gemm_kernels_for(cur_isa)->isa);
        for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
            for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
                for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; c++)
                    CK_CHECK_MSG(gemm_shape_ok(&r, Ms[a], Ns[b], Ks[c]) == 0, "isa %s M %d N %d K %d",
                                 cpu_isa_name(cur_isa), Ms[a], Ns[b], Ks[c]);
    }
    cur_isa = cpu_isa_detect();
}

/* y (M, w->n) by two calls, panels [0, p) then [p, np), as two threads
 * share a product. */
static void gemm_split(float *y, const float *x, const gemm_w *w, int M, int p) {
    gemm_panels(y, w->n, x, w, M, 0, p, 0);
    gemm_panels(y, w->n, x, w, M, p, gemm_n_panels(w), 0);
}

/* cpu_gemm.h promises each output the same sums in the same order whatever
 * M and the panel range: a token's logits must not depend on its batch. */
static void gemm_batch_invariant(void) {
    enum { N = 300, K = 288, MB = 70, MS = 13, S0 = 57 }; /* the M = 13 call: rows [S0, S0 + MS) */
    rng r = {0x13198A2E03707344ULL};
    float *w = malloc((size_t)N * K * sizeof(float)), *x = malloc((size_t)MB * K * sizeof(float));
    float *pk = alloc_aligned(gemm_packed_floats(N, K));
    float *y70 = malloc((size_t)MB * N * sizeof(float)), *y13 = malloc((size_t)MS * N * sizeof(float));
    float *y1 = malloc(N * sizeof(float)), *ys = malloc((size_t)MB * N * sizeof(float));
    CK_CHECK(w && x && pk && y70 && y13 && y1 && ys);
    fill(&r, w, (size_t)N * K, 1.0f);
    fill(&r, x, (size_t)MB * K, 1.0f);
    gemm_w pw;
    gemm_pack(&pw, pk, w, N, K);
    pw.kern = gemm_kernels_for(cur_isa);
    const int np = gemm_n_panels(&pw);
    const size_t row = N * sizeof(float);

    /* Row S0 sits mid-tile in the M = 70 call and first in the M = 13 one;
     * rows 64.. are the second GEMM_M_BLOCK block's remainder tile. */
    gemm_panels(y70, N, x, &pw, MB, 0, np, 0);
    gemm_panels(y13, N, x + (size_t)S0 * K, &pw, MS, 0, np, 0);
    for (int m = 0; m < MB; m++) {
        const float *xm = x + (size_t)m * K;
        gemm_panels(y1, N, xm, &pw, 1, 0, np, 0);
        CK_CHECK_MSG(!memcmp(y1, y70 + (size_t)m * N, row), "row %d: M = 1 differs from M = 70", m);
        if (m >= S0)
            CK_CHECK_MSG(!memcmp(y1, y13 + (size_t)(m - S0) * N, row), "row %d: M = 1 differs from M = 13",
                         m);
        for (int p = 1; p < np; p++) {
            gemm_split(ys, xm, &pw, 1, p);
            CK_CHECK_MSG(!memcmp(ys, y1, row), "row %d: M = 1 split at panel %d differs", m, p);
        }
    }
    for (int p = 1; p < np; p++) {
        gemm_split(ys, x, &pw, MB, p);
        CK_CHECK_MSG(!memcmp(ys, y70, MB * row), "M = 70 split at panel %d differs", p);
        gemm_split(ys, x + (size_t)S0 * K, &pw, MS, p);
        CK_CHECK_MSG(!memcmp(ys, y13, MS * row), "M = 13 split at panel %d differs", p);
    }
    free(w);
    free(x);
    free(pk);
    free(y70);
    free(y13);
    free(y1);
    free(ys);
}

static void test_gemm_batch_invariant(void) {
    for (cur_isa = 0; cur_isa <= cpu_isa_detect(); cur_isa++) gemm_batch_invariant();
    cur_isa = cpu_isa_detect();
}

/* Every row of an (N, K) matrix comes back exactly from its packed form. */
static int gemm_rows_ok(rng *r, int N, int K) {
    float *w = malloc((size_t)N * K * sizeof(float)), *got = malloc((size_t)K * sizeof(float));
    float *pk = alloc_aligned(gemm_packed_floats(N, K));
    int rc = -1;
    if (!w || !got || !pk) goto out;
    fill(r, w, (size_t)N * K, 1.0f);
    gemm_w pw;
    gemm_pack(&pw, pk, w, N, K);
    for (int n = 0; n < N; n++) {
        gemm_row(&pw, n, got);
        if (memcmp(got, w + (size_t)n * K, (size_t)K * sizeof(float))) {
            fprintf(stderr, "  gemm_row N %d K %d: row %d differs\n", N, K, n);
            goto out;
        }
    }
    rc = 0;
out:
    free(w);
    free(got);
    free(pk);
    return rc;
}

static void test_gemm_row(void) {
    static const int shapes[][2] = {{100, 37}, {33, 288}, {32, 8}, {1, 1}, {300, 64}};
    rng r = {0xA4093822299F31D0ULL};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        CK_CHECK_MSG(gemm_rows_ok(&r, shapes[i][0], shapes[i][1]) == 0, "N %d K %d", shapes[i][0],
                     shapes[i][1]);
}

/* ------------------------------------------------------------ cpu_attn.c */

#define ATT_MAX_BLK 5

/* One layer's KV blocks as the backend's pool holds them: block_size K rows
 * of kv_dim floats, then block_size V rows. The blocks lie in reverse order
 * with a block-sized gap before each, one float off 64-byte alignment, in
 * one buffer that is otherwise NaN: rows past rows[] must not be read. */
typedef struct att_blocks {
    float *buf;
    const float *blk[ATT_MAX_BLK];
    int rows[ATT_MAX_BLK];
    int n_blk, n; /* blocks, positions */
} att_blocks;

static int att_blocks_make(att_blocks *ab, rng *r, const attn_shape *s, int n_blk, int last_rows) {
    const size_t kvd = (size_t)s->kv_dim, bs = (size_t)s->block_size, span = 2 * bs * kvd;
    const size_t total = 2 * (size_t)n_blk * span + 1;
    if (!(ab->buf = malloc(total * sizeof(float)))) return -1;
    for (size_t i = 0; i < total; i++) ab->buf[i] = NAN;
    ab->n_blk = n_blk;
    ab->n = 0;
    for (int b = 0; b < n_blk; b++) {
        float *k = ab->buf + 1 + (size_t)(2 * (n_blk - 1 - b) + 1) * span;
        ab->blk[b] = k;
        ab->rows[b] = b == n_blk - 1 ? last_rows : (int)bs;
        fill(r, k, (size_t)ab->rows[b] * kvd, 2.0f);
        fill(r, k + bs * kvd, (size_t)ab->rows[b] * kvd, 2.0f);
        ab->n += ab->rows[b];
    }
    return 0;
}

/* K row (v = 0) or V row (v = 1) of position j, counted over the blocks. */
static const float *att_row(const att_blocks *ab, const attn_shape *s, int j, int v) {
    int b = 0;
    while (j >= ab->rows[b]) j -= ab->rows[b++];
    return ab->blk[b] + ((size_t)v * s->block_size + (size_t)j) * s->kv_dim;
}

/* cpu_attn.h's attention from its definition, in double:
 *   p[h][j] = softmax_j(q_h . k_j[h / gqa] / sqrt(head_dim)),
 *   out_h = sum_j p[h][j] v_j[h / gqa], mass[b] = sum of p over heads and b's positions.
 * p: (n_heads, n), out: (n_heads * head_dim), mass: (n_blk). */
static void att_naive(const attn_shape *s, const float *q, const att_blocks *ab, double *p, double *out,
                      double *mass) {
    const int hd = s->head_dim, n = ab->n;
    for (int b = 0; b < ab->n_blk; b++) mass[b] = 0;
    for (int h = 0; h < s->n_heads; h++) {
        const size_t off = (size_t)(h / s->gqa) * hd;
        double *ph = p + (size_t)h * n, mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            const float *k = att_row(ab, s, j, 0) + off;
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[(size_t)h * hd + i] * k[i];
            ph[j] = d / sqrt((double)hd);
            mx = fmax(mx, ph[j]);
        }
        if (s->sinks) mx = fmax(mx, s->sinks[h]); /* a sink: in the denominator only */
        for (int j = 0; j < n; j++) sum += (ph[j] = exp(ph[j] - mx));
        if (s->sinks) sum += exp(s->sinks[h] - mx);
        for (int i = 0; i < hd; i++) out[(size_t)h * hd + i] = 0;
        for (int j = 0, b = 0, t = 0; j < n; j++, t++) {
            if (t == ab->rows[b]) b++, t = 0;
            ph[j] /= sum;
            mass[b] += ph[j];
            const float *v = att_row(ab, s, j, 1) + off;
            for (int i = 0; i < hd; i++) out[(size_t)h * hd + i] += ph[j] * v[i];
        }
    }
}

/* attn_f32's results against att_naive's, bounds as the test states. */
static int att_compare(const attn_shape *s, const att_blocks *ab, const float *att, size_t stride,
                       const float *out, const float *mass, const double *p, const double *ro,
                       const double *rm, const char *what) {
    const int H = s->n_heads, hd = s->head_dim, n = ab->n;
    double omax = 0;
    for (int i = 0; i < H * hd; i++) omax = fmax(omax, fabs(ro[i]));
    const double otol = fmax(1e-5 * omax, 1e-6);
    for (int i = 0; i < H * hd; i++)
        if (!(fabs(out[i] - ro[i]) <= otol)) {
            fprintf(stderr, "  attn %s: out[%d] = %.9g, want %.9g (tol %.3g)\n", what, i, out[i], ro[i],
                    otol);
            return -1;
        }
    for (int h = 0; h < H; h++) {
        double sum = 0, want_sum = 0; /* 1, less the sink's share with sinks */
        for (int j = 0; j < n; j++) {
            double a = att[(size_t)h * stride + j], want = p[(size_t)h * n + j];
            sum += a;
            want_sum += want;
            if (!(fabs(a - want) <= 1e-6)) {
                fprintf(stderr, "  attn %s: p[%d][%d] = %.9g, want %.9g\n", what, h, j, a, want);
                return -1;
            }
        }
        if (!(fabs(sum - want_sum) <= 1e-5) || (!s->sinks && !(fabs(sum - 1.0) <= 1e-5))) {
            fprintf(stderr, "  attn %s: head %d probabilities sum to %.9g\n", what, h, sum);
            return -1;
        }
    }
    for (int b = 0; b < ab->n_blk; b++)
        if (!(fabs(mass[b] - rm[b]) <= 1e-5)) {
            fprintf(stderr, "  attn %s: mass[%d] = %.9g, want %.9g\n", what, b, mass[b], rm[b]);
            return -1;
        }
    return 0;
}

/* The heads in two ranges (as a batch-1 decode splits them over its
 * threads, mass NULL, then attn_block_mass) give the bits of one call:
 * att, out and mass. */
static int att_split_same(const attn_shape *s, const float *q, const att_blocks *ab, const float *att,
                          size_t stride, const float *out, const float *mass, const char *what) {
    const int H = s->n_heads, hd = s->head_dim, cut = (H + 1) / 2;
    if (H < 2) return 0;
    float *att2 = malloc((size_t)H * stride * sizeof(float)), *out2 = malloc((size_t)H * hd * sizeof(float));
    float mass2[ATT_MAX_BLK];
    int rc = -1;
    if (!att2 || !out2) goto out;
    attn_f32_fn f = attn_f32_kernel(s, cur_isa, NULL);
    if (f(s, q, ab->blk, ab->rows, ab->n_blk, cut, H, att2, stride, out2, NULL) ||
        f(s, q, ab->blk, ab->rows, ab->n_blk, 0, cut, att2, stride, out2, NULL)) {
        fprintf(stderr, "  attn %s: a head range was refused\n", what);
        goto out;
    }
    attn_block_mass(att2, stride, H, ab->rows, ab->n_blk, mass2);
    int same = !memcmp(out, out2, (size_t)H * hd * sizeof(float)) &&
               !memcmp(mass, mass2, (size_t)ab->n_blk * sizeof(float));
    for (int h = 0; h < H; h++)
        same &= !memcmp(att + (size_t)h * stride, att2 + (size_t)h * stride, (size_t)ab->n * sizeof(float));
    if (!same) fprintf(stderr, "  attn %s: heads split at %d differ from one call\n", what, cut);
    rc = same ? 0 : -1;
out:
    free(att2);
    free(out2);
    return rc;
}

/* One shape, n_blk blocks, the last holding last_rows positions. */
static int att_case_ok(rng *r, const attn_shape *s, int n_blk, int last_rows) {
    const int H = s->n_heads, hd = s->head_dim;
    char what[112];
    snprintf(what, sizeof what, "heads %d dim %d gqa %d bs %d blocks %d last %d%s", H, hd, s->gqa,
             s->block_size, n_blk, last_rows, s->sinks ? " sinks" : "");
    att_blocks ab = {0};
    int rc = att_blocks_make(&ab, r, s, n_blk, last_rows);
    const size_t stride = (size_t)ab.n + 5; /* wider than needed: rows are stride apart */
    float *q = malloc((size_t)H * hd * sizeof(float)), *att = malloc((size_t)H * stride * sizeof(float));
    float *out = malloc((size_t)H * hd * sizeof(float)), mass[ATT_MAX_BLK];
    double *p = malloc((size_t)H * ab.n * sizeof(double)), *ro = malloc((size_t)H * hd * sizeof(double));
    double rm[ATT_MAX_BLK];
    if (rc || !q || !att || !out || !p || !ro) {
        rc = -1;
        goto out;
    }
    fill(r, q, (size_t)H * hd, 2.0f);
    att_naive(s, q, &ab, p, ro, rm);
    if ((rc = attn_f32(s, q, ab.blk, ab.rows, n_blk, att, stride, out, mass))) {
        fprintf(stderr, "  attn %s: returned %d\n", what, rc);
        goto out;
    }
    if ((rc = att_compare(s, &ab, att, stride, out, mass, p, ro, rm, what))) goto out;
    rc = att_split_same(s, q, &ab, att, stride, out, mass, what);
out:
    free(ab.buf);
    free(q);
    free(att);
    free(out);
    free(p);
    free(ro);
    return rc;
}

/* attn_f32 refuses what it cannot do, writing nothing: the backend then
 * runs its general code. Returns 0, or -1 after saying what it accepted. */
static int att_refusals(void) {
    rng r = {0x082EFA98EC4E6C89ULL};
    float q[64], att[64], out[64], mass[2];
    fill(&r, q, 64, 2.0f);
    for (int i = 0; i < 64; i++) out[i] = -1.0f;
    att_blocks ab = {0};

    /* head size 8 (stories260K): not a multiple of 16 */
    attn_shape s8 = {.n_heads = 2, .head_dim = 8, .kv_dim = 16, .block_size = 16, .gqa = 1};
    if (att_blocks_make(&ab, &r, &s8, 1, 5)) return -1;
    int rc8 = attn_f32(&s8, q, ab.blk, ab.rows, 1, att, 16, out, mass);
    free(ab.buf);

    /* att_stride below the positions to score */
    attn_shape s = {.n_heads = 2, .head_dim = 16, .kv_dim = 32, .block_size = 16, .gqa = 1};
    if (att_blocks_make(&ab, &r, &s, 2, 4)) return -1; /* 20 positions */
    int rcs = attn_f32(&s, q, ab.blk, ab.rows, 2, att, 19, out, mass);
    free(ab.buf);

    /* head ranges empty or past the heads */
    int rch = 0;
    if (att_blocks_make(&ab, &r, &s, 1, 4)) return -1;
    attn_f32_fn f = attn_f32_kernel(&s, cur_isa, NULL);
    if (f)
        rch = f(&s, q, ab.blk, ab.rows, 1, 1, 1, att, 16, out, mass) == -1 &&
                      f(&s, q, ab.blk, ab.rows, 1, 0, 3, att, 16, out, mass) == -1 &&
                      f(&s, q, ab.blk, ab.rows, 1, -1, 1, att, 16, out, mass) == -1
                  ? -1
                  : 0;
    else
        rch = -1;
    free(ab.buf);

    int written = 0;
    for (int i = 0; i < 64; i++) written += out[i] != -1.0f;
    if (rc8 != -1 || rcs != -1 || rch != -1 || written) {
        fprintf(stderr,
                "  attn refusals: head_dim 8 returned %d, stride 19 < 20 returned %d, bad head ranges %s, "
                "%d outputs written\n",
                rc8, rcs, rch == -1 ? "refused" : "accepted", written);
        return -1;
    }
    return 0;
}

static void attn_at_isa(void) {
    static const int shapes[][3] = {{2, 16, 1}, {6, 48, 1}, {4, 64, 2}, {8, 128, 4},
                                    {3, 32, 3}, {2, 80, 1}, {4, 112, 2}};
    enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };
    CK_CHECK_MSG(att_refusals() == 0, "unsupported shape or stride accepted");
    attn_shape s[N_SHAPES];
    int n_ok = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        s[i] = (attn_shape){.n_heads = shapes[i][0],
                            .head_dim = shapes[i][1],
                            .gqa = shapes[i][2],
                            .kv_dim = shapes[i][0] / shapes[i][2] * shapes[i][1],
                            .block_size = 16};
        n_ok += attn_f32_supported(&s[i]);
    }
    CK_CHECK_MSG(n_ok == N_SHAPES, "only %d of %d shapes supported", n_ok, N_SHAPES);
    rng r = {0x452821E638D01377ULL};
    /* 8 and 4 (short contexts' defaults, kv.h) and 20 put the kernels'
     * groups of 16 or 8 positions across the blocks' bounds */
    static const int block_sizes[] = {16, 8, 4, 20};
    enum { N_BS = sizeof block_sizes / sizeof block_sizes[0] };
    for (int i = 0; i < N_SHAPES; i++)
        for (int b = 0; b < N_BS; b++) {
            s[i].block_size = block_sizes[b];
            for (int nb = 1; nb <= ATT_MAX_BLK; nb++) {
                /* The last block partial; one row and a full block at the ends. */
                int bs = block_sizes[b];
                int last = nb == 1 ? 1 : nb == ATT_MAX_BLK ? bs : 1 + (int)(rng_next(&r) % (uint64_t)bs);
                CK_CHECK_MSG(att_case_ok(&r, &s[i], nb, last) == 0, "shape %d block size %d blocks %d", i, bs,
                             nb);
                /* gpt-oss's sink logits, in [-2, 4]: from none to most of a head's mass */
                float sinks[8];
                fill(&r, sinks, 8, 3.0f);
                for (int h = 0; h < 8; h++) sinks[h] += 1.0f;
                attn_shape ss = s[i];
                ss.sinks = sinks;
                CK_CHECK_MSG(att_case_ok(&r, &ss, nb, last) == 0, "shape %d block size %d blocks %d sinks", i,
                             bs, nb);
            }
        }
}

/* Every level from AVX2 this CPU runs (each has its kernel). */
static void test_attn_against_naive(void) {
    const int best = cpu_isa_detect();
    if (best < CPU_ISA_AVX2) {
        fprintf(stderr, "  skipped: no AVX2 on this CPU (the attention kernels are compiled, not run)\n");
        return;
    }
    for (cur_isa = CPU_ISA_AVX2; cur_isa <= best; cur_isa++) {
        fprintf(stderr, "  attention at %s\n", cpu_isa_name(cur_isa));
        attn_at_isa();
    }
    cur_isa = best;
}

int main(void) {
    cur_isa = cpu_isa_detect();
    CK_RUN(test_gemm_against_naive);
    CK_RUN(test_gemm_batch_invariant);
    CK_RUN(test_gemm_row);
    CK_RUN(test_attn_against_naive);
    return ck_test_summary();
}
