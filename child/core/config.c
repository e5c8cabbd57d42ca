/* child/core/config.c - FLEETPROF_* environment settings. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunk-manager.h"
#include "child/core/core.h"
#include "common/parse.h"

const char *rt_stackwalk_name(enum rt_stackwalk s)
{
    switch (s) {
    case RT_STACKWALK_FP:
        return "fp";
    case RT_STACKWALK_COPY:
        return "copy";
    case RT_STACKWALK_DWARF:
    default:
        return "dwarf";
    }
}

static void complain(const char *var, const char *value, const char *accepted)
{
    /* The one line the runtime may print: a setting the user got wrong. */
    fprintf(stderr, "fleetprof: ignoring %s=%s: expected %s\n", var, value, accepted);
}

void rt_config_from_env(struct rt_config *cfg)
{
    const char *v;
    double d;

    memset(cfg, 0, sizeof(*cfg));
    cfg->interval_ns = 1000000;
    cfg->buffer_bytes = BUF_LOCAL_DEFAULT_LIMIT;
    cfg->chunk_bytes = BUF_CHUNK_DEFAULT_BYTES;
    cfg->stackwalk = RT_STACKWALK_DWARF;
    cfg->slow_event_ns = 16 * 1000 * 1000;

    v = getenv("FLEETPROF_STARTUP");
    cfg->startup = v && strcmp(v, "1") == 0;
    v = getenv("FLEETPROF_DEBUG");
    cfg->debug = v && strcmp(v, "1") == 0;
    rt_log_set_debug(cfg->debug);

    v = getenv("FLEETPROF_INTERVAL_MS");
    if (v && *v) {
        if (parse_decimal(v, 0.05, 1000, &d) == 0)
            cfg->interval_ns = (uint64_t)(d * 1e6);
        else
            complain("FLEETPROF_INTERVAL_MS", v,
                     "a decimal number of milliseconds from 0.05 to 1000");
    }
    v = getenv("FLEETPROF_SLOW_EVENT_MS");
    if (v && *v) {
        if (parse_decimal(v, 0.001, 60000, &d) == 0)
            cfg->slow_event_ns = (uint64_t)(d * 1e6);
        else
            complain("FLEETPROF_SLOW_EVENT_MS", v,
                     "a decimal number of milliseconds from 0.001 to 60000");
    }
    v = getenv("FLEETPROF_BUFFER_MB");
    if (v && *v) {
        if (parse_decimal(v, 1, 65536, &d) == 0) {
            cfg->buffer_bytes = (uint64_t)(d * 1024 * 1024);
            cfg->buffer_set = true;
        } else
            complain("FLEETPROF_BUFFER_MB", v, "a size in MiB from 1 to 65536");
    }
    v = getenv("FLEETPROF_CHUNK_KB");
    if (v && *v) {
        if (parse_decimal(v, BUF_CHUNK_MIN_BYTES / 1024, 1024 * 1024, &d) == 0)
            cfg->chunk_bytes = (uint32_t)(d * 1024);
        else
            complain("FLEETPROF_CHUNK_KB", v, "a chunk size in KiB from 64 to 1048576");
    }
    /* Small buffers get small chunks, so the limit still holds several. */
    while (cfg->chunk_bytes > BUF_CHUNK_MIN_BYTES && cfg->buffer_bytes < 8ull * cfg->chunk_bytes)
        cfg->chunk_bytes /= 2;

    v = getenv("FLEETPROF_STACKWALK");
    if (v && *v) {
        if (strcmp(v, "fp") == 0)
            cfg->stackwalk = RT_STACKWALK_FP;
        else if (strcmp(v, "dwarf") == 0)
            cfg->stackwalk = RT_STACKWALK_DWARF;
        else if (strcmp(v, "copy") == 0)
            cfg->stackwalk = RT_STACKWALK_COPY;
        else
            complain("FLEETPROF_STACKWALK", v, "fp, dwarf or copy");
    }
    v = getenv("FLEETPROF_TIMER");
    if (v && *v) {
        if (strcmp(v, "auto") == 0)
            cfg->timer = RT_TIMER_AUTO;
        else if (strcmp(v, "perf") == 0)
            cfg->timer = RT_TIMER_PERF;
        else if (strcmp(v, "thread") == 0)
            cfg->timer = RT_TIMER_THREAD_CPU;
        else if (strcmp(v, "tick") == 0)
            cfg->timer = RT_TIMER_TICK;
        else
            complain("FLEETPROF_TIMER", v, "auto, perf, thread or tick");
    }
    v = getenv("FLEETPROF_SYMBOLIZE");
    if (v && *v) {
        if (strcmp(v, "daemon") == 0)
            cfg->symbolize_local = false;
        else if (strcmp(v, "local") == 0)
            cfg->symbolize_local = true;
        else
            complain("FLEETPROF_SYMBOLIZE", v, "daemon or local");
    }
    v = getenv("FLEETPROF_SOCKET");
    if (v && *v) {
        if (strlen(v) < sizeof(cfg->socket))
            strcpy(cfg->socket, v);
        else
            complain("FLEETPROF_SOCKET", "(too long)", "a path shorter than 4096 bytes");
    }
    v = getenv("FLEETPROF_DIR");
    if (v && *v) {
        if (strlen(v) < sizeof(cfg->dir) - 16)
            strcpy(cfg->dir, v);
        else
            complain("FLEETPROF_DIR", "(too long)", "a directory path shorter than 4080 bytes");
    }
    v = getenv("FLEETPROF_OUTPUT");
    if (v && *v) {
        if (strlen(v) < sizeof(cfg->output))
            strcpy(cfg->output, v);
        else
            complain("FLEETPROF_OUTPUT", "(too long)", "a path shorter than 4096 bytes");
    }
}
