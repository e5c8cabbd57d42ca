/* tools/merge.h - several process profiles into one fleet profile (merge.c). */
#ifndef FLEETPROF_TOOLS_MERGE_H
#define FLEETPROF_TOOLS_MERGE_H

#include <stddef.h>

struct merge_result {
    size_t processes; /* in the output, the top level included */
    size_t files;     /* inputs used */
    size_t skipped;   /* inputs that were not usable profiles (each named on stderr) */
};

/* Folds the profiles at paths[0..n) into one fleet profile at out, replaced atomically (out
 * may be one of the inputs). Chunk files among the inputs (fleetprof-PID.chunks) are
 * recovered first. who names the command in messages ("merge", "recover", "record"); a line
 * on stdout says what was written. Returns 0; -ENODATA when no input is a usable profile;
 * -ENOMEM; or why out could not be written (each said on stderr). */
int fleetprof_merge(const char *const *paths, size_t n, const char *out, const char *who,
                    struct merge_result *ret);

#endif /* FLEETPROF_TOOLS_MERGE_H */
