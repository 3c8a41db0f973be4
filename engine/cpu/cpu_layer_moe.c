/* cpu_layer_moe.c - the mixture-of-experts layer kind (cpu_layer.h), as
 * llama.cpp's build_moe_ffn computes it for qwen3moe (softmax gating,
 * norm_w, no weight scale, no shared expert):
 *   xn = RMSNorm(x);  p = softmax(W_router . xn) over the n_expert experts;
 *   S  = the n_expert_used most probable;  w_e = p_e / max(sum_S p, 2^-14);
 *   x += sum over e in S of w_e * W2_e . SwiGLU(W1_e . xn, W3_e . xn).
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

/* Token row r's routing: p (n_expert logits) becomes the softmax (ggml's
 * soft_max: max subtracted, the sum in double); sel (k) the k most probable
 * experts, most probable first, and wt their renormalised weights. Equal
 * probabilities go to the lower expert index first: what ggml's argsort
 * (std::sort, an insertion sort at up to 16 elements) gives qwen3moe's
 * router up to 16 experts; above that ggml leaves the order of exact ties
 * unspecified. */
static void moe_route(float *p, int n_expert, int k, int32_t *sel, float *wt) {
    float mx = -INFINITY;
    for (int e = 0; e < n_expert; e++) mx = p[e] > mx ? p[e] : mx;
    double sum = 0;
    for (int e = 0; e < n_expert; e++) sum += (p[e] = expf(p[e] - mx));
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n_expert; e++) p[e] *= inv;
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
    double ws = 0;
    for (int j = 0; j < k; j++) ws += p[sel[j]];
    const float div = (float)ws > MOE_MIN_WEIGHT_SUM ? (float)ws : MOE_MIN_WEIGHT_SUM;
    for (int j = 0; j < k; j++) wt[j] = p[sel[j]] / div;
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
        moe_route(cb->moe_p + (size_t)i * E, E, K, cb->moe_sel + (size_t)i * K, cb->moe_wt + (size_t)i * K);
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
        cpu_ffn_swiglu(cb, h, h13, in, i0, &w->exps[3 * e], &w->exps[3 * e + 1], n, s->threads);
        cpu_matmul(cb, y, D, h, i0, &down, 1, n, 0, s->threads);
        for (int g = 0; g < n; g++) {
            float *xr = cb->x + (size_t)cb->moe_tok[i0 + g] * D;
            const float *yr = y + (size_t)g * D, gw = cb->moe_gw[i0 + g];
            for (int d = 0; d < D; d++) xr[d] += gw * yr[d];
        }
    }
}

const cpu_layer_kind cpu_layer_moe = {.name = "moe", .prepare = NULL, .forward = moe_forward};
