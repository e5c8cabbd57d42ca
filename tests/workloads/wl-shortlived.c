/* tests/workloads/wl-shortlived.c - a master that forks short-lived children (no exec).
 *
 *   wl-shortlived N CPU_MS   forks N children at once; each runs wl_short_task until its
 *                            own thread has used CPU_MS of CPU time, then _exit(0)s. The
 *                            master waits for them and exits 0 if all of them exited 0.
 *
 * The children's work is an amount of CPU, not a wall-clock span: on a busy machine each
 * still does all of it, so each must be sampled in wl_short_task.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wl-cpu.h"

#define NOINLINE __attribute__((noinline))

NOINLINE void wl_short_task(double cpu_ms);
NOINLINE void wl_short_task(double cpu_ms)
{
    wl_burn_cpu_ms(cpu_ms);
}

int main(int argc, char **argv)
{
    int n, status, failed = 0;

    if (argc != 3 || (n = atoi(argv[1])) <= 0) {
        fprintf(stderr, "usage: wl-shortlived N CPU_MS\n");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();

        if (pid < 0) {
            perror("wl-shortlived: fork");
            return 1;
        }
        if (pid == 0) {
            wl_short_task(atof(argv[2]));
            _exit(0);
        }
    }
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
    if (failed)
        fprintf(stderr, "wl-shortlived: %d children failed\n", failed);
    return failed ? 1 : 0;
}
