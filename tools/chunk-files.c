/* tools/chunk-files.c - the chunk files (fleetprof-PID.chunks) that processes profiled
 * without a daemon leave when they die without writing their profile (SIGKILL, a crash, the
 * OOM killer): each recovered into a profile by profile/region-image.c, for `recover` and
 * for `merge`, which takes them among its inputs.
 */
#include "tools/chunk-files.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profile/region-image.h"

bool is_chunk_file(const char *path)
{
    size_t n = strlen(path);

    return n > 7 && strcmp(path + n - 7, ".chunks") == 0;
}

int chunk_file_recover(const char *path, const char *out_path, bool quiet)
{
    struct prof_recovery rec;
    char error[512];
    int r = prof_region_recover_file(path, out_path, &rec, error, sizeof(error));

    if (r < 0) {
        (void)fprintf(stderr, "fleetprof: %s\n", error);
        return r;
    }
    if (!quiet)
        (void)fprintf(stderr,
                      "fleetprof: recovered pid %" PRId32 " from %s: %" PRIu64
                      " entries in %" PRIu64 " chunks%s%s\n",
                      rec.pid, path, rec.blocks, rec.chunks,
                      rec.described ? "" : " (no process description: threads and modules unnamed)",
                      rec.corrupt_chunks || rec.torn_bytes ? ", some damaged (see profilingLog)"
                                                           : "");
    if (rec.corrupt_chunks || rec.torn_bytes || rec.skipped_tails)
        (void)fprintf(stderr,
                      "fleetprof: %s: %" PRIu64 " corrupt chunks, %" PRIu64 " torn bytes, %" PRIu64
                      " cut entries dropped\n",
                      path, rec.corrupt_chunks, rec.torn_bytes, rec.skipped_tails);
    return 0;
}

int chunk_file_recover_beside(const char *path, const char *near, char **ret_tmp)
{
    char *tmp;
    int fd, r;

    if (asprintf(&tmp, "%s.recovered.XXXXXX", near) < 0)
        return -ENOMEM;
    fd = mkstemp(tmp); /* a name of our own; the recovery writes and renames over it */
    if (fd < 0) {
        r = -errno;
        (void)fprintf(stderr, "fleetprof: cannot create a file next to %s: %s\n", near,
                      strerror(-r));
        free(tmp);
        return r;
    }
    (void)close(fd);
    r = chunk_file_recover(path, tmp, false);
    if (r < 0) {
        (void)unlink(tmp);
        free(tmp);
        return r;
    }
    *ret_tmp = tmp;
    return 0;
}
