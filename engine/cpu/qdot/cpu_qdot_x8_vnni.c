/* cpu_qdot_x8_vnni.c - the 512-bit 8-row products (cpu_qdot_x8_body.h)
 * built with AVX-512 VNNI: byte products summed by vpdpbusd. (engine/CMakeLists.txt);
 * called only where cpu_features.h found the ISA. */
#define X8_ISA vnni
#include "cpu_qdot_x8_body.h"
