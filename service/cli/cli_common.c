/* cli_common.c - argument parsing and engine setup for the CLI (cli.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ck_err.h"
#include "cli.h"

void cli_error(const cli_args *a, const char *fmt, ...) {
    fprintf(stderr, "confkv %s: ", a->cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_flag(cli_args *a, const char *name) {
    if (a->i < a->argc && !strcmp(a->argv[a->i], name)) {
        a->i++;
        return 1;
    }
    return 0;
}

int cli_str(cli_args *a, const char *name, const char **out) {
    if (a->i >= a->argc) return 0;
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n)) return 0;
    if (arg[n] == '=') {
        *out = arg + n + 1;
        a->i++;
        return 1;
    }
    if (arg[n]) return 0;
    if (a->i + 1 >= a->argc) {
        cli_error(a, "%s needs a value", name);
        a->bad = 1;
        a->i++;
        return 1;
    }
    *out = a->argv[a->i + 1];
    a->i += 2;
    return 1;
}

int cli_int(cli_args *a, const char *name, long lo, long hi, int *out) {
    const char *s = NULL;
    if (!cli_str(a, name, &s)) return 0;
    if (!s) return 1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(a, "%s: '%s' is not an integer in %ld..%ld", name, s, lo, hi);
        a->bad = 1;
        return 1;
    }
    *out = (int)v;
    return 1;
}

int cli_u64(cli_args *a, const char *name, uint64_t *out) {
    const char *s = NULL;
    if (!cli_str(a, name, &s)) return 0;
    if (!s) return 1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        cli_error(a, "%s: '%s' is not a non-negative integer", name, s);
        a->bad = 1;
        return 1;
    }
    *out = v;
    return 1;
}

int cli_float(cli_args *a, const char *name, double lo, double hi, float *out) {
    const char *s = NULL;
    if (!cli_str(a, name, &s)) return 0;
    if (!s) return 1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        cli_error(a, "%s: '%s' is not a number in %g..%g", name, s, lo, hi);
        a->bad = 1;
        return 1;
    }
    *out = (float)v;
    return 1;
}

int cli_unknown(cli_args *a) {
    cli_error(a, "unknown argument '%s' (try --help)", a->argv[a->i]);
    a->bad = 1;
    return 2;
}

void cli_engine_opts_default(cli_engine_opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->block_size = 0; /* 0: kv_default_block_size of the model's context */
    o->max_batch_tokens = 256;
    o->max_seqs = 1;
    o->kv8_blocks = 0;
}

/* --cpu-kernels c|avx2|avx512|vnni: the CPU backend's kernels, passed on as
 * CONFKV_CPU_KERNELS (cpu_features.h), which the backend reads when it is
 * created and refuses, saying why, for a level this CPU lacks. */
static int cpu_kernels_flag(cli_args *a) {
    const char *s = NULL;
    if (!cli_str(a, "--cpu-kernels", &s)) return 0;
    if (s && setenv("CONFKV_CPU_KERNELS", s, 1)) a->bad = 1;
    return 1;
}

int cli_engine_flag(cli_args *a, cli_engine_opts *o) {
    return cli_str(a, "--model", &o->model_path) || cli_str(a, "--tokenizer", &o->tokenizer_path) ||
           cpu_kernels_flag(a) || cli_str(a, "--backend", &o->backend) ||
           cli_int(a, "--threads", 0, 1024, &o->threads) ||
           cli_int(a, "--block-size", 1, 4096, &o->block_size) ||
           cli_int(a, "--max-context", 1, 1 << 20, &o->max_ctx) ||
           cli_int(a, "--max-memory-mb", 0, 1 << 30, &o->max_memory_mb) ||
           (cli_flag(a, "--verbose") && (o->verbose = 1));
}

/* The backend cli_engine_open builds for one context (eng_fit_context). */
typedef struct cli_plan_ud {
    const model *m;
    const cli_engine_opts *o;
    be_options bo;
} cli_plan_ud;

static int cli_plan_at(void *ud_, int ctx, eng_memory *p) {
    cli_plan_ud *u = ud_;
    const cli_engine_opts *o = u->o;
    int bs = o->block_size > 0 ? o->block_size : kv_default_block_size(u->m->cfg.seq_len);
    long long per_seq = (ctx + bs - 1) / bs, n = o->kv_blocks > 0 ? o->kv_blocks : per_seq * o->max_seqs;
    if (n > (1 << 30)) return CK_ERANGE;
    u->bo = (be_options){.max_batch_tokens = o->max_batch_tokens,
                         .n_kv_blocks = (int)n,
                         .block_size = bs,
                         .n_threads = o->threads,
                         .max_ctx = ctx,
                         .n_kv8_blocks = o->kv8_blocks < 0 ? (int)n : o->kv8_blocks,
                         .n_state_slots = o->max_seqs}; /* a recurrent state slot a sequence */
    memset(p, 0, sizeof *p);
    int rc = be_cpu_plan(u->m, &u->bo, &p->be);
    p->total = p->be.total;
    p->max_ctx = ctx;
    p->file_bytes = model_file_bytes(u->m);
    return rc;
}

int cli_sampling_flag(cli_args *a, samp_params *p) {
    return cli_float(a, "--temperature", 0, 100, &p->temperature) ||
           cli_float(a, "--top-p", 0, 1, &p->top_p) || cli_int(a, "--top-k", 0, 1 << 22, &p->top_k) ||
           cli_float(a, "--min-p", 0, 1, &p->min_p) ||
           cli_float(a, "--repeat-penalty", 0.01, 100, &p->repeat_penalty) || cli_u64(a, "--seed", &p->seed);
}

int cli_engine_open(const cli_args *a, const cli_engine_opts *o, cli_engine *e) {
    memset(e, 0, sizeof *e);
    char err[512] = "";
    if (!o->model_path) {
        cli_error(a, "--model is required");
        return 2;
    }
    int rc = model_load(o->model_path, o->tokenizer_path, &e->m, err, sizeof err);
    if (rc) {
        cli_error(a, "%s", err);
        return 1;
    }
    /* The memory plan decides the context before anything large exists. */
    cli_plan_ud pu = {.m = e->m, .o = o};
    int bs = o->block_size > 0 ? o->block_size : kv_default_block_size(e->m->cfg.seq_len);
    if ((rc = eng_fit_context(e->m, o->max_ctx, (size_t)o->max_memory_mb, bs, cli_plan_at, &pu, &e->mem, err,
                              sizeof err)) ||
        (rc = cli_plan_at(&pu, e->mem.max_ctx, &e->mem))) {
        cli_error(a, "%s", *err ? err : ck_strerror(rc));
        cli_engine_close(e);
        return 1;
    }
    e->mem.limit_mb = (size_t)o->max_memory_mb;
    if (o->verbose) {
        eng_memory_describe(&e->mem, err, sizeof err);
        fprintf(stderr, "confkv: memory %s\n", err);
    }
    be_options bo = pu.bo;
    if ((rc = be_new(o->backend, e->m, &bo, &e->b, err, sizeof err))) {
        cli_error(a, "%s", err);
        cli_engine_close(e);
        return 1;
    }
    if ((rc = kv_pool_init(&e->pool, bo.n_kv_blocks, bo.block_size)) ||
        (rc = kv_pool_init(&e->pool8, bo.n_kv8_blocks, bo.block_size))) {
        cli_error(a, "KV pool: %s", ck_strerror(rc));
        cli_engine_close(e);
        return 1;
    }
    return 0;
}

void cli_engine_close(cli_engine *e) {
    be_free(e->b);
    kv_pool_free(&e->pool);
    kv_pool_free(&e->pool8);
    model_free(e->m);
    memset(e, 0, sizeof *e);
}

uint64_t cli_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double cli_rng_unit(uint64_t *s) { return ((double)(cli_rng_next(s) >> 11) + 1.0) / 9007199254740992.0; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void cli_sort_doubles(double *v, size_t n) {
    if (n > 1) qsort(v, n, sizeof *v, cmp_double);
}

double cli_quantile(const double *v, size_t n, double q) {
    if (!n) return 0;
    double k = q * (double)(n - 1);
    size_t i = (size_t)k;
    if (i + 1 >= n) return v[n - 1];
    return v[i] + (k - (double)i) * (v[i + 1] - v[i]);
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_vocab_open(const cli_args *a, const char *model_path, const char *tok_path, cli_vocab *v) {
    char err[512] = "", magic[4] = {0};
    memset(v, 0, sizeof *v);
    FILE *probe = fopen(model_path, "rb");
    if (!probe) {
        cli_error(a, "cannot open %s", model_path);
        return 1;
    }
    size_t got = fread(magic, 1, 4, probe);
    fclose(probe);
    int rc;
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        if (tok_path) {
            cli_error(a, "--tokenizer is for llama2.c checkpoints; %s is GGUF", model_path);
            return 2;
        }
        rc = gguf_open(model_path, &v->gf, err, sizeof err);
        if (!rc) rc = tok_from_gguf(v->gf, &v->own, err, sizeof err);
        v->tok = v->own;
    } else {
        rc = model_load(model_path, tok_path, &v->m, err, sizeof err);
        if (!rc) v->tok = v->m->tok;
    }
    if (rc) {
        cli_error(a, "%s", err[0] ? err : ck_strerror(rc));
        cli_vocab_close(v);
        return 1;
    }
    return 0;
}

void cli_vocab_close(cli_vocab *v) {
    tok_free(v->own);
    gguf_close(v->gf);
    model_free(v->m);
    memset(v, 0, sizeof *v);
}
