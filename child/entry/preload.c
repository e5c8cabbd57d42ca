/* child/entry/preload.c - what makes LD_PRELOAD=libfleetprof.so profile an unchanged program.
 *
 * Interposed libc functions (exported next to fleetprof_*, see libfleetprof.map):
 *   pthread_create       new threads register themselves for sampling, and unregister
 *                        when they end (a thread-specific key's destructor);
 *   dlopen, dlclose,     mark the calling thread as inside the loader, so its signal
 *   dl_iterate_phdr      handler does not unwind with libunwind there (stackwalk.c);
 *   _exit, _Exit         write the exit profile first (forked workers often end so);
 *   execve, execv,       the new image starts with the program's own SIGPROF disposition
 *   execvp, execvpe,     and mask and no sample of ours pending (under SIG_DFL it would
 *   fexecve, execl,      kill it): the sampler stops signalling, the calling thread drops
 *   execlp, execle       the samples pending on it, SIG_IGN is set only if the program's;
 *                        undone if exec fails (before_exec());
 *   fork                 like pthread_create and posix_spawn: one that fails with EAGAIN
 *                        under a process limit gets the runtime's threads' slots
 *                        (rt_slots_give_up()) and is made again; the daemon is told the
 *                        child's pid (rt_ipc_spawned()), to name it if none of its images
 *                        connects (it connects at its start: preload-credentials.c);
 *   posix_spawn,         its child execs inside libc, past the wrappers above: the daemon
 *   posix_spawnp         is told its pid (rt_ipc_spawned()), to name it if it is never
 *                        profiled (a static program, ...);
 *   sigaction, signal,   SIGPROF: the program's action is kept aside, ours stays installed;
 *   bsd_signal, ssignal, a raw rt_sigaction that replaces ours stops sampling (sampler.c);
 *   sysv_signal, __sysv_signal, sigset, sigignore, siginterrupt
 *   chroot               the IPC thread is started before (libuv cannot be loaded from
 *                        inside the root); a child forked since, which cannot connect from
 *                        in there, is named by the daemon from its pid (fork, above; nothing
 *                        outside the root is kept open: a descriptor of a directory outside
 *                        would let a jailed process out);
 *   close, close_range,  leave the runtime's own descriptors (its daemon connection, its
 *   closefrom            event loop's epoll and eventfd) open when the program closes
 *                        "every descriptor", as daemons do: libuv aborts the process when
 *                        its descriptors vanish. The program never owned them, so its close
 *                        of one succeeds without effect.
 * The real functions are looked up once with dlsym(RTLD_NEXT), in the constructor,
 * before any signal handler could need them.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "child/client/client.h"
#include "child/core/core.h"
#include "child/include/fleetprof.h"
#include "child/lifecycle/lifecycle.h"

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef void *(*dlopen_fn)(const char *, int);
typedef int (*dlclose_fn)(void *);
typedef int (*dl_iterate_phdr_fn)(int (*)(struct dl_phdr_info *, size_t, void *), void *);
typedef int (*close_fn)(int);
typedef pid_t (*fork_fn)(void);
typedef int (*chroot_fn)(const char *);
typedef int (*close_range_fn)(unsigned int, unsigned int, int);
typedef void (*closefrom_fn)(int);
typedef void (*exit_fn)(int);
typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvp_fn)(const char *, char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*posix_spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                              const posix_spawnattr_t *, char *const[], char *const[]);
typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef void (*signal_handler_fn)(int);
typedef signal_handler_fn (*signal_fn)(int, signal_handler_fn);
typedef int (*pipe2_fn)(int[2], int);
typedef int (*sigignore_fn)(int);
typedef int (*siginterrupt_fn)(int, int);

static pthread_create_fn real_pthread_create;
static dlopen_fn real_dlopen;
static dlclose_fn real_dlclose;
static dl_iterate_phdr_fn real_dl_iterate_phdr;
static exit_fn real__exit;
static exit_fn real__Exit;
static execve_fn real_execve;
static execvp_fn real_execv;
static execvp_fn real_execvp;
static execvpe_fn real_execvpe;
static fexecve_fn real_fexecve;
static posix_spawn_fn real_posix_spawn;
static posix_spawn_fn real_posix_spawnp;
static close_fn real_close;
static fork_fn real_fork;
static chroot_fn real_chroot;
static signal_fn real_signal;
static signal_fn real_bsd_signal;
static signal_fn real_ssignal;
static signal_fn real_sysv_signal;
static signal_fn real___sysv_signal;
static signal_fn real_sigset;
static sigignore_fn real_sigignore;
static siginterrupt_fn real_siginterrupt;
static pipe2_fn real_pipe2;
static close_range_fn real_close_range;
static closefrom_fn real_closefrom;
RT_NO_TSAN static void resolve_real_functions(void);

/* In an interposer returning -1 with errno: the real function, or ENOSYS without one. */
#define NEED_REAL(fn)                 \
    do {                              \
        if (!(fn))                    \
            resolve_real_functions(); \
        if (!(fn)) {                  \
            errno = ENOSYS;           \
            return -1;                \
        }                             \
    } while (0)

RT_NO_TSAN static void resolve_real_functions(void)
{
    /* ISO C has no cast from void * to a function pointer; POSIX's dlsym documentation
     * gives this assignment through a void ** as the portable form. */
    if (!real_pthread_create)
        *(void **)&real_pthread_create = dlsym(RTLD_NEXT, "pthread_create");
    if (!real_dlopen)
        *(void **)&real_dlopen = dlsym(RTLD_NEXT, "dlopen");
    if (!real_dlclose)
        *(void **)&real_dlclose = dlsym(RTLD_NEXT, "dlclose");
    if (!real_dl_iterate_phdr)
        *(void **)&real_dl_iterate_phdr = dlsym(RTLD_NEXT, "dl_iterate_phdr");
    if (!real__exit)
        *(void **)&real__exit = dlsym(RTLD_NEXT, "_exit");
    if (!real__Exit)
        *(void **)&real__Exit = dlsym(RTLD_NEXT, "_Exit");
    if (!real_execve)
        *(void **)&real_execve = dlsym(RTLD_NEXT, "execve");
    if (!real_execv)
        *(void **)&real_execv = dlsym(RTLD_NEXT, "execv");
    if (!real_execvp)
        *(void **)&real_execvp = dlsym(RTLD_NEXT, "execvp");
    if (!real_execvpe)
        *(void **)&real_execvpe = dlsym(RTLD_NEXT, "execvpe");
    if (!real_fexecve)
        *(void **)&real_fexecve = dlsym(RTLD_NEXT, "fexecve");
    if (!real_posix_spawn)
        *(void **)&real_posix_spawn = dlsym(RTLD_NEXT, "posix_spawn");
    if (!real_posix_spawnp)
        *(void **)&real_posix_spawnp = dlsym(RTLD_NEXT, "posix_spawnp");
    if (!real_close)
        *(void **)&real_close = dlsym(RTLD_NEXT, "close");
    if (!real_chroot)
        *(void **)&real_chroot = dlsym(RTLD_NEXT, "chroot");
    if (!real_fork)
        *(void **)&real_fork = dlsym(RTLD_NEXT, "fork");
    if (!real_close_range)
        *(void **)&real_close_range = dlsym(RTLD_NEXT, "close_range");
    if (!real_closefrom)
        *(void **)&real_closefrom = dlsym(RTLD_NEXT, "closefrom");
    if (!real_signal)
        *(void **)&real_signal = dlsym(RTLD_NEXT, "signal");
    if (!real_pipe2)
        *(void **)&real_pipe2 = dlsym(RTLD_NEXT, "pipe2");
    if (!real_bsd_signal)
        *(void **)&real_bsd_signal = dlsym(RTLD_NEXT, "bsd_signal");
    if (!real_ssignal)
        *(void **)&real_ssignal = dlsym(RTLD_NEXT, "ssignal");
    if (!real_sysv_signal)
        *(void **)&real_sysv_signal = dlsym(RTLD_NEXT, "sysv_signal");
    if (!real___sysv_signal)
        *(void **)&real___sysv_signal = dlsym(RTLD_NEXT, "__sysv_signal");
    if (!real_sigset)
        *(void **)&real_sigset = dlsym(RTLD_NEXT, "sigset");
    if (!real_sigignore)
        *(void **)&real_sigignore = dlsym(RTLD_NEXT, "sigignore");
    if (!real_siginterrupt)
        *(void **)&real_siginterrupt = dlsym(RTLD_NEXT, "siginterrupt");
}

static void *registered_start(void *p)
{
    struct rt_thread_start ts = *(struct rt_thread_start *)p;

    free(p);
    if (atomic_load(&rt.running))
        (void)rt_threads_register(NULL, false);
    return ts.start(ts.arg);
}

RT_NO_TSAN FLEETPROF_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                                               void *(*start)(void *), void *arg)
{
    struct rt_thread_start *ts;
    int r;

    if (!real_pthread_create)
        resolve_real_functions();
    if (!real_pthread_create)
        return EAGAIN;
    if (RT_TSAN || rt_creating_internal_thread() || !rt_running())
        return real_pthread_create(thread, attr, start, arg);
    ts = malloc(sizeof(*ts));
    if (!ts) /* still create the thread: profiling must not change the program */
        return real_pthread_create(thread, attr, start, arg);
    ts->start = start;
    ts->arg = arg;
    for (unsigned tries = 0;;) {
        r = real_pthread_create(thread, attr, registered_start, ts);
        if (!rt_slots_again(r, &tries))
            break;
    }
    if (r != 0)
        free(ts);
    return r;
}

FLEETPROF_EXPORT pid_t fork(void)
{
    pid_t pid;

    NEED_REAL(real_fork);
    (void)rt_fork_light_prepare();
    for (unsigned tries = 0;;) {
        pid = real_fork();
        if (pid >= 0 || !rt_slots_again(errno, &tries))
            break;
    }
    rt_fork_light_done();
    if (pid > 0 && rt_slots_given_up()) /* it starts no runtime: the daemon names it */
        rt_region_note_unprofiled_child((int32_t)pid);
    else if (pid > 0 && atomic_load(&rt.running))
        /* The daemon learns of the child from us, not from a connection of its own in its
         * fork handler (preload-credentials.c): named if none of its images connects (one
         * inside a root we chroot'ed to cannot). */
        rt_ipc_spawned((int32_t)pid);
    return pid;
}

/* libunwind keeps a pipe to probe memory while unwinding (it reads one byte from it, then
 * writes the probed byte into it), and libuv keeps pipes of its own; none of them is in
 * reach of our code. A program that closed them and opened its own files under the same
 * numbers had its own pipe read by the sampling signal's handler: blocked for ever. So the
 * pipes made while the runtime sets those libraries up are recorded as the runtime's. */
RT_NO_TSAN FLEETPROF_EXPORT int pipe2(int fds[2], int flags)
{
    int r;

    NEED_REAL(real_pipe2);
    r = real_pipe2(fds, flags);
    if (r < 0 && errno == EMFILE && !rt_fds_capturing() && rt_fds_give_up())
        r = real_pipe2(fds, flags); /* the runtime's descriptors are the program's now */
    if (r == 0 && rt_fds_capturing())
        rt_fds_captured(fds);
    return r;
}

/* pipe(fds) is pipe2(fds, 0). */
RT_NO_TSAN FLEETPROF_EXPORT int pipe(int fds[2])
{
    return pipe2(fds, 0);
}

FLEETPROF_EXPORT int close(int fd)
{
    unsigned int own[RT_MAX_OWN_FDS];

    if (!real_close)
        resolve_real_functions();
    if (rt_is_internal_thread()) {
        rt_fd_unprotect(fd);
    } else if (fd >= 0) {
        rt_fds_wait_setups();
        if (rt_fds_own_in((unsigned int)fd, (unsigned int)fd, own) > 0)
            return 0;
    }
    return real_close(fd);
}

/* Closes [first, last] but our descriptors, in the pieces between them. */
static int close_range_around_own(unsigned int first, unsigned int last, int flags)
{
    unsigned int own[RT_MAX_OWN_FDS], cur = first;
    size_t n;

    rt_fds_wait_setups();
    n = rt_fds_own_in(first, last, own);

    if (!real_close_range) {
        errno = ENOSYS;
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (own[i] > cur && real_close_range(cur, own[i] - 1, flags) < 0)
            return -1;
        cur = own[i] + 1;
        if (cur == 0) /* own[i] was UINT_MAX */
            return 0;
    }
    return cur <= last ? real_close_range(cur, last, flags) : 0;
}

FLEETPROF_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    if (!real_close_range)
        resolve_real_functions();
    /* CLOSE_RANGE_CLOEXEC only marks them, and ours are close-on-exec already. */
    if (rt_is_internal_thread() || (flags & CLOSE_RANGE_CLOEXEC))
        return real_close_range ? real_close_range(first, last, flags) : (errno = ENOSYS, -1);
    return close_range_around_own(first, last, flags);
}

FLEETPROF_EXPORT void closefrom(int lowfd)
{
    unsigned int own[RT_MAX_OWN_FDS];
    long max;

    if (!real_closefrom)
        resolve_real_functions();
    if (lowfd < 0)
        lowfd = 0;
    if (!rt_is_internal_thread())
        rt_fds_wait_setups();
    if (rt_is_internal_thread() || rt_fds_own_in((unsigned int)lowfd, ~0u, own) == 0) {
        if (real_closefrom)
            real_closefrom(lowfd);
        return;
    }
    if (close_range_around_own((unsigned int)lowfd, ~0u, 0) == 0)
        return;
    /* A kernel without close_range (before 5.9): one by one, like glibc's fallback. */
    max = sysconf(_SC_OPEN_MAX);
    for (long fd = lowfd; fd < (max > 0 ? max : 1024); fd++)
        if (rt_fds_own_in((unsigned int)fd, (unsigned int)fd, own) == 0)
            (void)real_close((int)fd);
}

FLEETPROF_EXPORT int chroot(const char *path)
{
    NEED_REAL(real_chroot);
    /* The daemon connection's thread may be needed later (a capture, the spawned pids of
     * the children forked in there), and libuv cannot be loaded from inside the root. Then
     * the module list, which /proc/self/maps gives and the new root may not have: kept, and
     * used by every description from in there while nothing more is loaded. */
    if (rt_running()) {
        const struct prof_libs *libs;
        int error = 0;

        rt_ipc_before_chroot();
        libs = rt_modules_get(&error);
        rt_modules_put(libs);
    }
    return real_chroot(path);
}

RT_NO_TSAN FLEETPROF_EXPORT void *dlopen(const char *file, int mode)
{
    bool gated = rt_is_internal_thread();
    void *handle;

    if (!real_dlopen)
        resolve_real_functions();
    if (gated)
        rt_loader_gate_enter();
    rt_in_loader++;
    handle = real_dlopen(file, mode);
    rt_in_loader--;
    if (gated)
        rt_loader_gate_leave();
    rt_loader_changed();
    return handle;
}

RT_NO_TSAN FLEETPROF_EXPORT int dlclose(void *handle)
{
    bool gated = rt_is_internal_thread();
    int r;

    if (!real_dlclose)
        resolve_real_functions();
    if (gated)
        rt_loader_gate_enter();
    rt_in_loader++;
    r = real_dlclose(handle);
    rt_in_loader--;
    if (gated)
        rt_loader_gate_leave();
    rt_loader_changed();
    return r;
}

RT_NO_TSAN FLEETPROF_EXPORT int
dl_iterate_phdr(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data)
{
    bool gated = rt_is_internal_thread();
    int r;

    if (!real_dl_iterate_phdr)
        resolve_real_functions();
    if (gated)
        rt_loader_gate_enter();
    rt_in_loader++;
    r = real_dl_iterate_phdr(callback, data);
    rt_in_loader--;
    if (gated)
        rt_loader_gate_leave();
    return r;
}

FLEETPROF_EXPORT void _exit(int status)
{
    rt_on_process_exit();
    if (!real__exit)
        resolve_real_functions();
    real__exit(status);
    __builtin_unreachable();
}

FLEETPROF_EXPORT void _Exit(int status)
{
    rt_on_process_exit();
    if (!real__Exit)
        resolve_real_functions();
    real__Exit(status);
    __builtin_unreachable();
}

/* --- the sampling signal: the program's own action, never in place of ours ---------- */

/* Whether a call for sig is about the program's action of the sampling signal, which is
 * kept aside while our handler is installed. (TSan builds pass through: TSan's interceptor
 * keeps its own table of the program's handlers.) */
static bool kept_aside(int sig)
{
    return !RT_TSAN && sig == RT_SAMPLE_SIGNAL && rt_handler_owns_signal();
}

/* A program that resets every handler to SIG_DFL (daemons do), or installs its own
 * SIGPROF handler (a profiler of its own), replaced ours: the next sample killed it, or
 * its handler got our 1 kHz. Its action is kept aside instead (and chained for its own
 * signals, see chain() in sampler.c), and it reads back what it set. */
RT_NO_TSAN FLEETPROF_EXPORT int sigaction(int sig, const struct sigaction *act,
                                          struct sigaction *old)
{
    if (!RT_TSAN && rt_crash_wants(sig))
        return rt_crash_program_sigaction(sig, act, old);
    if (!kept_aside(sig))
        return rt_libc_sigaction(sig, act, old);
    rt_handler_program_action(act, old);
    return 0;
}

#if !RT_TSAN /* TSan intercepts these itself: its model must see each call */
/* syscall(): glibc's generic system call, made here with the same result convention (-1 and
 * errno), so that a program's raw rt_sigaction for the sampling signal through it stops
 * our timers before it replaces our handler (they would signal its action). Our own code
 * calls it too, and from signal handlers: no lock, no lookup. Only x86-64's convention. */
static long raw_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    long r;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;

    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}

FLEETPROF_EXPORT long syscall(long nr, ...)
{
    long a[6], r;
    va_list ap;

    va_start(ap, nr);
    for (size_t i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_rt_sigaction && a[0] == RT_SAMPLE_SIGNAL && a[1] != 0)
        rt_handler_before_raw_sigaction();
    r = raw_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    if ((unsigned long)r > -4096ul) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

/* The signal mask: a thread that blocks the sampling signal gets no signal of ours
 * meanwhile (its timer stops first, so that none is left pending for the program's
 * sigpending(), signalfd or sigwait to find), and its timer runs again once it unblocks it.
 * Made with the system call, as glibc does (leaving its two internal signals alone): both
 * functions are async-signal-safe, and must stay so here (no lookup, no lock). */
#define GLIBC_SIGCANCEL 32
#define GLIBC_SIGSETXID 33

static int set_mask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    const sigset_t *use = set;
    struct rt_thread *t = rt_self;
    bool block = false, unblock = false;
    /* errno as the program left it: a successful call changes nothing it may read next (a
     * server checks a failed select()'s errno after restoring its mask). */
    int saved_errno = errno;
    long r;

    if (rt_walk_masked) {
        /* libunwind's, inside the handler's walk, which blocked every signal already: the
         * mask it saves to restore is that one, and nothing changes meanwhile. */
        if (old)
            (void)sigfillset(old);
        return 0;
    }
    if (set) {
        bool has = sigismember(set, RT_SAMPLE_SIGNAL) == 1;

        /* glibc's sigdelset() refuses its internal signals (EINVAL): their bits directly. */
        copy = *set;
        copy.__val[0] &= ~((1ul << (GLIBC_SIGCANCEL - 1)) | (1ul << (GLIBC_SIGSETXID - 1)));
        use = &copy;
        block = has && (how == SIG_BLOCK || how == SIG_SETMASK);
        unblock = (has && how == SIG_UNBLOCK) || (!has && how == SIG_SETMASK);
    }
    if (rt_in_handler) /* libunwind's, in our handler: the kernel restores the mask */
        t = NULL;
    /* A vfork child shares our memory, not our timers: its mask is its own business. */
    if (t && (block || unblock) && raw_syscall6(SYS_getpid, 0, 0, 0, 0, 0, 0) != rt.pid)
        t = NULL;
    if (t && block && !rt_is_internal_thread())
        rt_cpu_timer_pause(t, true);
    r = raw_syscall6(SYS_rt_sigprocmask, how, (long)use, (long)old, _NSIG / 8, 0, 0);
    if (r == 0 && t && unblock && t->timer_paused && !rt_handler_stopped_reason(NULL))
        rt_cpu_timer_pause(t, false);
    errno = saved_errno;
    return (int)-r;
}

FLEETPROF_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    return set_mask(how, set, old);
}

FLEETPROF_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    int r = set_mask(how, set, old);

    if (r != 0) {
        errno = r;
        return -1;
    }
    return 0;
}

/* The alternate signal stack the runtime gave a thread (threads.c) is not the program's: it
 * reads back none, as without us. */
FLEETPROF_EXPORT int sigaltstack(const stack_t *ss, stack_t *old)
{
    long r = raw_syscall6(SYS_sigaltstack, (long)ss, (long)old, 0, 0, 0, 0);

    if ((unsigned long)r > -4096ul) {
        errno = (int)-r;
        return -1;
    }
    if (old && rt_threads_altstack_is_ours(old->ss_sp) && !(old->ss_flags & SS_ONSTACK)) {
        old->ss_sp = NULL;
        old->ss_size = 0;
        old->ss_flags = SS_DISABLE;
    }
    return 0;
}
#endif /* !RT_TSAN */

/* glibc's signal-style functions call its internal __sigaction, not ours: each is
 * interposed for the sampling signal and sets the program's action with the flags glibc
 * would have used; the others pass through. A raw rt_sigaction system call cannot be
 * interposed: the sampler notices it (sampler.c, handler_still_ours()). */
/* A fatal signal's crash handler (crash.c) is SIG_DFL to the program, whichever function
 * it uses: the old disposition it gets back says so, and its SIG_DFL puts ours back. */
static signal_handler_fn crash_view(int sig, signal_handler_fn old, signal_handler_fn handler)
{
    struct sigaction cur;

    if (RT_TSAN || !rt_crash_wants(sig) || old == SIG_ERR)
        return old;
    if (handler == SIG_DFL) {
        struct sigaction dfl;

        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        (void)rt_crash_program_sigaction(sig, &dfl, NULL);
    }
    memset(&cur, 0, sizeof(cur));
    cur.sa_handler = old; /* sa_sigaction shares its storage */
    cur.sa_flags = SA_SIGINFO;
    return rt_crash_is_our_handler(&cur) ? SIG_DFL : old;
}

static signal_handler_fn pass_through(signal_fn *real, int sig, signal_handler_fn handler)
{
    if (!*real)
        resolve_real_functions();
    if (!*real) {
        errno = ENOSYS;
        return SIG_ERR;
    }
    return crash_view(sig, (*real)(sig, handler), handler);
}

static signal_handler_fn set_program_handler(int sig, signal_handler_fn handler, int flags,
                                             bool block_self)
{
    struct sigaction sa, old;

    if (handler == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    (void)sigemptyset(&sa.sa_mask);
    if (block_self)
        (void)sigaddset(&sa.sa_mask, sig);
    rt_handler_program_action(&sa, &old);
    return old.sa_handler;
}

/* glibc's _sigintr for the sampling signal: siginterrupt(SIGPROF, 1) was called. */
static _Atomic bool sample_signal_interrupts;

/* signal(), bsd_signal(), ssignal() (one function in glibc): BSD semantics, calls restart
 * unless siginterrupt() said otherwise, the signal blocked in its handler. */
static signal_handler_fn bsd_semantics(int sig, signal_handler_fn handler)
{
    return set_program_handler(sig, handler,
                               atomic_load(&sample_signal_interrupts) ? 0 : SA_RESTART, true);
}

RT_NO_TSAN FLEETPROF_EXPORT signal_handler_fn signal(int sig, signal_handler_fn handler)
{
    return kept_aside(sig) ? bsd_semantics(sig, handler) : pass_through(&real_signal, sig, handler);
}

/* Not declared under _GNU_SOURCE (POSIX.1-2008 dropped it), still exported by glibc. */
signal_handler_fn bsd_signal(int sig, signal_handler_fn handler);
RT_NO_TSAN FLEETPROF_EXPORT signal_handler_fn bsd_signal(int sig, signal_handler_fn handler)
{
    return kept_aside(sig) ? bsd_semantics(sig, handler)
                           : pass_through(&real_bsd_signal, sig, handler);
}

RT_NO_TSAN FLEETPROF_EXPORT signal_handler_fn ssignal(int sig, signal_handler_fn handler)
{
    return kept_aside(sig) ? bsd_semantics(sig, handler)
                           : pass_through(&real_ssignal, sig, handler);
}

/* System V semantics: one-shot (reset to SIG_DFL on delivery), the signal not blocked in its
 * handler, calls not restarted. */
RT_NO_TSAN FLEETPROF_EXPORT signal_handler_fn sysv_signal(int sig, signal_handler_fn handler)
{
    return kept_aside(sig) ? set_program_handler(sig, handler, SA_RESETHAND | SA_NODEFER, false)
                           : pass_through(&real_sysv_signal, sig, handler);
}

RT_NO_TSAN FLEETPROF_EXPORT signal_handler_fn __sysv_signal(int sig, signal_handler_fn handler)
{
    return kept_aside(sig) ? set_program_handler(sig, handler, SA_RESETHAND | SA_NODEFER, false)
                           : pass_through(&real___sysv_signal, sig, handler);
}

/* sigset(3): SIG_HOLD adds the signal to the mask and leaves the action; any other
 * disposition is set (no flags, empty mask) and the signal taken out of the mask. Returns
 * SIG_HOLD if the signal was blocked before the call, else the previous disposition. */
RT_NO_TSAN FLEETPROF_EXPORT signal_handler_fn sigset(int sig, signal_handler_fn disp)
{
    struct sigaction old;
    sigset_t set, oset;

    if (!kept_aside(sig))
        return pass_through(&real_sigset, sig, disp);
    (void)sigemptyset(&set);
    (void)sigaddset(&set, sig);
    if (disp == SIG_HOLD) {
        if (sigprocmask(SIG_BLOCK, &set, &oset) < 0)
            return SIG_ERR;
        if (sigismember(&oset, sig))
            return SIG_HOLD;
        rt_handler_program_action(NULL, &old);
        return old.sa_handler;
    }
    old.sa_handler = set_program_handler(sig, disp, 0, false);
    if (old.sa_handler == SIG_ERR || sigprocmask(SIG_UNBLOCK, &set, &oset) < 0)
        return SIG_ERR;
    return sigismember(&oset, sig) ? SIG_HOLD : old.sa_handler;
}

RT_NO_TSAN FLEETPROF_EXPORT int sigignore(int sig)
{
    if (!kept_aside(sig)) {
        if (!real_sigignore)
            resolve_real_functions();
        return real_sigignore ? real_sigignore(sig) : (errno = ENOSYS, -1);
    }
    (void)set_program_handler(sig, SIG_IGN, 0, false);
    return 0;
}

/* Read, change SA_RESTART, write back: on the program's action, not on ours. */
RT_NO_TSAN FLEETPROF_EXPORT int siginterrupt(int sig, int interrupt)
{
    struct sigaction sa;

    if (!kept_aside(sig)) {
        if (!real_siginterrupt)
            resolve_real_functions();
        return real_siginterrupt ? real_siginterrupt(sig, interrupt) : (errno = ENOSYS, -1);
    }
    atomic_store(&sample_signal_interrupts, interrupt != 0);
    rt_handler_program_action(NULL, &sa);
    if (interrupt)
        sa.sa_flags &= ~SA_RESTART;
    else
        sa.sa_flags |= SA_RESTART;
    rt_handler_program_action(&sa, NULL);
    return 0;
}

/* Exec. The new image must start with the program's own SIGPROF disposition and mask, and
 * with no sample of ours pending: under SIG_DFL a pending SIGPROF kills it. The kernel
 * resets a handler, ours included, to SIG_DFL and keeps SIG_IGN; the mask and the calling
 * thread's pending signals cross exec, the other threads' pending signals die with them.
 * So, before the call:
 *   1. exec_pending++, then wait until no tgkill of the sampler is in flight (the handshake
 *      in sampler.c, signal_thread()): from then on no sample of ours is sent;
 *   2. on the calling thread, with SIGPROF blocked, take every pending instance
 *      (sigtimedwait, no wait): ours are dropped, the program's own (not from our tgkill) is
 *      queued again as it was;
 *   3. if the program's disposition is SIG_IGN, set it (this also discards the instances
 *      pending anywhere); otherwise ours stays installed, so a sample still pending on
 *      another thread lands in our handler, and the kernel makes it SIG_DFL;
 *   4. the thread's mask back as the program had it.
 * If the exec fails: ours again if it was replaced, exec_pending--, and the sampler
 * re-signals the captures whose signal step 2 or 3 took. Only async-signal-safe calls: exec
 * often follows fork in a multithreaded program, or runs in a signal handler. A vfork child
 * shares our memory (rt.pid is its parent's): it has no sample of ours pending, and must
 * not touch the parent's exec_pending, only its own disposition. */
struct exec_state {
    bool fork_start; /* a forked child's deferred start was cancelled, to put back */
    bool counted;    /* exec_pending was raised */
    bool ignored;    /* SIGPROF set to SIG_IGN, ours to put back */
    bool timer;      /* the thread's CPU timer was stopped, to restart */
    int census_fd;   /* a vfork child's connection (vfork_child_says_here()), or -1 */
};

/* In a vfork child (or a posix_spawn-like clone sharing our memory) of a process connected
 * to a daemon, about to exec: a connection that says nothing, closed by the exec
 * (close-on-exec). The daemon learns the child's pid from it (SO_PEERCRED) and, if no
 * image of that pid connects, names the process with why (daemon/census.c: a static
 * program, an environment without the preload, a set-user-ID program). A fork child does
 * the same in its fork handler when its parent cannot name it (child/ipc-module/ipc.c). The
 * parent's memory is ours here: only system calls, nothing stored; the path was checked by
 * the parent when it connected. */
static int vfork_child_says_here(void)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t n = strnlen(rt.cfg.socket, sizeof(rt.cfg.socket));
    int fd;

    if (n == 0 || n >= sizeof(addr.sun_path) || !rt_ipc_connected())
        return -1;
    memcpy(addr.sun_path, rt.cfg.socket, n);
    fd = (int)syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0 && syscall(SYS_connect, fd, &addr, sizeof(addr)) < 0) {
        (void)syscall(SYS_close, fd);
        fd = -1;
    }
    return fd;
}

static void wait_for_sampler_signals(void)
{
    for (unsigned i = 0; atomic_load(&rt.signals_in_flight) > 0 && i < 1000000; i++)
        (void)sched_yield(); /* a tgkill is never blocked: a few microseconds */
}

static void drain_own_samples(void)
{
    static const struct timespec now = {0, 0};
    sigset_t prof;
    siginfo_t info, program;
    bool keep = false;

    (void)sigemptyset(&prof);
    (void)sigaddset(&prof, RT_SAMPLE_SIGNAL);
    /* The system call: glibc's sigtimedwait() reports SI_TKILL as SI_USER. */
    while (syscall(SYS_rt_sigtimedwait, &prof, &info, &now, (size_t)(_NSIG / 8)) ==
           RT_SAMPLE_SIGNAL) {
        if (rt_handler_signal_is_ours(&info))
            continue;
        program = info;
        keep = true;
    }
    if (keep) /* a standard signal is pending at most once: one instance back */
        (void)syscall(SYS_rt_tgsigqueueinfo, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid),
                      RT_SAMPLE_SIGNAL, &program);
}

static void before_exec(struct exec_state *st, const char *into)
{
    struct sigaction pa;
    sigset_t prof, mask;
    int saved_errno = errno;

    st->fork_start = st->counted = st->ignored = st->timer = false;
    st->census_fd = -1;
    if (atomic_load(&rt.running) && (int32_t)syscall(SYS_getpid) != rt.pid)
        st->census_fd = vfork_child_says_here();
    /* Not in a vfork child: the pending start is its parent's. */
    if (atomic_load(&rt.fork_start) != RT_FORK_START_NONE && (int32_t)syscall(SYS_getpid) == rt.pid)
        st->fork_start = rt_fork_start_cancel();
    if (!kept_aside(RT_SAMPLE_SIGNAL))
        return; /* not ours (never installed, or the program took it): nothing to undo */
    if ((int32_t)syscall(SYS_getpid) == rt.pid) {
        atomic_fetch_add(&rt.exec_pending, 1);
        st->counted = true;
        rt_region_before_exec(into);
        wait_for_sampler_signals();
        /* The thread's own timer: no signal of its may be pending across the exec. Those
         * of the other threads go to them, and they end with the exec. (Not in a vfork
         * child: the timer, and a perf event behind a copied descriptor, are the
         * parent's.) */
        if (rt_self && !rt_self->timer_paused) {
            rt_cpu_timer_pause(rt_self, true);
            st->timer = true;
        }
    }
    (void)sigemptyset(&prof);
    (void)sigaddset(&prof, RT_SAMPLE_SIGNAL);
    (void)rt_sigmask_raw(SIG_BLOCK, &prof, &mask);
    if (st->counted)
        drain_own_samples();
    rt_handler_program_action(NULL, &pa);
    if (pa.sa_handler == SIG_IGN) {
        struct sigaction ignore;

        memset(&ignore, 0, sizeof(ignore));
        ignore.sa_handler = SIG_IGN;
        (void)sigemptyset(&ignore.sa_mask);
        st->ignored = rt_real_sigaction(RT_SAMPLE_SIGNAL, &ignore, NULL) == 0;
    }
    (void)rt_sigmask_raw(SIG_SETMASK, &mask, NULL);
    errno = saved_errno;
}

static void after_failed_exec(const struct exec_state *st)
{
    int saved_errno = errno;

    if (st->census_fd >= 0) /* the exec failed: the vfork child goes on, without it */
        (void)syscall(SYS_close, st->census_fd);
    if (st->fork_start)
        rt_fork_start_restore();
    if (st->ignored)
        rt_handler_restore();
    if (st->timer && rt_self)
        rt_cpu_timer_pause(rt_self, false);
    if (st->counted) {
        rt_region_after_failed_exec();
        atomic_fetch_sub(&rt.exec_pending, 1);
        atomic_store(&rt.exec_failed, 1); /* after: the sampler must see the exec over */
    }
    errno = saved_errno;
}

/* One wrapper per exec function: prepare, exec, restore if the exec failed. into: what it
 * execs (the path or file name), for the profile of the image that ends. */
#define EXEC_WRAPPER(name, params, into, args) \
    FLEETPROF_EXPORT int name params           \
    {                                          \
        struct exec_state st;                  \
        int r;                                 \
                                               \
        if (!real_##name)                      \
            resolve_real_functions();          \
        before_exec(&st, into);                \
        r = real_##name args;                  \
        after_failed_exec(&st);                \
        return r;                              \
    }

EXEC_WRAPPER(execve, (const char *path, char *const argv[], char *const envp[]), path,
             (path, argv, envp))
EXEC_WRAPPER(execv, (const char *path, char *const argv[]), path, (path, argv))
EXEC_WRAPPER(execvp, (const char *file, char *const argv[]), file, (file, argv))
EXEC_WRAPPER(execvpe, (const char *file, char *const argv[], char *const envp[]), file,
             (file, argv, envp))
EXEC_WRAPPER(fexecve, (int fd, char *const argv[], char *const envp[]), argv[0], (fd, argv, envp))

/* posix_spawn: glibc's child execs with its own __execve, not through the wrappers above,
 * and shares our memory only until then: it cannot connect as a vfork child does. The
 * parent tells the daemon the pid instead, once the call returned (the exec is done). */
#define SPAWN_WRAPPER(name)                                                          \
    FLEETPROF_EXPORT int name(                                                       \
            pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions, \
            const posix_spawnattr_t *attr, char *const argv[], char *const envp[])   \
    {                                                                                \
        pid_t child = 0;                                                             \
        int r;                                                                       \
                                                                                     \
        if (!real_##name)                                                            \
            resolve_real_functions();                                                \
        if (!real_##name)                                                            \
            return ENOSYS;                                                           \
        for (unsigned tries = 0;;) {                                                 \
            r = real_##name(&child, path, actions, attr, argv, envp);                \
            if (!rt_slots_again(r, &tries))                                          \
                break;                                                               \
        }                                                                            \
        if (pid)                                                                     \
            *pid = child;                                                            \
        if (r == 0 && child > 0 && atomic_load(&rt.running))                         \
            rt_ipc_spawned((int32_t)child);                                          \
        return r;                                                                    \
    }

SPAWN_WRAPPER(posix_spawn)
SPAWN_WRAPPER(posix_spawnp)

/* The execl family: glibc's own call its execve internally (not through our wrapper), so
 * they are rebuilt here on the wrapped execv* functions. */
#define EXECL_MAX_ARGS 8192

static int collect_args(const char *arg0, va_list ap, char **argv, char ***ret_envp)
{
    size_t n = 0;

    argv[n++] = (char *)arg0;
    while (argv[n - 1]) {
        if (n == EXECL_MAX_ARGS) {
            errno = E2BIG;
            return -1;
        }
        argv[n++] = va_arg(ap, char *);
    }
    if (ret_envp)
        *ret_envp = va_arg(ap, char **);
    return 0;
}

FLEETPROF_EXPORT int execl(const char *path, const char *arg, ...)
{
    char *argv[EXECL_MAX_ARGS];
    va_list ap;
    int r;

    va_start(ap, arg);
    r = collect_args(arg, ap, argv, NULL);
    va_end(ap);
    return r < 0 ? r : execv(path, argv);
}

FLEETPROF_EXPORT int execlp(const char *file, const char *arg, ...)
{
    char *argv[EXECL_MAX_ARGS];
    va_list ap;
    int r;

    va_start(ap, arg);
    r = collect_args(arg, ap, argv, NULL);
    va_end(ap);
    return r < 0 ? r : execvp(file, argv);
}

FLEETPROF_EXPORT int execle(const char *path, const char *arg, ...)
{
    char *argv[EXECL_MAX_ARGS];
    char **envp = NULL;
    va_list ap;
    int r;

    va_start(ap, arg);
    r = collect_args(arg, ap, argv, &envp);
    va_end(ap);
    return r < 0 ? r : execve(path, argv, envp);
}

/* glibc's loader calls a shared object's constructors with the program's argc, argv and
 * envp (elf/dl-init.c), a dlopen()ed object's as well. */
__attribute__((constructor)) static void on_library_load(int argc, char **argv, char **envp)
{
    const char *startup = getenv("FLEETPROF_STARTUP");

    (void)envp;
    resolve_real_functions();
    rt_loader_gate_install();
    if (startup && strcmp(startup, "1") == 0)
        (void)rt_start_at_load(argc, argv);
}
