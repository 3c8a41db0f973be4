/* coldfmt.h - the byte format of one KV block in the cold tier, written and
 * verified in one place.
 *
 * A value is a fixed 72-byte header followed by the payload compressed as
 * one zstd frame (level 1). All integers are little-endian.
 *
 *   off size field
 *     0   4  magic        "CKVB"
 *     4   2  version      COLDFMT_VERSION (1)
 *     6   1  dtype        COLDFMT_F32 (kv.h f32 block) or COLDFMT_INT8 (kvq.h block)
 *     7   1  codec        1 = zstd
 *     8  16  fingerprint  model->fingerprint: 16 lowercase hex digits
 *    24   4  n_layers     block geometry (kvq_shape)
 *    28   4  block_size
 *    32   4  kv_dim
 *    36   4  n_tokens     positions written, 0..block_size
 *    40   4  logical      logical block index in its sequence, >= 0
 *    44   4  raw_len      payload bytes before compression: exactly
 *                         kvq_f32_bytes (F32) or kvq_block_bytes (INT8)
 *    48   4  zlen         compressed bytes: exactly value length - 72
 *    52   4  reserved     0
 *    56   8  tag          the writer's name for the block (the tier: a hash of
 *                         its key), so a value stored under the wrong key fails
 *    64   8  checksum     XXH64 (seed 0) of header bytes 0..63, the zstd frame,
 *                         then the decompressed payload: every stored byte and
 *                         the KV itself
 *    72      zstd frame   zlen bytes
 *
 * The reader distrusts every byte: coldfmt_decode checks magic, version,
 * dtype, codec, the reserved field, the shape against the caller's, the
 * lengths against each other and against the value's length, the
 * fingerprint and (when asked) the tag, n_tokens and logical index; it
 * decompresses into exactly raw_len bytes and verifies the checksum last.
 * Any failure is CK_EFORMAT, and the caller must treat the block as missing
 * (an integrity failure): never as KV.
 *
 * A coldfmt context holds the zstd contexts, made once (coldfmt_new) and
 * reused, so encoding and decoding allocate nothing. One thread uses one
 * context. */
#ifndef CK_COLDFMT_H
#define CK_COLDFMT_H
#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

#define COLDFMT_VERSION 1
#define COLDFMT_HEADER_BYTES 72
enum { COLDFMT_F32 = 1, COLDFMT_INT8 = 2 };

/* What a header says about its block. */
typedef struct coldfmt_meta {
    char fingerprint[17]; /* 16 hex digits + NUL */
    kvq_shape shape;
    int dtype;     /* COLDFMT_F32 or COLDFMT_INT8 */
    int n_tokens;  /* 0..block_size; in coldfmt_decode's want: -1 = any */
    int logical;   /* >= 0; in want: -1 = any */
    uint64_t tag;  /* in want: checked only when check_tag is set */
    int check_tag; /* want only */
} coldfmt_meta;

typedef struct coldfmt coldfmt;

int coldfmt_new(coldfmt **out);
void coldfmt_free(coldfmt *f);

/* Payload bytes of a block of this shape and dtype (0 for a bad dtype or shape). */
size_t coldfmt_payload_bytes(const kvq_shape *s, int dtype);
/* Largest encoded value for a payload of this length: the dst capacity
 * coldfmt_encode needs. */
size_t coldfmt_bound(size_t payload_len);

/* Encode a block: header from m, payload (exactly coldfmt_payload_bytes) into
 * dst (cap bytes, at least coldfmt_bound). *out_len gets the value's length.
 * Returns 0, CK_EINVAL (bad meta: fingerprint not 16 hex digits, shape,
 * dtype, n_tokens, logical, payload length) or CK_ENOSPACE (cap too small). */
int coldfmt_encode(coldfmt *f, const coldfmt_meta *m, const void *payload, size_t payload_len, void *dst,
                   size_t cap, size_t *out_len);

/* Verify a value against want and decompress its payload into dst (cap
 * bytes, at least the payload length). got (may be NULL) receives the header.
 * Returns 0; CK_EFORMAT for anything wrong with the value (see above);
 * CK_EINVAL for a bad want or a dst too small. dst is scribbled on failure. */
int coldfmt_decode(coldfmt *f, const coldfmt_meta *want, const void *src, size_t len, void *dst, size_t cap,
                   coldfmt_meta *got);

#endif
