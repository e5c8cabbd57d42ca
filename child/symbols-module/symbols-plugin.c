/* child/symbols-module/symbols-plugin.c - libfleetprof-symbols.so: profile/'s libdw symbol cache
 * behind the small table of child/client/symbols-plugin.h, for the runtime to dlopen() when it
 * symbolizes by itself. Exports only fleetprof_symbols_plugin (libfleetprof-symbols.map).
 */
#include "child/client/symbols-plugin.h"

#include "profile/gecko.h"
#include "profile/libs.h"
#include "profile/symbolize-local.h"
#include "profile/symbols.h"

static int resolve(void *userdata, const struct prof_frame_request *requests, size_t count,
                   struct prof_frame_result *results)
{
    struct prof_symbolizer local = prof_symbolizer_local(userdata);

    return local.resolve(local.userdata, requests, count, results);
}

static const struct rt_symbols_plugin plugin = {
        .abi = RT_SYMBOLS_PLUGIN_ABI,
        .lib_size = sizeof(struct prof_lib),
        .request_size = sizeof(struct prof_frame_request),
        .result_size = sizeof(struct prof_frame_result),
        .stats_size = sizeof(struct prof_symbols_stats),
        .cache_new = prof_symbols_new,
        .cache_free = prof_symbols_free,
        .get_stats = prof_symbols_get_stats,
        .resolve = resolve,
};

__attribute__((visibility("default"))) const struct rt_symbols_plugin *
fleetprof_symbols_plugin(void)
{
    return &plugin;
}
