/* tests/unit/profile/test-libs.c - prof_libs_*: the modules of this process, from
 * dl_iterate_phdr() and from /proc/self/maps, checked against the loader and readelf; lookups
 * against a linear search; Breakpad ids against a hand-computed vector.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "profile/libs.h"
#include "profile/maps.h"
#include "sym-lib.h"
#include "testlib.h"

static const struct prof_lib *find_by_name(const struct prof_libs *libs, const char *name)
{
    for (size_t i = 0; i < libs->count; i++) {
        if (strcmp(libs->libs[i].name, name) == 0)
            return &libs->libs[i];
    }
    return NULL;
}

static const struct prof_lib *find_by_path(const struct prof_libs *libs, const char *path)
{
    for (size_t i = 0; i < libs->count; i++) {
        if (libs->libs[i].path && strcmp(libs->libs[i].path, path) == 0)
            return &libs->libs[i];
    }
    return NULL;
}

/* Reads the build-id of path with `readelf -n`, an independent parser. Returns its length,
 * 0 when readelf printed none, -1 when readelf could not run. */
static int readelf_build_id(const char *path, uint8_t *out, size_t cap)
{
    char cmd[PATH_MAX + 64], line[512];
    int len = 0;
    FILE *p;

    (void)snprintf(cmd, sizeof(cmd), "readelf -n '%s' 2>/dev/null", path);
    p = popen(cmd, "r");
    if (!p)
        return -1;
    while (fgets(line, sizeof(line), p)) {
        const char *hex = strstr(line, "Build ID: ");
        unsigned int byte;

        if (!hex || len > 0)
            continue;
        hex += strlen("Build ID: ");
        while ((size_t)len < cap && sscanf(hex, "%2x", &byte) == 1) {
            out[len++] = (uint8_t)byte;
            hex += 2;
        }
    }
    if (pclose(p) != 0 && len == 0)
        return -1;
    return len;
}

static void assert_sorted_disjoint(const struct prof_libs *libs)
{
    for (size_t i = 0; i < libs->count; i++) {
        assert_true(libs->libs[i].start < libs->libs[i].end);
        assert_non_null(libs->libs[i].name);
        if (i > 0)
            assert_true(libs->libs[i - 1].end <= libs->libs[i].start);
    }
}

static void assert_ids_consistent(const struct prof_lib *lib)
{
    char bp[40];

    if (lib->build_id_len == 0) {
        assert_null(lib->breakpad_id);
        assert_null(lib->code_id);
        return;
    }
    assert_int_equal(prof_lib_format_breakpad_id(lib->build_id, lib->build_id_len, bp, sizeof(bp)),
                     0);
    assert_string_equal(lib->breakpad_id, bp);
    assert_int_equal(strlen(lib->code_id), 2 * lib->build_id_len);
    for (size_t i = 0; i < lib->build_id_len; i++) {
        unsigned int byte;

        assert_int_equal(sscanf(lib->code_id + 2 * i, "%2x", &byte), 1);
        assert_int_equal(byte, lib->build_id[i]);
    }
}

static void test_collect_self(void **state)
{
    struct prof_libs libs = {0};
    const struct prof_lib *main_lib, *libc, *symlib, *vdso;
    char *exe = realpath("/proc/self/exe", NULL);
    const char *exe_name = strrchr(exe, '/') + 1;
    struct link_map *lm = NULL;
    Dl_info info;

    (void)state;
    {
        uint8_t id[PROF_BUILD_ID_MAX];

        if (readelf_build_id(exe, id, sizeof(id)) < 0) {
            free(exe);
            skip(); /* no readelf (binutils) */
        }
    }
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    assert_true(libs.count >= 4);
    assert_sorted_disjoint(&libs);

    main_lib = find_by_name(&libs, exe_name);
    libc = find_by_name(&libs, "libc.so.6");
    symlib = find_by_name(&libs, "libsym-lib.so");
    vdso = find_by_name(&libs, "[vdso]");
    assert_non_null(main_lib);
    assert_non_null(libc);
    assert_non_null(symlib);
    assert_string_equal(main_lib->path, exe);

    /* The vdso has no file, but a build-id in its notes. */
    if (vdso) {
        assert_null(vdso->path);
        assert_true(vdso->build_id_len > 0);
    }

    /* Each module with a file has the build-id readelf sees in that file. */
    for (size_t i = 0; i < libs.count; i++) {
        const struct prof_lib *lib = &libs.libs[i];
        uint8_t id[PROF_BUILD_ID_MAX];
        int n;

        assert_ids_consistent(lib);
        if (!lib->path)
            continue;
        n = readelf_build_id(lib->path, id, sizeof(id));
        assert_true(n >= 0);
        assert_int_equal((size_t)n, lib->build_id_len);
        assert_memory_equal(id, lib->build_id, (size_t)n);
    }
    assert_true(main_lib->build_id_len >= 16);
    assert_true(libc->build_id_len >= 16);

    /* The bias is the loader's l_addr, and a function's address maps to its module. */
    assert_int_not_equal(
            dladdr1((void *)(uintptr_t)&sym_lib_global_fn, &info, (void **)&lm, RTLD_DL_LINKMAP),
            0);
    assert_int_equal(symlib->bias, lm->l_addr);
    assert_ptr_equal(prof_libs_lookup(&libs, (uintptr_t)&sym_lib_global_fn), symlib);
    assert_ptr_equal(prof_libs_lookup(&libs, (uintptr_t)&getpid), libc);
    assert_ptr_equal(prof_libs_lookup(&libs, (uintptr_t)&test_collect_self), main_lib);
    assert_null(prof_libs_lookup(&libs, (uintptr_t)&libs)); /* the stack */

    prof_libs_done(&libs);
    assert_null(libs.libs);
    assert_int_equal(libs.count, 0);
    prof_libs_done(&libs); /* idempotent */
    free(exe);
}

static void test_collect_pid_agrees_with_self(void **state)
{
    struct prof_libs self = {0}, maps = {0};
    size_t with_path = 0, maps_with_path = 0;

    (void)state;
    assert_int_equal(prof_libs_collect_self(&self), 0);
    assert_int_equal(prof_libs_collect_pid(getpid(), &maps), 0);
    assert_sorted_disjoint(&maps);

    for (size_t i = 0; i < self.count; i++) {
        const struct prof_lib *a = &self.libs[i], *b;

        if (!a->path) {
            b = find_by_name(&maps, "[vdso]");
            assert_non_null(b);
        } else {
            with_path++;
            b = find_by_path(&maps, a->path);
            if (!b)
                fail_msg("%s is in dl_iterate_phdr's list, not in /proc/self/maps", a->path);
        }
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->start, b->start);
        assert_int_equal(a->end, b->end);
        assert_int_equal(a->offset, b->offset);
        assert_int_equal(a->bias, b->bias);
        assert_int_equal(a->build_id_len, b->build_id_len);
        assert_memory_equal(a->build_id, b->build_id, a->build_id_len);
        assert_ids_consistent(b);
    }
    for (size_t i = 0; i < maps.count; i++)
        maps_with_path += maps.libs[i].path != NULL;
    assert_int_equal(with_path, maps_with_path);

    prof_libs_done(&self);
    prof_libs_done(&maps);
}

static void test_collect_pid_errors(void **state)
{
    struct prof_libs libs = {0};

    (void)state;
    /* Above any pid_max (at most 2^22). */
    assert_int_equal(prof_libs_collect_pid(0x7ffffff0, &libs), -ENOENT);
    assert_int_equal(prof_libs_collect_pid(0, &libs), -EINVAL);
    assert_int_equal(prof_libs_collect_pid(getpid(), NULL), -EINVAL);
    assert_null(libs.libs);
}

static void test_lookup_matches_linear_search(void **state)
{
    struct test_rng rng;
    struct prof_libs libs = {0};
    uint64_t at = 0x1000;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int round = 0; round < 50; round++) {
        size_t n = (size_t)test_rng_range(&rng, 0, 40);

        libs.libs = calloc(n ? n : 1, sizeof(*libs.libs));
        assert_non_null(libs.libs);
        libs.count = n;
        at = test_rng_range(&rng, 0, 0x10000);
        for (size_t i = 0; i < n; i++) {
            at += test_rng_range(&rng, 0, 3) * 0x1000; /* gaps, or adjacent modules */
            libs.libs[i].start = at;
            at += test_rng_range(&rng, 1, 8) * 0x1000;
            libs.libs[i].end = at;
        }
        for (int k = 0; k < 500; k++) {
            uint64_t addr = test_rng_range(&rng, 0, at + 0x2000);
            const struct prof_lib *want = NULL;

            if (k < 2 * (int)n) /* every boundary */
                addr = k % 2 ? libs.libs[k / 2].end : libs.libs[k / 2].start;
            for (size_t i = 0; i < n; i++) {
                if (libs.libs[i].start <= addr && addr < libs.libs[i].end)
                    want = &libs.libs[i];
            }
            assert_ptr_equal(prof_libs_lookup(&libs, addr), want);
        }
        free(libs.libs);
    }
    assert_null(prof_libs_lookup(NULL, 0x1000));
}

/* The vdso's functions are named from its symbol table in memory: the loader's own lookup
 * (the vdso is in the link map as linux-vdso.so.1) finds __vdso_clock_gettime, and the
 * name comes back for every byte of it, at the vdso's ELF address (runtime - bias). */
static void test_vdso_function(void **state)
{
    struct prof_libs libs = {0};
    const struct prof_lib *vdso;
    void *h = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *fn = h ? dlsym(h, "__vdso_clock_gettime") : NULL;
    uint64_t vaddr;
    Dl_info info;
    ElfW(Sym) *sym = NULL;

    (void)state;
    assert_non_null(fn); /* x86-64 Linux always maps a vdso with clock_gettime */
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    vdso = find_by_name(&libs, "[vdso]");
    assert_non_null(vdso);
    assert_true((uint64_t)(uintptr_t)fn >= vdso->start && (uint64_t)(uintptr_t)fn < vdso->end);
    assert_int_not_equal(dladdr1(fn, &info, (void **)&sym, RTLD_DL_SYMENT), 0);
    assert_non_null(sym);
    assert_true(sym->st_size > 1);
    vaddr = (uint64_t)(uintptr_t)fn - vdso->bias;
    assert_string_equal(prof_vdso_function(vaddr), "__vdso_clock_gettime");
    assert_string_equal(prof_vdso_function(vaddr + sym->st_size - 1), "__vdso_clock_gettime");
    /* Outside every function: the ELF header, and far past the image. */
    assert_null(prof_vdso_function(0));
    assert_null(prof_vdso_function(UINT64_MAX / 2));
    prof_libs_done(&libs);
    (void)dlclose(h);
}

/* prof_maps_read() against what this process knows it maps: its own code (the program's
 * file, executable), its stack, an anonymous mapping, a deleted file (suffix removed,
 * flagged); a hole finds nothing; a limit below the file's size is refused. */
static void test_maps_read(void **state)
{
    char *exe = realpath("/proc/self/exe", NULL);
    char tmpl[] = "/tmp/fleetprof-maps-XXXXXX";
    struct prof_maps maps;
    const struct prof_map *m;
    int fd = mkstemp(tmpl);
    void *anon = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *file;

    (void)state;
    assert_true(fd >= 0 && anon != MAP_FAILED);
    assert_int_equal(ftruncate(fd, 4096), 0);
    file = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(file != MAP_FAILED);
    assert_int_equal(unlink(tmpl), 0);
    /* The middle page unmapped: a hole between two mappings. */
    assert_int_equal(munmap((char *)anon + 4096, 4096), 0);

    assert_int_equal(prof_maps_read(0, 64u << 20, &maps), 0);
    assert_true(maps.count > 10);
    for (size_t i = 1; i < maps.count; i++)
        assert_true(maps.map[i - 1].end <= maps.map[i].start);

    m = prof_maps_find(&maps, (uintptr_t)&test_maps_read);
    assert_non_null(m);
    assert_string_equal(m->path, exe);
    assert_true(m->exec);
    assert_false(m->deleted);
    assert_true(m->inode != 0);

    /* The frame, not a local: ASan may keep locals on a heap "fake stack". */
    m = prof_maps_find(&maps, (uintptr_t)__builtin_frame_address(0));
    assert_non_null(m);
    assert_string_equal(m->path, "[stack]");

    m = prof_maps_find(&maps, (uintptr_t)anon);
    assert_non_null(m);
    assert_string_equal(m->path, "");
    assert_int_equal(m->inode, 0);
    assert_null(prof_maps_find(&maps, (uintptr_t)anon + 4096));

    m = prof_maps_find(&maps, (uintptr_t)file);
    assert_non_null(m);
    assert_string_equal(m->path, tmpl);
    assert_true(m->deleted);
    assert_false(m->exec);
    prof_maps_done(&maps);

    assert_int_equal(prof_maps_read(0, 100, &maps), -EFBIG);
    assert_int_equal(maps.count, 0);
    assert_int_equal(prof_maps_read(999999999, 1u << 20, &maps), -ENOENT);

    (void)munmap(file, 4096);
    (void)munmap(anon, 4096);
    (void)munmap((char *)anon + 2 * 4096, 4096);
    (void)close(fd);
    free(exe);
}

static void test_breakpad_id(void **state)
{
    uint8_t id[20];
    char buf[34];

    (void)state;
    for (size_t i = 0; i < sizeof(id); i++)
        id[i] = (uint8_t)i;
    /* GUID {03020100-0504-0706-0809-0A0B0C0D0E0F}, age 0; bytes past 16 are ignored. */
    assert_int_equal(prof_lib_format_breakpad_id(id, sizeof(id), buf, sizeof(buf)), 0);
    assert_string_equal(buf, "030201000504070608090A0B0C0D0E0F0");
    /* Short build-ids are zero-padded. */
    assert_int_equal(prof_lib_format_breakpad_id(id + 0xa, 4, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "0D0C0B0A0000000000000000000000000");
    assert_int_equal(prof_lib_format_breakpad_id(id, 0, buf, sizeof(buf)), -EINVAL);
    assert_int_equal(prof_lib_format_breakpad_id(id, sizeof(id), buf, 33), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_collect_self),
            cmocka_unit_test(test_collect_pid_agrees_with_self),
            cmocka_unit_test(test_collect_pid_errors),
            cmocka_unit_test(test_lookup_matches_linear_search),
            cmocka_unit_test(test_breakpad_id),
            cmocka_unit_test(test_vdso_function),
            cmocka_unit_test(test_maps_read),
    };

    return cmocka_run_group_tests_name("profile-libs", tests, NULL, NULL);
}
