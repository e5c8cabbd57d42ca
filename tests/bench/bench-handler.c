/* tests/bench/bench-handler.c - time spent inside the sampling signal handler, per sample.
 *
 * Measures the real thing without changing the runtime: the benchmark links the public
 * libfleetprof, starts it with fleetprof_init(), then wraps the SIGPROF handler the runtime
 * installed with one that reads CLOCK_MONOTONIC, calls the runtime's handler, and reads the
 * clock again. The runtime keeps the program's own SIGPROF action aside (sigaction() and
 * signal() are interposed and return the program's action, never the runtime's handler), so
 * the installed handler is read, and the wrapper installed, with the raw rt_sigaction system
 * call: what the kernel runs on a SIGPROF. The runtime's own sampler thread sends the
 * signals at 1 kHz (tgkill: si_code SI_TKILL from our pid, which is how the handler tells a
 * sample from the program's own SIGPROF) through its capture-slot state machine; only those
 * signals are timed. So what is timed is exactly what a profiled thread pays in user space
 * per sample: the slot check, the label copy, the timestamp and the stack capture (fp walk,
 * libunwind's unw_backtrace, or the stack copy). Not included: the kernel's signal delivery
 * and sigreturn (~10 us on this VM, design.md "Cost model"). One bias: in dwarf mode
 * unw_backtrace starts in the handler and walks out through the signal frame, so the wrapper
 * is one more frame for it to unwind than without the benchmark (fp and copy start from the
 * interrupted context and do not see it).
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

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "struct bh_kernel_sigaction: check the kernel's layout on this architecture"
#endif

extern char **environ;

typedef void (*bh_sigaction_fn)(int, siginfo_t *, void *);

/* The kernel's struct sigaction as rt_sigaction reads and writes it on x86_64 and arm64 (not
 * glibc's: no padding mask of 1024 bits, the restorer after the flags). */
struct bh_kernel_sigaction {
    bh_sigaction_fn handler;
    unsigned long flags;
    void (*restorer)(void); /* libc's sigreturn trampoline (SA_RESTORER): kept as it is */
    uint64_t mask;
};

static bh_sigaction_fn runtime_handler; /* the handler the runtime installed, which we wrap */
static pid_t self_pid;
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

    runtime_handler(sig, info, ucontext);
    t1 = now_ns();
    /* Only the sampler's signals (tgkill from this process, as on_sample_signal tells them
     * apart) to the busy thread: the main thread sleeps and is rarely signalled. */
    if (info->si_code == SI_TKILL && info->si_pid == self_pid &&
        gettid() == atomic_load_explicit(&busy_tid, memory_order_relaxed)) {
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

/* Replaces the runtime's SIGPROF handler, as the kernel holds it, with timed_handler around
 * it. The raw system call, because the runtime's sigaction() answers with the program's own
 * action instead (child/preload.c). Returns 0, or -1 after saying why on stderr. */
static int wrap_runtime_handler(void)
{
    struct bh_kernel_sigaction installed, wrapped;

    memset(&installed, 0, sizeof(installed));
    if (syscall(SYS_rt_sigaction, SIGPROF, NULL, &installed, sizeof(installed.mask)) < 0) {
        fprintf(stderr, "bench-handler: rt_sigaction(SIGPROF) read: %s\n", strerror(errno));
        return -1;
    }
    if (!(installed.flags & SA_SIGINFO) || (uintptr_t)installed.handler <= (uintptr_t)SIG_IGN ||
        installed.handler == timed_handler) {
        fprintf(stderr,
                "bench-handler: the kernel holds no runtime SIGPROF handler (flags %#lx, "
                "handler %p)\n",
                installed.flags, (void *)(uintptr_t)installed.handler);
        return -1;
    }
    runtime_handler = installed.handler;
    wrapped = installed; /* same flags, mask and restorer: only the entry point differs */
    wrapped.handler = timed_handler;
    if (syscall(SYS_rt_sigaction, SIGPROF, &wrapped, NULL, sizeof(wrapped.mask)) < 0) {
        fprintf(stderr, "bench-handler: rt_sigaction(SIGPROF) write: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* Child role: profile ourselves in the mode the environment says, print one result line. */
static int measure(void)
{
    struct timespec ts = {0, 0};
    pthread_t busy;
    unsigned n;
    int r;

    r = fleetprof_init();
    if (r < 0) {
        fprintf(stderr, "bench-handler: fleetprof_init: %s\n", strerror(-r));
        return 1;
    }
    self_pid = getpid();
    if (wrap_runtime_handler() < 0)
        return 1;
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
    int failed = 0;

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
    for (size_t i = 0; i < count; i++) {
        if (results[i].ok) {
            printf("two clock reads around the handler cost about %llu ns (included above)\n",
                   results[i].timer_ns);
            break;
        }
    }
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
