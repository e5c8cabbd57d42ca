/* child/core/stackwalk.c - capturing stacks: in the signal handler (fp, dwarf) or from a stack
 * copy unwound later on the sampler thread (copy).
 *
 * Frames are stored innermost first: frames[0] is the interrupted instruction, the others
 * are return addresses (the symbolizer looks those up at address - 1).
 *
 * dwarf: libunwind's unw_backtrace in the handler (~350 ns at depth 30 here), which walks
 * through the handler's own frames and the signal trampoline; the interrupted frame is
 * found by its exact IP. libunwind's lookups go through dl_iterate_phdr and the loader's
 * data, so a thread interrupted inside the loader (rt_in_loader, set by our dlopen,
 * dlclose and dl_iterate_phdr wrappers) gets a frame-pointer walk instead: unwinding there
 * could deadlock or read a half-updated link map.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "child/core/core.h"
#include "common/map.h"

static enum rt_stackwalk walk_mode;
static _Atomic bool libunwind_stopped;

void rt_stackwalk_stop_libunwind(void)
{
    atomic_store(&libunwind_stopped, true);
}

size_t rt_stackwalk_release_libunwind(void)
{
    /* A walk re-reads the flag inside the gate (seq_cst both ways): either it sees the
     * flag, or this sees it inside. */
    atomic_store(&libunwind_stopped, true);
    if (!rt_loader_gate_wait_empty())
        return 0;
    return rt_fds_release_kept();
}

bool rt_stackwalk_libunwind_stopped(void)
{
    return atomic_load(&libunwind_stopped);
}
static _Atomic uint64_t unsafe_samples; /* dwarf samples downgraded inside the loader */

uint64_t rt_stackwalk_unsafe_samples(void)
{
    return atomic_load(&unsafe_samples);
}

int rt_stackwalk_init(enum rt_stackwalk mode)
{
    walk_mode = mode;
    /* Per-thread caches: no lock shared between a signal handler and other threads. Also
     * in fp mode (labels and marker stacks use libunwind): its set-up happens here, where
     * the runtime records the pipe it makes (rt_fds_capture), not later on some thread. */
    (void)unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    if (mode == RT_STACKWALK_FP)
        return 0;
    if (mode == RT_STACKWALK_COPY)
        return rt_stackwalk_copy_init();
    return 0;
}

/* This thread has run unw_backtrace. TLS, so a forked child inherits it with the forking
 * thread's libunwind caches (its address space is the parent's, the caches stay right). */
static __thread bool warmed __attribute__((tls_model("initial-exec")));
/* The process's first warm-up ran, and the other threads may make their caches in their
 * first sample's handler (see below); inherited by a forked child, like libunwind's state. */
static _Atomic bool process_warmed;
static _Atomic bool lazy_threads;

/* Whether libunwind's per-thread key is one glibc's pthread_setspecific() stores without
 * allocating (the first PTHREAD_KEY_2NDLEVEL_SIZE keys): a key made right after it is
 * numbered above it, keys being handed out lowest free first. */
static bool libunwind_key_is_static(void)
{
    pthread_key_t probe;
    bool low;

    if (pthread_key_create(&probe, NULL) != 0)
        return false;
    low = probe < 32;
    (void)pthread_key_delete(probe);
    return low;
}

/* libunwind's first backtrace on a thread makes its trace cache (256 KiB, 0.2-0.4 ms and
 * here 64 page faults). The process's first one, outside any handler, also runs libunwind's
 * one-time set-up (a pthread_once and its key), on which a handler that interrupted it
 * would deadlock. So until the process is warmed, handlers walk with unw_init_local2() and
 * unw_step() (step_walk(): no trace cache, no once; a few µs a sample instead of ~0.4), and
 * the process is warmed by the sampler thread, on itself, once its handlers have spent
 * RT_WARM_AFTER_NS walking, what the warm-up costs: a short-lived process pays for its
 * samples, not for a cache it would not use. After that the other threads' caches are made by their
 * first sample's handler: a thread that is never sampled (an idle pool: 64 threads cost 18 MiB and
 * 160 ms of CPU) pays nothing. That is safe as long as the cache's set-up in the handler takes
 * nothing a signal could find held: libunwind blocks signals around its own pool's lock and maps
 * its memory with mmap; only pthread_setspecific() could allocate, for a key above glibc's static
 * ones, in which case each thread registered from then on is warmed as it registers, and the
 * threads registered before keep walking step by step. */
static void warm_this_thread(void)
{
    void *frames[64];

    rt_loader_gate_enter();
    (void)unw_backtrace(frames, 64);
    rt_loader_gate_leave();
    warmed = true;
}

void rt_stackwalk_warm_thread(void)
{
    if (walk_mode != RT_STACKWALK_DWARF || warmed || atomic_load(&libunwind_stopped) ||
        !atomic_load(&process_warmed) || atomic_load(&lazy_threads))
        return;
    warm_this_thread();
}

static void warm_done(void)
{
    atomic_store(&lazy_threads, libunwind_key_is_static());
    atomic_store(&process_warmed, true);
}

static void *warm_main(void *arg)
{
    (void)arg;
    warm_this_thread();
    warm_done();
    return NULL;
}

/* The warming thread's stack: unw_backtrace() with libunwind's per-thread caches in static
 * TLS, which glibc puts at the top of it. */
#define WARM_STACK_BYTES (256 * 1024)

/* Sampler-owned: the warming thread, while it has not been joined. */
static bool warm_started, warm_running;
static pthread_t warm_thread;
static void *warm_stack;

bool rt_stackwalk_warm_process(void)
{
    if (warm_running) {
        /* Joined at a later drain, never waited for: on a busy machine the new thread may
         * wait long for a CPU, and the sampler would leave every ring to fill meanwhile. */
        if (pthread_tryjoin_np(warm_thread, NULL) == 0) {
            (void)munmap(warm_stack, WARM_STACK_BYTES);
            warm_running = false;
        }
        return false;
    }
    if (walk_mode != RT_STACKWALK_DWARF || warm_started || atomic_load(&process_warmed) ||
        atomic_load(&libunwind_stopped))
        return false;
    warm_started = true;
    /* On a thread of its own, on a stack of ours unmapped after the join: libunwind frees
     * that thread's trace cache as it ends, so the sampler keeps no 256 KiB cache it never
     * uses (a program under `ulimit -v` gets that memory). A fork meanwhile waits for it
     * to leave the loader gate, so a child never inherits libunwind's once half done. */
    warm_stack = mmap(NULL, WARM_STACK_BYTES, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (warm_stack != MAP_FAILED &&
        rt_create_internal_thread_on(&warm_thread, warm_main, NULL, warm_stack, WARM_STACK_BYTES) ==
                0) {
        warm_running = true;
        return true;
    }
    if (warm_stack != MAP_FAILED)
        (void)munmap(warm_stack, WARM_STACK_BYTES);
    warm_this_thread();
    warm_done();
    return true;
}

void rt_stackwalk_forget_after_fork(void)
{
    /* The warming thread is the parent's: its stack here is a copy, and this child warms
     * itself if the parent had not finished. */
    if (warm_running)
        (void)munmap(warm_stack, WARM_STACK_BYTES);
    warm_running = false;
    warm_started = false;
}

/* The handler's libunwind walk, with every signal blocked but glibc's two internal ones (as
 * libunwind blocks them): libunwind blocks and restores them around each of its lookups
 * itself, two system calls a frame (~30 a sample of a short-lived process, whose frames all
 * miss its caches); blocked once for the whole walk, they cost two, and preload.c's
 * sigprocmask() leaves libunwind's own calls undone meanwhile (rt_walk_masked). Only for
 * step_walk(): a warm unw_backtrace() finds its frames in its trace cache, and masks only
 * on a miss. */
static void walk_mask_begin(sigset_t *old)
{
    sigset_t all;

    (void)sigfillset(&all);
    if (rt_sigmask_raw(SIG_SETMASK, &all, old) == 0)
        rt_walk_masked = 1;
}

static void walk_mask_end(const sigset_t *old)
{
    if (!rt_walk_masked)
        return;
    rt_walk_masked = 0;
    (void)rt_sigmask_raw(SIG_SETMASK, old, NULL);
}

/* A dwarf walk from the interrupted context without unw_backtrace's trace cache. */
static int step_walk(uint64_t *frames, int max, void *ucontext)
{
    unw_cursor_t cursor;
    unw_word_t ip;
    int n = 0;

    if (unw_init_local2(&cursor, (unw_context_t *)ucontext, UNW_INIT_SIGNAL_FRAME) < 0)
        return 0;
    do {
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0)
            break;
        frames[n++] = ip;
    } while (n < max && unw_step(&cursor) > 0);
    return n;
}

void rt_stackwalk_capture(struct rt_capture *c, const struct rt_thread *t, void *ucontext)
{
    const ucontext_t *uc = ucontext;
    const greg_t *g = uc->uc_mcontext.gregs;
    uint64_t ip = (uint64_t)g[REG_RIP], sp = (uint64_t)g[REG_RSP], bp = (uint64_t)g[REG_RBP];
    sigset_t old_mask;
    int n;

    c->flags = 0;
    c->frame_count = 0;
    switch (walk_mode) {
    case RT_STACKWALK_COPY:
        c->regs = (struct rt_regs){ip,
                                   sp,
                                   bp,
                                   (uint64_t)g[REG_RBX],
                                   (uint64_t)g[REG_R12],
                                   (uint64_t)g[REG_R13],
                                   (uint64_t)g[REG_R14],
                                   (uint64_t)g[REG_R15]};
        c->stack_copy_len = 0;
        if (c->stack_copy && sp >= t->stack_lo && sp < t->stack_hi) {
            size_t len = t->stack_hi - sp;

            if (len > RT_STACK_COPY_BYTES)
                len = RT_STACK_COPY_BYTES;
            memcpy(c->stack_copy, (const void *)(uintptr_t)sp, len);
            c->stack_copy_len = len;
        }
        return;
    case RT_STACKWALK_DWARF:
        if (atomic_load_explicit(&libunwind_stopped, memory_order_relaxed))
            break; /* a frame-pointer walk, as in fp mode */
        if (rt_in_loader > 0) {
            atomic_fetch_add_explicit(&unsafe_samples, 1, memory_order_relaxed);
            c->flags |= PROF_SAMPLE_NO_NATIVE;
            break;
        }
        if (!rt_loader_gate_try_enter())
            break; /* another thread is forking: a frame-pointer walk, as in fp mode */
        if (atomic_load(&libunwind_stopped)) { /* its pipe may be closed now */
            rt_loader_gate_leave();
            break;
        }
        if (!warmed && !atomic_load_explicit(&lazy_threads, memory_order_relaxed)) {
            walk_mask_begin(&old_mask);
            n = step_walk(c->frames, PROF_MAX_FRAMES, ucontext);
            walk_mask_end(&old_mask);
            rt_loader_gate_leave();
            if (n > 0 && c->frames[0] == ip) {
                c->frame_count = (uint32_t)n;
                if (n == PROF_MAX_FRAMES)
                    c->flags |= PROF_SAMPLE_TRUNCATED;
                return;
            }
            c->flags |= PROF_SAMPLE_UNWIND_FAIL;
            break;
        }
        n = unw_backtrace((void **)c->frames, PROF_MAX_FRAMES);
        rt_loader_gate_leave();
        for (int i = 0; i < n; i++) {
            if (c->frames[i] == ip) {
                memmove(c->frames, c->frames + i, (size_t)(n - i) * sizeof(c->frames[0]));
                c->frame_count = (uint32_t)(n - i);
                if (n == PROF_MAX_FRAMES)
                    c->flags |= PROF_SAMPLE_TRUNCATED;
                return;
            }
        }
        c->flags |= PROF_SAMPLE_UNWIND_FAIL;
        break;
    case RT_STACKWALK_FP:
    default:
        break;
    }
    c->frame_count =
            rt_fp_walk(c->frames, PROF_MAX_FRAMES, ip, sp, bp, t->stack_lo, t->stack_hi, NULL, 0);
}

uint32_t rt_stackwalk_crash(uint64_t *frames, uint32_t max, const struct rt_thread *t,
                            void *ucontext)
{
    const greg_t *g = ((const ucontext_t *)ucontext)->uc_mcontext.gregs;
    uint64_t ip = (uint64_t)g[REG_RIP];

    /* As the sampling handler walks (dwarf through the signal frame where it may), since
     * most code has no frame pointers; a frame-pointer walk otherwise. */
    if (walk_mode == RT_STACKWALK_DWARF &&
        !atomic_load_explicit(&libunwind_stopped, memory_order_relaxed) && rt_in_loader == 0 &&
        rt_loader_gate_try_enter()) {
        int n = 0;

        if (atomic_load(&libunwind_stopped))
            n = 0;
        else if (!warmed && !atomic_load(&lazy_threads))
            n = step_walk(frames, (int)max, ucontext);
        else
            n = unw_backtrace((void **)frames, (int)max);
        rt_loader_gate_leave();

        for (int i = 0; i < n; i++) {
            if (frames[i] == ip) {
                memmove(frames, frames + i, (size_t)(n - i) * sizeof(frames[0]));
                return (uint32_t)(n - i);
            }
        }
    }
    return rt_fp_walk(frames, max, ip, (uint64_t)g[REG_RSP], (uint64_t)g[REG_RBP],
                      t ? t->stack_lo : 0, t ? t->stack_hi : 0, NULL, 0);
}

/* A small direct-mapped cache: labels are pushed from few call sites. */
#define PROC_CACHE_SIZE 256
static struct {
    uint64_t pc, start, end;
} proc_cache[PROC_CACHE_SIZE];

int rt_proc_range(uint64_t pc, uint64_t *ret_start, uint64_t *ret_end)
{
    size_t slot = (size_t)(fleetprof_map_mix64(pc) % PROC_CACHE_SIZE);
    unw_proc_info_t pi;
    int r;

    if (proc_cache[slot].pc == pc && pc != 0) {
        *ret_start = proc_cache[slot].start;
        *ret_end = proc_cache[slot].end;
        return 0;
    }
    memset(&pi, 0, sizeof(pi));
    rt_loader_gate_enter();
    r = unw_get_proc_info_by_ip(unw_local_addr_space, (unw_word_t)pc, &pi, NULL);
    rt_loader_gate_leave();
    if (r < 0 || pi.start_ip >= pi.end_ip)
        return -ENOENT;
    proc_cache[slot].pc = pc;
    proc_cache[slot].start = pi.start_ip;
    proc_cache[slot].end = pi.end_ip;
    *ret_start = pi.start_ip;
    *ret_end = pi.end_ip;
    return 0;
}

uint32_t rt_stackwalk_self(uint64_t *frames, uint32_t max)
{
    /* Skip this function's frame: the marker API's caller is what matters. */
    void *buf[PROF_MAX_FRAMES + 2];
    int n;
    uint32_t out = 0;

    if (atomic_load(&libunwind_stopped)) {
        const uint64_t *fp = __builtin_frame_address(0);
        uint64_t walked[PROF_MAX_FRAMES];
        uint32_t count;

        if (!rt_self || max == 0)
            return 0;
        /* From the API function's return address into its caller, as below. */
        count = rt_fp_walk(walked, max + 1 < PROF_MAX_FRAMES ? max + 1 : PROF_MAX_FRAMES, fp[1],
                           (uint64_t)(uintptr_t)fp, fp[0], rt_self->stack_lo, rt_self->stack_hi,
                           NULL, 0);
        for (uint32_t i = 1; i < count && out < max; i++)
            frames[out++] = walked[i];
        return out;
    }
    rt_loader_gate_enter();
    n = atomic_load(&libunwind_stopped)
                ? 0
                : unw_backtrace(buf, (int)(max + 2 < PROF_MAX_FRAMES + 2 ? max + 2
                                                                         : PROF_MAX_FRAMES + 2));
    rt_loader_gate_leave();

    for (int i = 2; i < n && out < max; i++)
        frames[out++] = (uint64_t)(uintptr_t)buf[i];
    return out;
}
