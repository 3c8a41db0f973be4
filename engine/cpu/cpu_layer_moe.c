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
 * gemma4's (26B-A4B; softmax gating, norm_w, GELU) run beside its dense
 * part (cpu_layer_ffn.c, whose output waits in xo), on a layer with a
 * router only:
 *   p = softmax(W_router . (rms(x) / sqrt(dim) * s_router)), S and w_e as
 *   qwen3moe's; xn = RMSNorm_pre2(x);
 *   m = sum over e in S of w_e * s_e * W2_e . (gelu(W1_e . xn) * W3_e . xn);
 *   x += RMSNorm_post(xo + RMSNorm_post2(m)), then x *= layer_output_scale.
 *
 * A span's tokens are grouped by expert: every expert some token chose runs
 * one product over the rows of the tokens that chose it, so a batch reads
 * each chosen expert's weights once and a lone token only its
 * n_expert_used experts. Experts are added in ascending order whatever the
 * batch, so a token's sum is added in the same order in a batch as alone:
 * batched and one-token steps agree to the products' own rounding. */
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

/* lfm2moe's routing of one token (llama.cpp's SIGMOID gating with
 * exp_probs_b and norm_w): p (n_expert logits) becomes ggml's sigmoid,
 * 1 / (1 + exp(-l)); sel (k) the k largest p + probs_b, largest first; wt
 * their p, without the bias, divided by their sum (clamped as moe_route). */
static void moe_route_sigmoid(float *p, const float *probs_b, int n_expert, int k, int32_t *sel, float *wt) {
    float biased[MODEL_MAX_EXPERTS];
    for (int e = 0; e < n_expert; e++) {
        p[e] = 1.0f / (1.0f + expf(-p[e]));
        biased[e] = probs_b ? p[e] + probs_b[e] : p[e];
    }
    moe_topk(biased, n_expert, k, sel);
    double ws = 0;
    for (int j = 0; j < k; j++) ws += p[sel[j]];
    const float div = (float)ws > MOE_MIN_WEIGHT_SUM ? (float)ws : MOE_MIN_WEIGHT_SUM;
    for (int j = 0; j < k; j++) wt[j] = p[sel[j]] / div;
}

/* Token row i's routing from its router logits p (n_expert): the router's
 * bias added, then the model's gating (model_config.expert_gating). */
static void moe_route_token(const model_config *c, const cpu_moe_w *w, float *p, int32_t *sel, float *wt) {
    const int E = c->n_expert, K = c->n_expert_used;
    if (w->router_b)
        for (int e = 0; e < E; e++) p[e] += w->router_b[e];
    if (c->expert_gating == ARCH_GATING_SOFTMAX_WEIGHT)
        moe_route_weight(p, E, K, sel, wt);
    else if (c->expert_gating == ARCH_GATING_SIGMOID_NORM)
        moe_route_sigmoid(p, w->probs_b, E, K, sel, wt);
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

/* gemma4's: ggml's gelu (tanh form) of the gate times the up, biases first
 * where the expert has them. */
static void moe_glu_gelu(const cpu_glu *glu, float *h, float *g, float *u, int n0, int n1) {
    const float k = 0.79788456080286535587989211986876f, a = 0.044715f; /* sqrt(2 / pi) */
    for (int i = n0; i < n1; i++) {
        const float x = glu->gate_b ? g[i] + glu->gate_b[i] : g[i];
        const float ub = glu->up_b ? u[i] + glu->up_b[i] : u[i];
        h[i] = 0.5f * x * (1.0f + tanhf(k * x * (1.0f + a * x * x))) * ub;
    }
}

/* Expert e's activation for moe_up: gpt-oss's, or SwiGLU (plain, the
 * product's own kernel, when the expert has no biases: fn NULL). */
static cpu_glu moe_glu(const model_config *c, const cpu_moe_w *w, int e) {
    const size_t FE = (size_t)c->expert_ffn;
    cpu_glu g = {NULL, w->gate_b ? w->gate_b + (size_t)e * FE : NULL,
                 w->up_b ? w->up_b + (size_t)e * FE : NULL, ARCH_OAI_ALPHA, ARCH_OAI_LIMIT};
    if (c->expert_act == ARCH_ACT_SWIGLU_OAI)
        g.fn = moe_glu_oai;
    else if (c->expert_act == ARCH_ACT_GELU)
        g.fn = moe_glu_gelu;
    else if (g.gate_b || g.up_b)
        g.fn = moe_glu_silu;
    return g;
}

/* The experts of a span (one token or a batch), in two runs of the team
 * whatever the number of experts:
 *  - up (moe_up_units): the chosen experts shared out whole, by work
 *    stealing; a thread gathers an expert's tokens' inputs (each token's
 *    put in the gate's form once, not once per expert), runs its gate and
 *    up products and the SwiGLU in a T-row part of h13 and h of its own,
 *    and writes the SwiGLU rows in the down product's form to moe_hq, a
 *    row a (token, expert) pair;
 *  - down (moe_down_units): the down matrices' rows shared out; for its
 *    rows a thread runs every chosen expert's down product, in ascending
 *    order, and adds the weighted outputs to the tokens' residual rows: a
 *    token's sum in the same order as alone, no element written by two
 *    threads.
 * Why not each expert's products shared by rows as a dense layer's: that
 * wakes the team twice an expert (256 times a layer in a 256-token prefill
 * chunk of 128 experts), and a batch-1 step 16 times a layer; measured on a
 * Qwen3-30B-A3B shape (AMD EPYC Zen 4, two threads, a loaded host),
 * batch-1 decode went from 54-65 to 64-70 tokens/s. Every product is
 * computed as before: the same bits. */
typedef struct moe_job {
    cpu_backend *cb;
    const cpu_moe_w *w;
    const cpu_span *s;
    const int32_t *act; /* the experts some token chose, ascending */
    const int32_t *off; /* their pairs (moe_off's slot) */
    int n_act, par, chunk, align;
} moe_job;

/* The span's pairs by expert into moe_tok / moe_gw from row i0 x K on,
 * tokens ascending in each; off (E + 1) their bounds, act the experts with
 * any. Returns how many experts have. */
static int moe_sort(cpu_backend *cb, const cpu_span *s, int32_t *off, int32_t *act) {
    const int E = cb->base.m->cfg.n_expert, K = cb->base.m->cfg.n_expert_used;
    int32_t *tok = cb->moe_tok + (size_t)s->i0 * K;
    float *gw = cb->moe_gw + (size_t)s->i0 * K;
    memset(off, 0, (size_t)(E + 1) * sizeof *off);
    for (int i = s->i0; i < s->i1; i++)
        for (int j = 0; j < K; j++) off[cb->moe_sel[(size_t)i * K + j] + 1]++;
    int n_act = 0;
    for (int e = 0; e < E; e++) {
        if (off[e + 1]) act[n_act++] = e;
        off[e + 1] += off[e];
    }
    /* off[e] as expert e's cursor, then shifted back */
    for (int i = s->i0; i < s->i1; i++)
        for (int j = 0; j < K; j++) {
            const int32_t p = off[cb->moe_sel[(size_t)i * K + j]]++;
            tok[p] = i;
            gw[p] = cb->moe_wt[(size_t)i * K + j];
        }
    for (int e = E; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;
    return n_act;
}

/* Whether products over a and b take their input rows in the same form. */
static int moe_same_form(const cpu_mat *a, const cpu_mat *b) {
    return a->f.p ? b->f.p != NULL : !b->f.p && a->q.t->act == b->q.t->act;
}

/* The n tokens' (batch rows tok) inputs in w's form into dst, one row
 * after another: cb->xb's rows (f32 w) or their copies in w's activation
 * format (cpu_quantize_in wrote them at their batch rows). Returns dst. */
static const unsigned char *moe_gather(const cpu_backend *cb, const cpu_mat *w, const int32_t *tok, int n,
                                       unsigned char *dst) {
    const size_t rb = cpu_in_row_bytes(w);
    const unsigned char *src = (const unsigned char *)cb->xb;
    size_t stride = (size_t)cb->base.m->cfg.dim * sizeof(float);
    if (!w->f.p) {
        const int a = cpu_act_index(w->q.t->act);
        src = cb->xq[a], stride = cb->xq_stride[a];
    }
    for (int g = 0; g < n; g++) memcpy(dst + (size_t)g * rb, src + (size_t)tok[g] * stride, rb);
    return dst;
}

/* Expert e's gate, up and SwiGLU over its tokens, on scratch part `part`. */
static void moe_up(const moe_job *j, int part, int e) {
    cpu_backend *cb = j->cb;
    const model_config *c = &cb->base.m->cfg;
    const int K = c->n_expert_used, FE = c->expert_ffn, T = cb->base.opt.max_batch_tokens;
    const cpu_mat *gate = &j->w->exps[3 * e], *up = &j->w->exps[3 * e + 1], *down = &j->w->exps[3 * e + 2];
    const int p0 = j->off[e], n = j->off[e + 1] - p0;
    const int32_t *tok = cb->moe_tok + (size_t)j->s->i0 * K + p0;
    unsigned char *xg = cb->moe_xg + (size_t)part * T * cb->moe_xrow;
    const unsigned char *xu = moe_gather(cb, gate, tok, n, xg);
    if (!moe_same_form(gate, up)) /* after the gate's rows, in up's form */
        xu = moe_gather(cb, up, tok, n, xg + (size_t)n * cpu_in_row_bytes(gate));
    float *h13 = cb->h13 + (size_t)part * T * 2 * FE, *h = cb->h + (size_t)part * T * FE;
    cpu_in_part(h13, 2 * FE, xg, gate, n, 0, cpu_mat_units(gate), 0);
    cpu_in_part(h13 + FE, 2 * FE, xu, up, n, 0, cpu_mat_units(up), 0);
    const cpu_glu glu = moe_glu(c, j->w, e);
    for (int g = 0; g < n; g++) {
        float *gr = h13 + (size_t)g * 2 * FE;
        if (glu.fn)
            glu.fn(&glu, h + (size_t)g * FE, gr, gr + FE, 0, FE);
        else
            cb->gk->swiglu(h + (size_t)g * FE, gr, gr + FE, 0, FE);
    }
    cpu_in_rows(cb, down, h, n, cb->moe_hq + ((size_t)j->s->i0 * K + (size_t)p0) * cb->moe_hrow);
}

/* Units [u0, u1) of every chosen expert's down product, added to the
 * residual rows of its tokens, experts in ascending order. */
static void moe_down(const moe_job *j, int u0, int u1) {
    cpu_backend *cb = j->cb;
    const model_config *c = &cb->base.m->cfg;
    const int D = c->dim, K = c->n_expert_used, i0 = j->s->i0;
    int c0, c1;
    cpu_unit_cols(&j->w->exps[2], u0, u1, &c0, &c1);
    float *y = cb->moe_y + (size_t)i0 * D; /* n <= the span's tokens: its own rows */
    for (int a = 0; a < j->n_act; a++) {
        const int e = j->act[a], p0 = j->off[e], n = j->off[e + 1] - p0;
        const cpu_mat *down = &j->w->exps[3 * e + 2];
        cpu_in_part(y, D, cb->moe_hq + ((size_t)i0 * K + (size_t)p0) * cb->moe_hrow, down, n, u0, u1, 0);
        const int32_t *tok = cb->moe_tok + (size_t)i0 * K + p0;
        const float *gw = cb->moe_gw + (size_t)i0 * K + p0;
        /* gpt-oss's down bias joins the expert's output before its weight */
        const float *bias = j->w->down_b ? j->w->down_b + (size_t)e * D : NULL;
        float *dst = cb->moe_acc && j->w->post_norm_2 ? cb->moe_acc : cb->x; /* gemma4's: a sum apart */
        for (int g = 0; g < n; g++) {
            float *xr = dst + (size_t)tok[g] * D;
            const float *yr = y + (size_t)g * D;
            if (j->w->down_scale) { /* gemma4's per-expert scale, then the weight */
                const float sc = j->w->down_scale[e];
                for (int d = c0; d < c1; d++) xr[d] += gw[g] * (yr[d] * sc);
            } else if (bias)
                for (int d = c0; d < c1; d++) xr[d] += gw[g] * (yr[d] + bias[d]);
            else
                for (int d = c0; d < c1; d++) xr[d] += gw[g] * yr[d];
        }
    }
}

static void moe_up_units(void *arg, int tid, int nth) {
    const moe_job *j = arg;
    int a0, a1;
    (void)nth;
    if (j->par <= 1) {
        for (int a = 0; a < j->n_act; a++) moe_up(j, j->s->slot, j->act[a]);
        return;
    }
    while (cpu_steal_take(j->cb->steal, tid, j->par, j->chunk, 1, &a0, &a1))
        for (int a = a0; a < a1; a++) moe_up(j, tid, j->act[a]);
}

static void moe_down_units(void *arg, int tid, int nth) {
    const moe_job *j = arg;
    int u0, u1;
    (void)nth;
    if (j->par <= 1) {
        moe_down(j, 0, cpu_mat_units(&j->w->exps[2]));
        return;
    }
    while (cpu_steal_take(j->cb->steal, tid, j->par, j->chunk, j->align, &u0, &u1)) moe_down(j, u0, u1);
}

static void moe_experts(cpu_backend *cb, const cpu_span *s, const cpu_moe_w *w) {
    const model_config *c = &cb->base.m->cfg;
    const int D = c->dim, E = c->n_expert, K = c->n_expert_used, FE = c->expert_ffn, M = s->i1 - s->i0;
    int32_t *off = cb->moe_off + (size_t)s->slot * (2 * E + 1), *act = off + E + 1;
    moe_job j = {.cb = cb, .w = w, .s = s, .act = act, .off = off};
    j.n_act = moe_sort(cb, s, off, act);
    const cpu_mat *const gate_up[2] = {&w->exps[0], &w->exps[1]};
    cpu_quantize_in(cb, cb->xb + (size_t)s->i0 * D, M, D, s->i0, gate_up, 2);
    /* the team when the pairs' products pay for waking it (cpu_gemm_threads) */
    int par = cpu_gemm_threads(M * K, 3 * FE, D, s->threads);
    if (par > j.n_act) par = j.n_act;
    j.par = par;
    if (par > 1) j.chunk = cpu_steal_init(cb->steal, j.n_act, par, 1);
    cpu_team_run(cb->team, par, moe_up_units, &j);
    if (par > 1) {
        const int nu = cpu_mat_units(&w->exps[2]);
        j.align = w->exps[2].f.p ? 1 : 8; /* an x8 group of rows, a panel */
        if (par > nu) par = j.par = nu;
        j.chunk = cpu_steal_init(cb->steal, nu, par, j.align);
    }
    cpu_team_run(cb->team, par, moe_down_units, &j);
}

/* gemma4's router input of token rows [i0, i0 + M): rms(x) / sqrt(dim) times
 * ffn_gate_inp.scale (ggml's rms_norm, scale, mul), into moe_acc. */
static void moe_router_in(cpu_backend *cb, const cpu_moe_w *w, int i0, int M) {
    const model_config *c = &cb->base.m->cfg;
    const int D = c->dim;
    const float inv = 1.0f / sqrtf((float)D);
    for (int i = i0; i < i0 + M; i++) {
        const float *x = cb->x + (size_t)i * D;
        float *r = cb->moe_acc + (size_t)i * D, ss = 0.0f;
        for (int d = 0; d < D; d++) ss += x[d] * x[d];
        ss /= D;
        ss += c->norm_eps;
        ss = 1.0f / sqrtf(ss);
        for (int d = 0; d < D; d++) r[d] = x[d] * ss * inv * w->router_scale[d];
    }
}

/* gemma4's end of a layer with experts: their sum normed (post_ffw_norm_2),
 * the dense part's (xo, cpu_layer_ffn.c) added, that normed
 * (post_ffw_norm) and added to x, then x scaled (layer_output_scale). */
static void moe_gemma4_end(cpu_backend *cb, int l, int i0, int M, int threads) {
    const model_config *c = &cb->base.m->cfg;
    const cpu_layer *ly = &cb->layers[l];
    const int D = c->dim;
    for (int i = i0; i < i0 + M; i++) {
        float *a = cb->moe_acc + (size_t)i * D, *x = cb->x + (size_t)i * D;
        const float *y = cb->xo + (size_t)i * D;
        cpu_rmsnorm(a, a, ly->moe.post_norm_2, D, c->norm_eps);
        for (int d = 0; d < D; d++) a[d] = y[d] + a[d];
        cpu_rmsnorm(a, a, ly->ffn.post_norm, D, c->norm_eps);
        for (int d = 0; d < D; d++) x[d] += a[d];
    }
    cpu_ple_apply(cb, l, i0, M, threads);
    if (ly->ffn.out_scale)
        for (size_t j = 0; j < (size_t)M * D; j++) cb->x[(size_t)i0 * D + j] *= ly->ffn.out_scale[0];
}

static void moe_forward(cpu_backend *cb, const cpu_span *s) {
    const model_config *c = &cb->base.m->cfg;
    const cpu_moe_w *w = &cb->layers[s->l].moe;
    if (!w->norm || !w->exps) return; /* a dense layer (lfm2moe's leading ones; gemma4's without experts) */
    const int D = c->dim, E = c->n_expert, K = c->n_expert_used;
    const int i0 = s->i0, M = s->i1 - s->i0;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D;
    for (int i = 0; i < M; i++) cpu_rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->norm, D, c->norm_eps);
    const cpu_mat *router = &w->router;
    const int g4 = w->router_scale != NULL;
    if (g4) moe_router_in(cb, w, i0, M);
    cpu_matmul(cb, cb->moe_p + (size_t)i0 * E, E, g4 ? cb->moe_acc + (size_t)i0 * D : xb, i0, &router, 1, M,
               0, s->threads);
    if (g4) memset(cb->moe_acc + (size_t)i0 * D, 0, (size_t)M * D * sizeof(float));
    for (int i = i0; i < s->i1; i++)
        moe_route_token(c, w, cb->moe_p + (size_t)i * E, cb->moe_sel + (size_t)i * K,
                        cb->moe_wt + (size_t)i * K);
    moe_experts(cb, s, w);
    if (g4) moe_gemma4_end(cb, s->l, i0, M, s->threads);
}

const cpu_layer_kind cpu_layer_moe = {.name = "moe", .prepare = NULL, .forward = moe_forward};
