/* tools/cmd-summary.c - `fleetprof summary FILE`: a fleet's profile on one screen.
 *
 * By default, for fleets of any size: processes grouped into programs (the process name,
 * which is the program's title when it set one, and its role: master, forked worker, exec'd
 * child), one line each with its CPU and top functions; the fleet's top functions by self
 * and total (inclusive) time; how much was the profiler's own work (frames under the
 * `fleetprof` pseudo-frame) and which samples have no stack and why; the performance groups;
 * and a digest of the gathering log that shows only what needs reading.
 *
 * Everything is ranked by CPU time (the samples' threadCPUDelta): a sleeping thread's samples
 * are not where the CPU goes. --wall ranks by samples, sleeping threads included.
 * --per-process and --pid N show processes one by one, --log the whole gathering log, --tree
 * the hottest call paths, --json everything for scripts.
 * Reads any Gecko profile defensively: a value of the wrong type is skipped, never trusted.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"
#include "json/reader.h"
#include "json/writer.h"
#include "tools/commands.h"
#include "tools/idmap.h"
#include "tools/profile-read.h"
#include "tools/profile-stacks.h"
#include "tools/summary-groups.h"
#include "tools/summary-log.h"

#define DEFAULT_TOP        10
#define MAX_TOP            100000
#define PROGRAM_TOP        3  /* functions on a program's line */
#define PROGRAM_COMMANDS   3  /* command lines under a program whose processes differ in them */
#define PROGRAMS_SHOWN     12 /* program lines before "... more" */
#define DEFAULT_TREE_DEPTH 16
#define TREE_MIN_PERCENT   1.0 /* call paths below this share are left out of --tree */
#define NAME_WIDTH         34

struct weight {
    uint64_t samples, cpu_ns;
};

struct fcount {
    struct weight self, total;
};

struct top_entry {
    uint32_t fid;
    struct fcount c;
};

struct proc_result {
    struct pstack_process p; /* strings borrowed from the document */
    int64_t ppid;            /* -1 if unknown */
    bool forked;             /* meta.fleetprof.forked */
    uint32_t program;
    struct weight all, profiler, bad;
    struct top_entry *top; /* owned, by the ranking */
    size_t n_top;
};

struct program {
    const char *name; /* borrowed */
    const char *role; /* static */
    bool exited;      /* the file has live processes too, and these had exited */
    size_t procs, recovered, execd;
    struct weight all;
    struct top_entry top[PROGRAM_TOP];
    size_t n_top;
    /* Its processes' command lines (meta.product), the first PROGRAM_COMMANDS different ones
     * with how many processes ran each; other_commands: processes that ran another. */
    const char *commands[PROGRAM_COMMANDS]; /* borrowed */
    size_t command_procs[PROGRAM_COMMANDS], n_commands, other_commands;
};

/* --tree: the fleet's stacks merged by function path, under one node per program. */
struct tree_node {
    uint32_t parent; /* PSTACK_NONE for a program's node */
    uint32_t func;   /* a program's index for a program's node */
    struct weight self, total;
};

struct tree {
    struct tree_node *v; /* owned */
    size_t n, cap;
    struct idmap ids; /* (parent, func) -> node; (PSTACK_NONE, program) for a program's node */
};

struct summary {
    const struct json_doc *doc; /* borrowed */
    const char *path;
    bool by_cpu; /* the ranking: CPU time, or samples (--wall, or CPU not known) */
    bool cpu_known;
    unsigned top_n;
    int64_t only_pid; /* --pid, or -1 */
    bool want_tree;
    unsigned tree_depth;
    struct pstack_funcs funcs;
    struct proc_result *procs; /* owned */
    size_t n_procs, cap_procs;
    struct program *programs; /* owned */
    size_t n_programs;
    struct weight all, profiler, no_stack_null, bad;
    /* Per function id, grown with funcs: the fleet's, the current process's and the current
     * program's counts; mark dedupes a function seen twice in one stack (recursion). */
    struct fcount *fleet, *proc;
    struct weight *prog;
    uint32_t *mark, stamp;
    size_t cap_funcs;
    uint32_t *proc_touched, *prog_touched;
    size_t n_proc_touched, n_prog_touched;
    uint32_t pseudo; /* the profiler pseudo-frame's function id, or PSTACK_NONE */
    uint32_t *scratch;
    size_t cap_scratch;
    struct tree tree;
    uint32_t current_program;
    struct proc_result *current; /* the process being counted */
    struct group_table groups;
    bool oom;
};

static uint64_t rank_of(const struct summary *s, const struct weight *w)
{
    return s->by_cpu ? w->cpu_ns : w->samples;
}

static double share(const struct summary *s, const struct weight *part, const struct weight *whole)
{
    return summary_percent(rank_of(s, part), rank_of(s, whole));
}

static void weight_add(struct weight *to, uint64_t samples, uint64_t cpu_ns)
{
    to->samples += samples;
    to->cpu_ns += cpu_ns;
}

/* Grows the per-function arrays to cover every interned function. */
static int ensure_funcs(struct summary *s)
{
    size_t old = s->cap_funcs, cap;

    if (s->funcs.n <= old)
        return 0;
    /* Overflow checked for the largest elements, fleet's. */
    cap = fleetprof_grown_capacity(old, s->funcs.n, sizeof(*s->fleet));
    /* On a failure the arrays resized so far are only larger, their new parts unused:
     * cap_funcs stays true of all, and a later call zeroes from it. */
    if (!cap || FLEETPROF_RESIZE(s->fleet, cap) < 0 || FLEETPROF_RESIZE(s->proc, cap) < 0 ||
        FLEETPROF_RESIZE(s->prog, cap) < 0 || FLEETPROF_RESIZE(s->mark, cap) < 0 ||
        FLEETPROF_RESIZE(s->proc_touched, cap) < 0 || FLEETPROF_RESIZE(s->prog_touched, cap) < 0)
        return -ENOMEM;
    memset(s->fleet + old, 0, (cap - old) * sizeof(*s->fleet));
    memset(s->proc + old, 0, (cap - old) * sizeof(*s->proc));
    memset(s->prog + old, 0, (cap - old) * sizeof(*s->prog));
    memset(s->mark + old, 0, (cap - old) * sizeof(*s->mark));
    s->cap_funcs = cap;
    return 0;
}

/* The call tree. */

/* The child of parent for func (parent PSTACK_NONE: program func's node), made if new. */
static uint32_t tree_child(struct tree *t, uint32_t parent, uint32_t func)
{
    uint32_t id;

    /* Room first, so that a node the map adds is in the tree at once. */
    if (FLEETPROF_GROW(t->v, t->cap, t->n + 1) < 0)
        return PSTACK_NONE;
    id = idmap_get(&t->ids, parent, func, (uint32_t)t->n);
    if (id != t->n)
        return id; /* known, or PSTACK_NONE: out of memory */
    t->v[t->n] = (struct tree_node){.parent = parent, .func = func};
    return (uint32_t)t->n++;
}

static void tree_add_thread(struct summary *s, const struct pstack_thread *t)
{
    uint32_t root = tree_child(&s->tree, PSTACK_NONE, s->current_program);

    if (root == PSTACK_NONE) {
        s->oom = true;
        return;
    }
    /* A prefix always comes before its stack, so one pass finds every stack's node. */
    for (size_t k = 0; k < t->n_stacks; k++) {
        uint32_t parent = t->prefix[k] == PSTACK_NONE ? root : s->scratch[t->prefix[k]];
        uint32_t node =
                parent == PSTACK_NONE ? PSTACK_NONE : tree_child(&s->tree, parent, t->func[k]);

        s->scratch[k] = node;
        if (node == PSTACK_NONE) {
            s->oom = true;
            return;
        }
        weight_add(&s->tree.v[node].self, t->samples[k], t->cpu_ns[k]);
    }
}

/* Counting. */

static void count_func(struct summary *s, uint32_t f, bool leaf, uint64_t n, uint64_t cpu)
{
    struct fcount *p = &s->proc[f];

    if (!p->self.samples && !p->total.samples && !p->self.cpu_ns && !p->total.cpu_ns)
        s->proc_touched[s->n_proc_touched++] = f;
    if (leaf) {
        weight_add(&s->fleet[f].self, n, cpu);
        weight_add(&p->self, n, cpu);
        if (!s->prog[f].samples && !s->prog[f].cpu_ns)
            s->prog_touched[s->n_prog_touched++] = f;
        weight_add(&s->prog[f], n, cpu);
    }
    weight_add(&s->fleet[f].total, n, cpu);
    weight_add(&p->total, n, cpu);
}

static int count_thread(const struct pstack_process *proc, const struct pstack_thread *t,
                        void *userdata)
{
    struct summary *s = userdata;
    struct proc_result *pr = s->current;

    (void)proc;
    if (ensure_funcs(s) < 0)
        return -ENOMEM;
    if (s->pseudo == PSTACK_NONE) {
        uint32_t id = pstack_func_intern(&s->funcs, PSTACK_PROFILER_FRAME,
                                         strlen(PSTACK_PROFILER_FRAME), NULL, 0);

        if (id == PSTACK_NONE || ensure_funcs(s) < 0)
            return -ENOMEM;
        s->pseudo = id;
    }
    if (t->n_stacks > s->cap_scratch) {
        if (FLEETPROF_RESIZE(s->scratch, t->n_stacks) < 0)
            return -ENOMEM;
        s->cap_scratch = t->n_stacks;
    }
    weight_add(&pr->all, t->samples_total, t->cpu_ns_total);
    weight_add(&pr->bad, t->bad_samples, t->bad_cpu_ns);
    if (t->no_stack_samples) {
        /* A null stack is a function of its own: "(no stack)", without a reason. */
        uint32_t f = pstack_func_intern(&s->funcs, "(no stack)", 10, NULL, 0);

        if (f == PSTACK_NONE || ensure_funcs(s) < 0)
            return -ENOMEM;
        count_func(s, f, true, t->no_stack_samples, t->no_stack_cpu_ns);
        weight_add(&s->no_stack_null, t->no_stack_samples, t->no_stack_cpu_ns);
    }
    for (size_t k = 0; k < t->n_stacks; k++) {
        uint64_t n = t->samples[k], cpu = t->cpu_ns[k];
        bool profiler = false;

        if (!n && !cpu)
            continue;
        if (++s->stamp == 0) { /* wrapped: forget every mark */
            memset(s->mark, 0, s->cap_funcs * sizeof(*s->mark));
            s->stamp = 1;
        }
        for (uint32_t at = (uint32_t)k; at != PSTACK_NONE; at = t->prefix[at]) {
            uint32_t f = t->func[at];

            profiler = profiler || f == s->pseudo;
            if (s->mark[f] == s->stamp)
                continue; /* recursion: a function's total counts a sample once */
            s->mark[f] = s->stamp;
            count_func(s, f, at == k, n, cpu);
        }
        if (profiler)
            weight_add(&pr->profiler, n, cpu);
    }
    if (s->want_tree && (s->only_pid < 0 || pr->p.info.pid == s->only_pid))
        tree_add_thread(s, t);
    return s->oom ? -ENOMEM : 0;
}

static int compare_rank(const struct summary *s, const struct weight *a, const struct weight *b)
{
    uint64_t x = rank_of(s, a), y = rank_of(s, b);

    if (x != y)
        return x < y ? 1 : -1;
    if (a->samples != b->samples)
        return a->samples < b->samples ? 1 : -1;
    return 0;
}

static int compare_top(const void *a, const void *b, void *userdata)
{
    const struct summary *s = userdata;
    const struct top_entry *x = a, *y = b;
    int c = compare_rank(s, &x->c.self, &y->c.self);

    if (c)
        return c;
    c = compare_rank(s, &x->c.total, &y->c.total);
    return c ? c : strcmp(s->funcs.v[x->fid].name, s->funcs.v[y->fid].name);
}

/* The n best of the touched functions (counts in counts[]), by self time. */
static struct top_entry *top_of(struct summary *s, const uint32_t *touched, size_t n_touched,
                                const struct fcount *counts, size_t n, size_t *ret_n)
{
    struct top_entry *all = malloc((n_touched ? n_touched : 1) * sizeof(*all));

    *ret_n = 0;
    if (!all) {
        s->oom = true;
        return NULL;
    }
    for (size_t i = 0; i < n_touched; i++) {
        const struct fcount *c = &counts[touched[i]];

        if (c->self.samples || c->self.cpu_ns) /* callers only: in the tree, not in tops */
            all[(*ret_n)++] = (struct top_entry){touched[i], *c};
    }
    n_touched = *ret_n;
    if (n_touched > 1)
        qsort_r(all, n_touched, sizeof(*all), compare_top, s);
    *ret_n = n < n_touched ? n : n_touched;
    return all;
}

static void finish_process(struct summary *s, struct proc_result *pr)
{
    pr->top = top_of(s, s->proc_touched, s->n_proc_touched, s->proc, s->top_n, &pr->n_top);
    for (size_t i = 0; i < s->n_proc_touched; i++)
        memset(&s->proc[s->proc_touched[i]], 0, sizeof(*s->proc));
    s->n_proc_touched = 0;
    weight_add(&s->all, pr->all.samples, pr->all.cpu_ns);
    weight_add(&s->profiler, pr->profiler.samples, pr->profiler.cpu_ns);
    weight_add(&s->bad, pr->bad.samples, pr->bad.cpu_ns);
}

static void finish_program(struct summary *s, struct program *g)
{
    struct fcount *counts = calloc(s->n_prog_touched ? s->n_prog_touched : 1, sizeof(*counts));
    uint32_t *ids = malloc((s->n_prog_touched ? s->n_prog_touched : 1) * sizeof(*ids));
    struct top_entry *top = NULL;
    size_t n = 0;

    if (counts && ids) {
        /* top_of reads counts by function id: index them by position instead. */
        for (size_t i = 0; i < s->n_prog_touched; i++) {
            counts[i].self = s->prog[s->prog_touched[i]];
            ids[i] = (uint32_t)i;
        }
        top = top_of(s, ids, s->n_prog_touched, counts, PROGRAM_TOP, &n);
    } else {
        s->oom = true;
    }
    for (size_t i = 0; i < n; i++) {
        g->top[i] = top[i];
        g->top[i].fid = s->prog_touched[top[i].fid];
    }
    g->n_top = n;
    for (size_t i = 0; i < s->n_prog_touched; i++)
        memset(&s->prog[s->prog_touched[i]], 0, sizeof(*s->prog));
    s->n_prog_touched = 0;
    free(top);
    free(counts);
    free(ids);
}

/* Processes and programs. */

static int add_process(const struct pstack_process *p, void *userdata)
{
    struct summary *s = userdata;
    const struct json_value *fp =
            json_object_get(s->doc, json_object_get(s->doc, p->value, "meta"), "fleetprof");
    struct proc_result *pr;

    if (FLEETPROF_GROW(s->procs, s->cap_procs, s->n_procs + 1) < 0)
        return -ENOMEM;
    pr = &s->procs[s->n_procs++];
    memset(pr, 0, sizeof(*pr));
    pr->p = *p;
    if (profile_value_int(s->doc, json_object_get(s->doc, fp, "ppid"), &pr->ppid) < 0)
        pr->ppid = -1;
    pr->forked = json_value_is_true(json_object_get(s->doc, fp, "forked"));
    s->cpu_known = s->cpu_known && p->cpu_known;
    return 0;
}

static bool has_pid(const struct summary *s, int64_t pid)
{
    for (size_t i = 0; pid >= 0 && i < s->n_procs; i++)
        if (s->procs[i].p.info.pid == pid)
            return true;
    return false;
}

/* Its role, from what the file says about it and its relatives. */
static const char *role_of(const struct summary *s, const struct proc_result *pr,
                           const bool *has_children)
{
    if (has_children[pr - s->procs])
        return "master";
    if (pr->forked)
        return "forked worker";
    if (has_pid(s, pr->ppid))
        return "exec'd child";
    return "";
}

static int sort_pid(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Counts a process's command line (NULL: unknown) in its program. */
static void program_add_command(struct program *g, const char *command)
{
    size_t k;

    if (!command || !*command)
        return;
    for (k = 0; k < g->n_commands && strcmp(g->commands[k], command) != 0; k++)
        ;
    if (k < g->n_commands) {
        g->command_procs[k]++;
    } else if (g->n_commands < PROGRAM_COMMANDS) {
        g->commands[g->n_commands] = command;
        g->command_procs[g->n_commands++] = 1;
    } else {
        g->other_commands++;
    }
}

/* Puts every process in a program: same name, same role (and, in a file with live and
 * exited processes, the same state). */
static int group_programs(struct summary *s)
{
    bool *has_children = calloc(s->n_procs + 1, sizeof(*has_children));
    int64_t *pids = malloc((s->n_procs + 1) * sizeof(*pids));
    bool mixed = false;

    s->programs = calloc(s->n_procs + 1, sizeof(*s->programs));
    if (!has_children || !pids || !s->programs) {
        free(has_children);
        free(pids);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->n_procs; i++) {
        pids[i] = s->procs[i].p.info.pid;
        mixed = mixed || s->procs[i].p.info.exit != s->procs[0].p.info.exit;
    }
    qsort(pids, s->n_procs, sizeof(*pids), sort_pid);
    for (size_t i = 0; i < s->n_procs; i++) {
        int64_t ppid = s->procs[i].ppid;

        if (ppid >= 0 && bsearch(&ppid, pids, s->n_procs, sizeof(*pids), sort_pid))
            for (size_t k = 0; k < s->n_procs; k++)
                if (s->procs[k].p.info.pid == ppid)
                    has_children[k] = true;
    }
    for (size_t i = 0; i < s->n_procs; i++) {
        struct proc_result *pr = &s->procs[i];
        const char *name = pr->p.info.name ? pr->p.info.name : "?";
        const char *role = role_of(s, pr, has_children);
        bool exited = mixed && pr->p.info.exit;
        size_t g;

        for (g = 0; g < s->n_programs; g++)
            if (!strcmp(s->programs[g].name, name) && !strcmp(s->programs[g].role, role) &&
                s->programs[g].exited == exited)
                break;
        if (g == s->n_programs) {
            s->programs[g].name = name;
            s->programs[g].role = role;
            s->programs[g].exited = exited;
            s->n_programs++;
        }
        pr->program = (uint32_t)g;
        s->programs[g].procs++;
        program_add_command(&s->programs[g], pr->p.info.command);
        if (pr->p.info.execd_into)
            s->programs[g].execd++; /* rebuilt from its chunks too, but it did not die */
        else
            s->programs[g].recovered += pr->p.info.recovered != NULL;
    }
    free(has_children);
    free(pids);
    return 0;
}

static int summarize(struct summary *s)
{
    int r;

    s->cpu_known = true;
    r = pstack_each_process(s->doc, add_process, s);
    if (r < 0)
        return r;
    r = group_programs(s);
    if (r < 0)
        return r;
    s->by_cpu = s->by_cpu && s->cpu_known;
    /* One program at a time, so its functions can be counted like a process's. */
    for (size_t g = 0; g < s->n_programs; g++) {
        s->current_program = (uint32_t)g;
        for (size_t i = 0; i < s->n_procs; i++) {
            struct proc_result *pr = &s->procs[i];

            if (pr->program != g)
                continue;
            s->current = pr;
            r = pstack_each_thread(&s->funcs, s->doc, &pr->p, count_thread, s);
            if (r < 0)
                return r;
            finish_process(s, pr);
            weight_add(&s->programs[g].all, pr->all.samples, pr->all.cpu_ns);
            summary_groups_add(&s->groups, s->doc, pr->p.value);
        }
        finish_program(s, &s->programs[g]);
    }
    return s->oom || s->groups.oom ? -ENOMEM : 0;
}

static int compare_program_ids(const void *a, const void *b, void *userdata)
{
    const struct summary *s = userdata;
    const struct program *x = &s->programs[*(const uint32_t *)a];
    const struct program *y = &s->programs[*(const uint32_t *)b];
    int c = compare_rank(s, &x->all, &y->all);

    return c ? c : strcmp(x->name, y->name);
}

/* Text output. */

/* "lib!func"; just "lib+0x1a2c" for code no symbol covers, which names its library. */
static void print_function(const struct pstack_func *f)
{
    bool names_lib = f->lib && f->name_len > f->lib_len + 3 &&
                     memcmp(f->name, f->lib, f->lib_len) == 0 &&
                     memcmp(f->name + f->lib_len, "+0x", 3) == 0;

    if (f->lib && !names_lib) {
        summary_print_clean(f->lib, f->lib_len);
        (void)putchar('!');
    }
    summary_print_clean(f->name, f->name_len);
}

/* At most width bytes of s, cleaned, with "..." when cut. Returns the bytes printed. */
static size_t print_cut(const char *s, size_t len, size_t width)
{
    if (len <= width) {
        summary_print_clean(s, len);
        return len;
    }
    summary_print_clean(s, width - 3);
    (void)fputs("...", stdout);
    return width;
}

static const char *rank_name(const struct summary *s)
{
    return s->by_cpu ? "CPU time" : "samples";
}

static void print_top_table(const struct summary *s, const struct top_entry *top, size_t n,
                            const struct weight *whole)
{
    if (!n)
        return;
    (void)printf("  %7s %7s %10s  %s\n", "SELF%", "TOTAL%", s->by_cpu ? "SELF ms" : "SAMPLES",
                 "FUNCTION");
    for (size_t i = 0; i < n; i++) {
        if (!rank_of(s, &top[i].c.self))
            break; /* the rest only call others: the tree (--tree) shows them */
        (void)printf("  %6.1f%% %6.1f%% ", share(s, &top[i].c.self, whole),
                     share(s, &top[i].c.total, whole));
        if (s->by_cpu)
            (void)printf("%10.1f  ", (double)top[i].c.self.cpu_ns / 1e6);
        else
            (void)printf("%10llu  ", (unsigned long long)top[i].c.self.samples);
        print_function(&s->funcs.v[top[i].fid]);
        (void)putchar('\n');
    }
}

/* "(no stack...)" functions: a sample without a stack and the reason the runtime gave. */
static bool is_no_stack(const struct pstack_func *f)
{
    return !f->lib && !strncmp(f->name, "(no stack", 9);
}

/* One line on the profiler's own share, and one on the samples without a stack by reason. */
static void print_not_the_programs(const struct summary *s)
{
    struct weight none = {0};
    bool any = false;

    for (size_t f = 0; f < s->funcs.n; f++)
        if (is_no_stack(&s->funcs.v[f]))
            weight_add(&none, s->fleet[f].self.samples, s->fleet[f].self.cpu_ns);
    (void)printf("  Profiler overhead (frames under the `fleetprof` pseudo-frame): %.2f%% of %s",
                 share(s, &s->profiler, &s->all), rank_name(s));
    if (s->profiler.samples)
        (void)printf(" (%llu samples)", (unsigned long long)s->profiler.samples);
    (void)printf(".\n");
    if (!none.samples && !s->bad.samples)
        return;
    (void)printf("  No stack: %llu sample%s (%.2f%%)", (unsigned long long)none.samples,
                 none.samples == 1 ? "" : "s", summary_percent(none.samples, s->all.samples));
    for (size_t f = 0; f < s->funcs.n; f++) {
        const struct pstack_func *fn = &s->funcs.v[f];

        if (!is_no_stack(fn) || !s->fleet[f].self.samples)
            continue;
        /* "(no stack: unwinding failed)" -> "unwinding failed (3)" */
        (void)fputs(any ? "; " : ": ", stdout);
        if (fn->name_len > 11 && fn->name[9] == ':')
            summary_print_clean(fn->name + 11, fn->name_len - 12);
        else
            (void)fputs("no reason given", stdout);
        (void)printf(" (%llu)", (unsigned long long)s->fleet[f].self.samples);
        any = true;
    }
    if (s->bad.samples)
        (void)printf("%sinvalid stack indexes (%llu)", any ? "; " : ": ",
                     (unsigned long long)s->bad.samples);
    (void)printf(".\n");
}

/* The timer captures a process took (its profilingLog's runtime.handlerCaptures), 0 when
 * it does not say. */
static uint64_t handler_captures(const struct json_doc *d, const struct json_value *proc)
{
    const struct json_value *pl = json_object_get(d, proc, "profilingLog");
    const struct json_value *entry;
    uint64_t sum = 0;

    for (size_t i = 0; (entry = json_object_value_at(d, pl, i)); i++) {
        const struct json_value *runtime = json_object_get(d, entry, "runtime");
        int64_t n;

        if (profile_value_int(d, json_object_get(d, runtime, "handlerCaptures"), &n) == 0 && n > 0)
            sum += (uint64_t)n;
    }
    return sum;
}

/* The interval the timers achieved: the CPU of the processes that say how many captures they
 * took, per capture, in ms; 0 when it cannot be told. */
static double measured_interval_ms(const struct summary *s)
{
    uint64_t captures = 0, cpu_ns = 0;

    for (size_t i = 0; s->cpu_known && i < s->n_procs; i++) {
        uint64_t n = handler_captures(s->doc, s->procs[i].p.value);

        captures += n;
        cpu_ns += n ? s->procs[i].all.cpu_ns : 0;
    }
    return captures ? (double)cpu_ns / 1e6 / (double)captures : 0;
}

static void print_header(const struct summary *s)
{
    const struct json_doc *d = s->doc;
    const struct json_value *meta = json_object_get(d, json_doc_root(d), "meta");
    size_t len;
    const char *interval = json_value_number_text(d, json_object_get(d, meta, "interval"), &len);

    summary_print_cleans(s->path);
    (void)printf(": %zu process%s, %llu samples", s->n_procs, s->n_procs == 1 ? "" : "es",
                 (unsigned long long)s->all.samples);
    if (interval) {
        double measured = measured_interval_ms(s);

        (void)printf(", interval ");
        summary_print_clean(interval, len);
        (void)printf(" ms");
        /* What the kernel gave: a CPU timer is checked at its tick (4 ms on a 250 Hz
         * kernel), and a busy machine runs a thread between ticks. */
        if (measured > 0)
            (void)printf(" (measured: a stack per %.2f ms of CPU)", measured);
    }
    if (s->cpu_known && s->all.cpu_ns < 1000000000)
        (void)printf(", %.1f ms of CPU", (double)s->all.cpu_ns / 1e6);
    else if (s->cpu_known)
        (void)printf(", %.2f s of CPU", (double)s->all.cpu_ns / 1e9);
    (void)putchar('\n');
    if (s->by_cpu)
        (void)printf("Ranked by CPU time (threadCPUDelta); --wall ranks by samples, sleeping "
                     "threads included.\n");
    else if (s->cpu_known)
        (void)printf("Ranked by samples (--wall): sleeping threads count as much as running "
                     "ones.\n");
    else
        (void)printf("Ranked by samples: the profile's CPU deltas are not in ns or us.\n");
}

/* Under a program whose processes ran different command lines (git's subcommands share
 * the name "git"): which, and how many processes each. */
static void print_program_commands(const struct program *g)
{
    if (g->n_commands < 2 && !g->other_commands)
        return;
    /* The most-run first, ties by text: the file's process order is the order of exits. */
    size_t order[PROGRAM_COMMANDS];
    for (size_t k = 0; k < g->n_commands; k++) {
        size_t j = k;
        for (; j > 0; j--) {
            size_t prev = order[j - 1];
            if (g->command_procs[prev] > g->command_procs[k] ||
                (g->command_procs[prev] == g->command_procs[k] &&
                 strcmp(g->commands[prev], g->commands[k]) <= 0))
                break;
            order[j] = prev;
        }
        order[j] = k;
    }
    (void)printf("  %5s %6s %9s %9s    commands: ", "", "", "", "");
    for (size_t i = 0; i < g->n_commands; i++) {
        size_t k = order[i];
        /* The program by its name, as on the line above: its arguments are what differs. */
        const char *c = g->commands[k], *space = strchr(c, ' ');
        const char *slash = memrchr(c, '/', space ? (size_t)(space - c) : strlen(c));

        c = slash ? slash + 1 : c;
        (void)printf("%s", i ? ", " : "");
        (void)print_cut(c, strlen(c), 48);
        (void)printf(" (%zu)", g->command_procs[k]);
    }
    if (g->other_commands)
        (void)printf(", %zu more process%s with others", g->other_commands,
                     g->other_commands == 1 ? "" : "es");
    (void)putchar('\n');
}

static void print_programs(const struct summary *s, const uint32_t *order)
{
    size_t shown = s->n_programs > PROGRAMS_SHOWN + 1 ? PROGRAMS_SHOWN : s->n_programs;
    struct weight rest = {0};
    size_t rest_procs = 0, recovered = 0, execd = 0;

    (void)printf("\nPrograms (%zu), by %s:\n", s->n_programs, rank_name(s));
    (void)printf("  %5s %6s %9s %9s  %-*s  %s\n", "PROCS", "SHARE", "CPU ms", "SAMPLES", NAME_WIDTH,
                 "PROGRAM (ROLE)", "TOP FUNCTIONS (self)");
    for (size_t i = 0; i < s->n_programs; i++) {
        const struct program *g = &s->programs[order[i]];
        char label[512];
        size_t width;

        recovered += g->recovered;
        execd += g->execd;
        if (i >= shown) {
            weight_add(&rest, g->all.samples, g->all.cpu_ns);
            rest_procs += g->procs;
            continue;
        }
        (void)printf("  %5zu %5.1f%% ", g->procs, share(s, &g->all, &s->all));
        if (s->cpu_known)
            (void)printf("%9.1f", (double)g->all.cpu_ns / 1e6);
        else
            (void)printf("%9s", "-");
        (void)printf(" %9llu  ", (unsigned long long)g->all.samples);
        (void)snprintf(label, sizeof(label), "%s%s%s%s%s%s", g->name,
                       *g->role || g->exited ? " (" : "", g->role,
                       *g->role && g->exited ? ", " : "", g->exited ? "exited" : "",
                       *g->role || g->exited ? ")" : "");
        width = print_cut(label, strlen(label), NAME_WIDTH);
        (void)printf("%*s", (int)(NAME_WIDTH - width), "");
        for (size_t k = 0; k < g->n_top; k++) {
            const struct pstack_func *f = &s->funcs.v[g->top[k].fid];

            if (k > 0 && share(s, &g->top[k].c.self, &g->all) < 1.0)
                break; /* a long tail says nothing on this line */

            (void)printf("%s", k ? ", " : "  ");
            (void)print_cut(f->name, f->name_len, 40);
            (void)printf(" %.0f%%", share(s, &g->top[k].c.self, &g->all));
        }
        (void)putchar('\n');
        print_program_commands(g);
    }
    if (rest_procs)
        (void)printf("  %5zu %5.1f%% %9.1f %9llu  ... %zu more programs (--per-process, --json)\n",
                     rest_procs, share(s, &rest, &s->all), (double)rest.cpu_ns / 1e6,
                     (unsigned long long)rest.samples, s->n_programs - shown);
    if (recovered)
        (void)printf("  %zu process%s recovered after %s died (from the chunks %s left).\n",
                     recovered, recovered == 1 ? " was" : "es were", recovered == 1 ? "it" : "they",
                     recovered == 1 ? "it" : "they");
    if (execd)
        (void)printf("  %zu process%s exec'd another program: %s life before the exec is "
                     "listed apart.\n",
                     execd, execd == 1 ? "" : "es", execd == 1 ? "its" : "their");
}

static void print_fleet_top(struct summary *s)
{
    uint32_t *touched = malloc((s->funcs.n ? s->funcs.n : 1) * sizeof(*touched));
    struct top_entry *top;
    size_t n_touched = 0, n;

    if (!touched) {
        s->oom = true;
        return;
    }
    for (size_t f = 0; f < s->funcs.n; f++)
        if (s->fleet[f].self.samples || s->fleet[f].self.cpu_ns)
            touched[n_touched++] = (uint32_t)f;
    top = top_of(s, touched, n_touched, s->fleet, s->top_n, &n);
    if (top && n) {
        (void)printf("\nTop functions of the fleet, by %s (SELF: in the function, TOTAL: with "
                     "what it calls):\n",
                     rank_name(s));
        print_top_table(s, top, n, &s->all);
    }
    free(top);
    free(touched);
}

static const char *role_text(const struct summary *s, const struct proc_result *pr)
{
    return s->programs[pr->program].role;
}

static void print_process(const struct summary *s, const struct proc_result *pr)
{
    const char *role = role_text(s, pr);

    (void)printf("\nProcess ");
    if (pr->p.info.pid >= 0)
        (void)printf("%lld ", (long long)pr->p.info.pid);
    summary_print_cleans(pr->p.info.name ? pr->p.info.name : "?");
    (void)printf(" (%s%s%s, %zu thread%s, %llu samples", role, *role ? ", " : "",
                 pr->p.info.execd_into  ? "until it exec'd"
                 : pr->p.info.recovered ? "recovered after it died"
                 : pr->p.info.exit      ? "exit profile"
                                        : "live",
                 pr->p.info.threads, pr->p.info.threads == 1 ? "" : "s",
                 (unsigned long long)pr->all.samples);
    if (s->cpu_known)
        (void)printf(", %.1f ms of CPU", (double)pr->all.cpu_ns / 1e6);
    (void)printf(")%s\n", pr->n_top ? ":" : "");
    print_top_table(s, pr->top, pr->n_top, &pr->all);
    if (pr->p.info.command) {
        (void)printf("  command: ");
        summary_print_cleans(pr->p.info.command);
        (void)putchar('\n');
    }
    if (pr->profiler.samples)
        (void)printf("  profiler overhead: %.2f%% of %s (%llu samples)\n",
                     share(s, &pr->profiler, &pr->all), rank_name(s),
                     (unsigned long long)pr->profiler.samples);
    if (pr->bad.samples)
        (void)printf("  warning: %llu samples have invalid stack, frame or string indexes\n",
                     (unsigned long long)pr->bad.samples);
}

struct tree_print {
    const struct summary *s;
    uint32_t *first_child, *next_sibling; /* owned, by node */
    uint64_t min_rank;
    struct weight whole;
};

static int compare_nodes(const void *a, const void *b, void *userdata)
{
    const struct tree_print *tp = userdata;
    const struct tree_node *x = &tp->s->tree.v[*(const uint32_t *)a];
    const struct tree_node *y = &tp->s->tree.v[*(const uint32_t *)b];
    int c = compare_rank(tp->s, &x->total, &y->total);

    return c ? c
             : (*(const uint32_t *)a > *(const uint32_t *)b) -
                           (*(const uint32_t *)a < *(const uint32_t *)b);
}

static void print_node(const struct tree_print *tp, uint32_t node, unsigned depth)
{
    const struct summary *s = tp->s;
    const struct tree_node *n = &s->tree.v[node];
    uint32_t kids[64];
    size_t n_kids = 0, hidden = 0;

    (void)printf("  %6.1f%% %6.1f%%  %*s", share(s, &n->total, &tp->whole),
                 share(s, &n->self, &tp->whole), (int)(2 * depth), "");
    if (n->parent == PSTACK_NONE) {
        const struct program *g = &s->programs[n->func];

        summary_print_cleans(g->name);
        if (*g->role)
            (void)printf(" (%s)", g->role);
    } else {
        print_function(&s->funcs.v[n->func]);
    }
    (void)putchar('\n');
    for (uint32_t c = tp->first_child[node]; c != PSTACK_NONE; c = tp->next_sibling[c]) {
        if (rank_of(s, &s->tree.v[c].total) < tp->min_rank || !rank_of(s, &s->tree.v[c].total))
            continue;
        if (n_kids < sizeof(kids) / sizeof(kids[0]))
            kids[n_kids++] = c;
        else
            hidden++;
    }
    if (depth + 1 >= s->tree_depth) {
        if (n_kids)
            (void)printf("%19s%*s... (--depth)\n", "", (int)(2 * depth + 2), "");
        return;
    }
    if (n_kids > 1)
        qsort_r(kids, n_kids, sizeof(*kids), compare_nodes, (void *)tp);
    for (size_t i = 0; i < n_kids; i++)
        print_node(tp, kids[i], depth + 1);
    (void)hidden;
}

static void print_tree(struct summary *s)
{
    struct tree *t = &s->tree;
    struct tree_print tp = {.s = s, .whole = s->all};
    uint32_t roots[4096];
    size_t n_roots = 0;

    tp.first_child = malloc((t->n + 1) * sizeof(*tp.first_child));
    tp.next_sibling = malloc((t->n + 1) * sizeof(*tp.next_sibling));
    if (!tp.first_child || !tp.next_sibling) {
        s->oom = true;
        goto out;
    }
    memset(tp.first_child, 0xff, (t->n + 1) * sizeof(*tp.first_child));
    /* Totals: children were made after their parents. */
    for (size_t i = t->n; i-- > 0;) {
        struct tree_node *n = &t->v[i];

        weight_add(&n->total, n->self.samples, n->self.cpu_ns);
        if (n->parent != PSTACK_NONE)
            weight_add(&t->v[n->parent].total, n->total.samples, n->total.cpu_ns);
    }
    for (size_t i = t->n; i-- > 0;) {
        if (t->v[i].parent == PSTACK_NONE) {
            if (n_roots < sizeof(roots) / sizeof(roots[0]))
                roots[n_roots++] = (uint32_t)i;
            continue;
        }
        tp.next_sibling[i] = tp.first_child[t->v[i].parent];
        tp.first_child[t->v[i].parent] = (uint32_t)i;
    }
    if (s->only_pid >= 0)
        for (size_t i = 0; i < s->n_procs; i++)
            if (s->procs[i].p.info.pid == s->only_pid)
                tp.whole = s->procs[i].all;
    tp.min_rank = (uint64_t)((double)rank_of(s, &tp.whole) * TREE_MIN_PERCENT / 100.0);
    (void)printf("\nCall tree, by %s (TOTAL%%, SELF%%; paths of at least %.0f%%, %u levels at "
                 "most):\n",
                 rank_name(s), TREE_MIN_PERCENT, s->tree_depth);
    if (n_roots > 1)
        qsort_r(roots, n_roots, sizeof(*roots), compare_nodes, &tp);
    for (size_t i = 0; i < n_roots; i++)
        if (rank_of(s, &t->v[roots[i]].total) >= tp.min_rank && rank_of(s, &t->v[roots[i]].total))
            print_node(&tp, roots[i], 0);
out:
    free(tp.first_child);
    free(tp.next_sibling);
}

static const char *name_of_pid(int64_t pid, void *userdata)
{
    const struct summary *s = userdata;

    for (size_t i = 0; i < s->n_procs; i++)
        if (s->procs[i].p.info.pid == pid)
            return s->procs[i].p.info.name;
    return NULL;
}

/* JSON output. */

static void write_weight(struct json_writer *w, const char *prefix, const struct weight *x)
{
    char key[32];

    (void)snprintf(key, sizeof(key), "%sSamples", prefix);
    json_writer_uint(w, *prefix ? key : "samples", x->samples);
    (void)snprintf(key, sizeof(key), "%sCpuNs", prefix);
    json_writer_uint(w, *prefix ? key : "cpuNs", x->cpu_ns);
}

static void write_function(struct json_writer *w, const struct summary *s,
                           const struct top_entry *e, const struct weight *whole)
{
    const struct pstack_func *f = &s->funcs.v[e->fid];

    json_writer_object_begin(w, NULL);
    json_writer_string_len(w, "function", f->name, f->name_len);
    if (f->lib)
        json_writer_string_len(w, "lib", f->lib, f->lib_len);
    else
        json_writer_null(w, "lib");
    json_writer_uint(w, "samples", e->c.self.samples);
    json_writer_double(w, "percent", summary_percent(e->c.self.samples, whole->samples));
    json_writer_uint(w, "selfCpuNs", e->c.self.cpu_ns);
    json_writer_uint(w, "totalSamples", e->c.total.samples);
    json_writer_uint(w, "totalCpuNs", e->c.total.cpu_ns);
    json_writer_double(w, "selfShare", share(s, &e->c.self, whole));
    json_writer_double(w, "totalShare", share(s, &e->c.total, whole));
    json_writer_object_end(w);
}

static int write_json(struct summary *s, const uint32_t *order)
{
    double measured = measured_interval_ms(s);
    struct json_writer *w;
    uint32_t *touched;
    struct top_entry *top = NULL;
    size_t n_touched = 0, n = 0;
    int r;

    r = json_writer_new_fd(STDOUT_FILENO, &w);
    if (r < 0)
        return r;
    json_writer_object_begin(w, NULL);
    json_writer_string(w, "file", s->path);
    json_writer_string(w, "rankedBy", s->by_cpu ? "cpu" : "samples");
    json_writer_uint(w, "samples", s->all.samples);
    if (s->cpu_known)
        json_writer_uint(w, "cpuNs", s->all.cpu_ns);
    else
        json_writer_null(w, "cpuNs");
    if (measured > 0)
        json_writer_double(w, "measuredIntervalMs", measured);
    else
        json_writer_null(w, "measuredIntervalMs");
    json_writer_array_begin(w, "processes");
    for (size_t i = 0; i < s->n_procs; i++) {
        const struct proc_result *pr = &s->procs[i];

        if (s->only_pid >= 0 && pr->p.info.pid != s->only_pid)
            continue;
        json_writer_object_begin(w, NULL);
        if (pr->p.info.pid >= 0)
            json_writer_int(w, "pid", pr->p.info.pid);
        else
            json_writer_null(w, "pid");
        if (pr->ppid >= 0)
            json_writer_int(w, "ppid", pr->ppid);
        else
            json_writer_null(w, "ppid");
        json_writer_string(w, "name", pr->p.info.name ? pr->p.info.name : "?");
        json_writer_string(w, "role", role_text(s, pr));
        if (pr->p.info.command)
            json_writer_string(w, "command", pr->p.info.command);
        else
            json_writer_null(w, "command");
        json_writer_bool(w, "exit", pr->p.info.exit);
        json_writer_bool(w, "recovered", pr->p.info.recovered != NULL);
        if (pr->p.info.execd_into)
            json_writer_string(w, "execdInto", pr->p.info.execd_into);
        else
            json_writer_null(w, "execdInto");
        json_writer_uint(w, "threads", pr->p.info.threads);
        json_writer_uint(w, "samples", pr->all.samples);
        json_writer_uint(w, "cpuNs", pr->all.cpu_ns);
        json_writer_uint(w, "invalidSamples", pr->bad.samples);
        write_weight(w, "profiler", &pr->profiler);
        json_writer_array_begin(w, "top");
        for (size_t k = 0; k < pr->n_top; k++)
            write_function(w, s, &pr->top[k], &pr->all);
        json_writer_array_end(w);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);

    json_writer_array_begin(w, "programs");
    for (size_t i = 0; i < s->n_programs; i++) {
        const struct program *g = &s->programs[order[i]];

        json_writer_object_begin(w, NULL);
        json_writer_string(w, "name", g->name);
        json_writer_string(w, "role", g->role);
        json_writer_bool(w, "exited", g->exited);
        json_writer_uint(w, "processes", g->procs);
        json_writer_uint(w, "recovered", g->recovered);
        json_writer_uint(w, "execd", g->execd);
        write_weight(w, "", &g->all);
        json_writer_double(w, "share", share(s, &g->all, &s->all));
        json_writer_array_begin(w, "top");
        for (size_t k = 0; k < g->n_top; k++)
            write_function(w, s, &g->top[k], &g->all);
        json_writer_array_end(w);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);

    touched = malloc((s->funcs.n ? s->funcs.n : 1) * sizeof(*touched));
    if (touched) {
        for (size_t f = 0; f < s->funcs.n; f++)
            if (s->fleet[f].self.samples || s->fleet[f].self.cpu_ns)
                touched[n_touched++] = (uint32_t)f;
        top = top_of(s, touched, n_touched, s->fleet, s->top_n, &n);
    } else {
        s->oom = true;
    }
    json_writer_object_begin(w, "fleet");
    json_writer_uint(w, "processes", s->n_procs);
    write_weight(w, "", &s->all);
    write_weight(w, "profiler", &s->profiler);
    write_weight(w, "noStackNull", &s->no_stack_null);
    json_writer_array_begin(w, "top");
    for (size_t i = 0; top && i < n; i++)
        write_function(w, s, &top[i], &s->all);
    json_writer_array_end(w);
    json_writer_object_end(w);
    free(top);
    free(touched);
    summary_groups_write(&s->groups, w, s->cpu_known ? s->all.cpu_ns : 0);
    r = summary_log_write_json(s->doc, w);
    json_writer_object_end(w);
    if (r == 0)
        r = json_writer_finish(w);
    else
        (void)json_writer_finish(w);
    json_writer_free(w);
    if (r == 0 && write(STDOUT_FILENO, "\n", 1) != 1)
        r = -errno;
    return r < 0 ? r : s->oom ? -ENOMEM : 0;
}

static void usage(FILE *out)
{
    (void)fprintf(out,
                  "Usage: fleetprof summary [OPTIONS] FILE\n"
                  "A profile on one screen: its programs (processes grouped by name and role)\n"
                  "with their CPU and top functions, the fleet's top functions by self and\n"
                  "total time, the profiler's own share and the samples without a stack, the\n"
                  "performance groups, and what needs reading in the gathering log.\n"
                  "Ranked by CPU time (threadCPUDelta) unless --wall.\n"
                  "  --wall          rank by samples, sleeping threads included\n"
                  "  --per-process   one block per process\n"
                  "  --pid N         only process N, in detail\n"
                  "  --log           the whole gathering log, event by event\n"
                  "  --tree          the hottest call paths (with --pid: that process's)\n"
                  "  --depth N       --tree levels (default %d)\n"
                  "  --top N         functions per list (default %d)\n"
                  "  --json          one JSON document for scripts\n",
                  DEFAULT_TREE_DEPTH, DEFAULT_TOP);
}

static int parse_number(const char *opt, const char *arg, long min, long max, long *ret)
{
    char *end;

    errno = 0;
    *ret = strtol(arg, &end, 10);
    if (errno || end == arg || *end || *ret < min || *ret > max) {
        (void)fprintf(stderr, "fleetprof summary: %s wants a number from %ld to %ld, not '%s'\n",
                      opt, min, max, arg);
        return -EINVAL;
    }
    return 0;
}

static void summary_done(struct summary *s)
{
    for (size_t i = 0; i < s->n_procs; i++)
        free(s->procs[i].top);
    free(s->procs);
    free(s->programs);
    free(s->fleet);
    free(s->proc);
    free(s->prog);
    free(s->mark);
    free(s->proc_touched);
    free(s->prog_touched);
    free(s->scratch);
    free(s->tree.v);
    idmap_done(&s->tree.ids);
    summary_groups_done(&s->groups);
    pstack_funcs_done(&s->funcs);
}

/* Prints the summary the options ask for. */
static int print_text(struct summary *s, const uint32_t *order, bool per_process, bool full_log)
{
    const struct summary_names names = {name_of_pid, s};
    int r;

    print_header(s);
    if (s->only_pid >= 0) {
        for (size_t i = 0; i < s->n_procs; i++)
            if (s->procs[i].p.info.pid == s->only_pid)
                print_process(s, &s->procs[i]);
        if (s->want_tree)
            print_tree(s);
        return s->oom ? -ENOMEM : 0;
    }
    if (per_process)
        for (size_t i = 0; i < s->n_procs; i++)
            print_process(s, &s->procs[i]);
    else
        print_programs(s, order);
    print_fleet_top(s);
    print_not_the_programs(s);
    if (s->want_tree)
        print_tree(s);
    summary_groups_print(&s->groups, s->cpu_known ? s->all.cpu_ns : 0);
    r = full_log ? summary_log_print(s->doc, &names) : summary_log_print_digest(s->doc, &names);
    if (r == 0 && !per_process && !full_log && !s->want_tree)
        (void)printf("\nMore: --per-process, --pid N, --tree, --log, --wall, --json "
                     "(fleetprof summary --help).\n");
    return r < 0 ? r : s->oom ? -ENOMEM : 0;
}

int cmd_summary(int argc, char **argv)
{
    static const struct option longopts[] = {
            {"json", no_argument, NULL, 'j'},      {"top", required_argument, NULL, 't'},
            {"wall", no_argument, NULL, 'w'},      {"per-process", no_argument, NULL, 'P'},
            {"pid", required_argument, NULL, 'p'}, {"log", no_argument, NULL, 'l'},
            {"tree", no_argument, NULL, 'T'},      {"depth", required_argument, NULL, 'd'},
            {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0}};
    struct summary s = {.top_n = DEFAULT_TOP,
                        .by_cpu = true,
                        .only_pid = -1,
                        .pseudo = PSTACK_NONE,
                        .tree_depth = DEFAULT_TREE_DEPTH};
    struct json_doc *doc = NULL;
    uint32_t *order = NULL;
    bool json = false, per_process = false, full_log = false;
    char why[256];
    long v;
    int c, r, status = 1;

    optind = 1;
    while ((c = getopt_long(argc, argv, "ht:", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 't':
            if (parse_number("--top", optarg, 0, MAX_TOP, &v) < 0)
                return 2;
            s.top_n = (unsigned)v;
            break;
        case 'w':
            s.by_cpu = false;
            break;
        case 'P':
            per_process = true;
            break;
        case 'p':
            if (parse_number("--pid", optarg, 0, INT32_MAX, &v) < 0)
                return 2;
            s.only_pid = v;
            break;
        case 'l':
            full_log = true;
            break;
        case 'T':
            s.want_tree = true;
            break;
        case 'd':
            if (parse_number("--depth", optarg, 1, 1000, &v) < 0)
                return 2;
            s.tree_depth = (unsigned)v;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    s.path = argv[optind];
    r = profile_load(s.path, &doc, why, sizeof(why));
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof summary: %s: %s\n", s.path, why);
        return 1;
    }
    s.doc = doc;
    r = summarize(&s);
    if (r < 0)
        goto oom;
    if (s.only_pid >= 0 && !has_pid(&s, s.only_pid)) {
        (void)fprintf(stderr, "fleetprof summary: %s has no process %lld\n", s.path,
                      (long long)s.only_pid);
        goto out;
    }
    order = malloc((s.n_programs + 1) * sizeof(*order));
    if (!order)
        goto oom;
    for (size_t i = 0; i < s.n_programs; i++)
        order[i] = (uint32_t)i;
    if (s.n_programs > 1)
        qsort_r(order, s.n_programs, sizeof(*order), compare_program_ids, &s);
    summary_groups_sort(&s.groups);

    r = json ? write_json(&s, order) : print_text(&s, order, per_process, full_log);
    if (!json && r == 0 && fflush(stdout) != 0)
        r = -errno;
    if (r == -ENOMEM)
        goto oom;
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof summary: cannot write the summary: %s\n", strerror(-r));
        goto out;
    }
    status = 0;
    goto out;

oom:
    (void)fprintf(stderr, "fleetprof summary: out of memory reading %s\n", s.path);
out:
    free(order);
    summary_done(&s);
    json_doc_free(doc);
    return status;
}
