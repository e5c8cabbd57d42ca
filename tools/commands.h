/* tools/commands.h - fleetprof subcommands that live in their own files (tools/cmd-*.c).
 *
 * Each takes the command's own argc/argv (argv[0] is the command name, getopt-ready) and
 * returns the process exit status: 0 success, 1 failure (already explained on stderr),
 * 2 usage error. tools/fleetprof.c's main() dispatches to them by name.
 */
#ifndef FLEETPROF_TOOLS_COMMANDS_H
#define FLEETPROF_TOOLS_COMMANDS_H

#include <stdbool.h>

/* fleetprof summary FILE [--json] [--top N] */
int cmd_summary(int argc, char **argv);

/* fleetprof merge -o OUT IN... */
int cmd_merge(int argc, char **argv);

/* fleetprof export --format collapsed|pprof [--split] [-o OUT] IN (cmd-export.c) */
int cmd_export(int argc, char **argv);

/* fleetprof recover -o OUT FILE.chunks... (cmd-recover.c) */
int cmd_recover(int argc, char **argv);
/* Whether path names a chunk file (fleetprof-PID.chunks). */
bool is_chunk_file(const char *path);
/* Recovers the chunk file at path into out_path, with a line on stderr; 0 or a negative
 * errno (already explained). */
int recover_chunks_to(const char *path, const char *out_path, bool quiet);
/* The same into a new file named after near (near.recovered.XXXXXX), returned in *ret_tmp
 * (caller unlinks and frees). */
int recover_chunks_to_temp(const char *path, const char *near, char **ret_tmp);

/* fleetprof top [--interval S] [--once] [--json] [--group NAME]: socket_path (borrowed) is
 * the daemon's socket. */
int cmd_top(const char *socket_path, int argc, char **argv);

#endif /* FLEETPROF_TOOLS_COMMANDS_H */
