/* Unit tests for daemon/census.c: a process that connected in its profiled parent's fork
 * handler and closed before its Hello, one its parent spawned without it connecting, or a
 * profiled image that exec'd, is named at the next capture with why it was not profiled, read
 * off the real process: it ended, runs in a chroot, exec'd a static program, a set-group-ID
 * one, or an environment that does not preload the profiler. A process the profiler enters
 * (it reports for itself), a tool, or any process while the daemon closes is not named.
 *
 * The processes are real: forked children that exec a program and are stopped right after
 * their exec (PTRACE_TRACEME), so the program, its environment and its credentials are the
 * exec'd ones while nothing of it runs. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon-fixture.h"
#include "testlib.h"

#define NO_PRELOAD "PATH=/usr/bin:/bin"
#define PRELOAD    "LD_PRELOAD=/opt/fleetprof/lib/libfleetprof.so"

/* A forked child of ours that exec'd path with the environment env (NULL-terminated) and is
 * stopped at its first instruction; 0 when it could not be made so. */
static pid_t exec_stopped(const char *path, char *const env[])
{
    char *const argv[] = {(char *)path, NULL};
    pid_t parent = getpid(), pid = fork();
    int status;

    assert_true(pid >= 0);
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent || ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
            _exit(126);
        (void)execve(path, argv, env);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    if (!WIFSTOPPED(status)) /* could not be traced, or the exec failed */
        return 0;
    return pid;
}

static void end(pid_t pid)
{
    (void)kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

/* The sleep program, dynamically linked everywhere this runs. */
static const char *dynamic_program(void)
{
    return access("/usr/bin/sleep", X_OK) == 0 ? "/usr/bin/sleep" : "/bin/sleep";
}

/* A connection accepted from pid (not yet a child), as server.c's accept makes it. */
static struct conn *accepted(struct fx *f, pid_t pid)
{
    struct conn *c = calloc(1, sizeof(*c));

    assert_non_null(c);
    c->d = f->d;
    c->kind = CONN_NEW;
    c->peer.pid = pid;
    c->region_fd = -1;
    c->connect_ns = daemon__now_ns();
    daemon__conn_link(f->d, c);
    daemon__census_accept(c);
    return c;
}

/* It closes, and the daemon forgets it, as server.c does; nothing is judged yet. */
static void closed_only(struct fx *f, struct conn *c)
{
    daemon__census_close(c);
    daemon__conn_unlink(f->d, c);
    free(c);
}

/* It closes, and its grace is over (as at a capture's start). */
static void closed(struct fx *f, struct conn *c)
{
    closed_only(f, c);
    daemon__census_settle(f->d, true);
}

static const struct departure *named(const struct fx *f, int32_t pid)
{
    for (size_t i = 0; i < f->d->departure_count; i++)
        if (f->d->departures[i].pid == pid)
            return &f->d->departures[i];
    return NULL;
}

/* ---- a connection that closed before its Hello ------------------------------------ */

static void test_accept_notes_the_parent(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;

    (void)state;
    fx_setup(&f, NULL);
    pid = fx_fork_idle();
    c = accepted(&f, pid);
    assert_int_equal(c->ppid, getpid());
    daemon__conn_unlink(f.d, c);
    free(c);
    fx_kill_reap(pid);
    c = accepted(&f, pid); /* gone: unknown */
    assert_int_equal(c->ppid, -1);
    daemon__conn_unlink(f.d, c);
    free(c);
    fx_teardown(&f);
}

/* The profiled parent's child that ended before its Hello: named under its parent's name. */
static void test_a_child_that_ended_before_its_hello_is_named(void **state)
{
    const struct departure *dep;
    struct fx f;
    struct conn *c;
    pid_t pid;

    (void)state;
    fx_setup(&f, NULL);
    (void)fx_child(&f, getpid(), "parent");
    pid = fx_fork_idle();
    c = accepted(&f, pid);
    fx_kill_reap(pid);
    closed(&f, c);
    dep = named(&f, pid);
    assert_non_null(dep);
    assert_string_equal(dep->name, "parent");
    assert_non_null(strstr(dep->never, "it ended before its profiler started"));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO, "never said Hello: it ended before"), 1);
    fx_teardown(&f);
}

/* It exec'd a program with an environment that does not preload us: named, under the name of
 * the program it became. */
static void test_a_child_that_execd_without_the_preload_is_named(void **state)
{
    char *env[] = {NO_PRELOAD, NULL};
    const struct departure *dep;
    struct fx f;
    struct conn *c;
    pid_t pid;

    (void)state;
    pid = exec_stopped(dynamic_program(), env);
    if (!pid) {
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    (void)fx_child(&f, getpid(), "parent");
    c = accepted(&f, pid);
    closed(&f, c);
    dep = named(&f, pid);
    assert_non_null(dep);
    assert_string_equal(dep->name, "sleep");
    assert_non_null(strstr(dep->never, "environment that does not preload the profiler"));
    end(pid);
    fx_teardown(&f);
}

/* It exec'd a program that preloads us: its new image reports for itself, nothing named. */
static void test_a_child_that_execd_with_the_preload_is_not_named(void **state)
{
    char *env[] = {NO_PRELOAD, PRELOAD, NULL};
    struct fx f;
    struct conn *c;
    pid_t pid;

    (void)state;
    pid = exec_stopped(dynamic_program(), env);
    if (!pid) {
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    (void)fx_child(&f, getpid(), "parent");
    c = accepted(&f, pid);
    closed(&f, c);
    assert_int_equal(f.d->departure_count, 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_DEBUG, "it exec'd a program the profiler enters"),
                     1);
    end(pid);
    fx_teardown(&f);
}

static void test_a_static_program_is_named(void **state)
{
    static const char *const statics[] = {"/sbin/ldconfig", "/usr/sbin/ldconfig"};
    char *env[] = {NO_PRELOAD, PRELOAD, NULL};
    const struct departure *dep;
    struct fx f;
    struct conn *c;
    pid_t pid = 0;

    (void)state;
    for (size_t i = 0; !pid && i < sizeof(statics) / sizeof(statics[0]); i++)
        if (access(statics[i], X_OK) == 0)
            pid = exec_stopped(statics[i], env);
    if (!pid) {
        fx_not_run("no static program here, or it cannot be stopped at its exec");
        return;
    }
    fx_setup(&f, NULL);
    (void)fx_child(&f, getpid(), "parent");
    c = accepted(&f, pid);
    closed(&f, c);
    dep = named(&f, pid);
    assert_non_null(dep);
    /* Preloading does not help a program without a loader. */
    assert_non_null(strstr(dep->never, "static program"));
    end(pid);
    fx_teardown(&f);
}

/* Whether pid runs with an effective group other than its real one. */
static bool runs_setgid(pid_t pid)
{
    char path[64], buf[4096];
    unsigned long r_gid, e_gid;
    const char *g;
    FILE *s;
    size_t n;

    (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    s = fopen(path, "r");
    if (!s)
        return false;
    n = fread(buf, 1, sizeof(buf) - 1, s);
    (void)fclose(s);
    buf[n] = '\0';
    g = strstr(buf, "\nGid:");
    return g && sscanf(g, "\nGid: %lu %lu", &r_gid, &e_gid) == 2 && r_gid != e_gid;
}

static void test_a_set_group_id_program_is_named(void **state)
{
    static const char *const setgid[] = {"/usr/bin/expiry", "/usr/bin/chage", "/usr/bin/wall",
                                         "/usr/bin/ssh-agent", "/usr/bin/crontab"};
    char *env[] = {NO_PRELOAD, PRELOAD, NULL};
    const struct departure *dep;
    struct fx f;
    struct conn *c;
    pid_t pid = 0;

    (void)state;
    for (size_t i = 0; !pid && i < sizeof(setgid) / sizeof(setgid[0]); i++) {
        struct stat st;

        if (stat(setgid[i], &st) < 0 || !(st.st_mode & S_ISGID) || st.st_gid == getgid())
            continue;
        pid = exec_stopped(setgid[i], env);
        if (pid && !runs_setgid(pid)) { /* the kernel did not grant it (traced by a user) */
            end(pid);
            pid = 0;
        }
    }
    if (!pid) {
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    (void)fx_child(&f, getpid(), "parent");
    c = accepted(&f, pid);
    closed(&f, c);
    dep = named(&f, pid);
    assert_non_null(dep);
    assert_non_null(strstr(dep->never, "set-user-ID or set-group-ID program"));
    end(pid);
    fx_teardown(&f);
}

/* A process in another root is a runtime's whoever its parent: named with its own name. */
static void test_a_child_in_a_chroot_is_named(void **state)
{
    const struct departure *dep;
    char *dir = test_tmpdir("census-root");
    int ready[2];
    struct fx f;
    struct conn *c;
    char ok = 0;
    pid_t pid;

    (void)state;
    assert_non_null(dir);
    assert_int_equal(pipe(ready), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        (void)prctl(PR_SET_NAME, "jailed");
        ok = chroot(dir) == 0 ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            (void)pause();
    }
    assert_int_equal(read(ready[0], &ok, 1), 1);
    (void)close(ready[0]);
    (void)close(ready[1]);
    if (ok != 'y') {
        end(pid);
        test_rmtree(dir);
        free(dir);
        fx_not_run("not allowed to chroot here");
        return;
    }
    fx_setup(&f, NULL); /* no profiled parent at all */
    c = accepted(&f, pid);
    closed(&f, c);
    dep = named(&f, pid);
    assert_non_null(dep);
    assert_string_equal(dep->name, "jailed");
    assert_non_null(strstr(dep->never, "chroot"));
    end(pid);
    fx_teardown(&f);
    test_rmtree(dir);
    free(dir);
}

/* Whose parent is no profiled process (a tool, a stranger): not named; nor anything while the
 * daemon closes. */
static void test_not_named_without_a_profiled_parent_or_while_closing(void **state)
{
    char *env[] = {NO_PRELOAD, NULL};
    struct fx f;
    struct conn *c;
    pid_t pid;

    (void)state;
    pid = exec_stopped(dynamic_program(), env);
    if (!pid) {
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    c = accepted(&f, pid); /* its parent (this process) never said Hello */
    closed(&f, c);
    assert_int_equal(f.d->departure_count, 0);

    (void)fx_child(&f, getpid(), "parent");
    c = accepted(&f, pid);
    f.d->closing = true;
    closed(&f, c);
    f.d->closing = false;
    assert_int_equal(f.d->departure_count, 0);
    end(pid);
    fx_teardown(&f);
}

/* The parent known otherwise: connected and silent so far (the loop took the child's close
 * first), or ended with its exit profile kept. */
static void test_a_parent_connecting_or_ended_with_its_profile_counts(void **state)
{
    char *env[] = {NO_PRELOAD, NULL};
    struct fx f;
    struct conn *c, *parent, *kept;
    pid_t pid;

    (void)state;
    pid = exec_stopped(dynamic_program(), env);
    if (!pid) {
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    parent = accepted(&f, getpid()); /* its Hello not read yet */
    c = accepted(&f, pid);
    closed(&f, c);
    assert_non_null(named(&f, pid));
    assert_string_equal(named(&f, pid)->name, "sleep");
    daemon__conn_unlink(f.d, parent);
    free(parent);

    f.d->departure_count = 0;
    kept = fx_child(&f, getpid(), "ended-parent");
    daemon__exit_profile_add(f.d, kept, strdup("{}"), 2, NULL, false);
    fx_child_free(&f, kept);
    c = accepted(&f, pid);
    closed(&f, c);
    assert_non_null(named(&f, pid));
    end(pid);
    fx_teardown(&f);
}

/* ---- processes spawned without connecting ---------------------------------------- */

static void test_spawned_processes_are_judged_as_they_are(void **state)
{
    char *bare[] = {NO_PRELOAD, NULL}, *preloaded[] = {NO_PRELOAD, PRELOAD, NULL};
    int32_t pids[6];
    const struct departure *dep;
    struct fx f;
    struct conn *spawner;
    pid_t without, with, connected;

    (void)state;
    without = exec_stopped(dynamic_program(), bare);
    with = exec_stopped(dynamic_program(), preloaded);
    if (!without || !with) {
        if (without)
            end(without);
        if (with)
            end(with);
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    connected = fx_fork_idle();
    fx_setup(&f, NULL);
    spawner = fx_child(&f, getpid(), "spawner");
    (void)fx_child(&f, connected, "connected");
    pids[0] = without;
    pids[1] = with;
    pids[2] = connected; /* it said Hello: it reports */
    pids[3] = getppid(); /* not its child */
    pids[4] = 0;
    pids[5] = -7;
    daemon__census_spawned(spawner, pids, 6);
    daemon__census_settle(f.d, true);
    assert_int_equal(f.d->departure_count, 1);
    dep = named(&f, without);
    assert_non_null(dep);
    assert_string_equal(dep->name, "sleep");
    assert_non_null(strstr(dep->never, "does not preload the profiler"));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO, "spawned by"), 1);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_DEBUG, "it runs a program the profiler enters"),
                     1);
    end(without);
    end(with);
    fx_kill_reap(connected);
    fx_teardown(&f);
}

/* A process a profiled one forked, then ended without waiting for: an orphan, whose parent
 * is now a subreaper (here this test) or init, as a shell's `program &` is once the shell
 * ended. Its reporter's report still names it (it exec'd a program without the preload);
 * the same report from a live process that is not its parent does not. */
static void test_a_spawned_orphan_of_an_ended_reporter_is_named(void **state)
{
    char comm[32] = "";
    const struct departure *dep;
    struct fx f;
    struct conn *liar, *shell;
    pid_t reporter, orphan = 0, idle;
    int fds[2], status;

    (void)state;
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    assert_int_equal(pipe(fds), 0);
    reporter = fork();
    assert_true(reporter >= 0);
    if (reporter == 0) {
        char *const argv[] = {(char *)dynamic_program(), "30", NULL};
        char *const env[] = {NO_PRELOAD, NULL};
        pid_t pid = fork();

        if (pid == 0) {
            (void)execve(argv[0], argv, env);
            _exit(127);
        }
        _exit(write(fds[1], &pid, sizeof(pid)) == sizeof(pid) ? 0 : 1);
    }
    (void)close(fds[1]);
    assert_int_equal(read(fds[0], &orphan, sizeof(orphan)), sizeof(orphan));
    (void)close(fds[0]);
    while (waitpid(reporter, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 2000 && strcmp(comm, "sleep\n") != 0; i++) { /* its exec done */
        FILE *fp;
        char path[64];

        (void)snprintf(path, sizeof(path), "/proc/%d/comm", (int)orphan);
        fp = fopen(path, "r");
        if (!fp || !fgets(comm, sizeof(comm), fp))
            comm[0] = '\0';
        if (fp)
            (void)fclose(fp);
        (void)usleep(1000);
    }
    assert_string_equal(comm, "sleep\n");
    idle = fx_fork_idle();
    fx_setup(&f, NULL);

    liar = fx_child(&f, idle, "alive, not its parent");
    liar->start_epoch_ms = (double)daemon__epoch_ms() - 60000.0;
    daemon__census_spawned(liar, &orphan, 1);
    daemon__census_settle(f.d, true);
    assert_int_equal(f.d->departure_count, 0);

    shell = fx_child(&f, reporter, "shell");
    shell->start_epoch_ms = (double)daemon__epoch_ms() - 60000.0;
    daemon__census_spawned(shell, &orphan, 1);
    daemon__census_settle(f.d, true);
    assert_int_equal(f.d->departure_count, 1);
    dep = named(&f, orphan);
    assert_non_null(dep);
    assert_non_null(strstr(dep->never, "does not preload the profiler"));

    end(orphan); /* ours to reap: we are its subreaper */
    fx_kill_reap(idle);
    fx_teardown(&f);
    (void)prctl(PR_SET_CHILD_SUBREAPER, 0);
}

/* ---- a profiled image that exec'd ------------------------------------------------ */

static void test_an_exec_into_a_program_that_will_not_report_is_named(void **state)
{
    char *bare[] = {NO_PRELOAD, NULL}, *preloaded[] = {NO_PRELOAD, PRELOAD, NULL};
    const struct departure *dep;
    struct fx f;
    struct conn *c;
    pid_t without, with;

    (void)state;
    without = exec_stopped(dynamic_program(), bare);
    with = exec_stopped(dynamic_program(), preloaded);
    if (!without || !with) {
        if (without)
            end(without);
        if (with)
            end(with);
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    c = fx_child(&f, without, "before-exec");
    daemon__census_execd(c);
    daemon__census_settle(f.d, true);
    dep = named(&f, without);
    assert_non_null(dep);
    assert_string_equal(dep->name, "sleep");
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO,
                                  "(before-exec) exec'd into sleep, which will not report"),
                     1);

    c = fx_child(&f, with, "before-exec");
    daemon__census_execd(c); /* its new image reports */
    daemon__census_settle(f.d, true);
    assert_int_equal(f.d->departure_count, 1);
    f.d->closing = true;
    c = fx_child(&f, without, "again");
    daemon__census_execd(c);
    daemon__census_settle(f.d, true);
    f.d->closing = false;
    assert_int_equal(f.d->departure_count, 1);
    end(without);
    end(with);
    fx_teardown(&f);
}

/* ---- the grace ---------------------------------------------------------------------- */

static bool has_departures(void *arg)
{
    return ((struct fx *)arg)->d->departure_count > 0;
}

/* A process that will not report is not judged when its connection closes, but when its
 * grace is over, by the loop's timer, without a capture. */
static void test_judged_when_the_grace_is_over(void **state)
{
    char *env[] = {NO_PRELOAD, NULL};
    struct fx f;
    struct conn *c;
    pid_t pid;

    (void)state;
    pid = exec_stopped(dynamic_program(), env);
    if (!pid) {
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    (void)fx_child(&f, getpid(), "parent");
    c = accepted(&f, pid);
    closed_only(&f, c);
    assert_int_equal(f.d->departure_count, 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO, "never said Hello"), 0);
    assert_true(fx_run_until(&f, has_departures, &f));
    assert_non_null(named(&f, pid));
    assert_non_null(strstr(named(&f, pid)->never, "does not preload the profiler"));
    end(pid);
    fx_teardown(&f);
}

/* The same process, whose new image connects within the grace (the common fork+exec): never
 * judged, never named, nothing logged about it; a later image's connection or exit profile
 * counts, the closed connection itself does not (test_judged_when_the_grace_is_over: the
 * same process without a later image is named). */
static void test_a_new_image_that_connects_in_its_grace_is_not_judged(void **state)
{
    char *env[] = {NO_PRELOAD, NULL};
    struct fx f;
    struct conn *c, *again;
    pid_t pid;

    (void)state;
    pid = exec_stopped(dynamic_program(), env);
    if (!pid) {
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    fx_setup(&f, NULL);
    (void)fx_child(&f, getpid(), "parent");
    c = accepted(&f, pid);
    closed_only(&f, c);
    again = accepted(&f, pid); /* its new image, its Hello not read yet */
    daemon__census_settle(f.d, true);
    assert_int_equal(f.d->departure_count, 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO, "never said Hello"), 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_DEBUG, "never said Hello"), 0);
    daemon__conn_unlink(f.d, again);
    free(again);

    /* An exec'd image whose next image ended already with its exit profile. */
    c = fx_child(&f, pid, "before-exec");
    daemon__census_execd(c);
    fx_child_free(&f, c);
    c = fx_child(&f, pid, "after-exec");
    daemon__exit_profile_add(f.d, c, strdup("{}"), 2, NULL, false);
    fx_child_free(&f, c);
    daemon__census_settle(f.d, true);
    assert_int_equal(f.d->departure_count, 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO, "which will not report"), 0);
    end(pid);
    fx_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_accept_notes_the_parent),
            cmocka_unit_test(test_a_child_that_ended_before_its_hello_is_named),
            cmocka_unit_test(test_a_child_that_execd_without_the_preload_is_named),
            cmocka_unit_test(test_a_child_that_execd_with_the_preload_is_not_named),
            cmocka_unit_test(test_a_static_program_is_named),
            cmocka_unit_test(test_a_set_group_id_program_is_named),
            cmocka_unit_test(test_a_child_in_a_chroot_is_named),
            cmocka_unit_test(test_not_named_without_a_profiled_parent_or_while_closing),
            cmocka_unit_test(test_a_parent_connecting_or_ended_with_its_profile_counts),
            cmocka_unit_test(test_spawned_processes_are_judged_as_they_are),
            cmocka_unit_test(test_a_spawned_orphan_of_an_ended_reporter_is_named),
            cmocka_unit_test(test_an_exec_into_a_program_that_will_not_report_is_named),
            cmocka_unit_test(test_judged_when_the_grace_is_over),
            cmocka_unit_test(test_a_new_image_that_connects_in_its_grace_is_not_judged),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
