/* test_arch.c - the architecture table (arch.h) end to end: synthetic
 * llama, qwen2, qwen3, smollm3, mistral3 and qwen3moe models with each
 * feature the table adds (NEOX RoPE, q/k/v biases, q/k head norms, head_dim
 * from key_length, tied embeddings, rope_freqs, linear and YaRN scaling,
 * layers without RoPE, the query's position scale, yarn_log_multiplier, the
 * mixture of experts with its renormalised top-k; gpt-oss's sinks, sliding
 * window, output and expert biases, softmax over the top-k logits and
 * clamped SwiGLU; lfm2's short-convolution layers and their recurrent
 * state; granitehybrid's Mamba2 layers, their state and Granite's scalars)
 * through the CPU backend,
 * against a scalar reference written here in double precision from the
 * published formulas (ggml's rope and rope_yarn, Meta's llama3 factors,
 * Qwen's block, OpenAI's gpt-oss block as llama.cpp's openai-moe graph
 * computes it, Liquid AI's LFM2 short-convolution block as llama.cpp's lfm2
 * graph computes it, Mamba-2's recurrence as llama.cpp's build_mamba2_layer
 * lays it out), driven by the parameters the test asked synth for, not by
 * what model.c read back. Each case also runs the reference with its
 * feature switched off and requires that to be far off: a feature the
 * backend ignored could not pass. The refusals are test_arch_refusals.c's,
 * gemma4's case test_arch_gemma4.c's. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "backend.h"
#include "ck_err.h"
#include "ck_test.h"
#include "convert.h"
#include "gguf.h"
#include "kv.h"
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

/* ------------------------------------------------- the scalar reference */

/* What the reference computes, from the test's own parameters. */
typedef struct ref_opts {
    int neox;          /* pairs (i, i + hd/2) */
    int bias, qk_norm; /* add the biases; norm each q/k head */
    int freqs;         /* divide the angles by Llama 3.1's factors (computed here) */
    int scaling;       /* ARCH_SCALING_* */
    double factor;     /* scaling factor */
    int orig_ctx;      /* YaRN */
    double theta;
    int no_rope_step;  /* layer l has no RoPE when (l + 1) % no_rope_step == 0 (smollm3) */
    double temp_scale; /* queries scaled by 1 + temp_scale ln(floor(pos / orig_ctx) + 1) (mistral3) */
    double log_mul;    /* YaRN's magnitude divided by 1 + 0.1 log_mul ln(factor) (mistral3) */
    int experts, used, expert_ffn; /* a mixture of experts instead of the dense FFN (experts > 0) */
    int moe_norm;                  /* renormalise the chosen experts' probabilities to sum 1 */
    /* gpt-oss */
    int sinks;      /* each head's sink logit in its softmax's denominator */
    int window;     /* > 0: windowed layers' queries at p see keys at (p - window, p] */
    int swa_period; /* which layers: l % swa_period < swa_period - 1 */
    int out_bias;   /* attn_output.bias */
    int exp_bias;   /* the router's and the experts' biases */
    int top_logits; /* the `used` largest logits, weights the softmax over those alone */
    int oai;        /* experts' activation: (min(g, 7) sigmoid(1.702 .)) (clamp(u, +-7) + 1) */
    int oai_clamp;  /* with oai: the clamps at 7 (off: the same formula unclamped) */
    /* lfm2: a layer with shortconv tensors is B, C, x = in_proj . norm(x), u = B x,
     * x += out_proj . (C sum_j kern[j] u_{p - (taps - 1) + j}) */
    int conv_taps;     /* the kernel's taps (synth's conv_l) */
    int conv_no_state; /* each token's convolution sees its own u alone (no recurrent state) */
    /* lfm2moe: layers below dense_lead dense, the others experts chosen by the largest
     * sigmoid(l) + exp_probs_b (choice_bias; off: without it), weights the sigmoids renormalised */
    int sigmoid, choice_bias, dense_lead;
    /* granitehybrid: a layer with Mamba2 tensors is llama.cpp's build_mamba2_layer
     * (ref_mamba2); ssm_off switches parts off: SSM_NO_STATE (each token's convolution
     * sees its own input alone, its scan starts from zero), SSM_NO_GATE (no y * silu(z)),
     * SSM_ONE_GROUP (the norm over all of y, not per group), SSM_NO_D (no D x) */
    int ssm_off;
    /* Granite's scalars, the test's own (synth writes embedding 4, residual 0.5,
     * attention 1 / head_dim, logits 6); 0: none */
    double embd_scale, resid_scale, attn_scale, logit_scale;
} ref_opts;
enum { SSM_NO_STATE = 1, SSM_NO_GATE = 2, SSM_ONE_GROUP = 4, SSM_NO_D = 8 };

static float *f32_of(const model_tensor *t) {
    if (!t->n) return NULL;
    float *f = malloc((size_t)t->n * sizeof *f);
    if (f && quant_to_f32(t->type, t->data, f, t->n)) {
        free(f);
        f = NULL;
    }
    return f;
}

static void rmsnorm_d(double *o, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = w[i] * (x[i] * s);
}

static void matvec_d(double *y, const float *w, const double *x, int n, int k) {
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < k; j++) s += (double)w[(size_t)i * k + j] * x[j];
        y[i] = s;
    }
}

/* Meta's llama3 rope scaling (factor 8, low 1, high 4, original context
 * 8192) as the frequency divisor of pair i. */
static double llama3_factor(int i, int hd, double theta) {
    const double factor = 8, lo = 1, hi = 4, old = 8192;
    double freq = pow(theta, -2.0 * i / hd), wavelen = 2 * M_PI / freq;
    if (wavelen < old / hi) return 1;
    if (wavelen > old / lo) return factor;
    double smooth = (old / wavelen - lo) / (hi - lo);
    return 1 / ((1 - smooth) / factor + smooth);
}

/* Angle of pair i at pos and the cos/sin magnitude, per ggml's rope_yarn
 * and llama.cpp's context defaults (ext_factor 1 for yarn, beta 32 and 1,
 * attn_factor 1). */
static double ref_angle(const ref_opts *o, int hd, int i, int pos, double *mscale) {
    double base = pow(o->theta, -2.0 * i / hd);
    if (o->freqs) base /= llama3_factor(i, hd, o->theta);
    *mscale = 1;
    if (o->scaling == ARCH_SCALING_LINEAR) return pos * base / o->factor;
    if (o->scaling == ARCH_SCALING_YARN) {
        double cd_fast = hd * log(o->orig_ctx / (32 * 2 * M_PI)) / (2 * log(o->theta));
        double cd_slow = hd * log(o->orig_ctx / (1 * 2 * M_PI)) / (2 * log(o->theta));
        double lo = fmax(0, floor(cd_fast)), hi = fmin(hd - 1, ceil(cd_slow));
        double y = (i - lo) / fmax(0.001, hi - lo), ramp = 1 - fmin(1, fmax(0, y));
        *mscale = (1 + 0.1 * log(o->factor)) / (1 + 0.1 * o->log_mul * log(o->factor));
        return pos * base * (1 - ramp) / o->factor + pos * base * ramp;
    }
    return pos * base;
}

static void ref_rope(const ref_opts *o, double *v, int n_heads, int hd, int pos) {
    for (int h = 0; h < n_heads; h++) {
        double *p = v + (size_t)h * hd;
        for (int i = 0; i < hd / 2; i++) {
            double ms, a = ref_angle(o, hd, i, pos, &ms), c = cos(a) * ms, s = sin(a) * ms;
            int i0 = o->neox ? i : 2 * i, i1 = o->neox ? i + hd / 2 : 2 * i + 1;
            double v0 = p[i0], v1 = p[i1];
            p[i0] = v0 * c - v1 * s;
            p[i1] = v0 * s + v1 * c;
        }
    }
}

/* The experts' biases of one layer (gpt-oss), f32 rows; NULL: none. */
typedef struct ref_moe_b {
    const float *router;    /* (experts) */
    const float *gate, *up; /* (experts, FE) */
    const float *down;      /* (experts, D) */
    const float *probs;     /* (experts) lfm2moe's choice bias */
} ref_moe_b;

/* gpt-oss's activation of one gate/up pair (OpenAI's reference block). */
static double ref_oai(const ref_opts *o, double g, double u) {
    if (o->oai_clamp) {
        g = fmin(g, 7.0);
        u = fmax(-7.0, fmin(u, 7.0));
    }
    return g / (1 + exp(-1.702 * g)) * (u + 1);
}

/* x += the mixture of experts of xn: qwen3moe's (Qwen's published block):
 * p = softmax(router . xn), the `used` most probable (the lower index
 * first among equals), their p renormalised to sum 1 (moe_norm), each
 * one's SwiGLU weighted by it; or gpt-oss's (top_logits, oai, exp_bias):
 * l = router . xn + b, the `used` largest l, weights the softmax over
 * those l, each one's clamped SwiGLU of its biased gate and up, its down
 * bias added. wg, wu: (experts, FE, D); wd: (experts, D, FE). */
static void ref_moe(const ref_opts *o, int D, const float *wr, const float *wg, const float *wu,
                    const float *wd, const ref_moe_b *b, const double *xn, double *x) {
    const int E = o->experts, K = o->used, FE = o->expert_ffn;
    double p[64], h1[256], h3[256], y[256], wt[64], mx = -INFINITY, sum = 0, ws = 0;
    int chosen[64] = {0}, sel[64];
    if (E > 64 || K > E || FE > 256 || D > 256) return; /* the test's shapes are smaller */
    matvec_d(p, wr, xn, E, D);
    if (o->exp_bias)
        for (int e = 0; e < E; e++) p[e] += b->router[e];
    double q[64]; /* what chooses: p, or lfm2moe's sigmoids plus their bias */
    if (o->sigmoid)
        for (int e = 0; e < E; e++) {
            p[e] = 1 / (1 + exp(-p[e]));
            q[e] = p[e] + (o->choice_bias ? b->probs[e] : 0);
        }
    else if (!o->top_logits) { /* probabilities first: the order is the logits' either way */
        for (int e = 0; e < E; e++) mx = fmax(mx, p[e]);
        for (int e = 0; e < E; e++) sum += (p[e] = exp(p[e] - mx));
        for (int e = 0; e < E; e++) p[e] /= sum;
    }
    if (!o->sigmoid) memcpy(q, p, (size_t)E * sizeof *q);
    for (int j = 0; j < K; j++) {
        int best = 0;
        while (chosen[best]) best++; /* K <= E: one is left */
        for (int e = best + 1; e < E; e++)
            if (!chosen[e] && q[e] > q[best]) best = e;
        chosen[best] = 1;
        sel[j] = best;
        ws += p[best];
    }
    if (o->top_logits) { /* the softmax over the chosen logits */
        double s = 0;
        for (int j = 0; j < K; j++) s += (wt[j] = exp(p[sel[j]] - p[sel[0]]));
        for (int j = 0; j < K; j++) wt[j] /= s;
    } else {
        for (int j = 0; j < K; j++) wt[j] = o->moe_norm ? p[sel[j]] / ws : p[sel[j]];
    }
    for (int j = 0; j < K; j++) {
        const int e = sel[j];
        matvec_d(h1, wg + (size_t)e * FE * D, xn, FE, D);
        matvec_d(h3, wu + (size_t)e * FE * D, xn, FE, D);
        for (int i = 0; i < FE; i++) {
            if (o->exp_bias) h1[i] += b->gate[(size_t)e * FE + i], h3[i] += b->up[(size_t)e * FE + i];
            h1[i] = o->oai ? ref_oai(o, h1[i], h3[i]) : h1[i] / (1 + exp(-h1[i])) * h3[i];
        }
        matvec_d(y, wd + (size_t)e * D * FE, h1, D, FE);
        for (int i = 0; i < D; i++) x[i] += wt[j] * (y[i] + (o->exp_bias ? b->down[(size_t)e * D + i] : 0));
    }
}

/* One Mamba2 layer at position p (Mamba-2's published recurrence, as
 * llama.cpp's build_mamba2_layer lays it out): xn the normed input, hist
 * (n_tok, NC) this layer's convolution inputs by position, st (DI, N) its
 * scan state, out (D) the layer's output before the residual scale. */
static void ref_mamba2(const model_config *c, const ref_opts *o, const model_layer *ly, const double *xn,
                       int p, double *hist, double *st, double *out) {
    const int D = c->dim, DI = c->ssm_d_inner, H = c->ssm_n_head, G = c->ssm_n_group, N = c->ssm_d_state;
    const int K = c->ssm_d_conv, P = DI / H, NC = DI + 2 * G * N, NIN = 2 * DI + 2 * G * N + H;
    float *win = f32_of(&ly->ssm_in), *wk = f32_of(&ly->ssm_conv), *wb = f32_of(&ly->ssm_conv_b),
          *dtb = f32_of(&ly->ssm_dt_b), *A = f32_of(&ly->ssm_a), *Dv = f32_of(&ly->ssm_d),
          *gn = f32_of(&ly->ssm_norm), *wout = f32_of(&ly->ssm_out);
    double zx[1024], xc[1024] = {0}, y[512];
    if (!win || !wk || !wb || !dtb || !A || !Dv || !gn || !wout || NIN > 1024 || DI > 512) {
        for (int i = 0; i < D; i++) out[i] = NAN;
    } else {
        matvec_d(zx, win, xn, NIN, D);
        for (int ch = 0; ch < NC; ch++) hist[(size_t)p * NC + ch] = zx[DI + ch];
        for (int ch = 0; ch < NC; ch++) { /* the causal convolution, zeros before position 0 */
            double acc = wb[ch];
            for (int j = (o->ssm_off & SSM_NO_STATE) ? K - 1 : 0; j < K; j++) {
                const int t = p - (K - 1) + j;
                if (t >= 0) acc += wk[(size_t)ch * K + j] * hist[(size_t)t * NC + ch];
            }
            xc[ch] = acc / (1 + exp(-acc));
        }
        if (o->ssm_off & SSM_NO_STATE) memset(st, 0, (size_t)DI * N * sizeof *st);
        const double *x = xc, *B = xc + DI, *C = B + G * N, *z = zx, *dt = zx + DI + NC;
        for (int h = 0; h < H; h++) {
            const double v = dt[h] + dtb[h], dts = v > 20 ? v : log1p(exp(v)), dA = exp(dts * A[h]);
            const int g = h / (H / G);
            for (int i = h * P; i < (h + 1) * P; i++) {
                double s = 0;
                for (int n = 0; n < N; n++) {
                    double *sv = &st[(size_t)i * N + n];
                    *sv = *sv * dA + B[g * N + n] * x[i] * dts;
                    s += *sv * C[g * N + n];
                }
                y[i] = s + ((o->ssm_off & SSM_NO_D) ? 0 : Dv[h] * x[i]);
                if (!(o->ssm_off & SSM_NO_GATE)) y[i] *= z[i] / (1 + exp(-z[i]));
            }
        }
        const int gs = (o->ssm_off & SSM_ONE_GROUP) ? DI : DI / G;
        for (int g = 0; g < DI / gs; g++) rmsnorm_d(y + g * gs, y + g * gs, gn + g * gs, gs, c->norm_eps);
        matvec_d(out, wout, y, D, DI);
    }
    void *fr[] = {win, wk, wb, dtb, A, Dv, gn, wout};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* Logits (n_tok, V) of tokens tok[0..n_tok) at positions 0.. of one
 * sequence, by the reference. */
static int ref_logits(const model *m, const ref_opts *o, const int32_t *tok, int n_tok, double *out) {
    const model_config *c = &m->cfg;
    const int D = c->dim, F = c->hidden_dim, V = c->vocab_size, hd = c->head_dim, H = c->n_heads;
    const int KH = c->n_kv_heads, QD = H * hd, KVD = KH * hd, L = c->n_layers;
    float *emb = f32_of(&m->tok_emb), *wcls = f32_of(&m->wcls), *onorm = f32_of(&m->out_norm);
    double *kc = calloc((size_t)L * n_tok * KVD, sizeof *kc),
           *vc = calloc((size_t)L * n_tok * KVD, sizeof *vc);
    double *x = malloc(D * sizeof *x), *xb = malloc((D > QD ? D : QD) * sizeof *xb),
           *q = malloc(QD * sizeof *q);
    double *k = malloc(KVD * sizeof *k), *v = malloc(KVD * sizeof *v),
           *ao = malloc((D > QD ? D : QD) * sizeof *ao);
    double *att = malloc(n_tok * sizeof *att), *h1 = malloc(F * sizeof *h1), *h3 = malloc(F * sizeof *h3);
    double *uh = calloc((size_t)L * n_tok * D, sizeof *uh), *bcx = malloc(3 * (size_t)D * sizeof *bcx);
    /* Mamba2's: each layer's convolution inputs by position, and its scan state */
    const size_t NC = c->ssm_d_inner ? (size_t)model_ssm_conv_ch(c) : 0;
    double *shist = calloc((size_t)L * n_tok * NC + 1, sizeof *shist),
           *sst = calloc((size_t)L * c->ssm_d_inner * c->ssm_d_state + 1, sizeof *sst);
    int ok = emb && wcls && onorm && kc && vc && x && xb && q && k && v && ao && att && h1 && h3 && uh &&
             bcx && shist && sst;
    const double rs = o->resid_scale != 0 ? o->resid_scale : 1;
    for (int p = 0; ok && p < n_tok; p++) {
        for (int i = 0; i < D; i++)
            x[i] = emb[(size_t)tok[p] * D + i] * (o->embd_scale != 0 ? o->embd_scale : 1);
        for (int l = 0; ok && l < L; l++) {
            const model_layer *ly = &m->layers[l];
            float *an = f32_of(&ly->attn_norm), *wq = f32_of(&ly->wq), *wk = f32_of(&ly->wk),
                  *wv = f32_of(&ly->wv);
            float *wo = f32_of(&ly->wo), *fn = f32_of(&ly->ffn_norm), *w1 = f32_of(&ly->w1),
                  *w2 = f32_of(&ly->w2);
            float *w3 = f32_of(&ly->w3), *bq = f32_of(&ly->bq), *bk = f32_of(&ly->bk), *bv = f32_of(&ly->bv);
            float *qn = f32_of(&ly->q_norm), *kn = f32_of(&ly->k_norm);
            float *wr = f32_of(&ly->router), *wg = f32_of(&ly->gate_exps), *wu = f32_of(&ly->up_exps),
                  *wd = f32_of(&ly->down_exps);
            float *bo = f32_of(&ly->bo), *sk = f32_of(&ly->sinks), *rb = f32_of(&ly->router_b),
                  *gb = f32_of(&ly->gate_exps_b), *ub = f32_of(&ly->up_exps_b),
                  *db = f32_of(&ly->down_exps_b), *pb = f32_of(&ly->probs_b);
            const ref_moe_b mb = {rb, gb, ub, db, pb};
            const int moe = o->experts && l >= o->dense_lead; /* this layer's feed-forward */
            float *ci = f32_of(&ly->sc_in), *co = f32_of(&ly->sc_out), *ck = f32_of(&ly->sc_conv);
            if (ci) { /* an lfm2 convolution layer: the lfm2 block, then the FFN below */
                const int taps = o->conv_taps;
                double *u = uh + (size_t)l * n_tok * D; /* (n_tok, D) this layer's u by position */
                ok = an && co && ck && fn && !wq;
                if (ok) {
                    rmsnorm_d(xb, x, an, D, c->norm_eps);
                    matvec_d(bcx, ci, xb, 3 * D, D);
                    for (int d = 0; d < D; d++) u[(size_t)p * D + d] = bcx[d] * bcx[2 * D + d];
                    for (int d = 0; d < D; d++) {
                        double acc = 0;
                        for (int j = o->conv_no_state ? taps - 1 : 0; j < taps; j++) {
                            const int t = p - (taps - 1) + j;
                            if (t >= 0) acc += ck[(size_t)d * taps + j] * u[(size_t)t * D + d];
                        }
                        ao[d] = bcx[D + d] * acc;
                    }
                    matvec_d(xb, co, ao, D, D);
                    for (int i = 0; i < D; i++) x[i] += xb[i];
                }
            }
            free(ci);
            free(co);
            free(ck);
            if (ok && ly->ssm_in.n) { /* a granitehybrid Mamba2 layer, then the FFN below */
                rmsnorm_d(xb, x, an, D, c->norm_eps);
                ref_mamba2(c, o, ly, xb, p, shist + (size_t)l * n_tok * NC,
                           sst + (size_t)l * c->ssm_d_inner * c->ssm_d_state, ao);
                for (int i = 0; i < D; i++) x[i] += rs * ao[i];
            }
            ok = ok && (ly->sc_in.n || ly->ssm_in.n || (an && wq && wk && wv && wo)) && fn &&
                 (moe ? wr && wg && wu && wd && (!o->choice_bias || pb) : w1 && w2 && w3) &&
                 (!o->bias || (bq && bk && bv)) && (!o->qk_norm || ly->sc_in.n || (qn && kn)) &&
                 (!o->out_bias || bo) && (!o->sinks || sk) && (!o->exp_bias || (rb && gb && ub && db));
            /* the first position this layer's queries at p see */
            const int swa = o->window > 0 && (o->swa_period <= 0 || l % o->swa_period < o->swa_period - 1);
            const int t0 = swa && p - o->window + 1 > 0 ? p - o->window + 1 : 0;
            if (ok && !ly->sc_in.n && !ly->ssm_in.n) {
                rmsnorm_d(xb, x, an, D, c->norm_eps);
                matvec_d(q, wq, xb, QD, D);
                matvec_d(k, wk, xb, KVD, D);
                matvec_d(v, wv, xb, KVD, D);
                if (o->bias) {
                    for (int i = 0; i < QD; i++) q[i] += bq[i];
                    for (int i = 0; i < KVD; i++) k[i] += bk[i], v[i] += bv[i];
                }
                if (o->qk_norm) {
                    for (int h = 0; h < H; h++) rmsnorm_d(q + h * hd, q + h * hd, qn, hd, c->norm_eps);
                    for (int h = 0; h < KH; h++) rmsnorm_d(k + h * hd, k + h * hd, kn, hd, c->norm_eps);
                }
                if (!o->no_rope_step || (l + 1) % o->no_rope_step) {
                    ref_rope(o, q, H, hd, p);
                    ref_rope(o, k, KH, hd, p);
                }
                if (o->temp_scale != 0)
                    for (int i = 0; i < QD; i++)
                        q[i] *= 1 + o->temp_scale * log(floor((double)p / o->orig_ctx) + 1);
                double *kl = kc + (size_t)l * n_tok * KVD, *vl = vc + (size_t)l * n_tok * KVD;
                memcpy(kl + (size_t)p * KVD, k, KVD * sizeof *k);
                memcpy(vl + (size_t)p * KVD, v, KVD * sizeof *v);
                for (int h = 0; h < H; h++) {
                    const int g = h / (H / KH);
                    double mx = o->sinks ? sk[h] : -INFINITY, sum = 0;
                    for (int t = t0; t <= p; t++) {
                        double d = 0;
                        for (int i = 0; i < hd; i++) d += q[h * hd + i] * kl[(size_t)t * KVD + g * hd + i];
                        att[t] = o->attn_scale != 0 ? d * o->attn_scale : d / sqrt((double)hd);
                        mx = fmax(mx, att[t]);
                    }
                    for (int t = t0; t <= p; t++) sum += (att[t] = exp(att[t] - mx));
                    if (o->sinks) sum += exp(sk[h] - mx); /* the sink: no value */
                    for (int i = 0; i < hd; i++) {
                        double s = 0;
                        for (int t = t0; t <= p; t++) s += att[t] / sum * vl[(size_t)t * KVD + g * hd + i];
                        ao[h * hd + i] = s;
                    }
                }
                matvec_d(xb, wo, ao, D, QD);
                for (int i = 0; i < D; i++) x[i] += rs * xb[i] + (o->out_bias ? bo[i] : 0);
            }
            if (ok) {
                rmsnorm_d(xb, x, fn, D, c->norm_eps);
                if (moe) {
                    ref_moe(o, D, wr, wg, wu, wd, &mb, xb, x);
                } else {
                    matvec_d(h1, w1, xb, F, D);
                    matvec_d(h3, w3, xb, F, D);
                    for (int i = 0; i < F; i++) h1[i] = h1[i] / (1 + exp(-h1[i])) * h3[i];
                    matvec_d(xb, w2, h1, D, F);
                    for (int i = 0; i < D; i++) x[i] += rs * xb[i];
                }
            }
            float *fr[] = {an, wq, wk, wv, wo, fn, w1, w2, w3, bq, bk, bv, qn,
                           kn, wr, wg, wu, wd, bo, sk, rb, gb, ub, db, pb};
            for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
        }
        if (ok) {
            rmsnorm_d(xb, x, onorm, D, c->norm_eps);
            matvec_d(out + (size_t)p * V, wcls, xb, V, D);
            if (o->logit_scale != 0)
                for (int i = 0; i < V; i++) out[(size_t)p * V + i] /= o->logit_scale;
        }
    }
    void *fr[] = {emb, wcls, onorm, kc, vc, x, xb, q, k, v, ao, att, h1, h3, uh, bcx, shist, sst};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
    return ok ? 0 : -1;
}

/* ----------------------------------------------------------- the backend */

/* synth sp, load it, and hold the backend to the reference with `on`, and
 * away from it with `off` (the feature under test switched off). */
static int feature_case(const char *label, synth_params sp, ref_opts on, ref_opts off) {
    char err[512];
    model *m = NULL;
    const char *path = tmp("case.gguf");
    if (convert_synth(&sp, path, err, sizeof err) || model_load(path, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "  %s: %s\n", label, err);
        return -1;
    }
    const int V = m->cfg.vocab_size;
    int32_t tok[NTOK];
    for (int p = 0; p < NTOK; p++) tok[p] = (int32_t)((13 * p + 5) % V);
    double *r_on = malloc((size_t)NTOK * V * sizeof *r_on), *r_off = malloc((size_t)NTOK * V * sizeof *r_off);
    float *g1 = malloc((size_t)NTOK * V * sizeof *g1), *g2 = malloc((size_t)NTOK * V * sizeof *g2);
    int rc = -1;
    if (r_on && r_off && g1 && g2 && !ref_logits(m, &on, tok, NTOK, r_on) &&
        !ref_logits(m, &off, tok, NTOK, r_off) && !cpu_logits(m, tok, 1, g1) && !cpu_logits(m, tok, 0, g2)) {
        double e1 = worst(g1, r_on, V), e2 = worst(g2, r_on, V), eoff = worst(g1, r_off, V);
        fprintf(stderr, "  %-26s single %.2g, prefill %.2g (bound %.0e); feature off %.2g (must be > %.0e)\n",
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

static void test_llama_tied_gqa(void) {
    /* GQA 4:1, no output.weight: the classifier is the embedding */
    synth_params sp = base_params(ARCH_LLAMA);
    sp.n_kv_heads = 1;
    sp.tied = 1;
    ref_opts on = {.theta = 10000}, off = on;
    off.neox = 1; /* adjacent pairs matter */
    CK_CHECK(feature_case("llama tied, GQA 4", sp, on, off) == 0);
}

static void test_llama_rope_freqs(void) {
    synth_params sp = base_params(ARCH_LLAMA);
    sp.rope_freqs = 1;
    sp.rope_theta = 500000;
    sp.dim = 128;
    sp.n_heads = 2;
    sp.n_kv_heads = 1; /* head_dim 64 */
    ref_opts on = {.theta = 500000, .freqs = 1}, off = on;
    off.freqs = 0;
    CK_CHECK(feature_case("llama rope_freqs", sp, on, off) == 0);
}

static void test_llama_linear(void) {
    synth_params sp = base_params(ARCH_LLAMA);
    sp.rope_scaling = ARCH_SCALING_LINEAR;
    sp.rope_factor = 4;
    ref_opts on = {.theta = 10000, .scaling = ARCH_SCALING_LINEAR, .factor = 4}, off = on;
    off.scaling = ARCH_SCALING_NONE;
    CK_CHECK(feature_case("llama linear x4", sp, on, off) == 0);
}

static void test_llama_yarn(void) {
    /* a short original context puts YaRN's ramp inside the head */
    synth_params sp = base_params(ARCH_LLAMA);
    sp.dim = 128;
    sp.n_heads = 2;
    sp.n_kv_heads = 1;
    sp.rope_scaling = ARCH_SCALING_YARN;
    sp.rope_factor = 4;
    sp.rope_orig_ctx = 64;
    ref_opts on = {.theta = 10000, .scaling = ARCH_SCALING_YARN, .factor = 4, .orig_ctx = 64}, off = on;
    off.scaling = ARCH_SCALING_LINEAR; /* the ramp and mscale matter */
    CK_CHECK(feature_case("llama yarn x4, orig 64", sp, on, off) == 0);
}

static void test_qwen2_bias_neox(void) {
    synth_params sp = base_params(ARCH_QWEN2);
    sp.rope_theta = 1000000;
    ref_opts on = {.theta = 1000000, .neox = 1, .bias = 1}, off = on;
    off.bias = 0;
    CK_CHECK(feature_case("qwen2 biases", sp, on, off) == 0);
    off = on;
    off.neox = 0;
    CK_CHECK(feature_case("qwen2 NEOX", sp, on, off) == 0);
}

static void test_qwen3_norm_head_dim(void) {
    /* head_dim 32 with dim 64 and 4 heads: q_dim 128 != dim (key_length) */
    synth_params sp = base_params(ARCH_QWEN3);
    sp.head_dim = 32;
    sp.tied = 1;
    sp.rope_theta = 1000000;
    ref_opts on = {.theta = 1000000, .neox = 1, .qk_norm = 1}, off = on;
    off.qk_norm = 0;
    CK_CHECK(feature_case("qwen3 q/k norm, hd 32", sp, on, off) == 0);
}

static void test_smollm3_no_rope(void) {
    /* 5 layers: layer 3 has no RoPE (llama.cpp's fixed step 4), layer 4 has it again */
    synth_params sp = base_params(ARCH_SMOLLM3);
    sp.n_layers = 5;
    sp.tied = 1;
    ref_opts on = {.theta = 10000, .no_rope_step = 4}, off = on;
    off.no_rope_step = 0;
    CK_CHECK(feature_case("smollm3 no RoPE on layer 3", sp, on, off) == 0);
}

static void test_mistral3_temp(void) {
    /* Ministral 3's YaRN (factor 16, yarn_log_multiplier 1) over an original
     * context of 8: the query scale steps at 8, 16, 24, 32 of the 40 positions */
    synth_params sp = base_params(ARCH_MISTRAL3);
    sp.dim = 128;
    sp.n_heads = 4;
    sp.n_kv_heads = 1; /* head_dim 32, GQA 4 */
    sp.rope_theta = 1000000;
    sp.rope_scaling = ARCH_SCALING_YARN;
    sp.rope_factor = 16;
    sp.rope_orig_ctx = 8;
    sp.yarn_log_mul = 1;
    sp.attn_temp_scale = 0.1f;
    ref_opts on = {.theta = 1000000,
                   .scaling = ARCH_SCALING_YARN,
                   .factor = 16,
                   .orig_ctx = 8,
                   .log_mul = 1,
                   .temp_scale = 0.1},
             off = on;
    off.temp_scale = 0;
    CK_CHECK(feature_case("mistral3 query temperature", sp, on, off) == 0);
    off = on;
    off.log_mul = 0;
    CK_CHECK(feature_case("mistral3 yarn_log_multiplier", sp, on, off) == 0);
}

/* A mistral3 model written back by convert_write_gguf keeps its keys. */
static void test_mistral3_roundtrip(void) {
    synth_params sp = base_params(ARCH_MISTRAL3);
    sp.rope_scaling = ARCH_SCALING_YARN;
    sp.rope_factor = 16;
    sp.rope_orig_ctx = 16;
    sp.yarn_log_mul = 1;
    sp.attn_temp_scale = 0.1f;
    char err[512];
    model *a = NULL, *b = NULL;
    CK_CHECK_MSG(!convert_synth(&sp, tmp("m3.gguf"), err, sizeof err) &&
                     !model_load(tmp("m3.gguf"), NULL, &a, err, sizeof err),
                 "%s", err);
    if (!a) return;
    CK_CHECK(a->cfg.arch == ARCH_MISTRAL3 && a->cfg.attn_temp_scale == 0.1f && a->cfg.attn_temp_floor == 16 &&
             a->cfg.yarn_log_mul == 1.0f && a->cfg.no_rope_step == 0);
    CK_CHECK_MSG(!convert_write_gguf(a, QUANT_F32, tmp("m3b.gguf"), err, sizeof err) &&
                     !model_load(tmp("m3b.gguf"), NULL, &b, err, sizeof err),
                 "%s", err);
    CK_CHECK(b && b->cfg.attn_temp_scale == a->cfg.attn_temp_scale &&
             b->cfg.attn_temp_floor == a->cfg.attn_temp_floor && b->cfg.yarn_log_mul == a->cfg.yarn_log_mul);
    model_free(a);
    model_free(b);
    /* mscale: (1 + 0.1 ln 16) / (1 + 0.1 ln 16) = 1, where llama alone has 1.277 */
    float f[16], ms;
    arch_rope_params p = {.n_dims = 32,
                          .freq_base = 1e6f,
                          .scaling = ARCH_SCALING_YARN,
                          .factor = 16,
                          .orig_ctx = 16,
                          .attn_factor = 1,
                          .ext_factor = 1,
                          .beta_fast = 32,
                          .beta_slow = 1,
                          .log_mul = 1};
    arch_rope_freqs(&p, NULL, f, &ms);
    CK_CHECK_MSG(fabsf(ms - 1.0f) < 1e-6f, "mscale %g", ms);
    p.log_mul = 0;
    arch_rope_freqs(&p, NULL, f, &ms);
    CK_CHECK_MSG(fabsf(ms - (1.0f + 0.1f * logf(16))) < 1e-6f, "mscale %g", ms);
}

static void test_qwen3moe_experts(void) {
    /* 8 experts, 2 a token, 48 wide: the renormalisation of the two
     * weights switched off must be far off */
    synth_params sp = base_params(ARCH_QWEN3MOE);
    sp.head_dim = 32;
    sp.rope_theta = 1000000;
    sp.n_expert = 8;
    sp.n_expert_used = 2;
    sp.expert_ffn = 48;
    ref_opts on = {.theta = 1000000,
                   .neox = 1,
                   .qk_norm = 1,
                   .experts = 8,
                   .used = 2,
                   .expert_ffn = 48,
                   .moe_norm = 1},
             off = on;
    off.moe_norm = 0;
    CK_CHECK(feature_case("qwen3moe top-2 of 8", sp, on, off) == 0);
    /* every expert for every token: the grouping's all-tokens path */
    sp.n_expert = on.experts = off.experts = 4;
    sp.n_expert_used = on.used = off.used = 4;
    on.moe_norm = 1;
    off.moe_norm = 0;
    off.used = 1; /* with all 4 the sum is 1 already: the off run takes one instead */
    CK_CHECK(feature_case("qwen3moe all 4 of 4", sp, on, off) == 0);
}

static ref_opts gpt_oss_ref(void) {
    return (ref_opts){.theta = 150000,
                      .neox = 1,
                      .scaling = ARCH_SCALING_YARN,
                      .factor = 4,
                      .orig_ctx = 16,
                      .bias = 1,
                      .experts = 8,
                      .used = 2,
                      .expert_ffn = 48,
                      .sinks = 1,
                      .window = 11,
                      .swa_period = 2,
                      .out_bias = 1,
                      .exp_bias = 1,
                      .top_logits = 1,
                      .oai = 1,
                      .oai_clamp = 1};
}

/* gpt-oss against the reference, each of its features switched off in the
 * reference far off: the sinks, the window, the clamps, the biases, the
 * softmax over the chosen logits (off: the softmax over all experts,
 * not renormalised; renormalised it would be the same weights). */
static void test_gpt_oss(void) {
    const synth_params sp = gpt_oss_params();
    const ref_opts on = gpt_oss_ref();
    ref_opts off = on;
    off.sinks = 0;
    CK_CHECK(feature_case("gpt-oss sinks", sp, on, off) == 0);
    off = on;
    off.window = 0;
    CK_CHECK(feature_case("gpt-oss sliding window", sp, on, off) == 0);
    off = on;
    off.oai_clamp = 0;
    CK_CHECK(feature_case("gpt-oss SwiGLU clamp", sp, on, off) == 0);
    off = on;
    off.out_bias = off.exp_bias = 0;
    CK_CHECK(feature_case("gpt-oss output/expert biases", sp, on, off) == 0);
    off = on;
    off.top_logits = 0;
    CK_CHECK(feature_case("gpt-oss softmax after top-k", sp, on, off) == 0);
    /* every layer windowed (pattern 0), a window of one block, 4 of 8
     * experts, head_dim 24: no vector kernel takes it, so the general
     * attention code runs the window and the sinks */
    synth_params all = sp;
    all.swa_period = -1;
    all.n_swa = 16;
    all.n_expert_used = 4;
    all.head_dim = 24;
    ref_opts aon = on;
    aon.window = 16;
    aon.used = 4;
    aon.swa_period = 0; /* every layer */
    off = aon;
    off.window = 0;
    CK_CHECK(feature_case("gpt-oss all windowed", all, aon, off) == 0);
}

/* The table's own facts: names, parsing, defaults. */
/* lfm2: convolution layers (0, 1, 3 by synth's default pattern; 0, 2, 3
 * with attention on 1 in the second case, 4 taps) beside attention with
 * q/k head norms, NEOX RoPE. One token a call carries the state between
 * calls; the prefill carries it along the batch. Off: no state, each
 * token's convolution on its own input alone. */
static void test_lfm2(void) {
    synth_params sp = base_params(ARCH_LFM2);
    sp.n_layers = 4;
    sp.n_kv_heads = 2;
    sp.tied = 1;
    sp.rope_theta = 1000000;
    ref_opts on = {.theta = 1000000, .neox = 1, .qk_norm = 1, .conv_taps = 3}, off = on;
    off.conv_no_state = 1;
    CK_CHECK(feature_case("lfm2 short conv, 3 taps", sp, on, off) == 0);
    sp.conv_l = on.conv_taps = off.conv_taps = 4;
    sp.attn_layers = 1u << 1;
    CK_CHECK(feature_case("lfm2 4 taps, attention on 1", sp, on, off) == 0);
    off = on;
    off.qk_norm = 0; /* the attention layers' head norms are computed */
    CK_CHECK(feature_case("lfm2 q/k norms", sp, on, off) == 0);
}

/* granitehybrid: Mamba2 layers (0, 1, 3 by synth's default pattern) with
 * 8 heads of 16 channels in 2 groups, state 5 (buffers of sizes no vector
 * width divides, which the memory plan must count one by one), 4 taps; attention without
 * RoPE on layer 2; Granite's four scalars. One token a call carries the
 * state between calls; the prefill carries it along the batch. Each part
 * switched off in turn is far off. */
static void test_granitehybrid(void) {
    synth_params sp = {.arch = ARCH_GRANITEHYBRID,
                       .dim = 64,
                       .n_layers = 4,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 128,
                       .vocab_size = 400,
                       .ctx = 128,
                       .type = QUANT_F32,
                       .seed = 11,
                       .rope_theta = 10000,
                       .ssm_d_state = 5,
                       .ssm_n_group = 2,
                       .ssm_n_head = 8,
                       .ssm_d_conv = 4};
    const ref_opts on = {.theta = 10000,
                         .no_rope_step = 1,
                         .embd_scale = 4,
                         .resid_scale = 0.5,
                         .attn_scale = 1.0 / 16,
                         .logit_scale = 6};
    static const struct {
        const char *label;
        int ssm_off, scalar_off; /* scalar_off: 1 embedding, 2 residual, 4 attention, 8 logits */
    } cases[] = {{"granitehybrid mamba2 state", SSM_NO_STATE, 0},
                 {"granitehybrid z gate", SSM_NO_GATE, 0},
                 {"granitehybrid grouped norm", SSM_ONE_GROUP, 0},
                 {"granitehybrid D skip", SSM_NO_D, 0},
                 {"granitehybrid granite scales", 0, 15}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ref_opts off = on;
        off.ssm_off = cases[i].ssm_off;
        if (cases[i].scalar_off & 1) off.embd_scale = 0;
        if (cases[i].scalar_off & 2) off.resid_scale = 0;
        if (cases[i].scalar_off & 4) off.attn_scale = 0;
        if (cases[i].scalar_off & 8) off.logit_scale = 0;
        CK_CHECK(feature_case(cases[i].label, sp, on, off) == 0);
    }
    /* each scalar alone (the logits' is a plain division: far off by itself) */
    for (int b = 1; b <= 8; b <<= 1) {
        ref_opts off = on;
        if (b == 1) off.embd_scale = 0;
        if (b == 2) off.resid_scale = 0;
        if (b == 4) off.attn_scale = 0;
        if (b == 8) off.logit_scale = 0;
        const char *names[] = {
            "", "granite embedding scale", "granite residual scale", "", "granite attention scale", "", "",
            "", "granite logit scale"};
        CK_CHECK(feature_case(names[b], sp, on, off) == 0);
    }
}

/* lfm2moe: lfm2's layers, layer 0 dense, 1..3 with 8 experts of which 2
 * a token, chosen by sigmoid + exp_probs_b, the sigmoids renormalised.
 * Off: the choice without its bias; the softmax in place of the sigmoid. */
static void test_lfm2moe(void) {
    synth_params sp = base_params(ARCH_LFM2MOE);
    sp.n_layers = 4;
    sp.tied = 1;
    sp.rope_theta = 1000000;
    sp.n_expert = 8;
    sp.n_expert_used = 2;
    sp.expert_ffn = 48;
    sp.n_dense_lead = 1;
    ref_opts on = {.theta = 1000000,
                   .neox = 1,
                   .qk_norm = 1,
                   .conv_taps = 3,
                   .experts = 8,
                   .used = 2,
                   .expert_ffn = 48,
                   .moe_norm = 1,
                   .sigmoid = 1,
                   .choice_bias = 1,
                   .dense_lead = 1},
             off = on;
    off.choice_bias = 0;
    CK_CHECK(feature_case("lfm2moe choice bias", sp, on, off) == 0);
    off = on;
    off.sigmoid = off.choice_bias = 0; /* qwen3moe's softmax */
    CK_CHECK(feature_case("lfm2moe sigmoid gating", sp, on, off) == 0);
    off = on;
    off.conv_no_state = 1;
    CK_CHECK(feature_case("lfm2moe recurrent state", sp, on, off) == 0);
}

static void test_table(void) {
    const arch_info *a = arch_find("qwen3", 5);
    CK_CHECK(a && a->id == ARCH_QWEN3 && a->rope == ARCH_ROPE_NEOX);
    CK_CHECK(a->need[ARCH_T_ATTN_Q_NORM] == ARCH_REQUIRED && a->need[ARCH_T_ROPE_FREQS] == ARCH_NO);
    CK_CHECK(arch_find("llama", 5)->rope == ARCH_ROPE_NORMAL && !arch_find("llam", 4) &&
             !arch_find("mamba", 5));
    /* qwen3moe: qwen3's attention, experts instead of the dense FFN */
    const arch_info *mo = arch_find("qwen3moe", 8);
    CK_CHECK(mo && mo->id == ARCH_QWEN3MOE && mo->rope == ARCH_ROPE_NEOX && arch_by_id(ARCH_QWEN3MOE) == mo);
    CK_CHECK(mo->need[ARCH_T_ATTN_Q_NORM] == ARCH_REQUIRED && mo->need[ARCH_T_ATTN_K_NORM] == ARCH_REQUIRED);
    CK_CHECK(
        mo->need[ARCH_T_FFN_GATE_INP] == ARCH_REQUIRED && mo->need[ARCH_T_FFN_GATE_EXPS] == ARCH_REQUIRED &&
        mo->need[ARCH_T_FFN_UP_EXPS] == ARCH_REQUIRED && mo->need[ARCH_T_FFN_DOWN_EXPS] == ARCH_REQUIRED);
    CK_CHECK(mo->need[ARCH_T_FFN_NORM] == ARCH_REQUIRED && mo->need[ARCH_T_FFN_GATE] == ARCH_NO &&
             mo->need[ARCH_T_FFN_UP] == ARCH_NO && mo->need[ARCH_T_FFN_DOWN] == ARCH_NO);
    CK_CHECK(mo->blocks[0] == ARCH_BLOCK_ATTN && mo->blocks[1] == ARCH_BLOCK_MOE &&
             mo->blocks[2] == ARCH_BLOCK_END);
    CK_CHECK(arch_has_block(mo, ARCH_BLOCK_MOE) && !arch_has_block(a, ARCH_BLOCK_MOE));
    CK_CHECK(!strcmp(arch_block_name(ARCH_BLOCK_MOE), "moe") && strstr(arch_names(), "qwen3moe"));
    const arch_info *go = arch_find("gpt-oss", 7);
    for (int i = 0; i < arch_count(); i++) /* only qwen3moe and gpt-oss have experts; gemma4 may, and
                                              lfm2moe's layers after its dense lead */
        CK_CHECK(arch_at(i)->need[ARCH_T_FFN_GATE_EXPS] ==
                 (arch_at(i) == mo || arch_at(i) == go                              ? ARCH_REQUIRED
                  : arch_at(i)->id == ARCH_LFM2MOE || arch_at(i)->id == ARCH_GEMMA4 ? ARCH_OPTIONAL
                                                                                    : ARCH_NO));
    /* gpt-oss: its own tensors required, post_attention_norm in the place of ffn_norm, its
     * gating, activation and window as data */
    CK_CHECK(go && go->id == ARCH_GPT_OSS && arch_by_id(ARCH_GPT_OSS) == go && go->rope == ARCH_ROPE_NEOX);
    CK_CHECK(go->need[ARCH_T_ATTN_SINKS] == ARCH_REQUIRED && go->need[ARCH_T_ATTN_OUT_B] == ARCH_REQUIRED &&
             go->need[ARCH_T_ATTN_POST_NORM] == ARCH_REQUIRED && go->need[ARCH_T_FFN_NORM] == ARCH_NO &&
             go->need[ARCH_T_OUTPUT] == ARCH_REQUIRED && go->need[ARCH_T_ATTN_Q_B] == ARCH_OPTIONAL &&
             go->need[ARCH_T_FFN_GATE_INP_B] == ARCH_REQUIRED &&
             go->need[ARCH_T_FFN_DOWN_EXPS_B] == ARCH_REQUIRED && go->need[ARCH_T_ATTN_Q_NORM] == ARCH_NO);
    CK_CHECK(go->gating == ARCH_GATING_SOFTMAX_WEIGHT && go->act == ARCH_ACT_SWIGLU_OAI &&
             go->keys == ARCH_READS_SWA && go->swa_period == 2 && mo->gating == ARCH_GATING_SOFTMAX_NORM &&
             mo->act == ARCH_ACT_SWIGLU);
    for (int i = 0; i < 6; i++) CK_CHECK(arch_layer_is_swa(2, i) == (i % 2 == 0)); /* even layers */
    CK_CHECK(arch_layer_is_swa(0, 5) && arch_layer_is_swa(3, 1) && !arch_layer_is_swa(3, 2));
    int t0, l0;
    /* a window of 8 at position 20 sees 13..20 */
    CK_CHECK(arch_swa_masked(8, 20, 12) && !arch_swa_masked(8, 20, 13) && !arch_swa_masked(8, 20, 20));
    CK_CHECK(arch_parse_tensor("blk.3.attn_sinks.weight", 4, &t0, &l0) == 0 && t0 == ARCH_T_ATTN_SINKS &&
             arch_parse_tensor("blk.0.post_attention_norm.weight", 1, &t0, &l0) == 0 &&
             t0 == ARCH_T_ATTN_POST_NORM && arch_parse_tensor("blk.0.ffn_up_exps.bias", 1, &t0, &l0) == 0 &&
             t0 == ARCH_T_FFN_UP_EXPS_B);
    int t, l;
    CK_CHECK(arch_parse_tensor("blk.12.attn_k.bias", 13, &t, &l) == 0 && t == ARCH_T_ATTN_K_B && l == 12);
    CK_CHECK(arch_parse_tensor("blk.13.attn_k.bias", 13, &t, &l) == -1); /* past the layers */
    CK_CHECK(arch_parse_tensor("blk.01.attn_k.bias", 13, &t, &l) == -1); /* two names for one */
    CK_CHECK(arch_parse_tensor("rope_freqs.weight", 1, &t, &l) == 0 && t == ARCH_T_ROPE_FREQS && l == -1);
    CK_CHECK(arch_parse_tensor("blk.0.attn_output.bias", 1, &t, &l) == 0 && t == ARCH_T_ATTN_OUT_B);
    CK_CHECK(arch_parse_tensor("blk.0.attn_qkv.weight", 1, &t, &l) == -1); /* a fused QKV */
    /* smollm3: Llama's tensors without rope_freqs, RoPE off on every fourth layer */
    const arch_info *s3 = arch_find("smollm3", 7), *m3 = arch_find("mistral3", 8);
    CK_CHECK(s3 && s3->id == ARCH_SMOLLM3 && s3->rope == ARCH_ROPE_NORMAL && s3->no_rope_step == 4 &&
             s3->keys == 0 && s3->need[ARCH_T_ROPE_FREQS] == ARCH_NO &&
             s3->need[ARCH_T_OUTPUT] == ARCH_OPTIONAL && s3->need[ARCH_T_ATTN_Q_B] == ARCH_OPTIONAL &&
             s3->need[ARCH_T_ATTN_Q_NORM] == ARCH_NO);
    for (int i = 0; i < 12; i++) CK_CHECK(arch_layer_has_rope(4, i) == ((i + 1) % 4 != 0));
    CK_CHECK(arch_layer_has_rope(0, 3) && arch_layer_has_rope(0, 0));
    /* mistral3: Llama's tensors with rope_freqs, the two keys it alone reads */
    CK_CHECK(m3 && m3->id == ARCH_MISTRAL3 && m3->rope == ARCH_ROPE_NORMAL && m3->no_rope_step == 0 &&
             m3->keys == (ARCH_READS_YARN_LOG_MUL | ARCH_READS_ATTN_TEMP) &&
             m3->need[ARCH_T_ROPE_FREQS] == ARCH_OPTIONAL && m3->need[ARCH_T_ATTN_Q_NORM] == ARCH_NO);
    for (int i = 0; i < arch_count(); i++) {
        const arch_info *r = arch_at(i);
        CK_CHECK(arch_by_id(r->id) == r && strstr(arch_names(), r->name));
        if (r != m3 && r != go && r->id != ARCH_LFM2 && r->id != ARCH_LFM2MOE && r->id != ARCH_GEMMA4 &&
            r->id != ARCH_GRANITEHYBRID)
            CK_CHECK(r->keys == 0); /* gemma4's: test_arch_gemma4 */
    }
    /* granitehybrid: per-layer attention or Mamba2, Granite's scalars, ssm_a without a suffix */
    const arch_info *gh = arch_find("granitehybrid", 13);
    CK_CHECK(gh && gh->id == ARCH_GRANITEHYBRID && gh->keys == (ARCH_READS_MAMBA2 | ARCH_READS_GRANITE) &&
             gh->rope == ARCH_ROPE_NORMAL && arch_has_block(gh, ARCH_BLOCK_MAMBA2) &&
             arch_has_block(gh, ARCH_BLOCK_ATTN) && gh->need[ARCH_T_OUTPUT_NORM] == ARCH_REQUIRED &&
             gh->need[ARCH_T_SSM_IN] == ARCH_OPTIONAL && gh->need[ARCH_T_ATTN_OUT_B] == ARCH_NO &&
             gh->need[ARCH_T_FFN_GATE_INP] == ARCH_NO);
    CK_CHECK(arch_parse_tensor("blk.2.ssm_a", 3, &t, &l) == 0 && t == ARCH_T_SSM_A && l == 2 &&
             arch_parse_tensor("blk.0.ssm_conv1d.bias", 1, &t, &l) == 0 && t == ARCH_T_SSM_CONV1D_B &&
             arch_parse_tensor("blk.0.ssm_a.weight", 1, &t, &l) == -1 &&
             !strcmp(arch_block_name(ARCH_BLOCK_MAMBA2), "mamba2"));
    /* lfm2: per-layer attention or short convolution, token_embd_norm at the output */
    const arch_info *lf = arch_find("lfm2", 4);
    CK_CHECK(lf && lf->id == ARCH_LFM2 && lf->keys == ARCH_READS_SHORTCONV && lf->rope == ARCH_ROPE_NEOX &&
             arch_has_block(lf, ARCH_BLOCK_SHORTCONV) && arch_has_block(lf, ARCH_BLOCK_ATTN) &&
             lf->need[ARCH_T_TOKEN_EMBD_NORM] == ARCH_REQUIRED && lf->need[ARCH_T_OUTPUT_NORM] == ARCH_NO &&
             lf->need[ARCH_T_SHORTCONV_IN] == ARCH_OPTIONAL && lf->need[ARCH_T_ATTN_Q_B] == ARCH_NO);
    CK_CHECK(arch_parse_tensor("blk.1.shortconv.conv.weight", 2, &t, &l) == 0 && t == ARCH_T_SHORTCONV_CONV &&
             l == 1 && arch_parse_tensor("token_embd_norm.weight", 2, &t, &l) == 0 &&
             t == ARCH_T_TOKEN_EMBD_NORM && !strcmp(arch_block_name(ARCH_BLOCK_SHORTCONV), "shortconv"));
    /* the query scale: 1 through the first original context, then 1 + s ln(k + 1) */
    CK_CHECK(arch_attn_temp(0.1f, 8, 0) == 1.0f && arch_attn_temp(0.1f, 8, 7) == 1.0f);
    CK_CHECK(arch_attn_temp(0.1f, 8, 8) == (float)(1 + 0.1f * log(2.0)) &&
             arch_attn_temp(0.1f, 8, 15) == arch_attn_temp(0.1f, 8, 8));
    CK_CHECK(arch_attn_temp(0.1f, 16384, 40000) == (float)(1 + 0.1f * log(3.0)));
    CK_CHECK(arch_parse_tensor("blk.2.ffn_down_exps.weight", 3, &t, &l) == 0 && t == ARCH_T_FFN_DOWN_EXPS &&
             l == 2);
    CK_CHECK(arch_parse_tensor("blk.0.ffn_gate_inp_shexp.weight", 1, &t, &l) == -1); /* a shared expert */
    CK_CHECK(arch_scaling_from_name("yarn", 4) == ARCH_SCALING_YARN &&
             arch_scaling_from_name("longrope", 8) < 0);
    /* no scaling, no factors: exactly the expression the plain path used */
    arch_rope_params p = {.n_dims = 8, .freq_base = 10000, .scaling = ARCH_SCALING_NONE, .factor = 1};
    float f[4], ms;
    arch_rope_freqs(&p, NULL, f, &ms);
    CK_CHECK(ms == 1.0f);
    for (int i = 0; i < 4; i++) CK_CHECK(f[i] == 1.0f / powf(10000.0f, (float)(2 * i) / 8.0f));
}

/* The rope_freqs.weight synth writes holds the llama3 formula's values. */
static void test_rope_freqs_values(void) {
    synth_params sp = base_params(ARCH_LLAMA);
    sp.dim = 128;
    sp.n_heads = 1;
    sp.n_kv_heads = 1; /* head_dim 128, as Llama 3.1 */
    sp.rope_freqs = 1;
    sp.rope_theta = 500000;
    char err[512];
    model *m = NULL;
    const char *path = tmp("rf.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, path, err, sizeof err) && !model_load(path, NULL, &m, err, sizeof err),
                 "%s", err);
    float *f = f32_of(&m->rope_freqs);
    int ok = f && m->rope_freqs.n == 64, ones = 0, eights = 0;
    for (int i = 0; ok && i < 64; i++) {
        ok = fabs(f[i] - llama3_factor(i, 128, 500000)) <= 1e-6 * f[i];
        ones += f[i] == 1.0f;
        eights += f[i] == 8.0f;
    }
    free(f);
    model_free(m);
    CK_CHECK(ok);
    CK_CHECK_MSG(ones > 10 && eights > 10 && ones + eights < 64, "%d ones, %d eights", ones, eights);
}

/* --vocab-from: the tokenizer keys of another file, its size. */
static void test_vocab_from(void) {
    synth_params src = base_params(ARCH_LLAMA);
    src.vocab_size = 700;
    char err[512];
    CK_CHECK_MSG(!convert_synth(&src, tmp("vsrc.gguf"), err, sizeof err), "%s", err);
    synth_params sp = base_params(ARCH_QWEN2);
    sp.vocab_size = 999; /* ignored */
    sp.vocab_from = tmp("vsrc.gguf");
    CK_CHECK_MSG(!convert_synth(&sp, tmp("vdst.gguf"), err, sizeof err), "%s", err);
    model *a = NULL, *b = NULL;
    CK_CHECK(!model_load(tmp("vsrc.gguf"), NULL, &a, err, sizeof err));
    int rc = model_load(tmp("vdst.gguf"), NULL, &b, err, sizeof err);
    int ok = !rc && b->cfg.vocab_size == 700 && tok_vocab_size(b->tok) == 700;
    for (int i = 0; ok && i < 700; i++) {
        size_t la, lb;
        const char *pa = tok_piece(a->tok, i, &la), *pb = tok_piece(b->tok, i, &lb);
        ok = pa && pb && la == lb && !memcmp(pa, pb, la);
    }
    model_free(a);
    model_free(b);
    CK_CHECK_MSG(ok, "rc %d: %s", rc, err);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/confkv-arch-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    CK_RUN(test_table);
    CK_RUN(test_rope_freqs_values);
    CK_RUN(test_vocab_from);
    CK_RUN(test_llama_tied_gqa);
    CK_RUN(test_llama_rope_freqs);
    CK_RUN(test_llama_linear);
    CK_RUN(test_llama_yarn);
    CK_RUN(test_qwen2_bias_neox);
    CK_RUN(test_qwen3_norm_head_dim);
    CK_RUN(test_smollm3_no_rope);
    CK_RUN(test_mistral3_temp);
    CK_RUN(test_mistral3_roundtrip);
    CK_RUN(test_qwen3moe_experts);
    CK_RUN(test_gpt_oss);
    CK_RUN(test_lfm2);
    CK_RUN(test_lfm2moe);
    CK_RUN(test_granitehybrid);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return ck_test_summary();
}
