/* mv.c - executes KV plans in batches (mv.h).
 *
 * The moves are those kvpol.c made one block at a time before the plans
 * (demote, recall, compress), in the same order, with the same effect on
 * the pools and the tier; what is new is that f32 block copies wait in a
 * staging buffer and go through the backend `batch` at a time. */
#include "mv.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"
#include "tier.h"

#define MV_MAX_BATCH 16

struct mover {
    backend *b;
    kv_pool *pool, *pool8;
    tier *warm;
    int batch;
    size_t floats;     /* one f32 block */
    float *f32;        /* (batch, floats) blocks in transit */
    void *i8;          /* (kv8_block_bytes) one int8 block in transit */
    int32_t *blk, *lj; /* (batch) pool block and logical index of each staged block */
    int n;             /* staged */
};

int mv_batch_for(size_t bytes, size_t block_bytes) {
    size_t n = block_bytes ? bytes / block_bytes : 1;
    return n < 1 ? 1 : n > MV_MAX_BATCH ? MV_MAX_BATCH : (int)n;
}

size_t mv_staging_bytes(int batch, size_t block_bytes, size_t block8_bytes) {
    return (size_t)batch * (block_bytes + 2 * sizeof(int32_t)) + (block8_bytes ? block8_bytes : 1);
}

int mv_new(backend *b, kv_pool *pool, kv_pool *pool8, tier *warm, int batch, mover **out) {
    *out = NULL;
    if (!b || !pool || batch < 1 || batch > MV_MAX_BATCH) return CK_EINVAL;
    mover *m = calloc(1, sizeof *m);
    if (!m) return CK_ENOMEM;
    m->b = b;
    m->pool = pool;
    m->pool8 = pool8;
    m->warm = warm;
    m->batch = batch;
    m->floats = b->kv_block_floats;
    m->f32 = malloc((size_t)batch * m->floats * sizeof(float));
    m->i8 = malloc(b->kv8_block_bytes ? b->kv8_block_bytes : 1);
    m->blk = malloc((size_t)batch * sizeof *m->blk);
    m->lj = malloc((size_t)batch * sizeof *m->lj);
    if (!m->f32 || !m->i8 || !m->blk || !m->lj) {
        mv_free(m);
        return CK_ENOMEM;
    }
    *out = m;
    return CK_OK;
}

void mv_free(mover *m) {
    if (!m) return;
    free(m->f32);
    free(m->i8);
    free(m->blk);
    free(m->lj);
    free(m);
}

backend *mv_backend(const mover *m) { return m->b; }
kv_pool *mv_pool(const mover *m) { return m->pool; }
kv_pool *mv_pool8(const mover *m) { return m->pool8; }
tier *mv_tier(const mover *m) { return m->warm; }

void mv_poll(mover *m) {
    if (m->warm) tier_poll(m->warm);
}

static float *stage(mover *m, int i) { return m->f32 + (size_t)i * m->floats; }

static int read_staged(mover *m) {
    if (m->b->ops->kv_read_batch) return m->b->ops->kv_read_batch(m->b, m->blk, m->n, m->f32);
    for (int i = 0; i < m->n; i++) {
        int rc = m->b->ops->kv_read(m->b, m->blk[i], stage(m, i));
        if (rc) return rc;
    }
    return CK_OK;
}

static int write_staged(mover *m) {
    if (m->b->ops->kv_write_batch) return m->b->ops->kv_write_batch(m->b, m->blk, m->n, m->f32);
    for (int i = 0; i < m->n; i++) {
        int rc = m->b->ops->kv_write(m->b, m->blk[i], stage(m, i));
        if (rc) return rc;
    }
    return CK_OK;
}

static void lost(kv_seq *s, int j, mv_counts *c) {
    s->tier[j] = KV_TIER_DROPPED;
    s->slot[j] = KV_NONE;
    c->dropped++;
}

/* The staged f32 demotions: read them all, then into the tier in order. */
static int flush_demotes(mover *m, kv_seq *s, mv_counts *c) {
    if (!m->n) return CK_OK;
    int rc = read_staged(m);
    if (rc) {
        m->n = 0;
        return rc;
    }
    for (int i = 0; i < m->n; i++) {
        int j = m->lj[i];
        tier_put(m->warm, s, j, stage(m, i), kv_seq_block_tokens(s, j)); /* drops on failure */
        kv_pool_release(m->pool, m->blk[i]);
        s->hot[j] = KV_NONE;
        s->n_hot--;
        c->demoted++;
    }
    m->n = 0;
    return CK_OK;
}

static int demote(mover *m, kv_seq *s, int j, int drop, mv_counts *c) {
    if (s->hot8[j] != KV_NONE) {
        int b8 = s->hot8[j], rc;
        if ((rc = flush_demotes(m, s, c))) return rc; /* keep the tier's order */
        if ((rc = m->b->ops->kv8_read(m->b, b8, m->i8))) return rc;
        if (m->warm)
            tier_put_raw(m->warm, s, j, m->i8, kv_seq_block_tokens(s, j)); /* drops on failure */
        else
            lost(s, j, c);
        kv_pool_release(m->pool8, b8);
        s->hot8[j] = KV_NONE;
        s->n_hot8--;
        c->demoted++;
        return CK_OK;
    }
    if (drop || !m->warm) {
        s->tier[j] = KV_TIER_DROPPED;
        c->dropped++;
        kv_pool_release(m->pool, s->hot[j]);
        s->hot[j] = KV_NONE;
        s->n_hot--;
        c->demoted++;
        return CK_OK;
    }
    m->blk[m->n] = s->hot[j];
    m->lj[m->n++] = j;
    return m->n == m->batch ? flush_demotes(m, s, c) : CK_OK;
}

/* The staged f32 recalls: their slots were taken; write them all. */
static void flush_recalls(mover *m, kv_seq *s, mv_counts *c) {
    if (!m->n) return;
    int rc = write_staged(m);
    for (int i = 0; i < m->n; i++) {
        int j = m->lj[i];
        if (rc) {
            kv_pool_release(m->pool, m->blk[i]);
            lost(s, j, c);
            continue;
        }
        s->hot[j] = m->blk[i];
        s->n_hot++;
        s->tier[j] = KV_TIER_HOT;
        s->slot[j] = KV_NONE;
        c->recalled++;
    }
    m->n = 0;
}

/* Warm -> hot; f32 blocks are staged (flush_recalls finishes them). */
static int recall(mover *m, kv_seq *s, int j, int as_int8, mv_counts *c) {
    if (as_int8) {
        int b8 = kv_pool_alloc(m->pool8, s->id, j);
        if (b8 < 0) return b8;
        if (tier_take_raw(m->warm, s->slot[j], m->i8) || m->b->ops->kv8_write(m->b, b8, m->i8)) {
            kv_pool_release(m->pool8, b8);
            lost(s, j, c);
            return CK_OK;
        }
        s->hot8[j] = b8;
        s->n_hot8++;
        s->tier[j] = KV_TIER_HOT;
        s->slot[j] = KV_NONE;
        c->recalled++;
        return CK_OK;
    }
    int blk = kv_pool_alloc(m->pool, s->id, j);
    if (blk < 0) return blk;
    if (tier_take(m->warm, s->slot[j], stage(m, m->n))) {
        kv_pool_release(m->pool, blk);
        lost(s, j, c);
        return CK_OK;
    }
    m->blk[m->n] = blk;
    m->lj[m->n++] = j;
    if (m->n == m->batch) flush_recalls(m, s, c);
    return CK_OK;
}

/* f32 hot -> int8 hot. A backend failure leaves the block f32 (ignored, as
 * before: the next plan tries again). */
static int compress(mover *m, kv_seq *s, int j, mv_counts *c) {
    int b8 = kv_pool_alloc(m->pool8, s->id, j);
    if (b8 < 0) return b8;
    if (m->b->ops->kv_compress(m->b, s->hot[j], kv_seq_block_tokens(s, j), b8)) {
        kv_pool_release(m->pool8, b8);
        return CK_OK;
    }
    kv_pool_release(m->pool, s->hot[j]);
    s->hot[j] = KV_NONE;
    s->n_hot--;
    s->hot8[j] = b8;
    s->n_hot8++;
    c->compressed++;
    return CK_OK;
}

int mv_run(mover *m, kv_seq *s, const kv_plan *p, mv_counts *c) {
    int rc;
    m->n = 0;
    for (int i = 0; i < p->n_demote; i++)
        if ((rc = demote(m, s, p->demote[i], p->drop, c))) return rc;
    if ((rc = flush_demotes(m, s, c))) return rc;
    for (int i = 0; i < p->n_up; i++) {
        int j = p->up[i];
        switch (p->up_op[i]) {
        case MV_RECALL:
        case MV_RECALL8: rc = recall(m, s, j, p->up_op[i] == MV_RECALL8, c); break;
        case MV_FETCH:
            tier_fetch(m->warm, s, j);
            rc = CK_OK;
            break; /* arrives warm in a later step */
        case MV_COMPRESS: rc = compress(m, s, j, c); break;
        default: rc = CK_OK; break;
        }
        if (rc == CK_ENOSPACE) break; /* pool full: the next step tries again */
    }
    flush_recalls(m, s, c);
    return CK_OK;
}

int mv_recall(mover *m, kv_seq *s, int j, int as_int8, mv_counts *c) {
    mv_counts none = {0};
    m->n = 0;
    int rc = recall(m, s, j, as_int8, c ? c : &none);
    flush_recalls(m, s, c ? c : &none);
    return rc;
}
