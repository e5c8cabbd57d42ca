/* child/core/sampler.c - the sampler thread (the signal's handler is in handler.c).
 *
 * Each tick (an absolute futex timeout: a true 1 kHz, not a tick-bound itimer; a late tick
 * restarts the schedule instead of catching up; stopping or an exit signal wakes it at
 * once), the sampler:
 *   1. harvests the captures signal handlers finished since the last tick (no handshake:
 *      the handler never waits), unwinds copies in copy mode, writes SAMPLE entries;
 *   2. reads each live thread's CPU clock: a thread that did not run gets a cheap
 *      SAME_SAMPLE and no signal; the others get RT_SAMPLE_SIGNAL through tgkill;
 *   3. samples counters (the built-in memory counter and the descriptor check at most every
 *      10 ms, and only when another thread of the process ran since the last check);
 *   4. records its own cost as an OVERHEAD entry and prepares the next chunk.
 * A capture still in flight at the next tick is left alone, so each thread's samples stay
 * in time order. Ticks sit on a grid of whole intervals shared by every process. When
 * every thread was idle at two wakes in a row, the sampler sleeps through up to
 * RT_IDLE_SLEEP_NS of ticks (1, 1, 2, 4, 4... intervals) and writes the ticks it skipped as
 * same-samples when it wakes: an idle fleet of 64 processes at 1 kHz cost 60% of a CPU in
 * wake-ups alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "buffer/chunked-buffer.h"
#include "child/core/core.h"

/* The layers above, called on the sampler thread (set by rt_sampler_start()). */
static struct rt_sampler_hooks hooks;

static bool loss_handled; /* sampler-owned: after_handler_lost() ran */
/* The sampler reads it; rt_sampler_release_statm() may take it from another thread. */
static _Atomic int statm_fd = -1;
static uint64_t last_memory_ns;
/* What the process's other threads had used at the last descriptor and memory check
 * (sampler-owned): CPU in us and context switches, from getrusage(). */
static int64_t others_cpu_us;
static int64_t others_switches;
static bool others_known; /* the two above hold a measurement */
/* Those checks made and skipped (sampler-written, read by profile writers). */
static _Atomic uint64_t checks_made;
static _Atomic uint64_t checks_skipped;
/* Rate counters (all but memory): the time of each one's last row, and of the previous
 * step 3; sampler-owned, reset when the sampler starts (a forked child's starts anew). */
static uint64_t counter_row_ns[RT_MAX_COUNTERS];
static uint64_t counters_prev_ns;

/* On the sampler, at its first tick after the handler was lost: a sample of ours still
 * pending on some thread (its capture REQUESTED: the thread blocks the signal, or has not
 * run since) would reach the program's action when delivered. Registry lock held. */
static void after_handler_lost(void)
{
    bool in_flight = false;

    for (size_t i = 0; i < rt.thread_count; i++)
        if (rt.threads[i] && atomic_load_explicit(&rt.threads[i]->capture.state,
                                                  memory_order_acquire) == RT_CAPTURE_REQUESTED)
            in_flight = true;
    /* No timer of ours may signal the program's action from now on. */
    (void)pthread_mutex_unlock(&rt.registry_lock);
    rt_cpu_timer_disarm_all();
    (void)pthread_mutex_lock(&rt.registry_lock);
    if (in_flight)
        rt_handler_discard_pending();
    rt_debug("the program replaced the SIGPROF handler (rt_sigaction system call): sampling "
             "stopped");
}

/* Native frames from the root down to the frame of the function containing code_address
 * (a label's push site), searching from the root so recursion picks the outermost call;
 * 0 when no frame lies in that function. */
static uint32_t label_native_depth(const struct rt_capture *c, uint64_t code_address)
{
    uint64_t start, end;

    if (rt_proc_range(code_address - 1, &start, &end) < 0)
        return 0;
    for (uint32_t i = c->frame_count; i-- > 0;) {
        /* Return addresses point after the call: look up the call itself. */
        uint64_t pc = i == 0 ? c->frames[i] : c->frames[i] - 1;

        if (pc >= start && pc < end)
            return c->frame_count - i;
    }
    return 0;
}

/* At most this much CPU of a thread caught asleep is put down to the signal that woke it. */
#define RT_SIGNAL_COST_MAX_NS (200 * 1000)

/* Time in the sampling handler per capture (entry to exit, user space: the kernel's
 * delivery and sigreturn are not in it), in buckets of RT_HANDLER_BUCKET_NS up to
 * RT_HANDLER_BUCKETS of them, the last one open-ended. Sampler-written, read by profile
 * writers: relaxed atomics. */
#define RT_HANDLER_BUCKET_NS 16
#define RT_HANDLER_BUCKETS   1024
static _Atomic uint32_t handler_histogram[RT_HANDLER_BUCKETS];

static void count_handler_time(uint64_t ns)
{
    uint64_t b = ns / RT_HANDLER_BUCKET_NS;

    atomic_fetch_add_explicit(
            &handler_histogram[b < RT_HANDLER_BUCKETS ? b : RT_HANDLER_BUCKETS - 1], 1,
            memory_order_relaxed);
}

struct rt_handler_stats rt_sampler_handler_stats(void)
{
    uint32_t counts[RT_HANDLER_BUCKETS];
    uint64_t total = 0, seen = 0;
    struct rt_handler_stats st = {0};

    for (size_t i = 0; i < RT_HANDLER_BUCKETS; i++) {
        counts[i] = atomic_load_explicit(&handler_histogram[i], memory_order_relaxed);
        total += counts[i];
    }
    st.captures = total;
    for (size_t i = 0; i < RT_HANDLER_BUCKETS && total; i++) {
        uint64_t mid = i * RT_HANDLER_BUCKET_NS + RT_HANDLER_BUCKET_NS / 2;

        seen += counts[i];
        if (!st.p50_ns && seen * 2 >= total)
            st.p50_ns = mid;
        if (!st.p99_ns && seen * 100 >= total * 99)
            st.p99_ns = mid;
    }
    return st;
}

/* A tick at which thread t did not run: the stack of its last sample (a same-sample), or,
 * before it has any, a sample that says why there is none. */
static void put_idle_tick(struct rt_thread *t, uint64_t time_ns, uint32_t why)
{
    struct prof_sample s = {0};

    t->last_entry_ns = time_ns;
    if (t->sampled) {
        (void)prof_entry_put_same_sample(rt.buffer, t->tid, time_ns);
        return;
    }
    s.tid = t->tid;
    s.time_ns = time_ns;
    s.flags = why;
    (void)prof_entry_put_sample(rt.buffer, &s);
}

/* The ticks that came while the capture was in flight, spread evenly over the span they
 * covered (they sit on the interval grid, give or take a late wake). */
static void put_deferred_ticks(struct rt_thread *t, uint32_t why)
{
    uint32_t n = t->deferred_ticks;
    uint64_t span = t->deferred_last_ns - t->deferred_first_ns;

    for (uint32_t k = 0; k < n; k++)
        put_idle_tick(t, t->deferred_first_ns + (n > 1 ? span * k / (n - 1) : 0), why);
    t->deferred_ticks = 0;
}

/* A capture that will never land (its thread ended with the signal pending): the tick that
 * asked for it and those after it get the thread's last stack, or say why they have none. */
static void drop_capture(struct rt_thread *t)
{
    put_idle_tick(t, t->request_ns, PROF_SAMPLE_ENDED_UNSAMPLED);
    put_deferred_ticks(t, PROF_SAMPLE_ENDED_UNSAMPLED);
    atomic_store_explicit(&t->capture.state, RT_CAPTURE_EMPTY, memory_order_release);
}

/* Writes a landed capture at the tick that asked for it: until the handler ran, the thread
 * stood still where the capture found it (a pending signal is handled before the thread
 * runs another instruction), so that stack is also the one of every tick that came in the
 * meantime. On a busy machine a runnable thread can wait many ticks for a CPU; giving those
 * ticks its previous stack, or none before its first, misplaced them. */
/* A sample of thread t at time_ns with the stack and labels of capture c (unwound). */
static void put_stack_sample(struct rt_thread *t, const struct rt_capture *c, uint64_t time_ns)
{
    struct prof_label labels[RT_MAX_LABELS];
    struct prof_sample s = {0};

    for (uint32_t i = 0; i < c->label_count; i++) {
        labels[i].name.data = c->labels[i].name;
        labels[i].name.len = c->labels[i].name ? strlen(c->labels[i].name) : 0;
        labels[i].category = c->labels[i].category;
        labels[i].stack_address = c->labels[i].stack_address;
        labels[i].code_address = c->labels[i].code_address;
        labels[i].native_depth = label_native_depth(c, c->labels[i].code_address);
    }
    s.tid = t->tid;
    s.time_ns = time_ns;
    t->last_entry_ns = time_ns;
    s.cpu_delta_ns = c->cpu_delta_ns;
    s.flags = c->flags;
    s.frames = c->frames;
    s.frame_count = c->frame_count;
    s.labels = labels;
    s.label_count = c->label_count;
    (void)prof_entry_put_sample(rt.buffer, &s);
    t->sampled = true;
}

/* Captures written in this process, and their handlers' time (sampler-owned): until the
 * process is warmed for unw_backtrace (stackwalk.c), its handlers walk step by step, and
 * once that time reaches RT_WARM_AFTER_NS the warm-up is paid for. */
static uint64_t captures_written, handler_ns_written;

static void write_capture(struct rt_thread *t, struct rt_capture *c, uint64_t time_ns)
{
    captures_written++;
    /* A process's first walks also fault in libunwind's pages and the loader's data, which
     * the warm-up would not save: one capture counts for at most a twentieth. */
    handler_ns_written +=
            c->handler_ns < RT_WARM_AFTER_NS / 20 ? c->handler_ns : RT_WARM_AFTER_NS / 20;
    if (rt.cfg.stackwalk == RT_STACKWALK_COPY)
        rt_stackwalk_unwind_copy(c);
    count_handler_time(c->handler_ns);
    t->signal_woke_it = c->in_syscall;
    put_stack_sample(t, c, time_ns);
}

static void write_sample(struct rt_thread *t)
{
    struct rt_capture *c = &t->capture;

    write_capture(t, c, t->request_ns);
    put_deferred_ticks(t, 0);
    /* A capture of the runtime's own start-up is not where the program is: a thread that
     * blocks right after it (a sleeper, a server's main waiting for work) must not have every
     * later tick repeat it (a same-sample). It counts as not sampled yet, so its idle ticks
     * say why they have no stack and a runnable one is signalled again. */
    if (t->tid == rt.start_tid) {
        uint64_t done = atomic_load(&rt.start_done_ns);

        if (!done || t->request_ns <= done) {
            t->sampled = false;
            t->probe_cpu_ns = 0;
        }
    }
    atomic_store_explicit(&c->state, RT_CAPTURE_EMPTY, memory_order_release);
}

static uint64_t thread_cpu_ns(clockid_t clock)
{
    struct timespec ts;

    if (clock_gettime(clock, &ts) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whether the thread is runnable (state R in /proc: running, or waiting for a CPU) rather
 * than blocked. Asked only of a thread with no sample yet that used no CPU since its last
 * tick: a runnable one is signalled (it runs no user code before the handler, so the
 * capture is the stack it waits at), a blocked one is not (a signal would interrupt its
 * call: sleeps and waits return EINTR even with SA_RESTART). */
/* Whether st is a file of /proc (its file system's device, read once). */
static bool proc_file(const struct stat *st)
{
    static dev_t proc_dev;
    static bool known;
    struct stat p;

    if (!known && stat("/proc/self", &p) == 0) {
        proc_dev = p.st_dev;
        known = true;
    }
    return known && st->st_dev == proc_dev;
}

static bool thread_runnable(int32_t tid)
{
    char path[64], buf[512];
    struct stat before, after;
    const char *state;
    ssize_t n = -1;
    int fd;

    (void)snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
    /* A setup: a program's dup2() sweep waits for it. Should one land on the number anyway
     * (it looked just before), the descriptor is the program's then, and is not closed. */
    rt_fds_setup_begin();
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && fstat(fd, &before) < 0)
        (void)close(fd);
    else if (fd >= 0 && proc_file(&before)) {
        n = read(fd, buf, sizeof(buf) - 1);
        if (fstat(fd, &after) == 0 && after.st_dev == before.st_dev &&
            after.st_ino == before.st_ino)
            (void)close(fd);
        else
            n = -1;
    }
    rt_fds_setup_end();
    if (n <= 0)
        return false;
    buf[n] = '\0';
    state = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return state && state[1] == ' ' && state[2] == 'R';
}

/* Same-samples (or, before the first sample, samples saying the thread is blocked) for the
 * grid ticks the sampler slept through (all its threads were idle at the tick before),
 * oldest first, so that the thread keeps one sample per interval. */
static void put_skipped_ticks(struct rt_thread *t, uint64_t now, unsigned skipped)
{
    for (unsigned k = skipped; k > 0; k--) {
        uint64_t time = now - k * rt.cfg.interval_ns;

        /* A wake earlier than planned (the grid rounds down) would put a skipped tick at or
         * before the thread's last entry: a duplicate, out of order. */
        if (time > t->last_entry_ns)
            put_idle_tick(t, time, PROF_SAMPLE_BLOCKED_SINCE_START);
    }
}

/* Whether thread t, which used (almost) no CPU since its last sample, is to be signalled
 * anyway: only before its first sample, when it waits for a CPU rather than in a call. */
static bool sample_idle_thread(struct rt_thread *t, uint64_t cpu)
{
    if (t->sampled || t->probe_cpu_ns == cpu)
        return false;
    if (thread_runnable(t->tid))
        return true;
    t->probe_cpu_ns = cpu; /* blocked: not asked again until it runs */
    return false;
}

/* Sends thread t the sampling signal. The exec wrappers' handshake (preload.c): the count
 * of signals in flight is raised before exec_pending is read (both sequentially
 * consistent), so either this sees the exec coming and sends nothing, or the exec waits
 * until this tgkill has returned, and then drains what it queued. Returns 0, -EAGAIN (an
 * exec is under way) or -ESRCH (the thread is gone). */
static int signal_thread(const struct rt_thread *t)
{
    int r = 0;

    atomic_fetch_add(&rt.signals_in_flight, 1);
    if (atomic_load(&rt.exec_pending))
        r = -EAGAIN;
    else if (syscall(SYS_tgkill, rt.pid, t->tid, RT_SAMPLE_SIGNAL) < 0)
        r = -ESRCH;
    atomic_fetch_sub(&rt.signals_in_flight, 1);
    return r;
}

/* Once per tick, before its first signal: false (and sampling stopped for good) if the
 * program replaced our handler behind our back. */
static bool may_signal(bool *checked)
{
    if (!*checked) {
        *checked = true;
        rt_handler_check();
    }
    return !rt_handler_stopped_reason(NULL);
}

/* ---- threads sampled by their own CPU timer ------------------------------------------
 *
 * The handler fills the thread's ring; here each capture becomes entries on the interval
 * grid of the thread's track: the wall time since the thread's previous entry is cut into
 * intervals, the last ones (as many as the capture's CPU fills, at least one) get the
 * capture's stack and share its CPU, the ones before get the stack of the previous sample
 * (the thread did not run then: it waited, or waited for a CPU) with none. Between
 * captures, time a thread spends off its CPU is written the same way at each drain. */

/* `count` idle entries for thread t, one interval apart after its last entry. */
static void put_idle_entries(struct rt_thread *t, uint64_t count, uint32_t why)
{
    uint64_t iv = rt.cfg.interval_ns;

    for (uint64_t k = 0; k < count; k++)
        put_idle_tick(t, t->last_entry_ns + iv, why);
}

/* `count` idle entries for thread t, at the stack where it waits if it waits in one of the
 * program's blocking calls (walked once per call, from a copy: waits.c), else at its last
 * stack. The entries before that call began keep the last stack. */
static void put_wait_entries(struct rt_thread *t, uint64_t count, uint32_t why)
{
    uint64_t iv = rt.cfg.interval_ns, since, before;
    uint32_t seq = atomic_load_explicit(&t->wait.seq, memory_order_acquire);
    struct rt_capture *c;

    if (count > 0 && t->live && (seq & 1u) && seq != t->wait_written_seq &&
        rt_wait_stack(t, &seq, &since, &c) == 0) {
        /* Before that call, its last stack; a thread with none has this one from its start. */
        before = since > t->last_entry_ns && t->sampled ? (since - t->last_entry_ns) / iv : 0;
        if (before > count - 1)
            before = count - 1;
        put_idle_entries(t, before, why);
        put_stack_sample(t, c, t->last_entry_ns + iv);
        t->wait_written_seq = seq;
        count -= before + 1;
    }
    put_idle_entries(t, count, why);
}

/* Capture c of thread t's timer, written as entries (see above). */
static void write_timer_capture(struct rt_thread *t, struct rt_capture *c)
{
    uint64_t iv = rt.cfg.interval_ns, last = t->last_entry_ns, at = c->time_ns;
    uint64_t cpu = c->cpu_delta_ns, n, busy, step, share;
    bool stack_written;

    t->last_cpu_ns = c->cpu_ns;
    if (t->tid == rt.start_tid) {
        uint64_t done = atomic_load(&rt.start_done_ns);

        /* The runtime's own start-up on this thread: not the program (see write_sample). */
        if (!done || at <= done)
            return;
    }
    if (at <= last)
        at = last + 1; /* harvested late, after idle time was written past it */
    n = (at - last + iv / 2) / iv;
    busy = (cpu + iv / 2) / iv;
    if (n < 1)
        n = 1;
    busy = busy < 1 ? 1 : busy > n ? n : busy;
    share = cpu / busy;
    stack_written = !t->sampled && n > busy;
    if (stack_written) {
        /* Its first capture: what came before is the stack it was found at (it was made
         * runnable at its start and waited for a CPU, or its tail idle time said it was
         * blocked already), not a stack it never had. */
        c->cpu_delta_ns = 0;
        write_capture(t, c, last + iv);
        for (uint64_t k = 1; k < n - busy; k++)
            (void)prof_entry_put_same_sample_cpu(rt.buffer, t->tid, last + (k + 1) * iv, 0);
        t->last_entry_ns = last + (n - busy) * iv;
    } else {
        put_idle_entries(t, n - busy, PROF_SAMPLE_BLOCKED_SINCE_START);
    }
    /* The busy entries end at the capture, an interval apart (closer if the idle ones left
     * less room), each with an equal share of the CPU. */
    step = busy > 1 ? (at - t->last_entry_ns) / busy : 0;
    if (step > iv)
        step = iv;
    if (!stack_written) {
        c->cpu_delta_ns = share + cpu % busy;
        write_capture(t, c, at - (busy - 1) * step);
    } else {
        (void)prof_entry_put_same_sample_cpu(rt.buffer, t->tid, at - (busy - 1) * step,
                                             share + cpu % busy);
        t->last_entry_ns = at - (busy - 1) * step;
    }
    for (uint64_t k = 1; k < busy; k++) {
        uint64_t time = at - (busy - 1 - k) * step;

        (void)prof_entry_put_same_sample_cpu(rt.buffer, t->tid, time, share);
        t->last_entry_ns = time;
    }
}

/* The samples of thread t that cannot be taken (no timer, or it blocks the signal): one
 * entry per interval, saying why, the first with the CPU it used since the last. */
static void put_unsampled(struct rt_thread *t, uint64_t until, uint64_t cpu, uint32_t why)
{
    uint64_t iv = rt.cfg.interval_ns, count = (until - t->last_entry_ns) / iv;
    struct prof_sample s = {0};

    if (count == 0 || cpu < t->last_cpu_ns)
        return;
    s.tid = t->tid;
    s.flags = why;
    for (uint64_t k = 0; k < count; k++) {
        s.time_ns = t->last_entry_ns + iv;
        s.cpu_delta_ns = k == 0 ? cpu - t->last_cpu_ns : 0;
        (void)prof_entry_put_sample(rt.buffer, &s);
        t->last_entry_ns = s.time_ns;
    }
    t->last_cpu_ns = cpu;
}

/* The start's thread in a fresh image: the CPU it used until the runtime's start was done
 * (the exec, the loader, the start), less what a profiled image before the exec charged it,
 * as a sample without a stack at its registration, written once that is known (the daemon's
 * Welcome: before the first drain, almost always, so it comes first; a later one is drawn
 * at the time it is written). Nothing waits for it: RT_BEFORE_START_WAIT_NS after the start
 * without a Welcome, or at the end, that CPU is left out rather than charged twice. */
static void put_before_start(struct rt_thread *t, uint64_t now, bool last)
{
    int state = atomic_load(&rt.before_start);
    struct prof_sample s = {0};
    uint64_t accounted;

    if (state == RT_BEFORE_START_NONE || t->tid != rt.start_tid)
        return;
    if (!last && t->live && !atomic_load(&rt.start_done_ns) &&
        now - rt.start_ns < RT_BEFORE_START_WAIT_NS)
        return; /* the start's own captures are still to come */
    if (state == RT_BEFORE_START_PENDING) {
        if (!last && t->live && now - rt.start_ns < RT_BEFORE_START_WAIT_NS)
            return;
        if (atomic_compare_exchange_strong(&rt.before_start, &state, RT_BEFORE_START_NONE))
            return;
        if (state != RT_BEFORE_START_KNOWN) /* the Welcome came meanwhile */
            return;
    }
    accounted = atomic_load(&rt.before_start_accounted_ns);
    atomic_store(&rt.before_start, RT_BEFORE_START_NONE);
    if (rt.before_start_cpu_ns <= accounted)
        return;
    s.tid = t->tid;
    s.time_ns = t->register_ns;
    s.flags = PROF_SAMPLE_BEFORE_START;
    s.cpu_delta_ns = rt.before_start_cpu_ns - accounted;
    (void)prof_entry_put_sample(rt.buffer, &s);
}

/* The start's thread in a fresh image: the captures of its timer while the runtime was still
 * starting (before rt.start_done_ns) are of our start-up (loading the IPC module,
 * connecting: 1 ms, 3 ms on a busy machine), not where the program is, so their stacks go;
 * their CPU is the thread's all the same, and joins the CPU before the start. Dropped with
 * them, it made a spawned 20 ms child's profile 12 % short of its own clock. */
static void take_start_up_captures(struct rt_thread *t)
{
    uint64_t done = atomic_load(&rt.start_done_ns);

    if (t->tid != rt.start_tid || atomic_load(&rt.before_start) == RT_BEFORE_START_NONE)
        return;
    for (;;) {
        struct rt_capture *c = &t->ring[t->ring_tail % RT_CAPTURE_RING];

        if (atomic_load_explicit(&c->state, memory_order_acquire) != RT_CAPTURE_FULL ||
            (done && c->time_ns > done))
            break;
        rt.before_start_cpu_ns += c->cpu_delta_ns;
        t->last_cpu_ns = c->cpu_ns;
        atomic_store_explicit(&c->state, RT_CAPTURE_EMPTY, memory_order_release);
        t->ring_tail++;
    }
}

/* The capture the sampler asked of timer thread t: its stack, no CPU of its own (that stays
 * with the timer's next capture, or the thread's end). Registry lock held. */
static void write_requested_capture(struct rt_thread *t, bool paused)
{
    if (!paused) {
        t->capture.cpu_delta_ns = 0;
        t->capture.cpu_ns = t->last_cpu_ns;
        write_timer_capture(t, &t->capture);
    }
    atomic_store_explicit(&t->capture.state, RT_CAPTURE_EMPTY, memory_order_release);
}

/* Thread t's timer captures since the last drain, then its time off the CPU up to now (or
 * to its end); `last` (the sampler is stopping) or a thread that ended also writes the CPU
 * it used since its last capture, on its last stack. Returns whether it made a capture.
 * Registry lock held. */
static bool drain_timer_thread(struct rt_thread *t, uint64_t now, bool paused, bool last)
{
    bool captured = false;
    uint64_t end, cpu, ran, iv = rt.cfg.interval_ns;
    int requested;

    take_start_up_captures(t);
    put_before_start(t, now, last);
    if (!t->last_entry_ns)
        t->last_entry_ns = t->register_ns;
    /* A capture the sampler asked for (below), landed: the stack, no CPU of its own, written
     * in time order among the timer's (written before older ones, it left each of them one
     * sample however much CPU it carried). */
    requested = atomic_load_explicit(&t->capture.state, memory_order_acquire);
    if (requested == RT_CAPTURE_REQUESTED && (!t->live || last))
        /* its handler can no longer run (rt_self cleared first) */
        atomic_store_explicit(&t->capture.state, RT_CAPTURE_EMPTY, memory_order_release);
    for (;;) {
        struct rt_capture *c = &t->ring[t->ring_tail % RT_CAPTURE_RING];

        if (atomic_load_explicit(&c->state, memory_order_acquire) != RT_CAPTURE_FULL)
            break;
        if (requested == RT_CAPTURE_FULL && c->time_ns > t->capture.time_ns) {
            write_requested_capture(t, paused);
            requested = RT_CAPTURE_EMPTY;
        }
        if (paused)
            t->last_cpu_ns = c->cpu_ns;
        else
            write_timer_capture(t, c);
        atomic_store_explicit(&c->state, RT_CAPTURE_EMPTY, memory_order_release);
        t->ring_tail++;
        captured = true;
    }
    if (requested == RT_CAPTURE_FULL)
        write_requested_capture(t, paused);
    captured = captured || requested == RT_CAPTURE_FULL;
    if (t->tail_written)
        return captured;
    end = t->live ? now : t->unregister_ns;
    cpu = t->live ? thread_cpu_ns(t->cpu_clock) : t->final_cpu_ns;
    if (paused || end <= t->last_entry_ns) {
        if (paused) { /* paused time is no one's */
            t->last_entry_ns = end > t->last_entry_ns ? end : t->last_entry_ns;
            t->last_cpu_ns = cpu;
        }
        return captured;
    }
    /* Also for a thread that ended so: its samples up to its end say why. */
    if (t->no_timer || t->timer_paused) {
        put_unsampled(t, end, cpu, t->no_timer ? PROF_SAMPLE_NO_TIMER : PROF_SAMPLE_SIGNAL_BLOCKED);
        if (last || !t->live)
            t->tail_written = true;
        return captured;
    }
    ran = cpu > t->last_cpu_ns ? cpu - t->last_cpu_ns : 0;
    /* Off the CPU since the last entry: what wall time its CPU does not cover. A thread
     * running now leaves that to its next capture. So does one not sampled yet, unless it
     * waits in a blocking call we know (its stack then): its first capture gives that time
     * its stack, and if it never comes, its end says it was blocked (whether it waited for
     * a CPU or in a call cannot be told apart without /proc: beside two CPU hogs, 8 % of
     * short-lived children's samples said "blocked" when they were only runnable). */
    if (end - t->last_entry_ns > ran &&
        (t->sampled || !t->live || last || (atomic_load(&t->wait.seq) & 1u)))
        put_wait_entries(t, (end - t->last_entry_ns - ran) / iv, PROF_SAMPLE_BLOCKED_SINCE_START);
    /* A thread that ran a tick's worth of intervals and was never caught by its timer (it
     * may run only between the kernel's ticks: beside two CPU hogs, 1 short-lived child in
     * 120 used its 20 ms and had no sample): one signal from here, as the tick path sends,
     * only while /proc shows it running or runnable (a signal is taken before it runs on:
     * no wait of its is cut short, but for one it enters in the microseconds between). */
    if (t->live && !last && !t->sampled && ran >= 4 * iv && !(atomic_load(&t->wait.seq) & 1u) &&
        atomic_load_explicit(&t->capture.state, memory_order_acquire) == RT_CAPTURE_EMPTY &&
        !atomic_load(&rt.exec_pending) && thread_runnable(t->tid)) {
        t->request_ns = now;
        t->deferred_ticks = 0;
        atomic_store_explicit(&t->capture.state, RT_CAPTURE_REQUESTED, memory_order_release);
        if (signal_thread(t) != 0)
            atomic_store_explicit(&t->capture.state, RT_CAPTURE_EMPTY, memory_order_release);
    }
    if ((last || !t->live) && ran > 0) {
        uint64_t at = end > t->last_entry_ns ? end : t->last_entry_ns + 1;

        if (t->sampled) {
            (void)prof_entry_put_same_sample_cpu(rt.buffer, t->tid, at, ran);
        } else {
            struct prof_sample s = {.tid = t->tid, .time_ns = at, .cpu_delta_ns = ran};

            s.flags = t->timer_paused ? PROF_SAMPLE_SIGNAL_BLOCKED : PROF_SAMPLE_BELOW_PERIOD;
            (void)prof_entry_put_sample(rt.buffer, &s);
        }
        t->last_entry_ns = at;
        t->last_cpu_ns = cpu;
    }
    if (last || !t->live)
        t->tail_written = true;
    return captured;
}

/* Whether the last tick found a live thread sampled by the tick (RT_TIMER_TICK): then the
 * sampler wakes every interval; else only to drain (sampler-owned). */
static bool tick_threads;

/* Steps 1 and 2 of a tick, which comes after `skipped` ticks slept through. Returns true if
 * some thread ran (was signalled, or still has a capture pending). Registry lock held. */
static bool sample_threads(uint64_t now, unsigned skipped)
{
    tick_threads = false;
    bool busy = false, checked = false;
    bool paused = atomic_load(&rt.paused);
    bool stopped = rt_handler_stopped_reason(NULL) != NULL;
    /* An exec failed after draining samples in flight: signal those threads again. */
    bool resend = atomic_exchange(&rt.exec_failed, 0) != 0;
    /* Below this much CPU since its last sample, a thread counts as idle: above the cost of
     * one sampling signal here (~10 us), far below a busy thread's interval. */
    uint64_t idle_cpu_ns = rt.cfg.interval_ns / 20 > 20000 ? rt.cfg.interval_ns / 20 : 20000;

    if (stopped && !loss_handled) {
        loss_handled = true;
        after_handler_lost();
    }
    for (size_t i = 0; i < rt.thread_count; i++) {
        struct rt_thread *t = rt.threads[i];
        int state;
        uint64_t cpu;

        if (!t || !atomic_load_explicit(&t->timer_armed, memory_order_acquire))
            continue; /* registering: published, its timer not armed yet */
        if (atomic_load_explicit(&t->timer_kind, memory_order_acquire) != RT_TIMER_TICK) {
            /* Sampled by its own timer: its captures wait in its ring. */
            if (drain_timer_thread(
                        t, now,
                        paused || stopped ||
                                atomic_load_explicit(&rt.exec_pending, memory_order_relaxed),
                        false))
                busy = true;
            if (t->live && t->timer_interval_ns != rt.cfg.interval_ns) {
                rt_cpu_timer_set_interval(t, rt.cfg.interval_ns); /* the daemon's Welcome */
                t->timer_interval_ns = rt.cfg.interval_ns;
            }
            continue;
        }
        state = atomic_load_explicit(&t->capture.state, memory_order_acquire);
        if (state == RT_CAPTURE_FULL) {
            write_sample(t);
            state = RT_CAPTURE_EMPTY;
        }
        if ((!t->live || stopped) && state == RT_CAPTURE_REQUESTED) {
            /* Its handler can no longer run (rt_self is cleared before the thread is marked
             * dead; or our handler is gone), and a slot in flight is never reused. */
            drop_capture(t);
            continue;
        }
        if (!t->live || paused || stopped ||
            atomic_load_explicit(&rt.exec_pending, memory_order_relaxed))
            continue;
        tick_threads = true;
        put_skipped_ticks(t, now, skipped);
        if (state == RT_CAPTURE_REQUESTED) {
            /* The signal is still pending a whole tick later: the thread was not scheduled
             * (a busy machine), so it did not run. This tick gets the capture's stack when
             * it lands. */
            if (t->deferred_ticks++ == 0)
                t->deferred_first_ns = now;
            t->deferred_last_ns = now;
            busy = true;
            if (resend && may_signal(&checked) && signal_thread(t) == -EAGAIN)
                atomic_store(&rt.exec_failed, 1); /* another exec: after it */
            continue;
        }
        cpu = thread_cpu_ns(t->cpu_clock);
        if (t->tid == rt.start_tid && !atomic_load(&rt.start_done_ns)) {
            /* The runtime is still starting on this thread (loading its IPC module,
             * connecting): that CPU is ours and that stack is ours, not the program's, and a
             * capture there could name frames no symbol file has (libuv's own). Not
             * signalled; its CPU counts from the tick after the start. */
            t->last_cpu_ns = cpu;
            continue;
        }
        if (t->signal_woke_it && cpu - t->last_cpu_ns < RT_SIGNAL_COST_MAX_NS) {
            /* Asleep when signalled: what it used since (the kernel's delivery, the handler,
             * going back to sleep) is our signal's, not the program's. Counted, it could
             * exceed the idle threshold on a slow machine (63 us a signal beside two CPU
             * hogs here), get the sleeper signalled again, and so on for every tick. */
            t->last_cpu_ns = cpu;
        }
        t->signal_woke_it = false;
        if (cpu - t->last_cpu_ns < idle_cpu_ns && !sample_idle_thread(t, cpu)) {
            /* It (almost) did not run: its stack is the one of its last sample. No signal,
             * so an idle thread is not woken and its blocking calls are not interrupted.
             * The threshold matters: the signal itself bills the thread some CPU (handler,
             * syscall restart), and an exact comparison would make every signalled sleeper
             * look busy forever. Its CPU is not reset, so a thread doing a little work is
             * sampled now and then. */
            put_idle_tick(t, now, PROF_SAMPLE_BLOCKED_SINCE_START);
            continue;
        }
        if (!may_signal(&checked)) {
            stopped = true;
            continue;
        }
        t->capture.cpu_delta_ns = cpu - t->last_cpu_ns;
        t->last_cpu_ns = cpu;
        t->request_ns = now;
        t->deferred_ticks = 0;
        atomic_store_explicit(&t->capture.state, RT_CAPTURE_REQUESTED, memory_order_release);
        switch (signal_thread(t)) {
        case 0:
            break;
        case -EAGAIN: /* an exec began meanwhile: this tick keeps the last stack */
            atomic_store_explicit(&t->capture.state, RT_CAPTURE_EMPTY, memory_order_release);
            put_idle_tick(t, now, PROF_SAMPLE_BLOCKED_SINCE_START);
            break;
        default:
            atomic_store_explicit(&t->capture.state, RT_CAPTURE_EMPTY, memory_order_release);
            put_idle_tick(t, now, PROF_SAMPLE_ENDED_UNSAMPLED); /* it is gone */
            break;
        }
        busy = true;
    }
    return busy;
}

/* After the sampler's last tick: captures that landed are written, and those still in
 * flight end with the ticks they hold (the sampler is gone: nobody would harvest them). */
static void harvest_last_captures(void)
{
    (void)pthread_mutex_lock(&rt.registry_lock);
    for (size_t i = 0; i < rt.thread_count; i++) {
        struct rt_thread *t = rt.threads[i];
        int state;

        if (!t || !atomic_load_explicit(&t->timer_armed, memory_order_acquire))
            continue;
        if (atomic_load_explicit(&t->timer_kind, memory_order_acquire) != RT_TIMER_TICK) {
            (void)drain_timer_thread(t, rt_now_ns(), atomic_load(&rt.paused) != 0, true);
            continue;
        }
        state = atomic_load_explicit(&t->capture.state, memory_order_acquire);
        if (state == RT_CAPTURE_FULL)
            write_sample(t);
        else if (state == RT_CAPTURE_REQUESTED)
            drop_capture(t);
    }
    (void)pthread_mutex_unlock(&rt.registry_lock);
}

/* Ticks to sleep through after `idle_wakes` wakes in a row that found every thread idle:
 * 0 while anything runs, then 1, 3, 3... up to RT_IDLE_SLEEP_NS. */
static unsigned ticks_to_skip(unsigned idle_wakes)
{
    uint64_t max = RT_IDLE_SLEEP_NS / rt.cfg.interval_ns;
    uint64_t k;

    if (idle_wakes < 2 || max < 2)
        return 0;
    k = (1ull << (idle_wakes < 4 ? idle_wakes - 1 : 3)) - 1;
    return (unsigned)(k < max ? k : max - 1);
}

/* Opened and protected before any thread of ours could race the program for it, like the
 * IPC descriptors, and kept in the runtime's band of high numbers. */
static int open_statm(void)
{
    int fd;

    rt_fds_capture(RT_FDS_CAPTURE); /* not on 0, 1 or 2 */
    fd = rt_fd_relocate(open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
    rt_fd_protect(fd);
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    atomic_store(&statm_fd, fd);
    return fd;
}

bool rt_sampler_owns_fd(int fd)
{
    return fd >= 0 && atomic_load(&statm_fd) == fd;
}

static _Atomic bool statm_given_up;

void rt_sampler_give_up_statm(void)
{
    atomic_store(&statm_given_up, true);
    rt_sampler_release_statm();
}

void rt_sampler_release_statm(void)
{
    int fd = atomic_exchange(&statm_fd, -1);

    rt_fd_release(fd);
}

static int64_t resident_bytes(void)
{
    char buf[128];
    long pages_total, pages_resident;
    ssize_t n;

    int fd = atomic_load(&statm_fd);

    if (fd < 0 && atomic_load(&statm_given_up))
        return -1;
    if (fd < 0)
        fd = open_statm(); /* given up (the program took its number): opened again */
    if (fd < 0)
        return -1;
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%ld %ld", &pages_total, &pages_resident) != 2)
        return -1;
    return (int64_t)pages_resident * sysconf(_SC_PAGESIZE);
}

/* Whether any thread of the process but this one (the program's, registered or not: raw
 * clone, threads that began before us; the IPC thread; a profile writer) ran since the
 * last call that returned true. Nothing else can close or replace a descriptor of ours or
 * change the resident size much, so the checks that look for that are skipped while it
 * is false. Two getrusage() calls and two clock reads (~3 us here) against 3-8 fstat() and
 * a pread of statm (5-11 us). The test, from the process's totals less this thread's:
 *   - context switches: a thread that ran and then blocked, or was preempted, counts one,
 *     exactly (a thread that ran 1 us to close a descriptor and went back to sleep);
 *   - CPU: a thread still running, or one that ended without blocking: the process's CPU
 *     clock less this thread's, in whole microseconds (exact for the threads that are not
 *     running; a running one's share lags by up to a tick, and is found at the next call).
 *     getrusage()'s CPU was used first: split into user and system time by tick counts and
 *     rescaled at each call, the difference of two such figures wandered by hundreds of
 *     microseconds and hid a raw-clone thread that ran 30 us.
 * This thread's figures are read first, so a switch of ours between the two calls (a
 * preemption) shows as the others': a check too many, never one too few. */
static bool others_ran(void)
{
    struct rusage self, all;
    int64_t cpu, switches;

    struct timespec own, process;

    if (getrusage(RUSAGE_THREAD, &self) < 0 || getrusage(RUSAGE_SELF, &all) < 0 ||
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own) < 0 ||
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &process) < 0)
        return true; /* cannot tell: check */
    /* The CPU from the clocks (getrusage's is split into user and system time by tick
     * counts, rescaled at each call: the difference of two such figures wandered by
     * hundreds of microseconds, and hid a thread that ran 30 us). */
    cpu = ((int64_t)process.tv_sec - own.tv_sec) * 1000000 +
          ((int64_t)process.tv_nsec - own.tv_nsec) / 1000;
    switches = (all.ru_nvcsw + all.ru_nivcsw) - (self.ru_nvcsw + self.ru_nivcsw);
    /* The baseline moves only when a check is made: activity below the rounding adds up
     * until it shows. */
    if (others_known && switches == others_switches && cpu - others_cpu_us <= 4)
        return false;
    others_cpu_us = cpu;
    others_switches = switches;
    others_known = true;
    return true;
}

uint64_t rt_sampler_captures_dropped(void)
{
    return atomic_load_explicit(&rt.captures_dropped, memory_order_relaxed);
}

void rt_sampler_check_stats(uint64_t *ret_made, uint64_t *ret_skipped)
{
    *ret_made = atomic_load_explicit(&checks_made, memory_order_relaxed);
    *ret_skipped = atomic_load_explicit(&checks_skipped, memory_order_relaxed);
}

/* Step 3: counters whose value changed get a COUNTER entry with the delta; with memory, the
 * memory counter is read first (at most every 10 ms, and only when another thread ran). */
static void sample_counters(uint64_t now, bool memory)
{
    uint32_t count = atomic_load(&rt.counter_count);

    if (memory && now - last_memory_ns >= RT_MEMORY_COUNTER_NS) {
        last_memory_ns = now;
        if (others_ran()) {
            int64_t rss;

            atomic_fetch_add_explicit(&checks_made, 1, memory_order_relaxed);
            hooks.check_fds(); /* as often, and first: a few fstat() calls */
            rss = resident_bytes();
            if (rss >= 0)
                atomic_store(&rt.counters[0].value, rss);
        } else {
            atomic_fetch_add_explicit(&checks_skipped, 1, memory_order_relaxed);
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        struct rt_counter *c = &rt.counters[i];
        int64_t v = atomic_load_explicit(&c->value, memory_order_relaxed);
        uint64_t ops = atomic_load_explicit(&c->ops, memory_order_relaxed);
        struct prof_counter_sample s;

        if (v == c->last_sampled && ops == c->last_ops)
            continue;
        if (i > 0 && counters_prev_ns && counter_row_ns[i] != counters_prev_ns &&
            (!c->category || strcmp(c->category, "Memory") != 0)) {
            /* Idle since its last row (or new): a zero row at the previous step first. The
             * front-end spreads a row's delta over the time since the row before it, so
             * without it a burst would be drawn as a trickle over the whole idle time. */
            struct prof_counter_sample zero = {i, counters_prev_ns, 0, 0};

            (void)prof_entry_put_counter(rt.buffer, &zero);
        }
        s.counter_id = i;
        s.time_ns = now;
        s.delta = v - c->last_sampled;
        s.number = ops - c->last_ops;
        if (prof_entry_put_counter(rt.buffer, &s) == 0) {
            c->last_sampled = v;
            c->last_ops = ops;
            counter_row_ns[i] = now;
        }
    }
    counters_prev_ns = now;
}

uint64_t rt_sampler_next_tick(uint64_t prev_ns, uint64_t now_ns, uint64_t interval_ns,
                              unsigned skip, unsigned *ret_skipped)
{
    uint64_t next = prev_ns + interval_ns * (skip + 1);

    if (next < now_ns) {
        next = now_ns; /* we were late: restart the schedule rather than catch up */
        skip = 0;
    }
    /* Ticks sit on a grid of whole intervals of the monotonic clock, shared by every
     * profiled process: the kernel then expires all their sampler timers in one interrupt
     * per CPU and tick, instead of one interrupt per process and tick. */
    next -= next % interval_ns;
    if (next <= now_ns)
        next += interval_ns;
    *ret_skipped = skip;
    return next;
}

static void *sampler_main(void *arg)
{
    /* The first drain a whole period after the start: a process that ends sooner wakes its
     * sampler only to stop it. */
    uint64_t next = rt_now_ns() + RT_DRAIN_NS;
    unsigned idle_wakes = 0, skipped = 0;

    (void)arg;
    (void)prctl(PR_SET_NAME, "fleetprof-sampl", 0, 0, 0);
    last_memory_ns = 0;
    others_known = false;
    memset(counter_row_ns, 0, sizeof(counter_row_ns));
    counters_prev_ns = 0;
    while (!atomic_load(&rt.stop_sampler)) {
        struct prof_overhead o;
        struct timespec ts;
        uint64_t tk, t0, t1, t2, t3;
        int sig;

        if (tick_threads) {
            skipped = ticks_to_skip(idle_wakes);
            next = rt_sampler_next_tick(next, rt_now_ns(), rt.cfg.interval_ns, skipped, &skipped);
        } else {
            /* Every thread has its own timer: wake to drain their rings (or when a ring is
             * half full, or to stop), on a grid every process shares. */
            uint64_t period =
                    idle_wakes >= 2 && atomic_load(&rt.running) ? RT_IDLE_DRAIN_NS : RT_DRAIN_NS;

            next = rt_sampler_next_tick(next, rt_now_ns(), period, 0, &skipped);
        }
        ts.tv_sec = (time_t)(next / 1000000000u);
        ts.tv_nsec = (long)(next % 1000000000u);
        rt_wake_sleep_until(&ts);
        if (atomic_load(&rt.stop_sampler))
            break;
        /* A forked child's deferred start (runtime.c): nothing to sample before it, nor
         * while an exec has it cancelled (the exec ends this thread, or fails and puts the
         * start back). */
        if (!atomic_load_explicit(&rt.running, memory_order_acquire)) {
            if (atomic_load(&rt.fork_start) == RT_FORK_START_NONE ||
                !hooks.fork_start_due(rt_now_ns()))
                continue;
            if (!hooks.start_if_pending() || atomic_load(&rt.stop_sampler))
                break;
        }
        sig = atomic_exchange(&rt.exit_signal, 0);
        if (sig) {
            hooks.exit_signal(sig); /* does not return */
            break;
        }

        /* The daemon connection first: a Welcome read here (a light connection's, ipc.c)
         * lets this drain write the CPU before the start ahead of the thread's captures. */
        tk = rt_now_ns();
        hooks.tick();
        t0 = rt_now_ns();
        (void)pthread_mutex_lock(&rt.registry_lock);
        t1 = rt_now_ns();
        if (sample_threads(t1, skipped))
            idle_wakes = 0;
        else
            idle_wakes++;
        (void)pthread_mutex_unlock(&rt.registry_lock);
        t2 = rt_now_ns();
        sample_counters(t2, true);
        if (handler_ns_written >= RT_WARM_AFTER_NS && rt_stackwalk_warm_process())
            rt_debug("warming libunwind after %llu captures (%.3f ms in the handler)",
                     (unsigned long long)captures_written, (double)handler_ns_written / 1e6);
        rt_region_tick(t2);
        rt_process_title_tick(t2);
        (void)buf_chunked_buffer_prepare_next(rt.buffer);
        rt_updates_tick();
        t3 = rt_now_ns();
        o = (struct prof_overhead){t0, t1 - t0, 0, t3 - t2 + (t0 - tk), t2 - t1};
        (void)prof_entry_put_overhead(rt.buffer, &o);
    }
    rt_sampler_release_statm(); /* closed only if the number is still ours */
    return NULL;
}

/* Two program threads may stop the sampler at once (one gives the program its threads at the
 * process limit, another exits): one joins it, the other waits for that. */
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;

void rt_sampler_forget_after_fork(void)
{
    (void)pthread_mutex_init(&stop_lock, NULL); /* another thread may have held it */
    /* The parent's statm stays open in a forked child, and reads the parent's memory. */
    if (statm_fd >= 0)
        (void)close(statm_fd);
    statm_fd = -1;
}

int rt_sampler_start(const struct rt_sampler_hooks *h)
{
    int r;

    hooks = *h;
    loss_handled = false;
    atomic_store(&rt.stop_sampler, 0);
    rt_wake_reset();
    /* Opened and protected before the thread runs, like the IPC descriptors. */
    (void)open_statm();
    r = rt_create_internal_thread(&rt.sampler, sampler_main, NULL);
    if (r < 0)
        return r;
    rt.sampler_started = true;
    return 0;
}

void rt_sampler_stop(void)
{
    bool self = pthread_equal(pthread_self(), rt.sampler);

    if (!self)
        (void)pthread_mutex_lock(&stop_lock);
    if (!rt.sampler_started) {
        if (!self)
            (void)pthread_mutex_unlock(&stop_lock);
        return;
    }
    atomic_store(&rt.stop_sampler, 1);
    rt_sampler_wake();
    if (!self)
        (void)pthread_join(rt.sampler, NULL);
    rt_cpu_timer_disarm_all(); /* no sample from here on */
    rt.sampler_started = false;
    harvest_last_captures();
    /* The counters' last deltas (a performance group charged since the last tick), so that
     * the exit profile's counter tracks add up to the totals it carries. The sampler is gone:
     * its state is ours now. Not the memory counter: the sampler closed /proc/self/statm as
     * it ended, and reading it would open it again. */
    sample_counters(rt_now_ns(), false);
    if (!self)
        (void)pthread_mutex_unlock(&stop_lock);
}
