/* cpu_qdot_x8_avx512.c - the 512-bit 8-row products (cpu_qdot_x8_body.h)
 * built with AVX-512 F/BW/VL/DQ without VNNI: byte products through maddubs. (engine/CMakeLists.txt);
 * called only where cpu_features.h found the ISA. */
#define X8_ISA avx512
#include "cpu_qdot_x8_body.h"
