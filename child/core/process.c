/* child/core/process.c - the profiled process's names (its command line, the profile's
 * product; its program's base name; the title it may set over its argv) and its description,
 * the one the profile writer and the region's description both take. Core: read by the
 * profile writer, the region's description and the daemon client.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "child/core/core.h"

static char product[4096];
static char program_name[256];
static char argv0_at_start[256]; /* argv[0] as it was: a different one is a process title */

/* From n bytes of NUL-separated arguments in product: argv[0] and the program's base name
 * as they are now, then the arguments joined by spaces. */
static void take_command_line(ssize_t n)
{
    const char *base;

    if (n <= 0) {
        (void)snprintf(product, sizeof(product), "pid %d", (int)getpid());
        n = (ssize_t)strlen(product);
    }
    product[n] = '\0';
    (void)snprintf(argv0_at_start, sizeof(argv0_at_start), "%.255s", product);
    base = strrchr(product, '/');
    (void)snprintf(program_name, sizeof(program_name), "%.255s", base ? base + 1 : product);
    for (ssize_t i = 0; i < n - 1; i++)
        if (product[i] == '\0')
            product[i] = ' ';
}

void rt_process_read_command_line(void)
{
    ssize_t n = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

    product[0] = '\0';
    if (fd >= 0) {
        n = read(fd, product, sizeof(product) - 1);
        (void)close(fd);
    }
    take_command_line(n);
}

int rt_process_set_command_line(int argc, char **argv)
{
    size_t n = 0;

    if (argc <= 0 || !argv || !argv[0])
        return -EINVAL;
    /* As /proc/self/cmdline shows it: each argument and its NUL, cut at the buffer's end. */
    for (int i = 0; i < argc && argv[i] && n < sizeof(product) - 1; i++) {
        size_t len = strnlen(argv[i], sizeof(product) - 1 - n);

        memcpy(product + n, argv[i], len);
        n += len;
        if (n < sizeof(product) - 1)
            product[n++] = '\0';
    }
    take_command_line((ssize_t)n);
    return 0;
}

const char *rt_product(void)
{
    return product;
}

/* The title /proc shows now, into buf, or the program's name when there is none. */
static const char *title_now(char *buf, size_t size)
{
    ssize_t n = 0;
    int fd;

    /* Servers name their processes by writing over their argv (postgres' "postgres:
     * checkpointer", nginx's "nginx: worker process"): what /proc shows now. Read as a
     * setup of the runtime's (rt_fds_capture): a program thread's dup2() onto the number
     * meanwhile waits, instead of being closed by ours after it. */
    rt_fds_capture(RT_FDS_CAPTURE);
    fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        (void)close(fd);
    }
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    if (n <= 0)
        return program_name;
    buf[n] = '\0';
    n = (ssize_t)strlen(buf); /* the first string: the title, or argv[0] */
    while (n > 0 && buf[n - 1] == ' ')
        buf[--n] = '\0'; /* setproctitle() pads with spaces */
    if (n == 0 || strncmp(buf, argv0_at_start, sizeof(argv0_at_start) - 1) == 0)
        return program_name;
    return buf;
}

/* The titles seen by the sampler's look every TITLE_LOOK_NS, each with how long it was
 * shown: a server's process is named by the one it held longest, not by the one it sets
 * on its way out (nginx's "nginx: worker process is shutting down"). A few: a process that
 * changes its title all the time (a progress line) keeps the longest held. */
#define TITLES_MAX    4
#define TITLE_LOOK_NS (100 * 1000 * 1000)

static pthread_mutex_t titles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char text[256];
    uint64_t held_ns;
} titles[TITLES_MAX];
static size_t title_count, title_current;
/* 0: never looked. Written under titles_lock; read without it by the sampler's tick, which
 * takes the lock only once a look is due (not on every tick). */
static _Atomic uint64_t title_looked_ns;

/* titles_lock held. Charges the time since the last look to the title shown then. */
static void look_locked(uint64_t now_ns)
{
    char buf[256];
    const char *t = title_now(buf, sizeof(buf));
    uint64_t looked = atomic_load(&title_looked_ns);
    size_t i, least = 0;

    if (now_ns < looked) /* a caller's clock read before another's look */
        now_ns = looked;
    if (title_count)
        titles[title_current].held_ns += now_ns - looked;
    atomic_store(&title_looked_ns, now_ns);
    for (i = 0; i < title_count && strcmp(titles[i].text, t) != 0; i++)
        if (titles[i].held_ns < titles[least].held_ns)
            least = i;
    if (i == title_count && title_count == TITLES_MAX)
        i = least; /* the least held gives its place */
    else if (i == title_count)
        title_count++;
    if (strcmp(titles[i].text, t) != 0) {
        (void)snprintf(titles[i].text, sizeof(titles[i].text), "%s", t);
        titles[i].held_ns = 0;
    }
    title_current = i;
}

void rt_process_title_tick(uint64_t now_ns)
{
    uint64_t looked = atomic_load_explicit(&title_looked_ns, memory_order_relaxed);

    if (looked && now_ns - looked < TITLE_LOOK_NS)
        return;
    (void)pthread_mutex_lock(&titles_lock);
    look_locked(now_ns);
    (void)pthread_mutex_unlock(&titles_lock);
}

void rt_process_titles_forget(void)
{
    (void)pthread_mutex_init(&titles_lock, NULL); /* a thread of the parent may have held it */
    title_count = 0;
    title_current = 0;
    atomic_store(&title_looked_ns, 0);
}

const char *rt_process_name(char *buf, size_t size)
{
    size_t best = 0;

    (void)pthread_mutex_lock(&titles_lock);
    look_locked(rt_now_ns());
    for (size_t i = 1; i < title_count; i++)
        if (titles[i].held_ns > titles[best].held_ns)
            best = i;
    (void)snprintf(buf, size, "%s", titles[best].text);
    (void)pthread_mutex_unlock(&titles_lock);
    return buf;
}

const char *rt_program_name(void)
{
    return program_name;
}

int rt_process_describe(struct rt_process_description **ret)
{
    struct rt_process_description *pd = calloc(1, sizeof(*pd));
    struct prof_process_info *info;
    uint32_t counter_count;
    int r;

    *ret = NULL;
    if (!pd)
        return -ENOMEM;
    info = &pd->info;
    pd->libs = rt_modules_get(&r);
    if (!pd->libs) {
        free(pd);
        return r;
    }
    r = rt_threads_snapshot(&pd->threads, &pd->thread_count);
    if (r < 0) {
        rt_process_description_free(pd);
        return r;
    }
    /* Counters and schemas are only ever added, with their strings set before the count is
     * raised: the first count entries are stable. */
    counter_count = atomic_load(&rt.counter_count);
    for (uint32_t i = 0; i < counter_count; i++)
        pd->counters[i] = (struct prof_counter_info){
                i, rt.counters[i].name, rt.counters[i].category, rt.counters[i].description};
    (void)pthread_mutex_lock(&rt.registry_lock);
    for (uint32_t i = 0; i < rt.schema_count; i++)
        pd->schemas[i] = rt.schemas[i].info;
    info->schema_count = rt.schema_count;
    (void)pthread_mutex_unlock(&rt.registry_lock);

    info->pid = rt.pid;
    info->ppid = (int32_t)getppid();
    info->forked = rt.forked;
    info->name = rt_process_name(pd->title, sizeof(pd->title));
    info->product = rt_product();
    info->process_type = "default";
    info->start_ns = rt.start_ns;
    info->start_epoch_ms = atomic_load(&rt.start_epoch_ms);
    info->interval_ns = atomic_load(&rt.cfg.interval_ns);
    info->stackwalk = rt_stackwalk_name(rt.cfg.stackwalk);
    info->threads = pd->threads;
    info->thread_count = pd->thread_count;
    info->counters = pd->counters;
    info->counter_count = counter_count;
    info->schemas = pd->schemas;
    info->libs = pd->libs;
    info->slow_event_ns = rt.cfg.slow_event_ns;
    info->described_ns = rt_now_ns();
    *ret = pd;
    return 0;
}

void rt_process_description_free(struct rt_process_description *pd)
{
    if (!pd)
        return;
    if (pd->threads)
        rt_threads_snapshot_free(pd->threads, pd->thread_count);
    rt_modules_put(pd->libs);
    free(pd);
}
