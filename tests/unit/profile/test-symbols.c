/* tests/unit/profile/test-symbols.c - prof_symbols_*: names, files and lines of known
 * functions (this program's, libsym-lib.so's, libc's, the vdso's, and those of another
 * process: tests/workloads/sym-known), return address - 1, separate debug files found by
 * .gnu_debuglink and by build-id, broken modules, deleted files, the cache and its bound.
 *
 * Arguments (from meson): the sym-known workload, the symbol-less sym-nosyms module.
 * Built with -g -O0 -fno-omit-frame-pointer -fno-inline, like the workloads.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <link.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <elfutils/libdwfl.h>

#include "profile/libs.h"
#include "profile/symbols.h"
#include "sym-lib.h"
#include "testlib.h"

#define MAX_SITES 32

extern char **environ;

static const char *sym_known_path;  /* argv[1] */
static const char *sym_nosyms_path; /* argv[2] */
static const char *sym_lib_path;    /* argv[3]: libsym-lib.so, copied by some tests */

struct site {
    const char *function;
    const char *file;
    int line;
    uintptr_t addr; /* a return address (site) or an entry address */
};

static struct site sites[MAX_SITES];
static int site_count;
static volatile int sink;

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

SYM_NOINLINE static void probe(const char *function, const char *file, int line)
{
    assert_true(site_count < MAX_SITES);
    sites[site_count].function = function;
    sites[site_count].file = file;
    sites[site_count].line = line;
    sites[site_count].addr = (uintptr_t)__builtin_return_address(0);
    site_count++;
}

static const int test_static_fn_brace_line = __LINE__ + 2;
SYM_NOINLINE static void test_static_fn(void)
{
    probe(__func__, __FILE__, __LINE__);
    sink++;
}

SYM_NOINLINE void test_global_fn(void);

SYM_NOINLINE void test_global_fn(void)
{
    probe(__func__, __FILE__, __LINE__);
    sink++;
    test_static_fn();
    sink++;
}

/* Records the probe sites of this program and of libsym-lib.so. */
static void collect_sites(void)
{
    site_count = 0;
    test_global_fn();
    sym_lib_global_fn(probe);
    assert_int_equal(site_count, 4);
}

static struct prof_symbols *new_cache(size_t limit)
{
    struct prof_symbols *s = NULL;

    assert_int_equal(prof_symbols_new(limit, &s), 0);
    assert_non_null(s);
    return s;
}

static struct prof_symbols_stats stats_of(const struct prof_symbols *s)
{
    struct prof_symbols_stats st;

    prof_symbols_get_stats(s, &st);
    return st;
}

/* Resolves a probe site (a return address) and checks its name, file and line. */
static void assert_site(struct prof_symbols *s, const struct prof_libs *libs,
                        const struct site *site)
{
    struct prof_symbol sym;
    const struct prof_lib *lib = NULL;
    int r = prof_symbols_resolve_address(s, libs, site->addr, true, &sym, &lib);

    if (r != 0)
        fail_msg("%s:%d (0x%" PRIxPTR "): %d %s", site->function, site->line, site->addr, r,
                 prof_symbols_get_last_error(s));
    assert_non_null(lib);
    assert_string_equal(sym.function, site->function);
    assert_non_null(sym.file);
    assert_string_equal(base_name(sym.file), base_name(site->file));
    assert_int_equal(sym.line, site->line);
}

static int run_quiet(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int run_quiet(const char *fmt, ...)
{
    char cmd[4 * PATH_MAX];
    va_list ap;
    int r;

    va_start(ap, fmt);
    (void)vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    r = system(cmd);
    return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static bool have_binutils(void)
{
    return run_quiet("objcopy --version >/dev/null 2>&1 && strip --version >/dev/null 2>&1") == 0;
}

static void copy_file(const char *from, const char *to)
{
    assert_int_equal(run_quiet("cp '%s' '%s'", from, to), 0);
}

static const struct prof_lib *lib_named(const struct prof_libs *libs, const char *name)
{
    for (size_t i = 0; i < libs->count; i++) {
        if (strcmp(libs->libs[i].name, name) == 0)
            return &libs->libs[i];
    }
    return NULL;
}

static const struct prof_lib *lib_with_path(const struct prof_libs *libs, const char *path)
{
    for (size_t i = 0; i < libs->count; i++) {
        if (libs->libs[i].path && strcmp(libs->libs[i].path, path) == 0)
            return &libs->libs[i];
    }
    return NULL;
}

/* Returns true when the ELF file at path has a section of that name. */
static bool elf_has_section(const char *path, const char *name)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    Elf_Scn *scn = NULL;
    bool found = false;
    size_t shstrndx;
    Elf *elf;

    assert_true(fd >= 0);
    (void)elf_version(EV_CURRENT);
    elf = elf_begin(fd, ELF_C_READ, NULL);
    assert_non_null(elf);
    assert_int_equal(elf_getshdrstrndx(elf, &shstrndx), 0);
    while (!found && (scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr shdr;
        const char *n;

        assert_non_null(gelf_getshdr(scn, &shdr));
        n = elf_strptr(elf, shstrndx, shdr.sh_name);
        found = n && strcmp(n, name) == 0;
        if (found && strcmp(name, ".text") == 0)
            found = shdr.sh_size > 0;
    }
    (void)elf_end(elf);
    (void)close(fd);
    return found;
}

/* Returns the address of the .text section of the ELF file at path. */
static uint64_t elf_text_addr(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    Elf_Scn *scn = NULL;
    uint64_t addr = 0;
    size_t shstrndx;
    Elf *elf;

    assert_true(fd >= 0);
    (void)elf_version(EV_CURRENT);
    elf = elf_begin(fd, ELF_C_READ, NULL);
    assert_non_null(elf);
    assert_int_equal(elf_getshdrstrndx(elf, &shstrndx), 0);
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr shdr;
        const char *n;

        assert_non_null(gelf_getshdr(scn, &shdr));
        n = elf_strptr(elf, shstrndx, shdr.sh_name);
        if (n && strcmp(n, ".text") == 0)
            addr = shdr.sh_addr;
    }
    (void)elf_end(elf);
    (void)close(fd);
    assert_true(addr != 0);
    return addr;
}

/* --- this process ------------------------------------------------------------------- */

static void test_demangle(void **state)
{
    static const struct {
        const char *mangled, *want;
    } cases[] = {
            {"_Z14bitmap_set_bitP11bitmap_headi", "bitmap_set_bit(bitmap_head*, int)"},
            {"_ZN2wl3HotIiE4spinEi", "wl::Hot<int>::spin(int)"},
            {"_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write::h0123456789abcdef"},
    };
    char *d;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        d = prof_symbol_demangle(cases[i].mangled, strlen(cases[i].mangled));
        assert_non_null(d);
        assert_string_equal(d, cases[i].want);
        free(d);
    }
    /* A version suffix is cut by the caller's length; the rest is read as given. */
    d = prof_symbol_demangle("_ZN2wl3HotIiE4spinEi@@V1", strlen("_ZN2wl3HotIiE4spinEi"));
    assert_non_null(d);
    assert_string_equal(d, "wl::Hot<int>::spin(int)");
    free(d);
    assert_null(prof_symbol_demangle("main", 4));    /* C: as it is */
    assert_null(prof_symbol_demangle("_Zjunk(", 7)); /* not a valid mangling */
    assert_null(prof_symbol_demangle("_Z", 2));
}

static void test_resolve_self_sites(void **state)
{
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};
    char *exe = realpath("/proc/self/exe", NULL);

    (void)state;
    collect_sites();
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    for (int i = 0; i < site_count; i++) {
        const struct prof_lib *lib = prof_libs_lookup(&libs, sites[i].addr);

        assert_non_null(lib);
        assert_string_equal(lib->name, i < 2 ? base_name(exe) : "libsym-lib.so");
        assert_site(s, &libs, &sites[i]);
    }
    /* Static functions come from .symtab: .dynsym does not have them. */
    assert_string_equal(sites[1].function, "test_static_fn");
    assert_string_equal(sites[3].function, "sym_lib_static_fn");

    prof_libs_done(&libs);
    prof_symbols_free(s);
    free(exe);
}

static void test_return_address_minus_one(void **state)
{
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};

    (void)state;
    collect_sites();
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    for (int i = 0; i < site_count; i++) {
        struct prof_symbol at, before;

        /* The return address itself belongs to the statement after the call (the next
         * line); minus 1 lands in the call instruction, on the probe's line. */
        assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[i].addr, false, &at, NULL),
                         0);
        assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[i].addr, true, &before, NULL),
                         0);
        assert_string_equal(at.function, sites[i].function);
        assert_int_equal(before.line, sites[i].line);
        assert_true(at.line > before.line);
    }
    prof_libs_done(&libs);
    prof_symbols_free(s);
}

static void test_entry_addresses(void **state)
{
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};
    struct prof_symbol sym;
    const struct prof_lib *lib = NULL;
    int lib_line = 0;
    uintptr_t lib_fn = sym_lib_static_fn_addr(&lib_line);

    (void)state;
    assert_int_equal(prof_libs_collect_self(&libs), 0);

    assert_int_equal(
            prof_symbols_resolve_address(s, &libs, (uintptr_t)&test_static_fn, false, &sym, &lib),
            0);
    assert_string_equal(sym.function, "test_static_fn");
    assert_string_equal(base_name(sym.file), "test-symbols.c");
    assert_int_equal(sym.line, test_static_fn_brace_line);

    assert_int_equal(prof_symbols_resolve_address(s, &libs, lib_fn, false, &sym, &lib), 0);
    assert_string_equal(sym.function, "sym_lib_static_fn");
    assert_string_equal(base_name(sym.file), "libsym-lib.c");
    assert_int_equal(sym.line, lib_line);
    assert_string_equal(lib->name, "libsym-lib.so");

    prof_libs_done(&libs);
    prof_symbols_free(s);
}

/* Returns the size of the compressed .debug_* sections of libc's debug file as debug
 * packages install it (/usr/lib/debug/.build-id/xx/rest.debug), or 0 when there is none or
 * its DWARF is not compressed. */
static uint64_t libc_compressed_dwarf_bytes(const struct prof_lib *libc)
{
    char path[PATH_MAX];
    uint64_t total = 0;
    bool compressed = false;
    Elf_Scn *scn = NULL;
    size_t shstrndx;
    Elf *elf;
    int fd;

    if (!libc->code_id)
        return 0;
    (void)snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%.2s/%s.debug", libc->code_id,
                   libc->code_id + 2);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    (void)elf_version(EV_CURRENT);
    elf = elf_begin(fd, ELF_C_READ, NULL);
    if (elf && elf_getshdrstrndx(elf, &shstrndx) == 0) {
        while ((scn = elf_nextscn(elf, scn)) != NULL) {
            GElf_Shdr shdr;
            const char *n;

            if (!gelf_getshdr(scn, &shdr) || shdr.sh_type == SHT_NOBITS)
                continue;
            n = elf_strptr(elf, shstrndx, shdr.sh_name);
            if (!n || (strncmp(n, ".debug_", 7) != 0 && strncmp(n, ".zdebug_", 8) != 0))
                continue;
            compressed |= (shdr.sh_flags & SHF_COMPRESSED) || n[1] == 'z';
            total += shdr.sh_size;
        }
    }
    if (elf)
        (void)elf_end(elf);
    (void)close(fd);
    return compressed ? total : 0;
}

static void test_libc_getpid(void **state)
{
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};
    struct prof_symbol sym;
    const struct prof_lib *lib = NULL;

    (void)state;
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    assert_int_equal(prof_symbols_resolve_address(s, &libs, (uintptr_t)&getpid, false, &sym, &lib),
                     0);
    assert_string_equal(lib->name, "libc.so.6");
    /* glibc defines __getpid with getpid as a weak alias at the same address; libdwfl
     * prefers the global one. */
    if (strcmp(sym.function, "getpid") != 0 && strcmp(sym.function, "__getpid") != 0)
        fail_msg("getpid resolved to %s", sym.function);
    print_message("# getpid -> %s %s:%u\n", sym.function, sym.file ? sym.file : "?", sym.line);

    /* Debug files spell versioned definitions "realpath@@GLIBC_2.3" in .symtab: the
     * version is not part of the function's name. */
    assert_int_equal(
            prof_symbols_resolve_address(s, &libs, (uintptr_t)&realpath, false, &sym, &lib), 0);
    assert_non_null(strstr(sym.function, "realpath"));
    assert_null(strchr(sym.function, '@'));

    /* The cost rule: a libc whose packaged DWARF is compressed and large (libc6-dbg: 3.6 MiB)
     * gets names only; without the limit, lines. */
    if (libc_compressed_dwarf_bytes(lib) > PROF_SYMBOLS_DEFAULT_MAX_COMPRESSED_DWARF) {
        struct prof_symbols_options opts = {.max_compressed_dwarf_bytes = SIZE_MAX};

        print_message("# libc: %" PRIu64 " bytes of compressed DWARF: names only\n",
                      libc_compressed_dwarf_bytes(lib));
        assert_null(sym.file);
        assert_int_equal(stats_of(s).modules_names_only, 1);
        prof_symbols_free(s);
        assert_int_equal(prof_symbols_new_with_options(&opts, &s), 0);
        assert_int_equal(
                prof_symbols_resolve_address(s, &libs, (uintptr_t)&getpid, false, &sym, &lib), 0);
        assert_non_null(sym.file);
        assert_true(sym.line > 0);
        assert_int_equal(stats_of(s).modules_names_only, 0);
    }
    prof_libs_done(&libs);
    prof_symbols_free(s);
}

/* Finds a function of the vdso by name in its dynamic symbol table (read with libelf from
 * a copy of the image), and returns its ELF address, or 0. */
static uint64_t vdso_symbol(const char *want)
{
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)getauxval(AT_SYSINFO_EHDR);
    size_t size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
    char *image = malloc(size);
    Elf_Scn *scn = NULL;
    uint64_t value = 0;
    Elf *elf;

    assert_non_null(image);
    memcpy(image, eh, size);
    (void)elf_version(EV_CURRENT);
    elf = elf_memory(image, size);
    assert_non_null(elf);
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr shdr;
        Elf_Data *data;

        assert_non_null(gelf_getshdr(scn, &shdr));
        if (shdr.sh_type != SHT_DYNSYM)
            continue;
        data = elf_getdata(scn, NULL);
        for (size_t i = 0; data && i < shdr.sh_size / shdr.sh_entsize; i++) {
            GElf_Sym sym;
            const char *n;

            if (!gelf_getsym(data, (int)i, &sym))
                continue;
            n = elf_strptr(elf, shdr.sh_link, sym.st_name);
            if (n && strcmp(n, want) == 0 && GELF_ST_TYPE(sym.st_info) == STT_FUNC)
                value = sym.st_value;
        }
    }
    (void)elf_end(elf);
    free(image);
    return value;
}

static void test_vdso(void **state)
{
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};
    const struct prof_lib *vdso, *lib = NULL;
    struct prof_symbol sym;
    uint64_t fn;

    (void)state;
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    vdso = lib_named(&libs, "[vdso]");
    fn = getauxval(AT_SYSINFO_EHDR) ? vdso_symbol("__vdso_clock_gettime") : 0;
    if (!vdso || fn == 0) {
        prof_libs_done(&libs);
        prof_symbols_free(s);
        skip();
    }
    /* No file: the cache recognizes the running kernel's vdso by its build-id. */
    assert_int_equal(prof_symbols_resolve_address(s, &libs, vdso->bias + fn + 4, false, &sym, &lib),
                     0);
    assert_ptr_equal(lib, vdso);
    if (!strstr(sym.function, "clock_gettime"))
        fail_msg("vdso clock_gettime resolved to %s", sym.function);
    prof_libs_done(&libs);
    prof_symbols_free(s);
}

static void test_names_only(void **state)
{
    struct prof_symbols_options opts = {.names_only = true};
    struct prof_symbols *s = NULL;
    struct prof_libs libs = {0};
    struct prof_symbol sym;

    (void)state;
    collect_sites();
    assert_int_equal(prof_symbols_new_with_options(&opts, &s), 0);
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    for (int i = 0; i < site_count; i++) {
        assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[i].addr, true, &sym, NULL),
                         0);
        assert_string_equal(sym.function, sites[i].function);
        assert_null(sym.file);
        assert_int_equal(sym.line, 0);
    }
    prof_libs_done(&libs);
    prof_symbols_free(s);
}

/* The cache's own sorted symbol table must name addresses as libdwfl's linear search
 * (dwfl_module_addrinfo) does: random addresses in every module with a file. */
static void test_matches_libdwfl_addrinfo(void **state)
{
    static const Dwfl_Callbacks callbacks = {
            .find_elf = dwfl_build_id_find_elf,
            .find_debuginfo = dwfl_standard_find_debuginfo,
            .section_address = dwfl_offline_section_address,
    };
    struct prof_symbols_options opts = {.names_only = true};
    struct prof_symbols *s = NULL;
    struct prof_libs libs = {0};
    struct test_rng rng;
    int total = 0, named = 0, only_ref = 0;

    (void)state;
    test_rng_init(&rng, test_seed());
    assert_int_equal(prof_symbols_new_with_options(&opts, &s), 0);
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    for (size_t i = 0; i < libs.count; i++) {
        const struct prof_lib *lib = &libs.libs[i];
        Dwfl *dwfl;
        Dwfl_Module *mod;

        if (!lib->path)
            continue;
        dwfl = dwfl_begin(&callbacks);
        assert_non_null(dwfl);
        dwfl_report_begin(dwfl);
        mod = dwfl_report_elf(dwfl, lib->name, lib->path, -1, 0, true);
        assert_int_equal(dwfl_report_end(dwfl, NULL, NULL), 0);
        assert_non_null(mod);
        for (int k = 0; k < 2000; k++) {
            uint64_t vaddr = test_rng_range(&rng, lib->start, lib->end - 1) - lib->bias;
            GElf_Off off;
            GElf_Sym sym;
            const char *want = dwfl_module_addrinfo(mod, vaddr, &off, &sym, NULL, NULL, NULL);
            struct prof_symbol got;
            int r = prof_symbols_resolve(s, lib->path, lib->build_id, lib->build_id_len, vaddr,
                                         &got);

            total++;
            if (r != 0 && !want)
                continue;
            if (r != 0) {
                /* libdwfl stretches a sizeless label (_init) a little past its section. */
                only_ref++;
                continue;
            }
            if (!want) {
                /* Code no symbol covers: named by its function's start, at or before it. */
                char prefix[300];
                uint64_t start;
                int n = snprintf(prefix, sizeof(prefix), "%s+0x", lib->name);

                if (n <= 0 || strncmp(got.function, prefix, (size_t)n) != 0 ||
                    sscanf(got.function + n, "%" SCNx64, &start) != 1 || start > vaddr)
                    fail_msg("%s 0x%" PRIx64 ": %s, libdwfl: none", lib->name, vaddr, got.function);
                continue;
            }
            {
                /* The cache demangles (libstdc++'s own functions are C++). */
                size_t len = strcspn(want, "@");
                char *readable = prof_symbol_demangle(want, len);
                const char *w = readable ? readable : want;
                size_t wlen = readable ? strlen(readable) : len;

                if (strncmp(got.function, w, wlen) != 0 || strlen(got.function) != wlen)
                    fail_msg("%s 0x%" PRIx64 ": %s, libdwfl: %s", lib->name, vaddr, got.function,
                             want);
                free(readable);
            }
            named++;
        }
        dwfl_end(dwfl);
    }
    print_message("# %d addresses, %d named alike, %d named by libdwfl only\n", total, named,
                  only_ref);
    assert_true(named >= 1000); /* modules with only .dynsym leave many addresses unnamed */
    assert_true(only_ref * 100 <= total);
    prof_libs_done(&libs);
    prof_symbols_free(s);
}

/* --- the cache ------------------------------------------------------------------------ */

static void test_cache_hits_and_single_load(void **state)
{
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};
    const struct prof_lib *symlib;
    struct prof_symbol a, b;
    struct prof_symbols_stats st;

    (void)state;
    collect_sites();
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    symlib = lib_named(&libs, "libsym-lib.so");
    assert_non_null(symlib);

    /* The same address twice: the second is a hit, with the very same strings. */
    assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[2].addr, true, &a, NULL), 0);
    assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[2].addr, true, &b, NULL), 0);
    st = stats_of(s);
    assert_int_equal(st.lookups, 2);
    assert_int_equal(st.cache_hits, 1);
    assert_int_equal(st.modules_loaded, 1);
    assert_ptr_equal(a.function, b.function);
    assert_ptr_equal(a.file, b.file);

    /* Ten addresses in one module: it is opened once. */
    for (uint64_t i = 0; i < 10; i++) {
        int r = prof_symbols_resolve(s, symlib->path, symlib->build_id, symlib->build_id_len,
                                     sites[2].addr - symlib->bias - 1 - i, &a);
        assert_true(r == 0 || r == -ENOENT);
    }
    st = stats_of(s);
    assert_int_equal(st.modules_loaded, 1);
    assert_int_equal(st.modules_cached, 1);
    assert_int_equal(st.lookups, 12);
    assert_int_equal(st.cache_hits, 2); /* i = 0 is the address resolved above */
    assert_true(st.memory_bytes > 0);
    assert_true(st.string_bytes > 0);

    prof_libs_done(&libs);
    prof_symbols_free(s);
}

static void test_eviction(void **state)
{
    struct prof_symbols_options opts = {.max_modules = 1};
    struct prof_symbols *s = new_cache(1); /* everything is over the limit */
    struct prof_libs libs = {0};
    struct prof_symbol first, sym;
    struct prof_symbols_stats st;
    char *saved;

    (void)state;
    collect_sites();
    assert_int_equal(prof_libs_collect_self(&libs), 0);

    assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[0].addr, true, &first, NULL), 0);
    saved = strdup(first.function);
    assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[2].addr, true, &sym, NULL), 0);
    st = stats_of(s);
    assert_int_equal(st.modules_loaded, 2);
    assert_int_equal(st.modules_evicted, 1); /* the program went; the library in use stays */
    assert_int_equal(st.modules_cached, 1);
    /* Strings outlive their module's eviction. */
    assert_string_equal(first.function, saved);

    assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[0].addr, true, &sym, NULL), 0);
    assert_string_equal(sym.function, saved);
    assert_ptr_equal(sym.function, first.function); /* interned once */
    st = stats_of(s);
    assert_int_equal(st.modules_loaded, 3);
    assert_int_equal(st.modules_evicted, 2);
    assert_int_equal(st.cache_hits, 0);
    free(saved);
    prof_libs_done(&libs);
    prof_symbols_free(s);

    /* With room for everything, nothing is evicted. */
    s = new_cache(0);
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    for (int i = 0; i < site_count; i++)
        assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[i].addr, true, &sym, NULL),
                         0);
    st = stats_of(s);
    assert_int_equal(st.modules_loaded, 2);
    assert_int_equal(st.modules_evicted, 0);
    prof_symbols_free(s);

    /* The bound on open modules (file descriptors) evicts the same way. */
    assert_int_equal(prof_symbols_new_with_options(&opts, &s), 0);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < site_count; i++)
            assert_site(s, &libs, &sites[i]);
    }
    st = stats_of(s);
    assert_int_equal(st.modules_cached, 1);
    assert_int_equal(st.modules_loaded, 4); /* program, library, program, library */
    assert_int_equal(st.modules_evicted, 3);
    assert_int_equal(st.cache_hits, 0); /* an evicted module takes its results along */
    prof_libs_done(&libs);
    prof_symbols_free(s);
}

/* Without a build-id the module is keyed by path and file version: a rewritten file is
 * loaded again. */
static void test_path_key(void **state)
{
    char *dir = test_tmpdir("sym-path-key");
    char path[PATH_MAX];
    struct prof_symbols *s = new_cache(0);
    struct prof_symbol sym;
    struct prof_symbols_stats st;
    struct timespec times[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    uint64_t text;
    int r;

    (void)state;
    (void)snprintf(path, sizeof(path), "%s/libsym-copy.so", dir);
    copy_file(sym_lib_path, path);
    text = elf_text_addr(path);
    r = prof_symbols_resolve(s, path, NULL, 0, text, &sym);
    assert_true(r == 0 || r == -ENOENT);
    assert_int_equal(prof_symbols_resolve(s, path, NULL, 0, text, &sym), r);
    st = stats_of(s);
    assert_int_equal(st.modules_loaded, 1);
    assert_int_equal(st.lookups, 2);
    assert_int_equal(st.cache_hits, 1);

    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
    (void)prof_symbols_resolve(s, path, NULL, 0, text, &sym);
    assert_int_equal(stats_of(s).modules_loaded, 2);

    prof_symbols_free(s);
    test_rmtree(dir);
    free(dir);
}

/* --- separate debug info --------------------------------------------------------------- */

/* Makes dir/name, a copy of libsym-lib.so stripped of its symbol table and DWARF, and
 * debug_path, the debug file holding them (objcopy --only-keep-debug). With link, the copy
 * gets a .gnu_debuglink to the debug file. */
static void make_stripped_copy(const char *dir, const char *name, const char *debug_path, bool link)
{
    char lib[PATH_MAX];

    (void)snprintf(lib, sizeof(lib), "%s/%s", dir, name);
    copy_file(sym_lib_path, lib);
    assert_int_equal(run_quiet("objcopy --only-keep-debug '%s' '%s'", lib, debug_path), 0);
    assert_int_equal(run_quiet("strip --strip-debug --strip-unneeded '%s'", lib), 0);
    if (link)
        assert_int_equal(run_quiet("cd '%s' && objcopy --add-gnu-debuglink='%s' '%s'", dir,
                                   base_name(debug_path), lib),
                         0);
    assert_false(elf_has_section(lib, ".symtab"));
    assert_false(elf_has_section(lib, ".debug_info"));
    assert_true(elf_has_section(debug_path, ".symtab"));
}

/* dlopens dir/name, runs its sym_lib_global_fn, and returns the handle. */
static void *load_copy(const char *dir, const char *name)
{
    char lib[PATH_MAX];
    void (*global_fn)(sym_probe_cb);
    void *h;

    (void)snprintf(lib, sizeof(lib), "%s/%s", dir, name);
    h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fail_msg("dlopen %s: %s", lib, dlerror());
    *(void **)&global_fn = dlsym(h, "sym_lib_global_fn");
    assert_non_null(global_fn);
    site_count = 0;
    global_fn(probe);
    assert_int_equal(site_count, 2);
    return h;
}

static void test_stripped_with_debuglink(void **state)
{
    char *dir, debug[PATH_MAX], lib[PATH_MAX];
    struct prof_symbols *s;
    struct prof_libs libs = {0};
    const struct prof_lib *copy;
    void *h;

    (void)state;
    if (!have_binutils())
        skip();
    dir = test_tmpdir("sym-debuglink");
    (void)snprintf(debug, sizeof(debug), "%s/libsym-dl.so.dbg", dir);
    (void)snprintf(lib, sizeof(lib), "%s/libsym-dl.so", dir);
    make_stripped_copy(dir, "libsym-dl.so", debug, true);
    h = load_copy(dir, "libsym-dl.so");

    assert_int_equal(prof_libs_collect_self(&libs), 0);
    copy = prof_libs_lookup(&libs, sites[0].addr);
    assert_non_null(copy);
    assert_string_equal(copy->name, "libsym-dl.so");

    /* The static function's name and both lines come from the debug file. */
    s = new_cache(0);
    assert_site(s, &libs, &sites[0]);
    assert_site(s, &libs, &sites[1]);
    assert_string_equal(sites[1].function, "sym_lib_static_fn");
    assert_true(stats_of(s).memory_bytes > 0);
    prof_symbols_free(s);

    /* Without the debug file only .dynsym is left: the static function is unknown. */
    assert_int_equal(unlink(debug), 0);
    s = new_cache(0);
    {
        struct prof_symbol sym;
        int r = prof_symbols_resolve_address(s, &libs, sites[1].addr, true, &sym, NULL);

        assert_true(r == -ENOENT || (r == 0 && strcmp(sym.function, "sym_lib_static_fn") != 0));
        assert_int_equal(prof_symbols_resolve_address(s, &libs, sites[0].addr, true, &sym, NULL),
                         0);
        assert_string_equal(sym.function, "sym_lib_global_fn");
        assert_null(sym.file);
    }
    prof_symbols_free(s);

    prof_libs_done(&libs);
    assert_int_equal(dlclose(h), 0);
    test_rmtree(dir);
    free(dir);
}

static void test_debug_file_by_build_id(void **state)
{
    char *dir, dbgdir[PATH_MAX], debug[PATH_MAX], lib[PATH_MAX], idpath[2 * PATH_MAX];
    struct prof_symbols_options opts = {0};
    struct prof_symbols *s = NULL;
    struct prof_libs libs = {0};
    const struct prof_lib *copy;
    void *h;

    (void)state;
    if (!have_binutils())
        skip();
    dir = test_tmpdir("sym-build-id");
    (void)snprintf(debug, sizeof(debug), "%s/separate.debug", dir);
    (void)snprintf(lib, sizeof(lib), "%s/libsym-bid.so", dir);
    make_stripped_copy(dir, "libsym-bid.so", debug, false);
    h = load_copy(dir, "libsym-bid.so");
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    copy = lib_with_path(&libs, lib);
    assert_non_null(copy);
    assert_non_null(copy->code_id);

    /* DBG/.build-id/xx/rest.debug, as debug packages install them under /usr/lib/debug. */
    (void)snprintf(dbgdir, sizeof(dbgdir), "%s/dbg", dir);
    (void)snprintf(idpath, sizeof(idpath), "%s/.build-id/%.2s", dbgdir, copy->code_id);
    assert_int_equal(run_quiet("mkdir -p '%s' && mv '%s' '%s/%s.debug'", idpath, debug, idpath,
                               copy->code_id + 2),
                     0);
    opts.debuginfo_path = dbgdir;
    assert_int_equal(prof_symbols_new_with_options(&opts, &s), 0);
    assert_site(s, &libs, &sites[0]);
    assert_site(s, &libs, &sites[1]);
    prof_symbols_free(s);

    /* With the binary gone, the debug file found by build-id serves on its own. */
    assert_int_equal(unlink(lib), 0);
    assert_int_equal(prof_symbols_new_with_options(&opts, &s), 0);
    assert_site(s, &libs, &sites[1]);
    prof_symbols_free(s);

    prof_libs_done(&libs);
    assert_int_equal(dlclose(h), 0);
    test_rmtree(dir);
    free(dir);
}

/* --- the cost rule: file:line only where DWARF is cheap to open ------------------------ */

/* Makes dir/name, a copy of libsym-lib.so changed by the shell commands cmd (run in dir,
 * with $L the copy's name), dlopens it and records its two probe sites. */
static void *prepare_copy(const char *dir, const char *name, const char *cmd)
{
    char lib[PATH_MAX];

    (void)snprintf(lib, sizeof(lib), "%s/%s", dir, name);
    copy_file(sym_lib_path, lib);
    if (run_quiet("cd '%s' && L='%s' && { %s; } >/dev/null 2>&1", dir, name, cmd) != 0)
        fail_msg("%s: %s failed", name, cmd);
    return load_copy(dir, name);
}

/* Resolves the two probe sites of the copy just loaded, in a fresh cache with the given
 * cost limit (0 = default): names always, file and line only when want_lines. Returns the
 * cache's modules_names_only. */
static uint64_t resolve_copy_sites(const struct prof_libs *libs, const char *debuginfo_path,
                                   size_t limit, bool want_lines)
{
    struct prof_symbols_options opts = {.max_compressed_dwarf_bytes = limit,
                                        .debuginfo_path = debuginfo_path};
    struct prof_symbols *s = NULL;
    uint64_t names_only;

    assert_int_equal(prof_symbols_new_with_options(&opts, &s), 0);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 2; i++) {
            struct prof_symbol sym;

            if (want_lines) {
                assert_site(s, libs, &sites[i]);
                continue;
            }
            assert_int_equal(prof_symbols_resolve_address(s, libs, sites[i].addr, true, &sym, NULL),
                             0);
            assert_string_equal(sym.function, sites[i].function);
            assert_null(sym.file);
            assert_int_equal(sym.line, 0);
        }
    }
    /* The static function's name comes from a .symtab whatever the rule decides. */
    assert_string_equal(sites[1].function, "sym_lib_static_fn");
    names_only = stats_of(s).modules_names_only;
    assert_int_equal(stats_of(s).modules_loaded, 1);
    prof_symbols_free(s);
    return names_only;
}

static void test_cost_rule(void **state)
{
    static const struct {
        const char *name;
        const char *cmd;
        bool compressed; /* the DWARF libdw would open is compressed */
        bool by_build_id;
    } cases[] = {
            /* DWARF in the file itself: uncompressed, ELF gABI compressed, GNU .zdebug_*. */
            {"libsym-u.so", "true", false, false},
            {"libsym-z.so", "objcopy --compress-debug-sections=zlib $L", true, false},
            {"libsym-zg.so", "objcopy --compress-debug-sections=zlib-gnu $L", true, false},
            /* A compressed debug file next to a file without .symtab: libdwfl finds it for
             * the names. */
            {"libsym-sz.so",
             "objcopy --only-keep-debug --compress-debug-sections=zlib $L $L.dbg && "
             "strip --strip-debug --strip-unneeded $L && objcopy --add-gnu-debuglink=$L.dbg $L",
             true, false},
            /* The same next to a file that keeps its .symtab: libdwfl would look for the debug
             * file only when opening DWARF (.gnu_debuglink search, vetted in the callback). */
            {"libsym-kz.so",
             "objcopy --only-keep-debug --compress-debug-sections=zlib $L $L.dbg && "
             "strip --strip-debug $L && objcopy --add-gnu-debuglink=$L.dbg $L",
             true, false},
            /* ... and by build-id, as debug packages install them. */
            {"libsym-bz.so",
             "objcopy --only-keep-debug --compress-debug-sections=zlib $L $L.dbg && "
             "strip --strip-debug $L",
             true, true},
    };
    char *dir;

    (void)state;
    if (!have_binutils())
        skip();
    dir = test_tmpdir("sym-cost");
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct prof_libs libs = {0};
        char dbgdir[PATH_MAX], lib[PATH_MAX];
        const char *debuginfo_path = NULL;
        void *h;

        print_message("# %s\n", cases[c].name);
        h = prepare_copy(dir, cases[c].name, cases[c].cmd);
        (void)snprintf(lib, sizeof(lib), "%s/%s", dir, cases[c].name);
        assert_int_equal(prof_libs_collect_self(&libs), 0);
        if (cases[c].by_build_id) {
            const struct prof_lib *copy = lib_with_path(&libs, lib);
            char idpath[2 * PATH_MAX];

            assert_non_null(copy);
            assert_non_null(copy->code_id);
            (void)snprintf(dbgdir, sizeof(dbgdir), "%s/dbg-%s", dir, cases[c].name);
            (void)snprintf(idpath, sizeof(idpath), "%s/.build-id/%.2s", dbgdir, copy->code_id);
            assert_int_equal(run_quiet("mkdir -p '%s' && mv '%s.dbg' '%s/%s.debug'", idpath, lib,
                                       idpath, copy->code_id + 2),
                             0);
            debuginfo_path = dbgdir;
        }
        /* A small module: its DWARF (compressed or not) is cheap, lines with the default. */
        assert_int_equal(resolve_copy_sites(&libs, debuginfo_path, 0, true), 0);
        /* Over a 1-byte limit: names only when compressed; uncompressed DWARF always. */
        assert_int_equal(resolve_copy_sites(&libs, debuginfo_path, 1, !cases[c].compressed),
                         cases[c].compressed);
        assert_int_equal(resolve_copy_sites(&libs, debuginfo_path, SIZE_MAX, true), 0);
        prof_libs_done(&libs);
        assert_int_equal(dlclose(h), 0);
    }
    test_rmtree(dir);
    free(dir);
}

/* --- broken modules ---------------------------------------------------------------------- */

static void test_module_without_symbols(void **state)
{
    struct prof_symbols *s = new_cache(0);
    struct prof_symbol sym;
    uint64_t text = elf_text_addr(sym_nosyms_path);

    char want[PATH_MAX];
    const char *slash = strrchr(sym_nosyms_path, '/');

    (void)state;
    assert_false(elf_has_section(sym_nosyms_path, ".symtab"));
    /* Its only function, at the start of .text: named by that start, as .eh_frame gives it
     * (every address of the function the same name). */
    (void)snprintf(want, sizeof(want), "%s+0x%" PRIx64, slash ? slash + 1 : sym_nosyms_path, text);
    assert_int_equal(prof_symbols_resolve(s, sym_nosyms_path, NULL, 0, text + 1, &sym), 0);
    assert_string_equal(sym.function, want);
    assert_null(sym.file);
    assert_int_equal(prof_symbols_resolve(s, sym_nosyms_path, NULL, 0, text + 4, &sym), 0);
    assert_string_equal(sym.function, want);
    assert_int_equal(prof_symbols_resolve(s, sym_nosyms_path, NULL, 0, text + 1, &sym), 0);
    assert_int_equal(stats_of(s).cache_hits, 1);
    /* The ELF header: no symbol, no call-frame information. */
    assert_int_equal(prof_symbols_resolve(s, sym_nosyms_path, NULL, 0, 0x10, &sym), -ENOENT);
    assert_non_null(strstr(prof_symbols_get_last_error(s), "no symbol"));
    assert_int_equal(stats_of(s).modules_loaded, 1);
    prof_symbols_free(s);
}

static void test_bad_files(void **state)
{
    char *dir = test_tmpdir("sym-bad");
    char garbage[PATH_MAX], empty[PATH_MAX], missing[PATH_MAX], lib[PATH_MAX];
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};
    const struct prof_lib *symlib;
    uint8_t bogus_id[20] = {0xde, 0xad, 0xbe, 0xef};
    struct prof_symbol sym = {0};
    struct test_rng rng;
    uint8_t junk[4096];
    FILE *f;

    (void)state;
    test_rng_init(&rng, test_seed());
    test_rng_fill(&rng, junk, sizeof(junk));
    junk[0] = 'X'; /* never the ELF magic */
    (void)snprintf(garbage, sizeof(garbage), "%s/garbage.so", dir);
    (void)snprintf(empty, sizeof(empty), "%s/empty.so", dir);
    (void)snprintf(missing, sizeof(missing), "%s/missing.so", dir);
    f = fopen(garbage, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
    assert_int_equal(fclose(f), 0);
    f = fopen(empty, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);

    assert_int_equal(prof_symbols_resolve(s, garbage, NULL, 0, 0x1000, &sym), -ENOEXEC);
    assert_non_null(strstr(prof_symbols_get_last_error(s), "not an ELF file"));
    assert_int_equal(prof_symbols_resolve(s, empty, NULL, 0, 0x1000, &sym), -ENOEXEC);
    assert_int_equal(prof_symbols_resolve(s, missing, NULL, 0, 0x1000, &sym), -ENOENT);
    assert_non_null(strstr(prof_symbols_get_last_error(s), "No such file"));
    assert_non_null(strstr(prof_symbols_get_last_error(s), "missing.so"));
    assert_int_equal(prof_symbols_resolve(s, dir, NULL, 0, 0x1000, &sym), -EISDIR);
    assert_null(sym.function); /* untouched on failure */

    /* A cached failure is not retried. */
    assert_int_equal(prof_symbols_resolve(s, garbage, NULL, 0, 0x2000, &sym), -ENOEXEC);
    assert_int_equal(stats_of(s).modules_failed, 4);

    /* An ELF file with another build-id than the one mapped. */
    (void)snprintf(lib, sizeof(lib), "%s/libsym-stale.so", dir);
    copy_file(sym_lib_path, lib);
    assert_int_equal(prof_symbols_resolve(s, lib, bogus_id, sizeof(bogus_id), 0x1000, &sym),
                     -ESTALE);
    assert_non_null(strstr(prof_symbols_get_last_error(s), "build-id"));
    /* No path and an unknown build-id. */
    bogus_id[5] = 1;
    assert_int_equal(prof_symbols_resolve(s, NULL, bogus_id, sizeof(bogus_id), 0x1000, &sym),
                     -ENOENT);
    assert_non_null(strstr(prof_symbols_get_last_error(s), "deadbeef"));

    /* Bad arguments, and an address in no module. */
    assert_int_equal(prof_symbols_resolve(s, NULL, NULL, 0, 0x1000, &sym), -EINVAL);
    assert_int_equal(prof_symbols_resolve(NULL, lib, NULL, 0, 0x1000, &sym), -EINVAL);
    assert_int_equal(prof_symbols_resolve(s, lib, NULL, 0, 0x1000, NULL), -EINVAL);
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    assert_int_equal(prof_symbols_resolve_address(s, &libs, 8, false, &sym, NULL), -ENXIO);
    symlib = lib_named(&libs, "libsym-lib.so");
    assert_non_null(symlib);
    /* An address inside the module but outside any function (the ELF header). */
    assert_int_equal(
            prof_symbols_resolve(s, symlib->path, symlib->build_id, symlib->build_id_len, 0, &sym),
            -ENOENT);

    prof_libs_done(&libs);
    prof_symbols_free(s);
    test_rmtree(dir);
    free(dir);
}

/* A module whose file was deleted while loaded: a cache that opened it before keeps
 * working (libdw holds it open); a new cache reports -ENOENT, since the file is gone and
 * nothing else carries its build-id. /proc/PID/map_files could reopen the mapping, but only
 * with CAP_SYS_ADMIN, so it is not tried: callers get the same answer as unprivileged. */
static void test_deleted_file(void **state)
{
    char *dir = test_tmpdir("sym-deleted");
    char lib[PATH_MAX];
    struct prof_symbols *before = new_cache(0), *after = new_cache(0);
    struct prof_libs libs = {0}, maps = {0};
    const struct prof_lib *self_lib, *maps_lib;
    struct prof_symbol sym;
    void *h;

    (void)state;
    (void)snprintf(lib, sizeof(lib), "%s/libsym-del.so", dir);
    copy_file(sym_lib_path, lib);
    h = load_copy(dir, "libsym-del.so");
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    assert_site(before, &libs, &sites[0]);
    assert_int_equal(unlink(lib), 0);

    /* Both collectors still list it, with its build-id read from memory. */
    prof_libs_done(&libs);
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    assert_int_equal(prof_libs_collect_pid(getpid(), &maps), 0);
    self_lib = lib_with_path(&libs, lib);
    maps_lib = lib_with_path(&maps, lib);
    assert_non_null(self_lib);
    assert_non_null(maps_lib);
    assert_true(self_lib->build_id_len > 0);
    assert_int_equal(maps_lib->build_id_len, self_lib->build_id_len);
    assert_memory_equal(maps_lib->build_id, self_lib->build_id, self_lib->build_id_len);
    assert_int_equal(maps_lib->bias, self_lib->bias);

    assert_site(before, &libs, &sites[1]);
    assert_int_equal(prof_symbols_resolve_address(after, &libs, sites[1].addr, true, &sym, NULL),
                     -ENOENT);
    assert_non_null(strstr(prof_symbols_get_last_error(after), "libsym-del.so"));

    prof_libs_done(&libs);
    prof_libs_done(&maps);
    prof_symbols_free(before);
    prof_symbols_free(after);
    assert_int_equal(dlclose(h), 0);
    test_rmtree(dir);
    free(dir);
}

/* --- another process ------------------------------------------------------------------- */

static void test_other_process(void **state)
{
    int in[2], out[2];
    posix_spawn_file_actions_t fa;
    char *argv[] = {(char *)sym_known_path, NULL};
    struct prof_symbols *s = new_cache(0);
    struct prof_libs libs = {0};
    char line[512];
    int checked = 0, status;
    pid_t pid;
    FILE *f;

    (void)state;
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, in[0], 0), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, out[1], 1), 0);
    assert_int_equal(posix_spawn(&pid, sym_known_path, &fa, NULL, argv, environ), 0);
    (void)posix_spawn_file_actions_destroy(&fa);
    (void)close(in[0]);
    (void)close(out[1]);
    f = fdopen(out[0], "r");
    assert_non_null(f);

    while (fgets(line, sizeof(line), f) && strcmp(line, "ready\n") != 0) {
        char kind[16], function[128], file[128];
        int want_line;
        unsigned long long addr;
        struct prof_symbol sym;
        const struct prof_lib *lib = NULL;
        int r;

        assert_int_equal(
                sscanf(line, "%15s %127s %127s %d %llx", kind, function, file, &want_line, &addr),
                5);
        if (libs.count == 0)
            assert_int_equal(prof_libs_collect_pid(pid, &libs), 0);
        r = prof_symbols_resolve_address(s, &libs, addr, strcmp(kind, "site") == 0, &sym, &lib);
        if (r != 0)
            fail_msg("%s: %d %s", line, r, prof_symbols_get_last_error(s));
        if (strcmp(function, "getpid") == 0) {
            assert_string_equal(lib->name, "libc.so.6");
            assert_non_null(strstr(sym.function, "getpid"));
        } else {
            assert_string_equal(sym.function, function);
            assert_non_null(sym.file);
            assert_string_equal(base_name(sym.file), file);
            assert_int_equal(sym.line, want_line);
        }
        checked++;
    }
    (void)close(in[1]); /* the workload exits */
    (void)fclose(f);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(checked, 4 + 3); /* 4 probe sites, 3 entries */
    assert_non_null(lib_named(&libs, "sym-known"));
    assert_non_null(lib_named(&libs, "libsym-lib.so"));
    /* sym-known, libsym-lib.so, libc */
    assert_int_equal(stats_of(s).modules_loaded, 3);

    prof_libs_done(&libs);
    prof_symbols_free(s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_demangle),
            cmocka_unit_test(test_resolve_self_sites),
            cmocka_unit_test(test_return_address_minus_one),
            cmocka_unit_test(test_entry_addresses),
            cmocka_unit_test(test_libc_getpid),
            cmocka_unit_test(test_vdso),
            cmocka_unit_test(test_names_only),
            cmocka_unit_test(test_matches_libdwfl_addrinfo),
            cmocka_unit_test(test_cache_hits_and_single_load),
            cmocka_unit_test(test_eviction),
            cmocka_unit_test(test_path_key),
            cmocka_unit_test(test_stripped_with_debuglink),
            cmocka_unit_test(test_debug_file_by_build_id),
            cmocka_unit_test(test_cost_rule),
            cmocka_unit_test(test_module_without_symbols),
            cmocka_unit_test(test_bad_files),
            cmocka_unit_test(test_deleted_file),
            cmocka_unit_test(test_other_process),
    };

    if (argc < 4) {
        fprintf(stderr, "usage: %s SYM-KNOWN SYM-NOSYMS LIBSYM-LIB\n", argv[0]);
        return 2;
    }
    sym_known_path = argv[1];
    sym_nosyms_path = argv[2];
    sym_lib_path = argv[3];
    /* Never ask debuginfod servers (libdwfl does when DEBUGINFOD_URLS is set): the tests
     * look up build-ids that exist nowhere. */
    (void)unsetenv("DEBUGINFOD_URLS");
    return cmocka_run_group_tests_name("profile-symbols", tests, NULL, NULL);
}
