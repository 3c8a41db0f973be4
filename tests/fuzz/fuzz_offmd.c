/* fuzz_offmd.c - the commit metadata reader (service/svc_offmd.h), which
 * reads what the broker returns with a committed offset, and its use by the
 * offset bookkeeping (svc_offsets_committed, svc_offsets_metadata).
 *
 * Input: the metadata. Checked: a refusal names its reason and carries no
 * finished set; an accepted set is within SVC_OFFMD_DONE_MAX bytes; the
 * writer's form of what was read parses back to the same mark and set
 * (trailing zero bytes aside); a consumer that takes the set over commits
 * exactly that set again before consuming anything, and skips exactly the
 * offsets in it. */
#include "ck_err.h"
#include "fuzz.h"
#include "svc_offmd.h"
#include "svc_offsets.h"

typedef struct fz {
    svc_offsets *o;
    int skipped, dispatched;
} fz;

static void f_dispatch(void *ud, void *msg, svc_offsets_tok tok) {
    (void)msg;
    (void)tok;
    ((fz *)ud)->dispatched++;
}
static void f_drop(void *ud, void *msg) { (void)ud, (void)msg; }
static void f_commit(void *ud) { (void)ud; }
static void f_skip(void *ud, void *msg, svc_offsets_tok tok) {
    (void)msg;
    (void)tok;
    ((fz *)ud)->skipped++;
}

static svc_offmd md, back;
static char buf[SVC_OFFMD_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *why = NULL;
    int rc = svc_offmd_parse(data, size, &md, &why);
    if (rc) {
        FUZZ_CHECK(rc == CK_EINVAL && why && *why && md.done_bytes == 0);
        return 0;
    }
    FUZZ_CHECK(md.done_bytes >= 0 && md.done_bytes <= SVC_OFFMD_DONE_MAX);
    FUZZ_CHECK(md.mark >= -1 && (md.mark >= 0 || md.done_bytes == 0));
    if (md.mark < 0) return 0;
    int n = svc_offmd_format(buf, sizeof buf, md.mark, md.done, md.done_bytes);
    FUZZ_CHECK(n > 0 && n < SVC_OFFMD_MAX);
    FUZZ_CHECK(svc_offmd_parse(buf, (size_t)n, &back, &why) == 0 && back.mark == md.mark);
    int nb = md.done_bytes;
    while (nb > 0 && md.done[nb - 1] == 0) nb--;
    FUZZ_CHECK(back.done_bytes == nb && !memcmp(back.done, md.done, (size_t)nb));

    /* a next owner takes the set over */
    fz f = {0};
    svc_offsets_config c;
    svc_offsets_config_default(&c);
    c.cbs = (svc_offsets_cbs){&f, f_dispatch, f_drop, NULL, f_commit, f_skip};
    if (svc_offsets_new(&c, &f.o)) return 0;
    uint32_t agen;
    const int64_t base = 1000;
    if (!svc_offsets_assign(f.o, 0, 1) && svc_offsets_unknown(f.o, 0, &agen)) {
        /* a mark past every offset of the set: nothing is held */
        int64_t mark = base + (int64_t)SVC_OFFMD_DONE_MAX * 8 + 1;
        FUZZ_CHECK(svc_offsets_committed(f.o, 0, agen, base, mark, md.done, md.done_bytes) == 1);
        int left = -1;
        n = svc_offsets_metadata(f.o, 0, base, mark, buf, sizeof buf, &left);
        FUZZ_CHECK(n > 0 && left == 0);
        FUZZ_CHECK(svc_offmd_parse(buf, (size_t)n, &back, &why) == 0 && back.done_bytes == nb &&
                   !memcmp(back.done, md.done, (size_t)nb));
        int want = 0;
        for (int i = 0; i < nb * 8; i++) want += md.done[i / 8] >> (i % 8) & 1;
        for (int64_t i = 0; i < (int64_t)nb * 8; i++)
            FUZZ_CHECK(svc_offsets_consumed(f.o, 0, base + i, (void *)(intptr_t)(i + 1)) == 0);
        FUZZ_CHECK(f.skipped == want && f.dispatched == nb * 8 - want);
    }
    svc_offsets_free(f.o);
    return 0;
}
