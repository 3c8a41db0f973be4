/* cli_chat.c - `confkv generate --messages` (cli_chat.h). */
#include "cli_chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "gguf.h"
#include "model.h"
#include "svc_job.h" /* svc_job_tools: a job's rules for tools */
#include "tokenizer.h"

/* The whole file, NUL-terminated, at most `max` bytes; NULL on failure. */
static char *slurp(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *p = malloc(cap + 1);
    while (p) {
        size_t k = fread(p + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        if (cap >= max) {
            free(p);
            p = NULL;
            break;
        }
        char *q = realloc(p, cap * 2 + 1);
        if (!q) {
            free(p);
            p = NULL;
            break;
        }
        p = q;
        cap *= 2;
    }
    if (p && (ferror(f) || n > max)) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = 0;
        *len = n;
    }
    return p;
}

/* Text of a content: a string, or [{"type": "text", "text": ...}] joined. */
static char *content_of(const cJSON *c) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) return NULL;
    size_t n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(t)) return NULL;
        n += strlen(t->valuestring);
    }
    char *s = malloc(n + 1), *o = s;
    if (!s) return NULL;
    cJSON_ArrayForEach(p, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t k = strlen(t);
        memcpy(o, t, k);
        o += k;
    }
    *o = 0;
    return s;
}

int cli_chat_load(const cli_args *a, const char *messages_path, const char *template_path, const char *date,
                  cli_chat *c) {
    memset(c, 0, sizeof *c);
    c->add_generation_prompt = 1;
    if (date) {
        int y, mo, d;
        char tail;
        if (sscanf(date, "%d-%d-%d%c", &y, &mo, &d, &tail) != 3 || y < 1900 || y > 9999 || mo < 1 ||
            mo > 12 || d < 1 || d > 31) {
            cli_error(a, "--date takes YYYY-MM-DD, not '%s'", date);
            return 1;
        }
        c->now.tm_year = y - 1900;
        c->now.tm_mon = mo - 1;
        c->now.tm_mday = d;
        c->now.tm_hour = 12;
        time_t t = timegm(&c->now); /* normalise: weekday, day of the year */
        gmtime_r(&t, &c->now);
    } else {
        time_t t = time(NULL);
        localtime_r(&t, &c->now);
    }
    size_t len;
    char *src = slurp(messages_path, 64u << 20, &len);
    if (!src) {
        cli_error(a, "cannot read %s (at most 64 MiB)", messages_path);
        return 1;
    }
    cJSON *root = cJSON_ParseWithLength(src, len);
    free(src);
    const cJSON *list = root;
    if (cJSON_IsObject(root)) {
        list = cJSON_GetObjectItemCaseSensitive(root, "messages");
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt");
        if (g && !cJSON_IsBool(g)) {
            cli_error(a, "%s: add_generation_prompt must be true or false", messages_path);
            goto fail;
        }
        if (g) c->add_generation_prompt = cJSON_IsTrue(g);
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
        svc_job_error je;
        if (tools && !cJSON_IsNull(tools) && svc_job_tools(tools, len, &c->tools, &je)) { /* a job's rules */
            cli_error(a, "%s: %s", messages_path, je.message);
            goto fail;
        }
    }
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    if (n <= 0) {
        cli_error(a, "%s: want a non-empty JSON array of {\"role\", \"content\"} (or {\"messages\": [...]})",
                  messages_path);
        goto fail;
    }
    if (!(c->msgs = calloc((size_t)n, sizeof *c->msgs))) goto nomem;
    const cJSON *m;
    cJSON_ArrayForEach(m, list) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role) || !content) {
            cli_error(a, "%s: messages[%d] needs a string role and a content", messages_path, c->n);
            goto fail;
        }
        char *r = strdup(role->valuestring), *t = content_of(content);
        c->msgs[c->n].role = r;
        c->msgs[c->n].content = t;
        c->n++;
        if (!r || !t) {
            cli_error(a, "%s: messages[%d].content must be a string or text parts", messages_path, c->n - 1);
            goto fail;
        }
    }
    cJSON_Delete(root);
    root = NULL;
    if (template_path && !(c->tmpl = slurp(template_path, 1u << 20, &c->tmpl_len))) {
        cli_error(a, "cannot read the chat template %s (at most 1 MiB)", template_path);
        goto fail;
    }
    return 0;
nomem:
    cli_error(a, "out of memory");
fail:
    cJSON_Delete(root);
    cli_chat_free(c);
    return 1;
}

void cli_chat_free(cli_chat *c) {
    for (int i = 0; c->msgs && i < c->n; i++) {
        free((char *)c->msgs[i].role);
        free((char *)c->msgs[i].content);
    }
    free(c->msgs);
    jinja_release(c->tools);
    free(c->tmpl);
    memset(c, 0, sizeof *c);
}

/* The template for tok: the override, else the file's (f, or model m's). */
static int open_template(const cli_args *a, const tokenizer *tok, const gguf_file *f, const model *m,
                         const cli_chat *c, chat_template **out) {
    const char *src = c->tmpl;
    size_t len = c->tmpl_len;
    int source = CHAT_SRC_OVERRIDE;
    if (!src) {
        source = CHAT_SRC_MODEL;
        if (f ? chat_template_in_gguf(f, &src, &len) : chat_template_in_model(m, &src, &len)) {
            src = NULL;
            len = 0;
        }
    }
    jinja_error err;
    int rc = chat_new(tok, src, len, source, out, &err);
    if (rc) {
        cli_error(a, "chat template: %s: %s", err.kind, err.msg);
        return 1;
    }
    return 0;
}

static int render_err(const cli_args *a, const jinja_error *err) {
    cli_error(a, "cannot render the chat: %s: %s", err->kind, err->msg);
    return 1;
}

static int render(const chat_template *ct, const cli_chat *c, char **text, size_t *len, jinja_span **sp,
                  size_t *ns, int *warnings, jinja_error *je) {
    chat_input in = {c->msgs, (size_t)c->n, c->tools, c->add_generation_prompt, &c->now};
    return chat_render(ct, &in, text, len, sp, ns, warnings, je);
}

int cli_chat_render_only(const cli_args *a, const char *model_path, const char *tok_path, const cli_chat *c) {
    cli_vocab v;
    chat_template *ct = NULL;
    char *text = NULL;
    size_t len = 0;
    int exit_code = cli_vocab_open(a, model_path, tok_path, &v);
    if (exit_code) return exit_code;
    exit_code = 1;
    if (open_template(a, v.tok, v.gf, v.m, c, &ct)) goto out;
    jinja_error je;
    int warnings = 0;
    if (render(ct, c, &text, &len, NULL, NULL, &warnings, &je)) {
        render_err(a, &je);
        goto out;
    }
    for (int bit = 1; bit > 0 && bit <= warnings; bit <<= 1)
        if (warnings & bit) fprintf(stderr, "confkv %s: warning: %s\n", a->cmd, chat_warning_text(bit));
    exit_code = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 1;
out:
    free(text);
    chat_free(ct);
    cli_vocab_close(&v);
    return exit_code;
}

int cli_chat_ids(const cli_args *a, const model *m, const cli_chat *c, int32_t *ids, int max, int *n,
                 int *warnings) {
    chat_template *ct = NULL;
    char *text = NULL;
    size_t len = 0, ns = 0;
    jinja_span *sp = NULL;
    int bad = 1;
    if (open_template(a, m->tok, NULL, m, c, &ct)) return 1;
    jinja_error je;
    if (render(ct, c, &text, &len, &sp, &ns, warnings, &je)) {
        render_err(a, &je);
        goto out;
    }
    int rc = chat_tokenize(ct, text, len, sp, ns, ids, max, n);
    if (rc == CK_ETOOLONG)
        cli_error(a, "the chat is %d tokens or more; the context holds %d", *n, max);
    else if (rc)
        cli_error(a, "cannot tokenize the chat: %s", ck_strerror(rc));
    else
        bad = 0;
out:
    free(text);
    free(sp);
    chat_free(ct);
    return bad;
}

int cli_chat_describe(const char *model_path, const char *template_path, chat_model_info *info, char *err,
                      size_t errlen) {
    gguf_file *gf = NULL;
    tokenizer *tok = NULL;
    chat_template *ct = NULL;
    char *tmpl = NULL;
    size_t tlen = 0;
    const char *src = NULL;
    int rc = gguf_open(model_path, &gf, err, errlen);
    if (!rc) rc = tok_from_gguf(gf, &tok, err, errlen);
    if (!rc && template_path && !(tmpl = slurp(template_path, 1u << 20, &tlen))) {
        snprintf(err, errlen, "cannot read the chat template %s", template_path);
        rc = CK_EIO;
    }
    if (!rc) {
        if (tmpl)
            src = tmpl;
        else if (chat_template_in_gguf(gf, &src, &tlen)) {
            src = NULL;
            tlen = 0;
        }
        jinja_error je;
        rc = chat_new(tok, src, tlen, tmpl ? CHAT_SRC_OVERRIDE : CHAT_SRC_MODEL, &ct, &je);
        if (rc) snprintf(err, errlen, "chat template: %s: %.400s", je.kind, je.msg);
    }
    if (!rc) chat_model_describe(NULL, gf, ct, info);
    free(tmpl);
    chat_free(ct);
    tok_free(tok);
    gguf_close(gf);
    return rc;
}
