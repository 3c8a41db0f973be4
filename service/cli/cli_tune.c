/* cli_tune.c - `confkv tune`: the tuning report operators ask for.
 *
 * Inputs: a running confkvd's /metrics (or a saved copy of one), and
 * optionally a sweep on the operator's own prompts with the model itself.
 * The report has
 *   - the distributions of the three signals and of the hot window
 *     (the per-job histograms confkvd exports), with the thresholds now;
 *   - the alerts of ops/prometheus/alerts.yml whose condition holds in
 *     this one scrape (counters are cumulative since confkvd started, so
 *     rates are since start: a snapshot, not Prometheus' windows);
 *   - with --eval-prompts: the frontier, memory kept against quality lost,
 *     of CONF-KV over a grid of its thresholds and budgets, measured by the
 *     eval harness (eval.h: forced runs for NLL, free greedy runs for the
 *     memory and the text a confkvd would produce);
 *   - the recommendation: the setting that keeps the least KV within the
 *     quality budget (--max-nll-loss, percent NLL over the full cache), with
 *     the memory it saves and the quality it costs.
 * Output: -o FILE.html (inline SVG) or FILE.md (SVG files beside it), and
 * --json (to stdout, or FILE.json with -o): `recommended` holds confkvd
 * config keys and values, `predicted` what they give on these prompts, and
 * `tolerance` how close a confkvd run with them should come. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "cli.h"
#include "cli_http.h"
#include "cli_prom.h"
#include "eval.h"
#include "jw.h"
#include "kvpol.h"

#define TUNE_MAX_METRICS_BYTES (16u << 20)
#define TUNE_MAX_SAMPLES 100000
#define TUNE_MAX_GRID 16
#define TUNE_MAX_BUCKETS 64
#define TUNE_MAX_ROWS (TUNE_MAX_GRID * TUNE_MAX_GRID + 2)

static void help(void) {
    printf(
        "usage: confkv tune (--metrics URL | --metrics-file FILE) [--eval-prompts F --model M [--tokenizer "
        "T]]\n"
        "                   [-o report.html|report.md] [--json] [options]\n\n"
        "  --metrics URL          a running confkvd's /metrics, http://HOST:PORT/metrics\n"
        "  --metrics-file FILE    a saved /metrics page instead\n"
        "  --eval-prompts FILE    one prompt per line: sweep CONF-KV's settings on them\n"
        "  --model M, --tokenizer T   the model confkvd serves (for the sweep)\n"
        "  --gen-tokens N         continuation per prompt in the sweep (default 128)\n"
        "  --limit N              first N prompts only\n"
        "  --entropy-grid LIST    entropy_threshold values, nats at 32k scale (default: the threshold now\n"
        "                         +-0.5, and the p10/p50/p90 of the jobs' mean entropy in /metrics)\n"
        "  --min-size-grid LIST   CONF-KV min_size values, tokens (default: now /2, x1, x2)\n"
        "  --max-nll-loss PCT     quality budget: NLL over the full cache, percent (default 1)\n"
        "  -o FILE                the report: .html (SVG inline) or .md (SVG files beside it);\n"
        "                         with --json, the JSON goes there instead\n"
        "  --json                 JSON with `recommended` (config keys), `predicted`, `tolerance`\n"
        "  plus the engine flags of `confkv eval` (--threads, --block-size, --max-context, ...)\n");
}

/* ---- the metrics side ------------------------------------------------ */

typedef struct signal_summary {
    const char *name, *metric, *unit;
    int n; /* buckets */
    double le[TUNE_MAX_BUCKETS], cum[TUNE_MAX_BUCKETS];
    double count, mean, p10, p50, p90;
} signal_summary;

typedef struct fired {
    const char *alert, *severity;
    char why[160];
} fired;

typedef struct metrics_view {
    int have;
    char source[256];
    signal_summary sig[4]; /* entropy, gap, pmax, kv_retained */
    double th[3];          /* current thresholds (NAN: not exported) */
    fired alerts[12];
    int n_alerts;
    double jobs, tokens;
} metrics_view;

static const char *const TH_PARAM[3] = {"entropy_threshold", "prob_gap_threshold", "max_prob_threshold"};

static int fetch_metrics(const cli_args *a, const char *url, const char *file, char **text, size_t *len) {
    char err[256];
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            cli_error(a, "%s: cannot open", file);
            return 1;
        }
        char *buf = malloc(TUNE_MAX_METRICS_BYTES + 1);
        size_t n = buf ? fread(buf, 1, TUNE_MAX_METRICS_BYTES + 1, f) : 0;
        fclose(f);
        if (!buf || n > TUNE_MAX_METRICS_BYTES) {
            free(buf);
            cli_error(a, "%s: %s", file, buf ? "larger than 16 MiB" : "out of memory");
            return 1;
        }
        buf[n] = 0;
        *text = buf, *len = n;
        return 0;
    }
    const char *hp = url;
    if (!strncmp(hp, "http://", 7)) hp += 7;
    const char *slash = strchr(hp, '/');
    char host[256];
    size_t hl = slash ? (size_t)(slash - hp) : strlen(hp);
    if (hl == 0 || hl >= sizeof host) {
        cli_error(a, "--metrics %s: expected http://HOST:PORT/PATH", url);
        return 2;
    }
    memcpy(host, hp, hl);
    host[hl] = 0;
    int status;
    int rc = cli_http_get(host, slash ? slash : "/metrics", 5000, TUNE_MAX_METRICS_BYTES, &status, text, len,
                          err, sizeof err);
    if (rc) {
        cli_error(a, "--metrics %s: %s", url, err);
        return 1;
    }
    if (status != 200) {
        cli_error(a, "--metrics %s: HTTP %d", url, status);
        free(*text);
        return 1;
    }
    return 0;
}

static void summarize(const cli_prom *p, signal_summary *s) {
    s->n = cli_prom_hist(p, s->metric, NULL, s->le, s->cum, TUNE_MAX_BUCKETS);
    char name[CLI_PROM_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s_count", s->metric);
    s->count = cli_prom_sum(p, name, NULL);
    snprintf(name, sizeof name, "%s_sum", s->metric);
    double sum = cli_prom_sum(p, name, NULL);
    s->mean = s->count > 0 ? sum / s->count : NAN;
    s->p10 = cli_prom_quantile(s->le, s->cum, s->n, 0.10);
    s->p50 = cli_prom_quantile(s->le, s->cum, s->n, 0.50);
    s->p90 = cli_prom_quantile(s->le, s->cum, s->n, 0.90);
}

static void add_alert(metrics_view *v, const char *alert, const char *sev, const char *fmt, double x) {
    if (v->n_alerts == (int)(sizeof v->alerts / sizeof v->alerts[0])) return;
    fired *f = &v->alerts[v->n_alerts++];
    f->alert = alert, f->severity = sev;
    snprintf(f->why, sizeof f->why, fmt, x);
}

/* The rules of ops/prometheus/alerts.yml that one scrape can evaluate. */
static void eval_alerts(const cli_prom *p, metrics_view *v) {
    double hot = cli_prom_get(p, "confkv_kv_bytes", "tier=\"hot\"");
    double cap = cli_prom_get(p, "confkv_kv_hot_capacity_bytes", NULL);
    if (cap > 0 && hot / cap >= 0.90)
        add_alert(v, "ConfkvKVBreakerEngaged", "critical", "hot KV pool %.0f%% full", 100 * hot / cap);
    if (cap > 0 && hot / cap > 0.85)
        add_alert(v, "ConfkvKVPoolHigh", "warning", "hot KV pool %.0f%% full", 100 * hot / cap);
    double trips = cli_prom_sum(p, "confkv_kv_breaker_trips_total", NULL);
    if (trips > 0 && !(cap > 0 && hot / cap >= 0.90))
        add_alert(v, "ConfkvKVBreakerEngaged", "critical", "breaker tripped %.0f times since start", trips);
    double hits = cli_prom_get(p, "confkv_cache_hits_total", "tier=\"hot\"");
    double looks = cli_prom_get(p, "confkv_cache_lookups_total", "tier=\"hot\"");
    if (looks > 0 && hits / looks < 0.80)
        add_alert(v, "ConfkvCacheHitRateLow", "warning", "hot hit rate %.0f%% since start",
                  100 * hits / looks);
    double le[TUNE_MAX_BUCKETS], cum[TUNE_MAX_BUCKETS];
    int n = cli_prom_hist(p, "confkv_request_seconds", NULL, le, cum, TUNE_MAX_BUCKETS);
    double p99 = cli_prom_quantile(le, cum, n, 0.99);
    if (p99 > 0.5) add_alert(v, "ConfkvLatencyP99High", "warning", "p99 job latency %.2f s since start", p99);
    double dl = cli_prom_sum(p, "confkv_dead_letters_total", NULL);
    if (dl > 0) add_alert(v, "ConfkvDeadLetters", "warning", "%.0f dead letters since start", dl);
    if (cli_prom_get(p, "confkv_redis_configured", NULL) == 1 &&
        cli_prom_get(p, "confkv_redis_up", NULL) == 0)
        add_alert(v, "ConfkvRedisDown", "critical", "Redis configured and down%.0s", 0);
    double inflight = cli_prom_sum(p, "confkv_jobs_inflight", NULL);
    if (inflight > 0 && cli_prom_sum(p, "confkv_jobs_total", NULL) == 0)
        add_alert(v, "ConfkvStalled", "critical", "%.0f jobs in flight, no result yet", inflight);
}

static int read_metrics(const cli_args *a, const char *url, const char *file, metrics_view *v) {
    char *text = NULL, err[256];
    size_t len = 0;
    int rc = fetch_metrics(a, url, file, &text, &len);
    if (rc) return rc;
    cli_prom p;
    if ((rc = cli_prom_parse(text, len, TUNE_MAX_SAMPLES, &p, err, sizeof err))) {
        cli_error(a, "%s: %s", file ? file : url, err);
        free(text);
        return 1;
    }
    free(text);
    v->have = 1;
    snprintf(v->source, sizeof v->source, "%s", file ? file : url);
    static const char *const names[4][3] = {{"entropy", "confkv_entropy_nats", "nats"},
                                            {"top-1 - top-2 gap", "confkv_prob_gap_ratio", "probability"},
                                            {"top-1 probability", "confkv_prob_max_ratio", "probability"},
                                            {"hot KV kept", "confkv_kv_retained_ratio", "fraction"}};
    for (int i = 0; i < 4; i++) {
        v->sig[i].name = names[i][0], v->sig[i].metric = names[i][1], v->sig[i].unit = names[i][2];
        summarize(&p, &v->sig[i]);
    }
    for (int i = 0; i < 3; i++) {
        char m[64];
        snprintf(m, sizeof m, "param=\"%s\"", TH_PARAM[i]);
        v->th[i] = cli_prom_get(&p, "confkv_policy_threshold", m);
    }
    v->jobs = cli_prom_sum(&p, "confkv_jobs_total", NULL);
    v->tokens = cli_prom_get(&p, "confkv_tokens_total", "kind=\"completion\"");
    eval_alerts(&p, v);
    cli_prom_free(&p);
    return 0;
}

/* ---- the sweep ------------------------------------------------------- */

typedef struct sweep_row {
    eval_row r;
    char spec[160]; /* the policy spec confkvd's `policy` key takes */
    float entropy_threshold;
    int min_size;
    int is_conf;
} sweep_row;

static int parse_list(const char *s, double *out, int max) {
    int n = 0;
    while (s && *s) {
        char *e;
        double x = strtod(s, &e);
        if (e == s || !isfinite(x) || n == max) return -1;
        out[n++] = x;
        s = *e == ',' ? e + 1 : e;
        if (*e && *e != ',') return -1;
    }
    return n;
}

static void conf_spec(const kvpol_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "conf:entropy_threshold=%.3g,min_size=%d,base_size=%d,max_size=%d",
             c->entropy_threshold, c->min_size, c->base_size, c->max_size);
}

/* ---- plots ----------------------------------------------------------- */

/* A bar chart of a histogram's per-bucket counts (from the cumulative
 * ones), with a marker at `mark` (a threshold; NAN for none). */
static void svg_hist(FILE *f, const signal_summary *s, double mark) {
    const int W = 420, H = 180, L = 40, B = 30;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
            "font-size=\"10\">\n",
            W, H);
    fprintf(f, "<text x=\"%d\" y=\"12\" font-size=\"12\">%s (%s), %.0f jobs</text>\n", L, s->name, s->unit,
            s->count);
    double maxc = 0;
    for (int i = 0; i < s->n; i++) {
        double c = s->cum[i] - (i ? s->cum[i - 1] : 0);
        if (c > maxc) maxc = c;
    }
    int nb = s->n;
    double bw = nb ? (double)(W - L - 10) / nb : 0;
    for (int i = 0; i < nb; i++) {
        double c = s->cum[i] - (i ? s->cum[i - 1] : 0);
        double h = maxc > 0 ? (H - B - 20) * c / maxc : 0;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4a7ab5\"/>\n",
                L + i * bw + 1, H - B - h, bw - 2, h);
        if (isinf(s->le[i]))
            fprintf(f, "<text x=\"%.1f\" y=\"%d\">+Inf</text>\n", L + i * bw, H - B + 12);
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%d\">%g</text>\n", L + i * bw, H - B + 12, s->le[i]);
        /* a threshold inside this bucket: a red line at its place in it */
        double lo = i ? s->le[i - 1] : 0;
        if (isfinite(mark) && mark > lo && (mark <= s->le[i] || isinf(s->le[i]))) {
            double fr = isinf(s->le[i]) ? 0 : (mark - lo) / (s->le[i] - lo);
            fprintf(
                f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"20\" y2=\"%d\" stroke=\"#c33\" stroke-width=\"2\"/>\n",
                L + (i + fr) * bw, L + (i + fr) * bw, H - B);
        }
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\">upper bound of the bucket (le)</text>\n", L, H - 4);
    fprintf(f, "</svg>\n");
}

/* Memory kept (x) against NLL lost (y), one dot per setting; the
 * recommendation ringed. */
static void svg_frontier(FILE *f, const sweep_row *rows, int n, int rec, double budget) {
    const int W = 480, H = 300, L = 50, B = 40;
    double ymax = budget * 2;
    for (int i = 0; i < n; i++)
        if (rows[i].r.nll_delta_pct > ymax) ymax = rows[i].r.nll_delta_pct;
    if (!(ymax > 0)) ymax = 1;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
            "font-size=\"10\">\n",
            W, H);
    fprintf(f, "<text x=\"%d\" y=\"12\" font-size=\"12\">quality lost against KV kept</text>\n", L);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", L, H - B, W - 10, H - B);
    fprintf(f, "<line x1=\"%d\" y1=\"20\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", L, L, H - B);
    for (int t = 0; t <= 4; t++) {
        double x = L + (W - L - 10) * t / 4.0, y = H - B - (H - B - 20) * t / 4.0;
        fprintf(f, "<text x=\"%.0f\" y=\"%d\">%.2f</text>\n", x - 8, H - B + 12, t / 4.0);
        fprintf(f, "<text x=\"4\" y=\"%.0f\">%.2f%%</text>\n", y + 3, ymax * t / 4.0);
    }
    double by = H - B - (H - B - 20) * budget / ymax;
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#c33\" stroke-dasharray=\"4\"/>\n",
            L, W - 10, by, by);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" fill=\"#c33\">budget %.2f%%</text>\n", W - 90, by - 3, budget);
    for (int i = 0; i < n; i++) {
        double x = L + (W - L - 10) * rows[i].r.kv_retained_mean;
        double y = H - B - (H - B - 20) * fmax(0, rows[i].r.nll_delta_pct) / ymax;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s</title></circle>\n", x, y,
                rows[i].is_conf ? "#4a7ab5" : "#888", rows[i].spec);
        if (i == rec)
            fprintf(f,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"7\" fill=\"none\" stroke=\"#c33\" "
                    "stroke-width=\"2\"/>\n",
                    x, y);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\">mean fraction of the KV kept hot (kv_retained_mean)</text>\n", L + 60,
            H - 6);
    fprintf(f, "</svg>\n");
}

/* ---- the report ------------------------------------------------------ */

typedef struct tune_out {
    const metrics_view *mv;
    const sweep_row *rows;
    int n_rows, rec, n_prompts, gen;
    double budget, full_nll;
    char rec_spec[256];
    double tol_retained, tol_match;
} tune_out;

static void write_json(FILE *f, const tune_out *o) {
    jw w;
    jw_init(&w, f);
    jw_obj(&w);
    if (o->mv->have) {
        jw_key(&w, "metrics_source"), jw_str(&w, o->mv->source);
        jw_key(&w, "signals"), jw_obj(&w);
        for (int i = 0; i < 4; i++) {
            const signal_summary *s = &o->mv->sig[i];
            jw_key(&w, s->metric), jw_obj(&w);
            jw_key(&w, "jobs"), jw_num(&w, s->count);
            jw_key(&w, "mean"), jw_num(&w, s->mean);
            jw_key(&w, "p10"), jw_num(&w, s->p10);
            jw_key(&w, "p50"), jw_num(&w, s->p50);
            jw_key(&w, "p90"), jw_num(&w, s->p90);
            jw_obj_end(&w);
        }
        jw_obj_end(&w);
        jw_key(&w, "thresholds_now"), jw_obj(&w);
        for (int i = 0; i < 3; i++) jw_key(&w, TH_PARAM[i]), jw_num(&w, o->mv->th[i]);
        jw_obj_end(&w);
        jw_key(&w, "alerts"), jw_arr(&w);
        for (int i = 0; i < o->mv->n_alerts; i++) {
            jw_obj(&w);
            jw_key(&w, "alert"), jw_str(&w, o->mv->alerts[i].alert);
            jw_key(&w, "severity"), jw_str(&w, o->mv->alerts[i].severity);
            jw_key(&w, "why"), jw_str(&w, o->mv->alerts[i].why);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
    }
    if (o->n_rows) {
        jw_key(&w, "prompts"), jw_int(&w, o->n_prompts);
        jw_key(&w, "gen_tokens"), jw_int(&w, o->gen);
        jw_key(&w, "max_nll_loss_pct"), jw_num(&w, o->budget);
        jw_key(&w, "frontier"), jw_arr(&w);
        for (int i = 0; i < o->n_rows; i++) {
            const eval_row *r = &o->rows[i].r;
            jw_obj(&w);
            jw_key(&w, "policy"), jw_str(&w, o->rows[i].spec);
            jw_key(&w, "kv_retained_mean"), jw_num(&w, r->kv_retained_mean);
            jw_key(&w, "free_kv_retained_mean"), jw_num(&w, r->free_kv_retained_mean);
            jw_key(&w, "nll_delta_pct"), jw_num(&w, r->nll_delta_pct);
            jw_key(&w, "greedy_match_tokens_mean"), jw_num(&w, r->greedy_match_tokens_mean);
            jw_key(&w, "top1_agreement"), jw_num(&w, r->top1_agreement);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        if (o->rec >= 0) {
            const eval_row *r = &o->rows[o->rec].r;
            jw_key(&w, "recommended"), jw_obj(&w);
            jw_key(&w, "policy"), jw_str(&w, o->rec_spec);
            jw_obj_end(&w);
            jw_key(&w, "predicted"), jw_obj(&w);
            jw_key(&w, "kv_retained_mean"), jw_num(&w, r->free_kv_retained_mean);
            jw_key(&w, "kv_saved_pct"), jw_num(&w, 100 * (1 - r->free_kv_retained_mean));
            jw_key(&w, "nll_delta_pct"), jw_num(&w, r->nll_delta_pct);
            jw_key(&w, "greedy_match_tokens_mean"), jw_num(&w, r->greedy_match_tokens_mean);
            jw_obj_end(&w);
            jw_key(&w, "tolerance"), jw_obj(&w);
            jw_key(&w, "kv_retained_mean"), jw_num(&w, o->tol_retained);
            jw_key(&w, "greedy_match_tokens_mean"), jw_num(&w, o->tol_match);
            jw_key(&w, "note"),
                jw_str(&w, "a confkvd running `recommended` on these prompts greedily "
                           "(temperature 0, max_tokens = gen_tokens) should give results whose "
                           "mean kv.retained_mean is within this of the prediction; the text "
                           "matches the full cache's for the predicted number of tokens within "
                           "this many");
            jw_obj_end(&w);
        } else {
            jw_key(&w, "recommended"), jw_null(&w);
        }
    }
    jw_obj_end(&w);
    fputc('\n', f);
}

/* Markdown or HTML: the same sections; plots inline (html) or as files
 * base-NAME.svg beside the report (md). */
static int write_report(const cli_args *a, const char *path, const tune_out *o) {
    size_t pl = strlen(path);
    int html = pl > 5 && (!strcmp(path + pl - 5, ".html") || !strcmp(path + pl - 4, ".htm"));
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_error(a, "%s: cannot write", path);
        return 1;
    }
    char base[1024];
    snprintf(base, sizeof base, "%.*s", (int)(pl > 3 && !strcmp(path + pl - 3, ".md") ? pl - 3 : pl), path);
    const char *h1 = html ? "<h1>%s</h1>\n" : "# %s\n\n", *h2 = html ? "<h2>%s</h2>\n" : "## %s\n\n";
    if (html)
        fprintf(f, "<!doctype html><html><head><meta charset=\"utf-8\"><title>confkv tuning report</title>"
                   "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{padding:2px 8px;"
                   "text-align:right}</style></head><body>\n");
    fprintf(f, h1, "confkv tuning report");
    if (o->mv->have) {
        fprintf(f, h2, "Signals");
        fprintf(f,
                html ? "<p>From %s: %.0f jobs, %.0f generated tokens. Per-job means; the red line is the "
                       "threshold now.</p>\n"
                     : "From %s: %.0f jobs, %.0f generated tokens. Per-job means; the red line is the "
                       "threshold now.\n\n",
                o->mv->source, o->mv->jobs, o->mv->tokens);
        fprintf(
            f,
            html ? "<table><tr><th>signal</th><th>jobs</th><th>mean</th><th>p10</th><th>p50</th><th>p90</th>"
                   "<th>threshold</th></tr>\n"
                 : "| signal | jobs | mean | p10 | p50 | p90 | threshold |\n| --- | --- | --- | --- | --- | "
                   "--- | --- |\n");
        for (int i = 0; i < 4; i++) {
            const signal_summary *s = &o->mv->sig[i];
            double th = i < 3 ? o->mv->th[i] : NAN;
            fprintf(f,
                    html ? "<tr><td>%s</td><td>%.0f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td>"
                           "<td>%.3f</td></tr>\n"
                         : "| %s | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                    s->name, s->count, s->mean, s->p10, s->p50, s->p90, th);
        }
        fprintf(f, html ? "</table>\n" : "\n");
        for (int i = 0; i < 4; i++) {
            double th = i < 3 ? o->mv->th[i] : NAN;
            if (html)
                svg_hist(f, &o->mv->sig[i], th);
            else {
                char sp[1100];
                snprintf(sp, sizeof sp, "%s-%d.svg", base, i);
                FILE *g = fopen(sp, "w");
                if (!g) {
                    fclose(f);
                    cli_error(a, "%s: cannot write", sp);
                    return 1;
                }
                svg_hist(g, &o->mv->sig[i], th);
                fclose(g);
                const char *leaf = strrchr(sp, '/');
                fprintf(f, "![%s](%s)\n\n", o->mv->sig[i].name, leaf ? leaf + 1 : sp);
            }
        }
        fprintf(f, h2, "Alerts");
        if (!o->mv->n_alerts)
            fprintf(f, html ? "<p>None of the rules that one scrape can evaluate holds.</p>\n"
                            : "None of the rules that one scrape can evaluate holds.\n\n");
        for (int i = 0; i < o->mv->n_alerts; i++)
            fprintf(f,
                    html ? "<p><b>%s</b> (%s): %s. See docs/ALERTS.md.</p>\n"
                         : "- **%s** (%s): %s. See docs/ALERTS.md.\n",
                    o->mv->alerts[i].alert, o->mv->alerts[i].severity, o->mv->alerts[i].why);
        fprintf(f, html ? "" : "\n");
    }
    if (o->n_rows) {
        fprintf(f, h2, "Memory against quality");
        fprintf(f,
                html
                    ? "<p>%d prompts, %d tokens each; NLL of the full cache's greedy continuation %.4f.</p>\n"
                    : "%d prompts, %d tokens each; NLL of the full cache's greedy continuation %.4f.\n\n",
                o->n_prompts, o->gen, o->full_nll);
        if (html)
            svg_frontier(f, o->rows, o->n_rows, o->rec, o->budget);
        else {
            char sp[1100];
            snprintf(sp, sizeof sp, "%s-frontier.svg", base);
            FILE *g = fopen(sp, "w");
            if (g) {
                svg_frontier(g, o->rows, o->n_rows, o->rec, o->budget);
                fclose(g);
                const char *leaf = strrchr(sp, '/');
                fprintf(f, "![frontier](%s)\n\n", leaf ? leaf + 1 : sp);
            }
        }
        fprintf(
            f, html ? "<table><tr><th>policy</th><th>KV kept</th><th>NLL +%%</th><th>greedy match</th></tr>\n"
                    : "| policy | KV kept | NLL +%% | greedy match (tokens) |\n| --- | --- | --- | --- |\n");
        for (int i = 0; i < o->n_rows; i++) {
            const eval_row *r = &o->rows[i].r;
            fprintf(f,
                    html ? "<tr><td>%s%s</td><td>%.3f</td><td>%.2f</td><td>%.1f</td></tr>\n"
                         : "| %s%s | %.3f | %.2f | %.1f |\n",
                    i == o->rec ? (html ? "&#9733; " : "**recommended** ") : "", o->rows[i].spec,
                    r->free_kv_retained_mean, r->nll_delta_pct, r->greedy_match_tokens_mean);
        }
        fprintf(f, html ? "</table>\n" : "\n");
        fprintf(f, h2, "Recommendation");
        if (o->rec >= 0) {
            const eval_row *r = &o->rows[o->rec].r;
            fprintf(
                f,
                html ? "<p><code>policy=%s</code>: keeps %.1f%% of the KV hot (saves %.1f%%) for %.2f%% more "
                       "NLL (budget %.2f%%).</p>\n"
                     : "`policy=%s`: keeps %.1f%% of the KV hot (saves %.1f%%) for %.2f%% more NLL (budget "
                       "%.2f%%).\n\n",
                o->rec_spec, 100 * r->free_kv_retained_mean, 100 * (1 - r->free_kv_retained_mean),
                r->nll_delta_pct, o->budget);
        } else {
            fprintf(
                f,
                html ? "<p>No CONF-KV setting of the grid stays within the %.2f%% budget: keep "
                       "<code>policy=full</code> or widen the grid.</p>\n"
                     : "No CONF-KV setting of the grid stays within the %.2f%% budget: keep `policy=full` or "
                       "widen the grid.\n\n",
                o->budget);
        }
    }
    if (html) fprintf(f, "</body></html>\n");
    int bad = ferror(f);
    if (fclose(f) || bad) {
        cli_error(a, "%s: write failed", path);
        return 1;
    }
    return 0;
}

/* The prompts, as `confkv eval` reads them (one a line); none is an error. */
static int load_prompts(const cli_args *a, eval_ctx *e, const char *path, int limit) {
    if (cli_eval_load_prompts(a, e, path, 0, 0, limit)) return 1;
    if (!eval_n_prompts(e)) {
        cli_error(a, "%s: no prompts", path);
        return 1;
    }
    return 0;
}

/* The default entropy grid when --entropy-grid is absent: where this load's
 * jobs are (the p10, p50 and p90 of their mean entropy in /metrics, in the
 * policy's units: nats for a 32k vocabulary, so divided by ln V / ln 32000),
 * and the threshold now with 0.5 nats either side. Sorted, duplicates out. */
static int entropy_grid(const metrics_view *mv, int vocab, double now, double *eg) {
    double lv = log((double)vocab) / log(32000.0);
    int n = 0;
    eg[n++] = now - 0.5, eg[n++] = now, eg[n++] = now + 0.5;
    const signal_summary *s = &mv->sig[0];
    if (mv->have && s->count > 0 && lv > 0) {
        double q[3] = {s->p10, s->p50, s->p90};
        for (int i = 0; i < 3; i++)
            if (isfinite(q[i]) && q[i] > 0) eg[n++] = q[i] / lv;
    }
    for (int i = 1; i < n; i++) /* insertion sort, then drop near-duplicates */
        for (int j = i; j > 0 && eg[j - 1] > eg[j]; j--) {
            double t = eg[j];
            eg[j] = eg[j - 1], eg[j - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (eg[i] > 0.05 && (!m || eg[i] - eg[m - 1] > 0.05)) eg[m++] = round(eg[i] * 100) / 100;
    return m;
}

static int sweep(const cli_args *a, cli_engine_opts *eo, const char *prompts, int gen, int limit,
                 const metrics_view *mv, double e_now, double *eg, int neg, const double *mg, int nmg,
                 sweep_row *rows, int *n_rows, int *n_prompts, double *full_nll) {
    cli_engine e;
    eo->kv8_blocks = 0;
    eo->max_batch_tokens = 512;
    int rc = cli_engine_open(a, eo, &e);
    if (rc) return rc;
    if (!neg) neg = entropy_grid(mv, e.m->cfg.vocab_size, e_now, eg);
    eval_ctx *ev = NULL;
    int exit_code = 1;
    if ((rc = eval_new(e.m, e.b, &e.pool, &e.pool8, gen, &ev))) {
        cli_error(a, "%s", ck_strerror(rc));
        goto out;
    }
    if (load_prompts(a, ev, prompts, limit)) goto out;
    *n_prompts = eval_n_prompts(ev);
    fprintf(stderr, "confkv tune: %d prompts x %d tokens, %d settings\n", *n_prompts, gen, neg * nmg + 1);
    kvpol_config full;
    kvpol_config_default(&full, KVPOL_FULL);
    int n = 0;
    if ((rc = eval_policy(ev, &full, 1, 0, &rows[n].r))) goto fail;
    *full_nll = rows[n].r.nll;
    snprintf(rows[n].spec, sizeof rows[n].spec, "full");
    rows[n++].is_conf = 0;
    if ((rc = eval_policy(ev, &full, 1, *full_nll, &rows[0].r))) goto fail; /* its own delta: 0 */
    for (int i = 0; i < neg; i++)
        for (int j = 0; j < nmg; j++) {
            kvpol_config c;
            kvpol_config_default(&c, KVPOL_CONF);
            /* the budget's span above its floor stays the default's */
            int span = c.max_size - c.min_size;
            c.entropy_threshold = (float)eg[i];
            c.min_size = (int)mg[j];
            c.base_size = c.min_size;
            c.max_size = c.min_size + span;
            sweep_row *r = &rows[n];
            r->entropy_threshold = c.entropy_threshold;
            r->min_size = c.min_size;
            r->is_conf = 1;
            fprintf(stderr, "confkv tune: entropy_threshold=%.3g min_size=%d\n", c.entropy_threshold,
                    c.min_size);
            if ((rc = eval_policy(ev, &c, 1, *full_nll, &r->r))) goto fail;
            conf_spec(&c, r->spec, sizeof r->spec);
            n++;
        }
    *n_rows = n;
    exit_code = 0;
    goto out;
fail:
    cli_error(a, "sweep: %s", ck_strerror(rc));
out:
    eval_free(ev);
    cli_engine_close(&e);
    return exit_code;
}

int cli_tune(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "tune", 0};
    cli_engine_opts eo;
    cli_engine_opts_default(&eo);
    eo.threads = 1;
    const char *url = NULL, *mfile = NULL, *prompts = NULL, *out = NULL, *egs = NULL, *mgs = NULL;
    int gen = 128, limit = 0, json = 0;
    float budget = 1.0f;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_engine_flag(&a, &eo) || cli_str(&a, "--metrics", &url) ||
            cli_str(&a, "--metrics-file", &mfile) || cli_str(&a, "--eval-prompts", &prompts) ||
            cli_str(&a, "-o", &out) || cli_str(&a, "--entropy-grid", &egs) ||
            cli_str(&a, "--min-size-grid", &mgs) || cli_int(&a, "--gen-tokens", 1, 1 << 16, &gen) ||
            cli_int(&a, "--limit", 0, 1 << 20, &limit) || cli_float(&a, "--max-nll-loss", 0, 1000, &budget))
            continue;
        if (cli_flag(&a, "--json"))
            json = 1;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (!url && !mfile && !prompts) {
        cli_error(&a, "nothing to report: give --metrics URL, --metrics-file FILE or --eval-prompts FILE");
        return 2;
    }
    if (url && mfile) {
        cli_error(&a, "--metrics and --metrics-file: one or the other");
        return 2;
    }
    if (prompts && !eo.model_path) {
        cli_error(&a, "--eval-prompts needs --model (and --tokenizer for a llama2.c checkpoint)");
        return 2;
    }
    if (!out && !json) {
        cli_error(&a, "-o FILE (.html or .md) or --json");
        return 2;
    }
    static metrics_view mv;
    memset(&mv, 0, sizeof mv);
    for (int i = 0; i < 3; i++) mv.th[i] = NAN;
    int rc;
    if ((url || mfile) && (rc = read_metrics(&a, url, mfile, &mv))) return rc;

    tune_out o = {.mv = &mv, .rec = -1, .budget = budget, .gen = gen, .tol_retained = 0.02, .tol_match = 0};
    static sweep_row rows[TUNE_MAX_ROWS];
    if (prompts) {
        kvpol_config d;
        kvpol_config_default(&d, KVPOL_CONF);
        double base_e = isfinite(mv.th[0]) ? mv.th[0] : d.entropy_threshold;
        double eg[TUNE_MAX_GRID];
        double mg[TUNE_MAX_GRID] = {d.min_size / 2, d.min_size, d.min_size * 2};
        int neg = 0, nmg = 3;
        if (egs && (neg = parse_list(egs, eg, TUNE_MAX_GRID)) <= 0) {
            cli_error(&a, "--entropy-grid: a comma-separated list of at most %d numbers", TUNE_MAX_GRID);
            return 2;
        }
        if (mgs && (nmg = parse_list(mgs, mg, TUNE_MAX_GRID)) <= 0) {
            cli_error(&a, "--min-size-grid: a comma-separated list of at most %d numbers", TUNE_MAX_GRID);
            return 2;
        }
        for (int i = 0; i < neg; i++)
            if (!(eg[i] > 0 && eg[i] <= 100)) {
                cli_error(&a, "entropy_threshold %g is outside (0, 100]", eg[i]);
                return 2;
            }
        for (int i = 0; i < nmg; i++)
            if (!(mg[i] >= 1 && mg[i] <= 1 << 24)) {
                cli_error(&a, "min_size %g is outside 1..%d", mg[i], 1 << 24);
                return 2;
            }
        if ((rc = sweep(&a, &eo, prompts, gen, limit, &mv, base_e, eg, neg, mg, nmg, rows, &o.n_rows,
                        &o.n_prompts, &o.full_nll)))
            return rc;
        o.rows = rows;
        /* the least KV within the quality budget; ties to the lower loss */
        for (int i = 0; i < o.n_rows; i++) {
            if (!rows[i].is_conf || !(rows[i].r.nll_delta_pct <= budget)) continue;
            if (o.rec < 0 || rows[i].r.free_kv_retained_mean < rows[o.rec].r.free_kv_retained_mean ||
                (rows[i].r.free_kv_retained_mean == rows[o.rec].r.free_kv_retained_mean &&
                 rows[i].r.nll_delta_pct < rows[o.rec].r.nll_delta_pct))
                o.rec = i;
        }
        if (o.rec >= 0) snprintf(o.rec_spec, sizeof o.rec_spec, "%s", rows[o.rec].spec);
        /* confkvd runs the same engine code greedily (one token pipeline);
         * what can differ is summation order in batched products, which can
         * flip a near-tie argmax: allow 0.02 of retained and 5% of the
         * tokens. */
        o.tol_retained = 0.02;
        o.tol_match = 0.05 * gen;
    }
    if (out && !json && write_report(&a, out, &o)) return 1;
    if (json) {
        FILE *f = out ? fopen(out, "w") : stdout;
        if (!f) {
            cli_error(&a, "%s: cannot write", out);
            return 1;
        }
        write_json(f, &o);
        if (out && fclose(f)) {
            cli_error(&a, "%s: write failed", out);
            return 1;
        }
    }
    return 0;
}
