/*
 * Tests for topologies/plan_file.c: plans round-trip through the file bit for bit (DeepSeek-V3
 * with its published pipeline layout, even/interleaved/uneven layouts, dense models, every option
 * kind), the prediction object is kept as given, and each malformed plan (unknown key at every
 * level, wrong format or version, bad enum or module name, a layout or option that breaks a rule,
 * a derived value that disagrees, a bad layout string) fails with a message naming the problem.
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
#include "model/layout.h"
#include "model/megatron_args.h"
#include "tests/test_util.h"
#include "topologies/json_util.h"
#include "topologies/plan_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* DeepSeek-V3 on 1024 GPUs with the published PP16 x VPP2 layout and a full option set. */
static void deepseek_plan(struct moe_plan *p)
{
    moe_plan_init(p);
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_cfg_preset("deepseek-v3", &p->model, &d), MOE_OK);
    (void)snprintf(p->cluster, sizeof(p->cluster), "dgx-h100");
    struct moe_layout *l = &p->layout;
    l->num_gpus = 1024;
    l->pp = 16;
    l->vpp = 2; /* the layout string has 32 chunks */
    l->ep = 64;
    l->mbs = 1;
    l->gbs = 8192;
    assert_int_equal(moe_layout_parse_pp_string("Et|(tt|)*30mL", &p->model, l, &d), MOE_OK);
    struct moe_options *o = &p->options;
    o->recipe = MOE_RECIPE_FP8_BLOCKWISE;
    o->fp8_param_gather = true;
    o->use_distributed_optimizer = true;
    o->overlap_grad_reduce = true;
    o->overlap_param_gather = true;
    o->precision_aware_optimizer = true;
    o->exp_avg_dtype = MOE_DTYPE_BF16;
    o->exp_avg_sq_dtype = MOE_DTYPE_BF16;
    o->dispatcher = MOE_DISPATCH_DEEPEP;
    o->moe_grouped_gemm = true;
    o->recompute = MOE_RECOMPUTE_SELECTIVE;
    o->recompute_modules = MOE_RC_MLA_UP_PROJ | MOE_RC_MOE_ACT | MOE_RC_LAYERNORM;
    o->cuda_graph_impl = MOE_CG_TE;
    o->cuda_graph_modules = MOE_CGM_ATTN | MOE_CGM_MOE_ROUTER;
    o->seq_aux_loss_coeff = 1e-4; /* DeepSeek-V3's per-sequence balance loss */
    o->moe_imbalance = 0.0;
    o->moe_hot_expert_replicas = 2;
    memset(&d, 0, sizeof(d));
    if (moe_layout_resolve(&p->model, NULL, &p->options, l, &d) != MOE_OK) {
        fail_msg("deepseek plan does not resolve: %s", d.message);
    }
}

static cJSON *sample_prediction(void)
{
    const char *text = "{\"step_time_s\": 12.75, \"tflops_per_gpu\": 401.2, \"fits\": true, "
                       "\"memory_gib\": {\"total\": 71.3, \"capacity\": 79.6}, "
                       "\"anything\": [1, \"two\", null]}";
    cJSON *pred = NULL;
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_json_parse(text, strlen(text), "prediction", &pred, &d), MOE_OK);
    return pred;
}

static void assert_same_plan(const struct moe_plan *a, const struct moe_plan *b)
{
    assert_memory_equal(&a->model, &b->model, sizeof(a->model));
    assert_string_equal(a->cluster, b->cluster);
    assert_memory_equal(&a->layout, &b->layout, sizeof(a->layout));
    assert_memory_equal(&a->options, &b->options, sizeof(a->options));
}

static void temp_path(char *path, size_t len)
{
    (void)snprintf(path, len, "/tmp/moefold_plan_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    (void)close(fd);
}

static void test_file_round_trip(void **state)
{
    (void)state;
    struct moe_plan *a = test_malloc(sizeof(*a));
    struct moe_plan *b = test_malloc(sizeof(*b));
    deepseek_plan(a);
    cJSON *pred = sample_prediction();
    char path[64];
    temp_path(path, sizeof(path));
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_plan_write(path, a, pred, &d), MOE_OK);

    cJSON *back = NULL;
    memset(&d, 0, sizeof(d));
    if (moe_plan_read(path, NULL, b, &back, &d) != MOE_OK) {
        fail_msg("%s", d.message);
    }
    assert_same_plan(a, b);
    assert_true(b->layout.has_custom_pp_layout);
    assert_int_equal(b->layout.num_chunks, 32);
    assert_non_null(back);
    assert_true(cJSON_Compare(pred, back, true));

    /* the Megatron flags were generated on write and describe the same plan */
    char want[MOE_PLAN_ARGS_LEN];
    size_t needed = 0;
    assert_int_equal(moe_megatron_format_args(&a->model, &a->layout, &a->options, 0, want,
                                              sizeof(want), &needed, NULL),
                     MOE_OK);
    assert_string_equal(b->megatron_args, want);
    assert_non_null(strstr(b->megatron_args, "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'"));

    /* the file itself: keys as documented */
    cJSON *root = NULL;
    assert_int_equal(moe_json_read_file(path, &root, &d), MOE_OK);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(root, "layout");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(lay, "pipeline_layout")->valuestring,
                        "Et|(tt|)*30mL");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(lay, "edp")->valueint, 1);
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(root, "options");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(opt, "recipe")->valuestring,
                        "fp8-blockwise");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(opt, "moe_imbalance")->valuestring,
                        "auto");
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(opt, "recompute_modules");
    assert_int_equal(cJSON_GetArraySize(mods), 3);
    assert_string_equal(cJSON_GetArrayItem(mods, 0)->valuestring, "moe_act");
    cJSON_Delete(root);

    cJSON_Delete(back);
    cJSON_Delete(pred);
    (void)unlink(path);
    test_free(b);
    test_free(a);
}

/* Plans of other shapes round-trip through to_json / from_json (no prediction). */
static void test_variants_round_trip(void **state)
{
    (void)state;
    struct moe_plan *a = test_malloc(sizeof(*a));
    struct moe_plan *b = test_malloc(sizeof(*b));
    struct moe_diag d;
    for (int v = 0; v < 4; v++) {
        moe_plan_init(a);
        memset(&d, 0, sizeof(d));
        (void)snprintf(a->cluster, sizeof(a->cluster), "gb200-nvl72");
        struct moe_layout *l = &a->layout;
        struct moe_options *o = &a->options;
        switch (v) {
        case 0: /* Qwen3-30B-A3B, interleaved even split, hybridep, full-iteration graphs */
            assert_int_equal(moe_cfg_preset("qwen3-30b-a3b", &a->model, &d), MOE_OK);
            l->num_gpus = 64;
            l->tp = 2;
            l->pp = 2;
            l->vpp = 3;
            l->ep = 16;
            l->sequence_parallel = true;
            l->gbs = 512;
            o->recipe = MOE_RECIPE_MXFP8;
            o->dispatcher = MOE_DISPATCH_HYBRIDEP;
            o->cuda_graph_impl = MOE_CG_LOCAL;
            o->cuda_graph_modules = MOE_CGM_FULL_ITERATION;
            o->recompute = MOE_RECOMPUTE_FULL;
            o->recompute_method = MOE_RECOMPUTE_BLOCK;
            o->recompute_num_layers = 3;
            o->capacity_factor = 1.25;
            o->moe_imbalance = 1.37;
            o->aux_loss_coeff = 1e-3;
            o->global_aux_loss_coeff = 2.5e-4;
            break;
        case 1: /* DeepSeek-V3 with uneven stages: 61 = 7 (first) + 6 x 8 (middle) + 6 (last) */
            assert_int_equal(moe_cfg_preset("deepseek-v3", &a->model, &d), MOE_OK);
            l->num_gpus = 512;
            l->pp = 8;
            l->ep = 64;
            l->first_stage_layers = 7;
            l->last_stage_layers = 6;
            l->gbs = 1024;
            o->force_load_balancing = true;
            o->fine_grained_offload = true;
            o->offload_modules = MOE_OFF_CORE_ATTN | MOE_OFF_ATTN_PROJ | MOE_OFF_EXPERT_FC1;
            break;
        case 2: /* a dense model, optimizer offloaded to the host */
            assert_int_equal(moe_cfg_preset("llama3-70b", &a->model, &d), MOE_OK);
            l->num_gpus = 64;
            l->tp = 8;
            l->pp = 4;
            l->sequence_parallel = true;
            l->gbs = 128;
            o->use_distributed_optimizer = true;
            o->precision_aware_optimizer = true;
            o->optimizer_cpu_offload = true;
            o->optimizer_offload_fraction = 0.35;
            o->main_grads_dtype = MOE_DTYPE_BF16;
            o->tp_comm_overlap = true;
            break;
        default: /* NVFP4 with CPU offloading of activations */
            assert_int_equal(moe_cfg_preset("mixtral-8x7b", &a->model, &d), MOE_OK);
            l->num_gpus = 8;
            l->tp = 1;
            l->ep = 8;
            l->gbs = 64;
            o->recipe = MOE_RECIPE_NVFP4;
            o->cpu_offloading_num_layers = 4;
            o->dispatcher = MOE_DISPATCH_ALLGATHER;
            break;
        }
        memset(&d, 0, sizeof(d));
        if (moe_layout_resolve(&a->model, NULL, &a->options, l, &d) != MOE_OK) {
            fail_msg("variant %d does not resolve: %s", v, d.message);
        }
        cJSON *json = moe_plan_to_json(a, NULL);
        assert_non_null(json);
        assert_null(cJSON_GetObjectItemCaseSensitive(json, "prediction"));
        cJSON sentinel;
        cJSON *pred = &sentinel; /* must come back NULL: the plan has no prediction */
        memset(&d, 0, sizeof(d));
        if (moe_plan_from_json(json, "variant", NULL, b, &pred, &d) != MOE_OK) {
            fail_msg("variant %d: %s", v, d.message);
        }
        assert_null(pred);
        assert_same_plan(a, b);
        cJSON_Delete(json);
    }
    test_free(b);
    test_free(a);
}

/* ---- malformed plans ---- */

enum edit {
    E_TOP_KEY,
    E_VERSION,
    E_FORMAT,
    E_LAYOUT_KEY,
    E_OPTIONS_KEY,
    E_RECIPE,
    E_MODULE,
    E_DISPATCHER,
    E_DTYPE,
    E_OPTION_RULE,
    E_LAYOUT_RULE,
    E_DP,
    E_EDP,
    E_BAD_CUSTOM,
    E_CUSTOM_NO_STRING,
    E_MISSING_TP,
    E_PREDICTION_TYPE,
    E_CLUSTER,
    E_IMBALANCE,
    E_MODEL_KEY,
    E_INT_TYPE,
    E_AUX_COEFF,
    E_NUM_EDITS,
};

struct bad_case {
    enum edit edit;
    enum moe_status status;
    const char *substring;
};

static const struct bad_case bad_cases[] = {
    {E_TOP_KEY, MOE_ERR_INVALID, "plan.json: unknown key \"flavour\""},
    {E_VERSION, MOE_ERR_UNSUPPORTED, "version 2 is newer than this moefold reads"},
    {E_FORMAT, MOE_ERR_INVALID, "\"format\" must be \"moefold-plan\""},
    {E_LAYOUT_KEY, MOE_ERR_INVALID, "plan.json: layout: unknown key \"tpp\""},
    {E_OPTIONS_KEY, MOE_ERR_INVALID, "plan.json: options: unknown key \"recomputation\""},
    {E_RECIPE, MOE_ERR_INVALID, "options.recipe: unknown precision recipe 'fp9'"},
    {E_MODULE, MOE_ERR_INVALID, "options.recompute_modules: unknown recompute module 'core_atn'"},
    {E_DISPATCHER, MOE_ERR_INVALID, "options.dispatcher: unknown dispatcher 'nccl'"},
    {E_DTYPE, MOE_ERR_INVALID, "options.exp_avg_dtype: unknown dtype 'fp64'"},
    {E_OPTION_RULE, MOE_ERR_INVALID,
     "break a rule (--overlap-param-gather): --overlap-param-gather needs --overlap-grad-reduce"},
    {E_LAYOUT_RULE, MOE_ERR_INFEASIBLE, "global batch 8191 is not divisible"},
    {E_DP, MOE_ERR_INVALID, "layout.dp = 3 disagrees with the 64 derived"},
    {E_EDP, MOE_ERR_INVALID, "layout.edp = 2 disagrees with the 1 derived"},
    {E_BAD_CUSTOM, MOE_ERR_INVALID,
     "layout.pipeline_layout 'Et|(tt|*30mL': column 4: '(' is never closed"},
    {E_CUSTOM_NO_STRING, MOE_ERR_INVALID, "layout: missing required key \"pipeline_layout\""},
    {E_MISSING_TP, MOE_ERR_INVALID, "layout: missing required key \"tp\""},
    {E_PREDICTION_TYPE, MOE_ERR_INVALID, "plan.json.prediction: expected a JSON object"},
    {E_CLUSTER, MOE_ERR_INVALID, "plan.json.cluster: must name a cluster"},
    {E_IMBALANCE, MOE_ERR_INVALID, "options.moe_imbalance: expected a load factor"},
    {E_MODEL_KEY, MOE_ERR_INVALID, "plan.json: model"},
    {E_INT_TYPE, MOE_ERR_INVALID, "layout.pp: expected an integer"},
    {E_AUX_COEFF, MOE_ERR_INVALID, "options.seq_aux_loss_coeff = -0.001 is out of range [0, 1000]"},
};

static void set_item(cJSON *obj, const char *key, cJSON *item)
{
    assert_non_null(item);
    if (cJSON_GetObjectItemCaseSensitive(obj, key) != NULL) {
        assert_true(cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item));
    } else {
        assert_true(cJSON_AddItemToObject(obj, key, item));
    }
}

static void apply_edit(enum edit e, cJSON *root)
{
    cJSON *lay = cJSON_GetObjectItemCaseSensitive(root, "layout");
    cJSON *opt = cJSON_GetObjectItemCaseSensitive(root, "options");
    cJSON *mods = NULL;
    switch (e) {
    case E_TOP_KEY:
        set_item(root, "flavour", cJSON_CreateString("vanilla"));
        break;
    case E_VERSION:
        set_item(root, "version", cJSON_CreateNumber(2));
        break;
    case E_FORMAT:
        set_item(root, "format", cJSON_CreateString("moefold-model"));
        break;
    case E_LAYOUT_KEY:
        set_item(lay, "tpp", cJSON_CreateNumber(2));
        break;
    case E_OPTIONS_KEY:
        set_item(opt, "recomputation", cJSON_CreateString("full"));
        break;
    case E_RECIPE:
        set_item(opt, "recipe", cJSON_CreateString("fp9"));
        break;
    case E_MODULE:
        mods = cJSON_CreateArray();
        assert_true(cJSON_AddItemToArray(mods, cJSON_CreateString("core_atn")));
        set_item(opt, "recompute_modules", mods);
        break;
    case E_DISPATCHER:
        set_item(opt, "dispatcher", cJSON_CreateString("nccl"));
        break;
    case E_DTYPE:
        set_item(opt, "exp_avg_dtype", cJSON_CreateString("fp64"));
        break;
    case E_AUX_COEFF:
        set_item(opt, "seq_aux_loss_coeff", cJSON_CreateNumber(-1e-3));
        break;
    case E_OPTION_RULE:
        set_item(opt, "overlap_grad_reduce", cJSON_CreateFalse());
        break;
    case E_LAYOUT_RULE:
        set_item(lay, "gbs", cJSON_CreateNumber(8191));
        cJSON_DeleteItemFromObjectCaseSensitive(lay, "num_microbatches");
        break;
    case E_DP:
        set_item(lay, "dp", cJSON_CreateNumber(3));
        break;
    case E_EDP:
        set_item(lay, "edp", cJSON_CreateNumber(2));
        break;
    case E_BAD_CUSTOM:
        set_item(lay, "pipeline_layout", cJSON_CreateString("Et|(tt|*30mL"));
        break;
    case E_CUSTOM_NO_STRING:
        cJSON_DeleteItemFromObjectCaseSensitive(lay, "pipeline_layout");
        break;
    case E_MISSING_TP:
        cJSON_DeleteItemFromObjectCaseSensitive(lay, "tp");
        break;
    case E_PREDICTION_TYPE:
        set_item(root, "prediction", cJSON_CreateNumber(3));
        break;
    case E_CLUSTER:
        set_item(root, "cluster", cJSON_CreateString(""));
        break;
    case E_IMBALANCE:
        set_item(opt, "moe_imbalance", cJSON_CreateString("lots"));
        break;
    case E_MODEL_KEY:
        set_item(cJSON_GetObjectItemCaseSensitive(root, "model"), "hiden_size",
                 cJSON_CreateNumber(7168));
        break;
    case E_INT_TYPE:
        set_item(lay, "pp", cJSON_CreateString("16"));
        break;
    case E_NUM_EDITS:
        break;
    }
}

static void test_malformed(void **state)
{
    (void)state;
    struct moe_plan *a = test_malloc(sizeof(*a));
    struct moe_plan *b = test_malloc(sizeof(*b));
    deepseek_plan(a);
    assert_int_equal(MOE_ARRAY_LEN(bad_cases), E_NUM_EDITS);
    for (size_t i = 0; i < MOE_ARRAY_LEN(bad_cases); i++) {
        cJSON *root = moe_plan_to_json(a, NULL);
        assert_non_null(root);
        apply_edit(bad_cases[i].edit, root);
        struct moe_diag d;
        memset(&d, 0, sizeof(d));
        cJSON *pred = NULL;
        enum moe_status st = moe_plan_from_json(root, "plan.json", NULL, b, &pred, &d);
        if (st != bad_cases[i].status || strstr(d.message, bad_cases[i].substring) == NULL) {
            fail_msg("edit %d: got %s \"%s\", want %s containing \"%s\"", (int)bad_cases[i].edit,
                     moe_status_str(st), d.message, moe_status_str(bad_cases[i].status),
                     bad_cases[i].substring);
        }
        assert_null(pred);
        cJSON_Delete(root);
    }
    test_free(b);
    test_free(a);
}

static void test_lenient_where_allowed(void **state)
{
    (void)state;
    struct moe_plan *a = test_malloc(sizeof(*a));
    struct moe_plan *b = test_malloc(sizeof(*b));
    deepseek_plan(a);
    cJSON *root = moe_plan_to_json(a, NULL);
    /* anything goes inside "prediction"; derived keys and megatron_args may be left out */
    cJSON *pred = cJSON_CreateObject();
    assert_non_null(cJSON_AddStringToObject(pred, "any new key", "kept"));
    assert_true(cJSON_AddItemToObject(root, "prediction", pred));
    cJSON *lay = cJSON_GetObjectItemCaseSensitive(root, "layout");
    cJSON_DeleteItemFromObjectCaseSensitive(lay, "dp");
    cJSON_DeleteItemFromObjectCaseSensitive(lay, "edp");
    cJSON_DeleteItemFromObjectCaseSensitive(lay, "num_microbatches");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "megatron_args");
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    cJSON *back = NULL;
    if (moe_plan_from_json(root, "plan.json", NULL, b, &back, &d) != MOE_OK) {
        fail_msg("%s", d.message);
    }
    assert_same_plan(a, b);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(back, "any new key")->valuestring, "kept");
    assert_non_null(strstr(b->megatron_args, "--num-layers 61"));
    cJSON_Delete(back);
    cJSON_Delete(root);

    /* a non-custom layout whose string does not match the sizes is refused */
    moe_plan_init(a);
    assert_int_equal(moe_cfg_preset("mixtral-8x7b", &a->model, &d), MOE_OK);
    (void)snprintf(a->cluster, sizeof(a->cluster), "dgx-h100");
    a->layout.num_gpus = 16;
    a->layout.pp = 2;
    a->layout.ep = 8;
    a->layout.gbs = 64;
    assert_int_equal(moe_layout_resolve(&a->model, NULL, &a->options, &a->layout, &d), MOE_OK);
    root = moe_plan_to_json(a, NULL);
    lay = cJSON_GetObjectItemCaseSensitive(root, "layout");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(lay, "pipeline_layout")->valuestring,
                        "Et*16|t*16L");
    set_item(lay, "pipeline_layout", cJSON_CreateString("Et*15|t*17L"));
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_plan_from_json(root, "plan.json", NULL, b, NULL, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "is not the placement the sizes give ('Et*16|t*16L')"));
    /* ...unless it is marked custom, and then it is the placement */
    set_item(lay, "custom_pipeline_layout", cJSON_CreateTrue());
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_plan_from_json(root, "plan.json", NULL, b, NULL, &d), MOE_OK);
    assert_int_equal(b->layout.chunks[0].num_layers, 15);
    cJSON_Delete(root);
    test_free(b);
    test_free(a);
}

static void test_hardware_and_io(void **state)
{
    (void)state;
    struct moe_plan *a = test_malloc(sizeof(*a));
    struct moe_plan *b = test_malloc(sizeof(*b));
    deepseek_plan(a);
    cJSON *root = moe_plan_to_json(a, NULL);
    struct moe_cluster cl;
    memset(&cl, 0, sizeof(cl));
    (void)snprintf(cl.name, sizeof(cl.name), "old-gpus");
    (void)snprintf(cl.gpu.name, sizeof(cl.gpu.name), "A100");
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_plan_from_json(root, "plan.json", &cl, b, NULL, &d), MOE_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.message, "fp8-blockwise needs FP8 tensor cores"));
    cJSON_Delete(root);

    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_plan_read("/nonexistent/dir/plan.json", NULL, b, NULL, &d), MOE_ERR_IO);
    char path[64];
    temp_path(path, sizeof(path));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs("{\"format\": \"moefold-plan\", \"version\": 1,", f) >= 0);
    assert_int_equal(fclose(f), 0);
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_plan_read(path, NULL, b, NULL, &d), MOE_ERR_PARSE);
    (void)unlink(path);

    /* an unresolved plan is not written */
    moe_plan_init(a);
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_plan_write(path, a, NULL, &d), MOE_ERR_INVALID);
    assert_non_null(strstr(d.message, "not resolved"));
    assert_int_equal(access(path, F_OK), -1);
    test_free(b);
    test_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_round_trip), cmocka_unit_test(test_variants_round_trip),
        cmocka_unit_test(test_malformed),       cmocka_unit_test(test_lenient_where_allowed),
        cmocka_unit_test(test_hardware_and_io),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
