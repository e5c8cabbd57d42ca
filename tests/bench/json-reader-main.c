/* tests/bench/json-reader-main.c - one JSON library as a program, for bench-json-readers.c.
 *
 *   json-reader-<library> READER parse FILE   reads FILE into one NUL-terminated buffer
 *                                             (unless READER reads files itself), parses it,
 *                                             walks the tree, frees it
 *   json-reader-<library> READER read FILE    only reads FILE the same way: the baseline of
 *                                             the peak memory, in the same program image
 *
 * Prints one line: "ok PARSE_S WALK_S FREE_S" (CPU seconds of the process) followed by the
 * walk's counts in the order of struct json_walk_counts (json-readers.h), or "error: REASON"
 * and exits 1. The caller reads its peak
 * RSS from wait4().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/bench/json-readers.h"

static double process_cpu_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The whole file in one malloc'ed buffer, NUL-terminated (yajl needs it); NULL on error. */
static char *read_whole(const char *path, size_t *ret_len)
{
    struct stat st;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = fopen(path, "rb");

    if (!f)
        return NULL;
    if (fstat(fileno(f), &st) == 0)
        buf = malloc((size_t)st.st_size + 1);
    while (buf && len < (size_t)st.st_size) {
        size_t n = fread(buf + len, 1, (size_t)st.st_size - len, f);

        if (n == 0)
            break;
        len += n;
    }
    (void)fclose(f);
    if (!buf || len != (size_t)st.st_size) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *ret_len = len;
    return buf;
}

int main(int argc, char **argv)
{
    const struct json_bench_reader *r = NULL;
    struct json_walk_counts c = {0};
    double t0, t1, t2, t3;
    char *text = NULL, err[256] = "";
    size_t len = 0;
    void *tree;

    for (size_t i = 0; argc == 4 && i < json_bench_reader_count; i++)
        if (!strcmp(json_bench_readers[i]->name, argv[1]))
            r = json_bench_readers[i];
    if (!r || (strcmp(argv[2], "parse") && strcmp(argv[2], "read"))) {
        fprintf(stderr, "usage: %s READER parse|read FILE\n", argv[0]);
        return 2;
    }
    if (!r->reads_file || !strcmp(argv[2], "read")) {
        text = read_whole(argv[3], &len);
        if (!text) {
            printf("error: cannot read %s: %s\n", argv[3], strerror(errno));
            return 1;
        }
    }
    if (!strcmp(argv[2], "read")) {
        printf("ok 0 0 0 0 0 0 0 0 0 0 0\n");
        return 0;
    }
    t0 = process_cpu_s();
    tree = r->parse(argv[3], text, len, err, sizeof(err));
    t1 = process_cpu_s();
    if (!tree) {
        printf("error: %s\n", err);
        return 1;
    }
    r->walk(tree, &c);
    t2 = process_cpu_s();
    r->free(tree);
    t3 = process_cpu_s();
    printf("ok %.6f %.6f %.6f %llu %llu %.17g %llu %llu %llu %llu %llu\n", t1 - t0, t2 - t1,
           t3 - t2, (unsigned long long)c.containers, (unsigned long long)c.numbers, c.number_sum,
           (unsigned long long)c.strings, (unsigned long long)c.string_bytes,
           (unsigned long long)c.processes, (unsigned long long)c.threads,
           (unsigned long long)c.samples);
    free(text);
    return 0;
}
