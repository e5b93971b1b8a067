/*
 * libFuzzer target: HuggingFace config.json files (DeepSeek-V3 / Kimi-K2, Qwen3-MoE, Qwen2-MoE,
 * Mixtral, GPT-OSS, Llama) read as published through moe_model_file_read, so the file layer
 * (moe_file_read_all: size limit, regular-file check, NUL bytes) is fuzzed too. The input is
 * written to a scratch file in $TMPDIR for each run.
 *
 * Properties: a rejection has a message naming the file; an accepted model reads back unchanged
 * from moefold's own format (moe_model_to_json -> moe_model_from_json; the name is kept, the HF
 * file's missing training length is the preset default on both sides).
 *
 * Seeds: tests/data/hf/ *.json. Dictionary: tests/fuzz/model_json.dict.
 */
#include "tests/fuzz/fuzz_util.h"
#include "topologies/json_util.h"
#include "topologies/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[4096];
    if (!fuzz_write_scratch("hf", data, size, path, sizeof(path))) {
        fuzz_fail("cannot write the scratch file %s", path);
    }
    struct moe_diag diag = {0};
    struct moe_model_cfg cfg;
    enum moe_status st = moe_model_file_read(path, &cfg, &diag);
    (void)unlink(path);
    if (!fuzz_check_status("moe_model_file_read", st, &diag, path)) {
        return 0;
    }
    cJSON *json = moe_model_to_json(&cfg);
    if (json == NULL) {
        fuzz_fail("moe_model_to_json returned NULL for an accepted model");
    }
    struct moe_model_cfg again;
    memset(&diag, 0, sizeof(diag));
    st = moe_model_from_json(json, "round-trip.json", &again, &diag);
    cJSON_Delete(json);
    if (st != MOE_OK) {
        fuzz_fail("accepted HF model does not read back from moefold's format: %s", diag.message);
    }
    if (memcmp(&cfg, &again, sizeof(again)) != 0) {
        fuzz_fail("HF model changed in a moefold-format round trip (%s)", cfg.name);
    }
    return 0;
}
