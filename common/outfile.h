/* common/outfile.h - the one way fleetprof creates a file it writes for the user.
 *
 * Every file we write (record's, capture's, merge's and recover's profiles, exports, a
 * process's own exit profile in FLEETPROF_OUTPUT or FLEETPROF_DIR, pprof files) is first
 * written under a new name beside its destination, then renamed over it: a reader sees the
 * old file or the complete new one, never half. The new name is made with O_EXCL, so it is
 * never a file or a symbolic link someone else put there (a shared or sticky directory), and
 * its mode is FLEETPROF_FILE_MODE, less the umask: a profile holds a program's stacks,
 * command lines, thread names and marker text, which are its user's business only, as
 * `perf record` keeps perf.data. docs/security.md states the policy.
 *
 * Every such file is written through struct fleetprof_outfile: open beside the destination,
 * write through its descriptor (or a stdio or zlib stream on a dup() of it), then commit:
 * fsync, close and rename, or on any failure close and remove. One policy for all of them:
 * the data is on disk before the name points at it (a crash never leaves a truncated
 * profile under the name of a good one), and no temporary file is ever left behind.
 *
 * Header-only, libc only.
 */
#ifndef FLEETPROF_COMMON_OUTFILE_H
#define FLEETPROF_COMMON_OUTFILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FLEETPROF_FILE_MODE 0600

/* Bytes a temporary name takes beyond its destination's ("PATH" + ".tmp.XXXXXX" + NUL). */
#define FLEETPROF_TMPFILE_EXTRA 12

/* Creates "PATH.tmp.XXXXXX" beside path (mkostemp(3): O_EXCL, mode 0600 less the umask,
 * O_CLOEXEC), its name in ret_tmp. Returns the descriptor, or -ENAMETOOLONG (the name does
 * not fit in size) or open(2)'s negative errno. */
static inline int fleetprof_tmpfile_beside(const char *path, char *ret_tmp, size_t size)
{
    int n = snprintf(ret_tmp, size, "%s.tmp.XXXXXX", path);
    int fd;

    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    fd = mkostemp(ret_tmp, O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* A file being written for the user: fd, and the temporary name beside path it has until
 * fleetprof_outfile_commit(). */
struct fleetprof_outfile {
    int fd;     /* -1 once committed or aborted */
    char *tmp;  /* owned: "PATH.tmp.XXXXXX" */
    char *path; /* owned copy of the destination */
};

/* Creates the temporary file beside path (fleetprof_tmpfile_beside()). Returns 0, -ENOMEM,
 * or its errors; f is then ready for fleetprof_outfile_abort() either way. */
static inline int fleetprof_outfile_open(struct fleetprof_outfile *f, const char *path)
{
    size_t size = strlen(path) + FLEETPROF_TMPFILE_EXTRA;

    f->fd = -1;
    f->path = strdup(path);
    f->tmp = malloc(size);
    if (!f->path || !f->tmp) {
        free(f->path);
        free(f->tmp);
        f->path = f->tmp = NULL;
        return -ENOMEM;
    }
    f->fd = fleetprof_tmpfile_beside(path, f->tmp, size);
    if (f->fd < 0) {
        int r = f->fd;

        free(f->path);
        free(f->tmp);
        f->path = f->tmp = NULL;
        f->fd = -1;
        return r;
    }
    return 0;
}

/* Closes and removes the temporary file, if any; frees f's names. Idempotent. */
static inline void fleetprof_outfile_abort(struct fleetprof_outfile *f)
{
    if (f->fd >= 0) {
        (void)close(f->fd);
        f->fd = -1;
        if (f->tmp)
            (void)unlink(f->tmp);
    }
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
}

/* With r == 0 (the writer's result): fsync, close, rename over the destination; with r < 0,
 * or when one of those fails: the temporary file is removed. Frees f's names either way.
 * Returns r, or the first failing call's negative errno. */
static inline int fleetprof_outfile_commit(struct fleetprof_outfile *f, int r)
{
    if (f->fd < 0)
        return r < 0 ? r : -EBADF;
    if (r == 0 && fsync(f->fd) < 0)
        r = -errno;
    if (close(f->fd) < 0 && r == 0)
        r = -errno;
    f->fd = -1;
    if (r == 0 && rename(f->tmp, f->path) < 0)
        r = -errno;
    if (r < 0)
        (void)unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
    return r;
}

#endif /* FLEETPROF_COMMON_OUTFILE_H */
