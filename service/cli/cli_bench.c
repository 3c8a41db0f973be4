/* cli_bench.c - `confkv bench`: prefill and decode speed, against this
 * machine's own limits measured in the same run (the roofline).
 *
 * Decode at batch 1 reads every weight once per token, so its ceiling is the
 * memory read bandwidth; at large batches the weights are read once per B
 * tokens and the ceiling is the sgemm rate. The bench measures both ceilings
 * first (a multi-threaded streaming read of a buffer far larger than the
 * caches; OpenBLAS sgemm on square matrices) and reports the fraction of the
 * relevant one the run reached. The bandwidth is measured twice: over a
 * buffer the size of the weights (the ceiling batch-1 decode really faces:
 * a model that fits the last-level cache is read from it) and over 512 MiB
 * (DRAM). --scenario serve drives the scheduler
 * instead (cli_serve.c). */
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
 * build's SSE2 loop read 17-21 GB/s on two threads here where the AVX2 one
 * reads 23-27, and a decode then "reached" more of the first than the
 * memory gives. Each line is asked for 4 KiB ahead, as the quantized
 * kernels ask for theirs: on the Zen 5 of BENCHMARKS 12 (session 10) the
 * loop without it read 512 MiB at 20.6 GB/s and with it at 31-33, and the
 * kernels, which prefetch, out-read it. */
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

/* Best-of-5 read bandwidth over a buffer of `bytes`, bytes/s, with probe_for's
 * loop at ISA level isa. The buffer is on 2 MiB pages where the kernel
 * gives them, as the CPU backend's weights and KV pool are: on 4 KiB pages
 * this loop read 9.8-11.2 GB/s here against 13.0-13.7 on huge pages (one
 * thread, 71 MB), and a decode on huge pages then "reached" over 100 % of
 * it. */
static double measure_bandwidth(int threads, size_t bytes, int isa) {
    const size_t huge = (size_t)2 << 20;
    const probe_fn sum = probe_for(isa);
    size_t n = bytes / sizeof(float) / 64 * 64;
    size_t alloc = (n * sizeof(float) + huge - 1) / huge * huge;
    float *buf = aligned_alloc(huge, alloc);
    if (!buf) return 0;
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, alloc, MADV_HUGEPAGE); /* a hint: without it the ceiling is lower, not wrong */
#endif
#pragma omp parallel for num_threads(threads)
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    double best = 0, sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cli_now(), total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
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
    free(buf);
    if (sink == 42) fputc(' ', stderr); /* keep the reads */
    return best;
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
           "Defaults: batch 1, 32 prompt tokens, 128 generated tokens, all cores.\n");
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
     * decode's batch. Sized for 512 always, they were 25 MiB of a
     * 110M-shape quantized file's 112 MiB resident at batch 1; chunks of
     * 256 prefill as fast as 512 there (docs/BENCHMARKS.md 12) in half the
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
    /* Two read bandwidths: over 512 MiB (DRAM, past any cache) and over a
     * buffer the size of the weights (what decode at batch 1 streams; a
     * model that fits the last-level cache is read from there). */
    double bw = 0, bw_dram = 0, sg = 0, bw_after = 0;
    int measured = 0;
    /* bytes of weights a decode step reads: the CPU backend reads quantized
     * weights in their own bytes and f32/f16/bf16 ones as f32; other
     * backends the stored type */
    const int is_cpu = !strcmp(e.b->ops->name, "cpu");
    double wbytes = is_cpu ? (double)be_cpu_step_bytes(e.m) : (double)model_weight_bytes(e.m);
    size_t wset = (size_t)wbytes;
    if (peak_bw > 0 || peak_flops > 0) {
        bw = bw_dram = 1e9 * (double)peak_bw;
        sg = 1e12 * (double)peak_flops;
    } else if (roofline) {
        fprintf(stderr, "confkv bench: measuring this machine (bandwidth, sgemm) ...\n");
        const int isa = cpu_isa_detect();
        bw_dram = measure_bandwidth(threads, (size_t)512 << 20, isa);
        bw = measure_bandwidth(threads, wset > ((size_t)1 << 20) ? wset : ((size_t)1 << 20), isa);
        sg = measure_sgemm(threads);
        measured = 1;
    }
    openblas_set_num_threads(threads);

    kv_seq *seqs = calloc((size_t)batch, sizeof *seqs);
    be_seq_view *views = calloc((size_t)batch, sizeof *views);
    int32_t *tok = malloc((size_t)T * sizeof *tok), *pos = malloc((size_t)T * sizeof *pos);
    int32_t *six = malloc((size_t)T * sizeof *six), *row = malloc((size_t)T * sizeof *row);
    int32_t *next = malloc((size_t)batch * sizeof *next);
    float *logits = malloc((size_t)T * V * sizeof *logits);
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
            views[q - first] = (be_seq_view){.blocks = seqs[q].hot, .n_blocks = seqs[q].n_blocks};
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

    /* Decode: all sequences one token per step, greedy from their logits. */
    fprintf(stderr, "confkv bench: decode %d steps at batch %d ...\n", gen, batch);
    t0 = cli_now();
    for (int step = 0; step < gen; step++) {
        for (int q = 0; q < batch; q++) {
            if ((rc = kv_seq_reserve(&seqs[q], &e.pool, 1))) goto out;
            tok[q] = next[q];
            pos[q] = seqs[q].n_tokens;
            six[q] = q;
            row[q] = q;
            views[q] = (be_seq_view){.blocks = seqs[q].hot, .n_blocks = seqs[q].n_blocks};
        }
        be_batch bt = {batch, tok, pos, six, row, batch, views, batch};
        if ((rc = e.b->ops->forward(e.b, &bt, logits))) goto out;
        for (int q = 0; q < batch; q++) {
            kv_seq_commit(&seqs[q], 1);
            next[q] = samp_argmax(logits + (size_t)q * V, V);
        }
    }
    double decode_s = cli_now() - t0;
    const size_t rss = rss_now();
    /* The weight-sized buffer once more, after the decode, and the better
     * of the two reads counts: on a host whose last-level cache is shared
     * with other tenants (the Zen 5 VM of BENCHMARKS 12, session 10) one
     * best-of-5 read 17-40 GB/s from run to run while the decode between
     * them streamed 26-30, so a single probe made fractions over 100 %. */
    if (measured) {
        bw_after =
            measure_bandwidth(threads, wset > ((size_t)1 << 20) ? wset : ((size_t)1 << 20), cpu_isa_detect());
        if (bw_after > bw) bw = bw_after;
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const model_config *c = &e.m->cfg;
    char cpu[64], kern[256];
    cpu_model_name(cpu, sizeof cpu);
    be_cpu_kernels(e.b, kern, sizeof kern);
    double n_weights = (double)(model_n_params(e.m) - e.m->tok_emb.n + (e.m->tied ? e.m->wcls.n : 0));
    double kvd = (double)c->n_kv_heads * c->head_dim;
    double avg_ctx = prompt + gen / 2.0;
    /* per token: 2 FLOPs per weight in the matmuls, plus attention (QK and AV) */
    double flops = 2.0 * n_weights + 4.0 * c->n_layers * c->n_heads * c->head_dim * avg_ctx;
    double kv_bytes = 2.0 * c->n_layers * kvd * 4.0 * avg_ctx;
    double agg = batch * (double)gen / decode_s, per = gen / decode_s;
    /* bytes one decode step reads: the weights once, every sequence's KV */
    double step_bytes = wbytes + batch * kv_bytes;
    double bw_frac = bw > 0 ? step_bytes * (agg / batch) / bw : 0;
    double sg_frac = sg > 0 ? flops * agg / sg : 0;
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
        jw_obj_end(&w);
        jw_key(&w, "decode"), jw_obj(&w);
        jw_key(&w, "tokens_per_s_aggregate"), jw_num(&w, agg);
        jw_key(&w, "tokens_per_s_per_sequence"), jw_num(&w, per);
        jw_key(&w, "seconds"), jw_num(&w, decode_s);
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
            jw_key(&w, "max_batch_tokens"), jw_int(&w, T);
            jw_obj_end(&w);
        }
        jw_key(&w, "roofline"), jw_obj(&w);
        jw_key(&w, "mem_read_bytes_per_s"), jw_num(&w, bw);
        jw_key(&w, "mem_read_bytes_per_s_after_decode"), jw_num(&w, bw_after);
        jw_key(&w, "mem_read_buffer_bytes"), jw_int(&w, (int64_t)wset);
        jw_key(&w, "dram_read_bytes_per_s"), jw_num(&w, bw_dram);
        jw_key(&w, "bandwidth_fraction_dram"),
            jw_num(&w, bw_dram > 0 ? step_bytes * (agg / batch) / bw_dram : 0);
        jw_key(&w, "sgemm_flops_per_s"), jw_num(&w, sg);
        jw_key(&w, "weight_bytes_per_step"), jw_num(&w, wbytes);
        jw_key(&w, "bytes_per_step"), jw_num(&w, step_bytes);
        jw_key(&w, "flops_per_token"), jw_num(&w, flops);
        jw_key(&w, "bandwidth_fraction"), jw_num(&w, bw_frac);
        jw_key(&w, "sgemm_fraction"), jw_num(&w, sg_frac);
        jw_obj_end(&w);
        jw_obj_end(&w);
        putchar('\n');
    } else {
        printf("prefill  %10.1f tokens/s\n", batch * (double)prompt / prefill_s);
        printf("decode   %10.1f tokens/s aggregate, %.1f per sequence (batch %d)\n", agg, per, batch);
        printf("roofline bandwidth %.2f GB/s (reached %.0f%%), sgemm %.1f GFLOP/s (reached %.0f%%)\n",
               bw / 1e9, 100 * bw_frac, sg / 1e9, 100 * sg_frac);
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
    cli_engine_close(&e);
    return exit_code;
}
