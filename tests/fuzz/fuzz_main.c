/* fuzz_main.c - the plain runner of a harness (no libFuzzer): feeds every
 * file named on the command line, and every file inside every folder named,
 * to LLVMFuzzerTestOneInput, one call per file, in name order.
 *
 * This is how ctest replays the seed corpus and the regression inputs in the
 * gcc builds (and so under ASan+UBSan in the sanitizer build). Each input is
 * copied into a buffer of exactly its size, so a read one byte past the end
 * is an ASan error here too. Names starting with '.' are skipped (.keep).
 * Exit status: 0 when every input ran, 1 when no input was found or a file
 * could not be read; a crash is the harness's abort() or a sanitizer's. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Optional in a harness, as in libFuzzer. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_main: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "fuzz_main: %s: cannot read\n", path);
        free(buf);
        return -1;
    }
    /* exactly n bytes, so that ASan sees an overread of the input */
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_dot(const struct dirent *d) { return d->d_name[0] != '.'; }

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int inputs = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) {
            fprintf(stderr, "fuzz_main: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]))
                failed = 1;
            else
                inputs++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, skip_dot, by_name);
        if (n < 0) {
            fprintf(stderr, "fuzz_main: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            free(names[k]);
            if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
            if (run_file(path))
                failed = 1;
            else
                inputs++;
        }
        free(names);
    }
    printf("%s: %d inputs ran\n", argv[0], inputs);
    if (!inputs) fprintf(stderr, "%s: no inputs found\n", argv[0]);
    return failed || !inputs;
}
