/* tests/workloads/wl-stripped.c - a program whose symbols are stripped (the build strips a
 * copy: wl-stripped, beside the unstripped wl-stripped-full with the same code), with a known
 * split of its CPU between two functions:
 *
 *   wl-stripped [A_MS [B_MS]]   (default 60 and 30)
 *
 * stripped_work_a burns A_MS of the thread's CPU, then stripped_work_b B_MS. Each loop runs
 * through many instructions, so samples land at many addresses of each function: a profile
 * of the stripped copy names each function once, by its start ("wl-stripped+0x<start>",
 * from .eh_frame), not once per address.
 */
#include <stdlib.h>

#include "wl-cpu.h"

#define NOINLINE __attribute__((noinline))

static volatile unsigned long stripped_sink;

/* Many instructions per turn, and a CPU check only every few thousand. */
#define SPIN(cpu_ms, k)                                          \
    do {                                                         \
        double until_ = wl_thread_cpu_ms() + (cpu_ms);           \
        while (wl_thread_cpu_ms() < until_)                      \
            for (unsigned long i_ = 0; i_ < 20000; i_++) {       \
                unsigned long x_ = stripped_sink + i_ * (k);     \
                x_ ^= x_ >> 7;                                   \
                x_ *= 0x9e3779b97f4a7c15ul;                      \
                x_ ^= x_ >> 13;                                  \
                x_ += i_ << 3;                                   \
                x_ *= 0xbf58476d1ce4e5b9ul;                      \
                stripped_sink = x_ ^ (x_ >> 31);                 \
            }                                                    \
        stripped_sink++; /* work after the loop: no tail call */ \
    } while (0)

NOINLINE void stripped_work_a(double cpu_ms);
NOINLINE void stripped_work_a(double cpu_ms)
{
    SPIN(cpu_ms, 3);
}

NOINLINE void stripped_work_b(double cpu_ms);
NOINLINE void stripped_work_b(double cpu_ms)
{
    SPIN(cpu_ms, 5);
}

int main(int argc, char **argv)
{
    stripped_work_a(argc > 1 ? atof(argv[1]) : 60);
    stripped_work_b(argc > 2 ? atof(argv[2]) : 30);
    return 0;
}
