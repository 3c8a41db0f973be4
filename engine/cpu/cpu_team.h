/* cpu_team.h - the CPU backend's own threads for its short parallel
 * sections: a caller (thread 0) and n - 1 workers that run one function
 * together and meet again when it returns.
 *
 * Why not an OpenMP region: a batch-1 decode step opens one per product and
 * per attention, 61 a step on a 12-layer model, each 5-40 us of work.
 * libgomp's waiting thread either spins (GOMP_SPINCOUNT) or sleeps on a
 * futex, and which is right depends on the machine: with a short spin (the
 * 300 that svc_proc.c sets) a thread that arrives a few microseconds early
 * sleeps, and its wake-up costs 15-40 us on a VM's vCPUs; with a long one a
 * waiting thread takes its core from every other process there (measured
 * on a Zen 5 VM: half the tokens/s beside one busy process). Here the spin
 * adapts to the waits it sees: a wait that ends while spinning lets the
 * next spin longer, one that has to sleep halves it. Idle
 * threads then spin about as long as their partners usually take, up to
 * CPU_TEAM_SPIN_MAX, and sleep on a futex past that; nobody is woken by a
 * syscall unless it sleeps. On 61 products of one 71 MB matrix a step
 * (two threads, a Zen 5 VM) this reads 55 GB/s where as many OpenMP
 * regions read 36.
 *
 * Use: cpu_team_new once (it starts the workers), cpu_team_run for each
 * section from one thread at a time (not re-entrant: fn must not run
 * another), cpu_team_free to stop and join them. fn(arg, tid, n) runs on
 * threads tid = 0..n-1 (0 is the caller) and must share the work out by
 * tid; everything fn wrote is visible to the caller when cpu_team_run
 * returns, and everything the caller wrote before it to every fn.
 * Nothing is allocated after cpu_team_new. Linux only for the futex; where
 * it is missing the waits spin and yield. */
#ifndef CK_CPU_TEAM_H
#define CK_CPU_TEAM_H

/* The most spins (pause instructions, about 10-40 ns each) a wait may
 * grow to before it sleeps. */
#define CPU_TEAM_SPIN_MAX 20000
/* The fewest: a wait halves its spin down to this (svc_proc.c's 300). */
#define CPU_TEAM_SPIN_MIN 300

typedef void (*cpu_team_fn)(void *arg, int tid, int n);
typedef struct cpu_team cpu_team;

/* A team of n_threads (the caller and n_threads - 1 workers, started now).
 * Returns 0 and *out; CK_EINVAL for n_threads < 1; CK_ENOMEM when memory or
 * a thread could not be had (the workers already started are stopped). */
int cpu_team_new(int n_threads, cpu_team **out);

/* Threads in the team, the caller included. */
int cpu_team_size(const cpu_team *t);

/* fn(arg, tid, n) on n = min(n, size) threads, the caller as tid 0; returns
 * when all have returned. n <= 1 runs fn(arg, 0, 1) here. */
void cpu_team_run(cpu_team *t, int n, cpu_team_fn fn, void *arg);

/* Stop the workers, join them, free t. NULL is a no-op. */
void cpu_team_free(cpu_team *t);

#endif
