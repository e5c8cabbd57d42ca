/* tests/bench/bench-handler.c - time spent inside the sampling signal handler, per sample.
 *
 * Measures the real thing without changing the runtime: the benchmark links the public
 * libfleetprof, starts it with fleetprof_init(), then wraps the SIGPROF handler the runtime
 * installed (sigaction returns it) with one that reads CLOCK_MONOTONIC, calls the runtime's
 * handler, and reads the clock again. The runtime's own sampler thread sends the signals at
 * 1 kHz through its capture-slot state machine, so what is timed is exactly what a profiled
 * thread pays in user space per sample: the slot check, the label copy, the timestamp and
 * the stack capture (fp walk, libunwind's unw_backtrace, or the stack copy). Not included:
 * the kernel's signal delivery and sigreturn (~10 us on this VM, design.md "Cost model").
 *
 * The sampled thread spins at the bottom of a 30-deep recursion with 3 labels pushed. This
 * file is built with frame pointers, so the fp walk sees every frame as dwarf does.
 * One child process per stackwalk mode (the binary re-executes itself with
 * FLEETPROF_STACKWALK set), so a crash in one mode is reported and the others still run.
 *
 * Prints a table and BENCH lines: child.handler_p50_ns / child.handler_p99_ns (dwarf),
 * child.handler_fp_p50_ns / _p99_ns, child.handler_copy_p50_ns / _p99_ns. Measures, never
 * asserts on time.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"

#define NOINLINE    __attribute__((noinline))
#define DEPTH       30
#define MAX_SAMPLES 100000
#define SECONDS     3.0

extern char **environ;

static struct sigaction runtime_action; /* the runtime's handler, which we wrap */
static uint32_t durations_ns[MAX_SAMPLES];
static atomic_uint sample_count;
static atomic_int busy_tid;
static atomic_int stop;
static volatile uint64_t sink;

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void timed_handler(int sig, siginfo_t *info, void *ucontext)
{
    uint64_t t0 = now_ns(), t1;

    runtime_action.sa_sigaction(sig, info, ucontext);
    t1 = now_ns();
    /* Only the busy thread's samples: the main thread sleeps and is rarely signalled. */
    if (gettid() == atomic_load_explicit(&busy_tid, memory_order_relaxed)) {
        unsigned n = atomic_fetch_add_explicit(&sample_count, 1, memory_order_relaxed);

        if (n < MAX_SAMPLES)
            durations_ns[n] = (uint32_t)(t1 - t0 > UINT32_MAX ? UINT32_MAX : t1 - t0);
    }
}

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
    atomic_store(&busy_tid, (int)gettid());
    bh_recurse(DEPTH);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

/* The cost of the two clock reads around the handler, to read the figures against. */
static uint64_t timer_overhead_ns(void)
{
    uint64_t best = UINT64_MAX;

    for (int i = 0; i < 10000; i++) {
        uint64_t t0 = now_ns(), t1 = now_ns();

        if (t1 - t0 < best)
            best = t1 - t0;
    }
    return best;
}

/* Child role: profile ourselves in the mode the environment says, print one result line. */
static int measure(void)
{
    struct sigaction sa;
    struct timespec ts = {0, 0};
    pthread_t busy;
    unsigned n;
    int r;

    r = fleetprof_init();
    if (r < 0) {
        fprintf(stderr, "bench-handler: fleetprof_init: %s\n", strerror(-r));
        return 1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = timed_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    (void)sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, &runtime_action) < 0 || !(runtime_action.sa_flags & SA_SIGINFO) ||
        !runtime_action.sa_sigaction) {
        fprintf(stderr, "bench-handler: the runtime installed no SIGPROF handler\n");
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
    fleetprof_shutdown();

    n = atomic_load(&sample_count);
    if (n > MAX_SAMPLES)
        n = MAX_SAMPLES;
    if (n < 100) {
        fprintf(stderr, "bench-handler: only %u samples of the busy thread\n", n);
        return 1;
    }
    qsort(durations_ns, n, sizeof(durations_ns[0]), cmp_u32);
    printf("RESULT %u %u %u %u %u %llu\n", n, durations_ns[n / 2], durations_ns[n * 99 / 100],
           durations_ns[0], durations_ns[n - 1], (unsigned long long)timer_overhead_ns());
    return 0;
}

struct mode_result {
    const char *mode;
    int ok;
    unsigned samples, p50, p99, min, max;
    unsigned long long timer_ns;
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
        if (sscanf(line, "RESULT %u %u %u %u %u %llu", &res->samples, &res->p50, &res->p99,
                   &res->min, &res->max, &res->timer_ns) == 6)
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

    if (argc > 1 && strcmp(argv[1], "--measure") == 0)
        return measure();

    for (size_t i = 0; i < count; i++)
        run_mode("/proc/self/exe", &results[i]);

    printf("signal handler time per sample (user space, entry to exit), busy thread at depth %d"
           " with 3 labels, 1 kHz for %.0f s\n",
           DEPTH, SECONDS);
    printf("%-10s %10s %10s %10s %10s %10s\n", "stackwalk", "samples", "p50 ns", "p99 ns", "min ns",
           "max ns");
    for (size_t i = 0; i < count; i++) {
        const struct mode_result *r = &results[i];

        if (r->ok)
            printf("%-10s %10u %10u %10u %10u %10u\n", r->mode, r->samples, r->p50, r->p99, r->min,
                   r->max);
        else
            printf("%-10s FAILED: %s\n", r->mode, r->why);
    }
    if (results[0].ok)
        printf("two clock reads around the handler cost about %llu ns (included above)\n",
               results[0].timer_ns);
    for (size_t i = 0; i < count; i++) {
        const struct mode_result *r = &results[i];
        const char *infix = i == 0 ? "" : r->mode;
        const char *sep = i == 0 ? "" : "_";

        if (r->ok) {
            printf("BENCH child.handler%s%s_p50_ns %u ns\n", sep, infix, r->p50);
            printf("BENCH child.handler%s%s_p99_ns %u ns\n", sep, infix, r->p99);
        } else {
            printf("BENCH child.handler%s%s_p50_ns nan ns\n", sep, infix);
            printf("BENCH child.handler%s%s_p99_ns nan ns\n", sep, infix);
        }
    }
    return results[0].ok && results[1].ok ? 0 : 1;
}
