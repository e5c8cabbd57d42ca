/* tests/workloads/libsym-lib.c - libsym-lib.so, see sym-lib.h. Its static function must be
 * resolved through the ELF .symtab (or a debug file's), never .dynsym. */
#include "sym-lib.h"

static volatile int sym_lib_sink;

static const int sym_lib_static_fn_brace_line = __LINE__ + 2;
SYM_NOINLINE static void sym_lib_static_fn(sym_probe_cb probe)
{
    probe(__func__, __FILE__, __LINE__);
    sym_lib_sink++;
}

SYM_NOINLINE void sym_lib_global_fn(sym_probe_cb probe)
{
    probe(__func__, __FILE__, __LINE__);
    sym_lib_sink++;
    sym_lib_static_fn(probe);
    sym_lib_sink++;
}

uintptr_t sym_lib_static_fn_addr(int *ret_line)
{
    *ret_line = sym_lib_static_fn_brace_line;
    return (uintptr_t)&sym_lib_static_fn;
}
