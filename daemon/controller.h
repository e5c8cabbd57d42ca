/* daemon/controller.h - the global chunk controller: one memory limit for a whole fleet.
 *
 * Each child reports its chunk manager's state (unreleased bytes, and the chunks it
 * released, each named by its done time). The controller keeps per-process unreleased
 * bytes and every process's released chunks; whenever the total passes the global limit
 * it evicts the globally oldest released chunk (ordered by (done_ns, owner)), asking its
 * owner to destroy it, until the total fits. Exit profiles kept by the daemon take part as
 * released chunks owned by the daemon (CTL_OWNER_DAEMON).
 *
 * Sans-I/O and single-threaded: updates go in, destroy requests come out in a
 * struct ctl_actions for the caller to send. Input comes from other processes: every
 * update is validated, and an invalid one returns -EBADMSG with a reason (the caller drops
 * that child) without changing any state. Design invariants 1 and 2 (design.md §7) are
 * this module's contract.
 */
#ifndef FLEETPROF_DAEMON_CONTROLLER_H
#define FLEETPROF_DAEMON_CONTROLLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTL_OWNER_DAEMON       0            /* owner id of daemon-held data (exit profiles) */
#define CTL_MAX_BYTES          (1ull << 40) /* no process reports more memory than 1 TiB */
#define CTL_MAX_NEW_PER_UPDATE 65536        /* newly released chunks in one update */
#define CTL_FUTURE_SLACK_NS    (2ull * 1000 * 1000 * 1000) /* clock skew tolerated */
#define CTL_LOG_MAX            65536 /* controller log entries kept (oldest dropped) */

struct ctl; /* opaque */

struct ctl_chunk {
    uint64_t done_ns;
    uint64_t bytes;
};

/* One ChunkManagerUpdate as the child sent it (arrays borrowed for the call). */
struct ctl_update {
    bool final;
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t oldest_done_ns; /* 0 = none */
    const struct ctl_chunk *newly_released;
    size_t newly_released_count;
};

/* What the caller must do after an update: ask owners to destroy released chunks at or
 * before a time (one request per owner, with the newest time evicted), and drop
 * daemon-owned entries (exit profiles) with the given ids. */
struct ctl_destroy {
    int32_t owner;
    uint64_t done_ns;
};
struct ctl_actions {
    struct ctl_destroy destroy[64];
    size_t destroy_count;
    bool more; /* destroy[] overflowed: call ctl_evict() again after sending these */
};

/* Controller log entry (becomes profilingLog): +1 chunk released, -1 chunk evicted,
 * 0 update without a new chunk. */
struct ctl_log_entry {
    int32_t owner;
    int8_t delta;
    uint64_t time_ns;
};

struct ctl_owner_status {
    int32_t owner;
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t released_chunks;
    uint64_t last_update_ns;
    uint64_t evicted_chunks;
};

struct ctl_totals {
    uint64_t global_limit;
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t released_chunks;
    uint64_t owners;
    uint64_t evicted_chunks;
    uint64_t rejected_updates;
};

/* A controller keeping unreleased + released under global_limit_bytes (> 0).
 * Returns 0, -EINVAL or -ENOMEM. */
int ctl_new(uint64_t global_limit_bytes, struct ctl **ret_ctl);
struct ctl *ctl_free(struct ctl *c);

/* Applies an update from owner (> 0), at now_ns, then evicts while over the limit.
 * A Final update forgets the owner (as ctl_remove). Returns 0; -EBADMSG for an update
 * that cannot be true (*ret_reason says why; nothing changed); -ENOMEM. */
int ctl_update(struct ctl *c, int32_t owner, const struct ctl_update *u, uint64_t now_ns,
               struct ctl_actions *ret_actions, const char **ret_reason);

/* Forgets an owner (disconnect or Final): its bytes leave the totals. */
void ctl_remove(struct ctl *c, int32_t owner, uint64_t now_ns);

/* Adds a daemon-owned released chunk (an exit profile of bytes, received at done_ns)
 * identified by its done_ns, then evicts while over the limit. Daemon-owned evictions
 * are reported with owner CTL_OWNER_DAEMON: the caller drops the data stored under that
 * done_ns and every older one. Returns 0 or -ENOMEM. */
int ctl_add_owned(struct ctl *c, uint64_t done_ns, uint64_t bytes, uint64_t now_ns,
                  struct ctl_actions *ret_actions);
/* Removes a daemon-owned chunk the caller dropped on its own (consumed by a gather). */
void ctl_remove_owned(struct ctl *c, uint64_t done_ns);

/* Evicts while over the limit (after an earlier call reported `more`). */
void ctl_evict(struct ctl *c, uint64_t now_ns, struct ctl_actions *ret_actions);

/* The oldest done time of data alive anywhere but in the daemon (0 = none): exit
 * profiles received before it have outlived everything else and expire. */
uint64_t ctl_oldest_child_done_ns(const struct ctl *c);

void ctl_get_totals(const struct ctl *c, struct ctl_totals *ret);
/* Fills up to max owners' statuses (in no particular order); returns the number of
 * owners, which may exceed max. */
size_t ctl_get_owners(const struct ctl *c, struct ctl_owner_status *out, size_t max);
bool ctl_get_owner(const struct ctl *c, int32_t owner, struct ctl_owner_status *ret);

/* The log, oldest first; *ret_dropped counts entries lost to CTL_LOG_MAX. */
const struct ctl_log_entry *ctl_log(const struct ctl *c, size_t *ret_count, uint64_t *ret_dropped);

#endif /* FLEETPROF_DAEMON_CONTROLLER_H */
