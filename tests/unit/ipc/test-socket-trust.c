/* Unit tests for ipc/socket-trust.c: which socket directories and sockets a side accepts.
 * Another owner is made real where the test runs as root (chown to nobody); otherwise the
 * check is asked for a uid that is not ours, which is the same question. The listener and
 * the connecting side refusing a directory are here too; a real other user's listener is in
 * tests/integration/test-security.py. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#define NOBODY 65534

struct fixture {
    char *dir; /* a fresh 0700 directory of ours */
    char sock[PATH_MAX], resolved[PATH_MAX], reason[IPC_TRUST_REASON_MAX];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    f->dir = test_tmpdir("trust");
    assert_non_null(f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    test_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* The uid to check as, and the directory made another's: as root the directory is given to
 * nobody; otherwise we ask on behalf of a uid that is not ours (nor root). */
static uid_t as_other_owner(const char *path)
{
    if (geteuid() == 0) {
        assert_int_equal(chown(path, NOBODY, NOBODY), 0);
        return 0;
    }
    return geteuid() + 1;
}

static int check(struct fixture *f, const char *sock, uid_t uid, bool create)
{
    return ipc_socket_dir_check(sock, uid, create, f->resolved, sizeof(f->resolved), f->reason,
                                sizeof(f->reason));
}

static void mkdir_mode(const char *path, mode_t mode)
{
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(chmod(path, mode), 0); /* past the umask */
}

static void test_a_private_directory_is_trusted(void **state)
{
    struct fixture *f = *state;
    char real[PATH_MAX];

    (void)snprintf(f->sock, sizeof(f->sock), "%s/fleetprof.sock", f->dir);
    assert_int_equal(check(f, f->sock, geteuid(), false), 0);
    assert_non_null(realpath(f->dir, real));
    assert_string_equal(f->resolved, strcat(real, "/fleetprof.sock"));
    assert_string_equal(f->reason, "");
    /* Read and traversed by others is fine (0755): only writing lets them replace it. */
    assert_int_equal(chmod(f->dir, 0755), 0);
    assert_int_equal(check(f, f->sock, geteuid(), false), 0);
}

static void test_a_directory_others_can_write_is_refused(void **state)
{
    struct fixture *f = *state;
    static const struct {
        mode_t mode;
        const char *who;
    } cases[] = {{0770, "its group"},
                 {0707, "everyone"},
                 {0777, "its group and everyone"},
                 {01777, "its group and everyone"}};
    char dir[300], want[64];

    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        (void)snprintf(dir, sizeof(dir), "%s/d%zu", f->dir, i);
        mkdir_mode(dir, cases[i].mode);
        (void)snprintf(f->sock, sizeof(f->sock), "%s/fleetprof.sock", dir);
        assert_int_equal(check(f, f->sock, geteuid(), false), -EPERM);
        print_message("# %s\n", f->reason);
        assert_non_null(strstr(f->reason, dir));
        (void)snprintf(want, sizeof(want), "writable by %s (mode %04o)", cases[i].who,
                       (unsigned)cases[i].mode);
        assert_non_null(strstr(f->reason, want));
    }
}

static void test_another_users_directory_is_refused(void **state)
{
    struct fixture *f = *state;
    char dir[300];
    uid_t uid;

    (void)snprintf(dir, sizeof(dir), "%s/theirs", f->dir);
    mkdir_mode(dir, 0700);
    uid = as_other_owner(dir);
    (void)snprintf(f->sock, sizeof(f->sock), "%s/fleetprof.sock", dir);
    assert_int_equal(check(f, f->sock, uid, false), -EPERM);
    print_message("# %s\n", f->reason);
    assert_non_null(strstr(f->reason, "the socket directory"));
    assert_non_null(strstr(f->reason, "not to you"));
    /* Nor made ours by asking to create it: existing directories are judged, not fixed. */
    assert_int_equal(check(f, f->sock, uid, true), -EPERM);
}

static void test_what_is_above_must_be_safe_too(void **state)
{
    struct fixture *f = *state;
    char open_dir[300], sticky[300], below[400];

    /* World-writable and not sticky: anyone could rename ours away and put theirs there. */
    (void)snprintf(open_dir, sizeof(open_dir), "%s/open", f->dir);
    mkdir_mode(open_dir, 0777);
    (void)snprintf(below, sizeof(below), "%s/ours", open_dir);
    mkdir_mode(below, 0700);
    (void)snprintf(f->sock, sizeof(f->sock), "%s/fleetprof.sock", below);
    assert_int_equal(check(f, f->sock, geteuid(), false), -EPERM);
    print_message("# %s\n", f->reason);
    assert_non_null(strstr(f->reason, "above the socket directory"));
    assert_non_null(strstr(f->reason, "not sticky"));
    assert_non_null(strstr(f->reason, open_dir));

    /* Sticky, like /tmp: only an entry's owner may rename it. */
    (void)snprintf(sticky, sizeof(sticky), "%s/sticky", f->dir);
    mkdir_mode(sticky, 01777);
    (void)snprintf(below, sizeof(below), "%s/ours", sticky);
    mkdir_mode(below, 0700);
    (void)snprintf(f->sock, sizeof(f->sock), "%s/fleetprof.sock", below);
    assert_int_equal(check(f, f->sock, geteuid(), false), 0);

    /* An ancestor of someone else's: they could replace what is below it. */
    if (geteuid() == 0) {
        assert_int_equal(chown(f->dir, NOBODY, NOBODY), 0);
        assert_int_equal(check(f, f->sock, 0, false), -EPERM);
        print_message("# %s\n", f->reason);
        assert_non_null(strstr(f->reason, "above the socket directory, belongs to uid 65534"));
        assert_int_equal(chown(f->dir, 0, 0), 0);
    }
}

static void test_links_are_resolved_and_the_target_judged(void **state)
{
    struct fixture *f = *state;
    char good[300], bad[300], link[300], real[PATH_MAX];

    (void)snprintf(good, sizeof(good), "%s/good", f->dir);
    mkdir_mode(good, 0700);
    (void)snprintf(bad, sizeof(bad), "%s/bad", f->dir);
    mkdir_mode(bad, 0777);
    (void)snprintf(link, sizeof(link), "%s/link", f->dir);

    assert_int_equal(symlink(good, link), 0);
    (void)snprintf(f->sock, sizeof(f->sock), "%s/s", link);
    assert_int_equal(check(f, f->sock, geteuid(), false), 0);
    assert_non_null(realpath(good, real));
    assert_string_equal(f->resolved, strcat(real, "/s")); /* the path nobody else can change */

    assert_int_equal(unlink(link), 0);
    assert_int_equal(symlink(bad, link), 0);
    assert_int_equal(check(f, f->sock, geteuid(), false), -EPERM);
    assert_non_null(strstr(f->reason, "/bad is writable by"));
}

static void test_missing_directories_are_made_private(void **state)
{
    struct fixture *f = *state;
    struct stat st;
    char dir[300];

    (void)snprintf(f->sock, sizeof(f->sock), "%s/a/b/fleetprof.sock", f->dir);
    assert_int_equal(check(f, f->sock, geteuid(), false), -ENOENT);
    assert_non_null(strstr(f->reason, "does not exist"));
    assert_int_equal(check(f, f->sock, geteuid(), true), 0);
    (void)snprintf(dir, sizeof(dir), "%s/a/b", f->dir);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(st.st_uid, geteuid());
}

static void test_paths_that_name_no_socket(void **state)
{
    struct fixture *f = *state;
    char longdir[200];
    int n;

    (void)snprintf(f->sock, sizeof(f->sock), "%s/", f->dir);
    assert_int_equal(check(f, f->sock, geteuid(), false), -EINVAL);
    assert_non_null(strstr(f->reason, "names a directory"));
    /* Resolved, the path must still fit in a socket address (108 bytes). */
    n = snprintf(longdir, sizeof(longdir), "%s/", f->dir);
    memset(longdir + n, 'x', sizeof(longdir) - (size_t)n - 1);
    longdir[sizeof(longdir) - 1] = '\0';
    assert_int_equal(mkdir(longdir, 0700), 0);
    (void)snprintf(f->sock, sizeof(f->sock), "%s/s", longdir);
    assert_int_equal(check(f, f->sock, geteuid(), false), -ENAMETOOLONG);
}

static void test_the_socket_itself(void **state)
{
    struct fixture *f = *state;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char file[300];
    uid_t uid;
    int fd;

    (void)snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/sock", f->dir);
    assert_int_equal(ipc_socket_file_check(addr.sun_path, geteuid(), f->reason, sizeof(f->reason)),
                     -ENOENT);
    (void)snprintf(file, sizeof(file), "%s/plain", f->dir);
    fd = open(file, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    assert_int_equal(close(fd), 0);
    assert_int_equal(ipc_socket_file_check(file, geteuid(), f->reason, sizeof(f->reason)),
                     -ECONNREFUSED);
    assert_non_null(strstr(f->reason, "is not a socket"));

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(ipc_socket_file_check(addr.sun_path, geteuid(), f->reason, sizeof(f->reason)),
                     0);
    uid = as_other_owner(addr.sun_path);
    assert_int_equal(ipc_socket_file_check(addr.sun_path, uid, f->reason, sizeof(f->reason)),
                     -EPERM);
    print_message("# %s\n", f->reason);
    assert_non_null(strstr(f->reason, "the socket"));
    assert_non_null(strstr(f->reason, "not to you"));
    assert_int_equal(close(fd), 0);
}

static void on_message(struct ipc_conn *c, const Fleetprof__Envelope *env, void *userdata)
{
    (void)c;
    (void)env;
    (void)userdata;
}

static int on_accept(struct ipc_listener *l, struct ipc_conn *c, const struct ipc_peer *peer,
                     void *userdata)
{
    (void)l;
    (void)c;
    (void)peer;
    (void)userdata;
    return -EPERM;
}

/* Both sides refuse a directory others can write: the listener binds nothing there, a
 * client connects to nothing there, and says why. */
static void test_listener_and_client_refuse_a_loose_directory(void **state)
{
    struct fixture *f = *state;
    static const struct ipc_conn_callbacks cbs = {.on_message = on_message};
    static const struct ipc_listener_callbacks lcbs = {.on_accept = on_accept};
    struct ipc_listener *l = NULL;
    struct ipc_conn *conn = NULL;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char dir[300];
    uv_loop_t loop;
    int fd;

    assert_int_equal(uv_loop_init(&loop), 0);
    (void)snprintf(dir, sizeof(dir), "%s/loose", f->dir);
    mkdir_mode(dir, 0777);
    (void)snprintf(f->sock, sizeof(f->sock), "%s/fleetprof.sock", dir);
    assert_int_equal(ipc_listener_open(&loop, f->sock, NULL, &lcbs, NULL, &l), -EPERM);
    assert_null(l);
    assert_int_equal(access(f->sock, F_OK), -1);

    /* A listener someone put there: never connected to. */
    memcpy(addr.sun_path, f->sock, strlen(f->sock) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(
            ipc_conn_connect(&loop, f->sock, NULL, &cbs, NULL, f->reason, sizeof(f->reason), &conn),
            -EPERM);
    assert_null(conn);
    assert_non_null(strstr(f->reason, "writable by its group and everyone"));
    assert_int_equal(accept(fd, NULL, NULL), -1); /* no connection was made */
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(close(fd), 0);
    (void)uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- ipc_socket_send_frame: one frame on a socket, with a descriptor or not ------- */

/* Reads one whole message off sock (and a descriptor that came with it, else -1). */
static ssize_t receive(int sock, uint8_t *buf, size_t size, int *ret_fd)
{
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {buf, size};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *c;
    ssize_t n;

    memset(&control, 0, sizeof(control));
    msg.msg_control = control.space;
    msg.msg_controllen = sizeof(control.space);
    n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    *ret_fd = -1;
    c = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(ret_fd, CMSG_DATA(c), sizeof(int));
    return n;
}

/* Every sample goes as exactly its encoded frame; a descriptor rides on it when given (the
 * same file on the other side); a full socket takes nothing (-EAGAIN), a closed one is
 * -EPIPE and never a SIGPIPE; a message without a case is refused before anything is sent. */
static void test_send_frame(void **state)
{
    size_t n;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);
    Fleetprof__Envelope empty = FLEETPROF__ENVELOPE__INIT;
    uint8_t *want, *got;
    int sv[2], pipefd[2], fd;
    struct stat a, b;
    size_t sent = 0;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
    want = malloc(IPC_FRAME_MAX_BYTES_DEFAULT);
    got = malloc(IPC_FRAME_MAX_BYTES_DEFAULT);
    assert_non_null(want);
    assert_non_null(got);
    for (size_t i = 0; i < n; i++) {
        size_t size = ipc_frame_size(samples[i]);
        ssize_t r;

        if (size > 64 << 10)
            continue; /* more than one socket buffer: not a first frame's size */
        assert_int_equal(ipc_frame_encode(samples[i], want, size), (ssize_t)size);
        r = ipc_socket_send_frame(sv[0], samples[i], i % 2 ? pipefd[0] : -1);
        assert_int_equal(r, (ssize_t)size);
        r = receive(sv[1], got, IPC_FRAME_MAX_BYTES_DEFAULT, &fd);
        assert_int_equal(r, (ssize_t)size);
        assert_memory_equal(got, want, size);
        if (i % 2) {
            assert_true(fd >= 0);
            assert_int_equal(fstat(fd, &a), 0);
            assert_int_equal(fstat(pipefd[0], &b), 0);
            assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
            assert_int_equal(close(fd), 0);
        } else {
            assert_int_equal(fd, -1);
        }
        sent++;
    }
    assert_true(sent > 4);
    assert_int_equal(ipc_socket_send_frame(sv[0], &empty, -1), -EINVAL);

    /* Full: nothing of the frame goes. */
    {
        int size = 4096;
        ssize_t r;

        assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)), 0);
        do
            r = ipc_socket_send_frame(sv[0], samples[0], -1);
        while (r > 0);
        assert_int_equal(r, -EAGAIN);
    }
    assert_int_equal(close(sv[1]), 0);
    /* Alive afterwards: no SIGPIPE. */
    assert_int_equal(ipc_socket_send_frame(sv[0], samples[0], -1), -EPIPE);
    (void)close(sv[0]);
    (void)close(pipefd[0]);
    (void)close(pipefd[1]);
    free(want);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_send_frame),
            cmocka_unit_test_setup_teardown(test_a_private_directory_is_trusted, setup, teardown),
            cmocka_unit_test_setup_teardown(test_a_directory_others_can_write_is_refused, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_another_users_directory_is_refused, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_what_is_above_must_be_safe_too, setup, teardown),
            cmocka_unit_test_setup_teardown(test_links_are_resolved_and_the_target_judged, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_missing_directories_are_made_private, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_paths_that_name_no_socket, setup, teardown),
            cmocka_unit_test_setup_teardown(test_the_socket_itself, setup, teardown),
            cmocka_unit_test_setup_teardown(test_listener_and_client_refuse_a_loose_directory,
                                            setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
