/* tools/cmd-top.c - `fleetprof top`: the fleet's performance groups, live.
 *
 * Each refresh asks the daemon for a GroupsReport (one short connection, like `status`) and
 * shows rates against the previous report, or against the report of a second ago for
 * intervals below a second (tools/top-model.c does the arithmetic and the text). On a
 * terminal it redraws in place on the alternate screen and reads keys; on a pipe it prints
 * one plain block per refresh; --json prints one JSON object per refresh. The terminal is
 * restored on every way out: q, SIGINT/SIGTERM/SIGHUP, errors, Ctrl-Z.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "common/parse.h"
#include "ipc/ipc.h"
#include "ipc/uv-ipc.h"
#include "proto/fleetprof-protocol.h"
#include "tools/commands.h"
#include "tools/daemon-client.h"
#include "tools/top-model.h"

#define INTERVAL_MAX_NS (3600 * 1000000000ull)
#define INTERVAL_MIN_NS 50000000ull
/* Reports kept for rates: the settled time moves as processes report (every quarter of a
 * second each, late on a loaded machine), so the one to take rates against can be that far
 * back, besides the interval. */
#define HISTORY_MAX     64
/* Rates over at least half the interval, or (--once) what there is after this long. */
#define ONCE_SETTLE_NS  (3000ull * 1000 * 1000)

/* ---- one request ---------------------------------------------------------------------- */

/* Signal handlers write one byte here (self-pipe): the main loop's poll and a request's loop
 * both wake up on it. */
static int signal_pipe[2] = {-1, -1};

struct fetch {
    uv_loop_t loop;
    uv_timer_t timer;
    uv_poll_t signals;     /* signal_pipe[0]: a signal ends the request at once */
    struct ipc_conn *conn; /* NULL once closed */
    uint64_t id;
    const char *group;                 /* borrowed: the breakdown asked for, or NULL */
    struct top_snapshot *snap;         /* owned until handed to the caller */
    char daemon_error[256];            /* the daemon's Error message, "" if none */
    int daemon_code;                   /* its errno */
    int error;                         /* negative errno, 0 while fine */
    char reason[IPC_TRUST_REASON_MAX]; /* why the connection failed or closed */
};

static void on_fetch_message(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *userdata)
{
    struct fetch *f = userdata;

    if (env->msg_case == FLEETPROF__ENVELOPE__MSG_GROUPS_REPORT) {
        if (env->groups_report->request_id != f->id)
            return; /* not ours (a daemon answers each request once; be strict anyway) */
        if (top_snapshot_from_report(env->groups_report, f->group, &f->snap) < 0)
            f->error = -ENOMEM;
    } else if (env->msg_case == FLEETPROF__ENVELOPE__MSG_ERROR) {
        (void)snprintf(f->daemon_error, sizeof(f->daemon_error), "%s",
                       env->error->message ? env->error->message : "");
        f->daemon_code = env->error->code;
        f->error = -EREMOTEIO;
    } else {
        return; /* a daemon may add events; they are not answers */
    }
    ipc_conn_close(conn);
}

static void on_fetch_closed(struct ipc_conn *conn, int error, const char *reason, void *userdata)
{
    struct fetch *f = userdata;

    (void)conn;
    f->conn = NULL;
    if (!f->snap && !f->error) {
        f->error = error < 0 ? error : -ECONNRESET;
        (void)snprintf(f->reason, sizeof(f->reason), "%s", reason ? reason : "");
    }
    (void)uv_timer_stop(&f->timer);
    uv_close((uv_handle_t *)&f->timer, NULL);
    (void)uv_poll_stop(&f->signals);
    uv_close((uv_handle_t *)&f->signals, NULL);
}

static void on_fetch_timeout(uv_timer_t *t)
{
    struct fetch *f = t->data;

    f->error = -ETIMEDOUT;
    if (f->conn)
        ipc_conn_close(f->conn);
}

static void on_fetch_signal(uv_poll_t *p, int status, int events)
{
    struct fetch *f = p->data;

    (void)status;
    (void)events;
    f->error = -EINTR;
    (void)uv_poll_stop(p); /* the byte stays in the pipe for the main loop */
    if (f->conn)
        ipc_conn_close(f->conn);
}

/* Asks for one report. Returns 0 with *ret_snap set, or a negative errno with f's fields
 * saying why (explained by explain_fetch_error). */
static int fetch_report(const char *socket_path, const char *group, uint64_t id, struct fetch *f,
                        struct top_snapshot **ret_snap)
{
    static const struct ipc_conn_callbacks cbs = {.on_message = on_fetch_message,
                                                  .on_close = on_fetch_closed};
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GroupsRequest req = FLEETPROF__GROUPS_REQUEST__INIT;
    int r;

    memset(f, 0, sizeof(*f));
    f->id = id;
    f->group = group;
    r = uv_loop_init(&f->loop);
    if (r < 0)
        return f->error = r;
    r = daemon_client_connect(&f->loop, socket_path, &cbs, f, f->reason, &f->conn);
    if (r < 0) {
        (void)uv_loop_close(&f->loop);
        return f->error = r;
    }
    (void)uv_timer_init(&f->loop, &f->timer);
    f->timer.data = f;
    (void)uv_timer_start(&f->timer, on_fetch_timeout, DAEMON_CLIENT_TIMEOUT_MS, 0);
    (void)uv_poll_init(&f->loop, &f->signals, signal_pipe[0]);
    f->signals.data = f;
    (void)uv_poll_start(&f->signals, UV_READABLE, on_fetch_signal);

    req.id = id;
    req.per_process_group = (char *)(group ? group : ""); /* protobuf-c: not written to */
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GROUPS_REQUEST;
    env.groups_request = &req;
    r = ipc_conn_send(f->conn, &env);
    if (r < 0) {
        f->error = r;
        ipc_conn_close(f->conn);
    }
    (void)uv_run(&f->loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&f->loop);
    if (f->snap && !f->error) {
        *ret_snap = f->snap;
        return 0;
    }
    top_snapshot_free(f->snap);
    f->snap = NULL;
    return f->error < 0 ? f->error : -EIO;
}

static void explain_fetch_error(const char *socket_path, const struct fetch *f)
{
    int r = f->error;

    if (r == -EPERM || r == -ENOENT || r == -ECONNREFUSED || r == -EACCES || r == -ETIMEDOUT)
        daemon_client_explain(socket_path, r, f->reason);
    else if (r == -EREMOTEIO && (f->daemon_code == ENOSYS || f->daemon_code == ENOMSG ||
                                 f->daemon_code == EPROTONOSUPPORT))
        fprintf(stderr,
                "fleetprof: the daemon on %s does not know performance groups (%s): it is "
                "older than this fleetprof; restart it from the same build\n",
                socket_path, f->daemon_error);
    else if (r == -EREMOTEIO)
        fprintf(stderr, "fleetprof: the daemon on %s says: %s\n", socket_path, f->daemon_error);
    else if (r == -ENOMSG || r == -EBADMSG)
        /* Our decoder refused the reply: a message this build does not know. */
        fprintf(stderr,
                "fleetprof: the daemon on %s answered with a message this fleetprof does not "
                "understand (%s): are fleetprof and fleetprofd from the same version?\n",
                socket_path, *f->reason ? f->reason : strerror(-r));
    else if (r == -ECONNRESET || r == 0 || r == -EPIPE)
        /* A daemon that does not know GroupsRequest drops the connection without a word. */
        fprintf(stderr,
                "fleetprof: the daemon on %s closed the connection without answering the "
                "groups request (%s): it is probably older than this fleetprof and does not "
                "know performance groups; restart it from the same build\n",
                socket_path, *f->reason ? f->reason : "no reply");
    else
        fprintf(stderr, "fleetprof: cannot talk to the daemon on %s: %s\n", socket_path,
                strerror(-r));
}

/* ---- the terminal ----------------------------------------------------------------------- */

struct term {
    bool active; /* raw keys and the alternate screen are on */
    bool keys;   /* stdin is a terminal: read keys from it */
    struct termios saved;
};

static struct term term;

static void write_all(int fd, const char *s, size_t len)
{
    while (len) {
        ssize_t n = write(fd, s, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* the terminal is gone: nothing left to restore on it */
        s += n;
        len -= (size_t)n;
    }
}

#define ALT_SCREEN_ON  "\033[?1049h\033[?25l" /* alternate screen, hidden cursor */
#define ALT_SCREEN_OFF "\033[?25h\033[?1049l"

static void term_restore(void)
{
    if (!term.active)
        return;
    term.active = false;
    write_all(STDOUT_FILENO, ALT_SCREEN_OFF, sizeof(ALT_SCREEN_OFF) - 1);
    if (term.keys)
        (void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &term.saved);
}

/* Keys one at a time without echo. Signals stay on (ISIG): Ctrl-C is SIGINT, which ends us
 * through the same clean path as q. */
static void term_enter(void)
{
    if (term.active)
        return;
    if (term.keys) {
        struct termios raw = term.saved;

        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        (void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
    }
    write_all(STDOUT_FILENO, ALT_SCREEN_ON, sizeof(ALT_SCREEN_ON) - 1);
    term.active = true;
}

static void term_size(size_t *ret_rows, size_t *ret_cols)
{
    struct winsize ws;

    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        *ret_rows = ws.ws_row;
        *ret_cols = ws.ws_col;
    } else {
        *ret_rows = 24;
        *ret_cols = 80;
    }
}

static void on_signal(int sig)
{
    int saved = errno;
    char c = (char)sig;

    (void)!write(signal_pipe[1], &c, 1);
    errno = saved;
}

static int signals_install(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP, SIGCONT};
    struct sigaction sa;

    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -errno;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    (void)sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        (void)sigaction(sigs[i], &sa, NULL);
    return 0;
}

/* ---- the loop --------------------------------------------------------------------------- */

struct top {
    const char *socket_path; /* borrowed */
    uint64_t interval_ns;
    uint64_t started_ns;
    bool once, json, tty;
    char *group;    /* owned: the group broken down, NULL for the fleet view */
    char *selected; /* owned: the group row marked on a terminal, NULL for none */
    /* Reports, oldest first; the last is the current one. Rates are over the newest one at
     * least a window older (see refresh()), so a short interval keeps a few. */
    struct top_snapshot *hist[HISTORY_MAX];
    size_t n_hist;
    struct top_view view;
    bool have_view;
    uint64_t next_id;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long selected_index(const struct top *t)
{
    for (size_t i = 0; t->selected && i < t->view.n_groups; i++)
        if (!strcmp(t->view.groups[i].totals->name, t->selected))
            return (long)i;
    return -1;
}

static int set_string(char **slot, const char *value)
{
    char *copy = value ? strdup(value) : NULL;

    if (value && !copy)
        return -ENOMEM;
    free(*slot);
    *slot = copy;
    return 0;
}

/* Shows the current view. Returns 0, or -EPIPE when stdout is gone (`top | head`). */
static int show(struct top *t)
{
    char clock[16] = "";
    time_t now = time(NULL);
    struct tm tm;
    struct top_render_opts o = {.selected = -1};

    if (!t->have_view)
        return 0; /* a resize before the first report: nothing to show yet */
    if (localtime_r(&now, &tm))
        (void)strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
    o.clock = clock;
    if (t->json) {
        top_write_json(stdout, &t->view);
    } else if (!t->tty) {
        (void)top_render(stdout, &t->view, &o);
        if (!t->once)
            fputc('\n', stdout); /* a blank line between blocks */
    } else {
        char *text = NULL, *line, *end;
        size_t text_len = 0, rows, cols;
        size_t fixed = t->group ? TOP_PROCESS_ROW_FIXED : TOP_GROUP_ROW_FIXED;
        FILE *mem = open_memstream(&text, &text_len);
        FILE *frame;
        char *frame_text = NULL;
        size_t frame_len = 0;
        long hl, n = 0;

        if (!mem)
            return -ENOMEM;
        term_size(&rows, &cols);
        /* Rows left for the table: header, blank, column titles, and the key help (2). */
        o.max_rows = rows > (t->group ? 8u : 6u) ? rows - (t->group ? 8u : 6u) : 1;
        o.name_width = cols > fixed + 8 ? cols - fixed : 8; /* the columns stay in sight */
        o.selected = selected_index(t);
        o.keys_help = term.keys;
        hl = top_render(mem, &t->view, &o);
        if (fclose(mem) != 0) {
            free(text);
            return -ENOMEM;
        }
        frame = open_memstream(&frame_text, &frame_len);
        if (!frame) {
            free(text);
            return -ENOMEM;
        }
        /* Home, then each line cut to the width (a wrapped line would scroll the screen),
         * erasing what the previous frame left to its right; then erase below. */
        fputs("\033[H", frame);
        for (line = text; *line && (size_t)n < rows; line = end + 1, n++) {
            size_t w = 0;
            char *p;

            end = strchr(line, '\n');
            if (!end)
                end = line + strlen(line);
            if (n == hl)
                fputs("\033[7m", frame);
            for (p = line; p < end; p++) {
                if (((unsigned char)*p & 0xC0) != 0x80 && ++w > cols)
                    break;
                fputc(*p, frame);
            }
            if (n == hl)
                fputs("\033[m", frame);
            fputs((size_t)n + 1 < rows ? "\033[K\n" : "\033[K", frame);
            if (!*end)
                break;
        }
        fputs("\033[J", frame);
        free(text);
        if (fclose(frame) != 0) {
            free(frame_text);
            return -ENOMEM;
        }
        write_all(STDOUT_FILENO, frame_text, frame_len);
        free(frame_text);
        return 0;
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        return -EPIPE;
    return 0;
}

static void history_drop(struct top *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        top_snapshot_free(t->hist[i]);
    memmove(t->hist, t->hist + n, (t->n_hist - n) * sizeof(t->hist[0]));
    t->n_hist -= n;
}

/* Gets a report. rotate: a scheduled refresh (the report joins the history); otherwise the
 * view changed (another group) and the report replaces the current one, rates staying
 * against the same older one. A report settled at the same time as the one before it
 * replaces it too: it has nothing newer to rate. Rates are against the report settled
 * nearest to an interval before the current one (top_history_pick()). */
static int refresh(struct top *t, bool rotate)
{
    struct top_snapshot *snap, *cur, *prev;
    struct fetch f;
    int r;

    r = fetch_report(t->socket_path, t->group, ++t->next_id, &f, &snap);
    if (r < 0) {
        if (r == -EINTR)
            return r;
        term_restore();
        explain_fetch_error(t->socket_path, &f);
        return r;
    }
    if (t->n_hist >= 2 && (!rotate || t->hist[t->n_hist - 1]->settled_ns == snap->settled_ns)) {
        top_snapshot_free(t->hist[t->n_hist - 1]);
        t->n_hist--;
    }
    if (t->n_hist == HISTORY_MAX)
        history_drop(t, 1);
    t->hist[t->n_hist++] = cur = snap;
    history_drop(t, top_history_pick(t->hist, t->n_hist, t->interval_ns));
    /* No rates over less than half the interval (a first window can be a millisecond: a
     * process reported just after the first report was settled), unless --once has waited
     * long enough for more. */
    prev = t->n_hist >= 2 ? t->hist[0] : NULL;
    if (prev && 2 * (cur->settled_ns - prev->settled_ns) < t->interval_ns &&
        !(t->once && now_ns() - t->started_ns >= t->interval_ns + ONCE_SETTLE_NS))
        prev = NULL;
    if (t->have_view)
        top_view_done(&t->view);
    t->have_view = false;
    r = top_view_build(prev, cur, t->group, &t->view);
    if (r < 0) {
        term_restore();
        fprintf(stderr, "fleetprof: out of memory\n");
        return r;
    }
    t->have_view = true;
    return 0;
}

enum key { KEY_OTHER, KEY_QUIT, KEY_UP, KEY_DOWN, KEY_ENTER, KEY_TOP, KEY_BACK };

/* The next key of buf (n > 0 bytes); stores the bytes it took in *ret_len. Keys come in
 * bursts (a held arrow), so one read may hold several. */
static enum key next_key(const char *buf, size_t n, size_t *ret_len)
{
    *ret_len = 1;
    if (buf[0] == '\033') {
        if (n >= 3 && (buf[1] == '[' || buf[1] == 'O')) {
            *ret_len = 3;
            switch (buf[2]) {
            case 'A':
                return KEY_UP;
            case 'B':
                return KEY_DOWN;
            case 'C':
                return KEY_ENTER;
            case 'D':
                return KEY_BACK;
            default:
                return KEY_OTHER;
            }
        }
        return n == 1 ? KEY_BACK : KEY_OTHER; /* Esc alone; else an unknown sequence */
    }
    switch (buf[0]) {
    case 'q':
    case 'Q':
        return KEY_QUIT;
    case 'k':
        return KEY_UP;
    case 'j':
        return KEY_DOWN;
    case '\r':
    case '\n':
        return KEY_ENTER;
    case 'g':
        return KEY_TOP;
    case 'b':
    case 0x7f: /* Backspace */
    case 0x08:
        return KEY_BACK;
    default:
        return KEY_OTHER;
    }
}

enum key_action { KEY_NONE, KEY_EXIT, KEY_REDRAW, KEY_REFETCH };

static enum key_action handle_key(struct top *t, enum key key)
{
    long sel = selected_index(t);
    long count = (long)t->view.n_groups;

    if (key == KEY_QUIT)
        return KEY_EXIT;
    if (t->group) {
        if (key != KEY_BACK)
            return KEY_NONE;
        (void)set_string(&t->group, NULL);
        return KEY_REFETCH;
    }
    if (!count)
        return KEY_NONE;
    switch (key) {
    case KEY_UP:
        sel = sel > 0 ? sel - 1 : 0;
        break;
    case KEY_DOWN:
        sel = sel < 0 ? 0 : sel + 1 < count ? sel + 1 : sel;
        break;
    case KEY_ENTER:
    case KEY_TOP:
        /* g always takes the top group; Enter the marked one (the top one if none). */
        if (key == KEY_TOP || sel < 0)
            sel = 0;
        if (set_string(&t->group, t->view.groups[sel].totals->name) < 0 ||
            set_string(&t->selected, t->group) < 0)
            return KEY_EXIT;
        return KEY_REFETCH;
    default:
        return KEY_NONE;
    }
    if (set_string(&t->selected, t->view.groups[sel].totals->name) < 0)
        return KEY_EXIT;
    return KEY_REDRAW;
}

static enum key_action handle_keys(struct top *t, const char *buf, size_t n)
{
    enum key_action result = KEY_NONE;
    size_t used;

    while (n > 0) {
        enum key_action a = handle_key(t, next_key(buf, n, &used));

        buf += used;
        n -= used;
        if (a == KEY_EXIT || a == KEY_REFETCH)
            return a; /* the rest was typed for the view we are leaving */
        if (a == KEY_REDRAW)
            result = a;
    }
    return result;
}

static void top_usage(FILE *out)
{
    fprintf(out,
            "Usage: fleetprof top [--socket PATH] [--interval S] [--once] [--json] [--group NAME]\n"
            "The fleet's performance groups, live: CPU/s (cores) over the last interval, share of\n"
            "the fleet's CPU, slow events (in the interval/in all), worst event, p50/p99 of the\n"
            "CPU charged per event (all time), processes (live/all). Ranked by CPU/s; the first\n"
            "screen shows cumulative totals until a second report gives rates.\n"
            "\n"
            "  --interval S   seconds between refreshes (default 1; fractions allowed)\n"
            "  --once         one snapshot, then exit: reports S apart give the rates\n"
            "                 (--interval 0: one report, cumulative totals only)\n"
            "  --json         JSON instead of text: one object per refresh (with --once, one)\n"
            "  --group NAME   that group's processes instead of the groups\n"
            "  --socket PATH  the daemon's socket (default $XDG_RUNTIME_DIR/fleetprof.sock,\n"
            "                 else /tmp/fleetprof-$UID/fleetprof.sock)\n"
            "\n"
            "On a terminal: q quits, Up/Down marks a group, Enter shows its processes (g: the\n"
            "top group's), Esc goes back. Processes send their totals every quarter of a second,\n"
            "each at its own time: rates are over the interval up to the time every process had\n"
            "reported up to (the header says over how long, to how long ago).\n");
}

static int parse_args(struct top *t, int argc, char **argv)
{
    static const struct option longopts[] = {
            {"interval", required_argument, NULL, 'i'}, {"once", no_argument, NULL, '1'},
            {"json", no_argument, NULL, 'j'},           {"group", required_argument, NULL, 'g'},
            {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    int c;

    optind = 0; /* glibc: full re-initialisation */
    while ((c = getopt_long(argc, argv, "+hi:", longopts, NULL)) != -1) {
        switch (c) {
        case 'i':
            if (parse_duration(optarg, 1e9, 0, INTERVAL_MAX_NS, &t->interval_ns) < 0) {
                fprintf(stderr,
                        "fleetprof: invalid --interval '%s': expected a decimal number of seconds from 0.05 to 3600\n",
                        optarg);
                return 2;
            }
            break;
        case '1':
            t->once = true;
            break;
        case 'j':
            t->json = true;
            break;
        case 'g':
            if (!*optarg) {
                fprintf(stderr, "fleetprof: --group needs a group name\n");
                return 2;
            }
            if (set_string(&t->group, optarg) < 0)
                return 1;
            break;
        case 'h':
            top_usage(stdout);
            return 0;
        default:
            top_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fleetprof: top: unexpected argument '%s'\n", argv[optind]);
        top_usage(stderr);
        return 2;
    }
    /* 0 only means "no second report" for --once; a live view needs time to pass. */
    if (t->interval_ns < INTERVAL_MIN_NS && !(t->once && t->interval_ns == 0)) {
        fprintf(stderr, "fleetprof: --interval must be at least 0.05 s (0 only with --once)\n");
        return 2;
    }
    return -1;
}

/* Acts on the signals caught since the last call. Returns 0 to quit, 1 to go on. */
static int drain_signals(struct top *t)
{
    char sig;

    while (read(signal_pipe[0], &sig, 1) == 1) {
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
            return 0;
        if (sig == SIGTSTP) {
            /* Catching it took the default stop away: stop ourselves, leaving the terminal
             * as we found it while stopped. */
            term_restore();
            (void)raise(SIGSTOP);
        } else if (sig == SIGCONT && t->tty && !term.active) {
            term_enter();
            (void)show(t);
        } else if (sig == SIGWINCH && term.active) {
            (void)show(t);
        }
    }
    return 1;
}

/* Waits for the next refresh, a key or a signal. Returns 1 to refresh now, 0 to quit, or
 * a negative errno. */
static int wait_for(struct top *t, uint64_t deadline_ns, bool *rotate)
{
    for (;;) {
        struct pollfd fds[2] = {{.fd = signal_pipe[0], .events = POLLIN},
                                {.fd = STDIN_FILENO, .events = POLLIN}};
        uint64_t now = now_ns();
        int timeout_ms, n;

        if (now >= deadline_ns) {
            *rotate = true;
            return 1;
        }
        timeout_ms = (int)((deadline_ns - now + 999999) / 1000000);
        n = poll(fds, term.active && term.keys ? 2 : 1, timeout_ms);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n <= 0)
            continue;
        if ((fds[0].revents & POLLIN) && !drain_signals(t))
            return 0;
        if (fds[1].revents & (POLLHUP | POLLERR)) {
            term.keys = false; /* stdin went away: keep refreshing until a signal */
        } else if (fds[1].revents & POLLIN) {
            char buf[32];
            ssize_t len = read(STDIN_FILENO, buf, sizeof(buf));

            switch (handle_keys(t, buf, len > 0 ? (size_t)len : 0)) {
            case KEY_EXIT:
                return 0;
            case KEY_REDRAW:
                (void)show(t);
                break;
            case KEY_REFETCH:
                *rotate = false;
                return 1;
            case KEY_NONE:
                break;
            }
        }
    }
}

int cmd_top(const char *socket_path, int argc, char **argv)
{
    struct top t = {.socket_path = socket_path, .interval_ns = 1000000000ull};
    uint64_t deadline;
    bool rotate = true;
    int r, status = 0;

    r = parse_args(&t, argc, argv);
    if (r >= 0) {
        free(t.group);
        return r;
    }
    if (signals_install() < 0) {
        fprintf(stderr, "fleetprof: top: %s\n", strerror(errno));
        free(t.group);
        return 1;
    }
    t.tty = !t.json && !t.once && isatty(STDOUT_FILENO) == 1;
    if (t.tty)
        term.keys = isatty(STDIN_FILENO) == 1 && tcgetattr(STDIN_FILENO, &term.saved) == 0;
    deadline = now_ns();
    t.started_ns = deadline;
    for (;;) {
        r = refresh(&t, rotate);
        if (r == -EINTR) {
            /* A signal ended the request: act on it, then ask again at once. */
            if (!drain_signals(&t)) {
                status = t.once ? 1 : 0; /* --once printed nothing: not a success */
                break;
            }
            continue;
        }
        if (r < 0) {
            status = 1;
            break;
        }
        /* An extra refresh (another view) keeps the schedule. */
        if (rotate) {
            deadline += t.interval_ns;
            if (deadline <= now_ns())
                deadline = now_ns() + t.interval_ns; /* a slow request: no catch-up burst */
        }
        if (t.once && (t.view.rated || t.interval_ns == 0)) {
            if (t.group && !t.view.group_found) {
                fprintf(stderr, "fleetprof: no process has measured group \"%s\"\n", t.group);
                status = 1;
            } else if (show(&t) < 0) {
                status = 1;
            }
            break;
        }
        /* The screen is taken only once there is something to show: a daemon that is not
         * there gets its message on the normal screen, with no flash. */
        if (t.tty && !term.active)
            term_enter();
        if (!t.once && show(&t) < 0)
            break; /* stdout closed: the reader has seen enough */
        r = wait_for(&t, deadline, &rotate);
        if (r <= 0) {
            status = r < 0 || t.once ? 1 : 0;
            break;
        }
    }
    term_restore();
    if (t.have_view)
        top_view_done(&t.view);
    history_drop(&t, t.n_hist);
    free(t.group);
    free(t.selected);
    return status;
}
