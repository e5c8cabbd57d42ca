/* profile/libs-pid.c - prof_libs_collect_pid(): the modules of another process, from
 * /proc/PID/maps, with ELF headers and build-ids read from the files through libelf (or
 * from /proc/PID/mem). Kept apart from libs.c so that the runtime, which only lists its own
 * modules, does not load libelf and libdw; see libs.h.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <elfutils/libdwelf.h>

#include "common/grow.h"
#include "libs-internal.h"
#include "libs.h"
#include "maps.h"

#define MAPS_MAX_BYTES (64u << 20) /* a process with a million mappings is refused */

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
    if (FLEETPROF_GROW(g->groups, g->capacity, g->count + 1) < 0)
        return NULL;
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

/* Adds one line of the maps to its file's group. */
static int add_map(const struct prof_map *m, struct group_vec *groups)
{
    const char *path = m->path;
    struct map_group *grp;

    if (strcmp(path, VDSO_NAME) == 0)
        path = NULL;
    else if (path[0] != '/')
        return 0; /* anonymous, [heap], [stack], [vsyscall] (no ELF image), ... */

    grp = group_find_or_add(groups, path, (unsigned long)m->inode, m->deleted);
    if (!grp)
        return -ENOMEM;
    if (m->offset == 0) {
        grp->last_zero = m->start;
        grp->has_zero = true;
    }
    if (m->exec) {
        grp->has_exec = true;
        /* The module's ELF header is the offset-0 mapping right below its code. Another
         * offset-0 mapping of the file may exist elsewhere: a reader such as libdw maps
         * whole files (this very process, when it symbolizes). */
        if (!grp->has_base && grp->has_zero) {
            grp->base = grp->last_zero;
            grp->has_base = true;
        }
        if (m->start < grp->start) {
            grp->start = m->start;
            grp->offset = m->offset;
        }
        if (m->end > grp->end)
            grp->end = m->end;
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
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset < prof__page_size()) {
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
            len = prof__find_build_id_note(notes, ph[i].p_filesz, ph[i].p_align, &desc);
            if (len > 0) {
                r = prof__lib_set_build_id(lib, desc, len);
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
        seg_off = ph->p_offset & ~(prof__page_size() - 1);
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
        r = prof__lib_set_build_id(lib, id, (size_t)id_len);
out:
    if (elf)
        (void)elf_end(elf);
    (void)close(fd);
    return r;
}

static int pid_add_group(const struct map_group *grp, int mem_fd, struct prof__lib_vec *vec)
{
    struct prof_lib *lib;
    int r;

    lib = prof__lib_vec_push(vec);
    if (!lib)
        return -ENOMEM;
    lib->start = grp->start;
    lib->end = grp->end;
    lib->offset = grp->offset;
    r = prof__lib_set_path(lib, grp->path);
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
    struct prof__lib_vec vec = {0};
    struct prof_maps maps;
    char path[64];
    int mem_fd, r;

    if (pid <= 0 || !ret_libs)
        return -EINVAL;
    r = prof_maps_read(pid, MAPS_MAX_BYTES, &maps);
    if (r < 0)
        return r;
    for (size_t i = 0; i < maps.count && r == 0; i++)
        r = add_map(&maps.map[i], &groups);
    prof_maps_done(&maps);
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
        prof__lib_vec_free(&vec);
        goto out;
    }
    prof__lib_vec_finish(&vec, ret_libs);
out:
    group_vec_free(&groups);
    return r;
}
