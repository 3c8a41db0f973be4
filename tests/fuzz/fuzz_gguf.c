/* fuzz_gguf.c - the GGUF container reader (gguf.h).
 *
 * Input: a whole file. Checked, when gguf_open accepts it: every key can be
 * read back with the getter of its type; every string and array lies inside
 * the file; every tensor's data lies inside the data section, aligned, with
 * nbytes consistent with its shape, and its first row dequantizes; lookups
 * by name find what iteration found. (Every byte is touched, so a pointer
 * outside the mapping faults.) */
#include "ck_err.h"
#include "fuzz.h"
#include "gguf.h"
#include "quant.h"

/* Where touch() leaves its result, so the reads are not optimised away. */
static volatile unsigned char sink;

static void touch(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned char x = 0;
    for (size_t i = 0; i < n; i++) x ^= b[i];
    sink = x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, sizeof err);
    close(fd);
    if (rc) {
        FUZZ_CHECK(f == NULL);
        FUZZ_CHECK(rc == CK_EFORMAT || rc == CK_EUNSUPPORTED || rc == CK_ENOMEM || rc == CK_EIO);
        FUZZ_CHECK(memchr(err, 0, sizeof err));
        return 0;
    }
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
    uint64_t align = gguf_alignment(f), doff = gguf_data_offset(f), fsize = gguf_file_size(f);
    FUZZ_CHECK(align && (align & (align - 1)) == 0);
    FUZZ_CHECK(fsize == size);
    /* The data section never starts past the end; a file without tensors
     * may end before its padding, and its empty section then sits at the end. */
    FUZZ_CHECK(doff <= fsize);
    FUZZ_CHECK(doff % align == 0 || (gguf_n_tensors(f) == 0 && doff == fsize));

    int nkv = gguf_n_kv(f);
    FUZZ_CHECK(nkv >= 0);
    for (int i = 0; i < nkv; i++) {
        const char *key = gguf_key_at(f, i);
        FUZZ_CHECK(key && *key);
        FUZZ_CHECK(gguf_find_key(f, key) == i);
        int type = gguf_kv_type(f, i);
        FUZZ_CHECK(type >= 0 && type < GGUF_TYPE_COUNT);
        if (type == GGUF_TYPE_STRING) {
            const char *s;
            size_t len;
            FUZZ_CHECK(gguf_get_str(f, key, &s, &len) == 0);
            FUZZ_CHECK(len <= fsize);
            touch(s, len);
        } else if (type == GGUF_TYPE_ARRAY) {
            int et;
            uint64_t n;
            const void *p;
            FUZZ_CHECK(gguf_get_arr(f, key, &et, &n, &p) == 0);
            FUZZ_CHECK(et >= 0 && et < GGUF_TYPE_COUNT && et != GGUF_TYPE_ARRAY);
            if (et == GGUF_TYPE_STRING) {
                FUZZ_CHECK(p == NULL);
                FUZZ_CHECK(n <= fsize / 8);
                for (uint64_t k = 0; k < n; k++) {
                    const char *s;
                    size_t len;
                    FUZZ_CHECK(gguf_get_arr_str(f, key, k, &s, &len) == 0);
                    touch(s, len);
                }
                const char *s;
                size_t len;
                FUZZ_CHECK(gguf_get_arr_str(f, key, n, &s, &len) == CK_ERANGE);
            } else {
                size_t es = gguf_type_size(et);
                FUZZ_CHECK(es > 0 && n <= fsize / es);
                touch(p, (size_t)n * es);
            }
        } else {
            int t2;
            const void *p;
            FUZZ_CHECK(gguf_get_val(f, key, &t2, &p) == 0 && t2 == type);
            touch(p, gguf_type_size(type));
            int64_t iv;
            double dv;
            int bv;
            int ri = gguf_get_int(f, key, &iv), rf = gguf_get_float(f, key, &dv),
                rb = gguf_get_bool(f, key, &bv);
            if (type == GGUF_TYPE_BOOL)
                FUZZ_CHECK(rb == 0 && (bv == 0 || bv == 1) && ri == CK_EFORMAT);
            else if (type == GGUF_TYPE_FLOAT32 || type == GGUF_TYPE_FLOAT64)
                FUZZ_CHECK(rf == 0 && ri == CK_EFORMAT);
            else
                FUZZ_CHECK((ri == 0 || ri == CK_ERANGE) && rf == 0 && rb == CK_EFORMAT);
        }
    }
    FUZZ_CHECK(gguf_key_at(f, nkv) == NULL);

    int nt = gguf_n_tensors(f);
    FUZZ_CHECK(nt >= 0);
    for (int i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        FUZZ_CHECK(t && t->name && *t->name);
        FUZZ_CHECK(gguf_find_tensor(f, t->name) == t);
        FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        FUZZ_CHECK(t->offset % align == 0);
        FUZZ_CHECK(doff <= fsize && t->offset <= fsize - doff && t->nbytes <= fsize - doff - t->offset);
        uint64_t rows = 1, rb = 0, want = 0;
        for (uint32_t d = 1; d < 4; d++) {
            FUZZ_CHECK(t->ne[d] >= 1);
            FUZZ_CHECK(!__builtin_mul_overflow(rows, t->ne[d], &rows));
        }
        FUZZ_CHECK(quant_row_bytes(t->type, t->ne[0], &rb) == 0);
        FUZZ_CHECK(!__builtin_mul_overflow(rb, rows, &want) && t->nbytes == want);
        FUZZ_CHECK(((uintptr_t)t->data - (uintptr_t)gguf_tensor_at(f, 0)->data +
                    gguf_tensor_at(f, 0)->offset) == t->offset);
        touch(t->data, (size_t)t->nbytes);
        /* the first row, dequantized: any bytes are valid blocks of every
         * type gguf_open accepts (ASan/UBSan watch the unpacking) */
        float row[4096];
        if (t->ne[0] <= 4096) FUZZ_CHECK(quant_to_f32(t->type, t->data, row, t->ne[0]) == 0);
    }
    FUZZ_CHECK(gguf_tensor_at(f, nt) == NULL);
    gguf_close(f);
    return 0;
}
