/* cpu_attn.c - one token's attention over f32 KV blocks (cpu_attn.h): the
 * choice of kernel by ISA, and the block mass every kernel sums the same
 * way. The kernels are cpu_attn_avx512.c and cpu_attn_avx2.c; below AVX2
 * the caller's general code runs. */
#include "cpu_attn.h"

#include "cpu_features.h"

int attn_f32_avx512(const attn_shape *s, const float *q, const float *const *blk, const int *rows, int n_blk,
                    int h0, int h1, float *att, size_t att_stride, float *out, float *mass);
int attn_f32_supported_avx512(const attn_shape *s);
int attn_f32_avx2(const attn_shape *s, const float *q, const float *const *blk, const int *rows, int n_blk,
                  int h0, int h1, float *att, size_t att_stride, float *out, float *mass);
int attn_f32_supported_avx2(const attn_shape *s);

int attn_args_ok(const attn_shape *s, const int *rows, int n_blk, int h0, int h1, size_t att_stride) {
    if (h0 < 0 || h1 > s->n_heads || h0 >= h1) return 0;
    size_t n = 0;
    for (int b = 0; b < n_blk; b++) n += (size_t)rows[b];
    return n > 0 && n <= att_stride;
}

void attn_block_mass(const float *att, size_t att_stride, int n_heads, const int *rows, int n_blk,
                     float *mass) {
    int n0 = 0;
    for (int b = 0; b < n_blk; b++) {
        float m = 0.0f;
        for (int h = 0; h < n_heads; h++)
            for (int t = 0; t < rows[b]; t++) m += att[(size_t)h * att_stride + n0 + t];
        mass[b] = m;
        n0 += rows[b];
    }
}

attn_f32_fn attn_f32_kernel(const attn_shape *s, int isa, const char **name) {
    const char *dummy;
    if (!name) name = &dummy;
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512 && attn_f32_supported_avx512(s)) return *name = "avx512", attn_f32_avx512;
    if (isa >= CPU_ISA_AVX2 && attn_f32_supported_avx2(s)) return *name = "avx2", attn_f32_avx2;
#endif
    (void)s, (void)isa;
    *name = "general";
    return NULL;
}
