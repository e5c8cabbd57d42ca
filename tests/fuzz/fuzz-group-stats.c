/* Fuzz target: the daemon's GroupStats path, from bytes to fleet sums. Envelope decoding and
 * validation (ipc_envelope_decode, as on every frame from a child), then the fleet's
 * performance groups (daemon/groups.c) fed to a small fleet that joins, leaves and reports.
 *
 * Input: records of [op: 1 byte][length: 2 bytes, big-endian][payload]. op & 3: 0 joins a
 * process (pid 100 + slot, start = length & 3: the same process reconnecting, or after exec), 1
 * makes process (op >> 2) % 8 leave, 2 decodes the payload as one Envelope and applies it when it
 * is a GroupStats, for process (op >> 2) % 8, 3 reports with the payload as the group to break
 * down. After every report each group's fleet sum must equal the sum of its per-process rows
 * (worst: the maximum), and its counts must agree; violations abort().
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/groups.h"
#include "ipc/ipc.h"
#include "profile/groups.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PROCS 8

static void check_group(const Fleetprof__FleetGroup *g)
{
    const Fleetprof__GroupTotals *t = g->totals;
    uint64_t cpu = 0, events = 0, stale = 0, worst = 0, bucket0 = 0, live = 0;

    if (!t || t->n_durations != PROF_GROUP_BUCKETS || g->live_processes > g->processes)
        abort();
    if (g->n_per_process != g->processes)
        abort(); /* nothing here evicts exited rows */
    for (size_t i = 0; i < g->n_per_process; i++) {
        const Fleetprof__GroupTotals *p = g->per_process[i]->totals;

        if (strcmp(p->name, t->name) != 0 || p->n_durations != PROF_GROUP_BUCKETS)
            abort();
        cpu += p->cpu_ns;
        events += p->events;
        stale += p->stale;
        bucket0 += p->durations[0];
        live += !g->per_process[i]->exited;
        if (p->worst_event_ns > worst)
            worst = p->worst_event_ns;
    }
    if (cpu != t->cpu_ns || events != t->events || stale != t->stale ||
        bucket0 != t->durations[0] || live != g->live_processes)
        abort();
    /* The fleet's worst is the worst any process reported, even one since surpassed. */
    if (t->worst_event_ns < worst)
        abort();
}

static void report(struct fleet_groups *fg, const uint8_t *name, size_t len)
{
    struct fleet_groups_report r;
    char want[PROF_GROUP_NAME_MAX + 1];

    if (len > PROF_GROUP_NAME_MAX)
        len = PROF_GROUP_NAME_MAX;
    memcpy(want, name, len);
    want[len] = '\0';
    if (fleet_groups_report(fg, want, NULL, NULL, &r) < 0)
        return;
    for (size_t i = 0; i < r.msg.n_groups; i++) {
        if (!strcmp(r.msg.groups[i]->totals->name, want))
            check_group(r.msg.groups[i]);
        else if (r.msg.groups[i]->n_per_process)
            abort(); /* broken down without being asked */
    }
    fleet_groups_report_done(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fleet_groups *fg;
    struct fleet_groups_proc *procs[PROCS] = {0};

    if (fleet_groups_new(&fg) < 0)
        return 0;
    while (size >= 3) {
        unsigned op = data[0], slot = (op >> 2) % PROCS;
        size_t len = (size_t)data[1] << 8 | data[2];
        const uint8_t *payload = data + 3;

        if (len > size - 3)
            len = size - 3;
        data += 3 + len;
        size -= 3 + len;
        switch (op & 3) {
        case 0:
            if (!procs[slot])
                /* Pids repeat and starts collide: exec and reconnections. */
                procs[slot] = fleet_groups_join(fg, 100 + (int32_t)slot, len & 3, "fuzzed");
            break;
        case 1:
            fleet_groups_leave(fg, procs[slot]);
            procs[slot] = NULL;
            break;
        case 2: {
            Fleetprof__Envelope *env = NULL;
            const char *why = NULL;

            if (!procs[slot] || ipc_envelope_decode(payload, len, 0, &env, NULL) < 0)
                break;
            if (env->msg_case == FLEETPROF__ENVELOPE__MSG_GROUP_STATS &&
                fleet_groups_apply(fg, procs[slot], env->group_stats, &why) == -EBADMSG &&
                (!why || !why[0]))
                abort(); /* a refusal always says why */
            ipc_envelope_free(env);
            break;
        }
        default:
            report(fg, payload, len);
            break;
        }
    }
    fleet_groups_free(fg);
    return 0;
}
