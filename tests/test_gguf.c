/* test_gguf.c - GGUF writer and reader: a round trip through every value
 * type and the four tensor types, the writer's argument checks, and the
 * reader's name index under many adversarially chosen names (near-linear
 * time, duplicates refused). Malformed files are test_gguf_malformed.c's.
 *
 * Two helper modes feed tests/gguf_independent.sh, which checks our files
 * with an independent GGUF parser:
 *   test_gguf --write-sample PATH   write the sample file; print on stdout
 *                                   the JSON of what was meant to be in it
 *   test_gguf --describe PATH       print the JSON of what our reader sees
 *                                   in any GGUF file
 * JSON: {"version":3,"kv":[{"key":..,"type":..,["subtype":..,]"value":..}],
 *        "tensors":[{"name":..,"type":..,"shape":[ne0,..],"first":[f,..]}]}
 * 64-bit integers are written as strings; "first" holds up to 4 leading
 * elements of the tensor converted to f32. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ck_err.h"
#include "ck_test.h"
#include "gguf.h"
#include "quant.h"
#include "test_gguf_util.h"

/* ------------------------------------------------------------------------
 * JSON, for the independent check (and to compare writer and reader here)
 * ------------------------------------------------------------------------ */

static void json_str(FILE *o, const char *s, size_t n) {
    fputc('"', o);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(o, "\\%c", c);
        else if (c < 0x20)
            fprintf(o, "\\u%04x", c);
        else
            fputc(c, o);
    }
    fputc('"', o);
}

static void json_double(FILE *o, double v, int digits) {
    if (isnan(v))
        fputs("\"nan\"", o);
    else if (isinf(v))
        fputs(v > 0 ? "\"inf\"" : "\"-inf\"", o);
    else
        fprintf(o, "%.*g", digits, v);
}

/* One fixed-size value from its raw little-endian bytes. */
static void json_scalar(FILE *o, int type, const void *raw) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    memcpy(&v, raw, gguf_type_size(type));
    switch (type) {
    case GGUF_TYPE_UINT8: fprintf(o, "%u", v.u8); break;
    case GGUF_TYPE_INT8: fprintf(o, "%d", v.i8); break;
    case GGUF_TYPE_UINT16: fprintf(o, "%u", v.u16); break;
    case GGUF_TYPE_INT16: fprintf(o, "%d", v.i16); break;
    case GGUF_TYPE_UINT32: fprintf(o, "%u", v.u32); break;
    case GGUF_TYPE_INT32: fprintf(o, "%d", v.i32); break;
    case GGUF_TYPE_FLOAT32: json_double(o, v.f32, 9); break;
    case GGUF_TYPE_BOOL: fputs(v.u8 ? "true" : "false", o); break;
    case GGUF_TYPE_UINT64: fprintf(o, "\"%llu\"", (unsigned long long)v.u64); break;
    case GGUF_TYPE_INT64: fprintf(o, "\"%lld\"", (long long)v.i64); break;
    case GGUF_TYPE_FLOAT64: json_double(o, v.f64, 17); break;
    }
}

static void json_array(FILE *o, int et, const void *data, uint64_t n) {
    fputc('[', o);
    for (uint64_t i = 0; i < n; i++) {
        if (i) fputc(',', o);
        json_scalar(o, et, (const uint8_t *)data + i * gguf_type_size(et));
    }
    fputc(']', o);
}

static void json_tensor(FILE *o, const char *name, int type, uint32_t n_dims, const uint64_t *ne,
                        const void *data) {
    fputs("{\"name\":", o);
    json_str(o, name, strlen(name));
    fprintf(o, ",\"type\":%d,\"shape\":[", type);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        fprintf(o, "%s%llu", d ? "," : "", (unsigned long long)ne[d]);
        elems *= ne[d];
    }
    /* the first block(s): up to 32 elements, a multiple of the block size */
    float f[QUANT_Q8_0_BLOCK];
    uint64_t n = elems < 32 ? elems : 32;
    if (quant_block_size(type) > 1) n = (uint64_t)quant_block_size(type);
    fputs("],\"first\":[", o);
    if (quant_to_f32(type, data, f, n) == 0)
        for (uint64_t i = 0; i < n && i < 4; i++) {
            if (i) fputc(',', o);
            json_double(o, f[i], 9);
        }
    fputs("]}", o);
}

static void json_kv_head(FILE *o, int i, const char *key, int type) {
    fputs(i ? ",\n{\"key\":" : "{\"key\":", o);
    json_str(o, key, strlen(key));
    fprintf(o, ",\"type\":%d", type);
}

/* What the writer was asked to write. */
static void json_of_spec(FILE *o, const sample_data *s) {
    fputs("{\"version\":3,\"kv\":[\n", o);
    for (int i = 0; i < N_SAMPLE_KVS; i++) {
        const kvspec *k = &sample_kvs[i];
        json_kv_head(o, i, k->key, k->type);
        if (k->type == GGUF_TYPE_ARRAY) fprintf(o, ",\"subtype\":%d", k->arr_type);
        fputs(",\"value\":", o);
        if (k->type == GGUF_TYPE_STRING) {
            json_str(o, k->strs[0], k->lens[0]);
        } else if (k->type == GGUF_TYPE_ARRAY && k->arr_type == GGUF_TYPE_STRING) {
            fputc('[', o);
            for (uint64_t j = 0; j < k->n; j++) {
                if (j) fputc(',', o);
                json_str(o, k->strs[j], k->lens[j]);
            }
            fputc(']', o);
        } else if (k->type == GGUF_TYPE_ARRAY) {
            json_array(o, k->arr_type, k->data, k->n);
        } else {
            json_scalar(o, k->type, k->data);
        }
        fputc('}', o);
    }
    json_kv_head(o, 1, "general.alignment", GGUF_TYPE_UINT32);
    fputs(",\"value\":32}\n],\"tensors\":[\n", o);
    for (int i = 0; i < N_SAMPLE_TENSORS; i++) {
        const tspec *t = &sample_tensors[i];
        if (i) fputs(",\n", o);
        json_tensor(o, t->name, t->type, t->n_dims, t->ne, s->data[i]);
    }
    fputs("\n]}\n", o);
}

/* What our reader sees. */
static void json_of_file(FILE *o, const gguf_file *f) {
    fprintf(o, "{\"version\":%u,\"kv\":[\n", gguf_version(f));
    for (int i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_key_at(f, i), *s;
        int type = gguf_kv_type(f, i), et;
        size_t len;
        uint64_t n;
        const void *data;
        json_kv_head(o, i, key, type);
        if (type == GGUF_TYPE_ARRAY) {
            gguf_get_arr(f, key, &et, &n, &data);
            fprintf(o, ",\"subtype\":%d,\"value\":", et);
            if (et == GGUF_TYPE_STRING) {
                fputc('[', o);
                for (uint64_t j = 0; j < n; j++) {
                    gguf_get_arr_str(f, key, j, &s, &len);
                    if (j) fputc(',', o);
                    json_str(o, s, len);
                }
                fputc(']', o);
            } else {
                json_array(o, et, data, n);
            }
        } else if (type == GGUF_TYPE_STRING) {
            gguf_get_str(f, key, &s, &len);
            fputs(",\"value\":", o);
            json_str(o, s, len);
        } else {
            gguf_get_val(f, key, &et, &data);
            fputs(",\"value\":", o);
            json_scalar(o, et, data);
        }
        fputc('}', o);
    }
    fputs("\n],\"tensors\":[\n", o);
    for (int i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        if (i) fputs(",\n", o);
        json_tensor(o, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    fputs("\n]}\n", o);
}

/* ------------------------------------------------------------------------
 * round trip
 * ------------------------------------------------------------------------ */

static void test_round_trip(void) {
    sample_data s;
    char err[512];
    CK_CHECK(sample_data_make(&s) == 0);
    const char *path = tmp_path("sample.gguf");
    int rc = write_sample(path, &s, err, sizeof err);
    if (rc != 0) sample_data_free(&s);
    CK_CHECK_MSG(rc == 0, "%s", err);
    CK_CHECK(access(tmp_path("sample.gguf.tmp"), F_OK) != 0);

    gguf_file *f = NULL;
    rc = gguf_open(path, &f, err, sizeof err);
    if (rc != 0) sample_data_free(&s);
    CK_CHECK_MSG(rc == 0, "%s", err);
    int ok = 0;
    do {
#define REQ(c)                                                  \
    if (!(c)) {                                                 \
        fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); \
        break;                                                  \
    }
        REQ(gguf_version(f) == 3);
        REQ(gguf_alignment(f) == 32);
        REQ(gguf_data_offset(f) % 32 == 0);
        REQ(gguf_n_kv(f) == N_SAMPLE_KVS + 1);
        REQ(strcmp(gguf_key_at(f, N_SAMPLE_KVS), "general.alignment") == 0);
        REQ(gguf_kv_type(f, N_SAMPLE_KVS) == GGUF_TYPE_UINT32);
        REQ(gguf_key_at(f, -1) == NULL && gguf_key_at(f, N_SAMPLE_KVS + 1) == NULL);
        REQ(gguf_kv_type(f, 1000) == CK_EINVAL);
        int kv_ok = 1;
        for (int i = 0; i < N_SAMPLE_KVS && kv_ok; i++) {
            const kvspec *k = &sample_kvs[i];
            kv_ok = 0;
            REQ(strcmp(gguf_key_at(f, i), k->key) == 0);
            REQ(gguf_kv_type(f, i) == k->type);
            REQ(gguf_find_key(f, k->key) == i);
            const char *str;
            size_t len;
            int et, type;
            uint64_t n;
            const void *data;
            if (k->type == GGUF_TYPE_STRING) {
                REQ(gguf_get_str(f, k->key, &str, &len) == 0);
                REQ(len == k->lens[0] && memcmp(str, k->strs[0], len) == 0);
            } else if (k->type == GGUF_TYPE_ARRAY) {
                REQ(gguf_get_arr(f, k->key, &et, &n, &data) == 0);
                REQ(et == k->arr_type && n == k->n);
                if (et == GGUF_TYPE_STRING) {
                    REQ(data == NULL);
                    int s_ok = 1;
                    for (uint64_t j = 0; j < n && s_ok; j++)
                        s_ok = gguf_get_arr_str(f, k->key, j, &str, &len) == 0 && len == k->lens[j] &&
                               memcmp(str, k->strs[j], len) == 0;
                    REQ(s_ok);
                    REQ(gguf_get_arr_str(f, k->key, n, &str, &len) == CK_ERANGE);
                } else {
                    REQ(data != NULL);
                    REQ(n == 0 || memcmp(data, k->data, n * gguf_type_size(et)) == 0);
                    REQ(gguf_get_arr_str(f, k->key, 0, &str, &len) == CK_EFORMAT);
                }
            } else {
                REQ(gguf_get_val(f, k->key, &type, &data) == 0);
                REQ(type == k->type);
                REQ(memcmp(data, k->data, gguf_type_size(type)) == 0);
            }
            kv_ok = 1;
        }
        if (!kv_ok) break;
        /* typed getters and their conversions */
        int64_t iv;
        double dv;
        int bv;
        REQ(gguf_get_int(f, "test.u8", &iv) == 0 && iv == 200);
        REQ(gguf_get_int(f, "test.i8", &iv) == 0 && iv == -100);
        REQ(gguf_get_int(f, "test.u16", &iv) == 0 && iv == 60000);
        REQ(gguf_get_int(f, "test.i16", &iv) == 0 && iv == -30000);
        REQ(gguf_get_int(f, "test.u32", &iv) == 0 && iv == 4000000000ll);
        REQ(gguf_get_int(f, "test.i32", &iv) == 0 && iv == -2000000000);
        REQ(gguf_get_int(f, "test.u64s", &iv) == 0 && iv == 123456789012345ll);
        REQ(gguf_get_int(f, "test.i64", &iv) == 0 && iv == v_i64);
        REQ(gguf_get_int(f, "general.alignment", &iv) == 0 && iv == 32);
        iv = 7;
        REQ(gguf_get_int(f, "test.u64", &iv) == CK_ERANGE && iv == 7);
        REQ(gguf_get_int(f, "test.f32", &iv) == CK_EFORMAT);
        REQ(gguf_get_int(f, "test.bool", &iv) == CK_EFORMAT);
        REQ(gguf_get_int(f, "test.str", &iv) == CK_EFORMAT);
        REQ(gguf_get_int(f, "test.arr.u32", &iv) == CK_EFORMAT);
        REQ(gguf_get_int(f, "no.such.key", &iv) == CK_ENOTFOUND);
        REQ(gguf_get_int(f, NULL, &iv) == CK_EINVAL);
        REQ(gguf_get_int(NULL, "test.u8", &iv) == CK_EINVAL);
        REQ(gguf_get_float(f, "test.f32", &dv) == 0 && dv == 3.25);
        REQ(gguf_get_float(f, "test.f32b", &dv) == 0 && dv == (double)1e-5f);
        REQ(gguf_get_float(f, "test.f64", &dv) == 0 && dv == v_f64);
        REQ(gguf_get_float(f, "test.i32", &dv) == 0 && dv == -2e9);
        REQ(gguf_get_float(f, "test.u64", &dv) == 0 && dv == (double)v_u64);
        REQ(gguf_get_float(f, "test.str", &dv) == CK_EFORMAT);
        REQ(gguf_get_bool(f, "test.bool", &bv) == 0 && bv == 1);
        REQ(gguf_get_bool(f, "test.u8", &bv) == CK_EFORMAT);
        REQ(gguf_get_str(f, "test.u8", &(const char *){0}, &(size_t){0}) == CK_EFORMAT);
        REQ(gguf_get_arr(f, "test.u8", NULL, NULL, NULL) == CK_EFORMAT);
        REQ(gguf_get_val(f, "test.str", NULL, NULL) == CK_EFORMAT);
        REQ(gguf_get_val(f, "test.arr.u8", NULL, NULL) == CK_EFORMAT);
        REQ(gguf_find_key(f, "nope") == CK_ENOTFOUND);
        /* tensors */
        REQ(gguf_n_tensors(f) == N_SAMPLE_TENSORS);
        int t_ok = 1;
        uint64_t prev_end = 0;
        for (int i = 0; i < N_SAMPLE_TENSORS && t_ok; i++) {
            const tspec *sp = &sample_tensors[i];
            const gguf_tensor *t = gguf_tensor_at(f, i);
            t_ok = 0;
            REQ(t && strcmp(t->name, sp->name) == 0);
            REQ(gguf_find_tensor(f, sp->name) == t);
            REQ(t->type == sp->type && t->n_dims == sp->n_dims);
            REQ(memcmp(t->ne, sp->ne, sizeof t->ne) == 0);
            REQ(t->nbytes == s.nbytes[i]);
            REQ(t->offset % 32 == 0 && t->offset >= prev_end);
            REQ((uintptr_t)t->data % 32 == 0);
            REQ(memcmp(t->data, s.data[i], t->nbytes) == 0);
            prev_end = t->offset + t->nbytes;
            t_ok = 1;
        }
        if (!t_ok) break;
        REQ(gguf_tensor_at(f, -1) == NULL);
        REQ(gguf_tensor_at(f, N_SAMPLE_TENSORS) == NULL);
        REQ(gguf_find_tensor(f, "blk.0.attn_k.weight") == NULL);
        REQ(gguf_find_tensor(f, "") == NULL);
        REQ(gguf_find_tensor(f, NULL) == NULL);
        /* the q8_0 tensor dequantises to the formula within its bound */
        const gguf_tensor *q = gguf_find_tensor(f, "token_embd.weight");
        float y[64 * 3];
        REQ(quant_to_f32(q->type, q->data, y, 64 * 3) == 0);
        int q_ok = 1;
        for (int i = 0; i < 64 * 3; i++) q_ok &= fabsf(y[i] - sinf(0.37f * (float)i)) <= 1.0f / 127 + 1e-3f;
        REQ(q_ok);
        /* the writer's intent and the reader's view print the same JSON */
        char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        FILE *oa = open_memstream(&a, &al), *ob = open_memstream(&b, &bl);
        if (oa) json_of_spec(oa, &s);
        if (ob) json_of_file(ob, f);
        if (oa) fclose(oa);
        if (ob) fclose(ob);
        int same = a && b && al == bl && memcmp(a, b, al) == 0;
        if (!same) fprintf(stderr, "spec JSON:\n%s\nfile JSON:\n%s\n", a ? a : "", b ? b : "");
        free(a);
        free(b);
        REQ(same);
        ok = 1;
#undef REQ
    } while (0);
    gguf_close(f);
    sample_data_free(&s);
    CK_CHECK(ok);
}

/* ------------------------------------------------------------------------
 * the writer's argument checks
 * ------------------------------------------------------------------------ */

static void test_writer_args(void) {
    gguf_writer *w = NULL;
    CK_CHECK(gguf_writer_new(NULL) == CK_EINVAL);
    CK_CHECK(gguf_writer_new(&w) == 0);
    float data[64] = {0};
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    uint8_t two = 2, bools[2] = {1, 2};
    int r[32], k = 0;
    r[k++] = gguf_writer_set_u32(NULL, "a", 1) == CK_EINVAL;
    r[k++] = gguf_writer_set_u32(w, NULL, 1) == CK_EINVAL;
    r[k++] = gguf_writer_set_u32(w, "", 1) == CK_EINVAL;
    r[k++] = gguf_writer_set_u32(w, "general.alignment", 64) == CK_EINVAL;
    r[k++] = gguf_writer_set_str(w, "a", NULL) == CK_EINVAL;
    r[k++] = gguf_writer_set_val(w, "a", GGUF_TYPE_STRING, "x") == CK_EINVAL;
    r[k++] = gguf_writer_set_val(w, "a", GGUF_TYPE_BOOL, &two) == CK_EINVAL;
    r[k++] = gguf_writer_set_arr(w, "a", GGUF_TYPE_ARRAY, data, 1) == CK_EINVAL;
    r[k++] = gguf_writer_set_arr(w, "a", GGUF_TYPE_STRING, data, 1) == CK_EINVAL;
    r[k++] = gguf_writer_set_arr(w, "a", GGUF_TYPE_UINT8, NULL, 1) == CK_EINVAL;
    r[k++] = gguf_writer_set_arr(w, "a", GGUF_TYPE_BOOL, bools, 2) == CK_EINVAL;
    r[k++] = gguf_writer_set_arr_str(w, "a", NULL, NULL, 1) == CK_EINVAL;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_F32, 0, ne, data) == CK_EINVAL;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_F32, 5, ne, data) == CK_EINVAL;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_F32, 1, ne, NULL) == CK_EINVAL;
    r[k++] = gguf_writer_add_tensor(w, "", QUANT_F32, 1, ne, data) == CK_EINVAL;
    r[k++] = gguf_writer_add_tensor(w, "t", 16, 1, ne, data) == CK_EUNSUPPORTED;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_Q8_K, 1, ne, data) == CK_EUNSUPPORTED;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_Q8_0, 1, (uint64_t[]){33}, data) == CK_EFORMAT;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_F32, 2, (uint64_t[]){4, 0}, data) == CK_EINVAL;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_F32, 2, ne, data) == 0;
    r[k++] = gguf_writer_add_tensor(w, "t", QUANT_F32, 1, ne, data) == CK_EINVAL;
    /* setting a key again replaces it, keeping its place */
    r[k++] = gguf_writer_set_u32(w, "x", 1) == 0 && gguf_writer_set_str(w, "y", "first") == 0 &&
             gguf_writer_set_str(w, "x", "now a string") == 0;
    char err[512];
    r[k++] = gguf_writer_write(w, "/nonexistent-dir/x.gguf", err, sizeof err) == CK_EIO && err[0] != 0;
    const char *path = tmp_path("args.gguf");
    /* written twice: the second replaces the first */
    r[k++] =
        gguf_writer_write(w, path, err, sizeof err) == 0 && gguf_writer_write(w, path, err, sizeof err) == 0;
    gguf_writer_free(w);
    gguf_writer_free(NULL);
    for (int i = 0; i < k; i++) CK_CHECK_MSG(r[i], "case %d", i);
    gguf_file *f;
    CK_CHECK_MSG(gguf_open(path, &f, err, sizeof err) == 0, "%s", err);
    const char *s;
    size_t len;
    int ok = gguf_n_kv(f) == 3 && strcmp(gguf_key_at(f, 0), "x") == 0 &&
             gguf_get_str(f, "x", &s, &len) == 0 && len == 12 && memcmp(s, "now a string", 12) == 0 &&
             gguf_n_tensors(f) == 1;
    gguf_close(f);
    CK_CHECK(ok);
    CK_CHECK(access(tmp_path("args.gguf.tmp"), F_OK) != 0);
}

/* A writer with nothing in it makes a valid file: no tensors, one key. */
static void test_empty_file(void) {
    gguf_writer *w;
    char err[256];
    CK_CHECK(gguf_writer_new(&w) == 0);
    const char *path = tmp_path("empty.gguf");
    int rc = gguf_writer_write(w, path, err, sizeof err);
    gguf_writer_free(w);
    CK_CHECK_MSG(rc == 0, "%s", err);
    gguf_file *f;
    CK_CHECK_MSG(gguf_open(path, &f, err, sizeof err) == 0, "%s", err);
    int ok = gguf_n_tensors(f) == 0 && gguf_n_kv(f) == 1 && gguf_tensor_at(f, 0) == NULL &&
             gguf_find_tensor(f, "a") == NULL;
    gguf_close(f);
    CK_CHECK(ok);
}

/* ------------------------------------------------------------------------
 * many names, adversarially chosen: the name index stays near-linear
 *
 * The attack is on an FNV-1a hash table with linear probing (slot =
 * FNV-1a-64(name) & (capacity - 1), capacity the power of two >= 2n).
 * The low k bits of FNV-1a's state depend only on the low k bits before each
 * byte (xor and multiply carry upwards only), so two blocks that lead from
 * one state to the same low 18 bits keep colliding whatever follows. Chaining
 * 17 such pairs of 3-byte blocks gives 2^17 names that all land in one slot
 * of any table of up to 2^18 slots: 80,000 of them take 18.5 s to open in
 * such a table, and 0.08 s in the reader's sorted index.
 * ------------------------------------------------------------------------ */

#define MANY_LEVELS 17
#define MANY_LOW_MASK ((1u << 18) - 1)

static uint64_t old_fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* blocks[l][0..1]: two 3-character blocks that take the low 18 bits of the
 * state after level l - 1 to the same value. */
static char many_blocks[MANY_LEVELS][2][3];

static int many_find_blocks(void) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    static uint32_t seen[MANY_LOW_MASK + 1]; /* low state -> block + 1 */
    uint64_t st = 1469598103934665603ull;
    for (int l = 0; l < MANY_LEVELS; l++) {
        memset(seen, 0, sizeof seen);
        for (uint32_t b = 0; b < 36 * 36 * 36; b++) { /* ~4 collide */
            char blk[3] = {al[b % 36], al[b / 36 % 36], al[b / 1296]};
            uint64_t h = st;
            for (int k = 0; k < 3; k++) h = (h ^ (uint8_t)blk[k]) * 1099511628211ull;
            uint32_t low = (uint32_t)h & MANY_LOW_MASK;
            if (seen[low]) {
                uint32_t a = seen[low] - 1;
                many_blocks[l][0][0] = al[a % 36];
                many_blocks[l][0][1] = al[a / 36 % 36];
                many_blocks[l][0][2] = al[a / 1296];
                memcpy(many_blocks[l][1], blk, 3);
                st = h; /* only its low 18 bits matter from here on */
                break;
            }
            seen[low] = b + 1;
        }
        if (!many_blocks[l][1][0]) return -1;
    }
    return 0;
}

/* Name number i (< 2^MANY_LEVELS): bit l picks the block of level l. */
static void many_name(uint32_t i, char out[3 * MANY_LEVELS + 1]) {
    for (int l = 0; l < MANY_LEVELS; l++) memcpy(out + 3 * l, many_blocks[l][(i >> l) & 1], 3);
    out[3 * MANY_LEVELS] = 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A file of n_kv uint32 keys (value: the key's number) named by name_of,
 * and n_t F32 tensors of 8 elements named by tname_of. */
static int write_many(const char *path, int n_kv, void (*name_of)(uint32_t, char *, void *), int n_t,
                      void (*tname_of)(uint32_t, char *, void *), void *ctx) {
    bytes b = {0};
    char name[512];
    b_put(&b, "GGUF", 4);
    b_u32(&b, 3);
    b_u64(&b, (uint64_t)n_t);
    b_u64(&b, (uint64_t)n_kv);
    for (int i = 0; i < n_kv; i++) {
        name_of((uint32_t)i, name, ctx);
        b_str(&b, name);
        b_u32(&b, GGUF_TYPE_UINT32);
        b_u32(&b, (uint32_t)i);
    }
    for (int i = 0; i < n_t; i++) {
        tname_of((uint32_t)i, name, ctx);
        b_str(&b, name);
        b_u32(&b, 1);
        b_u64(&b, 8);
        b_u32(&b, QUANT_F32);
        b_u64(&b, 32 * (uint64_t)i);
    }
    while (b.len % 32) b_u8(&b, 0);
    for (int i = 0; i < n_t; i++)
        for (int k = 0; k < 8; k++) {
            float v = (float)i;
            b_put(&b, &v, 4);
        }
    int rc = write_file(path, b.p, b.len);
    free(b.p);
    return rc;
}

typedef struct many_ctx {
    const uint32_t *perm; /* key i is name perm[i]; NULL: name i */
    int dup_of;           /* >= 0: key (or tensor) n - 1 is named as this one */
    int n;
} many_ctx;

static uint32_t many_pick(uint32_t i, const many_ctx *c) {
    if (c->dup_of >= 0 && (int)i == c->n - 1) i = (uint32_t)c->dup_of;
    return c->perm ? c->perm[i] : i;
}

static void colliding_name(uint32_t i, char *out, void *ctx) { many_name(many_pick(i, ctx), out); }

/* 200 bytes in common, then the number: each comparison reads them all */
static void prefixed_name(uint32_t i, char *out, void *ctx) {
    char pre[201];
    memset(pre, 'p', 200);
    pre[200] = 0;
    snprintf(out, 512, "%s.%u", pre, (unsigned)many_pick(i, ctx));
}

static void test_many_colliding_keys(void) {
    enum { N = 80000, NT = 20000 };
    CK_CHECK(many_find_blocks() == 0);
    /* the oracle: every name really collides under the FNV slot function */
    char nm[3 * MANY_LEVELS + 1];
    many_name(0, nm);
    uint64_t slot0 = old_fnv(nm, strlen(nm)) & MANY_LOW_MASK;
    for (uint32_t i = 1; i <= N; i++) {
        many_name(i, nm);
        CK_CHECK_MSG((old_fnv(nm, strlen(nm)) & MANY_LOW_MASK) == slot0, "name %u does not collide",
                     (unsigned)i);
    }
    many_ctx c = {NULL, -1, N};
    const char *path = tmp_path("many.gguf");
    CK_CHECK(write_many(path, N, colliding_name, NT, colliding_name, &c) == 0);
    char err[512];
    gguf_file *f = NULL;
    double t0 = now_s();
    int rc = gguf_open(path, &f, err, sizeof err);
    double t1 = now_s();
    CK_CHECK_MSG(rc == 0, "%s", err);
    fprintf(stderr,
            "    %d colliding keys + %d colliding tensor names: "
            "gguf_open %.3f s\n",
            N, NT, t1 - t0);
    CK_CHECK(gguf_n_kv(f) == N && gguf_n_tensors(f) == NT);
    for (uint32_t i = 0; i < N; i++) {
        many_name(i, nm);
        int64_t v = -1;
        if (gguf_find_key(f, nm) != (int)i || gguf_get_int(f, nm, &v) != 0 || v != i) {
            gguf_close(f);
            CK_CHECK_MSG(0, "key %u (%s) not found as itself", (unsigned)i, nm);
        }
    }
    for (uint32_t i = 0; i < NT; i++) {
        many_name(i, nm);
        const gguf_tensor *t = gguf_find_tensor(f, nm);
        float v = -1;
        if (t) memcpy(&v, t->data, 4);
        if (!t || t != gguf_tensor_at(f, (int)i) || v != (float)i) {
            gguf_close(f);
            CK_CHECK_MSG(0, "tensor %u (%s) not found as itself", (unsigned)i, nm);
        }
    }
    /* colliding names that are not in the file */
    many_name(N, nm);
    int absent_kv = gguf_find_key(f, nm);
    many_name(NT, nm);
    const gguf_tensor *absent_t = gguf_find_tensor(f, nm);
    double t2 = now_s();
    gguf_close(f);
    CK_CHECK(absent_kv == CK_ENOTFOUND && absent_t == NULL);
    fprintf(stderr, "    %d key + %d tensor lookups: %.3f s\n", N, NT, t2 - t1);
    /* generous: an FNV hash table takes 18 s to open and 31 s to look
     * everything up on the 2-core build machine, the sorted index 0.15 s */
    CK_CHECK_MSG(t2 - t0 < 20.0, "open + lookups took %.1f s", t2 - t0);
}

static void test_many_prefixed_keys(void) {
    enum { N = 80000 };
    uint32_t *perm = malloc(N * sizeof *perm);
    CK_CHECK(perm);
    for (uint32_t i = 0; i < N; i++) perm[i] = i;
    uint64_t r = 88172645463325252ull;
    for (uint32_t i = N - 1; i > 0; i--) { /* file order: shuffled */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        uint32_t j = (uint32_t)(r % (i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    many_ctx c = {perm, -1, N};
    const char *path = tmp_path("prefixed.gguf");
    int wrc = write_many(path, N, prefixed_name, 0, NULL, &c);
    char err[512], nm[512];
    gguf_file *f = NULL;
    double t0 = now_s();
    int rc = wrc == 0 ? gguf_open(path, &f, err, sizeof err) : CK_EIO;
    double t1 = now_s();
    int bad = -1;
    for (uint32_t i = 0; rc == 0 && i < N && bad < 0; i++) {
        prefixed_name(i, nm, &c); /* the name of key i */
        if (gguf_find_key(f, nm) != (int)i) bad = (int)i;
    }
    int absent = CK_EINVAL;
    if (rc == 0) {
        /* a present name plus one byte: sorts right after it */
        snprintf(nm, sizeof nm, "%sx", gguf_key_at(f, 0));
        absent = gguf_find_key(f, nm) == CK_ENOTFOUND;
    }
    gguf_close(f);
    free(perm);
    CK_CHECK_MSG(rc == 0, "%s", err);
    fprintf(stderr, "    %d keys, 200-byte common prefix: gguf_open %.3f s\n", N, t1 - t0);
    CK_CHECK_MSG(bad < 0, "key %d not found as itself", bad);
    CK_CHECK(absent == 1);
    CK_CHECK_MSG(t1 - t0 < 20.0, "gguf_open took %.1f s", t1 - t0);
}

/* A duplicate among many colliding names is refused, naming it. */
static void test_many_duplicates(void) {
    enum { N = 30000 };
    CK_CHECK(many_find_blocks() == 0);
    char err[512], want[160], nm[3 * MANY_LEVELS + 1];
    many_name(123, nm);
    gguf_file *f = (gguf_file *)err;
    /* keys: key N - 1 is named as key 123 */
    many_ctx c = {NULL, 123, N};
    const char *path = tmp_path("dup.gguf");
    CK_CHECK(write_many(path, N, colliding_name, 0, NULL, &c) == 0);
    CK_CHECK(gguf_open(path, &f, err, sizeof err) == CK_EFORMAT && !f);
    snprintf(want, sizeof want, "duplicate key '%s' (kv 123 and %d)", nm, N - 1);
    CK_CHECK_MSG(strstr(err, want) != NULL, "message '%s'", err);
    /* tensors: tensor N - 1 is named as tensor 123; the keys are fine */
    CK_CHECK(write_many(path, 0, NULL, N, colliding_name, &c) == 0);
    f = (gguf_file *)err;
    CK_CHECK(gguf_open(path, &f, err, sizeof err) == CK_EFORMAT && !f);
    snprintf(want, sizeof want, "duplicate tensor name '%s' (tensors 123 and %d)", nm, N - 1);
    CK_CHECK_MSG(strstr(err, want) != NULL, "message '%s'", err);
    /* the small crafted file: two tensors "a" */
    craft cr = craft_base();
    cr.t[1].name = "a";
    CK_CHECK(craft_open(&cr, err, sizeof err) == CK_EFORMAT);
    CK_CHECK_MSG(strstr(err, "duplicate tensor name 'a' (tensors 0 and 1)"), "message '%s'", err);
    /* and a key set twice in the crafted file */
    bytes kb = {0};
    b_str(&kb, "general.name");
    b_u32(&kb, GGUF_TYPE_UINT8);
    b_u8(&kb, 1);
    cr = craft_base();
    cr.extra_kv = &kb;
    cr.extra_kv_count = 1;
    int rc = craft_open(&cr, err, sizeof err);
    free(kb.p);
    CK_CHECK(rc == CK_EFORMAT);
    CK_CHECK_MSG(strstr(err, "duplicate key 'general.name' (kv 0 and 1)"), "message '%s'", err);
}

/* ------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------ */

static int cmd_write_sample(const char *path) {
    sample_data s;
    char err[512];
    if (sample_data_make(&s) < 0) {
        fprintf(stderr, "test_gguf: out of memory\n");
        return 1;
    }
    int rc = write_sample(path, &s, err, sizeof err);
    if (rc == 0)
        json_of_spec(stdout, &s);
    else
        fprintf(stderr, "test_gguf: %s (%s)\n", err, ck_strerror(rc));
    sample_data_free(&s);
    return rc == 0 ? 0 : 1;
}

static int cmd_describe(const char *path) {
    gguf_file *f;
    char err[512];
    int rc = gguf_open(path, &f, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "test_gguf: %s (%s)\n", err, ck_errname(rc));
        return 1;
    }
    json_of_file(stdout, f);
    gguf_close(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) return cmd_write_sample(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--describe") == 0) return cmd_describe(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_gguf [--write-sample PATH | --describe PATH]\n");
        return 2;
    }
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/confkv-gguf-XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    CK_RUN(test_round_trip);
    CK_RUN(test_writer_args);
    CK_RUN(test_empty_file);
    CK_RUN(test_many_colliding_keys);
    CK_RUN(test_many_prefixed_keys);
    CK_RUN(test_many_duplicates);
    remove_tmp_dir();
    return ck_test_summary();
}
