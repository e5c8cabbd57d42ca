/* child/base/fds.h - the runtime's own descriptors and threads (fds.c), below the rest of the
 * runtime: the interposers (preload.c, preload-fds.c) and the runtime's files call it.
 */
#ifndef FLEETPROF_CHILD_BASE_FDS_H
#define FLEETPROF_CHILD_BASE_FDS_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

/* TSan calls dl_iterate_phdr (ours) while initializing, before it can run instrumented code. */
#if defined(__SANITIZE_THREAD__)
#define RT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RT_TSAN 1
#endif
#endif
#ifndef RT_TSAN
#define RT_TSAN 0
#endif
#if defined(__has_attribute) && __has_attribute(disable_sanitizer_instrumentation)
#define RT_NO_TSAN __attribute__((disable_sanitizer_instrumentation))
#else
#define RT_NO_TSAN
#endif

/* A thread's start routine and argument, handed (malloc()ed) to a wrapper that runs it. */
struct rt_thread_start {
    void *(*start)(void *);
    void *arg;
    bool on_callers_stack; /* in the stack the caller gave: not freed */
    int slot;              /* internal threads: its slot of fds.c's pool, or -1 (malloc'd) */
};

/* Threads of our own, never registered for sampling, all signals blocked. */
int rt_create_internal_thread(pthread_t *thread, void *(*start)(void *), void *arg);
/* The same on the caller's stack (stack_bytes at stack, which the caller frees after the
 * join: glibc keeps no cache of it); with stack NULL, as above. */
int rt_create_internal_thread_on(pthread_t *thread, void *(*start)(void *), void *arg, void *stack,
                                 size_t stack_bytes);
bool rt_is_internal_thread(void);
/* From now on the calling thread (the IPC thread) can be cancelled only inside
 * epoll_wait()/epoll_pwait() (interposed, preload-fds.c), where it holds no lock and libuv
 * is between events. A no-op in TSan builds, which do not interpose them. */
void rt_thread_cancel_only_in_poll(void);
bool rt_thread_cancels_in_poll(void);
/* The calling thread is making an internal thread: pthread_create() passes it through. */
bool rt_creating_internal_thread(void);

/* Descriptors of the runtime that the program's close(), close_range() and closefrom()
 * leave open (a daemon's "close everything" must not take them); up to RT_MAX_OWN_FDS. A
 * close from the runtime's own threads closes and forgets. rt_fds_forget() drops them all
 * but the ones captured with RT_FDS_CAPTURE_KEEP (a forked child, before it closes its
 * copies and before libuv's fork handler replaces its pipe). */
#define RT_MAX_OWN_FDS 32
void rt_fd_protect(int fd);
void rt_fds_forget(void);
bool rt_fd_is_own(int fd);
/* Whether fd is ours and still holds the file it held when protected. */
bool rt_fd_intact(int fd);
/* Descriptors of ours that no longer hold their file (the program closed them by a route
 * we do not see, as the raw close_range system call, or dup2()ed onto them); their count. */
size_t rt_fds_lost(int *ret_fds, size_t max);
/* Our descriptors in [first, last], ascending, into own (RT_MAX_OWN_FDS); their count. */
size_t rt_fds_own_in(unsigned int first, unsigned int last, unsigned int *own);
/* The runtime gives fd up: forgotten, and closed if it still holds our file. */
void rt_fd_release(int fd);
/* Moves a new descriptor of the runtime's to a high number (see fds.c); returns the
 * descriptor to use (fd itself when it cannot move). */
int rt_fd_relocate(int fd);
/* Stops protecting fd, without closing it. */
void rt_fd_unprotect(int fd);
/* Whether fd was captured with RT_FDS_CAPTURE_KEEP: libunwind's memory-probe pipe. */
bool rt_fd_is_kept(int fd);

/* While set on a thread, the pipes pipe()/pipe2() make there are the runtime's (libuv's
 * and libunwind's own, out of our code's reach); KEEP: still ours in a forked child
 * (libunwind's, which the child goes on using). */
enum rt_fds_capture { RT_FDS_CAPTURE_OFF, RT_FDS_CAPTURE, RT_FDS_CAPTURE_KEEP };
void rt_fds_capture(enum rt_fds_capture how);
bool rt_fds_capturing(void);
/* Closes the descriptors kept through forks (libunwind's pipe): only once nothing can use
 * them again. Returns how many there were. */
size_t rt_fds_release_kept(void);
/* On a program thread about to dup2() onto or close a descriptor: waits (at most a second)
 * until no thread of the runtime is making descriptors, so that every one of ours is
 * protected by then. Immediate when none is (one atomic load). */
void rt_fds_wait_setups(void);
/* A short-lived descriptor of the runtime's (a /proc read on the sampler) is made and closed
 * between these: the program's dup2()/close() wait for it as for a setup, without the
 * standard descriptors' placeholders a capture makes. */
void rt_fds_setup_begin(void);
void rt_fds_setup_end(void);
/* In a forked child, first: the parent's other threads' setups are not its own. */
void rt_fds_fork_child(void);
/* pipe2() made fds on a capturing thread: they move high and become the runtime's. */
void rt_fds_captured(int fds[2]);

/* The C library's sigaction, past our interposer (preload.c); rt_real_sigaction() goes
 * through TSan's interceptor in TSan builds, so that TSan sees our handlers. */
int rt_libc_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
int rt_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* The calling thread's signal mask changed by the system call itself, past the program's
 * view of it (preload.c's pthread_sigmask() stops and restarts the thread's CPU timer): for
 * the runtime's own brief changes, which it undoes itself. 0 or an errno, like
 * pthread_sigmask(); async-signal-safe. */
int rt_sigmask_raw(int how, const sigset_t *set, sigset_t *old);

#endif /* FLEETPROF_CHILD_BASE_FDS_H */
