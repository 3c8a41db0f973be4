/* backend.c - choosing a backend by name (backend.h), and loading the CUDA
 * one on demand.
 *
 * The CUDA backend is a shared object of its own, libconfkv_cuda.so
 * (kernels/CMakeLists.txt), opened here only when a GPU backend is asked
 * for, so that a process on the CPU never maps the CUDA runtime and cuBLAS:
 * their pages (about 150 MiB) would be resident in it for nothing. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"

#ifdef CONFKV_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#define CUDA_MODULE "libconfkv_cuda.so"

typedef int (*cuda_available_fn)(void);
typedef int (*cuda_new_fn)(const model *m, const be_options *o, backend **out, char *err, size_t errlen);

/* Opens the module at path: 1 and *h on success, 0 when there is no file
 * there, -1 (err filled) when there is one that does not load. */
static int cuda_try(const char *path, void **h, char *err, size_t errlen) {
    if (access(path, R_OK)) return 0;
    *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (*h) return 1;
    snprintf(err, errlen, "cannot load the CUDA backend %s: %s", path, dlerror());
    return -1;
}

/* The module, looked for in order: $CONFKV_CUDA_MODULE (only there, when
 * set); beside the executable; ../lib/confkv/ from it (an installed tree,
 * the Docker image); the build tree it was built in. dlopen counts
 * references, so opening it again is cheap; it is never closed, since the
 * CUDA runtime and cuBLAS keep process-wide state that does not survive an
 * unload. Returns the handle, or NULL with err filled. */
static void *cuda_module(char *err, size_t errlen) {
    void *h = NULL;
    const char *env = getenv("CONFKV_CUDA_MODULE");
    if (env && *env) {
        if (cuda_try(env, &h, err, errlen) == 0)
            snprintf(err, errlen, "CONFKV_CUDA_MODULE=%s: no such readable file", env);
        return h;
    }
    char dir[PATH_MAX], path[PATH_MAX + sizeof "/../lib/confkv/" CUDA_MODULE];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    char *slash = n > 0 ? (dir[n] = 0, strrchr(dir, '/')) : NULL;
    if (slash) {
        *slash = 0;
        const char *rel[] = {"/" CUDA_MODULE, "/../lib/confkv/" CUDA_MODULE};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s%s", dir, rel[i]);
            int r = cuda_try(path, &h, err, errlen);
            if (r) return h;
        }
    }
#ifdef CONFKV_CUDA_MODULE_BUILD
    if (cuda_try(CONFKV_CUDA_MODULE_BUILD, &h, err, errlen)) return h;
#endif
    snprintf(err, errlen,
             "the CUDA backend " CUDA_MODULE " was not found beside the program, in ../lib/confkv/ from it"
#ifdef CONFKV_CUDA_MODULE_BUILD
             " or at " CONFKV_CUDA_MODULE_BUILD
#endif
             "; set CONFKV_CUDA_MODULE to its path");
    return NULL;
}

static void *cuda_sym(void *h, const char *name, char *err, size_t errlen) {
    void *f = dlsym(h, name);
    if (!f) snprintf(err, errlen, "the CUDA backend module has no %s: %s", name, dlerror());
    return f;
}

static int cuda_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen) {
    void *h = cuda_module(err, errlen), *f = h ? cuda_sym(h, "be_cuda_new", err, errlen) : NULL;
    if (!f) return CK_EUNSUPPORTED;
    cuda_new_fn fn;
    memcpy(&fn, &f, sizeof fn); /* object to function pointer, as POSIX allows */
    return fn(m, o, out, err, errlen);
}

/* "auto": a GPU needs the NVIDIA driver's libcuda.so.1; without it the
 * module is not even opened. With it, the module says whether the runtime
 * sees a device. */
static int cuda_usable(void) {
    char err[256];
    if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) return 0;
    void *h = cuda_module(err, sizeof err), *f = h ? cuda_sym(h, "be_cuda_available", err, sizeof err) : NULL;
    if (!f) { /* a driver but no usable module: said, not silent */
        fprintf(stderr, "confkv: backend auto: %s; running on the CPU\n", err);
        return 0;
    }
    cuda_available_fn fn;
    memcpy(&fn, &f, sizeof fn);
    return fn();
}
#endif

static const char *const compiled[] = {
    "cpu",
#ifdef CONFKV_CUDA
    "cuda",
#endif
    NULL,
};

const char *const *be_compiled(void) { return compiled; }

int be_new(const char *name, const model *m, const be_options *o, backend **out, char *err, size_t errlen) {
    if (!name || !strcmp(name, "auto")) {
#ifdef CONFKV_CUDA
        if (cuda_usable()) {
            int rc = cuda_new(m, o, out, err, errlen);
            if (rc != CK_EUNSUPPORTED) return rc;
            /* a model the GPU does not compute (a layer kind with no CUDA
             * kernel): auto means the best backend that runs it */
            fprintf(stderr, "confkv: backend auto: %s; running on the CPU\n", err);
        }
#endif
        return be_cpu_new(m, o, out, err, errlen);
    }
    if (!strcmp(name, "cpu")) return be_cpu_new(m, o, out, err, errlen);
#ifdef CONFKV_CUDA
    if (!strcmp(name, "cuda")) return cuda_new(m, o, out, err, errlen);
#endif
    snprintf(err, errlen, "unknown or not compiled-in backend '%s'", name);
    return CK_EUNSUPPORTED;
}
