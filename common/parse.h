/* common/parse.h - parsing sizes and durations given by users (command lines, env).
 *
 * Header-only, libc only: the daemon, the CLI and the runtime accept the same forms.
 */
#ifndef FLEETPROF_COMMON_PARSE_H
#define FLEETPROF_COMMON_PARSE_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* "4096", "64K", "256M", "1G", "256MiB", "1.5G" -> bytes. Returns 0 or -EINVAL. */
static inline int parse_size(const char *s, uint64_t *ret_bytes)
{
    char *end;
    double v;
    double scale = 1;

    if (!s || !*s)
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -EINVAL;
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

/* A number of seconds or milliseconds (per unit_ns: 1e9 or 1e6) -> ns, within
 * [min_ns, max_ns]. Returns 0 or -EINVAL. */
static inline int parse_duration(const char *s, double unit_ns, uint64_t min_ns, uint64_t max_ns,
                                 uint64_t *ret_ns)
{
    char *end;
    double v;

    if (!s || !*s)
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v * unit_ns >= (double)min_ns) ||
        !(v * unit_ns <= (double)max_ns))
        return -EINVAL;
    *ret_ns = (uint64_t)(v * unit_ns);
    return 0;
}

#endif /* FLEETPROF_COMMON_PARSE_H */
