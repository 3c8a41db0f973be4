/* kvq.h - int8 KV blocks: the compressed form of one KV block.
 *
 * Keys are quantized per channel (one scale per kv_dim channel over the
 * block's tokens): key outliers live in a few channels, so per-channel
 * scales keep the rest precise (KIVI). Values are quantized per token.
 * Layout of a compressed block, per layer l:
 *     int8  k[block_size][kv_dim]
 *     int8  v[block_size][kv_dim]
 *     f16   ks[kv_dim]          key scale of each channel
 *     f16   vs[block_size]      value scale of each token
 * Scales are IEEE half floats rounded up (so max|x| / scale never passes
 * 127): with 4-token blocks, f32 scales would cost more than a third of
 * the int8 data. Error bound: every dequantized element is within scale/2
 * of the original, i.e. |x - x'| <= (max|x| / 254) * (1 + 2^-10) over its
 * channel (keys) or its token (values). Unwritten positions are 0. */
#ifndef CK_KVQ_H
#define CK_KVQ_H
#include <stddef.h>
#include <stdint.h>

typedef struct kvq_shape {
    int n_layers, block_size, kv_dim;
} kvq_shape;

/* Bytes of one compressed block (scales included). */
size_t kvq_block_bytes(const kvq_shape *s);
/* Bytes of one f32 block (kv.h layout). */
size_t kvq_f32_bytes(const kvq_shape *s);
/* Offsets inside one layer of a compressed block. */
static inline size_t kvq_layer_bytes(const kvq_shape *s) {
    return 2 * (size_t)s->block_size * s->kv_dim + sizeof(uint16_t) * ((size_t)s->kv_dim + s->block_size);
}
/* Compress an f32 block (kv.h layout) whose first n_tokens positions are
 * written. dst: kvq_block_bytes. No allocation. */
void kvq_quantize(const kvq_shape *s, const float *src, int n_tokens, void *dst);
/* A positive scale as the f16 that is >= it (the next half up when
 * rounding to nearest went down). */
uint16_t kvq_scale_f16(float scale);
/* Expand a compressed block back to f32 (positions >= n_tokens become 0). */
void kvq_dequantize(const kvq_shape *s, const void *src, float *dst);

#endif
