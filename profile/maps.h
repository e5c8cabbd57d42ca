/* profile/maps.h - a process's /proc/PID/maps, read once and parsed.
 *
 * The one reader of the maps file: this process's module list takes its paths from it
 * (libs.c), other processes' module lists their mappings (libs-pid.c), and the daemon's
 * symbol service checks there that a child maps the file it names. libc only.
 */
#ifndef FLEETPROF_PROFILE_MAPS_H
#define FLEETPROF_PROFILE_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One line: "start-end perms offset major:minor inode   path". */
struct prof_map {
    uint64_t start, end; /* [start, end) */
    uint64_t offset;     /* file offset mapped at start */
    uint64_t inode;      /* 0: not a file */
    bool exec;           /* 'x' in the permissions */
    bool deleted;        /* the kernel's " (deleted)" suffix, removed from path */
    const char *path;    /* borrowed from struct prof_maps.text: "/..." for a file,
                          * "[vdso]", "[heap]"..., or "" for an anonymous mapping */
};

struct prof_maps {
    char *text;           /* owned: the file's text, cut into the paths */
    struct prof_map *map; /* owned: count lines, in file order (ascending addresses) */
    size_t count;
};

/* Reads /proc/PID/maps whole (pid 0: /proc/self/maps) and parses it; lines that do not
 * parse are skipped. Returns 0 and fills *ret_maps (caller calls prof_maps_done()), or a
 * negative errno from open/read, -EFBIG when the file is larger than max_bytes, -ENOMEM;
 * *ret_maps is left empty on error. */
int prof_maps_read(pid_t pid, size_t max_bytes, struct prof_maps *ret_maps);

/* Parses text[0..len), NUL-terminated at len, taking ownership of it (freed by
 * prof_maps_done(), or here on error). The text is the kernel's, but the paths in it are
 * whatever files the process maps: any bytes but NUL and newline. 0 or -ENOMEM. */
int prof_maps_parse(char *text, size_t len, struct prof_maps *ret_maps);

/* The line whose [start, end) contains addr, or NULL. Binary search. */
const struct prof_map *prof_maps_find(const struct prof_maps *maps, uint64_t addr);

/* Frees and empties *maps. Accepts an empty or already-done one. */
void prof_maps_done(struct prof_maps *maps);

#endif /* FLEETPROF_PROFILE_MAPS_H */
