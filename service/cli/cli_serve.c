/* cli_serve.c - `confkv bench --scenario serve`: a synthetic arrival process
 * that drives the engine API (engine.h) as the service will.
 *
 * Requests arrive as a Poisson process at --rate per second (exponential
 * gaps from a seeded generator), simulated on the wall clock: the loop
 * submits every request whose arrival time has come, then runs one
 * eng_step, and sleeps only when the engine is idle until the next
 * arrival. Each request has a prompt of exactly --prompt-tokens tokens (BOS,
 * then a slice of a built-in story text or random vocabulary pieces, chosen
 * from the seed) and generates exactly --gen-tokens tokens (EOS ignored).
 * With --system-prompt-tokens S every prompt starts (after BOS) with the
 * same S tokens, as jobs sharing a system prompt do; --prefix-cache says
 * what the engine does with them: off (computes every prompt whole), on
 * (automatic prefix caching) or template (as on, after the shared prefix was
 * prewarmed as a pinned template before the first arrival).
 *
 * Times are taken when eng_step returns, as a client would see them:
 * TTFT = first token - arrival (queueing included), ITL = the gaps between a
 * request's consecutive tokens. Throughput counts from the first arrival to
 * the last finish; tokens_per_cpu_s divides by the CPU time the process
 * used instead, which other processes on a shared machine do not inflate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ck_err.h"
#include "cli.h"
#include "engine.h"
#include "jw.h"

/* A few sentences in the model's register; prompts are slices of it. */
static const char corpus[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big red ball under a tree. She ran to get it, but a small dog took it first. "
    "Lily was sad, but the dog came back and gave her the ball. They played together all day long. "
    "Tom had a toy car that he liked very much. He showed it to his friend Sam at school. "
    "Sam wanted to play with the car too, so Tom shared it with him. They were happy and laughed. "
    "The sun was warm and the sky was blue. A bird sang a song on the roof of the house. "
    "Mom made a cake for the party, and everyone said it was the best cake they ever had. ";

static void help(void) {
    printf("usage: confkv bench --scenario serve --model M [--tokenizer T] [options]\n\n"
           "Poisson arrivals driving the engine's scheduler; prints latency, throughput and KV use.\n\n"
           "  --kv-budget-mb X     hot KV pool (default 64)\n"
           "  --warm-budget-mb X   warm tier (default 4x the hot pool)\n"
           "  --requests N         requests in all (100)\n"
           "  --rate R             arrivals per second, Poisson (10; 0 = all at once)\n"
           "  --prompt-tokens P    prompt length, BOS included (16)\n"
           "  --gen-tokens G       tokens generated per request, EOS ignored (128)\n"
           "  --prompts text|random  prompt content: slices of a story text, or random pieces (text)\n"
           "  --policy SPEC        KV policy of every request (conf)\n"
           "  --system-prompt-tokens S  a prefix of S tokens shared by every prompt, after BOS (0)\n"
           "  --prefix-cache off|on|template  reuse of shared prefixes (on)\n"
           "  --max-running N      sequences at once (64)\n"
           "  --max-batch-tokens N tokens per step (512)\n"
           "  --seed S             arrivals and prompts (1)\n"
           "  --backend B --threads T --block-size N, sampling flags (default greedy)\n"
           "  --max-context N --max-memory-mb MB --verbose   memory plan (confkv generate --help)\n"
           "  --json               one JSON object on stdout\n");
}

/* CPU seconds this process used (every thread): unlike the wall clock, it
 * does not count time other processes took from a shared machine. */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Prompt ids for every request: (n_req, P) row-major. */
static int make_prompts(const model *m, int n_req, int P, int random_pieces, uint64_t seed, int32_t *out) {
    const tokenizer *tk = m->tok;
    int V = m->cfg.vocab_size, bos = tok_bos(tk);
    uint64_t s = seed ^ 0x5eed5eed5eedull;
    int32_t *pool = NULL;
    int n_pool = 0, rc = CK_OK;
    if (random_pieces) {
        pool = malloc((size_t)V * sizeof *pool);
        if (!pool) return CK_ENOMEM;
        for (int i = 0; i < V; i++)
            if (tok_type(tk, i) == TOK_TYPE_NORMAL) pool[n_pool++] = i;
    } else {
        int cap = (int)sizeof corpus + 8;
        pool = malloc((size_t)cap * sizeof *pool);
        if (!pool) return CK_ENOMEM;
        rc = tok_encode(tk, corpus, sizeof corpus - 1, 0, pool, cap, &n_pool);
    }
    if (!rc && n_pool < 2) rc = CK_EINVAL;
    for (int r = 0; !rc && r < n_req; r++) {
        int32_t *p = out + (size_t)r * P;
        int k = 0;
        if (bos >= 0) p[k++] = bos;
        int at = (int)(cli_rng_next(&s) % (uint64_t)n_pool);
        for (; k < P; k++) {
            if (random_pieces)
                p[k] = pool[cli_rng_next(&s) % (uint64_t)n_pool];
            else
                p[k] = pool[at++ % n_pool];
        }
    }
    free(pool);
    return rc;
}

int cli_bench_serve(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "bench", 0};
    cli_engine_opts eo;
    cli_engine_opts_default(&eo);
    samp_params sp;
    samp_params_default(&sp);
    sp.temperature = 0;
    float budget_mb = 64, warm_mb = 0, rate = 10;
    int n_req = 100, P = 16, G = 128, json = 0, max_running = 64, max_batch = 512;
    uint64_t seed = 1;
    const char *policy = "conf", *scenario = NULL, *prompts = "text", *pcache = "on";
    int S = 0;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_engine_flag(&a, &eo) || cli_sampling_flag(&a, &sp) || cli_str(&a, "--scenario", &scenario) ||
            cli_float(&a, "--kv-budget-mb", 0.001, 1 << 20, &budget_mb) ||
            cli_float(&a, "--warm-budget-mb", 0, 1 << 20, &warm_mb) ||
            cli_int(&a, "--requests", 1, 1 << 20, &n_req) || cli_float(&a, "--rate", 0, 1e9, &rate) ||
            cli_int(&a, "--prompt-tokens", 1, 1 << 20, &P) || cli_int(&a, "--gen-tokens", 1, 1 << 20, &G) ||
            cli_str(&a, "--policy", &policy) || cli_u64(&a, "--seed", &seed) ||
            cli_int(&a, "--max-running", 1, 1 << 16, &max_running) ||
            cli_int(&a, "--max-batch-tokens", 1, 1 << 20, &max_batch) || cli_str(&a, "--prompts", &prompts) ||
            cli_int(&a, "--system-prompt-tokens", 0, 1 << 20, &S) || cli_str(&a, "--prefix-cache", &pcache))
            continue;
        if (cli_flag(&a, "--json"))
            json = 1;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (!eo.model_path) {
        cli_error(&a, "--model is required");
        return 2;
    }
    if (strcmp(prompts, "text") && strcmp(prompts, "random")) {
        cli_error(&a, "--prompts must be text or random");
        return 2;
    }
    int pc_off = !strcmp(pcache, "off"), pc_tpl = !strcmp(pcache, "template");
    if (!pc_off && !pc_tpl && strcmp(pcache, "on")) {
        cli_error(&a, "--prefix-cache must be off, on or template");
        return 2;
    }
    char err[512];
    eng_config c;
    eng_config_default(&c);
    c.model_path = eo.model_path;
    c.tokenizer_path = eo.tokenizer_path;
    c.backend = eo.backend;
    c.threads = eo.threads;
    c.block_size = eo.block_size;
    c.max_context = eo.max_ctx;
    c.max_memory_mb = (size_t)eo.max_memory_mb;
    c.kv_budget_bytes = (size_t)((double)budget_mb * 1048576.0);
    c.warm_budget_bytes = (size_t)((double)warm_mb * 1048576.0);
    c.max_running = max_running;
    c.max_batch_tokens = max_batch;
    c.max_queue = n_req + 1;
    c.prefix_cache_off = pc_off;
    if (kvpol_parse(policy, &c.policy, err, sizeof err)) {
        cli_error(&a, "--policy: %s", err);
        return 2;
    }
    eng *e = NULL;
    if (eng_new(&c, &e, err, sizeof err)) {
        cli_error(&a, "%s", err);
        return 1;
    }
    const model *m = eng_model(e);
    if (eo.verbose) {
        eng_memory_describe(eng_get_memory(e), err, sizeof err);
        fprintf(stderr, "confkv: memory %s\n", err);
    }
    if (S + P + G > eng_max_context(e)) {
        cli_error(&a, "system prompt + prompt + gen tokens (%d) exceed the context %d", S + P + G,
                  eng_max_context(e));
        eng_free(e);
        return 2;
    }
    int exit_code = 1, n_ev = 2 * max_running + 16;
    double *arr = malloc((size_t)n_req * sizeof *arr);   /* arrival, s from start */
    double *last = malloc((size_t)n_req * sizeof *last); /* last token time, -1 none */
    double *ttft = malloc((size_t)n_req * sizeof *ttft);
    double *itl = malloc((size_t)n_req * (size_t)G * sizeof *itl);
    int32_t *ids = malloc((size_t)n_req * (size_t)P * sizeof *ids);
    int32_t *sys = malloc((size_t)(S + 1) * sizeof *sys); /* BOS + the shared prefix */
    int32_t *prompt = malloc((size_t)(S + P) * sizeof *prompt);
    eng_event *ev = malloc((size_t)n_ev * sizeof *ev);
    if (!arr || !last || !ttft || !itl || !ids || !ev || !sys || !prompt) {
        cli_error(&a, "out of memory");
        goto out;
    }
    int rc = make_prompts(m, n_req, P, !strcmp(prompts, "random"), seed, ids);
    if (rc) {
        cli_error(&a, "prompts: %s", ck_strerror(rc));
        goto out;
    }
    /* The shared prefix: a slice of the story text no prompt starts with
     * (another seed), the same for every request. */
    if (S > 0 && (rc = make_prompts(m, 1, S + 1, !strcmp(prompts, "random"), seed ^ 0x5157u, sys))) {
        cli_error(&a, "system prompt: %s", ck_strerror(rc));
        goto out;
    }
    if (S > 0 && pc_tpl) { /* prewarm it as a template, before the clock starts */
        eng_request q;
        memset(&q, 0, sizeof q);
        q.tokens = sys;
        q.n_tokens = S + 1;
        q.samp = sp;
        q.max_tokens = 1;
        q.prefill_only = 1;
        q.keep_prefix = 1;
        q.user_tag = UINT64_MAX;
        uint64_t id;
        int n = 0;
        if ((rc = eng_submit(e, &q, &id, err, sizeof err))) {
            cli_error(&a, "prewarm: %s", err);
            goto out;
        }
        while (!eng_idle(e) && !(rc = eng_step(e, ev, n_ev, &n))) {}
        if (rc) {
            cli_error(&a, "prewarm: %s", ck_strerror(rc));
            goto out;
        }
    }
    eng_stats st0;
    eng_get_stats(e, &st0);
    uint64_t rs = seed;
    for (int i = 0; i < n_req; i++) {
        arr[i] = rate > 0 ? (i ? arr[i - 1] : 0) - log(cli_rng_unit(&rs)) / rate : 0;
        last[i] = -1;
    }
    if (!json)
        fprintf(stderr, "confkv bench: serve %d requests at %g/s, %d + %d tokens, policy %s ...\n", n_req,
                (double)rate, P, G, policy);

    size_t n_ttft = 0, n_itl = 0;
    int next = 0, done = 0, completed = 0, failed = 0;
    uint64_t tokens = 0, batch_seqs = 0, steps = 0;
    double t0 = cli_now(), t_end = 0, c0 = cpu_s();
    while (done < n_req) {
        double now = cli_now() - t0;
        while (next < n_req && arr[next] <= now) {
            eng_request q;
            memset(&q, 0, sizeof q);
            /* BOS, the shared prefix, the request's own tokens */
            memcpy(prompt, sys, (size_t)(S > 0 ? S + 1 : 0) * sizeof *prompt);
            memcpy(prompt + (S > 0 ? S + 1 : 0), ids + (size_t)next * P + (S > 0),
                   (size_t)(P - (S > 0)) * sizeof *prompt);
            q.tokens = prompt;
            q.n_tokens = S + P;
            q.samp = sp;
            q.max_tokens = G;
            q.ignore_eos = 1;
            q.user_tag = (uint64_t)next;
            uint64_t id;
            rc = eng_submit(e, &q, &id, err, sizeof err);
            if (rc == CK_EBUSY) break; /* the queue is full: again after a step */
            if (rc) {
                cli_error(&a, "request %d: %s", next, err);
                failed++;
                done++;
            }
            next++;
        }
        if (eng_idle(e)) {
            if (next < n_req) sleep_s(arr[next] - (cli_now() - t0));
            continue;
        }
        int n = 0;
        if ((rc = eng_step(e, ev, n_ev, &n))) {
            cli_error(&a, "step: %s", ck_strerror(rc));
            goto out;
        }
        eng_stats st;
        eng_get_stats(e, &st);
        if (st.steps > steps) {
            steps = st.steps;
            batch_seqs += (uint64_t)st.last_batch_seqs;
        }
        double t = cli_now() - t0;
        for (int k = 0; k < n; k++) {
            int i = (int)ev[k].user_tag;
            if (ev[k].type == ENG_EV_TOKEN) {
                tokens++;
                if (last[i] < 0)
                    ttft[n_ttft++] = t - arr[i];
                else
                    itl[n_itl++] = t - last[i];
                last[i] = t;
            } else {
                done++;
                t_end = t;
                int f = ev[k].type == ENG_EV_FINISHED ? ev[k].result->finish : -1;
                if (f == GEN_FINISH_LENGTH || f == GEN_FINISH_STOP)
                    completed++;
                else
                    failed++;
            }
        }
    }
    double wall = t_end - arr[0], cpu = cpu_s() - c0;
    /* Request latency, arrival to last token (compared with `confkv loadgen`
     * through Kafka, ops/scripts/bench_kafka.sh); arr is not needed any more, so it holds them. */
    size_t n_lat = 0;
    for (int i = 0; i < n_req; i++)
        if (last[i] >= 0) arr[n_lat++] = last[i] - arr[i];
    cli_sort_doubles(arr, n_lat);
    cli_sort_doubles(ttft, n_ttft);
    cli_sort_doubles(itl, n_itl);
    eng_stats st;
    eng_get_stats(e, &st);
    double sched_frac = st.step_ms_total > 0 ? st.sched_ms_total / st.step_ms_total : 0;
    double fwd_frac = st.step_ms_total > 0 ? st.forward_ms_total / st.step_ms_total : 0;
    double tok_frac = st.step_ms_total > 0 ? st.token_ms_total / st.step_ms_total : 0;
    double mean_batch = steps ? (double)batch_seqs / (double)steps : 0;
    uint64_t lookups = st.prefix_lookups - st0.prefix_lookups,
             hits = st.prefix_hits_warm + st.prefix_hits_cold + st.prefix_hits_template -
                    st0.prefix_hits_warm - st0.prefix_hits_cold - st0.prefix_hits_template;
    double hit_rate = lookups ? (double)hits / (double)lookups : 0;
    uint64_t cached = st.cached_tokens - st0.cached_tokens;
    char pname[64];
    kvpol_name(&c.policy, pname, sizeof pname);
    if (json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "scenario"), jw_str(&w, "serve");
        jw_key(&w, "model"), jw_str(&w, m->name);
        jw_key(&w, "policy"), jw_str(&w, policy);
        jw_key(&w, "policy_kind"), jw_str(&w, pname);
        jw_key(&w, "requests"), jw_int(&w, n_req);
        jw_key(&w, "rate"), jw_num(&w, rate);
        jw_key(&w, "prompt_tokens"), jw_int(&w, S + P);
        jw_key(&w, "system_prompt_tokens"), jw_int(&w, S);
        jw_key(&w, "prefix_cache"), jw_str(&w, pcache);
        jw_key(&w, "prefix_lookups"), jw_int(&w, (int64_t)lookups);
        jw_key(&w, "prefix_hit_rate"), jw_num(&w, hit_rate);
        jw_key(&w, "cached_tokens"), jw_int(&w, (int64_t)cached);
        jw_key(&w, "prefill_tokens"), jw_int(&w, (int64_t)(st.tokens_prefilled - st0.tokens_prefilled));
        jw_key(&w, "gen_tokens"), jw_int(&w, G);
        jw_key(&w, "kv_budget_bytes"), jw_int(&w, (int64_t)c.kv_budget_bytes);
        jw_key(&w, "kv_hot_capacity_bytes"), jw_int(&w, (int64_t)st.hot_capacity_bytes);
        jw_key(&w, "kv_blocks"), jw_int(&w, st.hot_blocks);
        jw_key(&w, "completed"), jw_int(&w, completed);
        jw_key(&w, "failed"), jw_int(&w, failed);
        jw_key(&w, "wall_s"), jw_num(&w, wall);
        jw_key(&w, "requests_per_s"), jw_num(&w, wall > 0 ? completed / wall : 0);
        jw_key(&w, "tokens_per_s"), jw_num(&w, wall > 0 ? (double)tokens / wall : 0);
        jw_key(&w, "generated_tokens"), jw_int(&w, (int64_t)tokens);
        jw_key(&w, "cpu_s"), jw_num(&w, cpu);
        jw_key(&w, "tokens_per_cpu_s"), jw_num(&w, cpu > 0 ? (double)tokens / cpu : 0);
        jw_key(&w, "latency_p50_ms"), jw_num(&w, 1e3 * cli_quantile(arr, n_lat, 0.5));
        jw_key(&w, "latency_p99_ms"), jw_num(&w, 1e3 * cli_quantile(arr, n_lat, 0.99));
        jw_key(&w, "ttft_p50_ms"), jw_num(&w, 1e3 * cli_quantile(ttft, n_ttft, 0.5));
        jw_key(&w, "ttft_p99_ms"), jw_num(&w, 1e3 * cli_quantile(ttft, n_ttft, 0.99));
        jw_key(&w, "itl_p50_ms"), jw_num(&w, 1e3 * cli_quantile(itl, n_itl, 0.5));
        jw_key(&w, "itl_p99_ms"), jw_num(&w, 1e3 * cli_quantile(itl, n_itl, 0.99));
        jw_key(&w, "max_concurrent"), jw_int(&w, st.running_peak);
        jw_key(&w, "mean_batch_seqs"), jw_num(&w, mean_batch);
        jw_key(&w, "kv_hot_peak_bytes"), jw_int(&w, (int64_t)st.hot_peak_bytes);
        jw_key(&w, "preemptions"), jw_int(&w, (int64_t)st.preemptions);
        jw_key(&w, "recomputes"), jw_int(&w, (int64_t)st.recomputes);
        jw_key(&w, "steps"), jw_int(&w, (int64_t)st.steps);
        jw_key(&w, "step_ms_mean"), jw_num(&w, st.steps ? st.step_ms_total / (double)st.steps : 0);
        jw_key(&w, "sched_overhead_fraction"), jw_num(&w, sched_frac);
        jw_key(&w, "forward_fraction"), jw_num(&w, fwd_frac);
        jw_key(&w, "token_fraction"), jw_num(&w, tok_frac);
        jw_obj_end(&w);
        putchar('\n');
    } else {
        printf("completed %d, failed %d in %.2f s: %.2f requests/s, %.1f tokens/s (%.1f per CPU second)\n",
               completed, failed, wall, wall > 0 ? completed / wall : 0, wall > 0 ? (double)tokens / wall : 0,
               cpu > 0 ? (double)tokens / cpu : 0);
        printf("latency p50 %.1f ms, p99 %.1f ms\n", 1e3 * cli_quantile(arr, n_lat, 0.5),
               1e3 * cli_quantile(arr, n_lat, 0.99));
        printf("ttft p50 %.1f ms, p99 %.1f ms; itl p50 %.2f ms, p99 %.2f ms\n",
               1e3 * cli_quantile(ttft, n_ttft, 0.5), 1e3 * cli_quantile(ttft, n_ttft, 0.99),
               1e3 * cli_quantile(itl, n_itl, 0.5), 1e3 * cli_quantile(itl, n_itl, 0.99));
        printf("max concurrent %d, mean batch %.1f sequences, hot KV peak %.2f MiB of %.2f, %llu preemptions "
               "(%llu recomputed)\n",
               st.running_peak, mean_batch, st.hot_peak_bytes / 1048576.0, st.hot_capacity_bytes / 1048576.0,
               (unsigned long long)st.preemptions, (unsigned long long)st.recomputes);
        if (S > 0)
            printf("prefix cache %s: %.1f%% of %llu prompt blocks hit, %llu prompt tokens copied, %llu "
                   "computed\n",
                   pcache, 100 * hit_rate, (unsigned long long)lookups, (unsigned long long)cached,
                   (unsigned long long)(st.tokens_prefilled - st0.tokens_prefilled));
        printf("step time: %.1f%% scheduling, %.1f%% forward, %.1f%% sampling and policy\n", 100 * sched_frac,
               100 * fwd_frac, 100 * tok_frac);
    }
    exit_code = failed ? 1 : 0;
out:
    free(arr);
    free(last);
    free(ttft);
    free(itl);
    free(ids);
    free(sys);
    free(prompt);
    free(ev);
    eng_free(e);
    return exit_code;
}
