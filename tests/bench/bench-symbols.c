/* Benchmark of symbolization (profile/symbols.h): the cost of the first resolution in
 * a module, names only and with file:line, for three modules of different sizes (this
 * program, libc with its /usr/lib/debug file when installed, libdw), and the cost of a
 * cache hit. Each first resolution uses a fresh cache; the median of several runs is
 * reported (warm page cache: a cold one adds the disk reads); then the cost of a new address
 * in a module already loaded (libc), and of resolving 4 libc functions with file:line wanted,
 * under the cost rule (symbols.h: libc's compressed DWARF over the limit, names only) and
 * without a limit. With the rule, a module whose DWARF is refused costs the same for
 * names and "lines". Prints a table and
 * `BENCH <metric> <value> <unit>` lines, where first_module_*_ms is the mean over the three
 * modules and in_process_cache_hit_us a hit in this process's own resolver (the daemon's
 * symbol service over its socket is symbols.service_cache_hit_*, bench-symbols-service.py).
 * Measures, never asserts: the machine is shared and noisy. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <elfutils/libdwfl.h>

#include "profile/libs.h"
#include "profile/symbols.h"

#define RUNS   7
#define HITS   2000000
#define MISSES 2000

static volatile int sink;

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

__attribute__((noinline)) static void bench_target(void)
{
    sink++;
}

/* Returns the median time in ms of one first resolution of addr in a fresh cache. */
static double first_resolution_ms(const struct prof_libs *libs, uint64_t addr, bool names_only,
                                  size_t *ret_memory_bytes)
{
    struct prof_symbols_options opts = {.names_only = names_only};
    double t[RUNS];

    for (int run = 0; run < RUNS; run++) {
        struct prof_symbols *s = NULL;
        struct prof_symbol sym = {0};
        struct prof_symbols_stats st;
        double t0;
        int r;

        if (prof_symbols_new_with_options(&opts, &s) < 0) {
            fprintf(stderr, "bench-symbols: out of memory\n");
            exit(1);
        }
        t0 = now_s();
        r = prof_symbols_resolve_address(s, libs, addr, false, &sym, NULL);
        t[run] = (now_s() - t0) * 1e3;
        if (r < 0) {
            fprintf(stderr, "bench-symbols: 0x%" PRIx64 ": %s\n", addr,
                    prof_symbols_get_last_error(s));
            exit(1);
        }
        prof_symbols_get_stats(s, &st);
        *ret_memory_bytes = st.memory_bytes;
        prof_symbols_free(s);
    }
    return median(t, RUNS);
}

/* The median time in ms to resolve a few libc functions with file:line requested, in a fresh
 * cache each run (what a recording's daemon, or a child alone, pays for libc); stores how
 * many of them got a file:line in *ret_with_lines. */
static double libc_few_ms(const struct prof_libs *libs, const struct prof_symbols_options *opts,
                          int *ret_with_lines)
{
    const uintptr_t addrs[] = {(uintptr_t)&qsort, (uintptr_t)&getpid, (uintptr_t)&malloc,
                               (uintptr_t)&fprintf};
    const size_t n = sizeof(addrs) / sizeof(addrs[0]);
    double t[RUNS];

    for (int run = 0; run < RUNS; run++) {
        struct prof_symbols *s = NULL;
        int with_lines = 0;
        double t0;

        if (prof_symbols_new_with_options(opts, &s) < 0)
            exit(1);
        t0 = now_s();
        for (size_t i = 0; i < n; i++) {
            struct prof_symbol sym;

            if (prof_symbols_resolve_address(s, libs, addrs[i], false, &sym, NULL) == 0 && sym.file)
                with_lines++;
        }
        t[run] = (now_s() - t0) * 1e3;
        *ret_with_lines = with_lines;
        prof_symbols_free(s);
    }
    return median(t, RUNS);
}

int main(void)
{
    struct {
        const char *label;
        uint64_t addr;
        double names_ms, lines_ms;
        size_t names_bytes, lines_bytes;
    } mods[] = {
            {"program (bench-symbols)", (uintptr_t)&bench_target, 0, 0, 0, 0},
            {"libc.so.6 (qsort)", (uintptr_t)&qsort, 0, 0, 0, 0},
            {"libdw.so.1 (dwfl_begin)", (uintptr_t)&dwfl_begin, 0, 0, 0, 0},
    };
    const size_t n = sizeof(mods) / sizeof(mods[0]);
    struct prof_libs libs = {0};
    struct prof_symbols *s = NULL;
    struct prof_symbol sym;
    double names_mean = 0, lines_mean = 0, hit_us[RUNS], miss_us[2], libc_ms, libc_all_ms;
    struct prof_symbols_options lines_opts = {0},
                                no_limit = {.max_compressed_dwarf_bytes = SIZE_MAX};
    int libc_lines, libc_all_lines;

    if (prof_libs_collect_self(&libs) < 0 || prof_symbols_new(0, &s) < 0) {
        fprintf(stderr, "bench-symbols: setup failed\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        mods[i].names_ms = first_resolution_ms(&libs, mods[i].addr, true, &mods[i].names_bytes);
        mods[i].lines_ms = first_resolution_ms(&libs, mods[i].addr, false, &mods[i].lines_bytes);
        names_mean += mods[i].names_ms / (double)n;
        lines_mean += mods[i].lines_ms / (double)n;
    }

    libc_ms = libc_few_ms(&libs, &lines_opts, &libc_lines);
    libc_all_ms = libc_few_ms(&libs, &no_limit, &libc_all_lines);

    /* Misses in a loaded module: new addresses spread over libc's code. */
    for (int mode = 0; mode < 2; mode++) {
        /* Lines without the cost limit: libc's would be refused (names only). */
        struct prof_symbols_options opts = {.names_only = mode == 0,
                                            .max_compressed_dwarf_bytes = SIZE_MAX};
        const struct prof_lib *libc = prof_libs_lookup(&libs, (uintptr_t)&qsort);
        struct prof_symbols *ms = NULL;
        uint64_t step = libc ? (libc->end - libc->start) / MISSES : 0;
        double t0;

        if (!libc || prof_symbols_new_with_options(&opts, &ms) < 0) {
            fprintf(stderr, "bench-symbols: %s\n",
                    libc ? "out of memory" : "libc not found among the loaded modules");
            return 1;
        }
        (void)prof_symbols_resolve_address(ms, &libs, (uintptr_t)&qsort, false, &sym, NULL);
        t0 = now_s();
        for (uint64_t k = 0; k < MISSES; k++)
            (void)prof_symbols_resolve_address(ms, &libs, libc->start + k * step + 1, false, &sym,
                                               NULL);
        miss_us[mode] = (now_s() - t0) * 1e6 / MISSES;
        prof_symbols_free(ms);
    }

    /* Cache hits through the whole path callers use: module lookup, then the per-address
     * table. */
    for (size_t i = 0; i < n; i++)
        (void)prof_symbols_resolve_address(s, &libs, mods[i].addr, false, &sym, NULL);
    for (int run = 0; run < RUNS; run++) {
        double t0 = now_s();

        for (int k = 0; k < HITS; k++)
            (void)prof_symbols_resolve_address(s, &libs, mods[k % n].addr, false, &sym, NULL);
        hit_us[run] = (now_s() - t0) * 1e6 / HITS;
    }

    printf("%-28s %14s %14s %12s %12s\n", "first resolution in module", "names (ms)",
           "file:line (ms)", "names (MiB)", "lines (MiB)");
    for (size_t i = 0; i < n; i++)
        printf("%-28s %14.2f %14.2f %12.1f %12.1f\n", mods[i].label, mods[i].names_ms,
               mods[i].lines_ms, (double)mods[i].names_bytes / (1 << 20),
               (double)mods[i].lines_bytes / (1 << 20));
    printf("%-28s %14.2f %14.2f\n", "mean", names_mean, lines_mean);
    printf("%-28s %14.1f %14.1f us per new address in libc (%d addresses)\n",
           "miss in a loaded module", miss_us[0], miss_us[1], MISSES);
    printf("%-28s %14.3f us (median of %d x %d resolves)\n", "cache hit", median(hit_us, RUNS),
           RUNS, HITS);
    printf("%-28s %14.2f ms, %d of 4 with file:line (cost rule, default limit)\n",
           "libc: 4 functions, lines on", libc_ms, libc_lines);
    printf("%-28s %14.2f ms, %d of 4 with file:line (no limit)\n", "", libc_all_ms, libc_all_lines);
    printf("BENCH symbols.first_module_names_ms %.2f ms\n", names_mean);
    printf("BENCH symbols.first_module_lines_ms %.2f ms\n", lines_mean);
    printf("BENCH symbols.in_process_cache_hit_us %.3f us\n", median(hit_us, RUNS));
    printf("BENCH symbols.miss_names_us %.1f us\n", miss_us[0]);
    printf("BENCH symbols.miss_lines_us %.1f us\n", miss_us[1]);
    printf("BENCH symbols.libc_4_functions_lines_ms %.2f ms\n", libc_ms);
    printf("BENCH symbols.libc_4_functions_lines_no_limit_ms %.2f ms\n", libc_all_ms);
    for (size_t i = 0; i < n; i++) {
        char name[32];

        (void)snprintf(name, sizeof(name), "%.*s", (int)strcspn(mods[i].label, " ."),
                       mods[i].label);
        printf("BENCH symbols.first_module_names_ms.%s %.2f ms\n", name, mods[i].names_ms);
        printf("BENCH symbols.first_module_lines_ms.%s %.2f ms\n", name, mods[i].lines_ms);
    }

    prof_symbols_free(s);
    prof_libs_done(&libs);
    return 0;
}
