/*
 * libFuzzer target: cluster files ("format": "moefold-cluster") through moe_json_parse +
 * moe_cluster_from_json (strict keys, figures with sources, moe_cluster_validate).
 *
 * Properties: a rejection has a message naming the source; an accepted cluster written with
 * moe_cluster_to_json, printed and parsed again reads back to the identical struct.
 *
 * Seeds: topologies/ *.json. Dictionary: tests/fuzz/cluster.dict.
 */
#include "tests/fuzz/fuzz_util.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#define SOURCE "fuzz-cluster.json"

static void round_trip(const struct moe_cluster *cl)
{
    cJSON *json = moe_cluster_to_json(cl, "fuzz round trip");
    if (json == NULL) {
        fuzz_fail("moe_cluster_to_json returned NULL for an accepted cluster");
    }
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (text == NULL) {
        fuzz_fail("printing the cluster JSON failed");
    }
    struct moe_diag diag = {0};
    cJSON *back = NULL;
    enum moe_status st = moe_json_parse(text, strlen(text), "round-trip.json", &back, &diag);
    free(text);
    if (st != MOE_OK) {
        fuzz_fail("written cluster JSON does not parse: %s", diag.message);
    }
    struct moe_cluster again;
    st = moe_cluster_from_json(back, "round-trip.json", &again, &diag);
    cJSON_Delete(back);
    if (st != MOE_OK) {
        fuzz_fail("written cluster does not read back: %s", diag.message);
    }
    if (memcmp(cl, &again, sizeof(again)) != 0) {
        fuzz_fail("cluster changed in a write/read round trip (%s)", cl->name);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct moe_diag diag = {0};
    cJSON *root = NULL;
    enum moe_status st = moe_json_parse((const char *)data, size, SOURCE, &root, &diag);
    if (!fuzz_check_status("moe_json_parse", st, &diag, SOURCE)) {
        return 0;
    }
    struct moe_cluster cl;
    memset(&diag, 0, sizeof(diag));
    st = moe_cluster_from_json(root, SOURCE, &cl, &diag);
    cJSON_Delete(root);
    if (fuzz_check_status("moe_cluster_from_json", st, &diag, SOURCE)) {
        round_trip(&cl);
    }
    return 0;
}
