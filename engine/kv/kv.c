/* kv.c - block pool and per-sequence block tables (kv.h). */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

int kv_pool_init(kv_pool *p, int n_blocks, int block_size) {
    memset(p, 0, sizeof *p);
    if (n_blocks < 0 || block_size <= 0) return CK_EINVAL;
    size_t n = n_blocks ? (size_t)n_blocks : 1;
    p->free_stack = malloc(n * sizeof *p->free_stack);
    p->owner = malloc(n * sizeof *p->owner);
    p->logical = malloc(n * sizeof *p->logical);
    if (!p->free_stack || !p->owner || !p->logical) {
        kv_pool_free(p);
        return CK_ENOMEM;
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* Low ids on top: the first blocks handed out are the first in memory. */
    for (int i = 0; i < n_blocks; i++) {
        p->free_stack[i] = n_blocks - 1 - i;
        p->owner[i] = KV_NONE;
        p->logical[i] = KV_NONE;
    }
    p->n_free = n_blocks;
    return CK_OK;
}

void kv_pool_free(kv_pool *p) {
    free(p->free_stack);
    free(p->owner);
    free(p->logical);
    memset(p, 0, sizeof *p);
}

int kv_pool_alloc(kv_pool *p, int owner, int logical) {
    if (p->n_free == 0) return CK_ENOSPACE;
    int b = p->free_stack[--p->n_free];
    p->owner[b] = owner;
    p->logical[b] = logical;
    return b;
}

int kv_pool_release(kv_pool *p, int block) {
    if (block < 0 || block >= p->n_blocks || p->owner[block] == KV_NONE) return CK_EINVAL;
    p->owner[block] = KV_NONE;
    p->logical[block] = KV_NONE;
    p->free_stack[p->n_free++] = block;
    return CK_OK;
}

int kv_seq_init(kv_seq *s, int id, int max_tokens, int block_size) {
    memset(s, 0, sizeof *s);
    if (max_tokens <= 0 || block_size <= 0) return CK_EINVAL;
    int mb = (max_tokens + block_size - 1) / block_size;
    s->id = id;
    s->block_size = block_size;
    s->max_blocks = mb;
    s->hot = malloc((size_t)mb * sizeof *s->hot);
    s->hot8 = malloc((size_t)mb * sizeof *s->hot8);
    s->tier = calloc((size_t)mb, sizeof *s->tier);
    s->slot = malloc((size_t)mb * sizeof *s->slot);
    s->mass = calloc((size_t)mb, sizeof *s->mass);
    s->score = calloc((size_t)mb, sizeof *s->score);
    s->last_use = calloc((size_t)mb, sizeof *s->last_use);
    if (!s->hot || !s->hot8 || !s->tier || !s->slot || !s->mass || !s->score || !s->last_use) {
        kv_seq_free(s);
        return CK_ENOMEM;
    }
    for (int j = 0; j < mb; j++) s->hot[j] = s->hot8[j] = s->slot[j] = KV_NONE;
    return CK_OK;
}

void kv_seq_free(kv_seq *s) {
    free(s->hot);
    free(s->hot8);
    free(s->tier);
    free(s->slot);
    free(s->mass);
    free(s->score);
    free(s->last_use);
    memset(s, 0, sizeof *s);
}

int kv_seq_blocks_needed(const kv_seq *s, int n) {
    int first = s->n_tokens / s->block_size;
    int last = (s->n_tokens + n - 1) / s->block_size;
    int need = 0;
    for (int j = first; j <= last && j < s->max_blocks; j++)
        if (s->hot[j] == KV_NONE) need++;
    return n > 0 ? need : 0;
}

int kv_seq_reserve(kv_seq *s, kv_pool *p, int n) {
    if (n <= 0) return CK_OK;
    if (s->n_tokens + n > s->max_blocks * s->block_size) return CK_ETOOLONG;
    int first = s->n_tokens / s->block_size;
    int last = (s->n_tokens + n - 1) / s->block_size;
    for (int j = first; j <= last; j++) {
        if (s->hot[j] != KV_NONE) continue;
        /* A partly written block that left the hot set cannot take new
         * positions: the caller (the policy) recalls it first. */
        if (s->tier[j] != KV_TIER_EMPTY) return CK_ESTATE;
        int b = kv_pool_alloc(p, s->id, j);
        if (b < 0) return b;
        s->hot[j] = b;
        s->tier[j] = KV_TIER_HOT;
        s->score[j] = 0;
        s->mass[j] = 0;
        s->n_hot++;
        if (j + 1 > s->n_blocks) s->n_blocks = j + 1;
    }
    return CK_OK;
}

void kv_seq_commit(kv_seq *s, int n) {
    s->n_tokens += n;
    int nb = (s->n_tokens + s->block_size - 1) / s->block_size;
    if (nb > s->n_blocks) s->n_blocks = nb;
}

int kv_seq_hot_tokens(const kv_seq *s) {
    int t = 0;
    for (int j = 0; j < s->n_blocks; j++)
        if (s->hot[j] != KV_NONE || s->hot8[j] != KV_NONE) t += kv_seq_block_tokens(s, j);
    return t;
}

int kv_seq_hot8_tokens(const kv_seq *s) {
    int t = 0;
    if (!s->n_hot8) return 0;
    for (int j = 0; j < s->n_blocks; j++)
        if (s->hot8[j] != KV_NONE) t += kv_seq_block_tokens(s, j);
    return t;
}

void kv_seq_truncate(kv_seq *s, kv_pool *p, int n_tokens) {
    if (n_tokens < 0) n_tokens = 0;
    if (n_tokens >= s->n_tokens) return;
    int keep = (n_tokens + s->block_size - 1) / s->block_size;
    for (int j = keep; j < s->n_blocks; j++) {
        if (s->hot[j] != KV_NONE) {
            kv_pool_release(p, s->hot[j]);
            s->n_hot--;
        }
        s->hot[j] = s->hot8[j] = KV_NONE;
        s->slot[j] = KV_NONE;
        s->tier[j] = KV_TIER_EMPTY;
        s->mass[j] = s->score[j] = 0;
        s->last_use[j] = 0;
    }
    s->n_blocks = keep;
    s->n_tokens = n_tokens;
}

void kv_seq_reset(kv_seq *s, kv_pool *p) {
    /* Truncating to 0 needs n_tokens > 0; a reserved-but-uncommitted block
     * (n_tokens == 0) is released here too. */
    for (int j = 0; j < s->max_blocks; j++) {
        if (s->hot[j] != KV_NONE) kv_pool_release(p, s->hot[j]);
        s->hot[j] = s->hot8[j] = s->slot[j] = KV_NONE;
        s->tier[j] = KV_TIER_EMPTY;
        s->mass[j] = s->score[j] = 0;
        s->last_use[j] = 0;
    }
    s->n_blocks = s->n_tokens = s->n_hot = s->n_hot8 = 0;
}
