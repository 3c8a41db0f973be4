/* svc_config.h - confkvd's configuration: a key=value file, CONFKV_*
 * environment variables and command-line flags, in that order of precedence
 * (low to high).
 *
 * Keys. Service keys are lower_snake_case (the table in svc_config.c lists
 * them with their defaults and docs/SERVICE.md documents them). Every key
 * that starts with "kafka." is handed to librdkafka with the prefix removed,
 * unchanged and unchecked by us (SASL, TLS, ... need no code here); librdkafka
 * rejects what it does not know when the client is created.
 *
 *   file:   model = /models/x.gguf           kafka.security.protocol = SASL_SSL
 *   env:    CONFKV_MODEL=/models/x.gguf      CONFKV_KAFKA_SECURITY_PROTOCOL=SASL_SSL
 *   flag:   --model /models/x.gguf           --kafka.security.protocol SASL_SSL
 *
 * In environment names the key's '.' and '_' are both '_' (librdkafka keys
 * have no '_', so CONFKV_KAFKA_A_B is kafka.a.b). In flags '-' may stand for
 * '_' (--http-port). Boolean keys given as flags take no value.
 *
 * Ownership: svc_config owns every string in it; svc_config_free frees. */
#ifndef CK_SVC_CONFIG_H
#define CK_SVC_CONFIG_H
#include <stddef.h>
#include <stdio.h>

typedef struct svc_kv {
    char *key; /* "kafka.x.y" for librdkafka keys, else a service key */
    char *value;
    int source; /* SVC_SRC_* */
} svc_kv;

enum { SVC_SRC_DEFAULT = 0, SVC_SRC_FILE, SVC_SRC_ENV, SVC_SRC_FLAG };

/* One model of `model` (a key that may be given more than once in the file
 * and among the flags: NAME=PATH[,tokenizer=T][,chat_template=J][,kv_budget_mb=N];
 * or a single PATH, unnamed). Strings owned by the svc_config. */
#define SVC_CONFIG_MAX_MODELS 8
typedef struct svc_model_spec {
    char *name; /* NULL: the single unnamed model (model_name, or the model's own) */
    char *path;
    char *tokenizer;     /* NULL: the `tokenizer` key */
    char *chat_template; /* NULL: the `chat_template` key */
    long kv_budget_mb;   /* 0: the `kv_budget_mb` key */
} svc_model_spec;

typedef struct svc_config {
    /* engine */
    const char *model, *tokenizer, *backend, *model_name, *policy;
    const char *chat_template; /* a Jinja file overriding the model's tokenizer.chat_template, or NULL */
    const char *tuning;        /* "off" or "adaptive" (svc_config_tuning) */
    double tuning_window_s, tuning_target;
    int threads, max_running, max_queue;
    long kv_budget_mb;
    int max_context;    /* tokens a sequence may hold (0 = the model's, capped: engine.h) */
    long max_memory_mb; /* refuse a model whose memory plan exceeds this (0 = no limit) */
    /* several models (svc_models.h): `model` parsed; the cascade */
    svc_model_spec models[SVC_CONFIG_MAX_MODELS];
    int n_models;
    const char *default_model;                   /* a name, or "auto"; NULL = the first model */
    const char *route, *route_models;            /* "off" | "cascade"; "SMALL,LARGE" */
    const char *route_rule;                      /* svc_route.h's grammar */
    int route_cascade, route_small, route_large; /* resolved: indices into models */
    /* kafka */
    const char *brokers, *group, *topic_jobs, *topic_results, *topic_metrics, *topic_dlq;
    const char *topic_stream; /* streamed jobs' partial records (svc_stream.h) */
    int stream_interval_ms;   /* their coalescing period (0 = every engine step) */
    int kafka_embedded, embedded_partitions;
    int revoke_grace_ms; /* a revoked partition's dispatched jobs get this long to finish (svc_kafka.h) */
    int mark_ahead;      /* dispatch marks run this many offsets ahead (svc_offsets.h) */
    int dispatch_ahead;  /* a partition's jobs in the engine at most (0: auto; svc_offsets.h) */
    /* service */
    const char *ready_file, *http_host, *instance, *log_level;
    int http_port;
    long max_message_bytes;    /* a job message larger than this is refused */
    int max_prompt_tokens;     /* 0 = the model's context */
    int max_tokens_cap;        /* a job's max_tokens at most */
    int default_max_tokens;    /* when a job names none */
    int max_inflight;          /* jobs consumed but not finished before partitions pause */
    double drain_timeout_s;    /* SIGTERM: time in-flight jobs get to finish */
    double metrics_interval_s; /* a metrics record every N s (0 = never) */
    int print_config;
    /* cold tier (svc_redis.h); no URL = no cold tier */
    const char *redis, *redis_prefix;
    int redis_ttl_s, redis_max_inflight_mb, redis_timeout_ms;
    long warm_budget_kb; /* warm tier (0 = 4x the hot pool) */
    /* prefix cache, sessions, templates (engine.h) */
    long prefix_cache_mb; /* 0 = the hot pool's size */
    int prefix_cache;     /* 0 = off */
    int max_sessions;
    int prewarm_top;  /* templates prewarmed at start-up */
    int prewarm_wait; /* readiness waits for that prewarm */
    /* the command line it was built from (borrowed from main: SIGHUP's
     * reload builds a new configuration from the same argv, environment and
     * file, so the precedence stays the same) */
    int argc;
    char **argv;
    /* every key as set, defaults included (kafka.* keys among them) */
    svc_kv *kv;
    int n_kv, cap_kv;
} svc_config;

/* Build the configuration from argv (argv[0] is the program), the
 * environment and the file named by --config (or CONFKV_CONFIG). Returns 0;
 * 1 when --help was asked (help printed); CK_EINVAL with err filled for a bad
 * file line, an unknown key, a value that does not parse or is out of range. */
int svc_config_load(svc_config *c, int argc, char **argv, char *err, size_t errlen);
void svc_config_free(svc_config *c);
/* tuning as engine.h takes it: 1 adaptive, 0 off; -1 for another value
 * (svc_config_load has already refused those). */
int svc_config_tuning(const svc_config *c);
/* Value of a key, NULL when unset. */
const char *svc_config_get(const svc_config *c, const char *key);
/* Visit every kafka.* key (name without the "kafka." prefix). */
typedef int (*svc_config_kafka_cb)(void *ud, const char *name, const char *value);
int svc_config_each_kafka(const svc_config *c, svc_config_kafka_cb cb, void *ud);
/* Write the effective configuration, one key=value a line, sorted, with the
 * values of secret keys (passwords, secrets, tokens, private keys) masked. */
void svc_config_print(const svc_config *c, FILE *f);
/* 1 when the key names a secret (its value must never be printed). */
int svc_config_is_secret(const char *key);
/* 1 when a flag (--key or --key=value, dashes or underscores) names a key
 * that configures the models and their engines (--model, --route-rule,
 * --threads, --policy, ...) or is --config: what `confkv batch --local`
 * passes to svc_config_load; 0 for the service's own keys (Kafka, HTTP,
 * Redis, ...) and unknown ones. */
int svc_config_engine_flag(const char *flag);
void svc_config_help(FILE *f);

#endif
