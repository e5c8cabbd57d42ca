/* tests/bench/bench-gecko.c - speed of prof_gecko_write_process() alone, on synthetic buffers.
 *
 * Two buffers of 8 MiB (256 KiB chunks, the 64-children gather benchmark's settings), filled
 * with deterministic entries (fixed times, no clock, no symbolization through libdw):
 *   markers  700000 text markers "flood" / "m <seq>" (the buffer wraps, ~238k survive) and a
 *            shallow sample every 1000 markers: bench-gather.py part 1's `bench-fleet fill`;
 *   samples  4 threads of 30-deep stacks out of 64 leaves with labels, same-samples, counters
 *            and a fake symbolizer: a busy, sampled process.
 * Each case is measured two ways, with the thread's CPU clock (page faults included):
 *   warm   (gecko.<case>_MBps) written RUNS times in this process and thread (memory writer,
 *          one copy, free): from the second write on, malloc hands back the previous write's
 *          pages, so no page faults; what repeated writes in one long-lived process cost.
 *   fresh  (gecko.<case>_fresh_MBps) RUNS times, each in a forked process on a new thread
 *          (memory writer, finish, free; no copy): what a child's first capture costs. Its
 *          gather thread (child/ipc-module/ipc.c gather_main) is new, so glibc gives it a new arena
 * whose pages were never touched, and the IPC thread sends the writer's chunks without a copy.
 * malloc_trim() between writes in one process comes close (freed pages fault again) but keeps that
 * process's allocator state (the main arena, an mmap threshold raised by earlier frees) and the
 * writer's code pages mapped; a child's first capture has neither. Forking after the fill keeps the
 * buffer in place (its pages are shared, only read) and is not timed. Also prints the writer
 * thread's page faults (gecko.<case>_fresh_faults, median): on this PVM guest each costs ~12 us. MB
 * = 1e6 bytes of JSON per CPU second. With an output directory argument, also writes each profile
 * to DIR/<case>.json, so two builds can be compared byte for byte. Measures, never asserts on time;
 * exits 1 saying why when a figure cannot be measured.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/chunked-buffer.h"
#include "json/writer.h"
#include "profile/entries.h"
#include "profile/gecko.h"
#include "profile/libs.h"
#include "tests/bench/synth-profile.h"

#define RUNS       11
#define BUFFER_MIB 8
#define START_NS   1000000000ull
#define CHECK      SYNTH_CHECK

static char exe_path[] = "/bench/program", exe_name[] = "program";
static char lib_path[] = "/bench/libbench.so", lib_name[] = "libbench.so";
static struct prof_lib libs_array[] = {
        {.start = 0x400000, .end = 0x500000, .bias = 0x400000, .path = exe_path, .name = exe_name},
        {.start = 0x7f0000000000,
         .end = 0x7f0000100000,
         .bias = 0x7f0000000000,
         .path = lib_path,
         .name = lib_name},
};
static const struct prof_libs libs = {libs_array, 2};

/* Both modules: "bench_function_<n>(int, char const*)" by 16-byte steps, none for every
 * 17th address, line vaddr % 1000 of bench.c. */
static char function_names[64][48];
static const char *function_table[64];
static const struct synth_module_names module_names[2] = {
        {function_table, 64, 4, 17, "bench.c"},
        {function_table, 64, 4, 17, "bench.c"},
};
static const struct synth_symbols symbols = {&libs, module_names};

static void fill_markers(struct buf_chunked_buffer *b)
{
    uint64_t t = START_NS + 1000000;
    char text[32];

    for (long seq = 0; seq < 700000; seq++) {
        struct prof_marker m = {.tid = 100, .category = 7, .phase = PROF_PHASE_INSTANT};

        t += 170 + (uint64_t)(seq % 7) * 61;
        m.start_ns = t;
        m.name = (struct prof_string){"flood", 5};
        m.payload_kind = PROF_PAYLOAD_TEXT;
        m.text.len = (size_t)snprintf(text, sizeof(text), "m %ld", seq);
        m.text.data = text;
        CHECK(prof_entry_put_marker(b, &m) == 0);
        if (seq % 1000 == 999) {
            uint64_t frames[6] = {0x400100 + (uint64_t)(seq % 5) * 16,
                                  0x400200,
                                  0x400300,
                                  0x7f0000000400,
                                  0x7f0000000500,
                                  0x400010};
            struct prof_sample s = {.tid = 100,
                                    .time_ns = t,
                                    .cpu_delta_ns = 600000 + (uint64_t)seq % 1000,
                                    .frame_count = 6,
                                    .frames = frames};

            CHECK(prof_entry_put_sample(b, &s) == 0);
        }
    }
}

static void fill_samples(struct buf_chunked_buffer *b)
{
    uint64_t t = START_NS + 1000000;
    uint64_t frames[32];
    struct prof_label labels[2] = {
            {.name = {"Startup::Work", 13}, .category = 7, .native_depth = 3},
            {.name = {"inner", 5}, .category = 3, .native_depth = 0},
    };

    for (uint32_t i = 0; i < 200000; i++) {
        int32_t tid = 100 + (int32_t)(i % 4);
        uint32_t leaf = (i * 2654435761u) >> 26; /* 0..63 */

        t += 250;
        if (i % 5 == 4) {
            CHECK(prof_entry_put_same_sample(b, tid, t) == 0);
        } else {
            struct prof_sample s = {.tid = tid,
                                    .time_ns = t,
                                    .cpu_delta_ns = 999000 + i % 2000,
                                    .frame_count = 30,
                                    .frames = frames,
                                    .label_count = i / 256 % 3 == 0 ? 2 : 0,
                                    .labels = labels};

            frames[0] = (leaf % 2 ? 0x7f0000001000 : 0x401000) + leaf * 64;
            for (uint32_t d = 1; d < 30; d++)
                frames[d] = 0x402000 + (d % 10) * 0x100 + (d < 4 ? leaf % 4 : 0) * 8;
            CHECK(prof_entry_put_sample(b, &s) == 0);
        }
        if (i % 100 == 0) {
            struct prof_counter_sample c = {0, t, (int64_t)(i % 7) * 4096 - 8192, 3};

            CHECK(prof_entry_put_counter(b, &c) == 0);
        }
        if (i % 50 == 0) {
            struct prof_marker m = {.tid = tid,
                                    .category = 2,
                                    .phase = PROF_PHASE_INTERVAL,
                                    .start_ns = t - 100000,
                                    .end_ns = t,
                                    .name = {"Step", 4}};

            CHECK(prof_entry_put_marker(b, &m) == 0);
        }
    }
}

/* What one fresh write measured, sent from the forked process through a pipe. */
struct fresh_result {
    double cpu_s; /* the writer thread's CPU time */
    long faults;  /* its minor + major page faults */
    size_t bytes; /* JSON written */
    int error;    /* 0, or the negative errno of the step that failed */
};

struct fresh_write {
    const struct prof_process_info *info;
    struct buf_chunked_buffer *buffer;
    const struct prof_symbolizer *symbolizer;
    struct fresh_result result;
};

static long thread_faults(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_THREAD, &ru) < 0)
        return -1;
    return ru.ru_minflt + ru.ru_majflt;
}

/* The child's gather thread: a memory writer, the profile, finish; then the writer is freed
 * (the IPC thread frees it once sent: the same process's CPU). */
static void *fresh_main(void *arg)
{
    struct fresh_write *f = arg;
    struct json_writer *w = NULL;
    long faults = thread_faults();
    double t0 = synth_thread_cpu_s();
    int r = json_writer_new_memory(&w);

    if (r == 0)
        r = prof_gecko_write_process(w, NULL, f->info, f->buffer, f->symbolizer, NULL);
    if (r == 0)
        r = json_writer_finish(w);
    f->result.bytes = r == 0 ? json_writer_length(w) : 0;
    (void)json_writer_free(w);
    f->result.cpu_s = synth_thread_cpu_s() - t0;
    f->result.faults = thread_faults() - faults;
    f->result.error = faults < 0 ? -EINVAL : r;
    return NULL;
}

/* Reads one byte of every block. */
static int touch_block(struct buf_entry_reader *reader, uint64_t index, void *userdata)
{
    unsigned *sum = userdata;

    (void)index;
    for (int i = 0; i < 2; i++)
        for (size_t j = 0; j < reader->len[i]; j += 64)
            *sum += reader->span[i][j];
    return 0;
}

/* One write in a forked process, on a new thread. Exits 1 with the reason if it fails. */
static struct fresh_result fresh_run(const struct prof_process_info *info,
                                     struct buf_chunked_buffer *buffer,
                                     const struct prof_symbolizer *symbolizer)
{
    struct fresh_write f = {info, buffer, symbolizer, {0, 0, 0, -EIO}};
    int fds[2], status;
    pid_t pid;

    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        pthread_t thread;
        unsigned sum = 0;
        ssize_t n;

        (void)close(fds[0]);
        /* A child's sampler wrote its buffer in the child's own address space. Here, on this
         * PVM guest, a new address space's first access to each page costs ~7 us in the
         * hypervisor (no guest fault), half of a fresh samples write: read it once, untimed. */
        (void)buf_chunked_buffer_read_each(buffer, touch_block, &sum);
        if (pthread_create(&thread, NULL, fresh_main, &f) == 0)
            (void)pthread_join(thread, NULL);
        n = write(fds[1], &f.result, sizeof(f.result));
        _exit(n == (ssize_t)sizeof(f.result) ? 0 : 1);
    }
    (void)close(fds[1]);
    CHECK(read(fds[0], &f.result, sizeof(f.result)) == (ssize_t)sizeof(f.result));
    (void)close(fds[0]);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (f.result.error)
        fprintf(stderr, "bench-gecko: fresh write: %s\n", strerror(-f.result.error));
    CHECK(f.result.error == 0);
    return f.result;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;

    return (x > y) - (x < y);
}

static void run_case(const char *name, void (*fill)(struct buf_chunked_buffer *),
                     const char *out_dir)
{
    static const struct prof_thread_info threads[] = {
            {100, "main", START_NS, 0, true},
            {101, "worker 1", START_NS + 5000, 0, false},
            {102, "worker 2", START_NS + 6000, 0, false},
            {103, "worker 3", START_NS + 7000, 0, false},
    };
    static const struct prof_counter_info counters[] = {{0, "malloc", "Memory", "bytes"}};
    struct prof_symbolizer symbolizer = {synth_resolve, (void *)&symbols};
    struct prof_process_info info = {
            .pid = 100,
            .ppid = 1,
            .name = "bench",
            .product = "bench-gecko",
            .process_type = "tab",
            .start_ns = START_NS,
            .start_epoch_ms = 1.7e12,
            .interval_ns = 1000000,
            .stackwalk = "dwarf",
            .threads = threads,
            .thread_count = 4,
            .counters = counters,
            .counter_count = 1,
            .libs = &libs,
    };
    struct buf_chunk_manager *manager = NULL;
    struct buf_chunked_buffer *buffer = NULL;
    double times[RUNS], median, fresh_times[RUNS], fresh_median;
    long fresh_faults[RUNS];
    size_t bytes = 0, fresh_bytes = 0;

    synth_buffer_new((uint64_t)BUFFER_MIB << 20, info.pid, &manager, &buffer);
    fill(buffer);
    /* Fresh first: the forked processes then start from the state the fill left, not from
     * the warm writes' (which raise glibc's mmap threshold with their big copies). */
    for (int run = 0; run < RUNS; run++) {
        struct fresh_result r = fresh_run(&info, buffer, &symbolizer);

        fresh_times[run] = r.cpu_s;
        fresh_faults[run] = r.faults;
        CHECK(run == 0 || r.bytes == fresh_bytes); /* deterministic */
        fresh_bytes = r.bytes;
    }
    for (int run = 0; run < RUNS; run++) {
        char *json = NULL;
        double t0 = synth_thread_cpu_s();

        synth_write_profile(&info, buffer, &symbolizer, &json, &bytes);
        times[run] = synth_thread_cpu_s() - t0;
        if (run == 0 && out_dir) {
            char path[4096];

            (void)snprintf(path, sizeof(path), "%s/%s.json", out_dir, name);
            synth_write_file(path, json, bytes);
        }
        free(json);
    }
    CHECK(fresh_bytes == bytes);        /* both ways wrote the same profile */
    median = synth_median(times, RUNS); /* sorts: times[0] is the best */
    fresh_median = synth_median(fresh_times, RUNS);
    qsort(fresh_faults, RUNS, sizeof(fresh_faults[0]), cmp_long);
    CHECK(times[0] > 0 && fresh_times[0] > 0); /* a rate needs CPU time measured: never an inf */
    printf("%-8s %-5s %10.1f MB %8.1f ms median %8.1f ms best\n", name, "warm", (double)bytes / 1e6,
           median * 1e3, times[0] * 1e3);
    printf("%-8s %-5s %10.1f MB %8.1f ms median %8.1f ms best %8ld page faults median\n", name,
           "fresh", (double)bytes / 1e6, fresh_median * 1e3, fresh_times[0] * 1e3,
           fresh_faults[RUNS / 2]);
    printf("BENCH gecko.%s_MBps %.1f MB/s\n", name, (double)bytes / 1e6 / median);
    printf("BENCH gecko.%s_fresh_MBps %.1f MB/s\n", name, (double)bytes / 1e6 / fresh_median);
    printf("BENCH gecko.%s_fresh_faults %ld faults\n", name, fresh_faults[RUNS / 2]);
    synth_buffer_free(manager, buffer);
}

int main(int argc, char **argv)
{
    const char *out_dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    const char *only = argc > 2 ? argv[2] : NULL;

    for (size_t i = 0; i < 64; i++) {
        (void)snprintf(function_names[i], sizeof(function_names[i]),
                       "bench_function_%zu(int, char const*)", i);
        function_table[i] = function_names[i];
    }

    if (!only || !strcmp(only, "markers"))
        run_case("markers", fill_markers, out_dir);
    if (!only || !strcmp(only, "samples"))
        run_case("samples", fill_samples, out_dir);
    return 0;
}
