/* tests/workloads/sym-known.c - a program with functions at known lines, for the symbol
 * tests (tests/unit/profile/test-symbols.c): a static function, a global function, two
 * functions of libsym-lib.so, and getpid() in libc.
 *
 * It prints one line per address, then "ready", then waits until its standard input closes
 * (the test meanwhile reads its /proc/PID/maps and resolves the addresses), and exits 0:
 *
 *   site <function> <file basename> <line> <0xaddr>   a return address: addr-1 is the call
 *   entry <function> <file basename> <line> <0xaddr>  a function's first instruction;
 *                                                     file "-" and line 0: not checked
 *   ready
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sym-lib.h"

#define MAX_SITES 16

struct site {
    const char *function;
    const char *file;
    int line;
    uintptr_t addr;
};

static struct site sites[MAX_SITES];
static int site_count;
static volatile int sink;

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

SYM_NOINLINE static void probe(const char *function, const char *file, int line)
{
    if (site_count < MAX_SITES) {
        sites[site_count].function = function;
        sites[site_count].file = file;
        sites[site_count].line = line;
        sites[site_count].addr = (uintptr_t)__builtin_return_address(0);
        site_count++;
    }
}

static const int sym_known_static_fn_brace_line = __LINE__ + 2;
SYM_NOINLINE static void sym_known_static_fn(void)
{
    probe(__func__, __FILE__, __LINE__);
    sink++;
}

SYM_NOINLINE void sym_known_global_fn(void);

SYM_NOINLINE void sym_known_global_fn(void)
{
    probe(__func__, __FILE__, __LINE__);
    sink++;
    sym_known_static_fn();
    sink++;
}

int main(void)
{
    uintptr_t getpid_addr = (uintptr_t)&getpid;
    uintptr_t lib_static;
    int lib_static_line;
    char buf[256];

    sym_known_global_fn();
    sym_lib_global_fn(probe);
    lib_static = sym_lib_static_fn_addr(&lib_static_line);

    for (int i = 0; i < site_count; i++)
        printf("site %s %s %d 0x%jx\n", sites[i].function, base_name(sites[i].file), sites[i].line,
               (uintmax_t)sites[i].addr);
    printf("entry sym_known_static_fn %s %d 0x%jx\n", base_name(__FILE__),
           sym_known_static_fn_brace_line, (uintmax_t)(uintptr_t)&sym_known_static_fn);
    printf("entry sym_lib_static_fn libsym-lib.c %d 0x%jx\n", lib_static_line,
           (uintmax_t)lib_static);
    printf("entry getpid - 0 0x%jx\n", (uintmax_t)getpid_addr);
    printf("ready\n");
    (void)fflush(stdout);

    while (fgets(buf, sizeof(buf), stdin))
        ;
    return 0;
}
