/* test_cpu_qdot.c - the quantized CPU products:
 *   cpu_qact.c:  the q8_0 / q8_1 / q8_K activation quantizers against
 *                quant.c's q8_0 (an independent copy of ggml's reference,
 *                itself checked against ggml) and against the formats'
 *                definitions (scale, rounding bound, block sums);
 *   cpu_qdot_*:  every dot kernel of every ISA level this CPU runs, forced
 *                in turn, against the portable C kernel and against an f32
 *                reference: the weights dequantized by quant_to_f32 (checked
 *                bit for bit against libggml elsewhere), the activations by
 *                their scales, summed in double. Tolerance: 1e-5 of the sum
 *                of |w a| (the integer sums are exact; what is left is the
 *                float rounding of the per-block scale products and of the
 *                sums across blocks, about 1e-7 of that a block);
 *   the multi-row kernels and the matrix driver against one dot at a time;
 *   cpu_features: the forced choice and its refusals.
 * AVX-512 kernels run only on a CPU that has AVX-512; elsewhere the test
 * says they were compiled, not run. Weights are random bytes (every pattern
 * is a valid block once its f16 scales are set finite and small), from a
 * local xorshift generator with fixed seeds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
#include "cpu_features.h"
#include "cpu_qact.h"
#include "cpu_qdot.h"
#include "quant.h"

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

/* uniform in [-1, 1) */
static float rng_f(rng *r) { return (float)((double)(rng_next(r) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static void fill_bytes(rng *r, void *p, size_t n) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rng_next(r);
}

/* a small positive f16 scale */
static uint16_t small_f16(rng *r, float lo, float hi) {
    return quant_f32_to_f16(lo + (hi - lo) * (0.5f + 0.5f * rng_f(r)));
}

/* ------------------------------------------------------ activations */

static void test_qact_q8_0_matches_quant(void) {
    rng r = {0x9E3779B97F4A7C15ULL};
    enum { K = 32 * 24 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = rng_f(&r) * (i % 7 == 0 ? 40.0f : 1.0f);
    for (int i = 64; i < 96; i++) x[i] = 0.0f; /* an all-zero block: d = 0, q = 0 */
    x[5] = 2.5f, x[6] = -2.5f;                 /* ties round away from zero (roundf) */
    qblock_q8_0 a[K / 32], b[K / 32];
    qact_q8_0(x, a, K);
    CK_CHECK(quant_from_f32(QUANT_Q8_0, x, b, K) == 0);
    CK_CHECK_MSG(!memcmp(a, b, sizeof a), "q8_0 activations differ from quant_from_f32");
    CK_CHECK(qact_row_bytes(QB_Q8_0, K) == sizeof a);
    CK_CHECK(qact_row_bytes(QB_Q8_0, 33) == 0 && qact_row_bytes(QB_Q8_K, 32 * 9) == 0);
    CK_CHECK(qact_row_bytes(QB_Q4_0, K) == 0 && qact_row(QB_Q4_0, x, a, K) == -1);
}

static void test_qact_q8_1(void) {
    rng r = {0xBF58476D1CE4E5B9ULL};
    enum { K = 32 * 8 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = rng_f(&r) * 3.0f;
    qblock_q8_1 y[K / 32];
    qblock_q8_0 z[K / 32];
    qact_q8_1(x, y, K);
    qact_q8_0(x, z, K);
    for (int i = 0; i < K / 32; i++) {
        /* the same d and q as q8_0 (llama.cpp's two references agree), plus s */
        CK_CHECK(y[i].d == z[i].d && !memcmp(y[i].qs, z[i].qs, 32));
        int sum = 0;
        float amax = 0;
        for (int j = 0; j < 32; j++)
            sum += y[i].qs[j], amax = fabsf(x[32 * i + j]) > amax ? fabsf(x[32 * i + j]) : amax;
        /* s from the unrounded d, as ggml */
        CK_CHECK(y[i].s == quant_f32_to_f16((float)sum * (amax / 127.0f)));
    }
}

/* q8_0s: the q8_0 row byte for byte, then each block's sum of q. */
static void test_qact_q8_0s(void) {
    rng r = {0x2545F4914F6CDD1DULL};
    enum { K = 32 * 5 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = rng_f(&r) * 7.0f;
    for (int i = 0; i < 32; i++) x[64 + i] = 1.0f; /* every q 127: the largest sum, 32 * 127 */
    qblock_q8_0 z[K / 32];
    _Alignas(16) unsigned char y[K / 32 * 36]; /* 2-aligned, as qact_q8_0s asks */
    CK_CHECK(qact_row_bytes(QACT_Q8_0S, K) == sizeof y && qact_row_bytes(QACT_Q8_0S, 48) == 0);
    CK_CHECK(qact_row(QACT_Q8_0S, x, y, K) == 0);
    qact_q8_0(x, z, K);
    CK_CHECK(!memcmp(y, z, sizeof z));
    for (int i = 0; i < K / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += z[i].qs[j];
        int16_t got;
        memcpy(&got, y + sizeof z + 2 * i, 2);
        CK_CHECK_MSG(got == sum, "block %d: sum %d, stored %d", i, sum, got);
    }
    int16_t top;
    memcpy(&top, y + sizeof z + 2 * 2, 2);
    CK_CHECK(top == 32 * 127);
}

/* Row r of the vectorized quantizers' test: random, and the cases their
 * lanes could get wrong. */
static void qact_case(rng *r, float *x, int n, int c) {
    for (int i = 0; i < n; i++) x[i] = rng_f(r) * (c % 3 == 0 ? 1e-3f : c % 3 == 1 ? 5.0f : 3e4f);
    switch (c % 9) {
    case 0: break;
    case 1: /* the largest |x| twice, + then -: the first gives the sign */
        x[n / 3] = 9.0f, x[n / 2] = -9.0f;
        break;
    case 2: /* -, then +; and a later equal one */ x[5] = -9.0f, x[n - 7] = 9.0f, x[n - 1] = -9.0f; break;
    case 3: /* ties of the rounding: multiples of max / 254 */
        for (int i = 0; i < n; i++) x[i] = (float)((int)(rng_next(r) % 255) - 127) * (1.0f / 254.0f);
        x[0] = 1.0f;
        break;
    case 4: /* zeros (a zero block), negative zeros, subnormals */
        for (int i = 0; i < n; i++) x[i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : 1e-40f * (float)(i % 5);
        break;
    case 5: /* all one value */
        for (int i = 0; i < n; i++) x[i] = -2.5f;
        break;
    case 6: /* a NaN and an infinity in some blocks: the portable code's */
        x[3] = NAN, x[n - 40] = -INFINITY;
        break;
    case 7: /* huge */
        for (int i = 0; i < n; i++) x[i] = rng_f(r) * 3e38f;
        break;
    default: /* one block's worth of zeros in the middle */
        for (int i = 256; i < 512 && i < n; i++) x[i] = 0.0f;
        break;
    }
}

/* qact_row_isa at every level from AVX2 this CPU runs writes the portable
 * quantizers' bytes, for every format it vectorizes. */
static void test_qact_isa_same_bytes(void) {
    const int best = cpu_isa_detect();
    if (best < CPU_ISA_AVX2) {
        fprintf(stderr, "  skipped: no AVX2 on this CPU (the vector quantizers are compiled, not run)\n");
        return;
    }
    static const int fmts[] = {QB_Q8_K, QB_Q8_0, QACT_Q8_0S, QB_Q8_1};
    enum { N = 256 * 4 };
    static float x[N];
    static unsigned char want[4 * N], got[4 * N];
    rng r = {0x2545F4914F6CDD1DULL};
    int cases = 0, bad = 0;
    for (int isa = CPU_ISA_AVX2; isa <= best; isa++)
        for (int f = 0; f < 4; f++)
            for (int c = 0; c < 90; c++) {
                qact_case(&r, x, N, c);
                const size_t nb = qact_row_bytes(fmts[f], N);
                memset(want, 0xA5, sizeof want), memset(got, 0x5A, sizeof got);
                CK_CHECK(qact_row(fmts[f], x, want, N) == 0);
                CK_CHECK(qact_row_isa(isa, fmts[f], x, got, N) == 0);
                cases++;
                if (memcmp(want, got, nb)) {
                    if (bad++ < 5)
                        fprintf(stderr, "  %s fmt %d case %d: bytes differ\n", cpu_isa_name(isa), fmts[f], c);
                }
            }
    CK_CHECK_MSG(bad == 0, "%d of %d rows differ", bad, cases);
    CK_CHECK(qact_row_isa(best, QB_Q8_K, x, got, 100) == -1);
}

/* q8_K: d = (the element of largest |x|) / -127, q = x / d rounded half to
 * even, at most 127; bsums the sums of 16. */
static void test_qact_q8_K(void) {
    rng r = {0x94D049BB133111EBULL};
    enum { K = 256 * 3 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = rng_f(&r) * (i < 256 ? 1.0f : 100.0f);
    for (int i = 512; i < 768; i++) x[i] = 0.0f;
    x[17] = -1.5f; /* the largest magnitude of block 0, negative: it maps to -127 */
    qblock_q8_K y[K / 256];
    qact_q8_K(x, y, K);
    CK_CHECK(y[0].d == 1.0f / (-127.0f / -1.5f));
    CK_CHECK(y[0].qs[17] == -127);
    CK_CHECK(y[2].d == 0.0f);
    for (int b = 0; b < K / 256; b++) {
        float amax = 0, max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[256 * b + j]) > amax) amax = fabsf(x[256 * b + j]), max = x[256 * b + j];
        if (b < 2) CK_CHECK(y[b].d == 1.0f / (-127.0f / max));
        for (int j = 0; j < 256; j++) {
            const float v = x[256 * b + j];
            if (b < 2) {
                const float iscale = -127.0f / max, t = iscale * v;
                CK_CHECK(y[b].qs[j] <= 127 && fabsf(t - (float)y[b].qs[j]) <= 0.5f);
                if (fabsf(t - (float)y[b].qs[j]) == 0.5f) CK_CHECK(y[b].qs[j] % 2 == 0); /* to even */
            } else {
                CK_CHECK(y[b].qs[j] == 0);
            }
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[b].qs[16 * g + j];
            CK_CHECK(y[b].bsums[g] == s);
        }
    }
}

/* ------------------------------------------------------ weights */

/* The types with kernels of this module, and their random blocks. */
static const int types[] = {QB_Q8_0, QB_Q4_0, QB_Q4_K, QB_Q6_K, QB_MXFP4};

static void random_row(rng *r, int type, void *w, int n) {
    const int nb = type == QB_Q4_K || type == QB_Q6_K ? n / QBLOCK_K : n / QBLOCK_32;
    for (int i = 0; i < nb; i++) switch (type) {
        case QB_Q8_0: {
            qblock_q8_0 *b = (qblock_q8_0 *)w + i;
            fill_bytes(r, b->qs, sizeof b->qs);
            b->d = small_f16(r, 1e-3f, 2e-2f);
            break;
        }
        case QB_Q4_0: {
            qblock_q4_0 *b = (qblock_q4_0 *)w + i;
            fill_bytes(r, b->qs, sizeof b->qs);
            b->d = small_f16(r, 1e-3f, 2e-2f);
            break;
        }
        case QB_MXFP4: { /* scales 2^-9 .. 2^-2 (levels up to 12 of them) */
            qblock_mxfp4 *b = (qblock_mxfp4 *)w + i;
            fill_bytes(r, b->qs, sizeof b->qs);
            b->e = (uint8_t)(119 + rng_next(r) % 8);
            break;
        }
        case QB_Q4_K: {
            qblock_q4_K *b = (qblock_q4_K *)w + i;
            fill_bytes(r, b, sizeof *b);
            b->d = small_f16(r, 1e-4f, 2e-3f);
            b->dmin = small_f16(r, 1e-4f, 2e-3f);
            break;
        }
        default: {
            qblock_q6_K *b = (qblock_q6_K *)w + i;
            fill_bytes(r, b, sizeof *b);
            b->d = small_f16(r, 1e-4f, 2e-3f);
            break;
        }
        }
}

static const qblock_q8_K *k_at(const void *a, int e) { return (const qblock_q8_K *)a + e / QBLOCK_K; }

/* The f32 reference: returns 0 and the dot and sum |w a| in double, or -1
 * when quant_to_f32 cannot read the type. */
static int ref_dot(int type, int act, const void *w, const void *a, int n, double *dot, double *mag) {
    float *xw = malloc((size_t)n * sizeof *xw);
    if (!xw || quant_to_f32(type, w, xw, (uint64_t)n)) {
        free(xw);
        return -1;
    }
    double d = 0, m = 0;
    for (int e = 0; e < n; e++) {
        double v;
        if (act == QB_Q8_K)
            v = (double)k_at(a, e)->d * k_at(a, e)->qs[e % QBLOCK_K];
        else
            v = (double)quant_f16_to_f32(((const qblock_q8_0 *)a)[e / 32].d) *
                ((const qblock_q8_0 *)a)[e / 32].qs[e % 32];
        d += (double)xw[e] * v;
        m += fabs((double)xw[e] * v);
    }
    free(xw);
    *dot = d;
    *mag = m;
    return 0;
}

static int close_enough(double got, double want, double mag) { return fabs(got - want) <= 1e-5 * mag + 1e-6; }

/* One type at one ISA level, rows of n elements. */
static void check_type(const cpu_qdot *qd, const cpu_qdot *qc, int type, int n, rng *r) {
    const cpu_qtype *t = cpu_qdot_type(qd, type), *tc = cpu_qdot_type(qc, type);
    CK_CHECK(t && tc);
    if (!t || !tc) return;
    enum { M = 9 }; /* >= the table's dot2_min_m, two full column groups and one more */
    const size_t wb = (size_t)(n / t->block) * t->block_bytes, ab = qact_row_bytes(t->act, n);
    unsigned char *w = malloc(wb), *a = malloc(ab * M);
    float *x = malloc((size_t)n * sizeof *x);
    CK_CHECK(w && a && x);
    if (!w || !a || !x) goto out;
    random_row(r, type, w, n);
    for (int m = 0; m < M; m++) {
        for (int i = 0; i < n; i++) x[i] = rng_f(r) * (1.0f + (float)m);
        CK_CHECK(qact_row(t->act, x, a + (size_t)m * ab, n) == 0);
    }
    int have_ref = 1;
    float s[M], sn[CPU_QDOT_NCOLS];
    for (int m = 0; m < M; m++) {
        const void *am = a + (size_t)m * ab;
        float sc;
        t->dot(n, &s[m], w, am);
        tc->dot(n, &sc, w, am);
        double want = 0, mag = 0;
        if (ref_dot(type, t->act, w, am, n, &want, &mag)) {
            have_ref = 0;
            mag = fabs((double)sc) * 10 + 1; /* no dequantizer: against C only */
            want = sc;
        }
        CK_CHECK_MSG(close_enough(s[m], sc, mag), "type %d n %d %s: %.9g, C %.9g", type, n, t->impl, s[m],
                     sc);
        CK_CHECK_MSG(close_enough(s[m], want, mag), "type %d n %d %s: %.9g, f32 reference %.9g (|w a| %.3g)",
                     type, n, t->impl, s[m], want, mag);
        float sg = 0;
        if (!cpu_vdot_generic(type, t->act, n, &sg, w, am))
            CK_CHECK_MSG(close_enough(sg, want, mag), "type %d generic %.9g, reference %.9g", type, sg, want);
    }
    if (!have_ref)
        fprintf(stderr, "  type %d: quant_to_f32 lacks it, compared with the C kernel only\n", type);
    if (t->dotn)
        for (int nc = 1; nc <= CPU_QDOT_NCOLS; nc++) {
            t->dotn(n, nc, sn, w, a, ab);
            for (int c = 0; c < nc; c++)
                CK_CHECK_MSG(close_enough(sn[c], s[c], fabs(s[c]) * 10 + 1),
                             "type %d dotn %d col %d: %.9g vs %.9g", type, nc, c, sn[c], s[c]);
        }
    /* dot2: this row and another, each against 1..CPU_QDOT_NCOLS columns,
     * against the one-row kernel and (second row) the f32 reference */
    unsigned char *w2 = t->dot2 ? malloc(2 * wb) : NULL;
    if (w2) {
        memcpy(w2, w, wb);
        random_row(r, type, w2 + wb, n);
        for (int nc = 1; nc <= CPU_QDOT_NCOLS; nc++) {
            float s2[2 * CPU_QDOT_NCOLS];
            t->dot2(n, nc, s2, w2, wb, a, ab);
            for (int c = 0; c < nc; c++) {
                const void *ac = a + (size_t)c * ab;
                float s1;
                t->dot(n, &s1, w2 + wb, ac);
                double want = s1, mag = fabs((double)s1) * 10 + 1;
                (void)ref_dot(type, t->act, w2 + wb, ac, n, &want, &mag);
                CK_CHECK_MSG(close_enough(s2[c], s[c], fabs(s[c]) * 10 + 1),
                             "type %d n %d dot2 %d row 0 col %d: %.9g vs %.9g", type, n, nc, c, s2[c], s[c]);
                CK_CHECK_MSG(close_enough(s2[CPU_QDOT_NCOLS + c], want, mag),
                             "type %d n %d dot2 %d row 1 col %d: %.9g, f32 reference %.9g", type, n, nc, c,
                             s2[CPU_QDOT_NCOLS + c], want);
                CK_CHECK_MSG(close_enough(s2[CPU_QDOT_NCOLS + c], s1, mag),
                             "type %d dot2 row 1: %.9g vs dot %.9g", type, s2[CPU_QDOT_NCOLS + c], s1);
            }
        }
        free(w2);
    }
    /* the driver: 3 rows (the same row at 3 places), M columns, a wider y, accumulate */
    unsigned char *w3 = malloc(3 * wb);
    CK_CHECK(w3 != NULL);
    if (w3) {
        for (int i = 0; i < 3; i++) memcpy(w3 + i * wb, w, wb);
        cpu_qmat qm = {w3, t, 3, n, wb, 0};
        enum { LDY = 5 };
        float y[M * LDY];
        for (int mm = 1; mm <= M; mm += M - 1) { /* batch 1 and a batch: the driver's paths differ */
            for (int i = 0; i < M * LDY; i++) y[i] = 1.0f;
            cpu_qdot_rows(y, LDY, a, ab, &qm, mm, 1, 3, 1); /* rows 1, 2 accumulate onto 1 */
            for (int m = 0; m < M; m++)
                for (int c = 0; c < LDY; c++) {
                    const float want = m < mm && (c == 1 || c == 2) ? 1.0f + s[m] : 1.0f;
                    CK_CHECK_MSG(close_enough(y[m * LDY + c], want, fabs(s[m]) * 10 + 1),
                                 "driver M %d m %d c %d: %g vs %g", mm, m, c, y[m * LDY + c], want);
                }
        }
        free(w3);
    }
out:
    free(w);
    free(a);
    free(x);
}

static void test_kernels_every_isa(void) {
    cpu_qdot qc;
    cpu_qdot_init(&qc, CPU_ISA_C);
    const int best = cpu_isa_detect();
    for (int isa = CPU_ISA_C; isa < CPU_ISA_COUNT; isa++) {
        if (isa > best) {
            fprintf(stderr, "  %s: not on this CPU (compiled, not run)\n", cpu_isa_name(isa));
            continue;
        }
        cpu_qdot qd;
        cpu_qdot_init(&qd, isa);
        rng r = {0xD1B54A32D192ED03ULL + (uint64_t)isa};
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            const cpu_qtype *t = cpu_qdot_type(&qd, types[i]);
            fprintf(stderr, "  isa %s type %d: kernel %s%s%s, x8 %s\n", cpu_isa_name(isa), types[i],
                    t ? t->impl : "none", t && t->dotn ? " (+ multi-row)" : "",
                    t && t->dot2 ? " (+ two-row)" : "", t && t->x8_impl ? t->x8_impl : "none");
            static const int ns[] = {256, 768, 2048, 256 * 11};
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) check_type(&qd, &qc, types[i], ns[k], &r);
            if (types[i] == QB_Q8_0 || types[i] == QB_Q4_0 || types[i] == QB_MXFP4)
                check_type(&qd, &qc, types[i], 32 * 3, &r);
        }
    }
}

/* ------------------------------------------------------ the x8 layout */

/* The layout against qblock.h's definition, read back element by element:
 * row r, element e of an x8 group equals the source row's (the oracle is
 * the source rows' own nibbles); the n % 8 last rows are copied. */
static void test_repack8_layout(void) {
    cpu_qdot qd;
    cpu_qdot_init(&qd, CPU_ISA_C);
    const cpu_qtype *t = cpu_qdot_type(&qd, QB_Q4_0);
    enum { N = 19, K = 32 * 3 };
    const size_t rb = (size_t)(K / 32) * sizeof(qblock_q4_0);
    unsigned char src[N * (K / 32) * 18], dst[sizeof src];
    rng r = {0x5851F42D4C957F2DULL};
    fill_bytes(&r, src, sizeof src);
    CK_CHECK(cpu_qdot_repack8(t, dst, src, N, K) == 0);
    for (int row = 0; row < N / 8 * 8; row++) {
        const qblock_q4_0x8 *g = (const qblock_q4_0x8 *)(dst + (size_t)(row / 8) * 8 * rb);
        const int lr = row % 8;
        for (int i = 0; i < K / 32; i++) {
            const qblock_q4_0 *b = (const qblock_q4_0 *)(src + (size_t)row * rb) + i;
            CK_CHECK(g[i].d[lr] == b->d);
            for (int e = 0; e < 32;
                 e++) { /* element e: low nibble of qs[e] (e < 16), else high of qs[e - 16] */
                const int want = e < 16 ? b->qs[e] & 15 : b->qs[e - 16] >> 4;
                const int j = e % 16, got_byte = g[i].qs[32 * (j / 4) + 4 * lr + j % 4];
                const int got = e < 16 ? got_byte & 15 : got_byte >> 4;
                CK_CHECK_MSG(got == want, "row %d block %d element %d: %d vs %d", row, i, e, got, want);
            }
        }
    }
    CK_CHECK(!memcmp(dst + (size_t)16 * rb, src + (size_t)16 * rb, 3 * rb));
    CK_CHECK(cpu_qdot_repack8(t, dst, src, N, K + 16) == CK_EINVAL);
    /* Q8_0: row r, element e at qs[32 (e / 4) + 4 r + e % 4] */
    const cpu_qtype *t8 = cpu_qdot_type(&qd, QB_Q8_0);
    const size_t rb8 = (size_t)(K / 32) * sizeof(qblock_q8_0);
    unsigned char src8[N * (K / 32) * 34], dst8[sizeof src8];
    fill_bytes(&r, src8, sizeof src8);
    CK_CHECK(cpu_qdot_repack8(t8, dst8, src8, N, K) == 0);
    for (int row = 0; row < 16; row++) {
        const qblock_q8_0x8 *g = (const qblock_q8_0x8 *)(dst8 + (size_t)(row / 8) * 8 * rb8);
        for (int i = 0; i < K / 32; i++) {
            const qblock_q8_0 *b = (const qblock_q8_0 *)(src8 + (size_t)row * rb8) + i;
            CK_CHECK(g[i].d[row % 8] == b->d);
            for (int e = 0; e < 32; e++) CK_CHECK(g[i].qs[32 * (e / 4) + 4 * (row % 8) + e % 4] == b->qs[e]);
        }
    }
    CK_CHECK(!memcmp(dst8 + (size_t)16 * rb8, src8 + (size_t)16 * rb8, 3 * rb8));
    CK_CHECK(cpu_qdot_repack8(cpu_qdot_type(&qd, QB_Q5_K), dst, src, 8, 256) == CK_EINVAL);
    /* MXFP4: each element of the x8 groups (2^(e - 128) times the doubled
     * level, qblock.h) against quant_to_f32 of the source row */
    {
        const cpu_qtype *tm = cpu_qdot_type(&qd, QB_MXFP4);
        const size_t rbm = (size_t)(K / 32) * sizeof(qblock_mxfp4);
        unsigned char srcm[N * (K / 32) * 17], dstm[sizeof srcm];
        fill_bytes(&r, srcm, sizeof srcm);
        for (int b = 0; b < N * (K / 32); b++) srcm[17 * b] = (uint8_t)(100 + b % 50); /* finite scales */
        CK_CHECK(cpu_qdot_x8_bytes(tm, N, K) == sizeof srcm);
        CK_CHECK(cpu_qdot_repack8(tm, dstm, srcm, N, K) == 0);
        for (int row = 0; row < 16; row++) {
            float xr[K];
            CK_CHECK(quant_to_f32(QB_MXFP4, srcm + (size_t)row * rbm, xr, K) == 0);
            const qblock_mxfp4x8 *g = (const qblock_mxfp4x8 *)(dstm + (size_t)(row / 8) * 8 * rbm);
            const int lr = row % 8;
            for (int i = 0; i < K / 32; i++)
                for (int e = 0; e < 32; e++) {
                    const int j = e % 16, byte = g[i].qs[32 * (j / 4) + 4 * lr + j % 4];
                    const float got =
                        ldexpf((float)qblock_mxfp4_values[e < 16 ? byte & 15 : byte >> 4], g[i].e[lr] - 128);
                    CK_CHECK_MSG(got == xr[32 * i + e], "mxfp4 x8 row %d element %d: %g vs %g", row,
                                 32 * i + e, got, xr[32 * i + e]);
                }
        }
        CK_CHECK(!memcmp(dstm + (size_t)16 * rbm, srcm + (size_t)16 * rbm, 3 * rbm));
    }
    /* Q4_K: each element of the x8 groups, dequantized from the unpacked
     * scales and mins, against quant_to_f32 of the source row (the
     * dequantizer checked bit for bit against libggml) */
    const cpu_qtype *tk = cpu_qdot_type(&qd, QB_Q4_K);
    enum { NK = 11, KK = 512 };
    const size_t rbk = (size_t)(KK / 256) * sizeof(qblock_q4_K), xk = cpu_qdot_x8_bytes(tk, NK, KK);
    CK_CHECK(xk == (size_t)(KK / 256) * sizeof(qblock_q4_Kx8) + 3 * rbk);
    unsigned char *srck = malloc(NK * rbk), *dstk = malloc(xk);
    float row[KK];
    CK_CHECK(srck && dstk);
    if (!srck || !dstk) goto done;
    for (int rr = 0; rr < NK; rr++) random_row(&r, QB_Q4_K, srck + rr * rbk, KK);
    CK_CHECK(cpu_qdot_repack8(tk, dstk, srck, NK, KK) == 0);
    for (int rr = 0; rr < 8; rr++) {
        CK_CHECK(quant_to_f32(QB_Q4_K, srck + rr * rbk, row, KK) == 0);
        for (int i = 0; i < KK / 256; i++) {
            const qblock_q4_Kx8 *g = (const qblock_q4_Kx8 *)dstk + i;
            const float d = quant_f16_to_f32(g->d[rr]), dmin = quant_f16_to_f32(g->dmin[rr]);
            for (int e = 0; e < 256; e++) {
                const int sb = e / 32, j = e / 64, l = e % 32,
                          q = g->qs[32 * (8 * j + l / 4) + 4 * rr + l % 4];
                const int nib = sb % 2 ? q >> 4 : q & 15;
                const float want = row[256 * i + e];
                const float got = d * g->sc[sb][rr] * nib - dmin * g->m[sb / 2][rr][sb % 2];
                CK_CHECK_MSG(fabsf(got - want) <= 1e-6f * (fabsf(want) + d * 63 * 15 + dmin * 63),
                             "q4_K x8 row %d element %d: %g vs %g", rr, 256 * i + e, got, want);
            }
        }
    }
    CK_CHECK(!memcmp(dstk + (size_t)(KK / 256) * sizeof(qblock_q4_Kx8), srck + 8 * rbk, 3 * rbk));
    /* Q6_K: each element read back by qblock.h's definition of the x8
     * bits, d * sc * (q - 32), against quant_to_f32 of the source row */
    {
        const cpu_qtype *t6 = cpu_qdot_type(&qd, QB_Q6_K);
        const size_t rb6 = (size_t)(KK / 256) * sizeof(qblock_q6_K), x6 = cpu_qdot_x8_bytes(t6, NK, KK);
        CK_CHECK(x6 == (size_t)(KK / 256) * sizeof(qblock_q6_Kx8) + 3 * rb6 && x6 == NK * rb6);
        unsigned char *src6 = malloc(NK * rb6), *dst6 = malloc(x6);
        CK_CHECK(src6 && dst6);
        if (src6 && dst6) {
            for (int rr = 0; rr < NK; rr++) random_row(&r, QB_Q6_K, src6 + rr * rb6, KK);
            CK_CHECK(cpu_qdot_repack8(t6, dst6, src6, NK, KK) == 0);
            for (int rr = 0; rr < 8; rr++) {
                CK_CHECK(quant_to_f32(QB_Q6_K, src6 + rr * rb6, row, KK) == 0);
                for (int i = 0; i < KK / 256; i++) {
                    const qblock_q6_Kx8 *g = (const qblock_q6_Kx8 *)dst6 + i;
                    const float d = quant_f16_to_f32(g->d[rr]);
                    for (int e = 0; e < 256; e++) {
                        const int tt = e / 16, wq = e % 16 / 4, b = e % 4;
                        const uint8_t *q = g->qs + 96 * tt + 4 * rr + b;
                        const int qv =
                            wq < 3 ? q[32 * wq] & 63 : q[0] >> 6 | (q[32] >> 6) << 2 | (q[64] >> 6) << 4;
                        const float want = row[256 * i + e], got = d * g->sc[tt / 2][rr][tt % 2] * (qv - 32);
                        CK_CHECK_MSG(fabsf(got - want) <= 1e-6f * (fabsf(want) + d * 128 * 32),
                                     "q6_K x8 row %d element %d: %g vs %g", rr, 256 * i + e, got, want);
                    }
                }
            }
            CK_CHECK(!memcmp(dst6 + (size_t)(KK / 256) * sizeof(qblock_q6_Kx8), src6 + 8 * rb6, 3 * rb6));
        }
        free(src6);
        free(dst6);
    }
done:
    free(srck);
    free(dstk);
}

/* dot8 and the driver over an x8 matrix at one ISA level: n_rows random
 * Q4_0, Q8_0, Q4_K, Q6_K or MXFP4 rows (groups and a tail), every row against the f32 reference and the
 * one-row kernel, at 1..CPU_QDOT_NCOLS columns and through cpu_qdot_rows
 * with ranges that start and end inside groups. extreme: every weight at
 * its type's extreme and every activation 127 or -127 (the int16 sums'
 * bound). */
static void check_x8(const cpu_qdot *qd, int type, int n, int n_rows, int extreme, rng *r) {
    const cpu_qtype *t = cpu_qdot_type(qd, type);
    CK_CHECK(t && t->dot8);
    if (!t || !t->dot8) return;
    enum { M = 9 };
    const size_t rb = (size_t)(n / t->block) * t->block_bytes, ab = qact_row_bytes(t->act, n);
    const size_t gb = (size_t)(n / t->block) * t->x8_bytes; /* bytes of a group of 8 rows */
    unsigned char *w = malloc(rb * n_rows), *w8 = malloc(cpu_qdot_x8_bytes(t, n_rows, n)),
                  *a = malloc(ab * M);
    float *x = malloc((size_t)n * sizeof *x), *want = malloc(sizeof(float) * n_rows * M),
          *y = malloc(sizeof(float) * n_rows * M);
    double *mag = malloc(sizeof(double) * n_rows * M);
    CK_CHECK(w && w8 && a && x && want && y && mag);
    if (!w || !w8 || !a || !x || !want || !y || !mag) goto out;
    for (int row = 0; row < n_rows; row++) {
        random_row(r, type, w + row * rb, n);
        if (type == QB_MXFP4) /* E8M0's subnormal scales (e 0, 1) and a large one, lane by lane */
            ((qblock_mxfp4 *)(w + row * rb))->e = (uint8_t[]){0, 1, 2, 200}[row % 4];
        if (extreme) { /* Q4_0: nibbles 15 or 0; Q8_0: 127 or -128; MXFP4: levels +-12; Q4_K: also scales and mins 63;
                          Q6_K: quants 63 or 0 (the int16 pair sums' bound), scales 127 or -128 */
            for (int i = 0; i < n / t->block; i++) {
                if (type == QB_Q6_K) {
                    qblock_q6_K *b = (qblock_q6_K *)(w + row * rb) + i;
                    memset(b->ql, row % 2 ? 0xff : 0, sizeof b->ql);
                    memset(b->qh, row % 2 ? 0xff : 0, sizeof b->qh);
                    memset(b->scales, row % 4 < 2 ? 0x7f : 0x80, sizeof b->scales);
                } else if (type == QB_Q4_K) {
                    qblock_q4_K *b = (qblock_q4_K *)(w + row * rb) + i;
                    memset(b->qs, row % 2 ? 0xff : 0, sizeof b->qs);
                    memset(b->scales, 0xff, sizeof b->scales);
                } else if (type == QB_Q4_0)
                    memset(((qblock_q4_0 *)(w + row * rb))[i].qs, row % 2 ? 0xff : 0, 16);
                else if (type == QB_MXFP4) /* levels 12 (+12: 24, the pair sums' bound) or -12 */
                    memset(((qblock_mxfp4 *)(w + row * rb))[i].qs, row % 2 ? 0x77 : 0xff, 16);
                else
                    memset(((qblock_q8_0 *)(w + row * rb))[i].qs, row % 2 ? 0x7f : 0x80, 32);
            }
        }
    }
    for (int m = 0; m < M; m++) {
        for (int i = 0; i < n; i++) x[i] = extreme ? (m % 2 ? 1.0f : -1.0f) : rng_f(r) * (1.0f + (float)m);
        CK_CHECK(qact_row(t->act, x, a + (size_t)m * ab, n) == 0);
    }
    for (int row = 0; row < n_rows; row++)
        for (int m = 0; m < M; m++) {
            double d = 0, mg = 0;
            CK_CHECK(ref_dot(type, t->act, w + row * rb, a + (size_t)m * ab, n, &d, &mg) == 0);
            want[row * M + m] = (float)d;
            mag[row * M + m] = mg;
        }
    CK_CHECK(cpu_qdot_repack8(t, w8, w, n_rows, n) == 0);
    for (int g = 0; g < n_rows / 8; g++)
        for (int nc = 1; nc <= CPU_QDOT_NCOLS; nc++) {
            float s[8 * CPU_QDOT_NCOLS];
            t->dot8(n, nc, s, w8 + (size_t)g * gb, a + ab, ab); /* columns 1.. */
            for (int c = 0; c < nc; c++)
                for (int j = 0; j < 8; j++) {
                    const int row = 8 * g + j, m = 1 + c;
                    float s1;
                    t->dot(n, &s1, w + row * rb, a + (size_t)m * ab);
                    CK_CHECK_MSG(close_enough(s[8 * c + j], want[row * M + m], mag[row * M + m]),
                                 "%s dot8 n %d nc %d row %d col %d: %.9g, f32 reference %.9g", t->x8_impl, n,
                                 nc, row, m, s[8 * c + j], want[row * M + m]);
                    CK_CHECK_MSG(close_enough(s[8 * c + j], s1, mag[row * M + m]),
                                 "%s dot8 row %d col %d: %.9g, dot %.9g", t->x8_impl, row, m, s[8 * c + j],
                                 s1);
                    /* MXFP4's C kernels do the same steps in the same order */
                    if (type == QB_MXFP4 && !strcmp(t->x8_impl, "c") && !strcmp(t->impl, "c"))
                        CK_CHECK_MSG(s[8 * c + j] == s1, "mxfp4 c dot8 row %d col %d: %.9g, dot %.9g", row, m,
                                     s[8 * c + j], s1);
                }
        }
    /* the driver: ranges inside groups, into the tail, accumulating onto 1 */
    cpu_qmat qm = {w8, t, n_rows, n, rb, 1};
    const int ranges[][2] = {{0, n_rows}, {3, n_rows - 2}, {9, 10}, {5, 8}, {n_rows - 1, n_rows}};
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
        for (int mm = 1; mm <= M; mm += M - 1) {
            const int r0 = ranges[k][0], r1 = ranges[k][1];
            for (int i = 0; i < n_rows * M; i++) y[i] = 1.0f;
            cpu_qdot_rows(y, n_rows, a, ab, &qm, mm, r0, r1, 1);
            for (int m = 0; m < M; m++)
                for (int row = 0; row < n_rows; row++) {
                    const int in = m < mm && row >= r0 && row < r1;
                    const double wv = in ? 1.0 + want[row * M + m] : 1.0, mg = in ? mag[row * M + m] : 0;
                    CK_CHECK_MSG(close_enough(y[m * n_rows + row], wv, mg),
                                 "%s driver rows [%d, %d) M %d: row %d col %d %.9g vs %.9g", t->x8_impl, r0,
                                 r1, mm, row, m, y[m * n_rows + row], wv);
                }
        }
out:
    free(w), free(w8), free(a), free(x), free(want), free(y), free(mag);
}

static void test_x8_every_isa(void) {
    const int best = cpu_isa_detect();
    for (int isa = CPU_ISA_C; isa < CPU_ISA_COUNT; isa++) {
        if (isa > best) continue; /* said by test_kernels_every_isa */
        cpu_qdot qd;
        cpu_qdot_init(&qd, isa);
        rng r = {0xA0761D6478BD642FULL + (uint64_t)isa};
        static const int ns[] = {32, 96, 256, 768, 2048};
        static const int x8types[] = {QB_Q4_0, QB_Q8_0, QB_Q4_K, QB_Q6_K, QB_MXFP4};
        for (int ty = 0; ty < 5; ty++) {
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                if (ns[k] % cpu_qdot_type(&qd, x8types[ty])->block) continue;
                check_x8(&qd, x8types[ty], ns[k], 19, 0, &r);
                check_x8(&qd, x8types[ty], ns[k], 16, 1, &r);
            }
            check_x8(&qd, x8types[ty], 256, 11, 0, &r);
        }
    }
}

/* The 512-bit x8 kernels (AVX-512, VNNI) sum exactly in integers and then
 * do the AVX2 kernels' float work in their order, so their results are the
 * AVX2 ones bit for bit: a model's logits do not depend on the level. */
static void test_x8_same_bits_as_avx2(void) {
    const int best = cpu_isa_detect();
    if (best <= CPU_ISA_AVX2) {
        fprintf(stderr, "  no AVX-512 on this CPU: nothing to compare\n");
        return;
    }
    cpu_qdot q2;
    cpu_qdot_init(&q2, CPU_ISA_AVX2);
    static const int x8types[] = {QB_Q4_0, QB_Q8_0, QB_Q4_K, QB_Q6_K, QB_MXFP4};
    enum { N = 2048, ROWS = 8 };
    rng r = {0x94D049BB133111EBULL};
    for (int ty = 0; ty < 5; ty++) {
        const cpu_qtype *t2 = cpu_qdot_type(&q2, x8types[ty]);
        const size_t rb = (size_t)(N / t2->block) * t2->block_bytes, ab = qact_row_bytes(t2->act, N);
        unsigned char *w = malloc(rb * ROWS), *w8 = malloc(cpu_qdot_x8_bytes(t2, ROWS, N)),
                      *a = malloc(ab * CPU_QDOT_NCOLS);
        float *x = malloc(sizeof(float) * N);
        CK_CHECK(w && w8 && a && x);
        if (!w || !w8 || !a || !x) goto next;
        for (int row = 0; row < ROWS; row++) random_row(&r, x8types[ty], w + row * rb, N);
        for (int c = 0; c < CPU_QDOT_NCOLS; c++) {
            for (int i = 0; i < N; i++) x[i] = rng_f(&r) * (1.0f + (float)c);
            CK_CHECK(qact_row(t2->act, x, a + (size_t)c * ab, N) == 0);
        }
        CK_CHECK(cpu_qdot_repack8(t2, w8, w, ROWS, N) == 0);
        for (int isa = CPU_ISA_AVX512; isa <= best; isa++) {
            cpu_qdot qd;
            cpu_qdot_init(&qd, isa);
            const cpu_qtype *t = cpu_qdot_type(&qd, x8types[ty]);
            for (int nc = 1; nc <= CPU_QDOT_NCOLS; nc++) {
                float s2[8 * CPU_QDOT_NCOLS], s[8 * CPU_QDOT_NCOLS];
                t2->dot8(N, nc, s2, w8, a, ab);
                t->dot8(N, nc, s, w8, a, ab);
                CK_CHECK_MSG(!memcmp(s, s2, sizeof(float) * 8 * (size_t)nc),
                             "%s type %d nc %d: %.9g, avx2 %.9g", t->x8_impl, x8types[ty], nc, s[0], s2[0]);
            }
        }
    next:
        free(w), free(w8), free(a), free(x);
    }
}

/* The table: every type has a kernel at every level, partner formats as
 * qblock.h says, block sizes and bytes as the GGUF format's. */
static void test_table(void) {
    static const struct {
        int type, act, block, bytes;
    } want[] = {
        {QB_Q8_0, QACT_Q8_0S, 32, 34},  {QB_Q4_0, QACT_Q8_0S, 32, 18}, {QB_Q4_1, QB_Q8_1, 32, 20},
        {QB_Q5_0, QB_Q8_0, 32, 22},     {QB_Q5_1, QB_Q8_1, 32, 24},    {QB_IQ4_NL, QB_Q8_0, 32, 18},
        {QB_Q2_K, QB_Q8_K, 256, 84},    {QB_Q3_K, QB_Q8_K, 256, 110},  {QB_Q4_K, QB_Q8_K, 256, 144},
        {QB_Q5_K, QB_Q8_K, 256, 176},   {QB_Q6_K, QB_Q8_K, 256, 210},  {QB_IQ4_XS, QB_Q8_K, 256, 136},
        {QB_MXFP4, QACT_Q8_0S, 32, 17},
    };
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        cpu_qdot qd;
        cpu_qdot_init(&qd, isa);
        CK_CHECK(qd.isa == isa);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const cpu_qtype *t = cpu_qdot_type(&qd, want[i].type);
            CK_CHECK_MSG(t && t->dot && t->act == want[i].act && t->block == want[i].block &&
                             t->block_bytes == want[i].bytes,
                         "isa %d type %d", isa, want[i].type);
        }
        CK_CHECK(!cpu_qdot_type(&qd, QB_F32) && !cpu_qdot_type(&qd, QB_F16) && !cpu_qdot_type(&qd, QB_BF16));
        /* Q4_0 runs interleaved at every level (the memory plan must not
         * depend on the ISA); no other type has that layout */
        CK_CHECK(cpu_qdot_type(&qd, QB_Q4_0)->dot8 && cpu_qdot_type(&qd, QB_Q8_0)->dot8 &&
                 cpu_qdot_type(&qd, QB_Q4_K)->dot8 && cpu_qdot_type(&qd, QB_Q6_K)->dot8 &&
                 !cpu_qdot_type(&qd, QB_Q5_K)->dot8);
        /* at C, our four types run their C kernels, not the generic code */
        if (isa == CPU_ISA_C) CK_CHECK(!strcmp(cpu_qdot_type(&qd, QB_Q4_K)->impl, "c"));
        if (isa >= CPU_ISA_AVX2) CK_CHECK(!strcmp(cpu_qdot_type(&qd, QB_Q4_K)->impl, "avx2"));
        /* MXFP4 has a kernel of its own at C, AVX2 and AVX-512 (VNNI runs
         * the AVX-512 one), never the generic code; x8 at every level */
        const cpu_qtype *mx = cpu_qdot_type(&qd, QB_MXFP4);
        const char *mx_want = isa == CPU_ISA_C      ? "c"
                              : isa == CPU_ISA_AVX2 ? "avx2"
                                                    : cpu_isa_name(CPU_ISA_AVX512);
        CK_CHECK_MSG(mx && !strcmp(mx->impl, mx_want) && mx->dot8 && mx->x8_bytes == 136, "isa %d mxfp4 %s",
                     isa, mx ? mx->impl : "none");
        /* the x8 kernels exist at every level: each level runs its own */
        for (int ty = 0; ty < 5; ty++) {
            static const int x8types[] = {QB_Q4_0, QB_Q8_0, QB_Q4_K, QB_Q6_K, QB_MXFP4};
            const cpu_qtype *t = cpu_qdot_type(&qd, x8types[ty]);
            CK_CHECK_MSG(t->x8_impl && !strcmp(t->x8_impl, cpu_isa_name(isa)), "isa %d type %d x8 %s", isa,
                         x8types[ty], t->x8_impl ? t->x8_impl : "none");
        }
        CK_CHECK(!cpu_qdot_type(&qd, QB_Q5_K)->x8_impl);
    }
}

static void test_isa_select(void) {
    char err[200];
    const int best = cpu_isa_detect();
    fprintf(stderr, "  this CPU: %s\n", cpu_isa_name(best));
    unsetenv(CPU_KERNELS_ENV);
    CK_CHECK(cpu_isa_select(err, sizeof err) == best);
    setenv(CPU_KERNELS_ENV, "c", 1);
    CK_CHECK(cpu_isa_select(err, sizeof err) == CPU_ISA_C);
    setenv(CPU_KERNELS_ENV, "sse9", 1);
    CK_CHECK(cpu_isa_select(err, sizeof err) == CK_EINVAL && strstr(err, "sse9"));
    if (best < CPU_ISA_VNNI) {
        setenv(CPU_KERNELS_ENV, "vnni", 1);
        CK_CHECK(cpu_isa_select(err, sizeof err) == CK_EUNSUPPORTED && strstr(err, cpu_isa_name(best)));
    }
    setenv(CPU_KERNELS_ENV, "", 1);
    CK_CHECK(cpu_isa_select(err, sizeof err) == best);
    unsetenv(CPU_KERNELS_ENV);
    for (int i = 0; i < CPU_ISA_COUNT; i++) CK_CHECK(cpu_isa_from_name(cpu_isa_name(i)) == i);
    CK_CHECK(cpu_isa_from_name(NULL) == -1 && cpu_isa_name(CPU_ISA_COUNT) == NULL);
    char model[64];
    CK_CHECK(strlen(cpu_model_name(model, sizeof model)) > 0);
}

int main(void) {
    CK_RUN(test_qact_q8_0_matches_quant);
    CK_RUN(test_qact_q8_1);
    CK_RUN(test_qact_q8_K);
    CK_RUN(test_qact_q8_0s);
    CK_RUN(test_qact_isa_same_bytes);
    CK_RUN(test_repack8_layout);
    CK_RUN(test_table);
    CK_RUN(test_kernels_every_isa);
    CK_RUN(test_x8_every_isa);
    CK_RUN(test_x8_same_bits_as_avx2);
    CK_RUN(test_isa_select);
    return ck_test_summary();
}
