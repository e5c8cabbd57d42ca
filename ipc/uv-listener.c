/* ipc/uv-listener.c - the listening socket: path hygiene, accept, peer credential check.
 *
 * The socket's missing directories are created 0700, and the directory must then be ours or
 * root's and writable by nobody else (ipc/socket-trust.h); the socket is made 0600 (fchmod
 * before bind, which Linux honours for AF_UNIX, and chmod after, in case it does not), so
 * only the owner can connect; SO_PEERCRED then refuses any other uid but root for sockets reached
 * otherwise (a directory the owner loosened, a passed descriptor). A socket file left by a dead
 * daemon is recognised by connect(2) failing with ECONNREFUSED, and removed; a live one
 * makes open fail with -EADDRINUSE. The socket is bound and listening under a temporary
 * name in the same directory before it is renamed into place, so that a client that sees
 * the path can connect: bound at its path, it refused connections until listen(2) (a test
 * that started the daemon and connected once the file was there got ECONNREFUSED).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "ipc/ipc.h"
#include "ipc/socket-trust.h"
#include "ipc/uv-ipc-internal.h"
#include "ipc/uv-ipc.h"

#define BACKLOG_DEFAULT 128

/* Owned by its loop; freed only from the close callback of pipe. */
struct ipc_listener {
    uv_pipe_t pipe;
    struct ipc_listener_callbacks cbs; /* copied */
    void *userdata;                    /* borrowed */
    struct ipc_listener_options opts;  /* copied */
    uid_t uid;                         /* ours, compared with each peer's */
    char *path;                        /* owned */
    dev_t dev;                         /* identity of the socket file we bound */
    ino_t ino;
    bool closing;
};

int ipc_peer_check(const struct ipc_peer *peer, uid_t self_uid, char *reason, size_t reason_len)
{
    if (peer->uid == self_uid || peer->uid == 0) {
        if (reason && reason_len)
            reason[0] = '\0';
        return 0;
    }
    if (reason && reason_len)
        (void)snprintf(reason, reason_len,
                       "peer pid %ld runs as uid %lu, this side runs as uid %lu: refused",
                       (long)peer->pid, (unsigned long)peer->uid, (unsigned long)self_uid);
    return -EPERM;
}

/* Removes a stale socket at path; fails if a live listener owns it or it is not a socket. */
static int clear_stale_socket(const struct sockaddr_un *addr)
{
    struct stat st;
    int fd, r;

    if (lstat(addr->sun_path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    r = connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0 ? -errno : 0;
    (void)close(fd);
    /* EAGAIN: alive, its backlog is just full. */
    if (r == 0 || r == -EAGAIN)
        return -EADDRINUSE;
    if (r != -ECONNREFUSED)
        return r;
    if (unlink(addr->sun_path) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

static void on_listener_closed(uv_handle_t *handle)
{
    struct ipc_listener *l = container_of(handle, struct ipc_listener, pipe);

    free(l->path);
    free(l);
}

static void refuse(struct ipc_listener *l, struct ipc_conn *c, int error)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Refuse msg = FLEETPROF__REFUSE__INIT;

    if (l->cbs.on_refused)
        l->cbs.on_refused(l, &c->peer, error, c->reason_buf, l->userdata);
    /* Tell the peer why, then close once the frame is out. No callbacks of the user's run
     * for this connection. */
    msg.version = FLEETPROF_PROTOCOL_VERSION;
    msg.reason = c->reason_buf;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_REFUSE;
    env.refuse = &msg;
    if (ipc_conn_send(c, &env) < 0) {
        ipc_conn_close(c);
        return;
    }
    ipc_conn_shutdown(c);
}

static void ignore_message(struct ipc_conn *c, const Fleetprof__Envelope *env, void *userdata)
{
    (void)c;
    (void)env;
    (void)userdata;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct ipc_listener *l = container_of(server, struct ipc_listener, pipe);
    static const struct ipc_conn_callbacks none = {.on_message = ignore_message};
    struct ipc_conn *c;
    int r;

    if (l->closing)
        return;
    if (status < 0) {
        if (l->cbs.on_error)
            l->cbs.on_error(l, status, "accept failed", l->userdata);
        return;
    }
    r = ipc__conn_new(server->loop, &l->opts.conn, true, &c);
    if (r < 0) {
        /* libuv pauses the listener until the pending connection is accepted. */
        if (l->cbs.on_error)
            l->cbs.on_error(l, r, "cannot allocate a connection", l->userdata);
        return;
    }
    ipc_conn_set_callbacks(c, &none, NULL);
    r = uv_accept(server, (uv_stream_t *)&c->pipe);
    if (r < 0) {
        ipc__conn_discard(c);
        if (l->cbs.on_error)
            l->cbs.on_error(l, r, "accept failed", l->userdata);
        return;
    }
    r = ipc__conn_read_peer(c);
    if (r < 0) {
        ipc__conn_discard(c);
        if (l->cbs.on_error)
            l->cbs.on_error(l, r, "cannot read peer credentials", l->userdata);
        return;
    }
    if (!l->opts.allow_any_uid) {
        r = ipc_peer_check(&c->peer, l->uid, c->reason_buf, sizeof(c->reason_buf));
        if (r < 0) {
            refuse(l, c, r);
            return;
        }
    }
    r = l->cbs.on_accept(l, c, &c->peer, l->userdata);
    if (r < 0) {
        /* Refused by the caller: none of its callbacks run for this connection. */
        ipc_conn_set_callbacks(c, &none, NULL);
        ipc__conn_fail(c, r, "refused by the listener");
        return;
    }
    r = ipc__conn_start(c);
    if (r < 0)
        ipc__conn_fail(c, r, "cannot start reading");
}

/* A temporary name for the socket beside path, in bound: "DIR/.PID.fleetprof-bind", or the
 * shorter "DIR/.PIDHEX" when that does not fit in a socket address (a long directory: the
 * default socket's name is longer than this one, so it fits whenever path does). Bound
 * there, the socket appears at path only once it listens: a client that saw the file and
 * connected at once was refused (ECONNREFUSED) when the daemon bound path itself. The path
 * itself only when neither fits. */
static void bind_name(const char *path, char *bound, size_t size)
{
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) + 1 : 0;
    int n = snprintf(bound, size, "%.*s.%d.fleetprof-bind", dir_len, path, (int)getpid());

    if (n < 0 || (size_t)n >= size)
        n = snprintf(bound, size, "%.*s.%x", dir_len, path, (unsigned)getpid());
    if (n < 0 || (size_t)n >= size || strcmp(bound, path) == 0)
        (void)snprintf(bound, size, "%s", path);
}

int ipc_listener_open(uv_loop_t *loop, const char *path, const struct ipc_listener_options *opts,
                      const struct ipc_listener_callbacks *cbs, void *userdata,
                      struct ipc_listener **ret_listener)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char bound[sizeof(addr.sun_path)];
    struct ipc_listener *l;
    struct stat st;
    int fd, r;

    if (!loop || !path || !*path || !cbs || !cbs->on_accept || !ret_listener)
        return -EINVAL;
    if (strlen(path) >= sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    /* Missing directories made, then the directory checked: a listener in a directory
     * another user can write could be replaced by theirs (socket-trust.h). */
    r = ipc_socket_dir_check(path, geteuid(), true, addr.sun_path, sizeof(addr.sun_path), NULL, 0);
    if (r < 0)
        return r;

    l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->path = strdup(addr.sun_path);
    if (!l->path) {
        r = -ENOMEM;
        goto err_free;
    }
    if (opts)
        l->opts = *opts;
    if (l->opts.backlog <= 0)
        l->opts.backlog = BACKLOG_DEFAULT;
    l->cbs = *cbs;
    l->userdata = userdata;
    l->uid = geteuid();

    r = clear_stale_socket(&addr);
    if (r < 0)
        goto err_free_path;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        r = -errno;
        goto err_free_path;
    }
    /* Linux gives the socket file the mode of the socket inode (less the umask). */
    if (fchmod(fd, IPC_SOCKET_MODE) < 0) {
        r = -errno;
        goto err_close_fd;
    }
    bind_name(l->path, bound, sizeof(bound));
    memcpy(addr.sun_path, bound, strlen(bound) + 1);
    (void)unlink(bound); /* a temporary name left by a daemon of our pid that died */
    if (bind(fd, (const struct sockaddr *)&addr, sizeof(addr)) < 0) {
        r = -errno;
        goto err_close_fd;
    }
    if (chmod(bound, IPC_SOCKET_MODE) < 0 || lstat(bound, &st) < 0) {
        r = -errno;
        goto err_unlink;
    }
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    if (listen(fd, l->opts.backlog) < 0) {
        r = -errno;
        goto err_unlink;
    }
    if (strcmp(bound, l->path) != 0 && rename(bound, l->path) < 0) {
        r = -errno;
        goto err_unlink;
    }
    memcpy(bound, l->path, strlen(l->path) + 1); /* the name to remove on failure from here on */
    r = uv_pipe_init(loop, &l->pipe, 0);
    if (r < 0)
        goto err_unlink;
    r = uv_pipe_open(&l->pipe, fd);
    if (r < 0)
        goto err_close_handle;
    r = uv_listen((uv_stream_t *)&l->pipe, l->opts.backlog, on_connection);
    if (r < 0) {
        fd = -1; /* the handle owns it now */
        goto err_close_handle;
    }
    *ret_listener = l;
    return 0;

err_close_handle:
    /* The handle is initialised: it must be closed, and l freed from its close callback
     * (the caller's loop must run once more). */
    (void)unlink(bound);
    if (fd >= 0)
        (void)close(fd);
    l->closing = true;
    uv_close((uv_handle_t *)&l->pipe, on_listener_closed);
    return r;
err_unlink:
    (void)unlink(bound);
err_close_fd:
    (void)close(fd);
err_free_path:
    free(l->path);
err_free:
    free(l);
    return r;
}

int ipc_listener_pending(const struct ipc_listener *l)
{
    struct pollfd p = {.events = POLLIN};
    uv_os_fd_t fd;
    int r;

    if (!l || l->closing)
        return -EBADF;
    r = uv_fileno((const uv_handle_t *)&l->pipe, &fd);
    if (r < 0)
        return r;
    p.fd = fd;
    r = poll(&p, 1, 0);
    if (r < 0)
        return -errno;
    return r > 0 && (p.revents & POLLIN) ? 1 : 0;
}

bool ipc_listener_intact(const struct ipc_listener *l)
{
    struct stat st;

    return l && !l->closing && lstat(l->path, &st) == 0 && st.st_dev == l->dev &&
           st.st_ino == l->ino;
}

void ipc_listener_close(struct ipc_listener *l)
{
    struct stat st;

    if (!l || l->closing)
        return;
    l->closing = true;
    /* Remove the path only if it is still our socket: a newer daemon may have taken it. */
    if (lstat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino)
        (void)unlink(l->path);
    uv_close((uv_handle_t *)&l->pipe, on_listener_closed);
}
