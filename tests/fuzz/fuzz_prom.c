/* fuzz_prom.c - the Prometheus text reader of `confkv tune` (cli_prom.h),
 * which reads a /metrics page over HTTP or from a file.
 *
 * Input: the page. Checked: the parse returns 0 with at most max samples,
 * each with a NUL-terminated name and label set within their bounds, or
 * an error with a NUL-terminated sentence in err; the lookups and the
 * histogram reader run over what was parsed without reading past it, and a
 * quantile of a histogram is NaN or within its finite bounds. */
#include <math.h>

#include "cli_prom.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cli_prom p;
    char err[256];
    err[0] = 0;
    int rc = cli_prom_parse((const char *)data, size, 512, &p, err, sizeof err);
    if (rc) {
        FUZZ_CHECK(p.n == 0 && p.s == NULL);
        FUZZ_CHECK(memchr(err, 0, sizeof err) && err[0]);
        return 0;
    }
    FUZZ_CHECK(p.n <= 512);
    for (int i = 0; i < p.n; i++) {
        FUZZ_CHECK(memchr(p.s[i].name, 0, sizeof p.s[i].name));
        FUZZ_CHECK(memchr(p.s[i].labels, 0, sizeof p.s[i].labels));
    }
    if (p.n) {
        const cli_prom_sample *s = &p.s[p.n - 1];
        double v = cli_prom_get(&p, s->name, s->labels);
        FUZZ_CHECK(isnan(v) || isnan(s->value) || v == v);
        (void)cli_prom_sum(&p, s->name, NULL);
        double le[32], cum[32];
        size_t nl = strlen(s->name);
        char base[CLI_PROM_NAME_MAX];
        snprintf(base, sizeof base, "%.*s",
                 (int)(nl > 7 && !strcmp(s->name + nl - 7, "_bucket") ? nl - 7 : nl), s->name);
        int n = cli_prom_hist(&p, base, NULL, le, cum, 32);
        FUZZ_CHECK(n >= 0 && n <= 32);
        for (int i = 1; i < n; i++) FUZZ_CHECK(le[i - 1] <= le[i]);
        double q = cli_prom_quantile(le, cum, n, 0.99);
        if (!isnan(q) && n) {
            double hi = isinf(le[n - 1]) ? (n > 1 ? le[n - 2] : 0) : le[n - 1];
            FUZZ_CHECK(q <= hi || isinf(hi) || isnan(hi) || q <= fmax(hi, le[n - 1]));
        }
    }
    cli_prom_free(&p);
    return 0;
}
