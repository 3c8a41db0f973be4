/* cli_route_eval.c - `confkv route-eval`: what the cascade's rule keeps on
 * the small model, and the quality it costs.
 *
 * Per prompt, everything the rows need is computed once:
 *  - ref: the LARGE model's greedy continuation of G tokens (full cache, EOS
 *    does not stop it: the eval harness's reference, eval.h);
 *  - lp_large, lp_small: log p of each ref token under each model (teacher
 *    forcing; the small model under --policy, as it runs in the service);
 *  - the SMALL model's own greedy generation (under --policy, stopping at
 *    EOS as a job does, at most G tokens) with its confidence trace.
 * Each rule then sees the trace exactly as confkvd feeds it (svc_route_feed
 * per appended token; the EOS step is no token of the job) and yields A:
 * the small model's tokens the large one continues after, or G when the job
 * stays small. The cascade's score of the reference puts positions < A on
 * the small model and the rest on the large one. Every run is gen_run, so
 * the tokens and their confidence come from the engine's token pipeline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "cli.h"
#include "jw.h"
#include "kvpol.h"
#include "svc_route.h"
#include "tier.h"
#include "tokenizer.h"

#define RE_MAX_RULES 32
#define RE_LINE 8192 /* longest prompt line, as `confkv eval` */

static void help(void) {
    printf("usage: confkv route-eval --small M --large M --prompts FILE [options]\n\n"
           "For each prompt: the large model's greedy continuation (the reference), the\n"
           "small model's own generation fed to each rule as confkvd feeds it, and the\n"
           "reference's NLL with positions before the rule's at_token scored by the small\n"
           "model, the rest by the large one (a job kept on small: all by small).\n\n"
           "  --small PATH            small model (GGUF or llama2.c checkpoint)\n"
           "  --small-tokenizer PATH  its tokenizer (llama2.c checkpoints)\n"
           "  --large PATH            large model; same vocabulary as the small one\n"
           "  --large-tokenizer PATH  its tokenizer (llama2.c checkpoints)\n"
           "  --prompts FILE          one prompt per line (empty lines skipped)\n"
           "  --gen-tokens N          reference length per prompt (default 64)\n"
           "  --rule R                a routing rule (repeatable; default " SVC_ROUTE_DEFAULT ")\n"
           "                          grammar: service/svc_route.h, e.g. tokens=16,mean_entropy>1.5\n"
           "  --policy P              the small model's KV policy (default full)\n"
           "  --limit N               first N prompts only\n"
           "  --threads N             CPU threads per model (default 1)\n"
           "  --json                  one JSON object (default: a table)\n\n"
           "Rows: small (every job on small), large (every job on large), one per rule.\n"
           "Exit 2 when a rule or the policy does not parse, or the vocabularies differ.\n");
}

/* One row: the sums over prompts, then the figures. */
typedef struct re_row {
    char name[160];
    int kind; /* 0 small, 1 large, 2 rule */
    svc_route_rule rule;
    long kept, escalated;
    double sum_at;    /* of escalated jobs */
    double sum_nll;   /* -log p over every reference token, in order */
    long small_steps; /* reference positions scored by small */
} re_row;

/* 0 when the two vocabularies are one (tok_vocab_diff: size, BOS, EOS and
 * every piece in its GGUF form, so a llama2.c file and its conversion are
 * one), else 2 after saying where they differ (1: out of memory). */
static int same_vocab(const cli_args *a, const model *s, const model *l) {
    const tokenizer *ts = s->tok, *tl = l->tok;
    int n = tok_vocab_size(ts);
    if (n != tok_vocab_size(tl) || s->cfg.vocab_size != l->cfg.vocab_size) {
        cli_error(a, "the vocabularies differ: %d tokens (small) against %d (large)", s->cfg.vocab_size,
                  l->cfg.vocab_size);
        return 2;
    }
    if (tok_bos(ts) != tok_bos(tl) || tok_eos(ts) != tok_eos(tl)) {
        cli_error(a, "the vocabularies differ: bos/eos %d/%d (small) against %d/%d (large)", tok_bos(ts),
                  tok_eos(ts), tok_bos(tl), tok_eos(tl));
        return 2;
    }
    int id = tok_vocab_diff(ts, tl); /* sizes, BOS and EOS agree: a piece, if anything */
    if (id == CK_ENOMEM) {
        cli_error(a, "%s", ck_strerror(CK_ENOMEM));
        return 1;
    }
    if (id >= 0) {
        char ps[64] = "", pl[64] = "";
        size_t n1, n2;
        tok_piece_gguf(ts, id, ps, sizeof ps, &n1); /* for the message; a longer piece prints empty */
        tok_piece_gguf(tl, id, pl, sizeof pl, &n2);
        cli_error(a, "the vocabularies differ at token %d ('%s' against '%s')", id, ps, pl);
        return 2;
    }
    return 0;
}

/* Add one prompt's reference (n tokens) to a row whose jobs hand over at
 * position at (n: kept on small throughout, 0: large throughout). The sum
 * runs in position order so that a row scored all by one model equals that
 * model's row exactly, and the large row equals `confkv eval`'s full row. */
static void row_add(re_row *r, int at, const double *lp_small, const double *lp_large, int n) {
    if (at > n) at = n;
    for (int t = 0; t < n; t++) r->sum_nll -= t < at ? lp_small[t] : lp_large[t];
    r->small_steps += at;
}

typedef struct re_fig {
    double share_kept, mean_at, nll, ppl, dnll, small_share;
} re_fig;

static re_fig figures(const re_row *r, long steps, int n_prompts, double large_nll) {
    re_fig f;
    double n = steps ? (double)steps : 1;
    f.share_kept = n_prompts ? (double)r->kept / n_prompts : 0;
    f.mean_at = r->escalated ? r->sum_at / (double)r->escalated : 0;
    f.nll = r->sum_nll / n;
    f.ppl = exp(f.nll);
    f.dnll = large_nll > 0 ? 100.0 * (f.nll - large_nll) / large_nll : 0;
    f.small_share = (double)r->small_steps / n;
    return f;
}

/* The pieces one model needs: engine, sequence, optional policy. */
typedef struct re_model {
    cli_engine e;
    gen_ctx *g;
    tier *warm;
    kvpol *pol;
} re_model;

static int model_open(const cli_args *a, const char *path, const char *tok, int threads,
                      const kvpol_config *pc, re_model *rm) {
    memset(rm, 0, sizeof *rm);
    cli_engine_opts eo;
    cli_engine_opts_default(&eo);
    eo.model_path = path;
    eo.tokenizer_path = tok;
    eo.threads = threads;
    eo.max_batch_tokens = 512; /* as `confkv eval`: the same prefill chunks */
    eo.kv8_blocks = pc && pc->cache_compression ? -1 : 0;
    int rc = cli_engine_open(a, &eo, &rm->e);
    if (rc) return rc;
    if ((rc = gen_new(rm->e.m, rm->e.b, &rm->e.pool, 0, &rm->g))) goto fail;
    if (pc && !kvpol_keeps_all(pc)) {
        tier_config tc;
        tier_config_default(&tc, rm->e.b);
        tc.compress = pc->cache_compression;
        if ((rc = tier_new(&tc, &rm->warm)) ||
            (rc = kvpol_new(pc, rm->e.b, &rm->e.pool, &rm->e.pool8, rm->warm, &rm->pol)))
            goto fail;
        gen_set_policy(rm->g, rm->pol);
    }
    return 0;
fail:
    cli_error(a, "%s: %s", path, ck_strerror(rc));
    return 1;
}

static void model_close(re_model *rm) {
    gen_free(rm->g);
    kvpol_free(rm->pol);
    tier_free(rm->warm);
    cli_engine_close(&rm->e);
    memset(rm, 0, sizeof *rm);
}

/* Teacher-force ref through a model: lp gets log p per position. */
static int forced(re_model *rm, const int32_t *ids, int n, const int32_t *ref, int n_ref, double *lp) {
    gen_params gp;
    gen_params_default(&gp);
    gp.samp.temperature = 0;
    gp.force = ref;
    gp.n_force = n_ref;
    gen_result r;
    int rc = gen_run(rm->g, ids, n, &gp, &r);
    if (rc) return rc;
    if (r.n_tokens != n_ref) rc = CK_ESTATE; /* the context was checked to hold it */
    for (int t = 0; !rc && t < n_ref; t++) lp[t] = r.logp[t];
    gen_result_free(&r);
    return rc;
}

static void print_json(const char *small, const char *large, const char *policy, int gen, int n_prompts,
                       long steps, const re_row *rows, int nrows, double large_nll) {
    jw w;
    jw_init(&w, stdout);
    jw_obj(&w);
    jw_key(&w, "small"), jw_str(&w, small);
    jw_key(&w, "large"), jw_str(&w, large);
    jw_key(&w, "policy"), jw_str(&w, policy);
    jw_key(&w, "gen_tokens"), jw_int(&w, gen);
    jw_key(&w, "prompts"), jw_int(&w, n_prompts);
    jw_key(&w, "reference_tokens"), jw_int(&w, (int)steps);
    jw_key(&w, "rows"), jw_arr(&w);
    for (int i = 0; i < nrows; i++) {
        const re_row *r = &rows[i];
        re_fig f = figures(r, steps, n_prompts, large_nll);
        jw_obj(&w);
        jw_key(&w, "rule"), jw_str(&w, r->name);
        jw_key(&w, "share_kept"), jw_num(&w, f.share_kept);
        jw_key(&w, "escalated"), jw_int(&w, (int)r->escalated);
        jw_key(&w, "mean_at_token"), jw_num(&w, f.mean_at);
        jw_key(&w, "nll"), jw_num(&w, f.nll);
        jw_key(&w, "ppl"), jw_num(&w, f.ppl);
        jw_key(&w, "nll_delta_pct"), jw_num(&w, f.dnll);
        jw_key(&w, "small_token_share"), jw_num(&w, f.small_share);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    putchar('\n');
}

int cli_route_eval(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "route-eval", 0};
    const char *small = NULL, *small_tok = NULL, *large = NULL, *large_tok = NULL, *prompts = NULL;
    const char *policy = "full", *specs[RE_MAX_RULES];
    int gen = 64, threads = 1, limit = 0, json = 0, nspec = 0;
    while (a.i < a.argc && !a.bad) {
        const char *rule = NULL;
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_str(&a, "--rule", &rule)) {
            if (!rule) continue; /* cli_str said what is missing */
            if (nspec == RE_MAX_RULES) {
                cli_error(&a, "more than %d --rule flags", RE_MAX_RULES);
                return 2;
            }
            specs[nspec++] = rule;
            continue;
        }
        if (cli_str(&a, "--small", &small) || cli_str(&a, "--small-tokenizer", &small_tok) ||
            cli_str(&a, "--large", &large) || cli_str(&a, "--large-tokenizer", &large_tok) ||
            cli_str(&a, "--prompts", &prompts) || cli_str(&a, "--policy", &policy) ||
            cli_int(&a, "--gen-tokens", 1, 1 << 20, &gen) || cli_int(&a, "--threads", 0, 1024, &threads) ||
            cli_int(&a, "--limit", 0, 1 << 20, &limit))
            continue;
        if (cli_flag(&a, "--json"))
            json = 1;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (!small || !large || !prompts) {
        cli_error(&a, "--small, --large and --prompts are required");
        return 2;
    }
    if (!nspec) specs[nspec++] = SVC_ROUTE_DEFAULT;
    /* Rows: small, large, then one per rule. */
    re_row *rows = calloc((size_t)nspec + 2, sizeof *rows);
    if (!rows) {
        cli_error(&a, "%s", ck_strerror(CK_ENOMEM));
        return 1;
    }
    char err[256];
    snprintf(rows[0].name, sizeof rows[0].name, "small");
    snprintf(rows[1].name, sizeof rows[1].name, "large");
    rows[1].kind = 1;
    for (int i = 0; i < nspec; i++) {
        re_row *r = &rows[2 + i];
        r->kind = 2;
        if (svc_route_parse(specs[i], &r->rule, err, sizeof err)) {
            cli_error(&a, "--rule '%s': %s", specs[i], err);
            free(rows);
            return 2;
        }
        svc_route_name(&r->rule, r->name, sizeof r->name);
    }
    const int nrows = nspec + 2;
    kvpol_config pc;
    if (kvpol_parse(policy, &pc, err, sizeof err)) {
        cli_error(&a, "--policy: %s", err);
        free(rows);
        return 2;
    }
    char pname[64];
    kvpol_name(&pc, pname, sizeof pname);

    re_model ms, ml;
    memset(&ml, 0, sizeof ml);
    int exit_code = model_open(&a, small, small_tok, threads, &pc, &ms);
    if (!exit_code) exit_code = model_open(&a, large, large_tok, threads, NULL, &ml);
    if (!exit_code) exit_code = same_vocab(&a, ms.e.m, ml.e.m);
    FILE *f = NULL;
    int32_t *ids_s = NULL, *ids_l = NULL, *ref = NULL;
    double *lp_s = NULL, *lp_l = NULL;
    char *line = NULL;
    if (exit_code) goto out;
    exit_code = 1;
    int max_s = ms.e.b->opt.max_ctx, max_l = ml.e.b->opt.max_ctx;
    if (!(ids_s = malloc((size_t)max_s * sizeof *ids_s)) ||
        !(ids_l = malloc((size_t)max_l * sizeof *ids_l)) || !(lp_s = malloc((size_t)gen * sizeof *lp_s)) ||
        !(lp_l = malloc((size_t)gen * sizeof *lp_l)) || !(line = malloc(RE_LINE))) {
        cli_error(&a, "%s", ck_strerror(CK_ENOMEM));
        goto out;
    }
    if (!(f = fopen(prompts, "r"))) {
        cli_error(&a, "%s: cannot open", prompts);
        goto out;
    }
    int n_prompts = 0, lineno = 0, rc = 0;
    long steps = 0;
    double t0 = cli_now();
    while (fgets(line, RE_LINE, f) && (!limit || n_prompts < limit)) {
        lineno++;
        size_t l = strlen(line);
        if (l == RE_LINE - 1 && line[l - 1] != '\n') {
            cli_error(&a, "%s:%d: longer than %d bytes", prompts, lineno, RE_LINE - 2);
            goto out;
        }
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
        if (!l) continue;
        /* Both models see the prompt the same way, or the cascade's hand-over
         * (prompt + A tokens) would mean different things to them. */
        int ns = 0, nl = 0;
        if ((rc = tok_encode(ms.e.m->tok, line, l, 1, ids_s, max_s, &ns)) ||
            (rc = tok_encode(ml.e.m->tok, line, l, 1, ids_l, max_l, &nl)))
            goto prompt_fail;
        if (ns != nl || memcmp(ids_s, ids_l, (size_t)ns * sizeof *ids_s)) {
            cli_error(&a, "%s:%d: the two tokenizers split this prompt differently", prompts, lineno);
            exit_code = 2;
            goto out;
        }
        if (ns + gen >= max_s || ns + gen >= max_l) {
            rc = CK_ETOOLONG;
            goto prompt_fail;
        }
        /* 1. The reference and its log-probabilities under the large model. */
        gen_params gp;
        gen_params_default(&gp);
        gp.samp.temperature = 0;
        gp.max_tokens = gen;
        gp.ignore_eos = 1;
        gen_result rr;
        if ((rc = gen_run(ml.g, ids_l, nl, &gp, &rr))) goto prompt_fail;
        free(ref);
        ref = rr.tokens;
        int n_ref = rr.n_tokens;
        rr.tokens = NULL;
        gen_result_free(&rr);
        /* 2-3. Both models score it. */
        if ((rc = forced(&ml, ids_l, nl, ref, n_ref, lp_l)) ||
            (rc = forced(&ms, ids_s, ns, ref, n_ref, lp_s)))
            goto prompt_fail;
        /* 4. The small model's own job: greedy, ends at EOS, its trace. */
        gen_params_default(&gp);
        gp.samp.temperature = 0;
        gp.max_tokens = gen;
        gp.want_trace = 1;
        gen_result sr;
        if ((rc = gen_run(ms.g, ids_s, ns, &gp, &sr))) goto prompt_fail;
        for (int i = 0; i < nrows; i++) {
            re_row *r = &rows[i];
            int at = n_ref, moved = r->kind == 1; /* small: kept; large: moved at once */
            if (moved) {
                at = 0;
            } else if (r->kind == 2) {
                svc_route_state st;
                svc_route_begin(&st);
                /* As confkvd: a rule that fires on the job's last allowed
                 * token (max_tokens reached in that step) finds the job
                 * finished, and it stays on the small model. */
                for (int t = 0; t < sr.n_tokens; t++) {
                    const samp_conf *c = &sr.trace[t];
                    if (svc_route_feed(&r->rule, &st, c->entropy, c->gap, c->pmax) && t + 1 < gen) {
                        at = svc_route_accepted(&r->rule, &st);
                        moved = 1;
                        break;
                    }
                }
            }
            if (moved) {
                r->escalated++;
                r->sum_at += at;
            } else {
                r->kept++;
            }
            row_add(r, at, lp_s, lp_l, n_ref);
        }
        gen_result_free(&sr);
        steps += n_ref;
        n_prompts++;
        if (n_prompts % 16 == 0)
            fprintf(stderr, "confkv route-eval: %d prompts (%.1f s)\n", n_prompts, cli_now() - t0);
        continue;
    prompt_fail:
        cli_error(&a, "%s:%d: %s", prompts, lineno, ck_strerror(rc));
        goto out;
    }
    if (ferror(f)) {
        cli_error(&a, "%s: read error", prompts);
        goto out;
    }
    if (!n_prompts) {
        cli_error(&a, "%s: no prompts", prompts);
        goto out;
    }
    fprintf(stderr, "confkv route-eval: %d prompts x %d tokens, %d rule%s (%.1f s)\n", n_prompts, gen, nspec,
            nspec == 1 ? "" : "s", cli_now() - t0);
    double large_nll = figures(&rows[1], steps, n_prompts, 0).nll;
    if (json) {
        print_json(small, large, pname, gen, n_prompts, steps, rows, nrows, large_nll);
    } else {
        int wid = 8;
        for (int i = 0; i < nrows; i++)
            if ((int)strlen(rows[i].name) > wid) wid = (int)strlen(rows[i].name);
        printf("%-*s %7s %5s %7s %8s %8s %8s %7s\n", wid, "rule", "kept", "esc", "at_tok", "nll", "ppl",
               "dnll%", "small%");
        for (int i = 0; i < nrows; i++) {
            re_fig g = figures(&rows[i], steps, n_prompts, large_nll);
            printf("%-*s %7.3f %5ld %7.2f %8.4f %8.3f %8.3f %7.1f\n", wid, rows[i].name, g.share_kept,
                   rows[i].escalated, g.mean_at, g.nll, g.ppl, g.dnll, 100 * g.small_share);
        }
    }
    exit_code = 0;
out:
    if (f) fclose(f);
    free(line);
    free(ids_s);
    free(ids_l);
    free(ref);
    free(lp_s);
    free(lp_l);
    model_close(&ms);
    model_close(&ml);
    free(rows);
    return exit_code;
}
