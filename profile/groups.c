/* profile/groups.c - performance group totals: histogram buckets and sums. */
#include "profile/groups.h"

#include <errno.h>

#include "common/quantile.h"

__extension__ typedef unsigned __int128 u128; /* cpu ns x cycles needs 128 bits */

unsigned prof_group_bucket(uint64_t ns)
{
    uint64_t us = ns / 1000;

    if (us == 0)
        return 0;
    /* us in [2^(b-1), 2^b) is bucket b: b = bit length of us. */
    unsigned b = 64u - (unsigned)__builtin_clzll(us);
    return b < PROF_GROUP_BUCKETS - 1 ? b : PROF_GROUP_BUCKETS - 1;
}

uint64_t prof_group_bucket_lower_ns(unsigned b)
{
    if (b == 0)
        return 0;
    if (b >= PROF_GROUP_BUCKETS)
        b = PROF_GROUP_BUCKETS - 1;
    return (UINT64_C(1) << (b - 1)) * 1000;
}

uint64_t prof_group_bucket_upper_ns(unsigned b)
{
    if (b >= PROF_GROUP_BUCKETS - 1)
        return UINT64_MAX;
    return (UINT64_C(1) << b) * 1000;
}

uint64_t prof_group_quantile_ns(const struct prof_group_totals *t, double q)
{
    int b = histogram_quantile_bucket(t->durations, PROF_GROUP_BUCKETS, q);
    uint64_t upper;

    if (b < 0)
        return 0;
    /* No bound above the last bucket, and none above the worst event either. */
    upper = prof_group_bucket_upper_ns((unsigned)b);
    return upper > t->worst_event_ns ? t->worst_event_ns : upper;
}

int prof_group_charge(uint64_t event_cpu_ns, uint64_t event_start_cycles, uint64_t event_end_cycles,
                      uint64_t group_cycles, uint64_t *ret_ns)
{
    uint64_t event_cycles;

    *ret_ns = 0;
    if (event_end_cycles <= event_start_cycles)
        return -ERANGE; /* share < 0: the counter was reset, or this CPU's lags */
    event_cycles = event_end_cycles - event_start_cycles;
    if (group_cycles > event_cycles)
        return -ERANGE; /* share > 100 %: counters of two CPUs out of step */
    *ret_ns = (uint64_t)((u128)event_cpu_ns * group_cycles / event_cycles);
    return 0;
}

void prof_group_totals_add(struct prof_group_totals *a, const struct prof_group_totals *b)
{
    a->cpu_ns += b->cpu_ns;
    a->cycles += b->cycles;
    a->activations += b->activations;
    a->events += b->events;
    if (b->worst_event_ns > a->worst_event_ns)
        a->worst_event_ns = b->worst_event_ns;
    a->slow_events += b->slow_events;
    a->discarded += b->discarded;
    a->migrated += b->migrated;
    a->stale += b->stale;
    for (unsigned i = 0; i < PROF_GROUP_BUCKETS; i++)
        a->durations[i] += b->durations[i];
}

/* Length of the UTF-8 sequence at s (at most len bytes), 0 if it is not valid. */
static size_t utf8_sequence(const unsigned char *s, size_t len)
{
    size_t n;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2, cp = s[0] & 0x1fu;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        n = 3, cp = s[0] & 0x0fu;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        n = 4, cp = s[0] & 0x07u;
    else
        return 0;
    if (n > len)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0u) != 0x80u)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

int prof_group_name_valid(const char *name, size_t len)
{
    const unsigned char *s = (const unsigned char *)name;

    if (!name || len == 0 || len > PROF_GROUP_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len;) {
        size_t n;

        if (s[i] < 0x20 || s[i] == 0x7f)
            return 0;
        n = utf8_sequence(s + i, len - i);
        if (n == 0)
            return 0;
        /* C1 controls (U+0080..U+009F) move a terminal's cursor too. */
        if (n == 2 && s[i] == 0xc2 && s[i + 1] < 0xa0)
            return 0;
        i += n;
    }
    return 1;
}
