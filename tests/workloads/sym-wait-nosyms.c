/* tests/workloads/sym-wait-nosyms.c - a module without function symbols (linked -nostdlib
 * -s, the function hidden): sym-wait calls back through it, so its frame has no name.
 * Only a data pointer to the function is exported. */
typedef void (*sym_wait_cb)(void);

static volatile int sym_wait_nosyms_sink;

__attribute__((visibility("hidden"), noinline)) void sym_wait_nosyms(sym_wait_cb cb);

__attribute__((visibility("hidden"), noinline)) void sym_wait_nosyms(sym_wait_cb cb)
{
    cb();
    sym_wait_nosyms_sink++; /* work after the call: no tail call */
}

void (*const sym_wait_nosyms_entry)(sym_wait_cb) = sym_wait_nosyms;
