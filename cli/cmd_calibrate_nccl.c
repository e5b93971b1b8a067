/*
 * `moefold calibrate --nccl-tests FILE... [--deepep FILE...] --base CLUSTER [--out FILE]
 * [--name NAME] [--deepep-nodes N] [--json]`: the network figures of a cluster from the
 * nccl-tests tables and DeepEP test outputs users already have (cli/nccl_tests.h).
 *
 * Each usable table gets latency and bus bandwidth fitted (moe_nt_fit_table). Its placement -- one
 * NVLink domain (one node; on a multi-node NVLink system, at most a domain's GPUs) or several --
 * decides which figure of model/comm_cost.c it measures, inverted through the same formulas:
 *
 *   one domain   all_gather / reduce_scatter    nvlink.eff = busbw / nvlink.gbps, nvlink.latency_us
 *                all_reduce (NVLS, > 2 ranks)   nvlink.nvls_busbw_gbps = busbw
 *                all_reduce (no NVLS), alltoall, sendrecv: nvlink.eff (lower priority)
 *   several      sendrecv                       scaleout.eff = busbw / nic_gbps,
 * scaleout.latency_us all_gather / reduce_scatter    scaleout.eff = busbw / (local x nic_gbps)
 * (ring), when under the NVLink ring rate all_reduce                     scaleout.eff from the
 * hierarchical schedule NCCL runs across nodes: each GPU's NIC carries 2 (N-1)/N x S / local bytes
 * (N nodes, local GPUs per node), so NIC rate = busbw (N-1)/N n/((n-1) local) alltoall
 * scaleout.a2a_eff = busbw (n - local) / ((n-1) nic) DeepEP       test_intranode (NVL GB/s)
 * dispatch.deepep_intra_eff = mean / nvlink.gbps test_internode (RDMA GB/s)
 * dispatch.deepep_inter_eff = mean x (N-1)/N / nic (DeepEP counts the local node's share as RDMA)
 *
 * Several tables for one figure: the kind listed first wins, then the most ranks. The result is a
 * cluster file that "extends" the base and states only the figures measured, each with
 * "source": "nccl-tests: FILE (...)", so every other figure keeps the base's own source.
 */
#include "cli/commands.h"
#include "cli/nccl_tests.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FILES 64
#define FRAC_MAX  1.5 /* the cluster loader's range for achieved fractions */

struct meas_opts {
    const char *nt_files[MAX_FILES];
    int num_nt;
    const char *deepep_files[MAX_FILES];
    int num_deepep;
    const char *base;
    const char *out;
    const char *name;
    int deepep_nodes;
    bool json;
};

enum target {
    T_NVL_EFF,
    T_NVLS,
    T_NVL_LAT,
    T_NET_EFF,
    T_NET_LAT,
    T_A2A_EFF,
    T_DEEPEP_INTRA,
    T_DEEPEP_INTER,
    NUM_TARGETS,
};

static const char *const target_section[NUM_TARGETS] = {
    "nvlink", "nvlink", "nvlink", "scaleout", "scaleout", "scaleout", "dispatch", "dispatch"};
static const char *const target_key[NUM_TARGETS] = {
    "eff",        "nvls_busbw_gbps", "latency_us",       "eff",
    "latency_us", "a2a_eff",         "deepep_intra_eff", "deepep_inter_eff"};

struct candidate {
    bool set;
    int priority; /* lower wins */
    int ranks;    /* then more ranks */
    double value;
    char source[768];
};

static int usage(FILE *out)
{
    fprintf(out,
            "usage: moefold calibrate --nccl-tests FILE... [--deepep FILE...] --base CLUSTER\n"
            "                         [--out FILE] [--name NAME] [--deepep-nodes N] [--json]\n"
            "  --nccl-tests FILE...  outputs of nccl-tests' all_reduce_perf, all_gather_perf,\n"
            "                        reduce_scatter_perf, alltoall_perf, sendrecv_perf (one or\n"
            "                        more tests per file, noise included)\n"
            "  --deepep FILE...      outputs of DeepEP's test_intranode.py / test_internode.py\n"
            "  --base CLUSTER        the cluster the figures replace figures of (name or file)\n"
            "  --out FILE            cluster file to write (default <topologies>/<name>.json)\n"
            "  --name NAME           its name (default <base>-measured)\n"
            "  --deepep-nodes N      nodes of a test_internode.py run with 4 or more nodes (its\n"
            "                        output says num_topk_groups = min(nodes, 4))\n"
            "  --json                the tables, fits and replaced figures as JSON\n");
    return out == stdout ? 0 : 2;
}

static int parse(int argc, char **argv, struct meas_opts *o)
{
    memset(o, 0, sizeof(*o));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool nt = strcmp(a, "--nccl-tests") == 0;
        if (nt || strcmp(a, "--deepep") == 0) {
            int before = nt ? o->num_nt : o->num_deepep;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if ((nt ? o->num_nt : o->num_deepep) >= MAX_FILES) {
                    fprintf(stderr, "moefold calibrate: more than %d files\n", MAX_FILES);
                    return 2;
                }
                if (nt) {
                    o->nt_files[o->num_nt++] = argv[++i];
                } else {
                    o->deepep_files[o->num_deepep++] = argv[++i];
                }
            }
            if ((nt ? o->num_nt : o->num_deepep) == before) {
                fprintf(stderr, "moefold calibrate: %s needs one or more files\n", a);
                return 2;
            }
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            return -1;
        } else if (i + 1 < argc && (strcmp(a, "--base") == 0 || strcmp(a, "--out") == 0 ||
                                    strcmp(a, "--name") == 0 || strcmp(a, "--deepep-nodes") == 0)) {
            const char *v = argv[++i];
            if (strcmp(a, "--base") == 0) {
                o->base = v;
            } else if (strcmp(a, "--out") == 0) {
                o->out = v;
            } else if (strcmp(a, "--name") == 0) {
                o->name = v;
            } else {
                char *end = NULL;
                long n = strtol(v, &end, 10);
                if (end == v || *end != '\0' || n < 2 || n > 100000) {
                    fprintf(stderr,
                            "moefold calibrate: --deepep-nodes '%s': expected an integer >= 2\n",
                            v);
                    return 2;
                }
                o->deepep_nodes = (int)n;
            }
        } else {
            fprintf(stderr, "moefold calibrate: unknown or incomplete option '%s'\n", a);
            return 2;
        }
    }
    if (o->base == NULL) {
        fprintf(stderr, "moefold calibrate: give --base CLUSTER (the cluster whose network "
                        "figures the measurements replace; see `moefold clusters`)\n");
        return 2;
    }
    return 0;
}

static void
offer(struct candidate *c, enum target t, int priority, int ranks, double value, const char *source)
{
    struct candidate *k = &c[t];
    if (!isfinite(value) || value <= 0.0) {
        return;
    }
    if (k->set && (priority > k->priority || (priority == k->priority && ranks <= k->ranks))) {
        return;
    }
    k->set = true;
    k->priority = priority;
    k->ranks = ranks;
    k->value = value;
    (void)snprintf(k->source, sizeof(k->source), "%s", source);
}

/* The figures one fitted table measures (see the file comment). */
static void offer_table(struct candidate *c,
                        const struct moe_cluster *base,
                        const struct moe_nt_table *t,
                        const struct moe_nt_fit *f,
                        const char *file)
{
    int n = t->ranks;
    int nodes = t->nodes > 0 ? t->nodes : 1;
    bool mnnvl = base->nvlink.domain_gpus > base->gpus_per_node;
    bool intra = nodes == 1 || (mnnvl && n <= base->nvlink.domain_gpus);
    int local = intra ? n : (mnnvl ? base->nvlink.domain_gpus : n / nodes);
    double nv = base->nvlink.gbps;
    double nic = base->net.nic_gbps;
    double b = f->busbw_gbps;
    double l = f->latency_us;
    char src[768];
    (void)snprintf(src, sizeof(src),
                   "nccl-tests: %s (%s_perf at line %d, %d ranks on %d node%s%s%s): fitted bus "
                   "bandwidth %.1f GB/s (the table: %.1f GB/s at %.0f bytes), latency %.1f us",
                   file, t->collective, t->header_line, n, nodes, nodes > 1 ? "s" : "",
                   t->device[0] ? ", " : "", t->device, b, f->busbw_at_max, f->max_bytes, l);
    char with[1024];
    if (intra) {
        switch (t->coll) {
        case MOE_NT_ALL_GATHER:
        case MOE_NT_REDUCE_SCATTER:
            (void)snprintf(with, sizeof(with), "%s; / nvlink.gbps %.0f", src, nv);
            offer(c, T_NVL_EFF, 1, n, b / nv, with);
            offer(c, T_NVL_LAT, 1, n, l, src);
            break;
        case MOE_NT_ALL_REDUCE:
            if (base->nvlink.has_nvls && n > 2) {
                offer(c, T_NVLS, 1, n, b, src);
            } else {
                (void)snprintf(with, sizeof(with), "%s; / nvlink.gbps %.0f", src, nv);
                offer(c, T_NVL_EFF, 2, n, b / nv, with);
            }
            (void)snprintf(with, sizeof(with), "%s; all-reduce pays it twice", src);
            offer(c, T_NVL_LAT, 2, n, l / 2.0, with);
            break;
        case MOE_NT_ALLTOALL:
            (void)snprintf(with, sizeof(with), "%s; / nvlink.gbps %.0f", src, nv);
            offer(c, T_NVL_EFF, 3, n, b / nv, with);
            break;
        case MOE_NT_SENDRECV:
            (void)snprintf(with, sizeof(with), "%s; / nvlink.gbps %.0f", src, nv);
            offer(c, T_NVL_EFF, 4, n, b / nv, with);
            offer(c, T_NVL_LAT, 3, n, l, src);
            break;
        default:
            break;
        }
        return;
    }
    double big_n = (double)nodes;
    switch (t->coll) {
    case MOE_NT_SENDRECV:
        (void)snprintf(with, sizeof(with), "%s; / nic_gbps %.1f", src, nic);
        offer(c, T_NET_EFF, 1, n, b / nic, with);
        offer(c, T_NET_LAT, 1, n, l, src);
        break;
    case MOE_NT_ALL_GATHER:
    case MOE_NT_REDUCE_SCATTER:
        if (b < 0.98 * nv * base->nvlink.eff) { /* the ring's network hop is the bottleneck */
            (void)snprintf(with, sizeof(with), "%s; ring across nodes: / (%d GPUs x %.1f GB/s)",
                           src, local, nic);
            offer(c, T_NET_EFF, 2, n, b / (local * nic), with);
            (void)snprintf(with, sizeof(with), "%s; less nvlink.latency_us %.1f", src,
                           base->nvlink.latency_us);
            offer(c, T_NET_LAT, 2, n, fmax(0.0, l - base->nvlink.latency_us), with);
        }
        break;
    case MOE_NT_ALL_REDUCE: {
        double rate = b * (big_n - 1.0) / big_n * n / ((n - 1.0) * local);
        (void)snprintf(with, sizeof(with),
                       "%s; hierarchical all-reduce: each GPU's NIC carries 2(N-1)/N x S/%d, "
                       "%.1f GB/s of %.1f",
                       src, local, rate, nic);
        offer(c, T_NET_EFF, 3, n, rate / nic, with);
        break;
    }
    case MOE_NT_ALLTOALL: {
        double rate = b * (n - local) / (n - 1.0);
        (void)snprintf(with, sizeof(with),
                       "%s; the remote share (%d of %d peers) through each GPU's NIC: %.1f GB/s "
                       "of %.1f",
                       src, n - local, n - 1, rate, nic);
        offer(c, T_A2A_EFF, 1, n, rate / nic, with);
        break;
    }
    default:
        break;
    }
}

/* DeepEP runs -> dispatcher efficiencies. Returns 0 or 1 after printing why. */
static int offer_deepep(struct candidate *c,
                        const struct moe_cluster *base,
                        const struct meas_opts *o,
                        const char *file,
                        const struct moe_deepep_run *d)
{
    char src[768];
    if (!d->internode) {
        double mean = 0.5 * (d->dispatch_nvl_gbps + d->combine_nvl_gbps);
        (void)snprintf(src, sizeof(src),
                       "DeepEP test_intranode.py: %s (best BF16 dispatch %.1f, combine %.1f GB/s "
                       "(NVL), %d tokens x hidden %d, top-%d): mean %.1f / nvlink.gbps %.0f",
                       file, d->dispatch_nvl_gbps, d->combine_nvl_gbps, d->num_tokens, d->hidden,
                       d->num_topk, mean, base->nvlink.gbps);
        offer(c, T_DEEPEP_INTRA, 1, 8, mean / base->nvlink.gbps, src);
        return 0;
    }
    int nodes =
        d->num_topk_groups > 1 && d->num_topk_groups < 4 ? d->num_topk_groups : o->deepep_nodes;
    if (nodes < 2) {
        fprintf(stderr,
                "moefold calibrate: %s: a test_internode.py run with num_topk_groups = %d "
                "(= min(nodes, 4)) does not say how many nodes it spanned: give "
                "--deepep-nodes N\n",
                file, d->num_topk_groups);
        return 1;
    }
    double mean = 0.5 * (d->dispatch_rdma_gbps + d->combine_rdma_gbps);
    double rate = mean * (nodes - 1.0) / nodes;
    (void)snprintf(src, sizeof(src),
                   "DeepEP test_internode.py: %s (best BF16 dispatch %.1f, combine %.1f GB/s "
                   "(RDMA), %d nodes): the remote share (N-1)/N of the mean, %.1f GB/s / nic_gbps "
                   "%.1f",
                   file, d->dispatch_rdma_gbps, d->combine_rdma_gbps, nodes, rate,
                   base->net.nic_gbps);
    offer(c, T_DEEPEP_INTER, 1, nodes * 8, rate / base->net.nic_gbps, src);
    return 0;
}

/* The base's current value of a target. */
static double base_value(const struct moe_cluster *cl, enum target t)
{
    const double v[NUM_TARGETS] = {cl->nvlink.eff,
                                   cl->nvlink.nvls_busbw_gbps,
                                   cl->nvlink.latency_us,
                                   cl->net.eff,
                                   cl->net.latency_us,
                                   cl->net.a2a_eff,
                                   cl->dispatch.deepep_intra_eff,
                                   cl->dispatch.deepep_inter_eff};
    return v[t];
}

/* The extending cluster file: name, description, "extends", the measured figures. */
static cJSON *build_tree(const struct meas_opts *o,
                         const struct moe_cluster *base,
                         const char *name,
                         const char *base_ref,
                         const struct candidate *c)
{
    cJSON *root = cJSON_CreateObject();
    if (root == NULL) {
        return NULL;
    }
    char desc[1024];
    (void)snprintf(desc, sizeof(desc), "%s, with network figures measured by nccl-tests%s",
                   base->description, o->num_deepep > 0 ? " and DeepEP tests" : "");
    cJSON_AddStringToObject(root, "format", MOE_CLUSTER_FILE_FORMAT);
    cJSON_AddNumberToObject(root, "version", MOE_CLUSTER_FILE_VERSION);
    cJSON_AddStringToObject(root, "name", name);
    cJSON_AddStringToObject(root, "description", desc);
    cJSON_AddStringToObject(root, "extends", base_ref);
    for (int t = 0; t < NUM_TARGETS; t++) {
        if (!c[t].set) {
            continue;
        }
        cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, target_section[t]);
        if (sec == NULL) {
            sec = cJSON_AddObjectToObject(root, target_section[t]);
        }
        cJSON *fig = cJSON_AddObjectToObject(sec, target_key[t]);
        cJSON_AddNumberToObject(fig, "value", c[t].value);
        cJSON_AddStringToObject(fig, "source", c[t].source);
        char note[128];
        (void)snprintf(note, sizeof(note), "replaces %.4g of %s", base_value(base, (enum target)t),
                       base->name);
        cJSON_AddStringToObject(fig, "note", note);
    }
    return root;
}

struct table_ref {
    const char *file;
    struct moe_nt_table t;
    struct moe_nt_fit fit;
    bool fitted;
};

static void print_report(const struct table_ref *tabs,
                         int nt,
                         const struct moe_cluster *base,
                         const struct candidate *c,
                         const char *out_path)
{
    printf("# moefold calibrate --nccl-tests: base %s (%s)\n", base->name, base->gpu.name);
    printf("%-34s %-15s %5s %5s %12s %9s %9s %9s %6s\n", "file:line", "collective", "ranks",
           "nodes", "max_bytes", "busbw@max", "fit_busbw", "fit_lat", "rms");
    for (int i = 0; i < nt; i++) {
        const struct table_ref *r = &tabs[i];
        char at[64];
        const char *base_name = strrchr(r->file, '/');
        (void)snprintf(at, sizeof(at), "%.50s:%d", base_name ? base_name + 1 : r->file,
                       r->t.header_line);
        if (!r->fitted) {
            printf("%-34s %-15s %5d %5d  rejected: %s\n", at,
                   r->t.collective[0] ? r->t.collective : "?", r->t.ranks, r->t.nodes, r->t.why);
            continue;
        }
        printf("%-34s %-15s %5d %5d %12.4g %9.2f %9.2f %9.2f %6.3f%s\n", at, r->t.collective,
               r->t.ranks, r->t.nodes, r->fit.max_bytes, r->fit.busbw_at_max, r->fit.busbw_gbps,
               r->fit.latency_us, r->fit.rms_rel_resid, r->t.has_footer ? "" : "  (cut short)");
    }
    printf("\n%-28s %10s %10s  %s\n", "figure", base->name, "measured", "from");
    for (int t = 0; t < NUM_TARGETS; t++) {
        if (c[t].set) {
            char fig[64];
            (void)snprintf(fig, sizeof(fig), "%s.%s", target_section[t], target_key[t]);
            printf("%-28s %10.4g %10.4g  %.90s...\n", fig, base_value(base, (enum target)t),
                   c[t].value, c[t].source);
        }
    }
    printf("wrote %s (extends %s; every other figure is the base's)\n", out_path, base->name);
}

static cJSON *report_json(const struct table_ref *tabs,
                          int nt,
                          const struct moe_cluster *base,
                          const struct candidate *c,
                          const char *out_path)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *tables = cJSON_AddArrayToObject(j, "tables");
    cJSON *rejected = cJSON_AddArrayToObject(j, "rejected");
    for (int i = 0; i < nt; i++) {
        const struct table_ref *r = &tabs[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", r->file);
        if (!r->fitted) {
            char why[320];
            (void)snprintf(why, sizeof(why), "line %d: %s", r->t.header_line, r->t.why);
            cJSON_AddStringToObject(o, "why", why);
            cJSON_AddItemToArray(rejected, o);
            continue;
        }
        cJSON_AddStringToObject(o, "collective", r->t.collective);
        cJSON_AddNumberToObject(o, "line", r->t.header_line);
        cJSON_AddNumberToObject(o, "ranks", r->t.ranks);
        cJSON_AddNumberToObject(o, "nodes", r->t.nodes);
        cJSON_AddNumberToObject(o, "max_size_bytes", r->fit.max_bytes);
        cJSON_AddNumberToObject(o, "busbw_GBps_at_max", r->fit.busbw_at_max);
        cJSON *f = cJSON_AddObjectToObject(o, "fit");
        cJSON_AddNumberToObject(f, "latency_us", r->fit.latency_us);
        cJSON_AddNumberToObject(f, "busbw_GBps", r->fit.busbw_gbps);
        cJSON_AddNumberToObject(f, "rms_rel_resid", r->fit.rms_rel_resid);
        cJSON_AddNumberToObject(f, "points", r->fit.points);
        cJSON_AddItemToArray(tables, o);
    }
    cJSON *rep = cJSON_AddArrayToObject(j, "replaced");
    for (int t = 0; t < NUM_TARGETS; t++) {
        if (c[t].set) {
            cJSON *o = cJSON_CreateObject();
            char fig[64];
            (void)snprintf(fig, sizeof(fig), "%s.%s", target_section[t], target_key[t]);
            cJSON_AddStringToObject(o, "figure", fig);
            cJSON_AddNumberToObject(o, "old", base_value(base, (enum target)t));
            cJSON_AddNumberToObject(o, "new", c[t].value);
            cJSON_AddStringToObject(o, "source", c[t].source);
            cJSON_AddItemToArray(rep, o);
        }
    }
    cJSON_AddStringToObject(j, "cluster_file", out_path);
    return j;
}

/* Read every nccl-tests file; fill tabs (realloc'd); -1 on a fatal error. */
static int read_tables(const struct meas_opts *o,
                       const struct moe_cluster *base,
                       struct candidate *c,
                       struct table_ref **tabs,
                       int *nt)
{
    for (int i = 0; i < o->num_nt; i++) {
        struct moe_nt_file f;
        struct moe_diag diag = {0};
        moe_nt_file_init(&f);
        if (moe_nt_read_file(o->nt_files[i], &f, &diag) != MOE_OK) {
            fprintf(stderr, "moefold calibrate: %s\n", diag.message);
            moe_nt_file_fini(&f);
            continue; /* the rest are used */
        }
        struct table_ref *grown = realloc(*tabs, (size_t)(*nt + f.num_tables) * sizeof(**tabs));
        if (grown == NULL) {
            moe_nt_file_fini(&f);
            return -1;
        }
        *tabs = grown;
        for (int k = 0; k < f.num_tables; k++) {
            struct table_ref *r = &(*tabs)[(*nt)++];
            memset(r, 0, sizeof(*r));
            r->file = o->nt_files[i];
            r->t = f.tables[k];
            if (r->t.usable && moe_nt_fit_table(&r->t, &r->fit, &diag) != MOE_OK) {
                r->t.usable = false;
                (void)snprintf(r->t.why, sizeof(r->t.why), "%.255s", diag.message);
            }
            r->fitted = r->t.usable;
            if (r->fitted) {
                offer_table(c, base, &r->t, &r->fit, r->file);
            }
        }
        moe_nt_file_fini(&f);
    }
    return 0;
}

static int
read_deepep(const struct meas_opts *o, const struct moe_cluster *base, struct candidate *c)
{
    int bad = 0;
    for (int i = 0; i < o->num_deepep; i++) {
        char *text = NULL;
        size_t len = 0;
        struct moe_diag diag = {0};
        struct moe_deepep_run d;
        if (moe_file_read_all(o->deepep_files[i], &text, &len, &diag) != MOE_OK ||
            moe_deepep_parse(text, len, o->deepep_files[i], &d, &diag) != MOE_OK) {
            fprintf(stderr, "moefold calibrate: %s\n", diag.message);
            bad++;
        } else {
            bad += offer_deepep(c, base, o, o->deepep_files[i], &d);
        }
        free(text);
    }
    return bad;
}

/* Where the file goes and what it extends. */
static void paths(const struct meas_opts *o,
                  const struct moe_cluster *base,
                  char *name,
                  size_t name_len,
                  char *out,
                  size_t out_len,
                  char *base_ref,
                  size_t ref_len)
{
    (void)snprintf(name, name_len, "%s", o->name != NULL ? o->name : "");
    if (o->name == NULL) {
        (void)snprintf(name, name_len, "%.200s-measured", base->name);
    }
    char dir[PATH_MAX];
    if (o->out != NULL) {
        (void)snprintf(out, out_len, "%s", o->out);
    } else {
        (void)snprintf(out, out_len, "%.3000s/%.200s.json", moe_cluster_dir(dir, sizeof(dir)),
                       name);
    }
    bool is_path = strchr(o->base, '/') != NULL || strstr(o->base, ".json") != NULL;
    char cwd[PATH_MAX];
    if (is_path && o->base[0] != '/' && getcwd(cwd, sizeof(cwd)) != NULL) {
        (void)snprintf(base_ref, ref_len, "%.3000s/%.1000s", cwd, o->base);
    } else {
        (void)snprintf(base_ref, ref_len, "%s", o->base);
    }
}

static int run(const struct meas_opts *o, struct table_ref **tabs, int *nt)
{
    struct moe_cluster base;
    struct moe_diag diag = {0};
    if (moe_cluster_load(o->base, &base, &diag) != MOE_OK) {
        fprintf(stderr, "moefold calibrate: --base: %s\n", diag.message);
        return 1;
    }
    struct candidate c[NUM_TARGETS];
    memset(c, 0, sizeof(c));
    if (read_tables(o, &base, c, tabs, nt) != 0) {
        fprintf(stderr, "moefold calibrate: out of memory\n");
        return 1;
    }
    int bad_deepep = read_deepep(o, &base, c);
    bool any = false;
    for (int t = 0; t < NUM_TARGETS; t++) {
        any = any || c[t].set;
    }
    if (!any) {
        for (int i = 0; i < *nt; i++) {
            fprintf(stderr, "moefold calibrate: %s:%d: %s\n", (*tabs)[i].file,
                    (*tabs)[i].t.header_line,
                    (*tabs)[i].fitted ? "measures no figure of the base (see --help)"
                                      : (*tabs)[i].t.why);
        }
        fprintf(stderr, "moefold calibrate: no usable measurement; nothing written\n");
        return 1;
    }
    char name[256];
    char out_path[PATH_MAX];
    char base_ref[PATH_MAX];
    paths(o, &base, name, sizeof(name), out_path, sizeof(out_path), base_ref, sizeof(base_ref));
    cJSON *tree = build_tree(o, &base, name, base_ref, c);
    struct moe_cluster check;
    if (tree == NULL || moe_cluster_from_json(tree, out_path, &check, &diag) != MOE_OK ||
        moe_json_write_file(out_path, tree, &diag) != MOE_OK) {
        fprintf(stderr, "moefold calibrate: %s\n", tree == NULL ? "out of memory" : diag.message);
        cJSON_Delete(tree);
        return 1;
    }
    cJSON_Delete(tree);
    if (o->json) {
        cJSON *j = report_json(*tabs, *nt, &base, c, out_path);
        char *s = j != NULL ? cJSON_Print(j) : NULL;
        if (s != NULL) {
            puts(s);
        }
        free(s);
        cJSON_Delete(j);
    } else {
        print_report(*tabs, *nt, &base, c, out_path);
    }
    return bad_deepep > 0 ? 1 : 0;
}

int moe_cli_calibrate_measured(int argc, char **argv)
{
    struct meas_opts o;
    int prc = parse(argc, argv, &o);
    if (prc != 0) {
        return prc < 0 ? usage(stdout) : prc;
    }
    if (o.num_nt == 0 && o.num_deepep == 0) {
        return usage(stderr);
    }
    struct table_ref *tabs = NULL;
    int nt = 0;
    int rc = run(&o, &tabs, &nt);
    free(tabs);
    return rc;
}
