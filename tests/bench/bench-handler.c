/* tests/bench/bench-handler.c - time spent inside the sampling signal handler, per sample.
 *
 * Measures the real thing without changing it: the runtime times each capture itself (a
 * clock read at the handler's entry, which it makes anyway, and one at its exit) into a
 * histogram of 16 ns buckets, and writes the median and the 99th percentile into its
 * profile's log (profilingLog[pid].runtime.handlerP50Ns, handlerP99Ns, handlerCaptures).
 * This benchmark links the public libfleetprof, starts it with fleetprof_init(), lets the
 * runtime's own sampler signal a busy thread at 1 kHz, writes the profile with
 * fleetprof_write_profile() and reads those figures back. (It used to wrap the installed
 * SIGPROF handler with a timing one; the runtime now sees a replaced handler, as it must
 * for a program's raw rt_sigaction, and stops sampling.) So what is timed is exactly what a
 * profiled thread pays in user space per sample: the slot check, the label copy, the
 * timestamp and the stack capture (fp walk, libunwind's unw_backtrace, or the stack copy),
 * plus one clock read. Not included: the kernel's signal delivery and sigreturn (~10 us on
 * this VM, design.md "Cost model").
 *
 * The sampled thread spins at the bottom of a 30-deep recursion with 3 labels pushed. This
 * file is built with frame pointers, so the fp walk sees every frame as dwarf does.
 * One child process per stackwalk mode (the binary re-executes itself with
 * FLEETPROF_STACKWALK set), so a crash in one mode is reported and the others still run.
 *
 * Prints a table and BENCH lines child.handler_p50_ns_<mode> and child.handler_p99_ns_<mode>
 * for the modes dwarf, fp and copy. A mode that could not be measured prints why and makes
 * the benchmark exit 1. Measures, never asserts on time.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"

#define NOINLINE    __attribute__((noinline))
#define DEPTH       30
#define MAX_SAMPLES 100000
#define SECONDS     3.0

extern char **environ;

static atomic_int stop;
static volatile uint64_t sink;

NOINLINE void bh_spin(void);
NOINLINE void bh_spin(void)
{
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        for (int i = 0; i < 1000; i++)
            sink += (uint64_t)i * 0x9e3779b97f4a7c15u;
}

NOINLINE void bh_recurse(int depth);
NOINLINE void bh_recurse(int depth)
{
    if (depth % 10 == 0 && depth > 0) {
        FLEETPROF_LABEL("bh-level", FLEETPROF_CATEGORY_APP);
        bh_recurse(depth - 1);
    } else if (depth > 1) {
        bh_recurse(depth - 1);
    } else {
        bh_spin();
    }
    sink++; /* work after the call: never a tail call */
}

static void *busy_main(void *p)
{
    (void)p;
    (void)fleetprof_register_thread("bh-busy");
    bh_recurse(DEPTH);
    return NULL;
}

/* The number after "key": in text, or -1. */
static long long json_number(const char *text, const char *key)
{
    char pattern[64];
    const char *p;

    (void)snprintf(pattern, sizeof(pattern), "\"%s\":", key);
    p = strstr(text, pattern);
    return p ? strtoll(p + strlen(pattern), NULL, 10) : -1;
}

/* Child role: profile ourselves in the mode the environment says, print one result line. */
static int measure(void)
{
    struct timespec ts = {0, 0};
    char path[] = "/tmp/bench-handler-XXXXXX";
    static char text[1 << 20];
    long long captures, p50, p99;
    pthread_t busy;
    ssize_t n;
    int fd, r;

    r = fleetprof_init();
    if (r < 0) {
        fprintf(stderr, "bench-handler: fleetprof_init: %s\n", strerror(-r));
        return 1;
    }
    if (pthread_create(&busy, NULL, busy_main, NULL) != 0)
        return 1;
    ts.tv_sec = (time_t)SECONDS;
    ts.tv_nsec = (long)((SECONDS - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    atomic_store(&stop, 1);
    (void)pthread_join(busy, NULL);
    fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "bench-handler: mkstemp: %s\n", strerror(errno));
        return 1;
    }
    r = fleetprof_write_profile(path);
    if (r < 0) {
        fprintf(stderr, "bench-handler: fleetprof_write_profile: %s\n", strerror(-r));
        (void)unlink(path);
        return 1;
    }
    (void)close(fd);
    fd = open(path, O_RDONLY);
    n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
    if (fd >= 0)
        (void)close(fd);
    (void)unlink(path);
    if (n <= 0) {
        fprintf(stderr, "bench-handler: cannot read the profile back\n");
        return 1;
    }
    text[n] = '\0';
    captures = json_number(text, "handlerCaptures");
    p50 = json_number(text, "handlerP50Ns");
    p99 = json_number(text, "handlerP99Ns");
    if (captures < 100 || p50 <= 0 || p99 <= 0) {
        fprintf(stderr, "bench-handler: the profile timed %lld captures (p50 %lld, p99 %lld)\n",
                captures, p50, p99);
        return 1;
    }
    printf("RESULT %lld %lld %lld\n", captures, p50, p99);
    fleetprof_shutdown();
    return 0;
}

struct mode_result {
    const char *mode;
    int ok;
    unsigned samples, p50, p99;
    char why[160];
};

/* Runs this binary as a child in one mode and reads its RESULT line. */
static void run_mode(const char *self, struct mode_result *res)
{
    char env_mode[64], line[256];
    char *argv[] = {(char *)self, (char *)"--measure", NULL};
    char **envp;
    size_t envc = 0, k = 0;
    posix_spawn_file_actions_t fa;
    int pipefd[2], status;
    pid_t pid;
    FILE *f;

    res->ok = 0;
    (void)snprintf(env_mode, sizeof(env_mode), "FLEETPROF_STACKWALK=%s", res->mode);
    while (environ[envc])
        envc++;
    envp = calloc(envc + 3, sizeof(*envp));
    if (!envp || pipe(pipefd) < 0) {
        (void)snprintf(res->why, sizeof(res->why), "out of resources");
        free(envp);
        return;
    }
    for (size_t i = 0; i < envc; i++)
        if (strncmp(environ[i], "FLEETPROF_", 10) != 0 && strncmp(environ[i], "LD_PRELOAD=", 11))
            envp[k++] = environ[i];
    envp[k++] = env_mode;
    envp[k++] = (char *)"FLEETPROF_INTERVAL_MS=1";
    (void)posix_spawn_file_actions_init(&fa);
    (void)posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
    (void)posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    if (posix_spawn(&pid, self, &fa, NULL, argv, envp) != 0) {
        (void)snprintf(res->why, sizeof(res->why), "posix_spawn failed");
        (void)close(pipefd[0]);
        (void)close(pipefd[1]);
        (void)posix_spawn_file_actions_destroy(&fa);
        free(envp);
        return;
    }
    (void)posix_spawn_file_actions_destroy(&fa);
    free(envp);
    (void)close(pipefd[1]);
    f = fdopen(pipefd[0], "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "RESULT %u %u %u", &res->samples, &res->p50, &res->p99) == 3)
            res->ok = 1;
    if (f)
        (void)fclose(f);
    else
        (void)close(pipefd[0]);
    if (waitpid(pid, &status, 0) < 0) {
        res->ok = 0;
        (void)snprintf(res->why, sizeof(res->why), "waitpid failed");
    } else if (WIFSIGNALED(status)) {
        res->ok = 0;
        (void)snprintf(res->why, sizeof(res->why), "killed by signal %d (%s)", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) != 0 || !res->ok) {
        res->ok = 0;
        (void)snprintf(res->why, sizeof(res->why), "exit status %d, no result",
                       WEXITSTATUS(status));
    }
}

int main(int argc, char **argv)
{
    struct mode_result results[] = {{.mode = "dwarf"}, {.mode = "fp"}, {.mode = "copy"}};
    const size_t count = sizeof(results) / sizeof(results[0]);
    int failed = 0;

    if (argc > 1 && strcmp(argv[1], "--measure") == 0)
        return measure();

    for (size_t i = 0; i < count; i++)
        run_mode("/proc/self/exe", &results[i]);

    printf("signal handler time per sample (user space, entry to exit), busy thread at depth %d"
           " with 3 labels, 1 kHz for %.0f s\n",
           DEPTH, SECONDS);
    printf("%-10s %10s %10s %10s\n", "stackwalk", "captures", "p50 ns", "p99 ns");
    for (size_t i = 0; i < count; i++) {
        const struct mode_result *r = &results[i];

        if (r->ok)
            printf("%-10s %10u %10u %10u\n", r->mode, r->samples, r->p50, r->p99);
        else
            printf("%-10s FAILED: %s\n", r->mode, r->why);
    }
    printf("(16 ns buckets, each the bucket's middle; one clock read of the timing included)\n");
    for (size_t i = 0; i < count; i++) {
        const struct mode_result *r = &results[i];

        if (!r->ok) {
            failed = 1;
            continue;
        }
        printf("BENCH child.handler_p50_ns_%s %u ns\n", r->mode, r->p50);
        printf("BENCH child.handler_p99_ns_%s %u ns\n", r->mode, r->p99);
    }
    if (failed)
        fprintf(stderr, "bench-handler: not every stackwalk mode was measured (table above)\n");
    return failed;
}
