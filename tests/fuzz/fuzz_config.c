/* fuzz_config.c - confkvd's config file reader (svc_config.h), as
 * `confkvd --config FILE` reads it.
 *
 * Input: the file. Checked: the load returns 0 or CK_EINVAL with a
 * NUL-terminated sentence in err; on success every key is a service key or
 * a "kafka." key with a non-empty name, svc_config_get returns each key's
 * value, and the printer and the kafka visitor run over all of them. */
#include "ck_err.h"
#include "fuzz.h"
#include "svc_config.h"

static int count_kafka(void *ud, const char *name, const char *value) {
    FUZZ_CHECK(name && *name && value);
    (*(int *)ud)++;
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    /* only the file under test: no configuration from the environment */
    extern char **environ;
    for (char **e = environ; e && *e;) {
        if (!strncmp(*e, "CONFKV_", 7)) {
            char name[256];
            size_t n = strcspn(*e, "=");
            snprintf(name, sizeof name, "%.*s", (int)n, *e);
            unsetenv(name);
            e = environ;
        } else {
            e++;
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    char *argv[] = {"confkvd", "--config", path, NULL};
    svc_config c;
    memset(err, 0, sizeof err);
    int rc = svc_config_load(&c, 3, argv, err, sizeof err);
    close(fd);
    FUZZ_CHECK(rc == 0 || rc == CK_EINVAL || rc == CK_ENOMEM);
    FUZZ_CHECK(memchr(err, 0, sizeof err));
    if (rc == 0) {
        int kafka = 0;
        for (int i = 0; i < c.n_kv; i++) {
            const svc_kv *kv = &c.kv[i];
            FUZZ_CHECK(kv->key && *kv->key && kv->value);
            if (!strncmp(kv->key, "kafka.", 6)) {
                FUZZ_CHECK(kv->key[6] != 0);
                kafka++;
            }
            const char *v = svc_config_get(&c, kv->key);
            FUZZ_CHECK(v != NULL && !strcmp(v, kv->value));
        }
        /* the models and the cascade: resolved to real entries */
        FUZZ_CHECK(c.n_models >= 0 && c.n_models <= SVC_CONFIG_MAX_MODELS);
        for (int i = 0; i < c.n_models; i++) FUZZ_CHECK(c.models[i].path && *c.models[i].path);
        if (c.route_cascade)
            FUZZ_CHECK(c.route_small >= 0 && c.route_small < c.n_models && c.route_large >= 0 &&
                       c.route_large < c.n_models && c.route_small != c.route_large);
        int seen = 0;
        svc_config_each_kafka(&c, count_kafka, &seen);
        FUZZ_CHECK(seen == kafka);
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            svc_config_print(&c, null);
            fclose(null);
        }
    }
    svc_config_free(&c);
    return 0;
}
