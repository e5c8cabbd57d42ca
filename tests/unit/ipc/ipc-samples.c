/* tests/unit/ipc/ipc-samples.c - see ipc-samples.h. */
#include "ipc-samples.h"

#include <stdbool.h>

#include "common/macros.h"

static char *argv_[] = {"./server", "--workers", "8", "--name=\xc3\xa9t\xc3\xa9"};
static Fleetprof__Hello hello = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__hello__descriptor),
        .id = 1,
        .version = 1,
        .pid = 4242,
        .ppid = 4200,
        .name = "server",
        .n_argv = ARRAY_SIZE(argv_),
        .argv = argv_,
        .start_ns = 123456789012345ull,
        .start_epoch_ms = 1700000000123ull,
        .chunk_region = true,
        .region_evictions = true,
};

static Fleetprof__ClockReference clock_ref = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__clock_reference__descriptor),
        .monotonic_ns = 987654321ull,
        .epoch_ms = 1700000000456ull,
};
static char *feature_names[] = {"stacks", "cpu", "x-experimental"};
static Fleetprof__Welcome welcome = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__welcome__descriptor),
        .request_id = 1,
        .version = 1,
        .interval_ns = 1000000,
        .process_limit_bytes = 64ull << 20,
        .chunk_bytes = 256ull << 10,
        .features = FLEETPROF__FEATURE_BIT__FEATURE_STACKS | FLEETPROF__FEATURE_BIT__FEATURE_CPU,
        .n_feature_names = ARRAY_SIZE(feature_names),
        .feature_names = feature_names,
        .stackwalk = FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_DWARF,
        .clock = &clock_ref,
        .start = 1,
        .region_evictions = true,
        .update_hold_ns = 200000000,
};

static Fleetprof__Refuse refuse = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__refuse__descriptor),
        .request_id = 7,
        .version = 1,
        .reason = "protocol version mismatch",
};

static Fleetprof__Start start = {PROTOBUF_C_MESSAGE_INIT(&fleetprof__start__descriptor), 11};
static Fleetprof__Stop stop = {PROTOBUF_C_MESSAGE_INIT(&fleetprof__stop__descriptor), 12};
static Fleetprof__Pause pause_ = {PROTOBUF_C_MESSAGE_INIT(&fleetprof__pause__descriptor), 13};
static Fleetprof__Resume resume = {PROTOBUF_C_MESSAGE_INIT(&fleetprof__resume__descriptor), 14};
static Fleetprof__Ack ack = {PROTOBUF_C_MESSAGE_INIT(&fleetprof__ack__descriptor), 15};
static Fleetprof__AwaitNextChunkManagerUpdate await_update = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__await_next_chunk_manager_update__descriptor), 16, 1};

static Fleetprof__ChunkMetadata chunk_a = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__chunk_metadata__descriptor), 1000, 262144};
static Fleetprof__ChunkMetadata chunk_b = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__chunk_metadata__descriptor), 2000, 131072};
static Fleetprof__ChunkMetadata *chunks[] = {&chunk_a, &chunk_b};
static Fleetprof__ChunkManagerUpdate update = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__chunk_manager_update__descriptor),
        .request_id = 16,
        .unreleased_bytes = 262144,
        .released_bytes = 393216,
        .oldest_done_ns = 1000,
        .n_newly_released = ARRAY_SIZE(chunks),
        .newly_released = chunks,
        .final = 1,
        .standing = 1,
};

static Fleetprof__DestroyReleasedChunksAtOrBefore destroy = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__destroy_released_chunks_at_or_before__descriptor), 17,
        1500};
static Fleetprof__GatherProfile gather = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__gather_profile__descriptor), 18};
static Fleetprof__GetGatherProfileProgress get_progress = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__get_gather_profile_progress__descriptor), 19, 18};
static Fleetprof__GatherProgress progress = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__gather_progress__descriptor),
        .request_id = 19,
        .gather_id = 18,
        .proportion = 1u << 30,
        .location = "writing samples of thread 3",
};

static uint8_t json[] = "{\"meta\":{\"version\":27},\"threads\":[]}";
static Fleetprof__ProfileData profile_data = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__profile_data__descriptor),
        .request_id = 18,
        .data = {sizeof(json) - 1, json},
        .last = 1,
        .error = "gather thread failed",
        .exit = 1,
        .offset = 1048576,
};

static uint8_t build_id[] = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04};
static Fleetprof__SymbolModule mod_a = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__symbol_module__descriptor),
        "/usr/bin/server",
        {sizeof(build_id), build_id},
        0x555555554000ull};
static Fleetprof__SymbolModule mod_b = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__symbol_module__descriptor),
        "/lib/x86_64-linux-gnu/libc.so.6",
        {sizeof(build_id), build_id},
        0x7ffff7dd0000ull};
static Fleetprof__SymbolModule *mods[] = {&mod_a, &mod_b};
static Fleetprof__SymbolAddress addr_a = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__symbol_address__descriptor), 0, 0x1234};
static Fleetprof__SymbolAddress addr_b = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__symbol_address__descriptor), 1, 0x2a0f0};
static Fleetprof__SymbolAddress *addrs[] = {&addr_a, &addr_b};
static Fleetprof__Symbolize symbolize = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__symbolize__descriptor),
        .id = 20,
        .n_modules = ARRAY_SIZE(mods),
        .modules = mods,
        .n_addresses = ARRAY_SIZE(addrs),
        .addresses = addrs,
};

static char *sym_names[] = {"main", "__libc_start_call_main"};
static char *sym_files[] = {"server.c", ""};
static uint32_t sym_lines[] = {42, 0};
static uint32_t sym_status[] = {0, 2};
static char *sym_module_errors[] = {"", "/lib/libc.so.6: No such file or directory"};
static Fleetprof__Symbols symbols = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__symbols__descriptor),
        .request_id = 20,
        .n_names = 2,
        .names = sym_names,
        .n_files = 2,
        .files = sym_files,
        .n_lines = 2,
        .lines = sym_lines,
        .error = "partial: libc has no debug info",
        .offset = 4096,
        .last = 1,
        .n_status = 2,
        .status = sym_status,
        .n_module_errors = 2,
        .module_errors = sym_module_errors,
};

static Fleetprof__Error error = {PROTOBUF_C_MESSAGE_INIT(&fleetprof__error__descriptor), 21, 110,
                                 "gather timed out"};

static Fleetprof__CaptureRequest capture = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__capture_request__descriptor), 22, "/tmp/now.json",
        5000};
static Fleetprof__StatusRequest status_req = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__status_request__descriptor), 23};
static Fleetprof__StopRequest stop_req = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__stop_request__descriptor), 24};

static Fleetprof__ChildStatus child_a = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__child_status__descriptor),
        .pid = 4242,
        .ppid = 4200,
        .name = "server",
        .unreleased_bytes = 262144,
        .released_bytes = 524288,
        .chunks = 3,
        .last_update_age_ms = 12,
        .state = FLEETPROF__CHILD_STATE__CHILD_STATE_RUNNING,
};
static Fleetprof__ChildStatus child_b = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__child_status__descriptor),
        .pid = 4243,
        .ppid = 4242,
        .name = "worker",
        .unreleased_bytes = 1,
        .released_bytes = 2,
        .chunks = 1,
        .last_update_age_ms = 3,
        .state = FLEETPROF__CHILD_STATE__CHILD_STATE_GATHERING,
        .destroy_requests = 5,
        .region_evictions = 6,
        .region_updates = 7,
};
static Fleetprof__ChildStatus *children[] = {&child_a, &child_b};
static Fleetprof__StatusTotals totals = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__status_totals__descriptor),
        262145,
        524290,
        777,
        2,
        1,
        11,
        12,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
        20};
static uint64_t durations_a[22] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                   12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22};
static Fleetprof__GroupTotals group_a = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__group_totals__descriptor),
        .name = "tenant-a",
        .cpu_ns = 5000000,
        .cycles = 15000000,
        .activations = 40,
        .events = 20,
        .worst_event_ns = 900000,
        .slow_events = 1,
        .discarded = 2,
        .migrated = 3,
        .stale = 4,
        .n_durations = ARRAY_SIZE(durations_a),
        .durations = durations_a,
};
static Fleetprof__GroupTotals *groups_a[] = {&group_a};
static Fleetprof__GroupStats group_stats = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__group_stats__descriptor),
        .id = 25,
        .process_cpu_ns = 9000000,
        .slow_event_ns = 16000000,
        .n_groups = ARRAY_SIZE(groups_a),
        .groups = groups_a,
        .final = true,
        .time_ns = 123456789,
};
static int32_t spawned_pids[] = {4243, 4244};
static Fleetprof__Spawned spawned = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__spawned__descriptor),
        .n_pids = ARRAY_SIZE(spawned_pids),
        .pids = spawned_pids,
};
static Fleetprof__GroupsRequest groups_req = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__groups_request__descriptor), 26, "tenant-a"};
static Fleetprof__SettledTotals settled_a = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__settled_totals__descriptor), 1500000, 7, 1};
static Fleetprof__GroupProcess group_proc = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__group_process__descriptor),
        4242,
        "server",
        true,
        &group_a,
        &settled_a};
static Fleetprof__GroupProcess *group_procs[] = {&group_proc};
static Fleetprof__FleetGroup fleet_group = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__fleet_group__descriptor),
        .totals = &group_a,
        .processes = 2,
        .live_processes = 1,
        .n_per_process = ARRAY_SIZE(group_procs),
        .per_process = group_procs,
        .settled = &settled_a,
};
static Fleetprof__FleetGroup *fleet_groups[] = {&fleet_group};
static Fleetprof__StatusReport status_report = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__status_report__descriptor),
        .request_id = 23,
        .n_children = ARRAY_SIZE(children),
        .children = children,
        .totals = &totals,
        .global_limit_bytes = 256ull << 20,
        .n_groups = 1,
        .groups = fleet_groups,
};
static Fleetprof__CaptureProgress capture_progress = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__capture_progress__descriptor), 22, 3, 5, 1234567};
static Fleetprof__CaptureResult capture_result = {
        PROTOBUF_C_MESSAGE_INIT(&fleetprof__capture_result__descriptor),
        22,
        "/tmp/now.json",
        7654321,
        5,
        "1 child timed out",
        1,
        1,
        0,
        NULL};

static Fleetprof__GroupsReport groups_report = {
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__groups_report__descriptor),
        .request_id = 26,
        .time_ns = 123456789,
        .fleet_cpu_ns = 99000000,
        .processes = 3,
        .n_groups = ARRAY_SIZE(fleet_groups),
        .groups = fleet_groups,
        .settled_ns = 120000000,
        .settled_fleet_cpu_ns = 97000000,
};

#define ENV(field, member, value)                                          \
    {                                                                      \
        .base = PROTOBUF_C_MESSAGE_INIT(&fleetprof__envelope__descriptor), \
        .msg_case = FLEETPROF__ENVELOPE__MSG_##field, .member = &(value)   \
    }

static Fleetprof__Envelope envelopes[] = {
        ENV(HELLO, hello, hello),
        ENV(WELCOME, welcome, welcome),
        ENV(REFUSE, refuse, refuse),
        ENV(START, start, start),
        ENV(STOP, stop, stop),
        ENV(PAUSE, pause, pause_),
        ENV(RESUME, resume, resume),
        ENV(ACK, ack, ack),
        ENV(AWAIT_NEXT_CHUNK_MANAGER_UPDATE, await_next_chunk_manager_update, await_update),
        ENV(CHUNK_MANAGER_UPDATE, chunk_manager_update, update),
        ENV(DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE, destroy_released_chunks_at_or_before, destroy),
        ENV(GATHER_PROFILE, gather_profile, gather),
        ENV(GET_GATHER_PROFILE_PROGRESS, get_gather_profile_progress, get_progress),
        ENV(GATHER_PROGRESS, gather_progress, progress),
        ENV(PROFILE_DATA, profile_data, profile_data),
        ENV(SYMBOLIZE, symbolize, symbolize),
        ENV(SYMBOLS, symbols, symbols),
        ENV(ERROR, error, error),
        ENV(CAPTURE_REQUEST, capture_request, capture),
        ENV(STATUS_REQUEST, status_request, status_req),
        ENV(STOP_REQUEST, stop_request, stop_req),
        ENV(STATUS_REPORT, status_report, status_report),
        ENV(CAPTURE_PROGRESS, capture_progress, capture_progress),
        ENV(CAPTURE_RESULT, capture_result, capture_result),
        ENV(GROUP_STATS, group_stats, group_stats),
        ENV(SPAWNED, spawned, spawned),
        ENV(GROUPS_REQUEST, groups_request, groups_req),
        ENV(GROUPS_REPORT, groups_report, groups_report),
};

static const Fleetprof__Envelope *pointers[ARRAY_SIZE(envelopes)];

const Fleetprof__Envelope *const *ipc_samples(size_t *ret_count)
{
    for (size_t i = 0; i < ARRAY_SIZE(envelopes); i++)
        pointers[i] = &envelopes[i];
    *ret_count = ARRAY_SIZE(envelopes);
    return pointers;
}
