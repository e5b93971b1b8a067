/*
 * The planner's output (planner/report.h): text tables and JSON for the search result, and the
 * per-phase comparison of two plans that explains a ranking.
 */
#include "planner/report.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define GIB         1073741824.0
#define MAX_EXPLAIN 3 /* next plans plan K is compared with */

static const char *const rc_names[] = {"core_attn", "moe_act", "layernorm",     "mla_up_proj",
                                       "mlp",       "moe",     "shared_experts"};
static const char *const off_names[] = {"attn_norm", "qkv_linear", "core_attn", "attn_proj",
                                        "mlp_norm",  "expert_fc1", "moe_act"};
static const char *const graph_names[] = {"attn",           "mlp",           "moe", "moe_router",
                                          "moe_preprocess", "full_iteration"};

/* Append "name" entries of the set bits of mask, comma-separated, to buf[len] at *used. */
static void append_bits(
    char *buf, size_t len, size_t *used, unsigned mask, const char *const *names, int num_names)
{
    bool first = true;
    for (int i = 0; i < num_names; i++) {
        if (!(mask & (1u << i)) || *used >= len) {
            continue;
        }
        int n = snprintf(buf + *used, len - *used, "%s%s", first ? "" : ",", names[i]);
        *used += n > 0 ? (size_t)n : 0;
        first = false;
    }
    if (*used >= len && len > 0) {
        *used = len - 1;
    }
}

void moe_plan_recompute_str(const struct moe_options *opt, char *buf, size_t len)
{
    if (opt->recompute == MOE_RECOMPUTE_NONE) {
        (void)snprintf(buf, len, "none");
        return;
    }
    if (opt->recompute == MOE_RECOMPUTE_FULL) {
        (void)snprintf(buf, len, "full(%s,%d)", moe_recompute_method_name(opt->recompute_method),
                       opt->recompute_num_layers);
        return;
    }
    size_t used = (size_t)snprintf(buf, len, "selective(");
    append_bits(buf, len, &used, opt->recompute_modules, rc_names, 7);
    if (used + 1 < len) {
        (void)snprintf(buf + used, len - used, ")");
    }
}

void moe_plan_offload_str(const struct moe_options *opt, char *buf, size_t len)
{
    if (opt->cpu_offloading_num_layers > 0) {
        (void)snprintf(buf, len, "cpu(%d layers)", opt->cpu_offloading_num_layers);
        return;
    }
    if (!opt->fine_grained_offload) {
        (void)snprintf(buf, len, "none");
        return;
    }
    size_t used = (size_t)snprintf(buf, len, "modules(");
    append_bits(buf, len, &used, opt->offload_modules, off_names, 7);
    if (used + 1 < len) {
        (void)snprintf(buf + used, len - used, ")");
    }
}

void moe_plan_layout_str(const struct moe_layout *lay, char *buf, size_t len)
{
    int n = snprintf(buf, len, "TP%d CP%d PP%d VPP%d EP%d ETP%d DP%d EDP%d MBS%d%s", lay->tp,
                     lay->cp, lay->pp, lay->vpp, lay->ep, lay->etp, lay->dp, lay->edp, lay->mbs,
                     lay->sequence_parallel ? " SP" : "");
    size_t used = n > 0 ? (size_t)n : 0;
    if (used >= len || lay->pp <= 1) {
        return;
    }
    if (lay->has_custom_pp_layout) {
        char s[256];
        moe_layout_format_pp_string(lay, s, (int)sizeof(s));
        (void)snprintf(buf + used, len - used, " layout %s", s);
    } else if (lay->first_stage_layers > 0 || lay->last_stage_layers > 0) {
        (void)snprintf(buf + used, len - used, " first %d last %d", lay->first_stage_layers,
                       lay->last_stage_layers);
    }
}

void moe_plan_options_str(const struct moe_options *opt, char *buf, size_t len)
{
    char rc[160];
    char off[160];
    moe_plan_recompute_str(opt, rc, sizeof(rc));
    moe_plan_offload_str(opt, off, sizeof(off));
    char ovl[64];
    (void)snprintf(ovl, sizeof(ovl), "%s%s%s%s", opt->overlap_grad_reduce ? "grad," : "",
                   opt->overlap_param_gather ? "param," : "", opt->tp_comm_overlap ? "tp," : "",
                   opt->overlap_moe_ep_comm ? "ep," : "");
    size_t ol = strlen(ovl);
    if (ol > 0) {
        ovl[ol - 1] = '\0';
    } else {
        (void)snprintf(ovl, sizeof(ovl), "-");
    }
    char cg[128];
    if (opt->cuda_graph_impl == MOE_CG_NONE) {
        (void)snprintf(cg, sizeof(cg), "-");
    } else if (opt->cuda_graph_modules & MOE_CGM_FULL_ITERATION) {
        (void)snprintf(cg, sizeof(cg), "full");
    } else {
        size_t used = (size_t)snprintf(cg, sizeof(cg),
                                       "%s:", opt->cuda_graph_impl == MOE_CG_TE ? "te" : "local");
        append_bits(cg, sizeof(cg), &used, opt->cuda_graph_modules, graph_names, 6);
    }
    char optz[96] = "";
    if (opt->optimizer_cpu_offload) {
        (void)snprintf(optz, sizeof(optz), " opt-offload:%.2g", opt->optimizer_offload_fraction);
    }
    (void)snprintf(buf, len, "%s %s%s rc:%s off:%s%s%s%s ovl:%s cg:%s",
                   moe_recipe_name(opt->recipe), moe_dispatcher_name(opt->dispatcher),
                   opt->moe_grouped_gemm ? "" : " no-grouped-gemm", rc, off,
                   opt->use_distributed_optimizer ? " dist-opt" : "",
                   opt->fp8_param_gather ? " fp8-gather" : "", optz, ovl, cg);
}

double moe_plan_step_time(const struct moe_plan_candidate *c)
{
    return c->has_sim ? c->sim.step_time_s : c->pred.step_time_s;
}

static const struct moe_prediction *reported(const struct moe_plan_candidate *c)
{
    return c->has_sim ? &c->sim : &c->pred;
}

static void phase_values(const struct moe_prediction *p, double v[MOE_NUM_PHASES])
{
    const struct moe_phase_times *t = &p->time;
    const double a[MOE_NUM_PHASES] = {t->compute,   t->expert_gemm, t->dispatch,     t->combine,
                                      t->tp_comm,   t->cp_comm,     t->pp_comm,      t->dp_comm,
                                      t->pp_bubble, t->optimizer,   t->host_overhead};
    memcpy(v, a, sizeof(a));
}

/* ------------------------------------------------------------------------------------------ */
/* Knob differences                                                                             */

static int
add_line(char (*lines)[512], int n, int max, const char *name, const char *a, const char *b)
{
    if (n < max && strcmp(a, b) != 0) {
        (void)snprintf(lines[n], 512, "%.60s: %.200s -> %.200s", name, a, b);
        return n + 1;
    }
    return n;
}

static int add_int(char (*lines)[512], int n, int max, const char *name, int a, int b)
{
    char sa[24];
    char sb[24];
    (void)snprintf(sa, sizeof(sa), "%d", a);
    (void)snprintf(sb, sizeof(sb), "%d", b);
    return add_line(lines, n, max, name, sa, sb);
}

static int add_bool(char (*lines)[512], int n, int max, const char *name, bool a, bool b)
{
    return add_line(lines, n, max, name, a ? "on" : "off", b ? "on" : "off");
}

int moe_plan_knob_diffs(const struct moe_plan_candidate *a,
                        const struct moe_plan_candidate *b,
                        char (*lines)[512],
                        int max)
{
    const struct moe_layout *la = &a->lay;
    const struct moe_layout *lb = &b->lay;
    const struct moe_options *oa = &a->opt;
    const struct moe_options *ob = &b->opt;
    int n = 0;
    n = add_int(lines, n, max, "tp", la->tp, lb->tp);
    n = add_int(lines, n, max, "cp", la->cp, lb->cp);
    n = add_int(lines, n, max, "pp", la->pp, lb->pp);
    n = add_int(lines, n, max, "vpp", la->vpp, lb->vpp);
    n = add_int(lines, n, max, "ep", la->ep, lb->ep);
    n = add_int(lines, n, max, "etp", la->etp, lb->etp);
    n = add_int(lines, n, max, "mbs", la->mbs, lb->mbs);
    char pa[256];
    char pb[256];
    moe_layout_format_pp_string(la, pa, (int)sizeof(pa));
    moe_layout_format_pp_string(lb, pb, (int)sizeof(pb));
    n = add_line(lines, n, max, "pipeline layout", pa, pb);
    n = add_line(lines, n, max, "recipe", moe_recipe_name(oa->recipe), moe_recipe_name(ob->recipe));
    n = add_line(lines, n, max, "dispatcher", moe_dispatcher_name(oa->dispatcher),
                 moe_dispatcher_name(ob->dispatcher));
    char sa[160];
    char sb[160];
    moe_plan_recompute_str(oa, sa, sizeof(sa));
    moe_plan_recompute_str(ob, sb, sizeof(sb));
    n = add_line(lines, n, max, "recompute", sa, sb);
    moe_plan_offload_str(oa, sa, sizeof(sa));
    moe_plan_offload_str(ob, sb, sizeof(sb));
    n = add_line(lines, n, max, "activation offload", sa, sb);
    n = add_bool(lines, n, max, "distributed optimizer", oa->use_distributed_optimizer,
                 ob->use_distributed_optimizer);
    n = add_bool(lines, n, max, "optimizer CPU offload", oa->optimizer_cpu_offload,
                 ob->optimizer_cpu_offload);
    n = add_bool(lines, n, max, "fp8 param gather", oa->fp8_param_gather, ob->fp8_param_gather);
    n = add_bool(lines, n, max, "grouped GEMM", oa->moe_grouped_gemm, ob->moe_grouped_gemm);
    n = add_bool(lines, n, max, "EP overlap (1F1B)", oa->overlap_moe_ep_comm,
                 ob->overlap_moe_ep_comm);
    n = add_bool(lines, n, max, "TP comm overlap", oa->tp_comm_overlap, ob->tp_comm_overlap);
    n = add_bool(lines, n, max, "overlap grad reduce", oa->overlap_grad_reduce,
                 ob->overlap_grad_reduce);
    n = add_bool(lines, n, max, "overlap param gather", oa->overlap_param_gather,
                 ob->overlap_param_gather);
    char ga[64];
    char gb[64];
    (void)snprintf(ga, sizeof(ga), "%s/0x%x", moe_cuda_graph_impl_name(oa->cuda_graph_impl),
                   oa->cuda_graph_modules);
    (void)snprintf(gb, sizeof(gb), "%s/0x%x", moe_cuda_graph_impl_name(ob->cuda_graph_impl),
                   ob->cuda_graph_modules);
    n = add_line(lines, n, max, "CUDA graphs (impl/modules)", ga, gb);
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Text                                                                                          */

static void
print_header(FILE *out, const struct moe_plan_request *req, const struct moe_plan_result *res)
{
    fprintf(out, "# moefold plan: %s on %d x %s (%s), global batch %d x %d tokens\n",
            req->cfg->name, req->num_gpus, req->cl->name, req->cl->gpu.name, req->gbs,
            req->seq_length);
    fprintf(out,
            "# memory cap %.1f GiB per GPU; ranked by step time (closed-form schedule), the top %d "
            "re-ranked by the simulated schedule; one row per layout (its fastest options)\n",
            res->cap_bytes / GIB, req->top_k);
}

/* Plan c is within the tie band of plan best: moefold cannot tell them apart. */
static bool is_tie(const struct moe_plan_trust *t,
                   const struct moe_plan_candidate *best,
                   const struct moe_plan_candidate *c)
{
    return t != NULL && t->tie_band > 0.0 &&
           log(reported(c)->step_time_s / reported(best)->step_time_s) <= t->tie_band;
}

/* One table row; iv (NULL: no interval column) the 80% interval of its step time. */
static void
print_row(FILE *out, int rank, const struct moe_plan_candidate *c, bool tie, const double *iv)
{
    const struct moe_prediction *p = reported(c);
    char lay[320];
    char opt[400];
    moe_plan_layout_str(&c->lay, lay, sizeof(lay));
    moe_plan_options_str(&c->opt, opt, sizeof(opt));
    char r[16];
    (void)snprintf(r, sizeof(r), "%d%s", rank, tie ? "~" : "");
    char range[48] = "";
    if (iv != NULL) {
        char b[40];
        (void)snprintf(b, sizeof(b), "%.3f-%.3f", iv[0], iv[1]);
        (void)snprintf(range, sizeof(range), " %15s", b);
    }
    fprintf(out, "%5s %9.3f%s %10.0f %8.1f %6.1f %6.1f/%-5.0f %-13s %s | %s\n", r, p->step_time_s,
            range, p->tokens_per_s_per_gpu, p->tflops_per_gpu, 100.0 * p->mfu, p->mem.total / GIB,
            p->mem.capacity / GIB, moe_phase_name(p->bottleneck), lay, opt);
}

static void print_table_header(FILE *out, bool intervals)
{
    fprintf(out, "%5s %9s%s %10s %8s %6s %12s %-13s %s | %s\n", "rank", "step_s",
            intervals ? "      80%_step_s" : "", "tok/s/GPU", "TFLOPS", "MFU%", "mem_GiB",
            "bottleneck", "layout", "options");
}

void moe_plan_print_compare(FILE *out,
                            const char *name_a,
                            const struct moe_plan_candidate *a,
                            const char *name_b,
                            const struct moe_plan_candidate *b)
{
    const struct moe_prediction *pa = reported(a);
    const struct moe_prediction *pb = reported(b);
    double va[MOE_NUM_PHASES];
    double vb[MOE_NUM_PHASES];
    phase_values(pa, va);
    phase_values(pb, vb);
    fprintf(out, "# %s vs %s: step %.3f s vs %.3f s (%+.3f s, %+.1f%%)\n", name_a, name_b,
            pa->step_time_s, pb->step_time_s, pb->step_time_s - pa->step_time_s,
            100.0 * (pb->step_time_s - pa->step_time_s) / pa->step_time_s);
    fprintf(out, "%-14s %10s %10s %10s\n", "phase", name_a, name_b, "delta_s");
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        if (va[i] == 0.0 && vb[i] == 0.0) {
            continue;
        }
        fprintf(out, "%-14s %10.3f %10.3f %+10.3f\n", moe_phase_name((enum moe_phase)i), va[i],
                vb[i], vb[i] - va[i]);
    }
    fprintf(out, "%-14s %10.2f %10.2f %+10.2f GiB\n", "memory", pa->mem.total / GIB,
            pb->mem.total / GIB, (pb->mem.total - pa->mem.total) / GIB);
    char lines[32][512];
    int n = moe_plan_knob_diffs(a, b, lines, 32);
    for (int i = 0; i < n; i++) {
        fprintf(out, "  %s\n", lines[i]);
    }
}

static void print_summary(FILE *out, const struct moe_plan_result *res)
{
    const struct moe_plan_stats *st = &res->stats;
    double dominated =
        st->enumerated - st->pruned_memory - st->pruned_time - st->invalid - st->evaluated;
    fprintf(out,
            "# searched %.3g candidates (%ld layouts): %.3g pruned by memory bounds, %.3g by "
            "time bounds, %.3g invalid, %.3g dominated or equivalent, %.0f evaluated (+%.0f "
            "memory-only) in %.2f s on %d threads\n",
            st->enumerated, st->layouts, st->pruned_memory, st->pruned_time, st->invalid,
            dominated > 0.0 ? dominated : 0.0, st->evaluated, st->mem_evaluated, st->wall_s,
            st->threads);
    if (st->bound_violations > 0 || st->validity_mismatches > 0 || st->memory_mismatches > 0) {
        fprintf(out,
                "# WARNING: %ld predictions fell below a search bound, %ld plans failed a full "
                "validity check and %ld memory figures differed from the prediction's: the cost "
                "model changed under the planner's assumptions; rerun with --exhaustive and "
                "report it (tests/planner/test_search)\n",
                st->bound_violations, st->validity_mismatches, st->memory_mismatches);
    }
}

void moe_plan_print(FILE *out,
                    const struct moe_plan_request *req,
                    const struct moe_plan_result *res,
                    int explain_k)
{
    moe_plan_print_trusted(out, req, res, explain_k, NULL);
}

void moe_plan_print_trusted(FILE *out,
                            const struct moe_plan_request *req,
                            const struct moe_plan_result *res,
                            int explain_k,
                            const struct moe_plan_trust *t)
{
    print_header(out, req, res);
    if (t != NULL && t->memory_margin > 0.0) {
        fprintf(out,
                "# memory margin %.1f%%: a plan whose predicted memory x %.3f exceeds the %.1f GiB "
                "capacity may not fit and is not ranked (--memory-margin 0 ranks it)\n",
                100.0 * t->memory_margin, 1.0 + t->memory_margin, req->cl->gpu.hbm_gib);
    }
    if (t != NULL && t->ranking[0] != '\0') {
        fprintf(out, "# %s\n", t->ranking);
    }
    if (res->num_top == 0) {
        fprintf(out, "\nno plan fits in %.1f GiB per GPU.\n", res->cap_bytes / GIB);
        if (res->has_closest) {
            const struct moe_plan_candidate *c = &res->closest;
            char lay[320];
            char opt[400];
            moe_plan_layout_str(&c->lay, lay, sizeof(lay));
            moe_plan_options_str(&c->opt, opt, sizeof(opt));
            fprintf(out,
                    "closest: %s | %s needs %.2f GiB, %.2f GiB over (weights %.1f, grads %.1f, "
                    "optimizer %.1f, activations %.1f, buffers %.1f GiB)%s\n",
                    lay, opt, c->pred.mem.total / GIB, res->closest_excess_bytes / GIB,
                    c->pred.mem.weights / GIB, c->pred.mem.grads / GIB, c->pred.mem.optimizer / GIB,
                    c->pred.mem.activations / GIB, c->pred.mem.buffers / GIB,
                    c->pred.mem.total <= res->cap_bytes ? " (host memory for offload is short)"
                                                        : "");
            fprintf(out, "try more GPUs, a smaller micro-batch or sequence, or a larger cap.\n");
        }
        print_summary(out, res);
        return;
    }
    fprintf(out, "\n");
    bool intervals = t != NULL && t->step_interval != NULL && t->num_intervals == res->num_top;
    print_table_header(out, intervals);
    int ties = 0;
    for (int i = 0; i < res->num_top; i++) {
        bool tie = i > 0 && is_tie(t, &res->top[0], &res->top[i]);
        ties += tie;
        print_row(out, i + 1, &res->top[i], tie, intervals ? t->step_interval[i] : NULL);
    }
    if (intervals) {
        fprintf(out, "# 80%%_step_s, plan 1: %s\n", t->interval_basis);
    }
    if (t != NULL && t->tie_band > 0.0) {
        fprintf(
            out,
            "# ~ ties: %d plan%s within %.1f%% of plan 1, where moefold cannot tell plans apart "
            "(%s)\n",
            ties, ties == 1 ? "" : "s", 100.0 * (exp(t->tie_band) - 1.0), t->basis);
    } else if (t != NULL) {
        fprintf(out, "# %s\n", t->basis);
    }
    if (res->num_pareto > 0) {
        fprintf(
            out,
            "\n# Pareto front: no other fitting plan is both faster and smaller (up to %.2gx the "
            "fastest step, closed-form schedule)\n",
            req->pareto_window);
        print_table_header(out, false);
        for (int i = 0; i < res->num_pareto; i++) {
            print_row(out, i + 1, &res->pareto[i], false, NULL);
        }
    }
    if (explain_k >= 1 && explain_k <= res->num_top) {
        fprintf(out, "\n# why plan %d beats the next ones (per-phase deltas, seconds per step)\n",
                explain_k);
        for (int j = explain_k; j < res->num_top && j < explain_k + MAX_EXPLAIN; j++) {
            char na[16];
            char nb[16];
            (void)snprintf(na, sizeof(na), "plan%d", explain_k);
            (void)snprintf(nb, sizeof(nb), "plan%d", j + 1);
            moe_plan_print_compare(out, na, &res->top[explain_k - 1], nb, &res->top[j]);
        }
    }
    fprintf(out, "\n");
    print_summary(out, res);
}

/* ------------------------------------------------------------------------------------------ */
/* JSON                                                                                          */

static cJSON *layout_json(const struct moe_layout *lay)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    const struct {
        const char *k;
        int v;
    } f[] = {{"tp", lay->tp},
             {"cp", lay->cp},
             {"pp", lay->pp},
             {"vpp", lay->vpp},
             {"ep", lay->ep},
             {"etp", lay->etp},
             {"dp", lay->dp},
             {"edp", lay->edp},
             {"mbs", lay->mbs},
             {"gbs", lay->gbs},
             {"num_microbatches", lay->num_microbatches},
             {"seq_length", lay->seq_length},
             {"first_stage_layers", lay->first_stage_layers},
             {"last_stage_layers", lay->last_stage_layers}};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        cJSON_AddNumberToObject(o, f[i].k, f[i].v);
    }
    cJSON_AddBoolToObject(o, "sequence_parallel", lay->sequence_parallel);
    char s[256];
    moe_layout_format_pp_string(lay, s, (int)sizeof(s));
    cJSON_AddStringToObject(o, "pipeline_layout", s);
    cJSON_AddBoolToObject(o, "custom_pipeline_layout", lay->has_custom_pp_layout);
    return o;
}

static cJSON *options_json(const struct moe_options *opt)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    char s[200];
    cJSON_AddStringToObject(o, "recipe", moe_recipe_name(opt->recipe));
    cJSON_AddStringToObject(o, "dispatcher", moe_dispatcher_name(opt->dispatcher));
    moe_plan_recompute_str(opt, s, sizeof(s));
    cJSON_AddStringToObject(o, "recompute", s);
    moe_plan_offload_str(opt, s, sizeof(s));
    cJSON_AddStringToObject(o, "activation_offload", s);
    cJSON_AddBoolToObject(o, "distributed_optimizer", opt->use_distributed_optimizer);
    cJSON_AddBoolToObject(o, "optimizer_cpu_offload", opt->optimizer_cpu_offload);
    cJSON_AddNumberToObject(o, "optimizer_offload_fraction",
                            opt->optimizer_cpu_offload ? opt->optimizer_offload_fraction : 0.0);
    cJSON_AddBoolToObject(o, "fp8_param_gather", opt->fp8_param_gather);
    cJSON_AddBoolToObject(o, "moe_grouped_gemm", opt->moe_grouped_gemm);
    cJSON_AddBoolToObject(o, "overlap_grad_reduce", opt->overlap_grad_reduce);
    cJSON_AddBoolToObject(o, "overlap_param_gather", opt->overlap_param_gather);
    cJSON_AddBoolToObject(o, "tp_comm_overlap", opt->tp_comm_overlap);
    cJSON_AddBoolToObject(o, "overlap_moe_ep_comm", opt->overlap_moe_ep_comm);
    cJSON_AddBoolToObject(o, "delay_wgrad_compute", opt->delay_wgrad_compute);
    cJSON_AddStringToObject(o, "cuda_graph_impl", moe_cuda_graph_impl_name(opt->cuda_graph_impl));
    size_t used = 0;
    s[0] = '\0';
    append_bits(s, sizeof(s), &used, opt->cuda_graph_modules, graph_names, 6);
    cJSON_AddStringToObject(o, "cuda_graph_modules", s);
    return o;
}

static cJSON *phases_json(const struct moe_prediction *p)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    double v[MOE_NUM_PHASES];
    phase_values(p, v);
    for (int i = 0; i < MOE_NUM_PHASES; i++) {
        cJSON_AddNumberToObject(o, moe_phase_name((enum moe_phase)i), v[i]);
    }
    return o;
}

cJSON *moe_plan_candidate_json(const struct moe_plan_candidate *c)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    const struct moe_prediction *p = reported(c);
    cJSON_AddItemToObject(o, "layout", layout_json(&c->lay));
    cJSON_AddItemToObject(o, "options", options_json(&c->opt));
    cJSON_AddNumberToObject(o, "step_time_s", p->step_time_s);
    cJSON_AddNumberToObject(o, "step_time_closed_form_s", c->pred.step_time_s);
    cJSON_AddBoolToObject(o, "simulated", c->has_sim);
    cJSON_AddNumberToObject(o, "tokens_per_s_per_gpu", p->tokens_per_s_per_gpu);
    cJSON_AddNumberToObject(o, "tflops_per_gpu", p->tflops_per_gpu);
    cJSON_AddNumberToObject(o, "mfu", p->mfu);
    cJSON_AddNumberToObject(o, "memory_gib", p->mem.total / GIB);
    cJSON_AddNumberToObject(o, "capacity_gib", p->mem.capacity / GIB);
    cJSON_AddNumberToObject(o, "host_offload_gib", p->mem.host_offload / GIB);
    cJSON_AddBoolToObject(o, "fits", c->fits);
    cJSON_AddStringToObject(o, "bottleneck", moe_phase_name(p->bottleneck));
    cJSON_AddItemToObject(o, "phases_s", phases_json(p));
    return o;
}

cJSON *moe_plan_compare_json(const struct moe_plan_candidate *a, const struct moe_plan_candidate *b)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    const struct moe_prediction *pa = reported(a);
    const struct moe_prediction *pb = reported(b);
    double va[MOE_NUM_PHASES];
    double vb[MOE_NUM_PHASES];
    phase_values(pa, va);
    phase_values(pb, vb);
    cJSON_AddNumberToObject(o, "step_time_delta_s", pb->step_time_s - pa->step_time_s);
    cJSON_AddNumberToObject(o, "memory_delta_gib", (pb->mem.total - pa->mem.total) / GIB);
    cJSON *d = cJSON_AddObjectToObject(o, "phase_deltas_s");
    for (int i = 0; d != NULL && i < MOE_NUM_PHASES; i++) {
        cJSON_AddNumberToObject(d, moe_phase_name((enum moe_phase)i), vb[i] - va[i]);
    }
    cJSON *k = cJSON_AddArrayToObject(o, "knob_differences");
    char lines[32][512];
    int n = moe_plan_knob_diffs(a, b, lines, 32);
    for (int i = 0; k != NULL && i < n; i++) {
        cJSON_AddItemToArray(k, cJSON_CreateString(lines[i]));
    }
    return o;
}

static cJSON *stats_json(const struct moe_plan_stats *st)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    double dominated =
        st->enumerated - st->pruned_memory - st->pruned_time - st->invalid - st->evaluated;
    cJSON_AddNumberToObject(o, "enumerated", st->enumerated);
    cJSON_AddNumberToObject(o, "layouts", (double)st->layouts);
    cJSON_AddNumberToObject(o, "pruned_memory", st->pruned_memory);
    cJSON_AddNumberToObject(o, "pruned_time", st->pruned_time);
    cJSON_AddNumberToObject(o, "invalid", st->invalid);
    cJSON_AddNumberToObject(o, "dominated", dominated > 0.0 ? dominated : 0.0);
    cJSON_AddNumberToObject(o, "evaluated", st->evaluated);
    cJSON_AddNumberToObject(o, "memory_evaluated", st->mem_evaluated);
    cJSON_AddNumberToObject(o, "bound_violations", (double)st->bound_violations);
    cJSON_AddNumberToObject(o, "validity_mismatches", (double)st->validity_mismatches);
    cJSON_AddNumberToObject(o, "memory_mismatches", (double)st->memory_mismatches);
    cJSON_AddNumberToObject(o, "threads", st->threads);
    cJSON_AddNumberToObject(o, "wall_s", st->wall_s);
    return o;
}

cJSON *moe_plan_result_json(const struct moe_plan_request *req,
                            const struct moe_plan_result *res,
                            int explain_k)
{
    return moe_plan_result_json_trusted(req, res, explain_k, NULL);
}

cJSON *moe_plan_result_json_trusted(const struct moe_plan_request *req,
                                    const struct moe_plan_result *res,
                                    int explain_k,
                                    const struct moe_plan_trust *t)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "format", "moefold-plan-search");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddStringToObject(o, "model", req->cfg->name);
    cJSON_AddStringToObject(o, "cluster", req->cl->name);
    cJSON_AddNumberToObject(o, "num_gpus", req->num_gpus);
    cJSON_AddNumberToObject(o, "global_batch_size", req->gbs);
    cJSON_AddNumberToObject(o, "seq_length", req->seq_length);
    cJSON_AddNumberToObject(o, "memory_cap_gib", res->cap_bytes / GIB);
    cJSON_AddNumberToObject(o, "pareto_window", req->pareto_window);
    cJSON *top = cJSON_AddArrayToObject(o, "top");
    for (int i = 0; top != NULL && i < res->num_top; i++) {
        cJSON *c = moe_plan_candidate_json(&res->top[i]);
        cJSON_AddNumberToObject(c, "rank", i + 1);
        if (t != NULL) {
            cJSON_AddBoolToObject(c, "tie_with_best",
                                  i > 0 && is_tie(t, &res->top[0], &res->top[i]));
            if (t->step_interval != NULL && t->num_intervals == res->num_top) {
                cJSON *iv = cJSON_AddArrayToObject(c, "step_time_interval_s");
                cJSON_AddItemToArray(iv, cJSON_CreateNumber(t->step_interval[i][0]));
                cJSON_AddItemToArray(iv, cJSON_CreateNumber(t->step_interval[i][1]));
            }
        }
        cJSON_AddItemToArray(top, c);
    }
    if (t != NULL) {
        cJSON *tr = cJSON_AddObjectToObject(o, "trust");
        cJSON_AddNumberToObject(tr, "tie_band", exp(t->tie_band) - 1.0);
        cJSON_AddNumberToObject(tr, "memory_margin", t->memory_margin);
        cJSON_AddStringToObject(tr, "basis", t->basis);
        if (t->step_interval != NULL && t->num_intervals == res->num_top) {
            cJSON_AddNumberToObject(tr, "interval_level", t->interval_level);
            cJSON_AddStringToObject(tr, "interval_basis", t->interval_basis);
        }
        if (t->ranking[0] != '\0') {
            cJSON_AddStringToObject(o, "ranking", t->ranking);
        }
    }
    cJSON *par = cJSON_AddArrayToObject(o, "pareto");
    for (int i = 0; par != NULL && i < res->num_pareto; i++) {
        cJSON_AddItemToArray(par, moe_plan_candidate_json(&res->pareto[i]));
    }
    if (res->num_top == 0 && res->has_closest) {
        cJSON *c = moe_plan_candidate_json(&res->closest);
        cJSON_AddNumberToObject(c, "excess_gib", res->closest_excess_bytes / GIB);
        cJSON_AddItemToObject(o, "closest", c);
    } else {
        cJSON_AddNullToObject(o, "closest");
    }
    if (explain_k >= 1 && explain_k <= res->num_top) {
        cJSON *ex = cJSON_AddArrayToObject(o, "explain");
        for (int j = explain_k; ex != NULL && j < res->num_top && j < explain_k + MAX_EXPLAIN;
             j++) {
            cJSON *c = moe_plan_compare_json(&res->top[explain_k - 1], &res->top[j]);
            cJSON_AddNumberToObject(c, "plan", explain_k);
            cJSON_AddNumberToObject(c, "versus", j + 1);
            cJSON_AddItemToArray(ex, c);
        }
    }
    cJSON_AddItemToObject(o, "stats", stats_json(&res->stats));
    return o;
}
