/* child/entry/preload-waits.c - the program's blocking calls, interposed so that the time a
 * thread waits in them is drawn at the stack where it waits (child/core/waits.c): each
 * marks the call's start and end around the C library's own function, which it calls with
 * the same arguments (cancellation points stay cancellation points, errno is the call's).
 * A wait through a call not listed here (or a raw system call) is drawn at the thread's last
 * sampled stack.
 *
 * The C library's functions are looked up in the constructor: these may be called from
 * signal handlers, where a lookup could not be made.
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child/core/core.h"
#include "child/include/fleetprof.h"

/* Under TSan its interceptors of these calls must see every one (they carry its
 * synchronisation model): none of this is built in, as in preload-fds.c. */
#if !RT_TSAN

/* Each wrapper: ret name(params), the real one's pointer, called with args. */
#define WAITS(X)                                                                                 \
    X(int, nanosleep, (const struct timespec *req, struct timespec *rem), (req, rem))            \
    X(int, clock_nanosleep,                                                                      \
      (clockid_t clock, int flags, const struct timespec *req, struct timespec *rem),            \
      (clock, flags, req, rem))                                                                  \
    X(int, usleep, (useconds_t us), (us))                                                        \
    X(unsigned, sleep, (unsigned s), (s))                                                        \
    X(int, pause, (void), ())                                                                    \
    X(int, poll, (struct pollfd * fds, nfds_t n, int timeout), (fds, n, timeout))                \
    X(int, ppoll,                                                                                \
      (struct pollfd * fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask),     \
      (fds, n, timeout, mask))                                                                   \
    X(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout),            \
      (n, r, w, e, timeout))                                                                     \
    X(int, pselect,                                                                              \
      (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,                   \
       const sigset_t *mask),                                                                    \
      (n, r, w, e, timeout, mask))                                                               \
    X(pid_t, waitpid, (pid_t pid, int *status, int options), (pid, status, options))             \
    X(pid_t, wait, (int *status), (status))                                                      \
    X(pid_t, wait4, (pid_t pid, int *status, int options, struct rusage *ru),                    \
      (pid, status, options, ru))                                                                \
    X(int, waitid, (idtype_t type, id_t id, siginfo_t * info, int options),                      \
      (type, id, info, options))                                                                 \
    X(int, sigsuspend, (const sigset_t *mask), (mask))                                           \
    X(int, sigwait, (const sigset_t *set, int *sig), (set, sig))                                 \
    X(int, sigwaitinfo, (const sigset_t *set, siginfo_t *info), (set, info))                     \
    X(int, sigtimedwait, (const sigset_t *set, siginfo_t *info, const struct timespec *timeout), \
      (set, info, timeout))                                                                      \
    X(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n))                                \
    X(ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags))              \
    X(ssize_t, recvfrom,                                                                         \
      (int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG from, socklen_t *len),             \
      (fd, buf, n, flags, from, len))                                                            \
    X(ssize_t, recvmsg, (int fd, struct msghdr *msg, int flags), (fd, msg, flags))               \
    X(int, pthread_join, (pthread_t thread, void **ret), (thread, ret))                          \
    X(int, sem_wait, (sem_t * sem), (sem))                                                       \
    X(int, sem_timedwait, (sem_t * sem, const struct timespec *timeout), (sem, timeout))

#define DECLARE_REAL(ret, name, params, args) static ret(*real_##name) params;
WAITS(DECLARE_REAL)

/* Versioned in glibc: the default version of each, as a program built today binds to. */
typedef int (*cond_wait_fn)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
static cond_wait_fn real_pthread_cond_wait;
static cond_timedwait_fn real_pthread_cond_timedwait;

__attribute__((constructor(101))) static void resolve_waits(void)
{
#define RESOLVE(ret, name, params, args) *(void **)&real_##name = dlsym(RTLD_NEXT, #name);
    WAITS(RESOLVE)
    *(void **)&real_pthread_cond_wait = dlvsym(RTLD_NEXT, "pthread_cond_wait", "GLIBC_2.3.2");
    *(void **)&real_pthread_cond_timedwait =
            dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
}

/* A call before the constructor ran (another library's constructor): looked up now. */
#define NEED(fn)             \
    do {                     \
        if (!(fn))           \
            resolve_waits(); \
    } while (0)

/* noinline: its own frame, whose saved frame pointer and return address are the caller's. */
#define DEFINE_WAIT(ret, name, params, args)                                           \
    FLEETPROF_EXPORT __attribute__((noinline)) ret name params                         \
    {                                                                                  \
        ret result_;                                                                   \
                                                                                       \
        NEED(real_##name);                                                             \
        rt_wait_begin((uintptr_t)__builtin_frame_address(0),                           \
                      (uintptr_t)__builtin_return_address(0), (uintptr_t)real_##name); \
        result_ = real_##name args;                                                    \
        rt_wait_end();                                                                 \
        return result_;                                                                \
    }
WAITS(DEFINE_WAIT)

FLEETPROF_EXPORT __attribute__((noinline)) int pthread_cond_wait(pthread_cond_t *cond,
                                                                 pthread_mutex_t *mutex)
{
    int r;

    NEED(real_pthread_cond_wait);
    if (!real_pthread_cond_wait)
        return ENOSYS;
    rt_wait_begin((uintptr_t)__builtin_frame_address(0), (uintptr_t)__builtin_return_address(0),
                  (uintptr_t)real_pthread_cond_wait);
    r = real_pthread_cond_wait(cond, mutex);
    rt_wait_end();
    return r;
}

FLEETPROF_EXPORT __attribute__((noinline)) int
pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex, const struct timespec *abstime)
{
    int r;

    NEED(real_pthread_cond_timedwait);
    if (!real_pthread_cond_timedwait)
        return ENOSYS;
    rt_wait_begin((uintptr_t)__builtin_frame_address(0), (uintptr_t)__builtin_return_address(0),
                  (uintptr_t)real_pthread_cond_timedwait);
    r = real_pthread_cond_timedwait(cond, mutex, abstime);
    rt_wait_end();
    return r;
}

#endif /* !RT_TSAN */
