/*
 * `moefold predict`: memory by category (worst pipeline stage), step time by phase, throughput and
 * MFU of one model x cluster x layout x options, from the analytic model with the event-simulated
 * pipeline schedule. --json prints one object with the names run.json uses.
 */
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/runs.h"
#include "cli/train_eval.h"
#include "cli/uncertainty.h"
#include "topologies/trace_file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

struct predict_flags {
    int help;
    const char *emit;             /* --emit FILE: write the plan with its prediction */
    const char *trace;            /* --trace FILE: the simulated step as a Chrome trace */
    double memory_margin;         /* --memory-margin F; < 0: the profile's default */
    struct moe_train_flags train; /* --train-tokens and the run flags */
};

/* How far to trust one prediction (cli/uncertainty.h). */
struct trust {
    struct moe_interval step;
    double tok_lo, tok_hi;
    struct moe_interval mem;
    double margin;     /* planning margin on memory, fraction */
    bool margin_given; /* --memory-margin */
    bool may_not_fit;  /* fits, but not with the margin */
};

static int predict_flag(void *ctx, int argc, char **argv, int i, struct moe_diag *diag)
{
    struct predict_flags *f = ctx;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
        f->help = 1;
        return 1;
    }
    int used = moe_train_flag(&f->train, argc, argv, i, diag);
    if (used != 0) {
        return used;
    }
    const char *names[2] = {"--emit", "--trace"};
    const char **dst[2] = {&f->emit, &f->trace};
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(names[k]);
        if (strcmp(argv[i], names[k]) == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                moe_diag_source(diag, names[k]);
                (void)moe_diag_set(diag, MOE_ERR_INVALID, "%s needs a file name", names[k]);
                return -1;
            }
            *dst[k] = argv[i + 1];
            return 2;
        }
        if (strncmp(argv[i], names[k], len) == 0 && argv[i][len] == '=') {
            *dst[k] = argv[i] + len + 1;
            return 1;
        }
    }
    if (strcmp(argv[i], "--memory-margin") == 0 || strncmp(argv[i], "--memory-margin=", 16) == 0) {
        const char *v = argv[i][15] == '=' ? argv[i] + 16 : (i + 1 < argc ? argv[i + 1] : NULL);
        char *end = NULL;
        f->memory_margin = v != NULL ? strtod(v, &end) : -1.0;
        if (v == NULL || end == v || *end != '\0' || !(f->memory_margin >= 0.0) ||
            f->memory_margin > 1.0) {
            moe_diag_source(diag, "--memory-margin");
            (void)moe_diag_set(diag, MOE_ERR_INVALID,
                               "--memory-margin '%s': expected a fraction in [0, 1] (0.05 = 5%%)",
                               v != NULL ? v : "");
            return -1;
        }
        return argv[i][15] == '=' ? 1 : 2;
    }
    return 0;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: moefold predict --model NAME|--model-config FILE --cluster NAME --gpus N\n"
        "                       [Megatron layout/option flags] [--json] [--emit PLAN]\n"
        "                       [--trace FILE.json] [--memory-margin F]\n\n"
        "  --emit FILE             write the layout, options and this prediction as a plan\n"
        "                          file (`moefold-train --plan FILE` runs it)\n"
        "  --trace FILE            write the event-simulated step as a Chrome trace (JSON;\n"
        "                          open it in ui.perfetto.dev or chrome://tracing): one\n"
        "                          process per pipeline stage, a compute track and EP, TP/CP,\n"
        "                          PP and DP stream tracks, one event per phase of each\n"
        "                          chunk's forward/backward of each micro-batch\n"
        "  --memory-margin F       memory a plan must leave free to count as fitting, as a\n"
        "                          fraction of its predicted total (default: the upper end of\n"
        "                          the memory model's 80%% interval from the cluster profile)\n\n");
    moe_train_flags_help(out, false);
    fprintf(out, "\n");
    moe_cli_print_common_help(out);
}

static void recompute_str(const struct moe_options *opt, char *buf, size_t len)
{
    static const char *const names[] = {"core_attn", "moe_act", "layernorm",     "mla_up_proj",
                                        "mlp",       "moe",     "shared_experts"};
    if (opt->recompute == MOE_RECOMPUTE_NONE) {
        (void)snprintf(buf, len, "none");
        return;
    }
    if (opt->recompute == MOE_RECOMPUTE_FULL) {
        (void)snprintf(buf, len, "full(%s, %d layers)",
                       opt->recompute_method == MOE_RECOMPUTE_BLOCK ? "block" : "uniform",
                       opt->recompute_num_layers);
        return;
    }
    size_t used = (size_t)snprintf(buf, len, "selective(");
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && used < len; i++) {
        if (opt->recompute_modules & (1u << i)) {
            used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                     buf[used - 1] == '(' ? "" : ",", names[i]);
        }
    }
    if (used < len) {
        (void)snprintf(buf + used, len - used, ")");
    }
}

/* --trace: the simulated step, one process per pipeline stage. */
static enum moe_status write_trace(const struct moe_cli_problem *p,
                                   const struct moe_load_stats *load,
                                   const char *path,
                                   struct moe_diag *diag)
{
    struct moe_tl_event *ev = NULL;
    double *stage_s = NULL;
    size_t n = 0;
    struct moe_prediction pred;
    MOE_TRY(moe_cli_run_timeline(p, load, &ev, &n, &stage_s, &pred, diag));
    struct moe_trace_writer w;
    moe_trace_init(&w);
    moe_trace_timeline(&w, ev, n, p->lay.pp, 0, "predicted", 0.0);
    enum moe_status st = moe_trace_write_file(&w, path, diag);
    moe_trace_fini(&w);
    free(ev);
    free(stage_s);
    return st;
}

/* Intervals of pred from the cluster profile (none when it holds no measured runs). */
static enum moe_status trust_of(const struct moe_cli_problem *p,
                                const struct moe_prediction *pr,
                                double margin_flag,
                                struct trust *t,
                                struct moe_diag *diag)
{
    memset(t, 0, sizeof(*t));
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    enum moe_status st = moe_unc_load(p->cluster_name, u, diag);
    if (st == MOE_OK) {
        moe_unc_step(u, moe_run_precision(p), moe_run_ep_span(p), NULL, pr->step_time_s,
                     MOE_UNC_LEVEL, &t->step);
        moe_unc_rate(&t->step, pr->tokens_per_s_per_gpu, &t->tok_lo, &t->tok_hi);
        moe_unc_memory(u, pr->mem.total, MOE_UNC_LEVEL, &t->mem);
        t->margin_given = margin_flag >= 0.0;
        t->margin = t->margin_given ? margin_flag : moe_unc_memory_margin(u, MOE_UNC_LEVEL);
        t->may_not_fit = pr->fits && pr->mem.total * (1.0 + t->margin) > pr->mem.capacity;
    }
    free(u);
    return st;
}

/* "fits", "may not fit (...)" or "DOES NOT FIT". */
static void fit_words(const struct moe_prediction *pr, const struct trust *t, char *buf, size_t len)
{
    if (!pr->fits) {
        (void)snprintf(buf, len, "DOES NOT FIT");
    } else if (t->may_not_fit) {
        (void)snprintf(buf, len,
                       "may not fit: %.2f GiB with the %.1f%% memory margin exceeds the capacity",
                       pr->mem.total * (1.0 + t->margin) / GIB, 100.0 * t->margin);
    } else {
        (void)snprintf(buf, len, "fits (with the %.1f%% memory margin)", 100.0 * t->margin);
    }
}

static cJSON *trust_json(const struct moe_prediction *pr, const struct trust *t)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    if (t->step.ok) {
        cJSON *a = cJSON_AddArrayToObject(o, "step_time_s");
        cJSON_AddItemToArray(a, cJSON_CreateNumber(t->step.lo));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(t->step.hi));
        cJSON *b = cJSON_AddArrayToObject(o, "tokens_per_s_per_gpu");
        cJSON_AddItemToArray(b, cJSON_CreateNumber(t->tok_lo));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(t->tok_hi));
        cJSON_AddNumberToObject(o, "runs", t->step.n);
    } else {
        cJSON_AddNullToObject(o, "step_time_s");
        cJSON_AddNullToObject(o, "tokens_per_s_per_gpu");
    }
    cJSON_AddNumberToObject(o, "level", MOE_UNC_LEVEL);
    cJSON_AddStringToObject(o, "basis", t->step.basis);
    if (t->mem.ok) {
        cJSON *m = cJSON_AddArrayToObject(o, "memory_gib");
        cJSON_AddItemToArray(m, cJSON_CreateNumber(t->mem.lo / GIB));
        cJSON_AddItemToArray(m, cJSON_CreateNumber(t->mem.hi / GIB));
        cJSON_AddStringToObject(o, "memory_basis", t->mem.basis);
    }
    cJSON_AddNumberToObject(o, "memory_margin", t->margin);
    cJSON_AddBoolToObject(o, "may_not_fit", t->may_not_fit);
    (void)pr;
    return o;
}

static void print_human(const struct moe_cli_problem *p,
                        const struct moe_prediction *pr,
                        bool auto_load,
                        const struct trust *t)
{
    char lays[256];
    char rc[160];
    moe_cli_layout_str(&p->lay, lays, sizeof(lays));
    recompute_str(&p->opt, rc, sizeof(rc));
    printf("# moefold predict: %s on %d x %s (%s)\n", p->cfg.name, p->lay.num_gpus, p->cl.name,
           p->cl.gpu.name);
    printf("# layout:  %s\n", lays);
    printf("# options: %s, dispatcher %s, recompute %s%s%s%s%s%s\n", moe_recipe_name(p->opt.recipe),
           moe_dispatcher_name(p->opt.dispatcher), rc,
           p->opt.use_distributed_optimizer ? ", dist-opt" : "",
           p->opt.overlap_grad_reduce ? ", overlap-grad" : "",
           p->opt.overlap_param_gather ? ", overlap-param" : "",
           p->opt.overlap_moe_ep_comm ? ", a2a-overlap" : "",
           p->opt.cuda_graph_impl != MOE_CG_NONE ? ", cuda-graphs" : "");
    if (moe_cfg_is_moe(&p->cfg)) {
        const double lb[3] = {p->opt.aux_loss_coeff, p->opt.seq_aux_loss_coeff,
                              p->opt.global_aux_loss_coeff};
        const char *names[3] = {"aux_loss", "seq_aux_loss", "global_aux_loss"};
        const char *group[3] = {"TP x CP", "TP x CP", "TP x DP x CP"};
        for (int i = 0; i < 3; i++) {
            if (lb[i] > 0.0) {
                printf("# load balancing: %s %g (its expert counts all-reduced over %s per MoE "
                       "layer forward, priced in dispatch)\n",
                       names[i], lb[i], group[i]);
            }
        }
    }
    if (p->cl.software[0] != '\0') {
        printf("# software: %s's fitted figures for release %s (--software)\n", p->cl.name,
               p->cl.software);
    }
    if (moe_cfg_is_moe(&p->cfg)) {
        printf("# expert load: %s (busiest EP rank at %.3f x mean)\n",
               p->opt.force_load_balancing ? "forced balance"
               : auto_load                 ? "Monte Carlo over the router's choices (auto)"
                                           : "the --moe-imbalance factor given",
               pr->load_factor);
    }
    printf("\n");
    printf("step time          %10.3f s   (p50 %.3f s, p99 %.3f s)\n", pr->step_time_s,
           pr->step_time_p50_s, pr->step_time_p99_s);
    if (t->step.ok) {
        printf("  %.0f%% interval   %10.3f - %.3f s\n", 100.0 * t->step.level, t->step.lo,
               t->step.hi);
    }
    printf("throughput         %10.0f tokens/s/GPU   %.1f TFLOPS/GPU   MFU %.1f%% of BF16 peak\n",
           pr->tokens_per_s_per_gpu, pr->tflops_per_gpu, 100.0 * pr->mfu);
    if (t->step.ok) {
        printf("  %.0f%% interval   %10.0f - %.0f tokens/s/GPU\n", 100.0 * t->step.level, t->tok_lo,
               t->tok_hi);
    }
    printf("# %s\n", t->step.basis);
    printf("model FLOPs/step   %10.4g        (executed incl. recompute %.4g)\n", pr->flops_per_step,
           pr->executed_flops_per_step);

    char fw[160];
    fit_words(pr, t, fw, sizeof(fw));
    printf("\nmemory per GPU (worst stage %d)  %.2f / %.2f GiB  %s\n", pr->worst_stage,
           pr->mem.total / GIB, pr->mem.capacity / GIB, fw);
    if (t->mem.ok) {
        printf("  %.0f%% interval %.2f - %.2f GiB (memory model sd %.1f%%)\n", 100.0 * t->mem.level,
               t->mem.lo / GIB, t->mem.hi / GIB, 100.0 * t->mem.rel_sd);
    }
    printf("  %-12s %9.2f GiB\n", "weights", pr->mem.weights / GIB);
    printf("  %-12s %9.2f GiB\n", "grads", pr->mem.grads / GIB);
    printf("  %-12s %9.2f GiB\n", "optimizer", pr->mem.optimizer / GIB);
    printf("  %-12s %9.2f GiB\n", "activations", pr->mem.activations / GIB);
    printf("  %-12s %9.2f GiB\n", "buffers", pr->mem.buffers / GIB);
    if (pr->mem.host_offload > 0.0) {
        printf("  %-12s %9.2f GiB (host memory)\n", "offloaded", pr->mem.host_offload / GIB);
    }
    printf("\ntime by phase (critical path; sums to the step)\n");
    const struct moe_phase_times *ph = &pr->time;
    const double v[MOE_NUM_PHASES] = {ph->compute,   ph->expert_gemm, ph->dispatch,     ph->combine,
                                      ph->tp_comm,   ph->cp_comm,     ph->pp_comm,      ph->dp_comm,
                                      ph->pp_bubble, ph->optimizer,   ph->host_overhead};
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        printf("  %-14s %9.3f s  %5.1f%%%s\n", moe_phase_name((enum moe_phase)i), v[i],
               100.0 * v[i] / pr->step_time_s, i == (int)pr->bottleneck ? "  <- bottleneck" : "");
    }
    printf("  %-14s %9.3f s  (ep_comm %.3f s)\n", "exposed_comm", ph->exposed_comm, ph->ep_comm);
    if (moe_cfg_is_moe(&p->cfg) && p->lay.ep > 1) {
        printf(
            "\nEP traffic per MoE layer and micro-batch: %.1f MB sent per GPU, %.0f%% leaves the "
            "NVLink domain\n",
            pr->comm.ep_bytes / 1e6, 100.0 * pr->comm.ep_inter_domain_fraction);
    }
}

/* --train-tokens: the whole run of this layout (cli/train_eval.h). */
static enum moe_status whole_run(const struct moe_cli_problem *p,
                                 const struct moe_prediction *pred,
                                 const struct moe_train_flags *f,
                                 struct moe_cluster_costs *costs,
                                 struct moe_train_eval *run,
                                 struct moe_diag *diag)
{
    MOE_TRY(moe_cluster_costs_load(p->cluster_name, costs, diag));
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    enum moe_status st = moe_unc_load(p->cluster_name, u, diag);
    if (st == MOE_OK) {
        st = moe_cli_train_eval(p, pred->step_time_s, f, costs, u, run, diag);
    }
    free(u);
    return st;
}

int moe_cli_predict(int argc, char **argv)
{
    struct predict_flags flags = {0, NULL, NULL, -1.0, {0}};
    moe_train_flags_init(&flags.train);
    struct moe_train_eval run;
    memset(&run, 0, sizeof(run));
    struct moe_cluster_costs costs;
    memset(&costs, 0, sizeof(costs));
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        fprintf(stderr, "moefold predict: out of memory\n");
        return 1;
    }
    struct moe_diag diag = {0};
    int rc = 1;
    if (moe_cli_parse_problem(argc, argv, predict_flag, &flags, p, stderr, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        rc = 2;
        goto out_free;
    }
    if (flags.help) {
        usage(stdout);
        rc = 0;
        goto out_free;
    }
    if (moe_train_flags_check(&flags.train, false, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        rc = 2;
        goto out_free;
    }
    if (moe_cli_resolve(p, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        goto out_free;
    }
    struct moe_load_stats load;
    bool auto_load = false;
    if (moe_cli_load_stats(p, &load, &auto_load, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        goto out_free;
    }
    struct moe_prediction pred;
    if (moe_cli_run_predict(p, auto_load ? &load : NULL, &pred, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        goto out_free;
    }
    if (flags.trace != NULL &&
        write_trace(p, auto_load ? &load : NULL, flags.trace, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        goto out_free;
    }
    if (flags.emit != NULL && moe_cli_emit_plan(p, &pred, flags.emit, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        goto out_free;
    }
    struct trust t;
    if (trust_of(p, &pred, flags.memory_margin, &t, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        goto out_free;
    }
    if (flags.train.has_tokens &&
        whole_run(p, &pred, &flags.train, &costs, &run, &diag) != MOE_OK) {
        moe_cli_error("predict", &diag);
        goto out_free;
    }
    struct moe_train_report rep;
    moe_cli_train_report(&run, &flags.train, &costs, &rep);
    if (p->json) {
        cJSON *o = moe_cli_prediction_json(p, &pred);
        if (o != NULL) {
            cJSON_AddItemToObject(o, "uncertainty", trust_json(&pred, &t));
            cJSON_AddStringToObject(o, "software", p->cl.software);
            if (flags.train.has_tokens) {
                cJSON_AddItemToObject(o, "run", moe_train_json(&rep));
            } else {
                cJSON_AddNullToObject(o, "run");
            }
        }
        char *s = o != NULL ? cJSON_Print(o) : NULL;
        if (s == NULL) {
            fprintf(stderr, "moefold predict: out of memory\n");
            cJSON_Delete(o);
            goto out_free;
        }
        puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        print_human(p, &pred, auto_load, &t);
        if (flags.train.has_tokens) {
            moe_train_print(stdout, &rep);
        }
    }
    rc = 0;
out_free:
    moe_cli_train_eval_fini(&run);
    free(p);
    return rc;
}
