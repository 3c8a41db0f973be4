/* cpu_qgemm_vnni.c - the 16-row tiles (cpu_qgemm_body.h) built with
 * AVX-512 VNNI: byte products summed by vpdpbusd (engine/CMakeLists.txt);
 * called only where cpu_features.h found the ISA. */
#define QG_ISA vnni
#include "cpu_qgemm_body.h"
