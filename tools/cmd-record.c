/* tools/cmd-record.c - `fleetprof record -- CMD`: profile one command and all its descendants.
 *
 * Runs the daemon in-process (daemon/daemon.h) on a private socket in a fresh 0700 directory,
 * starts CMD with libfleetprof.so preloaded and the socket in its environment (descendants
 * inherit both, so every fork and exec joins), and when CMD exits, or on the first Ctrl-C,
 * gathers the fleet into one file. Descendants still running then are gathered live and left
 * running. One libuv loop of our own carries the daemon, CMD's exit, signals and timers.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "common/outfile.h"
#include "common/parse.h"
#include "daemon/daemon.h"
#include "ipc/socket-trust.h"
#include "proto/fleetprof-protocol.h"
#include "tools/cmd-capture.h"
#include "tools/commands.h"
#include "tools/merge.h"

#define RUNTIME_NAME "libfleetprof.so"

/* After CMD exits, its exit profile (and those of descendants that exited just before it) may
 * still sit in the socket, unread by the daemon. Capture once every connection has closed, or
 * once the daemon's counts stayed the same for SETTLE_QUIET_TICKS ticks, at most
 * SETTLE_MAX_TICKS ticks. */
#define SETTLE_TICK_MS     20
#define SETTLE_QUIET_TICKS 5
#define SETTLE_MAX_TICKS   50

/* Ctrl-C: CMD gets SIGTERM and this long (at least) to exit; its runtime may need up to 2 s to
 * hand over its exit profile (design §4, Exit). */
#define STOP_GRACE_MIN_MS 2000
/* An abort waits this long for the daemon to close before leaving anyway. */
#define ABORT_CLOSE_MS    2000

enum record_phase {
    PHASE_RUNNING,   /* CMD runs */
    PHASE_STOPPING,  /* SIGTERM sent, waiting for CMD to exit */
    PHASE_SETTLING,  /* CMD exited; letting the last exit profiles arrive */
    PHASE_CAPTURING, /* daemon_capture() running */
    PHASE_CLOSING,   /* daemon_close() running */
};

struct record {
    uv_loop_t loop;
    struct daemon *daemon; /* owned; NULL once daemon_close() was called */
    uv_process_t process;  /* CMD */
    uv_signal_t sigint, sigterm;
    uv_timer_t timer; /* settle ticks, the stop grace, the abort bound */
    struct gather_meter meter;
    enum record_phase phase;
    bool cmd_running;
    bool aborted;
    int interrupts;       /* SIGINT/SIGTERM received */
    int cmd_status;       /* exit code, or 128 + signal */
    int capture_error;    /* 0 once the file is written; negative errno otherwise */
    uint64_t grace_ms;    /* stop grace after Ctrl-C */
    const char *output;   /* borrowed from argv */
    const char *pprof;    /* --pprof FILE, borrowed from argv; NULL: none */
    char *product;        /* owned: CMD's command line */
    const char *cmd_name; /* borrowed: argv of CMD, [0] */
    struct daemon_stats settle_last;
    int settle_ticks, settle_quiet;
    char dir[PATH_MAX];           /* the private directory */
    char socket[PATH_MAX + 32];   /* dir/fleetprof.sock */
    char exit_dir[PATH_MAX + 32]; /* dir/exit: profiles of children that missed the daemon */
};

static void record_close(struct record *rec);
static void start_capture(struct record *rec);

static void record_usage(FILE *out)
{
    fprintf(out, "Usage: fleetprof record [OPTIONS] -- CMD [ARGS]\n"
                 "Runs CMD with every process it starts profiled (forks, execs, threads), then\n"
                 "writes the whole fleet as one profile for profiler.firefox.com and prints a\n"
                 "summary. Descendants still running when CMD exits are gathered live and left\n"
                 "running. Ctrl-C once: stop CMD (SIGTERM) and write the profile; twice: abort.\n"
                 "\n"
                 "  -o, --output FILE      where to write (default fleetprof.json)\n"
                 "  --pprof FILE           also write the profile as gzipped pprof (as\n"
                 "                         `fleetprof export --format pprof`)\n"
                 "  --interval MS          sampling interval in milliseconds (default 1)\n"
                 "  --global-limit SIZE    memory for the whole fleet's buffers (default 256M)\n"
                 "  --stackwalk MODE       fp, dwarf or copy (default dwarf)\n"
                 "  --child-timeout S      gathering: give up on a child silent this long\n"
                 "                         (default 1)\n"
                 "  --no-summary           do not print the summary (`fleetprof summary FILE`)\n"
                 "  --help                 this text\n"
                 "Environment: FLEETPROF_LIB=PATH uses that libfleetprof.so.\n"
                 "Exit status: CMD's (128 + N if signal N ended it); 1 if CMD succeeded but no\n"
                 "profile was written; 126/127 if CMD cannot be run; 130 after an abort.\n");
}

static void on_daemon_log(void *userdata, enum daemon_log_level level, const char *message)
{
    struct record *rec = userdata;

    /* Info lines (every child that joins) would bury CMD's own output, and the warnings
     * are about children (one dropped, one slow) or repeat what the capture result says. */
    if (level > DAEMON_LOG_ERROR)
        return;
    gather_meter_clear(&rec->meter);
    fprintf(stderr, "fleetprof record: %s\n", message);
}

/* ---- finding libfleetprof.so ------------------------------------------------------------ */

/* FLEETPROF_LIB if set; else next to this binary in a build tree (build/tools/fleetprof ->
 * build/child/libfleetprof.so); else the installed library. Stores an absolute path (CMD may
 * change directory). Returns 0, or 1 after explaining. */
static int find_runtime(char out[PATH_MAX])
{
    const char *env = getenv("FLEETPROF_LIB");
    char exe[PATH_MAX], cand[PATH_MAX + 64];
    char tried[2 * PATH_MAX + 160] = "";
    ssize_t n;

    if (env && *env) {
        if (!realpath(env, out) || access(out, R_OK) < 0) {
            fprintf(stderr, "fleetprof record: FLEETPROF_LIB=%s: %s\n", env, strerror(errno));
            return 1;
        }
        goto check;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        char *slash;

        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        (void)snprintf(cand, sizeof(cand), "%s/../child/" RUNTIME_NAME, exe);
        if (realpath(cand, out) && access(out, R_OK) == 0)
            goto check;
        (void)snprintf(tried, sizeof(tried), "%s", cand);
    }
#ifdef FLEETPROF_LIBDIR
    (void)snprintf(cand, sizeof(cand), "%s/" RUNTIME_NAME, FLEETPROF_LIBDIR);
    if (realpath(cand, out) && access(out, R_OK) == 0)
        goto check;
    (void)snprintf(tried + strlen(tried), sizeof(tried) - strlen(tried), "%s%s",
                   *tried ? " and " : "", cand);
#endif
    fprintf(stderr,
            "fleetprof record: cannot find " RUNTIME_NAME " (looked for %s); build it, or set "
            "FLEETPROF_LIB=/path/to/" RUNTIME_NAME "\n",
            *tried ? tried : "it next to this program");
    return 1;

check:
    /* LD_PRELOAD separates entries with spaces and colons: such a path cannot be preloaded. */
    if (strpbrk(out, " :")) {
        fprintf(stderr,
                "fleetprof record: %s contains a space or a colon, which LD_PRELOAD cannot "
                "express; copy it elsewhere and set FLEETPROF_LIB\n",
                out);
        return 1;
    }
    return 0;
}

/* Fails early (before CMD runs, maybe for hours) when the output cannot be written: an
 * existing path must be a regular file (renaming over a directory, a device or a FIFO is not
 * what the user meant), and a file must be creatable beside it, as the capture will create
 * its own (tried, then removed: access(2) says yes to root on a read-only or virtual file
 * system). Returns 0, or 1 after explaining. */
static int check_output(const char *option, const char *path)
{
    struct fleetprof_outfile probe;
    struct stat st;
    int r;

    if (!*path || path[strlen(path) - 1] == '/' || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
        fprintf(stderr, "fleetprof record: %s %s: expected a file name, not a directory\n", option,
                path);
        return 1;
    }
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        fprintf(stderr, "fleetprof record: %s %s: not a regular file; name a file to write\n",
                option, path);
        return 1;
    }
    r = fleetprof_outfile_open(&probe, path);
    if (r < 0) {
        fprintf(stderr, "fleetprof record: cannot write %s: cannot create a file beside it: %s\n",
                path, strerror(-r));
        return 1;
    }
    fleetprof_outfile_abort(&probe);
    return 0;
}

/* ---- the private directory ------------------------------------------------------------- */

/* dir (0700, from mkdtemp), dir/exit; the socket path. Returns 0, or 1 after explaining. */
static int make_private_dir(struct record *rec)
{
    const char *bases[2] = {getenv("XDG_RUNTIME_DIR"), "/tmp"};
    const size_t sun_path_max = sizeof(((struct sockaddr_un *)NULL)->sun_path);
    char resolved[sizeof(((struct sockaddr_un *)NULL)->sun_path)], reason[IPC_TRUST_REASON_MAX];

    for (size_t i = 0; i < 2; i++) {
        const char *base = bases[i];
        int n;

        if (!base || !*base)
            continue;
        n = snprintf(rec->dir, sizeof(rec->dir), "%s/fleetprof-record-XXXXXX", base);
        /* A socket path must fit sockaddr_un.sun_path (108 bytes). */
        if (n < 0 || (size_t)n + sizeof("/fleetprof.sock") > sun_path_max)
            continue;
        if (!mkdtemp(rec->dir))
            continue;
        (void)snprintf(rec->socket, sizeof(rec->socket), "%s/fleetprof.sock", rec->dir);
        /* Ours, but what is above it must be safe too (docs/security.md): else the next. */
        if (ipc_socket_dir_check(rec->socket, geteuid(), false, resolved, sizeof(resolved), reason,
                                 sizeof(reason)) < 0) {
            fprintf(stderr, "fleetprof record: not in %s: %s\n", base, reason);
            (void)rmdir(rec->dir);
            errno = EPERM;
            continue;
        }
        (void)snprintf(rec->exit_dir, sizeof(rec->exit_dir), "%s/exit", rec->dir);
        if (mkdir(rec->exit_dir, 0700) < 0) {
            fprintf(stderr, "fleetprof record: cannot create %s: %s\n", rec->exit_dir,
                    strerror(errno));
            (void)rmdir(rec->dir);
            rec->dir[0] = '\0';
            return 1;
        }
        return 0;
    }
    rec->dir[0] = '\0';
    fprintf(stderr,
            "fleetprof record: cannot create a private directory in $XDG_RUNTIME_DIR or /tmp: "
            "%s\n",
            strerror(errno));
    return 1;
}

/* The .json files in exit_dir (children that could not reach the daemon at their exit). */
static size_t count_exit_profiles(const char *exit_dir)
{
    DIR *d = opendir(exit_dir);
    struct dirent *e;
    size_t n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);

        if (len > 5 && !strcmp(e->d_name + len - 5, ".json"))
            n++;
    }
    (void)closedir(d);
    return n;
}

/* The processes the capture lacks that did not leave their profile in exit_dir either (it
 * is folded in next): those listed go to kept. Returns how many are lost in all. */
static uint32_t still_lost(const struct record *rec, const struct daemon_capture_result *res,
                           struct daemon_lost_process *kept, size_t *ret_kept)
{
    uint32_t lost = res->lost;
    size_t n = 0;

    for (size_t i = 0; i < res->lost_listed; i++) {
        char path[sizeof(rec->exit_dir) + 16];

        (void)snprintf(path, sizeof(path), "%s/%d.json", rec->exit_dir, (int)res->lost_list[i].pid);
        if (access(path, F_OK) == 0)
            lost--;
        else
            kept[n++] = res->lost_list[i];
    }
    *ret_kept = n;
    return lost;
}

/* Folds the n profiles in exit_dir into the output with `fleetprof merge` (atomic: the output
 * is then either what it was or the merged file). with_output: the gathered output is an
 * input too; otherwise (nothing was gathered) the output is made of these profiles alone.
 * Returns 0 when they are in, else a negative errno (merge has said why). */
static int fold_exit_profiles(const struct record *rec, size_t n, bool with_output)
{
    DIR *d = opendir(rec->exit_dir);
    struct dirent *e;
    char **paths;
    size_t count = 0, first;
    int r = -ENOMEM;

    if (!d)
        return -errno;
    paths = calloc(n + 1, sizeof(*paths));
    if (!paths)
        goto out;
    if (with_output)
        paths[count++] = (char *)rec->output;
    first = count;
    while ((e = readdir(d)) && count - first < n) {
        size_t len = strlen(e->d_name);

        if (len <= 5 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        if (asprintf(&paths[count], "%s/%s", rec->exit_dir, e->d_name) < 0)
            goto out;
        count++;
    }
    (void)fflush(stdout);
    r = fleetprof_merge((const char *const *)paths, count, rec->output, "record", NULL);
    r = r == 0 ? 0 : -EIO;
    (void)fflush(stdout); /* merge's line before ours */
out:
    if (paths)
        for (size_t i = first; i < count; i++)
            free(paths[i]);
    free(paths);
    (void)closedir(d);
    return r;
}

/* Removes the socket (if the daemon left it), exit_dir's files unless keep_exit, and the
 * directories. */
static void remove_private_dir(struct record *rec, bool keep_exit)
{
    DIR *d;
    struct dirent *e;

    if (!rec->dir[0])
        return;
    (void)unlink(rec->socket);
    if (keep_exit)
        return;
    d = opendir(rec->exit_dir);
    if (d) {
        while ((e = readdir(d))) {
            char p[PATH_MAX + 320];

            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            (void)snprintf(p, sizeof(p), "%s/%s", rec->exit_dir, e->d_name);
            (void)unlink(p);
        }
        (void)closedir(d);
    }
    (void)rmdir(rec->exit_dir);
    (void)rmdir(rec->dir);
}

/* ---- CMD's environment ------------------------------------------------------------------ */

static bool is_var(const char *entry, const char *name)
{
    size_t n = strlen(name);

    return !strncmp(entry, name, n) && entry[n] == '=';
}

/* Our environment, minus what we set, plus LD_PRELOAD (ours first, then any existing
 * entries), FLEETPROF_STARTUP/SOCKET/DIR and, when given, FLEETPROF_INTERVAL_MS and
 * FLEETPROF_STACKWALK. Returns a NULL-terminated array (caller frees each entry and it), or
 * NULL when out of memory. */
static char **child_environment(const struct record *rec, const char *runtime, const char *interval,
                                const char *stackwalk)
{
    extern char **environ;
    const char *old_preload = getenv("LD_PRELOAD");
    size_t n = 0, k = 0;
    char **env;

    while (environ[n])
        n++;
    env = calloc(n + 8, sizeof(*env));
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *e = environ[i];

        if (is_var(e, "LD_PRELOAD") || is_var(e, "FLEETPROF_STARTUP") ||
            is_var(e, "FLEETPROF_SOCKET") || is_var(e, "FLEETPROF_DIR") ||
            (interval && is_var(e, "FLEETPROF_INTERVAL_MS")) ||
            (stackwalk && is_var(e, "FLEETPROF_STACKWALK")))
            continue;
        if (!(env[k++] = strdup(e)))
            goto err;
    }
    /* Keep the user's preloads, but not a second copy of ours. */
    if (old_preload && *old_preload && !strstr(old_preload, runtime)) {
        if (asprintf(&env[k++], "LD_PRELOAD=%s:%s", runtime, old_preload) < 0)
            goto err_last;
    } else if (asprintf(&env[k++], "LD_PRELOAD=%s", runtime) < 0) {
        goto err_last;
    }
    if (!(env[k++] = strdup("FLEETPROF_STARTUP=1")))
        goto err;
    if (asprintf(&env[k++], "FLEETPROF_SOCKET=%s", rec->socket) < 0)
        goto err_last;
    if (asprintf(&env[k++], "FLEETPROF_DIR=%s", rec->exit_dir) < 0)
        goto err_last;
    if (interval && asprintf(&env[k++], "FLEETPROF_INTERVAL_MS=%s", interval) < 0)
        goto err_last;
    if (stackwalk && asprintf(&env[k++], "FLEETPROF_STACKWALK=%s", stackwalk) < 0)
        goto err_last;
    env[k] = NULL;
    return env;

err_last:
    env[--k] = NULL; /* asprintf leaves its output undefined on failure */
err:
    for (size_t i = 0; env[i]; i++)
        free(env[i]);
    free(env);
    return NULL;
}

static void free_environment(char **env)
{
    if (!env)
        return;
    for (size_t i = 0; env[i]; i++)
        free(env[i]);
    free(env);
}

/* "CMD ARG..." for the profile's product name, at most 1 KiB. */
static char *command_line(int argc, char **argv)
{
    size_t cap = 1024, len = 0;
    char *s = malloc(cap);

    if (!s)
        return NULL;
    s[0] = '\0';
    for (int i = 0; i < argc && len + 1 < cap; i++) {
        int n = snprintf(s + len, cap - len, "%s%s", i ? " " : "", argv[i]);

        if (n < 0)
            break;
        len += (size_t)n < cap - len ? (size_t)n : cap - len - 1;
    }
    return s;
}

/* ---- the loop: CMD's exit, signals, capture, close ------------------------------------- */

static void on_closed(void *userdata)
{
    struct record *rec = userdata;

    /* The daemon is gone; the remaining handles close and uv_run() returns. */
    if (!uv_is_closing((uv_handle_t *)&rec->timer))
        uv_close((uv_handle_t *)&rec->timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&rec->sigint))
        uv_close((uv_handle_t *)&rec->sigint, NULL);
    if (!uv_is_closing((uv_handle_t *)&rec->sigterm))
        uv_close((uv_handle_t *)&rec->sigterm, NULL);
    /* An abort does not wait for a SIGKILLed CMD to be reaped. */
    if (rec->aborted && !uv_is_closing((uv_handle_t *)&rec->process))
        uv_close((uv_handle_t *)&rec->process, NULL);
}

static void on_abort_timeout(uv_timer_t *t)
{
    /* The daemon did not finish closing in time: leave with what we have. */
    uv_stop(t->loop);
}

static void record_close(struct record *rec)
{
    if (rec->phase == PHASE_CLOSING)
        return;
    rec->phase = PHASE_CLOSING;
    (void)uv_timer_stop(&rec->timer);
    if (rec->aborted)
        (void)uv_timer_start(&rec->timer, on_abort_timeout, ABORT_CLOSE_MS, 0);
    if (rec->daemon) {
        daemon_close(rec->daemon, on_closed, rec);
        rec->daemon = NULL;
    } else {
        on_closed(rec);
    }
}

static void on_capture_progress(void *userdata, const struct daemon_capture_progress *p)
{
    struct record *rec = userdata;

    /* Exit profiles are processes too: count them as done from the start. */
    gather_meter_update(&rec->meter, p->children_done + p->exit_profiles,
                        p->children_total + p->exit_profiles, p->bytes);
}

/* Every process got the environment and none left a profile: say which of the two ways
 * that happens it was, from what the daemon saw. */
static void explain_no_profile(const struct record *rec)
{
    struct daemon_stats st;

    daemon_get_stats(rec->daemon, &st);
    if (st.children_total == 0)
        fprintf(stderr,
                "fleetprof record: no process of %s connected to the profiler; is it "
                "statically linked, or does it clear LD_PRELOAD?\n",
                rec->cmd_name);
    else if (!rec->cmd_running && rec->cmd_status > 128)
        fprintf(stderr,
                "fleetprof record: %" PRIu64 " process%s of %s connected, then ended the "
                "connection without sending a profile: %s was killed by signal %d (%s) "
                "before it could write one\n",
                st.children_total, st.children_total == 1 ? "" : "es", rec->cmd_name, rec->cmd_name,
                rec->cmd_status - 128, strsignal(rec->cmd_status - 128));
    else
        fprintf(stderr,
                "fleetprof record: %" PRIu64 " process%s of %s connected, then ended the "
                "connection without sending a profile (%" PRIu64 " dropped for misbehaving); "
                "was it killed, or did it replace the profiler's descriptors?\n",
                st.children_total, st.children_total == 1 ? "" : "es", rec->cmd_name,
                st.dropped_children);
}

static void on_capture_done(void *userdata, const struct daemon_capture_result *res)
{
    struct record *rec = userdata;
    static struct daemon_lost_process kept[DAEMON_LOST_LISTED];
    size_t n_kept = 0;
    uint32_t lost;
    char b[32];

    gather_meter_finish(&rec->meter);
    if (rec->aborted) {
        /* Too late to stop it: keep the promise of no file. */
        if (!res->error)
            (void)unlink(res->path ? res->path : rec->output);
        return;
    }
    rec->capture_error = res->error;
    if (res->error == -ENODATA && count_exit_profiles(rec->exit_dir)) {
        /* Nothing gathered, but profiles wait in exit_dir: cmd_record() makes the file. */
    } else if (res->error < 0) {
        fprintf(stderr, "fleetprof record: no profile written: %s\n",
                res->message ? res->message : strerror(-res->error));
        if (res->error == -ENODATA)
            explain_no_profile(rec);
    } else {
        gather_format_bytes(b, sizeof(b), res->bytes);
        fprintf(stderr, "fleetprof record: wrote %s (%s): %" PRIu32 " process%s",
                res->path ? res->path : rec->output, b, res->processes,
                res->processes == 1 ? "" : "es");
        lost = still_lost(rec, res, kept, &n_kept);
        if (lost)
            fprintf(stderr, ", %" PRIu32 " lost", lost);
        if (res->recovered)
            fprintf(stderr, ", %" PRIu32 " recovered after %s killed or crashed", res->recovered,
                    res->recovered == 1 ? "it was" : "they were");
        if (res->recovered && !rec->cmd_running && rec->cmd_status > 128)
            fprintf(stderr, " (%s was killed by signal %d, %s)", rec->cmd_name,
                    rec->cmd_status - 128, strsignal(rec->cmd_status - 128));
        fputc('\n', stderr);
        print_lost(stderr, "fleetprof record", lost, kept, n_kept);
    }
    if (rec->cmd_running) {
        /* Ctrl-C, and CMD outlived its grace: the capture is done, now it must go. */
        (void)uv_process_kill(&rec->process, SIGKILL);
    }
    record_close(rec);
}

static void start_capture(struct record *rec)
{
    int r;

    (void)uv_timer_stop(&rec->timer);
    rec->phase = PHASE_CAPTURING;
    gather_meter_init(&rec->meter);
    r = daemon_capture(rec->daemon, rec->output, rec->product, on_capture_progress, on_capture_done,
                       rec);
    if (r < 0) {
        fprintf(stderr, "fleetprof record: cannot gather the profile: %s\n", strerror(-r));
        rec->capture_error = r;
        if (rec->cmd_running)
            (void)uv_process_kill(&rec->process, SIGKILL);
        record_close(rec);
    }
}

static bool same_counts(const struct daemon_stats *a, const struct daemon_stats *b)
{
    /* Not the update count: live descendants keep sending updates. */
    return a->children == b->children && a->children_total == b->children_total &&
           a->exit_profiles == b->exit_profiles && a->exit_profile_bytes == b->exit_profile_bytes;
}

static void on_settle_tick(uv_timer_t *t)
{
    struct record *rec = t->data;
    struct daemon_stats s;

    daemon_get_stats(rec->daemon, &s);
    if (rec->settle_ticks++ > 0 && same_counts(&s, &rec->settle_last))
        rec->settle_quiet++;
    else
        rec->settle_quiet = 0;
    rec->settle_last = s;
    /* No connection left, and none waiting to be accepted or to be read, means every exit
     * profile was read to its end. A connection counts as a child only once its Hello is read,
     * a poll phase after it is accepted, and ticks run before the poll phase: a process whose
     * connection was accepted in the round that saw CMD exit (or not yet accepted) was counted
     * nowhere, and left out of the file. */
    if (s.connecting || s.building) /* a profile the daemon's workers build counts too */
        rec->settle_quiet = 0;
    if ((s.children == 0 && !s.connecting && !s.building) ||
        rec->settle_quiet >= SETTLE_QUIET_TICKS || rec->settle_ticks >= SETTLE_MAX_TICKS)
        start_capture(rec);
}

static void on_cmd_exit(uv_process_t *p, int64_t exit_status, int term_signal)
{
    struct record *rec = p->data;

    rec->cmd_running = false;
    rec->cmd_status = term_signal ? 128 + term_signal : (int)(exit_status & 0xff);
    uv_close((uv_handle_t *)p, NULL);
    /* After an abort, or when the stop grace ran out and the capture already runs, there is
     * nothing left to start. */
    if (rec->aborted || rec->phase >= PHASE_SETTLING)
        return;
    rec->phase = PHASE_SETTLING;
    rec->settle_ticks = 0;
    rec->settle_quiet = 0;
    (void)uv_timer_start(&rec->timer, on_settle_tick, 0, SETTLE_TICK_MS);
}

static void on_grace_over(uv_timer_t *t)
{
    struct record *rec = t->data;

    fprintf(stderr,
            "fleetprof record: %s is still running %.1f s after SIGTERM; gathering now, then "
            "it is killed\n",
            rec->cmd_name, (double)rec->grace_ms / 1000);
    start_capture(rec);
}

static void record_abort(struct record *rec)
{
    rec->aborted = true;
    gather_meter_clear(&rec->meter);
    if (rec->cmd_running)
        (void)uv_process_kill(&rec->process, SIGKILL);
    fprintf(stderr, "fleetprof record: aborted; no profile written\n");
    record_close(rec);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct record *rec = h->data;

    (void)signum;
    if (++rec->interrupts >= 2) {
        if (rec->phase == PHASE_CLOSING)
            uv_stop(&rec->loop); /* closing takes too long for the user: leave now */
        else
            record_abort(rec);
        return;
    }
    gather_meter_clear(&rec->meter);
    switch (rec->phase) {
    case PHASE_RUNNING:
        fprintf(stderr,
                "fleetprof record: stopping %s (SIGTERM), then writing the profile; press "
                "Ctrl-C again to abort without writing it\n",
                rec->cmd_name);
        (void)uv_process_kill(&rec->process, SIGTERM);
        rec->phase = PHASE_STOPPING;
        (void)uv_timer_start(&rec->timer, on_grace_over, rec->grace_ms, 0);
        break;
    case PHASE_STOPPING:
    case PHASE_SETTLING:
    case PHASE_CAPTURING:
        fprintf(stderr, "fleetprof record: writing the profile; press Ctrl-C again to abort\n");
        break;
    case PHASE_CLOSING:
        break;
    }
}

int cmd_record(int argc, char **argv)
{
    static const struct option longopts[] = {
            {"output", required_argument, NULL, 'o'},
            {"interval", required_argument, NULL, 'i'},
            {"global-limit", required_argument, NULL, 'g'},
            {"stackwalk", required_argument, NULL, 'w'},
            {"child-timeout", required_argument, NULL, 't'},
            {"no-summary", no_argument, NULL, 'n'},
            {"pprof", required_argument, NULL, 'p'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    uv_stdio_container_t stdio[3] = {
            {.flags = UV_INHERIT_FD, .data.fd = 0},
            {.flags = UV_INHERIT_FD, .data.fd = 1},
            {.flags = UV_INHERIT_FD, .data.fd = 2},
    };
    struct daemon_options opt = {0};
    uv_process_options_t popt = {0};
    const char *interval = NULL, *stackwalk = NULL;
    bool summary = true;
    char runtime[PATH_MAX];
    struct record *rec;
    char **env = NULL;
    int status, c, r;
    size_t exits;

    rec = calloc(1, sizeof(*rec));
    if (!rec) {
        fprintf(stderr, "fleetprof record: out of memory\n");
        return 1;
    }
    rec->output = "fleetprof.json";
    optind = 0; /* glibc: full re-initialisation; '+': CMD's own options are not ours */
    while ((c = getopt_long(argc, argv, "+ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            rec->output = optarg;
            break;
        case 'i':
            if (parse_duration(optarg, 1e6, 50000, 1000000000, &opt.interval_ns) < 0) {
                fprintf(stderr,
                        "fleetprof record: invalid --interval '%s': expected "
                        "a decimal number of milliseconds from 0.05 to 1000\n",
                        optarg);
                goto err_usage;
            }
            interval = optarg;
            break;
        case 'g':
            if (parse_size(optarg, &opt.global_limit_bytes) < 0 || !opt.global_limit_bytes) {
                fprintf(stderr,
                        "fleetprof record: invalid --global-limit '%s': expected a "
                        "size such as 256M or 1G\n",
                        optarg);
                goto err_usage;
            }
            if (opt.global_limit_bytes < DAEMON_GLOBAL_LIMIT_MIN(DAEMON_CHUNK_BYTES)) {
                fprintf(stderr,
                        "fleetprof record: --global-limit %s is too small: at least 512K, one "
                        "process's chunk to write in and one it released (256K each)\n",
                        optarg);
                goto err_usage;
            }
            break;
        case 'w':
            if (!strcmp(optarg, "fp")) {
                opt.stackwalk = FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_FP;
            } else if (!strcmp(optarg, "dwarf")) {
                opt.stackwalk = FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_DWARF;
            } else if (!strcmp(optarg, "copy")) {
                opt.stackwalk = FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_COPY;
            } else {
                fprintf(stderr,
                        "fleetprof record: invalid --stackwalk '%s': expected fp, "
                        "dwarf or copy\n",
                        optarg);
                goto err_usage;
            }
            stackwalk = optarg;
            break;
        case 't':
            if (parse_duration(optarg, 1e9, 10000000, 600000000000ull, &opt.child_timeout_ns) < 0) {
                fprintf(stderr,
                        "fleetprof record: invalid --child-timeout '%s': expected "
                        "seconds from 0.01 to 600\n",
                        optarg);
                goto err_usage;
            }
            break;
        case 'n':
            summary = false;
            break;
        case 'p':
            rec->pprof = optarg;
            break;
        case 'h':
            record_usage(stdout);
            free(rec);
            return 0;
        default:
            record_usage(stderr);
            free(rec);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "fleetprof record: no command given, as in `fleetprof record -- "
                        "./server --workers 4`\n");
        goto err_usage;
    }
    rec->cmd_name = argv[optind];
    rec->grace_ms = opt.child_timeout_ns / 1000000;
    if (rec->grace_ms < STOP_GRACE_MIN_MS)
        rec->grace_ms = STOP_GRACE_MIN_MS;
    if (check_output("-o", rec->output) || (rec->pprof && check_output("--pprof", rec->pprof)) ||
        find_runtime(runtime))
        goto err_free;
    rec->product = command_line(argc - optind, argv + optind);
    if (!rec->product)
        goto err_oom;
    if (make_private_dir(rec))
        goto err_free;
    env = child_environment(rec, runtime, interval, stackwalk);
    if (!env)
        goto err_oom_dir;

    r = uv_loop_init(&rec->loop);
    if (r < 0) {
        fprintf(stderr, "fleetprof record: %s\n", uv_strerror(r));
        goto err_env;
    }
    opt.socket_path = rec->socket;
    opt.log = on_daemon_log;
    opt.log_level = DAEMON_LOG_ERROR; /* on_daemon_log() keeps no other */
    opt.log_userdata = rec;
    gather_meter_init(&rec->meter);
    r = daemon_new(&rec->loop, &opt, &rec->daemon);
    if (r < 0) {
        fprintf(stderr, "fleetprof record: cannot start the profiler on %s: %s\n", rec->socket,
                strerror(-r));
        (void)uv_loop_close(&rec->loop);
        goto err_env;
    }
    (void)uv_timer_init(&rec->loop, &rec->timer);
    rec->timer.data = rec;
    (void)uv_signal_init(&rec->loop, &rec->sigint);
    (void)uv_signal_init(&rec->loop, &rec->sigterm);
    rec->sigint.data = rec->sigterm.data = rec;
    (void)uv_signal_start(&rec->sigint, on_signal, SIGINT);
    (void)uv_signal_start(&rec->sigterm, on_signal, SIGTERM);

    /* libuv resets every signal disposition (SIGPIPE, ignored by this CLI, included) and the
     * signal mask in the child before exec: CMD starts as if from a shell. It stays in our
     * process group, so a terminal's Ctrl-C reaches it too, and so do its terminal reads. */
    popt.file = argv[optind];
    popt.args = argv + optind; /* NULL-terminated: argv[argc] is NULL */
    popt.env = env;
    popt.exit_cb = on_cmd_exit;
    popt.stdio_count = 3;
    popt.stdio = stdio;
    rec->process.data = rec;
    r = uv_spawn(&rec->loop, &rec->process, &popt);
    if (r < 0) {
        fprintf(stderr, "fleetprof record: cannot run %s: %s%s\n", rec->cmd_name, uv_strerror(r),
                r == UV_ENOENT && !strchr(rec->cmd_name, '/') ? " (not found in $PATH)" : "");
        rec->cmd_status = r == UV_ENOENT ? 127 : 126;
        rec->capture_error = r;
        uv_close((uv_handle_t *)&rec->process, NULL); /* initialised even on failure */
        record_close(rec);
    } else {
        rec->cmd_running = true;
        rec->phase = PHASE_RUNNING;
    }
    (void)uv_run(&rec->loop, UV_RUN_DEFAULT);
    /* After an uv_stop() (abort bound) handles may remain: the process exits anyway. */
    (void)uv_loop_close(&rec->loop);
    free_environment(env);

    status = rec->cmd_status;
    if (rec->aborted) {
        status = 130;
    } else if (rec->capture_error < 0 && status == 0) {
        status = 1;
    }
    /* Children that could not reach the daemon at their exit wrote their profile into
     * exit_dir: fold them into the file (or keep them, and say where they are). */
    exits = rec->aborted ? 0 : count_exit_profiles(rec->exit_dir);
    if (exits) {
        /* Nothing gathered (-ENODATA): these profiles alone make the file. */
        bool alone = rec->capture_error == -ENODATA;
        bool folded = (!rec->capture_error || alone) && fold_exit_profiles(rec, exits, !alone) == 0;

        fprintf(stderr,
                "fleetprof record: %zu process%s could not reach the profiler at exit; %s %s\n",
                exits, exits == 1 ? "" : "es",
                folded ? (alone ? "written to" : "folded into")
                       : (exits == 1 ? "its profile is kept in" : "their profiles are kept in"),
                folded ? rec->output : rec->exit_dir);
        if (folded) {
            exits = 0;
            rec->capture_error = 0;
            if (alone && status == 1 && rec->cmd_status == 0)
                status = 0;
        }
    }
    remove_private_dir(rec, exits > 0);
    if (rec->pprof && !rec->aborted && !rec->capture_error &&
        write_pprof_beside(rec->output, rec->pprof, "fleetprof record", stderr) < 0 && status == 0)
        status = 1;
    if (summary && !rec->aborted && !rec->capture_error) {
        char *sargv[] = {"summary", "--top", "5", (char *)rec->output, NULL};

        (void)fflush(stderr);
        (void)cmd_summary(4, sargv);
    }
    free(rec->product);
    free(rec);
    return status;

err_oom_dir:
    fprintf(stderr, "fleetprof record: out of memory\n");
    goto err_dir;
err_env:
    free_environment(env);
err_dir:
    remove_private_dir(rec, false);
    goto err_free;
err_oom:
    fprintf(stderr, "fleetprof record: out of memory\n");
err_free:
    free(rec->product);
    free(rec);
    return 1;
err_usage:
    free(rec);
    return 2;
}
