/* child/client/symbolize-remote.c - symbols for this process's profile, from the daemon's symbol
 * service when connected (design §4 "Symbols"), else from a local libdw cache that lives in
 * libfleetprof-symbols.so, loaded on first use (child/client/symbols-plugin.h).
 *
 * Called on the thread writing a profile (the gather thread, or the exiting thread),
 * never on the IPC thread, which it waits for: the unique (module, vaddr) pairs go in
 * Symbolize batches small enough for one frame each, one batch at a time, each answered
 * within SYMBOLIZE_TIMEOUT_NS or resolved locally. A module the daemon cannot read stays
 * unresolved ("<module>+0x<offset>" frames, gecko.h): the child could not read it either.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child/client/client.h"
#include "child/client/symbols-plugin.h"
#include "child/core/core.h"
#include "common/grow.h"
#include "profile/libs.h"
#include "profile/symbols.h"

#define SYMBOLIZE_TIMEOUT_NS    (5ull * 1000 * 1000 * 1000)
#define SYMBOL_CACHE_BYTES      (256u * 1024 * 1024)
#define BATCH_MAX_ADDRESSES     16384
#define BATCH_MAX_REQUEST_BYTES (1u << 20) /* the frame limit is 4 MiB */

static void note_error(struct rt_symbolizer *s, const char *prefix, const char *text)
{
    if (!s->error[0])
        (void)snprintf(s->error, sizeof(s->error), "%s%s", prefix, text);
}

/* The plugin, once loaded (never unloaded: the strings of its caches must outlive them).
 * No lock: two threads that race both dlopen() it (the loader returns one handle) and
 * store the same table; a failure is not remembered, the next profile write tries again. */
static _Atomic(const struct rt_symbols_plugin *) plugin;

/* Returns the local-symbols plugin, loading it on first use; NULL with s->error set when
 * it cannot be loaded. */
static const struct rt_symbols_plugin *get_plugin(struct rt_symbolizer *s)
{
    const struct rt_symbols_plugin *p = atomic_load_explicit(&plugin, memory_order_acquire);
    const struct rt_symbols_plugin *(*entry)(void);
    char error[200];
    void *handle;

    if (p)
        return p;
    handle = rt_dlopen_beside(RT_SYMBOLS_PLUGIN_NAME, error, sizeof(error));
    if (!handle) {
        note_error(s, "cannot load local symbols: ", error);
        rt_debug("cannot load %s (%s): frames stay unresolved", RT_SYMBOLS_PLUGIN_NAME, error);
        return NULL;
    }
    *(void **)&entry = dlsym(handle, RT_SYMBOLS_PLUGIN_ENTRY);
    p = entry ? entry() : NULL;
    if (!p || p->abi != RT_SYMBOLS_PLUGIN_ABI || p->lib_size != sizeof(struct prof_lib) ||
        p->request_size != sizeof(struct prof_frame_request) ||
        p->result_size != sizeof(struct prof_frame_result) ||
        p->stats_size != sizeof(struct prof_symbols_stats)) {
        /* Left loaded: unloading a library whose constructors ran is not worth the risk. */
        note_error(s, "cannot load local symbols: ",
                   RT_SYMBOLS_PLUGIN_NAME " is from another build of fleetprof");
        rt_debug("%s is from another build of fleetprof: frames stay unresolved",
                 RT_SYMBOLS_PLUGIN_NAME);
        return NULL;
    }
    atomic_store_explicit(&plugin, p, memory_order_release);
    rt_debug("loaded %s for local symbols", RT_SYMBOLS_PLUGIN_NAME);
    return p;
}

/* Resolves with the plugin's libdw cache. Without the plugin every frame stays unresolved
 * ("<module>+0x<offset>"), as for a module that cannot be read; the profile is still
 * written. */
static int resolve_local(struct rt_symbolizer *s, const struct prof_frame_request *requests,
                         size_t count, struct prof_frame_result *results)
{
    const struct rt_symbols_plugin *p = get_plugin(s);
    int r;

    if (!p)
        return 0;
    if (!s->local) {
        r = p->cache_new(SYMBOL_CACHE_BYTES, &s->local);
        if (r < 0)
            return r;
    }
    return p->resolve(s->local, requests, count, results);
}

/* One batch: requests [start, *ret_end) that fit in a frame. Returns 0 (results filled),
 * or a negative errno. */
static int resolve_batch(struct rt_symbolizer *s, const struct prof_frame_request *requests,
                         size_t start, size_t count, struct prof_frame_result *results,
                         size_t *ret_end)
{
    size_t max = count - start < BATCH_MAX_ADDRESSES ? count - start : BATCH_MAX_ADDRESSES;
    const struct prof_lib **libs = calloc(max, sizeof(*libs));
    struct rt_symbol_module *mods = calloc(max, sizeof(*mods));
    struct rt_symbol_address *addrs = calloc(max, sizeof(*addrs));
    size_t *index = calloc(max, sizeof(*index)); /* address -> request */
    struct rt_symbol_batch b = {0};
    size_t n_mods = 0, n_addrs = 0, bytes = 64, last_mod = 0, i;
    int r = -ENOMEM;

    b.name_off = calloc(max, sizeof(*b.name_off));
    b.file_off = calloc(max, sizeof(*b.file_off));
    b.lines = calloc(max, sizeof(*b.lines));
    b.status = calloc(max, sizeof(*b.status));
    if (!libs || !mods || !addrs || !index || !b.name_off || !b.file_off || !b.lines || !b.status)
        goto out;

    for (i = start; i < count && n_addrs < max && bytes < BATCH_MAX_REQUEST_BYTES; i++) {
        const struct prof_lib *lib = requests[i].lib;
        size_t k;

        if (!lib)
            continue;
        /* The vdso has no file to name: its names come from our own memory. */
        if (!lib->path) {
            results[i].function = prof_vdso_function(requests[i].vaddr);
            continue;
        }
        /* Requests come grouped by first use: the previous module is the likely one. */
        if (n_mods && libs[last_mod] == lib) {
            k = last_mod;
        } else {
            for (k = 0; k < n_mods && libs[k] != lib; k++)
                ;
            if (k == n_mods) {
                mods[k].path = lib->path;
                mods[k].build_id = lib->build_id;
                mods[k].build_id_len = lib->build_id_len;
                mods[k].load_bias = lib->bias;
                libs[k] = lib;
                n_mods++;
                bytes += strlen(lib->path) + lib->build_id_len + 32;
            }
            last_mod = k;
        }
        addrs[n_addrs].module_index = (uint32_t)k;
        addrs[n_addrs].offset = requests[i].vaddr;
        index[n_addrs++] = i;
        bytes += 20;
    }
    *ret_end = i;
    if (n_addrs == 0) {
        r = 0;
        goto out;
    }
    b.modules = mods;
    b.module_count = n_mods;
    b.addresses = addrs;
    b.count = n_addrs;
    r = rt_ipc_symbolize(&b, SYMBOLIZE_TIMEOUT_NS);
    s->remote_batches++;
    s->module_errors += b.module_errors;
    if (b.error[0])
        note_error(s, "", b.error);
    if (r < 0)
        goto out;
    for (size_t a = 0; a < n_addrs; a++) {
        struct prof_frame_result *res = &results[index[a]];

        s->remote_addresses++;
        if (b.status[a] || b.name_off[a] == SIZE_MAX) {
            s->remote_unresolved++;
            continue;
        }
        res->function = b.arena + b.name_off[a];
        res->file = b.file_off[a] == SIZE_MAX ? NULL : b.arena + b.file_off[a];
        res->line = b.lines[a];
    }
    if (b.arena) { /* keep the strings until the profile is written */
        if (FLEETPROF_GROW(s->arenas, s->arena_cap, s->arena_count + 1) < 0) {
            memset(results + start, 0, (*ret_end - start) * sizeof(*results));
            r = -ENOMEM;
            goto out;
        }
        s->arenas[s->arena_count++] = b.arena;
        b.arena = NULL;
    }
out:
    free(b.arena);
    free(b.name_off);
    free(b.file_off);
    free(b.lines);
    free(b.status);
    free(libs);
    free(mods);
    free(addrs);
    free(index);
    return r;
}

int rt_symbolizer_resolve(struct rt_symbolizer *s, const struct prof_frame_request *requests,
                          size_t count, struct prof_frame_result *results)
{
    size_t start = 0;

    for (size_t i = 0; i < count; i++)
        results[i] = (struct prof_frame_result){0};
    if (!rt.cfg.symbolize_local && rt_ipc_connected()) {
        while (start < count) {
            size_t end = start;
            int r = resolve_batch(s, requests, start, count, results, &end);

            if (r < 0) {
                /* Timed out, lost the daemon, or it failed: this batch and the rest are
                 * resolved here, as without a daemon. */
                s->remote_failures++;
                note_error(s, "symbol service: ", strerror(-r));
                rt_debug("the daemon's symbol service failed (%s): resolving locally",
                         strerror(-r));
                break;
            }
            start = end;
        }
    }
    if (start < count)
        return resolve_local(s, requests + start, count - start, results + start);
    return 0;
}

struct prof_symbols_stats rt_symbolizer_local_stats(const struct rt_symbolizer *s)
{
    struct prof_symbols_stats st = {0};
    const struct rt_symbols_plugin *p = atomic_load_explicit(&plugin, memory_order_acquire);

    if (s->local && p)
        p->get_stats(s->local, &st);
    return st;
}

void rt_symbolizer_done(struct rt_symbolizer *s)
{
    const struct rt_symbols_plugin *p = atomic_load_explicit(&plugin, memory_order_acquire);

    if (s->local && p) /* a cache exists only once the plugin is loaded */
        s->local = p->cache_free(s->local);
    for (size_t i = 0; i < s->arena_count; i++)
        free(s->arenas[i]);
    free(s->arenas);
    s->arenas = NULL;
    s->arena_count = 0;
    s->arena_cap = 0;
}
