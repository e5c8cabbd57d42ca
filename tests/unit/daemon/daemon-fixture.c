/* tests/unit/daemon/daemon-fixture.c - see daemon-fixture.h. */
#include "daemon-fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buffer/region.h"
#include "testlib.h"

static void on_log(void *userdata, enum daemon_log_level level, const char *message)
{
    struct fx *f = userdata;

    if (f->line_count == f->line_cap) {
        size_t cap = f->line_cap ? 2 * f->line_cap : 64;
        struct fx_line *lines = realloc(f->lines, cap * sizeof(*lines));

        if (!lines)
            return;
        f->lines = lines;
        f->line_cap = cap;
    }
    f->lines[f->line_count].level = level;
    (void)snprintf(f->lines[f->line_count].text, FX_LOG_LINE_MAX, "%s", message);
    f->line_count++;
}

static void on_tick(uv_timer_t *t)
{
    (void)t; /* only wakes the loop */
}

void fx_setup(struct fx *f, const struct daemon_options *o)
{
    struct daemon_options opt = {0};

    (void)signal(SIGPIPE, SIG_IGN); /* the daemon may write to a closed client */
    *f = (struct fx){0};
    if (o)
        opt = *o;
    f->dir = test_tmpdir("daemon-unit");
    assert_non_null(f->dir);
    (void)snprintf(f->path, sizeof(f->path), "%s/fleetprof.sock", f->dir);
    opt.socket_path = f->path;
    opt.allow_any_uid = true;
    if (!opt.pace_ns)
        opt.pace_ns = DAEMON_PACE_OFF;
    opt.log = on_log;
    opt.log_userdata = f;
    opt.log_level = DAEMON_LOG_DEBUG; /* tests read the lines */
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(uv_timer_init(&f->loop, &f->tick), 0);
    assert_int_equal(daemon_new(&f->loop, &opt, &f->d), 0);
}

static void on_daemon_closed(void *userdata)
{
    *(bool *)userdata = true;
}

static bool is_true(void *arg)
{
    return *(bool *)arg;
}

void fx_teardown(struct fx *f)
{
    struct conn *c, *next;
    bool closed = false;

    /* Connections without a socket: the test's own (freed as server.c would), except the
     * ones a module keeps (a kept region, a build), which the daemon's close lets go. */
    for (c = f->d->conns; c; c = next) {
        next = c->next;
        if (!c->ipc && !c->lingering && !c->building)
            fx_child_free(f, c);
    }
    daemon_close(f->d, on_daemon_closed, &closed);
    assert_true(fx_run_until(f, is_true, &closed));
    f->d = NULL;
    uv_close((uv_handle_t *)&f->tick, NULL);
    fx_run_nowait(f);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    test_rmtree(f->dir);
    free(f->dir);
    free(f->lines);
    *f = (struct fx){0};
}

struct conn *fx_child(struct fx *f, int32_t pid, const char *name)
{
    struct conn *c = calloc(1, sizeof(*c));

    assert_non_null(c);
    c->d = f->d;
    c->kind = CONN_CHILD;
    c->pid = pid;
    c->peer.pid = pid;
    c->region_fd = -1;
    c->connect_ns = daemon__now_ns();
    (void)snprintf(c->name, sizeof(c->name), "%s", name);
    daemon__conn_link(f->d, c);
    assert_int_equal(daemon__pid_map_add(f->d, c), 0);
    f->d->stats.children++;
    f->d->stats.children_total++;
    return c;
}

void fx_child_free(struct fx *f, struct conn *c)
{
    if (c->kind == CONN_CHILD) {
        ctl_remove(f->d->ctl, c->pid, daemon__now_ns());
        f->d->stats.children--;
    }
    daemon__region_updates_leave(c);
    daemon__region_release(c);
    daemon__conn_unlink(f->d, c);
    free(c);
}

/* ---- a real client ---------------------------------------------------------------- */

static void on_client_message(struct ipc_conn *ipc, const Fleetprof__Envelope *env, void *userdata)
{
    struct fx_client *cl = userdata;
    size_t len = fleetprof__envelope__get_packed_size(env);
    uint8_t *buf = malloc(len ? len : 1);

    (void)ipc;
    if (env->msg_case == FLEETPROF__ENVELOPE__MSG_WELCOME)
        cl->welcomed = true;
    if (!buf || cl->got_count == FX_CLIENT_KEPT) {
        free(buf);
        return;
    }
    (void)fleetprof__envelope__pack(env, buf);
    cl->got[cl->got_count] = fleetprof__envelope__unpack(NULL, len, buf);
    if (cl->got[cl->got_count])
        cl->got_count++;
    free(buf);
}

static void on_client_close(struct ipc_conn *ipc, int error, const char *reason, void *userdata)
{
    struct fx_client *cl = userdata;

    (void)ipc;
    (void)error;
    (void)reason;
    cl->closed = true;
    cl->ipc = NULL;
}

static bool client_ready(void *arg)
{
    struct fx_client *cl = arg;

    return cl->welcomed || cl->closed;
}

struct conn *fx_connect(struct fx *f, struct fx_client *cl, const char *name)
{
    static const struct ipc_conn_callbacks cbs = {.on_message = on_client_message,
                                                  .on_close = on_client_close};
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;

    *cl = (struct fx_client){0};
    if (ipc_conn_connect(&f->loop, f->path, NULL, &cbs, cl, NULL, 0, &cl->ipc) < 0)
        return NULL;
    hello.id = 1;
    hello.version = FLEETPROF_PROTOCOL_VERSION;
    hello.pid = getpid();
    hello.ppid = getppid();
    hello.name = (char *)name;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = &hello;
    if (ipc_conn_send(cl->ipc, &env) < 0)
        return NULL;
    if (!fx_run_until(f, client_ready, cl) || !cl->welcomed)
        return NULL;
    return daemon__child_by_pid(f->d, getpid());
}

int fx_send_fd(int sock, int fd)
{
    char byte = 'c', cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *cm;

    memset(cbuf, 0, sizeof(cbuf));
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof(cbuf);
    cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

int fx_recv_fd(int sock)
{
    char byte, cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *cm;
    int fd = -1;
    ssize_t n;

    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof(cbuf);
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return -1;
    cm = CMSG_FIRSTHDR(&msg);
    if (cm && cm->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    return fd;
}

/* In the forked helper: connects to path and hands the socket to the parent through sock. */
static void helper_connect(int sock, const char *path, pid_t parent)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    int s;

    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent || len >= sizeof(sa.sun_path))
        _exit(1);
    /* The parent's descriptors (the daemon's sockets, other clients') must end when the parent
     * closes them: none stays open here. */
    if (sock > 3)
        (void)close_range(3, (unsigned)sock - 1, 0);
    (void)close_range((unsigned)sock + 1, ~0u, 0);
    memcpy(sa.sun_path, path, len + 1);
    s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || fx_send_fd(sock, s) < 0)
        _exit(1);
    /* Its copy goes first: the parent's close must end the connection. The parent reads on
     * until sock ends, so it goes on only then. */
    (void)close(s);
    (void)close(sock);
    for (;;)
        (void)pause();
}

struct conn *fx_connect_forked(struct fx *f, struct fx_client *cl, const char *name, pid_t *ret_pid)
{
    static const struct ipc_conn_callbacks cbs = {.on_message = on_client_message,
                                                  .on_close = on_client_close};
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;
    pid_t parent = getpid(), pid;
    int sv[2], fd;

    *cl = (struct fx_client){0};
    *ret_pid = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return NULL;
    pid = fork();
    if (pid == 0)
        helper_connect(sv[1], f->path, parent);
    (void)close(sv[1]);
    fd = pid > 0 ? fx_recv_fd(sv[0]) : -1;
    if (fd >= 0) { /* until the helper let its copy of the socket go */
        char byte;

        while (read(sv[0], &byte, 1) < 0 && errno == EINTR) {
        }
    }
    (void)close(sv[0]);
    if (pid < 0)
        return NULL;
    *ret_pid = pid;
    if (fd < 0 ||
        ipc_conn_adopt(&f->loop, fd, f->path, geteuid(), NULL, &cbs, cl, NULL, 0, &cl->ipc) < 0)
        return NULL;
    hello.id = 1;
    hello.version = FLEETPROF_PROTOCOL_VERSION;
    hello.pid = pid;
    hello.ppid = parent;
    hello.name = (char *)name;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = &hello;
    if (ipc_conn_send(cl->ipc, &env) < 0)
        return NULL;
    if (!fx_run_until(f, client_ready, cl) || !cl->welcomed)
        return NULL;
    return daemon__child_by_pid(f->d, pid);
}

int fx_client_open(struct fx *f, struct fx_client *cl)
{
    static const struct ipc_conn_callbacks cbs = {.on_message = on_client_message,
                                                  .on_close = on_client_close};

    *cl = (struct fx_client){0};
    return ipc_conn_connect(&f->loop, f->path, NULL, &cbs, cl, NULL, 0, &cl->ipc);
}

static bool client_closed(void *arg)
{
    return ((struct fx_client *)arg)->closed;
}

void fx_client_close(struct fx *f, struct fx_client *cl)
{
    if (cl->ipc)
        ipc_conn_close(cl->ipc);
    assert_true(fx_run_until(f, client_closed, cl));
    fx_run_nowait(f); /* the daemon's end reads the close */
    for (size_t i = 0; i < cl->got_count; i++)
        fleetprof__envelope__free_unpacked(cl->got[i], NULL);
    cl->got_count = 0;
}

const Fleetprof__Envelope *fx_client_got(const struct fx_client *cl, int msg_case, size_t n)
{
    for (size_t i = 0; i < cl->got_count; i++)
        if ((int)cl->got[i]->msg_case == msg_case && n-- == 0)
            return cl->got[i];
    return NULL;
}

size_t fx_client_count(const struct fx_client *cl, int msg_case)
{
    size_t n = 0;

    for (size_t i = 0; i < cl->got_count; i++)
        n += (int)cl->got[i]->msg_case == msg_case;
    return n;
}

/* ---- the loop -------------------------------------------------------------------- */

bool fx_run_until(struct fx *f, bool (*cond)(void *arg), void *arg)
{
    uint64_t deadline;

    if (cond(arg))
        return true;
    uv_update_time(&f->loop);
    deadline = uv_now(&f->loop) + FX_WAIT_MS;
    (void)uv_timer_start(&f->tick, on_tick, 5, 5);
    while (!cond(arg) && uv_now(&f->loop) < deadline)
        (void)uv_run(&f->loop, UV_RUN_ONCE);
    (void)uv_timer_stop(&f->tick);
    return cond(arg);
}

void fx_run_nowait(struct fx *f)
{
    for (int i = 0; i < 20; i++)
        (void)uv_run(&f->loop, UV_RUN_NOWAIT);
}

/* ---- the log --------------------------------------------------------------------- */

size_t fx_logged(const struct fx *f, const char *needle)
{
    size_t n = 0;

    for (size_t i = 0; i < f->line_count; i++)
        n += strstr(f->lines[i].text, needle) != NULL;
    return n;
}

size_t fx_logged_at(const struct fx *f, enum daemon_log_level level, const char *needle)
{
    size_t n = 0;

    for (size_t i = 0; i < f->line_count; i++)
        n += f->lines[i].level == level && strstr(f->lines[i].text, needle) != NULL;
    return n;
}

void fx_log_clear(struct fx *f)
{
    f->line_count = 0;
}

void fx_not_run(const char *why)
{
    print_message("# not run: %s\n", why);
}

void fx_log_dump(const struct fx *f)
{
    for (size_t i = 0; i < f->line_count; i++)
        printf("# log %d: %s\n", (int)f->lines[i].level, f->lines[i].text);
}

/* ---- processes ------------------------------------------------------------------- */

pid_t fx_fork_idle(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        for (;;)
            (void)pause();
    }
    return pid;
}

void fx_kill_reap(pid_t pid)
{
    int status;

    (void)kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
}

bool fx_wait_zombie(pid_t pid)
{
    siginfo_t info = {0};

    /* Blocks until pid has exited (a zombie), leaving it unreaped. */
    while (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) < 0)
        if (errno != EINTR)
            return false;
    return info.si_pid == pid;
}

bool fx_wait_ticks_past(uint64_t ticks)
{
    uint64_t hz = (uint64_t)sysconf(_SC_CLK_TCK);

    for (int i = 0; i < 10000; i++) {
        struct timespec ts, ms = {0, 1000000};

        (void)clock_gettime(CLOCK_BOOTTIME, &ts);
        if ((uint64_t)ts.tv_sec * hz + (uint64_t)ts.tv_nsec / (1000000000u / hz) > ticks)
            return true;
        (void)nanosleep(&ms, NULL);
    }
    return false;
}

pid_t fx_fork_with_pid(pid_t want)
{
    for (int attempt = 0; attempt < 50; attempt++) {
        FILE *ns = fopen("/proc/sys/kernel/ns_last_pid", "w");
        pid_t pid;

        if (!ns)
            return 0;
        if (fprintf(ns, "%d", (int)want - 1) < 0) {
            (void)fclose(ns);
            return 0;
        }
        if (fclose(ns) != 0)
            return 0;
        pid = fx_fork_idle();
        if (pid == want)
            return pid;
        fx_kill_reap(pid); /* another process took it first: again */
    }
    return 0;
}

struct buf_region *fx_region_new(uint32_t chunk_bytes)
{
    struct buf_region *r = NULL;

    assert_int_equal(buf_region_new(chunk_bytes, NULL, &r), 0);
    return r;
}

int fx_region_dup(struct buf_region *r)
{
    int fd = fcntl(buf_region_fd(r), F_DUPFD_CLOEXEC, 3);

    assert_true(fd >= 0);
    return fd;
}
