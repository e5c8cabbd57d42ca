/* tests/bench/bench-json-readers.c - our JSON reader (json/reader.c) against maintained
 * libraries (jansson, json-c, yajl's tree API) on big fleet profiles: CPU time and peak memory.
 *
 *   bench-json-readers -g GEN [-m MB] [-r RUNS] [-l NAMES]
 *                      generates a fleet of at least MB (100) megabytes with GEN
 *                      (gen-big-fleet) in a temporary directory, measures, removes it
 *   bench-json-readers [-r RUNS] [-l NAMES] FILE...
 *                      measures the given profiles, e.g. a real recording:
 *                        FLEETPROF_BUFFER_MB=8 fleetprof record --global-limit 1G -o real.json \
 *                          -- sh -c 'for i in $(seq 16); do bench-fleet fill 220000 1 & done; wait'
 *                      (about 200 MB of markers; tests/workloads/bench-fleet.c)
 *
 * Every measurement is its own process, the reader's program built next to this one
 * (json-reader-<library>: json-reader-main.c). It reads the whole file into one
 * NUL-terminated buffer (the same way for every library), then parses it into the library's
 * tree, walks the tree (json-readers.h: every value visited, numbers converted to doubles,
 * samples.data lengths summed through key lookups, so that no parser can be lazy) and frees
 * it, timing each step with the process's CPU clock. Its peak RSS (ru_maxrss from wait4)
 * minus that of the same program only reading the file is the parser's peak memory. The
 * rounds interleave the libraries (each round in a rotated order); figures are medians over
 * RUNS (3) rounds. "fleetprof_file" is ours as the tools call it, json_doc_read_file(): it
 * reads the file itself (inside its parse time) and keeps that text for its strings, where
 * "fleetprof" (json_doc_parse) copies the caller's buffer.
 * All readers must count the same values, or the benchmark fails. Prints a table per file and,
 * for the first file, `BENCH json_read.<reader>_MBps` (MB = 1e6 bytes of JSON per CPU second
 * of parse + walk) and `BENCH json_read.<reader>_peak_MiB`. Measures, never asserts on time.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/bench/json-readers.h"
#include "tests/bench/synth-profile.h"

#define MIN_RUNS    3
#define MAX_RUNS    15
#define MAX_READERS 8

/* A reader and the program (next to this one) that runs it: json-reader-main.c. */
struct reader {
    const char *name;
    const char *program;
};

static const struct reader all_readers[] = {
        {"fleetprof", "json-reader-fleetprof"}, {"fleetprof_file", "json-reader-fleetprof"},
        {"jansson", "json-reader-jansson"},     {"json_c", "json-reader-json-c"},
        {"yajl", "json-reader-yajl"},
};
#define ALL_READERS (sizeof(all_readers) / sizeof(all_readers[0]))

/* What one run of a reader's program reported. */
struct measure {
    double parse_s, walk_s, free_s; /* CPU seconds of the process */
    struct json_walk_counts counts;
};

/* The generated fleet, removed at exit however the benchmark ends. */
static char *generated_path, generated_dir[] = "/tmp/bench-json-readers.XXXXXX";

/* The directory of this program, where the readers' programs are built. */
static char self_dir[PATH_MAX];

static void remove_generated(void)
{
    if (generated_path) {
        (void)unlink(generated_path);
        (void)rmdir(generated_dir);
    }
}

static _Noreturn __attribute__((format(printf, 1, 2))) void fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "bench-json-readers: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Runs `PROGRAM NAME parse|read PATH` (parse false: only reads the file, the baseline) and
 * returns its peak RSS in KiB, its figures in *ret. */
static long run_measure(const struct reader *r, bool parse, const char *path, struct measure *ret)
{
    char program[PATH_MAX + 64], line[512] = "";
    unsigned long long n[7];
    double sum;
    struct rusage ru;
    int fds[2], status;
    ssize_t got = 0;
    pid_t pid;

    (void)snprintf(program, sizeof(program), "%s/%s", self_dir, r->program);
    SYNTH_CHECK(pipe(fds) == 0);
    (void)fflush(stdout);
    pid = fork();
    SYNTH_CHECK(pid >= 0);
    if (pid == 0) {
        (void)dup2(fds[1], STDOUT_FILENO);
        (void)close(fds[0]);
        (void)close(fds[1]);
        execl(program, program, r->name, parse ? "parse" : "read", path, (char *)NULL);
        fprintf(stderr, "bench-json-readers: %s: %s\n", program, strerror(errno));
        _exit(127);
    }
    (void)close(fds[1]);
    while ((size_t)got < sizeof(line) - 1) {
        ssize_t k = read(fds[0], line + got, sizeof(line) - 1 - (size_t)got);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += k;
    }
    line[got] = '\0';
    line[strcspn(line, "\n")] = '\0';
    (void)close(fds[0]);
    SYNTH_CHECK(wait4(pid, &status, 0, &ru) == pid);
    if (!strncmp(line, "error: ", 7))
        fail("%s: %s", r->name, line + 7);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("%s: %s died (status 0x%x: killed, out of memory?) on %s", r->name, program,
             (unsigned)status, path);
    if (sscanf(line, "ok %lf %lf %lf %llu %llu %lf %llu %llu %llu %llu %llu", &ret->parse_s,
               &ret->walk_s, &ret->free_s, &n[0], &n[1], &sum, &n[2], &n[3], &n[4], &n[5],
               &n[6]) != 11)
        fail("%s: unexpected output of %s: \"%s\"", r->name, program, line);
    ret->counts = (struct json_walk_counts){n[0], n[1], sum, n[2], n[3], n[4], n[5], n[6]};
    return ru.ru_maxrss;
}

static int same_counts(const struct json_walk_counts *a, const struct json_walk_counts *b)
{
    /* The sums add the same doubles in the same order: they are equal, not just close. */
    return a->containers == b->containers && a->numbers == b->numbers &&
           a->number_sum == b->number_sum && a->strings == b->strings &&
           a->string_bytes == b->string_bytes && a->processes == b->processes &&
           a->threads == b->threads && a->samples == b->samples;
}

static const char *describe(const struct json_walk_counts *c, char *buf, size_t size)
{
    (void)snprintf(buf, size,
                   "containers %llu numbers %llu (sum %.17g) strings %llu bytes %llu processes "
                   "%llu threads %llu samples %llu",
                   (unsigned long long)c->containers, (unsigned long long)c->numbers, c->number_sum,
                   (unsigned long long)c->strings, (unsigned long long)c->string_bytes,
                   (unsigned long long)c->processes, (unsigned long long)c->threads,
                   (unsigned long long)c->samples);
    return buf;
}

static void measure_file(const char *path, const struct reader *const *readers, size_t n_readers,
                         int runs, int print_metrics)
{
    double total_s[MAX_READERS][MAX_RUNS], parse_s[MAX_READERS][MAX_RUNS];
    double walk_s[MAX_READERS][MAX_RUNS], free_s[MAX_READERS][MAX_RUNS];
    double rss_kib[MAX_READERS][MAX_RUNS], base_kib[MAX_READERS][MAX_RUNS], base[MAX_READERS] = {0};
    struct json_walk_counts first = {0};
    char a[256], b[256];
    struct stat st;
    double mb;

    if (stat(path, &st) < 0)
        fail("%s: %s", path, strerror(errno));
    mb = (double)st.st_size / 1e6;
    for (int run = 0; run < runs; run++) {
        struct measure m;

        for (size_t k = 0; k < n_readers; k++) {
            size_t i = (k + (size_t)run) % n_readers; /* each round in a rotated order */

            base_kib[i][run] = (double)run_measure(readers[i], false, path, &m);
            rss_kib[i][run] = (double)run_measure(readers[i], true, path, &m);
            parse_s[i][run] = m.parse_s;
            walk_s[i][run] = m.walk_s;
            free_s[i][run] = m.free_s;
            total_s[i][run] = m.parse_s + m.walk_s;
            if (run == 0 && k == 0)
                first = m.counts;
            else if (!same_counts(&first, &m.counts))
                fail("%s counts other values than %s in %s (%s against %s): a parser is wrong",
                     readers[i]->name, readers[0]->name, path, describe(&m.counts, a, sizeof(a)),
                     describe(&first, b, sizeof(b)));
        }
    }
    for (size_t i = 0; i < n_readers; i++)
        base[i] = synth_median(base_kib[i], (size_t)runs);
    printf("%s: %.1f MB; %llu processes, %llu threads, %llu samples; %llu containers, %llu "
           "numbers, %llu strings (%.1f MB)\n",
           path, mb, (unsigned long long)first.processes, (unsigned long long)first.threads,
           (unsigned long long)first.samples, (unsigned long long)first.containers,
           (unsigned long long)first.numbers, (unsigned long long)first.strings,
           (double)first.string_bytes / 1e6);
    printf("  reading the file alone: %.1f MiB peak RSS (the baseline); medians of %d runs\n",
           base[0] / 1024, runs);
    printf("  %-15s %8s %8s %8s %9s %10s %8s\n", "reader", "parse s", "walk s", "free s", "MB/s",
           "peak MiB", "x file");
    for (size_t i = 0; i < n_readers; i++) {
        double total = synth_median(total_s[i], (size_t)runs);
        double peak_mib = (synth_median(rss_kib[i], (size_t)runs) - base[i]) / 1024;

        if (!(total > 0))
            fail("%s: no CPU time measured on %s", readers[i]->name, path);
        printf("  %-15s %8.3f %8.3f %8.3f %9.1f %10.1f %8.2f\n", readers[i]->name,
               synth_median(parse_s[i], (size_t)runs), synth_median(walk_s[i], (size_t)runs),
               synth_median(free_s[i], (size_t)runs), mb / total, peak_mib,
               peak_mib * 1048576.0 / (double)st.st_size);
        if (print_metrics) {
            printf("BENCH json_read.%s_MBps %.1f MB/s\n", readers[i]->name, mb / total);
            printf("BENCH json_read.%s_peak_MiB %.1f MiB\n", readers[i]->name, peak_mib);
        }
    }
    (void)fflush(stdout);
}

/* Runs `GEN DIR MB`; returns DIR/fleet.json (malloc'ed), which is also generated_path from
 * the start, so that it is removed at exit even if GEN fails half-way. */
static char *generate(const char *gen, const char *dir, const char *mb)
{
    int status;
    pid_t pid;

    SYNTH_CHECK(asprintf(&generated_path, "%s/fleet.json", dir) > 0);
    (void)fflush(stdout);
    pid = fork();
    SYNTH_CHECK(pid >= 0);
    if (pid == 0) {
        execl(gen, gen, dir, mb, (char *)NULL);
        fprintf(stderr, "bench-json-readers: %s: %s\n", gen, strerror(errno));
        _exit(127);
    }
    SYNTH_CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("%s %s %s failed", gen, dir, mb);
    return generated_path;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench-json-readers -g GEN [-m MB] [-r RUNS] [-l NAME,...]\n"
                    "       bench-json-readers [-r RUNS] [-l NAME,...] FILE...\n"
                    "readers: fleetprof fleetprof_file jansson json_c yajl\n");
    return 2;
}

int main(int argc, char **argv)
{
    const struct reader *readers[MAX_READERS];
    ssize_t self_len;
    const char *gen = NULL, *mb = "100", *only = NULL;
    size_t n_readers = 0;
    int runs = MIN_RUNS, opt;

    while ((opt = getopt(argc, argv, "g:m:r:l:")) != -1) {
        switch (opt) {
        case 'g':
            gen = optarg;
            break;
        case 'm':
            mb = optarg;
            break;
        case 'r':
            runs = atoi(optarg);
            break;
        case 'l':
            only = optarg;
            break;
        default:
            return usage();
        }
    }
    if (runs < MIN_RUNS || runs > MAX_RUNS || (!gen && optind == argc) || atof(mb) <= 0)
        return usage();
    for (size_t i = 0; i < ALL_READERS; i++) {
        const char *name = all_readers[i].name, *hit = only ? strstr(only, name) : NULL;
        size_t len = strlen(name);

        /* A whole item of the comma-separated list. */
        while (hit && !((hit == only || hit[-1] == ',') && (hit[len] == ',' || !hit[len])))
            hit = strstr(hit + 1, name);
        if (!only || hit)
            readers[n_readers++] = &all_readers[i];
    }
    if (n_readers == 0)
        return usage();
    self_len = readlink("/proc/self/exe", self_dir, sizeof(self_dir) - 1);
    SYNTH_CHECK(self_len > 0);
    self_dir[self_len] = '\0';
    *strrchr(self_dir, '/') = '\0';

    if (optind == argc) {
        if (!mkdtemp(generated_dir))
            fail("mkdtemp %s: %s", generated_dir, strerror(errno));
        SYNTH_CHECK(atexit(remove_generated) == 0);
        measure_file(generate(gen, generated_dir, mb), readers, n_readers, runs, 1);
        return 0;
    }
    for (int i = optind; i < argc; i++)
        measure_file(argv[i], readers, n_readers, runs, i == optind);
    return 0;
}
