/* cli_bench.c - `confkv bench`: prefill and decode speed, against this
 * machine's own limits measured in the same run (the roofline).
 *
 * Decode at batch 1 reads every weight once per token, so its ceiling is the
 * memory read bandwidth; at large batches the weights are read once per B
 * tokens and the ceiling is the sgemm rate. The bench measures both ceilings
 * (a multi-threaded streaming read; OpenBLAS sgemm on square matrices) and
 * reports the fraction of the relevant one the run reached. The read is
 * measured over 512 MiB once before the decode (DRAM, past any cache) and
 * over a buffer the size of what one decode step reads (the weights and the
 * batch's KV: a model that fits the last-level cache is read from it) in
 * rounds alternated with the decode (bench_round below). --scenario serve
 * drives the scheduler instead (cli_serve.c). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cblas.h>

#include "ck_err.h"
#include "cli.h"
#include "cpu_features.h"
#include "jw.h"
#include "samp.h"

int cli_bench_serve(int argc, char **argv);

/* The probe's read loop over n floats (a multiple of 64): 64 lanes summed
 * independently, so the loads, not the add latency, set the pace (a plain
 * `s += x[i]` measures the adder). Built for each ISA the decode's kernels
 * may run at and called at the CPU's best (cpu_features.h): the baseline
 * build's SSE2 loop reads 17-21 GB/s on two threads where the AVX2 one
 * reads 23-27, and a decode would "reach" more of the first than the
 * memory gives. Each line is asked for 4 KiB ahead, as the quantized
 * kernels ask for theirs: measured on a Zen 5, the loop without it reads
 * 512 MiB at 20.6 GB/s and with it at 31-33: without it the kernels,
 * which prefetch, out-read the probe. */
#define PROBE_SUM                                                                        \
    {                                                                                    \
        float acc[64] = {0}, s = 0.0f;                                                   \
        for (size_t i = 0; i < n; i += 64) {                                             \
            for (int l = 0; l < 4; l++) __builtin_prefetch(p + i + 1024 + 16 * l, 0, 3); \
            for (int k = 0; k < 64; k++) acc[k] += p[i + k];                             \
        }                                                                                \
        for (int k = 0; k < 64; k++) s += acc[k];                                        \
        return s;                                                                        \
    }
static float probe_sum(const float *p, size_t n) PROBE_SUM
#if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx2,fma"))) static float probe_sum_avx2(const float *p, size_t n) PROBE_SUM
    __attribute__((target("avx512f"))) static float probe_sum_avx512(const float *p, size_t n) PROBE_SUM
#endif
#undef PROBE_SUM

    typedef float (*probe_fn)(const float *p, size_t n);

static probe_fn probe_for(int isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= CPU_ISA_AVX512) return probe_sum_avx512;
    if (isa >= CPU_ISA_AVX2) return probe_sum_avx2;
#endif
    (void)isa;
    return probe_sum;
}

/* A buffer for the read probe: `bytes` (rounded down to whole 64-float
 * steps) on 2 MiB pages where the kernel gives them, as the CPU backend's
 * weights and KV pool are: on 4 KiB pages the probe reads 9.8-11.2 GB/s
 * against 13.0-13.7 on huge pages (measured: one thread, 71 MB), and a
 * decode on huge pages would "reach" over 100 % of it. Written once, by the
 * threads that read it. */
typedef struct probe_buf {
    float *p;
    size_t n; /* floats, a multiple of 64 */
    int threads;
    probe_fn sum;
} probe_buf;

static int probe_open(probe_buf *b, size_t bytes, int threads, int isa) {
    const size_t huge = (size_t)2 << 20;
    b->n = bytes / sizeof(float) / 64 * 64;
    b->threads = threads;
    b->sum = probe_for(isa);
    size_t alloc = (b->n * sizeof(float) + huge - 1) / huge * huge;
    b->p = b->n ? aligned_alloc(huge, alloc) : NULL;
    if (!b->p) return -1;
#ifdef MADV_HUGEPAGE
    (void)madvise(b->p, alloc, MADV_HUGEPAGE); /* a hint: without it the ceiling is lower, not wrong */
#endif
    float *buf = b->p;
    const size_t n = b->n;
#pragma omp parallel for num_threads(threads)
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    return 0;
}

/* The best of `reps` reads of the whole buffer, bytes/s. */
static double probe_read(const probe_buf *b, int reps) {
    double best = 0, sink = 0;
    const float *buf = b->p;
    const size_t n = b->n;
    const probe_fn sum = b->sum;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = cli_now(), total = 0;
#pragma omp parallel num_threads(b->threads) reduction(+ : total)
        {
            /* each thread its contiguous share, in whole 64-float steps */
            const size_t steps = n / 64, t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
            const size_t s0 = steps * t / nt, s1 = steps * (t + 1) / nt;
            total += sum(buf + 64 * s0, 64 * (s1 - s0));
        }
        double dt = cli_now() - t0;
        sink += total;
        if (dt > 0 && n * sizeof *buf / dt > best) best = n * sizeof *buf / dt;
    }
    if (sink == 42) fputc(' ', stderr); /* keep the reads */
    return best;
}

static void probe_close(probe_buf *b) {
    free(b->p);
    b->p = NULL;
}

/* Best-of-5 read bandwidth over a buffer of `bytes`, bytes/s; 0 when the
 * buffer could not be had. */
static double measure_bandwidth(int threads, size_t bytes, int isa) {
    probe_buf b;
    if (probe_open(&b, bytes, threads, isa)) return 0;
    double bw = probe_read(&b, 5);
    probe_close(&b);
    return bw;
}

/* The roofline's rounds. The read probe and the decode take turns: before
 * every round of decode steps, the best of BENCH_PROBE_REPS reads of a
 * buffer as big as a step's reads, then one untimed step (the same step,
 * run again below: its KV writes are the same), so that the timed steps
 * find the caches as a decode without the probe would. Each round's ratio
 * is its median step's read rate over its probe's, and the fraction the
 * median of the rounds' ratios.
 * Why: on a host shared with other tenants (measured on a Zen 5 VM), one
 * best-of-5 read before the decode and one after it read 35 to 91 GB/s
 * from run to run while the decode between them reads 40 to 57, so the
 * fraction of one run ranges from 0.47 to 1.17; the ceiling and the
 * decode measured in alternation, as the side by side benchmarks are, see
 * the same host. bandwidth_fraction_best_read is that single reading: the
 * decode's mean rate over the best read of the run. */
#define BENCH_ROUNDS 8
#define BENCH_PROBE_REPS 3
typedef struct bench_round {
    double read;      /* the probe's best, bytes/s */
    double decode;    /* the median step's bytes over its seconds */
    int step0, step1; /* the round's decode steps [step0, step1) */
} bench_round;

/* The median of v[0..n) (sorted in place); 0 for n 0. */
static double median(double *v, int n) {
    cli_sort_doubles(v, (size_t)(n > 0 ? n : 0));
    return cli_quantile(v, (size_t)(n > 0 ? n : 0), 0.5);
}

/* The process's resident bytes now (/proc/self/statm), 0 where unknown.
 * Peak RSS includes the bandwidth probe's 512 MiB buffer; this, read after
 * the decode, is what the engine itself holds. */
static size_t rss_now(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0, res = 0;
    if (!f) return 0;
    int n = fscanf(f, "%lu %lu", &pages, &res);
    fclose(f);
    long ps = sysconf(_SC_PAGESIZE);
    return n == 2 && ps > 0 ? (size_t)res * (size_t)ps : 0;
}

/* Best-of-5 sgemm rate on n x n x n, FLOP/s. */
static double measure_sgemm(int threads) {
    int n = 1024;
    float *a = malloc((size_t)n * n * sizeof *a), *b = malloc((size_t)n * n * sizeof *b);
    float *c = malloc((size_t)n * n * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return 0;
    }
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    openblas_set_num_threads(threads);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cli_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double dt = cli_now() - t0;
        if (dt > 0 && 2.0 * n * n * n / dt > best) best = 2.0 * n * n * n / dt;
    }
    free(a), free(b), free(c);
    return best;
}

static void help(void) {
    printf("usage: confkv bench --model M [--tokenizer T] [--batch B] [--prompt-tokens P]\n"
           "                    [--gen-tokens N] [--threads T] [--backend B] [--json] [--no-roofline]\n"
           "                    [--max-context N] [--max-memory-mb MB] [--verbose]   (memory plan)\n"
           "                    [--max-batch-tokens N]   (rows of one forward: the prefill's chunk;\n"
           "                     default B x P up to 256, at least B)\n"
           "                    [--peak-bw GB/s] [--peak-tflops T]   (a device's datasheet limits,\n"
           "                     instead of measuring this CPU: e.g. H200 4800 GB/s)\n"
           "                    [--cpu-kernels c|avx2|avx512|vnni]   (force the CPU backend's kernels;\n"
           "                     the same as CONFKV_CPU_KERNELS)\n"
           "       confkv bench --scenario serve ...   (confkv bench --scenario serve --help)\n\n"
           "Runs B sequences: prefill of P tokens each, then N decode steps of B tokens.\n"
           "Defaults: batch 1, 32 prompt tokens, 128 generated tokens, all cores.\n"
           "The roofline (unless --no-roofline or datasheet limits): a read of 512 MiB and an\n"
           "sgemm before the decode, then 8 rounds of a read as big as a step's (weights + KV)\n"
           "and a share of the decode steps; bandwidth_fraction is the median of the rounds'\n"
           "(median step's bytes/s) / (read's bytes/s). On the CPU with AVX-512, 0.2 s of the\n"
           "int8 tiles of the model's main quantized type on operands in L1: prefill's\n"
           "compute_fraction is its multiply-adds on those types per second over that rate.\n");
}

int cli_bench(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--scenario") && !strcmp(argv[i + 1], "serve"))
            return cli_bench_serve(argc, argv);
    cli_args a = {argc, argv, 1, "bench", 0};
    cli_engine_opts eo;
    cli_engine_opts_default(&eo);
    int batch = 1, prompt = 32, gen = 128, json = 0, roofline = 1, max_bt = 0;
    float peak_bw = 0, peak_flops = 0; /* GB/s, TFLOP/s given instead of measured (GPUs) */
    const char *scenario = "decode";
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_engine_flag(&a, &eo) || cli_int(&a, "--batch", 1, 4096, &batch) ||
            cli_int(&a, "--prompt-tokens", 1, 1 << 20, &prompt) ||
            cli_int(&a, "--gen-tokens", 1, 1 << 20, &gen) || cli_str(&a, "--scenario", &scenario) ||
            cli_int(&a, "--max-batch-tokens", 1, 1 << 16, &max_bt) ||
            cli_float(&a, "--peak-bw", 0, 1e6, &peak_bw) ||
            cli_float(&a, "--peak-tflops", 0, 1e6, &peak_flops))
            continue;
        if (cli_flag(&a, "--json"))
            json = 1;
        else if (cli_flag(&a, "--no-roofline"))
            roofline = 0;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (strcmp(scenario, "decode")) {
        cli_error(&a, "--scenario must be decode (default) or serve");
        return 2;
    }
    eo.max_seqs = batch;
    eo.max_ctx = prompt + gen + 1;
    /* Rows of the batch buffers: what this run puts in one forward, the
     * prefill's batch x prompt tokens in chunks of up to 256, or the
     * decode's batch. Sized for 512 always, they would be 25 MiB of a
     * 110M-shape quantized file's 112 MiB resident at batch 1; chunks of
     * 256 prefill as fast as 512 there (measured) in half the
     * activations. --max-batch-tokens sets it (at least the batch). */
    if (!max_bt) {
        const long pre = (long)batch * prompt;
        max_bt = (int)(pre < 256 ? pre : 256);
    }
    eo.max_batch_tokens = max_bt < batch ? batch : max_bt;
    cli_engine e;
    int rc = cli_engine_open(&a, &eo, &e);
    if (rc) return rc;
    if (eo.max_ctx > e.b->opt.max_ctx) {
        cli_error(&a, "prompt + gen tokens (%d) exceed the model's context %d", eo.max_ctx - 1,
                  e.m->cfg.seq_len);
        cli_engine_close(&e);
        return 2;
    }
    int threads = e.b->opt.n_threads, V = e.m->cfg.vocab_size, T = e.b->opt.max_batch_tokens;
    /* bytes of weights a decode step reads: the CPU backend reads quantized
     * weights in their own bytes and f32/f16/bf16 ones as f32; other
     * backends the stored type */
    const int is_cpu = !strcmp(e.b->ops->name, "cpu");
    const model_config *c = &e.m->cfg;
    const double wbytes = is_cpu ? (double)be_cpu_step_bytes(e.m) : (double)model_weight_bytes(e.m);
    /* a sequence's f32 K and V at one position, all layers */
    const double kv_pos_bytes = 2.0 * c->n_layers * (double)model_kv_dim(c) * 4.0;
    const double avg_ctx = prompt + (gen + 1) / 2.0; /* the mean of a decode step's positions + 1 */
    /* bytes one decode step reads: the weights once, every sequence's KV */
    const double step_bytes = wbytes + batch * kv_pos_bytes * avg_ctx;
    double bw = 0, bw_dram = 0, sg = 0, bw_best = 0;
    double i8_peak = 0, i8_tok = 0; /* int8 MACs/s of the tiles on this CPU; MACs a token on them */
    probe_buf pb = {0};
    bench_round rounds[BENCH_ROUNDS];
    int n_rounds = 0;
    if (peak_bw > 0 || peak_flops > 0) {
        bw = bw_dram = bw_best = 1e9 * (double)peak_bw;
        sg = 1e12 * (double)peak_flops;
    } else if (roofline && model_state_floats(c)) {
        /* a round runs a step twice (untimed, then timed): a recurrent state
         * would take the step's tokens in twice, and the backend refuses it */
        fprintf(stderr, "confkv bench: no roofline rounds for a model with a recurrent state (%s)\n",
                arch_by_id(c->arch) ? arch_by_id(c->arch)->name : "?");
    } else if (roofline) {
        fprintf(stderr, "confkv bench: measuring this machine (bandwidth, sgemm) ...\n");
        const int isa = cpu_isa_detect();
        bw_dram = measure_bandwidth(threads, (size_t)512 << 20, isa);
        sg = measure_sgemm(threads);
        char ierr[160];
        const int run_isa = cpu_isa_select(ierr, sizeof ierr); /* the level the backend runs */
        if (is_cpu && run_isa >= 0) be_cpu_int8_peak(e.m, run_isa, threads, 0.2, &i8_peak, &i8_tok);
        const size_t pbytes = step_bytes > (double)((size_t)1 << 20) ? (size_t)step_bytes : (size_t)1 << 20;
        if (probe_open(&pb, pbytes, threads, isa))
            fprintf(stderr, "confkv bench: no memory for the %zu MiB read probe: no bandwidth fraction\n",
                    pbytes >> 20);
        else
            n_rounds = gen < BENCH_ROUNDS ? gen : BENCH_ROUNDS;
    }
    openblas_set_num_threads(threads);

    kv_seq *seqs = calloc((size_t)batch, sizeof *seqs);
    be_seq_view *views = calloc((size_t)batch, sizeof *views);
    int32_t *tok = malloc((size_t)T * sizeof *tok), *pos = malloc((size_t)T * sizeof *pos);
    int32_t *six = malloc((size_t)T * sizeof *six), *row = malloc((size_t)T * sizeof *row);
    int32_t *next = malloc((size_t)batch * sizeof *next);
    float *logits = malloc((size_t)T * V * sizeof *logits);
    double *step_s = NULL, *step_rate = NULL; /* (gen): each decode step's seconds, bytes/s */
    int exit_code = 1;
    if (!seqs || !views || !tok || !pos || !six || !row || !next || !logits) goto out;
    for (int s = 0; s < batch; s++)
        if ((rc = kv_seq_init(&seqs[s], s, e.b->opt.max_ctx, e.b->opt.block_size))) goto out;

    /* Prefill: every sequence's prompt, packed into batches of T tokens. */
    fprintf(stderr, "confkv bench: prefill %d x %d tokens ...\n", batch, prompt);
    double t0 = cli_now();
    int s = 0, done = 0;
    while (s < batch) {
        int n = 0, first = s;
        while (s < batch && n < T) {
            int c = prompt - done < T - n ? prompt - done : T - n;
            if ((rc = kv_seq_reserve(&seqs[s], &e.pool, c))) goto out;
            for (int i = 0; i < c; i++) {
                tok[n] = (int32_t)(3 + (s * 131 + (done + i) * 17) % (V - 3));
                pos[n] = done + i;
                six[n] = s - first;
                row[n] = (done + i == prompt - 1) ? 0 : -1;
                n++;
            }
            done += c;
            if (done == prompt)
                s++, done = 0;
            else
                break;
        }
        /* one logits row per finished prompt in this batch */
        int nout = 0;
        for (int i = 0; i < n; i++)
            if (row[i] >= 0) row[i] = nout++;
        int last = s < batch && done > 0 ? s : s - 1;
        for (int q = first; q <= last; q++)
            views[q - first] = (be_seq_view){.blocks = seqs[q].hot, .n_blocks = seqs[q].n_blocks, .state = q};
        be_batch bt = {n, tok, pos, six, row, last - first + 1, views, nout};
        if ((rc = e.b->ops->forward(e.b, &bt, logits))) goto out;
        for (int q = first; q <= last; q++) {
            int c = 0;
            for (int i = 0; i < n; i++) c += six[i] == q - first;
            kv_seq_commit(&seqs[q], c);
        }
    }
    double prefill_s = cli_now() - t0;
    for (int q = 0; q < batch; q++) next[q] = 3 + q % (V - 3);

    /* Decode: all sequences one token per step, greedy from their logits;
     * with the roofline in rounds alternated with the read probe
     * (bench_round). Only the steps are timed. */
    fprintf(stderr, "confkv bench: decode %d steps at batch %d ...\n", gen, batch);
    step_s = malloc((size_t)gen * sizeof *step_s);
    step_rate = malloc((size_t)gen * sizeof *step_rate);
    if (!step_s || !step_rate) goto out;
    double decode_s = 0;
    for (int step = 0, r = 0; step < gen; step++) {
        double paused = 0; /* the probe's and the untimed step's seconds */
        t0 = cli_now();
        for (int q = 0; q < batch; q++) {
            if ((rc = kv_seq_reserve(&seqs[q], &e.pool, 1))) goto out;
            tok[q] = next[q];
            pos[q] = seqs[q].n_tokens;
            six[q] = q;
            row[q] = q;
            views[q] = (be_seq_view){.blocks = seqs[q].hot, .n_blocks = seqs[q].n_blocks, .state = q};
        }
        be_batch bt = {batch, tok, pos, six, row, batch, views, batch};
        if (r < n_rounds && step == (int)((long)gen * r / n_rounds)) {
            const double tp = cli_now();
            if (r) rounds[r - 1].step1 = step;
            rounds[r] = (bench_round){.read = probe_read(&pb, BENCH_PROBE_REPS), .step0 = step};
            if (rounds[r].read > bw_best) bw_best = rounds[r].read;
            r++;
            /* untimed: the caches as the step before left them (same KV writes as the timed run) */
            if ((rc = e.b->ops->forward(e.b, &bt, logits))) goto out;
            paused = cli_now() - tp;
        }
        if ((rc = e.b->ops->forward(e.b, &bt, logits))) goto out;
        double kv = 0;
        for (int q = 0; q < batch; q++) {
            kv += kv_pos_bytes * (pos[q] + 1);
            kv_seq_commit(&seqs[q], 1);
            next[q] = samp_argmax(logits + (size_t)q * V, V);
        }
        step_s[step] = cli_now() - t0 - paused;
        step_rate[step] = step_s[step] > 0 ? (wbytes + kv) / step_s[step] : 0;
        decode_s += step_s[step];
    }
    if (n_rounds) rounds[n_rounds - 1].step1 = gen;
    probe_close(&pb);
    const size_t rss = rss_now();
    double frac_med = 0, step_med = 0;
    if (n_rounds) {
        double ratio[BENCH_ROUNDS], read[BENCH_ROUNDS];
        for (int r = 0; r < n_rounds; r++) {
            bench_round *o = &rounds[r];
            o->decode = median(step_rate + o->step0, o->step1 - o->step0);
            ratio[r] = o->read > 0 ? o->decode / o->read : 0;
            read[r] = o->read;
        }
        frac_med = median(ratio, n_rounds);
        bw = median(read, n_rounds);
    }
    step_med = median(step_s, gen); /* the last use of step_s: sorted */

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char cpu[64], kern[256];
    cpu_model_name(cpu, sizeof cpu);
    be_cpu_kernels(e.b, kern, sizeof kern);
    double n_weights = (double)(model_n_params(e.m) - e.m->tok_emb.n + (e.m->tied ? e.m->wcls.n : 0));
    /* per token: 2 FLOPs per weight in the matmuls, plus attention (QK and AV) */
    double flops = 2.0 * n_weights + 4.0 * c->n_layers * c->n_heads * c->head_dim * avg_ctx;
    double agg = batch * (double)gen / decode_s, per = gen / decode_s;
    /* the rounds' median; with datasheet limits, the mean rate over them */
    double bw_frac = n_rounds ? frac_med : bw > 0 ? step_bytes * (agg / batch) / bw : 0;
    double sg_frac = sg > 0 ? flops * agg / sg : 0;
    /* the prefill's multiply-adds on the tiles' types over the tiles' own rate */
    double cf = i8_peak > 0 && prefill_s > 0 ? i8_tok * batch * (double)prompt / prefill_s / i8_peak : 0;
    if (json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "model"), jw_str(&w, e.m->name);
        jw_key(&w, "backend"), jw_str(&w, e.b->ops->name);
        jw_key(&w, "threads"), jw_int(&w, threads);
        jw_key(&w, "cpu"), jw_str(&w, cpu);
        jw_key(&w, "cpu_isa"), jw_str(&w, cpu_isa_name(cpu_isa_detect()));
        jw_key(&w, "kernels"), jw_str(&w, kern);
        jw_key(&w, "file_bytes"), jw_int(&w, (int64_t)model_file_bytes(e.m));
        jw_key(&w, "batch"), jw_int(&w, batch);
        jw_key(&w, "prompt_tokens"), jw_int(&w, prompt);
        jw_key(&w, "gen_tokens"), jw_int(&w, gen);
        jw_key(&w, "prefill"), jw_obj(&w);
        jw_key(&w, "tokens_per_s"), jw_num(&w, batch * (double)prompt / prefill_s);
        jw_key(&w, "seconds"), jw_num(&w, prefill_s);
        jw_key(&w, "compute_fraction"), jw_num(&w, cf);
        jw_obj_end(&w);
        jw_key(&w, "decode"), jw_obj(&w);
        jw_key(&w, "tokens_per_s_aggregate"), jw_num(&w, agg);
        jw_key(&w, "tokens_per_s_per_sequence"), jw_num(&w, per);
        jw_key(&w, "seconds"), jw_num(&w, decode_s);
        jw_key(&w, "step_seconds_median"), jw_num(&w, step_med);
        jw_obj_end(&w);
        jw_key(&w, "peak_rss_bytes"), jw_int(&w, (int64_t)ru.ru_maxrss * 1024);
        jw_key(&w, "rss_bytes"), jw_int(&w, (int64_t)rss);
        jw_key(&w, "plan_bytes"), jw_int(&w, (int64_t)e.b->ops->memory_bytes(e.b));
        be_memory plan;
        if (is_cpu && !be_cpu_plan(e.m, &e.b->opt, &plan)) { /* its terms: what RSS is made of */
            jw_key(&w, "plan"), jw_obj(&w);
            jw_key(&w, "weights"), jw_int(&w, (int64_t)plan.weights);
            jw_key(&w, "kv"), jw_int(&w, (int64_t)plan.kv);
            jw_key(&w, "kv8"), jw_int(&w, (int64_t)plan.kv8);
            jw_key(&w, "activations"), jw_int(&w, (int64_t)plan.activations);
            jw_key(&w, "scratch"), jw_int(&w, (int64_t)plan.scratch);
            jw_key(&w, "state"), jw_int(&w, (int64_t)plan.state);
            jw_key(&w, "max_batch_tokens"), jw_int(&w, T);
            jw_obj_end(&w);
        }
        jw_key(&w, "roofline"), jw_obj(&w);
        jw_key(&w, "mem_read_bytes_per_s"), jw_num(&w, bw);
        jw_key(&w, "mem_read_bytes_per_s_best"), jw_num(&w, bw_best);
        jw_key(&w, "mem_read_buffer_bytes"), jw_int(&w, (int64_t)(pb.n * sizeof(float)));
        jw_key(&w, "dram_read_bytes_per_s"), jw_num(&w, bw_dram);
        jw_key(&w, "bandwidth_fraction_dram"),
            jw_num(&w, bw_dram > 0 ? step_bytes * (agg / batch) / bw_dram : 0);
        jw_key(&w, "rounds"), jw_arr(&w);
        for (int r = 0; r < n_rounds; r++) {
            jw_obj(&w);
            jw_key(&w, "steps"), jw_int(&w, rounds[r].step1 - rounds[r].step0);
            jw_key(&w, "read_bytes_per_s"), jw_num(&w, rounds[r].read);
            jw_key(&w, "decode_bytes_per_s"), jw_num(&w, rounds[r].decode);
            jw_key(&w, "fraction"), jw_num(&w, rounds[r].read > 0 ? rounds[r].decode / rounds[r].read : 0);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_key(&w, "sgemm_flops_per_s"), jw_num(&w, sg);
        jw_key(&w, "int8_macs_per_s"), jw_num(&w, i8_peak);
        jw_key(&w, "int8_macs_per_token"), jw_num(&w, i8_tok);
        jw_key(&w, "weight_bytes_per_step"), jw_num(&w, wbytes);
        jw_key(&w, "bytes_per_step"), jw_num(&w, step_bytes);
        jw_key(&w, "flops_per_token"), jw_num(&w, flops);
        jw_key(&w, "bandwidth_fraction"), jw_num(&w, bw_frac);
        jw_key(&w, "bandwidth_fraction_best_read"),
            jw_num(&w, bw_best > 0 ? step_bytes * (agg / batch) / bw_best : 0);
        jw_key(&w, "sgemm_fraction"), jw_num(&w, sg_frac);
        jw_obj_end(&w);
        jw_obj_end(&w);
        putchar('\n');
    } else {
        printf("prefill  %10.1f tokens/s", batch * (double)prompt / prefill_s);
        if (cf > 0) printf(" (int8 compute %.0f%% of the tiles' %.1f GMAC/s)", 100 * cf, i8_peak / 1e9);
        putchar('\n');
        printf("decode   %10.1f tokens/s aggregate, %.1f per sequence (batch %d)\n", agg, per, batch);
        printf("roofline bandwidth %.2f GB/s (reached %.0f%%%s), sgemm %.1f GFLOP/s (reached %.0f%%)\n",
               bw / 1e9, 100 * bw_frac, n_rounds ? ", median of the rounds" : "", sg / 1e9, 100 * sg_frac);
        if (n_rounds)
            printf("         best read %.2f GB/s (the mean decode reached %.0f%% of it); DRAM %.2f GB/s\n",
                   bw_best / 1e9, bw_best > 0 ? 100 * step_bytes * (agg / batch) / bw_best : 0,
                   bw_dram / 1e9);
        printf("RSS      %.1f MiB after decode, peak %.1f MiB (the bandwidth probe's buffer included); "
               "file %.1f MiB, backend %.1f MiB\n",
               rss / 1048576.0, ru.ru_maxrss / 1024.0, model_file_bytes(e.m) / 1048576.0,
               e.b->ops->memory_bytes(e.b) / 1048576.0);
        printf("cpu      %s, isa %s; kernels %s\n", cpu, cpu_isa_name(cpu_isa_detect()), kern);
    }
    exit_code = 0;
out:
    if (rc && exit_code) cli_error(&a, "%s", ck_strerror(rc));
    if (seqs) {
        for (int q = 0; q < batch; q++) {
            if (seqs[q].hot) kv_seq_reset(&seqs[q], &e.pool);
            kv_seq_free(&seqs[q]);
        }
    }
    free(seqs), free(views), free(tok), free(pos), free(six), free(row), free(next), free(logits);
    free(step_s), free(step_rate);
    probe_close(&pb);
    cli_engine_close(&e);
    return exit_code;
}
