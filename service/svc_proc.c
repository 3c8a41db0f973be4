/* svc_proc.c - process set-up shared by the mains (svc_proc.h). */
#include "svc_proc.h"

#include <stdlib.h>
#include <unistd.h>

void svc_prefer_passive_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    /* A waiting thread spins about 3 us (libgomp: ~100 spins a microsecond)
     * before it sleeps: a region or barrier then costs ~1 us instead of the
     * 15-40 us of a futex wake-up on this host's vCPUs, which at batch 1 on
     * two threads (37-49 regions a step) cost about a tenth of the step; the
     * spin is too short to take a shared core from anyone (docs/BENCHMARKS.md
     * section 12, session 8). */
    if (!getenv("GOMP_SPINCOUNT")) (void)setenv("GOMP_SPINCOUNT", "300", 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
}
