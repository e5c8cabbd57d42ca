/* child/core/cpu-timer.c - each thread's CPU-time timer: the kernel sends the sampling
 * signal to the thread itself, each interval of the thread's own CPU time, on the CPU where
 * it runs. A thread that waits uses no CPU, so it is never signalled, and its waits return
 * as they would without us.
 *
 * Two kinds (docs/threading.md, "Sampling"):
 *   - a POSIX timer on the thread's CPU clock (timer_create(CLOCK_THREAD_CPUTIME_ID),
 *     SIGEV_THREAD_ID), the default: always there, no descriptor. The kernel checks CPU
 *     timers at its tick (250 Hz here), so a 1 ms timer fires at most once per tick; each
 *     capture reads the thread's CPU clock and a sample weighs the CPU used since the
 *     previous one, so totals are exact at any rate. The expiry is handled as the thread
 *     returns to user mode (POSIX_CPU_TIMERS_TASK_WORK): a system call's CPU lands on its
 *     call site, as perf's user-level leaf puts it, and no signal is left pending to cut a
 *     wait short.
 *   - a perf task-clock event (perf_event_open, F_SETSIG + F_SETOWN_EX to the thread): an
 *     hrtimer, so a true 1 kHz, but a descriptor per thread (at most RT_PERF_MAX_THREADS
 *     a process), and user time only: an event that counts kernel time overflows inside
 *     system calls, and the signal it queues there cut the poll() or nanosleep() that
 *     followed with EINTR (measured: 31-56 of 4,674 waits). With user time only, a system
 *     call's CPU goes to the next sample's stack instead of its own. So it is used when
 *     asked (FLEETPROF_TIMER=perf), or for a thread the kernel gives no POSIX timer: each
 *     holds a queued signal, counted in RLIMIT_SIGPENDING per user, while a perf event's
 *     signal is not.
 * FLEETPROF_TIMER chooses (auto, perf, thread, tick: the sampler's old wall-clock tick). A
 * thread the kernel gives neither (RLIMIT_SIGPENDING reached: each POSIX timer holds a
 * queued signal, counted per user) falls back to the other kind, then to no samples, with
 * the reason in profilingLog.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "child/core/core.h"
#include "common/map.h"

/* Perf events a process keeps at most (each a descriptor in the runtime's band). */
#define RT_PERF_MAX_THREADS 16

/* The process's preferred kind, and why (decided at its first arm). */
static _Atomic int engine = RT_TIMER_AUTO;
static char engine_why[320];
/* 0, or -1 once the kernel refused a perf event (or the program needed every descriptor). */
static _Atomic int perf_level = 0; /* -1 once refused */
static _Atomic int perf_in_use;
/* The first failure to arm a thread's timer, and threads armed by kind. */
static char failure[200];
static _Atomic bool failure_set;
static _Atomic uint32_t armed_by_kind[RT_TIMER_NONE + 1];

static void note_failure(const char *what, int err)
{
    bool expected = false;
    struct rlimit rl;
    char limit[80] = "";

    if (!atomic_compare_exchange_strong(&failure_set, &expected, true))
        return;
    if (err == EAGAIN && getrlimit(RLIMIT_SIGPENDING, &rl) == 0)
        (void)snprintf(limit, sizeof(limit), " (RLIMIT_SIGPENDING %llu reached: ulimit -i)",
                       (unsigned long long)rl.rlim_cur);
    (void)snprintf(failure, sizeof(failure), "%s: %s%s", what, strerror(err), limit);
    rt_debug("%s", failure);
}

static uint64_t interval_ns(void)
{
    return atomic_load_explicit(&rt.cfg.interval_ns, memory_order_relaxed);
}

/* A perf task-clock event counting thread tid's CPU, its overflow signalled to that
 * thread; kernel time counted when allowed. The descriptor, or -errno. */
static int perf_open(int32_t tid)
{
    struct perf_event_attr attr;
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    int fd;

    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = interval_ns();
    attr.wakeup_events = 1;
    attr.exclude_hv = 1;
    attr.exclude_kernel = 1;        /* see the top of this file */
    rt_fds_capture(RT_FDS_CAPTURE); /* not on 0, 1 or 2 */
    fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        int err = errno;

        rt_fds_capture(RT_FDS_CAPTURE_OFF);
        if (err == EACCES || err == EPERM || err == ENOENT || err == ENOSYS)
            atomic_store(&perf_level, -1);
        return -err;
    }
    fd = rt_fd_relocate(fd);
    rt_fd_protect(fd);
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    if (fcntl(fd, F_SETSIG, RT_SAMPLE_SIGNAL) < 0 || fcntl(fd, F_SETOWN_EX, &owner) < 0 ||
        fcntl(fd, F_SETFL, O_ASYNC) < 0) {
        int err = errno;

        rt_fd_release(fd);
        return -err;
    }
    return fd;
}

/* The thread's CPU clock now (any thread's, from any thread). */
static uint64_t cpu_now(const struct rt_thread *t)
{
    struct timespec ts;

    if (clock_gettime(t->cpu_clock, &ts) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A POSIX timer on thread t's CPU clock, signalling t; its first expiry at a random point
 * of the first interval (as Go does: a thread that lives less than an interval is sampled
 * with the probability of its share of one, not never). The timer id, or -errno. */
static int thread_timer_open(struct rt_thread *t)
{
    struct sigevent sev;
    struct itimerspec its;
    uint64_t iv = interval_ns(), first;
    int id;

    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = RT_SAMPLE_SIGNAL;
    sev.sigev_value.sival_ptr = (void *)t;
    sev._sigev_un._tid = t->tid;
    if (syscall(SYS_timer_create, t->cpu_clock, &sev, &id) < 0)
        return -errno;
    first = 1 + fleetprof_map_mix64(rt_now_ns() ^ (uint64_t)t->tid) % iv;
    /* The handler finds an expiry's CPU by counting whole intervals from the last one; the
     * first is `first` from now, so the count starts an interval before (modulo 2^64). The
     * capture still weighs only what the thread used since t->timer_cpu_ns: weighed as a
     * whole interval, every thread was charged up to an interval it never used (2.5 % of a
     * 20 ms process). */
    t->timer_grid_ns = cpu_now(t) + first - iv;
    its.it_value.tv_sec = (time_t)(first / 1000000000u);
    its.it_value.tv_nsec = (long)(first % 1000000000u);
    its.it_interval.tv_sec = (time_t)(iv / 1000000000u);
    its.it_interval.tv_nsec = (long)(iv % 1000000000u);
    if (syscall(SYS_timer_settime, id, 0, &its, NULL) < 0) {
        int err = errno;

        (void)syscall(SYS_timer_delete, id);
        return -err;
    }
    return id;
}

/* The process's kind, decided once (a forked child keeps its parent's). */
static enum rt_timer_kind preferred(void)
{
    int e = atomic_load(&engine);

    if (e != RT_TIMER_AUTO)
        return e;
    switch (rt.cfg.timer) {
    case RT_TIMER_TICK:
        e = RT_TIMER_TICK;
        (void)snprintf(engine_why, sizeof(engine_why), "FLEETPROF_TIMER=tick");
        break;
    case RT_TIMER_THREAD_CPU:
        e = RT_TIMER_THREAD_CPU;
        (void)snprintf(engine_why, sizeof(engine_why), "FLEETPROF_TIMER=thread");
        break;
    case RT_TIMER_PERF:
        e = RT_TIMER_PERF;
        (void)snprintf(engine_why, sizeof(engine_why), "FLEETPROF_TIMER=perf");
        break;
    default:
        e = RT_TIMER_THREAD_CPU;
        /* A constant: a start reads no file (a short-lived process pays for each). */
        (void)snprintf(engine_why, sizeof(engine_why),
                       "the default: CPU-clock timers, checked at the kernel's tick, each "
                       "sample weighted by the CPU it stands for (FLEETPROF_TIMER=perf for perf "
                       "task-clock events, user time only)");
        break;
    }
    atomic_store(&engine, e);
    return e;
}

static int arm_perf(struct rt_thread *t)
{
    int fd;

    if (atomic_load(&perf_level) == -1)
        return -EACCES;
    if (atomic_fetch_add(&perf_in_use, 1) >= RT_PERF_MAX_THREADS) {
        atomic_fetch_sub(&perf_in_use, 1);
        return -EMFILE;
    }
    fd = perf_open(t->tid);
    if (fd < 0) {
        atomic_fetch_sub(&perf_in_use, 1);
        return fd;
    }
    t->timer_fd = fd;
    return 0;
}

static int arm_thread_timer(struct rt_thread *t)
{
    int id = thread_timer_open(t);

    if (id < 0)
        return id;
    t->timer_id = id;
    return 0;
}

enum rt_timer_kind rt_cpu_timer_arm(struct rt_thread *t, uint64_t from_cpu_ns)
{
    enum rt_timer_kind want = preferred(), got = RT_TIMER_NONE;
    int r;

    t->timer_fd = -1;
    t->timer_id = -1;
    t->timer_cpu_ns = from_cpu_ns == RT_CPU_NOW ? cpu_now(t) : from_cpu_ns;
    t->timer_grid_ns = t->timer_cpu_ns;
    t->timer_interval_ns = interval_ns();
    if (t->timer_interval_ns == 0) { /* not configured: the runtime never started */
        atomic_store_explicit(&t->timer_armed, true, memory_order_release);
        return RT_TIMER_NONE;
    }
    if (want == RT_TIMER_TICK) {
        got = RT_TIMER_TICK;
    } else {
        /* The preferred kind, then the other one. */
        r = want == RT_TIMER_PERF ? arm_perf(t) : arm_thread_timer(t);
        if (r == 0) {
            got = want;
        } else {
            int r2;

            if (r != -EMFILE || want != RT_TIMER_PERF)
                note_failure(want == RT_TIMER_PERF ? "perf_event_open" : "timer_create", -r);
            r2 = want == RT_TIMER_PERF ? arm_thread_timer(t) : arm_perf(t);
            if (r2 == 0)
                got = want == RT_TIMER_PERF ? RT_TIMER_THREAD_CPU : RT_TIMER_PERF;
            else if (r != -EAGAIN && r2 != -EAGAIN)
                got = RT_TIMER_TICK; /* a kernel without either: the sampler's tick */
        }
    }
    t->no_timer = got == RT_TIMER_NONE;
    atomic_fetch_add(&armed_by_kind[got], 1);
    atomic_store_explicit(&t->timer_kind, got, memory_order_release);
    atomic_store_explicit(&t->timer_armed, true, memory_order_release);
    return got;
}

void rt_cpu_timer_disarm(struct rt_thread *t)
{
    int kind = atomic_exchange(&t->timer_kind, RT_TIMER_NONE);

    if (kind == RT_TIMER_PERF && t->timer_fd >= 0) {
        rt_fd_release(t->timer_fd);
        atomic_fetch_sub(&perf_in_use, 1);
    } else if (kind == RT_TIMER_THREAD_CPU && t->timer_id >= 0) {
        (void)syscall(SYS_timer_delete, t->timer_id);
    }
    t->timer_fd = -1;
    t->timer_id = -1;
}

/* Stops or restarts the thread's timer in place (the thread blocks the signal meanwhile).
 * Only the thread itself calls it. */
void rt_cpu_timer_pause(struct rt_thread *t, bool pause)
{
    int kind = atomic_load(&t->timer_kind);

    if (t->timer_paused == pause)
        return;
    t->timer_paused = pause;
    if (!pause) { /* its CPU while blocked was written without a stack (sampler.c) */
        struct timespec ts;

        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
            t->timer_cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        t->timer_grid_ns = t->timer_cpu_ns; /* re-armed below, a whole interval away */
    }
    if (kind == RT_TIMER_PERF && t->timer_fd >= 0) {
        (void)ioctl(t->timer_fd, pause ? PERF_EVENT_IOC_DISABLE : PERF_EVENT_IOC_ENABLE, 0);
    } else if (kind == RT_TIMER_THREAD_CPU && t->timer_id >= 0) {
        uint64_t iv = interval_ns();
        struct itimerspec its = {{(time_t)(iv / 1000000000u), (long)(iv % 1000000000u)},
                                 {(time_t)(iv / 1000000000u), (long)(iv % 1000000000u)}};

        if (pause)
            memset(&its, 0, sizeof(its));
        (void)syscall(SYS_timer_settime, t->timer_id, 0, &its, NULL);
    }
}

void rt_cpu_timer_set_interval(struct rt_thread *t, uint64_t ns)
{
    int kind = atomic_load(&t->timer_kind);

    if (kind == RT_TIMER_PERF && t->timer_fd >= 0) {
        (void)ioctl(t->timer_fd, PERF_EVENT_IOC_PERIOD, &ns);
    } else if (kind == RT_TIMER_THREAD_CPU && t->timer_id >= 0 && !t->timer_paused) {
        struct itimerspec its = {{(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)},
                                 {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)}};

        (void)syscall(SYS_timer_settime, t->timer_id, 0, &its, NULL);
    }
}

void rt_cpu_timer_forget_after_fork(struct rt_thread *t)
{
    /* The parent's timers are not the child's (POSIX timers are not inherited; a perf
     * event's descriptor is, and still counts the parent's thread). */
    if (atomic_load(&t->timer_kind) == RT_TIMER_PERF && t->timer_fd >= 0)
        (void)close(t->timer_fd);
    atomic_store(&t->timer_kind, RT_TIMER_NONE);
}

void rt_cpu_timer_after_fork(void)
{
    atomic_store(&perf_in_use, 0);
    for (int k = 0; k <= RT_TIMER_NONE; k++)
        atomic_store(&armed_by_kind[k], 0);
}

const char *rt_cpu_timer_kind_name(int kind)
{
    switch (kind) {
    case RT_TIMER_PERF:
        return "perf-task-clock";
    case RT_TIMER_THREAD_CPU:
        return "thread-cpu-timer";
    case RT_TIMER_TICK:
        return "tick";
    case RT_TIMER_NONE:
        return "none";
    default:
        return "auto";
    }
}

void rt_cpu_timer_report(struct rt_cpu_timer_report *r)
{
    int e = atomic_load(&engine);

    memset(r, 0, sizeof(*r));
    r->engine = rt_cpu_timer_kind_name(e == RT_TIMER_AUTO ? RT_TIMER_NONE : e);
    r->why = e == RT_TIMER_AUTO ? "no thread registered" : engine_why;
    r->failure = atomic_load(&failure_set) ? failure : NULL;
    for (int k = 0; k <= RT_TIMER_NONE; k++)
        r->threads[k] = atomic_load(&armed_by_kind[k]);
}

/* Thread t's perf event gives way to a POSIX timer (its descriptor is the program's now, or
 * the program needs every descriptor). Registry lock held. */
static void perf_to_thread_timer(struct rt_thread *t, bool close_fd)
{
    if (atomic_load(&t->timer_kind) != RT_TIMER_PERF)
        return;
    atomic_store(&t->timer_kind, RT_TIMER_NONE);
    if (close_fd)
        rt_fd_release(t->timer_fd);
    else
        rt_fd_unprotect(t->timer_fd);
    atomic_fetch_sub(&perf_in_use, 1);
    t->timer_fd = -1;
    if (t->live && arm_thread_timer(t) == 0)
        atomic_store(&t->timer_kind, RT_TIMER_THREAD_CPU);
}

bool rt_cpu_timer_yield_fd(int fd)
{
    struct rt_thread *t = NULL;
    bool found = false;

    (void)pthread_mutex_lock(&rt.registry_lock);
    for (size_t i = 0; i < rt.thread_count && !found; i++) {
        t = rt.threads[i];
        found = t && atomic_load(&t->timer_kind) == RT_TIMER_PERF && t->timer_fd == fd;
    }
    if (found)
        perf_to_thread_timer(t, false); /* the number is the program's: not closed */
    (void)pthread_mutex_unlock(&rt.registry_lock);
    return found;
}

bool rt_cpu_timer_give_up_fds(void)
{
    bool any = atomic_load(&perf_in_use) > 0;

    atomic_store(&perf_level, -1); /* no more perf events in this process */
    (void)pthread_mutex_lock(&rt.registry_lock);
    for (size_t i = 0; i < rt.thread_count; i++)
        if (rt.threads[i])
            perf_to_thread_timer(rt.threads[i], true);
    (void)pthread_mutex_unlock(&rt.registry_lock);
    return any;
}

void rt_cpu_timer_disarm_all(void)
{
    (void)pthread_mutex_lock(&rt.registry_lock);
    for (size_t i = 0; i < rt.thread_count; i++)
        if (rt.threads[i] && rt.threads[i]->live)
            rt_cpu_timer_disarm(rt.threads[i]);
    (void)pthread_mutex_unlock(&rt.registry_lock);
}
