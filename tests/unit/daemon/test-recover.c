/* Unit tests for daemon/recover.c: profiles built from a child's chunk region on the daemon's
 * workers (a killed child's recovery, an image's life before its exec, the exit profile a
 * short-lived child left there), and the regions kept for children whose connection ended
 * while they live on ("linger"): built when the owner is killed (noticed by the timer, or
 * at once by a capture), let go when it reconnects or wrote its own profile, the children it
 * forked without the profiler named. The regions are made by real forked children, with
 * buffer/region.c and real sample entries, and sent to the test as a child sends its own. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/region.h"
#include "daemon-fixture.h"
#include "daemon/workers.h"
#include "profile/entries.h"
#include "testlib.h"

#define KIB     1024u
#define SAMPLES 3

/* What the region child does before it hands its region over. */
enum {
    RC_EXEC = 1 << 0,       /* marks an exec into /usr/bin/next */
    RC_CRASH = 1 << 1,      /* records a SIGSEGV */
    RC_WRITTEN = 1 << 2,    /* marks its profile written */
    RC_UNPROFILED = 1 << 3, /* gives its threads up and notes unprofiled children */
    RC_ENDED = 1 << 4,      /* publishes the description of its end */
    RC_EXIT = 1 << 5,       /* exits at once (else waits to be killed) */
};

/* The description a child publishes as it ends (Welcome.exit_in_region). */
static int publish_end(struct buf_region *r)
{
    Fleetprof__ProcessDescription d = FLEETPROF__PROCESS_DESCRIPTION__INIT;
    Fleetprof__RuntimeStats rs = FLEETPROF__RUNTIME_STATS__INIT;
    uint8_t buf[512];
    size_t len;

    d.pid = getpid();
    d.ppid = getppid();
    d.name = "ender";
    d.start_ns = daemon__now_ns() - 1000000;
    d.interval_ns = 1000000;
    d.described_ns = daemon__now_ns();
    d.exit_ns = daemon__now_ns();
    rs.pushed_blocks = SAMPLES;
    d.runtime = &rs;
    len = fleetprof__process_description__get_packed_size(&d);
    if (len > sizeof(buf))
        return -1;
    (void)fleetprof__process_description__pack(&d, buf);
    return buf_region_set_meta(r, buf, len);
}

/* In the forked child: a region with SAMPLES samples, marked as flags say. */
static int make_region(unsigned flags, int unprofiled, struct buf_region **ret)
{
    static const uint64_t frames[2] = {0x401000, 0x402000};
    struct buf_chunk_manager *m = NULL;
    struct buf_chunked_buffer *b = NULL;
    struct buf_region *r = NULL;

    if (buf_region_new(64 * KIB, NULL, &r) < 0 ||
        buf_chunk_manager_local_new(1024 * KIB, 64 * KIB, &m) < 0 ||
        buf_chunk_manager_local_set_region(m, r) < 0 || buf_chunked_buffer_new(m, getpid(), &b) < 0)
        return -1;
    for (int i = 0; i < SAMPLES; i++) {
        struct prof_sample s = {
                .tid = getpid(), .time_ns = daemon__now_ns(), .frame_count = 2, .frames = frames};

        if (prof_entry_put_sample(b, &s) < 0)
            return -1;
    }
    if (flags & RC_EXEC)
        buf_region_mark_exec(r, daemon__now_ns(), "/usr/bin/next", 0);
    if (flags & RC_CRASH) {
        struct buf_region_crash crash = {.signal = SIGSEGV,
                                         .code = 1,
                                         .tid = getpid(),
                                         .address = 0x10,
                                         .time_ns = daemon__now_ns()};

        buf_region_record_crash(r, &crash);
    }
    if (flags & RC_WRITTEN)
        buf_region_mark_profile_written(r);
    if (flags & RC_UNPROFILED) {
        buf_region_mark_slots_given_up(r);
        for (int i = 0; i < unprofiled; i++)
            buf_region_note_unprofiled_child(r, 70000 + i);
    }
    if ((flags & RC_ENDED) && publish_end(r) < 0)
        return -1;
    *ret = r; /* the buffer and its manager stay: the process holds them until it dies */
    return 0;
}

/* A forked child that makes its region and sends its descriptor; *ret_fd is the daemon's
 * copy. Unless RC_EXIT, it waits to be killed. */
static pid_t spawn_region_child(unsigned flags, int unprofiled, int *ret_fd)
{
    pid_t parent = getpid(), pid;
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct buf_region *r = NULL;

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        (void)close(sv[0]);
        if (make_region(flags, unprofiled, &r) < 0 || fx_send_fd(sv[1], buf_region_fd(r)) < 0)
            _exit(1);
        if (flags & RC_EXIT)
            _exit(0);
        for (;;)
            (void)pause();
    }
    (void)close(sv[1]);
    *ret_fd = fx_recv_fd(sv[0]);
    (void)close(sv[0]);
    assert_true(*ret_fd >= 0);
    return pid;
}

static void reap(pid_t pid)
{
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

/* ---- what the builds give back --------------------------------------------------- */

static struct fx *the_fx;

struct built {
    int calls;
    enum daemon_build_kind kind;
    int32_t pid;
    char name[64];
    int result;
    bool execd, exited;
    char *json; /* taken */
    size_t len;
    char how[200];
};
static struct built built;

static void on_built(struct conn *c, struct daemon_built *b)
{
    built.calls++;
    built.kind = b->kind;
    built.pid = b->pid;
    (void)snprintf(built.name, sizeof(built.name), "%s", b->name);
    built.result = b->result;
    built.execd = b->execd;
    built.exited = b->exited;
    built.json = b->json;
    b->json = NULL;
    built.len = b->len;
    (void)snprintf(built.how, sizeof(built.how), "%s", b->how);
    c->building = false;
    /* The connection ended meanwhile (it has no socket here): freed, as server.c does. */
    if (c->kind == CONN_CHILD) {
        fx_child_free(the_fx, c);
    } else {
        daemon__region_release(c);
        daemon__conn_unlink(the_fx->d, c);
        free(c);
    }
}

static bool built_once(void *arg)
{
    (void)arg;
    return built.calls > 0;
}

static void built_reset(void)
{
    free(built.json);
    built = (struct built){0};
}

static bool in_table(const struct daemon *d, const struct conn *c)
{
    for (const struct conn *k = d->conns; k; k = k->next)
        if (k == c)
            return true;
    return false;
}

static void setup(struct fx *f)
{
    struct daemon_options o = {.chunk_bytes = 64 * KIB, .process_limit_bytes = 1024 * KIB};

    fx_setup(f, &o);
    the_fx = f;
    built_reset();
}

static void teardown(struct fx *f)
{
    fx_teardown(f);
    built_reset();
    the_fx = NULL;
}

/* A dead child's connection, as server.c leaves it for a build: no socket. */
static struct conn *child_of(struct fx *f, pid_t pid, int fd)
{
    struct conn *c = fx_child(f, pid, "worker");

    daemon__region_accept(c, fd, false);
    assert_int_equal(c->region_fd, fd);
    return c;
}

/* ---- builds ---------------------------------------------------------------------- */

static void test_nothing_to_build_without_a_region(void **state)
{
    struct fx f;
    struct conn *c;

    (void)state;
    setup(&f);
    c = fx_child(&f, getpid(), "regionless");
    assert_false(daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built));
    assert_false(daemon__region_build(c, DAEMON_BUILD_EXIT, on_built));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "left its exit profile in its chunk region, and it could not be "
                                  "built: the daemon does not hold its region"),
                     1);
    assert_int_equal(workers_busy(f.d->workers), 0);
    assert_int_equal(built.calls, 0);
    teardown(&f);
}

/* A process that lives on reconnects: nothing to recover. Killed, its region is read back on
 * a worker from a duplicate of the descriptor (the connection may let its own go at once). */
static void test_a_killed_child_is_recovered_from_its_region(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(0, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_false(daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_DEBUG, "left but lives on"), 1);

    fx_kill_reap(pid);
    assert_true(daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built));
    c->building = true;
    daemon__region_release(c); /* the job has its own descriptor */
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.calls, 1);
    assert_int_equal(built.kind, DAEMON_BUILD_RECOVERY);
    assert_int_equal(built.result, 0);
    assert_int_equal(built.pid, pid);
    assert_string_equal(built.name, "worker");
    assert_false(built.execd);
    assert_false(built.exited);
    assert_non_null(built.json);
    assert_int_equal(built.json[0], '{');
    assert_int_equal(built.json[built.len - 1], '}');
    assert_non_null(strstr(built.how, "killed (no crash recorded), 3 entries from 1 chunks, 0 "
                                      "corrupt chunks, 0 torn bytes"));
    assert_non_null(strstr(built.json, "\"blocks\":3"));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO, "profile recovered from its chunks in"), 1);
    teardown(&f);
}

static void test_a_crash_is_named_by_its_signal(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(RC_CRASH, 0, &fd);
    c = child_of(&f, pid, fd);
    fx_kill_reap(pid);
    assert_true(daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built));
    c->building = true;
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, 0);
    assert_ptr_equal(strstr(built.how, "SIGSEGV, 3 entries"), built.how);
    teardown(&f);
}

/* An image that exec'd ended there: its life before the exec is built while the process
 * lives on. */
static void test_an_execd_image_is_built_while_the_process_lives(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(RC_EXEC, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built));
    c->building = true;
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, 0);
    assert_true(built.execd);
    assert_ptr_equal(strstr(built.how, "exec'd into /usr/bin/next, 3 entries"), built.how);
    assert_int_equal(fx_logged(&f, "its life before the exec rebuilt from its chunks"), 1);
    fx_kill_reap(pid);
    teardown(&f);
}

/* A short-lived child's exit profile, left in its region with the description of its end. */
static void test_an_exit_profile_left_in_the_region(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(RC_ENDED | RC_EXIT, 0, &fd);
    reap(pid);
    c = child_of(&f, pid, fd);
    assert_true(daemon__region_build(c, DAEMON_BUILD_EXIT, on_built));
    c->building = true;
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.kind, DAEMON_BUILD_EXIT);
    assert_int_equal(built.result, 0);
    assert_false(built.execd);
    assert_non_null(built.json);
    assert_int_equal(built.json[0], '{');
    assert_non_null(strstr(built.how, "3 entries from 1 chunks"));
    assert_int_equal(fx_logged(&f, "exit profile built from its chunk region"), 1);
    teardown(&f);
}

/* The same description found by a recovery: the process ended normally after it left the
 * daemon, and what is built is its exit profile. */
static void test_an_owner_that_ended_normally_gives_its_exit_profile(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(RC_ENDED | RC_EXIT, 0, &fd);
    reap(pid);
    c = child_of(&f, pid, fd);
    assert_true(daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built));
    c->building = true;
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, 0);
    assert_true(built.exited);
    assert_ptr_equal(strstr(built.how, "ended after it left the daemon, 3 entries"), built.how);
    teardown(&f);
}

/* Builds that cannot be made say why, and give no profile. */
static void test_builds_that_fail_say_why(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    /* Without the description of its end, a region holds no exit profile. */
    pid = spawn_region_child(RC_EXIT, 0, &fd);
    reap(pid);
    c = child_of(&f, pid, fd);
    assert_true(daemon__region_build(c, DAEMON_BUILD_EXIT, on_built));
    c->building = true;
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, -ENODATA);
    assert_null(built.json);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "left its exit profile in its chunk region, and it could not be "
                                  "built: no description of its end"),
                     1);

    /* A sealed memfd that is no region: nothing to read back. */
    built_reset();
    pid = fx_fork_idle();
    fx_kill_reap(pid);
    fd = memfd_create("zeros", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 64 * KIB), 0);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    c = child_of(&f, pid, fd);
    assert_true(daemon__region_build(c, DAEMON_BUILD_RECOVERY, on_built));
    c->building = true;
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, -EBADMSG);
    assert_null(built.json);
    assert_int_equal(fx_logged(&f, "ended without a profile, and its chunks could not be read "
                                   "back: its region is not a chunk region"),
                     1);
    teardown(&f);
}

/* ---- kept regions (linger) ------------------------------------------------------- */

static void test_a_region_is_kept_only_for_a_live_owner(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t dead;
    int fd;

    (void)state;
    setup(&f);
    c = fx_child(&f, getpid(), "no-region");
    assert_false(daemon__linger_begin(c, on_built)); /* nothing to keep */
    fx_child_free(&f, c);

    dead = spawn_region_child(RC_EXIT, 0, &fd);
    reap(dead);
    c = child_of(&f, dead, fd);
    assert_false(daemon__linger_begin(c, on_built)); /* gone already: built, not kept */
    assert_false(c->lingering);
    assert_int_equal(f.d->lingering, 0);
    fx_child_free(&f, c);
    teardown(&f);
}

static bool not_lingering(void *arg)
{
    return ((struct fx *)arg)->d->lingering == 0 && built.calls > 0;
}

/* A child away from the daemon, killed: the linger timer notices (no capture needed) and its
 * profile is rebuilt from the kept region. */
static void test_a_kept_region_is_built_when_its_owner_is_killed(void **state)
{
    struct fx f;
    struct conn *c;
    uint64_t start = 0;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(0, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    assert_true(c->lingering);
    assert_int_equal(c->kind, CONN_DEAD);
    assert_null(c->ipc);
    assert_false(c->in_pid_map); /* its next Hello is a new child */
    assert_null(daemon__child_by_pid(f.d, pid));
    assert_true(daemon__process_start(pid, &start));
    assert_true(c->start_ticks == start);
    assert_int_equal(f.d->lingering, 1);
    assert_int_equal(fx_logged(&f, "disconnected and lives on: its region is kept"), 1);
    f.d->stats.children--; /* what server.c's close did */

    /* Alive: kept. */
    daemon__linger_check(f.d);
    assert_int_equal(f.d->lingering, 1);
    assert_true(in_table(f.d, c));

    (void)kill(pid, SIGKILL);
    assert_true(fx_wait_zombie(pid)); /* gone, not yet reaped */
    assert_true(fx_run_until(&f, not_lingering, &f));
    assert_int_equal(built.result, 0);
    assert_int_equal(built.pid, pid);
    assert_non_null(strstr(built.how, "3 entries"));
    assert_int_equal(fx_logged(&f, "ended while disconnected: its profile is rebuilt"), 1);
    assert_false(in_table(f.d, c)); /* freed by the callback */
    reap(pid);
    teardown(&f);
}

/* A capture looks first (d->before_capture): one killed just before it is built at once. */
static void test_a_capture_looks_at_kept_regions_first(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    assert_non_null(f.d->before_capture);
    pid = spawn_region_child(0, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    f.d->stats.children--;
    (void)kill(pid, SIGKILL);
    assert_true(fx_wait_zombie(pid));
    f.d->before_capture(f.d);
    assert_true(c->building);
    assert_false(c->lingering);
    assert_int_equal(f.d->lingering, 0);
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, 0);
    reap(pid);
    teardown(&f);
}

/* An owner that wrote its own profile as it ended leaves nothing to rebuild: it is named as a
 * departure, and its kept connection freed. */
static void test_an_owner_that_wrote_its_profile_is_not_rebuilt(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(RC_WRITTEN, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    f.d->stats.children--;
    fx_kill_reap(pid);
    daemon__linger_check(f.d);
    assert_int_equal(f.d->lingering, 0);
    assert_false(in_table(f.d, c));
    assert_int_equal(built.calls, 0);
    assert_int_equal(f.d->departure_count, 1);
    assert_int_equal(f.d->departures[0].pid, pid);
    assert_string_equal(f.d->departures[0].recovered, "");
    assert_int_equal(fx_logged(&f, "ended while disconnected, and wrote its profile itself"), 1);
    teardown(&f);
}

/* Back with a new connection: the kept region is let go; if the process exec'd meanwhile, the
 * earlier image's life is built first. */
static void test_a_reconnect_lets_the_kept_region_go(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(0, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    f.d->stats.children--;
    daemon__linger_end(f.d, pid + 100000); /* another pid: nothing */
    assert_int_equal(f.d->lingering, 1);
    daemon__linger_end(f.d, pid);
    assert_int_equal(f.d->lingering, 0);
    assert_false(in_table(f.d, c));
    assert_int_equal(built.calls, 0);
    assert_int_equal(f.d->departure_count, 0);
    fx_kill_reap(pid);

    pid = spawn_region_child(RC_EXEC, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    f.d->stats.children--;
    daemon__linger_end(f.d, pid);
    assert_int_equal(f.d->lingering, 0);
    assert_true(c->building);
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, 0);
    assert_true(built.execd);
    assert_false(in_table(f.d, c));
    fx_kill_reap(pid);
    teardown(&f);
}

/* The children a kept region's owner forked without the profiler (at its process limit) are
 * named, each once; more than the region lists are counted in one warning. */
static void test_children_forked_without_the_profiler_are_named_once(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(RC_UNPROFILED, BUF_REGION_UNPROFILED_MAX + 6, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    f.d->stats.children--;
    daemon__linger_check(f.d);
    assert_int_equal(f.d->lingering, 1);
    assert_int_equal(f.d->departure_count, BUF_REGION_UNPROFILED_MAX);
    for (size_t i = 0; i < BUF_REGION_UNPROFILED_MAX; i++) {
        assert_int_equal(f.d->departures[i].pid, 70000 + (int32_t)i);
        assert_string_equal(f.d->departures[i].name, "worker");
        assert_non_null(f.d->departures[i].never);
        assert_non_null(strstr(f.d->departures[i].never, "(ulimit -u)"));
    }
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "forked 6 more children without the profiler than its region "
                                  "lists (64): they are not named"),
                     1);
    daemon__linger_check(f.d); /* each once */
    assert_int_equal(f.d->departure_count, BUF_REGION_UNPROFILED_MAX);
    assert_int_equal(fx_logged(&f, "more children without the profiler"), 1);
    fx_kill_reap(pid);
    teardown(&f);
}

/* A pid the owner is still writing (its count is ahead of it) is taken at the next look. */
static void test_a_child_being_listed_is_named_at_the_next_look(void **state)
{
    uint32_t count = 2;
    int32_t second = 70001;
    struct fx f;
    struct conn *c;
    pid_t pid;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(RC_UNPROFILED, 1, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    f.d->stats.children--;
    /* The owner counted its second child and has not yet written its pid. */
    assert_int_equal(
            pwrite(fd, &count, sizeof(count), offsetof(struct buf_region_header, unprofiled_count)),
            sizeof(count));
    daemon__linger_check(f.d);
    assert_int_equal(f.d->departure_count, 1);
    assert_int_equal(f.d->departures[0].pid, 70000);
    assert_int_equal(pwrite(fd, &second, sizeof(second),
                            offsetof(struct buf_region_header, unprofiled_pids) + sizeof(second)),
                     sizeof(second));
    daemon__linger_check(f.d);
    assert_int_equal(f.d->departure_count, 2);
    assert_int_equal(f.d->departures[1].pid, 70001);
    daemon__linger_check(f.d);
    assert_int_equal(f.d->departure_count, 2);
    fx_kill_reap(pid);
    teardown(&f);
}

/* The daemon's close lets every kept region go. */
static void test_close_lets_every_kept_region_go(void **state)
{
    struct fx f;
    struct conn *a, *b;
    pid_t pa, pb;
    int fa, fb;

    (void)state;
    setup(&f);
    pa = spawn_region_child(0, 0, &fa);
    pb = spawn_region_child(0, 0, &fb);
    a = child_of(&f, pa, fa);
    b = child_of(&f, pb, fb);
    assert_true(daemon__linger_begin(a, on_built));
    assert_true(daemon__linger_begin(b, on_built));
    f.d->stats.children -= 2;
    assert_int_equal(f.d->lingering, 2);
    daemon__linger_close(f.d);
    assert_int_equal(f.d->lingering, 0);
    assert_false(in_table(f.d, a));
    assert_false(in_table(f.d, b));
    assert_int_equal(built.calls, 0);
    fx_kill_reap(pa);
    fx_kill_reap(pb);
    teardown(&f);
}

/* The owner of a kept region is killed and its pid taken by another process before the
 * daemon looks: linger_check knows it by its start time and sees it gone, and the build it
 * asks for (daemon__region_build) must too, not take the new process for the owner living on
 * (it did: the killed child's profile was lost, a departure without recovery). */
static void test_a_kept_region_whose_pid_was_reused_is_still_built(void **state)
{
    struct fx f;
    struct conn *c;
    pid_t pid, other;
    int fd;

    (void)state;
    setup(&f);
    pid = spawn_region_child(0, 0, &fd);
    c = child_of(&f, pid, fd);
    assert_true(daemon__linger_begin(c, on_built));
    f.d->stats.children--;
    /* Start times are in clock ticks (10 ms): the new process starts in a later one. */
    assert_true(fx_wait_ticks_past(c->start_ticks + 1));
    fx_kill_reap(pid);
    other = fx_fork_with_pid(pid);
    if (!other) {
        teardown(&f);
        fx_not_run("cannot choose the next pid here (ns_last_pid needs root)");
        return;
    }
    assert_true(daemon__process_gone(pid, c->start_ticks)); /* another process's now */
    daemon__linger_check(f.d);
    assert_int_equal(f.d->lingering, 0);
    /* What goes wrong today: "left but lives on ... nothing to recover", and a departure. */
    assert_int_equal(fx_logged(&f, "nothing to recover"), 0);
    assert_int_equal(f.d->departure_count, 0);
    assert_true(fx_run_until(&f, built_once, NULL));
    assert_int_equal(built.result, 0);
    assert_int_equal(built.pid, pid);
    fx_kill_reap(other);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_nothing_to_build_without_a_region),
            cmocka_unit_test(test_a_killed_child_is_recovered_from_its_region),
            cmocka_unit_test(test_a_crash_is_named_by_its_signal),
            cmocka_unit_test(test_an_execd_image_is_built_while_the_process_lives),
            cmocka_unit_test(test_an_exit_profile_left_in_the_region),
            cmocka_unit_test(test_an_owner_that_ended_normally_gives_its_exit_profile),
            cmocka_unit_test(test_builds_that_fail_say_why),
            cmocka_unit_test(test_a_region_is_kept_only_for_a_live_owner),
            cmocka_unit_test(test_a_kept_region_is_built_when_its_owner_is_killed),
            cmocka_unit_test(test_a_capture_looks_at_kept_regions_first),
            cmocka_unit_test(test_an_owner_that_wrote_its_profile_is_not_rebuilt),
            cmocka_unit_test(test_a_reconnect_lets_the_kept_region_go),
            cmocka_unit_test(test_children_forked_without_the_profiler_are_named_once),
            cmocka_unit_test(test_a_child_being_listed_is_named_at_the_next_look),
            cmocka_unit_test(test_close_lets_every_kept_region_go),
            cmocka_unit_test(test_a_kept_region_whose_pid_was_reused_is_still_built),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
