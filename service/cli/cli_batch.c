/* cli_batch.c - `confkv batch`: OpenAI Batch API files in and out, through
 * confkvd over Kafka (--brokers) or in-process on the engine (--local).
 *
 * Input, one request a line:
 *   {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
 *    "body": {"model": ..., "messages": [...], "max_tokens": ...}}
 * (or url /v1/completions with body.prompt). Output, one line per request,
 * in input order:
 *   {"id": "batch_req_1", "custom_id": "r1", "response": {"status_code": 200,
 *    "request_id": "r1", "body": {... "choices": [...], "usage": {...}}},
 *    "error": null}
 * A request confkv refuses gets status_code 400 and body {"error": {...}}.
 *
 * --local runs the models as confkvd does (svc_models: each on an engine
 * thread, one memory plan, the cascade), configured by confkvd's own keys
 * (svc_config_load over the flags --local uses, then the CONFKV_*
 * environment and --config), so a file's results equal the service's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "ck_err.h"
#include "cli.h"
#include "svc_client.h"
#include "svc_config.h"
#include "svc_et.h"
#include "svc_job.h"
#include "svc_models.h"
#include "svc_result.h"

static void help(void) {
    printf("usage: confkv batch --input in.jsonl --output out.jsonl (--brokers B | --local --model M ...)\n\n"
           "  --brokers B        send the requests to confkvd through Kafka\n"
           "  --topic T          jobs topic (default confkv.jobs); --results-topic T (confkv.results)\n"
           "  --timeout S        seconds to wait for all results (default 600)\n"
           "  --local            run them in this process, on confkvd's engine and with its options:\n"
           "    --model PATH | NAME=PATH[,tokenizer=T][,chat_template=J][,kv_budget_mb=N]  (repeatable)\n"
           "    --default-model NAME|auto, --route cascade --route-models SMALL,LARGE --route-rule R\n"
           "    --tokenizer, --model-name, --backend, --threads, --policy, --tuning, --chat-template,\n"
           "    --max-running, --max-queue, --kv-budget-mb, --max-context, --max-memory-mb,\n"
           "    --max-prompt-tokens, --default-max-tokens, --prefix-cache[-mb], --max-sessions,\n"
           "    --warm-budget-kb, --config FILE   (as confkvd reads them, CONFKV_* environment\n"
           "    included; docs/SERVICE.md). A request's body.model picks a model as a job's does.\n");
}

typedef struct breq {
    char *custom_id;
    char *job_json; /* the job: body + id */
    int chat;       /* /v1/chat/completions */
    char *bad;      /* a line that is not a valid request: the error */
    cJSON *result;  /* confkv result tree */
} breq;

typedef struct batch {
    breq *r;
    int n;
    const char *model;
} batch;

/* One Batch API line to a confkv job. */
static void parse_line(breq *q, const char *line, size_t len, int lineno) {
    char msg[256];
    cJSON *j = cJSON_ParseWithLength(line, len);
    cJSON *cid = cJSON_GetObjectItemCaseSensitive(j, "custom_id");
    cJSON *url = cJSON_GetObjectItemCaseSensitive(j, "url");
    cJSON *body = cJSON_GetObjectItemCaseSensitive(j, "body");
    char gen[32];
    snprintf(gen, sizeof gen, "line-%d", lineno);
    q->custom_id = strdup(cJSON_IsString(cid) ? cid->valuestring : gen);
    if (!cJSON_IsObject(j) || !cJSON_IsObject(body)) {
        snprintf(msg, sizeof msg, "line %d: not a Batch API request object with a \"body\"", lineno);
        q->bad = strdup(msg);
    } else if (svc_json_has_nonfinite(body)) {
        /* Re-printed, an infinity would become null and the field vanish. */
        snprintf(msg, sizeof msg, "line %d: invalid_field: a number in the body is not finite", lineno);
        q->bad = strdup(msg);
    } else if (cJSON_IsString(url) && strcmp(url->valuestring, "/v1/chat/completions") &&
               strcmp(url->valuestring, "/v1/completions")) {
        snprintf(msg, sizeof msg, "url %.100s is not supported (use /v1/chat/completions or /v1/completions)",
                 url->valuestring);
        q->bad = strdup(msg);
    } else {
        q->chat = !cJSON_IsString(url) || !strcmp(url->valuestring, "/v1/chat/completions");
        cJSON *job = cJSON_Duplicate(body, 1);
        /* Every "id" goes (JSON allows a key twice, and the job decoder
         * reads the first): the job's id is the custom_id, or its result
         * would come back under another id and never be matched. */
        while (cJSON_GetObjectItemCaseSensitive(job, "id"))
            cJSON_DeleteItemFromObjectCaseSensitive(job, "id");
        cJSON_AddStringToObject(job, "id", q->custom_id);
        q->job_json = cJSON_PrintUnformatted(job);
        cJSON_Delete(job);
    }
    cJSON_Delete(j);
}

/* Read a Batch API file: one request a line (a trailing \r is dropped,
 * empty lines are skipped), each parsed by parse_line into b->r, in order.
 * Returns 0, or CK_ENOMEM (b then holds the lines read so far; free it
 * with batch_clear). tests/fuzz/fuzz_batch.c calls this on any bytes. */
static int batch_read(FILE *f, batch *b) {
    int cap = 0, lineno = 0, rc = CK_OK;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (b->n == cap) {
            cap = cap ? 2 * cap : 64;
            breq *r = realloc(b->r, (size_t)cap * sizeof *r);
            if (!r) {
                rc = CK_ENOMEM;
                break;
            }
            b->r = r;
        }
        memset(&b->r[b->n], 0, sizeof b->r[b->n]);
        parse_line(&b->r[b->n++], line, (size_t)len, lineno);
    }
    free(line);
    return rc;
}

static void batch_clear(batch *b) {
    for (int i = 0; i < b->n; i++) {
        free(b->r[i].custom_id);
        free(b->r[i].job_json);
        free(b->r[i].bad);
        cJSON_Delete(b->r[i].result);
    }
    free(b->r);
    b->r = NULL;
    b->n = 0;
}

static void write_line(FILE *out, const breq *q, int idx, const char *model) {
    cJSON *o = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "batch_req_%d", idx + 1);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "custom_id", q->custom_id);
    cJSON *resp = cJSON_AddObjectToObject(o, "response");
    const cJSON *r = q->result;
    cJSON *status = cJSON_GetObjectItemCaseSensitive(r, "status");
    int ok = cJSON_IsString(status) && !strcmp(status->valuestring, "ok");
    cJSON_AddNumberToObject(resp, "status_code", q->bad ? 400 : !r ? 504 : ok ? 200 : 400);
    cJSON_AddStringToObject(resp, "request_id", q->custom_id);
    cJSON *body = cJSON_AddObjectToObject(resp, "body");
    if (ok) {
        cJSON_AddStringToObject(body, "id", q->custom_id);
        cJSON_AddStringToObject(body, "object", q->chat ? "chat.completion" : "text_completion");
        cJSON_AddNumberToObject(body, "created", (double)time(NULL));
        cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "model");
        cJSON_AddStringToObject(body, "model", cJSON_IsString(m) ? m->valuestring : model ? model : "");
        cJSON *choices = cJSON_AddArrayToObject(body, "choices");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        cJSON *text = cJSON_GetObjectItemCaseSensitive(r, "text");
        const char *t = cJSON_IsString(text) ? text->valuestring : "";
        if (q->chat) {
            cJSON *msg = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", t);
        } else {
            cJSON_AddStringToObject(c, "text", t);
        }
        cJSON *fr = cJSON_GetObjectItemCaseSensitive(r, "finish_reason");
        cJSON_AddStringToObject(c, "finish_reason", cJSON_IsString(fr) ? fr->valuestring : "stop");
        cJSON_AddItemToArray(choices, c);
        cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usage");
        cJSON *uu = cJSON_AddObjectToObject(body, "usage");
        static const char *keys[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
        for (int i = 0; i < 3; i++) {
            cJSON *v = cJSON_GetObjectItemCaseSensitive(u, keys[i]);
            cJSON_AddNumberToObject(uu, keys[i], cJSON_IsNumber(v) ? v->valuedouble : 0);
        }
    } else {
        cJSON *e = cJSON_AddObjectToObject(body, "error");
        cJSON *re = cJSON_GetObjectItemCaseSensitive(r, "error");
        cJSON *code = cJSON_GetObjectItemCaseSensitive(re, "code");
        cJSON *msg = cJSON_GetObjectItemCaseSensitive(re, "message");
        cJSON_AddStringToObject(e, "message",
                                q->bad                ? q->bad
                                : !r                  ? "no result within the timeout"
                                : cJSON_IsString(msg) ? msg->valuestring
                                                      : "failed");
        cJSON_AddStringToObject(e, "type", "invalid_request_error");
        cJSON_AddStringToObject(e, "code",
                                q->bad                 ? "invalid_request"
                                : !r                   ? "timeout"
                                : cJSON_IsString(code) ? code->valuestring
                                                       : "error");
    }
    cJSON_AddNullToObject(o, "error");
    char *s = cJSON_PrintUnformatted(o);
    if (s) fprintf(out, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

static void kafka_result(void *ud, int i, const cJSON *r, const char *raw, size_t len) {
    batch *b = ud;
    b->r[i].result = cJSON_Duplicate(r, 1);
}

/* ------------------------------------------------------------------------ */
/* --local: confkvd's models (svc_models: an engine thread each, the
 * cascade), on a loop of our own */

typedef struct lwork {
    svc_work w; /* first */
    svc_job job;
    int idx;
} lwork;

typedef struct local {
    batch *b;
    svc_models *ms;
    uv_idle_t stopper; /* stops the models after the last result, outside their callbacks */
    lwork *works;
    int pending, failed;
    svc_job_limits lim;
    char first[64]; /* the first model's name: results that reached no model */
    char err[512];
} local;

static void local_stop_cb(uv_idle_t *h) {
    local *l = h->data;
    uv_idle_stop(h);
    uv_close((uv_handle_t *)h, NULL);
    svc_models_stop(l->ms);
    l->ms = NULL;
}

static void local_finish(local *l) {
    l->stopper.data = l;
    uv_idle_start(&l->stopper, local_stop_cb);
}

static void local_done(void *ud, svc_work *w) {
    local *l = ud;
    lwork *x = (lwork *)w;
    cJSON *r = svc_result_build(&x->job, w, 0, NULL, NULL, l->first, "local");
    l->b->r[x->idx].result = r;
    if (--l->pending == 0) local_finish(l);
}

static void local_loaded(void *ud, int ok, const char *msg) {
    local *l = ud;
    if (!ok) {
        snprintf(l->err, sizeof l->err, "%s", msg);
        l->failed = 1;
        local_finish(l);
        return;
    }
    snprintf(l->first, sizeof l->first, "%s", svc_models_info(l->ms, 0)->name);
    l->lim.vocab_size = svc_et_vocab(svc_models_et(l->ms, 0));
    const char *const *names = svc_models_names(l->ms);
    for (int i = 0; i < SVC_JOB_MAX_NAMES - 1 && names[i]; i++) l->lim.model_names[i] = names[i];
    for (int i = 0; i < l->b->n; i++) {
        breq *q = &l->b->r[i];
        lwork *x = &l->works[i];
        x->idx = i;
        if (q->bad) continue;
        svc_job_error e;
        int rc = svc_job_decode(q->job_json, strlen(q->job_json), "application/json", q->custom_id, &l->lim,
                                &x->job, &e);
        char msg[200];
        if (rc) {
            q->result = svc_result_build(&x->job, NULL, e.code ? e.code : SVC_JERR_INVALID_FIELD, e.message,
                                         NULL, l->first, "local");
            continue;
        }
        x->w.job = &x->job;
        x->w.t_enqueue_ms = eng_now_ms();
        if ((rc = svc_models_submit(l->ms, &x->w, msg, sizeof msg))) { /* as confkvd answers */
            q->result = svc_result_build(
                &x->job, NULL, rc == CK_ENOTFOUND ? SVC_JERR_UNKNOWN_MODEL : SVC_JERR_INVALID_FIELD,
                rc == CK_ENOTFOUND ? "this service does not serve that model" : msg, NULL, l->first, "local");
            continue;
        }
        l->pending++;
    }
    if (l->pending == 0) local_finish(l);
}

static int run_local(batch *b, int argc, char **argv, cli_args *a) {
    svc_config cfg;
    char err[512];
    int rc = svc_config_load(&cfg, argc, argv, err, sizeof err);
    if (rc) {
        if (rc != 1) cli_error(a, "%s", err);
        svc_config_free(&cfg);
        return rc == 1 ? 0 : 2;
    }
    svc_et_opts eo;
    if (svc_models_opts(&cfg, &eo, err, sizeof err)) {
        cli_error(a, "%s", err);
        svc_config_free(&cfg);
        return 2;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    local l;
    memset(&l, 0, sizeof l);
    l.b = b;
    l.works = calloc((size_t)b->n + 1, sizeof *l.works);
    /* a file's requests are not a network's messages: no size limit in
     * front of the renderer (confkvd's max_message_bytes), a generous cap */
    l.lim.max_message_bytes = (size_t)1 << 30;
    l.lim.max_tokens_cap = 1 << 20;
    l.lim.max_prompt_tokens = cfg.max_prompt_tokens;
    uv_idle_init(&loop, &l.stopper);
    int out = 0;
    if (!l.works ||
        svc_models_start(&loop, &cfg, &eo, local_done, local_loaded, &l, &l.ms, err, sizeof err)) {
        cli_error(a, "%s", l.works ? err : "out of memory");
        uv_close((uv_handle_t *)&l.stopper, NULL);
        out = 1;
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    for (int i = 0; i < b->n && l.works; i++) {
        svc_work_clear(&l.works[i].w);
        svc_job_free(&l.works[i].job);
    }
    free(l.works);
    svc_config_free(&cfg);
    if (l.failed) {
        cli_error(a, "%s", l.err);
        return 1;
    }
    return out;
}

int cli_batch(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "batch", 0};
    const char *in = NULL, *outp = NULL, *brokers = NULL, *topic = "confkv.jobs", *rtopic = "confkv.results";
    const char *model = NULL; /* the name written for a request without one */
    int local_mode = 0, timeout = 600;
    /* confkvd's own flags, for --local: svc_config_load reads them */
    char **pass = calloc((size_t)argc + 1, sizeof *pass);
    int np = 0, rc = 2;
    char prog[] = "confkv batch";
    if (!pass) return 1;
    pass[np++] = prog;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            free(pass);
            return 0;
        }
        if (cli_str(&a, "--input", &in) || cli_str(&a, "--output", &outp) ||
            cli_str(&a, "--brokers", &brokers) || cli_str(&a, "--topic", &topic) ||
            cli_str(&a, "--results-topic", &rtopic) || cli_int(&a, "--timeout", 1, 864000, &timeout))
            continue;
        if (cli_flag(&a, "--local")) {
            local_mode = 1;
            continue;
        }
        const char *t = a.argv[a.i];
        if (strncmp(t, "--", 2)) {
            free(pass);
            return cli_unknown(&a);
        }
        if (!svc_config_engine_flag(t)) {
            cli_error(&a,
                      "unknown argument '%s' (besides its own, confkv batch takes confkvd's engine options, "
                      "for --local; try --help)",
                      t);
            free(pass);
            return 2;
        }
        pass[np++] = a.argv[a.i++];
        if (!strncmp(t, "--model=", 8) && !model) model = t + 8;
        if (!strchr(t, '=') && a.i < a.argc && strncmp(a.argv[a.i], "--", 2)) {
            if (!strcmp(t, "--model") && !model) model = a.argv[a.i];
            pass[np++] = a.argv[a.i++];
        }
    }
    if (a.bad) goto done;
    if (!in || !outp || (!brokers == !local_mode)) {
        cli_error(&a, "give --input, --output and one of --brokers or --local");
        goto done;
    }
    if (local_mode && !model) {
        cli_error(&a, "--local needs --model PATH (or NAME=PATH, one a model)");
        goto done;
    }
    for (int i = 1; i < np && !local_mode; i++)
        if (!strncmp(pass[i], "--", 2) && strcmp(pass[i], "--model") && strncmp(pass[i], "--model=", 8)) {
            cli_error(&a, "%s is an option of the engine in this process: it needs --local", pass[i]);
            goto done;
        }
    FILE *f = strcmp(in, "-") ? fopen(in, "r") : stdin;
    if (!f) {
        cli_error(&a, "cannot open %s", in);
        rc = 1;
        goto done;
    }
    batch b = {0};
    rc = 1;
    int rd = batch_read(f, &b);
    if (f != stdin) fclose(f);
    if (rd) {
        cli_error(&a, "%s: out of memory reading the requests", in);
        goto out;
    }
    if (local_mode) {
        if (run_local(&b, np, pass, &a)) goto out;
    } else {
        char err[512];
        svc_client *c = NULL;
        if (svc_client_new(brokers, topic, rtopic, &c, err, sizeof err)) {
            cli_error(&a, "%s", err);
            goto out;
        }
        const char **ids = calloc((size_t)b.n + 1, sizeof *ids);
        int *map = calloc((size_t)b.n + 1, sizeof *map);
        int n = 0;
        for (int i = 0; i < b.n; i++) {
            if (b.r[i].bad) continue;
            if (svc_client_send(c, b.r[i].custom_id, NULL, b.r[i].job_json, strlen(b.r[i].job_json), err,
                                sizeof err)) {
                cli_error(&a, "%s", err);
                break;
            }
            ids[n] = b.r[i].custom_id;
            map[n++] = i;
        }
        svc_client_flush(c, 30);
        /* results arrive by id; gather them into a compact batch, then spread */
        batch sub = {calloc((size_t)n + 1, sizeof(breq)), n, NULL};
        int missing = svc_client_wait(c, ids, n, timeout, kafka_result, &sub);
        for (int i = 0; i < n; i++) b.r[map[i]].result = sub.r[i].result;
        free(sub.r);
        free(ids);
        free(map);
        svc_client_free(c);
        if (missing) cli_error(&a, "%d results did not arrive within %d s", missing, timeout);
    }
    FILE *out = strcmp(outp, "-") ? fopen(outp, "w") : stdout;
    if (!out) {
        cli_error(&a, "cannot write %s", outp);
        goto out;
    }
    int done = 0;
    for (int i = 0; i < b.n; i++) {
        write_line(out, &b.r[i], i, model);
        done += b.r[i].result != NULL;
    }
    if (out != stdout && fclose(out)) {
        cli_error(&a, "cannot write %s", outp);
        goto out;
    }
    fprintf(stderr, "confkv batch: %d requests, %d answered\n", b.n, done);
    rc = 0;
out:
    batch_clear(&b);
done:
    free(pass);
    return rc;
}
