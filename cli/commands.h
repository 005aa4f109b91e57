/* commands.h: the sparsejit CLI's subcommands; main.c dispatches on argv[1]. Each returns the
 * process exit code (0 ok, 1 failure, 2 bad usage) and prints its own --help. */
#ifndef SJ_CLI_COMMANDS_H
#define SJ_CLI_COMMANDS_H

int cmd_info(int argc, char **argv);   /* cli/cmd_info.c */
int cmd_gen(int argc, char **argv);    /* cli/cmd_gen.c */
int cmd_bench(int argc, char **argv);  /* cli/cmd_bench.c */
int cmd_tune(int argc, char **argv);   /* cli/cmd_tune.c */
int cmd_cache(int argc, char **argv);  /* cli/cmd_cache.c */
int cmd_run(int argc, char **argv);    /* cli/cmd_run.c: Lua scripts */

#endif
