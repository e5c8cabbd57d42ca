/* tools/cmd-capture.h - the two commands that gather a fleet into one profile file.
 *
 * `fleetprof capture` asks a running fleetprofd over its socket; `fleetprof record` runs the
 * daemon in-process on a private socket around one command. Both show the same progress
 * meter on stderr while gathering (gather_meter below). tools/fleetprof.c dispatches to them.
 */
#ifndef FLEETPROF_TOOLS_CMD_CAPTURE_H
#define FLEETPROF_TOOLS_CMD_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* fleetprof capture [-o FILE] [--timeout S]: argv[0] is "capture"; socket_path (borrowed) is
 * the daemon's socket. Returns the exit status: 0 written, 1 failed (explained on stderr),
 * 2 usage error. */
int cmd_capture(const char *socket_path, int argc, char **argv);

/* fleetprof record [OPTIONS] -- CMD [ARGS]: argv[0] is "record". Returns CMD's exit status
 * (128 + signal if a signal ended it), 1 if CMD succeeded but no profile was written, 2 for a
 * usage error, 126/127 when CMD cannot be run, 130 when aborted by a second Ctrl-C. */
int cmd_record(int argc, char **argv);

/* The --pprof of both: loads the profile json_path just written and writes it as pprof to
 * pprof_path (tools/export-pprof.h); says what it wrote on out, or why it could not on
 * stderr, after who ("fleetprof record"). Returns 0 or a negative errno. */
int write_pprof_beside(const char *json_path, const char *pprof_path, const char *who, FILE *out);

/* The processes a written file lacks, one line each (at most 5, then how many more), after
 * who ("fleetprof record"): what record and capture print under their last line. */
struct daemon_lost_process;
void print_lost(FILE *out, const char *who, uint32_t lost, const struct daemon_lost_process *list,
                size_t listed);

/* A progress display for gathering, on stderr. On a terminal: one line redrawn in place
 * ("gathering: 3/9 processes, 12.4 MiB") and erased by gather_meter_finish(); otherwise at
 * most one line every 0.5 s and a final line. One thread; embed it. */
struct gather_meter {
    bool tty;         /* stderr is a terminal */
    bool drawn;       /* a tty line is on the screen */
    bool updated;     /* the last update is not on screen yet (not tty) */
    uint64_t last_ns; /* CLOCK_MONOTONIC of the last line printed (not tty) */
    uint32_t done;    /* processes complete, as last reported */
    uint32_t total;   /* processes asked, as last reported */
    uint64_t bytes;   /* profile bytes received, as last reported */
};

void gather_meter_init(struct gather_meter *m);
void gather_meter_update(struct gather_meter *m, uint32_t done, uint32_t total, uint64_t bytes);
/* Erases the tty line before something else is printed; the next update redraws it. */
void gather_meter_clear(struct gather_meter *m);
/* Erases the line (tty) or prints the final state (not tty). */
void gather_meter_finish(struct gather_meter *m);

/* "100 B", "812 KiB", "12.4 MiB", "1.2 GiB" into out (always NUL-terminated). */
void gather_format_bytes(char *out, size_t size, uint64_t bytes);

#endif /* FLEETPROF_TOOLS_CMD_CAPTURE_H */
