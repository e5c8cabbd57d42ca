/* child/profile/libs.c - module lists from dl_iterate_phdr() or /proc/PID/maps; see libs.h.
 *
 * Both collectors produce the same ranges: the executable PT_LOAD segments rounded to pages,
 * which is what the kernel shows in /proc/PID/maps. Build-ids come from PT_NOTE segments,
 * read in memory (self, or /proc/PID/mem) or from the file through libelf.
 */
#include "libs.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <elfutils/libdwelf.h>

#define VDSO_NAME       "[vdso]"
#define DELETED_SUFFIX  " (deleted)"
#define MAX_NOTES_BYTES (64 * 1024) /* a PT_NOTE segment larger than this is not read */
#define MAX_PHDR_BYTES  (64 * 1024)
#define ELFCLASS_NATIVE (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)

struct lib_vec {
    struct prof_lib *libs; /* owned */
    size_t count;
    size_t capacity;
};

static uint64_t page_size(void)
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

static struct prof_lib *vec_push(struct lib_vec *v)
{
    if (v->count == v->capacity) {
        size_t cap = v->capacity ? v->capacity * 2 : 16;
        struct prof_lib *p = realloc(v->libs, cap * sizeof(*p));

        if (!p)
            return NULL;
        v->libs = p;
        v->capacity = cap;
    }
    memset(&v->libs[v->count], 0, sizeof(v->libs[0]));
    return &v->libs[v->count++];
}

static void vec_free(struct lib_vec *v)
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
static void vec_finish(struct lib_vec *v, struct prof_libs *ret_libs)
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

static int lib_set_path(struct prof_lib *lib, const char *path)
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

static int lib_set_build_id(struct prof_lib *lib, const uint8_t *id, size_t len)
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
static size_t find_build_id_note(const uint8_t *notes, size_t size, size_t align,
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

struct self_ctx {
    struct lib_vec vec;
    const char *exe_path; /* borrowed: realpath of /proc/self/exe, or NULL */
    uintptr_t vdso_ehdr;  /* getauxval(AT_SYSINFO_EHDR), 0 = none */
    uint64_t page;
    bool seen_main;
    int r;
};

static int self_add_object(struct dl_phdr_info *info, struct self_ctx *ctx)
{
    uint64_t start = UINT64_MAX, end = 0, offset = 0;
    uintptr_t ehdr_addr = 0;
    const char *path;
    char *canon = NULL;
    struct prof_lib *lib;
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
        path = ctx->exe_path;
        if (!path)
            return 0;
    } else if (!info->dlpi_name || !info->dlpi_name[0]) {
        return 0;
    } else {
        /* The loader keeps the name it opened (maybe relative, maybe through a symlink such
         * as /lib -> usr/lib); resolve it so that it matches /proc/PID/maps. A deleted file
         * keeps its old name. */
        canon = realpath(info->dlpi_name, NULL);
        path = canon ? canon : info->dlpi_name;
    }

    lib = vec_push(&ctx->vec);
    if (!lib) {
        free(canon);
        return -ENOMEM;
    }
    lib->start = start;
    lib->end = end;
    lib->offset = offset;
    lib->bias = info->dlpi_addr;
    r = lib_set_path(lib, path);
    free(canon);
    if (r < 0)
        return r;

    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uint8_t *desc = NULL;
        size_t len;

        if (ph->p_type != PT_NOTE || ph->p_filesz > MAX_NOTES_BYTES)
            continue;
        len = find_build_id_note((const uint8_t *)(info->dlpi_addr + ph->p_vaddr), ph->p_filesz,
                                 ph->p_align, &desc);
        if (len > 0)
            return lib_set_build_id(lib, desc, len);
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
    struct self_ctx ctx = {.page = page_size()};
    char *exe;

    if (!ret_libs)
        return -EINVAL;
    exe = self_exe_path();
    ctx.exe_path = exe;
    ctx.vdso_ehdr = (uintptr_t)getauxval(AT_SYSINFO_EHDR);

    (void)dl_iterate_phdr(self_phdr_cb, &ctx);
    free(exe);
    if (ctx.r < 0) {
        vec_free(&ctx.vec);
        return ctx.r;
    }
    vec_finish(&ctx.vec, ret_libs);
    return 0;
}

/* --- collect_pid ------------------------------------------------------------------- */

/* All mappings of one file (or of the vdso) in /proc/PID/maps. */
struct map_group {
    char *path;          /* owned; NULL for the vdso */
    bool deleted;        /* the kernel printed " (deleted)" */
    bool has_exec;       /* at least one executable mapping */
    bool has_base;       /* base is known */
    uint64_t base;       /* runtime address of file offset 0 (the ELF header) */
    bool has_zero;       /* a mapping of file offset 0 was seen */
    uint64_t last_zero;  /* the latest one (maps are sorted by address) */
    uint64_t start;      /* merged executable range */
    uint64_t end;        /* */
    uint64_t offset;     /* file offset mapped at start */
    unsigned long inode; /* to tell two files with one path apart */
};

struct group_vec {
    struct map_group *groups; /* owned */
    size_t count;
    size_t capacity;
};

static void group_vec_free(struct group_vec *g)
{
    for (size_t i = 0; i < g->count; i++)
        free(g->groups[i].path);
    free(g->groups);
}

static struct map_group *group_find_or_add(struct group_vec *g, const char *path,
                                           unsigned long inode, bool deleted)
{
    struct map_group *grp;

    /* Mappings of one file are almost always adjacent: search backwards. */
    for (size_t i = g->count; i-- > 0;) {
        grp = &g->groups[i];
        if (grp->inode == inode &&
            ((!path && !grp->path) || (path && grp->path && strcmp(path, grp->path) == 0)))
            return grp;
    }
    if (g->count == g->capacity) {
        size_t cap = g->capacity ? g->capacity * 2 : 32;
        struct map_group *p = realloc(g->groups, cap * sizeof(*p));

        if (!p)
            return NULL;
        g->groups = p;
        g->capacity = cap;
    }
    grp = &g->groups[g->count];
    memset(grp, 0, sizeof(*grp));
    grp->inode = inode;
    grp->deleted = deleted;
    grp->start = UINT64_MAX;
    if (path) {
        grp->path = strdup(path);
        if (!grp->path)
            return NULL;
    }
    g->count++;
    return grp;
}

/* Parses one maps line "start-end perms offset major:minor inode   path" into its group. */
static int parse_maps_line(char *line, struct group_vec *groups)
{
    unsigned long long start, end, offset;
    unsigned long inode;
    char perms[8];
    int path_at = 0;
    char *path;
    size_t len;
    bool deleted = false;
    struct map_group *grp;

    if (sscanf(line, "%llx-%llx %7s %llx %*x:%*x %lu %n", &start, &end, perms, &offset, &inode,
               &path_at) < 5 ||
        path_at == 0)
        return 0;
    path = line + path_at;
    len = strlen(path);
    while (len > 0 && (path[len - 1] == '\n' || path[len - 1] == ' '))
        path[--len] = '\0';
    if (strcmp(path, VDSO_NAME) == 0) {
        path = NULL;
    } else if (path[0] != '/') {
        return 0; /* anonymous, [heap], [stack], [vsyscall] (no ELF image), ... */
    } else if (len > strlen(DELETED_SUFFIX) &&
               strcmp(path + len - strlen(DELETED_SUFFIX), DELETED_SUFFIX) == 0) {
        path[len - strlen(DELETED_SUFFIX)] = '\0';
        deleted = true;
    }

    grp = group_find_or_add(groups, path, inode, deleted);
    if (!grp)
        return -ENOMEM;
    if (offset == 0) {
        grp->last_zero = start;
        grp->has_zero = true;
    }
    if (strlen(perms) >= 3 && perms[2] == 'x') {
        grp->has_exec = true;
        /* The module's ELF header is the offset-0 mapping right below its code. Another
         * offset-0 mapping of the file may exist elsewhere: a reader such as libdw maps
         * whole files (this very process, when it symbolizes). */
        if (!grp->has_base && grp->has_zero) {
            grp->base = grp->last_zero;
            grp->has_base = true;
        }
        if (start < grp->start) {
            grp->start = start;
            grp->offset = offset;
        }
        if (end > grp->end)
            grp->end = end;
    }
    return 0;
}

/* Reads the ELF headers and the build-id note of a module from the process's memory,
 * starting at its ELF header. Returns 0 (bias set, build-id set when found) or a negative
 * errno. */
static int mem_read_module(int mem_fd, const struct map_group *grp, struct prof_lib *lib)
{
    ElfW(Ehdr) eh;
    ElfW(Phdr) *ph = NULL;
    size_t phbytes;
    bool have_bias = false;
    uint64_t bias = 0;
    int r = 0;

    if (mem_fd < 0 || !grp->has_base)
        return -ENODATA;
    if (pread(mem_fd, &eh, sizeof(eh), (off_t)grp->base) != (ssize_t)sizeof(eh))
        return -EIO;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS_NATIVE ||
        eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0)
        return -ENOEXEC;
    phbytes = (size_t)eh.e_phnum * sizeof(ElfW(Phdr));
    if (phbytes > MAX_PHDR_BYTES)
        return -ENOEXEC;
    ph = malloc(phbytes);
    if (!ph)
        return -ENOMEM;
    /* The program headers sit in the first loaded page(s) after the ELF header. */
    if (pread(mem_fd, ph, phbytes, (off_t)(grp->base + eh.e_phoff)) != (ssize_t)phbytes) {
        r = -EIO;
        goto out;
    }
    for (size_t i = 0; i < eh.e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset < page_size()) {
            /* The segment mapping file offset 0 starts at base: base = bias + p_vaddr
             * rounded down to the page, and p_vaddr = p_offset (mod page). */
            bias = grp->base - (ph[i].p_vaddr - ph[i].p_offset);
            have_bias = true;
            break;
        }
    }
    if (!have_bias) {
        r = -ENOEXEC;
        goto out;
    }
    lib->bias = bias;
    for (size_t i = 0; i < eh.e_phnum; i++) {
        uint8_t *notes;
        const uint8_t *desc = NULL;
        size_t len;

        if (ph[i].p_type != PT_NOTE || ph[i].p_filesz == 0 || ph[i].p_filesz > MAX_NOTES_BYTES)
            continue;
        notes = malloc(ph[i].p_filesz);
        if (!notes) {
            r = -ENOMEM;
            goto out;
        }
        if (pread(mem_fd, notes, ph[i].p_filesz, (off_t)(bias + ph[i].p_vaddr)) ==
            (ssize_t)ph[i].p_filesz) {
            len = find_build_id_note(notes, ph[i].p_filesz, ph[i].p_align, &desc);
            if (len > 0) {
                r = lib_set_build_id(lib, desc, len);
                free(notes);
                goto out;
            }
        }
        free(notes);
    }
out:
    free(ph);
    return r;
}

/* Reads the ELF headers and the build-id of a module from its file. Returns 0 (bias set,
 * build-id set when found) or a negative errno. */
static int file_read_module(const struct map_group *grp, struct prof_lib *lib)
{
    const void *id = NULL;
    ssize_t id_len;
    size_t phnum;
    Elf *elf;
    int fd, r = -ENOEXEC;

    fd = open(grp->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    (void)elf_version(EV_CURRENT);
    elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &phnum) != 0)
        goto out;
    for (size_t i = 0; i < phnum; i++) {
        GElf_Phdr mem, *ph = gelf_getphdr(elf, (int)i, &mem);
        uint64_t seg_off;

        if (!ph || ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        seg_off = ph->p_offset & ~(page_size() - 1);
        if (grp->offset < seg_off || grp->offset >= ph->p_offset + ph->p_filesz)
            continue;
        /* start maps file offset grp->offset, which is p_vaddr - p_offset + offset in the
         * ELF address space. */
        lib->bias = grp->start - grp->offset - (ph->p_vaddr - ph->p_offset);
        r = 0;
        break;
    }
    if (r < 0)
        goto out;
    id_len = dwelf_elf_gnu_build_id(elf, &id);
    if (id_len > 0)
        r = lib_set_build_id(lib, id, (size_t)id_len);
out:
    if (elf)
        (void)elf_end(elf);
    (void)close(fd);
    return r;
}

static int pid_add_group(const struct map_group *grp, int mem_fd, struct lib_vec *vec)
{
    struct prof_lib *lib;
    int r;

    lib = vec_push(vec);
    if (!lib)
        return -ENOMEM;
    lib->start = grp->start;
    lib->end = grp->end;
    lib->offset = grp->offset;
    r = lib_set_path(lib, grp->path);
    if (r < 0)
        return r;

    r = -ENOENT;
    if (grp->path && !grp->deleted)
        r = file_read_module(grp, lib);
    if (r == -ENOMEM)
        return r;
    if (r < 0)
        r = mem_read_module(mem_fd, grp, lib);
    if (r == -ENOMEM)
        return r;
    if (r < 0) {
        /* Neither the file nor the memory could be read: assume the usual layout, where
         * file offsets equal ELF addresses (true of PIC objects linked by GNU ld / lld). */
        lib->bias = grp->start - grp->offset;
    }
    return 0;
}

int prof_libs_collect_pid(pid_t pid, struct prof_libs *ret_libs)
{
    struct group_vec groups = {0};
    struct lib_vec vec = {0};
    char path[64], *line = NULL;
    size_t line_cap = 0;
    int mem_fd, r = 0;
    FILE *f;

    if (pid <= 0 || !ret_libs)
        return -EINVAL;
    (void)snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    f = fopen(path, "re");
    if (!f)
        return -errno;
    while (getline(&line, &line_cap, f) > 0) {
        r = parse_maps_line(line, &groups);
        if (r < 0)
            break;
    }
    if (r == 0 && ferror(f))
        r = -EIO;
    free(line);
    (void)fclose(f);
    if (r < 0)
        goto out;
    if (groups.count == 0) {
        /* An empty maps file: a zombie, or a kernel thread. */
        r = -ESRCH;
        goto out;
    }

    /* Opened lazily would save little: most processes have a vdso, read from memory. */
    (void)snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    mem_fd = open(path, O_RDONLY | O_CLOEXEC);
    for (size_t i = 0; i < groups.count && r == 0; i++) {
        if (groups.groups[i].has_exec)
            r = pid_add_group(&groups.groups[i], mem_fd, &vec);
    }
    if (mem_fd >= 0)
        (void)close(mem_fd);
    if (r < 0) {
        vec_free(&vec);
        goto out;
    }
    vec_finish(&vec, ret_libs);
out:
    group_vec_free(&groups);
    return r;
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

void prof_libs_done(struct prof_libs *libs)
{
    struct lib_vec v;

    if (!libs)
        return;
    v.libs = libs->libs;
    v.count = libs->count;
    v.capacity = libs->count;
    vec_free(&v);
    libs->libs = NULL;
    libs->count = 0;
}
