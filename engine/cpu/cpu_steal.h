/* cpu_steal.h - a product's units (rows or panels) shared out among the
 * threads of a run of the backend's team (cpu_team.h) by work stealing: each thread owns a contiguous range of
 * them, as an even cut gives, and takes its chunks from the front; a thread
 * whose range is done takes chunks from the back of another's.
 *
 * Why: with even static halves, the threads of a batch-1 decode step's
 * products finish 9-18 % of the products' time apart (measured: 110M
 * Q4_K_M, two threads, at every region's end): a vCPU whose core a
 * neighbour shares runs slower for a while, and the region waits for it. Each thread
 * still streams one contiguous range of the weights until it steals. Which
 * thread computes a unit changes none of its bits.
 *
 * The chunks shrink as a range empties (guided): a take is a third of what
 * is left of the thread's own range, a steal half of what is left of
 * another's, neither below the chunk init returns (a 32nd of a range).
 * Why: the first to finish waits for the other's last chunk. Measured on a
 * Zen 5 (110M Q4_K_M, two threads, timed in the team): with fixed eighths
 * the caller waits 1.8-2.0 us a section and the worker finishes 1.3-1.6 us
 * after it, 61 sections a step; shrinking chunks halve both.
 *
 * Use: cpu_steal_init before the run (one thread), cpu_steal_take in it
 * until it returns 0, with par as given to init even when fewer threads
 * run (their steals then take the rest). The ranges are the caller's
 * memory (n_threads of them, each on its own cache line). */
#ifndef CK_CPU_STEAL_H
#define CK_CPU_STEAL_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct cpu_steal {
    _Atomic uint64_t lohi; /* the units [lo, hi) not yet taken: lo | hi << 32 */
    char pad[64 - sizeof(uint64_t)];
} cpu_steal;

/* Cuts nu units into `par` ranges whose bounds are multiples of `align`
 * (but the last, nu), and returns the smallest chunk a take asks for:
 * about a 32nd of a range, a multiple of align. */
int cpu_steal_init(cpu_steal *r, int nu, int par, int align);

/* Thread me's (< par) next chunk [*u0, *u1): from its own range, else from
 * the back of another's. Returns 0 when every unit is taken. */
int cpu_steal_take(cpu_steal *r, int me, int par, int chunk, int align, int *u0, int *u1);

#endif
