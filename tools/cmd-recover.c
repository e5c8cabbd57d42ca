/* tools/cmd-recover.c - `fleetprof recover -o OUT FILE...`: profiles from the chunk files
 * (fleetprof-PID.chunks) that processes profiled without a daemon leave when they die
 * without writing their profile (SIGKILL, a crash, the OOM killer).
 *
 * One file becomes OUT; several are merged into one fleet profile (tools/merge.c), which
 * recovers each chunk file next to OUT, exactly as `fleetprof merge` folds exit profiles,
 * with the profiles given beside them (a FLEETPROF_DIR holds both: killed processes' chunk
 * files and the exit profiles of those that ended; a directory argument stands for both).
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
#include "tools/chunk-files.h"
#include "tools/commands.h"
#include "tools/merge.h"

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
    char **inputs = NULL;
    size_t n = 0, cap = 0, unusable = 0;
    struct merge_result result = {0};
    int c, r, status = 1;

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
        status = chunk_file_recover(inputs[0], out, false) < 0 ? 1 : 0;
        goto out;
    }
    /* Several: one merge, which recovers each chunk file first. */
    r = fleetprof_merge((const char *const *)inputs, n, out, "recover", &result);
    status = r < 0 ? 1 : 0;
    if (r == 0 && (unusable || result.skipped))
        (void)fprintf(stderr, "fleetprof recover: wrote %s without %zu input%s it could not use\n",
                      out, unusable + result.skipped, unusable + result.skipped == 1 ? "" : "s");
    unusable += r == 0 ? result.skipped : 0;
out:
    for (size_t i = 0; i < n; i++)
        free(inputs[i]);
    free(inputs);
    return status != 0 || unusable ? 1 : 0;
}
