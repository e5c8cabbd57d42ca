/* daemon/main.c - fleetprofd: the long-running parent of a profiled fleet.
 *
 * Options, logging (the only place the daemon writes text), signals. Everything else is
 * the library in daemon.h, which `fleetprof record` embeds.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "common/parse.h"
#include "common/paths.h"
#include "daemon/daemon.h"
#include "ipc/socket-trust.h"
#include "proto/fleetprof-protocol.h"

static enum daemon_log_level max_level = DAEMON_LOG_INFO;
static uv_signal_t sigterm, sigint;
static struct daemon *daemon_instance;

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: fleetprofd [OPTIONS]\n"
            "Keeps a fleet of profiled processes under one memory limit and gathers their\n"
            "profiles. Processes join with LD_PRELOAD=libfleetprof.so FLEETPROF_SOCKET=PATH.\n"
            "\n"
            "  --socket PATH          Unix socket (default $XDG_RUNTIME_DIR/fleetprof.sock,\n"
            "                         else /tmp/fleetprof-$UID/fleetprof.sock)\n"
            "  --global-limit SIZE    memory for the whole fleet's buffers (default 256M)\n"
            "  --process-limit SIZE   buffer limit of each process (default 64M)\n"
            "  --interval MS          sampling interval in milliseconds (default 1)\n"
            "  --child-timeout S      gathering: give up on a child silent this long (default 1)\n"
            "  --update-hold MS       a child may hold an update listing under 2 new chunks\n"
            "                         this long, for fewer, bigger ones (default 200; 0 = off)\n"
            "  --pace MS              when messages keep coming, read them at most once per\n"
            "                         this long, in one wake-up (default 2; 0 = off)\n"
            "  --stackwalk MODE       fp, dwarf or copy (default: each child's own)\n"
            "  --foreground           stay attached to the terminal (default: detach)\n"
            "  --log-level LEVEL      error, warning, info or debug (default info)\n"
            "  --help                 this text\n");
}

static void on_log(void *userdata, enum daemon_log_level level, const char *message)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    struct timespec ts;
    struct tm tm;

    (void)userdata;
    if (level > max_level)
        return;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    (void)localtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld fleetprofd[%d] %s: %s\n", tm.tm_hour, tm.tm_min,
            tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), names[level], message);
}

/* Detaches from the terminal and the caller: the caller's process waits until this one is
 * listening, or has said why it cannot (on the caller's stderr), and exits with its status,
 * so that `fleetprofd && use it` and a script's status are true. Returns in the new
 * process with the pipe to tell it through (ready()), or -1 with errno in the caller's. */
static int detach(void)
{
    int fds[2];
    pid_t pid;

    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        (void)close(fds[0]);
        (void)close(fds[1]);
        return -1;
    }
    if (pid > 0) {
        unsigned char status = 1;
        ssize_t n;

        (void)close(fds[1]);
        do
            n = read(fds[0], &status, 1);
        while (n < 0 && errno == EINTR);
        _exit(n == 1 ? status : 1); /* 1 when it died before saying */
    }
    (void)close(fds[0]);
    (void)setsid();
    if (chdir("/") < 0) {
        /* "/" is always there: nothing to tell */
    }
    return fds[1];
}

/* The detached daemon tells its caller's process its status, then lets go of what the
 * caller may wait on: stdin and stdout, and stderr when it is a pipe or a socket (a
 * caller reading it, `$(fleetprofd)` or a test's captured output, would wait for the
 * daemon's end). A terminal or a file keeps its log. */
static void ready(int fd, unsigned char status)
{
    struct stat st;
    int null;

    while (write(fd, &status, 1) < 0 && errno == EINTR) {
    }
    (void)close(fd);
    if (status != 0)
        return;
    null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        return;
    (void)dup2(null, STDIN_FILENO);
    (void)dup2(null, STDOUT_FILENO);
    if (fstat(STDERR_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
        (void)dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO)
        (void)close(null);
}

static void on_closed(void *userdata)
{
    uv_loop_t *loop = userdata;

    uv_close((uv_handle_t *)&sigterm, NULL);
    uv_close((uv_handle_t *)&sigint, NULL);
    uv_stop(loop);
}

static void on_signal(uv_signal_t *handle, int signum)
{
    on_log(NULL, DAEMON_LOG_INFO,
           signum == SIGTERM ? "SIGTERM: shutting down" : "SIGINT: shutting down");
    if (daemon_instance) {
        daemon_close(daemon_instance, on_closed, handle->loop);
        daemon_instance = NULL;
    }
}

/* The socket's directory refused (ipc_socket_dir_check()), or not made. */
static void explain_socket_refusal(const char *path, int r, const char *reason)
{
    if (r == -EPERM)
        fprintf(stderr,
                "fleetprofd: refusing the socket %s: %s; or choose another socket with --socket PATH\n",
                path, reason);
    else
        fprintf(stderr, "fleetprofd: cannot listen on %s: %s\n", path,
                *reason ? reason : strerror(-r));
}

static int bad_value(const char *option, const char *value, const char *expected)
{
    fprintf(stderr, "fleetprofd: invalid %s '%s': expected %s\n", option, value, expected);
    return 2;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
            {"socket", required_argument, NULL, 's'},
            {"global-limit", required_argument, NULL, 'g'},
            {"process-limit", required_argument, NULL, 'p'},
            {"interval", required_argument, NULL, 'i'},
            {"child-timeout", required_argument, NULL, 't'},
            {"update-hold", required_argument, NULL, 'u'},
            {"pace", required_argument, NULL, 'P'},
            {"stackwalk", required_argument, NULL, 'w'},
            {"foreground", no_argument, NULL, 'f'},
            {"log-level", required_argument, NULL, 'l'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    struct daemon_options opt = {0};
    char socket_path[4096], resolved[4096], reason[IPC_TRUST_REASON_MAX];
    bool foreground = false;
    int ready_fd = -1; /* detached: the pipe its caller waits on (detach()) */
    uv_loop_t loop;
    int c, r;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            opt.socket_path = optarg;
            break;
        case 'g':
            if (parse_size(optarg, &opt.global_limit_bytes) < 0 || opt.global_limit_bytes == 0)
                return bad_value("--global-limit", optarg, "a size such as 256M or 1G");
            if (opt.global_limit_bytes < DAEMON_GLOBAL_LIMIT_MIN(DAEMON_CHUNK_BYTES))
                return bad_value("--global-limit", optarg,
                                 "at least 512K: one process's chunk to write in and one it "
                                 "released (256K each)");
            break;
        case 'p':
            if (parse_size(optarg, &opt.process_limit_bytes) < 0 ||
                opt.process_limit_bytes < (1u << 20))
                return bad_value("--process-limit", optarg, "a size of at least 1M");
            break;
        case 'i':
            if (parse_duration(optarg, 1e6, 50000, 1000000000, &opt.interval_ns) < 0)
                return bad_value("--interval", optarg, "milliseconds from 0.05 to 1000");
            break;
        case 't':
            if (parse_duration(optarg, 1e9, 10000000, 600000000000ull, &opt.child_timeout_ns) < 0)
                return bad_value("--child-timeout", optarg, "seconds from 0.01 to 600");
            break;
        case 'u':
            if (parse_duration(optarg, 1e6, 0, 10000000000ull, &opt.update_hold_ns) < 0)
                return bad_value("--update-hold", optarg, "milliseconds from 0 to 10000");
            if (!opt.update_hold_ns)
                opt.update_hold_ns = DAEMON_UPDATE_HOLD_OFF;
            break;
        case 'P':
            if (parse_duration(optarg, 1e6, 0, 100000000ull, &opt.pace_ns) < 0)
                return bad_value("--pace", optarg, "milliseconds from 0 to 100");
            if (!opt.pace_ns)
                opt.pace_ns = DAEMON_PACE_OFF;
            break;
        case 'w':
            if (!strcmp(optarg, "fp"))
                opt.stackwalk = FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_FP;
            else if (!strcmp(optarg, "dwarf"))
                opt.stackwalk = FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_DWARF;
            else if (!strcmp(optarg, "copy"))
                opt.stackwalk = FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_COPY;
            else
                return bad_value("--stackwalk", optarg, "fp, dwarf or copy");
            break;
        case 'f':
            foreground = true;
            break;
        case 'l':
            if (!strcmp(optarg, "error"))
                max_level = DAEMON_LOG_ERROR;
            else if (!strcmp(optarg, "warning"))
                max_level = DAEMON_LOG_WARNING;
            else if (!strcmp(optarg, "info"))
                max_level = DAEMON_LOG_INFO;
            else if (!strcmp(optarg, "debug"))
                max_level = DAEMON_LOG_DEBUG;
            else
                return bad_value("--log-level", optarg, "error, warning, info or debug");
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fleetprofd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!opt.socket_path) {
        if (fleetprof_default_socket(socket_path, sizeof(socket_path)) < 0) {
            fprintf(stderr, "fleetprofd: $XDG_RUNTIME_DIR is too long for a socket path\n");
            return 1;
        }
        opt.socket_path = socket_path;
    }
    /* Checked before detaching, so that a refusal reaches the terminal and the exit status;
     * ipc_listener_open() checks again. */
    r = ipc_socket_dir_check(opt.socket_path, geteuid(), true, resolved, sizeof(resolved), reason,
                             sizeof(reason));
    if (r < 0) {
        explain_socket_refusal(opt.socket_path, r, reason);
        return 1;
    }
    opt.log = on_log;
    opt.log_level = max_level;
    /* A child that dies mid-write must cost an EPIPE, not the daemon; a file size limit on
     * a capture's output an EFBIG (the capture fails and says so), not the daemon. */
    (void)signal(SIGPIPE, SIG_IGN);
    (void)signal(SIGXFSZ, SIG_IGN);
    if (!foreground && (ready_fd = detach()) < 0) {
        fprintf(stderr, "fleetprofd: cannot detach: %s\n", strerror(errno));
        return 1;
    }

    r = uv_loop_init(&loop);
    if (r < 0) {
        fprintf(stderr, "fleetprofd: %s\n", uv_strerror(r));
        if (ready_fd >= 0)
            ready(ready_fd, 1);
        return 1;
    }
    r = daemon_new(&loop, &opt, &daemon_instance);
    if (r < 0) {
        if (r == -EADDRINUSE)
            fprintf(stderr,
                    "fleetprofd: another fleetprofd is serving %s; stop it or choose "
                    "another --socket\n",
                    opt.socket_path);
        else if (r == -EPERM && ipc_socket_dir_check(opt.socket_path, geteuid(), false, resolved,
                                                     sizeof(resolved), reason, sizeof(reason)) < 0)
            explain_socket_refusal(opt.socket_path, r, reason); /* changed since the check */
        else
            fprintf(stderr, "fleetprofd: cannot listen on %s: %s\n", opt.socket_path, strerror(-r));
        (void)uv_loop_close(&loop);
        if (ready_fd >= 0)
            ready(ready_fd, 1);
        return 1;
    }
    if (ready_fd >= 0)
        ready(ready_fd, 0);
    (void)uv_signal_init(&loop, &sigterm);
    (void)uv_signal_init(&loop, &sigint);
    (void)uv_signal_start(&sigterm, on_signal, SIGTERM);
    (void)uv_signal_start(&sigint, on_signal, SIGINT);
    (void)uv_run(&loop, UV_RUN_DEFAULT);
    /* Let close callbacks run, then release the loop. */
    (void)uv_run(&loop, UV_RUN_NOWAIT);
    (void)uv_loop_close(&loop);
    return 0;
}
