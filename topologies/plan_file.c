/*
 * Plan files (topologies/plan_file.h): write the planner's choice, read it back for the engine.
 *
 * Writing serialises the resolved plan (model via moe_model_to_json, layout, options with enums
 * by name, the prediction as given, the Megatron flags). Reading checks format, version and keys,
 * rebuilds the structs, re-runs moe_layout_resolve (every Megatron rule, chunk placement) and
 * checks that derived values written in the file agree with it. Numbers are printed by cJSON with
 * enough digits to read back exactly, so a plan round-trips bit for bit. The prediction object is
 * copied, never interpreted.
 */
#include "topologies/plan_file.h"

#include "model/megatron_args.h"
#include "topologies/json_util.h"
#include "topologies/model_file.h"

#include <stdio.h>
#include <string.h>

static const char *const top_keys[] = {
    "format", "version", "model",      "cluster",       "num_gpus",
    "layout", "options", "prediction", "megatron_args",
};

static const char *const layout_keys[] = {
    "tp",
    "cp",
    "dp",
    "pp",
    "vpp",
    "ep",
    "etp",
    "edp",
    "mbs",
    "gbs",
    "num_microbatches",
    "seq_length",
    "sequence_parallel",
    "first_stage_layers",
    "last_stage_layers",
    "pipeline_layout",
    "custom_pipeline_layout",
};

static const char *const option_keys[] = {
    "recipe",
    "fp32_training",
    "fp8_param_gather",
    "use_distributed_optimizer",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "tp_comm_overlap",
    "overlap_moe_ep_comm",
    "delay_wgrad_compute",
    "moe_grouped_gemm",
    "force_load_balancing",
    "precision_aware_optimizer",
    "optimizer_cpu_offload",
    "optimizer_offload_fraction",
    "main_grads_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "dispatcher",
    "unfused_dispatch",
    "capacity_factor",
    "aux_loss_coeff",
    "seq_aux_loss_coeff",
    "global_aux_loss_coeff",
    "recompute",
    "recompute_method",
    "recompute_num_layers",
    "recompute_modules",
    "cpu_offloading_num_layers",
    "fine_grained_offload",
    "offload_modules",
    "cuda_graph_impl",
    "cuda_graph_modules",
    "moe_imbalance",
    "moe_hot_expert_replicas",
};

/* Boolean options, by key, in struct moe_options. */
struct opt_bool {
    const char *key;
    size_t off;
};
static const struct opt_bool opt_bools[] = {
    {"fp32_training", offsetof(struct moe_options, is_fp32_training)},
    {"fp8_param_gather", offsetof(struct moe_options, fp8_param_gather)},
    {"use_distributed_optimizer", offsetof(struct moe_options, use_distributed_optimizer)},
    {"overlap_grad_reduce", offsetof(struct moe_options, overlap_grad_reduce)},
    {"overlap_param_gather", offsetof(struct moe_options, overlap_param_gather)},
    {"tp_comm_overlap", offsetof(struct moe_options, tp_comm_overlap)},
    {"overlap_moe_ep_comm", offsetof(struct moe_options, overlap_moe_ep_comm)},
    {"delay_wgrad_compute", offsetof(struct moe_options, delay_wgrad_compute)},
    {"moe_grouped_gemm", offsetof(struct moe_options, moe_grouped_gemm)},
    {"force_load_balancing", offsetof(struct moe_options, force_load_balancing)},
    {"precision_aware_optimizer", offsetof(struct moe_options, precision_aware_optimizer)},
    {"optimizer_cpu_offload", offsetof(struct moe_options, optimizer_cpu_offload)},
    {"fine_grained_offload", offsetof(struct moe_options, fine_grained_offload)},
    {"unfused_dispatch", offsetof(struct moe_options, is_unfused_dispatch)},
};

void moe_plan_init(struct moe_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    moe_cfg_init(&plan->model);
    moe_layout_init(&plan->layout);
    moe_options_init(&plan->options);
}

/* ------------------------------------------------------------------------------------------ */
/* Writing                                                                                      */

static bool add_int(cJSON *obj, const char *key, int v)
{
    return cJSON_AddNumberToObject(obj, key, v) != NULL;
}

static bool add_modules(cJSON *obj, const char *key, enum moe_module_set set, unsigned bits)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    for (unsigned b = 0; arr != NULL && b < 16; b++) {
        const char *name = (bits & (1u << b)) ? moe_module_name(set, 1u << b) : NULL;
        if (name != NULL) {
            cJSON *s = cJSON_CreateString(name);
            if (s == NULL || !cJSON_AddItemToArray(arr, s)) {
                cJSON_Delete(s);
                return false;
            }
        }
    }
    return arr != NULL;
}

static cJSON *layout_to_json(const struct moe_layout *l)
{
    cJSON *o = cJSON_CreateObject();
    char pps[MOE_MAX_PP_CHUNKS * 24];
    moe_layout_format_pp_string(l, pps, (int)sizeof(pps));
    bool ok = o != NULL && add_int(o, "tp", l->tp) && add_int(o, "cp", l->cp) &&
              add_int(o, "dp", l->dp) && add_int(o, "pp", l->pp) && add_int(o, "vpp", l->vpp) &&
              add_int(o, "ep", l->ep) && add_int(o, "etp", l->etp) && add_int(o, "edp", l->edp) &&
              add_int(o, "mbs", l->mbs) && add_int(o, "gbs", l->gbs) &&
              add_int(o, "num_microbatches", l->num_microbatches) &&
              add_int(o, "seq_length", l->seq_length) &&
              cJSON_AddBoolToObject(o, "sequence_parallel", l->sequence_parallel) != NULL &&
              add_int(o, "first_stage_layers", l->first_stage_layers) &&
              add_int(o, "last_stage_layers", l->last_stage_layers) &&
              cJSON_AddStringToObject(o, "pipeline_layout", pps) != NULL &&
              cJSON_AddBoolToObject(o, "custom_pipeline_layout", l->has_custom_pp_layout) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *moe_plan_options_to_json(const struct moe_options *p)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL && cJSON_AddStringToObject(o, "recipe", moe_recipe_name(p->recipe));
    for (size_t i = 0; ok && i < MOE_ARRAY_LEN(opt_bools); i++) {
        bool v = false;
        memcpy(&v, (const char *)p + opt_bools[i].off, sizeof(v));
        ok = cJSON_AddBoolToObject(o, opt_bools[i].key, v) != NULL;
    }
    ok = ok &&
         cJSON_AddNumberToObject(o, "optimizer_offload_fraction", p->optimizer_offload_fraction) &&
         cJSON_AddStringToObject(o, "main_grads_dtype", moe_dtype_name(p->main_grads_dtype)) &&
         cJSON_AddStringToObject(o, "exp_avg_dtype", moe_dtype_name(p->exp_avg_dtype)) &&
         cJSON_AddStringToObject(o, "exp_avg_sq_dtype", moe_dtype_name(p->exp_avg_sq_dtype)) &&
         cJSON_AddStringToObject(o, "dispatcher", moe_dispatcher_name(p->dispatcher)) &&
         cJSON_AddNumberToObject(o, "capacity_factor", p->capacity_factor) &&
         cJSON_AddNumberToObject(o, "aux_loss_coeff", p->aux_loss_coeff) &&
         cJSON_AddNumberToObject(o, "seq_aux_loss_coeff", p->seq_aux_loss_coeff) &&
         cJSON_AddNumberToObject(o, "global_aux_loss_coeff", p->global_aux_loss_coeff) &&
         cJSON_AddStringToObject(o, "recompute", moe_recompute_name(p->recompute)) &&
         cJSON_AddStringToObject(o, "recompute_method",
                                 moe_recompute_method_name(p->recompute_method)) &&
         add_int(o, "recompute_num_layers", p->recompute_num_layers) &&
         add_modules(o, "recompute_modules", MOE_MODSET_RECOMPUTE, p->recompute_modules) &&
         add_int(o, "cpu_offloading_num_layers", p->cpu_offloading_num_layers) &&
         add_modules(o, "offload_modules", MOE_MODSET_OFFLOAD, p->offload_modules) &&
         cJSON_AddStringToObject(o, "cuda_graph_impl",
                                 moe_cuda_graph_impl_name(p->cuda_graph_impl)) &&
         add_modules(o, "cuda_graph_modules", MOE_MODSET_CUDA_GRAPH, p->cuda_graph_modules) &&
         (p->moe_imbalance == 0.0
              ? cJSON_AddStringToObject(o, "moe_imbalance", "auto") != NULL
              : cJSON_AddNumberToObject(o, "moe_imbalance", p->moe_imbalance) != NULL) &&
         add_int(o, "moe_hot_expert_replicas", p->moe_hot_expert_replicas);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Attach item to root under key; on failure item is freed. */
static bool attach(cJSON *root, const char *key, cJSON *item)
{
    if (item == NULL || !cJSON_AddItemToObject(root, key, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

static bool add_megatron_args(cJSON *root, const struct moe_plan *plan)
{
    if (plan->megatron_args[0] != '\0') {
        return cJSON_AddStringToObject(root, "megatron_args", plan->megatron_args) != NULL;
    }
    char text[MOE_PLAN_ARGS_LEN];
    size_t needed = 0;
    if (moe_megatron_format_args(&plan->model, &plan->layout, &plan->options, 0, text, sizeof(text),
                                 &needed, NULL) != MOE_OK) {
        return false;
    }
    return cJSON_AddStringToObject(root, "megatron_args", text) != NULL;
}

cJSON *moe_plan_to_json(const struct moe_plan *plan, const cJSON *prediction)
{
    if (plan->layout.num_chunks <= 0) {
        return NULL; /* not resolved */
    }
    cJSON *root = cJSON_CreateObject();
    char cluster[MOE_NAME_LEN];
    (void)snprintf(cluster, sizeof(cluster), "%.*s", MOE_NAME_LEN - 1, plan->cluster);
    bool ok =
        root != NULL && cJSON_AddStringToObject(root, "format", MOE_PLAN_FILE_FORMAT) &&
        cJSON_AddNumberToObject(root, "version", MOE_PLAN_FILE_VERSION) &&
        attach(root, "model", moe_model_to_json(&plan->model)) &&
        cJSON_AddStringToObject(root, "cluster", cluster) &&
        add_int(root, "num_gpus", plan->layout.num_gpus) &&
        attach(root, "layout", layout_to_json(&plan->layout)) &&
        attach(root, "options", moe_plan_options_to_json(&plan->options)) &&
        (prediction == NULL || attach(root, "prediction", cJSON_Duplicate(prediction, true))) &&
        add_megatron_args(root, plan);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

enum moe_status moe_plan_write(const char *path,
                               const struct moe_plan *plan,
                               const cJSON *prediction,
                               struct moe_diag *diag)
{
    moe_diag_source(diag, path);
    if (plan->layout.num_chunks <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s: the plan's layout is not resolved (call moe_layout_resolve)",
                            path);
    }
    cJSON *root = moe_plan_to_json(plan, prediction);
    if (root == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "%s: out of memory building the plan", path);
    }
    enum moe_status st = moe_json_write_file(path, root, diag);
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Reading                                                                                      */

/* Turn a name-parser failure into an error naming the key. */
static enum moe_status named(enum moe_status st,
                             const char *where,
                             const char *key,
                             const struct moe_diag *sub,
                             struct moe_diag *diag)
{
    if (st == MOE_OK) {
        return MOE_OK;
    }
    return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: %s", where, key, sub->message);
}

/* A string option, or NULL when absent; MOE_ERR_INVALID when not a string. */
static enum moe_status get_name(
    const cJSON *obj, const char *key, const char *where, const char **out, struct moe_diag *diag)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (it == NULL) {
        return MOE_OK;
    }
    if (!cJSON_IsString(it) || it->valuestring == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: expected a name (string)", where, key);
    }
    *out = it->valuestring;
    return MOE_OK;
}

static enum moe_status get_modules(const cJSON *obj,
                                   const char *key,
                                   enum moe_module_set set,
                                   const char *where,
                                   unsigned *out,
                                   struct moe_diag *diag)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (arr == NULL) {
        return MOE_OK;
    }
    if (!cJSON_IsArray(arr)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: expected a list of module names", where,
                            key);
    }
    unsigned bits = 0;
    for (const cJSON *it = arr->child; it != NULL; it = it->next) {
        if (!cJSON_IsString(it) || it->valuestring == NULL) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "%s.%s: expected module names (strings)",
                                where, key);
        }
        struct moe_diag sub;
        memset(&sub, 0, sizeof(sub));
        unsigned bit = 0;
        MOE_TRY(named(moe_module_parse(set, it->valuestring, &bit, &sub), where, key, &sub, diag));
        bits |= bit;
    }
    *out = bits;
    return MOE_OK;
}

static enum moe_status
read_option_enums(const cJSON *o, const char *w, struct moe_options *opt, struct moe_diag *diag)
{
    struct moe_diag sub;
    memset(&sub, 0, sizeof(sub));
    const char *s = NULL;
    MOE_TRY(get_name(o, "recipe", w, &s, diag));
    if (s != NULL) {
        MOE_TRY(named(moe_recipe_parse(s, &opt->recipe, &sub), w, "recipe", &sub, diag));
    }
    MOE_TRY(get_name(o, "dispatcher", w, &s, diag));
    if (s != NULL) {
        MOE_TRY(
            named(moe_dispatcher_parse(s, &opt->dispatcher, &sub), w, "dispatcher", &sub, diag));
    }
    MOE_TRY(get_name(o, "recompute", w, &s, diag));
    if (s != NULL) {
        MOE_TRY(named(moe_recompute_parse(s, &opt->recompute, &sub), w, "recompute", &sub, diag));
    }
    MOE_TRY(get_name(o, "recompute_method", w, &s, diag));
    if (s != NULL) {
        MOE_TRY(named(moe_recompute_method_parse(s, &opt->recompute_method, &sub), w,
                      "recompute_method", &sub, diag));
    }
    MOE_TRY(get_name(o, "cuda_graph_impl", w, &s, diag));
    if (s != NULL) {
        MOE_TRY(named(moe_cuda_graph_impl_parse(s, &opt->cuda_graph_impl, &sub), w,
                      "cuda_graph_impl", &sub, diag));
    }
    const char *dkeys[3] = {"main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"};
    enum moe_dtype *dvals[3] = {&opt->main_grads_dtype, &opt->exp_avg_dtype,
                                &opt->exp_avg_sq_dtype};
    for (int i = 0; i < 3; i++) {
        MOE_TRY(get_name(o, dkeys[i], w, &s, diag));
        if (s != NULL) {
            MOE_TRY(named(moe_dtype_parse(s, dvals[i], &sub), w, dkeys[i], &sub, diag));
        }
    }
    return MOE_OK;
}

enum moe_status moe_plan_options_from_json(const cJSON *o,
                                           const char *src,
                                           struct moe_options *opt,
                                           struct moe_diag *diag)
{
    char w[192];
    (void)snprintf(w, sizeof(w), "%s: options", src);
    if (o == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: missing required key \"options\"", src);
    }
    MOE_TRY(moe_json_check_keys(o, option_keys, MOE_ARRAY_LEN(option_keys), w, diag));
    moe_options_init(opt);
    for (size_t i = 0; i < MOE_ARRAY_LEN(opt_bools); i++) {
        bool v = false;
        memcpy(&v, (const char *)opt + opt_bools[i].off, sizeof(v));
        MOE_TRY(moe_json_get_bool(o, opt_bools[i].key, false, &v, w, diag));
        memcpy((char *)opt + opt_bools[i].off, &v, sizeof(v));
    }
    MOE_TRY(read_option_enums(o, w, opt, diag));
    MOE_TRY(moe_json_get_double(o, "optimizer_offload_fraction", false, 0.0, 1.0,
                                &opt->optimizer_offload_fraction, w, diag));
    MOE_TRY(
        moe_json_get_double(o, "capacity_factor", false, 0.0, 1e6, &opt->capacity_factor, w, diag));
    const char *lkeys[3] = {"aux_loss_coeff", "seq_aux_loss_coeff", "global_aux_loss_coeff"};
    double *lvals[3] = {&opt->aux_loss_coeff, &opt->seq_aux_loss_coeff,
                        &opt->global_aux_loss_coeff};
    for (int i = 0; i < 3; i++) {
        MOE_TRY(moe_json_get_double(o, lkeys[i], false, 0.0, 1e3, lvals[i], w, diag));
    }
    MOE_TRY(moe_json_get_int(o, "recompute_num_layers", false, 0, MOE_MAX_LAYERS,
                             &opt->recompute_num_layers, w, diag));
    MOE_TRY(moe_json_get_int(o, "cpu_offloading_num_layers", false, 0, MOE_MAX_LAYERS,
                             &opt->cpu_offloading_num_layers, w, diag));
    MOE_TRY(moe_json_get_int(o, "moe_hot_expert_replicas", false, 0, MOE_MAX_EXPERTS,
                             &opt->moe_hot_expert_replicas, w, diag));
    MOE_TRY(get_modules(o, "recompute_modules", MOE_MODSET_RECOMPUTE, w, &opt->recompute_modules,
                        diag));
    MOE_TRY(get_modules(o, "offload_modules", MOE_MODSET_OFFLOAD, w, &opt->offload_modules, diag));
    MOE_TRY(get_modules(o, "cuda_graph_modules", MOE_MODSET_CUDA_GRAPH, w, &opt->cuda_graph_modules,
                        diag));
    const cJSON *imb = cJSON_GetObjectItemCaseSensitive(o, "moe_imbalance");
    if (cJSON_IsString(imb) && strcmp(imb->valuestring, "auto") == 0) {
        opt->moe_imbalance = 0.0;
    } else if (imb != NULL && !cJSON_IsNumber(imb)) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%s.moe_imbalance: expected a load factor >= 1 or \"auto\"", w);
    } else {
        MOE_TRY(moe_json_get_double(o, "moe_imbalance", false, 0.0, 1000.0, &opt->moe_imbalance, w,
                                    diag));
    }
    return MOE_OK;
}

/* The layout as written: sizes and the pipeline layout text (derived values checked later). */
struct layout_text {
    int dp, edp, num_microbatches; /* -1 when absent */
    char pipeline[MOE_MAX_PP_CHUNKS * 24];
    bool custom;
};

static enum moe_status read_layout(const cJSON *o,
                                   const char *src,
                                   struct moe_layout *lay,
                                   struct layout_text *t,
                                   struct moe_diag *diag)
{
    char w[192];
    (void)snprintf(w, sizeof(w), "%s: layout", src);
    if (o == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: missing required key \"layout\"", src);
    }
    MOE_TRY(moe_json_check_keys(o, layout_keys, MOE_ARRAY_LEN(layout_keys), w, diag));
    const struct {
        const char *key;
        int *out;
        bool required;
        long lo, hi;
    } ints[] = {
        {"tp", &lay->tp, true, 1, 1 << 20},
        {"cp", &lay->cp, true, 1, 1 << 20},
        {"pp", &lay->pp, true, 1, MOE_MAX_PP_CHUNKS},
        {"vpp", &lay->vpp, false, 1, MOE_MAX_PP_CHUNKS},
        {"ep", &lay->ep, true, 1, 1 << 20},
        {"etp", &lay->etp, true, 1, 1 << 20},
        {"mbs", &lay->mbs, true, 1, 1 << 20},
        {"gbs", &lay->gbs, true, 1, 1 << 30},
        {"seq_length", &lay->seq_length, true, 1, 1 << 30},
        {"first_stage_layers", &lay->first_stage_layers, false, 0, MOE_MAX_LAYERS},
        {"last_stage_layers", &lay->last_stage_layers, false, 0, MOE_MAX_LAYERS},
        {"dp", &t->dp, false, 1, 1 << 30},
        {"edp", &t->edp, false, 1, 1 << 30},
        {"num_microbatches", &t->num_microbatches, false, 1, 1 << 30},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(ints); i++) {
        MOE_TRY(moe_json_get_int(o, ints[i].key, ints[i].required, ints[i].lo, ints[i].hi,
                                 ints[i].out, w, diag));
    }
    MOE_TRY(moe_json_get_bool(o, "sequence_parallel", false, &lay->sequence_parallel, w, diag));
    MOE_TRY(moe_json_get_bool(o, "custom_pipeline_layout", false, &t->custom, w, diag));
    MOE_TRY(moe_json_get_string(o, "pipeline_layout", t->custom, t->pipeline, sizeof(t->pipeline),
                                w, diag));
    return MOE_OK;
}

/* Build the layout again and check what the file states against what resolution derives. */
static enum moe_status resolve_layout(const char *src,
                                      const struct moe_cluster *cl,
                                      struct moe_plan *plan,
                                      const struct layout_text *t,
                                      struct moe_diag *diag)
{
    struct moe_layout *lay = &plan->layout;
    struct moe_diag sub;
    memset(&sub, 0, sizeof(sub));
    if (t->custom && moe_layout_parse_pp_string(t->pipeline, &plan->model, lay, &sub) != MOE_OK) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: layout.pipeline_layout '%s': %s", src,
                            t->pipeline, sub.message);
    }
    enum moe_status st = moe_layout_resolve(&plan->model, cl, &plan->options, lay, &sub);
    if (st != MOE_OK) {
        return moe_diag_set(diag, st, "%s: the plan's layout/options break a rule (%s): %s", src,
                            sub.source[0] ? sub.source : "layout", sub.message);
    }
    const struct {
        const char *key;
        int stated, derived;
    } checks[] = {
        {"dp", t->dp, lay->dp},
        {"edp", t->edp, lay->edp},
        {"num_microbatches", t->num_microbatches, lay->num_microbatches},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(checks); i++) {
        if (checks[i].stated >= 0 && checks[i].stated != checks[i].derived) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s: layout.%s = %d disagrees with the %d derived from num_gpus "
                                "and the other sizes; fix or remove it",
                                src, checks[i].key, checks[i].stated, checks[i].derived);
        }
    }
    if (!t->custom && t->pipeline[0] != '\0') {
        char derived[sizeof(t->pipeline)];
        moe_layout_format_pp_string(lay, derived, (int)sizeof(derived));
        if (strcmp(derived, t->pipeline) != 0) {
            return moe_diag_set(diag, MOE_ERR_INVALID,
                                "%s: layout.pipeline_layout '%s' is not the placement the sizes "
                                "give ('%s'); set \"custom_pipeline_layout\": true to keep it",
                                src, t->pipeline, derived);
        }
    }
    return MOE_OK;
}

static enum moe_status
read_top(const cJSON *root, const char *src, struct moe_plan *plan, struct moe_diag *diag)
{
    MOE_TRY(moe_json_check_format(root, MOE_PLAN_FILE_FORMAT, MOE_PLAN_FILE_VERSION, src, diag));
    MOE_TRY(moe_json_check_keys(root, top_keys, MOE_ARRAY_LEN(top_keys), src, diag));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s: missing required key \"model\"", src);
    }
    char msrc[192];
    (void)snprintf(msrc, sizeof(msrc), "%s: model", src);
    MOE_TRY(moe_model_from_json(model, msrc, &plan->model, diag));
    MOE_TRY(moe_json_get_string(root, "cluster", true, plan->cluster, sizeof(plan->cluster), src,
                                diag));
    if (plan->cluster[0] == '\0') {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.cluster: must name a cluster", src);
    }
    MOE_TRY(
        moe_json_get_int(root, "num_gpus", true, 1, 1 << 24, &plan->layout.num_gpus, src, diag));
    MOE_TRY(moe_json_get_string(root, "megatron_args", false, plan->megatron_args,
                                sizeof(plan->megatron_args), src, diag));
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(root, "prediction");
    if (pred != NULL && !cJSON_IsObject(pred)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s.prediction: expected a JSON object", src);
    }
    return MOE_OK;
}

enum moe_status moe_plan_from_json(const cJSON *root,
                                   const char *source,
                                   const struct moe_cluster *cl,
                                   struct moe_plan *plan,
                                   cJSON **prediction,
                                   struct moe_diag *diag)
{
    const char *src = source != NULL ? source : "(plan)";
    if (prediction != NULL) {
        *prediction = NULL;
    }
    moe_plan_init(plan);
    struct layout_text t;
    memset(&t, 0, sizeof(t));
    t.dp = t.edp = t.num_microbatches = -1;
    MOE_TRY(read_top(root, src, plan, diag));
    moe_diag_source(diag, src);
    MOE_TRY(read_layout(cJSON_GetObjectItemCaseSensitive(root, "layout"), src, &plan->layout, &t,
                        diag));
    MOE_TRY(moe_plan_options_from_json(cJSON_GetObjectItemCaseSensitive(root, "options"), src,
                                       &plan->options, diag));
    MOE_TRY(resolve_layout(src, cl, plan, &t, diag));
    if (plan->megatron_args[0] == '\0') {
        size_t needed = 0;
        if (moe_megatron_format_args(&plan->model, &plan->layout, &plan->options, 0,
                                     plan->megatron_args, sizeof(plan->megatron_args), &needed,
                                     NULL) != MOE_OK) {
            plan->megatron_args[0] = '\0'; /* too long to keep: informational only */
        }
    }
    const cJSON *pred = cJSON_GetObjectItemCaseSensitive(root, "prediction");
    if (prediction != NULL && pred != NULL) {
        *prediction = cJSON_Duplicate(pred, true);
        if (*prediction == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "%s: out of memory copying the prediction",
                                src);
        }
    }
    return MOE_OK;
}

enum moe_status moe_plan_read(const char *path,
                              const struct moe_cluster *cl,
                              struct moe_plan *plan,
                              cJSON **prediction,
                              struct moe_diag *diag)
{
    if (prediction != NULL) {
        *prediction = NULL;
    }
    cJSON *root = NULL;
    MOE_TRY(moe_json_read_file(path, &root, diag));
    enum moe_status st = moe_plan_from_json(root, path, cl, plan, prediction, diag);
    cJSON_Delete(root);
    return st;
}
