/* tests/unit/profile/test-gecko.c - how the profile writer names native frames (gecko.h,
 * prof_frame_format_location): by symbol, by module and offset when no symbol covers the
 * address, with the vdso caller for unnamed vdso code, and by address only outside every
 * module.
 *
 * The guaranteed unnamed code is libsym-unnamed.so's static hot function (linked
 * --strip-all: no symbol covers it on any kernel). Its expected offset is computed here,
 * independently of the code under test: its address minus the load bias that
 * dl_iterate_phdr() reports for the object containing it. Samples are real addresses put in a
 * buffer as the sampler would, written through the local symbolizer (libdw) and without one.
 *
 * The runtime's own frames (a module named libfleetprof*) go under a "fleetprof" pseudo-frame
 * in the Profiler category: checked on synthetic modules and a fake symbolizer, each sample's
 * stack read back from the parsed profile.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/entry.h"
#include "json-check.h"
#include "json/reader.h"
#include "json/writer.h"
#include "profile/entries.h"
#include "profile/gecko.h"
#include "profile/libs.h"
#include "profile/symbolize-local.h"
#include "profile/symbols.h"
#include "sym-lib.h"
#include "sym-unnamed.h"
#include "testlib.h"

#define PID 4242

static uintptr_t probe_return; /* a return address inside libsym-unnamed.so's hot function */

SYM_NOINLINE static void probe(void)
{
    probe_return = (uintptr_t)__builtin_return_address(0);
}

/* A function of this program, named by its .symtab; used as a leaf. */
SYM_NOINLINE void test_gecko_leaf(void);

SYM_NOINLINE void test_gecko_leaf(void)
{
    probe_return += 0; /* a body that cannot be folded into another function */
}

/* --- the formatter ----------------------------------------------------------------------- */

static void test_format_location(void **state)
{
    struct prof_frame_name name = {.function = "sym_lib_global_fn", .module = "libsym-lib.so"};
    char buf[96];

    (void)state;
    assert_int_equal(prof_frame_format_location(&name, buf, sizeof(buf)),
                     (int)strlen("sym_lib_global_fn (in libsym-lib.so)"));
    assert_string_equal(buf, "sym_lib_global_fn (in libsym-lib.so)");
    name.module = NULL;
    assert_int_equal(prof_frame_format_location(&name, buf, sizeof(buf)), 17);
    assert_string_equal(buf, "sym_lib_global_fn");

    /* No symbol, in a module: module+offset, in that module; the caller when given. */
    name = (struct prof_frame_name){.module = "libfoo.so", .offset = 0x1a2c, .address = 0x7f00};
    assert_int_equal(prof_frame_format_location(&name, buf, sizeof(buf)),
                     (int)strlen("libfoo.so+0x1a2c (in libfoo.so)"));
    assert_string_equal(buf, "libfoo.so+0x1a2c (in libfoo.so)");
    name = (struct prof_frame_name){
            .module = "[vdso]", .offset = 0x8f0, .caller = "__vdso_clock_gettime"};
    assert_true(prof_frame_format_location(&name, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "[vdso]+0x8f0 (called from __vdso_clock_gettime) (in [vdso])");

    /* In no module: the runtime address, the front-end's unsymbolicated form. */
    name = (struct prof_frame_name){.offset = 0x10, .caller = "x", .address = 0x7f3a12c4};
    assert_int_equal(prof_frame_format_location(&name, buf, sizeof(buf)), 10);
    assert_string_equal(buf, "0x7f3a12c4");
    name.address = 0xabcdef0123456789u;
    assert_int_equal(prof_frame_format_location(&name, buf, sizeof(buf)), 18);
    assert_string_equal(buf, "0xabcdef0123456789");

    /* Too small: a truncated prefix, -ENOSPC. Bad arguments: -EINVAL. */
    name = (struct prof_frame_name){.function = "sym_lib_global_fn", .module = "libsym-lib.so"};
    assert_int_equal(prof_frame_format_location(&name, buf, 10), -ENOSPC);
    assert_string_equal(buf, "sym_lib_g");
    assert_int_equal(prof_frame_format_location(&name, NULL, 10), -EINVAL);
    assert_int_equal(prof_frame_format_location(&name, buf, 0), -EINVAL);
    assert_int_equal(prof_frame_format_location(NULL, buf, sizeof(buf)), -EINVAL);
}

/* --- whole profiles ---------------------------------------------------------------------- */

struct find_bias {
    uintptr_t addr;
    const char *name; /* borrowed from the loader */
    uintptr_t bias;
};

static int on_object(struct dl_phdr_info *info, size_t size, void *data)
{
    struct find_bias *fb = data;

    (void)size;
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;

        if (ph->p_type == PT_LOAD && fb->addr >= start && fb->addr < start + ph->p_memsz) {
            fb->name = info->dlpi_name;
            fb->bias = info->dlpi_addr;
            return 1;
        }
    }
    return 0;
}

/* The load bias of the object containing addr, as the loader reports it; asserts that
 * object's file name ends in want. */
static uintptr_t load_bias(uintptr_t addr, const char *want)
{
    struct find_bias fb = {.addr = addr};
    size_t n, w = strlen(want);

    assert_int_equal(dl_iterate_phdr(on_object, &fb), 1);
    assert_non_null(fb.name);
    n = strlen(fb.name);
    if (n < w || strcmp(fb.name + n - w, want) != 0)
        fail_msg("0x%" PRIxPTR " is in %s, not %s", addr, fb.name, want);
    return fb.bias;
}

struct sample_spec {
    int32_t tid;
    size_t count;
    uint64_t frames[4]; /* innermost first: a PC, then return addresses */
};

/* Writes one process profile of samples; returns its JSON text (caller frees). */
static char *write_profile(const struct prof_libs *libs, const struct sample_spec *samples,
                           size_t count, const struct prof_symbolizer *symbolizer)
{
    static const struct prof_thread_info threads[] = {{PID, "main", 1000, 0, true},
                                                      {PID + 1, "other", 1000, 0, false}};
    struct prof_process_info info = {
            .pid = PID,
            .ppid = 1,
            .name = "test-profile-gecko",
            .product = "test-profile-gecko",
            .process_type = "default",
            .start_ns = 1000,
            .start_epoch_ms = 1.7e12,
            .interval_ns = 1000000,
            .stackwalk = "dwarf",
            .threads = threads,
            .thread_count = 2,
            .libs = libs,
    };
    struct buf_chunk_manager *manager = NULL;
    struct buf_chunked_buffer *buffer = NULL;
    struct json_writer *w = NULL;
    char *text = NULL;

    assert_int_equal(buf_chunk_manager_local_new(1u << 20, 64u << 10, &manager), 0);
    assert_int_equal(buf_chunked_buffer_new(manager, PID, &buffer), 0);
    for (size_t i = 0; i < count; i++) {
        struct prof_sample s = {.tid = samples[i].tid,
                                .time_ns = 2000 + i * 1000,
                                .frame_count = (uint32_t)samples[i].count,
                                .frames = samples[i].frames};

        assert_int_equal(prof_entry_put_sample(buffer, &s), 0);
    }
    assert_int_equal(json_writer_new_memory(&w), 0);
    assert_int_equal(prof_gecko_write_process(w, NULL, &info, buffer, symbolizer, NULL), 0);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &text), 0);
    assert_true(test_json_valid(text, json_writer_length(w)));
    json_writer_free(w);
    buf_chunked_buffer_free(buffer);
    buf_chunk_manager_free(manager);
    return text;
}

/* Asserts that the profile holds the string location (quoted: a whole string of the
 * string table) or, with present false, that it does not. */
static void expect_location(const char *json, const char *location, bool present)
{
    char quoted[512];

    assert_true((size_t)snprintf(quoted, sizeof(quoted), "\"%s\"", location) < sizeof(quoted));
    if (present && !strstr(json, quoted))
        fail_msg("no frame %s in the profile", quoted);
    if (!present && strstr(json, quoted))
        fail_msg("frame %s should not be in the profile", quoted);
}

/* A PC inside a known module that no symbol covers is "module+0xOFFSET (in module)", with
 * the offset from the module's load base: with a symbolizer the offset of its function's
 * start (from .eh_frame: every address of the function is one entry), without one the
 * instruction's own. Named code keeps its name; only an address outside every module stays
 * bare. */
static void test_unnamed_code_gets_module_and_offset(void **state)
{
    uintptr_t hot = sym_unnamed_hot_addr(), run = (uintptr_t)&sym_unnamed_run, bias;
    const struct prof_lib *lib;
    struct prof_libs libs = {0};
    struct prof_symbols *symbols = NULL;
    struct prof_symbolizer local;
    char *with_symbols, *without, name[128];
    int on_stack = 0;
    uintptr_t nowhere = (uintptr_t)&on_stack; /* the stack: no module */

    (void)state;
    sym_unnamed_run(probe);
    bias = load_bias(hot, "/libsym-unnamed.so");
    assert_true(probe_return > hot);
    assert_int_equal(load_bias(probe_return, "/libsym-unnamed.so"), bias);

    assert_int_equal(prof_libs_collect_self(&libs), 0);
    lib = prof_libs_lookup(&libs, hot);
    assert_non_null(lib);
    assert_string_equal(lib->name, "libsym-unnamed.so");
    assert_null(prof_libs_lookup(&libs, nowhere));
    assert_int_equal(prof_symbols_new(0, &symbols), 0);
    local = prof_symbolizer_local(symbols);

    const struct sample_spec samples[] = {
            {PID, 1, {hot}},                                       /* PC at its entry */
            {PID, 2, {(uintptr_t)&test_gecko_leaf, probe_return}}, /* a caller frame in it */
            {PID, 1, {run}},                                       /* an exported function */
            {PID, 2, {nowhere, (uintptr_t)&test_gecko_leaf + 1}},  /* outside every module */
    };
    with_symbols = write_profile(&libs, samples, 4, &local);
    without = write_profile(&libs, samples, 4, NULL);

    /* The leaf PC: hot - bias. The caller frame: its return address - 1 (the call). */
    (void)snprintf(name, sizeof(name), "libsym-unnamed.so+0x%" PRIxPTR " (in libsym-unnamed.so)",
                   hot - bias);
    expect_location(with_symbols, name, true);
    expect_location(without, name, true);
    (void)snprintf(name, sizeof(name), "libsym-unnamed.so+0x%" PRIxPTR " (in libsym-unnamed.so)",
                   probe_return - 1 - bias);
    /* The call inside the hot function: by the symbolizer, the function's start (the leaf's
     * name above); without one, the call's own offset. */
    expect_location(with_symbols, name, false);
    expect_location(without, name, true);
    /* Never a bare address for them. */
    (void)snprintf(name, sizeof(name), "0x%" PRIxPTR, hot);
    expect_location(with_symbols, name, false);
    expect_location(without, name, false);
    (void)snprintf(name, sizeof(name), "0x%" PRIxPTR, probe_return);
    expect_location(with_symbols, name, false);

    /* The library is readable: its exported function, and this program's, have names. */
    expect_location(with_symbols, "sym_unnamed_run (in libsym-unnamed.so)", true);
    expect_location(with_symbols, "test_gecko_leaf (in test-profile-gecko)", true);
    /* Without a symbolizer they are unnamed code too. */
    (void)snprintf(name, sizeof(name), "libsym-unnamed.so+0x%" PRIxPTR " (in libsym-unnamed.so)",
                   run - bias);
    expect_location(without, name, true);

    /* Outside every module: the address, for the front-end. */
    (void)snprintf(name, sizeof(name), "0x%" PRIxPTR, nowhere);
    expect_location(with_symbols, name, true);

    free(with_symbols);
    free(without);
    prof_symbols_free(symbols);
    prof_libs_done(&libs);
}

/* Unnamed vdso code (on some kernels clock_gettime's hot path is a local function of the
 * vdso) gets the vdso function it was called from, when the caller frame says so. The PCs
 * are in the vdso's mapped ELF header, which no function covers on any kernel; the callers
 * are real return-address positions inside the vdso's exported functions. */
static void test_unnamed_vdso_code_names_its_caller(void **state)
{
    void *h = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
    uintptr_t gettime = h ? (uintptr_t)dlsym(h, "__vdso_clock_gettime") : 0;
    uintptr_t gettimeofday = h ? (uintptr_t)dlsym(h, "__vdso_gettimeofday") : 0;
    const struct prof_lib *vdso;
    struct prof_libs libs = {0};
    struct prof_symbols *symbols = NULL;
    struct prof_symbolizer local;
    char *json, name[160];
    uint64_t pc[3];

    (void)state;
    if (!getauxval(AT_SYSINFO_EHDR) || !gettime || !gettimeofday) {
        if (h)
            (void)dlclose(h);
        skip(); /* no vdso, or one without these functions (not x86-64 Linux) */
    }
    assert_int_equal(prof_libs_collect_self(&libs), 0);
    vdso = prof_libs_lookup(&libs, gettime);
    assert_non_null(vdso);
    assert_string_equal(vdso->name, "[vdso]");
    assert_ptr_equal(prof_libs_lookup(&libs, gettimeofday), vdso);
    for (size_t i = 0; i < 3; i++) {
        pc[i] = vdso->start + 0x10 + 0x10 * i;
        assert_null(prof_vdso_function(pc[i] - vdso->bias)); /* really unnamed */
    }
    assert_int_equal(prof_symbols_new(0, &symbols), 0);
    local = prof_symbolizer_local(symbols);

    /* pc[0]: always called from clock_gettime. pc[1]: from clock_gettime in one thread and
     * gettimeofday in another: no caller can be named. pc[2]: its caller frame is outside the
     * vdso (a frame-pointer walk may skip the vdso's own frame): nothing to say. */
    const struct sample_spec samples[] = {
            {PID, 2, {pc[0], gettime + 5}},
            {PID + 1, 2, {pc[0], gettime + 5}},
            {PID, 2, {pc[1], gettime + 5}},
            {PID + 1, 2, {pc[1], gettimeofday + 5}},
            {PID, 2, {pc[2], (uintptr_t)&test_gecko_leaf + 1}},
    };
    json = write_profile(&libs, samples, 5, &local);

    expect_location(json, "__vdso_clock_gettime (in [vdso])", true);
    expect_location(json, "__vdso_gettimeofday (in [vdso])", true);
    (void)snprintf(name, sizeof(name),
                   "[vdso]+0x%" PRIx64 " (called from __vdso_clock_gettime) (in [vdso])",
                   pc[0] - vdso->bias);
    expect_location(json, name, true);
    for (size_t i = 1; i < 3; i++) {
        (void)snprintf(name, sizeof(name), "[vdso]+0x%" PRIx64 " (in [vdso])", pc[i] - vdso->bias);
        expect_location(json, name, true);
        (void)snprintf(name, sizeof(name), "0x%" PRIx64, pc[i]);
        expect_location(json, name, false);
    }
    free(json);
    prof_symbols_free(symbols);
    prof_libs_done(&libs);
    (void)dlclose(h);
}

/* --- the runtime's frames: under the "fleetprof" pseudo-frame ------------------------- */

/* Synthetic modules, sorted and disjoint, and the functions in them: each takes 0x100 bytes
 * from its offset. Stacks use function + 0x10, a PC or a return address inside it. */
static char prog_name[] = "program", ld_name[] = "ld-linux-x86-64.so.2", libc_name[] = "libc.so.6",
            rt_name[] = "libfleetprof.so.0.1.0", other_name[] = "libother.so";
static struct prof_lib fake_lib_array[] = {
        {.start = 0x400000, .end = 0x500000, .bias = 0, .name = prog_name},
        {.start = 0x7f0000000000, .end = 0x7f0000100000, .bias = 0x7f0000000000, .name = ld_name},
        {.start = 0x7f1000000000, .end = 0x7f1000100000, .bias = 0x7f1000000000, .name = libc_name},
        {.start = 0x7f2000000000, .end = 0x7f2000100000, .bias = 0x7f2000000000, .name = rt_name},
};
static const struct prof_libs fake_libs = {fake_lib_array, 4};

#define PROG(off) (0x400000u + (off))
#define LD(off)   (0x7f0000000000u + (off))
#define LIBC(off) (0x7f1000000000u + (off))
#define RT(off)   (0x7f2000000000u + (off))

static const struct {
    const char *module, *function;
    uint64_t vaddr;
} fake_functions[] = {
        {"program", "main", PROG(0x1000)},
        {"program", "work", PROG(0x1100)},
        {"program", "program_callback", PROG(0x1200)},
        {"ld-linux-x86-64.so.2", "_dl_start_user", 0x1000},
        {"ld-linux-x86-64.so.2", "_dl_init", 0x1100},
        {"ld-linux-x86-64.so.2", "call_init", 0x1200},
        {"libc.so.6", "clock_gettime", 0x1000},
        {"libc.so.6", "pthread_sigmask", 0x1100},
        {"libc.so.6", "write", 0x1200},
        {"libfleetprof.so.0.1.0", "fleetprof_group_end", 0x1000},
        {"libfleetprof.so.0.1.0", "commit_event", 0x1100},
        {"libfleetprof.so.0.1.0", "fleetprof_init", 0x1200},
        {"libfleetprof.so.0.1.0", "start_locked", 0x1300},
        {"libother.so", "fleetprof_group_end", 0x1000},
        {"libother.so", "commit_event", 0x1100},
};

static int fake_resolve(void *userdata, const struct prof_frame_request *requests, size_t count,
                        struct prof_frame_result *results)
{
    (void)userdata;
    for (size_t i = 0; i < count; i++)
        for (size_t f = 0; f < sizeof(fake_functions) / sizeof(fake_functions[0]); f++)
            if (!strcmp(requests[i].lib->name, fake_functions[f].module) &&
                requests[i].vaddr >= fake_functions[f].vaddr &&
                requests[i].vaddr < fake_functions[f].vaddr + 0x100)
                results[i].function = fake_functions[f].function;
    return 0;
}

static const struct prof_symbolizer fake_symbolizer = {fake_resolve, NULL};

struct stack_spec {
    uint32_t flags;
    size_t count;
    uint64_t root_first[8]; /* function addresses, root first */
    uint32_t label_count;
    struct prof_label labels[2];
};

/* Raw entries put into the buffer after the samples, or NULL. */
static void (*put_extra)(struct buf_chunked_buffer *buffer);

/* Writes one process profile of the samples of stacks (thread PID, 1 ms apart), with libs;
 * recovered as meta.fleetprof.recovered. Parses it back (caller frees *ret_doc). */
static const struct json_value *write_stacks(const struct prof_libs *libs,
                                             const struct stack_spec *stacks, size_t count,
                                             const char *recovered, struct json_doc **ret_doc)
{
    static const struct prof_thread_info threads[] = {{PID, "main", 1000, 0, true}};
    struct prof_process_info info = {
            .pid = PID,
            .ppid = 1,
            .name = "program",
            .process_type = "default",
            .start_ns = 1000,
            .start_epoch_ms = 1.7e12,
            .interval_ns = 1000000,
            .stackwalk = "dwarf",
            .threads = threads,
            .thread_count = 1,
            .libs = libs,
            .recovered = recovered,
    };
    struct buf_chunk_manager *manager = NULL;
    struct buf_chunked_buffer *buffer = NULL;
    struct json_writer *w = NULL;
    struct json_read_error error;
    char *text = NULL;

    assert_int_equal(buf_chunk_manager_local_new(1u << 20, 64u << 10, &manager), 0);
    assert_int_equal(buf_chunked_buffer_new(manager, PID, &buffer), 0);
    for (size_t i = 0; i < count; i++) {
        uint64_t frames[8];
        struct prof_sample s = {.tid = PID,
                                .time_ns = 2000000 + i * 1000000,
                                .flags = stacks[i].flags,
                                .frame_count = (uint32_t)stacks[i].count,
                                .frames = frames,
                                .label_count = stacks[i].label_count,
                                .labels = stacks[i].labels};

        for (size_t k = 0; k < stacks[i].count; k++) /* innermost first, inside each function */
            frames[k] = stacks[i].root_first[stacks[i].count - 1 - k] + 0x10;
        assert_int_equal(prof_entry_put_sample(buffer, &s), 0);
    }
    if (put_extra)
        put_extra(buffer);
    assert_int_equal(json_writer_new_memory(&w), 0);
    assert_int_equal(prof_gecko_write_process(w, NULL, &info, buffer, &fake_symbolizer, NULL), 0);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &text), 0);
    if (json_doc_parse(text, json_writer_length(w), 0, ret_doc, &error) < 0)
        fail_msg("not JSON: %lu:%lu %s", error.line, error.column, error.message);
    free(text);
    json_writer_free(w);
    buf_chunked_buffer_free(buffer);
    buf_chunk_manager_free(manager);
    return json_doc_root(*ret_doc);
}

static const struct json_value *get(const struct json_doc *doc, const struct json_value *v,
                                    const char *key)
{
    const struct json_value *r = json_object_get(doc, v, key);

    if (!r)
        fail_msg("no key %s", key);
    return r;
}

static int64_t get_index(const struct json_doc *doc, const struct json_value *row,
                         const struct json_value *table, const char *column)
{
    int64_t col = -1, n = -1;
    const struct json_value *v;

    assert_int_equal(json_value_int64(doc, get(doc, get(doc, table, "schema"), column), &col), 0);
    v = json_array_at(doc, row, (size_t)col);
    if (json_value_type(v) == JSON_NULL)
        return -1;
    assert_int_equal(json_value_int64(doc, v, &n), 0);
    return n;
}

/* The stack of sample i of the process's only thread, root first, each frame as
 * "function:category" (the location without " (in module)", the category's index): what the
 * front-end's call tree shows. Also returns the sample's stack index. */
static int64_t sample_path(const struct json_doc *doc, const struct json_value *root, size_t i,
                           char *buf, size_t size)
{
    const struct json_value *t = json_array_at(doc, get(doc, root, "threads"), 0);
    const struct json_value *frames = get(doc, t, "frameTable"),
                            *stacks = get(doc, t, "stackTable");
    const struct json_value *samples = get(doc, t, "samples"),
                            *strings = get(doc, t, "stringTable");
    const struct json_value *row = json_array_at(doc, get(doc, samples, "data"), i);
    int64_t stack, chain[64];
    size_t depth = 0, used = 0;

    assert_non_null(row);
    stack = get_index(doc, row, samples, "stack");
    for (int64_t s = stack; s >= 0; depth++) {
        const struct json_value *srow = json_array_at(doc, get(doc, stacks, "data"), (size_t)s);

        assert_true(depth < 64);
        chain[depth] = get_index(doc, srow, stacks, "frame");
        s = get_index(doc, srow, stacks, "prefix");
    }
    buf[0] = '\0';
    while (depth-- > 0) {
        const struct json_value *frow =
                json_array_at(doc, get(doc, frames, "data"), (size_t)chain[depth]);
        const char *loc = json_value_string(
                doc, json_array_at(doc, strings, (size_t)get_index(doc, frow, frames, "location")),
                NULL);
        const char *in = strstr(loc, " (in ");
        int n = snprintf(buf + used, size - used, "%s%.*s:%" PRId64, used ? ";" : "",
                         (int)(in ? (size_t)(in - loc) : strlen(loc)), loc,
                         get_index(doc, frow, frames, "category"));

        assert_true(n > 0 && (size_t)n < size - used);
        used += (size_t)n;
    }
    return stack;
}

static void expect_path(const struct json_doc *doc, const struct json_value *root, size_t i,
                        const char *want)
{
    char got[1024];

    (void)sample_path(doc, root, i, got, sizeof(got));
    if (strcmp(got, want) != 0)
        fail_msg("sample %zu:\n  got  %s\n  want %s", i, got, want);
}

/* Rows of the thread's frame table named name. */
static size_t frames_named(const struct json_doc *doc, const struct json_value *root,
                           const char *name)
{
    const struct json_value *t = json_array_at(doc, get(doc, root, "threads"), 0);
    const struct json_value *frames = get(doc, t, "frameTable"), *data = get(doc, frames, "data");
    const struct json_value *strings = get(doc, t, "stringTable");
    size_t n = 0;

    for (size_t i = 0; i < json_value_len(data); i++) {
        int64_t loc = get_index(doc, json_array_at(doc, data, i), frames, "location");

        n += !strcmp(json_value_string(doc, json_array_at(doc, strings, (size_t)loc), NULL), name);
    }
    return n;
}

/* Categories by index: 2 Native, 7 Application, 8 Profiler, as written in meta. */
static void expect_categories(const struct json_doc *doc, const struct json_value *root)
{
    const struct json_value *cats = get(doc, get(doc, root, "meta"), "categories");

    assert_string_equal(json_value_string(doc, get(doc, json_array_at(doc, cats, 2), "name"), NULL),
                        "Native");
    assert_string_equal(json_value_string(doc, get(doc, json_array_at(doc, cats, 8), "name"), NULL),
                        "Profiler");
}

/* A stack through the runtime gets "fleetprof" (Profiler) just above the runtime's outermost
 * frame; that frame and all below it are Profiler, libc included; the program's frames
 * above keep Native. One pseudo-frame however often the runtime calls back into the program,
 * the same libc function elsewhere stays Native, and the stack prefix the writer remembers
 * between samples keeps all of this. */
static void test_runtime_frames_under_pseudo_frame(void **state)
{
    const struct stack_spec stacks[] = {
            /* 0: the performance-group API in the program's work */
            {.count = 5,
             .root_first = {PROG(0x1000), PROG(0x1100), RT(0x1000), RT(0x1100), LIBC(0x1000)}},
            /* 1: the same down through the runtime, another leaf (the remembered prefix) */
            {.count = 5,
             .root_first = {PROG(0x1000), PROG(0x1100), RT(0x1000), RT(0x1100), LIBC(0x1200)}},
            /* 2: the program calls the same libc function itself */
            {.count = 3, .root_first = {PROG(0x1000), PROG(0x1100), LIBC(0x1000)}},
            /* 3: start-up, from the loader's constructor call */
            {.count = 6,
             .root_first = {LD(0x1000), LD(0x1100), LD(0x1200), RT(0x1200), RT(0x1300),
                            LIBC(0x1100)}},
            /* 4: the runtime calls back into the program, which calls the runtime again */
            {.count = 4, .root_first = {PROG(0x1000), RT(0x1200), PROG(0x1200), RT(0x1100)}},
            /* 5: as 0 again, after others */
            {.count = 5,
             .root_first = {PROG(0x1000), PROG(0x1100), RT(0x1000), RT(0x1100), LIBC(0x1000)}},
            /* 6: a label of the program's work (Application, under work), one on top (I/O) */
            {.count = 4,
             .root_first = {PROG(0x1000), PROG(0x1100), RT(0x1000), RT(0x1100)},
             .label_count = 2,
             .labels = {{{"Startup::Work", 13}, PROF_CATEGORY_APP, 2, 0, 0},
                        {{"inner", 5}, PROF_CATEGORY_IO, 0, 0, 0}}},
            /* 7: the runtime at the root */
            {.count = 2, .root_first = {RT(0x1200), LIBC(0x1100)}},
            /* 8: no stack, with its reason: unchanged */
            {.flags = PROF_SAMPLE_BLOCKED_SINCE_START, .count = 0, .root_first = {0}},
    };
    struct json_doc *doc = NULL;
    const struct json_value *root;
    char path0[1024], path5[1024];

    (void)state;
    root = write_stacks(&fake_libs, stacks, sizeof(stacks) / sizeof(stacks[0]), NULL, &doc);
    expect_categories(doc, root);
    expect_path(doc, root, 0,
                "main:2;work:2;fleetprof:8;fleetprof_group_end:8;commit_event:8;clock_gettime:8");
    expect_path(doc, root, 1,
                "main:2;work:2;fleetprof:8;fleetprof_group_end:8;commit_event:8;write:8");
    expect_path(doc, root, 2, "main:2;work:2;clock_gettime:2");
    expect_path(doc, root, 3,
                "_dl_start_user:2;_dl_init:2;call_init:2;fleetprof:8;fleetprof_init:8;"
                "start_locked:8;pthread_sigmask:8");
    expect_path(doc, root, 4,
                "main:2;fleetprof:8;fleetprof_init:8;program_callback:8;commit_event:8");
    expect_path(doc, root, 6,
                "main:2;work:2;Startup::Work:7;fleetprof:8;fleetprof_group_end:8;"
                "commit_event:8;inner:8");
    expect_path(doc, root, 7, "fleetprof:8;fleetprof_init:8;pthread_sigmask:8");
    expect_path(doc, root, 8, "(no stack: blocked since the thread started):1");
    /* One stack for the same frames, and one pseudo-frame row for the whole thread. */
    assert_int_equal(sample_path(doc, root, 0, path0, sizeof(path0)),
                     sample_path(doc, root, 5, path5, sizeof(path5)));
    assert_string_equal(path0, path5);
    assert_int_equal(frames_named(doc, root, "fleetprof"), 1);
    json_doc_free(doc);
}

/* Stacks without a frame of the runtime are written as before: the same threads, byte for
 * byte once parsed, whether or not a runtime module is loaded; a module merely named like
 * the runtime's functions is not it. */
static void test_stacks_without_runtime_unchanged(void **state)
{
    static struct prof_lib other_array[4];
    const struct prof_libs other_libs = {other_array, 4};
    const struct stack_spec stacks[] = {
            {.count = 3, .root_first = {PROG(0x1000), PROG(0x1100), LIBC(0x1000)}},
            {.count = 3,
             .root_first = {LD(0x1000), PROG(0x1200), LIBC(0x1100)},
             .label_count = 1,
             .labels = {{{"Startup::Work", 13}, PROF_CATEGORY_APP, 2, 0, 0}}},
            {.count = 4, .root_first = {PROG(0x1000), PROG(0x1100), RT(0x1000), RT(0x1100)}},
    };
    struct json_doc *with_rt = NULL, *without_rt = NULL;
    const struct json_value *a, *b;

    (void)state;
    memcpy(other_array, fake_lib_array, sizeof(other_array));
    other_array[3].name = other_name;
    a = write_stacks(&fake_libs, stacks, 2, NULL, &with_rt);
    b = write_stacks(&other_libs, stacks, 2, NULL, &without_rt);
    expect_path(with_rt, a, 0, "main:2;work:2;clock_gettime:2");
    expect_path(with_rt, a, 1,
                "_dl_start_user:2;program_callback:2;Startup::Work:7;pthread_sigmask:2");
    assert_true(json_value_equal(with_rt, get(with_rt, a, "threads"), without_rt,
                                 get(without_rt, b, "threads")));
    json_doc_free(with_rt);
    json_doc_free(without_rt);

    /* libother.so's fleetprof_group_end is the program's own code. */
    b = write_stacks(&other_libs, stacks, 3, NULL, &without_rt);
    expect_path(without_rt, b, 2, "main:2;work:2;fleetprof_group_end:2;commit_event:2");
    assert_int_equal(frames_named(without_rt, b, "fleetprof"), 0);
    json_doc_free(without_rt);
}

/* A recovered process's damaged stacks (addresses in no module, a kernel address, zero, a
 * garbage address with bit 62 set) still get the pseudo-frame above the runtime's outermost
 * frame; unknown frames above it stay Native, those below are Profiler. A garbage address is
 * never taken for a frame under the runtime. A sample without frames says why, or that no
 * reason was recorded: never a bare "(no stack)". */
static void test_damaged_stacks_with_runtime_frames(void **state)
{
    const uint64_t garbage = (LIBC(0x1000) + 0x10 - 1) | (1ull << 62);
    const struct stack_spec stacks[] = {
            {.flags = PROF_SAMPLE_UNWIND_FAIL,
             .count = 4,
             .root_first = {0x1000, RT(0x1000), 0xffffffff81000000u, 0x40}},
            {.count = 4, .root_first = {PROG(0x1000), RT(0x1100), LIBC(0x1000), 0}},
            {.flags = PROF_SAMPLE_TRUNCATED,
             .count = 3,
             .root_first = {PROG(0x1000), PROG(0x1100), garbage - 0x10}},
            {.count = 1, .root_first = {RT(0x1100)}},
            /* no frames: the reason recorded, or that none was */
            {.flags = PROF_SAMPLE_UNWIND_FAIL, .count = 0, .root_first = {0}},
            {.flags = PROF_SAMPLE_TRUNCATED, .count = 0, .root_first = {0}},
    };
    struct json_doc *doc = NULL;
    const struct json_value *root;
    char want[256];

    (void)state;
    root = write_stacks(&fake_libs, stacks, sizeof(stacks) / sizeof(stacks[0]), "after it died",
                        &doc);
    /* Frames in no module are named by the address captured. */
    expect_path(doc, root, 0,
                "0x1010:2;fleetprof:8;fleetprof_group_end:8;0xffffffff81000010:8;0x50:8");
    expect_path(doc, root, 1, "main:2;fleetprof:8;commit_event:8;clock_gettime:8;0x10:8");
    (void)snprintf(want, sizeof(want), "main:2;work:2;0x%" PRIx64 ":2", garbage);
    expect_path(doc, root, 2, want);
    expect_path(doc, root, 3, "fleetprof:8;commit_event:8");
    expect_path(doc, root, 4, "(no stack: unwinding failed):8");
    expect_path(doc, root, 5, "(no stack: none recorded):8");
    json_doc_free(doc);
}

/* Sample entries that fail to decode (300 frames, more than PROF_MAX_FRAMES), of an unknown
 * thread (tid 77) and of the known one (tid PID), their frame bytes those of a known stack's
 * frames or not. */
static void put_damaged_samples(struct buf_chunked_buffer *buffer)
{
    /* kind, tid (zig-zag ULEB128), time 100, CPU delta 0, flags 0, frame count 300, frames */
    static const uint8_t unknown_thread[] = {BUF_ENTRY_SAMPLE, 154, 1, 100, 0, 0, 0xac, 2, 0, 0};
    static const uint8_t known_thread[] = {BUF_ENTRY_SAMPLE, 164, 194, 0, 100, 0, 0, 0xac, 2, 0};

    _Static_assert(2 * PID == 164 - 128 + (194 - 128) * 128, "tid PID in known_thread");
    assert_int_equal(
            buf_chunked_buffer_put_bytes(buffer, unknown_thread, sizeof(unknown_thread), NULL), 0);
    assert_int_equal(buf_chunked_buffer_put_bytes(buffer, known_thread, sizeof(known_thread), NULL),
                     0);
}

/* A stack met again is written as when it was first built (the writer recognizes it by its
 * encoded frames and labels, without decoding them): the same stack index and path, labels
 * counted each time; a different label, or a sample with no frames (whose reason is in its
 * flags, outside those bytes) is not taken for it; damaged entries are still dropped. */
static void test_known_stacks_written_as_built(void **state)
{
    const struct stack_spec a = {
            .count = 5,
            .root_first = {PROG(0x1000), PROG(0x1100), RT(0x1000), RT(0x1100), LIBC(0x1000)}};
    const struct stack_spec b = {
            .count = 5,
            .root_first = {PROG(0x1000), PROG(0x1100), RT(0x1000), RT(0x1100), LIBC(0x1000)},
            .label_count = 1,
            .labels = {{{"Startup::Work", 13}, PROF_CATEGORY_APP, 2, 0, 0}}};
    struct stack_spec a_truncated = a, blocked = {.flags = PROF_SAMPLE_BLOCKED_SINCE_START},
                      failed = {.flags = PROF_SAMPLE_UNWIND_FAIL};
    struct stack_spec stacks[9];
    const struct json_value *root, *log;
    struct json_doc *doc = NULL;
    char first[1024], again[1024];
    int64_t n = 0;

    (void)state;
    a_truncated.flags = PROF_SAMPLE_TRUNCATED;
    stacks[0] = a, stacks[1] = b, stacks[2] = a, stacks[3] = failed, stacks[4] = blocked;
    stacks[5] = b, stacks[6] = a_truncated, stacks[7] = failed, stacks[8] = a;
    put_extra = put_damaged_samples;
    root = write_stacks(&fake_libs, stacks, 9, NULL, &doc);
    put_extra = NULL;
    for (size_t i = 2; i < 9; i++) {
        size_t was = i == 5 ? 1 : i == 7 ? 3 : 0;

        if (i == 3 || i == 4)
            continue;
        assert_int_equal(sample_path(doc, root, was, first, sizeof(first)),
                         sample_path(doc, root, i, again, sizeof(again)));
        assert_string_equal(first, again);
    }
    expect_path(doc, root, 0,
                "main:2;work:2;fleetprof:8;fleetprof_group_end:8;commit_event:8;clock_gettime:8");
    expect_path(doc, root, 1,
                "main:2;work:2;Startup::Work:7;fleetprof:8;fleetprof_group_end:8;commit_event:8;"
                "clock_gettime:8");
    expect_path(doc, root, 3, "(no stack: unwinding failed):8");
    expect_path(doc, root, 4, "(no stack: blocked since the thread started):1");
    /* The damaged entries: no thread 77, no tenth sample, counted as decode errors. */
    assert_int_equal(json_value_len(get(doc, root, "threads")), 1);
    assert_int_equal(
            json_value_len(
                    get(doc, get(doc, json_array_at(doc, get(doc, root, "threads"), 0), "samples"),
                        "data")),
            9);
    log = get(doc, get(doc, get(doc, root, "profilingLog"), "4242"), "profileWriter");
    assert_int_equal(json_value_int64(doc, get(doc, log, "labelFrames"), &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(json_value_int64(doc, get(doc, log, "decodeErrors"), &n), 0);
    assert_int_equal(n, 2);
    json_doc_free(doc);
}

/* A process whose stacks do not repeat stops remembering them (after 2048 new ones, gecko.c):
 * its stacks are written the same before and after, and one met again later still gets the
 * stack it was first given. */
static void test_unrepeated_stacks_written_as_built(void **state)
{
    enum { UNIQUE = 2200, AGAIN = 20 };
    struct stack_spec *stacks = calloc(UNIQUE + AGAIN, sizeof(*stacks));
    struct json_doc *doc = NULL;
    const struct json_value *root;
    char first[1024], again[1024];

    (void)state;
    assert_non_null(stacks);
    for (size_t i = 0; i < UNIQUE; i++) {
        stacks[i].count = 3;
        stacks[i].root_first[0] = PROG(0x1000);
        stacks[i].root_first[1] = PROG(0x10000 + i * 0x20);
        stacks[i].root_first[2] = LIBC(0x1000);
    }
    for (size_t i = 0; i < AGAIN; i++)
        stacks[UNIQUE + i] = stacks[i * 97];
    root = write_stacks(&fake_libs, stacks, UNIQUE + AGAIN, NULL, &doc);
    for (size_t i = 0; i < AGAIN; i++) {
        assert_int_equal(sample_path(doc, root, i * 97, first, sizeof(first)),
                         sample_path(doc, root, UNIQUE + i, again, sizeof(again)));
        assert_string_equal(first, again);
    }
    expect_path(doc, root, UNIQUE - 1,
                "main:2;program+0x4212ef (called from main):2;clock_gettime:2");
    json_doc_free(doc);
    free(stacks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_format_location),
            cmocka_unit_test(test_unnamed_code_gets_module_and_offset),
            cmocka_unit_test(test_unnamed_vdso_code_names_its_caller),
            cmocka_unit_test(test_runtime_frames_under_pseudo_frame),
            cmocka_unit_test(test_stacks_without_runtime_unchanged),
            cmocka_unit_test(test_damaged_stacks_with_runtime_frames),
            cmocka_unit_test(test_known_stacks_written_as_built),
            cmocka_unit_test(test_unrepeated_stacks_written_as_built),
    };

    return cmocka_run_group_tests_name("profile-gecko", tests, NULL, NULL);
}
