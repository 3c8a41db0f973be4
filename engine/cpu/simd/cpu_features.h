/* cpu_features.h - which vector instructions this CPU runs, and which of the
 * CPU backend's kernel sets to use (chosen at run time, not at build time).
 *
 * One binary is built for the baseline x86-64 (CONFKV_NATIVE off by
 * default); the kernels that need more are compiled per ISA in files of
 * their own (*_avx2.c, *_avx512.c, *_vnni.c) and chosen here at start-up:
 *   CPU_ISA_C       portable C (any CPU, any architecture)
 *   CPU_ISA_AVX2    AVX2 + FMA + F16C
 *   CPU_ISA_AVX512  AVX-512 F/BW/VL/DQ (and AVX2)
 *   CPU_ISA_VNNI    AVX-512 VNNI on top of AVX-512
 * Each level implies the ones below it. A set is usable only when the CPU
 * has the instructions (CPUID) and the OS saves the registers they use
 * (XGETBV: YMM for AVX2; ZMM and opmask for AVX-512).
 *
 * The environment variable CONFKV_CPU_KERNELS=c|avx2|avx512|vnni forces a
 * level (a flag of `confkv bench` / `generate` sets it too), so every path
 * the machine supports can be tested; forcing one the CPU lacks is refused
 * rather than left to die of SIGILL.
 *
 * Everything here is pure apart from reading CPUID and the environment: no
 * state, thread-safe. */
#ifndef CK_CPU_FEATURES_H
#define CK_CPU_FEATURES_H

enum cpu_isa { CPU_ISA_C = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2, CPU_ISA_VNNI = 3, CPU_ISA_COUNT };

/* The environment variable that forces a level. */
#define CPU_KERNELS_ENV "CONFKV_CPU_KERNELS"

/* The best level this CPU and OS support (CPU_ISA_C off x86-64). */
int cpu_isa_detect(void);

/* "c", "avx2", "avx512", "vnni"; NULL for a value out of range. Static. */
const char *cpu_isa_name(int isa);

/* The level for a name as cpu_isa_name gives it; -1 when unknown or NULL. */
int cpu_isa_from_name(const char *s);

/* The level to run with: CONFKV_CPU_KERNELS when set (and non-empty), else
 * cpu_isa_detect(). Returns the level, CK_EINVAL for a name that is not a
 * level, CK_EUNSUPPORTED for a level this CPU lacks; err then says which. */
int cpu_isa_select(char *err, unsigned long errlen);

/* The CPU's brand string (CPUID leaves 0x80000002-4), trimmed, into buf;
 * "unknown" where there is none. Returns buf. */
char *cpu_model_name(char *buf, unsigned long len);

#endif
