/* cpu_layer_norm.c - what the CPU forward pass runs around its layers
 * (cpu_layer.h): the RMS norm every kind uses, the token embedding, the
 * final norm and the classifier. */
#include <math.h>
#include <string.h>

#include "cpu_layer.h"
#include "quant.h"

/* llama2.c's rmsnorm, operation for operation, so greedy output matches it. */
void cpu_rmsnorm(float *o, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
    ss /= n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++) o[j] = w[j] * (ss * x[j]);
}

/* gemma4's per-layer inputs of the batch's tokens (llama.cpp's
 * project_per_layer_inputs): for each layer l, with P values a layer,
 *   ple_l = (RMSNorm_pl((W_model . x)_l / sqrt(dim)) + tok_pl_l * sqrt(P)) / sqrt(2),
 * x the scaled embedding, tok_pl the token's row of per_layer_token_embd. */
static void ple_inputs(cpu_backend *cb, const be_batch *bt) {
    const model *m = cb->base.m;
    const model_config *c = &m->cfg;
    const int D = c->dim, P = c->n_embd_pl, T = bt->n_tokens;
    const size_t LP = (size_t)c->n_layers * P;
    const cpu_mat *pm = &cb->ple_model;
    cpu_matmul(cb, cb->ple, (int)LP, cb->x, 0, &pm, 1, T, 0, cb->n_threads);
    const float inv_d = 1.0f / sqrtf((float)D), sp = sqrtf((float)P), inv2 = 1.0f / sqrtf(2.0f);
    uint64_t rb = 0;
    quant_row_bytes(m->ple_tok.type, (uint64_t)LP, &rb); /* checked at creation */
    for (int i = 0; i < T; i++) {
        const char *trow = (const char *)m->ple_tok.data + (size_t)bt->token[i] * (size_t)rb;
        float *tok = cb->ple_h + (size_t)i * P; /* a layer's P of the token's row */
        for (int l = 0; l < c->n_layers; l++) {
            float *r = cb->ple + (size_t)i * LP + (size_t)l * P;
            uint64_t off = 0;
            quant_row_bytes(m->ple_tok.type, (uint64_t)l * P, &off);
            quant_to_f32(m->ple_tok.type, trow + off, tok, (uint64_t)P);
            for (int j = 0; j < P; j++) r[j] *= inv_d;
            cpu_rmsnorm(r, r, cb->ple_norm, P, c->norm_eps);
            for (int j = 0; j < P; j++) r[j] = (r[j] + tok[j] * sp) * inv2;
        }
    }
}

/* Rows from the f32 copy, from the tied classifier's panels, or (quantized)
 * from the file mapping (the shape was checked at creation). */
void cpu_embed(cpu_backend *cb, const be_batch *bt) {
    const backend *b = &cb->base;
    const int D = b->m->cfg.dim;
    for (int i = 0; i < bt->n_tokens; i++) {
        if (cb->emb)
            memcpy(cb->x + (size_t)i * D, cb->emb + (size_t)bt->token[i] * D, (size_t)D * sizeof(float));
        else if (b->m->tied && cb->wcls.f.p)
            gemm_row(&cb->wcls.f, bt->token[i], cb->x + (size_t)i * D);
        else
            quant_to_f32(b->m->tok_emb.type,
                         (const char *)b->m->tok_emb.data + (size_t)bt->token[i] * cb->emb_row_bytes,
                         cb->x + (size_t)i * D, (uint64_t)D);
        const float es = b->m->cfg.emb_scale; /* gemma4: sqrt(dim); Granite's embedding_scale */
        if (es > 0)
            for (int d = 0; d < D; d++) cb->x[(size_t)i * D + d] *= es;
    }
    if (cb->ple) ple_inputs(cb, bt);
}

/* ggml's gelu, the tanh form. */
static float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
}

void cpu_ple_apply(cpu_backend *cb, int l, int i0, int M, int threads) {
    if (!cb->ple) return;
    const model_config *c = &cb->base.m->cfg;
    const cpu_ple_w *p = &cb->layers[l].ple;
    const int D = c->dim, P = c->n_embd_pl;
    const size_t LP = (size_t)c->n_layers * P;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D, *g = cb->ple_h + (size_t)i0 * P;
    const cpu_mat *gm = &p->gate, *pm = &p->proj;
    cpu_matmul(cb, g, P, x, i0, &gm, 1, M, 0, threads);
    for (int i = 0; i < M; i++) {
        const float *in = cb->ple + (size_t)(i0 + i) * LP + (size_t)l * P;
        float *gr = g + (size_t)i * P;
        for (int j = 0; j < P; j++) gr[j] = gelu(gr[j]) * in[j];
    }
    cpu_matmul(cb, xb, D, g, i0, &pm, 1, M, 0, threads);
    for (int i = 0; i < M; i++) {
        float *o = xb + (size_t)i * D, *r = x + (size_t)i * D;
        cpu_rmsnorm(o, o, p->post_norm, D, c->norm_eps);
        for (int d = 0; d < D; d++) r[d] += o[d];
    }
}

/* The final norm of tokens [i0, i1) that have an output row, into xo. */
void cpu_out_norm(cpu_backend *cb, const be_batch *bt, int i0, int i1) {
    const model_config *c = &cb->base.m->cfg;
    const int D = c->dim;
    for (int i = i0; i < i1; i++) {
        int r = bt->out_row[i];
        if (r < 0) continue;
        cpu_rmsnorm(cb->xo + (size_t)r * D, cb->x + (size_t)i * D, cb->out_norm, D, c->norm_eps);
        if (cb->xoq)
            qact_row_isa(cb->isa, cb->wcls.q.t->act, cb->xo + (size_t)r * D,
                         cb->xoq + (size_t)r * cb->xoq_stride, D);
    }
}

/* The classifier, logits (n_out, vocab) = xo . wcls^T, is the biggest product
 * of a step (a third of a batch-32 step on the stories15M shape). After a
 * token split, in the same region, its panels are cut by the learnt shares,
 * and the cut's timing teaches them in turn: measured on a shared host, one
 * core's half can take 1.4x the other's. classify_splits: whether it is cut that way for
 * n_out rows. In a region of its own (classify) it is shared by work
 * stealing, as the layers' products are. */
int cpu_classify_splits(const cpu_backend *cb, int n_out) {
    const cpu_mat *w = &cb->wcls;
    const int nt = cb->n_threads;
    return nt >= 2 && cpu_mat_units(w) >= 4 * nt &&
           cpu_gemm_threads(n_out, cpu_mat_n(w), cb->base.m->cfg.dim, nt) >= nt;
}

/* Units [u0, u1) of the classifier: logits (n_out, vocab) from xo (f32
 * panels) or its quantized rows xoq. */
static void classify_units(const cpu_backend *cb, float *logits, int n_out, int u0, int u1) {
    const cpu_mat *w = &cb->wcls;
    if (w->f.p)
        gemm_panels(logits, w->f.n, cb->xo, &w->f, n_out, u0, u1, 0);
    else
        cpu_qdot_rows(logits, w->q.n, cb->xoq, cb->xoq_stride, &w->q, n_out, u0, u1, 0);
}

/* pcut[0..n_threads] from the shares, at least one unit a thread. */
void cpu_classify_cuts(cpu_backend *cb) {
    const int np = cpu_mat_units(&cb->wcls), nt = cb->n_threads;
    int *cut = cb->pcut;
    double upto = 0.0;
    cut[0] = 0;
    for (int p = 0; p < nt; p++) {
        upto += cb->share[p];
        int c = p + 1 == nt ? np : (int)(np * upto + 0.5);
        cut[p + 1] = c < cut[p] + 1 ? cut[p] + 1 : c > np - (nt - 1 - p) ? np - (nt - 1 - p) : c;
    }
}

/* Thread t's panels, [pcut[t], pcut[t + 1]), timed into cls_s[t]. */
void cpu_classify_part(cpu_backend *cb, float *logits, int n_out, int t) {
    const double t0 = cpu_now_s();
    classify_units(cb, logits, n_out, cb->pcut[t], cb->pcut[t + 1]);
    cb->cls_s[t] = cpu_now_s() - t0;
}

static void cls_units(const cpu_mm_job *j, int u0, int u1) { classify_units(j->cb, j->y, j->M, u0, u1); }

/* The classifier on the team (when the layers ran without a token split),
 * its units shared by work stealing (cpu_steal.h). */
void cpu_classify(cpu_backend *cb, float *logits, int n_out) {
    const int nu = cpu_mat_units(&cb->wcls);
    int par = cpu_gemm_threads(n_out, cpu_mat_n(&cb->wcls), cb->base.m->cfg.dim, cb->n_threads);
    if (par > nu) par = nu;
    const cpu_mat *const w[1] = {&cb->wcls};
    cpu_mm_job j = {.cb = cb, .units = cls_units, .y = logits, .mats = w, .n_mats = 1, .M = n_out};
    cpu_mm_run(cb, &j, nu, par);
}
