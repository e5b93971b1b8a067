/*
 * `moefold predict`: memory by category (worst pipeline stage), step time by phase, throughput and
 * MFU of one model x cluster x layout x options, from the analytic model with the event-simulated
 * pipeline schedule. --json prints one object with the names run.json uses.
 */
#include "cli/commands.h"
#include "cli/common.h"
#include "topologies/trace_file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

struct predict_flags {
    int help;
    const char *emit;  /* --emit FILE: write the plan with its prediction */
    const char *trace; /* --trace FILE: the simulated step as a Chrome trace */
};

static int predict_flag(void *ctx, int argc, char **argv, int i, struct moe_diag *diag)
{
    struct predict_flags *f = ctx;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
        f->help = 1;
        return 1;
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
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: moefold predict --model NAME|--model-config FILE --cluster NAME --gpus N\n"
            "                       [Megatron layout/option flags] [--json] [--emit PLAN]\n"
            "                       [--trace FILE.json]\n\n"
            "  --emit FILE             write the layout, options and this prediction as a plan\n"
            "                          file (`moefold-train --plan FILE` runs it)\n"
            "  --trace FILE            write the event-simulated step as a Chrome trace (JSON;\n"
            "                          open it in ui.perfetto.dev or chrome://tracing): one\n"
            "                          process per pipeline stage, a compute track and EP, TP/CP,\n"
            "                          PP and DP stream tracks, one event per phase of each\n"
            "                          chunk's forward/backward of each micro-batch\n\n");
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

static void
print_human(const struct moe_cli_problem *p, const struct moe_prediction *pr, bool auto_load)
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
        printf("# expert load: %s (busiest EP rank at %.3f x mean)\n",
               p->opt.force_load_balancing ? "forced balance"
               : auto_load                 ? "Monte Carlo (auto)"
                                           : "given factor",
               pr->load_factor);
    }
    printf("\n");
    printf("step time          %10.3f s   (p50 %.3f s, p99 %.3f s)\n", pr->step_time_s,
           pr->step_time_p50_s, pr->step_time_p99_s);
    printf("throughput         %10.0f tokens/s/GPU   %.1f TFLOPS/GPU   MFU %.1f%% of BF16 peak\n",
           pr->tokens_per_s_per_gpu, pr->tflops_per_gpu, 100.0 * pr->mfu);
    printf("model FLOPs/step   %10.4g        (executed incl. recompute %.4g)\n\n",
           pr->flops_per_step, pr->executed_flops_per_step);

    printf("memory per GPU (worst stage %d)  %.2f / %.2f GiB  %s\n", pr->worst_stage,
           pr->mem.total / GIB, pr->mem.capacity / GIB, pr->fits ? "fits" : "DOES NOT FIT");
    printf("  %-12s %9.2f GiB\n", "weights", pr->mem.weights / GIB);
    printf("  %-12s %9.2f GiB\n", "grads", pr->mem.grads / GIB);
    printf("  %-12s %9.2f GiB\n", "optimizer", pr->mem.optimizer / GIB);
    printf("  %-12s %9.2f GiB\n", "activations", pr->mem.activations / GIB);
    printf("  %-12s %9.2f GiB\n", "buffers", pr->mem.buffers / GIB);
    if (pr->mem.host_offload > 0.0) {
        printf("  %-12s %9.2f GiB (host memory)\n", "offloaded", pr->mem.host_offload / GIB);
    }
    printf("\ntime by phase (critical path; sums to the step)\n");
    const struct moe_phase_times *t = &pr->time;
    const double v[MOE_NUM_PHASES] = {t->compute,   t->expert_gemm, t->dispatch,     t->combine,
                                      t->tp_comm,   t->cp_comm,     t->pp_comm,      t->dp_comm,
                                      t->pp_bubble, t->optimizer,   t->host_overhead};
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        printf("  %-14s %9.3f s  %5.1f%%%s\n", moe_phase_name((enum moe_phase)i), v[i],
               100.0 * v[i] / pr->step_time_s, i == (int)pr->bottleneck ? "  <- bottleneck" : "");
    }
    printf("  %-14s %9.3f s  (ep_comm %.3f s)\n", "exposed_comm", t->exposed_comm, t->ep_comm);
    if (moe_cfg_is_moe(&p->cfg) && p->lay.ep > 1) {
        printf(
            "\nEP traffic per MoE layer and micro-batch: %.1f MB sent per GPU, %.0f%% leaves the "
            "NVLink domain\n",
            pr->comm.ep_bytes / 1e6, 100.0 * pr->comm.ep_inter_domain_fraction);
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

int moe_cli_predict(int argc, char **argv)
{
    struct predict_flags flags = {0, NULL, NULL};
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
    if (p->json) {
        cJSON *o = moe_cli_prediction_json(p, &pred);
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
        print_human(p, &pred, auto_load);
    }
    rc = 0;
out_free:
    free(p);
    return rc;
}
