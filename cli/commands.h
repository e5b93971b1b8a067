/*
 * Subcommands of the `moefold` binary. Each lives in cli/cmd_<name>.c, takes the arguments after
 * its name (argv[0] is the subcommand name) and returns the process exit status: 0 on success,
 * 1 on bad input or an infeasible request (after printing a message naming the problem), 2 on usage
 * errors. Rank-0-only printing does not apply here: `moefold` is a single process.
 */
#ifndef MOE_CLI_COMMANDS_H
#define MOE_CLI_COMMANDS_H

#ifdef __cplusplus
extern "C" {
#endif

int moe_cli_models(int argc, char **argv);
int moe_cli_clusters(int argc, char **argv);
int moe_cli_predict(int argc, char **argv);
int moe_cli_plan(int argc, char **argv);
int moe_cli_whatif(int argc, char **argv);
int moe_cli_compare(int argc, char **argv);
/* `moefold compare --megatron-log FILE ...` (cli/cmd_compare_log.c); moe_cli_compare hands over. */
int moe_cli_compare_megatron_log(int argc, char **argv);
int moe_cli_calibrate(int argc, char **argv);
/* `moefold calibrate --nccl-tests/--deepep ...` (cli/cmd_calibrate_nccl.c); moe_cli_calibrate hands
 * over. */
int moe_cli_calibrate_measured(int argc, char **argv);
int moe_cli_accuracy(int argc, char **argv);
int moe_cli_fit(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_COMMANDS_H */
