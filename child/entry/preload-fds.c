/* child/entry/preload-fds.c - the runtime's descriptors against a program that reuses numbers.
 *
 * Interposed (exported, see libfleetprof.map):
 *   epoll_create, epoll_create1,  while the runtime sets libuv up on a thread
 *   eventfd, socket               (rt_fds_capturing()), the descriptors they make are moved
 *                                 to a high band (rt_fd_relocate()): a program that puts its
 *                                 own files on low numbers (a dup2() sweep over 3..63, a
 *                                 shell's 3..9) does not meet them;
 *   dup2, dup3                    a program that dup2()s onto one of ours anyway gets the
 *                                 number: the runtime gives it up first (rt_fd_yield()), so
 *                                 nothing of ours reads or writes through it afterwards;
 *   open, open64, openat,         a call of the program's that finds no free number (EMFILE)
 *   openat64, dup, accept,        gets the runtime's: it gives up its connection, its
 *   accept4 (and the four above)  region's and statm's descriptors and libunwind's pipe
 *                                 (rt_fds_give_up(), once), and the call is made again;
 *   epoll_wait, epoll_pwait       the IPC thread can be cancelled only in there
 *                                 (rt_thread_cancel_only_in_poll()), where libuv is between
 *                                 events and no lock of ours is held: that is how a lost
 *                                 connection's thread is ended without running libuv again.
 * Descriptors lost by a route no interposer sees (the raw close_range system call) are found
 * by the sampler's checks (rt_fds_lost()) and re-created the same way.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "child/core/core.h"
#include "child/include/fleetprof.h"
#include "child/lifecycle/lifecycle.h"

/* Under TSan its own interceptors of these must see every call (they carry its
 * synchronisation model): none of this is built in, as for the runtime's other
 * TSan-sensitive interposers. */
#if defined(__SANITIZE_THREAD__)
#define RT_FDS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RT_FDS_TSAN 1
#endif
#endif

#ifndef RT_FDS_TSAN

typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*epoll_create_fn)(int);
typedef int (*eventfd_fn)(unsigned int, int);
typedef int (*socket_fn)(int, int, int);
typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*dup_fn)(int);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);
typedef int (*epoll_pwait_fn)(int, struct epoll_event *, int, int, const sigset_t *);

static dup2_fn real_dup2;
static dup3_fn real_dup3;
static epoll_create_fn real_epoll_create, real_epoll_create1;
static eventfd_fn real_eventfd;
static socket_fn real_socket;
static open_fn real_open, real_open64;
static openat_fn real_openat, real_openat64;
static dup_fn real_dup;
static accept_fn real_accept;
static accept4_fn real_accept4;
static epoll_wait_fn real_epoll_wait;
static epoll_pwait_fn real_epoll_pwait;

/* Before the runtime's own start (a constructor too), which makes descriptors through
 * these; and again lazily, for a call that comes before any constructor ran. */
__attribute__((constructor(101))) static void resolve(void)
{
    if (real_socket)
        return;
    *(void **)&real_dup2 = dlsym(RTLD_NEXT, "dup2");
    *(void **)&real_dup3 = dlsym(RTLD_NEXT, "dup3");
    *(void **)&real_epoll_create = dlsym(RTLD_NEXT, "epoll_create");
    *(void **)&real_epoll_create1 = dlsym(RTLD_NEXT, "epoll_create1");
    *(void **)&real_eventfd = dlsym(RTLD_NEXT, "eventfd");
    *(void **)&real_socket = dlsym(RTLD_NEXT, "socket");
    *(void **)&real_open = dlsym(RTLD_NEXT, "open");
    *(void **)&real_open64 = dlsym(RTLD_NEXT, "open64");
    *(void **)&real_openat = dlsym(RTLD_NEXT, "openat");
    *(void **)&real_openat64 = dlsym(RTLD_NEXT, "openat64");
    *(void **)&real_dup = dlsym(RTLD_NEXT, "dup");
    *(void **)&real_accept = dlsym(RTLD_NEXT, "accept");
    *(void **)&real_accept4 = dlsym(RTLD_NEXT, "accept4");
    *(void **)&real_epoll_wait = dlsym(RTLD_NEXT, "epoll_wait");
    *(void **)&real_epoll_pwait = dlsym(RTLD_NEXT, "epoll_pwait");
}

/* The function, or ENOSYS when the C library has none. */
#define CALL_REAL(fn, ...) ((fn) || (resolve(), fn) ? (fn)(__VA_ARGS__) : (errno = ENOSYS, -1))

static int made(int fd)
{
    return rt_fds_capturing() ? rt_fd_relocate(fd) : fd;
}

/* The call found no free number: the runtime's descriptors are the program's now (the
 * first time), and the call is made again. Later, the last number may have been one of the
 * runtime's short-lived ones (a /proc read on the sampler, closed a moment later): the call
 * is made again too, once no such descriptor is in flight. Either way the program gets what
 * it would without us, for one more system call at the limit. */
static bool again(int r)
{
    if (r >= 0 || errno != EMFILE || rt_fds_capturing() || !rt_running())
        return false;
    (void)rt_fds_give_up();
    rt_fds_wait_setups();
    return true;
}

#define CALL_AGAIN(fn, ...)                                 \
    do {                                                    \
        int r_ = CALL_REAL(fn, __VA_ARGS__);                \
        return again(r_) ? CALL_REAL(fn, __VA_ARGS__) : r_; \
    } while (0)

#define CALL_MADE(fn, ...)                                        \
    do {                                                          \
        int r_ = CALL_REAL(fn, __VA_ARGS__);                      \
        return made(again(r_) ? CALL_REAL(fn, __VA_ARGS__) : r_); \
    } while (0)

FLEETPROF_EXPORT int epoll_create(int size)
{
    CALL_MADE(real_epoll_create, size);
}

FLEETPROF_EXPORT int epoll_create1(int flags)
{
    CALL_MADE(real_epoll_create1, flags);
}

FLEETPROF_EXPORT int eventfd(unsigned int count, int flags)
{
    CALL_MADE(real_eventfd, count, flags);
}

FLEETPROF_EXPORT int socket(int domain, int type, int protocol)
{
    CALL_MADE(real_socket, domain, type, protocol);
}

/* open's mode, when its flags say there is one. */
#define OPEN_MODE(flags, last)             \
    mode_t mode = 0;                       \
    if ((flags) & (O_CREAT | O_TMPFILE)) { \
        va_list ap;                        \
        va_start(ap, last);                \
        mode = (mode_t)va_arg(ap, int);    \
        va_end(ap);                        \
    }

/* Named by their symbols: with _FILE_OFFSET_BITS=64 the headers redirect open to open64. */
FLEETPROF_EXPORT int interposed_open(const char *path, int flags, ...) __asm__("open");
FLEETPROF_EXPORT int interposed_open64(const char *path, int flags, ...) __asm__("open64");
FLEETPROF_EXPORT int interposed_openat(int dirfd, const char *path, int flags,
                                       ...) __asm__("openat");
FLEETPROF_EXPORT int interposed_openat64(int dirfd, const char *path, int flags,
                                         ...) __asm__("openat64");

FLEETPROF_EXPORT int interposed_open(const char *path, int flags, ...)
{
    OPEN_MODE(flags, flags);
    CALL_AGAIN(real_open, path, flags, mode);
}

FLEETPROF_EXPORT int interposed_open64(const char *path, int flags, ...)
{
    OPEN_MODE(flags, flags);
    CALL_AGAIN(real_open64, path, flags, mode);
}

FLEETPROF_EXPORT int interposed_openat(int dirfd, const char *path, int flags, ...)
{
    OPEN_MODE(flags, flags);
    CALL_AGAIN(real_openat, dirfd, path, flags, mode);
}

FLEETPROF_EXPORT int interposed_openat64(int dirfd, const char *path, int flags, ...)
{
    OPEN_MODE(flags, flags);
    CALL_AGAIN(real_openat64, dirfd, path, flags, mode);
}

FLEETPROF_EXPORT int dup(int fd)
{
    CALL_AGAIN(real_dup, fd);
}

/* glibc declares these with a transparent union for the address (__SOCKADDR_ARG). */
FLEETPROF_EXPORT int interposed_accept(int fd, struct sockaddr *addr,
                                       socklen_t *len) __asm__("accept");
FLEETPROF_EXPORT int interposed_accept4(int fd, struct sockaddr *addr, socklen_t *len,
                                        int flags) __asm__("accept4");

FLEETPROF_EXPORT int interposed_accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    CALL_AGAIN(real_accept, fd, addr, len);
}

FLEETPROF_EXPORT int interposed_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    CALL_AGAIN(real_accept4, fd, addr, len, flags);
}

/* The program's file on one of our numbers: ours is given up first. The runtime's own
 * calls (libuv's, on our threads or while it sets up) are its business. */
static void before_dup_onto(int oldfd, int newfd)
{
    if (oldfd == newfd || rt_is_internal_thread() || rt_fds_capturing())
        return;
    rt_fds_wait_setups();
    if (rt_fd_is_own(newfd))
        rt_fd_yield(newfd);
}

/* EBUSY: newfd was being handed out by an open() on another thread at that moment (Linux
 * only). One of the runtime's, short-lived (a /proc read), can be; the program would not
 * have met it without us, so the call is made again once that open is through. */
#define DUP_BUSY_TRIES 1000

FLEETPROF_EXPORT int dup2(int oldfd, int newfd)
{
    int r;

    before_dup_onto(oldfd, newfd);
    r = CALL_REAL(real_dup2, oldfd, newfd);
    for (int i = 0; r < 0 && errno == EBUSY && i < DUP_BUSY_TRIES; i++) {
        (void)sched_yield();
        r = CALL_REAL(real_dup2, oldfd, newfd);
    }
    return r;
}

FLEETPROF_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    int r;

    before_dup_onto(oldfd, newfd);
    r = CALL_REAL(real_dup3, oldfd, newfd, flags);
    for (int i = 0; r < 0 && errno == EBUSY && i < DUP_BUSY_TRIES; i++) {
        (void)sched_yield();
        r = CALL_REAL(real_dup3, oldfd, newfd, flags);
    }
    return r;
}

/* The program's waits are marked where they are (child/core/waits.c, preload-waits.c). */
FLEETPROF_EXPORT __attribute__((noinline)) int epoll_wait(int epfd, struct epoll_event *events,
                                                          int max, int timeout)
{
    int r, old;

    if (!rt_thread_cancels_in_poll()) {
        rt_wait_begin((uintptr_t)__builtin_frame_address(0), (uintptr_t)__builtin_return_address(0),
                      (uintptr_t)real_epoll_wait);
        r = CALL_REAL(real_epoll_wait, epfd, events, max, timeout);
        rt_wait_end();
        return r;
    }
    (void)pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    r = CALL_REAL(real_epoll_wait, epfd, events, max, timeout);
    (void)pthread_setcancelstate(old, NULL);
    return r;
}

FLEETPROF_EXPORT __attribute__((noinline)) int
epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout, const sigset_t *mask)
{
    int r, old;

    if (!rt_thread_cancels_in_poll()) {
        rt_wait_begin((uintptr_t)__builtin_frame_address(0), (uintptr_t)__builtin_return_address(0),
                      (uintptr_t)real_epoll_pwait);
        r = CALL_REAL(real_epoll_pwait, epfd, events, max, timeout, mask);
        rt_wait_end();
        return r;
    }
    (void)pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    r = CALL_REAL(real_epoll_pwait, epfd, events, max, timeout, mask);
    (void)pthread_setcancelstate(old, NULL);
    return r;
}

#endif
