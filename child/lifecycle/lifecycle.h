/* child/lifecycle/lifecycle.h - the runtime's lifecycle (runtime.c): start, stop, fork, exit, and
 * the profile writer. Above the daemon client and the core; only the interposers, the public API
 * and runtime.c include it (docs/architecture.md, "Inside child/").
 */
#ifndef FLEETPROF_CHILD_LIFECYCLE_LIFECYCLE_H
#define FLEETPROF_CHILD_LIFECYCLE_LIFECYCLE_H

#include "child/core/core.h"

/* runtime.c */
struct json_writer;
struct progress_logger;
/* This process's profile into w (one JSON object). shutdown_ns != 0 marks an ending
 * process; progress may be NULL. */
int rt_profile_write(struct json_writer *w, uint64_t shutdown_ns, bool exit_profile,
                     const struct progress_logger *progress);
int rt_write_profile_to(const char *path, uint64_t shutdown_ns);
/* exit() and _exit(): stop sampling, write the exit profile once. */
void rt_on_process_exit(void);
/* fleetprof_init() by the library's constructor (FLEETPROF_STARTUP), with the argc and argv
 * glibc passes constructors (argv NULL: read from /proc): the CPU the image used before it is
 * the start thread's first sample. */
int rt_start_at_load(int argc, char **argv);
/* Whether the runtime runs, after finishing a forked child's deferred start if one is
 * pending (or waiting for the thread finishing it). Not async-signal-safe. */
bool rt_start_if_pending(void);
/* rt.running, or the deferred start finished now: for calls that need the runtime. */
static inline bool rt_running(void)
{
    return atomic_load_explicit(&rt.running, memory_order_acquire) ||
           (atomic_load_explicit(&rt.fork_start, memory_order_relaxed) != RT_FORK_START_NONE &&
            rt_start_if_pending());
}
/* On the sampler thread while the start is deferred: whether it is time to finish it (the
 * child ran an interval of CPU, waited long enough, or has an exit signal to handle). */
bool rt_fork_start_due(uint64_t now_ns);
/* Async-signal-safe, before exec in this process: a deferred start is cancelled (true when
 * it was; rt_fork_start_restore() puts it back if the exec fails), and one being finished
 * is waited for (a bounded while). */
bool rt_fork_start_cancel(void);
void rt_fork_start_restore(void);
/* The fork wrapper, before the fork: whether the child is to be a light one (its parent's
 * children exec at once: runtime.c), told to the child's fork handler; and after it, in the
 * parent. */
bool rt_fork_light_prepare(void);
void rt_fork_light_done(void);
/* On the sampler thread after a fatal signal: write the profile, then die by sig. */
void rt_handle_exit_signal(int sig);

/* runtime.c: the program is about to put a file of its own on fd, one of ours (dup2):
 * whatever of the runtime uses it lets it go first, and is re-created elsewhere. */
void rt_fd_yield(int fd);
/* runtime.c: finds descriptors of ours the program took by a route no interposer sees,
 * and re-creates what used them. Sampler thread or exit path. */
void rt_fds_check(void);
/* How many descriptors of ours the program took (dup2 onto them, or closed them unseen). */
uint64_t rt_fds_taken(void);
/* A program thread's call failed with EMFILE: the runtime gives the program its descriptors
 * (the daemon connection, the region's, statm, libunwind's pipe), once, and says so in the
 * profile's log. True when it gave some up (the caller tries again). */
bool rt_fds_give_up(void);
/* What it gave up, for the profile's log; NULL before. */
const char *rt_fds_given_up(void);
/* A program thread's fork, pthread_create or posix_spawn failed with EAGAIN under a finite
 * RLIMIT_NPROC: the runtime gives the program its process slots, one thread at a time (the
 * daemon connection's, then the sampler), and says so in the profile's log; children forked
 * from then on start no runtime (its threads would take their parent's slots). True when a
 * thread was given up (the caller tries again: rt_slots_again()). */
bool rt_slots_give_up(void);
/* Whether the call that failed with err should be made again: after a give-up, while the
 * kernel has not yet counted the ended thread out (at most 200 ms). *tries starts at 0. */
bool rt_slots_again(int err, unsigned *tries);
/* What it gave up, for the profile's log; NULL before. */
const char *rt_slots_given_up(void);

#endif /* FLEETPROF_CHILD_LIFECYCLE_LIFECYCLE_H */
