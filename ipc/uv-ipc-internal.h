/* ipc/uv-ipc-internal.h - the connection object, shared by uv-conn.c and uv-listener.c. */
#ifndef FLEETPROF_IPC_UV_IPC_INTERNAL_H
#define FLEETPROF_IPC_UV_IPC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ipc/ipc.h"
#include "ipc/uv-ipc.h"

/* <uv.h> brings <sys/param.h>, whose MIN/MAX differ textually from common/macros.h's and
 * would be redefined (an error under -Werror). Take ours. */
#undef MIN
#undef MAX
#include "common/macros.h"

#define IPC_READ_BUF_BYTES ((size_t)64 << 10)

/* One connection. Owned by its loop: allocated by ipc__conn_new(), freed only from the close
 * callback of pipe (libuv uses the handle until then). */
struct ipc_conn {
    uv_pipe_t pipe;                /* the socket; handle.data unused */
    uv_shutdown_t shutdown_req;    /* in flight while shutting_down */
    struct ipc_reader reader;      /* owned: frame reassembly */
    struct ipc_pool pool;          /* owned: buffers for small write requests */
    struct ipc_conn_callbacks cbs; /* copied */
    void *userdata;                /* borrowed, passed to cbs */
    size_t max_frame_bytes;
    size_t max_queued_bytes;
    size_t drain_low_bytes;
    size_t stream_window_bytes;
    size_t queued_bytes; /* frame bytes queued, not yet written */
    uint64_t frames_sent;
    struct ipc_peer peer;
    bool has_peer;
    bool reading;
    bool above_low;           /* queued_bytes went above drain_low_bytes since last drain */
    bool want_shutdown;       /* ipc_conn_shutdown() called */
    bool shutting_down;       /* uv_shutdown() issued */
    bool closing;             /* uv_close() issued */
    int write_error;          /* first failed write while reading went on, 0 if none */
    int received_fd;          /* the descriptor the peer passed (the first), -1 if none */
    uint64_t dropped_fds;     /* further descriptors the peer passed, closed */
    int close_error;          /* reported by on_close */
    const char *close_reason; /* static, or points at reason_buf */
    char reason_buf[160];     /* for formatted close reasons */
    struct {
        bool active;     /* started, done not called yet */
        bool all_queued; /* its last piece is queued, or it failed: no more pieces */
        bool failed;     /* ended with fail_status; done waits for borrowed_writes == 0 */
        int fail_status;
        size_t borrowed_writes; /* queued writes that point into the payload */
        struct ipc_profile_stream s;
        ipc_stream_done_cb done;
        void *userdata;
    } stream;
    uint8_t *read_buf; /* owned, IPC_READ_BUF_BYTES */
};

/* Allocates and uv_pipe_init()s a connection on loop. Returns 0 or a negative errno. */
/* accepts_fds: an accepted (daemon-side) connection, whose peer may pass a descriptor. */
int ipc__conn_new(uv_loop_t *loop, const struct ipc_conn_options *opts, bool accepts_fds,
                  struct ipc_conn **ret_conn);
/* Frees a connection whose pipe was never initialised to a usable state: closes the handle
 * and frees it from the close callback without calling on_close. */
void ipc__conn_discard(struct ipc_conn *conn);
/* Reads SO_PEERCRED into conn->peer. */
int ipc__conn_read_peer(struct ipc_conn *conn);
/* Starts reading. */
int ipc__conn_start(struct ipc_conn *conn);
/* Begins closing with an error and a reason (static or in conn->reason_buf). Idempotent. */
void ipc__conn_fail(struct ipc_conn *conn, int error, const char *reason);

#endif /* FLEETPROF_IPC_UV_IPC_INTERNAL_H */
