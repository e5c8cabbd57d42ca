/* tests/unit/ipc/ipc-samples.h - one envelope of every message type, every field non-default.
 *
 * Used by the round-trip tests, the frame-splitting tests, the benchmarks and the generator
 * of the fuzz corpora. The envelopes live in static storage built on first use.
 */
#ifndef FLEETPROF_TESTS_UNIT_IPC_IPC_SAMPLES_H
#define FLEETPROF_TESTS_UNIT_IPC_IPC_SAMPLES_H

#include <stddef.h>

#include "proto/fleetprof-protocol.h"

/* Stores the number of samples in *ret_count and returns the array (static, read-only). */
const Fleetprof__Envelope *const *ipc_samples(size_t *ret_count);

#endif /* FLEETPROF_TESTS_UNIT_IPC_IPC_SAMPLES_H */
