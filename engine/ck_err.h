/* ck_err.h - the error codes every confkv function returns.
 *
 * Convention (as libuv): 0 is success, a negative CK_E* value is an error.
 * The codes, their names and their messages come from one X-macro table, so
 * a code can never lack a name. Setup functions that can fail for many
 * reasons also fill a caller's `err` buffer with a sentence for a person. */
#ifndef CK_ERR_H
#define CK_ERR_H

#define CK_ERR_MAP(X)                                  \
    X(EINVAL, -1, "invalid argument")                  \
    X(ENOMEM, -2, "out of memory")                     \
    X(EIO, -3, "input/output error")                   \
    X(EFORMAT, -4, "malformed input")                  \
    X(EUNSUPPORTED, -5, "unsupported feature or type") \
    X(ERANGE, -6, "value out of range")                \
    X(ENOSPACE, -7, "KV budget exhausted")             \
    X(ENOTFOUND, -8, "not found")                      \
    X(ESTATE, -9, "operation not valid in this state") \
    X(EBACKEND, -10, "backend failure")                \
    X(EBUSY, -11, "resource busy, try again")          \
    X(ETOOLONG, -12, "input too long")                 \
    X(ENONFINITE, -13,                                 \
      "the model's logits have no finite maximum (NaN or infinity: corrupt or overflowing weights)")

enum {
    CK_OK = 0,
#define CK_X_(name, code, msg) CK_##name = code,
    CK_ERR_MAP(CK_X_)
#undef CK_X_
};

/* Message for a code ("success" for 0, "unknown error" for codes not in the
 * table). Never NULL; the string is static. */
const char *ck_strerror(int code);
/* Name of a code without the CK_ prefix ("EINVAL"), "OK" for 0. */
const char *ck_errname(int code);

#endif
