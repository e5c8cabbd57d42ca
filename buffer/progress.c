/* buffer/progress.c - see progress.h. */
#include "buffer/progress.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>

struct proportion proportion_from_double(double value)
{
    if (isnan(value))
        return PROPORTION_INVALID;
    if (value <= 0.0)
        return PROPORTION_ZERO;
    if (value >= 1.0)
        return PROPORTION_ONE;
    /* Exact scaling by a power of two; the conversion truncates, i.e. rounds down. */
    return (struct proportion){(uint32_t)(value * (double)PROPORTION_ONE_RAW)};
}

struct proportion proportion_from_percent(double percent)
{
    return proportion_from_double(percent / 100.0);
}

struct proportion proportion_from_ratio(uint64_t num, uint64_t den)
{
    uint32_t q = 0;
    uint64_t rem = num;

    if (den == 0)
        return PROPORTION_INVALID;
    if (num >= den)
        return PROPORTION_ONE;
    if (den >> 33 == 0) /* num < den < 2^33 keeps num << 31 below 2^64 */
        return (struct proportion){(uint32_t)((num << 31) / den)};
    /* Big operands: long division, one quotient bit per step. rem < den always, and rem is
     * doubled by comparing it with den - rem, so nothing overflows 64 bits. */
    for (int bit = 0; bit < 31; bit++) {
        q <<= 1;
        if (rem >= den - rem) {
            rem -= den - rem;
            q |= 1;
        } else {
            rem <<= 1;
        }
    }
    return (struct proportion){q};
}

struct proportion proportion_from_raw(uint32_t raw)
{
    return raw <= PROPORTION_ONE_RAW ? (struct proportion){raw} : PROPORTION_INVALID;
}

bool proportion_is_valid(struct proportion p)
{
    return p.raw <= PROPORTION_ONE_RAW;
}

double proportion_to_double(struct proportion p)
{
    if (!proportion_is_valid(p))
        return NAN;
    return (double)p.raw / (double)PROPORTION_ONE_RAW;
}

struct proportion proportion_add(struct proportion a, struct proportion b)
{
    /* Both <= 2^31 when valid: the sum may be 2^32, one more than 32 bits hold. */
    uint64_t sum = (uint64_t)a.raw + b.raw;

    if (!proportion_is_valid(a) || !proportion_is_valid(b))
        return PROPORTION_INVALID;
    return (struct proportion){sum > PROPORTION_ONE_RAW ? PROPORTION_ONE_RAW : (uint32_t)sum};
}

struct proportion proportion_sub(struct proportion a, struct proportion b)
{
    if (!proportion_is_valid(a) || !proportion_is_valid(b))
        return PROPORTION_INVALID;
    return (struct proportion){a.raw > b.raw ? a.raw - b.raw : 0};
}

struct proportion proportion_mul(struct proportion a, struct proportion b)
{
    if (!proportion_is_valid(a) || !proportion_is_valid(b))
        return PROPORTION_INVALID;
    /* At most 2^31 * 2^31 = 2^62; dividing by one scale (2^31) leaves at most 2^31. */
    return (struct proportion){(uint32_t)(((uint64_t)a.raw * b.raw) >> 31)};
}

struct proportion proportion_mul_int(struct proportion a, uint32_t n)
{
    uint64_t product;

    if (!proportion_is_valid(a))
        return PROPORTION_INVALID;
    product = (uint64_t)a.raw * n; /* < 2^63 */
    return (struct proportion){product > PROPORTION_ONE_RAW ? PROPORTION_ONE_RAW
                                                            : (uint32_t)product};
}

struct proportion proportion_div_int(struct proportion a, uint32_t n)
{
    if (!proportion_is_valid(a) || n == 0)
        return PROPORTION_INVALID;
    return (struct proportion){a.raw / n};
}

void progress_cell_init(struct progress_cell *cell)
{
    atomic_init(&cell->value, 0);
    atomic_init(&cell->location, NULL);
}

void progress_cell_set(struct progress_cell *cell, struct proportion value, const char *location)
{
    uint32_t current;

    /* The location first, so that a reader that sees the new value sees this location (or
     * a later one) too. */
    if (location && *location)
        atomic_store_explicit(&cell->location, location, memory_order_release);
    if (!proportion_is_valid(value))
        return;
    current = atomic_load_explicit(&cell->value, memory_order_relaxed);
    /* A CAS loop rather than a plain store keeps the maximum even if two threads write. */
    while (value.raw > current &&
           !atomic_compare_exchange_weak_explicit(&cell->value, &current, value.raw,
                                                  memory_order_release, memory_order_relaxed))
        ;
}

void progress_cell_read(const struct progress_cell *cell, struct proportion *ret_value,
                        const char **ret_location)
{
    uint32_t raw = atomic_load_explicit(&cell->value, memory_order_acquire);
    const char *location = atomic_load_explicit(&cell->location, memory_order_acquire);

    if (ret_value)
        *ret_value = (struct proportion){raw};
    if (ret_location)
        *ret_location = location;
}

struct progress_logger progress_logger_root(struct progress_cell *cell)
{
    return (struct progress_logger){.cell = cell, .start = PROPORTION_ZERO, .span = PROPORTION_ONE};
}

struct proportion progress_logger_to_cell(const struct progress_logger *l, struct proportion local)
{
    return proportion_add(l->start, proportion_mul(local, l->span));
}

void progress_logger_set_local(const struct progress_logger *l, struct proportion local,
                               const char *location)
{
    if (l->cell)
        progress_cell_set(l->cell, progress_logger_to_cell(l, local), location);
}

static struct progress_logger make_child(const struct progress_logger *parent,
                                         struct proportion start, struct proportion end,
                                         const char *location_at_start)
{
    struct progress_logger child = {
            .cell = parent->cell,
            .start = start,
            .span = proportion_sub(end, start), /* 0 when end < start */
    };

    progress_cell_set(child.cell, start, location_at_start);
    return child;
}

static const struct progress_logger disabled_logger = {.cell = NULL, .start = {0}, .span = {0}};

struct progress_logger progress_logger_sub(const struct progress_logger *parent,
                                           struct proportion local_start,
                                           struct proportion local_end,
                                           const char *location_at_start)
{
    struct proportion start, end;

    if (!parent->cell)
        return disabled_logger;
    start = progress_logger_to_cell(parent, local_start);
    end = progress_logger_to_cell(parent, local_end);
    if (!proportion_is_valid(start) || !proportion_is_valid(end))
        return disabled_logger;
    return make_child(parent, start, end, location_at_start);
}

struct progress_logger progress_logger_loop_sub(const struct progress_logger *parent,
                                                struct proportion local_start,
                                                struct proportion local_end, uint32_t count,
                                                uint32_t index)
{
    struct proportion start, end;
    uint64_t width;

    if (!parent->cell || count == 0 || index >= count)
        return disabled_logger;
    start = progress_logger_to_cell(parent, local_start);
    end = progress_logger_to_cell(parent, local_end);
    if (!proportion_is_valid(start) || !proportion_is_valid(end))
        return disabled_logger;
    width = proportion_sub(end, start).raw;
    /* width * (index + 1) <= 2^31 * 2^32: fits in 64 bits; the bounds stay <= end. */
    return make_child(parent, (struct proportion){start.raw + (uint32_t)(width * index / count)},
                      (struct proportion){start.raw + (uint32_t)(width * (index + 1) / count)},
                      NULL);
}
