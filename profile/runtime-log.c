/* profile/runtime-log.c - profilingLog[pid].runtime, see runtime-log.h. */
#include "profile/runtime-log.h"

#include <inttypes.h>
#include <stdio.h>

/* Copies s without control characters, quotes and backslashes: a JSON string body. */
static void json_safe(char *out, size_t size, const char *s)
{
    size_t o = 0;

    for (const char *p = s ? s : ""; *p && o < size - 1; p++)
        if ((unsigned char)*p >= 0x20 && *p != '"' && *p != '\\')
            out[o++] = *p;
    out[o] = '\0';
}

void prof_runtime_log_format(char *out, size_t size, const struct prof_runtime_log *l)
{
    char error[300], stopped[64], untrusted_text[512], untrusted[sizeof(untrusted_text) + 24] = "";
    char given_text[256], given[sizeof(given_text) + 32] = "";
    char threads_text[256], threads[sizeof(threads_text) + 32] = "";
    char timer[200], timer_why[300], timer_failure[300];

    json_safe(error, sizeof(error), l->symbol_error);
    json_safe(stopped, sizeof(stopped), l->sampling_stopped);
    if (l->daemon_untrusted && *l->daemon_untrusted) {
        json_safe(untrusted_text, sizeof(untrusted_text), l->daemon_untrusted);
        (void)snprintf(untrusted, sizeof(untrusted), ",\"daemonUntrusted\":\"%s\"", untrusted_text);
    }
    if (l->descriptors_given_up && *l->descriptors_given_up) {
        json_safe(given_text, sizeof(given_text), l->descriptors_given_up);
        (void)snprintf(given, sizeof(given), ",\"descriptorsGivenUp\":\"%s\"", given_text);
    }
    if (l->threads_given_up && *l->threads_given_up) {
        json_safe(threads_text, sizeof(threads_text), l->threads_given_up);
        (void)snprintf(threads, sizeof(threads), ",\"threadsGivenUp\":\"%s\"", threads_text);
    }
    json_safe(timer, sizeof(timer), l->sampling_timer);
    json_safe(timer_why, sizeof(timer_why), l->sampling_timer_why);
    json_safe(timer_failure, sizeof(timer_failure), l->timer_failure);
    (void)snprintf(
            out, size,
            "{\"pushedBlocks\":%" PRIu64 ",\"clearedBlocks\":%" PRIu64 ",\"failedPuts\":%" PRIu64
            ",\"failedBytes\":%" PRIu64 ",\"unsafeSamplesInLoader\":%" PRIu64
            ",\"descriptorsTaken\":%" PRIu64 ",\"intervalNs\":%" PRIu64
            ",\"symbolModulesLoaded\":%" PRIu64 ",\"symbolModulesNamesOnly\":%" PRIu64
            ",\"symbolServiceBatches\":%" PRIu64 ",\"symbolServiceFailures\":%" PRIu64
            ",\"symbolServiceAddresses\":%" PRIu64 ",\"symbolServiceUnresolved\":%" PRIu64
            ",\"symbolModuleErrors\":%" PRIu64 ",\"symbolizeUs\":%" PRIu64
            ",\"symbolError\":\"%s\",\"samplingStopped\":\"%s\""
            ",\"samplingStoppedAtUs\":%" PRIu64 ",\"handlerCaptures\":%" PRIu64
            ",\"handlerP50Ns\":%" PRIu64 ",\"handlerP99Ns\":%" PRIu64
            ",\"descriptorChecks\":%" PRIu64 ",\"descriptorChecksSkipped\":%" PRIu64
            ",\"samplingTimer\":\"%s\",\"samplingTimerWhy\":\"%s\",\"timerFailure\":\"%s\""
            ",\"threadTimers\":{\"perf\":%" PRIu64 ",\"thread\":%" PRIu64 ",\"tick\":%" PRIu64
            ",\"none\":%" PRIu64 "},\"capturesDropped\":%" PRIu64 "%s%s%s%s}",
            l->pushed_blocks, l->cleared_blocks, l->failed_puts, l->failed_bytes,
            l->unsafe_samples_in_loader, l->descriptors_taken, l->interval_ns,
            l->symbol_modules_loaded, l->symbol_modules_names_only, l->symbol_service_batches,
            l->symbol_service_failures, l->symbol_service_addresses, l->symbol_service_unresolved,
            l->symbol_module_errors, l->symbolize_us, error, stopped, l->sampling_stopped_at_us,
            l->handler_captures, l->handler_p50_ns, l->handler_p99_ns, l->descriptor_checks,
            l->descriptor_checks_skipped, timer, timer_why, timer_failure, l->threads_perf_timer,
            l->threads_thread_timer, l->threads_tick, l->threads_no_timer, l->captures_dropped,
            l->built_from_region ? ",\"builtFromRegion\":true" : "", untrusted, given, threads);
}
