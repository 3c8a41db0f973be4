/* cli_prom.h - read Prometheus' text exposition format (what /metrics
 * serves) for `confkv tune`.
 *
 * Only what the format says a line is: `# ...` comments (HELP/TYPE are not
 * needed here), and samples `name{label="value",...} value [timestamp]`.
 * Names match [a-zA-Z_:][a-zA-Z0-9_:]*, label values are double-quoted with
 * \\, \" and \n escapes, values are floats or +Inf/-Inf/NaN.
 *
 * Bounds: a name of at most CLI_PROM_NAME_MAX - 1 bytes, a label set of at
 * most CLI_PROM_LABELS_MAX - 1 bytes as re-printed, at most max_samples
 * samples; anything else is CK_EFORMAT (or CK_ETOOLONG for a bound) with the
 * line number in err. Labels are stored re-printed in canonical form
 * (`k="v",k2="v2"`, escapes kept), so matching is by text.
 *
 * Ownership: cli_prom_parse fills *out with malloc'd samples; cli_prom_free
 * frees them. tests/fuzz/fuzz_prom.c feeds cli_prom_parse. */
#ifndef CK_CLI_PROM_H
#define CK_CLI_PROM_H
#include <stddef.h>

#define CLI_PROM_NAME_MAX 128
#define CLI_PROM_LABELS_MAX 256

typedef struct cli_prom_sample {
    char name[CLI_PROM_NAME_MAX];
    char labels[CLI_PROM_LABELS_MAX];
    double value;
} cli_prom_sample;

typedef struct cli_prom {
    cli_prom_sample *s;
    int n;
} cli_prom;

int cli_prom_parse(const char *text, size_t len, int max_samples, cli_prom *out, char *err, size_t errlen);
void cli_prom_free(cli_prom *p);

/* The value of the first sample named `name` whose labels hold every pair of
 * `match` (a comma-separated `k="v"` list, or NULL/"" for any); NAN if none. */
double cli_prom_get(const cli_prom *p, const char *name, const char *match);
/* The sum over every sample named `name` matching `match`; 0 if none. */
double cli_prom_sum(const cli_prom *p, const char *name, const char *match);

/* A histogram `name` (its name_bucket samples matching `match`): upper
 * bounds le[] ascending (+Inf last) and cumulative counts cum[], at most cap;
 * returns how many buckets (0 when absent). */
int cli_prom_hist(const cli_prom *p, const char *name, const char *match, double *le, double *cum, int cap);
/* The q-quantile of such a histogram, interpolated linearly inside the
 * bucket as Prometheus' histogram_quantile does (the +Inf bucket answers the
 * highest finite bound, a first bucket whose bound is 0 or less that
 * bound); NAN for an empty one. */
double cli_prom_quantile(const double *le, const double *cum, int n, double q);

#endif
