/* cpu_prefetch.h - asking for memory ahead of its use: a span a slice at a
 * time (the CPU backend's attention), and the x8 kernels' weight stream.
 *
 * KV blocks lie anywhere in the pool, so at each block the hardware
 * prefetcher loses the stream and finds it again only after misses. The
 * attention loops ask for the next block's rows a slice per step of the
 * current one: asked all at once, the requests fill the miss buffers and
 * stall as long as the misses would. */
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

/* How far ahead the x8 kernels (cpu_qdot_base_avx2.c, cpu_qdot_x8_body.h)
 * ask for their weights, in bytes: a line asked for each line read. An x8
 * matrix is one stream (its groups follow each other), and past its end a
 * prefetch is dropped, not a fault. The lines in flight must cover a
 * core's share of the read bandwidth over the memory's latency, and a
 * quiet host gives a core more of it than a busy one: the distance has to
 * be right for the quiet one. Measured on a Zen 5:
 *   - 512-bit kernels: the 49 products of a 110M Q4_K_M step (2 threads,
 *     work stealing) alternated with a plain read of as many bytes, 22,564
 *     rounds binned by that read's rate; where it ran at 55 GB/s or more
 *     (median 63), 2048: 0.89, 8192: 1.08, 16384: 1.04 of 4096's rate
 *     (8192: 0.93 of the read); at 35-55 GB/s 0.94-1.03.
 *   - AVX2 kernels (`bench --cpu-kernels avx2`, 110M Q4_K_M, two threads,
 *     25 alternated runs a build, the host's read at about 55 GB/s): 45.9
 *     GB/s decoded at 1024, 51.4 at 4096, 51.8 at 8192.
 * On an AVX2 EPYC (one column of a 56-83 MB matrix against a plain read)
 * 1024 reads Q4_K at 0.95 of the read and 2048 does no better; 8192 is
 * not measured on an AVX2-only machine.
 * At batches the later column groups of a call find the lines cached. A
 * macro: as a static inline function, GCC 12 at -O3 emits none of the
 * prefetches (seen in the object; the kernels then run at 0.8 of the
 * stream). */
#define X8_AHEAD 8192
#define x8_prefetch(p) __builtin_prefetch((const char *)(p) + X8_AHEAD)

#endif
