/* profile/region-image.h - a process's profile from the chunk region it left
 * (buffer/region.h; docs/user-guide.md, "When a worker crashes"): the recovery of a process
 * that died without writing one (killed, crashed), or the exit profile a short-lived one left
 * there. Region bytes are another process's: every one is checked before use.
 */
#ifndef FLEETPROF_PROFILE_REGION_IMAGE_H
#define FLEETPROF_PROFILE_REGION_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_writer;
struct prof_symbolizer;

/* What a build found in the region. */
struct prof_recovery {
    int32_t pid;
    bool described;          /* the process description was found whole */
    uint64_t chunks;         /* chunks read */
    uint64_t blocks;         /* entries recovered */
    uint64_t corrupt_chunks; /* chunks that contradicted themselves (their rest dropped) */
    uint64_t torn_bytes;     /* bytes dropped after the last good entry of such chunks */
    uint64_t skipped_tails;  /* entries cut at a chunk's end whose rest was gone */
    uint64_t dropped_blocks; /* entries too big to be real */
    int crash_signal;        /* the fatal signal the process recorded (0: none; killed) */
    bool execd;              /* the image ended by exec (its region says so), not by a death */
    /* The region holds the description of the process's end and no crash: it ended
     * normally with nobody to take its profile (it had left the daemon), and the profile is
     * built as its exit profile, not a recovery. */
    bool exited;
    char execd_into[257]; /* with execd: what it exec'd ("" = unknown) */
    int32_t crash_tid;    /* the thread it hit */
};

/* Writes, as the next value of w, the process profile recovered from the region image
 * mem[0..len) (a private copy); how says where it came from ("chunk file", "shared
 * memory"). 0, -EBADMSG (not a region), or another negative errno. */
int prof_region_recover(const uint8_t *mem, size_t len, const char *how,
                        const struct prof_symbolizer *symbolizer, struct json_writer *w,
                        struct prof_recovery *ret);
struct prof_group_totals;

/* A process's performance group totals, known apart from its region (the daemon has them
 * from its GroupStats, the last at its exit): meta.fleetprof.groups of its exit profile. */
struct prof_region_groups {
    const struct prof_group_totals *totals; /* count of them, borrowed */
    size_t count;
    uint64_t slow_event_ns; /* 0 = unknown */
};

/* Writes, as the next value of w, the exit profile a process left in its region file fd
 * (hostile bytes: only the parts in use are copied, into *scratch, grown as needed to
 * *scratch_cap bytes, the caller's to free; a region larger than limit is refused); groups
 * (may be NULL) for its meta. 0, -ENODATA (no description of the process's end), -E2BIG
 * (more than a short-lived process's profile), -EBADMSG (not a region), or another negative
 * errno. */
int prof_region_exit_profile(int fd, uint64_t limit, uint8_t **scratch, size_t *scratch_cap,
                             const struct prof_region_groups *groups,
                             const struct prof_symbolizer *symbolizer, struct json_writer *w,
                             struct prof_recovery *ret);
/* The whole file fd, copied into *ret_mem (malloc'd; the caller frees it), *ret_len bytes:
 * a reader of another process's memory never reads it twice. -EFBIG beyond limit. */
int prof_region_read_whole(int fd, uint64_t limit, uint8_t **ret_mem, size_t *ret_len);
/* Writes the profile of the process that left the chunk file at path to out_path (through a
 * temporary file renamed over it), symbolized here. Returns 0, or a negative errno with a
 * sentence for the user in error (-EBADMSG: not a chunk file). */
int prof_region_recover_file(const char *path, const char *out_path, struct prof_recovery *ret,
                             char *error, size_t error_size);
/* "SIGSEGV", ... for a fatal signal's number. */
const char *prof_signal_name(int sig);

#endif /* FLEETPROF_PROFILE_REGION_IMAGE_H */
