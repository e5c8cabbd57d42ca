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
 * Header-only, libc only.
 */
#ifndef FLEETPROF_COMMON_OUTFILE_H
#define FLEETPROF_COMMON_OUTFILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif /* FLEETPROF_COMMON_OUTFILE_H */
