/* daemon/core.c - the daemon's lower core: clock, log, the table of connections (children
 * by pid), sending and dropping.
 *
 * server.c (connections and their messages), gather.c (captures, exit profiles),
 * symbols-service.c and recover.c call down into it; it calls none of them. The one way up
 * is the end of a close: daemon__maybe_finish_close() calls the finish_close that server.c
 * set when it made the daemon.
 */
#include "daemon/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/map.h"
#include "daemon/controller.h"
#include "daemon/daemon-internal.h"
#include "daemon/daemon.h"
#include "ipc/uv-ipc.h"
#include "proto/fleetprof-protocol.h"

uint64_t daemon__now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t daemon__epoch_ms(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void daemon__log(struct daemon *d, enum daemon_log_level level, const char *fmt, ...)
{
    char line[512];
    va_list ap;

    if (!d->opt.log || level > d->opt.log_level)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    d->opt.log(d->opt.log_userdata, level, line);
}

/* Children by pid: a destroy request names its owner by pid, and a scan of every connection
 * for each one was the daemon's largest user-space cost per update with a large fleet.
 *
 * One entry per pid: server.c refuses a second Hello while a child of that pid is connected,
 * so a newer connection of the pid can only find there one that was dropped and is not yet
 * closed; it replaces it. Lookups skip any but children. */
static uint64_t pid_hash(int32_t pid)
{
    return fleetprof_map_mix64((uint32_t)pid);
}

struct conn *daemon__child_by_pid(struct daemon *d, int32_t pid)
{
    uint64_t v;
    struct conn *c;

    if (!fleetprof_map_find(&d->by_pid, pid_hash(pid), NULL, NULL, NULL, &v))
        return NULL;
    c = (struct conn *)(uintptr_t)v;
    return c->kind == CONN_CHILD ? c : NULL;
}

int daemon__pid_map_add(struct daemon *d, struct conn *c)
{
    int r = fleetprof_map_set(&d->by_pid, pid_hash(c->pid), NULL, NULL, NULL, (uintptr_t)c);

    if (r < 0)
        return r;
    c->in_pid_map = true;
    return 0;
}

void daemon__pid_map_remove(struct daemon *d, struct conn *c)
{
    uint64_t v;

    if (!c->in_pid_map)
        return;
    c->in_pid_map = false;
    /* A newer connection of the pid may have replaced c: that entry stays. */
    if (fleetprof_map_find(&d->by_pid, pid_hash(c->pid), NULL, NULL, NULL, &v) && v == (uintptr_t)c)
        (void)fleetprof_map_remove(&d->by_pid, pid_hash(c->pid), NULL, NULL, NULL);
}

void daemon__conn_unlink(struct daemon *d, struct conn *c)
{
    daemon__pid_map_remove(d, c);
    for (struct conn **p = &d->conns; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            return;
        }
    }
}

void daemon__conn_link(struct daemon *d, struct conn *c)
{
    c->next = d->conns;
    d->conns = c;
}

/* Drops a misbehaving peer: logged once here, the close callback only cleans up. */
void daemon__drop(struct conn *c, const char *why)
{
    struct daemon *d = c->d;

    if (c->kind == CONN_DEAD)
        return;
    if (c->kind == CONN_CHILD) {
        daemon__log(d, DAEMON_LOG_WARNING, "dropping child %d (%s): %s", (int)c->pid, c->name, why);
        d->stats.dropped_children++;
        ctl_remove(d->ctl, c->pid, daemon__now_ns());
        d->stats.children--;
    } else {
        daemon__log(d, DAEMON_LOG_WARNING, "dropping connection from pid %d: %s", (int)c->peer.pid,
                    why);
    }
    c->kind = CONN_DEAD;
    ipc_conn_close(c->ipc);
}

int daemon__send(struct conn *c, Fleetprof__Envelope *env)
{
    int r = ipc_conn_send(c->ipc, env);

    /* A peer that does not read (-ENOBUFS: its queue is full) is as good as gone. */
    if (r < 0)
        daemon__drop(c,
                     r == -ENOBUFS ? "not reading its messages (send queue full)" : strerror(-r));
    return r;
}

void daemon__maybe_finish_close(struct daemon *d)
{
    if (d->closing && !d->conns && !d->gather && !d->socket_watch_open && !d->linger_timer_open &&
        !d->workers && d->finish_close)
        d->finish_close(d);
}

/* ---- processes, off /proc ---------------------------------------------------------- */

/* Reads the state, parent, flags and start time (clock ticks since boot) of pid off /proc;
 * false when it has no entry. Only the process's own entry is read. */
static bool read_stat(int32_t pid, char *ret_state, int *ret_ppid, unsigned long *ret_flags,
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
    *ret_ppid = -1;
    *ret_flags = 0;
    *ret_start = 0;
    p = strrchr(buf, ')'); /* the name may hold anything, even ") " */
    /* state ppid pgrp session tty tpgid flags, then 12 more, then starttime (field 22) */
    if (p)
        (void)sscanf(p + 1,
                     " %c %d %*d %*d %*d %*d %lu %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                     "%*d %llu",
                     ret_state, ret_ppid, ret_flags, ret_start);
    return true;
}

bool daemon__process_gone(int32_t pid, uint64_t start_ticks)
{
    unsigned long long start;
    unsigned long flags;
    char state;
    int ppid;

    if (!read_stat(pid, &state, &ppid, &flags, &start))
        return true;
    /* The kernel closes a dying process's descriptors after it marks it exiting
     * (PF_EXITING), so a death is seen as such even before the process is a zombie. */
    if (state == 'Z' || state == 'X' || (flags & 0x4u /* PF_EXITING */))
        return true;
    return start_ticks && start && start != start_ticks; /* its pid, another process */
}

bool daemon__process_start(int32_t pid, uint64_t *ret_start_ticks)
{
    int32_t ppid;

    return daemon__process_parent(pid, &ppid, ret_start_ticks);
}

bool daemon__process_parent(int32_t pid, int32_t *ret_ppid, uint64_t *ret_start_ticks)
{
    unsigned long long start;
    unsigned long flags;
    char state;
    int ppid;

    if (!read_stat(pid, &state, &ppid, &flags, &start))
        return false;
    *ret_ppid = ppid;
    *ret_start_ticks = start;
    return true;
}

uint64_t daemon__boot_ticks(uint64_t monotonic_ns)
{
    struct timespec boot;
    uint64_t now = daemon__now_ns(), boot_ns;
    long hz = sysconf(_SC_CLK_TCK);

    /* The boot clock runs on through a suspend, the monotonic one does not: the difference
     * now is what to add. */
    (void)clock_gettime(CLOCK_BOOTTIME, &boot);
    boot_ns = (uint64_t)boot.tv_sec * 1000000000u + (uint64_t)boot.tv_nsec;
    if (hz <= 0)
        hz = 100;
    return (monotonic_ns + (boot_ns - now)) / (1000000000u / (uint64_t)hz);
}
