/* daemon/daemon-internal.h - state shared by the daemon's files (core.c, server.c, gather.c,
 * symbols-service.c, recover.c), and what the files under server.c offer it. The core's
 * functions are in daemon/core.h.
 *
 * Single-threaded: everything runs on the daemon's loop, except the end of a capture's file
 * write (fsync, close, rename), which a libuv worker does on data it owns until the
 * after-work callback, and the building of a profile from a child's region, which the
 * daemon's workers (workers.h) do on a job that owns what it reads.
 */
#ifndef FLEETPROF_DAEMON_DAEMON_INTERNAL_H
#define FLEETPROF_DAEMON_DAEMON_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "common/map.h"
#include "daemon/controller.h"
#include "daemon/daemon.h"
#include "daemon/groups.h"
#include "ipc/uv-ipc.h"
#include "profile/symbols.h"
#include "proto/fleetprof-protocol.h"

struct buf_region_header;
struct gather;
struct region_scan;
struct census_waits;
struct loop_pace;
struct prof_symbols;
struct daemon_workers;

enum conn_kind {
    CONN_NEW,   /* nothing received yet */
    CONN_CHILD, /* said Hello: a profiled process */
    CONN_TOOL,  /* a CLI */
    CONN_DEAD,  /* being closed */
};

struct conn {
    struct daemon *d; /* borrowed */
    struct ipc_conn *ipc;
    struct ipc_peer peer;
    enum conn_kind kind;
    int32_t pid; /* children: the peer's pid (SO_PEERCRED), authoritative */
    int32_t ppid;
    char name[64];
    char sampling_timer[32], sampling_timer_why[320]; /* from Hello */
    uint64_t connect_ns;
    uint64_t poll_id;     /* outstanding AwaitNextChunkManagerUpdate, 0 = none */
    uint64_t unsolicited; /* updates that answered no poll */
    Fleetprof__ChildState state;
    double start_epoch_ms; /* from Hello */
    /* An exit profile arriving in pieces (ProfileData with exit set). */
    char *exit_data;
    size_t exit_len, exit_cap;
    bool exit_profile_received;
    /* A capture's piece taken as it arrives (daemon__gather_piece_*): the capture it is for,
     * 0 when none or once its bytes are to be ignored. */
    uint64_t piece_gather;
    uint64_t piece_total;
    bool piece_last;
    struct fleet_groups_proc *groups; /* borrowed from d->groups until the connection ends */
    int region_fd;                    /* the child's chunk region (memfd, sealed), -1 if none */
    /* The header page of that region, mapped shared and writable when the child reads its
     * evictions there (Hello's region_evictions), else NULL: destroy requests are messages.
     * Owned: unmapped when the connection ends. */
    struct buf_region_header *evict_page;
    uint64_t evict_ns;         /* the eviction point last stored in evict_page */
    uint64_t destroy_requests; /* DestroyReleasedChunksAtOrBefore sent to it */
    uint64_t region_evictions; /* eviction points stored in its region instead */
    /* Welcome.updates_in_region: its updates are taken from the ring in evict_page's page,
     * by the entry ring_index of region-updates.c's table. */
    bool updates_in_region;
    size_t ring_index;
    uint64_t region_updates; /* publications taken from its ring */
    bool final_update;       /* its manager said goodbye: its chunks are gone */
    bool exit_in_region;     /* Welcome.exit_in_region: we build its exit profile from its
                              * region when its Final asks */
    bool building;           /* a worker builds its profile from its region (the capture
                              * waits for that, not for the child) */
    uint32_t groups_refused; /* GroupStats refused (logged up to a few) */
    bool in_pid_map;         /* added to d->by_pid (from its Hello to its close); a newer
                              * connection of its pid may have replaced it there */
    /* Its connection ended while the process lives on: its region is kept (recover.c). */
    bool lingering;
    uint64_t start_ticks;      /* its start time (/proc's clock ticks), known while lingering */
    uint32_t unprofiled_named; /* of its region's unprofiled_pids, how many were named */
    struct conn *next;
};

#define DEPARTURES_MAX 4096

/* Worker threads that build profiles from children's regions (workers.h): two, as a killed
 * fleet's recoveries are memory-bound copies and builds, and the loop keeps a CPU. */
#define DAEMON_WORKERS 2

/* Each symbol cache's memory bound: the symbol service's (the loop's) and the workers'. */
#define DAEMON_SYMBOL_CACHE_BYTES (512u << 20)

/* A child that ended without an exit profile: the next capture's log says so. */
struct departure {
    int32_t pid;
    char name[64];
    uint64_t time_ns;
    char recovered[200]; /* how its profile was recovered from its chunks ("" = it was not) */
    const char *dropped; /* static: why its kept exit profile was dropped between captures
                          * (evicted, expired); NULL: it ended without one */
    const char *never;   /* static: why it was never profiled (census.c); NULL: it was */
};

/* A child's whole profile, sent as it exited, kept until the next capture. */
struct exit_profile {
    int32_t pid;
    char name[64];
    uint64_t receipt_ns; /* its identity in the controller (a daemon-owned chunk) */
    char *json;          /* owned */
    size_t len;
    char built[160]; /* how the daemon built it from the child's region; "" = the child sent it */
    /* The life of an image that ended by exec: the process lives on, and does not count as
     * reporting after that exec (its new image may never report). */
    bool before_exec;
    struct exit_profile *next;
    struct exit_profile *older_same_pid; /* the next of its pid in d->exit_by_pid */
};

struct daemon_built;

#define DAEMON_EXEC_HANDOFFS 64

struct daemon {
    uv_loop_t *loop;
    struct daemon_options opt;
    char *socket_path; /* owned copy */
    struct ipc_listener *listener;
    struct ctl *ctl;
    struct fleet_groups *groups; /* owned: the fleet's performance groups */
    struct conn *conns;          /* owned list */
    struct fleetprof_map by_pid; /* children by pid (fleetprof_map_mix64): struct conn *,
                                  * borrowed */
    uint64_t next_id;
    struct daemon_stats stats;
    uint64_t start_ns; /* when the daemon started: the time origin of captures */
    double start_epoch_ms;
    struct exit_profile *exit_profiles;      /* owned list, oldest first */
    struct exit_profile *exit_profiles_last; /* the newest of that list, NULL when empty */
    /* The same profiles by pid (fleetprof_map_mix64): one of each pid, the others through
     * older_same_pid. The census and a capture ask, for each process that ends,
     * whether its pid left one: a fleet of short-lived processes keeps thousands between
     * two captures. exit_by_pid_lost: an insert found no memory, so lookups walk the list. */
    struct fleetprof_map exit_by_pid;
    bool exit_by_pid_lost;
    struct gather *gather;   /* the running capture, or NULL */
    struct loop_pace *pace;  /* owned; NULL when off */
    uv_timer_t socket_watch; /* is the socket still ours? (server.c) */
    bool socket_watch_open;  /* until its close callback */
    bool socket_lost_said;
    uv_timer_t linger_timer; /* are the owners of kept regions alive? (recover.c) */
    bool linger_timer_open;  /* until its close callback */
    size_t lingering;        /* connections kept for their regions (conn.lingering) */
    /* What a build from a kept region calls (server.c's). */
    void (*linger_built)(struct conn *c, struct daemon_built *b);
    struct region_scan *region_scan; /* owned; NULL until a child publishes in its region */
    struct census_waits *census;     /* owned; NULL until a process waits to be judged */
    struct prof_symbols *symbols;    /* the symbol service's cache; NULL until first used */
    struct daemon_workers *workers;  /* owned: builds profiles from regions; NULL once closed */
    /* Images that ended by exec, for their next image's Welcome (server.c): the CPU their
     * profile charged the thread that exec'd, by pid and the process's start (the pid's
     * process, not a later one), the newest DAEMON_EXEC_HANDOFFS. */
    struct exec_handoff {
        int32_t pid; /* 0: free, or taken */
        uint64_t start_ticks;
        uint64_t cpu_ns;
    } exec_handoffs[DAEMON_EXEC_HANDOFFS];
    size_t exec_handoff_next;
    struct departure *departures; /* children that ended without an exit profile */
    size_t departure_count;       /* since the last capture, at most DEPARTURES_MAX */
    uint64_t departures_dropped;
    bool closing;
    void (*finish_close)(struct daemon *d); /* server.c: frees d (daemon__maybe_finish_close) */
    /* Set by server.c, the ways from the foundations back up to a service: an exit profile
     * evicted while a capture runs is named in its log (gather.c: false when none runs);
     * a capture first builds the kept regions whose owners are gone (recover.c). */
    bool (*exit_profile_dropped)(struct daemon *d, const struct exit_profile *e, const char *why);
    void (*before_capture)(struct daemon *d);
    void (*close_done)(void *);
    void *close_userdata;
};

/* region.c */
/* The largest region a child of this daemon can make (its buffer limit's chunks in slots,
 * and the header): a region claiming more is refused, and a build copies no more. */
uint64_t daemon__region_limit(const struct daemon *d);
/* Hello came with a descriptor: keeps it as c's chunk region if it is one the daemon can
 * read safely (a memfd sealed against shrinking, of a sane size), else logs why not and
 * closes it. With evictions (the child reads them from its region), also maps the region's
 * header page for them (c->evict_page) when its header is a region's. */
void daemon__region_accept(struct conn *c, int fd, bool evictions);
/* Asks c to destroy its released chunks done at or before done_ns through its region, when
 * it reads evictions there: true if done (no message to send), false otherwise. */
bool daemon__region_evict(struct conn *c, uint64_t done_ns);
/* Unmaps c's eviction page and closes its region (idempotent). */
void daemon__region_release(struct conn *c);
/* Whether the owner of the region in fd marked its exec in it. */
bool daemon__region_execd(int fd);
uint64_t daemon__region_exec_cpu(int fd);
/* Whether the owner of the region in fd wrote its own profile as it ended. */
bool daemon__region_profile_written(int fd);

/* budget.c */
/* Carries out the controller's actions (destroy requests, exit-profile evictions). */
void daemon__apply_actions(struct daemon *d, struct ctl_actions *a);
/* A child's chunk-manager update, by message or from its region: given to the controller,
 * whose actions are then carried out; false when it was refused (c is dropped, the reason
 * logged). */
bool daemon__update_apply(struct conn *c, const struct ctl_update *u);
/* Stores a complete exit profile (takes ownership of json); built: how the daemon built it
 * from the child's region (for the gathering log), NULL when the child sent it; before_exec:
 * it is an image's life that ended by exec (exit_profile.before_exec). */
void daemon__exit_profile_add(struct daemon *d, struct conn *c, char *json, size_t len,
                              const char *built, bool before_exec);
/* Drops the daemon-owned exit profiles received at or before done_ns ("evicted"). */
void daemon__exit_profiles_evict(struct daemon *d, uint64_t done_ns, const char *why);
void daemon__exit_profiles_free(struct daemon *d);
/* The list d->exit_profiles and its index by pid change together: a profile joins or leaves
 * the index as it joins or leaves the list. */
void daemon__exit_index_add(struct daemon *d, struct exit_profile *e);
void daemon__exit_index_remove(struct daemon *d, struct exit_profile *e);
/* A kept exit profile of pid (for its name), or NULL if none. */
const struct exit_profile *daemon__exit_profile_of(const struct daemon *d, int32_t pid);
/* Whether pid has a kept exit profile of an image that ended (not by exec). */
bool daemon__exit_profile_reported(const struct daemon *d, int32_t pid);

/* departures.c */
/* A new departure record, or NULL when DEPARTURES_MAX are kept (then counted). */
struct departure *daemon__departure_push(struct daemon *d, int32_t pid, const char *name);
/* Remembers a child that ended without an exit profile. */
void daemon__departure_add(struct daemon *d, const struct conn *c, const char *recovered);
/* Remembers a process that was never profiled (why: static); the next capture names it
 * unless a later image of pid reported. */
void daemon__departure_never(struct daemon *d, int32_t pid, const char *name, const char *why);

/* gather.c */
/* A ProfileData or GatherProgress from a child; returns true if the gather used it. */
void daemon__gather_on_profile_data(struct conn *c, const Fleetprof__ProfileData *m);
/* A capture's large piece written to the output as its bytes arrive (ipc_conn_callbacks'
 * piece callbacks, userdata the conn): begin takes only a piece the capture accepts, so
 * that the rest (late, failed, refused pieces) goes whole through the path above. */
bool daemon__gather_piece_begin(struct ipc_conn *ipc, const Fleetprof__ProfileData *m,
                                void *userdata);
void daemon__gather_piece_bytes(struct ipc_conn *ipc, const uint8_t *data, size_t len,
                                void *userdata);
void daemon__gather_piece_end(struct ipc_conn *ipc, void *userdata);
void daemon__gather_on_progress(struct conn *c, const Fleetprof__GatherProgress *m);
/* A child left, or its connection is about to be freed: a capture waiting for it drops its
 * partial data, logged. */
void daemon__gather_on_child_gone(struct conn *c);
/* c's profile was recovered from its chunks (json, len; how says how). When a capture is
 * waiting for c, that is its answer: returns true, and the capture took json (freed with
 * it); else false. */
bool daemon__gather_on_recovered(struct conn *c, char *json, size_t len, const char *how);
/* c's exit profile arrived (json, len; built: how the daemon built it from c's region, or
 * NULL). When a capture is waiting for c, that is its answer: returns true, and the capture
 * took json (freed with it); else false, and the caller keeps it for the next capture. */
bool daemon__gather_on_exit_profile(struct conn *c, char *json, size_t len, const char *built);
/* A tool left: its capture goes on, the result is just not sent. */
void daemon__gather_on_tool_gone(struct conn *c);
void daemon__capture_request(struct conn *tool, const Fleetprof__CaptureRequest *req);
/* daemon.exit_profile_dropped: names e in the running capture's log; false when none runs. */
bool daemon__gather_exit_profile_dropped(struct daemon *d, const struct exit_profile *e,
                                         const char *why);

/* recover.c */
/* A profile the workers build from a child's region: a killed child's (recovery), or the
 * exit profile a short-lived child left there (ChunkManagerUpdate.exit_in_region). */
enum daemon_build_kind {
    DAEMON_BUILD_RECOVERY,
    DAEMON_BUILD_EXIT,
};
/* What a build gives back, on the loop. */
struct daemon_built {
    enum daemon_build_kind kind;
    int32_t pid;
    const char *name;
    /* 0; -ESHUTDOWN (the daemon closed first); or why the region could not be read
     * (logged). */
    int result;
    bool execd;  /* a recovery of an image that ended by exec: its life before the exec */
    bool exited; /* a recovery of a process that ended normally: its exit profile */
    char *json;  /* with result 0, owned: the callback takes it by setting it to NULL */
    size_t len;
    const char *how; /* how it was built, for the gathering log */
};
typedef void daemon_built_cb(struct conn *c, struct daemon_built *b);
/* Starts building c's profile from its region on the workers (a duplicate of its descriptor
 * goes with the job); cb gets c and the result on the loop. The caller keeps c until then
 * (c->building: a connection that ends meanwhile stays in the table, dead). For a recovery,
 * only once c's process is gone, or its image exec'd (its region says so; its new image
 * reports on its own): one that lives on otherwise reconnects. False when there is nothing
 * to build: no region, or a process still alive. */
bool daemon__region_build(struct conn *c, enum daemon_build_kind kind, daemon_built_cb *cb);

/* recover.c, kept regions: the region of a child whose connection ended while it lives on,
 * kept until it reconnects or ends. */
void daemon__linger_init(struct daemon *d);
/* c's connection ended and its process lives on: keeps c (dead, without ipc) for its region;
 * built (server.c's) gets a build from it. False when it cannot be kept. */
bool daemon__linger_begin(struct conn *c, daemon_built_cb *built);
/* pid said Hello again: its kept region is let go (built first if it exec'd meanwhile). */
void daemon__linger_end(struct daemon *d, int32_t pid);
/* Builds the profiles of kept regions whose owners are gone (a capture calls it first). */
void daemon__linger_check(struct daemon *d);
/* At the daemon's close: kept regions let go, the timer closed. */
void daemon__linger_close(struct daemon *d);
void daemon__linger_timer_close(struct daemon *d);
/* region-updates.c */
/* Hello asked to publish its updates in its region: true when c's region header page is
 * mapped (evictions) and its ring is now read on the daemon's timer; false: messages. */
bool daemon__region_updates_accept(struct conn *c);
/* Takes and applies whatever c published in its ring (no-op for other connections): false
 * when that dropped c (a ring or an update that contradicts itself). */
bool daemon__region_updates_take(struct conn *c);
/* c is leaving: its ring is no longer read (idempotent). */
void daemon__region_updates_leave(struct conn *c);
/* Stops the timer (daemon_close). */
void daemon__region_scan_close(struct daemon *d);

/* census.c
 * A process that may never report is judged (why_not_profiled: /proc and its program's ELF
 * header) only once it had CENSUS_GRACE_MS to report: most are a fork+exec whose new image
 * says Hello a moment later, and then nothing is read at all. Judged at the grace's end, at
 * a capture's start, or when the daemon closes (daemon__census_settle). */
/* A connection was accepted: notes its process's parent (c->ppid). */
void daemon__census_accept(struct conn *c);
/* It closed before any message: if its process is a profiled process's child (connected in
 * its fork handler), the process is named with why it was not profiled (a departure),
 * unless it reports or the daemon is closing. */
void daemon__census_close(struct conn *c);
/* Child c started these processes with posix_spawn (Spawned): each that does not connect
 * and that the profiler cannot enter is named the same way. */
void daemon__census_spawned(struct conn *c, const int32_t *pids, size_t count);
/* c's process, which reported, exec'd (its region says so): its new image connects and
 * reports, or it is judged as a never-profiled one (a chroot, a static program, an image
 * that ended already, ...) and named. */
void daemon__census_execd(struct conn *c);
/* Judges the waiting processes whose grace is over (all of them: every one) that have not
 * reported meanwhile. */
void daemon__census_settle(struct daemon *d, bool every_one);
/* Judges every waiting process and stops the timer (daemon_close). */
void daemon__census_close_timer(struct daemon *d);

/* symbols-service.c */
/* Answers a child's Symbolize with one or more Symbols (the symbol service). */
void daemon__symbolize(struct conn *c, const Fleetprof__Symbolize *m);
/* Modules the service's cache opened so far (each build once, unless evicted). */
struct prof_symbols_stats daemon__symbols_stats(const struct daemon *d);
void daemon__symbols_free(struct daemon *d);
/* The service's cache, made on first use (0 or a negative errno). */
int daemon__symbols_cache(struct daemon *d, struct prof_symbols **ret);

#endif /* FLEETPROF_DAEMON_DAEMON_INTERNAL_H */
