/* cpu_qdot.c - the kernel table and the matrix driver (cpu_qdot.h). */
#include "cpu_qdot.h"

#include <string.h>

#include "ck_err.h"
#include "cpu_features.h"
#include "cpu_qact.h"
#include "cpu_qdot_more.h"
#include "cpu_qgemm.h"
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
GENERIC(MXFP4, QB_Q8_0)

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
    cpu_vdot8_fn dot8[CPU_ISA_COUNT];
    int x8_bytes; /* see cpu_qtype */
    cpu_qgemm_fn gemm[CPU_ISA_COUNT];
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
            {NULL, NULL, NULL, NULL}, {NULL, NULL, NULL, NULL}, 0, {NULL, NULL, NULL, NULL}, 0, {         \
            NULL, NULL, NULL, NULL                                                                        \
        }                                                                                                 \
    }

/* dot2_min_m, measured on an AVX2 EPYC (one thread, alternated, against
 * dot / dotn on the same matrix): where the weights stream from memory
 * (16384 x 2048, 18-35 MiB), two rows at a time lose at 1 and 4 columns
 * (0.5-0.9x; software prefetch does not help: the two interleaved row
 * streams, not the instructions, set the pace there), are even at 8 (Q4_0
 * 1.17x, Q8_0 0.95x, Q4_K 1.09x) and win from 16 (1.41x, 1.20x, 1.10x;
 * at 32 columns of a 32000 x 768 matrix 1.48x, 1.35x, 1.14x), where the
 * integer work sets it. Q6_K's block is 16 vectors a row: two rows spill
 * and run 0.94x, so it has none. */
#define CK_DOT2_MIN_M 8
static const qdot_row rows[] = {
    /* Q8_0 takes q8_0s activations for its tiles (cpu_qgemm.h), whose
     * block sums take off the +128 that makes its bytes unsigned; the
     * other kernels read the rows' q8_0 blocks as they are. */
    {QB_Q8_0,
     QACT_Q8_0S,
     QBLOCK_32,
     (int)sizeof(qblock_q8_0),
     generic_Q8_0,
     {cpu_vdot_q8_0_c, X86(cpu_vdot_q8_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q8_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdot2_q8_0_avx2), NULL, NULL},
     CK_DOT2_MIN_M,
     {cpu_vdot8_q8_0_c, X86(cpu_vdot8_q8_0_avx2), X86(cpu_vdot8_q8_0_avx512), X86(cpu_vdot8_q8_0_vnni)},
     (int)sizeof(qblock_q8_0x8),
     {NULL, NULL, NULL, X86(cpu_qgemm16_q8_0_vnni)}},
    /* Q8_0, Q4_0, Q4_K and Q6_K run repacked (dot8) at every level, so the layout
     * and the memory plan do not depend on the ISA. Q4_0's q8_0s activations
     * are q8_0 rows to dot / dotn / dot2, which the n % 8 last rows of a
     * matrix take. */
    {QB_Q4_0,
     QACT_Q8_0S,
     QBLOCK_32,
     (int)sizeof(qblock_q4_0),
     generic_Q4_0,
     {cpu_vdot_q4_0_c, X86(cpu_vdot_q4_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q4_0_avx2), NULL, NULL},
     {NULL, X86(cpu_vdot2_q4_0_avx2), NULL, NULL},
     CK_DOT2_MIN_M,
     {cpu_vdot8_q4_0_c, X86(cpu_vdot8_q4_0_avx2), X86(cpu_vdot8_q4_0_avx512), X86(cpu_vdot8_q4_0_vnni)},
     (int)sizeof(qblock_q4_0x8),
     {NULL, NULL, X86(cpu_qgemm16_q4_0_avx512), X86(cpu_qgemm16_q4_0_vnni)}},
    {QB_Q4_K,
     QB_Q8_K,
     QBLOCK_K,
     (int)sizeof(qblock_q4_K),
     generic_Q4_K,
     {cpu_vdot_q4_K_c, X86(cpu_vdot_q4_K_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q4_K_avx2), NULL, NULL},
     {NULL, X86(cpu_vdot2_q4_K_avx2), NULL, NULL},
     CK_DOT2_MIN_M,
     {cpu_vdot8_q4_K_c, X86(cpu_vdot8_q4_K_avx2), X86(cpu_vdot8_q4_K_avx512), X86(cpu_vdot8_q4_K_vnni)},
     (int)sizeof(qblock_q4_Kx8),
     {NULL, NULL, X86(cpu_qgemm16_q4_K_avx512), X86(cpu_qgemm16_q4_K_vnni)}},
    {QB_Q6_K,
     QB_Q8_K,
     QBLOCK_K,
     (int)sizeof(qblock_q6_K),
     generic_Q6_K,
     {cpu_vdot_q6_K_c, X86(cpu_vdot_q6_K_avx2), NULL, NULL},
     {NULL, X86(cpu_vdotn_q6_K_avx2), NULL, NULL},
     {NULL, NULL, NULL, NULL},
     0,
     {cpu_vdot8_q6_K_c, X86(cpu_vdot8_q6_K_avx2), X86(cpu_vdot8_q6_K_avx512), X86(cpu_vdot8_q6_K_vnni)},
     (int)sizeof(qblock_q6_Kx8),
     {NULL, NULL, X86(cpu_qgemm16_q6_K_avx512), X86(cpu_qgemm16_q6_K_vnni)}},
    ROW_MORE(Q4_1, q4_1, QB_Q8_1, QBLOCK_32, qblock_q4_1),
    ROW_MORE(Q5_0, q5_0, QB_Q8_0, QBLOCK_32, qblock_q5_0),
    ROW_MORE(Q5_1, q5_1, QB_Q8_1, QBLOCK_32, qblock_q5_1),
    ROW_MORE(IQ4_NL, iq4_nl, QB_Q8_0, QBLOCK_32, qblock_iq4_nl),
    ROW_MORE(Q2_K, q2_K, QB_Q8_K, QBLOCK_K, qblock_q2_K),
    ROW_MORE(Q3_K, q3_K, QB_Q8_K, QBLOCK_K, qblock_q3_K),
    ROW_MORE(Q5_K, q5_K, QB_Q8_K, QBLOCK_K, qblock_q5_K),
    ROW_MORE(IQ4_XS, iq4_xs, QB_Q8_K, QBLOCK_K, qblock_iq4_xs),
    /* MXFP4 runs repacked too (gpt-oss's experts). Its x8 kernels take the
     * levels plus 12 (unsigned bytes, what vpdpbusd / maddubs multiply) and
     * take 12 sum(y) off from the q8_0s row's block sums, as Q4_0's take
     * their -8 off; the one-row kernel reads those rows as q8_0. */
    {QB_MXFP4,
     QACT_Q8_0S,
     QBLOCK_32,
     (int)sizeof(qblock_mxfp4),
     generic_MXFP4,
     {cpu_vdot_mxfp4_c, X86(MORE2(cpu_vdot_mxfp4_avx2)), X86(MORE5(cpu_vdot_mxfp4_avx512)), NULL},
     {NULL, NULL, NULL, NULL},
     {NULL, NULL, NULL, NULL},
     0,
     {cpu_vdot8_mxfp4_c, X86(cpu_vdot8_mxfp4_avx2), X86(cpu_vdot8_mxfp4_avx512), X86(cpu_vdot8_mxfp4_vnni)},
     (int)sizeof(qblock_mxfp4x8),
     {NULL, NULL, NULL, NULL}}, /* no tiles: many rows run the x8 kernels */
};
_Static_assert(sizeof rows / sizeof rows[0] <= CPU_QDOT_MAX_TYPES, "CPU_QDOT_MAX_TYPES");

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
        for (int l = isa; l >= 0 && !t->dot8; l--)
            if (e->dot8[l]) {
                t->dot8 = e->dot8[l];
                t->x8_impl = cpu_isa_name(l);
            }
        t->x8_bytes = t->dot8 ? e->x8_bytes : 0;
        /* the tiles of this level only: they must give dot8's bits (cpu_qgemm.h) */
        if (t->dot8 && e->gemm[isa] && e->dot8[isa]) {
            t->gemm = e->gemm[isa];
            t->gemm_impl = cpu_isa_name(isa);
        }
    }
}

const cpu_qtype *cpu_qdot_type(const cpu_qdot *q, int type) {
    for (int i = 0; i < q->n; i++)
        if (q->t[i].type == type) return &q->t[i];
    return NULL;
}

/* ------------------------------------------------------ the x8 layout */

size_t cpu_qdot_x8_bytes(const cpu_qtype *t, int n, int k) {
    if (!t || !t->dot8 || n < 0 || k <= 0 || k % t->block) return 0;
    const size_t nb = (size_t)(k / t->block);
    return (size_t)(n / 8) * nb * (size_t)t->x8_bytes + (size_t)(n % 8) * nb * (size_t)t->block_bytes;
}

/* Q4_K's 6-bit scale and min of sub-block k (of 8) from its 12 packed bytes
 * (ggml's get_scale_min_k4). */
static void scale_min_k4(const uint8_t *q, int k, uint8_t *sc, uint8_t *m) {
    if (k < 4) {
        *sc = q[k] & 63;
        *m = q[k + 4] & 63;
    } else {
        *sc = (uint8_t)((q[k + 4] & 0x0f) | ((q[k - 4] >> 6) << 4));
        *m = (uint8_t)((q[k + 4] >> 4) | ((q[k] >> 6) << 4));
    }
}

/* One x8 block o from the 8 blocks at b, rb bytes apart (one a row). */
static void pack8_q4_K(qblock_q4_Kx8 *o, const unsigned char *b, size_t rb) {
    for (int r = 0; r < 8; r++) {
        const qblock_q4_K *x = (const qblock_q4_K *)(b + (size_t)r * rb);
        o->d[r] = x->d;
        o->dmin[r] = x->dmin;
        for (int s = 0; s < 8; s++) scale_min_k4(x->scales, s, &o->sc[s][r], &o->m[s / 2][r][s % 2]);
        for (int jh = 0; jh < 32; jh++) memcpy(&o->qs[32 * jh + 4 * r], &x->qs[4 * jh], 4);
    }
}

/* One Q6_K x8 block o from the 8 blocks at b, rb bytes apart (qblock.h).
 * Each row's 256 quants (0..63) first, from the file's split: 4 low bits in
 * a nibble of ql, 2 high in a bit pair of qh (quant.c's dequantizer reads
 * them the same way); then each byte of o written once. */
static void pack8_q6_K(qblock_q6_Kx8 *o, const unsigned char *b, size_t rb) {
    for (int r = 0; r < 8; r++) {
        const qblock_q6_K *x = (const qblock_q6_K *)(b + (size_t)r * rb);
        uint8_t q[QBLOCK_K];
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 32; j++)
                    q[128 * h + 32 * k + j] =
                        (uint8_t)((x->ql[64 * h + 32 * (k % 2) + j] >> (4 * (k / 2)) & 0x0f) |
                                  (x->qh[32 * h + j] >> (2 * k) & 3) << 4);
        o->d[r] = x->d;
        for (int s = 0; s < 16; s++) o->sc[s / 2][r][s % 2] = x->scales[s];
        for (int t = 0; t < 16; t++) /* the fourth quad's bits 2w, 2w + 1 on top of quad w's bytes */
            for (int w = 0; w < 3; w++)
                for (int bb = 0; bb < 4; bb++)
                    o->qs[96 * t + 32 * w + 4 * r + bb] =
                        (uint8_t)(q[16 * t + 4 * w + bb] | (q[16 * t + 12 + bb] >> (2 * w) & 3) << 6);
    }
}

int cpu_qdot_repack8(const cpu_qtype *t, void *dst, const void *src, int n, int k) {
    if (!t || !t->dot8 || n < 0 || k <= 0 || k % t->block ||
        (t->type != QB_Q4_0 && t->type != QB_Q8_0 && t->type != QB_Q4_K && t->type != QB_Q6_K &&
         t->type != QB_MXFP4))
        return CK_EINVAL;
    const int nb = k / t->block;
    const size_t bb = (size_t)t->block_bytes, rb = (size_t)nb * bb, xb = (size_t)t->x8_bytes;
    const int groups = n / 8;
    for (int g = 0; g < groups; g++) {
        const unsigned char *x = (const unsigned char *)src + (size_t)g * 8 * rb;
        unsigned char *o = (unsigned char *)dst + (size_t)g * nb * xb;
        for (int i = 0; i < nb; i++, o += xb) {
            if (t->type == QB_Q4_K) {
                pack8_q4_K((qblock_q4_Kx8 *)o, x + (size_t)i * bb, rb);
                continue;
            }
            if (t->type == QB_Q6_K) {
                pack8_q6_K((qblock_q6_Kx8 *)o, x + (size_t)i * bb, rb);
                continue;
            }
            /* Q4_0, Q8_0, MXFP4: the rows' scales (f16 d, or E8M0 e), then 4-byte groups of qs */
            const int h_n = t->type == QB_Q8_0 ? 8 : 4, sb = t->type == QB_MXFP4 ? 1 : 2;
            for (int r = 0; r < 8; r++) {
                const unsigned char *b = x + (size_t)r * rb + (size_t)i * bb;
                memcpy(o + sb * r, b, (size_t)sb);
                for (int h = 0; h < h_n; h++) memcpy(o + 8 * sb + 32 * h + 4 * r, b + sb + 4 * h, 4);
            }
        }
    }
    memcpy((char *)dst + (size_t)groups * nb * xb, (const char *)src + (size_t)groups * 8 * rb,
           (size_t)(n - groups * 8) * rb);
    return 0;
}

/* ---------------------------------------------------------- the driver */

/* Rows [r0, r1) of the x8 part of w (r1 <= w->n / 8 * 8): a group at a
 * time, all M columns against it while its bytes are in L1. A range that
 * starts or ends inside a group (the classifier's learnt cuts) computes the
 * whole group and stores only its own rows. */
static void rows_x8(float *y, int ldy, const void *a, size_t a_stride, const cpu_qmat *w, int M, int r0,
                    int r1, int accumulate) {
    const size_t gbytes = (size_t)(w->k / w->t->block) * w->t->x8_bytes;
    for (int g = r0 / 8; g * 8 < r1; g++) {
        const int base = g * 8, j0 = r0 > base ? r0 - base : 0, j1 = r1 < base + 8 ? r1 - base : 8;
        const void *wg = (const char *)w->data + (size_t)g * gbytes;
        for (int m = 0; m < M; m += CPU_QDOT_NCOLS) {
            const int nc = M - m < CPU_QDOT_NCOLS ? M - m : CPU_QDOT_NCOLS;
            const char *am = (const char *)a + (size_t)m * a_stride;
            /* A whole group of one column straight into y: at batch 1 with
             * 768 columns (3 super-blocks a group) the copy below costs 15 %
             * of the product's time (measured: Q4_K, in the caches, a Zen 5). */
            if (nc == 1 && j0 == 0 && j1 == 8 && !accumulate) {
                w->t->dot8(w->k, 1, y + (size_t)m * ldy + base, wg, am, a_stride);
                continue;
            }
            float s[8 * CPU_QDOT_NCOLS];
            w->t->dot8(w->k, nc, s, wg, am, a_stride);
            for (int c = 0; c < nc; c++) {
                float *o = y + (size_t)(m + c) * ldy + base;
                if (accumulate && j0 == 0 && j1 == 8) /* a constant count: vector adds */
                    for (int j = 0; j < 8; j++) o[j] += s[8 * c + j];
                else if (accumulate)
                    for (int j = j0; j < j1; j++) o[j] += s[8 * c + j];
                else
                    for (int j = j0; j < j1; j++) o[j] = s[8 * c + j];
            }
        }
    }
}

void cpu_qdot_rows(float *y, int ldy, const void *a, size_t a_stride, const cpu_qmat *w, int M, int r0,
                   int r1, int accumulate) {
    const cpu_qtype *t = w->t;
    const int K = w->k;
    int r = r0;
    if (w->x8 && t->dot8) {
        const int g8 = w->n / 8 * 8;
        if (r < g8 && t->gemm && M >= CPU_QGEMM_MIN_M)
            cpu_qgemm_rows(y, ldy, a, a_stride, w, M, r, r1 < g8 ? r1 : g8, accumulate);
        else if (r < g8)
            rows_x8(y, ldy, a, a_stride, w, M, r, r1 < g8 ? r1 : g8, accumulate);
        if (r1 <= g8) return;
        /* the n % 8 last rows, in the file's layout after the groups */
        const cpu_qmat tail = {
            (const char *)w->data + cpu_qdot_x8_bytes(t, g8, K), t, w->n - g8, K, w->row_bytes, 0};
        cpu_qdot_rows(y + g8, ldy, a, a_stride, &tail, M, (r > g8 ? r : g8) - g8, r1 - g8, accumulate);
        return;
    }
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
