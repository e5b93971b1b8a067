/*
 * `moefold compare --megatron-log FILE [--cluster NAME|FILE] [--json] [--strict] [-- FLAGS]`:
 * a Megatron-LM training log as the measured side of compare. The log's arguments dump becomes
 * Megatron flags (cli/megatron_log.h), which go through the same parser and layout rules as
 * `moefold predict` (moe_cli_parse_problem, moe_cli_resolve) with --gpus = the log's world_size;
 * the layout moefold rebuilds is checked against what Megatron printed (data_parallel_size,
 * virtual_pipeline_model_parallel_size). Printed: predicted vs measured step time (the log's
 * steady-state median), TFLOPS/GPU (moefold's FLOPs per step over the measured step, next to
 * Megatron's own TFLOP/s figure when the log has it) and peak memory (the largest `max reserved`
 * of any rank against the predicted total of the worst pipeline stage).
 *
 * The cluster is not in the log: --cluster names it; without it the GPU name nvidia-smi printed in
 * the log picks the reference system with that GPU. Flags after `--` are Megatron flags applied
 * on top of the log's (e.g. --vocab-size when the log does not print it). --strict refuses a log
 * with arguments moefold does not know whose names belong to what it prices.
 */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/megatron_log.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

struct log_opts {
    const char *log_path;
    const char *cluster;
    bool json;
    bool strict;
    int num_extra;
    char **extra; /* Megatron flags after `--` */
};

static int usage(FILE *out)
{
    fprintf(
        out,
        "usage: moefold compare --megatron-log FILE [--cluster NAME|FILE] [--json] [--strict]\n"
        "                       [-- MEGATRON FLAGS]\n"
        "  --megatron-log FILE  a Megatron-LM training log (stdout of the job, all ranks or\n"
        "                       rank 0 and the last rank; launcher prefixes and other output\n"
        "                       are passed over)\n"
        "  --cluster            the cluster it ran on (default: the reference system whose GPU\n"
        "                       nvidia-smi printed in the log)\n"
        "  --json               one JSON object on stdout\n"
        "  --strict             refuse arguments moefold does not know whose names belong to\n"
        "                       what it prices (moe_*, recompute*, fp8*, ...)\n"
        "  -- FLAGS             Megatron flags applied on top of the log's (e.g. --vocab-size)\n");
    return out == stdout ? 0 : 2;
}

static int parse_args(int argc, char **argv, struct log_opts *o)
{
    static const struct option longs[] = {{"megatron-log", required_argument, NULL, 'm'},
                                          {"cluster", required_argument, NULL, 'c'},
                                          {"json", no_argument, NULL, 'j'},
                                          {"strict", no_argument, NULL, 's'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof(*o));
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+m:c:jsh", longs, NULL)) != -1) {
        if (c == 'm') {
            o->log_path = optarg;
        } else if (c == 'c') {
            o->cluster = optarg;
        } else if (c == 'j') {
            o->json = true;
        } else if (c == 's') {
            o->strict = true;
        } else if (c == 'h') {
            return usage(stdout) - 1;
        } else {
            fprintf(stderr, "moefold compare: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            return usage(stderr);
        }
    }
    if (o->log_path == NULL) {
        return usage(stderr);
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0) {
        fprintf(stderr,
                "moefold compare: unexpected argument '%s' (Megatron flags that override the "
                "log's go after `--`)\n",
                argv[optind]);
        return 2;
    }
    o->num_extra = argc - optind;
    o->extra = argv + optind;
    return 0;
}

/* The error of a flag-parser or layout message, placed at the log line the flag came from. */
static void report_flag_error(const struct log_opts *o,
                              const struct moe_megatron_log *log,
                              const struct moe_diag *diag)
{
    int line = moe_mlog_flag_line(log, diag->source);
    if (line > 0) {
        fprintf(stderr, "moefold compare: %s:%d: the argument behind %s: %s\n", o->log_path, line,
                diag->source, diag->message);
    } else {
        fprintf(stderr, "moefold compare: %s: %s\n", o->log_path, diag->message);
    }
}

/* Cluster name: --cluster, else the reference system for the log's GPU. */
static int pick_cluster(const struct log_opts *o,
                        const struct moe_megatron_log *log,
                        char *name,
                        size_t len,
                        char *why,
                        size_t why_len)
{
    if (o->cluster != NULL) {
        (void)snprintf(name, len, "%s", o->cluster);
        (void)snprintf(why, why_len, "--cluster");
        return 0;
    }
    if (log->device_name[0] == '\0') {
        fprintf(stderr,
                "moefold compare: %s names no GPU (no nvidia-smi output in it): give --cluster "
                "NAME|FILE (see `moefold clusters`)\n",
                o->log_path);
        return 1;
    }
    char others[512];
    if (!moe_mlog_cluster_for_device(log->device_name, name, len, others, sizeof(others))) {
        fprintf(stderr,
                "moefold compare: %s ran on '%s', which matches no single reference cluster: give "
                "--cluster NAME|FILE (see `moefold clusters`)\n",
                o->log_path, log->device_name);
        return 1;
    }
    (void)snprintf(why, why_len, "the log's GPU '%s'%s%s%s%s", log->device_name,
                   log->device_ambiguous ? " (the log names several GPUs)" : "",
                   others[0] ? "; other systems with this GPU: " : "", others,
                   others[0] ? " (pass --cluster)" : "");
    return 0;
}

/* Parse the log's flags (+ the user's) into a problem and resolve its layout. */
static int build_problem(const struct log_opts *o,
                         const struct moe_megatron_log *log,
                         char *cluster,
                         struct moe_cli_problem *p)
{
    int argc = 0;
    char **argv = malloc(((size_t)log->num_words + (size_t)o->num_extra + 8) * sizeof(*argv));
    if (argv == NULL) {
        fprintf(stderr, "moefold compare: out of memory\n");
        return 1;
    }
    char gpus[32];
    (void)snprintf(gpus, sizeof(gpus), "%d", log->world_size);
    argv[argc++] = (char *)"compare";
    argv[argc++] = (char *)"--gpus";
    argv[argc++] = gpus;
    for (int i = 0; i < log->num_words; i++) {
        argv[argc++] = log->words[i];
    }
    for (int i = 0; i < o->num_extra; i++) {
        argv[argc++] = o->extra[i];
    }
    argv[argc++] = (char *)"--cluster";
    argv[argc++] = cluster;
    bool vocab = false;
    for (int i = 0; i < argc && !vocab; i++) {
        vocab = strncmp(argv[i], "--vocab-size", 12) == 0;
    }
    if (!vocab) {
        fprintf(stderr,
                "moefold compare: %s does not state the vocabulary size (vocab_size is None and no "
                "'> padded vocab (size: N)' line): give it after `--`, e.g. `-- --vocab-size "
                "151936`\n",
                o->log_path);
        free(argv);
        return 1;
    }
    struct moe_diag diag = {0};
    enum moe_status st = moe_cli_parse_problem(argc, argv, NULL, NULL, p, NULL, &diag);
    free(argv);
    if (st == MOE_OK) {
        st = moe_cli_resolve(p, &diag);
    }
    if (st != MOE_OK) {
        report_flag_error(o, log, &diag);
        return 1;
    }
    if (log->dump_dp > 0 && log->dump_dp != p->lay.dp) {
        fprintf(stderr,
                "moefold compare: %s:%d: data_parallel_size is %d but the layout moefold rebuilt "
                "from the arguments has DP %d\n",
                o->log_path, log->dump_dp_line, log->dump_dp, p->lay.dp);
        return 1;
    }
    if (log->dump_vpp > 0 && log->dump_vpp != p->lay.vpp) {
        fprintf(stderr,
                "moefold compare: %s:%d: virtual_pipeline_model_parallel_size is %d but the "
                "layout moefold rebuilt from the arguments has VPP %d\n",
                o->log_path, log->dump_vpp_line, log->dump_vpp, p->lay.vpp);
        return 1;
    }
    return 0;
}

static double err_pct(double pred, double meas)
{
    return meas > 0.0 ? 100.0 * (pred / meas - 1.0) : (double)NAN;
}

static void print_notes(FILE *out, const struct moe_megatron_log *log, const char *path)
{
    for (int i = 0; i < log->num_unknown; i++) {
        const struct moe_mlog_unknown *u = &log->unknown[i];
        fprintf(out,
                "note: %s:%d: %s = %s is not an argument moefold knows; if it changes "
                "performance, the prediction does not include it\n",
                path, u->line, u->name, u->value);
    }
    if (log->num_unknown_more > 0) {
        fprintf(out, "note: %d more such arguments\n", log->num_unknown_more);
    }
    if (log->vocab_from_line > 0) {
        fprintf(out, "note: vocabulary from line %d ('> padded vocab (size: N)')\n",
                log->vocab_from_line);
    }
}

static void print_table(const struct log_opts *o,
                        const struct moe_megatron_log *log,
                        const struct moe_cli_problem *p,
                        const struct moe_prediction *pr,
                        const char *why)
{
    char lays[256];
    moe_cli_layout_str(&p->lay, lays, sizeof(lays));
    printf("# moefold compare --megatron-log %s\n", o->log_path);
    printf("# run: %s model, %d layers, hidden %d", p->cfg.name, p->cfg.num_layers,
           p->cfg.hidden_size);
    if (p->cfg.num_experts > 0) {
        printf(", %d experts top-%d", p->cfg.num_experts, p->cfg.moe_router_topk);
    }
    printf(", seq %d, on %d x %s (%s)\n", p->lay.seq_length, p->lay.num_gpus, p->cl.name,
           p->cl.gpu.name);
    printf("# cluster from %s\n", why);
    printf("# layout: %s\n", lays);
    printf("# log: arguments at line %d (%d arguments: %d read as Megatron flags, %d not), %d "
           "iteration lines, %d used (iterations %d-%d, %d iterations of %d per line): %d "
           "warm-up, %d with skipped/NaN iterations, %d at another batch size, %d cut short\n",
           log->args_line, log->num_args, log->num_args_read, log->num_args_unread,
           log->num_iter_lines, log->iteration_lines_used, log->first_iter_used,
           log->last_iter_used, log->iterations_used, log->log_interval, log->num_warmup,
           log->num_skipped, log->num_rampup, log->num_cut_short);
    double meas_tflops = pr->flops_per_step / log->step_time_s / p->lay.num_gpus / 1e12;
    printf("%-28s %12s %12s %9s\n", "", "predicted", "measured", "error");
    printf("%-28s %12.3f %12.3f %+8.1f%%   median; lines range %.3f-%.3f s\n", "step time (s)",
           pr->step_time_s, log->step_time_s, err_pct(pr->step_time_s, log->step_time_s),
           log->step_time_min_s, log->step_time_max_s);
    printf("%-28s %12.1f %12.1f %+8.1f%%   moefold's FLOPs per step (%.4g) / step time\n",
           "TFLOPS/GPU", pr->tflops_per_gpu, meas_tflops, err_pct(pr->tflops_per_gpu, meas_tflops),
           pr->flops_per_step);
    if (log->has_megatron_tflops) {
        printf("%-28s %12s %12.1f %9s   Megatron's own FLOPs count (moefold's is %+.1f%% off it)\n",
               "TFLOPS/GPU (Megatron's)", "-", log->megatron_tflops, "",
               err_pct(meas_tflops, log->megatron_tflops));
    } else {
        printf("%-28s %12s %12s %9s   (this log prints no TFLOP/s field)\n",
               "TFLOPS/GPU (Megatron's)", "-", "-", "");
    }
    if (log->has_memory) {
        printf("%-28s %12.2f %12.2f %+8.1f%%   max reserved on rank %d (%d ranks reported); max "
               "allocated %.2f GiB\n",
               "peak memory (GiB)", pr->mem.total / GIB, log->max_reserved_bytes / GIB,
               err_pct(pr->mem.total, log->max_reserved_bytes), log->max_reserved_rank,
               log->num_memory_ranks, log->max_allocated_bytes / GIB);
    } else {
        printf("%-28s %12.2f %12s %9s   (no memory report in the log)\n", "peak memory (GiB)",
               pr->mem.total / GIB, "-", "");
    }
    if (log->has_theoretical) {
        printf("%-28s %12s %12.2f %9s   Megatron's own estimate (theoretical memory)\n",
               "  Megatron's estimate (GiB)", "", log->theoretical_bytes / GIB, "");
    }
    printf("capacity %.2f GiB per GPU; predicted worst stage %d: weights %.2f, grads %.2f, "
           "optimizer %.2f, activations %.2f, buffers %.2f GiB\n",
           pr->mem.capacity / GIB, pr->worst_stage, pr->mem.weights / GIB, pr->mem.grads / GIB,
           pr->mem.optimizer / GIB, pr->mem.activations / GIB, pr->mem.buffers / GIB);
    print_notes(stdout, log, o->log_path);
}

static cJSON *compare_json(const struct log_opts *o,
                           const struct moe_megatron_log *log,
                           const struct moe_cli_problem *p,
                           const struct moe_prediction *pr,
                           const char *why)
{
    cJSON *j = cJSON_CreateObject();
    if (j == NULL) {
        return NULL;
    }
    double meas_tflops = pr->flops_per_step / log->step_time_s / p->lay.num_gpus / 1e12;
    cJSON_AddStringToObject(j, "log", o->log_path);
    cJSON_AddStringToObject(j, "cluster", p->cl.name);
    cJSON_AddStringToObject(j, "cluster_from", why);
    cJSON_AddNumberToObject(j, "measured_step_time_s", log->step_time_s);
    cJSON_AddNumberToObject(j, "predicted_step_time_s", pr->step_time_s);
    cJSON_AddNumberToObject(j, "step_time_error_pct", err_pct(pr->step_time_s, log->step_time_s));
    cJSON_AddNumberToObject(j, "measured_tflops_per_gpu", meas_tflops);
    cJSON_AddNumberToObject(j, "predicted_tflops_per_gpu", pr->tflops_per_gpu);
    if (log->has_megatron_tflops) {
        cJSON_AddNumberToObject(j, "megatron_tflops_per_gpu", log->megatron_tflops);
    } else {
        cJSON_AddNullToObject(j, "megatron_tflops_per_gpu");
    }
    cJSON_AddNumberToObject(j, "flops_per_step", pr->flops_per_step);
    cJSON_AddNumberToObject(j, "iterations_used", log->iterations_used);
    cJSON_AddNumberToObject(j, "iteration_lines_used", log->iteration_lines_used);
    cJSON_AddNumberToObject(j, "first_iteration_used", log->first_iter_used);
    cJSON_AddNumberToObject(j, "last_iteration_used", log->last_iter_used);
    cJSON_AddNumberToObject(j, "global_batch_size", log->global_batch_size);
    cJSON *m = cJSON_AddObjectToObject(j, "memory");
    cJSON_AddNumberToObject(m, "predicted_total_gib", pr->mem.total / GIB);
    cJSON_AddNumberToObject(m, "capacity_gib", pr->mem.capacity / GIB);
    if (log->has_memory) {
        cJSON_AddNumberToObject(m, "measured_max_reserved_gib", log->max_reserved_bytes / GIB);
        cJSON_AddNumberToObject(m, "measured_max_allocated_gib", log->max_allocated_bytes / GIB);
        cJSON_AddNumberToObject(m, "rank", log->max_reserved_rank);
        cJSON_AddNumberToObject(m, "ranks_reporting", log->num_memory_ranks);
        cJSON_AddNumberToObject(m, "error_pct", err_pct(pr->mem.total, log->max_reserved_bytes));
    } else {
        cJSON_AddNullToObject(m, "measured_max_reserved_gib");
    }
    if (log->has_theoretical) {
        cJSON_AddNumberToObject(m, "megatron_theoretical_gib", log->theoretical_bytes / GIB);
    }
    cJSON *args = cJSON_AddArrayToObject(j, "megatron_args");
    for (int i = 0; i < log->num_words; i++) {
        cJSON_AddItemToArray(args, cJSON_CreateString(log->words[i]));
    }
    cJSON *unk = cJSON_AddArrayToObject(j, "unknown_args");
    for (int i = 0; i < log->num_unknown; i++) {
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "name", log->unknown[i].name);
        cJSON_AddStringToObject(u, "value", log->unknown[i].value);
        cJSON_AddNumberToObject(u, "line", log->unknown[i].line);
        cJSON_AddItemToArray(unk, u);
    }
    cJSON_AddNumberToObject(j, "world_size", log->world_size);
    if (log->device_name[0] != '\0') {
        cJSON_AddStringToObject(j, "device_name", log->device_name);
    }
    cJSON_AddItemToObject(j, "prediction", moe_cli_prediction_json(p, pr));
    return j;
}

static int run(const struct log_opts *o, struct moe_megatron_log *log, struct moe_cli_problem *p)
{
    struct moe_diag diag = {0};
    if (moe_mlog_read_file(o->log_path, log, &diag) != MOE_OK) {
        fprintf(stderr, "moefold compare: %s\n", diag.message);
        return 1;
    }
    if (o->strict && log->num_unknown > 0) {
        print_notes(stderr, log, o->log_path);
        fprintf(stderr, "moefold compare: --strict: %s has arguments moefold does not know\n",
                o->log_path);
        return 1;
    }
    char cluster[1024];
    char why[1024];
    if (pick_cluster(o, log, cluster, sizeof(cluster), why, sizeof(why)) != 0 ||
        build_problem(o, log, cluster, p) != 0) {
        return 1;
    }
    struct moe_load_stats load;
    bool auto_load = false;
    struct moe_prediction pred;
    if (moe_cli_load_stats(p, &load, &auto_load, &diag) != MOE_OK ||
        moe_cli_run_predict(p, auto_load ? &load : NULL, &pred, &diag) != MOE_OK) {
        moe_cli_error("compare", &diag);
        return 1;
    }
    if (o->json) {
        cJSON *j = compare_json(o, log, p, &pred, why);
        char *s = j != NULL ? cJSON_Print(j) : NULL;
        if (s == NULL) {
            cJSON_Delete(j);
            fprintf(stderr, "moefold compare: out of memory\n");
            return 1;
        }
        puts(s);
        free(s);
        cJSON_Delete(j);
    } else {
        print_table(o, log, p, &pred, why);
    }
    return 0;
}

int moe_cli_compare_megatron_log(int argc, char **argv)
{
    struct log_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc != 0) {
        return prc < 0 ? 0 : prc;
    }
    struct moe_megatron_log log;
    moe_mlog_init(&log);
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        fprintf(stderr, "moefold compare: out of memory\n");
        return 1;
    }
    int rc = run(&o, &log, p);
    moe_mlog_fini(&log);
    free(p);
    return rc;
}
