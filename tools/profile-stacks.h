/* tools/profile-stacks.h - the samples of a Gecko profile as stacks of functions, for the
 * commands that count them (summary, export).
 *
 * Every thread is seen the same way: its stack table, each stack's own frame resolved to a
 * function, and per stack the samples whose stack it is and their CPU time. A function is a
 * name and a library, split from the frame's location string the way the front-end does
 * ("name (in lib)"), interned in one table for the whole file so that counts add up across
 * processes. Sample CPU time is the sample's threadCPUDelta (CPU used since the thread's
 * previous sample) in ns, the front-end's own rule for charging CPU to a stack.
 *
 * The file is the user's: every index is checked. A stack whose frame or prefix is invalid,
 * or whose prefix does not come before it (the only order our writer and the front-end's
 * processing produce; this also rules out cycles), is not given to the caller: its samples
 * count as invalid. So a walk from any stack to its root ends, within n_stacks steps.
 */
#ifndef FLEETPROF_TOOLS_PROFILE_STACKS_H
#define FLEETPROF_TOOLS_PROFILE_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/map.h"
#include "tools/profile-read.h"

struct json_doc;
struct json_value;

#define PSTACK_NONE UINT32_MAX

/* The name of the pseudo-frame the runtime puts its own frames under (category Profiler). */
#define PSTACK_PROFILER_FRAME "fleetprof"

struct pstack_func {
    char *name; /* owned: the part before " (in lib)", or the whole location */
    char *lib;  /* owned, or NULL when the location names no library */
    size_t name_len, lib_len;
};

/* Functions of a file, interned by (name, lib); ids are dense, in order of first sight. */
struct pstack_funcs {
    struct pstack_func *v; /* owned */
    size_t n, cap;
    struct fleetprof_map ids; /* (name, lib) -> id; the keys are v's */
};

/* The id of (name, lib) (lib may be NULL), added if new; PSTACK_NONE when out of memory. */
uint32_t pstack_func_intern(struct pstack_funcs *t, const char *name, size_t name_len,
                            const char *lib, size_t lib_len);
/* The id of a frame location string ("name (in lib)" or any other text). */
uint32_t pstack_func_intern_location(struct pstack_funcs *t, const char *loc, size_t len);
void pstack_funcs_done(struct pstack_funcs *t);

/* One thread, as given to a pstack_thread_fn; all arrays have n_stacks entries and are
 * valid only during the call. */
struct pstack_thread {
    const struct json_value *value; /* the thread object */
    const char *name;               /* borrowed; NULL if it has none */
    int64_t tid;                    /* -1 if unknown */
    size_t n_stacks;
    const uint32_t *prefix;  /* the caller's stack, or PSTACK_NONE at a root; always < own index */
    const uint32_t *func;    /* the stack's own frame's function; PSTACK_NONE: invalid stack */
    const uint32_t *line;    /* its frame's line, 0 if unknown */
    const uint64_t *samples; /* samples whose stack it is */
    const uint64_t *cpu_ns;  /* their CPU time */
    uint64_t no_stack_samples, no_stack_cpu_ns; /* samples with a null stack */
    uint64_t bad_samples, bad_cpu_ns;           /* samples with an invalid stack */
    uint64_t samples_total, cpu_ns_total;       /* all of the thread's samples */
};

struct pstack_process {
    const struct json_value *value; /* the process profile object */
    struct profile_process info;    /* strings borrowed from the document */
    bool cpu_known; /* its threadCPUDelta is in ns or µs; when false every cpu_ns is 0 */
};

typedef int (*pstack_thread_fn)(const struct pstack_process *proc, const struct pstack_thread *t,
                                void *userdata);
typedef int (*pstack_process_fn)(const struct pstack_process *proc, void *userdata);

/* The process profiles of a file, in order: the top level (unless it is a gathered fleet's
 * daemon part: no threads, and processes beside it), then each of "processes". Stops at the
 * first negative return of fn and returns it; else 0. */
int pstack_each_process(const struct json_doc *doc, pstack_process_fn fn, void *userdata);

/* Calls fn for each thread of proc, functions interned in funcs. Returns 0, fn's first
 * negative return, or -ENOMEM. */
int pstack_each_thread(struct pstack_funcs *funcs, const struct json_doc *doc,
                       const struct pstack_process *proc, pstack_thread_fn fn, void *userdata);

/* Whether stack s of t has the profiler pseudo-frame (PSTACK_PROFILER_FRAME, no library)
 * at or above it: the runtime's own work. pseudo is its id in funcs (PSTACK_NONE if the
 * file has none, which makes this false). */
bool pstack_is_profiler(const struct pstack_thread *t, uint32_t s, uint32_t pseudo);

#endif /* FLEETPROF_TOOLS_PROFILE_STACKS_H */
