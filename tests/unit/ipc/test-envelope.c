/* Unit tests for ipc/envelope.c: round-trip of every message, validation rules, string checks,
 * the decode memory budget, message names, version checks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ipc-samples.h"
#include "ipc/ipc-internal.h"
#include "ipc/ipc.h"
#include "testlib.h"

/* Packs env without the frame prefix into a malloc'd buffer. */
static uint8_t *pack(const Fleetprof__Envelope *env, size_t *ret_len)
{
    size_t len = fleetprof__envelope__get_packed_size(env);
    uint8_t *buf = malloc(len ? len : 1);

    assert_non_null(buf);
    assert_int_equal(fleetprof__envelope__pack(env, buf), len);
    *ret_len = len;
    return buf;
}

static void test_samples_cover_every_message(void **state)
{
    const ProtobufCMessageDescriptor *d = &fleetprof__envelope__descriptor;
    size_t n;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);

    (void)state;
    assert_int_equal(n, d->n_fields);
    for (unsigned f = 0; f < d->n_fields; f++) {
        bool found = false;

        for (size_t i = 0; i < n; i++)
            found |= samples[i]->msg_case == (Fleetprof__Envelope__MsgCase)d->fields[f].id;
        assert_true(found);
    }
}

/* Every field of every sample is non-default, so a field lost in either direction changes the
 * re-encoded bytes. */
static void test_round_trip_every_message(void **state)
{
    size_t n;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);

    (void)state;
    for (size_t i = 0; i < n; i++) {
        Fleetprof__Envelope *back = NULL;
        const char *reason = NULL;
        size_t len, len2;
        uint8_t *bytes = pack(samples[i], &len), *bytes2;
        int r;

        r = ipc_envelope_validate(samples[i], &reason);
        if (r < 0)
            fail_msg("sample %s invalid: %s", ipc_msg_name(samples[i]->msg_case), reason);
        r = ipc_envelope_decode(bytes, len, 0, &back, &reason);
        if (r < 0)
            fail_msg("sample %s: %s", ipc_msg_name(samples[i]->msg_case), reason);
        assert_int_equal(back->msg_case, samples[i]->msg_case);
        bytes2 = pack(back, &len2);
        assert_int_equal(len, len2);
        assert_memory_equal(bytes, bytes2, len);
        /* The message is not empty on the wire: tag, length, at least one field. */
        assert_true(len >= 4);
        back = ipc_envelope_free(back);
        assert_null(back);
        free(bytes);
        free(bytes2);
    }
}

static void test_round_trip_fields(void **state)
{
    size_t n, len;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);
    Fleetprof__Envelope *hello = NULL, *update = NULL, *data = NULL;
    uint8_t *bytes;

    (void)state;
    bytes = pack(samples[0], &len);
    assert_int_equal(ipc_envelope_decode(bytes, len, 0, &hello, NULL), 0);
    free(bytes);
    assert_int_equal(hello->hello->pid, 4242);
    assert_int_equal(hello->hello->n_argv, 4);
    assert_string_equal(hello->hello->argv[3], "--name=\xc3\xa9t\xc3\xa9");
    assert_true(hello->hello->start_ns == 123456789012345ull);

    bytes = pack(samples[9], &len);
    assert_int_equal(ipc_envelope_decode(bytes, len, 0, &update, NULL), 0);
    free(bytes);
    assert_int_equal(update->chunk_manager_update->n_newly_released, 2);
    assert_int_equal(update->chunk_manager_update->newly_released[1]->done_ns, 2000);
    assert_true(update->chunk_manager_update->final);

    bytes = pack(samples[14], &len);
    assert_int_equal(ipc_envelope_decode(bytes, len, 0, &data, NULL), 0);
    free(bytes);
    assert_int_equal(data->profile_data->data.len, samples[14]->profile_data->data.len);
    assert_memory_equal(data->profile_data->data.data, samples[14]->profile_data->data.data,
                        data->profile_data->data.len);
    ipc_envelope_free(hello);
    ipc_envelope_free(update);
    ipc_envelope_free(data);
}

/* Builds a hello, lets mutate() spoil it, and expects validate to fail with code. */
static void expect_invalid(const Fleetprof__Envelope *env, int code)
{
    const char *reason = NULL;

    assert_int_equal(ipc_envelope_validate(env, &reason), code);
    assert_non_null(reason);
    assert_true(strlen(reason) > 0);
}

static void test_validate_rules(void **state)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;
    Fleetprof__GatherProgress progress = FLEETPROF__GATHER_PROGRESS__INIT;
    Fleetprof__ProfileData data = FLEETPROF__PROFILE_DATA__INIT;
    Fleetprof__Symbolize sym = FLEETPROF__SYMBOLIZE__INIT;
    Fleetprof__SymbolModule mod = FLEETPROF__SYMBOL_MODULE__INIT;
    Fleetprof__SymbolModule *mods[] = {&mod};
    Fleetprof__SymbolAddress addr = FLEETPROF__SYMBOL_ADDRESS__INIT;
    Fleetprof__SymbolAddress *addrs[] = {&addr};
    Fleetprof__Symbols syms = FLEETPROF__SYMBOLS__INIT;
    Fleetprof__Welcome welcome = FLEETPROF__WELCOME__INIT;
    Fleetprof__ClockReference clock_ref = FLEETPROF__CLOCK_REFERENCE__INIT;
    Fleetprof__ChunkManagerUpdate update = FLEETPROF__CHUNK_MANAGER_UPDATE__INIT;
    Fleetprof__Start start = FLEETPROF__START__INIT;
    char *names[] = {"a", "b"};
    uint32_t lines[] = {1};
    char long_name[IPC_NAME_MAX_BYTES + 2];
    static uint8_t big[IPC_PROFILE_PIECE_MAX_BYTES + 1];

    (void)state;
    expect_invalid(&env, -ENOMSG);
    env.msg_case = (Fleetprof__Envelope__MsgCase)99;
    env.hello = &hello;
    expect_invalid(&env, -ENOMSG);

    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = NULL;
    expect_invalid(&env, -EBADMSG);
    env.hello = &hello;
    hello.pid = 10;
    expect_invalid(&env, -EBADMSG); /* id 0 */
    hello.id = 1;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    hello.pid = 0;
    expect_invalid(&env, -EBADMSG);
    hello.pid = 10;
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    hello.name = long_name;
    expect_invalid(&env, -EBADMSG);
    hello.name = "ok";
    hello.n_argv = IPC_ARGV_MAX + 1;
    expect_invalid(&env, -EBADMSG);
    hello.n_argv = 0;

    env.msg_case = FLEETPROF__ENVELOPE__MSG_START;
    env.start = &start;
    expect_invalid(&env, -EBADMSG);

    env.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS;
    env.gather_progress = &progress;
    progress.request_id = 3;
    progress.proportion = IPC_PROPORTION_ONE;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    progress.proportion = IPC_PROPORTION_INVALID;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    progress.proportion = IPC_PROPORTION_ONE + 1;
    expect_invalid(&env, -EBADMSG);

    env.msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
    env.profile_data = &data;
    data.request_id = 5;
    data.data.data = big;
    data.data.len = IPC_PROFILE_PIECE_MAX_BYTES;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    data.data.len = IPC_PROFILE_PIECE_MAX_BYTES + 1;
    expect_invalid(&env, -EBADMSG);
    data.data.len = 1;
    data.error = "failed";
    expect_invalid(&env, -EBADMSG); /* error on a piece that is not the last */
    data.last = 1;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    data.offset = UINT64_MAX;
    expect_invalid(&env, -EBADMSG);

    env.msg_case = FLEETPROF__ENVELOPE__MSG_SYMBOLIZE;
    env.symbolize = &sym;
    sym.id = 9;
    sym.n_modules = 1;
    sym.modules = mods;
    sym.n_addresses = 1;
    sym.addresses = addrs;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    addr.module_index = 1;
    expect_invalid(&env, -EBADMSG);

    env.msg_case = FLEETPROF__ENVELOPE__MSG_SYMBOLS;
    env.symbols = &syms;
    syms.request_id = 9;
    syms.n_names = 2;
    syms.names = names;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    syms.n_lines = 1;
    syms.lines = lines;
    expect_invalid(&env, -EBADMSG);

    env.msg_case = FLEETPROF__ENVELOPE__MSG_WELCOME;
    env.welcome = &welcome;
    welcome.request_id = 1;
    welcome.interval_ns = 1000;
    welcome.chunk_bytes = 65536;
    welcome.process_limit_bytes = 65536;
    expect_invalid(&env, -EBADMSG); /* no clock */
    welcome.clock = &clock_ref;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
    welcome.chunk_bytes = 4096;
    expect_invalid(&env, -EBADMSG);
    welcome.chunk_bytes = 65536;
    welcome.stackwalk = (Fleetprof__StackwalkMode)17;
    expect_invalid(&env, -EBADMSG);

    env.msg_case = FLEETPROF__ENVELOPE__MSG_CHUNK_MANAGER_UPDATE;
    env.chunk_manager_update = &update;
    expect_invalid(&env, -EBADMSG); /* unsolicited and not final */
    update.final = 1;
    assert_int_equal(ipc_envelope_validate(&env, NULL), 0);
}

/* Replaces the bytes of the hello's name on the wire, which packing cannot produce. */
static void test_strings_checked_on_the_wire(void **state)
{
    static const char *bad[] = {"a\0b", "\xff", "\xc0\x80", "\xed\xa0\x80", "\xe2\x82"};
    static const size_t bad_len[] = {3, 1, 2, 3, 2};
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello hello = FLEETPROF__HELLO__INIT;

    (void)state;
    hello.id = 1;
    hello.pid = 1;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = &hello;
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        Fleetprof__Envelope *back = NULL;
        const char *reason = NULL;
        char placeholder[8];
        size_t len;
        uint8_t *bytes;
        uint8_t *at;

        memset(placeholder, 'Q', bad_len[i]);
        placeholder[bad_len[i]] = '\0';
        hello.name = placeholder;
        bytes = pack(&env, &len);
        at = memmem(bytes, len, placeholder, bad_len[i]);
        assert_non_null(at);
        memcpy(at, bad[i], bad_len[i]);
        assert_int_equal(ipc_envelope_decode(bytes, len, 0, &back, &reason), -EBADMSG);
        assert_null(back);
        assert_non_null(strstr(reason, "UTF-8"));
        free(bytes);
    }
    assert_true(ipc__text_valid((const uint8_t *)"\xf0\x9f\x98\x80 ok", 7));
    assert_false(ipc__text_valid((const uint8_t *)"\xf4\x90\x80\x80", 4));
}

static void test_decode_budget(void **state)
{
    /* A status report of 20000 empty children: 2 bytes each on the wire, ~100 in memory. */
    size_t n_children = 20000, len;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__StatusReport report = FLEETPROF__STATUS_REPORT__INIT;
    Fleetprof__ChildStatus child = FLEETPROF__CHILD_STATUS__INIT;
    Fleetprof__ChildStatus **children = calloc(n_children, sizeof(*children));
    Fleetprof__Envelope *back = NULL;
    const char *reason = NULL;
    uint8_t *bytes;

    (void)state;
    assert_non_null(children);
    for (size_t i = 0; i < n_children; i++)
        children[i] = &child;
    report.request_id = 1;
    report.n_children = n_children;
    report.children = children;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_STATUS_REPORT;
    env.status_report = &report;
    bytes = pack(&env, &len);
    /* Enough budget: decodes (and then fails validation: pid 0). */
    assert_int_equal(ipc_envelope_decode(bytes, len, 0, &back, &reason), -EBADMSG);
    assert_non_null(strstr(reason, "pid"));
    /* 16 times the wire size is not enough for this amplification. */
    assert_int_equal(ipc_envelope_decode(bytes, len, len * 16, &back, &reason), -EBADMSG);
    assert_non_null(strstr(reason, "budget"));
    assert_null(back);
    free(bytes);
    free(children);
}

static void test_undecodable(void **state)
{
    static const uint8_t truncated_sub[] = {0x0a, 0x05, 0x08};
    static const uint8_t unknown_only[] = {0xf8, 0x06, 0x01}; /* field 111, varint */
    static const uint8_t group[] = {0x0b};
    Fleetprof__Envelope *env = NULL;
    const char *reason = NULL;

    (void)state;
    assert_int_equal(ipc_envelope_decode(truncated_sub, sizeof(truncated_sub), 0, &env, &reason),
                     -EBADMSG);
    assert_int_equal(ipc_envelope_decode(unknown_only, sizeof(unknown_only), 0, &env, &reason),
                     -ENOMSG);
    assert_int_equal(ipc_envelope_decode(group, sizeof(group), 0, &env, &reason), -EBADMSG);
    assert_int_equal(ipc_envelope_decode(NULL, 0, 0, &env, &reason), -ENOMSG);
    assert_null(env);
}

static void test_names_and_versions(void **state)
{
    char reason[256];

    (void)state;
    assert_string_equal(ipc_msg_name(FLEETPROF__ENVELOPE__MSG_HELLO), "hello");
    assert_string_equal(ipc_msg_name(FLEETPROF__ENVELOPE__MSG_PROFILE_DATA), "profile_data");
    assert_string_equal(ipc_msg_name(FLEETPROF__ENVELOPE__MSG__NOT_SET), "unset");
    assert_string_equal(ipc_msg_name((Fleetprof__Envelope__MsgCase)77), "unknown");
    assert_int_equal(ipc_version_check(FLEETPROF_PROTOCOL_VERSION, reason, sizeof(reason)), 0);
    assert_string_equal(reason, "");
    assert_int_equal(ipc_version_check(FLEETPROF_PROTOCOL_VERSION + 6, reason, sizeof(reason)),
                     -EPROTONOSUPPORT);
    assert_non_null(strstr(reason, "version 7"));
    assert_int_equal(ipc_version_check(0, reason, 8), -EPROTONOSUPPORT);
    assert_int_equal(strlen(reason), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_samples_cover_every_message),
            cmocka_unit_test(test_round_trip_every_message),
            cmocka_unit_test(test_round_trip_fields),
            cmocka_unit_test(test_validate_rules),
            cmocka_unit_test(test_strings_checked_on_the_wire),
            cmocka_unit_test(test_decode_budget),
            cmocka_unit_test(test_undecodable),
            cmocka_unit_test(test_names_and_versions),
    };
    return cmocka_run_group_tests_name("ipc-envelope", tests, NULL, NULL);
}
