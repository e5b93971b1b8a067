/*
 * The "power" and "price" sections of a cluster file (topologies/cluster_costs.h). This file only
 * reads and checks figures; the arithmetic that turns them into a run's energy and cost lives with
 * the run (cli/train_cost.c).
 */
#include "topologies/cluster_costs.h"

#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Loose sanity ranges: catch a unit slip (kW for W, cents for dollars), not judge a figure. */
#define TDP_MIN_W      1.0
#define TDP_MAX_W      5000.0
#define OVERHEAD_MAX_W 10000.0
#define PUE_MIN        1.0
#define PUE_MAX        3.0
#define PRICE_MAX_USD  1000.0

/* Read one optional figure and its source text. */
static enum moe_status read_figure(const cJSON *sec,
                                   const char *key,
                                   double lo,
                                   double hi,
                                   const char *where,
                                   bool *has,
                                   double *value,
                                   char *source,
                                   struct moe_diag *diag)
{
    const cJSON *fig = cJSON_GetObjectItemCaseSensitive(sec, key);
    if (fig == NULL) {
        return MOE_OK;
    }
    MOE_TRY(moe_json_get_figure(sec, key, true, lo, hi, value, where, diag));
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(fig, "source");
    (void)snprintf(source, MOE_COST_SOURCE_LEN, "%s", src->valuestring);
    *has = true;
    return MOE_OK;
}

/* "YYYY-MM" or "YYYY-MM-DD" with plausible month and day. */
static bool is_date(const char *s)
{
    size_t n = strlen(s);
    if (n != 7 && n != 10) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        bool dash = i == 4 || i == 7;
        if (dash ? s[i] != '-' : !isdigit((unsigned char)s[i])) {
            return false;
        }
    }
    int month = (s[5] - '0') * 10 + (s[6] - '0');
    int day = n == 10 ? (s[8] - '0') * 10 + (s[9] - '0') : 1;
    return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

static enum moe_status
read_power(const cJSON *sec, struct moe_cluster_costs *c, struct moe_diag *diag)
{
    const char *where = "cluster.power";
    if (!cJSON_IsObject(sec)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected an object of figures", where);
    }
    static const char *const keys[] = {"gpu_tdp_w", "node_overhead_w_per_gpu", "pue", "note"};
    MOE_TRY(moe_json_check_keys(sec, keys, MOE_ARRAY_LEN(keys), where, diag));
    MOE_TRY(read_figure(sec, "gpu_tdp_w", TDP_MIN_W, TDP_MAX_W, where, &c->has_gpu_tdp,
                        &c->gpu_tdp_w, c->gpu_tdp_source, diag));
    MOE_TRY(read_figure(sec, "node_overhead_w_per_gpu", 0.0, OVERHEAD_MAX_W, where,
                        &c->has_node_overhead, &c->node_overhead_w_per_gpu, c->node_overhead_source,
                        diag));
    return read_figure(sec, "pue", PUE_MIN, PUE_MAX, where, &c->has_pue, &c->pue, c->pue_source,
                       diag);
}

static enum moe_status
read_price(const cJSON *sec, struct moe_cluster_costs *c, struct moe_diag *diag)
{
    const char *where = "cluster.price";
    if (!cJSON_IsObject(sec)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: expected an object", where);
    }
    static const char *const keys[] = {"per_gpu_hour_usd", "date", "note"};
    MOE_TRY(moe_json_check_keys(sec, keys, MOE_ARRAY_LEN(keys), where, diag));
    MOE_TRY(read_figure(sec, "per_gpu_hour_usd", 0.0, PRICE_MAX_USD, where, &c->has_price,
                        &c->price_per_gpu_hour_usd, c->price_source, diag));
    MOE_TRY(
        moe_json_get_string(sec, "date", false, c->price_date, sizeof(c->price_date), where, diag));
    if (c->has_price && c->price_date[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: a price needs its \"date\" (YYYY-MM-DD): prices change", where);
    }
    if (c->price_date[0] != '\0' && !is_date(c->price_date)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.date \"%s\": expected YYYY-MM-DD or YYYY-MM",
                            where, c->price_date);
    }
    if (c->has_price && !(c->price_per_gpu_hour_usd > 0.0)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s.per_gpu_hour_usd: a price must be above 0 (leave the section out "
                            "when the cluster has no price)",
                            where);
    }
    return MOE_OK;
}

enum moe_status
moe_cluster_costs_from_json(const cJSON *root, struct moe_cluster_costs *out, struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    const cJSON *power = cJSON_GetObjectItemCaseSensitive(root, "power");
    if (power != NULL) {
        MOE_TRY(read_power(power, out, diag));
    }
    const cJSON *price = cJSON_GetObjectItemCaseSensitive(root, "price");
    if (price != NULL) {
        MOE_TRY(read_price(price, out, diag));
    }
    return MOE_OK;
}

enum moe_status moe_cluster_costs_load(const char *name_or_path,
                                       struct moe_cluster_costs *out,
                                       struct moe_diag *diag)
{
    cJSON *root = NULL;
    char path[4096];
    MOE_TRY(moe_cluster_read_json(name_or_path, &root, path, sizeof(path), diag));
    enum moe_status st = moe_cluster_costs_from_json(root, out, diag);
    cJSON_Delete(root);
    if (st != MOE_OK && strstr(diag->message, path) == NULL) {
        char msg[sizeof(diag->message)];
        (void)snprintf(msg, sizeof(msg), "%s", diag->message);
        (void)moe_diag_set(diag, st, "%s: %s", path, msg);
    }
    return st;
}

bool moe_cluster_costs_missing_power(const struct moe_cluster_costs *c,
                                     bool pue_given,
                                     char *buf,
                                     size_t len)
{
    const char *names[3];
    int n = 0;
    if (!c->has_gpu_tdp) {
        names[n++] = "power.gpu_tdp_w";
    }
    if (!c->has_node_overhead) {
        names[n++] = "power.node_overhead_w_per_gpu";
    }
    if (!c->has_pue && !pue_given) {
        names[n++] = "power.pue";
    }
    size_t used = 0;
    if (len > 0) {
        buf[0] = '\0';
    }
    for (int i = 0; i < n && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "", names[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    return n == 0;
}
