/* tests/workloads/wl-transparent.c - programs that do what a profiler could get in the way
 * of; each checks that what it did took effect and exits non-zero, saying what, if not.
 *
 *   wl-transparent blocked-thread CPU_MS  a thread blocks in read() on a pipe as soon as it
 *                                         starts; the main thread spins CPU_MS of CPU in
 *                                         wl_spin, then writes the byte that ends the
 *                                         read; exit 3 if the read failed (EINTR)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

static double thread_cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

NOINLINE void wl_spin(double cpu_ms);
NOINLINE void wl_spin(double cpu_ms)
{
    double until = thread_cpu_ms() + cpu_ms;

    while (thread_cpu_ms() < until)
        for (int i = 0; i < 5000; i++)
            sink += (unsigned long)i * 2654435761u;
    sink++; /* no tail call */
}

static void *blocked_reader(void *arg)
{
    int fd = *(int *)arg;
    char c;
    ssize_t n = read(fd, &c, 1);

    return (void *)(intptr_t)(n == 1 ? 0 : errno ? errno : -1);
}

static int blocked_thread(double cpu_ms)
{
    int fds[2];
    pthread_t th;
    void *ret;

    if (pipe(fds) < 0 || pthread_create(&th, NULL, blocked_reader, &fds[0]) != 0) {
        perror("wl-transparent: pipe/pthread_create");
        return 1;
    }
    wl_spin(cpu_ms);
    if (write(fds[1], "x", 1) != 1) {
        perror("wl-transparent: write");
        return 1;
    }
    pthread_join(th, &ret);
    if (ret) {
        fprintf(stderr, "wl-transparent: the blocked read failed: %s\n",
                strerror((int)(intptr_t)ret));
        return 3;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    if (!strcmp(mode, "blocked-thread") && argc > 2)
        return blocked_thread(atof(argv[2]));
    fprintf(stderr, "wl-transparent: unknown mode '%s' (see the file's header)\n", mode);
    return 2;
}
