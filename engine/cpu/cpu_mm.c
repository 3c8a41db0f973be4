/* cpu_mm.c - the CPU backend's products (cpu_backend.h): y = x . W^T over
 * packed f32 panels (cpu_gemm.h) or quantized rows (cpu_qdot.h), the work
 * shared out on the backend's team by work stealing. This is where almost
 * all the time of a step goes. */
#include <string.h>

#include "cpu_backend.h"
#include "cpu_qgemm.h"

static const int act_fmt[ACT_N] = {QB_Q8_0, QB_Q8_1, QB_Q8_K, QACT_Q8_0S};

int cpu_mat_units(const cpu_mat *w) { return w->f.p ? gemm_n_panels(&w->f) : w->q.n; }

void cpu_unit_cols(const cpu_mat *w, int u0, int u1, int *c0, int *c1) {
    const int n = cpu_mat_n(w), per = w->f.p ? GEMM_PANEL : 1;
    *c0 = u0 * per < n ? u0 * per : n;
    *c1 = u1 * per < n ? u1 * per : n;
}

/* The quantized input rows of activation format fmt, from row `row0` on. */
static const void *xq_rows(const cpu_backend *cb, int fmt, int row0, size_t *stride) {
    const int a = cpu_act_index(fmt);
    *stride = cb->xq_stride[a];
    return cb->xq[a] + (size_t)row0 * cb->xq_stride[a];
}

void cpu_quantize_in(cpu_backend *cb, const float *x, int M, int K, int row0, const cpu_mat *const *mats,
                     int n_mats) {
    int done = 0; /* formats already written, a bit each */
    for (int i = 0; i < n_mats; i++) {
        if (!mats[i]->q.data) continue;
        const int a = cpu_act_index(mats[i]->q.t->act);
        if (done & (1 << a)) continue;
        done |= 1 << a;
        for (int m = 0; m < M; m++)
            qact_row_isa(cb->isa, act_fmt[a], x + (size_t)m * K,
                         cb->xq[a] + (size_t)(row0 + m) * cb->xq_stride[a], K);
    }
}

void cpu_mat_part(const cpu_backend *cb, float *y, int ldy, const float *x, int row0, const cpu_mat *w, int M,
                  int u0, int u1, int accumulate) {
    if (w->f.p) {
        gemm_panels(y, ldy, x, &w->f, M, u0, u1, accumulate);
        return;
    }
    size_t stride;
    const void *a = xq_rows(cb, w->q.t->act, row0, &stride);
    cpu_qdot_rows(y, ldy, a, stride, &w->q, M, u0, u1, accumulate);
}

size_t cpu_in_row_bytes(const cpu_mat *w) {
    return w->f.p ? (size_t)w->f.k * sizeof(float) : qact_row_bytes(w->q.t->act, w->q.k);
}

void cpu_in_rows(const cpu_backend *cb, const cpu_mat *w, const float *x, int M, void *dst) {
    const int K = cpu_mat_k(w);
    const size_t rb = cpu_in_row_bytes(w);
    for (int m = 0; m < M; m++) {
        void *d = (unsigned char *)dst + (size_t)m * rb;
        if (w->f.p)
            memcpy(d, x + (size_t)m * K, rb);
        else
            qact_row_isa(cb->isa, act_fmt[cpu_act_index(w->q.t->act)], x + (size_t)m * K, d, K);
    }
}

void cpu_in_part(float *y, int ldy, const void *in, const cpu_mat *w, int M, int u0, int u1, int accumulate) {
    if (w->f.p)
        gemm_panels(y, ldy, in, &w->f, M, u0, u1, accumulate);
    else
        cpu_qdot_rows(y, ldy, in, cpu_in_row_bytes(w), &w->q, M, u0, u1, accumulate);
}

/* Measured: +24 % tokens/s at batch 1 on the stories15M shape when only its
 * classifier is split, against splitting every product. */
int cpu_gemm_threads(int M, int N, int K, int threads) {
    if (M == 1) return (size_t)N * K >= PAR_MIN_WEIGHTS ? threads : 1;
    return (size_t)M * N * K >= PAR_MIN_MACS ? threads : 1;
}

/* Units [g0, g1) of the mats' units one after the other: each mat's part,
 * its outputs after the previous mats' columns. */
static void mats_part(const cpu_backend *cb, float *y, int ldy, const float *x, int row0,
                      const cpu_mat *const *mats, int n_mats, int M, int g0, int g1, int accumulate) {
    for (int i = 0, c = 0, base = 0; i < n_mats && base < g1;
         c += cpu_mat_n(mats[i]), base += cpu_mat_units(mats[i]), i++) {
        const int nu = cpu_mat_units(mats[i]), u0 = g0 - base > 0 ? g0 - base : 0,
                  u1 = g1 - base < nu ? g1 - base : nu;
        if (u0 < u1) cpu_mat_part(cb, y + c, ldy, x, row0, mats[i], M, u0, u1, accumulate);
    }
}

/* The granule of a product's work stealing: 8 rows of a quantized matrix
 * (an interleaved group of cpu_qdot.h's 8-row kernels: one split inside
 * computes the whole group twice), 16 where M rows take cpu_qgemm.h's
 * tiles of two groups, one panel of an f32 one. */
static int steal_align(const cpu_mat *const *mats, int n_mats, int M) {
    int align = 1;
    for (int i = 0; i < n_mats; i++)
        if (!mats[i]->f.p) {
            const int tile = mats[i]->q.x8 && mats[i]->q.t->gemm && M >= CPU_QGEMM_MIN_M;
            if ((tile ? 16 : 8) > align) align = tile ? 16 : 8;
        }
    return align;
}

static void mm_units(void *arg, int tid, int n) {
    const cpu_mm_job *j = arg;
    int u0, u1;
    (void)n;
    while (cpu_steal_take(j->cb->steal, tid, j->par, j->chunk, j->align, &u0, &u1)) j->units(j, u0, u1);
}

void cpu_mm_run(cpu_backend *cb, cpu_mm_job *j, int nu, int par) {
    if (par <= 1) {
        j->units(j, 0, nu);
        return;
    }
    j->align = steal_align(j->mats, j->n_mats, j->M);
    j->chunk = cpu_steal_init(cb->steal, nu, par, j->align);
    j->par = par;
    cpu_team_run(cb->team, par, mm_units, j);
}

static void mats_units(const cpu_mm_job *j, int u0, int u1) {
    mats_part(j->cb, j->y, j->ldy, j->x, j->row0, j->mats, j->n_mats, j->M, u0, u1, j->accumulate);
}

/* The mats' outputs side by side, w_i's from column sum of the previous n.
 * Threads share out the units of all the mats one after the other (the Q,
 * K and V of a quantized layer are three matrices) in one run of the team,
 * by work stealing (cpu_steal.h), so each reads its own ranges of the
 * weights. row0: the batch row of x's first row (where its quantized copy
 * goes). */
void cpu_matmul(cpu_backend *cb, float *y, int ldy, const float *x, int row0, const cpu_mat *const *mats,
                int n_mats, int M, int accumulate, int threads) {
    const int K = cpu_mat_k(mats[0]);
    int N = 0, min_units = 1 << 30;
    for (int i = 0; i < n_mats; i++) {
        N += cpu_mat_n(mats[i]);
        if (cpu_mat_units(mats[i]) < min_units) min_units = cpu_mat_units(mats[i]);
    }
    cpu_quantize_in(cb, x, M, K, row0, mats, n_mats);
    int par = cpu_gemm_threads(M, N, K, threads), nu = 0;
    if (par > min_units) par = min_units;
    for (int i = 0; i < n_mats; i++) nu += cpu_mat_units(mats[i]);
    cpu_mm_job j = {.cb = cb,
                    .units = mats_units,
                    .y = y,
                    .ldy = ldy,
                    .x = x,
                    .row0 = row0,
                    .mats = mats,
                    .n_mats = n_mats,
                    .M = M,
                    .accumulate = accumulate};
    cpu_mm_run(cb, &j, nu, par);
}
