/* tools/cmd-merge.c - `fleetprof merge -o OUT IN...`: several process profiles into one
 * (tools/merge.c). */
#include <getopt.h>
#include <stdio.h>

#include "tools/commands.h"
#include "tools/merge.h"

static void usage(FILE *out)
{
    (void)fprintf(out,
                  "Usage: fleetprof merge -o OUT.json IN.json|IN.chunks...\n"
                  "Folds process profiles into one fleet profile: the earliest input (by\n"
                  "meta.startTime) is the top level, the others its processes. Inputs that are\n"
                  "not profiles are skipped with a warning. OUT is replaced atomically.\n"
                  "Chunk files a killed or crashed process left (fleetprof-PID.chunks) are\n"
                  "recovered into profiles first (see fleetprof recover).\n");
}

int cmd_merge(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = NULL;
    int c;

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
        (void)fprintf(stderr, "fleetprof merge: %s\n",
                      out ? "no input files" : "-o OUT is required");
        usage(stderr);
        return 2;
    }
    return fleetprof_merge((const char *const *)argv + optind, (size_t)(argc - optind), out,
                           "merge", NULL) < 0
                   ? 1
                   : 0;
}
