/* gguf.c - GGUF reader and writer (the format is described in gguf.h).
 *
 * The reader maps the file and parses it with a bounds-checked cursor: every
 * read first checks that the bytes are there, and every count is checked
 * against the bytes left before anything is allocated for it, so a hostile
 * file cannot make us read out of bounds or allocate more than about the
 * file's size. Nothing is copied but the keys and tensor names (to make them
 * NUL-terminated) and a table of string offsets per string array. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_err.h"
#include "quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c assumes a little-endian host"
#endif

#define GGUF_HEADER_BYTES 24 /* magic, version, tensor count, kv count */
/* Smallest possible key/value: key length (8) + a 1-byte key + type (4) +
 * a 1-byte value. */
#define GGUF_MIN_KV_BYTES 14
/* Smallest possible tensor info: name length (8) + a 1-byte name + n_dims
 * (4) + one dimension (8) + type (4) + offset (8). */
#define GGUF_MIN_TENSOR_BYTES 33
/* How much of a key or tensor name goes into an error message. */
#define GGUF_MSG_NAME_MAX 96

const char *gguf_type_name(int type) {
    static const char *const names[GGUF_TYPE_COUNT] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                       "int32",  "float32", "bool",   "string", "array",
                                                       "uint64", "int64",   "float64"};
    return type >= 0 && type < GGUF_TYPE_COUNT ? names[type] : "?";
}

size_t gguf_type_size(int type) {
    switch (type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ------------------------------------------------------------------------
 * a name -> index table: the names sorted, found by binary search
 *
 * Not a hash: the names come from the file, and a file can choose names
 * that all collide in any fixed hash (80,000 such keys made the old FNV
 * table take 18 s). Sorting is O(n log n) comparisons whatever the names,
 * each comparison at most the shorter name's length, so building costs
 * O(file size * log n) and a lookup O(name length * log n). Duplicates end
 * up next to each other, which is how they are found.
 * ------------------------------------------------------------------------ */

typedef struct gguf_name_ent {
    const char *name; /* NUL-terminated, in gguf_file.strs */
    uint32_t i;       /* index of the key or tensor */
} gguf_name_ent;

typedef struct gguf_index {
    gguf_name_ent *ent; /* (n) sorted by name (strcmp), then by i */
    size_t n;
} gguf_index;

static int ent_cmp(const void *a, const void *b) {
    const gguf_name_ent *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Sort ix->ent (filled by the caller). Returns the position of the first
 * entry whose name equals its predecessor's (the later of two duplicates:
 * ties sort by index), or -1 when all names differ. */
static long index_sort(gguf_index *ix) {
    if (ix->n > 1) qsort(ix->ent, ix->n, sizeof *ix->ent, ent_cmp);
    for (size_t k = 1; k < ix->n; k++)
        if (strcmp(ix->ent[k - 1].name, ix->ent[k].name) == 0) return (long)k;
    return -1;
}

/* Index of the entry called `name`, or -1. */
static long index_find(const gguf_index *ix, const char *name) {
    size_t lo = 0, hi = ix->n; /* the answer is in [lo, hi) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, ix->ent[mid].name);
        if (c == 0) return (long)ix->ent[mid].i;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

/* ------------------------------------------------------------------------
 * the reader
 * ------------------------------------------------------------------------ */

typedef struct gguf_kv {
    const char *key;         /* NUL-terminated, in gguf_file.strs */
    int type;                /* GGUF_TYPE_* */
    int arr_type;            /* ARRAY: element type */
    uint64_t n;              /* STRING: bytes; ARRAY: elements */
    const uint8_t *val;      /* scalar: its bytes; STRING: its bytes; ARRAY of
                           fixed-size: first element; ARRAY of STRING: NULL */
    uint64_t *str_offs;      /* ARRAY of STRING: file offset of each string's
                           bytes (its length is the u64 before it) */
    size_t key_off, key_len; /* while parsing: the key in the mapping */
} gguf_kv;

struct gguf_file {
    const uint8_t *map; /* the whole file, read-only */
    size_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_off; /* start of the data section */
    int n_kv;
    gguf_kv *kv; /* (n_kv) */
    int n_tensors;
    gguf_tensor *tensors; /* (n_tensors) */
    size_t *name_offs;    /* (n_tensors) while parsing: name in the mapping */
    size_t *name_lens;
    char *strs; /* keys then tensor names, NUL-terminated */
    gguf_index kv_index, tensor_index;
};

/* Parsing state: the bounds-checked cursor and where errors go. */
typedef struct gguf_parser {
    const char *path;
    char *err;
    size_t errlen;
    const uint8_t *p; /* the mapping */
    size_t size;
    size_t pos;
    gguf_file *f;
} gguf_parser;

static int fail(gguf_parser *ps, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(gguf_parser *ps, int code, const char *fmt, ...) {
    if (ps->err && ps->errlen > 0) {
        int n = snprintf(ps->err, ps->errlen, "%s: ", ps->path);
        if (n >= 0 && (size_t)n < ps->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return code;
}

static size_t left(const gguf_parser *ps) { return ps->size - ps->pos; }

static int take_u32(gguf_parser *ps, uint32_t *v) {
    if (left(ps) < 4) return -1;
    *v = rd_u32(ps->p + ps->pos);
    ps->pos += 4;
    return 0;
}

static int take_u64(gguf_parser *ps, uint64_t *v) {
    if (left(ps) < 8) return -1;
    *v = rd_u64(ps->p + ps->pos);
    ps->pos += 8;
    return 0;
}

/* A string: u64 length then bytes. Sets *off and *len to the bytes. On a short
 * file fills err with "what: ..." and returns CK_EFORMAT. */
static int take_str(gguf_parser *ps, const char *what, size_t *off, size_t *len) {
    size_t at = ps->pos;
    uint64_t n;
    if (take_u64(ps, &n) < 0)
        return fail(ps, CK_EFORMAT,
                    "%s: length at offset %zu runs past the end of the file "
                    "(size %zu)",
                    what, at, ps->size);
    if (n > left(ps))
        return fail(ps, CK_EFORMAT,
                    "%s: string length %llu at offset %zu runs past the end "
                    "of the file (size %zu)",
                    what, (unsigned long long)n, at, ps->size);
    *off = ps->pos;
    *len = (size_t)n;
    ps->pos += (size_t)n;
    return 0;
}

/* A key or tensor name must be non-empty and hold no NUL byte. */
static int check_name(gguf_parser *ps, const char *what, size_t off, size_t len) {
    if (len == 0) return fail(ps, CK_EFORMAT, "%s at offset %zu is empty", what, off);
    if (memchr(ps->p + off, 0, len))
        return fail(ps, CK_EFORMAT, "%s at offset %zu contains a NUL byte", what, off);
    return 0;
}

/* Bounded "%.*s" arguments for a name in the mapping. */
#define NAME_ARGS(ps, off, len) \
    (int)((len) < GGUF_MSG_NAME_MAX ? (len) : GGUF_MSG_NAME_MAX), (const char *)(ps)->p + (off)

static int check_bools(gguf_parser *ps, gguf_kv *kv, const uint8_t *b, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (b[i] > 1)
            return fail(ps, CK_EFORMAT, "key '%.*s': bool value %u at offset %zu is not 0 or 1",
                        NAME_ARGS(ps, kv->key_off, kv->key_len), b[i], (size_t)(b + i - ps->p));
    return 0;
}

/* The value of kv, whose type tag has been read. */
static int parse_value(gguf_parser *ps, gguf_kv *kv) {
    char what[GGUF_MSG_NAME_MAX + 32];
    snprintf(what, sizeof what, "key '%.*s'", NAME_ARGS(ps, kv->key_off, kv->key_len));
    size_t at = ps->pos;
    if (kv->type < 0 || kv->type >= GGUF_TYPE_COUNT)
        return fail(ps, CK_EFORMAT, "%s: unknown value type %d", what, kv->type);
    size_t sz = gguf_type_size(kv->type);
    if (sz > 0) {
        if (left(ps) < sz)
            return fail(ps, CK_EFORMAT,
                        "%s: %s value at offset %zu runs past the end of the "
                        "file (size %zu)",
                        what, gguf_type_name(kv->type), at, ps->size);
        kv->val = ps->p + ps->pos;
        ps->pos += sz;
        return kv->type == GGUF_TYPE_BOOL ? check_bools(ps, kv, kv->val, 1) : 0;
    }
    if (kv->type == GGUF_TYPE_STRING) {
        size_t off = 0, len = 0;
        int rc = take_str(ps, what, &off, &len);
        if (rc < 0) return rc;
        kv->val = ps->p + off;
        kv->n = len;
        return 0;
    }
    /* array */
    uint32_t et;
    uint64_t n;
    if (take_u32(ps, &et) < 0 || take_u64(ps, &n) < 0)
        return fail(ps, CK_EFORMAT,
                    "%s: array header at offset %zu runs past the end of the "
                    "file (size %zu)",
                    what, at, ps->size);
    if (et == GGUF_TYPE_ARRAY)
        return fail(ps, CK_EUNSUPPORTED, "%s: arrays of arrays are not supported", what);
    if (et >= GGUF_TYPE_COUNT) return fail(ps, CK_EFORMAT, "%s: unknown array element type %u", what, et);
    kv->arr_type = (int)et;
    kv->n = n;
    sz = gguf_type_size((int)et);
    if (sz > 0) {
        if (n > left(ps) / sz)
            return fail(ps, CK_EFORMAT,
                        "%s: array of %llu %s at offset %zu runs past the end "
                        "of the file (size %zu)",
                        what, (unsigned long long)n, gguf_type_name((int)et), at, ps->size);
        kv->val = ps->p + ps->pos;
        ps->pos += (size_t)n * sz;
        return et == GGUF_TYPE_BOOL ? check_bools(ps, kv, kv->val, n) : 0;
    }
    /* strings: each takes at least its 8-byte length, which bounds the
     * offset table by the file size */
    if (n > left(ps) / 8)
        return fail(ps, CK_EFORMAT,
                    "%s: array of %llu strings at offset %zu runs past the "
                    "end of the file (size %zu)",
                    what, (unsigned long long)n, at, ps->size);
    kv->str_offs = malloc((size_t)(n ? n : 1) * sizeof *kv->str_offs);
    if (!kv->str_offs)
        return fail(ps, CK_ENOMEM, "%s: out of memory for %llu strings", what, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        size_t sat = ps->pos;
        uint64_t len;
        if (take_u64(ps, &len) < 0 || len > left(ps))
            return fail(ps, CK_EFORMAT,
                        "%s: string %llu of %llu at offset %zu runs past the "
                        "end of the file (size %zu)",
                        what, (unsigned long long)i, (unsigned long long)n, sat, ps->size);
        kv->str_offs[i] = ps->pos;
        ps->pos += (size_t)len;
    }
    return 0;
}

static int parse_kvs(gguf_parser *ps, gguf_file *f) {
    for (int i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        char what[48];
        snprintf(what, sizeof what, "key %d", i);
        int rc = take_str(ps, what, &kv->key_off, &kv->key_len);
        if (rc < 0) return rc;
        if ((rc = check_name(ps, what, kv->key_off, kv->key_len)) < 0) return rc;
        uint32_t type;
        if (take_u32(ps, &type) < 0)
            return fail(ps, CK_EFORMAT,
                        "key '%.*s': value type runs past the end of the file "
                        "(size %zu)",
                        NAME_ARGS(ps, kv->key_off, kv->key_len), ps->size);
        kv->type = type < GGUF_TYPE_COUNT ? (int)type : -1;
        if (kv->type < 0)
            return fail(ps, CK_EFORMAT, "key '%.*s': unknown value type %u",
                        NAME_ARGS(ps, kv->key_off, kv->key_len), type);
        if ((rc = parse_value(ps, kv)) < 0) return rc;
    }
    return 0;
}

static int parse_tensor_infos(gguf_parser *ps, gguf_file *f) {
    for (int i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char what[48];
        snprintf(what, sizeof what, "tensor %d name", i);
        size_t off = 0, len = 0;
        int rc = take_str(ps, what, &off, &len);
        if (rc < 0) return rc;
        if ((rc = check_name(ps, what, off, len)) < 0) return rc;
        f->name_offs[i] = off;
        f->name_lens[i] = len;
        uint32_t n_dims, type;
        if (take_u32(ps, &n_dims) < 0) goto short_file;
        if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
            return fail(ps, CK_EFORMAT, "tensor '%.*s': n_dims %u is not in 1..%d", NAME_ARGS(ps, off, len),
                        n_dims, GGUF_MAX_DIMS);
        t->n_dims = n_dims;
        uint64_t elems = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            if (d < n_dims && take_u64(ps, &ne) < 0) goto short_file;
            if (ne == 0 || ne > INT64_MAX)
                return fail(ps, CK_EFORMAT,
                            "tensor '%.*s': dimension %u is %llu (must be "
                            "1..INT64_MAX)",
                            NAME_ARGS(ps, off, len), d, (unsigned long long)ne);
            if (elems > (uint64_t)INT64_MAX / ne)
                return fail(ps, CK_EFORMAT,
                            "tensor '%.*s': element count overflows "
                            "(dimension %u is %llu)",
                            NAME_ARGS(ps, off, len), d, (unsigned long long)ne);
            elems *= ne;
            t->ne[d] = ne;
        }
        if (take_u32(ps, &type) < 0 || take_u64(ps, &t->offset) < 0) goto short_file;
        /* A type confkv cannot read, or an activation type (q8_1, q8_K)
         * that no weight file holds, is refused by name where ggml has
         * one: "unsupported ggml type iq2_xxs (16)". */
        if (type > INT_MAX || !quant_is_weight_type((int)type)) {
            const char *gname = type < GGUF_GGML_TYPE_LIMIT ? quant_ggml_type_name((int)type) : NULL;
            return fail(ps, type < GGUF_GGML_TYPE_LIMIT ? CK_EUNSUPPORTED : CK_EFORMAT,
                        "tensor '%.*s': %s ggml type %s%s%u%s", NAME_ARGS(ps, off, len),
                        type < GGUF_GGML_TYPE_LIMIT ? "unsupported" : "unknown", gname ? gname : "",
                        gname ? " (" : "", type, gname ? ")" : "");
        }
        t->type = (int)type;
        uint64_t row;
        rc = quant_row_bytes(t->type, t->ne[0], &row);
        if (rc == CK_EFORMAT)
            return fail(ps, CK_EFORMAT,
                        "tensor '%.*s': ne[0] = %llu is not a multiple of "
                        "%s's block size %d",
                        NAME_ARGS(ps, off, len), (unsigned long long)t->ne[0], quant_type_name(t->type),
                        quant_block_size(t->type));
        uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3]; /* <= elems */
        if (rc < 0 || (rows > 0 && row > UINT64_MAX / rows))
            return fail(ps, CK_EFORMAT, "tensor '%.*s': byte size overflows", NAME_ARGS(ps, off, len));
        t->nbytes = row * rows;
        continue;
    short_file:
        return fail(ps, CK_EFORMAT,
                    "tensor '%.*s': info runs past the end of the file "
                    "(size %zu)",
                    NAME_ARGS(ps, off, len), ps->size);
    }
    return 0;
}

/* Copy keys and names into one NUL-terminated block and index them,
 * refusing duplicates (as llama.cpp's reader does: a second value for a key
 * or a second tensor of a name has no meaning). */
static int build_names(gguf_parser *ps, gguf_file *f) {
    size_t total = 1;
    for (int i = 0; i < f->n_kv; i++) total += f->kv[i].key_len + 1;
    for (int i = 0; i < f->n_tensors; i++) total += f->name_lens[i] + 1;
    /* total <= file size + counts: no overflow */
    f->strs = malloc(total);
    /* +1: malloc(0) may return NULL */
    f->kv_index.ent = malloc(((size_t)f->n_kv + 1) * sizeof *f->kv_index.ent);
    f->tensor_index.ent = malloc(((size_t)f->n_tensors + 1) * sizeof *f->tensor_index.ent);
    if (!f->strs || !f->kv_index.ent || !f->tensor_index.ent) return fail(ps, CK_ENOMEM, "out of memory");
    char *s = f->strs;
    for (int i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        memcpy(s, ps->p + kv->key_off, kv->key_len);
        s[kv->key_len] = 0;
        kv->key = s;
        s += kv->key_len + 1;
        f->kv_index.ent[i] = (gguf_name_ent){kv->key, (uint32_t)i};
    }
    f->kv_index.n = (size_t)f->n_kv;
    long d = index_sort(&f->kv_index);
    if (d >= 0) {
        const gguf_kv *kv = &f->kv[f->kv_index.ent[d].i];
        return fail(ps, CK_EFORMAT, "duplicate key '%.*s' (kv %u and %u)",
                    NAME_ARGS(ps, kv->key_off, kv->key_len), f->kv_index.ent[d - 1].i, f->kv_index.ent[d].i);
    }
    for (int i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        memcpy(s, ps->p + f->name_offs[i], f->name_lens[i]);
        s[f->name_lens[i]] = 0;
        t->name = s;
        s += f->name_lens[i] + 1;
        f->tensor_index.ent[i] = (gguf_name_ent){t->name, (uint32_t)i};
    }
    f->tensor_index.n = (size_t)f->n_tensors;
    d = index_sort(&f->tensor_index);
    if (d >= 0) {
        uint32_t i = f->tensor_index.ent[d].i;
        return fail(ps, CK_EFORMAT, "duplicate tensor name '%.*s' (tensors %u and %u)",
                    NAME_ARGS(ps, f->name_offs[i], f->name_lens[i]), f->tensor_index.ent[d - 1].i, i);
    }
    return 0;
}

static int kv_lookup(const gguf_file *f, const char *key) {
    long i = index_find(&f->kv_index, key);
    return i >= 0 ? (int)i : CK_ENOTFOUND;
}

static int read_alignment(gguf_parser *ps, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int i = kv_lookup(f, "general.alignment");
    if (i < 0) return 0;
    int64_t v;
    int rc = gguf_get_int(f, "general.alignment", &v);
    if (rc < 0 && rc != CK_ERANGE)
        return fail(ps, CK_EFORMAT, "general.alignment has type %s, not an integer",
                    gguf_type_name(f->kv[i].type));
    if (rc == CK_ERANGE)
        return fail(ps, CK_EFORMAT, "general.alignment %llu is too large",
                    (unsigned long long)rd_u64(f->kv[i].val));
    if (v <= 0 || (v & (v - 1)) != 0)
        return fail(ps, CK_EFORMAT, "general.alignment %lld is not a power of two", (long long)v);
    f->alignment = (uint64_t)v;
    return 0;
}

typedef struct gguf_span {
    uint64_t off, end;
    int idx;
} gguf_span;

static int span_cmp(const void *a, const void *b) {
    const gguf_span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Data section placement, bounds, alignment and overlaps. */
static int check_data(gguf_parser *ps, gguf_file *f) {
    uint64_t a = f->alignment, pos = ps->pos;
    if (pos > UINT64_MAX - (a - 1))
        return fail(ps, CK_EFORMAT, "alignment %llu overflows the data offset", (unsigned long long)a);
    f->data_off = (pos + a - 1) / a * a;
    /* A file without tensors (llama.cpp's vocabulary-only files) may end
     * before the padding: its empty data section sits at the end of the
     * file, never past it. */
    if (f->n_tensors == 0) {
        if (f->data_off > ps->size) f->data_off = ps->size;
        return 0;
    }
    uint64_t room = f->data_off <= ps->size ? ps->size - f->data_off : 0;
    if (f->data_off > ps->size)
        return fail(ps, CK_EFORMAT,
                    "data section at offset %llu starts past the end of the "
                    "file (size %zu)",
                    (unsigned long long)f->data_off, ps->size);
    gguf_span *sp = malloc((size_t)f->n_tensors * sizeof *sp);
    if (!sp) return fail(ps, CK_ENOMEM, "out of memory");
    int rc = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % a != 0) {
            rc = fail(ps, CK_EFORMAT,
                      "tensor '%.*s' data offset %llu is not a multiple of "
                      "the alignment %llu",
                      NAME_ARGS(ps, f->name_offs[i], f->name_lens[i]), (unsigned long long)t->offset,
                      (unsigned long long)a);
            goto out;
        }
        if (t->offset > room || t->nbytes > room - t->offset) {
            rc = fail(ps, CK_EFORMAT,
                      "tensor '%.*s' data [offset %llu, %llu bytes] lies "
                      "outside the file (size %zu, data section at %llu)",
                      NAME_ARGS(ps, f->name_offs[i], f->name_lens[i]), (unsigned long long)t->offset,
                      (unsigned long long)t->nbytes, ps->size, (unsigned long long)f->data_off);
            goto out;
        }
        t->data = ps->p + f->data_off + t->offset;
        sp[i] = (gguf_span){t->offset, t->offset + t->nbytes, i};
    }
    qsort(sp, (size_t)f->n_tensors, sizeof *sp, span_cmp);
    for (int i = 1; i < f->n_tensors; i++) {
        if (sp[i].off < sp[i - 1].end) {
            const gguf_tensor *x = &f->tensors[sp[i - 1].idx];
            const gguf_tensor *y = &f->tensors[sp[i].idx];
            rc = fail(ps, CK_EFORMAT,
                      "tensor '%.*s' data [offset %llu, %llu bytes] overlaps "
                      "tensor '%.*s' [offset %llu, %llu bytes]",
                      GGUF_MSG_NAME_MAX, y->name, (unsigned long long)y->offset,
                      (unsigned long long)y->nbytes, GGUF_MSG_NAME_MAX, x->name,
                      (unsigned long long)x->offset, (unsigned long long)x->nbytes);
            goto out;
        }
    }
out:
    free(sp);
    return rc;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->size);
    if (f->kv)
        for (int i = 0; i < f->n_kv; i++) free(f->kv[i].str_offs);
    free(f->kv);
    free(f->tensors);
    free(f->name_offs);
    free(f->name_lens);
    free(f->strs);
    free(f->kv_index.ent);
    free(f->tensor_index.ent);
    free(f);
}

static int parse(gguf_parser *ps, gguf_file *f) {
    if (ps->size < GGUF_HEADER_BYTES)
        return fail(ps, CK_EFORMAT, "file is %zu bytes, shorter than the %d-byte GGUF header", ps->size,
                    GGUF_HEADER_BYTES);
    if (memcmp(ps->p, GGUF_MAGIC, 4) != 0)
        return fail(ps, CK_EFORMAT, "bad magic %02x %02x %02x %02x (not a GGUF file)", ps->p[0], ps->p[1],
                    ps->p[2], ps->p[3]);
    ps->pos = 4;
    uint64_t n_tensors, n_kv;
    take_u32(ps, &f->version);
    take_u64(ps, &n_tensors);
    take_u64(ps, &n_kv);
    uint32_t v = f->version;
    if (v != 2 && v != 3) {
        uint32_t sw = __builtin_bswap32(v);
        if (sw == 2 || sw == 3)
            return fail(ps, CK_EUNSUPPORTED, "big-endian GGUF (version %u) is not supported", sw);
        return fail(ps, CK_EUNSUPPORTED, "GGUF version %u is not supported (only 2 and 3)", v);
    }
    size_t rest = ps->size - GGUF_HEADER_BYTES;
    if (n_kv > rest / GGUF_MIN_KV_BYTES || n_kv > INT_MAX)
        return fail(ps, CK_EFORMAT, "key/value count %llu is impossible for a file of %zu bytes",
                    (unsigned long long)n_kv, ps->size);
    if (n_tensors > rest / GGUF_MIN_TENSOR_BYTES || n_tensors > INT_MAX)
        return fail(ps, CK_EFORMAT, "tensor count %llu is impossible for a file of %zu bytes",
                    (unsigned long long)n_tensors, ps->size);
    f->n_kv = (int)n_kv;
    f->n_tensors = (int)n_tensors;
    /* +1: calloc(0) may return NULL */
    f->kv = calloc((size_t)n_kv + 1, sizeof *f->kv);
    f->tensors = calloc((size_t)n_tensors + 1, sizeof *f->tensors);
    f->name_offs = calloc((size_t)n_tensors + 1, sizeof *f->name_offs);
    f->name_lens = calloc((size_t)n_tensors + 1, sizeof *f->name_lens);
    if (!f->kv || !f->tensors || !f->name_offs || !f->name_lens) return fail(ps, CK_ENOMEM, "out of memory");
    int rc = 0;
    if ((rc = parse_kvs(ps, f)) < 0 || (rc = parse_tensor_infos(ps, f)) < 0 ||
        (rc = build_names(ps, f)) < 0 || (rc = read_alignment(ps, f)) < 0 || (rc = check_data(ps, f)) < 0)
        return rc;
    free(f->name_offs);
    free(f->name_lens);
    f->name_offs = NULL;
    f->name_lens = NULL;
    return 0;
}

int gguf_open(const char *path, gguf_file **out, char *err, size_t errlen) {
    if (err && errlen > 0) err[0] = 0;
    if (!out) return CK_EINVAL;
    *out = NULL;
    gguf_parser ps = {.path = path ? path : "(null)", .err = err, .errlen = errlen};
    if (!path) return fail(&ps, CK_EINVAL, "no path");
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return fail(&ps, CK_ENOMEM, "out of memory");
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = fail(&ps, CK_EIO, "cannot open: %s", strerror(errno));
        goto err;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = fail(&ps, CK_EIO, "cannot stat: %s", strerror(errno));
        close(fd);
        goto err;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = fail(&ps, CK_EIO, "not a regular file");
        close(fd);
        goto err;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = fail(&ps, CK_EIO, "file too large to map");
        close(fd);
        goto err;
    }
    f->size = (size_t)st.st_size;
    if (f->size >= GGUF_HEADER_BYTES) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = fail(&ps, CK_EIO, "cannot map %zu bytes: %s", f->size, strerror(errno));
            close(fd);
            goto err;
        }
        f->map = m;
    }
    close(fd);
    ps.p = f->map;
    ps.size = f->size;
    ps.f = f;
    if ((rc = parse(&ps, f)) < 0) goto err;
    *out = f;
    return 0;
err:
    gguf_close(f);
    return rc;
}

uint32_t gguf_version(const gguf_file *f) { return f ? f->version : 0; }
uint64_t gguf_alignment(const gguf_file *f) { return f ? f->alignment : 0; }
uint64_t gguf_data_offset(const gguf_file *f) { return f ? f->data_off : 0; }
uint64_t gguf_file_size(const gguf_file *f) { return f ? f->size : 0; }

int gguf_n_kv(const gguf_file *f) { return f ? f->n_kv : 0; }

const char *gguf_key_at(const gguf_file *f, int i) {
    return f && i >= 0 && i < f->n_kv ? f->kv[i].key : NULL;
}

int gguf_kv_type(const gguf_file *f, int i) { return f && i >= 0 && i < f->n_kv ? f->kv[i].type : CK_EINVAL; }

int gguf_find_key(const gguf_file *f, const char *key) {
    if (!f || !key) return CK_EINVAL;
    return kv_lookup(f, key);
}

/* The kv for key, or an error code in *rc. */
static const gguf_kv *get_kv(const gguf_file *f, const char *key, int *rc) {
    if (!f || !key) {
        *rc = CK_EINVAL;
        return NULL;
    }
    int i = kv_lookup(f, key);
    if (i < 0) {
        *rc = i;
        return NULL;
    }
    return &f->kv[i];
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t *out) {
    int rc = 0;
    const gguf_kv *kv = get_kv(f, key, &rc);
    if (!kv) return rc;
    if (!out) return CK_EINVAL;
    const uint8_t *p = kv->val;
    int64_t v;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: v = p[0]; break;
    case GGUF_TYPE_INT8: v = (int8_t)p[0]; break;
    case GGUF_TYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v = x;
        break;
    }
    case GGUF_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        v = x;
        break;
    }
    case GGUF_TYPE_UINT32: v = rd_u32(p); break;
    case GGUF_TYPE_INT32: v = (int32_t)rd_u32(p); break;
    case GGUF_TYPE_UINT64: {
        uint64_t x = rd_u64(p);
        if (x > INT64_MAX) return CK_ERANGE;
        v = (int64_t)x;
        break;
    }
    case GGUF_TYPE_INT64: v = (int64_t)rd_u64(p); break;
    default: return CK_EFORMAT;
    }
    *out = v;
    return 0;
}

int gguf_get_float(const gguf_file *f, const char *key, double *out) {
    int rc = 0;
    const gguf_kv *kv = get_kv(f, key, &rc);
    if (!kv) return rc;
    if (!out) return CK_EINVAL;
    if (kv->type == GGUF_TYPE_FLOAT32) {
        float x;
        memcpy(&x, kv->val, 4);
        *out = x;
        return 0;
    }
    if (kv->type == GGUF_TYPE_FLOAT64) {
        memcpy(out, kv->val, 8);
        return 0;
    }
    if (kv->type == GGUF_TYPE_UINT64) { /* may exceed INT64_MAX */
        *out = (double)rd_u64(kv->val);
        return 0;
    }
    int64_t v;
    if ((rc = gguf_get_int(f, key, &v)) < 0) return rc;
    *out = (double)v;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    int rc = 0;
    const gguf_kv *kv = get_kv(f, key, &rc);
    if (!kv) return rc;
    if (!out) return CK_EINVAL;
    if (kv->type != GGUF_TYPE_BOOL) return CK_EFORMAT;
    *out = kv->val[0]; /* checked to be 0 or 1 at open */
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len) {
    int rc = 0;
    const gguf_kv *kv = get_kv(f, key, &rc);
    if (!kv) return rc;
    if (!s || !len) return CK_EINVAL;
    if (kv->type != GGUF_TYPE_STRING) return CK_EFORMAT;
    *s = (const char *)kv->val;
    *len = (size_t)kv->n;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, int *elem_type, uint64_t *n, const void **data) {
    int rc = 0;
    const gguf_kv *kv = get_kv(f, key, &rc);
    if (!kv) return rc;
    if (kv->type != GGUF_TYPE_ARRAY) return CK_EFORMAT;
    if (elem_type) *elem_type = kv->arr_type;
    if (n) *n = kv->n;
    if (data) *data = kv->val;
    return 0;
}

int gguf_get_val(const gguf_file *f, const char *key, int *type, const void **data) {
    int rc = 0;
    const gguf_kv *kv = get_kv(f, key, &rc);
    if (!kv) return rc;
    if (gguf_type_size(kv->type) == 0) return CK_EFORMAT;
    if (type) *type = kv->type;
    if (data) *data = kv->val;
    return 0;
}

int gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i, const char **s, size_t *len) {
    int rc = 0;
    const gguf_kv *kv = get_kv(f, key, &rc);
    if (!kv) return rc;
    if (!s || !len) return CK_EINVAL;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING) return CK_EFORMAT;
    if (i >= kv->n) return CK_ERANGE;
    uint64_t off = kv->str_offs[i];
    *s = (const char *)f->map + off;
    *len = (size_t)rd_u64(f->map + off - 8);
    return 0;
}

int gguf_n_tensors(const gguf_file *f) { return f ? f->n_tensors : 0; }

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i) {
    return f && i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    long i = index_find(&f->tensor_index, name);
    return i >= 0 ? &f->tensors[i] : NULL;
}

/* ------------------------------------------------------------------------
 * the writer
 * ------------------------------------------------------------------------ */

/* A growable byte buffer. */
typedef struct gguf_buf {
    uint8_t *p;
    size_t len, cap;
} gguf_buf;

static int buf_put(gguf_buf *b, const void *src, size_t n) {
    if (n > SIZE_MAX - b->len) return CK_ENOMEM;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n) cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return CK_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int buf_u32(gguf_buf *b, uint32_t v) { return buf_put(b, &v, 4); }
static int buf_u64(gguf_buf *b, uint64_t v) { return buf_put(b, &v, 8); }
static int buf_str(gguf_buf *b, const char *s, size_t n) {
    int rc = buf_u64(b, n);
    return rc < 0 ? rc : buf_put(b, s, n);
}

typedef struct gguf_wkv {
    char *key;
    gguf_buf val; /* type tag and value, serialised */
} gguf_wkv;

typedef struct gguf_wtensor {
    char *name;
    int type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    const void *data; /* borrowed */
    uint64_t nbytes;
    uint64_t offset; /* set by gguf_writer_write */
} gguf_wtensor;

struct gguf_writer {
    gguf_wkv *kv;
    size_t n_kv, cap_kv;
    gguf_wtensor *t;
    size_t n_t, cap_t;
};

int gguf_writer_new(gguf_writer **out) {
    if (!out) return CK_EINVAL;
    *out = calloc(1, sizeof **out);
    return *out ? 0 : CK_ENOMEM;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Store a serialised value under key, replacing an older one. Takes
 * ownership of val's buffer in every case. */
static int writer_put(gguf_writer *w, const char *key, gguf_buf *val) {
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].val.p);
            w->kv[i].val = *val;
            return 0;
        }
    }
    int rc = CK_ENOMEM;
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        gguf_wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) goto err;
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) goto err;
    w->kv[w->n_kv++] = (gguf_wkv){k, *val};
    return 0;
err:
    free(val->p);
    return rc;
}

static int key_ok(const gguf_writer *w, const char *key) {
    return w && key && key[0] && strcmp(key, "general.alignment") != 0;
}

int gguf_writer_set_val(gguf_writer *w, const char *key, int type, const void *v) {
    size_t sz = gguf_type_size(type);
    if (!key_ok(w, key) || sz == 0 || !v) return CK_EINVAL;
    if (type == GGUF_TYPE_BOOL && *(const uint8_t *)v > 1) return CK_EINVAL;
    gguf_buf b = {0};
    if (buf_u32(&b, (uint32_t)type) < 0 || buf_put(&b, v, sz) < 0) {
        free(b.p);
        return CK_ENOMEM;
    }
    return writer_put(w, key, &b);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_UINT32, &v);
}
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_INT32, &v);
}
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_UINT64, &v);
}
int gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_INT64, &v);
}
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_FLOAT32, &v);
}
int gguf_writer_set_f64(gguf_writer *w, const char *key, double v) {
    return gguf_writer_set_val(w, key, GGUF_TYPE_FLOAT64, &v);
}
int gguf_writer_set_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    return gguf_writer_set_val(w, key, GGUF_TYPE_BOOL, &b);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s) {
    if (!key_ok(w, key) || !s) return CK_EINVAL;
    gguf_buf b = {0};
    if (buf_u32(&b, GGUF_TYPE_STRING) < 0 || buf_str(&b, s, strlen(s)) < 0) {
        free(b.p);
        return CK_ENOMEM;
    }
    return writer_put(w, key, &b);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n) {
    size_t sz = gguf_type_size(elem_type);
    if (!key_ok(w, key) || sz == 0 || (n > 0 && !data)) return CK_EINVAL;
    if (n > SIZE_MAX / sz) return CK_ERANGE;
    if (elem_type == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1) return CK_EINVAL;
    gguf_buf b = {0};
    if (buf_u32(&b, GGUF_TYPE_ARRAY) < 0 || buf_u32(&b, (uint32_t)elem_type) < 0 || buf_u64(&b, n) < 0 ||
        buf_put(&b, data, (size_t)n * sz) < 0) {
        free(b.p);
        return CK_ENOMEM;
    }
    return writer_put(w, key, &b);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *s, const size_t *lens,
                            uint64_t n) {
    if (!key_ok(w, key) || (n > 0 && !s)) return CK_EINVAL;
    for (uint64_t i = 0; i < n; i++)
        if (!s[i]) return CK_EINVAL;
    gguf_buf b = {0};
    int rc = 0;
    if (buf_u32(&b, GGUF_TYPE_ARRAY) < 0 || buf_u32(&b, GGUF_TYPE_STRING) < 0 || buf_u64(&b, n) < 0)
        rc = CK_ENOMEM;
    for (uint64_t i = 0; rc == 0 && i < n; i++)
        if (buf_str(&b, s[i], lens ? lens[i] : strlen(s[i])) < 0) rc = CK_ENOMEM;
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    return writer_put(w, key, &b);
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const uint64_t *ne,
                           const void *data) {
    if (!w || !name || !name[0] || !ne || !data || n_dims == 0 || n_dims > GGUF_MAX_DIMS) return CK_EINVAL;
    if (!quant_is_weight_type(type)) return CK_EUNSUPPORTED;
    gguf_wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > INT64_MAX) return CK_EINVAL;
        if (elems > (uint64_t)INT64_MAX / ne[d]) return CK_ERANGE;
        elems *= ne[d];
        t.ne[d] = ne[d];
    }
    uint64_t row;
    int rc = quant_row_bytes(type, t.ne[0], &row);
    if (rc < 0) return rc;
    uint64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
    if (row > UINT64_MAX / rows) return CK_ERANGE;
    t.nbytes = row * rows;
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return CK_EINVAL;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        gguf_wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) return CK_ENOMEM;
        w->t = p;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name))) return CK_ENOMEM;
    w->t[w->n_t++] = t;
    return 0;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (a - x % a) % a; }

/* The header: everything before the data section, padded. Sets offsets. */
static int build_header(gguf_writer *w, gguf_buf *b) {
    int rc = 0;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        gguf_wtensor *t = &w->t[i];
        uint64_t padded = t->nbytes + pad_to(t->nbytes, GGUF_DEFAULT_ALIGNMENT);
        if (padded < t->nbytes || off > UINT64_MAX - padded) return CK_ERANGE;
        t->offset = off;
        off += padded;
    }
    rc |= buf_put(b, GGUF_MAGIC, 4);
    rc |= buf_u32(b, 3);
    rc |= buf_u64(b, w->n_t);
    rc |= buf_u64(b, w->n_kv + 1);
    for (size_t i = 0; i < w->n_kv; i++) {
        rc |= buf_str(b, w->kv[i].key, strlen(w->kv[i].key));
        rc |= buf_put(b, w->kv[i].val.p, w->kv[i].val.len);
    }
    static const char align_key[] = "general.alignment";
    rc |= buf_str(b, align_key, sizeof align_key - 1);
    rc |= buf_u32(b, GGUF_TYPE_UINT32);
    rc |= buf_u32(b, GGUF_DEFAULT_ALIGNMENT);
    for (size_t i = 0; i < w->n_t; i++) {
        const gguf_wtensor *t = &w->t[i];
        rc |= buf_str(b, t->name, strlen(t->name));
        rc |= buf_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) rc |= buf_u64(b, t->ne[d]);
        rc |= buf_u32(b, (uint32_t)t->type);
        rc |= buf_u64(b, t->offset);
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    rc |= buf_put(b, zeros, (size_t)pad_to(b->len, GGUF_DEFAULT_ALIGNMENT));
    return rc ? CK_ENOMEM : 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen) {
    if (err && errlen > 0) err[0] = 0;
    if (!w || !path) return CK_EINVAL;
    gguf_parser ps = {.path = path, .err = err, .errlen = errlen};
    gguf_buf hdr = {0};
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    FILE *fp = NULL;
    int rc = 0;
    if (!tmp) {
        rc = fail(&ps, CK_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    if ((rc = build_header(w, &hdr)) < 0) {
        fail(&ps, rc, "cannot build the header: %s", ck_strerror(rc));
        goto out;
    }
    fp = fopen(tmp, "wb");
    if (!fp) {
        rc = fail(&ps, CK_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    int ok = fwrite(hdr.p, 1, hdr.len, fp) == hdr.len;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const gguf_wtensor *t = &w->t[i];
        size_t pad = (size_t)pad_to(t->nbytes, GGUF_DEFAULT_ALIGNMENT);
        ok = fwrite(t->data, 1, (size_t)t->nbytes, fp) == t->nbytes && fwrite(zeros, 1, pad, fp) == pad;
    }
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int e = errno;
    if (fclose(fp) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    fp = NULL;
    if (!ok) {
        rc = fail(&ps, CK_EIO, "cannot write %s: %s", tmp, strerror(e));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        rc = fail(&ps, CK_EIO, "cannot rename %s: %s", tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
out:
    free(hdr.p);
    free(tmp);
    return rc;
}
