/* cpu_attn_tile_avx512.c - one query head's step over one KV block for
 * cpu_attn_tile.c, with AVX-512 (built with its flags, engine/CMakeLists.txt;
 * called only where cpu_features.h found AVX-512): the query held in
 * registers against each K row (head_dim / 16 FMAs and one add tree a
 * score), the block's exponentials 16 at a time (cpu_vexp.h, within 2 ulp
 * of expf), the accumulator in registers while the V rows stream past. */
#include <immintrin.h>
#include <math.h>

#include "cpu_attn_tile.h"
#include "cpu_vexp.h"

#define TILE_HV_MAX 8 /* head_dim / 16 at most: head sizes up to 128 */

int attn_tile_step_ok_avx512(int hd) { return hd > 0 && hd % 16 == 0 && hd / 16 <= TILE_HV_MAX; }

float attn_tile_step_avx512(const float *qh, const float *k, const float *v, int kvd, int hd, int t0, int tn,
                            float scale, float *o, float *mx, float *sum, float *sc) {
    const int nv = hd / 16;
    __m512 qv[TILE_HV_MAX], ov[TILE_HV_MAX];
    for (int c = 0; c < nv; c++) qv[c] = _mm512_loadu_ps(qh + 16 * c);
    float m = *mx;
    for (int t = t0; t < tn; t++) {
        const float *kt = k + (size_t)t * kvd;
        __m512 a = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kt));
        for (int c = 1; c < nv; c++) a = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(kt + 16 * c), a);
        sc[t] = _mm512_reduce_add_ps(a) / scale;
        m = sc[t] > m ? sc[t] : m;
    }
    for (int c = 0; c < nv; c++) ov[c] = _mm512_loadu_ps(o + 16 * c);
    if (m > *mx) { /* the max grew: what was summed against the old one shrinks */
        const float cf = expf(*mx - m);
        const __m512 cv = _mm512_set1_ps(cf);
        for (int c = 0; c < nv; c++) ov[c] = _mm512_mul_ps(ov[c], cv);
        *sum *= cf;
        *mx = m;
    }
    const __m512 mv = _mm512_set1_ps(m);
    float e = 0.0f;
    for (int t = t0; t < tn; t += 16) {
        const __mmask16 mk = tn - t >= 16 ? 0xFFFF : (__mmask16)((1u << (tn - t)) - 1);
        const __m512 p = vexp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sc + t), mv));
        _mm512_mask_storeu_ps(sc + t, mk, p);
        e += _mm512_mask_reduce_add_ps(mk, p);
    }
    for (int t = t0; t < tn; t++) {
        const __m512 pv = _mm512_set1_ps(sc[t]);
        const float *vt = v + (size_t)t * kvd;
        for (int c = 0; c < nv; c++) ov[c] = _mm512_fmadd_ps(pv, _mm512_loadu_ps(vt + 16 * c), ov[c]);
    }
    for (int c = 0; c < nv; c++) _mm512_storeu_ps(o + 16 * c, ov[c]);
    *sum += e;
    return e;
}
