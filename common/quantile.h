/* common/quantile.h - the quantile of a histogram, one rule for every reader of one.
 *
 * Header-only, libc only: the runtime's performance groups, `summary` and `top` report the
 * same p50/p99 for the same counts.
 */
#ifndef FLEETPROF_COMMON_QUANTILE_H
#define FLEETPROF_COMMON_QUANTILE_H

#include <stddef.h>
#include <stdint.h>

/* The bucket holding the q-quantile (0 < q <= 1; above 1 counts as 1) of a histogram of n
 * buckets: the first whose running count reaches ceil(total x q). -1 when the histogram is
 * empty or q <= 0. */
static inline int histogram_quantile_bucket(const uint64_t *counts, size_t n, double q)
{
    uint64_t total = 0, seen = 0, rank;

    for (size_t b = 0; b < n; b++)
        total += counts[b];
    if (total == 0 || !(q > 0))
        return -1;
    if (q > 1)
        q = 1;
    /* The ceiling of total x q, without letting rounding (100 x 0.98 = 98.00000000000001)
     * push it one event up. */
    rank = (uint64_t)((double)total * q);
    if ((double)rank < (double)total * q - 1e-6)
        rank++;
    if (rank == 0)
        rank = 1;
    for (size_t b = 0; b < n; b++) {
        seen += counts[b];
        if (seen >= rank)
            return (int)b;
    }
    return (int)n - 1;
}

#endif /* FLEETPROF_COMMON_QUANTILE_H */
