/* test_gguf_util.h - what the GGUF test programs (test_gguf.c,
 * test_gguf_malformed.c) share: a temporary directory and files in it, the
 * sample file (every value type, string arrays, four tensor types), and
 * files built byte by byte. */
#ifndef TEST_GGUF_UTIL_H
#define TEST_GGUF_UTIL_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_test.h"
#include "gguf.h"
#include "quant.h"

/* ------------------------------------------------------------------------
 * temporary files
 * ------------------------------------------------------------------------ */

static char tmp_dir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][sizeof tmp_dir + 256]; /* the directory, '/', a d_name */
    static int i = 0;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%s", tmp_dir, name);
    return buf[i];
}

static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        const char *p = tmp_path(e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rmdir(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(tmp_dir);
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t w = fwrite(p, 1, n, fp);
    return (fclose(fp) == 0 && w == n) ? 0 : -1;
}

/* ------------------------------------------------------------------------
 * the sample file: every value type, string arrays, four tensor types
 * ------------------------------------------------------------------------ */

typedef struct kvspec {
    const char *key;
    int type;
    int arr_type;
    uint64_t n;              /* elements (arrays); 1 for scalars */
    const void *data;        /* the scalar, or n fixed-size elements */
    const char *const *strs; /* STRING (n = 1) or string array */
    const size_t *lens;
} kvspec;

static const uint8_t v_u8 = 200;
static const int8_t v_i8 = -100;
static const uint16_t v_u16 = 60000;
static const int16_t v_i16 = -30000;
static const uint32_t v_u32 = 4000000000u;
static const int32_t v_i32 = -2000000000;
static const float v_f32 = 3.25f;
static const float v_f32b = 1e-5f;
static const uint8_t v_bool = 1;
static const uint64_t v_u64 = 0xFEDCBA9876543210ull; /* > INT64_MAX */
static const uint64_t v_u64s = 123456789012345ull;
static const int64_t v_i64 = -9000000000000000000ll;
static const double v_f64 = 2.718281828459045;
static const char *const v_str[] = {"hello, w\xc3\xb6rld \"quoted\"\n"};
static const size_t v_str_len[] = {sizeof "hello, w\xc3\xb6rld \"quoted\"\n" - 1};
static const uint8_t a_u8[] = {1, 2, 255};
static const int8_t a_i8[] = {-1, 0, 127, -128};
static const uint16_t a_u16[] = {0, 65535};
static const int16_t a_i16[] = {-32768, 32767, 5};
static const uint32_t a_u32[] = {1, 2, 3, 4294967295u};
static const int32_t a_i32[] = {-1, -2, 2147483647};
static const float a_f32[] = {0.5f, -1.25f, 1e-7f, 3.4e38f};
static const uint8_t a_bool[] = {1, 0, 1};
static const uint64_t a_u64[] = {1, UINT64_MAX};
static const int64_t a_i64[] = {INT64_MIN, 5};
static const double a_f64[] = {1e300, -0.1};
static const char *const a_str[] = {"", "a", "b\0c", "<0x0A>", "h\xc3\xa9llo"};
static const size_t a_str_len[] = {0, 1, 3, 6, 6};

#define ARR(key, t, a) \
    { key, GGUF_TYPE_ARRAY, t, sizeof a / sizeof a[0], a, NULL, NULL }
#define VAL(key, t, v) \
    { key, t, 0, 1, &v, NULL, NULL }

static const kvspec sample_kvs[] = {
    {"general.architecture", GGUF_TYPE_STRING, 0, 1, NULL, (const char *const[]){"llama"},
     (const size_t[]){5}},
    VAL("test.u8", GGUF_TYPE_UINT8, v_u8),
    VAL("test.i8", GGUF_TYPE_INT8, v_i8),
    VAL("test.u16", GGUF_TYPE_UINT16, v_u16),
    VAL("test.i16", GGUF_TYPE_INT16, v_i16),
    VAL("test.u32", GGUF_TYPE_UINT32, v_u32),
    VAL("test.i32", GGUF_TYPE_INT32, v_i32),
    VAL("test.f32", GGUF_TYPE_FLOAT32, v_f32),
    VAL("test.f32b", GGUF_TYPE_FLOAT32, v_f32b),
    VAL("test.bool", GGUF_TYPE_BOOL, v_bool),
    {"test.str", GGUF_TYPE_STRING, 0, 1, NULL, v_str, v_str_len},
    VAL("test.u64", GGUF_TYPE_UINT64, v_u64),
    VAL("test.u64s", GGUF_TYPE_UINT64, v_u64s),
    VAL("test.i64", GGUF_TYPE_INT64, v_i64),
    VAL("test.f64", GGUF_TYPE_FLOAT64, v_f64),
    ARR("test.arr.u8", GGUF_TYPE_UINT8, a_u8),
    ARR("test.arr.i8", GGUF_TYPE_INT8, a_i8),
    ARR("test.arr.u16", GGUF_TYPE_UINT16, a_u16),
    ARR("test.arr.i16", GGUF_TYPE_INT16, a_i16),
    ARR("test.arr.u32", GGUF_TYPE_UINT32, a_u32),
    ARR("test.arr.i32", GGUF_TYPE_INT32, a_i32),
    ARR("test.arr.f32", GGUF_TYPE_FLOAT32, a_f32),
    ARR("test.arr.bool", GGUF_TYPE_BOOL, a_bool),
    ARR("test.arr.u64", GGUF_TYPE_UINT64, a_u64),
    ARR("test.arr.i64", GGUF_TYPE_INT64, a_i64),
    ARR("test.arr.f64", GGUF_TYPE_FLOAT64, a_f64),
    {"test.arr.empty", GGUF_TYPE_ARRAY, GGUF_TYPE_FLOAT32, 0, NULL, NULL, NULL},
    {"tokenizer.ggml.tokens", GGUF_TYPE_ARRAY, GGUF_TYPE_STRING, 5, NULL, a_str, a_str_len},
};
#define N_SAMPLE_KVS ((int)(sizeof sample_kvs / sizeof sample_kvs[0]))

typedef struct tspec {
    const char *name;
    int type;
    uint32_t n_dims;
    uint64_t ne[4];
} tspec;

static const tspec sample_tensors[] = {
    {"token_embd.weight", QUANT_Q8_0, 2, {64, 3, 1, 1}},
    {"blk.0.attn_norm.weight", QUANT_F32, 1, {5, 1, 1, 1}},
    {"blk.0.attn_q.weight", QUANT_F16, 3, {8, 2, 3, 1}},
    {"blk.0.ffn_up.weight", QUANT_BF16, 2, {7, 3, 1, 1}},
    {"output.weight", QUANT_F32, 4, {2, 3, 1, 2}},
};
#define N_SAMPLE_TENSORS ((int)(sizeof sample_tensors / sizeof sample_tensors[0]))

/* The tensors' bytes, made from a formula. */
typedef struct sample_data {
    uint8_t *data[N_SAMPLE_TENSORS];
    uint64_t nbytes[N_SAMPLE_TENSORS];
} sample_data;

static uint64_t tspec_elems(const tspec *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

static void sample_data_free(sample_data *s) {
    for (int i = 0; i < N_SAMPLE_TENSORS; i++) free(s->data[i]);
}

static int sample_data_make(sample_data *s) {
    memset(s, 0, sizeof *s);
    for (int k = 0; k < N_SAMPLE_TENSORS; k++) {
        const tspec *t = &sample_tensors[k];
        uint64_t n = tspec_elems(t);
        float *f = malloc(n * sizeof *f);
        if (!f || quant_row_bytes(t->type, n, &s->nbytes[k]) < 0 || !(s->data[k] = malloc(s->nbytes[k]))) {
            free(f);
            return -1;
        }
        for (uint64_t i = 0; i < n; i++) f[i] = sinf(0.37f * (float)i + (float)k) * (float)(k + 1);
        int rc = quant_from_f32(t->type, f, s->data[k], n);
        free(f);
        if (rc < 0) return rc;
    }
    return 0;
}

static int write_sample(const char *path, const sample_data *s, char *err, size_t errlen) {
    gguf_writer *w;
    int rc = gguf_writer_new(&w);
    if (rc < 0) return rc;
    for (int i = 0; rc == 0 && i < N_SAMPLE_KVS; i++) {
        const kvspec *k = &sample_kvs[i];
        switch (k->type) {
        case GGUF_TYPE_UINT32: rc = gguf_writer_set_u32(w, k->key, *(const uint32_t *)k->data); break;
        case GGUF_TYPE_INT32: rc = gguf_writer_set_i32(w, k->key, *(const int32_t *)k->data); break;
        case GGUF_TYPE_UINT64: rc = gguf_writer_set_u64(w, k->key, *(const uint64_t *)k->data); break;
        case GGUF_TYPE_FLOAT32: rc = gguf_writer_set_f32(w, k->key, *(const float *)k->data); break;
        case GGUF_TYPE_BOOL: rc = gguf_writer_set_bool(w, k->key, *(const uint8_t *)k->data); break;
        case GGUF_TYPE_STRING: rc = gguf_writer_set_str(w, k->key, k->strs[0]); break;
        case GGUF_TYPE_ARRAY:
            rc = k->arr_type == GGUF_TYPE_STRING ? gguf_writer_set_arr_str(w, k->key, k->strs, k->lens, k->n)
                                                 : gguf_writer_set_arr(w, k->key, k->arr_type, k->data, k->n);
            break;
        default: rc = gguf_writer_set_val(w, k->key, k->type, k->data);
        }
    }
    for (int i = 0; rc == 0 && i < N_SAMPLE_TENSORS; i++) {
        const tspec *t = &sample_tensors[i];
        rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, s->data[i]);
    }
    if (rc == 0) rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_free(w);
    return rc;
}

/* ------------------------------------------------------------------------
 * files built byte by byte
 * ------------------------------------------------------------------------ */

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

static void b_put(bytes *b, const void *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) abort(); /* a test program may */
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
}
static void b_u8(bytes *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(bytes *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(bytes *b, uint64_t v) { b_put(b, &v, 8); }
static void b_strn(bytes *b, const char *s, size_t n) {
    b_u64(b, n);
    b_put(b, s, n);
}
static void b_str(bytes *b, const char *s) { b_strn(b, s, strlen(s)); }

typedef struct rtensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
} rtensor;

/* A small file described field by field. The defaults make a valid file
 * (see craft_base); each test case changes one thing. */
typedef struct craft {
    char magic[5];
    uint32_t version;
    int64_t n_tensors, n_kv; /* -1: the true counts */
    int align_kind;          /* 0 absent, 1 uint32, 2 string, 3 uint64 */
    uint64_t align;
    const bytes *extra_kv; /* raw key/values appended after general.name */
    int extra_kv_count;
    int nt;
    rtensor t[3];
    uint64_t data_bytes;
} craft;

static craft craft_base(void) {
    craft c = {.magic = "GGUF", .version = 3, .n_tensors = -1, .n_kv = -1, .nt = 2, .data_bytes = 64};
    c.t[0] = (rtensor){"a", 1, {8}, QUANT_F32, 0};
    c.t[1] = (rtensor){"b", 1, {8}, QUANT_F32, 32};
    return c;
}

static void craft_bytes(const craft *c, bytes *b) {
    b_put(b, c->magic, 4);
    b_u32(b, c->version);
    b_u64(b, c->n_tensors >= 0 ? (uint64_t)c->n_tensors : (uint64_t)c->nt);
    uint64_t n_kv = 1 + (c->align_kind != 0) + (uint64_t)c->extra_kv_count;
    b_u64(b, c->n_kv >= 0 ? (uint64_t)c->n_kv : n_kv);
    b_str(b, "general.name");
    b_u32(b, GGUF_TYPE_STRING);
    b_str(b, "crafted");
    if (c->align_kind) {
        b_str(b, "general.alignment");
        if (c->align_kind == 1) {
            b_u32(b, GGUF_TYPE_UINT32);
            b_u32(b, (uint32_t)c->align);
        } else if (c->align_kind == 2) {
            b_u32(b, GGUF_TYPE_STRING);
            b_str(b, "32");
        } else {
            b_u32(b, GGUF_TYPE_UINT64);
            b_u64(b, c->align);
        }
    }
    if (c->extra_kv) b_put(b, c->extra_kv->p, c->extra_kv->len);
    for (int i = 0; i < c->nt; i++) {
        const rtensor *t = &c->t[i];
        b_str(b, t->name);
        b_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 5; d++) b_u64(b, t->ne[d]);
        b_u32(b, t->type);
        b_u64(b, t->offset);
    }
    uint64_t a = c->align_kind == 1 || c->align_kind == 3 ? c->align : 32;
    if (a == 0 || (a & (a - 1)) || a > 4096) a = 32;
    while (b->len % a) b_u8(b, 0);
    for (uint64_t i = 0; i < c->data_bytes; i++) b_u8(b, (uint8_t)(i * 7));
}

/* Write the crafted file and open it; returns gguf_open's code. */
static int craft_open(const craft *c, char *err, size_t errlen) {
    bytes b = {0};
    craft_bytes(c, &b);
    const char *path = tmp_path("crafted.gguf");
    int rc = write_file(path, b.p, b.len);
    free(b.p);
    if (rc < 0) return 1000;
    gguf_file *f = (gguf_file *)&rc; /* must be reset to NULL on error */
    rc = gguf_open(path, &f, err, errlen);
    if ((rc == 0) != (f != NULL)) return 2000;
    gguf_close(f);
    return rc;
}

#endif
