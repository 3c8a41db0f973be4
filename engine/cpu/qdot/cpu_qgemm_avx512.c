/* cpu_qgemm_avx512.c - the 16-row tiles (cpu_qgemm_body.h) built with
 * AVX-512 F/BW/VL/DQ without VNNI: byte products through maddubs
 * (engine/CMakeLists.txt); called only where cpu_features.h found the ISA. */
#define QG_ISA avx512
#include "cpu_qgemm_body.h"
