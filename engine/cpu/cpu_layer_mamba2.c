/* cpu_layer_mamba2.c - the Mamba2 layer kind (cpu_layer.h), granitehybrid's
 * (llama.cpp's build_mamba2_layer). With DI = ssm_d_inner, H heads of
 * P = DI / H channels, G groups, N = ssm_d_state, NC = DI + 2 G N:
 *
 *   z, xBC, dt = ssm_in . norm(x)                   (DI, NC, H)
 *   xBC_t      = silu(sum_k kern[k] xBC_{t-K+1+k} + bias)   (K = d_conv taps)
 *   x, B, C    = xBC_t split (DI, G N, G N); head h reads group h / (H / G)
 *   dt'        = softplus(dt + dt_bias)             (per head)
 *   s_h        = exp(dt' A_h) s_h + dt' x_h B_g^T    (P x N per head)
 *   y_h        = s_h C_g + D_h x_h
 *   y          = rmsnorm_per_group(y * silu(z)) * ssm_norm
 *   x         += ssm_out . y                        (times residual_scale)
 *
 * The sequence's recurrent state slot holds, per Mamba2 layer, the last
 * K - 1 inputs of the convolution (oldest first) and the H x P x N scan
 * state: a prefill split into chunks and one token a step compute the
 * same thing. A sequence whose batch starts at position 0 starts from
 * zeros (cpu_state_prepare).
 *
 * The recurrence runs token by token in batch order on the calling thread,
 * in float, in ggml's order (ssm_conv's taps in order, then the bias;
 * ssm_scan's state update then its dot with C); the chunked
 * (state-space-duality) form that would turn a long prefill's scan into
 * products is not used: it is a speed-up only. The two projections run on
 * the team as every other kind's. */
#include <math.h>
#include <string.h>

#include "cpu_layer.h"

static float silu(float v) { return v / (1.0f + expf(-v)); }

/* ggml's softplus: the identity above 20 */
static float softplus(float v) { return v > 20.0f ? v : logf(1.0f + expf(v)); }

/* One token of one sequence through the convolution and the scan: zx is
 * ssm_in's row (xBC overwritten by the convolution's output), st the
 * layer's part of the sequence's slot, y (DI) the output before ssm_out. */
static void mamba2_token(const model_config *c, const cpu_ssm_w *w, float *zx, float *st, float *y) {
    const int DI = c->ssm_d_inner, H = c->ssm_n_head, G = c->ssm_n_group, N = c->ssm_d_state;
    const int K = c->ssm_d_conv, P = DI / H, NC = (int)model_ssm_conv_ch(c);
    const float *z = zx, *dt = zx + DI + NC;
    float *xbc = zx + DI, *conv = st, *ss = st + (size_t)(K - 1) * NC;
    for (int ch = 0; ch < NC; ch++) {
        const float *k = w->kern + (size_t)ch * K, u = xbc[ch];
        float acc = 0.0f;
        for (int j = 0; j < K - 1; j++) acc += conv[(size_t)j * NC + ch] * k[j];
        acc += u * k[K - 1];
        for (int j = 0; j + 1 < K - 1; j++) conv[(size_t)j * NC + ch] = conv[(size_t)(j + 1) * NC + ch];
        conv[(size_t)(K - 2) * NC + ch] = u;
        xbc[ch] = silu(w->kern_b ? acc + w->kern_b[ch] : acc);
    }
    const float *x = xbc, *B = xbc + DI, *C = B + (size_t)G * N;
    const float *dt_b = w->head, *A = w->head + H, *Dk = w->head + 2 * H;
    for (int h = 0; h < H; h++) {
        const float dts = softplus(dt[h] + dt_b[h]), dA = expf(dts * A[h]);
        const int g = h / (H / G);
        const float *Bg = B + (size_t)g * N, *Cg = C + (size_t)g * N;
        for (int p = 0; p < P; p++) {
            const int i = h * P + p;
            const float xdt = x[i] * dts;
            float *s = ss + (size_t)i * N, sum = 0.0f;
            for (int n = 0; n < N; n++) {
                const float v = s[n] * dA + Bg[n] * xdt;
                s[n] = v;
                sum += v * Cg[n];
            }
            y[i] = (sum + x[i] * Dk[h]) * silu(z[i]);
        }
    }
    const int gs = DI / G; /* the grouped RMSNorm: each group on its own */
    for (int g = 0; g < G; g++)
        cpu_rmsnorm(y + (size_t)g * gs, y + (size_t)g * gs, w->gnorm + (size_t)g * gs, gs, c->norm_eps);
    if (c->resid_scale != 0) /* Granite's residual_scale, on ssm_out's input: the product is linear */
        for (int i = 0; i < DI; i++) y[i] *= c->resid_scale;
}

static void mamba2_forward(cpu_backend *cb, const cpu_span *s) {
    const cpu_ssm_w *w = &cb->layers[s->l].ssm;
    if (!w->kern) return; /* an attention layer */
    const model_config *c = &cb->base.m->cfg;
    const be_batch *bt = s->bt;
    const int D = c->dim, DI = c->ssm_d_inner, i0 = s->i0, M = s->i1 - s->i0;
    const size_t NIN = 2 * (size_t)DI + 2 * (size_t)c->ssm_n_group * c->ssm_d_state + (size_t)c->ssm_n_head;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D;
    float *zx = cb->ssm_zx + (size_t)i0 * NIN, *y = cb->ssm_y + (size_t)i0 * DI;
    for (int i = 0; i < M; i++) cpu_rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->norm, D, c->norm_eps);
    const cpu_mat *in = &w->in, *out = &w->out;
    cpu_matmul(cb, zx, (int)NIN, xb, i0, &in, 1, M, 0, s->threads);
    for (int i = 0; i < M; i++) {
        const int slot = bt->seqs[bt->seq[i0 + i]].state;
        float *st = cb->state + (size_t)slot * cb->state_floats + w->state_off;
        mamba2_token(c, w, zx + (size_t)i * NIN, st, y + (size_t)i * DI);
    }
    cpu_matmul(cb, x, D, y, i0, &out, 1, M, 1, s->threads);
}

const cpu_layer_kind cpu_layer_mamba2 = {
    .name = "mamba2", .prepare = cpu_state_prepare, .forward = mamba2_forward};
