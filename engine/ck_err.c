/* ck_err.c - names and messages of the error codes (see ck_err.h). */
#include "ck_err.h"

const char *ck_strerror(int code) {
    switch (code) {
    case CK_OK: return "success";
#define CK_X_(name, c, msg) \
    case c: return msg;
        CK_ERR_MAP(CK_X_)
#undef CK_X_
    default: return "unknown error";
    }
}

const char *ck_errname(int code) {
    switch (code) {
    case CK_OK: return "OK";
#define CK_X_(name, c, msg) \
    case c: return #name;
        CK_ERR_MAP(CK_X_)
#undef CK_X_
    default: return "EUNKNOWN";
    }
}
