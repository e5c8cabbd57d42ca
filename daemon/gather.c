/* daemon/gather.c - one profile for the whole fleet: captures and exit profiles.
 *
 * A capture (design §6 "Gathering"): every live child is sent GatherProfile; the daemon's
 * own part (meta, profilingLog with the controller log) and the stored exit profiles go at
 * once into a temp file next to the output, and the child JSON is streamed after them,
 * never held whole in memory. A child announces its JSON's size with its pieces (total):
 * its element's place in the file is reserved at its first piece and every piece is written
 * there once, however the children interleave. A stream without a total (an older or a
 * scripted peer) goes in the "current" way: one such child at a time writes at the end of
 * the file, the others into unlinked spool files appended when they complete. Pieces are
 * spliced, never parsed; a large one is written as its bytes arrive (daemon__gather_piece_*),
 * from the connection's read buffer, so the daemon holds no piece and copies nothing. A child that
 * fails (an error, a piece out of order, a size other than announced, not an object, gone, given
 * up) leaves no byte of its own in the output: its element is cut off the end of the file, blanked
 * with spaces (valid JSON whitespace) where later elements follow it, or its spool dropped. Each
 * element starts with one separator byte, written as a space and turned into a comma at the end for
 * every element but the first, so elements may complete in any order. Every child timeout, pending
 * children are asked for progress: the first round counts as progress, later a child counts only if
 * its progress value or the bytes received from it changed since the previous ask; a round without
 * any progress ends the capture with what arrived. Late pieces are dropped. Finally
 * profileGatheringLog closes the root and a libuv worker fsyncs the file and renames it over the
 * output. Any write error fails the capture: the temp file is removed, the previous output left as
 * it was. The file itself (writes at offsets, reserved regions, spools, blanking, separators, the
 * final sync and rename) is daemon/capture-file.c's; what goes where (reserved, current, spooled,
 * taken back) is daemon/capture-placement.h's, apart so that a fuzz target drives it without a
 * daemon; this file decides who is asked, who is dropped and when the capture ends.
 *
 * Exit profiles count against the global limit as daemon-owned released chunks: the
 * controller evicts the oldest when the fleet needs room; a capture also expires those
 * received before the oldest data still alive in any child.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/capture-file.h"
#include "daemon/capture-placement.h"
#include "daemon/core.h"
#include "daemon/daemon-internal.h"
#include "json/writer.h"
#include "profile/gecko.h"

/* One child asked for its profile. Where its bytes are is slot's (daemon/capture-placement.h):
 * slot.len, the bytes received so far, is what progress polls compare. */
struct pending {
    struct conn *conn; /* borrowed; NULL once the child is gone */
    int32_t pid;
    char name[64];
    struct capture_slot slot;
    uint32_t progress; /* last GatherProgress value (raw fixed point) */
    uint32_t asked_progress;
    size_t asked_len;
};

struct gather {
    struct daemon *d;
    uint64_t id;
    char *path; /* the output, owned */
    char *product;
    struct conn *tool; /* a CaptureRequest's sender, or NULL (library use) */
    uint64_t tool_request;
    daemon_capture_progress_cb progress;
    daemon_capture_done_cb done;
    void *userdata;
    struct pending *pending;
    size_t count;
    uint32_t done_count, exit_profiles, given_up, recovered;
    uint64_t bytes;
    /* The file being written beside path (daemon/capture-file.h): the worker's during the final
     * sync. Its failure is the capture's. */
    struct capture_file file;
    /* Where the children's bytes go in it (daemon/capture-placement.h); place.processes counts
     * the complete elements, exit profiles included. */
    struct capture_placement place;
    struct json_writer *events; /* profileGatheringLog events: an open array */
    uv_timer_t timer;
    unsigned rounds;
    uv_work_t work;
    uint64_t child_timeout_ns; /* the daemon's, or the capture request's own */
    bool finishing;
    /* What this capture took from the daemon, given back if it fails (complete()): */
    struct exit_profile *taken, *taken_last; /* exit profiles written into it; owned */
    struct departure *departures;            /* departures logged in it; owned */
    size_t departure_count;
    uint64_t departures_dropped;
    struct daemon_lost_process *lost; /* named in the log, not in the file; owned */
    size_t lost_listed;
    uint32_t lost_total;
};

static void give_back(struct gather *g);

/* What a profileGatheringLog event says of a process, as its "kind" (the summary counts
 * processes by it, never by the message's words: tools/summary-log.c). */
enum ev_kind {
    EV_NOTE,        /* nothing about a process's fate */
    EV_ASKED,       /* asked for its profile */
    EV_ANSWERED,    /* its profile is in the file */
    EV_DROPPED,     /* it is not, and "reason" says why */
    EV_NO_PROGRESS, /* given up on */
};

static const char *const ev_kind_names[] = {
        [EV_NOTE] = "note",       [EV_ASKED] = "waitedFor",        [EV_ANSWERED] = "answered",
        [EV_DROPPED] = "dropped", [EV_NO_PROGRESS] = "noProgress",
};

/* An event's named arguments: text from a process (its name, its error) goes only here, so
 * that it can never be read as the daemon's words. */
struct ev_args {
    int32_t pid;        /* 0: none */
    const char *name;   /* the process's name; NULL: none */
    const char *reason; /* why it was dropped, or what went wrong; NULL: none */
    const char *how;    /* how its profile was made (the daemon's words); NULL: none */
    uint64_t bytes;
    bool with_bytes;
};

/* The message with {pid}, {name}, {reason}, {how} and {bytes} replaced, for the daemon's own
 * log line. */
static void ev_render(char *out, size_t size, const char *message, const struct ev_args *a)
{
    size_t o = 0;

    for (const char *m = message; *m && o + 1 < size;) {
        char num[24];
        const char *v = NULL;
        size_t skip = 0;

        if (!strncmp(m, "{pid}", 5) && a->pid) {
            (void)snprintf(num, sizeof(num), "%d", (int)a->pid);
            v = num, skip = 5;
        } else if (!strncmp(m, "{name}", 6) && a->name) {
            v = a->name, skip = 6;
        } else if (!strncmp(m, "{reason}", 8) && a->reason) {
            v = a->reason, skip = 8;
        } else if (!strncmp(m, "{how}", 5) && a->how) {
            v = a->how, skip = 5;
        } else if (!strncmp(m, "{bytes}", 7) && a->with_bytes) {
            (void)snprintf(num, sizeof(num), "%" PRIu64, a->bytes);
            v = num, skip = 7;
        }
        if (!v) {
            out[o++] = *m++;
            continue;
        }
        o += (size_t)snprintf(out + o, size - o, "%s", v);
        o = o < size ? o : size - 1;
        m += skip;
    }
    out[o < size ? o : size - 1] = '\0';
}

/* A process the file will lack: counted once, listed while there is room. */
static void lost_add(struct gather *g, const struct ev_args *a)
{
    struct daemon_lost_process *l;

    for (size_t i = 0; i < g->lost_listed; i++)
        if (g->lost[i].pid == a->pid)
            return;
    g->lost_total++;
    if (!g->lost)
        g->lost = calloc(DAEMON_LOST_LISTED, sizeof(*g->lost));
    if (!g->lost || g->lost_listed == DAEMON_LOST_LISTED)
        return;
    l = &g->lost[g->lost_listed++];
    l->pid = a->pid;
    (void)snprintf(l->name, sizeof(l->name), "%s", a->name ? a->name : "?");
    (void)snprintf(l->reason, sizeof(l->reason), "%s", a->reason ? a->reason : "dropped");
}

/* One profileGatheringLog event: [ms, message, {"kind", and a's arguments that are set}].
 * The message names the arguments as {pid}, {name}, {reason}, {how}, {bytes}; fmt may add
 * numbers and the daemon's own words through printf, never a process's text. */
__attribute__((format(printf, 4, 5))) static void
event(struct gather *g, enum ev_kind kind, const struct ev_args *a, const char *fmt, ...)
{
    char message[512], text[1024];
    struct json_writer *w = g->events;
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    json_writer_array_begin(w, NULL);
    json_writer_time_ms(w, NULL, (int64_t)(daemon__now_ns() - g->d->start_ns));
    json_writer_string(w, NULL, message);
    json_writer_object_begin(w, NULL);
    json_writer_string(w, "kind", ev_kind_names[kind]);
    if (a->pid)
        json_writer_int(w, "pid", a->pid);
    if (a->name)
        json_writer_string(w, "name", a->name);
    if (a->reason)
        json_writer_string(w, "reason", a->reason);
    if (a->how)
        json_writer_string(w, "how", a->how);
    if (a->with_bytes)
        json_writer_uint(w, "bytes", a->bytes);
    json_writer_object_end(w);
    json_writer_array_end(w);
    ev_render(text, sizeof(text), message, a);
    daemon__log(g->d, DAEMON_LOG_DEBUG, "capture: %s", text);
    if ((kind == EV_DROPPED || kind == EV_NO_PROGRESS) && a->pid)
        lost_add(g, a);
}

/* The arguments that name process p, or e. */
#define EV_OF(x, ...) (&(struct ev_args){.pid = (x)->pid, .name = (x)->name, __VA_ARGS__})
#define EV_NONE       (&(struct ev_args){0})

/* Capture */

bool daemon__gather_exit_profile_dropped(struct daemon *d, const struct exit_profile *e,
                                         const char *why)
{
    if (!d->gather)
        return false;
    event(d->gather, EV_DROPPED, EV_OF(e, .reason = why),
          "exit profile of child {pid} ({name}) {reason}");
    return true;
}

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

/* The output is daemon/capture-file.c's, and where each child's bytes go in it
 * daemon/capture-placement.h's. Its first failure is the capture's (g->file.error,
 * g->file.message), and ends it (the caller calls finish()). */

static void finish(struct gather *g);

static void mark_done(struct gather *g, struct pending *p)
{
    g->done_count++;
    capture_placement_done(&g->place, &p->slot);
    report_progress(g);
    if (g->file.error || g->done_count == g->count)
        finish(g);
}

/* Whether a piece of n bytes fits p's stream: in order, within the size announced. */
static bool piece_fits(const struct pending *p, const Fleetprof__ProfileData *m, size_t n)
{
    return capture_piece_fits(&p->slot, m->offset, n, m->total, m->last);
}

/* Stores n bytes of p's JSON (p->slot.len of it received before). Returns false when p was
 * dropped (or the capture ended) instead. */
static bool piece_store(struct gather *g, struct pending *p, const char *data, size_t n,
                        uint64_t total)
{
    int r = capture_placement_piece(&g->place, &p->slot, data, n, total);

    if (r == 1) {
        event(g, EV_DROPPED, EV_OF(p, .reason = "its profile is not a JSON object"),
              "child {pid} ({name}) dropped: {reason}");
        capture_placement_drop(&g->place, &p->slot);
        mark_done(g, p);
        return false;
    }
    if (r < 0 && g->file.error) {
        finish(g); /* the output is broken: the capture fails with the reason */
        return false;
    }
    if (r < 0) {
        event(g, EV_DROPPED, EV_OF(p, .reason = strerror(-r)),
              "child {pid} ({name}) dropped: no spool file for its profile: {reason}");
        capture_placement_drop(&g->place, &p->slot);
        mark_done(g, p);
        return false;
    }
    g->bytes += n;
    return true;
}

/* A child's whole profile is in hand (received or recovered): it becomes an element of the
 * output now if it can, else when the output reaches it. */
static void profile_complete(struct gather *g, struct pending *p)
{
    capture_placement_complete(&g->place, &p->slot);
    mark_done(g, p);
}

static void piece_complete(struct gather *g, struct pending *p)
{
    event(g, EV_ANSWERED, EV_OF(p, .bytes = p->slot.len, .with_bytes = true),
          "received {bytes} bytes from child {pid} ({name})");
    profile_complete(g, p);
}

void daemon__gather_on_profile_data(struct conn *c, const Fleetprof__ProfileData *m)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;
    const char *data = (const char *)m->data.data;
    size_t n = m->data.len;

    if (!p || m->request_id != g->id || p->slot.done) {
        daemon__log(c->d, DAEMON_LOG_DEBUG, "late profile data from child %d dropped", (int)c->pid);
        return;
    }
    if (m->error && *m->error) {
        event(g, EV_DROPPED, EV_OF(p, .reason = m->error),
              "child {pid} ({name}) could not write its profile: {reason}");
        capture_placement_drop(&g->place, &p->slot);
        mark_done(g, p);
        return;
    }
    if (!piece_fits(p, m, n)) {
        event(g, EV_DROPPED,
              EV_OF(p, .reason = m->offset != p->slot.len ? "profile pieces out of order"
                                 : p->slot.len + n > CAPTURE_PIECE_TOTAL_MAX ||
                                                 m->total > CAPTURE_PIECE_TOTAL_MAX
                                         ? "profile too large"
                                         : "profile size not as announced"),
              "child {pid} ({name}) dropped: {reason}");
        capture_placement_drop(&g->place, &p->slot);
        mark_done(g, p);
        return;
    }
    if (p->slot.len + n == 0 && m->last) {
        event(g, EV_DROPPED, EV_OF(p, .reason = "its profile is not a JSON object"),
              "child {pid} ({name}) dropped: {reason}");
        capture_placement_drop(&g->place, &p->slot);
        mark_done(g, p);
        return;
    }
    if (piece_store(g, p, data, n, m->total) && m->last)
        piece_complete(g, p);
}

bool daemon__gather_piece_begin(struct ipc_conn *ipc, const Fleetprof__ProfileData *m,
                                void *userdata)
{
    struct conn *c = userdata;
    struct gather *g = c->d->gather;
    struct pending *p;

    (void)ipc;
    c->piece_gather = 0;
    if (c->kind != CONN_CHILD || m->exit || !g || g->finishing || m->request_id != g->id ||
        (m->error && *m->error))
        return false;
    p = pending_of(g, c);
    if (!p || p->slot.done || !piece_fits(p, m, m->data.len))
        return false;
    c->piece_gather = g->id;
    c->piece_total = m->total;
    c->piece_last = m->last;
    return true;
}

/* The capture's record of c while its piece streams: the capture may have ended, or given up
 * on c, between two reads; its bytes are then ignored. */
static struct pending *piece_pending(struct conn *c)
{
    struct gather *g = c->d->gather;
    struct pending *p;

    if (!c->piece_gather || !g || g->finishing || g->id != c->piece_gather)
        return NULL;
    p = pending_of(g, c);
    return p && !p->slot.done ? p : NULL;
}

void daemon__gather_piece_bytes(struct ipc_conn *ipc, const uint8_t *data, size_t len,
                                void *userdata)
{
    struct conn *c = userdata;
    struct pending *p = piece_pending(c);

    (void)ipc;
    if (!p || !piece_store(c->d->gather, p, (const char *)data, len, c->piece_total))
        c->piece_gather = 0;
}

void daemon__gather_piece_end(struct ipc_conn *ipc, void *userdata)
{
    struct conn *c = userdata;
    struct pending *p = piece_pending(c);

    (void)ipc;
    c->piece_gather = 0;
    if (p && c->piece_last)
        piece_complete(c->d->gather, p);
}

void daemon__gather_on_progress(struct conn *c, const Fleetprof__GatherProgress *m)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;

    if (!p || p->slot.done || m->gather_id != g->id)
        return;
    p->progress = m->proportion;
    if (m->proportion != UINT32_MAX)
        event(g, EV_NOTE, EV_OF(p, .how = m->location && *m->location ? m->location : "?"),
              "child {pid} ({name}) is at %.0f%% ({how})",
              (double)m->proportion * 100.0 / (double)(1u << 31));
}

/* A whole profile of p's process (json, len; taken and freed) answers in place of what p
 * sent so far. True if it is p's answer now; false if it could not be stored (logged, p done,
 * or the capture finished on a write error). */
static bool answer_with(struct gather *g, struct pending *p, char *json, size_t len,
                        const char *what)
{
    int r;

    g->bytes -= p->slot.len < g->bytes ? p->slot.len : g->bytes;
    r = capture_placement_answer(&g->place, &p->slot, json, len); /* p->slot.len: 0 or len */
    free(json);
    if (r < 0 && g->file.error) {
        finish(g);
        return false;
    }
    if (r < 0) {
        event(g, EV_DROPPED, EV_OF(p, .reason = strerror(-r)),
              "child {pid} ({name}) dropped: no spool file for its %s profile: {reason}", what);
        capture_placement_drop(&g->place, &p->slot);
        mark_done(g, p);
        return false;
    }
    g->bytes += len;
    return true;
}

bool daemon__gather_on_exit_profile(struct conn *c, char *json, size_t len, const char *built)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;

    if (!p || p->slot.done)
        return false;
    /* The child's bytes: spliced, never parsed, so at least an object's first byte, as the
     * store's rule (an empty answer became a stray comma, a string a non-object element). */
    if (len == 0 || json[0] != '{') {
        event(g, EV_DROPPED, EV_OF(p, .reason = "its exit profile is not a JSON object"),
              "child {pid} ({name}) dropped: {reason}");
        free(json);
        capture_placement_drop(&g->place, &p->slot);
        mark_done(g, p);
        return true;
    }
    /* Kept for the next capture instead, it would be missing from this one: the child goes
     * away next, and the capture would log it as gone without an answer. */
    if (!answer_with(g, p, json, len, "exit"))
        return true;
    event(g, EV_ANSWERED, EV_OF(p, .how = built, .bytes = len, .with_bytes = true),
          "child {pid} ({name}) exited during the capture: its exit profile is its answer, "
          "{bytes} bytes%s",
          built ? ", built by the daemon from its shared chunks: {how}" : "");
    profile_complete(g, p);
    return true;
}

void daemon__gather_on_child_gone(struct conn *c)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;

    if (!p)
        return;
    /* A child that completed before going keeps its profile (possibly still spooled). */
    p->conn = NULL;
    if (p->slot.done)
        return;
    event(g, EV_DROPPED,
          EV_OF(p, .reason = "went away during the capture", .bytes = p->slot.len,
                .with_bytes = true),
          "child {pid} ({name}) went away during the capture; its partial data ({bytes} "
          "bytes) was dropped");
    capture_placement_drop(&g->place, &p->slot);
    mark_done(g, p);
}

bool daemon__gather_on_recovered(struct conn *c, char *recovered, size_t len, const char *how)
{
    struct gather *g = c->d->gather;
    struct pending *p = g && !g->finishing ? pending_of(g, c) : NULL;

    if (!p || p->slot.done)
        return false;
    /* It died mid-capture: what it sent so far goes, its chunks answer in its place. */
    if (!answer_with(g, p, recovered, len, "recovered"))
        return true;
    g->recovered++;
    event(g, EV_ANSWERED, EV_OF(p, .how = how),
          "recovered the profile of child {pid} ({name}) from its shared chunks, as it died "
          "during the capture: {how}");
    profile_complete(g, p);
    return true;
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

        /* The daemon's own workers building its profile: progress of ours, bounded. */
        if (!p->slot.done && (p->progress != p->asked_progress || p->slot.len != p->asked_len ||
                              (p->conn && p->conn->building)))
            progressed = true;
    }
    if (!progressed) {
        pids[0] = '\0';
        for (size_t i = 0; i < g->count; i++) {
            struct pending *p = &g->pending[i];

            if (p->slot.done)
                continue;
            used += (size_t)snprintf(pids + used, used < sizeof(pids) ? sizeof(pids) - used : 0,
                                     "%s%d (%s)", used ? ", " : "", (int)p->pid, p->name);
            if (used >= sizeof(pids))
                used = sizeof(pids) - 1;
        }
        event(g, EV_NOTE, &(struct ev_args){.reason = pids},
              "gave up waiting: no progress for %.0f ms from {reason}",
              (double)g->child_timeout_ns / 1e6);
        for (size_t i = 0; i < g->count; i++) {
            struct pending *p = &g->pending[i];

            if (!p->slot.done) {
                event(g, EV_NO_PROGRESS, EV_OF(p, .reason = "no progress"),
                      "gave up on child {pid} ({name}): {reason}");
                g->given_up++;
                capture_placement_drop(&g->place, &p->slot);
                p->slot.done = true;
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

        if (p->slot.done || !p->conn || p->conn->building)
            continue;
        p->asked_progress = p->progress;
        p->asked_len = p->slot.len;
        msg.id = ++g->d->next_id;
        msg.gather_id = g->id;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS;
        env.get_gather_profile_progress = &msg;
        (void)ipc_conn_send(p->conn->ipc, &env);
    }
}

/* On a libuv worker: the fd is this job's alone until after_sync. fsync may take seconds on
 * a slow disk; the loop goes on serving the fleet meanwhile. */
static void sync_file(uv_work_t *work)
{
    struct gather *g = work->data;

    (void)capture_file_commit(&g->file);
}

/* Frees everything of a capture; removes its temp file if it is still there. Accepts one that
 * start() left half made. */
static void gather_free(struct gather *g)
{
    for (size_t i = 0; i < g->count; i++)
        capture_slot_spool_close(&g->pending[i].slot);
    free(g->pending);
    capture_file_free(&g->file);
    json_writer_free(g->events);
    free(g->path);
    free(g->lost);
    free(g->departures);
    while (g->taken) {
        struct exit_profile *e = g->taken;

        g->taken = e->next;
        free(e->json);
        free(e);
    }
    free(g->product);
    free(g);
}

static void free_gather(uv_handle_t *timer)
{
    struct gather *g = timer->data;
    struct daemon *d = g->d;

    gather_free(g);
    d->gather = NULL;
    daemon__maybe_finish_close(d);
}

static void complete(struct gather *g)
{
    struct daemon_capture_result res = {0};
    int error = g->file.error;
    uint64_t bytes = error ? 0 : g->file.len;

    /* The temp file goes before anyone hears of the failure; what it took is given back. */
    if (error)
        capture_file_abort(&g->file);
    if (error)
        give_back(g);
    res.error = error;
    res.message = error ? g->file.message : NULL;
    res.path = g->path;
    res.bytes = bytes;
    res.processes = g->place.processes;
    res.given_up = g->given_up;
    res.recovered = g->recovered;
    res.lost = g->lost_total;
    res.lost_list = g->lost;
    res.lost_listed = g->lost_listed;
    daemon__log(g->d, error ? DAEMON_LOG_WARNING : DAEMON_LOG_INFO,
                error ? "capture failed: %s" : "capture written to %s (%u processes)",
                error ? g->file.message : g->path, g->place.processes);
    if (g->done)
        g->done(g->userdata, &res);
    if (g->tool) {
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__CaptureResult msg = FLEETPROF__CAPTURE_RESULT__INIT;

        msg.request_id = g->tool_request;
        msg.path = g->path;
        msg.bytes = bytes;
        msg.processes = g->place.processes;
        Fleetprof__LostProcess lost[16], *lost_ptrs[16];

        msg.given_up = g->given_up;
        msg.lost = g->lost_total;
        for (size_t i = 0; i < g->lost_listed && i < 16; i++) {
            fleetprof__lost_process__init(&lost[i]);
            lost[i].pid = g->lost[i].pid;
            lost[i].name = g->lost[i].name;
            lost[i].reason = g->lost[i].reason;
            lost_ptrs[i] = &lost[i];
            msg.n_lost_processes = i + 1;
        }
        msg.lost_processes = lost_ptrs;
        msg.error = error ? g->file.message : (char *)"";
        env.msg_case = FLEETPROF__ENVELOPE__MSG_CAPTURE_RESULT;
        env.capture_result = &msg;
        (void)ipc_conn_send(g->tool->ipc, &env);
    }
    uv_close((uv_handle_t *)&g->timer, free_gather);
}

static void after_sync(uv_work_t *work, int status)
{
    struct gather *g = work->data;

    if (status < 0)
        (void)capture_file_fail(&g->file, status, "file write cancelled");
    complete(g);
}

/* Closes processes, adds profileGatheringLog and closes the root. The header left the root
 * object open with processes as its last key, so the text around the log is written here. */
static void write_trailer(struct gather *g)
{
    static const char before[] = "],\"profileGatheringLog\":";
    struct json_writer *w;
    char pid[16];
    int r;

    r = json_writer_new_memory(&w);
    if (r < 0) {
        (void)capture_file_fail(&g->file, r, "building the profile failed: %s", strerror(-r));
        return;
    }
    (void)snprintf(pid, sizeof(pid), "%d", (int)getpid());
    json_writer_object_begin(w, NULL);
    json_writer_object_begin(w, pid);
    json_writer_int(w, "begin", 0);
    json_writer_array_end(g->events);
    json_writer_splice_writer(w, "events", g->events);
    json_writer_time_ms(w, "end", (int64_t)(daemon__now_ns() - g->d->start_ns));
    json_writer_object_end(w);
    json_writer_object_end(w);
    r = json_writer_finish(w);
    if (r < 0)
        (void)capture_file_fail(&g->file, r, "building the profile failed: %s", strerror(-r));
    else if (capture_file_append(&g->file, before, sizeof(before) - 1) == 0 &&
             capture_file_append_writer(&g->file, w) == 0)
        (void)capture_file_append(&g->file, "}", 1);
    json_writer_free(w);
}

/* Ends the capture: called once every child is done or given up, or as soon as the output
 * failed. Idempotent. */
static void finish(struct gather *g)
{
    int r;

    if (g->finishing)
        return;
    g->finishing = true;
    uv_timer_stop(&g->timer);
    /* Every child is done unless the output failed: no one is current, spools complete. */
    if (!g->file.error)
        (void)capture_placement_flush(&g->place);
    event(g, EV_NOTE, EV_NONE,
          "capture complete: %u processes, %llu bytes from children, %u given up",
          g->place.processes, (unsigned long long)g->bytes, g->given_up);
    if (!g->file.error)
        capture_file_finish_elements(&g->file);
    if (!g->file.error)
        write_trailer(g);
    if (!g->file.error && g->place.processes == 0)
        (void)capture_file_fail(&g->file, -ENODATA,
                                "nothing to write: no profiled process answered and no exit "
                                "profile was stored");
    if (g->file.error) {
        complete(g);
        return;
    }
    g->work.data = g;
    r = uv_queue_work(g->d->loop, &g->work, sync_file, after_sync);
    if (r < 0) {
        (void)capture_file_fail(&g->file, r, "cannot start the file write: %s", uv_strerror(r));
        complete(g);
    }
}
/* The daemon's own part: everything but processes and profileGatheringLog. The root object
 * and processes are left open; write_trailer() closes them. */
static void write_header(struct gather *g, struct json_writer *w)
{
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
    if (daemon__exit_profile_reported(d, pid))
        return true;
    for (const struct conn *c = d->conns; c; c = c->next)
        if (c->kind == CONN_CHILD && c->pid == pid)
            return true;
    return false;
}

/* Writes the header and the stored exit profiles. An exit profile is dropped only once it is
 * in the output: when the output fails, the rest stay for the next capture. */
static int write_stored(struct gather *g)
{
    struct daemon *d = g->d;
    struct json_writer *w;
    uint64_t oldest;
    int r;

    r = json_writer_new_memory(&w);
    if (r < 0)
        return capture_file_fail(&g->file, r, "building the profile failed: %s", strerror(-r));
    write_header(g, w);
    r = capture_file_append_writer(&g->file, w);
    json_writer_free(w);
    if (r < 0)
        return r;

    /* Exit profiles older than all data still alive in any child have expired. */
    oldest = ctl_oldest_child_done_ns(d->ctl);
    if (oldest)
        daemon__exit_profiles_evict(d, oldest - 1,
                                    "expired (older than any data still alive in the fleet)");
    while (d->exit_profiles) {
        struct exit_profile *e = d->exit_profiles;
        uint64_t start;

        r = capture_file_element_begin(&g->file, &start);
        if (r == 0)
            r = capture_file_append(&g->file, e->json, e->len);
        if (r == 0)
            r = capture_placement_add_element(&g->place, start);
        if (r < 0)
            return r;
        g->exit_profiles++;
        event(g, EV_ANSWERED,
              EV_OF(e, .how = e->built[0] ? e->built : NULL, .bytes = e->len, .with_bytes = true),
              "added the exit profile of child {pid} ({name}), {bytes} bytes%s",
              e->built[0] ? ", built by the daemon from its shared chunks as it exited: {how}"
                          : "");
        d->exit_profiles = e->next;
        if (!d->exit_profiles)
            d->exit_profiles_last = NULL;
        daemon__exit_index_remove(d, e);
        d->stats.exit_profiles--;
        d->stats.exit_profile_bytes -= e->len;
        ctl_remove_owned(d->ctl, e->receipt_ns);
        /* Freed once the file is written; a capture that fails gives it back. */
        e->next = NULL;
        if (g->taken_last)
            g->taken_last->next = e;
        else
            g->taken = e;
        g->taken_last = e;
    }
    return 0;
}

/* A failed capture gives back what it took: the exit profiles it wrote (older than any kept
 * since, so first, and counted against the limit again) and the departures it logged. Not
 * logged into its own events (d->gather is hidden meanwhile): an eviction now is a departure
 * for the next capture. */
static void give_back(struct gather *g)
{
    struct daemon *d = g->d;
    struct gather *saved = d->gather;
    size_t kept = 0;

    d->gather = NULL;
    if (g->departures) {
        for (size_t i = 0; i < d->departure_count; i++) {
            if (g->departure_count < DEPARTURES_MAX)
                g->departures[g->departure_count++] = d->departures[i];
            else
                g->departures_dropped++;
        }
        free(d->departures);
        d->departures = g->departures;
        d->departure_count = g->departure_count;
        d->departures_dropped += g->departures_dropped;
        g->departures = NULL;
    }
    if (g->taken) {
        struct exit_profile *rest = d->exit_profiles;
        struct {
            uint64_t receipt_ns, len;
        } * back;

        for (struct exit_profile *e = g->taken; e; e = e->next)
            kept++;
        back = calloc(kept, sizeof(*back));
        kept = 0;
        for (struct exit_profile *e = g->taken; e; e = e->next, kept++) {
            daemon__exit_index_add(d, e);
            d->stats.exit_profiles++;
            d->stats.exit_profile_bytes += e->len;
            if (back) {
                back[kept].receipt_ns = e->receipt_ns;
                back[kept].len = e->len;
            }
        }
        g->taken_last->next = rest;
        d->exit_profiles = g->taken;
        if (!rest)
            d->exit_profiles_last = g->taken_last;
        g->taken = g->taken_last = NULL;
        /* Counted again, from a copy: an eviction frees profiles of the list. */
        for (size_t i = 0; back && i < kept; i++) {
            struct ctl_actions a;

            if (ctl_add_owned(d->ctl, back[i].receipt_ns, back[i].len, daemon__now_ns(), &a) == 0)
                daemon__apply_actions(d, &a);
        }
        free(back);
        daemon__log(d, DAEMON_LOG_INFO, "the capture failed: %zu exit profiles kept for the next",
                    kept);
    }
    d->gather = saved;
}

static int start(struct gather *g)
{
    struct daemon *d = g->d;
    size_t n = 0;
    int r;

    r = json_writer_new_memory(&g->events);
    if (r < 0)
        return r;
    json_writer_array_begin(g->events, NULL);
    /* One killed while disconnected, just before this: its build is among the answers. */
    if (d->before_capture)
        d->before_capture(d);
    for (struct conn *c = d->conns; c; c = c->next)
        n += c->kind == CONN_CHILD || c->building;
    g->pending = calloc(n ? n : 1, sizeof(*g->pending));
    if (!g->pending)
        return -ENOMEM;
    /* From here on, a failure is the capture's result, and complete() frees it. */
    (void)uv_timer_init(d->loop, &g->timer);
    g->timer.data = g;
    /* The temp file next to the output (common/outfile.h: O_EXCL, never someone else's file;
     * mode 0600). */
    if (capture_file_open(&g->file) < 0) {
        /* Before anything is consumed: departures and exit profiles stay for the next one. */
        complete(g);
        return 0;
    }

    for (size_t i = 0; i < d->departure_count; i++) {
        if (d->departures[i].dropped) {
            event(g, EV_DROPPED, EV_OF(&d->departures[i], .reason = d->departures[i].dropped),
                  "exit profile of child {pid} ({name}) {reason}");
            continue;
        }
        if (d->departures[i].recovered[0]) {
            g->recovered++;
            event(g, EV_ANSWERED, EV_OF(&d->departures[i], .how = d->departures[i].recovered),
                  "recovered the profile of child {pid} ({name}) from its shared chunks, as it "
                  "died without one: {how}");
            continue;
        }
        /* An exec'd process drops its connection (close-on-exec) and reconnects with the
         * same pid: it did not end, its new image reports for it. */
        if (pid_reported_since(d, d->departures[i].pid))
            continue;
        if (d->departures[i].never) {
            event(g, EV_DROPPED, EV_OF(&d->departures[i], .reason = d->departures[i].never),
                  "process {pid} ({name}) was never profiled: {reason}");
            continue;
        }
        event(g, EV_DROPPED,
              EV_OF(&d->departures[i],
                    .reason = "ended without sending an exit profile (killed, or it could not "
                              "reach the daemon in time)"),
              "child {pid} ({name}) {reason}");
    }
    for (const struct conn *c = d->conns; d->lingering && c; c = c->next)
        if (c->lingering)
            event(g, EV_DROPPED,
                  EV_OF(c, .reason = "lost its connection and has not reconnected; its samples "
                                     "stay in its region, for a later capture or if it dies"),
                  "child {pid} ({name}) {reason}");
    if (d->departures_dropped)
        event(g, EV_DROPPED, &(struct ev_args){.reason = "not listed: too many"},
              "%llu more children ended without an exit profile, or lost it to the limit",
              (unsigned long long)d->departures_dropped);
    /* Taken by this capture, given back if it fails. */
    g->departures = d->departures;
    g->departure_count = d->departure_count;
    g->departures_dropped = d->departures_dropped;
    d->departures = NULL;
    d->departure_count = 0;
    d->departures_dropped = 0;

    if (write_stored(g) < 0) {
        finish(g);
        return 0;
    }
    for (struct conn *c = d->conns; c; c = c->next) {
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__GatherProfile msg = FLEETPROF__GATHER_PROFILE__INIT;
        struct pending *p;

        if (c->kind != CONN_CHILD && !c->building)
            continue;
        p = &g->pending[g->count++];
        p->conn = c;
        p->pid = c->pid;
        (void)snprintf(p->name, sizeof(p->name), "%s", c->name);
        capture_placement_add_slot(&g->place, &p->slot);
        p->progress = p->asked_progress = UINT32_MAX;
        if (c->building) { /* it ended: its profile, being built, is its answer */
            event(g, EV_NOTE, EV_OF(p, .reason = NULL),
                  "waiting for the daemon to build the profile of child {pid} ({name}) from "
                  "its shared chunks");
            continue;
        }
        msg.id = g->id;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE;
        env.gather_profile = &msg;
        event(g, EV_ASKED, EV_OF(p, .reason = NULL), "asked child {pid} ({name}) for its profile");
        if (ipc_conn_send(c->ipc, &env) < 0) {
            event(g, EV_DROPPED, EV_OF(p, .reason = "its connection is failing"),
                  "child {pid} ({name}) cannot be asked: {reason}");
            p->slot.done = true;
            g->done_count++;
        }
    }
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
    capture_file_init(&g->file, g->path);
    capture_placement_init(&g->place, &g->file);
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
    gather_free(g);
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
