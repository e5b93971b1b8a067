/*
 * `moefold plan`: search every valid layout and option combination for the fastest plan that fits
 * (planner/search.h), print the top-k table, the memory-time Pareto front and the search summary
 * (or one JSON object with --json), explain a ranking (--explain K), and write the chosen plan out:
 * a plan file (--emit), Megatron-LM flags (--megatron-args) and a launch script (--launch-script).
 * Any Megatron layout or option flag on the command line fixes that dimension; --fix, --precision,
 * --dispatcher, --no-offload and --max-memory-gib constrain the rest. `plan --sweep` is `whatif`.
 */
#include "cli/commands.h"
#include "cli/common.h"
#include "planner/cliopt.h"
#include "planner/emit.h"
#include "planner/report.h"
#include "planner/search.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

static void usage(FILE *out)
{
    fprintf(out, "usage: moefold plan --model NAME|--model-config FILE --cluster NAME --gpus N\n"
                 "                    --global-batch-size B [--seq-length S] [Megatron flags]\n"
                 "                    [search and output options]\n\n");
    moe_plan_cli_help(out);
    fprintf(
        out,
        "output:\n"
        "  --top K                 layouts in the table (default 10)\n"
        "  --pareto-window X       Pareto front up to X times the fastest step (default 1.5;\n"
        "                          0 = no front)\n"
        "  --explain K             why plan K beats the next ones (per-phase deltas)\n"
        "  --emit FILE             write plan K=1 as a plan file (moefold-train --plan)\n"
        "  --megatron-args         print plan 1's Megatron-LM flags\n"
        "  --launch-script FILE    write a launch script for plan 1 (mpirun / torchrun / srun)\n"
        "  --json                  one JSON object on stdout\n"
        "  --sweep ...             the same as `moefold whatif ...`\n\n");
    moe_cli_print_common_help(out);
}

struct plan_flags {
    struct moe_plan_cli_opts search; /* shared with whatif */
    int top_k;
    double pareto_window;
    int explain;
    const char *emit;
    bool megatron_args;
    const char *launch;
};

static int plan_flag(void *ctx, int argc, char **argv, int i, struct moe_diag *diag)
{
    struct plan_flags *f = ctx;
    int used = moe_plan_cli_flag(&f->search, argc, argv, i, diag);
    if (used != 0) {
        return used;
    }
    const char *v = NULL;
    if ((used = moe_plan_cli_value(argc, argv, i, "--top", &v, diag)) != 0) {
        return used < 0 || !moe_plan_cli_int("--top", v, 1, 1000, &f->top_k, diag) ? -1 : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--pareto-window", &v, diag)) != 0) {
        if (used < 0 ||
            !moe_plan_cli_double("--pareto-window", v, 0.0, 100.0, &f->pareto_window, diag)) {
            return -1;
        }
        if (f->pareto_window > 0.0 && f->pareto_window < 1.0) {
            moe_diag_source(diag, "--pareto-window");
            (void)moe_diag_set(diag, MOE_ERR_INVALID, "--pareto-window %g: give 0 or >= 1",
                               f->pareto_window);
            return -1;
        }
        return used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--explain", &v, diag)) != 0) {
        return used < 0 || !moe_plan_cli_int("--explain", v, 1, 1000, &f->explain, diag) ? -1
                                                                                         : used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--emit", &v, diag)) != 0) {
        f->emit = v;
        return used;
    }
    if ((used = moe_plan_cli_value(argc, argv, i, "--launch-script", &v, diag)) != 0) {
        f->launch = v;
        return used;
    }
    if (strcmp(argv[i], "--megatron-args") == 0) {
        f->megatron_args = true;
        return 1;
    }
    return 0;
}

/* The search request of problem p; *lc / *scratch set up for --moe-imbalance auto. */
static enum moe_status build_request(const struct moe_cli_problem *p,
                                     const struct moe_plan_cli_opts *o,
                                     struct moe_plan_request *req,
                                     struct moe_plan_load_cache **lc,
                                     struct moe_cli_problem **scratch,
                                     struct moe_diag *diag)
{
    if (!p->has_model) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no model: give --model NAME (see `moefold models`), --model-config "
                            "FILE, or Megatron model-shape flags");
    }
    if (!p->has_cluster) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "no cluster: give --cluster NAME (see `moefold clusters`)");
    }
    return moe_cli_plan_request(p, o, req, lc, scratch, diag);
}

/* The plan's prediction as predict prints it, in a problem made of the plan. */
static enum moe_status emit_plan(const struct moe_cli_problem *p,
                                 const struct moe_plan_candidate *c,
                                 const char *path,
                                 struct moe_diag *diag)
{
    struct moe_cli_problem *q = malloc(sizeof(*q));
    if (q == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory writing %s", path);
    }
    *q = *p;
    q->lay = c->lay;
    q->opt = c->opt;
    enum moe_status st = moe_cli_emit_plan(q, c->has_sim ? &c->sim : &c->pred, path, diag);
    free(q);
    return st;
}

static enum moe_status write_outputs(const struct moe_cli_problem *p,
                                     const struct plan_flags *f,
                                     const struct moe_plan_result *res,
                                     char **megatron,
                                     struct moe_diag *diag)
{
    *megatron = NULL;
    if (res->num_top == 0) {
        if (f->emit != NULL || f->launch != NULL || f->megatron_args) {
            return moe_diag_set(diag, MOE_ERR_INFEASIBLE,
                                "no plan fits: nothing to write for --emit, --megatron-args or "
                                "--launch-script");
        }
        return MOE_OK;
    }
    const struct moe_plan_candidate *best = &res->top[0];
    if (f->megatron_args) {
        MOE_TRY(moe_plan_megatron_args(&p->cfg, &best->lay, &best->opt, 0u, megatron, diag));
    }
    if (f->emit != NULL) {
        MOE_TRY(emit_plan(p, best, f->emit, diag));
    }
    if (f->launch != NULL) {
        const struct moe_prediction *pr = best->has_sim ? &best->sim : &best->pred;
        struct moe_plan_launch l = {.cfg = &p->cfg,
                                    .cl = &p->cl,
                                    .lay = &best->lay,
                                    .opt = &best->opt,
                                    .plan_path = f->emit,
                                    .step_time_s = pr->step_time_s,
                                    .tokens_per_s_per_gpu = pr->tokens_per_s_per_gpu,
                                    .memory_gib = pr->mem.total / GIB};
        MOE_TRY(moe_plan_write_launch_script(f->launch, &l, diag));
    }
    return MOE_OK;
}

static int print_json(const struct moe_plan_request *req,
                      const struct moe_plan_result *res,
                      int explain,
                      const char *megatron)
{
    cJSON *o = moe_plan_result_json(req, res, explain);
    if (o != NULL && megatron != NULL) {
        cJSON_AddStringToObject(o, "megatron_args", megatron);
    }
    char *s = o != NULL ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (s == NULL) {
        fprintf(stderr, "moefold plan: out of memory\n");
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

int moe_cli_plan(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sweep") == 0) {
            return moe_cli_whatif(argc, argv); /* whatif skips --sweep */
        }
    }
    struct plan_flags f;
    memset(&f, 0, sizeof(f));
    moe_plan_cli_opts_init(&f.search);
    f.top_k = 10;
    f.pareto_window = 1.5;
    struct moe_cli_problem *p = calloc(1, sizeof(*p));
    struct moe_plan_request *req = calloc(1, sizeof(*req));
    struct moe_plan_load_cache *lc = NULL;
    struct moe_cli_problem *scratch = NULL;
    struct moe_plan_result res;
    memset(&res, 0, sizeof(res));
    struct moe_diag diag = {0};
    char *megatron = NULL;
    int rc = 1;
    if (p == NULL || req == NULL) {
        fprintf(stderr, "moefold plan: out of memory\n");
        goto out_free;
    }
    if (moe_cli_parse_problem(argc, argv, plan_flag, &f, p, stderr, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        rc = 2;
        goto out_free;
    }
    if (f.search.help) {
        usage(stdout);
        rc = 0;
        goto out_free;
    }
    if (build_request(p, &f.search, req, &lc, &scratch, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    req->top_k = f.top_k;
    req->pareto_window = f.pareto_window;
    struct moe_plan_progress prog;
    moe_plan_progress_init(&prog, "plan", true);
    req->progress = moe_plan_progress_cb;
    req->progress_ctx = &prog;
    enum moe_status st = moe_plan_search(req, &res, &diag);
    moe_plan_progress_done(&prog);
    if (st != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    if (write_outputs(p, &f, &res, &megatron, &diag) != MOE_OK) {
        moe_cli_error("plan", &diag);
        goto out_free;
    }
    if (p->json) {
        rc = print_json(req, &res, f.explain, megatron);
        if (rc == 0 && res.num_top == 0) {
            rc = 1;
        }
        goto out_free;
    }
    moe_plan_print(stdout, req, &res, f.explain);
    if (megatron != NULL) {
        printf("\n# Megatron-LM flags of plan 1:\n%s\n", megatron);
    }
    if (f.emit != NULL && res.num_top > 0) {
        printf("# wrote plan 1 to %s\n", f.emit);
    }
    if (f.launch != NULL && res.num_top > 0) {
        printf("# wrote launch script %s\n", f.launch);
    }
    rc = res.num_top > 0 ? 0 : 1;
out_free:
    free(megatron);
    moe_plan_result_free(&res);
    moe_plan_load_cache_destroy(lc);
    free(scratch);
    free(req);
    free(p);
    return rc;
}
