/* tools/daemon-client.h - how a command (status, capture, top) reaches a running fleetprofd:
 * one way to connect, to a daemon of ours only (ipc_conn_connect()'s checks), and one way to
 * tell the user why it could not.
 */
#ifndef FLEETPROF_TOOLS_DAEMON_CLIENT_H
#define FLEETPROF_TOOLS_DAEMON_CLIENT_H

#include <stddef.h>

#include <uv.h>

#include "ipc/socket-trust.h"
#include "ipc/uv-ipc.h"

/* How long a command waits for the daemon's reply to one request. */
#define DAEMON_CLIENT_TIMEOUT_MS 5000

/* ipc_conn_connect() to socket_path on loop; on failure the loop has released what the
 * attempt set up (it can be closed), and reason (IPC_TRUST_REASON_MAX bytes) says why when
 * the error alone does not. Returns 0 or ipc_conn_connect()'s negative errno. */
int daemon_client_connect(uv_loop_t *loop, const char *socket_path,
                          const struct ipc_conn_callbacks *cbs, void *userdata, char *reason,
                          struct ipc_conn **ret_conn);

/* One line on stderr for a command that could not talk to the daemon at socket_path: r is
 * daemon_client_connect()'s error or a later one (-ETIMEDOUT: no reply in time), reason its
 * sentence or NULL/"". */
void daemon_client_explain(const char *socket_path, int r, const char *reason);

#endif /* FLEETPROF_TOOLS_DAEMON_CLIENT_H */
