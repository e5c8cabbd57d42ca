/* tools/cmd-export.c - `fleetprof export --format collapsed [-o OUT] IN`: a recorded or
 * captured profile as folded stacks, the format flamegraph.pl, inferno and Speedscope read:
 * one line per distinct stack, `process (pid);thread;root frame;...;leaf frame count`.
 *
 * Counts are samples, as in the profile (a sample with no stack is `(no stack)`). Names keep
 * their spaces (the count is after the last one); the separator `;` and line breaks inside a
 * name become `:` and spaces, so a line always splits back into the frames it came from.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/json-read.h"
#include "tools/profile-read.h"

static void usage(FILE *out)
{
    (void)fprintf(out,
                  "Usage: fleetprof export --format collapsed [-o OUT] IN.json\n"
                  "Writes the profile's stacks as folded lines (process;thread;frames... count)\n"
                  "for flamegraph.pl, inferno or Speedscope; IN may be - (standard input), OUT\n"
                  "defaults to standard output.\n");
}

/* Writes s with the folded format's separators made harmless. */
static void put_name(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        char c = *s;

        if (c == ';')
            c = ':';
        else if (c == '\n' || c == '\r')
            c = ' ';
        (void)fputc(c, out);
    }
}

struct thread_ctx {
    const struct json_doc *doc;
    const struct json_value *strings, *frames, *stacks;
    int frame_location, stack_prefix, stack_frame;
    size_t n_stacks;
};

/* The frame names of stack, root first, written after the prefix. -EBADMSG for a cycle or
 * a bad index (the file is the user's: never trusted). */
static int put_stack(FILE *out, const struct thread_ctx *t, int64_t stack, size_t depth)
{
    const struct json_value *row, *loc;
    int64_t prefix = -1, frame = -1, str = -1;
    const char *name;
    int r;

    if (stack < 0 || (size_t)stack >= t->n_stacks || depth > t->n_stacks)
        return -EBADMSG;
    row = json_array_at(t->doc, t->stacks, (size_t)stack);
    if (json_value_type(json_array_at(t->doc, row, (size_t)t->stack_prefix)) != JSON_NULL &&
        profile_value_int(t->doc, json_array_at(t->doc, row, (size_t)t->stack_prefix), &prefix) < 0)
        return -EBADMSG;
    if (profile_value_int(t->doc, json_array_at(t->doc, row, (size_t)t->stack_frame), &frame) < 0)
        return -EBADMSG;
    if (prefix >= 0) {
        r = put_stack(out, t, prefix, depth + 1);
        if (r < 0)
            return r;
    }
    loc = json_array_at(t->doc, json_array_at(t->doc, t->frames, (size_t)frame),
                        (size_t)t->frame_location);
    if (profile_value_int(t->doc, loc, &str) < 0)
        return -EBADMSG;
    name = json_value_string(t->doc, json_array_at(t->doc, t->strings, (size_t)str), NULL);
    (void)fputc(';', out);
    put_name(out, name ? name : "?");
    return 0;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One thread's folded lines. Returns the number of bad samples skipped, or -ENOMEM. */
static long export_thread(FILE *out, const struct json_doc *doc, const struct json_value *thread,
                          const char *proc_label)
{
    const struct json_value *samples = json_object_get(doc, thread, "samples");
    const struct json_value *data = json_object_get(doc, samples, "data");
    struct thread_ctx t = {.doc = doc};
    const char *tname = json_value_string(doc, json_object_get(doc, thread, "name"), NULL);
    int stack_col = profile_schema_column(doc, samples, "stack");
    uint64_t *counts, no_stack = 0;
    long bad = 0;

    t.strings = json_object_get(doc, thread, "stringTable");
    t.frames = json_object_get(doc, json_object_get(doc, thread, "frameTable"), "data");
    t.stacks = json_object_get(doc, json_object_get(doc, thread, "stackTable"), "data");
    t.frame_location =
            profile_schema_column(doc, json_object_get(doc, thread, "frameTable"), "location");
    t.stack_prefix =
            profile_schema_column(doc, json_object_get(doc, thread, "stackTable"), "prefix");
    t.stack_frame = profile_schema_column(doc, json_object_get(doc, thread, "stackTable"), "frame");
    t.n_stacks = json_value_type(t.stacks) == JSON_ARRAY ? json_value_len(t.stacks) : 0;
    if (stack_col < 0 || json_value_type(data) != JSON_ARRAY)
        return 0; /* no samples */
    counts = calloc(t.n_stacks + 1, sizeof(*counts));
    if (!counts)
        return -ENOMEM;
    for (size_t i = 0; i < json_value_len(data); i++) {
        const struct json_value *s =
                json_array_at(doc, json_array_at(doc, data, i), (size_t)stack_col);
        int64_t stack;

        if (json_value_type(s) == JSON_NULL)
            no_stack++;
        else if (profile_value_int(doc, s, &stack) == 0 && stack >= 0 && (size_t)stack < t.n_stacks)
            counts[stack]++;
        else
            bad++;
    }
    /* Stacks with equal names (a function's frames at several addresses) are one line. */
    {
        struct line {
            char *path;
            uint64_t n;
        } *lines = calloc(t.n_stacks + 1, sizeof(*lines));
        size_t n_lines = 0;

        if (!lines) {
            free(counts);
            return -ENOMEM;
        }
        for (size_t k = 0; k <= t.n_stacks; k++) {
            uint64_t n = k < t.n_stacks ? counts[k] : no_stack;
            size_t size = 0;
            FILE *m;

            if (!n)
                continue;
            m = open_memstream(&lines[n_lines].path, &size);
            if (!m) {
                bad = -ENOMEM;
                break;
            }
            put_name(m, proc_label);
            (void)fputc(';', m);
            put_name(m, tname ? tname : "thread");
            if (k == t.n_stacks) {
                (void)fputs(";(no stack)", m);
            } else if (put_stack(m, &t, (int64_t)k, 0) < 0) {
                (void)fputs(";(bad stack)", m);
                bad += (long)n;
            }
            if (fclose(m) != 0) {
                bad = -ENOMEM;
                break;
            }
            lines[n_lines++].n = n;
        }
        qsort(lines, n_lines, sizeof(*lines), by_path);
        for (size_t i = 0; i < n_lines; i++) {
            uint64_t n = lines[i].n;

            while (i + 1 < n_lines && strcmp(lines[i].path, lines[i + 1].path) == 0) {
                free(lines[i].path);
                n += lines[++i].n;
            }
            if (bad >= 0)
                (void)fprintf(out, "%s %llu\n", lines[i].path, (unsigned long long)n);
            free(lines[i].path);
        }
        free(lines);
    }
    free(counts);
    return bad;
}

static long export_process(FILE *out, const struct json_doc *doc, const struct json_value *proc)
{
    const struct json_value *threads = json_object_get(doc, proc, "threads");
    struct profile_process info;
    char label[512];
    long bad = 0;

    profile_process_describe(doc, proc, &info);
    (void)snprintf(label, sizeof(label), "%s (%lld)", info.name ? info.name : "?",
                   (long long)info.pid);
    for (size_t i = 0; json_value_type(threads) == JSON_ARRAY && i < json_value_len(threads); i++) {
        long r = export_thread(out, doc, json_array_at(doc, threads, i), label);

        if (r < 0)
            return r;
        bad += r;
    }
    return bad;
}

int cmd_export(int argc, char **argv)
{
    static const struct option longopts[] = {{"format", required_argument, NULL, 'f'},
                                             {"output", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *format = NULL, *out_path = NULL, *in;
    struct json_doc *doc = NULL;
    const struct json_value *root, *subs;
    char why[512];
    FILE *out = stdout;
    long bad;
    int c, r, status = 1;

    optind = 1;
    while ((c = getopt_long(argc, argv, "hf:o:", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            format = optarg;
            break;
        case 'o':
            out_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!format || strcmp(format, "collapsed") != 0 || optind != argc - 1) {
        (void)fprintf(stderr, "fleetprof export: %s\n",
                      !format                            ? "--format is required"
                      : strcmp(format, "collapsed") != 0 ? "unknown --format (collapsed)"
                                                         : "one input file, or -");
        usage(stderr);
        return 2;
    }
    in = strcmp(argv[optind], "-") == 0 ? "/dev/stdin" : argv[optind];
    r = profile_load(in, &doc, why, sizeof(why));
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof export: %s: %s\n", argv[optind], why);
        return 1;
    }
    if (out_path && !(out = fopen(out_path, "w"))) {
        (void)fprintf(stderr, "fleetprof export: cannot write %s: %s\n", out_path, strerror(errno));
        json_doc_free(doc);
        return 1;
    }
    root = json_doc_root(doc);
    bad = export_process(out, doc, root);
    subs = json_object_get(doc, root, "processes");
    for (size_t i = 0; bad >= 0 && json_value_type(subs) == JSON_ARRAY && i < json_value_len(subs);
         i++) {
        long b = export_process(out, doc, json_array_at(doc, subs, i));

        bad = b < 0 ? b : bad + b;
    }
    if (bad < 0)
        (void)fprintf(stderr, "fleetprof export: out of memory\n");
    else if (bad > 0)
        (void)fprintf(stderr,
                      "fleetprof export: %ld samples had stacks that are not in their "
                      "thread's tables (shown as (bad stack) or left out)\n",
                      bad);
    if ((out != stdout ? fclose(out) : fflush(out)) != 0 && bad >= 0) {
        (void)fprintf(stderr, "fleetprof export: cannot write %s: %s\n",
                      out_path ? out_path : "standard output", strerror(errno));
        bad = -1;
    }
    status = bad < 0 ? 1 : 0;
    json_doc_free(doc);
    return status;
}
