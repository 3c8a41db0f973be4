/* cpu_layer_ffn.c - the dense feed-forward layer kind (cpu_layer.h):
 * x += W2 . SwiGLU(W1 . norm(x), W3 . norm(x)), llama2.c's FFN; gemma4's
 * with GELU for the gate, the output normed before it is added, and the
 * residual stream scaled at the end of the layer (layer_output_scale). On
 * a gemma4 layer with experts the output, normed by post_ffw_norm_1, goes
 * to xo instead, and the experts' kind (cpu_layer_moe.c) finishes the
 * layer. */
#include <math.h>

#include "cpu_layer.h"

/* o[c] = gelu(g[c]) u[c] for c in [n0, n1): ggml's gelu, the tanh form. */
static void geglu(float *o, const float *g, const float *u, int n0, int n1) {
    const float k = 0.79788456080286535587989211986876f, a = 0.044715f; /* sqrt(2 / pi) */
    for (int c = n0; c < n1; c++) {
        const float x = g[c];
        o[c] = 0.5f * x * (1.0f + tanhf(k * x * (1.0f + a * x * x))) * u[c];
    }
}

/* Units [u0, u1) of h = SwiGLU (see cpu_ffn_swiglu). */
static void swiglu_part(const cpu_backend *cb, float *h, float *h13, const float *x, int row0,
                        const cpu_mat *w1, const cpu_mat *w3, int M, int u0, int u1) {
    if (u0 >= u1) return;
    const int F = cpu_mat_n(w1);
    cpu_mat_part(cb, h13, 2 * F, x, row0, w1, M, u0, u1, 0);
    cpu_mat_part(cb, h13 + F, 2 * F, x, row0, w3, M, u0, u1, 0);
    int n0, n1;
    cpu_unit_cols(w1, u0, u1, &n0, &n1);
    const int gelu = cb->base.m->cfg.ffn_act == ARCH_ACT_GELU;
    for (int i = 0; i < M; i++) {
        const float *g = h13 + (size_t)i * 2 * F, *u = g + F;
        if (gelu)
            geglu(h + (size_t)i * F, g, u, n0, n1);
        else
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
    const cpu_moe_w *mo = &cb->layers[s->l].moe;
    if (mo->post_norm_1) { /* gemma4's experts follow: this part's output, normed, into xo for them */
        float *y = cb->xo + (size_t)i0 * D;
        cpu_matmul(cb, y, D, cb->h + (size_t)i0 * F, i0, &w2, 1, M, 0, s->threads);
        for (int i = 0; i < M; i++)
            cpu_rmsnorm(y + (size_t)i * D, y + (size_t)i * D, mo->post_norm_1, D, c->norm_eps);
        return;
    }
    if (w->post_norm) { /* gemma4: the output normed, then added */
        cpu_matmul(cb, xb, D, cb->h + (size_t)i0 * F, i0, &w2, 1, M, 0, s->threads);
        for (int i = 0; i < M; i++) {
            float *o = xb + (size_t)i * D, *r = x + (size_t)i * D;
            cpu_rmsnorm(o, o, w->post_norm, D, c->norm_eps);
            for (int d = 0; d < D; d++) r[d] += o[d];
        }
    } else {
        cpu_matmul(cb, x, D, cb->h + (size_t)i0 * F, i0, &w2, 1, M, 1, s->threads);
    }
    cpu_ple_apply(cb, s->l, i0, M, s->threads); /* gemma4's E2B/E4B */
    if (w->out_scale)
        for (size_t j = 0; j < (size_t)M * D; j++) x[j] *= w->out_scale[0];
}

const cpu_layer_kind cpu_layer_ffn = {.name = "ffn", .prepare = NULL, .forward = ffn_forward};
