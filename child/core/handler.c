/* child/core/handler.c - the profiling signal's handler, and the signal's disposition.
 *
 * The handler runs on whichever thread the signal interrupts, in the middle of any code of
 * the program's: it may only read and write its own thread's capture slot, and it calls
 * nothing but these (all async-signal-safe):
 *   rt_now_ns()              the vDSO clock (child/base/clock.h);
 *   clock_gettime()          the thread's CPU clock, for a perf event's capture (a system
 *                            call);
 *   rt_sampler_wake()        a futex wake, when half of the thread's ring waits;
 *   rt_stackwalk_capture()   the stack, by frame pointers or libunwind (stackwalk.c);
 *   caught_in_syscall()      whether the thread was asleep in a system call;
 *   chain()                  the program's own action, for a signal that is not ours;
 *   memcpy, rt_sigmask_raw   (chain() only, as the kernel would have set the mask).
 * Beside it: installing our action, noticing a program that replaced it with a raw system
 * call, and keeping the program's own action for the signal (its sigaction() calls land
 * here, through child/entry/preload.c).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "child/core/core.h"

/* The program's own action for the sampling signal: the one in place when ours was
 * installed, then whatever it sets since (its sigaction() and signal() calls for this
 * signal land in rt_handler_program_action(), through preload.c), so that a program that
 * resets every handler to SIG_DFL, as daemons do, is not killed by our next signal. It is
 * chained for the signals that are not ours. Two slots and an index: the handler never
 * reads one half-written. */
static struct sigaction program_actions[2];
static _Atomic unsigned program_action_index;
static _Atomic bool handler_installed;
/* Our handler as the kernel reports it (a sanitizer may install a wrapper in its place), to
 * see a program's raw rt_sigaction system call replace it. */
static uintptr_t installed_kernel_handler;
/* Why sampling stopped for good in this process ("" while it runs): for profilingLog. */
static const char *_Atomic stopped_reason;
static _Atomic uint64_t stopped_ns;

static bool handler_still_ours(void);
static void lose_handler(void);

bool rt_handler_owns_signal(void)
{
    /* A raw rt_sigaction may have replaced ours since: then the kernel has the program's
     * action, and its sigaction() calls must reach it. */
    if (atomic_load(&handler_installed) && !handler_still_ours())
        lose_handler();
    return atomic_load(&handler_installed);
}

const char *rt_handler_stopped_reason(uint64_t *ret_ns)
{
    const char *why = atomic_load(&stopped_reason);

    if (why && ret_ns)
        *ret_ns = atomic_load(&stopped_ns);
    return why;
}

void rt_handler_program_action(const struct sigaction *act, struct sigaction *old)
{
    unsigned cur = atomic_load(&program_action_index);

    if (old)
        *old = program_actions[cur];
    if (act) {
        program_actions[cur ^ 1u] = *act;
        atomic_store(&program_action_index, cur ^ 1u);
    }
}

/* A signal for the program's own action (not one of our samples). */
static void chain(int sig, siginfo_t *info, void *ucontext)
{
    unsigned cur = atomic_load(&program_action_index);
    struct sigaction pa = program_actions[cur];

    if (pa.sa_handler == SIG_DFL || pa.sa_handler == SIG_IGN)
        return; /* SIG_DFL would end the program: a profiler's signal never does */
    if (pa.sa_flags & SA_RESETHAND) { /* one-shot, as the kernel would have done */
        struct sigaction dfl;

        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        rt_handler_program_action(&dfl, NULL);
    }
    /* The mask the kernel would have set for the program's action: its sa_mask added, and
     * under SA_NODEFER (sysv_signal) the signal itself left open unless sa_mask holds it.
     * Returning from our handler restores the interrupted mask, as it would have. */
    if (!sigisemptyset(&pa.sa_mask))
        (void)rt_sigmask_raw(SIG_BLOCK, &pa.sa_mask, NULL);
    if ((pa.sa_flags & SA_NODEFER) && !sigismember(&pa.sa_mask, sig)) {
        sigset_t self;

        (void)sigemptyset(&self);
        (void)sigaddset(&self, sig);
        (void)rt_sigmask_raw(SIG_UNBLOCK, &self, NULL);
    }
    if (pa.sa_flags & SA_SIGINFO)
        pa.sa_sigaction(sig, info, ucontext);
    else
        pa.sa_handler(sig);
}

/* Whether the thread was asleep in a system call when the signal came: the kernel either
 * rewound its instruction pointer onto the syscall instruction to restart the call
 * (SA_RESTART), or left it just past it with the call failing with EINTR (sleeps and waits
 * are cut short even with SA_RESTART). Only bytes on the instruction pointer's own page are
 * read: the thread was executing there, so it is mapped. */
static bool caught_in_syscall(const void *ucontext)
{
    const greg_t *g = ((const ucontext_t *)ucontext)->uc_mcontext.gregs;
    uintptr_t ip = (uintptr_t)g[REG_RIP];
    const uint8_t *code = (const uint8_t *)ip;

    if ((ip & 4095) <= 4094 && code[0] == 0x0f && code[1] == 0x05)
        return true;
    return g[REG_RAX] == -EINTR && (ip & 4095) >= 2 && code[-2] == 0x0f && code[-1] == 0x05;
}

/* Fills capture c from the interrupted context: the handler's entry time, the thread's
 * labels, its stack. */
static void capture(struct rt_capture *c, struct rt_thread *t, void *ucontext, uint64_t time_ns)
{
    uint32_t depth = atomic_load_explicit(&t->label_depth, memory_order_relaxed);

    atomic_signal_fence(memory_order_acquire);
    c->time_ns = time_ns;
    if (depth > RT_MAX_LABELS)
        depth = RT_MAX_LABELS;
    memcpy(c->labels, t->labels, depth * sizeof(c->labels[0]));
    c->label_count = depth;
    c->in_syscall = caught_in_syscall(ucontext);
    rt_stackwalk_capture(c, t, ucontext);
    /* The capture's own cost, for the profile's overhead figures: one more clock read. */
    c->handler_ns = rt_now_ns() - time_ns;
}

/* Whether the signal is the expiry of thread t's own CPU timer: a POSIX timer's carries t
 * as its value, a perf event's names its descriptor. */
static bool from_own_timer(const siginfo_t *info, const struct rt_thread *t)
{
    int kind = atomic_load_explicit(&t->timer_kind, memory_order_relaxed);

    if (info->si_code == SI_TIMER)
        return kind == RT_TIMER_THREAD_CPU && info->si_value.sival_ptr == t;
    return info->si_code > 0 && kind == RT_TIMER_PERF && info->si_fd == t->timer_fd;
}

bool rt_handler_signal_is_ours(const siginfo_t *info)
{
    const struct rt_thread *t = rt_self;

    if (info->si_code == SI_TKILL && info->si_pid == rt.pid)
        return true; /* the sampler's tick (or the program's raise(): they look the same) */
    return t && from_own_timer(info, t);
}

/* Thread t's CPU timer expired: a capture into its ring, weighted by the thread's CPU since
 * the last one. With the ring full (the sampler is late) the capture is dropped and its CPU
 * goes to the next one. */
static void on_timer(struct rt_thread *t, const siginfo_t *info, void *ucontext)
{
    uint32_t head = t->ring_head;
    struct rt_capture *c = &t->ring[head % RT_CAPTURE_RING];
    uint64_t now = rt_now_ns(), cpu;
    struct timespec ts;

    if (info->si_code == SI_TIMER) {
        /* A CPU-clock timer counts its expiries: the CPU since the last signal is that many
         * intervals (the kernel's count, exact to an interval; reading the thread's CPU
         * clock here cost 1.5 us a capture on this VM). A full ring keeps the count. */
        cpu = t->timer_grid_ns +
              (1u + (uint64_t)(info->si_overrun > 0 ? info->si_overrun : 0)) * t->timer_interval_ns;
        t->timer_grid_ns = cpu;
    } else if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
        /* A perf event's period is user time: the kernel's share comes from the clock. */
        cpu = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    } else {
        cpu = t->timer_cpu_ns;
    }
    if (cpu < t->timer_cpu_ns) /* an expiry is never before the clock the weights start at */
        cpu = t->timer_cpu_ns;
    if (atomic_load_explicit(&c->state, memory_order_acquire) != RT_CAPTURE_EMPTY) {
        atomic_fetch_add_explicit(&rt.captures_dropped, 1, memory_order_relaxed);
        if (info->si_code == SI_TIMER) { /* carried by the next capture */
            t->dropped_cpu_ns += cpu - t->timer_cpu_ns;
            t->timer_cpu_ns = cpu;
        } /* a perf event's next capture reads the clock from the same baseline */
        return;
    }
    c->cpu_delta_ns = cpu - t->timer_cpu_ns + t->dropped_cpu_ns;
    t->dropped_cpu_ns = 0;
    c->cpu_ns = cpu;
    t->timer_cpu_ns = cpu;
    capture(c, t, ucontext, now);
    atomic_store_explicit(&c->state, RT_CAPTURE_FULL, memory_order_release);
    t->ring_head = head + 1;
    /* Half the ring waits: the sampler empties it now rather than at its next drain. */
    if (atomic_load_explicit(&t->ring[(head + RT_CAPTURE_RING / 2 + 1) % RT_CAPTURE_RING].state,
                             memory_order_relaxed) == RT_CAPTURE_FULL)
        rt_sampler_wake();
}

static void on_sample_signal(int sig, siginfo_t *info, void *ucontext)
{
    int saved_errno = errno;
    struct rt_thread *t = rt_self;

    rt_in_handler++;
    if (t && from_own_timer(info, t)) {
        on_timer(t, info, ucontext);
    } else if (info->si_code != SI_TKILL || info->si_pid != rt.pid) {
        /* Not ours (the program's ITIMER_PROF, its own timers, a kill): the program's. */
        chain(sig, info, ucontext);
    } else if (t && atomic_load_explicit(&t->capture.state, memory_order_acquire) ==
                            RT_CAPTURE_REQUESTED) {
        /* The sampler's tgkill (threads without a timer: RT_TIMER_TICK). */
        capture(&t->capture, t, ucontext, rt_now_ns());
        atomic_store_explicit(&t->capture.state, RT_CAPTURE_FULL, memory_order_release);
    }
    rt_in_handler--;
    errno = saved_errno;
}

/* The action of the sampling signal as the rt_sigaction system call reads and writes it;
 * only the handler's place is the same on every architecture, the rest is passed back
 * unchanged. */
struct kernel_sigaction {
    uintptr_t handler; /* SIG_DFL 0, SIG_IGN 1, or the function */
    unsigned long rest[7];
};

static long raw_sigaction(const struct kernel_sigaction *act, struct kernel_sigaction *old)
{
    return syscall(SYS_rt_sigaction, RT_SAMPLE_SIGNAL, act, old, (size_t)(_NSIG / 8));
}

static void our_action(struct sigaction *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sa_sigaction = on_sample_signal;
    /* SA_RESTART: a blocking call the signal would interrupt resumes instead of failing
     * with EINTR (a CPU timer fires only while the thread runs, so only the sampler's tick
     * can find one waiting). SA_ONSTACK: on the thread's alternate stack where it has one
     * (threads.c gives every thread ours), so that a program deep in its own stack limit
     * does not overflow it in our handler. */
    sa->sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    (void)sigemptyset(&sa->sa_mask);
}

int rt_handler_install(void)
{
    struct kernel_sigaction k;
    struct sigaction sa;

    if (atomic_load(&handler_installed))
        return 0;
    our_action(&sa);
    if (rt_real_sigaction(RT_SAMPLE_SIGNAL, &sa, &program_actions[0]) < 0)
        return -errno;
    installed_kernel_handler = raw_sigaction(NULL, &k) == 0 ? k.handler : 0;
    atomic_store(&stopped_reason, NULL);
    atomic_store(&program_action_index, 0);
    atomic_store(&handler_installed, true);
    return 0;
}

void rt_handler_restore(void)
{
    struct sigaction sa;

    our_action(&sa);
    (void)rt_real_sigaction(RT_SAMPLE_SIGNAL, &sa, NULL);
}

/* Whether the installed action of the sampling signal is still ours. The program's
 * sigaction(), signal(), sigset()... reach rt_handler_program_action(), but a raw
 * rt_sigaction system call replaces ours unseen: a sample sent after that would reach the
 * program's handler, or kill it under SIG_DFL. One system call, made only on ticks that
 * send a signal (a signal costs the target ~10 us; this ~0.2 us). */
static bool handler_still_ours(void)
{
    struct kernel_sigaction k;

    if (!installed_kernel_handler || raw_sigaction(NULL, &k) < 0)
        return true; /* cannot tell: as before */
    return k.handler == installed_kernel_handler;
}

/* The program replaced our handler with a raw rt_sigaction: no more signals from us, and
 * the program's sigaction() calls go straight to the kernel again (its action is the
 * kernel's now). Any thread; async-signal-safe. */
static void lose_handler(void)
{
    bool installed = true;

    if (!atomic_compare_exchange_strong(&handler_installed, &installed, false))
        return;
    atomic_store(&stopped_ns, rt_now_ns());
    atomic_store(&stopped_reason, "the program replaced the SIGPROF handler (rt_sigaction "
                                  "system call): no samples since");
    /* Its own timer at once (the calling thread's: async-signal-safe); the sampler stops
     * the others as it wakes (after_handler_lost()). */
    if (rt_self && !rt_self->timer_paused)
        rt_cpu_timer_pause(rt_self, true);
    rt_sampler_wake();
}

void rt_handler_before_raw_sigaction(void)
{
    if (!atomic_load(&handler_installed))
        return;
    lose_handler();
    rt_cpu_timer_disarm_all();
}

/* Whether our handler is still installed; if a raw rt_sigaction replaced it, sampling stops
 * for good (rt_handler_stopped_reason() then says why). */
void rt_handler_check(void)
{
    if (!handler_still_ours())
        lose_handler();
}

/* Swaps the action for SIG_IGN and straight back, which discards every pending instance of
 * the signal (POSIX), and restores it exactly as read: a sample of ours delivered after the
 * program's own handler took over would run it, or kill the program under SIG_DFL. */
void rt_handler_discard_pending(void)
{
    struct kernel_sigaction ign = {1 /* SIG_IGN */, {0}}, program;

    if (raw_sigaction(&ign, &program) == 0)
        (void)raw_sigaction(&program, NULL);
}
