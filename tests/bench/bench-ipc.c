/* tests/bench/bench-ipc.c - the wire between two processes: request/reply latency and
 * ProfileData streaming throughput.
 *
 * The parent plays the daemon (listener), a forked child the profiled process (client on a
 * private loop). Latency: GetGatherProfileProgress -> GatherProgress, one outstanding at a
 * time, each timed with CLOCK_MONOTONIC. Throughput: GatherProfile -> a stream of 1 MiB
 * ProfileData pieces (ipc_conn_stream_profile), timed from request to last piece.
 * Prints a table, then `BENCH ipc.roundtrip_us <p50> us` and `BENCH ipc.stream_MBps <v> MB/s`.
 * No assertions on time. The round trip is dominated by wake-ups: on a VM, a wake-up across
 * CPUs costs tens of microseconds; `taskset -c 0 bench-ipc` shows the same-CPU figure.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "ipc/ipc.h"
#include "ipc/uv-ipc.h"

#define WARMUP       2000
#define ROUNDTRIPS   20000
#define STREAM_BYTES ((size_t)128 << 20)
#define STREAM_RUNS  5
#define STREAM_ID0   ((uint64_t)1 << 40)

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "bench-ipc: %s: %s\n", what, strerror(-err));
    exit(1);
}

/* ---- child: answers requests, streams profiles -------------------------------------------- */

static uint8_t *child_payload;

static void child_on_message(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *data)
{
    (void)data;
    if (env->msg_case == FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS) {
        Fleetprof__Envelope reply = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__GatherProgress p = FLEETPROF__GATHER_PROGRESS__INIT;

        p.request_id = env->get_gather_profile_progress->id;
        p.gather_id = env->get_gather_profile_progress->gather_id;
        p.proportion = IPC_PROPORTION_ONE / 2;
        p.location = "bench";
        reply.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS;
        reply.gather_progress = &p;
        if (ipc_conn_send(conn, &reply) < 0)
            _exit(2);
    } else if (env->msg_case == FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE) {
        if (ipc_conn_stream_profile(conn, env->gather_profile->id, child_payload, STREAM_BYTES,
                                    false, NULL, NULL, NULL) < 0)
            _exit(3);
    }
}

static const struct ipc_conn_callbacks child_cbs = {.on_message = child_on_message};

static int run_child(const char *path)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;
    struct ipc_conn *conn = NULL;
    uv_loop_t loop;
    int r = -ENOENT;

    child_payload = malloc(STREAM_BYTES);
    if (!child_payload)
        return 4;
    for (size_t i = 0; i < STREAM_BYTES; i++)
        child_payload[i] = (uint8_t)(i * 131 + (i >> 12));
    if (uv_loop_init(&loop) < 0)
        return 4;
    for (int i = 0; i < 1000 && r < 0; i++) {
        r = ipc_conn_connect(&loop, path, NULL, &child_cbs, NULL, NULL, 0, &conn);
        if (r < 0)
            (void)usleep(10000);
    }
    if (r < 0)
        return 5;
    hello.id = 1;
    hello.version = FLEETPROF_PROTOCOL_VERSION;
    hello.pid = getpid();
    hello.name = "bench-child";
    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = &hello;
    if (ipc_conn_send(conn, &env) < 0)
        return 6;
    (void)uv_run(&loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&loop);
    free(child_payload);
    return 0;
}

/* ---- parent: drives both measurements ------------------------------------------------------ */

struct bench {
    struct ipc_conn *conn;
    uint64_t next_id;
    uint64_t sent_ns;
    uint64_t *rtt_ns; /* ROUNDTRIPS samples */
    size_t n_rtt;
    int stream_run;
    size_t stream_received;
    uint64_t stream_start_ns;
    double stream_mbps[STREAM_RUNS];
    bool done;
};

static void send_request(struct bench *b)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GetGatherProfileProgress req = FLEETPROF__GET_GATHER_PROFILE_PROGRESS__INIT;
    int r;

    req.id = ++b->next_id;
    req.gather_id = 1;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS;
    env.get_gather_profile_progress = &req;
    b->sent_ns = now_ns();
    r = ipc_conn_send(b->conn, &env);
    if (r < 0)
        die("send", r);
}

static void send_gather(struct bench *b)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GatherProfile req = FLEETPROF__GATHER_PROFILE__INIT;
    int r;

    req.id = STREAM_ID0 + (uint64_t)b->stream_run;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE;
    env.gather_profile = &req;
    b->stream_received = 0;
    b->stream_start_ns = now_ns();
    r = ipc_conn_send(b->conn, &env);
    if (r < 0)
        die("send", r);
}

static void parent_on_message(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *data)
{
    struct bench *b = data;

    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_HELLO: {
        Fleetprof__Envelope reply = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__Welcome w = FLEETPROF__WELCOME__INIT;
        Fleetprof__ClockReference clock_ref = FLEETPROF__CLOCK_REFERENCE__INIT;

        w.request_id = env->hello->id;
        w.version = FLEETPROF_PROTOCOL_VERSION;
        w.interval_ns = 1000000;
        w.chunk_bytes = 256 << 10;
        w.process_limit_bytes = 64 << 20;
        w.clock = &clock_ref;
        reply.msg_case = FLEETPROF__ENVELOPE__MSG_WELCOME;
        reply.welcome = &w;
        (void)ipc_conn_send(conn, &reply);
        send_request(b);
        break;
    }
    case FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS: {
        uint64_t t = now_ns();

        if (env->gather_progress->request_id != b->next_id)
            die("reply id", -EBADMSG);
        if (b->next_id > WARMUP)
            b->rtt_ns[b->n_rtt++] = t - b->sent_ns;
        if (b->n_rtt < ROUNDTRIPS)
            send_request(b);
        else
            send_gather(b);
        break;
    }
    case FLEETPROF__ENVELOPE__MSG_PROFILE_DATA:
        b->stream_received += env->profile_data->data.len;
        if (env->profile_data->last) {
            double secs = (double)(now_ns() - b->stream_start_ns) / 1e9;

            if (b->stream_received != STREAM_BYTES)
                die("stream size", -EBADMSG);
            if (secs <= 0)
                die("stream time (no rate from zero time)", -ERANGE);
            b->stream_mbps[b->stream_run] = (double)STREAM_BYTES / 1e6 / secs;
            if (++b->stream_run < STREAM_RUNS) {
                send_gather(b);
            } else {
                b->done = true;
                ipc_conn_close(conn);
            }
        }
        break;
    default:
        break;
    }
}

static const struct ipc_conn_callbacks parent_cbs = {.on_message = parent_on_message};

static int on_accept(struct ipc_listener *l, struct ipc_conn *conn, const struct ipc_peer *peer,
                     void *data)
{
    struct bench *b = data;

    (void)peer;
    b->conn = conn;
    ipc_conn_set_callbacks(conn, &parent_cbs, b);
    ipc_listener_close(l);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int main(void)
{
    static const struct ipc_listener_callbacks lcbs = {.on_accept = on_accept};
    struct bench b = {0};
    struct ipc_listener *l;
    char dir[] = "/tmp/fleetprof-bench-ipc-XXXXXX";
    char path[128];
    uv_loop_t loop;
    pid_t pid;
    int r, status;

    (void)signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(dir))
        die("mkdtemp", -errno);
    (void)snprintf(path, sizeof(path), "%s/sock", dir);
    b.rtt_ns = calloc(ROUNDTRIPS, sizeof(*b.rtt_ns));
    if (!b.rtt_ns)
        die("calloc", -ENOMEM);
    pid = fork();
    if (pid < 0)
        die("fork", -errno);
    if (pid == 0)
        _exit(run_child(path));

    if (uv_loop_init(&loop) < 0)
        die("uv_loop_init", -EINVAL);
    r = ipc_listener_open(&loop, path, NULL, &lcbs, &b, &l);
    if (r < 0)
        die("listen", r);
    (void)uv_run(&loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&loop);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("child", -ECHILD);
    (void)rmdir(dir);
    if (!b.done)
        die("incomplete", -EPIPE);

    qsort(b.rtt_ns, b.n_rtt, sizeof(*b.rtt_ns), cmp_u64);
    qsort(b.stream_mbps, STREAM_RUNS, sizeof(double), cmp_double);
    printf("%-34s %12s\n", "ipc between two processes", "value");
    printf("%-34s %12zu\n", "round trips measured", b.n_rtt);
    printf("%-34s %9.1f us\n", "round trip p50", (double)b.rtt_ns[b.n_rtt / 2] / 1e3);
    printf("%-34s %9.1f us\n", "round trip p90", (double)b.rtt_ns[b.n_rtt * 9 / 10] / 1e3);
    printf("%-34s %9.1f us\n", "round trip p99", (double)b.rtt_ns[b.n_rtt * 99 / 100] / 1e3);
    printf("%-34s %9zu MiB x %d\n", "streamed", STREAM_BYTES >> 20, STREAM_RUNS);
    printf("%-34s %9.0f MB/s\n", "stream throughput (median)", b.stream_mbps[STREAM_RUNS / 2]);
    printf("%-34s %9.0f MB/s\n", "stream throughput (best)", b.stream_mbps[STREAM_RUNS - 1]);
    printf("BENCH ipc.roundtrip_us %.1f us\n", (double)b.rtt_ns[b.n_rtt / 2] / 1e3);
    printf("BENCH ipc.stream_MBps %.0f MB/s\n", b.stream_mbps[STREAM_RUNS / 2]);
    free(b.rtt_ns);
    return 0;
}
