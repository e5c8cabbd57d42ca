/* tools/demo/demo-fleet.c - a small fleet with recognisable stacks, to try fleetprof on.
 *
 *   demo-fleet [--workers N] [--helpers-per-sec R] [--seconds S] [--hang-worker K]
 *
 * The master forks N workers, each burning CPU in its own function (demo_worker_compress,
 * demo_worker_hash, demo_worker_parse, demo_worker_render, cycling for N > 4) below a fixed
 * call chain: main -> demo_worker_main -> demo_descend x3 -> demo_worker_<kind>. Meanwhile it
 * starts R short-lived helpers a second, alternately fork+exec of itself with --helper (a
 * burst in demo_helper_task, then return from main) and fork-only (a burst in
 * demo_forked_helper, then _exit(0)). After S seconds it sends SIGTERM (and SIGCONT, for a
 * stopped worker) to the workers, which return from main normally so that every exit path
 * runs, and waits for all children. --hang-worker K makes worker K SIGSTOP itself after 1 s.
 *
 * Each worker serves requests, one fleetprof event each, timed by performance groups (their
 * CPU costs differ by construction): "search" (1 ms of CPU), "checkout" (3 ms, then calls
 * "auth" for 1 ms inside it: both are charged), and every 40th request (from the third on) a
 * "report" of 20 ms, over the default 16 ms slow-event threshold. The master's tick is a group of
 * its own, "housekeeping", timed with no event open (an implicit event). Request costs are thread
 * CPU time, so they hold on a loaded machine.
 *
 * It does not link fleetprof: the group API is declared weak, so it is live when the
 * library is preloaded (LD_PRELOAD=libfleetprof.so or `fleetprof record`) and skipped
 * otherwise. Built without inlining or sibling calls (tools/demo/meson.build), so every
 * function named here keeps its frame.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child/include/fleetprof.h"

/* Weak: NULL unless libfleetprof is loaded (preloaded by `fleetprof record`). A NULL group
 * makes the header's stopwatch functions do nothing, so only these need a test. */
#pragma weak fleetprof_group_get
#pragma weak fleetprof_event_begin
#pragma weak fleetprof_event_end
#pragma weak fleetprof__stopwatch_start
#pragma weak fleetprof__stopwatch_stop

#define NOINLINE __attribute__((noinline))

#define DEMO_DEPTH        3    /* demo_descend frames between demo_worker_main and the work */
#define HELPER_BURST_S    0.03 /* CPU burst of one helper */
#define HANG_AFTER_S      1.0  /* --hang-worker: SIGSTOP after this long */
#define WORKER_BACKSTOP_S 30.0 /* a worker ends this long after --seconds whatever happens */
#define STOP_GRACE_S      10.0 /* after SIGTERM, SIGKILL workers still alive this long after */
#define MAX_WORKERS       256
#define SEARCH_CPU_S      0.001 /* performance groups: CPU per request of each type */
#define CHECKOUT_CPU_S    0.003
#define AUTH_CPU_S        0.001
#define REPORT_CPU_S      0.020
#define REPORT_EVERY      40 /* requests */

static volatile uint64_t sink;
static volatile sig_atomic_t stop_requested;

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts;

    if (s <= 0)
        return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !stop_requested)
        ;
}

/* The calling thread's CPU time: what a worker's request costs. */
static double cpu_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static fleetprof_group *group(const char *name)
{
    return fleetprof_group_get ? fleetprof_group_get(name) : NULL;
}

static void event_begin(void)
{
    if (fleetprof_event_begin)
        fleetprof_event_begin();
}

static void event_end(void)
{
    if (fleetprof_event_end)
        fleetprof_event_end();
}

/* The work, until the thread's CPU clock reaches until. Each loop runs a few hundred
 * microseconds between clock reads, so nearly every sample lands in the function itself. */

void demo_worker_compress(double until);
NOINLINE void demo_worker_compress(double until)
{
    unsigned char block[4096];

    while (!stop_requested && cpu_s() < until) {
        for (int round = 0; round < 64; round++) {
            size_t runs = 0;

            for (size_t i = 0; i < sizeof(block); i++)
                block[i] = (unsigned char)((i * 7 + (size_t)round) >> 3);
            for (size_t i = 1; i < sizeof(block); i++)
                runs += block[i] != block[i - 1];
            sink += runs;
        }
    }
}

void demo_worker_hash(double until);
NOINLINE void demo_worker_hash(double until)
{
    while (!stop_requested && cpu_s() < until) {
        uint64_t h = 0xcbf29ce484222325ull;

        for (uint64_t i = 0; i < 200000; i++) {
            h ^= i & 0xff;
            h *= 0x100000001b3ull;
        }
        sink += h;
    }
}

void demo_worker_parse(double until);
NOINLINE void demo_worker_parse(double until)
{
    static const char text[] = "1234 5678 91011 1213 1415 161718 1920 2122 232425 2627 ";

    while (!stop_requested && cpu_s() < until) {
        uint64_t total = 0;

        for (int round = 0; round < 4000; round++) {
            uint64_t v = 0;

            for (const char *p = text; *p; p++) {
                if (*p >= '0' && *p <= '9') {
                    v = v * 10 + (uint64_t)(*p - '0');
                } else {
                    total += v;
                    v = 0;
                }
            }
        }
        sink += total;
    }
}

void demo_worker_render(double until);
NOINLINE void demo_worker_render(double until)
{
    while (!stop_requested && cpu_s() < until) {
        double acc = 0;

        for (int y = 0; y < 120; y++)
            for (int x = 0; x < 160; x++) {
                double fx = x / 160.0 - 0.5, fy = y / 120.0 - 0.5;

                acc += fx * fx + fy * fy < 0.2 ? fx * fy : 0.1;
            }
        sink += (uint64_t)(acc * 1000.0);
    }
}

typedef void (*demo_work_fn)(double until);

static const struct {
    const char *name;
    demo_work_fn fn;
} kinds[] = {
        {"demo_worker_compress", demo_worker_compress},
        {"demo_worker_hash", demo_worker_hash},
        {"demo_worker_parse", demo_worker_parse},
        {"demo_worker_render", demo_worker_render},
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

void demo_descend(int depth, demo_work_fn fn, double until);
NOINLINE void demo_descend(int depth, demo_work_fn fn, double until)
{
    if (depth <= 1)
        fn(until);
    else
        demo_descend(depth - 1, fn, until);
    sink++; /* work after the call: never a tail call */
}

static void on_sigterm(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* One request: its type's CPU cost in the worker's own function, timed by its group. */
static void serve(fleetprof_group *g, demo_work_fn fn, double cost_s, fleetprof_group *callee,
                  double callee_cost_s)
{
    FLEETPROF_GROUP(g);

    demo_descend(DEMO_DEPTH, fn, cpu_s() + cost_s);
    if (callee) {
        /* A calls B: the caller's stopwatch keeps running, both groups are charged. */
        FLEETPROF_GROUP(callee);

        demo_descend(DEMO_DEPTH, fn, cpu_s() + callee_cost_s);
    }
}

int demo_worker_main(int index, double until, double hang_at);
NOINLINE int demo_worker_main(int index, double until, double hang_at)
{
    demo_work_fn fn = kinds[(size_t)index % N_KINDS].fn;
    fleetprof_group *search = group("search"), *checkout = group("checkout");
    fleetprof_group *auth = group("auth"), *report = group("report");

    for (unsigned request = 0; !stop_requested && now_s() < until; request++) {
        if (hang_at > 0 && now_s() >= hang_at) {
            hang_at = 0;
            (void)raise(SIGSTOP);
        }
        event_begin();
        if (request % REPORT_EVERY == 2) /* early, so that even a short run has one */
            serve(report, fn, REPORT_CPU_S, NULL, 0);
        else if (request % 3 == 0)
            serve(checkout, fn, CHECKOUT_CPU_S, auth, AUTH_CPU_S);
        else
            serve(search, fn, SEARCH_CPU_S, NULL, 0);
        event_end();
    }
    return 0;
}

/* Helpers: a short burst each. */

void demo_helper_burn(double until);
NOINLINE void demo_helper_burn(double until)
{
    while (now_s() < until)
        for (int i = 0; i < 20000; i++)
            sink += (uint64_t)i * 2654435761u;
}

int demo_helper_task(void);
NOINLINE int demo_helper_task(void)
{
    demo_helper_burn(now_s() + HELPER_BURST_S);
    sink++;
    return 0;
}

void demo_forked_helper(void);
NOINLINE void demo_forked_helper(void)
{
    demo_helper_burn(now_s() + HELPER_BURST_S);
    sink++;
}

/* The master's own bit of work between spawns, so its profile is not only sleep. Timed
 * with no event open: the stopwatch's span is an event of its own. */
void demo_master_tick(fleetprof_group *housekeeping);
NOINLINE void demo_master_tick(fleetprof_group *housekeeping)
{
    FLEETPROF_GROUP(housekeeping);

    demo_helper_burn(now_s() + 0.002);
    sink++;
}

struct options {
    int workers;
    double helpers_per_sec;
    double seconds;
    int hang_worker; /* -1: none */
};

static void usage(FILE *out)
{
    (void)fprintf(
            out,
            "Usage: demo-fleet [--workers N] [--helpers-per-sec R] [--seconds S] [--hang-worker K]\n"
            "A master, N CPU-bound workers (demo_worker_compress, _hash, _parse, _render,\n"
            "cycling) and R short-lived helpers a second (alternately fork+exec and fork-only).\n"
            "Workers serve search, checkout (calling auth) and report requests, timed by\n"
            "fleetprof performance groups when libfleetprof is preloaded.\n"
            "  --workers N          workers to fork (default 4, at most %d)\n"
            "  --helpers-per-sec R  helpers started per second (default 5; 0: none)\n"
            "  --seconds S          how long the fleet runs (default 5)\n"
            "  --hang-worker K      worker K (0-based) stops itself with SIGSTOP after 1 s\n"
            "  --helper             internal: run one helper burst and exit\n",
            MAX_WORKERS);
}

static int parse_number(const char *opt, const char *arg, double lo, double hi, double *ret)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (errno || end == arg || *end || v < lo || v > hi) {
        (void)fprintf(stderr, "demo-fleet: %s wants a number from %g to %g, not '%s'\n", opt, lo,
                      hi, arg);
        return -EINVAL;
    }
    *ret = v;
    return 0;
}

/* Returns 0 to run, 1 to exit successfully (--help), 2 for a usage error, 3 for --helper. */
static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
            {"workers", required_argument, NULL, 'w'},
            {"helpers-per-sec", required_argument, NULL, 'r'},
            {"seconds", required_argument, NULL, 's'},
            {"hang-worker", required_argument, NULL, 'k'},
            {"helper", no_argument, NULL, 'H'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    double v;
    int c;

    o->workers = 4;
    o->helpers_per_sec = 5;
    o->seconds = 5;
    o->hang_worker = -1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if (parse_number("--workers", optarg, 0, MAX_WORKERS, &v) < 0)
                return 2;
            o->workers = (int)v;
            break;
        case 'r':
            if (parse_number("--helpers-per-sec", optarg, 0, 1000, &v) < 0)
                return 2;
            o->helpers_per_sec = v;
            break;
        case 's':
            if (parse_number("--seconds", optarg, 0, 86400, &o->seconds) < 0)
                return 2;
            break;
        case 'k':
            if (parse_number("--hang-worker", optarg, 0, MAX_WORKERS - 1, &v) < 0)
                return 2;
            o->hang_worker = (int)v;
            break;
        case 'H':
            return 3;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        (void)fprintf(stderr, "demo-fleet: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (o->hang_worker >= o->workers && o->hang_worker >= 0) {
        (void)fprintf(stderr, "demo-fleet: --hang-worker %d but only %d workers\n", o->hang_worker,
                      o->workers);
        return 2;
    }
    return 0;
}

/* Forks worker index; returns its pid in the master, never returns in the worker (which
 * leaves through main's return, via *ret_worker_status). */
static pid_t start_worker(int index, const struct options *o, double start, int *ret_exit)
{
    pid_t master = getpid(), pid;
    struct sigaction sa;

    (void)fflush(NULL);
    pid = fork();
    if (pid != 0)
        return pid;
    /* The worker. If the master dies, so do we: SIGTERM, which we turn into a normal exit. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigterm;
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != master)
        stop_requested = 1;
    *ret_exit = demo_worker_main(index, start + o->seconds + WORKER_BACKSTOP_S,
                                 index == o->hang_worker ? start + HANG_AFTER_S : 0);
    return 0;
}

static void start_helper(const char *self, bool exec_it, unsigned *exec_count, unsigned *fork_count)
{
    pid_t pid;

    (void)fflush(NULL);
    pid = fork();
    if (pid < 0) {
        (void)fprintf(stderr, "demo-fleet: fork: %s\n", strerror(errno));
        return;
    }
    if (pid > 0) {
        (*(exec_it ? exec_count : fork_count))++;
        return;
    }
    if (exec_it) {
        /* A name of its own: profilers name processes after argv[0]. */
        char *const args[] = {(char *)"demo-fleet-helper", (char *)"--helper", NULL};

        (void)execv(self, args);
        _exit(127);
    }
    demo_forked_helper();
    _exit(0);
}

int main(int argc, char **argv)
{
    static pid_t workers[MAX_WORKERS];
    fleetprof_group *housekeeping;
    struct options o;
    char self[4096];
    ssize_t n;
    double start, deadline, next_helper, period;
    unsigned exec_count = 0, fork_count = 0;
    int r, worker_exit = 0, alive;
    bool exec_next = true;

    r = parse_args(argc, argv, &o);
    if (r == 3)
        return demo_helper_task();
    if (r)
        return r == 1 ? 0 : 2;
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0) {
        (void)fprintf(stderr, "demo-fleet: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    self[n] = '\0';

    housekeeping = group("housekeeping");
    start = now_s();
    deadline = start + o.seconds;
    (void)printf("demo-fleet: master %d\n", (int)getpid());
    for (int k = 0; k < o.workers; k++) {
        workers[k] = start_worker(k, &o, start, &worker_exit);
        if (workers[k] == 0)
            return worker_exit; /* in the worker: its normal exit path */
        if (workers[k] < 0) {
            (void)fprintf(stderr, "demo-fleet: fork: %s\n", strerror(errno));
            o.workers = k;
            break;
        }
        (void)printf("demo-fleet: worker %d pid %d runs %s%s\n", k, (int)workers[k],
                     kinds[(size_t)k % N_KINDS].name,
                     k == o.hang_worker ? " (will hang after 1 s)" : "");
    }
    (void)fflush(stdout);

    period = o.helpers_per_sec > 0 ? 1.0 / o.helpers_per_sec : 0;
    next_helper = start + period / 2; /* R helpers in each second, not R - 1 */
    while (now_s() < deadline) {
        double wake = period > 0 && next_helper < deadline ? next_helper : deadline;

        demo_master_tick(housekeeping);
        sleep_s(wake - now_s());
        if (period > 0 && now_s() >= next_helper && next_helper < deadline) {
            start_helper(self, exec_next, &exec_count, &fork_count);
            exec_next = !exec_next;
            next_helper += period;
        }
        while (waitpid(-1, NULL, WNOHANG) > 0) /* reap helpers as they end */
            ;
    }

    /* Stop the workers; SIGCONT wakes one stopped by --hang-worker so it can see SIGTERM. */
    for (int k = 0; k < o.workers; k++) {
        (void)kill(workers[k], SIGTERM);
        (void)kill(workers[k], SIGCONT);
    }
    deadline = now_s() + STOP_GRACE_S;
    do {
        pid_t pid;

        alive = 0;
        while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
            for (int k = 0; k < o.workers; k++)
                if (workers[k] == pid)
                    workers[k] = -1;
        for (int k = 0; k < o.workers; k++)
            alive += workers[k] > 0;
        if (alive && now_s() > deadline) {
            (void)fprintf(stderr, "demo-fleet: %d workers ignored SIGTERM; killing them\n", alive);
            for (int k = 0; k < o.workers; k++)
                if (workers[k] > 0)
                    (void)kill(workers[k], SIGKILL);
            deadline = now_s() + STOP_GRACE_S;
        }
        if (alive)
            sleep_s(0.01);
    } while (alive);
    while (waitpid(-1, NULL, 0) > 0) /* helpers still running */
        ;
    (void)printf("demo-fleet: done after %.1f s: %d workers, %u helpers (%u fork+exec, %u fork)\n",
                 now_s() - start, o.workers, exec_count + fork_count, exec_count, fork_count);
    return 0;
}
