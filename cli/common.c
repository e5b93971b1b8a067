/*
 * Shared problem parsing and prediction output for the moefold CLI (cli/common.h).
 */
#include "cli/common.h"

#include "cli/uncertainty.h"
#include "model/imbalance.h"
#include "planner/cliopt.h"
#include "planner/search.h"
#include "topologies/cluster_file.h"
#include "topologies/model_file.h"
#include "topologies/plan_file.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0
/* Largest schedule-simulation workspace predict allocates (bytes): an absurd global batch must be
 * refused in bounded memory and time (issue 7), not simulated micro-batch by micro-batch. 1 GiB is
 * 64M (micro-batch, chunk) cells, far past real runs (thousands of micro-batches x <= 512 chunks),
 * and simulates in about 4 s on one core. */
#define MOE_CLI_MAX_SIM_BYTES ((size_t)1 << 30)

/* Value of `--name value` or `--name=value` at argv[*i]; advances *i past it. NULL if absent. */
static const char *
flag_value(int argc, char **argv, int *i, const char *name, struct moe_diag *diag, bool *matched)
{
    size_t n = strlen(name);
    *matched = false;
    if (strncmp(argv[*i], name, n) != 0) {
        return NULL;
    }
    if (argv[*i][n] == '=') {
        *matched = true;
        return argv[*i] + n + 1;
    }
    if (argv[*i][n] != '\0') {
        return NULL;
    }
    *matched = true;
    if (*i + 1 >= argc) {
        (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s needs a value", name);
        moe_diag_source(diag, name);
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

static enum moe_status
parse_int_arg(const char *flag, const char *s, long lo, long hi, int *out, struct moe_diag *diag)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) {
        moe_diag_source(diag, flag);
        return moe_diag_set(diag, MOE_ERR_INVALID, "%s '%s': expected an integer in [%ld, %ld]",
                            flag, s, lo, hi);
    }
    *out = (int)v;
    return MOE_OK;
}

/* Collect the Megatron flag at argv[*i] (with its values) into margv. */
static enum moe_status collect_megatron(
    int argc, char **argv, int *i, const char **margv, int *margc, struct moe_diag *diag)
{
    const char *tok = argv[*i];
    if (*margc >= MOE_CLI_MAX_MEGATRON_ARGS - 1) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "too many arguments (over %d)",
                            MOE_CLI_MAX_MEGATRON_ARGS);
    }
    margv[(*margc)++] = tok;
    if (strchr(tok, '=') != NULL) {
        return MOE_OK;
    }
    int arity = 0;
    if (!moe_megatron_flag_known(tok, &arity)) {
        /* The Megatron parser names it and suggests the closest flag; take its value along so
         * the message is about the flag, not about a stray value. */
        if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
            margv[(*margc)++] = argv[++(*i)];
        }
        return MOE_OK;
    }
    if (arity == 1 && *i + 1 < argc) {
        margv[(*margc)++] = argv[++(*i)];
    } else if (arity < 0) {
        while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0 &&
               *margc < MOE_CLI_MAX_MEGATRON_ARGS - 1) {
            margv[(*margc)++] = argv[++(*i)];
        }
    }
    return MOE_OK;
}

enum moe_status moe_cli_parse_problem(int argc,
                                      char **argv,
                                      moe_cli_flag_fn extra,
                                      void *ctx,
                                      struct moe_cli_problem *p,
                                      FILE *notes,
                                      struct moe_diag *diag)
{
    memset(p, 0, sizeof(*p));
    p->imbalance_cv = MOE_IMBALANCE_DEFAULT_CV;
    const char *margv[MOE_CLI_MAX_MEGATRON_ARGS];
    int margc = 0;
    const char *model = NULL;
    const char *model_file = NULL;
    const char *cluster = NULL;
    const char *software = NULL;
    bool fp32 = false;
    for (int i = 1; i < argc; i++) {
        bool m = false;
        const char *v;
        if ((v = flag_value(argc, argv, &i, "--model", diag, &m)) != NULL || m) {
            if (v == NULL) {
                return MOE_ERR_INVALID;
            }
            model = v;
        } else if ((v = flag_value(argc, argv, &i, "--model-config", diag, &m)) != NULL || m) {
            if (v == NULL) {
                return MOE_ERR_INVALID;
            }
            model_file = v;
        } else if ((v = flag_value(argc, argv, &i, "--cluster", diag, &m)) != NULL || m) {
            if (v == NULL) {
                return MOE_ERR_INVALID;
            }
            cluster = v;
        } else if ((v = flag_value(argc, argv, &i, "--software", diag, &m)) != NULL || m) {
            if (v == NULL) {
                return MOE_ERR_INVALID;
            }
            software = v;
        } else if ((v = flag_value(argc, argv, &i, "--gpus", diag, &m)) != NULL || m) {
            if (v == NULL) {
                return MOE_ERR_INVALID;
            }
            MOE_TRY(parse_int_arg("--gpus", v, 1, 100000000, &p->num_gpus, diag));
        } else if ((v = flag_value(argc, argv, &i, "--moe-imbalance-cv", diag, &m)) != NULL || m) {
            if (v == NULL) {
                return MOE_ERR_INVALID;
            }
            char *end = NULL;
            p->imbalance_cv = strtod(v, &end);
            if (end == v || *end != '\0' || !(p->imbalance_cv >= 0.0) || p->imbalance_cv > 10.0) {
                moe_diag_source(diag, "--moe-imbalance-cv");
                return moe_diag_set(diag, MOE_ERR_INVALID,
                                    "--moe-imbalance-cv '%s': expected a number in [0, 10]", v);
            }
        } else if (strcmp(argv[i], "--json") == 0) {
            p->json = true;
        } else if (strcmp(argv[i], "--fp32-training") == 0) {
            fp32 = true;
        } else {
            int used = extra != NULL ? extra(ctx, argc, argv, i, diag) : 0;
            if (used < 0) {
                return MOE_ERR_INVALID;
            }
            if (used > 0) {
                i += used - 1;
                continue;
            }
            if (strncmp(argv[i], "--", 2) != 0) {
                return moe_diag_set(diag, MOE_ERR_INVALID,
                                    "unexpected argument '%s' (flags start with --)", argv[i]);
            }
            MOE_TRY(collect_megatron(argc, argv, &i, margv, &margc, diag));
        }
    }
    if (model != NULL && model_file != NULL) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "give either --model or --model-config, not both");
    }
    if (model != NULL) {
        MOE_TRY(moe_cfg_preset(model, &p->cfg, diag));
        (void)snprintf(p->model_source, sizeof(p->model_source), "%s", model);
        p->has_model = true;
    } else if (model_file != NULL) {
        MOE_TRY(moe_model_file_read(model_file, &p->cfg, diag));
        (void)snprintf(p->model_source, sizeof(p->model_source), "%s", model_file);
        p->has_model = true;
    } else {
        moe_cfg_init(&p->cfg);
    }
    moe_layout_init(&p->lay);
    moe_options_init(&p->opt);
    p->lay.seq_length = 0;
    MOE_TRY(moe_megatron_parse_args(margc, margv, &p->cfg, &p->lay, &p->opt, &p->mres, diag));
    p->opt.is_fp32_training = fp32;
    /* Expert load: real dropless routing is never perfectly balanced, so unless the run forces
     * balance or gives a factor, estimate it (--moe-imbalance auto), in predict as in plan. */
    if (!p->opt.force_load_balancing && !moe_megatron_is_set(&p->mres, MOE_MF_MOE_IMBALANCE)) {
        p->opt.moe_imbalance = 0.0;
    }
    if (!p->has_model && moe_megatron_is_set(&p->mres, MOE_MF_NUM_LAYERS) &&
        moe_megatron_is_set(&p->mres, MOE_MF_HIDDEN_SIZE)) {
        p->has_model = true;
        (void)snprintf(p->model_source, sizeof(p->model_source), "megatron flags");
        (void)snprintf(p->cfg.name, sizeof(p->cfg.name), "custom");
    }
    if (notes != NULL) {
        for (int k = 0; k < p->mres.num_ignored; k++) {
            const struct moe_megatron_ignored *ig = &p->mres.ignored[k];
            fprintf(notes, "note: ignoring %.*s (%s)\n", ig->flag_len, ig->flag, ig->reason);
        }
        if (p->mres.num_ignored_dropped > 0) {
            fprintf(notes, "note: ignoring %d more flags that do not affect performance\n",
                    p->mres.num_ignored_dropped);
        }
        if (p->opt.delay_wgrad_compute) {
            fprintf(notes, "note: --delay-wgrad-compute is accepted but not priced: the step is "
                           "predicted as without it (the model has no term for the delayed "
                           "weight-gradient GEMMs running beside the A2A overlap)\n");
        }
    }
    if (software != NULL && cluster == NULL) {
        moe_diag_source(diag, "--software");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--software names a release of a cluster's fitted figures: give "
                            "--cluster too");
    }
    if (cluster != NULL) {
        MOE_TRY(moe_cluster_load_release(cluster, software, &p->cl, diag));
        (void)snprintf(p->cluster_name, sizeof(p->cluster_name), "%s", cluster);
        p->has_cluster = true;
    }
    return MOE_OK;
}

void moe_cli_print_common_help(FILE *out)
{
    fprintf(
        out,
        "model (one of):\n"
        "  --model NAME            built-in preset (moefold models)\n"
        "  --model-config FILE     HuggingFace config.json or moefold model JSON\n"
        "  Megatron shape flags    --num-layers --hidden-size --ffn-hidden-size\n"
        "                          --num-attention-heads --group-query-attention\n"
        "                          --num-query-groups --kv-channels --num-experts\n"
        "                          --moe-ffn-hidden-size --moe-router-topk --moe-layer-freq\n"
        "                          --moe-shared-expert-intermediate-size\n"
        "                          --multi-latent-attention --q-lora-rank --kv-lora-rank\n"
        "                          --qk-head-dim --qk-pos-emb-head-dim --v-head-dim\n"
        "                          --mtp-num-layers --swiglu "
        "--untie-embeddings-and-output-weights\n"
        "                          --vocab-size --make-vocab-size-divisible-by --seq-length\n"
        "                          (also override a preset's fields)\n"
        "cluster:\n"
        "  --cluster NAME|FILE     cluster file (moefold clusters)\n"
        "  --software RELEASE      the cluster's fitted figures for this software release\n"
        "                          (default: the newest the file knows; 'shared': none)\n"
        "  --gpus N                GPUs: a multiple of the GPUs per node/tray, up to the cluster\n"
        "layout and options: Megatron-LM flags, e.g.\n"
        "  --tensor-model-parallel-size --pipeline-model-parallel-size\n"
        "  --num-layers-per-virtual-pipeline-stage --num-virtual-stages-per-pipeline-rank\n"
        "  --pipeline-model-parallel-layout --decoder-first-pipeline-num-layers\n"
        "  --decoder-last-pipeline-num-layers --context-parallel-size\n"
        "  --expert-model-parallel-size --expert-tensor-parallel-size --sequence-parallel\n"
        "  --micro-batch-size --global-batch-size --use-distributed-optimizer\n"
        "  --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap\n"
        "  --overlap-moe-expert-parallel-comm --delay-wgrad-compute\n"
        "  --moe-token-dispatcher-type {alltoall,allgather,flex}\n"
        "  --moe-flex-dispatcher-backend {deepep,hybridep} --moe-grouped-gemm\n"
        "  --moe-router-force-load-balancing --moe-expert-capacity-factor\n"
        "  --moe-router-num-groups --moe-router-group-topk\n"
        "  --recompute-granularity --recompute-method --recompute-num-layers\n"
        "  --recompute-modules {core_attn,moe_act,layernorm,mla_up_proj,mlp,moe,shared_experts}\n"
        "  --cpu-offloading-num-layers --fine-grained-activation-offloading\n"
        "  --offload-modules "
        "{attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm,expert_fc1,moe_act}\n"
        "  --optimizer-cpu-offload --fp8-format --fp8-recipe {tensorwise,delayed,blockwise,mxfp8}\n"
        "  --fp4-format --fp4-recipe nvfp4 --fp8-param-gather --use-precision-aware-optimizer\n"
        "  --main-grads-dtype --exp-avg-dtype --exp-avg-sq-dtype --cuda-graph-impl\n"
        "  --cuda-graph-modules\n"
        "  Flags that do not affect performance (learning rate, paths, logging) are accepted\n"
        "  and ignored with a note; an unknown flag is an error.\n"
        "moefold's own:\n"
        "  --moe-imbalance F|auto  busiest EP rank's load / mean (>= 1); auto = Monte Carlo\n"
        "  --moe-imbalance-cv X    per-expert popularity spread for auto (default %.2f)\n"
        "  --moe-hot-expert-replicas N   clone the N hottest experts onto other EP ranks\n"
        "  --json                  one JSON object on stdout\n",
        MOE_IMBALANCE_DEFAULT_CV);
}

enum moe_status moe_cli_resolve(struct moe_cli_problem *p, struct moe_diag *diag)
{
    if (!p->has_model) {
        return moe_diag_set(
            diag, MOE_ERR_INVALID,
            "no model: give --model NAME (see `moefold models`), --model-config "
            "FILE, or Megatron model-shape flags (--num-layers, --hidden-size, ...)");
    }
    /* Name the model in the message, not whatever file was read last (the cluster). */
    moe_diag_source(diag, p->model_source);
    MOE_TRY(moe_cfg_validate(&p->cfg, diag));
    moe_diag_source(diag, "");
    if (!p->has_cluster) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no cluster: give --cluster NAME (see `moefold clusters`) or a cluster "
                            "file");
    }
    if (p->num_gpus <= 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "give --gpus N (GPUs of %s to use)", p->cl.name);
    }
    MOE_TRY(moe_cluster_check_gpus(&p->cl, p->num_gpus, diag));
    p->lay.num_gpus = p->num_gpus;
    if (p->lay.seq_length <= 0) {
        p->lay.seq_length = p->cfg.seq_length;
    }
    int per_replica = p->lay.tp * p->lay.cp * p->lay.pp;
    if (p->lay.gbs <= 0 && per_replica > 0 && p->num_gpus % per_replica == 0) {
        /* Megatron's default; past INT_MAX it stays 0 and moe_layout_resolve says why. */
        long long gbs = (long long)p->lay.mbs * (p->num_gpus / per_replica);
        p->lay.gbs = gbs <= INT_MAX ? (int)gbs : 0;
    }
    return moe_layout_resolve(&p->cfg, &p->cl, &p->opt, &p->lay, diag);
}

/* moe_cli_load_stats of problem p at layout lay (p read only). */
static enum moe_status load_stats_at(const struct moe_cli_problem *p,
                                     const struct moe_layout *lay,
                                     struct moe_load_stats *out,
                                     bool *used,
                                     struct moe_diag *diag)
{
    *used = false;
    if (p->opt.force_load_balancing || p->opt.moe_imbalance != 0.0 || !moe_cfg_is_moe(&p->cfg)) {
        return MOE_OK;
    }
    MOE_TRY(moe_imbalance_auto(&p->cfg, lay, p->imbalance_cv, out, diag));
    *used = true;
    return MOE_OK;
}

enum moe_status moe_cli_load_stats(const struct moe_cli_problem *p,
                                   struct moe_load_stats *out,
                                   bool *used,
                                   struct moe_diag *diag)
{
    return load_stats_at(p, &p->lay, out, used, diag);
}

enum moe_status moe_cli_run_predict(const struct moe_cli_problem *p,
                                    const struct moe_load_stats *load,
                                    struct moe_prediction *out,
                                    struct moe_diag *diag)
{
    size_t need = moe_cost_workspace_bytes(&p->lay, MOE_SCHED_SIMULATE);
    if (need > MOE_CLI_MAX_SIM_BYTES) {
        return moe_diag_set(
            diag, MOE_ERR_INFEASIBLE,
            "simulating the pipeline schedule of %d micro-batches x %d chunks would "
            "take %.1f GiB (limit %.0f GiB); lower --global-batch-size or raise "
            "--micro-batch-size",
            p->lay.num_microbatches, p->lay.num_chunks, (double)need / GIB,
            (double)MOE_CLI_MAX_SIM_BYTES / GIB);
    }
    void *ws = malloc(need);
    if (ws == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM,
                            "out of memory for the schedule simulation (%zu bytes)", need);
    }
    enum moe_status st = moe_cost_predict(&p->cfg, &p->cl, &p->lay, &p->opt, load,
                                          MOE_SCHED_SIMULATE, ws, need, out, diag);
    free(ws);
    return st;
}

enum moe_status moe_cli_run_timeline(const struct moe_cli_problem *p,
                                     const struct moe_load_stats *load,
                                     struct moe_tl_event **events,
                                     size_t *num,
                                     double **stage_phase_s,
                                     struct moe_prediction *pred,
                                     struct moe_diag *diag)
{
    *events = NULL;
    *stage_phase_s = NULL;
    *num = 0;
    size_t need = moe_cost_workspace_bytes(&p->lay, MOE_SCHED_SIMULATE);
    size_t cap = moe_cost_timeline_max_events(&p->lay);
    size_t bytes = need + cap * sizeof(struct moe_tl_event);
    if (bytes > MOE_CLI_MAX_SIM_BYTES) {
        return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                            "the timeline of %d micro-batches x %d chunks would take %.1f GiB "
                            "(limit %.0f GiB); lower --global-batch-size or raise "
                            "--micro-batch-size",
                            p->lay.num_microbatches, p->lay.num_chunks, (double)bytes / GIB,
                            (double)MOE_CLI_MAX_SIM_BYTES / GIB);
    }
    void *ws = malloc(need);
    *events = malloc(cap * sizeof(struct moe_tl_event));
    *stage_phase_s = malloc((size_t)p->lay.pp * MOE_NUM_PHASES * sizeof(double));
    if (ws == NULL || *events == NULL || *stage_phase_s == NULL) {
        free(ws);
        free(*events);
        free(*stage_phase_s);
        *events = NULL;
        *stage_phase_s = NULL;
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the timeline (%zu bytes)",
                            bytes);
    }
    enum moe_status st = moe_cost_timeline(&p->cfg, &p->cl, &p->lay, &p->opt, load, ws, need,
                                           *events, cap, num, *stage_phase_s, pred, diag);
    free(ws);
    if (st != MOE_OK) {
        free(*events);
        free(*stage_phase_s);
        *events = NULL;
        *stage_phase_s = NULL;
    }
    return st;
}

void moe_cli_layout_str(const struct moe_layout *lay, char *buf, size_t len)
{
    (void)snprintf(buf, len, "TP%d CP%d PP%d VPP%d EP%d ETP%d EDP%d DP%d MBS%d GBS%d (m=%d)%s",
                   lay->tp, lay->cp, lay->pp, lay->vpp, lay->ep, lay->etp, lay->edp, lay->dp,
                   lay->mbs, lay->gbs, lay->num_microbatches, lay->sequence_parallel ? " SP" : "");
}

static void add_num(cJSON *o, const char *k, double v)
{
    cJSON_AddNumberToObject(o, k, v);
}

cJSON *moe_cli_prediction_json(const struct moe_cli_problem *p, const struct moe_prediction *pred)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "model", p->cfg.name);
    cJSON_AddStringToObject(o, "cluster", p->cl.name);
    add_num(o, "num_gpus", p->lay.num_gpus);
    add_num(o, "flops_per_step", pred->flops_per_step);
    add_num(o, "executed_flops_per_step", pred->executed_flops_per_step);
    add_num(o, "step_time_s", pred->step_time_s);
    add_num(o, "step_time_p50_s", pred->step_time_p50_s);
    add_num(o, "step_time_p99_s", pred->step_time_p99_s);
    add_num(o, "tokens_per_s_per_gpu", pred->tokens_per_s_per_gpu);
    add_num(o, "tflops_per_gpu", pred->tflops_per_gpu);
    add_num(o, "mfu", pred->mfu);
    cJSON_AddBoolToObject(o, "fits", pred->fits);
    add_num(o, "load_factor", pred->load_factor);
    add_num(o, "load_factor_p99", pred->load_factor_p99);
    cJSON_AddStringToObject(o, "bottleneck", moe_phase_name(pred->bottleneck));
    add_num(o, "worst_stage", pred->worst_stage);

    cJSON *mem = cJSON_AddObjectToObject(o, "memory_gib");
    add_num(mem, "weights", pred->mem.weights / GIB);
    add_num(mem, "grads", pred->mem.grads / GIB);
    add_num(mem, "optimizer", pred->mem.optimizer / GIB);
    add_num(mem, "activations", pred->mem.activations / GIB);
    add_num(mem, "buffers", pred->mem.buffers / GIB);
    add_num(mem, "total", pred->mem.total / GIB);
    add_num(mem, "capacity", pred->mem.capacity / GIB);
    add_num(mem, "host_offload", pred->mem.host_offload / GIB);

    const struct moe_phase_times *t = &pred->time;
    cJSON *ts = cJSON_AddObjectToObject(o, "time_s");
    add_num(ts, "compute", t->compute);
    add_num(ts, "expert_gemm", t->expert_gemm);
    add_num(ts, "dispatch", t->dispatch);
    add_num(ts, "combine", t->combine);
    add_num(ts, "tp_comm", t->tp_comm);
    add_num(ts, "cp_comm", t->cp_comm);
    add_num(ts, "ep_comm", t->ep_comm);
    add_num(ts, "pp_comm", t->pp_comm);
    add_num(ts, "dp_comm", t->dp_comm);
    add_num(ts, "pp_bubble", t->pp_bubble);
    add_num(ts, "optimizer", t->optimizer);
    add_num(ts, "host_overhead", t->host_overhead);
    add_num(ts, "exposed_comm", t->exposed_comm);
    const double w[MOE_NUM_PHASES] = {
        pred->wait.compute,   pred->wait.expert_gemm, pred->wait.dispatch,     pred->wait.combine,
        pred->wait.tp_comm,   pred->wait.cp_comm,     pred->wait.pp_comm,      pred->wait.dp_comm,
        pred->wait.pp_bubble, pred->wait.optimizer,   pred->wait.host_overhead};
    cJSON *ws = cJSON_AddObjectToObject(o, "wait_s");
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        add_num(ws, moe_phase_name((enum moe_phase)i), w[i]);
    }
    add_num(o, "critical_stage", pred->critical_stage);

    const struct moe_layout *lay = &p->lay;
    cJSON *l = cJSON_AddObjectToObject(o, "layout");
    add_num(l, "tp", lay->tp);
    add_num(l, "cp", lay->cp);
    add_num(l, "dp", lay->dp);
    add_num(l, "pp", lay->pp);
    add_num(l, "vpp", lay->vpp);
    add_num(l, "ep", lay->ep);
    add_num(l, "etp", lay->etp);
    add_num(l, "edp", lay->edp);
    add_num(l, "mbs", lay->mbs);
    add_num(l, "gbs", lay->gbs);
    add_num(l, "num_microbatches", lay->num_microbatches);
    add_num(l, "seq_length", lay->seq_length);
    char pps[1024];
    moe_layout_format_pp_string(lay, pps, (int)sizeof(pps));
    cJSON_AddStringToObject(l, "pipeline_layout", pps);

    cJSON *c = cJSON_AddObjectToObject(o, "comm");
    add_num(c, "ep_bytes_per_layer", pred->comm.ep_bytes);
    add_num(c, "ep_inter_domain_fraction", pred->comm.ep_inter_domain_fraction);
    add_num(c, "tp_bytes_per_layer", pred->comm.tp_bytes);
    add_num(c, "cp_bytes_per_layer", pred->comm.cp_bytes);
    add_num(c, "dp_bytes_per_step", pred->comm.dp_bytes);
    add_num(c, "pp_transfer_s", pred->comm.pp_s);
    return o;
}

enum moe_status moe_cli_emit_plan(const struct moe_cli_problem *p,
                                  const struct moe_prediction *pred,
                                  const char *path,
                                  struct moe_diag *diag)
{
    struct moe_plan *plan = calloc(1, sizeof(*plan));
    if (plan == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory writing %s", path);
    }
    moe_plan_init(plan);
    plan->model = p->cfg;
    (void)snprintf(plan->cluster, sizeof(plan->cluster), "%s", p->cl.name);
    plan->layout = p->lay;
    plan->options = p->opt;
    cJSON *pj = moe_cli_prediction_json(p, pred);
    enum moe_status st = pj == NULL ? moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory")
                                    : moe_plan_write(path, plan, pj, diag);
    cJSON_Delete(pj);
    free(plan);
    return st;
}

void moe_cli_error(const char *cmd, const struct moe_diag *diag)
{
    if (diag->source[0] != '\0' && strstr(diag->message, diag->source) == NULL) {
        fprintf(stderr, "moefold %s: %s: %s\n", cmd, diag->source, diag->message);
    } else {
        fprintf(stderr, "moefold %s: %s\n", cmd, diag->message);
    }
}

/* Expert-load statistics for a layout the search visits (the load cache's fn): called from the
 * search's threads at once; the problem is only read. */
static enum moe_status cli_load(void *ctx,
                                const struct moe_layout *lay,
                                struct moe_load_stats *out,
                                bool *used,
                                struct moe_diag *diag)
{
    return load_stats_at(ctx, lay, out, used, diag);
}

enum moe_status moe_cli_plan_request(const struct moe_cli_problem *p,
                                     const struct moe_plan_cli_opts *o,
                                     struct moe_plan_request *req,
                                     struct moe_plan_load_cache **lc,
                                     struct moe_cli_problem **scratch,
                                     double *margin_used,
                                     struct moe_diag *diag)
{
    *lc = NULL;
    *scratch = NULL;
    moe_plan_request_init(req);
    MOE_TRY(moe_plan_cli_request(&p->cfg, &p->cl, p->num_gpus, &p->lay, &p->opt, &p->mres, o, req,
                                 diag));
    /* Plans must fit with the memory margin: a plan whose upper memory bound exceeds the
     * capacity may not fit and is not ranked (--memory-margin 0 ranks it). */
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    enum moe_status st = moe_unc_load(p->cluster_name, u, diag);
    double margin =
        o->memory_margin >= 0.0 ? o->memory_margin : moe_unc_memory_margin(u, MOE_UNC_LEVEL);
    free(u);
    MOE_TRY(st);
    double cap = p->cl.gpu.hbm_gib * GIB / (1.0 + margin);
    if (req->max_memory_bytes <= 0.0 || cap < req->max_memory_bytes) {
        req->max_memory_bytes = cap;
    }
    if (margin_used != NULL) {
        *margin_used = margin;
    }
    if (!p->opt.force_load_balancing && p->opt.moe_imbalance == 0.0 && moe_cfg_is_moe(&p->cfg)) {
        *scratch = malloc(sizeof(**scratch));
        *lc = *scratch != NULL ? moe_plan_load_cache_create(cli_load, *scratch) : NULL;
        if (*lc == NULL) {
            return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
        }
        **scratch = *p;
        req->load_fn = moe_plan_load_cache_fn;
        req->load_ctx = *lc;
    }
    return MOE_OK;
}
