/* profile/runtime-log.h - profilingLog[pid].runtime: the runtime's own counters, as one
 * JSON object, written by the one function both writers of an exit profile use: the runtime
 * (child/lifecycle/runtime.c) and the daemon when it builds a short-lived child's exit profile from
 * the child's chunk region (daemon/recover.c), from the numbers the child left in its description.
 * libc only; no state.
 */
#ifndef FLEETPROF_PROFILE_RUNTIME_LOG_H
#define FLEETPROF_PROFILE_RUNTIME_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct prof_runtime_log {
    uint64_t pushed_blocks, cleared_blocks; /* the buffer's, since it was made */
    uint64_t failed_puts, failed_bytes;     /* entries the buffer refused, and their bytes */
    uint64_t unsafe_samples_in_loader;      /* samples taken without a stack (loader lock) */
    uint64_t descriptors_taken;             /* runtime descriptors the program took */
    uint64_t interval_ns;
    uint64_t symbol_modules_loaded, symbol_modules_names_only; /* resolved by this writer */
    uint64_t symbol_service_batches, symbol_service_failures;  /* by the daemon's service */
    uint64_t symbol_service_addresses, symbol_service_unresolved;
    uint64_t symbol_module_errors;
    uint64_t symbolize_us;        /* time spent symbolizing */
    const char *symbol_error;     /* first error, NULL or "" = none; borrowed */
    const char *sampling_stopped; /* why sampling stopped early, NULL or "" = it did not */
    uint64_t sampling_stopped_at_us;
    uint64_t handler_captures, handler_p50_ns, handler_p99_ns; /* the signal handler's cost */
    uint64_t descriptor_checks, descriptor_checks_skipped;     /* the sampler's 10 ms checks */
    bool built_from_region;       /* written by the daemon from the child's chunk region */
    const char *daemon_untrusted; /* why the daemon was not used, NULL or "" = it was, or none */
    /* What the runtime gave up when the program ran out of descriptors, NULL or "" = none. */
    const char *descriptors_given_up;
    /* What it gave up when the program reached its process limit, NULL or "" = none. */
    const char *threads_given_up;
    /* What makes the samples: the timer kind ("perf-task-clock", "thread-cpu-timer",
     * "tick", "none"), why, the first failure to arm one (NULL or "" = none), threads by
     * kind, captures dropped by a full ring (their CPU went to the next). */
    const char *sampling_timer, *sampling_timer_why, *timer_failure;
    uint64_t threads_perf_timer, threads_thread_timer, threads_tick, threads_no_timer;
    uint64_t captures_dropped;
};

/* Formats l as a JSON object into out (NUL-terminated, cut at size: size must hold at least
 * 2300 bytes for every field to fit, 2800 with daemon_untrusted, 3100 with
 * descriptors_given_up too, 3400 with threads_given_up). Strings are copied without the
 * characters a JSON string would need escaped, so that text from another process cannot break the
 * object. */
void prof_runtime_log_format(char *out, size_t size, const struct prof_runtime_log *l);

#endif /* FLEETPROF_PROFILE_RUNTIME_LOG_H */
