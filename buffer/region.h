/* buffer/region.h - chunk memory that outlives its process: a region of fixed-size slots in
 * a sealed memfd (or a file), from which a local-limit manager allocates its chunks, so that
 * the daemon (or `fleetprof recover`) can read the chunks of a process that was killed or
 * crashed. Full layout and rules: docs/buffer-format.md, "Shared chunk regions".
 *
 * Region layout (native endianness; the reader is on the same machine):
 *
 *    0                   4                   8                  12                  16
 *    +-------------------+-------------------+-------------------+-------------------+
 *    | magic "FPRG"      | version (1)       | header_bytes      | slot_bytes        |
 *    +-------------------+-------------------+-------------------+-------------------+
 *    | chunk_bytes       | pid               | created_ns (u64, CLOCK_MONOTONIC)     |
 *    +-------------------+-------------------+---------------------------------------+
 *    | meta_bytes        | meta_len[0]       | meta_len[1]       | profile_written   |
 *    +-------------------+-------------------+-------------------+-------------------+
 *    | meta_seq (u64, 0 = no description yet)| meta_hash[0] (u64)                    |
 *    +---------------------------------------+---------------------------------------+
 *    | meta_hash[1] (u64)                    | exec_ns (u64, 0 = not in exec)        |
 *    +---------------------------------------+---------------------------------------+
 *    | evict_ns (u64, written by the daemon) | slots_given_up    | unprofiled_count  |
 *    +---------------------------------------+-------------------+-------------------+
 *    | unprofiled_pids[64] (i32): children forked after slots_given_up, which start no
 *    | profiler; 0 = not yet written                                                 |
 *    +-------------------------------------------------------------------------------+
 *    ... zeros up to 512
 *    512: the exec record (struct buf_region_exec): the program the owner exec'd into,
 *         written before exec_ns; zeros up to 1024
 *    +---------------------------------------+
 *    1024: the crash record (struct buf_region_crash), magic "FPCR" stored last, by the
 *          owner's fatal signal handler; zeros up to 4096
 *    4096: meta area 0 (meta_bytes), then meta area 1 (meta_bytes): the process description,
 *          written by the owner in the area that is not current, then published by
 *          meta_seq + 1 (area = meta_seq & 1); meta_hash is FNV-1a 64 of its bytes
 *    header_bytes + i * slot_bytes: slot i
 *    +-------------------+-------------------+---------------------------------------+
 *    | magic "FPSL"      | index (i)         | generation (u64, bumped per use)      |
 *    +-------------------+-------------------+---------------------------------------+
 *    | owner tid         | reserved (0)                                              |
 *    +-------------------+-----------------------------------------------------------+
 *    ... up to BUF_REGION_CHUNK_OFFSET: the chunk header (chunk.h), then its bytes ...
 *
 * A slot that was never used, or whose chunk was destroyed (its pages are punched out), reads
 * as zeros; a recycled chunk has range_start 0. The file only grows (F_SEAL_SHRINK on a
 * memfd), so a reader that mapped or measured it never faults.
 */
#ifndef FLEETPROF_BUFFER_REGION_H
#define FLEETPROF_BUFFER_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "buffer/chunk.h"

#define BUF_REGION_MAGIC          0x47525046u /* "FPRG" */
#define BUF_REGION_SLOT_MAGIC     0x4c535046u /* "FPSL" */
#define BUF_REGION_VERSION        1u
#define BUF_REGION_PAGE_BYTES     4096u      /* the fixed part of the header */
#define BUF_REGION_META_BYTES     (1u << 20) /* each of the two description areas */
/* Where our regions put slot 0 (a reader takes header_bytes from the header). */
#define BUF_REGION_HEADER_BYTES   (BUF_REGION_PAGE_BYTES + 2u * BUF_REGION_META_BYTES)
#define BUF_REGION_SLOT_PREFIX    32u /* the slot header, before the chunk's own struct */
#define BUF_REGION_CHUNK_OFFSET   48u /* chunk header's offset in a slot */
#define BUF_REGION_MAX_SLOTS      4096u
#define BUF_REGION_EVICT_OFFSET   80u /* evict_ns, in the header page the daemon maps */
#define BUF_REGION_UNPROFILED_MAX 64u

struct buf_region_header {
    uint32_t magic; /* BUF_REGION_MAGIC */
    uint32_t version;
    uint32_t header_bytes; /* offset of slot 0 */
    uint32_t slot_bytes;
    uint32_t chunk_bytes; /* buffer_bytes of every chunk in the region */
    int32_t pid;
    uint64_t created_ns;
    uint32_t meta_bytes;
    uint32_t meta_len[2];
    /* 1: the owner wrote its own profile (to a file) as it ended, so a reader that held the
     * region through a lost connection has nothing to recover; 0 until then. */
    uint32_t profile_written;
    uint64_t meta_seq;
    uint64_t meta_hash[2];
    uint64_t exec_ns; /* nonzero: the owner is in exec (its image ends without a profile) */
    /* The daemon's eviction point (CLOCK_MONOTONIC ns): destroy released chunks done at or
     * before it. Written only by the daemon (release store), read by the owner (acquire
     * load) on its sampler tick; 0 = nothing evicted. Data from another process: the owner
     * ignores a value that goes backwards or lies in the future. */
    uint64_t evict_ns;
    /* 1: the owner gave its threads to the program at the process limit (RLIMIT_NPROC), and
     * the children it forks since start no profiler; 0 until then. */
    uint32_t slots_given_up;
    /* Children forked since, how many (the first BUF_REGION_UNPROFILED_MAX listed). */
    uint32_t unprofiled_count;
    int32_t unprofiled_pids[64]; /* BUF_REGION_UNPROFILED_MAX */
};

struct buf_region_slot {
    uint32_t magic; /* BUF_REGION_SLOT_MAGIC while the slot holds a chunk */
    uint32_t index;
    uint64_t generation;
    int32_t owner_tid; /* thread that took the chunk into use */
    uint32_t reserved;
    uint64_t reserved2;
};

_Static_assert(sizeof(struct buf_region_header) == 352, "region header is a file format");
_Static_assert(offsetof(struct buf_region_header, evict_ns) == BUF_REGION_EVICT_OFFSET,
               "the eviction point's place is a file format");
_Static_assert(sizeof(struct buf_region_slot) == BUF_REGION_SLOT_PREFIX,
               "slot header is a file format");

/* What the owner exec'd into: written (magic last) just before exec_ns is set, read only
 * when exec_ns is set. The image before the exec ended there; its chunks are its profile. */
#define BUF_REGION_EXEC_MAGIC    0x58455046u /* "FPEX" */
#define BUF_REGION_EXEC_OFFSET   512u
#define BUF_REGION_EXEC_PATH_MAX 256u
struct buf_region_exec {
    uint32_t magic; /* BUF_REGION_EXEC_MAGIC once path is whole */
    uint32_t path_len;
    char path[BUF_REGION_EXEC_PATH_MAX]; /* not NUL-terminated; cut at BUF_REGION_EXEC_PATH_MAX */
    /* The exec'ing thread's CPU clock up to which this image's profile charges it: the new
     * image's first sample carries what that thread used after it (0 = none, or an older
     * writer). */
    uint64_t cpu_accounted_ns;
};

_Static_assert(BUF_REGION_EXEC_OFFSET >= sizeof(struct buf_region_header) &&
                       BUF_REGION_EXEC_OFFSET + sizeof(struct buf_region_exec) <= 1024u,
               "the exec record lives between the header and the crash record");

/* What the owner's fatal signal handler saw (the first fatal signal only). */
#define BUF_REGION_CRASH_MAGIC  0x52435046u /* "FPCR" */
#define BUF_REGION_CRASH_OFFSET 1024u
#define BUF_REGION_CRASH_FRAMES 128u
struct buf_region_crash {
    uint32_t magic; /* BUF_REGION_CRASH_MAGIC once the record is whole */
    int32_t signal;
    int32_t code;     /* si_code */
    int32_t tid;      /* the crashing thread */
    uint64_t address; /* si_addr: the faulting address */
    uint64_t time_ns; /* CLOCK_MONOTONIC */
    uint32_t frame_count;
    uint32_t reserved;
    uint64_t frames[BUF_REGION_CRASH_FRAMES]; /* innermost first: the faulting pc, then
                                               * return addresses */
};

_Static_assert(BUF_REGION_CRASH_OFFSET + sizeof(struct buf_region_crash) <= BUF_REGION_PAGE_BYTES,
               "the crash record lives in the header page");

struct buf_region; /* opaque */
struct buf_chunk_manager;

/* A region for chunks of chunk_bytes, in a new memfd sealed against shrinking (fd >= 0) or in
 * the file at path (created, O_EXCL; fd < 0 and path set). Returns 0, -EINVAL or a negative
 * errno from the system. The descriptor is close-on-exec. */
int buf_region_new(uint32_t chunk_bytes, const char *path, struct buf_region **ret_region);

/* Frees the region's mappings and descriptor (the file, if any, stays). Every chunk must
 * have been given back. Accepts NULL; returns NULL. */
struct buf_region *buf_region_free(struct buf_region *region);

/* The region's descriptor (borrowed), e.g. to pass to the daemon. */
int buf_region_fd(const struct buf_region *region);

/* Makes the region use fd from now on (e.g. moved to another number); the old one is the
 * caller's to close. -1: the region closes nothing when freed, and can no longer grow. */
void buf_region_set_fd(struct buf_region *region, int fd);

/* Bytes of the region's file so far (it grows by whole segments of slots). */
uint64_t buf_region_size(const struct buf_region *region);

/* Publishes a new description of the owning process (opaque bytes, at most
 * BUF_REGION_META_BYTES): a reader sees either it or the previous one whole, even if the
 * owner dies while writing. One writer at a time (the caller's lock). Returns 0 or -E2BIG. */
int buf_region_set_meta(struct buf_region *region, const void *bytes, size_t len);

/* Records a crash (first call only; later ones are ignored). Async-signal-safe: plain
 * stores into the mapping, no lock, no allocation. */
void buf_region_record_crash(struct buf_region *region, const struct buf_region_crash *crash);

/* Replaces the recorded crash's stack (the first crash's thread only: call it right after
 * buf_region_record_crash() on the same thread). frame_count is written last. */
void buf_region_record_crash_frames(struct buf_region *region, const uint64_t *frames,
                                    uint32_t frame_count);

/* The owner is about to exec (now_ns) into the program into (a path, or NULL when unknown),
 * its profile charging the exec'ing thread's CPU up to cpu_accounted_ns; or its exec failed
 * (now_ns 0). Async-signal-safe: plain stores into the mapping. */
void buf_region_mark_exec(struct buf_region *region, uint64_t now_ns, const char *into,
                          uint64_t cpu_accounted_ns);

/* The region's header page (BUF_REGION_PAGE_BYTES, shared with whoever maps the file): where
 * the owner publishes its update ring (buffer/region-updates.h). */
void *buf_region_header_page(struct buf_region *region);

/* The eviction point the daemon last stored in the region's header (acquire load: one load,
 * cheap enough for every sampler tick), 0 if none. The value comes from another process:
 * the caller checks it (not backwards, not in the future) before acting on it. */
uint64_t buf_region_eviction_ns(const struct buf_region *region);

/* Makes a local-limit manager allocate its chunks from region from now on (chunks it already
 * has stay on the heap until destroyed). The region must outlive the manager. -EINVAL if the
 * sizes differ or m is not a local-limit manager. */
int buf_chunk_manager_local_set_region(struct buf_chunk_manager *m, struct buf_region *region);

/* ---- reading a region another process wrote -------------------------------------------- */

/* What buf_region_read_each() found. */
struct buf_region_stats {
    uint64_t slots;          /* slots in the image */
    uint64_t chunks;         /* chunks with data, walked */
    uint64_t blocks;         /* blocks given to the callback */
    uint64_t skipped_tails;  /* straddling blocks whose other half is absent */
    uint64_t corrupt_chunks; /* slots whose header or blocks contradict each other */
    uint64_t torn_bytes;     /* bytes after the last valid block of a corrupt chunk */
    int32_t pid;             /* from the region header */
    uint64_t created_ns;     /* from the region header */
};

/* Walks every block of the region image mem[0..len) (a private copy: the writer may be alive
 * and hostile), oldest chunk first by range index. Every field is checked before use; a
 * chunk that contradicts itself is counted and skipped. Returns 0, -EBADMSG when the region
 * header itself is unusable (nothing read), or the callback's non-zero value. */
int buf_region_read_each(const uint8_t *mem, size_t len, buf_read_cb cb, void *userdata,
                         struct buf_region_stats *ret_stats);

/* The latest whole description in the region image mem[0..len): 0 and a span inside mem, or
 * -ENOENT (none was published, or none is intact) or -EBADMSG (not a region). */
int buf_region_read_meta(const uint8_t *mem, size_t len, const uint8_t **ret_bytes,
                         size_t *ret_len);

/* The owner wrote its own profile as it ended (buf_region_header.profile_written). */
void buf_region_mark_profile_written(struct buf_region *region);
/* Sets the header's slots_given_up. */
void buf_region_mark_slots_given_up(struct buf_region *region);
/* Lists pid among the children forked without a profiler (unprofiled_pids), if there is room,
 * and counts it. Any thread; async-signal-safe. */
void buf_region_note_unprofiled_child(struct buf_region *region, int32_t pid);

/* Whether the owner of the region image mem[0..len) ended its image by exec: 0 with its
 * instant and the program it exec'd into (NUL-terminated in into, "" when unknown), -ENOENT
 * (no exec) or -EBADMSG (not a region). */
int buf_region_read_exec(const uint8_t *mem, size_t len, uint64_t *ret_exec_ns, char *into,
                         size_t into_size);
/* The exec record's cpu_accounted_ns, from the first 1024 bytes of a region (the header and
 * the exec record) that ended its image by exec: 0, -ENOENT (no exec, or no whole record) or
 * -EBADMSG (not a region). */
int buf_region_read_exec_cpu(const uint8_t *mem, size_t len, uint64_t *ret_cpu_ns);

/* The region header of the image mem[0..len), checked as the readers check it: 0 or
 * -EBADMSG. */
int buf_region_read_header(const uint8_t *mem, size_t len, struct buf_region_header *ret);

/* Whether h (a copy of the header of a region file of file_bytes bytes) is one the readers
 * above accept: 0 or -EBADMSG. */
int buf_region_header_check(const struct buf_region_header *h, uint64_t file_bytes);

/* The daemon's side of evictions: stores done_ns as the eviction point of the region whose
 * header page (MAP_SHARED, writable) starts at header (release store: the owner's acquire
 * load sees it whole). Only the daemon writes it, so it keeps it increasing itself. */
void buf_region_header_store_eviction(struct buf_region_header *header, uint64_t done_ns);

/* The crash record of the region image mem[0..len), checked (frame_count bounded): 0, or
 * -ENOENT (the owner did not crash, or died while writing it), -EBADMSG (not a region). */
int buf_region_read_crash(const uint8_t *mem, size_t len, struct buf_region_crash *ret);

#endif /* FLEETPROF_BUFFER_REGION_H */
