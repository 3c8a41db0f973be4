/* cpu_layer_moe.c - the mixture-of-experts layer kind (cpu_layer.h), as
 * llama.cpp's build_moe_ffn computes it (no weight scale, no shared
 * expert), for qwen3moe (softmax gating, norm_w):
 *   xn = RMSNorm(x);  p = softmax(W_router . xn) over the n_expert experts;
 *   S  = the n_expert_used most probable;  w_e = p_e / max(sum_S p, 2^-14);
 *   x += sum over e in S of w_e * W2_e . SwiGLU(W1_e . xn, W3_e . xn);
 * and for gpt-oss (SOFTMAX_WEIGHT gating, biases, swiglu_oai), the model
 * config's expert_gating and expert_act saying which (arch.h):
 *   l = W_router . xn + b_router;  S = the n_expert_used largest l;
 *   w_e = softmax over S of l;  g = W1_e . xn + b1_e;  u = W3_e . xn + b3_e;
 *   x += sum over e in S of w_e * (W2_e . oai(g, u) + b2_e),
 *   oai(g, u) = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1).
 *
 * A span's tokens are grouped by expert: every expert some token chose runs
 * one product over the rows of the tokens that chose it, so a batch reads
 * each chosen expert's weights once and a lone token only its
 * n_expert_used experts. Experts run in ascending order whatever the batch,
 * so a token's sum is added in the same order in a batch as alone: batched
 * and one-token steps agree to the products' own rounding. */
#include <math.h>
#include <string.h>

#include "cpu_layer.h"

/* The clamp of the selected probabilities' sum (ggml_clamp in
 * build_moe_ffn: the smallest normal f16). */
#define MOE_MIN_WEIGHT_SUM 6.103515625e-5f

/* sel (k) = the k largest of p[0, n_expert), largest first. Equal values
 * go to the lower expert index first: what ggml's argsort (std::sort, an
 * insertion sort at up to 16 elements) gives a router up to 16 experts;
 * above that ggml leaves the order of exact ties unspecified. */
static void moe_topk(const float *p, int n_expert, int k, int32_t *sel) {
    /* insertion into the sorted top k: strictly greater moves up, so an
     * earlier expert stays ahead of an equal later one */
    int n = 0;
    for (int e = 0; e < n_expert; e++) {
        if (n == k && !(p[e] > p[sel[k - 1]])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && p[e] > p[sel[j - 1]]) {
            sel[j] = sel[j - 1];
            j--;
        }
        sel[j] = e;
    }
}

/* qwen3moe's routing of one token: p (n_expert logits) becomes the softmax
 * (ggml's soft_max: max subtracted, the sum in double); sel (k) the k most
 * probable experts, most probable first, and wt their renormalised
 * weights. */
static void moe_route(float *p, int n_expert, int k, int32_t *sel, float *wt) {
    float mx = -INFINITY;
    for (int e = 0; e < n_expert; e++) mx = p[e] > mx ? p[e] : mx;
    double sum = 0;
    for (int e = 0; e < n_expert; e++) sum += (p[e] = expf(p[e] - mx));
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n_expert; e++) p[e] *= inv;
    moe_topk(p, n_expert, k, sel);
    double ws = 0;
    for (int j = 0; j < k; j++) ws += p[sel[j]];
    const float div = (float)ws > MOE_MIN_WEIGHT_SUM ? (float)ws : MOE_MIN_WEIGHT_SUM;
    for (int j = 0; j < k; j++) wt[j] = p[sel[j]] / div;
}

/* gpt-oss's routing of one token (llama.cpp's SOFTMAX_WEIGHT): sel (k) the
 * k largest logits of p, largest first; wt the softmax over those k
 * logits alone (ggml's soft_max, as moe_route's), no renormalisation. */
static void moe_route_weight(const float *p, int n_expert, int k, int32_t *sel, float *wt) {
    moe_topk(p, n_expert, k, sel);
    const float mx = p[sel[0]]; /* the largest */
    double sum = 0;
    for (int j = 0; j < k; j++) sum += (wt[j] = expf(p[sel[j]] - mx));
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j < k; j++) wt[j] *= inv;
}

/* Token row i's routing from its router logits p (n_expert): the router's
 * bias added, then the model's gating (model_config.expert_gating). */
static void moe_route_token(const model_config *c, const cpu_moe_w *w, float *p, int32_t *sel, float *wt) {
    const int E = c->n_expert, K = c->n_expert_used;
    if (w->router_b)
        for (int e = 0; e < E; e++) p[e] += w->router_b[e];
    if (c->expert_gating == ARCH_GATING_SOFTMAX_WEIGHT)
        moe_route_weight(p, E, K, sel, wt);
    else
        moe_route(p, E, K, sel, wt);
}

/* gpt-oss's activation of columns [n0, n1) (cpu_glu): the expert's gate and
 * up biases added, then ggml's swiglu_oai, operation for operation (in
 * float): x = min(g, limit), y = clamp(u, -limit, limit),
 * h = x / (1 + exp(alpha * -x)) * (y + 1). */
static void moe_glu_oai(const cpu_glu *glu, float *h, float *g, float *u, int n0, int n1) {
    const float alpha = glu->alpha, limit = glu->limit;
    for (int i = n0; i < n1; i++) {
        const float gb = glu->gate_b ? g[i] + glu->gate_b[i] : g[i];
        const float ub = glu->up_b ? u[i] + glu->up_b[i] : u[i];
        const float x = gb < limit ? gb : limit;
        const float y = ub < -limit ? -limit : ub > limit ? limit : ub;
        h[i] = x / (1.0f + expf(alpha * -x)) * (y + 1.0f);
    }
}

/* SwiGLU with the expert's gate and up biases added first: what the plain
 * activation is where an expert has biases. */
static void moe_glu_silu(const cpu_glu *glu, float *h, float *g, float *u, int n0, int n1) {
    for (int i = n0; i < n1; i++) {
        const float gb = glu->gate_b ? g[i] + glu->gate_b[i] : g[i];
        const float ub = glu->up_b ? u[i] + glu->up_b[i] : u[i];
        h[i] = gb / (1.0f + expf(-gb)) * ub;
    }
}

/* Expert e's activation for cpu_ffn_glu: gpt-oss's, or SwiGLU (plain, the
 * product's own kernel, when the expert has no biases: fn NULL). */
static cpu_glu moe_glu(const model_config *c, const cpu_moe_w *w, int e) {
    const size_t FE = (size_t)c->expert_ffn;
    cpu_glu g = {NULL, w->gate_b ? w->gate_b + (size_t)e * FE : NULL,
                 w->up_b ? w->up_b + (size_t)e * FE : NULL, ARCH_OAI_ALPHA, ARCH_OAI_LIMIT};
    if (c->expert_act == ARCH_ACT_SWIGLU_OAI)
        g.fn = moe_glu_oai;
    else if (g.gate_b || g.up_b)
        g.fn = moe_glu_silu;
    return g;
}

/* Expert e's down bias added to its n output rows y (n, D), before they
 * are weighted (llama.cpp adds it to the expert's output). */
static void moe_down_bias(const model_config *c, const cpu_moe_w *w, int e, float *y, int n) {
    if (!w->down_b) return;
    const int D = c->dim;
    const float *b = w->down_b + (size_t)e * D;
    for (int g = 0; g < n; g++)
        for (int d = 0; d < D; d++) y[(size_t)g * D + d] += b[d];
}

/* The span's tokens that chose expert e, into moe_tok / moe_gw from row i0
 * on (a span's rows are its own in every buffer, so token-split parts do
 * not meet). Returns how many. */
static int moe_group(cpu_backend *cb, int i0, int i1, int k, int e) {
    int n = 0;
    for (int i = i0; i < i1; i++) {
        const int32_t *sel = cb->moe_sel + (size_t)i * k;
        for (int j = 0; j < k; j++)
            if (sel[j] == e) {
                cb->moe_tok[i0 + n] = i;
                cb->moe_gw[i0 + n] = cb->moe_wt[(size_t)i * k + j];
                n++;
                break;
            }
    }
    return n;
}

static void moe_forward(cpu_backend *cb, const cpu_span *s) {
    const model_config *c = &cb->base.m->cfg;
    const cpu_moe_w *w = &cb->layers[s->l].moe;
    const int D = c->dim, E = c->n_expert, K = c->n_expert_used, FE = c->expert_ffn;
    const int i0 = s->i0, M = s->i1 - s->i0;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D;
    for (int i = 0; i < M; i++) cpu_rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->norm, D, c->norm_eps);
    const cpu_mat *router = &w->router;
    cpu_matmul(cb, cb->moe_p + (size_t)i0 * E, E, xb, i0, &router, 1, M, 0, s->threads);
    for (int i = i0; i < s->i1; i++)
        moe_route_token(c, w, cb->moe_p + (size_t)i * E, cb->moe_sel + (size_t)i * K,
                        cb->moe_wt + (size_t)i * K);
    float *h = cb->h + (size_t)i0 * FE, *h13 = cb->h13 + (size_t)i0 * 2 * FE, *y = cb->moe_y + (size_t)i0 * D;
    for (int e = 0; e < E; e++) {
        const int n = moe_group(cb, i0, s->i1, K, e);
        if (!n) continue;
        /* every token of the span: its rows are already in order in xb */
        const float *in = xb;
        if (n < M) {
            float *xg = cb->moe_xg + (size_t)i0 * D;
            for (int g = 0; g < n; g++)
                memcpy(xg + (size_t)g * D, cb->xb + (size_t)cb->moe_tok[i0 + g] * D, (size_t)D * sizeof *xg);
            in = xg;
        }
        const cpu_mat *down = &w->exps[3 * e + 2];
        const cpu_glu glu = moe_glu(c, w, e);
        cpu_ffn_glu(cb, h, h13, in, i0, &w->exps[3 * e], &w->exps[3 * e + 1], n, s->threads, &glu);
        cpu_matmul(cb, y, D, h, i0, &down, 1, n, 0, s->threads);
        moe_down_bias(c, w, e, y, n);
        for (int g = 0; g < n; g++) {
            float *xr = cb->x + (size_t)cb->moe_tok[i0 + g] * D;
            const float *yr = y + (size_t)g * D, gw = cb->moe_gw[i0 + g];
            for (int d = 0; d < D; d++) xr[d] += gw * yr[d];
        }
    }
}

const cpu_layer_kind cpu_layer_moe = {.name = "moe", .prepare = NULL, .forward = moe_forward};
