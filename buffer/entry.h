/* buffer/entry.h - kinds of buffer entries: the first payload byte of every block.
 *
 * Values are stored in chunks and may be read by the daemon from a crashed child's memory:
 * append new kinds, never renumber. Payload layouts are defined by the writers (child/) and
 * readers (profile/) of each kind.
 */
#ifndef FLEETPROF_BUFFER_ENTRY_H
#define FLEETPROF_BUFFER_ENTRY_H

enum buf_entry_kind {
    BUF_ENTRY_INVALID = 0,     /* never written: a zeroed block reads as invalid */
    BUF_ENTRY_SAMPLE = 1,      /* tid, time, CPU delta, frames */
    BUF_ENTRY_SAME_SAMPLE = 2, /* tid, time: the thread did not run, repeat its last stack */
    BUF_ENTRY_MARKER = 3,      /* tid, name, times, phase, category, payload */
    BUF_ENTRY_LABEL_STACK = 4, /* labels captured with a sample */
    BUF_ENTRY_COUNTER = 5,     /* counter id, time, delta, count */
    BUF_ENTRY_CPU = 6,         /* process CPU use */
    BUF_ENTRY_PAUSE = 7,       /* sampling paused at time */
    BUF_ENTRY_RESUME = 8,      /* sampling resumed at time */
    BUF_ENTRY_OVERHEAD = 9,    /* sampler loop cost */
    BUF_ENTRY_THREAD = 10,     /* thread registered/unregistered, name */
    BUF_ENTRY_KIND_COUNT,
};

#endif /* FLEETPROF_BUFFER_ENTRY_H */
