/* Unit tests for the libuv transport (ipc/uv-*.c) on a private loop in one process: socket
 * path hygiene, request/reply, the queue cap and drain, protocol errors, close semantics,
 * profile streaming. Two-process tests live in tests/integration/test-ipc-processes.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

/* <uv.h> brings <sys/param.h>, whose MIN/MAX clash with common/macros.h (via testlib.h). */
#undef MIN
#undef MAX

#include "ipc-samples.h"
#include "ipc/ipc.h"
#include "ipc/socket-trust.h"
#include "ipc/uv-ipc.h"
#include "testlib.h"

/* How long a test waits for a condition before declaring a hang (not a timing check). */
#define HANG_MS 30000

struct peer_state {
    struct ipc_conn *conn;
    uint64_t received;
    Fleetprof__Envelope__MsgCase last_kind;
    uint64_t last_id;
    int closed; /* on_close calls */
    int close_error;
    char close_reason[160];
    int drains;
    bool reply; /* server: answer requests */
    bool close_on_message;
    /* reassembly of a profile stream */
    uint8_t *profile;
    size_t profile_len, profile_cap;
    bool profile_last;
    int stream_status;
    bool stream_done;
};

struct fixture {
    uv_loop_t loop;
    uv_timer_t tick;
    char *dir;
    char path[256];
    struct ipc_listener *listener;
    struct peer_state server, client;
    int accepted;
};

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until expr holds (the 10 ms tick keeps each iteration short). */
#define SPIN_UNTIL(f, expr)                                \
    do {                                                   \
        uint64_t deadline_ = uv_now(&(f)->loop) + HANG_MS; \
        while (!(expr) && uv_now(&(f)->loop) < deadline_)  \
            (void)uv_run(&(f)->loop, UV_RUN_ONCE);         \
        assert_true(expr);                                 \
    } while (0)

static uint64_t request_id_of(const Fleetprof__Envelope *env)
{
    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST:
        return env->status_request->id;
    case FLEETPROF__ENVELOPE__MSG_STATUS_REPORT:
        return env->status_report->request_id;
    case FLEETPROF__ENVELOPE__MSG_HELLO:
        return env->hello->id;
    case FLEETPROF__ENVELOPE__MSG_WELCOME:
        return env->welcome->request_id;
    case FLEETPROF__ENVELOPE__MSG_PROFILE_DATA:
        return env->profile_data->request_id;
    default:
        return 0;
    }
}

static const Fleetprof__Envelope *sample(Fleetprof__Envelope__MsgCase kind)
{
    size_t n;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);

    for (size_t i = 0; i < n; i++)
        if (samples[i]->msg_case == kind)
            return samples[i];
    fail();
    return NULL;
}

static void on_message(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *userdata)
{
    struct peer_state *p = userdata;

    p->received++;
    p->last_kind = env->msg_case;
    p->last_id = request_id_of(env);
    if (p->close_on_message) {
        ipc_conn_close(conn);
        return;
    }
    if (env->msg_case == FLEETPROF__ENVELOPE__MSG_PROFILE_DATA) {
        const Fleetprof__ProfileData *d = env->profile_data;

        assert_int_equal(d->offset, p->profile_len);
        if (p->profile_len + d->data.len > p->profile_cap) {
            p->profile_cap = (p->profile_len + d->data.len) * 2;
            p->profile = realloc(p->profile, p->profile_cap);
            assert_non_null(p->profile);
        }
        if (d->data.len)
            memcpy(p->profile + p->profile_len, d->data.data, d->data.len);
        p->profile_len += d->data.len;
        p->profile_last = d->last;
    }
    if (!p->reply)
        return;
    if (env->msg_case == FLEETPROF__ENVELOPE__MSG_HELLO) {
        Fleetprof__Envelope reply = *sample(FLEETPROF__ENVELOPE__MSG_WELCOME);
        Fleetprof__Welcome w = *reply.welcome;

        w.request_id = env->hello->id;
        reply.welcome = &w;
        assert_int_equal(ipc_conn_send(conn, &reply), 0);
    } else if (env->msg_case == FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST) {
        Fleetprof__Envelope reply = *sample(FLEETPROF__ENVELOPE__MSG_STATUS_REPORT);
        Fleetprof__StatusReport r = *reply.status_report;

        r.request_id = env->status_request->id;
        reply.status_report = &r;
        assert_int_equal(ipc_conn_send(conn, &reply), 0);
    }
}

static void on_close(struct ipc_conn *conn, int error, const char *reason, void *userdata)
{
    struct peer_state *p = userdata;

    assert_ptr_equal(conn, p->conn);
    p->closed++;
    p->close_error = error;
    (void)snprintf(p->close_reason, sizeof(p->close_reason), "%s", reason);
    p->conn = NULL;
}

static void on_drain(struct ipc_conn *conn, void *userdata)
{
    struct peer_state *p = userdata;

    (void)conn;
    p->drains++;
}

static const struct ipc_conn_callbacks peer_cbs = {
        .on_message = on_message,
        .on_close = on_close,
        .on_drain = on_drain,
};

static int on_accept(struct ipc_listener *l, struct ipc_conn *conn, const struct ipc_peer *peer,
                     void *userdata)
{
    struct fixture *f = userdata;

    (void)l;
    assert_int_equal(peer->pid, getpid());
    assert_int_equal(peer->uid, geteuid());
    f->accepted++;
    f->server.conn = conn;
    ipc_conn_set_callbacks(conn, &peer_cbs, &f->server);
    return 0;
}

static const struct ipc_listener_callbacks listener_cbs = {.on_accept = on_accept};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(uv_timer_init(&f->loop, &f->tick), 0);
    assert_int_equal(uv_timer_start(&f->tick, on_tick, 10, 10), 0);
    f->dir = test_tmpdir("ipc");
    assert_non_null(f->dir);
    (void)snprintf(f->path, sizeof(f->path), "%s/run/fleetprof/sock", f->dir);
    f->server.reply = true;
    *state = f;
    return 0;
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    if (f->listener)
        ipc_listener_close(f->listener);
    if (f->server.conn)
        ipc_conn_close(f->server.conn);
    if (f->client.conn)
        ipc_conn_close(f->client.conn);
    uv_walk(&f->loop, close_walk, NULL);
    (void)uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    test_rmtree(f->dir);
    free(f->dir);
    free(f->server.profile);
    free(f->client.profile);
    free(f);
    return 0;
}

static void open_listener(struct fixture *f)
{
    assert_int_equal(ipc_listener_open(&f->loop, f->path, NULL, &listener_cbs, f, &f->listener), 0);
}

static void connect_client(struct fixture *f, const struct ipc_conn_options *opts)
{
    assert_int_equal(ipc_conn_connect(&f->loop, f->path, opts, &peer_cbs, &f->client, NULL, 0,
                                      &f->client.conn),
                     0);
    SPIN_UNTIL(f, f->server.conn != NULL);
}

/* A connection in the backlog is seen before the loop accepts it: what `record` waits for
 * before it takes "no connection left" to mean every process was read. */
static void test_pending_connections_are_seen_before_accept(void **state)
{
    struct fixture *f = *state;

    open_listener(f);
    assert_int_equal(ipc_listener_pending(f->listener), 0);
    /* connect(2) completes into the backlog; the loop has not run. */
    assert_int_equal(ipc_conn_connect(&f->loop, f->path, NULL, &peer_cbs, &f->client, NULL, 0,
                                      &f->client.conn),
                     0);
    assert_null(f->server.conn);
    assert_int_equal(ipc_listener_pending(f->listener), 1);
    SPIN_UNTIL(f, f->server.conn != NULL);
    assert_int_equal(ipc_listener_pending(f->listener), 0);
}

static void test_peer_check(void **state)
{
    struct ipc_peer same = {.pid = 10, .uid = 1000}, root = {.pid = 11, .uid = 0},
                    other = {.pid = 12, .uid = 65534};
    char reason[160];

    (void)state;
    assert_int_equal(ipc_peer_check(&same, 1000, reason, sizeof(reason)), 0);
    assert_int_equal(ipc_peer_check(&root, 1000, reason, sizeof(reason)), 0);
    assert_int_equal(ipc_peer_check(&other, 1000, reason, sizeof(reason)), -EPERM);
    assert_non_null(strstr(reason, "uid 65534"));
    assert_non_null(strstr(reason, "pid 12"));
    assert_int_equal(ipc_peer_check(&other, 65534, NULL, 0), 0);
}

/* Entries of directory path but . and .., or -1. */
static int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, ".."))
            n++;
    (void)closedir(d);
    return n;
}

static void test_listen_path_hygiene(void **state)
{
    struct fixture *f = *state;
    struct ipc_listener *second = NULL;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct stat st;
    char parent[300], file[300], longpath[200];
    int fd;

    /* Directories created 0700, socket 0600, whatever the umask. */
    open_listener(f);
    (void)snprintf(parent, sizeof(parent), "%s/run/fleetprof", f->dir);
    assert_int_equal(stat(parent, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    (void)snprintf(parent, sizeof(parent), "%s/run", f->dir);
    assert_int_equal(stat(parent, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(lstat(f->path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    /* Bound under a temporary name and renamed once listening: only the socket is left. */
    (void)snprintf(parent, sizeof(parent), "%s/run/fleetprof", f->dir);
    assert_int_equal(dir_entries(parent), 1);

    /* A live listener owns the path. */
    assert_int_equal(ipc_listener_open(&f->loop, f->path, NULL, &listener_cbs, f, &second),
                     -EADDRINUSE);
    assert_null(second);

    /* Closing removes the socket. */
    ipc_listener_close(f->listener);
    f->listener = NULL;
    assert_int_equal(lstat(f->path, &st), -1);

    /* A stale socket (bound, never unlinked, nobody listening) is replaced. */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memcpy(addr.sun_path, f->path, strlen(f->path) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(close(fd), 0);
    open_listener(f);
    connect_client(f, NULL);
    ipc_listener_close(f->listener);
    f->listener = NULL;

    /* Not a socket: never clobbered. */
    (void)snprintf(file, sizeof(file), "%s/plain", f->dir);
    fd = open(file, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(close(fd), 0);
    assert_int_equal(ipc_listener_open(&f->loop, file, NULL, &listener_cbs, f, &second), -EEXIST);
    assert_int_equal(
            ipc_conn_connect(&f->loop, file, NULL, &peer_cbs, NULL, NULL, 0, &f->client.conn),
            -ECONNREFUSED);

    memset(longpath, 'x', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';
    assert_int_equal(ipc_listener_open(&f->loop, longpath, NULL, &listener_cbs, f, &second),
                     -ENAMETOOLONG);
    (void)snprintf(file, sizeof(file), "%s/missing/sock", f->dir);
    assert_int_equal(
            ipc_conn_connect(&f->loop, file, NULL, &peer_cbs, NULL, NULL, 0, &f->client.conn),
            -ENOENT);
}

static void test_request_reply(void **state)
{
    struct fixture *f = *state;
    Fleetprof__Envelope env = *sample(FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST);
    Fleetprof__StatusRequest req = *env.status_request;
    struct ipc_peer peer;

    open_listener(f);
    connect_client(f, NULL);
    assert_int_equal(f->accepted, 1);
    assert_int_equal(ipc_conn_peer(f->client.conn, &peer), 0);
    assert_int_equal(peer.pid, getpid());

    assert_int_equal(ipc_conn_send(f->client.conn, sample(FLEETPROF__ENVELOPE__MSG_HELLO)), 0);
    SPIN_UNTIL(f, f->client.received == 1);
    assert_int_equal(f->client.last_kind, FLEETPROF__ENVELOPE__MSG_WELCOME);
    assert_int_equal(f->client.last_id, 1);

    env.status_request = &req;
    for (uint64_t id = 100; id < 1100; id++) {
        req.id = id;
        assert_int_equal(ipc_conn_send(f->client.conn, &env), 0);
        SPIN_UNTIL(f, f->client.received == id - 98);
        assert_int_equal(f->client.last_kind, FLEETPROF__ENVELOPE__MSG_STATUS_REPORT);
        assert_int_equal(f->client.last_id, id);
    }
    assert_int_equal(ipc_conn_frames_sent(f->client.conn), 1001);
    assert_int_equal(ipc_conn_frames_received(f->client.conn), 1001);

    /* The client closes: both sides see an orderly end, once. */
    ipc_conn_close(f->client.conn);
    ipc_conn_close(f->client.conn); /* idempotent */
    SPIN_UNTIL(f, f->server.closed == 1 && f->client.closed == 1);
    assert_int_equal(f->server.close_error, 0);
    assert_int_equal(f->client.close_error, 0);
    assert_string_equal(f->server.close_reason, "peer closed the connection");
}

/* Pipelined requests arrive in order; replies in order. */
static void test_pipelined_order(void **state)
{
    struct fixture *f = *state;
    Fleetprof__Envelope env = *sample(FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST);
    Fleetprof__StatusRequest req = *env.status_request;

    open_listener(f);
    connect_client(f, NULL);
    env.status_request = &req;
    for (uint64_t id = 1; id <= 500; id++) {
        req.id = id;
        assert_int_equal(ipc_conn_send(f->client.conn, &env), 0);
    }
    SPIN_UNTIL(f, f->client.received == 500);
    assert_int_equal(f->client.last_id, 500);
    assert_int_equal(f->server.received, 500);
}

/* Counts frames read by the raw peer. */
static int count_frame(void *userdata, const Fleetprof__Envelope *env)
{
    uint64_t *frames = userdata;

    assert_int_equal(env->msg_case, FLEETPROF__ENVELOPE__MSG_PROFILE_DATA);
    assert_int_equal(env->profile_data->offset, *frames * env->profile_data->data.len);
    (*frames)++;
    return 0;
}

/* A peer that does not read: sends fail with -ENOBUFS at the cap, then drain. */
static void test_queue_cap_and_drain(void **state)
{
    struct fixture *f = *state;
    const size_t cap = 1 << 20;
    struct ipc_conn_options opts = {.max_queued_bytes = cap, .drain_low_bytes = 256 << 10};
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    static uint8_t payload[64 << 10];
    static uint8_t buf[1 << 16];
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ProfileData piece = FLEETPROF__PROFILE_DATA__INIT;
    struct ipc_reader reader;
    uint64_t sent = 0, frames = 0;
    int lfd, sfd, r;

    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)i;
    (void)snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/raw", f->dir);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(lfd >= 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(ipc_conn_connect(&f->loop, addr.sun_path, &opts, &peer_cbs, &f->client, NULL,
                                      0, &f->client.conn),
                     0);
    sfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    assert_true(sfd >= 0);

    piece.request_id = 9;
    piece.data.data = payload;
    piece.data.len = sizeof(payload);
    env.msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
    env.profile_data = &piece;
    for (;;) {
        size_t before = ipc_conn_queued_bytes(f->client.conn);

        piece.offset = sent * sizeof(payload);
        r = ipc_conn_send(f->client.conn, &env);
        if (r == -ENOBUFS) {
            assert_int_equal(ipc_conn_queued_bytes(f->client.conn), before);
            break;
        }
        assert_int_equal(r, 0);
        sent++;
        assert_true(ipc_conn_queued_bytes(f->client.conn) <= cap);
        (void)uv_run(&f->loop, UV_RUN_NOWAIT);
        assert_true(sent < 10000); /* the kernel buffer is far smaller */
    }
    assert_int_equal(f->client.drains, 0);

    /* The peer starts reading: the queue drains, on_drain fires, everything arrives intact. */
    ipc_reader_init(&reader, 0);
    for (uint64_t deadline = uv_now(&f->loop) + HANG_MS;
         frames < sent && uv_now(&f->loop) < deadline;) {
        ssize_t n = read(sfd, buf, sizeof(buf));

        if (n > 0)
            assert_true(ipc_reader_feed(&reader, buf, (size_t)n, count_frame, &frames) >= 0);
        else
            (void)uv_run(&f->loop, UV_RUN_ONCE);
    }
    assert_int_equal(frames, sent);
    SPIN_UNTIL(f, ipc_conn_queued_bytes(f->client.conn) == 0);
    assert_true(f->client.drains >= 1);
    ipc_reader_done(&reader);

    /* The raw peer hangs up: the client sees an orderly end. */
    assert_int_equal(close(sfd), 0);
    assert_int_equal(close(lfd), 0);
    SPIN_UNTIL(f, f->client.closed == 1);
    assert_int_equal(f->client.close_error, 0);
}

static void test_send_errors(void **state)
{
    struct fixture *f = *state;
    struct ipc_conn_options opts = {.max_frame_bytes = 1024};
    static uint8_t payload[2048];
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ProfileData piece = FLEETPROF__PROFILE_DATA__INIT;

    open_listener(f);
    assert_int_equal(ipc_conn_connect(&f->loop, f->path, &opts, &peer_cbs, &f->client, NULL, 0,
                                      &f->client.conn),
                     0);
    SPIN_UNTIL(f, f->server.conn != NULL);
    assert_int_equal(ipc_conn_send(f->client.conn, &env), -EINVAL);
    piece.request_id = 1;
    piece.data.data = payload;
    piece.data.len = sizeof(payload);
    env.msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
    env.profile_data = &piece;
    assert_int_equal(ipc_conn_send(f->client.conn, &env), -EMSGSIZE);
    piece.data.len = 512;
    assert_int_equal(ipc_conn_send(f->client.conn, &env), 0);
    assert_int_equal(
            ipc_conn_stream_profile(f->client.conn, 0, payload, 1, false, NULL, NULL, NULL),
            -EINVAL);
    ipc_conn_shutdown(f->client.conn);
    assert_int_equal(ipc_conn_send(f->client.conn, &env), -EPIPE);
    assert_int_equal(
            ipc_conn_stream_profile(f->client.conn, 1, payload, 1, false, NULL, NULL, NULL),
            -EPIPE);
    SPIN_UNTIL(f, f->client.closed == 1 && f->server.closed == 1);
    /* The frame queued before the shutdown was delivered. */
    assert_int_equal(f->server.received, 1);
    assert_int_equal(f->server.close_error, 0);
}

/* Queued frames are flushed before a shutdown closes the connection. */
static void test_shutdown_flushes(void **state)
{
    struct fixture *f = *state;
    Fleetprof__Envelope env = *sample(FLEETPROF__ENVELOPE__MSG_HELLO);

    f->server.reply = false;
    open_listener(f);
    connect_client(f, NULL);
    for (int i = 0; i < 300; i++)
        assert_int_equal(ipc_conn_send(f->client.conn, &env), 0);
    ipc_conn_shutdown(f->client.conn);
    ipc_conn_shutdown(f->client.conn);
    SPIN_UNTIL(f, f->server.closed == 1 && f->client.closed == 1);
    assert_int_equal(f->server.received, 300);
    assert_int_equal(f->server.close_error, 0);
    assert_int_equal(f->client.close_error, 0);
}

/* Sends env on a raw socket, with fd as SCM_RIGHTS when fd >= 0: as a light connection
 * does (child/ipc-module/ipc.c). */
static void raw_send(int sock, const Fleetprof__Envelope *env, int fd)
{
    assert_int_equal(ipc_socket_send_frame(sock, env, fd), (ssize_t)ipc_frame_size(env));
}

/* A peer that says Hello with a descriptor, sends more frames and closes, all before our
 * first read (a child that connects at its exit): every frame is delivered, then the end.
 * The kernel ends the first read at the message with the descriptor, and libuv took that
 * short read with POLLHUP for the end of the stream: the frames after it were lost. */
static void test_frames_after_a_descriptor_outlive_the_peer(void **state)
{
    struct fixture *f = *state;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int sock, passed;

    f->server.reply = false; /* the peer is gone: nothing to answer */
    open_listener(f);
    assert_true(strlen(f->path) < sizeof(addr.sun_path));
    memcpy(addr.sun_path, f->path, strlen(f->path) + 1);
    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(sock >= 0);
    assert_int_equal(connect(sock, (const struct sockaddr *)&addr, sizeof(addr)), 0);
    passed = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(passed >= 0);
    raw_send(sock, sample(FLEETPROF__ENVELOPE__MSG_HELLO), passed);
    for (int i = 0; i < 5; i++)
        raw_send(sock, sample(FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST), -1);
    (void)close(passed);
    (void)close(sock); /* before the loop first runs: accepted and read after the end */
    SPIN_UNTIL(f, f->server.closed == 1);
    assert_int_equal(f->accepted, 1);
    assert_int_equal(f->server.received, 6);
    assert_int_equal(f->server.last_kind, FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST);
    assert_int_equal(f->server.close_error, 0);
}

/* Closing from on_message stops delivery of frames that came in the same read. */
static void test_close_inside_callback(void **state)
{
    struct fixture *f = *state;

    f->server.close_on_message = true;
    open_listener(f);
    connect_client(f, NULL);
    for (int i = 0; i < 20; i++)
        assert_int_equal(ipc_conn_send(f->client.conn, sample(FLEETPROF__ENVELOPE__MSG_HELLO)), 0);
    SPIN_UNTIL(f, f->server.closed == 1 && f->client.closed == 1);
    assert_int_equal(f->server.received, 1);
    assert_int_equal(f->server.close_error, 0);
    assert_string_equal(f->server.close_reason, "closed locally");
}

/* Raw bytes from a misbehaving peer: the connection ends with the codec's error. */
static void test_protocol_errors(void **state)
{
    static const struct {
        uint8_t bytes[16];
        size_t len;
        int error;
    } cases[] = {
            {{0x00}, 1, -ENOMSG},
            {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 11, -EPROTO},
            {{0x81, 0x80, 0x80, 0x02}, 4, -EMSGSIZE},
            {{0x03, 0xf8, 0x06, 0x01}, 4, -ENOMSG},
            {{0x04, 0xff, 0xff, 0xff, 0xff}, 5, -EBADMSG},
            {{0x10, 0x0a, 0x02}, 3, -ENODATA},
    };
    struct fixture *f = *state;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};

    f->server.reply = false;
    open_listener(f);
    memcpy(addr.sun_path, f->path, strlen(f->path) + 1);
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        memset(&f->server, 0, sizeof(f->server));
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
        assert_int_equal(write(fd, cases[i].bytes, cases[i].len), (ssize_t)cases[i].len);
        /* Truncation shows only at end of stream. */
        assert_int_equal(shutdown(fd, SHUT_WR), 0);
        SPIN_UNTIL(f, f->server.closed == 1);
        assert_int_equal(f->server.close_error, cases[i].error);
        assert_true(strlen(f->server.close_reason) > 0);
        assert_int_equal(f->server.received, 0);
        assert_int_equal(close(fd), 0);
    }
    /* The listener carries on. */
    connect_client(f, NULL);
}

static int refuse_accept(struct ipc_listener *l, struct ipc_conn *conn, const struct ipc_peer *peer,
                         void *userdata)
{
    struct fixture *f = userdata;

    (void)l;
    (void)peer;
    f->accepted++;
    /* Set, then refused: these callbacks must not run. */
    ipc_conn_set_callbacks(conn, &peer_cbs, &f->server);
    return -EPERM;
}

/* The caller's on_accept refuses: the peer sees the connection end, nothing else runs. */
static void test_accept_refused_by_caller(void **state)
{
    static const struct ipc_listener_callbacks cbs = {.on_accept = refuse_accept};
    struct fixture *f = *state;

    assert_int_equal(ipc_listener_open(&f->loop, f->path, NULL, &cbs, f, &f->listener), 0);
    assert_int_equal(ipc_conn_connect(&f->loop, f->path, NULL, &peer_cbs, &f->client, NULL, 0,
                                      &f->client.conn),
                     0);
    assert_int_equal(ipc_conn_send(f->client.conn, sample(FLEETPROF__ENVELOPE__MSG_HELLO)), 0);
    SPIN_UNTIL(f, f->client.closed == 1);
    assert_int_equal(f->accepted, 1);
    assert_int_equal(f->server.closed, 0);
    assert_int_equal(f->server.received, 0);
    assert_int_equal(f->client.received, 0);
}

/* A 5 MiB profile streamed with a 1 MiB window arrives whole; done reports success. */
static void on_stream_done(struct ipc_conn *conn, uint64_t request_id, int status, void *userdata)
{
    struct peer_state *p = userdata;

    (void)conn;
    assert_int_equal(request_id, 31);
    p->stream_status = status;
    p->stream_done = true;
}

static void test_stream_profile(void **state)
{
    struct fixture *f = *state;
    struct ipc_conn_options opts = {.stream_window_bytes = 1 << 20};
    size_t len = (5 << 20) + 333;
    uint8_t *payload = malloc(len);
    struct test_rng rng;

    assert_non_null(payload);
    test_rng_init(&rng, test_seed());
    test_rng_fill(&rng, payload, len);
    open_listener(f);
    connect_client(f, &opts);
    assert_int_equal(ipc_conn_stream_profile(f->client.conn, 31, payload, len, true, NULL,
                                             on_stream_done, &f->client),
                     0);
    assert_int_equal(ipc_conn_stream_profile(f->client.conn, 32, payload, len, true, NULL,
                                             on_stream_done, &f->client),
                     -EBUSY);
    /* The window bounds the queue: at most one piece beyond it. */
    assert_true(ipc_conn_queued_bytes(f->client.conn) <=
                (1 << 20) + IPC_PROFILE_PIECE_MAX_BYTES + 64);
    /* Other messages interleave with the stream. */
    assert_int_equal(ipc_conn_send(f->client.conn, sample(FLEETPROF__ENVELOPE__MSG_HELLO)), 0);
    SPIN_UNTIL(f, f->client.stream_done);
    assert_int_equal(f->client.stream_status, 0);
    SPIN_UNTIL(f, f->server.profile_last);
    assert_int_equal(f->server.profile_len, len);
    assert_memory_equal(f->server.profile, payload, len);
    SPIN_UNTIL(f, f->client.received == 1); /* Welcome for the Hello */
    free(payload);
}

/* Closing with a stream in progress reports -ECANCELED to its done callback. */
static void test_stream_cancelled_by_close(void **state)
{
    struct fixture *f = *state;
    size_t len = 8 << 20;
    uint8_t *payload = calloc(1, len);

    assert_non_null(payload);
    open_listener(f);
    connect_client(f, NULL);
    assert_int_equal(ipc_conn_stream_profile(f->client.conn, 31, payload, len, false, NULL,
                                             on_stream_done, &f->client),
                     0);
    ipc_conn_close(f->client.conn);
    SPIN_UNTIL(f, f->client.closed == 1);
    assert_true(f->client.stream_done);
    assert_int_equal(f->client.stream_status, -ECANCELED);
    free(payload);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_peer_check),
            cmocka_unit_test_setup_teardown(test_listen_path_hygiene, setup, teardown),
            cmocka_unit_test_setup_teardown(test_request_reply, setup, teardown),
            cmocka_unit_test_setup_teardown(test_pending_connections_are_seen_before_accept, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_pipelined_order, setup, teardown),
            cmocka_unit_test_setup_teardown(test_queue_cap_and_drain, setup, teardown),
            cmocka_unit_test_setup_teardown(test_send_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_shutdown_flushes, setup, teardown),
            cmocka_unit_test_setup_teardown(test_frames_after_a_descriptor_outlive_the_peer, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_close_inside_callback, setup, teardown),
            cmocka_unit_test_setup_teardown(test_protocol_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_accept_refused_by_caller, setup, teardown),
            cmocka_unit_test_setup_teardown(test_stream_profile, setup, teardown),
            cmocka_unit_test_setup_teardown(test_stream_cancelled_by_close, setup, teardown),
    };

    (void)signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("ipc-transport", tests, NULL, NULL);
}
