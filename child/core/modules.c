/* child/core/modules.c - the process's modules, collected once per state of the loader.
 *
 * prof_libs_collect_self() reads /proc/self/maps, which the kernel formats path by path
 * (mangle_path, d_path): a tenth of a millisecond in a small process, paid by the region's
 * first description and again by the exit profile of every short-lived child. The list
 * changes only when the loader maps or unmaps an object, which dl_iterate_phdr's
 * dlpi_adds and dlpi_subs count (glibc's own dlopen calls, NSS and iconv, included), so a
 * list is kept and shared until they move. Shared lists are reference-counted: a profile
 * writer may hold one for as long as symbolization takes.
 */
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "child/core/core.h"
#include "profile/libs.h"

struct modules {
    struct prof_libs libs; /* first: rt_modules_put() gets it back from &libs */
    unsigned refs;         /* the cache's own, and one per holder */
    unsigned long long adds, subs;
};

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static struct modules *current;
static _Atomic unsigned loader_generation; /* bumped by every dlopen and dlclose */

unsigned rt_loader_generation(void)
{
    return atomic_load_explicit(&loader_generation, memory_order_acquire);
}

/* Not instrumented, as the loader interposers (preload.c) that call it. */
RT_NO_TSAN void rt_loader_changed(void)
{
    atomic_fetch_add_explicit(&loader_generation, 1, memory_order_release);
}

static int read_loader_counts(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long *counts = data;

    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
        counts[0] = info->dlpi_adds;
        counts[1] = info->dlpi_subs;
    }
    return 1; /* the first object is enough: the counts are the loader's */
}

static void unref_locked(struct modules *m)
{
    if (m && --m->refs == 0) {
        prof_libs_done(&m->libs);
        free(m);
    }
}

const struct prof_libs *rt_modules_get(int *ret_error)
{
    unsigned long long counts[2] = {ULLONG_MAX, ULLONG_MAX};
    struct modules *m;
    int r;

    (void)dl_iterate_phdr(read_loader_counts, counts);
    (void)pthread_mutex_lock(&modules_lock);
    m = current;
    if (m && counts[0] != ULLONG_MAX && m->adds == counts[0] && m->subs == counts[1]) {
        m->refs++;
        (void)pthread_mutex_unlock(&modules_lock);
        return &m->libs;
    }
    (void)pthread_mutex_unlock(&modules_lock);

    /* Collected without the lock; counts read before, so a load meanwhile makes the next
     * call collect again rather than miss it. */
    m = calloc(1, sizeof(*m));
    if (!m) {
        *ret_error = -ENOMEM;
        return NULL;
    }
    r = prof_libs_collect_self(&m->libs);
    if (r < 0) {
        free(m);
        *ret_error = r;
        return NULL;
    }
    m->adds = counts[0];
    m->subs = counts[1];
    m->refs = 2;
    (void)pthread_mutex_lock(&modules_lock);
    unref_locked(current);
    current = m;
    (void)pthread_mutex_unlock(&modules_lock);
    return &m->libs;
}

void rt_modules_put(const struct prof_libs *libs)
{
    if (!libs)
        return;
    (void)pthread_mutex_lock(&modules_lock);
    unref_locked((struct modules *)(uintptr_t)libs);
    (void)pthread_mutex_unlock(&modules_lock);
}

void rt_modules_forget_after_fork(void)
{
    /* The list is still right (the same mappings); only the lock may have been held by a
     * thread that is gone, and so may references, which then are never put: kept. */
    (void)pthread_mutex_init(&modules_lock, NULL);
}
