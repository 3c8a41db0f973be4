/* coldkey.c - cold-store key names (coldkey.h). */
#include "coldkey.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ck_err.h"

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int fingerprint_ok(const char *fp) {
    if (!fp) return 0;
    for (int i = 0; i < 16; i++)
        if (!is_hex(fp[i])) return 0;
    return fp[16] == 0;
}

/* snprintf's result: the length, or CK_ETOOLONG when it did not fit. */
static int finish(char *buf, size_t cap, int n) {
    if (n < 0 || (size_t)n >= cap) {
        if (cap) buf[0] = 0;
        return CK_ETOOLONG;
    }
    return n;
}

static int fail(char *buf, size_t cap, int rc) {
    if (buf && cap) buf[0] = 0;
    return rc;
}

static int ns_check(const char **ns) {
    if (!*ns) *ns = "";
    return strlen(*ns) > COLDKEY_NS_MAX ? CK_ETOOLONG : CK_OK;
}

static int name_check(const char *name) {
    if (!name || !name[0]) return CK_EINVAL;
    return strlen(name) > COLDKEY_NAME_MAX ? CK_ETOOLONG : CK_OK;
}

int coldkey_pfx(char *buf, size_t cap, const char *ns, const char *fingerprint, uint64_t hash) {
    int rc = ns_check(&ns);
    if (rc) return fail(buf, cap, rc);
    if (!buf || !fingerprint_ok(fingerprint)) return fail(buf, cap, CK_EINVAL);
    return finish(buf, cap, snprintf(buf, cap, "%spfx:%s:%016" PRIx64, ns, fingerprint, hash));
}

int coldkey_sess(char *buf, size_t cap, const char *ns, const char *id) {
    int rc = ns_check(&ns);
    if (!rc) rc = name_check(id);
    if (!rc && !buf) rc = CK_EINVAL;
    if (rc) return fail(buf, cap, rc);
    return finish(buf, cap, snprintf(buf, cap, "%ssess:%s", ns, id));
}

int coldkey_tpl(char *buf, size_t cap, const char *ns, const char *name) {
    int rc = ns_check(&ns);
    if (!rc) rc = name_check(name);
    if (!rc && !buf) rc = CK_EINVAL;
    if (rc) return fail(buf, cap, rc);
    return finish(buf, cap, snprintf(buf, cap, "%stpl:%s", ns, name));
}

int coldkey_tpl_uses(char *buf, size_t cap, const char *ns) {
    int rc = ns_check(&ns);
    if (!rc && !buf) rc = CK_EINVAL;
    if (rc) return fail(buf, cap, rc);
    return finish(buf, cap, snprintf(buf, cap, "%stpl-uses", ns));
}

int coldkey_kv(char *buf, size_t cap, const char *ns, uint64_t nonce, uint64_t instance, int record,
               uint32_t gen) {
    int rc = ns_check(&ns);
    if (!rc && (!buf || record < 0)) rc = CK_EINVAL;
    if (rc) return fail(buf, cap, rc);
    return finish(buf, cap,
                  snprintf(buf, cap, "%skv:%016" PRIx64 ":%016" PRIx64 ":%d:%" PRIu32, ns, nonce, instance,
                           record, gen));
}

int coldkey_tpl_glob(char *buf, size_t cap, const char *ns) {
    int rc = ns_check(&ns);
    if (!rc && !buf) rc = CK_EINVAL;
    if (rc) return fail(buf, cap, rc);
    size_t n = 0;
    for (const char *p = ns; *p; p++) {
        if (n + 2 >= cap) return fail(buf, cap, CK_ETOOLONG);
        if (strchr("*?[]\\", *p)) buf[n++] = '\\';
        buf[n++] = *p;
    }
    if (n + sizeof "tpl:*" > cap) return fail(buf, cap, CK_ETOOLONG);
    memcpy(buf + n, "tpl:*", sizeof "tpl:*");
    return (int)(n + sizeof "tpl:*" - 1);
}

/* ------------------------------------------------------------------ parsing */

/* The bytes after ns + tag, or NULL when key does not start so. */
static const char *after(const char *key, size_t len, const char *ns, const char *tag, size_t *rest) {
    if (!key) return NULL;
    size_t nl = ns ? strlen(ns) : 0, tl = strlen(tag);
    if (len < nl + tl || (nl && memcmp(key, ns, nl)) || memcmp(key + nl, tag, tl)) return NULL;
    *rest = len - nl - tl;
    return key + nl + tl;
}

/* Exactly 16 lowercase hex digits (what %016x writes). */
static int hex16(const char *s, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9')
            x = x << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            x = x << 4 | (uint64_t)(c - 'a' + 10);
        else
            return CK_EFORMAT;
    }
    *v = x;
    return CK_OK;
}

/* A decimal as %d / %u writes it (no sign, no leading zero), <= max. */
static int decimal(const char *s, size_t n, uint64_t max, uint64_t *v) {
    if (n == 0 || n > 10 || (n > 1 && s[0] == '0')) return CK_EFORMAT;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return CK_EFORMAT;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    if (x > max) return CK_EFORMAT;
    *v = x;
    return CK_OK;
}

int coldkey_pfx_parse(const char *key, size_t len, const char *ns, char fingerprint[17], uint64_t *hash) {
    size_t n;
    const char *s = after(key, len, ns, "pfx:", &n);
    if (!s || n != 16 + 1 + 16 || s[16] != ':') return CK_EFORMAT;
    for (int i = 0; i < 16; i++)
        if (!is_hex(s[i])) return CK_EFORMAT;
    uint64_t h;
    if (hex16(s + 17, &h)) return CK_EFORMAT;
    memcpy(fingerprint, s, 16);
    fingerprint[16] = 0;
    *hash = h;
    return CK_OK;
}

int coldkey_sess_parse(const char *key, size_t len, const char *ns, const char **id, size_t *id_len) {
    size_t n;
    const char *s = after(key, len, ns, "sess:", &n);
    if (!s) return CK_EFORMAT;
    *id = s;
    *id_len = n;
    return CK_OK;
}

int coldkey_tpl_parse(const char *key, size_t len, const char *ns, const char **name, size_t *name_len) {
    size_t n;
    const char *s = after(key, len, ns, "tpl:", &n);
    if (!s) return CK_EFORMAT;
    *name = s;
    *name_len = n;
    return CK_OK;
}

int coldkey_kv_parse(const char *key, size_t len, const char *ns, uint64_t *nonce, uint64_t *instance,
                     int *record, uint32_t *gen) {
    size_t n;
    const char *s = after(key, len, ns, "kv:", &n);
    if (!s || n < 16 + 1 + 16 + 1 + 1 + 1 + 1 || s[16] != ':' || s[33] != ':') return CK_EFORMAT;
    uint64_t a, b, r, g;
    const char *rs = s + 34, *end = s + n;
    const char *colon = memchr(rs, ':', (size_t)(end - rs));
    if (hex16(s, &a) || hex16(s + 17, &b) || !colon || decimal(rs, (size_t)(colon - rs), INT32_MAX, &r) ||
        decimal(colon + 1, (size_t)(end - colon - 1), UINT32_MAX, &g))
        return CK_EFORMAT;
    *nonce = a;
    *instance = b;
    *record = (int)r;
    *gen = (uint32_t)g;
    return CK_OK;
}
