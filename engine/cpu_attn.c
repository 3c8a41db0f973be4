/* cpu_attn.c - one token's attention over f32 KV blocks (cpu_attn.h): the
 * choice of kernel by ISA. The kernel itself is AVX-512 only
 * (cpu_attn_avx512.c); elsewhere the caller's general code runs. */
#include "cpu_attn.h"

#include "cpu_features.h"

int attn_f32_avx512(const attn_shape *s, const float *q, const float *const *blk, const int *rows, int n_blk,
                    float *att, size_t att_stride, float *out, float *mass);
int attn_f32_supported_avx512(const attn_shape *s);

attn_f32_fn attn_f32_kernel(const attn_shape *s, int isa) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512 && attn_f32_supported_avx512(s)) return attn_f32_avx512;
#endif
    (void)s, (void)isa;
    return NULL;
}
