/* backend.c - choosing a backend by name (backend.h). */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"

#ifdef CONFKV_CUDA
int be_cuda_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen);
int be_cuda_available(void);
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
        if (be_cuda_available()) return be_cuda_new(m, o, out, err, errlen);
#endif
        return be_cpu_new(m, o, out, err, errlen);
    }
    if (!strcmp(name, "cpu")) return be_cpu_new(m, o, out, err, errlen);
#ifdef CONFKV_CUDA
    if (!strcmp(name, "cuda")) return be_cuda_new(m, o, out, err, errlen);
#endif
    snprintf(err, errlen, "unknown or not compiled-in backend '%s'", name);
    return CK_EUNSUPPORTED;
}
