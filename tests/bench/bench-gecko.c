/* tests/bench/bench-gecko.c - speed of prof_gecko_write_process() alone, on synthetic buffers.
 *
 * Two buffers of 8 MiB (256 KiB chunks, the 64-children gather benchmark's settings), filled
 * with deterministic entries (fixed times, no clock, no symbolization through libdw):
 *   markers  700000 text markers "flood" / "m <seq>" (the buffer wraps, ~238k survive) and a
 *            shallow sample every 1000 markers: bench-gather.py part 1's `bench-fleet fill`;
 *   samples  4 threads of 30-deep stacks out of 64 leaves with labels, same-samples, counters
 *            and a fake symbolizer: a busy, sampled process.
 * Each is written RUNS times as the child's gather thread does (memory writer, then one
 * copy), timed with the thread's CPU clock. Prints `BENCH gecko.<case>_MBps` (MB = 1e6 bytes
 * of JSON per CPU second). With an output directory argument, also writes each profile to
 * DIR/<case>.json, so two builds can be compared byte for byte. Measures, never asserts on
 * time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunked-buffer.h"
#include "child/profile/entries.h"
#include "child/profile/gecko.h"
#include "child/profile/libs.h"
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
    double times[RUNS], median;
    size_t bytes = 0;

    synth_buffer_new((uint64_t)BUFFER_MIB << 20, info.pid, &manager, &buffer);
    fill(buffer);
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
    median = synth_median(times, RUNS); /* sorts: times[0] is the best */
    CHECK(times[0] > 0);                /* a rate needs CPU time measured: never an inf */
    printf("%-8s %10.1f MB %8.1f ms median %8.1f ms best\n", name, (double)bytes / 1e6,
           median * 1e3, times[0] * 1e3);
    printf("BENCH gecko.%s_MBps %.1f MB/s\n", name, (double)bytes / 1e6 / median);
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
