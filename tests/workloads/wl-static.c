/* tests/workloads/wl-static.c - a statically linked program (no program interpreter, so no
 * loader preloads the profiler into it). What the daemon must name as never profiled when
 * a profiled process execs it.
 *
 *   wl-static SECONDS        works SECONDS of its CPU, then exits 0
 *   wl-static --until FILE   sleeps until FILE exists (60 s at most), then exits 0
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

int main(int argc, char **argv)
{
    struct timespec ts;
    double seconds;

    if (argc > 2 && !strcmp(argv[1], "--until")) {
        for (int i = 0; i < 6000 && access(argv[2], F_OK) != 0; i++) {
            struct timespec ms = {0, 10000000};

            (void)nanosleep(&ms, NULL);
        }
        return 0;
    }
    seconds = argc > 1 ? atof(argv[1]) : 0.1;
    do {
        for (int i = 0; i < 10000; i++)
            sink += (uint64_t)i * 2654435761u;
        (void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    } while ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9 < seconds);
    return 0;
}
