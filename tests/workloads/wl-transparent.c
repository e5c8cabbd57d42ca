/* tests/workloads/wl-transparent.c - programs that do what a profiler could get in the way
 * of; each checks that what it did took effect and exits non-zero, saying what, if not.
 *
 *   wl-transparent blocked-thread CPU_MS  a thread blocks in read() on a pipe as soon as it
 *                                         starts; the main thread spins CPU_MS of CPU in
 *                                         wl_spin, then writes the byte that ends the
 *                                         read; exit 3 if the read failed (EINTR)
 *   wl-transparent dup2-range CPU_MS      spins, dup2()s /dev/null over descriptors 3..63
 *                                         (a daemon's clean-up), spins again; exit 4 if
 *                                         one of them is not its /dev/null afterwards
 *   wl-transparent raw-close-range CPU_MS spins, closes every descriptor from 3 up with the
 *                                         close_range system call (not libc's), opens 8
 *                                         pipes of its own (the numbers just closed), spins
 *                                         again; exit 5 if a byte written to one of them
 *                                         does not come back
 *   wl-transparent dup2-ours CPU_MS       spins, then dup2()s a pipe of its own onto every
 *                                         descriptor from 3 up that it did not open (the
 *                                         profiler's), spins again, and checks each copy
 *                                         still carries its bytes and nothing else; exit 6
 *                                         if one does not
 *   wl-transparent idle-close-range MS    while the main thread sleeps MS ms in one call, a
 *                                         thread made with a raw clone (no pthread_create: the
 *                                         profiler does not know it) closes every descriptor
 *                                         from 3 up with the close_range system call and ends;
 *                                         then prints the targets of the descriptors left open
 *                                         (the profiler's, if it re-made any), one a line
 *   wl-transparent first-fd               prints the number its first open() gets
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wl-cpu.h"

#define NOINLINE __attribute__((noinline))

NOINLINE void wl_spin(double cpu_ms);
NOINLINE void wl_spin(double cpu_ms)
{
    wl_burn_cpu_ms(cpu_ms);
}

static void *blocked_reader(void *arg)
{
    int fd = *(int *)arg;
    char c;
    ssize_t n = read(fd, &c, 1);

    return (void *)(intptr_t)(n == 1 ? 0 : errno ? errno : -1);
}

static int blocked_thread(double cpu_ms)
{
    int fds[2];
    pthread_t th;
    void *ret;

    if (pipe(fds) < 0 || pthread_create(&th, NULL, blocked_reader, &fds[0]) != 0) {
        perror("wl-transparent: pipe/pthread_create");
        return 1;
    }
    wl_spin(cpu_ms);
    if (write(fds[1], "x", 1) != 1) {
        perror("wl-transparent: write");
        return 1;
    }
    pthread_join(th, &ret);
    if (ret) {
        fprintf(stderr, "wl-transparent: the blocked read failed: %s\n",
                strerror((int)(intptr_t)ret));
        return 3;
    }
    return 0;
}

static int dup2_range(double cpu_ms)
{
    struct stat null_st, st;
    int null_fd;

    wl_spin(cpu_ms);
    null_fd = open("/dev/null", O_RDWR);
    if (null_fd < 0 || fstat(null_fd, &null_st) < 0) {
        perror("wl-transparent: /dev/null");
        return 1;
    }
    for (int fd = 3; fd < 64; fd++)
        if (fd != null_fd && dup2(null_fd, fd) != fd) {
            fprintf(stderr, "wl-transparent: dup2(%d, %d): %s\n", null_fd, fd, strerror(errno));
            return 1;
        }
    wl_spin(cpu_ms);
    for (int fd = 3; fd < 64; fd++)
        if (fstat(fd, &st) < 0 || st.st_ino != null_st.st_ino || st.st_dev != null_st.st_dev) {
            fprintf(stderr, "wl-transparent: descriptor %d is no longer /dev/null\n", fd);
            return 4;
        }
    return 0;
}

static int raw_close_range(double cpu_ms)
{
    int pipes[8][2];

    wl_spin(cpu_ms);
    if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0) {
        perror("wl-transparent: close_range");
        return 1;
    }
    for (int i = 0; i < 8; i++)
        if (pipe(pipes[i]) < 0) {
            perror("wl-transparent: pipe");
            return 1;
        }
    wl_spin(cpu_ms);
    for (int i = 0; i < 8; i++) {
        char c = (char)('a' + i), back = 0;

        if (write(pipes[i][1], &c, 1) != 1 || read(pipes[i][0], &back, 1) != 1 || back != c) {
            fprintf(stderr, "wl-transparent: pipe %d (fds %d, %d) is no longer its own\n", i,
                    pipes[i][0], pipes[i][1]);
            return 5;
        }
    }
    return 0;
}

/* The raw thread: system calls only (it has no TLS of its own), 50 ms after it starts, so
 * that the process was idle for a while before. */
static int raw_closer(void *arg)
{
    struct timespec ts = {0, 50 * 1000 * 1000};

    (void)arg;
    (void)syscall(SYS_nanosleep, &ts, NULL);
    (void)syscall(SYS_close_range, 3u, ~0u, 0u);
    syscall(SYS_exit, 0);
    return 0;
}

static int idle_close_range(double ms)
{
    static char stack[64 * 1024] __attribute__((aligned(16)));
    struct timespec ts = {(time_t)(ms / 1000),
                          (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    DIR *dir;
    struct dirent *e;

    if (clone(raw_closer, stack + sizeof(stack),
              CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM,
              NULL) < 0) {
        perror("wl-transparent: clone");
        return 1;
    }
    /* One call: the process does nothing else meanwhile (a loop of short sleeps would). A
     * sample taken while the thread still ran ends it early (EINTR): then the rest. */
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    dir = opendir("/proc/self/fd");
    if (!dir) {
        perror("wl-transparent: /proc/self/fd");
        return 1;
    }
    while ((e = readdir(dir)) != NULL) {
        char path[300], target[256];
        ssize_t n;

        if (atoi(e->d_name) < 3 || atoi(e->d_name) == dirfd(dir))
            continue;
        (void)snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        n = readlink(path, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            printf("%s %s\n", e->d_name, target);
        }
    }
    closedir(dir);
    return 0;
}

static int dup2_ours(double cpu_ms)
{
    int targets[64], count = 0, p[2];
    DIR *dir;
    struct dirent *e;

    wl_spin(cpu_ms);
    dir = opendir("/proc/self/fd");
    if (!dir) {
        perror("wl-transparent: /proc/self/fd");
        return 1;
    }
    while ((e = readdir(dir)) != NULL && count < 64) {
        int fd = atoi(e->d_name);

        if (fd >= 3 && fd != dirfd(dir))
            targets[count++] = fd;
    }
    closedir(dir);
    if (pipe(p) < 0) {
        perror("wl-transparent: pipe");
        return 1;
    }
    for (int i = 0; i < count; i++)
        if (targets[i] != p[0] && targets[i] != p[1] && dup2(p[1], targets[i]) != targets[i]) {
            fprintf(stderr, "wl-transparent: dup2(%d, %d): %s\n", p[1], targets[i],
                    strerror(errno));
            return 1;
        }
    wl_spin(cpu_ms);
    /* Each copy of the write end carries one byte of its own; nothing else may be in the
     * pipe (a profiler writing through a number it lost would add bytes). */
    for (int i = 0; i < count; i++) {
        char c = (char)('A' + i % 26), back = 0;

        if (targets[i] == p[0] || targets[i] == p[1])
            continue;
        if (write(targets[i], &c, 1) != 1 || read(p[0], &back, 1) != 1 || back != c) {
            fprintf(stderr, "wl-transparent: descriptor %d carried '%c', not '%c'\n", targets[i],
                    back, c);
            return 6;
        }
    }
    if (fcntl(p[0], F_SETFL, O_NONBLOCK) == 0) {
        char extra;

        if (read(p[0], &extra, 1) == 1) {
            fprintf(stderr, "wl-transparent: a byte nobody wrote is in the pipe\n");
            return 6;
        }
    }
    printf("replaced %d descriptors\n", count);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    if (!strcmp(mode, "blocked-thread") && argc > 2)
        return blocked_thread(atof(argv[2]));
    if (!strcmp(mode, "dup2-range") && argc > 2)
        return dup2_range(atof(argv[2]));
    if (!strcmp(mode, "first-fd")) {
        printf("first descriptor: %d\n", open("/dev/null", O_RDONLY));
        return 0;
    }
    if (!strcmp(mode, "dup2-ours") && argc > 2)
        return dup2_ours(atof(argv[2]));
    if (!strcmp(mode, "raw-close-range") && argc > 2)
        return raw_close_range(atof(argv[2]));
    if (!strcmp(mode, "idle-close-range") && argc > 2)
        return idle_close_range(atof(argv[2]));
    fprintf(stderr, "wl-transparent: unknown mode '%s' (see the file's header)\n", mode);
    return 2;
}
