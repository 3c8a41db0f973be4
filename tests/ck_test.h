/* ck_test.h - the few assertion macros the test programs share.
 *
 * A test program is a main() that calls CK_RUN(test_fn) for each case and
 * returns ck_test_summary(). A failed CK_CHECK prints file:line and the
 * expression, marks the case failed and returns from it. */
#ifndef CK_TEST_H
#define CK_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ck_test_failed_ = 0, ck_test_passed_ = 0, ck_test_cur_failed_ = 0;

#define CK_CHECK(cond)                                                               \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            ck_test_cur_failed_ = 1;                                                 \
            return;                                                                  \
        }                                                                            \
    } while (0)

#define CK_CHECK_MSG(cond, ...)                                                      \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            ck_test_cur_failed_ = 1;                                                 \
            return;                                                                  \
        }                                                                            \
    } while (0)

#define CK_CHECK_NEAR(a, b, tol)                                                                          \
    CK_CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)", (double)(a), (double)(b), \
                 (double)(tol))

#define CK_RUN(fn)                             \
    do {                                       \
        ck_test_cur_failed_ = 0;               \
        fn();                                  \
        if (ck_test_cur_failed_) {             \
            ck_test_failed_++;                 \
            fprintf(stderr, "FAIL %s\n", #fn); \
        } else {                               \
            ck_test_passed_++;                 \
            fprintf(stderr, "ok   %s\n", #fn); \
        }                                      \
    } while (0)

static inline int ck_test_summary(void) {
    fprintf(stderr, "%d passed, %d failed\n", ck_test_passed_, ck_test_failed_);
    return ck_test_failed_ ? 1 : 0;
}

/* Path of a file in ../shared/models (a static buffer per call site is
 * enough for tests). */
static inline const char *ck_test_model_path(const char *name) {
    static char buf[4][1024];
    static int i = 0;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%s", CONFKV_SHARED_MODELS, name);
    return buf[i];
}
#endif
