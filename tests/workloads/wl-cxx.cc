// tests/workloads/wl-cxx.cc - a C++ program whose hot functions have mangled names (a
// namespace, a class template, an overload), for the demangling tests:
//   wl-cxx CPU_SECONDS   spins in wl::Hot<int>::spin(int) under wl::run(double), then exits
#include <cstdlib>
#include <ctime>

namespace wl {

static double cpu_s()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

template <typename T> struct Hot {
    volatile T sink = 0;
    __attribute__((noinline)) void spin(int rounds)
    {
        for (int i = 0; i < rounds; i++)
            sink = sink + (T)i;
    }
};

__attribute__((noinline)) void run(double seconds)
{
    Hot<int> hot;
    double end = cpu_s() + seconds;

    while (cpu_s() < end)
        hot.spin(100000);
}

} // namespace wl

int main(int argc, char **argv)
{
    wl::run(argc > 1 ? atof(argv[1]) : 0.5);
    return 0;
}
