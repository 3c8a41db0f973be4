/* cpu_gemm_avx512.c - the packed f32 kernels (cpu_gemm_body.h) built with
 * AVX-512 F/BW/VL/DQ flags (engine/CMakeLists.txt); called only where cpu_features.h
 * found the ISA. */
#define GEMM_ISA(name) name##_avx512
#define GEMM_ISA_NAME "avx512"
#include "cpu_gemm_body.h"
