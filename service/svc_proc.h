/* svc_proc.h - process set-up shared by the confkv and confkvd mains. */
#ifndef CK_SVC_PROC_H
#define CK_SVC_PROC_H

/* Run the program again with OMP_WAIT_POLICY=passive unless the caller set
 * a policy. libgomp reads the variable when it is loaded, before main, so
 * setenv alone comes too late. Why: OpenMP's default lets idle threads spin
 * between parallel regions, which on a machine whose cores are shared with
 * other processes makes a batch-32 step 10-30x slower (docs/BENCHMARKS.md);
 * passive waiting costs a few microseconds per region (with GOMP_SPINCOUNT
 * 300, which it sets too unless the caller did: a 3 us spin first). Set
 * OMP_WAIT_POLICY=active on dedicated cores. Returns only when no re-exec
 * happened (already set, or exec failed). */
void svc_prefer_passive_wait(char **argv);

#endif
