/* daemon/capture-placement.c - see capture-placement.h. */
#include "daemon/capture-placement.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

void capture_placement_init(struct capture_placement *pl, struct capture_file *file)
{
    *pl = (struct capture_placement){.file = file};
}

void capture_placement_add_slot(struct capture_placement *pl, struct capture_slot *s)
{
    s->spool_fd = -1;
    s->next = NULL;
    if (pl->last)
        pl->last->next = s;
    else
        pl->first = s;
    pl->last = s;
}

void capture_slot_spool_close(struct capture_slot *s)
{
    if (s->spool_fd >= 0)
        (void)close(s->spool_fd);
    s->spool_fd = -1;
    s->complete = false;
}

int capture_placement_add_element(struct capture_placement *pl, uint64_t offset)
{
    int r = capture_file_add_element(pl->file, offset);

    if (r == 0)
        pl->processes++;
    return r;
}

int capture_placement_reserve(struct capture_placement *pl, struct capture_slot *s, uint64_t total)
{
    int r;

    assert(!pl->current);
    r = capture_file_reserve(pl->file, total, &s->region);
    if (r == 0)
        s->total = total;
    return r;
}

int capture_placement_make_current(struct capture_placement *pl, struct capture_slot *s)
{
    int r = 0;

    assert(!pl->current);
    pl->current = s;
    r = capture_file_element_begin(pl->file, &pl->current_start);
    if (r == 0 && s->spool_fd >= 0)
        r = capture_file_append_spool(pl->file, s->spool_fd, s->len);
    capture_slot_spool_close(s);
    return r;
}

void capture_placement_drop(struct capture_placement *pl, struct capture_slot *s)
{
    if (s->total) {
        capture_file_withdraw(pl->file, s->region, 1 + s->total);
        s->total = 0;
    }
    if (s == pl->current) {
        pl->current = NULL;
        capture_file_withdraw(pl->file, pl->current_start, pl->file->len - pl->current_start);
    }
    capture_slot_spool_close(s);
}

int capture_placement_flush(struct capture_placement *pl)
{
    int r = 0;

    assert(!pl->current);
    for (struct capture_slot *s = pl->first; r == 0 && s; s = s->next) {
        uint64_t start;

        if (!s->complete)
            continue;
        r = capture_file_element_begin(pl->file, &start);
        if (r == 0)
            r = capture_file_append_spool(pl->file, s->spool_fd, s->len);
        capture_slot_spool_close(s);
        if (r == 0)
            r = capture_placement_add_element(pl, start);
    }
    for (struct capture_slot *s = pl->first; r == 0 && s; s = s->next)
        if (!s->done && s->spool_fd >= 0)
            return capture_placement_make_current(pl, s);
    return r;
}

void capture_placement_done(struct capture_placement *pl, struct capture_slot *s)
{
    s->done = true;
    if (!pl->current && !pl->file->error)
        (void)capture_placement_flush(pl);
}

int capture_placement_store(struct capture_placement *pl, struct capture_slot *s, const char *data,
                            size_t len, uint64_t total)
{
    int r;

    if (s->total)
        return capture_file_write_at(pl->file, s->region + 1 + s->len, data, len);
    if (total && s->len == 0 && !pl->current) {
        r = capture_placement_reserve(pl, s, total);
        return r < 0 ? r : capture_file_write_at(pl->file, s->region + 1, data, len);
    }
    if (!pl->current) {
        r = capture_placement_make_current(pl, s);
        if (r < 0)
            return r;
    }
    if (s == pl->current)
        return capture_file_append(pl->file, data, len);
    if (s->spool_fd < 0) {
        r = capture_file_spool_open(pl->file, &s->spool_fd);
        if (r < 0)
            return r;
    }
    return capture_file_spool_write(pl->file, s->spool_fd, data, len);
}

bool capture_piece_fits(const struct capture_slot *s, uint64_t offset, size_t n, uint64_t total,
                        bool last)
{
    return offset == s->len && s->len + n <= CAPTURE_PIECE_TOTAL_MAX &&
           total <= CAPTURE_PIECE_TOTAL_MAX && (!s->total || total == s->total) &&
           !(last && total && s->len + n != total);
}

int capture_placement_piece(struct capture_placement *pl, struct capture_slot *s, const char *data,
                            size_t n, uint64_t total)
{
    int r;

    if (s->len == 0 && n > 0 && data[0] != '{')
        return 1;
    r = n > 0 ? capture_placement_store(pl, s, data, n, total) : 0;
    if (r == 0)
        s->len += n;
    return r;
}

int capture_placement_answer(struct capture_placement *pl, struct capture_slot *s, const char *json,
                             size_t len)
{
    int r;

    capture_placement_drop(pl, s);
    s->len = 0;
    r = capture_placement_store(pl, s, json, len, len);
    if (r == 0)
        s->len = len;
    return r;
}

void capture_placement_complete(struct capture_placement *pl, struct capture_slot *s)
{
    if (s->total) {
        s->total = 0; /* complete: no longer to be taken back */
        (void)capture_placement_add_element(pl, s->region);
    } else if (s == pl->current) {
        pl->current = NULL;
        (void)capture_placement_add_element(pl, pl->current_start);
    } else {
        s->complete = true;
    }
}
