/* ipc/uv-ipc.h - the libuv half of the wire: Unix-domain stream connections and a listener.
 *
 * One connection carries frames of ipc/ipc.h both ways: reads are reassembled and decoded
 * into validated envelopes, sends go through an ordered write queue whose size is capped
 * per connection (a slow peer makes send fail with -ENOBUFS instead of growing memory).
 * Users: the daemon (listen, accept many), the child runtime (connect from a private loop on
 * its own IPC thread) and the CLI (connect, request, wait for the reply).
 *
 * Threads and loops: nothing here touches the default loop; every object lives on the loop
 * it was created with and every function must be called on that loop's thread. Objects are
 * freed only from libuv close callbacks, so they stay valid until the loop has run once more
 * after a close. SIGPIPE: writing to a peer that has gone raises SIGPIPE (libuv writes with
 * writev); processes must ignore it, or block it on the thread that runs the loop.
 */
#ifndef FLEETPROF_IPC_UV_IPC_H
#define FLEETPROF_IPC_UV_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "ipc/ipc.h"

struct ipc_conn;     /* opaque: one connection */
struct ipc_listener; /* opaque: a listening socket */

#define IPC_MAX_QUEUED_BYTES_DEFAULT ((size_t)64 << 20)
#define IPC_DRAIN_LOW_BYTES_DEFAULT  ((size_t)1 << 20)
#define IPC_STREAM_WINDOW_DEFAULT    ((size_t)4 << 20)
#define IPC_SOCKET_DIR_MODE          0700
#define IPC_SOCKET_MODE              0600

/* Peer credentials from SO_PEERCRED, taken when the peer called connect(2). */
struct ipc_peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
};

/* env is borrowed for the call: it is freed when the callback returns. The callback may
 * send, close or shut down conn. */
typedef void (*ipc_conn_message_cb)(struct ipc_conn *conn, const Fleetprof__Envelope *env,
                                    void *userdata);
/* Called exactly once, from the libuv close callback, right before conn is freed (do not use
 * conn afterwards). error is 0 for an orderly end (peer closed between frames, or a local
 * ipc_conn_close()/ipc_conn_shutdown()), else a negative errno: -EMSGSIZE, -EPROTO, -ENOMSG,
 * -EBADMSG, -ENODATA (see ipc_reader_feed()), a libuv read/write error (-ECONNRESET, or
 * -EPIPE when a write failed: the connection then reads on to the end of the stream, so
 * frames the peer sent before hanging up, like a Refuse, are still delivered).
 * reason is a static or conn-owned string, valid during the call. */
typedef void (*ipc_conn_close_cb)(struct ipc_conn *conn, int error, const char *reason,
                                  void *userdata);
/* The queued bytes fell from above drain_low_bytes to at or below it. */
typedef void (*ipc_conn_drain_cb)(struct ipc_conn *conn, void *userdata);
/* A stream started by ipc_conn_stream_profile() is over: status 0 once its last piece was
 * written to the socket, else a negative errno (-ECANCELED when the connection closed). */
typedef void (*ipc_stream_done_cb)(struct ipc_conn *conn, uint64_t request_id, int status,
                                   void *userdata);

/* A large ProfileData piece taken as it arrives, without a frame buffer (struct
 * ipc_piece_cbs in ipc/ipc.h): begin gets the validated piece without its data (data.len is
 * the length to come, data.data NULL) and returns true to take it, false to receive it whole
 * through on_message. Taken, its data comes to bytes in order, in runs of any size (borrowed
 * for the call), then end runs once, unless the connection closes first. Each may send,
 * close or shut down conn. */
typedef bool (*ipc_conn_piece_begin_cb)(struct ipc_conn *conn, const Fleetprof__ProfileData *piece,
                                        void *userdata);
typedef void (*ipc_conn_piece_bytes_cb)(struct ipc_conn *conn, const uint8_t *data, size_t len,
                                        void *userdata);
typedef void (*ipc_conn_piece_end_cb)(struct ipc_conn *conn, void *userdata);

struct ipc_conn_callbacks {
    ipc_conn_message_cb on_message; /* required */
    ipc_conn_close_cb on_close;     /* optional */
    ipc_conn_drain_cb on_drain;     /* optional */
    /* Optional, all three or none: without them every frame comes whole to on_message. */
    ipc_conn_piece_begin_cb on_piece_begin;
    ipc_conn_piece_bytes_cb on_piece_bytes;
    ipc_conn_piece_end_cb on_piece_end;
};

/* Zero fields take the defaults. */
struct ipc_conn_options {
    size_t max_frame_bytes;     /* frames in and out; default IPC_FRAME_MAX_BYTES_DEFAULT */
    size_t max_queued_bytes;    /* send cap; default IPC_MAX_QUEUED_BYTES_DEFAULT */
    size_t drain_low_bytes;     /* on_drain threshold; default IPC_DRAIN_LOW_BYTES_DEFAULT */
    size_t stream_window_bytes; /* bytes a profile stream keeps queued; default 4 MiB */
};

/* Connects to the listener at path (a non-blocking connect(2), which for a Unix socket either
 * succeeds at once or fails) and starts reading, if it may be trusted with this process's
 * data: path's directories pass ipc_socket_dir_check() and the socket
 * ipc_socket_file_check() (ipc/socket-trust.h) for our effective uid, before connecting; the
 * listener's credentials (SO_PEERCRED, as it called listen(2)) pass ipc_peer_check() after,
 * before anything is sent. The connection is made to the resolved path. opts may be NULL.
 * cbs and userdata are copied/borrowed for the connection's life. On success stores the
 * connection in *ret_conn; it belongs to the loop: close it with
 * ipc_conn_close()/ipc_conn_shutdown(), and it is freed after on_close. Returns 0, -EINVAL,
 * -ENAMETOOLONG, -ENOMEM, -EPERM (the directory, the socket or the listener is another
 * user's), or the connect error: -ENOENT (no socket), -ECONNREFUSED (stale socket, or not a
 * socket), -EACCES, -EAGAIN (backlog full). On failure a sentence for the user goes into
 * reason (may be NULL; IPC_TRUST_REASON_MAX bytes hold any), empty when the error says it
 * all; the loop must run once more to release what a failed connection set up. */
int ipc_conn_connect(uv_loop_t *loop, const char *path, const struct ipc_conn_options *opts,
                     const struct ipc_conn_callbacks *cbs, void *userdata, char *reason,
                     size_t reason_len, struct ipc_conn **ret_conn);

/* The second half of ipc_conn_connect(): fd is a socket connected by ipc_socket_connect()
 * (ipc/socket-trust.h) to path (named in reasons) while the caller was uid; the listener's
 * credentials are checked against uid before anything is sent. A process that connected
 * before it dropped its privileges passes the uid it connected as: the daemon trusted that
 * one. Takes fd in every case (closed on failure). Returns and reasons as ipc_conn_connect(). */
int ipc_conn_adopt(uv_loop_t *loop, int fd, const char *path, uid_t uid,
                   const struct ipc_conn_options *opts, const struct ipc_conn_callbacks *cbs,
                   void *userdata, char *reason, size_t reason_len, struct ipc_conn **ret_conn);

/* Replaces the callbacks and userdata (the listener's on_accept must call it). */
void ipc_conn_set_callbacks(struct ipc_conn *conn, const struct ipc_conn_callbacks *cbs,
                            void *userdata);

/* Encodes env as one frame and queues it behind the frames already queued. env is only read
 * during the call. Returns 0, -EINVAL (no message set), -EMSGSIZE (frame above
 * max_frame_bytes), -ENOBUFS (the queue would exceed max_queued_bytes: the peer is not
 * reading; nothing queued, the connection stays open), -EPIPE (closing or shutting down),
 * -ENOMEM, or a libuv write error. */
int ipc_conn_send(struct ipc_conn *conn, const Fleetprof__Envelope *env);

/* Bytes queued and not yet written to the socket. */
size_t ipc_conn_queued_bytes(const struct ipc_conn *conn);

/* Whether the peer has read everything sent so far: nothing queued here and nothing left
 * unread in the socket (SIOCOUTQ). Flow control for messages that may be folded instead of
 * sent while the peer is behind. Returns 1 (all read), 0 (some unread), -EBADF (closed) or
 * the ioctl's negative errno. */
int ipc_conn_peer_caught_up(const struct ipc_conn *conn);

/* Streams a payload (a profile JSON text) as ProfileData pieces of <= 1 MiB, keeping at most
 * stream_window_bytes queued and queuing more as writes complete, so a large profile never
 * sits in the queue whole and other replies interleave. data is borrowed until done runs.
 * error (may be NULL, borrowed likewise) goes into the last piece. One stream at a time.
 * Returns 0 (done will be called exactly once, possibly before this returns if the first
 * piece cannot be queued), -EBUSY (a stream is active), -EPIPE, -EINVAL. */
int ipc_conn_stream_profile(struct ipc_conn *conn, uint64_t request_id, const void *data,
                            size_t len, bool exit_profile, const char *error,
                            ipc_stream_done_cb done, void *userdata);
/* The same for a payload in span_count spans (a memory writer's chunks, sent without being
 * joined first); the spans array is borrowed like the bytes. */
int ipc_conn_stream_profile_spans(struct ipc_conn *conn, uint64_t request_id,
                                  const struct ipc_span *spans, size_t span_count,
                                  bool exit_profile, const char *error, ipc_stream_done_cb done,
                                  void *userdata);

/* Closes now; queued frames are dropped. Idempotent. on_close runs later, from the loop,
 * with error 0 ("closed locally"). */
void ipc_conn_close(struct ipc_conn *conn);

/* Stops accepting sends, lets the queued frames (and an active stream) drain, shuts down the
 * write side, then closes. Reads go on meanwhile. Idempotent. */
void ipc_conn_shutdown(struct ipc_conn *conn);

/* The peer's credentials (for a connected client: the listener's). Returns 0 or -ENODATA. */
int ipc_conn_peer(const struct ipc_conn *conn, struct ipc_peer *ret_peer);

/* ipc_conn_send() of the connection's first frame with a descriptor passed alongside
 * (SCM_RIGHTS; the peer's connection must be an accepted one, which receives them). Returns
 * 1 when fd went with it, 0 when the frame was queued without it (not the first frame, or
 * the socket was full), or ipc_conn_send()'s errors. fd stays the caller's. */
int ipc_conn_send_with_fd(struct ipc_conn *conn, const Fleetprof__Envelope *env, int fd);
/* The descriptor an accepted connection's peer passed (the first one; later ones are closed
 * as they come and counted), now the caller's; -1 if none. Read it when the frame it came
 * with is delivered. */
int ipc_conn_take_received_fd(struct ipc_conn *conn);
uint64_t ipc_conn_dropped_fds(const struct ipc_conn *conn);

/* Counts frames received and sent so far (for status and tests). */
uint64_t ipc_conn_frames_received(const struct ipc_conn *conn);
uint64_t ipc_conn_frames_sent(const struct ipc_conn *conn);

/* The socket's descriptor, or -EBADF once closed. For a forked child only: it must close
 * the inherited descriptor without touching the connection (whose loop is the parent's). */
int ipc_conn_fileno(const struct ipc_conn *conn);

/* ---- listener ---------------------------------------------------------------------------- */

/* Decides whether a peer may talk to a listener running as self_uid: the same uid, or root.
 * Returns 0, or -EPERM with a reason written into reason (NUL-terminated if reason_len > 0). */
int ipc_peer_check(const struct ipc_peer *peer, uid_t self_uid, char *reason, size_t reason_len);

struct ipc_listener_callbacks {
    /* A peer passed the uid check. Call ipc_conn_set_callbacks() and return 0 to start
     * reading, or return a negative errno to close the connection (then none of the
     * callbacks set here run). conn belongs to the loop like a connected one. Required. */
    int (*on_accept)(struct ipc_listener *listener, struct ipc_conn *conn,
                     const struct ipc_peer *peer, void *userdata);
    /* A peer was refused (-EPERM: uid mismatch). The caller logs reason; the listener has
     * sent it a Refuse and closes its connection. Optional. */
    void (*on_refused)(struct ipc_listener *listener, const struct ipc_peer *peer, int error,
                       const char *reason, void *userdata);
    /* accept(2) or setting up a connection failed (-EMFILE, -ENOMEM...). Optional. */
    void (*on_error)(struct ipc_listener *listener, int error, const char *reason, void *userdata);
};

struct ipc_listener_options {
    struct ipc_conn_options conn; /* for accepted connections */
    int backlog;                  /* listen(2) backlog; 0 = 128 */
    bool allow_any_uid;           /* skip the peer uid check (tests only) */
};

/* Listens on path. Creates the missing directories of path with mode 0700, refuses a
 * directory that ipc_socket_dir_check() (ipc/socket-trust.h) refuses, binds the socket with
 * mode 0600 at the resolved path, and removes a stale socket left by a dead daemon. opts may
 * be NULL. Returns 0 and stores the listener in *ret_listener, or -EPERM (the directory, or
 * one above it, is another user's or writable by others: ipc_socket_dir_check() says which),
 * -EADDRINUSE (a live listener owns path), -EEXIST (path is not a socket), -ENOTDIR,
 * -ENAMETOOLONG, -EACCES, -ENOMEM... */
int ipc_listener_open(uv_loop_t *loop, const char *path, const struct ipc_listener_options *opts,
                      const struct ipc_listener_callbacks *cbs, void *userdata,
                      struct ipc_listener **ret_listener);

/* Stops listening and removes the socket file (if it is still ours). Accepted connections
 * are not affected. Idempotent; the listener is freed from the loop. */
void ipc_listener_close(struct ipc_listener *listener);

/* Whether a connection waits in the listen backlog, not yet accepted (the loop accepts it in
 * its next poll phase: a timer that fires first does not see it among the connections).
 * Returns 1, 0, or a negative errno (-EBADF once closed). */
int ipc_listener_pending(const struct ipc_listener *listener);

/* Whether the listener's path still names the socket it bound (not removed, not replaced). */
bool ipc_listener_intact(const struct ipc_listener *listener);

#endif /* FLEETPROF_IPC_UV_IPC_H */
