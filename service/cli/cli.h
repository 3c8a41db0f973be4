/* cli.h - what the confkv subcommands share: argument parsing and model setup.
 *
 * Each subcommand is `int cli_<name>(int argc, char **argv)` returning the
 * process exit code (0 ok, 1 runtime failure, 2 usage error). Errors go to
 * stderr as one line: "confkv <cmd>: <what went wrong>". */
#ifndef CK_CLI_H
#define CK_CLI_H
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "engine.h"
#include "gen.h"
#include "gguf.h"
#include "kv.h"
#include "model.h"
#include "kvpol.h"
#include "samp.h"

int cli_version(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_synth(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_broker(int argc, char **argv);     /* cli_broker.c: embedded Kafka broker */
int cli_submit(int argc, char **argv);     /* cli_submit.c: jobs to confkvd */
int cli_batch(int argc, char **argv);      /* cli_batch.c: OpenAI Batch API files */
int cli_loadgen(int argc, char **argv);    /* cli_loadgen.c: serve-bench load through Kafka */
int cli_templates(int argc, char **argv);  /* cli_templates.c: cache templates in Redis */
int cli_tokenize(int argc, char **argv);   /* cli_tokenize.c: text to token ids */
int cli_route_eval(int argc, char **argv); /* cli_route_eval.c: the cascade's rule, kept share and quality */
int cli_tune(int argc, char **argv);       /* cli_tune.c: the tuning report */
struct eval_ctx;
struct cli_args;
/* cli_eval.c: add the prompts of FILE (one a line; probes: NAME<TAB>PROMPT)
 * to an eval context, at most limit (0 = all). 0, or 1 after an error message. */
int cli_eval_load_prompts(const struct cli_args *a, struct eval_ctx *e, const char *path, int probes,
                          int probe_from, int limit);

/* Argument cursor: argv[i] is the next unread argument. */
typedef struct cli_args {
    int argc;
    char **argv;
    int i;
    const char *cmd; /* for messages */
    int bad;         /* a usage error was reported */
} cli_args;

/* If argv[i] is `name`, consume it and return 1. */
int cli_flag(cli_args *a, const char *name);
/* If argv[i] is `name` (or `name=value`), consume it and its value into *out
 * and return 1; a missing value is a usage error (a->bad). */
int cli_str(cli_args *a, const char *name, const char **out);
/* Same, parsed as a number within [lo, hi]; out of range is a usage error. */
int cli_int(cli_args *a, const char *name, long lo, long hi, int *out);
int cli_u64(cli_args *a, const char *name, uint64_t *out);
int cli_float(cli_args *a, const char *name, double lo, double hi, float *out);
/* Report an unknown argument (usage error) and return 2. */
int cli_unknown(cli_args *a);
void cli_error(const cli_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Model + backend + KV pool, as every engine subcommand sets them up. */
typedef struct cli_engine {
    model *m;
    backend *b;
    kv_pool pool;
    kv_pool pool8;  /* int8 hot blocks (cache_compression); empty unless asked for */
    eng_memory mem; /* the memory plan it was built by (be, max_ctx; no tiers) */
} cli_engine;

typedef struct cli_engine_opts {
    const char *model_path;
    const char *tokenizer_path;
    const char *backend; /* "cpu", "cuda", "auto" */
    int threads;         /* 0 = all cores */
    int block_size;      /* tokens per KV block; 0 = kv_default_block_size */
    int max_batch_tokens;
    int kv_blocks; /* 0 = enough for max_seqs full contexts */
    int max_seqs;
    int max_ctx;       /* --max-context; 0 = the rule of eng_fit_context */
    int kv8_blocks;    /* int8 block pool (conf-int8); 0 = none, -1 = as many as f32 */
    int max_memory_mb; /* --max-memory-mb: refuse a plan past it (0 = no limit) */
    int verbose;       /* --verbose: the memory plan on stderr */
} cli_engine_opts;

void cli_engine_opts_default(cli_engine_opts *o);
/* Parse the engine flags shared by subcommands (--model, --tokenizer,
 * --backend, --threads, --block-size, --max-context, --max-memory-mb,
 * --verbose). Returns 1 if argv[i] was one. */
int cli_engine_flag(cli_args *a, cli_engine_opts *o);
/* Load the model, plan its memory (eng_fit_context: refused past
 * --max-memory-mb), then create the backend and pools. 0, or the exit code
 * after an error message. */
int cli_engine_open(const cli_args *a, const cli_engine_opts *o, cli_engine *e);
void cli_engine_close(cli_engine *e);

/* A vocabulary without the weights: a GGUF's tokenizer alone (vocab-only
 * files have no tensors), or a llama2.c checkpoint loaded with its
 * tokenizer file (its vocabulary size is in the checkpoint). tok borrows
 * from the others; cli_vocab_close frees them. */
typedef struct cli_vocab {
    gguf_file *gf;
    model *m;
    tokenizer *own;
    const tokenizer *tok;
} cli_vocab;
/* 0, or the exit code after an error message (2: --tokenizer given for a GGUF). */
int cli_vocab_open(const cli_args *a, const char *model_path, const char *tok_path, cli_vocab *v);
void cli_vocab_close(cli_vocab *v);

/* Sampling flags (--temperature, --top-p, --top-k, --min-p,
 * --repeat-penalty, --seed). Returns 1 if argv[i] was one. */
int cli_sampling_flag(cli_args *a, samp_params *p);

/* The load generators' random numbers (splitmix64): `confkv bench
 * --scenario serve` and `confkv loadgen` draw the same arrivals and prompts
 * from the same seed, so their figures compare. */
uint64_t cli_rng_next(uint64_t *state);
/* Uniform in (0, 1]. */
double cli_rng_unit(uint64_t *state);
/* Sort doubles ascending (in place). */
void cli_sort_doubles(double *v, size_t n);
/* q-quantile of sorted v (linear interpolation); 0 when empty. */
double cli_quantile(const double *v, size_t n, double q);

/* Monotonic seconds. */
double cli_now(void);

#endif
