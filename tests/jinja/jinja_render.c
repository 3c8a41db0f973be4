/* jinja_render - render a chat template (engine/jinja/jinja.c) with the variables
 * of a JSON object, for the oracle test (oracle.sh compares it with
 * oracle.py, which renders the same with Python's jinja2 as Hugging Face
 * does).
 *
 *   jinja_render TEMPLATE VARS.json [YYYY-MM-DD]
 *
 * VARS.json: an object whose members become the template's variables
 * (messages, add_generation_prompt, bos_token, ...); tools and documents
 * stay undefined when it has none, as jinja_chat_vars leaves them. The date (default
 * 2024-07-26) is what strftime_now() formats.
 *
 * Prints the rendering on stdout and exits 0. When the template calls
 * raise_exception it prints "ERROR chat_template_exception: <message>" and
 * exits 0 (the oracle prints the same), so a refusal is compared too. Any
 * other failure: a message on stderr, exit 1.
 *
 * JSON becomes jinja values as the service turns a job's tools into them
 * (service/svc_jv.h): an integral number is an int (Python's json gives a
 * float for "5.0"; the cases avoid such numbers). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "jinja.h"
#include "svc_jv.h" /* the service's JSON to jinja values: one conversion for both */

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while (buf && (k = fread(buf + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[len] = 0;
    *n = len;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TEMPLATE VARS.json [YYYY-MM-DD]\n", argv[0]);
        return 2;
    }
    size_t tn, vn;
    char *tsrc = slurp(argv[1], &tn), *vsrc = slurp(argv[2], &vn);
    if (!tsrc || !vsrc) {
        fprintf(stderr, "jinja_render: cannot read %s\n", !tsrc ? argv[1] : argv[2]);
        return 1;
    }
    cJSON *j = cJSON_ParseWithLength(vsrc, vn);
    if (!cJSON_IsObject(j)) {
        fprintf(stderr, "jinja_render: %s is not a JSON object\n", argv[2]);
        return 1;
    }
    jinja_value *vars = NULL;
    char jerr[200];
    if (svc_jv_from_json(j, 1000, &vars, jerr, sizeof jerr)) {
        fprintf(stderr, "jinja_render: %s: %s\n", argv[2], *jerr ? jerr : "out of memory");
        return 1;
    }
    cJSON_Delete(j);

    struct tm now = {0};
    int y = 2024, mo = 7, d = 26;
    if (argc > 3 && sscanf(argv[3], "%d-%d-%d", &y, &mo, &d) != 3) {
        fprintf(stderr, "jinja_render: bad date\n");
        return 2;
    }
    now.tm_year = y - 1900;
    now.tm_mon = mo - 1;
    now.tm_mday = d;
    now.tm_hour = 12;
    now.tm_isdst = -1;
    time_t tt = timegm(&now);
    gmtime_r(&tt, &now); /* fills tm_wday and tm_yday */

    jinja_template *t;
    jinja_error err;
    int rc = jinja_parse(tsrc, tn, NULL, &t, &err);
    if (rc) {
        fprintf(stderr, "jinja_render: %s (%s): %s\n", err.kind, ck_errname(rc), err.msg);
        jinja_release(vars);
        free(tsrc);
        free(vsrc);
        return 1;
    }
    char *out;
    size_t on;
    rc = jinja_render(t, vars, &now, &out, &on, &err);
    if (rc == 0) {
        fwrite(out, 1, on, stdout);
        free(out);
    } else if (rc == CK_EINVAL && strcmp(err.kind, "chat_template_exception") == 0) {
        printf("ERROR chat_template_exception: %s", err.msg);
        rc = 0;
    } else {
        fprintf(stderr, "jinja_render: %s (%s): %s\n", err.kind, ck_errname(rc), err.msg);
    }
    jinja_template_free(t);
    jinja_release(vars);
    free(tsrc);
    free(vsrc);
    return rc ? 1 : 0;
}
