/* jinja_bench - the renderer's speed: every template given, parsed once and
 * rendered REPS times in this process with a six-message chat, as a model's
 * template renders each job's messages. A benchmark, not a test: it prints
 * one JSON object, and the medians of several runs of two builds side by
 * side are what docs/BENCHMARKS.md compares.
 *
 *   jinja_bench [--reps N] TEMPLATE...
 *
 * {"templates": rendered, "skipped": failed to parse or render (named on
 * stderr), "reps": N, "seconds": the renders' wall time, "us_per_render"}.
 * Exit 0, or 2 on a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && len < (1L << 24) && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len + 1))) {
        *n = fread(b, 1, (size_t)len, f);
        b[*n] = 0;
    }
    fclose(f);
    return b;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One template: parse, render once (a failure skips it), then time reps
 * renders. Returns the seconds, or -1 when skipped. */
static double bench_one(const char *path, jinja_value *vars, int reps) {
    size_t n = 0;
    char *src = slurp(path, &n);
    jinja_template *t = NULL;
    jinja_error e;
    struct tm date = {.tm_year = 124, .tm_mon = 6, .tm_mday = 26};
    char *out = NULL;
    size_t len;
    double dt = -1;
    if (src && jinja_parse(src, n, NULL, &t, &e) == 0 && jinja_render(t, vars, &date, &out, &len, &e) == 0) {
        free(out);
        double t0 = now_s();
        for (int r = 0; r < reps; r++) {
            if (jinja_render(t, vars, &date, &out, &len, &e)) break;
            free(out);
        }
        dt = now_s() - t0;
    }
    if (dt < 0) fprintf(stderr, "jinja_bench: skipped %s\n", path);
    jinja_template_free(t);
    free(src);
    return dt;
}

int main(int argc, char **argv) {
    int reps = 300, i = 1;
    if (argc > 2 && !strcmp(argv[1], "--reps")) {
        reps = atoi(argv[2]);
        i = 3;
    }
    if (i >= argc || reps < 1 || reps > 1000000) {
        fprintf(stderr, "usage: jinja_bench [--reps N (1..1000000)] TEMPLATE...\n");
        return 2;
    }
    const jinja_message msgs[] = {
        {"system", "You are a helpful assistant."},
        {"user", "Hello there, how are you?"},
        {"assistant", "I am fine, thanks. How can I help?"},
        {"user", "Tell me a joke about cats."},
        {"assistant", "Why did the cat sit on the computer? To keep an eye on the mouse."},
        {"user", "Another one, please!"},
    };
    jinja_value *vars = NULL;
    if (jinja_chat_vars(msgs, 6, "<s>", "</s>", 1, &vars)) {
        fprintf(stderr, "jinja_bench: out of memory\n");
        return 1;
    }
    double total = 0;
    int done = 0, skipped = 0;
    for (; i < argc; i++) {
        double dt = bench_one(argv[i], vars, reps);
        if (dt < 0) {
            skipped++;
        } else {
            total += dt;
            done++;
        }
    }
    jinja_release(vars);
    printf("{\"templates\": %d, \"skipped\": %d, \"reps\": %d, \"seconds\": %.4f, \"us_per_render\": %.2f}\n",
           done, skipped, reps, total, done ? total * 1e6 / ((double)done * reps) : 0.0);
    return 0;
}
