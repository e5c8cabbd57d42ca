/* tests/bench/bench-groups-daemon.c - fleetprofd's cost of the fleet's performance groups.
 *
 * The real daemon runs as its own process and serves N forked simulated children (256 by
 * default), one connection each (the daemon names a child by its SO_PEERCRED pid). Each
 * says Hello, then sends a GroupStats once per second, as the runtime does when its groups
 * are busy: 8 groups shared by the fleet, cumulative totals that grow every time, phases
 * spread over the second. The daemon's CPU time comes from /proc/PID/schedstat (ns on a
 * CPU); its figure is the median over windows of steady state, with an idle fleet (the same
 * connections, no GroupStats) measured first for comparison. At the end a GroupsReport must
 * hold exactly the sums of what the simulators sent last (printed, not asserted).
 * Never asserts on time; exits non-zero only when the setup fails or the daemon dies.
 *
 * Usage: bench-groups-daemon [PATH-TO-FLEETPROFD] [--children N]
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "proto/fleetprof-protocol.h"

#define DEFAULT_CHILDREN 256
#define GROUPS           8
#define BUCKETS          22   /* PROF_GROUP_BUCKETS */
#define PERIOD_MS        1000 /* the runtime's cadence when its groups are busy */
#define WARMUP_MS        2500
#define WINDOWS          5
#define WINDOW_MS        2000
#define CONNECT_WAIT_MS  20000

struct sim_slot {
    _Atomic int connected;
    _Atomic int failed;
    _Atomic uint64_t sent;  /* GroupStats sent */
    _Atomic uint64_t value; /* every counter of every group in the last one sent */
};

struct shared {
    _Atomic int phase; /* 0 idle, 1 send, 2 quiet (stop sending), 3 exit */
    struct sim_slot slot[];
};

static char sock_path[108], log_path[128], dir[64];
static pid_t daemon_pid;

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static uint64_t daemon_cpu_ns(void)
{
    char path[64], line[128];
    uint64_t run = 0;
    FILE *f;

    (void)snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)daemon_pid);
    f = fopen(path, "r");
    if (!f)
        return 0;
    if (fgets(line, sizeof(line), f))
        run = strtoull(line, NULL, 10);
    (void)fclose(f);
    return run;
}

static int connect_daemon(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -errno;
    memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
    for (int i = 0; i < 400; i++) {
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            return fd;
        if (errno != EAGAIN && errno != ECONNREFUSED)
            break;
        sleep_ns(5000000); /* a full accept backlog */
    }
    (void)close(fd);
    return -errno;
}

static int send_env(int fd, const Fleetprof__Envelope *env)
{
    static uint8_t buf[64 << 10];
    ssize_t n = ipc_frame_encode(env, buf, sizeof(buf));
    size_t off = 0;

    if (n < 0)
        return (int)n;
    while (off < (size_t)n) {
        ssize_t w = send(fd, buf + off, (size_t)n - off, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        off += (size_t)w;
    }
    return 0;
}

/* Reads and discards whatever the daemon sent (Welcome, polls): its queue must not fill. */
static void drain(int fd)
{
    char buf[4096];

    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
}

static void send_stats(int fd, uint64_t id, uint64_t value)
{
    static char names[GROUPS][16];
    static uint64_t durations[GROUPS][BUCKETS];
    Fleetprof__GroupTotals g[GROUPS], *ptrs[GROUPS];
    Fleetprof__GroupStats m = FLEETPROF__GROUP_STATS__INIT;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;

    for (int i = 0; i < GROUPS; i++) {
        fleetprof__group_totals__init(&g[i]);
        (void)snprintf(names[i], sizeof(names[i]), "tenant-%d", i);
        g[i].name = names[i];
        g[i].cpu_ns = g[i].cycles = g[i].activations = g[i].events = value;
        g[i].worst_event_ns = g[i].slow_events = g[i].discarded = value;
        g[i].migrated = g[i].stale = value;
        for (int b = 0; b < BUCKETS; b++)
            durations[i][b] = value;
        g[i].n_durations = BUCKETS;
        g[i].durations = durations[i];
        ptrs[i] = &g[i];
    }
    m.id = id;
    m.process_cpu_ns = value;
    m.slow_event_ns = 16000000;
    m.n_groups = GROUPS;
    m.groups = ptrs;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GROUP_STATS;
    env.group_stats = &m;
    (void)send_env(fd, &env);
}

static void simulate(struct shared *sh, int index, int children)
{
    struct sim_slot *slot = &sh->slot[index];
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello h = FLEETPROF__HELLO__INIT;
    uint64_t next, value = 0, id = 1;
    int fd = connect_daemon();

    if (fd < 0) {
        atomic_store(&slot->failed, 1);
        _exit(1);
    }
    h.id = id++;
    h.version = FLEETPROF_PROTOCOL_VERSION;
    h.pid = (int32_t)getpid();
    h.name = "sim";
    env.msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env.hello = &h;
    if (send_env(fd, &env) < 0) {
        atomic_store(&slot->failed, 1);
        _exit(1);
    }
    atomic_store(&slot->connected, 1);
    /* Phases spread over the period, so the daemon sees a steady stream, not bursts. */
    next = now_ns() + (uint64_t)PERIOD_MS * 1000000u * (uint64_t)index / (uint64_t)children;
    for (;;) {
        int phase = atomic_load(&sh->phase);

        if (phase == 3)
            break;
        sleep_ns(next > now_ns() ? next - now_ns() : 0);
        next += (uint64_t)PERIOD_MS * 1000000u;
        drain(fd);
        if (atomic_load(&sh->phase) != 1)
            continue;
        value += 1000 + (uint64_t)index; /* cumulative: always growing */
        send_stats(fd, id++, value);
        atomic_store(&slot->value, value);
        atomic_fetch_add(&slot->sent, 1);
    }
    (void)close(fd);
    _exit(0);
}

static int start_daemon(const char *exe)
{
    pid_t parent = getpid(), pid = fork();
    struct stat st;

    if (pid < 0)
        return -errno;
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (fd >= 0) {
            (void)dup2(fd, STDOUT_FILENO);
            (void)dup2(fd, STDERR_FILENO);
        }
        execl(exe, exe, "--foreground", "--socket", sock_path, "--log-level", "warning",
              (char *)NULL);
        _exit(127);
    }
    daemon_pid = pid;
    for (int i = 0; i < 500; i++) {
        if (stat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode))
            return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return -ECHILD;
        sleep_ns(10000000);
    }
    return -ETIMEDOUT;
}

/* The daemon's CPU % of one core in each of WINDOWS windows; returns the median. */
static double measure(double pct[WINDOWS], uint64_t *ret_msgs, struct shared *sh, int children)
{
    double sorted[WINDOWS];
    uint64_t msgs = 0;

    for (int w = 0; w < WINDOWS; w++) {
        uint64_t sent0 = 0, sent1 = 0, c0, c1, t0, t1;

        for (int i = 0; i < children; i++)
            sent0 += atomic_load(&sh->slot[i].sent);
        t0 = now_ns();
        c0 = daemon_cpu_ns();
        sleep_ns((uint64_t)WINDOW_MS * 1000000u);
        c1 = daemon_cpu_ns();
        t1 = now_ns();
        for (int i = 0; i < children; i++)
            sent1 += atomic_load(&sh->slot[i].sent);
        pct[w] = t1 > t0 && c1 >= c0 ? 100.0 * (double)(c1 - c0) / (double)(t1 - t0) : 0.0;
        msgs += sent1 - sent0;
    }
    memcpy(sorted, pct, sizeof(sorted));
    for (int i = 1; i < WINDOWS; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            double t = sorted[j];

            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    *ret_msgs = msgs;
    return sorted[WINDOWS / 2];
}

struct report_check {
    bool got;
    uint32_t groups;
    uint64_t cpu_ns[GROUPS]; /* by tenant index */
    uint64_t fleet_cpu_ns;
};

static int on_report(void *userdata, const Fleetprof__Envelope *env)
{
    struct report_check *rc = userdata;
    const Fleetprof__GroupsReport *r = env->groups_report;

    if (env->msg_case != FLEETPROF__ENVELOPE__MSG_GROUPS_REPORT)
        return 0;
    rc->got = true;
    rc->groups = (uint32_t)r->n_groups;
    rc->fleet_cpu_ns = r->fleet_cpu_ns;
    for (size_t i = 0; i < r->n_groups; i++) {
        int k;

        if (sscanf(r->groups[i]->totals->name, "tenant-%d", &k) == 1 && k >= 0 && k < GROUPS)
            rc->cpu_ns[k] = r->groups[i]->totals->cpu_ns;
    }
    return 0;
}

static int query_report(struct report_check *rc)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GroupsRequest req = FLEETPROF__GROUPS_REQUEST__INIT;
    struct ipc_reader reader;
    uint8_t buf[65536];
    int fd = connect_daemon();
    uint64_t deadline = now_ns() + 10000000000ull;

    if (fd < 0)
        return fd;
    req.id = 1;
    req.per_process_group = "";
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GROUPS_REQUEST;
    env.groups_request = &req;
    if (send_env(fd, &env) < 0) {
        (void)close(fd);
        return -EIO;
    }
    ipc_reader_init(&reader, 0);
    while (!rc->got && now_ns() < deadline) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);

        if (n <= 0 || ipc_reader_feed(&reader, buf, (size_t)n, on_report, rc) < 0)
            break;
    }
    ipc_reader_done(&reader);
    (void)close(fd);
    return rc->got ? 0 : -EIO;
}

int main(int argc, char **argv)
{
    const char *exe = "daemon/fleetprofd";
    int children = DEFAULT_CHILDREN, connected = 0, failed = 0;
    double idle_pct[WINDOWS], busy_pct[WINDOWS], idle, busy;
    uint64_t idle_msgs, busy_msgs, want = 0;
    struct report_check rc = {0};
    struct shared *sh;
    pid_t *pids;
    size_t shared_bytes;
    bool verified;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--children") && i + 1 < argc)
            children = atoi(argv[++i]);
        else
            exe = argv[i];
    }
    if (children < 1 || children > 4096) {
        (void)fprintf(stderr, "bench-groups-daemon: --children 1..4096\n");
        return 2;
    }
    (void)snprintf(dir, sizeof(dir), "/tmp/bench-groups-daemon.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    (void)snprintf(sock_path, sizeof(sock_path), "%s/s.sock", dir);
    (void)snprintf(log_path, sizeof(log_path), "%s/daemon.log", dir);
    shared_bytes = sizeof(*sh) + (size_t)children * sizeof(sh->slot[0]);
    sh = mmap(NULL, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pids = calloc((size_t)children, sizeof(*pids));
    if (sh == MAP_FAILED || !pids) {
        perror("bench-groups-daemon: memory");
        return 1;
    }
    if (start_daemon(exe) < 0) {
        (void)fprintf(stderr, "bench-groups-daemon: cannot start %s\n", exe);
        return 1;
    }
    for (int i = 0; i < children; i++) {
        pid_t parent = getpid();

        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[i] == 0) {
            (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            simulate(sh, i, children);
        }
    }
    for (uint64_t deadline = now_ns() + (uint64_t)CONNECT_WAIT_MS * 1000000u;
         now_ns() < deadline;) {
        connected = failed = 0;
        for (int i = 0; i < children; i++) {
            connected += atomic_load(&sh->slot[i].connected);
            failed += atomic_load(&sh->slot[i].failed);
        }
        if (connected + failed == children)
            break;
        sleep_ns(20000000);
    }
    sleep_ns((uint64_t)WARMUP_MS * 1000000u); /* Hellos, Welcomes and first polls settle */
    idle = measure(idle_pct, &idle_msgs, sh, children);
    atomic_store(&sh->phase, 1);
    sleep_ns((uint64_t)WARMUP_MS * 1000000u);
    busy = measure(busy_pct, &busy_msgs, sh, children);
    atomic_store(&sh->phase, 2);
    sleep_ns(2ull * PERIOD_MS * 1000000u); /* the last messages arrive */
    for (int i = 0; i < children; i++)
        want += atomic_load(&sh->slot[i].value);
    verified = query_report(&rc) == 0 && rc.groups == GROUPS;
    for (int k = 0; verified && k < GROUPS; k++)
        verified = rc.cpu_ns[k] == want;
    atomic_store(&sh->phase, 3);
    for (int i = 0; i < children; i++)
        (void)waitpid(pids[i], NULL, 0);
    if (waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid) {
        (void)fprintf(stderr, "bench-groups-daemon: fleetprofd died; log in %s\n", log_path);
        return 1;
    }
    (void)kill(daemon_pid, SIGTERM);
    (void)waitpid(daemon_pid, NULL, 0);

    printf("fleetprofd with %d simulated children (%d connected, %d failed), %d groups each,\n"
           "one GroupStats per child per second; %d windows of %d ms, medians\n\n",
           children, connected, failed, GROUPS, WINDOWS, WINDOW_MS);
    printf("%-40s %10s %10s %10s\n", "", "median", "min", "max");
    {
        double lo = busy_pct[0], hi = busy_pct[0], ilo = idle_pct[0], ihi = idle_pct[0];

        for (int w = 1; w < WINDOWS; w++) {
            lo = busy_pct[w] < lo ? busy_pct[w] : lo;
            hi = busy_pct[w] > hi ? busy_pct[w] : hi;
            ilo = idle_pct[w] < ilo ? idle_pct[w] : ilo;
            ihi = idle_pct[w] > ihi ? idle_pct[w] : ihi;
        }
        printf("%-40s %9.3f%% %9.3f%% %9.3f%%\n", "daemon CPU, idle fleet", idle, ilo, ihi);
        printf("%-40s %9.3f%% %9.3f%% %9.3f%%\n", "daemon CPU, GroupStats flowing", busy, lo, hi);
    }
    printf("%-40s %10.1f\n", "GroupStats per second (sent)",
           (double)busy_msgs / ((double)WINDOWS * WINDOW_MS / 1000.0));
    if (busy_msgs)
        printf("%-40s %10.2f\n", "daemon CPU us per GroupStats (all of it)",
               busy / 100.0 * ((double)WINDOWS * WINDOW_MS * 1000.0) / (double)busy_msgs);
    printf("%-40s %10s\n", "GroupsReport sums = what was sent", verified ? "yes" : "NO");
    printf("BENCH groups.daemon_cpu_pct_256_children %.3f %%\n", busy);
    (void)unlink(sock_path);
    (void)unlink(log_path);
    (void)rmdir(dir);
    return 0;
}
