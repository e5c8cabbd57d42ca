/* tests/bench/gen-big-fleet.c - a big, samples-heavy fleet recording for the benchmarks that
 * read profiles (summary, export, the JSON readers), written with the real writers.
 *
 *   gen-big-fleet OUTDIR MB      writes OUTDIR/fleet.json of at least MB * 1e6 bytes
 *
 * The fleet is a prefork server: "server: master" (pid 4100, mostly asleep in ppoll), then
 * "server: worker N" processes (GeckoMain handling requests, two "io" threads doing TLS and
 * compression, a "logger" waiting on a condition variable, a "timer" asleep in ppoll with
 * tiny CPU deltas), with a few short-lived "gzip" helpers (exit profiles) every ten workers,
 * until the process profiles add up to MB. Each process is a chunked buffer of deterministic
 * entries (a fixed seed, fixed times: no clock) written by prof_gecko_write_process() with a
 * fake symbolizer naming ~500 functions in 7 modules (C++ names included): deep stacks
 * (15-60 frames) drawn from a call tree, skewed so that some paths are hot, threadCPUDelta
 * varying, request markers, an RSS counter. The process profiles go to OUTDIR/procs/ and are
 * folded into OUTDIR/fleet.json by the real `fleetprof merge` (next to this program in a build
 * tree, ../../tools/fleetprof, or $FLEETPROF_CLI), then removed. Prints what it made and its
 * own CPU time. The same MB always gives the same bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/chunked-buffer.h"
#include "profile/entries.h"
#include "profile/gecko.h"
#include "profile/libs.h"
#include "tests/bench/synth-profile.h"

#define CHECK SYNTH_CHECK

#define START_NS        1000000000ull
#define START_EPOCH_MS  1.76e12
#define INTERVAL_NS     1000000ull
#define WORKER_TICKS    20000 /* 20 s of 1 ms samples per worker */
#define HELPER_TICKS    150
#define FN_STRIDE_SHIFT 6 /* each fake function spans 64 bytes */
#define MAX_DEPTH       64
#define TEMPLATES       512 /* call paths per thread kind */
#define MAX_PROCESSES   1000
#define MASTER_PID      4100
#define HELPER_PID      200000

/* ---- deterministic randomness (splitmix64) ------------------------------------------------ */

static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t rng_below(uint64_t *state, uint32_t n)
{
    return (uint32_t)(rng_next(state) % n);
}

static double rng_unit(uint64_t *state)
{
    return (double)(rng_next(state) >> 11) / 9007199254740992.0;
}

/* ---- modules and their function names --------------------------------------------------- */

enum module {
    MOD_SERVER,
    MOD_LIBC,
    MOD_STDCXX,
    MOD_SSL,
    MOD_CRYPTO,
    MOD_Z,
    MOD_GZIP,
    MOD_COUNT,
};

static const char *const libc_names[] = {"__libc_start_main_impl",
                                         "__libc_start_call_main",
                                         "start_thread",
                                         "clone3",
                                         "ppoll",
                                         "epoll_wait",
                                         "__libc_recv",
                                         "__libc_send",
                                         "read",
                                         "write",
                                         "__GI___writev",
                                         "pthread_cond_wait@@GLIBC_2.3.2",
                                         "__futex_abstimed_wait_common",
                                         "pthread_mutex_lock",
                                         "__lll_lock_wait",
                                         "malloc",
                                         "_int_malloc",
                                         "free",
                                         "_int_free",
                                         "realloc",
                                         "__memmove_avx_unaligned_erms",
                                         "__memset_avx2_unaligned_erms",
                                         "__strlen_avx2",
                                         "__strcmp_avx2",
                                         "__memchr_avx2",
                                         "__vfprintf_internal",
                                         "__GI___snprintf",
                                         "__strftime_internal",
                                         "qsort_r",
                                         "msort_with_tmp.part.0",
                                         "clock_gettime@@GLIBC_2.17",
                                         "__GI___clock_nanosleep",
                                         "accept4",
                                         "__open64_nocancel",
                                         "__close_nocancel",
                                         "fork",
                                         "_IO_file_xsputn@@GLIBC_2.2.5",
                                         "__strtol_internal",
                                         "____strtod_l_internal",
                                         "_dl_runtime_resolve_xsavec"};
static const char *const stdcxx_names[] = {
        "operator new(unsigned long)",
        "operator delete(void*, unsigned long)",
        "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> "
        ">::_M_mutate(unsigned long, unsigned long, char const*, unsigned long)",
        "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> "
        ">::_M_append(char const*, unsigned long)",
        "std::_Rb_tree_increment(std::_Rb_tree_node_base*)",
        "std::_Rb_tree_insert_and_rebalance(bool, std::_Rb_tree_node_base*, "
        "std::_Rb_tree_node_base*, std::_Rb_tree_node_base&)",
        "std::__detail::_Prime_rehash_policy::_M_need_rehash(unsigned long, unsigned long, "
        "unsigned long) const",
        "std::ostream& std::ostream::_M_insert<double>(double)",
        "std::basic_ostream<char, std::char_traits<char> >& std::__ostream_insert<char, "
        "std::char_traits<char> >(std::basic_ostream<char, std::char_traits<char> >&, char "
        "const*, long)",
        "std::locale::locale()",
        "std::condition_variable::wait(std::unique_lock<std::mutex>&)",
        "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void "
        "(server::IoThread::*)(), server::IoThread*> > >::_M_run()",
        "execute_native_thread_routine",
        "std::__throw_out_of_range_fmt(char const*, ...)",
        "__cxa_allocate_exception"};
static const char *const ssl_names[] = {"SSL_read",
                                        "SSL_write",
                                        "ssl3_read_bytes",
                                        "ssl3_write_bytes",
                                        "ssl3_read_n",
                                        "tls_write_records_default",
                                        "tls_get_more_records",
                                        "ossl_statem_accept",
                                        "tls_process_client_hello",
                                        "tls_construct_server_certificate",
                                        "SSL_do_handshake",
                                        "ssl3_dispatch_alert"};
static const char *const crypto_names[] = {"sha256_block_data_order_avx2",
                                           "aesni_gcm_encrypt",
                                           "aesni_gcm_decrypt",
                                           "EVP_DigestUpdate",
                                           "EVP_EncryptUpdate",
                                           "EVP_DecryptUpdate",
                                           "bn_mul_mont",
                                           "ecp_nistz256_point_double",
                                           "ecp_nistz256_mul_mont",
                                           "CRYPTO_gcm128_encrypt_ctr32",
                                           "gcm_ghash_avx",
                                           "ossl_ec_GFp_mont_field_mul",
                                           "BN_mod_exp_mont_consttime",
                                           "CRYPTO_malloc",
                                           "OPENSSL_cleanse"};
static const char *const z_names[] = {"deflate",       "deflate_slow",   "deflate_fast",
                                      "longest_match", "fill_window",    "compress_block",
                                      "inflate",       "inflate_fast",   "crc32_z",
                                      "adler32_z",     "_tr_flush_block"};
static const char *const gzip_names[] = {"_start",    "main",           "treat_file",   "zip",
                                         "file_read", "updcrc",         "flush_outbuf", "write_buf",
                                         "copy_stat", "open_input_file"};

/* The server's own functions: C entry points, then C++ methods made from namespaces,
 * classes and methods (the names a real server's symbol table has). */
#define SERVER_C_NAMES 12
static const char *const server_c_names[SERVER_C_NAMES] = {
        "_start",        "main",          "event_loop_run",     "handle_signal",
        "spawn_workers", "reap_children", "accept_connections", "log_flush",
        "config_reload", "timer_tick",    "worker_main",        "rotate_logs"};
static const char *const namespaces[] = {"http", "db",  "cache", "auth",
                                         "json", "rpc", "sched", "tls"};
static const char *const classes[] = {"Parser",  "Router", "Handler", "Pool",
                                      "Session", "Codec",  "Queue"};
static const char *const methods[][2] = {
        {"parse", "(std::basic_string_view<char, std::char_traits<char> >)"},
        {"dispatch", "(server::Request&, server::Response&)"},
        {"run", "()"},
        {"encode", "(server::Buffer&) const"},
        {"lookup", "(std::__cxx11::basic_string<char, std::char_traits<char>, "
                   "std::allocator<char> > const&) const"},
        {"flush", "(bool)"},
        {"handle", "(std::unique_ptr<server::Message, std::default_delete<server::Message> >)"},
};
#define SERVER_CXX_NAMES (8 * 7 * 7)
#define SERVER_NAMES     (SERVER_C_NAMES + SERVER_CXX_NAMES)
static char server_cxx_storage[SERVER_CXX_NAMES][192];
static const char *server_names[SERVER_NAMES];

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static char *const module_paths[MOD_COUNT] = {
        (char *)"/opt/fleet/bin/server",
        (char *)"/usr/lib/x86_64-linux-gnu/libc.so.6",
        (char *)"/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30",
        (char *)"/usr/lib/x86_64-linux-gnu/libssl.so.3",
        (char *)"/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
        (char *)"/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
        (char *)"/usr/bin/gzip",
};
static char *const module_basenames[MOD_COUNT] = {
        (char *)"server",      (char *)"libc.so.6",      (char *)"libstdc++.so.6.0.30",
        (char *)"libssl.so.3", (char *)"libcrypto.so.3", (char *)"libz.so.1.2.13",
        (char *)"gzip",
};
/* Load addresses: the programs low (PIE), the libraries high, sorted, 16 MiB each. */
static const uint64_t module_starts[MOD_COUNT] = {
        0x55d4a3c00000, 0x7f3e41000000, 0x7f3e42000000, 0x7f3e43000000,
        0x7f3e44000000, 0x7f3e45000000, 0x55e012400000,
};

/* Two module lists: the server's processes and the gzip helpers, each sorted by start. */
static struct prof_lib server_lib_array[6], gzip_lib_array[3];
static struct prof_libs server_libs = {server_lib_array, 6}, gzip_libs = {gzip_lib_array, 3};
static struct synth_module_names server_lib_names[6], gzip_lib_names[3];
static struct synth_symbols server_symbols = {&server_libs, server_lib_names};
static struct synth_symbols gzip_symbols = {&gzip_libs, gzip_lib_names};

static struct synth_module_names names_of(enum module m)
{
    static const struct {
        const char *const *names;
        size_t count;
        const char *file;
    } table[MOD_COUNT] = {
            [MOD_SERVER] = {server_names, SERVER_NAMES, "/src/server/server.cc"},
            [MOD_LIBC] = {libc_names, ARRAY_LEN(libc_names), NULL},
            [MOD_STDCXX] = {stdcxx_names, ARRAY_LEN(stdcxx_names), NULL},
            [MOD_SSL] = {ssl_names, ARRAY_LEN(ssl_names), NULL},
            [MOD_CRYPTO] = {crypto_names, ARRAY_LEN(crypto_names), NULL},
            [MOD_Z] = {z_names, ARRAY_LEN(z_names), NULL},
            [MOD_GZIP] = {gzip_names, ARRAY_LEN(gzip_names), "/src/gzip/gzip.c"},
    };

    /* A few stripped local functions in libcrypto: "libcrypto.so.3+0x..." frames. */
    return (struct synth_module_names){table[m].names, table[m].count, FN_STRIDE_SHIFT,
                                       m == MOD_CRYPTO ? 7 : 0, table[m].file};
}

static struct prof_lib lib_of(enum module m)
{
    return (struct prof_lib){.start = module_starts[m],
                             .end = module_starts[m] + (16u << 20),
                             .bias = module_starts[m],
                             .path = module_paths[m],
                             .name = module_basenames[m]};
}

static void init_modules(void)
{
    static const enum module server_mods[6] = {MOD_SERVER, MOD_LIBC,   MOD_STDCXX,
                                               MOD_SSL,    MOD_CRYPTO, MOD_Z};
    static const enum module gzip_mods[3] = {MOD_GZIP, MOD_LIBC, MOD_Z};
    size_t k = 0;

    for (size_t i = 0; i < SERVER_C_NAMES; i++)
        server_names[k++] = server_c_names[i];
    for (size_t n = 0; n < ARRAY_LEN(namespaces); n++)
        for (size_t c = 0; c < ARRAY_LEN(classes); c++)
            for (size_t m = 0; m < ARRAY_LEN(methods); m++) {
                char *s = server_cxx_storage[k - SERVER_C_NAMES];

                (void)snprintf(s, sizeof(server_cxx_storage[0]), "%s::%s::%s%s", namespaces[n],
                               classes[c], methods[m][0], methods[m][1]);
                server_names[k++] = s;
            }
    CHECK(k == SERVER_NAMES);
    for (size_t i = 0; i < 6; i++) {
        server_lib_array[i] = lib_of(server_mods[i]);
        server_lib_names[i] = names_of(server_mods[i]);
    }
    for (size_t i = 0; i < 3; i++) {
        gzip_lib_array[i] = lib_of(gzip_mods[i]);
        gzip_lib_names[i] = names_of(gzip_mods[i]);
    }
}

/* The address of a call site inside function fn of module m: the function's 64 bytes, at an
 * offset that depends on the call site, so that one function has a few frame rows. */
static uint64_t addr(enum module m, size_t fn, unsigned site)
{
    return module_starts[m] + ((uint64_t)fn << FN_STRIDE_SHIFT) + 5 + (site % 8) * 7;
}

static size_t find_name(const char *const *names, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (!strcmp(names[i], name))
            return i;
    fprintf(stderr, "gen-big-fleet: no function %s\n", name);
    exit(1);
}

static uint64_t named(enum module m, const char *name, unsigned site)
{
    struct synth_module_names n = names_of(m);

    return addr(m, find_name(n.functions, n.function_count, name), site);
}

/* The index of namespaces[n]::classes[c]::methods[m] in server_names. */
static size_t cxx_name(size_t n, size_t c, size_t m)
{
    return SERVER_C_NAMES + (n * ARRAY_LEN(classes) + c) * ARRAY_LEN(methods) + m;
}

/* ---- call paths --------------------------------------------------------------------------- */

/* One call path, root first. Samples draw paths from a thread kind's set, skewed to the
 * first ones, which are the roots of the others' prefixes: a call tree with hot paths. */
struct path {
    uint64_t frames[MAX_DEPTH];
    uint32_t depth;
};

enum thread_kind {
    KIND_MASTER,  /* the master's main thread: asleep in ppoll, now and then reaping */
    KIND_REQUEST, /* a worker's main thread: requests */
    KIND_IO,      /* TLS and compression */
    KIND_LOGGER,  /* asleep on a condition variable, now and then formatting */
    KIND_TIMER,   /* asleep in ppoll, tiny CPU */
    KIND_GZIP,    /* a helper's main thread */
    KIND_COUNT,
};

static struct path paths[KIND_COUNT][TEMPLATES];
static struct path sleep_paths[KIND_COUNT]; /* where a sleeping thread of that kind waits */

static void push(struct path *p, uint64_t frame)
{
    if (p->depth < MAX_DEPTH)
        p->frames[p->depth++] = frame;
}

/* The frames every path of a kind starts with: process or thread entry, then the loop. */
static void root_frames(enum thread_kind kind, struct path *p)
{
    p->depth = 0;
    if (kind == KIND_GZIP) {
        push(p, named(MOD_GZIP, "_start", 0));
        push(p, named(MOD_LIBC, "__libc_start_main_impl", 0));
        push(p, named(MOD_LIBC, "__libc_start_call_main", 0));
        push(p, named(MOD_GZIP, "main", 0));
        push(p, named(MOD_GZIP, "treat_file", 0));
        return;
    }
    if (kind == KIND_MASTER || kind == KIND_REQUEST) {
        push(p, named(MOD_SERVER, "_start", 0));
        push(p, named(MOD_LIBC, "__libc_start_main_impl", 0));
        push(p, named(MOD_LIBC, "__libc_start_call_main", 0));
        push(p, named(MOD_SERVER, "main", 0));
        if (kind == KIND_REQUEST)
            push(p, named(MOD_SERVER, "worker_main", 0));
        push(p, named(MOD_SERVER, "event_loop_run", 0));
        return;
    }
    push(p, named(MOD_LIBC, "clone3", 0));
    push(p, named(MOD_LIBC, "start_thread", 0));
    push(p, named(MOD_STDCXX, "execute_native_thread_routine", 0));
    push(p, named(MOD_STDCXX,
                  "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void "
                  "(server::IoThread::*)(), server::IoThread*> > >::_M_run()",
                  0));
    /* tls::Session::run() for the io threads, sched::Queue::run() for the others. */
    push(p, addr(MOD_SERVER, cxx_name(kind == KIND_IO ? 7 : 6, kind == KIND_IO ? 4 : 6, 2), 0));
}

/* A leaf sequence (callee chain, outermost first) in one of the libraries. */
static void leaf_frames(enum thread_kind kind, uint64_t *rng, struct path *p)
{
    static const char *const alloc[] = {"operator new(unsigned long)", "malloc", "_int_malloc"};
    static const char *const tls_write[] = {"SSL_write", "ssl3_write_bytes",
                                            "tls_write_records_default"};
    static const char *const tls_read[] = {"SSL_read", "ssl3_read_bytes", "ssl3_read_n"};
    static const char *const crypto_leaf[] = {"EVP_EncryptUpdate", "CRYPTO_gcm128_encrypt_ctr32",
                                              "aesni_gcm_encrypt"};
    static const char *const zlib[] = {"deflate", "deflate_slow", "longest_match"};
    unsigned site = rng_below(rng, 8);
    uint32_t pick = rng_below(rng, 10);

    if (kind == KIND_GZIP) {
        push(p, named(MOD_GZIP, "zip", site));
        if (pick < 7) {
            for (size_t i = 0; i < 2 + pick % 2; i++)
                push(p, named(MOD_Z, zlib[i], site));
        } else {
            push(p, named(MOD_GZIP, pick == 7 ? "file_read" : "flush_outbuf", site));
            push(p, named(MOD_LIBC, pick == 7 ? "read" : "write", site));
        }
        return;
    }
    if (kind == KIND_IO && pick < 6) {
        const char *const *chain = pick < 3 ? tls_write : tls_read;

        for (size_t i = 0; i < 3; i++)
            push(p, named(MOD_SSL, chain[i], site));
        for (size_t i = 0; i < 1 + pick % 3; i++)
            push(p, named(MOD_CRYPTO, crypto_leaf[i], site));
        return;
    }
    if (kind == KIND_IO && pick < 8) {
        for (size_t i = 0; i < 1 + pick % 3; i++)
            push(p, named(MOD_Z, zlib[i], site));
        return;
    }
    switch (pick) {
    case 0:
    case 1:
        for (size_t i = 0; i < 1 + pick + site % 2; i++)
            push(p, named(i ? MOD_LIBC : MOD_STDCXX, alloc[i], site));
        break;
    case 2:
        push(p, named(MOD_LIBC, "__memmove_avx_unaligned_erms", site));
        break;
    case 3:
        push(p, named(MOD_STDCXX, stdcxx_names[2 + site % 6], site));
        push(p, named(MOD_LIBC, "__memmove_avx_unaligned_erms", site));
        break;
    case 4:
        push(p, named(MOD_CRYPTO, "EVP_DigestUpdate", site));
        push(p, named(MOD_CRYPTO, "sha256_block_data_order_avx2", site));
        break;
    case 5:
        push(p, named(MOD_LIBC, "__GI___snprintf", site));
        push(p, named(MOD_LIBC, "__vfprintf_internal", site));
        break;
    case 6:
        push(p, named(MOD_LIBC, "pthread_mutex_lock", site));
        push(p, named(MOD_LIBC, "__lll_lock_wait", site));
        break;
    case 7:
        push(p, addr(MOD_CRYPTO, rng_below(rng, ARRAY_LEN(crypto_names)), site)); /* may be
                                                                                    stripped */
        break;
    default:
        break; /* the server's own code is the leaf */
    }
}

/* Builds the path set of a kind: path k extends a random earlier path's prefix (cut at a
 * random depth) with 5-40 server frames and a leaf chain, so paths share prefixes like a
 * real call tree. */
static void build_paths(enum thread_kind kind)
{
    uint64_t rng = 0x5eed0000u + (uint64_t)kind;
    uint64_t program = module_starts[kind == KIND_GZIP ? MOD_GZIP : MOD_SERVER];
    struct path root;

    root_frames(kind, &root);
    for (uint32_t k = 0; k < TEMPLATES; k++) {
        struct path *p = &paths[kind][k];
        uint32_t middle = kind == KIND_GZIP ? 1 + rng_below(&rng, 4) : 5 + rng_below(&rng, 36);

        *p = root;
        if (k > 0) {
            const struct path *parent = &paths[kind][rng_below(&rng, k)];
            uint32_t cut = root.depth + rng_below(&rng, parent->depth - root.depth + 1);

            /* The parent's prefix, without its leaf chain (the program's frames only). */
            while (cut > root.depth && (parent->frames[cut - 1] < program ||
                                        parent->frames[cut - 1] >= program + (16u << 20)))
                cut--;
            memcpy(p->frames, parent->frames, cut * sizeof(p->frames[0]));
            p->depth = cut;
        }
        for (uint32_t i = 0; i < middle && p->depth < MAX_DEPTH - 6; i++) {
            size_t fn = kind == KIND_GZIP ? 0 : SERVER_C_NAMES + rng_below(&rng, SERVER_CXX_NAMES);

            push(p, kind == KIND_GZIP ? named(MOD_GZIP, gzip_names[2 + rng_below(&rng, 8)],
                                              rng_below(&rng, 8))
                                      : addr(MOD_SERVER, fn, rng_below(&rng, 8)));
        }
        leaf_frames(kind, &rng, p);
    }

    root_frames(kind, &sleep_paths[kind]);
    switch (kind) {
    case KIND_LOGGER:
        push(&sleep_paths[kind],
             named(MOD_STDCXX, "std::condition_variable::wait(std::unique_lock<std::mutex>&)", 0));
        push(&sleep_paths[kind], named(MOD_LIBC, "pthread_cond_wait@@GLIBC_2.3.2", 0));
        push(&sleep_paths[kind], named(MOD_LIBC, "__futex_abstimed_wait_common", 0));
        break;
    case KIND_IO:
        push(&sleep_paths[kind], named(MOD_LIBC, "epoll_wait", 0));
        break;
    default:
        push(&sleep_paths[kind], named(MOD_LIBC, "ppoll", 0));
        break;
    }
}

/* ---- one process ------------------------------------------------------------------------- */

struct thread_plan {
    enum thread_kind kind;
    const char *name;
    double busy; /* share of ticks the thread runs */
};

struct process_plan {
    int32_t pid, ppid;
    const char *name;
    const char *product;
    uint64_t start_ns; /* CLOCK_MONOTONIC of its meta.startTime */
    uint32_t ticks;
    bool exited; /* a short-lived helper: an exit profile with a shutdown time */
    const struct thread_plan *threads;
    size_t thread_count;
    uint64_t seed;
};

static const struct thread_plan master_threads[] = {
        {KIND_MASTER, "main", 0.02},
        {KIND_TIMER, "timer", 0.01},
};
static const struct thread_plan worker_threads[] = {
        {KIND_REQUEST, "main", 0.85},  {KIND_IO, "io-0", 0.55},     {KIND_IO, "io-1", 0.35},
        {KIND_LOGGER, "logger", 0.08}, {KIND_TIMER, "timer", 0.01},
};
static const struct thread_plan gzip_threads[] = {{KIND_GZIP, "main", 0.97}};

/* Draws a path index skewed towards the first (hottest) paths. */
static uint32_t pick_path(uint64_t *rng)
{
    double u = rng_unit(rng);

    return (uint32_t)(u * u * u * TEMPLATES);
}

static void fill_process(const struct process_plan *pp, struct buf_chunked_buffer *b)
{
    uint64_t rng = pp->seed;
    bool started[8] = {false};
    uint32_t request = 0;

    CHECK(pp->thread_count <= 8);
    for (uint32_t tick = 1; tick <= pp->ticks; tick++) {
        uint64_t t = pp->start_ns + (uint64_t)tick * INTERVAL_NS;

        for (size_t i = 0; i < pp->thread_count; i++) {
            const struct thread_plan *tp = &pp->threads[i];
            int32_t tid = pp->pid + (int32_t)i;
            uint64_t frames[MAX_DEPTH];
            const struct path *path;
            struct prof_sample s = {.tid = tid, .time_ns = t + i * 1300};
            bool busy = rng_unit(&rng) < tp->busy;

            if (!busy && started[i] && rng_unit(&rng) < 0.9) {
                /* Did not run since the last sample: the sampler's cheap entry. */
                CHECK(prof_entry_put_same_sample(b, tid, s.time_ns) == 0);
                continue;
            }
            path = busy ? &paths[tp->kind][pick_path(&rng)] : &sleep_paths[tp->kind];
            for (uint32_t d = 0; d < path->depth; d++) /* innermost first */
                frames[d] = path->frames[path->depth - 1 - d];
            s.frames = frames;
            s.frame_count = path->depth;
            /* Running: most of the interval, varying; woken briefly: a few microseconds. */
            s.cpu_delta_ns = busy ? (uint64_t)(INTERVAL_NS * (0.45 + 0.55 * rng_unit(&rng)))
                                  : 2000 + rng_below(&rng, 30000);
            CHECK(prof_entry_put_sample(b, &s) == 0);
            started[i] = true;
        }
        if (pp->threads[0].kind == KIND_REQUEST && tick % 23 == 0) {
            char text[64];
            struct prof_marker m = {.tid = pp->pid,
                                    .category = PROF_CATEGORY_NETWORK,
                                    .phase = PROF_PHASE_INTERVAL,
                                    .start_ns = t - 1000 * (200 + rng_below(&rng, 20000)),
                                    .end_ns = t,
                                    .name = {"Request", 7},
                                    .payload_kind = PROF_PAYLOAD_TEXT};

            m.text.len = (size_t)snprintf(text, sizeof(text), "GET /api/v1/items/%" PRIu32,
                                          request++ * 7919 % 100000);
            m.text.data = text;
            CHECK(prof_entry_put_marker(b, &m) == 0);
        }
        if (tick % 100 == 0) {
            struct prof_counter_sample c = {0, t, (int64_t)rng_below(&rng, 64) * 4096 - 126976, 1};

            CHECK(prof_entry_put_counter(b, &c) == 0);
        }
    }
}

/* Writes the process's profile to path; returns its size in bytes. */
static size_t write_process(const struct process_plan *pp, const char *path)
{
    static const struct prof_counter_info counters[] = {{0, "RSS", "Memory", "resident set size"}};
    struct prof_thread_info threads[8];
    bool helper = pp->threads[0].kind == KIND_GZIP;
    struct prof_symbolizer symbolizer = {synth_resolve, helper ? &gzip_symbols : &server_symbols};
    struct prof_process_info info = {
            .pid = pp->pid,
            .ppid = pp->ppid,
            .name = pp->name,
            .product = pp->product,
            .process_type = "default",
            .start_ns = pp->start_ns,
            .start_epoch_ms = START_EPOCH_MS + (double)(pp->start_ns - START_NS) / 1e6,
            .shutdown_ns = pp->exited ? pp->start_ns + (pp->ticks + 1) * INTERVAL_NS : 0,
            .interval_ns = INTERVAL_NS,
            .stackwalk = "dwarf",
            .threads = threads,
            .thread_count = pp->thread_count,
            .counters = counters,
            .counter_count = 1,
            .libs = helper ? &gzip_libs : &server_libs,
            .exit_profile = pp->exited,
    };
    struct buf_chunk_manager *manager;
    struct buf_chunked_buffer *buffer;
    char *json;
    size_t len;

    for (size_t i = 0; i < pp->thread_count; i++)
        threads[i] = (struct prof_thread_info){pp->pid + (int32_t)i, pp->threads[i].name,
                                               pp->start_ns + i * 20000, 0, i == 0};
    /* Room for every entry (at most ~600 bytes a tick and thread): nothing is overwritten. */
    synth_buffer_new((uint64_t)pp->ticks * pp->thread_count * 640 + (4u << 20), pp->pid, &manager,
                     &buffer);
    fill_process(pp, buffer);
    synth_write_profile(&info, buffer, &symbolizer, &json, &len);
    synth_write_file(path, json, len);
    free(json);
    synth_buffer_free(manager, buffer);
    return len;
}

/* ---- the fleet --------------------------------------------------------------------------- */

static const char *fleetprof_cli(char *buf, size_t size)
{
    const char *env = getenv("FLEETPROF_CLI");
    ssize_t n;
    char *slash;

    if (env && env[0])
        return env;
    n = readlink("/proc/self/exe", buf, size - 1);
    CHECK(n > 0);
    buf[n] = '\0';
    slash = strrchr(buf, '/');
    CHECK(slash);
    *slash = '\0';
    CHECK(strlen(buf) + sizeof("/../../tools/fleetprof") <= size);
    strcat(buf, "/../../tools/fleetprof"); /* build/tests/bench -> build/tools */
    return buf;
}

static double self_cpu_s(int who)
{
    struct rusage ru;

    (void)getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    static char names[MAX_PROCESSES][48], paths_buf[MAX_PROCESSES][PATH_MAX];
    static char *merge_argv[MAX_PROCESSES + 8];
    char cli_buf[PATH_MAX], out[PATH_MAX], procs[PATH_MAX - 64];
    const char *cli;
    double target;
    size_t total = 0, count = 0, workers = 0, helpers = 0;
    uint64_t start_ns = START_NS;
    struct stat st;
    int status;
    pid_t child;

    if (argc != 3 || atof(argv[2]) <= 0) {
        fprintf(stderr, "usage: gen-big-fleet OUTDIR MB   (writes OUTDIR/fleet.json >= MB*1e6 "
                        "bytes)\n");
        return 2;
    }
    target = atof(argv[2]) * 1e6;
    cli = fleetprof_cli(cli_buf, sizeof(cli_buf));
    CHECK(access(cli, X_OK) == 0);
    init_modules();
    for (int k = 0; k < KIND_COUNT; k++)
        build_paths((enum thread_kind)k);
    (void)snprintf(procs, sizeof(procs), "%s/procs", argv[1]);
    CHECK((mkdir(argv[1], 0755) == 0 || errno == EEXIST) &&
          (mkdir(procs, 0755) == 0 || errno == EEXIST));

    /* Processes until their profiles add up to 1 % more than asked: merging moves each
     * process's profilingLog to the top level and drops nothing else. */
    while (total < target * 1.01) {
        struct process_plan pp = {.ppid = MASTER_PID, .start_ns = start_ns};

        CHECK(count < MAX_PROCESSES);
        if (count == 0) {
            pp = (struct process_plan){.pid = MASTER_PID,
                                       .ppid = 1,
                                       .name = "server: master",
                                       .product = "server --workers 64 --port 8443",
                                       .start_ns = START_NS,
                                       .ticks = WORKER_TICKS + 400,
                                       .threads = master_threads,
                                       .thread_count = ARRAY_LEN(master_threads),
                                       .seed = 1};
        } else if (workers % 10 == 0 && helpers < workers / 10 * 2) {
            (void)snprintf(names[count], sizeof(names[0]), "gzip");
            pp.pid = HELPER_PID + (int32_t)helpers * 3;
            pp.name = names[count];
            pp.product = "gzip -9 /var/log/server/access.log.1";
            pp.start_ns = START_NS + 2000000000ull + helpers * 700000000ull;
            pp.ticks = HELPER_TICKS + (uint32_t)(helpers % 5) * 40;
            pp.exited = true;
            pp.threads = gzip_threads;
            pp.thread_count = 1;
            pp.seed = 1000 + helpers++;
        } else {
            workers++;
            (void)snprintf(names[count], sizeof(names[0]), "server: worker %zu", workers);
            pp.pid = MASTER_PID + (int32_t)workers * 8;
            pp.name = names[count];
            pp.product = "server --workers 64 --port 8443";
            pp.start_ns = START_NS + 30000000ull + workers * 5000000ull;
            pp.ticks = WORKER_TICKS - (uint32_t)(workers % 7) * 250;
            pp.threads = worker_threads;
            pp.thread_count = ARRAY_LEN(worker_threads);
            pp.seed = 2000 + workers;
        }
        (void)snprintf(paths_buf[count], sizeof(paths_buf[0]), "%s/%d.json", procs, pp.pid);
        total += write_process(&pp, paths_buf[count]);
        count++;
    }

    (void)snprintf(out, sizeof(out), "%s/fleet.json", argv[1]);
    merge_argv[0] = (char *)cli;
    merge_argv[1] = (char *)"merge";
    merge_argv[2] = (char *)"-o";
    merge_argv[3] = out;
    for (size_t i = 0; i < count; i++)
        merge_argv[4 + i] = paths_buf[i];
    merge_argv[4 + count] = NULL;
    (void)fflush(stdout);
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        execv(cli, merge_argv);
        fprintf(stderr, "gen-big-fleet: %s: %s\n", cli, strerror(errno));
        _exit(127);
    }
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "gen-big-fleet: fleetprof merge failed (status %d)\n", status);
        return 1;
    }
    for (size_t i = 0; i < count; i++)
        (void)unlink(paths_buf[i]);
    (void)rmdir(procs);
    CHECK(stat(out, &st) == 0);
    if ((double)st.st_size < target) {
        fprintf(stderr, "gen-big-fleet: %s is %lld bytes, below the %.0f asked\n", out,
                (long long)st.st_size, target);
        return 1;
    }
    printf("gen-big-fleet: %s: %.1f MB, %zu processes (%zu workers, %zu helpers), "
           "%.2f s CPU (%.2f s writing, %.2f s merging)\n",
           out, (double)st.st_size / 1e6, count, workers, helpers,
           self_cpu_s(RUSAGE_SELF) + self_cpu_s(RUSAGE_CHILDREN), self_cpu_s(RUSAGE_SELF),
           self_cpu_s(RUSAGE_CHILDREN));
    return 0;
}
