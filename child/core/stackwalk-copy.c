/* child/core/stackwalk-copy.c - copy mode: unwind a copied stack on the sampler thread.
 *
 * The handler copied the registers and up to RT_STACK_COPY_BYTES of stack; here libunwind
 * walks it through an address space whose stack reads come from the copy and whose other
 * reads (unwind tables, code) go to this process's memory, unchanged since the capture.
 * This costs sampler CPU instead of handler time. Built without UNW_LOCAL_ONLY: the
 * local-only library refuses unw_init_remote. The generic library (libunwind-x86_64) is
 * dlopen()ed here, in copy mode only, not linked: every other process of a fleet was paying
 * ~0.03 ms to map and relocate it at start.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include <libunwind.h>

#include "child/core/core.h"
#include "common/grow.h"

/* The generic library's functions (unw_* in libunwind.h name them _Ux86_64_*). */
static struct {
    unw_addr_space_t *local_addr_space;
    unw_accessors_t *(*get_accessors)(unw_addr_space_t);
    unw_addr_space_t (*create_addr_space)(unw_accessors_t *, int);
    int (*set_caching_policy)(unw_addr_space_t, unw_caching_policy_t);
    int (*init_remote)(unw_cursor_t *, unw_addr_space_t, void *);
    int (*get_reg)(unw_cursor_t *, int, unw_word_t *);
    int (*step)(unw_cursor_t *);
} generic;

static unw_addr_space_t copy_space;
static unw_accessors_t copy_accessors;
static unw_accessors_t *local_accessors; /* borrowed from libunwind */

/* Where reads outside the stack copy may go: the loaded modules' segments (unwind tables,
 * code). Anything else (a corrupt or dead stack slot used as a pointer) is refused rather
 * than dereferenced: a bad address must fail the unwind, not kill the sampler thread. The
 * list is rebuilt when the loader's generation (bumped by our dlopen/dlclose) changes. */
struct segment {
    uint64_t start, end;
};
static struct segment *segments;
static size_t segment_count, segment_cap;
static unsigned segments_generation = ~0u;

static int add_segments(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

        if (ph->p_type != PT_LOAD && ph->p_type != PT_GNU_EH_FRAME)
            continue;
        if (FLEETPROF_GROW(segments, segment_cap, segment_count + 1) < 0)
            return 1;
        segments[segment_count].start = info->dlpi_addr + ph->p_vaddr;
        segments[segment_count].end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        segment_count++;
    }
    return 0;
}

static void refresh_segments(void)
{
    unsigned generation = rt_loader_generation();

    if (generation == segments_generation)
        return;
    segment_count = 0;
    (void)dl_iterate_phdr(add_segments, NULL);
    segments_generation = generation;
}

static bool readable(uint64_t addr, size_t len)
{
    for (size_t i = 0; i < segment_count; i++)
        if (addr >= segments[i].start && addr <= segments[i].end - len && segments[i].end >= len)
            return true;
    return false;
}

static int copy_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
                           void *arg)
{
    const struct rt_capture *c = arg;

    if (write)
        return -UNW_EREADONLYREG;
    if (addr >= c->regs.sp && c->stack_copy_len >= sizeof(*val) &&
        addr - c->regs.sp <= c->stack_copy_len - sizeof(*val)) {
        memcpy(val, c->stack_copy + (addr - c->regs.sp), sizeof(*val));
        return 0;
    }
    if (!readable(addr, sizeof(*val)))
        return -UNW_EINVAL;
    return local_accessors->access_mem(as, addr, val, write, NULL);
}

/* Unwind tables are found through libunwind's own local address space: a created space
 * has no dl_iterate_phdr hook (libunwind 1.6 has no setter for it), so the local lookup
 * would call a NULL pointer. The tables are this process's, so the local view is right. */
static int copy_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
                               int need_unwind_info, void *arg)
{
    (void)as;
    (void)arg;
    return local_accessors->find_proc_info(*generic.local_addr_space, ip, pi, need_unwind_info,
                                           NULL);
}

static void copy_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
    (void)as;
    (void)arg;
    local_accessors->put_unwind_info(*generic.local_addr_space, pi, NULL);
}

static int copy_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
                           void *arg)
{
    const struct rt_capture *c = arg;

    (void)as;
    if (write)
        return -UNW_EREADONLYREG;
    switch (reg) {
    case UNW_X86_64_RIP:
        *val = c->regs.ip;
        break;
    case UNW_X86_64_RSP:
        *val = c->regs.sp;
        break;
    case UNW_X86_64_RBP:
        *val = c->regs.bp;
        break;
    case UNW_X86_64_RBX:
        *val = c->regs.bx;
        break;
    case UNW_X86_64_R12:
        *val = c->regs.r12;
        break;
    case UNW_X86_64_R13:
        *val = c->regs.r13;
        break;
    case UNW_X86_64_R14:
        *val = c->regs.r14;
        break;
    case UNW_X86_64_R15:
        *val = c->regs.r15;
        break;
    default:
        /* Caller-saved registers are dead at call sites: no caller's CFA uses them. */
        *val = 0;
        break;
    }
    return 0;
}

static int copy_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
                             void *arg)
{
    (void)as;
    (void)reg;
    (void)val;
    (void)write;
    (void)arg;
    return -UNW_EBADREG;
}

static int copy_resume(unw_addr_space_t as, unw_cursor_t *cursor, void *arg)
{
    (void)as;
    (void)cursor;
    (void)arg;
    return -UNW_EINVAL;
}

/* Loads the generic library and takes its functions. Both libunwind.so.8 (the local-only
 * one, which we link) and libunwind-x86_64.so.8 export _Ux86_64_get_accessors and the rest
 * under the same names: each is looked up in the generic library's own handle, never by
 * the global search, which finds the local-only library's first (its get_accessors
 * initializes that library's address space, not the generic one, whose accessors then
 * stay NULL, and libunwind calls a NULL pointer while stepping). Kept loaded for good. */
static int load_generic(void)
{
    void *lib = dlopen("libunwind-x86_64.so.8", RTLD_NOW | RTLD_LOCAL);

    if (!lib)
        return -ENOSYS;
    *(void **)&generic.local_addr_space = dlsym(lib, "_Ux86_64_local_addr_space");
    *(void **)&generic.get_accessors = dlsym(lib, "_Ux86_64_get_accessors");
    *(void **)&generic.create_addr_space = dlsym(lib, "_Ux86_64_create_addr_space");
    *(void **)&generic.set_caching_policy = dlsym(lib, "_Ux86_64_set_caching_policy");
    *(void **)&generic.init_remote = dlsym(lib, "_Ux86_64_init_remote");
    *(void **)&generic.get_reg = dlsym(lib, "_Ux86_64_get_reg");
    *(void **)&generic.step = dlsym(lib, "_Ux86_64_step");
    if (!generic.local_addr_space || !generic.get_accessors || !generic.create_addr_space ||
        !generic.set_caching_policy || !generic.init_remote || !generic.get_reg || !generic.step)
        return -ENOSYS;
    return 0;
}

int rt_stackwalk_copy_init(void)
{
    unw_accessors_t *a;

    if (copy_space)
        return 0;
    if (!generic.step && load_generic() < 0)
        return -ENOSYS;
    a = generic.get_accessors(*generic.local_addr_space);
    if (!a || !a->find_proc_info || !a->access_mem || !a->get_dyn_info_list_addr)
        return -ENOSYS;
    local_accessors = a;
    copy_accessors = *local_accessors;
    copy_accessors.find_proc_info = copy_find_proc_info;
    copy_accessors.put_unwind_info = copy_put_unwind_info;
    copy_accessors.access_mem = copy_access_mem;
    copy_accessors.access_reg = copy_access_reg;
    copy_accessors.access_fpreg = copy_access_fpreg;
    copy_accessors.resume = copy_resume;
    copy_space = generic.create_addr_space(&copy_accessors, 0);
    if (!copy_space)
        return -ENOMEM;
    (void)generic.set_caching_policy(copy_space, UNW_CACHE_GLOBAL);
    return 0;
}

void rt_stackwalk_unwind_copy(struct rt_capture *c)
{
    unw_cursor_t cursor;
    uint32_t n = 0;

    /* libunwind's locks, like the loader's, must not be held across a fork (core.h). */
    rt_loader_gate_enter();
    refresh_segments();
    if (c->stack_copy_len > 0 && generic.init_remote(&cursor, copy_space, c) == 0) {
        do {
            unw_word_t ip;

            if (generic.get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0)
                break;
            c->frames[n++] = ip;
        } while (n < PROF_MAX_FRAMES && generic.step(&cursor) > 0);
    }
    rt_loader_gate_leave();
    if (n <= 1) {
        /* No unwind info where it stopped: frame pointers in the copy may go further. */
        n = rt_fp_walk(c->frames, PROF_MAX_FRAMES, c->regs.ip, c->regs.sp, c->regs.bp, c->regs.sp,
                       c->regs.sp + c->stack_copy_len, c->stack_copy, c->stack_copy_len);
        c->flags |= PROF_SAMPLE_UNWIND_FAIL;
    }
    if (n == PROF_MAX_FRAMES)
        c->flags |= PROF_SAMPLE_TRUNCATED;
    c->frame_count = n;
}
