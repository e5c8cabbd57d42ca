/* tests/bench/synth-profile.h - what the benchmarks that build synthetic profiles share.
 *
 * A synthetic process profile is a chunked buffer filled with deterministic entries and
 * written with the real writer (prof_gecko_write_process) through a fake symbolizer that
 * names addresses from tables, with no libdw and no files. bench-gecko.c times the writer on
 * such buffers; gen-big-fleet.c writes a whole fleet of them; bench-json-readers.c uses the
 * timing helpers. Failures are programmer errors or a full disk: SYNTH_CHECK prints the
 * expression and exits 1.
 */
#ifndef FLEETPROF_TESTS_BENCH_SYNTH_PROFILE_H
#define FLEETPROF_TESTS_BENCH_SYNTH_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "profile/gecko.h"

struct buf_chunk_manager;
struct buf_chunked_buffer;
struct prof_libs;

#define SYNTH_CHECK(x)                                  \
    do {                                                \
        if (!(x))                                       \
            synth_check_failed(__FILE__, __LINE__, #x); \
    } while (0)

/* Prints "<program>: file:line: check failed: expr" to stderr and exits 1. */
_Noreturn void synth_check_failed(const char *file, int line, const char *expr);

/* CPU seconds of the calling thread (CLOCK_THREAD_CPUTIME_ID). */
double synth_thread_cpu_s(void);

/* Sorts the n values (n > 0) and returns their median (the upper one for even n). */
double synth_median(double *values, size_t n);

/* How the fake symbolizer names the addresses of one module: the function of ELF address
 * vaddr is functions[(vaddr >> stride_shift) % function_count], or none (the writer then
 * prints "<module>+0x<offset>") when unresolved_every is not 0 and divides vaddr. With a
 * file, the frame gets it and line vaddr % 1000; without, no source line. */
struct synth_module_names {
    const char *const *functions; /* borrowed; function_count names */
    size_t function_count;
    unsigned stride_shift;
    uint64_t unresolved_every;
    const char *file; /* borrowed; may be NULL */
};

/* The fake symbolizer's table: names[i] describes libs->libs[i]. Both borrowed. */
struct synth_symbols {
    const struct prof_libs *libs;
    const struct synth_module_names *names;
};

/* A prof_symbolizer resolve callback; userdata is a struct synth_symbols. Requests for a
 * module outside the table stay unresolved. Never fails. */
int synth_resolve(void *userdata, const struct prof_frame_request *requests, size_t count,
                  struct prof_frame_result *results);

/* A local-limit chunk manager of limit_bytes (256 KiB chunks) and a chunked buffer on it
 * for pid. Free both with synth_buffer_free(). */
void synth_buffer_new(uint64_t limit_bytes, int32_t pid, struct buf_chunk_manager **ret_manager,
                      struct buf_chunked_buffer **ret_buffer);
void synth_buffer_free(struct buf_chunk_manager *manager, struct buf_chunked_buffer *buffer);

/* Writes the buffer's process profile as the child's gather thread does (a memory writer,
 * then one copy): *ret_json is a NUL-terminated string the caller frees, *ret_len its
 * length. */
void synth_write_profile(const struct prof_process_info *info, struct buf_chunked_buffer *buffer,
                         const struct prof_symbolizer *symbolizer, char **ret_json,
                         size_t *ret_len);

/* Writes len bytes of data to path (created or truncated). */
void synth_write_file(const char *path, const char *data, size_t len);

#endif /* FLEETPROF_TESTS_BENCH_SYNTH_PROFILE_H */
