/* cpu_prefetch.h - asking for a span of memory a slice at a time, ahead of
 * its use (the CPU backend's attention).
 *
 * KV blocks lie anywhere in the pool, so at each block the hardware
 * prefetcher loses the stream and finds it again only after misses. The
 * attention loops ask for the next block's rows a slice per step of the
 * current one: asked all at once, the requests filled the miss buffers and
 * stalled as long as the misses would have. */
#ifndef CK_CPU_PREFETCH_H
#define CK_CPU_PREFETCH_H

#include <stddef.h>

/* Ask for part t of `parts` (64-byte lines) of the span [p, p + bytes);
 * p NULL: nothing. */
static inline void prefetch_part(const char *p, size_t bytes, int t, int parts) {
    if (!p) return;
    size_t per = (bytes / (size_t)parts + 63) & ~(size_t)63, o = per * (size_t)t;
    size_t e = o + per < bytes ? o + per : bytes;
    for (; o < e; o += 64) __builtin_prefetch(p + o);
}

#endif
