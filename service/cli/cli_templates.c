/* cli_templates.c - `confkv templates`: the cache templates (tpl.h) that
 * confkvd keeps in Redis, managed from outside the service.
 *
 * Keys (PREFIX is confkvd's key prefix, "confkv:" by default):
 *   PREFIX tpl:NAME      the record, tpl_encode's text, no expiry
 *   PREFIX tpl-uses      sorted set: member NAME, score = jobs that used it
 *                        (confkvd increments it; create adds it at 0)
 *   PREFIX pfx:FP:HASH   a KV block of any prefix (pfx.h), with the TTL
 *                        the cold tier gives every block
 * create/list/inspect/delete talk to Redis directly (cli_redis.h); prewarm
 * asks a running confkvd over HTTP (cli_http.h), since only it can compute
 * KV. delete leaves the blocks alone: they expire with their TTL, and
 * another template or a shared prompt may still use them. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "coldkey.h"
#include "cli.h"
#include "cli_http.h"
#include "cli_redis.h"
#include "jw.h"
#include "kv.h"
#include "model.h"
#include "pfx.h"
#include "tpl.h"
#include "tokenizer.h"

#define TPLC_TIMEOUT_MS 5000           /* Redis: connect, and each reply */
#define TPLC_PREFIX_MAX COLDKEY_NS_MAX /* --key-prefix bytes (256) */
#define TPLC_KEY_MAX COLDKEY_NS_KEY_MAX
/* The largest valid record: tpl_encode's header (at most TPL_NAME_MAX + 160
 * bytes) and the largest text. Reads ask Redis for one byte more, so a value
 * over the bound is seen without transferring it whole. */
#define TPLC_RECORD_MAX (TPL_TEXT_MAX + TPL_NAME_MAX + 160)
#define TPLC_LIST_MAX (1 << 20) /* templates list will gather */
#define TPLC_EXISTS_BATCH 256   /* block keys per EXISTS */
#define TPLC_PREWARM_NAMES 256
#define TPLC_PREWARM_REPLY_MAX (1 << 20)

/* Flags a subcommand accepts. */
enum { F_REDIS = 1, F_NAME = 2, F_TEXT = 4, F_FORCE = 8, F_MODEL = 16, F_HTTP = 32, F_NAMES = 64 };

typedef struct tplc_opts {
    const char *redis, *prefix, *name, *text_path, *http;
    const char *model_path, *tokenizer_path;
    int block_size; /* 0 = kv_default_block_size, as confkvd */
    int json, force, timeout_s;
    const char *names[TPLC_PREWARM_NAMES];
    int n_names;
} tplc_opts;

/* ------------------------------------------------------------------ help */

static const struct {
    const char *name;
    int flags;
    const char *usage;
} subs[] = {
    {"create", F_REDIS | F_NAME | F_TEXT | F_FORCE,
     "usage: confkv templates create --redis URL --name N --text FILE [--force] [--key-prefix P] [--json]\n\n"
     "  Store FILE's bytes (- for stdin; at most 1 MiB) as template N. An existing\n"
     "  template is kept unless --force (its use count is kept either way).\n"},
    {"list", F_REDIS,
     "usage: confkv templates list --redis URL [--key-prefix P] [--json]\n\n"
     "  Every template: name, uses, bytes, created. A record that fails verification\n"
     "  is listed as corrupt.\n"},
    {"inspect", F_REDIS | F_NAME | F_MODEL,
     "usage: confkv templates inspect --redis URL --name N [--model M [--tokenizer T] [--block-size B]]\n"
     "                                [--key-prefix P] [--json]\n\n"
     "  One template and its text. With --model: its tokens, its KV blocks and how many\n"
     "  of them Redis holds for that model (confkvd's block size unless --block-size).\n"},
    {"delete", F_REDIS | F_NAME,
     "usage: confkv templates delete --redis URL --name N [--key-prefix P] [--json]\n\n"
     "  Remove the record and its use count. Its KV blocks expire with their TTL.\n"},
    {"prewarm", F_HTTP | F_NAMES,
     "usage: confkv templates prewarm --http HOST:PORT [--name N]... [--timeout S] [--json]\n\n"
     "  Ask a running confkvd (its --http-port) to load the KV of the named templates,\n"
     "  or of the most used ones when no --name is given; prints its JSON reply.\n\n"
     "  --timeout S       seconds to connect, and to wait for the reply (default 120)\n"},
};

static const char redis_help[] =
    "\n  --redis URL       redis://[user:password@]host[:port][/db] or unix:///path[?db=N]\n"
    "  --key-prefix P    confkvd's Redis key prefix (default confkv:)\n";
static const char common_help[] = "  --json            one JSON object on stdout\n"
                                  "Exit code: 0 ok, 1 failure (the message says why), 2 usage error.\n";

static void help_main(FILE *f) {
    fprintf(f, "usage: confkv templates <create|list|inspect|delete|prewarm> [options]\n\n"
               "Cache templates: named prefix texts (system prompts) whose KV confkvd keeps\n"
               "pinned and in Redis. Jobs name one with \"template\".\n\n");
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        const char *u = subs[i].usage + strlen("usage: ");
        fprintf(f, "  %.*s\n", (int)strcspn(u, "\n"), u);
    }
    fprintf(f, "\n`confkv templates <command> --help` for each.\n");
}

/* Parse argv[1..] for subcommand `s`. Returns -1 to go on, else the exit code. */
static int parse(cli_args *a, int s, tplc_opts *o) {
    int fl = subs[s].flags;
    o->prefix = "confkv:";
    o->timeout_s = 120;
    while (a->i < a->argc && !a->bad) {
        if (cli_flag(a, "--help") || cli_flag(a, "-h")) {
            printf("%s%s%s", subs[s].usage, fl & F_REDIS ? redis_help : "", common_help);
            return 0;
        }
        const char *nm = NULL;
        if (cli_flag(a, "--json"))
            o->json = 1;
        else if ((fl & F_REDIS) &&
                 (cli_str(a, "--redis", &o->redis) || cli_str(a, "--key-prefix", &o->prefix)))
            continue;
        else if ((fl & F_NAME) && cli_str(a, "--name", &o->name))
            continue;
        else if ((fl & F_TEXT) && cli_str(a, "--text", &o->text_path))
            continue;
        else if ((fl & F_FORCE) && cli_flag(a, "--force"))
            o->force = 1;
        else if ((fl & F_MODEL) &&
                 (cli_str(a, "--model", &o->model_path) || cli_str(a, "--tokenizer", &o->tokenizer_path) ||
                  cli_int(a, "--block-size", 1, 4096, &o->block_size)))
            continue;
        else if ((fl & F_HTTP) &&
                 (cli_str(a, "--http", &o->http) || cli_int(a, "--timeout", 1, 3600, &o->timeout_s)))
            continue;
        else if ((fl & F_NAMES) && cli_str(a, "--name", &nm)) {
            if (!nm) continue; /* missing value: already reported */
            if (o->n_names == TPLC_PREWARM_NAMES) {
                cli_error(a, "at most %d --name", TPLC_PREWARM_NAMES);
                return 2;
            }
            if (!tpl_name_ok(nm)) {
                cli_error(a, "--name '%s': 1 to %d bytes of A-Z a-z 0-9 . _ : -", nm, TPL_NAME_MAX);
                return 2;
            }
            o->names[o->n_names++] = nm;
        } else
            return cli_unknown(a);
    }
    if (a->bad) return 2;
    if ((fl & F_REDIS) && !o->redis) {
        cli_error(a, "--redis is required");
        return 2;
    }
    if ((fl & F_HTTP) && !o->http) {
        cli_error(a, "--http is required (confkvd's HOST:PORT)");
        return 2;
    }
    if ((fl & F_NAME) && !o->name) {
        cli_error(a, "--name is required");
        return 2;
    }
    if ((fl & F_NAME) && !tpl_name_ok(o->name)) {
        cli_error(a, "--name '%s': 1 to %d bytes of A-Z a-z 0-9 . _ : -", o->name, TPL_NAME_MAX);
        return 2;
    }
    if ((fl & F_TEXT) && !o->text_path) {
        cli_error(a, "--text is required (a file, or - for stdin)");
        return 2;
    }
    if ((fl & F_REDIS) && strlen(o->prefix) > TPLC_PREFIX_MAX) {
        cli_error(a, "--key-prefix is over %d bytes", TPLC_PREFIX_MAX);
        return 2;
    }
    if ((o->tokenizer_path || o->block_size) && !o->model_path) {
        cli_error(a, "--tokenizer and --block-size go with --model");
        return 2;
    }
    return -1;
}

/* ---------------------------------------------------------------- helpers */

/* Connect; a bad URL is a usage error (2), anything else a failure (1). */
static int open_redis(const cli_args *a, const tplc_opts *o, cli_redis *r) {
    char err[512];
    int rc = cli_redis_open(r, o->redis, TPLC_TIMEOUT_MS, err, sizeof err);
    if (rc) cli_error(a, "%s", err);
    return rc == CK_EINVAL ? 2 : rc ? 1 : 0;
}

/* Keys (coldkey.h). They cannot fail: names are checked (tpl_name_ok) and
 * the prefix bounded (TPLC_PREFIX_MAX) before any key is made. */
static size_t record_key(const tplc_opts *o, const char *name, char *key) {
    int n = coldkey_tpl(key, TPLC_KEY_MAX, o->prefix, name);
    return n < 0 ? 0 : (size_t)n;
}

static size_t uses_key(const tplc_opts *o, char *key) {
    int n = coldkey_tpl_uses(key, TPLC_KEY_MAX, o->prefix);
    return n < 0 ? 0 : (size_t)n;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "2026-01-01T12:00:00Z" */
static void iso_time(int64_t ms, char *buf, size_t cap) {
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm)) snprintf(buf, cap, "?");
}

/* Names read back from Redis keys may hold any byte: print them safely. */
static void put_name(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n && i < 200; i++)
        fputc((unsigned char)s[i] > 0x20 && s[i] != 0x7f ? s[i] : '?', f);
    if (n > 200) fputs("...", f);
}

/* What a record key holds. */
enum { REC_OK, REC_MISSING, REC_CORRUPT };

typedef struct tplc_rec {
    int state;
    const char *problem; /* REC_CORRUPT: why, for a person */
    tpl_record r;        /* REC_OK: borrows raw's bytes */
    redisReply *raw;     /* owned; free with rec_free */
} tplc_rec;

static void rec_free(tplc_rec *x) {
    if (x->raw) freeReplyObject(x->raw);
    x->raw = NULL;
}

/* Read and verify the record at key (want: the name it must carry, NULL
 * when the key's own name is not a valid one). TYPE first, so a missing key
 * and an empty value are told apart; GETRANGE bounds what comes back.
 * Returns 0 with x filled, or CK_EIO (err filled). */
static int fetch_record(cli_redis *rd, const char *key, size_t klen, const char *want, tplc_rec *x, char *err,
                        size_t errlen) {
    memset(x, 0, sizeof *x);
    redisReply *t;
    const char *targv[2] = {"TYPE", key};
    size_t tlens[2] = {4, klen};
    int rc = cli_redis_cmd(rd, 2, targv, tlens, &t, err, errlen);
    if (rc) return rc;
    if (t->type != REDIS_REPLY_STATUS || !t->str || t->len > 32) {
        freeReplyObject(t);
        snprintf(err, errlen, "redis %s: TYPE: unexpected reply", rd->where);
        return CK_EIO;
    }
    int is_none = t->len == 4 && !memcmp(t->str, "none", 4),
        is_string = t->len == 6 && !memcmp(t->str, "string", 6);
    freeReplyObject(t);
    if (is_none) {
        x->state = REC_MISSING;
        return CK_OK;
    }
    x->state = REC_CORRUPT;
    if (!is_string) {
        x->problem = "not a string value";
        return CK_OK;
    }
    char end[24];
    snprintf(end, sizeof end, "%u", (unsigned)TPLC_RECORD_MAX);
    const char *gargv[4] = {"GETRANGE", key, "0", end};
    size_t glens[4] = {8, klen, 1, strlen(end)};
    if ((rc = cli_redis_cmd(rd, 4, gargv, glens, &x->raw, err, errlen))) return rc;
    if (x->raw->type != REDIS_REPLY_STRING || (x->raw->len && !x->raw->str)) {
        rec_free(x);
        snprintf(err, errlen, "redis %s: GETRANGE: unexpected reply", rd->where);
        return CK_EIO;
    }
    if (x->raw->len > TPLC_RECORD_MAX)
        x->problem = "larger than any record";
    else if (!want || tpl_decode(x->raw->str, x->raw->len, want, &x->r))
        x->problem = "fails verification (format, name, length or checksum)";
    else
        x->state = REC_OK;
    if (x->state != REC_OK) rec_free(x);
    return CK_OK;
}

/* The use count of name (0 when the index has none). 0 or CK_EIO. */
static int fetch_uses(cli_redis *rd, const tplc_opts *o, const char *name, size_t nlen, int64_t *uses,
                      char *err, size_t errlen) {
    char ikey[TPLC_KEY_MAX];
    const char *argv[3] = {"ZSCORE", ikey, name};
    size_t lens[3] = {6, uses_key(o, ikey), nlen};
    redisReply *rep;
    int rc = cli_redis_cmd(rd, 3, argv, lens, &rep, err, errlen), present;
    if (rc) return rc;
    rc = cli_redis_score(rep, uses, &present);
    freeReplyObject(rep);
    if (rc) {
        snprintf(err, errlen, "redis %s: %.*s holds a use count for '%.*s' that is not a whole number",
                 rd->where, (int)lens[1], ikey, (int)(nlen < 200 ? nlen : 200), name);
        return CK_EIO;
    }
    return CK_OK;
}

/* ----------------------------------------------------------------- create */

/* Read the whole file (or stdin), at most TPL_TEXT_MAX bytes. */
static int read_text(const cli_args *a, const char *path, char **out, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        cli_error(a, "cannot open %s", path);
        return 1;
    }
    char *b = malloc((size_t)TPL_TEXT_MAX + 1);
    size_t n = b ? fread(b, 1, (size_t)TPL_TEXT_MAX + 1, f) : 0;
    int bad = !b ? 1 : ferror(f) ? 2 : n > TPL_TEXT_MAX ? 3 : n == 0 ? 4 : 0;
    if (f != stdin) fclose(f);
    if (bad) {
        free(b);
        if (bad == 1)
            cli_error(a, "out of memory");
        else if (bad == 2)
            cli_error(a, "cannot read %s", path);
        else if (bad == 3)
            cli_error(a, "%s is over %u bytes, the most a template holds", path, TPL_TEXT_MAX);
        else
            cli_error(a, "%s is empty", path);
        return 1;
    }
    *out = b;
    *len = n;
    return 0;
}

static int cmd_create(cli_args *a, const tplc_opts *o) {
    char *text, *rec = NULL, err[512];
    size_t text_len, rec_len;
    int ex = read_text(a, o->text_path, &text, &text_len);
    if (ex) return ex;
    int64_t created = wall_ms();
    int rc = tpl_encode(o->name, created, text, text_len, &rec, &rec_len);
    free(text);
    if (rc) {
        cli_error(a, "cannot encode the record: %s", ck_strerror(rc));
        return 1;
    }
    cli_redis rd;
    if ((ex = open_redis(a, o, &rd))) {
        free(rec);
        return ex;
    }
    ex = 1;
    char key[TPLC_KEY_MAX], ikey[TPLC_KEY_MAX];
    /* NX makes "refuse to overwrite" one atomic step: two creators of one
     * name cannot both succeed. */
    const char *sargv[4] = {"SET", key, rec, "NX"};
    size_t slens[4] = {3, record_key(o, o->name, key), rec_len, 2};
    redisReply *rep = NULL;
    if (cli_redis_cmd(&rd, o->force ? 3 : 4, sargv, slens, &rep, err, sizeof err)) {
        cli_error(a, "%s", err);
        goto out;
    }
    if (rep->type == REDIS_REPLY_NIL) {
        cli_error(a, "template '%s' exists (--force replaces it)", o->name);
        goto out;
    }
    if (rep->type != REDIS_REPLY_STATUS || rep->len != 2 || !rep->str || memcmp(rep->str, "OK", 2)) {
        cli_error(a, "redis %s: SET: unexpected reply", rd.where);
        goto out;
    }
    freeReplyObject(rep);
    rep = NULL;
    /* NX: a replaced template keeps its count. */
    const char *zargv[5] = {"ZADD", ikey, "NX", "0", o->name};
    size_t zlens[5] = {4, uses_key(o, ikey), 2, 1, strlen(o->name)};
    long long added;
    if (cli_redis_cmd(&rd, 5, zargv, zlens, &rep, err, sizeof err)) {
        cli_error(a, "%s (the record was written)", err);
        goto out;
    }
    if (cli_redis_int(rep, &added)) {
        cli_error(a, "redis %s: ZADD: unexpected reply (the record was written)", rd.where);
        goto out;
    }
    if (o->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "created");
        jw_bool(&w, 1);
        jw_key(&w, "name");
        jw_str(&w, o->name);
        jw_key(&w, "bytes");
        jw_int(&w, (int64_t)text_len);
        jw_key(&w, "created_ms");
        jw_int(&w, created);
        jw_obj_end(&w);
        putchar('\n');
    } else {
        printf("created template '%s' (%zu bytes) at %s\n", o->name, text_len, rd.where);
    }
    ex = 0;
out:
    if (rep) freeReplyObject(rep);
    free(rec);
    cli_redis_close(&rd);
    return ex;
}

/* ------------------------------------------------------------------- list */

typedef struct tplc_key {
    char *s;
    size_t n;
} tplc_key;

static int key_cmp(const void *x, const void *y) {
    const tplc_key *a = x, *b = y;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->s, b->s, n);
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

/* Every key PREFIX tpl:*, sorted, without SCAN's possible repeats. Returns
 * 0 (*keys malloc'd, each s too) or CK_EIO / CK_ENOMEM / CK_ERANGE. */
static int scan_records(cli_redis *rd, const tplc_opts *o, tplc_key **keys, size_t *n_keys, char *err,
                        size_t errlen) {
    /* MATCH is a glob: the prefix's own glob characters are escaped. */
    char pat[2 * TPLC_PREFIX_MAX + 8];
    int pl = coldkey_tpl_glob(pat, sizeof pat, o->prefix);
    if (pl < 0) {
        snprintf(err, errlen, "--key-prefix is over %d bytes", TPLC_PREFIX_MAX);
        return CK_ERANGE;
    }
    size_t pn = (size_t)pl, n = 0, cap = 0;
    tplc_key *k = NULL;
    char cursor[24] = "0";
    int rc = CK_OK;
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", pat, "COUNT", "512"};
        size_t lens[6] = {4, strlen(cursor), 5, pn, 5, 3};
        redisReply *rep;
        if ((rc = cli_redis_cmd(rd, 6, argv, lens, &rep, err, errlen))) break;
        /* [cursor, [key...]] */
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING || !rep->element[0]->str ||
            rep->element[0]->len == 0 || rep->element[0]->len >= sizeof cursor ||
            strspn(rep->element[0]->str, "0123456789") != rep->element[0]->len ||
            rep->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(rep);
            snprintf(err, errlen, "redis %s: SCAN: unexpected reply", rd->where);
            rc = CK_EIO;
            break;
        }
        memcpy(cursor, rep->element[0]->str, rep->element[0]->len);
        cursor[rep->element[0]->len] = 0;
        const redisReply *ks = rep->element[1];
        for (size_t i = 0; i < ks->elements && !rc; i++) {
            const redisReply *e = ks->element[i];
            const char *nm;
            size_t nl;
            if (e->type != REDIS_REPLY_STRING || !e->str ||
                coldkey_tpl_parse(e->str, e->len, o->prefix, &nm, &nl))
                continue; /* not one of ours after all */
            if (n == TPLC_LIST_MAX) {
                snprintf(err, errlen, "more than %d template keys", TPLC_LIST_MAX);
                rc = CK_ERANGE;
                break;
            }
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 64;
                tplc_key *nk = realloc(k, nc * sizeof *k);
                if (!nk) {
                    rc = CK_ENOMEM;
                    break;
                }
                k = nk;
                cap = nc;
            }
            if (!(k[n].s = malloc(e->len + 1))) {
                rc = CK_ENOMEM;
                break;
            }
            memcpy(k[n].s, e->str, e->len);
            k[n].s[e->len] = 0;
            k[n++].n = e->len;
        }
        freeReplyObject(rep);
    } while (!rc && strcmp(cursor, "0"));
    if (rc == CK_ENOMEM) snprintf(err, errlen, "out of memory");
    if (rc) {
        for (size_t i = 0; i < n; i++) free(k[i].s);
        free(k);
        return rc;
    }
    if (n) qsort(k, n, sizeof *k, key_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && !key_cmp(&k[u - 1], &k[i]))
            free(k[i].s);
        else
            k[u++] = k[i];
    }
    *keys = k;
    *n_keys = u;
    return CK_OK;
}

static int cmd_list(cli_args *a, const tplc_opts *o) {
    char err[512];
    cli_redis rd;
    int ex = open_redis(a, o, &rd);
    if (ex) return ex;
    tplc_key *k = NULL;
    size_t n = 0, corrupt = 0;
    if (scan_records(&rd, o, &k, &n, err, sizeof err)) {
        cli_error(a, "%s", err);
        cli_redis_close(&rd);
        return 1;
    }
    jw w;
    if (o->json) {
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "templates");
        jw_arr(&w);
    }
    ex = 0;
    for (size_t i = 0; i < n && !ex; i++) {
        /* scan_records kept only keys this parses: name is NUL-terminated (in k[i].s) */
        const char *name = "";
        size_t nlen = 0;
        (void)coldkey_tpl_parse(k[i].s, k[i].n, o->prefix, &name, &nlen);
        /* A key whose name has a NUL or a forbidden byte holds no template
         * confkvd would read: corrupt without looking. */
        int valid = nlen == strlen(name) && tpl_name_ok(name);
        tplc_rec x;
        int64_t uses = 0;
        if (fetch_record(&rd, k[i].s, k[i].n, valid ? name : NULL, &x, err, sizeof err) ||
            fetch_uses(&rd, o, name, nlen, &uses, err, sizeof err)) {
            rec_free(&x);
            cli_error(a, "%s", err);
            ex = 1;
            break;
        }
        if (x.state == REC_MISSING) continue; /* deleted since SCAN saw it */
        corrupt += x.state == REC_CORRUPT;
        if (o->json) {
            jw_obj(&w);
            jw_key(&w, "name");
            jw_strn(&w, name, nlen);
            jw_key(&w, "uses");
            jw_int(&w, uses);
            jw_key(&w, "bytes");
            if (x.state == REC_OK)
                jw_int(&w, (int64_t)x.r.text_len);
            else
                jw_null(&w);
            jw_key(&w, "created_ms");
            if (x.state == REC_OK)
                jw_int(&w, x.r.created_ms);
            else
                jw_null(&w);
            jw_key(&w, "corrupt");
            jw_bool(&w, x.state == REC_CORRUPT);
            if (x.state == REC_CORRUPT) {
                jw_key(&w, "problem");
                jw_str(&w, x.problem);
            }
            jw_obj_end(&w);
        } else {
            put_name(stdout, name, nlen);
            if (x.state == REC_OK) {
                char t[32];
                iso_time(x.r.created_ms, t, sizeof t);
                printf("  uses=%lld bytes=%zu created=%s\n", (long long)uses, x.r.text_len, t);
            } else {
                printf("  uses=%lld CORRUPT: %s\n", (long long)uses, x.problem);
            }
        }
        rec_free(&x);
    }
    if (o->json) {
        jw_arr_end(&w);
        jw_obj_end(&w);
        putchar('\n');
    } else if (!ex) {
        printf("%zu templates at %s", n, rd.where);
        if (corrupt) printf(" (%zu corrupt)", corrupt);
        putchar('\n');
    }
    for (size_t i = 0; i < n; i++) free(k[i].s);
    free(k);
    cli_redis_close(&rd);
    return ex;
}

/* ---------------------------------------------------------------- inspect */

typedef struct tplc_kv {
    int tokens, block_size, ctx;
    int blocks_total, blocks_cached;
    char fingerprint[17];
} tplc_kv;

/* Tokenize the text as the engine does for a template (with BOS), name its
 * blocks as pfx.h does, and count those Redis holds. Only blocks that end
 * before the last token are ever stored: the engine always computes the
 * last prompt token, so it never caches the block holding it. */
static int template_blocks(cli_args *a, const tplc_opts *o, cli_redis *rd, const tpl_record *r, tplc_kv *kv) {
    char err[512];
    model *m = NULL;
    int32_t *ids = NULL;
    char *keys = NULL;
    int ex = 1;
    if (model_load(o->model_path, o->tokenizer_path, &m, err, sizeof err)) {
        cli_error(a, "%s", err);
        return 1;
    }
    snprintf(kv->fingerprint, sizeof kv->fingerprint, "%s", m->fingerprint);
    kv->ctx = m->cfg.seq_len;
    kv->block_size = o->block_size ? o->block_size : kv_default_block_size(m->cfg.seq_len);
    /* An id covers at least one byte, besides BOS and the dummy-prefix
     * space: len + 2 is enough, and the tokenizer says when it is not. */
    int max = (int)r->text_len + 2, rc = CK_ETOOLONG;
    for (int tries = 0; rc == CK_ETOOLONG && tries < 2; tries++) {
        free(ids);
        if (!(ids = malloc((size_t)max * sizeof *ids))) {
            rc = CK_ENOMEM;
            break;
        }
        rc = tok_encode(m->tok, r->text, r->text_len, 1, ids, max, &kv->tokens);
        if (rc == CK_ETOOLONG) max = kv->tokens;
    }
    if (rc) {
        cli_error(a, "cannot tokenize the template: %s", ck_strerror(rc));
        goto out;
    }
    int bs = kv->block_size;
    kv->blocks_total = kv->tokens > 0 ? (kv->tokens - 1) / bs : 0;
    kv->blocks_cached = 0;
    size_t kcap = strlen(o->prefix) + COLDKEY_MAX;
    if (!(keys = malloc((size_t)TPLC_EXISTS_BATCH * kcap))) {
        cli_error(a, "out of memory");
        goto out;
    }
    uint64_t h = pfx_root(m->fingerprint);
    for (int j0 = 0; j0 < kv->blocks_total; j0 += TPLC_EXISTS_BATCH) {
        const char *argv[1 + TPLC_EXISTS_BATCH];
        size_t lens[1 + TPLC_EXISTS_BATCH];
        int nb = kv->blocks_total - j0 < TPLC_EXISTS_BATCH ? kv->blocks_total - j0 : TPLC_EXISTS_BATCH;
        argv[0] = "EXISTS";
        lens[0] = 6;
        for (int b = 0; b < nb; b++) {
            h = pfx_next(h, ids + (size_t)(j0 + b) * bs, bs);
            char *k = keys + (size_t)b * kcap;
            int kl = coldkey_pfx(k, kcap, o->prefix, m->fingerprint, h);
            if (kl < 0) {
                cli_error(a, "cannot name block %d: %s", j0 + b, ck_strerror(kl));
                goto out;
            }
            lens[1 + b] = (size_t)kl;
            argv[1 + b] = k;
        }
        /* EXISTS counts each key given: the names of one chain differ. */
        redisReply *rep;
        long long got;
        if (cli_redis_cmd(rd, 1 + nb, argv, lens, &rep, err, sizeof err)) {
            cli_error(a, "%s", err);
            goto out;
        }
        rc = cli_redis_int(rep, &got);
        freeReplyObject(rep);
        if (rc || got < 0 || got > nb) {
            cli_error(a, "redis %s: EXISTS: unexpected reply", rd->where);
            goto out;
        }
        kv->blocks_cached += (int)got;
    }
    ex = 0;
out:
    free(keys);
    free(ids);
    model_free(m);
    return ex;
}

static int cmd_inspect(cli_args *a, const tplc_opts *o) {
    char err[512], key[TPLC_KEY_MAX];
    cli_redis rd;
    int ex = open_redis(a, o, &rd);
    if (ex) return ex;
    tplc_rec x;
    int64_t uses = 0;
    ex = 1;
    if (fetch_record(&rd, key, record_key(o, o->name, key), o->name, &x, err, sizeof err) ||
        fetch_uses(&rd, o, o->name, strlen(o->name), &uses, err, sizeof err)) {
        cli_error(a, "%s", err);
        goto out;
    }
    if (x.state == REC_MISSING) {
        cli_error(a, "no template '%s' at %s", o->name, rd.where);
        goto out;
    }
    if (x.state == REC_CORRUPT) {
        cli_error(a, "template '%s' is corrupt: its record %s (delete it, or create it again with --force)",
                  o->name, x.problem);
        goto out;
    }
    tplc_kv kv = {0};
    if (o->model_path && template_blocks(a, o, &rd, &x.r, &kv)) goto out;
    if (o->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "name");
        jw_str(&w, x.r.name);
        jw_key(&w, "created_ms");
        jw_int(&w, x.r.created_ms);
        jw_key(&w, "bytes");
        jw_int(&w, (int64_t)x.r.text_len);
        jw_key(&w, "uses");
        jw_int(&w, uses);
        jw_key(&w, "text");
        jw_strn(&w, x.r.text, x.r.text_len);
        if (o->model_path) {
            jw_key(&w, "fingerprint");
            jw_str(&w, kv.fingerprint);
            jw_key(&w, "tokens");
            jw_int(&w, kv.tokens);
            jw_key(&w, "block_size");
            jw_int(&w, kv.block_size);
            jw_key(&w, "blocks_total");
            jw_int(&w, kv.blocks_total);
            jw_key(&w, "blocks_cached");
            jw_int(&w, kv.blocks_cached);
        }
        jw_obj_end(&w);
        putchar('\n');
    } else {
        char t[32];
        iso_time(x.r.created_ms, t, sizeof t);
        printf("template '%s': %zu bytes, %lld uses, created %s", x.r.name, x.r.text_len, (long long)uses, t);
        if (o->model_path) {
            printf("; model %s: %d tokens, %d of %d blocks of %d in redis", kv.fingerprint, kv.tokens,
                   kv.blocks_cached, kv.blocks_total, kv.block_size);
            if (kv.tokens > kv.ctx) printf(" (longer than the model's context, %d: jobs will fail)", kv.ctx);
        }
        printf("\n");
        fwrite(x.r.text, 1, x.r.text_len, stdout);
        if (x.r.text_len && x.r.text[x.r.text_len - 1] != '\n') putchar('\n');
    }
    ex = 0;
out:
    rec_free(&x);
    cli_redis_close(&rd);
    return ex;
}

/* ----------------------------------------------------------------- delete */

static int cmd_delete(cli_args *a, const tplc_opts *o) {
    char err[512], key[TPLC_KEY_MAX], ikey[TPLC_KEY_MAX];
    cli_redis rd;
    int ex = open_redis(a, o, &rd);
    if (ex) return ex;
    ex = 1;
    const char *dargv[2] = {"DEL", key};
    size_t dlens[2] = {3, record_key(o, o->name, key)};
    const char *zargv[3] = {"ZREM", ikey, o->name};
    size_t zlens[3] = {4, uses_key(o, ikey), strlen(o->name)};
    redisReply *rep;
    long long deleted, unindexed;
    if (cli_redis_cmd(&rd, 2, dargv, dlens, &rep, err, sizeof err)) {
        cli_error(a, "%s", err);
        goto out;
    }
    int bad = cli_redis_int(rep, &deleted);
    freeReplyObject(rep);
    if (bad) {
        cli_error(a, "redis %s: DEL: unexpected reply", rd.where);
        goto out;
    }
    /* Even without a record: a count left behind (confkvd counted a use
     * after an earlier delete) goes too. */
    if (cli_redis_cmd(&rd, 3, zargv, zlens, &rep, err, sizeof err)) {
        cli_error(a, "%s", err);
        goto out;
    }
    bad = cli_redis_int(rep, &unindexed);
    freeReplyObject(rep);
    if (bad) {
        cli_error(a, "redis %s: ZREM: unexpected reply", rd.where);
        goto out;
    }
    if (o->json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "deleted");
        jw_bool(&w, deleted > 0);
        jw_key(&w, "name");
        jw_str(&w, o->name);
        jw_obj_end(&w);
        putchar('\n');
    }
    if (deleted <= 0) {
        cli_error(a, "no template '%s' at %s", o->name, rd.where);
        goto out;
    }
    if (!o->json) printf("deleted template '%s' at %s\n", o->name, rd.where);
    ex = 0;
out:
    cli_redis_close(&rd);
    return ex;
}

/* ---------------------------------------------------------------- prewarm */

static int cmd_prewarm(cli_args *a, const tplc_opts *o) {
    cJSON *body = cJSON_CreateObject(), *names = NULL;
    if (body && o->n_names) {
        names = cJSON_AddArrayToObject(body, "names");
        for (int i = 0; names && i < o->n_names; i++)
            if (!cJSON_AddItemToArray(names, cJSON_CreateString(o->names[i]))) names = NULL;
    }
    char *req = body && (names || !o->n_names) ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (!req) {
        cli_error(a, "out of memory");
        return 1;
    }
    char err[512], *reply = NULL;
    size_t reply_len;
    int status, ex = 1;
    int rc = cli_http_post(o->http, "/templates/prewarm", "application/json", req, strlen(req),
                           o->timeout_s * 1000, TPLC_PREWARM_REPLY_MAX, &status, &reply, &reply_len, err,
                           sizeof err);
    free(req);
    if (rc) {
        cli_error(a, "%s%s", err, rc == CK_EIO ? " (is confkvd running there, with --http-port?)" : "");
        return rc == CK_EINVAL ? 2 : 1;
    }
    cJSON *j = cJSON_ParseWithLength(reply, reply_len);
    if (status < 200 || status > 299) {
        cli_error(a, "confkvd at %s answered %d%s: %.*s", o->http, status,
                  status == 404 ? " (this confkvd has no /templates/prewarm)" : "",
                  (int)(reply_len < 300 ? reply_len : 300), reply);
    } else if (!cJSON_IsObject(j)) {
        cli_error(a, "confkvd at %s answered %d with something other than a JSON object", o->http, status);
    } else {
        /* Reprinted by cJSON: one line whatever confkvd's layout. */
        char *line = cJSON_PrintUnformatted(j);
        if (line) {
            if (!o->json) printf("prewarm at %s: ", o->http);
            puts(line);
            free(line);
            ex = 0;
        } else {
            cli_error(a, "out of memory");
        }
    }
    cJSON_Delete(j);
    free(reply);
    return ex;
}

/* ------------------------------------------------------------------- main */

int cli_templates(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        help_main(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static int (*const fns[])(cli_args *, const tplc_opts *) = {cmd_create, cmd_list, cmd_inspect, cmd_delete,
                                                                cmd_prewarm};
    for (size_t s = 0; s < sizeof subs / sizeof subs[0]; s++) {
        if (strcmp(argv[1], subs[s].name)) continue;
        char cmd[32];
        snprintf(cmd, sizeof cmd, "templates %s", subs[s].name);
        cli_args a = {argc - 1, argv + 1, 1, cmd, 0};
        tplc_opts o = {0};
        int ex = parse(&a, (int)s, &o);
        return ex >= 0 ? ex : fns[s](&a, &o);
    }
    fprintf(stderr, "confkv templates: unknown command '%s'\n\n", argv[1]);
    help_main(stderr);
    return 2;
}
