/* cli_submit.c - `confkv submit`: produce jobs (JSON lines) to confkvd's
 * jobs topic and, with --wait, print their results as JSON lines; with
 * --stream, the jobs' text as it is made (their records on the stream
 * topic), then the results. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "svc_client.h"

static void help(void) {
    printf("usage: confkv submit --brokers HOST:PORT [--topic T] [--file F|-] [--wait|--stream] [--timeout "
           "S]\n\n"
           "  --brokers B         Kafka bootstrap servers (confkvd's ready file has them)\n"
           "  --topic T           jobs topic (default confkv.jobs)\n"
           "  --results-topic T   results topic for --wait (default confkv.results)\n"
           "  --file F            JSON lines, one job each (default -: stdin); a job without\n"
           "                      \"id\" gets one (submit-<pid>-<line>)\n"
           "                      Kafka key: the job's session_id, else its id (one session, one partition)\n"
           "  --prompt TEXT       submit one job with this prompt instead of a file\n"
           "  --wait              print each job's result as a JSON line (in input order)\n"
           "  --stream            set \"stream\": true on every job and print its text as it\n"
           "                      arrives (several jobs: each partial record as a JSON line),\n"
           "                      then the results as with --wait\n"
           "  --stream-topic T    the stream topic (default confkv.stream)\n"
           "  --timeout S         seconds to wait for the results (default 120)\n"
           "Exit code: 0 all sent (and with --wait, all results received), 1 otherwise.\n");
}

typedef struct sub_state {
    char **results;    /* (n) raw result lines, in input order */
    int64_t *next_seq; /* (n) --stream: the seq each job's next record must have */
    int n, bad;        /* jobs; stream records out of order */
    const char *const *ids;
} sub_state;

/* A partial record (--stream): one job's text goes out as it is; several
 * jobs' records as JSON lines. Records must come in seq order. */
static void on_stream(void *ud, int i, const cJSON *r) {
    sub_state *s = ud;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(r, "seq");
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(r, "delta");
    if (!cJSON_IsNumber(seq) || !cJSON_IsString(delta) || seq->valuedouble != (double)s->next_seq[i]) {
        fprintf(stderr, "confkv submit: stream of %s: record %g where %lld was due\n", s->ids[i],
                cJSON_IsNumber(seq) ? seq->valuedouble : -1.0, (long long)s->next_seq[i]);
        s->bad++;
    }
    if (cJSON_IsNumber(seq)) s->next_seq[i] = (int64_t)seq->valuedouble + 1;
    if (s->n == 1) {
        if (cJSON_IsString(delta)) fputs(delta->valuestring, stdout);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "done"))) putchar('\n');
    } else {
        char *t = cJSON_PrintUnformatted(r);
        if (t) puts(t);
        free(t);
    }
    fflush(stdout);
}

static void on_result(void *ud, int i, const cJSON *r, const char *raw, size_t len) {
    sub_state *s = ud;
    char *t = cJSON_PrintUnformatted(r); /* JSON whatever the result's encoding */
    s->results[i] = t;
    (void)raw;
    (void)len;
}

int cli_submit(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "submit", 0};
    const char *brokers = NULL, *topic = "confkv.jobs", *rtopic = "confkv.results", *file = "-",
               *prompt = NULL, *stopic = "confkv.stream";
    int wait = 0, stream = 0, timeout = 120;
    sub_state st = {0};
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_str(&a, "--brokers", &brokers) || cli_str(&a, "--topic", &topic) ||
            cli_str(&a, "--results-topic", &rtopic) || cli_str(&a, "--file", &file) ||
            cli_str(&a, "--prompt", &prompt) || cli_str(&a, "--stream-topic", &stopic) ||
            cli_int(&a, "--timeout", 1, 86400, &timeout))
            continue;
        if (cli_flag(&a, "--wait"))
            wait = 1;
        else if (cli_flag(&a, "--stream"))
            stream = wait = 1;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (!brokers) {
        cli_error(&a, "--brokers is required");
        return 2;
    }
    /* Read every job first: ids must be known before results are awaited. */
    int n = 0, cap = 0, rc = 1;
    char **ids = NULL, **jobs = NULL, **keys = NULL; /* keys[i]: session id or NULL (the id) */
    if (prompt) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "prompt", prompt);
        if (stream) cJSON_AddTrueToObject(j, "stream");
        jobs = calloc(1, sizeof *jobs);
        ids = calloc(1, sizeof *ids);
        keys = calloc(1, sizeof *keys);
        char id[64];
        snprintf(id, sizeof id, "submit-%d-1", (int)getpid());
        cJSON_AddStringToObject(j, "id", id);
        if (jobs && ids && keys) {
            jobs[0] = cJSON_PrintUnformatted(j);
            ids[0] = strdup(id);
            n = 1;
        }
        cJSON_Delete(j);
        if (!n || !jobs[0] || !ids[0]) {
            cli_error(&a, "out of memory");
            goto out;
        }
    } else {
        FILE *f = strcmp(file, "-") ? fopen(file, "r") : stdin;
        if (!f) {
            cli_error(&a, "cannot open %s", file);
            return 1;
        }
        char *line = NULL;
        size_t lcap = 0;
        ssize_t len;
        int lineno = 0;
        while ((len = getline(&line, &lcap, f)) > 0) {
            lineno++;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if (len == 0) continue;
            cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
            if (!cJSON_IsObject(j)) {
                cli_error(&a, "%s:%d: not a JSON object", file, lineno);
                cJSON_Delete(j);
                free(line);
                if (f != stdin) fclose(f);
                goto out;
            }
            if (stream) {
                cJSON_DeleteItemFromObjectCaseSensitive(j, "stream");
                cJSON_AddTrueToObject(j, "stream");
            }
            cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
            char buf[300];
            if (cJSON_IsString(id) && *id->valuestring && strlen(id->valuestring) < 257)
                snprintf(buf, sizeof buf, "%s", id->valuestring);
            else {
                snprintf(buf, sizeof buf, "submit-%d-%d", (int)getpid(), lineno);
                cJSON_DeleteItemFromObjectCaseSensitive(j, "id");
                cJSON_AddStringToObject(j, "id", buf);
            }
            /* the three arrays grow one at a time; each keeps its old block
             * (still freed at out) when realloc fails */
            if (n == cap) {
                int nc = cap ? (cap < INT_MAX / 2 ? 2 * cap : 0) : 64;
                char **nj = NULL, **ni = NULL, **nk = NULL;
                if (nc > 0 && (nj = realloc(jobs, (size_t)nc * sizeof *jobs))) jobs = nj;
                if (nj && (ni = realloc(ids, (size_t)nc * sizeof *ids))) ids = ni;
                if (ni && (nk = realloc(keys, (size_t)nc * sizeof *keys))) keys = nk;
                if (!nk) {
                    cli_error(&a, "%s:%d: out of memory", file, lineno);
                    cJSON_Delete(j);
                    free(line);
                    if (f != stdin) fclose(f);
                    goto out;
                }
                cap = nc;
            }
            jobs[n] = cJSON_PrintUnformatted(j);
            ids[n] = strdup(buf);
            cJSON *sid = cJSON_GetObjectItemCaseSensitive(j, "session_id");
            int want_key = cJSON_IsString(sid) && *sid->valuestring;
            keys[n] = want_key ? strdup(sid->valuestring) : NULL;
            n++;
            cJSON_Delete(j);
            if (!jobs[n - 1] || !ids[n - 1] || (want_key && !keys[n - 1])) {
                cli_error(&a, "%s:%d: out of memory", file, lineno);
                free(line);
                if (f != stdin) fclose(f);
                goto out;
            }
        }
        free(line);
        if (f != stdin) fclose(f);
    }
    char err[512];
    svc_client *c = NULL;
    st.n = n;
    st.ids = (const char *const *)ids;
    if (svc_client_new(brokers, topic, wait ? rtopic : NULL, &c, err, sizeof err)) {
        cli_error(&a, "%s", err);
        goto out;
    }
    if (stream && (!(st.next_seq = calloc((size_t)n + 1, sizeof *st.next_seq)) ||
                   svc_client_stream(c, stopic, on_stream, &st, err, sizeof err))) {
        cli_error(&a, "%s", st.next_seq ? err : "out of memory");
        svc_client_free(c);
        goto out;
    }
    for (int i = 0; i < n; i++)
        if (svc_client_send(c, ids[i], keys[i], jobs[i], strlen(jobs[i]), err, sizeof err)) {
            cli_error(&a, "%s", err);
            svc_client_free(c);
            goto out;
        }
    int failed = svc_client_flush(c, 30);
    if (failed) {
        cli_error(&a, failed < 0 ? "timed out sending the jobs" : "%d jobs were not delivered", failed);
        svc_client_free(c);
        goto out;
    }
    fprintf(stderr, "confkv submit: %d jobs sent to %s\n", n, topic);
    if (wait) {
        st.results = calloc((size_t)n + 1, sizeof(char *));
        int missing =
            st.results ? svc_client_wait(c, (const char *const *)ids, n, timeout, on_result, &st) : n;
        for (int i = 0; st.results && i < n; i++)
            if (st.results[i]) {
                puts(st.results[i]);
                free(st.results[i]);
            }
        free(st.results);
        if (missing)
            cli_error(&a, "%d of %d %s did not arrive within %d s", missing, n,
                      stream ? "results or stream ends" : "results", timeout);
        if (st.bad) cli_error(&a, "%d stream records out of order", st.bad);
        rc = missing || st.bad ? 1 : 0;
    } else {
        rc = 0;
    }
    svc_client_free(c);
out:
    free(st.next_seq);
    for (int i = 0; i < n; i++) {
        free(ids[i]);
        free(jobs[i]);
        free(keys[i]);
    }
    free(ids);
    free(jobs);
    free(keys);
    return rc;
}
