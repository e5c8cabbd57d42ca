/* tests/workloads/wl-signals.c - programs that use SIGPROF themselves, to show that a
 * profiler using SIGPROF does not change what they see. Each prints "report:" lines (what
 * it observed: return values, read-back actions, masks) that must be the same with and
 * without the profiler, and "count:" lines; it exits non-zero, saying why, if something it
 * did had no effect.
 *
 *   wl-signals own HOW CPU_S KILLS  installs its own SIGPROF handler by HOW (sigaction,
 *                                   signal, bsd_signal, ssignal, sysv_signal, __sysv_signal,
 *                                   sigset, raw: the rt_sigaction system call, raw-unread:
 *                                   the same without reading it back), after 30 ms
 *                                   of CPU and a 50 ms sleep; spins 100 ms of CPU, then
 *                                   runs ITIMER_PROF (10 ms) for CPU_S of process CPU in
 *                                   wl_spin, then kill()s itself KILLS times. count:
 *                                   quiet_calls (handler calls in the 100 ms, when the
 *                                   program sends itself none), itimer_calls, cpu_ms
 *                                   (process CPU while the timer ran), kill_calls,
 *                                   tkill_calls (calls with si_code SI_TKILL from this
 *                                   process: samples of a profiler; SA_SIGINFO handlers)
 *   wl-signals block CPU_S          a SA_SIGINFO handler of its own and ITIMER_PROF; spins
 *                                   CPU_S with SIGPROF blocked, then CPU_S unblocked in
 *                                   wl_spin_unblocked; a thread spins with it blocked and
 *                                   ends so; count: tkill_calls
 *   wl-signals exec SETUP CPU_S     SETUP: default, ignore, block, handler, ignore-block;
 *                                   spins CPU_S, tries an exec that fails (checks nothing
 *                                   changed), then execs itself as "report" with no
 *                                   LD_PRELOAD and no FLEETPROF_* in its environment
 *   wl-signals exec-fail CPU_S      spins 50 ms with SIGPROF blocked, an exec fails,
 *                                   unblocks, spins CPU_S in wl_after_failed_exec
 *   wl-signals report               prints SIGPROF's disposition, whether it is blocked and
 *                                   pending (sigaction, sigprocmask, sigpending and
 *                                   /proc/self/status), then unblocks it and exits 0
 *   wl-signals block-all-thread CPU_S
 *                                   a thread blocks every signal, spins CPU_S of its own
 *                                   CPU in blocked_spin, reports whether SIGPROF is pending
 *                                   (pending_sigprof) and ends so; the main thread joins it
 *   wl-signals signalfd CPU_S       blocks SIGPROF, reads it from a signalfd; runs its own
 *   wl-signals sigtimedwait CPU_S   ITIMER_PROF (10 ms) for CPU_S of its CPU, taking every
 *                                   pending SIGPROF (signalfd reads, or sigtimedwait with
 *                                   no wait) after each 1 ms and at the end; reports
 *                                   foreign (those with a code other than SI_KERNEL: not
 *                                   from its timer) and got_some; count: received
 *   wl-signals deep-recursion CPU_S recurses DEEP_FRAMES deep (DEEP_FRAME_BYTES of stack
 *                                   each), spins CPU_S at the bottom in wl_spin; reports
 *                                   depth; count: stack_spare_kib (RLIMIT_STACK left at
 *                                   the bottom). Meant for `ulimit -s 1024`
 *   wl-signals rlimit-sigpending CPU_S
 *                                   two threads spin CPU_S each in sigpending_spin, then
 *                                   report whether SIGPROF is pending (pending_sigprof).
 *                                   Meant for `ulimit -i 1` (RLIMIT_SIGPENDING)
 *   wl-signals unshare-user         reports unshare(CLONE_NEWUSER): 0 or the errno's name
 *   wl-signals rt-flood CPU_S N     a thread queues N real-time signals (SIGRTMIN+3, each
 *                                   with its number as value, one every 0.5 ms) to the main
 *                                   thread, which spins CPU_S at the bottom of a 1,010-frame
 *                                   recursion (deep_recurse, samples there walk far) and
 *                                   then waits for them (5 s at most); its SA_SIGINFO
 *                                   handler counts them. report: received (how many), in_order
 *                                   (each value one more than the last); then one more sent
 *                                   while blocked: blocked_held, unblocked_delivered
 *   wl-signals mask-errno           blocks every signal with sigprocmask, then
 *                                   pthread_sigmask, unblocks them: reports each call's
 *                                   result, errno after it, and the mask read back
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

typedef void (*handler_fn)(int);

/* Not declared under _GNU_SOURCE; glibc exports it. */
handler_fn bsd_signal(int sig, handler_fn handler);

extern char **environ;

static volatile unsigned long sink;
static volatile sig_atomic_t calls, tkill_calls;
static const char *how = "";

static double cpu_ms(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

NOINLINE void wl_spin(double ms);
NOINLINE void wl_spin(double ms)
{
    double until = cpu_ms(CLOCK_THREAD_CPUTIME_ID) + ms;

    while (cpu_ms(CLOCK_THREAD_CPUTIME_ID) < until)
        for (int i = 0; i < 5000; i++)
            sink += (unsigned long)i * 2654435761u;
    sink++; /* no tail call */
}

NOINLINE void wl_spin_unblocked(double ms);
NOINLINE void wl_spin_unblocked(double ms)
{
    wl_spin(ms);
    sink++;
}

NOINLINE void wl_after_failed_exec(double ms);
NOINLINE void wl_after_failed_exec(double ms)
{
    wl_spin(ms);
    sink++;
}

static void on_prof_info(int sig, siginfo_t *info, void *ucontext)
{
    (void)sig;
    (void)ucontext;
    calls++;
    if (info->si_code == SI_TKILL && info->si_pid == getpid())
        tkill_calls++;
}

static void on_prof(int sig)
{
    calls++;
    /* One-shot handlers put themselves back, as System V programs do. */
    if (!strcmp(how, "sysv_signal"))
        (void)sysv_signal(sig, on_prof);
    else if (!strcmp(how, "__sysv_signal"))
        (void)__sysv_signal(sig, on_prof);
}

static const char *name_of(handler_fn h)
{
    if (h == SIG_DFL)
        return "SIG_DFL";
    if (h == SIG_IGN)
        return "SIG_IGN";
    if (h == SIG_ERR)
        return "SIG_ERR";
    if (h == SIG_HOLD)
        return "SIG_HOLD";
    if (h == on_prof || h == (handler_fn)(void (*)(void))on_prof_info)
        return "own";
    return "other";
}

static int blocked(void)
{
    sigset_t cur;

    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return sigismember(&cur, SIGPROF);
}

static void report_action(const char *what)
{
    struct sigaction sa;

    if (sigaction(SIGPROF, NULL, &sa) != 0) {
        printf("report: %s sigaction failed\n", what);
        return;
    }
    printf("report: %s handler=%s flags=%s%s%s%s blocked=%d\n", what, name_of(sa.sa_handler),
           sa.sa_flags & SA_SIGINFO ? "SIGINFO," : "", sa.sa_flags & SA_RESTART ? "RESTART," : "",
           sa.sa_flags & SA_RESETHAND ? "RESETHAND," : "",
           sa.sa_flags & SA_NODEFER ? "NODEFER," : "", blocked());
}

/* The kernel's struct sigaction for rt_sigaction (x86-64 layout). */
struct kernel_sigaction {
    void (*handler)(int, siginfo_t *, void *);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

static void ignore_usr2(int sig)
{
    (void)sig;
}

static int install_raw(void)
{
    struct kernel_sigaction k, usr2;
    struct sigaction sa;

    /* The C library's signal return trampoline, which a raw handler needs: read from an
     * action it installed for another signal. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ignore_usr2;
    if (sigaction(SIGUSR2, &sa, NULL) != 0 ||
        syscall(SYS_rt_sigaction, SIGUSR2, NULL, &usr2, sizeof(uint64_t)) != 0 ||
        !(usr2.flags & SA_RESTORER))
        return -1;
    (void)signal(SIGUSR2, SIG_DFL);
    memset(&k, 0, sizeof(k));
    k.handler = on_prof_info;
    k.flags = SA_SIGINFO | SA_RESTART | SA_RESTORER;
    k.restorer = usr2.restorer;
    return (int)syscall(SYS_rt_sigaction, SIGPROF, &k, NULL, sizeof(uint64_t));
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int install(void)
{
    handler_fn prev = SIG_ERR;

    if (!strcmp(how, "sigaction")) {
        struct sigaction sa, old;

        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_prof_info;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGPROF, &sa, &old) != 0)
            return 5;
        prev = old.sa_handler;
    } else if (!strcmp(how, "signal")) {
        prev = signal(SIGPROF, on_prof);
    } else if (!strcmp(how, "bsd_signal")) {
        prev = bsd_signal(SIGPROF, on_prof);
    } else if (!strcmp(how, "ssignal")) {
        prev = ssignal(SIGPROF, on_prof);
    } else if (!strcmp(how, "sysv_signal")) {
        prev = sysv_signal(SIGPROF, on_prof);
    } else if (!strcmp(how, "__sysv_signal")) {
        prev = __sysv_signal(SIGPROF, on_prof);
    } else if (!strcmp(how, "sigset")) {
        /* sigset(3): SIG_HOLD blocks and returns the disposition (SIG_HOLD if it was
         * blocked already); setting a disposition unblocks and returns SIG_HOLD if the
         * signal was blocked. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        prev = sigset(SIGPROF, on_prof);
        printf("report: sigset(own) -> %s blocked=%d\n", name_of(prev), blocked());
        prev = sigset(SIGPROF, SIG_HOLD);
        printf("report: sigset(SIG_HOLD) -> %s blocked=%d\n", name_of(prev), blocked());
        prev = sigset(SIGPROF, SIG_HOLD);
        printf("report: sigset(SIG_HOLD) again -> %s blocked=%d\n", name_of(prev), blocked());
        report_action("held");
        prev = sigset(SIGPROF, on_prof);
#pragma GCC diagnostic pop
    } else if (!strcmp(how, "raw") || !strcmp(how, "raw-unread")) {
        if (install_raw() != 0)
            return 5;
        prev = SIG_DFL;
        if (!strcmp(how, "raw-unread"))
            return 0; /* no sigaction() call that could tell a profiler */
    } else {
        return 2;
    }
    printf("report: %s(own) -> %s\n", how, name_of(prev));
    report_action("installed");
    return prev == SIG_ERR ? 5 : 0;
}

static int own(double cpu_s, int kills)
{
    struct itimerval it = {{0, 10000}, {0, 10000}}, off = {{0, 0}, {0, 0}};
    double start;
    int r, itimer_calls;

    /* Sampled, then idle: the replacement below happens while no sample is on its way. */
    wl_spin(30);
    sleep_ms(50);
    r = install();
    if (r)
        return r;
    /* No SIGPROF of the program's own yet: whatever reaches its handler now is not its. */
    wl_spin(100);
    printf("count: quiet_calls=%d\n", (int)calls);
    calls = 0;
    start = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
    setitimer(ITIMER_PROF, &it, NULL);
    while (cpu_ms(CLOCK_PROCESS_CPUTIME_ID) < start + cpu_s * 1e3)
        wl_spin(1);
    setitimer(ITIMER_PROF, &off, NULL);
    itimer_calls = calls;
    printf("count: cpu_ms=%.0f\n", cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - start);
    for (int i = 0; i < kills; i++) {
        int before = calls;

        kill(getpid(), SIGPROF); /* delivered to this thread before kill() returns */
        if (calls != before + 1) {
            fprintf(stderr, "wl-signals: kill %d: the handler ran %d times\n", i, calls - before);
            return 3;
        }
        wl_spin(1);
    }
    report_action("after");
    printf("count: itimer_calls=%d\ncount: kill_calls=%d\ncount: tkill_calls=%d\n", itimer_calls,
           calls - itimer_calls, (int)tkill_calls);
    return 0;
}

static void *blocked_spinner(void *arg)
{
    sigset_t prof;

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pthread_sigmask(SIG_BLOCK, &prof, NULL);
    wl_spin(*(double *)arg);
    return NULL; /* ends with SIGPROF blocked, perhaps one pending */
}

static int block(double cpu_s)
{
    struct itimerval it = {{0, 10000}, {0, 10000}}, off = {{0, 0}, {0, 0}};
    struct sigaction sa;
    sigset_t prof;
    pthread_t th;
    double ms = cpu_s * 1e3;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_prof_info;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    if (sigaction(SIGPROF, &sa, NULL) != 0)
        return 5;
    pthread_sigmask(SIG_BLOCK, &prof, NULL);
    if (pthread_create(&th, NULL, blocked_spinner, &ms) != 0)
        return 5;
    setitimer(ITIMER_PROF, &it, NULL);
    wl_spin(ms);
    pthread_join(th, NULL);
    report_action("blocked");
    pthread_sigmask(SIG_UNBLOCK, &prof, NULL);
    wl_spin_unblocked(ms);
    setitimer(ITIMER_PROF, &off, NULL);
    report_action("unblocked");
    printf("count: calls=%d\ncount: tkill_calls=%d\n", (int)calls, (int)tkill_calls);
    return 0;
}

/* /proc/self/status's mask line `name` (hex), bit of SIGPROF. */
static int status_bit(const char *name)
{
    char line[256];
    size_t n = strlen(name);
    FILE *f = fopen("/proc/self/status", "r");
    int bit = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, name, n) && line[n] == ':')
            bit = (int)((strtoull(line + n + 1, NULL, 16) >> (SIGPROF - 1)) & 1);
    fclose(f);
    return bit;
}

static int report(void)
{
    sigset_t pending, prof;

    sigpending(&pending);
    report_action("exec'd");
    printf("report: exec'd pending=%d SigIgn=%d SigBlk=%d SigPnd=%d ShdPnd=%d\n",
           sigismember(&pending, SIGPROF), status_bit("SigIgn"), status_bit("SigBlk"),
           status_bit("SigPnd"), status_bit("ShdPnd"));
    fflush(stdout);
    /* A SIGPROF left pending under SIG_DFL ends the program here. */
    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pthread_sigmask(SIG_UNBLOCK, &prof, NULL);
    printf("report: exec'd survived unblocking\n");
    return 0;
}

/* The environment without the profiler: no LD_PRELOAD, no FLEETPROF_*. */
static char **clean_environment(void)
{
    size_t n = 0, k = 0;
    char **env;

    while (environ[n])
        n++;
    env = calloc(n + 1, sizeof(*env));
    for (size_t i = 0; env && i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) && strncmp(environ[i], "FLEETPROF_", 10))
            env[k++] = environ[i];
    return env;
}

/* An exec that fails changes nothing: the disposition and the mask read back the same. */
static int failed_exec(void)
{
    char *argv[] = {"wl-signals-missing", NULL};
    struct sigaction before, after;
    sigset_t mask_before, mask_after;

    /* The kernel and glibc's sigemptyset() fill only the first 8 bytes of a sigset_t: the
     * rest is compared too, so it must start equal. */
    memset(&mask_before, 0, sizeof(mask_before));
    memset(&mask_after, 0, sizeof(mask_after));
    sigaction(SIGPROF, NULL, &before);
    pthread_sigmask(SIG_BLOCK, NULL, &mask_before);
    if (execve("/nonexistent/wl-signals-missing", argv, environ) != -1 || errno != ENOENT) {
        fprintf(stderr, "wl-signals: the failing exec did not fail with ENOENT\n");
        return 4;
    }
    sigaction(SIGPROF, NULL, &after);
    pthread_sigmask(SIG_BLOCK, NULL, &mask_after);
    if (before.sa_handler != after.sa_handler || before.sa_flags != after.sa_flags ||
        memcmp(&mask_before, &mask_after, sizeof(sigset_t))) {
        fprintf(stderr,
                "wl-signals: a failed exec changed SIGPROF's action or the mask "
                "(handler %s, flags %#x -> %#x, SIGPROF blocked %d -> %d)\n",
                before.sa_handler == after.sa_handler ? "same" : "changed",
                (unsigned)before.sa_flags, (unsigned)after.sa_flags,
                sigismember(&mask_before, SIGPROF), sigismember(&mask_after, SIGPROF));
        return 4;
    }
    report_action("after failed exec");
    return 0;
}

static int exec_self(const char *setup, double cpu_s)
{
    char *argv[] = {"wl-signals", "report", NULL};
    sigset_t prof;
    int r;

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    if (!strcmp(setup, "ignore") || !strcmp(setup, "ignore-block"))
        signal(SIGPROF, SIG_IGN);
    else if (!strcmp(setup, "handler"))
        signal(SIGPROF, on_prof);
    else if (strcmp(setup, "default") && strcmp(setup, "block"))
        return 2;
    if (!strcmp(setup, "block") || !strcmp(setup, "ignore-block"))
        pthread_sigmask(SIG_BLOCK, &prof, NULL);
    report_action("before exec");
    wl_spin(cpu_s * 1e3); /* sampled meanwhile: with SIGPROF blocked, a sample waits */
    r = failed_exec();
    if (r)
        return r;
    fflush(stdout);
    execve("/proc/self/exe", argv, clean_environment());
    perror("wl-signals: execve");
    return 1;
}

static int exec_fail(double cpu_s)
{
    sigset_t prof;
    int r;

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    pthread_sigmask(SIG_BLOCK, &prof, NULL);
    wl_spin(50); /* a sample of ours waits, blocked, when the exec is tried */
    r = failed_exec();
    if (r)
        return r;
    pthread_sigmask(SIG_UNBLOCK, &prof, NULL);
    wl_after_failed_exec(cpu_s * 1e3);
    return 0;
}

NOINLINE void blocked_spin(double ms);
NOINLINE void blocked_spin(double ms)
{
    wl_spin(ms);
    sink++;
}

/* Whether SIGPROF is pending on the calling thread or the process. */
static int sigprof_pending(void)
{
    sigset_t pending;

    sigemptyset(&pending);
    sigpending(&pending);
    return sigismember(&pending, SIGPROF);
}

struct spinner {
    const char *name;
    double ms;
    int pending; /* SIGPROF pending when it was done */
};

static void *all_blocked_spinner(void *arg)
{
    struct spinner *s = arg;
    sigset_t all;

    pthread_setname_np(pthread_self(), s->name);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    blocked_spin(s->ms);
    s->pending = sigprof_pending();
    return NULL; /* ends with every signal blocked */
}

static int block_all_thread(double cpu_s)
{
    struct spinner s = {"wl-blocked-all", cpu_s * 1e3, -1};
    pthread_t th;

    if (pthread_create(&th, NULL, all_blocked_spinner, &s) != 0)
        return 5;
    pthread_join(th, NULL);
    printf("report: pending_sigprof=%d\n", s.pending);
    return 0;
}

struct received {
    int all;
    int foreign; /* a code other than SI_KERNEL: not from the program's ITIMER_PROF */
};

static void take_pending(int fd, const sigset_t *prof, struct received *got)
{
    if (fd >= 0) {
        struct signalfd_siginfo si;

        while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
            got->all++;
            if (si.ssi_signo != SIGPROF || si.ssi_code != SI_KERNEL)
                got->foreign++;
        }
    } else {
        struct timespec zero = {0, 0};
        siginfo_t info;

        while (sigtimedwait(prof, &info, &zero) == SIGPROF) {
            got->all++;
            if (info.si_code != SI_KERNEL)
                got->foreign++;
        }
    }
}

static int consume_sigprof(const char *way, double cpu_s)
{
    struct itimerval it = {{0, 10000}, {0, 10000}}, off = {{0, 0}, {0, 0}};
    struct received got = {0, 0};
    sigset_t prof;
    int fd = -1;

    sigemptyset(&prof);
    sigaddset(&prof, SIGPROF);
    if (pthread_sigmask(SIG_BLOCK, &prof, NULL) != 0)
        return 5;
    if (!strcmp(way, "signalfd")) {
        fd = signalfd(-1, &prof, SFD_NONBLOCK | SFD_CLOEXEC);
        if (fd < 0) {
            perror("wl-signals: signalfd");
            return 5;
        }
    }
    setitimer(ITIMER_PROF, &it, NULL);
    for (double ms = 0; ms < cpu_s * 1e3; ms++) {
        wl_spin(1);
        take_pending(fd, &prof, &got);
    }
    setitimer(ITIMER_PROF, &off, NULL);
    take_pending(fd, &prof, &got);
    if (fd >= 0)
        close(fd);
    printf("report: foreign=%d\nreport: got_some=%d\ncount: received=%d\n", got.foreign,
           got.all >= 1, got.all);
    return 0;
}

/* Deep enough, with frames big enough, that the bottom is within ~300 KiB of a 1 MiB
 * RLIMIT_STACK: room for a handler, not for a careless one. */
#define DEEP_FRAMES      1010
#define DEEP_FRAME_BYTES 700

static uintptr_t deep_bottom;

NOINLINE int deep_recurse(int depth, double ms);
NOINLINE int deep_recurse(int depth, double ms)
{
    volatile char frame[DEEP_FRAME_BYTES];
    int reached;

    frame[0] = (char)depth;
    frame[DEEP_FRAME_BYTES - 1] = (char)depth;
    if (depth < DEEP_FRAMES) {
        reached = deep_recurse(depth + 1, ms);
    } else {
        deep_bottom = (uintptr_t)frame;
        wl_spin(ms); /* the samples land at the deepest point */
        reached = depth;
    }
    return reached + frame[0] - frame[DEEP_FRAME_BYTES - 1]; /* no tail call */
}

/* The top of the main thread's stack: the end of /proc/self/maps' [stack]. */
static uintptr_t stack_top(void)
{
    char line[512];
    FILE *f = fopen("/proc/self/maps", "r");
    uintptr_t top = 0;

    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "[stack]"))
            top = (uintptr_t)strtoull(strchr(line, '-') + 1, NULL, 16);
    fclose(f);
    return top;
}

static int deep_recursion(double cpu_s)
{
    uintptr_t top = stack_top();
    struct rlimit rl;
    int depth = deep_recurse(1, cpu_s * 1e3);

    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && top)
        printf("count: stack_spare_kib=%ld\n",
               ((long)rl.rlim_cur - (long)(top - deep_bottom)) / 1024);
    printf("report: depth=%d\n", depth);
    return 0;
}

NOINLINE void sigpending_spin(double ms);
NOINLINE void sigpending_spin(double ms)
{
    wl_spin(ms);
    sink++;
}

static void *pending_spinner(void *arg)
{
    struct spinner *s = arg;

    pthread_setname_np(pthread_self(), s->name);
    sigpending_spin(s->ms);
    s->pending = sigprof_pending();
    return NULL;
}

static int rlimit_sigpending(double cpu_s)
{
    struct spinner s[2] = {{"wl-pending-0", cpu_s * 1e3, -1}, {"wl-pending-1", cpu_s * 1e3, -1}};
    pthread_t th[2];

    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, pending_spinner, &s[i]) != 0)
            return 5;
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        printf("report: pending_sigprof=%d\n", s[i].pending);
    }
    return 0;
}

static _Atomic int flood_received, flood_next = 1, flood_in_order = 1;

static void on_flood(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    if (info->si_value.sival_int != atomic_load(&flood_next))
        atomic_store(&flood_in_order, 0);
    atomic_store(&flood_next, info->si_value.sival_int + 1);
    atomic_fetch_add(&flood_received, 1);
}

struct flood {
    pthread_t target;
    int count;
};

static void *flood_sender(void *arg)
{
    const struct flood *f = arg;
    struct timespec gap = {0, 500 * 1000};

    for (int i = 1; i <= f->count; i++) {
        union sigval v = {.sival_int = i};

        while (pthread_sigqueue(f->target, SIGRTMIN + 3, v) != 0)
            (void)nanosleep(&gap, NULL); /* EAGAIN: the queue is full, the target catches up */
        (void)nanosleep(&gap, NULL);
    }
    return NULL;
}

static int rt_flood(double cpu_s, int count)
{
    struct sigaction sa = {.sa_sigaction = on_flood, .sa_flags = SA_SIGINFO | SA_RESTART};
    struct flood f = {pthread_self(), count};
    pthread_t sender;

    (void)sigemptyset(&sa.sa_mask);
    if (sigaction(SIGRTMIN + 3, &sa, NULL) < 0)
        return 3;
    if (pthread_create(&sender, NULL, flood_sender, &f) != 0)
        return 5;
    sigset_t one, pending;
    union sigval last = {.sival_int = count + 1};
    int held, after;

    (void)deep_recurse(1, cpu_s * 1e3);
    pthread_join(sender, NULL);
    for (int i = 0; i < 5000 && atomic_load(&flood_received) < count; i++)
        (void)usleep(1000);
    printf("report: received=%d in_order=%d\n", atomic_load(&flood_received),
           atomic_load(&flood_in_order));
    /* The program's own mask changes after all those samples still take effect: one more,
     * blocked, stays pending until it is unblocked. */
    (void)sigemptyset(&one);
    (void)sigaddset(&one, SIGRTMIN + 3);
    (void)sigprocmask(SIG_BLOCK, &one, NULL);
    (void)pthread_sigqueue(pthread_self(), SIGRTMIN + 3, last);
    (void)sigpending(&pending);
    held = sigismember(&pending, SIGRTMIN + 3) == 1 && atomic_load(&flood_received) == count;
    (void)sigprocmask(SIG_UNBLOCK, &one, NULL);
    after = atomic_load(&flood_received);
    printf("report: blocked_held=%d unblocked_delivered=%d\n", held, after == count + 1);
    return 0;
}

/* errno after successful mask changes (a server reads a failed select()'s errno after it
 * restored its mask), and the mask read back: every signal but glibc's own two and the
 * two no one can block. */
static int mask_errno(void)
{
    sigset_t all, got;
    int blocked = 0;

    (void)sigfillset(&all);
    errno = 0;
    printf("report: sigprocmask=%d errno=%d\n", sigprocmask(SIG_SETMASK, &all, NULL), errno);
    errno = 0;
    printf("report: pthread_sigmask=%d errno=%d\n", pthread_sigmask(SIG_SETMASK, &all, NULL),
           errno);
    (void)sigprocmask(SIG_SETMASK, NULL, &got);
    for (int sig = 1; sig < NSIG; sig++)
        blocked += sigismember(&got, sig) == 1;
    printf("report: blocked=%d sigprof=%d\n", blocked, sigismember(&got, SIGPROF));
    (void)sigemptyset(&all);
    errno = 0;
    printf("report: unblock=%d errno=%d\n", sigprocmask(SIG_SETMASK, &all, NULL), errno);
    return 0;
}

static int unshare_user(void)
{
    const char *name;

    wl_spin(20); /* the runtime, if any, has started */
    if (unshare(CLONE_NEWUSER) == 0) {
        printf("report: unshare=0\n");
        return 0;
    }
    name = strerrorname_np(errno);
    if (name)
        printf("report: unshare=%s\n", name);
    else
        printf("report: unshare=errno %d\n", errno);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "own") && argc > 4) {
        how = argv[2];
        return own(atof(argv[3]), atoi(argv[4]));
    }
    if (!strcmp(mode, "block") && argc > 2)
        return block(atof(argv[2]));
    if (!strcmp(mode, "exec") && argc > 3)
        return exec_self(argv[2], atof(argv[3]));
    if (!strcmp(mode, "exec-fail") && argc > 2)
        return exec_fail(atof(argv[2]));
    if (!strcmp(mode, "report"))
        return report();
    if (!strcmp(mode, "block-all-thread") && argc > 2)
        return block_all_thread(atof(argv[2]));
    if ((!strcmp(mode, "signalfd") || !strcmp(mode, "sigtimedwait")) && argc > 2)
        return consume_sigprof(mode, atof(argv[2]));
    if (!strcmp(mode, "deep-recursion") && argc > 2)
        return deep_recursion(atof(argv[2]));
    if (!strcmp(mode, "rlimit-sigpending") && argc > 2)
        return rlimit_sigpending(atof(argv[2]));
    if (!strcmp(mode, "unshare-user"))
        return unshare_user();
    if (!strcmp(mode, "mask-errno"))
        return mask_errno();
    if (!strcmp(mode, "rt-flood") && argc > 3)
        return rt_flood(atof(argv[2]), atoi(argv[3]));
    fprintf(stderr, "wl-signals: unknown mode '%s' (see the file's header)\n", mode);
    return 2;
}
