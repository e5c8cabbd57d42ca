/* tests/unit/profile/test-groups.c - performance group totals (profile/groups.h) and
 * how a process profile carries them (gecko.h): the charge rule and its discards, the
 * histogram's buckets and quantiles, meta.fleetprof.groups, a group's counter track and a
 * slow-event marker with its schema, checked field by field against shared/gecko-format.md
 * (the profile is parsed back with the tools' JSON reader).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "json/reader.h"
#include "json/writer.h"
#include "profile/entries.h"
#include "profile/gecko.h"
#include "profile/groups.h"
#include "testlib.h"

#define PID 4343

/* --- the charge rule --------------------------------------------------------------------- */

static void test_charge(void **state)
{
    uint64_t ns = 77;

    (void)state;
    /* Proportional and exact: 10 ms of CPU, the group ran 1/4 of the event's cycles. */
    assert_int_equal(prof_group_charge(10000000, 1000, 5000, 1000, &ns), 0);
    assert_int_equal(ns, 2500000);
    /* The whole event, and none of it. */
    assert_int_equal(prof_group_charge(10000000, 1000, 5000, 4000, &ns), 0);
    assert_int_equal(ns, 10000000);
    assert_int_equal(prof_group_charge(10000000, 1000, 5000, 0, &ns), 0);
    assert_int_equal(ns, 0);
    /* Exact where 64 bits would overflow: an hour of CPU x 2^40 cycles. */
    assert_int_equal(
            prof_group_charge(3600000000000u, 0, UINT64_C(1) << 41, UINT64_C(1) << 40, &ns), 0);
    assert_int_equal(ns, 1800000000000u);
    /* The counter ran backwards, or stood still (a zero-length event): share < 0 or 0/0. */
    assert_int_equal(prof_group_charge(10000000, 5000, 1000, 10, &ns), -ERANGE);
    assert_int_equal(ns, 0);
    assert_int_equal(prof_group_charge(0, 5000, 5000, 0, &ns), -ERANGE);
    /* The group counted more cycles than its event: share > 100 %. */
    assert_int_equal(prof_group_charge(10000000, 1000, 5000, 4001, &ns), -ERANGE);
    assert_int_equal(ns, 0);
    /* An event that used no CPU charges nothing, whatever the cycles. */
    assert_int_equal(prof_group_charge(0, 1000, 5000, 2000, &ns), 0);
    assert_int_equal(ns, 0);
}

/* --- buckets and quantiles --------------------------------------------------------------- */

static void test_buckets(void **state)
{
    (void)state;
    assert_int_equal(prof_group_bucket(0), 0);
    assert_int_equal(prof_group_bucket(999), 0);
    assert_int_equal(prof_group_bucket(1000), 1);
    assert_int_equal(prof_group_bucket(1999), 1);
    assert_int_equal(prof_group_bucket(2000), 2);
    assert_int_equal(prof_group_bucket(16000000), 14); /* 16 ms = 16000 us in [2^13, 2^14) */
    assert_int_equal(prof_group_bucket(UINT64_MAX), PROF_GROUP_BUCKETS - 1);
    /* Every bucket's bounds hold it, and the buckets tile 0..infinity. */
    for (unsigned b = 0; b < PROF_GROUP_BUCKETS; b++) {
        uint64_t lo = prof_group_bucket_lower_ns(b), hi = prof_group_bucket_upper_ns(b);

        assert_true(lo < hi);
        assert_int_equal(prof_group_bucket(lo), b);
        if (hi != UINT64_MAX) {
            assert_int_equal(prof_group_bucket(hi - 1), b);
            assert_int_equal(prof_group_bucket_lower_ns(b + 1), hi);
        }
    }
    assert_int_equal(prof_group_bucket_lower_ns(0), 0);
    assert_int_equal(prof_group_bucket_upper_ns(PROF_GROUP_BUCKETS - 1), UINT64_MAX);
    assert_int_equal(prof_group_bucket_lower_ns(PROF_GROUP_BUCKETS - 1),
                     (UINT64_C(1) << (PROF_GROUP_BUCKETS - 2)) * 1000);
}

static void test_quantiles(void **state)
{
    struct prof_group_totals t = {0};

    (void)state;
    assert_int_equal(prof_group_quantile_ns(&t, 0.5), 0); /* no event */
    /* 98 events of 1..2 us, one of 3 us, one of 40 ms (the worst). */
    t.durations[prof_group_bucket(1500)] = 98;
    t.durations[prof_group_bucket(3000)] = 1;
    t.durations[prof_group_bucket(40000000)] = 1;
    t.worst_event_ns = 40000000;
    assert_int_equal(prof_group_quantile_ns(&t, 0.5), 2000);     /* bucket [1, 2) us */
    assert_int_equal(prof_group_quantile_ns(&t, 0.98), 2000);    /* the 98th event */
    assert_int_equal(prof_group_quantile_ns(&t, 0.99), 4000);    /* the 99th: [2, 4) us */
    assert_int_equal(prof_group_quantile_ns(&t, 1.0), 40000000); /* capped by the worst */
    assert_int_equal(prof_group_quantile_ns(&t, 2.0), 40000000);
    assert_int_equal(prof_group_quantile_ns(&t, 0), 0);
    /* An event past the last bucket's lower bound: the worst event, not UINT64_MAX. */
    memset(t.durations, 0, sizeof(t.durations));
    t.durations[PROF_GROUP_BUCKETS - 1] = 1;
    t.worst_event_ns = 3000000000u;
    assert_int_equal(prof_group_quantile_ns(&t, 0.5), 3000000000u);
}

static void test_totals_add(void **state)
{
    struct prof_group_totals a = {.name = "a", .cpu_ns = 5, .events = 1, .worst_event_ns = 9};
    struct prof_group_totals b = {.name = "b", .cpu_ns = 7, .events = 2, .worst_event_ns = 4};

    (void)state;
    a.durations[3] = 1;
    b.durations[3] = 2;
    b.slow_events = 1;
    prof_group_totals_add(&a, &b);
    assert_string_equal(a.name, "a");
    assert_int_equal(a.cpu_ns, 12);
    assert_int_equal(a.events, 3);
    assert_int_equal(a.worst_event_ns, 9);
    assert_int_equal(a.slow_events, 1);
    assert_int_equal(a.durations[3], 3);
}

/* --- the profile ------------------------------------------------------------------------- */

/* What the runtime declares for slow events (child/entry/groups.c), as its profile carries it. */
static const struct prof_schema_field slow_fields[] = {
        {"group", "Group", "string", true},
        {"cpu", "Group CPU", "duration", false},
        {"eventCpu", "Event CPU", "duration", false},
        {"share", "Share of the event", "percentage", false},
};
static const struct prof_marker_schema slow_schema = {
        1,
        "GroupSlowEvent",
        "{marker.data.group}: {marker.data.cpu} of CPU",
        "{marker.data.group}: {marker.data.cpu} of CPU",
        "{marker.data.group}: {marker.data.cpu} of CPU",
        slow_fields,
        4};

struct parsed {
    struct json_doc *doc;
    const struct json_value *root;
};

/* Writes a process profile with two groups, their counters and one slow event; with_main
 * false writes no main thread. Parses it back into *ret. */
static void write_group_profile(bool with_main, struct parsed *ret)
{
    static const struct prof_counter_info counters[] = {
            {0, "RSS", "Memory", "Resident set size"},
            {1, "checkout", "CPU", "CPU time charged to performance group checkout"},
            {2, "search", "CPU", "CPU time charged to performance group search"},
    };
    struct prof_thread_info threads[] = {{PID, "main", 1000, 0, with_main},
                                         {PID + 1, "worker", 1000, 0, false}};
    struct prof_group_totals groups[2] = {
            {.name = "checkout",
             .cpu_ns = 30000000,
             .cycles = 90000000,
             .activations = 12,
             .events = 10,
             .worst_event_ns = 20000000,
             .slow_events = 1,
             .discarded = 2,
             .migrated = 3,
             .stale = 4},
            {.name = "search",
             .cpu_ns = 5000000,
             .cycles = 1,
             .activations = 5,
             .events = 5,
             .worst_event_ns = 1500000},
    };
    struct prof_process_info info = {
            .pid = PID,
            .ppid = 1,
            .name = "test-profile-groups",
            .process_type = "default",
            .start_ns = 1000,
            .start_epoch_ms = 1.7e12,
            .interval_ns = 1000000,
            .threads = threads,
            .thread_count = 2,
            .counters = counters,
            .counter_count = 3,
            .schemas = &slow_schema,
            .schema_count = 1,
            .groups = groups,
            .group_count = 2,
            .slow_event_ns = 16000000,
    };
    struct prof_field fields[4] = {
            {.kind = PROF_FIELD_STRING, .v.s = {"checkout", 8}},
            {.kind = PROF_FIELD_DOUBLE, .v.d = 20.0},
            {.kind = PROF_FIELD_DOUBLE, .v.d = 25.0},
            {.kind = PROF_FIELD_DOUBLE, .v.d = 0.8},
    };
    struct prof_marker m = {.tid = PID + 1,
                            .category = PROF_CATEGORY_APP,
                            .phase = PROF_PHASE_INTERVAL,
                            .start_ns = 5000000,
                            .end_ns = 31000000,
                            .name = {"checkout", 8},
                            .payload_kind = PROF_PAYLOAD_TYPED,
                            .schema_id = 1,
                            .field_count = 4,
                            .fields = fields};
    struct buf_chunk_manager *manager = NULL;
    struct buf_chunked_buffer *buffer = NULL;
    struct json_writer *w = NULL;
    struct json_read_error error;
    char *text = NULL;

    groups[0].durations[prof_group_bucket(1000000)] = 8;
    groups[0].durations[prof_group_bucket(5000000)] = 1;
    groups[0].durations[prof_group_bucket(20000000)] = 1;
    groups[1].durations[prof_group_bucket(1000000)] = 5;
    assert_int_equal(buf_chunk_manager_local_new(1u << 20, 64u << 10, &manager), 0);
    assert_int_equal(buf_chunked_buffer_new(manager, PID, &buffer), 0);
    for (uint32_t i = 0; i < 6; i++) {
        struct prof_counter_sample c = {.counter_id = 1 + i % 2,
                                        .time_ns = 2000000 + i * 1000000,
                                        .delta = 1000000 + i,
                                        .number = 1};

        assert_int_equal(prof_entry_put_counter(buffer, &c), 0);
    }
    assert_int_equal(prof_entry_put_marker(buffer, &m), 0);
    assert_int_equal(json_writer_new_memory(&w), 0);
    assert_int_equal(prof_gecko_write_process(w, NULL, &info, buffer, NULL, NULL), 0);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &text), 0);
    if (json_doc_parse(text, json_writer_length(w), 0, &ret->doc, &error) < 0)
        fail_msg("not JSON: %lu:%lu %s", error.line, error.column, error.message);
    ret->root = json_doc_root(ret->doc);
    free(text);
    json_writer_free(w);
    buf_chunked_buffer_free(buffer);
    buf_chunk_manager_free(manager);
}

static const struct json_value *get(const struct parsed *p, const struct json_value *v,
                                    const char *key)
{
    const struct json_value *r = json_object_get(p->doc, v, key);

    if (!r)
        fail_msg("no key %s", key);
    return r;
}

static int64_t get_int(const struct parsed *p, const struct json_value *v, const char *key)
{
    int64_t n = -1;

    assert_int_equal(json_value_int64(p->doc, get(p, v, key), &n), 0);
    return n;
}

static const char *get_str(const struct parsed *p, const struct json_value *v, const char *key)
{
    const char *s = json_value_string(p->doc, get(p, v, key), NULL);

    if (!s)
        fail_msg("%s is not a string", key);
    return s;
}

static void test_profile_has_group_totals(void **state)
{
    struct parsed p;
    const struct json_value *groups, *totals, *lower, *t;

    (void)state;
    write_group_profile(true, &p);
    groups = get(&p, get(&p, get(&p, p.root, "meta"), "fleetprof"), "groups");
    assert_int_equal(get_int(&p, groups, "slowEventNs"), 16000000);
    lower = get(&p, groups, "bucketLowerUs");
    assert_int_equal(json_value_len(lower), PROF_GROUP_BUCKETS);
    for (unsigned b = 0; b < PROF_GROUP_BUCKETS; b++) {
        int64_t v = -1;

        assert_int_equal(json_value_int64(p.doc, json_array_at(p.doc, lower, b), &v), 0);
        assert_int_equal(v, prof_group_bucket_lower_ns(b) / 1000);
    }
    totals = get(&p, groups, "totals");
    assert_int_equal(json_value_len(totals), 2);
    t = json_array_at(p.doc, totals, 0);
    assert_string_equal(get_str(&p, t, "name"), "checkout");
    assert_int_equal(get_int(&p, t, "cpuNs"), 30000000);
    assert_int_equal(get_int(&p, t, "cycles"), 90000000);
    assert_int_equal(get_int(&p, t, "activations"), 12);
    assert_int_equal(get_int(&p, t, "events"), 10);
    assert_int_equal(get_int(&p, t, "worstEventNs"), 20000000);
    assert_int_equal(get_int(&p, t, "slowEvents"), 1);
    assert_int_equal(get_int(&p, t, "discarded"), 2);
    assert_int_equal(get_int(&p, t, "migrated"), 3);
    assert_int_equal(get_int(&p, t, "stale"), 4);
    assert_int_equal(json_value_len(get(&p, t, "durations")), PROF_GROUP_BUCKETS);
    {
        int64_t sum = 0, v;

        for (unsigned b = 0; b < PROF_GROUP_BUCKETS; b++) {
            assert_int_equal(
                    json_value_int64(p.doc, json_array_at(p.doc, get(&p, t, "durations"), b), &v),
                    0);
            sum += v;
        }
        assert_int_equal(sum, 10); /* one per event */
    }
    assert_string_equal(get_str(&p, json_array_at(p.doc, totals, 1), "name"), "search");
    json_doc_free(p.doc);
}

/* Counters: one per group, each row [time, count, number] by its schema, times sorted, and a
 * GeckoMain thread in the process (the front-end drops the counters of a process without
 * one). */
static void test_profile_group_counters(void **state)
{
    struct parsed p;
    const struct json_value *counters, *threads;
    bool has_main = false;
    int found = 0;

    (void)state;
    write_group_profile(true, &p);
    threads = get(&p, p.root, "threads");
    for (size_t i = 0; i < json_value_len(threads); i++)
        if (!strcmp(get_str(&p, json_array_at(p.doc, threads, i), "name"), "GeckoMain"))
            has_main = true;
    assert_true(has_main);
    counters = get(&p, p.root, "counters");
    for (size_t i = 0; i < json_value_len(counters); i++) {
        const struct json_value *c = json_array_at(p.doc, counters, i);
        const struct json_value *samples = get(&p, c, "samples"), *data;
        int tc = -1, cc, nc;
        double last = -1;

        if (strcmp(get_str(&p, c, "name"), "checkout") && strcmp(get_str(&p, c, "name"), "search"))
            continue;
        found++;
        assert_string_equal(get_str(&p, c, "category"), "CPU");
        assert_non_null(strstr(get_str(&p, c, "description"), get_str(&p, c, "name")));
        tc = (int)get_int(&p, get(&p, samples, "schema"), "time");
        cc = (int)get_int(&p, get(&p, samples, "schema"), "count");
        nc = (int)get_int(&p, get(&p, samples, "schema"), "number");
        data = get(&p, samples, "data");
        assert_int_equal(json_value_len(data), 3);
        for (size_t r = 0; r < json_value_len(data); r++) {
            const struct json_value *row = json_array_at(p.doc, data, r);
            double time;
            int64_t count, number;

            assert_int_equal(json_value_len(row), 3);
            assert_int_equal(json_value_double(p.doc, json_array_at(p.doc, row, tc), &time), 0);
            assert_int_equal(json_value_int64(p.doc, json_array_at(p.doc, row, cc), &count), 0);
            assert_int_equal(json_value_int64(p.doc, json_array_at(p.doc, row, nc), &number), 0);
            assert_true(time >= last);
            last = time;
            assert_true(count >= 1000000);
            assert_int_equal(number, 1);
        }
    }
    assert_int_equal(found, 2);
    json_doc_free(p.doc);
}

/* Formats the front-end accepts for a marker field (shared/gecko-format.md section 8). */
static bool valid_format(const char *f)
{
    static const char *const formats[] = {"url",
                                          "file-path",
                                          "sanitized-string",
                                          "string",
                                          "unique-string",
                                          "flow-id",
                                          "terminating-flow-id",
                                          "duration",
                                          "time",
                                          "seconds",
                                          "milliseconds",
                                          "microseconds",
                                          "nanoseconds",
                                          "bytes",
                                          "percentage",
                                          "integer",
                                          "decimal",
                                          "hexadecimal",
                                          "pid",
                                          "tid",
                                          "list"};

    for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
        if (!strcmp(f, formats[i]))
            return true;
    return false;
}

/* The slow-event marker: a schema in meta.markerSchema shown in the marker chart and table,
 * every field with a valid format, and the marker's data carrying every field of it. */
static void test_profile_slow_event_marker(void **state)
{
    struct parsed p;
    const struct json_value *schemas, *schema = NULL, *threads, *marker = NULL;
    const struct json_value *display, *fields, *strings = NULL;
    bool chart = false, table = false;

    (void)state;
    write_group_profile(true, &p);
    schemas = get(&p, get(&p, p.root, "meta"), "markerSchema");
    for (size_t i = 0; i < json_value_len(schemas); i++)
        if (!strcmp(get_str(&p, json_array_at(p.doc, schemas, i), "name"), "GroupSlowEvent"))
            schema = json_array_at(p.doc, schemas, i);
    assert_non_null(schema);
    assert_non_null(strstr(get_str(&p, schema, "tooltipLabel"), "{marker.data.group}"));
    assert_non_null(strstr(get_str(&p, schema, "tableLabel"), "{marker.data.group}"));
    display = get(&p, schema, "display");
    for (size_t i = 0; i < json_value_len(display); i++) {
        const char *d = json_value_string(p.doc, json_array_at(p.doc, display, i), NULL);

        chart |= d && !strcmp(d, "marker-chart");
        table |= d && !strcmp(d, "marker-table");
    }
    assert_true(chart && table);
    fields = get(&p, schema, "data");
    assert_int_equal(json_value_len(fields), 4);
    for (size_t i = 0; i < json_value_len(fields); i++)
        assert_true(valid_format(get_str(&p, json_array_at(p.doc, fields, i), "format")));

    threads = get(&p, p.root, "threads");
    for (size_t i = 0; i < json_value_len(threads); i++) {
        const struct json_value *t = json_array_at(p.doc, threads, i);
        const struct json_value *markers = get(&p, t, "markers");
        const struct json_value *data = get(&p, markers, "data");
        int dc = (int)get_int(&p, get(&p, markers, "schema"), "data");
        int nc = (int)get_int(&p, get(&p, markers, "schema"), "name");
        int pc = (int)get_int(&p, get(&p, markers, "schema"), "phase");
        int cc = (int)get_int(&p, get(&p, markers, "schema"), "category");

        for (size_t r = 0; r < json_value_len(data); r++) {
            const struct json_value *row = json_array_at(p.doc, data, r);
            const struct json_value *d = json_array_at(p.doc, row, (size_t)dc);
            const char *type = json_value_string(p.doc, json_object_get(p.doc, d, "type"), NULL);
            int64_t v;

            if (!type || strcmp(type, "GroupSlowEvent"))
                continue;
            marker = d;
            strings = get(&p, t, "stringTable");
            /* The name is a string-table index; an interval; a category in range. */
            assert_int_equal(json_value_int64(p.doc, json_array_at(p.doc, row, nc), &v), 0);
            assert_string_equal(
                    json_value_string(p.doc, json_array_at(p.doc, strings, (size_t)v), NULL),
                    "checkout");
            assert_int_equal(json_value_int64(p.doc, json_array_at(p.doc, row, pc), &v), 0);
            assert_int_equal(v, 1);
            assert_int_equal(json_value_int64(p.doc, json_array_at(p.doc, row, cc), &v), 0);
            assert_true(v >= 0 && v < PROF_CATEGORY_COUNT);
        }
    }
    assert_non_null(marker);
    for (size_t i = 0; i < json_value_len(fields); i++)
        assert_non_null(json_object_get(p.doc, marker,
                                        get_str(&p, json_array_at(p.doc, fields, i), "key")));
    assert_string_equal(get_str(&p, marker, "group"), "checkout");
    json_doc_free(p.doc);
}

/* A process whose main thread is not registered (the profiler started from another thread)
 * still shows its group counters: the front-end drops the counters of a process without a
 * GeckoMain thread, so the writer makes an empty one with the process's pid as tid. */
static void test_profile_without_main_thread_keeps_counters(void **state)
{
    struct parsed p;
    const struct json_value *threads;
    int mains = 0;

    (void)state;
    write_group_profile(false, &p);
    threads = get(&p, p.root, "threads");
    for (size_t i = 0; i < json_value_len(threads); i++) {
        const struct json_value *t = json_array_at(p.doc, threads, i);

        if (strcmp(get_str(&p, t, "name"), "GeckoMain"))
            continue;
        mains++;
        assert_int_equal(get_int(&p, t, "pid"), PID);
        assert_int_equal(get_int(&p, t, "tid"), PID);
        assert_int_equal(json_value_len(get(&p, get(&p, t, "samples"), "data")), 0);
    }
    assert_int_equal(mains, 1);
    assert_true(json_value_len(get(&p, p.root, "counters")) >= 2);
    json_doc_free(p.doc);
}

/* A process without group totals writes no "groups" key: profiles without groups stay as
 * they were. */
static void test_profile_without_groups(void **state)
{
    static const struct prof_thread_info threads[] = {{PID, "main", 1000, 0, true}};
    struct prof_process_info info = {.pid = PID,
                                     .name = "none",
                                     .process_type = "default",
                                     .start_ns = 1000,
                                     .start_epoch_ms = 1.7e12,
                                     .interval_ns = 1000000,
                                     .threads = threads,
                                     .thread_count = 1};
    struct buf_chunk_manager *manager = NULL;
    struct buf_chunked_buffer *buffer = NULL;
    struct json_writer *w = NULL;
    char *text = NULL;

    (void)state;
    assert_int_equal(buf_chunk_manager_local_new(1u << 20, 64u << 10, &manager), 0);
    assert_int_equal(buf_chunked_buffer_new(manager, PID, &buffer), 0);
    assert_int_equal(json_writer_new_memory(&w), 0);
    assert_int_equal(prof_gecko_write_process(w, NULL, &info, buffer, NULL, NULL), 0);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &text), 0);
    assert_null(strstr(text, "\"groups\""));
    free(text);
    json_writer_free(w);
    buf_chunked_buffer_free(buffer);
    buf_chunk_manager_free(manager);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_charge),
            cmocka_unit_test(test_buckets),
            cmocka_unit_test(test_quantiles),
            cmocka_unit_test(test_totals_add),
            cmocka_unit_test(test_profile_has_group_totals),
            cmocka_unit_test(test_profile_group_counters),
            cmocka_unit_test(test_profile_slow_event_marker),
            cmocka_unit_test(test_profile_without_main_thread_keeps_counters),
            cmocka_unit_test(test_profile_without_groups),
    };

    return cmocka_run_group_tests_name("profile-groups", tests, NULL, NULL);
}
