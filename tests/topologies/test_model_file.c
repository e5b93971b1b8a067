/*
 * Tests for topologies/model_file.c: every committed HuggingFace config.json (tests/data/hf/,
 * copied from the models' published files) reads into exactly the matching built-in preset
 * (seq_length aside: HF files carry no training length); moefold's own format round-trips every
 * preset and irregular layer patterns bit for bit; malformed files, missing fields, unknown keys
 * and unknown architectures are errors that name the file and the field.
 */
/* cmocka needs these four headers first, in this order. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */
#include "model/config.h"
#include "tests/test_util.h"
#include "topologies/json_util.h"
#include "topologies/model_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const hf_files[] = {
    "deepseek-v3",  "kimi-k2",       "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen2-57b-a14b",
    "mixtral-8x7b", "mixtral-8x22b", "gpt-oss-120b",    "llama3-8b",
};

static const char *hf_path(const char *name, char *buf, size_t len)
{
    char rel[256];
    (void)snprintf(rel, sizeof(rel), "tests/data/hf/%s.json", name);
    return moe_test_root_path(rel, buf, len);
}

/* A zeroed copy of the named preset (padding bytes zero too, for memcmp). */
static void preset_copy(const char *name, struct moe_model_cfg *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < moe_cfg_num_presets(); i++) {
        if (strcmp(moe_cfg_preset_at(i)->name, name) == 0) {
            memcpy(out, moe_cfg_preset_at(i), sizeof(*out));
            return;
        }
    }
    fail_msg("no preset %s", name);
}

/* Print the first differing fields (for a failing memcmp). */
static void print_diff(const struct moe_model_cfg *a, const struct moe_model_cfg *b)
{
#define MOE_DIFF(f)                                                                                \
    if (a->f != b->f) {                                                                            \
        print_error("  %s: %d vs %d\n", #f, (int)a->f, (int)b->f);                                 \
    }
    MOE_DIFF(num_layers)
    MOE_DIFF(hidden_size)
    MOE_DIFF(ffn_hidden_size)
    MOE_DIFF(num_attention_heads)
    MOE_DIFF(num_query_groups)
    MOE_DIFF(kv_channels)
    MOE_DIFF(is_swiglu)
    MOE_DIFF(is_untied_embeddings)
    MOE_DIFF(has_qk_layernorm)
    MOE_DIFF(has_linear_bias)
    MOE_DIFF(vocab_size)
    MOE_DIFF(make_vocab_size_divisible_by)
    MOE_DIFF(seq_length)
    MOE_DIFF(is_mla)
    MOE_DIFF(q_lora_rank)
    MOE_DIFF(kv_lora_rank)
    MOE_DIFF(qk_head_dim)
    MOE_DIFF(qk_pos_emb_head_dim)
    MOE_DIFF(v_head_dim)
    MOE_DIFF(window_size)
    MOE_DIFF(num_experts)
    MOE_DIFF(moe_ffn_hidden_size)
    MOE_DIFF(moe_router_topk)
    MOE_DIFF(moe_shared_expert_intermediate_size)
    MOE_DIFF(router_score)
    MOE_DIFF(has_router_expert_bias)
    MOE_DIFF(moe_router_num_groups)
    MOE_DIFF(moe_router_group_topk)
    MOE_DIFF(mtp_num_layers)
#undef MOE_DIFF
    if (strcmp(a->name, b->name) != 0) {
        print_error("  name: %s vs %s\n", a->name, b->name);
    }
    for (int i = 0; i < MOE_MAX_LAYERS; i++) {
        if (a->layer_flags[i] != b->layer_flags[i]) {
            print_error("  layer_flags[%d]: %d vs %d\n", i, a->layer_flags[i], b->layer_flags[i]);
            break;
        }
    }
}

static void assert_same_cfg(const struct moe_model_cfg *got, const struct moe_model_cfg *want)
{
    if (memcmp(got, want, sizeof(*got)) != 0) {
        print_error("%s differs from %s:\n", got->name, want->name);
        print_diff(got, want);
        fail();
    }
}

/* Parse text as a model file named source; returns the status, fills diag. */
static enum moe_status
read_text(const char *text, const char *source, struct moe_model_cfg *out, struct moe_diag *diag)
{
    cJSON *root = NULL;
    enum moe_status st = moe_json_parse(text, strlen(text), source, &root, diag);
    if (st == MOE_OK) {
        st = moe_model_from_json(root, source, out, diag);
    }
    cJSON_Delete(root);
    return st;
}

static cJSON *load_hf(const char *name)
{
    char path[512];
    cJSON *root = NULL;
    struct moe_diag diag = {0};
    if (moe_json_read_file(hf_path(name, path, sizeof(path)), &root, &diag) != MOE_OK) {
        fail_msg("%s", diag.message);
    }
    return root;
}

static void expect_error(enum moe_status got_st,
                         enum moe_status want_st,
                         const struct moe_diag *diag,
                         const char *needle1,
                         const char *needle2)
{
    if (got_st != want_st || strstr(diag->message, needle1) == NULL ||
        (needle2 != NULL && strstr(diag->message, needle2) == NULL)) {
        print_error("want status %d naming \"%s\"%s%s, got %d: %s\n", want_st, needle1,
                    needle2 ? " and " : "", needle2 ? needle2 : "", got_st, diag->message);
        fail();
    }
}

/* ------------------------------------------------------------------------------------------ */
/* HuggingFace files */

static void test_hf_files_match_presets(void **state)
{
    (void)state;
    for (size_t i = 0; i < MOE_ARRAY_LEN(hf_files); i++) {
        char path[512];
        struct moe_model_cfg got;
        struct moe_model_cfg want;
        struct moe_diag diag = {0};
        memset(&got, 0, sizeof(got));
        if (moe_model_file_read(hf_path(hf_files[i], path, sizeof(path)), &got, &diag) != MOE_OK) {
            fail_msg("%s: %s", hf_files[i], diag.message);
        }
        preset_copy(hf_files[i], &want);
        assert_string_equal(got.name, hf_files[i]); /* the file's name */
        assert_int_equal(got.seq_length, 4096);     /* HF files: 4096 unless shorter context */
        got.seq_length = want.seq_length;
        assert_same_cfg(&got, &want);
    }
}

static void test_hf_variants(void **state)
{
    (void)state;
    struct moe_model_cfg c;
    struct moe_diag diag = {0};
    /* model_type alone picks the reader; the name comes from the directory of a config.json. */
    cJSON *root = load_hf("mixtral-8x7b");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "architectures");
    assert_int_equal(moe_model_from_json(root, "models/Mixtral-8x7B/config.json", &c, &diag),
                     MOE_OK);
    assert_string_equal(c.name, "Mixtral-8x7B");
    assert_int_equal(c.num_experts, 8);
    /* A short context caps seq_length; tied embeddings; a sliding window on every layer. */
    cJSON_ReplaceItemInObjectCaseSensitive(root, "max_position_embeddings",
                                           cJSON_CreateNumber(2048));
    cJSON_ReplaceItemInObjectCaseSensitive(root, "tie_word_embeddings", cJSON_CreateTrue());
    cJSON_ReplaceItemInObjectCaseSensitive(root, "sliding_window", cJSON_CreateNumber(1024));
    assert_int_equal(moe_model_from_json(root, "m.json", &c, &diag), MOE_OK);
    assert_int_equal(c.seq_length, 2048);
    assert_false(c.is_untied_embeddings);
    assert_int_equal(c.window_size, 1024);
    assert_int_equal(c.layer_flags[31], MOE_LAYER_MOE | MOE_LAYER_WINDOWED);
    cJSON_Delete(root);

    /* Qwen3: decoder_sparse_step 2 makes layers 1, 3, 5, ... MoE; mlp_only_layers removes some. */
    root = load_hf("qwen3-30b-a3b");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "decoder_sparse_step", cJSON_CreateNumber(2));
    const int mlp_only[] = {3, 4};
    cJSON_ReplaceItemInObjectCaseSensitive(root, "mlp_only_layers",
                                           cJSON_CreateIntArray(mlp_only, 2));
    assert_int_equal(moe_model_from_json(root, "q.json", &c, &diag), MOE_OK);
    assert_int_equal(c.layer_flags[0], 0);
    assert_int_equal(c.layer_flags[1], MOE_LAYER_MOE);
    assert_int_equal(c.layer_flags[3], 0);
    assert_int_equal(moe_cfg_num_moe_layers(&c), 23);
    /* use_sliding_window: layers from max_window_layers on */
    cJSON_ReplaceItemInObjectCaseSensitive(root, "use_sliding_window", cJSON_CreateTrue());
    cJSON_ReplaceItemInObjectCaseSensitive(root, "sliding_window", cJSON_CreateNumber(4096));
    cJSON_ReplaceItemInObjectCaseSensitive(root, "max_window_layers", cJSON_CreateNumber(40));
    assert_int_equal(moe_model_from_json(root, "q.json", &c, &diag), MOE_OK);
    assert_int_equal(c.window_size, 4096);
    assert_int_equal(c.layer_flags[39] & MOE_LAYER_WINDOWED, 0);
    assert_int_equal(c.layer_flags[40] & MOE_LAYER_WINDOWED, MOE_LAYER_WINDOWED);
    cJSON_Delete(root);

    /* DeepSeek: moe_layer_freq 2 after first_k_dense_replace; greedy routing has no groups/bias;
     * q_lora_rank null = uncompressed queries. */
    root = load_hf("deepseek-v3");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "moe_layer_freq", cJSON_CreateNumber(2));
    cJSON_ReplaceItemInObjectCaseSensitive(root, "topk_method", cJSON_CreateString("greedy"));
    cJSON_ReplaceItemInObjectCaseSensitive(root, "scoring_func", cJSON_CreateString("softmax"));
    cJSON_ReplaceItemInObjectCaseSensitive(root, "q_lora_rank", cJSON_CreateNull());
    assert_int_equal(moe_model_from_json(root, "d.json", &c, &diag), MOE_OK);
    assert_int_equal(c.layer_flags[3], 0);
    assert_int_equal(c.layer_flags[4], MOE_LAYER_MOE);
    assert_int_equal(moe_cfg_num_moe_layers(&c), 29); /* 4, 6, ..., 60 */
    assert_int_equal(c.moe_router_num_groups, 0);
    assert_false(c.has_router_expert_bias);
    assert_int_equal(c.router_score, MOE_ROUTER_SOFTMAX);
    assert_int_equal(c.q_lora_rank, 0);
    cJSON_Delete(root);

    /* GPT-OSS without layer_types: GptOssConfig's default, sliding on even layers. */
    root = load_hf("gpt-oss-120b");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "layer_types");
    struct moe_model_cfg want;
    preset_copy("gpt-oss-120b", &want);
    assert_int_equal(moe_model_from_json(root, "gpt-oss-120b.json", &c, &diag), MOE_OK);
    assert_memory_equal(c.layer_flags, want.layer_flags, sizeof(c.layer_flags));
    cJSON_Delete(root);
}

static void test_hf_missing_fields(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        const char *key;
    } cases[] = {
        {"deepseek-v3", "n_routed_experts"},
        {"deepseek-v3", "q_lora_rank"},
        {"deepseek-v3", "kv_lora_rank"},
        {"deepseek-v3", "first_k_dense_replace"},
        {"deepseek-v3", "n_shared_experts"},
        {"deepseek-v3", "qk_rope_head_dim"},
        {"kimi-k2", "moe_intermediate_size"},
        {"qwen3-235b-a22b", "num_experts"},
        {"qwen3-30b-a3b", "num_experts_per_tok"},
        {"qwen2-57b-a14b", "shared_expert_intermediate_size"},
        {"mixtral-8x7b", "num_local_experts"},
        {"mixtral-8x22b", "hidden_size"},
        {"gpt-oss-120b", "head_dim"},
        {"gpt-oss-120b", "sliding_window"},
        {"llama3-8b", "intermediate_size"},
        {"llama3-8b", "num_hidden_layers"},
        {"llama3-8b", "vocab_size"},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(cases); i++) {
        cJSON *root = load_hf(cases[i].file);
        cJSON_DeleteItemFromObjectCaseSensitive(root, cases[i].key);
        struct moe_model_cfg c;
        struct moe_diag diag = {0};
        char source[128];
        (void)snprintf(source, sizeof(source), "hf/%s.json", cases[i].file);
        enum moe_status st = moe_model_from_json(root, source, &c, &diag);
        expect_error(st, MOE_ERR_INVALID, &diag, cases[i].key, source);
        cJSON_Delete(root);
    }
    /* GPT-OSS accepts either top-k key but needs one. */
    cJSON *root = load_hf("gpt-oss-120b");
    struct moe_model_cfg c;
    struct moe_diag diag = {0};
    cJSON_DeleteItemFromObjectCaseSensitive(root, "experts_per_token");
    assert_int_equal(moe_model_from_json(root, "g.json", &c, &diag), MOE_OK);
    assert_int_equal(c.moe_router_topk, 4);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "num_experts_per_tok");
    expect_error(moe_model_from_json(root, "g.json", &c, &diag), MOE_ERR_INVALID, &diag,
                 "num_experts_per_tok", "g.json");
    cJSON_Delete(root);
}

static void test_hf_bad_values(void **state)
{
    (void)state;
    struct moe_model_cfg c;
    struct moe_diag diag = {0};
    /* Unknown architecture: names it and lists the supported ones. */
    expect_error(
        read_text("{\"architectures\": [\"FalconForCausalLM\"], \"model_type\": \"falcon\"}",
                  "falcon.json", &c, &diag),
        MOE_ERR_UNSUPPORTED, &diag, "FalconForCausalLM", "DeepseekV3ForCausalLM");
    assert_non_null(strstr(diag.message, "GptOssForCausalLM"));
    /* Neither architecture nor format. */
    expect_error(read_text("{\"hidden_size\": 8}", "x.json", &c, &diag), MOE_ERR_INVALID, &diag,
                 "x.json", "architectures");
    /* Wrong types and values. */
    cJSON *root = load_hf("deepseek-v3");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "scoring_func", cJSON_CreateString("relu"));
    expect_error(moe_model_from_json(root, "d.json", &c, &diag), MOE_ERR_UNSUPPORTED, &diag,
                 "scoring_func", "relu");
    cJSON_Delete(root);
    root = load_hf("deepseek-v3");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "hidden_size", cJSON_CreateString("7168"));
    expect_error(moe_model_from_json(root, "d.json", &c, &diag), MOE_ERR_INVALID, &diag,
                 "hidden_size", "d.json");
    cJSON_Delete(root);
    root = load_hf("deepseek-v3");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "num_hidden_layers", cJSON_CreateNumber(1000));
    expect_error(moe_model_from_json(root, "d.json", &c, &diag), MOE_ERR_INVALID, &diag,
                 "num_hidden_layers", "d.json");
    cJSON_Delete(root);
    /* Validation failures carry the file name: top-k above the expert count. */
    root = load_hf("mixtral-8x7b");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "num_experts_per_tok", cJSON_CreateNumber(9));
    expect_error(moe_model_from_json(root, "m.json", &c, &diag), MOE_ERR_INVALID, &diag,
                 "moe_router_topk", "m.json");
    cJSON_Delete(root);
    root = load_hf("gpt-oss-120b");
    cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    cJSON_DeleteItemFromArray(types, 0);
    expect_error(moe_model_from_json(root, "g.json", &c, &diag), MOE_ERR_INVALID, &diag,
                 "layer_types", "36");
    cJSON_Delete(root);
}

static void test_file_errors(void **state)
{
    (void)state;
    struct moe_model_cfg c;
    struct moe_diag diag = {0};
    char path[256];
    (void)snprintf(path, sizeof(path), "/tmp/moefold-test-model-%ld.json", (long)getpid());
    const char *broken = "{\n  \"hidden_size\": 8,\n  oops\n}\n";
    assert_int_equal(moe_file_write_atomic(path, broken, strlen(broken), &diag), MOE_OK);
    enum moe_status st = moe_model_file_read(path, &c, &diag);
    expect_error(st, MOE_ERR_PARSE, &diag, path, ":3:");
    assert_int_equal(diag.line, 3);
    (void)unlink(path);
    expect_error(moe_model_file_read("/nonexistent/model.json", &c, &diag), MOE_ERR_IO, &diag,
                 "/nonexistent/model.json", NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* moefold's own format */

static void round_trip(const struct moe_model_cfg *cfg)
{
    cJSON *json = moe_model_to_json(cfg);
    assert_non_null(json);
    char *text = cJSON_Print(json);
    cJSON_Delete(json);
    assert_non_null(text);
    struct moe_model_cfg back;
    memset(&back, 0xa5, sizeof(back)); /* the reader must set every byte it is compared on */
    struct moe_diag diag = {0};
    enum moe_status st = read_text(text, "round-trip.json", &back, &diag);
    if (st != MOE_OK) {
        print_error("%s: %s\n%s\n", cfg->name, diag.message, text);
        free(text);
        fail();
    }
    free(text);
    assert_same_cfg(&back, cfg);
}

static void test_round_trip_presets(void **state)
{
    (void)state;
    for (size_t i = 0; i < moe_cfg_num_presets(); i++) {
        struct moe_model_cfg c;
        preset_copy(moe_cfg_preset_at(i)->name, &c);
        round_trip(&c);
    }
    /* Through a file as well. */
    struct moe_model_cfg c;
    preset_copy("deepseek-v3", &c);
    char path[256];
    (void)snprintf(path, sizeof(path), "/tmp/moefold-test-model-%ld.json", (long)getpid());
    cJSON *json = moe_model_to_json(&c);
    struct moe_diag diag = {0};
    assert_int_equal(moe_json_write_file(path, json, &diag), MOE_OK);
    cJSON_Delete(json);
    struct moe_model_cfg back;
    memset(&back, 0, sizeof(back));
    assert_int_equal(moe_model_file_read(path, &back, &diag), MOE_OK);
    (void)unlink(path);
    assert_same_cfg(&back, &c);
}

static void test_round_trip_patterns(void **state)
{
    (void)state;
    struct moe_model_cfg c;
    preset_copy("mixtral-8x7b", &c);
    /* Megatron's int freq: layers 0, 2, 4, ... are MoE -> written as the int 2. */
    moe_cfg_set_moe_every(&c, 2);
    cJSON *json = moe_model_to_json(&c);
    const cJSON *freq = cJSON_GetObjectItemCaseSensitive(json, "moe_layer_freq");
    assert_true(cJSON_IsNumber(freq));
    assert_int_equal(freq->valueint, 2);
    assert_null(cJSON_GetObjectItemCaseSensitive(json, "windowed_layers"));
    cJSON_Delete(json);
    round_trip(&c);
    /* An irregular pattern is a list; windowed layers too. Sigmoid, groups, MTP, tied. */
    c.layer_flags[2] = 0;
    c.layer_flags[5] = MOE_LAYER_MOE | MOE_LAYER_WINDOWED;
    c.layer_flags[31] = MOE_LAYER_WINDOWED;
    c.window_size = 512;
    c.router_score = MOE_ROUTER_SIGMOID;
    c.moe_router_num_groups = 4;
    c.moe_router_group_topk = 2;
    c.mtp_num_layers = 2;
    c.is_untied_embeddings = false;
    json = moe_model_to_json(&c);
    assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(json, "moe_layer_freq")));
    assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(json, "windowed_layers")));
    cJSON_Delete(json);
    round_trip(&c);
    /* Dense model: no moe_layer_freq key at all. */
    preset_copy("llama3-70b", &c);
    json = moe_model_to_json(&c);
    assert_null(cJSON_GetObjectItemCaseSensitive(json, "moe_layer_freq"));
    cJSON_Delete(json);
    round_trip(&c);
}

static void test_own_format_minimal(void **state)
{
    (void)state;
    /* Only the required keys: Megatron defaults fill the rest (no GQA, kv_channels = h / a,
     * vocabulary divisor 128, moe_layer_freq 1 when there are experts). */
    struct moe_model_cfg c;
    struct moe_diag diag = {0};
    const char *text = "{\"format\": \"moefold-model\", \"version\": 1, \"num_layers\": 4,"
                       " \"hidden_size\": 64, \"ffn_hidden_size\": 256,"
                       " \"num_attention_heads\": 4, \"vocab_size\": 1000, \"seq_length\": 128,"
                       " \"num_experts\": 8, \"moe_ffn_hidden_size\": 32, \"moe_router_topk\": 2}";
    assert_int_equal(read_text(text, "dir/small-moe.json", &c, &diag), MOE_OK);
    assert_string_equal(c.name, "small-moe");
    assert_int_equal(c.num_query_groups, 4);
    assert_int_equal(c.kv_channels, 16);
    assert_int_equal(c.make_vocab_size_divisible_by, 128);
    assert_int_equal(moe_cfg_num_moe_layers(&c), 4);
    assert_false(c.is_swiglu);
    assert_int_equal(c.router_score, MOE_ROUTER_SOFTMAX);
    /* null is the same as absent for the defaulted keys. */
    const char *nulls = "{\"format\": \"moefold-model\", \"version\": 1, \"num_layers\": 4,"
                        " \"hidden_size\": 64, \"ffn_hidden_size\": 256,"
                        " \"num_attention_heads\": 4, \"vocab_size\": 1000, \"seq_length\": 128,"
                        " \"num_query_groups\": null, \"kv_channels\": null}";
    assert_int_equal(read_text(nulls, "dir/nulls.json", &c, &diag), MOE_OK);
    assert_int_equal(c.num_query_groups, 4);
    assert_int_equal(c.kv_channels, 16);
}

static void test_own_format_errors(void **state)
{
    (void)state;
    struct moe_model_cfg c;
    struct moe_diag diag = {0};
#define HEAD "{\"format\": \"moefold-model\", \"version\": 1, "
#define BODY                                                                                       \
    "\"num_layers\": 2, \"hidden_size\": 64, \"ffn_hidden_size\": 256, "                           \
    "\"num_attention_heads\": 4, \"vocab_size\": 1000, \"seq_length\": 128"
    assert_int_equal(read_text(HEAD BODY "}", "ok.json", &c, &diag), MOE_OK);
    /* A typo is an error naming the key. */
    expect_error(read_text(HEAD BODY ", \"hiden_size\": 64}", "t.json", &c, &diag), MOE_ERR_INVALID,
                 &diag, "hiden_size", "t.json");
    /* Missing required key. */
    expect_error(read_text(HEAD "\"num_layers\": 2, \"ffn_hidden_size\": 256, "
                                "\"num_attention_heads\": 4, \"vocab_size\": 1000, "
                                "\"seq_length\": 128}",
                           "m.json", &c, &diag),
                 MOE_ERR_INVALID, &diag, "hidden_size", "m.json");
    /* Wrong format / newer version. */
    expect_error(
        read_text("{\"format\": \"moefold-cluster\", \"version\": 1}", "f.json", &c, &diag),
        MOE_ERR_INVALID, &diag, "format", "moefold-model");
    expect_error(
        read_text("{\"format\": \"moefold-model\", \"version\": 9, " BODY "}", "v.json", &c, &diag),
        MOE_ERR_UNSUPPORTED, &diag, "version", "v.json");
    /* Layer lists: wrong length, wrong entry; bad router score; negative size. */
    expect_error(read_text(HEAD BODY ", \"num_experts\": 2, \"moe_ffn_hidden_size\": 8, "
                                     "\"moe_router_topk\": 1, \"moe_layer_freq\": [1, 1, 1]}",
                           "l.json", &c, &diag),
                 MOE_ERR_INVALID, &diag, "moe_layer_freq", "num_layers = 2");
    expect_error(read_text(HEAD BODY ", \"windowed_layers\": [0, 2], \"window_size\": 8}", "w.json",
                           &c, &diag),
                 MOE_ERR_INVALID, &diag, "windowed_layers[1]", "w.json");
    expect_error(read_text(HEAD BODY ", \"router_score\": \"relu\"}", "r.json", &c, &diag),
                 MOE_ERR_INVALID, &diag, "router_score", "sigmoid");
    expect_error(read_text(HEAD BODY ", \"kv_channels\": -4}", "k.json", &c, &diag),
                 MOE_ERR_INVALID, &diag, "kv_channels", "k.json");
    /* Semantic validation, prefixed with the file: 3 query groups do not divide 4 heads. */
    expect_error(read_text(HEAD BODY ", \"num_query_groups\": 3}", "g.json", &c, &diag),
                 MOE_ERR_INVALID, &diag, "g.json: num_query_groups = 3", NULL);
    expect_error(read_text(HEAD BODY ", \"is_mla\": 1}", "b.json", &c, &diag), MOE_ERR_INVALID,
                 &diag, "is_mla", "true or false");
#undef HEAD
#undef BODY
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_files_match_presets),
        cmocka_unit_test(test_hf_variants),
        cmocka_unit_test(test_hf_missing_fields),
        cmocka_unit_test(test_hf_bad_values),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_round_trip_presets),
        cmocka_unit_test(test_round_trip_patterns),
        cmocka_unit_test(test_own_format_minimal),
        cmocka_unit_test(test_own_format_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
