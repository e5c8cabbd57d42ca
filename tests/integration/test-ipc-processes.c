/* Two-process tests of the wire: a forked child connects over a socket in a temp directory,
 * from a private loop on its own thread (as the child runtime will), answers 10,000 requests
 * one by one and streams a 20 MiB profile, checked byte for byte; and, as root, a child that
 * setuid()s to nobody is refused by SO_PEERCRED with a Refuse that says why.
 *
 * Child processes never use cmocka: they report through their exit status.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

/* <uv.h> brings <sys/param.h>, whose MIN/MAX clash with common/macros.h (via testlib.h). */
#undef MIN
#undef MAX

#include "ipc/ipc.h"
#include "ipc/uv-ipc.h"
#include "testlib.h"

#define REQUESTS      10000
#define PAYLOAD_BYTES ((size_t)20 << 20)
#define GATHER_ID     ((uint64_t)REQUESTS + 1)
#define NOBODY        65534
/* How long the parent waits for the child before declaring a hang (not a timing check). */
#define HANG_MS       120000

/* In a forked child: report the failing line through the exit status. */
#define CHILD_CHECK(cond)                                                                     \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "child: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            _exit(3);                                                                         \
        }                                                                                     \
    } while (0)

static void fill_payload(uint8_t *p, size_t len, uint64_t seed)
{
    struct test_rng rng;

    test_rng_init(&rng, seed);
    test_rng_fill(&rng, p, len);
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    (void)nanosleep(&ts, NULL);
}

/* ---- the child: a client on a private loop, on its own thread ---------------------------- */

struct child {
    const char *path;
    uint64_t seed;
    uv_loop_t loop;
    struct ipc_conn *conn;
    uint8_t *payload;
    bool welcomed;
    bool refused;
    char refuse_reason[256];
    uint64_t answered;
    int close_error;
    bool closed;
    int stream_status;
};

static void child_stream_done(struct ipc_conn *conn, uint64_t id, int status, void *userdata)
{
    struct child *c = userdata;

    (void)conn;
    CHILD_CHECK(id == GATHER_ID);
    c->stream_status = status;
}

static void child_on_message(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *userdata)
{
    struct child *c = userdata;

    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_WELCOME:
        CHILD_CHECK(env->welcome->request_id == 1);
        CHILD_CHECK(env->welcome->version == FLEETPROF_PROTOCOL_VERSION);
        c->welcomed = true;
        break;
    case FLEETPROF__ENVELOPE__MSG_REFUSE:
        (void)snprintf(c->refuse_reason, sizeof(c->refuse_reason), "%s", env->refuse->reason);
        c->refused = true;
        break;
    case FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS: {
        Fleetprof__Envelope reply = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__GatherProgress p = FLEETPROF__GATHER_PROGRESS__INIT;

        CHILD_CHECK(env->get_gather_profile_progress->id == c->answered + 1);
        p.request_id = env->get_gather_profile_progress->id;
        p.gather_id = env->get_gather_profile_progress->gather_id;
        p.proportion = (uint32_t)(p.request_id * (IPC_PROPORTION_ONE / REQUESTS));
        p.location = "answering requests";
        reply.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS;
        reply.gather_progress = &p;
        CHILD_CHECK(ipc_conn_send(conn, &reply) == 0);
        c->answered++;
        break;
    }
    case FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE:
        CHILD_CHECK(env->gather_profile->id == GATHER_ID);
        c->payload = malloc(PAYLOAD_BYTES);
        CHILD_CHECK(c->payload);
        fill_payload(c->payload, PAYLOAD_BYTES, c->seed);
        CHILD_CHECK(ipc_conn_stream_profile(conn, GATHER_ID, c->payload, PAYLOAD_BYTES, false, NULL,
                                            child_stream_done, c) == 0);
        break;
    default:
        CHILD_CHECK(!"unexpected message");
    }
}

static void child_on_close(struct ipc_conn *conn, int error, const char *reason, void *userdata)
{
    struct child *c = userdata;

    (void)conn;
    (void)reason;
    c->close_error = error;
    c->closed = true;
}

static const struct ipc_conn_callbacks child_cbs = {
        .on_message = child_on_message,
        .on_close = child_on_close,
};

/* Connects (retrying while the parent sets up), says Hello, runs until the parent hangs up. */
static void *child_thread(void *arg)
{
    struct child *c = arg;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;
    char *argv[] = {"test-ipc-processes", "--child"};
    int r = -ENOENT;

    CHILD_CHECK(uv_loop_init(&c->loop) == 0);
    for (int i = 0; i < 1000 && (r == -ENOENT || r == -ECONNREFUSED); i++) {
        r = ipc_conn_connect(&c->loop, c->path, NULL, &child_cbs, c, NULL, 0, &c->conn);
        if (r < 0)
            sleep_ms(10);
    }
    CHILD_CHECK(r == 0);
    hello.id = 1;
    hello.version = FLEETPROF_PROTOCOL_VERSION;
    hello.pid = getpid();
    hello.ppid = getppid();
    hello.name = "ipc-child";
    hello.n_argv = 2;
    hello.argv = argv;
    hello.start_ns = 1;
    hello.start_epoch_ms = 2;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = &hello;
    CHILD_CHECK(ipc_conn_send(c->conn, &env) == 0);
    (void)uv_run(&c->loop, UV_RUN_DEFAULT);
    CHILD_CHECK(uv_loop_close(&c->loop) == 0);
    return NULL;
}

/* ---- the parent: the daemon's side --------------------------------------------------------- */

struct parent {
    pid_t child_pid;
    uint64_t seed;
    struct ipc_conn *conn;
    uint64_t next_id;
    uint64_t replies;
    uint8_t *expected;
    uint8_t *received;
    size_t received_len;
    bool complete;
    bool closed;
    int close_error;
    int accepted;
    int refused;
    struct ipc_peer refused_peer;
    int refused_error;
    char refused_reason[256];
};

static void send_progress_request(struct ipc_conn *conn, uint64_t id)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GetGatherProfileProgress req = FLEETPROF__GET_GATHER_PROFILE_PROGRESS__INIT;

    req.id = id;
    req.gather_id = GATHER_ID;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS;
    env.get_gather_profile_progress = &req;
    assert_int_equal(ipc_conn_send(conn, &env), 0);
}

static void parent_on_message(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *userdata)
{
    struct parent *p = userdata;

    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_HELLO: {
        Fleetprof__Envelope reply = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__Welcome w = FLEETPROF__WELCOME__INIT;
        Fleetprof__ClockReference clock_ref = FLEETPROF__CLOCK_REFERENCE__INIT;
        char reason[256];

        assert_int_equal(env->hello->pid, p->child_pid);
        assert_int_equal(env->hello->ppid, getpid());
        assert_int_equal(ipc_version_check(env->hello->version, reason, sizeof(reason)), 0);
        assert_string_equal(env->hello->argv[1], "--child");
        w.request_id = env->hello->id;
        w.version = FLEETPROF_PROTOCOL_VERSION;
        w.interval_ns = 1000000;
        w.chunk_bytes = 256 << 10;
        w.process_limit_bytes = 64 << 20;
        w.clock = &clock_ref;
        reply.msg_case = FLEETPROF__ENVELOPE__MSG_WELCOME;
        reply.welcome = &w;
        assert_int_equal(ipc_conn_send(conn, &reply), 0);
        p->next_id = 1;
        send_progress_request(conn, p->next_id);
        break;
    }
    case FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS: {
        const Fleetprof__GatherProgress *g = env->gather_progress;

        /* One outstanding request at a time: each reply names the last request. */
        assert_int_equal(g->request_id, p->next_id);
        assert_int_equal(g->gather_id, GATHER_ID);
        assert_int_equal(g->proportion,
                         (uint32_t)(g->request_id * (IPC_PROPORTION_ONE / REQUESTS)));
        assert_string_equal(g->location, "answering requests");
        p->replies++;
        if (p->next_id < REQUESTS) {
            send_progress_request(conn, ++p->next_id);
        } else {
            Fleetprof__Envelope req = FLEETPROF__ENVELOPE__INIT;
            Fleetprof__GatherProfile gather = FLEETPROF__GATHER_PROFILE__INIT;

            gather.id = GATHER_ID;
            req.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE;
            req.gather_profile = &gather;
            assert_int_equal(ipc_conn_send(conn, &req), 0);
        }
        break;
    }
    case FLEETPROF__ENVELOPE__MSG_PROFILE_DATA: {
        const Fleetprof__ProfileData *d = env->profile_data;

        assert_int_equal(d->request_id, GATHER_ID);
        assert_int_equal(d->offset, p->received_len);
        assert_true(d->data.len <= IPC_PROFILE_PIECE_MAX_BYTES);
        assert_true(p->received_len + d->data.len <= PAYLOAD_BYTES);
        memcpy(p->received + p->received_len, d->data.data, d->data.len);
        p->received_len += d->data.len;
        if (d->last) {
            assert_string_equal(d->error, "");
            p->complete = true;
            ipc_conn_close(conn);
        }
        break;
    }
    default:
        fail_msg("unexpected message %s", ipc_msg_name(env->msg_case));
    }
}

static void parent_on_close(struct ipc_conn *conn, int error, const char *reason, void *userdata)
{
    struct parent *p = userdata;

    (void)conn;
    if (error)
        print_message("# parent: connection closed: %s\n", reason);
    p->close_error = error;
    p->closed = true;
    p->conn = NULL;
}

static const struct ipc_conn_callbacks parent_cbs = {
        .on_message = parent_on_message,
        .on_close = parent_on_close,
};

static int parent_on_accept(struct ipc_listener *l, struct ipc_conn *conn,
                            const struct ipc_peer *peer, void *userdata)
{
    struct parent *p = userdata;

    (void)l;
    assert_int_equal(peer->pid, p->child_pid);
    p->accepted++;
    p->conn = conn;
    ipc_conn_set_callbacks(conn, &parent_cbs, p);
    return 0;
}

static void parent_on_refused(struct ipc_listener *l, const struct ipc_peer *peer, int error,
                              const char *reason, void *userdata)
{
    struct parent *p = userdata;

    (void)l;
    p->refused++;
    p->refused_peer = *peer;
    p->refused_error = error;
    (void)snprintf(p->refused_reason, sizeof(p->refused_reason), "%s", reason);
}

static const struct ipc_listener_callbacks parent_listener_cbs = {
        .on_accept = parent_on_accept,
        .on_refused = parent_on_refused,
};

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Runs the loop until the child exits; returns its wait status. */
static int run_until_child_exits(uv_loop_t *loop, pid_t pid)
{
    uint64_t deadline = uv_now(loop) + HANG_MS;
    int status = 0;

    while (uv_now(loop) < deadline) {
        pid_t r = waitpid(pid, &status, WNOHANG);

        if (r == pid)
            return status;
        assert_true(r == 0);
        (void)uv_run(loop, UV_RUN_ONCE);
    }
    (void)kill(pid, SIGKILL);
    (void)waitpid(pid, &status, 0);
    fail_msg("child did not finish");
    return status;
}

static void finish_loop(uv_loop_t *loop, struct ipc_listener *l)
{
    ipc_listener_close(l);
    uv_walk(loop, close_walk, NULL);
    (void)uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static void test_requests_and_stream(void **state)
{
    struct parent p = {.seed = test_seed()};
    struct ipc_listener *l = NULL;
    uv_loop_t loop;
    uv_timer_t tick;
    char *dir = test_tmpdir("ipc-proc");
    char path[256];
    int status;

    (void)state;
    assert_non_null(dir);
    (void)snprintf(path, sizeof(path), "%s/sock", dir);
    /* Fork before any loop exists: the child must not inherit one. */
    p.child_pid = fork();
    assert_true(p.child_pid >= 0);
    if (p.child_pid == 0) {
        struct child c = {.path = path, .seed = p.seed};
        pthread_t t;

        CHILD_CHECK(pthread_create(&t, NULL, child_thread, &c) == 0);
        CHILD_CHECK(pthread_join(t, NULL) == 0);
        CHILD_CHECK(c.welcomed);
        CHILD_CHECK(c.answered == REQUESTS);
        CHILD_CHECK(c.stream_status == 0);
        CHILD_CHECK(c.closed && c.close_error == 0);
        free(c.payload);
        _exit(0);
    }

    p.expected = malloc(PAYLOAD_BYTES);
    p.received = malloc(PAYLOAD_BYTES);
    assert_non_null(p.expected);
    assert_non_null(p.received);
    fill_payload(p.expected, PAYLOAD_BYTES, p.seed);
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(uv_timer_init(&loop, &tick), 0);
    assert_int_equal(uv_timer_start(&tick, on_tick, 10, 10), 0);
    assert_int_equal(ipc_listener_open(&loop, path, NULL, &parent_listener_cbs, &p, &l), 0);

    status = run_until_child_exits(&loop, p.child_pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    for (uint64_t deadline = uv_now(&loop) + HANG_MS; !p.closed && uv_now(&loop) < deadline;)
        (void)uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(p.accepted, 1);
    assert_int_equal(p.replies, REQUESTS);
    assert_true(p.complete);
    assert_int_equal(p.received_len, PAYLOAD_BYTES);
    assert_memory_equal(p.received, p.expected, PAYLOAD_BYTES);
    assert_true(p.closed);
    assert_int_equal(p.close_error, 0);

    finish_loop(&loop, l);
    free(p.expected);
    free(p.received);
    test_rmtree(dir);
    free(dir);
}

static void test_uid_mismatch_refused(void **state)
{
    struct parent p = {0};
    struct ipc_listener *l = NULL;
    uv_loop_t loop;
    uv_timer_t tick;
    char *dir;
    char path[256];
    int status;

    (void)state;
    if (geteuid() != 0) {
        print_message("# not root: cannot switch uid, skipped\n");
        skip();
    }
    dir = test_tmpdir("ipc-uid");
    assert_non_null(dir);
    (void)snprintf(path, sizeof(path), "%s/sock", dir);
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(uv_timer_init(&loop, &tick), 0);
    assert_int_equal(uv_timer_start(&tick, on_tick, 10, 10), 0);
    assert_int_equal(ipc_listener_open(&loop, path, NULL, &parent_listener_cbs, &p, &l), 0);
    /* The modes alone (0700 directory, 0600 socket) would stop nobody at connect(2) with
     * EACCES; loosen them so the connection reaches the SO_PEERCRED check under test. */
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(chmod(path, 0666), 0);

    p.child_pid = fork();
    assert_true(p.child_pid >= 0);
    if (p.child_pid == 0) {
        /* The parent's loop is inherited: never touch it; build a private one. */
        struct child c = {.path = path};
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;

        CHILD_CHECK(setgid(NOBODY) == 0);
        CHILD_CHECK(setuid(NOBODY) == 0);
        CHILD_CHECK(uv_loop_init(&c.loop) == 0);
        CHILD_CHECK(ipc_conn_connect(&c.loop, path, NULL, &child_cbs, &c, NULL, 0, &c.conn) == 0);
        hello.id = 1;
        hello.version = FLEETPROF_PROTOCOL_VERSION;
        hello.pid = getpid();
        env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
        env.hello = &hello;
        CHILD_CHECK(ipc_conn_send(c.conn, &env) == 0);
        (void)uv_run(&c.loop, UV_RUN_DEFAULT);
        CHILD_CHECK(c.closed);
        CHILD_CHECK(c.refused);
        CHILD_CHECK(!c.welcomed);
        CHILD_CHECK(strstr(c.refuse_reason, "uid 65534") != NULL);
        _exit(0);
    }

    status = run_until_child_exits(&loop, p.child_pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(p.accepted, 0);
    assert_int_equal(p.refused, 1);
    assert_int_equal(p.refused_peer.uid, NOBODY);
    assert_int_equal(p.refused_peer.pid, p.child_pid);
    assert_int_equal(p.refused_error, -EPERM);
    print_message("# refused: %s\n", p.refused_reason);
    assert_non_null(strstr(p.refused_reason, "uid 65534"));

    finish_loop(&loop, l);
    test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_requests_and_stream),
            cmocka_unit_test(test_uid_mismatch_refused),
    };

    (void)signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests_name("ipc-processes", tests, NULL, NULL);
}
