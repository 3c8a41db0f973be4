/* test_gguf_malformed.c - the GGUF reader against malformed files: headers,
 * key/values and tensor infos crafted byte by byte, the quantized tensor
 * types, open errors, every truncation of the sample file and mutations of
 * each of its header bytes. Each file the reader must refuse it refuses with
 * the right code and a message, without crashing or leaking (run under ASan
 * to check the latter). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_err.h"
#include "ck_test.h"
#include "gguf.h"
#include "quant.h"
#include "test_gguf_util.h"

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
    if (p && fread(p, 1, (size_t)sz, fp) != (size_t)sz) {
        free(p);
        p = NULL;
    }
    fclose(fp);
    *n = (size_t)sz;
    return p;
}

/* ------------------------------------------------------------------------
 * malformed files, crafted byte by byte
 * ------------------------------------------------------------------------ */

#define EXPECT_OPEN(c, code)                                                                         \
    do {                                                                                             \
        char err_[512];                                                                              \
        int rc_ = craft_open(&(c), err_, sizeof err_);                                               \
        CK_CHECK_MSG(rc_ == (code), "got %s, want %s: %s", ck_errname(rc_), ck_errname(code), err_); \
        if ((code) != 0) {                                                                           \
            CK_CHECK_MSG(strncmp(err_, tmp_dir, strlen(tmp_dir)) == 0 &&                             \
                             strlen(err_) > strlen(tmp_dir) + 20,                                    \
                         "message '%s'", err_);                                                      \
            fprintf(stderr, "    %-13s %s\n", ck_errname(rc_), err_ + strlen(tmp_dir) + 1);          \
        }                                                                                            \
    } while (0)

static void test_crafted_header(void) {
    craft c = craft_base();
    EXPECT_OPEN(c, 0);
    c.version = 2;
    EXPECT_OPEN(c, 0);
    c = craft_base();
    memcpy(c.magic, "GGUX", 4);
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.version = 1;
    EXPECT_OPEN(c, CK_EUNSUPPORTED);
    c.version = 4;
    EXPECT_OPEN(c, CK_EUNSUPPORTED);
    c.version = 0x03000000; /* a big-endian file */
    EXPECT_OPEN(c, CK_EUNSUPPORTED);
    c = craft_base();
    c.n_tensors = 1000000000000ll;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.n_tensors = INT64_MAX;
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.n_kv = INT64_MAX;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.n_kv = 1000;
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.n_tensors = 3; /* one more than there is */
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.nt = 0; /* no tensors: a metadata-only file */
    c.data_bytes = 0;
    EXPECT_OPEN(c, 0);
}

/* One extra raw key/value; checks the code. */
#define EXPECT_KV(build, code)                                                                       \
    do {                                                                                             \
        bytes kb_ = {0};                                                                             \
        build;                                                                                       \
        craft c_ = craft_base();                                                                     \
        c_.extra_kv = &kb_;                                                                          \
        c_.extra_kv_count = 1;                                                                       \
        char err_[512];                                                                              \
        int rc_ = craft_open(&c_, err_, sizeof err_);                                                \
        free(kb_.p);                                                                                 \
        CK_CHECK_MSG(rc_ == (code), "got %s, want %s: %s", ck_errname(rc_), ck_errname(code), err_); \
        if ((code) != 0) {                                                                           \
            CK_CHECK(strlen(err_) > strlen(tmp_dir) + 20);                                           \
            fprintf(stderr, "    %-13s %s\n", ck_errname(rc_), err_ + strlen(tmp_dir) + 1);          \
        }                                                                                            \
    } while (0)

static void test_crafted_kv(void) {
    /* a valid extra key, to show the harness itself is sound */
    EXPECT_KV((b_str(&kb_, "k"), b_u32(&kb_, GGUF_TYPE_UINT16), b_put(&kb_, "\1\2", 2)), 0);
    /* key length past the end */
    EXPECT_KV(b_u64(&kb_, 1000000000), CK_EFORMAT);
    EXPECT_KV(b_u64(&kb_, UINT64_MAX), CK_EFORMAT);
    /* empty key, key with a NUL byte, duplicate key */
    EXPECT_KV((b_str(&kb_, ""), b_u32(&kb_, GGUF_TYPE_UINT8), b_u8(&kb_, 1)), CK_EFORMAT);
    EXPECT_KV((b_strn(&kb_, "a\0b", 3), b_u32(&kb_, GGUF_TYPE_UINT8), b_u8(&kb_, 1)), CK_EFORMAT);
    EXPECT_KV((b_str(&kb_, "general.name"), b_u32(&kb_, GGUF_TYPE_UINT8), b_u8(&kb_, 1)), CK_EFORMAT);
    /* string value length past the end */
    EXPECT_KV((b_str(&kb_, "s"), b_u32(&kb_, GGUF_TYPE_STRING), b_u64(&kb_, 1000000)), CK_EFORMAT);
    EXPECT_KV((b_str(&kb_, "s"), b_u32(&kb_, GGUF_TYPE_STRING), b_u64(&kb_, UINT64_MAX - 3)), CK_EFORMAT);
    /* unknown value types */
    EXPECT_KV((b_str(&kb_, "u"), b_u32(&kb_, 13), b_u32(&kb_, 0)), CK_EFORMAT);
    EXPECT_KV((b_str(&kb_, "u"), b_u32(&kb_, UINT32_MAX), b_u32(&kb_, 0)), CK_EFORMAT);
    /* bool other than 0/1, scalar and in an array */
    EXPECT_KV((b_str(&kb_, "b"), b_u32(&kb_, GGUF_TYPE_BOOL), b_u8(&kb_, 2)), CK_EFORMAT);
    EXPECT_KV((b_str(&kb_, "b"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_BOOL), b_u64(&kb_, 3),
               b_put(&kb_, "\1\0\3", 3)),
              CK_EFORMAT);
    /* array counts whose byte size overflows or passes the end */
    EXPECT_KV((b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_UINT32),
               b_u64(&kb_, 1ull << 62)),
              CK_EFORMAT);
    EXPECT_KV((b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_UINT64),
               b_u64(&kb_, UINT64_MAX)),
              CK_EFORMAT);
    EXPECT_KV(
        (b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_UINT8), b_u64(&kb_, 100000)),
        CK_EFORMAT);
    EXPECT_KV((b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_STRING),
               b_u64(&kb_, 1ull << 61)),
              CK_EFORMAT);
    /* the second string of an array runs past the end */
    EXPECT_KV((b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_STRING), b_u64(&kb_, 2),
               b_str(&kb_, "x"), b_u64(&kb_, 5000)),
              CK_EFORMAT);
    /* unknown element type; nested arrays are refused as unsupported */
    EXPECT_KV((b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, 13), b_u64(&kb_, 0)), CK_EFORMAT);
    EXPECT_KV((b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u64(&kb_, 1),
               b_u32(&kb_, GGUF_TYPE_UINT8), b_u64(&kb_, 1), b_u8(&kb_, 1)),
              CK_EUNSUPPORTED);
    /* an empty string array is fine */
    EXPECT_KV((b_str(&kb_, "a"), b_u32(&kb_, GGUF_TYPE_ARRAY), b_u32(&kb_, GGUF_TYPE_STRING), b_u64(&kb_, 0)),
              0);
}

/* The quantized weight types: a 2 x 3-block tensor of each opens and has
 * the GGUF format's byte size (bytes a block, written out here); a row that
 * is not whole blocks, and the types confkv does not read, are refused, by
 * name. */
static void test_quant_tensor_types(void) {
    static const struct {
        uint32_t type;
        uint64_t block, bytes;
    } q[] = {
        {2, 32, 18},    {3, 32, 20},    {6, 32, 22},    {7, 32, 24},    {8, 32, 34},  {10, 256, 84},
        {11, 256, 110}, {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {20, 32, 18}, {23, 256, 136},
        {30, 1, 2},     {1, 1, 2},      {0, 1, 4},      {39, 32, 17},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        craft c = craft_base();
        uint64_t nb = 3 * 2 * q[i].bytes, off_b = (nb + 31) / 32 * 32;
        c.t[0] = (rtensor){"a", 2, {2 * q[i].block, 3}, q[i].type, 0};
        c.t[1].offset = off_b;
        c.data_bytes = off_b + 32;
        bytes b = {0};
        craft_bytes(&c, &b);
        const char *path = tmp_path("quant.gguf");
        CK_CHECK(write_file(path, b.p, b.len) == 0);
        free(b.p);
        gguf_file *f = NULL;
        char err[512];
        int rc = gguf_open(path, &f, err, sizeof err);
        CK_CHECK_MSG(rc == 0, "type %u: %s", q[i].type, err);
        const gguf_tensor *t = f ? gguf_find_tensor(f, "a") : NULL;
        CK_CHECK_MSG(t && t->type == (int)q[i].type && t->nbytes == nb, "type %u: %llu bytes", q[i].type,
                     t ? (unsigned long long)t->nbytes : 0ull);
        gguf_close(f);
        if (q[i].block > 1) {
            /* half a block short: a row must be whole blocks */
            c.t[0].ne[0] = 2 * q[i].block - q[i].block / 2;
            EXPECT_OPEN(c, CK_EFORMAT);
        }
    }
    /* a K-quant row of 32 (a whole q8_0 block) is not a whole super-block */
    craft c = craft_base();
    c.t[0] = (rtensor){"a", 1, {32}, QUANT_Q4_K, 0};
    EXPECT_OPEN(c, CK_EFORMAT);
    /* refused by name: ggml types confkv does not read, and the activation
     * types that no weight file holds */
    static const struct {
        uint32_t type;
        const char *what;
    } no[] = {
        {16, "unsupported ggml type iq2_xxs (16)"}, {19, "unsupported ggml type iq1_s (19)"},
        {9, "unsupported ggml type q8_1 (9)"},      {15, "unsupported ggml type q8_K (15)"},
        {4, "unsupported ggml type q4_2 (4)"},      {40, "unsupported ggml type nvfp4 (40)"},
        {50, "unsupported ggml type 50"},           {64, "unknown ggml type 64"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        c = craft_base();
        c.t[0] = (rtensor){"a", 1, {256}, no[i].type, 0};
        c.t[1].offset = 2048;
        c.data_bytes = 2048 + 32;
        char err[512] = "";
        int rc = craft_open(&c, err, sizeof err);
        CK_CHECK_MSG(rc == (no[i].type < 64 ? CK_EUNSUPPORTED : CK_EFORMAT), "type %u: %s", no[i].type,
                     ck_errname(rc));
        CK_CHECK_MSG(strstr(err, no[i].what) != NULL, "type %u: '%s'", no[i].type, err);
    }
}

static void test_crafted_tensors(void) {
    craft c = craft_base();
    c.t[0].n_dims = 0;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[0].n_dims = 5;
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.t[0].n_dims = 2; /* 8 x 0 */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[0].ne[1] = 1; /* 8 x 1 is fine */
    EXPECT_OPEN(c, 0);
    c = craft_base();
    c.t[0].ne[0] = 0;
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.t[0] = (rtensor){"a", 2, {1ull << 32, 1ull << 32}, QUANT_F32, 0};
    EXPECT_OPEN(c, CK_EFORMAT); /* element count overflows int64 */
    c.t[0] = (rtensor){"a", 1, {1ull << 63}, QUANT_F32, 0};
    EXPECT_OPEN(c, CK_EFORMAT); /* dimension above INT64_MAX */
    c.t[0] = (rtensor){"a", 1, {1ull << 62}, QUANT_F32, 0};
    EXPECT_OPEN(c, CK_EFORMAT); /* byte size overflows */
    c.t[0] = (rtensor){"a", 4, {1ull << 20, 1ull << 20, 1ull << 20, 1ull << 2}, QUANT_F16, 0};
    EXPECT_OPEN(c, CK_EFORMAT); /* huge but representable: outside the file */
    c = craft_base();
    c.t[1].type = 16; /* iq2_xxs: a ggml type we do not handle */
    EXPECT_OPEN(c, CK_EUNSUPPORTED);
    c.t[1].type = 1000; /* not a ggml type */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[1].type = 0x80000000u;
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.t[0] = (rtensor){"a", 1, {16}, QUANT_Q8_0, 0}; /* not a multiple of 32 */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[0] = (rtensor){"a", 1, {32}, QUANT_Q8_0, 0}; /* 34 bytes: overlaps b */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[1].offset = 64;
    c.data_bytes = 96;
    EXPECT_OPEN(c, 0);
    /* alignment */
    c = craft_base();
    c.align_kind = 1;
    c.align = 0;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.align = 3;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.align = 48;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.align = 32;
    EXPECT_OPEN(c, 0);
    c.align = 64; /* b at 32 is now misaligned */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[1].offset = 64;
    c.data_bytes = 96;
    EXPECT_OPEN(c, 0);
    c.align_kind = 2; /* a string */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.align_kind = 3; /* uint64 2^63: too large */
    c.align = 1ull << 63;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.align = 1ull << 62; /* the data section is far past the end */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.align = 1;
    c.t[1].offset = 36;
    c.data_bytes = 68;
    EXPECT_OPEN(c, 0);
    /* tensor offsets */
    c = craft_base();
    c.t[1].offset = 36; /* not a multiple of 32 */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[1].offset = 64; /* data ends past the end of the file */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[1].offset = 1ull << 40;
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[1].offset = UINT64_MAX - 31; /* offset + size overflows */
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.data_bytes = 63; /* one byte short */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.data_bytes = 0;
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.t[1].offset = 0; /* overlaps a */
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[0].ne[0] = 16; /* a: [0, 64) */
    c.t[1].offset = 32;
    EXPECT_OPEN(c, CK_EFORMAT);
    c = craft_base();
    c.t[1].offset = 0; /* reversed order is fine */
    c.t[0].offset = 32;
    EXPECT_OPEN(c, 0);
    /* names */
    c = craft_base();
    c.t[1].name = "a";
    EXPECT_OPEN(c, CK_EFORMAT);
    c.t[1].name = "";
    EXPECT_OPEN(c, CK_EFORMAT);
}

static void test_open_errors(void) {
    char err[512];
    gguf_file *f = (gguf_file *)err;
    CK_CHECK(gguf_open(tmp_path("does-not-exist.gguf"), &f, err, sizeof err) == CK_EIO);
    CK_CHECK(f == NULL && strstr(err, "does-not-exist.gguf") != NULL);
    CK_CHECK(gguf_open(tmp_dir, &f, err, sizeof err) == CK_EIO && err[0]);
    CK_CHECK(write_file(tmp_path("zero.gguf"), "", 0) == 0);
    CK_CHECK(gguf_open(tmp_path("zero.gguf"), &f, err, sizeof err) == CK_EFORMAT);
    CK_CHECK(strstr(err, "shorter") != NULL);
    CK_CHECK(gguf_open(NULL, &f, err, sizeof err) == CK_EINVAL);
    CK_CHECK(gguf_open(tmp_path("zero.gguf"), NULL, err, sizeof err) == CK_EINVAL);
    /* a tiny error buffer is truncated, not overrun */
    char small[8];
    CK_CHECK(gguf_open(tmp_path("zero.gguf"), &f, small, sizeof small) == CK_EFORMAT);
    CK_CHECK(strlen(small) == 7);
    CK_CHECK(gguf_open(tmp_path("zero.gguf"), &f, NULL, 0) == CK_EFORMAT);
    gguf_close(NULL);
}

/* Every strict prefix of the sample that cuts into the tensor data or
 * before is refused; from the end of the last tensor on (the trailing
 * padding is optional) it opens. */
static void test_truncated(void) {
    sample_data s;
    char err[512];
    CK_CHECK(sample_data_make(&s) == 0);
    const char *full = tmp_path("trunc-src.gguf");
    int rc = write_sample(full, &s, err, sizeof err);
    sample_data_free(&s);
    CK_CHECK_MSG(rc == 0, "%s", err);
    size_t n;
    uint8_t *p = read_file(full, &n);
    CK_CHECK(p != NULL);
    gguf_file *f;
    rc = gguf_open(full, &f, err, sizeof err);
    if (rc < 0) free(p);
    CK_CHECK_MSG(rc == 0, "%s", err);
    uint64_t end = 0;
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        uint64_t e = gguf_data_offset(f) + t->offset + t->nbytes;
        end = e > end ? e : end;
    }
    gguf_close(f);
    const char *cut = tmp_path("trunc.gguf");
    size_t bad = write_file(cut, p, n) < 0, refused = 0, opened = 0;
    for (size_t len = n - 1; !bad && len < n; len--) { /* down to 0 */
        if (truncate(cut, (off_t)len) < 0) {
            bad++;
            break;
        }
        rc = gguf_open(cut, &f, err, sizeof err);
        gguf_close(f);
        if (len < end) {
            refused += rc == CK_EFORMAT && strlen(err) > strlen(cut) + 10;
            if (rc != CK_EFORMAT && bad++ < 5) fprintf(stderr, "prefix %zu: rc %d: %s\n", len, rc, err);
        } else {
            opened += rc == 0;
        }
    }
    free(p);
    CK_CHECK(bad == 0);
    CK_CHECK(refused == end && opened == n - end);
    fprintf(stderr, "    %zu prefixes refused, %zu opened (file %zu bytes)\n", refused, opened, n);
}

/* Mutate each header byte of the sample a few ways: whatever the reader
 * decides, it must not crash (ASan watches), and what it accepts must be
 * self-consistent. */
static void test_mutated(void) {
    sample_data s;
    char err[512];
    CK_CHECK(sample_data_make(&s) == 0);
    const char *src = tmp_path("mut-src.gguf");
    int rc = write_sample(src, &s, err, sizeof err);
    sample_data_free(&s);
    CK_CHECK_MSG(rc == 0, "%s", err);
    size_t n;
    uint8_t *p = read_file(src, &n);
    CK_CHECK(p != NULL);
    gguf_file *f;
    rc = gguf_open(src, &f, err, sizeof err);
    size_t hdr = rc == 0 ? (size_t)gguf_data_offset(f) : 0;
    gguf_close(f);
    const char *mut = tmp_path("mut.gguf");
    int fd = write_file(mut, p, n) == 0 ? open(mut, O_WRONLY) : -1;
    if (fd < 0) free(p);
    CK_CHECK(fd >= 0);
    size_t opened = 0, refused = 0, inconsistent = 0;
    for (size_t i = 0; i < hdr; i++) {
        uint8_t orig = p[i];
        const uint8_t vals[5] = {0x00, 0xFF, (uint8_t)(orig ^ 1), (uint8_t)(orig + 0x80), orig};
        for (int v = 0; v < 5; v++) {
            if (pwrite(fd, &vals[v], 1, (off_t)i) != 1) inconsistent++;
            if (v == 4) break; /* restored */
            if (vals[v] == orig) continue;
            rc = gguf_open(mut, &f, err, sizeof err);
            if (rc < 0) {
                refused++;
                inconsistent += err[0] == 0;
                continue;
            }
            opened++;
            /* touch everything it hands out */
            volatile uint64_t sum = 0;
            for (int k = 0; k < gguf_n_kv(f); k++) {
                const char *key = gguf_key_at(f, k), *str;
                size_t len;
                int et;
                uint64_t cnt;
                const void *data;
                inconsistent += gguf_find_key(f, key) != k;
                if (gguf_get_str(f, key, &str, &len) == 0)
                    for (size_t j = 0; j < len; j++) sum += (uint8_t)str[j];
                if (gguf_get_arr(f, key, &et, &cnt, &data) == 0) {
                    if (et == GGUF_TYPE_STRING) {
                        for (uint64_t j = 0; j < cnt; j++)
                            if (gguf_get_arr_str(f, key, j, &str, &len) == 0 && len)
                                sum += (uint8_t)str[0] + (uint8_t)str[len - 1];
                    } else if (cnt) {
                        size_t bytes = cnt * gguf_type_size(et);
                        sum += ((const uint8_t *)data)[bytes - 1];
                    }
                }
            }
            for (int k = 0; k < gguf_n_tensors(f); k++) {
                const gguf_tensor *t = gguf_tensor_at(f, k);
                inconsistent += gguf_find_tensor(f, t->name) != t;
                inconsistent += gguf_data_offset(f) + t->offset + t->nbytes > n;
                inconsistent += t->n_dims < 1 || t->n_dims > 4;
                sum += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
            }
            (void)sum;
            gguf_close(f);
        }
    }
    close(fd);
    free(p);
    CK_CHECK(hdr > 0);
    CK_CHECK(inconsistent == 0);
    fprintf(stderr, "    %zu mutations refused, %zu opened\n", refused, opened);
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/confkv-gguf-XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    CK_RUN(test_crafted_header);
    CK_RUN(test_crafted_kv);
    CK_RUN(test_crafted_tensors);
    CK_RUN(test_quant_tensor_types);
    CK_RUN(test_open_errors);
    CK_RUN(test_truncated);
    CK_RUN(test_mutated);
    remove_tmp_dir();
    return ck_test_summary();
}
