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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

    if (!d->opt.log)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    d->opt.log(d->opt.log_userdata, level, line);
}

/* Children by pid: a destroy request names its owner by pid, and a scan of every connection
 * for each one was the daemon's largest user-space cost per update with a large fleet. */
static size_t pid_bucket(const struct daemon *d, int32_t pid)
{
    return ((uint32_t)pid * 2654435761u) & (d->by_pid_buckets - 1);
}

struct conn *daemon__child_by_pid(struct daemon *d, int32_t pid)
{
    if (!d->by_pid_buckets)
        return NULL;
    for (struct conn *c = d->by_pid[pid_bucket(d, pid)]; c; c = c->pid_next)
        if (c->kind == CONN_CHILD && c->pid == pid)
            return c;
    return NULL;
}

/* Keeps at most two per bucket on average. */
int daemon__pid_map_add(struct daemon *d, struct conn *c)
{
    size_t b;

    if (d->by_pid_count >= 2 * d->by_pid_buckets) {
        size_t count = d->by_pid_buckets ? d->by_pid_buckets * 2 : 64;
        struct conn **grown = calloc(count, sizeof(*grown));

        if (!grown)
            return -ENOMEM;
        free(d->by_pid);
        d->by_pid = grown;
        d->by_pid_buckets = count;
        for (struct conn *k = d->conns; k; k = k->next) {
            if (k->in_pid_map) {
                b = pid_bucket(d, k->pid);
                k->pid_next = d->by_pid[b];
                d->by_pid[b] = k;
            }
        }
    }
    b = pid_bucket(d, c->pid);
    c->pid_next = d->by_pid[b];
    d->by_pid[b] = c;
    c->in_pid_map = true;
    d->by_pid_count++;
    return 0;
}

void daemon__pid_map_remove(struct daemon *d, struct conn *c)
{
    if (c->in_pid_map) {
        struct conn **link = &d->by_pid[pid_bucket(d, c->pid)];

        while (*link != c)
            link = &(*link)->pid_next;
        *link = c->pid_next;
        c->in_pid_map = false;
        d->by_pid_count--;
    }
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
