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
#include "buffer/json-writer.h"
#include "child/profile/entries.h"
#include "child/profile/gecko.h"
#include "child/profile/libs.h"
#include "child/profile/symbolize-local.h"
#include "child/profile/symbols.h"
#include "json-check.h"
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
 * the offset from the module's load base; the same with and without a symbolizer. Named
 * code keeps its name; only an address outside every module stays bare. */
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
    expect_location(with_symbols, name, true);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_format_location),
            cmocka_unit_test(test_unnamed_code_gets_module_and_offset),
            cmocka_unit_test(test_unnamed_vdso_code_names_its_caller),
    };

    return cmocka_run_group_tests_name("profile-gecko", tests, NULL, NULL);
}
