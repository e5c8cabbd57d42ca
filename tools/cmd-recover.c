/* tools/cmd-recover.c - `fleetprof recover -o OUT FILE...`: profiles from the chunk files
 * (fleetprof-PID.chunks) that processes profiled without a daemon leave when they die
 * without writing their profile (SIGKILL, a crash, the OOM killer).
 *
 * One file becomes OUT; several are recovered one by one next to OUT and merged into one
 * fleet profile (cmd_merge), exactly as `fleetprof merge` folds exit profiles, with the
 * profiles given beside them (a FLEETPROF_DIR holds both: killed processes' chunk files and
 * the exit profiles of those that ended; a directory argument stands for both). `merge`
 * itself takes chunk files among its inputs through recover_chunks_to_temp().
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/grow.h"
#include "profile/region-image.h"
#include "tools/commands.h"

static void usage(FILE *out)
{
    (void)fprintf(out, "Usage: fleetprof recover -o OUT.json FILE.chunks|PROFILE.json|DIR...\n"
                       "Builds the profiles of processes that died without writing one (killed or\n"
                       "crashed) from the chunk files they left in FLEETPROF_DIR or next to\n"
                       "FLEETPROF_OUTPUT; several files are merged into one fleet profile, with\n"
                       "the profiles given beside them (a directory: its chunk files and\n"
                       "profiles). The files are left in place. Exits 1 when an input could not\n"
                       "be used (each is named).\n");
}

bool is_chunk_file(const char *path)
{
    size_t n = strlen(path);

    return n > 7 && strcmp(path + n - 7, ".chunks") == 0;
}

int recover_chunks_to(const char *path, const char *out_path, bool quiet)
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

/* Whether path names a profile a process or a tool wrote (merged as it is). */
static bool is_profile_file(const char *path)
{
    size_t n = strlen(path);

    return n > 5 && strcmp(path + n - 5, ".json") == 0 && !strstr(path, ".tmp.");
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends path (malloc()ed, now the list's; NULL: out of memory) to the list. Returns 0, or
 * 1 after saying so. */
static int push_input(char *path, char ***list, size_t *n, size_t *cap)
{
    if (path)
        (void)fleetprof_grow((void **)list, cap, *n + 1, sizeof(**list));
    if (!path || *n == *cap) {
        free(path);
        (void)fprintf(stderr, "fleetprof recover: out of memory\n");
        return 1;
    }
    (*list)[(*n)++] = path;
    return 0;
}

/* The inputs: each file argument as it is, and a directory's chunk files and profiles (a
 * FLEETPROF_DIR), in name order. Appends malloc()ed paths to *list. Returns 0 or 1 after
 * explaining. */
static int add_input(const char *arg, char ***list, size_t *n, size_t *cap)
{
    struct stat st;
    size_t first = *n;

    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(arg);
        struct dirent *e;

        if (!dir) {
            (void)fprintf(stderr, "fleetprof recover: %s: %s\n", arg, strerror(errno));
            return 1;
        }
        while ((e = readdir(dir))) {
            char *path;

            if (!is_chunk_file(e->d_name) && !is_profile_file(e->d_name))
                continue;
            if (asprintf(&path, "%s/%s", arg, e->d_name) < 0 || push_input(path, list, n, cap))
                break;
        }
        (void)closedir(dir);
        qsort(*list + first, *n - first, sizeof(**list), by_name);
        if (*n == first)
            (void)fprintf(stderr, "fleetprof recover: %s holds no chunk file or profile\n", arg);
        return *n == first;
    }
    return push_input(strdup(arg), list, n, cap);
}

int cmd_recover(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = NULL;
    char **inputs = NULL, **merge_argv = NULL, **temps = NULL;
    size_t n = 0, cap = 0, n_temps = 0, merged = 0, unusable = 0;
    int c, status = 1;

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
    for (int i = optind; i < argc; i++)
        unusable += (size_t)add_input(argv[i], &inputs, &n, &cap);
    if (n == 1 && unusable == 0 && is_chunk_file(inputs[0])) {
        status = recover_chunks_to(inputs[0], out, false) < 0 ? 1 : 0;
        goto out;
    }

    /* Several: each chunk file recovered next to OUT, the profiles as they are, then one
     * merge. */
    merge_argv = calloc(n + 4, sizeof(*merge_argv));
    temps = calloc(n + 1, sizeof(*temps));
    if (!merge_argv || !temps) {
        (void)fprintf(stderr, "fleetprof recover: out of memory\n");
        goto out;
    }
    merge_argv[0] = "merge";
    merge_argv[1] = "-o";
    merge_argv[2] = (char *)out;
    for (size_t i = 0; i < n; i++) {
        char *tmp;

        if (!is_chunk_file(inputs[i]))
            merge_argv[3 + merged++] = inputs[i]; /* a profile: merge says if it is not one */
        else if (recover_chunks_to_temp(inputs[i], out, &tmp) == 0)
            merge_argv[3 + merged++] = temps[n_temps++] = tmp;
        else
            unusable++; /* named by the recovery */
    }
    if (merged == 0)
        (void)fprintf(stderr, "fleetprof recover: none of the %zu files could be used\n", n);
    else
        status = cmd_merge(3 + (int)merged, merge_argv);
    if (status == 0 && unusable)
        (void)fprintf(stderr, "fleetprof recover: wrote %s without %zu input%s it could not use\n",
                      out, unusable, unusable == 1 ? "" : "s");
    for (size_t i = 0; i < n_temps; i++) {
        (void)unlink(temps[i]);
        free(temps[i]);
    }
out:
    for (size_t i = 0; i < n; i++)
        free(inputs[i]);
    free(inputs);
    free(merge_argv);
    free(temps);
    return status != 0 || unusable ? 1 : 0;
}
