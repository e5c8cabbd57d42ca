/* child/core/ipc-load.c - loading libfleetprof-ipc.so (child/core/ipc-module.h) on first need, and
 * the table of the core's functions it is given.
 *
 * Part of the core: region.c asks for the module to pack its first description, the daemon
 * client (client.c) to connect. Loaded at most once per process image (a forked child
 * inherits it, or the failure), never unloaded, never from a signal handler. The dlopen()
 * goes through our own wrapper (preload.c): the loading thread is marked as inside the
 * loader meanwhile and the loader's generation moves, as for any library the program
 * loads. The load opens no descriptor that outlives it (the loader closes the files it
 * maps; libuv and protobuf-c make none until the IPC thread's loop does, under capture).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "buffer/chunked-buffer.h"
#include "child/core/core.h"
#include "child/core/ipc-module.h"
#include "json/writer.h"

void *rt_dlopen_beside(const char *name, char *error, size_t size)
{
    static const char anchor = 0; /* any object of libfleetprof.so: its path */
    char path[PATH_MAX];
    const char *slash, *e;
    Dl_info info;
    void *handle;

    error[0] = '\0';
    /* Next to libfleetprof.so (its own path as the loader opened it: LD_PRELOAD, the build
     * tree, an install): the pair always comes from one build. */
    if (dladdr((const void *)&anchor, &info) && info.dli_fname &&
        (slash = strrchr(info.dli_fname, '/')) &&
        snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                 name) < (int)sizeof(path)) {
        handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (handle)
            return handle;
        e = dlerror();
        (void)snprintf(error, size, "%.150s", e ? e : name);
    }
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle && !error[0]) {
        e = dlerror();
        (void)snprintf(error, size, "%.150s", e ? e : name);
    }
    return handle;
}

static void hello_info(struct rt_hello_info *ret)
{
    struct rt_cpu_timer_report timers;

    ret->name = rt_program_name();
    ret->start_ns = rt.start_ns;
    ret->start_epoch_ms = atomic_load(&rt.start_epoch_ms);
    ret->slow_event_ns = rt.cfg.slow_event_ns;
    rt_cpu_timer_report(&timers);
    ret->sampling_timer = timers.engine;
    ret->sampling_timer_why = timers.why;
}

static void apply_welcome(const struct rt_welcome *w)
{
    int pending = RT_BEFORE_START_PENDING;

    /* The start's CPU before the start can be charged now (sampler.c). */
    atomic_store(&rt.before_start_accounted_ns, w->exec_cpu_accounted_ns);
    (void)atomic_compare_exchange_strong(&rt.before_start, &pending, RT_BEFORE_START_KNOWN);
    if (w->interval_ns >= 50000 && w->interval_ns <= 1000000000)
        rt.cfg.interval_ns = w->interval_ns; /* the sampler reads it every tick */
    /* The daemon's per-process limit, unless the process was given a smaller one of its own
     * (FLEETPROF_BUFFER_MB): a user who asks one process to keep less gets less. */
    if (w->process_limit_bytes && rt.buffer &&
        !(rt.cfg.buffer_set && rt.cfg.buffer_bytes < w->process_limit_bytes))
        (void)buf_chunked_buffer_set_limit(rt.buffer, w->process_limit_bytes);
    if (w->clock_epoch_ms) {
        /* One time origin for the fleet: this process's wall-clock start as the daemon's
         * clock sees it, so every process lines up in the merged profile. */
        int64_t delta_ns = (int64_t)(rt.start_ns - w->clock_monotonic_ns);

        rt.start_epoch_ms = (double)w->clock_epoch_ms + (double)delta_ns / 1e6;
    }
}

static const struct rt_ipc_core core = {
        .abi = RT_IPC_MODULE_ABI,
        .size = sizeof(struct rt_ipc_core),
        .debug = rt_debug,
        .warn = rt_warn,
        .now_ns = rt_now_ns,
        .fd_intact = rt_fd_intact,
        .fd_protect = rt_fd_protect,
        .fd_unprotect = rt_fd_unprotect,
        .fd_release = rt_fd_release,
        .fd_relocate = rt_fd_relocate,
        .fds_capture = rt_fds_capture,
        .create_internal_thread = rt_create_internal_thread,
        .thread_cancel_only_in_poll = rt_thread_cancel_only_in_poll,
        .groups_generation = rt_groups_generation,
        .groups_snapshot = rt_groups_snapshot,
        .region_fd = rt_region_fd,
        .hello_info = hello_info,
        .apply_welcome = apply_welcome,
        .updates_start = rt_updates_start,
        .updates_stop = rt_updates_stop,
        .updates_use_region = rt_updates_use_region,
        .updates_destroy = rt_updates_destroy,
        .updates_peek = rt_updates_peek,
        .updates_take = rt_updates_take,
        .updates_put_back = rt_updates_put_back,
        .json_new_memory = json_writer_new_memory,
        .json_each_chunk = json_writer_each_chunk,
        .json_free = json_writer_free,
};

/* The module once loaded; tried marks an attempt (a failure is not retried: a process
 * that cannot load it runs on without it, and a forked child inherits both). Set under
 * load_lock, read without it. */
static _Atomic(const struct rt_ipc_module *) module;
static _Atomic bool tried;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct rt_ipc_module *load(void)
{
    const struct rt_ipc_module *(*entry)(void);
    const struct rt_ipc_module *m;
    char error[200];
    void *handle;

    handle = rt_dlopen_beside(RT_IPC_MODULE_NAME, error, sizeof(error));
    if (!handle) {
        rt_debug("cannot load %s (%s): no daemon connection, no chunk region description",
                 RT_IPC_MODULE_NAME, error);
        return NULL;
    }
    *(void **)&entry = dlsym(handle, RT_IPC_MODULE_ENTRY);
    m = entry ? entry() : NULL;
    if (!m || m->abi != RT_IPC_MODULE_ABI || m->core_size != sizeof(struct rt_ipc_core) ||
        m->batch_size != sizeof(struct rt_symbol_batch) ||
        m->description_size != sizeof(struct prof_process_info)) {
        /* Left loaded: unloading a library whose constructors ran is not worth the risk. */
        rt_debug("%s is from another build of fleetprof: no daemon connection", RT_IPC_MODULE_NAME);
        return NULL;
    }
    m->init(&core);
    rt_debug("loaded %s", RT_IPC_MODULE_NAME);
    return m;
}

const struct rt_ipc_module *rt_ipc_module(bool want_load)
{
    const struct rt_ipc_module *m = atomic_load_explicit(&module, memory_order_acquire);

    if (m || !want_load || atomic_load_explicit(&tried, memory_order_acquire))
        return m;
    (void)pthread_mutex_lock(&load_lock);
    m = atomic_load(&module);
    if (!m && !atomic_load(&tried)) {
        m = load();
        atomic_store_explicit(&module, m, memory_order_release);
        atomic_store_explicit(&tried, true, memory_order_release);
    }
    (void)pthread_mutex_unlock(&load_lock);
    return m;
}

void rt_ipc_module_forget_after_fork(void)
{
    /* The parent may have been loading it at the fork: the lock afresh (we are alone). */
    (void)pthread_mutex_init(&load_lock, NULL);
}
