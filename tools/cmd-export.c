/* tools/cmd-export.c - `fleetprof export --format collapsed|pprof [--split] [-o OUT] IN`: a
 * recorded or captured profile for other tools. pprof: gzipped perftools.profiles.Profile
 * (tools/export-pprof.c). collapsed: folded stacks, the format flamegraph.pl, inferno and
 * Speedscope read: one line per distinct stack, `process (pid);thread;root frame;...;leaf
 * frame count`.
 *
 * A line's count is its CPU time in nanoseconds (the samples' threadCPUDelta: a waiting
 * thread's samples weigh nothing, and stacks that used no CPU are left out), or with
 * `--weight samples` its samples, as in the profile, waiting ones included. A sample with no
 * stack is `(no stack)`. Names keep
 * their spaces (the count is after the last one); the separator `;` and line breaks inside a
 * name become `:` and spaces, so a line always splits back into the frames it came from.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/outfile.h"
#include "json/reader.h"
#include "tools/commands.h"
#include "tools/export-pprof.h"
#include "tools/export-svg.h"
#include "tools/idmap.h"
#include "tools/profile-read.h"
#include "tools/profile-stacks.h"

static void usage(FILE *out)
{
    (void)fprintf(
            out,
            "Usage: fleetprof export --format collapsed|pprof|svg [--weight cpu|samples]\n"
            "                        [--split] [-o OUT] IN.json\n"
            "Writes a profile's stacks for other tools. IN may be - (standard input).\n"
            "\n"
            "  --format collapsed  folded lines (process (pid);thread;frames... weight) for\n"
            "                      flamegraph.pl, inferno or Speedscope\n"
            "  --format pprof      a gzipped pprof profile (profile.proto) for go tool pprof,\n"
            "                      Pyroscope/Grafana or Speedscope: sample types samples/count\n"
            "                      and cpu/nanoseconds (threadCPUDelta), labels pid, tid,\n"
            "                      process, thread, command on every sample\n"
            "  --format svg        a flame graph in one self-contained SVG file: any browser\n"
            "                      opens it offline (click a box to zoom; Search highlights)\n"
            "  --weight cpu        (default) collapsed: each line weighs its CPU time in ns, so\n"
            "                      waiting threads weigh nothing; pprof: cpu is shown first\n"
            "  --weight samples    each line weighs its samples, waiting ones included; pprof:\n"
            "                      samples is shown first\n"
            "  -o, --output OUT    where to write (default standard output; pprof refuses a\n"
            "                      terminal); written whole or not at all\n"
            "  --split             pprof only: one file per process, OUT/<pid>.pb.gz in the\n"
            "                      directory OUT (created if missing; -o is required; a pid\n"
            "                      seen twice in IN gives OUT/<pid>.2.pb.gz)\n"
            "Exit status: 0 written, 1 cannot read IN or write OUT, 2 usage error.\n");
}

/* Writes s with the folded format's separators made harmless. */
static void put_name(FILE *out, const char *s)
{
    if (!s)
        return;
    if (!strpbrk(s, ";\n\r")) {
        (void)fputs(s, out);
        return;
    }
    for (; *s; s++) {
        char c = *s;

        if (c == ';')
            c = ':';
        else if (c == '\n' || c == '\r')
            c = ' ';
        (void)fputc(c, out);
    }
}

/* Writes function f as its location string: "name (in lib)", or the name. */
static void put_func(FILE *out, const struct pstack_func *f)
{
    put_name(out, f->name);
    if (f->lib) {
        (void)fputs(" (in ", out);
        put_name(out, f->lib);
        (void)fputc(')', out);
    }
}

/* A thread's stacks merged by their functions' names all the way up (a function's frames at
 * several addresses or lines are one line of output). */
struct canon {
    uint32_t func, parent; /* parent: canonical caller + 1, 0 at a root */
    uint64_t weight;       /* samples or CPU ns, per struct collapsed's by_samples */
};

struct collapsed {
    FILE *out;
    bool by_samples; /* --weight samples; else CPU ns */
    const struct json_doc *doc;
    struct pstack_funcs funcs;
    uint64_t bad;
    uint32_t *stack_canon; /* stack -> canonical stack */
    struct canon *canon;
    size_t cap_stacks, n_canon;
    uint32_t *path;   /* scratch: a canonical stack's functions, leaf first */
    struct idmap ids; /* (parent, function) -> canonical stack */
};

static int grow_scratch(struct collapsed *c, size_t n_stacks)
{
    size_t cap;

    if (n_stacks <= c->cap_stacks)
        return 0;
    /* Overflow checked for the largest elements, canon's. */
    cap = fleetprof_grown_capacity(c->cap_stacks, n_stacks, sizeof(*c->canon));
    /* An array resized before a failure is only larger: cap_stacks stays true of all. */
    if (!cap || FLEETPROF_RESIZE(c->stack_canon, cap) < 0 || FLEETPROF_RESIZE(c->canon, cap) < 0 ||
        FLEETPROF_RESIZE(c->path, cap) < 0)
        return -ENOMEM;
    c->cap_stacks = cap;
    return 0;
}

/* One thread's folded lines, in the order their stacks first appear. */
static int export_thread(const struct pstack_process *proc, const struct pstack_thread *t,
                         void *userdata)
{
    struct collapsed *c = userdata;
    char label[512];

    (void)snprintf(label, sizeof(label), "%s (%lld)", proc->info.name ? proc->info.name : "?",
                   (long long)proc->info.pid);
    c->bad += t->bad_samples;
    if (grow_scratch(c, t->n_stacks) < 0)
        return -ENOMEM;
    c->n_canon = 0;
    idmap_done(&c->ids);
    for (size_t s = 0; s < t->n_stacks; s++) {
        /* A valid stack's prefix is valid and earlier: its canonical stack is known. */
        uint32_t parent = t->prefix[s] == PSTACK_NONE ? 0 : c->stack_canon[t->prefix[s]] + 1;
        uint32_t k = idmap_get(&c->ids, parent, t->func[s], (uint32_t)c->n_canon);

        if (k == UINT32_MAX)
            return -ENOMEM;
        if (k == c->n_canon)
            c->canon[c->n_canon++] = (struct canon){t->func[s], parent, 0};
        c->canon[k].weight += c->by_samples ? t->samples[s] : t->cpu_ns[s];
        c->stack_canon[s] = k;
    }
    for (size_t k = 0; k < c->n_canon; k++) {
        size_t depth = 0;

        if (!c->canon[k].weight)
            continue;
        for (uint32_t at = (uint32_t)k + 1; at; at = c->canon[at - 1].parent)
            c->path[depth++] = c->canon[at - 1].func;
        put_name(c->out, label);
        (void)fputc(';', c->out);
        put_name(c->out, t->name ? t->name : "thread");
        while (depth-- > 0) {
            (void)fputc(';', c->out);
            put_func(c->out, &c->funcs.v[c->path[depth]]);
        }
        (void)fprintf(c->out, " %llu\n", (unsigned long long)c->canon[k].weight);
    }
    if (c->by_samples ? t->no_stack_samples : t->no_stack_cpu_ns) {
        put_name(c->out, label);
        (void)fputc(';', c->out);
        put_name(c->out, t->name ? t->name : "thread");
        (void)fprintf(
                c->out, ";(no stack) %llu\n",
                (unsigned long long)(c->by_samples ? t->no_stack_samples : t->no_stack_cpu_ns));
    }
    return 0;
}

static int export_process(const struct pstack_process *proc, void *userdata)
{
    struct collapsed *c = userdata;

    if (!c->by_samples && !proc->cpu_known) {
        (void)fprintf(stderr,
                      "fleetprof export: process %lld (%s) has no CPU times in the profile "
                      "(threadCPUDelta in ns or us): use --weight samples\n",
                      (long long)proc->info.pid, proc->info.name ? proc->info.name : "?");
        return -EPROTO;
    }
    return pstack_each_thread(&c->funcs, c->doc, proc, export_thread, c);
}

/* export --format pprof of the loaded doc. Returns the exit status. */
static int export_pprof(const struct json_doc *doc, const char *out_path, bool split,
                        enum pprof_weight weight)
{
    struct pprof_result res;
    char why[768];

    if (pprof_export(doc, out_path, split, weight, &res, why, sizeof(why)) < 0) {
        (void)fprintf(stderr, "fleetprof export: %s\n", why);
        return 1;
    }
    if (res.bad_samples > 0)
        (void)fprintf(stderr,
                      "fleetprof export: %llu samples had stacks that are not in their "
                      "thread's tables (counted under \"(invalid stack)\")\n",
                      (unsigned long long)res.bad_samples);
    return 0;
}

/* The reason the arguments are refused, or NULL. */
static const char *usage_error(const char *format, const char *weight, const char *out_path,
                               bool split, int n_inputs)
{
    if (weight && strcmp(weight, "cpu") != 0 && strcmp(weight, "samples") != 0)
        return "unknown --weight (cpu, samples)";
    if (!format)
        return "--format is required";
    if (strcmp(format, "collapsed") != 0 && strcmp(format, "pprof") != 0 &&
        strcmp(format, "svg") != 0)
        return "unknown --format (collapsed, pprof, svg)";
    if (n_inputs != 1)
        return "one input file, or -";
    if (split && strcmp(format, "pprof") != 0)
        return "--split is for --format pprof";
    if (split && (!out_path || !strcmp(out_path, "-")))
        return "--split needs -o DIR";
    if (!strcmp(format, "pprof") && (!out_path || !strcmp(out_path, "-")) && isatty(STDOUT_FILENO))
        return "pprof is gzipped binary: not writing it to a terminal (use -o FILE)";
    return NULL;
}

int cmd_export(int argc, char **argv)
{
    static const struct option longopts[] = {
            {"format", required_argument, NULL, 'f'}, {"output", required_argument, NULL, 'o'},
            {"split", no_argument, NULL, 's'},        {"weight", required_argument, NULL, 'w'},
            {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    const char *format = NULL, *weight = NULL, *out_path = NULL, *in, *bad_usage;
    struct json_doc *doc = NULL;
    struct collapsed col = {0};
    bool split = false;
    struct fleetprof_outfile file = {.fd = -1};
    char why[512];
    FILE *out = stdout;
    int c, r, fd, status = 1;

    optind = 1;
    while ((c = getopt_long(argc, argv, "hf:o:", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            format = optarg;
            break;
        case 'o':
            out_path = optarg;
            break;
        case 's':
            split = true;
            break;
        case 'w':
            weight = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    bad_usage = usage_error(format, weight, out_path, split, argc - optind);
    if (bad_usage) {
        (void)fprintf(stderr, "fleetprof export: %s\n", bad_usage);
        usage(stderr);
        return 2;
    }
    if (out_path && !strcmp(out_path, "-"))
        out_path = NULL; /* -o - is standard output, as IN - is standard input */
    in = strcmp(argv[optind], "-") == 0 ? "/dev/stdin" : argv[optind];
    r = profile_load(in, &doc, why, sizeof(why));
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof export: %s: %s\n", argv[optind], why);
        return 1;
    }
    if (!strcmp(format, "pprof")) {
        status = export_pprof(doc, out_path, split,
                              weight && !strcmp(weight, "samples") ? PPROF_WEIGHT_SAMPLES
                                                                   : PPROF_WEIGHT_CPU);
        json_doc_free(doc);
        return status;
    }
    if (out_path) { /* written beside it, then renamed over it (common/outfile.h) */
        /* stdio writes a duplicate: the file's own descriptor is fsynced at the commit. */
        r = fleetprof_outfile_open(&file, out_path);
        fd = r == 0 ? dup(file.fd) : -1;
        out = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!out) {
            r = r < 0 ? r : -errno;
            if (fd >= 0)
                (void)close(fd);
            fleetprof_outfile_abort(&file);
            (void)fprintf(stderr, "fleetprof export: cannot write %s: %s\n", out_path,
                          strerror(-r));
            json_doc_free(doc);
            return 1;
        }
    }
    col.out = out;
    col.doc = doc;
    col.by_samples = weight && !strcmp(weight, "samples");
    if (!strcmp(format, "svg")) {
        r = svg_export(doc, argv[optind], col.by_samples, out, why, sizeof(why));
        if (r < 0)
            (void)fprintf(stderr, "fleetprof export: %s\n", why);
    } else if ((r = pstack_each_process(doc, export_process, &col)) == -ENOMEM) {
        (void)fprintf(stderr, "fleetprof export: out of memory\n");
    } else if (col.bad > 0) {
        (void)fprintf(stderr,
                      "fleetprof export: %llu samples had stacks that are not in their "
                      "thread's tables (left out)\n",
                      (unsigned long long)col.bad);
    }
    if ((out != stdout ? fclose(out) : fflush(out)) != 0 && r >= 0) {
        (void)fprintf(stderr, "fleetprof export: cannot write %s: %s\n",
                      out_path ? out_path : "standard output", strerror(errno));
        r = -EIO;
    }
    if (out != stdout && fleetprof_outfile_commit(&file, r < 0 ? r : 0) < 0 && r >= 0) {
        (void)fprintf(stderr, "fleetprof export: cannot write %s: %s\n", out_path, strerror(errno));
        r = -EIO;
    }
    status = r < 0 ? 1 : 0;
    free(col.path);
    free(col.stack_canon);
    free(col.canon);
    idmap_done(&col.ids);
    pstack_funcs_done(&col.funcs);
    json_doc_free(doc);
    return status;
}
