/* fuzz_coldblock.c - the cold-tier block format (coldfmt.h, coldfmt_decode),
 * as values read back from Redis.
 *
 * Input: byte 0 chooses what the reader expects (one of two shapes, f32 or
 * int8, whether the tag is checked) and bit 3 whether the harness first
 * repairs the value's checksum (so mutated headers and frames get past it
 * and the decoder's other checks and the payload are exercised); the rest
 * is the stored value. Checked: every outcome is 0 or CK_EFORMAT; an
 * accepted value's header agrees with what was asked for, re-encodes from
 * its decoded payload into a value that decodes to the same payload, and an
 * int8 payload dequantizes. */
#include <xxhash.h>
#include <zstd.h>

#include "ck_err.h"
#include "coldfmt.h"
#include "fuzz.h"

static const kvq_shape shapes[2] = {{2, 4, 8}, {1, 16, 32}};
static const char fp[] = "0123456789abcdef";

/* libFuzzer gives a harness no context pointer: the zstd contexts are made
 * once, as the engine makes them once per thread. */
static coldfmt *cf;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    if (coldfmt_new(&cf)) abort();
    return 0;
}

/* The checksum of coldfmt.h over a value whose frame decompresses. */
static void repair(unsigned char *v, size_t len, size_t raw) {
    if (len < COLDFMT_HEADER_BYTES) return;
    void *payload = malloc(raw ? raw : 1);
    if (!payload) return;
    size_t n = ZSTD_decompress(payload, raw, v + COLDFMT_HEADER_BYTES, len - COLDFMT_HEADER_BYTES);
    if (!ZSTD_isError(n) && n == raw) {
        XXH64_state_t *st = XXH64_createState();
        XXH64_reset(st, 0);
        XXH64_update(st, v, 64);
        XXH64_update(st, v + COLDFMT_HEADER_BYTES, len - COLDFMT_HEADER_BYTES);
        XXH64_update(st, payload, raw);
        uint64_t h = XXH64_digest(st);
        XXH64_freeState(st);
        for (int i = 0; i < 8; i++) v[64 + i] = (unsigned char)(h >> (8 * i));
    }
    free(payload);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    coldfmt_meta want;
    memset(&want, 0, sizeof want);
    memcpy(want.fingerprint, fp, 17);
    want.shape = shapes[data[0] & 1];
    want.dtype = data[0] & 2 ? COLDFMT_INT8 : COLDFMT_F32;
    want.n_tokens = -1;
    want.logical = -1;
    want.check_tag = (data[0] & 4) != 0;
    want.tag = 0x1122334455667788ull;
    size_t raw = coldfmt_payload_bytes(&want.shape, want.dtype);
    FUZZ_CHECK(raw > 0);
    size_t len = size - 1;
    unsigned char *v = malloc(len ? len : 1);
    FUZZ_CHECK(v != NULL);
    memcpy(v, data + 1, len);
    if (data[0] & 8) repair(v, len, raw);

    unsigned char *dst = malloc(raw);
    FUZZ_CHECK(dst != NULL);
    coldfmt_meta got;
    int rc = coldfmt_decode(cf, &want, v, len, dst, raw, &got);
    FUZZ_CHECK(rc == 0 || rc == CK_EFORMAT);
    if (rc == 0) {
        FUZZ_CHECK(!memcmp(got.fingerprint, fp, 16) && got.dtype == want.dtype);
        FUZZ_CHECK(got.shape.n_layers == want.shape.n_layers &&
                   got.shape.block_size == want.shape.block_size && got.shape.kv_dim == want.shape.kv_dim);
        FUZZ_CHECK(got.n_tokens >= 0 && got.n_tokens <= want.shape.block_size && got.logical >= 0);
        if (want.check_tag) FUZZ_CHECK(got.tag == want.tag);
        /* re-encode what was decoded: the same payload must come back */
        size_t cap = coldfmt_bound(raw), elen = 0;
        unsigned char *enc = malloc(cap), *dst2 = malloc(raw);
        FUZZ_CHECK(enc && dst2);
        got.fingerprint[16] = 0;
        got.check_tag = 0;
        FUZZ_CHECK(coldfmt_encode(cf, &got, dst, raw, enc, cap, &elen) == 0);
        coldfmt_meta got2;
        FUZZ_CHECK(coldfmt_decode(cf, &want, enc, elen, dst2, raw, &got2) == 0);
        FUZZ_CHECK(!memcmp(dst, dst2, raw) && got2.n_tokens == got.n_tokens && got2.logical == got.logical &&
                   got2.tag == got.tag);
        if (want.dtype == COLDFMT_INT8) {
            size_t nf = kvq_f32_bytes(&want.shape) / sizeof(float);
            float *f = malloc(nf * sizeof *f);
            FUZZ_CHECK(f != NULL);
            kvq_dequantize(&want.shape, dst, f);
            free(f);
        }
        free(enc);
        free(dst2);
    }
    free(dst);
    free(v);
    return 0;
}
