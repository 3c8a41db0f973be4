/* test_cpu_qgemm.c - the 16-row tiles of x8 matrices (cpu_qgemm.h) and
 * their driver, at every ISA level this CPU runs, forced in turn:
 *   - each tile against the x8 kernel of the same level (cpu_vdot8_*), bit
 *     for bit: the same exact integer sums, then the same float steps in
 *     the same order, so a model's outputs do not depend on which ran;
 *   - the driver (cpu_qdot_rows from CPU_QGEMM_MIN_M activation rows on:
 *     ranges that start and end inside groups, a lone last group, the
 *     n % 8 tail rows, several L2 blocks of groups, accumulating) against
 *     the same matrix one activation row at a time (the x8 kernels' path),
 *     bit for bit on the x8 rows, and against an f32 reference (weights dequantized by
 *     quant_to_f32, activations by their scales, summed in double) within
 *     1e-5 of sum |w a|;
 *   - extreme operands: every weight at its type's extreme, every
 *     activation +-127 (the int32 and int16 sums' bounds);
 *   - the table: which types have tiles at which level.
 * This CPU has no AMX: no tile of it is written. Weights are random bytes
 * (valid blocks once their f16 scales are small), from a fixed-seed
 * xorshift generator. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_test.h"
#include "cpu_features.h"
#include "cpu_qact.h"
#include "cpu_qdot.h"
#include "cpu_qgemm.h"
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

static float rng_f(rng *r) { return (float)((double)(rng_next(r) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static uint16_t small_f16(rng *r, float lo, float hi) {
    return quant_f32_to_f16(lo + (hi - lo) * (float)(rng_next(r) % 1000) / 1000.0f);
}

/* Random blocks of a type (random bytes, then small f16 scales), or with
 * extreme: every quant at its type's extreme by row (Q4_0 nibbles 15 or
 * 0, Q8_0 127 or -128, Q4_K nibbles and 6-bit scales and mins 63, Q6_K
 * quants 63 or 0 and scales 127 or -128). */
static void random_row(rng *r, int type, unsigned char *w, int n, int extreme, int row) {
    const int kq = type == QB_Q4_K || type == QB_Q6_K;
    const size_t bb = type == QB_Q4_0   ? sizeof(qblock_q4_0)
                      : type == QB_Q8_0 ? sizeof(qblock_q8_0)
                      : type == QB_Q4_K ? sizeof(qblock_q4_K)
                                        : sizeof(qblock_q6_K);
    for (int i = 0; i < n / (kq ? QBLOCK_K : QBLOCK_32); i++) {
        unsigned char *b = w + (size_t)i * bb;
        for (size_t k = 0; k < bb; k++) b[k] = (unsigned char)rng_next(r);
        if (type == QB_Q6_K) {
            qblock_q6_K *q = (qblock_q6_K *)b;
            if (extreme) {
                memset(q->ql, row % 2 ? 0xff : 0, sizeof q->ql);
                memset(q->qh, row % 2 ? 0xff : 0, sizeof q->qh);
                memset(q->scales, row % 4 < 2 ? 0x7f : 0x80, sizeof q->scales);
            }
            q->d = small_f16(r, 1e-4f, 2e-3f);
        } else if (type == QB_Q4_K) {
            qblock_q4_K *q = (qblock_q4_K *)b;
            if (extreme) {
                memset(q->qs, row % 2 ? 0xff : 0, sizeof q->qs);
                memset(q->scales, 0xff, sizeof q->scales);
            }
            q->d = small_f16(r, 1e-4f, 2e-3f);
            q->dmin = small_f16(r, 1e-4f, 2e-3f);
        } else {
            if (extreme)
                memset(b + 2, type == QB_Q4_0 ? (row % 2 ? 0xff : 0) : (row % 2 ? 0x7f : 0x80), bb - 2);
            const uint16_t d = small_f16(r, 1e-3f, 2.1e-2f);
            memcpy(b, &d, 2);
        }
    }
}

/* Activation element e of a q8_0(s) or q8_K row, as a double. */
static double act_at(int act, const void *a, int e) {
    if (act == QB_Q8_K) {
        const qblock_q8_K *y = (const qblock_q8_K *)a + e / QBLOCK_K;
        return (double)y->d * y->qs[e % QBLOCK_K];
    }
    const qblock_q8_0 *y = (const qblock_q8_0 *)a + e / QBLOCK_32;
    return (double)quant_f16_to_f32(y->d) * y->qs[e % QBLOCK_32];
}

/* The f32 reference of one weight row with one activation row. */
static void ref_dot(int type, int act, const void *w, const void *a, int n, float *xw, double *dot,
                    double *mag) {
    double d = 0, m = 0;
    if (quant_to_f32(type, w, xw, (uint64_t)n)) {
        *dot = NAN;
        *mag = 0;
        return;
    }
    for (int e = 0; e < n; e++) {
        const double v = act_at(act, a, e);
        d += (double)xw[e] * v;
        m += fabs((double)xw[e] * v);
    }
    *dot = d;
    *mag = m;
}

typedef struct qcase {
    const cpu_qtype *t;
    int n, rows, M;
    size_t rb, ab, gb;
    unsigned char *w, *w8, *a;
    float *want, *one, *y;
    double *mag;
} qcase;

/* Tiles against dot8, every column count, two groups and a group twice. */
static void check_tiles(const qcase *q) {
    const cpu_qtype *t = q->t;
    for (int g = 0; g + 1 < q->rows / 8; g += 3)
        for (int nc = 1; nc <= CPU_QGEMM_NC; nc++)
            for (int same = 0; same < 2; same++) {
                float s[16 * CPU_QGEMM_NC], s8[8 * CPU_QDOT_NCOLS];
                const unsigned char *w0 = q->w8 + (size_t)g * q->gb, *w1 = same ? w0 : w0 + q->gb;
                const unsigned char *a = q->a + q->ab; /* columns 1.. */
                t->gemm(q->n, nc, s, w0, w1, a, q->ab);
                for (int c = 0; c < nc; c++)
                    for (int h = 0; h < 2; h++) {
                        t->dot8(q->n, 1, s8, h ? w1 : w0, a + (size_t)c * q->ab, q->ab);
                        CK_CHECK_MSG(!memcmp(s + 16 * c + 8 * h, s8, sizeof(float) * 8),
                                     "%s type %d n %d group %d nc %d col %d half %d: %.9g, dot8 %.9g",
                                     t->gemm_impl, t->type, q->n, g, nc, c, h, s[16 * c + 8 * h], s8[0]);
                    }
            }
}

/* The driver at M columns over ranges, against the one-column path and
 * the f32 reference. */
static void check_driver(const qcase *q) {
    const cpu_qmat qm = {q->w8, q->t, q->rows, q->n, q->rb, 1};
    const int R = q->rows, M = q->M;
    const int ranges[][2] = {{0, R}, {3, R - 2}, {8, 24}, {5, 13}, {R - 11, R}, {16, R - 3}};
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
        for (int acc = 0; acc < 2; acc++) {
            const int r0 = ranges[k][0], r1 = ranges[k][1];
            for (int i = 0; i < R * M; i++) q->y[i] = q->one[i] = 1.0f;
            cpu_qdot_rows(q->y, R, q->a, q->ab, &qm, M, r0, r1, acc);
            for (int m = 0; m < M; m++) /* below CPU_QGEMM_MIN_M: the x8 kernels */
                cpu_qdot_rows(q->one + (size_t)m * R, R, q->a + (size_t)m * q->ab, q->ab, &qm, 1, r0, r1,
                              acc);
            for (int m = 0; m < M; m++)
                for (int row = 0; row < R; row++) {
                    const int in = row >= r0 && row < r1, i = m * R + row;
                    const double want = in ? (acc ? 1.0 : 0.0) + q->want[row * M + m] : 1.0;
                    const double mg = in ? q->mag[row * M + m] : 0;
                    /* the n % 8 tail rows take the row kernels, whose float order
                     * differs between one column and several */
                    CK_CHECK_MSG(row >= R / 8 * 8 || !memcmp(&q->y[i], &q->one[i], sizeof(float)),
                                 "%s type %d rows [%d, %d) acc %d: row %d col %d %.9g, one column %.9g",
                                 q->t->gemm_impl, q->t->type, r0, r1, acc, row, m, q->y[i], q->one[i]);
                    CK_CHECK_MSG(fabs(q->y[i] - want) <= 1e-5 * mg + 1e-6,
                                 "%s type %d rows [%d, %d): row %d col %d %.9g, f32 reference %.9g",
                                 q->t->gemm_impl, q->t->type, r0, r1, row, m, q->y[i], want);
                }
        }
}

/* One type at one level: rows weight rows of n elements (groups and a
 * tail), M activation rows. */
static void run_case(const cpu_qtype *t, int n, int rows, int M, int extreme, rng *r) {
    qcase q = {.t = t, .n = n, .rows = rows, .M = M};
    q.rb = (size_t)(n / t->block) * t->block_bytes;
    q.ab = qact_row_bytes(t->act, n);
    q.gb = (size_t)(n / t->block) * t->x8_bytes;
    q.w = malloc(q.rb * rows);
    q.w8 = malloc(cpu_qdot_x8_bytes(t, rows, n));
    q.a = malloc(q.ab * M);
    q.want = malloc(sizeof(float) * rows * M);
    q.one = malloc(sizeof(float) * rows * M);
    q.y = malloc(sizeof(float) * rows * M);
    q.mag = malloc(sizeof(double) * rows * M);
    float *x = malloc(sizeof(float) * n);
    const int ok = q.w && q.w8 && q.a && q.want && q.one && q.y && q.mag && x;
    if (!ok) {
        free(q.w), free(q.w8), free(q.a), free(q.want), free(q.one), free(q.y), free(q.mag), free(x);
        CK_CHECK(ok);
    }
    int bad = 0;
    for (int row = 0; row < rows; row++) random_row(r, t->type, q.w + row * q.rb, n, extreme, row);
    for (int m = 0; m < M; m++) {
        for (int i = 0; i < n; i++) x[i] = extreme ? (m % 2 ? 1.0f : -1.0f) : rng_f(r) * (1.0f + (float)m);
        bad |= qact_row(t->act, x, q.a + (size_t)m * q.ab, n) != 0;
    }
    for (int row = 0; row < rows; row++)
        for (int m = 0; m < M; m++) {
            double d, mg;
            ref_dot(t->type, t->act, q.w + row * q.rb, q.a + (size_t)m * q.ab, n, x, &d, &mg);
            q.want[row * M + m] = (float)d;
            q.mag[row * M + m] = mg;
        }
    const int packed = !bad && cpu_qdot_repack8(t, q.w8, q.w, rows, n) == 0;
    if (packed) {
        check_tiles(&q);
        check_driver(&q);
    }
    free(q.w), free(q.w8), free(q.a), free(q.want), free(q.one), free(q.y), free(q.mag), free(x);
    CK_CHECK(packed);
}

static void test_tiles_every_isa(void) {
    const int best = cpu_isa_detect();
    int ran = 0;
    for (int isa = CPU_ISA_C; isa <= best; isa++) {
        cpu_qdot qd;
        cpu_qdot_init(&qd, isa);
        rng r = {0x9E3779B97F4A7C15ULL + (uint64_t)isa};
        static const int types[] = {QB_Q4_0, QB_Q8_0, QB_Q4_K, QB_Q6_K};
        for (int ty = 0; ty < 4; ty++) {
            const cpu_qtype *t = cpu_qdot_type(&qd, types[ty]);
            CK_CHECK(t && t->dot8);
            if (!t->gemm) continue;
            ran++;
            static const int ns[] = {32, 96, 256, 768};
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                if (ns[k] % t->block) continue;
                run_case(t, ns[k], 43, 21, 0, &r); /* 5 groups (one alone) and 3 tail rows */
                run_case(t, ns[k], 40, 16, 1, &r);
            }
            run_case(t, 4096, 8 * 40 + 5, 19, 0, &r); /* more groups than an L2 block */
        }
    }
    if (!ran) fprintf(stderr, "  no level with tiles on this CPU (%s): nothing run\n", cpu_isa_name(best));
}

/* Which types have tiles, at which level: what cpu_qgemm.h promises. */
static void test_table(void) {
    for (int isa = CPU_ISA_C; isa < CPU_ISA_COUNT; isa++) {
        cpu_qdot qd;
        cpu_qdot_init(&qd, isa);
        const cpu_qtype *q4 = cpu_qdot_type(&qd, QB_Q4_0), *q8 = cpu_qdot_type(&qd, QB_Q8_0);
#if defined(__x86_64__)
        CK_CHECK_MSG(!q4->gemm == (isa < CPU_ISA_AVX512), "isa %d q4_0", isa);
        CK_CHECK_MSG(!q8->gemm == (isa < CPU_ISA_VNNI), "isa %d q8_0", isa);
        CK_CHECK(!q4->gemm || !strcmp(q4->gemm_impl, cpu_isa_name(isa)));
#else
        CK_CHECK(!q4->gemm && !q8->gemm);
#endif
        CK_CHECK(q8->act == QACT_Q8_0S && q4->act == QACT_Q8_0S);
#if defined(__x86_64__)
        CK_CHECK(!cpu_qdot_type(&qd, QB_Q4_K)->gemm == (isa < CPU_ISA_AVX512));
        CK_CHECK(!cpu_qdot_type(&qd, QB_Q6_K)->gemm == (isa < CPU_ISA_AVX512));
#endif
        CK_CHECK(!cpu_qdot_type(&qd, QB_Q5_K)->gemm && !cpu_qdot_type(&qd, QB_MXFP4)->gemm);
    }
}

int main(void) {
    CK_RUN(test_table);
    CK_RUN(test_tiles_every_isa);
    return ck_test_summary();
}
