/*
 * `moefold plan --gpus-max N`: one search per GPU count, compared by the run's objective
 * (cli/plan_gpus.h).
 */
#include "cli/plan_gpus.h"

#include "cli/train_eval.h"
#include "planner/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SECONDS_PER_DAY 86400.0

static double now_s(void)
{
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The fastest dense peak the GPU has at any precision (TFLOPS). */
static double peak_tflops(const struct moe_cluster *cl)
{
    double peak = 0.0;
    for (int m = 0; m < MOE_NUM_MATH; m++) {
        peak = cl->gpu.peak_tflops[m] > peak ? cl->gpu.peak_tflops[m] : peak;
    }
    return peak;
}

static enum moe_status check_range(const struct moe_cli_problem *p,
                                   int gpus_min,
                                   int gpus_step,
                                   int gpus_max,
                                   struct moe_diag *diag)
{
    int node = p->cl.gpus_per_node;
    moe_diag_source(diag, "--gpus-max");
    if (gpus_step % node != 0 || gpus_min % node != 0) {
        moe_diag_source(diag, gpus_step % node != 0 ? "--gpus-step" : "--gpus-min");
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--gpus-min %d and --gpus-step %d must be multiples of %s's %d GPUs "
                            "per node",
                            gpus_min, gpus_step, p->cl.name, node);
    }
    if (gpus_max < gpus_min) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "--gpus-max %d is below --gpus-min %d", gpus_max,
                            gpus_min);
    }
    if (gpus_max > p->cl.max_gpus) {
        return moe_diag_set(diag, MOE_ERR_INVALID, "--gpus-max %d is over %s's %d GPUs", gpus_max,
                            p->cl.name, p->cl.max_gpus);
    }
    long counts = (long)(gpus_max - gpus_min) / gpus_step + 1;
    if (counts > MOE_PLAN_GPUS_MAX_COUNTS) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "--gpus-max %d in steps of %d from %d is %ld GPU counts to search "
                            "(at most %d): give a larger --gpus-step or --gpus-min",
                            gpus_max, gpus_step, gpus_min, counts, MOE_PLAN_GPUS_MAX_COUNTS);
    }
    moe_diag_source(diag, "");
    return MOE_OK;
}

/* Search one GPU count and evaluate the runs of its MOE_PLAN_GPUS_TOP fastest plans into pt: the
 * best by the objective among those that can run the batch ramp (at one count every objective
 * orders plans as their run's days do, so no deadline filter is needed here). */
static enum moe_status search_count(struct moe_cli_problem *q,
                                    const struct moe_plan_cli_opts *o,
                                    const struct moe_train_flags *f,
                                    const struct moe_cluster_costs *c,
                                    struct moe_plan_gpus_point *pt,
                                    struct moe_diag *diag)
{
    struct moe_plan_request *req = calloc(1, sizeof(*req));
    struct moe_plan_load_cache *lc = NULL;
    struct moe_cli_problem *scratch = NULL;
    struct moe_plan_result res;
    memset(&res, 0, sizeof(res));
    struct moe_train_eval evals[MOE_PLAN_GPUS_TOP];
    int num_evals = 0;
    enum moe_status st = req != NULL ? moe_cli_plan_request(q, o, req, &lc, &scratch, NULL, diag)
                                     : moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    if (st == MOE_OK) {
        req->top_k = MOE_PLAN_GPUS_TOP;
        req->pareto_window = 0.0;
        st = moe_plan_search(req, &res, diag);
    }
    if (st == MOE_ERR_INFEASIBLE) { /* no valid layout at this count: nothing to run */
        pt->state = MOE_PG_NO_FIT;
        st = MOE_OK;
    } else if (st == MOE_OK && res.num_top == 0) {
        pt->state = MOE_PG_NO_FIT;
    } else if (st == MOE_OK) {
        struct moe_train_flags any = *f;
        any.deadline_days = 0.0;
        struct moe_train_eval missed;
        int skipped = 0;
        st = moe_cli_train_rank(q, &any, c, &res, evals, &num_evals, &missed, &skipped, pt->reason,
                                sizeof(pt->reason), diag);
        moe_cli_train_eval_fini(&missed);
        if (st == MOE_ERR_INFEASIBLE) { /* none of them can run the ramp */
            pt->state = MOE_PG_RAMP;
            (void)snprintf(pt->reason, sizeof(pt->reason), "%.199s", diag->message);
            st = MOE_OK;
        } else if (st == MOE_OK && num_evals > 0) {
            pt->state = MOE_PG_SEARCHED;
            pt->best = res.top[0];
            pt->totals = evals[0].totals;
            pt->meets_deadline =
                f->deadline_days <= 0.0 || pt->totals.days.value <= f->deadline_days;
        }
    }
    for (int i = 0; i < num_evals; i++) {
        moe_cli_train_eval_fini(&evals[i]);
    }
    moe_plan_result_free(&res);
    moe_plan_load_cache_destroy(lc);
    free(scratch);
    free(req);
    return st;
}

/* a is better than b under the objective (ties: fewer GPU-hours, then fewer GPUs). */
static bool better(const struct moe_plan_gpus_point *a,
                   const struct moe_plan_gpus_point *b,
                   enum moe_train_objective obj)
{
    double va = moe_train_objective_value(&a->totals, obj);
    double vb = moe_train_objective_value(&b->totals, obj);
    if (va != vb) {
        return va < vb;
    }
    if (a->totals.gpu_hours.value != b->totals.gpu_hours.value) {
        return a->totals.gpu_hours.value < b->totals.gpu_hours.value;
    }
    return a->num_gpus < b->num_gpus;
}

enum moe_status moe_cli_plan_gpus(const struct moe_cli_problem *p,
                                  const struct moe_plan_cli_opts *o,
                                  const struct moe_train_flags *f,
                                  const struct moe_cluster_costs *c,
                                  int gpus_min,
                                  int gpus_step,
                                  int gpus_max,
                                  struct moe_plan_gpus *out,
                                  struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    out->best = -1;
    out->fastest = -1;
    MOE_TRY(check_range(p, gpus_min, gpus_step, gpus_max, diag));
    double t0 = now_s();
    int n = (gpus_max - gpus_min) / gpus_step + 1;
    out->points = calloc((size_t)n, sizeof(*out->points));
    struct moe_cli_problem *q = malloc(sizeof(*q));
    enum moe_status st = out->points != NULL && q != NULL
                             ? MOE_OK
                             : moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    double flops_per_token = 0.0;
    double peak = peak_tflops(&p->cl) * 1e12;
    for (int i = 0; st == MOE_OK && i < n; i++) {
        struct moe_plan_gpus_point *pt = &out->points[i];
        pt->num_gpus = gpus_min + (n - 1 - i) * gpus_step;
        out->num_points = i + 1;
        if (flops_per_token > 0.0 && peak > 0.0) {
            pt->bound_days =
                f->train_tokens * flops_per_token / (pt->num_gpus * peak) / SECONDS_PER_DAY;
        }
        if (f->deadline_days > 0.0 && pt->bound_days > f->deadline_days) {
            pt->state = MOE_PG_BOUND;
            continue;
        }
        *q = *p;
        q->num_gpus = pt->num_gpus;
        st = search_count(q, o, f, c, pt, diag);
        if (st != MOE_OK) {
            char msg[sizeof(diag->message)];
            (void)snprintf(msg, sizeof(msg), "%s", diag->message);
            (void)moe_diag_set(diag, st, "%d GPUs: %s", pt->num_gpus, msg);
            break;
        }
        if (pt->state != MOE_PG_SEARCHED) {
            continue;
        }
        const struct moe_prediction *pr = pt->best.has_sim ? &pt->best.sim : &pt->best.pred;
        if (flops_per_token <= 0.0) {
            flops_per_token =
                pr->flops_per_step / ((double)pt->best.lay.gbs * pt->best.lay.seq_length);
        }
        if (out->fastest < 0 ||
            pt->totals.days.value < out->points[out->fastest].totals.days.value) {
            out->fastest = i;
        }
        if (pt->meets_deadline &&
            (out->best < 0 || better(pt, &out->points[out->best], f->objective))) {
            out->best = i;
        }
    }
    out->wall_s = now_s() - t0;
    free(q);
    return st;
}

void moe_cli_plan_gpus_free(struct moe_plan_gpus *g)
{
    free(g->points);
    memset(g, 0, sizeof(*g));
}

void moe_cli_plan_gpus_print(FILE *out,
                             const struct moe_plan_gpus *g,
                             const struct moe_train_flags *f)
{
    char tok[32];
    moe_train_tokens_str(f->train_tokens, tok, sizeof(tok));
    fprintf(out, "# GPU counts searched for a run of %s tokens: best plan per count, objective %s",
            tok, moe_train_objective_name(f->objective));
    if (f->deadline_days > 0.0) {
        fprintf(out, ", deadline %.4g days", f->deadline_days);
    }
    fprintf(out, " (%d counts in %.1f s)\n", g->num_points, g->wall_s);
    fprintf(out, "%6s %9s %9s %17s %11s %10s %12s  %s\n", "gpus", "step_s", "days", "80%_days",
            "GPU_hours", "MWh", "cost_USD", "layout | options");
    for (int i = 0; i < g->num_points; i++) {
        const struct moe_plan_gpus_point *pt = &g->points[i];
        char mark = i == g->best ? '*' : ' ';
        if (pt->state == MOE_PG_NO_FIT) {
            fprintf(out, "%5d%c  no plan fits\n", pt->num_gpus, mark);
            continue;
        }
        if (pt->state == MOE_PG_RAMP) {
            fprintf(out, "%5d%c  no fast plan can run the batch ramp: %s\n", pt->num_gpus, mark,
                    pt->reason);
            continue;
        }
        if (pt->state == MOE_PG_BOUND) {
            fprintf(out, "%5d%c  not searched: at least %.1f days even at the GPUs' peak\n",
                    pt->num_gpus, mark, pt->bound_days);
            continue;
        }
        const struct moe_train_totals *t = &pt->totals;
        char iv[40] = "-";
        if (t->has_interval) {
            (void)snprintf(iv, sizeof(iv), "%.1f-%.1f", t->days.lo, t->days.hi);
        }
        char mwh[24] = "-";
        char cost[24] = "-";
        if (t->has_energy) {
            (void)snprintf(mwh, sizeof(mwh), "%.0f", t->energy_mwh.value);
        }
        if (t->has_cost) {
            (void)snprintf(cost, sizeof(cost), "%.4g", t->cost_usd.value);
        }
        char lay[320];
        char opt[400];
        moe_plan_layout_str(&pt->best.lay, lay, sizeof(lay));
        moe_plan_options_str(&pt->best.opt, opt, sizeof(opt));
        fprintf(out, "%5d%c %9.3f %9.2f %17s %11.4g %10s %12s  %s | %s%s\n", pt->num_gpus, mark,
                moe_plan_step_time(&pt->best), t->days.value, iv, t->gpu_hours.value, mwh, cost,
                lay, opt, pt->meets_deadline ? "" : "  (misses the deadline)");
    }
    if (g->best >= 0) {
        fprintf(out, "# * best: %d GPUs; its plans follow\n", g->points[g->best].num_gpus);
    }
}

cJSON *moe_cli_plan_gpus_json(const struct moe_plan_gpus *g, const struct moe_train_flags *f)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "objective", moe_train_objective_name(f->objective));
    if (f->deadline_days > 0.0) {
        cJSON_AddNumberToObject(o, "deadline_days", f->deadline_days);
    } else {
        cJSON_AddNullToObject(o, "deadline_days");
    }
    if (g->best >= 0) {
        cJSON_AddNumberToObject(o, "best_num_gpus", g->points[g->best].num_gpus);
    } else {
        cJSON_AddNullToObject(o, "best_num_gpus");
    }
    cJSON_AddNumberToObject(o, "wall_s", g->wall_s);
    static const char *const states[] = {"searched", "no_fit", "deadline_bound", "ramp"};
    cJSON *pts = cJSON_AddArrayToObject(o, "points");
    for (int i = 0; pts != NULL && i < g->num_points; i++) {
        const struct moe_plan_gpus_point *pt = &g->points[i];
        cJSON *j = cJSON_CreateObject();
        if (j == NULL) {
            break;
        }
        cJSON_AddNumberToObject(j, "num_gpus", pt->num_gpus);
        cJSON_AddStringToObject(j, "state", states[pt->state]);
        cJSON_AddNumberToObject(j, "bound_days", pt->bound_days);
        if (pt->state == MOE_PG_RAMP) {
            cJSON_AddStringToObject(j, "reason", pt->reason);
        }
        if (pt->state == MOE_PG_SEARCHED) {
            const struct moe_train_totals *t = &pt->totals;
            cJSON_AddNumberToObject(j, "step_time_s", moe_plan_step_time(&pt->best));
            cJSON_AddNumberToObject(j, "days", t->days.value);
            cJSON_AddNumberToObject(j, "gpu_hours", t->gpu_hours.value);
            if (t->has_energy) {
                cJSON_AddNumberToObject(j, "energy_mwh", t->energy_mwh.value);
            } else {
                cJSON_AddNullToObject(j, "energy_mwh");
            }
            if (t->has_cost) {
                cJSON_AddNumberToObject(j, "cost_usd", t->cost_usd.value);
            } else {
                cJSON_AddNullToObject(j, "cost_usd");
            }
            cJSON_AddBoolToObject(j, "meets_deadline", pt->meets_deadline);
            cJSON_AddItemToObject(j, "plan", moe_plan_candidate_json(&pt->best));
        }
        cJSON_AddItemToArray(pts, j);
    }
    return o;
}
