/* child/entry/preload-credentials.c - a forked child joins the fleet before it gives up the
 * user the daemon accepts.
 *
 * A forked child connects to the daemon at its start (its first tick, or the first call that
 * needs the runtime), not in its fork handler: most forked children exec at once, and a
 * connection made for nothing cost each of them and the daemon 0.2-0.3 ms. A server's worker
 * often drops its privileges first thing (nginx, httpd, postfix: setuid to an unprivileged
 * user), after which it can neither reach the daemon's socket (a directory only we may
 * enter) nor pass its check of who connects. So these calls connect it first, as the user it
 * was born as (child/ipc-module/ipc.c, client_before_credentials()), and its start says Hello
 * on that connection: setuid, seteuid, setreuid, setresuid, setfsuid. Group ids do not
 * decide who reaches the socket or who the daemon accepts. The start itself is made there
 * too, if it is still to come: a process that drops its privileges is a worker that will
 * live, not a child about to exec, and a light child (child/lifecycle/runtime.c), which has
 * no timer until its start, would otherwise compute unsampled until it calls the runtime.
 *
 * The C library's functions are looked up in the constructor: setuid and seteuid may be
 * called from a signal handler, where a lookup could not be made.
 */
#include <dlfcn.h>
#include <sys/fsuid.h>
#include <sys/types.h>
#include <unistd.h>

#include "child/client/client.h"
#include "child/include/fleetprof.h"
#include "child/lifecycle/lifecycle.h"

/* Each wrapper: ret name(params), the real one's pointer, called with args. */
#define CREDENTIALS(X)                                                          \
    X(int, setuid, (uid_t uid), (uid))                                          \
    X(int, seteuid, (uid_t uid), (uid))                                         \
    X(int, setreuid, (uid_t ruid, uid_t euid), (ruid, euid))                    \
    X(int, setresuid, (uid_t ruid, uid_t euid, uid_t suid), (ruid, euid, suid)) \
    X(int, setfsuid, (uid_t uid), (uid))

#define DECLARE_REAL(ret, name, params, args) static ret(*real_##name) params;
CREDENTIALS(DECLARE_REAL)

__attribute__((constructor(101))) static void resolve_credentials(void)
{
#define RESOLVE(ret, name, params, args) *(void **)&real_##name = dlsym(RTLD_NEXT, #name);
    CREDENTIALS(RESOLVE)
}

/* Connected first, then started: the start's Hello goes on that connection. */
static void before_credentials(void)
{
    rt_ipc_before_credentials();
    (void)rt_running(); /* a forked child's start still to come is made now */
}

/* A call before the constructor ran (another library's constructor): looked up now. Never
 * missing from a C library that has these calls at all. */
#define DEFINE_CREDENTIALS(ret, name, params, args) \
    FLEETPROF_EXPORT ret name params                \
    {                                               \
        if (!real_##name)                           \
            resolve_credentials();                  \
        before_credentials();                       \
        return real_##name args;                    \
    }
CREDENTIALS(DEFINE_CREDENTIALS)
