/* tools/chunk-files.h - chunk files recovered into profiles (chunk-files.c). */
#ifndef FLEETPROF_TOOLS_CHUNK_FILES_H
#define FLEETPROF_TOOLS_CHUNK_FILES_H

#include <stdbool.h>

/* Whether path names a chunk file (*.chunks). */
bool is_chunk_file(const char *path);
/* Recovers the profile in the chunk file at path into out_path (atomically); says what it
 * found on stderr unless quiet, and any damage always. 0 or a negative errno (said). */
int chunk_file_recover(const char *path, const char *out_path, bool quiet);
/* The same into a new file beside near (its name in *ret_tmp, malloc()ed: the caller
 * removes the file and frees the name). */
int chunk_file_recover_beside(const char *path, const char *near, char **ret_tmp);

#endif /* FLEETPROF_TOOLS_CHUNK_FILES_H */
