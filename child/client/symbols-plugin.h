/* child/client/symbols-plugin.h - the interface between libfleetprof.so and
 * libfleetprof-symbols.so.
 *
 * Local symbolization (libdw, libelf and the compression libraries they pull in) lives in a
 * separate shared object so that a profiled process pays for loading it only when it must
 * symbolize by itself: no daemon connected, the daemon's service failed, or
 * FLEETPROF_SYMBOLIZE=local. The runtime dlopen()s it on first use (symbolize-remote.c):
 * next to libfleetprof.so first, then by name through the loader's search path. Both are
 * built from one tree; the sizes below catch a plugin from another build.
 */
#ifndef FLEETPROF_CHILD_CLIENT_SYMBOLS_PLUGIN_H
#define FLEETPROF_CHILD_CLIENT_SYMBOLS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#define RT_SYMBOLS_PLUGIN_NAME  "libfleetprof-symbols.so"
#define RT_SYMBOLS_PLUGIN_ENTRY "fleetprof_symbols_plugin"
#define RT_SYMBOLS_PLUGIN_ABI   1u

struct prof_frame_request;
struct prof_frame_result;
struct prof_symbols;
struct prof_symbols_stats;

/* What the plugin's entry point returns: static data, valid while the plugin is loaded
 * (the runtime never unloads it). Thread-safety as profile/symbols.h: one cache per
 * thread at a time. */
struct rt_symbols_plugin {
    uint32_t abi;          /* RT_SYMBOLS_PLUGIN_ABI */
    uint32_t lib_size;     /* sizeof(struct prof_lib) */
    uint32_t request_size; /* sizeof(struct prof_frame_request) */
    uint32_t result_size;  /* sizeof(struct prof_frame_result) */
    uint32_t stats_size;   /* sizeof(struct prof_symbols_stats) */
    /* prof_symbols_new(), prof_symbols_free(), prof_symbols_get_stats() */
    int (*cache_new)(size_t memory_limit_bytes, struct prof_symbols **ret_symbols);
    struct prof_symbols *(*cache_free)(struct prof_symbols *symbols);
    void (*get_stats)(const struct prof_symbols *symbols, struct prof_symbols_stats *ret_stats);
    /* prof_symbolizer_local(symbols).resolve: userdata is the struct prof_symbols. */
    int (*resolve)(void *userdata, const struct prof_frame_request *requests, size_t count,
                   struct prof_frame_result *results);
};

/* The plugin's only exported symbol (RT_SYMBOLS_PLUGIN_ENTRY). */
const struct rt_symbols_plugin *fleetprof_symbols_plugin(void);

#endif /* FLEETPROF_CHILD_CLIENT_SYMBOLS_PLUGIN_H */
