/*
 * Planner quality against published training runs (../shared/reference/published_runs.md): for
 * each fully specified run, where the published configuration ranks among the layouts the
 * planner searches for the same model, cluster, GPU count, global batch and sequence length, the
 * predicted gain of moefold's best plan over it, and the main differences (knobs and per-phase
 * time). Each run's configuration is written as the Megatron-LM flags of its source.
 *
 * The test prints the README table (markdown rows) on stdout:
 *
 *     make build/bin/tests/planner/test_published && build/bin/tests/planner/test_published
 *
 * It checks relations only (the cost model is still being calibrated): the published plan is
 * valid and the planner's best is at least as fast (closed form). The rank is the published
 * plan's place among the 50 fastest layouts (each with its fastest options) by the closed-form
 * schedule the search ranks with ("> 50" beyond them).
 */
#include "model/config.h"
#include "model/cost.h"
#include "model/megatron_args.h"
#include "planner/report.h"
#include "planner/search.h"
#include "planner/space.h"
#include "tests/test_util.h"
#include "topologies/cluster_file.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define GIB    1073741824.0
#define RANKED 50 /* layouts ranked exactly; beyond, "> 50" */

/* Under AddressSanitizer the searches run some 5x slower: all nine runs took 514 s of CPU, half of
 * CI's time, the two Mixtral runs alone 77 s. That build checks the runs on at most SAN_MAX_GPUS
 * GPUs (B15: 2.6 s), whose search takes the same code paths (test_search and test_golden run the
 * planner under the sanitizers too); the plain build checks every run. */
#if defined(__SANITIZE_ADDRESS__)
#define SAN_MAX_GPUS 8
#else
#define SAN_MAX_GPUS 0 /* no limit */
#endif

struct run {
    const char *id;
    const char *model;
    const char *cluster;
    int gpus;
    const char *note; /* what the flags infer or assume */
    const char *flags;
};

/* Common to every run: forced balance (MBridge and ModelZoo), the distributed optimizer with the
 * DP overlaps and grouped GEMMs of their recipes. */
#define COMMON                                                                                     \
    " --moe-router-force-load-balancing --use-distributed-optimizer --overlap-grad-reduce "        \
    "--overlap-param-gather --moe-grouped-gemm --seq-length 4096 --micro-batch-size 1"

static const struct run runs[] = {
    {"B5", "deepseek-v3", "dgx-h100", 1024, "recompute and dispatcher from the current recipe",
     "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 "
     "--num-virtual-stages-per-pipeline-rank 4 --expert-model-parallel-size 64 "
     "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 8192 "
     "--fp8-format e4m3 --fp8-recipe tensorwise --recompute-granularity selective "
     "--recompute-modules mla_up_proj mlp --moe-token-dispatcher-type flex "
     "--moe-flex-dispatcher-backend hybridep" COMMON},
    {"B12", "qwen3-235b-a22b", "dgx-h100", 256, "",
     "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 "
     "--num-virtual-stages-per-pipeline-rank 4 --expert-model-parallel-size 32 "
     "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 8192 "
     "--fp8-format e4m3 --fp8-recipe tensorwise --moe-token-dispatcher-type alltoall "
     "--overlap-moe-expert-parallel-comm --delay-wgrad-compute" COMMON},
    {"B15", "qwen3-30b-a3b", "gb300-nvl72", 8, "FI-CG: full-iteration graph with A2A overlap",
     "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
     "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --global-batch-size 512 "
     "--fp8-format e4m3 --fp8-recipe mxfp8 --moe-token-dispatcher-type flex "
     "--moe-flex-dispatcher-backend hybridep --cuda-graph-impl full_iteration "
     "--overlap-moe-expert-parallel-comm --delay-wgrad-compute"
     " --moe-router-force-load-balancing --use-distributed-optimizer --overlap-grad-reduce "
     "--overlap-param-gather --moe-grouped-gemm --seq-length 4096 --micro-batch-size 8"},
    {"Z1", "qwen3-235b-a22b", "dgx-h100", 256, "",
     "--tensor-model-parallel-size 2 --context-parallel-size 1 --pipeline-model-parallel-size 8 "
     "--num-virtual-stages-per-pipeline-rank 4 --expert-model-parallel-size 32 "
     "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 2048 --bf16 "
     "--recompute-granularity selective --recompute-modules layernorm moe_act "
     "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep" COMMON},
    {"Z2", "qwen3-235b-a22b", "dgx-h100", 256, "Z1 with 1F1B A2A overlap",
     "--tensor-model-parallel-size 2 --context-parallel-size 1 --pipeline-model-parallel-size 8 "
     "--num-virtual-stages-per-pipeline-rank 4 --expert-model-parallel-size 32 "
     "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 2048 --bf16 "
     "--recompute-granularity selective --recompute-modules layernorm moe_act "
     "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep "
     "--overlap-moe-expert-parallel-comm --delay-wgrad-compute" COMMON},
    {"Z4", "qwen3-235b-a22b", "dgx-h100", 256, "",
     "--tensor-model-parallel-size 2 --context-parallel-size 1 --pipeline-model-parallel-size 32 "
     "--num-virtual-stages-per-pipeline-rank 3 --expert-model-parallel-size 8 "
     "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 2048 --bf16 "
     "--recompute-granularity selective --recompute-modules layernorm moe_act "
     "--moe-token-dispatcher-type alltoall" COMMON},
    {"Z13", "mixtral-8x22b", "dgx-h100", 128, "",
     "--tensor-model-parallel-size 2 --context-parallel-size 1 --pipeline-model-parallel-size 8 "
     "--num-virtual-stages-per-pipeline-rank 7 --expert-model-parallel-size 8 "
     "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 256 --bf16 "
     "--moe-token-dispatcher-type alltoall" COMMON},
    {"Z14", "mixtral-8x22b", "dgx-h100", 128, "Z13 in FP8 blockwise",
     "--tensor-model-parallel-size 2 --context-parallel-size 1 --pipeline-model-parallel-size 8 "
     "--num-virtual-stages-per-pipeline-rank 7 --expert-model-parallel-size 8 "
     "--expert-tensor-parallel-size 1 --sequence-parallel --global-batch-size 256 "
     "--fp8-format e4m3 --fp8-recipe blockwise --moe-token-dispatcher-type alltoall" COMMON},
    {"1c", "deepseek-v3", "gb200-nvl72", 256, "ladder step 12; MTP off",
     "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 8 "
     "--num-virtual-stages-per-pipeline-rank 4 --expert-model-parallel-size 32 "
     "--expert-tensor-parallel-size 1 --global-batch-size 2048 --mtp-num-layers 0 "
     "--fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather --use-precision-aware-optimizer "
     "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --recompute-granularity selective "
     "--recompute-modules mlp moe_act --moe-token-dispatcher-type flex "
     "--moe-flex-dispatcher-backend hybridep --cuda-graph-impl transformer_engine "
     "--cuda-graph-modules attn moe_router moe_preprocess" COMMON},
};

/* The published plan: preset + flags, a balanced pipeline layout string when the layers do not
 * divide (the runs' launch scripts give one), resolved and predicted. */
static void published_plan(const struct run *r,
                           struct moe_model_cfg *cfg,
                           const struct moe_cluster *cl,
                           struct moe_plan_candidate *out,
                           bool *gbs_set)
{
    struct moe_diag d = {0};
    assert_int_equal(moe_cfg_preset(r->model, cfg, &d), MOE_OK);
    char *line = strdup(r->flags);
    const char *argv[256];
    int argc = 0;
    assert_int_equal(moe_megatron_split_line(line, argv, 256, &argc, &d), MOE_OK);
    memset(out, 0, sizeof(*out));
    moe_layout_init(&out->lay);
    moe_options_init(&out->opt);
    out->lay.seq_length = 0;
    struct moe_megatron_result mres;
    enum moe_status st = moe_megatron_parse_args(argc, argv, cfg, &out->lay, &out->opt, &mres, &d);
    if (st != MOE_OK) {
        fprintf(stderr, "%s: %s\n", r->id, d.message);
    }
    assert_int_equal(st, MOE_OK);
    *gbs_set = moe_megatron_is_set(&mres, MOE_MF_GBS);
    out->lay.num_gpus = r->gpus;
    struct moe_layout probe = out->lay;
    if (moe_layout_resolve(cfg, cl, &out->opt, &probe, NULL) != MOE_OK &&
        cfg->num_layers % (out->lay.pp * out->lay.vpp) != 0) {
        moe_plan_balanced_chunks(cfg, out->lay.pp, out->lay.vpp, &out->lay);
    }
    st = moe_layout_resolve(cfg, cl, &out->opt, &out->lay, &d);
    if (st != MOE_OK) {
        fprintf(stderr, "%s: %s\n", r->id, d.message);
    }
    assert_int_equal(st, MOE_OK);
    size_t need = moe_cost_workspace_bytes(&out->lay, MOE_SCHED_SIMULATE);
    void *ws = malloc(need);
    assert_non_null(ws);
    assert_int_equal(moe_cost_predict(cfg, cl, &out->lay, &out->opt, NULL, MOE_SCHED_CLOSED_FORM,
                                      ws, need, &out->pred, &d),
                     MOE_OK);
    assert_int_equal(moe_cost_predict(cfg, cl, &out->lay, &out->opt, NULL, MOE_SCHED_SIMULATE, ws,
                                      need, &out->sim, &d),
                     MOE_OK);
    out->has_sim = true;
    out->fits = out->pred.fits;
    free(ws);
    free(line);
}

/* Markdown table cell: '|' (in layout strings such as "Et|(tt|)*30mL") escaped. */
static const char *md(const char *in, char *out, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; in[i] != '\0' && j + 3 < len; i++) {
        if (in[i] == '|') {
            out[j++] = '\\';
        }
        out[j++] = in[i];
    }
    out[j] = '\0';
    return out;
}

/* The three phases that differ most between the best plan and the published one. */
static void top_phases(const struct moe_plan_candidate *best,
                       const struct moe_plan_candidate *pub,
                       char *buf,
                       size_t len)
{
    const struct moe_phase_times *a = &best->sim.time;
    const struct moe_phase_times *b = &pub->sim.time;
    double d[MOE_NUM_PHASES] = {a->compute - b->compute,
                                a->expert_gemm - b->expert_gemm,
                                a->dispatch - b->dispatch,
                                a->combine - b->combine,
                                a->tp_comm - b->tp_comm,
                                a->cp_comm - b->cp_comm,
                                a->pp_comm - b->pp_comm,
                                a->dp_comm - b->dp_comm,
                                a->pp_bubble - b->pp_bubble,
                                a->optimizer - b->optimizer,
                                a->host_overhead - b->host_overhead};
    size_t used = 0;
    buf[0] = '\0';
    bool taken[MOE_NUM_PHASES] = {false};
    for (int k = 0; k < 3; k++) {
        int best_i = -1;
        for (int i = 0; i < MOE_NUM_PHASES; i++) {
            if (!taken[i] && (best_i < 0 || fabs(d[i]) > fabs(d[best_i]))) {
                best_i = i;
            }
        }
        if (best_i < 0 || fabs(d[best_i]) < 1e-3 * pub->sim.step_time_s) {
            break;
        }
        taken[best_i] = true;
        used += (size_t)snprintf(buf + used, len - used, "%s%s %+.2f s", k > 0 ? ", " : "",
                                 moe_phase_name((enum moe_phase)best_i), d[best_i]);
        if (used >= len) {
            break;
        }
    }
}

static void test_published_runs(void **state)
{
    (void)state;
    char dir[512];
    (void)setenv("MOEFOLD_TOPOLOGIES", moe_test_root_path("topologies", dir, sizeof(dir)), 1);
    printf("| Run | Model | GPUs | Published configuration | Predicted step (s) | Fits | Rank | "
           "moefold's best | Best step (s) | Predicted gain | Main differences | "
           "Best with the published recipe and dispatcher |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int checked = 0;
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        const struct run *r = &runs[i];
        if (SAN_MAX_GPUS > 0 && r->gpus > SAN_MAX_GPUS) {
            continue;
        }
        checked++;
        struct moe_cluster cl;
        struct moe_diag d = {0};
        assert_int_equal(moe_cluster_load(r->cluster, &cl, &d), MOE_OK);
        struct moe_model_cfg cfg;
        struct moe_plan_candidate pub;
        bool gbs_set = false;
        published_plan(r, &cfg, &cl, &pub, &gbs_set);
        assert_true(gbs_set);

        struct moe_plan_request req;
        moe_plan_request_init(&req);
        req.cfg = &cfg;
        req.cl = &cl;
        req.num_gpus = r->gpus;
        req.gbs = pub.lay.gbs;
        req.seq_length = pub.lay.seq_length;
        req.opt = pub.opt; /* run settings: forced balance, optimizer state dtypes */
        req.top_k = RANKED;
        req.pareto_window = 0.0;
        struct moe_plan_result res;
        assert_int_equal(moe_plan_search(&req, &res, &d), MOE_OK);
        assert_int_equal(res.stats.bound_violations, 0);
        assert_true(res.num_top >= 1);
        const struct moe_plan_candidate *best = &res.top[0];
        /* Rank by the closed form the search ranks with, among the RANKED best layouts (an
         * exact rank beyond them, req.rank_time_s, costs minutes: most layouts beat these runs). */
        int faster = 0;
        double fastest = INFINITY;
        for (int k = 0; k < res.num_top; k++) {
            faster += res.top[k].pred.step_time_s < pub.pred.step_time_s;
            fastest = fmin(fastest, res.top[k].pred.step_time_s);
        }
        assert_true(fastest <= pub.pred.step_time_s || !pub.fits);

        char pubs[320];
        char lay[320];
        char opt[400];
        char phases[200];
        moe_plan_layout_str(&pub.lay, pubs, sizeof(pubs));
        moe_plan_layout_str(&best->lay, lay, sizeof(lay));
        moe_plan_options_str(&best->opt, opt, sizeof(opt));
        top_phases(best, &pub, phases, sizeof(phases));
        char lines[32][512];
        int n = moe_plan_knob_diffs(&pub, best, lines, 32);
        char rank[64];
        if (pub.fits && faster < res.num_top) {
            (void)snprintf(rank, sizeof(rank), "%d", faster + 1);
        } else if (pub.fits) {
            (void)snprintf(rank, sizeof(rank), "> %d", res.num_top);
        } else {
            (void)snprintf(rank, sizeof(rank), "does not fit (%.1f GiB)", pub.pred.mem.total / GIB);
        }
        char note[160] = "";
        if (r->note[0] != '\0') {
            (void)snprintf(note, sizeof(note), " (%s)", r->note);
        }
        char e1[640];
        char e2[640];
        char e3[800];
        printf("| %s | %s | %d x %s | %s%s | %.2f | %s | %s | %s; %s | %.2f | %+.1f%% | %s", r->id,
               r->model, r->gpus, r->cluster, md(pubs, e1, sizeof(e1)), note, pub.sim.step_time_s,
               pub.fits ? "yes" : "no", rank, md(lay, e2, sizeof(e2)), md(opt, e3, sizeof(e3)),
               best->sim.step_time_s, 100.0 * (pub.sim.step_time_s / best->sim.step_time_s - 1.0),
               phases);
        for (int k = 0; k < n && k < 4; k++) {
            printf("; %s", md(lines[k], e3, sizeof(e3)));
        }
        /* The same question with the run's precision recipe and dispatcher kept. */
        struct moe_plan_result same;
        req.top_k = 1;
        req.recipes = 1u << pub.opt.recipe;
        req.dispatchers = 1u << pub.opt.dispatcher;
        assert_int_equal(moe_plan_search(&req, &same, &d), MOE_OK);
        assert_int_equal(same.stats.bound_violations, 0);
        assert_true(same.num_top == 1 || !pub.fits);
        if (same.num_top == 1) {
            const struct moe_plan_candidate *b = &same.top[0];
            assert_true(b->pred.step_time_s <= pub.pred.step_time_s || !pub.fits);
            assert_true(b->pred.step_time_s >= fastest);
            moe_plan_layout_str(&b->lay, lay, sizeof(lay));
            n = moe_plan_knob_diffs(&pub, b, lines, 32);
            printf(" | %.2f s (%+.1f%%): %s", b->sim.step_time_s,
                   100.0 * (pub.sim.step_time_s / b->sim.step_time_s - 1.0),
                   md(lay, e2, sizeof(e2)));
            for (int k = 0; k < n && k < 4; k++) {
                printf("; %s", md(lines[k], e3, sizeof(e3)));
            }
        } else {
            printf(" | none fits");
        }
        printf(" |\n");
        fflush(stdout);
        moe_plan_result_free(&same);
        moe_plan_result_free(&res);
    }
    if (SAN_MAX_GPUS > 0) {
        printf("# sanitizer build: %d of %zu runs checked (those on at most %d GPUs)\n", checked,
               sizeof(runs) / sizeof(runs[0]), SAN_MAX_GPUS);
    }
    assert_true(checked >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
