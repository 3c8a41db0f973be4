/* cpu_layer_attn.c - the attention layer kind (cpu_layer.h): norm, the Q,
 * K and V projections (with qwen2's biases and qwen3's q/k head norms where
 * the file has them), RoPE (on the layers that have it: not smollm3's every
 * fourth), the queries' position scale (mistral3's temperature, where the
 * file sets one), the K and V rows written into the sequence's hot block,
 * grouped-query attention over the sequence's resident blocks (f32 or
 * int8, kv/kvq.h), and the output projection (and its bias, gpt-oss's)
 * added into x.
 *
 * gpt-oss adds two things to the attention itself, both data of the layer
 * (cpu_attn_w): a sink logit per head, one more term of each head's
 * softmax denominator with no value, and on its windowed layers a mask:
 * a query at p sees only the keys at (p - window, p] (llama.cpp's
 * is_masked_swa). The mask is a range of rows: blocks wholly before the
 * window are skipped, the first one read from its first visible row, so
 * nothing outside it is computed; the KV cache itself keeps every block.
 * gemma4's shared-KV layers (E2B/E4B) compute queries only and attend over
 * an earlier layer's rows (cpu_attn_w.kv_layer).
 *
 * Attention walks each sequence's block table: cpu_attn.h's kernels when
 * every block it reads is f32, the general code here otherwise. A lone
 * token's heads are split over the team; a batch's tokens over OpenMP
 * threads. */
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu_attn_chunk.h"
#include "cpu_layer.h"
#include "cpu_prefetch.h"
#include "kv.h"
#include "quant.h"

/* RoPE on n_heads heads of v; cs (head_dim) holds cos, sin of each pair.
 * The adjacent pairs (2i, 2i + 1) of GGUF's llama weights: */
static void rope_rotate(float *v, const float *cs, int head_dim, int n_heads) {
    for (int h = 0; h < n_heads; h++) {
        float *p = v + h * head_dim;
        for (int i = 0; i < head_dim; i += 2) {
            float fcr = cs[i], fci = cs[i + 1];
            float v0 = p[i], v1 = p[i + 1];
            p[i] = v0 * fcr - v1 * fci;
            p[i + 1] = v0 * fci + v1 * fcr;
        }
    }
}

/* NEOX (qwen2, qwen3): pair i is (i, i + head_dim / 2). */
static void rope_rotate_neox(float *v, const float *cs, int head_dim, int n_heads) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = v + h * head_dim;
        for (int i = 0; i < half; i++) {
            float fcr = cs[2 * i], fci = cs[2 * i + 1];
            float v0 = p[i], v1 = p[i + half];
            p[i] = v0 * fcr - v1 * fci;
            p[i + half] = v0 * fci + v1 * fcr;
        }
    }
}

/* v (n) scaled to unit RMS, no weight: ggml_rms_norm's (gemma4's V heads). */
static void rms_unit(float *v, int n, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < n; j++) ss += v[j] * v[j];
    ss /= n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++) v[j] *= ss;
}

/* Where logical block j of a view lives: f32 pointer, or int8 block. */
typedef struct blk_ref {
    const float *f;          /* K rows of this layer, (block_size, kv_dim); V follows */
    const int8_t *q;         /* int8 K rows of this layer, the same shape; V follows */
    const uint16_t *ks, *vs; /* f16 scales: per channel (kv_dim), per token (block_size) */
} blk_ref;

static int block_ref(const cpu_backend *cb, const be_seq_view *v, int j, int layer, blk_ref *r) {
    const int bs = cb->base.opt.block_size, kvd = cb->kv_dim;
    int b = v->blocks[j];
    if (b >= 0) {
        r->f = cb->kv + (size_t)b * cb->base.kv_block_floats + (size_t)layer * 2 * bs * kvd;
        r->q = NULL;
        return 1;
    }
    int b8 = v->blocks8 ? v->blocks8[j] : KV_NONE;
    if (b8 < 0) return 0;
    const unsigned char *base =
        cb->kv8 + (size_t)b8 * cb->base.kv8_block_bytes + (size_t)layer * kvq_layer_bytes(&cb->shape);
    r->f = NULL;
    r->q = (const int8_t *)base;
    const uint16_t *sc = (const uint16_t *)(base + 2 * (size_t)bs * kvd);
    r->ks = sc;
    r->vs = sc + kvd;
    return 1;
}

/* The first position a query at pos attends to in layer w: 0, or on a
 * windowed layer the first one arch_swa_masked leaves (pos - window + 1). */
static int first_pos(const cpu_attn_w *w, int pos) {
    return w->window > 0 && pos - w->window + 1 > 0 ? pos - w->window + 1 : 0;
}

/* The rows [*t0, *tn) of block j that a query at pos reads (positions
 * j * bs + t): up to pos in pos's own block, from `first` on. Returns
 * 0 when there are none (a block wholly before the window). */
static int block_rows(int bs, int j, int pos, int first, int *t0, int *tn) {
    *tn = j == pos / bs ? pos - j * bs + 1 : bs;
    *t0 = first > j * bs ? first - j * bs : 0;
    return *t0 < *tn;
}

/* Where a block's K and V rows of one layer lie (one contiguous span). */
static const char *block_span(const blk_ref *r, int bs, int kvd, size_t *bytes) {
    *bytes = 2 * (size_t)bs * kvd * (r->f ? sizeof(float) : 1);
    return r->f ? (const char *)r->f : (const char *)r->q;
}

/* The f32 blocks a cpu_attn.c kernel reads for the token at pos: their K
 * rows into cb->att_blk and their row counts into cb->att_rows, slot
 * `slot`; a block the window starts inside is given from its first
 * visible row (its V rows stay block_size rows after its K rows, as the
 * kernels read them). *li0: the list index of the first block read (those
 * before it lie wholly outside the window; the ones read follow it in the
 * list). Returns their count, or -1 when a block is not f32 (the general
 * code must run). */
static int fast_blocks(const cpu_backend *cb, int layer, int pos, const be_seq_view *v, const int32_t *list,
                       int n_list, int slot, int *li0) {
    const int bs = cb->base.opt.block_size, kvd = cb->kv_dim;
    const int first = first_pos(&cb->layers[layer].attn, pos);
    const float **blk = cb->att_blk + (size_t)slot * cb->max_blocks;
    int *rows = cb->att_rows + (size_t)slot * cb->max_blocks;
    int last = pos / bs, nb = 0, t0, tn;
    if (last >= v->n_blocks) last = v->n_blocks - 1;
    blk_ref r;
    *li0 = n_list;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        if (!block_rows(bs, j, pos, first, &t0, &tn)) continue;
        if (!block_ref(cb, v, j, layer, &r) || !r.f) return -1;
        if (!nb) *li0 = li;
        blk[nb] = r.f + (size_t)t0 * kvd;
        rows[nb++] = tn - t0;
    }
    return nb;
}

/* The kernels' shape for layer l: the backend's, with the layer's sinks. */
static attn_shape layer_shape(const cpu_backend *cb, int l) {
    attn_shape sh = cb->ashape;
    sh.sinks = cb->layers[l].attn.sinks;
    return sh;
}

/* Each listed block's attention mass into the sequence's, scaled. */
static void add_mass(const be_seq_view *v, const int32_t *list, const float *mass, int nb, float mass_scale) {
    if (v->mass)
        for (int li = 0; li < nb; li++) {
#pragma omp atomic
            v->mass[list[li]] += mass[li] * mass_scale;
        }
}

/* attend_token by cpu_attn.c when every block it reads is f32. Returns 1
 * when done, 0 when the general code must run. */
static int attend_fast(const cpu_backend *cb, int layer, const float *q, float *out, int pos,
                       const be_seq_view *v, const int32_t *list, int n_list, float *att, float mass_scale,
                       int slot) {
    int li0;
    const int nb = fast_blocks(cb, layer, pos, v, list, n_list, slot, &li0);
    const attn_shape sh = layer_shape(cb, layer);
    float *mass = cb->att_mass + (size_t)slot * cb->max_blocks;
    if (nb < 0 || cb->attn(&sh, q, cb->att_blk + (size_t)slot * cb->max_blocks,
                           cb->att_rows + (size_t)slot * cb->max_blocks, nb, 0, sh.n_heads, att,
                           (size_t)cb->max_ctx, out, mass))
        return 0;
    add_mass(v, list + li0, mass, nb, mass_scale);
    return 1;
}

typedef struct heads_job {
    const cpu_backend *cb;
    attn_shape sh; /* the layer's (layer_shape) */
    const float *q;
    float *out;
    int nb, par, chunk, align;
    _Atomic int bad;
} heads_job;

/* A thread's heads, taken by work stealing (cpu_steal.h), a run of them a
 * call. */
static void heads_part(void *arg, int t, int n) {
    heads_job *j = arg;
    const cpu_backend *cb = j->cb;
    int h0, h1;
    (void)n;
    while (cpu_steal_take(cb->steal, t, j->par, j->chunk, j->align, &h0, &h1))
        if (cb->attn(&j->sh, j->q, cb->att_blk, cb->att_rows, j->nb, h0, h1, cb->scores, (size_t)cb->max_ctx,
                     j->out, NULL))
            atomic_store(&j->bad, 1);
}

/* attend_fast for the one token of a batch of one, its heads split over
 * `threads` (a token split has nothing to split there, and the attention
 * would run on one thread while the others wait). Every head is computed
 * as attend_fast computes it and the mass summed afterwards in the same
 * order, so the bits are attend_fast's. Returns 1 when done, 0 when the
 * general code must run.
 *
 * The heads go by work stealing. Why (measured on a Zen 5, 110M Q4_K_M,
 * two threads, timed in the team): an even cut leaves the caller's six
 * heads taking 1.4x the worker's time, and a cut learnt from the threads'
 * speeds, in whole heads, still leaves the caller waiting 12-16 % of each
 * attention run.
 * A take is at least half the heads a thread owns, in whole KV
 * groups (GQA's query heads that read the same K and V columns). Why: each
 * take walks every position of the context again, its heads' columns of
 * each K and V row; the KV is not in the caches (a step's weights stream
 * through them between two uses), and one head's 256 bytes a row, 3 KiB
 * apart, keep too few lines in flight. With takes of one head each thread
 * reads its KV at 16 GB/s, half the weights' rate (14 % of a step at
 * 96 positions); takes of three heads make decode 4 % faster than that at
 * 128 generated tokens and 7 % at 512. */
static int attend_heads(cpu_backend *cb, const be_batch *bt, int l, int i, int threads, float mass_scale) {
    const int q = bt->seq[i], H = cb->ashape.n_heads;
    const be_seq_view *v = &bt->seqs[q];
    const int32_t *list = cb->hot_list + (size_t)q * cb->max_blocks;
    int li0;
    const int nb = fast_blocks(cb, l, bt->pos[i], v, list, cb->n_list[q], 0, &li0);
    if (nb < 0) return 0;
    const float *qp = cb->qkv + (size_t)i * cb->qkv_dim;
    const int g = cb->ashape.gqa > 0 && H % cb->ashape.gqa == 0 ? cb->ashape.gqa : 1;
    heads_job j = {cb, layer_shape(cb, l), qp, cb->att_out + (size_t)i * cb->q_dim, nb, threads, 0, g, 0};
    j.chunk = cpu_steal_init(cb->steal, H, threads, g);
    const int half = (H / (2 * threads) + g - 1) / g * g; /* half an owned range */
    if (half > j.chunk) j.chunk = half;
    cpu_team_run(cb->team, threads, heads_part, &j);
    if (atomic_load(&j.bad)) return 0; /* a refusal is every head's (the same shape): nothing kept */
    attn_block_mass(cb->scores, (size_t)cb->max_ctx, H, cb->att_rows, nb, cb->att_mass);
    add_mass(v, list + li0, cb->att_mass, nb, mass_scale);
    return 1;
}

/* Heads' scores a[0, n) into probabilities, each head's row of att
 * (stride ctx): llama2.c's softmax, with the head's sink logit (sinks
 * non-NULL) in the max and the denominator only. */
static void heads_softmax(float *att, size_t ctx, int H, int n, const float *sinks) {
    for (int h = 0; h < H; h++) {
        float *a = att + (size_t)h * ctx, mx = sinks ? sinks[h] : -INFINITY, sum = 0.0f;
        for (int i = 0; i < n; i++) mx = a[i] > mx ? a[i] : mx;
        for (int i = 0; i < n; i++) {
            a[i] = expf(a[i] - mx);
            sum += a[i];
        }
        if (sinks) sum += expf(sinks[h] - mx);
        for (int i = 0; i < n; i++) a[i] /= sum;
    }
}

/* One token over its sequence's hot blocks (f32 or int8), every query head
 * at once. Why all heads together: a K or V row holds every kv head side by
 * side, so walking whole rows in order streams memory the prefetcher can
 * follow; one head per work item read 192-byte slices a row apart, and
 * batch-32 decode spent a third of its time waiting for them. Each block
 * is read over the rows block_rows gives (the layer's window).
 * att: (n_heads, max_ctx) scores, each head's in block order so the two
 * passes agree; qs: (q_dim) scratch for int8 blocks' scaled queries. */
static void attend_token(const cpu_backend *cb, int layer, const float *q, float *restrict out, int pos,
                         const be_seq_view *v, const int32_t *list, int n_list, float *restrict att,
                         float *restrict qs, float mass_scale, int slot) {
    const cpu_attn_w *w = &cb->layers[layer].attn;
    const int bs = cb->base.opt.block_size, hd = w->head_dim, kvd = cb->kv_dim;
    const int H = w->n_heads, gqa = w->n_heads / w->n_kv_heads, ctx = cb->max_ctx;
    const int first = first_pos(w, pos);
    const float scale = w->kq_div;
    int last = pos / bs, t0, tn;
    if (last >= v->n_blocks) last = v->n_blocks - 1;
    int n = 0;
    blk_ref r;
    if (cb->attn && attend_fast(cb, layer, q, out, pos, v, list, n_list, att, mass_scale, slot)) return;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        if (!block_rows(bs, j, pos, first, &t0, &tn)) continue;
        const char *pf = NULL; /* the next block's rows */
        size_t pf_bytes = 0;
        if (li + 1 < n_list && list[li + 1] <= last) {
            block_ref(cb, v, list[li + 1], w->kv_layer, &r);
            pf = block_span(&r, bs, kvd, &pf_bytes);
        }
        block_ref(cb, v, j, w->kv_layer, &r);
        if (r.f) {
            cb->gk->qk(att + n, (size_t)ctx, q, r.f + (size_t)t0 * kvd, kvd, tn - t0, H, hd, gqa, scale, pf,
                       pf_bytes);
            n += tn - t0;
        } else {
            /* k = k8 * ks per channel: fold the scales into the queries once. */
            for (int h = 0; h < H; h++)
                for (int i = 0; i < hd; i++)
                    qs[h * hd + i] = q[h * hd + i] * quant_f16_to_f32(r.ks[(h / gqa) * hd + i]);
            for (int t = t0; t < tn; t++, n++) {
                prefetch_part(pf, pf_bytes, t, tn);
                const int8_t *k8 = r.q + (size_t)t * kvd;
                for (int h = 0; h < H; h++) {
                    const float *qh = qs + h * hd;
                    const int8_t *kh = k8 + (h / gqa) * hd;
                    float s = 0.0f;
                    for (int i = 0; i < hd; i++) s += qh[i] * (float)kh[i];
                    att[(size_t)h * ctx + n] = s / scale;
                }
            }
        }
    }
    heads_softmax(att, (size_t)ctx, H, n, w->sinks);
    memset(out, 0, (size_t)H * hd * sizeof *out);
    n = 0;
    for (int li = 0; li < n_list && list[li] <= last; li++) {
        int j = list[li];
        if (!block_rows(bs, j, pos, first, &t0, &tn)) continue;
        block_ref(cb, v, j, w->kv_layer, &r);
        float m = 0.0f;
        if (r.f) {
            m = cb->gk->av(out, att + n, (size_t)ctx, r.f + (size_t)(bs + t0) * kvd, kvd, tn - t0, H, hd,
                           gqa);
            n += tn - t0;
        } else {
            const int8_t *v8 = r.q + (size_t)bs * kvd;
            for (int t = t0; t < tn; t++, n++) {
                const int8_t *vt = v8 + (size_t)t * kvd;
                float vscale = quant_f16_to_f32(r.vs[t]);
                for (int h = 0; h < H; h++) {
                    float a = att[(size_t)h * ctx + n], av = a * vscale;
                    const int8_t *restrict vh = vt + (h / gqa) * hd;
                    float *restrict o = out + (size_t)h * hd;
                    for (int i = 0; i < hd; i++) o[i] += av * (float)vh[i];
                    m += a;
                }
            }
        }
        if (v->mass) {
#pragma omp atomic
            v->mass[j] += m * mass_scale;
        }
    }
}

/* attend_token for token i of the batch, with scratch slot `slot`. */
static void attend_batch_token(cpu_backend *cb, const be_batch *bt, int l, int i, int slot,
                               float mass_scale) {
    const model_config *c = &cb->base.m->cfg;
    const cpu_attn_w *w = &cb->layers[l].attn;
    float *att = cb->scores + (size_t)slot * cb->scores_per_thread;
    int q = bt->seq[i];
    /* the output rows at the layer's q width: wo's input rows, one after another */
    attend_token(cb, l, cb->qkv + (size_t)i * cb->qkv_dim, cb->att_out + (size_t)i * w->n_heads * w->head_dim,
                 bt->pos[i], &bt->seqs[q], cb->hot_list + (size_t)q * cb->max_blocks, cb->n_list[q], att,
                 att + (size_t)c->n_heads * cb->max_ctx, mass_scale, slot);
}

/* Once per batch: each token's RoPE cos and sin and query scale, and each
 * sequence's resident blocks, listed once for every layer and head. */
static void attn_prepare(cpu_backend *cb, const be_batch *bt) {
    const model_config *c = &cb->base.m->cfg;
    const int hd = c->head_dim;
    if (cb->q_scale)
        for (int i = 0; i < bt->n_tokens; i++)
            cb->q_scale[i] = arch_attn_temp(c->attn_temp_scale, c->attn_temp_floor, bt->pos[i]);
    for (int i = 0; i < bt->n_tokens; i++) {
        float *cs = cb->rope + (size_t)i * hd;
        const float ms = cb->rope_mscale; /* exactly 1 unless YaRN or attn_factor: x * 1 is x */
        for (int k = 0; k < hd / 2; k++) {
            float val = bt->pos[i] * cb->inv_freq[k];
            cs[2 * k] = cosf(val) * ms;
            cs[2 * k + 1] = sinf(val) * ms;
        }
    }
    const int hs = c->head_dim_swa; /* gemma4's windowed layers: their own table, unscaled */
    for (int i = 0; cb->rope_swa && i < bt->n_tokens; i++) {
        float *cs = cb->rope_swa + (size_t)i * hs;
        for (int k = 0; k < hs / 2; k++) {
            float val = bt->pos[i] * cb->inv_freq_swa[k];
            cs[2 * k] = cosf(val);
            cs[2 * k + 1] = sinf(val);
        }
    }
    for (int q = 0; q < bt->n_seqs; q++) {
        const be_seq_view *v = &bt->seqs[q];
        int32_t *list = cb->hot_list + (size_t)q * cb->max_blocks, n = 0;
        int nb = v->n_blocks < cb->max_blocks ? v->n_blocks : cb->max_blocks;
        for (int j = 0; j < nb; j++)
            if (v->blocks[j] >= 0 || (v->blocks8 && v->blocks8[j] >= 0)) list[n++] = j;
        cb->n_list[q] = n;
    }
}

static void attn_forward(cpu_backend *cb, const cpu_span *s) {
    const model_config *c = &cb->base.m->cfg;
    const cpu_attn_w *w = &cb->layers[s->l].attn;
    if (!w->n_qkv) return; /* a short-convolution or Mamba2 layer (lfm2, granitehybrid) */
    const be_batch *bt = s->bt;
    const int l = s->l, i0 = s->i0, i1 = s->i1, threads = s->threads;
    const int D = c->dim, hd = w->head_dim, H = w->n_heads, HKV = w->n_kv_heads, M = i1 - i0;
    /* the layer's q and K/V widths; KVD the KV block's row, the widest layer's */
    const int QD = H * hd, KVL = HKV * hd, KVD = cb->kv_dim, QKV = cb->qkv_dim;
    const int bs = cb->base.opt.block_size;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D;
    float *qkv = cb->qkv + (size_t)i0 * QKV, *att_out = cb->att_out + (size_t)i0 * QD;

    for (int i = 0; i < M; i++) cpu_rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->norm, D, c->norm_eps);
    const cpu_mat *qkv_mats[3] = {&w->qkv[0], &w->qkv[1], &w->qkv[2]};
    cpu_matmul(cb, qkv, QKV, xb, i0, qkv_mats, w->n_qkv, M, 0, threads);
    const int own_kv = w->kv_layer == l; /* gemma4's shared-KV layers have queries only */
    for (int i = i0; i < i1; i++) {
        float *q = cb->qkv + (size_t)i * QKV;
        const float *cs = (w->rope_swa ? cb->rope_swa : cb->rope) + (size_t)i * hd;
        if (!own_kv) {
            for (int h = 0; h < H; h++)
                cpu_rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, w->q_norm, hd, c->norm_eps);
            if (w->rope) rope_rotate_neox(q, cs, hd, H);
            continue;
        }
        if (w->v_is_k) /* gemma4's full layers: V is K's projection, before its norm and RoPE */
            memcpy(q + QD + KVL, q + QD, (size_t)KVL * sizeof(float));
        if (w->bqkv)
            for (int j = 0; j < QD + 2 * KVL; j++) q[j] += w->bqkv[j];
        if (w->q_norm) /* qwen3: each head normed on its own, before RoPE */
            for (int h = 0; h < H; h++)
                cpu_rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, w->q_norm, hd, c->norm_eps);
        if (w->k_norm)
            for (int h = 0; h < HKV; h++)
                cpu_rmsnorm(q + QD + (size_t)h * hd, q + QD + (size_t)h * hd, w->k_norm, hd, c->norm_eps);
        if (c->v_norm) /* gemma4: each V head RMS-normed, no weight */
            for (int h = 0; h < HKV; h++) rms_unit(q + QD + KVL + (size_t)h * hd, hd, c->norm_eps);
        if (w->rope && cb->rope_neox) {
            rope_rotate_neox(q, cs, hd, H);
            rope_rotate_neox(q + QD, cs, hd, HKV);
        } else if (w->rope) {
            rope_rotate(q, cs, hd, H);
            rope_rotate(q + QD, cs, hd, HKV);
        }
        if (cb->q_scale) /* after RoPE, the queries only, where llama.cpp's graph scales them */
            for (int j = 0; j < QD; j++) q[j] *= cb->q_scale[i];
        if (c->attn_scale != 0) /* Granite's attention.scale in the place of 1 / sqrt(hd) */
            for (int j = 0; j < QD; j++) q[j] *= c->attn_scale * sqrtf((float)hd);
        const be_seq_view *v = &bt->seqs[bt->seq[i]];
        int p = bt->pos[i];
        float *dst = cb->kv + (size_t)v->blocks[p / bs] * cb->base.kv_block_floats +
                     (size_t)l * 2 * bs * KVD + (size_t)(p % bs) * KVD;
        memcpy(dst, q + QD, (size_t)KVL * sizeof(float));
        memcpy(dst + (size_t)bs * KVD, q + QD + KVL, (size_t)KVL * sizeof(float));
        if (KVL < KVD) { /* a narrower layer (gemma4): the row's rest zero, never read, but
                            defined for int8 compression's per-token scale */
            memset(dst + KVL, 0, (size_t)(KVD - KVL) * sizeof(float));
            memset(dst + (size_t)bs * KVD + KVL, 0, (size_t)(KVD - KVL) * sizeof(float));
        }
    }
    /* Parallel only when there is enough work to pay for waking threads: a
     * tiny model at batch 1 runs faster on one. Inside a token-split region
     * (threads == 1) no region at all: a nested one would still be set up. */
    size_t att_macs = 0; /* QK and AV: 2 q_dim multiply-adds a position */
    for (int i = i0; i < i1 && threads > 1; i++) att_macs += 2 * (size_t)QD * (size_t)(bt->pos[i] + 1);
    if (threads > 1 && M == 1 && cb->attn && att_macs >= PAR_MIN_HEAD_MACS &&
        attend_heads(cb, bt, l, i0, threads, s->mass_scale)) {
        /* done, split by heads */
    } else if (M > 1 && cpu_attn_chunk(cb, s, attend_batch_token) == 1) {
        /* done by tiles: each KV block read once per tile of queries */
    } else if (threads > 1 && att_macs >= PAR_MIN_ATT_MACS) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int i = i0; i < i1; i++) attend_batch_token(cb, bt, l, i, omp_get_thread_num(), s->mass_scale);
    } else {
        for (int i = i0; i < i1; i++) attend_batch_token(cb, bt, l, i, s->slot, s->mass_scale);
    }
    const cpu_mat *wo = &w->wo;
    if (c->resid_scale != 0) /* Granite's residual_scale, on wo's input (no output bias there) */
        for (size_t j = 0; j < (size_t)M * QD; j++) att_out[j] *= c->resid_scale;
    if (w->post_norm) { /* gemma4: the output normed, then added */
        cpu_matmul(cb, xb, D, att_out, i0, &wo, 1, M, 0, threads);
        for (int i = 0; i < M; i++) {
            float *o = xb + (size_t)i * D, *r = x + (size_t)i * D;
            cpu_rmsnorm(o, o, w->post_norm, D, c->norm_eps);
            for (int d = 0; d < D; d++) r[d] += o[d];
        }
    } else {
        cpu_matmul(cb, x, D, att_out, i0, &wo, 1, M, 1, threads);
    }
    if (w->bo)
        for (int i = 0; i < M; i++)
            for (int d = 0; d < D; d++) x[(size_t)i * D + d] += w->bo[d];
}

const cpu_layer_kind cpu_layer_attn = {.name = "attention", .prepare = attn_prepare, .forward = attn_forward};
