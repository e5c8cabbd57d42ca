/* tests/workloads/sym-nosyms.c - a shared object with no symbols at all: linked with
 * -nostdlib -s and hidden visibility, so it has code but neither .symtab nor any function
 * in .dynsym. Never loaded; the symbol tests resolve an address in its .text offline. */

__attribute__((visibility("hidden"))) int sym_nosyms_fn(int x);

__attribute__((visibility("hidden"))) int sym_nosyms_fn(int x)
{
    return x * 3 + 1;
}
