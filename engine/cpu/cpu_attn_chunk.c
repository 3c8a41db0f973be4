/* cpu_attn_chunk.c - a prefill chunk's attention by tiles (cpu_attn_chunk.h).
 *
 * Why tiles of at most CHUNK_TILE queries, not the whole run at once: each
 * (row, block) keeps two floats for the mass (cpu_attn_tile.h), and a tile
 * of 64 tokens over an 8192-token context fits the scratch slot every
 * thread already has (cb->scores: n_heads x max_ctx floats); the KV is then
 * read once per 64 queries instead of once per query. */
#include <omp.h>
#include <stdatomic.h>

#include "cpu_attn_chunk.h"
#include "cpu_attn_tile.h"

#define CHUNK_TILE 64

/* The tokens [i0, *i1) of one sequence starting at i0, their lowest and
 * highest position. */
static void run_of(const be_batch *bt, int i0, int i_end, int *i1, int *pmin, int *pmax) {
    int i = i0;
    *pmin = *pmax = bt->pos[i0];
    while (i < i_end && bt->seq[i] == bt->seq[i0]) {
        *pmin = bt->pos[i] < *pmin ? bt->pos[i] : *pmin;
        *pmax = bt->pos[i] > *pmax ? bt->pos[i] : *pmax;
        i++;
    }
    *i1 = i;
}

/* The run's blocks (those listed for its sequence that a query of it may
 * read, from the window's start at pmin to pmax's block) into blk / blk_j
 * when they are not NULL. Returns their count, or -1 when one is not f32
 * or a query's own block is not listed. */
static int run_blocks(const cpu_backend *cb, int l, const be_batch *bt, int i0, int i1, int pmin, int pmax,
                      const float **blk, int *blk_j) {
    const int q = bt->seq[i0], bs = cb->base.opt.block_size, kvd = cb->kv_dim,
              window = cb->layers[l].attn.window;
    const be_seq_view *v = &bt->seqs[q];
    const int32_t *list = cb->hot_list + (size_t)q * cb->max_blocks;
    const int first = window > 0 && pmin - window + 1 > 0 ? pmin - window + 1 : 0;
    for (int i = i0; i < i1; i++) {
        const int j = bt->pos[i] / bs;
        if (j >= v->n_blocks || j >= cb->max_blocks || v->blocks[j] < 0) return -1;
    }
    int nb = 0;
    for (int li = 0; li < cb->n_list[q] && list[li] <= pmax / bs; li++) {
        const int j = list[li];
        if ((j + 1) * bs <= first) continue; /* wholly before every query's window */
        if (v->blocks[j] < 0) return -1;     /* an int8 block: the token path reads those */
        if (blk) {
            blk[nb] = cb->kv + (size_t)v->blocks[j] * cb->base.kv_block_floats + (size_t)l * 2 * bs * kvd;
            blk_j[nb] = j;
        }
        nb++;
    }
    return nb;
}

/* Queries a tile takes so that its scratch and mass fit a slot; 0: none fit. */
static int tile_tokens(const cpu_backend *cb, int nb, int mass) {
    for (int t = CHUNK_TILE; t >= 1; t /= 2)
        if (attn_tile_scratch(&cb->ashape, t * cb->ashape.gqa, nb, mass) + (size_t)nb <=
            cb->scores_per_thread)
            return t;
    return 0;
}

typedef struct chunk_job {
    const cpu_backend *cb;
    attn_tile a;
    float *v_mass; /* the sequence's, or NULL */
    float mass_scale;
    int i0, tq, n_tiles;
    _Atomic int bad;
} chunk_job;

/* Item it of a run: KV head it / n_tiles, tile it % n_tiles. */
static void chunk_item(chunk_job *j, int it, int slot) {
    const cpu_backend *cb = j->cb;
    const int g = it / j->n_tiles, t0 = j->i0 + (it % j->n_tiles) * j->tq;
    const int t1 = t0 + j->tq < j->a.n_tok ? t0 + j->tq : j->a.n_tok;
    float *sc = cb->scores + (size_t)slot * cb->scores_per_thread, *mass = j->v_mass ? sc : NULL;
    const size_t off = j->v_mass ? (size_t)j->a.n_blk : 0;
    if (attn_tile_run(cb->gk, cb->isa, &j->a, g, t0, t1, mass, sc + off, cb->scores_per_thread - off)) {
        atomic_store(&j->bad, 1);
        return;
    }
    if (mass)
        for (int b = 0; b < j->a.n_blk; b++) {
#pragma omp atomic
            j->v_mass[j->a.blk_j[b]] += mass[b] * j->mass_scale;
        }
}

/* Whether token i of the span is a run of its own (a decode step's token). */
static int alone(const be_batch *bt, const cpu_span *s, int i) {
    return (i == s->i0 || bt->seq[i - 1] != bt->seq[i]) && (i + 1 == s->i1 || bt->seq[i + 1] != bt->seq[i]);
}

int cpu_attn_chunk(cpu_backend *cb, const cpu_span *s, cpu_attn_token_fn token) {
    const be_batch *bt = s->bt;
    const int l = s->l;
    if (!cb->attn || s->i1 - s->i0 < 2) return 0;
    /* every run first: a refusal must come before anything is written */
    int tiled = 0;
    for (int i0 = s->i0, i1, pmin, pmax; i0 < s->i1; i0 = i1) {
        run_of(bt, i0, s->i1, &i1, &pmin, &pmax);
        if (i1 - i0 < 2) continue;
        const int nb = run_blocks(cb, l, bt, i0, i1, pmin, pmax, NULL, NULL);
        if (nb < 1 || !tile_tokens(cb, nb, bt->seqs[bt->seq[i0]].mass != NULL)) return 0;
        tiled = 1;
    }
    if (!tiled) return 0; /* a decode batch: the token path as it is */
    /* the lone tokens (decode steps batched with a prefill chunk) by the
     * token path, split over the threads as attn_forward splits a batch */
    size_t macs = 0;
    for (int i = s->i0; i < s->i1; i++)
        if (alone(bt, s, i)) macs += 2 * (size_t)cb->q_dim * (size_t)(bt->pos[i] + 1);
    if (s->threads > 1 && macs >= PAR_MIN_ATT_MACS) {
#pragma omp parallel for num_threads(s->threads) schedule(dynamic, 1)
        for (int i = s->i0; i < s->i1; i++)
            if (alone(bt, s, i)) token(cb, bt, l, i, omp_get_thread_num(), s->mass_scale);
    } else {
        for (int i = s->i0; i < s->i1; i++)
            if (alone(bt, s, i)) token(cb, bt, l, i, s->slot, s->mass_scale);
    }
    /* the span's slot: spans of a token split run at once, each with its own */
    const float **blk = cb->att_blk + (size_t)s->slot * cb->max_blocks;
    int *blk_j = cb->att_rows + (size_t)s->slot * cb->max_blocks;
    const int n_kv = cb->ashape.n_heads / cb->ashape.gqa;
    for (int i0 = s->i0, i1, pmin, pmax; i0 < s->i1; i0 = i1) {
        run_of(bt, i0, s->i1, &i1, &pmin, &pmax);
        if (i1 - i0 < 2) continue; /* done above */
        const be_seq_view *v = &bt->seqs[bt->seq[i0]];
        const int nb = run_blocks(cb, l, bt, i0, i1, pmin, pmax, blk, blk_j);
        attn_shape sh = cb->ashape;
        sh.sinks = cb->layers[l].attn.sinks;
        chunk_job j = {.cb = cb, .v_mass = v->mass, .mass_scale = s->mass_scale, .i0 = 0};
        j.a = (attn_tile){sh,
                          cb->layers[l].attn.window,
                          cb->qkv + (size_t)i0 * cb->qkv_dim,
                          (size_t)cb->qkv_dim,
                          bt->pos + i0,
                          i1 - i0,
                          blk,
                          blk_j,
                          nb,
                          cb->att_out + (size_t)i0 * cb->q_dim,
                          (size_t)cb->q_dim};
        j.tq = tile_tokens(cb, nb, v->mass != NULL);
        j.n_tiles = (i1 - i0 + j.tq - 1) / j.tq;
        const int n_items = n_kv * j.n_tiles;
        size_t macs = 0; /* QK and AV, as attn_forward counts them */
        for (int i = i0; i < i1; i++) macs += 2 * (size_t)cb->q_dim * (size_t)(bt->pos[i] + 1);
        if (s->threads > 1 && n_items > 1 && macs >= PAR_MIN_ATT_MACS) {
#pragma omp parallel for num_threads(s->threads) schedule(dynamic, 1)
            for (int it = 0; it < n_items; it++) chunk_item(&j, it, omp_get_thread_num());
        } else {
            for (int it = 0; it < n_items; it++) chunk_item(&j, it, s->slot);
        }
        /* attn_tile_run refuses only what the checks above exclude */
        if (atomic_load(&j.bad)) return -1;
    }
    return 1;
}
