/* cpu_layer_shortconv.c - the short-convolution layer kind (cpu_layer.h),
 * lfm2's (llama.cpp's build_shortconv_block):
 *
 *   B, C, xp = in_proj . norm(x)               (dim each, in that order)
 *   u_t      = B_t * xp_t                      (per channel)
 *   conv_t   = sum_k kern[k] u_{t - (L-1) + k} (k = 0..L-1, the last tap on u_t)
 *   x       += out_proj . (C_t * conv_t)
 *
 * with L = conv_l taps. The L - 1 inputs before a sequence's first token of
 * a batch come from its recurrent state slot (be_seq_view.state), and after
 * the batch the slot holds its last L - 1 inputs: a prefill split into
 * chunks and one token a step compute the same thing. A sequence whose
 * batch starts at position 0 starts from zeros (llama.cpp's fresh cell).
 *
 * The convolution runs token by token in batch order on the calling thread
 * (L multiply-adds a channel: nothing beside the two products); the
 * products run on the team as every other kind's. Sums in float, taps in
 * order, as ggml's ssm_conv. */
#include <string.h>

#include "ck_err.h"
#include "cpu_layer.h"

static float *slot_state(const cpu_backend *cb, int slot, const cpu_conv_w *w) {
    return cb->state + (size_t)slot * cb->state_floats + (size_t)w->state_off;
}

int cpu_shortconv_check(cpu_backend *cb, const be_batch *bt) {
    if (!cb->state) return CK_OK;
    const int n_slots = cb->base.opt.n_state_slots > 0 ? cb->base.opt.n_state_slots : 1;
    int32_t *next = cb->seq_last; /* per sequence: the position its next token must have */
    for (int q = 0; q < bt->n_seqs; q++) {
        const int s = bt->seqs[q].state;
        if (s < 0 || s >= n_slots) return CK_EINVAL;
        for (int r = 0; r < q; r++)
            if (bt->seqs[r].state == s) return CK_EINVAL;
        next[q] = -1;
    }
    for (int i = 0; i < bt->n_tokens; i++) {
        const int q = bt->seq[i], p = bt->pos[i];
        if (next[q] < 0) { /* the sequence's first token: a fresh start, or the slot's next */
            if (p != 0 && p != cb->state_pos[bt->seqs[q].state]) return CK_EINVAL;
        } else if (p != next[q]) {
            return CK_EINVAL;
        }
        next[q] = p + 1;
    }
    return CK_OK;
}

void cpu_state_prepare(cpu_backend *cb, const be_batch *bt) {
    if (!cb->state) return;
    int32_t *seen = cb->seq_last;
    for (int q = 0; q < bt->n_seqs; q++) seen[q] = 0;
    for (int i = 0; i < bt->n_tokens; i++) {
        const int q = bt->seq[i], slot = bt->seqs[q].state;
        if (!seen[q]++ && bt->pos[i] == 0)
            memset(cb->state + (size_t)slot * cb->state_floats, 0, cb->state_floats * sizeof(float));
        cb->state_pos[slot] = bt->pos[i] + 1;
    }
}

static void shortconv_forward(cpu_backend *cb, const cpu_span *s) {
    const cpu_conv_w *w = &cb->layers[s->l].conv;
    if (!w->kern) return; /* an attention layer */
    const model_config *c = &cb->base.m->cfg;
    const be_batch *bt = s->bt;
    const int D = c->dim, L = c->conv_l, i0 = s->i0, M = s->i1 - s->i0;
    float *x = cb->x + (size_t)i0 * D, *xb = cb->xb + (size_t)i0 * D;
    float *bcx = cb->conv_bcx + (size_t)i0 * 3 * D, *y = cb->conv_y + (size_t)i0 * D;
    for (int i = 0; i < M; i++) cpu_rmsnorm(xb + (size_t)i * D, x + (size_t)i * D, w->norm, D, c->norm_eps);
    const cpu_mat *in = &w->in, *out = &w->out;
    cpu_matmul(cb, bcx, 3 * D, xb, i0, &in, 1, M, 0, s->threads);
    for (int i = 0; i < M; i++) {
        const float *B = bcx + (size_t)i * 3 * D, *C = B + D, *xp = C + D;
        float *st = slot_state(cb, bt->seqs[bt->seq[i0 + i]].state, w); /* (L - 1, D) */
        float *yi = y + (size_t)i * D;
        for (int d = 0; d < D; d++) {
            const float *k = w->kern + (size_t)d * L, u = B[d] * xp[d];
            float acc = 0.0f;
            for (int j = 0; j < L - 1; j++) acc += st[(size_t)j * D + d] * k[j];
            acc += u * k[L - 1];
            yi[d] = C[d] * acc;
            for (int j = 0; j + 1 < L - 1; j++) st[(size_t)j * D + d] = st[(size_t)(j + 1) * D + d];
            st[(size_t)(L - 2) * D + d] = u;
        }
    }
    cpu_matmul(cb, x, D, y, i0, &out, 1, M, 1, s->threads);
}

const cpu_layer_kind cpu_layer_shortconv = {
    .name = "shortconv", .prepare = cpu_state_prepare, .forward = shortconv_forward};
