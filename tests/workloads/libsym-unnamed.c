/* tests/workloads/libsym-unnamed.c - libsym-unnamed.so, see sym-unnamed.h. The hot function
 * must stay static, out of line and uncloned: its address is what the tests look for. */
#include "sym-lib.h"
#include "sym-unnamed.h"

static volatile unsigned sym_unnamed_sink;

SYM_NOINLINE static void sym_unnamed_hot(void (*probe)(void))
{
    for (unsigned i = 0; i < 1000; i++)
        sym_unnamed_sink += i;
    if (probe)
        probe();
    sym_unnamed_sink++; /* work after the call: no tail call */
}

void sym_unnamed_run(void (*probe)(void))
{
    sym_unnamed_hot(probe);
    sym_unnamed_sink++;
}

uintptr_t sym_unnamed_hot_addr(void)
{
    return (uintptr_t)&sym_unnamed_hot;
}
