/* common/parse.h - parsing sizes and durations given by users (command lines, env).
 *
 * Header-only, libc only: the daemon, the CLI and the runtime accept the same forms.
 */
#ifndef FLEETPROF_COMMON_PARSE_H
#define FLEETPROF_COMMON_PARSE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The most digits a number may have: more is a typing accident, and stays exact in a double
 * up to 15. */
#define PARSE_DECIMAL_MAX_DIGITS 15

/* A non-negative decimal number as people write it: digits, optionally a point and more
 * digits ("1", "0.25", ".5", "2."). No sign, exponent, hexadecimal, "inf", "nan" or space,
 * which strtod() would take ("0x10" was an interval of 16 ms), and the point is '.' whatever
 * the locale (the runtime parses inside programs that may have set one). Returns the
 * characters taken, 0 for none (not a number), with the value in *ret. */
static inline size_t parse_decimal_prefix(const char *s, double *ret)
{
    uint64_t mantissa = 0;
    unsigned significant = 0, decimals = 0;
    bool any = false, fraction = false;
    size_t i = 0;
    double v;

    for (;; i++) {
        if (s[i] == '.' && !fraction) {
            fraction = true;
            continue;
        }
        if (s[i] < '0' || s[i] > '9')
            break;
        any = true;
        if (fraction && ++decimals > 22) /* 10^22: the last power of ten a double holds */
            return 0;
        if (mantissa == 0 && s[i] == '0')
            continue; /* a leading zero */
        if (++significant > PARSE_DECIMAL_MAX_DIGITS)
            return 0;
        mantissa = mantissa * 10 + (uint64_t)(s[i] - '0');
    }
    if (!any)
        return 0;
    v = 1;
    for (unsigned k = 0; k < decimals; k++)
        v *= 10; /* exact: one rounding below, in the division */
    *ret = (double)mantissa / v;
    return i;
}

/* "4096", "64K", "256M", "1G", "256MiB", "1.5G" -> bytes (decimal numbers only, as
 * parse_decimal_prefix() takes them). Returns 0 or -EINVAL. */
static inline int parse_size(const char *s, uint64_t *ret_bytes)
{
    const char *end;
    double v;
    double scale = 1;
    size_t n;

    if (!s || !(n = parse_decimal_prefix(s, &v)))
        return -EINVAL;
    end = s + n;
    switch (*end) {
    case 'k':
    case 'K':
        scale = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        scale = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        scale = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        scale = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (scale > 1 && (!strcasecmp(end, "ib") || !strcasecmp(end, "b")))
        end += strlen(end);
    else if (scale == 1 && !strcasecmp(end, "b"))
        end++;
    if (*end || v * scale >= 18446744073709551615.0)
        return -EINVAL;
    *ret_bytes = (uint64_t)(v * scale);
    return 0;
}

/* A decimal number (parse_decimal_prefix()) and nothing after it, within [lo, hi].
 * Returns 0 or -EINVAL. */
static inline int parse_decimal(const char *s, double lo, double hi, double *ret)
{
    double v;
    size_t n;

    if (!s || !(n = parse_decimal_prefix(s, &v)) || s[n] || !(v >= lo && v <= hi))
        return -EINVAL;
    *ret = v;
    return 0;
}

/* A decimal number of seconds or milliseconds (per unit_ns: 1e9 or 1e6) -> ns, to the
 * nearest (0.3 s is 300000000 ns, not one less), within [min_ns, max_ns]. Returns 0 or
 * -EINVAL. */
static inline int parse_duration(const char *s, double unit_ns, uint64_t min_ns, uint64_t max_ns,
                                 uint64_t *ret_ns)
{
    double v, ns;

    if (parse_decimal(s, 0, 1e15, &v) < 0)
        return -EINVAL;
    ns = v * unit_ns + 0.5;
    if (!(ns >= (double)min_ns && ns < (double)max_ns + 1))
        return -EINVAL;
    *ret_ns = (uint64_t)ns;
    return 0;
}

#endif /* FLEETPROF_COMMON_PARSE_H */
