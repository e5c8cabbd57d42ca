/* daemon/recover.c - profiles built from children's chunk regions on the workers, and the
 * regions kept for that.
 *
 * A build: a child that died without writing its profile (SIGKILL, a crash, the OOM killer),
 * a short-lived child that left its exit profile there (ChunkManagerUpdate.exit_in_region),
 * an image's life before its exec. The building itself is profile/region-image.c's; the
 * region, daemon/region.c's.
 *
 * Kept regions (below, "linger"): the region of a child whose connection ended while it
 * lives on. A child loses its connection and lives on when the program took the connection's
 * descriptor (dup2, close_range) or the daemon dropped it; it reconnects at its next tick,
 * or never (it cannot get a descriptor, or was dropped). Killed meanwhile, its samples would
 * be lost: nobody else holds its region. So the daemon keeps the region of such a child
 * (its connection, now without ipc, stays in d->conns as CONN_DEAD) until one of:
 *  - the same process says Hello again: its new connection brings the region back; the
 *    kept one is let go, or built first when the process exec'd meanwhile (its earlier
 *    image's life is in it);
 *  - the process is gone: its profile is rebuilt from the region as for any death, unless
 *    the process wrote its own to a file as it ended (the region's profile_written);
 *  - the daemon closes.
 * Whether it is gone is read off /proc on a timer, and the process is known by its start
 * time as well as its pid, so a pid reused meanwhile is not taken for it. A capture checks
 * first, so that one killed just before it is among its answers.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buffer/region.h"
#include "daemon/core.h"
#include "daemon/daemon-internal.h"
#include "daemon/daemon.h"
#include "daemon/groups.h"
#include "daemon/workers.h"
#include "json/writer.h"
#include "profile/region-image.h"
#include "profile/symbolize-local.h"
#include "profile/symbols.h"

/* The daemon keeps a worker's scratch image between exit profiles only up to this. */
#define EXIT_IMAGE_KEPT_BYTES ((size_t)4 << 20)

/* ---- building a profile on the workers ------------------------------------------- */

/* What a build job carries: everything it needs, owned, nothing of the connection. */
struct build_job {
    struct worker_job job;
    struct conn *c; /* the loop's: kept by its caller until done (c->building) */
    daemon_built_cb *cb;
    enum daemon_build_kind kind;
    int32_t pid;
    char name[64];
    int fd;                           /* a duplicate of the child's region descriptor, the job's */
    uint64_t limit;                   /* region_limit() of the daemon, taken on the loop */
    struct prof_group_totals *groups; /* owned: its group totals (exit builds), n_groups */
    size_t n_groups;
    uint64_t slow_event_ns;
    /* The result, written by run(): */
    int r;
    char *json;
    size_t len;
    uint64_t build_us;
    struct prof_recovery rec;
};

/* A profile built from a region with the worker's symbol cache, as one JSON text in *ret_json
 * (malloc'd, the caller's) and *ret_len: a dead child's whole copy (mem, len), or a
 * short-lived child's region, its exit profile left there (fd, mem NULL). */
static int to_json(struct worker_scratch *scratch, const uint8_t *mem, size_t len, int fd,
                   uint64_t limit, const struct prof_region_groups *groups,
                   struct prof_recovery *rec, char **ret_json, size_t *ret_len)
{
    struct prof_symbolizer symbolizer;
    struct json_writer *w = NULL;
    int r = json_writer_new_memory(&w);

    if (r == 0) {
        worker_symbolizer(scratch, &symbolizer);
        r = mem ? prof_region_recover(mem, len, "shared memory", &symbolizer, w, rec)
                : prof_region_exit_profile(fd, limit, &scratch->image, &scratch->image_cap, groups,
                                           &symbolizer, w, rec);
    }
    if (r == 0)
        r = json_writer_finish(w);
    if (r == 0)
        r = json_writer_copy_to(w, ret_json);
    if (r == 0)
        *ret_len = json_writer_length(w);
    json_writer_free(w);
    return r;
}

/* On a worker thread. */
static void build_run(struct worker_job *job, struct worker_scratch *scratch)
{
    struct build_job *b = (struct build_job *)job;
    uint64_t start_ns = daemon__now_ns();
    struct buf_region_header h;
    uint8_t *mem = NULL;
    size_t len = 0;

    if (b->kind == DAEMON_BUILD_EXIT) {
        struct prof_region_groups groups = {b->groups, b->n_groups, b->slow_event_ns};

        b->r = to_json(scratch, NULL, 0, b->fd, b->limit, &groups, &b->rec, &b->json, &b->len);
        if (scratch->image_cap > EXIT_IMAGE_KEPT_BYTES) { /* an unusual one: not kept */
            free(scratch->image);
            scratch->image = NULL;
            scratch->image_cap = 0;
        }
    } else {
        /* Copied whole first: the process is gone, but whoever else holds the memfd is not. */
        b->r = prof_region_read_whole(b->fd, b->limit, &mem, &len);
        if (b->r == 0 && buf_region_read_header(mem, len, &h) < 0)
            b->r = -EBADMSG;
        if (b->r == 0)
            b->r = to_json(scratch, mem, len, -1, b->limit, NULL, &b->rec, &b->json, &b->len);
        free(mem);
    }
    b->build_us = (daemon__now_ns() - start_ns) / 1000;
}

/* On the loop: says what happened, then hands the profile to whoever asked. */
static void build_done(struct worker_job *job, bool ran)
{
    struct build_job *b = (struct build_job *)job;
    struct daemon *d = b->c->d;
    struct daemon_built out = {.kind = b->kind, .pid = b->pid, .name = b->name};
    char how[200];

    if (!ran)
        b->r = -ESHUTDOWN;
    (void)close(b->fd);
    how[0] = '\0';
    if (b->r == 0 && b->kind == DAEMON_BUILD_RECOVERY && b->rec.execd) {
        (void)snprintf(how, sizeof(how),
                       "exec'd into %.100s, %" PRIu64 " entries from %" PRIu64 " chunks, %" PRIu64
                       " corrupt chunks, %" PRIu64 " torn bytes",
                       b->rec.execd_into[0] ? b->rec.execd_into : "an unknown program",
                       b->rec.blocks, b->rec.chunks, b->rec.corrupt_chunks, b->rec.torn_bytes);
        daemon__log(d, DAEMON_LOG_INFO,
                    "child %d (%s): its life before the exec rebuilt from its chunks in %" PRIu64
                    " us: %s",
                    (int)b->pid, b->name, b->build_us, how);
    } else if (b->r == 0 && b->kind == DAEMON_BUILD_RECOVERY && b->rec.exited) {
        (void)snprintf(how, sizeof(how),
                       "ended after it left the daemon, %" PRIu64 " entries from %" PRIu64
                       " chunks, built in %" PRIu64 " us",
                       b->rec.blocks, b->rec.chunks, b->build_us);
        daemon__log(d, DAEMON_LOG_INFO,
                    "child %d (%s): exit profile built from its chunk region: %s", (int)b->pid,
                    b->name, how);
    } else if (b->r == 0 && b->kind == DAEMON_BUILD_RECOVERY) {
        (void)snprintf(how, sizeof(how),
                       "%s, %" PRIu64 " entries from %" PRIu64 " chunks, %" PRIu64
                       " corrupt chunks, %" PRIu64 " torn bytes",
                       b->rec.crash_signal ? prof_signal_name(b->rec.crash_signal)
                                           : "killed (no crash recorded)",
                       b->rec.blocks, b->rec.chunks, b->rec.corrupt_chunks, b->rec.torn_bytes);
        daemon__log(d, DAEMON_LOG_INFO,
                    "child %d (%s): profile recovered from its chunks in %" PRIu64 " us: %s",
                    (int)b->pid, b->name, b->build_us, how);
    } else if (b->r == 0) {
        (void)snprintf(how, sizeof(how),
                       "%" PRIu64 " entries from %" PRIu64 " chunks, %" PRIu64
                       " corrupt chunks, %" PRIu64 " torn bytes, built in %" PRIu64 " us",
                       b->rec.blocks, b->rec.chunks, b->rec.corrupt_chunks, b->rec.torn_bytes,
                       b->build_us);
        daemon__log(d, DAEMON_LOG_INFO,
                    "child %d (%s): exit profile built from its chunk region: %s", (int)b->pid,
                    b->name, how);
    } else if (b->r == -ESHUTDOWN) {
        daemon__log(d, DAEMON_LOG_WARNING,
                    "child %d (%s): its profile was not built from its chunk region: the daemon "
                    "is closing",
                    (int)b->pid, b->name);
    } else if (b->kind == DAEMON_BUILD_RECOVERY) {
        daemon__log(d, DAEMON_LOG_WARNING,
                    "child %d (%s) ended without a profile, and its chunks could not be read "
                    "back: %s",
                    (int)b->pid, b->name,
                    b->r == -EBADMSG ? "its region is not a chunk region" : strerror(-b->r));
    } else if (b->kind == DAEMON_BUILD_EXIT) {
        daemon__log(d, DAEMON_LOG_WARNING,
                    "child %d (%s) left its exit profile in its chunk region, and it could not "
                    "be built: %s",
                    (int)b->pid, b->name,
                    b->r == -E2BIG     ? "it holds more than a short-lived child's profile"
                    : b->r == -ENODATA ? "no description of its end"
                    : b->r == -EBADMSG ? "its region is not a chunk region"
                                       : strerror(-b->r));
    }
    out.execd = b->r == 0 && b->rec.execd;
    out.exited = b->r == 0 && b->rec.exited;
    out.result = b->r;
    out.json = b->r == 0 ? b->json : NULL;
    out.len = b->len;
    out.how = how;
    b->cb(b->c, &out);
    free(out.json); /* NULL when the callback took it */
    fleet_groups_totals_free(b->groups, b->n_groups);
    free(b);
}

bool daemon__region_build(struct conn *c, enum daemon_build_kind kind, daemon_built_cb *cb)
{
    struct daemon *d = c->d;
    struct build_job *b;
    int fd;

    if (c->region_fd < 0 || !d->workers) {
        if (kind == DAEMON_BUILD_EXIT)
            daemon__log(d, DAEMON_LOG_WARNING,
                        "child %d (%s) left its exit profile in its chunk region, and it could "
                        "not be built: the daemon does not hold its region",
                        (int)c->pid, c->name);
        return false;
    }
    /* A kept region knows its owner by its start time too (c->start_ticks): a pid taken by
     * another process since is not its owner living on. */
    if (kind == DAEMON_BUILD_RECOVERY && !daemon__process_gone(c->pid, c->start_ticks) &&
        !daemon__region_execd(c->region_fd)) {
        daemon__log(d, DAEMON_LOG_DEBUG,
                    "child %d (%s) left but lives on (it reconnects, or execs): nothing to "
                    "recover",
                    (int)c->pid, c->name);
        return false;
    }
    b = calloc(1, sizeof(*b));
    fd = b ? fcntl(c->region_fd, F_DUPFD_CLOEXEC, 3) : -1;
    if (fd < 0) {
        daemon__log(d, DAEMON_LOG_WARNING, "child %d (%s): its profile cannot be built: %s",
                    (int)c->pid, c->name, strerror(b ? errno : ENOMEM));
        free(b);
        return false;
    }
    b->job.run = build_run;
    b->job.done = build_done;
    b->c = c;
    b->cb = cb;
    b->kind = kind;
    b->pid = c->pid;
    (void)snprintf(b->name, sizeof(b->name), "%s", c->name);
    b->fd = fd;
    b->limit = daemon__region_limit(d);
    /* Its group totals, from its GroupStats (the last came before its Final): the exit
     * profile's meta, as the process would have written them. */
    if (kind == DAEMON_BUILD_EXIT) {
        int n = fleet_groups_proc_totals(d->groups, c->groups, &b->groups, &b->slow_event_ns);

        b->n_groups = n > 0 ? (size_t)n : 0;
    }
    workers_submit(d->workers, &b->job);
    return true;
}

/* ---- regions kept for children away (linger) --------------------------------------- */

/* How often a kept region's owner is looked for: its death is noticed at most this late
 * (a capture looks at once). */
#define LINGER_CHECK_MS 100

static void linger_forget(struct daemon *d, struct conn *c)
{
    c->lingering = false;
    d->lingering--;
    if (!d->lingering && d->linger_timer_open)
        (void)uv_timer_stop(&d->linger_timer);
}

/* Frees a kept connection nothing is built from. */
static void linger_free(struct daemon *d, struct conn *c)
{
    daemon__region_release(c);
    daemon__conn_unlink(d, c);
    free(c);
}

/* Names the children c's owner forked after it gave the program its threads at the process
 * limit (buf_region_header.unprofiled_pids): they start no profiler, and no connection
 * tells of them. Each once; the header is another process's data, so only pids are taken
 * from it, and a count past the list is said as a number. */
static void name_unprofiled_children(struct daemon *d, struct conn *c)
{
    struct buf_region_header h;
    uint32_t count;

    if (c->region_fd < 0 || pread(c->region_fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
        h.magic != BUF_REGION_MAGIC || !h.slots_given_up)
        return;
    count = h.unprofiled_count < BUF_REGION_UNPROFILED_MAX ? h.unprofiled_count
                                                           : BUF_REGION_UNPROFILED_MAX;
    for (; c->unprofiled_named < count; c->unprofiled_named++) {
        int32_t pid = h.unprofiled_pids[c->unprofiled_named];

        if (pid <= 0)
            break; /* being written: the next look takes it */
        daemon__departure_never(d, pid, c->name,
                                "it was forked after its parent gave the profiler's threads to "
                                "the program at its process limit (ulimit -u), and runs "
                                "without the profiler");
    }
    if (h.unprofiled_count > BUF_REGION_UNPROFILED_MAX &&
        c->unprofiled_named == BUF_REGION_UNPROFILED_MAX) {
        c->unprofiled_named++; /* said once */
        daemon__log(d, DAEMON_LOG_WARNING,
                    "child %d (%s) forked %u more children without the profiler than its "
                    "region lists (%u): they are not named",
                    (int)c->pid, c->name, h.unprofiled_count - BUF_REGION_UNPROFILED_MAX,
                    BUF_REGION_UNPROFILED_MAX);
    }
}

/* The owner of c's kept region is gone. */
static void linger_died(struct daemon *d, struct conn *c)
{
    linger_forget(d, c);
    name_unprofiled_children(d, c);
    if (daemon__region_profile_written(c->region_fd)) {
        daemon__log(d, DAEMON_LOG_INFO,
                    "child %d (%s) ended while disconnected, and wrote its profile itself",
                    (int)c->pid, c->name);
        daemon__departure_add(d, c, NULL);
        linger_free(d, c);
        return;
    }
    daemon__log(d, DAEMON_LOG_INFO,
                "child %d (%s) ended while disconnected: its profile is rebuilt from its region",
                (int)c->pid, c->name);
    c->building = daemon__region_build(c, DAEMON_BUILD_RECOVERY, d->linger_built);
    if (c->building)
        return; /* freed by the build's callback */
    daemon__departure_add(d, c, NULL);
    linger_free(d, c);
}

void daemon__linger_check(struct daemon *d)
{
    struct conn *c = d->conns, *next;

    for (; d->lingering && c; c = next) {
        next = c->next;
        if (!c->lingering)
            continue;
        if (daemon__process_gone(c->pid, c->start_ticks))
            linger_died(d, c);
        else
            name_unprofiled_children(d, c);
    }
}

static void on_linger_timer(uv_timer_t *timer)
{
    daemon__linger_check(timer->data);
}

bool daemon__linger_begin(struct conn *c, daemon_built_cb *built)
{
    struct daemon *d = c->d;
    uint64_t start;

    if (d->closing || !d->linger_timer_open || c->region_fd < 0 || !c->pid ||
        !daemon__process_start(c->pid, &start))
        return false;
    if (!d->lingering)
        (void)uv_timer_start(&d->linger_timer, on_linger_timer, LINGER_CHECK_MS, LINGER_CHECK_MS);
    d->linger_built = built;
    d->lingering++;
    c->lingering = true;
    c->start_ticks = start;
    c->kind = CONN_DEAD;
    c->ipc = NULL;
    daemon__pid_map_remove(d, c); /* its next Hello is a new child */
    daemon__log(d, DAEMON_LOG_INFO,
                "child %d (%s) disconnected and lives on: its region is kept until it "
                "reconnects or ends",
                (int)c->pid, c->name);
    return true;
}

void daemon__linger_end(struct daemon *d, int32_t pid)
{
    struct conn *c = d->conns, *next;

    for (; d->lingering && c; c = next) {
        next = c->next;
        if (!c->lingering || c->pid != pid)
            continue;
        linger_forget(d, c);
        /* Its earlier image's life, when it exec'd while disconnected. */
        if (daemon__region_execd(c->region_fd)) {
            c->building = daemon__region_build(c, DAEMON_BUILD_RECOVERY, d->linger_built);
            if (c->building)
                continue;
        }
        daemon__log(d, DAEMON_LOG_DEBUG, "child %d (%s) reconnected", (int)c->pid, c->name);
        linger_free(d, c);
    }
}

void daemon__linger_close(struct daemon *d)
{
    struct conn *c = d->conns, *next;

    for (; d->lingering && c; c = next) {
        next = c->next;
        if (c->lingering) {
            linger_forget(d, c);
            linger_free(d, c);
        }
    }
}

static void on_linger_timer_closed(uv_handle_t *handle)
{
    struct daemon *d = handle->data;

    d->linger_timer_open = false;
    daemon__maybe_finish_close(d);
}

void daemon__linger_init(struct daemon *d)
{
    if (uv_timer_init(d->loop, &d->linger_timer) < 0)
        return; /* a disconnected child's region is let go at once, as before */
    d->linger_timer.data = d;
    d->linger_timer_open = true;
    uv_unref((uv_handle_t *)&d->linger_timer);
}

void daemon__linger_timer_close(struct daemon *d)
{
    if (d->linger_timer_open && !uv_is_closing((uv_handle_t *)&d->linger_timer))
        uv_close((uv_handle_t *)&d->linger_timer, on_linger_timer_closed);
}
