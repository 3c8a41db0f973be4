/* gguf.h - read and write GGUF files (ggml's model format).
 *
 * The format (versions 2 and 3 read, version 3 written; everything
 * little-endian, no implicit padding between fields):
 *
 *   header
 *     char     magic[4]        "GGUF"
 *     uint32   version         2 or 3 (1 used 32-bit counts: refused)
 *     uint64   tensor_count
 *     uint64   kv_count
 *   kv_count key/values
 *     string   key             ASCII by convention, e.g. "general.architecture"
 *     uint32   value_type      GGUF_TYPE_* below
 *     value                    as its type says:
 *       UINT8 0, INT8 1        1 byte
 *       UINT16 2, INT16 3      2 bytes
 *       UINT32 4, INT32 5      4 bytes
 *       FLOAT32 6              4 bytes, IEEE binary32
 *       BOOL 7                 1 byte, 0 or 1
 *       STRING 8               uint64 length, then that many bytes (no NUL)
 *       ARRAY 9                uint32 element type, uint64 count, elements
 *       UINT64 10, INT64 11    8 bytes
 *       FLOAT64 12             8 bytes, IEEE binary64
 *   tensor_count tensor infos
 *     string   name
 *     uint32   n_dims          1..4
 *     uint64   ne[n_dims]      ne[0] is the innermost (contiguous) dimension
 *     uint32   type            ggml type id (quant.h)
 *     uint64   offset          from the start of the data section; a
 *                              multiple of the alignment
 *   padding                    zeros up to a multiple of the alignment
 *   data section               the tensors' bytes, each at its offset
 *
 * The alignment is the key "general.alignment" (an unsigned integer, a power
 * of two), 32 when absent. Writers pad each tensor's data to the alignment.
 *
 * What the reader refuses (gguf_open; each with a sentence in err):
 *   CK_EIO           the file cannot be opened, stat'ed or mapped, or is not
 *                    a regular file
 *   CK_EUNSUPPORTED  version other than 2 or 3 (or a big-endian file),
 *                    nested arrays, a tensor whose ggml type is valid but
 *                    not one confkv handles (id < GGUF_GGML_TYPE_LIMIT)
 *   CK_EFORMAT       everything else: bad magic, a count, length or offset
 *                    that runs past the end of the file or overflows, a count
 *                    too large for the file to hold, more than INT_MAX
 *                    keys or tensors, unknown value types, a bool byte other
 *                    than 0/1, empty keys or names or ones holding a NUL
 *                    byte, duplicate keys or tensor names, n_dims 0 or > 4,
 *                    a dimension 0 or above INT64_MAX, an element count that
 *                    overflows int64, an unknown tensor type id, ne[0] not a
 *                    multiple of the type's block size, a general.alignment
 *                    that is not an integer or not a power of two, tensor
 *                    data misaligned, outside the file or overlapping another
 *                    tensor's
 *   CK_ENOMEM        allocation failed
 * Strings are returned as stored; the reader does not check that they are
 * valid UTF-8.
 *
 * Work: keys and tensor names are indexed by sorting them (no hash a file
 * could make collide), so gguf_open costs O(file size * log n) whatever the
 * names; the duplicate refused is named in err with both indices.
 *
 * Lifetimes: a gguf_file owns the read-only mapping of the file. Every
 * pointer it hands out (tensor infos, names, keys, string values, array and
 * tensor data) points into it or into its tables and stays valid until
 * gguf_close. A gguf_file is immutable after gguf_open, so concurrent reads
 * from several threads are safe. */
#ifndef CK_GGUF_H
#define CK_GGUF_H
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* Value types of the key/values. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

/* ggml type ids below this are valid ggml types (that we may not handle:
 * CK_EUNSUPPORTED); ids at or above it are not ggml types (CK_EFORMAT). */
#define GGUF_GGML_TYPE_LIMIT 64

/* Name of a value type ("uint32", "string", ...); "?" if unknown. */
const char *gguf_type_name(int type);

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY and unknown
 * types. */
size_t gguf_type_size(int type);

/* ------------------------------------------------------------------------
 * reader
 * ------------------------------------------------------------------------ */

typedef struct gguf_file gguf_file; /* opaque */

typedef struct gguf_tensor {
    const char *name; /* NUL-terminated, owned by the gguf_file */
    uint32_t n_dims;  /* 1..4 */
    uint64_t ne[4];   /* ne[0] is the innermost (contiguous) dimension;
                         unused dims are 1 */
    int type;         /* ggml type id (quant.h) */
    uint64_t offset;  /* from the start of the data section */
    uint64_t nbytes;  /* quant_row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3] */
    const void *data; /* inside the mapping, aligned to the file's alignment
                         relative to the file start (the mapping itself is
                         page-aligned); valid until gguf_close */
} gguf_tensor;

/* Map `path` read-only and validate all of it (see the list above); no
 * tensor data is read or copied. On success *out owns the mapping; free it
 * with gguf_close. On error returns a CK_E* code, sets *out to NULL, frees
 * everything, and fills err (when err != NULL and errlen > 0) with
 * "path: what is wrong". */
int gguf_open(const char *path, gguf_file **out, char *err, size_t errlen);

/* Unmap and free. NULL is fine. */
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);   /* general.alignment or 32 */
uint64_t gguf_data_offset(const gguf_file *f); /* start of the data section */
uint64_t gguf_file_size(const gguf_file *f);

/* Key/value getters. Each returns 0 and fills its outputs; CK_ENOTFOUND if
 * the key is absent; CK_EFORMAT if the value has another type; CK_EINVAL for
 * NULL arguments. Outputs are untouched on error. Key lookups are a binary
 * search over the sorted keys: O(log n) string comparisons. */

/* Any integer type (not bool). A uint64 above INT64_MAX gives CK_ERANGE. */
int gguf_get_int(const gguf_file *f, const char *key, int64_t *out);
/* float32 or float64; integer types are accepted and converted. */
int gguf_get_float(const gguf_file *f, const char *key, double *out);
/* bool only: *out is 0 or 1. */
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
/* string: *s is BORROWED from the mapping and NOT NUL-terminated; *len bytes. */
int gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len);
/* array: element type, count, and for fixed-size element types the raw
 * little-endian elements inside the mapping. That pointer may be unaligned:
 * copy elements out with memcpy, never cast it to int32_t * or float *.
 * For string arrays *data is NULL (use gguf_get_arr_str). Any of elem_type,
 * n, data may be NULL when not wanted. */
int gguf_get_arr(const gguf_file *f, const char *key, int *elem_type, uint64_t *n, const void **data);
/* Any fixed-size scalar (not STRING/ARRAY): its GGUF_TYPE_* and a pointer
 * to its raw little-endian bytes in the mapping (possibly unaligned: memcpy
 * them out). For tools that handle every type, such as a dump. */
int gguf_get_val(const gguf_file *f, const char *key, int *type, const void **data);
/* i-th string of a string array, O(1); borrowed, NOT NUL-terminated.
 * CK_EFORMAT if the array's elements are not strings, CK_ERANGE if i >= n. */
int gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i, const char **s, size_t *len);

/* Tensors, in file order. gguf_tensor_at returns NULL for i out of range;
 * gguf_find_tensor is a binary search over the sorted names (O(log n)) and
 * returns NULL if absent. */
int gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Key/values, in file order: count; the i-th key (NUL-terminated, owned by
 * the file; NULL if i is out of range); its GGUF_TYPE_* (CK_EINVAL if i is
 * out of range); index of a key (CK_ENOTFOUND if absent). */
int gguf_n_kv(const gguf_file *f);
const char *gguf_key_at(const gguf_file *f, int i);
int gguf_kv_type(const gguf_file *f, int i);
int gguf_find_key(const gguf_file *f, const char *key);

/* ------------------------------------------------------------------------
 * writer
 * ------------------------------------------------------------------------ */

/* Collects key/values and tensors, then writes one GGUF version 3 file.
 * Keys are written in the order first set, then "general.alignment" = 32
 * (uint32), which the writer owns: setting that key is CK_EINVAL. Setting a
 * key again replaces its value in place. Keys and tensor names must be
 * non-empty. Setters return 0, CK_EINVAL for bad arguments, CK_ENOMEM. */
typedef struct gguf_writer gguf_writer;

int gguf_writer_new(gguf_writer **out);
void gguf_writer_free(gguf_writer *w); /* NULL ok */

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_f64(gguf_writer *w, const char *key, double v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, int v);
/* Any fixed-size scalar type: `v` points at one value of that type in host
 * (little-endian) layout. Covers u8/i8/u16/i16 too. */
int gguf_writer_set_val(gguf_writer *w, const char *key, int type, const void *v);
/* NUL-terminated string, copied. */
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s);
/* n elements of a fixed-size type (not STRING/ARRAY) at data, copied; for
 * BOOL each byte must be 0 or 1. data may be NULL when n is 0. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n);
/* n strings, copied: s[i] with lens[i] bytes (may hold NUL bytes), or, when
 * lens is NULL, NUL-terminated. */
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *s, const size_t *lens,
                            uint64_t n);

/* Add a tensor of ggml type `type` and shape ne[0..n_dims-1] (ne[0]
 * innermost). The name is copied; `data` (quant_row_bytes(type, ne[0]) *
 * ne[1] * ... bytes) is BORROWED until gguf_writer_write returns. Returns
 * CK_EINVAL for a bad or duplicate name, n_dims, dimension or NULL data,
 * CK_EUNSUPPORTED for a type quant.h does not know, CK_EFORMAT if ne[0] is
 * not a multiple of the block size, CK_ERANGE if the size overflows.
 * Duplicate detection is a linear scan: O(n) per call. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const uint64_t *ne,
                           const void *data);

/* Write the file: version 3, the key/values, the tensor infos, and the data
 * with each tensor aligned to 32 bytes (and padded to 32 after). Writes to
 * "path.tmp" then renames it onto path, so path is either the old file or
 * the complete new one. Returns 0; CK_EIO (err says why, and the temporary
 * file is removed), CK_ENOMEM, CK_EINVAL. The writer is unchanged and can
 * write again. */
int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
