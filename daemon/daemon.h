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

#define DAEMON_UPDATE_HOLD_OFF               UINT64_MAX
#define DAEMON_UPDATE_HOLD_NS                (200ull * 1000 * 1000) /* the default; bench-daemon sized it */
#define DAEMON_PACE_OFF                      UINT64_MAX
#define DAEMON_PACE_NS                       (2ull * 1000 * 1000) /* the default (daemon/pace.h) */
#define DAEMON_CHUNK_BYTES                   (256u << 10)         /* the default chunk */
/* The smallest global limit: what one process needs, the chunk it writes in and one it
 * released. Below it every released chunk is evicted as soon as it is reported, and every
 * exit profile as soon as it is stored: a file of nothing. */
#define DAEMON_GLOBAL_LIMIT_MIN(chunk_bytes) (2 * (uint64_t)(chunk_bytes))

struct daemon_options {
    const char *socket_path;      /* required */
    uint64_t global_limit_bytes;  /* default 256 MiB */
    uint64_t process_limit_bytes; /* default 64 MiB */
    uint64_t chunk_bytes;         /* default 256 KiB */
    uint64_t interval_ns;         /* default 1 ms */
    uint64_t child_timeout_ns;    /* gathering: default 1 s */
    int stackwalk;                /* Fleetprof__StackwalkMode; 0 = the child's default */
    /* How long a child under a standing poll may hold an update that lists fewer than 2
     * newly released chunks (Welcome's update_hold_ns): default 200 ms;
     * DAEMON_UPDATE_HOLD_OFF = every change at once. */
    uint64_t update_hold_ns;
    /* A busy loop polls at most once per pace (daemon/pace.h): default 2 ms;
     * DAEMON_PACE_OFF = every wake-up at once. */
    uint64_t pace_ns;
    bool allow_any_uid; /* tests only: skip the peer uid check */
    daemon_log_fn log;  /* may be NULL */
    void *log_userdata;
    /* The least severe level log keeps: lines past it are not even formatted (a few per
     * process a fleet starts). 0 (DAEMON_LOG_ERROR) keeps errors alone; set it to
     * DAEMON_LOG_DEBUG for every line. Read only when log is set. */
    enum daemon_log_level log_level;
};

/* Opens the socket and starts serving on loop (borrowed, must outlive the daemon).
 * Returns 0, or a negative errno: -EADDRINUSE when a live daemon owns the path, -EINVAL
 * for bad options; *ret_daemon untouched on failure. */
int daemon_new(uv_loop_t *loop, const struct daemon_options *options, struct daemon **ret_daemon);

/* Stops accepting, closes every connection (children see the daemon go away and carry on
 * alone), removes the socket. The memory is freed once the loop has run the close
 * callbacks; done (may be NULL) is called then. */
void daemon_close(struct daemon *d, void (*done)(void *userdata), void *userdata);

/* Gathering (design §6): every live child is asked for its profile, exit profiles kept
 * since the last capture are added, and the whole fleet is written as one Gecko profile
 * to output_path (via a temporary file in the same directory, renamed when complete: the
 * file is the previous one or a complete profile, never half). The daemon's memory does
 * not grow with the profile: children's JSON streams into that file, or into unlinked
 * spool files beside it while another child streams (so the directory briefly holds up to
 * twice the profile's size). Children that stop making progress for a child timeout are
 * given up; profileGatheringLog says what happened. */
struct daemon_capture_progress {
    uint32_t children_total; /* asked for their profile */
    uint32_t children_done;  /* answered (completely, with an error, or given up) */
    uint32_t exit_profiles;  /* stored exit profiles included */
    uint64_t bytes;          /* profile bytes received so far */
};

/* A process a capture's file lacks, as its log names it. */
struct daemon_lost_process {
    int32_t pid;
    char name[64];
    char reason[160];
};
#define DAEMON_LOST_LISTED 256 /* processes listed by name; more are counted */

struct daemon_capture_result {
    int error;           /* 0, or a negative errno (the file was not written) */
    const char *message; /* what went wrong, for the user; NULL on success */
    const char *path;    /* the written file */
    uint64_t bytes;      /* its size */
    uint32_t processes;  /* process profiles in it */
    uint32_t given_up;   /* children that made no progress in time */
    uint32_t recovered;  /* processes whose profile was read back from their chunks after
                          * they died without one (killed, crashed) */
    uint32_t lost;       /* processes the file lacks, named in its log (given_up included) */
    const struct daemon_lost_process *lost_list; /* the first lost_listed of them, borrowed */
    size_t lost_listed;
};

typedef void (*daemon_capture_progress_cb)(void *userdata,
                                           const struct daemon_capture_progress *progress);
typedef void (*daemon_capture_done_cb)(void *userdata, const struct daemon_capture_result *result);

/* Starts a capture. product names the recording in the profile (e.g. the recorded command
 * line; NULL = "fleetprofd"). progress (may be NULL) is called as children answer; done
 * exactly once, from the loop, after the file is written or the capture failed. Returns 0,
 * -EBUSY while another capture runs, -EINVAL, -ENOMEM. The path is copied. */
int daemon_capture(struct daemon *d, const char *output_path, const char *product,
                   daemon_capture_progress_cb progress, daemon_capture_done_cb done,
                   void *userdata);

struct daemon_stats {
    uint64_t children;         /* connected profiled processes */
    uint64_t connecting;       /* connections not yet children: accepted and silent so far,
                                * plus 1 while any waits in the listen backlog */
    uint64_t building;         /* profiles the workers are building from children's regions
                                * (killed children, short-lived children's exits) */
    uint64_t children_total;   /* ever connected */
    uint64_t dropped_children; /* disconnected for misbehaving */
    uint64_t updates;          /* chunk-manager updates handled */
    uint64_t destroy_requests; /* DestroyReleasedChunksAtOrBefore sent */
    uint64_t region_evictions; /* eviction points written into children's chunk regions */
    uint64_t region_updates;   /* updates taken from children's chunk regions' rings */
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t global_limit_bytes;
    uint64_t exit_profiles; /* stored, not yet gathered */
    uint64_t exit_profile_bytes;
    uint64_t symbol_requests;           /* Symbolize requests answered */
    uint64_t symbol_modules_loaded;     /* modules the symbol service opened */
    uint64_t symbol_modules_names_only; /* of those, resolved without file:line (cost rule) */
    uint64_t group_stats;               /* GroupStats applied */
    uint64_t group_stats_refused;       /* GroupStats refused (logged) */
};
void daemon_get_stats(const struct daemon *d, struct daemon_stats *ret);

#endif /* FLEETPROF_DAEMON_DAEMON_H */
