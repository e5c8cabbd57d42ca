/* tests/workloads/wl-shortlived.c - a master that starts short-lived children.
 *
 *   wl-shortlived N CPU_MS [HOW [PARALLEL]]
 *       starts N children, PARALLEL of them at a time (default: all N at once); each runs
 *       wl_short_task until its own thread has used CPU_MS of CPU time, prints one line
 *       `child PID cpu_ns=NS` (PID its own, NS its thread's CPU clock,
 *       CLOCK_THREAD_CPUTIME_ID, once the work is done) and exits 0. The master waits for
 *       them and exits 0 if all of them exited 0. HOW says how a child is started:
 *         fork   (default) fork(); the child runs wl_short_task then _exit(0)s;
 *         exec   fork(), then the child execs /proc/self/exe --child CPU_MS: the new image
 *                runs wl_short_task (same pid, so its thread's CPU clock holds the life
 *                before the exec too) and returns from main;
 *         spawn  posix_spawn() of /proc/self/exe --child CPU_MS, which works as for exec.
 *         exec-threads  as exec, and the child counts its threads just before its exec
 *                (/proc/self/task: the profiler's, if any, and its own) and its line ends
 *                with ` threads_before_exec=K`.
 *       With WL_SHORTLIVED_REAPED set, the master also prints `reaped PID cpu_ns=NS` for each
 *       child it reaps: all the CPU the child used (all threads, its exit; wait4's rusage).
 *   wl-shortlived --child CPU_MS [K]
 *       (what exec and spawn start) one child's work and line, in this process.
 *
 * The children's work is an amount of CPU, not a wall-clock span: on a busy machine each
 * still does all of it, so each must be sampled in wl_short_task. The line is one write(2)
 * of fewer than PIPE_BUF bytes (children writing at once do not interleave), not stdio (a
 * forked child must not flush a copy of the master's buffer).
 */
#include <dirent.h>
#include <errno.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wl-cpu.h"

#define NOINLINE __attribute__((noinline))

extern char **environ;

NOINLINE void wl_short_task(double cpu_ms);
NOINLINE void wl_short_task(double cpu_ms)
{
    wl_burn_cpu_ms(cpu_ms);
}

/* One child's work, then its line on stdout (threads_before_exec: NULL, or what to end it
 * with). Returns 0, or 1 if the line was not written. */
static int child_work(double cpu_ms, const char *threads_before_exec)
{
    struct timespec ts;
    char line[96];
    int len, off = 0;

    wl_short_task(cpu_ms);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    len = snprintf(line, sizeof line, "child %ld cpu_ns=%lld%s%s\n", (long)getpid(),
                   (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec,
                   threads_before_exec ? " threads_before_exec=" : "",
                   threads_before_exec ? threads_before_exec : "");
    while (off < len) {
        ssize_t w = write(STDOUT_FILENO, line + off, (size_t)(len - off));

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 1;
        off += (int)w;
    }
    return 0;
}

enum how { HOW_FORK, HOW_EXEC, HOW_EXEC_THREADS, HOW_SPAWN };

/* The threads of this process (/proc/self/task), or -1. */
static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Starts one child; returns its pid, or -1 after saying why. */
static pid_t start_child(enum how how, const char *self, const char *cpu_ms)
{
    char threads[16];
    char *args[] = {(char *)self, "--child", (char *)cpu_ms, NULL, NULL};
    pid_t pid;
    int err;

    if (how == HOW_SPAWN) {
        err = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ);
        if (err) {
            fprintf(stderr, "wl-shortlived: posix_spawn: %s\n", strerror(err));
            return -1;
        }
        return pid;
    }
    pid = fork();
    if (pid < 0) {
        perror("wl-shortlived: fork");
        return -1;
    }
    if (pid == 0) {
        if (how == HOW_FORK)
            _exit(child_work(atof(cpu_ms), NULL));
        if (how == HOW_EXEC_THREADS) {
            (void)snprintf(threads, sizeof threads, "%d", count_threads());
            args[3] = threads;
        }
        execv("/proc/self/exe", args);
        perror("wl-shortlived: execv /proc/self/exe");
        _exit(127);
    }
    return pid;
}

/* Waits for one child; counts it in *failed unless it exited 0. With report set, says on
 * stdout `reaped PID cpu_ns=NS`: all the CPU the child used, all its threads and its exit
 * included (wait4's rusage). Returns 0, or -1 if there is none left. */
static int reap_one(int *failed, bool report)
{
    struct rusage ru;
    int status;
    pid_t pid;

    for (;;) {
        pid = wait4(-1, &status, 0, &ru);
        if (pid > 0)
            break;
        if (errno != EINTR)
            return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        (*failed)++;
    if (report)
        printf("reaped %ld cpu_ns=%lld\n", (long)pid,
               ((long long)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
                       ((long long)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
    if (report) /* one write per line, as the children's: lines never interleave */
        (void)fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    enum how how = HOW_FORK;
    int n, parallel, running = 0, failed = 0, start_failed = 0;
    bool report = getenv("WL_SHORTLIVED_REAPED") != NULL;

    if ((argc == 3 || argc == 4) && strcmp(argv[1], "--child") == 0)
        return child_work(atof(argv[2]), argc == 4 ? argv[3] : NULL);
    if (argc < 3 || argc > 5 || (n = atoi(argv[1])) <= 0)
        goto usage;
    if (argc >= 4) {
        if (strcmp(argv[3], "fork") == 0)
            how = HOW_FORK;
        else if (strcmp(argv[3], "exec") == 0)
            how = HOW_EXEC;
        else if (strcmp(argv[3], "exec-threads") == 0)
            how = HOW_EXEC_THREADS;
        else if (strcmp(argv[3], "spawn") == 0)
            how = HOW_SPAWN;
        else
            goto usage;
    }
    parallel = argc == 5 ? atoi(argv[4]) : n;
    if (parallel <= 0)
        goto usage;

    for (int i = 0; i < n; i++) {
        if (running == parallel && reap_one(&failed, report) == 0)
            running--;
        if (start_child(how, argv[0], argv[2]) < 0) {
            start_failed = 1;
            break;
        }
        running++;
    }
    while (reap_one(&failed, report) == 0)
        ;
    if (failed)
        fprintf(stderr, "wl-shortlived: %d children failed\n", failed);
    return failed || start_failed ? 1 : 0;

usage:
    fprintf(stderr, "usage: wl-shortlived N CPU_MS [fork|exec|exec-threads|spawn [PARALLEL]]\n");
    return 2;
}
