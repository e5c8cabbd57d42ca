/* ipc/socket-trust.c - whether a socket path can be trusted, and the plain socket's I/O a
 * connection needs before any loop (a connect, one frame); see socket-trust.h. */
#include "ipc/socket-trust.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/ipc.h"

#define SUN_PATH_MAX sizeof(((struct sockaddr_un *)NULL)->sun_path)

static void say(char *reason, size_t reason_len, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void say(char *reason, size_t reason_len, const char *fmt, ...)
{
    va_list ap;

    if (!reason || !reason_len)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(reason, reason_len, fmt, ap);
    va_end(ap);
}

static bool owner_ok(const struct stat *st, uid_t uid)
{
    return st->st_uid == uid || st->st_uid == 0;
}

static const char *who_may_write(mode_t mode)
{
    if ((mode & S_IWGRP) && (mode & S_IWOTH))
        return "its group and everyone";
    return mode & S_IWGRP ? "its group" : "everyone";
}

/* Makes every missing directory of dir (mode 0700). Existing ones are left as they are: the
 * check that follows judges them. */
static int make_dirs(const char *dir, char *reason, size_t reason_len)
{
    char buf[PATH_MAX];

    if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';

        if (!end && *p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST) {
            int r = -errno;

            say(reason, reason_len, "cannot create the socket directory %s: %s", buf, strerror(-r));
            return r;
        }
        if (end)
            return 0;
        *p = '/';
    }
}

/* Checks one directory of the resolved chain: the socket's own (last) or one above it. */
static int check_dir(const char *path, bool last, uid_t uid, char *reason, size_t reason_len)
{
    const mode_t writable = S_IWGRP | S_IWOTH;
    struct stat st;

    if (lstat(path, &st) < 0) {
        int r = -errno;

        say(reason, reason_len, "cannot check %s: %s", path, strerror(-r));
        return r;
    }
    if (!S_ISDIR(st.st_mode)) { /* a link put there since it was resolved */
        say(reason, reason_len, "%s changed while it was checked (now not a directory)", path);
        return -EPERM;
    }
    if (last && !owner_ok(&st, uid)) {
        say(reason, reason_len,
            "the socket directory %s belongs to uid %lu, not to you (uid %lu) or root: its "
            "owner could put their own listener there; remove it",
            path, (unsigned long)st.st_uid, (unsigned long)uid);
        return -EPERM;
    }
    if (last && (st.st_mode & writable)) {
        say(reason, reason_len,
            "the socket directory %s is writable by %s (mode %04o): any of them could put their "
            "own listener there; chmod go-w it",
            path, who_may_write(st.st_mode), (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    if (!last && !owner_ok(&st, uid)) {
        say(reason, reason_len,
            "%s, above the socket directory, belongs to uid %lu, not to you (uid %lu) or root: "
            "its owner could replace the directory below it",
            path, (unsigned long)st.st_uid, (unsigned long)uid);
        return -EPERM;
    }
    if (!last && (st.st_mode & writable) && !(st.st_mode & S_ISVTX)) {
        say(reason, reason_len,
            "%s, above the socket directory, is writable by %s and not sticky (mode %04o): "
            "any of them could replace the directory below it",
            path, who_may_write(st.st_mode), (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

/* Checks every directory of an absolute resolved path, from / down to it. */
static int check_chain(const char *resolved, uid_t uid, char *reason, size_t reason_len)
{
    char buf[PATH_MAX];
    int r;

    if (snprintf(buf, sizeof(buf), "%s", resolved) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    if (strcmp(buf, "/") == 0)
        return check_dir("/", true, uid, reason, reason_len);
    r = check_dir("/", false, uid, reason, reason_len);
    for (char *p = buf + 1; r == 0; p++) {
        if (*p == '\0')
            return check_dir(buf, true, uid, reason, reason_len);
        if (*p != '/')
            continue;
        *p = '\0';
        r = check_dir(buf, false, uid, reason, reason_len);
        *p = '/';
    }
    return r;
}

int ipc_socket_dir_check(const char *socket_path, uid_t uid, bool create, char *ret_path,
                         size_t path_size, char *reason, size_t reason_len)
{
    char dir[PATH_MAX], resolved[PATH_MAX];
    const char *slash, *base;
    int n, r;

    say(reason, reason_len, "%s", "");
    if (!socket_path || !*socket_path || !ret_path || !path_size)
        return -EINVAL;
    slash = strrchr(socket_path, '/');
    base = slash ? slash + 1 : socket_path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        say(reason, reason_len, "%s names a directory, not a socket", socket_path);
        return -EINVAL;
    }
    if (!slash)
        n = snprintf(dir, sizeof(dir), ".");
    else if (slash == socket_path)
        n = snprintf(dir, sizeof(dir), "/");
    else
        n = snprintf(dir, sizeof(dir), "%.*s", (int)(slash - socket_path), socket_path);
    if (n < 0 || (size_t)n >= sizeof(dir))
        return -ENAMETOOLONG;
    if (create) {
        r = make_dirs(dir, reason, reason_len);
        if (r < 0)
            return r;
    }
    if (!realpath(dir, resolved)) {
        r = -errno;
        if (r == -ENOENT)
            say(reason, reason_len, "no socket at %s: its directory %s does not exist", socket_path,
                dir);
        else
            say(reason, reason_len, "cannot resolve the socket directory %s: %s", dir,
                strerror(-r));
        return r;
    }
    r = check_chain(resolved, uid, reason, reason_len);
    if (r < 0)
        return r;
    n = snprintf(ret_path, path_size, "%s/%s", strcmp(resolved, "/") ? resolved : "", base);
    if (n < 0 || (size_t)n >= path_size || (size_t)n >= SUN_PATH_MAX) {
        say(reason, reason_len, "the socket path %s/%s is longer than a socket address allows",
            resolved, base);
        return -ENAMETOOLONG;
    }
    return 0;
}

int ipc_socket_file_check(const char *path, uid_t uid, char *reason, size_t reason_len)
{
    struct stat st;

    if (lstat(path, &st) < 0) {
        int r = -errno;

        if (r == -ENOENT)
            say(reason, reason_len, "no socket at %s", path);
        else
            say(reason, reason_len, "cannot check the socket %s: %s", path, strerror(-r));
        return r;
    }
    if (!S_ISSOCK(st.st_mode)) {
        say(reason, reason_len, "%s is not a socket: nobody listens there", path);
        return -ECONNREFUSED;
    }
    if (!owner_ok(&st, uid)) {
        say(reason, reason_len,
            "the socket %s belongs to uid %lu, not to you (uid %lu) or root: its owner may "
            "be listening; remove it",
            path, (unsigned long)st.st_uid, (unsigned long)uid);
        return -EPERM;
    }
    say(reason, reason_len, "%s", "");
    return 0;
}

int ipc_socket_connect(const char *path, uid_t uid, char *reason, size_t reason_len, int *ret_fd)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd, r;

    if (!path || !ret_fd)
        return -EINVAL;
    r = ipc_socket_dir_check(path, uid, false, addr.sun_path, sizeof(addr.sun_path), reason,
                             reason_len);
    if (r == 0)
        r = ipc_socket_file_check(addr.sun_path, uid, reason, reason_len);
    if (r < 0)
        return r;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    /* A Unix-domain connect completes at once or fails (EAGAIN: backlog full). */
    if (connect(fd, (const struct sockaddr *)&addr, sizeof(addr)) < 0) {
        r = -errno;
        (void)close(fd);
        return r;
    }
    *ret_fd = fd;
    return 0;
}

ssize_t ipc_socket_send_frame(int sock, const Fleetprof__Envelope *env, int pass_fd)
{
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    struct msghdr msg = {0};
    struct iovec iov;
    uint8_t small[512], *frame = small;
    size_t len = env ? ipc_frame_size(env) : 0;
    ssize_t n;

    if (len == 0)
        return -EINVAL;
    if (len > sizeof(small) && !(frame = malloc(len)))
        return -ENOMEM;
    if (ipc_frame_encode(env, frame, len) != (ssize_t)len) {
        n = -EINVAL;
        goto out;
    }
    iov = (struct iovec){frame, len};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (pass_fd >= 0) {
        memset(&control, 0, sizeof(control));
        msg.msg_control = control.space;
        msg.msg_controllen = sizeof(control.space);
        CMSG_FIRSTHDR(&msg)->cmsg_level = SOL_SOCKET;
        CMSG_FIRSTHDR(&msg)->cmsg_type = SCM_RIGHTS;
        CMSG_FIRSTHDR(&msg)->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(CMSG_FIRSTHDR(&msg)), &pass_fd, sizeof(int));
    }
    do
        n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        n = errno == EWOULDBLOCK ? -EAGAIN : -errno;
    else if ((size_t)n != len)
        n = -EIO; /* a cut frame: the peer cannot read on */
out:
    if (frame != small)
        free(frame);
    return n;
}

int ipc_socket_listener_check(int fd, uid_t uid, const char *path, char *reason, size_t reason_len)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        int r = -errno;

        say(reason, reason_len, "cannot read the credentials of the listener at %s: %s", path,
            strerror(-r));
        return r;
    }
    /* The same rule as ipc_peer_check()'s, the listener's side of it. */
    if (cred.uid != uid && cred.uid != 0) {
        say(reason, reason_len,
            "the daemon listening at %s (pid %ld) runs as uid %lu, not as you (uid %lu) or "
            "root; nothing was sent to it",
            path, (long)cred.pid, (unsigned long)cred.uid, (unsigned long)uid);
        return -EPERM;
    }
    return 0;
}
