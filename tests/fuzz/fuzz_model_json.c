/*
 * libFuzzer target: moefold's own model files ("format": "moefold-model") through
 * moe_json_parse + moe_model_from_json (which hands files without "format" to the HuggingFace
 * reader, so both paths are reachable from here).
 *
 * Properties: a rejection has a message naming the source; an accepted model written back with
 * moe_model_to_json, printed and parsed again reads back to the identical struct (padding
 * included: both sides start from moe_cfg_init's zeroed struct).
 *
 * Seeds: every built-in preset written with moe_model_to_json (tests/fuzz/gen_seeds.c) plus
 * tests/data/hf/ *.json. Dictionary: tests/fuzz/model_json.dict.
 */
#include "tests/fuzz/fuzz_util.h"
#include "topologies/json_util.h"
#include "topologies/model_file.h"

#define SOURCE "fuzz-model.json"

/* Write cfg in moefold's format, print, parse and read it again; must give the same struct. */
static void round_trip(const struct moe_model_cfg *cfg)
{
    cJSON *json = moe_model_to_json(cfg);
    if (json == NULL) {
        fuzz_fail("moe_model_to_json returned NULL for an accepted model");
    }
    char *text = cJSON_PrintUnformatted(json);
    cJSON_Delete(json);
    if (text == NULL) {
        fuzz_fail("printing the model JSON failed");
    }
    struct moe_diag diag = {0};
    cJSON *back = NULL;
    enum moe_status st = moe_json_parse(text, strlen(text), "round-trip.json", &back, &diag);
    free(text);
    if (st != MOE_OK) {
        fuzz_fail("written model JSON does not parse: %s", diag.message);
    }
    struct moe_model_cfg again;
    st = moe_model_from_json(back, SOURCE, &again, &diag);
    cJSON_Delete(back);
    if (st != MOE_OK) {
        fuzz_fail("written model does not read back: %s", diag.message);
    }
    if (memcmp(cfg, &again, sizeof(again)) != 0) {
        fuzz_fail("model changed in a write/read round trip (%s)", cfg->name);
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
    struct moe_model_cfg cfg;
    memset(&diag, 0, sizeof(diag));
    st = moe_model_from_json(root, SOURCE, &cfg, &diag);
    cJSON_Delete(root);
    if (fuzz_check_status("moe_model_from_json", st, &diag, SOURCE)) {
        round_trip(&cfg);
    }
    return 0;
}
