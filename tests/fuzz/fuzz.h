/* fuzz.h - what the harnesses in tests/fuzz/ share (docs/FUZZING.md).
 *
 * Each harness is one libFuzzer target: LLVMFuzzerTestOneInput(data, size)
 * feeds the bytes to one reader of outside bytes and checks what the reader
 * promises (its contract in the header), not only that it does not crash.
 * A broken promise is FUZZ_CHECK's abort(): libFuzzer and the plain runner
 * (fuzz_main.c) both report it as a crash and keep the input.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt): with clang and
 * -fsanitize=fuzzer (CONFKV_FUZZ=ON), or as a plain program linked with
 * fuzz_main.c that runs every file of its corpus and regression folders. */
#ifndef CK_FUZZ_H
#define CK_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A broken contract: say which, then crash so the input is kept. */
#define FUZZ_CHECK(cond)                                                                              \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            fprintf(stderr, "%s:%d: %s: contract broken: %s\n", __FILE__, __LINE__, __func__, #cond); \
            abort();                                                                                  \
        }                                                                                             \
    } while (0)

/* The readers under test open paths, so the input goes into an anonymous
 * in-memory file (a memfd is a regular file, as gguf_open wants) named
 * /proc/self/fd/N. Returns the fd (close it after use) and fills path;
 * -1 on failure, when the harness skips the input. */
static inline int fuzz_memfile(const void *data, size_t size, char *path, size_t cap) {
    int fd = memfd_create("confkv-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    const char *p = data;
    size_t left = size;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

/* Little-endian reads from the input (the harnesses take a few parameters
 * from its first bytes). */
static inline uint32_t fuzz_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
