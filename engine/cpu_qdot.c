/* cpu_qdot.c - the kernel table and the matrix driver (cpu_qdot.h). */
#include "cpu_qdot.h"

#include <string.h>

#include "cpu_features.h"
#include "cpu_qdot_more.h"
#include "quant.h"

/* ------------------------------------------------ the generic fallback */

int cpu_vdot_generic(int type, int act, int n, float *s, const void *w, const void *a) {
    uint64_t wb = 0;
    const int blk = quant_block_size(type);
    if (blk <= 0) return blk < 0 ? blk : -1;
    int rc = quant_row_bytes(type, (uint64_t)blk, &wb);
    if (rc) return rc;
    float xw[QBLOCK_K];
    float sum = 0.0f;
    for (int i = 0; i < n / blk; i++) {
        if ((rc = quant_to_f32(type, (const char *)w + (size_t)i * wb, xw, (uint64_t)blk))) return rc;
        for (int j = 0; j < blk; j++) {
            const int e = i * blk + j; /* element e of the activation row */
            float v;
            if (act == QB_Q8_K) {
                const qblock_q8_K *y = (const qblock_q8_K *)a + e / QBLOCK_K;
                v = y->d * (float)y->qs[e % QBLOCK_K];
            } else if (act == QB_Q8_1) {
                const qblock_q8_1 *y = (const qblock_q8_1 *)a + e / QBLOCK_32;
                v = quant_f16_to_f32(y->d) * (float)y->qs[e % QBLOCK_32];
            } else {
                const qblock_q8_0 *y = (const qblock_q8_0 *)a + e / QBLOCK_32;
                v = quant_f16_to_f32(y->d) * (float)y->qs[e % QBLOCK_32];
            }
            sum += xw[j] * v;
        }
    }
    *s = sum;
    return 0;
}

/* The contract's signature for each type, by the generic code. */
#define GENERIC(t, act)                                                      \
    static void generic_##t(int n, float *s, const void *w, const void *a) { \
        if (cpu_vdot_generic(QB_##t, act, n, s, w, a)) *s = 0.0f;            \
    }
GENERIC(Q4_0, QB_Q8_0)
GENERIC(Q4_1, QB_Q8_1)
GENERIC(Q5_0, QB_Q8_0)
GENERIC(Q5_1, QB_Q8_1)
GENERIC(Q8_0, QB_Q8_0)
GENERIC(Q2_K, QB_Q8_K)
GENERIC(Q3_K, QB_Q8_K)
GENERIC(Q4_K, QB_Q8_K)
GENERIC(Q5_K, QB_Q8_K)
GENERIC(Q6_K, QB_Q8_K)
GENERIC(IQ4_NL, QB_Q8_0)
GENERIC(IQ4_XS, QB_Q8_K)

/* ---------------------------------------------------------- the table */

/* Kernels per ISA level; NULL where there is none (the level below then
 * serves). H6's AVX2 / AVX-512 files are registered when they are built
 * (engine/CMakeLists.txt defines CK_QDOT_MORE_AVX2 / _AVX512 then). */
typedef struct qdot_row {
    int type, act, block, block_bytes;
    cpu_vdot_fn generic;
    cpu_vdot_fn dot[CPU_ISA_COUNT];
    cpu_vdotn_fn dotn[CPU_ISA_COUNT];
    cpu_vdot2_fn dot2[CPU_ISA_COUNT];
    int dot2_min_m; /* see cpu_qtype */
} qdot_row;

#if defined(CK_QDOT_MORE_AVX2)
#define MORE2(f) f
#else
#define MORE2(f) NULL
#endif
#if defined(CK_QDOT_MORE_AVX512)
#define MORE5(f) f
#else
#define MORE5(f) NULL
#endif
#if defined(__x86_64__)
#define X86(f) f
#else
#define X86(f) NULL
#endif

#define ROW_MORE(T, t, ACT, BLK, S)                                                                       \
    {                                                                                                     \
        QB_##T, ACT, BLK, (int)sizeof(S), generic_##T,                                                    \
            {cpu_vdot_##t##_c, X86(MORE2(cpu_vdot_##t##_avx2)), X86(MORE5(cpu_vdot_##t##_avx512)), NULL}, \
            {NULL, NULL, NULL, NULL}, {NULL, NULL, NULL, NULL}, 0                                         \
    }

/* dot2_min_m, measured on an AVX2 EPYC (one thread, alternated, against
 * dot / dotn on the same matrix): where the weights stream from memory
 * (16384 x 2048, 18-35 MiB), two rows at a time lose at 1 and 4 columns
 * (0.5-0.9x; software prefetch did not help: the two interleaved row
 * streams, not the instructions, set the pace there), are even at 8 (Q4_0
 * 1.17x, Q8_0 0.95x, Q4_K 1.09x) and win from 16 (1.41x, 1.20x, 1.10x;
 * at 32 columns of a 32000 x 768 matrix 1.48x, 1.35x, 1.14x), where the
 * integer work sets it. Q6_K's block is 16 vectors a row: two rows spilled
 * and ran 0.94x, so it has none. */
#define CK_DOT2_MIN_M 8
static const qdot_row rows[] = {
    {QB_Q8_0,
     QB_Q8_0,
     QBLOCK_32,
     (int)sizeof(qblock_q8_0),
     generic_Q8_0,
     {cpu_vdot_q8_0_c, X86(cpu_vdot_q8_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q8_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdot2_q8_0_avx2), NULL, NULL},
     CK_DOT2_MIN_M},
    {QB_Q4_0,
     QB_Q8_0,
     QBLOCK_32,
     (int)sizeof(qblock_q4_0),
     generic_Q4_0,
     {cpu_vdot_q4_0_c, X86(cpu_vdot_q4_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q4_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdot2_q4_0_avx2), NULL, NULL},
     CK_DOT2_MIN_M},
    {QB_Q4_K,
     QB_Q8_K,
     QBLOCK_K,
     (int)sizeof(qblock_q4_K),
     generic_Q4_K,
     {cpu_vdot_q4_K_c, X86(cpu_vdot_q4_K_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q4_K_avx2), NULL, NULL},
     {NULL, X86(cpu_vdot2_q4_K_avx2), NULL, NULL},
     CK_DOT2_MIN_M},
    {QB_Q6_K,
     QB_Q8_K,
     QBLOCK_K,
     (int)sizeof(qblock_q6_K),
     generic_Q6_K,
     {cpu_vdot_q6_K_c, X86(cpu_vdot_q6_K_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q6_K_avx2), NULL, NULL},
     {NULL, NULL, NULL, NULL},
     0},
    ROW_MORE(Q4_1, q4_1, QB_Q8_1, QBLOCK_32, qblock_q4_1),
    ROW_MORE(Q5_0, q5_0, QB_Q8_0, QBLOCK_32, qblock_q5_0),
    ROW_MORE(Q5_1, q5_1, QB_Q8_1, QBLOCK_32, qblock_q5_1),
    ROW_MORE(IQ4_NL, iq4_nl, QB_Q8_0, QBLOCK_32, qblock_iq4_nl),
    ROW_MORE(Q2_K, q2_K, QB_Q8_K, QBLOCK_K, qblock_q2_K),
    ROW_MORE(Q3_K, q3_K, QB_Q8_K, QBLOCK_K, qblock_q3_K),
    ROW_MORE(Q5_K, q5_K, QB_Q8_K, QBLOCK_K, qblock_q5_K),
    ROW_MORE(IQ4_XS, iq4_xs, QB_Q8_K, QBLOCK_K, qblock_iq4_xs),
};

void cpu_qdot_init(cpu_qdot *q, int isa) {
    memset(q, 0, sizeof *q);
    if (isa < 0) isa = CPU_ISA_C;
    if (isa >= CPU_ISA_COUNT) isa = CPU_ISA_COUNT - 1;
    q->isa = isa;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0] && q->n < CPU_QDOT_MAX_TYPES; r++) {
        const qdot_row *e = &rows[r];
        cpu_qtype *t = &q->t[q->n++];
        t->type = e->type;
        t->act = e->act;
        t->block = e->block;
        t->block_bytes = e->block_bytes;
        t->dot = e->generic;
        t->impl = "generic";
        for (int l = isa; l >= 0; l--)
            if (e->dot[l]) {
                t->dot = e->dot[l];
                t->dotn = e->dotn[l];
                t->dot2 = e->dot2[l];
                t->dot2_min_m = e->dot2_min_m;
                t->impl = cpu_isa_name(l);
                break;
            }
    }
}

const cpu_qtype *cpu_qdot_type(const cpu_qdot *q, int type) {
    for (int i = 0; i < q->n; i++)
        if (q->t[i].type == type) return &q->t[i];
    return NULL;
}

/* ---------------------------------------------------------- the driver */

void cpu_qdot_rows(float *y, int ldy, const void *a, size_t a_stride, const cpu_qmat *w, int M, int r0,
                   int r1, int accumulate) {
    const cpu_qtype *t = w->t;
    const int K = w->k;
    int r = r0;
    if (t->dot2 && M >= t->dot2_min_m) /* two rows at a time, up to CPU_QDOT_NCOLS columns */
        for (; r + 2 <= r1; r += 2) {
            const void *wr = (const char *)w->data + (size_t)r * w->row_bytes;
            for (int m = 0; m < M; m += CPU_QDOT_NCOLS) {
                const int nc = M - m < CPU_QDOT_NCOLS ? M - m : CPU_QDOT_NCOLS;
                float s[2 * CPU_QDOT_NCOLS];
                t->dot2(K, nc, s, wr, w->row_bytes, (const char *)a + (size_t)m * a_stride, a_stride);
                for (int c = 0; c < nc; c++) {
                    float *o = y + (size_t)(m + c) * ldy + r;
                    o[0] = accumulate ? o[0] + s[c] : s[c];
                    o[1] = accumulate ? o[1] + s[CPU_QDOT_NCOLS + c] : s[CPU_QDOT_NCOLS + c];
                }
            }
        }
    for (; r < r1; r++) {
        const void *wr = (const char *)w->data + (size_t)r * w->row_bytes;
        int m = 0;
        if (t->dotn && M > 1)
            for (; m < M; m += CPU_QDOT_NCOLS) {
                const int nc = M - m < CPU_QDOT_NCOLS ? M - m : CPU_QDOT_NCOLS;
                float s[CPU_QDOT_NCOLS];
                t->dotn(K, nc, s, wr, (const char *)a + (size_t)m * a_stride, a_stride);
                for (int c = 0; c < nc; c++) {
                    float *o = y + (size_t)(m + c) * ldy + r;
                    *o = accumulate ? *o + s[c] : s[c];
                }
            }
        for (; m < M; m++) {
            float s;
            t->dot(K, &s, wr, (const char *)a + (size_t)m * a_stride);
            float *o = y + (size_t)m * ldy + r;
            *o = accumulate ? *o + s : s;
        }
    }
}
