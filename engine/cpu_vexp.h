/* cpu_vexp.h - e^x sixteen floats at a time (AVX-512), for the CPU
 * backend's softmax and SwiGLU, where a call to expf per element cost more
 * than the arithmetic around it. */
#ifndef CK_CPU_VEXP_H
#define CK_CPU_VEXP_H

#if defined(__AVX512F__)
#include <immintrin.h>

/* e^x: x = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor polynomial to
 * degree 7 (error below 1e-8 relative), then scaled by 2^n (within 2 ulp of
 * expf). Below -87.3 the result underflows towards 0 as expf does; above
 * 88.7 it is +inf; NaN and +inf give NaN. */
static inline __m512 vexp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-103.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#endif

#endif
