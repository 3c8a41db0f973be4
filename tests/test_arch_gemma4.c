/* test_arch_gemma4.c - gemma4 (the 31B's layout) through the CPU backend
 * against a scalar reference written here in double precision from the
 * block as llama.cpp's gemma4 graph computes it: windowed and full layers
 * with their own head size, KV heads and RoPE base, the full layers'
 * quarter-head RoPE (rope_freqs' 1e30 divisors) and V = K (no attn_v),
 * q/k head norms and a unit norm of each V head, unscaled scores, the
 * norms after attention and feed-forward, GELU (tanh form), the layer's
 * output scale, embeddings times sqrt(dim), and logits soft-capped. The
 * reference is driven by the parameters the test asked synth for, not by
 * what model.c read back; each feature switched off in it must be far off.
 * Also: the table's row and the loader's per-layer geometry (what it
 * refuses: test_arch_refusals.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "backend.h"
#include "ck_test.h"
#include "convert.h"
#include "model.h"
#include "quant.h"
#include "test_arch_params.h"
#include "test_arch_run.h"

static char dir[64];

static const char *tmp(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* What the reference computes; each flag one feature (1: as gemma4). */
typedef struct g4_ref {
    const synth_params *sp;
    int window;     /* the windowed layers' mask */
    int partial;    /* the full layers' rope_freqs: pairs from hd / 8 on unturned */
    int theta_swa;  /* the windowed layers' own base (off: the full layers') */
    int v_norm;     /* V heads RMS-normed */
    int unscaled;   /* scores q.k (off: / sqrt(hd)) */
    int post_norms; /* attention and feed-forward outputs normed before the add */
    int gelu;       /* GELU (off: SiLU) for the gate */
    int out_scale;  /* layer_output_scale */
    int emb_scale;  /* embeddings times sqrt(dim) */
    int softcap;    /* cap tanh(l / cap) */
    int moe_router; /* the experts' router input rms(x) / sqrt(dim) x scale (off: their normed input) */
    int moe_scale;  /* each expert's output times ffn_down_exps.scale */
    int ple;        /* the per-layer embeddings (E2B/E4B) */
    int kv_share;   /* shared layers read the last earlier layer of their kind (off: the first) */
} g4_ref;

static const g4_ref g4_on = {NULL, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

static float *f32_of(const model_tensor *t) {
    if (!t->n) return NULL;
    float *f = malloc((size_t)t->n * sizeof *f);
    if (f && quant_to_f32(t->type, t->data, f, t->n)) {
        free(f);
        f = NULL;
    }
    return f;
}

/* o = w * x / rms(x); w NULL: a unit weight. */
static void rms_d(double *o, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = (w ? w[i] : 1.0) * (x[i] * s);
}

static void matvec_d(double *y, const float *w, const double *x, int n, int k) {
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < k; j++) s += (double)w[(size_t)i * k + j] * x[j];
        y[i] = s;
    }
}

/* NEOX RoPE of n heads of hd at pos, base theta; pairs from `turned` on
 * divided by 1e30 (as good as unturned). */
static void rope_d(double *v, int n, int hd, int pos, double theta, int turned) {
    for (int h = 0; h < n; h++)
        for (int i = 0; i < hd / 2; i++) {
            double a = pos * pow(theta, -2.0 * i / hd) / (i < turned ? 1.0 : 1e30);
            double c = cos(a), s = sin(a), *p = v + (size_t)h * hd, v0 = p[i], v1 = p[i + hd / 2];
            p[i] = v0 * c - v1 * s;
            p[i + hd / 2] = v0 * s + v1 * c;
        }
}

static double gelu_d(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * x * (1 + 0.044715 * x * x))); }

/* The 26B-A4B's experts of one token: xa the layer's stream after attention
 * (D), y (D) their output before post_ffw_norm_2: the router over
 * rms(xa) / sqrt(D) x scale (o->moe_router), softmax, the top `used`, their
 * probabilities renormalised, each expert's GELU feed-forward on
 * pre_ffw_norm_2(xa), times its scale, weighted. */
static int ref_g4_moe(const model_layer *ly, const g4_ref *o, const synth_params *sp, int D, const double *xa,
                      double *y) {
    const int E = sp->n_expert, K = sp->n_expert_used, FE = sp->expert_ffn;
    float *wr = f32_of(&ly->router), *rs = f32_of(&ly->router_scale), *pn = f32_of(&ly->pre_norm_2),
          *wg = f32_of(&ly->gate_exps), *wu = f32_of(&ly->up_exps), *wd = f32_of(&ly->down_exps),
          *ds = f32_of(&ly->down_exps_s);
    double *xn = malloc(D * sizeof *xn), *r = malloc(D * sizeof *r), *p = malloc(E * sizeof *p),
           *g = malloc(FE * sizeof *g), *u = malloc(FE * sizeof *u), *d = malloc(D * sizeof *d);
    int ok = wr && rs && pn && wg && wu && wd && ds && xn && r && p && g && u && d;
    if (ok) {
        rms_d(xn, xa, pn, D, 1e-6);
        rms_d(r, xa, NULL, D, 1e-6);
        for (int i = 0; i < D; i++) r[i] = o->moe_router ? r[i] / sqrt((double)D) * rs[i] : xn[i];
        matvec_d(p, wr, r, E, D);
        double mx = -INFINITY, sum = 0, wsum = 0;
        for (int e = 0; e < E; e++) mx = fmax(mx, p[e]);
        for (int e = 0; e < E; e++) sum += (p[e] = exp(p[e] - mx));
        int sel[64];
        for (int k = 0; k < K; k++) { /* the k-th most probable, the lower index first on a tie */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= sel[j] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[k] = best;
            wsum += p[best] / sum;
        }
        for (int i = 0; i < D; i++) y[i] = 0;
        for (int k = 0; k < K; k++) {
            const int e = sel[k];
            matvec_d(g, wg + (size_t)e * FE * D, xn, FE, D);
            matvec_d(u, wu + (size_t)e * FE * D, xn, FE, D);
            for (int i = 0; i < FE; i++) g[i] = gelu_d(g[i]) * u[i];
            matvec_d(d, wd + (size_t)e * D * FE, g, D, FE);
            const double w = p[e] / sum / wsum * (o->moe_scale ? ds[e] : 1);
            for (int i = 0; i < D; i++) y[i] += w * d[i];
        }
    }
    void *fr[] = {wr, rs, pn, wg, wu, wd, ds, xn, r, p, g, u, d};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
    return ok ? 0 : -1;
}

/* Logits (n_tok, V) of tokens tok at positions 0.. by the reference. */
static int ref_g4(const model *m, const g4_ref *o, const int32_t *tok, int n_tok, double *out) {
    const synth_params *sp = o->sp;
    const model_config *c = &m->cfg;
    const int D = c->dim, F = c->hidden_dim, V = c->vocab_size, L = c->n_layers, H = sp->n_heads;
    const int QMAX = H * sp->head_dim_full, KMAX = sp->n_kv_heads * sp->head_dim; /* the windowed' widest */
    const double eps = 1e-6, cap = sp->softcap;
    float *emb = f32_of(&m->tok_emb), *wcls = f32_of(&m->wcls), *onorm = f32_of(&m->out_norm);
    double *kc = calloc((size_t)L * n_tok * KMAX, sizeof *kc),
           *vc = calloc((size_t)L * n_tok * KMAX, sizeof *vc);
    double *x = malloc(D * sizeof *x), *xb = malloc((D > QMAX ? D : QMAX) * sizeof *xb),
           *q = malloc(QMAX * sizeof *q), *k = malloc(KMAX * sizeof *k), *v = malloc(KMAX * sizeof *v),
           *ao = malloc(QMAX * sizeof *ao), *att = malloc(n_tok * sizeof *att), *h1 = malloc(F * sizeof *h1),
           *h3 = malloc(F * sizeof *h3), *ym = malloc(D * sizeof *ym);
    int ok = emb && wcls && onorm && kc && vc && x && xb && q && k && v && ao && att && h1 && h3 && ym;
    /* the per-layer embeddings: inputs pl (L x P) of the token, the layer's gated rows */
    const int P = sp->n_embd_pl, LP = L * P;
    float *ptok = f32_of(&m->ple_tok), *pmod = f32_of(&m->ple_model), *pnorm = f32_of(&m->ple_norm);
    double *pl = malloc((LP ? LP : 1) * sizeof *pl), *pg = malloc((P ? P : 1) * sizeof *pg);
    ok = ok && pl && pg && (!P || (ptok && pmod && pnorm));
    for (int p = 0; ok && p < n_tok; p++) {
        for (int i = 0; i < D; i++) x[i] = emb[(size_t)tok[p] * D + i] * (o->emb_scale ? sqrt((double)D) : 1);
        if (P) {
            matvec_d(pl, pmod, x, LP, D);
            for (int l = 0; l < L; l++) {
                double *r = pl + (size_t)l * P;
                for (int j = 0; j < P; j++) r[j] /= sqrt((double)D);
                rms_d(r, r, pnorm, P, eps);
                for (int j = 0; j < P; j++)
                    r[j] = (r[j] + ptok[(size_t)tok[p] * LP + l * P + j] * sqrt((double)P)) / sqrt(2.0);
            }
        }
        for (int l = 0; ok && l < L; l++) {
            const model_layer *ly = &m->layers[l];
            const int full = l % sp->swa_period == sp->swa_period - 1;
            const int hd = full ? sp->head_dim_full : sp->head_dim,
                      KH = full ? sp->n_kv_heads_full : sp->n_kv_heads;
            const int QD = H * hd, KVD = KH * hd;
            float *an = f32_of(&ly->attn_norm), *wq = f32_of(&ly->wq), *wk = f32_of(&ly->wk),
                  *wv = f32_of(&ly->wv), *wo = f32_of(&ly->wo), *qn = f32_of(&ly->q_norm),
                  *kn = f32_of(&ly->k_norm), *pa = f32_of(&ly->attn_post_norm), *fn = f32_of(&ly->ffn_norm),
                  *w1 = f32_of(&ly->w1), *w2 = f32_of(&ly->w2), *w3 = f32_of(&ly->w3),
                  *pf = f32_of(&ly->ffn_post_norm), *os = f32_of(&ly->out_scale),
                  *p1 = f32_of(&ly->post_norm_1), *p2 = f32_of(&ly->post_norm_2);
            const int t0 = !full && o->window && p - sp->n_swa + 1 > 0 ? p - sp->n_swa + 1 : 0;
            /* a shared-KV layer reads the last earlier layer of its kind (llama.cpp's reuse) */
            const int start = L - sp->n_kv_shared, shared = l >= start;
            const int src = !shared       ? l
                            : o->kv_share ? start - (full ? 1 : 2)
                                          : (full ? sp->swa_period - 1 : 0);
            float *pgw = f32_of(&ly->ple_gate), *ppw = f32_of(&ly->ple_proj),
                  *ppn = f32_of(&ly->ple_post_norm);
            ok = an && wq && (shared || (wk && (full || wv) && kn)) && wo && qn && pa && fn && w1 && w2 &&
                 w3 && pf && os && (!P || (pgw && ppw && ppn));
            const double theta = full || !o->theta_swa ? sp->rope_theta : sp->rope_theta_swa;
            if (ok) {
                rms_d(xb, x, an, D, eps);
                matvec_d(q, wq, xb, QD, D);
                for (int h = 0; h < H; h++) rms_d(q + h * hd, q + h * hd, qn, hd, eps);
                const int turned = full && o->partial ? hd / 8 : hd / 2;
                rope_d(q, H, hd, p, theta, turned);
                if (!shared) {
                    matvec_d(k, wk, xb, KVD, D);
                    if (full)
                        memcpy(v, k, KVD * sizeof *v); /* V = K, before its norm and RoPE */
                    else
                        matvec_d(v, wv, xb, KVD, D);
                    for (int h = 0; h < KH; h++) {
                        rms_d(k + h * hd, k + h * hd, kn, hd, eps);
                        if (o->v_norm) rms_d(v + h * hd, v + h * hd, NULL, hd, eps);
                    }
                    rope_d(k, KH, hd, p, theta, turned);
                    memcpy(kc + ((size_t)l * n_tok + p) * KMAX, k, KVD * sizeof *k);
                    memcpy(vc + ((size_t)l * n_tok + p) * KMAX, v, KVD * sizeof *v);
                }
                const double *kl = kc + (size_t)src * n_tok * KMAX, *vl = vc + (size_t)src * n_tok * KMAX;
                for (int h = 0; h < H; h++) {
                    const int g = h / (H / KH);
                    double mx = -INFINITY, sum = 0;
                    for (int t = t0; t <= p; t++) {
                        double d = 0;
                        for (int i = 0; i < hd; i++) d += q[h * hd + i] * kl[(size_t)t * KMAX + g * hd + i];
                        att[t] = o->unscaled ? d : d / sqrt((double)hd);
                        mx = fmax(mx, att[t]);
                    }
                    for (int t = t0; t <= p; t++) sum += (att[t] = exp(att[t] - mx));
                    for (int i = 0; i < hd; i++) {
                        double s = 0;
                        for (int t = t0; t <= p; t++) s += att[t] / sum * vl[(size_t)t * KMAX + g * hd + i];
                        ao[h * hd + i] = s;
                    }
                }
                matvec_d(xb, wo, ao, D, QD);
                if (o->post_norms) rms_d(xb, xb, pa, D, eps);
                for (int i = 0; i < D; i++) x[i] += xb[i];
                rms_d(xb, x, fn, D, eps);
                matvec_d(h1, w1, xb, F, D);
                matvec_d(h3, w3, xb, F, D);
                for (int i = 0; i < F; i++)
                    h1[i] = (o->gelu ? gelu_d(h1[i]) : h1[i] / (1 + exp(-h1[i]))) * h3[i];
                matvec_d(xb, w2, h1, D, F);
                if (sp->n_expert) { /* the 26B-A4B: the dense part and the experts, each normed, summed */
                    ok = p1 && p2 && !ref_g4_moe(ly, o, sp, D, x, ym);
                    if (ok) {
                        rms_d(xb, xb, p1, D, eps);
                        rms_d(ym, ym, p2, D, eps);
                        for (int i = 0; i < D; i++) xb[i] += ym[i];
                    }
                }
                if (o->post_norms) rms_d(xb, xb, pf, D, eps);
                for (int i = 0; i < D; i++) x[i] += xb[i];
                if (P && o->ple) { /* x += norm(proj . (gelu(gate . x) * pl_l)) */
                    matvec_d(pg, pgw, x, P, D);
                    for (int j = 0; j < P; j++) pg[j] = gelu_d(pg[j]) * pl[(size_t)l * P + j];
                    matvec_d(xb, ppw, pg, D, P);
                    rms_d(xb, xb, ppn, D, eps);
                    for (int i = 0; i < D; i++) x[i] += xb[i];
                }
                for (int i = 0; i < D; i++) x[i] *= o->out_scale ? os[0] : 1;
            }
            float *fr[] = {an, wq, wk, wv, wo, qn, kn, pa, fn, w1, w2, w3, pf, os, p1, p2, pgw, ppw, ppn};
            for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
        }
        if (ok) {
            rms_d(xb, x, onorm, D, eps);
            matvec_d(out + (size_t)p * V, wcls, xb, V, D);
            if (o->softcap)
                for (int i = 0; i < V; i++) out[(size_t)p * V + i] = cap * tanh(out[(size_t)p * V + i] / cap);
        }
    }
    void *fr[] = {emb, wcls, onorm, kc, vc, x, xb, q, k, v, ao, att, h1, h3, ym, ptok, pmod, pnorm, pl, pg};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
    return ok ? 0 : -1;
}

/* synth sp, load it, hold the backend (one token a call, and one prefill)
 * to the reference, and the reference with `off` far from it. */
static int g4_case(const char *label, const synth_params *sp, g4_ref off) {
    char err[512];
    model *m = NULL;
    const char *path = tmp("g4.gguf");
    if (convert_synth(sp, path, err, sizeof err) || model_load(path, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "  %s: %s\n", label, err);
        return -1;
    }
    g4_ref on = g4_on;
    on.sp = off.sp = sp;
    const int V = m->cfg.vocab_size;
    int32_t tok[NTOK];
    for (int p = 0; p < NTOK; p++) tok[p] = (int32_t)((13 * p + 5) % V);
    double *r_on = malloc((size_t)NTOK * V * sizeof *r_on), *r_off = malloc((size_t)NTOK * V * sizeof *r_off);
    float *g1 = malloc((size_t)NTOK * V * sizeof *g1), *g2 = malloc((size_t)NTOK * V * sizeof *g2);
    int rc = -1;
    if (r_on && r_off && g1 && g2 && !ref_g4(m, &on, tok, NTOK, r_on) && !ref_g4(m, &off, tok, NTOK, r_off) &&
        !cpu_logits(m, tok, 1, g1) && !cpu_logits(m, tok, 0, g2)) {
        double e1 = worst(g1, r_on, V), e2 = worst(g2, r_on, V), eoff = worst(g1, r_off, V);
        fprintf(stderr, "  %-30s single %.2g, prefill %.2g (bound %.0e); feature off %.2g (must be > %.0e)\n",
                label, e1, e2, BOUND, eoff, 100 * BOUND);
        rc = e1 <= BOUND && e2 <= BOUND && eoff > 100 * BOUND ? 0 : -1;
    } else {
        fprintf(stderr, "  %s: a run failed\n", label);
    }
    free(r_on);
    free(r_off);
    free(g1);
    free(g2);
    model_free(m);
    unlink(path);
    return rc;
}

static void test_gemma4_features(void) {
    const synth_params sp = g4_params();
    static const struct {
        const char *label;
        size_t off; /* the flag of g4_ref switched off */
    } f[] = {
        {"gemma4 sliding window", offsetof(g4_ref, window)},
        {"gemma4 partial RoPE (full)", offsetof(g4_ref, partial)},
        {"gemma4 windowed RoPE base", offsetof(g4_ref, theta_swa)},
        {"gemma4 V norm", offsetof(g4_ref, v_norm)},
        {"gemma4 unscaled scores", offsetof(g4_ref, unscaled)},
        {"gemma4 post-norms", offsetof(g4_ref, post_norms)},
        {"gemma4 GELU", offsetof(g4_ref, gelu)},
        {"gemma4 layer output scale", offsetof(g4_ref, out_scale)},
        {"gemma4 embedding scale", offsetof(g4_ref, emb_scale)},
        {"gemma4 logit soft cap", offsetof(g4_ref, softcap)},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        g4_ref off = g4_on;
        *(int *)((char *)&off + f[i].off) = 0;
        CK_CHECK_MSG(g4_case(f[i].label, &sp, off) == 0, "%s", f[i].label);
    }
}

/* The 26B-A4B's layout: 8 GELU experts of width 48, 2 a token, beside the
 * dense part on every layer; the router's own input and the per-expert
 * scale each switched off far off. */
static void test_gemma4_experts(void) {
    synth_params sp = g4_params();
    sp.n_expert = 8;
    sp.n_expert_used = 2;
    sp.expert_ffn = 48;
    static const struct {
        const char *label;
        size_t off;
    } f[] = {
        {"gemma4 experts: router input", offsetof(g4_ref, moe_router)},
        {"gemma4 experts: output scale", offsetof(g4_ref, moe_scale)},
        {"gemma4 experts: post-norms", offsetof(g4_ref, post_norms)},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        g4_ref off = g4_on;
        *(int *)((char *)&off + f[i].off) = 0;
        CK_CHECK_MSG(g4_case(f[i].label, &sp, off) == 0, "%s", f[i].label);
    }
}

/* The E2B/E4B's: per-layer embeddings of 32 a layer, and the last 3 of 6
 * layers (3 and 4 windowed, reading layer 1's KV; 5 full, layer 2's)
 * without K or V of their own; each switched off far off. */
static void test_gemma4_ple_shared(void) {
    synth_params sp = g4_params();
    sp.n_embd_pl = 32;
    sp.n_kv_shared = 3;
    static const struct {
        const char *label;
        size_t off;
    } f[] = {
        {"gemma4 per-layer embeddings", offsetof(g4_ref, ple)},
        {"gemma4 shared KV layers", offsetof(g4_ref, kv_share)},
        {"gemma4 E2B-like: window", offsetof(g4_ref, window)},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        g4_ref off = g4_on;
        *(int *)((char *)&off + f[i].off) = 0;
        CK_CHECK_MSG(g4_case(f[i].label, &sp, off) == 0, "%s", f[i].label);
    }
}

/* The loader's view: per-layer head counts and sizes, the windowed layers,
 * V = K on the full ones, the config's maxima (the KV row is the widest
 * layer's), and the row. */
static void test_gemma4_load(void) {
    const arch_info *a = arch_find("gemma4", 6);
    CK_CHECK(a && a->id == ARCH_GEMMA4 && (a->keys & ARCH_READS_GEMMA4) && a->act == ARCH_ACT_GELU);
    CK_CHECK(a && a->need[ARCH_T_ATTN_V] == ARCH_OPTIONAL && a->need[ARCH_T_FFN_POST_NORM] == ARCH_REQUIRED &&
             a->need[ARCH_T_FFN_GATE_INP] == ARCH_OPTIONAL && arch_has_block(a, ARCH_BLOCK_MOE));
    const synth_params sp = g4_params();
    char err[512];
    model *m = NULL;
    CK_CHECK_MSG(!convert_synth(&sp, tmp("l.gguf"), err, sizeof err), "%s", err);
    CK_CHECK_MSG(!model_load(tmp("l.gguf"), NULL, &m, err, sizeof err), "%s", err);
    if (!m) return;
    const model_config *c = &m->cfg;
    CK_CHECK(c->head_dim == 64 && c->head_dim_swa == 32 && c->n_swa == 11 && c->rope_theta == 1e6f &&
             c->rope_theta_swa == 1e4f && c->logit_softcap == 5 && c->kq_div == 1 && c->v_norm);
    CK_CHECK(c->q_dim_max == 4 * 64 && c->kv_dim_max == 2 * 32 && model_kv_dim(c) == 64);
    for (int l = 0; l < c->n_layers; l++) {
        int nh, nkv, hd;
        model_layer_geom(m, l, &nh, &nkv, &hd);
        const int full = l % 3 == 2;
        CK_CHECK_MSG(m->layers[l].swa == !full && nh == 4 && nkv == (full ? 1 : 2) &&
                         hd == (full ? 64 : 32) && (m->layers[l].wv.n == 0) == full,
                     "layer %d: swa %d, %d/%d heads of %d", l, m->layers[l].swa, nh, nkv, hd);
    }
    model_free(m);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/confkv-g4-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    CK_RUN(test_gemma4_load);
    CK_RUN(test_gemma4_features);
    CK_RUN(test_gemma4_experts);
    CK_RUN(test_gemma4_ple_shared);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return ck_test_summary();
}
