/* child/core/handler.c - the profiling signal's handler, and the signal's disposition.
 *
 * The handler runs on whichever thread the signal interrupts, in the middle of any code of
 * the program's: it may only read and write its own thread's capture slot, and it calls
 * nothing but these (all async-signal-safe):
 *   rt_now_ns()              the vDSO clock (child/base/clock.h);
 *   rt_stackwalk_capture()   the stack, by frame pointers or libunwind (stackwalk.c);
 *   caught_in_syscall()      whether the thread was asleep in a system call;
 *   chain()                  the program's own action, for a signal that is not ours;
 *   memcpy, pthread_sigmask  (chain() only, as the kernel would have set the mask).
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
        (void)pthread_sigmask(SIG_BLOCK, &pa.sa_mask, NULL);
    if ((pa.sa_flags & SA_NODEFER) && !sigismember(&pa.sa_mask, sig)) {
        sigset_t self;

        (void)sigemptyset(&self);
        (void)sigaddset(&self, sig);
        (void)pthread_sigmask(SIG_UNBLOCK, &self, NULL);
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

static void on_sample_signal(int sig, siginfo_t *info, void *ucontext)
{
    int saved_errno = errno;
    struct rt_thread *t = rt_self;

    /* Ours come from the sampler's tgkill; anything else (the program's ITIMER_PROF, a
     * kill) is the program's. */
    if (info->si_code != SI_TKILL || info->si_pid != rt.pid) {
        chain(sig, info, ucontext);
    } else if (t && atomic_load_explicit(&t->capture.state, memory_order_acquire) ==
                            RT_CAPTURE_REQUESTED) {
        struct rt_capture *c = &t->capture;
        uint32_t depth = atomic_load_explicit(&t->label_depth, memory_order_relaxed);

        atomic_signal_fence(memory_order_acquire);
        c->time_ns = rt_now_ns();
        if (depth > RT_MAX_LABELS)
            depth = RT_MAX_LABELS;
        memcpy(c->labels, t->labels, depth * sizeof(c->labels[0]));
        c->label_count = depth;
        c->in_syscall = caught_in_syscall(ucontext);
        rt_stackwalk_capture(c, t, ucontext);
        /* The capture's own cost, for the profile's overhead figures: one more clock read. */
        c->handler_ns = rt_now_ns() - c->time_ns;
        atomic_store_explicit(&c->state, RT_CAPTURE_FULL, memory_order_release);
    }
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
    /* SA_RESTART: the program's blocking calls resume instead of failing with EINTR. */
    sa->sa_flags = SA_SIGINFO | SA_RESTART;
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
