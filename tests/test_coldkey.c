/* test_coldkey.c - cold-store key names (coldkey.h).
 *
 * The expected keys are written out here by hand, as other instances,
 * older builds and the tests/svc scripts read them: a change in coldkey.c that
 * moves one byte of the wire format fails here. Then: round trips through
 * the parsers, refusals (long names and prefixes, small buffers, malformed
 * parts), the SCAN glob, and the engine's writers (tpl.c, sess.c,
 * pfx.c) putting exactly these keys, with COLD_PUT_PERSIST only for
 * template records. */
#include <stdint.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
#include "cold.h"
#include "coldkey.h"
#include "kvq.h"
#include "pfx.h"
#include "sess.h"
#include "tpl.h"

#define FP "0123456789abcdef"

static void test_exact(void) {
    char k[COLDKEY_NS_KEY_MAX];
    CK_CHECK(coldkey_pfx(k, sizeof k, NULL, FP, 0xabULL) == 37);
    CK_CHECK(!strcmp(k, "pfx:0123456789abcdef:00000000000000ab"));
    CK_CHECK(coldkey_pfx(k, sizeof k, "confkv:", "fedcba9876543210", 0xfedcba9876543210ULL) == 44);
    CK_CHECK(!strcmp(k, "confkv:pfx:fedcba9876543210:fedcba9876543210"));
    CK_CHECK(coldkey_sess(k, sizeof k, NULL, "alice") == 10 && !strcmp(k, "sess:alice"));
    CK_CHECK(coldkey_sess(k, sizeof k, "", "a:b") == 8 && !strcmp(k, "sess:a:b"));
    CK_CHECK(coldkey_tpl(k, sizeof k, NULL, "sys") == 7 && !strcmp(k, "tpl:sys"));
    CK_CHECK(coldkey_tpl(k, sizeof k, "confkv:", "fewshot.v2") == 21 && !strcmp(k, "confkv:tpl:fewshot.v2"));
    CK_CHECK(coldkey_tpl_uses(k, sizeof k, "confkv:") == 15 && !strcmp(k, "confkv:tpl-uses"));
    CK_CHECK(coldkey_tpl_uses(k, sizeof k, NULL) == 8 && !strcmp(k, "tpl-uses"));
    CK_CHECK(coldkey_kv(k, sizeof k, NULL, 0x1ULL, 0x7ULL, 3, 12) > 0);
    CK_CHECK(!strcmp(k, "kv:0000000000000001:0000000000000007:3:12"));
    CK_CHECK(coldkey_kv(k, sizeof k, "p:", UINT64_MAX, 0, 0, UINT32_MAX) > 0);
    CK_CHECK(!strcmp(k, "p:kv:ffffffffffffffff:0000000000000000:0:4294967295"));
}

static void test_round_trip(void) {
    char k[COLDKEY_NS_KEY_MAX], fp[17];
    const char *ns[] = {NULL, "", "confkv:", "a*b?[c]\\:"};
    for (int i = 0; i < 4; i++) {
        uint64_t hashes[] = {0, 1, 0x8000000000000000ULL, UINT64_MAX, 0x0123456789abcdefULL};
        for (int j = 0; j < 5; j++) {
            int n = coldkey_pfx(k, sizeof k, ns[i], "00000000DEADbeef", hashes[j]);
            uint64_t h = 0;
            CK_CHECK(n > 0 && coldkey_pfx_parse(k, (size_t)n, ns[i], fp, &h) == 0);
            CK_CHECK(h == hashes[j] && !strcmp(fp, "00000000DEADbeef"));
        }
        const char *name;
        size_t nl;
        int n = coldkey_tpl(k, sizeof k, ns[i], "a:b-c_d.e");
        CK_CHECK(n > 0 && coldkey_tpl_parse(k, (size_t)n, ns[i], &name, &nl) == 0);
        CK_CHECK(nl == 9 && !memcmp(name, "a:b-c_d.e", 9));
        n = coldkey_sess(k, sizeof k, ns[i], "user-42/s");
        CK_CHECK(n > 0 && coldkey_sess_parse(k, (size_t)n, ns[i], &name, &nl) == 0);
        CK_CHECK(nl == 9 && !memcmp(name, "user-42/s", 9));
        /* a key of one kind is no key of another */
        CK_CHECK(coldkey_tpl_parse(k, (size_t)n, ns[i], &name, &nl) == CK_EFORMAT);
        uint64_t a = 0, b = 0;
        int rec = -1;
        uint32_t gen = 0;
        n = coldkey_kv(k, sizeof k, ns[i], 0xdeadbeefcafef00dULL, 42, 2147483647, 4294967295u);
        CK_CHECK(n > 0 && coldkey_kv_parse(k, (size_t)n, ns[i], &a, &b, &rec, &gen) == 0);
        CK_CHECK(a == 0xdeadbeefcafef00dULL && b == 42 && rec == 2147483647 && gen == 4294967295u);
        CK_CHECK(coldkey_pfx_parse(k, (size_t)n, ns[i], fp, &a) == CK_EFORMAT);
    }
    /* A name may be any bytes once read back: the parser returns them as
     * they are, with their length (here with an embedded NUL). */
    const char *name;
    size_t nl;
    CK_CHECK(coldkey_tpl_parse("confkv:tpl:a\0b", 14, "confkv:", &name, &nl) == 0 && nl == 3 && name[1] == 0);
    CK_CHECK(coldkey_tpl_parse("confkv:tpl:", 11, "confkv:", &name, &nl) == 0 && nl == 0);
}

static void test_parse_refuses(void) {
    char fp[17];
    uint64_t h, a, b;
    int rec;
    uint32_t gen;
    const char *name;
    size_t nl;
    /* the use-count key is not a template record */
    CK_CHECK(coldkey_tpl_parse("confkv:tpl-uses", 15, "confkv:", &name, &nl) == CK_EFORMAT);
    /* another prefix */
    CK_CHECK(coldkey_tpl_parse("other:tpl:x", 11, "confkv:", &name, &nl) == CK_EFORMAT);
    CK_CHECK(coldkey_tpl_parse("confkv", 6, "confkv:", &name, &nl) == CK_EFORMAT);
    const char *bad_pfx[] = {"pfx:0123456789abcdef:00000000000000a",   /* 15 digits */
                             "pfx:0123456789abcdef:00000000000000abc", /* 17 */
                             "pfx:0123456789abcdef:00000000000000AB",  /* not as written */
                             "pfx:0123456789abcdeg:00000000000000ab",  /* fingerprint not hex */
                             "pfx:0123456789abcdef-00000000000000ab",  "pfx:", NULL};
    for (int i = 0; bad_pfx[i]; i++)
        CK_CHECK_MSG(coldkey_pfx_parse(bad_pfx[i], strlen(bad_pfx[i]), NULL, fp, &h) == CK_EFORMAT, "%s",
                     bad_pfx[i]);
    const char *bad_kv[] = {"kv:0000000000000001:0000000000000007:3",
                            "kv:0000000000000001:0000000000000007:3:",
                            "kv:0000000000000001:0000000000000007::1",
                            "kv:0000000000000001:0000000000000007:03:1",
                            "kv:0000000000000001:0000000000000007:-3:1",
                            "kv:0000000000000001:0000000000000007:3:1:2",
                            "kv:0000000000000001:0000000000000007:2147483648:1",
                            "kv:0000000000000001:0000000000000007:3:4294967296",
                            "kv:000000000000001:0000000000000007:3:1",
                            NULL};
    for (int i = 0; bad_kv[i]; i++)
        CK_CHECK_MSG(coldkey_kv_parse(bad_kv[i], strlen(bad_kv[i]), NULL, &a, &b, &rec, &gen) == CK_EFORMAT,
                     "%s", bad_kv[i]);
}

static void test_refusals(void) {
    char k[COLDKEY_NS_KEY_MAX];
    char name[COLDKEY_NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0; /* COLDKEY_NAME_MAX + 1 bytes: one too many */
    CK_CHECK(coldkey_sess(k, sizeof k, NULL, name) == CK_ETOOLONG && k[0] == 0);
    CK_CHECK(coldkey_tpl(k, sizeof k, NULL, name) == CK_ETOOLONG && k[0] == 0);
    name[COLDKEY_NAME_MAX] = 0; /* the longest allowed fits COLDKEY_MAX */
    char small[COLDKEY_MAX];
    CK_CHECK(coldkey_sess(small, sizeof small, NULL, name) == 5 + COLDKEY_NAME_MAX);
    CK_CHECK(!memcmp(small, "sess:nnn", 8) && strlen(small) == 5 + COLDKEY_NAME_MAX);
    /* empty or missing names, malformed parts */
    CK_CHECK(coldkey_sess(k, sizeof k, NULL, "") == CK_EINVAL);
    CK_CHECK(coldkey_tpl(k, sizeof k, NULL, NULL) == CK_EINVAL);
    CK_CHECK(coldkey_pfx(k, sizeof k, NULL, "deadbeef", 1) == CK_EINVAL);
    CK_CHECK(coldkey_pfx(k, sizeof k, NULL, "0123456789abcdef0", 1) == CK_EINVAL);
    CK_CHECK(coldkey_pfx(k, sizeof k, NULL, "0123456789abcdeg", 1) == CK_EINVAL);
    CK_CHECK(coldkey_pfx(k, sizeof k, NULL, NULL, 1) == CK_EINVAL);
    CK_CHECK(coldkey_kv(k, sizeof k, NULL, 1, 1, -1, 0) == CK_EINVAL);
    /* a prefix over COLDKEY_NS_MAX */
    char ns[COLDKEY_NS_MAX + 2];
    memset(ns, 'p', sizeof ns - 1);
    ns[sizeof ns - 1] = 0;
    CK_CHECK(coldkey_tpl_uses(k, sizeof k, ns) == CK_ETOOLONG);
    CK_CHECK(coldkey_tpl_glob(k, sizeof k, ns) == CK_ETOOLONG);
    ns[COLDKEY_NS_MAX] = 0;
    CK_CHECK(coldkey_tpl(k, sizeof k, ns, "x") == COLDKEY_NS_MAX + 5);
    /* a buffer one byte short, and one exactly right */
    char b8[8];
    CK_CHECK(coldkey_tpl(b8, 7, NULL, "sys") == CK_ETOOLONG && b8[0] == 0);
    CK_CHECK(coldkey_tpl(b8, 8, NULL, "sys") == 7 && !strcmp(b8, "tpl:sys"));
    CK_CHECK(coldkey_tpl_uses(b8, 8, NULL) == CK_ETOOLONG);
    CK_CHECK(coldkey_tpl_uses(k, 0, NULL) == CK_ETOOLONG);
}

static void test_glob(void) {
    char g[2 * COLDKEY_NS_MAX + 8];
    CK_CHECK(coldkey_tpl_glob(g, sizeof g, "confkv:") == 12 && !strcmp(g, "confkv:tpl:*"));
    CK_CHECK(coldkey_tpl_glob(g, sizeof g, "a*b?[c]\\") == 18 && !strcmp(g, "a\\*b\\?\\[c\\]\\\\tpl:*"));
    CK_CHECK(coldkey_tpl_glob(g, sizeof g, NULL) == 5 && !strcmp(g, "tpl:*"));
    CK_CHECK(coldkey_tpl_glob(g, 5, NULL) == CK_ETOOLONG && g[0] == 0);
    /* every prefix of the longest escapes fits the buffer the CLI gives */
    char ns[COLDKEY_NS_MAX + 1];
    memset(ns, '*', COLDKEY_NS_MAX);
    ns[COLDKEY_NS_MAX] = 0;
    CK_CHECK(coldkey_tpl_glob(g, sizeof g, ns) == 2 * COLDKEY_NS_MAX + 5);
}

static void drain(cold_store *cs) {
    for (int i = 0; i < 4; i++) cold_poll(cs);
}

/* The engine's writers put exactly the keys above, through a cold_store
 * (so without a prefix), and only template records persist. */
static void test_writers(void) {
    cold_store *cs = NULL;
    CK_CHECK(!cold_mem_new(&cs));
    tpl_cache *tc = NULL;
    CK_CHECK(!tpl_cache_new(4, 1000, cs, &tc));
    CK_CHECK(!tpl_cache_save(tc, "sys", "You are helpful.", 16, 0, 0));
    sess_config sc = {.max_sessions = 2, .max_tokens = 16, .vocab = 100, .fingerprint = FP, .cold = cs};
    sess_store *ss = NULL;
    CK_CHECK(!sess_new(&sc, &ss));
    int32_t ids[3] = {1, 2, 3};
    CK_CHECK(!sess_save(ss, "alice", ids, 3));
    kvq_shape sh = {.n_layers = 1, .block_size = 2, .kv_dim = 4};
    float blk[64] = {0};
    pfx_config pc = {.shape = sh, .budget_bytes = 2 * kvq_f32_bytes(&sh), .fingerprint = FP, .cold = cs};
    pfx *p = NULL;
    CK_CHECK(!pfx_new(&pc, &p));
    CK_CHECK(kvq_f32_bytes(&sh) <= sizeof blk);
    CK_CHECK(!pfx_insert(p, 0xabULL, 0, blk, PFX_PERSIST));
    drain(cs);
    CK_CHECK(cold_mem_put_flags(cs, "tpl:sys") == (int)COLD_PUT_PERSIST);
    CK_CHECK(cold_mem_put_flags(cs, "sess:alice") == 0);
    CK_CHECK(cold_mem_put_flags(cs, "pfx:0123456789abcdef:00000000000000ab") == 0);
    CK_CHECK(cold_mem_count(cs) == 3);
    CK_CHECK(cold_mem_put_flags(cs, "tpl:nope") == CK_ENOTFOUND);
    pfx_free(p);
    sess_free(ss);
    tpl_cache_free(tc);
    cold_free(cs);
}

int main(void) {
    CK_RUN(test_exact);
    CK_RUN(test_round_trip);
    CK_RUN(test_parse_refuses);
    CK_RUN(test_refusals);
    CK_RUN(test_glob);
    CK_RUN(test_writers);
    return ck_test_summary();
}
