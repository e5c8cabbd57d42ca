/* ipc/uv-conn.c - one framed connection on a libuv loop: reading, the write queue, closing.
 *
 * Every send is one uv_write of one encoded frame (or one write, see below); libuv keeps
 * writes of a stream in order.
 * A profile stream's piece is written without a copy of its data: the frame's header from
 * the request, then the data bytes from the caller's payload, which is borrowed until the
 * stream's done callback, and that runs only once no queued write points into it.
 * queued_bytes counts frames from uv_write() until their write callback, and is what the
 * per-connection cap applies to. A small frame sent while nothing is queued is written at
 * once (uv_try_write) and only what the socket did not take is queued: the daemon's polls and
 * destroy requests then cost one write each, without a write request, its deferred callback
 * and libuv's epoll_ctl to drop POLLOUT afterwards (one per message, measured with strace).
 * Closing is one path (close_conn) whatever the cause; libuv runs the write callbacks of cancelled
 * writes before the close callback, which frees.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "buffer/leb128.h"
#include "ipc/ipc-internal.h"
#include "ipc/ipc.h"
#include "ipc/socket-trust.h"
#include "ipc/uv-ipc-internal.h"
#include "ipc/uv-ipc.h"

/* Write requests up to this size (header + frame) come from the connection's pool. */
#define POOL_BUF_BYTES        ((size_t)4 << 10)
#define POOL_MAX_CACHED       32
/* A frame up to this size, sent while nothing is queued, is written at once from the stack. */
#define TRY_WRITE_MAX_BYTES   ((size_t)512)
/* Read into a frame's own buffer when at least this much of it is missing. */
#define DIRECT_READ_MIN_BYTES ((size_t)16 << 10)

/* One queued frame. Owned by the connection's write queue from uv_write() to on_write(). */
struct write_req {
    uv_write_t req;
    struct ipc_conn *conn; /* borrowed: outlives the request (close waits for it) */
    size_t alloc_bytes;    /* size of this allocation, for the pool */
    size_t frame_bytes;    /* bytes of the frame (data, plus the borrowed piece) */
    bool stream_last;      /* the last piece of the active profile stream */
    bool borrowed;         /* data holds a frame header; the rest is the stream's payload */
    uint8_t data[];        /* the encoded frame, or its header */
};

static void pump_stream(struct ipc_conn *c);
static void begin_shutdown(struct ipc_conn *c);

static void on_conn_closed(uv_handle_t *handle)
{
    struct ipc_conn *c = container_of(handle, struct ipc_conn, pipe);

    /* Write callbacks (cancelled ones too) have all run: nothing points into the payload. */
    if (c->stream.active) {
        c->stream.active = false;
        if (c->stream.done)
            c->stream.done(c, c->stream.s.request_id,
                           c->stream.failed ? c->stream.fail_status : -ECANCELED,
                           c->stream.userdata);
    }
    if (c->cbs.on_close)
        c->cbs.on_close(c, c->close_error, c->close_reason, c->userdata);
    if (c->received_fd >= 0)
        (void)close(c->received_fd);
    ipc_reader_done(&c->reader);
    ipc_pool_done(&c->pool);
    free(c->read_buf);
    free(c);
}

void ipc__conn_fail(struct ipc_conn *c, int error, const char *reason)
{
    if (c->closing)
        return;
    c->closing = true;
    c->close_error = error;
    c->close_reason = reason;
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void on_discarded(uv_handle_t *handle)
{
    struct ipc_conn *c = container_of(handle, struct ipc_conn, pipe);

    if (c->received_fd >= 0)
        (void)close(c->received_fd);
    ipc_reader_done(&c->reader);
    ipc_pool_done(&c->pool);
    free(c->read_buf);
    free(c);
}

void ipc__conn_discard(struct ipc_conn *c)
{
    c->closing = true;
    uv_close((uv_handle_t *)&c->pipe, on_discarded);
}

int ipc__conn_new(uv_loop_t *loop, const struct ipc_conn_options *opts, bool accepts_fds,
                  struct ipc_conn **ret_conn)
{
    struct ipc_conn *c;
    int r;

    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->max_frame_bytes =
            opts && opts->max_frame_bytes ? opts->max_frame_bytes : IPC_FRAME_MAX_BYTES_DEFAULT;
    c->max_queued_bytes =
            opts && opts->max_queued_bytes ? opts->max_queued_bytes : IPC_MAX_QUEUED_BYTES_DEFAULT;
    c->drain_low_bytes =
            opts && opts->drain_low_bytes ? opts->drain_low_bytes : IPC_DRAIN_LOW_BYTES_DEFAULT;
    c->stream_window_bytes = opts && opts->stream_window_bytes ? opts->stream_window_bytes
                                                               : IPC_STREAM_WINDOW_DEFAULT;
    c->close_reason = "closed locally";
    c->received_fd = -1;
    c->read_buf = malloc(IPC_READ_BUF_BYTES);
    if (!c->read_buf) {
        r = -ENOMEM;
        goto err_free;
    }
    r = ipc_pool_init(&c->pool, POOL_BUF_BYTES, POOL_MAX_CACHED);
    if (r < 0)
        goto err_free_buf;
    ipc_reader_init(&c->reader, c->max_frame_bytes);
    /* An "ipc" pipe reads with recvmsg(), so that descriptors passed with SCM_RIGHTS arrive
     * (read() would drop them); writes are the same. */
    r = uv_pipe_init(loop, &c->pipe, accepts_fds ? 1 : 0);
    if (r < 0)
        goto err_pool;
    *ret_conn = c;
    return 0;

err_pool:
    ipc_reader_done(&c->reader);
    ipc_pool_done(&c->pool);
err_free_buf:
    free(c->read_buf);
err_free:
    free(c);
    return r;
}

int ipc__conn_read_peer(struct ipc_conn *c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;
    int r;

    r = uv_fileno((uv_handle_t *)&c->pipe, &fd);
    if (r < 0)
        return r;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    c->peer.pid = cred.pid;
    c->peer.uid = cred.uid;
    c->peer.gid = cred.gid;
    c->has_peer = true;
    return 0;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct ipc_conn *c = container_of(handle, struct ipc_conn, pipe);
    uint8_t *direct = NULL;
    ssize_t n;

    (void)suggested;
    /* Inside a large frame, read straight into its buffer: no copy, fewer reads. */
    n = ipc_reader_direct_buf(&c->reader, &direct);
    if (n >= (ssize_t)DIRECT_READ_MIN_BYTES) {
        *buf = uv_buf_init((char *)direct, (unsigned)MIN((size_t)n, (size_t)UINT_MAX));
        return;
    }
    /* Reads are consumed synchronously in on_read, so one buffer per connection suffices. */
    *buf = uv_buf_init((char *)c->read_buf, (unsigned)IPC_READ_BUF_BYTES);
}

static int deliver(void *userdata, const Fleetprof__Envelope *env)
{
    struct ipc_conn *c = userdata;

    if (c->cbs.on_message)
        c->cbs.on_message(c, env, c->userdata);
    /* The callback may have closed us: stop delivering what is left of this read. */
    return c->closing ? -ECANCELED : 0;
}

/* The piece callbacks stop the reader, as deliver() does, once one of them closed us. */
static int piece_begin(void *userdata, const Fleetprof__Envelope *env)
{
    struct ipc_conn *c = userdata;
    bool take = c->cbs.on_piece_begin(c, env->profile_data, c->userdata);

    return c->closing ? -ECANCELED : take;
}

static int piece_bytes(void *userdata, const uint8_t *data, size_t len)
{
    struct ipc_conn *c = userdata;

    c->cbs.on_piece_bytes(c, data, len, c->userdata);
    return c->closing ? -ECANCELED : 0;
}

static int piece_end(void *userdata)
{
    struct ipc_conn *c = userdata;

    c->cbs.on_piece_end(c, c->userdata);
    return c->closing ? -ECANCELED : 0;
}

static const struct ipc_piece_cbs piece_cbs = {piece_begin, piece_bytes, piece_end};

static void on_fd_handle_closed(uv_handle_t *handle)
{
    free(handle);
}

/* Descriptors the peer passed: libuv queues them on the pipe and hands each out only through
 * uv_accept() into a handle. The first is kept (a copy of ours), any other closed at once: a
 * peer cannot make us hold descriptors it sends. */
static void take_passed_fds(struct ipc_conn *c)
{
    while (uv_pipe_pending_count(&c->pipe) > 0) {
        uv_pipe_t *h = malloc(sizeof(*h));
        uv_os_fd_t fd = -1;

        if (!h || uv_pipe_init(c->pipe.loop, h, 0) < 0) {
            free(h);
            ipc__conn_fail(c, -ENOMEM, "out of memory for a passed descriptor");
            return;
        }
        if (uv_accept((uv_stream_t *)&c->pipe, (uv_stream_t *)h) == 0 &&
            uv_fileno((uv_handle_t *)h, &fd) == 0 && c->received_fd < 0)
            c->received_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        else
            c->dropped_fds++;
        uv_close((uv_handle_t *)h, on_fd_handle_closed); /* closes libuv's copy */
    }
}

/* Takes the descriptors a drain read brought: the first one kept on a pipe that accepts them
 * (as take_passed_fds() would), every other one closed. */
static void take_drained_fds(struct ipc_conn *c, struct msghdr *msg)
{
    for (struct cmsghdr *h = CMSG_FIRSTHDR(msg); h; h = CMSG_NXTHDR(msg, h)) {
        size_t count;

        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(fd));
            if (c->pipe.ipc && c->received_fd < 0) {
                c->received_fd = fd;
            } else {
                (void)close(fd);
                c->dropped_fds++;
            }
        }
    }
}

/* libuv reported the end of the stream: reads what the socket still holds, up to its real
 * end. libuv (1.44 here) takes a short read that comes with POLLHUP for the end and never
 * reads again (src/unix/stream.c, uv__stream_io). Refs: libuv#2319, libuv#4992. But the
 * kernel ends a read at a message that carried descriptors (SCM_RIGHTS), however much follows
 * it: a child that connects, says Hello with its chunk region, streams its exit profile and
 * closes, all before our first read (one that connects at its exit, on a busy machine), had
 * its Hello read, then "end of stream", and its exit profile and Final update thrown away with
 * the socket; it then counted as killed. Returns 0, or the reader's error. */
static int drain_after_eof(struct ipc_conn *c)
{
    uv_os_fd_t fd;

    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0)
        return 0;
    while (!c->closing) {
        union {
            struct cmsghdr h;
            char space[CMSG_SPACE(4 * sizeof(int))];
        } control;
        struct iovec iov = {c->read_buf, IPC_READ_BUF_BYTES};
        struct msghdr msg = {0};
        ssize_t n, r;

        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.space;
        msg.msg_controllen = sizeof(control.space);
        do
            n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n <= 0) /* the real end, or nothing more to read: the end libuv saw */
            return 0;
        take_drained_fds(c, &msg);
        r = ipc_reader_feed(&c->reader, c->read_buf, (size_t)n, deliver, c);
        if (r < 0)
            return (int)r;
    }
    return 0;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct ipc_conn *c = container_of(stream, struct ipc_conn, pipe);
    ssize_t r;

    if (c->closing)
        return;
    if (c->pipe.ipc)
        take_passed_fds(c); /* before the frames that came with them are delivered */
    if (c->closing)
        return;
    if (nread > 0) {
        if (buf->base != (char *)c->read_buf)
            r = ipc_reader_commit(&c->reader, (size_t)nread, deliver, c);
        else
            r = ipc_reader_feed(&c->reader, (const uint8_t *)buf->base, (size_t)nread, deliver, c);
        if (r < 0)
            ipc__conn_fail(c, (int)r, ipc_reader_reason(&c->reader));
        return;
    }
    if (nread == UV_EOF) {
        r = drain_after_eof(c);
        if (c->closing) /* a callback closed us while the rest was delivered */
            return;
        if (r < 0) {
            ipc__conn_fail(c, (int)r, ipc_reader_reason(&c->reader));
            return;
        }
        r = ipc_reader_end(&c->reader);
        if (r < 0)
            ipc__conn_fail(c, (int)r, ipc_reader_reason(&c->reader));
        else if (c->write_error)
            ipc__conn_fail(c, c->write_error, "write to peer failed");
        else
            ipc__conn_fail(c, 0, "peer closed the connection");
        return;
    }
    if (nread < 0)
        ipc__conn_fail(c, (int)nread, "read from peer failed");
}

int ipc__conn_start(struct ipc_conn *c)
{
    int r = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);

    if (r < 0)
        return r;
    c->reading = true;
    return 0;
}

int ipc_conn_connect(uv_loop_t *loop, const char *path, const struct ipc_conn_options *opts,
                     const struct ipc_conn_callbacks *cbs, void *userdata, char *reason,
                     size_t reason_len, struct ipc_conn **ret_conn)
{
    char why[IPC_TRUST_REASON_MAX];
    uid_t uid = geteuid();
    int fd, r;

    if (!reason || !reason_len) {
        reason = why;
        reason_len = sizeof(why);
    }
    reason[0] = '\0';
    if (!loop || !path || !cbs || !cbs->on_message || !ret_conn)
        return -EINVAL;
    if (strlen(path) >= sizeof(((struct sockaddr_un *)NULL)->sun_path))
        return -ENAMETOOLONG;
    /* The path's directories and the socket first: nothing is connected to a listener
     * another user could have put there. */
    r = ipc_socket_connect(path, uid, reason, reason_len, &fd);
    if (r < 0)
        return r;
    return ipc_conn_adopt(loop, fd, path, uid, opts, cbs, userdata, reason, reason_len, ret_conn);
}

int ipc_conn_adopt(uv_loop_t *loop, int fd, const char *path, uid_t uid,
                   const struct ipc_conn_options *opts, const struct ipc_conn_callbacks *cbs,
                   void *userdata, char *reason, size_t reason_len, struct ipc_conn **ret_conn)
{
    char why[IPC_TRUST_REASON_MAX];
    struct ipc_conn *c;
    int r;

    if (!reason || !reason_len) {
        reason = why;
        reason_len = sizeof(why);
    }
    reason[0] = '\0';
    if (!loop || fd < 0 || !path || !cbs || !cbs->on_message || !ret_conn) {
        if (fd >= 0)
            (void)close(fd);
        return -EINVAL;
    }
    /* First the listener itself: who called listen(2) on the socket reached (the socket may
     * have been renamed into place, or a descriptor passed on). Nothing was sent yet. */
    r = ipc_socket_listener_check(fd, uid, path, reason, reason_len);
    if (r < 0)
        goto err_close_fd;
    r = ipc__conn_new(loop, opts, false, &c);
    if (r < 0)
        goto err_close_fd;
    r = uv_pipe_open(&c->pipe, fd);
    if (r < 0)
        goto err_discard;
    /* From here the pipe owns fd. */
    fd = -1;
    r = ipc__conn_read_peer(c);
    if (r < 0)
        goto err_discard;
    ipc_conn_set_callbacks(c, cbs, userdata);
    r = ipc__conn_start(c);
    if (r < 0)
        goto err_discard;
    *ret_conn = c;
    return 0;

err_discard:
    c->cbs = (struct ipc_conn_callbacks){0};
    ipc__conn_discard(c);
err_close_fd:
    if (fd >= 0)
        (void)close(fd);
    return r;
}

void ipc_conn_set_callbacks(struct ipc_conn *c, const struct ipc_conn_callbacks *cbs,
                            void *userdata)
{
    c->cbs = *cbs;
    c->userdata = userdata;
    ipc_reader_set_piece_cbs(
            &c->reader,
            cbs->on_piece_begin && cbs->on_piece_bytes && cbs->on_piece_end ? &piece_cbs : NULL);
}

/* Ends the active stream with status once no queued write borrows its payload any more
 * (the caller may free the payload in done); until then it only stops queuing pieces. */
static void stream_fail(struct ipc_conn *c, int status)
{
    if (!c->stream.failed) {
        c->stream.failed = true;
        c->stream.fail_status = status;
        c->stream.all_queued = true;
    }
    if (c->stream.borrowed_writes > 0)
        return;
    c->stream.active = false;
    if (c->stream.done)
        c->stream.done(c, c->stream.s.request_id, c->stream.fail_status, c->stream.userdata);
}

static void on_write(uv_write_t *req, int status)
{
    struct write_req *w = container_of(req, struct write_req, req);
    struct ipc_conn *c = w->conn;
    bool stream_last = w->stream_last;

    c->queued_bytes -= w->frame_bytes;
    if (w->borrowed) {
        c->stream.borrowed_writes--;
        if (c->stream.active && c->stream.failed && c->stream.borrowed_writes == 0)
            stream_fail(c, c->stream.fail_status);
    }
    ipc_pool_put(&c->pool, w, w->alloc_bytes);

    if (stream_last && c->stream.active && !c->stream.failed) {
        c->stream.active = false;
        if (c->stream.done)
            c->stream.done(c, c->stream.s.request_id, status < 0 ? status : 0, c->stream.userdata);
    }
    if (status < 0) {
        /* The peer may have closed after sending frames we have not read yet (a Refuse
         * before it hung up): keep reading until the end of the stream, which closes. Sends
         * fail from now on. UV_ECANCELED: we are closing already. */
        if (c->reading && !c->closing && status != UV_ECANCELED) {
            if (!c->write_error)
                c->write_error = status;
            return;
        }
        ipc__conn_fail(c, status, "write to peer failed");
        return;
    }
    if (c->closing)
        return;
    if (c->stream.active)
        pump_stream(c);
    if (c->above_low && c->queued_bytes <= c->drain_low_bytes) {
        c->above_low = false;
        if (c->cbs.on_drain)
            c->cbs.on_drain(c, c->userdata);
    }
}

/* Queues the len bytes of a frame the socket took only the beginning of (a copy). */
static int queue_rest(struct ipc_conn *c, const uint8_t *rest, size_t len)
{
    size_t alloc = sizeof(struct write_req) + len;
    struct write_req *w = ipc_pool_get(&c->pool, alloc);
    uv_buf_t buf;
    int r;

    if (!w) {
        /* Part of the frame is on the wire: the peer would read a cut frame. */
        ipc__conn_fail(c, -ENOMEM, "out of memory for the rest of a frame");
        return -ENOMEM;
    }
    w->conn = c;
    w->alloc_bytes = alloc;
    w->frame_bytes = len;
    w->stream_last = false;
    w->borrowed = false;
    memcpy(w->data, rest, len);
    buf = uv_buf_init((char *)w->data, (unsigned)len);
    r = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_write);
    if (r < 0) {
        ipc_pool_put(&c->pool, w, alloc);
        ipc__conn_fail(c, r, "write to peer failed");
        return r;
    }
    c->queued_bytes += len;
    c->frames_sent++;
    if (c->queued_bytes > c->drain_low_bytes)
        c->above_low = true;
    return 0;
}

/* Queues env; marks the request as the stream's last piece when stream_last. */
static int queue_frame(struct ipc_conn *c, const Fleetprof__Envelope *env, bool stream_last)
{
    struct write_req *w;
    size_t packed, frame, alloc;
    uv_buf_t buf;
    ssize_t n;
    int r;

    if (!env || env->msg_case == FLEETPROF__ENVELOPE__MSG__NOT_SET || !env->hello)
        return -EINVAL;
    if (c->closing || c->write_error)
        return -EPIPE;
    packed = fleetprof__envelope__get_packed_size(env);
    if (packed > c->max_frame_bytes)
        return -EMSGSIZE;
    frame = buf_uleb128_size(packed) + packed;
    if (frame > c->max_queued_bytes - MIN(c->queued_bytes, c->max_queued_bytes))
        return -ENOBUFS;
    if (!stream_last && c->queued_bytes == 0 && frame <= TRY_WRITE_MAX_BYTES) {
        uint8_t now[TRY_WRITE_MAX_BYTES];

        n = ipc__frame_encode_packed(env, packed, now, frame);
        if (n < 0)
            return (int)n;
        buf = uv_buf_init((char *)now, (unsigned)frame);
        r = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
        if (r == (int)frame) {
            c->frames_sent++;
            return 0;
        }
        if (r > 0) /* the socket took part of it: the rest is queued below */
            return queue_rest(c, now + r, frame - (size_t)r);
        /* UV_EAGAIN (a full socket) and errors take the queued path, which reports them. */
    }
    alloc = sizeof(*w) + frame;
    w = ipc_pool_get(&c->pool, alloc);
    if (!w)
        return -ENOMEM;
    w->conn = c;
    w->alloc_bytes = alloc;
    w->frame_bytes = frame;
    w->stream_last = stream_last;
    w->borrowed = false;
    n = ipc__frame_encode_packed(env, packed, w->data, frame);
    if (n < 0) {
        r = (int)n;
        goto err_put;
    }
    buf = uv_buf_init((char *)w->data, (unsigned)frame);
    r = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, on_write);
    if (r < 0)
        goto err_put;
    c->queued_bytes += frame;
    c->frames_sent++;
    if (c->queued_bytes > c->drain_low_bytes)
        c->above_low = true;
    return 0;

err_put:
    ipc_pool_put(&c->pool, w, alloc);
    return r;
}

/* Queues a piece of the active stream: its frame header from the pool, its data borrowed
 * from the payload (a second buffer of the same uv_write). */
static int queue_piece(struct ipc_conn *c, const Fleetprof__Envelope *env, bool stream_last,
                       const struct ipc_span *slices, size_t slice_count)
{
    const Fleetprof__ProfileData *piece = env->profile_data;
    struct write_req *w;
    size_t frame, alloc;
    ssize_t header;
    uv_buf_t bufs[1 + IPC_PIECE_MAX_SLICES];
    int r;

    if (c->closing || c->write_error)
        return -EPIPE;
    header = ipc_frame_encode_profile_header(piece, NULL, 0, &frame);
    if (header < 0)
        return (int)header;
    if (fleetprof__envelope__get_packed_size(env) > c->max_frame_bytes)
        return -EMSGSIZE;
    if (frame > c->max_queued_bytes - MIN(c->queued_bytes, c->max_queued_bytes))
        return -ENOBUFS;
    alloc = sizeof(*w) + (size_t)header;
    w = ipc_pool_get(&c->pool, alloc);
    if (!w)
        return -ENOMEM;
    w->conn = c;
    w->alloc_bytes = alloc;
    w->frame_bytes = frame;
    w->stream_last = stream_last;
    w->borrowed = true;
    header = ipc_frame_encode_profile_header(piece, w->data, (size_t)header, &frame);
    if (header < 0) {
        r = (int)header;
        goto err_put;
    }
    bufs[0] = uv_buf_init((char *)w->data, (unsigned)header);
    for (size_t i = 0; i < slice_count; i++)
        bufs[1 + i] = uv_buf_init((char *)slices[i].data, (unsigned)slices[i].len);
    r = uv_write(&w->req, (uv_stream_t *)&c->pipe, bufs, (unsigned)(1 + slice_count), on_write);
    if (r < 0)
        goto err_put;
    c->stream.borrowed_writes++;
    c->queued_bytes += frame;
    c->frames_sent++;
    if (c->queued_bytes > c->drain_low_bytes)
        c->above_low = true;
    return 0;

err_put:
    ipc_pool_put(&c->pool, w, alloc);
    return r;
}

int ipc_conn_send(struct ipc_conn *c, const Fleetprof__Envelope *env)
{
    if (!c)
        return -EINVAL;
    if (c->want_shutdown)
        return -EPIPE;
    return queue_frame(c, env, false);
}

int ipc_conn_send_with_fd(struct ipc_conn *c, const Fleetprof__Envelope *env, int fd)
{
    uv_os_fd_t sock;
    ssize_t n;

    /* The descriptor rides on the connection's first bytes, sent here directly: nothing
     * may be queued ahead of them. */
    if (fd < 0 || c->frames_sent != 0 || c->queued_bytes != 0 || c->closing ||
        uv_fileno((uv_handle_t *)&c->pipe, &sock) < 0 || ipc_frame_size(env) > c->max_frame_bytes)
        return ipc_conn_send(c, env);
    n = ipc_socket_send_frame(sock, env, fd);
    if (n > 0) {
        c->frames_sent++;
        return 1;
    }
    if (n == -EAGAIN)
        return ipc_conn_send(c, env); /* a full socket on its first frame: no descriptor */
    if (n == -EIO)
        /* A few bytes of a first small frame on an empty socket: not seen; the peer would
         * read a cut frame, so the connection goes. */
        ipc__conn_fail(c, -EIO, "first frame only partly sent");
    return (int)n;
}

int ipc_conn_take_received_fd(struct ipc_conn *c)
{
    int fd = c->received_fd;

    c->received_fd = -1;
    return fd;
}

uint64_t ipc_conn_dropped_fds(const struct ipc_conn *c)
{
    return c->dropped_fds;
}

size_t ipc_conn_queued_bytes(const struct ipc_conn *c)
{
    return c->queued_bytes;
}

int ipc_conn_peer_caught_up(const struct ipc_conn *c)
{
    uv_os_fd_t fd;
    int unread = 0;

    if (c->closing || uv_fileno((const uv_handle_t *)&c->pipe, &fd) < 0)
        return -EBADF;
    if (c->queued_bytes)
        return 0;
    /* A Unix stream socket's send queue holds what the peer has not read yet (in buffer
     * units, not bytes: only zero is exact). */
    if (ioctl(fd, SIOCOUTQ, &unread) < 0)
        return -errno;
    return unread == 0;
}

/* Queues pieces while the stream's window has room. */
static void pump_stream(struct ipc_conn *c)
{
    while (c->stream.active && !c->stream.all_queued && !c->closing &&
           c->queued_bytes < c->stream_window_bytes) {
        Fleetprof__Envelope env;
        Fleetprof__ProfileData piece;
        struct ipc_span slices[IPC_PIECE_MAX_SLICES];
        size_t slice_count;
        int r;

        if (ipc_profile_stream_next_slices(&c->stream.s, &env, &piece, slices, IPC_PIECE_MAX_SLICES,
                                           &slice_count) == 0)
            break;
        if (piece.data.len > 0)
            r = queue_piece(c, &env, ipc_profile_stream_done(&c->stream.s), slices, slice_count);
        else
            r = queue_frame(c, &env, ipc_profile_stream_done(&c->stream.s));
        if (r < 0) {
            stream_fail(c, r);
            break;
        }
        if (ipc_profile_stream_done(&c->stream.s))
            c->stream.all_queued = true;
    }
    if (c->want_shutdown && (!c->stream.active || c->stream.all_queued))
        begin_shutdown(c);
}

/* Starts the stream set up in c->stream.s. */
static int start_stream(struct ipc_conn *c, ipc_stream_done_cb done, void *userdata)
{
    c->stream.active = true;
    c->stream.all_queued = false;
    c->stream.failed = false;
    c->stream.fail_status = 0;
    c->stream.done = done;
    c->stream.userdata = userdata;
    pump_stream(c);
    return 0;
}

int ipc_conn_stream_profile(struct ipc_conn *c, uint64_t request_id, const void *data, size_t len,
                            bool exit_profile, const char *error, ipc_stream_done_cb done,
                            void *userdata)
{
    if (!c || request_id == 0 || (!data && len))
        return -EINVAL;
    if (c->closing || c->want_shutdown || c->write_error)
        return -EPIPE;
    if (c->stream.active)
        return -EBUSY;
    ipc_profile_stream_init(&c->stream.s, request_id, data, len, IPC_PROFILE_PIECE_MAX_BYTES,
                            exit_profile, error);
    return start_stream(c, done, userdata);
}

int ipc_conn_stream_profile_spans(struct ipc_conn *c, uint64_t request_id,
                                  const struct ipc_span *spans, size_t span_count,
                                  bool exit_profile, const char *error, ipc_stream_done_cb done,
                                  void *userdata)
{
    if (!c || request_id == 0 || (!spans && span_count))
        return -EINVAL;
    for (size_t i = 0; i < span_count; i++)
        if (!spans[i].data && spans[i].len)
            return -EINVAL;
    if (c->closing || c->want_shutdown || c->write_error)
        return -EPIPE;
    if (c->stream.active)
        return -EBUSY;
    ipc_profile_stream_init_spans(&c->stream.s, request_id, spans, span_count,
                                  IPC_PROFILE_PIECE_MAX_BYTES, exit_profile, error);
    return start_stream(c, done, userdata);
}

void ipc_conn_close(struct ipc_conn *c)
{
    if (c)
        ipc__conn_fail(c, 0, "closed locally");
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct ipc_conn *c = container_of(req, struct ipc_conn, shutdown_req);

    /* UV_ECANCELED: closed meanwhile; the close path reports it. */
    if (status < 0 && status != UV_ECANCELED)
        ipc__conn_fail(c, status, "shutdown failed");
    else
        ipc__conn_fail(c, 0, "closed locally");
}

static void begin_shutdown(struct ipc_conn *c)
{
    int r;

    if (c->shutting_down || c->closing)
        return;
    c->shutting_down = true;
    r = uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->pipe, on_shutdown);
    if (r < 0)
        ipc__conn_fail(c, r, "shutdown failed");
}

void ipc_conn_shutdown(struct ipc_conn *c)
{
    if (!c || c->want_shutdown || c->closing)
        return;
    c->want_shutdown = true;
    if (!c->stream.active || c->stream.all_queued)
        begin_shutdown(c);
}

int ipc_conn_peer(const struct ipc_conn *c, struct ipc_peer *ret_peer)
{
    if (!c->has_peer)
        return -ENODATA;
    *ret_peer = c->peer;
    return 0;
}

uint64_t ipc_conn_frames_received(const struct ipc_conn *c)
{
    return c->reader.frames;
}

uint64_t ipc_conn_frames_sent(const struct ipc_conn *c)
{
    return c->frames_sent;
}

int ipc_conn_fileno(const struct ipc_conn *c)
{
    uv_os_fd_t fd;

    if (uv_fileno((const uv_handle_t *)&c->pipe, &fd) < 0)
        return -EBADF;
    return fd;
}
