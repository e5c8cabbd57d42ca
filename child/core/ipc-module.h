/* child/core/ipc-module.h - the interface between libfleetprof.so and libfleetprof-ipc.so.
 *
 * Everything of the runtime that needs libuv or protobuf-c (the IPC thread and its
 * connection, child/ipc-module/ipc.c; packing the region's ProcessDescription,
 * child/ipc-module/ipc-pack.c) lives in a separate shared object, so that a process pays for
 * mapping and relocating those libraries only when it talks to a daemon or keeps a chunk region
 * (issue #17: "pay only for what is used"). The core loads it with dlopen() the first time it needs
 * it (rt_ipc_module(), ipc-load.c: next to libfleetprof.so, then by name), never in a signal
 * handler, and reaches it only through struct rt_ipc_module. The module calls the core
 * back only through struct rt_ipc_core, which the core hands it (libfleetprof.so exports
 * nothing else, and the module is linked with -z defs: no symbol of ours can be used).
 *
 * What crosses: plain structs whose layout is in a header (this one's, buf_update,
 * progress cells and loggers, prof_* descriptions) and the core's opaque objects handled
 * only by the core's functions (json_writer: made, walked and freed through rt_ipc_core).
 * Both objects come from one build; the ABI number and the sizes below catch a module from
 * another one, which is then not used.
 */
#ifndef FLEETPROF_CHILD_CORE_IPC_MODULE_H
#define FLEETPROF_CHILD_CORE_IPC_MODULE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buffer/update.h"
#include "child/base/fds.h"
#include "profile/gecko.h"

#define RT_IPC_MODULE_NAME  "libfleetprof-ipc.so"
#define RT_IPC_MODULE_ENTRY "fleetprof_ipc_module"
#define RT_IPC_MODULE_ABI   13u

struct json_writer;
struct progress_logger;
struct prof_group_totals;
struct prof_thread_info;
struct prof_counter_info;
struct prof_marker_schema;
struct prof_libs;
struct prof_runtime_log;

/* The settings of the daemon's Welcome that the core applies (the module keeps the rest). */
struct rt_welcome {
    uint64_t interval_ns;         /* 0 = keep ours; applied only within [50 us, 1 s] */
    uint64_t process_limit_bytes; /* 0 = keep ours */
    uint64_t clock_epoch_ms;      /* the daemon's clock: 0 = none */
    uint64_t clock_monotonic_ns;
    uint64_t exec_cpu_accounted_ns; /* by this process's previous image (Welcome) */
};

/* What Hello says about this process, from the core. Strings borrowed (the process's). */
struct rt_hello_info {
    const char *name;
    uint64_t start_ns;
    double start_epoch_ms;
    uint64_t slow_event_ns; /* performance groups' threshold, for GroupStats */
    const char *sampling_timer, *sampling_timer_why; /* rt_cpu_timer_report() */
};

/* One module and one address of a symbol batch (the daemon's Symbolize request). */
struct rt_symbol_module {
    const char *path; /* borrowed */
    const uint8_t *build_id;
    size_t build_id_len;
    uint64_t load_bias;
};
struct rt_symbol_address {
    uint32_t module_index;
    uint64_t offset;
};

/* One batch of symbol requests that a profile writer hands to the IPC thread, which sends
 * it as a Symbolize and copies the Symbols reply (possibly in pieces) into it. The writer
 * owns the batch; the IPC thread touches it only under its lock while it is posted. */
struct rt_symbol_batch {
    const struct rt_symbol_module *modules; /* borrowed: module_count entries */
    size_t module_count;
    const struct rt_symbol_address *addresses; /* borrowed: count entries */
    size_t count;                              /* addresses in the request */
    /* Filled by the IPC thread: */
    char *arena; /* owned: names and files, NUL-terminated, at the offsets below */
    size_t arena_len, arena_cap;
    size_t *name_off, *file_off; /* count entries each (allocated by the writer); SIZE_MAX =
                                  * unknown */
    uint32_t *lines, *status;    /* count entries each; status 0 or a positive errno */
    size_t received;             /* addresses answered so far */
    size_t module_errors;        /* modules the daemon could not (or would not) read */
    char error[256];             /* the request's error, else the first module error */
    bool done;
    int result; /* 0 or a negative errno (-ETIMEDOUT, -ENOTCONN, -EIO: the daemon's error) */
};

/* The profile writer (runtime.c's rt_profile_write(), above the client): the daemon's
 * requests for a profile. */
typedef int rt_profile_writer(struct json_writer *w, uint64_t shutdown_ns, bool exit_profile,
                              const struct progress_logger *progress);

/* What the IPC client calls above it: given to start(), valid for the process's life. */
struct rt_ipc_hooks {
    rt_profile_writer *write_profile;
    void (*pause)(void); /* fleetprof_pause(), fleetprof_resume() */
    void (*resume)(void);
};

/* What the module may call in libfleetprof.so (static data of the core). Thread-safety and
 * contracts as the functions named (child/core/core.h, child/base/fds.h, child/base/log.h). */
struct rt_ipc_core {
    uint32_t abi;  /* RT_IPC_MODULE_ABI */
    uint32_t size; /* sizeof(struct rt_ipc_core) */
    void (*debug)(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* rt_debug */
    void (*warn)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* rt_warn */
    uint64_t (*now_ns)(void);
    /* Descriptors and threads of the runtime (fds.h). */
    bool (*fd_intact)(int fd);
    void (*fd_protect)(int fd);
    void (*fd_unprotect)(int fd);
    void (*fd_release)(int fd);
    int (*fd_relocate)(int fd);
    void (*fds_capture)(enum rt_fds_capture how);
    int (*create_internal_thread)(pthread_t *thread, void *(*start)(void *), void *arg);
    void (*thread_cancel_only_in_poll)(void);
    /* Performance groups (rt_groups_generation(), rt_groups_snapshot()). */
    uint64_t (*groups_generation)(void);
    size_t (*groups_snapshot)(struct prof_group_totals **ret);
    /* The chunk region's descriptor (rt_region_fd()), for Hello. */
    int (*region_fd)(void);
    void (*hello_info)(struct rt_hello_info *ret);
    /* The daemon's settings: interval, this process's buffer limit, its clock origin. */
    void (*apply_welcome)(const struct rt_welcome *w);
    /* The chunk manager's updates and the daemon's destroy requests (updates.c, the core's
     * rt_updates_*): the module sends what the slot holds when the core wakes it. */
    int (*updates_start)(void);
    void (*updates_stop)(void);
    void (*updates_use_region)(bool evictions, bool ring);
    void (*updates_destroy)(uint64_t done_ns, bool quiet);
    enum buf_update_kind (*updates_peek)(size_t *ret_newly_released,
                                         uint64_t *ret_unreleased_bytes);
    int (*updates_take)(struct buf_update *ret_update);
    void (*updates_put_back)(const struct buf_update *update);
    /* The core's JSON writers (json/writer.h): a memory writer for a gathered
     * profile, its chunks, and freeing it. */
    int (*json_new_memory)(struct json_writer **ret);
    int (*json_each_chunk)(const struct json_writer *w,
                           int (*fn)(const char *data, size_t len, void *userdata), void *userdata);
    struct json_writer *(*json_free)(struct json_writer *w);
};

/* What the module's entry point returns: static data, valid while it is loaded (the core
 * never unloads it). Contracts: child/client/client.h's rt_ipc_* of the same names. */
struct rt_ipc_module {
    uint32_t abi;              /* RT_IPC_MODULE_ABI */
    uint32_t core_size;        /* sizeof(struct rt_ipc_core) */
    uint32_t batch_size;       /* sizeof(struct rt_symbol_batch) */
    uint32_t description_size; /* sizeof(struct prof_process_info) */
    /* First, once: the core's table (static data of the core). */
    void (*init)(const struct rt_ipc_core *core);
    int (*start)(const char *socket_path, const struct rt_ipc_hooks *hooks);
    void (*start_deferred)(void);
    void (*stop)(void);
    void (*tick)(void);
    /* A change waits in the core's slot: the IPC thread sends it (any thread). */
    void (*wake)(void);
    void (*forget_after_fork)(void);
    bool (*connected)(void);
    bool (*owns_fd)(int fd);
    int (*abandon)(void);
    int (*give_up)(void);
    int (*send_exit_profile)(struct json_writer *w);
    bool (*exit_in_region_accepted)(void);
    void (*exit_in_region)(void);
    int (*symbolize)(struct rt_symbol_batch *batch, uint64_t timeout_ns);
    /* Packs the process description kept in the chunk region (core/region.c; with
     * shutdown_ns, the one the daemon builds the exit profile from, and runtime_log) as a
     * ProcessDescription into *ret_bytes (malloc()ed, the caller frees it). */
    int (*pack_description)(const struct prof_process_info *d, uint8_t **ret_bytes,
                            size_t *ret_len);
    /* Why the daemon at our socket was not trusted (its directory, socket or uid), or NULL. */
    const char *(*untrusted)(void);
    /* The program started pid (fork, posix_spawn): told to the daemon (Spawned) in a batch,
     * at the sampler's next tick; any thread, not from a signal handler. */
    void (*spawned)(int32_t pid);
    /* Takes the daemon's Welcome if it is on its way and not read yet (a light connection,
     * ipc.c), waiting for it a bounded time: at exit, before the sampler's last drain. */
    void (*welcome_wait)(void);
    /* Starts the IPC thread now if the connection is light (it loads libuv): the program is
     * about to leave the file system where libuv is (chroot). */
    void (*promote)(void);
    /* The program is about to change its user ids (setuid, ...): a forked child of a
     * connected process that has not connected yet connects now, as the user the daemon
     * accepts, for its start to say Hello on. */
    void (*before_credentials)(void);
};

/* The module's only exported symbol (RT_IPC_MODULE_ENTRY). */
const struct rt_ipc_module *fleetprof_ipc_module(void);

/* ipc-pack.c, inside the module: its pack_description. */
int rt_ipc_pack_description(const struct prof_process_info *d, uint8_t **ret_bytes,
                            size_t *ret_len);

/* ipc-load.c (the core): the module, loaded on the first call with load set (never from a
 * signal handler: dlopen); NULL when it is not loaded, or cannot be (said once, with
 * FLEETPROF_DEBUG; not tried again). Without load, only a module already loaded. */
const struct rt_ipc_module *rt_ipc_module(bool load);
/* In a forked child: the loader's lock afresh. */
void rt_ipc_module_forget_after_fork(void);

#endif /* FLEETPROF_CHILD_CORE_IPC_MODULE_H */
