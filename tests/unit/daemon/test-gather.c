/* Unit tests for daemon/gather.c: captures on a real daemon (daemon_new on a private loop)
 * whose children are real clients of other processes (forked helpers hand their connected
 * sockets over: daemon-fixture.c's fx_connect_forked), answering GatherProfile with the
 * ProfileData pieces each test chooses: with totals or without, interleaved, large ones the
 * daemon takes as their bytes arrive, out of order, of a size other than announced, not JSON
 * objects, failed, cut off, late; progress polls and give-ups on the capture request's own
 * child timeout; exit profiles and departures kept before the capture; a file that cannot be
 * written (RLIMIT_FSIZE). Every output is read back as a user of a capture would: strictly
 * valid JSON (tests/lib/json-check.h), each answer byte for byte in `processes` once and
 * nothing else there, profileGatheringLog read with json/reader.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon-fixture.h"
#include "json-check.h"
#include "json/reader.h"
#include "testlib.h"

#define KIB                 1024u
#define MIB                 (1024u * 1024u)
#define MSG(x)              FLEETPROF__ENVELOPE__MSG_##x
#define LONG_TIMEOUT_NS     (25ull * 1000 * 1000 * 1000) /* progress rounds stay out of the way */
#define ROUND_MS            250u /* a capture request's own child timeout, for the rounds' test */
#define BIG_PIECE_MIN       (16 * KIB) /* from here a piece may be taken as its bytes arrive */
#define REASON_GONE         "went away during the capture"
#define REASON_NOT_OBJECT   "its profile is not a JSON object"
#define REASON_OUT_OF_ORDER "profile pieces out of order"
#define REASON_SIZE         "profile size not as announced"
#define REASON_TOO_LARGE    "profile too large"

/* ---- the daemon and its output --------------------------------------------------- */

struct env {
    struct fx f;
    char out_dir[320];
    char path[360]; /* the capture's output */
};

/* The daemon with options o, and a directory of its own for the output. */
static void env_setup_with(struct env *e, const struct daemon_options *o)
{
    fx_setup(&e->f, o);
    (void)snprintf(e->out_dir, sizeof(e->out_dir), "%s/out", e->f.dir);
    assert_int_equal(mkdir(e->out_dir, 0700), 0);
    (void)snprintf(e->path, sizeof(e->path), "%s/fleet.json", e->out_dir);
}

static void env_setup(struct env *e, uint64_t child_timeout_ns)
{
    struct daemon_options o = {.child_timeout_ns = child_timeout_ns};

    env_setup_with(e, &o);
}

static void env_teardown(struct env *e)
{
    fx_teardown(&e->f);
}

static char *read_all(const char *path, size_t *ret_len)
{
    FILE *fp = fopen(path, "rb");
    char *text;
    long len;

    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    len = ftell(fp);
    assert_true(len >= 0);
    rewind(fp);
    text = malloc((size_t)len + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)len, fp), (size_t)len);
    text[len] = '\0';
    (void)fclose(fp);
    *ret_len = (size_t)len;
    return text;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");

    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
}

/* The names in dir, joined by '/' (none: ""). */
static void dir_names(const char *dir, char *out, size_t size)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t used = 0;

    assert_non_null(d);
    out[0] = '\0';
    while ((de = readdir(d)) && used < size)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            used += (size_t)snprintf(out + used, size - used, "%s%s", used ? "/" : "", de->d_name);
    (void)closedir(d);
}

static size_t count_in(const char *text, size_t len, const void *needle, size_t n)
{
    size_t count = 0;

    for (const char *p = text; n && p && (size_t)(p - text) + n <= len; p++) {
        p = memmem(p, len - (size_t)(p - text), needle, n);
        if (!p)
            break;
        count++;
    }
    return count;
}

/* ---- children -------------------------------------------------------------------- */

/* A child of the fleet, played by the test: a real client of a forked helper process. */
struct kid {
    struct fx_client cl;
    pid_t pid;
    char name[32];
    char *json; /* what it answers with (owned) */
    size_t len;
    size_t sent;  /* bytes of json sent in this capture */
    size_t asked; /* GatherProfile messages received so far */
    uint64_t id;  /* the capture that asked it last */
    bool own;     /* this process itself (fx_connect): not to be killed */
};

/* A profile text of exactly len bytes, its own for tag: irregular spacing (a re-serialized
 * copy would differ) and a filler whose letters depend on where they are and on tag. */
static char *make_json(const char *tag, size_t len)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    char head[160], *s;
    unsigned seed = 0;
    size_t h;

    for (const char *t = tag; *t; t++)
        seed = seed * 31u + (unsigned char)*t;
    h = (size_t)snprintf(head, sizeof(head), "{\"meta\": {\"tag\" : \"%s\"},\n  \"pad\":\"", tag);
    assert_true(len >= h + 2);
    s = malloc(len + 1);
    assert_non_null(s);
    memcpy(s, head, h);
    for (size_t i = h; i < len - 2; i++)
        s[i] = alphabet[(i * 7u + seed + i / 97u) % (sizeof(alphabet) - 1)];
    memcpy(s + len - 2, "\"}", 2);
    s[len] = '\0';
    return s;
}

static void kid_answer_with(struct kid *k, char *json, size_t len)
{
    free(k->json);
    k->json = json;
    k->len = len;
    k->sent = 0;
}

static void kid_connect(struct env *e, struct kid *k, const char *name, size_t len)
{
    char tag[64];

    assert_non_null(fx_connect_forked(&e->f, &k->cl, name, &k->pid));
    (void)snprintf(k->name, sizeof(k->name), "%s", name);
    (void)snprintf(tag, sizeof(tag), "%s-%d", name, (int)k->pid);
    k->json = NULL;
    kid_answer_with(k, make_json(tag, len), len);
    k->asked = 0;
    k->id = 0;
}

struct gone {
    struct daemon *d;
    pid_t pid;
};

static bool no_child(void *arg)
{
    struct gone *g = arg;

    return !daemon__child_by_pid(g->d, g->pid);
}

/* Ends k's connection, and waits until the daemon has seen it end. */
static void kid_close(struct env *e, struct kid *k)
{
    struct gone g = {e->f.d, k->pid};

    fx_client_close(&e->f, &k->cl);
    assert_true(fx_run_until(&e->f, no_child, &g));
}

static void kid_free(struct env *e, struct kid *k)
{
    kid_close(e, k);
    if (k->pid > 0 && !k->own)
        fx_kill_reap(k->pid);
    free(k->json);
    *k = (struct kid){0};
}

static bool kid_got_ask(void *arg)
{
    struct kid *k = arg;

    return fx_client_count(&k->cl, MSG(GATHER_PROFILE)) > k->asked || k->cl.closed;
}

/* Waits for the capture's GatherProfile: k answers that capture from now on. */
static void kid_wait_asked(struct env *e, struct kid *k)
{
    const Fleetprof__Envelope *env;

    assert_true(fx_run_until(&e->f, kid_got_ask, k));
    env = fx_client_got(&k->cl, MSG(GATHER_PROFILE), k->asked);
    assert_non_null(env);
    k->id = env->gather_profile->id;
    k->asked++;
    k->sent = 0;
}

static bool caught_up(void *arg)
{
    struct fx_client *cl = arg;

    return cl->closed || !cl->ipc || ipc_conn_peer_caught_up(cl->ipc) == 1;
}

/* Sends env and waits until the daemon has read all of it (and so handled it). */
static void kid_send(struct env *e, struct kid *k, const Fleetprof__Envelope *env)
{
    assert_int_equal(ipc_conn_send(k->cl.ipc, env), 0);
    assert_true(fx_run_until(&e->f, caught_up, &k->cl));
}

struct data {
    uint64_t id;
    const void *bytes;
    size_t n;
    uint64_t offset, total;
    bool last, exit;
    const char *error;
};

static void kid_send_data(struct env *e, struct kid *k, const struct data *d)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ProfileData m = FLEETPROF__PROFILE_DATA__INIT;

    m.request_id = d->id;
    m.data.data = (uint8_t *)d->bytes;
    m.data.len = d->n;
    m.offset = d->offset;
    m.total = d->total;
    m.last = d->last;
    m.exit = d->exit;
    if (d->error)
        m.error = (char *)d->error;
    env.msg_case = MSG(PROFILE_DATA);
    env.profile_data = &m;
    kid_send(e, k, &env);
}

/* Writes len raw bytes on k's socket (nothing queued in its connection meanwhile). */
static void kid_write_raw(struct env *e, struct kid *k, const void *buf, size_t len)
{
    int fd = ipc_conn_fileno(k->cl.ipc);
    const char *p = buf;

    assert_true(fd >= 0);
    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            assert_true(fx_run_until(&e->f, caught_up, &k->cl)); /* the daemon reads on */
            continue;
        }
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* A piece as a child sends its large ones (its data last, after a header encoded by hand:
 * ipc_frame_encode_profile_header()), of which only the first `sent` data bytes go out. The
 * daemon reads its start before the rest is written: a frame that does not arrive in one
 * read, which the daemon may take as its bytes arrive. */
static void kid_send_big(struct env *e, struct kid *k, const struct data *d, size_t sent)
{
    Fleetprof__ProfileData m = FLEETPROF__PROFILE_DATA__INIT;
    uint8_t header[256];
    size_t frame_bytes;
    ssize_t h;

    m.request_id = d->id;
    m.data.data = (uint8_t *)d->bytes;
    m.data.len = d->n;
    m.offset = d->offset;
    m.total = d->total;
    m.last = d->last;
    h = ipc_frame_encode_profile_header(&m, header, sizeof(header), &frame_bytes);
    assert_true(h > 0);
    assert_int_equal(frame_bytes, (size_t)h + d->n);
    assert_true(fx_run_until(&e->f, caught_up, &k->cl));
    kid_write_raw(e, k, header, (size_t)h);
    kid_write_raw(e, k, d->bytes, sent < 1000 ? sent : 1000);
    assert_true(fx_run_until(&e->f, caught_up, &k->cl));
    if (sent > 1000)
        kid_write_raw(e, k, (const char *)d->bytes + 1000, sent - 1000);
    assert_true(fx_run_until(&e->f, caught_up, &k->cl));
}

/* The next n bytes of k's profile (0: the rest), announcing its total or not; the last one
 * says so. Pieces of BIG_PIECE_MIN bytes or more go as a child sends large ones. */
static void kid_piece(struct env *e, struct kid *k, size_t n, bool with_total)
{
    struct data d = {.id = k->id, .bytes = k->json + k->sent, .offset = k->sent};

    if (n == 0 || k->sent + n > k->len)
        n = k->len - k->sent;
    d.n = n;
    d.total = with_total ? k->len : 0;
    d.last = k->sent + n == k->len;
    if (n >= BIG_PIECE_MIN)
        kid_send_big(e, k, &d, n);
    else
        kid_send_data(e, k, &d);
    k->sent += n;
}

/* ---- captures -------------------------------------------------------------------- */

struct result {
    struct env *e;
    bool done;
    unsigned progress_calls;
    struct daemon_capture_progress progress; /* the last one */
    int error;
    char message[512];
    uint64_t bytes;
    uint32_t processes, given_up, lost;
    size_t lost_listed;
    struct daemon_lost_process lost_list[8];
    char names_at_done[200]; /* the output's directory as the caller heard of a failure */
};

static void on_done(void *userdata, const struct daemon_capture_result *r)
{
    struct result *res = userdata;

    res->done = true;
    res->error = r->error;
    (void)snprintf(res->message, sizeof(res->message), "%s", r->message ? r->message : "");
    res->bytes = r->bytes;
    res->processes = r->processes;
    res->given_up = r->given_up;
    res->lost = r->lost;
    res->lost_listed = r->lost_listed < 8 ? r->lost_listed : 8;
    if (res->lost_listed) /* lost_list may be NULL then */
        memcpy(res->lost_list, r->lost_list, res->lost_listed * sizeof(*res->lost_list));
    if (r->error)
        dir_names(res->e->out_dir, res->names_at_done, sizeof(res->names_at_done));
}

static void on_progress(void *userdata, const struct daemon_capture_progress *p)
{
    struct result *res = userdata;

    assert_false(res->done);
    res->progress_calls++;
    res->progress = *p;
}

static void capture(struct env *e, struct result *res)
{
    *res = (struct result){.e = e};
    assert_int_equal(daemon_capture(e->f.d, e->path, "test-gather", on_progress, on_done, res), 0);
}

static bool capture_over(void *arg)
{
    struct result *res = arg;

    return res->done && !res->e->f.d->gather;
}

static void capture_wait(struct env *e, struct result *res)
{
    assert_true(fx_run_until(&e->f, capture_over, res));
    if (res->error)
        print_message("# capture failed: %s\n", res->message);
}

/* The file a capture wrote, read back. */
struct out {
    char *text;
    size_t len;
    struct json_doc *doc;
    const struct json_value *root, *processes, *events;
    size_t arr, arr_len; /* the processes array's text, between its brackets */
};

static void out_read(const char *path, struct out *o)
{
    static const char open_arr[] = "\"processes\":[", close_arr[] = "],\"profileGatheringLog\":";
    struct json_read_error err;
    const struct json_value *log;
    const char *a, *z = NULL;
    char pid[16];

    *o = (struct out){0};
    o->text = read_all(path, &o->len);
    if (json_doc_parse(o->text, o->len, 0, &o->doc, &err) < 0) {
        size_t at = err.offset > 60 ? err.offset - 60 : 0;

        print_message("# not JSON at %zu (%s): ...%.120s\n", err.offset, err.message, o->text + at);
    }
    assert_non_null(o->doc);
    assert_true(test_json_valid(o->text, o->len));
    o->root = json_doc_root(o->doc);
    o->processes = json_object_get(o->doc, o->root, "processes");
    assert_int_equal(json_value_type(o->processes), JSON_ARRAY);
    (void)snprintf(pid, sizeof(pid), "%d", (int)getpid());
    log = json_object_get(o->doc, json_object_get(o->doc, o->root, "profileGatheringLog"), pid);
    o->events = json_object_get(o->doc, log, "events");
    assert_int_equal(json_value_type(o->events), JSON_ARRAY);
    a = memmem(o->text, o->len, open_arr, sizeof(open_arr) - 1);
    assert_non_null(a);
    o->arr = (size_t)(a - o->text) + sizeof(open_arr) - 1;
    for (const char *p = a;
         (p = memmem(p, o->len - (size_t)(p - o->text), close_arr, sizeof(close_arr) - 1)); p++)
        z = p;
    assert_non_null(z);
    o->arr_len = (size_t)(z - o->text) - o->arr;
}

static void out_free(struct out *o)
{
    json_doc_free(o->doc);
    free(o->text);
    *o = (struct out){0};
}

/* processes holds exactly these answers (texts of lens bytes), each once, byte for byte, and
 * nothing else: what is left of the array's text without them is separators and spaces. */
static void out_expect(const struct out *o, const char *const *texts, const size_t *lens, size_t n)
{
    char *arr = malloc(o->arr_len + 1);
    size_t commas = 0;

    assert_non_null(arr);
    memcpy(arr, o->text + o->arr, o->arr_len);
    assert_int_equal(json_value_len(o->processes), n);
    for (size_t i = 0; i < n; i++) {
        char *at;
        struct json_doc *one;
        struct json_read_error err;
        bool found = false;

        assert_int_equal(count_in(o->text, o->len, texts[i], lens[i]), 1);
        at = memmem(arr, o->arr_len, texts[i], lens[i]);
        assert_non_null(at);
        memset(at, ' ', lens[i]);
        assert_int_equal(json_doc_parse(texts[i], lens[i], 0, &one, &err), 0);
        for (size_t j = 0; j < n && !found; j++)
            found = json_value_equal(one, json_doc_root(one), o->doc,
                                     json_array_at(o->doc, o->processes, j));
        json_doc_free(one);
        assert_true(found);
    }
    for (size_t i = 0; i < o->arr_len; i++) {
        if (arr[i] != ' ' && arr[i] != ',')
            print_message("# stray byte in processes at %zu: '%c'\n", i, arr[i]);
        assert_true(arr[i] == ' ' || arr[i] == ',');
        commas += arr[i] == ',';
    }
    assert_int_equal(commas, n ? n - 1 : 0);
    free(arr);
}

static void out_expect_kids(const struct out *o, struct kid *const *kids, size_t n)
{
    const char *texts[8];
    size_t lens[8];

    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        texts[i] = kids[i]->json;
        lens[i] = kids[i]->len;
    }
    out_expect(o, texts, lens, n);
}

/* The gathering log's events of kind about pid (0: any); the first one's arguments and
 * message in *ret_args and *ret_message (may be NULL). */
static size_t ev_find(const struct out *o, const char *kind, int32_t pid,
                      const struct json_value **ret_args, const char **ret_message)
{
    size_t count = 0;

    for (size_t i = 0; i < json_value_len(o->events); i++) {
        const struct json_value *ev = json_array_at(o->doc, o->events, i);
        const struct json_value *args = json_array_at(o->doc, ev, 2);
        const char *k = json_value_string(o->doc, json_object_get(o->doc, args, "kind"), NULL);
        int64_t p = 0;

        assert_non_null(k);
        (void)json_value_int64(o->doc, json_object_get(o->doc, args, "pid"), &p);
        if (strcmp(k, kind) || (pid && p != pid))
            continue;
        if (count++ == 0) {
            if (ret_args)
                *ret_args = args;
            if (ret_message)
                *ret_message = json_value_string(o->doc, json_array_at(o->doc, ev, 1), NULL);
        }
    }
    return count;
}

static const char *ev_str(const struct out *o, const struct json_value *args, const char *key)
{
    const char *s = json_value_string(o->doc, json_object_get(o->doc, args, key), NULL);

    return s ? s : "";
}

static int64_t ev_int(const struct out *o, const struct json_value *args, const char *key)
{
    int64_t v = -1;

    (void)json_value_int64(o->doc, json_object_get(o->doc, args, key), &v);
    return v;
}

/* k's profile is in the file, and the log says it answered with its bytes. */
static void expect_answered(const struct out *o, const struct kid *k)
{
    const struct json_value *args = NULL;
    const char *message = NULL;

    assert_int_equal(ev_find(o, "waitedFor", k->pid, NULL, NULL), 1);
    assert_int_equal(ev_find(o, "answered", k->pid, &args, &message), 1);
    assert_string_equal(ev_str(o, args, "name"), k->name);
    assert_int_equal(ev_int(o, args, "bytes"), (int64_t)k->len);
    assert_string_equal(message, "received {bytes} bytes from child {pid} ({name})");
    assert_int_equal(ev_find(o, "dropped", k->pid, NULL, NULL), 0);
}

/* k is dropped for reason, named once in the log and in the result, and not answered. */
static void expect_dropped(const struct out *o, const struct result *res, const struct kid *k,
                           const char *reason)
{
    const struct json_value *args = NULL;
    bool listed = false;

    assert_int_equal(ev_find(o, "dropped", k->pid, &args, NULL), 1);
    assert_string_equal(ev_str(o, args, "reason"), reason);
    assert_string_equal(ev_str(o, args, "name"), k->name);
    assert_int_equal(ev_find(o, "answered", k->pid, NULL, NULL), 0);
    for (size_t i = 0; i < res->lost_listed; i++)
        if (res->lost_list[i].pid == k->pid) {
            listed = true;
            assert_string_equal(res->lost_list[i].reason, reason);
        }
    assert_true(listed);
}

static void expect_ok(const struct result *res, uint32_t processes, uint32_t lost)
{
    assert_true(res->done);
    assert_int_equal(res->error, 0);
    assert_string_equal(res->message, "");
    assert_int_equal(res->processes, processes);
    assert_int_equal(res->lost, lost);
}

/* ---- three children answering in pieces ----------------------------------------- */

/* One step of a script: kid sends the next n bytes (0: the rest) of its profile. */
struct step {
    int kid;
    size_t n;
    bool total;
};

static void play(struct env *e, struct kid *kids, const struct step *steps, size_t count)
{
    for (size_t i = 0; i < count; i++)
        kid_piece(e, &kids[steps[i].kid], steps[i].n, steps[i].total);
}

/* Three children, each asked, answering with the script's pieces; every answer ends up in the
 * file once, byte for byte, and each is named as answered. */
static void three_answer(const size_t lens[3], const struct step *steps, size_t count)
{
    struct env e;
    struct kid kids[3] = {0};
    struct kid *all[3] = {&kids[0], &kids[1], &kids[2]};
    static const char *const names[3] = {"ant", "bee", "cat"};
    struct result res;
    struct out o;

    env_setup(&e, LONG_TIMEOUT_NS);
    for (int i = 0; i < 3; i++)
        kid_connect(&e, &kids[i], names[i], lens[i]);
    capture(&e, &res);
    for (int i = 0; i < 3; i++)
        kid_wait_asked(&e, &kids[i]);
    play(&e, kids, steps, count);
    capture_wait(&e, &res);
    expect_ok(&res, 3, 0);
    out_read(e.path, &o);
    out_expect_kids(&o, all, 3);
    for (int i = 0; i < 3; i++)
        expect_answered(&o, &kids[i]);
    assert_int_equal(ev_find(&o, "dropped", 0, NULL, NULL), 0);
    assert_int_equal(ev_find(&o, "noProgress", 0, NULL, NULL), 0);
    assert_int_equal(res.bytes, o.len);
    /* The caller heard of it: at the start, then as each child answered. */
    assert_int_equal(res.progress_calls, 4);
    assert_int_equal(res.progress.children_total, 3);
    assert_int_equal(res.progress.children_done, 3);
    assert_int_equal(res.progress.exit_profiles, 0);
    assert_int_equal(res.progress.bytes, lens[0] + lens[1] + lens[2]);
    out_free(&o);
    for (int i = 0; i < 3; i++)
        kid_free(&e, &kids[i]);
    env_teardown(&e);
}

/* Totals announced: each element is reserved at its first piece and written in place,
 * whatever the order the pieces come in and the order the children finish in. */
static void test_three_children_interleaved_with_totals(void **state)
{
    static const size_t lens[3] = {3000, 5000, 700};
    static const struct step steps[] = {
            {0, 1000, true}, {1, 2000, true}, {2, 300, true}, {1, 1500, true}, {0, 1000, true},
            {2, 0, true},    {0, 500, true},  {1, 0, true},   {0, 0, true},
    };

    (void)state;
    three_answer(lens, steps, ARRAY_SIZE(steps));
}

/* Without totals: the first child to send streams into the file (current), the others spool;
 * one that completes while another is current waits for its turn, then a child still sending
 * becomes current. */
static void test_three_children_interleaved_without_totals(void **state)
{
    static const size_t lens[3] = {3000, 5000, 700};
    static const struct step steps[] = {
            {0, 1000, false}, {1, 2000, false}, {2, 300, false}, {2, 0, false}, /* spooled, done */
            {1, 1500, false}, {0, 1000, false}, {0, 0, false}, /* current done: cat, bee current */
            {1, 0, false},
    };

    (void)state;
    three_answer(lens, steps, ARRAY_SIZE(steps));
}

/* Mixed: a total announced while another child is current spools like one without. */
static void test_three_children_mixed_totals(void **state)
{
    static const size_t lens[3] = {4000, 2500, 1200};
    static const struct step steps[] = {
            {2, 500, true},   /* reserved */
            {0, 1000, false}, /* current */
            {1, 800, true},   /* a total, but ant is current: spooled */
            {1, 0, true},     {2, 0, true}, {0, 1500, false}, {0, 0, false},
    };

    (void)state;
    three_answer(lens, steps, ARRAY_SIZE(steps));
}

/* Large pieces (from 16 KiB) are written as their bytes arrive, from the daemon's read
 * buffer: interleaved, with and without totals, several per child. */
static void test_large_pieces_interleaved(void **state)
{
    static const size_t lens[3] = {700 * KIB, 300 * KIB + 17, 200 * KIB + 3};
    static const struct step steps[] = {
            {0, 200 * KIB, true}, {1, 100 * KIB, false}, {2, 64 * KIB, false}, {0, 300 * KIB, true},
            {2, 0, false},        {1, 150 * KIB, false}, {0, 0, true},         {1, 0, false},
    };

    (void)state;
    three_answer(lens, steps, ARRAY_SIZE(steps));
}

static void on_streamed(struct ipc_conn *conn, uint64_t request_id, int status, void *userdata)
{
    (void)conn;
    (void)request_id;
    *(int *)userdata = status == 0 ? 1 : -1;
}

/* Three children stream megabytes at once, as the runtime does (ipc_conn_stream_profile():
 * 1 MiB pieces with totals, a window queued): the daemon reads them as the loop serves. */
static void test_three_children_stream_at_once(void **state)
{
    static const size_t lens[3] = {2 * MIB + 512 * KIB + 5, 1 * MIB + 3, 3 * MIB};
    static const char *const names[3] = {"ant", "bee", "cat"};
    struct env e;
    struct kid kids[3] = {0};
    struct kid *all[3] = {&kids[0], &kids[1], &kids[2]};
    int streamed[3] = {0};
    struct result res;
    struct out o;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    for (int i = 0; i < 3; i++)
        kid_connect(&e, &kids[i], names[i], lens[i]);
    capture(&e, &res);
    for (int i = 0; i < 3; i++)
        kid_wait_asked(&e, &kids[i]);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ipc_conn_stream_profile(kids[i].cl.ipc, kids[i].id, kids[i].json,
                                                 kids[i].len, false, NULL, on_streamed,
                                                 &streamed[i]),
                         0);
    capture_wait(&e, &res);
    for (int i = 0; i < 3; i++)
        assert_int_equal(streamed[i], 1);
    expect_ok(&res, 3, 0);
    out_read(e.path, &o);
    out_expect_kids(&o, all, 3);
    for (int i = 0; i < 3; i++)
        expect_answered(&o, &kids[i]);
    out_free(&o);
    for (int i = 0; i < 3; i++)
        kid_free(&e, &kids[i]);
    env_teardown(&e);
}

/* Any interleaving of any pieces, with or without totals, small or large: every answer is in
 * the file once, byte for byte. Seeded (FLEETPROF_TEST_SEED replays a run). */
static void test_any_interleaving_keeps_every_answer(void **state)
{
    static const char *const names[3] = {"ant", "bee", "cat"};
    struct test_rng rng;
    struct env e;
    struct kid kids[3] = {0};
    struct kid *all[3] = {&kids[0], &kids[1], &kids[2]};

    (void)state;
    test_rng_init(&rng, test_seed());
    env_setup(&e, LONG_TIMEOUT_NS);
    for (int i = 0; i < 3; i++)
        kid_connect(&e, &kids[i], names[i], 100);
    for (int round = 0; round < 12; round++) {
        bool total[3];
        struct result res;
        struct out o;

        for (int i = 0; i < 3; i++) {
            char tag[64];
            size_t len = test_rng_range(&rng, 0, 3) == 0 ? test_rng_range(&rng, 20 * KIB, 90 * KIB)
                                                         : test_rng_range(&rng, 60, 6000);

            (void)snprintf(tag, sizeof(tag), "%s-round-%d", names[i], round);
            kid_answer_with(&kids[i], make_json(tag, len), len);
            total[i] = test_rng_range(&rng, 0, 1);
        }
        capture(&e, &res);
        for (int i = 0; i < 3; i++)
            kid_wait_asked(&e, &kids[i]);
        for (;;) {
            int open[3], n = 0, i;

            for (i = 0; i < 3; i++)
                if (kids[i].sent < kids[i].len)
                    open[n++] = i;
            if (!n)
                break;
            i = open[test_rng_range(&rng, 0, (uint64_t)n - 1)];
            kid_piece(&e, &kids[i], test_rng_range(&rng, 1, kids[i].len / 2 + 1), total[i]);
        }
        capture_wait(&e, &res);
        expect_ok(&res, 3, 0);
        out_read(e.path, &o);
        out_expect_kids(&o, all, 3);
        for (int i = 0; i < 3; i++)
            expect_answered(&o, &kids[i]);
        out_free(&o);
    }
    for (int i = 0; i < 3; i++)
        kid_free(&e, &kids[i]);
    env_teardown(&e);
}

/* ---- children dropped ------------------------------------------------------------ */

/* Where the failing child's bytes are when it fails. */
enum where {
    AT_RESERVED_MID,  /* its element reserved first, others' after it: blanked */
    AT_RESERVED_LAST, /* its element reserved last: cut off */
    AT_CURRENT,       /* streaming at the end of the file, others spooled: cut off */
    AT_SPOOLED,       /* in its spool while another is current: closed */
    AT_COUNT,
};

static const char *const where_names[AT_COUNT] = {"reserved (middle)", "reserved (last)", "current",
                                                  "spooled"};

enum failure {
    FAIL_OUT_OF_ORDER,
    FAIL_SIZE_SHORT,    /* its last piece ends before the total it announced */
    FAIL_SIZE_CHANGED,  /* a piece announces another total */
    FAIL_NOT_OBJECT,    /* its JSON starts with '[' */
    FAIL_EMPTY,         /* one empty piece, the last */
    FAIL_ERROR,         /* a last piece with an error */
    FAIL_GONE,          /* its connection ends between pieces */
    FAIL_GONE_IN_PIECE, /* its connection ends inside a large piece */
    FAIL_TOO_LARGE,     /* it announces more than 512 MiB */
};

#define CHILD_ERROR "cannot write the profile: no memory for the string table"

/* ant and cat answer; bee fails as asked, with its bytes where `where` says, then sends on
 * (late: ignored). bee is dropped with reason, named in the log, no byte of it in the file. */
static void one_fails(enum failure how, enum where where, const char *reason)
{
    struct env e;
    struct kid ant = {0}, bee = {0}, cat = {0};
    struct kid *good[2] = {&ant, &cat};
    bool reserved = where == AT_RESERVED_MID || where == AT_RESERVED_LAST;
    bool first_bad =
            how == FAIL_NOT_OBJECT || how == FAIL_EMPTY || (how == FAIL_TOO_LARGE && reserved);
    const char *bad_text = "[\"BEE\", \"not an object\", 1, 2, 3]";
    bool gone = how == FAIL_GONE || how == FAIL_GONE_IN_PIECE;
    struct result res;
    struct out o;
    char late[80];

    print_message("# bee fails (%d) while %s\n", (int)how, where_names[where]);
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &ant, "ant", 3000);
    kid_connect(&e, &bee, "bee", how == FAIL_GONE_IN_PIECE ? 600 * KIB : 40 * KIB);
    kid_connect(&e, &cat, "cat", 2000);
    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_wait_asked(&e, &bee);
    kid_wait_asked(&e, &cat);

    /* Everyone's first pieces, bee's where it is to be. */
    if (first_bad) {
        struct data d = {.id = bee.id, .last = how == FAIL_EMPTY};

        if (how == FAIL_NOT_OBJECT) {
            d.bytes = bad_text;
            d.n = strlen(bad_text);
            d.total = reserved ? d.n : 0;
        } else if (how == FAIL_TOO_LARGE) {
            d.bytes = bee.json;
            d.n = 100;
            d.total = 600u * MIB;
        }
        kid_piece(&e, &ant, 1000, false);
        kid_send_data(&e, &bee, &d);
        kid_piece(&e, &cat, 500, reserved);
    } else {
        size_t first = how == FAIL_GONE_IN_PIECE ? 100 * KIB : 1500;

        switch (where) {
        case AT_RESERVED_MID:
            kid_piece(&e, &bee, first, true);
            kid_piece(&e, &ant, 1000, true);
            kid_piece(&e, &cat, 500, true);
            break;
        case AT_RESERVED_LAST:
            kid_piece(&e, &ant, 1000, true);
            kid_piece(&e, &cat, 500, true);
            kid_piece(&e, &bee, first, true);
            break;
        case AT_CURRENT:
            kid_piece(&e, &bee, first, false);
            kid_piece(&e, &ant, 1000, false);
            kid_piece(&e, &cat, 500, true); /* spooled too: bee is current */
            break;
        default:
            kid_piece(&e, &ant, 1000, false);
            kid_piece(&e, &bee, first, false);
            kid_piece(&e, &cat, 500, false);
            break;
        }
        assert_int_equal(fx_logged(&e.f, "dropped"), 0);
    }

    /* bee fails. */
    switch (how) {
    case FAIL_OUT_OF_ORDER: {
        /* A large one: the daemon does not take it as it arrives, it refuses it whole. */
        struct data d = {.id = bee.id,
                         .bytes = bee.json + bee.sent + 3,
                         .n = 20 * KIB,
                         .offset = bee.sent + 3,
                         .total = reserved ? bee.len : 0};

        kid_send_big(&e, &bee, &d, d.n);
        break;
    }
    case FAIL_SIZE_SHORT: {
        struct data d = {.id = bee.id,
                         .bytes = bee.json + bee.sent,
                         .n = 100,
                         .offset = bee.sent,
                         .total = bee.len,
                         .last = true};

        kid_send_data(&e, &bee, &d);
        break;
    }
    case FAIL_SIZE_CHANGED: {
        struct data d = {.id = bee.id,
                         .bytes = bee.json + bee.sent,
                         .n = 100,
                         .offset = bee.sent,
                         .total = reserved ? bee.len + 1 : bee.len + 7,
                         .last = !reserved};

        kid_send_data(&e, &bee, &d); /* not reserved: the last piece ends short of its total */
        break;
    }
    case FAIL_ERROR: {
        struct data d = {.id = bee.id,
                         .offset = bee.sent,
                         .total = reserved ? bee.len : 0,
                         .last = true,
                         .error = CHILD_ERROR};

        kid_send_data(&e, &bee, &d);
        break;
    }
    case FAIL_TOO_LARGE:
        if (!reserved) {
            struct data d = {.id = bee.id,
                             .bytes = bee.json + bee.sent,
                             .n = 100,
                             .offset = bee.sent,
                             .total = 600u * MIB};

            kid_send_data(&e, &bee, &d);
        }
        break;
    case FAIL_GONE_IN_PIECE: {
        /* Half of a 200 KiB piece, taken as it arrives, then the connection ends. */
        struct data d = {.id = bee.id,
                         .bytes = bee.json + bee.sent,
                         .n = 200 * KIB,
                         .offset = bee.sent,
                         .total = reserved ? bee.len : 0};
        struct conn *c = daemon__child_by_pid(e.f.d, bee.pid);

        kid_send_big(&e, &bee, &d, 100 * KIB);
        assert_non_null(c);
        assert_true(c->piece_gather != 0); /* the daemon is taking it as it arrives */
        kid_close(&e, &bee);
        break;
    }
    case FAIL_GONE:
        kid_close(&e, &bee);
        break;
    default:
        break;
    }
    assert_non_null(e.f.d->gather); /* the others go on */
    (void)snprintf(late, sizeof(late), "late profile data from child %d dropped", (int)bee.pid);
    assert_int_equal(fx_logged(&e.f, late), 0);
    if (!gone) {
        /* What it sends after it was dropped is late: ignored. */
        struct data d = {.id = bee.id, .bytes = bee.json, .n = 50, .offset = 0, .total = bee.len};

        kid_send_data(&e, &bee, &d);
        d.bytes = bee.json + 50;
        d.offset = 50;
        d.n = bee.len - 50;
        d.last = true;
        if (d.n >= BIG_PIECE_MIN)
            kid_send_big(&e, &bee, &d, d.n);
        else
            kid_send_data(&e, &bee, &d);
        assert_int_equal(fx_logged(&e.f, late), 2);
    }
    kid_piece(&e, &cat, 0, reserved);
    kid_piece(&e, &ant, 0, reserved);
    capture_wait(&e, &res);
    expect_ok(&res, 2, 1);
    out_read(e.path, &o);
    out_expect_kids(&o, good, 2);
    expect_answered(&o, &ant);
    expect_answered(&o, &cat);
    expect_dropped(&o, &res, &bee, reason);
    assert_int_equal(count_in(o.text, o.len, "BEE", 3), 0);
    assert_int_equal(res.bytes, o.len);
    out_free(&o);
    kid_free(&e, &ant);
    kid_free(&e, &bee);
    kid_free(&e, &cat);
    env_teardown(&e);
}

static void every_where(enum failure how, const char *reason)
{
    for (int w = 0; w < AT_COUNT; w++)
        one_fails(how, (enum where)w, reason);
}

static void test_pieces_out_of_order_drop_the_child(void **state)
{
    (void)state;
    every_where(FAIL_OUT_OF_ORDER, REASON_OUT_OF_ORDER);
}

static void test_a_size_other_than_announced_drops_the_child(void **state)
{
    (void)state;
    one_fails(FAIL_SIZE_SHORT, AT_RESERVED_MID, REASON_SIZE);
    one_fails(FAIL_SIZE_SHORT, AT_RESERVED_LAST, REASON_SIZE);
    every_where(FAIL_SIZE_CHANGED, REASON_SIZE);
}

static void test_a_profile_not_an_object_drops_the_child(void **state)
{
    (void)state;
    every_where(FAIL_NOT_OBJECT, REASON_NOT_OBJECT);
    one_fails(FAIL_EMPTY, AT_SPOOLED, REASON_NOT_OBJECT);
}

static void test_a_child_error_drops_the_child(void **state)
{
    (void)state;
    every_where(FAIL_ERROR, CHILD_ERROR);
}

static void test_a_child_gone_mid_stream_is_dropped(void **state)
{
    (void)state;
    every_where(FAIL_GONE, REASON_GONE);
    every_where(FAIL_GONE_IN_PIECE, REASON_GONE);
}

static void test_a_profile_too_large_drops_the_child(void **state)
{
    (void)state;
    every_where(FAIL_TOO_LARGE, REASON_TOO_LARGE);
}

/* ---- progress -------------------------------------------------------------------- */

static bool tool_has_result(void *arg)
{
    struct fx_client *cl = arg;

    return fx_client_count(cl, MSG(CAPTURE_RESULT)) > 0 || fx_client_count(cl, MSG(ERROR)) > 0 ||
           cl->closed;
}

static void tool_request(struct env *e, struct fx_client *tool, uint64_t id, const char *path,
                         uint32_t timeout_ms)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__CaptureRequest req = FLEETPROF__CAPTURE_REQUEST__INIT;

    req.id = id;
    req.output_path = (char *)path;
    req.timeout_ms = timeout_ms;
    env.msg_case = MSG(CAPTURE_REQUEST);
    env.capture_request = &req;
    assert_int_equal(ipc_conn_send(tool->ipc, &env), 0);
    assert_true(fx_run_until(&e->f, caught_up, tool));
}

struct polled {
    struct kid *k;
    size_t n;
};

static bool got_poll(void *arg)
{
    struct polled *p = arg;

    return fx_client_count(&p->k->cl, MSG(GET_GATHER_PROFILE_PROGRESS)) > p->n;
}

/* Waits for k's n-th progress poll (0-based): its id. */
static uint64_t wait_poll(struct env *e, struct kid *k, size_t n)
{
    struct polled p = {k, n};
    const Fleetprof__Envelope *env;

    assert_true(fx_run_until(&e->f, got_poll, &p));
    env = fx_client_got(&k->cl, MSG(GET_GATHER_PROFILE_PROGRESS), n);
    assert_int_equal(env->get_gather_profile_progress->gather_id, k->id);
    return env->get_gather_profile_progress->id;
}

static void send_progress(struct env *e, struct kid *k, uint64_t poll_id, uint32_t proportion)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GatherProgress m = FLEETPROF__GATHER_PROGRESS__INIT;

    m.request_id = poll_id;
    m.gather_id = k->id;
    m.proportion = proportion;
    m.location = (char *)"writing samples";
    env.msg_case = MSG(GATHER_PROGRESS);
    env.gather_progress = &m;
    kid_send(e, k, &env);
}

/* Every child timeout (the capture request's own here) the children not done are polled; the
 * first round counts as progress, later ones only if a child's progress value or its bytes
 * moved since the previous poll. One that keeps moving keeps the capture waiting, the silent
 * one with it; the first round where nothing moved gives up on both (noProgress), and the
 * file holds what arrived. */
static void test_progress_keeps_a_capture_waiting_until_it_stops(void **state)
{
    struct env e;
    struct kid ant = {0}, pro = {0}, mute = {0};
    struct kid *good[1] = {&ant};
    struct fx_client tool;
    const Fleetprof__CaptureResult *r;
    const Fleetprof__Envelope *env;
    const struct json_value *args = NULL;
    const char *message = NULL;
    bool progress_seen = false;
    struct out o;
    uint64_t poll;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS); /* the request's own timeout is the rounds' */
    kid_connect(&e, &ant, "ant", 2000);
    kid_connect(&e, &pro, "pro", 3000);
    kid_connect(&e, &mute, "mute", 1000);
    assert_int_equal(fx_client_open(&e.f, &tool), 0);
    tool_request(&e, &tool, 41, e.path, ROUND_MS);
    kid_wait_asked(&e, &ant);
    kid_wait_asked(&e, &pro);
    kid_wait_asked(&e, &mute);
    kid_piece(&e, &ant, 0, true);

    /* Round 1 (at once): polled; it says where it is. */
    poll = wait_poll(&e, &pro, 0);
    send_progress(&e, &pro, poll, 1u << 29); /* 25% */
    /* Round 2: it moved (its value): polled again; it answers with bytes instead. */
    poll = wait_poll(&e, &pro, 1);
    assert_non_null(e.f.d->gather);
    assert_int_equal(fx_logged(&e.f, "gave up"), 0);
    kid_piece(&e, &pro, 700, true);
    /* Round 3: it moved (its bytes): polled again; it says the same value as before. */
    poll = wait_poll(&e, &pro, 2);
    assert_non_null(e.f.d->gather);
    assert_int_equal(fx_logged(&e.f, "gave up"), 0);
    send_progress(&e, &pro, poll, 1u << 29);
    /* Round 4: nothing moved: both given up. */
    assert_true(fx_run_until(&e.f, tool_has_result, &tool));
    assert_int_equal(fx_client_count(&pro.cl, MSG(GET_GATHER_PROFILE_PROGRESS)), 3);
    assert_int_equal(fx_client_count(&mute.cl, MSG(GET_GATHER_PROFILE_PROGRESS)), 3);
    env = fx_client_got(&tool, MSG(CAPTURE_RESULT), 0);
    assert_non_null(env);
    r = env->capture_result;
    assert_int_equal(r->request_id, 41);
    assert_string_equal(r->error, "");
    assert_string_equal(r->path, e.path);
    assert_int_equal(r->processes, 1);
    assert_int_equal(r->given_up, 2);
    assert_int_equal(r->lost, 2);
    assert_int_equal(r->n_lost_processes, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_true(r->lost_processes[i]->pid == pro.pid || r->lost_processes[i]->pid == mute.pid);
        assert_string_equal(r->lost_processes[i]->reason, "no progress");
    }
    for (size_t i = 0; (env = fx_client_got(&tool, MSG(CAPTURE_PROGRESS), i)); i++)
        if (env->capture_progress->done == 1 && env->capture_progress->total == 3)
            progress_seen = true;
    assert_true(progress_seen); /* ant's answer was reported to the tool */

    out_read(e.path, &o);
    out_expect_kids(&o, good, 1); /* pro's 700 bytes are not in it */
    assert_int_equal(r->bytes, o.len);
    expect_answered(&o, &ant);
    assert_int_equal(ev_find(&o, "noProgress", pro.pid, &args, NULL), 1);
    assert_string_equal(ev_str(&o, args, "reason"), "no progress");
    assert_int_equal(ev_find(&o, "noProgress", mute.pid, NULL, NULL), 1);
    assert_int_equal(ev_find(&o, "noProgress", 0, NULL, NULL), 2);
    assert_int_equal(ev_find(&o, "answered", pro.pid, NULL, NULL), 0);
    /* Its progress, in the log with where it was. */
    assert_int_equal(ev_find(&o, "note", pro.pid, &args, &message), 2);
    assert_string_equal(message, "child {pid} ({name}) is at 25% ({how})");
    assert_string_equal(ev_str(&o, args, "how"), "writing samples");
    assert_int_equal(ev_find(&o, "note", 0, &args, NULL), 4); /* and "gave up", "complete" */
    assert_int_equal(fx_logged(&e.f, "gave up waiting: no progress for 250 ms from"), 1);
    out_free(&o);

    fx_client_close(&e.f, &tool);
    kid_free(&e, &ant);
    kid_free(&e, &pro);
    kid_free(&e, &mute);
    env_teardown(&e);
}

/* ---- exit profiles and departures ------------------------------------------------ */

static void send_exit_profile(struct env *e, struct kid *k, const char *json, size_t len)
{
    struct data d = {.id = 900 + (uint64_t)k->pid, .bytes = json, .n = len / 2, .exit = true};

    kid_send_data(e, k, &d); /* in two pieces */
    d.bytes = json + len / 2;
    d.offset = len / 2;
    d.n = len - len / 2;
    d.last = true;
    kid_send_data(e, k, &d);
}

/* This process as a child (fx_connect): its pid is the test's. */
static void kid_connect_own(struct env *e, struct kid *k, const char *name, size_t len)
{
    assert_non_null(fx_connect(&e->f, &k->cl, name));
    k->pid = getpid();
    k->own = true;
    (void)snprintf(k->name, sizeof(k->name), "%s", name);
    kid_answer_with(k, make_json(name, len), len);
    k->asked = 0;
}

#define ENDED_WITHOUT \
    "ended without sending an exit profile (killed, or it could not reach the daemon in time)"

/* Exit profiles the daemon kept since the last capture go into the file, each once, named as
 * answered; children that ended without one are named (dropped, with why), unless their pid
 * reported since (an exec'd process reconnects with its pid). The next capture has none of
 * them again. */
static void test_exit_profiles_and_departures_go_into_the_next_capture(void **state)
{
    struct env e;
    struct kid gone = {0}, gone2 = {0}, quit = {0}, live = {0}, back = {0};
    const struct json_value *args = NULL;
    const char *message = NULL;
    char *exit_json = make_json("exit-profile-of-gone", 2500);
    char *exit_json2 = make_json("exit-profile-of-gone2", 40 * KIB);
    const char *texts[4];
    size_t lens[4];
    struct result res;
    struct out o;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &gone, "gone", 100);
    kid_connect(&e, &gone2, "gone2", 100);
    kid_connect(&e, &quit, "quit", 100);
    kid_connect(&e, &live, "live", 1500);
    kid_connect_own(&e, &back, "back", 800);
    send_exit_profile(&e, &gone, exit_json, 2500);
    kid_close(&e, &gone); /* it exited with its profile sent */
    send_exit_profile(&e, &gone2, exit_json2, 40 * KIB);
    kid_close(&e, &gone2);
    kid_close(&e, &quit); /* it ended without one */
    kid_close(&e, &back); /* so did this one, then its pid came back */
    assert_non_null(fx_connect(&e.f, &back.cl, "back"));
    assert_int_equal(e.f.d->stats.exit_profiles, 2);
    assert_int_equal(e.f.d->departure_count, 2);

    capture(&e, &res);
    kid_wait_asked(&e, &live);
    kid_wait_asked(&e, &back);
    kid_piece(&e, &live, 1000, false);
    kid_piece(&e, &back, 0, false);
    kid_piece(&e, &live, 0, false);
    capture_wait(&e, &res);
    expect_ok(&res, 4, 1);
    assert_int_equal(res.progress.exit_profiles, 2);
    out_read(e.path, &o);
    texts[0] = exit_json;
    lens[0] = 2500;
    texts[1] = exit_json2;
    lens[1] = 40 * KIB;
    texts[2] = live.json;
    lens[2] = live.len;
    texts[3] = back.json;
    lens[3] = back.len;
    out_expect(&o, texts, lens, 4);
    expect_answered(&o, &live);
    expect_answered(&o, &back);
    assert_int_equal(ev_find(&o, "answered", gone.pid, &args, &message), 1);
    assert_string_equal(message, "added the exit profile of child {pid} ({name}), {bytes} bytes");
    assert_int_equal(ev_int(&o, args, "bytes"), 2500);
    assert_string_equal(ev_str(&o, args, "name"), "gone");
    assert_int_equal(ev_find(&o, "answered", gone2.pid, &args, NULL), 1);
    assert_int_equal(ev_int(&o, args, "bytes"), 40 * KIB);
    expect_dropped(&o, &res, &quit, ENDED_WITHOUT);
    assert_int_equal(ev_find(&o, "dropped", gone.pid, NULL, NULL), 0);
    assert_int_equal(ev_find(&o, "dropped", gone2.pid, NULL, NULL), 0);
    out_free(&o);
    assert_int_equal(e.f.d->stats.exit_profiles, 0);
    assert_int_equal(e.f.d->departure_count, 0);

    /* Taken: the next capture has only what is new. */
    kid_answer_with(&live, make_json("live-second", 900), 900);
    kid_answer_with(&back, make_json("back-second", 300), 300);
    capture(&e, &res);
    kid_wait_asked(&e, &live);
    kid_wait_asked(&e, &back);
    kid_piece(&e, &live, 0, true);
    kid_piece(&e, &back, 0, true);
    capture_wait(&e, &res);
    expect_ok(&res, 2, 0);
    out_read(e.path, &o);
    texts[0] = live.json;
    lens[0] = live.len;
    texts[1] = back.json;
    lens[1] = back.len;
    out_expect(&o, texts, lens, 2);
    assert_int_equal(ev_find(&o, "answered", gone.pid, NULL, NULL), 0);
    assert_int_equal(ev_find(&o, "dropped", quit.pid, NULL, NULL), 0);
    out_free(&o);

    free(exit_json);
    free(exit_json2);
    kid_free(&e, &gone);
    kid_free(&e, &gone2);
    kid_free(&e, &quit);
    kid_free(&e, &live);
    kid_free(&e, &back);
    env_teardown(&e);
}

/* Answers k's standing poll with an update: one chunk released, done now. */
static void send_update(struct env *e, struct kid *k)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ChunkManagerUpdate u = FLEETPROF__CHUNK_MANAGER_UPDATE__INIT;
    Fleetprof__ChunkMetadata chunk = FLEETPROF__CHUNK_METADATA__INIT, *chunks[1] = {&chunk};
    const Fleetprof__Envelope *poll =
            fx_client_got(&k->cl, MSG(AWAIT_NEXT_CHUNK_MANAGER_UPDATE), 0);

    assert_non_null(poll);
    chunk.done_ns = daemon__now_ns();
    chunk.bytes = 64 * KIB;
    u.request_id = poll->await_next_chunk_manager_update->id;
    u.unreleased_bytes = 64 * KIB;
    u.released_bytes = 64 * KIB;
    u.oldest_done_ns = chunk.done_ns;
    u.newly_released = chunks;
    u.n_newly_released = 1;
    u.standing = true;
    env.msg_case = MSG(CHUNK_MANAGER_UPDATE);
    env.chunk_manager_update = &u;
    kid_send(e, k, &env);
}

/* Exit profiles lost before they could be written are named, never silently missing: one the
 * global limit evicted between captures (a departure), and one that expired as the capture
 * began (older than any data still alive in the fleet: named through the daemon's hook, in
 * the running capture's log). */
static void test_exit_profiles_lost_to_the_limit_or_expired_are_named(void **state)
{
    struct daemon_options opt = {.chunk_bytes = 64 * KIB,
                                 .process_limit_bytes = 1024 * KIB,
                                 .global_limit_bytes = 192 * KIB,
                                 .child_timeout_ns = LONG_TIMEOUT_NS};
    struct env e;
    struct kid huge = {0}, old = {0}, live = {0};
    struct kid *one[1] = {&live};
    char *huge_json = make_json("too-large-for-the-limit", 300 * KIB);
    char *old_json = make_json("older-than-the-fleet", 3000);
    const struct json_value *args = NULL;
    const char *message = NULL;
    struct result res;
    struct out o;

    (void)state;
    env_setup_with(&e, &opt);
    kid_connect(&e, &huge, "huge", 100);
    kid_connect(&e, &old, "old", 100);
    kid_connect(&e, &live, "live", 1200);
    send_exit_profile(&e, &huge, huge_json, 300 * KIB); /* beyond the limit: evicted at once */
    kid_close(&e, &huge);
    assert_int_equal(e.f.d->stats.exit_profiles, 0);
    send_exit_profile(&e, &old, old_json, 3000);
    kid_close(&e, &old);
    assert_int_equal(e.f.d->stats.exit_profiles, 1);
    send_update(&e, &live); /* live's oldest data is younger than old's profile */

    capture(&e, &res);
    kid_wait_asked(&e, &live);
    kid_piece(&e, &live, 0, true);
    capture_wait(&e, &res);
    expect_ok(&res, 1, 2);
    out_read(e.path, &o);
    out_expect_kids(&o, one, 1);
    assert_int_equal(count_in(o.text, o.len, "older-than-the-fleet", 20), 0);
    assert_int_equal(ev_find(&o, "dropped", huge.pid, &args, &message), 1);
    assert_string_equal(message, "exit profile of child {pid} ({name}) {reason}");
    assert_string_equal(ev_str(&o, args, "reason"), "evicted by the global memory limit");
    assert_int_equal(ev_find(&o, "dropped", old.pid, &args, &message), 1);
    assert_string_equal(message, "exit profile of child {pid} ({name}) {reason}");
    assert_string_equal(ev_str(&o, args, "reason"),
                        "expired (older than any data still alive in the fleet)");
    assert_int_equal(ev_find(&o, "answered", old.pid, NULL, NULL), 0);
    out_free(&o);
    assert_int_equal(e.f.d->departure_count, 0); /* named in the capture, not kept */

    free(huge_json);
    free(old_json);
    kid_free(&e, &huge);
    kid_free(&e, &old);
    kid_free(&e, &live);
    env_teardown(&e);
}

/* A child that exits while it is being asked: its exit profile is its answer, in place of what
 * it sent so far (reserved, or streaming as the current child). */
static void test_an_exit_during_the_capture_is_the_answer(void **state)
{
    (void)state;
    for (int reserved = 0; reserved < 2; reserved++) {
        struct env e;
        struct kid ant = {0}, ex = {0};
        const struct json_value *args = NULL;
        const char *message = NULL;
        char *exit_json = make_json("EXIT-during-capture", 3100);
        const char *texts[2];
        size_t lens[2];
        struct result res;
        struct out o;

        env_setup(&e, LONG_TIMEOUT_NS);
        kid_connect(&e, &ex, "ex", 5000);
        kid_connect(&e, &ant, "ant", 1800);
        capture(&e, &res);
        kid_wait_asked(&e, &ex);
        kid_wait_asked(&e, &ant);
        kid_piece(&e, &ex, 2000, reserved);
        kid_piece(&e, &ant, 600, reserved);
        send_exit_profile(&e, &ex, exit_json, 3100);
        kid_close(&e, &ex);
        kid_piece(&e, &ant, 0, reserved);
        capture_wait(&e, &res);
        expect_ok(&res, 2, 0);
        out_read(e.path, &o);
        texts[0] = exit_json;
        lens[0] = 3100;
        texts[1] = ant.json;
        lens[1] = ant.len;
        out_expect(&o, texts, lens, 2); /* none of the 2000 bytes it streamed before */
        expect_answered(&o, &ant);
        assert_int_equal(ev_find(&o, "answered", ex.pid, &args, &message), 1);
        assert_string_equal(message, "child {pid} ({name}) exited during the capture: its exit "
                                     "profile is its answer, {bytes} bytes");
        assert_int_equal(ev_int(&o, args, "bytes"), 3100);
        assert_int_equal(ev_find(&o, "dropped", 0, NULL, NULL), 0);
        out_free(&o);
        free(exit_json);
        kid_free(&e, &ant);
        kid_free(&e, &ex);
        env_teardown(&e);
    }
}

/* An exit profile that arrives as a capture's answer must pass the check every answer passes:
 * a JSON object, else the child is dropped (its reason says it is not a JSON object), what it
 * streamed before is taken back, and the file stays valid. (It went into the file as it came
 * until 1e51c5c: "[...]" became a process, an empty one a stray comma.) */
static void test_an_exit_answer_that_is_not_an_object_is_dropped(void **state)
{
    static const char *const bad[2] = {"[\"EXIT\", \"not an object\"]", ""};

    (void)state;
    for (int i = 0; i < 2; i++) {
        struct env e;
        struct kid ant = {0}, ex = {0};
        struct kid *good[1] = {&ant};
        const struct json_value *args = NULL;
        struct result res;
        struct out o;

        env_setup(&e, LONG_TIMEOUT_NS);
        kid_connect(&e, &ant, "ant", 1800);
        kid_connect(&e, &ex, "ex", 5000);
        capture(&e, &res);
        kid_wait_asked(&e, &ant);
        kid_wait_asked(&e, &ex);
        kid_piece(&e, &ant, 600, true);
        kid_piece(&e, &ex, 1000, i == 0); /* reserved, or current */
        send_exit_profile(&e, &ex, bad[i], strlen(bad[i]));
        kid_close(&e, &ex);
        kid_piece(&e, &ant, 0, true);
        capture_wait(&e, &res);
        expect_ok(&res, 1, 1);
        out_read(e.path, &o);
        out_expect_kids(&o, good, 1); /* nor the 1000 bytes it streamed before */
        assert_int_equal(count_in(o.text, o.len, "EXIT", 4), 0);
        assert_int_equal(ev_find(&o, "dropped", ex.pid, &args, NULL), 1);
        assert_non_null(strstr(ev_str(&o, args, "reason"), "not a JSON object"));
        assert_int_equal(ev_find(&o, "answered", ex.pid, NULL, NULL), 0);
        assert_int_equal(res.lost_listed, 1);
        assert_int_equal(res.lost_list[0].pid, ex.pid);
        out_free(&o);
        kid_free(&e, &ant);
        kid_free(&e, &ex);
        env_teardown(&e);
    }
}

/* ---- the file -------------------------------------------------------------------- */

enum write_fail {
    WF_RESERVED, /* written in place: pwrite */
    WF_CURRENT,  /* appended */
    WF_SPOOL,    /* its spool: write */
};

/* A file that cannot be written (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG) fails the capture with
 * the message; the previous output stays as it was, no temporary file is left, and what the
 * capture took (exit profiles, departures) is kept for the next one, which has it all. */
static void write_fails(enum write_fail wf)
{
    static const char previous[] = "{\"the previous capture\": true}\n";
    struct env e;
    struct kid gone = {0}, quit = {0}, ant = {0}, big = {0}, leaver = {0};
    struct rlimit saved, small;
    void (*saved_sig)(int);
    char *exit_json = make_json("exit-kept-across-a-failure", 3000);
    char want[600], names[200], *text;
    const char *texts[3];
    size_t lens[3], len;
    struct result res;
    struct out o;

    print_message("# the write fails in %s\n", wf == WF_RESERVED  ? "a reserved element"
                                               : wf == WF_CURRENT ? "the current child's"
                                                                  : "a spool");
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &gone, "gone", 100);
    kid_connect(&e, &quit, "quit", 100);
    kid_connect(&e, &ant, "ant", 1000);
    kid_connect(&e, &big, "big", 400 * KIB);
    kid_connect(&e, &leaver, "leaver", 100);
    send_exit_profile(&e, &gone, exit_json, 3000);
    kid_close(&e, &gone);
    kid_close(&e, &quit);
    write_file(e.path, previous);

    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    small = saved;
    small.rlim_cur = 128 * KIB;
    saved_sig = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_wait_asked(&e, &big);
    kid_wait_asked(&e, &leaver);
    kid_close(&e, &leaver); /* it ends during the capture that fails */
    if (wf == WF_SPOOL)
        kid_piece(&e, &ant, 300, false); /* ant is current: big spools */
    for (int i = 0; i < 5 && !res.done; i++)
        kid_piece(&e, &big, 80 * KIB, wf == WF_RESERVED);
    capture_wait(&e, &res);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
    (void)signal(SIGXFSZ, saved_sig);

    assert_int_equal(res.error, -EFBIG);
    (void)snprintf(want, sizeof(want), "cannot write %s%s: %s",
                   wf == WF_SPOOL ? "a spool file next to " : "", e.path, strerror(EFBIG));
    assert_string_equal(res.message, want);
    assert_int_equal(res.bytes, 0);
    text = read_all(e.path, &len);
    assert_int_equal(len, sizeof(previous) - 1);
    assert_memory_equal(text, previous, len);
    free(text);
    dir_names(e.out_dir, names, sizeof(names));
    assert_string_equal(names, "fleet.json");
    assert_string_equal(res.names_at_done, "fleet.json"); /* gone before the caller heard */
    (void)snprintf(want, sizeof(want), "capture failed: %s", res.message);
    assert_int_equal(fx_logged_at(&e.f, DAEMON_LOG_WARNING, want), 1);
    assert_int_equal(fx_logged(&e.f, "the capture failed: 1 exit profiles kept for the next"), 1);
    assert_int_equal(e.f.d->stats.exit_profiles, 1);
    assert_int_equal(e.f.d->departure_count, 2); /* quit's, given back, and leaver's */

    /* big sends on: late, ignored. */
    while (big.sent < big.len)
        kid_piece(&e, &big, 80 * KIB, wf == WF_RESERVED);

    /* The next capture has everything the failed one took. */
    kid_answer_with(&big, make_json("big-second", 5000), 5000);
    kid_answer_with(&ant, make_json("ant-second", 700), 700);
    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_wait_asked(&e, &big);
    kid_piece(&e, &big, 0, true);
    kid_piece(&e, &ant, 0, false);
    capture_wait(&e, &res);
    expect_ok(&res, 3, 2);
    out_read(e.path, &o);
    texts[0] = exit_json;
    lens[0] = 3000;
    texts[1] = big.json;
    lens[1] = big.len;
    texts[2] = ant.json;
    lens[2] = ant.len;
    out_expect(&o, texts, lens, 3);
    assert_int_equal(ev_find(&o, "answered", gone.pid, NULL, NULL), 1);
    expect_dropped(&o, &res, &quit, ENDED_WITHOUT);
    expect_dropped(&o, &res, &leaver, ENDED_WITHOUT);
    out_free(&o);
    dir_names(e.out_dir, names, sizeof(names));
    assert_string_equal(names, "fleet.json");

    free(exit_json);
    kid_free(&e, &gone);
    kid_free(&e, &quit);
    kid_free(&e, &ant);
    kid_free(&e, &big);
    kid_free(&e, &leaver);
    env_teardown(&e);
}

static void test_a_write_error_fails_the_capture_and_keeps_the_previous_file(void **state)
{
    (void)state;
    write_fails(WF_RESERVED);
    write_fails(WF_CURRENT);
    write_fails(WF_SPOOL);
}

/* The stored exit profiles cannot all be written (the second is beyond RLIMIT_FSIZE): the
 * capture fails as it starts, before anyone is asked, and every exit profile is kept for the
 * next one, in order, the one written before the failure included. */
static void test_a_write_error_among_the_exit_profiles_keeps_them_all(void **state)
{
    struct env e;
    struct kid one = {0}, two = {0}, ant = {0};
    char *first = make_json("exit-written-before-the-failure", 2000);
    char *second = make_json("exit-beyond-the-limit", 200 * KIB);
    struct rlimit saved, small;
    void (*saved_sig)(int);
    const char *texts[3];
    size_t lens[3];
    char names[200];
    struct result res;
    struct out o;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &one, "one", 100);
    kid_connect(&e, &two, "two", 100);
    kid_connect(&e, &ant, "ant", 700);
    send_exit_profile(&e, &one, first, 2000);
    kid_close(&e, &one);
    send_exit_profile(&e, &two, second, 200 * KIB);
    kid_close(&e, &two);
    assert_int_equal(e.f.d->stats.exit_profiles, 2);

    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    small = saved;
    small.rlim_cur = 128 * KIB;
    saved_sig = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    capture(&e, &res);
    assert_true(res.done); /* at once */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
    (void)signal(SIGXFSZ, saved_sig);
    capture_wait(&e, &res);
    assert_int_equal(res.error, -EFBIG);
    assert_string_equal(res.names_at_done, "");
    dir_names(e.out_dir, names, sizeof(names));
    assert_string_equal(names, "");
    fx_run_nowait(&e.f);
    assert_int_equal(fx_client_count(&ant.cl, MSG(GATHER_PROFILE)), 0);
    assert_int_equal(e.f.d->stats.exit_profiles, 2);
    assert_int_equal(e.f.d->stats.exit_profile_bytes, 2000 + 200 * KIB);
    assert_int_equal(fx_logged(&e.f, "the capture failed: 1 exit profiles kept for the next"), 1);

    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_piece(&e, &ant, 0, true);
    capture_wait(&e, &res);
    expect_ok(&res, 3, 0);
    out_read(e.path, &o);
    texts[0] = first;
    lens[0] = 2000;
    texts[1] = second;
    lens[1] = 200 * KIB;
    texts[2] = ant.json;
    lens[2] = ant.len;
    out_expect(&o, texts, lens, 3);
    /* In the order they were received. */
    assert_true(memmem(o.text, o.len, first, 2000) < memmem(o.text, o.len, second, 200 * KIB));
    assert_int_equal(ev_find(&o, "answered", one.pid, NULL, NULL), 1);
    assert_int_equal(ev_find(&o, "answered", two.pid, NULL, NULL), 1);
    out_free(&o);
    assert_int_equal(e.f.d->stats.exit_profiles, 0);

    free(first);
    free(second);
    kid_free(&e, &one);
    kid_free(&e, &two);
    kid_free(&e, &ant);
    env_teardown(&e);
}

/* Nothing to write (nobody to ask, or nobody answered, and no exit profile): the capture
 * fails, the previous output stays. */
static void test_nothing_to_write_fails_and_keeps_the_previous_file(void **state)
{
    static const char previous[] = "{}";
    struct env e;
    struct kid bee = {0};
    struct result res;
    char names[200], *text;
    size_t len;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    write_file(e.path, previous);
    for (int with_child = 0; with_child < 2; with_child++) {
        if (with_child) {
            struct data d;

            kid_connect(&e, &bee, "bee", 100);
            capture(&e, &res);
            kid_wait_asked(&e, &bee);
            d = (struct data){.id = bee.id, .last = true, .error = CHILD_ERROR};
            kid_send_data(&e, &bee, &d);
        } else {
            capture(&e, &res);
        }
        capture_wait(&e, &res);
        assert_int_equal(res.error, -ENODATA);
        assert_string_equal(res.message, "nothing to write: no profiled process answered and no "
                                         "exit profile was stored");
        assert_int_equal(res.processes, 0);
        assert_int_equal(res.lost, (uint32_t)with_child);
        text = read_all(e.path, &len);
        assert_int_equal(len, 2);
        assert_memory_equal(text, previous, 2);
        free(text);
        dir_names(e.out_dir, names, sizeof(names));
        assert_string_equal(names, "fleet.json");
        assert_string_equal(res.names_at_done, "fleet.json");
    }
    kid_free(&e, &bee);
    env_teardown(&e);
}

/* A spool that cannot be made (no descriptor left: RLIMIT_NOFILE) fails only the child whose
 * bytes it was for: dropped with why, the capture goes on. Its exit profile, arriving as its
 * answer while another child streams, the same. */
static void test_a_child_without_a_spool_file_is_dropped_alone(void **state)
{
    struct env e;
    struct kid ant = {0}, bee = {0}, ex = {0};
    struct kid *one[1] = {&ant};
    char *exit_json = make_json("EXIT-without-a-spool", 2000);
    const struct json_value *args = NULL;
    const char *message = NULL;
    struct rlimit saved, none;
    struct result res;
    struct out o;
    char names[200];
    int probe;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &ant, "ant", 3000);
    kid_connect(&e, &bee, "bee", 2000);
    kid_connect(&e, &ex, "ex", 2000);
    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_wait_asked(&e, &bee);
    kid_wait_asked(&e, &ex);
    kid_piece(&e, &ant, 1000, false); /* ant is current: the others need spools */

    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    probe = open("/dev/null", O_RDONLY | O_CLOEXEC); /* the lowest free descriptor */
    assert_true(probe >= 0);
    (void)close(probe);
    none = saved;
    none.rlim_cur = (rlim_t)probe;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &none), 0);
    kid_piece(&e, &bee, 500, false);
    send_exit_profile(&e, &ex, exit_json, 2000);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);

    kid_close(&e, &ex);
    kid_piece(&e, &bee, 0, false); /* late: it was dropped */
    kid_piece(&e, &ant, 0, false);
    capture_wait(&e, &res);
    expect_ok(&res, 1, 2);
    out_read(e.path, &o);
    out_expect_kids(&o, one, 1);
    expect_dropped(&o, &res, &bee, strerror(EMFILE));
    assert_int_equal(ev_find(&o, "dropped", bee.pid, NULL, &message), 1);
    assert_string_equal(message, "child {pid} ({name}) dropped: no spool file for its profile: "
                                 "{reason}");
    expect_dropped(&o, &res, &ex, strerror(EMFILE));
    assert_int_equal(ev_find(&o, "dropped", ex.pid, &args, &message), 1);
    assert_string_equal(message, "child {pid} ({name}) dropped: no spool file for its exit "
                                 "profile: {reason}");
    assert_int_equal(count_in(o.text, o.len, "EXIT", 4), 0);
    out_free(&o);
    dir_names(e.out_dir, names, sizeof(names));
    assert_string_equal(names, "fleet.json");

    free(exit_json);
    kid_free(&e, &ant);
    kid_free(&e, &bee);
    kid_free(&e, &ex);
    env_teardown(&e);
}

/* An output that cannot be created fails the capture at once, with why, before anyone is
 * asked: the exit profiles and departures it would have taken stay for the next one. */
static void test_an_output_that_cannot_be_created_takes_nothing(void **state)
{
    struct env e;
    struct kid gone = {0}, quit = {0}, ant = {0};
    char *exit_json = make_json("exit-kept-for-later", 1500);
    char bad[400], want[600];
    const char *texts[2];
    size_t lens[2];
    struct result res;
    struct out o;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &gone, "gone", 100);
    kid_connect(&e, &quit, "quit", 100);
    kid_connect(&e, &ant, "ant", 900);
    send_exit_profile(&e, &gone, exit_json, 1500);
    kid_close(&e, &gone);
    kid_close(&e, &quit);
    (void)snprintf(bad, sizeof(bad), "%s/no-such-dir/fleet.json", e.out_dir);
    res = (struct result){.e = &e};
    assert_int_equal(daemon_capture(e.f.d, bad, NULL, NULL, on_done, &res), 0);
    capture_wait(&e, &res);
    assert_int_equal(res.error, -ENOENT);
    (void)snprintf(want, sizeof(want), "cannot create a file next to %s: %s", bad,
                   strerror(ENOENT));
    assert_string_equal(res.message, want);
    fx_run_nowait(&e.f);
    assert_int_equal(fx_client_count(&ant.cl, MSG(GATHER_PROFILE)), 0);
    assert_int_equal(e.f.d->stats.exit_profiles, 1);
    assert_int_equal(e.f.d->departure_count, 1);

    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_piece(&e, &ant, 0, true);
    capture_wait(&e, &res);
    expect_ok(&res, 2, 1);
    out_read(e.path, &o);
    texts[0] = exit_json;
    lens[0] = 1500;
    texts[1] = ant.json;
    lens[1] = ant.len;
    out_expect(&o, texts, lens, 2);
    expect_dropped(&o, &res, &quit, ENDED_WITHOUT);
    out_free(&o);

    free(exit_json);
    kid_free(&e, &gone);
    kid_free(&e, &quit);
    kid_free(&e, &ant);
    env_teardown(&e);
}

/* ---- late pieces ----------------------------------------------------------------- */

/* Pieces of a capture that ended (small, large, a last one) are dropped without harm: the file
 * written stays as it is, and the next capture gets only its own answer. */
static void test_late_pieces_are_dropped_without_harm(void **state)
{
    struct env e;
    struct kid ant = {0}, bee = {0};
    struct kid *both[2] = {&ant, &bee};
    char *first, *old_json, late[80];
    size_t first_len, len;
    uint64_t old_id;
    struct result res;
    struct data d;
    struct out o;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &ant, "ant", 120 * KIB);
    kid_connect(&e, &bee, "bee", 900);
    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_wait_asked(&e, &bee);
    kid_piece(&e, &ant, 40 * KIB, true);
    kid_piece(&e, &bee, 0, false);
    kid_piece(&e, &ant, 0, true);
    capture_wait(&e, &res);
    expect_ok(&res, 2, 0);
    first = read_all(e.path, &first_len);
    old_id = ant.id;
    (void)snprintf(late, sizeof(late), "late profile data from child %d dropped", (int)ant.pid);

    /* After it: again the whole profile, small then large pieces, the last one too. */
    ant.sent = 0;
    kid_piece(&e, &ant, 1000, true);
    kid_piece(&e, &ant, 60 * KIB, true);
    kid_piece(&e, &ant, 0, true);
    d = (struct data){.id = old_id, .last = true, .error = CHILD_ERROR};
    kid_send_data(&e, &ant, &d);
    assert_int_equal(fx_logged(&e.f, late), 4);
    assert_null(e.f.d->gather);
    {
        char *now = read_all(e.path, &len);

        assert_int_equal(len, first_len);
        assert_memory_equal(now, first, len);
        free(now);
    }

    /* During the next capture: the old capture's pieces are still late, its own go in. */
    old_json = ant.json;
    ant.json = NULL;
    kid_answer_with(&ant, make_json("ant-second", 30 * KIB), 30 * KIB);
    capture(&e, &res);
    kid_wait_asked(&e, &ant);
    kid_wait_asked(&e, &bee);
    assert_true(ant.id != old_id);
    d = (struct data){.id = old_id, .bytes = old_json, .n = 500, .total = 120 * KIB};
    kid_send_data(&e, &ant, &d);
    d = (struct data){.id = old_id, .bytes = old_json, .n = 20 * KIB, .total = 120 * KIB};
    kid_send_big(&e, &ant, &d, d.n);
    assert_int_equal(fx_logged(&e.f, late), 6);
    kid_piece(&e, &ant, 20 * KIB, true);
    kid_piece(&e, &bee, 0, true);
    kid_piece(&e, &ant, 0, true);
    capture_wait(&e, &res);
    expect_ok(&res, 2, 0);
    out_read(e.path, &o);
    out_expect_kids(&o, both, 2);
    assert_int_equal(count_in(o.text, o.len, old_json, 500), 0);
    out_free(&o);
    free(old_json);
    free(first);
    kid_free(&e, &ant);
    kid_free(&e, &bee);
    env_teardown(&e);
}

/* ---- requests -------------------------------------------------------------------- */

static bool no_capture(void *arg)
{
    return !((struct daemon *)arg)->gather;
}

static bool tool_has_error(void *arg)
{
    return fx_client_count(arg, MSG(ERROR)) > 0;
}

/* A tool's request: a relative path and a second capture are refused with why; a tool that
 * goes away does not stop its capture. */
static void test_capture_requests_from_a_tool(void **state)
{
    struct env e;
    struct kid ant = {0};
    struct kid *one[1] = {&ant};
    struct fx_client tool, other;
    const Fleetprof__Envelope *env;
    struct result res;
    struct out o;

    (void)state;
    env_setup(&e, LONG_TIMEOUT_NS);
    kid_connect(&e, &ant, "ant", 1500);
    assert_int_equal(fx_client_open(&e.f, &tool), 0);
    tool_request(&e, &tool, 7, "relative/fleet.json", 0);
    assert_true(fx_run_until(&e.f, tool_has_error, &tool));
    env = fx_client_got(&tool, MSG(ERROR), 0);
    assert_int_equal(env->error->request_id, 7);
    assert_int_equal(env->error->code, EINVAL);
    assert_string_equal(env->error->message, "the output path must be absolute");
    assert_null(e.f.d->gather);

    tool_request(&e, &tool, 8, e.path, 0);
    kid_wait_asked(&e, &ant);
    assert_non_null(e.f.d->gather);
    assert_int_equal(fx_client_open(&e.f, &other), 0);
    tool_request(&e, &other, 9, e.path, 0);
    assert_true(fx_run_until(&e.f, tool_has_error, &other));
    env = fx_client_got(&other, MSG(ERROR), 0);
    assert_int_equal(env->error->request_id, 9);
    assert_int_equal(env->error->code, EBUSY);
    assert_string_equal(env->error->message, "a capture is already running");
    assert_int_equal(daemon_capture(e.f.d, e.path, NULL, NULL, on_done, &res), -EBUSY);
    fx_client_close(&e.f, &other);

    /* The tool goes; its capture goes on and is written. */
    fx_client_close(&e.f, &tool);
    assert_non_null(e.f.d->gather);
    kid_piece(&e, &ant, 0, true);
    assert_true(fx_run_until(&e.f, no_capture, e.f.d));
    out_read(e.path, &o);
    out_expect_kids(&o, one, 1);
    expect_answered(&o, &ant);
    assert_string_equal(
            json_value_string(
                    o.doc,
                    json_object_get(o.doc, json_object_get(o.doc, o.root, "meta"), "product"),
                    NULL),
            "fleetprof capture");
    out_free(&o);
    assert_int_equal(fx_logged(&e.f, "capture written to"), 1);
    kid_free(&e, &ant);
    env_teardown(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_three_children_interleaved_with_totals),
            cmocka_unit_test(test_three_children_interleaved_without_totals),
            cmocka_unit_test(test_three_children_mixed_totals),
            cmocka_unit_test(test_large_pieces_interleaved),
            cmocka_unit_test(test_three_children_stream_at_once),
            cmocka_unit_test(test_any_interleaving_keeps_every_answer),
            cmocka_unit_test(test_pieces_out_of_order_drop_the_child),
            cmocka_unit_test(test_a_size_other_than_announced_drops_the_child),
            cmocka_unit_test(test_a_profile_not_an_object_drops_the_child),
            cmocka_unit_test(test_a_child_error_drops_the_child),
            cmocka_unit_test(test_a_child_gone_mid_stream_is_dropped),
            cmocka_unit_test(test_a_profile_too_large_drops_the_child),
            cmocka_unit_test(test_progress_keeps_a_capture_waiting_until_it_stops),
            cmocka_unit_test(test_exit_profiles_and_departures_go_into_the_next_capture),
            cmocka_unit_test(test_exit_profiles_lost_to_the_limit_or_expired_are_named),
            cmocka_unit_test(test_an_exit_during_the_capture_is_the_answer),
            cmocka_unit_test(test_an_exit_answer_that_is_not_an_object_is_dropped),
            cmocka_unit_test(test_a_write_error_fails_the_capture_and_keeps_the_previous_file),
            cmocka_unit_test(test_a_write_error_among_the_exit_profiles_keeps_them_all),
            cmocka_unit_test(test_nothing_to_write_fails_and_keeps_the_previous_file),
            cmocka_unit_test(test_a_child_without_a_spool_file_is_dropped_alone),
            cmocka_unit_test(test_an_output_that_cannot_be_created_takes_nothing),
            cmocka_unit_test(test_late_pieces_are_dropped_without_harm),
            cmocka_unit_test(test_capture_requests_from_a_tool),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
