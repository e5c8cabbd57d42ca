/* daemon/recover.c - profiles built from children's chunk regions on the workers: a child
 * that died without writing one (SIGKILL, a crash, the OOM killer), and a short-lived child
 * that left its exit profile there (ChunkManagerUpdate.exit_in_region). The building itself is
 * profile/region-image.c's; this file holds a connected child's region (accept, map for
 * evictions, release) and the jobs.
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
#include "daemon/workers.h"
#include "json/writer.h"
#include "profile/region-image.h"
#include "profile/symbolize-local.h"
#include "profile/symbols.h"

/* The daemon keeps a worker's scratch image between exit profiles only up to this. */
#define EXIT_IMAGE_KEPT_BYTES ((size_t)4 << 20)

/* The largest region a child of this daemon can make: its buffer limit's chunks, the few a
 * manager holds besides, in slots, and the header. */
static uint64_t region_limit(const struct daemon *d)
{
    uint64_t chunk = d->opt.chunk_bytes ? d->opt.chunk_bytes : DAEMON_CHUNK_BYTES;
    uint64_t limit = d->opt.process_limit_bytes ? d->opt.process_limit_bytes : 64u << 20;

    /* Twice the limit covers slot rounding and a child's own larger limit up to that. */
    return BUF_REGION_HEADER_BYTES + 2 * (limit + 8 * (chunk + 2 * 4096u));
}

/* ---- a connected child's region ------------------------------------------------------ */

/* Maps the header page of c's region for evictions. The file cannot shrink (sealed, checked
 * by the caller) and fstat said it holds the page, so the mapping never faults; the child
 * can still scribble on the page, which only changes what it reads back itself. */
static void map_eviction_page(struct conn *c, const struct stat *st)
{
    struct buf_region_header h;
    const char *why = NULL;
    void *page = MAP_FAILED;

    if ((uint64_t)st->st_size < BUF_REGION_PAGE_BYTES)
        why = "shorter than its header page";
    else
        page = mmap(NULL, BUF_REGION_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, c->region_fd,
                    0);
    if (!why && page == MAP_FAILED)
        why = strerror(errno); /* e.g. sealed against writes */
    if (!why) {
        memcpy(&h, page, sizeof(h));
        if (buf_region_header_check(&h, (uint64_t)st->st_size) < 0)
            why = "its header is not a chunk region's";
    }
    if (why) {
        daemon__log(c->d, DAEMON_LOG_INFO,
                    "child %d (%s): evictions go by message, not through its region: %s",
                    (int)c->pid, c->name, why);
        if (page != MAP_FAILED)
            (void)munmap(page, BUF_REGION_PAGE_BYTES);
        return;
    }
    c->evict_page = page;
    /* Whatever the page says now is the child's business: ours starts from nothing. */
    c->evict_ns = 0;
}

void daemon__region_accept(struct conn *c, int fd, bool evictions)
{
    struct daemon *d = c->d;
    const char *why = NULL;
    struct stat st;
    int seals;

    /* A region the child could shrink would fault a reader that mapped it; one it could
     * grow without bound would make us copy without bound. */
    seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        why = "not a memory file";
    else if (seals < 0 || !(seals & F_SEAL_SHRINK))
        why = "not sealed against shrinking (F_SEAL_SHRINK), so reading it could fault";
    else if ((uint64_t)st.st_size > region_limit(d))
        why = "larger than a region of its buffer limit can be";
    if (why) {
        daemon__log(d, DAEMON_LOG_WARNING,
                    "child %d (%s): chunk region refused: %s; it will not be recovered if it "
                    "dies",
                    (int)c->pid, c->name, why);
        (void)close(fd);
        return;
    }
    c->region_fd = fd;
    if (evictions)
        map_eviction_page(c, &st);
}

bool daemon__region_evict(struct conn *c, uint64_t done_ns)
{
    if (!c->evict_page)
        return false;
    /* No message and no wake-up: the child's sampler reads the point on its next tick. Per
     * owner the controller's points only grow; kept so whatever it says, as the child
     * ignores a point that goes backwards. */
    if (done_ns > c->evict_ns) {
        c->evict_ns = done_ns;
        buf_region_header_store_eviction(c->evict_page, done_ns);
    }
    c->region_evictions++;
    c->d->stats.region_evictions++;
    return true;
}

void daemon__region_release(struct conn *c)
{
    if (c->evict_page) {
        (void)munmap(c->evict_page, BUF_REGION_PAGE_BYTES);
        c->evict_page = NULL;
    }
    if (c->region_fd >= 0) {
        (void)close(c->region_fd);
        c->region_fd = -1;
    }
}

/* ---- building a profile on the workers ------------------------------------------- */

/* What a build job carries: everything it needs, owned, nothing of the connection. */
struct build_job {
    struct worker_job job;
    struct conn *c; /* the loop's: kept by its caller until done (c->building) */
    daemon_built_cb *cb;
    enum daemon_build_kind kind;
    int32_t pid;
    char name[64];
    int fd;         /* a duplicate of the child's region descriptor, the job's */
    uint64_t limit; /* region_limit() of the daemon, taken on the loop */
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
                   uint64_t limit, struct prof_recovery *rec, char **ret_json, size_t *ret_len)
{
    struct prof_symbolizer symbolizer;
    struct json_writer *w = NULL;
    int r = json_writer_new_memory(&w);

    if (r == 0) {
        worker_symbolizer(scratch, &symbolizer);
        r = mem ? prof_region_recover(mem, len, "shared memory", &symbolizer, w, rec)
                : prof_region_exit_profile(fd, limit, &scratch->image, &scratch->image_cap,
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

/* Whether the region's owner marked its exec (its connection closed in the exec): that
 * image's life is in its chunks, though the process lives on. */
bool daemon__region_execd(int fd)
{
    struct buf_region_header h;

    return pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == BUF_REGION_MAGIC &&
           h.exec_ns != 0;
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
        b->r = to_json(scratch, NULL, 0, b->fd, b->limit, &b->rec, &b->json, &b->len);
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
            b->r = to_json(scratch, mem, len, -1, b->limit, &b->rec, &b->json, &b->len);
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
    if (kind == DAEMON_BUILD_RECOVERY && !daemon__process_gone(c->pid, 0) &&
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
    b->limit = region_limit(d);
    workers_submit(d->workers, &b->job);
    return true;
}
