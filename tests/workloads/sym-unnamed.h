/* tests/workloads/sym-unnamed.h - libsym-unnamed.so: a library whose hot function no symbol
 * names, for the frame-name tests (tests/unit/profile/test-gecko.c).
 *
 * Its hot function is static, and the library is linked with --strip-all: no .symtab, and
 * .dynsym holds only the exported functions below, none of which covers the hot one. So a
 * PC in it can only be named by module and offset ("libsym-unnamed.so+0x..."), whatever the
 * kernel. Built -O0 -fno-inline like the other symbol workloads.
 */
#ifndef FLEETPROF_TESTS_WORKLOADS_SYM_UNNAMED_H
#define FLEETPROF_TESTS_WORKLOADS_SYM_UNNAMED_H

#include <stdint.h>

/* Runs the hot function, which spins for a while and then calls probe (so a test can take a
 * return address inside it) unless probe is NULL. */
void sym_unnamed_run(void (*probe)(void));

/* The entry address of the hot function (a runtime address, taken in the library). */
uintptr_t sym_unnamed_hot_addr(void);

#endif /* FLEETPROF_TESTS_WORKLOADS_SYM_UNNAMED_H */
