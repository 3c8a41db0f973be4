/* svc_proc.c - process set-up shared by the mains (svc_proc.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_setaffinity, CPU_* */
#endif
#include "svc_proc.h"

#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

/* Where OMP_PROC_BIND or OMP_PLACES asks for binding, libgomp binds the
 * initial thread to the first place as it loads, before main, and exec
 * keeps a thread's mask: the program run again would see one CPU, so its
 * threads would default to 1 (omp_get_num_procs) and two asked for would
 * share that CPU (half the tokens/s, measured). So every CPU of the places is given
 * back first; the new process binds again as asked. Only ever adds CPUs
 * (the places come from the mask the process started with, or from the
 * user's own list), so without binding nothing changes. */
static void unbind_for_exec(void) {
    const int np = omp_get_num_places();
    cpu_set_t set;
    if (np <= 0 || sched_getaffinity(0, sizeof set, &set)) return;
    int ids[CPU_SETSIZE];
    for (int p = 0; p < np; p++) {
        const int n = omp_get_place_num_procs(p);
        if (n <= 0 || n > CPU_SETSIZE) continue;
        omp_get_place_proc_ids(p, ids);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < CPU_SETSIZE) CPU_SET(ids[i], &set);
    }
    (void)sched_setaffinity(0, sizeof set, &set); /* refused: run as bound, as before */
}

void svc_prefer_passive_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    /* A waiting thread spins about 3 us (libgomp: ~100 spins a microsecond)
     * before it sleeps: a region or barrier then costs ~1 us instead of the
     * 15-40 us of a futex wake-up on a VM's vCPUs, which at batch 1 on two
     * threads (37-49 regions a step) costs about a tenth of the step; the
     * spin is too short to take a shared core from anyone. A longer one is
     * faster on an idle machine and far slower on a busy one: 10000 (~100 us)
     * gives 1.22x the tokens/s of 300 on an idle Zen 5 VM and 0.49x with one
     * other busy process there (measured: 110M Q4_K_M, batch 1, two threads). */
    if (!getenv("GOMP_SPINCOUNT")) (void)setenv("GOMP_SPINCOUNT", "300", 1);
    unbind_for_exec();
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
}
