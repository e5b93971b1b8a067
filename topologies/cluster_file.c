/*
 * Cluster files: topologies/<name>.json ("format": "moefold-cluster", version 1) read into and
 * written from model/'s struct moe_cluster.
 *
 * One flat table (cluster_fields below) names every key, the object it belongs to, its place in the
 * struct, its kind and a loose sanity range; reading, writing and the known-key check all walk that
 * table, so the file format and the struct cannot drift apart. Every number is a figure {"value":
 * x, "source": "...", "note":
 * "..."} whose source must be non-empty; flags are plain booleans, names plain strings. Every key
 * is required and an unknown key is an error naming its full path (cluster.gpu.xyz) and the file.
 * The finer rules (positive bandwidths, fractions, node/domain shape) are moe_cluster_validate's,
 * which runs on every cluster read.
 *
 * Name lookup (moe_cluster_dir): $MOEFOLD_TOPOLOGIES; else the nearest folder named topologies/
 * holding *.json files, looking in the running executable's folder and up to six folders above it
 * (so build/bin/moefold, build/san/bin/moefold and build/bin/tests/<dir>/test_x all find the
 * source tree's topologies/); else ./topologies.
 */
#include "topologies/cluster_file.h"

#include "model/layout.h"
#include "topologies/cluster_costs.h"
#include "topologies/json_util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* How many folders above the executable's own folder are searched for topologies/. */
#define MOE_CLUSTER_DIR_LEVELS 6

enum field_kind {
    FIELD_REAL,   /* figure -> double */
    FIELD_INT,    /* figure -> int (value must be integral) */
    FIELD_BOOL,   /* plain JSON boolean */
    FIELD_STRING, /* plain JSON string, buffer of size `hi` */
    FIELD_OBJECT, /* nested object: the section `offset` names */
    FIELD_BUSBW,  /* optional per-size table (struct moe_busbw_table); absent = none */
};

/* The objects of a cluster file; each table row belongs to one (its parent). */
enum field_section {
    SEC_ROOT,
    SEC_GPU,
    SEC_PEAK,
    SEC_GEMM,
    SEC_MAX_EFF,
    SEC_RECIPE_EFF,
    SEC_GROUPED_SMALL,
    SEC_NVLINK,
    SEC_SCALEOUT,
    SEC_HOST,
    SEC_DISPATCH,
    SEC_OVERHEADS,
};

/* One key. Pointer-free (key is an array, sections are ids), so the table is read-only data. */
struct cluster_field {
    enum field_section parent;
    char key[24];
    enum field_kind kind;
    size_t offset; /* byte offset in struct moe_cluster; FIELD_OBJECT: the child section */
    double lo;     /* loose sanity range for numbers; finer rules in moe_cluster_validate */
    double hi;     /* for FIELD_STRING: buffer size */
};

/* Loose ranges: catch a sign or unit slip (GB/s given in bits, MB for GB) at load time. */
#define BW_MAX   1.0e6 /* GB/s */
#define PEAK_MAX 1.0e6 /* TFLOPS */
#define FRAC_MAX 1.5   /* achieved fraction (NVLS busbw exceeds line rate) */
#define US_MAX   1.0e6 /* microseconds */

/* The table reads best one entry per line, in file order. */
/* clang-format off */
#define OFF(member) offsetof(struct moe_cluster, member)
#define FIG_REAL(sec, key, member, lo, hi) {sec, key, FIELD_REAL, OFF(member), lo, hi}
#define FIG_INT(sec, key, member, lo, hi)  {sec, key, FIELD_INT, OFF(member), lo, hi}
#define FLAG(sec, key, member)             {sec, key, FIELD_BOOL, OFF(member), 0, 0}
#define TEXT(sec, key, member)             {sec, key, FIELD_STRING, OFF(member), 0, \
                                            sizeof(((struct moe_cluster *)0)->member)}
#define SECTION(sec, key, child)           {sec, key, FIELD_OBJECT, child, 0, 0}

/* Top level; "format" and "version" are checked first, by moe_json_check_format. */
static const struct cluster_field cluster_fields[] = {
    TEXT(SEC_ROOT, "name", name),
    TEXT(SEC_ROOT, "description", description),
    TEXT(SEC_ROOT, "generation", generation),
    FIG_INT(SEC_ROOT, "gpus_per_node", gpus_per_node, 1, 1.0e6),
    FIG_INT(SEC_ROOT, "max_gpus", max_gpus, 1, (double)INT_MAX),
    SECTION(SEC_ROOT, "gpu", SEC_GPU),
    SECTION(SEC_ROOT, "gemm", SEC_GEMM),
    SECTION(SEC_ROOT, "nvlink", SEC_NVLINK),
    SECTION(SEC_ROOT, "scaleout", SEC_SCALEOUT),
    SECTION(SEC_ROOT, "host", SEC_HOST),
    SECTION(SEC_ROOT, "dispatch", SEC_DISPATCH),
    SECTION(SEC_ROOT, "overheads", SEC_OVERHEADS),

    TEXT(SEC_GPU, "name", gpu.name),
    FIG_REAL(SEC_GPU, "hbm_gib", gpu.hbm_gib, 0, 1.0e5),
    FIG_REAL(SEC_GPU, "hbm_tbps", gpu.hbm_tbps, 0, 1.0e3),
    SECTION(SEC_GPU, "peak_tflops", SEC_PEAK),
    FLAG(SEC_GPU, "has_fp8", gpu.has_fp8),
    FLAG(SEC_GPU, "has_mx", gpu.has_mx),
    FIG_INT(SEC_GPU, "num_sms", gpu.num_sms, 1, 1.0e5),
    FIG_REAL(SEC_GPU, "attn_fwd_eff", gpu.attn_fwd_eff, 0, 1),
    FIG_REAL(SEC_GPU, "attn_bwd_eff", gpu.attn_bwd_eff, 0, 1),
    FIG_REAL(SEC_GPU, "attn_fwd_half_dim", gpu.attn_fwd_half_dim, 0, 1.0e6),
    FIG_REAL(SEC_GPU, "attn_bwd_half_dim", gpu.attn_bwd_half_dim, 0, 1.0e6),
    FIG_REAL(SEC_GPU, "attn_rect", gpu.attn_rect, 0, 1),
    FIG_REAL(SEC_GPU, "attn_fwd_tile_us", gpu.attn_tile_us[0], 0, US_MAX),
    FIG_REAL(SEC_GPU, "attn_bwd_tile_us", gpu.attn_tile_us[1], 0, US_MAX),
    FIG_REAL(SEC_GPU, "bias_pass", gpu.bias_pass, 0, 1),
    FIG_REAL(SEC_GPU, "hbm_eff", gpu.hbm_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_GPU, "elem_eff", gpu.elem_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_GPU, "act_eff", gpu.act_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_GPU, "act_bwd_eff", gpu.act_bwd_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_GPU, "bias_eff", gpu.bias_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_GPU, "bias_bwd_eff", gpu.bias_bwd_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_GPU, "optimizer_eff", gpu.optimizer_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_GPU, "kernel_launch_us", gpu.kernel_launch_us, 0, US_MAX),
    FIG_REAL(SEC_GPU, "host_cpp_op_us", gpu.host_cpp_op_us, 0, US_MAX),
    FIG_REAL(SEC_GPU, "host_param_us", gpu.host_param_us, 0, US_MAX),
    FIG_REAL(SEC_GPU, "quant_bytes_per_elem", gpu.quant_bytes_per_elem, 0, 1.0e5),

    FIG_REAL(SEC_PEAK, "bf16", gpu.peak_tflops[MOE_MATH_BF16], 0, PEAK_MAX),
    FIG_REAL(SEC_PEAK, "fp8", gpu.peak_tflops[MOE_MATH_FP8], 0, PEAK_MAX),
    FIG_REAL(SEC_PEAK, "fp4", gpu.peak_tflops[MOE_MATH_FP4], 0, PEAK_MAX),
    FIG_REAL(SEC_PEAK, "fp32", gpu.peak_tflops[MOE_MATH_FP32], 0, PEAK_MAX),

    SECTION(SEC_GEMM, "max_eff", SEC_MAX_EFF),
    SECTION(SEC_GEMM, "recipe_eff", SEC_RECIPE_EFF),
    FIG_REAL(SEC_GEMM, "half_flops", gpu.gemm.half_flops, 0, 1.0e18),
    FIG_REAL(SEC_GEMM, "half_dim", gpu.gemm.half_dim, 0, 1.0e6),
    FIG_REAL(SEC_GEMM, "grouped_eff", gpu.gemm.grouped_eff, 0, 1),
    FIG_REAL(SEC_GEMM, "grouped_half_dim", gpu.gemm.grouped_half_dim, 0, 1.0e6),
    FIG_REAL(SEC_GEMM, "grouped_dgrad_eff", gpu.gemm.grouped_bwd_eff[0], 0, 2),
    FIG_REAL(SEC_GEMM, "grouped_wgrad_eff", gpu.gemm.grouped_bwd_eff[1], 0, 2),
    FIG_REAL(SEC_GEMM, "grouped_dgrad_half_dim", gpu.gemm.grouped_bwd_half_dim[0], 0, 1.0e6),
    FIG_REAL(SEC_GEMM, "grouped_wgrad_half_dim", gpu.gemm.grouped_bwd_half_dim[1], 0, 1.0e6),
    FIG_REAL(SEC_GEMM, "grouped_tile_m", gpu.gemm.grouped_tile_m, 0, 1.0e5),
    SECTION(SEC_GEMM, "grouped_small", SEC_GROUPED_SMALL),

    FIG_REAL(SEC_GROUPED_SMALL, "mnk", gpu.gemm.small_mnk, 0, 1.0e18),
    FIG_REAL(SEC_GROUPED_SMALL, "eff", gpu.gemm.small_eff[0], 0, 2),
    FIG_REAL(SEC_GROUPED_SMALL, "half_dim", gpu.gemm.small_half_dim[0], 0, 1.0e6),
    FIG_REAL(SEC_GROUPED_SMALL, "dgrad_eff", gpu.gemm.small_eff[1], 0, 2),
    FIG_REAL(SEC_GROUPED_SMALL, "dgrad_half_dim", gpu.gemm.small_half_dim[1], 0, 1.0e6),
    FIG_REAL(SEC_GROUPED_SMALL, "wgrad_eff", gpu.gemm.small_eff[2], 0, 2),
    FIG_REAL(SEC_GROUPED_SMALL, "wgrad_half_dim", gpu.gemm.small_half_dim[2], 0, 1.0e6),

    FIG_REAL(SEC_MAX_EFF, "bf16", gpu.gemm.max_eff[MOE_MATH_BF16], 0, 1),
    FIG_REAL(SEC_MAX_EFF, "fp8", gpu.gemm.max_eff[MOE_MATH_FP8], 0, 1),
    FIG_REAL(SEC_MAX_EFF, "fp4", gpu.gemm.max_eff[MOE_MATH_FP4], 0, 1),
    FIG_REAL(SEC_MAX_EFF, "fp32", gpu.gemm.max_eff[MOE_MATH_FP32], 0, 1),

    FIG_REAL(SEC_RECIPE_EFF, "bf16", gpu.gemm.recipe_eff[MOE_RECIPE_BF16], 0, 1),
    FIG_REAL(SEC_RECIPE_EFF, "fp8_tensorwise", gpu.gemm.recipe_eff[MOE_RECIPE_FP8_TENSORWISE], 0, 1),
    FIG_REAL(SEC_RECIPE_EFF, "fp8_delayed", gpu.gemm.recipe_eff[MOE_RECIPE_FP8_DELAYED], 0, 1),
    FIG_REAL(SEC_RECIPE_EFF, "fp8_blockwise", gpu.gemm.recipe_eff[MOE_RECIPE_FP8_BLOCKWISE], 0, 1),
    FIG_REAL(SEC_RECIPE_EFF, "mxfp8", gpu.gemm.recipe_eff[MOE_RECIPE_MXFP8], 0, 1),
    FIG_REAL(SEC_RECIPE_EFF, "nvfp4", gpu.gemm.recipe_eff[MOE_RECIPE_NVFP4], 0, 1),

    FIG_INT(SEC_NVLINK, "domain_gpus", nvlink.domain_gpus, 1, 1.0e6),
    FIG_REAL(SEC_NVLINK, "gbps", nvlink.gbps, 0, BW_MAX),
    FIG_REAL(SEC_NVLINK, "eff", nvlink.eff, 0, FRAC_MAX),
    FIG_REAL(SEC_NVLINK, "latency_us", nvlink.latency_us, 0, US_MAX),
    FLAG(SEC_NVLINK, "has_nvls", nvlink.has_nvls),
    FIG_REAL(SEC_NVLINK, "nvls_busbw_gbps", nvlink.nvls_busbw_gbps, 0, BW_MAX),
    FIG_REAL(SEC_NVLINK, "allreduce_gbps", nvlink.allreduce_gbps, 0, BW_MAX),
    FIG_REAL(SEC_NVLINK, "reducescatter_gbps", nvlink.reducescatter_gbps, 0, BW_MAX),
    {SEC_NVLINK, "busbw_by_size", FIELD_BUSBW, OFF(nvlink.busbw_by_size), 0, BW_MAX},

    FIG_REAL(SEC_SCALEOUT, "nic_gbps", net.nic_gbps, 0, BW_MAX),
    FIG_REAL(SEC_SCALEOUT, "eff", net.eff, 0, FRAC_MAX),
    FIG_REAL(SEC_SCALEOUT, "a2a_eff", net.a2a_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_SCALEOUT, "latency_us", net.latency_us, 0, US_MAX),

    FIG_REAL(SEC_HOST, "mem_gib_per_gpu", host.mem_gib_per_gpu, 0, 1.0e6),
    FIG_REAL(SEC_HOST, "link_gbps", host.link_gbps, 0, BW_MAX),
    FIG_REAL(SEC_HOST, "link_eff", host.link_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_HOST, "optimizer_gbps", host.optimizer_gbps, 0, BW_MAX),
    FIG_REAL(SEC_HOST, "rank_spread", host.rank_spread, 0, FRAC_MAX),
    FIG_REAL(SEC_HOST, "probe_gemm_dim", host.probe_gemm_dim, 0, 65536),
    FIG_REAL(SEC_HOST, "probe_gemm_us", host.probe_gemm_us, 0, 1.0e9),

    FIG_REAL(SEC_DISPATCH, "deepep_intra_eff", dispatch.deepep_intra_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_DISPATCH, "deepep_inter_eff", dispatch.deepep_inter_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_DISPATCH, "hybridep_intra_eff", dispatch.hybridep_intra_eff, 0, FRAC_MAX),
    FIG_REAL(SEC_DISPATCH, "hybridep_inter_eff", dispatch.hybridep_inter_eff, 0, FRAC_MAX),
    FIG_INT(SEC_DISPATCH, "deepep_sms", dispatch.deepep_sms, 0, 1.0e5),
    FIG_INT(SEC_DISPATCH, "hybridep_sms", dispatch.hybridep_sms, 0, 1.0e5),
    FIG_REAL(SEC_DISPATCH, "permute_bytes_eff", dispatch.permute_bytes_eff, 0, FRAC_MAX),

    FIG_REAL(SEC_OVERHEADS, "moe_host_sync_us", overheads.moe_host_sync_us, 0, US_MAX),
    FIG_REAL(SEC_OVERHEADS, "step_fixed_ms", overheads.step_fixed_ms, 0, 1.0e6),
    FIG_REAL(SEC_OVERHEADS, "overlap_eff", overheads.overlap_eff, 0, 1),
    FIG_REAL(SEC_OVERHEADS, "a2a_overlap_loss", overheads.a2a_overlap_loss, 0, 1),
    FIG_REAL(SEC_OVERHEADS, "ep_overlap_eff", overheads.ep_overlap_eff, 0, 1),
    FIG_REAL(SEC_OVERHEADS, "context_gib", overheads.context_gib, 0, 1.0e4),
    FIG_REAL(SEC_OVERHEADS, "alloc_reserve_frac", overheads.alloc_reserve_frac, 0, 1),
    FIG_REAL(SEC_OVERHEADS, "flex_buffer_gib", overheads.flex_buffer_gib, 0, 1.0e4),
};
/* clang-format on */

/* Prefix diag->message with "source: " unless it already names the source. */
static enum moe_status in_file(enum moe_status st, const char *source, struct moe_diag *diag)
{
    if (st == MOE_OK || diag == NULL) {
        return st;
    }
    moe_diag_source(diag, source);
    if (strstr(diag->message, source) == NULL) {
        char msg[sizeof(diag->message) + 256];
        (void)snprintf(msg, sizeof(msg), "%s: %s", source, diag->message);
        size_t n = strnlen(msg, sizeof(diag->message) - 1);
        memcpy(diag->message, msg, n);
        diag->message[n] = '\0';
    }
    return st;
}

/* Unknown keys (named with their full path) and duplicates are errors. */
static enum moe_status
check_known_keys(const cJSON *obj, enum field_section sec, const char *where, struct moe_diag *diag)
{
    const char *names[32];
    size_t num_names = 0;
    for (size_t i = 0; i < MOE_ARRAY_LEN(cluster_fields) && num_names < MOE_ARRAY_LEN(names); i++) {
        if (cluster_fields[i].parent == sec) {
            names[num_names++] = cluster_fields[i].key;
        }
    }
    if (sec == SEC_ROOT && num_names + 6 <= MOE_ARRAY_LEN(names)) {
        names[num_names++] = "format";
        names[num_names++] = "version";
        names[num_names++] = "software";    /* read by apply_release */
        names[num_names++] = "uncertainty"; /* read by the CLI (moe_cluster_read_json) */
        names[num_names++] = "power";       /* optional: topologies/cluster_costs.h */
        names[num_names++] = "price";       /* optional: topologies/cluster_costs.h */
    }
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        const char *k = it->string != NULL ? it->string : "";
        bool is_known = false;
        for (size_t i = 0; i < num_names && !is_known; i++) {
            is_known = strcmp(names[i], k) == 0;
        }
        if (!is_known) {
            char list[384] = "";
            size_t used = 0;
            for (size_t i = 0; i < num_names && used + 2 < sizeof(list); i++) {
                int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", names[i]);
                used += w > 0 ? (size_t)w : 0;
            }
            return moe_diag_set(diag, MOE_ERR_INVALID, "unknown key %s.%s (known keys in %s: %s)",
                                where, k, where, list);
        }
    }
    return moe_json_check_keys(obj, names, num_names, where, diag); /* duplicates */
}

static enum moe_status read_number(const cJSON *obj,
                                   const struct cluster_field *f,
                                   const char *where,
                                   unsigned char *base,
                                   struct moe_diag *diag)
{
    double v = 0.0;
    MOE_TRY(moe_json_get_figure(obj, f->key, true, f->lo, f->hi, &v, where, diag));
    if (f->kind == FIELD_REAL) {
        memcpy(base + f->offset, &v, sizeof(v));
        return MOE_OK;
    }
    int iv = (int)v;
    if ((double)iv != v) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s.value = %g must be a whole number", where,
                            f->key, v);
    }
    memcpy(base + f->offset, &iv, sizeof(iv));
    return MOE_OK;
}

/* The collectives' keys in a busbw_by_size object, in enum moe_busbw_coll order. */
static const char *const busbw_colls[MOE_BUSBW_NUM_KINDS] = {
    "allreduce", "allgather", "reducescatter", "alltoall", "sendrecv"};

/* One collective's {"bytes": [...], "busbw_gbps": [...]} into row c of t. */
static enum moe_status read_busbw_row(
    const cJSON *o, int c, const char *where, struct moe_busbw_table *t, struct moe_diag *diag)
{
    static const char *const keys[] = {"bytes", "busbw_gbps"};
    MOE_TRY(moe_json_check_keys(o, keys, MOE_ARRAY_LEN(keys), where, diag));
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "bytes");
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(o, "busbw_gbps");
    int n = cJSON_GetArraySize(x);
    if (!cJSON_IsArray(x) || !cJSON_IsArray(y) || n != cJSON_GetArraySize(y) || n < 1 ||
        n > MOE_BUSBW_MAX_SIZES) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: needs arrays \"bytes\" and \"busbw_gbps\" of equal length "
                            "1..%d",
                            where, MOE_BUSBW_MAX_SIZES);
    }
    for (int i = 0; i < n; i++) {
        const cJSON *xi = cJSON_GetArrayItem(x, i);
        const cJSON *yi = cJSON_GetArrayItem(y, i);
        if (!cJSON_IsNumber(xi) || !cJSON_IsNumber(yi)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: point %d is not a pair of numbers",
                                where, i);
        }
        t->bytes[c][i] = xi->valuedouble;
        t->gbps[c][i] = yi->valuedouble;
        if (!(t->gbps[c][i] <= BW_MAX)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: busbw_gbps[%d] = %g is over %g GB/s",
                                where, i, t->gbps[c][i], BW_MAX);
        }
    }
    t->num_sizes[c] = n;
    return MOE_OK;
}

/* Optional {"source": "...", "<collective>": {...}, ...}: absent leaves the table empty; the
 * sizes' order and signs are moe_cluster_validate's. */
static enum moe_status read_busbw(const cJSON *obj,
                                  const struct cluster_field *f,
                                  const char *where,
                                  unsigned char *base,
                                  struct moe_diag *diag)
{
    struct moe_busbw_table t;
    memset(&t, 0, sizeof(t));
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(obj, f->key);
    if (o != NULL) {
        char w[160];
        (void)snprintf(w, sizeof(w), "%s.%s", where, f->key);
        const char *keys[MOE_BUSBW_NUM_KINDS + 1] = {"source"};
        for (int c = 0; c < MOE_BUSBW_NUM_KINDS; c++) {
            keys[c + 1] = busbw_colls[c];
        }
        if (!cJSON_IsObject(o)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected a JSON object", w);
        }
        MOE_TRY(moe_json_check_keys(o, keys, MOE_ARRAY_LEN(keys), w, diag));
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(o, "source");
        if (!cJSON_IsString(src) || src->valuestring[0] == '\0') {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s.source: a non-empty string is required",
                                w);
        }
        for (int c = 0; c < MOE_BUSBW_NUM_KINDS; c++) {
            const cJSON *row = cJSON_GetObjectItemCaseSensitive(o, busbw_colls[c]);
            if (row != NULL) {
                char wr[192];
                (void)snprintf(wr, sizeof(wr), "%s.%s", w, busbw_colls[c]);
                MOE_TRY(read_busbw_row(row, c, wr, &t, diag));
            }
        }
    }
    memcpy(base + f->offset, &t, sizeof(t));
    return MOE_OK;
}

static enum moe_status read_fields(const cJSON *obj,
                                   enum field_section sec,
                                   const char *where,
                                   unsigned char *base,
                                   struct moe_diag *diag)
{
    if (!cJSON_IsObject(obj)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected a JSON object", where);
    }
    MOE_TRY(check_known_keys(obj, sec, where, diag));
    for (size_t i = 0; i < MOE_ARRAY_LEN(cluster_fields); i++) {
        const struct cluster_field *f = &cluster_fields[i];
        if (f->parent != sec) {
            continue;
        }
        switch (f->kind) {
        case FIELD_REAL:
        case FIELD_INT:
            MOE_TRY(read_number(obj, f, where, base, diag));
            break;
        case FIELD_BOOL: {
            bool b = false;
            MOE_TRY(moe_json_get_bool(obj, f->key, true, &b, where, diag));
            memcpy(base + f->offset, &b, sizeof(b));
            break;
        }
        case FIELD_STRING: {
            char *buf = (char *)(base + f->offset);
            MOE_TRY(moe_json_get_string(obj, f->key, true, buf, (size_t)f->hi, where, diag));
            break;
        }
        case FIELD_BUSBW:
            MOE_TRY(read_busbw(obj, f, where, base, diag));
            break;
        case FIELD_OBJECT: {
            const cJSON *sub = cJSON_GetObjectItemCaseSensitive(obj, f->key);
            if (sub == NULL) {
                return moe_diag_set(diag, MOE_ERR_INVALID, "%s: missing required section \"%s\"",
                                    where, f->key);
            }
            char sub_where[128];
            (void)snprintf(sub_where, sizeof(sub_where), "%s.%s", where, f->key);
            MOE_TRY(read_fields(sub, (enum field_section)f->offset, sub_where, base, diag));
            break;
        }
        }
    }
    return MOE_OK;
}

/* The table row of the number figure at a dotted path ("gemm.max_eff.bf16"), or NULL. */
static const struct cluster_field *field_by_path(const char *path)
{
    enum field_section sec = SEC_ROOT;
    const char *p = path;
    while (p != NULL && *p != '\0') {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        const struct cluster_field *hit = NULL;
        for (size_t i = 0; i < MOE_ARRAY_LEN(cluster_fields) && hit == NULL; i++) {
            const struct cluster_field *f = &cluster_fields[i];
            if (f->parent == sec && strlen(f->key) == len && strncmp(f->key, p, len) == 0) {
                hit = f;
            }
        }
        if (hit == NULL) {
            return NULL;
        }
        if (dot == NULL) {
            return hit->kind == FIELD_REAL || hit->kind == FIELD_INT ? hit : NULL;
        }
        if (hit->kind != FIELD_OBJECT) {
            return NULL;
        }
        sec = (enum field_section)hit->offset;
        p = dot + 1;
    }
    return NULL;
}

enum moe_status moe_cluster_figure_ref(const char *path, size_t *offset, struct moe_diag *diag)
{
    const struct cluster_field *f = field_by_path(path);
    if (f == NULL || f->kind != FIELD_REAL) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "\"%s\" is not a real-valued figure of a cluster file (e.g. "
                            "gemm.grouped_eff, overheads.overlap_eff)",
                            path);
    }
    *offset = f->offset;
    return MOE_OK;
}

cJSON *moe_cluster_figure_json(const cJSON *root, const char *path)
{
    cJSON *node = NULL;
    const cJSON *at = root;
    char part[64];
    const char *p = path;
    while (at != NULL && p != NULL && *p != '\0') {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        if (len >= sizeof(part)) {
            return NULL;
        }
        memcpy(part, p, len);
        part[len] = '\0';
        node = cJSON_GetObjectItemCaseSensitive(at, part);
        at = node;
        p = dot != NULL ? dot + 1 : NULL;
    }
    return node;
}

/* Case-insensitive equality of release names. */
static bool same_name(const char *a, const char *b)
{
    for (; *a != '\0' && *b != '\0'; a++, b++) {
        char x = (char)(*a >= 'A' && *a <= 'Z' ? *a - 'A' + 'a' : *a);
        char y = (char)(*b >= 'A' && *b <= 'Z' ? *b - 'A' + 'a' : *b);
        if (x != y) {
            return false;
        }
    }
    return *a == *b;
}

const cJSON *moe_cluster_find_release(const cJSON *root, const char *name)
{
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "software");
    const cJSON *rels = sw != NULL ? cJSON_GetObjectItemCaseSensitive(sw, "releases") : NULL;
    const cJSON *r = NULL;
    cJSON_ArrayForEach(r, rels)
    {
        if (r->string != NULL && same_name(r->string, name)) {
            return r;
        }
    }
    return NULL;
}

/* Read one release's figures onto cl. */
static enum moe_status
read_release(const cJSON *rel, const char *name, struct moe_cluster *cl, struct moe_diag *diag)
{
    char where[160];
    (void)snprintf(where, sizeof(where), "cluster.software.releases.%s", name);
    if (!cJSON_IsObject(rel)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected an object", where);
    }
    static const char *const keys[] = {"date", "stack", "runs", "note", "figures"};
    MOE_TRY(moe_json_check_keys(rel, keys, MOE_ARRAY_LEN(keys), where, diag));
    const cJSON *figs = cJSON_GetObjectItemCaseSensitive(rel, "figures");
    if (figs != NULL && !cJSON_IsObject(figs)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.figures: expected an object", where);
    }
    const cJSON *fig = NULL;
    cJSON_ArrayForEach(fig, figs)
    {
        const struct cluster_field *f = field_by_path(fig->string != NULL ? fig->string : "");
        if (f == NULL || f->kind != FIELD_REAL) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s.figures: \"%s\" is not a real-valued cluster figure", where,
                                fig->string != NULL ? fig->string : "");
        }
        double v = 0.0;
        MOE_TRY(moe_json_get_figure(figs, fig->string, true, f->lo, f->hi, &v, where, diag));
        memcpy((unsigned char *)cl + f->offset, &v, sizeof(v));
    }
    (void)snprintf(cl->software, sizeof(cl->software), "%s", name);
    return MOE_OK;
}

/*
 * Apply a software release's fitted figures: `release` NULL takes the file's default release,
 * "shared" (or "") none; a name the file does not know is an error listing those it does.
 */
static enum moe_status
apply_release(const cJSON *root, const char *release, struct moe_cluster *cl, struct moe_diag *diag)
{
    cl->software[0] = '\0';
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "software");
    if (sw != NULL) {
        if (!cJSON_IsObject(sw)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "cluster.software: expected an object");
        }
        static const char *const keys[] = {"default", "note", "releases"};
        MOE_TRY(moe_json_check_keys(sw, keys, MOE_ARRAY_LEN(keys), "cluster.software", diag));
        const cJSON *rels = cJSON_GetObjectItemCaseSensitive(sw, "releases");
        if (rels != NULL && !cJSON_IsObject(rels)) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "cluster.software.releases: expected an object");
        }
    }
    const char *name = release;
    if (name == NULL) {
        const cJSON *def = sw != NULL ? cJSON_GetObjectItemCaseSensitive(sw, "default") : NULL;
        name = cJSON_IsString(def) ? def->valuestring : "";
    }
    if (name[0] == '\0' || same_name(name, MOE_CLUSTER_SHARED)) {
        return MOE_OK;
    }
    const cJSON *rel = moe_cluster_find_release(root, name);
    if (rel == NULL) {
        char known[384] = "";
        size_t used = 0;
        const cJSON *rels = sw != NULL ? cJSON_GetObjectItemCaseSensitive(sw, "releases") : NULL;
        const cJSON *r = NULL;
        cJSON_ArrayForEach(r, rels)
        {
            int w = snprintf(known + used, sizeof(known) - used, "%s, ", r->string);
            used += w > 0 && (size_t)w < sizeof(known) - used ? (size_t)w : 0;
        }
        moe_diag_source(diag, "--software");
        return moe_diag_set(
            diag, MOE_ERR_NOT_FOUND, "software release \"%s\" is not in cluster %s; known: %s%s",
            name, cl->name, known, MOE_CLUSTER_SHARED " (the generation's shared figures)");
    }
    return read_release(rel, rel->string, cl, diag);
}

static enum moe_status
read_cluster(const cJSON *root, const char *release, struct moe_cluster *out, struct moe_diag *diag)
{
    struct moe_cluster cl;
    memset(&cl, 0, sizeof(cl));
    enum moe_status st = read_fields(root, SEC_ROOT, "cluster", (unsigned char *)&cl, diag);
    if (st == MOE_OK) {
        /* The optional power and price sections are not the cost model's, but a typo in them
         * must fail every command that reads the file, not only the ones that use them. */
        struct moe_cluster_costs costs;
        st = moe_cluster_costs_from_json(root, &costs, diag);
    }
    if (st == MOE_OK) {
        st = apply_release(root, release, &cl, diag);
    }
    if (st == MOE_OK) {
        st = moe_cluster_validate(&cl, diag);
    }
    if (st == MOE_OK) {
        *out = cl;
    }
    return st;
}

enum moe_status moe_cluster_from_json(const cJSON *root,
                                      const char *source,
                                      struct moe_cluster *out,
                                      struct moe_diag *diag)
{
    return moe_cluster_from_json_release(root, source, NULL, out, diag);
}

enum moe_status moe_cluster_from_json_release(const cJSON *root,
                                              const char *source,
                                              const char *release,
                                              struct moe_cluster *out,
                                              struct moe_diag *diag)
{
    const char *src = source != NULL ? source : "(cluster)";
    moe_diag_source(diag, src);
    enum moe_status st =
        moe_json_check_format(root, MOE_CLUSTER_FILE_FORMAT, MOE_CLUSTER_FILE_VERSION, src, diag);
    if (st != MOE_OK) {
        return in_file(st, src, diag);
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "extends") == NULL) {
        return in_file(read_cluster(root, release, out, diag), src, diag);
    }
    cJSON *merged = NULL;
    st = moe_cluster_resolve_json(root, src, &merged, diag);
    if (st == MOE_OK) {
        st = read_cluster(merged, release, out, diag);
    }
    cJSON_Delete(merged);
    return in_file(st, src, diag);
}

/* ---------------------------------------------------------------------------------------------
 * "extends": a file stating only what differs from its base */

#define MOE_CLUSTER_MAX_EXTENDS 8

/* A figure ({"value": ...}) replaces as a whole; any other object is a section and merges. */
static bool is_section(const cJSON *o)
{
    return cJSON_IsObject(o) && cJSON_GetObjectItemCaseSensitive(o, "value") == NULL;
}

/* Duplicate keys are refused in every file (the merge would silently keep one of them). */
static enum moe_status check_duplicates(const cJSON *obj, const char *where, struct moe_diag *diag)
{
    for (const cJSON *a = obj->child; a != NULL; a = a->next) {
        for (const cJSON *b = a->next; b != NULL; b = b->next) {
            if (a->string != NULL && b->string != NULL && strcmp(a->string, b->string) == 0) {
                return moe_diag_set(diag, MOE_ERR_INVALID, "duplicate key %s.%s", where, a->string);
            }
        }
        if (cJSON_IsObject(a) && a->string != NULL) {
            char sub[160];
            (void)snprintf(sub, sizeof(sub), "%s.%s", where, a->string);
            MOE_TRY(check_duplicates(a, sub, diag));
        }
    }
    return MOE_OK;
}

/* Lay src over dst: sections merge, everything else (and "extends") replaces. */
static bool overlay(cJSON *dst, const cJSON *src, bool top)
{
    for (const cJSON *it = src->child; it != NULL; it = it->next) {
        if (it->string == NULL || (top && strcmp(it->string, "extends") == 0)) {
            continue;
        }
        cJSON *d = cJSON_GetObjectItemCaseSensitive(dst, it->string);
        if (d != NULL && is_section(d) && is_section(it)) {
            if (!overlay(d, it, false)) {
                return false;
            }
            continue;
        }
        cJSON *copy = cJSON_Duplicate(it, true);
        if (copy == NULL) {
            return false;
        }
        bool ok = d != NULL ? cJSON_ReplaceItemInObjectCaseSensitive(dst, it->string, copy)
                            : cJSON_AddItemToObject(dst, it->string, copy);
        if (!ok) {
            cJSON_Delete(copy);
            return false;
        }
    }
    return true;
}

/* The folder of path into buf ("." when it has none). */
static void dir_of(const char *path, char *buf, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        (void)snprintf(buf, len, ".");
    } else if (slash == path) {
        (void)snprintf(buf, len, "/");
    } else {
        (void)snprintf(buf, len, "%.*s", (int)(slash - path), path);
    }
}

static bool is_plain_name(const char *s);
static bool ends_with(const char *s, const char *suffix);

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Where the base `ext` of the file `source` lives. */
static enum moe_status
base_path(const char *ext, const char *source, char *out, size_t len, struct moe_diag *diag)
{
    char dir[PATH_MAX];
    dir_of(source, dir, sizeof(dir));
    int w = 0;
    if (strchr(ext, '/') != NULL || ends_with(ext, ".json")) {
        w = ext[0] == '/' ? snprintf(out, len, "%s", ext) : snprintf(out, len, "%s/%s", dir, ext);
        if (w < 0 || (size_t)w >= len || !file_exists(out)) {
            return moe_diag_set(diag, MOE_ERR_NOT_FOUND,
                                "%s extends \"%s\", which is not a readable file", source, ext);
        }
        return MOE_OK;
    }
    if (!is_plain_name(ext)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: \"extends\": \"%s\" is neither a cluster name nor a file", source,
                            ext);
    }
    w = snprintf(out, len, "%s/%s.json", dir, ext);
    if (w > 0 && (size_t)w < len && file_exists(out)) {
        return MOE_OK;
    }
    char cdir[PATH_MAX];
    if (moe_cluster_dir(cdir, sizeof(cdir)) != NULL) {
        w = snprintf(out, len, "%s/%s.json", cdir, ext);
        if (w > 0 && (size_t)w < len && file_exists(out)) {
            return MOE_OK;
        }
    }
    return moe_diag_set(diag, MOE_ERR_NOT_FOUND,
                        "%s extends \"%s\", which is not a cluster beside it nor in %s (see "
                        "`moefold clusters`)",
                        source, ext, cdir);
}

/* The files of a chain so far, identified by device and inode (a cycle through another spelling
 * of the same path is still a cycle). */
struct extends_chain {
    dev_t dev[MOE_CLUSTER_MAX_EXTENDS + 1];
    ino_t ino[MOE_CLUSTER_MAX_EXTENDS + 1];
    int n;
    const char *first;
};

static enum moe_status resolve(const cJSON *root,
                               const char *source,
                               struct extends_chain *chain,
                               cJSON **out,
                               struct moe_diag *diag)
{
    *out = NULL;
    MOE_TRY(check_duplicates(root, "cluster", diag));
    const cJSON *ext = cJSON_GetObjectItemCaseSensitive(root, "extends");
    if (ext == NULL) {
        *out = cJSON_Duplicate(root, true);
        return *out != NULL ? MOE_OK : moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    if (!cJSON_IsString(ext) || ext->valuestring[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: \"extends\" must name a cluster (moefold clusters) or a file",
                            source);
    }
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "name")) ||
        !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "description"))) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s extends %s but gives no \"name\" and \"description\" of its own "
                            "(they are not inherited)",
                            source, ext->valuestring);
    }
    if (chain->n >= MOE_CLUSTER_MAX_EXTENDS) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: \"extends\" chains more than %d files (starting at %s)", source,
                            MOE_CLUSTER_MAX_EXTENDS, chain->first);
    }
    char path[PATH_MAX];
    MOE_TRY(base_path(ext->valuestring, source, path, sizeof(path), diag));
    struct stat fs;
    if (stat(path, &fs) != 0) {
        return moe_diag_set(diag, MOE_ERR_NOT_FOUND, "%s: cannot read its base %s", source, path);
    }
    for (int i = 0; i < chain->n; i++) {
        if (chain->dev[i] == fs.st_dev && chain->ino[i] == fs.st_ino) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s: \"extends\" makes a cycle: %s is already a file further "
                                "down the chain that starts at %s",
                                source, path, chain->first);
        }
    }
    chain->dev[chain->n] = fs.st_dev;
    chain->ino[chain->n] = fs.st_ino;
    chain->n++;
    cJSON *base = NULL;
    MOE_TRY(moe_json_read_file(path, &base, diag));
    enum moe_status st =
        moe_json_check_format(base, MOE_CLUSTER_FILE_FORMAT, MOE_CLUSTER_FILE_VERSION, path, diag);
    cJSON *merged = NULL;
    if (st == MOE_OK) {
        st = resolve(base, path, chain, &merged, diag);
    }
    cJSON_Delete(base);
    if (st == MOE_OK && !overlay(merged, root, true)) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory merging %s into %s", source, path);
    }
    if (st != MOE_OK) {
        cJSON_Delete(merged);
        return in_file(st, path, diag);
    }
    *out = merged;
    return MOE_OK;
}

enum moe_status
moe_cluster_resolve_json(const cJSON *root, const char *source, cJSON **out, struct moe_diag *diag)
{
    const char *src = source != NULL ? source : "(cluster)";
    struct extends_chain *chain = calloc(1, sizeof(*chain));
    if (chain == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    chain->first = src;
    struct stat fs;
    if (stat(src, &fs) == 0) { /* the extending file itself, when it is one */
        chain->dev[0] = fs.st_dev;
        chain->ino[0] = fs.st_ino;
        chain->n = 1;
    }
    enum moe_status st = resolve(root, src, chain, out, diag);
    free(chain);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Writing */

static cJSON *figure_json(double v, const char *source)
{
    cJSON *fig = cJSON_CreateObject();
    if (fig == NULL) {
        return NULL;
    }
    if (cJSON_AddNumberToObject(fig, "value", v) == NULL ||
        cJSON_AddStringToObject(fig, "source", source) == NULL) {
        cJSON_Delete(fig);
        return NULL;
    }
    return fig;
}

static cJSON *field_json(const struct cluster_field *f, const unsigned char *base, const char *src);

static bool has_busbw(const unsigned char *p)
{
    struct moe_busbw_table t;
    memcpy(&t, p, sizeof(t));
    for (int c = 0; c < MOE_BUSBW_NUM_KINDS; c++) {
        if (t.num_sizes[c] > 0) {
            return true;
        }
    }
    return false;
}

static cJSON *busbw_json(const unsigned char *p, const char *src)
{
    struct moe_busbw_table t;
    memcpy(&t, p, sizeof(t));
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL && cJSON_AddStringToObject(o, "source", src) != NULL;
    for (int c = 0; c < MOE_BUSBW_NUM_KINDS && ok; c++) {
        if (t.num_sizes[c] < 1) {
            continue;
        }
        cJSON *row = cJSON_AddObjectToObject(o, busbw_colls[c]);
        cJSON *x = row != NULL ? cJSON_CreateDoubleArray(t.bytes[c], t.num_sizes[c]) : NULL;
        cJSON *y = x != NULL ? cJSON_CreateDoubleArray(t.gbps[c], t.num_sizes[c]) : NULL;
        ok = y != NULL && cJSON_AddItemToObject(row, "bytes", x);
        if (!ok) {
            cJSON_Delete(x);
            cJSON_Delete(y);
            break;
        }
        ok = cJSON_AddItemToObject(row, "busbw_gbps", y);
        if (!ok) {
            cJSON_Delete(y);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static bool
add_fields(cJSON *obj, enum field_section sec, const unsigned char *base, const char *source)
{
    for (size_t i = 0; i < MOE_ARRAY_LEN(cluster_fields); i++) {
        const struct cluster_field *f = &cluster_fields[i];
        if (f->parent != sec) {
            continue;
        }
        if (f->kind == FIELD_BUSBW && !has_busbw(base + f->offset)) {
            continue; /* optional: written only when measured */
        }
        cJSON *item = field_json(f, base, source);
        if (item == NULL || !cJSON_AddItemToObject(obj, f->key, item)) {
            cJSON_Delete(item);
            return false;
        }
    }
    return true;
}

static cJSON *field_json(const struct cluster_field *f, const unsigned char *base, const char *src)
{
    switch (f->kind) {
    case FIELD_REAL: {
        double v;
        memcpy(&v, base + f->offset, sizeof(v));
        return figure_json(v, src);
    }
    case FIELD_INT: {
        int v;
        memcpy(&v, base + f->offset, sizeof(v));
        return figure_json((double)v, src);
    }
    case FIELD_BOOL: {
        bool b;
        memcpy(&b, base + f->offset, sizeof(b));
        return cJSON_CreateBool(b);
    }
    case FIELD_STRING:
        return cJSON_CreateString((const char *)(base + f->offset));
    case FIELD_BUSBW:
        return busbw_json(base + f->offset, src);
    case FIELD_OBJECT: {
        cJSON *obj = cJSON_CreateObject();
        if (obj != NULL && !add_fields(obj, (enum field_section)f->offset, base, src)) {
            cJSON_Delete(obj);
            return NULL;
        }
        return obj;
    }
    }
    return NULL;
}

/* The release whose figures cl carries: its values are already the fields' own, so the release
 * is written without figures, as the file's default, and reading the file back names it again. */
static bool add_applied_release(cJSON *root, const struct moe_cluster *cl)
{
    if (cl->software[0] == '\0') {
        return true;
    }
    cJSON *sw = cJSON_AddObjectToObject(root, "software");
    cJSON *rels = sw != NULL ? cJSON_AddObjectToObject(sw, "releases") : NULL;
    cJSON *rel = rels != NULL ? cJSON_AddObjectToObject(rels, cl->software) : NULL;
    return rel != NULL && cJSON_AddStringToObject(sw, "default", cl->software) != NULL &&
           cJSON_AddStringToObject(rel, "note",
                                   "applied: its fitted figures are the values above") != NULL;
}

cJSON *moe_cluster_to_json(const struct moe_cluster *cl, const char *source)
{
    const char *src = source != NULL && source[0] != '\0' ? source : "moefold";
    cJSON *root = cJSON_CreateObject();
    if (root == NULL) {
        return NULL;
    }
    if (cJSON_AddStringToObject(root, "format", MOE_CLUSTER_FILE_FORMAT) == NULL ||
        cJSON_AddNumberToObject(root, "version", MOE_CLUSTER_FILE_VERSION) == NULL ||
        !add_fields(root, SEC_ROOT, (const unsigned char *)cl, src) ||
        !add_applied_release(root, cl)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---------------------------------------------------------------------------------------------
 * Lookup */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s);
    size_t m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A cluster folder: a directory holding at least one visible *.json file. */
static bool is_cluster_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        return false;
    }
    bool found = false;
    for (const struct dirent *e = readdir(d); e != NULL && !found; e = readdir(d)) {
        found = e->d_name[0] != '.' && ends_with(e->d_name, ".json");
    }
    (void)closedir(d);
    return found;
}

static const char *copy_out(const char *path, char *buf, size_t len)
{
    if (buf == NULL || len == 0) {
        return NULL;
    }
    int w = snprintf(buf, len, "%s", path);
    if (w < 0 || (size_t)w >= len) {
        buf[0] = '\0';
    }
    return buf;
}

/* Search the executable's folder and its ancestors for topologies/ with *.json files. */
static bool dir_from_exe(char *found, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        return false;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL) {
        return false;
    }
    *slash = '\0'; /* exe is now the executable's folder */
    for (int level = 0; level <= MOE_CLUSTER_DIR_LEVELS && exe[0] != '\0'; level++) {
        char cand[PATH_MAX + 16];
        (void)snprintf(cand, sizeof(cand), "%s/topologies", exe);
        if (is_cluster_dir(cand)) {
            /* /proc/self/exe is already canonical and only whole components were cut. */
            return copy_out(cand, found, len) != NULL && found[0] != '\0';
        }
        slash = strrchr(exe, '/');
        if (slash == NULL) {
            break;
        }
        *slash = '\0';
    }
    return false;
}

const char *moe_cluster_dir(char *buf, size_t len)
{
    const char *env = getenv("MOEFOLD_TOPOLOGIES");
    if (env != NULL && env[0] != '\0') {
        return copy_out(env, buf, len);
    }
    if (buf != NULL && len > 0 && dir_from_exe(buf, len)) {
        return buf;
    }
    return copy_out("./topologies", buf, len);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Collect the cluster names of dir into a malloc'd array (sorted); *out_n gets the count. */
static enum moe_status
scan_dir(const char *dir, char (**out)[MOE_NAME_LEN], size_t *out_n, struct moe_diag *diag)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return moe_diag_set(diag, MOE_ERR_IO,
                            "cannot open the cluster folder %s: %s (set MOEFOLD_TOPOLOGIES to the "
                            "folder holding the cluster files)",
                            dir, strerror(errno));
    }
    char(*names)[MOE_NAME_LEN] = NULL;
    size_t n = 0;
    size_t cap = 0;
    enum moe_status st = MOE_OK;
    for (const struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".json") || len - 5 >= MOE_NAME_LEN ||
            len == 5) {
            continue;
        }
        if (n == cap) {
            size_t new_cap = cap == 0 ? 16 : cap * 2;
            char(*grown)[MOE_NAME_LEN] = realloc(names, new_cap * sizeof(*names));
            if (grown == NULL) {
                st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory listing %s", dir);
                break;
            }
            names = grown;
            cap = new_cap;
        }
        memcpy(names[n], e->d_name, len - 5);
        names[n][len - 5] = '\0';
        n++;
    }
    (void)closedir(d);
    if (st != MOE_OK) {
        free(names);
        return st;
    }
    if (n > 1) {
        qsort(names, n, sizeof(*names), compare_names);
    }
    *out = names;
    *out_n = n;
    return MOE_OK;
}

enum moe_status
moe_cluster_list(char (*names)[MOE_NAME_LEN], size_t max, size_t *count, struct moe_diag *diag)
{
    char dir[PATH_MAX];
    if (moe_cluster_dir(dir, sizeof(dir)) == NULL || dir[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_IO, "the cluster folder path is too long");
    }
    char(*all)[MOE_NAME_LEN] = NULL;
    size_t n = 0;
    MOE_TRY(scan_dir(dir, &all, &n, diag));
    size_t keep = n < max ? n : max;
    if (keep > 0) {
        memcpy(names, all, keep * sizeof(*all));
    }
    free(all);
    *count = keep;
    return MOE_OK;
}

/* "known clusters: a, b, c" for a not-found message; empty when the folder cannot be listed. */
static void known_list(const char *dir, char *buf, size_t len)
{
    buf[0] = '\0';
    char(*all)[MOE_NAME_LEN] = NULL;
    size_t n = 0;
    if (scan_dir(dir, &all, &n, NULL) != MOE_OK) {
        return;
    }
    size_t used = 0;
    for (size_t i = 0; i < n && used + 2 < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", all[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    free(all);
}

static bool is_plain_name(const char *s)
{
    if (s[0] == '\0' || s[0] == '.') {
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.';
        if (!ok) {
            return false;
        }
    }
    return true;
}

/* The file a cluster name or path stands for (see the header), written into path[len]. */
static enum moe_status
cluster_path(const char *name_or_path, char *path, size_t len, struct moe_diag *diag)
{
    if (name_or_path == NULL || name_or_path[0] == '\0') {
        moe_diag_source(diag, "--cluster");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no cluster given: pass a name (see `moefold clusters`) or a file");
    }
    if (strchr(name_or_path, '/') != NULL || ends_with(name_or_path, ".json")) {
        (void)snprintf(path, len, "%s", name_or_path);
        return MOE_OK;
    }
    char dir[PATH_MAX];
    if (moe_cluster_dir(dir, sizeof(dir)) == NULL || dir[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_IO, "the cluster folder path is too long");
    }
    int w = snprintf(path, len, "%s/%s.json", dir, name_or_path);
    struct stat st;
    if (!is_plain_name(name_or_path) || w < 0 || (size_t)w >= len || stat(path, &st) != 0) {
        char known[512];
        known_list(dir, known, sizeof(known));
        moe_diag_source(diag, "--cluster");
        return moe_diag_set(diag, MOE_ERR_NOT_FOUND,
                            "unknown cluster \"%s\" (looked in %s); known clusters: %s. Pass a "
                            "cluster file path or set MOEFOLD_TOPOLOGIES",
                            name_or_path, dir, known[0] != '\0' ? known : "(none found)");
    }
    return MOE_OK;
}

enum moe_status
moe_cluster_load(const char *name_or_path, struct moe_cluster *out, struct moe_diag *diag)
{
    return moe_cluster_load_release(name_or_path, NULL, out, diag);
}

enum moe_status moe_cluster_load_release(const char *name_or_path,
                                         const char *release,
                                         struct moe_cluster *out,
                                         struct moe_diag *diag)
{
    char path[PATH_MAX + MOE_NAME_LEN + 8];
    MOE_TRY(cluster_path(name_or_path, path, sizeof(path), diag));
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    enum moe_status st = moe_cluster_from_json_release(root, path, release, out, diag);
    cJSON_Delete(root);
    return st;
}

enum moe_status moe_cluster_read_json(
    const char *name_or_path, cJSON **root, char *path_out, size_t path_len, struct moe_diag *diag)
{
    *root = NULL;
    char path[PATH_MAX + MOE_NAME_LEN + 8];
    MOE_TRY(cluster_path(name_or_path, path, sizeof(path), diag));
    if (path_out != NULL && path_len > 0) {
        (void)snprintf(path_out, path_len, "%s", path);
    }
    cJSON *raw = NULL;
    MOE_TRY(moe_json_read_file(path, &raw, diag));
    enum moe_status st =
        moe_json_check_format(raw, MOE_CLUSTER_FILE_FORMAT, MOE_CLUSTER_FILE_VERSION, path, diag);
    if (st == MOE_OK) {
        st = moe_cluster_resolve_json(raw, path, root, diag);
    }
    cJSON_Delete(raw);
    return st;
}

enum moe_status
moe_cluster_file_base(const char *name_or_path, char *buf, size_t len, struct moe_diag *diag)
{
    if (len > 0) {
        buf[0] = '\0';
    }
    char path[PATH_MAX + MOE_NAME_LEN + 8];
    if (strchr(name_or_path, '/') != NULL || ends_with(name_or_path, ".json")) {
        (void)snprintf(path, sizeof(path), "%s", name_or_path);
    } else {
        char dir[PATH_MAX];
        if (!is_plain_name(name_or_path) || moe_cluster_dir(dir, sizeof(dir)) == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOT_FOUND, "unknown cluster \"%s\"", name_or_path);
        }
        (void)snprintf(path, sizeof(path), "%s/%s.json", dir, name_or_path);
    }
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    const cJSON *ext = cJSON_GetObjectItemCaseSensitive(root, "extends");
    if (cJSON_IsString(ext) && len > 0) {
        (void)snprintf(buf, len, "%s", ext->valuestring);
    }
    cJSON_Delete(root);
    return MOE_OK;
}
