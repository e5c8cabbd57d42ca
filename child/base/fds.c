/* child/base/fds.c - the runtime's own descriptors and threads, which the program must not see.
 *
 * The table of descriptors the runtime protects from the program's close(), close_range(),
 * closefrom() and dup2() (the interposers in preload.c and preload-fds.c ask it), where they
 * are numbered (a high band), the pipes captured while libuv or libunwind is set up, and the
 * runtime's internal threads (all signals blocked; their closes are the runtime's). Below
 * the rest of the runtime: it calls nothing of it but log.c.
 */
#include "child/base/fds.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*close_fn)(int);
typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

/* The C library's, past our interposers (preload.c); looked up at load, or at first use
 * when that comes before any constructor ran. */
static pthread_create_fn real_pthread_create;
static close_fn real_close;
static sigaction_fn real_sigaction;

RT_NO_TSAN __attribute__((constructor)) static void resolve_real_functions(void)
{
    /* ISO C has no cast from void * to a function pointer; POSIX's dlsym documentation
     * gives this assignment through a void ** as the portable form. */
    if (!real_pthread_create)
        *(void **)&real_pthread_create = dlsym(RTLD_NEXT, "pthread_create");
    if (!real_close)
        *(void **)&real_close = dlsym(RTLD_NEXT, "close");
    if (!real_sigaction)
        *(void **)&real_sigaction = dlsym(RTLD_NEXT, "sigaction");
}

static __thread int creating_internal;
/* Set in the runtime's own threads: their close() calls are the runtime's. */
static __thread int internal_thread __attribute__((tls_model("initial-exec")));
/* Set on the IPC thread: cancellation is enabled around its polls only. */
static __thread int cancel_in_poll __attribute__((tls_model("initial-exec")));

/* The runtime's descriptors, as fd + 1 (0: a free slot, -1: a slot being filled), with
 * the identity of the file each held when it was protected; kept_fds survive a fork. */
#define RT_MAX_KEPT_FDS 8
static _Atomic int own_fds[RT_MAX_OWN_FDS];
static struct {
    dev_t dev;
    ino_t ino;
} own_ids[RT_MAX_OWN_FDS];
static int kept_fds[RT_MAX_KEPT_FDS];
static size_t kept_count;
/* While the runtime initialises libunwind or libuv on this thread: the pipes they make
 * then are the runtime's (rt_fds_capture). */
static __thread enum rt_fds_capture capturing __attribute__((tls_model("initial-exec")));

/* Where a starting internal thread finds its start function, with no malloc on either
 * side: a thread's first free() makes it a tcache and an arena of its own (64 MiB of address
 * space, kept; 0.07 ms of a short-lived process's CPU for its sampler thread). A slot is
 * taken by the creator and given back by the thread once it has read it; the runtime runs
 * a few threads at once, so malloc is only the fallback. */
#define START_SLOTS 8
static struct rt_thread_start start_slots[START_SLOTS];
static _Atomic bool start_slot_taken[START_SLOTS];

static struct rt_thread_start *start_slot_take(void)
{
    for (int i = 0; i < START_SLOTS; i++) {
        bool free_slot = false;

        if (atomic_compare_exchange_strong(&start_slot_taken[i], &free_slot, true)) {
            start_slots[i].slot = i;
            return &start_slots[i];
        }
    }
    return NULL;
}

static void start_give_back(struct rt_thread_start *ts)
{
    if (ts->on_callers_stack)
        return;
    if (ts->slot >= 0)
        atomic_store(&start_slot_taken[ts->slot], false);
    else
        free(ts);
}

static void *internal_start(void *p)
{
    struct rt_thread_start ts = *(struct rt_thread_start *)p;

    start_give_back(p);
    internal_thread = 1;
    return ts.start(ts.arg);
}

/* The stack of each of the runtime's threads. Their deepest use (libunwind stepping a copied
 * stack, libuv and protobuf-c) measured under 16 KiB; the default would be RLIMIT_STACK,
 * 8 MiB each, taken from a program that runs under `ulimit -v`. */
#define RT_INTERNAL_STACK_BYTES (256 * 1024)

int rt_create_internal_thread(pthread_t *thread, void *(*start)(void *), void *arg)
{
    return rt_create_internal_thread_on(thread, start, arg, NULL, 0);
}

int rt_create_internal_thread_on(pthread_t *thread, void *(*start)(void *), void *arg, void *stack,
                                 size_t stack_bytes)
{
    struct rt_thread_start *ts;
    pthread_attr_t attr;
    sigset_t all, old;
    int r;

    if (!real_pthread_create)
        resolve_real_functions();
    if (!real_pthread_create)
        return -ENOSYS;
    if (stack) {
        /* At the bottom of that stack (it grows down from the top, where glibc puts the
         * thread's TLS), read before the thread could reach it. */
        if (stack_bytes < 2 * sizeof(*ts))
            return -EINVAL;
        ts = stack;
        stack = (char *)stack + 64;
        stack_bytes -= 64;
    } else if (!(ts = start_slot_take())) {
        ts = malloc(sizeof(*ts));
        if (!ts)
            return -ENOMEM;
        ts->slot = -1;
    }
    ts->start = start;
    ts->arg = arg;
    ts->on_callers_stack = stack != NULL;
    r = pthread_attr_init(&attr);
    if (r == 0)
        r = stack ? pthread_attr_setstack(&attr, stack, stack_bytes)
                  : pthread_attr_setstacksize(&attr, RT_INTERNAL_STACK_BYTES);
    if (r != 0) {
        start_give_back(ts);
        return -r;
    }
    /* The new thread inherits a full mask: the program's signals, ours included, are
     * never delivered to the profiler's threads. */
    (void)sigfillset(&all);
    (void)rt_sigmask_raw(SIG_SETMASK, &all, &old);
    creating_internal = 1;
    {
        pthread_create_fn first;

        /* The first definition in the process: a sanitizer's interceptor if the program
         * has one (it must see every thread), else ours, which passes straight through. */
        *(void **)&first = dlsym(RTLD_DEFAULT, "pthread_create");
        r = (first ? first : real_pthread_create)(thread, &attr, internal_start, ts);
    }
    creating_internal = 0;
    (void)rt_sigmask_raw(SIG_SETMASK, &old, NULL);
    (void)pthread_attr_destroy(&attr);
    if (r != 0)
        start_give_back(ts);
    return -r;
}
/* --- the runtime's descriptors ------------------------------------------------------ */

void rt_fd_protect(int fd)
{
    struct stat st;

    if (fd < 0 || fstat(fd, &st) != 0)
        return;
    for (size_t i = 0; i < RT_MAX_OWN_FDS; i++)
        if (atomic_load(&own_fds[i]) == fd + 1)
            return;
    for (size_t i = 0; i < RT_MAX_OWN_FDS; i++) {
        int empty = 0;

        /* Reserved, identity written, then published: a reader never sees a stale one. */
        if (atomic_compare_exchange_strong(&own_fds[i], &empty, -1)) {
            own_ids[i].dev = st.st_dev;
            own_ids[i].ino = st.st_ino;
            atomic_store(&own_fds[i], fd + 1);
            return;
        }
    }
}

bool rt_fd_is_own(int fd)
{
    for (size_t i = 0; fd >= 0 && i < RT_MAX_OWN_FDS; i++)
        if (atomic_load(&own_fds[i]) == fd + 1)
            return true;
    return false;
}

/* Whether slot i still holds the file it held when protected. */
static bool own_fd_intact(size_t i, int fd)
{
    struct stat st;

    return fstat(fd, &st) == 0 && st.st_dev == own_ids[i].dev && st.st_ino == own_ids[i].ino;
}

bool rt_fd_intact(int fd)
{
    for (size_t i = 0; fd >= 0 && i < RT_MAX_OWN_FDS; i++)
        if (atomic_load(&own_fds[i]) == fd + 1)
            return own_fd_intact(i, fd);
    return false;
}

size_t rt_fds_lost(int *ret_fds, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < RT_MAX_OWN_FDS && n < max; i++) {
        int v = atomic_load(&own_fds[i]);

        if (v > 0 && !own_fd_intact(i, v - 1))
            ret_fds[n++] = v - 1;
    }
    return n;
}

void rt_fd_release(int fd)
{
    if (!real_close)
        resolve_real_functions();
    for (size_t i = 0; fd >= 0 && i < RT_MAX_OWN_FDS; i++) {
        int expected = fd + 1;
        bool intact = atomic_load(&own_fds[i]) == fd + 1 && own_fd_intact(i, fd);

        if (atomic_compare_exchange_strong(&own_fds[i], &expected, 0) && intact && real_close)
            (void)real_close(fd);
    }
}

static void fd_forget(int fd)
{
    for (size_t i = 0; i < RT_MAX_OWN_FDS; i++) {
        int expected = fd + 1;

        (void)atomic_compare_exchange_strong(&own_fds[i], &expected, 0);
    }
}

void rt_fd_unprotect(int fd)
{
    fd_forget(fd);
}

size_t rt_fds_release_kept(void)
{
    size_t n = 0;

    for (size_t i = 0; i < kept_count; i++, n++)
        rt_fd_release(kept_fds[i]);
    kept_count = 0;
    return n;
}

bool rt_fd_is_kept(int fd)
{
    for (size_t i = 0; fd >= 0 && i < kept_count; i++)
        if (kept_fds[i] == fd)
            return true;
    return false;
}

bool rt_fds_capturing(void)
{
    return capturing != RT_FDS_CAPTURE_OFF;
}

/* Not instrumented: the loader wrappers ask it, and TSan's own start-up walks the modules
 * through them before TSan can run instrumented code. */
RT_NO_TSAN bool rt_is_internal_thread(void)
{
    return internal_thread != 0;
}

void rt_thread_cancel_only_in_poll(void)
{
    if (RT_TSAN)
        return; /* no epoll interposers there (preload-fds.c) to enable it again */
    (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    cancel_in_poll = 1;
}

bool rt_thread_cancels_in_poll(void)
{
    return cancel_in_poll != 0;
}

bool rt_creating_internal_thread(void)
{
    return creating_internal != 0;
}

/* Where the runtime's descriptors go: just below the lower of the soft RLIMIT_NOFILE and
 * select()'s 1024, so that a program numbering its own files from 3 (systemd's LISTEN_FDS,
 * a daemon's dup2() of /dev/null over 3..63, a shell's 3..9) finds them where it would
 * without us, and its own first descriptor is 3 again. */
#define RT_FDS_BAND 64

/* The top of the band: asked of getrlimit() once, and again only when a move fails (the
 * program lowered its limit since: setrlimit and prlimit are its only ways). A raised
 * limit leaves the band where it was, still clear of the program's numbers. */
static _Atomic int band_top;

static int read_band_top(void)
{
    struct rlimit rl;
    rlim_t top = 1024;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < top)
        top = rl.rlim_cur;
    atomic_store(&band_top, (int)top);
    return (int)top;
}

int rt_fd_relocate(int fd)
{
    int top = atomic_load(&band_top), high;

    if (fd < 0)
        return fd;
    if (top == 0)
        top = read_band_top();
    if (top < 4 * RT_FDS_BAND || fd >= top - RT_FDS_BAND)
        return fd; /* too few numbers to keep apart, or there already */
    /* Close-on-exec whatever the original was: a descriptor of the runtime must never
     * reach an exec'd program (all of ours are made so anyway). */
    high = fcntl(fd, F_DUPFD_CLOEXEC, top - RT_FDS_BAND);
    if (high < 0 && errno == EINVAL && read_band_top() != top)
        return rt_fd_relocate(fd); /* the limit moved: the band with it */
    if (high < 0)
        return fd; /* the band is full: stay low rather than fail */
    if (!real_close)
        resolve_real_functions();
    if (real_close)
        (void)real_close(fd);
    return high;
}

void rt_fds_forget(void)
{
    for (size_t i = 0; i < RT_MAX_OWN_FDS; i++)
        atomic_store(&own_fds[i], 0);
    for (size_t i = 0; i < kept_count; i++)
        rt_fd_protect(kept_fds[i]);
}

/* While capturing: /dev/null on 0, 1 and 2 if the program left them closed, so that no
 * descriptor of ours takes a standard number, which a program started with them closed
 * later gives to /dev/null (daemon(3) dup2()s onto them), replacing ours unseen. */
static __thread struct {
    int fd;
    ino_t ino;
} placeholders[3];
static __thread size_t placeholder_count;

static void hold_standard_fds(void)
{
    /* One poll() tells which of the three are closed (POLLNVAL), not three fcntl() calls:
     * no event is asked for and it does not wait. */
    struct pollfd std[3] = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}};

    if (poll(std, 3, 0) < 0) /* EINTR, ENOMEM: then each is tested alone */
        for (int fd = 0; fd < 3; fd++)
            std[fd].revents = fcntl(fd, F_GETFD) < 0 && errno == EBADF ? POLLNVAL : 0;
    for (int fd = 0; fd < 3; fd++) {
        struct stat st;
        int p;

        if (!(std[fd].revents & POLLNVAL))
            continue;
        /* A memfd: an inode of its own, so it is recognised at release time. */
        p = memfd_create("fleetprof-placeholder", MFD_CLOEXEC);
        if (p < 0 || fstat(p, &st) != 0)
            return;
        placeholders[placeholder_count].fd = p;
        placeholders[placeholder_count++].ino = st.st_ino;
        if (p >= 3) /* another thread took the free number first: nothing to hold */
            break;
    }
}

static void release_standard_fds(void)
{
    if (!real_close)
        resolve_real_functions();
    for (size_t i = 0; i < placeholder_count; i++) {
        struct stat st;

        /* Still ours: a program thread may have dup2()ed onto it meanwhile. */
        if (fstat(placeholders[i].fd, &st) == 0 && st.st_ino == placeholders[i].ino && real_close)
            (void)real_close(placeholders[i].fd);
    }
    placeholder_count = 0;
}

/* Threads making descriptors of the runtime right now (capturing). Between the kernel's
 * handing out a number and its protection, a program thread's dup2() or close() onto it
 * would not see it as ours: the program's file would replace libuv's epoll or socket
 * unseen (libuv then aborts the process over an epoll_ctl() error), or the program would
 * close it. Those calls wait for such a setup to end instead (rt_fds_wait_setups()). */
static _Atomic int setups;

#define SETUP_WAIT_STEP_NS 50000L
#define SETUP_WAIT_MAX_NS  1000000000L /* then go on: a stuck setup must not stall the program */

void rt_fds_capture(enum rt_fds_capture how)
{
    if (how != RT_FDS_CAPTURE_OFF && capturing == RT_FDS_CAPTURE_OFF) {
        atomic_fetch_add(&setups, 1);
        hold_standard_fds();
    } else if (how == RT_FDS_CAPTURE_OFF && capturing != RT_FDS_CAPTURE_OFF) {
        release_standard_fds();
        atomic_fetch_sub(&setups, 1);
    }
    capturing = how;
}

void rt_fds_setup_begin(void)
{
    atomic_fetch_add(&setups, 1);
}

void rt_fds_setup_end(void)
{
    atomic_fetch_sub(&setups, 1);
}

void rt_fds_wait_setups(void)
{
    struct timespec step = {0, SETUP_WAIT_STEP_NS};

    if (capturing != RT_FDS_CAPTURE_OFF || internal_thread)
        return; /* its own setup, or one of the runtime's threads */
    for (long waited = 0; atomic_load(&setups) > 0 && waited < SETUP_WAIT_MAX_NS;
         waited += SETUP_WAIT_STEP_NS)
        (void)nanosleep(&step, NULL);
}

void rt_fds_fork_child(void)
{
    /* Setups on the parent's other threads did not come along. */
    atomic_store(&setups, capturing != RT_FDS_CAPTURE_OFF ? 1 : 0);
}

void rt_fds_captured(int fds[2])
{
    for (int i = 0; i < 2; i++) {
        fds[i] = rt_fd_relocate(fds[i]);
        rt_fd_protect(fds[i]);
        if (capturing == RT_FDS_CAPTURE_KEEP && kept_count < RT_MAX_KEPT_FDS)
            kept_fds[kept_count++] = fds[i];
    }
}
size_t rt_fds_own_in(unsigned int first, unsigned int last, unsigned int *own)
{
    size_t n = 0;

    for (size_t i = 0; i < RT_MAX_OWN_FDS; i++) {
        int v = atomic_load(&own_fds[i]);

        if (v > 0 && (unsigned int)(v - 1) >= first && (unsigned int)(v - 1) <= last)
            own[n++] = (unsigned int)(v - 1);
    }
    for (size_t i = 1; i < n; i++) /* insertion sort: a handful at most */
        for (size_t k = i; k > 0 && own[k - 1] > own[k]; k--) {
            unsigned int t = own[k];

            own[k] = own[k - 1];
            own[k - 1] = t;
        }
    return n;
}

/* --- signal actions, past the interposers ------------------------------------------ */

RT_NO_TSAN int rt_libc_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!real_sigaction)
        resolve_real_functions();
    if (!real_sigaction) {
        errno = ENOSYS;
        return -1;
    }
    return real_sigaction(sig, act, old);
}

RT_NO_TSAN int rt_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (RT_TSAN) {
        /* TSan must see our handler installed (its interceptor, the first definition,
         * wraps it); then our interposer below passes straight through. */
        sigaction_fn first;

        *(void **)&first = dlsym(RTLD_DEFAULT, "sigaction");
        if (first)
            return first(sig, act, old);
    }
    return rt_libc_sigaction(sig, act, old);
}

int rt_sigmask_raw(int how, const sigset_t *set, sigset_t *old)
{
    int saved_errno = errno, r = 0;

    if (syscall(SYS_rt_sigprocmask, how, set, old, (size_t)(_NSIG / 8)) < 0)
        r = errno;
    errno = saved_errno;
    return r;
}
