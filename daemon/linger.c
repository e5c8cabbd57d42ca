/* daemon/linger.c - the region of a child whose connection ended while it lives on.
 *
 * A child loses its connection and lives on when the program took the connection's
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
#include <unistd.h>

#include "buffer/region.h"
#include "daemon/core.h"
#include "daemon/daemon-internal.h"
#include "daemon/daemon.h"

/* How often a kept region's owner is looked for: its death is noticed at most this late
 * (a capture looks at once). */
#define LINGER_CHECK_MS 100

/* Reads the state, flags and start time (clock ticks since boot) of pid off /proc; false
 * when it has no entry. Only the process's own entry is read. */
static bool read_stat(int32_t pid, char *ret_state, unsigned long *ret_flags,
                      unsigned long long *ret_start)
{
    char path[64], buf[1024];
    const char *p;
    ssize_t n;
    int fd;

    (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof(buf) - 1);
    (void)close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    *ret_state = '?';
    *ret_flags = 0;
    *ret_start = 0;
    p = strrchr(buf, ')'); /* the name may hold anything, even ") " */
    /* state ppid pgrp session tty tpgid flags, then 12 more, then starttime (field 22) */
    if (p)
        (void)sscanf(p + 1,
                     " %c %*d %*d %*d %*d %*d %lu %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                     "%*d %llu",
                     ret_state, ret_flags, ret_start);
    return true;
}

bool daemon__process_gone(int32_t pid, uint64_t start_ticks)
{
    unsigned long long start;
    unsigned long flags;
    char state;

    if (!read_stat(pid, &state, &flags, &start))
        return true;
    /* The kernel closes a dying process's descriptors after it marks it exiting
     * (PF_EXITING), so a death is seen as such even before the process is a zombie. */
    if (state == 'Z' || state == 'X' || (flags & 0x4u /* PF_EXITING */))
        return true;
    return start_ticks && start && start != start_ticks; /* its pid, another process */
}

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

/* Whether the owner of the region in fd wrote its own profile as it ended. */
static bool region_profile_written(int fd)
{
    struct buf_region_header h;

    return pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == BUF_REGION_MAGIC &&
           h.profile_written != 0;
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
    if (region_profile_written(c->region_fd)) {
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
    unsigned long long start;
    unsigned long flags;
    char state;

    if (d->closing || !d->linger_timer_open || c->region_fd < 0 || !c->pid ||
        !read_stat(c->pid, &state, &flags, &start))
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
