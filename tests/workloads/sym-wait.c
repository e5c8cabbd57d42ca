/* tests/workloads/sym-wait.c - a process that waits with a known stack, for the symbol
 * service tests (tests/integration/test-symbols.py):
 *
 *   poll (libc) <- sym_wait_block <- sym_wait_probe <- sym_lib_static_fn <- sym_lib_global_fn
 * (libsym-lib.so)
 *               <- main
 *
 * or, with a symbol-less module (sym-wait-nosyms.so) as argv[1], through it:
 *
 *   poll (libc) <- sym_wait_block <- sym_wait_probe <- sym_wait_nosyms (0x... in that module) <-
 * main
 *
 * It prints "ready" and waits for stdin to close (poll, libc), then exits 0. Every 20 ms of
 * waiting it works 200 us: the runtime signals a thread only when it used CPU since its
 * last sample (design §4), and the thread that started the runtime counts its CPU from the
 * end of that start; one that blocked at once had no stack at all ("blocked since the
 * thread started") whenever no tick fell in the few microseconds between the start and
 * the read: the symbol tests failed about one run in eight. Now the wait is captured at the
 * first tick after any of these bursts.
 */
#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "sym-lib.h"

static volatile int sink;
static int calls;
static const char *nosyms_path;

/* us of this thread's CPU. */
static void sym_wait_work_us(long us)
{
    struct timespec t0, t;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
        sink++;
        (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

SYM_NOINLINE static void sym_wait_block(void)
{
    char buf[256];

    printf("ready\n");
    (void)fflush(stdout);
    for (;;) {
        struct pollfd in = {.fd = 0, .events = POLLIN};
        int r = poll(&in, 1, 20);

        if (r > 0) {
            if (read(0, buf, sizeof(buf)) <= 0)
                break;
            sink++;
        } else if (r == 0) {
            sym_wait_work_us(200);
        }
    }
    sink++;
}

/* Called from libsym-lib.so twice (global then static function): blocks on the second. */
SYM_NOINLINE static void sym_wait_probe(const char *function, const char *file, int line)
{
    (void)function;
    (void)file;
    (void)line;
    if (++calls == 2 || nosyms_path)
        sym_wait_block();
    sink++;
}

static void sym_wait_cb(void)
{
    sym_wait_probe("", "", 0);
    sink++;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        void *h = dlopen(argv[1], RTLD_NOW);
        void (*const *entry)(void (*)(void)) = h ? dlsym(h, "sym_wait_nosyms_entry") : NULL;

        if (!entry) {
            fprintf(stderr, "sym-wait: %s\n", dlerror());
            return 2;
        }
        nosyms_path = argv[1];
        (*entry)(sym_wait_cb);
        return 0;
    }
    sym_lib_global_fn(sym_wait_probe);
    return 0;
}
