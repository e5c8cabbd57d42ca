/* tools/daemon-client.c - connecting a command to a running fleetprofd; see daemon-client.h. */
#include "tools/daemon-client.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int daemon_client_connect(uv_loop_t *loop, const char *socket_path,
                          const struct ipc_conn_callbacks *cbs, void *userdata, char *reason,
                          struct ipc_conn **ret_conn)
{
    int r = ipc_conn_connect(loop, socket_path, NULL, cbs, userdata, reason, IPC_TRUST_REASON_MAX,
                             ret_conn);

    if (r < 0) /* a connection refused after connect(2) is closed from the loop */
        (void)uv_run(loop, UV_RUN_NOWAIT);
    return r;
}

void daemon_client_explain(const char *socket_path, int r, const char *reason)
{
    if (r == -EPERM)
        fprintf(stderr,
                "fleetprof: refusing the daemon socket %s: %s; or pass --socket PATH for a "
                "daemon of yours\n",
                socket_path, reason && *reason ? reason : strerror(-r));
    else if (r == -ENOENT || r == -ECONNREFUSED)
        fprintf(stderr,
                "fleetprof: no daemon is listening on %s; start one with "
                "`fleetprofd --socket %s` or pass --socket PATH (or use `fleetprof record`)\n",
                socket_path, socket_path);
    else if (r == -EACCES)
        fprintf(stderr, "fleetprof: no permission to connect to %s; run as the daemon's user\n",
                socket_path);
    else if (r == -ETIMEDOUT)
        fprintf(stderr, "fleetprof: the daemon on %s did not answer within %d s\n", socket_path,
                DAEMON_CLIENT_TIMEOUT_MS / 1000);
    else if (reason && *reason)
        fprintf(stderr, "fleetprof: cannot talk to the daemon on %s: %s\n", socket_path, reason);
    else
        fprintf(stderr, "fleetprof: cannot talk to the daemon on %s: %s\n", socket_path,
                strerror(-r));
}
