/*
 * Model description files: moefold's own model JSON ("format": "moefold-model") and HuggingFace
 * config.json files read as published (DeepSeek-V3 / Kimi-K2, Qwen3-MoE, Qwen2-MoE, Mixtral,
 * GPT-OSS, Llama), both into struct moe_model_cfg. moefold's own format rejects unknown keys; HF
 * files ignore keys moefold does not use, but an unknown architecture or a missing field is an
 * error naming it.
 */
#ifndef MOE_TOPOLOGIES_MODEL_FILE_H
#define MOE_TOPOLOGIES_MODEL_FILE_H

#include "model/config.h"
#include "model/status.h"

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_MODEL_FILE_FORMAT  "moefold-model"
#define MOE_MODEL_FILE_VERSION 1

/*
 * Read a model file: moefold's own format when the top level has "format": "moefold-model",
 * otherwise a HuggingFace config.json (dispatch on "architectures" / "model_type").
 * The result is validated (moe_cfg_validate). Errors name the file and field.
 */
MOE_NODISCARD enum moe_status
moe_model_file_read(const char *path, struct moe_model_cfg *out, struct moe_diag *diag);

/* Same, from an already parsed tree; source names it in messages. */
MOE_NODISCARD enum moe_status moe_model_from_json(const cJSON *root,
                                                  const char *source,
                                                  struct moe_model_cfg *out,
                                                  struct moe_diag *diag);

/* Read a HuggingFace config.json tree as published. */
MOE_NODISCARD enum moe_status moe_model_from_hf_json(const cJSON *root,
                                                     const char *source,
                                                     struct moe_model_cfg *out,
                                                     struct moe_diag *diag);

/*
 * Build moefold's own JSON object for cfg (with "format" and "version"); NULL when out of memory.
 * Caller owns the result. Reading it back with moe_model_from_json gives an identical struct.
 */
cJSON *moe_model_to_json(const struct moe_model_cfg *cfg);

#ifdef __cplusplus
}
#endif

#endif /* MOE_TOPOLOGIES_MODEL_FILE_H */
