/*
 * moefold: plan, predict and compare MoE training layouts. This file only dispatches to the
 * subcommands (cli/cmd_*.c); each prints its own --help.
 */
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

#ifndef MOEFOLD_VERSION
#define MOEFOLD_VERSION "0.1.0"
#endif

struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

static const struct subcommand subcommands[] = {
    {"models", moe_cli_models, "list built-in model presets with total and active parameters"},
    {"clusters", moe_cli_clusters, "list cluster files (topologies/*.json)"},
    {"predict", moe_cli_predict, "memory, step time and throughput of one layout"},
    {"plan", moe_cli_plan, "search every layout and option for the fastest plan that fits"},
    {"whatif", moe_cli_whatif, "best plan as GPU count, cluster, batch, precision... vary"},
    {"accuracy", moe_cli_accuracy, "predictions vs published training runs"},
    {"fit", moe_cli_fit, "fit a cluster's software figures to measured runs"},
    {"compare", moe_cli_compare, "predicted vs measured, per phase (plan.json run.json)"},
    {"calibrate", moe_cli_calibrate, "measure this host as a cluster file (runs moefold-bench)"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: moefold <command> [options]   (moefold <command> --help for its options)\n\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    }
    fprintf(out, "\n  --version  print the version\n  --help     this text\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        printf("moefold %s\n", MOEFOLD_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        if (strcmp(cmd, subcommands[i].name) == 0) {
            return subcommands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "moefold: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
