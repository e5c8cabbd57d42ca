/* tests/workloads/wl-api.c - exercises the fleetprof API with known values: labels around
 * a hot function, text / interval / typed markers, a marker with a stack, a counter, a
 * pause. Linked with libfleetprof; started by FLEETPROF_STARTUP=1 or fleetprof_init().
 *
 *   wl-api [SECONDS]   SECONDS of the main thread's CPU time in the labelled phase (CPU,
 *                      not wall time: on a busy machine the phase does the same work) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fleetprof.h"

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

static double cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Works for `seconds` of this thread's CPU time. */
NOINLINE void api_hot_inside_label(double seconds);
NOINLINE void api_hot_inside_label(double seconds)
{
    double until = cpu_s() + seconds;

    while (cpu_s() < until)
        for (int i = 0; i < 10000; i++)
            sink += (unsigned long)i;
}

NOINLINE void api_labelled_phase(double seconds);
NOINLINE void api_labelled_phase(double seconds)
{
    FLEETPROF_LABEL("wl-label-phase", FLEETPROF_CATEGORY_APP);
    api_hot_inside_label(seconds);
    sink++;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.5;
    static const struct fleetprof_field_schema fields[] = {
            {"label", "Label", "unique-string", FLEETPROF_FIELD_STRING},
            {"bytes", "Bytes", "bytes", FLEETPROF_FIELD_UINT},
    };
    struct fleetprof_field_value values[2];
    uint64_t t0;
    int schema, counter;

    if (fleetprof_init() != 0) {
        fprintf(stderr, "wl-api: fleetprof_init failed\n");
        return 1;
    }
    schema = fleetprof_marker_schema("WlPhase", "{marker.data.label}", fields, 2);
    counter = fleetprof_counter_create("wl-items", "Bandwidth", "items processed");
    if (schema <= 0 || counter <= 0) {
        fprintf(stderr, "wl-api: schema %d counter %d\n", schema, counter);
        return 1;
    }
    fleetprof_marker("wl-instant", FLEETPROF_CATEGORY_APP, "hello from wl-api");
    t0 = fleetprof_now_ns();
    fleetprof_marker_start("wl-span", FLEETPROF_CATEGORY_IO);
    api_labelled_phase(seconds);
    fleetprof_marker_end("wl-span", FLEETPROF_CATEGORY_IO);
    fleetprof_marker_interval("wl-interval", FLEETPROF_CATEGORY_NETWORK, t0, fleetprof_now_ns(),
                              "interval text");
    values[0].kind = FLEETPROF_FIELD_STRING;
    values[0].v.s = "setup";
    values[1].kind = FLEETPROF_FIELD_UINT;
    values[1].v.u = 12288;
    fleetprof_marker_typed(schema, "wl-typed", FLEETPROF_CATEGORY_APP, t0, fleetprof_now_ns(),
                           values, 2);
    fleetprof_marker_with_stack("wl-with-stack", FLEETPROF_CATEGORY_OTHER, "cause");
    for (int i = 0; i < 50; i++) {
        fleetprof_counter_add(counter, 7);
        api_hot_inside_label(0.002);
    }
    fleetprof_pause();
    api_hot_inside_label(0.05);
    fleetprof_resume();
    api_hot_inside_label(0.05);
    return 0;
}
