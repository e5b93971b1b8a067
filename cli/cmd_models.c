/*
 * `moefold models` and `moefold clusters`: list the built-in model presets (with total and active
 * parameter counts, MTP shown separately) and the cluster files. --json prints one object.
 */
#include "cli/commands.h"
#include "model/config.h"
#include "topologies/cluster_file.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int list_usage(const char *what, FILE *out)
{
    fprintf(out, "usage: moefold %s [--json]\n", what);
    return out == stdout ? 0 : 2;
}

/* Returns 1 for --json, 0 for plain, -1 for --help, -2 for a bad flag. */
static int parse_list_flags(int argc, char **argv, const char *what)
{
    static const struct option longs[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int json = 0;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "jh", longs, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'h') {
            return -1;
        } else {
            fprintf(stderr, "moefold %s: unknown option '%s'\n", what, argv[optind - 1]);
            return -2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "moefold %s: unexpected argument '%s'\n", what, argv[optind]);
        return -2;
    }
    return json;
}

int moe_cli_models(int argc, char **argv)
{
    int json = parse_list_flags(argc, argv, "models");
    if (json < 0) {
        return list_usage("models", json == -1 ? stdout : stderr);
    }
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json) {
        printf(
            "# built-in model presets (parameters in billions; total includes MTP layers, active "
            "excludes them as published)\n");
        printf("%-18s %6s %7s %5s %6s %9s %9s %9s\n", "name", "layers", "hidden", "exp", "top-k",
               "total_B", "active_B", "mtp_B");
    }
    for (size_t i = 0; i < moe_cfg_num_presets(); i++) {
        const struct moe_model_cfg *cfg = moe_cfg_preset_at(i);
        struct moe_param_counts pc;
        moe_cfg_param_counts(cfg, 1, &pc);
        double mtp = pc.total - pc.total_no_mtp;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", cfg->name);
            cJSON_AddNumberToObject(o, "num_layers", cfg->num_layers);
            cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden_size);
            cJSON_AddNumberToObject(o, "num_experts", cfg->num_experts);
            cJSON_AddNumberToObject(o, "moe_router_topk", cfg->moe_router_topk);
            cJSON_AddNumberToObject(o, "params_total", pc.total);
            cJSON_AddNumberToObject(o, "params_active", pc.active_no_mtp);
            cJSON_AddNumberToObject(o, "params_mtp", mtp);
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%-18s %6d %7d %5d %6d %9.1f %9.1f %9.1f\n", cfg->name, cfg->num_layers,
                   cfg->hidden_size, cfg->num_experts, cfg->moe_router_topk, pc.total / 1e9,
                   pc.active_no_mtp / 1e9, mtp / 1e9);
        }
    }
    if (json) {
        char *s = cJSON_Print(arr);
        if (s != NULL) {
            puts(s);
            free(s);
        }
        cJSON_Delete(arr);
    }
    return 0;
}

static void print_header(const char *last)
{
    printf("%-18s %-10s %5s %6s %7s %7s %6s %7s %8s %6s %6s%s%s\n", "name", "gpu", "node", "nvl",
           "bf16_TF", "fp8_TF", "fp4_TF", "HBM_GiB", "nvl_GB/s", "nic", "max", last[0] ? "  " : "",
           last);
}

/* One cluster's row (text) or object (JSON); base is "" for a reference system. */
static void cluster_row(const struct moe_cluster *cl, const char *base, cJSON *arr)
{
    if (arr != NULL) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", cl->name);
        cJSON_AddStringToObject(o, "kind", base[0] ? "cloud" : "reference");
        if (base[0]) {
            cJSON_AddStringToObject(o, "extends", base);
        }
        cJSON_AddStringToObject(o, "gpu", cl->gpu.name);
        cJSON_AddStringToObject(o, "description", cl->description);
        cJSON_AddNumberToObject(o, "gpus_per_node", cl->gpus_per_node);
        cJSON_AddNumberToObject(o, "nvlink_domain_gpus", cl->nvlink.domain_gpus);
        cJSON_AddNumberToObject(o, "bf16_tflops", cl->gpu.peak_tflops[MOE_MATH_BF16]);
        cJSON_AddNumberToObject(o, "fp8_tflops", cl->gpu.peak_tflops[MOE_MATH_FP8]);
        cJSON_AddNumberToObject(o, "fp4_tflops", cl->gpu.peak_tflops[MOE_MATH_FP4]);
        cJSON_AddNumberToObject(o, "hbm_gib", cl->gpu.hbm_gib);
        cJSON_AddNumberToObject(o, "nvlink_gbps", cl->nvlink.gbps);
        cJSON_AddNumberToObject(o, "nic_gbps", cl->net.nic_gbps);
        cJSON_AddNumberToObject(o, "max_gpus", cl->max_gpus);
        cJSON_AddItemToArray(arr, o);
        return;
    }
    printf("%-18s %-10.10s %5d %6d %7.0f %7.0f %6.0f %7.1f %8.0f %6.0f %6d%s%s\n", cl->name,
           cl->gpu.name, cl->gpus_per_node, cl->nvlink.domain_gpus,
           cl->gpu.peak_tflops[MOE_MATH_BF16], cl->gpu.peak_tflops[MOE_MATH_FP8],
           cl->gpu.peak_tflops[MOE_MATH_FP4], cl->gpu.hbm_gib, cl->nvlink.gbps, cl->net.nic_gbps,
           cl->max_gpus, base[0] ? "  " : "", base);
}

/* List the clusters of one kind (reference systems or the files extending another); 1 when a
 * file fails to load. */
static int list_group(char (*names)[MOE_NAME_LEN], size_t n, bool cloud, cJSON *arr)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct moe_cluster cl;
        struct moe_diag d = {0};
        char base[MOE_NAME_LEN] = "";
        if (moe_cluster_file_base(names[i], base, sizeof(base), &d) != MOE_OK ||
            (base[0] != '\0') != cloud) {
            if (d.message[0] != '\0' && !cloud) {
                fprintf(stderr, "moefold clusters: %s: %s\n", names[i], d.message);
                rc = 1;
            }
            continue;
        }
        if (moe_cluster_load(names[i], &cl, &d) != MOE_OK) {
            fprintf(stderr, "moefold clusters: %s: %s\n", names[i], d.message);
            rc = 1;
            continue;
        }
        cluster_row(&cl, base, arr);
    }
    return rc;
}

int moe_cli_clusters(int argc, char **argv)
{
    int json = parse_list_flags(argc, argv, "clusters");
    if (json < 0) {
        return list_usage("clusters", json == -1 ? stdout : stderr);
    }
    char names[256][MOE_NAME_LEN];
    size_t n = 0;
    struct moe_diag diag = {0};
    if (moe_cluster_list(names, 256, &n, &diag) != MOE_OK) {
        fprintf(stderr, "moefold clusters: %s\n", diag.message);
        return 1;
    }
    char dir[1024];
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json) {
        printf("# cluster files in %s\n", moe_cluster_dir(dir, sizeof(dir)));
        printf("# reference systems (NVIDIA's designs, InfiniBand or NVLink scale-out)\n");
        print_header("");
    }
    int rc = list_group(names, n, false, arr);
    if (!json) {
        printf("\n# cloud and other systems (files that extend a reference system: only what "
               "differs is stated)\n");
        print_header("extends");
    }
    rc |= list_group(names, n, true, arr);
    if (json) {
        char *s = cJSON_Print(arr);
        if (s != NULL) {
            puts(s);
            free(s);
        }
        cJSON_Delete(arr);
    }
    return rc;
}
