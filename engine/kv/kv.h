/* kv.h - the paged KV cache: a pool of fixed-size blocks and per-sequence
 * block tables.
 *
 * Storage and bookkeeping are apart. The bytes of block b (every layer's K
 * and V for block_size positions) live in a backend (backend.h); this module
 * only keeps who owns which block and, per sequence, where each logical block
 * is: hot (a pool block the backend attends over), warm (tier.h), cold, or
 * dropped. Block layout in the backend, in floats:
 *     block b, layer l:  K[block_size][kv_dim] then V[block_size][kv_dim]
 * so one block is n_layers * 2 * block_size * kv_dim floats, contiguous.
 *
 * Logical block j of a sequence covers positions [j*bs, (j+1)*bs). Positions
 * are absolute: a block that leaves and comes back keeps its RoPE positions.
 *
 * Ownership: kv_pool and kv_seq own their arrays; *_init allocates them all
 * (nothing is allocated per token) and *_free releases them. Not
 * thread-safe: the engine thread owns both. */
#ifndef CK_KV_H
#define CK_KV_H
#include <stdint.h>

#define KV_NONE (-1)

/* The block size to use when none is configured: 16 tokens, as vLLM, for
 * contexts of 2048 and more; smaller for short-context models so that a
 * context still has at least 128 blocks for a policy to choose among
 * (stories260K's 512 positions: 4-token blocks). */
static inline int kv_default_block_size(int ctx) {
    int bs = 16;
    while (bs > 4 && ctx / bs < 128) bs /= 2;
    return bs;
}

enum {
    KV_TIER_EMPTY = 0,  /* not yet written */
    KV_TIER_HOT = 1,    /* in a pool block, visible to attention */
    KV_TIER_WARM = 2,   /* in host memory (tier.h), invisible until recalled */
    KV_TIER_COLD = 3,   /* in the cold store, invisible until recalled */
    KV_TIER_DROPPED = 4 /* gone for good (policy without tiers, or store failure) */
};

typedef struct kv_pool {
    int n_blocks;   /* capacity */
    int block_size; /* tokens per block */
    int n_free;
    int32_t *free_stack; /* (n_blocks) free block ids; top at n_free - 1 */
    int32_t *owner;      /* (n_blocks) owning sequence id, KV_NONE when free */
    int32_t *logical;    /* (n_blocks) logical index in the owner's table */
} kv_pool;

int kv_pool_init(kv_pool *p, int n_blocks, int block_size);
void kv_pool_free(kv_pool *p);
/* Take a free block for (owner, logical). Returns the block id (>= 0) or
 * CK_ENOSPACE when none is free. */
int kv_pool_alloc(kv_pool *p, int owner, int logical);
/* Give a block back. Releasing a free or out-of-range block is a no-op
 * (returns CK_EINVAL), so double releases cannot corrupt the free stack. */
int kv_pool_release(kv_pool *p, int block);
static inline int kv_pool_used(const kv_pool *p) { return p->n_blocks - p->n_free; }

typedef struct kv_seq {
    int id; /* owner id written into the pool */
    int block_size;
    int max_blocks;     /* capacity of the tables (context / block_size, rounded up) */
    int n_blocks;       /* logical blocks in use: ceil(n_tokens / block_size) */
    int n_tokens;       /* positions [0, n_tokens) have been written */
    int n_hot;          /* logical blocks currently hot */
    int32_t *hot;       /* (max_blocks) pool block of each logical block, KV_NONE if not hot */
    int32_t *hot8;      /* (max_blocks) int8 pool block when hot in compressed form (the
                           policy owns these: kvpol_end releases them), else KV_NONE */
    int n_hot8;         /* logical blocks hot in int8 form */
    uint8_t *tier;      /* (max_blocks) KV_TIER_* */
    int32_t *slot;      /* (max_blocks) warm slot while KV_TIER_WARM, else KV_NONE */
    float *mass;        /* (max_blocks) attention mass the backend adds during a step */
    float *score;       /* (max_blocks) importance: EMA of mass (kvpol.h) */
    uint32_t *last_use; /* (max_blocks) step at which the block last took mass */
} kv_seq;

int kv_seq_init(kv_seq *s, int id, int max_tokens, int block_size);
void kv_seq_free(kv_seq *s);
/* Make positions [n_tokens, n_tokens + n) writable: allocate hot blocks for
 * logical blocks not yet written. Returns 0, CK_ETOOLONG past max_blocks, or
 * CK_ENOSPACE when the pool is out of blocks (blocks taken so far stay; the
 * call can be repeated after the caller frees some). Does not advance
 * n_tokens: kv_seq_commit does, after the forward pass wrote them. */
int kv_seq_reserve(kv_seq *s, kv_pool *p, int n);
/* Blocks kv_seq_reserve would need for n more tokens. */
int kv_seq_blocks_needed(const kv_seq *s, int n);
void kv_seq_commit(kv_seq *s, int n);
/* Tokens in hot blocks, f32 and int8 (the last block counts only its
 * written positions); kv_seq_hot8_tokens: those in int8 blocks alone. */
int kv_seq_hot_tokens(const kv_seq *s);
int kv_seq_hot8_tokens(const kv_seq *s);
/* Tokens written in logical block j. */
static inline int kv_seq_block_tokens(const kv_seq *s, int j) {
    int left = s->n_tokens - j * s->block_size;
    return left <= 0 ? 0 : (left < s->block_size ? left : s->block_size);
}
/* Release every f32 hot block to the pool and forget all positions (warm
 * slots and int8 blocks must have been released by the policy first). */
void kv_seq_reset(kv_seq *s, kv_pool *p);
/* Drop positions >= n_tokens (rewind), releasing blocks wholly past it. */
void kv_seq_truncate(kv_seq *s, kv_pool *p, int n_tokens);

#endif
