/* tests/fuzz/fuzz-capture-placement.c - where children's profile pieces land in a capture file.
 *
 * Children are other processes: their piece sizes, announced totals, order, interleaving,
 * failures and deaths are theirs to choose. The input is a program of what up to 8 children
 * do during one capture; it runs on the real capture file (daemon/capture-file.c, in a private
 * temporary directory) with the real placement policy (daemon/capture-placement.h, gather.c's
 * own: reserved elements, the current child, spools, elements taken back) and the real
 * validation of a piece's envelope (ipc_envelope_validate(): a piece it refuses closes the
 * child's connection). What is mirrored here is gather.c's thin sequencing around them: the
 * order of the checks on a piece (daemon__gather_on_profile_data(), the streamed
 * daemon__gather_piece_*()), an answer in place of the pieces (exit or recovered profile), a
 * child gone, a round without progress giving up on the rest, mark_done() and finish().
 *
 * Each child sends one JSON object of a size the input picks, {"child":I,"pad":"..."} whose
 * pad is its own capital letter, so that any byte of it is recognisable. At the end the
 * elements are wrapped as an array ('[' first, ']' after capture_file_finish_elements()) and,
 * unless the capture failed, the file must be: valid JSON, exactly as long as the capture file
 * says, an array of exactly the objects of the children that completed (and the exit profiles
 * stored before), each byte-identical to what was sent, in any order, and no byte of a child
 * dropped. The committed file must hold the same bytes; a failed capture leaves nothing.
 * Either way no descriptor is leaked and the directory holds no temporary file.
 *
 * The program: byte 0 = children - 1 (bits 0-2) and stored exit profiles (bits 3-4, mod 3);
 * per child, a flags byte (bits 0-1: total none / honest / wrong / announced from the second
 * piece on; bit 2: its text does not start with '{'; bit 3: cannot be asked; bits 4-7: how
 * wrong) and two bytes of pad length; then events, one byte each (bits 0-2: kind, bits 3-5:
 * child, bits 6-7: flags) with operands:
 *   0 piece (size byte; last when it ends the text) [flag 1: no descriptor left for a spool,
 *     flag 2: streamed in two parts (split byte)]
 *   1 piece never marked last (size byte) [flag 1: announcing another total]
 *   2 the rest, last: empty after a piece never marked last [flag 1: an empty piece, not
 *     last; flag 2 with nothing sent yet: an empty profile]
 *   3 piece out of order (size byte)
 *   4 the child fails (an error on its last piece)
 *   5 the child is gone (its connection closed)
 *   6 a whole profile answers for it (byte: 0 recovered by the daemon, 1 its exit profile,
 *     2 an empty exit profile, 3 an exit profile that is not an object; bit 2: no descriptor)
 *   7 child bits 0: the capture ends (no progress); 1: the output's disk fails; 2: a spool's
 *     disk fails (child byte); others: the capture ends
 *
 * It found that an exit profile answering during a capture was placed whatever it held: an
 * empty one became a stray comma ("[ ,{...}]"), a string a non-object element (corpus:
 * empty-exit-answer, empty-exit-answer-alone).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/capture-file.h"
#include "daemon/capture-placement.h"
#include "ipc/ipc.h"
#include "json-check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static _Noreturn void check_failed(void);

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failed();                                                          \
        }                                                                            \
    } while (0)

#define CHILDREN_MAX 8
#define STORED_MAX   2
#define PAD_MAX      4095
#define EVENTS_MAX   512
#define REQUEST_ID   7

/* The program. */

struct input {
    const uint8_t *p, *end;
};

static uint8_t take_byte(struct input *in)
{
    return in->p < in->end ? *in->p++ : 0;
}

/* A piece size: 0-127 bytes, or 32-byte steps up to 4064. */
static size_t take_size(struct input *in)
{
    uint8_t b = take_byte(in);

    return b & 0x80 ? (size_t)(b & 0x7f) * 32 : b;
}

enum fate { PENDING, ANSWERED, DROPPED };

struct child {
    struct capture_slot slot; /* its place in the capture, as gather.c's struct pending's */
    char *text, *exit_text;   /* what it sends, and the exit profile it may answer with */
    size_t text_len, exit_len;
    int mode;        /* 0: no total, 1: honest, 2: wrong, 3: announced from its 2nd piece */
    uint64_t wrong;  /* the total it announces in mode 2 */
    size_t sent;     /* bytes it sent so far (its offset), as it sees it */
    char pad;        /* its pad byte: 'A' + its index */
    char marker[32]; /* "\"child\":I," (room for any size_t: -Wformat-truncation) */
    enum fate fate;
    const char *answer; /* with ANSWERED: the bytes that must be its element */
    size_t answer_len;
};

struct run {
    char dir[256], path[300];
    struct capture_file file;
    struct capture_placement place;
    struct child children[CHILDREN_MAX];
    size_t count, done_count;
    char *stored[STORED_MAX];
    size_t stored_count, stored_len[STORED_MAX];
    bool finishing;
};

/* head, n pad bytes c, then the end of the object's last string: '"}'. */
static char *make_text(size_t *ret_len, const char *head, char c, size_t n)
{
    size_t h = strlen(head);
    char *s = malloc(h + n + 3);

    CHECK(s);
    memcpy(s, head, h);
    memset(s + h, c, n);
    memcpy(s + h + n, "\"}", 3);
    *ret_len = h + n + 2;
    return s;
}

/* Descriptors open now (those of /proc/self/fd but the one listing it). */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;

    CHECK(d);
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    (void)closedir(d);
    return n - 1;
}

/* Entries of dir but "." and ".."; the one named name, if any, in *ret_has. */
static int count_entries(const char *dir, const char *name, bool *ret_has)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    CHECK(d);
    *ret_has = false;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        n++;
        if (!strcmp(de->d_name, name))
            *ret_has = true;
    }
    (void)closedir(d);
    return n;
}

static char live_dir[256]; /* the input's directory while it runs */

/* Removes dir and what it holds, as far as it can. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            (void)unlinkat(dirfd(d), de->d_name, 0);
    if (d)
        (void)closedir(d);
    (void)rmdir(dir);
}

/* A failed check aborts (the input is the reproducer), leaving no directory behind. */
static _Noreturn void check_failed(void)
{
    if (live_dir[0])
        remove_dir(live_dir);
    abort();
}

/* A private directory per input, on tmpfs when there is one (fsync is free there). */
static void make_dir(struct run *r)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");

    (void)snprintf(r->dir, sizeof(r->dir), "%s/fuzz-capture-placement.XXXXXX",
                   base && *base ? base : "/tmp");
    CHECK(mkdtemp(r->dir));
    memcpy(live_dir, r->dir, sizeof(live_dir));
    (void)snprintf(r->path, sizeof(r->path), "%s/capture.json", r->dir);
}

/* With on, leaves no descriptor to open until fds_restore() (a spool then cannot be made:
 * EMFILE), the limit before in *saved. */
static void fds_exhaust(bool on, struct rlimit *saved)
{
    struct rlimit lim;
    int probe;

    if (!on)
        return;
    CHECK(getrlimit(RLIMIT_NOFILE, saved) == 0);
    probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(probe >= 0);
    (void)close(probe);
    lim = *saved;
    lim.rlim_cur = (rlim_t)probe; /* the lowest free descriptor is at the limit */
    CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0);
}

static void fds_restore(bool on, const struct rlimit *saved)
{
    if (on)
        CHECK(setrlimit(RLIMIT_NOFILE, saved) == 0);
}

/* gather.c's sequencing, on the real placement. */

static void finish(struct run *r)
{
    if (r->finishing)
        return;
    r->finishing = true;
    if (!r->file.error)
        (void)capture_placement_flush(&r->place);
    if (!r->file.error)
        capture_file_finish_elements(&r->file);
    if (!r->file.error)
        (void)capture_file_append(&r->file, "]", 1); /* gather.c's trailer */
}

static void mark_done(struct run *r, struct child *c)
{
    r->done_count++;
    capture_placement_done(&r->place, &c->slot);
    if (r->file.error || r->done_count == r->count)
        finish(r);
}

static void drop(struct run *r, struct child *c)
{
    capture_placement_drop(&r->place, &c->slot);
    c->fate = DROPPED;
    mark_done(r, c);
}

static void complete(struct run *r, struct child *c, const char *answer, size_t len)
{
    c->fate = ANSWERED;
    c->answer = answer;
    c->answer_len = len;
    capture_placement_complete(&r->place, &c->slot);
    mark_done(r, c);
}

/* gather.c's piece_store(): false when c was dropped or the capture ended. */
static bool piece_store(struct run *r, struct child *c, const char *data, size_t n, uint64_t total,
                        bool no_fds)
{
    struct rlimit saved;
    int rr;

    fds_exhaust(no_fds, &saved);
    rr = capture_placement_piece(&r->place, &c->slot, data, n, total);
    fds_restore(no_fds, &saved);
    if (rr == 1) { /* not a JSON object */
        drop(r, c);
        return false;
    }
    if (rr < 0 && r->file.error) {
        finish(r);
        return false;
    }
    if (rr < 0) { /* no spool file */
        drop(r, c);
        return false;
    }
    return true;
}

static void gone(struct run *r, struct child *c)
{
    if (r->finishing || c->slot.done)
        return;
    drop(r, c);
}

/* One ProfileData piece from c: split > 0 streams it in two parts, as a large frame is
 * (daemon__gather_piece_begin/bytes/end), else it is handled whole. */
static void piece(struct run *r, struct child *c, uint64_t offset, size_t n, uint64_t total,
                  bool last, const char *error, size_t split, bool no_fds)
{
    Fleetprof__ProfileData m = FLEETPROF__PROFILE_DATA__INIT;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    size_t at = offset < c->text_len ? (size_t)offset : c->text_len;
    const char *data = c->text + at;

    n = n < c->text_len - at ? n : c->text_len - at; /* an out-of-order piece past the end */
    m.request_id = REQUEST_ID;
    m.data.data = (uint8_t *)data;
    m.data.len = n;
    m.last = last;
    m.offset = offset;
    m.total = total;
    if (error)
        m.error = (char *)error;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
    env.profile_data = &m;
    c->sent = offset + n;
    if (ipc_envelope_validate(&env, NULL) < 0) {
        gone(r, c); /* the ipc layer closes its connection */
        return;
    }
    if (r->finishing || c->slot.done)
        return; /* late: dropped */
    if (split > 0 && split < n && !*m.error &&
        capture_piece_fits(&c->slot, m.offset, n, m.total, m.last)) {
        if (piece_store(r, c, data, split, total, no_fds) &&
            piece_store(r, c, data + split, n - split, total, no_fds) && last)
            complete(r, c, c->text, c->text_len);
        return;
    }
    if (*m.error) {
        drop(r, c);
        return;
    }
    if (!capture_piece_fits(&c->slot, m.offset, n, m.total, m.last)) {
        drop(r, c);
        return;
    }
    if (c->slot.len + n == 0 && last) {
        drop(r, c);
        return;
    }
    if (piece_store(r, c, data, n, total, no_fds) && last)
        complete(r, c, c->text, c->text_len);
}

/* A whole profile answers for c (daemon__gather_on_exit_profile(), _on_recovered()). */
static void answer(struct run *r, struct child *c, const char *json, size_t len, bool no_fds)
{
    bool object = len > 0 && json[0] == '{';
    struct rlimit saved;
    int rr;

    if (r->finishing || c->slot.done)
        return; /* kept for the next capture */
    /* As daemon__gather_on_exit_profile(): what is not a JSON object is dropped, never
     * placed (an empty one had become a stray comma, a string a non-object element). */
    if (!object) {
        drop(r, c);
        return;
    }
    fds_exhaust(no_fds, &saved);
    rr = capture_placement_answer(&r->place, &c->slot, json, len);
    fds_restore(no_fds, &saved);
    if (rr < 0 && r->file.error) {
        finish(r);
        return;
    }
    if (rr < 0) {
        drop(r, c);
        return;
    }
    complete(r, c, json, len);
}

/* A round without progress: every child still pending is given up on, then the end. */
static void give_up(struct run *r)
{
    if (r->finishing)
        return;
    for (size_t i = 0; i < r->count; i++) {
        struct child *c = &r->children[i];

        if (!c->slot.done) {
            capture_placement_drop(&r->place, &c->slot);
            c->slot.done = true;
            c->fate = DROPPED;
            r->done_count++;
        }
    }
    finish(r);
}

/* The disk under fd fails: its writes fail from now on (reads still work). */
static void disk_fails(int fd, const char *reopen)
{
    int bad;

    if (fd < 0)
        return;
    bad = open(reopen, O_RDONLY | O_CLOEXEC);
    CHECK(bad >= 0);
    CHECK(dup2(bad, fd) == fd);
    (void)close(bad);
}

static uint64_t total_of(const struct child *c)
{
    switch (c->mode) {
    case 1:
        return c->text_len;
    case 2:
        return c->wrong;
    case 3:
        return c->sent > 0 ? c->text_len : 0;
    default:
        return 0;
    }
}

static void run_events(struct run *r, struct input *in)
{
    for (unsigned e = 0; e < EVENTS_MAX && in->p < in->end && !r->finishing; e++) {
        uint8_t op = take_byte(in), kind = op & 7, flags = op >> 6;
        struct child *c = &r->children[((op >> 3) & 7) % r->count];
        size_t left = c->text_len - (c->sent < c->text_len ? c->sent : c->text_len), n;
        uint8_t b;

        switch (kind) {
        case 0:
            n = take_size(in);
            n = n < left ? n : left;
            b = flags & 2 ? take_byte(in) : 0;
            piece(r, c, c->sent, n, total_of(c), n == left, NULL, n ? b % n : 0, flags & 1);
            break;
        case 1:
            n = take_size(in);
            n = n < left ? n : left;
            piece(r, c, c->sent, n, flags & 1 ? total_of(c) + 1 : total_of(c), false, NULL, 0,
                  false);
            break;
        case 2:
            /* Its JSON ends with its last piece: a child that said "last" before would have
             * sent a truncated object, which no placement can mend (pieces are not parsed). */
            if (flags & 1) /* an empty piece */
                piece(r, c, c->sent, 0, total_of(c), false, NULL, 0, false);
            else if (flags & 2 && c->sent == 0) /* an empty profile */
                piece(r, c, 0, 0, total_of(c), true, NULL, 0, false);
            else
                piece(r, c, c->sent, left, total_of(c), true, NULL, 0, false);
            break;
        case 3:
            n = take_size(in);
            n = n < left ? n : left;
            piece(r, c, c->sent + 1 + flags, n, total_of(c), false, NULL, 0, false);
            break;
        case 4:
            piece(r, c, c->sent, 0, total_of(c), true, "out of memory", 0, false);
            break;
        case 5:
            gone(r, c);
            break;
        case 6:
            b = take_byte(in);
            switch (b & 3) {
            case 0:
            case 1:
                answer(r, c, c->exit_text, c->exit_len, b & 4);
                break;
            case 2:
                answer(r, c, NULL, 0, b & 4); /* on_exit_piece(): nothing received, no buffer */
                break;
            default:
                answer(r, c, c->exit_text + 1, c->exit_len - 1, b & 4);
                break;
            }
            break;
        default:
            switch ((op >> 3) & 7) {
            case 1:
                disk_fails(r->file.out.fd, r->file.out.tmp);
                break;
            case 2:
                disk_fails(r->children[take_byte(in) % r->count].slot.spool_fd, "/dev/null");
                break;
            default:
                give_up(r);
                break;
            }
            break;
        }
    }
    give_up(r); /* the input ends: no more progress */
}

/* The checks. */

/* Whether needle is in hay. */
static bool contains(const char *hay, size_t len, const char *needle, size_t n)
{
    for (size_t i = 0; n <= len && i <= len - n; i++)
        if (!memcmp(hay + i, needle, n))
            return true;
    return false;
}

/* text (the whole capture, '[' ... ']', valid JSON) is an array of exactly the expected
 * elements, in any order. */
static void check_elements(const struct run *r, const char *text, size_t len)
{
    const char *expect[STORED_MAX + CHILDREN_MAX];
    size_t expect_len[STORED_MAX + CHILDREN_MAX], expected = 0, found = 0;
    bool seen[STORED_MAX + CHILDREN_MAX] = {false};
    size_t start = 1, depth = 0;
    bool in_string = false, escaped = false;

    for (size_t i = 0; i < r->stored_count; i++) {
        expect[expected] = r->stored[i];
        expect_len[expected++] = r->stored_len[i];
    }
    for (size_t i = 0; i < r->count; i++) {
        if (r->children[i].fate != ANSWERED)
            continue;
        expect[expected] = r->children[i].answer;
        expect_len[expected++] = r->children[i].answer_len;
    }
    CHECK(len >= 2 && text[0] == '[' && text[len - 1] == ']');
    for (size_t i = 1; i < len; i++) {
        char ch = text[i];
        size_t a, b;

        if (in_string) {
            if (escaped)
                escaped = false;
            else if (ch == '\\')
                escaped = true;
            else if (ch == '"')
                in_string = false;
            continue;
        }
        if (ch == '"')
            in_string = true;
        else if (ch == '{' || ch == '[')
            depth++;
        else if ((ch == '}' || ch == ']') && depth > 0)
            depth--;
        if (depth > 0 || (ch != ',' && i != len - 1))
            continue;
        /* An element: text[start, i), less its whitespace. */
        for (a = start; a < i && text[a] == ' '; a++)
            ;
        for (b = i; b > a && text[b - 1] == ' '; b--)
            ;
        start = i + 1;
        if (a == b && i == len - 1 && found == 0)
            break; /* an empty array */
        CHECK(a < b);
        for (size_t k = 0;; k++) {
            if (k == expected) {
                fprintf(stderr, "unexpected element: %.*s\n", (int)(b - a), text + a);
                check_failed();
            }
            if (!seen[k] && expect_len[k] == b - a && !memcmp(expect[k], text + a, b - a)) {
                seen[k] = true;
                found++;
                break;
            }
        }
    }
    CHECK(found == expected);
    CHECK(r->place.processes == expected);
    CHECK(r->file.element_count == expected);
    for (size_t i = 0; i < r->count; i++) {
        const struct child *c = &r->children[i];

        if (c->fate == ANSWERED)
            continue;
        CHECK(!memchr(text, c->pad, len));
        CHECK(!contains(text, len, c->marker, strlen(c->marker)));
    }
}

/* The file as written so far, checked; returns it (malloc'd). */
static char *check_file(const struct run *r)
{
    struct stat st;
    size_t len = (size_t)r->file.len;
    char *text = malloc(len + 1);

    CHECK(text);
    CHECK(fstat(r->file.out.fd, &st) == 0);
    CHECK((uint64_t)st.st_size == r->file.len);
    CHECK(pread(r->file.out.fd, text, len + 1, 0) == (ssize_t)len);
    if (!test_json_valid(text, len)) {
        fprintf(stderr, "invalid JSON (%zu bytes): %.*s\n", len, (int)(len > 4000 ? 4000 : len),
                text);
        check_failed();
    }
    check_elements(r, text, len);
    return text;
}

static void setup(struct run *r, struct input *in)
{
    uint8_t b = take_byte(in);

    r->count = 1 + (b & 7);
    r->stored_count = (size_t)((b >> 3) & 3) % (STORED_MAX + 1);
    for (size_t i = 0; i < r->stored_count; i++) {
        char head[64];

        (void)snprintf(head, sizeof(head), "{\"stored\":%zu,\"pad\":\"", i);
        r->stored[i] = make_text(&r->stored_len[i], head, 'S', 3 + 5 * i);
    }
    for (size_t i = 0; i < r->count; i++) {
        struct child *c = &r->children[i];
        uint8_t flags = take_byte(in);
        size_t pad = take_byte(in);
        char head[64];

        pad = (pad | (size_t)take_byte(in) << 8) & PAD_MAX;
        c->pad = (char)('A' + i);
        (void)snprintf(c->marker, sizeof(c->marker), "\"child\":%zu,", i);
        (void)snprintf(head, sizeof(head), "%s{\"child\":%zu,\"pad\":\"", flags & 4 ? " " : "", i);
        c->text = make_text(&c->text_len, head, c->pad, pad);
        (void)snprintf(head, sizeof(head), "{\"child\":%zu,\"exit\":true,\"pad\":\"", i);
        c->exit_text = make_text(&c->exit_len, head, c->pad, pad);
        c->mode = flags & 3;
        /* A wrong total: -8..6 off (never right), at least 1; or beyond any profile's size. */
        c->wrong = (uint64_t)((int64_t)c->text_len + (int)(flags >> 4) - 8);
        if (c->wrong == c->text_len)
            c->wrong += 8;
        if ((int64_t)c->wrong < 1)
            c->wrong = 1;
        if (flags >> 4 == 15)
            c->wrong = (uint64_t)CAPTURE_PIECE_TOTAL_MAX + c->text_len;
        capture_placement_add_slot(&r->place, &c->slot);
        if (flags & 8) { /* its connection is failing: it cannot be asked (start()) */
            c->slot.done = true;
            c->fate = DROPPED;
            r->done_count++;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, data + size};
    struct run *r;
    int fds = count_fds(), entries;
    bool has;
    char *text = NULL;

    r = calloc(1, sizeof(*r));
    CHECK(r);
    make_dir(r);
    capture_file_init(&r->file, r->path);
    capture_placement_init(&r->place, &r->file);
    setup(r, &in);
    /* start(): the file, the array's opening, the stored exit profiles (write_stored()). */
    if (capture_file_open(&r->file) == 0 && capture_file_append(&r->file, "[", 1) == 0) {
        for (size_t i = 0; i < r->stored_count && !r->file.error; i++) {
            uint64_t start;

            if (capture_file_element_begin(&r->file, &start) == 0 &&
                capture_file_append(&r->file, r->stored[i], r->stored_len[i]) == 0)
                (void)capture_placement_add_element(&r->place, start);
        }
    }
    CHECK(!r->file.error); /* nothing has failed yet */
    if (r->done_count == r->count)
        finish(r);
    else
        run_events(r, &in);
    CHECK(r->finishing);

    /* finish() and complete(): checked before the commit, which gather.c's worker does. */
    if (!r->file.error)
        text = check_file(r);
    if (!r->file.error && r->place.processes == 0)
        (void)capture_file_fail(&r->file, -ENODATA, "nothing to write");
    if (r->file.error) {
        capture_file_abort(&r->file);
        CHECK(access(r->path, F_OK) < 0 && errno == ENOENT);
    } else {
        char *again = malloc(r->file.len + 1);
        int fd;

        CHECK(capture_file_commit(&r->file) == 0);
        fd = open(r->path, O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0 && again);
        CHECK(read(fd, again, r->file.len + 1) == (ssize_t)r->file.len);
        CHECK(!memcmp(again, text, r->file.len));
        (void)close(fd);
        free(again);
    }
    free(text);

    /* gather_free(). */
    for (size_t i = 0; i < r->count; i++)
        capture_slot_spool_close(&r->children[i].slot);
    capture_file_free(&r->file);
    entries = count_entries(r->dir, "capture.json", &has);
    CHECK(entries == (has ? 1 : 0)); /* no temporary file left */
    if (has)
        CHECK(unlink(r->path) == 0);
    CHECK(rmdir(r->dir) == 0);
    live_dir[0] = '\0';
    CHECK(count_fds() == fds);
    for (size_t i = 0; i < r->count; i++) {
        free(r->children[i].text);
        free(r->children[i].exit_text);
    }
    for (size_t i = 0; i < r->stored_count; i++)
        free(r->stored[i]);
    free(r);
    return 0;
}
