/* ipc/envelope.c - decoding an envelope from a peer with bounded memory, and validating it.
 *
 * Three layers, each cheap: protobuf-c unpacks with an allocator that has a budget; a walk
 * of the wire bytes against the message descriptors checks every string field for NUL and
 * UTF-8 (after unpacking, a C string no longer knows its wire length); then the semantic
 * checks of ipc_envelope_validate(). The daemon relies on all three for hostile children.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/leb128.h"
#include "common/macros.h"
#include "ipc/ipc-internal.h"
#include "ipc/ipc.h"

/* Every allocation carries its size in front, so frees can be accounted for. 16 bytes keep
 * the max_align_t alignment protobuf-c expects of malloc. */
#define ALLOC_HEADER_BYTES 16
/* Nesting of our messages is at most 5 (Envelope > GroupsReport > FleetGroup > GroupProcess >
 * GroupTotals). */
#define WIRE_MAX_DEPTH     8
#define CHUNK_MIN_BYTES    ((uint64_t)64 << 10)

struct decode_budget {
    size_t used;   /* bytes currently allocated, headers included */
    size_t max;    /* limit on used */
    bool exceeded; /* an allocation was refused */
};

static void *budget_alloc(void *allocator_data, size_t size)
{
    struct decode_budget *b = allocator_data;
    unsigned char *base;

    if (size > SIZE_MAX - ALLOC_HEADER_BYTES)
        return NULL;
    if (b) {
        if (size + ALLOC_HEADER_BYTES > b->max - b->used) {
            b->exceeded = true;
            return NULL;
        }
        b->used += size + ALLOC_HEADER_BYTES;
    }
    base = malloc(size + ALLOC_HEADER_BYTES);
    if (!base) {
        if (b)
            b->used -= size + ALLOC_HEADER_BYTES;
        return NULL;
    }
    memcpy(base, &size, sizeof(size));
    return base + ALLOC_HEADER_BYTES;
}

static void budget_free(void *allocator_data, void *ptr)
{
    struct decode_budget *b = allocator_data;
    unsigned char *base;
    size_t size;

    if (!ptr)
        return;
    base = (unsigned char *)ptr - ALLOC_HEADER_BYTES;
    memcpy(&size, base, sizeof(size));
    if (b)
        b->used -= size + ALLOC_HEADER_BYTES;
    free(base);
}

/* Frees envelopes after decoding is over: no budget to account to. */
static ProtobufCAllocator free_allocator = {
        .alloc = budget_alloc,
        .free = budget_free,
        .allocator_data = NULL,
};

int ipc__text_valid(const uint8_t *p, size_t len)
{
    size_t i = 0;

    while (i < len) {
        uint8_t c = p[i];
        uint32_t cp;
        size_t n;

        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1fu;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0fu;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07u;
        } else {
            return 0;
        }
        if (len - i - 1 < n)
            return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xc0u) != 0x80u)
                return 0;
            cp = (cp << 6) | (p[i + k] & 0x3fu);
        }
        /* Overlong forms, surrogates, beyond U+10FFFF. */
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += n + 1;
    }
    return 1;
}

/* Walks one message's wire bytes; checks string fields, recurses into message fields. */
static int check_wire(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t len,
                      unsigned depth, const char **ret_reason)
{
    size_t off = 0;

    if (depth > WIRE_MAX_DEPTH) {
        *ret_reason = "messages nested too deeply";
        return -EBADMSG;
    }
    while (off < len) {
        const ProtobufCFieldDescriptor *field = NULL;
        uint64_t key, value;
        ssize_t n = buf_uleb128_decode(p + off, len - off, &key);

        if (n < 0)
            goto bad;
        off += (size_t)n;
        /* Field 0 does not exist; protobuf-c rejects it only in a one-byte tag, keeps it as
         * an unknown field otherwise and then re-encodes bytes it refuses (found by
         * fuzz-ipc-envelope). */
        if ((key >> 3) == 0)
            goto bad;
        if ((key >> 3) <= UINT32_MAX)
            field = protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3));
        switch (key & 7u) {
        case 0: /* varint */
            n = buf_uleb128_decode(p + off, len - off, &value);
            if (n < 0)
                goto bad;
            off += (size_t)n;
            break;
        case 1: /* 64-bit */
            if (len - off < 8)
                goto bad;
            off += 8;
            break;
        case 5: /* 32-bit */
            if (len - off < 4)
                goto bad;
            off += 4;
            break;
        case 2: /* length-delimited */
            n = buf_uleb128_decode(p + off, len - off, &value);
            if (n < 0)
                goto bad;
            off += (size_t)n;
            if (value > len - off)
                goto bad;
            if (field && field->type == PROTOBUF_C_TYPE_STRING &&
                !ipc__text_valid(p + off, (size_t)value)) {
                *ret_reason = "string field with NUL or invalid UTF-8";
                return -EBADMSG;
            }
            if (field && field->type == PROTOBUF_C_TYPE_MESSAGE) {
                int r = check_wire(field->descriptor, p + off, (size_t)value, depth + 1,
                                   ret_reason);

                if (r < 0)
                    return r;
            }
            off += (size_t)value;
            break;
        default: /* groups and reserved wire types: protobuf-c refuses them too */
            goto bad;
        }
    }
    return 0;

bad:
    *ret_reason = "undecodable envelope";
    return -EBADMSG;
}

/* Unpacks, checks the wire and validates with allocator, whose data is budget; on failure
 * frees what was unpacked with free_with. */
static int decode_with(const uint8_t *data, size_t len, ProtobufCAllocator *allocator,
                       struct decode_budget *budget, ProtobufCAllocator *free_with,
                       Fleetprof__Envelope **ret_env, const char **ret_reason)
{
    const char *reason = "undecodable envelope";
    Fleetprof__Envelope *env;
    int r;

    if (!ret_env || (!data && len))
        return -EINVAL;
    env = fleetprof__envelope__unpack(allocator, len, data);
    if (!env) {
        r = -EBADMSG;
        if (budget->exceeded)
            reason = "envelope needs more memory than the decode budget";
        goto err;
    }
    r = check_wire(&fleetprof__envelope__descriptor, data, len, 0, &reason);
    if (r < 0)
        goto err_free;
    r = ipc_envelope_validate(env, &reason);
    if (r < 0)
        goto err_free;
    *ret_env = env;
    return 0;

err_free:
    fleetprof__envelope__free_unpacked(env, free_with);
err:
    if (ret_reason)
        *ret_reason = reason;
    return r;
}

int ipc_envelope_decode(const uint8_t *data, size_t len, size_t max_decode_bytes,
                        Fleetprof__Envelope **ret_env, const char **ret_reason)
{
    struct decode_budget budget = {
            .used = 0,
            .max = max_decode_bytes ? max_decode_bytes
                                    : IPC_FRAME_MAX_BYTES_DEFAULT * IPC_DECODE_BUDGET_FACTOR,
    };
    ProtobufCAllocator allocator = {
            .alloc = budget_alloc,
            .free = budget_free,
            .allocator_data = &budget,
    };

    return decode_with(data, len, &allocator, &budget, &free_allocator, ret_env, ret_reason);
}

/* ---- the reader's decode arena ----------------------------------------------------------- */

/* A message that fits (every small one: a chunk-manager update with a few dozen chunks, a
 * poll, an ack) is unpacked into one block kept for the reader's life, with a bump pointer:
 * no malloc or free per message. What does not fit is malloc'd as before, each allocation
 * linked in a list freed at the reset. The budget is charged exactly as by budget_alloc (the
 * size plus a 16-byte header per allocation), so the same envelopes are refused. */
#define ARENA_BLOCK_BYTES ((size_t)2048)

struct ipc__arena {
    struct decode_budget budget;
    size_t block_used; /* bytes handed out from block */
    void *overflow;    /* allocations beyond block, chained by header */
    _Alignas(16) uint8_t block[ARENA_BLOCK_BYTES];
};

static void *arena_alloc(void *allocator_data, size_t size)
{
    struct ipc__arena *a = allocator_data;
    size_t rounded = (size + 15u) & ~(size_t)15u;
    unsigned char *base;

    if (size > SIZE_MAX - ALLOC_HEADER_BYTES - 15u)
        return NULL;
    if (size + ALLOC_HEADER_BYTES > a->budget.max - a->budget.used) {
        a->budget.exceeded = true;
        return NULL;
    }
    a->budget.used += size + ALLOC_HEADER_BYTES;
    if (rounded <= ARENA_BLOCK_BYTES - a->block_used) {
        base = a->block + a->block_used;
        a->block_used += rounded;
        return base;
    }
    base = malloc(size + ALLOC_HEADER_BYTES);
    if (!base) {
        a->budget.used -= size + ALLOC_HEADER_BYTES;
        return NULL;
    }
    memcpy(base, &a->overflow, sizeof(a->overflow));
    a->overflow = base;
    return base + ALLOC_HEADER_BYTES;
}

/* Everything goes at the reset. */
static void arena_free(void *allocator_data, void *ptr)
{
    (void)allocator_data;
    (void)ptr;
}

void ipc__arena_reset(struct ipc__arena *a)
{
    while (a->overflow) {
        void *next;

        memcpy(&next, a->overflow, sizeof(next));
        free(a->overflow);
        a->overflow = next;
    }
    a->block_used = 0;
    a->budget.used = 0;
    a->budget.exceeded = false;
}

struct ipc__arena *ipc__arena_free(struct ipc__arena *a)
{
    if (a) {
        ipc__arena_reset(a);
        free(a);
    }
    return NULL;
}

int ipc__envelope_decode_arena(struct ipc__arena **arena, const uint8_t *data, size_t len,
                               size_t max_decode_bytes, Fleetprof__Envelope **ret_env,
                               const char **ret_reason)
{
    ProtobufCAllocator allocator = {.alloc = arena_alloc, .free = arena_free};
    struct ipc__arena *a = *arena;
    int r;

    if (!a) {
        a = malloc(sizeof(*a));
        if (!a)
            return ipc_envelope_decode(data, len, max_decode_bytes, ret_env, ret_reason);
        a->overflow = NULL;
        a->block_used = 0;
        *arena = a;
    }
    a->budget = (struct decode_budget){
            .used = 0,
            .max = max_decode_bytes ? max_decode_bytes
                                    : IPC_FRAME_MAX_BYTES_DEFAULT * IPC_DECODE_BUDGET_FACTOR,
    };
    allocator.allocator_data = a;
    r = decode_with(data, len, &allocator, &a->budget, &allocator, ret_env, ret_reason);
    if (r < 0)
        ipc__arena_reset(a);
    return r;
}

Fleetprof__Envelope *ipc_envelope_free(Fleetprof__Envelope *env)
{
    if (env)
        fleetprof__envelope__free_unpacked(env, &free_allocator);
    return NULL;
}

const char *ipc_msg_name(Fleetprof__Envelope__MsgCase msg_case)
{
    const ProtobufCFieldDescriptor *field;

    if (msg_case == FLEETPROF__ENVELOPE__MSG__NOT_SET)
        return "unset";
    if ((int)msg_case < 0)
        return "unknown";
    field = protobuf_c_message_descriptor_get_field(&fleetprof__envelope__descriptor,
                                                    (unsigned)msg_case);
    return field ? field->name : "unknown";
}

int ipc_version_check(uint32_t peer_version, char *reason, size_t reason_len)
{
    if (peer_version == FLEETPROF_PROTOCOL_VERSION) {
        if (reason && reason_len)
            reason[0] = '\0';
        return 0;
    }
    if (reason && reason_len)
        (void)snprintf(reason, reason_len,
                       "protocol version mismatch: peer speaks version %u, this side speaks "
                       "version %u; run a fleetprof daemon and library from the same release",
                       peer_version, FLEETPROF_PROTOCOL_VERSION);
    return -EPROTONOSUPPORT;
}

/* ---- semantic validation ----------------------------------------------------------------- */

#define INVALID(msg)     \
    do {                 \
        *reason = (msg); \
        return -EBADMSG; \
    } while (0)

#define MISSING "envelope: message set but missing"

static bool text_ok(const char *s, size_t max)
{
    return s && strnlen(s, max + 1) <= max;
}

static int check_hello(const Fleetprof__Hello *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->id == 0)
        INVALID("hello: id is 0");
    if (m->pid <= 0 || m->ppid < 0)
        INVALID("hello: bad pid or ppid");
    if (!text_ok(m->name, IPC_NAME_MAX_BYTES))
        INVALID("hello: name too long");
    if (m->n_argv > IPC_ARGV_MAX)
        INVALID("hello: too many argv entries");
    for (size_t i = 0; i < m->n_argv; i++)
        if (!text_ok(m->argv[i], IPC_ARG_MAX_BYTES))
            INVALID("hello: argv entry too long");
    return 0;
}

static int check_welcome(const Fleetprof__Welcome *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->request_id == 0)
        INVALID("welcome: request_id is 0");
    if (m->interval_ns == 0)
        INVALID("welcome: interval_ns is 0");
    if (m->chunk_bytes < CHUNK_MIN_BYTES || m->process_limit_bytes < m->chunk_bytes)
        INVALID("welcome: chunk_bytes below 64 KiB or above process_limit_bytes");
    if (m->n_feature_names > 64)
        INVALID("welcome: too many feature names");
    for (size_t i = 0; i < m->n_feature_names; i++)
        if (!text_ok(m->feature_names[i], IPC_NAME_MAX_BYTES))
            INVALID("welcome: feature name too long");
    if ((unsigned)m->stackwalk > FLEETPROF__STACKWALK_MODE__STACKWALK_MODE_COPY)
        INVALID("welcome: unknown stackwalk mode");
    if (!m->clock)
        INVALID("welcome: clock reference missing");
    return 0;
}

static int check_update(const Fleetprof__ChunkManagerUpdate *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->request_id == 0 && !m->final)
        INVALID("chunk_manager_update: request_id is 0 and not final");
    if (m->n_newly_released > IPC_REPEATED_MAX)
        INVALID("chunk_manager_update: too many released chunks");
    for (size_t i = 0; i < m->n_newly_released; i++) {
        const Fleetprof__ChunkMetadata *c = m->newly_released[i];

        if (!c || c->bytes == 0)
            INVALID("chunk_manager_update: released chunk without bytes");
    }
    return 0;
}

static int check_profile_data(const Fleetprof__ProfileData *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->request_id == 0)
        INVALID("profile_data: request_id is 0");
    if (m->data.len > IPC_PROFILE_PIECE_MAX_BYTES)
        INVALID("profile_data: piece larger than 1 MiB");
    if (m->data.len && !m->data.data)
        INVALID("profile_data: data missing");
    if (m->offset > UINT64_MAX - m->data.len)
        INVALID("profile_data: offset overflows");
    if (m->total && m->offset + m->data.len > m->total)
        INVALID("profile_data: piece beyond the stream's total");
    if (!text_ok(m->error, IPC_TEXT_MAX_BYTES))
        INVALID("profile_data: error text too long");
    if (m->error[0] && !m->last)
        INVALID("profile_data: error set on a piece that is not the last");
    return 0;
}

static int check_symbolize(const Fleetprof__Symbolize *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->id == 0)
        INVALID("symbolize: id is 0");
    if (m->n_modules > IPC_MODULES_MAX)
        INVALID("symbolize: too many modules");
    for (size_t i = 0; i < m->n_modules; i++) {
        const Fleetprof__SymbolModule *mod = m->modules[i];

        if (!mod || !text_ok(mod->path, IPC_TEXT_MAX_BYTES))
            INVALID("symbolize: module path missing or too long");
        if (mod->build_id.len > IPC_BUILD_ID_MAX_BYTES)
            INVALID("symbolize: build id too long");
    }
    if (m->n_addresses > IPC_REPEATED_MAX)
        INVALID("symbolize: too many addresses");
    for (size_t i = 0; i < m->n_addresses; i++) {
        const Fleetprof__SymbolAddress *a = m->addresses[i];

        if (!a || a->module_index >= m->n_modules)
            INVALID("symbolize: address names a module that is not in the request");
    }
    return 0;
}

static int check_symbols(const Fleetprof__Symbols *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->request_id == 0)
        INVALID("symbols: request_id is 0");
    if (m->n_names > IPC_REPEATED_MAX)
        INVALID("symbols: too many names");
    if ((m->n_files && m->n_files != m->n_names) || (m->n_lines && m->n_lines != m->n_names) ||
        (m->n_status && m->n_status != m->n_names))
        INVALID("symbols: files, lines or status do not match names");
    if (m->n_module_errors > IPC_MODULES_MAX)
        INVALID("symbols: too many module errors");
    for (size_t i = 0; i < m->n_module_errors; i++)
        if (!text_ok(m->module_errors[i], IPC_TEXT_MAX_BYTES))
            INVALID("symbols: module error too long");
    for (size_t i = 0; i < m->n_names; i++)
        if (!text_ok(m->names[i], IPC_SYMBOL_MAX_BYTES))
            INVALID("symbols: name too long");
    for (size_t i = 0; i < m->n_files; i++)
        if (!text_ok(m->files[i], IPC_SYMBOL_MAX_BYTES))
            INVALID("symbols: file name too long");
    if (!text_ok(m->error, IPC_TEXT_MAX_BYTES))
        INVALID("symbols: error text too long");
    return 0;
}

/* GroupStats: only what keeps the daemon safe is checked here (bounded counts, no missing
 * entries); names, bucket counts and monotonic totals are the daemon's to judge
 * (daemon/groups.c), which refuses the message and keeps the child. */
static int check_group_stats(const Fleetprof__GroupStats *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->n_groups > IPC_REPEATED_MAX)
        INVALID("group_stats: too many groups");
    for (size_t i = 0; i < m->n_groups; i++) {
        const Fleetprof__GroupTotals *g = m->groups[i];

        if (!g || !g->name)
            INVALID("group_stats: group without a name");
        if (g->n_durations > IPC_REPEATED_MAX)
            INVALID("group_stats: too many histogram buckets");
    }
    return 0;
}

static int check_group_totals(const Fleetprof__GroupTotals *t, const char *what,
                              const char **reason)
{
    if (!t || !text_ok(t->name, IPC_TEXT_MAX_BYTES) || t->n_durations > IPC_REPEATED_MAX)
        INVALID(what);
    return 0;
}

/* Fleet groups as the daemon reports them (GroupsReport, StatusReport.groups). */
static int check_fleet_groups(Fleetprof__FleetGroup *const *groups, size_t n, const char **reason)
{
    if (n > IPC_REPEATED_MAX)
        INVALID("groups report: too many groups");
    for (size_t i = 0; i < n; i++) {
        const Fleetprof__FleetGroup *g = groups[i];

        if (!g)
            INVALID("groups report: missing group");
        if (check_group_totals(g->totals, "groups report: group without totals or name", reason))
            return -EBADMSG;
        if (g->n_per_process > IPC_REPEATED_MAX)
            INVALID("groups report: too many processes");
        for (size_t k = 0; k < g->n_per_process; k++) {
            const Fleetprof__GroupProcess *p = g->per_process[k];

            if (!p || p->pid <= 0 || !text_ok(p->name, IPC_NAME_MAX_BYTES))
                INVALID("groups report: process entry with a bad pid or name");
            if (check_group_totals(p->totals, "groups report: process entry without totals",
                                   reason))
                return -EBADMSG;
        }
    }
    return 0;
}

static int check_status_report(const Fleetprof__StatusReport *m, const char **reason)
{
    if (!m)
        INVALID(MISSING);
    if (m->request_id == 0)
        INVALID("status_report: request_id is 0");
    if (m->n_children > IPC_REPEATED_MAX)
        INVALID("status_report: too many children");
    for (size_t i = 0; i < m->n_children; i++) {
        const Fleetprof__ChildStatus *c = m->children[i];

        if (!c || c->pid <= 0 || c->ppid < 0)
            INVALID("status_report: child with a bad pid");
        if (!text_ok(c->name, IPC_NAME_MAX_BYTES))
            INVALID("status_report: child name too long");
        if ((unsigned)c->state > FLEETPROF__CHILD_STATE__CHILD_STATE_EXITING)
            INVALID("status_report: unknown child state");
    }
    return check_fleet_groups(m->groups, m->n_groups, reason);
}

/* A request's id must be nonzero: replies name it. */
static int check_id(uint64_t id, const char *what, const char **reason)
{
    if (id == 0)
        INVALID(what);
    return 0;
}

int ipc_envelope_validate(const Fleetprof__Envelope *env, const char **ret_reason)
{
    const char *dummy;
    const char **reason = ret_reason ? ret_reason : &dummy;

    if (!env) {
        *reason = "no envelope";
        return -EINVAL;
    }
    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_HELLO:
        return check_hello(env->hello, reason);
    case FLEETPROF__ENVELOPE__MSG_WELCOME:
        return check_welcome(env->welcome, reason);
    case FLEETPROF__ENVELOPE__MSG_REFUSE: {
        const Fleetprof__Refuse *m = env->refuse;

        if (!m)
            INVALID(MISSING);
        if (!text_ok(m->reason, IPC_TEXT_MAX_BYTES))
            INVALID("refuse: reason too long");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG_START:
        return check_id(env->start ? env->start->id : 0, "start: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_STOP:
        return check_id(env->stop ? env->stop->id : 0, "stop: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_PAUSE:
        return check_id(env->pause ? env->pause->id : 0, "pause: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_RESUME:
        return check_id(env->resume ? env->resume->id : 0, "resume: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_ACK:
        return check_id(env->ack ? env->ack->request_id : 0, "ack: request_id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_AWAIT_NEXT_CHUNK_MANAGER_UPDATE:
        return check_id(
                env->await_next_chunk_manager_update ? env->await_next_chunk_manager_update->id : 0,
                "await_next_chunk_manager_update: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_CHUNK_MANAGER_UPDATE:
        return check_update(env->chunk_manager_update, reason);
    case FLEETPROF__ENVELOPE__MSG_DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE:
        return check_id(env->destroy_released_chunks_at_or_before
                                ? env->destroy_released_chunks_at_or_before->id
                                : 0,
                        "destroy_released_chunks_at_or_before: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE:
        return check_id(env->gather_profile ? env->gather_profile->id : 0,
                        "gather_profile: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS: {
        const Fleetprof__GetGatherProfileProgress *m = env->get_gather_profile_progress;

        if (!m)
            INVALID(MISSING);
        if (m->id == 0 || m->gather_id == 0)
            INVALID("get_gather_profile_progress: id or gather_id is 0");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS: {
        const Fleetprof__GatherProgress *m = env->gather_progress;

        if (!m)
            INVALID(MISSING);
        if (m->request_id == 0)
            INVALID("gather_progress: request_id is 0");
        if (m->proportion > IPC_PROPORTION_ONE && m->proportion != IPC_PROPORTION_INVALID)
            INVALID("gather_progress: proportion above 1.0 and not the invalid marker");
        if (!text_ok(m->location, IPC_TEXT_MAX_BYTES))
            INVALID("gather_progress: location too long");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG_PROFILE_DATA:
        return check_profile_data(env->profile_data, reason);
    case FLEETPROF__ENVELOPE__MSG_SYMBOLIZE:
        return check_symbolize(env->symbolize, reason);
    case FLEETPROF__ENVELOPE__MSG_SYMBOLS:
        return check_symbols(env->symbols, reason);
    case FLEETPROF__ENVELOPE__MSG_ERROR: {
        const Fleetprof__Error *m = env->error;

        if (!m)
            INVALID(MISSING);
        if (m->code <= 0)
            INVALID("error: code is not a positive errno");
        if (!text_ok(m->message, IPC_TEXT_MAX_BYTES))
            INVALID("error: message too long");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG_CAPTURE_REQUEST: {
        const Fleetprof__CaptureRequest *m = env->capture_request;

        if (!m)
            INVALID(MISSING);
        if (m->id == 0)
            INVALID("capture_request: id is 0");
        if (!text_ok(m->output_path, IPC_TEXT_MAX_BYTES - 1) || !m->output_path[0])
            INVALID("capture_request: output path empty or too long");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG_STATUS_REQUEST:
        return check_id(env->status_request ? env->status_request->id : 0,
                        "status_request: id is 0", reason);
    case FLEETPROF__ENVELOPE__MSG_STOP_REQUEST:
        return check_id(env->stop_request ? env->stop_request->id : 0, "stop_request: id is 0",
                        reason);
    case FLEETPROF__ENVELOPE__MSG_STATUS_REPORT:
        return check_status_report(env->status_report, reason);
    case FLEETPROF__ENVELOPE__MSG_GROUP_STATS:
        return check_group_stats(env->group_stats, reason);
    case FLEETPROF__ENVELOPE__MSG_SPAWNED:
        if (!env->spawned)
            INVALID(MISSING);
        if (env->spawned->n_pids > IPC_SPAWNED_MAX)
            INVALID("spawned: too many pids");
        return 0;
    case FLEETPROF__ENVELOPE__MSG_GROUPS_REQUEST: {
        const Fleetprof__GroupsRequest *m = env->groups_request;

        if (!m)
            INVALID(MISSING);
        if (m->id == 0)
            INVALID("groups_request: id is 0");
        if (!text_ok(m->per_process_group, IPC_TEXT_MAX_BYTES))
            INVALID("groups_request: group name too long");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG_GROUPS_REPORT: {
        const Fleetprof__GroupsReport *m = env->groups_report;

        if (!m)
            INVALID(MISSING);
        if (m->request_id == 0)
            INVALID("groups_report: request_id is 0");
        return check_fleet_groups(m->groups, m->n_groups, reason);
    }
    case FLEETPROF__ENVELOPE__MSG_CAPTURE_PROGRESS: {
        const Fleetprof__CaptureProgress *m = env->capture_progress;

        if (!m)
            INVALID(MISSING);
        if (m->request_id == 0)
            INVALID("capture_progress: request_id is 0");
        if (m->done > m->total)
            INVALID("capture_progress: done exceeds total");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG_CAPTURE_RESULT: {
        const Fleetprof__CaptureResult *m = env->capture_result;

        if (!m)
            INVALID(MISSING);
        if (m->request_id == 0)
            INVALID("capture_result: request_id is 0");
        if (!text_ok(m->path, IPC_TEXT_MAX_BYTES) || !text_ok(m->error, IPC_TEXT_MAX_BYTES))
            INVALID("capture_result: path or error too long");
        if (m->n_lost_processes > 16 || m->n_lost_processes > m->lost)
            INVALID("capture_result: more lost processes listed than counted, or over 16");
        for (size_t i = 0; i < m->n_lost_processes; i++)
            if (!m->lost_processes[i] || !text_ok(m->lost_processes[i]->name, IPC_TEXT_MAX_BYTES) ||
                !text_ok(m->lost_processes[i]->reason, IPC_TEXT_MAX_BYTES))
                INVALID("capture_result: a lost process's name or reason too long");
        return 0;
    }
    case FLEETPROF__ENVELOPE__MSG__NOT_SET:
    default:
        break;
    }
    *reason = "envelope carries no known message";
    return -ENOMSG;
}
