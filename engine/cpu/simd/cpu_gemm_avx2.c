/* cpu_gemm_avx2.c - the packed f32 kernels (cpu_gemm_body.h) built with
 * AVX2 + FMA + F16C flags (engine/CMakeLists.txt); called only where cpu_features.h
 * found the ISA. */
#define GEMM_ISA(name) name##_avx2
#define GEMM_ISA_NAME "avx2"
#include "cpu_gemm_body.h"
