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
        if (b->m->cfg.embd_scale != 0) /* Granite's embedding_scale */
            for (int d = 0; d < D; d++) cb->x[(size_t)i * D + d] *= b->m->cfg.embd_scale;
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
