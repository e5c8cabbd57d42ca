/* daemon/daemon.h - fleetprofd as a library: the ProfilerParent on a libuv loop.
 *
 * Listens on a Unix socket; each profiled process connects, says Hello, gets its session
 * settings (Welcome), and is then long-polled for chunk-manager updates, which feed the
 * global controller (daemon/controller.h); the daemon asks owners to destroy their oldest
 * released chunks to keep the fleet under one memory limit. Tools connect to the same
 * socket for status (and, later, captures). fleetprofd's main and `fleetprof record` both
 * embed it. Single-threaded: every call on the loop's thread.
 */
#ifndef FLEETPROF_DAEMON_DAEMON_H
#define FLEETPROF_DAEMON_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

struct daemon; /* opaque */

enum daemon_log_level {
    DAEMON_LOG_ERROR,
    DAEMON_LOG_WARNING,
    DAEMON_LOG_INFO,
    DAEMON_LOG_DEBUG,
};

/* Receives every event worth a line: the embedder decides where lines go. */
typedef void (*daemon_log_fn)(void *userdata, enum daemon_log_level level, const char *message);

struct daemon_options {
    const char *socket_path;      /* required */
    uint64_t global_limit_bytes;  /* default 256 MiB */
    uint64_t process_limit_bytes; /* default 64 MiB */
    uint64_t chunk_bytes;         /* default 256 KiB */
    uint64_t interval_ns;         /* default 1 ms */
    uint64_t child_timeout_ns;    /* gathering: default 1 s */
    int stackwalk;                /* Fleetprof__StackwalkMode; 0 = the child's default */
    bool allow_any_uid;           /* tests only: skip the peer uid check */
    daemon_log_fn log;            /* may be NULL */
    void *log_userdata;
};

/* Opens the socket and starts serving on loop (borrowed, must outlive the daemon).
 * Returns 0, or a negative errno: -EADDRINUSE when a live daemon owns the path, -EINVAL
 * for bad options; *ret_daemon untouched on failure. */
int daemon_new(uv_loop_t *loop, const struct daemon_options *options, struct daemon **ret_daemon);

/* Stops accepting, closes every connection (children see the daemon go away and carry on
 * alone), removes the socket. The memory is freed once the loop has run the close
 * callbacks; done (may be NULL) is called then. */
void daemon_close(struct daemon *d, void (*done)(void *userdata), void *userdata);

struct daemon_stats {
    uint64_t children;         /* connected profiled processes */
    uint64_t children_total;   /* ever connected */
    uint64_t dropped_children; /* disconnected for misbehaving */
    uint64_t updates;          /* chunk-manager updates handled */
    uint64_t destroy_requests; /* DestroyReleasedChunksAtOrBefore sent */
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t global_limit_bytes;
};
void daemon_get_stats(const struct daemon *d, struct daemon_stats *ret);

#endif /* FLEETPROF_DAEMON_DAEMON_H */
