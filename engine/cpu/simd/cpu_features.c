/* cpu_features.c - CPUID + XGETBV detection (cpu_features.h).
 *
 * Why XGETBV as well as CPUID: CPUID says what the core can execute, XCR0
 * what the OS saves on a context switch. A hypervisor or kernel that does
 * not enable the ZMM state leaves the AVX-512 bits set in CPUID, and the
 * first ZMM instruction then faults. */
#include "cpu_features.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0, read without -mxsave (this file is built for the baseline). */
static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

int cpu_isa_detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return CPU_ISA_C;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return CPU_ISA_C;
    const unsigned long long xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return CPU_ISA_C; /* XMM and YMM state */
    if ((unsigned)__get_cpuid_max(0, NULL) < 7u) return CPU_ISA_C;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1;
    if (!avx2 || !fma || !f16c) return CPU_ISA_C;
    const int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    const int vnni = (c >> 11) & 1;
    /* opmask, upper ZMM0-15 and ZMM16-31 state */
    if (!(f && dq && bw && vl) || (xcr0 & 0xe0) != 0xe0) return CPU_ISA_AVX2;
    return vnni ? CPU_ISA_VNNI : CPU_ISA_AVX512;
}

char *cpu_model_name(char *buf, unsigned long len) {
    unsigned r[12];
    if (len == 0) return buf;
    if ((unsigned)__get_cpuid_max(0x80000000, NULL) < 0x80000004u) {
        snprintf(buf, len, "unknown");
        return buf;
    }
    for (unsigned i = 0; i < 3; i++)
        __cpuid(0x80000002 + i, r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = 0;
    const char *p = s;
    while (*p == ' ') p++;
    size_t n = strlen(p);
    while (n && p[n - 1] == ' ') n--;
    snprintf(buf, len, "%.*s", (int)n, n ? p : "unknown");
    return buf;
}
#else
int cpu_isa_detect(void) { return CPU_ISA_C; }

char *cpu_model_name(char *buf, unsigned long len) {
    if (len) snprintf(buf, len, "unknown");
    return buf;
}
#endif

static const char *const isa_names[CPU_ISA_COUNT] = {"c", "avx2", "avx512", "vnni"};

const char *cpu_isa_name(int isa) { return isa >= 0 && isa < CPU_ISA_COUNT ? isa_names[isa] : NULL; }

int cpu_isa_from_name(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < CPU_ISA_COUNT; i++)
        if (!strcmp(s, isa_names[i])) return i;
    return -1;
}

int cpu_isa_select(char *err, unsigned long errlen) {
    const int have = cpu_isa_detect();
    const char *env = getenv(CPU_KERNELS_ENV);
    if (!env || !*env) return have;
    const int want = cpu_isa_from_name(env);
    if (want < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s: %s=%s: want c, avx2, avx512 or vnni", __func__, CPU_KERNELS_ENV, env);
        return CK_EINVAL;
    }
    if (want > have) {
        if (err && errlen)
            snprintf(err, errlen, "%s: %s=%s: this CPU runs at most %s", __func__, CPU_KERNELS_ENV, env,
                     isa_names[have]);
        return CK_EUNSUPPORTED;
    }
    return want;
}
