/* tests/workloads/sym-wait.c - a process that waits with a known stack, for the symbol
 * service tests (tests/integration/test-symbols.py):
 *
 *   read (libc) <- sym_wait_probe <- sym_lib_static_fn <- sym_lib_global_fn (libsym-lib.so)
 *               <- main
 *
 * or, with a symbol-less module (sym-wait-nosyms.so) as argv[1], through it:
 *
 *   read (libc) <- sym_wait_probe <- sym_wait_nosyms (0x... in that module) <- main
 *
 * It prints "ready" and blocks reading stdin until it closes, then exits 0.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include "sym-lib.h"

static volatile int sink;
static int calls;
static const char *nosyms_path;

SYM_NOINLINE static void sym_wait_block(void)
{
    char buf[256];

    printf("ready\n");
    (void)fflush(stdout);
    while (read(0, buf, sizeof(buf)) > 0)
        sink++;
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
