/* profile/libs-internal.h - helpers shared by the module-list collectors.
 *
 * libs.c (collect_self, lookup: libc only, linked into the runtime) and libs-pid.c
 * (collect_pid: reads module files with libelf, used by the daemon) build the same
 * struct prof_lib entries with these. Not for use outside profile/.
 */
#ifndef FLEETPROF_PROFILE_LIBS_INTERNAL_H
#define FLEETPROF_PROFILE_LIBS_INTERNAL_H

#include <elf.h>
#include <stddef.h>
#include <stdint.h>

#include "libs.h"

#define VDSO_NAME       "[vdso]"
#define DELETED_SUFFIX  " (deleted)"
#define MAX_NOTES_BYTES (64 * 1024) /* a PT_NOTE segment larger than this is not read */
#define MAX_PHDR_BYTES  (64 * 1024)
#define ELFCLASS_NATIVE (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)

/* A growing module array; prof__lib_vec_finish() hands it over as a struct prof_libs. */
struct prof__lib_vec {
    struct prof_lib *libs; /* owned */
    size_t count;
    size_t capacity;
};

uint64_t prof__page_size(void);
/* Appends a zeroed entry; NULL when out of memory. */
struct prof_lib *prof__lib_vec_push(struct prof__lib_vec *v);
void prof__lib_vec_free(struct prof__lib_vec *v);
/* Sorts, makes the ranges disjoint and moves the array into *ret_libs (v is emptied). */
void prof__lib_vec_finish(struct prof__lib_vec *v, struct prof_libs *ret_libs);
/* Sets path and name (path NULL: the vdso). 0 or -ENOMEM. */
int prof__lib_set_path(struct prof_lib *lib, const char *path);
/* Sets the build-id and its breakpad_id/code_id forms. 0 or -ENOMEM. */
int prof__lib_set_build_id(struct prof_lib *lib, const uint8_t *id, size_t len);
/* Finds the NT_GNU_BUILD_ID note in a note segment image; returns its descriptor length
 * (0 = none) and a pointer into notes in *ret_desc. */
size_t prof__find_build_id_note(const uint8_t *notes, size_t size, size_t align,
                                const uint8_t **ret_desc);

#endif /* FLEETPROF_PROFILE_LIBS_INTERNAL_H */
