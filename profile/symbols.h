/* profile/symbols.h - symbolization: (module, ELF address) -> function, file, line.
 *
 * A cache of modules opened with libdwfl (elfutils). Each module (keyed by its GNU build-id,
 * or by path + device + inode + mtime + size when it has none) is opened once, with its
 * separate debug info when there is some (/usr/lib/debug/.build-id/xx/yyyy.debug,
 * .gnu_debuglink, .gnu_debugaltlink: libdwfl's standard search; when DEBUGINFOD_URLS is set,
 * libdwfl also asks those servers, which can block on the network). Results are cached per
 * (module, address). Memory is bounded: the cache counts what it holds, and when the count
 * is over the limit it drops whole modules, least recently used first.
 *
 * Cost rule: function names always come from the ELF symbol table (.symtab of the file or
 * of its debug file, else .dynsym), which is never compressed and cheap. File and line need
 * the DWARF, and libdw inflates every compressed debug section of a module when it opens
 * its DWARF, before the first line lookup, however few lines are wanted. So file:line is
 * looked up only in modules whose DWARF is cheap to open: not compressed (no SHF_COMPRESSED
 * and no .zdebug_* section in the file libdw would read it from: the module's file when that
 * has DWARF, else its separate debug file), or compressed but small: at most
 * max_compressed_dwarf_bytes of .debug_* sections in the file. The others resolve to names
 * only (stats.modules_names_only). Decided from section headers, without opening the DWARF.
 *
 * Measured cost (tests/bench/bench-symbols.c, warm page cache, this VM): the first
 * resolution in a module costs < 0.1 ms for names in small modules and ~0.7 ms in libc
 * (building a sorted copy of its 10k-symbol table); with file:line < 0.1 ms in modules with
 * uncompressed DWARF (programs built with -g). Compressed DWARF costs ~9 ms per MiB of
 * compressed sections to open: libc's debug file (libc6-dbg, 3.6 MiB compressed, 9.6 MiB
 * inflated) 33-42 ms, libm's 0.8 MiB 7 ms, ld.so's 0.5 MiB 4 ms; the default limit (1 MiB)
 * keeps those two and leaves libc with names. A new address in a loaded module costs ~0.1 us
 * for a name and ~10 us with its line; a cache hit ~30 ns. That is why a child connected to
 * a daemon lets the daemon's single cache do it for the whole fleet (design §4 "Symbols").
 *
 * Thread-safety: none. A cache belongs to one thread at a time (libdw's handles are not
 * safe for concurrent use); use one cache per thread or serialize. Not async-signal-safe.
 */
#ifndef FLEETPROF_PROFILE_SYMBOLS_H
#define FLEETPROF_PROFILE_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct prof_lib;
struct prof_libs;
struct prof_symbols; /* opaque */

/* Default memory limit for prof_symbols_new(0, ...). */
#define PROF_SYMBOLS_DEFAULT_LIMIT (256u * 1024 * 1024)

/* Default bound on the modules held open. libdwfl keeps each module's files open (its ELF
 * file, its debug file, a dwz file: up to 3 descriptors), so this bounds descriptors too. */
#define PROF_SYMBOLS_DEFAULT_MAX_MODULES 256

/* Default bound on a module's compressed DWARF for file:line lookups (see the cost rule
 * above): opening 1 MiB of compressed debug sections costs ~9 ms, under 1 % of a recording
 * of 64 short-lived children (~1.4 s of CPU); libc's 3.6 MiB cost 33-42 ms. */
#define PROF_SYMBOLS_DEFAULT_MAX_COMPRESSED_DWARF (1u << 20)

/* One resolved address. The strings are interned by the cache and stay valid until
 * prof_symbols_free(), even when their module is evicted. */
struct prof_symbol {
    const char *function; /* symbol name as in the ELF symbol table (not demangled) */
    const char *file;     /* source file (path as recorded in DWARF, "x/../" folded);
                           * NULL when unknown */
    uint32_t line;        /* 1-based source line; 0 = unknown */
};

struct prof_symbols_options {
    size_t memory_limit_bytes;  /* 0 = PROF_SYMBOLS_DEFAULT_LIMIT */
    size_t max_modules;         /* 0 = PROF_SYMBOLS_DEFAULT_MAX_MODULES; cached failures count */
    bool names_only;            /* never load DWARF: function names only, file/line unknown */
    const char *debuginfo_path; /* libdwfl's search path for debug files (copied), e.g.
                                 * ":.debug:/usr/lib/debug": "" = next to the file, relative =
                                 * a subdirectory of the file's, absolute = a root searched by
                                 * .build-id/ and by the file's own path. It replaces the
                                 * default; NULL = the default ":.debug:/usr/lib/debug". */

    /* The cost rule (above): file:line only in modules whose DWARF is not compressed or has
     * at most this many bytes of compressed .debug_* sections. 0 = the default
     * PROF_SYMBOLS_DEFAULT_MAX_COMPRESSED_DWARF; SIZE_MAX = no limit. */
    size_t max_compressed_dwarf_bytes;
};

struct prof_symbols_stats {
    uint64_t modules_loaded;     /* successful module opens (again after an eviction) */
    uint64_t modules_names_only; /* loaded modules left without file:line by the cost rule
                                  * (compressed DWARF over the limit); counted at the first
                                  * lookup that wants a line, again after an eviction */
    uint64_t modules_failed;     /* failed opens; the failure is cached like a module */
    uint64_t modules_evicted;    /* modules dropped to stay under the limits */
    uint64_t lookups;            /* prof_symbols_resolve*() calls with valid arguments */
    uint64_t cache_hits;         /* lookups answered from the per-address cache */
    size_t modules_cached;       /* modules (and cached failures) held now */
    size_t memory_bytes;         /* what the cache counts against its limit, see below */
    size_t string_bytes;         /* interned strings (part of memory_bytes; never evicted) */
};

/* Creates a cache. memory_limit_bytes bounds what it counts: for each module the size of
 * its ELF file and of its debug file (libdw maps them whole and parses from them), plus
 * the per-address tables, plus the interned strings. A module is never evicted while it
 * is being used, so one module larger than the limit still works. Returns 0 and stores
 * the cache in *ret_symbols (caller frees it with prof_symbols_free()), or -ENOMEM with
 * *ret_symbols untouched. */
int prof_symbols_new(size_t memory_limit_bytes, struct prof_symbols **ret_symbols);

/* Same, with options (NULL = defaults). Returns 0, -EINVAL or -ENOMEM. */
int prof_symbols_new_with_options(const struct prof_symbols_options *options,
                                  struct prof_symbols **ret_symbols);

/* Frees the cache, every module and every string it handed out. Accepts NULL; always
 * returns NULL. */
struct prof_symbols *prof_symbols_free(struct prof_symbols *s);

/* Resolves vaddr, an address in the ELF address space of a module (runtime address - load
 * bias; for a caller frame, return address - 1). path (borrowed) names the module's file;
 * build_id/build_id_len (borrowed; len 0 = unknown) identify it. With a build-id the file
 * at path must carry the same one; if path is NULL, missing or holds another build, the
 * module is looked up by build-id in the debuginfo path's .build-id/ directories, and the
 * vdso of the running kernel is recognised by its build-id.
 *
 * Returns:
 *   0        a function was found; *ret_symbol filled (file and line when known)
 *   -ENOENT  the module has no symbol covering vaddr; or the module's file does not exist
 *            and nothing else carries its build-id
 *   -ESTALE  the file at path has another build-id (replaced since it was mapped) and no
 *            file with the right one was found
 *   -ENOEXEC the file is not ELF, or an ELF libdwfl cannot use (no program headers)
 *   -EACCES, -EISDIR, -EIO, ...  opening or reading the file failed
 *   -EINVAL  s is NULL, or both path and build-id are missing
 *   -ENOMEM
 * *ret_symbol is untouched on failure. Module failures are cached: a missing file is
 * tried once per cache (until its entry is evicted). prof_symbols_get_last_error() tells
 * the cause in words.
 *
 * A file deleted after the process mapped it: a cache that opened the module before keeps
 * resolving (libdw holds the file open); otherwise -ENOENT, unless a debug file found by
 * build-id stands in. /proc/PID/map_files is not used: opening it needs CAP_SYS_ADMIN, and
 * answers should not depend on privileges. */
/* The demangled form of the C++ (or Rust legacy) symbol name[0..len), malloc'd; NULL when
 * the name is not mangled, cannot be demangled, or memory ran out (show it as it is). */
char *prof_symbol_demangle(const char *name, size_t len);

int prof_symbols_resolve(struct prof_symbols *s, const char *path, const uint8_t *build_id,
                         size_t build_id_len, uint64_t vaddr, struct prof_symbol *ret_symbol);

/* Resolves a runtime address of the process that libs describes: finds the module
 * containing runtime_addr, computes vaddr = runtime_addr - bias, minus 1 when
 * is_return_address (a caller frame: the call instruction ends just before the return
 * address, so its line is the call's), and calls prof_symbols_resolve(). Returns its
 * result, or -ENXIO when no module contains the address. On success stores the module in
 * *ret_lib (borrowed from libs; ret_lib may be NULL). On failure both outputs are
 * untouched: use prof_libs_lookup() to find the module of an unnamed frame. */
int prof_symbols_resolve_address(struct prof_symbols *s, const struct prof_libs *libs,
                                 uint64_t runtime_addr, bool is_return_address,
                                 struct prof_symbol *ret_symbol, const struct prof_lib **ret_lib);

/* Copies the counters into *ret_stats. */
void prof_symbols_get_stats(const struct prof_symbols *s, struct prof_symbols_stats *ret_stats);

/* A description of the last failure of a resolve call, e.g. "/x/libfoo.so: No such file or
 * directory", or "" when nothing failed yet. Borrowed: valid until the next call on s. */
const char *prof_symbols_get_last_error(const struct prof_symbols *s);

#endif /* FLEETPROF_PROFILE_SYMBOLS_H */
