/* tests/lib/json-check.h - is a byte string one complete, valid JSON value? */
#ifndef FLEETPROF_TESTS_LIB_JSON_CHECK_H
#define FLEETPROF_TESTS_LIB_JSON_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* True if text[0..len) is exactly one JSON value (whitespace around it allowed), strictly
 * per RFC 8259, with valid UTF-8 in strings. */
bool test_json_valid(const char *text, size_t len);

#endif /* FLEETPROF_TESTS_LIB_JSON_CHECK_H */
