/* test_cpu_team.c - the CPU backend's threads (engine/cpu/cpu_team.h): every
 * thread of a run runs fn exactly once with its own tid, what the caller
 * wrote before a run is what the threads read, what they wrote is what the
 * caller reads after it; runs of any size follow each other (short ones, as
 * a decode step's, and ones after the workers have gone to sleep); a team
 * stops and joins from any state. Under ThreadSanitizer (ops/scripts/test.sh)
 * this is the check of the team's own synchronisation. */
#include <stdint.h>
#include <time.h>

#include "ck_err.h"
#include "ck_test.h"
#include "cpu_team.h"

#define MAX_T 8

typedef struct job {
    int calls[MAX_T]; /* runs of each tid */
    int n_seen[MAX_T];
    int64_t in; /* written by the caller before the run */
    int64_t seen[MAX_T];
    int64_t out[MAX_T]; /* written by each thread, read by the caller after */
} job;

static void fn(void *arg, int tid, int n) {
    job *j = arg;
    j->calls[tid]++;
    j->n_seen[tid] = n;
    j->seen[tid] = j->in;
    j->out[tid] = j->in * 31 + tid;
}

static void check_runs(int size, int runs, int sleep_every) {
    cpu_team *t = NULL;
    CK_CHECK(cpu_team_new(size, &t) == CK_OK && t && cpu_team_size(t) == size);
    job j;
    memset(&j, 0, sizeof j);
    for (int r = 0; r < runs; r++) {
        const int n = 1 + r % (size + 1); /* 1..size+1: more than the team asks for size */
        const int got = n > size ? size : n;
        int before[MAX_T];
        memcpy(before, j.calls, sizeof before);
        j.in = r * 7 + 3;
        cpu_team_run(t, n, fn, &j);
        for (int k = 0; k < size; k++) {
            CK_CHECK_MSG(j.calls[k] == before[k] + (k < got), "run %d of %d threads: tid %d ran %d times", r,
                         n, k, j.calls[k] - before[k]);
            if (k < got) {
                CK_CHECK(j.n_seen[k] == got);
                CK_CHECK(j.seen[k] == j.in && j.out[k] == j.in * 31 + k);
            }
        }
        if (sleep_every && r % sleep_every == sleep_every - 1) {
            /* long enough for every worker to stop spinning and sleep */
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    cpu_team_free(t);
}

static void test_sizes(void) {
    for (int size = 1; size <= 4; size++) check_runs(size, 20000, 0);
}

static void test_after_sleep(void) {
    check_runs(2, 200, 10);
    check_runs(3, 100, 7);
}

static void test_free_states(void) {
    cpu_team *t = NULL;
    CK_CHECK(cpu_team_new(3, &t) == CK_OK);
    cpu_team_free(t); /* at once: workers may not have begun to wait */
    CK_CHECK(cpu_team_new(2, &t) == CK_OK);
    job j;
    memset(&j, 0, sizeof j);
    cpu_team_run(t, 2, fn, &j);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    cpu_team_free(t); /* asleep */
    cpu_team_free(NULL);
    CK_CHECK(cpu_team_new(0, &t) == CK_EINVAL && t == NULL);
}

int main(void) {
    CK_RUN(test_sizes);
    CK_RUN(test_after_sleep);
    CK_RUN(test_free_states);
    return ck_test_summary();
}
