/* tests/workloads/bench-fleet.c - fleets that do a FIXED amount of work, for the gathering and
 * whole-fleet overhead benchmark (tests/bench/bench-gather.py).
 *
 *   bench-fleet fleet N ROUNDS          master forks N workers; worker i does ROUNDS rounds of
 *                                       bf_work_<kind i%4> under bf_worker_main -> bf_descend
 *                                       x3; the master waits for all of them
 *   bench-fleet churn N PARALLEL ROUNDS [fork|spawn]
 *                                       master starts itself as `one ROUNDS` N times, at most
 *                                       PARALLEL at once, with fork+exec (default) or
 *                                       posix_spawn, and waits for all of them; a child killed
 *                                       by SIGPROF (a profiler bug) is started again
 *   bench-fleet one ROUNDS              one short-lived child: ROUNDS rounds in bf_child_task,
 *                                       then return from main
 *   bench-fleet fill MARKERS SECONDS    MARKERS markers "m <seq>" through fleetprof_marker
 *                                       (found with dlsym: preloaded), then sleeps SECONDS
 *                                       (SIGKILLed if its parent dies)
 *   bench-fleet spin SECONDS [DEPTH]    bf_recurse x DEPTH (10) -> bf_spin_leaf for SECONDS by
 *                                       the clock (the shape of `workload busy`), then prints
 *                                       "exit_call_ns=T cpu_s=C" (CLOCK_MONOTONIC ns and its
 *                                       own CPU just before exit()) and calls exit(0)
 *
 * With BENCH_FLEET_SIGNAL_FLOOR=MS in the environment, every worker and `one` child asks the
 * kernel for a signal each MS of its own CPU time (a perf_event task clock, delivered to the
 * thread) and counts it in a handler that does nothing else: the cost of the timer interrupt
 * and the signal alone, the floor under any in-process sampler that samples with a signal.
 *
 * The work is a count of rounds (one round is about a millisecond here), not a time: a
 * profiled run does the same work as an unprofiled one, so their CPU times compare. Every
 * process in the tree is waited for by its parent, so the CPU of the whole tree reaches the
 * benchmark through wait4/RUSAGE_CHILDREN. `fleet` and `churn` print one line when the work
 * is done: "bench-fleet work_wall_s=W" (churn adds " killed_by_sigprof=K tree_cpu_s=C", the
 * CPU of the master and the children it reaped). Built without
 * inlining or sibling calls (tests/workloads/meson.build), so every named function keeps its
 * frame.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE    __attribute__((noinline))
#define MAX_WORKERS 256
#define BF_DEPTH    3 /* bf_descend frames between bf_worker_main and the work */

extern char **environ;

static volatile uint64_t sink;

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the work: four kinds of rounds, each about 1 ms ------------------------------------ */

NOINLINE uint64_t bf_work_hash(long rounds);
NOINLINE uint64_t bf_work_hash(long rounds)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (long r = 0; r < rounds; r++)
        for (uint64_t i = 0; i < 1000000; i++) {
            h ^= i & 0xff;
            h *= 0x100000001b3ull;
        }
    return h;
}

NOINLINE uint64_t bf_work_mix(long rounds);
NOINLINE uint64_t bf_work_mix(long rounds)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;

    for (long r = 0; r < rounds; r++)
        for (long i = 0; i < 680000; i++) {
            h ^= h >> 29;
            h *= 0xbf58476d1ce4e5b9ull;
            h += (uint64_t)i;
        }
    return h;
}

NOINLINE uint64_t bf_work_parse(long rounds);
NOINLINE uint64_t bf_work_parse(long rounds)
{
    static const char text[] = "1234 5678 91011 1213 1415 161718 1920 2122 232425 2627 ";
    uint64_t total = 0;

    for (long r = 0; r < rounds; r++)
        for (int k = 0; k < 33000; k++) {
            uint64_t v = 0;

            for (const volatile char *p = text; *p; p++) {
                if (*p >= '0' && *p <= '9') {
                    v = v * 10 + (uint64_t)(*p - '0');
                } else {
                    total += v;
                    v = 0;
                }
            }
        }
    return total;
}

NOINLINE uint64_t bf_work_render(long rounds);
NOINLINE uint64_t bf_work_render(long rounds)
{
    double acc = 0;

    for (long r = 0; r < rounds; r++)
        for (int y = 0; y < 360; y++)
            for (int x = 0; x < 2560; x++) {
                double fx = x / 2560.0 - 0.5, fy = y / 360.0 - 0.5 + (double)(r & 1) * 1e-9;

                acc += fx * fx + fy * fy < 0.2 ? fx * fy : 0.1;
            }
    return (uint64_t)(acc * 1000.0);
}

typedef uint64_t (*bf_work_fn)(long rounds);
static const bf_work_fn kinds[] = {bf_work_hash, bf_work_mix, bf_work_parse, bf_work_render};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

NOINLINE uint64_t bf_descend(int depth, bf_work_fn fn, long rounds);
NOINLINE uint64_t bf_descend(int depth, bf_work_fn fn, long rounds)
{
    uint64_t r;

    if (depth <= 1)
        r = fn(rounds);
    else
        r = bf_descend(depth - 1, fn, rounds);
    sink++; /* work after the call: never a tail call */
    return r;
}

/* Ten rounds at a time, so that the stack below the work changes now and then. */
NOINLINE uint64_t bf_worker_main(int index, long rounds);
NOINLINE uint64_t bf_worker_main(int index, long rounds)
{
    bf_work_fn fn = kinds[(size_t)index % N_KINDS];
    uint64_t acc = 0;

    for (long done = 0; done < rounds; done += 10)
        acc += bf_descend(BF_DEPTH, fn, rounds - done < 10 ? rounds - done : 10);
    return acc;
}

NOINLINE uint64_t bf_child_task(long rounds);
NOINLINE uint64_t bf_child_task(long rounds)
{
    uint64_t r = bf_descend(BF_DEPTH, bf_work_hash, rounds / 2);

    return r + bf_descend(BF_DEPTH, bf_work_mix, rounds - rounds / 2);
}

/* ---- the spin (exit profile cost) -------------------------------------------------------- */

NOINLINE void bf_spin_leaf(double until);
NOINLINE void bf_spin_leaf(double until)
{
    while (now_s() < until)
        for (int i = 0; i < 10000; i++)
            sink += (uint64_t)i * 2654435761u;
}

NOINLINE void bf_recurse(int depth, double until);
NOINLINE void bf_recurse(int depth, double until)
{
    if (depth <= 1)
        bf_spin_leaf(until);
    else
        bf_recurse(depth - 1, until);
    sink++;
}

/* ---- the signal floor ------------------------------------------------------------------- */

static volatile sig_atomic_t floor_signals;

static void bf_floor_signal(int sig)
{
    (void)sig;
    floor_signals++;
}

/* Arms the floor's signal on the calling thread when BENCH_FLEET_SIGNAL_FLOOR is set. Exits
 * with status 3 when the kernel refuses: a floor that silently did nothing would read as a
 * free sampler. */
static void arm_signal_floor(void)
{
    const char *ms = getenv("BENCH_FLEET_SIGNAL_FLOOR");
    struct perf_event_attr attr;
    struct f_owner_ex owner;
    struct sigaction sa;
    int fd;

    if (!ms || atof(ms) <= 0)
        return;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = bf_floor_signal;
    sa.sa_flags = SA_RESTART;
    (void)sigemptyset(&sa.sa_mask);
    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = (uint64_t)(atof(ms) * 1e6);
    attr.wakeup_events = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    owner.type = F_OWNER_TID;
    owner.pid = (pid_t)syscall(SYS_gettid);
    fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0 || sigaction(SIGRTMIN + 4, &sa, NULL) < 0 || fcntl(fd, F_SETSIG, SIGRTMIN + 4) < 0 ||
        fcntl(fd, F_SETOWN_EX, &owner) < 0 || fcntl(fd, F_SETFL, O_ASYNC) < 0) {
        fprintf(stderr, "bench-fleet: BENCH_FLEET_SIGNAL_FLOOR: %s\n", strerror(errno));
        exit(3);
    }
}

/* ---- modes ------------------------------------------------------------------------------- */

/* One line per child that did not exit with status 0: a benchmark run with a failure is
 * reported as failed, and this says why. */
static void report_failure(pid_t pid, int status)
{
    if (WIFSIGNALED(status))
        fprintf(stderr, "bench-fleet: child %d killed by signal %d%s\n", (int)pid, WTERMSIG(status),
                WCOREDUMP(status) ? " (core dumped)" : "");
    else
        fprintf(stderr, "bench-fleet: child %d exited with status %d\n", (int)pid,
                WEXITSTATUS(status));
}

static int wait_all(void)
{
    int status, failed = 0;

    for (;;) {
        pid_t pid = wait(&status);

        if (pid < 0) {
            if (errno == EINTR)
                continue;
            return failed; /* ECHILD: all reaped */
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            report_failure(pid, status);
            failed++;
        }
    }
}

static int run_fleet(int n, long rounds)
{
    double t0 = now_s();
    int failed;

    for (int i = 0; i < n; i++) {
        pid_t pid;

        (void)fflush(NULL);
        pid = fork();
        if (pid < 0) {
            perror("bench-fleet: fork");
            (void)wait_all();
            return 1;
        }
        if (pid == 0) {
            arm_signal_floor();
            sink += bf_worker_main(i, rounds);
            exit(0); /* the normal exit path: atexit handlers run */
        }
    }
    failed = wait_all();
    printf("bench-fleet work_wall_s=%.6f\n", now_s() - t0);
    (void)fflush(stdout);
    if (failed)
        fprintf(stderr, "bench-fleet: %d workers failed\n", failed);
    return failed ? 1 : 0;
}

/* CPU (user + system) of this process and of every child it reaped: the work's whole tree,
 * without whatever profiles it from outside (a daemon, `fleetprof record`). */
static double tree_cpu_s(void)
{
    struct rusage self, children;

    (void)getrusage(RUSAGE_SELF, &self);
    (void)getrusage(RUSAGE_CHILDREN, &children);
    return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + children.ru_utime.tv_sec +
                    children.ru_stime.tv_sec) +
           (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + children.ru_utime.tv_usec +
                    children.ru_stime.tv_usec) /
                   1e6;
}

/* Starts `self one ROUNDS` with fork+exec, or with posix_spawn (glibc: clone(CLONE_VFORK),
 * no fork handlers, so a preloaded runtime does not restart in between). Returns its pid or
 * -1 with errno set. */
static pid_t start_child(const char *self, const char *rounds, bool spawn)
{
    char *const args[] = {(char *)"bench-fleet-child", (char *)"one", (char *)rounds, NULL};
    pid_t pid;

    if (spawn) {
        int r = posix_spawn(&pid, self, NULL, NULL, args, environ);

        if (r != 0) {
            errno = r;
            return -1;
        }
        return pid;
    }
    (void)fflush(NULL);
    pid = fork();
    if (pid == 0) {
        (void)execv(self, args);
        _exit(127);
    }
    return pid;
}

static int run_churn(const char *self, int n, int parallel, const char *rounds, bool spawn)
{
    double t0 = now_s();
    int started = 0, finished = 0, running = 0, failed = 0, sigprof = 0, status;

    while (finished < n) {
        pid_t pid;

        while (running < parallel && started < n) {
            if (start_child(self, rounds, spawn) < 0) {
                perror("bench-fleet: starting a child");
                failed += n - started;
                n = started;
                break;
            }
            running++;
            started++;
        }
        if (running == 0)
            break;
        pid = wait(&status);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        running--;
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPROF && sigprof < n) {
            /* Killed by the profiler's sampling signal before the new image's runtime
             * installed its handler (a SIGPROF sent to the forked child while it was in
             * execve stays pending across exec, where its default action kills). Do that
             * share of the work again, so that every run does the same work; the count is
             * reported. */
            sigprof++;
            started--;
            continue;
        }
        finished++;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            report_failure(pid, status);
            failed++;
        }
    }
    failed += wait_all();
    printf("bench-fleet work_wall_s=%.6f killed_by_sigprof=%d tree_cpu_s=%.6f\n", now_s() - t0,
           sigprof, tree_cpu_s());
    (void)fflush(stdout);
    if (failed)
        fprintf(stderr, "bench-fleet: %d children failed\n", failed);
    return failed ? 1 : 0;
}

typedef void (*marker_fn)(const char *name, int category, const char *text);

static int run_fill(long markers, double seconds)
{
    marker_fn marker;
    char text[32];
    struct timespec ts;

    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    *(void **)&marker = dlsym(RTLD_DEFAULT, "fleetprof_marker");
    if (!marker) {
        fprintf(stderr, "bench-fleet: fleetprof_marker not found (is libfleetprof preloaded?)\n");
        return 1;
    }
    for (long seq = 0; seq < markers; seq++) {
        (void)snprintf(text, sizeof(text), "m %ld", seq);
        marker("flood", 7, text);
    }
    printf("filled %ld\n", markers);
    (void)fflush(stdout);
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    /* A signal (the profiler's first sample) may interrupt the sleep: finish it. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return 0;
}

static int run_spin(double seconds, int depth)
{
    struct timespec ts;
    struct rusage ru;

    bf_recurse(depth, now_s() + seconds);
    (void)getrusage(RUSAGE_SELF, &ru);
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("exit_call_ns=%lld cpu_s=%.6f\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec,
           (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                   (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
    (void)fflush(stdout);
    exit(0);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: bench-fleet fleet N ROUNDS | churn N PARALLEL ROUNDS [fork|spawn] |\n"
            "                   one ROUNDS | fill MARKERS SECONDS | spin SECONDS [DEPTH]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    char self[4096];
    ssize_t n;

    if (!strcmp(mode, "fleet") && argc == 4) {
        int workers = atoi(argv[2]);
        long rounds = atol(argv[3]);

        if (workers < 1 || workers > MAX_WORKERS || rounds < 1)
            return usage();
        return run_fleet(workers, rounds);
    }
    if (!strcmp(mode, "churn") && (argc == 5 || argc == 6)) {
        int children = atoi(argv[2]), parallel = atoi(argv[3]);

        if (children < 1 || parallel < 1 || atol(argv[4]) < 1)
            return usage();
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n < 0) {
            perror("bench-fleet: /proc/self/exe");
            return 1;
        }
        self[n] = '\0';
        if (argc == 6 && strcmp(argv[5], "fork") && strcmp(argv[5], "spawn"))
            return usage();
        return run_churn(self, children, parallel, argv[4], argc == 6 && !strcmp(argv[5], "spawn"));
    }
    if (!strcmp(mode, "one") && argc == 3) {
        arm_signal_floor();
        sink += bf_child_task(atol(argv[2]));
        return 0;
    }
    if (!strcmp(mode, "fill") && argc == 4)
        return run_fill(atol(argv[2]), atof(argv[3]));
    if (!strcmp(mode, "spin") && (argc == 3 || argc == 4))
        return run_spin(atof(argv[2]), argc == 4 ? atoi(argv[3]) : 10);
    return usage();
}
