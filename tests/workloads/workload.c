/* tests/workloads/workload.c - small programs with known stacks, for integration tests.
 *
 *   workload busy SECONDS [DEPTH]      main thread: wl_recurse x DEPTH -> wl_hot_leaf
 *   workload threads N SECONDS         N threads "wl-worker-I", each in its own hot function
 *   workload prefork N SECONDS [WAIT]  master forks N workers (wl_worker_main), they _exit;
 *                                      WAIT seconds of work in the master before the forks
 *   workload setuid-workers N SECONDS UID [WAY]
 *                                      as prefork, but each worker first drops to UID (and
 *                                      its group) the way servers do: WAY setuid (default),
 *                                      setresuid, late (after half its work), or after-execs
 *                                      (setuid, the workers forked after 10 children that
 *                                      exec /bin/true at once); exits 7 if a drop fails
 *   workload dlopen SECONDS PLUGIN     loops dlopen/dlclose of PLUGIN while spinning
 *   workload exec SECONDS              execs itself as "busy"
 *   workload burn-exec S1 S2           wl_before_exec works S1 seconds, then execs itself as
 *                                      "busy S2" (the life before the exec must stay)
 *   workload exit-underscore SECONDS   busy, then _exit(3)
 *   workload wait-signal               spins until killed
 *   workload idle SECONDS              sleeps (samples without CPU)
 *   workload fork-idle SECONDS         forks a child that sleeps SECONDS (nanosleep, no CPU)
 *                                      and _exits 0; the master writes "child PID" as soon
 *                                      as it forked, then waits for it; exits 1 if the
 *                                      child did not exit 0
 *   workload pool N SECONDS            a pool of N threads that wait for work that never
 *                                      comes (a condition variable), SECONDS long; prints
 *                                      its peak RSS ("max_rss_kb=K") and CPU ("cpu_us=U")
 *   workload clock SECONDS             wl_clock_loop: reads the clock in a loop, so most
 *                                      samples land in the vdso's clock_gettime
 *   workload close-fds HOW SECONDS     busy, then closes every descriptor from 3 up the way
 *                                      daemons do (HOW: loop = close() each up to the
 *                                      limit, range = close_range, from = closefrom), then
 *                                      busy again; exits 4 if a file it opens then fails
 *   workload daemonize SECONDS         starts the way prefork servers do: stdin and stdout
 *                                      to /dev/null (dup2), closes every descriptor from 3
 *                                      up, opens 8 pipes of its own (their
 *                                      numbers are the ones just closed), forks a worker;
 *                                      worker and master work, then check that each pipe is
 *                                      still theirs (same inode, a byte written comes back);
 *                                      exit 5 if one was closed or replaced under them
 *   workload own-sigprof CPU_SECONDS   resets every signal handler to SIG_DFL (daemons do),
 *                                      installs its own SIGPROF handler and a 10 ms
 *                                      ITIMER_PROF (a profiler of its own), spins for
 *                                      CPU_SECONDS of CPU; prints "own_sigprof=N", its
 *                                      handler's calls; exits 6 if sigaction() does not
 *                                      give its own handler back
 *   workload fork-exec N [PROG ARG...] forks N children one after another, each execs
 *                                      /bin/true (or PROG with its arguments; with
 *                                      --clear-env first: an empty environment); prints
 *                                      how many died by a signal
 *   workload dlopen-stay PATH          dlopens PATH and exits with it loaded
 *   workload fork-loader N             forks N children one after another while busy, with 3
 *                                      threads spinning (the sampler keeps walking their
 *                                      stacks); each child sleeps
 *                                      30 ms (past the runtime's deferred start, which lists
 *                                      the modules), walks the modules with dl_iterate_phdr
 *                                      and exits; a child not gone after 20 s is killed and
 *                                      counted; prints "hung=K failed=F" (F: children that
 *                                      died of a signal or exited non-zero), exits 1 if
 *                                      either is not 0
 *   workload fork-low-nofile           lowers RLIMIT_NOFILE to 300, forks a child that spins
 *                                      until its runtime has opened statm (10 s at most) and
 *                                      prints "runtime_fds=N,N" (statm's and the chunk
 *                                      file's descriptor numbers)
 *   workload fork-exec-fds             forks a child that prints "chunk_file_described=N
 *                                      after_us=T" (1: the runtime's chunk file among its
 *                                      descriptors holds a description, 0: not yet, -1: no
 *                                      such file; T: us from before the fork to that look)
 *                                      and execs /bin/true
 *   workload bad-fp                    spins with rbp = -16: a frame-pointer walk that trusts
 *                                      it reads address -16 (a profiler bug must not kill us)
 *   workload flood SECONDS RATE        markers "m <seq>" (seq 0, 1, 2...) at RATE per second
 *                                      through fleetprof_marker (found with dlsym: preloaded);
 *                                      prints "markers: N" (how many) as it starts its exit
 *   workload pause-main SECONDS RATE   the same from a second thread, while the main thread
 *                                      waits in pause(); the process then exits normally
 *
 *   workload segv SECONDS              busy in wl_recurse, then wl_crash_here writes through a
 *                                      null pointer (dies of SIGSEGV)
 *   workload abort SECONDS             busy, then wl_abort_here calls abort()
 *   workload segv-handled N            prints "segv_before=default|other" (SIGSEGV's action
 *                                      as it found it), installs its own SIGSEGV handler
 *                                      (siglongjmp back, like a JIT's guard page), faults N
 *                                      times, prints "segv_handled=N" and what sigaction()
 *                                      reports ("segv_after=own"); exits 0
 *   workload chroot DIR SECONDS        chroot(DIR) and chdir("/"), then works SECONDS in
 *                                      wl_recurse and forks a worker (wl_worker_main) that
 *                                      works SECONDS in the chroot too; exits 3 if chroot
 *                                      fails, 7 if the worker does not exit 0 (it exits 8
 *                                      if its working directory is not the new root)
 *   workload vm-max                    prints "largest_malloc_mb=M thread=ok|ERROR": the
 *                                      largest malloc() that succeeds (to 1 MiB), then
 *                                      whether a thread can be made (for RLIMIT_AS runs)
 *   workload nproc UID LIMIT N         drops to UID unless it runs as UID (setresuid; as
 *                                      servers do), sets
 *                                      RLIMIT_NPROC to LIMIT, makes threads until one
 *                                      fails and joins them, then forks up to N workers
 *                                      that each wait for a byte on a pipe, releases them;
 *                                      prints "threads=T forks=F of N"
 *   workload title SECONDS TITLE       writes TITLE over its argv[0] (a process title, as
 *                                      postgres and nginx set theirs), then busy SECONDS
 *   workload --cpu MODE ARGS...        the same MODE, but each SECONDS of work (busy loops,
 *                                      thread and worker bodies, prefork's WAIT, the dlopen
 *                                      loop) is CPU time of the thread doing it
 *                                      (CLOCK_THREAD_CPUTIME_ID), not wall time: on a busy
 *                                      machine the program does the same work, only later.
 *                                      Sleeps (idle) and marker rates (flood, pause-main)
 *                                      stay on the wall clock.
 * Functions are noinline and never tail-called, so every frame is on the stack.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile uint64_t sink;

static double clock_s(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* The clock that work deadlines are on: the wall clock, or with --cpu the calling
 * thread's CPU clock (so a deadline is computed and checked by the thread that works). */
static clockid_t work_clock = CLOCK_MONOTONIC;
static _Thread_local double cpu_seen_s;    /* the thread's CPU clock at its last read */
static _Thread_local double cpu_seen_at_s; /* when (CLOCK_MONOTONIC) it was read */

/* The end of `seconds` of work starting now, on work_clock. */
static double work_deadline(double seconds)
{
    if (work_clock == CLOCK_MONOTONIC)
        return now_s() + seconds;
    cpu_seen_at_s = now_s();
    cpu_seen_s = clock_s(work_clock);
    return cpu_seen_s + seconds;
}

/* Whether the work that ends at `until` (from work_deadline()) is done. The CPU clock is a
 * system call, and sampling signals land on the way out of one far more often than its
 * share of the time: read at every loop (0.3 us of a 54 us loop here), 40 % of the
 * samples ended in clock_gettime. So it is read at most every 10 ms of wall time (the
 * vdso's monotonic clock costs nothing), and the work may run over by up to 10 ms of CPU. */
static bool work_done(double until)
{
    double now = now_s();

    if (work_clock == CLOCK_MONOTONIC)
        return now >= until;
    if (now - cpu_seen_at_s >= 0.01) {
        cpu_seen_at_s = now;
        cpu_seen_s = clock_s(work_clock);
    }
    return cpu_seen_s >= until;
}

NOINLINE void wl_hot_leaf(double until);
NOINLINE void wl_hot_leaf(double until)
{
    while (!work_done(until))
        for (int i = 0; i < 10000; i++)
            sink += (uint64_t)i * 2654435761u;
}

static volatile sig_atomic_t own_sigprof_calls;

static void on_own_sigprof(int sig, siginfo_t *info, void *ucontext)
{
    (void)sig;
    (void)info;
    (void)ucontext;
    own_sigprof_calls++;
}

/* What descriptor fd of this process is open on (its /proc/self/fd link), or false. */
static bool fd_target(int fd, char *target, size_t size)
{
    char link[64];
    ssize_t n;

    (void)snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, target, size - 1);
    if (n <= 0)
        return false;
    target[n] = '\0';
    return true;
}

NOINLINE void wl_clock_loop(double until);
NOINLINE void wl_clock_loop(double until)
{
    /* work_done() reads the vdso's monotonic clock on every pass (the frames wanted) and,
     * with --cpu, the thread's CPU clock only every 10 ms. */
    while (!work_done(until))
        sink++;
}

NOINLINE void wl_recurse(int depth, double until);
NOINLINE void wl_recurse(int depth, double until)
{
    if (depth <= 1)
        wl_hot_leaf(until);
    else
        wl_recurse(depth - 1, until);
    sink++; /* work after the call: no tail call */
}

static void *fork_loader_spinner(void *arg)
{
    (void)arg;
    for (;;)
        wl_recurse(10, now_s() + 0.01);
    return NULL;
}

static int wl_count_module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)info;
    (void)size;
    (void)data;
    sink++;
    return 0;
}

#define HOT_FUNCTION(name)                                 \
    NOINLINE void name(double until);                      \
    NOINLINE void name(double until)                       \
    {                                                      \
        while (!work_done(until))                          \
            for (int i = 0; i < 5000; i++)                 \
                sink ^= (uint64_t)i * 0x9e3779b97f4a7c15u; \
        sink++;                                            \
    }
HOT_FUNCTION(wl_thread_alpha)
HOT_FUNCTION(wl_thread_beta)
HOT_FUNCTION(wl_thread_gamma)
HOT_FUNCTION(wl_thread_delta)
HOT_FUNCTION(wl_worker_task_0)
HOT_FUNCTION(wl_worker_task_1)
HOT_FUNCTION(wl_worker_task_2)
HOT_FUNCTION(wl_worker_task_3)

static void (*const thread_functions[])(double) = {wl_thread_alpha, wl_thread_beta, wl_thread_gamma,
                                                   wl_thread_delta};
static void (*const worker_tasks[])(double) = {wl_worker_task_0, wl_worker_task_1, wl_worker_task_2,
                                               wl_worker_task_3};

typedef void (*marker_fn)(const char *name, int category, const char *text);

struct flood_arg {
    double seconds;
    double rate;
};

/* Writes markers numbered from 0 at about rate per second: tests check that what survives
 * eviction is exactly the newest run of numbers. */
static void *flood_main(void *p)
{
    const struct flood_arg *a = p;
    marker_fn marker;
    double start = now_s(), until = start + a->seconds;
    unsigned long seq = 0;
    char text[32];

    *(void **)&marker = dlsym(RTLD_DEFAULT, "fleetprof_marker");
    if (!marker) {
        fprintf(stderr, "workload: fleetprof_marker not found (is libfleetprof preloaded?)\n");
        exit(1);
    }
    while (now_s() < until) {
        double due = (now_s() - start) * a->rate;

        while ((double)seq < due) {
            snprintf(text, sizeof(text), "m %lu", seq++);
            marker("flood", 7, text);
        }
        usleep(2000);
    }
    printf("markers: %lu\n", seq);
    fflush(stdout);
    return NULL;
}

static void *flood_and_exit(void *a)
{
    flood_main(a);
    exit(0);
}

struct thread_arg {
    int index;
    double seconds; /* of work, from the thread's start (on work_clock) */
};

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    char name[16];

    snprintf(name, sizeof(name), "wl-worker-%d", a->index);
    pthread_setname_np(pthread_self(), name);
    thread_functions[a->index % 4](work_deadline(a->seconds));
    return NULL;
}

static volatile int *volatile wl_null;

NOINLINE void wl_crash_here(void);
NOINLINE void wl_crash_here(void)
{
    *wl_null = 42; /* SIGSEGV, address 0 */
}

NOINLINE void wl_abort_here(void);
NOINLINE void wl_abort_here(void)
{
    abort();
}

static sigjmp_buf segv_jump;
static volatile sig_atomic_t segv_calls;

static void on_segv(int sig)
{
    (void)sig;
    segv_calls++;
    siglongjmp(segv_jump, 1);
}

static int segv_handled(int n)
{
    struct sigaction sa, old;

    sigaction(SIGSEGV, NULL, &old);
    printf("segv_before=%s\n", old.sa_handler == SIG_DFL ? "default" : "other");
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_segv;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    for (int i = 0; i < n; i++) {
        if (sigsetjmp(segv_jump, 1) == 0)
            wl_crash_here();
        wl_recurse(3, now_s() + 0.01); /* goes on working after each recovery */
    }
    sigaction(SIGSEGV, NULL, &old);
    printf("segv_handled=%d\nsegv_after=%s\n", (int)segv_calls,
           old.sa_handler == on_segv ? "own" : "other");
    return segv_calls == n ? 0 : 7;
}

NOINLINE void wl_before_exec(double until);
NOINLINE void wl_before_exec(double until)
{
    while (!work_done(until))
        for (int i = 0; i < 10000; i++)
            sink += (uint64_t)i * 2246822519u;
}

NOINLINE void wl_worker_main(int index, double seconds);
NOINLINE void wl_worker_main(int index, double seconds)
{
    worker_tasks[index % 4](work_deadline(seconds));
    sink++;
}

/* pool: threads parked on a condition variable until the deadline, as a server's idle
 * workers are; none of them runs after it parked. */
struct pool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct timespec until; /* CLOCK_REALTIME, the condition variable's clock */
};

static void *pool_worker(void *arg)
{
    struct pool *p = arg;

    (void)pthread_mutex_lock(&p->lock);
    while (pthread_cond_timedwait(&p->cond, &p->lock, &p->until) != ETIMEDOUT)
        ;
    (void)pthread_mutex_unlock(&p->lock);
    return NULL;
}

static long peak_rss_kb(void)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");

    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        (void)fclose(f);
    return kb;
}

static int idle_pool(int n, double seconds)
{
    struct pool p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0, 0}};
    pthread_t th[256];
    struct rusage ru;
    double until;

    if (n < 0 || n > 256)
        return 2;
    (void)clock_gettime(CLOCK_REALTIME, &p.until);
    until = (double)p.until.tv_sec + (double)p.until.tv_nsec / 1e9 + seconds;
    p.until.tv_sec = (time_t)until;
    p.until.tv_nsec = (long)((until - (double)p.until.tv_sec) * 1e9);
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, pool_worker, &p) != 0)
            return 1;
    for (int i = 0; i < n; i++)
        (void)pthread_join(th[i], NULL);
    (void)getrusage(RUSAGE_SELF, &ru);
    /* The peak of this image's memory (VmHWM): ru_maxrss also counts, since exec, the
     * peak of the process that forked us (a Python parent: 10 MiB). */
    printf("max_rss_kb=%ld cpu_us=%ld\n", peak_rss_kb(),
           (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L + ru.ru_utime.tv_usec +
                   ru.ru_stime.tv_usec);
    return 0;
}

static void *thread_wait(void *arg)
{
    char c;

    return (void *)(intptr_t)read(*(int *)arg, &c, 1);
}

static int vm_max(void)
{
    size_t lo = 0, hi = (size_t)1 << 36;
    pthread_t th;
    int fds[2], r;

    while (hi - lo > ((size_t)1 << 20)) {
        size_t mid = lo + (hi - lo) / 2;
        void *p = malloc(mid);

        if (p)
            lo = mid;
        else
            hi = mid;
        free(p);
    }
    if (pipe(fds) < 0)
        return 3;
    r = pthread_create(&th, NULL, thread_wait, &fds[0]);
    if (r == 0) {
        (void)write(fds[1], "x", 1);
        (void)pthread_join(th, NULL);
    }
    printf("largest_malloc_mb=%zu thread=%s\n", lo >> 20, r ? strerror(r) : "ok");
    return 0;
}

/* Threads, then forked workers, until the process limit says no: what a program under
 * `ulimit -u` gets. Everything waits on one pipe so that all of it is alive at once. */
static int nproc_fill(uid_t uid, rlim_t limit, int forks)
{
    struct rlimit rl = {limit, limit};
    pthread_t th[256];
    int fds[2], threads = 0, forked = 0;

    if (uid != getuid() &&
        (setgroups(0, NULL) < 0 || setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) < 0 ||
         setresuid(uid, uid, uid) < 0))
        return 3;
    if (setrlimit(RLIMIT_NPROC, &rl) < 0 || pipe(fds) < 0)
        return 3;
    while (threads < 256 && pthread_create(&th[threads], NULL, thread_wait, &fds[0]) == 0)
        threads++;
    for (int i = 0; i < threads; i++)
        (void)write(fds[1], "x", 1);
    for (int i = 0; i < threads; i++)
        (void)pthread_join(th[i], NULL);
    for (; forked < forks; forked++) {
        pid_t pid = fork();

        if (pid < 0)
            break;
        if (pid == 0) {
            char c;

            _exit(read(fds[0], &c, 1) == 1 ? 0 : 1);
        }
    }
    for (int i = 0; i < forked; i++)
        (void)write(fds[1], "x", 1);
    while (wait(NULL) > 0)
        ;
    printf("threads=%d forks=%d of %d\n", threads, forked, forks);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode;
    double seconds;

    if (argc > 1 && !strcmp(argv[1], "--cpu")) {
        work_clock = CLOCK_THREAD_CPUTIME_ID;
        argv++;
        argc--;
    }
    mode = argc > 1 ? argv[1] : "busy";
    seconds = argc > 2 ? atof(argv[2]) : 1.0;

    if (!strcmp(mode, "busy")) {
        int depth = argc > 3 ? atoi(argv[3]) : 10;

        wl_recurse(depth, work_deadline(seconds));
    } else if (!strcmp(mode, "threads")) {
        int n = atoi(argv[2]);
        double s = argc > 3 ? atof(argv[3]) : 1.0;
        pthread_t th[64];
        struct thread_arg args[64];

        if (n > 64)
            n = 64;
        for (int i = 0; i < n; i++) {
            args[i] = (struct thread_arg){i, s};
            pthread_create(&th[i], NULL, thread_main, &args[i]);
        }
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
    } else if (!strcmp(mode, "prefork")) {
        int n = atoi(argv[2]);
        double s = argc > 3 ? atof(argv[3]) : 1.0;

        if (argc > 4) /* the master's runtime is fully up (threads, descriptors) first */
            wl_hot_leaf(work_deadline(atof(argv[4])));
        for (int i = 0; i < n; i++) {
            pid_t pid = fork();

            if (pid == 0) {
                wl_worker_main(i, s);
                _exit(0);
            }
        }
        wl_recurse(3, work_deadline(s / 2));
        while (wait(NULL) > 0)
            ;
    } else if (!strcmp(mode, "setuid-workers") && argc > 4) {
        int n = atoi(argv[2]), failed = 0, status;
        double s = atof(argv[3]);
        uid_t uid = (uid_t)atol(argv[4]);
        const char *way = argc > 5 ? argv[5] : "setuid";

        /* after-execs: first 10 children that exec /bin/true at once, one at a time, as a
         * spawner's are; the workers forked after them drop with setuid. */
        for (int i = 0; !strcmp(way, "after-execs") && i < 10; i++) {
            pid_t pid = fork();

            if (pid == 0) {
                execl("/bin/true", "true", (char *)NULL);
                _exit(127);
            }
            if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
                WEXITSTATUS(status) != 0)
                return 7;
        }
        for (int i = 0; i < n; i++) {
            pid_t pid = fork();

            if (pid == 0) {
                bool late = !strcmp(way, "late");

                if (late)
                    wl_worker_main(i, s / 2);
                if (setgroups(0, NULL) < 0 || setgid((gid_t)uid) < 0 ||
                    (!strcmp(way, "setresuid") ? setresuid(uid, uid, uid) : setuid(uid)) < 0)
                    _exit(7);
                wl_worker_main(i, late ? s / 2 : s);
                _exit(0);
            }
        }
        wl_recurse(3, work_deadline(s / 2));
        while (wait(&status) > 0)
            failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        return failed ? 7 : 0;
    } else if (!strcmp(mode, "chroot") && argc > 3) {
        double s = atof(argv[3]);
        int status = 0;
        pid_t pid;

        if (chroot(argv[2]) < 0 || chdir("/") < 0)
            return 3;
        wl_recurse(3, work_deadline(s));
        pid = fork();
        if (pid == 0) {
            char cwd[8];

            wl_worker_main(0, s);
            _exit(getcwd(cwd, sizeof(cwd)) && !strcmp(cwd, "/") ? 0 : 8);
        }
        if (pid < 0 || waitpid(pid, &status, 0) != pid)
            return 7;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 7;
    } else if (!strcmp(mode, "vm-max")) {
        return vm_max();
    } else if (!strcmp(mode, "nproc") && argc > 4) {
        return nproc_fill((uid_t)atol(argv[2]), (rlim_t)atol(argv[3]), atoi(argv[4]));
    } else if (!strcmp(mode, "dlopen")) {
        double until = work_deadline(seconds);
        unsigned long loops = 0;

        while (!work_done(until)) {
            void *h = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);

            if (!h) {
                fprintf(stderr, "workload: dlopen %s: %s\n", argv[3], dlerror());
                return 1;
            }
            dlclose(h);
            loops++;
        }
        printf("dlopen loops: %lu\n", loops);
    } else if (!strcmp(mode, "dlopen-stay")) {
        /* Loaded after the runtime described the process, and still loaded at exit. */
        if (!dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)) {
            fprintf(stderr, "workload: dlopen %s: %s\n", argv[2], dlerror());
            return 1;
        }
    } else if (!strcmp(mode, "exec")) {
        char arg[32];

        snprintf(arg, sizeof(arg), "%g", seconds);
        if (work_clock != CLOCK_MONOTONIC)
            execl("/proc/self/exe", argv[0], "--cpu", "busy", arg, (char *)NULL);
        else
            execl("/proc/self/exe", argv[0], "busy", arg, (char *)NULL);
        perror("execl");
        return 1;
    } else if (!strcmp(mode, "burn-exec") && argc > 3) {
        wl_before_exec(work_deadline(seconds));
        if (work_clock != CLOCK_MONOTONIC)
            execl("/proc/self/exe", argv[0], "--cpu", "busy", argv[3], (char *)NULL);
        else
            execl("/proc/self/exe", argv[0], "busy", argv[3], (char *)NULL);
        perror("execl");
        return 1;
    } else if (!strcmp(mode, "exit-underscore")) {
        wl_recurse(4, work_deadline(seconds));
        _exit(3);
    } else if (!strcmp(mode, "wait-signal")) {
        wl_recurse(5, work_deadline(3600));
    } else if (!strcmp(mode, "flood")) {
        struct flood_arg a = {seconds, argc > 3 ? atof(argv[3]) : 100000};

        flood_main(&a); /* its last line, "markers: N", is where the exit begins */
    } else if (!strcmp(mode, "pause-main")) {
        static struct flood_arg a;
        pthread_t th;

        a = (struct flood_arg){seconds, argc > 3 ? atof(argv[3]) : 100000};
        pthread_create(&th, NULL, flood_and_exit, &a);
        for (;;)
            pause(); /* the main thread never runs again; the flood thread exits */
    } else if (!strcmp(mode, "fork-exec")) {
        int n = atoi(argv[2]), killed = 0;

        for (int i = 0; i < n; i++) {
            pid_t pid = fork();
            int status;

            if (pid == 0) {
                static char *const empty[] = {NULL};
                char *const *prog = argc > 3 ? argv + 3 : NULL;

                if (prog && !strcmp(prog[0], "--clear-env"))
                    execve(prog[1], prog + 1, empty);
                else if (prog)
                    execv(prog[0], prog);
                else
                    execl("/bin/true", "true", (char *)NULL);
                _exit(127);
            }
            if (waitpid(pid, &status, 0) == pid && WIFSIGNALED(status)) {
                fprintf(stderr, "child %d killed by signal %d\n", (int)pid, WTERMSIG(status));
                killed++;
            }
        }
        printf("killed: %d\n", killed);
        return killed ? 1 : 0;
    } else if (!strcmp(mode, "fork-loader") && argc > 2) {
        int n = atoi(argv[2]), hung = 0, failed = 0;
        pthread_t spinners[3];

        /* More stacks for the sampler to walk while the main thread forks. */
        for (int i = 0; i < 3; i++)
            if (pthread_create(&spinners[i], NULL, fork_loader_spinner, NULL) != 0)
                return 4;

        for (int i = 0; i < n; i++) {
            pid_t pid = fork(), w;
            double deadline = now_s() + 20.0;
            int status;

            if (pid == 0) {
                const struct timespec nap = {0, 30 * 1000 * 1000};

                (void)nanosleep(&nap, NULL);
                (void)dl_iterate_phdr(wl_count_module, NULL);
                _exit(0);
            }
            if (pid < 0)
                return 4;
            while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < deadline)
                wl_recurse(10, now_s() + 0.001); /* deep stacks for the sampler to walk */
            if (w == 0) {
                fprintf(stderr, "child %d hung\n", (int)pid);
                (void)kill(pid, SIGKILL);
                (void)waitpid(pid, &status, 0);
                hung++;
            } else if (w == pid && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
                fprintf(stderr, "child %d ended with status 0x%x\n", (int)pid, status);
                failed++;
            }
        }
        printf("hung=%d failed=%d\n", hung, failed);
        return hung || failed ? 1 : 0;
    } else if (!strcmp(mode, "fork-low-nofile")) {
        struct rlimit rl = {300, 300};
        pid_t pid;
        int status;

        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
            perror("setrlimit");
            return 1;
        }
        pid = fork();
        if (pid == 0) {
            char list[256] = "";
            double until = now_s() + 10;

            while (!strstr(list, "statm") && now_s() < until) {
                list[0] = '\0';
                for (int fd = 0; fd < 300; fd++) {
                    char target[256];

                    if (!fd_target(fd, target, sizeof(target)))
                        continue;
                    if (strstr(target, "/statm") || strstr(target, ".chunks"))
                        (void)snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d:%s",
                                       list[0] ? "," : "", fd,
                                       strstr(target, "/statm") ? "statm" : "chunks");
                }
            }
            printf("runtime_fds=%s\n", list);
            fflush(stdout);
            _exit(0);
        }
        return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    } else if (!strcmp(mode, "fork-exec-fds")) {
        double forked = now_s(); /* before the fork: the runtime's own clock starts after */
        pid_t pid = fork();
        int status;

        if (pid == 0) {
            int described = -1;

            /* From the top: the runtime keeps its descriptors high (a quick look). */
            for (int fd = 1023; fd >= 0 && described < 0; fd--) {
                char target[256];

                if (!fd_target(fd, target, sizeof(target)))
                    continue;
                /* Past the header's fixed page (buffer/region.h): the description areas,
                 * sparse until the process is first described. */
                if (strstr(target, ".chunks"))
                    described = lseek(fd, 4096, SEEK_DATA) >= 0;
            }
            printf("chunk_file_described=%d after_us=%.0f\n", described, (now_s() - forked) * 1e6);
            fflush(stdout);
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    } else if (!strcmp(mode, "bad-fp")) {
        long n = 300000000;

        __asm__ volatile("push %%rbp\n\tmov $-16, %%rbp\n1: dec %0\n\tjnz 1b\n\tpop %%rbp"
                         : "+r"(n)
                         :
                         : "memory", "cc");
    } else if (!strcmp(mode, "close-fds") && argc > 3) {
        const char *how = argv[2];
        double s = atof(argv[3]);
        char buf[8];
        int fd;

        wl_recurse(3, work_deadline(s / 2));
        if (!strcmp(how, "range"))
            (void)close_range(3, ~0u, 0);
        else if (!strcmp(how, "from"))
            closefrom(3);
        else
            for (long i = 3, max = sysconf(_SC_OPEN_MAX); i < (max > 0 ? max : 1024); i++)
                (void)close((int)i);
        /* The program's own descriptors work as before. */
        fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, buf, sizeof(buf)) <= 0 || close(fd) != 0)
            return 4;
        wl_recurse(3, work_deadline(s / 2));
    } else if (!strcmp(mode, "open-max")) {
        /* Works, then opens files until it cannot, and says how many and why not. */
        int n = 0;

        wl_recurse(3, work_deadline(seconds));
        while (open("/dev/null", O_RDONLY) >= 0)
            n++;
        printf("opened %d, then: %s\n", n, strerror(errno));
        wl_recurse(3, work_deadline(seconds));
    } else if (!strcmp(mode, "close-fill") && argc > 3) {
        /* Works, puts /dev/null on every number past 2 up to its limit (dup2, as a
         * daemon does onto 0..2), so that nothing else can open a descriptor (a profiler that
         * lost its connection cannot reconnect), says how many it holds, and works on. */
        struct rlimit rl;
        int n = 0, more = 0, null = open("/dev/null", O_RDONLY);

        wl_recurse(3, work_deadline(atof(argv[2])));
        if (null < 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0)
            return 3;
        for (int fd = 3; fd < (int)rl.rlim_cur; fd++)
            n += fd == null || dup2(null, fd) == fd;
        /* Numbers freed behind the sweep (none without a profiler; a profiler may let go
         * of one it held there) are taken too: the table is full. */
        while (open("/dev/null", O_RDONLY) >= 0)
            more++;
        printf("filled %d, then %d more\n", n, more);
        (void)fflush(stdout);
        wl_recurse(3, work_deadline(atof(argv[3])));
    } else if (!strcmp(mode, "daemonize")) {
        int fds[16];
        ino_t inodes[16];
        pid_t worker;
        int status = 0;

        struct stat null_st;
        int null_fd = open("/dev/null", O_RDWR);

        /* daemon(3): stdin and stdout to /dev/null (numbers the runtime may have been
         * given if the program started with them closed) */
        if (null_fd < 0 || fstat(null_fd, &null_st) != 0 || dup2(null_fd, 0) != 0 ||
            dup2(null_fd, 1) != 1)
            return 4;
        (void)close_range(3, ~0u, 0);
        for (int i = 0; i < 16; i += 2) {
            if (pipe(fds + i) != 0)
                return 4;
        }
        for (int i = 0; i < 16; i++) {
            struct stat st;

            if (fstat(fds[i], &st) != 0)
                return 4;
            inodes[i] = st.st_ino;
        }
        worker = fork();
        if (worker < 0)
            return 4;
        wl_recurse(3, work_deadline(seconds));
        for (int i = 0; i < 16; i += 2) {
            struct stat st;
            char c = 'x';

            if (fstat(fds[i], &st) != 0 || st.st_ino != inodes[i] || fstat(fds[i + 1], &st) != 0 ||
                st.st_ino != inodes[i + 1] || write(fds[i + 1], &c, 1) != 1 ||
                read(fds[i], &c, 1) != 1 || c != 'x') {
                fprintf(stderr, "workload: %s: pipe %d/%d is no longer ours\n",
                        worker == 0 ? "worker" : "master", fds[i], fds[i + 1]);
                if (worker == 0)
                    _exit(5);
                status = 5;
            }
        }
        for (int fd = 0; fd < 2; fd++) {
            struct stat st;

            if (fstat(fd, &st) != 0 || st.st_ino != null_st.st_ino || st.st_dev != null_st.st_dev) {
                fprintf(stderr, "workload: %s: descriptor %d is no longer /dev/null\n",
                        worker == 0 ? "worker" : "master", fd);
                if (worker == 0)
                    _exit(5);
                status = 5;
            }
        }
        if (worker == 0)
            _exit(0);
        if (waitpid(worker, &status, 0) == worker && WIFEXITED(status) && WEXITSTATUS(status))
            return WEXITSTATUS(status);
        return status;
    } else if (!strcmp(mode, "own-sigprof")) {
        struct sigaction sa, back;
        struct itimerval it = {{0, 10000}, {0, 10000}}, off = {{0, 0}, {0, 0}};
        double until;

        for (int sig = 1; sig < NSIG; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                (void)signal(sig, SIG_DFL);
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_own_sigprof;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGPROF, &sa, NULL) != 0 || sigaction(SIGPROF, NULL, &back) != 0 ||
            back.sa_sigaction != on_own_sigprof)
            return 6;
        setitimer(ITIMER_PROF, &it, NULL);
        until = clock_s(CLOCK_PROCESS_CPUTIME_ID) + seconds;
        while (clock_s(CLOCK_PROCESS_CPUTIME_ID) < until)
            for (int i = 0; i < 10000; i++)
                sink += (uint64_t)i * 2654435761u;
        setitimer(ITIMER_PROF, &off, NULL);
        printf("own_sigprof=%d\n", (int)own_sigprof_calls);
    } else if (!strcmp(mode, "title") && argc > 3) {
        size_t room = strlen(argv[0]);

        /* setproctitle's way: the title over argv[0], the rest of it cleared. */
        memset(argv[0], 0, room);
        memcpy(argv[0], argv[3], strlen(argv[3]) < room ? strlen(argv[3]) : room);
        wl_recurse(4, work_deadline(seconds));
    } else if (!strcmp(mode, "segv")) {
        wl_recurse(4, work_deadline(seconds));
        wl_crash_here();
    } else if (!strcmp(mode, "abort")) {
        wl_recurse(4, work_deadline(seconds));
        wl_abort_here();
    } else if (!strcmp(mode, "segv-handled")) {
        return segv_handled(atoi(argv[2]));
    } else if (!strcmp(mode, "clock")) {
        wl_clock_loop(work_deadline(seconds));
    } else if (!strcmp(mode, "pool")) {
        return idle_pool(atoi(argv[2]), argc > 3 ? atof(argv[3]) : 1.0);
    } else if (!strcmp(mode, "idle")) {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};

        /* A signal (the profiler's first sample) may interrupt the sleep: finish it. */
        while (nanosleep(&ts, &ts) != 0)
            ;
    } else if (!strcmp(mode, "fork-idle")) {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
        pid_t pid = fork();
        char line[32];
        int n, status;

        if (pid == 0) {
            while (nanosleep(&ts, &ts) != 0) /* interrupted: finish the sleep */
                ;
            _exit(0);
        }
        if (pid < 0)
            return 1;
        /* write(2), not stdio: the line is out before the master does anything else. */
        n = snprintf(line, sizeof(line), "child %d\n", (int)pid);
        if (write(STDOUT_FILENO, line, (size_t)n) != n)
            return 1;
        return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    } else {
        fprintf(stderr, "workload: unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
