/* daemon/capture-file.h - the file a capture writes: one JSON document assembled out of order.
 *
 * The file is written beside its destination (common/outfile.h) and renamed over it at the
 * end. Its text is appended, or written at offsets already in it; an element of an array may
 * be reserved (a separator byte and a hole of its announced size, filled later at offsets),
 * spooled (its bytes in an unlinked file beside the destination, appended when its turn
 * comes, by copy_file_range where the kernel can), or taken back (cut off the end, or
 * blanked with spaces, valid JSON whitespace, where later bytes follow it). Each element
 * starts with one separator byte, written as a space; capture_file_finish_elements() turns it
 * into a comma for every complete element but the first in file order, so elements may
 * complete in any order.
 *
 * The first failure is recorded (error, message) and is the capture's: the caller ends the
 * capture, and capture_file_commit() then removes the file instead. A write after a failure
 * is still attempted (it changes nothing the user sees: the file goes).
 *
 * The module knows files and JSON separators, never who sends the bytes: it uses libc,
 * common/ and json/writer.h only. Thread-safety: none; the struct belongs to one thread at a
 * time (the loop's, then the worker's during capture_file_commit()).
 */
#ifndef FLEETPROF_DAEMON_CAPTURE_FILE_H
#define FLEETPROF_DAEMON_CAPTURE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/outfile.h"

struct json_writer;

struct capture_file {
    /* The file being written beside path, renamed to it by capture_file_commit(); out.fd is
     * -1 before capture_file_open() and once committed or removed. */
    struct fleetprof_outfile out;
    const char *path; /* borrowed: the destination, for messages */
    char *dir;        /* owned: path's directory, where spools go */
    uint64_t len;     /* bytes in the file: where the next append goes */
    /* Offsets of every complete element's separator byte, in completion order: element_count
     * is the number of complete elements in the file. */
    uint64_t *elements;
    size_t element_count, element_cap;
    int error;         /* the first failure (negative errno), 0 while all is well */
    char message[512]; /* what it was, for the user */
};

/* Prepares f for path (borrowed; it must outlive f). No I/O; f is then ready for every call
 * below, capture_file_free() included. */
void capture_file_init(struct capture_file *f, const char *path);

/* Creates the file beside the destination (O_EXCL, mode 0600 less the umask) and finds the
 * directory for spools. Returns 0 or the failure recorded. */
int capture_file_open(struct capture_file *f);

/* Records r (a negative errno) as f's failure unless one is recorded already; returns r. */
__attribute__((format(printf, 3, 4))) int capture_file_fail(struct capture_file *f, int r,
                                                            const char *fmt, ...);

/* Writes len bytes at offset (within the file, or extending it; len is not moved). */
int capture_file_write_at(struct capture_file *f, uint64_t offset, const char *data, size_t len);

/* Appends len bytes. */
int capture_file_append(struct capture_file *f, const char *data, size_t len);

/* Appends a memory writer's output so far (complete or not). A failure of the writer itself
 * (-ENOMEM) is recorded as "building the profile failed". */
int capture_file_append_writer(struct capture_file *f, const struct json_writer *w);

/* Opens an unlinked spool file beside the destination, in *ret_fd (the caller closes it).
 * Returns 0 or a negative errno, not recorded: a spool that cannot be made fails only the
 * bytes meant for it. */
int capture_file_spool_open(const struct capture_file *f, int *ret_fd);

/* Writes len bytes at a spool's current offset. */
int capture_file_spool_write(struct capture_file *f, int spool_fd, const char *data, size_t len);

/* Appends the first len bytes of a spool (any file, read by offset). */
int capture_file_append_spool(struct capture_file *f, int spool_fd, uint64_t len);

/* Begins an element at the end: appends its separator byte, whose offset goes in *ret_offset
 * (the element's offset for capture_file_add_element() and capture_file_withdraw()). */
int capture_file_element_begin(struct capture_file *f, uint64_t *ret_offset);

/* Reserves an element of total bytes at the end: its separator byte, then a hole of total
 * bytes, filled later with capture_file_write_at() from *ret_offset + 1. */
int capture_file_reserve(struct capture_file *f, uint64_t total, uint64_t *ret_offset);

/* Counts the element whose separator byte is at offset as complete. */
int capture_file_add_element(struct capture_file *f, uint64_t offset);

/* Overwrites len bytes at offset with spaces. */
int capture_file_blank(struct capture_file *f, uint64_t offset, uint64_t len);

/* Cuts the file to len bytes. */
int capture_file_truncate(struct capture_file *f, uint64_t len);

/* Takes back the len bytes at offset (an element, separator first): cut off if they end the
 * file, else blanked. Does nothing once the file failed. */
void capture_file_withdraw(struct capture_file *f, uint64_t offset, uint64_t len);

/* Turns the separator of every complete element but the first in file order into a comma.
 * Stops at the first failure. */
void capture_file_finish_elements(struct capture_file *f);

/* Makes the file the destination: fsync, close and rename over it. With a failure recorded,
 * or when one of those fails (recorded), removes the file instead. Returns 0 or the failure.
 * May run on another thread (f is that thread's meanwhile). */
int capture_file_commit(struct capture_file *f);

/* Closes and removes the file if it is still there; the destination stays as it was.
 * Idempotent. */
void capture_file_abort(struct capture_file *f);

/* Aborts, and frees what f owns (not f). */
void capture_file_free(struct capture_file *f);

#endif /* FLEETPROF_DAEMON_CAPTURE_FILE_H */
