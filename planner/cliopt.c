/*
 * Command-line pieces shared by `moefold plan` and `moefold whatif` (planner/cliopt.h).
 */
#include "planner/cliopt.h"

#include "model/imbalance.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB         1073741824.0
#define LOAD_BITS   10
#define LOAD_SLOTS  (1 << LOAD_BITS)
#define LOAD_PROBES 16
#define BAR_WIDTH   30
#define BAR_DELAY_S 1.0

void moe_plan_cli_opts_init(struct moe_plan_cli_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->memory_margin = -1.0;
}

int moe_plan_cli_value(
    int argc, char **argv, int i, const char *name, const char **v, struct moe_diag *diag)
{
    size_t n = strlen(name);
    if (strncmp(argv[i], name, n) != 0) {
        return 0;
    }
    if (argv[i][n] == '=') {
        *v = argv[i] + n + 1;
        return 1;
    }
    if (argv[i][n] != '\0') {
        return 0;
    }
    if (i + 1 >= argc) {
        moe_diag_source(diag, name);
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s needs a value", name);
        return -1;
    }
    *v = argv[i + 1];
    return 2;
}

bool moe_plan_cli_int(
    const char *flag, const char *s, long lo, long hi, int *out, struct moe_diag *diag)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) {
        moe_diag_source(diag, flag);
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s '%s': expected an integer in [%ld, %ld]",
                           flag, s, lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

bool moe_plan_cli_double(
    const char *flag, const char *s, double lo, double hi, double *out, struct moe_diag *diag)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        moe_diag_source(diag, flag);
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s '%s': expected a number in [%g, %g]", flag, s,
                           lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* Parse a comma-separated list of names into a bit mask. */
static bool
parse_names(const char *flag, const char *list, bool recipes, unsigned *mask, struct moe_diag *diag)
{
    char buf[256];
    (void)snprintf(buf, sizeof(buf), "%s", list);
    *mask = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        int v;
        enum moe_status st;
        if (recipes) {
            enum moe_recipe r;
            st = moe_recipe_parse(tok, &r, diag);
            v = (int)r;
        } else {
            enum moe_dispatcher d;
            st = moe_dispatcher_parse(tok, &d, diag);
            v = (int)d;
        }
        if (st != MOE_OK) {
            moe_diag_source(diag, flag);
            return false;
        }
        *mask |= 1u << v;
    }
    if (*mask == 0) {
        moe_diag_source(diag, flag);
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s needs at least one name", flag);
        return false;
    }
    return true;
}

int moe_plan_cli_flag(
    struct moe_plan_cli_opts *o, int argc, char **argv, int i, struct moe_diag *diag)
{
    const char *v = NULL;
    int used;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
        o->help = true;
        return 1;
    }
    if (strcmp(argv[i], "--no-offload") == 0) {
        o->no_offload = true;
        return 1;
    }
    if (strcmp(argv[i], "--exhaustive") == 0) {
        o->exhaustive = true;
        return 1;
    }
    if (strcmp(argv[i], "--all-offload-sets") == 0) {
        o->all_offload_sets = true;
        return 1;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--fix", &v, diag)) != 0) {
        o->fix = v;
        return used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--max-memory-gib", &v, diag)) != 0) {
        return used < 0 || !moe_plan_cli_double("--max-memory-gib", v, 0.001, 1e6,
                                                &o->max_memory_gib, diag)
                   ? -1
                   : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--memory-margin", &v, diag)) != 0) {
        return used < 0 ||
                       !moe_plan_cli_double("--memory-margin", v, 0.0, 1.0, &o->memory_margin, diag)
                   ? -1
                   : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--precision", &v, diag)) != 0) {
        return used < 0 || !parse_names("--precision", v, true, &o->recipes, diag) ? -1 : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--dispatcher", &v, diag)) != 0) {
        return used < 0 || !parse_names("--dispatcher", v, false, &o->dispatchers, diag) ? -1
                                                                                         : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--threads", &v, diag)) != 0) {
        return used < 0 || !moe_plan_cli_int("--threads", v, 0, 64, &o->threads, diag) ? -1 : used;
    }
    return 0;
}

void moe_plan_cli_help(FILE *out)
{
    fprintf(out,
            "search (every valid combination; exact pruning only):\n"
            "  --fix K=V[,K=V...]      fix knobs: tp cp pp vpp ep etp mbs sp recipe dispatcher\n"
            "                          dist_opt fp8_param_gather overlap_grad_reduce\n"
            "                          overlap_param_gather tp_comm_overlap ep_overlap\n"
            "                          grouped_gemm (0/1), recompute=none|full:METHOD:N|MOD+MOD,\n"
            "                          act_offload=none|MOD+MOD|cpu:N, opt_offload=none|FRACTION,\n"
            "                          cuda_graph=none|full|local:MOD+MOD|te:MOD+MOD\n"
            "                          (a Megatron layout or option flag fixes its knob too)\n"
            "  --max-memory-gib X      per-GPU memory cap below the HBM capacity\n"
            "  --memory-margin F       a plan must fit with its predicted memory x (1 + F);\n"
            "                          default: the upper end of the memory model's 80%%\n"
            "                          interval from the cluster profile; 0 ranks every plan\n"
            "                          that fits as predicted\n"
            "  --precision LIST        recipes to consider (bf16,fp8-tensorwise,fp8-delayed,\n"
            "                          fp8-blockwise,mxfp8,nvfp4; default: all the GPU runs)\n"
            "  --dispatcher LIST       alltoall,allgather,deepep,hybridep (default: all)\n"
            "  --no-offload            no activation or optimizer offload\n"
            "  --all-offload-sets      every fine-grained offload module set (default: unions of\n"
            "                          module groups)\n"
            "  --threads N             worker threads (default: all cores)\n"
            "  --exhaustive            predict every candidate (no bounds: slow; for checking)\n");
}

/* ------------------------------------------------------------------------------------------ */
/* The request                                                                                  */

static void fix(struct moe_plan_request *req, enum moe_plan_knob k)
{
    req->fixed |= 1u << k;
}

/* Megatron fields that fix a knob when given. */
static const struct {
    enum moe_megatron_field field;
    enum moe_plan_knob knob;
} megatron_knobs[] = {
    {MOE_MF_TP, MOE_PK_TP},
    {MOE_MF_PP, MOE_PK_PP},
    {MOE_MF_VPP, MOE_PK_VPP},
    {MOE_MF_PP_LAYOUT, MOE_PK_PP_LAYOUT},
    {MOE_MF_PP_LAYOUT, MOE_PK_VPP},
    {MOE_MF_FIRST_STAGE_LAYERS, MOE_PK_PP_LAYOUT},
    {MOE_MF_LAST_STAGE_LAYERS, MOE_PK_PP_LAYOUT},
    {MOE_MF_CP, MOE_PK_CP},
    {MOE_MF_EP, MOE_PK_EP},
    {MOE_MF_ETP, MOE_PK_ETP},
    {MOE_MF_SEQUENCE_PARALLEL, MOE_PK_SEQUENCE_PARALLEL},
    {MOE_MF_MBS, MOE_PK_MBS},
    {MOE_MF_RECIPE, MOE_PK_RECIPE},
    {MOE_MF_FP8_PARAM_GATHER, MOE_PK_FP8_PARAM_GATHER},
    {MOE_MF_DISTRIBUTED_OPTIMIZER, MOE_PK_DIST_OPT},
    {MOE_MF_OVERLAP_GRAD_REDUCE, MOE_PK_OVERLAP_GRAD_REDUCE},
    {MOE_MF_OVERLAP_PARAM_GATHER, MOE_PK_OVERLAP_PARAM_GATHER},
    {MOE_MF_TP_COMM_OVERLAP, MOE_PK_TP_COMM_OVERLAP},
    {MOE_MF_OVERLAP_MOE_EP_COMM, MOE_PK_EP_OVERLAP},
    {MOE_MF_DELAY_WGRAD, MOE_PK_EP_OVERLAP},
    {MOE_MF_GROUPED_GEMM, MOE_PK_GROUPED_GEMM},
    {MOE_MF_DISPATCHER, MOE_PK_DISPATCHER},
    {MOE_MF_PRECISION_AWARE_OPTIMIZER, MOE_PK_OPT_OFFLOAD},
    {MOE_MF_OPTIMIZER_CPU_OFFLOAD, MOE_PK_OPT_OFFLOAD},
    {MOE_MF_OPTIMIZER_OFFLOAD_FRACTION, MOE_PK_OPT_OFFLOAD},
    {MOE_MF_RECOMPUTE, MOE_PK_RECOMPUTE},
    {MOE_MF_RECOMPUTE_METHOD, MOE_PK_RECOMPUTE},
    {MOE_MF_RECOMPUTE_NUM_LAYERS, MOE_PK_RECOMPUTE},
    {MOE_MF_RECOMPUTE_MODULES, MOE_PK_RECOMPUTE},
    {MOE_MF_CPU_OFFLOADING_NUM_LAYERS, MOE_PK_ACT_OFFLOAD},
    {MOE_MF_FINE_GRAINED_OFFLOAD, MOE_PK_ACT_OFFLOAD},
    {MOE_MF_OFFLOAD_MODULES, MOE_PK_ACT_OFFLOAD},
    {MOE_MF_CUDA_GRAPH_IMPL, MOE_PK_CUDA_GRAPH},
    {MOE_MF_CUDA_GRAPH_MODULES, MOE_PK_CUDA_GRAPH},
};

/* Module list "a+b+c" of one set into a bit mask. */
static enum moe_status
parse_modules(enum moe_module_set set, const char *s, unsigned *mask, struct moe_diag *diag)
{
    char buf[256];
    (void)snprintf(buf, sizeof(buf), "%s", s);
    *mask = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, "+", &save); tok != NULL; tok = strtok_r(NULL, "+", &save)) {
        unsigned bit = 0;
        MOE_TRY(moe_module_parse(set, tok, &bit, diag));
        *mask |= bit;
    }
    return MOE_OK;
}

static enum moe_status fix_recompute(const char *v, struct moe_options *opt, struct moe_diag *diag)
{
    opt->recompute_modules = 0;
    opt->recompute_num_layers = 0;
    opt->recompute_method = MOE_RECOMPUTE_UNIFORM;
    if (strcmp(v, "none") == 0) {
        opt->recompute = MOE_RECOMPUTE_NONE;
        return MOE_OK;
    }
    if (strncmp(v, "full", 4) == 0) {
        char method[32] = "uniform";
        int n = 1;
        if (v[4] == ':' && sscanf(v + 5, "%31[^:]:%d", method, &n) < 1) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "recompute=%s: use full:METHOD:LAYERS", v);
        }
        opt->recompute = MOE_RECOMPUTE_FULL;
        opt->recompute_num_layers = n;
        return moe_recompute_method_parse(method, &opt->recompute_method, diag);
    }
    opt->recompute = MOE_RECOMPUTE_SELECTIVE;
    return parse_modules(MOE_MODSET_RECOMPUTE, v, &opt->recompute_modules, diag);
}

static enum moe_status fix_offload(const char *v, struct moe_options *opt, struct moe_diag *diag)
{
    opt->cpu_offloading_num_layers = 0;
    opt->fine_grained_offload = false;
    opt->offload_modules = 0;
    if (strcmp(v, "none") == 0) {
        return MOE_OK;
    }
    if (strncmp(v, "cpu:", 4) == 0) {
        char *end = NULL;
        long n = strtol(v + 4, &end, 10);
        if (end == v + 4 || *end != '\0' || n < 1 || n > MOE_MAX_LAYERS) {
            return moe_diag_set(diag, MOE_ERR_INVALID, "act_offload=%s: use cpu:LAYERS", v);
        }
        opt->cpu_offloading_num_layers = (int)n;
        return MOE_OK;
    }
    opt->fine_grained_offload = true;
    return parse_modules(MOE_MODSET_OFFLOAD, v, &opt->offload_modules, diag);
}

static enum moe_status fix_graph(const char *v, struct moe_options *opt, struct moe_diag *diag)
{
    opt->cuda_graph_modules = 0;
    if (strcmp(v, "none") == 0) {
        opt->cuda_graph_impl = MOE_CG_NONE;
        return MOE_OK;
    }
    if (strcmp(v, "full") == 0) {
        opt->cuda_graph_impl = MOE_CG_LOCAL;
        opt->cuda_graph_modules = MOE_CGM_FULL_ITERATION;
        return MOE_OK;
    }
    const char *colon = strchr(v, ':');
    if (colon == NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "cuda_graph=%s: use none, full, local:MOD+MOD or te:MOD+MOD", v);
    }
    opt->cuda_graph_impl = strncmp(v, "te:", 3) == 0 ? MOE_CG_TE : MOE_CG_LOCAL;
    return parse_modules(MOE_MODSET_CUDA_GRAPH, colon + 1, &opt->cuda_graph_modules, diag);
}

/* One --fix item. */
static enum moe_status
fix_item(const char *key, const char *v, struct moe_plan_request *req, struct moe_diag *diag)
{
    struct moe_layout *lay = &req->lay;
    struct moe_options *opt = &req->opt;
    const struct {
        const char *name;
        int *field;
        enum moe_plan_knob knob;
    } ints[] = {{"tp", &lay->tp, MOE_PK_TP},   {"cp", &lay->cp, MOE_PK_CP},
                {"pp", &lay->pp, MOE_PK_PP},   {"vpp", &lay->vpp, MOE_PK_VPP},
                {"ep", &lay->ep, MOE_PK_EP},   {"etp", &lay->etp, MOE_PK_ETP},
                {"mbs", &lay->mbs, MOE_PK_MBS}};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (strcmp(key, ints[i].name) == 0) {
            if (!moe_plan_cli_int("--fix", v, 1, 1 << 24, ints[i].field, diag)) {
                return MOE_ERR_INVALID;
            }
            fix(req, ints[i].knob);
            return MOE_OK;
        }
    }
    const struct {
        const char *name;
        bool *field;
        enum moe_plan_knob knob;
    } bools[] = {{"sp", &lay->sequence_parallel, MOE_PK_SEQUENCE_PARALLEL},
                 {"dist_opt", &opt->use_distributed_optimizer, MOE_PK_DIST_OPT},
                 {"fp8_param_gather", &opt->fp8_param_gather, MOE_PK_FP8_PARAM_GATHER},
                 {"overlap_grad_reduce", &opt->overlap_grad_reduce, MOE_PK_OVERLAP_GRAD_REDUCE},
                 {"overlap_param_gather", &opt->overlap_param_gather, MOE_PK_OVERLAP_PARAM_GATHER},
                 {"tp_comm_overlap", &opt->tp_comm_overlap, MOE_PK_TP_COMM_OVERLAP},
                 {"ep_overlap", &opt->overlap_moe_ep_comm, MOE_PK_EP_OVERLAP},
                 {"grouped_gemm", &opt->moe_grouped_gemm, MOE_PK_GROUPED_GEMM}};
    for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++) {
        if (strcmp(key, bools[i].name) == 0) {
            int b = 0;
            if (!moe_plan_cli_int("--fix", v, 0, 1, &b, diag)) {
                return MOE_ERR_INVALID;
            }
            *bools[i].field = b != 0;
            if (bools[i].knob == MOE_PK_EP_OVERLAP) {
                opt->delay_wgrad_compute = b != 0;
            }
            fix(req, bools[i].knob);
            return MOE_OK;
        }
    }
    if (strcmp(key, "recipe") == 0) {
        fix(req, MOE_PK_RECIPE);
        return moe_recipe_parse(v, &opt->recipe, diag);
    }
    if (strcmp(key, "dispatcher") == 0) {
        fix(req, MOE_PK_DISPATCHER);
        return moe_dispatcher_parse(v, &opt->dispatcher, diag);
    }
    if (strcmp(key, "recompute") == 0) {
        fix(req, MOE_PK_RECOMPUTE);
        return fix_recompute(v, opt, diag);
    }
    if (strcmp(key, "act_offload") == 0) {
        fix(req, MOE_PK_ACT_OFFLOAD);
        return fix_offload(v, opt, diag);
    }
    if (strcmp(key, "opt_offload") == 0) {
        fix(req, MOE_PK_OPT_OFFLOAD);
        if (strcmp(v, "none") == 0) {
            opt->optimizer_cpu_offload = false;
            return MOE_OK;
        }
        double f = 0.0;
        if (!moe_plan_cli_double("--fix opt_offload", v, 0.01, 1.0, &f, diag)) {
            return MOE_ERR_INVALID;
        }
        opt->optimizer_cpu_offload = true;
        opt->precision_aware_optimizer = true;
        opt->use_distributed_optimizer = true;
        opt->optimizer_offload_fraction = f;
        return MOE_OK;
    }
    if (strcmp(key, "cuda_graph") == 0) {
        fix(req, MOE_PK_CUDA_GRAPH);
        return fix_graph(v, opt, diag);
    }
    return moe_diag_set(diag, MOE_ERR_INVALID,
                        "--fix: unknown knob '%s' (tp cp pp vpp ep etp mbs sp recipe dispatcher "
                        "dist_opt fp8_param_gather overlap_grad_reduce overlap_param_gather "
                        "tp_comm_overlap ep_overlap grouped_gemm recompute act_offload opt_offload "
                        "cuda_graph)",
                        key);
}

static enum moe_status
apply_fix(const char *list, struct moe_plan_request *req, struct moe_diag *diag)
{
    char buf[1024];
    if (strlen(list) >= sizeof(buf)) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "--fix: list too long");
    }
    (void)snprintf(buf, sizeof(buf), "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL) {
            moe_diag_source(diag, "--fix");
            return moe_diag_set(diag, MOE_ERR_INVALID, "--fix item '%s': use KNOB=VALUE", tok);
        }
        *eq = '\0';
        enum moe_status st = fix_item(tok, eq + 1, req, diag);
        if (st != MOE_OK) {
            moe_diag_source(diag, "--fix");
            return st;
        }
    }
    return MOE_OK;
}

enum moe_status moe_plan_cli_request(const struct moe_model_cfg *cfg,
                                     const struct moe_cluster *cl,
                                     int num_gpus,
                                     const struct moe_layout *lay,
                                     const struct moe_options *opt,
                                     const struct moe_megatron_result *mres,
                                     const struct moe_plan_cli_opts *o,
                                     struct moe_plan_request *req,
                                     struct moe_diag *diag)
{
    MOE_TRY(moe_cfg_validate(cfg, diag));
    if (num_gpus <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "give --gpus N (GPUs of %s to use)", cl->name);
    }
    MOE_TRY(moe_cluster_check_gpus(cl, num_gpus, diag));
    if (mres == NULL || !moe_megatron_is_set(mres, MOE_MF_GBS) || lay->gbs <= 0) {
        moe_diag_source(diag, "--global-batch-size");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "give --global-batch-size B (sequences per step): the planner "
                            "compares layouts at a fixed global batch");
    }
    req->cfg = cfg;
    req->cl = cl;
    req->num_gpus = num_gpus;
    req->gbs = lay->gbs;
    req->seq_length = lay->seq_length > 0 ? lay->seq_length : cfg->seq_length;
    req->lay = *lay;
    req->opt = *opt;
    req->fixed = 0;
    for (size_t i = 0; i < sizeof(megatron_knobs) / sizeof(megatron_knobs[0]); i++) {
        if (moe_megatron_is_set(mres, megatron_knobs[i].field)) {
            fix(req, megatron_knobs[i].knob);
        }
    }
    if (o->fix != NULL) {
        MOE_TRY(apply_fix(o->fix, req, diag));
    }
    if (o->no_offload) {
        fix(req, MOE_PK_ACT_OFFLOAD);
        fix(req, MOE_PK_OPT_OFFLOAD);
        req->opt.cpu_offloading_num_layers = 0;
        req->opt.fine_grained_offload = false;
        req->opt.offload_modules = 0;
        req->opt.optimizer_cpu_offload = false;
    }
    req->recipes = o->recipes;
    req->dispatchers = o->dispatchers;
    req->max_memory_bytes = o->max_memory_gib * GIB;
    req->num_threads = o->threads;
    req->exhaustive = o->exhaustive;
    req->all_offload_sets = o->all_offload_sets;
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Load-statistics cache                                                                        */

struct load_slot {
    int ep;
    double tokens; /* tokens one EP rank routes per micro-batch and layer: mbs seq / (cp tp) */
    bool used;
    bool busy; /* being computed by a thread (stats not set yet) */
    bool has;
    struct moe_load_stats stats;
};

struct moe_plan_load_cache {
    moe_plan_load_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t ready; /* broadcast whenever a busy slot is settled */
    struct load_slot slots[LOAD_SLOTS];
};

struct moe_plan_load_cache *moe_plan_load_cache_create(moe_plan_load_fn fn, void *ctx)
{
    struct moe_plan_load_cache *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->fn = fn;
    c->ctx = ctx;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->ready, NULL);
    return c;
}

void moe_plan_load_cache_destroy(struct moe_plan_load_cache *c)
{
    if (c == NULL) {
        return;
    }
    pthread_cond_destroy(&c->ready);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The slot of key (ep, tokens) under c->mu: its own, else the first free one on its probe path,
 * else (a full path) the first of the path, to be overwritten unless another thread is filling it.
 */
static struct load_slot *load_slot(struct moe_plan_load_cache *c, int ep, double tokens)
{
    uint64_t bits = 0;
    memcpy(&bits, &tokens, sizeof(bits));
    /* Fibonacci hashing: the product's top bits mix every bit of the key (a double's low bits are
     * often all zero, and a product's low bits see only the key's low bits). */
    uint64_t h = ((bits ^ (uint64_t)(unsigned)ep) * 0x9E3779B97F4A7C15ull) >> (64 - LOAD_BITS);
    for (int i = 0; i < LOAD_PROBES; i++) {
        struct load_slot *t = &c->slots[(h + (uint64_t)i) % LOAD_SLOTS];
        if (!t->used || (t->ep == ep && t->tokens == tokens)) {
            return t;
        }
    }
    return &c->slots[h];
}

static bool load_slot_is(const struct load_slot *s, int ep, double tokens)
{
    return s->used && s->ep == ep && s->tokens == tokens;
}

enum moe_status moe_plan_load_cache_fn(void *cache,
                                       const struct moe_layout *lay,
                                       struct moe_load_stats *out,
                                       bool *used,
                                       struct moe_diag *diag)
{
    struct moe_plan_load_cache *c = cache;
    int ep = lay->ep;
    double tokens = moe_imbalance_rank_tokens(lay); /* the key: what moe_imbalance_auto reads */
    pthread_mutex_lock(&c->mu);
    struct load_slot *s = load_slot(c, ep, tokens);
    /* Another thread computing the same key: wait for its result rather than compute it again
     * (the Monte Carlo of one key takes up to ~50 ms; two threads often reach a new key at once).
     */
    while (load_slot_is(s, ep, tokens) && s->busy) {
        pthread_cond_wait(&c->ready, &c->mu);
        s = load_slot(c, ep, tokens);
    }
    if (load_slot_is(s, ep, tokens)) {
        *used = s->has;
        *out = s->stats;
        pthread_mutex_unlock(&c->mu);
        return MOE_OK;
    }
    /* Claim the slot unless another key is being computed in it (then the result is not kept). */
    struct load_slot *mine = s->busy ? NULL : s;
    if (mine != NULL) {
        *mine = (struct load_slot){.ep = ep, .tokens = tokens, .used = true, .busy = true};
    }
    pthread_mutex_unlock(&c->mu);
    /* Outside the lock: other threads compute other keys meanwhile (the same inputs give the same
     * statistics). */
    struct moe_load_stats stats = {0};
    bool has = false;
    enum moe_status st = c->fn(c->ctx, lay, &stats, &has, diag);
    if (mine != NULL) {
        pthread_mutex_lock(&c->mu);
        mine->busy = false;
        mine->used = st == MOE_OK; /* a failure is not kept: a waiting thread tries itself */
        mine->has = has;
        mine->stats = stats;
        pthread_cond_broadcast(&c->ready);
        pthread_mutex_unlock(&c->mu);
    }
    if (st != MOE_OK) {
        return st;
    }
    *used = has;
    *out = stats;
    return MOE_OK;
}

enum moe_status moe_plan_auto_load(void *ctx,
                                   const struct moe_layout *lay,
                                   struct moe_load_stats *out,
                                   bool *used,
                                   struct moe_diag *diag)
{
    *used = true;
    return moe_imbalance_auto(ctx, lay, MOE_IMBALANCE_DEFAULT_CV, out, diag);
}

/* ------------------------------------------------------------------------------------------ */
/* Progress bar                                                                                 */

void moe_plan_progress_init(struct moe_plan_progress *pg, const char *cmd, bool enabled)
{
    pg->cmd = cmd;
    pg->enabled = enabled && isatty(STDERR_FILENO);
    pg->shown = false;
}

void moe_plan_progress_cb(void *ctx, double done, double elapsed_s, double evaluated)
{
    struct moe_plan_progress *pg = ctx;
    if (!pg->enabled || elapsed_s < BAR_DELAY_S) {
        return;
    }
    int fill = (int)(done * BAR_WIDTH + 0.5);
    fill = fill < 0 ? 0 : (fill > BAR_WIDTH ? BAR_WIDTH : fill);
    char bar[BAR_WIDTH + 1];
    for (int i = 0; i < BAR_WIDTH; i++) {
        bar[i] = i < fill ? '#' : '.';
    }
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\rmoefold %s: [%s] %3.0f%%  %.1f s  %.3g predictions", pg->cmd, bar,
            100.0 * done, elapsed_s, evaluated);
    fflush(stderr);
    pg->shown = true;
}

void moe_plan_progress_done(struct moe_plan_progress *pg)
{
    if (pg->shown) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
        pg->shown = false;
    }
}
