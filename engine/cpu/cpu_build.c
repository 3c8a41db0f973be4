/* cpu_build.c - the CPU backend's construction (be_cpu_new), its memory
 * plan (be_cpu_plan, which mirrors the construction allocation by
 * allocation), and what it reports (be_cpu_step_bytes, be_cpu_kernels);
 * cpu_destroy.c frees what this allocates. Every buffer the forward pass uses is sized and
 * allocated here, once.
 *
 * Two kinds of weight matrix (cpu_mat):
 *  - f32, f16 and bf16 weights are converted once when the backend is
 *    created and packed into cpu_gemm.c's panels, whose kernel runs every
 *    batch size from one token (memory bound) to a prefill chunk (compute
 *    bound), measured faster than OpenBLAS's sgemm at all of them on these
 *    CPUs (sgemm packs the weights again at every call). The Q, K and V
 *    projections are fused into one matrix, so a layer runs four products.
 *  - quantized weights (Q8_0, Q4_0, the K-quants, ...) stay in the file's
 *    bytes, in the read-only mapping: no copy, so resident memory is about
 *    the file's size. Each product quantizes its input rows to the weight
 *    type's 8-bit partner (cpu_qact.h) into scratch sized here, and
 *    cpu_qdot.c's integer kernels multiply the blocks directly; at batch 1
 *    that streams the file's bytes, not 4 a weight. A type with an
 *    interleaved layout (Q4_0, Q8_0, Q4_K, Q6_K, MXFP4: 8 rows a block, one row a
 *    vector lane) is repacked here into a copy of about the same size (Q4_K
 *    2.8 % more) whose mapped pages are then dropped, so memory stays about
 *    the file's size. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ck_err.h"
#include "cpu_features.h"
#include "cpu_layer.h"
#include "cpu_qgemm.h"
#include "quant.h"

/* Buffers at least this big go on 2 MiB pages where the kernel allows it. */
#define HUGE_BYTES ((size_t)2 << 20)

/* Bytes alloc_floats takes for n floats (be_cpu_plan counts with it too). */
static size_t floats_bytes(size_t n) {
    size_t align = n * sizeof(float) >= HUGE_BYTES ? HUGE_BYTES : 64;
    size_t bytes = (n * sizeof(float) + align - 1) & ~(align - 1);
    return bytes ? bytes : 64;
}

static float *alloc_floats(cpu_backend *cb, size_t n) {
    /* 64-byte aligned for the vector units; zeroed so unused KV is finite.
     * Big ones (weights, the KV pool) are 2 MiB aligned and asked for huge
     * pages (transparent huge pages are often "madvise" only): a batch-32
     * step reads KV blocks scattered over the pool and every weight panel,
     * and with 4 KiB pages each 36 KB block takes nine TLB entries. */
    size_t align = n * sizeof(float) >= HUGE_BYTES ? HUGE_BYTES : 64;
    size_t bytes = floats_bytes(n);
    float *p = aligned_alloc(align, bytes);
    if (p) {
#ifdef MADV_HUGEPAGE
        if (align == HUGE_BYTES) madvise(p, bytes, MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
        memset(p, 0, bytes);
        cb->bytes += bytes;
    }
    return p;
}

/* malloc, counted in cb->bytes (bookkeeping arrays; not zeroed). */
static void *alloc_bytes(cpu_backend *cb, size_t n) {
    void *p = malloc(n ? n : 1);
    if (p) cb->bytes += n;
    return p;
}

/* Bytes alloc_x8 takes for n bytes. */
static size_t x8_alloc_bytes(size_t n) { return (n + 63) & ~(size_t)63; }

/* The x8 arena: one buffer for all the x8 copies of a model's matrices,
 * cap bytes (the sum of x8_alloc_bytes over them), 2 MiB aligned with huge
 * pages asked for its whole 2 MiB pages. Why one: a matrix of a small
 * model is under 2 MiB (a 110M-shape layer's fused gate/up in Q4_K is
 * 1.8 MB), so copies of their own would sit on 4 KiB pages, and batch-1
 * decode, which streams every byte of them once a token, would take a TLB
 * miss every 4 KiB (50 of a 110M Q4_K_M file's 68 MB). Not zeroed: the repack writes
 * every byte it hands out. */
static int x8_arena_new(cpu_backend *cb, size_t cap) {
    if (!cap) return CK_OK;
    void *p = NULL;
    if (posix_memalign(&p, HUGE_BYTES, cap)) return CK_ENOMEM;
#ifdef MADV_HUGEPAGE
    if (cap >= HUGE_BYTES)
        madvise(p, cap & ~(HUGE_BYTES - 1), MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
    cb->x8_arena = p;
    cb->x8_cap = cap;
    return CK_OK;
}

/* A buffer for an x8 copy of a matrix of n bytes, counted in cb->bytes:
 * the arena's next x8_alloc_bytes(n) (64-byte aligned), or, should the
 * arena not hold it (it is sized for every matrix, so only if the sizing
 * and the use disagree), a buffer of its own in *own. */
static void *alloc_x8(cpu_backend *cb, size_t n, void **own) {
    const size_t a = x8_alloc_bytes(n);
    *own = NULL;
    if (cb->x8_arena && cb->x8_cap - cb->x8_used >= a) {
        void *p = cb->x8_arena + cb->x8_used;
        cb->x8_used += a;
        cb->bytes += a;
        return p;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, a)) return NULL;
    cb->bytes += a;
    return *own = p;
}

/* Packs the (n, k) f32 rows in src into a buffer of its own (cpu_gemm.h),
 * run by the backend's kernels. */
static int pack(cpu_backend *cb, gemm_w *w, const float *src, int n, int k) {
    float *p = alloc_floats(cb, gemm_packed_floats(n, k));
    if (!p) return CK_ENOMEM;
    gemm_pack(w, p, src, n, k);
    w->kern = cb->gk;
    return CK_OK;
}

/* Convert tensors into consecutive rows of one f32 matrix. */
static int to_f32(float *dst, const model_tensor *t) { return quant_to_f32(t->type, t->data, dst, t->n); }

/* The kernel entry of an (n, k) weight tensor computed in its own bytes, or
 * NULL: f32/f16/bf16 (packed f32), or a row that is not whole blocks (the
 * conversion then reports the file's error). */
static const cpu_qtype *mat_qtype(const cpu_qdot *qd, const model_tensor *t, int k) {
    const cpu_qtype *q = cpu_qdot_type(qd, t->type);
    return q && k % q->block == 0 ? q : NULL;
}

/* The roles the construction and the plan walk alike: for each matrix its
 * tensor(s), shape and kind. f32 ones are packed (fused Q, K, V when all
 * three are); a quantized one is used in place. */
typedef struct mat_spec {
    model_tensor t; /* the tensor (for fused QKV: wq; wk and wv follow); an expert's slice */
    int n, k;
    const cpu_qtype *q; /* NULL: f32 packed */
} mat_spec;

/* The layer's attention and dense feed-forward matrices in order
 * qkv[0..n_qkv), wo, then (a dense layer) w1, w3, w2; returns how many
 * (n_qkv + 4, or n_qkv + 1 in a MoE layer) and sets *n_qkv. A
 * short-convolution layer's: in_proj, out_proj, then w1, w3, w2 (n_qkv 0);
 * a Mamba2 layer's: ssm_in, ssm_out, then w1, w3, w2 (n_qkv 0). */
static int layer_specs(const cpu_qdot *qd, const model *m, int l, mat_spec sp[7], int *n_qkv) {
    const model_config *c = &m->cfg;
    const model_layer *ml = &m->layers[l];
    int nh, nkv, hd;
    model_layer_geom(m, l, &nh, &nkv, &hd);
    const int D = c->dim, F = c->hidden_dim, QD = nh * hd, KVD = nkv * hd;
    const int has_v = ml->wv.data != NULL; /* gemma4's full layers have none: V = K */
    const cpu_qtype *qq = mat_qtype(qd, &ml->wq, D), *qk = mat_qtype(qd, &ml->wk, D),
                    *qv = has_v ? mat_qtype(qd, &ml->wv, D) : NULL;
    int n = 0;
    if (ml->sc_in.n) { /* a short-convolution layer: in_proj, out_proj in the place of q/k/v, wo */
        sp[n++] = (mat_spec){ml->sc_in, 3 * D, D, mat_qtype(qd, &ml->sc_in, D)};
        sp[n++] = (mat_spec){ml->sc_out, D, D, mat_qtype(qd, &ml->sc_out, D)};
        *n_qkv = 0;
    } else if (ml->kv_src) { /* gemma4's shared-KV layer: queries only */
        sp[n++] = (mat_spec){ml->wq, QD, D, qq};
    } else if (ml->ssm_in.n) { /* a Mamba2 layer: ssm_in, ssm_out in the place of q/k/v, wo */
        const int DI = c->ssm_d_inner, NIN = 2 * DI + 2 * c->ssm_n_group * c->ssm_d_state + c->ssm_n_head;
        sp[n++] = (mat_spec){ml->ssm_in, NIN, D, mat_qtype(qd, &ml->ssm_in, D)};
        sp[n++] = (mat_spec){ml->ssm_out, D, DI, mat_qtype(qd, &ml->ssm_out, DI)};
        *n_qkv = 0;
    } else if (!qq && !qk && !qv) {
        sp[n++] = (mat_spec){ml->wq, QD + (1 + has_v) * KVD, D, NULL};
    } else {
        sp[n++] = (mat_spec){ml->wq, QD, D, qq};
        sp[n++] = (mat_spec){ml->wk, KVD, D, qk};
        if (has_v) sp[n++] = (mat_spec){ml->wv, KVD, D, qv};
    }
    if (!ml->sc_in.n && !ml->ssm_in.n) {
        *n_qkv = n;
        sp[n++] = (mat_spec){ml->wo, D, QD, mat_qtype(qd, &ml->wo, QD)};
    }
    if (!ml->w1.n) return n; /* a MoE layer: its experts are moe_spec's */
    /* gate and up share their units (cpu_ffn_swiglu): both quantized or both f32 */
    const cpu_qtype *q1 = mat_qtype(qd, &ml->w1, D), *q3 = mat_qtype(qd, &ml->w3, D);
    if (!q1 || !q3) q1 = q3 = NULL;
    sp[n++] = (mat_spec){ml->w1, F, D, q1};
    sp[n++] = (mat_spec){ml->w3, F, D, q3};
    sp[n++] = (mat_spec){ml->w2, D, F, mat_qtype(qd, &ml->w2, F)};
    return n;
}

/* Rows of a Mamba2 layer's ssm_in: z, xBC, dt. */
static size_t ssm_in_rows(const model_config *c) {
    return 2 * (size_t)c->ssm_d_inner + 2 * (size_t)c->ssm_n_group * (size_t)c->ssm_d_state +
           (size_t)c->ssm_n_head;
}

/* Matrices of layer l's mixture of experts: the router, then each
 * expert's gate, up and down (cpu_moe_w's order); 0 in a dense layer. */
static int moe_n_specs(const model *m, int l) { return m->layers[l].router.n ? 1 + 3 * m->cfg.n_expert : 0; }

/* Matrix i of moe_n_specs's: an expert's is a view of its slice of the
 * 3-D tensor (model_expert), computed in the file's bytes as a dense
 * matrix of that type would be. */
static mat_spec moe_spec(const cpu_qdot *qd, const model *m, int l, int i) {
    const model_config *c = &m->cfg;
    const model_layer *ml = &m->layers[l];
    const int D = c->dim, FE = c->expert_ffn, E = c->n_expert;
    if (i == 0) return (mat_spec){ml->router, E, D, mat_qtype(qd, &ml->router, D)};
    const int e = (i - 1) / 3, r = (i - 1) % 3;
    if (r == 2) {
        const model_tensor t = model_expert(&ml->down_exps, E, e);
        return (mat_spec){t, D, FE, mat_qtype(qd, &t, FE)};
    }
    /* gate and up share their units (cpu_ffn_swiglu): both quantized or both f32 */
    const model_tensor g = model_expert(&ml->gate_exps, E, e), u = model_expert(&ml->up_exps, E, e);
    const cpu_qtype *qg = mat_qtype(qd, &g, D), *qu = mat_qtype(qd, &u, D);
    if (!qg || !qu) qg = qu = NULL;
    return r == 0 ? (mat_spec){g, FE, D, qg} : (mat_spec){u, FE, D, qu};
}

/* gemma4's per-layer embedding matrices of layer l: its gate and proj,
 * and with layer 0's the model's per_layer_model_proj; 0 elsewhere. */
static int ple_n_specs(const model *m, int l) { return m->layers[l].ple_gate.n ? (l == 0 ? 3 : 2) : 0; }

static mat_spec ple_spec(const cpu_qdot *qd, const model *m, int l, int i) {
    const model_config *c = &m->cfg;
    const model_layer *ml = &m->layers[l];
    const int D = c->dim, P = c->n_embd_pl;
    if (i == 0) return (mat_spec){ml->ple_gate, P, D, mat_qtype(qd, &ml->ple_gate, D)};
    if (i == 1) return (mat_spec){ml->ple_proj, D, P, mat_qtype(qd, &ml->ple_proj, P)};
    return (mat_spec){m->ple_model, c->n_layers * P, D, mat_qtype(qd, &m->ple_model, D)};
}

/* Every matrix of layer l, in the order be_cpu_new builds them: n_specs
 * of them, spec i by layer_spec. */
static int layer_n_specs(const cpu_qdot *qd, const model *m, int l) {
    mat_spec sp[7];
    int nq;
    return layer_specs(qd, m, l, sp, &nq) + moe_n_specs(m, l) + ple_n_specs(m, l);
}

static mat_spec layer_spec(const cpu_qdot *qd, const model *m, int l, int i) {
    mat_spec sp[7];
    int nq, n = layer_specs(qd, m, l, sp, &nq), nm = moe_n_specs(m, l);
    return i < n ? sp[i] : i < n + nm ? moe_spec(qd, m, l, i - n) : ple_spec(qd, m, l, i - n - nm);
}

/* The width of the feed-forward buffers (h13, h): the dense one's, or a
 * MoE model's experts'. */
static size_t ffn_width(const model_config *c) {
    if (c->n_expert && c->n_dense_lead) /* lfm2moe: both kinds of layer */
        return (size_t)(c->expert_ffn > c->hidden_dim ? c->expert_ffn : c->hidden_dim);
    /* gemma4's experts run beside a dense part: the wider of the two */
    if (c->n_expert && c->arch == ARCH_GEMMA4 && c->hidden_dim > c->expert_ffn) return (size_t)c->hidden_dim;
    return (size_t)(c->n_expert ? c->expert_ffn : c->hidden_dim);
}

/* Bytes a matrix takes as the backend holds it: its packed f32 buffer, or
 * (quantized) its rows in the mapping, resident once read. */
static size_t spec_bytes(const mat_spec *sp) {
    if (!sp->q) return floats_bytes(gemm_packed_floats(sp->n, sp->k));
    return (size_t)sp->n * (size_t)(sp->k / sp->q->block) * (size_t)sp->q->block_bytes;
}

/* Bytes the backend holds for a matrix: spec_bytes, but an x8 copy as
 * alloc_x8 takes it (be_cpu_plan and make_mat count with it). */
static size_t held_bytes(const mat_spec *sp) {
    if (sp->q && sp->q->dot8) return x8_alloc_bytes(cpu_qdot_x8_bytes(sp->q, sp->n, sp->k));
    return spec_bytes(sp);
}

/* Bytes of one quantized input row of k elements for the formats, and the
 * most for any matrix: xq_stride per format (0: none). */
static void act_strides(const cpu_qdot *qd, const model *m, size_t stride[ACT_N]) {
    for (int a = 0; a < ACT_N; a++) stride[a] = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        for (int i = 0, n = layer_n_specs(qd, m, l); i < n; i++) {
            const mat_spec sp = layer_spec(qd, m, l, i);
            if (!sp.q) continue;
            const int a = cpu_act_index(sp.q->act);
            size_t rb = qact_row_bytes(sp.q->act, sp.k);
            if (rb > stride[a]) stride[a] = rb;
        }
    }
}

/* Bytes of a product's input row in a matrix's form (cpu_in_row_bytes). */
static size_t spec_in_row_bytes(const mat_spec *sp) {
    return sp->q ? qact_row_bytes(sp->q->act, sp->k) : (size_t)sp->k * sizeof(float);
}

/* The mixture of experts' row sizes: an input row in the experts' gate's
 * form, and in up's where that differs (moe_xrow), a SwiGLU row in the
 * down's (moe_hrow); the most over the layers, 4-byte multiples. */
static void moe_rows(const cpu_qdot *qd, const model *m, size_t *xrow, size_t *hrow) {
    *xrow = *hrow = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (!moe_n_specs(m, l)) continue;
        const mat_spec g = moe_spec(qd, m, l, 1), u = moe_spec(qd, m, l, 2), d = moe_spec(qd, m, l, 3);
        const int same = g.q ? u.q && g.q->act == u.q->act : !u.q;
        size_t x = spec_in_row_bytes(&g) + (same ? 0 : spec_in_row_bytes(&u));
        x = (x + 3) & ~(size_t)3;
        const size_t h = (spec_in_row_bytes(&d) + 3) & ~(size_t)3;
        if (x > *xrow) *xrow = x;
        if (h > *hrow) *hrow = h;
    }
}

/* Drops the pages of [p, p + n) that lie wholly inside it from this
 * process's resident set. Only for bytes of a GGUF file's mapping (read-only,
 * MAP_PRIVATE, never written): a later read faults them back in from the
 * file, so nothing is lost; on any other memory MADV_DONTNEED would zero it. */
static void drop_mapped(const model *m, const void *p, size_t n) {
    if (!model_weights_in_file_map(m)) return; /* not known to be a file mapping */
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    const uintptr_t b = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    const uintptr_t e = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
    if (e > b) (void)madvise((void *)b, e - b, MADV_DONTNEED); /* a hint: failure costs memory only */
}

/* Fills w from a spec: packs the f32 rows (tmp: scratch for the largest
 * one), points at the file's rows, or (a type with an x8 layout) repacks
 * them into a buffer of its own and drops the mapping's pages, so the copy
 * replaces the file's bytes in memory instead of adding to them. Counted
 * in cb->bytes as the plan counts them (held_bytes). */
static int make_mat(cpu_backend *cb, cpu_mat *w, const mat_spec *sp, float *tmp, const model_tensor *fused_k,
                    const model_tensor *fused_v, int kv_rows) {
    memset(w, 0, sizeof *w);
    if (sp->q) {
        w->q = (cpu_qmat){
            sp->t.data, sp->q, sp->n, sp->k, (size_t)(sp->k / sp->q->block) * sp->q->block_bytes, 0};
        if (!sp->q->dot8) {
            cb->bytes += spec_bytes(sp);
            return CK_OK;
        }
        const size_t bytes = spec_bytes(sp);
        void *p = alloc_x8(cb, cpu_qdot_x8_bytes(sp->q, sp->n, sp->k), &w->qown);
        if (!p) return CK_ENOMEM;
        int rc = cpu_qdot_repack8(sp->q, p, sp->t.data, sp->n, sp->k);
        if (rc) return rc; /* qown, if any, freed with the backend */
        w->q.data = p;
        w->q.x8 = 1;
        drop_mapped(cb->base.m, sp->t.data, bytes);
        return CK_OK;
    }
    int rc = to_f32(tmp, &sp->t);
    if (!rc && fused_k) {
        const size_t q_rows = (size_t)(sp->n - (fused_v ? 2 : 1) * kv_rows);
        if (!(rc = to_f32(tmp + q_rows * sp->k, fused_k)) && fused_v)
            rc = to_f32(tmp + (q_rows + kv_rows) * sp->k, fused_v);
    }
    return rc ? rc : pack(cb, &w->f, tmp, sp->n, sp->k);
}

/* Floats of the f32 scratch the construction converts matrices into: the
 * largest packed one (0 when every matrix is quantized). */
static size_t tmp_floats(const cpu_qdot *qd, const model *m) {
    size_t t = 0;
    const model_config *c = &m->cfg;
    if (!mat_qtype(qd, &m->wcls, c->dim)) t = (size_t)c->vocab_size * c->dim;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0, n = layer_n_specs(qd, m, l); i < n; i++) {
            const mat_spec sp = layer_spec(qd, m, l, i);
            if (!sp.q && (size_t)sp.n * sp.k > t) t = (size_t)sp.n * sp.k;
        }
    return t;
}

/* Size arithmetic that reports overflow instead of wrapping: a plan of
 * absurd options must fail, not come out small. */
typedef struct plan_acc {
    int over;
} plan_acc;

static size_t pmul(plan_acc *a, size_t x, size_t y) {
    size_t r;
    if (__builtin_mul_overflow(x, y, &r)) a->over = 1;
    return r;
}

static size_t padd(plan_acc *a, size_t x, size_t y) {
    size_t r;
    if (__builtin_add_overflow(x, y, &r)) a->over = 1;
    return r;
}

/* floats_bytes of x * y floats. */
static size_t pfloats(plan_acc *a, size_t x, size_t y) {
    size_t n = pmul(a, x, y);
    return n > SIZE_MAX / 8 ? (a->over = 1, 0) : floats_bytes(n);
}

/* A layer's vectors that the backend keeps as f32 copies of their own
 * (gpt-oss's output bias and sinks, its router's and experts' biases), in
 * the order of cpu_layer_vectors' destinations. */
#define LAYER_VECTORS 16
static void layer_vectors(const model_layer *ml, const model_tensor *t[LAYER_VECTORS]) {
    t[0] = &ml->bo;
    t[1] = &ml->sinks;
    t[2] = &ml->router_b;
    t[3] = &ml->gate_exps_b;
    t[4] = &ml->up_exps_b;
    t[5] = &ml->down_exps_b;
    t[6] = &ml->attn_post_norm; /* gemma4's */
    t[7] = &ml->ffn_post_norm;
    t[8] = &ml->out_scale;
    t[9] = &ml->pre_norm_2; /* gemma4's experts' */
    t[10] = &ml->post_norm_1;
    t[11] = &ml->post_norm_2;
    t[12] = &ml->router_scale;
    t[13] = &ml->down_exps_s;
    t[14] = &ml->ple_post_norm;
    t[15] = &ml->probs_b; /* lfm2moe's */
}

/* Each of layer_vectors' tensors that the file has into an f32 copy of its
 * own in the layer's weights (NULL where it has none). */
static int cpu_layer_vectors(cpu_backend *cb, const model_layer *ml, cpu_layer *w) {
    const model_tensor *t[LAYER_VECTORS];
    float **dst[LAYER_VECTORS] = {
        &w->attn.bo,          &w->attn.sinks,     &w->moe.router_b,    &w->moe.gate_b,
        &w->moe.up_b,         &w->moe.down_b,     &w->attn.post_norm,  &w->ffn.post_norm,
        &w->ffn.out_scale,    &w->moe.norm,       &w->moe.post_norm_1, &w->moe.post_norm_2,
        &w->moe.router_scale, &w->moe.down_scale, &w->ple.post_norm,   &w->moe.probs_b};
    layer_vectors(ml, t);
    for (int i = 0; i < LAYER_VECTORS; i++) {
        if (!t[i]->n) continue;
        if (!(*dst[i] = alloc_floats(cb, (size_t)t[i]->n))) return CK_ENOMEM;
        int rc = to_f32(*dst[i], t[i]);
        if (rc) return rc;
    }
    return CK_OK;
}

static int cpu_options_ok(const model_config *c, const be_options *o) {
    return o->max_batch_tokens > 0 && o->n_kv_blocks > 0 && o->block_size > 0 && o->n_kv8_blocks >= 0 &&
           o->max_ctx >= 0 && o->max_ctx <= c->seq_len && o->n_state_slots >= 0;
}

int be_cpu_default_threads(void) { return omp_get_num_procs(); }

/* Mirrors be_cpu_new allocation by allocation (a test holds the two equal). */
int be_cpu_plan(const model *m, const be_options *o, be_memory *p) {
    memset(p, 0, sizeof *p);
    const model_config *c = &m->cfg;
    if (!cpu_options_ok(c, o)) return CK_EINVAL;
    plan_acc a = {0};
    const int nt = o->n_threads > 0 ? o->n_threads : be_cpu_default_threads();
    const int ctx = o->max_ctx ? o->max_ctx : be_default_ctx(m);
    const size_t D = (size_t)c->dim, F = ffn_width(c), V = (size_t)c->vocab_size;
    const size_t L = (size_t)c->n_layers, hd = (size_t)c->head_dim, T = (size_t)o->max_batch_tokens;
    const size_t E = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
    const int q_dim = model_q_dim(c), kv_dim = model_kv_dim(c);
    const int qkv_dim = q_dim + 2 * kv_dim;
    const size_t hd_swa = (size_t)c->head_dim_swa; /* gemma4's second RoPE table; 0 elsewhere */
    const size_t max_blocks = ((size_t)ctx + (size_t)o->block_size - 1) / (size_t)o->block_size;
    p->max_ctx = ctx;
    p->n_threads = nt;
    /* weights: out_norm, the embedding when untied (an f32 copy, or the
     * file's quantized rows), the classifier, the layers, RoPE; packed f32
     * copies and mapped quantized bytes alike (spec_bytes) */
    cpu_qdot qd;
    cpu_qdot_init(&qd, CPU_ISA_C); /* which types are quantized does not depend on the ISA */
    size_t w = floats_bytes(D);
    const cpu_qtype *qemb = mat_qtype(&qd, &m->tok_emb, c->dim);
    if (!m->tied)
        w = padd(&a, w,
                 qemb ? spec_bytes(&(mat_spec){m->tok_emb, c->vocab_size, c->dim, qemb}) : pfloats(&a, V, D));
    const mat_spec cls = {m->wcls, c->vocab_size, c->dim, mat_qtype(&qd, &m->wcls, c->dim)};
    w = padd(&a, w, held_bytes(&cls));
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        w = padd(&a, w, 2 * floats_bytes(D)); /* attn_norm, ffn_norm */
        for (int i = 0, n = layer_n_specs(&qd, m, l); i < n; i++) {
            const mat_spec sp = layer_spec(&qd, m, l, i);
            w = padd(&a, w, held_bytes(&sp));
        }
        if (moe_n_specs(m, l)) w = padd(&a, w, pmul(&a, 3 * E, sizeof(cpu_mat)));
        /* the optional ones, where present */
        if (ml->bq.n || ml->bk.n || ml->bv.n) w = padd(&a, w, floats_bytes((size_t)qkv_dim));
        if (ml->sc_conv.n) w = padd(&a, w, floats_bytes((size_t)ml->sc_conv.n)); /* the taps */
        if (ml->ssm_in.n) { /* Mamba2's taps, their bias, dt_bias / A / D, the grouped norm: each
                               one an allocation, as be_cpu_new makes them */
            w = padd(&a, w, floats_bytes(ml->ssm_conv.n) + floats_bytes(3 * (size_t)c->ssm_n_head));
            w = padd(&a, w, floats_bytes((size_t)c->ssm_d_inner));
            if (ml->ssm_conv_b.n) w = padd(&a, w, floats_bytes(model_ssm_conv_ch(c)));
        }
        if (ml->q_norm.n) w = padd(&a, w, floats_bytes((size_t)ml->q_norm.n));
        if (ml->k_norm.n) w = padd(&a, w, floats_bytes((size_t)ml->k_norm.n));
        /* gpt-oss's vectors, where present (layer_vectors' order) */
        const model_tensor *vec[LAYER_VECTORS];
        layer_vectors(ml, vec);
        for (int i = 0; i < LAYER_VECTORS; i++)
            if (vec[i]->n) w = padd(&a, w, floats_bytes((size_t)vec[i]->n));
    }
    w = padd(&a, w, floats_bytes(hd / 2));
    if (m->ple_norm.n) w = padd(&a, w, floats_bytes((size_t)m->ple_norm.n)); /* gemma4's ple_norm */
    p->weights = hd_swa ? padd(&a, w, floats_bytes(hd_swa / 2)) : w;
    /* KV pools */
    const size_t kv_block_floats = pmul(&a, pmul(&a, L * 2, (size_t)o->block_size), (size_t)kv_dim);
    p->kv = pfloats(&a, (size_t)o->n_kv_blocks, kv_block_floats);
    kvq_shape shape = {c->n_layers, o->block_size, kv_dim};
    p->kv8 = o->n_kv8_blocks > 0 ? pmul(&a, (size_t)o->n_kv8_blocks, kvq_block_bytes(&shape)) : 0;
    /* batch buffers: x, xb, xo; qkv; att_out; h13; h; rope; q_scale; hot_list, n_list, seq_last */
    size_t act = 3 * pfloats(&a, T, D);
    act = padd(&a, act, pfloats(&a, T, (size_t)qkv_dim));
    act = padd(&a, act, pfloats(&a, T, (size_t)q_dim));
    const size_t R = E ? pmul(&a, (size_t)nt, T) : T; /* h13, h: a part a thread (cpu_layer_moe.c) */
    act = padd(&a, act, pfloats(&a, R, 2 * F));
    act = padd(&a, act, pfloats(&a, R, F));
    act = padd(&a, act, pfloats(&a, T, hd));
    if (hd_swa) act = padd(&a, act, pfloats(&a, T, hd_swa));
    if (c->n_embd_pl) { /* gemma4's ple, ple_h */
        act = padd(&a, act, pfloats(&a, T, pmul(&a, L, (size_t)c->n_embd_pl)));
        act = padd(&a, act, pfloats(&a, T, (size_t)c->n_embd_pl));
    }
    if (c->attn_temp_scale != 0) act = padd(&a, act, pfloats(&a, T, 1)); /* q_scale */
    if (c->n_conv_layers) act = padd(&a, act, pfloats(&a, T, 4 * D));    /* conv_bcx, conv_y */
    if (c->n_ssm_layers)                                                 /* ssm_zx, ssm_y */
        act = padd(&a, padd(&a, act, pfloats(&a, T, ssm_in_rows(c))), pfloats(&a, T, (size_t)c->ssm_d_inner));
    act = padd(&a, act, pmul(&a, pmul(&a, T, max_blocks), sizeof(int32_t)));
    act = padd(&a, act, 2 * T * sizeof(int32_t));
    /* the mixture of experts': moe_p, moe_wt, moe_gw, moe_xg, moe_hq, moe_y; moe_sel,
     * moe_tok, moe_off */
    if (E) {
        size_t xrow, hrow;
        moe_rows(&qd, m, &xrow, &hrow);
        act = padd(&a, act, pfloats(&a, T, E));
        act = padd(&a, act, 2 * pfloats(&a, T, K));
        act = padd(&a, act, pfloats(&a, R, xrow / 4));
        act = padd(&a, act, pfloats(&a, pmul(&a, T, K), hrow / 4));
        act = padd(&a, act, pfloats(&a, T, D));
        if (c->arch == ARCH_GEMMA4) act = padd(&a, act, pfloats(&a, T, D)); /* moe_acc */
        act = padd(&a, act, pmul(&a, pmul(&a, T, 2 * K), sizeof(int32_t)));
        act = padd(&a, act, pmul(&a, pmul(&a, (size_t)nt, 2 * E + 1), sizeof(int32_t)));
    }
    /* the products' quantized input rows, and the classifier's */
    size_t xs[ACT_N];
    act_strides(&qd, m, xs);
    for (int i = 0; i < ACT_N; i++)
        if (xs[i]) act = padd(&a, act, pfloats(&a, T, (xs[i] + 3) / 4));
    if (cls.q) act = padd(&a, act, pfloats(&a, T, (qact_row_bytes(cls.q->act, c->dim) + 3) / 4));
    p->activations = act;
    /* per thread: scores (n_heads, ctx) + q_dim; attention's block pointers,
     * rows and mass; the split bookkeeping (cut, share, done_s, cls_s, pcut,
     * steal) */
    const size_t scores = (size_t)c->n_heads * (size_t)ctx + (size_t)q_dim;
    const size_t per_blk = sizeof(const float *) + sizeof(int) + sizeof(float);
    p->scratch_per_thread = padd(&a, pmul(&a, scores, sizeof(float)), pmul(&a, max_blocks, per_blk));
    size_t sc = pfloats(&a, (size_t)nt, scores);
    sc = padd(&a, sc, pmul(&a, pmul(&a, (size_t)nt, max_blocks), per_blk));
    sc = padd(&a, sc, 2 * ((size_t)nt + 1) * sizeof(int) + 3 * (size_t)nt * sizeof(double));
    sc = padd(&a, sc, (size_t)nt * sizeof(cpu_steal));
    p->scratch = sc;
    /* recurrent state slots and their next positions */
    const size_t sf = model_state_floats(c), slots = o->n_state_slots > 0 ? (size_t)o->n_state_slots : 1;
    if (sf) p->state = padd(&a, pfloats(&a, slots, sf), pmul(&a, slots, sizeof(int32_t)));
    size_t t = padd(&a, p->weights, p->kv);
    t = padd(&a, t, p->kv8);
    t = padd(&a, t, p->state);
    t = padd(&a, t, p->activations);
    p->total = padd(&a, t, p->scratch);
    return a.over ? CK_ERANGE : CK_OK;
}

int be_cpu_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen) {
    *out = NULL;
    const model_config *c = &m->cfg;
    be_memory plan;
    int prc = be_cpu_plan(m, o, &plan);
    if (prc) {
        snprintf(err, errlen, "cpu backend: invalid options (batch %d, blocks %d, block size %d, ctx %d%s)",
                 o->max_batch_tokens, o->n_kv_blocks, o->block_size, o->max_ctx,
                 prc == CK_ERANGE ? ": sizes overflow" : "");
        return CK_EINVAL;
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return CK_ENOMEM;
    backend *b = &cb->base;
    b->ops = &cpu_backend_ops;
    b->m = m;
    b->opt = *o;
    b->opt.max_ctx = plan.max_ctx;
    /* The layer kinds of the architecture's layers, in its table's order. */
    const arch_info *ai = arch_by_id(c->arch ? c->arch : ARCH_LLAMA);
    for (int k = 0, nk = 0; ai && k < ARCH_MAX_BLOCKS && ai->blocks[k] != ARCH_BLOCK_END; k++) {
        if (!(cb->kinds[nk++] = cpu_layer_for(ai->blocks[k]))) {
            snprintf(err, errlen, "cpu backend: layer block \"%s\" of architecture %s is not implemented",
                     arch_block_name(ai->blocks[k]), ai->name);
            free(cb);
            return CK_EUNSUPPORTED;
        }
    }
    if (!ai || !cb->kinds[0]) {
        snprintf(err, errlen, "cpu backend: architecture %d has no layer blocks", c->arch);
        free(cb);
        return CK_EUNSUPPORTED;
    }
    cb->n_threads = plan.n_threads;
    b->opt.n_threads = cb->n_threads;
    cb->q_dim = model_q_dim(c);
    cb->kv_dim = model_kv_dim(c);
    cb->qkv_dim = cb->q_dim + 2 * cb->kv_dim;
    cb->max_ctx = b->opt.max_ctx;
    cb->scores_per_thread = (size_t)c->n_heads * (size_t)cb->max_ctx + (size_t)cb->q_dim;
    b->kv_block_floats = (size_t)c->n_layers * 2 * (size_t)o->block_size * (size_t)cb->kv_dim;
    cb->shape = (kvq_shape){c->n_layers, o->block_size, cb->kv_dim};
    b->kv8_block_bytes = kvq_block_bytes(&cb->shape);
    const size_t D = (size_t)c->dim, F = ffn_width(c), V = (size_t)c->vocab_size;
    const size_t T = (size_t)o->max_batch_tokens, E = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
    const size_t R = E ? (size_t)cb->n_threads * T : T; /* h13, h: a part a thread (cpu_layer_moe.c) */
    int rc = CK_ENOMEM;

    /* Kernels for this CPU, or the level CONFKV_CPU_KERNELS forces. */
    char why[160] = "";
    int isa = cpu_isa_select(why, sizeof why);
    if (isa < 0) {
        snprintf(err, errlen, "cpu backend: %s", why);
        free(cb);
        return isa;
    }
    cb->isa = isa;
    cb->gk = gemm_kernels_for(isa);
    cpu_qdot_init(&cb->qd, isa);
    moe_rows(&cb->qd, m, &cb->moe_xrow, &cb->moe_hrow);

    /* Each f32 matrix goes to f32 rows in tmp (the largest one's size), then
     * is packed into its own buffer; quantized ones stay where they are. */
    size_t tmp_n = tmp_floats(&cb->qd, m);
    float *tmp = tmp_n ? malloc(tmp_n * sizeof *tmp) : NULL;
    if ((tmp_n && !tmp) || !(cb->out_norm = alloc_floats(cb, D))) goto fail;
    if ((rc = to_f32(cb->out_norm, &m->out_norm))) goto fail;
    /* Granite's logits / logit_scale: the classifier is linear, so the final
     * norm's weight carries the division (the logits differ by rounding) */
    if (c->logit_scale != 0)
        for (size_t d = 0; d < D; d++) cb->out_norm[d] /= c->logit_scale;
    const cpu_qtype *qemb = mat_qtype(&cb->qd, &m->tok_emb, c->dim);
    uint64_t erb = 0;
    if ((rc = quant_row_bytes(m->tok_emb.type, (uint64_t)c->dim, &erb))) goto fail;
    cb->emb_row_bytes = (size_t)erb;
    if (!m->tied && !qemb) {
        rc = CK_ENOMEM;
        if (!(cb->emb = alloc_floats(cb, V * D))) goto fail;
        if ((rc = to_f32(cb->emb, &m->tok_emb))) goto fail;
    } else if (!m->tied) { /* rows read from the mapping at lookup */
        cb->bytes += spec_bytes(&(mat_spec){m->tok_emb, c->vocab_size, c->dim, qemb});
    }
    const mat_spec cls = {m->wcls, c->vocab_size, c->dim, mat_qtype(&cb->qd, &m->wcls, c->dim)};
    /* the x8 arena, sized for every matrix that make_mat repacks */
    size_t x8_cap = cls.q && cls.q->dot8 ? held_bytes(&cls) : 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0, n = layer_n_specs(&cb->qd, m, l); i < n; i++) {
            const mat_spec sp = layer_spec(&cb->qd, m, l, i);
            if (sp.q && sp.q->dot8) x8_cap += held_bytes(&sp);
        }
    if ((rc = x8_arena_new(cb, x8_cap))) goto fail;
    if ((rc = make_mat(cb, &cb->wcls, &cls, tmp, NULL, NULL, 0))) goto fail;
    rc = CK_ENOMEM;
    size_t state_layers = 0; /* convolution layers so far: each one's place in a state slot */
    /* Mamba2 layers so far: theirs, after the convolution layers' (none in the same model) */
    size_t ssm_layers = 0;
    if (!(cb->layers = calloc((size_t)c->n_layers, sizeof *cb->layers))) goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        cpu_attn_w *w = &cb->layers[l].attn;
        cpu_ffn_w *f = &cb->layers[l].ffn;
        cpu_moe_w *mo = &cb->layers[l].moe;
        cpu_conv_w *cv = &cb->layers[l].conv;
        cpu_ssm_w *sw = &cb->layers[l].ssm;
        const int n_moe = moe_n_specs(m, l);
        /* the norm before either feed-forward (gemma4's experts' own: a layer vector) */
        float **ffn_norm = n_moe && !ml->w1.n ? &mo->norm : &f->norm;
        float **op_norm = ml->sc_in.n    ? &cv->norm /* attention's, the convolution's or Mamba2's */
                          : ml->ssm_in.n ? &sw->norm
                                         : &w->norm;
        rc = CK_ENOMEM;
        if (!(*op_norm = alloc_floats(cb, D)) || !(*ffn_norm = alloc_floats(cb, D))) goto fail;
        if (ml->sc_in.n) {
            if (!(cv->kern = alloc_floats(cb, (size_t)ml->sc_conv.n))) goto fail;
            if ((rc = to_f32(cv->kern, &ml->sc_conv))) goto fail;
            cv->state_off = (int)(state_layers++ * (size_t)(c->conv_l - 1) * D);
        }
        if (ml->ssm_in.n) {
            const size_t H = (size_t)c->ssm_n_head, nc = model_ssm_conv_ch(c);
            if (!(sw->kern = alloc_floats(cb, (size_t)ml->ssm_conv.n)) ||
                !(sw->head = alloc_floats(cb, 3 * H)) ||
                !(sw->gnorm = alloc_floats(cb, (size_t)c->ssm_d_inner)) ||
                (ml->ssm_conv_b.n && !(sw->kern_b = alloc_floats(cb, nc))))
                goto fail;
            if ((rc = to_f32(sw->kern, &ml->ssm_conv)) ||
                (ml->ssm_conv_b.n && (rc = to_f32(sw->kern_b, &ml->ssm_conv_b))) ||
                (rc = to_f32(sw->head, &ml->ssm_dt_b)) || (rc = to_f32(sw->head + H, &ml->ssm_a)) ||
                (rc = to_f32(sw->head + 2 * H, &ml->ssm_d)) || (rc = to_f32(sw->gnorm, &ml->ssm_norm)))
                goto fail;
            sw->state_off = ssm_layers++ * model_ssm_state_floats(c);
            rc = CK_ENOMEM;
        }
        if (n_moe) {
            if (!(mo->exps = alloc_bytes(cb, 3 * E * sizeof *mo->exps))) goto fail;
            memset(mo->exps, 0, 3 * E * sizeof *mo->exps);
        }
        if ((ml->bq.n || ml->bk.n || ml->bv.n) && !(w->bqkv = alloc_floats(cb, (size_t)cb->qkv_dim)))
            goto fail;
        if ((ml->q_norm.n && !(w->q_norm = alloc_floats(cb, (size_t)ml->q_norm.n))) ||
            (ml->k_norm.n && !(w->k_norm = alloc_floats(cb, (size_t)ml->k_norm.n))))
            goto fail;
        if ((ml->bq.n && (rc = to_f32(w->bqkv, &ml->bq))) ||
            (ml->bk.n && (rc = to_f32(w->bqkv + cb->q_dim, &ml->bk))) ||
            (ml->bv.n && (rc = to_f32(w->bqkv + cb->q_dim + cb->kv_dim, &ml->bv))) ||
            (ml->q_norm.n && (rc = to_f32(w->q_norm, &ml->q_norm))) ||
            (ml->k_norm.n && (rc = to_f32(w->k_norm, &ml->k_norm))))
            goto fail;
        if ((rc = to_f32(*op_norm, &ml->attn_norm)) || (rc = to_f32(*ffn_norm, &ml->ffn_norm)) ||
            (rc = cpu_layer_vectors(cb, ml, &cb->layers[l])))
            goto fail;
        w->rope = arch_layer_has_rope(c->no_rope_step, l);
        model_layer_geom(m, l, &w->n_heads, &w->n_kv_heads, &w->head_dim);
        /* gemma4 says per layer which are windowed (and they have their own RoPE) */
        const int swa = c->head_dim_swa ? ml->swa : arch_layer_is_swa(c->swa_period, l);
        w->window = c->n_swa > 0 && swa ? c->n_swa : 0;
        w->rope_swa = c->head_dim_swa && ml->swa;
        w->kq_div = c->kq_div > 0 ? c->kq_div : sqrtf((float)w->head_dim);
        w->v_is_k = !ml->wv.data;
        mat_spec sp[7];
        int n = layer_specs(&cb->qd, m, l, sp, &w->n_qkv);
        cpu_mat *dst[7] = {&w->qkv[0], &w->qkv[1], &w->qkv[2]};
        const int first_ffn = ml->sc_in.n || ml->ssm_in.n ? 2 : w->n_qkv + 1; /* after in/out or wo */
        if (ml->sc_in.n)
            dst[0] = &cv->in, dst[1] = &cv->out;
        else if (ml->ssm_in.n)
            dst[0] = &sw->in, dst[1] = &sw->out;
        else
            dst[w->n_qkv] = &w->wo;
        dst[first_ffn] = &f->w1, dst[first_ffn + 1] = &f->w3, dst[first_ffn + 2] = &f->w2;
        for (int i = 0; i < n; i++) {
            const int fused = i == 0 && w->n_qkv == 1 && !ml->kv_src;
            if ((rc = make_mat(cb, dst[i], &sp[i], tmp, fused ? &ml->wk : NULL,
                               fused && !w->v_is_k ? &ml->wv : NULL, w->n_kv_heads * w->head_dim)))
                goto fail;
            cb->layer_bytes += spec_bytes(&sp[i]);
        }
        for (int i = 0; i < n_moe; i++) {
            const mat_spec ms = moe_spec(&cb->qd, m, l, i);
            if ((rc = make_mat(cb, i ? &mo->exps[i - 1] : &mo->router, &ms, tmp, NULL, NULL, 0))) goto fail;
            cb->layer_bytes += spec_bytes(&ms);
        }
        for (int i = 0, np = ple_n_specs(m, l); i < np; i++) {
            const mat_spec ps = ple_spec(&cb->qd, m, l, i);
            cpu_mat *pd = i == 0   ? &cb->layers[l].ple.gate
                          : i == 1 ? &cb->layers[l].ple.proj
                                   : &cb->ple_model;
            if ((rc = make_mat(cb, pd, &ps, tmp, NULL, NULL, 0))) goto fail;
            cb->layer_bytes += spec_bytes(&ps);
        }
        w->kv_layer = ml->kv_src ? ml->kv_src - 1 : l;
    }
    free(tmp);
    tmp = NULL;
    /* the products' quantized input rows (T each), and the classifier's */
    act_strides(&cb->qd, m, cb->xq_stride);
    rc = CK_ENOMEM;
    for (int i = 0; i < ACT_N; i++)
        if (cb->xq_stride[i] &&
            !(cb->xq[i] = (unsigned char *)alloc_floats(cb, T * ((cb->xq_stride[i] + 3) / 4))))
            goto fail;
    if (cls.q) {
        cb->xoq_stride = qact_row_bytes(cls.q->act, c->dim);
        if (!(cb->xoq = (unsigned char *)alloc_floats(cb, T * ((cb->xoq_stride + 3) / 4)))) goto fail;
    }
    rc = CK_ENOMEM;
    if (!(cb->inv_freq = alloc_floats(cb, (size_t)c->head_dim / 2))) goto fail;
    if ((rc = model_rope_freqs(m, cb->inv_freq, &cb->rope_mscale))) goto fail;
    rc = CK_ENOMEM;
    if (c->head_dim_swa) {
        if (!(cb->inv_freq_swa = alloc_floats(cb, (size_t)c->head_dim_swa / 2)) ||
            !(cb->rope_swa = alloc_floats(cb, T * (size_t)c->head_dim_swa)))
            goto fail;
        model_rope_freqs_swa(m, cb->inv_freq_swa);
    }
    if (c->n_embd_pl) { /* gemma4's per-layer embeddings: a layer's slice of a token's row is whole blocks */
        const size_t P = (size_t)c->n_embd_pl;
        uint64_t rb;
        rc = CK_EUNSUPPORTED;
        if ((P % (size_t)quant_block_size(m->ple_tok.type)) ||
            quant_row_bytes(m->ple_tok.type, (uint64_t)P * (uint64_t)c->n_layers, &rb))
            goto fail;
        rc = CK_ENOMEM;
        if (!(cb->ple_norm = alloc_floats(cb, P)) ||
            !(cb->ple = alloc_floats(cb, T * (size_t)c->n_layers * P)) ||
            !(cb->ple_h = alloc_floats(cb, T * P)))
            goto fail;
        if ((rc = to_f32(cb->ple_norm, &m->ple_norm))) goto fail;
        rc = CK_ENOMEM;
    }
    cb->rope_neox = c->rope_style == ARCH_ROPE_NEOX;
    if (!(cb->kv = alloc_floats(cb, (size_t)o->n_kv_blocks * b->kv_block_floats)) ||
        !(cb->x = alloc_floats(cb, T * D)) || !(cb->xb = alloc_floats(cb, T * D)) ||
        !(cb->xo = alloc_floats(cb, T * D)) || !(cb->qkv = alloc_floats(cb, T * (size_t)cb->qkv_dim)) ||
        !(cb->att_out = alloc_floats(cb, T * (size_t)cb->q_dim)) ||
        !(cb->h13 = alloc_floats(cb, R * 2 * F)) || !(cb->h = alloc_floats(cb, R * F)) ||
        (E &&
         (!(cb->moe_p = alloc_floats(cb, T * E)) || !(cb->moe_wt = alloc_floats(cb, T * K)) ||
          !(cb->moe_gw = alloc_floats(cb, T * K)) ||
          !(cb->moe_xg = (unsigned char *)alloc_floats(cb, R * (cb->moe_xrow / 4))) ||
          !(cb->moe_hq = (unsigned char *)alloc_floats(cb, T * K * (cb->moe_hrow / 4))) ||
          !(cb->moe_y = alloc_floats(cb, T * D)) ||
          (c->arch == ARCH_GEMMA4 && !(cb->moe_acc = alloc_floats(cb, T * D))) ||
          !(cb->moe_sel = alloc_bytes(cb, T * K * sizeof *cb->moe_sel)) ||
          !(cb->moe_tok = alloc_bytes(cb, T * K * sizeof *cb->moe_tok)) ||
          !(cb->moe_off = alloc_bytes(cb, (size_t)cb->n_threads * (2 * E + 1) * sizeof *cb->moe_off)))) ||
        !(cb->rope = alloc_floats(cb, T * (size_t)c->head_dim)) ||
        (c->attn_temp_scale != 0 && !(cb->q_scale = alloc_floats(cb, T))) ||
        !(cb->scores = alloc_floats(cb, (size_t)cb->n_threads * cb->scores_per_thread)))
        goto fail;
    cb->state_floats = model_state_floats(c);
    if (cb->state_floats) {
        const size_t slots = o->n_state_slots > 0 ? (size_t)o->n_state_slots : 1;
        if (!(cb->state = alloc_floats(cb, slots * cb->state_floats)) ||
            !(cb->state_pos = alloc_bytes(cb, slots * sizeof *cb->state_pos)) ||
            (c->n_conv_layers &&
             (!(cb->conv_bcx = alloc_floats(cb, T * 3 * D)) || !(cb->conv_y = alloc_floats(cb, T * D)))) ||
            (c->n_ssm_layers && (!(cb->ssm_zx = alloc_floats(cb, T * ssm_in_rows(c))) ||
                                 !(cb->ssm_y = alloc_floats(cb, T * (size_t)c->ssm_d_inner)))))
            goto fail;
        memset(cb->state, 0, slots * cb->state_floats * sizeof(float));
        memset(cb->state_pos, 0, slots * sizeof *cb->state_pos);
    }
    cb->max_blocks = (cb->max_ctx + o->block_size - 1) / o->block_size;
    if (!(cb->hot_list = alloc_bytes(cb, T * (size_t)cb->max_blocks * sizeof *cb->hot_list)) ||
        !(cb->n_list = alloc_bytes(cb, T * sizeof *cb->n_list)) ||
        !(cb->seq_last = alloc_bytes(cb, T * sizeof *cb->seq_last)) ||
        !(cb->cut = alloc_bytes(cb, ((size_t)cb->n_threads + 1) * sizeof *cb->cut)) ||
        !(cb->share = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->share)) ||
        !(cb->done_s = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->done_s)) ||
        !(cb->cls_s = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->cls_s)) ||
        !(cb->pcut = alloc_bytes(cb, ((size_t)cb->n_threads + 1) * sizeof *cb->pcut)) ||
        !(cb->steal = alloc_bytes(cb, (size_t)cb->n_threads * sizeof *cb->steal)))
        goto fail;
    /* OMP_THREAD_LIMIT caps the team as it caps the OpenMP regions */
    const int lim = omp_get_thread_limit();
    if (cpu_team_new(cb->n_threads < lim ? cb->n_threads : lim, &cb->team)) goto fail;
    for (int p = 0; p < cb->n_threads; p++) cb->share[p] = 1.0 / cb->n_threads;
    /* sinks are per layer: layer_shape (cpu_layer_attn.c) sets them */
    cb->ashape =
        (attn_shape){c->n_heads, c->head_dim, cb->kv_dim, o->block_size, c->n_heads / c->n_kv_heads, NULL};
    /* the kernels take one head shape and 1 / sqrt(head_dim): not gemma4's */
    cb->attn = c->q_dim_max || c->kq_div > 0 ? NULL : attn_f32_kernel(&cb->ashape, cb->isa, &cb->attn_name);
    const size_t nb = (size_t)cb->n_threads * cb->max_blocks;
    if (!(cb->att_blk = alloc_bytes(cb, nb * sizeof *cb->att_blk)) ||
        !(cb->att_rows = alloc_bytes(cb, nb * sizeof *cb->att_rows)) ||
        !(cb->att_mass = alloc_bytes(cb, nb * sizeof *cb->att_mass)))
        goto fail;
    if (o->n_kv8_blocks > 0) {
        size_t bytes = (size_t)o->n_kv8_blocks * b->kv8_block_bytes;
        if (!(cb->kv8 = calloc(bytes, 1))) goto fail;
        cb->bytes += bytes;
    }
    *out = b;
    return CK_OK;
fail:
    free(tmp);
    snprintf(err, errlen, "cpu backend: %s while preparing weights and buffers", ck_strerror(rc));
    cpu_destroy(b);
    return rc;
}

/* ------------------------------------------------------------ reporting */

int be_cpu_int8_peak(const model *m, int isa, int threads, double seconds, double *macs_per_s,
                     double *macs_per_token) {
    cpu_qdot qd;
    cpu_qdot_init(&qd, isa);
    double per_type[CPU_QDOT_MAX_TYPES] = {0}, total = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        mat_spec sp[7];
        int nq, n = layer_specs(&qd, m, l, sp, &nq);
        for (int i = 0; i < n; i++)
            if (sp[i].q && sp[i].q->gemm) {
                const double macs = (double)sp[i].n * (double)sp[i].k;
                per_type[sp[i].q - qd.t] += macs;
                total += macs;
            }
    }
    int best = -1;
    for (int i = 0; i < qd.n; i++)
        if (per_type[i] > 0 && (best < 0 || per_type[i] > per_type[best])) best = i;
    double peak = 0;
    if (best >= 0) {
        const cpu_qtype *t = &qd.t[best];
#pragma omp parallel num_threads(threads > 0 ? threads : 1) reduction(+ : peak)
        peak += cpu_qgemm_peak(t, seconds);
    }
    *macs_per_s = peak;
    *macs_per_token = best >= 0 ? total : 0;
    return 0;
}

uint64_t be_cpu_step_bytes(const model *m) {
    const model_config *c = &m->cfg;
    cpu_qdot qd;
    cpu_qdot_init(&qd, CPU_ISA_C);
    uint64_t b = 0, t = 0;
    /* the classifier and the layers' matrices as the products read them;
     * the vectors (norms, biases) in f32 */
    const mat_spec cls = {m->wcls, c->vocab_size, c->dim, mat_qtype(&qd, &m->wcls, c->dim)};
    b += cls.q ? spec_bytes(&cls) : 4 * (uint64_t)c->vocab_size * (uint64_t)c->dim;
    for (int l = 0; l < c->n_layers; l++) {
        mat_spec sp[7];
        int nq, n = layer_specs(&qd, m, l, sp, &nq);
        for (int i = 0; i < n; i++)
            b += sp[i].q ? spec_bytes(&sp[i]) : 4 * (uint64_t)sp[i].n * (uint64_t)sp[i].k;
        /* the router, and the n_expert_used / n_expert of the experts a token reads */
        uint64_t ex = 0;
        for (int i = 0, ne = moe_n_specs(m, l); i < ne; i++) {
            const mat_spec ms = moe_spec(&qd, m, l, i);
            const uint64_t mb = ms.q ? spec_bytes(&ms) : 4 * (uint64_t)ms.n * (uint64_t)ms.k;
            if (i)
                ex += mb;
            else
                b += mb;
        }
        if (c->n_expert) b += ex / (uint64_t)c->n_expert * (uint64_t)c->n_expert_used;
        const model_tensor *x[MODEL_LAYER_EXTRAS];
        model_layer_extras(&m->layers[l], x);
        for (int i = 0; i < MODEL_LAYER_EXTRAS; i++) t += x[i]->n;
        /* the router's bias, and the chosen experts' share of theirs */
        const model_layer *ml = &m->layers[l];
        t += ml->router_b.n;
        if (c->n_expert)
            t += (ml->gate_exps_b.n + ml->up_exps_b.n + ml->down_exps_b.n) / (uint64_t)c->n_expert *
                 (uint64_t)c->n_expert_used;
        t += 2 * (uint64_t)c->dim;
    }
    return b + 4 * (t + (uint64_t)c->dim);
}

int be_cpu_kernels(const backend *b, char *buf, size_t len) {
    if (!b || b->ops != &cpu_backend_ops) return snprintf(buf, len, "%s", b ? b->ops->name : "none");
    const cpu_backend *cb = (const cpu_backend *)b;
    int n = snprintf(buf, len, "%s (f32 %s, attention %s", cpu_isa_name(cb->isa), cb->gk->isa,
                     cb->attn ? cb->attn_name : "general");
    int seen[CPU_QDOT_MAX_TYPES] = {0};
    const cpu_mat *all[2] = {&cb->wcls, NULL};
    for (int l = -1; l < b->m->cfg.n_layers; l++) {
        const cpu_mat *mats[11];
        int k = 0;
        if (l < 0)
            mats[k++] = all[0];
        else {
            const cpu_attn_w *w = &cb->layers[l].attn;
            const cpu_ffn_w *f = &cb->layers[l].ffn;
            const cpu_moe_w *mo = &cb->layers[l].moe;
            const cpu_conv_w *cv = &cb->layers[l].conv;
            const cpu_ssm_w *sw = &cb->layers[l].ssm;
            for (int i = 0; i < w->n_qkv; i++) mats[k++] = &w->qkv[i];
            mats[k++] = cv->kern ? &cv->in : sw->kern ? &sw->in : &w->wo;
            if (cv->kern) mats[k++] = &cv->out;
            if (sw->kern) mats[k++] = &sw->out;
            mats[k++] = &f->w1, mats[k++] = &f->w3, mats[k++] = &f->w2;
            if (mo->exps) /* every expert has its tensor's type: the first one's say it */
                mats[k++] = &mo->router, mats[k++] = &mo->exps[0], mats[k++] = &mo->exps[1],
                mats[k++] = &mo->exps[2];
        }
        for (int i = 0; i < k; i++) {
            const cpu_qtype *t = mats[i]->q.t;
            if (!t) continue;
            const int ti = (int)(t - cb->qd.t);
            if (ti < 0 || ti >= CPU_QDOT_MAX_TYPES || seen[ti]) continue;
            seen[ti] = 1;
            if (n >= 0 && (size_t)n < len)
                n += snprintf(buf + n, len - (size_t)n, ", %s %s%s%s%s", quant_type_name(t->type), t->impl,
                              t->dotn ? "+rows" : "", t->dot8 ? "+x8 " : "", t->dot8 ? t->x8_impl : "");
        }
    }
    if (n >= 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, ")");
    return n;
}
