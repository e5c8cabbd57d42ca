/* child/client/client.c - child/client/client.h's connection to the daemon, in libfleetprof.so:
 * each rt_ipc_* call goes to the IPC thread of libfleetprof-ipc.so (child/ipc-module/ipc.c) through
 * its table (child/core/ipc-module.h).
 *
 * rt_ipc_start() loads the module when a process first has something to say to a daemon
 * (its Hello; a forked child inherits it loaded). Every other call only looks whether it is
 * loaded (one acquire load, no dlopen: the exit paths, the sampler's tick, the interposers
 * may call them) and does nothing without it: no connection, as when no daemon answers.
 */
#include "child/client/client.h"

#include <errno.h>

#include "child/client/ipc-start.h"
#include "child/include/fleetprof.h"
#include "json/writer.h"

int rt_ipc_start(const char *socket_path, rt_profile_writer *write_profile)
{
    const struct rt_ipc_hooks hooks = {write_profile, fleetprof_pause, fleetprof_resume};
    const struct rt_ipc_module *m = rt_ipc_module(true);

    if (!m)
        return -ELIBACC;
    return m->start(socket_path, &hooks); /* keeps a copy */
}

void rt_ipc_start_deferred(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m)
        m->start_deferred();
}

void rt_ipc_stop(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m)
        m->stop();
}

void rt_ipc_tick(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m)
        m->tick();
}

void rt_ipc_forget_after_fork(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    rt_ipc_module_forget_after_fork();
    if (m)
        m->forget_after_fork();
}

void rt_ipc_spawned(int32_t pid)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m && m->connected())
        m->spawned(pid);
}

bool rt_ipc_connected(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    return m && m->connected();
}

const char *rt_ipc_untrusted_reason(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    return m ? m->untrusted() : NULL;
}

bool rt_ipc_owns_fd(int fd)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    return m && m->owns_fd(fd);
}

int rt_ipc_abandon(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    return m ? m->abandon() : 0;
}

int rt_ipc_give_up(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    return m ? m->give_up() : 0;
}

int rt_ipc_send_exit_profile(struct json_writer *w)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (!m) { /* never connected: rt_ipc_connected() was false */
        json_writer_free(w);
        return -ENOTCONN;
    }
    return m->send_exit_profile(w);
}

bool rt_ipc_exit_in_region_accepted(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    return m && m->exit_in_region_accepted();
}

void rt_ipc_exit_in_region(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m)
        m->exit_in_region();
}

int rt_ipc_symbolize(struct rt_symbol_batch *batch, uint64_t timeout_ns)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    return m ? m->symbolize(batch, timeout_ns) : -ENOTCONN;
}

void rt_ipc_welcome_wait(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m)
        m->welcome_wait();
}

void rt_ipc_before_credentials(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m)
        m->before_credentials();
}

void rt_ipc_before_chroot(void)
{
    const struct rt_ipc_module *m = rt_ipc_module(false);

    if (m)
        m->promote();
}
