/* svc_config.c - key=value file < CONFKV_* environment < flags (svc_config.h). */
#include "svc_config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck_err.h"
#include "engine.h"
#include "svc_route.h"

extern char **environ;

/* The default of an engine key is the engine's own (eng_config_default,
 * the one place it is written): keys[] marks those with ENG_DEF. */
static const char ENG_DEF[] = "(engine)";

static const char *def_of(const char *name, const char *def, char *buf, size_t n) {
    if (def != ENG_DEF) return def;
    eng_config d;
    eng_config_default(&d);
    if (!strcmp(name, "max_running"))
        snprintf(buf, n, "%d", d.max_running);
    else if (!strcmp(name, "max_queue"))
        snprintf(buf, n, "%d", d.max_queue);
    else
        return NULL;
    return buf;
}

enum { T_STR, T_INT, T_LONG, T_DBL, T_BOOL };

/* Every service key: its type, default, range, the field it fills, and
 * whether it configures the models and their engines (E_ENGINE: what
 * `confkv batch --local` also takes) rather than the service around them. */
enum { E_SERVICE, E_ENGINE };
static const struct key_def {
    const char *name;
    int type;
    const char *def;
    double lo, hi;
    size_t off;
    const char *help;
    int scope;
} keys[] = {
#define F(field) offsetof(svc_config, field)
    {"model", T_STR, NULL, 0, 0, F(model),
     "model file (GGUF or llama2.c checkpoint); required. Several: NAME=PATH, once for each "
     "(options after the path: ,tokenizer=T ,chat_template=J ,kv_budget_mb=N)",
     E_ENGINE},
    {"default_model", T_STR, NULL, 0, 0, F(default_model),
     "the model of jobs that name none: a NAME, or auto (the cascade) [the first model]", E_ENGINE},
    {"route", T_STR, "off", 0, 0, F(route),
     "off, or cascade: `\"model\": \"auto\"` jobs start on the small model", E_ENGINE},
    {"route_models", T_STR, NULL, 0, 0, F(route_models),
     "the cascade's models: SMALL,LARGE (names of `model`)", E_ENGINE},
    {"route_rule", T_STR, SVC_ROUTE_DEFAULT, 0, 0, F(route_rule),
     "when an auto job moves to the large model (docs/SERVICE.md, Routing)", E_ENGINE},
    {"tokenizer", T_STR, NULL, 0, 0, F(tokenizer), "llama2.c tokenizer file", E_ENGINE},
    {"model_name", T_STR, NULL, 0, 0, F(model_name), "name jobs use in `model` (default: the model's own)",
     E_ENGINE},
    {"backend", T_STR, "cpu", 0, 0, F(backend), "cpu, cuda or auto", E_ENGINE},
    {"threads", T_INT, "0", 0, 1024, F(threads), "CPU threads of the engine (0 = all cores)", E_ENGINE},
    {"policy", T_STR, NULL, 0, 0, F(policy), "default KV policy (full, window:N, conf, ...)", E_ENGINE},
    {"tuning", T_STR, "off", 0, 0, F(tuning),
     "off, or adaptive: the default policy's thresholds follow the load (docs/SERVICE.md, Tuning)", E_ENGINE},
    {"tuning_window_s", T_DBL, "30", 0.1, 86400, F(tuning_window_s), "tuning: seconds per window", E_ENGINE},
    {"tuning_target", T_DBL, "0.25", 0.01, 0.99, F(tuning_target),
     "tuning: share of decode steps the policy should treat as uncertain", E_ENGINE},
    {"chat_template", T_STR, NULL, 0, 0, F(chat_template),
     "Jinja chat template file for `messages` jobs, instead of the model's (unset = the model's)", E_ENGINE},
    {"max_running", T_INT, ENG_DEF, 1, 65536, F(max_running), "sequences decoding at once", E_ENGINE},
    {"max_queue", T_INT, ENG_DEF, 1, 1 << 20, F(max_queue), "engine waiting queue length", E_ENGINE},
    {"kv_budget_mb", T_LONG, "0", 0, 1 << 20, F(kv_budget_mb), "hot KV pool in MiB (0 = engine default)",
     E_ENGINE},
    {"max_context", T_INT, "0", 0, 1 << 20, F(max_context),
     "tokens a sequence may hold (0 = the model's context, at most 8192 or what max_memory_mb allows)",
     E_ENGINE},
    {"max_memory_mb", T_LONG, "0", 0, 1L << 30, F(max_memory_mb),
     "refuse a model whose planned memory exceeds this many MiB (0 = no limit)", E_ENGINE},
    {"brokers", T_STR, NULL, 0, 0, F(brokers), "short for kafka.bootstrap.servers", E_SERVICE},
    {"kafka_embedded", T_BOOL, "false", 0, 1, F(kafka_embedded), "run librdkafka's mock cluster in-process",
     E_SERVICE},
    {"embedded_partitions", T_INT, "4", 1, 1024, F(embedded_partitions), "partitions of the embedded topics",
     E_SERVICE},
    {"group", T_STR, "confkv", 0, 0, F(group), "consumer group (kafka.group.id)", E_SERVICE},
    {"topic_jobs", T_STR, "confkv.jobs", 0, 0, F(topic_jobs), "jobs topic", E_SERVICE},
    {"topic_results", T_STR, "confkv.results", 0, 0, F(topic_results), "results topic", E_SERVICE},
    {"topic_metrics", T_STR, "confkv.metrics", 0, 0, F(topic_metrics), "metrics topic", E_SERVICE},
    {"topic_dlq", T_STR, "confkv.dlq", 0, 0, F(topic_dlq), "dead-letter topic", E_SERVICE},
    {"topic_stream", T_STR, "confkv.stream", 0, 0, F(topic_stream),
     "partial records of `\"stream\": true` jobs", E_SERVICE},
    {"stream_interval_ms", T_INT, "50", 0, 60000, F(stream_interval_ms),
     "a streamed job's text goes out at most every N ms (0 = at every engine step)", E_SERVICE},
    {"revoke_grace_ms", T_INT, "5000", 0, 600000, F(revoke_grace_ms),
     "a revoked partition's running jobs get this long to finish before it is given back (0 = at once)",
     E_SERVICE},
    {"mark_ahead", T_INT, "256", 2, 1 << 20, F(mark_ahead),
     "redelivery marks run N offsets ahead of dispatch (more rides out longer rebalances, fewer false marks "
     "after a crash)",
     E_SERVICE},
    {"dispatch_ahead", T_INT, "0", 0, 1 << 20, F(dispatch_ahead),
     "jobs of one partition handed to the engine and not finished, at most; a revoke abandons no more (0 = "
     "auto: twice max_running shared among the assigned partitions, at least 8)",
     E_SERVICE},
    {"ready_file", T_STR, NULL, 0, 0, F(ready_file), "write {bootstrap_servers, http} here when ready",
     E_SERVICE},
    {"http_host", T_STR, "127.0.0.1", 0, 0, F(http_host), "HTTP listen address (0.0.0.0 in containers)",
     E_SERVICE},
    {"http_port", T_INT, "9464", 0, 65535, F(http_port), "HTTP port for /metrics /healthz /readyz (0 = any)",
     E_SERVICE},
    {"instance", T_STR, NULL, 0, 0, F(instance), "instance name in results (default: host name)", E_SERVICE},
    {"log_level", T_STR, "info", 0, 0, F(log_level), "debug, info, warn, error", E_SERVICE},
    {"max_message_bytes", T_LONG, "1048576", 64, 1 << 30, F(max_message_bytes), "largest job message",
     E_SERVICE},
    {"max_prompt_tokens", T_INT, "0", 0, 1 << 24, F(max_prompt_tokens), "longest prompt (0 = the context)",
     E_ENGINE},
    {"max_tokens_cap", T_INT, "4096", 1, 1 << 24, F(max_tokens_cap), "largest max_tokens a job may ask",
     E_SERVICE},
    {"default_max_tokens", T_INT, "256", 1, 1 << 24, F(default_max_tokens),
     "max_tokens of a job that names none", E_ENGINE},
    {"max_inflight", T_INT, "256", 1, 1 << 20, F(max_inflight), "jobs in flight before partitions pause",
     E_SERVICE},
    {"drain_timeout_s", T_DBL, "30", 0, 86400, F(drain_timeout_s), "SIGTERM: time given to in-flight jobs",
     E_SERVICE},
    {"metrics_interval_s", T_DBL, "10", 0, 86400, F(metrics_interval_s), "metrics record period (0 = off)",
     E_SERVICE},
    {"redis", T_STR, NULL, 0, 0, F(redis),
     "Redis cold tier: redis://[user:password@]host:port/db or unix:///path (unset = none)", E_SERVICE},
    {"redis_prefix", T_STR, "confkv:", 0, 0, F(redis_prefix), "prefix of every Redis key", E_SERVICE},
    {"redis_ttl_s", T_INT, "86400", 0, 1 << 30, F(redis_ttl_s), "expiry of cold blocks in Redis (0 = none)",
     E_SERVICE},
    {"redis_max_inflight_mb", T_INT, "64", 1, 1 << 16, F(redis_max_inflight_mb),
     "Redis bytes in flight at most (beyond: spills are dropped)", E_SERVICE},
    {"redis_timeout_ms", T_INT, "2000", 10, 600000, F(redis_timeout_ms), "Redis connect and reply timeout",
     E_SERVICE},
    {"prefix_cache_mb", T_LONG, "0", 0, 1 << 20, F(prefix_cache_mb),
     "host memory for prefix KV blocks (templates, sessions, shared prompts; 0 = the hot pool's size)",
     E_ENGINE},
    {"prefix_cache", T_BOOL, "true", 0, 1, F(prefix_cache), "reuse the KV of prompt prefixes seen before",
     E_ENGINE},
    {"max_sessions", T_INT, "1024", 1, 1 << 24, F(max_sessions), "session contexts kept in host memory",
     E_ENGINE},
    {"prewarm_top", T_INT, "8", 0, 4096, F(prewarm_top),
     "at start-up, load the KV of the N most used templates (0 = none)", E_SERVICE},
    {"prewarm_wait", T_BOOL, "false", 0, 1, F(prewarm_wait),
     "/readyz fails until the start-up prewarm is done", E_SERVICE},
    {"warm_budget_kb", T_LONG, "0", 0, 1L << 30, F(warm_budget_kb),
     "warm KV tier in KiB (0 = 4x the hot pool)", E_ENGINE},
    {"print_config", T_BOOL, "false", 0, 1, F(print_config), "print the effective configuration and exit",
     E_SERVICE},
#undef F
};
#define N_KEYS (sizeof keys / sizeof keys[0])

static const struct key_def *find_key(const char *name) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].name, name)) return &keys[i];
    return NULL;
}

static int is_kafka_key(const char *k) { return !strncmp(k, "kafka.", 6) && k[6]; }

/* Keys that may be given more than once in one place (the file, the
 * flags): each occurrence is added, one a line; a place of higher
 * precedence replaces the whole list. */
static int is_list_key(const char *key, size_t klen) { return klen == 5 && !memcmp(key, "model", 5); }

static int set_kv(svc_config *c, const char *key, size_t klen, const char *val, size_t vlen, int src) {
    for (int i = 0; i < c->n_kv; i++)
        if (strlen(c->kv[i].key) == klen && !memcmp(c->kv[i].key, key, klen)) {
            char *v;
            if (is_list_key(key, klen) && c->kv[i].source == src && src != SVC_SRC_DEFAULT) {
                size_t old = strlen(c->kv[i].value);
                if (!(v = malloc(old + 1 + vlen + 1))) return CK_ENOMEM;
                memcpy(v, c->kv[i].value, old);
                v[old] = '\n';
                memcpy(v + old + 1, val, vlen);
                v[old + 1 + vlen] = 0;
            } else if (!(v = strndup(val, vlen))) {
                return CK_ENOMEM;
            }
            free(c->kv[i].value);
            c->kv[i].value = v;
            c->kv[i].source = src;
            return 0;
        }
    if (c->n_kv == c->cap_kv) {
        int cap = c->cap_kv ? 2 * c->cap_kv : 64;
        svc_kv *kv = realloc(c->kv, (size_t)cap * sizeof *kv);
        if (!kv) return CK_ENOMEM;
        c->kv = kv;
        c->cap_kv = cap;
    }
    svc_kv *e = &c->kv[c->n_kv];
    e->key = strndup(key, klen);
    e->value = strndup(val, vlen);
    e->source = src;
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        return CK_ENOMEM;
    }
    c->n_kv++;
    return 0;
}

const char *svc_config_get(const svc_config *c, const char *key) {
    for (int i = 0; i < c->n_kv; i++)
        if (!strcmp(c->kv[i].key, key)) return c->kv[i].value;
    return NULL;
}

/* A key is acceptable when it is a service key or a kafka.* key made of
 * librdkafka's characters. */
static int check_key(const char *k, char *err, size_t errlen, const char *where) {
    if (find_key(k)) return 0;
    if (is_kafka_key(k)) {
        for (const char *p = k; *p; p++)
            if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') {
                snprintf(err, errlen, "%s: bad character in key '%s'", where, k);
                return CK_EINVAL;
            }
        return 0;
    }
    snprintf(err, errlen, "%s: unknown key '%s' (see confkvd --help)", where, k);
    return CK_EINVAL;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static int load_file(svc_config *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "--config %s: %s", path, strerror(errno));
        return CK_EIO;
    }
    char line[8192];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 2);
            rc = CK_EINVAL;
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#' || *s == ';') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected key=value", path, lineno);
            rc = CK_EINVAL;
            break;
        }
        *eq = 0;
        char *k = trim(s), *v = trim(eq + 1);
        char where[300];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if ((rc = check_key(k, err, errlen, where))) break;
        if ((rc = set_kv(c, k, strlen(k), v, strlen(v), SVC_SRC_FILE))) break;
    }
    fclose(f);
    return rc;
}

/* CONFKV_HTTP_PORT -> http_port; CONFKV_KAFKA_SASL_USERNAME -> kafka.sasl.username.
 * Unknown CONFKV_* names are ignored (other tools use the prefix too). */
static int load_env(svc_config *c) {
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "CONFKV_", 7)) continue;
        const char *name = *e + 7, *eq = strchr(name, '=');
        if (!eq || eq == name || eq - name > 200) continue;
        char key[256];
        size_t n = (size_t)(eq - name);
        for (size_t i = 0; i < n; i++) key[i] = (char)tolower((unsigned char)name[i]);
        key[n] = 0;
        if (find_key(key)) {
            /* a service key (kafka_embedded included) */
        } else if (!strncmp(key, "kafka_", 6) && key[6]) {
            key[5] = '.';
            for (size_t i = 6; i < n; i++)
                if (key[i] == '_') key[i] = '.';
        } else {
            continue;
        }
        int rc = set_kv(c, key, n, eq + 1, strlen(eq + 1), SVC_SRC_ENV);
        if (rc) return rc;
    }
    return 0;
}

/* Flag name to key: "--http-port" -> "http_port"; "--kafka.x.y" unchanged. */
static int flag_key(const char *arg, char *key, size_t cap) {
    if (strncmp(arg, "--", 2)) return -1;
    arg += 2;
    size_t n = strcspn(arg, "=");
    if (n == 0 || n >= cap) return -1;
    memcpy(key, arg, n);
    key[n] = 0;
    if (!is_kafka_key(key))
        for (size_t i = 0; i < n; i++)
            if (key[i] == '-') key[i] = '_';
    return 0;
}

int svc_config_engine_flag(const char *flag) {
    char key[256];
    if (flag_key(flag, key, sizeof key)) return 0;
    if (!strcmp(key, "config")) return 1;
    const struct key_def *k = find_key(key);
    return k && k->scope == E_ENGINE;
}

void svc_config_help(FILE *f) {
    fprintf(f,
            "usage: confkvd --model M [--tokenizer T] (--kafka-embedded | --brokers HOST:PORT) [options]\n\n"
            "Consumes generation jobs from Kafka, runs them on the engine, produces results.\n"
            "Configuration: --config FILE (key=value lines) < CONFKV_<KEY> environment < --<key> flags.\n"
            "Every kafka.<name> key goes to librdkafka unchanged (--kafka.security.protocol SASL_SSL).\n\n");
    for (size_t i = 0; i < N_KEYS; i++) {
        char flag[64], buf[32];
        const char *def = def_of(keys[i].name, keys[i].def, buf, sizeof buf);
        snprintf(flag, sizeof flag, "--%s", keys[i].name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_') *p = '-';
        fprintf(f, "  %-24s %s%s%s%s\n", flag, keys[i].help, def ? " [" : "", def ? def : "", def ? "]" : "");
    }
    fprintf(f, "  %-24s %s\n", "--config FILE", "read key=value lines from FILE");
}

static int parse_value(const struct key_def *k, const char *v, void *field, char *err, size_t errlen) {
    char *end;
    errno = 0;
    switch (k->type) {
    case T_STR: *(const char **)field = v; return 0;
    case T_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on"))
            *(int *)field = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "off"))
            *(int *)field = 0;
        else
            break;
        return 0;
    case T_INT:
    case T_LONG: {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < k->lo || x > k->hi) break;
        if (k->type == T_INT)
            *(int *)field = (int)x;
        else
            *(long *)field = x;
        return 0;
    }
    case T_DBL: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !(x >= k->lo && x <= k->hi)) break;
        *(double *)field = x;
        return 0;
    }
    }
    if (k->type == T_BOOL)
        snprintf(err, errlen, "%s: '%s' is not true or false", k->name, v);
    else
        snprintf(err, errlen, "%s: '%s' is not a number in %g..%g", k->name, v, k->lo, k->hi);
    return CK_EINVAL;
}

/* ------------------------------------------------------------ models */

static int name_ok(const char *s, size_t n) {
    if (n == 0 || n > 63) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._:-", s[i])) return 0;
    return 1;
}

/* One line of `model`: NAME=PATH[,opt=v]... or a bare PATH. */
static int parse_model(svc_model_spec *m, const char *line, char *err, size_t errlen) {
    const char *eq = strchr(line, '='), *slash = strchr(line, '/');
    memset(m, 0, sizeof *m);
    if (!eq || (slash && slash < eq) || !name_ok(line, (size_t)(eq - line))) {
        /* unnamed: the whole line is the path */
        if (!*line) {
            snprintf(err, errlen, "model: an empty value");
            return CK_EINVAL;
        }
        return (m->path = strdup(line)) ? 0 : CK_ENOMEM;
    }
    if (!(m->name = strndup(line, (size_t)(eq - line)))) return CK_ENOMEM;
    if (!strcmp(m->name, "auto")) {
        snprintf(err, errlen, "model: 'auto' is the cascade's name, not a model's");
        return CK_EINVAL;
    }
    const char *p = eq + 1;
    size_t n = strcspn(p, ",");
    if (!n) {
        snprintf(err, errlen, "model %s: no path after '='", m->name);
        return CK_EINVAL;
    }
    if (!(m->path = strndup(p, n))) return CK_ENOMEM;
    for (p += n; *p == ',';) {
        p++;
        size_t len = strcspn(p, ",");
        const char *oe = memchr(p, '=', len);
        char opt[32];
        size_t on = oe ? (size_t)(oe - p) : len;
        snprintf(opt, sizeof opt, "%.*s", (int)(on < 31 ? on : 31), p);
        char **dst = !strcmp(opt, "tokenizer")       ? &m->tokenizer
                     : !strcmp(opt, "chat_template") ? &m->chat_template
                                                     : NULL;
        if (!oe || oe + 1 == p + len) {
            snprintf(err, errlen, "model %s: option '%.*s' needs =value", m->name, (int)len, p);
            return CK_EINVAL;
        }
        if (dst) {
            free(*dst);
            if (!(*dst = strndup(oe + 1, (size_t)(p + len - oe - 1)))) return CK_ENOMEM;
        } else if (!strcmp(opt, "kv_budget_mb")) {
            char num[24], *end;
            snprintf(num, sizeof num, "%.*s", (int)(p + len - oe - 1), oe + 1);
            errno = 0;
            long v = strtol(num, &end, 10);
            if (errno || end == num || *end || v < 1 || v > (1 << 20)) {
                snprintf(err, errlen, "model %s: kv_budget_mb '%s' is not a number in 1..1048576", m->name,
                         num);
                return CK_EINVAL;
            }
            m->kv_budget_mb = v;
        } else {
            snprintf(err, errlen,
                     "model %s: unknown option '%s' (tokenizer, chat_template and kv_budget_mb are known)",
                     m->name, opt);
            return CK_EINVAL;
        }
        p += len;
    }
    return 0;
}

static int find_model(const svc_config *c, const char *name, size_t n) {
    for (int i = 0; i < c->n_models; i++)
        if (c->models[i].name && strlen(c->models[i].name) == n && !memcmp(c->models[i].name, name, n))
            return i;
    return -1;
}

/* `model` into models[]; then default_model and the cascade's keys. */
static int parse_models(svc_config *c, char *err, size_t errlen) {
    const char *v = svc_config_get(c, "model");
    int rc;
    for (const char *p = v; p && *p;) {
        size_t n = strcspn(p, "\n");
        char line[4096];
        if (n >= sizeof line) {
            snprintf(err, errlen, "model: a value longer than %zu bytes", sizeof line - 1);
            return CK_EINVAL;
        }
        memcpy(line, p, n);
        line[n] = 0;
        if (c->n_models == SVC_CONFIG_MAX_MODELS) {
            snprintf(err, errlen, "model: more than %d models", SVC_CONFIG_MAX_MODELS);
            return CK_EINVAL;
        }
        svc_model_spec *m = &c->models[c->n_models++];
        if ((rc = parse_model(m, line, err, errlen))) return rc;
        if (m->name && find_model(c, m->name, strlen(m->name)) != c->n_models - 1) {
            snprintf(err, errlen, "model: the name %s is given twice", m->name);
            return CK_EINVAL;
        }
        p += n;
        if (*p) p++;
    }
    for (int i = 0; c->n_models > 1 && i < c->n_models; i++)
        if (!c->models[i].name) {
            snprintf(err, errlen, "model: with several models each needs a name (NAME=PATH): '%s' has none",
                     c->models[i].path);
            return CK_EINVAL;
        }
    if (c->n_models && c->models[0].name && c->model_name) {
        snprintf(err, errlen,
                 "model_name: only for a single unnamed model (named models are called by their names)");
        return CK_EINVAL;
    }
    if (c->n_models) c->model = c->models[0].path;
    if (!strcmp(c->route, "cascade")) {
        c->route_cascade = 1;
        const char *rm = c->route_models ? c->route_models : "", *comma = strchr(rm, ',');
        int a = comma ? find_model(c, rm, (size_t)(comma - rm)) : -1;
        int b = comma ? find_model(c, comma + 1, strlen(comma + 1)) : -1;
        if (a < 0 || b < 0 || a == b) {
            snprintf(err, errlen, "route_models: '%s' must name two of the models (SMALL,LARGE)", rm);
            return CK_EINVAL;
        }
        c->route_small = a;
        c->route_large = b;
        svc_route_rule r;
        if ((rc = svc_route_parse(c->route_rule, &r, err, errlen))) return rc;
    } else if (strcmp(c->route, "off")) {
        snprintf(err, errlen, "route: '%s' is not off or cascade", c->route);
        return CK_EINVAL;
    } else if (c->route_models) {
        snprintf(err, errlen, "route_models is set but route is off (set route=cascade)");
        return CK_EINVAL;
    }
    if (c->default_model) {
        int ok = !strcmp(c->default_model, "auto")
                     ? c->route_cascade
                     : find_model(c, c->default_model, strlen(c->default_model)) >= 0;
        if (!ok) {
            snprintf(err, errlen, "default_model: '%s' is not %s", c->default_model,
                     !strcmp(c->default_model, "auto") ? "available without route=cascade"
                                                       : "one of the models' names");
            return CK_EINVAL;
        }
    }
    return 0;
}

int svc_config_load(svc_config *c, int argc, char **argv, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    int rc = 0;
    for (size_t i = 0; i < N_KEYS; i++) {
        char buf[32];
        const char *def = def_of(keys[i].name, keys[i].def, buf, sizeof buf);
        if (def && (rc = set_kv(c, keys[i].name, strlen(keys[i].name), def, strlen(def), SVC_SRC_DEFAULT)))
            return rc;
    }
    /* The file first (lowest precedence), wherever --config sits in argv. */
    const char *file = getenv("CONFKV_CONFIG");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            svc_config_help(stdout);
            return 1;
        }
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            file = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9))
            file = argv[i] + 9;
    }
    if (file && *file && (rc = load_file(c, file, err, errlen))) return rc;
    if ((rc = load_env(c))) return rc;
    for (int i = 1; i < argc; i++) {
        char key[256];
        if (flag_key(argv[i], key, sizeof key)) {
            snprintf(err, errlen, "unexpected argument '%s' (try --help)", argv[i]);
            return CK_EINVAL;
        }
        const char *eq = strchr(argv[i], '=');
        if (!strcmp(key, "config")) {
            if (!eq) i++;
            continue;
        }
        if ((rc = check_key(key, err, errlen, "flag"))) return rc;
        const struct key_def *k = find_key(key);
        const char *v;
        if (eq)
            v = eq + 1;
        else if (k && k->type == T_BOOL)
            v = "true";
        else if (i + 1 < argc)
            v = argv[++i];
        else {
            snprintf(err, errlen, "--%s needs a value", key);
            return CK_EINVAL;
        }
        if ((rc = set_kv(c, key, strlen(key), v, strlen(v), SVC_SRC_FLAG))) return rc;
    }
    /* brokers is short for kafka.bootstrap.servers; group for kafka.group.id. */
    const char *b = svc_config_get(c, "brokers");
    if (b && (rc = set_kv(c, "kafka.bootstrap.servers", 23, b, strlen(b), SVC_SRC_FLAG))) return rc;
    /* Typed fields point into the key/value store (stable: no more set_kv). */
    for (size_t i = 0; i < N_KEYS; i++) {
        const char *v = svc_config_get(c, keys[i].name);
        if (!v) continue;
        if ((rc = parse_value(&keys[i], v, (char *)c + keys[i].off, err, errlen))) return rc;
    }
    const char *g = svc_config_get(c, "kafka.group.id");
    if (g) c->group = g;
    if (svc_config_tuning(c) < 0) {
        snprintf(err, errlen, "tuning: '%s' is not off or adaptive", c->tuning);
        return CK_EINVAL;
    }
    if ((rc = parse_models(c, err, errlen))) return rc;
    c->argc = argc;
    c->argv = argv;
    return 0;
}

int svc_config_tuning(const svc_config *c) {
    if (!c->tuning || !strcmp(c->tuning, "off")) return 0;
    return !strcmp(c->tuning, "adaptive") ? 1 : -1;
}

void svc_config_free(svc_config *c) {
    for (int i = 0; i < c->n_models; i++) {
        free(c->models[i].name);
        free(c->models[i].path);
        free(c->models[i].tokenizer);
        free(c->models[i].chat_template);
    }
    for (int i = 0; i < c->n_kv; i++) {
        free(c->kv[i].key);
        free(c->kv[i].value);
    }
    free(c->kv);
    memset(c, 0, sizeof *c);
}

int svc_config_each_kafka(const svc_config *c, svc_config_kafka_cb cb, void *ud) {
    for (int i = 0; i < c->n_kv; i++)
        if (is_kafka_key(c->kv[i].key)) {
            int rc = cb(ud, c->kv[i].key + 6, c->kv[i].value);
            if (rc) return rc;
        }
    return 0;
}

int svc_config_is_secret(const char *key) {
    static const char *words[] = {
        "password", "secret", "ssl.key.pem", "ssl_key", "keystore", "jaas", "sasl.oauthbearer.config"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(key, words[i])) return 1;
    /* "token" in librdkafka's keys (OAuth tokens); the service's own
     * token keys are counts (max_tokens_cap, default_max_tokens, ...) */
    if (is_kafka_key(key) && strstr(key, "token")) return 1;
    return !strcmp(key, "redis"); /* its URL may carry a password */
}

static int cmp_kv(const void *a, const void *b) {
    return strcmp(((const svc_kv *)a)->key, ((const svc_kv *)b)->key);
}

void svc_config_print(const svc_config *c, FILE *f) {
    svc_kv *s = malloc((size_t)c->n_kv * sizeof *s);
    if (!s) return;
    memcpy(s, c->kv, (size_t)c->n_kv * sizeof *s);
    qsort(s, (size_t)c->n_kv, sizeof *s, cmp_kv);
    for (int i = 0; i < c->n_kv; i++) {
        if (!strcmp(s[i].key, "print_config")) continue;
        if (svc_config_is_secret(s[i].key)) {
            fprintf(f, "%s=*****\n", s[i].key);
            continue;
        }
        /* a list key: one line for each of its values, as the file takes it */
        for (const char *v = s[i].value;;) {
            size_t n = strcspn(v, "\n");
            fprintf(f, "%s=%.*s\n", s[i].key, (int)n, v);
            if (!v[n]) break;
            v += n + 1;
        }
    }
    free(s);
}
