/* coldfmt.c - cold-tier block values: header, zstd payload, XXH64 (coldfmt.h). */
#include "coldfmt.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "ck_err.h"

#define ZSTD_LEVEL 1
#define CODEC_ZSTD 1
/* Header offsets (see the table in coldfmt.h). */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 4,
    OFF_DTYPE = 6,
    OFF_CODEC = 7,
    OFF_FP = 8,
    OFF_LAYERS = 24,
    OFF_BS = 28,
    OFF_KVDIM = 32,
    OFF_NTOK = 36,
    OFF_LOGICAL = 40,
    OFF_RAWLEN = 44,
    OFF_ZLEN = 48,
    OFF_RESERVED = 52,
    OFF_TAG = 56,
    OFF_SUM = 64
};
/* A block is at most this many bytes (shapes beyond are refused): keeps
 * every length in 32 bits and a hostile header from asking for gigabytes. */
#define MAX_PAYLOAD ((size_t)1 << 30)

struct coldfmt {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    XXH64_state_t *xxh;
};

int coldfmt_new(coldfmt **out) {
    *out = NULL;
    coldfmt *f = calloc(1, sizeof *f);
    if (!f) return CK_ENOMEM;
    f->cctx = ZSTD_createCCtx();
    f->dctx = ZSTD_createDCtx();
    f->xxh = XXH64_createState();
    if (!f->cctx || !f->dctx || !f->xxh) {
        coldfmt_free(f);
        return CK_ENOMEM;
    }
    *out = f;
    return CK_OK;
}

void coldfmt_free(coldfmt *f) {
    if (!f) return;
    ZSTD_freeCCtx(f->cctx);
    ZSTD_freeDCtx(f->dctx);
    XXH64_freeState(f->xxh);
    free(f);
}

static void put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static int is_fingerprint(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

size_t coldfmt_payload_bytes(const kvq_shape *s, int dtype) {
    /* Each factor below 2^16 keeps the products far from overflow. */
    if (s->n_layers <= 0 || s->block_size <= 0 || s->kv_dim <= 0 || s->n_layers > 65535 ||
        s->block_size > 65535 || s->kv_dim > 65535)
        return 0;
    size_t n = dtype == COLDFMT_F32 ? kvq_f32_bytes(s) : dtype == COLDFMT_INT8 ? kvq_block_bytes(s) : 0;
    return n <= MAX_PAYLOAD ? n : 0;
}

size_t coldfmt_bound(size_t payload_len) { return COLDFMT_HEADER_BYTES + ZSTD_compressBound(payload_len); }

/* Checks a meta a writer or reader supplies (not data from outside). */
static int meta_ok(const coldfmt_meta *m, int want) {
    if (strnlen(m->fingerprint, sizeof m->fingerprint) != 16 || !is_fingerprint(m->fingerprint, 16)) return 0;
    if (!coldfmt_payload_bytes(&m->shape, m->dtype)) return 0;
    if (m->n_tokens < (want ? -1 : 0) || m->n_tokens > m->shape.block_size) return 0;
    return m->logical >= (want ? -1 : 0);
}

/* Over every stored byte (so any corruption of the value fails, even one
 * the decompressor would not notice) and over the decoded KV itself. */
static uint64_t checksum(coldfmt *f, const unsigned char *hdr, size_t zlen, const void *payload, size_t n) {
    XXH64_reset(f->xxh, 0);
    XXH64_update(f->xxh, hdr, OFF_SUM);
    XXH64_update(f->xxh, hdr + COLDFMT_HEADER_BYTES, zlen);
    XXH64_update(f->xxh, payload, n);
    return XXH64_digest(f->xxh);
}

int coldfmt_encode(coldfmt *f, const coldfmt_meta *m, const void *payload, size_t payload_len, void *dst,
                   size_t cap, size_t *out_len) {
    *out_len = 0;
    if (!meta_ok(m, 0) || payload_len != coldfmt_payload_bytes(&m->shape, m->dtype)) return CK_EINVAL;
    if (cap < coldfmt_bound(payload_len)) return CK_ENOSPACE;
    unsigned char *h = dst;
    size_t z = ZSTD_compressCCtx(f->cctx, h + COLDFMT_HEADER_BYTES, cap - COLDFMT_HEADER_BYTES, payload,
                                 payload_len, ZSTD_LEVEL);
    if (ZSTD_isError(z)) return CK_ENOSPACE; /* cannot happen with cap >= the bound */
    memcpy(h + OFF_MAGIC, "CKVB", 4);
    put16(h + OFF_VERSION, COLDFMT_VERSION);
    h[OFF_DTYPE] = (unsigned char)m->dtype;
    h[OFF_CODEC] = CODEC_ZSTD;
    memcpy(h + OFF_FP, m->fingerprint, 16);
    put32(h + OFF_LAYERS, (uint32_t)m->shape.n_layers);
    put32(h + OFF_BS, (uint32_t)m->shape.block_size);
    put32(h + OFF_KVDIM, (uint32_t)m->shape.kv_dim);
    put32(h + OFF_NTOK, (uint32_t)m->n_tokens);
    put32(h + OFF_LOGICAL, (uint32_t)m->logical);
    put32(h + OFF_RAWLEN, (uint32_t)payload_len);
    put32(h + OFF_ZLEN, (uint32_t)z);
    put32(h + OFF_RESERVED, 0);
    put64(h + OFF_TAG, m->tag);
    put64(h + OFF_SUM, checksum(f, h, z, payload, payload_len));
    *out_len = COLDFMT_HEADER_BYTES + z;
    return CK_OK;
}

int coldfmt_decode(coldfmt *f, const coldfmt_meta *want, const void *src, size_t len, void *dst, size_t cap,
                   coldfmt_meta *got) {
    if (!meta_ok(want, 1)) return CK_EINVAL;
    size_t raw = coldfmt_payload_bytes(&want->shape, want->dtype);
    if (cap < raw) return CK_EINVAL;
    const unsigned char *h = src;
    if (!src || len < COLDFMT_HEADER_BYTES || len - COLDFMT_HEADER_BYTES > MAX_PAYLOAD) return CK_EFORMAT;
    if (memcmp(h + OFF_MAGIC, "CKVB", 4) || get16(h + OFF_VERSION) != COLDFMT_VERSION ||
        h[OFF_CODEC] != CODEC_ZSTD || get32(h + OFF_RESERVED) != 0)
        return CK_EFORMAT;
    coldfmt_meta m;
    memset(&m, 0, sizeof m);
    memcpy(m.fingerprint, h + OFF_FP, 16);
    m.dtype = h[OFF_DTYPE];
    uint32_t layers = get32(h + OFF_LAYERS), bs = get32(h + OFF_BS), kvd = get32(h + OFF_KVDIM);
    uint32_t ntok = get32(h + OFF_NTOK), logical = get32(h + OFF_LOGICAL);
    uint32_t rawlen = get32(h + OFF_RAWLEN), zlen = get32(h + OFF_ZLEN);
    m.tag = get64(h + OFF_TAG);
    /* The shape is compared as unsigned values before any narrowing. */
    if (m.dtype != want->dtype || layers != (uint32_t)want->shape.n_layers ||
        bs != (uint32_t)want->shape.block_size || kvd != (uint32_t)want->shape.kv_dim)
        return CK_EFORMAT;
    m.shape = want->shape;
    if (!is_fingerprint(m.fingerprint, 16) || memcmp(m.fingerprint, want->fingerprint, 16)) return CK_EFORMAT;
    if (ntok > bs || logical > INT32_MAX) return CK_EFORMAT;
    m.n_tokens = (int)ntok;
    m.logical = (int)logical;
    if ((want->n_tokens >= 0 && m.n_tokens != want->n_tokens) ||
        (want->logical >= 0 && m.logical != want->logical) || (want->check_tag && m.tag != want->tag))
        return CK_EFORMAT;
    if (rawlen != raw || (size_t)zlen != len - COLDFMT_HEADER_BYTES) return CK_EFORMAT;
    const unsigned char *z = h + COLDFMT_HEADER_BYTES;
    /* Exactly one frame that fills the value and declares raw bytes. */
    if (ZSTD_findFrameCompressedSize(z, zlen) != zlen) return CK_EFORMAT;
    unsigned long long content = ZSTD_getFrameContentSize(z, zlen);
    if (content != raw) return CK_EFORMAT;
    size_t n = ZSTD_decompressDCtx(f->dctx, dst, raw, z, zlen);
    if (ZSTD_isError(n) || n != raw) return CK_EFORMAT;
    if (checksum(f, h, zlen, dst, raw) != get64(h + OFF_SUM)) return CK_EFORMAT;
    if (got) *got = m;
    return CK_OK;
}
