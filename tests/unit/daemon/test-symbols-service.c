/* Unit tests for daemon/symbols-service.c: a child's Symbolize is answered with Symbols on its
 * connection. Addresses of a module the requesting process maps are named (this test's own
 * executable, by its functions' names, file and line; a deleted executable through
 * /proc/PID/exe), a module that is not an absolute path, not mapped by the process or not a
 * regular file gets a module error and its addresses a status, an address without a symbol is
 * no module's error; a request too large is refused whole; a large reply comes in pieces that
 * cover the request in order; the service's cache opens a module once. */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon-fixture.h"
#include "testlib.h"

/* The function whose address is asked for. */
__attribute__((noinline)) int symbolize_me(int x);
__attribute__((noinline)) int symbolize_me(int x)
{
    return x * 3 + 1;
}

static int main_bias_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(uint64_t *)data = info->dlpi_addr; /* the first object is the program */
    return 1;
}

/* symbolize_me's address in the executable's own terms (what a child sends). */
static uint64_t symbolize_me_vaddr(void)
{
    uint64_t bias = 0;

    (void)dl_iterate_phdr(main_bias_cb, &bias);
    return (uint64_t)(uintptr_t)symbolize_me - bias;
}

static char self_path[4096];

static const char *self(void)
{
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);

    assert_true(n > 0);
    self_path[n] = '\0';
    return self_path;
}

/* A request: modules by path, addresses as (module, offset). */
struct request {
    Fleetprof__Symbolize msg;
    Fleetprof__SymbolModule modules[8];
    Fleetprof__SymbolModule *module_ptrs[8];
    Fleetprof__SymbolAddress *addresses;
    Fleetprof__SymbolAddress **address_ptrs;
};

static void request_init(struct request *r, uint64_t id, const char *const *paths, size_t modules,
                         size_t addresses)
{
    *r = (struct request){0};
    fleetprof__symbolize__init(&r->msg);
    r->msg.id = id;
    for (size_t i = 0; i < modules; i++) {
        fleetprof__symbol_module__init(&r->modules[i]);
        r->modules[i].path = (char *)paths[i];
        r->module_ptrs[i] = &r->modules[i];
    }
    r->msg.n_modules = modules;
    r->msg.modules = r->module_ptrs;
    r->addresses = calloc(addresses + 1, sizeof(*r->addresses));
    r->address_ptrs = calloc(addresses + 1, sizeof(*r->address_ptrs));
    assert_non_null(r->addresses);
    assert_non_null(r->address_ptrs);
    for (size_t i = 0; i < addresses; i++) {
        fleetprof__symbol_address__init(&r->addresses[i]);
        r->address_ptrs[i] = &r->addresses[i];
    }
    r->msg.n_addresses = addresses;
    r->msg.addresses = r->address_ptrs;
}

static void request_done(struct request *r)
{
    free(r->addresses);
    free(r->address_ptrs);
}

static void ask(struct request *r, size_t i, uint32_t module, uint64_t offset)
{
    r->addresses[i].module_index = module;
    r->addresses[i].offset = offset;
}

struct wait_last {
    struct fx_client *cl;
    uint64_t id;
};

/* The last piece of the answer to id, or NULL. */
static const Fleetprof__Symbols *last_piece(const struct fx_client *cl, uint64_t id)
{
    const Fleetprof__Envelope *env;

    for (size_t n = 0; (env = fx_client_got(cl, FLEETPROF__ENVELOPE__MSG_SYMBOLS, n)); n++)
        if (env->symbols->request_id == id && env->symbols->last)
            return env->symbols;
    return NULL;
}

static bool answered(void *arg)
{
    struct wait_last *w = arg;

    return last_piece(w->cl, w->id) != NULL;
}

static const Fleetprof__Symbols *answer(struct fx *f, struct fx_client *cl, uint64_t id)
{
    struct wait_last w = {cl, id};

    assert_true(fx_run_until(f, answered, &w));
    return last_piece(cl, id);
}

static bool ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), m = strlen(end);

    return n >= m && strcmp(s + n - m, end) == 0;
}

static void test_addresses_are_named_and_bad_modules_said(void **state)
{
    const char *paths[4];
    const Fleetprof__Symbols *s;
    struct prof_symbols_stats st;
    struct daemon_stats ds;
    struct fx_client cl;
    struct request r;
    struct fx f;
    struct conn *c;
    void *zero;
    int fd;

    (void)state;
    assert_int_equal(symbolize_me(1), 4);
    /* A device this process maps: in its maps, but no regular file. */
    fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    zero = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(zero != MAP_FAILED);
    paths[0] = self();
    paths[1] = "relative/libx.so";
    paths[2] = "/etc/hostname-not-mapped-by-anyone";
    paths[3] = "/dev/zero";
    fx_setup(&f, NULL);
    c = fx_connect(&f, &cl, "asker");
    assert_non_null(c);
    request_init(&r, 41, paths, 4, 6);
    ask(&r, 0, 0, symbolize_me_vaddr());
    ask(&r, 1, 1, 0x10);
    ask(&r, 2, 2, 0x20);
    ask(&r, 3, 3, 0x30);
    ask(&r, 4, 0, 0x1); /* in the executable, no function there */
    ask(&r, 5, 0, symbolize_me_vaddr() + 1);
    daemon__symbolize(c, &r.msg);
    s = answer(&f, &cl, 41);
    assert_int_equal(s->offset, 0);
    assert_int_equal(s->n_names, 6);
    assert_int_equal(s->n_status, 6);
    assert_string_equal(s->names[0], "symbolize_me");
    assert_int_equal(s->status[0], 0);
    assert_true(ends_with(s->files[0], "test-symbols-service.c"));
    assert_true(s->lines[0] > 0);
    assert_string_equal(s->names[5], "symbolize_me");
    assert_int_equal(s->status[1], EPERM);
    assert_int_equal(s->status[2], EPERM);
    assert_int_equal(s->status[3], EPERM);
    assert_string_equal(s->names[1], "");
    assert_true(s->status[4] != 0);
    assert_int_equal(s->n_module_errors, 4);
    assert_string_equal(s->module_errors[0], ""); /* an address without a symbol is not the
                                                   * module's error */
    assert_non_null(strstr(s->module_errors[1], "relative/libx.so: not an absolute path"));
    assert_non_null(strstr(s->module_errors[2], "not mapped by process"));
    assert_non_null(strstr(s->module_errors[3], "/dev/zero: not a regular file"));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING, "not mapped by process"), 1);
    assert_int_equal(fx_client_count(&cl, FLEETPROF__ENVELOPE__MSG_SYMBOLS), 1);

    daemon_get_stats(f.d, &ds);
    assert_int_equal(ds.symbol_requests, 1);
    st = daemon__symbols_stats(f.d);
    assert_int_equal(st.modules_loaded, 1);

    /* Asked again: answered from the cache, the module not opened again. */
    r.msg.id = 42;
    daemon__symbolize(c, &r.msg);
    s = answer(&f, &cl, 42);
    assert_string_equal(s->names[0], "symbolize_me");
    st = daemon__symbols_stats(f.d);
    assert_int_equal(st.modules_loaded, 1);
    daemon_get_stats(f.d, &ds);
    assert_int_equal(ds.symbol_requests, 2);
    assert_int_equal(ds.symbol_modules_loaded, 1);

    request_done(&r);
    fx_client_close(&f, &cl);
    fx_teardown(&f);
    (void)munmap(zero, 4096);
    (void)close(fd);
}

static void test_a_request_too_large_is_refused_whole(void **state)
{
    const char *paths[1];
    const Fleetprof__Symbols *s;
    struct fx_client cl;
    struct request r;
    struct fx f;
    struct conn *c;

    (void)state;
    paths[0] = self();
    fx_setup(&f, NULL);
    c = fx_connect(&f, &cl, "greedy");
    assert_non_null(c);
    request_init(&r, 7, paths, 1, 65537);
    daemon__symbolize(c, &r.msg);
    s = answer(&f, &cl, 7);
    assert_string_equal(s->error, "too many addresses in one request (65537, at most 65536)");
    assert_int_equal(s->n_names, 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING, "symbolize from child"), 1);
    request_done(&r);
    fx_client_close(&f, &cl);
    fx_teardown(&f);
}

/* More names than one frame should carry: pieces, in order, covering every address once. */
static void test_a_large_reply_comes_in_pieces(void **state)
{
    enum { N = 40000 };
    const char *paths[1];
    const Fleetprof__Envelope *env;
    struct fx_client cl;
    struct request r;
    struct fx f;
    struct conn *c;
    size_t covered = 0, pieces = 0;

    (void)state;
    paths[0] = self();
    fx_setup(&f, NULL);
    c = fx_connect(&f, &cl, "many");
    assert_non_null(c);
    request_init(&r, 9, paths, 1, N);
    for (size_t i = 0; i < N; i++)
        ask(&r, i, 0, symbolize_me_vaddr() + i % 4);
    daemon__symbolize(c, &r.msg);
    (void)answer(&f, &cl, 9);
    for (size_t n = 0; (env = fx_client_got(&cl, FLEETPROF__ENVELOPE__MSG_SYMBOLS, n)); n++) {
        const Fleetprof__Symbols *s = env->symbols;

        assert_int_equal(s->request_id, 9);
        assert_int_equal(s->offset, covered);
        assert_int_equal(s->n_status, s->n_names);
        for (size_t i = 0; i < s->n_names; i++)
            assert_string_equal(s->names[i], "symbolize_me");
        covered += s->n_names;
        pieces++;
        assert_int_equal(s->last, covered == N);
    }
    assert_int_equal(covered, N);
    assert_true(pieces >= 2);
    request_done(&r);
    fx_client_close(&f, &cl);
    fx_teardown(&f);
}

/* The requesting process's executable was deleted after it started: read through
 * /proc/PID/exe. The process is a copy of this test's executable, exec'd and stopped before
 * it runs, its file then removed. */
static void test_a_deleted_executable_is_read_through_proc(void **state)
{
    char copy[400], buf[65536];
    const char *paths[1];
    const Fleetprof__Symbols *s;
    struct fx_client cl;
    struct request r;
    struct fx f;
    struct conn *c;
    int in, out, status;
    ssize_t n;
    pid_t pid, parent = getpid();

    (void)state;
    fx_setup(&f, NULL);
    (void)snprintf(copy, sizeof(copy), "%s/copy-of-test", f.dir);
    in = open(self(), O_RDONLY | O_CLOEXEC);
    out = open(copy, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    assert_true(in >= 0 && out >= 0);
    while ((n = read(in, buf, sizeof(buf))) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    (void)close(in);
    assert_int_equal(close(out), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[] = {copy, NULL}, *env[] = {NULL};

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent || ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
            _exit(126);
        (void)execve(copy, argv, env);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    if (!WIFSTOPPED(status)) {
        fx_teardown(&f);
        (void)unlink(copy);
        fx_not_run("cannot stop a child right after its exec (ptrace) here");
        return;
    }
    assert_int_equal(unlink(copy), 0);
    c = fx_connect(&f, &cl, "deleted");
    assert_non_null(c);
    c->pid = pid; /* its maps are the stopped copy's */
    paths[0] = copy;
    request_init(&r, 5, paths, 1, 1);
    ask(&r, 0, 0, symbolize_me_vaddr());
    daemon__symbolize(c, &r.msg);
    s = answer(&f, &cl, 5);
    assert_string_equal(s->module_errors[0], "");
    assert_int_equal(s->status[0], 0);
    assert_string_equal(s->names[0], "symbolize_me");
    c->pid = getpid();
    request_done(&r);
    (void)kill(pid, SIGKILL);
    (void)waitpid(pid, NULL, 0);
    fx_client_close(&f, &cl);
    fx_teardown(&f);
}

/* A process whose maps cannot be read (gone): the whole request fails, said. */
static void test_a_process_gone_gets_an_error(void **state)
{
    const char *paths[1];
    const Fleetprof__Symbols *s;
    struct fx_client cl;
    struct request r;
    struct fx f;
    struct conn *c;
    pid_t gone;

    (void)state;
    paths[0] = self();
    gone = fx_fork_idle();
    fx_kill_reap(gone);
    fx_setup(&f, NULL);
    c = fx_connect(&f, &cl, "vanished");
    assert_non_null(c);
    c->pid = gone;
    request_init(&r, 3, paths, 1, 1);
    daemon__symbolize(c, &r.msg);
    s = answer(&f, &cl, 3);
    assert_non_null(strstr(s->error, "cannot check the modules of process"));
    c->pid = getpid();
    request_done(&r);
    fx_client_close(&f, &cl);
    fx_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_addresses_are_named_and_bad_modules_said),
            cmocka_unit_test(test_a_request_too_large_is_refused_whole),
            cmocka_unit_test(test_a_large_reply_comes_in_pieces),
            cmocka_unit_test(test_a_deleted_executable_is_read_through_proc),
            cmocka_unit_test(test_a_process_gone_gets_an_error),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
