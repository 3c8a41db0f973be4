/* cpu_steal.c - work stealing over a product's units (cpu_steal.h). */
#include "cpu_steal.h"

static uint64_t pack(uint32_t lo, uint32_t hi) { return lo | (uint64_t)hi << 32; }

int cpu_steal_init(cpu_steal *r, int nu, int par, int align) {
    int per = (nu + par - 1) / par;
    per = (per + align - 1) / align * align;
    for (int t = 0; t < par; t++) {
        const int lo = t * per < nu ? t * per : nu, hi = lo + per < nu ? lo + per : nu;
        atomic_store_explicit(&r[t].lohi, pack((uint32_t)lo, (uint32_t)hi), memory_order_relaxed);
    }
    const int chunk = (per / 32 + align - 1) / align * align;
    return chunk > align ? chunk : align;
}

int cpu_steal_take(cpu_steal *r, int me, int par, int chunk, int align, int *u0, int *u1) {
    for (int k = 0; k < par; k++) {
        cpu_steal *s = &r[(me + k) % par];
        uint64_t v = atomic_load_explicit(&s->lohi, memory_order_relaxed);
        for (;;) {
            const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
            if (lo >= hi) break;
            uint32_t a, b; /* the chunk [a, b) */
            /* a third of what is left of its own range, half of another's, at least chunk */
            uint32_t g = (hi - lo) / (k == 0 ? 3u : 2u);
            g = (g + (uint32_t)align - 1) / (uint32_t)align * (uint32_t)align;
            if (g < (uint32_t)chunk) g = (uint32_t)chunk;
            if (k == 0) { /* own range: the front, lo stays aligned */
                a = lo;
                b = hi - lo > g ? lo + g : hi;
            } else { /* another's: the back, its new end rounded up to align */
                b = hi;
                a = hi - lo > g ? (hi - g + (uint32_t)align - 1) / (uint32_t)align * (uint32_t)align : lo;
                if (a <= lo || a >= hi) a = lo;
            }
            const uint64_t nv = k == 0 ? pack(b, hi) : pack(lo, a);
            if (atomic_compare_exchange_weak_explicit(&s->lohi, &v, nv, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *u0 = (int)a, *u1 = (int)b;
                return 1;
            }
        }
    }
    return 0;
}
