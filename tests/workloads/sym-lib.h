/* tests/workloads/sym-lib.h - libsym-lib.so: functions at known source lines, for the
 * symbol tests (tests/unit/profile/).
 *
 * Each function calls a probe with its own name, source file and line (__func__, __FILE__,
 * __LINE__, all on the line of the call). The probe, in the caller, records its return
 * address: that address minus 1 must resolve to the same name, file and line. Built with
 * -g -O0 -fno-omit-frame-pointer -fno-inline so that the calls and lines stay as written.
 */
#ifndef FLEETPROF_TESTS_WORKLOADS_SYM_LIB_H
#define FLEETPROF_TESTS_WORKLOADS_SYM_LIB_H

#include <stdint.h>

/* noclone is gcc's; clang never clones functions that way. */
#if defined(__clang__)
#define SYM_NOINLINE __attribute__((noinline))
#else
#define SYM_NOINLINE __attribute__((noinline, noclone))
#endif

/* Called from a probe site: records __builtin_return_address(0) with the caller's name,
 * file and line. */
typedef void (*sym_probe_cb)(const char *function, const char *file, int line);

/* Calls probe from this global function, then from a static function of the library. */
void sym_lib_global_fn(sym_probe_cb probe);

/* Returns the entry address of the library's static function and stores the line of its
 * opening brace (where its first instruction's line entry points) in *ret_line. */
uintptr_t sym_lib_static_fn_addr(int *ret_line);

#endif /* FLEETPROF_TESTS_WORKLOADS_SYM_LIB_H */
