/* cli_eval.c - `confkv eval`: quality against KV memory, per policy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "cli.h"
#include "eval.h"
#include "jw.h"
#include "kvpol.h"

#define EVAL_MAX_POLICIES 64

static void help(void) {
    printf("usage: confkv eval --model M [--tokenizer T] --prompts FILE [options]\n\n"
           "  --prompts FILE        one prompt per line\n"
           "  --probes FILE         long-range probes: NAME<TAB>PROMPT per line; scores how\n"
           "                        often each policy predicts NAME where the reference\n"
           "                        repeats it at position >= --probe-from (default 300)\n"
           "  --gen-tokens N        reference length per prompt (default 400)\n"
           "  --policies LIST       comma-separated (default "
           "full,window:128,sinks:128,h2o:128,conf,conf-int8);\n"
           "                        parameters follow a policy: conf:min_size=32,recent_window=16\n"
           "  --match-budget P      for every window/sinks/h2o policy, also a run whose\n"
           "                        budget gives P's kv_retained_mean (within 2%%)\n"
           "  --limit N             first N prompts only\n"
           "  --block-size N        KV block size (default: 16, or less for contexts\n"
           "                        under 2048 so a context has 128 blocks; 4 for stories260K)\n"
           "  --max-context N       context per sequence (default: the model's, at most 8192)\n"
           "  --max-memory-mb MB    refuse a memory plan larger than MB; shortens the\n"
           "                        default context to fit (docs/ARCHITECTURE.md, memory plan)\n"
           "  --verbose             print the memory plan on stderr\n"
           "  --json                JSON array of rows (default: a table)\n");
}

/* Split the list at commas, gluing "key=value" items to the policy before. */
static int split_policies(const char *list, char specs[][256], int max) {
    int n = 0;
    const char *p = list;
    while (*p) {
        size_t l = strcspn(p, ",");
        int is_param = memchr(p, '=', l) && !memchr(p, ':', l);
        if (is_param && n > 0) {
            size_t cur = strlen(specs[n - 1]);
            snprintf(specs[n - 1] + cur, 256 - cur, ",%.*s", (int)l, p);
        } else if (l > 0) {
            if (n == max) return -1;
            snprintf(specs[n++], 256, "%.*s", (int)l, p);
        }
        p += l;
        if (*p == ',') p++;
    }
    return n;
}

static void print_row(jw *w, const eval_row *r) {
    jw_obj(w);
    jw_key(w, "policy"), jw_str(w, r->policy);
    if (r->matched_to[0]) jw_key(w, "matched_to"), jw_str(w, r->matched_to);
    jw_key(w, "kv_retained_mean"), jw_num(w, r->kv_retained_mean);
    jw_key(w, "kv_retained_peak"), jw_num(w, r->kv_retained_peak);
    jw_key(w, "kv_hot_bytes_ratio"), jw_num(w, r->kv_hot_bytes_ratio);
    jw_key(w, "nll"), jw_num(w, r->nll);
    jw_key(w, "ppl"), jw_num(w, r->ppl);
    jw_key(w, "nll_delta_pct"), jw_num(w, r->nll_delta_pct);
    jw_key(w, "top1_agreement"), jw_num(w, r->top1_agreement);
    jw_key(w, "greedy_match_tokens_mean"), jw_num(w, r->greedy_match_tokens_mean);
    jw_key(w, "recalls_per_1k"), jw_num(w, r->recalls_per_1k);
    jw_key(w, "demotions_per_1k"), jw_num(w, r->demotions_per_1k);
    jw_key(w, "tokens_per_s"), jw_num(w, r->tokens_per_s);
    if (r->probe_occurrences) {
        jw_key(w, "probe_occurrences"), jw_int(w, r->probe_occurrences);
        jw_key(w, "probe_accuracy"), jw_num(w, r->probe_accuracy);
    }
    jw_obj_end(w);
}

int cli_eval_load_prompts(const cli_args *a, eval_ctx *e, const char *path, int probes, int probe_from,
                          int limit) {
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_error(a, "%s: cannot open", path);
        return 1;
    }
    char line[8192];
    int n = 0, lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f) && (!limit || n < limit)) {
        lineno++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
        if (!l) continue;
        char *text = line, *name = NULL;
        if (probes) {
            char *tab = strchr(line, '\t');
            if (!tab) {
                cli_error(a, "%s:%d: expected NAME<TAB>PROMPT", path, lineno);
                rc = 1;
                break;
            }
            *tab = 0;
            name = line;
            text = tab + 1;
        }
        int r = eval_add_prompt(e, text, name, probe_from);
        if (r) {
            cli_error(a, "%s:%d: %s", path, lineno, ck_strerror(r));
            rc = 1;
            break;
        }
        n++;
        if (n % 16 == 0) fprintf(stderr, "confkv eval: %d references from %s\n", n, path);
    }
    fclose(f);
    return rc;
}

int cli_eval(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "eval", 0};
    cli_engine_opts eo;
    cli_engine_opts_default(&eo);
    eo.threads = 1; /* the reference model is tiny: threads cost more than they give */
    const char *prompts = NULL, *probes = NULL, *match = NULL;
    const char *list = "full,window:128,sinks:128,h2o:128,conf,conf-int8";
    int gen = 400, json = 0, limit = 0, probe_from = 300;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_engine_flag(&a, &eo) || cli_str(&a, "--prompts", &prompts) ||
            cli_str(&a, "--probes", &probes) || cli_str(&a, "--policies", &list) ||
            cli_str(&a, "--match-budget", &match) || cli_int(&a, "--gen-tokens", 1, 1 << 20, &gen) ||
            cli_int(&a, "--limit", 0, 1 << 20, &limit) ||
            cli_int(&a, "--probe-from", 0, 1 << 20, &probe_from))
            continue;
        if (cli_flag(&a, "--json"))
            json = 1;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (!prompts && !probes) {
        cli_error(&a, "--prompts FILE (or --probes FILE) is required");
        return 2;
    }
    static char specs[EVAL_MAX_POLICIES][256];
    int np = split_policies(list, specs, EVAL_MAX_POLICIES);
    if (np <= 0) {
        cli_error(&a, "--policies: empty or more than %d", EVAL_MAX_POLICIES);
        return 2;
    }
    kvpol_config cfg[EVAL_MAX_POLICIES], match_cfg;
    char err[256];
    int need_int8 = 0, full_ix = -1, match_ix = -1;
    for (int i = 0; i < np; i++) {
        if (kvpol_parse(specs[i], &cfg[i], err, sizeof err)) {
            cli_error(&a, "policy '%s': %s", specs[i], err);
            return 2;
        }
        need_int8 |= cfg[i].cache_compression;
        if (cfg[i].kind == KVPOL_FULL && full_ix < 0) full_ix = i;
        if (match && !strcmp(specs[i], match)) match_ix = i;
    }
    if (match && match_ix < 0) {
        if (kvpol_parse(match, &match_cfg, err, sizeof err)) {
            cli_error(&a, "--match-budget '%s': %s", match, err);
            return 2;
        }
        need_int8 |= match_cfg.cache_compression;
    }
    eo.kv8_blocks = need_int8 ? -1 : 0;
    eo.max_batch_tokens = 512;
    cli_engine e;
    int rc = cli_engine_open(&a, &eo, &e);
    if (rc) return rc;
    eval_ctx *ev = NULL;
    eval_row *rows = calloc((size_t)np * 2 + 2, sizeof *rows);
    int nrows = 0, exit_code = 1;
    if (!rows || (rc = eval_new(e.m, e.b, &e.pool, &e.pool8, gen, &ev))) {
        cli_error(&a, "%s", ck_strerror(rc ? rc : CK_ENOMEM));
        goto out;
    }
    if ((prompts && cli_eval_load_prompts(&a, ev, prompts, 0, probe_from, limit)) ||
        (probes && cli_eval_load_prompts(&a, ev, probes, 1, probe_from, 0)))
        goto out;
    fprintf(stderr, "confkv eval: %d prompts x %d tokens\n", eval_n_prompts(ev), gen);

    /* The full cache first: every nll_delta_pct is relative to it. */
    kvpol_config full_cfg;
    kvpol_config_default(&full_cfg, KVPOL_FULL);
    eval_row full_row;
    if ((rc = eval_policy(ev, &full_cfg, 0, 0, &full_row))) goto fail;
    double full_nll = full_row.nll;
    double target = -1;
    for (int i = 0; i < np; i++) {
        fprintf(stderr, "confkv eval: %s\n", specs[i]);
        if ((rc = eval_policy(ev, &cfg[i], 1, full_nll, &rows[nrows]))) goto fail;
        if (i == match_ix) target = rows[nrows].kv_retained_mean;
        nrows++;
    }
    if (match) {
        if (target < 0) {
            eval_row r;
            if ((rc = eval_policy(ev, &match_cfg, 0, full_nll, &r))) goto fail;
            target = r.kv_retained_mean;
        }
        for (int i = 0; i < np; i++) {
            int k = cfg[i].kind;
            if (k != KVPOL_WINDOW && k != KVPOL_SINKS && k != KVPOL_H2O) continue;
            fprintf(stderr, "confkv eval: %s matched to %s (kv_retained_mean %.4f)\n", specs[i], match,
                    target);
            if ((rc = eval_match(ev, &cfg[i], target, 0.02, match, full_nll, &rows[nrows]))) goto fail;
            nrows++;
        }
    }
    if (json) {
        jw w;
        jw_init(&w, stdout);
        jw_arr(&w);
        for (int i = 0; i < nrows; i++) print_row(&w, &rows[i]);
        jw_arr_end(&w);
        putchar('\n');
    } else {
        printf("%-22s %-10s %8s %8s %8s %8s %9s %7s %8s %8s\n", "policy", "matched", "retained", "peak",
               "bytes", "nll", "dnll%", "top1", "greedy", "tok/s");
        for (int i = 0; i < nrows; i++) {
            const eval_row *r = &rows[i];
            printf("%-22s %-10s %8.4f %8.4f %8.4f %8.4f %9.3f %7.4f %8.1f %8.0f\n", r->policy,
                   r->matched_to[0] ? r->matched_to : "-", r->kv_retained_mean, r->kv_retained_peak,
                   r->kv_hot_bytes_ratio, r->nll, r->nll_delta_pct, r->top1_agreement,
                   r->greedy_match_tokens_mean, r->tokens_per_s);
        }
    }
    exit_code = 0;
    goto out;
fail:
    cli_error(&a, "%s", ck_strerror(rc));
out:
    eval_free(ev);
    free(rows);
    cli_engine_close(&e);
    return exit_code;
}
