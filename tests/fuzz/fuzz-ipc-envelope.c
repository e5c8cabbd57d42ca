/* tests/fuzz/fuzz-ipc-envelope.c - Envelope decode + validation (what the daemon runs on every
 * frame from a child), then a re-encoding round trip.
 *
 * Input: one packed Envelope, no length prefix. Whatever the bytes, decoding must not crash
 * or leak. An accepted envelope must re-encode, decode again, validate again, and re-encode
 * to the same bytes (the decoded form is a fixed point).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *pack(const Fleetprof__Envelope *env, size_t *ret_len)
{
    size_t n = ipc_frame_size(env);
    uint8_t *buf = malloc(n);

    if (!buf || ipc_frame_encode(env, buf, n) != (ssize_t)n)
        __builtin_trap();
    *ret_len = n;
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fleetprof__Envelope *env = NULL, *again = NULL;
    const char *reason = NULL;
    uint8_t *first, *second;
    size_t len1, len2, prefix;
    int r;

    /* A tight budget exercises protobuf-c's allocation-failure paths. */
    r = ipc_envelope_decode(data, size, size * 2 + 64, &env, &reason);
    if (r == 0)
        env = ipc_envelope_free(env);
    else if (!reason || !reason[0])
        __builtin_trap();

    r = ipc_envelope_decode(data, size, 0, &env, &reason);
    if (r < 0) {
        if (env || !reason || !reason[0])
            __builtin_trap();
        return 0;
    }
    if (ipc_envelope_validate(env, &reason) != 0 || !ipc_msg_name(env->msg_case)[0])
        __builtin_trap();
    first = pack(env, &len1);
    prefix = len1 - fleetprof__envelope__get_packed_size(env);
    if (ipc_envelope_decode(first + prefix, len1 - prefix, 0, &again, &reason) != 0)
        __builtin_trap();
    second = pack(again, &len2);
    if (len1 != len2 || memcmp(first, second, len1) != 0)
        __builtin_trap();
    free(first);
    free(second);
    ipc_envelope_free(env);
    ipc_envelope_free(again);
    return 0;
}
