/* tools/cmd-recover.c - `fleetprof recover -o OUT FILE...`: profiles from the chunk files
 * (fleetprof-PID.chunks) that processes profiled without a daemon leave when they die
 * without writing their profile (SIGKILL, a crash, the OOM killer).
 *
 * One file becomes OUT; several are recovered one by one next to OUT and merged into one
 * fleet profile (cmd_merge), exactly as `fleetprof merge` folds exit profiles. `merge`
 * itself takes chunk files among its inputs through recover_chunks_to_temp().
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/daemon.h"
#include "tools/commands.h"

static void usage(FILE *out)
{
    (void)fprintf(out, "Usage: fleetprof recover -o OUT.json FILE.chunks...\n"
                       "Builds the profiles of processes that died without writing one (killed or\n"
                       "crashed) from the chunk files they left in FLEETPROF_DIR or next to\n"
                       "FLEETPROF_OUTPUT; several files are merged into one fleet profile. The\n"
                       "files are left in place.\n");
}

bool is_chunk_file(const char *path)
{
    size_t n = strlen(path);

    return n > 7 && strcmp(path + n - 7, ".chunks") == 0;
}

int recover_chunks_to(const char *path, const char *out_path, bool quiet)
{
    struct daemon_recovery rec;
    char error[512];
    int r = daemon_recover_file(path, out_path, &rec, error, sizeof(error));

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

int recover_chunks_to_temp(const char *path, const char *near, char **ret_tmp)
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
    r = recover_chunks_to(path, tmp, false);
    if (r < 0) {
        (void)unlink(tmp);
        free(tmp);
        return r;
    }
    *ret_tmp = tmp;
    return 0;
}

int cmd_recover(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = NULL;
    char **merge_argv = NULL;
    int c, n, merged = 0, status = 1;

    optind = 1;
    while ((c = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!out || optind >= argc) {
        (void)fprintf(stderr, "fleetprof recover: %s\n",
                      out ? "no chunk files given" : "-o OUT is required");
        usage(stderr);
        return 2;
    }
    n = argc - optind;
    if (n == 1)
        return recover_chunks_to(argv[optind], out, false) < 0 ? 1 : 0;

    /* Several: each next to OUT, then one merge. */
    merge_argv = calloc((size_t)n + 4, sizeof(*merge_argv));
    if (!merge_argv) {
        (void)fprintf(stderr, "fleetprof recover: out of memory\n");
        return 1;
    }
    merge_argv[0] = "merge";
    merge_argv[1] = "-o";
    merge_argv[2] = (char *)out;
    for (int i = 0; i < n; i++) {
        char *tmp;

        if (recover_chunks_to_temp(argv[optind + i], out, &tmp) == 0)
            merge_argv[3 + merged++] = tmp;
    }
    if (merged == 0)
        (void)fprintf(stderr, "fleetprof recover: none of the %d files could be recovered\n", n);
    else
        status = cmd_merge(3 + merged, merge_argv);
    for (int i = 0; i < merged; i++) {
        (void)unlink(merge_argv[3 + i]);
        free(merge_argv[3 + i]);
    }
    free(merge_argv);
    return status != 0 ? 1 : merged == n ? 0 : 1;
}
