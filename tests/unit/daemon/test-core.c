/* Unit tests for daemon/core.c: the children-by-pid map (a dropped connection replaced by a
 * newer one of its pid), dropping and sending on a real connection, the end of a close, the
 * log, the clocks, and what /proc says of a real forked child (alive, zombie, reaped, its pid
 * another process's). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon-fixture.h"
#include "testlib.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ms(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool in_table(const struct daemon *d, const struct conn *c)
{
    for (const struct conn *k = d->conns; k; k = k->next)
        if (k == c)
            return true;
    return false;
}

/* ---- children by pid ------------------------------------------------------------- */

static void test_children_are_found_by_pid(void **state)
{
    struct fx f;
    struct conn *a, *b, *c;

    (void)state;
    fx_setup(&f, NULL);
    a = fx_child(&f, 1001, "a");
    b = fx_child(&f, 1002, "b");
    c = fx_child(&f, 1003, "c");
    assert_ptr_equal(daemon__child_by_pid(f.d, 1001), a);
    assert_ptr_equal(daemon__child_by_pid(f.d, 1002), b);
    assert_ptr_equal(daemon__child_by_pid(f.d, 1003), c);
    assert_null(daemon__child_by_pid(f.d, 1004));
    assert_null(daemon__child_by_pid(f.d, 0));
    assert_true(b->in_pid_map);

    daemon__pid_map_remove(f.d, b);
    assert_false(b->in_pid_map);
    assert_null(daemon__child_by_pid(f.d, 1002));
    assert_ptr_equal(daemon__child_by_pid(f.d, 1001), a);
    assert_ptr_equal(daemon__child_by_pid(f.d, 1003), c);
    daemon__pid_map_remove(f.d, b); /* idempotent */
    assert_ptr_equal(daemon__child_by_pid(f.d, 1001), a);
    assert_ptr_equal(daemon__child_by_pid(f.d, 1003), c);
    assert_true(in_table(f.d, b)); /* the map only: still in the table */

    /* Unlinking takes it out of both. */
    daemon__conn_unlink(f.d, c);
    assert_false(in_table(f.d, c));
    assert_null(daemon__child_by_pid(f.d, 1003));
    assert_false(c->in_pid_map);
    assert_true(in_table(f.d, a));
    assert_true(in_table(f.d, b));
    free(c);
    f.d->stats.children--;
    fx_teardown(&f);
}

/* Only children are found: a connection of the pid that is not one (dropped, being closed)
 * is no owner to send to. */
static void test_a_connection_that_is_no_child_is_not_found(void **state)
{
    struct fx f;
    struct conn *c;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 2001, "x");
    c->kind = CONN_DEAD;
    assert_true(c->in_pid_map);
    assert_null(daemon__child_by_pid(f.d, 2001));
    c->kind = CONN_CHILD;
    assert_ptr_equal(daemon__child_by_pid(f.d, 2001), c);
    fx_teardown(&f);
}

/* A child dropped and not yet closed still holds its pid's entry; the same process's next
 * connection replaces it there, and the old one's removal leaves the new one. */
static void test_a_dropped_connection_is_replaced_by_a_newer_one(void **state)
{
    struct fx f;
    struct conn *old, *fresh;
    struct daemon_stats s;

    (void)state;
    fx_setup(&f, NULL);
    old = fx_child(&f, 3001, "old");
    daemon__drop(old, "it misbehaved");
    assert_int_equal(old->kind, CONN_DEAD);
    assert_true(old->in_pid_map);
    assert_null(daemon__child_by_pid(f.d, 3001));
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.dropped_children, 1);
    assert_int_equal(s.children, 0);
    assert_int_equal(
            fx_logged_at(&f, DAEMON_LOG_WARNING, "dropping child 3001 (old): it misbehaved"), 1);
    daemon__drop(old, "again"); /* logged once, counted once */
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.dropped_children, 1);
    assert_int_equal(fx_logged(&f, "again"), 0);

    fresh = fx_child(&f, 3001, "fresh");
    assert_ptr_equal(daemon__child_by_pid(f.d, 3001), fresh);
    daemon__pid_map_remove(f.d, old);
    assert_false(old->in_pid_map);
    assert_ptr_equal(daemon__child_by_pid(f.d, 3001), fresh);
    daemon__conn_unlink(f.d, old);
    free(old);
    assert_ptr_equal(daemon__child_by_pid(f.d, 3001), fresh);
    assert_true(fresh->in_pid_map);
    daemon__pid_map_remove(f.d, fresh);
    assert_null(daemon__child_by_pid(f.d, 3001));
    fx_teardown(&f);
}

/* A large fleet: every child found after the map grew, the removed ones gone. */
static void test_a_large_fleet_by_pid(void **state)
{
    enum { N = 3000 };
    struct fx f;
    struct conn **c = calloc(N, sizeof(*c));
    struct test_rng rng;
    int32_t base;

    (void)state;
    assert_non_null(c);
    test_rng_init(&rng, test_seed());
    base = (int32_t)test_rng_range(&rng, 1, 1u << 20);
    fx_setup(&f, NULL);
    for (int i = 0; i < N; i++)
        c[i] = fx_child(&f, base + 7 * i, "many");
    for (int i = 0; i < N; i++)
        assert_ptr_equal(daemon__child_by_pid(f.d, base + 7 * i), c[i]);
    for (int i = 0; i < N; i += 2)
        daemon__pid_map_remove(f.d, c[i]);
    for (int i = 0; i < N; i++) {
        if (i % 2)
            assert_ptr_equal(daemon__child_by_pid(f.d, base + 7 * i), c[i]);
        else
            assert_null(daemon__child_by_pid(f.d, base + 7 * i));
        assert_null(daemon__child_by_pid(f.d, base + 7 * i + 1));
    }
    fx_teardown(&f);
    free(c);
}

/* ---- sending and dropping on a real connection ----------------------------------- */

static bool got_stop(void *arg)
{
    return fx_client_got(arg, FLEETPROF__ENVELOPE__MSG_STOP, 0) != NULL;
}

static bool client_closed(void *arg)
{
    return ((struct fx_client *)arg)->closed;
}

static void test_send_reaches_the_peer_and_drop_closes_it(void **state)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Stop stop = FLEETPROF__STOP__INIT;
    struct fx_client cl;
    struct daemon_stats s;
    struct fx f;
    struct conn *c;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_connect(&f, &cl, "peer");
    assert_non_null(c);
    stop.id = 77;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_STOP;
    env.stop = &stop;
    assert_int_equal(daemon__send(c, &env), 0);
    assert_true(fx_run_until(&f, got_stop, &cl));
    assert_int_equal(fx_client_got(&cl, FLEETPROF__ENVELOPE__MSG_STOP, 0)->stop->id, 77);

    daemon__drop(c, "a test says so");
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.dropped_children, 1);
    assert_int_equal(s.children, 0);
    assert_int_equal(c->kind, CONN_DEAD);
    assert_int_equal(fx_logged(&f, "(peer): a test says so"), 1);
    /* Sending to a dropped peer fails, and drops nothing more. */
    assert_true(daemon__send(c, &env) < 0);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.dropped_children, 1);
    assert_true(fx_run_until(&f, client_closed, &cl));
    fx_client_close(&f, &cl);
    assert_null(daemon__child_by_pid(f.d, getpid()));
    fx_teardown(&f);
}

/* ---- the end of a close ---------------------------------------------------------- */

static int finished;

static void count_finish(struct daemon *d)
{
    (void)d;
    finished++;
}

static void test_close_finishes_only_when_nothing_is_left(void **state)
{
    struct daemon d = {0};
    struct conn c = {0};

    (void)state;
    finished = 0;
    d.finish_close = count_finish;
    daemon__maybe_finish_close(&d); /* not closing */
    assert_int_equal(finished, 0);
    d.closing = true;
    d.conns = &c;
    daemon__maybe_finish_close(&d);
    assert_int_equal(finished, 0);
    d.conns = NULL;
    d.socket_watch_open = true;
    daemon__maybe_finish_close(&d);
    assert_int_equal(finished, 0);
    d.socket_watch_open = false;
    d.linger_timer_open = true;
    daemon__maybe_finish_close(&d);
    assert_int_equal(finished, 0);
    d.linger_timer_open = false;
    d.gather = (struct gather *)&c; /* any capture running */
    daemon__maybe_finish_close(&d);
    assert_int_equal(finished, 0);
    d.gather = NULL;
    d.workers = (struct daemon_workers *)&c;
    daemon__maybe_finish_close(&d);
    assert_int_equal(finished, 0);
    d.workers = NULL;
    daemon__maybe_finish_close(&d);
    assert_int_equal(finished, 1);
}

/* ---- the log and the clocks ------------------------------------------------------ */

static void test_log_lines_reach_the_embedder(void **state)
{
    char long_name[1000];
    struct fx f;

    (void)state;
    fx_setup(&f, NULL);
    fx_log_clear(&f);
    daemon__log(f.d, DAEMON_LOG_WARNING, "child %d said %s", 42, "hello");
    assert_int_equal(f.line_count, 1);
    assert_int_equal(f.lines[0].level, DAEMON_LOG_WARNING);
    assert_string_equal(f.lines[0].text, "child 42 said hello");

    /* A line longer than the core's buffer is cut, not overrun. */
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    daemon__log(f.d, DAEMON_LOG_DEBUG, "x%s", long_name);
    assert_int_equal(f.line_count, 2);
    assert_int_equal(strlen(f.lines[1].text), 511);
    assert_int_equal(f.lines[1].text[0], 'x');

    /* Past the embedder's level: the line never reaches it (record keeps errors alone). */
    f.d->opt.log_level = DAEMON_LOG_WARNING;
    daemon__log(f.d, DAEMON_LOG_INFO, "dropped");
    assert_int_equal(f.line_count, 2);
    daemon__log(f.d, DAEMON_LOG_WARNING, "kept");
    assert_int_equal(f.line_count, 3);
    assert_string_equal(f.lines[2].text, "kept");

    /* No log function: nothing happens. */
    f.d->opt.log = NULL;
    daemon__log(f.d, DAEMON_LOG_ERROR, "unseen");
    assert_int_equal(f.line_count, 3);
    fx_teardown(&f);
}

static void test_clocks(void **state)
{
    uint64_t prev = 0;

    (void)state;
    for (int i = 0; i < 1000; i++) {
        uint64_t before = mono_ns(), now = daemon__now_ns(), after = mono_ns();

        assert_true(before <= now && now <= after); /* CLOCK_MONOTONIC */
        assert_true(now >= prev);
        prev = now;
    }
    for (int i = 0; i < 100; i++) {
        uint64_t before = real_ms(), now = daemon__epoch_ms(), after = real_ms();

        assert_true(before <= now && now <= after); /* the wall clock, in ms */
    }
}

/* ---- processes, off /proc -------------------------------------------------------- */

static void test_a_forked_child_alive_zombie_reaped(void **state)
{
    uint64_t mine = 0, start = 0, again = 0;
    pid_t pid;

    (void)state;
    assert_true(daemon__process_start(getpid(), &mine));
    assert_true(mine > 0);
    pid = fx_fork_idle();
    assert_true(daemon__process_start(pid, &start));
    assert_true(start >= mine); /* started after us */
    assert_false(daemon__process_gone(pid, 0));
    assert_false(daemon__process_gone(pid, start));
    /* Its pid with another start time: another process's now. */
    assert_true(daemon__process_gone(pid, start + 1));
    assert_true(daemon__process_gone(pid, start - 1));

    /* A zombie: still in /proc, gone all the same. */
    (void)kill(pid, SIGKILL);
    assert_true(fx_wait_zombie(pid));
    assert_true(daemon__process_gone(pid, 0));
    assert_true(daemon__process_gone(pid, start));
    assert_true(daemon__process_start(pid, &again));
    assert_true(again == start);

    /* Reaped: no entry at all. */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    assert_true(daemon__process_gone(pid, 0));
    assert_true(daemon__process_gone(pid, start));
    again = 12345;
    assert_false(daemon__process_start(pid, &again));
    assert_true(again == 12345); /* untouched */
}

/* The process's name comes before its state in /proc/PID/stat, and may hold anything: a name
 * that reads like the rest of the line is not taken for it. */
static void test_a_name_that_mimics_a_zombie(void **state)
{
    int go[2], done[2];
    uint64_t before = 0, after = 0;
    char byte = 0;
    pid_t pid;

    (void)state;
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (read(go[0], &byte, 1) != 1)
            _exit(1);
        (void)prctl(PR_SET_NAME, "a) Z 1 1 1 1 1");
        if (write(done[1], &byte, 1) != 1)
            _exit(1);
        for (;;)
            (void)pause();
    }
    assert_true(daemon__process_start(pid, &before));
    assert_int_equal(write(go[1], &byte, 1), 1);
    assert_int_equal(read(done[0], &byte, 1), 1);
    assert_false(daemon__process_gone(pid, 0));
    assert_false(daemon__process_gone(pid, before));
    assert_true(daemon__process_start(pid, &after));
    assert_true(after == before);
    fx_kill_reap(pid);
    (void)close(go[0]);
    (void)close(go[1]);
    (void)close(done[0]);
    (void)close(done[1]);
}

/* The pid of a process that ended, taken by a new one: known by its start time, the old one is
 * gone. */
static void test_a_reused_pid_is_another_process(void **state)
{
    uint64_t start = 0, now = 0;
    pid_t pid, other;

    (void)state;
    pid = fx_fork_idle();
    assert_true(daemon__process_start(pid, &start));
    /* Start times are clock ticks (10 ms): the new process must start in a later one. */
    assert_true(fx_wait_ticks_past(start + 1));
    fx_kill_reap(pid);
    other = fx_fork_with_pid(pid);
    if (!other) {
        fx_not_run("cannot choose the next pid here (ns_last_pid needs root)");
        return;
    }
    assert_true(daemon__process_start(pid, &now));
    assert_true(now > start);
    assert_true(daemon__process_gone(pid, start)); /* the old one */
    assert_false(daemon__process_gone(pid, now));  /* the new one */
    assert_false(daemon__process_gone(pid, 0));    /* whoever has the pid */
    fx_kill_reap(other);
}

/* Dropping a connection that is no child (a tool, one that said nothing yet) counts no child. */
static void test_dropping_a_connection_that_is_no_child(void **state)
{
    struct daemon_stats s;
    struct fx f;
    struct conn *c;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 5001, "tool");
    daemon__pid_map_remove(f.d, c);
    c->kind = CONN_TOOL;
    f.d->stats.children--;
    daemon__drop(c, "asked for nonsense");
    assert_int_equal(c->kind, CONN_DEAD);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.dropped_children, 0);
    assert_int_equal(s.children, 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "dropping connection from pid 5001: asked for nonsense"),
                     1);
    fx_teardown(&f);
}

static void test_no_such_process(void **state)
{
    uint64_t start = 0;

    (void)state;
    assert_true(daemon__process_gone(-5, 0));
    assert_true(daemon__process_gone(0x3fffffff, 0)); /* above any pid_max */
    assert_false(daemon__process_start(0x3fffffff, &start));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_children_are_found_by_pid),
            cmocka_unit_test(test_a_connection_that_is_no_child_is_not_found),
            cmocka_unit_test(test_a_dropped_connection_is_replaced_by_a_newer_one),
            cmocka_unit_test(test_a_large_fleet_by_pid),
            cmocka_unit_test(test_send_reaches_the_peer_and_drop_closes_it),
            cmocka_unit_test(test_close_finishes_only_when_nothing_is_left),
            cmocka_unit_test(test_log_lines_reach_the_embedder),
            cmocka_unit_test(test_clocks),
            cmocka_unit_test(test_a_forked_child_alive_zombie_reaped),
            cmocka_unit_test(test_a_name_that_mimics_a_zombie),
            cmocka_unit_test(test_a_reused_pid_is_another_process),
            cmocka_unit_test(test_dropping_a_connection_that_is_no_child),
            cmocka_unit_test(test_no_such_process),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
