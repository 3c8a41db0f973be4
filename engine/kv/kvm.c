/* kvm.c - the KV manager (kvm.h): pools, tiers, movers; placement,
 * commitments, park/resume, prefix blocks in and out. */
#include "kvm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"
#include "mv.h"
#include "pfx.h"
#include "tier.h"

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

size_t kvm_host_bytes(size_t block_bytes, size_t block8_bytes, size_t staging_bytes) {
    int batch = mv_batch_for(staging_bytes, block_bytes);
    return block_bytes + (block8_bytes ? block8_bytes : 1) +
           2 * mv_staging_bytes(batch, block_bytes, block8_bytes);
}

int kvm_init(kvm *k, const kvm_config *c, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    k->b = c->b;
    k->bs = c->block_size;
    int rc;
    if ((rc = kv_pool_init(&k->pool, c->n_blocks, c->block_size)) ||
        (rc = kv_pool_init(&k->pool8, c->n_blocks, c->block_size))) {
        snprintf(err, errlen, "KV pool: %s", ck_strerror(rc));
        return rc;
    }
    tier_config tc;
    tier_config_default(&tc, c->b);
    if (c->warm_budget_bytes) tc.budget_bytes = c->warm_budget_bytes;
    k->warm_budget_bytes = tc.budget_bytes;
    tc.cold = c->cold;
    tc.max_cold = c->cold ? tc.max_cold : 0;
    tc.instance = c->instance & ~(uint64_t)1;
    if ((rc = tier_new(&tc, &k->warm))) {
        snprintf(err, errlen, "warm tier: %s", ck_strerror(rc));
        return rc;
    }
    /* The int8 tier is built here whatever the default policy is: any
     * request may name a compressing policy, and memory is sized once. */
    tc.compress = 1;
    tc.instance |= 1;
    if ((rc = tier_new(&tc, &k->warm8))) {
        snprintf(err, errlen, "int8 warm tier: %s", ck_strerror(rc));
        return rc;
    }
    const backend *b = c->b;
    int batch = mv_batch_for(c->staging_bytes, b->kv_block_floats * sizeof(float));
    k->blockbuf = malloc(b->kv_block_floats * sizeof(float));
    k->bytebuf = malloc(b->kv8_block_bytes ? b->kv8_block_bytes : 1);
    if (!k->blockbuf || !k->bytebuf || (rc = mv_new(c->b, &k->pool, NULL, k->warm, batch, &k->mv)) ||
        (rc = mv_new(c->b, &k->pool, &k->pool8, k->warm8, batch, &k->mv8))) {
        snprintf(err, errlen, "KV movers: %s", ck_strerror(rc ? rc : CK_ENOMEM));
        return rc ? rc : CK_ENOMEM;
    }
    return CK_OK;
}

void kvm_free(kvm *k) {
    mv_free(k->mv);
    mv_free(k->mv8);
    tier_free(k->warm);
    tier_free(k->warm8);
    kv_pool_free(&k->pool);
    kv_pool_free(&k->pool8);
    free(k->blockbuf);
    free(k->bytebuf);
    memset(k, 0, sizeof *k);
}

int kvm_policy_new(kvm *k, const kvpol_config *pc, kvpol **out) {
    return kvpol_new_mv(pc, pc->cache_compression ? k->mv8 : k->mv, out);
}

int kvm_commitment(const kvm *k, const kvpol_config *pc, int n_prompt, int limit, int n_hist, int prefilled) {
    const int bs = k->bs;
    int full = ceil_div(n_prompt + limit - 1 > 0 ? n_prompt + limit - 1 : 1, bs);
    int steady = kvpol_steady_blocks(pc, bs, full);
    if (!prefilled) {
        int pre = ceil_div(n_hist, bs) + 1;
        if (pre > steady) steady = pre;
    }
    return steady < full ? steady : full;
}

/* ============================================================ placement */

int kvm_need(const kvm *k, const kv_seq *s, int n) {
    (void)k;
    return kv_seq_blocks_needed(s, n);
}

int kvm_fit_tokens(const kvm *k, const kv_seq *s) {
    int in_block = s->n_tokens % k->bs, j = s->n_tokens / k->bs;
    int room_here = in_block && j < s->max_blocks && s->hot[j] != KV_NONE ? k->bs - in_block : 0;
    return room_here + k->pool.n_free * k->bs;
}

int kvm_place(kvm *k, kv_seq *s, int n) {
    int rc = kv_seq_reserve(s, &k->pool, n);
    if (rc == CK_ENOSPACE) return KVM_NO_ROOM;
    return rc ? rc : KVM_PLACED;
}

void kvm_shrink(kvm *k, kvpol *pol, kv_seq *s, int blocks) {
    (void)k;
    kvpol_make_room(pol, s, blocks);
}

size_t kvm_hot_bytes(const kvm *k) {
    return (size_t)kv_pool_used(&k->pool) * k->b->kv_block_floats * sizeof(float) +
           (size_t)kv_pool_used(&k->pool8) * k->b->kv8_block_bytes;
}

/* ========================================================== park/resume
 * moved[j]: 0 stayed, 1 int8 block in the int8 tier (raw bytes), 2 f32
 * block in the f32 tier. */

enum { MOVED_NONE = 0, MOVED_INT8 = 1, MOVED_F32 = 2 };

int kvm_park(kvm *k, kv_seq *s, uint8_t *moved) {
    const int written = (s->n_tokens + s->block_size - 1) / s->block_size;
    backend *b = k->b;
    memset(moved, 0, (size_t)s->max_blocks);
    int n8 = 0, n32 = 0;
    for (int j = 0; j < written; j++) {
        n8 += s->hot8[j] != KV_NONE;
        n32 += s->hot8[j] == KV_NONE && s->hot[j] != KV_NONE;
    }
    /* Room: free slots, or ones the tier can spill to the cold store. */
    if (n8 && tier_room(k->warm8) < n8) return CK_ENOSPACE;
    if (n32 && tier_room(k->warm) < n32) return CK_ENOSPACE;
    /* Blocks reserved but not yet written hold nothing: back to the pool. */
    for (int j = written; j < s->n_blocks; j++) {
        if (s->hot[j] == KV_NONE) continue;
        kv_pool_release(&k->pool, s->hot[j]);
        s->hot[j] = KV_NONE;
        s->tier[j] = KV_TIER_EMPTY;
        s->n_hot--;
    }
    if (s->n_blocks > written) s->n_blocks = written;
    for (int j = 0; j < written; j++) {
        int rc;
        if (s->hot8[j] != KV_NONE) {
            int b8 = s->hot8[j];
            if ((rc = b->ops->kv8_read(b, b8, k->bytebuf))) return rc;
            if ((rc = tier_put_raw(k->warm8, s, j, k->bytebuf, kv_seq_block_tokens(s, j)))) return rc;
            kv_pool_release(&k->pool8, b8);
            s->hot8[j] = KV_NONE;
            s->n_hot8--;
            moved[j] = MOVED_INT8;
        } else if (s->hot[j] != KV_NONE) {
            int blk = s->hot[j];
            if ((rc = b->ops->kv_read(b, blk, k->blockbuf))) return rc;
            if ((rc = tier_put(k->warm, s, j, k->blockbuf, kv_seq_block_tokens(s, j)))) return rc;
            kv_pool_release(&k->pool, blk);
            s->hot[j] = KV_NONE;
            s->n_hot--;
            moved[j] = MOVED_F32;
        }
    }
    return CK_OK;
}

int kvm_resume_need(const kvm *k, const kv_seq *s, const uint8_t *moved, int n) {
    int f32 = 0, extra = 0;
    for (int j = 0; j < s->n_blocks; j++) f32 += moved[j] == MOVED_F32;
    for (int j = s->n_tokens / k->bs; j <= (s->n_tokens + n - 1) / k->bs && j < s->max_blocks; j++)
        extra += !moved[j] && s->hot[j] == KV_NONE;
    return f32 + extra;
}

int kvm_resume(kvm *k, kv_seq *s, uint8_t *moved) {
    /* Block by block, as each is warm and a pool block is free: a sequence
     * longer than the warm tier comes back from the cold store a part at a
     * time (waiting for all of it to be warm at once could never end). The
     * policy's statistics do not count these moves (no counts passed). */
    int busy = 0, lost_any = 0, rc = CK_OK;
    for (int j = 0; j < s->n_blocks && !rc; j++) {
        if (!moved[j]) continue;
        tier *t = moved[j] == MOVED_INT8 ? k->warm8 : k->warm;
        if (s->tier[j] == KV_TIER_COLD) {
            if (tier_fetch(t, s, j))
                lost_any = 1, moved[j] = MOVED_NONE;
            else
                busy = 1; /* arrives warm during a later tier_poll */
            continue;
        }
        if (s->tier[j] != KV_TIER_WARM) {
            lost_any = 1;
            moved[j] = MOVED_NONE;
            continue;
        }
        kv_pool *pool = moved[j] == MOVED_INT8 ? mv_pool8(k->mv8) : &k->pool;
        if (!pool || !pool->n_free) {
            busy = 1;
            continue;
        }
        rc = mv_recall(moved[j] == MOVED_INT8 ? k->mv8 : k->mv, s, j, moved[j] == MOVED_INT8, NULL);
        lost_any |= !rc && s->tier[j] != KV_TIER_HOT;
        moved[j] = MOVED_NONE;
    }
    if (rc) return rc;
    if (lost_any) return CK_ESTATE;
    return busy ? CK_EBUSY : CK_OK;
}

void kvm_release(kvm *k, kvpol *pol, kv_seq *s, int reset) {
    /* Parked f32 blocks of a policy on the int8 tier are in the f32 tier:
     * the policy only knows its own. */
    if (pol && kvpol_mover(pol) != k->mv && s->hot) tier_release_seq(k->warm, s);
    if (pol) kvpol_end(pol, s);
    if (reset && s->hot) kv_seq_reset(s, &k->pool);
}

/* ========================================================= prefix blocks */

int kvm_attach_prefix(kvm *k, pfx *p, kv_seq *s, const uint64_t *names, int n_blocks) {
    for (int j = 0; j < n_blocks && p; j++) {
        int tier, slot = pfx_find(p, names[j], &tier), rc;
        if (slot < 0 || kv_seq_reserve(s, &k->pool, k->bs)) break;
        if ((rc = k->b->ops->kv_write(k->b, s->hot[j], pfx_block(p, slot)))) return rc;
        kv_seq_commit(s, k->bs);
    }
    return CK_OK;
}

void kvm_publish(kvm *k, pfx *p, const kv_seq *s, const uint64_t *names, int n_blocks, int flags) {
    for (int j = 0; j < n_blocks; j++) {
        int blk = s->hot[j];
        if (blk == KV_NONE) continue;
        if (!pfx_has(p, names[j]) && k->b->ops->kv_read(k->b, blk, k->blockbuf)) continue;
        pfx_insert(p, names[j], j, k->blockbuf, flags);
    }
}
