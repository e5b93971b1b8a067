/*
 * libFuzzer target: plan files ("format": "moefold-plan") through moe_json_parse +
 * moe_plan_from_json, as `moefold-train --plan` reads them: with the cluster the plan names when
 * that is a shipped cluster (hardware rules checked), else with none (rules skipped).
 *
 * Properties: a rejection has a message naming the source; an accepted plan written with
 * moe_plan_to_json, printed and parsed again reads back to the identical struct and the same
 * "prediction" object (compared as printed text).
 *
 * Seeds: plans written by moe_plan_write (tests/fuzz/gen_seeds.c). Dictionary:
 * tests/fuzz/plan.dict.
 */
#include "tests/fuzz/fuzz_util.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"
#include "topologies/plan_file.h"

#define SOURCE "fuzz-plan.json"

/* The shipped cluster the plan names, into *cl; false when it names none (or a path). */
static bool plan_cluster(const cJSON *root, struct moe_cluster *cl)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "cluster");
    if (!cJSON_IsString(name) || name->valuestring == NULL ||
        strchr(name->valuestring, '/') != NULL || strstr(name->valuestring, ".json") != NULL) {
        return false;
    }
    struct moe_diag diag = {0};
    return moe_cluster_load(name->valuestring, cl, &diag) == MOE_OK;
}

static void round_trip(const struct moe_plan *plan, const cJSON *pred, const struct moe_cluster *cl)
{
    cJSON *json = moe_plan_to_json(plan, pred);
    if (json == NULL) {
        fuzz_fail("moe_plan_to_json returned NULL for an accepted plan");
    }
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (text == NULL) {
        fuzz_fail("printing the plan JSON failed");
    }
    struct moe_diag diag = {0};
    cJSON *back = NULL;
    enum moe_status st = moe_json_parse(text, strlen(text), "round-trip.json", &back, &diag);
    free(text);
    if (st != MOE_OK) {
        fuzz_fail("written plan JSON does not parse: %s", diag.message);
    }
    struct moe_plan *again = malloc(sizeof(*again));
    cJSON *pred_again = NULL;
    if (again == NULL) {
        fuzz_fail("out of memory");
    }
    st = moe_plan_from_json(back, SOURCE, cl, again, &pred_again, &diag);
    cJSON_Delete(back);
    if (st != MOE_OK) {
        fuzz_fail("written plan does not read back: %s", diag.message);
    }
    if (memcmp(plan, again, sizeof(*again)) != 0) {
        fuzz_fail("plan changed in a write/read round trip");
    }
    /* Compare the printed text: cJSON_Compare cannot match objects with duplicate keys, which the
     * free-form prediction may hold. */
    char *a = pred != NULL ? cJSON_PrintUnformatted(pred) : NULL;
    char *b = pred_again != NULL ? cJSON_PrintUnformatted(pred_again) : NULL;
    if ((pred != NULL && a == NULL) || (pred_again != NULL && b == NULL)) {
        fuzz_fail("printing the prediction failed");
    }
    if ((a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0)) {
        fuzz_fail("plan prediction changed in a write/read round trip:\n%s\n%s", a ? a : "(none)",
                  b ? b : "(none)");
    }
    free(a);
    free(b);
    cJSON_Delete(pred_again);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct moe_diag diag = {0};
    cJSON *root = NULL;
    enum moe_status st = moe_json_parse((const char *)data, size, SOURCE, &root, &diag);
    if (!fuzz_check_status("moe_json_parse", st, &diag, SOURCE)) {
        return 0;
    }
    struct moe_cluster cluster;
    const struct moe_cluster *cl = plan_cluster(root, &cluster) ? &cluster : NULL;
    struct moe_plan *plan = malloc(sizeof(*plan));
    if (plan == NULL) {
        fuzz_fail("out of memory");
    }
    cJSON *pred = NULL;
    memset(&diag, 0, sizeof(diag));
    st = moe_plan_from_json(root, SOURCE, cl, plan, &pred, &diag);
    cJSON_Delete(root);
    if (fuzz_check_status("moe_plan_from_json", st, &diag, SOURCE)) {
        round_trip(plan, pred, cl);
    } else if (pred != NULL) {
        fuzz_fail("moe_plan_from_json failed but handed out a prediction");
    }
    cJSON_Delete(pred);
    free(plan);
    return 0;
}
