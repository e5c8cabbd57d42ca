/* daemon/region.c - a connected child's chunk region, on the daemon's side: accepted (a memfd
 * it can read safely), its header page mapped for evictions, and what its header says (an
 * exec, a profile written), until it is released. Regions are another process's memory:
 * every read is checked, and a size is bounded before anything is copied.
 */
#include "buffer/region.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core.h"
#include "daemon/daemon-internal.h"
#include "daemon/daemon.h"

/* The largest region a child of this daemon can make: its buffer limit's chunks, the few a
 * manager holds besides, in slots, and the header. */
uint64_t daemon__region_limit(const struct daemon *d)
{
    uint64_t chunk = d->opt.chunk_bytes ? d->opt.chunk_bytes : DAEMON_CHUNK_BYTES;
    uint64_t limit = d->opt.process_limit_bytes ? d->opt.process_limit_bytes : 64u << 20;

    /* Twice the limit covers slot rounding and a child's own larger limit up to that. */
    return BUF_REGION_HEADER_BYTES + 2 * (limit + 8 * (chunk + 2 * 4096u));
}

/* Maps the header page of c's region for evictions. The file cannot shrink (sealed, checked
 * by the caller) and fstat said it holds the page, so the mapping never faults; the child
 * can still scribble on the page, which only changes what it reads back itself. */
static void map_eviction_page(struct conn *c, const struct stat *st)
{
    struct buf_region_header h;
    const char *why = NULL;
    void *page = MAP_FAILED;

    if ((uint64_t)st->st_size < BUF_REGION_PAGE_BYTES)
        why = "shorter than its header page";
    else
        page = mmap(NULL, BUF_REGION_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, c->region_fd,
                    0);
    if (!why && page == MAP_FAILED)
        why = strerror(errno); /* e.g. sealed against writes */
    if (!why) {
        memcpy(&h, page, sizeof(h));
        if (buf_region_header_check(&h, (uint64_t)st->st_size) < 0)
            why = "its header is not a chunk region's";
    }
    if (why) {
        daemon__log(c->d, DAEMON_LOG_INFO,
                    "child %d (%s): evictions go by message, not through its region: %s",
                    (int)c->pid, c->name, why);
        if (page != MAP_FAILED)
            (void)munmap(page, BUF_REGION_PAGE_BYTES);
        return;
    }
    c->evict_page = page;
    /* Whatever the page says now is the child's business: ours starts from nothing. */
    c->evict_ns = 0;
}

void daemon__region_accept(struct conn *c, int fd, bool evictions)
{
    struct daemon *d = c->d;
    const char *why = NULL;
    struct stat st;
    int seals;

    /* A region the child could shrink would fault a reader that mapped it; one it could
     * grow without bound would make us copy without bound. */
    seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        why = "not a memory file";
    else if (seals < 0 || !(seals & F_SEAL_SHRINK))
        why = "not sealed against shrinking (F_SEAL_SHRINK), so reading it could fault";
    else if ((uint64_t)st.st_size > daemon__region_limit(d))
        why = "larger than a region of its buffer limit can be";
    if (why) {
        daemon__log(d, DAEMON_LOG_WARNING,
                    "child %d (%s): chunk region refused: %s; it will not be recovered if it "
                    "dies",
                    (int)c->pid, c->name, why);
        (void)close(fd);
        return;
    }
    c->region_fd = fd;
    if (evictions)
        map_eviction_page(c, &st);
}

bool daemon__region_evict(struct conn *c, uint64_t done_ns)
{
    if (!c->evict_page)
        return false;
    /* No message and no wake-up: the child's sampler reads the point on its next tick. Per
     * owner the controller's points only grow; kept so whatever it says, as the child
     * ignores a point that goes backwards. */
    if (done_ns > c->evict_ns) {
        c->evict_ns = done_ns;
        buf_region_header_store_eviction(c->evict_page, done_ns);
    }
    c->region_evictions++;
    c->d->stats.region_evictions++;
    return true;
}

void daemon__region_release(struct conn *c)
{
    if (c->evict_page) {
        (void)munmap(c->evict_page, BUF_REGION_PAGE_BYTES);
        c->evict_page = NULL;
    }
    if (c->region_fd >= 0) {
        (void)close(c->region_fd);
        c->region_fd = -1;
    }
}

/* Whether the region's owner marked its exec (its connection closed in the exec): that
 * image's life is in its chunks, though the process lives on. */
bool daemon__region_execd(int fd)
{
    struct buf_region_header h;

    return pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == BUF_REGION_MAGIC &&
           h.exec_ns != 0;
}

/* The CPU its exec'd image's profile charges the thread that exec'd (buf_region_exec), or 0
 * (no exec record, an older writer, or a region that cannot be read). */
uint64_t daemon__region_exec_cpu(int fd)
{
    uint8_t page[BUF_REGION_EXEC_OFFSET + sizeof(struct buf_region_exec)];
    uint64_t cpu = 0;

    if (pread(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page) ||
        buf_region_read_exec_cpu(page, sizeof(page), &cpu) < 0)
        return 0;
    return cpu;
}

/* Whether the owner of the region in fd wrote its own profile as it ended. */
bool daemon__region_profile_written(int fd)
{
    struct buf_region_header h;

    return pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == BUF_REGION_MAGIC &&
           h.profile_written != 0;
}
