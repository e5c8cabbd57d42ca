/* daemon/capture-placement.h - where a capture puts each child's profile pieces.
 *
 * gather.c's placement policy, apart from the daemon so that it runs without one (the fuzz
 * target tests/fuzz/fuzz-capture-placement.c drives it on real files): gather.c decides who is
 * asked, when a child is dropped and when the capture ends, and logs it all; these functions
 * decide where bytes go in the capture file (daemon/capture-file.h). Each child's JSON becomes
 * one element of an open array:
 * - announced (a total with its first piece) while no child is current: its element is
 *   reserved at the end, and every piece is written there once, however the children
 *   interleave;
 * - otherwise one child at a time is current and streams at the end of the file; the others
 *   spool into unlinked files, appended once complete and no child is current (in the
 *   capture's order of children, not their arrival order), after which a child still sending
 *   becomes current;
 * - a child dropped is taken back: its element cut off the end or blanked, its spool closed.
 * Elements complete in any order; capture_file_finish_elements() writes their commas.
 *
 * A failure of the output is recorded in the capture file (file->error): the caller then ends
 * the capture. It uses daemon/capture-file.h and libc only.
 * Thread-safety: none, as the capture file's.
 */
#ifndef FLEETPROF_DAEMON_CAPTURE_PLACEMENT_H
#define FLEETPROF_DAEMON_CAPTURE_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/capture-file.h"

#define CAPTURE_PIECE_TOTAL_MAX (512u << 20) /* one child's JSON; beyond it is "too large" */

/* One child's place in the capture. Its bytes are, at any time, either in the output (it is
 * the current child, has a reserved element, or completed there) or all of them in its spool
 * file, never in memory beyond the piece being handled. */
struct capture_slot {
    size_t len;      /* bytes received so far */
    uint64_t total;  /* announced size of its JSON; 0 = none (current or spool) */
    uint64_t region; /* with total: its element's offset in the output (separator first) */
    int spool_fd;    /* owned: an unlinked file holding all len bytes; -1 when none */
    bool complete;   /* its last piece is in the spool, waiting for its turn in the output */
    bool done;       /* answered, dropped or given up: nothing more of it is placed */
    struct capture_slot *next; /* the next child, in the capture's order */
};

struct capture_placement {
    struct capture_file *file;         /* borrowed: the output */
    struct capture_slot *first, *last; /* every child, in the capture's order */
    struct capture_slot *current;      /* the child streaming into the file, or NULL */
    uint64_t current_start; /* where current's element (separator first) begins in the file */
    uint32_t processes;     /* complete elements in the file */
};

void capture_placement_init(struct capture_placement *pl, struct capture_file *file);

/* Appends s (zeroed, or placed before in no capture) to the capture's children. */
void capture_placement_add_slot(struct capture_placement *pl, struct capture_slot *s);

void capture_slot_spool_close(struct capture_slot *s);

/* Child JSON in the output. The output always ends inside the open array. Every element starts
 * with a separator byte (a space until capture_file_finish_elements()); the elements not
 * complete yet are reserved regions (anywhere) and the current child's (always the last). */

/* Counts a complete element whose separator byte is at offset. */
int capture_placement_add_element(struct capture_placement *pl, uint64_t offset);

/* Reserves s's element for total bytes of JSON at the end of the output. No child is current
 * (its element must stay the last). */
int capture_placement_reserve(struct capture_placement *pl, struct capture_slot *s, uint64_t total);

/* s streams into the output from now on: its element starts here, with what it has spooled
 * so far. Called only when no child is current. */
int capture_placement_make_current(struct capture_placement *pl, struct capture_slot *s);

/* Takes s's bytes back out of the capture: its element is cut off the output (separator
 * included) if nothing follows it, else blanked; its spool is closed. */
void capture_placement_drop(struct capture_placement *pl, struct capture_slot *s);

/* With no child current, the output is at an element boundary: the spools of completed
 * children are appended (their order in the array is this one, not their arrival order),
 * then a child still sending becomes current so that its next pieces skip the spool. */
int capture_placement_flush(struct capture_placement *pl);

/* s is done (answered, or dropped): with no child current, the spools waiting are appended
 * now. */
void capture_placement_done(struct capture_placement *pl, struct capture_slot *s);

/* Puts one piece where s's bytes go (total: the size its piece announces, or 0): the output if
 * s is (or can become) current, else its spool. s->len is not moved. Returns 0 or a negative
 * errno: when the output failed, file->error is set and the capture must end; otherwise s's
 * spool could not be made, and s alone is to be dropped. */
int capture_placement_store(struct capture_placement *pl, struct capture_slot *s, const char *data,
                            size_t len, uint64_t total);

/* Whether a piece of n bytes at offset (announcing total, the last one or not) fits s's
 * stream: in order, within the size announced. */
bool capture_piece_fits(const struct capture_slot *s, uint64_t offset, size_t n, uint64_t total,
                        bool last);

/* Stores n bytes of s's JSON (a piece that fits, or part of one) after the s->len received
 * before, and counts them in s->len. Returns 0; 1 when they begin s's JSON and are not a JSON
 * object (nothing stored: checked on the first byte, not after the last, so that no garbage
 * is streamed); or capture_placement_store()'s failure. */
int capture_placement_piece(struct capture_placement *pl, struct capture_slot *s, const char *data,
                            size_t n, uint64_t total);

/* A whole profile of s's process (json, len) answers in place of what s sent so far: that is
 * taken back, the profile placed as one piece announcing its size. s->len is then len, or 0
 * when it failed (capture_placement_store()'s failure). */
int capture_placement_answer(struct capture_placement *pl, struct capture_slot *s, const char *json,
                             size_t len);

/* s's whole profile is placed (its last piece, or an answer): it becomes an element of the
 * output now if it can, else when the output reaches it (capture_placement_flush()). */
void capture_placement_complete(struct capture_placement *pl, struct capture_slot *s);

#endif /* FLEETPROF_DAEMON_CAPTURE_PLACEMENT_H */
