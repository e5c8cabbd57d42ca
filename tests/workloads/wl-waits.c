/* tests/workloads/wl-waits.c - programs whose CPU and waits are known by construction, to
 * show what a profiler that samples on each thread's own CPU time sees, and what it must not
 * do to them (tests/integration/test-cpu-timers.py). Each prints "report:" lines that must be
 * the same with and without the profiler, and "count:" lines (what it measured itself: CPU
 * from the kernel's clocks, never a wall-clock rate). It exits non-zero, saying why, when
 * something it did failed in a way it did not expect.
 *
 *   wl-waits waits THREADS SECONDS WORK_US WAIT_US
 *                    THREADS threads each loop for SECONDS of wall time: WORK_US of the
 *                    thread's own CPU in waits_work(), then a wait of WAIT_US, in turn in
 *                    nanosleep (waits_nanosleep), poll on an empty pipe (waits_poll) and
 *                    epoll_wait on an empty epoll (waits_epoll), the last two with a timeout
 *                    in ms rounded up. A signal handler that runs during one of them makes it
 *                    fail with EINTR whatever SA_RESTART says (signal(7)): each one is
 *                    counted and the loop goes on, no retry hides it. report: eintr (all
 *                    threads); count: cpu_ms (process CPU), waits, work_cpu_ms (thread CPU
 *                    spent in waits_work), eintr_nanosleep, eintr_poll, eintr_epoll
 *   wl-waits syscall-loop SECONDS
 *                    one thread until SECONDS of its CPU: ~3 us of arithmetic in loop_body(),
 *                    then one clock_gettime(CLOCK_THREAD_CPUTIME_ID), which the vDSO cannot
 *                    answer: a real system call. count: cpu_ms, iterations, loop_rounds,
 *                    call_share_pct (the share of the loop's time in the call, kernel and
 *                    all, by the CPU's cycle counter; x86-64 and arm64 only)
 *   wl-waits spin SECONDS THREADS
 *                    THREADS threads each spin in spin_work() for SECONDS of their own CPU;
 *                    each prints count: thread_cpu_ms_<tid> (its CLOCK_THREAD_CPUTIME_ID at
 *                    the end, its kernel thread id in the name)
 *   wl-waits bursty N
 *                    N times: clock_nanosleep to the next 100 ms boundary of CLOCK_MONOTONIC,
 *                    then 2 ms of the thread's CPU in bursty_burn(). count: cpu_ms (process
 *                    CPU), burn_cpu_ms (thread CPU spent in bursty_burn), loop_cpu_ms (the
 *                    thread's CPU from before its first sleep to after its last burst: the
 *                    bursts and what the sleeps cost in the kernel)
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

/* Arithmetic steps between two looks at the thread's CPU clock (a system call): ~50
 * iterations of a cheap loop, some microseconds, so that the clock is a few per cent of the
 * work and the work overshoots its target by no more than that. */
#define CHECK_EVERY     50
#define ITERATION_STEPS 256

static volatile unsigned long sink;

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double ms_of(uint64_t ns)
{
    return (double)ns / 1e6;
}

static long tid_of_self(void)
{
    return (long)syscall(SYS_gettid);
}

/* ~50 iterations of a cheap arithmetic loop: what every burn does between two clock reads. */
static void arithmetic(void)
{
    for (int i = 0; i < CHECK_EVERY; i++)
        for (int j = 0; j < ITERATION_STEPS; j++)
            sink += (unsigned long)j * 2654435761u;
}

/* Burns ns of the calling thread's CPU; returns the CPU it did burn. */
static uint64_t burn_thread_cpu(uint64_t ns)
{
    uint64_t start = clock_ns(CLOCK_THREAD_CPUTIME_ID), now;

    do {
        arithmetic();
        now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    } while (now - start < ns);
    return now - start;
}

/* ---- waits ---- */

enum wait_kind { WAIT_NANOSLEEP, WAIT_POLL, WAIT_EPOLL, WAIT_KINDS };

static const char *const wait_names[WAIT_KINDS] = {"nanosleep", "poll", "epoll"};

struct waiter {
    pthread_t thread;
    int index;
    int pipe_fds[2];
    int epoll_fd;
    uint64_t until_ns; /* CLOCK_MONOTONIC */
    uint64_t work_ns, wait_us;
    long waits, eintr[WAIT_KINDS];
    uint64_t work_cpu_ns, cpu_ns; /* in waits_work; the thread's in all */
    char error[160];              /* "" = none */
};

NOINLINE uint64_t waits_work(uint64_t ns);
NOINLINE uint64_t waits_work(uint64_t ns)
{
    uint64_t used = burn_thread_cpu(ns);

    sink++; /* no tail call */
    return used;
}

/* Each wait returns 0 when it waited its time, -errno when it failed (-EINTR: a signal
 * handler ran), 1 when it returned early for another reason. */
NOINLINE int waits_nanosleep(uint64_t us);
NOINLINE int waits_nanosleep(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    int r = nanosleep(&ts, NULL) == 0 ? 0 : -errno;

    sink++;
    return r;
}

NOINLINE int waits_poll(int fd, int timeout_ms);
NOINLINE int waits_poll(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);

    sink++;
    return r < 0 ? -errno : r;
}

NOINLINE int waits_epoll(int epoll_fd, int timeout_ms);
NOINLINE int waits_epoll(int epoll_fd, int timeout_ms)
{
    struct epoll_event ev;
    int r = epoll_wait(epoll_fd, &ev, 1, timeout_ms);

    sink++;
    return r < 0 ? -errno : r;
}

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    int timeout_ms = (int)((w->wait_us + 999) / 1000);
    char name[16];

    snprintf(name, sizeof(name), "wl-waits-%d", w->index);
    pthread_setname_np(pthread_self(), name);
    while (clock_ns(CLOCK_MONOTONIC) < w->until_ns) {
        enum wait_kind kind = (enum wait_kind)(w->waits % WAIT_KINDS);
        int r;

        w->work_cpu_ns += waits_work(w->work_ns);
        if (kind == WAIT_NANOSLEEP)
            r = waits_nanosleep(w->wait_us);
        else if (kind == WAIT_POLL)
            r = waits_poll(w->pipe_fds[0], timeout_ms);
        else
            r = waits_epoll(w->epoll_fd, timeout_ms);
        w->waits++;
        if (r == -EINTR) {
            w->eintr[kind]++; /* counted; the loop goes on without waiting the rest */
        } else if (r != 0) {
            snprintf(w->error, sizeof(w->error), "thread %d: %s returned %s", w->index,
                     wait_names[kind], r < 0 ? strerror(-r) : "early with nothing to read");
            break;
        }
    }
    w->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    return NULL;
}

static int waits(int threads, double seconds, long work_us, long wait_us)
{
    struct waiter *ws = calloc((size_t)threads, sizeof(*ws));
    uint64_t until = clock_ns(CLOCK_MONOTONIC) + (uint64_t)(seconds * 1e9);
    long total_waits = 0, eintr[WAIT_KINDS] = {0, 0, 0};
    uint64_t work_cpu_ns = 0, threads_cpu_ns = 0;
    int failed = 0;

    if (!ws || threads < 1 || work_us < 1 || wait_us < 1)
        return 2;
    for (int i = 0; i < threads; i++) {
        struct waiter *w = &ws[i];

        w->index = i;
        w->until_ns = until;
        w->work_ns = (uint64_t)work_us * 1000u;
        w->wait_us = (uint64_t)wait_us;
        w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (pipe(w->pipe_fds) != 0 || w->epoll_fd < 0) {
            perror("wl-waits: pipe or epoll_create1");
            return 5;
        }
        if (pthread_create(&w->thread, NULL, waiter_main, w) != 0) {
            fprintf(stderr, "wl-waits: pthread_create failed\n");
            return 5;
        }
    }
    for (int i = 0; i < threads; i++) {
        struct waiter *w = &ws[i];

        pthread_join(w->thread, NULL);
        total_waits += w->waits;
        work_cpu_ns += w->work_cpu_ns;
        threads_cpu_ns += w->cpu_ns;
        for (int k = 0; k < WAIT_KINDS; k++)
            eintr[k] += w->eintr[k];
        if (w->error[0]) {
            fprintf(stderr, "wl-waits: %s\n", w->error);
            failed = 1;
        }
        close(w->pipe_fds[0]);
        close(w->pipe_fds[1]);
        close(w->epoll_fd);
    }
    printf("report: eintr=%ld\n", eintr[WAIT_NANOSLEEP] + eintr[WAIT_POLL] + eintr[WAIT_EPOLL]);
    printf("count: cpu_ms=%.3f\n", ms_of(clock_ns(CLOCK_PROCESS_CPUTIME_ID)));
    printf("count: waits=%ld\n", total_waits);
    printf("count: work_cpu_ms=%.3f\n", ms_of(work_cpu_ns));
    printf("count: threads_cpu_ms=%.3f\n", ms_of(threads_cpu_ns));
    for (int k = 0; k < WAIT_KINDS; k++)
        printf("count: eintr_%s=%ld\n", wait_names[k], eintr[k]);
    free(ws);
    return failed ? 4 : 0;
}

/* ---- syscall-loop ---- */

NOINLINE void loop_body(long rounds);
NOINLINE void loop_body(long rounds)
{
    for (long i = 0; i < rounds; i++)
        sink += (unsigned long)i * 2654435761u;
    sink++;
}

/* Rounds of loop_body() in ~3 us of this CPU: the fastest of a few timed runs. */
static long rounds_for_3us(void)
{
    const long probe = 200000;
    uint64_t best = UINT64_MAX;

    for (int i = 0; i < 5; i++) {
        uint64_t start = clock_ns(CLOCK_THREAD_CPUTIME_ID), took;

        loop_body(probe);
        took = clock_ns(CLOCK_THREAD_CPUTIME_ID) - start;
        if (took < best)
            best = took;
    }
    return best ? (long)((double)probe * 3000.0 / (double)best) + 1 : probe;
}

/* The CPU's cycle counter (0 where there is none): read inline, no call that a profile
 * would show as a leaf. For the share of the loop's time in its system call. */
static uint64_t cycles(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    uint64_t v;

    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    return 0;
#endif
}

static int syscall_loop(double seconds)
{
    long rounds = rounds_for_3us(), iterations = 0;
    uint64_t until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + (uint64_t)(seconds * 1e9);
    uint64_t body_cycles = 0, call_cycles = 0;
    struct timespec ts;

    do {
        uint64_t t0 = cycles(), t1, t2;

        loop_body(rounds);
        t1 = cycles();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* the system call of each iteration */
        t2 = cycles();
        body_cycles += t1 - t0;
        call_cycles += t2 - t1;
        iterations++;
    } while ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec < until);
    printf("count: cpu_ms=%.3f\n", ms_of(clock_ns(CLOCK_PROCESS_CPUTIME_ID)));
    printf("count: iterations=%ld\n", iterations);
    printf("count: loop_rounds=%ld\n", rounds);
    if (body_cycles + call_cycles > 0)
        printf("count: call_share_pct=%.2f\n",
               100.0 * (double)call_cycles / (double)(body_cycles + call_cycles));
    return 0;
}

/* ---- spin ---- */

NOINLINE void spin_work(uint64_t ns);
NOINLINE void spin_work(uint64_t ns)
{
    burn_thread_cpu(ns);
    sink++;
}

static void *spinner_main(void *arg)
{
    spin_work(*(const uint64_t *)arg);
    printf("count: thread_cpu_ms_%ld=%.3f\n", tid_of_self(),
           ms_of(clock_ns(CLOCK_THREAD_CPUTIME_ID)));
    return NULL;
}

static int spin(double seconds, int threads)
{
    pthread_t *ths = calloc((size_t)threads, sizeof(*ths));
    uint64_t ns = (uint64_t)(seconds * 1e9);

    if (!ths || threads < 1)
        return 2;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&ths[i], NULL, spinner_main, &ns) != 0) {
            fprintf(stderr, "wl-waits: pthread_create failed\n");
            return 5;
        }
    for (int i = 0; i < threads; i++)
        pthread_join(ths[i], NULL);
    free(ths);
    return 0;
}

/* ---- bursty ---- */

NOINLINE uint64_t bursty_burn(uint64_t ns);
NOINLINE uint64_t bursty_burn(uint64_t ns)
{
    uint64_t used = burn_thread_cpu(ns);

    sink++;
    return used;
}

static int bursty(int n)
{
    const uint64_t period_ns = 100000000u, burst_ns = 2000000u;
    uint64_t burn_ns = 0, loop_start_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    long eintr = 0;

    if (n < 1)
        return 2;
    for (int i = 0; i < n; i++) {
        uint64_t next = (clock_ns(CLOCK_MONOTONIC) / period_ns + 1) * period_ns;
        struct timespec ts = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
        int r;

        /* An absolute deadline: waiting again after EINTR waits no longer. */
        while ((r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) == EINTR)
            eintr++;
        if (r != 0) {
            fprintf(stderr, "wl-waits: clock_nanosleep: %s\n", strerror(r));
            return 4;
        }
        burn_ns += bursty_burn(burst_ns);
    }
    printf("count: cpu_ms=%.3f\n", ms_of(clock_ns(CLOCK_PROCESS_CPUTIME_ID)));
    printf("count: burn_cpu_ms=%.3f\n", ms_of(burn_ns));
    printf("count: loop_cpu_ms=%.3f\n", ms_of(clock_ns(CLOCK_THREAD_CPUTIME_ID) - loop_start_ns));
    printf("count: eintr=%ld\n", eintr);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "waits") && argc > 5)
        return waits(atoi(argv[2]), atof(argv[3]), atol(argv[4]), atol(argv[5]));
    if (!strcmp(mode, "syscall-loop") && argc > 2)
        return syscall_loop(atof(argv[2]));
    if (!strcmp(mode, "spin") && argc > 3)
        return spin(atof(argv[2]), atoi(argv[3]));
    if (!strcmp(mode, "bursty") && argc > 2)
        return bursty(atoi(argv[2]));
    fprintf(stderr, "wl-waits: unknown mode '%s' or missing arguments (see the file's header)\n",
            mode);
    return 2;
}
