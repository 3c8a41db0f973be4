/* svc_offmd.c - commit metadata: mark and finished set (svc_offmd.h). */
#include "svc_offmd.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ck_err.h"

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* The value of a base64url character, or -1. */
static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-') return 62;
    if (c == '_') return 63;
    return -1;
}

int svc_offmd_format(char *buf, size_t cap, int64_t mark, const uint8_t *done, int nbytes) {
    if (mark < 0 || nbytes < 0 || nbytes > SVC_OFFMD_DONE_MAX || (nbytes && !done)) return CK_EINVAL;
    while (nbytes > 0 && done[nbytes - 1] == 0) nbytes--;
    int n = snprintf(buf, cap, SVC_OFFMD_MARK_PREFIX "%" PRId64, mark);
    if (n < 0 || (size_t)n >= cap) return CK_ETOOLONG;
    if (!nbytes) return n;
    size_t pl = sizeof SVC_OFFMD_DONE_PREFIX - 1;
    size_t chars = ((size_t)nbytes * 8 + 5) / 6;
    if ((size_t)n + pl + chars >= cap) return CK_ETOOLONG;
    memcpy(buf + n, SVC_OFFMD_DONE_PREFIX, pl);
    char *w = buf + n + pl;
    /* 6 bits per character, from a bit accumulator: bytes in order, each
     * byte's bits most significant first (plain base64 order). */
    uint32_t acc = 0;
    int bits = 0;
    for (int i = 0; i < nbytes; i++) {
        acc = (acc << 8) | done[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            *w++ = b64url[(acc >> bits) & 63];
        }
    }
    if (bits) *w++ = b64url[(acc << (6 - bits)) & 63];
    *w = 0;
    return (int)(w - buf);
}

/* The digits of the mark: s[0..n) -> *v. 0 or -1. */
static int parse_mark(const char *s, size_t n, int64_t *v) {
    if (n < 1 || n > 19) return -1;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        if (x > (INT64_MAX - 9) / 10) return -1;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return 0;
}

/* The base64url text s[0..n) into out->done. 0, or -1 with *why. */
static int parse_done(const char *s, size_t n, svc_offmd *out, const char **why) {
    if (n == 0) return *why = "empty finished set", -1;
    if (n > ((size_t)SVC_OFFMD_DONE_MAX * 8 + 5) / 6) return *why = "finished set too long", -1;
    if (n % 4 == 1) return *why = "finished set: bad base64 length", -1;
    uint32_t acc = 0;
    int bits = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) return *why = "finished set: not base64url", -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (nb == SVC_OFFMD_DONE_MAX) return *why = "finished set too long", -1;
            out->done[nb++] = (uint8_t)(acc >> bits);
        }
    }
    if (acc & ((1u << bits) - 1)) return *why = "finished set: nonzero padding bits", -1;
    out->done_bytes = nb;
    return 0;
}

int svc_offmd_parse(const void *md, size_t n, svc_offmd *out, const char **why) {
    out->mark = -1;
    out->done_bytes = 0;
    *why = NULL;
    size_t pl = sizeof SVC_OFFMD_MARK_PREFIX - 1;
    if (!md || n < pl || memcmp(md, SVC_OFFMD_MARK_PREFIX, pl)) return 0; /* not ours */
    const char *s = (const char *)md + pl;
    size_t rest = n - pl;
    const char *semi = memchr(s, ';', rest);
    size_t ml = semi ? (size_t)(semi - s) : rest;
    int64_t mark;
    if (parse_mark(s, ml, &mark)) {
        *why = "mark: not 1 to 19 decimal digits";
        return CK_EINVAL;
    }
    out->mark = mark;
    if (!semi) return 0;
    size_t dl = sizeof SVC_OFFMD_DONE_PREFIX - 1;
    rest -= ml;
    if (rest < dl || memcmp(semi, SVC_OFFMD_DONE_PREFIX, dl)) {
        *why = "unknown section after the mark (not done.v1)";
        return CK_EINVAL;
    }
    if (parse_done(semi + dl, rest - dl, out, why)) {
        out->done_bytes = 0;
        return CK_EINVAL;
    }
    return 0;
}
