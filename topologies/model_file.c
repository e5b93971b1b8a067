/*
 * Model description files into struct moe_model_cfg: moefold's own JSON ("format":
 * "moefold-model", one key per struct field, unknown keys refused) and HuggingFace config.json
 * files read as published (keys moefold does not use are ignored).
 *
 * HF readers follow each architecture's modeling code in HF transformers (and DeepSeek's remote
 * code) for which layers are MoE and which attend through a sliding window:
 *   DeepseekV3ForCausalLM (DeepSeek-V3, Kimi-K2): layer i is MoE when n_routed_experts > 0,
 *     i >= first_k_dense_replace and i % moe_layer_freq == 0; shared expert = n_shared_experts x
 *     moe_intermediate_size; MTP layers = num_nextn_predict_layers; topk_method noaux_tc means the
 *     sigmoid router's aux-loss-free expert bias; n_group > 1 turns on group-limited routing.
 *   Qwen3MoeForCausalLM / Qwen2MoeForCausalLM: layer i is MoE when (i + 1) % decoder_sparse_step
 *     == 0 unless listed in mlp_only_layers; with use_sliding_window, layers from max_window_layers
 *     on use sliding_window. Qwen3 has per-head q/k RMSNorm, Qwen2 a shared expert.
 *   MixtralForCausalLM: every layer MoE (num_local_experts, num_experts_per_tok of
 *     intermediate_size); sliding_window, when not null, on every layer.
 *   GptOssForCausalLM: every layer MoE (num_local_experts, experts_per_token /
 *     num_experts_per_tok); layer_types marks sliding_attention layers (default: even layers, as
 *     GptOssConfig); biases on attention, experts and router; the GLU gate is quick-GELU.
 *   LlamaForCausalLM: dense.
 * All of them use a gated (SwiGLU) MLP and default to untied embeddings, as their config classes
 * do. HF files carry no training length: seq_length is 4096 (the MoE recipes' length), or
 * max_position_embeddings when that is shorter; change it with --seq-length. make_vocab_size_
 * divisible_by is Megatron's 128. MLA models get kv_channels = v_head_dim, as Megatron's DeepSeek
 * launch scripts set. Not represented (each under 1e-5 of the parameters): q/k/v biases other than
 * GPT-OSS's (Qwen2, attention_bias on Llama-family files), Qwen2's shared-expert gate, attention
 * sinks.
 *
 * The cfg's name is the file's base name without ".json" (the directory's name for a file called
 * config.json), or the "name" key of a moefold file.
 */
#include "topologies/model_file.h"

#include "topologies/json_util.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Training length given to HF models, which publish only their maximum context. */
#define MOE_HF_DEFAULT_SEQ 4096

/* ---------------------------------------------------------------------------------------------- */
/* Shared helpers */

/* Put "source: " in front of diag's message (validation messages do not know the file). */
static enum moe_status with_source(enum moe_status st, const char *source, struct moe_diag *diag)
{
    if (st == MOE_OK || diag == NULL) {
        return st;
    }
    char msg[sizeof(diag->message)];
    (void)snprintf(msg, sizeof(msg), "%s", diag->message);
    size_t n = strlen(source);
    if (strncmp(msg, source, n) != 0) {
        (void)snprintf(diag->message, sizeof(diag->message), "%.100s: %.400s", source, msg);
    }
    moe_diag_source(diag, source);
    return st;
}

/* cfg.name from a path: base name without .json; the parent directory for ".../config.json". */
static void name_from_source(const char *source, char *name, size_t len)
{
    const char *base = strrchr(source, '/');
    const char *start = base != NULL ? base + 1 : source;
    size_t n = strlen(start);
    if (strcmp(start, "config.json") == 0 && base != NULL && base != source) {
        const char *dir_end = base;
        const char *dir = dir_end;
        while (dir > source && dir[-1] != '/') {
            dir--;
        }
        start = dir;
        n = (size_t)(dir_end - dir);
    } else if (n > 5 && strcmp(start + n - 5, ".json") == 0) {
        n -= 5;
    }
    if (n >= len) {
        n = len - 1;
    }
    memcpy(name, start, n);
    name[n] = '\0';
}

/* Read a list of 0/1 of exactly num_layers entries into bit `bit` of layer_flags. */
static enum moe_status read_layer_bits(const cJSON *list,
                                       const char *key,
                                       uint8_t bit,
                                       struct moe_model_cfg *c,
                                       const char *source,
                                       struct moe_diag *diag)
{
    int n = cJSON_GetArraySize(list);
    if (n != c->num_layers) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s.%s: has %d entries but num_layers = %d: give one 0/1 per layer",
                            source, key, n, c->num_layers);
    }
    int i = 0;
    for (const cJSON *it = list->child; it != NULL; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || (it->valuedouble != 0.0 && it->valuedouble != 1.0)) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s[%d]: expected 0 or 1", source, key,
                                i);
        }
        if (it->valuedouble == 1.0) {
            c->layer_flags[i] = (uint8_t)(c->layer_flags[i] | bit);
        }
    }
    return MOE_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* moefold's own format: one key per struct field, in struct order. */

struct int_field {
    char key[40];
    size_t offset;
    bool required;
};
struct bool_field {
    char key[24];
    size_t offset;
};

#define MOE_INT_FIELD(f, req)                                                                      \
    {                                                                                              \
#f, offsetof(struct moe_model_cfg, f), req                                                 \
    }
static const struct int_field moe_int_fields[] = {
    MOE_INT_FIELD(num_layers, true),
    MOE_INT_FIELD(hidden_size, true),
    MOE_INT_FIELD(ffn_hidden_size, true),
    MOE_INT_FIELD(num_attention_heads, true),
    MOE_INT_FIELD(num_query_groups, false),
    MOE_INT_FIELD(kv_channels, false),
    MOE_INT_FIELD(vocab_size, true),
    MOE_INT_FIELD(make_vocab_size_divisible_by, false),
    MOE_INT_FIELD(seq_length, true),
    MOE_INT_FIELD(q_lora_rank, false),
    MOE_INT_FIELD(kv_lora_rank, false),
    MOE_INT_FIELD(qk_head_dim, false),
    MOE_INT_FIELD(qk_pos_emb_head_dim, false),
    MOE_INT_FIELD(v_head_dim, false),
    MOE_INT_FIELD(window_size, false),
    MOE_INT_FIELD(num_experts, false),
    MOE_INT_FIELD(moe_ffn_hidden_size, false),
    MOE_INT_FIELD(moe_router_topk, false),
    MOE_INT_FIELD(moe_shared_expert_intermediate_size, false),
    MOE_INT_FIELD(moe_router_num_groups, false),
    MOE_INT_FIELD(moe_router_group_topk, false),
    MOE_INT_FIELD(mtp_num_layers, false),
};
#define MOE_BOOL_FIELD(f)                                                                          \
    {                                                                                              \
#f, offsetof(struct moe_model_cfg, f)                                                      \
    }
static const struct bool_field moe_bool_fields[] = {
    MOE_BOOL_FIELD(is_swiglu),
    MOE_BOOL_FIELD(is_quick_geglu),
    MOE_BOOL_FIELD(is_untied_embeddings),
    MOE_BOOL_FIELD(has_qk_layernorm),
    MOE_BOOL_FIELD(has_linear_bias),
    MOE_BOOL_FIELD(is_mla),
    MOE_BOOL_FIELD(has_router_expert_bias),
    MOE_BOOL_FIELD(has_attention_sinks),
};
/* Keys that are not plain int/bool fields. */
static const char moe_other_keys[][20] = {
    "format", "version", "name", "router_score", "moe_layer_freq", "windowed_layers",
};

static int *int_at(struct moe_model_cfg *c, size_t offset)
{
    return (int *)(void *)((char *)c + offset);
}
static const int *cint_at(const struct moe_model_cfg *c, size_t offset)
{
    return (const int *)(const void *)((const char *)c + offset);
}
static bool *bool_at(struct moe_model_cfg *c, size_t offset)
{
    return (bool *)(void *)((char *)c + offset);
}
static const bool *cbool_at(const struct moe_model_cfg *c, size_t offset)
{
    return (const bool *)(const void *)((const char *)c + offset);
}

static enum moe_status own_check_keys(const cJSON *root, const char *source, struct moe_diag *diag)
{
    const char *allowed[MOE_ARRAY_LEN(moe_int_fields) + MOE_ARRAY_LEN(moe_bool_fields) +
                        MOE_ARRAY_LEN(moe_other_keys)];
    size_t n = 0;
    for (size_t i = 0; i < MOE_ARRAY_LEN(moe_other_keys); i++) {
        allowed[n++] = moe_other_keys[i];
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(moe_int_fields); i++) {
        allowed[n++] = moe_int_fields[i].key;
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(moe_bool_fields); i++) {
        allowed[n++] = moe_bool_fields[i].key;
    }
    return moe_json_check_keys(root, allowed, n, source, diag);
}

static enum moe_status own_router_score(const cJSON *root,
                                        struct moe_model_cfg *c,
                                        const char *source,
                                        struct moe_diag *diag)
{
    char score[16] = "softmax";
    MOE_TRY(moe_json_get_string(root, "router_score", false, score, sizeof(score), source, diag));
    if (strcmp(score, "softmax") == 0) {
        c->router_score = MOE_ROUTER_SOFTMAX;
    } else if (strcmp(score, "sigmoid") == 0) {
        c->router_score = MOE_ROUTER_SIGMOID;
    } else {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s.router_score = \"%s\": use \"softmax\" or \"sigmoid\"", source,
                            score);
    }
    return MOE_OK;
}

/* "moe_layer_freq": Megatron's int (layer i is MoE when i % freq == 0) or a list of 0/1. */
static enum moe_status own_layer_pattern(const cJSON *root,
                                         struct moe_model_cfg *c,
                                         const char *source,
                                         struct moe_diag *diag)
{
    const cJSON *freq = cJSON_GetObjectItemCaseSensitive(root, "moe_layer_freq");
    if (freq == NULL || cJSON_IsNull(freq)) {
        moe_cfg_set_moe_every(c, c->num_experts > 0 ? 1 : 0); /* Megatron's default: 1 */
    } else if (cJSON_IsArray(freq)) {
        MOE_TRY(read_layer_bits(freq, "moe_layer_freq", MOE_LAYER_MOE, c, source, diag));
    } else {
        int f = 0;
        MOE_TRY(
            moe_json_get_int(root, "moe_layer_freq", true, 1, MOE_MAX_LAYERS, &f, source, diag));
        moe_cfg_set_moe_every(c, f);
    }
    const cJSON *win = cJSON_GetObjectItemCaseSensitive(root, "windowed_layers");
    if (win != NULL && !cJSON_IsNull(win)) {
        if (!cJSON_IsArray(win)) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s.windowed_layers: expected a list of 0/1, one per layer",
                                source);
        }
        MOE_TRY(read_layer_bits(win, "windowed_layers", MOE_LAYER_WINDOWED, c, source, diag));
    }
    return MOE_OK;
}

static enum moe_status
own_read(const cJSON *root, const char *source, struct moe_model_cfg *out, struct moe_diag *diag)
{
    MOE_TRY(
        moe_json_check_format(root, MOE_MODEL_FILE_FORMAT, MOE_MODEL_FILE_VERSION, source, diag));
    MOE_TRY(own_check_keys(root, source, diag));
    struct moe_model_cfg c;
    moe_cfg_init(&c);
    char name[MOE_NAME_LEN] = "";
    MOE_TRY(moe_json_get_string(root, "name", false, name, sizeof(name), source, diag));
    if (cJSON_GetObjectItemCaseSensitive(root, "name") != NULL) {
        memcpy(c.name, name, sizeof(c.name)); /* bytes past the NUL stay zero */
    } else {
        name_from_source(source, c.name, sizeof(c.name));
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(moe_int_fields); i++) {
        const struct int_field *f = &moe_int_fields[i];
        MOE_TRY(moe_json_get_int(root, f->key, f->required, 0, INT_MAX, int_at(&c, f->offset),
                                 source, diag));
    }
    for (size_t i = 0; i < MOE_ARRAY_LEN(moe_bool_fields); i++) {
        const struct bool_field *f = &moe_bool_fields[i];
        MOE_TRY(moe_json_get_bool(root, f->key, false, bool_at(&c, f->offset), source, diag));
    }
    /* Megatron's defaults (an absent key or null): no GQA, kv_channels = hidden / heads. */
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(root, "num_query_groups");
    if (groups == NULL || cJSON_IsNull(groups)) {
        c.num_query_groups = c.num_attention_heads;
    }
    const cJSON *kvc = cJSON_GetObjectItemCaseSensitive(root, "kv_channels");
    if ((kvc == NULL || cJSON_IsNull(kvc)) && c.num_attention_heads > 0) {
        c.kv_channels = c.hidden_size / c.num_attention_heads;
    }
    if (c.num_layers > MOE_MAX_LAYERS) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s.num_layers = %d is over the limit of %d layers", source,
                            c.num_layers, MOE_MAX_LAYERS);
    }
    MOE_TRY(own_router_score(root, &c, source, diag));
    MOE_TRY(own_layer_pattern(root, &c, source, diag));
    memcpy(out, &c, sizeof(c)); /* padding included: callers may memcmp */
    return MOE_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Writing moefold's format */

/* The int moe_layer_freq that gives exactly these flags, or 0 when none does. */
static int pattern_as_freq(const struct moe_model_cfg *c)
{
    for (int f = 1; f <= c->num_layers; f++) {
        bool match = true;
        for (int i = 0; i < c->num_layers && match; i++) {
            match = ((c->layer_flags[i] & MOE_LAYER_MOE) != 0) == (i % f == 0);
        }
        if (match) {
            return f;
        }
    }
    return 0;
}

static cJSON *layer_bits_list(const struct moe_model_cfg *c, uint8_t bit)
{
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list != NULL && i < c->num_layers; i++) {
        cJSON *v = cJSON_CreateNumber((c->layer_flags[i] & bit) != 0 ? 1 : 0);
        if (v == NULL || !cJSON_AddItemToArray(list, v)) {
            cJSON_Delete(v);
            cJSON_Delete(list);
            return NULL;
        }
    }
    return list;
}

static bool add_layer_pattern(cJSON *root, const struct moe_model_cfg *c)
{
    int num_moe = 0;
    int num_windowed = 0;
    int n = c->num_layers < 0 ? 0 : (c->num_layers > MOE_MAX_LAYERS ? 0 : c->num_layers);
    for (int i = 0; i < n; i++) {
        num_moe += (c->layer_flags[i] & MOE_LAYER_MOE) != 0;
        num_windowed += (c->layer_flags[i] & MOE_LAYER_WINDOWED) != 0;
    }
    /* Absent means "every layer" with experts and "none" without (see own_layer_pattern). */
    if (num_moe > 0 || c->num_experts > 0) {
        int f = num_moe > 0 ? pattern_as_freq(c) : 0;
        if (f > 0) {
            if (cJSON_AddNumberToObject(root, "moe_layer_freq", f) == NULL) {
                return false;
            }
        } else {
            cJSON *list = layer_bits_list(c, MOE_LAYER_MOE);
            if (list == NULL || !cJSON_AddItemToObject(root, "moe_layer_freq", list)) {
                cJSON_Delete(list);
                return false;
            }
        }
    }
    if (num_windowed > 0) {
        cJSON *list = layer_bits_list(c, MOE_LAYER_WINDOWED);
        if (list == NULL || !cJSON_AddItemToObject(root, "windowed_layers", list)) {
            cJSON_Delete(list);
            return false;
        }
    }
    return true;
}

cJSON *moe_model_to_json(const struct moe_model_cfg *cfg)
{
    cJSON *root = cJSON_CreateObject();
    if (root == NULL) {
        return NULL;
    }
    char name[MOE_NAME_LEN];
    (void)snprintf(name, sizeof(name), "%.*s", MOE_NAME_LEN - 1, cfg->name);
    bool ok = cJSON_AddStringToObject(root, "format", MOE_MODEL_FILE_FORMAT) != NULL &&
              cJSON_AddNumberToObject(root, "version", MOE_MODEL_FILE_VERSION) != NULL &&
              cJSON_AddStringToObject(root, "name", name) != NULL;
    for (size_t i = 0; ok && i < MOE_ARRAY_LEN(moe_int_fields); i++) {
        const struct int_field *f = &moe_int_fields[i];
        ok = cJSON_AddNumberToObject(root, f->key, *cint_at(cfg, f->offset)) != NULL;
    }
    for (size_t i = 0; ok && i < MOE_ARRAY_LEN(moe_bool_fields); i++) {
        const struct bool_field *f = &moe_bool_fields[i];
        ok = cJSON_AddBoolToObject(root, f->key, *cbool_at(cfg, f->offset)) != NULL;
    }
    if (ok) {
        const char *score = cfg->router_score == MOE_ROUTER_SIGMOID ? "sigmoid" : "softmax";
        ok = cJSON_AddStringToObject(root, "router_score", score) != NULL;
    }
    if (!ok || !add_layer_pattern(root, cfg)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---------------------------------------------------------------------------------------------- */
/* HuggingFace config.json */

enum hf_arch {
    HF_DEEPSEEK_V3,
    HF_QWEN3_MOE,
    HF_QWEN2_MOE,
    HF_MIXTRAL,
    HF_GPT_OSS,
    HF_LLAMA,
};

struct hf_arch_name {
    char arch[32];       /* "architectures" entry */
    char model_type[16]; /* "model_type" value */
    enum hf_arch kind;
};

static const struct hf_arch_name moe_hf_archs[] = {
    {"DeepseekV3ForCausalLM", "deepseek_v3", HF_DEEPSEEK_V3},
    {"DeepseekV3ForCausalLM", "kimi_k2", HF_DEEPSEEK_V3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", HF_QWEN3_MOE},
    {"Qwen2MoeForCausalLM", "qwen2_moe", HF_QWEN2_MOE},
    {"MixtralForCausalLM", "mixtral", HF_MIXTRAL},
    {"GptOssForCausalLM", "gpt_oss", HF_GPT_OSS},
    {"LlamaForCausalLM", "llama", HF_LLAMA},
};

#define MOE_HF_SUPPORTED                                                                           \
    "DeepseekV3ForCausalLM (DeepSeek-V3, Kimi-K2), Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, "     \
    "MixtralForCausalLM, GptOssForCausalLM, LlamaForCausalLM"

/* Which reader: the first supported "architectures" entry, else "model_type". */
static enum moe_status
hf_detect(const cJSON *root, const char *source, enum hf_arch *kind, struct moe_diag *diag)
{
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *first = NULL;
    for (const cJSON *it = cJSON_IsArray(archs) ? archs->child : NULL; it != NULL; it = it->next) {
        if (!cJSON_IsString(it)) {
            continue;
        }
        first = first != NULL ? first : it->valuestring;
        for (size_t i = 0; i < MOE_ARRAY_LEN(moe_hf_archs); i++) {
            if (strcmp(it->valuestring, moe_hf_archs[i].arch) == 0) {
                *kind = moe_hf_archs[i].kind;
                return MOE_OK;
            }
        }
    }
    if (cJSON_IsString(type)) {
        for (size_t i = 0; i < MOE_ARRAY_LEN(moe_hf_archs); i++) {
            if (strcmp(type->valuestring, moe_hf_archs[i].model_type) == 0) {
                *kind = moe_hf_archs[i].kind;
                return MOE_OK;
            }
        }
    }
    if (first == NULL && !cJSON_IsString(type)) {
        return moe_diag_set(
            diag, MOE_ERR_INVALID,
            "%s: no \"architectures\" or \"model_type\" key, so neither a "
            "HuggingFace config.json nor a moefold model file (\"format\": \"%s\"); "
            "supported architectures: %s",
            source, MOE_MODEL_FILE_FORMAT, MOE_HF_SUPPORTED);
    }
    return moe_diag_set(diag, MOE_ERR_UNSUPPORTED,
                        "%s: architecture \"%s\" is not supported; supported: %s (or describe the "
                        "model with Megatron flags or a moefold model file)",
                        source, first != NULL ? first : type->valuestring, MOE_HF_SUPPORTED);
}

/* Fields every supported architecture has: sizes, heads, vocabulary, embeddings, length. */
static enum moe_status hf_trunk(const cJSON *root,
                                const char *source,
                                bool head_dim_required,
                                struct moe_model_cfg *c,
                                struct moe_diag *diag)
{
    MOE_TRY(moe_json_get_int(root, "num_hidden_layers", true, 1, MOE_MAX_LAYERS, &c->num_layers,
                             source, diag));
    MOE_TRY(moe_json_get_int(root, "hidden_size", true, 1, INT_MAX, &c->hidden_size, source, diag));
    MOE_TRY(moe_json_get_int(root, "num_attention_heads", true, 1, INT_MAX, &c->num_attention_heads,
                             source, diag));
    MOE_TRY(moe_json_get_int(root, "vocab_size", true, 1, INT_MAX, &c->vocab_size, source, diag));
    MOE_TRY(moe_json_get_int(root, "intermediate_size", true, 0, INT_MAX, &c->ffn_hidden_size,
                             source, diag));
    c->num_query_groups = c->num_attention_heads;
    MOE_TRY(moe_json_get_int(root, "num_key_value_heads", false, 1, INT_MAX, &c->num_query_groups,
                             source, diag));
    c->kv_channels = c->hidden_size / c->num_attention_heads;
    MOE_TRY(moe_json_get_int(root, "head_dim", head_dim_required, 1, INT_MAX, &c->kv_channels,
                             source, diag));
    bool tied = false;
    MOE_TRY(moe_json_get_bool(root, "tie_word_embeddings", false, &tied, source, diag));
    c->is_untied_embeddings = !tied;
    c->is_swiglu = true;
    int max_pos = MOE_HF_DEFAULT_SEQ;
    MOE_TRY(moe_json_get_int(root, "max_position_embeddings", false, 1, INT_MAX, &max_pos, source,
                             diag));
    c->seq_length = max_pos < MOE_HF_DEFAULT_SEQ ? max_pos : MOE_HF_DEFAULT_SEQ;
    return MOE_OK;
}

/* A string key compared against a fixed set; absent leaves *idx unchanged. */
static enum moe_status hf_choice(const cJSON *root,
                                 const char *key,
                                 const char (*choices)[24],
                                 int num_choices,
                                 int *idx,
                                 const char *source,
                                 struct moe_diag *diag)
{
    char value[64] = "";
    MOE_TRY(moe_json_get_string(root, key, false, value, sizeof(value), source, diag));
    if (value[0] == '\0') {
        return MOE_OK;
    }
    for (int i = 0; i < num_choices; i++) {
        if (strcmp(value, choices[i]) == 0) {
            *idx = i;
            return MOE_OK;
        }
    }
    char list[128] = "";
    size_t used = 0;
    for (int i = 0; i < num_choices; i++) {
        int w = snprintf(list + used, sizeof(list) - used, "%s\"%s\"", i ? ", " : "", choices[i]);
        if (w < 0 || (size_t)w >= sizeof(list) - used) {
            break;
        }
        used += (size_t)w;
    }
    return moe_diag_set(diag, MOE_ERR_UNSUPPORTED, "%s.%s = \"%s\" is not supported; known: %s",
                        source, key, value, list);
}

static enum moe_status hf_deepseek_routing(const cJSON *root,
                                           const char *source,
                                           struct moe_model_cfg *c,
                                           struct moe_diag *diag)
{
    static const char scores[][24] = {"softmax", "sigmoid"};
    static const char methods[][24] = {"greedy", "group_limited_greedy", "noaux_tc"};
    int score = 1;  /* DeepSeek-V3's configuration default: sigmoid */
    int method = 2; /* and noaux_tc */
    MOE_TRY(hf_choice(root, "scoring_func", scores, 2, &score, source, diag));
    MOE_TRY(hf_choice(root, "topk_method", methods, 3, &method, source, diag));
    c->router_score = score == 1 ? MOE_ROUTER_SIGMOID : MOE_ROUTER_SOFTMAX;
    c->has_router_expert_bias = method == 2;
    int groups = 1;
    int group_topk = 1;
    MOE_TRY(moe_json_get_int(root, "n_group", false, 1, INT_MAX, &groups, source, diag));
    MOE_TRY(moe_json_get_int(root, "topk_group", false, 1, INT_MAX, &group_topk, source, diag));
    if (groups > 1 && method != 0) { /* greedy ignores the groups */
        c->moe_router_num_groups = groups;
        c->moe_router_group_topk = group_topk;
    }
    return MOE_OK;
}

static enum moe_status
hf_deepseek(const cJSON *root, const char *source, struct moe_model_cfg *c, struct moe_diag *diag)
{
    MOE_TRY(hf_trunk(root, source, false, c, diag));
    int shared = 0;
    int first_dense = 0;
    int freq = 1;
    MOE_TRY(moe_json_get_int(root, "moe_intermediate_size", true, 1, INT_MAX,
                             &c->moe_ffn_hidden_size, source, diag));
    MOE_TRY(moe_json_get_int(root, "n_routed_experts", true, 0, INT_MAX, &c->num_experts, source,
                             diag));
    MOE_TRY(moe_json_get_int(root, "num_experts_per_tok", true, 1, INT_MAX, &c->moe_router_topk,
                             source, diag));
    MOE_TRY(moe_json_get_int(root, "n_shared_experts", true, 0, INT_MAX, &shared, source, diag));
    MOE_TRY(moe_json_get_int(root, "first_k_dense_replace", true, 0, INT_MAX, &first_dense, source,
                             diag));
    MOE_TRY(moe_json_get_int(root, "moe_layer_freq", false, 1, INT_MAX, &freq, source, diag));
    MOE_TRY(moe_json_get_int(root, "num_nextn_predict_layers", false, 0, INT_MAX,
                             &c->mtp_num_layers, source, diag));
    c->is_mla = true;
    if (cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank") == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: missing required key \"q_lora_rank\" (null when queries are not "
                            "compressed)",
                            source);
    }
    MOE_TRY(
        moe_json_get_int(root, "q_lora_rank", false, 0, INT_MAX, &c->q_lora_rank, source, diag));
    MOE_TRY(
        moe_json_get_int(root, "kv_lora_rank", true, 1, INT_MAX, &c->kv_lora_rank, source, diag));
    MOE_TRY(moe_json_get_int(root, "qk_nope_head_dim", true, 1, INT_MAX, &c->qk_head_dim, source,
                             diag));
    MOE_TRY(moe_json_get_int(root, "qk_rope_head_dim", true, 1, INT_MAX, &c->qk_pos_emb_head_dim,
                             source, diag));
    MOE_TRY(moe_json_get_int(root, "v_head_dim", true, 1, INT_MAX, &c->v_head_dim, source, diag));
    c->num_query_groups = c->num_attention_heads; /* MLA: no GQA */
    c->kv_channels = c->v_head_dim;
    c->moe_shared_expert_intermediate_size =
        c->num_experts > 0 && shared <= INT_MAX / c->moe_ffn_hidden_size
            ? shared * c->moe_ffn_hidden_size
            : 0;
    for (int i = 0; i < c->num_layers && c->num_experts > 0; i++) {
        if (i >= first_dense && i % freq == 0) {
            c->layer_flags[i] = MOE_LAYER_MOE;
        }
    }
    if (c->num_experts == 0) {
        c->moe_ffn_hidden_size = 0;
        c->moe_router_topk = 0;
        return MOE_OK;
    }
    return hf_deepseek_routing(root, source, c, diag);
}

/* Qwen's sliding window: with use_sliding_window, layers >= max_window_layers. */
static enum moe_status hf_qwen_window(const cJSON *root,
                                      const char *source,
                                      struct moe_model_cfg *c,
                                      struct moe_diag *diag)
{
    bool use = false;
    MOE_TRY(moe_json_get_bool(root, "use_sliding_window", false, &use, source, diag));
    if (!use) {
        return MOE_OK;
    }
    int from = 0;
    MOE_TRY(
        moe_json_get_int(root, "sliding_window", true, 1, INT_MAX, &c->window_size, source, diag));
    MOE_TRY(moe_json_get_int(root, "max_window_layers", false, 0, INT_MAX, &from, source, diag));
    for (int i = from; i < c->num_layers; i++) {
        c->layer_flags[i] = (uint8_t)(c->layer_flags[i] | MOE_LAYER_WINDOWED);
    }
    if (from >= c->num_layers) {
        c->window_size = 0; /* no layer reaches the window */
    }
    return MOE_OK;
}

static enum moe_status hf_qwen(const cJSON *root,
                               const char *source,
                               bool is_qwen3,
                               struct moe_model_cfg *c,
                               struct moe_diag *diag)
{
    MOE_TRY(hf_trunk(root, source, false, c, diag));
    MOE_TRY(moe_json_get_int(root, "moe_intermediate_size", true, 1, INT_MAX,
                             &c->moe_ffn_hidden_size, source, diag));
    MOE_TRY(moe_json_get_int(root, "num_experts", true, 0, INT_MAX, &c->num_experts, source, diag));
    MOE_TRY(moe_json_get_int(root, "num_experts_per_tok", true, 1, INT_MAX, &c->moe_router_topk,
                             source, diag));
    if (is_qwen3) {
        c->has_qk_layernorm = true;
    } else {
        MOE_TRY(moe_json_get_int(root, "shared_expert_intermediate_size", true, 0, INT_MAX,
                                 &c->moe_shared_expert_intermediate_size, source, diag));
    }
    int step = 1;
    MOE_TRY(moe_json_get_int(root, "decoder_sparse_step", false, 1, INT_MAX, &step, source, diag));
    for (int i = 0; i < c->num_layers && c->num_experts > 0; i++) {
        if ((i + 1) % step == 0) {
            c->layer_flags[i] = MOE_LAYER_MOE;
        }
    }
    const cJSON *mlp_only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (mlp_only != NULL && !cJSON_IsNull(mlp_only)) {
        if (!cJSON_IsArray(mlp_only)) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s.mlp_only_layers: expected a list of layer indices", source);
        }
        for (const cJSON *it = mlp_only->child; it != NULL; it = it->next) {
            double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
            if (v < 0 || v >= c->num_layers || v != (double)(int)v) {
                return moe_diag_set(diag, MOE_ERR_INVALID,
                                    "%s.mlp_only_layers: entries must be layer indices in [0, %d)",
                                    source, c->num_layers);
            }
            c->layer_flags[(int)v] = 0;
        }
    }
    if (c->num_experts == 0) {
        c->moe_ffn_hidden_size = 0;
        c->moe_router_topk = 0;
        c->moe_shared_expert_intermediate_size = 0;
    }
    return hf_qwen_window(root, source, c, diag);
}

static enum moe_status
hf_mixtral(const cJSON *root, const char *source, struct moe_model_cfg *c, struct moe_diag *diag)
{
    MOE_TRY(hf_trunk(root, source, false, c, diag));
    MOE_TRY(moe_json_get_int(root, "num_local_experts", true, 1, INT_MAX, &c->num_experts, source,
                             diag));
    MOE_TRY(moe_json_get_int(root, "num_experts_per_tok", true, 1, INT_MAX, &c->moe_router_topk,
                             source, diag));
    c->moe_ffn_hidden_size = c->ffn_hidden_size;
    moe_cfg_set_moe_every(c, 1);
    MOE_TRY(
        moe_json_get_int(root, "sliding_window", false, 1, INT_MAX, &c->window_size, source, diag));
    for (int i = 0; i < c->num_layers && c->window_size > 0; i++) {
        c->layer_flags[i] = (uint8_t)(c->layer_flags[i] | MOE_LAYER_WINDOWED);
    }
    return MOE_OK;
}

static enum moe_status hf_gpt_oss_windows(const cJSON *root,
                                          const char *source,
                                          struct moe_model_cfg *c,
                                          struct moe_diag *diag)
{
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    int num_windowed = 0;
    if (types == NULL || cJSON_IsNull(types)) {
        for (int i = 0; i < c->num_layers; i += 2) { /* GptOssConfig: sliding, full, ... */
            c->layer_flags[i] = (uint8_t)(c->layer_flags[i] | MOE_LAYER_WINDOWED);
            num_windowed++;
        }
    } else {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c->num_layers) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s.layer_types: expected a list of %d entries (one per layer)",
                                source, c->num_layers);
        }
        int i = 0;
        for (const cJSON *it = types->child; it != NULL; it = it->next, i++) {
            bool sliding = cJSON_IsString(it) && strcmp(it->valuestring, "sliding_attention") == 0;
            bool full = cJSON_IsString(it) && strcmp(it->valuestring, "full_attention") == 0;
            if (!sliding && !full) {
                return moe_diag_set(diag, MOE_ERR_INVALID,
                                    "%s.layer_types[%d]: expected \"sliding_attention\" or "
                                    "\"full_attention\"",
                                    source, i);
            }
            if (sliding) {
                c->layer_flags[i] = (uint8_t)(c->layer_flags[i] | MOE_LAYER_WINDOWED);
                num_windowed++;
            }
        }
    }
    if (num_windowed > 0) {
        MOE_TRY(moe_json_get_int(root, "sliding_window", true, 1, INT_MAX, &c->window_size, source,
                                 diag));
    }
    return MOE_OK;
}

static enum moe_status
hf_gpt_oss(const cJSON *root, const char *source, struct moe_model_cfg *c, struct moe_diag *diag)
{
    MOE_TRY(hf_trunk(root, source, true, c, diag));
    MOE_TRY(moe_json_get_int(root, "num_local_experts", true, 1, INT_MAX, &c->num_experts, source,
                             diag));
    const char *topk_key = cJSON_GetObjectItemCaseSensitive(root, "experts_per_token") != NULL
                               ? "experts_per_token"
                               : "num_experts_per_tok";
    MOE_TRY(moe_json_get_int(root, topk_key, true, 1, INT_MAX, &c->moe_router_topk, source, diag));
    c->moe_ffn_hidden_size = c->ffn_hidden_size;
    c->has_linear_bias = true;
    c->has_attention_sinks = true; /* GptOssAttention's per-head sinks */
    c->is_quick_geglu = true;      /* GptOssExperts: gate * sigmoid(1.702 gate), clamped */
    moe_cfg_set_moe_every(c, 1);
    return hf_gpt_oss_windows(root, source, c, diag);
}

enum moe_status moe_model_from_hf_json(const cJSON *root,
                                       const char *source,
                                       struct moe_model_cfg *out,
                                       struct moe_diag *diag)
{
    const char *src = source != NULL ? source : "(model config)";
    moe_diag_source(diag, src);
    if (!cJSON_IsObject(root)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: top level must be a JSON object", src);
    }
    enum hf_arch kind = HF_LLAMA;
    MOE_TRY(hf_detect(root, src, &kind, diag));
    struct moe_model_cfg c;
    moe_cfg_init(&c);
    name_from_source(src, c.name, sizeof(c.name));
    enum moe_status st = MOE_OK;
    switch (kind) {
    case HF_DEEPSEEK_V3:
        st = hf_deepseek(root, src, &c, diag);
        break;
    case HF_QWEN3_MOE:
    case HF_QWEN2_MOE:
        st = hf_qwen(root, src, kind == HF_QWEN3_MOE, &c, diag);
        break;
    case HF_MIXTRAL:
        st = hf_mixtral(root, src, &c, diag);
        break;
    case HF_GPT_OSS:
        st = hf_gpt_oss(root, src, &c, diag);
        break;
    case HF_LLAMA:
        st = hf_trunk(root, src, false, &c, diag);
        break;
    }
    MOE_TRY(st);
    MOE_TRY(with_source(moe_cfg_validate(&c, diag), src, diag));
    memcpy(out, &c, sizeof(c));
    return MOE_OK;
}

enum moe_status moe_model_from_json(const cJSON *root,
                                    const char *source,
                                    struct moe_model_cfg *out,
                                    struct moe_diag *diag)
{
    const char *src = source != NULL ? source : "(model config)";
    moe_diag_source(diag, src);
    if (!cJSON_IsObject(root)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: top level must be a JSON object", src);
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "format") == NULL) {
        return moe_model_from_hf_json(root, src, out, diag);
    }
    struct moe_model_cfg c;
    MOE_TRY(own_read(root, src, &c, diag));
    MOE_TRY(with_source(moe_cfg_validate(&c, diag), src, diag));
    memcpy(out, &c, sizeof(c));
    return MOE_OK;
}

enum moe_status
moe_model_file_read(const char *path, struct moe_model_cfg *out, struct moe_diag *diag)
{
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    enum moe_status st = moe_model_from_json(root, path, out, diag);
    cJSON_Delete(root);
    return st;
}
