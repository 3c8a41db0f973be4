/* cpu_layer_ffn.c - the dense feed-forward layer kind (cpu_layer.h):
 * x += W2 . SwiGLU(W1 . norm(x), W3 . norm(x)), llama2.c's FFN. */
#include "cpu_layer.h"

/* Units [u0, u1) of h = SwiGLU (see cpu_ffn_swiglu). */
static void swiglu_part(const cpu_backend *cb, float *h, float *h13, const float *x, int row0,
                        const cpu_mat *w1, const cpu_mat *w3, int M, int u0, int u1) {
    if (u0 >= u1) return;
    const int F = cpu_mat_n(w1);
    cpu_mat_part(cb, h13, 2 * F, x, row0, w1, M, u0, u1, 0);
    cpu_mat_part(cb, h13 + F, 2 * F, x, row0, w3, M, u0, u1, 0);
    int n0, n1;
    cpu_unit_cols(w1, u0, u1, &n0, &n1);
    for (int i = 0; i < M; i++) {
        const float *g = h13 + (size_t)i * 2 * F, *u = g + F;
        cb->gk->swiglu(h + (size_t)i * F, g, u, n0, n1);
    }
}

static void swiglu_units(const cpu_mm_job *j, int u0, int u1) {
    swiglu_part(j->cb, j->y, j->h13, j->x, j->row0, j->mats[0], j->mats[1], j->M, u0, u1);
}

/* h (M, F) = SwiGLU(x . w1^T, x . w3^T), h13 (M, 2F) the scratch for the gate
 * then the up columns. Each thread computes the gate and the up columns of
 * its own units and applies the SwiGLU to them at once, so the SwiGLU pass
 * (a few percent of a batch-32 step on one thread) is split too, with no
 * barrier in between. */
void cpu_ffn_swiglu(cpu_backend *cb, float *h, float *h13, const float *x, int row0, const cpu_mat *w1,
                    const cpu_mat *w3, int M, int threads) {
    const int nu = cpu_mat_units(w1), K = cpu_mat_k(w1);
    const cpu_mat *mats[2] = {w1, w3};
    cpu_quantize_in(cb, x, M, K, row0, mats, 2);
    int par = cpu_gemm_threads(M, 2 * cpu_mat_n(w1), K, threads);
    if (par > nu) par = nu;
    const cpu_mat *const both[2] = {w1, w3};
    cpu_mm_job j = {.cb = cb,
                    .units = swiglu_units,
                    .y = h,
                    .x = x,
                    .row0 = row0,
                    .mats = both,
                    .n_mats = 2,
                    .M = M,
                    .h13 = h13};
    cpu_mm_run(cb, &j, nu, par);
}

static void ffn_forward(cpu_backend *cb, const cpu_span *s) {
    const model_config *c = &cb->base.m->cfg;
    const cpu_ffn_w *w = &cb->layers[s->l].ffn;
    if (!w->norm) return; /* a layer with experts (lfm2moe) */
    const int D = c->dim, F = c->hidden_dim, i0 = s->i0, M = s->i1 - s->i0;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D;
    for (int i = 0; i < M; i++) cpu_rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->norm, D, c->norm_eps);
    cpu_ffn_swiglu(cb, cb->h + (size_t)i0 * F, cb->h13 + (size_t)i0 * 2 * F, xb, i0, &w->w1, &w->w3, M,
                   s->threads);
    const cpu_mat *w2 = &w->w2;
    if (c->resid_scale != 0) /* Granite's residual_scale, on down's input: the product is linear */
        for (size_t j = 0; j < (size_t)M * F; j++) cb->h[(size_t)i0 * F + j] *= c->resid_scale;
    cpu_matmul(cb, x, D, cb->h + (size_t)i0 * F, i0, &w2, 1, M, 1, s->threads);
}

const cpu_layer_kind cpu_layer_ffn = {.name = "ffn", .prepare = NULL, .forward = ffn_forward};
