/* tools/fleetprof.c - the fleetprof command: record, capture, status, summary, merge,
 * recover.
 *
 * Just another client of the daemon's socket: it sends a request, waits for the reply with
 * a timeout, prints it for people (a table) or scripts (--json). Errors say what to do.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "common/paths.h"
#include "ipc/ipc.h"
#include "ipc/uv-ipc.h"
#include "proto/fleetprof-protocol.h"
#include "tools/cmd-capture.h"
#include "tools/commands.h"
#include "tools/daemon-client.h"

/* One request, one reply: a tiny synchronous client on its own loop. */
struct exchange {
    uv_loop_t loop;
    uv_timer_t timer;
    struct ipc_conn *conn;
    Fleetprof__Envelope__MsgCase want;
    Fleetprof__Envelope *reply; /* owned copy (packed + unpacked) */
    int error;
    const char *reason;
    char refused[IPC_TRUST_REASON_MAX]; /* why the connection was not made */
};

static void on_reply(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *userdata)
{
    struct exchange *x = userdata;
    size_t len;
    uint8_t *buf;

    if (env->msg_case != x->want && env->msg_case != FLEETPROF__ENVELOPE__MSG_ERROR)
        return;
    /* The envelope is only borrowed for this call: keep a copy. */
    len = fleetprof__envelope__get_packed_size(env);
    buf = malloc(len ? len : 1);
    if (buf) {
        (void)fleetprof__envelope__pack(env, buf);
        x->reply = fleetprof__envelope__unpack(NULL, len, buf);
        free(buf);
    }
    if (!x->reply)
        x->error = -ENOMEM;
    ipc_conn_close(conn);
}

static void on_closed(struct ipc_conn *conn, int error, const char *reason, void *userdata)
{
    struct exchange *x = userdata;

    (void)conn;
    x->conn = NULL;
    if (!x->reply && !x->error) {
        x->error = error < 0 ? error : -ECONNRESET;
        x->reason = reason;
    }
    uv_timer_stop(&x->timer);
    uv_close((uv_handle_t *)&x->timer, NULL);
}

static void on_timeout(uv_timer_t *t)
{
    struct exchange *x = t->data;

    x->error = -ETIMEDOUT;
    if (x->conn)
        ipc_conn_close(x->conn);
}

static int request(const char *socket_path, Fleetprof__Envelope *env,
                   Fleetprof__Envelope__MsgCase want, struct exchange *x)
{
    static const struct ipc_conn_callbacks cbs = {.on_message = on_reply, .on_close = on_closed};
    int r;

    memset(x, 0, sizeof(*x));
    x->want = want;
    r = uv_loop_init(&x->loop);
    if (r < 0)
        return r;
    r = daemon_client_connect(&x->loop, socket_path, &cbs, x, x->refused, &x->conn);
    if (r < 0) {
        (void)uv_loop_close(&x->loop);
        return r;
    }
    (void)uv_timer_init(&x->loop, &x->timer);
    x->timer.data = x;
    (void)uv_timer_start(&x->timer, on_timeout, DAEMON_CLIENT_TIMEOUT_MS, 0);
    r = ipc_conn_send(x->conn, env);
    if (r < 0)
        ipc_conn_close(x->conn);
    (void)uv_run(&x->loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&x->loop);
    return r < 0 ? r : x->error;
}

static void print_bytes(char *out, size_t size, uint64_t b)
{
    if (b >= (1ull << 30))
        (void)snprintf(out, size, "%.1f GiB", (double)b / (1 << 30));
    else if (b >= (1u << 20))
        (void)snprintf(out, size, "%.1f MiB", (double)b / (1 << 20));
    else
        (void)snprintf(out, size, "%.0f KiB", (double)b / 1024);
}

static const char *state_name(Fleetprof__ChildState s)
{
    switch (s) {
    case FLEETPROF__CHILD_STATE__CHILD_STATE_HELLO:
        return "hello";
    case FLEETPROF__CHILD_STATE__CHILD_STATE_RUNNING:
        return "running";
    case FLEETPROF__CHILD_STATE__CHILD_STATE_PAUSED:
        return "paused";
    default:
        return "other";
    }
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void print_duration(char *out, size_t size, uint64_t ns)
{
    if (ns >= 1000000000u)
        (void)snprintf(out, size, "%.2f s", (double)ns / 1e9);
    else if (ns >= 1000000u)
        (void)snprintf(out, size, "%.1f ms", (double)ns / 1e6);
    else
        (void)snprintf(out, size, "%.0f us", (double)ns / 1e3);
}

/* Prints a UTF-8 name in a column of width characters: cut between characters, never inside
 * one (a byte cut would print an invalid sequence), then padded. */
static void print_name_column(const char *name, int width)
{
    int chars = 0;
    const char *p = name;

    while (*p && chars < width) {
        const char *start = p++;

        while ((*p & 0xc0) == 0x80)
            p++;
        (void)fwrite(start, 1, (size_t)(p - start), stdout);
        chars++;
    }
    printf("%*s", width - chars, "");
}

/* The fleet's performance groups in a status report: a table, or a JSON array. */
static void print_sampling_reasons(const Fleetprof__StatusReport *rep);

static void print_status_groups(const Fleetprof__StatusReport *rep, bool json)
{
    if (json) {
        printf(",\"groups\":[");
        for (size_t i = 0; i < rep->n_groups; i++) {
            const Fleetprof__FleetGroup *g = rep->groups[i];
            const Fleetprof__GroupTotals *t = g->totals;

            printf("%s{\"name\":", i ? "," : "");
            json_string(t->name);
            printf(",\"cpu_ns\":%" PRIu64 ",\"events\":%" PRIu64 ",\"slow_events\":%" PRIu64
                   ",\"worst_event_ns\":%" PRIu64 ",\"activations\":%" PRIu64
                   ",\"discarded\":%" PRIu64 ",\"migrated\":%" PRIu64 ",\"stale\":%" PRIu64
                   ",\"processes\":%u,\"live_processes\":%u}",
                   t->cpu_ns, t->events, t->slow_events, t->worst_event_ns, t->activations,
                   t->discarded, t->migrated, t->stale, g->processes, g->live_processes);
        }
        printf("]");
        return;
    }
    if (rep->n_groups == 0)
        return;
    printf("\n%-24s %10s %10s %8s %10s  %s\n", "GROUP", "CPU s", "EVENTS", "SLOW", "WORST",
           "PROCESSES");
    for (size_t i = 0; i < rep->n_groups; i++) {
        const Fleetprof__FleetGroup *g = rep->groups[i];
        const Fleetprof__GroupTotals *t = g->totals;
        char worst[32], procs[32];

        print_duration(worst, sizeof(worst), t->worst_event_ns);
        if (g->live_processes == g->processes)
            (void)snprintf(procs, sizeof(procs), "%u", g->processes);
        else
            (void)snprintf(procs, sizeof(procs), "%u (%u live)", g->processes, g->live_processes);
        /* Names are checked by the daemon (UTF-8, no control characters): safe to print. */
        print_name_column(t->name, 24);
        printf(" %10.3f %10" PRIu64 " %8" PRIu64 " %10s  %s\n", (double)t->cpu_ns / 1e9, t->events,
               t->slow_events, worst, procs);
    }
}

static int cmd_status(const char *socket_path, int argc, char **argv)
{
    static const struct option longopts[] = {
            {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__StatusRequest req = FLEETPROF__STATUS_REQUEST__INIT;
    const Fleetprof__StatusReport *rep;
    struct exchange x;
    bool json = false;
    int c, r;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'j') {
            json = true;
        } else {
            printf("Usage: fleetprof status [--socket PATH] [--json]\n"
                   "Lists the processes connected to the daemon and their buffer memory, and\n"
                   "the fleet's performance groups (exited processes included).\n");
            return c == 'h' ? 0 : 2;
        }
    }
    req.id = 1;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST;
    env.status_request = &req;
    r = request(socket_path, &env, FLEETPROF__ENVELOPE__MSG_STATUS_REPORT, &x);
    if (r < 0) {
        daemon_client_explain(socket_path, r, x.refused);
        return 1;
    }
    if (x.reply->msg_case == FLEETPROF__ENVELOPE__MSG_ERROR) {
        fprintf(stderr, "fleetprof: the daemon says: %s\n", x.reply->error->message);
        fleetprof__envelope__free_unpacked(x.reply, NULL);
        return 1;
    }
    rep = x.reply->status_report;
    if (json) {
        const Fleetprof__StatusTotals *t = rep->totals;

        printf("{\"global_limit_bytes\":%" PRIu64 ",\"unreleased_bytes\":%" PRIu64
               ",\"released_bytes\":%" PRIu64 ",\"evicted_chunks\":%" PRIu64
               ",\"destroy_requests\":%" PRIu64 ",\"region_evictions\":%" PRIu64
               ",\"region_updates\":%" PRIu64 ",\"dropped_children\":%" PRIu64
               ",\"rejected_updates\":%" PRIu64 ",\"symbol_modules_loaded\":%" PRIu64
               ",\"symbol_modules_names_only\":%" PRIu64 ",\"symbol_requests\":%" PRIu64
               ",\"exit_profiles\":%" PRIu32 ",\"exit_profile_bytes\":%" PRIu64
               ",\"building\":%" PRIu32 ",\"children\":[",
               rep->global_limit_bytes, t ? t->unreleased_bytes : 0, t ? t->released_bytes : 0,
               t ? t->evicted_chunks : 0, t ? t->destroy_requests : 0, t ? t->region_evictions : 0,
               t ? t->region_updates : 0, t ? t->dropped_children : 0, t ? t->rejected_updates : 0,
               t ? t->symbol_modules_loaded : 0, t ? t->symbol_modules_names_only : 0,
               t ? t->symbol_requests : 0, t ? t->exit_profiles : 0, t ? t->exit_profile_bytes : 0,
               t ? t->building : 0);
        for (size_t i = 0; i < rep->n_children; i++) {
            const Fleetprof__ChildStatus *s = rep->children[i];

            printf("%s{\"pid\":%d,\"ppid\":%d,\"name\":", i ? "," : "", s->pid, s->ppid);
            json_string(s->name);
            printf(",\"unreleased_bytes\":%" PRIu64 ",\"released_bytes\":%" PRIu64
                   ",\"chunks\":%u,\"last_update_age_ms\":%" PRIu64 ",\"state\":\"%s\""
                   ",\"destroy_requests\":%" PRIu64 ",\"region_evictions\":%" PRIu64
                   ",\"region_updates\":%" PRIu64 ",\"sampling_timer\":",
                   s->unreleased_bytes, s->released_bytes, s->chunks, s->last_update_age_ms,
                   state_name(s->state), s->destroy_requests, s->region_evictions,
                   s->region_updates);
            json_string(s->sampling_timer);
            printf(",\"sampling_timer_why\":");
            json_string(s->sampling_timer_why);
            printf("}");
        }
        printf("]");
        print_status_groups(rep, true);
        printf("}\n");
    } else {
        char a[32], b[32], lim[32];
        uint64_t total =
                rep->totals ? rep->totals->unreleased_bytes + rep->totals->released_bytes : 0;

        printf("%8s %8s  %-20s %12s %12s %7s %12s  %s\n", "PID", "PPID", "NAME", "UNRELEASED",
               "RELEASED", "CHUNKS", "LAST UPDATE", "SAMPLED BY");
        for (size_t i = 0; i < rep->n_children; i++) {
            const Fleetprof__ChildStatus *s = rep->children[i];

            print_bytes(a, sizeof(a), s->unreleased_bytes);
            print_bytes(b, sizeof(b), s->released_bytes);
            printf("%8d %8d  %-20.20s %12s %12s %7u %9.1f s  %s\n", s->pid, s->ppid, s->name, a, b,
                   s->chunks, (double)s->last_update_age_ms / 1000,
                   s->sampling_timer && *s->sampling_timer ? s->sampling_timer : "-");
        }
        print_bytes(a, sizeof(a), total);
        print_bytes(lim, sizeof(lim), rep->global_limit_bytes);
        printf("%zu process%s, %s of %s (%.0f%%)", rep->n_children,
               rep->n_children == 1 ? "" : "es", a, lim,
               rep->global_limit_bytes ? 100.0 * (double)total / (double)rep->global_limit_bytes
                                       : 0.0);
        if (rep->totals && rep->totals->evicted_chunks)
            printf(", %" PRIu64 " chunks evicted", rep->totals->evicted_chunks);
        if (rep->totals && rep->totals->dropped_children)
            printf(", %" PRIu64 " misbehaving children dropped", rep->totals->dropped_children);
        if (rep->totals && rep->totals->exit_profiles)
            printf(", %" PRIu32 " ended, kept for the next capture", rep->totals->exit_profiles);
        if (rep->totals && rep->totals->building)
            printf(", %" PRIu32 " ended, profile%s being built from %s chunks",
                   rep->totals->building, rep->totals->building == 1 ? "" : "s",
                   rep->totals->building == 1 ? "its" : "their");
        printf("\n");
        print_sampling_reasons(rep);
        print_status_groups(rep, false);
    }
    fleetprof__envelope__free_unpacked(x.reply, NULL);
    return 0;
}

/* Each timer kind the processes use, once, with why (the first process's reason). */
static void print_sampling_reasons(const Fleetprof__StatusReport *rep)
{
    for (size_t i = 0; i < rep->n_children; i++) {
        const Fleetprof__ChildStatus *s = rep->children[i];
        size_t n = 0;
        bool seen = false;

        if (!s->sampling_timer || !*s->sampling_timer)
            continue;
        for (size_t j = 0; j < i && !seen; j++)
            seen = rep->children[j]->sampling_timer &&
                   strcmp(rep->children[j]->sampling_timer, s->sampling_timer) == 0;
        if (seen)
            continue;
        for (size_t j = i; j < rep->n_children; j++)
            n += rep->children[j]->sampling_timer &&
                 strcmp(rep->children[j]->sampling_timer, s->sampling_timer) == 0;
        printf("sampled by %s (%zu process%s): %s\n", s->sampling_timer, n, n == 1 ? "" : "es",
               s->sampling_timer_why && *s->sampling_timer_why ? s->sampling_timer_why : "");
    }
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: fleetprof [--socket PATH] COMMAND [ARGS]\n"
                 "Commands:\n"
                 "  record -- CMD     profile CMD and every process it starts, into one file\n"
                 "  capture [-o FILE] gather a running fleetprofd's fleet into one file\n"
                 "  status [--json]   processes connected to the daemon, buffer memory, groups\n"
                 "  top [--once]      the fleet's performance groups, live (--json, --group)\n"
                 "  summary FILE      top functions per process, gathering log (--json, --top N)\n"
                 "  merge -o OUT IN... process profiles into one fleet profile\n"
                 "  export --format collapsed|pprof [--split] [-o OUT] IN\n"
                 "                    folded stacks for flamegraph.pl, inferno, Speedscope;\n"
                 "                    gzipped pprof for go tool pprof, Pyroscope\n"
                 "  recover -o OUT FILE.chunks...\n"
                 "                    profiles of processes killed or crashed without a daemon\n"
                 "Run `fleetprof COMMAND --help` for a command's options.\n");
}

int main(int argc, char **argv)
{
    char socket_path[4096];
    const char *sock = NULL;
    int i = 1;

    while (i < argc && argv[i][0] == '-') {
        if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
            sock = argv[i + 1];
            i += 2;
        } else if (!strncmp(argv[i], "--socket=", 9)) {
            sock = argv[i] + 9;
            i++;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            break;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    /* Commands on files: they need no daemon. */
    if (!strcmp(argv[i], "summary"))
        return cmd_summary(argc - i, argv + i);
    if (!strcmp(argv[i], "merge"))
        return cmd_merge(argc - i, argv + i);
    if (!strcmp(argv[i], "recover"))
        return cmd_recover(argc - i, argv + i);
    if (!strcmp(argv[i], "export"))
        return cmd_export(argc - i, argv + i);
    /* record runs its own daemon; CMD's arguments (even a --socket) are CMD's. */
    if (!strcmp(argv[i], "record")) {
        (void)signal(SIGPIPE, SIG_IGN); /* a child gone mid-write costs the daemon an EPIPE */
        /* A file size limit fails the output's write with EFBIG: record says so and still
         * ends with CMD's status. CMD starts with every disposition reset (libuv). */
        (void)signal(SIGXFSZ, SIG_IGN);
        return cmd_record(argc - i, argv + i);
    }
    /* Options may also follow the command: `fleetprof status --socket PATH`. */
    for (int k = i + 1; k < argc; k++) {
        if (!strcmp(argv[k], "--socket") && k + 1 < argc) {
            sock = argv[k + 1];
            memmove(&argv[k], &argv[k + 2], (size_t)(argc - k - 2) * sizeof(argv[0]));
            argc -= 2;
            k--;
        }
    }
    if (!sock) {
        if (fleetprof_default_socket(socket_path, sizeof(socket_path)) < 0) {
            fprintf(stderr, "fleetprof: $XDG_RUNTIME_DIR is too long for a socket path\n");
            return 1;
        }
        sock = socket_path;
    }
    (void)signal(SIGPIPE, SIG_IGN); /* a daemon that goes away is an error, not a crash */
    if (!strcmp(argv[i], "status"))
        return cmd_status(sock, argc - i, argv + i);
    if (!strcmp(argv[i], "capture"))
        return cmd_capture(sock, argc - i, argv + i);
    if (!strcmp(argv[i], "top"))
        return cmd_top(sock, argc - i, argv + i);
    fprintf(stderr, "fleetprof: unknown command '%s'\n", argv[i]);
    usage(stderr);
    return 2;
}
