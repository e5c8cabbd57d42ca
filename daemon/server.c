/* daemon/server.c - fleetprofd's connections: children and tools (see daemon.h).
 *
 * A connection is a child once it says Hello, a tool once it asks for status; anything
 * else first is a protocol error. A child is long-polled: the daemon keeps one
 * AwaitNextChunkManagerUpdate outstanding, the child answers when its chunk manager
 * changed, and the answer goes through the controller, whose destroy requests are sent
 * to the chunks' owners. The poll is a standing one: a child that knows it answers every
 * change under it (saying so in each update), so an update costs the daemon one read and
 * no poll; an older child answers once, and is polled again after each update. Misbehaviour (an
 * update nobody asked for, an impossible update, a message only the daemon may send) drops the
 * child with a logged reason; the others are never affected. Memory per connection is bounded by
 * the ipc layer's frame and queue caps.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "common/grow.h"
#include "common/macros.h"
#include "daemon/controller.h"
#include "daemon/core.h"
#include "daemon/daemon-internal.h"
#include "daemon/daemon.h"
#include "daemon/groups.h"
#include "daemon/pace.h"
#include "daemon/workers.h"
#include "ipc/ipc.h"
#include "ipc/uv-ipc.h"
#include "proto/fleetprof-protocol.h"

#define UNSOLICITED_UPDATES_MAX 16 /* updates without a poll before the child is dropped */
#define GROUP_REFUSALS_LOGGED   8  /* refused GroupStats logged per child; the rest counted */

/* A profile the workers built from c's region (daemon__region_build()): a capture waiting
 * for c takes it as its answer, else it is kept for the next capture. A connection that ended
 * meanwhile was kept for this, and is freed now. */
static void on_built(struct conn *c, struct daemon_built *b)
{
    struct daemon *d = c->d;

    c->building = false;
    if (b->json && (b->execd || b->exited)) { /* an exit profile, not a death */
        if (!daemon__gather_on_exit_profile(c, b->json, b->len, b->how))
            daemon__exit_profile_add(d, c, b->json, b->len, b->how, b->execd);
        b->json = NULL;
    } else if (b->json && b->kind == DAEMON_BUILD_RECOVERY) {
        if (!daemon__gather_on_recovered(c, b->json, b->len, b->how)) {
            daemon__departure_add(d, c, b->how);
            daemon__exit_profile_add(d, c, b->json, b->len, NULL, false);
        }
        b->json = NULL;
    } else if (b->json) {
        if (!daemon__gather_on_exit_profile(c, b->json, b->len, b->how))
            daemon__exit_profile_add(d, c, b->json, b->len, b->how, b->execd);
        b->json = NULL;
    } else {
        daemon__departure_add(d, c, NULL); /* the build said why (logged) */
    }
    if (c->ipc)
        return;
    daemon__gather_on_child_gone(c); /* a capture still waiting for it gives up on it */
    daemon__conn_unlink(d, c);
    free(c);
    daemon__maybe_finish_close(d);
}

/* The ipc layer calls this once, whatever closed the connection. */
static void on_conn_close(struct ipc_conn *ipc, int error, const char *reason, void *userdata)
{
    struct conn *c = userdata;
    struct daemon *d = c->d;
    bool lingers = false;

    (void)ipc;
    /* Died without a profile: the workers rebuild it from its chunks, off the loop. Lives
     * on without its connection: its region is kept until it reconnects or dies (recover.c). */
    if (c->pid && !c->exit_profile_received && !d->closing && c->region_fd >= 0 &&
        !c->final_update && !c->building) {
        lingers = d->linger_timer_open && !daemon__process_gone(c->pid, 0) &&
                  !daemon__region_execd(c->region_fd);
        if (!lingers)
            c->building = daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built);
    }
    /* It exec'd: its new image reports, or is named with why not (judged now, while it may
     * still be there to read; an image that ended already is named as one that ended before
     * its profiler started). */
    if (c->kind == CONN_CHILD && c->pid && !d->closing && c->region_fd >= 0 &&
        daemon__region_execd(c->region_fd)) {
        struct exec_handoff *h = &d->exec_handoffs[d->exec_handoff_next++ % DAEMON_EXEC_HANDOFFS];

        if (daemon__process_start(c->pid, &h->start_ticks)) {
            h->pid = c->pid;
            h->cpu_ns = daemon__region_exec_cpu(c->region_fd);
        } else {
            h->pid = 0;
        }
        daemon__census_execd(c);
    }
    if (c->building) {
        /* A capture waiting for it waits for the build (on_built). */
    } else if (c->kind == CONN_CHILD || (c->kind == CONN_DEAD && c->pid)) {
        daemon__gather_on_child_gone(c);
        if (c->pid && !c->exit_profile_received && !d->closing && !lingers)
            daemon__departure_add(d, c, NULL);
    } else {
        if (c->kind == CONN_NEW)
            daemon__census_close(c);
        daemon__gather_on_tool_gone(c);
    }
    daemon__region_updates_leave(c);
    if (!lingers)
        daemon__region_release(c);
    if (c->exit_len)
        daemon__log(d, DAEMON_LOG_WARNING,
                    "exit profile of child %d (%s) dropped: the process ended after sending "
                    "%zu bytes of it",
                    (int)c->pid, c->name, c->exit_len);
    free(c->exit_data);
    fleet_groups_leave(d->groups, c->groups); /* its totals stay in the fleet's */
    c->groups = NULL;
    if (c->kind == CONN_CHILD) {
        char evictions[96];

        ctl_remove(d->ctl, c->pid, daemon__now_ns());
        d->stats.children--;
        /* How the global limit reached it: a user (and a test) can tell a child served
         * through its region from one served by messages. */
        (void)snprintf(evictions, sizeof(evictions),
                       "evictions: %" PRIu64 " through its region, %" PRIu64 " by message",
                       c->region_evictions, c->destroy_requests);
        if (error < 0 && !d->closing)
            daemon__log(d, DAEMON_LOG_WARNING, "child %d (%s) disconnected: %s; %s", (int)c->pid,
                        c->name, reason ? reason : strerror(-error), evictions);
        else
            daemon__log(d, DAEMON_LOG_INFO, "child %d (%s) left; %s", (int)c->pid, c->name,
                        evictions);
    } else if (error < 0 && c->kind != CONN_DEAD && !d->closing) {
        daemon__log(d, DAEMON_LOG_WARNING, "connection from pid %d dropped: %s", (int)c->peer.pid,
                    reason ? reason : strerror(-error));
    }
    c->exit_data = NULL;
    c->exit_len = 0;
    if (lingers && daemon__linger_begin(c, on_built))
        return;    /* freed when it reconnects or ends */
    if (lingers) { /* gone just now after all */
        c->building = daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built);
        if (!c->building) {
            daemon__departure_add(d, c, NULL);
            daemon__region_release(c);
        }
    }
    if (c->building) { /* freed by on_built; a later image of its pid may connect meanwhile */
        c->kind = CONN_DEAD;
        c->ipc = NULL;
        daemon__pid_map_remove(d, c);
        return;
    }
    daemon__conn_unlink(d, c);
    free(c);
    daemon__maybe_finish_close(d);
}

static void send_poll(struct conn *c)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__AwaitNextChunkManagerUpdate msg = FLEETPROF__AWAIT_NEXT_CHUNK_MANAGER_UPDATE__INIT;

    msg.id = ++c->d->next_id;
    msg.standing = true;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_AWAIT_NEXT_CHUNK_MANAGER_UPDATE;
    env.await_next_chunk_manager_update = &msg;
    if (daemon__send(c, &env) == 0)
        c->poll_id = msg.id;
}

/* The CPU the image of pid that exec'd into this one charged the thread that exec'd (0:
 * none): taken, so that a later image does not take it again. */
static uint64_t exec_cpu_accounted(struct daemon *d, int32_t pid)
{
    uint64_t start;

    for (size_t k = 0; k < DAEMON_EXEC_HANDOFFS; k++) {
        struct exec_handoff *h =
                &d->exec_handoffs[(d->exec_handoff_next - 1 - k) % DAEMON_EXEC_HANDOFFS];

        if (h->pid != pid)
            continue;
        h->pid = 0;
        /* Read only for a pid that exec'd: most Hellos find none. */
        return daemon__process_start(pid, &start) && h->start_ticks == start ? h->cpu_ns : 0;
    }
    return 0;
}

static void on_hello(struct conn *c, const Fleetprof__Hello *h)
{
    struct daemon *d = c->d;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Welcome w = FLEETPROF__WELCOME__INIT;
    Fleetprof__ClockReference clock = FLEETPROF__CLOCK_REFERENCE__INIT;
    char reason[256];

    if (ipc_version_check(h->version, reason, sizeof(reason)) < 0) {
        Fleetprof__Refuse refuse = FLEETPROF__REFUSE__INIT;

        refuse.request_id = h->id;
        refuse.version = FLEETPROF_PROTOCOL_VERSION;
        refuse.reason = reason;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_REFUSE;
        env.refuse = &refuse;
        (void)ipc_conn_send(c->ipc, &env);
        daemon__log(d, DAEMON_LOG_WARNING, "refused pid %d: %s", (int)c->peer.pid, reason);
        c->kind = CONN_DEAD;
        ipc_conn_shutdown(c->ipc); /* flushes the Refuse, then closes */
        return;
    }
    if (daemon__child_by_pid(d, (int32_t)c->peer.pid)) {
        daemon__drop(c, "a second connection from the same process");
        return;
    }
    if (d->lingering) /* back after a lost connection: this one brings its region again */
        daemon__linger_end(d, (int32_t)c->peer.pid);
    c->pid = (int32_t)c->peer.pid;
    if (daemon__pid_map_add(d, c) < 0) {
        c->pid = 0;
        daemon__drop(c, "out of memory for a new child");
        return;
    }
    c->kind = CONN_CHILD;
    c->ppid = h->ppid;
    w.exec_cpu_accounted_ns = exec_cpu_accounted(d, c->pid);
    c->start_epoch_ms = (double)h->start_epoch_ms;
    (void)snprintf(c->name, sizeof(c->name), "%s", h->name && *h->name ? h->name : "?");
    (void)snprintf(c->sampling_timer, sizeof(c->sampling_timer), "%s",
                   h->sampling_timer ? h->sampling_timer : "");
    (void)snprintf(c->sampling_timer_why, sizeof(c->sampling_timer_why), "%s",
                   h->sampling_timer_why ? h->sampling_timer_why : "");
    c->state = FLEETPROF__CHILD_STATE__CHILD_STATE_RUNNING;
    c->groups = fleet_groups_join(d->groups, c->pid, h->start_ns, c->name);
    {
        int fd = ipc_conn_take_received_fd(c->ipc);

        if (fd >= 0)
            daemon__region_accept(c, fd, h->region_evictions);
        else if (h->chunk_region)
            daemon__log(d, DAEMON_LOG_INFO,
                        "child %d (%s) meant to share its chunk region, none arrived: it will "
                        "not be recovered if it dies",
                        (int)c->pid, c->name);
    }
    d->stats.children++;
    d->stats.children_total++;

    clock.monotonic_ns = daemon__now_ns();
    clock.epoch_ms = daemon__epoch_ms();
    w.request_id = h->id;
    w.version = FLEETPROF_PROTOCOL_VERSION;
    w.interval_ns = d->opt.interval_ns;
    w.process_limit_bytes = d->opt.process_limit_bytes;
    w.chunk_bytes = d->opt.chunk_bytes;
    w.features = FLEETPROF__FEATURE_BIT__FEATURE_STACKS | FLEETPROF__FEATURE_BIT__FEATURE_CPU |
                 FLEETPROF__FEATURE_BIT__FEATURE_MARKERS |
                 FLEETPROF__FEATURE_BIT__FEATURE_COUNTERS | FLEETPROF__FEATURE_BIT__FEATURE_MEMORY |
                 FLEETPROF__FEATURE_BIT__FEATURE_LABELS;
    w.stackwalk = (Fleetprof__StackwalkMode)d->opt.stackwalk;
    w.clock = &clock;
    w.start = true;
    w.region_evictions = c->evict_page != NULL;
    w.update_hold_ns = d->opt.update_hold_ns == DAEMON_UPDATE_HOLD_OFF ? 0 : d->opt.update_hold_ns;
    /* A region we hold: a short-lived child may leave its exit profile there for us. */
    c->exit_in_region = h->exit_in_region && c->region_fd >= 0;
    w.exit_in_region = c->exit_in_region;
    w.updates_in_region = h->updates_in_region && daemon__region_updates_accept(c);
    env.msg_case = FLEETPROF__ENVELOPE__MSG_WELCOME;
    env.welcome = &w;
    daemon__log(d, DAEMON_LOG_INFO, "child %d (%s, parent %d) connected", (int)c->pid, c->name,
                (int)c->ppid);
    if (daemon__send(c, &env) == 0)
        send_poll(c);
}

/* The child ended and left its exit profile in its region (it published the description of
 * its end first): built now, while the chunks are as it left them, and kept like a received
 * one. Failures are logged; the child then counts as ended without one. */
static void on_exit_in_region(struct conn *c)
{
    if (c->exit_profile_received || c->building)
        return; /* it sent one already: a second is a protocol slip, not a profile */
    if (!c->exit_in_region) {
        daemon__log(c->d, DAEMON_LOG_WARNING,
                    "child %d (%s) left its exit profile in a chunk region the daemon did not "
                    "offer to read",
                    (int)c->pid, c->name);
        return;
    }
    if (!daemon__region_build(c, DAEMON_BUILD_EXIT, on_built))
        return;                      /* said why; it ends as a process without an exit profile */
    c->exit_profile_received = true; /* on its way: built by a worker (on_built) */
    c->building = true;
}

static void on_update(struct conn *c, const Fleetprof__ChunkManagerUpdate *m)
{
    struct daemon *d = c->d;
    struct ctl_chunk stack_chunks[64], *chunks = stack_chunks;
    struct ctl_update u;
    bool applied;

    if (m->final) {
        c->final_update = true; /* its chunks are gone: nothing to recover */
        /* Unsolicited Finals are allowed: a manager can go away at any time. */
        ctl_remove(d->ctl, c->pid, daemon__now_ns());
        d->stats.updates++;
        if (m->exit_in_region)
            on_exit_in_region(c);
        return;
    }
    /* What it published in its region came first. */
    if (!daemon__region_updates_take(c))
        return;
    if (m->request_id == 0 || m->request_id != c->poll_id) {
        /* An update nobody asked for: tolerated a few times (a poll crossing a reply),
         * then the child is flooding. */
        if (++c->unsolicited > UNSOLICITED_UPDATES_MAX)
            daemon__drop(c, "chunk-manager updates nobody asked for (flooding)");
        return;
    }
    if (!m->standing) /* a child that answers once: polled again below */
        c->poll_id = 0;
    if (m->n_newly_released > ARRAY_SIZE(stack_chunks)) {
        if (m->n_newly_released > CTL_MAX_NEW_PER_UPDATE) {
            daemon__drop(c, "too many newly released chunks in one update");
            return;
        }
        chunks = malloc(m->n_newly_released * sizeof(*chunks));
        if (!chunks) {
            daemon__drop(c, "out of memory for its update");
            return;
        }
    }
    for (size_t i = 0; i < m->n_newly_released; i++)
        chunks[i] = (struct ctl_chunk){m->newly_released[i]->done_ns, m->newly_released[i]->bytes};
    u = (struct ctl_update){false,  m->unreleased_bytes, m->released_bytes, m->oldest_done_ns,
                            chunks, m->n_newly_released};
    applied = daemon__update_apply(c, &u);
    if (chunks != stack_chunks)
        free(chunks);
    if (!applied)
        return;
    if (c->kind == CONN_CHILD && !c->poll_id) /* sending destroys may have dropped a peer */
        send_poll(c);
}

/* CPU time of a live child that never sent GroupStats: utime + stime of /proc/PID/stat. */
static uint64_t proc_cpu_ns(int32_t pid, void *userdata)
{
    char path[64], buf[1024];
    unsigned long long utime, stime;
    const char *p;
    ssize_t n;
    long hz = sysconf(_SC_CLK_TCK);
    int fd;

    (void)userdata;
    (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    (void)close(fd);
    if (n <= 0 || hz <= 0)
        return 0;
    buf[n] = '\0';
    /* The name in parentheses may hold spaces and parentheses: fields follow the last ')'. */
    p = strrchr(buf, ')');
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                     &stime) != 2)
        return 0;
    return (utime + stime) * (1000000000ull / (unsigned long long)hz);
}

/* A child's GroupStats: applied, or refused with a logged reason (the child stays: its
 * profile is worth more than its groups). */
static void on_group_stats(struct conn *c, const Fleetprof__GroupStats *m)
{
    struct daemon *d = c->d;
    const char *why = NULL;
    int r = fleet_groups_apply(d->groups, c->groups, m, &why);

    if (r == 0) {
        d->stats.group_stats++;
        return;
    }
    d->stats.group_stats_refused++;
    if (++c->groups_refused > GROUP_REFUSALS_LOGGED)
        return;
    daemon__log(d, DAEMON_LOG_WARNING, "child %d (%s): group stats refused: %s%s", (int)c->pid,
                c->name, r == -EBADMSG ? why : strerror(-r),
                c->groups_refused == GROUP_REFUSALS_LOGGED ? " (further refusals not logged)" : "");
}

static void on_groups_request(struct conn *c, const Fleetprof__GroupsRequest *req)
{
    struct daemon *d = c->d;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    struct fleet_groups_report rep;

    if (fleet_groups_report(d->groups, req->per_process_group, proc_cpu_ns, NULL, &rep) < 0) {
        daemon__drop(c, "out of memory for a groups report");
        return;
    }
    rep.msg.request_id = req->id;
    rep.msg.time_ns = daemon__now_ns();
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GROUPS_REPORT;
    env.groups_report = &rep.msg;
    (void)daemon__send(c, &env);
    fleet_groups_report_done(&rep);
}

static void on_status(struct conn *c, const Fleetprof__StatusRequest *req)
{
    struct fleet_groups_report groups;
    struct daemon *d = c->d;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__StatusReport rep = FLEETPROF__STATUS_REPORT__INIT;
    Fleetprof__StatusTotals totals = FLEETPROF__STATUS_TOTALS__INIT;
    Fleetprof__ChildStatus *items = NULL, **ptrs = NULL;
    struct prof_symbols_stats symbols;
    struct ctl_totals t;
    size_t n = 0;
    uint64_t now = daemon__now_ns();

    if (fleet_groups_report(d->groups, NULL, NULL, NULL, &groups) < 0) {
        daemon__drop(c, "out of memory for a status report");
        return;
    }
    for (struct conn *k = d->conns; k; k = k->next)
        n += k->kind == CONN_CHILD;
    if (n) {
        items = calloc(n, sizeof(*items));
        ptrs = calloc(n, sizeof(*ptrs));
        if (!items || !ptrs) {
            free(items);
            free(ptrs);
            fleet_groups_report_done(&groups);
            daemon__drop(c, "out of memory for a status report");
            return;
        }
    }
    n = 0;
    for (struct conn *k = d->conns; k; k = k->next) {
        struct ctl_owner_status s = {0};
        Fleetprof__ChildStatus *it = &items[n];

        if (k->kind != CONN_CHILD)
            continue;
        fleetprof__child_status__init(it);
        (void)ctl_get_owner(d->ctl, k->pid, &s);
        it->pid = k->pid;
        it->ppid = k->ppid;
        it->name = k->name;
        it->unreleased_bytes = s.unreleased_bytes;
        it->released_bytes = s.released_bytes;
        it->chunks = (uint32_t)s.released_chunks;
        it->last_update_age_ms =
                (now - (s.last_update_ns ? s.last_update_ns : k->connect_ns)) / 1000000u;
        it->state = k->state;
        it->destroy_requests = k->destroy_requests;
        it->region_evictions = k->region_evictions;
        it->region_updates = k->region_updates;
        it->sampling_timer = k->sampling_timer;
        it->sampling_timer_why = k->sampling_timer_why;
        ptrs[n++] = it;
    }
    ctl_get_totals(d->ctl, &t);
    totals.unreleased_bytes = t.unreleased_bytes;
    totals.released_bytes = t.released_bytes;
    totals.children = (uint32_t)n;
    totals.evicted_chunks = t.evicted_chunks;
    totals.destroy_requests = d->stats.destroy_requests;
    totals.region_evictions = d->stats.region_evictions;
    totals.region_updates = d->stats.region_updates;
    totals.dropped_children = d->stats.dropped_children;
    totals.rejected_updates = t.rejected_updates;
    totals.exit_profiles = (uint32_t)d->stats.exit_profiles;
    totals.exit_profile_bytes = d->stats.exit_profile_bytes;
    totals.building = (uint32_t)workers_busy(d->workers);
    symbols = daemon__symbols_stats(d);
    totals.symbol_modules_loaded = symbols.modules_loaded;
    totals.symbol_modules_names_only = symbols.modules_names_only;
    totals.symbol_requests = d->stats.symbol_requests;
    rep.request_id = req->id;
    rep.n_children = n;
    rep.children = ptrs;
    rep.totals = &totals;
    rep.global_limit_bytes = t.global_limit;
    rep.n_groups = groups.msg.n_groups;
    rep.groups = groups.msg.groups;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_STATUS_REPORT;
    env.status_report = &rep;
    (void)daemon__send(c, &env);
    free(items);
    free(ptrs);
    fleet_groups_report_done(&groups);
}

#define EXIT_PROFILE_MAX_BYTES (512u << 20) /* one process's JSON; beyond: "too large" */

/* A piece of the exit profile a child sends as it ends. */
static void on_exit_piece(struct conn *c, const Fleetprof__ProfileData *m)
{
    size_t n = m->data.len;

    if (m->error && *m->error) {
        daemon__log(c->d, DAEMON_LOG_WARNING, "child %d could not make its exit profile: %s",
                    (int)c->pid, m->error);
        goto reset;
    }
    if (m->offset != c->exit_len || c->exit_len + n > EXIT_PROFILE_MAX_BYTES) {
        daemon__log(c->d, DAEMON_LOG_WARNING, "exit profile of child %d dropped: %s", (int)c->pid,
                    m->offset != c->exit_len ? "pieces out of order" : "too large");
        goto reset;
    }
    if (FLEETPROF_GROW(c->exit_data, c->exit_cap, c->exit_len + n) < 0) {
        daemon__log(c->d, DAEMON_LOG_WARNING, "exit profile of child %d dropped: out of memory",
                    (int)c->pid);
        goto reset;
    }
    if (n) /* an empty piece: exit_data may still be NULL */
        memcpy(c->exit_data + c->exit_len, m->data.data, n);
    c->exit_len += n;
    if (!m->last)
        return;
    c->exit_profile_received = true;
    if (!daemon__gather_on_exit_profile(c, c->exit_data, c->exit_len, NULL))
        daemon__exit_profile_add(c->d, c, c->exit_data, c->exit_len, NULL, false);
    c->exit_data = NULL;
    c->exit_len = c->exit_cap = 0;
    return;
reset:
    free(c->exit_data);
    c->exit_data = NULL;
    c->exit_len = c->exit_cap = 0;
}

static void on_message(struct ipc_conn *ipc, const Fleetprof__Envelope *env, void *userdata)
{
    struct conn *c = userdata;

    (void)ipc;
    if (c->kind == CONN_DEAD)
        return;
    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_HELLO:
        if (c->kind != CONN_NEW)
            daemon__drop(c, "Hello twice");
        else
            on_hello(c, env->hello);
        return;
    case FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST:
        if (c->kind == CONN_CHILD) {
            daemon__drop(c, "a child asked for status");
            return;
        }
        c->kind = CONN_TOOL;
        on_status(c, env->status_request);
        return;
    case FLEETPROF__ENVELOPE__MSG_CHUNK_MANAGER_UPDATE:
        if (c->kind != CONN_CHILD)
            daemon__drop(c, "chunk-manager update before Hello");
        else
            on_update(c, env->chunk_manager_update);
        return;
    case FLEETPROF__ENVELOPE__MSG_PROFILE_DATA:
        if (c->kind != CONN_CHILD)
            daemon__drop(c, "profile data before Hello");
        else if (env->profile_data->exit)
            on_exit_piece(c, env->profile_data);
        else
            daemon__gather_on_profile_data(c, env->profile_data);
        return;
    case FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS:
        if (c->kind == CONN_CHILD)
            daemon__gather_on_progress(c, env->gather_progress);
        return;
    case FLEETPROF__ENVELOPE__MSG_CAPTURE_REQUEST:
        if (c->kind == CONN_CHILD) {
            daemon__drop(c, "a child asked for a capture");
            return;
        }
        c->kind = CONN_TOOL;
        daemon__capture_request(c, env->capture_request);
        return;
    case FLEETPROF__ENVELOPE__MSG_SYMBOLIZE:
        if (c->kind != CONN_CHILD)
            daemon__drop(c, "symbolize before Hello");
        else
            daemon__symbolize(c, env->symbolize);
        return;
    case FLEETPROF__ENVELOPE__MSG_GROUP_STATS:
        if (c->kind != CONN_CHILD)
            daemon__drop(c, "group stats before Hello");
        else
            on_group_stats(c, env->group_stats);
        return;
    case FLEETPROF__ENVELOPE__MSG_SPAWNED:
        if (c->kind != CONN_CHILD)
            daemon__drop(c, "spawned pids before Hello");
        else
            daemon__census_spawned(c, env->spawned->pids, env->spawned->n_pids);
        return;
    case FLEETPROF__ENVELOPE__MSG_GROUPS_REQUEST:
        if (c->kind == CONN_CHILD) {
            daemon__drop(c, "a child asked for the fleet's groups");
            return;
        }
        c->kind = CONN_TOOL;
        on_groups_request(c, env->groups_request);
        return;
    case FLEETPROF__ENVELOPE__MSG_ACK:
    case FLEETPROF__ENVELOPE__MSG_ERROR:
        return; /* replies to Start/Stop/Pause/Resume: nothing to do yet */
    default:
        if (c->kind == CONN_NEW)
            daemon__drop(c, "did not start with Hello or a tool request");
        else
            daemon__log(c->d, DAEMON_LOG_DEBUG, "pid %d sent %s: ignored", (int)c->peer.pid,
                        ipc_msg_name(env->msg_case));
        return;
    }
}

static int on_accept(struct ipc_listener *listener, struct ipc_conn *ipc,
                     const struct ipc_peer *peer, void *userdata)
{
    static const struct ipc_conn_callbacks cbs = {.on_message = on_message,
                                                  .on_close = on_conn_close,
                                                  .on_piece_begin = daemon__gather_piece_begin,
                                                  .on_piece_bytes = daemon__gather_piece_bytes,
                                                  .on_piece_end = daemon__gather_piece_end};
    struct daemon *d = userdata;
    struct conn *c;

    (void)listener;
    if (d->closing)
        return -ESHUTDOWN;
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->d = d;
    c->ipc = ipc;
    c->region_fd = -1;
    c->peer = *peer;
    c->connect_ns = daemon__now_ns();
    daemon__conn_link(d, c);
    daemon__census_accept(c);
    ipc_conn_set_callbacks(ipc, &cbs, c);
    return 0;
}

static void on_refused(struct ipc_listener *listener, const struct ipc_peer *peer, int error,
                       const char *reason, void *userdata)
{
    (void)listener;
    (void)error;
    daemon__log(userdata, DAEMON_LOG_WARNING, "refused pid %d (uid %u): %s", (int)peer->pid,
                (unsigned)peer->uid, reason);
}

static void on_listen_error(struct ipc_listener *listener, int error, const char *reason,
                            void *userdata)
{
    (void)listener;
    daemon__log(userdata, DAEMON_LOG_ERROR, "accepting a connection failed: %s (%s)", reason,
                strerror(-error));
}

/* The end of daemon_close(), once the core finds nothing left (daemon__maybe_finish_close). */
static void finish_close(struct daemon *d)
{
    void (*done)(void *) = d->close_done;
    void *userdata = d->close_userdata;

    daemon__exit_profiles_free(d);
    free(d->departures);
    fleetprof_map_free(&d->by_pid);
    daemon__symbols_free(d);
    fleet_groups_free(d->groups);
    ctl_free(d->ctl);
    free(d->socket_path);
    free(d);
    if (done)
        done(userdata);
}

static int open_listener(struct daemon *d, struct ipc_listener **ret)
{
    static const struct ipc_listener_callbacks cbs = {
            .on_accept = on_accept, .on_refused = on_refused, .on_error = on_listen_error};
    struct ipc_listener_options lo = {.allow_any_uid = d->opt.allow_any_uid};

    return ipc_listener_open(d->loop, d->socket_path, &lo, &cbs, d, ret);
}

/* A socket removed under a running daemon (a cleaner of /tmp, a hasty rm) lets no new
 * process join, and nothing else would notice: made again, and said. */
#define SOCKET_WATCH_MS 1000

static void on_socket_watch(uv_timer_t *timer)
{
    struct daemon *d = timer->data;
    struct ipc_listener *fresh = NULL;
    int r;

    if (d->closing || !d->listener || ipc_listener_intact(d->listener))
        return;
    r = open_listener(d, &fresh);
    if (r == 0) {
        ipc_listener_close(d->listener); /* leaves the new socket's path alone */
        d->listener = fresh;
        d->socket_lost_said = false;
        daemon__log(d, DAEMON_LOG_WARNING,
                    "the socket %s was removed: made again, new processes can join",
                    d->socket_path);
    } else if (!d->socket_lost_said) {
        d->socket_lost_said = true;
        daemon__log(d, DAEMON_LOG_ERROR,
                    "the socket %s was removed or replaced and cannot be made again (%s): new "
                    "processes cannot join this daemon",
                    d->socket_path, strerror(-r));
    }
}

static void on_socket_watch_closed(uv_handle_t *handle)
{
    struct daemon *d = handle->data;

    d->socket_watch_open = false;
    daemon__maybe_finish_close(d);
}

/* What a capture does first: builds the kept regions whose owners are gone (recover.c), and
 * judges the processes still in their census grace, so that it names those that will not
 * report. */
static void before_capture(struct daemon *d)
{
    daemon__linger_check(d);
    daemon__census_settle(d, true);
}

/* The performance groups' clock: the daemon's, the one the children's reports are on. */
static uint64_t groups_clock(void *userdata)
{
    (void)userdata;
    return daemon__now_ns();
}

int daemon_new(uv_loop_t *loop, const struct daemon_options *options, struct daemon **ret_daemon)
{
    struct daemon *d;
    int r;

    if (!loop || !options || !options->socket_path)
        return -EINVAL;
    d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->loop = loop;
    d->finish_close = finish_close;
    d->opt = *options;
    if (!d->opt.global_limit_bytes)
        d->opt.global_limit_bytes = 256ull << 20;
    if (!d->opt.process_limit_bytes)
        d->opt.process_limit_bytes = 64ull << 20;
    if (!d->opt.chunk_bytes)
        d->opt.chunk_bytes = DAEMON_CHUNK_BYTES;
    if (!d->opt.interval_ns)
        d->opt.interval_ns = 1000000;
    if (!d->opt.child_timeout_ns)
        d->opt.child_timeout_ns = 1000000000;
    if (!d->opt.update_hold_ns)
        d->opt.update_hold_ns = DAEMON_UPDATE_HOLD_NS;
    if (!d->opt.pace_ns)
        d->opt.pace_ns = DAEMON_PACE_NS;
    if (d->opt.chunk_bytes < (64u << 10) || d->opt.chunk_bytes > d->opt.process_limit_bytes ||
        d->opt.global_limit_bytes < DAEMON_GLOBAL_LIMIT_MIN(d->opt.chunk_bytes)) {
        free(d);
        return -EINVAL;
    }
    d->socket_path = strdup(options->socket_path);
    d->opt.socket_path = d->socket_path;
    r = d->socket_path ? ctl_new(d->opt.global_limit_bytes, &d->ctl) : -ENOMEM;
    if (r < 0)
        goto err_free;
    r = fleet_groups_new(&d->groups);
    if (r < 0)
        goto err_ctl;
    fleet_groups_set_clock(d->groups, groups_clock, NULL);
    r = workers_new(loop, DAEMON_WORKERS, DAEMON_SYMBOL_CACHE_BYTES, &d->workers);
    if (r < 0)
        goto err_ctl;
    r = open_listener(d, &d->listener);
    if (r < 0)
        goto err_workers;
    if (d->opt.pace_ns != DAEMON_PACE_OFF) {
        r = loop_pace_new(loop, d->opt.pace_ns, &d->pace);
        if (r < 0) /* served unpaced: every message still read, each on its own wake-up */
            daemon__log(d, DAEMON_LOG_WARNING, "cannot pace the loop: %s", strerror(-r));
    }
    daemon__linger_init(d);
    d->exit_profile_dropped = daemon__gather_exit_profile_dropped;
    d->before_capture = before_capture;
    if (uv_timer_init(loop, &d->socket_watch) == 0) {
        d->socket_watch.data = d;
        d->socket_watch_open = true;
        (void)uv_timer_start(&d->socket_watch, on_socket_watch, SOCKET_WATCH_MS, SOCKET_WATCH_MS);
        uv_unref((uv_handle_t *)&d->socket_watch);
    }
    d->stats.global_limit_bytes = d->opt.global_limit_bytes;
    d->start_ns = daemon__now_ns();
    d->start_epoch_ms = (double)daemon__epoch_ms();
    daemon__log(d, DAEMON_LOG_INFO, "listening on %s (global limit %llu MiB)", d->socket_path,
                (unsigned long long)(d->opt.global_limit_bytes >> 20));
    *ret_daemon = d;
    return 0;

err_workers:
    workers_close(d->workers, NULL, NULL); /* freed at the loop's next turn */
err_ctl:
    d->groups = fleet_groups_free(d->groups);
    d->ctl = ctl_free(d->ctl);
err_free:
    free(d->socket_path);
    free(d);
    return r;
}

/* What no capture will write now: the exit profiles kept since the last one, and the
 * processes that ended without one. Said, never dropped without a word. */
static void log_unwritten(struct daemon *d)
{
    char pids[256];
    size_t used = 0, n = 0;

    pids[0] = '\0';
    for (const struct exit_profile *e = d->exit_profiles; e; e = e->next, n++)
        if (used < sizeof(pids) - 32)
            used += (size_t)snprintf(pids + used, sizeof(pids) - used, "%s%d (%s)",
                                     used ? ", " : "", (int)e->pid, e->name);
    for (size_t i = 0; i < d->departure_count; i++, n++)
        if (used < sizeof(pids) - 32)
            used += (size_t)snprintf(pids + used, sizeof(pids) - used, "%s%d (%s)",
                                     used ? ", " : "", (int)d->departures[i].pid,
                                     d->departures[i].name);
    n += d->departures_dropped;
    if (n)
        daemon__log(d, DAEMON_LOG_ERROR,
                    "closing with %zu process%s ended since the last capture and in none: %s%s; "
                    "capture before stopping the daemon to keep them",
                    n, n == 1 ? "" : "es", pids, used >= sizeof(pids) - 32 ? ", ..." : "");
}

static void on_workers_closed(void *userdata)
{
    struct daemon *d = userdata;

    d->workers = NULL;
    daemon__maybe_finish_close(d);
}

void daemon_close(struct daemon *d, void (*done)(void *userdata), void *userdata)
{
    if (d->closing)
        return;
    d->closing = true;
    d->close_done = done;
    d->close_userdata = userdata;
    /* The builds first (waited for, or cancelled and named): what they give is listed next. */
    workers_close(d->workers, on_workers_closed, d);
    daemon__census_close_timer(d); /* judged now: named among the unwritten */
    log_unwritten(d);
    if (d->socket_watch_open && !uv_is_closing((uv_handle_t *)&d->socket_watch))
        uv_close((uv_handle_t *)&d->socket_watch, on_socket_watch_closed);
    ipc_listener_close(d->listener); /* also removes the socket file */
    d->listener = NULL;
    loop_pace_close(d->pace);
    d->pace = NULL;
    daemon__region_scan_close(d);
    daemon__linger_close(d);
    daemon__linger_timer_close(d);
    for (struct conn *c = d->conns; c; c = c->next) {
        if (c->kind == CONN_CHILD) {
            /* Children stop sampling, and learn from the closed socket that they are on
             * their own (they keep their data for FLEETPROF_DIR). */
            Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
            Fleetprof__Stop stop = FLEETPROF__STOP__INIT;

            stop.id = ++d->next_id;
            env.msg_case = FLEETPROF__ENVELOPE__MSG_STOP;
            env.stop = &stop;
            (void)ipc_conn_send(c->ipc, &env);
            ipc_conn_shutdown(c->ipc);
        } else if (c->kind != CONN_DEAD) {
            c->kind = CONN_DEAD;
            ipc_conn_close(c->ipc);
        }
    }
    daemon__maybe_finish_close(d);
}

void daemon_get_stats(const struct daemon *d, struct daemon_stats *ret)
{
    struct prof_symbols_stats symbols = daemon__symbols_stats(d);
    struct ctl_totals t;

    *ret = d->stats;
    ctl_get_totals(d->ctl, &t);
    ret->unreleased_bytes = t.unreleased_bytes;
    ret->released_bytes = t.released_bytes;
    ret->symbol_modules_loaded = symbols.modules_loaded;
    ret->symbol_modules_names_only = symbols.modules_names_only;
    ret->building = workers_busy(d->workers);
    ret->connecting = d->listener && ipc_listener_pending(d->listener) > 0;
    for (const struct conn *c = d->conns; c; c = c->next)
        ret->connecting += c->kind == CONN_NEW;
}
