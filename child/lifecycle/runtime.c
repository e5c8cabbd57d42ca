/* child/lifecycle/runtime.c - start, stop, fork and exit of the runtime; writing the profile.
 *
 * Exit paths that write FLEETPROF_OUTPUT: exit() and return from main (atexit), _exit and
 * _Exit (preload wrappers), and SIGTERM/SIGINT when the program left them at their default
 * action: the stand-in handler (crash.c, invisible to the program) hands the signal to the
 * sampler thread and waits; the sampler writes the profile, then restores the default action
 * and re-raises, so the process ends as it would have. A second signal while that runs ends
 * the process at once.
 *
 * The buffer is never freed while the process lives: a program thread may be inside a
 * marker call when the profiler stops. Shutdown clears it instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "child/client/client.h"
#include "child/client/ipc-start.h"
#include "child/core/core.h"
#include "child/include/fleetprof.h"
#include "child/lifecycle/lifecycle.h"
#include "common/outfile.h"
#include "json/writer.h"
#include "profile/libs.h"
#include "profile/runtime-log.h"

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool hooks_installed;
static bool first_fork_hook_installed;
/* On a thread inside the runtime's start: an EMFILE there is ours (a probe of what can be
 * spared, the region's file), not the program's. */
static __thread int starting;
static bool command_line_known; /* process.c's names are current: a forked child starting
                                 * again keeps its parent's */
static bool loader_argv_known;  /* rt_start_at_load() was given the loader's argv */
/* This image's start is the one its loading made (FLEETPROF_STARTUP, rt_start_at_load()),
 * not yet made: the CPU its first thread used before it is charged as its first sample. */
static bool start_at_load;
/* What the sampler thread does for the lifecycle and the daemon client, above it. */
static const struct rt_sampler_hooks sampler_hooks = {
        .check_fds = rt_fds_check,
        .fork_start_due = rt_fork_start_due,
        .start_if_pending = rt_start_if_pending,
        .exit_signal = rt_handle_exit_signal,
        .tick = rt_ipc_tick,
};

static double epoch_ms_now(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The buffer (and its region), the stack walker and the built-in counter: what sampling
 * writes into. init_lock held. capture: libunwind may make its pipe here (not in a forked
 * child, whose pipe is the parent's, kept; and a forked child's finish runs beside the
 * program's threads, where no placeholder may take 0, 1 or 2 from under them). */
static int make_buffer(bool capture)
{
    int r;

    if (!rt.buffer) {
        r = buf_chunk_manager_local_new(rt.cfg.buffer_bytes, rt.cfg.chunk_bytes, &rt.manager);
        if (r < 0)
            return r;
        r = rt_region_open(rt.manager);
        if (r < 0) /* the profile still works; only a crash would lose it, as before */
            rt_debug("cannot keep the chunks in a file: %s", strerror(-r));
        r = buf_chunked_buffer_new(rt.manager, rt.pid, &rt.buffer);
        if (r < 0) {
            rt.manager = buf_chunk_manager_free(rt.manager);
            return r;
        }
    }
    /* libunwind's memory-probe pipe is made here, once per process: the runtime's, and a
     * forked child's too. */
    if (capture)
        rt_fds_capture(RT_FDS_CAPTURE_KEEP);
    r = rt_stackwalk_init(rt.cfg.stackwalk);
    if (capture)
        rt_fds_capture(RT_FDS_CAPTURE_OFF);
    if (r < 0)
        return r;
    if (atomic_load(&rt.counter_count) == 0) {
        rt.counters[0].name = "RSS";
        rt.counters[0].category = "Memory";
        rt.counters[0].description = "Resident set size of the process";
        atomic_store(&rt.counter_count, 1);
    }
    return 0;
}

static void start_ipc(void)
{
    int r;

    if (rt.cfg.socket[0]) {
        r = rt_ipc_start(rt.cfg.socket, rt_profile_write);
        if (r < 0) /* without a daemon we profile alone, as if none were configured */
            rt_debug("cannot start the IPC thread: %s", strerror(-r));
    }
}

/* Starts sampling with rt.cfg. init_lock held. */
static int start_locked(void)
{
    int r;

    rt.pid = (int32_t)getpid();
    rt.start_tid = (int32_t)gettid();
    atomic_store(&rt.start_done_ns, 0);
    if (!command_line_known)
        rt_process_read_command_line();
    command_line_known = true;
    rt.start_ns = rt_now_ns();
    rt.start_epoch_ms = epoch_ms_now();
    r = make_buffer(true);
    if (r < 0)
        return r;
    r = rt_handler_install();
    if (r < 0)
        return r;
    rt.exit_profile_written = false;
    atomic_store(&rt.paused, 0);
    atomic_store_explicit(&rt.running, 1, memory_order_release);
    rt_groups_start(rt.cfg.slow_event_ns);
    r = rt_threads_register(rt_program_name(), gettid() == getpid());
    if (r < 0)
        rt_debug("cannot register the main thread: %s", strerror(-r));
    if (r == 0 && start_at_load && rt_self) {
        rt.before_start_cpu_ns = rt_self->last_cpu_ns;
        /* What the exec, the loader and this start cost the thread before its timer, less
         * what a profiled image before the exec charged it: told by the daemon's Welcome, or
         * read from the region file that image left aside. */
        if (rt.cfg.socket[0]) {
            atomic_store(&rt.before_start, RT_BEFORE_START_PENDING);
        } else {
            atomic_store(&rt.before_start_accounted_ns, rt_region_previous_image_cpu());
            atomic_store(&rt.before_start, RT_BEFORE_START_KNOWN);
        }
    }
    start_at_load = false;
    rt_region_tick(rt_now_ns()); /* the first description, before any sample */
    rt_crash_arm();
    r = rt_sampler_start(&sampler_hooks);
    if (r < 0) {
        rt_groups_stop();
        atomic_store(&rt.running, 0);
        return r;
    }
    start_ipc();
    rt_debug("profiling %s every %.3f ms, %s stacks, buffer %llu MiB", rt_product(),
             (double)rt.cfg.interval_ns / 1e6, rt_stackwalk_name(rt.cfg.stackwalk),
             (unsigned long long)(rt.cfg.buffer_bytes >> 20));
    atomic_store(&rt.start_done_ns, rt_now_ns());
    return 0;
}

/* --- a forked child's deferred start ----------------------------------------------
 *
 * Most forked children of a profiled program exec at once (a shell, a build, a spawner),
 * and the exec throws away whatever the runtime started: the buffer, the description of the
 * process (/proc/self/maps), crash handlers, the daemon connection. So the fork itself only
 * registers the thread that forked (it is the child's main thread), makes the runtime's
 * descriptors (the region's file or memfd and statm: made later, beside the program's
 * threads, they would pass through numbers the program may be taking) and the sampler
 * thread (rt.running stays 0); the rest waits for the first of:
 *   - the sampler's tick once the child has used an interval of CPU, or has lived
 *     FORK_START_WAIT_NS (a child that waits before it execs, or a worker that sleeps, is
 *     still seen by the daemon within a few ticks); also an exit signal to handle;
 *   - a call that needs the runtime (rt_running(): the API, pthread_create, exit paths).
 * Samples are not lost: the first one, right after the start, carries the CPU the thread
 * used since the fork. An exec cancels the pending start (async-signal-safe, no lock). */
#define FORK_START_WAIT_NS (10 * 1000 * 1000)

static clockid_t fork_thread_clock;
static uint64_t fork_thread_cpu_ns;

/* --- a light fork ---------------------------------------------------------------------
 *
 * A program whose forked children exec at once (a shell, make, a spawner) pays, in each
 * child, for a sampler thread, a region and a timer that the exec throws away: 0.4 ms of a
 * short-lived child's CPU, half of it the exec tearing the thread down. So each process
 * keeps, in a page it shares with its forked children (MAP_SHARED: their increments are its
 * own), how its children went: exec'd while their start was still deferred ("quick"), or
 * started. Once FORK_LIGHT_AFTER children in a row were quick (and at most one in
 * FORK_LIGHT_RATIO started), its fork wrapper asks for a light child: the fork handler makes
 * nothing (the daemon knows the child from its start, as any fork's: its parent names it),
 * and the child's first call that needs the runtime (rt_running(): the API,
 * pthread_create, its exit) makes the whole start, its CPU since the fork charged as the
 * CPU before the start. A light child that did not exec at once counts as started, so its
 * parent's next children are full ones again. What a light child that computes before
 * it execs loses is its stacks before the exec, not their CPU (the new image's first
 * sample carries it). */
#define FORK_LIGHT_AFTER 8
#define FORK_LIGHT_RATIO 32

struct fork_history {
    _Atomic uint32_t quick;   /* children that exec'd before their start */
    _Atomic uint32_t started; /* children that started (or would have, light) */
};

static struct fork_history *fork_history;        /* of this process's children */
static struct fork_history *parent_fork_history; /* where this child tells how it went */
static _Atomic bool fork_history_told;
static __thread bool fork_light_wanted; /* the fork wrapper's word to its child */
static int fork_start_cancelled = RT_FORK_START_NONE;

bool rt_fork_light_prepare(void)
{
    uint32_t quick, started;

    fork_light_wanted = false;
    if (!atomic_load_explicit(&rt.running, memory_order_acquire))
        return false;
    if (!fork_history) {
        void *page = mmap(NULL, sizeof(*fork_history), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        if (page == MAP_FAILED)
            return false;
        fork_history = page;
    }
    quick = atomic_load(&fork_history->quick);
    started = atomic_load(&fork_history->started);
    fork_light_wanted = quick >= FORK_LIGHT_AFTER && started * FORK_LIGHT_RATIO <= quick;
    return fork_light_wanted;
}

void rt_fork_light_done(void)
{
    fork_light_wanted = false;
}

/* This child tells its parent's history how it went, once. Async-signal-safe. */
static void fork_history_tell(bool quick)
{
    struct fork_history *h = parent_fork_history;

    if (!h || atomic_exchange(&fork_history_told, true))
        return;
    if (quick) {
        atomic_fetch_add(&h->quick, 1);
    } else {
        atomic_fetch_add(&h->started, 1);
        atomic_store(&h->quick, 0); /* "in a row": a full child until 8 quick ones again */
    }
}

/* In the fork handler: the parent's history is its own children's, not this child's. */
static void fork_history_forget_after_fork(void)
{
    parent_fork_history = fork_history;
    fork_history = NULL; /* made at this child's own first fork; the parent's stays mapped */
    atomic_store(&fork_history_told, false);
}

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;

    if (clock_gettime(clock, &ts) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* In the fork handler: the cheap part. init_lock is fresh. A light child's start does it
 * later, `light`: the fork_start state is then its own (RUNNING), and the CPU its thread
 * used since the fork is the CPU before the start. */
/* When the start's first part (fork_start_begin()) was done: the thread's timer captures
 * until then are of our code (in the fork handler, or the light start), not the program's. */
static uint64_t fork_begin_done_ns;

static int fork_start_begin(bool light)
{
    int r;

    rt.pid = (int32_t)getpid();
    rt.start_tid = (int32_t)gettid();
    atomic_store(&rt.start_done_ns, 0);
    rt.start_ns = rt_now_ns();
    rt.start_epoch_ms = epoch_ms_now();
    r = rt_threads_register(rt_program_name(), true);
    if (r < 0)
        return r;
    if (rt_self) {
        /* The fork made the thread: its CPU clock counts from there (the forgetting,
         * 0.1-0.3 ms; a light child's life since). No image before it charged any of it. */
        rt.before_start_cpu_ns = rt_self->last_cpu_ns;
        atomic_store(&rt.before_start_accounted_ns, 0);
        atomic_store(&rt.before_start, RT_BEFORE_START_KNOWN);
    }
    if (pthread_getcpuclockid(pthread_self(), &fork_thread_clock) != 0)
        fork_thread_clock = CLOCK_MONOTONIC; /* never happens: the wall clock then */
    fork_thread_cpu_ns = clock_ns(fork_thread_clock);
    /* The descriptors now, in the program's only thread (a few system calls): made later,
     * beside the program's threads, they would pass through low numbers it may be about
     * to take. The region's memory and everything else wait. */
    r = rt_region_make();
    if (r < 0)
        rt_debug("cannot keep the chunks in a file: %s", strerror(-r));
    if (!light)
        atomic_store(&rt.fork_start, RT_FORK_START_PENDING);
    r = rt_sampler_start(&sampler_hooks); /* opens statm first */
    if (r < 0 && !light)
        atomic_store(&rt.fork_start, RT_FORK_START_NONE);
    fork_begin_done_ns = rt_now_ns();
    return r;
}

/* The rest of the start, by whoever claimed it. init_lock held. */
static void fork_start_finish(void)
{
    int r = make_buffer(false);

    fork_history_tell(false);
    if (r < 0) { /* not profiled, as when a start fails; the sampler ends at its next tick */
        rt_debug("cannot start after fork: %s", strerror(-r));
        atomic_store(&rt.stop_sampler, 1);
        return;
    }
    /* The thread that forked ran the program since the first part: its captures from then
     * on are the program's, those before it ours (their CPU joins the CPU before the start,
     * their stacks go: a busy machine's tick-checked timer gave one forked child in 1,600 a
     * single capture, in the fork handler's memfd_create, as its only stack for 20 ms).
     * Said before sampling resumes: a program thread that finishes this start (its exit, the
     * API) runs beside the sampler, whose drain would otherwise take the captures made since
     * the fork for the runtime's own start-up, and drop them with their CPU. */
    atomic_store(&rt.start_done_ns,
                 fork_begin_done_ns > rt.start_ns ? fork_begin_done_ns : rt.start_ns);
    rt.exit_profile_written = false;
    atomic_store(&rt.paused, 0);
    atomic_store_explicit(&rt.running, 1, memory_order_release);
    rt_groups_start(rt.cfg.slow_event_ns);
    rt_region_tick(rt_now_ns()); /* the first description, before any sample */
    rt_crash_arm();
    start_ipc(); /* deferred to the sampler's next tick (rt_ipc_forget_after_fork) */
}

bool rt_start_if_pending(void)
{
    if (atomic_load(&rt.fork_start) != RT_FORK_START_NONE) {
        int pending = RT_FORK_START_PENDING;

        /* The lock first, then the claim: a caller that finds it claimed has waited for
         * it to be finished when it gets the lock. An exec cancels without the lock. */
        (void)pthread_mutex_lock(&init_lock);
        int light = RT_FORK_START_LIGHT;

        if (atomic_compare_exchange_strong(&rt.fork_start, &pending, RT_FORK_START_RUNNING)) {
            starting++;
            fork_start_finish();
            starting--;
            atomic_store(&rt.fork_start, RT_FORK_START_NONE);
        } else if (atomic_compare_exchange_strong(&rt.fork_start, &light, RT_FORK_START_RUNNING)) {
            /* A light child (above): all of the start, on this thread. */
            starting++;
            if (fork_start_begin(true) == 0)
                fork_start_finish();
            else
                fork_history_tell(false);
            starting--;
            atomic_store(&rt.fork_start, RT_FORK_START_NONE);
        }
        (void)pthread_mutex_unlock(&init_lock);
    }
    return atomic_load_explicit(&rt.running, memory_order_acquire);
}

bool rt_fork_start_due(uint64_t now_ns)
{
    return atomic_load(&rt.exit_signal) != 0 || now_ns - rt.start_ns >= FORK_START_WAIT_NS ||
           clock_ns(fork_thread_clock) - fork_thread_cpu_ns >= rt.cfg.interval_ns;
}

bool rt_fork_start_cancel(void)
{
    int pending = RT_FORK_START_PENDING, light = RT_FORK_START_LIGHT;

    if (atomic_compare_exchange_strong(&rt.fork_start, &pending, RT_FORK_START_NONE)) {
        fork_start_cancelled = RT_FORK_START_PENDING;
        fork_history_tell(true);
        return true;
    }
    if (atomic_compare_exchange_strong(&rt.fork_start, &light, RT_FORK_START_NONE)) {
        /* Quick as a deferred start would have judged it: not yet due. */
        fork_start_cancelled = RT_FORK_START_LIGHT;
        fork_history_tell(rt_now_ns() - rt.start_ns < FORK_START_WAIT_NS &&
                          clock_ns(CLOCK_THREAD_CPUTIME_ID) < rt.cfg.interval_ns);
        return true;
    }
    /* Being finished on the sampler thread: the exec must see it done (its region marked,
     * its signals stopped). A finish that cannot end (blocked on a lock this thread holds,
     * the exec being made in a signal handler) is not waited for long. */
    for (unsigned i = 0; atomic_load(&rt.fork_start) == RT_FORK_START_RUNNING && i < 100000; i++)
        (void)sched_yield();
    return false;
}

void rt_fork_start_restore(void)
{
    atomic_store(&rt.fork_start, fork_start_cancelled);
}

/* Expands %p to the pid. */
static int expand_path(const char *pattern, char *out, size_t size)
{
    size_t o = 0;

    for (const char *p = pattern; *p; p++) {
        int n;

        if (p[0] == '%' && p[1] == 'p') {
            n = snprintf(out + o, size - o, "%d", (int)getpid());
            p++;
        } else {
            n = snprintf(out + o, size - o, "%c", *p);
        }
        if (n < 0 || (size_t)n >= size - o)
            return -ENAMETOOLONG;
        o += (size_t)n;
    }
    return 0;
}

/* The symbolizer of one profile write, and profilingLog[pid].runtime, which tells how the
 * symbols were found and so is written once they are (gecko writes the log last). */
struct write_symbols {
    struct rt_symbolizer sym;
    struct buf_chunked_buffer_state state;
    uint64_t symbolize_ns; /* time spent in the symbolizer */
    char log[3400];
};

/* The runtime's own numbers for profilingLog[pid].runtime (symbolization's are the writer's). */
static void runtime_log_fill(struct prof_runtime_log *l, const struct buf_chunked_buffer_state *st)
{
    struct rt_handler_stats handler = rt_sampler_handler_stats();
    struct rt_cpu_timer_report timers;
    uint64_t stopped_ns = 0;

    *l = (struct prof_runtime_log){0};
    l->pushed_blocks = st->pushed_blocks;
    l->cleared_blocks = st->cleared_blocks;
    l->failed_puts = st->failed_puts;
    l->failed_bytes = st->failed_bytes;
    l->unsafe_samples_in_loader = rt_stackwalk_unsafe_samples();
    l->descriptors_taken = rt_fds_taken();
    l->descriptors_given_up = rt_fds_given_up();
    l->threads_given_up = rt_slots_given_up();
    l->interval_ns = rt.cfg.interval_ns;
    l->sampling_stopped = rt_handler_stopped_reason(&stopped_ns);
    l->sampling_stopped_at_us = l->sampling_stopped ? (stopped_ns - rt.start_ns) / 1000 : 0;
    l->handler_captures = handler.captures;
    l->handler_p50_ns = handler.p50_ns;
    l->handler_p99_ns = handler.p99_ns;
    rt_sampler_check_stats(&l->descriptor_checks, &l->descriptor_checks_skipped);
    l->daemon_untrusted = rt_ipc_untrusted_reason();
    rt_cpu_timer_report(&timers);
    l->sampling_timer = timers.engine;
    l->sampling_timer_why = timers.why;
    l->timer_failure = timers.failure;
    l->threads_perf_timer = timers.threads[RT_TIMER_PERF];
    l->threads_thread_timer = timers.threads[RT_TIMER_THREAD_CPU];
    l->threads_tick = timers.threads[RT_TIMER_TICK];
    l->threads_no_timer = timers.threads[RT_TIMER_NONE];
    l->captures_dropped = rt_sampler_captures_dropped();
}

static void format_runtime_log(struct write_symbols *ws)
{
    const struct rt_symbolizer *sym = &ws->sym;
    struct prof_symbols_stats local = rt_symbolizer_local_stats(sym);
    struct prof_runtime_log l;

    runtime_log_fill(&l, &ws->state);
    l.symbol_modules_loaded = local.modules_loaded;
    l.symbol_modules_names_only = local.modules_names_only;
    l.symbol_service_batches = sym->remote_batches;
    l.symbol_service_failures = sym->remote_failures;
    l.symbol_service_addresses = sym->remote_addresses;
    l.symbol_service_unresolved = sym->remote_unresolved;
    l.symbol_module_errors = sym->module_errors;
    l.symbolize_us = ws->symbolize_ns / 1000;
    l.symbol_error = sym->error;
    prof_runtime_log_format(ws->log, sizeof(ws->log), &l);
}

static int resolve_and_log(void *userdata, const struct prof_frame_request *requests, size_t count,
                           struct prof_frame_result *results)
{
    struct write_symbols *ws = userdata;
    uint64_t start_ns = rt_now_ns();
    int r = rt_symbolizer_resolve(&ws->sym, requests, count, results);

    ws->symbolize_ns = rt_now_ns() - start_ns;
    format_runtime_log(ws);
    return r;
}

int rt_profile_write(struct json_writer *w, uint64_t shutdown_ns, bool exit_profile,
                     const struct progress_logger *progress)
{
    struct rt_process_description *pd = NULL;
    struct prof_group_totals *groups = NULL;
    struct write_symbols *ws;
    struct prof_symbolizer symbolizer;
    int r;

    ws = calloc(1, sizeof(*ws));
    if (!ws)
        return -ENOMEM;
    r = rt_process_describe(&pd);
    if (r < 0)
        goto out;
    symbolizer = (struct prof_symbolizer){resolve_and_log, ws};
    pd->info.shutdown_ns = shutdown_ns;
    buf_chunked_buffer_get_state(rt.buffer, &ws->state);
    format_runtime_log(ws); /* again after symbolization, if there is any */
    pd->info.runtime_log_json = ws->log;
    pd->info.timer_captures = rt_sampler_handler_stats().captures;
    pd->info.exit_profile = exit_profile;
    pd->info.group_count = rt_groups_snapshot(&groups);
    pd->info.groups = groups;

    r = prof_gecko_write_process(w, NULL, &pd->info, rt.buffer, &symbolizer, progress);
    if (r == 0)
        r = json_writer_finish(w);
out:
    free(groups);
    rt_symbolizer_done(&ws->sym);
    free(ws);
    rt_process_description_free(pd);
    return r;
}

/* A file size limit (RLIMIT_FSIZE) fails our write with EFBIG and raises SIGXFSZ in the
 * writing thread, a thread of the program, where the default action kills it: held back
 * while we write, and an instance we raised is consumed, so the program ends as it would
 * have without us. */
static void hold_sigxfsz(sigset_t *ret_old, bool *ret_was_pending)
{
    sigset_t xfsz, pending;

    (void)sigemptyset(&xfsz);
    (void)sigaddset(&xfsz, SIGXFSZ);
    (void)rt_sigmask_raw(SIG_BLOCK, &xfsz, ret_old);
    *ret_was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ);
}

static void release_sigxfsz(const sigset_t *old, bool was_pending)
{
    static const struct timespec now = {0, 0};
    sigset_t xfsz;

    (void)sigemptyset(&xfsz);
    (void)sigaddset(&xfsz, SIGXFSZ);
    if (!was_pending)
        while (sigtimedwait(&xfsz, NULL, &now) == SIGXFSZ)
            ;
    (void)rt_sigmask_raw(SIG_SETMASK, old, NULL);
}

int rt_write_profile_to(const char *pattern, uint64_t shutdown_ns)
{
    char path[PATH_MAX];
    struct fleetprof_outfile out;
    struct json_writer *w = NULL;
    sigset_t old_mask;
    bool xfsz_pending;
    int r;

    if (!pattern || !*pattern)
        return -EINVAL;
    r = expand_path(pattern, path, sizeof(path));
    if (r < 0)
        return r;
    /* A new file of ours renamed into place (common/outfile.h): readers see the old file or a
     * complete new one, and a link planted in a shared FLEETPROF_DIR is never followed. */
    r = fleetprof_outfile_open(&out, path);
    if (r < 0)
        return r;
    hold_sigxfsz(&old_mask, &xfsz_pending);
    r = json_writer_new_fd(out.fd, &w);
    if (r == 0)
        r = rt_profile_write(w, shutdown_ns, shutdown_ns != 0, NULL);
    w = json_writer_free(w);
    release_sigxfsz(&old_mask, xfsz_pending);
    r = fleetprof_outfile_commit(&out, r);
    if (r < 0) {
        rt_debug("cannot write the profile to %s: %s", path, strerror(-r));
    } else {
        rt_debug("profile written to %s", path);
    }
    return r;
}

/* Whether this process outlived the session that profiled it: the daemon's socket gone, and
 * FLEETPROF_DIR with its parent (record's private directory, removed once its file is
 * written). Its exit profile then has nowhere to go, and that is not the program's business:
 * nothing on its stderr. A FLEETPROF_DIR the user named is made at exit if its parent is
 * there, and a failure to write it is said. */
static bool session_gone(void)
{
    char parent[PATH_MAX];
    const char *slash = strrchr(rt.cfg.dir, '/');

    if (!rt.cfg.socket[0] || access(rt.cfg.socket, F_OK) == 0 || !slash || slash == rt.cfg.dir)
        return false;
    (void)snprintf(parent, sizeof(parent), "%.*s", (int)(slash - rt.cfg.dir), rt.cfg.dir);
    return access(parent, F_OK) < 0 && errno == ENOENT;
}

/* A process whose buffer holds at most this much leaves its exit profile in its region for
 * the daemon to build, when the daemon offers to: a short-lived process, whose profile one of
 * the daemon's worker threads builds in a few ms (~0.55 us an entry, ~5,600 entries; a 20 ms
 * child holds ~130), off its loop, while the process ends at once. One that lived long
 * enough to fill more writes and streams its own, as on a capture's request, so that the
 * daemon never copies more than half a MiB of a process's chunks (profile/region-image.c). */
#define EXIT_IN_REGION_MAX_BYTES (256u << 10)

/* Leaves the exit profile in the region for the daemon, if it may: the process ends (its
 * chunks stay as they are: the daemon holds the memfd), the daemon said it would build it,
 * and the profile is small. Performance groups' totals go in the last GroupStats, before
 * the Final: the daemon puts them in the profile. Returns true if the daemon will build it. */
static bool exit_profile_in_region(uint64_t now)
{
    struct buf_chunked_buffer_state st;
    struct prof_runtime_log log;
    int r;

    /* FLEETPROF_SYMBOLIZE=local: the user wants no symbol from the daemon, which would
     * symbolize a profile it builds. */
    if (rt.cfg.symbolize_local || !rt_ipc_exit_in_region_accepted() || !rt_region_active())
        return false;
    buf_chunked_buffer_get_state(rt.buffer, &st);
    if (st.range_end - st.range_start > EXIT_IN_REGION_MAX_BYTES)
        return false;
    runtime_log_fill(&log, &st);
    r = rt_region_describe_exit(now, &log);
    if (r < 0) {
        rt_debug("cannot describe the process for its exit profile: %s", strerror(-r));
        return false;
    }
    rt_ipc_exit_in_region();
    return true;
}

/* The process gave the program its descriptors or its threads, and with them its daemon
 * connection; the daemon keeps its region (daemon/recover.c). Its end is described there, so
 * that the daemon builds its exit profile, not a recovery, when no file takes it. */
static void describe_exit_for_the_daemon(uint64_t now)
{
    struct buf_chunked_buffer_state st;
    struct prof_runtime_log log;
    int r;

    if (!(rt_fds_given_up() || rt_slots_given_up()) || !rt_region_active())
        return;
    buf_chunked_buffer_get_state(rt.buffer, &st);
    runtime_log_fill(&log, &st);
    r = rt_region_describe_exit(now, &log);
    if (r < 0)
        rt_debug("cannot describe the process's end in its region: %s", strerror(-r));
}

/* The exit profile, once per process (later callers wait for the first): to the daemon
 * when connected (left in the region for it to build when the process ends and the profile
 * is small), else to FLEETPROF_DIR/<pid>.json when set, so nothing is lost; and to
 * FLEETPROF_OUTPUT when set. */
static void write_exit_profile(bool process_ends)
{
    char dir_path[PATH_MAX];
    bool written = false; /* somewhere: the chunk file is not needed any more */
    uint64_t now;

    (void)pthread_mutex_lock(&rt.write_lock);
    if (!rt.exit_profile_written && atomic_load(&rt.running)) {
        rt.exit_profile_written = true;
        now = rt_now_ns();
        /* Descriptors the program took since the sampler's last check: reconnect first. */
        rt_fds_check();
        /* A forked child that ends before its first tick connects now, to send this. */
        rt_ipc_start_deferred();
        if (process_ends && exit_profile_in_region(now)) {
            rt_debug("exit profile left in the region for the daemon to build");
        } else if (rt_ipc_connected()) {
            struct json_writer *w = NULL;
            int r = json_writer_new_memory(&w);

            if (r == 0)
                r = rt_profile_write(w, now, true, NULL);
            if (r == 0) {
                r = rt_ipc_send_exit_profile(w); /* takes w */
                w = NULL;
            }
            json_writer_free(w);
            if (r < 0)
                rt_debug("cannot make the exit profile: %s", strerror(-r));
        } else if (rt.cfg.dir[0] && snprintf(dir_path, sizeof(dir_path), "%s/%%p.json",
                                             rt.cfg.dir) < (int)sizeof(dir_path)) {
            int r;

            if (process_ends)
                describe_exit_for_the_daemon(now);
            (void)mkdir(rt.cfg.dir, 0700);
            r = rt_write_profile_to(dir_path, now);
            if (r == -ENOENT && session_gone())
                rt_debug("the daemon and %s are gone: no exit profile", rt.cfg.dir);
            else if (r == -EMFILE && rt_fds_given_up() && rt_region_active())
                /* Not the program's stderr: the daemon still holds our region (it keeps the
                 * region of a process that left it), or recover reads the chunk file. */
                rt_debug("no descriptor left for the exit profile: it is rebuilt from the "
                         "chunk region");
            else if (r < 0) /* the daemon is gone too: this profile is lost, say so */
                rt_warn("cannot write the exit profile to %s: %s", rt.cfg.dir, strerror(-r));
            written = r == 0;
        }
        if (rt.cfg.output[0]) {
            int r = rt_write_profile_to(rt.cfg.output, now);

            if (r < 0) /* the user asked for this file: never fail silently */
                rt_warn("cannot write the profile to %s: %s", rt.cfg.output, strerror(-r));
            written = written || r == 0;
        }
        rt_region_done(written);
    }
    (void)pthread_mutex_unlock(&rt.write_lock);
}

static _Atomic uint64_t fds_taken; /* descriptors of ours the program took */

void rt_fd_yield(int fd)
{
    atomic_fetch_add(&fds_taken, 1);
    if (rt_region_yield_fd(fd)) {
        rt_debug("the program took descriptor %d of the chunk file: moved", fd);
    } else if (rt_ipc_owns_fd(fd)) {
        int r = rt_ipc_abandon();

        rt_debug("the program took descriptor %d of the daemon connection: %s", fd,
                 r < 0 ? strerror(-r) : "reconnecting");
    } else if (rt_sampler_owns_fd(fd)) {
        rt_sampler_release_statm();
    } else if (rt_cpu_timer_yield_fd(fd)) {
        rt_debug("the program took descriptor %d of a thread's perf event: a CPU-clock timer "
                 "instead",
                 fd);
    } else {
        /* libunwind's memory-probe pipe: libunwind keeps its numbers, so it must not unwind
         * again here (it would read and write the program's files through them). */
        if (rt_fd_is_kept(fd) && !rt_stackwalk_libunwind_stopped()) {
            rt_stackwalk_stop_libunwind();
            rt_debug("the program took descriptor %d, libunwind's: frame-pointer walks only", fd);
        }
        /* Not closed: a handler unwinding on another thread may be reading it right now,
         * and would close both numbers on the error; dup2() replaces it in one step. Also
         * how an entry libuv closed behind our close() (a raw system call) is dropped. */
        rt_fd_unprotect(fd);
    }
}

void rt_fds_check(void)
{
    int lost[8];
    size_t n;

    rt_fds_wait_setups(); /* on a program thread: a connection being made is not lost */
    n = rt_fds_lost(lost, sizeof(lost) / sizeof(lost[0]));

    for (size_t i = 0; i < n; i++)
        rt_fd_yield(lost[i]);
}

uint64_t rt_fds_taken(void)
{
    return atomic_load(&fds_taken);
}

static _Atomic int fds_give_up_started;
static char fds_given_up_text[256];
static _Atomic bool fds_given_up_set;

bool rt_fds_give_up(void)
{
    struct rlimit rl;
    size_t unwind;
    bool ipc, region, perf;

    if (rt_is_internal_thread() || starting || !atomic_load(&rt.running) ||
        atomic_exchange(&fds_give_up_started, 1))
        return false;
    /* The connection last: ending its thread (pthread_cancel) may load libgcc_s, which
     * takes a descriptor (glibc aborts the process when it cannot). */
    region = rt_region_give_up_fd();
    rt_sampler_give_up_statm();
    perf = rt_cpu_timer_give_up_fds();
    unwind = rt_stackwalk_release_libunwind();
    ipc = rt_ipc_connected();
    (void)rt_ipc_give_up(); /* also a connection still to be made: none is */
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        rl.rlim_cur = 0;
    (void)snprintf(fds_given_up_text, sizeof(fds_given_up_text),
                   "the program ran out of descriptors (limit %llu): gave up %s%s%s%sthe "
                   "memory counter",
                   (unsigned long long)rl.rlim_cur, ipc ? "the daemon connection, " : "",
                   perf ? "the perf events (CPU-clock timers from now on), " : "",
                   region ? "the chunk region's growth, " : "",
                   unwind ? "libunwind (frame-pointer stacks from now on), " : "");
    atomic_store(&fds_given_up_set, true);
    rt_debug("%s", fds_given_up_text);
    return true;
}

const char *rt_fds_given_up(void)
{
    return atomic_load(&fds_given_up_set) ? fds_given_up_text : NULL;
}

/* Steps done by rt_slots_give_up(): 0, 1 (the connection's thread), 2 (the sampler too). */
static _Atomic int slots_given_up;
static char slots_given_up_text[192];

bool rt_slots_give_up(void)
{
    struct rlimit rl;
    bool ipc = false;
    int step;

    if (rt_is_internal_thread() || starting || !atomic_load(&rt.running) ||
        getrlimit(RLIMIT_NPROC, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return false;
    step = atomic_load(&slots_given_up);
    do {
        if (step >= 2)
            return false;
    } while (!atomic_compare_exchange_weak(&slots_given_up, &step, step + 1));
    if (step == 0) {
        rt_region_mark_slots_given_up();
        ipc = rt_ipc_connected();
        (void)rt_ipc_give_up(); /* joins its thread; none is made again */
    }
    if (step == 1 || !ipc) {
        atomic_store(&slots_given_up, 2);
        rt_sampler_stop(); /* joins it: no sample from here on */
    }
    (void)snprintf(slots_given_up_text, sizeof(slots_given_up_text),
                   "the program reached its process limit (%llu): gave up %s; children forked "
                   "since are not profiled",
                   (unsigned long long)rl.rlim_cur,
                   atomic_load(&slots_given_up) == 2
                           ? (ipc || step == 1 ? "the daemon connection's thread and the sampler "
                                                 "(no samples from then on)"
                                               : "the sampler (no samples from then on)")
                           : "the daemon connection's thread");
    rt_debug("%s", slots_given_up_text);
    return true;
}

/* How long a call waits, after a give-up, for the kernel to count the joined thread out of
 * the user's processes: a moment, but the exiting thread needs a CPU to get there, and on a
 * machine whose CPUs are all busy that can take a scheduler period or more. */
#define SLOTS_RELEASE_WAIT_MS 200u

bool rt_slots_again(int err, unsigned *tries)
{
    const struct timespec ms = {0, 1000000};

    if (err != EAGAIN)
        return false;
    /* A joined thread is counted out of the user's processes a little after the join
     * returns (the kernel releases it after waking the joiner). */
    if (*tries > 0 && *tries < SLOTS_RELEASE_WAIT_MS) {
        (*tries)++;
        (void)nanosleep(&ms, NULL);
        return true;
    }
    if (!rt_slots_give_up())
        return false;
    *tries = 1;
    return true;
}

const char *rt_slots_given_up(void)
{
    return atomic_load(&slots_given_up) ? slots_given_up_text : NULL;
}

void rt_on_process_exit(void)
{
    /* An exit signal meanwhile waits for this exit (crash.c), or, on this thread, returns
     * to it: the program chose how it ends. */
    int32_t none = 0;

    (void)atomic_compare_exchange_strong(&rt.exiting_tid, &none, (int32_t)gettid());
    if (!rt_start_if_pending()) /* a forked child that ends early has its profile too */
        return;
    rt_ipc_welcome_wait(); /* what it tells goes into the sampler's last drain */
    rt_sampler_stop();
    write_exit_profile(true);
    rt_ipc_stop();
}

void rt_handle_exit_signal(int sig)
{
    struct sigaction dfl;
    sigset_t set;

    write_exit_profile(true);
    /* The exit profile leaves through the IPC thread: let it go before dying. */
    rt_ipc_stop();
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL; /* past the interposer, where SIG_DFL puts the stand-in back */
    (void)sigemptyset(&dfl.sa_mask);
    (void)rt_real_sigaction(sig, &dfl, NULL);
    (void)sigemptyset(&set);
    (void)sigaddset(&set, sig);
    (void)pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    (void)raise(sig);
}

/* Registered before the runtime first sets libuv up, so it runs before libuv's own fork
 * handler, which closes and replaces its signal-lock pipe in the child: those closes must
 * be real, and the new pipe is the runtime's. on_fork_child() ends the capture. */
static void on_fork_child_first(void)
{
    rt_fds_fork_child();
    rt.forked = true;
    if (!atomic_load(&rt.running) && atomic_load(&rt.fork_start) == RT_FORK_START_NONE)
        return;
    rt_fds_forget();
    rt_fds_capture(RT_FDS_CAPTURE);
}

static void on_fork_child(void)
{
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    atomic_store(&rt.exiting_tid, 0); /* the parent's exit, not ours */
    if (!atomic_load(&rt.running) && atomic_load(&rt.fork_start) == RT_FORK_START_NONE)
        return;
    if (atomic_load(&slots_given_up)) {
        /* Its threads would take the slots its parent gave the program: no runtime here.
         * The parent lists it in its region, where the daemon finds it to name it. */
        atomic_store(&rt.running, 0);
        atomic_store(&rt.fork_start, RT_FORK_START_NONE);
        return;
    }
    /* The parent's buffer, sampler and locks are not ours: other threads held them at the
     * fork and are gone. Abandon them (pages shared copy-on-write, never touched) and
     * start from scratch as a new process, lazily (fork_start_begin()). */
    atomic_store(&rt.running, 0);
    atomic_store(&rt.fork_start, RT_FORK_START_NONE);
    rt.buffer = NULL;
    rt.manager = NULL;
    rt.sampler_started = false;
    atomic_store(&rt.exit_signal, 0);
    atomic_store(&rt.before_start, RT_BEFORE_START_NONE); /* its CPU counts from the fork */
    /* A fork while another thread was in exec, or the sampler in its tgkill. */
    atomic_store(&rt.exec_pending, 0);
    atomic_store(&rt.signals_in_flight, 0);
    atomic_store(&rt.exec_failed, 0);
    (void)pthread_mutex_init(&rt.write_lock, NULL);
    (void)pthread_mutex_init(&init_lock, NULL);
    rt_threads_forget_all();
    rt_ipc_forget_after_fork();
    rt_updates_forget_after_fork();
    rt_sampler_forget_after_fork();
    rt_stackwalk_forget_after_fork();
    rt_region_forget_after_fork();
    rt_modules_forget_after_fork();
    rt_process_titles_forget();
    for (uint32_t i = 0; i < atomic_load(&rt.counter_count); i++) {
        atomic_store(&rt.counters[i].value, 0);
        rt.counters[i].last_sampled = 0;
        atomic_store(&rt.counters[i].ops, 0);
        rt.counters[i].last_ops = 0;
    }
    fork_history_forget_after_fork();
    if (fork_light_wanted) {
        /* A light child (above): the exec, or its first call that needs the runtime. */
        fork_light_wanted = false;
        rt.pid = (int32_t)getpid();
        rt.start_tid = (int32_t)gettid();
        rt.start_ns = rt_now_ns();
        atomic_store(&rt.fork_start, RT_FORK_START_LIGHT);
        return;
    }
    starting++;
    if (fork_start_begin(false) < 0)
        atomic_store(&rt.running, 0);
    starting--;
}

int rt_start_at_load(int argc, char **argv)
{
    int r;

    start_at_load = true;
    /* The command line as the loader passed it (no /proc read: 0.05 ms of a short-lived
     * process), before the program could write a title over it. */
    loader_argv_known = rt_process_set_command_line(argc, argv) == 0;
    r = fleetprof_init();
    start_at_load = false; /* a start that failed: a later fleetprof_init() is the program's */
    return r;
}

FLEETPROF_EXPORT int fleetprof_init(void)
{
    int r = 0;

    if (rt_start_if_pending())
        return 0;
    (void)pthread_mutex_lock(&init_lock);
    if (!atomic_load(&rt.running)) {
        rt_config_from_env(&rt.cfg);
        command_line_known = start_at_load && loader_argv_known;
        if (!first_fork_hook_installed) {
            first_fork_hook_installed = true;
            (void)pthread_atfork(NULL, NULL, on_fork_child_first);
        }
        starting++;
        r = start_locked();
        starting--;
        if (r == 0 && !hooks_installed) {
            hooks_installed = true;
            (void)atexit(rt_on_process_exit);
            (void)pthread_atfork(NULL, NULL, on_fork_child);
            rt_exit_signals_arm();
        }
    }
    (void)pthread_mutex_unlock(&init_lock);
    return r;
}

FLEETPROF_EXPORT void fleetprof_shutdown(void)
{
    (void)rt_start_if_pending(); /* its exit profile, as a started runtime writes */
    (void)pthread_mutex_lock(&init_lock);
    if (atomic_load(&rt.running)) {
        rt_sampler_stop();
        /* The process lives on and clears its buffer: the profile leaves now, written here. */
        write_exit_profile(false);
        rt_ipc_stop();
        rt_groups_stop();
        rt_crash_disarm();
        atomic_store(&rt.running, 0);
        buf_chunked_buffer_clear(rt.buffer);
    }
    (void)pthread_mutex_unlock(&init_lock);
}

FLEETPROF_EXPORT void fleetprof_pause(void)
{
    if (rt_running() && atomic_exchange(&rt.paused, 1) == 0)
        (void)prof_entry_put_pause(rt.buffer, true, rt_now_ns());
}

FLEETPROF_EXPORT void fleetprof_resume(void)
{
    if (rt_running() && atomic_exchange(&rt.paused, 0) == 1)
        (void)prof_entry_put_pause(rt.buffer, false, rt_now_ns());
}

FLEETPROF_EXPORT int fleetprof_write_profile(const char *path)
{
    int r;

    if (!rt_running())
        return -ESRCH;
    (void)pthread_mutex_lock(&rt.write_lock);
    r = rt_write_profile_to(path ? path : rt.cfg.output, 0);
    (void)pthread_mutex_unlock(&rt.write_lock);
    return r;
}
