/* child/core/loader-gate.c - keeping the loader's and libunwind's locks out of a fork.
 *
 * fork() copies the loader's and libunwind's locks as they are. If one of the runtime's
 * threads (the sampler unwinding a stack copy or listing the modules, the IPC or the gather
 * thread), or the sampling handler on another thread, is inside dl_iterate_phdr, dlopen,
 * dlclose or a libunwind walk at that instant, the child inherits a lock nobody will
 * release, and its first look at its modules or its stacks hangs for ever: forked workers
 * hung in their deferred start (the sampler waiting in dl_iterate_phdr, the exiting main
 * thread for the sampler) and at exit (unwinding their last stack copies in libunwind's
 * cache lock) (workload fork-loader: 1 to 2 children in 100 with stacks copied). So the
 * runtime's own entries into the loader (preload.c's wrappers, for its own threads) and into
 * libunwind (stackwalk.c, stackwalk-copy.c) pass a gate that a fork closes: the fork waits
 * for those inside to leave (at most 1 s: one waiting for a loader lock that the forking
 * thread holds, a fork from a constructor, would never leave), the runtime's threads wait
 * for the fork to end, and the handler walks frame pointers meanwhile. The program's own
 * loader calls are not gated: they race with its forks as they would without us.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "child/core/core.h"

static _Atomic int loader_gate_closed;
static _Atomic int loader_gate_inside; /* threads between enter and leave */
static __thread int loader_gate_depth __attribute__((tls_model("initial-exec")));

bool rt_loader_gate_try_enter(void)
{
    if (loader_gate_depth > 0) {
        loader_gate_depth++;
        return true;
    }
    /* Sequentially consistent, against the fork's store then load: either it sees us
     * inside, or we see it closed. */
    if (atomic_load(&loader_gate_closed))
        return false;
    atomic_fetch_add(&loader_gate_inside, 1);
    if (atomic_load(&loader_gate_closed)) {
        atomic_fetch_sub(&loader_gate_inside, 1);
        return false;
    }
    loader_gate_depth = 1;
    return true;
}

void rt_loader_gate_enter(void)
{
    static const struct timespec nap = {0, 100 * 1000};

    /* At most 2 s (the fork itself waits 1 s): a caller in a signal handler on the forking
     * thread would otherwise wait for itself. Then in anyway, as before the gate. */
    for (int i = 0; i < 20000; i++) {
        if (rt_loader_gate_try_enter())
            return;
        (void)nanosleep(&nap, NULL);
    }
    atomic_fetch_add(&loader_gate_inside, 1);
    loader_gate_depth = 1;
}

bool rt_loader_gate_wait_empty(void)
{
    struct timespec step = {0, 50000};

    for (int i = 0; i < 20000; i++) { /* 1 s */
        if (atomic_load(&loader_gate_inside) == 0)
            return true;
        (void)nanosleep(&step, NULL);
    }
    return false;
}

void rt_loader_gate_leave(void)
{
    if (--loader_gate_depth == 0)
        atomic_fetch_sub(&loader_gate_inside, 1);
}

static void loader_gate_before_fork(void)
{
    static const struct timespec nap = {0, 100 * 1000};

    atomic_store(&loader_gate_closed, 1);
    for (int i = 0; i < 10000 && atomic_load(&loader_gate_inside) > 0; i++)
        (void)nanosleep(&nap, NULL);
}

static void loader_gate_after_fork_parent(void)
{
    atomic_store(&loader_gate_closed, 0);
}

static void loader_gate_after_fork_child(void)
{
    /* The other threads are gone; this one was not inside (it was forking). */
    atomic_store(&loader_gate_inside, 0);
    atomic_store(&loader_gate_closed, 0);
}

void rt_loader_gate_install(void)
{
    (void)pthread_atfork(loader_gate_before_fork, loader_gate_after_fork_parent,
                         loader_gate_after_fork_child);
}
