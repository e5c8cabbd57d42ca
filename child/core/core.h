/* child/core/core.h - the runtime's core (libfleetprof): its state and the files that sample.
 *
 * Everything of the runtime below the daemon client and the lifecycle (docs/architecture.md,
 * "Inside child/"): a file that includes only this cannot call up into them.
 *
 * Threads: the program's registered threads (write labels and markers, run the sampling
 * signal handler), the sampler thread (owns unwinding state, writes samples), and whoever
 * writes the profile (at exit, on request). They share: the chunked buffer (its own mutex),
 * the thread registry (rt.registry_lock), each thread's capture slot (an atomic state word
 * handing it between the signal handler and the sampler) and label stack (written by its
 * thread, read by that thread's signal handler). docs/threading.md has the full picture.
 */
#ifndef FLEETPROF_CHILD_CORE_CORE_H
#define FLEETPROF_CHILD_CORE_CORE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "buffer/update.h"
#include "child/base/clock.h"
#include "child/base/fds.h"
#include "child/base/log.h"
#include "child/base/wake.h"
#include "child/core/groups.h"
#include "profile/entries.h"
#include "profile/gecko.h"
#include "profile/symbols.h"

#define RT_MAX_THREADS       1024 /* registered + remembered dead threads */
#define RT_MAX_LABELS        64
#define RT_MAX_COUNTERS      256 /* user counters and one per performance group */
#define RT_MAX_SCHEMAS       64
#define RT_THREAD_NAME       64
#define RT_STACK_COPY_BYTES  (32 * 1024)
#define RT_MEMORY_COUNTER_NS (10 * 1000 * 1000) /* built-in memory counter period */
/* Longest sleep of a sampler whose threads are all idle. A thread that starts running
 * meanwhile is sampled this late at most (the kernel's own CPU timers fire at HZ=250
 * granularity, 4 ms, too); its first sample still carries all the CPU it used. 16 ms took
 * an idle process's sampling from ~0.55 % to ~0.37 % of a CPU, but a burst shorter than
 * the sleep that ends before the wake is drawn at the stack the thread then sleeps in: the
 * share of a 20 ms spin's ticks drawn at its stack fell from 95-98 % to 84-88 %. */
#define RT_IDLE_SLEEP_NS     (4 * 1000 * 1000)
#define RT_SAMPLE_SIGNAL     SIGPROF
/* Captures a thread's timer can make before the sampler empties them; the handler wakes the
 * sampler when half are full. */
#define RT_CAPTURE_RING      8
/* The handler time a process spends in step-by-step dwarf walks before the sampler warms
 * libunwind for unw_backtrace() (stackwalk.c): what the warm-up costs, measured at ~1 ms
 * here (the warming thread, and each sampled thread's 256 KiB cache: ~136 page faults in a
 * one-thread process). Rent until the rent paid equals the price, then buy: a process pays
 * at most twice what the better choice in hindsight would have cost it, whatever its life,
 * its stack depth and the kernel's timer resolution (CPU timers fire on the scheduler tick:
 * every 4 ms at HZ=250). At 16 captures, a process of 60-100 ms of CPU paid the warm-up
 * and got back less than it cost (0.7 ms more per process, measured). */
#define RT_WARM_AFTER_NS     (1000 * 1000)
/* How often the sampler empties the rings, writes idle time and counters, and serves the
 * daemon while some thread ran; and while none did. Every thread's samples are timed by
 * its own timer: these only bound how late they reach the buffer (a ring half full wakes
 * the sampler sooner). Each wake costs a short-lived process a context switch on a busy
 * machine: at 10 ms, a 20 ms child of the churn benchmark woke its sampler twice, and its
 * start cost 1.100 against 1.064 for the earlier sampler, whose 1 s interval never woke. */
#define RT_DRAIN_NS          (20 * 1000 * 1000)
#define RT_IDLE_DRAIN_NS     (100 * 1000 * 1000)

enum rt_stackwalk {
    RT_STACKWALK_FP,
    RT_STACKWALK_DWARF,
    RT_STACKWALK_COPY,
};

/* What makes a thread's samples (cpu-timer.c). */
enum rt_timer_kind {
    RT_TIMER_AUTO,       /* config only: the default (thread CPU timers) */
    RT_TIMER_PERF,       /* a perf task-clock event per thread, its signal to the thread */
    RT_TIMER_THREAD_CPU, /* a POSIX timer on the thread's CPU clock (SIGEV_THREAD_ID) */
    RT_TIMER_TICK,       /* the sampler's wall-clock tick and tgkill (the old way) */
    RT_TIMER_NONE,       /* the kernel gave the thread no timer: no samples, said why */
};

struct rt_config {
    _Atomic uint64_t interval_ns; /* the daemon's Welcome may change it while sampling */
    uint64_t buffer_bytes;
    bool buffer_set; /* FLEETPROF_BUFFER_MB was given: a daemon's larger limit leaves it */
    uint32_t chunk_bytes;
    enum rt_stackwalk stackwalk;
    enum rt_timer_kind timer; /* FLEETPROF_TIMER */
    char output[4096];        /* FLEETPROF_OUTPUT, "" = none */
    bool startup;
    bool debug;
    char socket[4096];      /* FLEETPROF_SOCKET, "" = none */
    char dir[4096];         /* FLEETPROF_DIR: exit profiles when no daemon is reachable */
    bool symbolize_local;   /* FLEETPROF_SYMBOLIZE=local: never ask the daemon's service */
    uint64_t slow_event_ns; /* FLEETPROF_SLOW_EVENT_MS: performance groups' slow events */
};

/* Reads FLEETPROF_* into *cfg (defaults first). A bad value gets one line on stderr naming
 * the variable and the accepted values, and the default is kept. */
void rt_config_from_env(struct rt_config *cfg);
const char *rt_stackwalk_name(enum rt_stackwalk s);

struct rt_label {
    const char *name; /* borrowed: a literal of the program */
    uint32_t category;
    uintptr_t stack_address; /* frame of fleetprof_label_push: orders labels */
    uintptr_t code_address;  /* return address into the function that pushed the label */
};

enum rt_capture_state {
    RT_CAPTURE_EMPTY,     /* sampler may request */
    RT_CAPTURE_REQUESTED, /* signal sent; the handler owns the slot */
    RT_CAPTURE_FULL,      /* handler done; the sampler owns the slot */
};

/* Registers captured by the handler for off-thread unwinding (copy mode). */
struct rt_regs {
    uint64_t ip, sp, bp, bx, r12, r13, r14, r15;
};

/* Preallocated per thread: the signal handler writes only here. */
struct rt_capture {
    _Atomic int state;     /* enum rt_capture_state */
    uint64_t time_ns;      /* the handler's entry */
    uint64_t handler_ns;   /* time in the handler */
    uint64_t cpu_delta_ns; /* set by the sampler when it requests; by the handler (timers) */
    uint64_t cpu_ns;       /* timers: the thread's CPU clock at the capture */
    uint32_t flags;        /* PROF_SAMPLE_* */
    bool in_syscall;       /* caught asleep in a system call (restarted, or cut short) */
    uint32_t frame_count;
    uint64_t frames[PROF_MAX_FRAMES];
    uint32_t label_count;
    struct rt_label labels[RT_MAX_LABELS];
    struct rt_regs regs;
    uint8_t *stack_copy; /* RT_STACK_COPY_BYTES, copy mode only */
    size_t stack_copy_len;
};

struct rt_thread {
    int32_t tid;
    bool live; /* registered and running; guarded by registry_lock */
    bool is_main;
    clockid_t cpu_clock;
    uintptr_t stack_lo, stack_hi; /* the thread's stack, for frame-pointer walks */
    char name[RT_THREAD_NAME];
    bool named; /* the program named it (fleetprof_register_thread): not the kernel's name */
    uint64_t register_ns, unregister_ns;
    /* Sampler-owned. */
    uint64_t last_cpu_ns;
    bool signal_woke_it;   /* its last capture found it asleep: our signal woke it */
    bool sampled;          /* a sample of this thread has been written */
    uint64_t probe_cpu_ns; /* CPU time when last found blocked (UINT64_MAX: never) */
    /* The tick that requested the capture in flight, and the ticks since then: the thread
     * has not run meanwhile (the signal is pending), so they all get the stack the capture
     * brings, written when it lands. */
    uint64_t request_ns;
    uint32_t deferred_ticks;
    uint64_t deferred_first_ns, deferred_last_ns;
    uint64_t last_entry_ns;     /* time of the thread's last sample or same-sample */
    bool tail_written;          /* its CPU after its last capture is written (it ended) */
    uint64_t timer_interval_ns; /* the interval its timer was last set to (sampler) */
    _Atomic uint32_t label_depth;
    struct rt_label labels[RT_MAX_LABELS];
    struct rt_capture capture; /* RT_TIMER_TICK: the sampler's request */
    /* Its CPU timer (cpu-timer.c): which kind, and the kernel's handle of it (a perf
     * event's descriptor, or a POSIX timer's id); set before the timer is armed, cleared
     * after it is gone. */
    _Atomic int timer_kind; /* enum rt_timer_kind */
    /* Its first arm is done (release, after the fields it sets): the sampler leaves a thread
     * alone until then, the thread being published in rt.threads[] before it arms. */
    _Atomic bool timer_armed;
    int timer_fd;
    int timer_id;
    bool timer_paused;       /* the thread blocks the signal: its timer stopped meanwhile */
    bool no_timer;           /* the kernel gave it none (RT_TIMER_NONE at its arm) */
    uint64_t timer_cpu_ns;   /* handler-owned: the thread's CPU its captures weigh up to */
    uint64_t timer_grid_ns;  /* handler-owned: its CPU at its timer's last expiry (modular) */
    uint64_t dropped_cpu_ns; /* handler-owned: CPU of the expiries a full ring dropped */
    uint64_t final_cpu_ns;   /* its CPU clock when it unregistered (the clock goes with it) */
    /* The captures its timer's signals made: the handler fills ring[ring_head], the
     * sampler empties ring[ring_tail], each slot handed over by its state word (EMPTY,
     * FULL). A full ring drops the capture, not its CPU: the next one carries it. */
    uint32_t ring_head; /* handler-owned */
    uint32_t ring_tail; /* sampler-owned */
    struct rt_capture ring[RT_CAPTURE_RING];
    /* Its blocking call in progress (waits.c): written by the thread, read by the sampler. */
    struct {
        _Atomic uint32_t seq; /* odd while it waits */
        struct rt_regs regs;  /* the caller's, at the call */
        uint64_t leaf;        /* the function called (the C library's) */
        uint64_t since_ns;
    } wait;
    uint32_t wait_written_seq; /* sampler: the wait whose stack it wrote last (0: none) */
};

struct rt_counter {
    const char *name, *category, *description; /* owned copies */
    _Atomic int64_t value;
    int64_t last_sampled; /* sampler-owned */
    _Atomic uint64_t ops;
    uint64_t last_ops;
};

struct rt_schema {
    struct prof_marker_schema info; /* strings owned */
    struct prof_schema_field fields[PROF_MAX_FIELDS];
    enum prof_field_kind kinds[PROF_MAX_FIELDS];
};

struct buf_chunk_manager;
struct buf_chunked_buffer;

struct rt {
    _Atomic int running; /* 1 between a successful init and shutdown */
    _Atomic int paused;
    _Atomic int stop_sampler;
    _Atomic int exit_signal;           /* a fatal signal to re-raise after writing the profile */
    _Atomic int32_t exiting_tid;       /* the thread in the program's exit (exit, _exit), or 0 */
    _Atomic int exec_pending;          /* execs under way: send no sampling signal */
    _Atomic int signals_in_flight;     /* the sampler is between reading exec_pending and its
                                        * tgkill returning (the exec handshake, preload.c) */
    _Atomic int exec_failed;           /* an exec failed: re-signal captures in flight */
    _Atomic int fork_start;            /* a forked child's deferred start (enum rt_fork_start) */
    _Atomic uint64_t captures_dropped; /* by a thread's full ring (handler.c) */
    struct rt_config cfg;
    int32_t pid;
    bool forked; /* this process is a fork of its parent's image (not exec'd since) */
    /* The thread that starts the runtime, and when the start ended (0 while it runs): its
     * samples until then are of our start-up, not of the program (sampler.c). */
    int32_t start_tid;
    _Atomic uint64_t start_done_ns;
    /* That thread's CPU before the start, in a fresh image (the exec, loading, the start):
     * its first sample (sampler.c), once what an earlier image of the process charged it is
     * known (the exec record, through the daemon's Welcome or the file left aside). */
    _Atomic int before_start;                   /* enum rt_before_start */
    _Atomic uint64_t before_start_accounted_ns; /* by the earlier image; set before KNOWN */
    uint64_t before_start_cpu_ns; /* at its registration, then + its start's captures */
    uint64_t start_ns;
    _Atomic double start_epoch_ms; /* aligned to the daemon's clock by its Welcome */
    struct buf_chunk_manager *manager;
    struct buf_chunked_buffer *buffer;

    pthread_mutex_t registry_lock; /* threads[], thread_count, counters, schemas */
    struct rt_thread *threads[RT_MAX_THREADS];
    size_t thread_count;
    struct rt_counter counters[RT_MAX_COUNTERS];
    _Atomic uint32_t counter_count;
    struct rt_schema schemas[RT_MAX_SCHEMAS];
    uint32_t schema_count;

    pthread_t sampler;
    bool sampler_started;
    pthread_mutex_t write_lock; /* one profile writer at a time */
    bool exit_profile_written;
};

extern struct rt rt;

/* A forked child starts lazily (runtime.c): the fork only registers its thread and makes the
 * sampler thread, which does the rest once the child has run for an interval; an exec before
 * then (fork + exec) throws away nothing but that. */
enum rt_fork_start {
    RT_FORK_START_NONE,    /* started, or never to be */
    RT_FORK_START_PENDING, /* deferred: sampling and the API wait for it */
    RT_FORK_START_RUNNING, /* being finished by a thread that holds the init lock */
    RT_FORK_START_LIGHT,   /* nothing made: the child is expected to exec (runtime.c) */
};

enum rt_before_start {
    RT_BEFORE_START_NONE,    /* no such sample (a forked child, a restart), or written */
    RT_BEFORE_START_PENDING, /* waiting for the daemon's Welcome */
    RT_BEFORE_START_KNOWN,   /* before_start_accounted_ns is set: the sampler writes it */
};
/* How long the sampler looks for the Welcome, at most: a daemon that does not answer by
 * then leaves that CPU uncharged rather than charged twice. */
#define RT_BEFORE_START_WAIT_NS (200 * 1000 * 1000)

/* The calling thread's registry entry, or NULL (initial-exec TLS: safe in signal handlers). */
extern __thread struct rt_thread *rt_self __attribute__((tls_model("initial-exec")));
/* > 0 while the calling thread runs the sampling signal's handler (handler.c): the mask
 * changes libunwind makes there are not the program's. */
extern __thread int rt_in_handler __attribute__((tls_model("initial-exec")));
/* Set while the handler's libunwind walk runs with every signal blocked (stackwalk.c): the
 * mask changes libunwind makes meanwhile change nothing, and are not made (preload.c). */
extern __thread int rt_walk_masked __attribute__((tls_model("initial-exec")));
/* > 0 while the calling thread is inside the dynamic loader (dlopen, dl_iterate_phdr...). */
extern __thread int rt_in_loader __attribute__((tls_model("initial-exec")));
/* The runtime's own entries into the loader and libunwind pass this gate, which a fork
 * closes until it is done, so that none of their locks is copied held into the child
 * (preload.c). Enter
 * waits for a fork to end (at most 2 s); try_enter (async-signal-safe) fails instead.
 * Nested calls on a thread already inside always enter. Every enter, and every try_enter
 * that succeeded, is matched by a leave. */
void rt_loader_gate_enter(void);
bool rt_loader_gate_try_enter(void);
void rt_loader_gate_leave(void);
/* Once, at load (before any fork the runtime must survive): the gate's fork handlers. */
void rt_loader_gate_install(void);

/* cpu-timer.c: each thread's CPU-time timer. Arm chooses the kind (the process's preferred
 * one, else the other, else the sampler's tick, else none) and sets t->timer_kind; any
 * thread may arm or disarm another's. Pause stops and restarts it in place (the thread
 * itself, while it blocks the signal). */
/* The first capture weighs the thread's CPU since from_cpu_ns: its registration's reading
 * (what the sampler counts from, so nothing between is left uncharged), or RT_CPU_NOW. */
#define RT_CPU_NOW UINT64_MAX
enum rt_timer_kind rt_cpu_timer_arm(struct rt_thread *t, uint64_t from_cpu_ns);
void rt_cpu_timer_disarm(struct rt_thread *t);
void rt_cpu_timer_pause(struct rt_thread *t, bool pause);
void rt_cpu_timer_set_interval(struct rt_thread *t, uint64_t ns);
/* Every live thread's timer (sampling stopped for good). Registry lock NOT held. */
void rt_cpu_timer_disarm_all(void);
/* In a forked child: the parent's timer of t is dropped (its descriptor closed), the
 * counts start again. */
void rt_cpu_timer_forget_after_fork(struct rt_thread *t);
void rt_cpu_timer_after_fork(void);
const char *rt_cpu_timer_kind_name(int kind);
/* The program took fd, a thread's perf event: that thread gets a POSIX timer instead (the
 * number is not closed). False if fd is no perf event of ours. Registry lock NOT held. */
bool rt_cpu_timer_yield_fd(int fd);
/* The program ran out of descriptors: every perf event gives way to a POSIX timer, and no
 * new one is made. Whether there was one. Registry lock NOT held. */
bool rt_cpu_timer_give_up_fds(void);
/* For profilingLog and status: the process's kind and why, the first failure to arm one
 * (NULL if none), threads armed by kind (enum rt_timer_kind). */
struct rt_cpu_timer_report {
    const char *engine, *why, *failure;
    uint32_t threads[RT_TIMER_NONE + 1];
};
void rt_cpu_timer_report(struct rt_cpu_timer_report *r);

/* waits.c: a blocking call of the program's, from its interposer (preload-waits.c): frame
 * is the interposer's own frame address, return_address its return address, leaf the
 * function it calls. Async-signal-safe; errno untouched. */
void rt_wait_begin(uintptr_t frame, uintptr_t return_address, uintptr_t leaf);
void rt_wait_end(void);
/* Sampler: the stack of thread t where it waits now (a capture of the sampler's, valid until
 * the next call), its wait's sequence number and start; -EAGAIN if it does not wait (or
 * stopped waiting meanwhile). */
int rt_wait_stack(struct rt_thread *t, uint32_t *ret_seq, uint64_t *ret_since_ns,
                  struct rt_capture **ret);

/* threads.c */
int rt_threads_register(const char *name, bool is_main);
void rt_threads_unregister(void);
/* Fills a snapshot for the profile writer; caller frees with rt_threads_snapshot_free. */
int rt_threads_snapshot(struct prof_thread_info **ret_threads, size_t *ret_count);
void rt_threads_snapshot_free(struct prof_thread_info *threads, size_t count);
void rt_threads_forget_all(void);
/* Whether sp is the alternate signal stack the runtime gave the calling thread (the
 * sigaltstack() interposer shows the program none). */
bool rt_threads_altstack_is_ours(const void *sp);
/* Moves each time a thread is registered or ends: the region describes its threads again
 * when it changed. */
uint64_t rt_threads_generation(void);

/* stackwalk.c */
int rt_stackwalk_init(enum rt_stackwalk mode);
void rt_stackwalk_warm_thread(void);
/* The sampler thread, at each drain once its handlers spent RT_WARM_AFTER_NS walking:
 * starts a thread that makes libunwind's one-time set-up, after which handlers use
 * unw_backtrace(), and joins it at a later call (never waits). True when it started it. */
bool rt_stackwalk_warm_process(void);
void rt_stackwalk_forget_after_fork(void);
/* In the signal handler: capture the interrupted context into c. Async-signal-safe. */
void rt_stackwalk_capture(struct rt_capture *c, const struct rt_thread *t, void *ucontext);
/* Dwarf samples taken inside the loader, downgraded to a frame-pointer walk. */
uint64_t rt_stackwalk_unsafe_samples(void);
/* Walks saved frame pointers from (ip, bp) within [max(sp, stack_lo), stack_hi), or within
 * the copy of the stack starting at sp when copy is not NULL. Async-signal-safe. */
uint32_t rt_fp_walk(uint64_t *frames, uint32_t max, uint64_t ip, uint64_t sp, uint64_t bp,
                    uintptr_t stack_lo, uintptr_t stack_hi, const uint8_t *copy, size_t copy_len);

/* The stack of a thread stopped by a fatal signal, innermost (the faulting pc) first, from
 * the handler's ucontext; t may be NULL (an unregistered thread). Async-signal-safe. */
uint32_t rt_stackwalk_crash(uint64_t *frames, uint32_t max, const struct rt_thread *t,
                            void *ucontext);

/* stackwalk-copy.c: unwinding a stack copy on the sampler thread (libunwind, generic). */
int rt_stackwalk_copy_init(void);
void rt_stackwalk_unwind_copy(struct rt_capture *c);
/* The procedure (function) containing pc, from unwind info: [*ret_start, *ret_end).
 * Cached; sampler thread only. Returns 0 or -ENOENT. */
int rt_proc_range(uint64_t pc, uint64_t *ret_start, uint64_t *ret_end);
/* Walks the caller's own stack (markers with a stack). Not for signal handlers. */
uint32_t rt_stackwalk_self(uint64_t *frames, uint32_t max);
/* The program took libunwind's memory-probe pipe (its numbers are the program's files now,
 * and libunwind reads and writes them while unwinding, closing them on an error): from now
 * on no stack is walked with libunwind in this process, only with frame pointers. */
void rt_stackwalk_stop_libunwind(void);
bool rt_stackwalk_libunwind_stopped(void);
/* Stops libunwind, waits for walks inside it to end (at most 1 s), then closes its pipe:
 * the number of descriptors closed (0 when a walk did not end: the pipe stays). */
size_t rt_stackwalk_release_libunwind(void);
/* loader-gate.c: whether every thread left the gate within 1 s. */
bool rt_loader_gate_wait_empty(void);

/* sampler.c */
/* What the sampler thread calls in the layers above it (runtime.c, ipc.c), which the core
 * must not call directly. */
struct rt_sampler_hooks {
    void (*check_fds)(void);                 /* descriptors of ours the program took */
    bool (*fork_start_due)(uint64_t now_ns); /* a forked child's deferred start... */
    bool (*start_if_pending)(void);          /* ...finished now */
    void (*exit_signal)(int sig);            /* write the profile, die by sig */
    void (*tick)(void);                      /* each tick: the daemon client */
};
int rt_sampler_start(const struct rt_sampler_hooks *hooks);
/* The sampler's next tick after the one at prev_ns, at now_ns (CLOCK_MONOTONIC ns), for an
 * interval (> 0) with skip ticks to sleep through: prev_ns + interval_ns * (skip + 1), or
 * now_ns when that is already past (late: the schedule restarts rather than catches up, and
 * no tick is skipped), rounded down to a whole multiple of interval_ns (the grid every
 * profiled process shares), and one interval later when that is not after now_ns. Returns
 * the tick; *ret_skipped gets the ticks skipped (skip, or 0 on a restart). */
uint64_t rt_sampler_next_tick(uint64_t prev_ns, uint64_t now_ns, uint64_t interval_ns,
                              unsigned skip, unsigned *ret_skipped);
void rt_sampler_stop(void);
/* In a forked child, after rt_fds_forget(): closes the copy of the parent's statm. */
void rt_sampler_forget_after_fork(void);
/* The statm descriptor: whether fd is it, and giving it up (opened again when next read). */
bool rt_sampler_owns_fd(int fd);
void rt_sampler_release_statm(void);
/* Gives it up for good (the program ran out of descriptors): the memory counter stops. */
void rt_sampler_give_up_statm(void);
/* handler.c: the profiling signal's handler and disposition. */
int rt_handler_install(void);
/* Puts our handler back in place (after a failed exec ignored the signal). AS-safe. */
void rt_handler_restore(void);
/* Why sampling stopped for good ("the program replaced the SIGPROF handler..."), with the
 * time (CLOCK_MONOTONIC ns) in *ret_ns; NULL while sampling goes on. */
const char *rt_handler_stopped_reason(uint64_t *ret_ns);
/* Our handler owns the sampling signal: the program's sigaction()/signal() calls for it
 * (interposed, preload.c) read and set its own action here instead of replacing ours. */
bool rt_handler_owns_signal(void);
/* Time in the sampling handler per capture so far (16 ns buckets; 0 when none). */
struct rt_handler_stats {
    uint64_t captures, p50_ns, p99_ns;
};
struct rt_handler_stats rt_sampler_handler_stats(void);
/* The sampler's checks of its descriptors and of the resident size (every 10 ms): made, and
 * skipped because no other thread of the process ran since the last one made. */
void rt_sampler_check_stats(uint64_t *ret_made, uint64_t *ret_skipped);
/* Captures the threads' timers made while their ring was full (their CPU went to the next). */
uint64_t rt_sampler_captures_dropped(void);
/* The program's own action for the sampling signal: *old gets it, act (if not NULL) replaces it. */
void rt_handler_program_action(const struct sigaction *act, struct sigaction *old);
/* The program is about to replace the sampling signal's action with a raw rt_sigaction
 * system call (through syscall(), interposed): sampling stops for good first, so that no
 * timer of ours signals its action. */
void rt_handler_before_raw_sigaction(void);
/* Stops sampling for good if a raw rt_sigaction replaced our handler. */
void rt_handler_check(void);
/* Whether a sampling signal taken from the calling thread's pending set is one of ours
 * (its timer's, or the sampler's tgkill). */
bool rt_handler_signal_is_ours(const siginfo_t *info);
/* Discards the instances of the signal pending on any thread. */
void rt_handler_discard_pending(void);

/* modules.c: this process's modules (prof_libs_collect_self), shared and collected again
 * only when the loader mapped or unmapped an object since. Returns a reference to put back
 * with rt_modules_put(), or NULL with a negative errno in *ret_error. */
const struct prof_libs *rt_modules_get(int *ret_error);
void rt_modules_put(const struct prof_libs *libs);
/* In a forked child: the lock afresh. */
void rt_modules_forget_after_fork(void);
/* Changes with every dlopen/dlclose through our wrappers (preload.c calls
 * rt_loader_changed()): module lists made before are stale. */
unsigned rt_loader_generation(void);
void rt_loader_changed(void);

/* ipc-load.c: dlopen()s name (RTLD_NOW | RTLD_LOCAL) from the directory libfleetprof.so was
 * loaded from, else through the loader's search path; NULL with the reason in error. Never
 * from a signal handler. libfleetprof-ipc.so itself: rt_ipc_module() (ipc-module.h). */
void *rt_dlopen_beside(const char *name, char *error, size_t size);

/* process.c: the process's names, read from /proc/self/cmdline by
 * rt_process_read_command_line() (at start; again in an exec'd image, not in a forked child),
 * or taken from the loader's argv by rt_process_set_command_line() (-EINVAL without one).
 * The product is the command line, arguments joined by spaces. */
void rt_process_read_command_line(void);
int rt_process_set_command_line(int argc, char **argv);
const char *rt_product(void);
const char *rt_program_name(void);
/* The process's name, into buf: of the titles the program set over its argv (or its
 * program's name, shown while it set none), the one shown longest, as the sampler looked
 * (rt_process_title_tick(), at most every 100 ms) and as shown now. */
const char *rt_process_name(char *buf, size_t size);
/* The process as its profile and its region describe it, taken at one moment: info borrows
 * from the rest (the threads' snapshot, the counters and schemas so far, the module list).
 * Made by rt_process_describe() (0, or a negative errno), freed by
 * rt_process_description_free(). */
struct rt_process_description {
    struct prof_process_info info;
    struct prof_thread_info *threads;
    size_t thread_count;
    struct prof_counter_info counters[RT_MAX_COUNTERS];
    struct prof_marker_schema schemas[RT_MAX_SCHEMAS];
    const struct prof_libs *libs;
    char title[256];
};
int rt_process_describe(struct rt_process_description **ret);
void rt_process_description_free(struct rt_process_description *pd);
/* The sampler thread's tick: looks at the title if it has not for 100 ms. */
void rt_process_title_tick(uint64_t now_ns);
/* In a forked child: the parent's titles are not its own. */
void rt_process_titles_forget(void);

/* region.c: the chunks in a file that outlives the process (buffer/region.h), without a
 * daemon when FLEETPROF_DIR or FLEETPROF_OUTPUT is set. Attaches it to manager before the
 * buffer takes a chunk; 0 when no region is wanted. */
struct buf_chunk_manager;
int rt_region_open(struct buf_chunk_manager *manager);
/* The region alone, for a later rt_region_open(): a forked child makes its descriptors in
 * the fork handler, where the program cannot be opening files of its own meanwhile. */
int rt_region_make(void);
/* Sampler: rewrites the process description when threads, modules, counters or schemas
 * changed (at most every 10 ms). */
void rt_region_tick(uint64_t now_ns);
/* Publishes the description the daemon builds this process's exit profile from: the current
 * one, plus its end (exit_ns, meta.shutdownTime) and log's runtime numbers. Only for a region
 * the daemon holds (a memfd); -ENOENT without one, else 0 or a negative errno. */
struct prof_runtime_log;
int rt_region_describe_exit(uint64_t exit_ns, const struct prof_runtime_log *log);
/* The program takes fd: true if it was the region's (which moved to another number). */
bool rt_region_yield_fd(int fd);
/* The program ran out of descriptors: the region's goes; the region keeps its mappings and
 * stops growing. True if there was one. */
bool rt_region_give_up_fd(void);
/* After the exit profile: the file goes if the profile was written, else it stays and
 * says so. */
void rt_region_done(bool profile_written);
/* The runtime gave its threads to the program at the process limit: said in the region's
 * header, for the daemon to name the children forked since (buf_region_header). */
void rt_region_mark_slots_given_up(void);
/* A child forked since then, which starts no runtime: listed in the header for the daemon
 * to name (buf_region_note_unprofiled_child()). */
void rt_region_note_unprofiled_child(int32_t pid);
/* Async-signal-safe; the calling process's own exec (not a vfork child's) of into (a path or
 * a file name, or NULL). */
void rt_region_before_exec(const char *into);
/* What a profiled image of this process before its exec charged the thread that exec'd
 * (its exec record, in the newest region file it left aside in the last 10 s); 0 if none. */
uint64_t rt_region_previous_image_cpu(void);
void rt_region_after_failed_exec(void);
void rt_region_forget_after_fork(void);

/* crash.c: a Crash record for the fatal signals, where the program leaves them default. */
#define RT_CRASH_FRAMES 128
/* Installs the crash handler where the disposition is SIG_DFL (only with a chunk region to
 * record into); disarm takes it out again. */
void rt_crash_arm(void);
void rt_crash_disarm(void);
/* SIGTERM and SIGINT left at the default: a stand-in the program reads as SIG_DFL that hands
 * the signal to the sampler (its exit_signal hook) and never returns to the program. */
void rt_exit_signals_arm(void);
bool rt_crash_signal(int sig);
/* A fatal signal while armed: its sigaction() goes through rt_crash_program_sigaction(). */
bool rt_crash_wants(int sig);
bool rt_crash_is_our_handler(const struct sigaction *sa);
/* sigaction() for a fatal signal as the program sees it: our handler reads as SIG_DFL; the
 * program's own action is installed for real (in ours's place); its SIG_DFL puts ours back.
 * 0, or -1 with errno. */
int rt_crash_program_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* region.c: whether the chunks are in a region (a crash can be recorded); and recording it,
 * async-signal-safe. */
bool rt_region_active(void);
/* The region's descriptor (a memfd when a daemon is configured), or -1. */
int rt_region_fd(void);
/* The eviction point the daemon last stored in the region's header, 0 if none or no region:
 * one acquire load, for the sampler's tick. Unchecked (another process wrote it). */
uint64_t rt_region_eviction_ns(void);
/* The region's header page (its update ring: buffer/region-updates.h), or NULL. */
void *rt_region_header_page(void);

/* updates.c: the chunk manager's updates and the daemon's evictions (this process's side of
 * the global limit). */
/* Changes fold into the slot from now on (0, or -ENOMEM). */
int rt_updates_start(void);
/* Changes go nowhere. */
void rt_updates_stop(void);
/* What the daemon's Welcome said: it writes its evictions into our region's header; it
 * takes our changes from the region's update ring. Both false once it is gone. */
void rt_updates_use_region(bool evictions, bool ring);
/* Destroys the released chunks done at or before done_ns; quiet: the change waits in the
 * slot for the next update (the daemon asked for it) instead of being flagged. */
void rt_updates_destroy(uint64_t done_ns, bool quiet);
/* The slot, for the IPC thread (buffer/update.h's buf_update_slot_peek, _take, _fold). */
enum buf_update_kind rt_updates_peek(size_t *ret_newly_released, uint64_t *ret_unreleased_bytes);
int rt_updates_take(struct buf_update *ret_update);
void rt_updates_put_back(const struct buf_update *u);
/* The sampler's tick: the eviction point applied; a flagged change published in the
 * region's ring, or the IPC module woken to send it. */
void rt_updates_tick(void);
/* In a forked child: the parent's changes are not this process's. */
void rt_updates_forget_after_fork(void);
void rt_region_record_crash(int sig, int code, uint64_t address, int32_t tid,
                            const uint64_t *frames, uint32_t frame_count);
/* The whole stack of the crash just recorded (after the record: walking may fault). */
void rt_region_record_crash_frames(const uint64_t *frames, uint32_t frame_count);

#endif /* FLEETPROF_CHILD_CORE_CORE_H */
