/* profile/libs.c - module lists from dl_iterate_phdr() or /proc/PID/maps; see libs.h.
 *
 * Both collectors produce the same ranges: the executable PT_LOAD segments rounded to pages,
 * which is what the kernel shows in /proc/PID/maps. Build-ids come from PT_NOTE segments,
 * read in memory (self, or /proc/PID/mem) or from the file through libelf (libs-pid.c).
 */
#include "libs.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "common/grow.h"
#include "libs-internal.h"
#include "maps.h"

uint64_t prof__page_size(void)
{
    long sz = sysconf(_SC_PAGESIZE);

    return sz > 0 ? (uint64_t)sz : 4096u;
}

static void lib_clear(struct prof_lib *lib)
{
    free(lib->path);
    free(lib->name);
    free(lib->breakpad_id);
    free(lib->code_id);
    memset(lib, 0, sizeof(*lib));
}

struct prof_lib *prof__lib_vec_push(struct prof__lib_vec *v)
{
    if (FLEETPROF_GROW(v->libs, v->capacity, v->count + 1) < 0)
        return NULL;
    memset(&v->libs[v->count], 0, sizeof(v->libs[0]));
    return &v->libs[v->count++];
}

void prof__lib_vec_free(struct prof__lib_vec *v)
{
    for (size_t i = 0; i < v->count; i++)
        lib_clear(&v->libs[i]);
    free(v->libs);
    memset(v, 0, sizeof(*v));
}

static int cmp_lib_start(const void *a, const void *b)
{
    const struct prof_lib *x = a, *y = b;

    return x->start < y->start ? -1 : x->start > y->start;
}

/* Sorts by start and makes the ranges disjoint, then hands the array over. A module whose
 * merged executable range encloses another (two executable segments far apart, another
 * module mapped in the hole) is cut at the next module's start: lookups in the cut part
 * miss rather than give a wrong module. */
void prof__lib_vec_finish(struct prof__lib_vec *v, struct prof_libs *ret_libs)
{
    if (v->count > 1)
        qsort(v->libs, v->count, sizeof(v->libs[0]), cmp_lib_start);
    for (size_t i = 1; i < v->count; i++) {
        if (v->libs[i - 1].end > v->libs[i].start)
            v->libs[i - 1].end = v->libs[i].start;
    }
    ret_libs->libs = v->libs;
    ret_libs->count = v->count;
    memset(v, 0, sizeof(*v));
}

int prof__lib_set_path(struct prof_lib *lib, const char *path)
{
    const char *slash;

    if (!path) {
        lib->name = strdup(VDSO_NAME);
        return lib->name ? 0 : -ENOMEM;
    }
    lib->path = strdup(path);
    if (!lib->path)
        return -ENOMEM;
    slash = strrchr(path, '/');
    lib->name = strdup(slash ? slash + 1 : path);
    return lib->name ? 0 : -ENOMEM;
}

int prof_lib_format_breakpad_id(const uint8_t *build_id, size_t len, char *buf, size_t buf_size)
{
    /* Breakpad reads the first 16 bytes of the build-id as a little-endian GUID
     * {u32, u16, u16, u8[8]} and prints each field as a number, so the first three fields
     * appear byte-swapped. The age is always 0 for ELF. */
    static const uint8_t order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    static const char hex[] = "0123456789ABCDEF";
    uint8_t guid[16] = {0};

    if (!build_id || len == 0 || !buf || buf_size < 34)
        return -EINVAL;
    memcpy(guid, build_id, len < 16 ? len : 16);
    for (size_t i = 0; i < 16; i++) {
        buf[2 * i] = hex[guid[order[i]] >> 4];
        buf[2 * i + 1] = hex[guid[order[i]] & 0xf];
    }
    buf[32] = '0';
    buf[33] = '\0';
    return 0;
}

int prof__lib_set_build_id(struct prof_lib *lib, const uint8_t *id, size_t len)
{
    static const char hex[] = "0123456789abcdef";

    if (len == 0)
        return 0;
    if (len > PROF_BUILD_ID_MAX)
        len = PROF_BUILD_ID_MAX;
    memcpy(lib->build_id, id, len);
    lib->build_id_len = len;

    lib->breakpad_id = malloc(34);
    lib->code_id = malloc(2 * len + 1);
    if (!lib->breakpad_id || !lib->code_id)
        return -ENOMEM;
    (void)prof_lib_format_breakpad_id(id, len, lib->breakpad_id, 34);
    for (size_t i = 0; i < len; i++) {
        lib->code_id[2 * i] = hex[id[i] >> 4];
        lib->code_id[2 * i + 1] = hex[id[i] & 0xf];
    }
    lib->code_id[2 * len] = '\0';
    return 0;
}

/* Finds the NT_GNU_BUILD_ID note in a note segment image. Notes are aligned to 4 bytes,
 * or to 8 in segments whose p_align is 8 (gABI; .note.gnu.property uses that). Returns the
 * descriptor length (0 = none) and stores a pointer into notes in *ret_desc. */
size_t prof__find_build_id_note(const uint8_t *notes, size_t size, size_t align,
                                const uint8_t **ret_desc)
{
    size_t pos = 0;

    if (align != 8)
        align = 4;
    while (size - pos >= sizeof(ElfW(Nhdr))) {
        ElfW(Nhdr) nh;
        size_t name_at, desc_at, next;

        memcpy(&nh, notes + pos, sizeof(nh));
        name_at = pos + sizeof(nh);
        if (nh.n_namesz > size - name_at)
            break;
        desc_at = name_at + ((nh.n_namesz + align - 1) & ~(align - 1));
        if (desc_at > size || nh.n_descsz > size - desc_at)
            break;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
            memcmp(notes + name_at, "GNU", 4) == 0 && nh.n_descsz > 0) {
            *ret_desc = notes + desc_at;
            return nh.n_descsz;
        }
        next = desc_at + ((nh.n_descsz + align - 1) & ~(align - 1));
        if (next <= pos || next > size)
            break;
        pos = next;
    }
    return 0;
}

/* --- collect_self ------------------------------------------------------------------ */

/* Modules take their paths from /proc/self/maps, read once per collection: that is the
 * path the daemon compares with (its check reads the same file), and one read costs less
 * than a realpath() per module (a readlink per path component: ~60 syscalls per profile of
 * a small program). Beyond this size, realpath() per module instead. */
#define SELF_MAPS_MAX_BYTES (4u << 20)

/* The path of the file mapped at addr, or NULL. */
static const char *self_maps_path(const struct prof_maps *maps, uint64_t addr)
{
    const struct prof_map *m = prof_maps_find(maps, addr);

    return m && m->path[0] == '/' ? m->path : NULL;
}

struct self_ctx {
    struct prof__lib_vec vec;
    struct prof_maps maps; /* empty when unreadable */
    char *exe_path;        /* owned: realpath of /proc/self/exe, when the maps lack it */
    uintptr_t vdso_ehdr;   /* getauxval(AT_SYSINFO_EHDR), 0 = none */
    uint64_t page;
    bool seen_main;
    int r;
};

static char *self_exe_path(void);

/* The main program named as the user ran it: a link's name (redis-server is a link to
 * redis-check-rdb, and the maps name the file), when the path given to exec (AT_EXECFN)
 * leads to the mapped file. Not a script's name: that leads to its file, not the
 * interpreter's. Only when the names differ, so that a plain program pays nothing. */
static int name_as_run(struct prof_lib *lib)
{
    const char *execfn = (const char *)getauxval(AT_EXECFN), *base;
    char *real;
    bool same;

    if (!execfn)
        return 0;
    base = strrchr(execfn, '/');
    base = base ? base + 1 : execfn;
    if (!*base || !strcmp(base, lib->name))
        return 0;
    real = realpath(execfn, NULL); /* relative to the cwd: may have moved since the exec */
    same = real && !strcmp(real, lib->path);
    free(real);
    if (!same)
        return 0;
    real = strdup(base);
    if (!real)
        return -ENOMEM;
    free(lib->name);
    lib->name = real;
    return 0;
}

static int self_add_object(struct dl_phdr_info *info, struct self_ctx *ctx)
{
    uint64_t start = UINT64_MAX, end = 0, offset = 0;
    uintptr_t ehdr_addr = 0;
    const char *path;
    char *canon = NULL;
    struct prof_lib *lib;
    bool is_main = false;
    int r;

    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t seg_start, seg_end;

        if (ph->p_type != PT_LOAD)
            continue;
        if (ph->p_offset == 0)
            ehdr_addr = info->dlpi_addr + ph->p_vaddr;
        if (!(ph->p_flags & PF_X) || ph->p_memsz == 0)
            continue;
        seg_start = (info->dlpi_addr + ph->p_vaddr) & ~(ctx->page - 1);
        seg_end = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + ctx->page - 1) & ~(ctx->page - 1);
        if (seg_start < start) {
            start = seg_start;
            offset = ph->p_offset & ~(ctx->page - 1);
        }
        if (seg_end > end)
            end = seg_end;
    }
    if (end == 0)
        return 0; /* no code: nothing to symbolize */

    if (ctx->vdso_ehdr && ehdr_addr == ctx->vdso_ehdr) {
        path = NULL;
    } else if (!ctx->seen_main && (!info->dlpi_name || !info->dlpi_name[0])) {
        /* The first object, with an empty name, is the main program. */
        ctx->seen_main = true;
        is_main = true;
        path = self_maps_path(&ctx->maps, ehdr_addr ? ehdr_addr : start);
        if (!path) {
            ctx->exe_path = self_exe_path();
            path = ctx->exe_path;
        }
        if (!path)
            return 0;
    } else if (!info->dlpi_name || !info->dlpi_name[0]) {
        return 0;
    } else {
        /* The loader keeps the name it opened (maybe relative, maybe through a symlink such
         * as /lib -> usr/lib): the path must be the one /proc/PID/maps shows. Without the
         * maps, realpath() resolves it; a deleted file then keeps its old name. */
        path = self_maps_path(&ctx->maps, ehdr_addr ? ehdr_addr : start);
        if (!path) {
            canon = realpath(info->dlpi_name, NULL);
            path = canon ? canon : info->dlpi_name;
        }
    }

    lib = prof__lib_vec_push(&ctx->vec);
    if (!lib) {
        free(canon);
        return -ENOMEM;
    }
    lib->start = start;
    lib->end = end;
    lib->offset = offset;
    lib->bias = info->dlpi_addr;
    r = prof__lib_set_path(lib, path);
    free(canon);
    if (r == 0 && is_main)
        r = name_as_run(lib);
    if (r < 0)
        return r;

    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uint8_t *desc = NULL;
        size_t len;

        if (ph->p_type != PT_NOTE || ph->p_filesz > MAX_NOTES_BYTES)
            continue;
        len = prof__find_build_id_note((const uint8_t *)(info->dlpi_addr + ph->p_vaddr),
                                       ph->p_filesz, ph->p_align, &desc);
        if (len > 0)
            return prof__lib_set_build_id(lib, desc, len);
    }
    return 0;
}

static int self_phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct self_ctx *ctx = data;

    (void)size;
    ctx->r = self_add_object(info, ctx);
    return ctx->r < 0; /* non-zero stops the iteration */
}

/* Returns the path of the running program (malloc'd), or NULL. realpath() of the link gives
 * the path the kernel resolved at exec; when the file was deleted the link's text is kept,
 * without the kernel's " (deleted)" suffix. */
static char *self_exe_path(void)
{
    char buf[PATH_MAX];
    ssize_t n;
    char *path = realpath("/proc/self/exe", NULL);

    if (path)
        return path;
    n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    if ((size_t)n > strlen(DELETED_SUFFIX) &&
        strcmp(buf + n - strlen(DELETED_SUFFIX), DELETED_SUFFIX) == 0)
        buf[n - strlen(DELETED_SUFFIX)] = '\0';
    return strdup(buf);
}

int prof_libs_collect_self(struct prof_libs *ret_libs)
{
    struct self_ctx ctx = {.page = prof__page_size()};

    if (!ret_libs)
        return -EINVAL;
    (void)prof_maps_read(0, SELF_MAPS_MAX_BYTES, &ctx.maps);
    ctx.vdso_ehdr = (uintptr_t)getauxval(AT_SYSINFO_EHDR);

    (void)dl_iterate_phdr(self_phdr_cb, &ctx);
    free(ctx.exe_path);
    prof_maps_done(&ctx.maps);
    if (ctx.r < 0) {
        prof__lib_vec_free(&ctx.vec);
        return ctx.r;
    }
    prof__lib_vec_finish(&ctx.vec, ret_libs);
    return 0;
}

/* --- lookup ------------------------------------------------------------------------ */

const struct prof_lib *prof_libs_lookup(const struct prof_libs *libs, uint64_t addr)
{
    size_t lo = 0, hi;

    if (!libs || libs->count == 0)
        return NULL;
    /* Find the last module with start <= addr. */
    hi = libs->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (libs->libs[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    return addr < libs->libs[lo - 1].end ? &libs->libs[lo - 1] : NULL;
}

/* --- the vdso's symbols ------------------------------------------------------------ */

/* Bytes of the vdso image that are mapped: its PT_LOAD segments, rounded up to a page (the
 * section headers sit at the end of the last page). */
static size_t vdso_mapped_bytes(const Elf64_Ehdr *eh)
{
    const Elf64_Phdr *ph = (const Elf64_Phdr *)((const char *)eh + eh->e_phoff);
    long page = sysconf(_SC_PAGESIZE);
    size_t mapped = 0;

    for (size_t i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset + ph[i].p_filesz > mapped)
            mapped = ph[i].p_offset + ph[i].p_filesz;
    if (page > 0)
        mapped = (mapped + (size_t)page - 1) & ~((size_t)page - 1);
    return mapped;
}

const char *prof_vdso_function(uint64_t vaddr)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)getauxval(AT_SYSINFO_EHDR);
    const char *image = (const char *)eh, *best = NULL;
    const Elf64_Shdr *sh;
    size_t mapped;

    if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shoff == 0 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_phentsize != sizeof(Elf64_Phdr))
        return NULL;
    mapped = vdso_mapped_bytes(eh);
    if (eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > mapped)
        return NULL;
    sh = (const Elf64_Shdr *)(image + eh->e_shoff);
    for (size_t i = 0; i < eh->e_shnum; i++) {
        const Elf64_Shdr *strtab = &sh[sh[i].sh_link];
        const Elf64_Sym *syms = (const Elf64_Sym *)(image + sh[i].sh_offset);

        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_entsize != sizeof(Elf64_Sym) ||
            sh[i].sh_link >= eh->e_shnum || sh[i].sh_offset + sh[i].sh_size > mapped ||
            strtab->sh_offset + strtab->sh_size > mapped || strtab->sh_size == 0 ||
            image[strtab->sh_offset + strtab->sh_size - 1] != '\0')
            continue;
        for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); k++) {
            const Elf64_Sym *sym = &syms[k];
            const char *name;

            if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_shndx == SHN_UNDEF ||
                vaddr < sym->st_value || vaddr - sym->st_value >= sym->st_size ||
                sym->st_name >= strtab->sh_size)
                continue;
            name = image + strtab->sh_offset + sym->st_name;
            if (!best || (strncmp(best, "__vdso_", 7) != 0 && strncmp(name, "__vdso_", 7) == 0))
                best = name;
        }
    }
    return best;
}

void prof_libs_done(struct prof_libs *libs)
{
    struct prof__lib_vec v;

    if (!libs)
        return;
    v.libs = libs->libs;
    v.count = libs->count;
    v.capacity = libs->count;
    prof__lib_vec_free(&v);
    libs->libs = NULL;
    libs->count = 0;
}
