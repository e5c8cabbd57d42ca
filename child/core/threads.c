/* child/core/threads.c - the registry of sampled threads.
 *
 * An entry lives from registration until its slot is reused: dead threads stay for the
 * profile's thread list (names, unregister times). A thread finds its entry through
 * initial-exec TLS (rt_self), readable in its signal handler; rt_self is cleared before
 * the entry is marked dead, so a late signal finds nothing to write to.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "child/core/core.h"

/* The runtime's shared state (core.h): defined in the core, which every layer reads. */
struct rt rt = {
        .registry_lock = PTHREAD_MUTEX_INITIALIZER,
        .write_lock = PTHREAD_MUTEX_INITIALIZER,
};

__thread struct rt_thread *rt_self __attribute__((tls_model("initial-exec")));
__thread int rt_in_loader __attribute__((tls_model("initial-exec")));
__thread int rt_in_handler __attribute__((tls_model("initial-exec")));
__thread int rt_walk_masked __attribute__((tls_model("initial-exec")));

static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void on_thread_exit(void *value)
{
    (void)value;
    rt_threads_unregister();
}

static void make_exit_key(void)
{
    (void)pthread_key_create(&exit_key, on_thread_exit);
}

/* The kernel's name of a thread of ours (what pthread_setname_np set), or "". */
static void read_comm(int32_t tid, char *out, size_t size)
{
    char path[64];
    ssize_t n;
    int fd;

    out[0] = '\0';
    (void)snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    n = read(fd, out, size - 1);
    (void)close(fd);
    if (n <= 0)
        return;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

static uint64_t thread_cpu_ns(clockid_t clock)
{
    struct timespec ts;

    if (clock_gettime(clock, &ts) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Where the kernel put the initial stack's arguments (glibc, GLIBC_2.1): the main thread's
 * frames all lie below it. */
extern void *__libc_stack_end;

/* The calling thread's stack, [*ret_lo, *ret_hi). For the process's initial thread,
 * pthread_getattr_np() reads the whole of /proc/self/maps to find the stack mapping (a
 * tenth of a millisecond in a small process, paid again by every forked child); its top is
 * the end of the page holding __libc_stack_end (argv, envp and auxv lie above the frames,
 * up to the mapping's end), and the stack limit bounds it below, as glibc does. Other
 * threads' bounds come from their descriptor. Leaves both 0 when unknown. */
static void stack_bounds(bool initial_thread, uintptr_t *ret_lo, uintptr_t *ret_hi)
{
    pthread_attr_t attr;
    void *stack_addr;
    size_t stack_size;

    if (initial_thread && __libc_stack_end) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t hi = ((uintptr_t)__libc_stack_end | (page - 1)) + 1;
        uintptr_t size = 8u << 20;
        struct rlimit rl;

        if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            rl.rlim_cur >= page)
            size = (uintptr_t)rl.rlim_cur;
        *ret_hi = hi;
        *ret_lo = size < hi ? hi - size : 0;
        return;
    }
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        if (pthread_attr_getstack(&attr, &stack_addr, &stack_size) == 0) {
            *ret_lo = (uintptr_t)stack_addr;
            *ret_hi = (uintptr_t)stack_addr + stack_size;
        }
        (void)pthread_attr_destroy(&attr);
    }
}

/* The alternate signal stack we gave the calling thread (NULL: none of ours). Thread-local
 * and initial-exec: a forked child's thread keeps its parent thread's, which its kernel
 * state still points at. */
static __thread void *our_altstack __attribute__((tls_model("initial-exec")));

/* Room for the sampling handler (libunwind's walk) where the program's own stack may be at
 * its limit; a guard page below. */
#define RT_ALTSTACK_BYTES (64 * 1024)

/* Gives the calling thread an alternate signal stack of ours, unless it has one (the
 * program's, or ours from before a fork). Our handlers run there (SA_ONSTACK). */
static void altstack_install(void)
{
    stack_t cur, ss;
    void *p;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    if (sigaltstack(NULL, &cur) < 0 || !(cur.ss_flags & SS_DISABLE))
        return;
    p = mmap(NULL, RT_ALTSTACK_BYTES + page, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED)
        return;
    (void)mprotect(p, page, PROT_NONE);
    ss.ss_sp = (char *)p + page;
    ss.ss_size = RT_ALTSTACK_BYTES;
    ss.ss_flags = 0;
    if (sigaltstack(&ss, NULL) < 0) {
        (void)munmap(p, RT_ALTSTACK_BYTES + page);
        return;
    }
    our_altstack = ss.ss_sp;
}

/* At the calling thread's end: ours goes (if the program replaced it, only the memory). */
static void altstack_remove(void)
{
    stack_t cur, off = {.ss_flags = SS_DISABLE};
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    if (!our_altstack)
        return;
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == our_altstack) {
        if (cur.ss_flags & SS_ONSTACK)
            return; /* unregistering from a handler running on it: leave it */
        (void)sigaltstack(&off, NULL);
    }
    (void)munmap((char *)our_altstack - page, RT_ALTSTACK_BYTES + page);
    our_altstack = NULL;
}

bool rt_threads_altstack_is_ours(const void *sp)
{
    return sp && sp == our_altstack;
}

static void free_thread(struct rt_thread *t)
{
    free(t->capture.stack_copy);
    for (size_t i = 0; i < RT_CAPTURE_RING; i++)
        free(t->ring[i].stack_copy);
    free(t);
}

/* Finds a slot: a free one, else the dead thread that ended first. Registry lock held. */
static int take_slot(size_t *ret_index)
{
    size_t oldest = SIZE_MAX;

    if (rt.thread_count < RT_MAX_THREADS) {
        *ret_index = rt.thread_count++;
        return 0;
    }
    for (size_t i = 0; i < rt.thread_count; i++) {
        const struct rt_thread *t = rt.threads[i];

        /* A dead thread with a capture in flight keeps its slot until harvested. */
        if (!t->live && atomic_load(&t->capture.state) != RT_CAPTURE_FULL &&
            (oldest == SIZE_MAX || t->unregister_ns < rt.threads[oldest]->unregister_ns))
            oldest = i;
    }
    if (oldest == SIZE_MAX)
        return -EAGAIN;
    free_thread(rt.threads[oldest]);
    rt.threads[oldest] = NULL;
    *ret_index = oldest;
    return 0;
}

static _Atomic uint64_t threads_generation = 1;

uint64_t rt_threads_generation(void)
{
    return atomic_load_explicit(&threads_generation, memory_order_relaxed);
}

int rt_threads_register(const char *name, bool is_main)
{
    struct rt_thread *t;
    size_t index;
    int r;

    if (rt_self) {
        /* Sampled again after a shutdown stopped its timer. */
        if (atomic_load(&rt_self->timer_kind) == RT_TIMER_NONE && !rt_self->no_timer)
            (void)rt_cpu_timer_arm(rt_self, RT_CPU_NOW);
        /* Registered already (the pthread_create interposer registers every thread): the
         * program's name for it is what the profile shows. */
        if (name && *name) {
            (void)pthread_mutex_lock(&rt.registry_lock);
            (void)snprintf(rt_self->name, sizeof(rt_self->name), "%s", name);
            rt_self->named = true;
            (void)pthread_mutex_unlock(&rt.registry_lock);
            atomic_fetch_add_explicit(&threads_generation, 1, memory_order_relaxed);
        }
        return 0;
    }
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    if (rt.cfg.stackwalk == RT_STACKWALK_COPY) {
        bool ok = (t->capture.stack_copy = malloc(RT_STACK_COPY_BYTES)) != NULL;

        for (size_t i = 0; i < RT_CAPTURE_RING && ok; i++)
            ok = (t->ring[i].stack_copy = malloc(RT_STACK_COPY_BYTES)) != NULL;
        if (!ok) {
            free_thread(t);
            return -ENOMEM;
        }
    }
    atomic_init(&t->timer_kind, RT_TIMER_NONE);
    t->timer_fd = t->timer_id = -1;
    t->tid = (int32_t)gettid();
    t->is_main = is_main;
    r = pthread_getcpuclockid(pthread_self(), &t->cpu_clock);
    if (r != 0) {
        free_thread(t);
        return -r;
    }
    stack_bounds(t->tid == (int32_t)getpid(), &t->stack_lo, &t->stack_hi);
    if (name && *name) {
        (void)snprintf(t->name, sizeof(t->name), "%s", name);
        t->named = true;
    } else {
        read_comm(t->tid, t->name, sizeof(t->name));
    }
    t->register_ns = rt_now_ns();
    t->probe_cpu_ns = UINT64_MAX;
    atomic_init(&t->capture.state, RT_CAPTURE_EMPTY);
    rt_stackwalk_warm_thread();
    /* After the warm-up: its CPU is ours, and counted as the thread's it made the first
     * tick signal every new thread, even one that blocked at once. */
    t->last_cpu_ns = thread_cpu_ns(t->cpu_clock);

    (void)pthread_mutex_lock(&rt.registry_lock);
    r = take_slot(&index);
    if (r == 0) {
        rt.threads[index] = t;
        t->live = true;
    }
    (void)pthread_mutex_unlock(&rt.registry_lock);
    if (r < 0) {
        free_thread(t);
        return r;
    }
    rt_self = t;
    altstack_install();
    /* Last: its first signal finds the thread registered. A thread born with the signal
     * blocked (its creator's mask) has its timer stopped until it unblocks it. */
    (void)rt_cpu_timer_arm(t, t->last_cpu_ns);
    {
        sigset_t cur;

        if (pthread_sigmask(SIG_BLOCK, NULL, &cur) == 0 && sigismember(&cur, RT_SAMPLE_SIGNAL) == 1)
            rt_cpu_timer_pause(t, true);
    }
    atomic_fetch_add_explicit(&threads_generation, 1, memory_order_relaxed);
    (void)pthread_once(&exit_key_once, make_exit_key);
    (void)pthread_setspecific(exit_key, t); /* runs on_thread_exit when the thread ends */
    return 0;
}

void rt_threads_unregister(void)
{
    struct rt_thread *t = rt_self;

    if (!t)
        return;
    /* The timer first: no signal of ours comes after this. Then the CPU the thread used,
     * while its clock still reads: its last samples' weights come to it. */
    rt_cpu_timer_disarm(t);
    t->final_cpu_ns = thread_cpu_ns(t->cpu_clock);
    rt_self = NULL;
    atomic_signal_fence(memory_order_seq_cst); /* the handler now sees NULL */
    altstack_remove();
    (void)pthread_mutex_lock(&rt.registry_lock);
    t->live = false;
    t->unregister_ns = rt_now_ns();
    if (!t->named) /* the name it ends with, as the program may have renamed it */
        read_comm(t->tid, t->name, sizeof(t->name));
    (void)pthread_mutex_unlock(&rt.registry_lock);
    atomic_fetch_add_explicit(&threads_generation, 1, memory_order_relaxed);
    (void)pthread_setspecific(exit_key, NULL);
}

int rt_threads_snapshot(struct prof_thread_info **ret_threads, size_t *ret_count)
{
    struct prof_thread_info *out;
    size_t n = 0;

    (void)pthread_mutex_lock(&rt.registry_lock);
    out = calloc(rt.thread_count ? rt.thread_count : 1, sizeof(*out));
    if (!out) {
        (void)pthread_mutex_unlock(&rt.registry_lock);
        return -ENOMEM;
    }
    for (size_t i = 0; i < rt.thread_count; i++) {
        struct rt_thread *t = rt.threads[i];
        char comm[RT_THREAD_NAME];

        if (!t)
            continue;
        if (t->live && !t->named) { /* the program may have renamed it since */
            read_comm(t->tid, comm, sizeof(comm));
            if (comm[0])
                memcpy(t->name, comm, sizeof(comm));
        }
        out[n].tid = t->tid;
        out[n].name = strdup(t->name[0] ? t->name : "thread");
        out[n].register_ns = t->register_ns;
        out[n].unregister_ns = t->live ? 0 : t->unregister_ns;
        out[n].is_main = t->is_main;
        if (!out[n].name) {
            (void)pthread_mutex_unlock(&rt.registry_lock);
            rt_threads_snapshot_free(out, n);
            return -ENOMEM;
        }
        n++;
    }
    (void)pthread_mutex_unlock(&rt.registry_lock);
    *ret_threads = out;
    *ret_count = n;
    return 0;
}

void rt_threads_snapshot_free(struct prof_thread_info *threads, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free((char *)threads[i].name);
    free(threads);
}

void rt_threads_forget_all(void)
{
    /* After fork only the calling thread exists; the lock may have been held by a thread
     * that is gone, so it is re-created rather than taken. */
    (void)pthread_mutex_init(&rt.registry_lock, NULL);
    for (size_t i = 0; i < rt.thread_count; i++) {
        if (rt.threads[i]) {
            rt_cpu_timer_forget_after_fork(rt.threads[i]);
            free_thread(rt.threads[i]);
        }
        rt.threads[i] = NULL;
    }
    rt_cpu_timer_after_fork();
    atomic_store(&rt.captures_dropped, 0);
    rt.thread_count = 0;
    rt_self = NULL;
}
