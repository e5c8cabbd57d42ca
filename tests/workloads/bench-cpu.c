/* tests/workloads/bench-cpu.c - a fixed amount of CPU-bound work on deep stacks, for the
 * runtime overhead benchmark (tests/bench/bench-runtime.py).
 *
 *   bench-cpu [THREADS [DEPTH [ROUNDS [LEAF_ITERATIONS]]]]     defaults: 4 30 1600 200000
 *
 * Each thread does ROUNDS times: recurse DEPTH frames (bc_recurse), then LEAF_ITERATIONS of
 * integer hashing in bc_leaf. The work is a count, not a time, so a profiled run does the
 * same work as an unprofiled one and their CPU times compare directly. Built with -O2
 * -fomit-frame-pointer (no frame pointers: what the dwarf and copy unwinders are for), and
 * without inlining or sibling calls so every frame stays on the stack.
 *
 * Prints one line when the work is done, before exit handlers (the runtime's exit profile)
 * run: "bench-cpu work_wall_s=W work_cpu_s=C checksum=X", C from getrusage(RUSAGE_SELF).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define NOINLINE    __attribute__((noinline))
#define MAX_THREADS 64

struct worker {
    pthread_t thread;
    int depth;
    long rounds;
    long leaf_iterations;
    uint64_t result;
};

static volatile uint64_t sink;

NOINLINE uint64_t bc_leaf(long iterations, uint64_t seed);
NOINLINE uint64_t bc_leaf(long iterations, uint64_t seed)
{
    uint64_t h = seed | 1;

    for (long i = 0; i < iterations; i++) {
        h ^= h >> 29;
        h *= 0xbf58476d1ce4e5b9u;
        h += (uint64_t)i;
    }
    return h;
}

NOINLINE uint64_t bc_recurse(int depth, long iterations, uint64_t seed);
NOINLINE uint64_t bc_recurse(int depth, long iterations, uint64_t seed)
{
    uint64_t r;

    if (depth <= 1)
        r = bc_leaf(iterations, seed);
    else
        r = bc_recurse(depth - 1, iterations, seed + (uint64_t)depth);
    sink++; /* work after the call: never a tail call */
    return r ^ (uint64_t)depth;
}

static void *worker_main(void *p)
{
    struct worker *w = p;
    uint64_t acc = 0;

    for (long i = 0; i < w->rounds; i++)
        acc += bc_recurse(w->depth, w->leaf_iterations, acc + (uint64_t)i);
    w->result = acc;
    return NULL;
}

static double timespec_s(const struct timespec *ts)
{
    return (double)ts->tv_sec + (double)ts->tv_nsec / 1e9;
}

static double timeval_s(const struct timeval *tv)
{
    return (double)tv->tv_sec + (double)tv->tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    int depth = argc > 2 ? atoi(argv[2]) : 30;
    long rounds = argc > 3 ? atol(argv[3]) : 1600;
    long leaf_iterations = argc > 4 ? atol(argv[4]) : 200000;
    struct worker workers[MAX_THREADS];
    struct timespec t0, t1;
    struct rusage ru;
    uint64_t checksum = 0;

    if (threads < 1 || threads > MAX_THREADS || depth < 1 || rounds < 1 || leaf_iterations < 1) {
        fprintf(stderr, "usage: bench-cpu [THREADS<=64 [DEPTH [ROUNDS [LEAF_ITERATIONS]]]]\n");
        return 2;
    }
    (void)clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < threads; i++) {
        workers[i] = (struct worker){
                .depth = depth, .rounds = rounds, .leaf_iterations = leaf_iterations};
        if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0) {
            fprintf(stderr, "bench-cpu: pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < threads; i++) {
        (void)pthread_join(workers[i].thread, NULL);
        checksum += workers[i].result;
    }
    (void)clock_gettime(CLOCK_MONOTONIC, &t1);
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 1;
    printf("bench-cpu work_wall_s=%.6f work_cpu_s=%.6f checksum=%llx\n",
           timespec_s(&t1) - timespec_s(&t0), timeval_s(&ru.ru_utime) + timeval_s(&ru.ru_stime),
           (unsigned long long)checksum);
    (void)fflush(stdout);
    return 0;
}
