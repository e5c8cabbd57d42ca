/* child/core/crash.c - a Crash record for the fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGABRT), so that the profile recovered from a crashed process's chunks shows where and
 * how it died.
 *
 * Our handler is installed only where the program's disposition is the default, and the
 * program never sees it: sigaction() and the signal() family report SIG_DFL for it
 * (preload.c, through rt_crash_program_sigaction()); a program that installs its own handler (a
 * JIT's guard pages, a crash reporter) gets it installed for real in ours's place, and so called
 * exactly as without fleetprof; setting SIG_DFL again puts ours back. The handler is
 * SA_RESETHAND: the default is back before it runs. It records the signal, the faulting
 * address and the crashing thread's stack (frame pointers) into the chunk region, then lets
 * the default action happen: a fault returns and faults again, a sent signal is raised
 * again. So the wait status and core dump are the program's own.
 *
 * SIGTERM and SIGINT left at the default get a stand-in the same way (armed when the runtime
 * first starts, with or without a region): its handler never returns to the program, which
 * would then see an EINTR, a raise() that returned, a process that went on. It hands the
 * signal to the sampler, which writes the exit profile and ends the process by that signal
 * (the lifecycle's exit-signal hook), and waits; past EXIT_WAIT_MS (the profile could not be
 * written: a lock the interrupted thread holds?) it takes the default action itself: with a daemon,
 * the profile is then recovered from the region, without one from the chunk file. A second
 * signal ends the process at once. A program that installs its own handler (Python's SIGINT
 * for KeyboardInterrupt) gets it for real and ends through its own exit path.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "child/core/core.h"

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static const int exit_signals[] = {SIGTERM, SIGINT};

#define EXIT_WAIT_MS 5000

static _Atomic bool armed, exit_armed;
static _Atomic int exit_pending; /* an exit signal was handed to the sampler */

static bool is_exit_signal(int sig)
{
    return sig == SIGTERM || sig == SIGINT;
}

bool rt_crash_signal(int sig)
{
    for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++)
        if (crash_signals[i] == sig)
            return true;
    return false;
}

static void crash_handler(int sig, siginfo_t *info, void *ucontext)
{
    int saved_errno = errno;
    uint64_t frames[RT_CRASH_FRAMES];
    uint64_t address = info->si_code > 0 ? (uint64_t)(uintptr_t)info->si_addr : 0;
    int32_t tid = (int32_t)syscall(SYS_gettid);
    uint32_t n;
    sigset_t self;

    /* The record first, with the faulting pc only: if walking this stack faults again, the
     * default action (already back) ends the process with the record made. */
    frames[0] = (uint64_t)((const ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
    rt_region_record_crash(sig, info->si_code, address, tid, frames, 1);
    n = rt_stackwalk_crash(frames, RT_CRASH_FRAMES, rt_self, ucontext);
    if (n > 1)
        rt_region_record_crash_frames(frames, n);
    errno = saved_errno;
    /* The disposition is the default again (SA_RESETHAND). A fault comes back when the
     * instruction runs again; a signal that was sent (kill, raise, abort) must be sent
     * again, and is delivered at once (SA_NODEFER left it unblocked). */
    if (info->si_code <= 0 || sig == SIGABRT) {
        (void)sigemptyset(&self);
        (void)sigaddset(&self, sig);
        (void)rt_sigmask_raw(SIG_UNBLOCK, &self, NULL);
        (void)syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
    }
}

/* The default action now, from a handler: the default back, the signal unblocked and sent
 * to this thread again. */
static void default_action_now(int sig)
{
    struct sigaction dfl;
    sigset_t self;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    (void)sigemptyset(&dfl.sa_mask);
    (void)rt_real_sigaction(sig, &dfl, NULL);
    (void)sigemptyset(&self);
    (void)sigaddset(&self, sig);
    (void)rt_sigmask_raw(SIG_UNBLOCK, &self, NULL);
    (void)syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
}

/* Sleeps ms in a signal handler (nanosleep is async-signal-safe). */
static void wait_ms(int ms)
{
    for (int waited = 0; waited < ms; waited += 10) {
        const struct timespec tick = {0, 10 * 1000 * 1000};

        (void)nanosleep(&tick, NULL);
    }
}

static void exit_handler(int sig, siginfo_t *info, void *ucontext)
{
    int saved_errno = errno;
    int32_t exiting;

    (void)info;
    (void)ucontext;
    exiting = atomic_load(&rt.exiting_tid);
    if (exiting == (int32_t)syscall(SYS_gettid)) {
        errno = saved_errno;
        return; /* in the program's exit, which writes the profile and ends the process */
    }
    if (exiting) {
        /* Another thread is in the program's exit: it ends the process, with its status. */
        wait_ms(EXIT_WAIT_MS);
    } else if ((atomic_load(&rt.running) || atomic_load(&rt.fork_start) != RT_FORK_START_NONE) &&
               rt.sampler_started && atomic_exchange(&exit_pending, 1) == 0) {
        atomic_store(&rt.exit_signal, sig);
        rt_sampler_wake();
        wait_ms(EXIT_WAIT_MS); /* the sampler ends the process by sig */
    }
    default_action_now(sig);
    errno = saved_errno; /* still here: the program had ignored or caught it meanwhile */
}

static void standin_action(int sig, struct sigaction *ret)
{
    memset(ret, 0, sizeof(*ret));
    (void)sigemptyset(&ret->sa_mask);
    if (is_exit_signal(sig)) {
        ret->sa_sigaction = exit_handler;
        ret->sa_flags = SA_SIGINFO;
    } else {
        ret->sa_sigaction = crash_handler;
        ret->sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
    }
}

bool rt_crash_is_our_handler(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) &&
           (sa->sa_sigaction == crash_handler || sa->sa_sigaction == exit_handler);
}

void rt_exit_signals_arm(void)
{
    struct sigaction sa, cur;

    for (size_t i = 0; i < sizeof(exit_signals) / sizeof(exit_signals[0]); i++) {
        if (rt_real_sigaction(exit_signals[i], NULL, &cur) < 0 || cur.sa_handler != SIG_DFL ||
            (cur.sa_flags & SA_SIGINFO))
            continue; /* the program handles it: its exit path writes the profile */
        standin_action(exit_signals[i], &sa);
        (void)rt_real_sigaction(exit_signals[i], &sa, NULL);
    }
    atomic_store(&exit_armed, true);
}

void rt_crash_arm(void)
{
    struct sigaction sa, cur;

    if (!rt_region_active())
        return; /* nowhere to record a crash: stay out of the program's way */
    for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++) {
        standin_action(crash_signals[i], &sa);
        if (rt_real_sigaction(crash_signals[i], NULL, &cur) == 0 && cur.sa_handler == SIG_DFL &&
            !(cur.sa_flags & SA_SIGINFO))
            (void)rt_real_sigaction(crash_signals[i], &sa, NULL);
    }
    atomic_store(&armed, true);
}

void rt_crash_disarm(void)
{
    struct sigaction dfl, cur;

    if (!atomic_exchange(&armed, false))
        return;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    (void)sigemptyset(&dfl.sa_mask);
    for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++) {
        if (rt_real_sigaction(crash_signals[i], NULL, &cur) == 0 && rt_crash_is_our_handler(&cur))
            (void)rt_real_sigaction(crash_signals[i], &dfl, NULL);
    }
}

bool rt_crash_wants(int sig)
{
    return (rt_crash_signal(sig) && atomic_load(&armed)) ||
           (is_exit_signal(sig) && atomic_load(&exit_armed));
}

int rt_crash_program_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    struct sigaction cur, mine;
    bool owned;

    if (rt_real_sigaction(sig, NULL, &cur) < 0)
        return -1;
    owned = rt_crash_is_our_handler(&cur);
    if (act && act->sa_handler == SIG_DFL && !(act->sa_flags & SA_SIGINFO)) {
        /* The program's default: ours stands in for it (again). */
        if (!owned && rt_crash_wants(sig)) {
            standin_action(sig, &mine);
            if (rt_real_sigaction(sig, &mine, NULL) < 0)
                return -1;
        }
    } else if (act && rt_real_sigaction(sig, act, NULL) < 0) {
        return -1; /* the program's own action, for real: it sees EINVAL as it would */
    }
    if (old) {
        if (owned) { /* what the kernel would have said without us */
            memset(old, 0, sizeof(*old));
            old->sa_handler = SIG_DFL;
            (void)sigemptyset(&old->sa_mask);
        } else {
            *old = cur;
        }
    }
    return 0;
}
