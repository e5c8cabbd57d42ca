/* daemon/census.c - the processes the daemon learns of at their fork, and why one that never
 * said Hello is not in the file.
 *
 * A profiled process names the children it forks or spawns (Spawned, at its sampler's next
 * tick); a forked child connects at its start (its first tick, within 10 ms, its first call
 * into the runtime, or before it changes its user ids) and says Hello. A vfork child
 * connects in the exec wrapper, saying nothing; so does a forked child whose parent gave up
 * its connection, in its fork handler (child/ipc-module/ipc.c, connect_early()): if such a
 * connection closes with nothing said, the child exec'd (close-on-exec), or ended. An
 * exec'd image that loads the runtime connects with the same pid and reports for itself;
 * one that does not, or a child that ended before its runtime started, would vanish without
 * a word: it is remembered here as a departure with the likely reason, read off the process
 * as it is now (its program, its environment, its credentials), and the next capture names
 * it unless a later image of the same pid reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"
#include "daemon/core.h"
#include "daemon/daemon-internal.h"

#define ENVIRON_MAX_BYTES (256u << 10) /* of /proc/PID/environ read at most */

void daemon__census_accept(struct conn *c)
{
    /* Read now, while the process is there: its parent may not have said Hello yet (it
     * forked right after connecting), so whether that is a profiled process is decided at
     * the close. */
    uint64_t start;

    if (!daemon__process_parent((int32_t)c->peer.pid, &c->ppid, &start))
        c->ppid = -1;
}

/* The profiled process pid, connected, or ended with a profile kept; NULL if none. */
static const char *profiled_name(struct daemon *d, int32_t pid)
{
    const struct conn *k = pid > 0 ? daemon__child_by_pid(d, pid) : NULL;
    const struct exit_profile *e;

    if (k)
        return k->name;
    e = pid > 0 ? daemon__exit_profile_of(d, pid) : NULL;
    if (e)
        return e->name;
    for (k = d->conns; pid > 0 && k; k = k->next)
        if (k->pid == pid) /* ended, its profile being built */
            return k->name;
    return NULL;
}

/* Reads a small /proc file of pid into buf (NUL-terminated); its length, or -1. */
static ssize_t read_proc(int32_t pid, const char *what, char *buf, size_t size)
{
    char path[64];
    size_t done = 0;
    int fd;

    (void)snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (done < size - 1) {
        ssize_t n = read(fd, buf + done, size - 1 - done);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    (void)close(fd);
    buf[done] = '\0';
    return (ssize_t)done;
}

/* Whether the program pid runs has no program interpreter (PT_INTERP): a static program,
 * into which no dynamic loader preloads anything. -1 when it cannot be read. */
static int is_static(int32_t pid)
{
    char path[64];
    size_t n = 0;
    int fd, r = -1;
    Elf *e;

    (void)snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    (void)elf_version(EV_CURRENT);
    e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (e && elf_kind(e) == ELF_K_ELF && elf_getphdrnum(e, &n) == 0) {
        r = 1;
        for (size_t i = 0; i < n; i++) {
            GElf_Phdr ph;

            if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_INTERP)
                r = 0;
        }
    }
    if (e)
        (void)elf_end(e);
    (void)close(fd);
    return r;
}

/* Whether pid's environment preloads our library. -1 when it cannot be read (another
 * user's process, or gone). */
static int preloads_us(int32_t pid)
{
    char *env = malloc(ENVIRON_MAX_BYTES);
    ssize_t n = env ? read_proc(pid, "environ", env, ENVIRON_MAX_BYTES) : -1;
    int r = n < 0 ? -1 : 0;

    for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(env + i) + 1)
        if (!strncmp(env + i, "LD_PRELOAD=", 11) && strstr(env + i, "libfleetprof"))
            r = 1;
    free(env);
    return r;
}

/* Whether pid runs with credentials other than its real ones (set-user-ID or set-group-ID
 * program, or file capabilities): the loader then runs it securely and drops LD_PRELOAD. */
static bool runs_securely(int32_t pid)
{
    char status[4096];
    unsigned long r_uid, e_uid, r_gid, e_gid;
    const char *u, *g;

    if (read_proc(pid, "status", status, sizeof(status)) <= 0)
        return false;
    u = strstr(status, "\nUid:");
    g = strstr(status, "\nGid:");
    return u && g && sscanf(u, "\nUid: %lu %lu", &r_uid, &e_uid) == 2 &&
           sscanf(g, "\nGid: %lu %lu", &r_gid, &e_gid) == 2 && (r_uid != e_uid || r_gid != e_gid);
}

/* Whether pid runs under another root (chroot): the daemon's socket is not where the
 * profiler looks for it there. */
static bool in_chroot(int32_t pid)
{
    char path[64], root[8];
    ssize_t n;

    (void)snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
    n = readlink(path, root, sizeof(root));
    return n > 0 && !(n == 1 && root[0] == '/');
}

/* Why the process pid, which has not said Hello, will not be profiled, read off it as it is
 * now; NULL when it runs a program the runtime enters (it connects and reports). Its name
 * (the program it became) goes into name. */
static const char *why_not_profiled(int32_t pid, char *name, size_t name_size)
{
    char comm[64];
    const char *why;

    if (read_proc(pid, "comm", comm, sizeof(comm)) > 0) {
        comm[strcspn(comm, "\n")] = '\0';
        (void)snprintf(name, name_size, "%s", comm);
    }
    if (daemon__process_gone(pid, 0)) /* reaped, or a zombie: nothing of it to read */
        why = "it ended before its profiler started (it lived a few milliseconds, or ran a "
              "program the profiler cannot enter)";
    else if (in_chroot(pid))
        why = "it runs in a chroot, where the profiler cannot reach the daemon's socket";
    else if (is_static(pid) == 1)
        why = "it exec'd a static program, into which no loader preloads the profiler";
    else if (runs_securely(pid))
        why = "it exec'd a set-user-ID or set-group-ID program, for which the loader ignores "
              "LD_PRELOAD";
    else if (preloads_us(pid) == 0)
        why = "it exec'd with an environment that does not preload the profiler (cleared, or "
              "LD_PRELOAD replaced)";
    else
        why = NULL; /* a program the runtime enters: its new image connects and reports */
    return why;
}

/* ---- judged after a grace ---------------------------------------------------------- */

/* Long enough for a new image to load the runtime and say Hello (1-3 ms on a quiet machine,
 * tens beside CPU hogs); short enough that a program that will not report is usually still
 * there to be read. One that ended meanwhile is named as one that ended before its profiler
 * started, which it did. */
#define CENSUS_GRACE_MS 50u

enum census_kind {
    CENSUS_FORK_CHILD, /* connected in its profiled parent's fork handler, closed silent */
    CENSUS_SPAWNED,    /* posix_spawn'd by a profiled process (Spawned) */
    CENSUS_EXECD,      /* a profiled image exec'd */
};

struct census_wait {
    int32_t pid;
    enum census_kind kind;
    int32_t parent_pid; /* the parent (fork child), the spawner (spawned) */
    char parent[64];    /* its name; an exec'd image's own name */
    uint64_t since_ns;  /* a connection of pid made after this is its new image's */
    uint64_t due_ns;
    /* Spawned: pid started (/proc's clock ticks since boot) no sooner than its reporter's
     * runtime (0: unknown) and no later than the report; an orphan of an ended reporter is
     * its child only within these. */
    uint64_t born_after_ticks, born_before_ticks;
};

struct census_waits {
    uv_timer_t timer;
    struct daemon *d;
    struct census_wait *v;
    size_t count, cap;
};

/* Whether pid reported after since_ns: a new image connected (said Hello, or is about to),
 * ended with its exit profile, or ended without one (a departure of its own). */
static bool reported(const struct daemon *d, const struct census_wait *w)
{
    for (const struct conn *k = d->conns; k; k = k->next) {
        int32_t pid = k->kind == CONN_CHILD ? k->pid : (int32_t)k->peer.pid;

        if (pid == w->pid && (k->kind == CONN_CHILD || k->kind == CONN_NEW) &&
            (w->kind == CENSUS_SPAWNED || k->connect_ns > w->since_ns))
            return true;
    }
    if (daemon__exit_profile_reported(d, w->pid))
        return true;
    for (size_t i = 0; i < d->departure_count; i++)
        if (d->departures[i].pid == w->pid && !d->departures[i].never &&
            d->departures[i].time_ns > w->since_ns)
            return true;
    return false;
}

static void judge_fork_child(struct daemon *d, const struct census_wait *w)
{
    char name[64];
    const char *why;

    (void)snprintf(name, sizeof(name), "%s", w->parent);
    why = why_not_profiled(w->pid, name, sizeof(name));
    daemon__log(d, why ? DAEMON_LOG_INFO : DAEMON_LOG_DEBUG,
                "process %d (%s), a child of %d, never said Hello: %s", (int)w->pid, name,
                (int)w->parent_pid, why ? why : "it exec'd a program the profiler enters");
    /* Named at the next capture unless a later image of the pid reports (an exec'd image
     * that connects, a child that ended after all with its profile). Only with a reason:
     * every fork+exec passes here, and most become profiled processes. */
    if (why)
        daemon__departure_never(d, w->pid, name, why);
}

/* Whether pid, whose parent is not the process that reported it, is that process's orphan:
 * the reporter ended (its children went to init or a subreaper, record among them), and pid
 * started between the reporter's start and the report, which a pid taken by another process
 * since cannot have. A process of ours could name another of ours so, by reporting it and
 * ending: it would be named lost with the reason read off it, nothing worse. */
static bool orphan_of(const struct census_wait *w, uint64_t start_ticks)
{
    return w->born_before_ticks && daemon__process_gone(w->parent_pid, 0) &&
           start_ticks >= w->born_after_ticks && start_ticks <= w->born_before_ticks;
}

static void judge_spawned(struct daemon *d, const struct census_wait *w)
{
    char name[64];
    const char *why;
    uint64_t start = 0;
    int32_t ppid = -1;

    /* Only its own children (gone ones are taken at its word: it connected as itself), or
     * its orphans: a shell's `cmd &` outlives the shell. */
    if (daemon__process_parent(w->pid, &ppid, &start) && ppid > 0 && ppid != w->parent_pid &&
        !orphan_of(w, start))
        return;
    (void)snprintf(name, sizeof(name), "%s", w->parent);
    why = why_not_profiled(w->pid, name, sizeof(name));
    daemon__log(d, why ? DAEMON_LOG_INFO : DAEMON_LOG_DEBUG,
                "process %d (%s), spawned by %d (%s): %s", (int)w->pid, name, (int)w->parent_pid,
                w->parent, why ? why : "it runs a program the profiler enters");
    if (why)
        daemon__departure_never(d, w->pid, name, why);
}

static void judge_execd(struct daemon *d, const struct census_wait *w)
{
    char name[64];
    const char *why;

    (void)snprintf(name, sizeof(name), "%s", w->parent);
    why = why_not_profiled(w->pid, name, sizeof(name));
    if (!why)
        return; /* a program the runtime enters: its new image reports */
    daemon__log(d, DAEMON_LOG_INFO, "process %d (%s) exec'd into %s, which will not report: %s",
                (int)w->pid, w->parent, name, why);
    daemon__departure_never(d, w->pid, name, why);
}

static void judge(struct daemon *d, const struct census_wait *w)
{
    if (reported(d, w))
        return;
    switch (w->kind) {
    case CENSUS_FORK_CHILD:
        judge_fork_child(d, w);
        break;
    case CENSUS_SPAWNED:
        judge_spawned(d, w);
        break;
    case CENSUS_EXECD:
        judge_execd(d, w);
        break;
    }
}

static void on_census_timer(uv_timer_t *timer)
{
    struct census_waits *s = timer->data;

    daemon__census_settle(s->d, false);
}

static void arm(struct census_waits *s)
{
    uint64_t now = daemon__now_ns(), due = s->v[0].due_ns;

    for (size_t i = 1; i < s->count; i++)
        if (s->v[i].due_ns < due)
            due = s->v[i].due_ns;
    (void)uv_timer_start(&s->timer, on_census_timer, due > now ? (due - now + 999999) / 1000000 : 0,
                         0);
}

static struct census_waits *waits_of(struct daemon *d)
{
    struct census_waits *s = d->census;

    if (s)
        return s;
    s = calloc(1, sizeof(*s));
    if (!s || uv_timer_init(d->loop, &s->timer) < 0) {
        free(s);
        return NULL;
    }
    s->timer.data = s;
    s->d = d;
    d->census = s;
    return s;
}

/* pid waits to be judged; judged at once when it cannot wait (no memory, or too many). */
static void defer(struct daemon *d, const struct census_wait *w)
{
    struct census_waits *s = d->closing ? NULL : waits_of(d);

    if (!s || s->count >= DEPARTURES_MAX || FLEETPROF_GROW(s->v, s->cap, s->count + 1) < 0) {
        judge(d, w);
        return;
    }
    s->v[s->count] = *w;
    s->v[s->count].due_ns = daemon__now_ns() + CENSUS_GRACE_MS * 1000000ull;
    if (s->count++ == 0)
        arm(s);
}

void daemon__census_settle(struct daemon *d, bool every_one)
{
    struct census_waits *s = d->census;
    uint64_t now = daemon__now_ns();
    size_t kept = 0;

    if (!s)
        return;
    /* Judged in the order they came; judging never adds to the list. */
    for (size_t i = 0; i < s->count; i++) {
        if (every_one || s->v[i].due_ns <= now)
            judge(d, &s->v[i]);
        else
            s->v[kept++] = s->v[i];
    }
    s->count = kept;
    if (kept)
        arm(s);
    else
        (void)uv_timer_stop(&s->timer);
}

static void on_census_closed(uv_handle_t *h)
{
    struct census_waits *s = h->data;

    free(s->v);
    free(s);
}

void daemon__census_close_timer(struct daemon *d)
{
    if (!d->census)
        return;
    daemon__census_settle(d, true);
    uv_close((uv_handle_t *)&d->census->timer, on_census_closed);
    d->census = NULL;
}

void daemon__census_spawned(struct conn *c, const int32_t *pids, size_t count)
{
    struct daemon *d = c->d;
    uint64_t now = daemon__now_ns(), after = 0, before = daemon__boot_ticks(now) + 1;
    double lived_ms = daemon__epoch_ms() - c->start_epoch_ms;

    /* A tick of slack each way: /proc counts starts in whole ticks. */
    if (c->start_epoch_ms > 0 && lived_ms >= 0 && lived_ms * 1e6 < (double)now)
        after = daemon__boot_ticks(now - (uint64_t)(lived_ms * 1e6));
    after = after > 0 ? after - 1 : 0;
    for (size_t i = 0; i < count; i++) {
        struct census_wait w = {.pid = pids[i],
                                .kind = CENSUS_SPAWNED,
                                .parent_pid = c->pid,
                                .born_after_ticks = after,
                                .born_before_ticks = before};

        if (pids[i] <= 0 || daemon__child_by_pid(d, pids[i]))
            continue;
        (void)snprintf(w.parent, sizeof(w.parent), "%s", c->name);
        defer(d, &w);
    }
}

/* Whether pid is connected and has said nothing yet: a profiled process whose Hello the loop
 * has not read (a busy daemon may take its child's close first). Tools do not fork children
 * that connect: only a runtime's fork handler does. */
static bool connecting(struct daemon *d, int32_t pid)
{
    for (const struct conn *k = d->conns; pid > 0 && k; k = k->next)
        if (k->kind == CONN_NEW && (int32_t)k->peer.pid == pid)
            return true;
    return false;
}

void daemon__census_close(struct conn *c)
{
    struct daemon *d = c->d;
    const char *parent = profiled_name(d, c->ppid);
    struct census_wait w = {.pid = (int32_t)c->peer.pid,
                            .kind = CENSUS_FORK_CHILD,
                            .parent_pid = c->ppid,
                            .since_ns = c->connect_ns};

    if (!parent && (connecting(d, c->ppid) || in_chroot(w.pid)))
        parent = ""; /* its name is its own (read when judged) */
    /* Only a profiled process's child: a tool connects too, and says what it wants. A
     * process that left for another root is a runtime's, whoever its parent: it exec'd
     * there (chroot(1)) before its Hello, and its new image cannot reach us. */
    if (!parent || d->closing)
        return;
    (void)snprintf(w.parent, sizeof(w.parent), "%s", parent);
    (void)snprintf(c->name, sizeof(c->name), "%s", parent);
    defer(d, &w);
}

void daemon__census_execd(struct conn *c)
{
    struct daemon *d = c->d;
    struct census_wait w = {
            .pid = c->pid, .kind = CENSUS_EXECD, .parent_pid = c->pid, .since_ns = c->connect_ns};

    if (d->closing || c->pid <= 0)
        return;
    (void)snprintf(w.parent, sizeof(w.parent), "%s", c->name);
    defer(d, &w);
}
