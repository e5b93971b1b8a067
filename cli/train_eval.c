/*
 * A whole training run for one plan, through the predictor (cli/train_eval.h).
 */
#include "cli/train_eval.h"

#include "cli/runs.h"
#include "planner/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The plan's layout at a smaller global batch: scratch problem q, a copy of p per call. */
struct ramp_ctx {
    const struct moe_cli_problem *p;
    struct moe_cli_problem *q;
};

/* q = p at global batch `batch`, resolved (Megatron's rules at that batch). */
static enum moe_status at_batch(const struct moe_cli_problem *p,
                                struct moe_cli_problem *q,
                                long long batch,
                                struct moe_diag *diag)
{
    *q = *p;
    q->lay.gbs = (int)batch;
    enum moe_status st = moe_layout_resolve(&q->cfg, &q->cl, &q->opt, &q->lay, diag);
    if (st != MOE_OK) {
        char msg[sizeof(diag->message)];
        (void)snprintf(msg, sizeof(msg), "%s", diag->message);
        moe_diag_source(diag, "--rampup-batch-size");
        (void)moe_diag_set(diag, st, "ramp batch %lld: %s", batch, msg);
    }
    return st;
}

static enum moe_status ramp_step(void *ctx, long long batch, double *step_s, struct moe_diag *diag)
{
    struct ramp_ctx *rc = ctx;
    MOE_TRY(at_batch(rc->p, rc->q, batch, diag));
    struct moe_load_stats load;
    bool used = false;
    MOE_TRY(moe_cli_load_stats(rc->q, &load, &used, diag));
    struct moe_prediction pred;
    MOE_TRY(moe_cli_run_predict(rc->q, used ? &load : NULL, &pred, diag));
    *step_s = pred.step_time_s;
    return MOE_OK;
}

/* Every distinct ramp batch must pass Megatron's layout rules, predicted or interpolated. */
static enum moe_status check_ramp_batches(const struct moe_cli_problem *p,
                                          struct moe_cli_problem *q,
                                          const struct moe_train_schedule *s,
                                          struct moe_diag *diag)
{
    long long last = -1;
    for (int i = 0; i < s->num_phases; i++) {
        long long b = s->phases[i].batch;
        if (b != s->gbs && b != last) {
            MOE_TRY(at_batch(p, q, b, diag));
            last = b;
        }
    }
    return MOE_OK;
}

enum moe_status moe_cli_train_eval(const struct moe_cli_problem *p,
                                   double step_s,
                                   const struct moe_train_flags *f,
                                   const struct moe_cluster_costs *c,
                                   const struct moe_uncertainty *u,
                                   struct moe_train_eval *out,
                                   struct moe_diag *diag)
{
    memset(out, 0, sizeof(*out));
    const struct moe_layout *lay = &p->lay;
    out->seq_length = lay->seq_length;
    MOE_TRY(moe_train_schedule_make(f, lay->gbs, lay->seq_length, (long long)lay->mbs * lay->dp,
                                    &out->sched, diag));
    struct ramp_ctx rc = {p, malloc(sizeof(struct moe_cli_problem))};
    enum moe_status st = rc.q != NULL ? MOE_OK : moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    if (st == MOE_OK) {
        st = check_ramp_batches(p, rc.q, &out->sched, diag);
    }
    double time_s = 0.0;
    if (st == MOE_OK) {
        st = moe_train_time(&out->sched, step_s, ramp_step, &rc, &time_s, &out->ramp_s,
                            &out->ramp_predicted, &out->ramp_batches, diag);
    }
    free(rc.q);
    if (st != MOE_OK) {
        moe_cli_train_eval_fini(out);
        return st;
    }
    struct moe_interval iv;
    memset(&iv, 0, sizeof(iv));
    if (u != NULL) {
        moe_unc_step(u, moe_run_precision(p), moe_run_ep_span(p), NULL, step_s, MOE_UNC_LEVEL, &iv);
    }
    double watts = 0.0;
    double pue = 0.0;
    double price = 0.0;
    char miss_power[128];
    char miss_price[128];
    moe_train_inputs(f, c, &watts, &pue, &price, miss_power, miss_price, sizeof(miss_power));
    moe_train_totals_compute(time_s, (double)out->sched.samples * lay->seq_length, lay->num_gpus,
                             iv.ok ? iv.lo / step_s : 1.0, iv.ok ? iv.hi / step_s : 1.0, iv.ok,
                             watts, pue, price, &out->totals);
    return MOE_OK;
}

void moe_cli_train_eval_fini(struct moe_train_eval *e)
{
    moe_train_schedule_fini(&e->sched);
}

void moe_cli_train_report(const struct moe_train_eval *e,
                          const struct moe_train_flags *f,
                          const struct moe_cluster_costs *c,
                          struct moe_train_report *r)
{
    r->flags = f;
    r->sched = &e->sched;
    r->totals = &e->totals;
    r->costs = c;
    r->seq_length = e->seq_length;
    r->ramp_s = e->ramp_s;
    r->ramp_predicted = e->ramp_predicted;
    r->ramp_batches = e->ramp_batches;
    r->label = NULL;
}

/* Order of plans by objective value, ties by their listed (step-time) order. */
struct ranked {
    int idx;
    double value;
};

static int compare_ranked(const void *a, const void *b)
{
    const struct ranked *x = a;
    const struct ranked *y = b;
    if (x->value != y->value) {
        return x->value < y->value ? -1 : 1;
    }
    return (x->idx > y->idx) - (x->idx < y->idx);
}

enum moe_status moe_cli_train_rank(const struct moe_cli_problem *p,
                                   const struct moe_train_flags *f,
                                   const struct moe_cluster_costs *c,
                                   struct moe_plan_result *res,
                                   struct moe_train_eval *evals,
                                   int *num_evals,
                                   struct moe_train_eval *missed,
                                   int *num_skipped,
                                   char *skipped,
                                   size_t len,
                                   struct moe_diag *diag)
{
    *num_evals = 0;
    *num_skipped = 0;
    if (len > 0) {
        skipped[0] = '\0';
    }
    memset(missed, 0, sizeof(*missed));
    int n = res->num_top;
    struct moe_uncertainty *u = calloc(1, sizeof(*u));
    struct moe_cli_problem *q = malloc(sizeof(*q));
    struct moe_train_eval *all = calloc((size_t)n + 1, sizeof(*all));
    struct ranked *order = calloc((size_t)n + 1, sizeof(*order));
    struct moe_plan_candidate *top = calloc((size_t)n + 1, sizeof(*top));
    enum moe_status st = u != NULL && q != NULL && all != NULL && order != NULL && top != NULL
                             ? moe_unc_load(p->cluster_name, u, diag)
                             : moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    int done = 0;
    bool *runnable = calloc((size_t)n + 1, sizeof(*runnable));
    if (st == MOE_OK && runnable == NULL) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory");
    }
    for (; st == MOE_OK && done < n; done++) {
        *q = *p;
        q->lay = res->top[done].lay;
        q->opt = res->top[done].opt;
        st = moe_cli_train_eval(q, moe_plan_step_time(&res->top[done]), f, c, u, &all[done], diag);
        order[done].idx = done;
        order[done].value = moe_train_objective_value(&all[done].totals, f->objective);
        runnable[done] = st == MOE_OK;
        if (st == MOE_ERR_INFEASIBLE || st == MOE_ERR_INVALID) { /* this layout and the ramp */
            if (*num_skipped == 0 && len > 0) {
                (void)snprintf(skipped, len, "plan %d: %s", done + 1, diag->message);
            }
            (*num_skipped)++;
            order[done].value = HUGE_VAL;
            st = MOE_OK;
        }
    }
    if (st == MOE_OK && n > 0 && *num_skipped == n) {
        st = moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                          "none of the %d listed plans can run the batch ramp (%s); give "
                          "--decrease-batch-size-if-needed, or START and INCR that are multiples "
                          "of micro-batch x DP x PP",
                          n, skipped);
    }
    if (st == MOE_OK) {
        qsort(order, (size_t)n, sizeof(*order), compare_ranked);
        int fastest = -1;
        for (int i = 0; i < n; i++) {
            int k = order[i].idx;
            if (!runnable[k]) {
                continue;
            }
            if (fastest < 0 || all[k].totals.days.value < all[fastest].totals.days.value) {
                fastest = k;
            }
            if (f->deadline_days > 0.0 && all[k].totals.days.value > f->deadline_days) {
                continue;
            }
            top[*num_evals] = res->top[k];
            evals[*num_evals] = all[k];
            memset(&all[k], 0, sizeof(all[k]));
            (*num_evals)++;
        }
        if (*num_evals == 0 && fastest >= 0) {
            *missed = all[fastest];
            memset(&all[fastest], 0, sizeof(all[fastest]));
        }
        memcpy(res->top, top, (size_t)*num_evals * sizeof(*top));
        res->num_top = *num_evals;
    }
    for (int i = 0; i < done; i++) {
        moe_cli_train_eval_fini(&all[i]);
    }
    free(runnable);
    free(top);
    free(order);
    free(all);
    free(q);
    free(u);
    return st;
}

void moe_cli_train_missed_str(const struct moe_train_flags *f,
                              const struct moe_train_eval *missed,
                              char *buf,
                              size_t len)
{
    const struct moe_train_figure *d = &missed->totals.days;
    int used = snprintf(buf, len, "no plan finishes within %.4g days: the fastest needs %.1f days",
                        f->deadline_days, d->value);
    if (used > 0 && (size_t)used < len && missed->totals.has_interval) {
        used +=
            snprintf(buf + used, len - (size_t)used, " (80%% interval %.1f - %.1f)", d->lo, d->hi);
    }
    if (used > 0 && (size_t)used < len) {
        (void)snprintf(buf + used, len - (size_t)used, ", %.1f days (%.0f%%) over%s",
                       d->value - f->deadline_days,
                       100.0 * (d->value - f->deadline_days) / f->deadline_days,
                       missed->totals.has_interval && d->lo <= f->deadline_days
                           ? "; within the interval's lower end, so not ruled out"
                           : "");
    }
}
