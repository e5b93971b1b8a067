/*
 * `moefold calibrate --np N`: measure this host as a cluster. Runs `mpirun -np N moefold-bench
 * --json` (GEMM over shapes, grouped GEMM, memory and elementwise kernels, attention, quantisers,
 * every collective over sizes), fits the cost model's figures with GSL least squares (cli/
 * calibrate.c), prints each fit with its residual, and writes an ordinary cluster file usable
 * wherever --cluster is (default topologies/local.json).
 */
#include "cli/calibrate.h"
#include "cli/commands.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_BYTES (64L * 1024 * 1024)
#define MAX_BENCHES     8

struct calib_opts {
    int np;
    const char *out;
    const char *name;
    const char *bench_json[MAX_BENCHES]; /* --bench-json, each once; folded by `merge` */
    int num_bench_json;
    enum moe_calib_merge merge; /* --merge */
    const char *save_bench;
    const char *mpirun_args;
    bool json;
};

static int usage(FILE *out)
{
    fprintf(
        out,
        "usage: moefold calibrate [--np N] [--out FILE] [--name NAME] [--bench-json FILE]\n"
        "                         [--merge mean|least] [--save-bench FILE] [--mpirun-args ARGS]\n"
        "                         [--json]\n"
        "  --np N             MPI ranks to measure with (default 2; at most one per core for\n"
        "                     timing: hwloc's core count is printed)\n"
        "  --out FILE         cluster file to write (default <topologies>/local.json)\n"
        "  --name NAME        cluster name in the file (default local)\n"
        "  --bench-json FILE  fit an earlier `moefold-bench --json` output instead of running it;\n"
        "                     given more than once (up to 8: the same host and rank count, e.g.\n"
        "                     measured before and after an experiment), fit them folded by\n"
        "                     --merge\n"
        "  --merge mean|least how several --bench-json fold: each timing's mean (default), or\n"
        "                     each point's fastest bench (a host slowed for minutes by its\n"
        "                     neighbours in one bench, as in the runs a closed loop keeps the\n"
        "                     fastest of)\n"
        "  --save-bench FILE  keep the bench output (default <out>.bench.json)\n"
        "  --mpirun-args ARGS extra mpirun arguments, e.g. '--hostfile hosts' (default\n"
        "                     '--bind-to core')\n"
        "  --json             print the fitted figures as JSON\n"
        "       moefold calibrate --nccl-tests FILE... [--deepep FILE...] --base CLUSTER ...\n"
        "                         (network figures from nccl-tests / DeepEP outputs; --nccl-tests\n"
        "                         --help)\n");
    return out == stdout ? 0 : 2;
}

static int parse(int argc, char **argv, struct calib_opts *o)
{
    static const struct option longs[] = {{"np", required_argument, NULL, 'n'},
                                          {"out", required_argument, NULL, 'o'},
                                          {"name", required_argument, NULL, 'N'},
                                          {"bench-json", required_argument, NULL, 'b'},
                                          {"merge", required_argument, NULL, 'M'},
                                          {"save-bench", required_argument, NULL, 's'},
                                          {"mpirun-args", required_argument, NULL, 'm'},
                                          {"json", no_argument, NULL, 'j'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    o->np = 2;
    o->name = "local";
    o->mpirun_args = "--bind-to core";
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "n:o:N:b:M:s:m:jh", longs, NULL)) != -1) {
        switch (c) {
        case 'n': {
            char *end = NULL;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || v < 1 || v > 4096) {
                fprintf(stderr, "moefold calibrate: --np '%s': expected an integer in [1, 4096]\n",
                        optarg);
                return 2;
            }
            o->np = (int)v;
            break;
        }
        case 'o':
            o->out = optarg;
            break;
        case 'N':
            o->name = optarg;
            break;
        case 'b':
            if (o->num_bench_json == MAX_BENCHES) {
                fprintf(stderr, "moefold calibrate: --bench-json %s: at most %d benches\n", optarg,
                        MAX_BENCHES);
                return 2;
            }
            o->bench_json[o->num_bench_json++] = optarg;
            break;
        case 'M':
            if (strcmp(optarg, "mean") == 0 || strcmp(optarg, "least") == 0) {
                o->merge = optarg[0] == 'l' ? MOE_CALIB_MERGE_LEAST : MOE_CALIB_MERGE_MEAN;
            } else {
                fprintf(stderr, "moefold calibrate: --merge '%s': expected mean or least\n",
                        optarg);
                return 2;
            }
            break;
        case 's':
            o->save_bench = optarg;
            break;
        case 'm':
            o->mpirun_args = optarg;
            break;
        case 'j':
            o->json = true;
            break;
        case 'h':
            return -1;
        default:
            fprintf(stderr, "moefold calibrate: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "moefold calibrate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* Folder of the running executable (moefold-bench is built beside moefold). */
static void exe_dir(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0) {
        (void)snprintf(buf, len, ".");
        return;
    }
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash != NULL) {
        *slash = '\0';
    }
}

/* Run the bench under mpirun and return its stdout (malloc'd), or NULL after printing why. */
static char *run_bench(const struct calib_opts *o)
{
    char dir[PATH_MAX];
    exe_dir(dir, sizeof(dir));
    char bench[PATH_MAX + 32];
    (void)snprintf(bench, sizeof(bench), "%s/moefold-bench", dir);
    if (access(bench, X_OK) != 0) {
        fprintf(stderr, "moefold calibrate: %s not found; build it with `make engine`\n", bench);
        return NULL;
    }
    char cmd[PATH_MAX + 1024];
    (void)snprintf(cmd, sizeof(cmd), "mpirun -np %d %s %s --json", o->np, o->mpirun_args, bench);
    fprintf(stderr, "moefold calibrate: running %s\n", cmd);
    FILE *p = popen(cmd, "r");
    if (p == NULL) {
        fprintf(stderr, "moefold calibrate: cannot start mpirun\n");
        return NULL;
    }
    size_t cap = 1 << 16;
    size_t used = 0;
    char *buf = malloc(cap);
    bool oom = buf == NULL;
    while (!oom) {
        if (used + 4096 > cap) {
            if (cap > (size_t)BENCH_MAX_BYTES) {
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                oom = true;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + used, 1, cap - used - 1, p);
        if (got == 0) {
            break;
        }
        used += got;
    }
    int rc = pclose(p);
    if (oom) {
        free(buf);
        fprintf(stderr, "moefold calibrate: out of memory reading the bench output\n");
        return NULL;
    }
    buf[used] = '\0';
    if (rc != 0) {
        fprintf(stderr, "moefold calibrate: the bench failed (status %d); its output above\n", rc);
        free(buf);
        return NULL;
    }
    return buf;
}

/* GEMM curve RMS relative residual above which the bench was probably disturbed. */
#define CALIB_BUSY_RESID 0.15

static void print_report(const struct moe_calib_fit *f, const struct moe_cluster *cl)
{
    printf("# moefold calibrate: %s, %d rank(s) of %d core(s)\n", f->cpu_model, f->ranks, f->cores);
    printf("%-26s %14s  %s\n", "figure", "value", "fit");
    printf("%-26s %14.2f  fitted over %d shapes\n", "GEMM peak (GFLOP/s/rank)", f->gemm_peak_gflops,
           f->gemm_points);
    printf("%-26s %14.3f  eff = max (1 - exp(-F/half)) d/(d+half_dim), RMS residual %.3f\n",
           "GEMM max_eff", f->gemm_max_eff, f->gemm_rms_resid);
    printf("%-26s %14.3g  (FLOPs)\n", "GEMM half_flops", f->gemm_half_flops);
    printf("%-26s %14.3g  (rows: x d/(d+half_dim), d = narrowest dimension)\n", "GEMM half_dim",
           f->gemm_half_dim);
    printf("%-26s %14.3f  median grouped rate / the curve at each expert's rows, with\n",
           "grouped GEMM factor", f->grouped_eff);
    printf("%-26s %14.3g  (rows per expert: its own narrow-dimension term), RMS log residual "
           "%.3f\n",
           "grouped GEMM half_dim", f->grouped_half_dim, f->grouped_rms_resid);
    static const char *const labels[2] = {"grouped dgrad factor", "grouped wgrad factor"};
    static const char *const dirs[2] = {"backward-data", "backward-weight"};
    for (int i = 0; i < 2; i++) {
        if (f->grouped_bwd_eff[i] > 0.0) {
            printf("%-26s %14.3f  %s's own factor, half_dim %.3g rows, RMS log residual %.3f\n",
                   labels[i], f->grouped_bwd_eff[i], dirs[i], f->grouped_bwd_half_dim[i],
                   f->grouped_bwd_rms_resid[i]);
        } else {
            printf("%-26s %14s  the bench did not time the %s GEMM: priced as the forward\n",
                   labels[i], "-", dirs[i]);
        }
    }
    if (f->small_mnk > 0.0) {
        static const char *const names[3] = {"forward", "backward-data", "backward-weight"};
        printf("%-26s %14.3g  each expert's rows x in x out at or below: the host's small-matrix "
               "kernels, %d rows fitted apart (RMS log residual %.3f over all rows; one curve "
               "%.3f)\n",
               "grouped small GEMMs", f->small_mnk, f->small_points, f->grouped_split_rms,
               f->grouped_one_rms);
        for (int i = 0; i < 3; i++) {
            printf("%-26s %14.3f  %s, half_dim %.3g rows, RMS log residual %.3f\n",
                   i == 0 ? "  small factor" : "", f->small_eff[i], names[i], f->small_half_dim[i],
                   f->small_rms_resid[i]);
        }
    } else {
        printf("%-26s %14s  one curve fits the %d grouped rows (RMS log residual %.3f): no "
               "small-matrix regime\n",
               "grouped small GEMMs", "-", f->grouped_points, f->grouped_one_rms);
    }
    if (f->rank_spread_points > 0) {
        printf("%-26s %13.1f%%  slowest rank's GEMM time / the ranks' mean - 1 (mean of %d "
               "shapes): host.rank_spread, each collective that joins ranks waits this share of "
               "the compute before it\n",
               "rank speed spread", 100.0 * f->rank_spread, f->rank_spread_points);
    }
    if (f->probe_gemm_us > 0.0) {
        printf("%-26s %14.1f  the bench's %d^3 GEMM (the host probe's: compare --host-speed's "
               "reference)\n",
               "probe GEMM us", f->probe_gemm_us, MOE_CALIB_PROBE_DIM);
    }
    printf("%-26s %14.2f  streaming copy, largest working set\n", "memory GB/s per rank",
           f->mem_gbps);
    printf("%-26s %14.3f  median elementwise kernel rate / copy\n", "elementwise efficiency",
           f->elem_eff);
    printf("%-26s %14.3f / %.3f  median SwiGLU rate / copy at the engine's row widths (fwd / "
           "bwd; an exp per element)\n",
           "activation efficiency", f->act_eff, f->act_bwd_eff);
    if (f->bias_eff > 0.0) {
        printf("%-26s %14.3f / %.3f  median expert bias add / bias gradient rate / copy at the "
               "engine's widths (per-expert calls on cache-resident rows)\n",
               "bias efficiency", f->bias_eff, f->bias_bwd_eff);
    }
    printf("%-26s %14.3f  AdamW's rate / copy (the optimizer step's streams priced at it)\n",
           "optimizer efficiency", f->optimizer_eff);
    if (f->has_attention) {
        printf("%-26s %14.3f / %.3f  of the GEMM peak x d / (d + %.1f / %.1f) at head dim d "
               "(fwd / bwd)\n",
               "attention efficiency", f->attn_fwd_eff, f->attn_bwd_eff, f->attn_fwd_half_dim,
               f->attn_bwd_half_dim);
        printf("%-26s %14.2f / %.2f  us per query tile beyond one a head and call, where a "
               "window shorter than the keys tiles the queries (fwd / bwd)\n",
               "attention window tile", f->attn_tile_us[0], f->attn_tile_us[1]);
    } else {
        printf("%-26s %14s  (bench has no attention section: GEMM max_eff used)\n",
               "attention efficiency", "-");
    }
    if (f->has_quant) {
        printf("%-26s %14.2f  bytes-equivalent per element\n", "quantise->dequantise",
               f->quant_bytes_per_elem);
    }
    for (int c = 0; c < MOE_CALIB_NUM_COLL; c++) {
        const struct moe_calib_line *l = &f->coll[c];
        if (l->points >= 2) {
            printf("%-14s %-11s %7.2f GB/s  latency %.2f us, %d sizes, RMS rel. residual %.2f\n",
                   moe_calib_coll_name((enum moe_calib_coll)c), "busbw", l->busbw_gbps,
                   l->latency_us, l->points, l->rms_rel_resid);
        }
        if (l->num_sizes > 0) { /* the largest sizes of the per-size table the model reads */
            int last = l->num_sizes - 1;
            printf("%-14s %-11s %7.2f GB/s  at %.0f KiB, %.2f GB/s at %.0f KiB (%d sizes kept)\n",
                   "", "measured", l->size_busbw_gbps[last > 0 ? last - 1 : 0],
                   l->size_bytes[last > 0 ? last - 1 : 0] / 1024.0, l->size_busbw_gbps[last],
                   l->size_bytes[last] / 1024.0, l->num_sizes);
        }
    }
    printf("# cluster '%s': gpus_per_node 1, NVLink domain = %d ranks, max_gpus %d\n", cl->name,
           cl->nvlink.domain_gpus, cl->max_gpus);
}

int moe_cli_calibrate(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nccl-tests") == 0 || strcmp(argv[i], "--deepep") == 0) {
            return moe_cli_calibrate_measured(argc, argv);
        }
    }
    struct calib_opts o;
    memset(&o, 0, sizeof(o));
    int prc = parse(argc, argv, &o);
    if (prc != 0) {
        return prc < 0 ? usage(stdout) : usage(stderr);
    }
    char out_path[PATH_MAX];
    char dir[PATH_MAX - 32];
    if (o.out != NULL) {
        (void)snprintf(out_path, sizeof(out_path), "%s", o.out);
    } else {
        (void)snprintf(out_path, sizeof(out_path), "%s/%s.json", moe_cluster_dir(dir, sizeof(dir)),
                       o.name);
    }
    struct moe_diag diag = {0};
    cJSON *bench = NULL;
    char *text = NULL;
    if (o.num_bench_json > 0) {
        if (moe_json_read_file(o.bench_json[0], &bench, &diag) != MOE_OK) {
            fprintf(stderr, "moefold calibrate: %s\n", diag.message);
            return 1;
        }
        for (int i = 1; i < o.num_bench_json; i++) {
            cJSON *more = NULL;
            enum moe_status st = moe_json_read_file(o.bench_json[i], &more, &diag);
            if (st == MOE_OK) {
                st = moe_calib_merge_bench(bench, more, i, o.merge, &diag);
            }
            cJSON_Delete(more);
            if (st != MOE_OK) {
                fprintf(stderr, "moefold calibrate: %s: %s\n", o.bench_json[i], diag.message);
                cJSON_Delete(bench);
                return 1;
            }
        }
        if (o.num_bench_json > 1 && !o.json) {
            printf("# moefold calibrate: %s of %d benches' timings\n",
                   o.merge == MOE_CALIB_MERGE_LEAST ? "each point's fastest" : "the mean",
                   o.num_bench_json);
        }
    } else {
        text = run_bench(&o);
        if (text == NULL) {
            return 1;
        }
        if (moe_json_parse(text, strlen(text), "moefold-bench output", &bench, &diag) != MOE_OK) {
            fprintf(stderr, "moefold calibrate: %s\n", diag.message);
            free(text);
            return 1;
        }
        char save[PATH_MAX + 16];
        (void)snprintf(save, sizeof(save), "%s", o.save_bench != NULL ? o.save_bench : out_path);
        if (o.save_bench == NULL) {
            (void)snprintf(save, sizeof(save), "%s.bench.json", out_path);
        }
        if (moe_file_write_atomic(save, text, strlen(text), &diag) != MOE_OK) {
            fprintf(stderr, "moefold calibrate: %s\n", diag.message);
        }
        free(text);
    }
    struct moe_calib_fit fit;
    struct moe_cluster cl;
    int rc = 1;
    if (moe_calib_fit_bench(bench, &fit, &diag) != MOE_OK ||
        moe_calib_cluster(&fit, o.name, &cl, &diag) != MOE_OK) {
        fprintf(stderr, "moefold calibrate: %s\n", diag.message);
        goto out;
    }
    if (fit.gemm_rms_resid > CALIB_BUSY_RESID) {
        /* This project's 2-vCPU host: 0.07-0.09 on quiet calibrations, 0.27 with other work
         * running (GEMM peak 63 instead of 100 GFLOP/s); the file is still written. */
        fprintf(stderr,
                "moefold calibrate: warning: the GEMM curve misses its %d shapes by %.0f%% RMS "
                "(a quiet host fits within 10%%): other work probably ran during the bench; "
                "calibrate again on an idle host\n",
                fit.gemm_points, 100.0 * fit.gemm_rms_resid);
    }
    char host[256] = "this host";
    (void)gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    (void)strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    char source[1024]; /* host (< 256) + CPU model (< 128) + the fixed text: always fits */
    (void)snprintf(source, sizeof(source),
                   "measured by moefold calibrate on %s (%s, %d ranks), %s: moefold-bench sweeps "
                   "fitted with GSL least squares",
                   host, fit.cpu_model, fit.ranks, when);
    cJSON *cj = moe_cluster_to_json(&cl, source);
    if (cj == NULL || moe_json_write_file(out_path, cj, &diag) != MOE_OK) {
        fprintf(stderr, "moefold calibrate: %s\n",
                cj == NULL ? "out of memory building the cluster file" : diag.message);
        cJSON_Delete(cj);
        goto out;
    }
    cJSON_Delete(cj);
    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "cluster_file", out_path);
        cJSON_AddNumberToObject(j, "gemm_peak_gflops", fit.gemm_peak_gflops);
        cJSON_AddNumberToObject(j, "gemm_max_eff", fit.gemm_max_eff);
        cJSON_AddNumberToObject(j, "gemm_half_flops", fit.gemm_half_flops);
        cJSON_AddNumberToObject(j, "gemm_half_dim", fit.gemm_half_dim);
        cJSON_AddNumberToObject(j, "gemm_rms_resid", fit.gemm_rms_resid);
        cJSON_AddNumberToObject(j, "grouped_eff", fit.grouped_eff);
        cJSON_AddNumberToObject(j, "grouped_half_dim", fit.grouped_half_dim);
        cJSON_AddNumberToObject(j, "grouped_dgrad_eff", fit.grouped_bwd_eff[0]);
        cJSON_AddNumberToObject(j, "grouped_dgrad_half_dim", fit.grouped_bwd_half_dim[0]);
        cJSON_AddNumberToObject(j, "grouped_wgrad_eff", fit.grouped_bwd_eff[1]);
        cJSON_AddNumberToObject(j, "grouped_wgrad_half_dim", fit.grouped_bwd_half_dim[1]);
        cJSON_AddNumberToObject(j, "grouped_small_mnk", fit.small_mnk);
        cJSON_AddNumberToObject(j, "grouped_small_points", fit.small_points);
        cJSON *sm = cJSON_AddArrayToObject(j, "grouped_small_eff");
        cJSON *sh = cJSON_AddArrayToObject(j, "grouped_small_half_dim");
        for (int i = 0; i < 3; i++) {
            cJSON_AddItemToArray(sm, cJSON_CreateNumber(fit.small_eff[i]));
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(fit.small_half_dim[i]));
        }
        cJSON_AddNumberToObject(j, "rank_spread", fit.rank_spread);
        cJSON_AddNumberToObject(j, "probe_gemm_us", fit.probe_gemm_us);
        cJSON_AddNumberToObject(j, "mem_gbps", fit.mem_gbps);
        cJSON_AddNumberToObject(j, "elem_eff", fit.elem_eff);
        cJSON_AddNumberToObject(j, "act_eff", fit.act_eff);
        cJSON_AddNumberToObject(j, "act_bwd_eff", fit.act_bwd_eff);
        cJSON_AddNumberToObject(j, "bias_eff", fit.bias_eff);
        cJSON_AddNumberToObject(j, "bias_bwd_eff", fit.bias_bwd_eff);
        cJSON_AddNumberToObject(j, "optimizer_eff", fit.optimizer_eff);
        for (int c = 0; c < MOE_CALIB_NUM_COLL; c++) {
            cJSON *l = cJSON_AddObjectToObject(j, moe_calib_coll_name((enum moe_calib_coll)c));
            cJSON_AddNumberToObject(l, "busbw_gbps", fit.coll[c].busbw_gbps);
            cJSON_AddNumberToObject(l, "latency_us", fit.coll[c].latency_us);
            cJSON_AddNumberToObject(l, "rms_rel_resid", fit.coll[c].rms_rel_resid);
        }
        char *s = cJSON_Print(j);
        if (s != NULL) {
            puts(s);
            free(s);
        }
        cJSON_Delete(j);
    } else {
        print_report(&fit, &cl);
        printf("wrote %s\n", out_path);
    }
    rc = 0;
out:
    cJSON_Delete(bench);
    return rc;
}
