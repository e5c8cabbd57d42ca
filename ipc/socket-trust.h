/* ipc/socket-trust.h - whether a socket path can be trusted: who could replace what is there.
 *
 * A daemon's socket is only as safe as the directories above it: whoever may write the
 * socket's directory can put their own listener at its name, and whoever may write a
 * directory above it can move that directory aside and put another in its place. So both
 * ends check the path before use, as tmux, ssh-agent and systemd's runtime directories do:
 *
 * - the socket's directory is owned by the caller's uid or root and is not writable by group
 *   or others;
 * - every directory above it is owned by the caller or root and is either not writable by
 *   group or others, or sticky (like /tmp: an entry there can be renamed or removed only by
 *   its owner, whom the next step checks);
 * - the socket file, when there is one, is a socket owned by the caller or root.
 *
 * Symbolic links are resolved first and the resolved directories checked; the caller then
 * uses the resolved path, which nobody else can change. uid is the caller's effective uid
 * (geteuid()): the one its files and its daemon's SO_PEERCRED are compared with.
 *
 * libc only, no libuv: the listener and the connecting side (ipc/uv-*.c), and fleetprofd's
 * main before it detaches (so that the refusal reaches the user's terminal), use it.
 */
#ifndef FLEETPROF_IPC_SOCKET_TRUST_H
#define FLEETPROF_IPC_SOCKET_TRUST_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "proto/fleetprof-protocol.h"

/* Enough for every reason written here (two paths of a socket address each, and words). */
#define IPC_TRUST_REASON_MAX 512

/* Checks the directory of socket_path for uid, as above. With create, missing directories
 * are made first (mode 0700, the caller's). Writes the resolved socket path (the resolved
 * directory, then socket_path's last component) into ret_path. Returns 0; -EPERM with the
 * reason written into reason (NUL-terminated when reason_len > 0) when the directory is not
 * safe; -ENOENT (a directory is missing; only without create), -ENOTDIR, -ENAMETOOLONG (the
 * resolved path does not fit in a socket address, or in path_size), -EINVAL, or another
 * error of stat(2)/mkdir(2)/realpath(3), with a reason too. */
int ipc_socket_dir_check(const char *socket_path, uid_t uid, bool create, char *ret_path,
                         size_t path_size, char *reason, size_t reason_len);

/* Checks that path (resolved, from ipc_socket_dir_check()) is a socket owned by uid or root.
 * Returns 0; -ENOENT (nothing there); -ECONNREFUSED (not a socket: nobody listens there);
 * -EPERM (another user's socket), each with a reason; or lstat(2)'s error. */
int ipc_socket_file_check(const char *path, uid_t uid, char *reason, size_t reason_len);

/* Connects a new socket (close-on-exec, non-blocking) to path after both checks above for
 * uid, at the resolved path, and stores it in *ret_fd; nothing is sent and the listener is
 * not yet checked (ipc_socket_listener_check(): ipc_conn_adopt() and a light connection do
 * that before the first byte). Made apart from the
 * libuv connection so that a forked child can connect as the user it was born as, before
 * the program drops its privileges, and hand the socket to its IPC thread later. Returns 0 or the
 * errors of the checks (with a reason) and of socket(2) and connect(2): -ENOENT (no socket),
 * -ECONNREFUSED (stale), -EACCES, -EAGAIN (backlog full). */
int ipc_socket_connect(const char *path, uid_t uid, char *reason, size_t reason_len, int *ret_fd);

/* Whether the listener at the other end of fd (a socket connected to path) may be told
 * anything: it runs as uid or as root (SO_PEERCRED: who called listen(2)). Returns 0;
 * -EPERM, or getsockopt(2)'s error, with a reason naming path. */
int ipc_socket_listener_check(int fd, uid_t uid, const char *path, char *reason, size_t reason_len);

/* Writes env as one frame on the stream socket sock, at once or not at all (MSG_DONTWAIT,
 * never SIGPIPE), with the descriptor pass_fd (SCM_RIGHTS) unless it is -1. Returns the
 * frame's length; -EAGAIN when the socket is full (nothing sent), -EIO when only part of it
 * went (the connection cannot be used on), or another negative errno. */
ssize_t ipc_socket_send_frame(int sock, const Fleetprof__Envelope *env, int pass_fd);

#endif /* FLEETPROF_IPC_SOCKET_TRUST_H */
