/* daemon/gather.c - one profile for the whole fleet: captures and exit profiles.
 *
 * A capture (design §6 "Gathering"): every live child is sent GatherProfile; the daemon's
 * own part (meta, profilingLog with the controller log) is written, then the stored exit
 * profiles, then each child's JSON as it completes, all into one memory writer (pieces are
 * spliced, never parsed). Every child timeout, pending children are asked for progress:
 * the first round counts as progress, later a child counts only if its progress value or
 * the bytes received from it changed since the previous ask; a round without any progress
 * ends the capture with what arrived. Late pieces are dropped. Finally profileGatheringLog
 * closes the root and a libuv worker writes the file (temp name, then rename).
 *
 * Exit profiles count against the global limit as daemon-owned released chunks: the
 * controller evicts the oldest when the fleet needs room; a capture also expires those
 * received before the oldest data still alive in any child.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/json-writer.h"
#include "child/profile/gecko.h"
#include "daemon/daemon-internal.h"

#define PIECE_TOTAL_MAX (512u << 20) /* one child's JSON; beyond it is "too large" */

struct pending {
    struct conn *conn; /* borrowed; NULL once the child is gone */
    int32_t pid;
    char name[64];
    char *data; /* pieces so far, owned */
    size_t len, cap;
    uint32_t progress; /* last GatherProgress value (raw fixed point) */
    uint32_t asked_progress;
    size_t asked_len;
    bool done;
};

struct gather {
    struct daemon *d;
    uint64_t id;
    char *path;
    char *product;
    struct conn *tool; /* a CaptureRequest's sender, or NULL (library use) */
    uint64_t tool_request;
    daemon_capture_progress_cb progress;
    daemon_capture_done_cb done;
    void *userdata;
    struct pending *pending;
    size_t count;
    uint32_t done_count, exit_profiles, processes, given_up;
    uint64_t bytes;
    struct json_writer *out;    /* the whole profile */
    struct json_writer *events; /* profileGatheringLog events: an open array */
    uv_timer_t timer;
    unsigned rounds;
    uv_work_t work;
    int write_error;
    char message[512];
    uint64_t file_bytes;
    uint64_t child_timeout_ns; /* the daemon's, or the capture request's own */
    bool finishing;
};

/* One profileGatheringLog event: [ms, "message"] or [ms, "message", pid]. */
__attribute__((format(printf, 3, 4))) static void event(struct gather *g, int32_t pid,
                                                        const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    json_writer_array_begin(g->events, NULL);
    json_writer_time_ms(g->events, NULL, (int64_t)(daemon__now_ns() - g->d->start_ns));
    json_writer_string(g->events, NULL, text);
    if (pid)
        json_writer_int(g->events, NULL, pid);
    json_writer_array_end(g->events);
    daemon__log(g->d, DAEMON_LOG_DEBUG, "capture: %s", text);
}

/* Exit profiles */

void daemon__exit_profiles_evict(struct daemon *d, uint64_t done_ns, const char *why)
{
    while (d->exit_profiles && d->exit_profiles->receipt_ns <= done_ns) {
        struct exit_profile *e = d->exit_profiles;

        d->exit_profiles = e->next;
        daemon__log(d, DAEMON_LOG_INFO, "exit profile of child %d (%s, %zu bytes) %s", (int)e->pid,
                    e->name, e->len, why);
        if (d->gather)
            event(d->gather, e->pid, "exit profile of child %d (%s) %s", (int)e->pid, e->name, why);
        d->stats.exit_profiles--;
        d->stats.exit_profile_bytes -= e->len;
        ctl_remove_owned(d->ctl, e->receipt_ns);
        free(e->json);
        free(e);
    }
}

void daemon__exit_profiles_free(struct daemon *d)
{
    while (d->exit_profiles) {
        struct exit_profile *e = d->exit_profiles;

        d->exit_profiles = e->next;
        free(e->json);
        free(e);
    }
}

void daemon__exit_profile_add(struct daemon *d, struct conn *c, char *json, size_t len)
{
    struct exit_profile *e, **tail;
    struct ctl_actions a;
    uint64_t now = daemon__now_ns();

    if (len == 0 || json[0] != '{') {
        daemon__log(d, DAEMON_LOG_WARNING, "exit profile of child %d is not a JSON object",
                    (int)c->pid);
        free(json);
        return;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        free(json);
        return;
    }
    e->pid = c->pid;
    (void)snprintf(e->name, sizeof(e->name), "%s", c->name);
    /* Receipt times name daemon-owned chunks: strictly increasing. */
    for (tail = &d->exit_profiles; *tail; tail = &(*tail)->next)
        if ((*tail)->receipt_ns >= now)
            now = (*tail)->receipt_ns + 1;
    e->receipt_ns = now;
    e->json = json;
    e->len = len;
    *tail = e;
    d->stats.exit_profiles++;
    d->stats.exit_profile_bytes += len;
    daemon__log(d, DAEMON_LOG_INFO, "kept the exit profile of child %d (%s, %zu bytes)",
                (int)c->pid, c->name, len);
    if (ctl_add_owned(d->ctl, e->receipt_ns, len, now, &a) == 0)
        daemon__apply_actions(d, &a);
}

void daemon__departure_add(struct daemon *d, const struct conn *c)
{
    struct departure *dep;

    if (d->departure_count == DEPARTURES_MAX) {
        d->departures_dropped++;
        return;
    }
    if (!d->departures) {
        d->departures = calloc(DEPARTURES_MAX, sizeof(*d->departures));
        if (!d->departures) {
            d->departures_dropped++;
            return;
        }
    }
    dep = &d->departures[d->departure_count++];
    dep->pid = c->pid;
    (void)snprintf(dep->name, sizeof(dep->name), "%s", c->name);
    dep->time_ns = daemon__now_ns();
    daemon__log(d, DAEMON_LOG_INFO, "child %d (%s) ended without sending an exit profile",
                (int)c->pid, c->name);
}

/* Capture */

static struct pending *pending_of(struct gather *g, const struct conn *c)
{
    for (size_t i = 0; i < g->count; i++)
        if (g->pending[i].conn == c)
            return &g->pending[i];
    return NULL;
}

static void report_progress(struct gather *g)
{
    struct daemon_capture_progress p = {(uint32_t)g->count, g->done_count, g->exit_profiles,
                                        g->bytes};

    if (g->progress)
        g->progress(g->userdata, &p);
    if (g->tool) {
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__CaptureProgress msg = FLEETPROF__CAPTURE_PROGRESS__INIT;

        msg.request_id = g->tool_request;
        msg.done = g->done_count + g->exit_profiles;
        msg.total = (uint32_t)g->count + g->exit_profiles;
        msg.bytes = g->bytes;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_CAPTURE_PROGRESS;
        env.capture_progress = &msg;
        (void)ipc_conn_send(g->tool->ipc, &env);
    }
}

static void finish(struct gather *g);

static void mark_done(struct gather *g, struct pending *p)
{
    p->done = true;
    free(p->data);
    p->data = NULL;
    p->len = p->cap = 0;
    g->done_count++;
    report_progress(g);
    if (g->done_count == g->count)
        finish(g);
}

void daemon__gather_on_profile_data(struct conn *c, const Fleetprof__ProfileData *m)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;
    size_t n = m->data.len;

    if (!p || m->request_id != g->id || p->done) {
        daemon__log(c->d, DAEMON_LOG_DEBUG, "late profile data from child %d dropped", (int)c->pid);
        return;
    }
    if (m->error && *m->error) {
        event(g, p->pid, "child %d (%s) could not write its profile: %s", (int)p->pid, p->name,
              m->error);
        mark_done(g, p);
        return;
    }
    if (m->offset != p->len || p->len + n > PIECE_TOTAL_MAX) {
        event(g, p->pid, "child %d (%s) dropped: %s", (int)p->pid, p->name,
              m->offset != p->len ? "profile pieces out of order" : "profile too large");
        mark_done(g, p);
        return;
    }
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap : 1u << 16;
        char *grown;

        while (cap < p->len + n)
            cap *= 2;
        grown = realloc(p->data, cap);
        if (!grown) {
            event(g, p->pid, "child %d (%s) dropped: out of memory for its profile", (int)p->pid,
                  p->name);
            mark_done(g, p);
            return;
        }
        p->data = grown;
        p->cap = cap;
    }
    memcpy(p->data + p->len, m->data.data, n);
    p->len += n;
    g->bytes += n;
    if (!m->last)
        return;
    if (p->len == 0 || p->data[0] != '{') {
        event(g, p->pid, "child %d (%s) dropped: its profile is not a JSON object", (int)p->pid,
              p->name);
    } else {
        json_writer_splice_text(g->out, NULL, p->data, p->len);
        g->processes++;
        event(g, p->pid, "received %zu bytes from child %d (%s)", p->len, (int)p->pid, p->name);
    }
    mark_done(g, p);
}

void daemon__gather_on_progress(struct conn *c, const Fleetprof__GatherProgress *m)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;

    if (!p || p->done || m->gather_id != g->id)
        return;
    p->progress = m->proportion;
    if (m->proportion != UINT32_MAX)
        event(g, p->pid, "child %d (%s) is at %.0f%% (%s)", (int)p->pid, p->name,
              (double)m->proportion * 100.0 / (double)(1u << 31),
              m->location && *m->location ? m->location : "?");
}

void daemon__gather_on_child_gone(struct conn *c)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;

    if (!p)
        return;
    p->conn = NULL;
    if (!p->done) {
        event(g, p->pid,
              "child %d (%s) went away during the capture; its partial data (%zu "
              "bytes) was dropped",
              (int)p->pid, p->name, p->len);
        mark_done(g, p);
    }
}

void daemon__gather_on_tool_gone(struct conn *c)
{
    struct gather *g = c->d->gather;

    if (g && g->tool == c)
        g->tool = NULL;
}

static void on_round(uv_timer_t *t)
{
    struct gather *g = t->data;
    bool progressed = g->rounds == 0;
    char pids[512];
    size_t used = 0;

    g->rounds++;
    for (size_t i = 0; i < g->count; i++) {
        struct pending *p = &g->pending[i];

        if (!p->done && (p->progress != p->asked_progress || p->len != p->asked_len))
            progressed = true;
    }
    if (!progressed) {
        pids[0] = '\0';
        for (size_t i = 0; i < g->count; i++) {
            struct pending *p = &g->pending[i];

            if (p->done)
                continue;
            used += (size_t)snprintf(pids + used, used < sizeof(pids) ? sizeof(pids) - used : 0,
                                     "%s%d (%s)", used ? ", " : "", (int)p->pid, p->name);
            if (used >= sizeof(pids))
                used = sizeof(pids) - 1;
        }
        event(g, 0, "gave up waiting: no progress for %.0f ms from %s",
              (double)g->child_timeout_ns / 1e6, pids);
        for (size_t i = 0; i < g->count; i++) {
            struct pending *p = &g->pending[i];

            if (!p->done) {
                event(g, p->pid, "gave up on child %d (%s): no progress", (int)p->pid, p->name);
                g->given_up++;
                p->done = true;
                free(p->data);
                p->data = NULL;
                g->done_count++;
            }
        }
        finish(g);
        return;
    }
    for (size_t i = 0; i < g->count; i++) {
        struct pending *p = &g->pending[i];
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__GetGatherProfileProgress msg = FLEETPROF__GET_GATHER_PROFILE_PROGRESS__INIT;

        if (p->done || !p->conn)
            continue;
        p->asked_progress = p->progress;
        p->asked_len = p->len;
        msg.id = ++g->d->next_id;
        msg.gather_id = g->id;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS;
        env.get_gather_profile_progress = &msg;
        (void)ipc_conn_send(p->conn->ipc, &env);
    }
}

static int write_all(const char *data, size_t len, void *userdata)
{
    int fd = *(int *)userdata;

    while (len > 0) {
        ssize_t n = write(fd, data, len);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* On a libuv worker: the memory writer is this job's alone until after_write. */
static void write_file(uv_work_t *work)
{
    struct gather *g = work->data;
    char tmp[4200];
    int fd, r;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%llu", g->path, (int)getpid(),
                 (unsigned long long)g->id) >= (int)sizeof(tmp)) {
        g->write_error = -ENAMETOOLONG;
        (void)snprintf(g->message, sizeof(g->message), "output path too long");
        return;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        g->write_error = -errno;
        (void)snprintf(g->message, sizeof(g->message), "cannot create a file next to %.400s: %s",
                       g->path, strerror(errno));
        return;
    }
    r = json_writer_each_chunk(g->out, write_all, &fd);
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, g->path) < 0)
        r = -errno;
    if (r < 0) {
        (void)unlink(tmp);
        g->write_error = r;
        (void)snprintf(g->message, sizeof(g->message), "cannot write %.400s: %s", g->path,
                       strerror(-r));
        return;
    }
    g->file_bytes = json_writer_length(g->out);
}

static void free_gather(uv_handle_t *timer)
{
    struct gather *g = timer->data;
    struct daemon *d = g->d;

    for (size_t i = 0; i < g->count; i++)
        free(g->pending[i].data);
    free(g->pending);
    json_writer_free(g->out);
    json_writer_free(g->events);
    free(g->path);
    free(g->product);
    free(g);
    d->gather = NULL;
    daemon__maybe_finish_close(d);
}

static void complete(struct gather *g)
{
    struct daemon_capture_result res = {0};

    res.error = g->write_error;
    res.message = g->write_error ? g->message : NULL;
    res.path = g->path;
    res.bytes = g->file_bytes;
    res.processes = g->processes;
    res.given_up = g->given_up;
    daemon__log(g->d, g->write_error ? DAEMON_LOG_WARNING : DAEMON_LOG_INFO,
                g->write_error ? "capture failed: %s" : "capture written to %s (%u processes)",
                g->write_error ? g->message : g->path, g->processes);
    if (g->done)
        g->done(g->userdata, &res);
    if (g->tool) {
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__CaptureResult msg = FLEETPROF__CAPTURE_RESULT__INIT;

        msg.request_id = g->tool_request;
        msg.path = g->path;
        msg.bytes = g->file_bytes;
        msg.processes = g->processes;
        msg.given_up = g->given_up;
        msg.error = g->write_error ? g->message : (char *)"";
        env.msg_case = FLEETPROF__ENVELOPE__MSG_CAPTURE_RESULT;
        env.capture_result = &msg;
        (void)ipc_conn_send(g->tool->ipc, &env);
    }
    uv_close((uv_handle_t *)&g->timer, free_gather);
}

static void after_write(uv_work_t *work, int status)
{
    struct gather *g = work->data;

    if (status < 0 && !g->write_error) {
        g->write_error = status;
        (void)snprintf(g->message, sizeof(g->message), "file write cancelled");
    }
    complete(g);
}

static void finish(struct gather *g)
{
    struct daemon *d = g->d;
    char pid[16];
    int r;

    if (g->finishing)
        return;
    g->finishing = true;
    uv_timer_stop(&g->timer);
    event(g, 0, "capture complete: %u processes, %llu bytes from children, %u given up",
          g->processes, (unsigned long long)g->bytes, g->given_up);
    json_writer_array_end(g->out); /* processes */
    (void)snprintf(pid, sizeof(pid), "%d", (int)getpid());
    json_writer_object_begin(g->out, "profileGatheringLog");
    json_writer_object_begin(g->out, pid);
    json_writer_int(g->out, "begin", 0);
    json_writer_array_end(g->events);
    json_writer_splice_writer(g->out, "events", g->events);
    json_writer_time_ms(g->out, "end", (int64_t)(daemon__now_ns() - d->start_ns));
    json_writer_object_end(g->out);
    json_writer_object_end(g->out);
    json_writer_object_end(g->out); /* root */
    r = json_writer_finish(g->out);
    if (r < 0) {
        g->write_error = r;
        (void)snprintf(g->message, sizeof(g->message), "building the profile failed: %s",
                       strerror(-r));
    } else if (g->processes == 0) {
        g->write_error = -ENODATA;
        (void)snprintf(g->message, sizeof(g->message),
                       "nothing to write: no profiled process answered and no exit profile "
                       "was stored (did the processes run with FLEETPROF_SOCKET set?)");
    }
    if (g->write_error) {
        complete(g);
        return;
    }
    g->work.data = g;
    r = uv_queue_work(d->loop, &g->work, write_file, after_write);
    if (r < 0) {
        g->write_error = r;
        (void)snprintf(g->message, sizeof(g->message), "cannot start the file write: %s",
                       uv_strerror(r));
        complete(g);
    }
}

/* The daemon's own part: everything but processes and profileGatheringLog. */
static void write_header(struct gather *g)
{
    struct json_writer *w = g->out;
    const struct ctl_log_entry *log;
    size_t log_count;
    uint64_t dropped;
    char pid[16];

    json_writer_object_begin(w, NULL);
    json_writer_object_begin(w, "meta");
    json_writer_int(w, "version", 36);
    json_writer_double(w, "startTime", g->d->start_epoch_ms);
    json_writer_time_ms(w, "interval", (int64_t)g->d->opt.interval_ns);
    json_writer_null(w, "shutdownTime");
    json_writer_int(w, "processType", 0);
    json_writer_string(w, "product", g->product ? g->product : "fleetprofd");
    json_writer_int(w, "stackwalk", 1);
    json_writer_int(w, "debug", 0);
    json_writer_bool(w, "presymbolicated", true);
    json_writer_string(w, "platform", "Linux");
    json_writer_uint(w, "startTimeAsClockMonotonicNanosecondsSinceBoot", g->d->start_ns);
    prof_gecko_write_shared_meta(w);
    json_writer_array_begin(w, "markerSchema");
    json_writer_array_end(w);
    json_writer_object_begin(w, "fleetprof");
    json_writer_int(w, "pid", getpid());
    json_writer_bool(w, "daemon", true);
    json_writer_uint(w, "globalLimitBytes", g->d->opt.global_limit_bytes);
    json_writer_object_end(w);
    json_writer_object_end(w);

    json_writer_array_begin(w, "libs");
    json_writer_array_end(w);
    /* The daemon has no samples of its own: the front-end then shows only the children. */
    json_writer_array_begin(w, "threads");
    json_writer_array_end(w);
    json_writer_array_begin(w, "pausedRanges");
    json_writer_array_end(w);
    prof_gecko_write_empty_sources(w);

    /* profilingLog: the controller's log, [[pid, ms, +1/-1/0], ...] */
    (void)snprintf(pid, sizeof(pid), "%d", (int)getpid());
    log = ctl_log(g->d->ctl, &log_count, &dropped);
    json_writer_object_begin(w, "profilingLog");
    json_writer_object_begin(w, pid);
    json_writer_object_begin(w, "controller");
    json_writer_uint(w, "globalLimitBytes", g->d->opt.global_limit_bytes);
    json_writer_uint(w, "droppedEntries", dropped);
    json_writer_array_begin(w, "updates");
    for (size_t i = 0; i < log_count; i++) {
        json_writer_array_begin(w, NULL);
        json_writer_int(w, NULL, log[i].owner);
        json_writer_time_ms(w, NULL, (int64_t)(log[i].time_ns - g->d->start_ns));
        json_writer_int(w, NULL, log[i].delta);
        json_writer_array_end(w);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);
    json_writer_object_end(w);
    json_writer_object_end(w);
    json_writer_array_begin(w, "processes");
}

/* Whether pid has a stored exit profile or a live connection (a later image of it). */
static bool pid_reported_since(const struct daemon *d, int32_t pid)
{
    for (const struct exit_profile *e = d->exit_profiles; e; e = e->next)
        if (e->pid == pid)
            return true;
    for (const struct conn *c = d->conns; c; c = c->next)
        if (c->kind == CONN_CHILD && c->pid == pid)
            return true;
    return false;
}

static int start(struct gather *g)
{
    struct daemon *d = g->d;
    uint64_t oldest;
    size_t n = 0;
    int r;

    r = json_writer_new_memory(&g->out);
    if (r == 0)
        r = json_writer_new_memory(&g->events);
    if (r < 0)
        return r;
    json_writer_array_begin(g->events, NULL);
    for (struct conn *c = d->conns; c; c = c->next)
        n += c->kind == CONN_CHILD;
    g->pending = calloc(n ? n : 1, sizeof(*g->pending));
    if (!g->pending)
        return -ENOMEM;
    write_header(g);

    for (size_t i = 0; i < d->departure_count; i++) {
        /* An exec'd process drops its connection (close-on-exec) and reconnects with the
         * same pid: it did not end, its new image reports for it. */
        if (pid_reported_since(d, d->departures[i].pid))
            continue;
        event(g, d->departures[i].pid,
              "child %d (%s) ended without sending an exit profile (killed, or it could not "
              "reach the daemon in time)",
              (int)d->departures[i].pid, d->departures[i].name);
    }
    if (d->departures_dropped)
        event(g, 0, "%llu more children ended without an exit profile",
              (unsigned long long)d->departures_dropped);
    d->departure_count = 0;
    d->departures_dropped = 0;

    /* Exit profiles older than all data still alive in any child have expired. */
    oldest = ctl_oldest_child_done_ns(d->ctl);
    if (oldest)
        daemon__exit_profiles_evict(d, oldest - 1,
                                    "expired (older than any data still alive in the fleet)");
    while (d->exit_profiles) {
        struct exit_profile *e = d->exit_profiles;

        json_writer_splice_text(g->out, NULL, e->json, e->len);
        g->processes++;
        g->exit_profiles++;
        event(g, e->pid, "added the exit profile of child %d (%s), %zu bytes", (int)e->pid, e->name,
              e->len);
        d->exit_profiles = e->next;
        d->stats.exit_profiles--;
        d->stats.exit_profile_bytes -= e->len;
        ctl_remove_owned(d->ctl, e->receipt_ns);
        free(e->json);
        free(e);
    }
    for (struct conn *c = d->conns; c; c = c->next) {
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__GatherProfile msg = FLEETPROF__GATHER_PROFILE__INIT;
        struct pending *p;

        if (c->kind != CONN_CHILD)
            continue;
        p = &g->pending[g->count++];
        p->conn = c;
        p->pid = c->pid;
        (void)snprintf(p->name, sizeof(p->name), "%s", c->name);
        p->progress = p->asked_progress = UINT32_MAX;
        msg.id = g->id;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE;
        env.gather_profile = &msg;
        event(g, p->pid, "asked child %d (%s) for its profile", (int)p->pid, p->name);
        if (ipc_conn_send(c->ipc, &env) < 0) {
            event(g, p->pid, "child %d (%s) cannot be asked: its connection is failing",
                  (int)p->pid, p->name);
            p->done = true;
            g->done_count++;
        }
    }
    (void)uv_timer_init(d->loop, &g->timer);
    g->timer.data = g;
    report_progress(g);
    if (g->done_count == g->count) {
        finish(g);
        return 0;
    }
    (void)uv_timer_start(&g->timer, on_round, g->child_timeout_ns / 1000000,
                         g->child_timeout_ns / 1000000);
    on_round(&g->timer); /* the first round: ask at once; it counts as progress */
    return 0;
}

/* Starts a capture; tool (may be NULL) receives progress events and the result. */
static int capture_start(struct daemon *d, const char *output_path, const char *product,
                         struct conn *tool, uint64_t tool_request, uint64_t child_timeout_ns,
                         daemon_capture_progress_cb progress, daemon_capture_done_cb done,
                         void *userdata)
{
    struct gather *g;
    int r;

    if (!d || !output_path || !*output_path || d->closing)
        return -EINVAL;
    if (d->gather)
        return -EBUSY;
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->d = d;
    g->id = ++d->next_id;
    g->path = strdup(output_path);
    g->product = product ? strdup(product) : NULL;
    g->progress = progress;
    g->done = done;
    g->userdata = userdata;
    /* Set before start(): a capture with nobody to ask completes inside it. */
    g->tool = tool;
    g->tool_request = tool_request;
    g->child_timeout_ns = child_timeout_ns ? child_timeout_ns : d->opt.child_timeout_ns;
    if (!g->path || (product && !g->product)) {
        r = -ENOMEM;
        goto err;
    }
    d->gather = g;
    r = start(g);
    if (r < 0) {
        d->gather = NULL;
        goto err;
    }
    return 0;
err:
    for (size_t i = 0; g->pending && i < g->count; i++)
        free(g->pending[i].data);
    free(g->pending);
    json_writer_free(g->out);
    json_writer_free(g->events);
    free(g->path);
    free(g->product);
    free(g);
    return r;
}

int daemon_capture(struct daemon *d, const char *output_path, const char *product,
                   daemon_capture_progress_cb progress, daemon_capture_done_cb done, void *userdata)
{
    return capture_start(d, output_path, product, NULL, 0, 0, progress, done, userdata);
}

void daemon__capture_request(struct conn *tool, const Fleetprof__CaptureRequest *req)
{
    struct daemon *d = tool->d;
    int r;

    if (!req->output_path || req->output_path[0] != '/')
        r = -EINVAL;
    else
        /* A timeout below 10 ms would give up on children before they could answer. */
        r = capture_start(d, req->output_path, "fleetprof capture", tool, req->id,
                          req->timeout_ms >= 10 ? (uint64_t)req->timeout_ms * 1000000u : 0, NULL,
                          NULL, NULL);
    if (r == 0)
        return;
    {
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__Error err = FLEETPROF__ERROR__INIT;

        err.request_id = req->id;
        err.code = -r;
        err.message = r == -EBUSY    ? (char *)"a capture is already running"
                      : r == -EINVAL ? (char *)"the output path must be absolute"
                                     : (char *)strerror(-r);
        env.msg_case = FLEETPROF__ENVELOPE__MSG_ERROR;
        env.error = &err;
        (void)daemon__send(tool, &env);
    }
}
