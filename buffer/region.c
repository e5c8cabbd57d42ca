/* buffer/region.c - chunks in a file another process can read (region.h).
 *
 * The file grows by segments (each its own mapping; earlier chunks never move), doubling up
 * to BUF_REGION_MAX_SEGMENT_SLOTS slots. A destroyed chunk's slot has its pages punched out,
 * so memory is given back exactly as free() would, and its slot is reused first.
 */
#include "buffer/region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buffer/buf-internal.h"
#include "buffer/leb128.h"
#include "common/grow.h"
#include "common/hash.h"

_Static_assert(BUF_REGION_SLOT_PREFIX + offsetof(struct buf_chunk, header) ==
                       BUF_REGION_CHUNK_OFFSET,
               "the chunk header's place in a slot is a file format");

#define BUF_REGION_MAX_SEGMENTS      32u
#define BUF_REGION_FIRST_SEGMENT     4u
#define BUF_REGION_MAX_SEGMENT_SLOTS 256u

struct region_segment {
    uint8_t *base;
    uint32_t first_slot;
    uint32_t slots;
};

struct buf_region {
    int fd;
    uint8_t *head; /* mapping of [0, header_bytes): the header and the description areas */
    uint32_t chunk_bytes;
    uint32_t slot_bytes;
    uint32_t slot_count;
    uint64_t size;
    struct region_segment segments[BUF_REGION_MAX_SEGMENTS];
    uint32_t segment_count;
    uint32_t *free_slots; /* a stack of slot indices, destroyed chunks' first */
    uint32_t free_count;
    size_t free_capacity;
    uint64_t generation;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ftruncate() past RLIMIT_FSIZE (memfds included) fails with EFBIG and raises SIGXFSZ,
 * whose default action kills the program: never go there. */
static int check_file_size_limit(uint64_t size)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && size > rl.rlim_cur)
        return -EFBIG;
    return 0;
}

static uint32_t slot_bytes_for(uint32_t chunk_bytes)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t need = BUF_REGION_SLOT_PREFIX + sizeof(struct buf_chunk) + (uint64_t)chunk_bytes;

    return (uint32_t)((need + page - 1) / page * page);
}

int buf_region_new(uint32_t chunk_bytes, const char *path, struct buf_region **ret_region)
{
    struct buf_region_header *h;
    struct buf_region *r;
    void *head;
    int fd, e;

    if (chunk_bytes == 0 || chunk_bytes > BUF_CHUNK_MAX_BYTES / 2)
        return -EINVAL;
    if (sysconf(_SC_PAGESIZE) > (long)BUF_REGION_PAGE_BYTES)
        return -EINVAL; /* the header must be a whole number of pages */
    e = check_file_size_limit(BUF_REGION_HEADER_BYTES);
    if (e < 0)
        return e;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    if (path)
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    else
        fd = memfd_create("fleetprof-chunks", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        e = errno;
        free(r);
        return -e;
    }
    /* Sparse: the description areas cost only the pages a description fills. */
    if (ftruncate(fd, BUF_REGION_HEADER_BYTES) < 0)
        goto fail;
    /* The reader may rely on the file never shrinking under it (a mapping past its end
     * would fault); growing stays allowed. */
    if (!path && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0)
        goto fail;
    head = mmap(NULL, BUF_REGION_HEADER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (head == MAP_FAILED)
        goto fail;
    h = head;
    h->version = BUF_REGION_VERSION;
    h->header_bytes = BUF_REGION_HEADER_BYTES;
    h->slot_bytes = slot_bytes_for(chunk_bytes);
    h->chunk_bytes = chunk_bytes;
    h->pid = (int32_t)getpid();
    h->created_ns = now_ns();
    h->meta_bytes = BUF_REGION_META_BYTES;
    /* Last: a reader that sees the magic sees a whole header. */
    __atomic_store_n(&h->magic, BUF_REGION_MAGIC, __ATOMIC_RELEASE);
    r->fd = fd;
    r->head = head;
    r->chunk_bytes = chunk_bytes;
    r->slot_bytes = h->slot_bytes;
    r->size = BUF_REGION_HEADER_BYTES;
    *ret_region = r;
    return 0;

fail:
    e = errno;
    (void)close(fd);
    if (path)
        (void)unlink(path);
    free(r);
    return -e;
}

static uint64_t fnv1a(const uint8_t *p, size_t len)
{
    return fleetprof_fnv1a64(p, len, FLEETPROF_FNV64_SEED);
}

void buf_region_record_crash(struct buf_region *r, const struct buf_region_crash *crash)
{
    struct buf_region_crash *at = (struct buf_region_crash *)(r->head + BUF_REGION_CRASH_OFFSET);
    uint32_t expected = 0;

    /* Claimed by the first thread to crash (a second fatal signal may come on another). */
    if (!__atomic_compare_exchange_n(&at->reserved, &expected, 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return;
    at->signal = crash->signal;
    at->code = crash->code;
    at->tid = crash->tid;
    at->address = crash->address;
    at->time_ns = crash->time_ns;
    at->frame_count = crash->frame_count < BUF_REGION_CRASH_FRAMES ? crash->frame_count
                                                                   : BUF_REGION_CRASH_FRAMES;
    for (uint32_t i = 0; i < at->frame_count; i++)
        at->frames[i] = crash->frames[i];
    __atomic_store_n(&at->magic, BUF_REGION_CRASH_MAGIC, __ATOMIC_RELEASE);
}

void buf_region_record_crash_frames(struct buf_region *r, const uint64_t *frames,
                                    uint32_t frame_count)
{
    struct buf_region_crash *at = (struct buf_region_crash *)(r->head + BUF_REGION_CRASH_OFFSET);

    if (frame_count > BUF_REGION_CRASH_FRAMES)
        frame_count = BUF_REGION_CRASH_FRAMES;
    if (at->tid != (int32_t)gettid())
        return; /* another thread's crash was recorded first */
    for (uint32_t i = 0; i < frame_count; i++)
        at->frames[i] = frames[i];
    __atomic_store_n(&at->frame_count, frame_count, __ATOMIC_RELEASE);
}

void buf_region_mark_exec(struct buf_region *r, uint64_t now_ns, const char *into,
                          uint64_t cpu_accounted_ns)
{
    struct buf_region_exec *at = (struct buf_region_exec *)(r->head + BUF_REGION_EXEC_OFFSET);
    uint32_t n = 0;

    if (now_ns) {
        __atomic_store_n(&at->magic, 0, __ATOMIC_RELAXED);
        while (into && into[n] && n < BUF_REGION_EXEC_PATH_MAX) {
            at->path[n] = into[n];
            n++;
        }
        at->path_len = n;
        at->cpu_accounted_ns = cpu_accounted_ns;
        __atomic_store_n(&at->magic, BUF_REGION_EXEC_MAGIC, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&((struct buf_region_header *)r->head)->exec_ns, now_ns, __ATOMIC_RELEASE);
}

void buf_region_mark_profile_written(struct buf_region *r)
{
    __atomic_store_n(&((struct buf_region_header *)r->head)->profile_written, 1u, __ATOMIC_RELEASE);
}

void buf_region_mark_slots_given_up(struct buf_region *r)
{
    __atomic_store_n(&((struct buf_region_header *)r->head)->slots_given_up, 1u, __ATOMIC_RELEASE);
}

void buf_region_note_unprofiled_child(struct buf_region *r, int32_t pid)
{
    struct buf_region_header *h = (struct buf_region_header *)r->head;
    uint32_t i = __atomic_fetch_add(&h->unprofiled_count, 1u, __ATOMIC_RELAXED);

    /* A reader that finds 0 at an index below the count comes back for it later. */
    if (i < BUF_REGION_UNPROFILED_MAX)
        __atomic_store_n(&h->unprofiled_pids[i], pid, __ATOMIC_RELEASE);
}

void *buf_region_header_page(struct buf_region *r)
{
    return r->head;
}

uint64_t buf_region_eviction_ns(const struct buf_region *r)
{
    return __atomic_load_n(&((const struct buf_region_header *)r->head)->evict_ns,
                           __ATOMIC_ACQUIRE);
}

void buf_region_header_store_eviction(struct buf_region_header *header, uint64_t done_ns)
{
    __atomic_store_n(&header->evict_ns, done_ns, __ATOMIC_RELEASE);
}

int buf_region_set_meta(struct buf_region *r, const void *bytes, size_t len)
{
    struct buf_region_header *h = (struct buf_region_header *)r->head;
    uint64_t seq = h->meta_seq + 1;
    unsigned area = (unsigned)(seq & 1);

    if (len > BUF_REGION_META_BYTES)
        return -E2BIG;
    /* The other area is not read until meta_seq names it. */
    memcpy(r->head + BUF_REGION_PAGE_BYTES + (size_t)area * BUF_REGION_META_BYTES, bytes, len);
    h->meta_len[area] = (uint32_t)len;
    h->meta_hash[area] = fnv1a(bytes, len);
    __atomic_store_n(&h->meta_seq, seq, __ATOMIC_RELEASE);
    return 0;
}

struct buf_region *buf_region_free(struct buf_region *r)
{
    if (!r)
        return NULL;
    for (uint32_t i = 0; i < r->segment_count; i++)
        (void)munmap(r->segments[i].base, (size_t)r->segments[i].slots * r->slot_bytes);
    (void)munmap(r->head, BUF_REGION_HEADER_BYTES);
    if (r->fd >= 0)
        (void)close(r->fd);
    free(r->free_slots);
    free(r);
    return NULL;
}

int buf_region_fd(const struct buf_region *r)
{
    return r->fd;
}

void buf_region_set_fd(struct buf_region *r, int fd)
{
    r->fd = fd;
}

uint64_t buf_region_size(const struct buf_region *r)
{
    return r->size;
}

static int push_free(struct buf_region *r, uint32_t slot)
{
    if (FLEETPROF_GROW(r->free_slots, r->free_capacity, (size_t)r->free_count + 1) < 0)
        return -ENOMEM;
    r->free_slots[r->free_count++] = slot;
    return 0;
}

static int grow(struct buf_region *r)
{
    struct region_segment *s;
    uint32_t slots = r->segment_count ? r->segments[r->segment_count - 1].slots * 2
                                      : BUF_REGION_FIRST_SEGMENT;
    uint64_t bytes;
    void *base;

    if (slots > BUF_REGION_MAX_SEGMENT_SLOTS)
        slots = BUF_REGION_MAX_SEGMENT_SLOTS;
    if (r->fd < 0 || r->segment_count == BUF_REGION_MAX_SEGMENTS ||
        r->slot_count + slots > BUF_REGION_MAX_SLOTS)
        return -ENOSPC;
    bytes = (uint64_t)slots * r->slot_bytes;
    if (check_file_size_limit(r->size + bytes) < 0)
        return -EFBIG;
    /* Pages of a memfd or sparse file cost nothing until written. */
    if (ftruncate(r->fd, (off_t)(r->size + bytes)) < 0)
        return -errno;
    base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)r->size);
    if (base == MAP_FAILED)
        return -errno;
    s = &r->segments[r->segment_count];
    s->base = base;
    s->first_slot = r->slot_count;
    s->slots = slots;
    /* Lowest index on top, so slots are used in file order. */
    for (uint32_t i = slots; i-- > 0;) {
        if (push_free(r, r->slot_count + i) < 0) {
            r->free_count -= slots - 1 - i;
            (void)munmap(base, bytes);
            return -ENOMEM;
        }
    }
    r->segment_count++;
    r->slot_count += slots;
    r->size += bytes;
    return 0;
}

static uint8_t *slot_address(const struct buf_region *r, uint32_t slot)
{
    for (uint32_t i = 0; i < r->segment_count; i++) {
        const struct region_segment *s = &r->segments[i];

        if (slot - s->first_slot < s->slots)
            return s->base + (size_t)(slot - s->first_slot) * r->slot_bytes;
    }
    return NULL;
}

int buf__region_chunk_new(struct buf_region *r, struct buf_chunk **ret_chunk)
{
    struct buf_region_slot *slot;
    struct buf_chunk *c;
    uint32_t index;
    int e;

    if (r->free_count == 0 && (e = grow(r)) < 0)
        return e;
    index = r->free_slots[--r->free_count];
    slot = (struct buf_region_slot *)slot_address(r, index);
    if (!slot)
        return -EFAULT; /* not reached: free indices are all mapped */
    c = (struct buf_chunk *)((uint8_t *)slot + BUF_REGION_SLOT_PREFIX);
    memset(c, 0, sizeof(*c));
    c->state = BUF_CHUNK_CREATED;
    c->origin = BUF_CHUNK_ORIGIN_REGION;
    c->header.magic = BUF_CHUNK_MAGIC;
    c->header.buffer_bytes = r->chunk_bytes;
    slot->index = index;
    slot->generation = ++r->generation;
    slot->owner_tid = (int32_t)gettid();
    /* Last: a reader takes a slot with this magic to hold a whole chunk header. */
    __atomic_store_n(&slot->magic, BUF_REGION_SLOT_MAGIC, __ATOMIC_RELEASE);
    *ret_chunk = c;
    return 0;
}

void buf__region_chunk_free(struct buf_region *r, struct buf_chunk *c)
{
    uint8_t *slot = (uint8_t *)c - BUF_REGION_SLOT_PREFIX;

    /* The index from the address, not from the slot's header: the pages are shared. */
    for (uint32_t i = 0; i < r->segment_count; i++) {
        const struct region_segment *s = &r->segments[i];
        size_t at = (size_t)(slot - s->base);

        if (slot < s->base || at >= (size_t)s->slots * r->slot_bytes)
            continue;
        /* Gives the pages back (they read as zeros after), as free() of a big block would.
         * Where the file system cannot punch holes, the slot at least stops looking like a
         * chunk. */
        if (madvise(slot, r->slot_bytes, MADV_REMOVE) < 0)
            __atomic_store_n((uint32_t *)slot, 0, __ATOMIC_RELEASE);
        /* A slot whose index cannot be remembered is leaked, not reused twice. */
        (void)push_free(r, s->first_slot + (uint32_t)(at / r->slot_bytes));
        return;
    }
}

uint32_t buf__region_chunk_bytes(const struct buf_region *r)
{
    return r->chunk_bytes;
}

/* ---- reading ------------------------------------------------------------------------ */

struct found_chunk {
    struct buf_chunk_header header; /* copied: the image may change under us */
    const uint8_t *bytes;
};

static int by_range_start(const void *a, const void *b)
{
    uint64_t x = ((const struct found_chunk *)a)->header.range_start;
    uint64_t y = ((const struct found_chunk *)b)->header.range_start;

    return x < y ? -1 : x > y;
}

struct count_ctx {
    buf_read_cb cb;
    void *userdata;
    uint64_t bytes; /* of the blocks delivered from the chunk being walked */
};

static int count_block(struct buf_entry_reader *reader, uint64_t block_index, void *userdata)
{
    struct count_ctx *ctx = userdata;
    size_t size = reader->len[0] + reader->len[1];

    ctx->bytes += size + buf_uleb128_size(size);
    return ctx->cb(reader, block_index, ctx->userdata);
}

static bool header_usable(const struct buf_region_header *h, uint64_t len)
{
    return h->magic == BUF_REGION_MAGIC && h->version == BUF_REGION_VERSION &&
           h->meta_bytes <= BUF_REGION_META_BYTES &&
           h->header_bytes >= BUF_REGION_PAGE_BYTES + 2 * (uint64_t)h->meta_bytes &&
           h->header_bytes <= len && h->chunk_bytes > 0 &&
           h->chunk_bytes <= BUF_CHUNK_MAX_BYTES / 2 &&
           h->slot_bytes >=
                   (uint64_t)BUF_REGION_CHUNK_OFFSET + BUF_CHUNK_HEADER_BYTES + h->chunk_bytes;
}

int buf_region_read_meta(const uint8_t *mem, size_t len, const uint8_t **ret_bytes, size_t *ret_len)
{
    struct buf_region_header h;

    if (len < sizeof(h))
        return -EBADMSG;
    memcpy(&h, mem, sizeof(h));
    if (!header_usable(&h, len))
        return -EBADMSG;
    if (h.meta_seq == 0)
        return -ENOENT;
    /* The current area, else the previous one (the writer died before publishing, or the
     * current one was damaged): an older description beats none. */
    for (unsigned k = 0; k < 2; k++) {
        unsigned area = (unsigned)((h.meta_seq - k) & 1);
        const uint8_t *p = mem + BUF_REGION_PAGE_BYTES + (size_t)area * h.meta_bytes;

        if (h.meta_len[area] > h.meta_bytes || (k == 1 && h.meta_seq == 1))
            continue;
        if (fnv1a(p, h.meta_len[area]) != h.meta_hash[area])
            continue;
        *ret_bytes = p;
        *ret_len = h.meta_len[area];
        return 0;
    }
    return -ENOENT;
}

int buf_region_read_header(const uint8_t *mem, size_t len, struct buf_region_header *ret)
{
    if (len < sizeof(*ret))
        return -EBADMSG;
    memcpy(ret, mem, sizeof(*ret));
    return header_usable(ret, len) ? 0 : -EBADMSG;
}

int buf_region_header_check(const struct buf_region_header *h, uint64_t file_bytes)
{
    return header_usable(h, file_bytes) ? 0 : -EBADMSG;
}

int buf_region_read_exec(const uint8_t *mem, size_t len, uint64_t *ret_exec_ns, char *into,
                         size_t into_size)
{
    struct buf_region_header h;
    struct buf_region_exec e;
    size_t n;

    if (len < BUF_REGION_PAGE_BYTES)
        return -EBADMSG;
    memcpy(&h, mem, sizeof(h));
    if (!header_usable(&h, len))
        return -EBADMSG;
    if (!h.exec_ns)
        return -ENOENT;
    *ret_exec_ns = h.exec_ns;
    if (into_size == 0)
        return 0;
    memcpy(&e, mem + BUF_REGION_EXEC_OFFSET, sizeof(e));
    n = e.magic == BUF_REGION_EXEC_MAGIC && e.path_len <= BUF_REGION_EXEC_PATH_MAX ? e.path_len : 0;
    if (n >= into_size)
        n = into_size - 1;
    memcpy(into, e.path, n);
    into[n] = '\0';
    return 0;
}

int buf_region_read_exec_cpu(const uint8_t *mem, size_t len, uint64_t *ret_cpu_ns)
{
    struct buf_region_header h;
    struct buf_region_exec e;

    if (len < BUF_REGION_EXEC_OFFSET + sizeof(e) || len < sizeof(h))
        return -EBADMSG;
    memcpy(&h, mem, sizeof(h));
    if (h.magic != BUF_REGION_MAGIC || h.version != BUF_REGION_VERSION)
        return -EBADMSG;
    memcpy(&e, mem + BUF_REGION_EXEC_OFFSET, sizeof(e));
    if (!h.exec_ns || e.magic != BUF_REGION_EXEC_MAGIC)
        return -ENOENT;
    *ret_cpu_ns = e.cpu_accounted_ns;
    return 0;
}

int buf_region_read_crash(const uint8_t *mem, size_t len, struct buf_region_crash *ret)
{
    struct buf_region_header h;

    if (len < sizeof(h))
        return -EBADMSG;
    memcpy(&h, mem, sizeof(h));
    if (!header_usable(&h, len))
        return -EBADMSG;
    memcpy(ret, mem + BUF_REGION_CRASH_OFFSET, sizeof(*ret));
    if (ret->magic != BUF_REGION_CRASH_MAGIC)
        return -ENOENT;
    if (ret->frame_count > BUF_REGION_CRASH_FRAMES)
        ret->frame_count = BUF_REGION_CRASH_FRAMES;
    return 0;
}

int buf_region_read_each(const uint8_t *mem, size_t len, buf_read_cb cb, void *userdata,
                         struct buf_region_stats *ret_stats)
{
    struct buf_region_stats stats = {0};
    struct buf_region_header h;
    struct found_chunk *found = NULL;
    size_t found_count = 0;
    uint64_t slots;
    int r = 0;

    if (ret_stats)
        *ret_stats = stats;
    if (len < sizeof(h))
        return -EBADMSG;
    memcpy(&h, mem, sizeof(h));
    if (!header_usable(&h, len))
        return -EBADMSG;
    stats.pid = h.pid;
    stats.created_ns = h.created_ns;
    slots = (len - h.header_bytes) / h.slot_bytes;
    if (slots > BUF_REGION_MAX_SLOTS)
        slots = BUF_REGION_MAX_SLOTS; /* a writer never makes more */
    stats.slots = slots;
    found = calloc(slots ? slots : 1, sizeof(*found));
    if (!found)
        return -ENOMEM;

    for (uint64_t i = 0; i < slots; i++) {
        const uint8_t *slot = mem + h.header_bytes + i * h.slot_bytes;
        struct buf_region_slot sh;
        struct found_chunk *f = &found[found_count];

        memcpy(&sh, slot, sizeof(sh));
        if (sh.magic != BUF_REGION_SLOT_MAGIC)
            continue; /* never used, or destroyed */
        memcpy(&f->header, slot + BUF_REGION_CHUNK_OFFSET, sizeof(f->header));
        if (f->header.range_start == 0 || f->header.past_last_block_offset == 0)
            continue; /* recycled or empty */
        if (f->header.magic != BUF_CHUNK_MAGIC || f->header.buffer_bytes != h.chunk_bytes) {
            stats.corrupt_chunks++;
            continue;
        }
        f->bytes = slot + BUF_REGION_CHUNK_OFFSET + BUF_CHUNK_HEADER_BYTES;
        found_count++;
    }
    qsort(found, found_count, sizeof(*found), by_range_start);

    for (size_t i = 0; i < found_count && r == 0; i++) {
        struct buf__chunk_view cv = {&found[i].header, found[i].bytes};
        struct buf__chunk_view nv;
        struct count_ctx ctx = {cb, userdata, 0};
        const struct buf_chunk_header *ch = &found[i].header;

        if (i + 1 < found_count)
            nv = (struct buf__chunk_view){&found[i + 1].header, found[i + 1].bytes};
        r = buf__walk_blocks(&cv, i + 1 < found_count ? &nv : NULL, count_block, &ctx,
                             &stats.blocks, &stats.skipped_tails);
        if (r == -EBADMSG) {
            uint64_t used = ch->past_last_block_offset < ch->buffer_bytes
                                    ? ch->past_last_block_offset
                                    : ch->buffer_bytes;
            uint64_t from = ch->first_block_offset < used ? ch->first_block_offset : used;

            stats.corrupt_chunks++;
            stats.torn_bytes += used - from > ctx.bytes ? used - from - ctx.bytes : 0;
            r = 0;
        } else if (r == 0) {
            stats.chunks++;
        }
    }
    free(found);
    if (ret_stats)
        *ret_stats = stats;
    return r;
}
