/* test_cpu_kernels_forward.c - the whole CPU forward pass, on a model whose
 * head size takes the vectorized attention path, against a scalar Llama
 * written here from the llama2.c conventions (not from backend_cpu.c's
 * code), bound 1e-5, at every ISA level this CPU runs (CONFKV_CPU_KERNELS
 * forcing each level, as a user would); and two threads against one, bit
 * for bit, where the backend splits the work between them (the learnt
 * splits of a batch, a token's attention by heads). tests/CMakeLists.txt
 * runs it again where the OpenMP runtime grants one thread of the two. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "ck_test.h"
#include "convert.h"
#include "cpu_attn.h"
#include "cpu_features.h"
#include "kv.h"
#include "model.h"
#include "quant.h"

/* The ISA level the forward pass runs at (each in turn). */
static int cur_isa;

/* ------------------------------------------- a scalar Llama, for reference */

/* A layer's nine tensors as f32 rows, in model_layer_list's order. */
enum { L_ATTN_NORM, L_WQ, L_WK, L_WV, L_WO, L_FFN_NORM, L_W1, L_W2, L_W3 };

/* The weights as f32 rows (model.h's shapes), read through quant_to_f32 and
 * nothing of the backend; activations and the KV cache in double. */
typedef struct ref_model {
    model_config c;
    float *emb;                                      /* (vocab, dim) */
    float *out_norm;                                 /* (dim) */
    float *wcls;                                     /* (vocab, dim) */
    float *(*l)[MODEL_LAYER_TENSORS];                /* (n_layers) */
    double *kc, *vc;                                 /* (n_layers, seq_len, kv_dim) */
    double *x, *xb, *q, *k, *v, *ao, *att, *h1, *h3; /* one token's activations */
} ref_model;

static float *ref_tensor(const model_tensor *t) {
    float *f = malloc((size_t)t->n * sizeof(float));
    if (f && quant_to_f32(t->type, t->data, f, t->n)) {
        free(f);
        f = NULL;
    }
    return f;
}

static void ref_free(ref_model *r) {
    free(r->emb);
    free(r->out_norm);
    free(r->wcls);
    for (int i = 0; r->l && i < r->c.n_layers; i++)
        for (int j = 0; j < MODEL_LAYER_TENSORS; j++) free(r->l[i][j]);
    free(r->l);
    double *d[] = {r->kc, r->vc, r->x, r->xb, r->q, r->k, r->v, r->ao, r->att, r->h1, r->h3};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) free(d[i]);
}

static int ref_init(ref_model *r, const model *m) {
    memset(r, 0, sizeof *r);
    const model_config *c = &m->cfg;
    r->c = *c;
    const size_t D = (size_t)c->dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    const size_t cache = (size_t)c->n_layers * c->seq_len * kvd;
    r->emb = ref_tensor(&m->tok_emb);
    r->out_norm = ref_tensor(&m->out_norm);
    r->wcls = ref_tensor(&m->wcls);
    r->l = calloc((size_t)c->n_layers, sizeof *r->l);
    int ok = r->emb && r->out_norm && r->wcls && r->l;
    for (int i = 0; ok && i < c->n_layers; i++) {
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(&m->layers[i], t);
        for (int j = 0; j < MODEL_LAYER_TENSORS; j++) ok &= (r->l[i][j] = ref_tensor(t[j])) != NULL;
    }
    r->kc = malloc(cache * sizeof(double));
    r->vc = malloc(cache * sizeof(double));
    r->x = malloc(D * sizeof(double));
    r->xb = malloc(D * sizeof(double));
    r->q = malloc(D * sizeof(double));
    r->k = malloc(kvd * sizeof(double));
    r->v = malloc(kvd * sizeof(double));
    r->ao = malloc(D * sizeof(double));
    r->att = malloc((size_t)c->seq_len * sizeof(double));
    r->h1 = malloc((size_t)c->hidden_dim * sizeof(double));
    r->h3 = malloc((size_t)c->hidden_dim * sizeof(double));
    ok = ok && r->kc && r->vc && r->x && r->xb && r->q && r->k && r->v && r->ao && r->att && r->h1 && r->h3;
    if (!ok) ref_free(r);
    return ok ? 0 : -1;
}

static void ref_rmsnorm(double *o, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = w[i] * (x[i] * s);
}

/* y (n) = w (n, k) . x (k) */
static void ref_matvec(double *y, const float *w, const double *x, int n, int k) {
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < k; j++) s += (double)w[(size_t)i * k + j] * x[j];
        y[i] = s;
    }
}

/* Llama's RoPE as llama2.c's run.c and Meta's reference apply it to the
 * GGUF/llama2.c weight order: in each head, the adjacent pair (i, i + 1)
 * turns by the angle pos * theta^(-i / head_dim), i even. */
static void ref_rope(double *v, int n_heads, int hd, int pos, double theta) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < hd; i += 2) {
            double a = pos * pow(theta, -(double)i / hd), c = cos(a), s = sin(a);
            double *p = v + (size_t)h * hd, v0 = p[i], v1 = p[i + 1];
            p[i] = v0 * c - v1 * s;
            p[i + 1] = v0 * s + v1 * c;
        }
}

/* ao = attention of r->q over positions [0, pos] of layer l's cache; query
 * head h reads KV head h / (n_heads / n_kv_heads). */
static void ref_attention(ref_model *r, int l, int pos) {
    const int hd = r->c.head_dim, gqa = r->c.n_heads / r->c.n_kv_heads;
    const size_t kvd = (size_t)r->c.n_kv_heads * hd, lo = (size_t)l * r->c.seq_len * kvd;
    for (int h = 0; h < r->c.n_heads; h++) {
        const double *q = r->q + (size_t)h * hd;
        const size_t off = lo + (size_t)(h / gqa) * hd;
        double mx = -INFINITY, sum = 0, *o = r->ao + (size_t)h * hd;
        for (int t = 0; t <= pos; t++) {
            const double *k = r->kc + off + (size_t)t * kvd;
            double d = 0;
            for (int i = 0; i < hd; i++) d += q[i] * k[i];
            r->att[t] = d / sqrt((double)hd);
            mx = fmax(mx, r->att[t]);
        }
        for (int t = 0; t <= pos; t++) sum += (r->att[t] = exp(r->att[t] - mx));
        for (int i = 0; i < hd; i++) o[i] = 0;
        for (int t = 0; t <= pos; t++) {
            const double *v = r->vc + off + (size_t)t * kvd;
            for (int i = 0; i < hd; i++) o[i] += r->att[t] / sum * v[i];
        }
    }
}

/* One layer for the token at pos, r->x the residual stream. */
static void ref_layer(ref_model *r, int l, int pos) {
    const model_config *c = &r->c;
    float *const *w = r->l[l];
    const int D = c->dim, F = c->hidden_dim, kvd = c->n_kv_heads * c->head_dim;
    ref_rmsnorm(r->xb, r->x, w[L_ATTN_NORM], D, c->norm_eps);
    ref_matvec(r->q, w[L_WQ], r->xb, c->n_heads * c->head_dim, D);
    ref_matvec(r->k, w[L_WK], r->xb, kvd, D);
    ref_matvec(r->v, w[L_WV], r->xb, kvd, D);
    ref_rope(r->q, c->n_heads, c->head_dim, pos, c->rope_theta);
    ref_rope(r->k, c->n_kv_heads, c->head_dim, pos, c->rope_theta);
    const size_t at = ((size_t)l * c->seq_len + pos) * kvd;
    memcpy(r->kc + at, r->k, (size_t)kvd * sizeof(double));
    memcpy(r->vc + at, r->v, (size_t)kvd * sizeof(double));
    ref_attention(r, l, pos);
    ref_matvec(r->xb, w[L_WO], r->ao, D, c->n_heads * c->head_dim);
    for (int i = 0; i < D; i++) r->x[i] += r->xb[i];
    /* SwiGLU: w2 (silu(w1 x) * w3 x) */
    ref_rmsnorm(r->xb, r->x, w[L_FFN_NORM], D, c->norm_eps);
    ref_matvec(r->h1, w[L_W1], r->xb, F, D);
    ref_matvec(r->h3, w[L_W3], r->xb, F, D);
    for (int i = 0; i < F; i++) r->h1[i] = r->h1[i] / (1.0 + exp(-r->h1[i])) * r->h3[i];
    ref_matvec(r->xb, w[L_W2], r->h1, D, F);
    for (int i = 0; i < D; i++) r->x[i] += r->xb[i];
}

/* Logits (vocab) of token tok at pos; positions [0, pos) must have run. */
static void ref_step(ref_model *r, int tok, int pos, double *logits) {
    const int D = r->c.dim;
    for (int i = 0; i < D; i++) r->x[i] = r->emb[(size_t)tok * D + i];
    for (int l = 0; l < r->c.n_layers; l++) ref_layer(r, l, pos);
    ref_rmsnorm(r->xb, r->x, r->out_norm, D, r->c.norm_eps);
    ref_matvec(logits, r->wcls, r->xb, r->c.vocab_size, D);
}

/* ------------------------------------------------- the CPU forward pass */

enum { NSEQ = 3, MAXLEN = 40, CHUNK = 7, N_KV = 16, BS = 16 };
static const int lens[NSEQ] = {40, 11, 26};

static int32_t seq_token(int s, int p, int V) { return (int32_t)((7 * s + 13 * p + 1) % V); }

static size_t logit_off(int s, int p, int V) { return ((size_t)s * MAXLEN + p) * V; }

/* Reference logits of every position of every sequence: (NSEQ, MAXLEN, V). */
static void ref_all(ref_model *r, double *ref) {
    const int V = r->c.vocab_size;
    for (int s = 0; s < NSEQ; s++)
        for (int p = 0; p < lens[s]; p++) ref_step(r, seq_token(s, p, V), p, ref + logit_off(s, p, V));
}

/* Worst over the sequences' positions of max |got - ref| / max |ref|. */
static double worst_err(const float *got, const double *ref, int V, int only_seq) {
    double worst = 0;
    for (int s = 0; s < NSEQ; s++) {
        if (only_seq >= 0 && s != only_seq) continue;
        for (int p = 0; p < lens[s]; p++) {
            const float *g = got + logit_off(s, p, V);
            const double *w = ref + logit_off(s, p, V);
            double d = 0, m = 0;
            for (int i = 0; i < V; i++) {
                d = fmax(d, fabs(g[i] - w[i]));
                m = fmax(m, fabs(w[i]));
            }
            double e = m > 0 ? d / m : d;
            worst = e > worst || isnan(e) ? e : worst;
        }
    }
    return worst;
}

/* (a) one token per forward call, each sequence in turn. */
static int run_single(backend *b, kv_pool *pool, float *got) {
    const int V = b->m->cfg.vocab_size;
    for (int s = 0; s < NSEQ; s++) {
        kv_seq q;
        if (kv_seq_init(&q, s, b->m->cfg.seq_len, BS)) return -1;
        int rc = 0;
        for (int p = 0; p < lens[s] && !rc; p++) {
            int32_t tok = seq_token(s, p, V), pos = p, six = 0, row = 0;
            if ((rc = kv_seq_reserve(&q, pool, 1))) break;
            be_seq_view v = {.blocks = q.hot, .n_blocks = q.n_blocks};
            be_batch bt = {1, &tok, &pos, &six, &row, 1, &v, 1};
            rc = b->ops->forward(b, &bt, got + logit_off(s, p, V));
            kv_seq_commit(&q, 1);
        }
        kv_seq_reset(&q, pool);
        kv_seq_free(&q);
        if (rc) return -1;
    }
    return 0;
}

/* One step of run_batched: up to CHUNK more tokens of every unfinished
 * sequence, logits for all of them. */
static int batched_step(backend *b, kv_pool *pool, kv_seq *q, float (*mass)[MAXLEN / BS + 1], int *done,
                        float *logits, float *got) {
    const int V = b->m->cfg.vocab_size;
    int32_t tok[NSEQ * CHUNK], pos[NSEQ * CHUNK], six[NSEQ * CHUNK], row[NSEQ * CHUNK];
    size_t where[NSEQ * CHUNK];
    be_seq_view v[NSEQ];
    int n = 0, chunk[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        chunk[s] = lens[s] - done[s] < CHUNK ? lens[s] - done[s] : CHUNK;
        if (kv_seq_reserve(&q[s], pool, chunk[s])) return -1;
        for (int i = 0; i < chunk[s]; i++, n++) {
            int p = done[s] + i;
            tok[n] = seq_token(s, p, V);
            pos[n] = p;
            six[n] = s;
            row[n] = n;
            where[n] = logit_off(s, p, V);
        }
        v[s] = (be_seq_view){.blocks = q[s].hot, .n_blocks = q[s].n_blocks, .mass = mass[s]};
    }
    if (!n) return 0;
    be_batch bt = {n, tok, pos, six, row, NSEQ, v, n};
    if (b->ops->forward(b, &bt, logits)) return -1;
    for (int i = 0; i < n; i++) memcpy(got + where[i], logits + (size_t)i * V, (size_t)V * sizeof(float));
    for (int s = 0; s < NSEQ; s++) {
        kv_seq_commit(&q[s], chunk[s]);
        done[s] += chunk[s];
    }
    return n;
}

/* (b) all sequences at once, prefill in chunks of CHUNK tokens: the steps
 * mix sequences (some split between threads by token, some by panel). Each
 * query token adds 1 to its sequence's block masses (averaged over layers
 * and heads), so each sequence's masses must sum to its length. */
static int run_batched(backend *b, kv_pool *pool, float *got) {
    kv_seq q[NSEQ];
    float mass[NSEQ][MAXLEN / BS + 1] = {{0}};
    float *logits = malloc((size_t)NSEQ * CHUNK * b->m->cfg.vocab_size * sizeof(float));
    int done[NSEQ] = {0}, rc = logits ? 0 : -1, n_init = 0;
    for (; n_init < NSEQ && !rc; n_init++) rc = kv_seq_init(&q[n_init], n_init, b->m->cfg.seq_len, BS);
    int n = 1;
    while (!rc && n > 0)
        if ((n = batched_step(b, pool, q, mass, done, logits, got)) < 0) rc = -1;
    for (int s = 0; s < NSEQ && !rc; s++) {
        double sum = 0;
        for (int j = 0; j < MAXLEN / BS + 1; j++) sum += mass[s][j];
        if (!(fabs(sum - lens[s]) <= 1e-4 * lens[s])) {
            fprintf(stderr, "  batched: sequence %d block masses sum to %.7g, want %d\n", s, sum, lens[s]);
            rc = -1;
        }
    }
    for (int s = 0; s < n_init; s++) {
        kv_seq_reset(&q[s], pool);
        kv_seq_free(&q[s]);
    }
    free(logits);
    return rc;
}

/* (c) sequence 0 in one prefill call, logits for every row, its blocks
 * scattered through the pool out of order. */
static int run_prefill(backend *b, float *got) {
    const int V = b->m->cfg.vocab_size;
    int32_t tok[MAXLEN], pos[MAXLEN], six[MAXLEN] = {0}, row[MAXLEN], blocks[] = {9, 2, 13};
    for (int p = 0; p < lens[0]; p++) {
        tok[p] = seq_token(0, p, V);
        pos[p] = p;
        row[p] = p;
    }
    be_seq_view v = {.blocks = blocks, .n_blocks = 3};
    be_batch bt = {lens[0], tok, pos, six, row, 1, &v, lens[0]};
    return b->ops->forward(b, &bt, got) ? -1 : 0;
}

/* The three runs of one backend against the reference, bound 1e-5. */
static int forward_runs_ok(const model *m, const double *ref) {
    const int V = m->cfg.vocab_size;
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = MAXLEN, .n_kv_blocks = N_KV, .block_size = BS, .n_threads = 2};
    if (be_cpu_new(m, &o, &b, err, sizeof err)) {
        fprintf(stderr, "  %s\n", err);
        return -1;
    }
    kv_pool pool;
    float *got = calloc((size_t)NSEQ * MAXLEN * V, sizeof(float));
    int rc = -1;
    if (kv_pool_init(&pool, N_KV, BS)) goto out_b;
    if (!got || run_single(b, &pool, got)) goto out;
    double e1 = worst_err(got, ref, V, -1);
    if (run_batched(b, &pool, got)) goto out;
    double e2 = worst_err(got, ref, V, -1);
    memset(got, 0, (size_t)MAXLEN * V * sizeof(float));
    if (run_prefill(b, got)) goto out;
    double e3 = worst_err(got, ref, V, 0);
    fprintf(stderr, "  normalised logits error: single %.3g, batched %.3g, prefill %.3g (bound 1e-5)\n", e1,
            e2, e3);
    rc = e1 <= 1e-5 && e2 <= 1e-5 && e3 <= 1e-5 ? 0 : -1;
out:
    kv_pool_free(&pool);
out_b:
    free(got);
    be_free(b);
    return rc;
}

/* A model of head size 32 (the vectorized attention), GQA 2, an FFN width
 * and a vocabulary that end in partial panels. */
static int forward_check(const char *path) {
    synth_params sp = {.dim = 64,
                       .n_layers = 2,
                       .n_heads = 2,
                       .n_kv_heads = 1,
                       .hidden_dim = 100,
                       .vocab_size = 400,
                       .ctx = 64,
                       .type = QUANT_F32,
                       .seed = 7,
                       .rope_theta = 10000.0f};
    char err[256];
    model *m = NULL;
    ref_model r;
    double *ref = NULL;
    int rc = -1;
    if (convert_synth(&sp, path, err, sizeof err) || model_load(path, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "  %s\n", err);
        return -1;
    }
    attn_shape as = {m->cfg.n_heads,
                     m->cfg.head_dim,
                     m->cfg.n_kv_heads * m->cfg.head_dim,
                     BS,
                     m->cfg.n_heads / m->cfg.n_kv_heads,
                     NULL};
    const char *an;
    (void)attn_f32_kernel(&as, cur_isa, &an);
    fprintf(stderr, "  attention %s\n", an);
    if (ref_init(&r, m)) goto out_m;
    if ((ref = malloc((size_t)NSEQ * MAXLEN * m->cfg.vocab_size * sizeof(double)))) {
        ref_all(&r, ref);
        rc = forward_runs_ok(m, ref);
    }
    free(ref);
    ref_free(&r);
out_m:
    model_free(m);
    return rc;
}

/* fn(path) on a fresh temporary file, removed afterwards; fn's result, or -1. */
static int on_temp_file(int (*fn)(const char *)) {
    char path[] = "/tmp/confkv-kernels-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    int rc = fn(path);
    unlink(path);
    return rc;
}

/* The forward pass at every level this CPU runs, forced as a user would. */
static void test_forward_against_reference(void) {
    for (int isa = 0; isa <= cpu_isa_detect(); isa++) {
        setenv(CPU_KERNELS_ENV, cpu_isa_name(isa), 1);
        cur_isa = isa;
        fprintf(stderr, "  %s=%s\n", CPU_KERNELS_ENV, cpu_isa_name(isa));
        CK_CHECK_MSG(on_temp_file(forward_check) == 0, "isa %s: see above", cpu_isa_name(isa));
    }
    unsetenv(CPU_KERNELS_ENV);
    cur_isa = cpu_isa_detect();
}

/* A model synthesized from sp at path and two CPU backends of it with o,
 * one thread (b[0]) and two (b[1]), each with an output of n floats.
 * Returns 0, or -1 after saying why (what was made is freed by
 * pair_free). */
static int pair_new(const synth_params *sp, const char *path, be_options o, size_t n, model **m, backend **b,
                    float **out) {
    char err[256];
    if (convert_synth(sp, path, err, sizeof err) || model_load(path, NULL, m, err, sizeof err)) {
        fprintf(stderr, "  %s\n", err);
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        o.n_threads = k + 1;
        if (be_cpu_new(*m, &o, &b[k], err, sizeof err) || !(out[k] = malloc(n * sizeof(float)))) {
            fprintf(stderr, "  %s\n", err);
            return -1;
        }
    }
    return 0;
}

static void pair_free(model *m, backend **b, float **out) {
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        be_free(b[k]);
    }
    model_free(m);
}

/* The learnt splits (backend_cpu.c split_learn) move the cut between the
 * threads from call to call: the tokens of a token split, the classifier's
 * panels. Logits must not move with them: a 2-thread backend called again
 * and again (cuts wherever the timing puts them) against a 1-thread one,
 * bit for bit. The vocabulary is big enough for the classifier to be split
 * (about 8M multiply-adds a call), the batch for the layers to be split by
 * token. */
static int split_runs_same(const char *path) {
    synth_params sp = {.dim = 64,
                       .n_layers = 1,
                       .n_heads = 2,
                       .n_kv_heads = 2,
                       .hidden_dim = 96,
                       .vocab_size = 8200,
                       .ctx = 64,
                       .type = QUANT_F32,
                       .seed = 11,
                       .rope_theta = 10000.0f};
    enum { NT = 16, RUNS = 30 };
    model *m = NULL;
    backend *b[2] = {NULL, NULL};
    float *out[2] = {NULL, NULL};
    int rc = -1;
    const size_t n = (size_t)NT * sp.vocab_size;
    const be_options o = {.max_batch_tokens = NT, .n_kv_blocks = NT, .block_size = 4};
    if (pair_new(&sp, path, o, n, &m, b, out)) goto out;
    /* 16 sequences of one token each, at position 0: block j for sequence j */
    int32_t tok[NT], pos[NT] = {0}, six[NT], row[NT], blk[NT];
    be_seq_view v[NT];
    for (int i = 0; i < NT; i++) {
        tok[i] = (37 * i + 5) % m->cfg.vocab_size;
        six[i] = row[i] = blk[i] = i;
        v[i] = (be_seq_view){.blocks = &blk[i], .n_blocks = 1};
    }
    be_batch bt = {NT, tok, pos, six, row, NT, v, NT};
    if (b[0]->ops->forward(b[0], &bt, out[0])) goto out;
    for (int r = 0; r < RUNS; r++) {
        if (b[1]->ops->forward(b[1], &bt, out[1])) goto out;
        if (memcmp(out[0], out[1], n * sizeof(float))) {
            fprintf(stderr, "  run %d: 2-thread logits differ from 1-thread\n", r);
            goto out;
        }
    }
    rc = 0;
out:
    pair_free(m, b, out);
    return rc;
}

static void test_learnt_split_same_logits(void) {
    CK_CHECK_MSG(on_temp_file(split_runs_same) == 0, "see above");
}

/* A batch of one on two threads splits its token's attention by heads
 * (cpu_layer_attn.c attend_heads, from PAR_MIN_HEAD_MACS: past position 63
 * here): logits bit for bit those of one thread, token after token, and
 * each block's attention mass (the policy's signal) too. */
static int head_split_same(const char *path) {
    synth_params sp = {.dim = 256,
                       .n_layers = 2,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 384,
                       .vocab_size = 400,
                       .ctx = 128,
                       .type = QUANT_F32,
                       .seed = 13,
                       .rope_theta = 10000.0f};
    enum { BS = 16, NB = 128 / BS, STEPS = 100 };
    model *m = NULL;
    backend *b[2] = {NULL, NULL};
    float *out[2] = {NULL, NULL}, mass[2][NB];
    int rc = -1;
    const int V = sp.vocab_size;
    const be_options o = {.max_batch_tokens = 1, .n_kv_blocks = NB, .block_size = BS};
    if (pair_new(&sp, path, o, (size_t)V, &m, b, out)) goto out;
    int32_t blk[NB];
    for (int j = 0; j < NB; j++) blk[j] = j;
    memset(mass, 0, sizeof mass);
    for (int p = 0; p < STEPS; p++) {
        int32_t tok = (31 * p + 7) % V, pos = p, six = 0, row = 0;
        for (int k = 0; k < 2; k++) {
            be_seq_view v = {.blocks = blk, .n_blocks = NB, .mass = mass[k]};
            be_batch bt = {1, &tok, &pos, &six, &row, 1, &v, 1};
            if (b[k]->ops->forward(b[k], &bt, out[k])) goto out;
        }
        if (memcmp(out[0], out[1], (size_t)V * sizeof(float)) || memcmp(mass[0], mass[1], sizeof mass[0])) {
            fprintf(stderr, "  position %d: 2-thread %s differ from 1-thread\n", p,
                    memcmp(out[0], out[1], (size_t)V * sizeof(float)) ? "logits" : "block masses");
            goto out;
        }
    }
    rc = 0;
out:
    pair_free(m, b, out);
    return rc;
}

static void test_head_split_same_logits(void) {
    for (int isa = 0; isa <= cpu_isa_detect(); isa++) {
        setenv(CPU_KERNELS_ENV, cpu_isa_name(isa), 1);
        CK_CHECK_MSG(on_temp_file(head_split_same) == 0, "isa %s: see above", cpu_isa_name(isa));
    }
    unsetenv(CPU_KERNELS_ENV);
}

int main(void) {
    cur_isa = cpu_isa_detect();
    CK_RUN(test_forward_against_reference);
    CK_RUN(test_learnt_split_same_logits);
    CK_RUN(test_head_split_same_logits);
    return ck_test_summary();
}
