/* child/core/region.c - the runtime's chunks in a region another process can read
 * (buffer/region.h), so that a process killed or crashed keeps its samples.
 *
 * Without a daemon (none configured, or no socket where one is) and with FLEETPROF_DIR or
 * FLEETPROF_OUTPUT set, the region is the file fleetprof-PID.chunks in that directory: removed once
 * an exit profile is written, left for `fleetprof recover` when the process dies without one.
 * Beside the chunks it keeps a ProcessDescription (threads, modules, counters, marker schemas),
 * rewritten by the sampler when one of them changed, so that the profile can be built from the file
 * alone.
 */
#include "buffer/region.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "child/core/core.h"
#include "child/core/ipc-module.h"
#include "profile/libs.h"
#include "profile/runtime-log.h"

/* A description is rewritten at most this often: a program that starts threads in a burst
 * costs one description per period, not one per thread. */
#define DESCRIBE_PERIOD_NS (10 * 1000 * 1000)

static struct {
    pthread_mutex_t lock; /* region, path, described_* */
    struct buf_region *region;
    char path[PATH_MAX]; /* "" when the region is a memfd */
    unsigned described_loader;
    uint32_t described_counters, described_schemas;
    uint64_t described_threads;
    uint64_t described_ns;
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The directory the region file goes in: FLEETPROF_DIR, else FLEETPROF_OUTPUT's. */
static int region_dir(char *out, size_t size)
{
    const char *slash;

    if (rt.cfg.dir[0])
        return snprintf(out, size, "%s", rt.cfg.dir) < (int)size ? 0 : -ENAMETOOLONG;
    if (!rt.cfg.output[0])
        return -ENOENT;
    slash = strrchr(rt.cfg.output, '/');
    if (!slash)
        return snprintf(out, size, ".") < (int)size ? 0 : -ENAMETOOLONG;
    if (slash == rt.cfg.output)
        return snprintf(out, size, "/") < (int)size ? 0 : -ENAMETOOLONG;
    if ((size_t)(slash - rt.cfg.output) >= size)
        return -ENAMETOOLONG;
    memcpy(out, rt.cfg.output, (size_t)(slash - rt.cfg.output));
    out[slash - rt.cfg.output] = '\0';
    /* A %p in the directory part is the pid, as in the file name. */
    return strstr(out, "%p") ? -EINVAL : 0;
}

/* Packs the current description into the region; with exit_ns, the one the daemon builds
 * this process's exit profile from (with log: profilingLog's runtime numbers). The packing
 * (protobuf-c) is libfleetprof-ipc.so's, loaded here the first time (never on the exit
 * path of a process that had not loaded it: exit_ns); -ELIBACC without it. reg.lock held. */
static int describe_locked(uint64_t exit_ns, const struct prof_runtime_log *log)
{
    const struct rt_ipc_module *m = rt_ipc_module(exit_ns == 0);
    struct rt_process_description *pd = NULL;
    size_t packed = 0;
    uint8_t *out = NULL;
    unsigned loader = rt_loader_generation();
    uint64_t threads_gen = rt_threads_generation();
    int r;

    if (!m)
        return -ELIBACC;
    r = rt_process_describe(&pd);
    if (r < 0)
        return r;
    pd->info.shutdown_ns = exit_ns;
    pd->info.runtime_log = log;
    r = m->pack_description(&pd->info, &out, &packed);
    if (r == 0)
        r = buf_region_set_meta(reg.region, out, packed);
    if (r == 0) {
        reg.described_loader = loader;
        reg.described_counters = (uint32_t)pd->info.counter_count;
        reg.described_schemas = (uint32_t)pd->info.schema_count;
        reg.described_threads = threads_gen;
        reg.described_ns = pd->info.described_ns;
    }
    free(out);
    rt_process_description_free(pd);
    return r;
}

/* The region's file (or memfd) and header, at a high number and protected, not yet given
 * to a chunk manager. -ENOENT: none is asked for. reg.lock held, no region yet. */
static int make_locked(void)
{
    char dir[PATH_MAX];
    int r, fd;

    /* A daemon's child: a memfd, whose descriptor goes to the daemon with Hello. When its
     * socket is not there (no daemon started, or gone), the process profiles alone, as it
     * never tries again: with a directory to write in, its chunks go in a file there, so
     * that a kill or a crash loses none of them. */
    if (rt.cfg.socket[0] &&
        (access(rt.cfg.socket, F_OK) == 0 || region_dir(dir, sizeof(dir)) < 0)) {
        reg.path[0] = '\0';
        r = buf_region_new(rt.cfg.chunk_bytes, NULL, &reg.region);
        goto made;
    }
    r = region_dir(dir, sizeof(dir));
    if (r < 0) /* -ENOENT: no file is asked for, nothing to recover into */
        goto out;
    if (snprintf(reg.path, sizeof(reg.path), "%s/fleetprof-%d.chunks", dir, (int)rt.pid) >=
        (int)sizeof(reg.path)) {
        r = -ENAMETOOLONG;
        goto out;
    }
    if (rt.cfg.dir[0]) /* made at exit anyway; FLEETPROF_OUTPUT's is the user's to make */
        (void)mkdir(dir, 0700);
    r = buf_region_new(rt.cfg.chunk_bytes, reg.path, &reg.region);
    if (r == -EEXIST) {
        /* Left by an earlier image of this process (it exec'd us) or by a process that had
         * our pid before: the first is ours to replace, the second was recovered or never
         * will be by now. */
        (void)unlink(reg.path);
        r = buf_region_new(rt.cfg.chunk_bytes, reg.path, &reg.region);
    }
made:
    if (r < 0)
        goto out;
    /* Out of the numbers a program reuses, and kept through its close-everything sweeps. */
    fd = rt_fd_relocate(buf_region_fd(reg.region));
    buf_region_set_fd(reg.region, fd);
    rt_fd_protect(fd);
out:
    if (r < 0)
        reg.path[0] = '\0';
    return r;
}

int rt_region_make(void)
{
    int r = 0;

    (void)pthread_mutex_lock(&reg.lock);
    if (!reg.region)
        r = make_locked();
    (void)pthread_mutex_unlock(&reg.lock);
    return r == -ENOENT ? 0 : r;
}

int rt_region_open(struct buf_chunk_manager *manager)
{
    int r = 0;

    (void)pthread_mutex_lock(&reg.lock);
    if (!reg.region) /* else made by rt_region_make() (a forked child) */
        r = make_locked();
    if (r < 0)
        goto out;
    /* Described at the first tick, which start_locked() runs once the main thread is in. */
    reg.described_ns = 0;
    r = buf_chunk_manager_local_set_region(manager, reg.region);
    if (r < 0) {
        rt_fd_release(buf_region_fd(reg.region));
        buf_region_set_fd(reg.region, -1);
        reg.region = buf_region_free(reg.region);
        if (reg.path[0])
            (void)unlink(reg.path);
        reg.path[0] = '\0';
    }
out:
    (void)pthread_mutex_unlock(&reg.lock);
    return r == -ENOENT ? 0 : r;
}

void rt_region_tick(uint64_t now_ns)
{
    (void)pthread_mutex_lock(&reg.lock);
    if (reg.region && now_ns - reg.described_ns >= DESCRIBE_PERIOD_NS &&
        (reg.described_loader != rt_loader_generation() ||
         reg.described_counters != atomic_load(&rt.counter_count) ||
         reg.described_schemas != __atomic_load_n(&rt.schema_count, __ATOMIC_ACQUIRE) ||
         reg.described_threads != rt_threads_generation())) {
        int r = describe_locked(0, NULL);

        /* Without the module (said once when it failed to load): no description. */
        if (r == -ELIBACC)
            reg.described_ns = now_ns;
        else if (r < 0)
            rt_debug("cannot describe the process in %s: %s", reg.path, strerror(-r));
    }
    (void)pthread_mutex_unlock(&reg.lock);
}

int rt_region_describe_exit(uint64_t exit_ns, const struct prof_runtime_log *log)
{
    int r = -ENOENT;

    (void)pthread_mutex_lock(&reg.lock);
    /* Only a memfd the daemon holds: a region file is removed once the profile is written. */
    if (reg.region && !reg.path[0])
        r = describe_locked(exit_ns, log);
    (void)pthread_mutex_unlock(&reg.lock);
    return r;
}

int rt_region_fd(void)
{
    int fd;

    (void)pthread_mutex_lock(&reg.lock);
    fd = reg.region ? buf_region_fd(reg.region) : -1;
    (void)pthread_mutex_unlock(&reg.lock);
    return fd;
}

uint64_t rt_region_eviction_ns(void)
{
    /* No lock: the region is freed only in a forked child, before its sampler runs. */
    struct buf_region *region = __atomic_load_n(&reg.region, __ATOMIC_ACQUIRE);

    return region ? buf_region_eviction_ns(region) : 0;
}

void *rt_region_header_page(void)
{
    /* No lock: the region is freed only in a forked child, before its sampler runs. */
    struct buf_region *region = __atomic_load_n(&reg.region, __ATOMIC_ACQUIRE);

    return region ? buf_region_header_page(region) : NULL;
}

bool rt_region_active(void)
{
    return __atomic_load_n(&reg.region, __ATOMIC_ACQUIRE) != NULL;
}

/* Async-signal-safe: called from the crash handler, perhaps while this very thread holds
 * reg.lock, so it takes none; the region is only freed in a forked child. */
void rt_region_record_crash(int sig, int code, uint64_t address, int32_t tid,
                            const uint64_t *frames, uint32_t frame_count)
{
    struct buf_region *region = __atomic_load_n(&reg.region, __ATOMIC_ACQUIRE);
    struct buf_region_crash c;

    if (!region)
        return;
    c.magic = 0;
    c.signal = sig;
    c.code = code;
    c.tid = tid;
    c.address = address;
    c.time_ns = rt_now_ns();
    c.frame_count = frame_count < BUF_REGION_CRASH_FRAMES ? frame_count : BUF_REGION_CRASH_FRAMES;
    c.reserved = 0;
    for (uint32_t i = 0; i < c.frame_count; i++)
        c.frames[i] = frames[i];
    buf_region_record_crash(region, &c);
}

void rt_region_record_crash_frames(const uint64_t *frames, uint32_t frame_count)
{
    struct buf_region *region = __atomic_load_n(&reg.region, __ATOMIC_ACQUIRE);

    if (region)
        buf_region_record_crash_frames(region, frames, frame_count);
}

bool rt_region_give_up_fd(void)
{
    int fd = -1;

    (void)pthread_mutex_lock(&reg.lock);
    if (reg.region) {
        fd = buf_region_fd(reg.region);
        buf_region_set_fd(reg.region, -1);
    }
    (void)pthread_mutex_unlock(&reg.lock);
    rt_fd_release(fd);
    return fd >= 0;
}

bool rt_region_yield_fd(int fd)
{
    int copy;

    (void)pthread_mutex_lock(&reg.lock);
    if (!reg.region || buf_region_fd(reg.region) != fd) {
        (void)pthread_mutex_unlock(&reg.lock);
        return false;
    }
    /* The program is about to put its own file on this number: the region goes on with a
     * copy, or stops growing (it keeps its mappings) if none can be made. */
    copy = rt_fd_relocate(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    rt_fd_unprotect(fd);
    buf_region_set_fd(reg.region, copy);
    if (copy >= 0)
        rt_fd_protect(copy);
    (void)pthread_mutex_unlock(&reg.lock);
    return true;
}

void rt_region_done(bool profile_written)
{
    (void)pthread_mutex_lock(&reg.lock);
    /* A daemon that still holds the region (we lost the connection to it, and wrote our
     * profile to a file instead) must not rebuild it when we are gone. */
    if (profile_written && reg.region)
        buf_region_mark_profile_written(reg.region);
    if (reg.path[0]) {
        if (profile_written)
            (void)unlink(reg.path);
        else
            rt_warn("the samples are kept in %s (fleetprof recover turns it into a profile)",
                    reg.path);
        reg.path[0] = '\0';
    }
    (void)pthread_mutex_unlock(&reg.lock);
}

void rt_region_mark_slots_given_up(void)
{
    (void)pthread_mutex_lock(&reg.lock);
    if (reg.region)
        buf_region_mark_slots_given_up(reg.region);
    (void)pthread_mutex_unlock(&reg.lock);
}

void rt_region_note_unprofiled_child(int32_t pid)
{
    (void)pthread_mutex_lock(&reg.lock);
    if (reg.region)
        buf_region_note_unprofiled_child(reg.region, pid);
    (void)pthread_mutex_unlock(&reg.lock);
}

/* Where a region file goes aside at exec: fleetprof-PID.exec-NS.chunks. */
static char exec_aside[sizeof(reg.path)];

/* Writes PATH less ".chunks", ".exec-", ns in decimal, ".chunks" into out (async-signal-safe:
 * no snprintf). False if it does not fit. */
static bool aside_name(const char *path, uint64_t ns, char *out, size_t size)
{
    static const char suffix[] = ".chunks";
    size_t n = strlen(path), k = 0;
    char digits[24];
    int d = 0;

    if (n < sizeof(suffix) - 1 || strcmp(path + n - (sizeof(suffix) - 1), suffix) != 0)
        return false;
    n -= sizeof(suffix) - 1;
    do {
        digits[d++] = (char)('0' + ns % 10);
        ns /= 10;
    } while (ns);
    if (n + 6 + (size_t)d + sizeof(suffix) > size)
        return false;
    memcpy(out, path, n);
    k = n;
    memcpy(out + k, ".exec-", 6);
    k += 6;
    while (d)
        out[k++] = digits[--d];
    memcpy(out + k, suffix, sizeof(suffix));
    return true;
}

/* Async-signal-safe. The image before the exec ends here without writing a profile: its
 * chunks are its profile. A memfd the daemon holds is marked, and the daemon builds it when
 * the connection closes in the exec; a file is marked and moved aside under a name of its own
 * (the new image makes fleetprof-PID.chunks again), for `fleetprof merge` or `recover`. */
void rt_region_before_exec(const char *into)
{
    struct buf_region *region = __atomic_load_n(&reg.region, __ATOMIC_ACQUIRE);
    uint64_t now = rt_now_ns();
    /* What this image's profile charges the exec'ing thread: its CPU up to its last entry
     * (the sampler's, read racily: the value of this drain or the last). A start still
     * pending wrote nothing: the new image charges all of it. */
    uint64_t accounted = atomic_load(&rt.running) && rt_self ? rt_self->last_cpu_ns : 0;

    if (region)
        buf_region_mark_exec(region, now, into, accounted);
    exec_aside[0] = '\0';
    if (reg.path[0] && (!region || !aside_name(reg.path, now, exec_aside, sizeof(exec_aside)) ||
                        rename(reg.path, exec_aside) < 0)) {
        exec_aside[0] = '\0';
        (void)unlink(reg.path); /* the new image's file takes the name */
    }
}

/* A file left aside by an exec is this process's if it is that recent (a pid reused later
 * finds only older ones). */
#define EXEC_ASIDE_RECENT_NS (10ull * 1000 * 1000 * 1000)

uint64_t rt_region_previous_image_cpu(void)
{
    char dir[PATH_MAX], prefix[48], path[PATH_MAX + 300];
    uint8_t head[BUF_REGION_EXEC_OFFSET + sizeof(struct buf_region_exec)];
    uint64_t best = 0, cpu = 0, now = rt_now_ns();
    size_t plen;
    struct dirent *e;
    DIR *d;
    int fd;

    if (region_dir(dir, sizeof(dir)) < 0)
        return 0;
    plen = (size_t)snprintf(prefix, sizeof(prefix), "fleetprof-%d.exec-", (int)getpid());
    d = opendir(dir);
    if (!d)
        return 0;
    while ((e = readdir(d))) {
        char *end;
        uint64_t ns;

        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        ns = strtoull(e->d_name + plen, &end, 10);
        if (strcmp(end, ".chunks") == 0 && ns > best)
            best = ns;
    }
    (void)closedir(d);
    if (!best || best > now || now - best > EXEC_ASIDE_RECENT_NS ||
        snprintf(path, sizeof(path), "%s/%s%" PRIu64 ".chunks", dir, prefix, best) >=
                (int)sizeof(path))
        return 0;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    if (pread(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
        buf_region_read_exec_cpu(head, sizeof(head), &cpu) < 0)
        cpu = 0;
    (void)close(fd);
    return cpu;
}

void rt_region_after_failed_exec(void)
{
    struct buf_region *region = __atomic_load_n(&reg.region, __ATOMIC_ACQUIRE);

    if (exec_aside[0])
        (void)rename(exec_aside, reg.path);
    exec_aside[0] = '\0';
    if (region)
        buf_region_mark_exec(region, 0, NULL, 0);
}

void rt_region_forget_after_fork(void)
{
    /* The parent's: the pages are shared, so nothing of them is touched; only our own
     * mappings and copy of the descriptor go. */
    (void)pthread_mutex_init(&reg.lock, NULL);
    if (reg.region) {
        /* rt_fds_forget() ran first (on_fork_child_first): the descriptor is no longer
         * listed as ours, so rt_fd_release() would leave it open, and close() is real. */
        if (buf_region_fd(reg.region) >= 0)
            (void)close(buf_region_fd(reg.region));
        buf_region_set_fd(reg.region, -1);
        reg.region = buf_region_free(reg.region);
    }
    reg.path[0] = '\0';
    reg.described_ns = 0;
}
