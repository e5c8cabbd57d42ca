/* profile/libs.h - the loaded modules (executable, shared libraries, vdso) of a process.
 *
 * A module list maps a runtime address to the module that contains it and to the ELF
 * address inside that module (vaddr = addr - bias), which is what prof_symbols_resolve()
 * and Gecko's `libs` need. The list is sorted by start and its ranges never overlap.
 * Collected in-process by the child (prof_libs_collect_self) or, for another process, by
 * the daemon (prof_libs_collect_pid). No globals, no threads: shared by both.
 *
 * Thread-safety: a list is plain data; concurrent readers are fine, one writer at a time.
 * Nothing here is async-signal-safe (it allocates).
 */
#ifndef FLEETPROF_PROFILE_LIBS_H
#define FLEETPROF_PROFILE_LIBS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The longest GNU build-id kept; longer ones are truncated (sha1 gives 20 bytes). */
#define PROF_BUILD_ID_MAX 64

/* One module, as Gecko's `libs` describes it (shared/gecko-format.md §5):
 *
 *   runtime address space        start            end
 *                                  |  r-x mapping(s) |
 *   ELF vaddr = addr - bias        |                 |
 *   file offset of start = offset
 *
 * start/end cover the executable mapping(s) only, rounded to pages as /proc/PID/maps shows
 * them (several executable segments are merged into one range). A module with no path
 * (the vdso) is named "[vdso]". */
struct prof_lib {
    uint64_t start;  /* runtime address of the first executable page */
    uint64_t end;    /* runtime address past the last executable page */
    uint64_t bias;   /* load bias: runtime address - ELF vaddr (0 for ET_EXEC) */
    uint64_t offset; /* file offset mapped at start (Gecko libs.offset) */
    char *path;      /* owned; absolute, symlinks resolved when possible; NULL for the vdso */
    char *name;      /* owned; basename of path, or "[vdso]"; the main program's as the
                      * user ran it (a link's name, the exec'd path's basename) */
    uint8_t build_id[PROF_BUILD_ID_MAX]; /* GNU build-id note (NT_GNU_BUILD_ID) */
    size_t build_id_len;                 /* 0 = none found */
    char *breakpad_id; /* owned; Breakpad debug id: first 16 bytes of the build-id as a GUID
                        * (first three fields byte-swapped), uppercase hex + age "0";
                        * 33 characters. NULL when build_id_len == 0. */
    char *code_id;     /* owned; the whole build-id in lowercase hex; NULL when none */
};

/* A module list. Caller-embedded: prof_libs_collect_*() fill it, prof_libs_done() frees. */
struct prof_libs {
    struct prof_lib *libs; /* owned; count entries sorted by start, non-overlapping */
    size_t count;
};

/* Collects the modules of the calling process with dl_iterate_phdr(): the main program
 * (path from /proc/self/exe), every loaded shared object and the vdso. Build-ids are read
 * from the loaded note segments, so a module whose file was deleted or replaced still gets
 * the right one. Takes the dynamic loader's lock for the duration: never call it from a
 * signal handler or from a thread that may be interrupted inside dlopen().
 * Returns 0 and fills *ret_libs (caller calls prof_libs_done()), or -ENOMEM with *ret_libs
 * untouched. */
int prof_libs_collect_self(struct prof_libs *ret_libs);

/* Collects the modules of process pid from /proc/PID/maps: every file with an executable
 * mapping, and the vdso. The ELF headers and the build-id come from the file when it is
 * still the mapped one (same device and inode); otherwise (deleted, replaced, "[vdso]")
 * they are read from the process's memory through /proc/PID/mem, which needs ptrace read
 * access (same user, or root). A module whose headers cannot be read by either way is
 * still listed, with bias = start - offset (right for the usual PIC layout) and no
 * build-id. Paths are as the kernel prints them, with any " (deleted)" suffix removed.
 * Returns 0 and fills *ret_libs; -ENOENT/-ESRCH (no such process), -EACCES, -ENOMEM, or
 * another negative errno from reading the maps file, with *ret_libs untouched. */
int prof_libs_collect_pid(pid_t pid, struct prof_libs *ret_libs);

/* Returns the module whose [start, end) contains addr, or NULL. Binary search: O(log n).
 * The result is borrowed from libs. */
const struct prof_lib *prof_libs_lookup(const struct prof_libs *libs, uint64_t addr);

/* The function at ELF address vaddr of this process's vdso ("[vdso]", no file), read from
 * the vdso's dynamic symbol table in memory: no file, no libdw, so a frame in
 * clock_gettime's fast path gets a name however the rest is symbolized. Prefers the
 * "__vdso_" name of aliased symbols, as perf does. Returns a string that lives as long as the
 * process, or NULL when no function contains vaddr. */
const char *prof_vdso_function(uint64_t vaddr);

/* Frees the modules and resets *libs to empty. Accepts an empty or already-done list. */
void prof_libs_done(struct prof_libs *libs);

/* Formats build_id as a Breakpad debug id (see struct prof_lib) into buf, which must hold
 * 34 bytes. Build-ids shorter than 16 bytes are zero-padded. Returns 0, or -EINVAL when
 * len is 0 or buf_size is too small. */
int prof_lib_format_breakpad_id(const uint8_t *build_id, size_t len, char *buf, size_t buf_size);

#endif /* FLEETPROF_PROFILE_LIBS_H */
