/* buffer/progress.h - proportion values, a shared progress cell and progress loggers.
 *
 * The child's gather thread reports how far it got while writing a profile; its IPC thread
 * answers the daemon's polls from the same progress cell at any time. A logger maps its own
 * 0..100 % into a sub-range of the cell, so each level of the gathering code reports in its
 * own terms (Gecko's ProportionValue and ProgressLogger). The value in the cell never goes
 * backwards. Everything here is libc-only integer arithmetic (no heap, no locks).
 */
#ifndef FLEETPROF_BUFFER_PROGRESS_H
#define FLEETPROF_BUFFER_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/* A proportion in [0, 1] as unsigned fixed point: 1 integer bit, 31 fractional bits, so 1.0
 * is raw 1u << 31 (PROPORTION_ONE_RAW). Every raw value above it is invalid; operations
 * produce PROPORTION_INVALID_RAW for those. Passed by value. This raw value is what travels
 * on the wire (GatherProgress.proportion). */
struct proportion {
    uint32_t raw;
};

#define PROPORTION_ONE_RAW     (UINT32_C(1) << 31)
#define PROPORTION_INVALID_RAW UINT32_C(0xFFFFFFFF)

#define PROPORTION_ZERO    ((struct proportion){0})
#define PROPORTION_ONE     ((struct proportion){PROPORTION_ONE_RAW})
#define PROPORTION_INVALID ((struct proportion){PROPORTION_INVALID_RAW})

/* Constructors. from_double clamps to [0, 1] and rounds down; NaN gives invalid.
 * from_percent is from_double(percent / 100). from_ratio gives num / den rounded down, 1 when
 * num >= den, and invalid when den is 0; exact for all operands, with 64-bit integers only.
 * from_raw keeps a valid raw value and maps every other one to invalid. */
struct proportion proportion_from_double(double value);
struct proportion proportion_from_percent(double percent);
struct proportion proportion_from_ratio(uint64_t num, uint64_t den);
struct proportion proportion_from_raw(uint32_t raw);

/* True for raw values in [0, PROPORTION_ONE_RAW]. */
bool proportion_is_valid(struct proportion p);

/* The value in [0, 1], or NaN for an invalid proportion. */
double proportion_to_double(struct proportion p);

/* Arithmetic on the raw values, saturating into [0, 1] (Gecko's rules):
 *   add(a, b)     = min(a + b, 1)
 *   sub(a, b)     = max(a - b, 0)
 *   mul(a, b)     = a * b, rounded down (64-bit product)
 *   mul_int(a, n) = min(a * n, 1)        (0 * n = 0, unlike Gecko's division by zero there)
 *   div_int(a, n) = a / n, rounded down; n == 0 gives invalid
 * An invalid operand always gives invalid. */
struct proportion proportion_add(struct proportion a, struct proportion b);
struct proportion proportion_sub(struct proportion a, struct proportion b);
struct proportion proportion_mul(struct proportion a, struct proportion b);
struct proportion proportion_mul_int(struct proportion a, uint32_t n);
struct proportion proportion_div_int(struct proportion a, uint32_t n);

/* Shared progress: written by one thread at a time (the gather thread), read by any thread
 * at any time. Caller-embedded; it holds no resources, so there is no _done. Writers store the
 * location and then the value (release), readers load the value and then the location
 * (acquire): the location a reader sees is the one stored with that value or a later one.
 * The two are not one atomic pair (as in Gecko), which is enough for a progress display. */
struct progress_cell {
    _Atomic uint32_t value;         /* raw proportion, never invalid, never decreasing */
    _Atomic(const char *) location; /* borrowed static string, or NULL before the first */
};

/* Sets the value to 0 and the location to NULL. Not atomic with respect to readers: call it
 * before the cell is shared. */
void progress_cell_init(struct progress_cell *cell);

/* Records progress: the value becomes max(current, value), so progress never goes backwards;
 * an invalid value leaves it unchanged. A non-NULL, non-empty location replaces the previous
 * one even if the value did not grow (NULL or "" keep it). location must be a string with
 * static storage duration: it is never copied or freed. Lock-free; async-signal-safe. */
void progress_cell_set(struct progress_cell *cell, struct proportion value, const char *location);

/* Reads the value and the location (either output may be NULL). Lock-free; may be called
 * from any thread while another writes. */
void progress_cell_read(const struct progress_cell *cell, struct proportion *ret_value,
                        const char **ret_location);

/* A progress logger: maps its local [0, 1] into [start, start + span] of a cell. Small and
 * copied by value; it borrows the cell, which must outlive it. A logger whose cell is NULL
 * is disabled: every call on it does nothing, and its sub-loggers are disabled too.
 * Not thread-safe: use a logger (and its sub-loggers) from one thread at a time. */
struct progress_logger {
    struct progress_cell *cell; /* borrowed, or NULL (disabled) */
    struct proportion start;    /* the cell's value at local 0 */
    struct proportion span;     /* local 1 minus local 0, in cell units */
};

/* A logger that covers the whole cell (local 0..1 is the cell's 0..1); cell may be NULL.
 * Does not touch the cell. */
struct progress_logger progress_logger_root(struct progress_cell *cell);

/* The cell value that local stands for: start + local * span (saturating), or invalid. */
struct proportion progress_logger_to_cell(const struct progress_logger *l, struct proportion local);

/* Records local progress (see progress_cell_set for location and monotonicity). */
void progress_logger_set_local(const struct progress_logger *l, struct proportion local,
                               const char *location);

/* Returns a child logger whose local 0..1 covers [local_start, local_end] of the parent, for
 * a callee that reports 0..100 % of its own work. Records the child's start (local 0) with
 * location_at_start (may be NULL). local_end < local_start gives an empty range; an invalid
 * bound gives a disabled logger. */
struct progress_logger progress_logger_sub(const struct progress_logger *parent,
                                           struct proportion local_start,
                                           struct proportion local_end,
                                           const char *location_at_start);

/* Splits [local_start, local_end] of the parent into count equal consecutive ranges and
 * returns the child logger of range index (0 <= index < count); range i covers
 * [start + (end - start) * i / count, start + (end - start) * (i + 1) / count] in cell units,
 * so the last one ends exactly at local_end. Records the child's start, keeping the
 * location. count == 0 or index >= count gives a disabled logger. */
struct progress_logger progress_logger_loop_sub(const struct progress_logger *parent,
                                                struct proportion local_start,
                                                struct proportion local_end, uint32_t count,
                                                uint32_t index);

#endif /* FLEETPROF_BUFFER_PROGRESS_H */
