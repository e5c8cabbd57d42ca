/* tools/commands.h - fleetprof subcommands that live in their own files (tools/cmd-*.c).
 *
 * Each takes the command's own argc/argv (argv[0] is the command name, getopt-ready) and
 * returns the process exit status: 0 success, 1 failure (already explained on stderr),
 * 2 usage error. tools/fleetprof.c's main() dispatches to them by name.
 */
#ifndef FLEETPROF_TOOLS_COMMANDS_H
#define FLEETPROF_TOOLS_COMMANDS_H

/* fleetprof summary FILE [--json] [--top N] */
int cmd_summary(int argc, char **argv);

/* fleetprof merge -o OUT IN... */
int cmd_merge(int argc, char **argv);

/* fleetprof export --format collapsed|pprof [--split] [-o OUT] IN (cmd-export.c) */
int cmd_export(int argc, char **argv);

/* fleetprof recover -o OUT FILE.chunks... (cmd-recover.c) */
int cmd_recover(int argc, char **argv);

/* fleetprof top [--interval S] [--once] [--json] [--group NAME]: socket_path (borrowed) is
 * the daemon's socket. */
int cmd_top(const char *socket_path, int argc, char **argv);

#endif /* FLEETPROF_TOOLS_COMMANDS_H */
