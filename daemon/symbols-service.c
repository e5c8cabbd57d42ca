/* daemon/symbols-service.c - the fleet's symbol service (design §4 "Symbols").
 *
 * A child connected to the daemon does not load debug info: it sends its unique (module,
 * offset) pairs in Symbolize requests, and the daemon answers from one libdw cache
 * (profile/symbols.h, keyed by build-id) shared by the whole fleet, so each module is
 * opened once however many children use it. Children are hostile: a request is bounded
 * (SYMBOLIZE_MAX_ADDRESSES, the envelope's limits), and a module is opened only when its
 * path is absolute, appears in the requesting process's /proc/PID/maps (the peer's
 * SO_PEERCRED pid) and is a regular file; anything else gets a per-module error and the
 * addresses stay unresolved. Replies are split so each frame stays well under the frame
 * limit.
 *
 * Runs on the daemon's loop: the first request naming a module blocks the loop while it
 * opens (~1 ms for libc's names). Modules whose DWARF is costly to open (compressed and over
 * 1 MiB, libc's from libc6-dbg: 33-42 ms) get names without lines (the cost rule of
 * profile/symbols.h), logged once per module. With much uncompressed DWARF the first
 * line lookups may still take a while; a uv_queue_work job owning the cache while it runs
 * is the next step if it shows in gathers.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core.h"
#include "daemon/daemon-internal.h"
#include "daemon/workers.h"
#include "ipc/ipc.h"
#include "profile/maps.h"
#include "profile/symbols.h"
#include "proto/fleetprof-protocol.h"

#define SYMBOLIZE_MAX_ADDRESSES 65536       /* per request; children send 16384 */
#define SYMBOLS_PIECE_BYTES     (1u << 20)  /* reply piece budget, far under the frame cap */
#define MAPS_MAX_BYTES          (16u << 20) /* /proc/PID/maps read at most */

/* A file the process maps, from /proc/PID/maps. */
struct mapped_path {
    const char *path; /* borrowed from the maps text */
    bool deleted;     /* the kernel printed " (deleted)" */
};

/* The files of one process, sorted by path. */
struct maps {
    struct prof_maps lines; /* owned: the parsed file */
    struct mapped_path *paths;
    size_t count;
};

static int cmp_path(const void *a, const void *b)
{
    return strcmp(((const struct mapped_path *)a)->path, ((const struct mapped_path *)b)->path);
}

static void maps_done(struct maps *m)
{
    prof_maps_done(&m->lines);
    free(m->paths);
    *m = (struct maps){0};
}

/* Reads the paths /proc/PID/maps lists, sorted. Returns 0 or a negative errno. */
static int maps_read(pid_t pid, struct maps *ret_maps)
{
    struct maps m = {0};
    int r = prof_maps_read(pid, MAPS_MAX_BYTES, &m.lines);

    if (r < 0)
        return r;
    m.paths = calloc(m.lines.count + 1, sizeof(*m.paths));
    if (!m.paths) {
        maps_done(&m);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m.lines.count; i++)
        if (m.lines.map[i].path[0] == '/')
            m.paths[m.count++] = (struct mapped_path){m.lines.map[i].path, m.lines.map[i].deleted};
    qsort(m.paths, m.count, sizeof(*m.paths), cmp_path);
    *ret_maps = m;
    return 0;
}

static const struct mapped_path *maps_find(const struct maps *m, const char *path)
{
    struct mapped_path key = {path, false};

    return bsearch(&key, m->paths, m->count, sizeof(*m->paths), cmp_path);
}

/* The path to open for module mod of process pid, or NULL with *ret_error set. A deleted
 * main executable is still readable through /proc/PID/exe (same uid: no privilege needed,
 * unlike /proc/PID/map_files); written into exe_buf. */
static const char *module_path(pid_t pid, const struct maps *maps,
                               const Fleetprof__SymbolModule *mod, char *exe_buf, size_t exe_size,
                               int *ret_error, char *why, size_t why_size)
{
    const struct mapped_path *mp;
    struct stat st;

    if (mod->path[0] != '/') {
        *ret_error = EINVAL;
        (void)snprintf(why, why_size, "%.200s: not an absolute path", mod->path);
        return NULL;
    }
    mp = maps_find(maps, mod->path);
    if (!mp) {
        *ret_error = EPERM;
        (void)snprintf(why, why_size, "%.200s: not mapped by process %d", mod->path, (int)pid);
        return NULL;
    }
    if (mp->deleted) {
        char link[4096], self[64];
        ssize_t n;

        (void)snprintf(self, sizeof(self), "/proc/%d/exe", (int)pid);
        n = readlink(self, link, sizeof(link) - 1);
        if (n > 10) {
            link[n] = '\0';
            if (strcmp(link + n - 10, " (deleted)") == 0 && (size_t)(n - 10) == strlen(mod->path) &&
                strncmp(link, mod->path, (size_t)(n - 10)) == 0) {
                (void)snprintf(exe_buf, exe_size, "%s", self);
                return exe_buf;
            }
        }
        /* Maybe still known by build-id (cached, or a debug file): let the cache try. */
        return mod->path;
    }
    /* Only regular files: a FIFO or a device would block or feed libdw garbage. */
    if (stat(mod->path, &st) == 0 && !S_ISREG(st.st_mode)) {
        *ret_error = EINVAL;
        (void)snprintf(why, why_size, "%.200s: not a regular file", mod->path);
        return NULL;
    }
    return mod->path;
}

static void send_error_reply(struct conn *c, uint64_t id, const char *error)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Symbols msg = FLEETPROF__SYMBOLS__INIT;

    msg.request_id = id;
    msg.error = (char *)error;
    msg.last = true;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_SYMBOLS;
    env.symbols = &msg;
    (void)daemon__send(c, &env);
}

int daemon__symbols_cache(struct daemon *d, struct prof_symbols **ret)
{
    struct prof_symbols_options o = {.memory_limit_bytes = DAEMON_SYMBOL_CACHE_BYTES};
    int r = d->symbols ? 0 : prof_symbols_new_with_options(&o, &d->symbols);

    *ret = d->symbols;
    return r;
}

static int ensure_cache(struct daemon *d)
{
    struct prof_symbols_options o = {.memory_limit_bytes = DAEMON_SYMBOL_CACHE_BYTES};

    if (d->symbols)
        return 0;
    return prof_symbols_new_with_options(&o, &d->symbols);
}

void daemon__symbolize(struct conn *c, const Fleetprof__Symbolize *m)
{
    struct daemon *d = c->d;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Symbols msg = FLEETPROF__SYMBOLS__INIT;
    struct maps maps = {0};
    const char **paths = NULL;
    char **module_errors = NULL, **names = NULL, **files = NULL;
    char *exe_bufs = NULL;
    uint32_t *lines = NULL, *status = NULL;
    size_t n = m->n_addresses, piece_start = 0, piece_bytes = 0;
    struct prof_symbols_stats st = {0};
    uint64_t names_only;
    char why[512];
    int r;

    d->stats.symbol_requests++;
    if (n > SYMBOLIZE_MAX_ADDRESSES) {
        (void)snprintf(why, sizeof(why), "too many addresses in one request (%zu, at most %d)", n,
                       SYMBOLIZE_MAX_ADDRESSES);
        daemon__log(d, DAEMON_LOG_WARNING, "symbolize from child %d refused: %s", (int)c->pid, why);
        send_error_reply(c, m->id, why);
        return;
    }
    r = ensure_cache(d);
    if (r == 0)
        r = maps_read(c->pid, &maps);
    if (r < 0) {
        (void)snprintf(why, sizeof(why), "cannot check the modules of process %d: %s", (int)c->pid,
                       strerror(-r));
        daemon__log(d, DAEMON_LOG_WARNING, "symbolize from child %d failed: %s", (int)c->pid, why);
        send_error_reply(c, m->id, why);
        return;
    }
    prof_symbols_get_stats(d->symbols, &st);
    names_only = st.modules_names_only;
    paths = calloc(m->n_modules + 1, sizeof(*paths));
    module_errors = calloc(m->n_modules + 1, sizeof(*module_errors));
    exe_bufs = calloc(m->n_modules + 1, 64);
    names = calloc(n + 1, sizeof(*names));
    files = calloc(n + 1, sizeof(*files));
    lines = calloc(n + 1, sizeof(*lines));
    status = calloc(n + 1, sizeof(*status));
    if (!paths || !module_errors || !exe_bufs || !names || !files || !lines || !status) {
        send_error_reply(c, m->id, "the daemon is out of memory");
        goto out;
    }
    for (size_t i = 0; i < m->n_modules; i++) {
        int error = 0;

        paths[i] = module_path(c->pid, &maps, m->modules[i], exe_bufs + 64 * i, 64, &error, why,
                               sizeof(why));
        if (!paths[i]) {
            module_errors[i] = strdup(why);
            daemon__log(d, DAEMON_LOG_WARNING, "symbolize from child %d: %s", (int)c->pid, why);
        }
    }

    env.msg_case = FLEETPROF__ENVELOPE__MSG_SYMBOLS;
    env.symbols = &msg;
    msg.request_id = m->id;
    for (size_t i = 0; i <= n; i++) {
        /* Send a piece when the budget is spent, and the last one at the end. */
        if (i == n || piece_bytes >= SYMBOLS_PIECE_BYTES) {
            size_t count = i - piece_start;

            msg.offset = (uint32_t)piece_start;
            msg.n_names = msg.n_files = msg.n_lines = msg.n_status = count;
            msg.names = names + piece_start;
            msg.files = files + piece_start;
            msg.lines = lines + piece_start;
            msg.status = status + piece_start;
            msg.last = i == n;
            if (msg.last) {
                for (size_t k = 0; k < m->n_modules; k++)
                    if (!module_errors[k])
                        module_errors[k] = (char *)""; /* not freed: see out */
                msg.n_module_errors = m->n_modules;
                msg.module_errors = module_errors;
            }
            if (daemon__send(c, &env) < 0)
                break;
            piece_start = i;
            piece_bytes = 0;
            if (i == n)
                break;
        }

        const Fleetprof__SymbolAddress *a = m->addresses[i];
        uint32_t k = a->module_index; /* < n_modules: checked by the envelope */
        const Fleetprof__SymbolModule *mod = m->modules[k];
        struct prof_symbol sym;

        names[i] = files[i] = (char *)"";
        if (!paths[k]) {
            status[i] = EPERM;
        } else {
            r = prof_symbols_resolve(d->symbols, paths[k], mod->build_id.data, mod->build_id.len,
                                     a->offset, &sym);
            prof_symbols_get_stats(d->symbols, &st);
            if (st.modules_names_only != names_only) {
                names_only = st.modules_names_only;
                daemon__log(d, DAEMON_LOG_INFO,
                            "symbols of %s: names only (its debug info is compressed and over "
                            "%u KiB: too costly to open for lines)",
                            mod->path, (unsigned)(PROF_SYMBOLS_DEFAULT_MAX_COMPRESSED_DWARF >> 10));
            }
            if (r == 0) {
                /* Interned by the cache: valid until it is freed. */
                names[i] = (char *)sym.function;
                files[i] = (char *)(sym.file ? sym.file : "");
                lines[i] = sym.line;
            } else {
                const char *e = prof_symbols_get_last_error(d->symbols);

                status[i] = (uint32_t)-r;
                /* "no symbol at" is about one address; anything else about the module. */
                if (!module_errors[k] && !strstr(e, ": no symbol at 0x")) {
                    module_errors[k] = strdup(*e ? e : strerror(-r));
                    daemon__log(d, DAEMON_LOG_WARNING, "symbols of %s for child %d: %s", mod->path,
                                (int)c->pid, module_errors[k] ? module_errors[k] : "?");
                }
            }
        }
        piece_bytes += strlen(names[i]) + strlen(files[i]) + 16;
    }
out:
    if (module_errors)
        for (size_t k = 0; k < m->n_modules; k++)
            if (module_errors[k] && module_errors[k][0])
                free(module_errors[k]);
    free(module_errors);
    free(paths);
    free(exe_bufs);
    free(names);
    free(files);
    free(lines);
    free(status);
    maps_done(&maps);
}

struct prof_symbols_stats daemon__symbols_stats(const struct daemon *d)
{
    struct prof_symbols_stats st = {0}, workers;

    if (d->symbols)
        prof_symbols_get_stats(d->symbols, &st);
    /* One symbol service for the fleet, in two caches: the loop's, the workers'. */
    workers_symbols_stats(d->workers, &workers);
    st.modules_loaded += workers.modules_loaded;
    st.modules_names_only += workers.modules_names_only;
    return st;
}

void daemon__symbols_free(struct daemon *d)
{
    d->symbols = prof_symbols_free(d->symbols);
}
