/* Unit tests for daemon/server.c on a private loop in one process: what the daemon counts of
 * a process that has connected but not yet said who it is (fleetprof record waits for
 * those before it gathers: a process accepted in the round that saw the command exit was
 * left out of the file). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

/* <uv.h> brings <sys/param.h>, whose MIN/MAX clash with common/macros.h (via testlib.h). */
#undef MIN
#undef MAX

#include "daemon/daemon.h"
#include "ipc/uv-ipc.h"
#include "proto/fleetprof-protocol.h"
#include "testlib.h"

#define HANG_MS 30000

struct client {
    bool welcomed;
};

static void on_client_message(struct ipc_conn *c, const Fleetprof__Envelope *env, void *userdata)
{
    struct client *cl = userdata;

    (void)c;
    if (env->msg_case == FLEETPROF__ENVELOPE__MSG_WELCOME)
        cl->welcomed = true;
}

static void on_closed(void *userdata)
{
    *(bool *)userdata = true;
}

static void test_a_connection_counts_before_its_hello(void **state)
{
    static const struct ipc_conn_callbacks cbs = {.on_message = on_client_message};
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;
    struct daemon_options opt = {.pace_ns = DAEMON_PACE_OFF};
    struct daemon *d = NULL;
    struct ipc_conn *conn = NULL;
    struct daemon_stats s;
    struct client cl = {0};
    char *dir = test_tmpdir("daemon-server"), path[300];
    bool closed = false;
    uv_loop_t loop;
    uint64_t deadline;

    (void)state;
    (void)signal(SIGPIPE, SIG_IGN); /* the daemon writes to our closed end, as to a dead child */
    assert_non_null(dir);
    (void)snprintf(path, sizeof(path), "%s/fleetprof.sock", dir);
    opt.socket_path = path;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(daemon_new(&loop, &opt, &d), 0);
    daemon_get_stats(d, &s);
    assert_int_equal(s.children, 0);
    assert_int_equal(s.connecting, 0);

    /* In the backlog: the loop has not run. */
    assert_int_equal(ipc_conn_connect(&loop, path, NULL, &cbs, &cl, NULL, 0, &conn), 0);
    daemon_get_stats(d, &s);
    assert_int_equal(s.children, 0);
    assert_int_equal(s.connecting, 1);

    /* Accepted (a listener with a queued connection is ready at the first poll), nothing
     * read from it yet: still not a child, still counted. */
    for (int i = 0; i < 10; i++)
        (void)uv_run(&loop, UV_RUN_NOWAIT);
    daemon_get_stats(d, &s);
    assert_int_equal(s.children, 0);
    assert_int_equal(s.connecting, 1);

    /* Its Hello makes it a child. */
    hello.id = 1;
    hello.version = FLEETPROF_PROTOCOL_VERSION;
    hello.pid = getpid();
    hello.name = "test";
    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = &hello;
    assert_int_equal(ipc_conn_send(conn, &env), 0);
    deadline = uv_now(&loop) + HANG_MS;
    while (!cl.welcomed && uv_now(&loop) < deadline)
        (void)uv_run(&loop, UV_RUN_ONCE);
    assert_true(cl.welcomed);
    daemon_get_stats(d, &s);
    assert_int_equal(s.children, 1);
    assert_int_equal(s.connecting, 0);

    ipc_conn_close(conn);
    daemon_close(d, on_closed, &closed);
    deadline = uv_now(&loop) + HANG_MS;
    while (!closed && uv_now(&loop) < deadline)
        (void)uv_run(&loop, UV_RUN_ONCE);
    assert_true(closed);
    (void)uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&loop), 0);
    test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_connection_counts_before_its_hello),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
