/* tools/export-pprof.h - a Gecko profile as pprof: google/pprof's perftools.profiles.Profile
 * (proto/profile.proto), gzipped, for `go tool pprof`, Pyroscope/Grafana and other pprof
 * readers. Used by `fleetprof export --format pprof` and by `record`/`capture --pprof`.
 *
 * What is written: sample types samples/count and cpu/nanoseconds (default cpu), period
 * cpu/nanoseconds of meta.interval; one Sample per distinct (process, thread, stack) with
 * values [samples, CPU ns (threadCPUDelta)] and labels pid, tid (numbers), process, thread
 * (strings); a Location per (mapping, function, line); a Function per name ("name (in lib)"
 * frames: the name, the library goes to the Mapping); a Mapping per entry of each process's
 * libs. Samples without a stack are under one pseudo-location, "(no stack)", and those whose
 * stack is not in the thread's tables under "(invalid stack)", so totals equal the profile's.
 * The stacks are read with tools/profile-stacks.h.
 */
#ifndef FLEETPROF_TOOLS_EXPORT_PPROF_H
#define FLEETPROF_TOOLS_EXPORT_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_doc;

struct pprof_result {
    size_t processes;     /* process profiles exported */
    size_t files;         /* files written */
    uint64_t samples;     /* samples exported (every sample of every thread) */
    uint64_t bad_samples; /* of those, samples whose stack was invalid ("(invalid stack)") */
    uint64_t bytes;       /* gzipped bytes in the files (0 for standard output) */
};

/* Which sample type a viewer shows first (the profile's default_sample_type): both are
 * always in every sample. */
enum pprof_weight {
    PPROF_WEIGHT_CPU,     /* cpu/nanoseconds: where the CPU went (idle weighs nothing) */
    PPROF_WEIGHT_SAMPLES, /* samples/count: every sample, waiting ones included */
};

/* Writes doc as pprof, weight its default sample type. Without split: one profile for the whole
 * file into out_path (NULL or
 * "-": standard output), which is replaced atomically (written to a temporary file beside it,
 * then renamed). With split: out_path is a directory, created if missing, and each process
 * gets its own DIR/<pid>.pb.gz (a pid seen again in the same file: <pid>.2.pb.gz, ...).
 * Returns 0 and fills *ret; or a negative errno (-ENOMEM, the I/O error) with one line in why
 * (why_size bytes, NUL-terminated) that names the file; then no file is left half-written. */
int pprof_export(const struct json_doc *doc, const char *out_path, bool split,
                 enum pprof_weight weight, struct pprof_result *ret, char *why, size_t why_size);

/* Loads the profile json_path and writes it as one pprof file out_path (record and capture's
 * --pprof). Errors as pprof_export(), plus those of reading json_path. */
int pprof_export_file(const char *json_path, const char *out_path, struct pprof_result *ret,
                      char *why, size_t why_size);

#endif /* FLEETPROF_TOOLS_EXPORT_PPROF_H */
