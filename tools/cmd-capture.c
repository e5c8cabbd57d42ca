/* tools/cmd-capture.c - `fleetprof capture`: gather a running fleet into one profile file.
 *
 * Sends one CaptureRequest to a running fleetprofd and shows its CaptureProgress events
 * until the CaptureResult (or an Error) arrives; the daemon writes the file itself, so the
 * path sent is absolute. The fleet keeps running. Also home of the progress meter that
 * `fleetprof record` shares (tools/cmd-capture.h).
 */
#include "tools/cmd-capture.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "common/parse.h"
#include "daemon/daemon.h"
#include "ipc/ipc.h"
#include "ipc/uv-ipc.h"
#include "proto/fleetprof-protocol.h"
#include "tools/daemon-client.h"
#include "tools/export-pprof.h"

#define METER_PERIOD_NS 500000000ull /* non-tty: at most one line per 0.5 s */

/* ---- progress meter ------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gather_format_bytes(char *out, size_t size, uint64_t bytes)
{
    if (bytes < 1024)
        (void)snprintf(out, size, "%u B", (unsigned)bytes);
    else if (bytes >= (1ull << 30))
        (void)snprintf(out, size, "%.1f GiB", (double)bytes / (1 << 30));
    else if (bytes >= (1u << 20))
        (void)snprintf(out, size, "%.1f MiB", (double)bytes / (1 << 20));
    else
        (void)snprintf(out, size, "%.0f KiB", (double)bytes / 1024);
}

void gather_meter_init(struct gather_meter *m)
{
    memset(m, 0, sizeof(*m));
    m->tty = isatty(STDERR_FILENO) == 1;
}

static void meter_print(struct gather_meter *m, const char *end)
{
    char b[32];

    /* Stored exit profiles count as processes but not as bytes received: no "0 B". */
    b[0] = '\0';
    if (m->bytes) {
        memcpy(b, ", ", 3);
        gather_format_bytes(b + 2, sizeof(b) - 2, m->bytes);
    }
    fprintf(stderr, "%sgathering: %" PRIu32 "/%" PRIu32 " process%s%s%s", m->tty ? "\r" : "",
            m->done, m->total, m->total == 1 ? "" : "es", b, end);
    (void)fflush(stderr);
}

void gather_meter_update(struct gather_meter *m, uint32_t done, uint32_t total, uint64_t bytes)
{
    uint64_t now = now_ns();

    m->done = done;
    m->total = total;
    m->bytes = bytes;
    m->updated = true; /* not yet printed */
    if (!total && !bytes) {
        m->updated = false; /* "0/0 processes" says nothing: wait for the first process */
    } else if (m->tty) {
        /* \033[K erases what a longer previous line left behind. */
        meter_print(m, "\033[K");
        m->drawn = true;
    } else if (!m->last_ns || now - m->last_ns >= METER_PERIOD_NS) {
        meter_print(m, "\n");
        m->last_ns = now;
        m->updated = false; /* on screen: the final line would repeat it */
    }
}

void gather_meter_clear(struct gather_meter *m)
{
    if (m->tty && m->drawn) {
        fputs("\r\033[K", stderr);
        (void)fflush(stderr);
        m->drawn = false;
    }
}

void gather_meter_finish(struct gather_meter *m)
{
    if (m->tty)
        gather_meter_clear(m);
    else if (m->updated)
        meter_print(m, "\n");
    m->updated = false;
}

/* ---- the capture client ----------------------------------------------------------------- */

/* Nothing from the daemon for this long (plus 3 child timeouts) means it is stuck: a gather
 * ends after at most 2 silent child timeouts, and a progress event follows every answer. */
#define IDLE_BASE_MS 120000

struct capture_client {
    uv_loop_t loop;
    uv_timer_t idle;       /* re-armed by every message from the daemon */
    struct ipc_conn *conn; /* owned by the loop; NULL once closed */
    struct gather_meter meter;
    const char *socket_path; /* borrowed from main */
    uint64_t idle_ms;
    int status; /* the exit status, -1 until the outcome is known */
};

__attribute__((format(printf, 2, 3))) static void capture_failed(struct capture_client *c,
                                                                 const char *fmt, ...)
{
    va_list ap;

    gather_meter_finish(&c->meter);
    fputs("fleetprof: capture failed: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    c->status = 1;
}

static void on_capture_message(struct ipc_conn *conn, const Fleetprof__Envelope *env,
                               void *userdata)
{
    struct capture_client *c = userdata;

    (void)uv_timer_again(&c->idle);
    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_CAPTURE_PROGRESS:
        gather_meter_update(&c->meter, env->capture_progress->done, env->capture_progress->total,
                            env->capture_progress->bytes);
        return;
    case FLEETPROF__ENVELOPE__MSG_CAPTURE_RESULT: {
        const Fleetprof__CaptureResult *res = env->capture_result;
        char b[32];

        if (res->error && *res->error) {
            capture_failed(c, "%s", res->error);
            break;
        }
        gather_meter_finish(&c->meter);
        gather_format_bytes(b, sizeof(b), res->bytes);
        printf("wrote %s (%s): %" PRIu32 " process%s", res->path, b, res->processes,
               res->processes == 1 ? "" : "es");
        if (res->lost)
            printf(", %" PRIu32 " lost", res->lost);
        putchar('\n');
        {
            struct daemon_lost_process list[16];
            size_t n = 0;

            for (; n < res->n_lost_processes && n < 16; n++) {
                list[n].pid = res->lost_processes[n]->pid;
                (void)snprintf(list[n].name, sizeof(list[n].name), "%s",
                               res->lost_processes[n]->name);
                (void)snprintf(list[n].reason, sizeof(list[n].reason), "%s",
                               res->lost_processes[n]->reason);
            }
            print_lost(stdout, "fleetprof capture", res->lost, list, n);
        }
        c->status = 0;
        break;
    }
    case FLEETPROF__ENVELOPE__MSG_ERROR:
        if (env->error->code == EBUSY)
            capture_failed(c, "the daemon says: %s; wait for it to finish, then try again",
                           env->error->message);
        else
            capture_failed(c, "the daemon says: %s", env->error->message);
        break;
    default:
        return; /* not for us (a daemon may add events) */
    }
    ipc_conn_close(conn);
}

static void on_capture_closed(struct ipc_conn *conn, int error, const char *reason, void *userdata)
{
    struct capture_client *c = userdata;

    (void)conn;
    c->conn = NULL;
    if (c->status < 0) {
        gather_meter_finish(&c->meter);
        fprintf(stderr,
                "fleetprof: capture failed: the daemon on %s closed the connection before "
                "the capture finished (%s); see its log\n",
                c->socket_path,
                reason      ? reason
                : error < 0 ? strerror(-error)
                            : "closed");
        c->status = 1;
    }
    (void)uv_timer_stop(&c->idle);
    uv_close((uv_handle_t *)&c->idle, NULL);
}

static void on_capture_idle(uv_timer_t *t)
{
    struct capture_client *c = t->data;

    capture_failed(c,
                   "the daemon sent nothing for %" PRIu64 " s; check `fleetprof status` and "
                   "the daemon's log",
                   c->idle_ms / 1000);
    if (c->conn)
        ipc_conn_close(c->conn);
}

/* The daemon may run in another directory: send an absolute path. The directory must exist;
 * whether it is writable is the daemon's to say (it writes the file). Returns 0 or 1. */
static int absolute_output(const char *path, char *out, size_t size)
{
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int n;

    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        fprintf(stderr, "fleetprof: -o %s: expected a file name, not a directory\n", path);
        return 1;
    }
    if (!slash)
        n = snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        n = snprintf(dir, sizeof(dir), "/");
    else
        n = snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    if (n < 0 || (size_t)n >= sizeof(dir) || !realpath(dir, real)) {
        fprintf(stderr, "fleetprof: cannot write %s: directory %s: %s\n", path, dir,
                n < 0 || (size_t)n >= sizeof(dir) ? strerror(ENAMETOOLONG) : strerror(errno));
        return 1;
    }
    n = snprintf(out, size, "%s/%s", strcmp(real, "/") ? real : "", base);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "fleetprof: -o %s: path too long\n", path);
        return 1;
    }
    return 0;
}

static void capture_usage(FILE *out)
{
    fprintf(out,
            "Usage: fleetprof capture [--socket PATH] [-o FILE] [--pprof FILE] [--timeout S]\n"
            "Gathers every process of a running fleetprofd into one profile while the fleet\n"
            "keeps running (the daemon writes FILE; open it in profiler.firefox.com).\n"
            "\n"
            "  -o, --output FILE   where to write (default fleetprof.json)\n"
            "  --pprof FILE        then also write it as gzipped pprof (as `fleetprof export\n"
            "                      --format pprof`; this command writes FILE, not the daemon)\n"
            "  --timeout S         give up on a child that makes no progress for S seconds\n"
            "                      (default: the daemon's --child-timeout)\n"
            "  --socket PATH       the daemon's socket (default $XDG_RUNTIME_DIR/fleetprof.sock,\n"
            "                      else /tmp/fleetprof-$UID/fleetprof.sock)\n"
            "  --help              this text\n"
            "Exit status: 0 when the file was written, 1 otherwise.\n");
}

int cmd_capture(const char *socket_path, int argc, char **argv)
{
    static const struct option longopts[] = {
            {"output", required_argument, NULL, 'o'},
            {"timeout", required_argument, NULL, 't'},
            {"pprof", required_argument, NULL, 'p'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    static const struct ipc_conn_callbacks cbs = {.on_message = on_capture_message,
                                                  .on_close = on_capture_closed};
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__CaptureRequest req = FLEETPROF__CAPTURE_REQUEST__INIT;
    struct capture_client c = {.status = -1, .socket_path = socket_path};
    const char *output = "fleetprof.json", *pprof = NULL;
    char path[PATH_MAX], refused[IPC_TRUST_REASON_MAX];
    uint64_t timeout_ns = 0;
    int ch, r;

    optind = 0; /* glibc: full re-initialisation (main may have used getopt) */
    while ((ch = getopt_long(argc, argv, "+ho:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'o':
            output = optarg;
            break;
        case 't':
            if (parse_duration(optarg, 1e9, 10000000, 600000000000ull, &timeout_ns) < 0) {
                fprintf(stderr,
                        "fleetprof: invalid --timeout '%s': expected a decimal number of seconds from 0.01 to 600\n",
                        optarg);
                return 2;
            }
            break;
        case 'p':
            pprof = optarg;
            break;
        case 'h':
            capture_usage(stdout);
            return 0;
        default:
            capture_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fleetprof: capture: unexpected argument '%s'\n", argv[optind]);
        capture_usage(stderr);
        return 2;
    }
    if (absolute_output(output, path, sizeof(path)))
        return 1;

    r = uv_loop_init(&c.loop);
    if (r < 0) {
        fprintf(stderr, "fleetprof: %s\n", uv_strerror(r));
        return 1;
    }
    r = daemon_client_connect(&c.loop, socket_path, &cbs, &c, refused, &c.conn);
    if (r < 0) {
        daemon_client_explain(socket_path, r, refused);
        (void)uv_loop_close(&c.loop);
        return 1;
    }
    gather_meter_init(&c.meter);
    c.idle_ms = IDLE_BASE_MS + 3 * timeout_ns / 1000000;
    (void)uv_timer_init(&c.loop, &c.idle);
    c.idle.data = &c;
    (void)uv_timer_start(&c.idle, on_capture_idle, c.idle_ms, c.idle_ms);

    req.id = 1;
    req.output_path = path;
    req.timeout_ms = (uint32_t)(timeout_ns / 1000000);
    env.msg_case = FLEETPROF__ENVELOPE__MSG_CAPTURE_REQUEST;
    env.capture_request = &req;
    r = ipc_conn_send(c.conn, &env);
    if (r < 0) {
        daemon_client_explain(socket_path, r, NULL);
        c.status = 1;
        ipc_conn_close(c.conn);
    }
    (void)uv_run(&c.loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&c.loop);
    if (c.status == 0 && pprof && write_pprof_beside(path, pprof, "fleetprof capture", stdout) < 0)
        c.status = 1;
    return c.status < 0 ? 1 : c.status;
}

void print_lost(FILE *out, const char *who, uint32_t lost, const struct daemon_lost_process *list,
                size_t listed)
{
    size_t shown = listed < 5 ? listed : 5;

    for (size_t i = 0; i < shown; i++)
        fprintf(out, "%s: lost %d (%s): %s\n", who, (int)list[i].pid, list[i].name, list[i].reason);
    if (lost > shown)
        fprintf(out, "%s: and %zu more lost (fleetprof summary --log names each)\n", who,
                (size_t)lost - shown);
}

int write_pprof_beside(const char *json_path, const char *pprof_path, const char *who, FILE *out)
{
    struct pprof_result res;
    char why[768], size[32];
    int r;

    r = pprof_export_file(json_path, pprof_path, &res, why, sizeof(why));
    if (r < 0) {
        fprintf(stderr, "%s: pprof: %s\n", who, why);
        return r;
    }
    gather_format_bytes(size, sizeof(size), res.bytes);
    fprintf(out, "%s: wrote %s (pprof, %s)\n", who, pprof_path, size);
    return 0;
}
