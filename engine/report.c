/*
 * run.json ("format": "moefold-run", "version": 1): what the engine measured, under the names
 * `moefold predict --json` uses, so `moefold compare` can put them side by side.
 *
 * Definitions:
 * - time_s.<phase>: mean wall time per step (first step excluded as warm-up when the run has more
 *   than one) spent in that phase, averaged over the ranks of the critical pipeline stage -- the
 *   stage whose ranks spend the most time neither idle in the pipeline bubble nor waiting for
 *   another rank (critical_stage; critical_rank is its first rank). The average over a stage's
 *   ranks is what the cost model prices: a rank with the mean expert load plus its wait for the
 *   busiest. Every phase is entered explicitly (host work too); time_s.unattributed is what no
 *   phase claimed (loop bookkeeping, the clock itself), so the phases plus unattributed sum to
 *   step_time_s, and a small unattributed is the check that the phases cover the step.
 *   Communication phases are exposed time: time the rank spent inside the collective or waiting
 *   for it, not hidden behind compute. ep_comm = dispatch + combine; exposed_comm = dispatch +
 *   combine + tp_comm + cp_comm + pp_comm + dp_comm.
 * - wait_s.<phase>: the share of time_s.<phase> spent waiting for the slowest member of a
 *   collective (engine/timing.c: each rank's arrival, without a barrier); wait_measured says
 *   whether the backend allowed measuring it (host-synchronous collectives) and every step's
 *   records matched.
 * - phase_definitions: what each phase holds, as phase_how below says it (also printed with
 *   --verbose).
 * - kernel_s (with --profile-kernels): per phase, every kernel op that ran in it with its mean
 *   wall seconds ("s") and calls per measured step, averaged over the critical stage's ranks
 *   (kernels/profile.h). A phase's time minus its ops' seconds is what ran between the ops: loop
 *   and bookkeeping code, copies done outside the kernel table, communication calls.
 * - timeline (with --trace-step): the traced step's intervals per rank (see moe_eng_write_trace):
 *   "fields" names the numbers of each record.
 * - bytes_sent: per rank per step, mean over ranks, keyed "<group>.<collective>" (nccl-tests'
 * algorithm factors, engine/comm.h).
 * - tokens_per_expert: per MoE layer, routed token copies per expert per step (before capacity
 * drop), summed over the layer's stage.
 * - memory_gib: the engine's own allocations by category on the rank with the largest total.
 * - buffers_detail_gib: memory_gib.buffers of that rank split into the parts the engine allocates
 *   (they add up to it exactly): dispatch (the all-to-all send/receive rows, the ETP-gathered
 *   expert rows and their intermediates -- the temporaries sized by the expert-row bound, as live
 * at the temp region's peak; all of the hierarchical dispatcher's), temporaries (the rest of the
 *   per-op temp region), recompute_scratch (tensors of recomputed modules), offload_staging (the
 *   two staging halves of activation offload), pipeline (chunk outputs, input gradients sent back
 * to the previous stage, the backward's gradient streams) and other (token ids and targets,
 * position and K/V-order tables, expert statistics, scalar slots, bucket sums of squares, the
 * optimizer state's page-alignment slack: moe_eng_opt_page_slack).
 * - expert_rows_factor (MoE models): the expert rows each rank's buffers were sized for, divided by
 *   the mean rows its experts receive per micro-batch and MoE layer (tokens_sp * topk * etp): EP
 *   with the default worst-case sizing (every token of the EP group could pick this rank's
 *   experts), --moe-buffer-factor when that is smaller, lower with a capacity factor; the largest
 *   over ranks. The cost model sizes the same buffers with its expected load factor instead.
 * - expert_active_fraction (MoE models): of the local experts a grouped expert forward had, the
 *   share that held rows (the rest run no GEMM), over every such call of the measured steps on
 *   every rank (recomputes not counted: they repeat the forward's counts). Balanced routing gives
 *   about 1; a router that sends a micro-batch to few experts runs fewer, larger GEMMs, which
 *   compare prices (moe_options.moe_active_expert_frac).
 * - ranks_per_node (only with --ranks-per-node): the emulated nodes' size; compare prices the run
 *   with that NVLink domain (the hierarchical dispatcher's cross-node step runs between them).
 * - ran: the plan's options as they ran (plan_differences says why each differs); the hierarchical
 *   dispatcher sets unfused_dispatch, its permutes and per-node copies being separate passes.
 */
#include "engine/bench.h"
#include "engine/check.h"
#include "engine/internal.h"
#include "topologies/json_util.h"
#include "topologies/plan_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

/*
 * How each phase of time_s is measured (run.json phase_definitions; printed with --verbose). The
 * clock: wall time between phase switches (engine/context.h), on CUDA the compute stream's time
 * line (events at each switch). Blocking collectives end when the slowest member arrives, so a
 * communication phase includes waiting for slower peers, not only moving bytes.
 */
static const char *const phase_how[MOE_NUM_PHASES] = {
    /* compute */
    "attention (QKV and output projections, RoPE, core attention), dense MLP, RMSNorms, the "
    "router GEMM and top-k, embedding, output layer and cross-entropy, and residual adds, "
    "forward, backward and recompute; activation-offload copies (they block here; also "
    "offload_copy_s)",
    /* expert_gemm */
    "the routed experts' grouped GEMMs and SwiGLU and the shared expert's MLP; with "
    "--overlap-moe-expert-parallel-comm also the other half micro-batch's all-to-all that "
    "progresses behind them (hidden, so not in dispatch/combine)",
    /* dispatch */
    "from the router's choices to the experts' input rows: expert counts, the counts all-to-all "
    "(and the aux-loss counts all-reduce over TP x CP), permute, the rows all-to-all-v, the ETP "
    "all-gather and the expert-major reorder (hierarchical: the node-proxy exchange and "
    "forward), and in backward its gradient (after the expert GEMMs, back to the tokens); the "
    "exchanges block, so it includes waiting for the slowest EP/ETP peer (wait_s.dispatch: "
    "backward, the busiest rank's expert GEMMs)",
    /* combine */
    "from the experts' output rows back to the tokens: the reorder back, the ETP reduce, the rows "
    "all-to-all-v back and the weighted unpermute, and in backward its gradient (the output "
    "gradients to the experts); includes waiting for the slowest EP/ETP peer (wait_s.combine: "
    "forward, the busiest rank's expert GEMMs)",
    /* tp_comm */
    "sequence-parallel all-gathers and reduce-scatters (or all-reduces without SP) and the "
    "vocab-parallel cross-entropy all-reduces; blocking, so it includes waiting for TP peers",
    /* cp_comm */
    "the K/V all-gather and its reorder into position order, and the dK/dV reorder and "
    "reduce-scatter; includes waiting for CP peers",
    /* pp_comm */
    "posting pipeline sends and waiting for their completion (a send waiting on a busy receiver "
    "counts here)",
    /* dp_comm */
    "gradient reduce-scatters / all-reduces over DP x CP and EDP, the TP all-reduce of "
    "sequence-parallel replicated gradients, the tied-embedding all-reduce and the parameter "
    "all-gathers; with overlap the waits for them and the progress polls between layers, and "
    "the step's expert-counts all-reduce while parameter all-gathers are in flight (a CPU rank "
    "moves the data inside those calls)",
    /* pp_bubble */
    "blocking receives of activations or gradients from the neighbouring stage: idle time of the "
    "schedule's bubble plus any imbalance between stages",
    /* optimizer */
    "zeroing the gradients for the step, gradient sums of squares and the finite checks, the "
    "world all-reduce of norm, loss and finite flags (its wait share: waiting for the stage that "
    "finishes last), clipping, AdamW, the copy of the updated master shard into the weights, and "
    "the expert count all-reduce over the stage with the expert-bias update",
    /* host_overhead */
    "host work, timed where it runs: resetting the step's arenas and statistics, loading the "
    "batch's token ids, summing the router losses and, on CUDA, reading the step's scalars back "
    "(time no phase claims is time_s.unattributed)",
};

static void add_phase_definitions(cJSON *o)
{
    cJSON *j = cJSON_AddObjectToObject(o, "phase_definitions");
    for (int p = 0; p < MOE_NUM_PHASES; p++) {
        cJSON_AddStringToObject(j, moe_phase_name((enum moe_phase)p), phase_how[p]);
    }
    cJSON_AddStringToObject(j, "unattributed",
                            "step time no phase claimed: the schedule loop between calls, the "
                            "clock; small when the phases cover the step");
    cJSON_AddStringToObject(j, "ep_comm", "dispatch + combine");
    cJSON_AddStringToObject(j, "exposed_comm",
                            "dispatch + combine + tp_comm + cp_comm + pp_comm + dp_comm");
}

/* Parts of the buffers category, in the order of buffers_detail_gib. */
enum { NUM_BUF_PARTS = 6 };
static const char *const buf_part_names[NUM_BUF_PARTS] = {
    "dispatch", "temporaries", "recompute_scratch", "offload_staging", "pipeline", "other"};

/* Per-rank summary gathered to every rank. */
enum {
    SUM_STEP = 0,
    SUM_PHASES = 1,
    SUM_WAITS = SUM_PHASES + MOE_ENG_NUM_SLOTS,
    SUM_MEM = SUM_WAITS + MOE_ENG_NUM_SLOTS,
    SUM_BUFS = SUM_MEM + 7,
    SUM_ROWS = SUM_BUFS + NUM_BUF_PARTS,
    SUM_STAGE = SUM_ROWS + 1,
    SUM_LEN = SUM_STAGE + 1
};

/* The buffers category's parts on this rank (bytes; they add up to it exactly). */
static void buffer_parts(const struct moe_eng *e, double *out)
{
    out[0] = (double)e->temp_dispatch_bytes;
    out[1] = (double)(e->temp_bytes - e->temp_dispatch_bytes);
    out[2] = (double)moe_eng_align(e->rc_scratch_bytes);
    out[3] = (double)moe_eng_align(e->staging_bytes);
    out[4] = (double)e->bufs_pipeline_bytes;
    out[5] = (double)(e->bufs_other_bytes + moe_eng_opt_page_slack(e));
}

/* Expert rows the buffers were sized for over the mean rows a rank's experts receive
 * (tokens_sp * topk * etp after the ETP gather); 0 for dense models. */
static double expert_rows_factor(const struct moe_eng *e)
{
    const struct moe_eng_dims *d = &e->d;
    double mean = (double)d->tokens_sp * (double)d->topk * (double)d->etp;
    return d->experts > 0 && mean > 0.0 ? (double)d->rows_exp / mean : 0.0;
}

static void rank_summary(const struct moe_eng *e, double *out)
{
    const struct moe_eng_stats *s = &e->stats;
    double n = s->num_measured > 0 ? (double)s->num_measured : 1.0;
    double step = 0.0;
    for (int p = 0; p < MOE_ENG_NUM_SLOTS; p++) {
        out[SUM_PHASES + p] = s->phase_sum[p] / n;
        out[SUM_WAITS + p] = s->wait_sum[p] / n;
        step += out[SUM_PHASES + p];
    }
    out[SUM_STEP] = step;
    out[SUM_STAGE] = e->groups.me.stage;
    struct moe_eng_mem_report m;
    moe_eng_memory(e, &m);
    out[SUM_MEM + 0] = m.weights;
    out[SUM_MEM + 1] = m.grads;
    out[SUM_MEM + 2] = m.optimizer;
    out[SUM_MEM + 3] = m.activations;
    out[SUM_MEM + 4] = m.buffers;
    out[SUM_MEM + 5] = m.host_offload;
    out[SUM_MEM + 6] = m.peak_rss;
    buffer_parts(e, out + SUM_BUFS);
    out[SUM_ROWS] = expert_rows_factor(e);
}

/* "host_probe" (engine/engine.c host_probe; absent when none ran): the probe GEMM's time, the
 * median over the probes between the measured steps of each probe's mean over the ranks (a probe
 * is milliseconds and a dip of the host's speed for that long says little of the steps around it:
 * validate 2026-12-03 14:50, dp2's probes averaged 4751 us in the fastest of its three runs and
 * 3089-3345 us in the two others, against the calibration's 3302), the mean, each probe's time,
 * and the ranks' mean speed spread at those probes. sum: time, calls and spread, each summed over
 * the ranks. */
static void add_host_probe(cJSON *o, struct moe_eng *e, const double *sum)
{
    if (!(sum[1] > 0.0)) {
        return;
    }
    int n = e->stats.probe_calls < e->stats.cap_steps ? e->stats.probe_calls : e->stats.cap_steps;
    double *each = moe_eng_heap_alloc(&e->ctx.heap, (size_t)(n > 0 ? n : 1) * sizeof(double));
    double median = sum[0] / sum[1];
    cJSON *times = cJSON_CreateDoubleArray(e->stats.probe_each_us, n);
    if (each != NULL && n > 0) {
        memcpy(each, e->stats.probe_each_us, (size_t)n * sizeof(double));
        median = moe_bench_median(each, (size_t)n);
    }
    moe_eng_heap_free(&e->ctx.heap, each, (size_t)(n > 0 ? n : 1) * sizeof(double));
    cJSON *p = cJSON_AddObjectToObject(o, "host_probe");
    const int mnk[3] = {MOE_ENG_PROBE_DIM, MOE_ENG_PROBE_DIM, MOE_ENG_PROBE_DIM};
    cJSON_AddItemToObject(p, "gemm_mnk", cJSON_CreateIntArray(mnk, 3));
    cJSON_AddNumberToObject(p, "time_us", median);
    cJSON_AddNumberToObject(p, "time_us_mean", sum[0] / sum[1]);
    if (times != NULL && !cJSON_AddItemToObject(p, "times_us", times)) {
        cJSON_Delete(times);
    }
    cJSON_AddNumberToObject(p, "calls", sum[1]);
    cJSON_AddNumberToObject(p, "rank_spread", sum[2] / sum[1]);
    cJSON_AddNumberToObject(p, "evict_bytes", (double)e->opts.probe_evict_bytes);
}

static void add_buffer_parts(cJSON *o, const double *parts)
{
    cJSON *b = cJSON_AddObjectToObject(o, "buffers_detail_gib");
    for (int i = 0; i < NUM_BUF_PARTS; i++) {
        cJSON_AddNumberToObject(b, buf_part_names[i], parts[i] / GIB);
    }
}

/* time_s (ph: [MOE_ENG_NUM_SLOTS]) and wait_s (w: the same slots). */
static void add_phases(cJSON *o, const double *ph, const double *w)
{
    cJSON *t = cJSON_AddObjectToObject(o, "time_s");
    for (int p = 0; p < MOE_NUM_PHASES; p++) {
        cJSON_AddNumberToObject(t, moe_phase_name((enum moe_phase)p), ph[p]);
    }
    double ep = ph[MOE_PHASE_DISPATCH] + ph[MOE_PHASE_COMBINE];
    cJSON_AddNumberToObject(t, "ep_comm", ep);
    cJSON_AddNumberToObject(t, "exposed_comm",
                            ep + ph[MOE_PHASE_TP_COMM] + ph[MOE_PHASE_CP_COMM] +
                                ph[MOE_PHASE_PP_COMM] + ph[MOE_PHASE_DP_COMM]);
    cJSON_AddNumberToObject(t, "unattributed", ph[MOE_ENG_UNATTRIBUTED]);
    cJSON *j = cJSON_AddObjectToObject(o, "wait_s");
    for (int p = 0; p < MOE_NUM_PHASES; p++) {
        cJSON_AddNumberToObject(j, moe_phase_name((enum moe_phase)p), w[p]);
    }
}

/*
 * run.json "kernel_s" (--profile-kernels): per phase, each kernel op's mean wall seconds and calls
 * per measured step, averaged over the ranks of the critical stage (as time_s), ops that never ran
 * left out. Collective over the world (every rank calls it, with the same options).
 */
static enum moe_status add_kernel_profile(struct moe_eng *e, cJSON *o, int crit_stage)
{
    size_t n = (size_t)MOE_ENG_NUM_SLOTS * MOE_K_NUM_OPS;
    double *v = moe_eng_heap_alloc(&e->ctx.heap, (2 * n + 1) * sizeof(double));
    if (v == NULL) {
        return MOE_ERR_NOMEM;
    }
    const struct moe_eng_stats *st = &e->stats;
    bool mine = e->groups.me.stage == crit_stage;
    double steps = st->num_measured > 0 ? (double)st->num_measured : 1.0;
    for (size_t i = 0; i < n; i++) {
        v[i] = mine ? st->kernel_s[i] / steps : 0.0;
        v[n + i] = mine ? (double)st->kernel_calls[i] / steps : 0.0;
    }
    v[2 * n] = mine ? 1.0 : 0.0;
    moe_comm_allreduce(e->ctx.world, v, v, 2 * n + 1, MOE_COMM_F64, MOE_COMM_SUM);
    double ranks = v[2 * n] > 0.0 ? v[2 * n] : 1.0;
    cJSON *k = o != NULL ? cJSON_AddObjectToObject(o, "kernel_s") : NULL;
    for (int p = 0; k != NULL && p < MOE_ENG_NUM_SLOTS; p++) {
        const char *name = p < MOE_NUM_PHASES ? moe_phase_name((enum moe_phase)p) : "unattributed";
        cJSON *ph = NULL;
        for (int op = 0; op < MOE_K_NUM_OPS; op++) {
            size_t i = (size_t)p * MOE_K_NUM_OPS + (size_t)op;
            if (v[n + i] <= 0.0) {
                continue;
            }
            ph = ph != NULL ? ph : cJSON_AddObjectToObject(k, name);
            cJSON *x = cJSON_AddObjectToObject(ph, moe_k_op_name((enum moe_k_op)op));
            cJSON_AddNumberToObject(x, "s", v[i] / ranks);
            cJSON_AddNumberToObject(x, "calls", v[n + i] / ranks);
        }
    }
    moe_eng_heap_free(&e->ctx.heap, v, (2 * n + 1) * sizeof(double));
    return MOE_OK;
}

/* Mean over the ranks of each stage of the summaries in all; the critical stage (the most time
 * neither in the bubble nor waiting) into *crit, its mean summary into mean[SUM_LEN]. */
static void stage_means(const struct moe_eng *e, const double *all, int *crit, double *mean)
{
    int n = e->ctx.size;
    int pp = e->plan.layout.pp;
    double best = -1.0;
    for (int p = 0; p < pp; p++) {
        double m[SUM_LEN] = {0};
        int k = 0;
        for (int r = 0; r < n; r++) {
            const double *s = all + (size_t)r * SUM_LEN;
            if ((int)s[SUM_STAGE] != p) {
                continue;
            }
            for (int i = 0; i < SUM_LEN; i++) {
                m[i] += s[i];
            }
            k++;
        }
        if (k == 0) {
            continue;
        }
        double waits = 0.0;
        for (int i = 0; i < SUM_LEN; i++) {
            m[i] /= k;
        }
        for (int q = 0; q < MOE_ENG_NUM_SLOTS; q++) {
            waits += m[SUM_WAITS + q];
        }
        double work = m[SUM_STEP] - m[SUM_PHASES + MOE_PHASE_PP_BUBBLE] - waits;
        if (work > best) {
            best = work;
            *crit = p;
            memcpy(mean, m, sizeof(m));
        }
    }
}

/* The traced step's records per rank (collective): "timeline" {step_s, fields, ranks: [{rank,
 * stage, records: [flat numbers]}]}. */
static void add_timeline(struct moe_eng *e, cJSON *o)
{
    double *all = NULL;
    int *cnt = NULL;
    double step_s = 0.0;
    (void)moe_eng_trace_gather(e, &all, &cnt, &step_s);
    if (o != NULL && all != NULL) {
        cJSON *t = cJSON_AddObjectToObject(o, "timeline");
        cJSON_AddNumberToObject(t, "step", e->opts.trace_step);
        cJSON_AddNumberToObject(t, "step_s", step_s);
        cJSON_AddStringToObject(t, "fields", "t0_s t1_s slot op is_wait");
        cJSON *ranks = cJSON_AddArrayToObject(t, "ranks");
        size_t at = 0;
        int per_stage = e->plan.layout.tp * e->plan.layout.cp * e->plan.layout.dp;
        for (int r = 0; r < e->ctx.size; r++) {
            cJSON *rk = cJSON_CreateObject();
            cJSON_AddNumberToObject(rk, "rank", r);
            cJSON_AddNumberToObject(rk, "stage", r / per_stage);
            cJSON *rec = cJSON_AddArrayToObject(rk, "records");
            for (int i = 0; i < cnt[r] * MOE_TRACE_RECORD_FIELDS; i++) {
                cJSON_AddItemToArray(rec, cJSON_CreateNumber(all[(at + (size_t)i)]));
            }
            at += (size_t)cnt[r] * MOE_TRACE_RECORD_FIELDS;
            cJSON_AddItemToArray(ranks, rk);
        }
    }
    free(all);
    free(cnt);
}

static void add_memory(cJSON *o, const double *mem)
{
    cJSON *m = cJSON_AddObjectToObject(o, "memory_gib");
    const char *names[] = {"weights", "grads", "optimizer", "activations", "buffers"};
    double total = 0.0;
    for (int i = 0; i < 5; i++) {
        cJSON_AddNumberToObject(m, names[i], mem[i] / GIB);
        total += mem[i];
    }
    cJSON_AddNumberToObject(m, "total", total / GIB);
    cJSON_AddNumberToObject(m, "host_offload", mem[5] / GIB);
}

/* CUDA runs: the GPU, its memory as cudaMemGetInfo saw it (rank 0), GEMM math, CUDA graphs. */
static void add_device(const struct moe_eng *e, cJSON *o)
{
    if (!e->is_device) {
        return;
    }
    static const char math_names[3][8] = {"fp32", "tf32", "bf16"};
    struct moe_eng_mem_report m;
    moe_eng_memory(e, &m);
    int gm = (int)e->opts.gemm_math;
    cJSON *dv = cJSON_AddObjectToObject(o, "device");
    cJSON_AddStringToObject(dv, "name", moe_eng_dev_name(e->ctx.dev));
    cJSON_AddNumberToObject(dv, "memory_total_gib", m.device_total / GIB);
    cJSON_AddNumberToObject(dv, "memory_used_gib", m.device_used / GIB);
    cJSON_AddStringToObject(dv, "gemm_math", gm >= 0 && gm < 3 ? math_names[gm] : "?");
    cJSON_AddBoolToObject(dv, "cuda_graphs", e->opts.use_cuda_graphs);
}

/* Every group's bytes, summed over ranks (collective: every rank passes the same group list). */
static void add_bytes(struct moe_eng *e, cJSON *o)
{
    moe_comm_t *groups[] = {e->groups.tp,      e->groups.cp,    e->groups.dp,    e->groups.dpcp,
                            e->groups.tpcp,    e->groups.pp,    e->groups.ep,    e->groups.etp,
                            e->groups.edp,     e->groups.stage, e->groups.embed, e->groups.ep_node,
                            e->groups.ep_cross};
    enum { NG = sizeof(groups) / sizeof(groups[0]) };
    double v[NG * MOE_NUM_COLLS];
    for (int g = 0; g < NG; g++) {
        for (int c = 0; c < MOE_NUM_COLLS; c++) {
            v[g * MOE_NUM_COLLS + c] =
                groups[g] != NULL ? moe_comm_bytes_sent(groups[g], (enum moe_comm_coll)c) : 0.0;
        }
    }
    /* Backward gradients travel on pp_bwd (engine/pipeline.c): both directions count as pp. */
    const int pp_idx = 5;
    for (int c = 0; c < MOE_NUM_COLLS; c++) {
        v[pp_idx * MOE_NUM_COLLS + c] +=
            e->groups.pp_bwd != NULL ? moe_comm_bytes_sent(e->groups.pp_bwd, (enum moe_comm_coll)c)
                                     : 0.0;
    }
    moe_comm_allreduce(e->ctx.world, v, v, (size_t)NG * MOE_NUM_COLLS, MOE_COMM_F64, MOE_COMM_SUM);
    if (o == NULL) {
        return;
    }
    const char *names[NG] = {"tp",  "cp",  "dp",    "dpcp",  "tpcp",    "pp",      "ep",
                             "etp", "edp", "stage", "embed", "ep_node", "ep_cross"};
    double per = (double)e->ctx.size * (double)(e->stats.num_steps > 0 ? e->stats.num_steps : 1);
    cJSON *b = cJSON_AddObjectToObject(o, "bytes_sent");
    for (int g = 0; g < NG; g++) {
        for (int c = 0; c < MOE_NUM_COLLS; c++) {
            double x = v[g * MOE_NUM_COLLS + c];
            if (x > 0.0) {
                char key[48];
                (void)snprintf(key, sizeof(key), "%s.%s", names[g],
                               moe_comm_coll_name((enum moe_comm_coll)c));
                cJSON_AddNumberToObject(b, key, x / per);
            }
        }
    }
}

/*
 * Per MoE layer: the sum over its forwards (micro-batches of every step) of the busiest EP rank's
 * expert rows over the sum of the EP group's mean rows -- the load the exchanges wait for, what
 * --moe-imbalance prices. [num_layers] on every rank (layers of other stages 1); heap memory.
 */
static double *rank_load_per_layer(struct moe_eng *e)
{
    enum { CHUNK = 1024 }; /* samples per exchange, bounded engine temporaries */
    const struct moe_eng_dims *d = &e->d;
    const struct moe_eng_stats *st = &e->stats;
    size_t nl = (size_t)d->num_layers;
    double *load = moe_eng_heap_alloc(&e->ctx.heap, nl * sizeof(double));
    if (load == NULL) {
        moe_eng_fatal(__FILE__, __LINE__, "out of memory for the expert load table");
    }
    int ep = moe_comm_size(e->groups.ep);
    for (size_t l = 0; l < nl; l++) {
        int k = st->num_ep_rows[l]; /* the same on every rank of the EP group */
        double num = 0.0;
        double den = 0.0;
        for (int s0 = 0; s0 < k; s0 += CHUNK) {
            size_t c = (size_t)(k - s0 < CHUNK ? k - s0 : CHUNK);
            struct moe_eng_tmark mark = moe_eng_tmark_take(e);
            int *hx = moe_eng_arena_ints(e->htemp, 2 * c);
            memcpy(hx, st->ep_rows + l * (size_t)st->cap_ep_rows + (size_t)s0, c * sizeof(int));
            memcpy(hx + c, hx, c * sizeof(int));
            int *dx = moe_eng_dev_ints(e, hx, 2 * c);
            moe_comm_allreduce(e->groups.ep, dx, dx, c, MOE_COMM_I32, MOE_COMM_MAX);
            moe_comm_allreduce(e->groups.ep, dx + c, dx + c, c, MOE_COMM_I32, MOE_COMM_SUM);
            const int *r = moe_eng_host_ints(e, dx, 2 * c);
            for (size_t s = 0; s < c; s++) {
                num += r[s];
                den += (double)r[c + s] / ep;
            }
            moe_eng_tmark_release(e, mark);
        }
        load[l] = den > 0.0 ? num / den : 0.0;
    }
    moe_comm_allreduce(e->ctx.world, load, load, nl, MOE_COMM_F64, MOE_COMM_MAX);
    for (size_t l = 0; l < nl; l++) {
        load[l] = load[l] > 0.0 ? load[l] : 1.0;
    }
    return load;
}

/* Expert token table [L, E] assembled on every rank (one contributor per stage). */
static void add_experts(struct moe_eng *e, cJSON *o)
{
    const struct moe_eng_dims *d = &e->d;
    if (d->experts == 0) {
        return;
    }
    size_t n = (size_t)d->num_layers * (size_t)d->experts;
    struct moe_eng_heap *heap = &e->ctx.heap;
    double *t = moe_eng_heap_alloc(heap, n * sizeof(double));
    if (t == NULL) {
        moe_eng_fatal(__FILE__, __LINE__, "out of memory for the expert token table");
    }
    bool contrib = e->groups.local_idx == 0;
    for (size_t i = 0; i < n; i++) {
        t[i] = contrib ? (double)e->stats.expert_tokens[i] : 0.0;
    }
    moe_comm_allreduce(e->ctx.world, t, t, n, MOE_COMM_F64, MOE_COMM_SUM);
    double *rank_load = rank_load_per_layer(e);
    if (o != NULL) {
        double steps = e->stats.num_steps > 0 ? (double)e->stats.num_steps : 1.0;
        cJSON *arr = cJSON_AddArrayToObject(o, "tokens_per_expert");
        cJSON *imb = cJSON_AddArrayToObject(o, "expert_load_max_over_mean");
        cJSON *rimb = cJSON_AddArrayToObject(o, "expert_load_rank_max_over_mean");
        for (int l = 0; l < d->num_layers; l++) {
            if (!(e->plan.model.layer_flags[l] & MOE_LAYER_MOE)) {
                continue;
            }
            cJSON *row = cJSON_CreateArray();
            double mx = 0.0, sum = 0.0;
            for (int x = 0; x < d->experts; x++) {
                double c = t[(size_t)l * (size_t)d->experts + (size_t)x] / steps;
                cJSON_AddItemToArray(row, cJSON_CreateNumber(c));
                mx = c > mx ? c : mx;
                sum += c;
            }
            cJSON_AddItemToArray(arr, row);
            cJSON_AddItemToArray(imb, cJSON_CreateNumber(sum > 0.0 ? mx * d->experts / sum : 0.0));
            cJSON_AddItemToArray(rimb, cJSON_CreateNumber(rank_load[l]));
        }
    }
    moe_eng_heap_free(heap, rank_load, (size_t)d->num_layers * sizeof(double));
    moe_eng_heap_free(heap, t, n * sizeof(double));
}

static void add_layout(const struct moe_eng *e, cJSON *o)
{
    const struct moe_layout *l = &e->plan.layout;
    cJSON *j = cJSON_AddObjectToObject(o, "layout");
    cJSON_AddNumberToObject(j, "tp", l->tp);
    cJSON_AddNumberToObject(j, "cp", l->cp);
    cJSON_AddNumberToObject(j, "dp", l->dp);
    cJSON_AddNumberToObject(j, "pp", l->pp);
    cJSON_AddNumberToObject(j, "vpp", l->vpp);
    cJSON_AddNumberToObject(j, "ep", l->ep);
    cJSON_AddNumberToObject(j, "etp", l->etp);
    cJSON_AddNumberToObject(j, "edp", l->edp);
    cJSON_AddNumberToObject(j, "mbs", l->mbs);
    cJSON_AddNumberToObject(j, "gbs", l->gbs);
    cJSON_AddNumberToObject(j, "num_microbatches", l->num_microbatches);
    cJSON_AddNumberToObject(j, "seq_length", l->seq_length);
}

static void add_ran(const struct moe_eng *e, cJSON *o)
{
    struct moe_options ran;
    char diffs[MOE_ENG_MAX_DIFFS][160];
    int n = 0;
    moe_eng_ran_options(e, &ran, diffs, &n);
    cJSON *r = moe_plan_options_to_json(&ran);
    if (r != NULL) {
        cJSON_AddItemToObject(o, "ran", r);
    }
    cJSON *d = cJSON_AddArrayToObject(o, "plan_differences");
    for (int i = 0; i < n; i++) {
        cJSON_AddItemToArray(d, cJSON_CreateString(diffs[i]));
    }
}

enum moe_status
moe_eng_write_run(moe_eng_t *e, const char *path, const char *plan_json, struct moe_diag *diag)
{
    int n = e->ctx.size;
    /* Reporting happens after training, outside any step: heap memory is fine here. */
    double *all =
        moe_eng_heap_alloc(&e->ctx.heap, (size_t)SUM_LEN * (size_t)(n + 1) * sizeof(double));
    if (all == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the run report");
    }
    double *mine = all + (size_t)SUM_LEN * (size_t)n;
    moe_eng_timing_flush(e); /* the steps' wait shares */
    rank_summary(e, mine);
    moe_comm_allgather(e->ctx.world, mine, all, SUM_LEN, MOE_COMM_F64);
    int crit_stage = 0;
    int mem_rank = 0;
    double best_mem = -1.0;
    double cs[SUM_LEN] = {0};
    stage_means(e, all, &crit_stage, cs);
    int crit = crit_stage * e->plan.layout.tp * e->plan.layout.cp * e->plan.layout.dp;
    int wait_bad = e->has_wait_log && !e->has_wait_mismatch ? 0 : 1;
    moe_comm_allreduce(e->ctx.world, &wait_bad, &wait_bad, 1, MOE_COMM_I32, MOE_COMM_MAX);
    for (int r = 0; r < n; r++) {
        const double *s = all + (size_t)r * SUM_LEN;
        double tot = s[SUM_MEM] + s[SUM_MEM + 1] + s[SUM_MEM + 2] + s[SUM_MEM + 3] + s[SUM_MEM + 4];
        if (tot > best_mem) {
            best_mem = tot;
            mem_rank = r;
        }
    }
    double peak_rss = 0.0;
    double rows_factor = 0.0;
    for (int r = 0; r < n; r++) {
        peak_rss = fmax(peak_rss, all[(size_t)r * SUM_LEN + SUM_MEM + 6]);
        rows_factor = fmax(rows_factor, all[(size_t)r * SUM_LEN + SUM_ROWS]);
    }
    double dropped = e->stats.bytes_dropped; /* slots dropped on this rank, summed over ranks */
    moe_comm_allreduce(e->ctx.world, &dropped, &dropped, 1, MOE_COMM_F64, MOE_COMM_SUM);
    double active[2] = {e->stats.experts_active, e->stats.experts_called}; /* summed over ranks */
    moe_comm_allreduce(e->ctx.world, active, active, 2, MOE_COMM_F64, MOE_COMM_SUM);
    /* summed over ranks (the spread is the same on every rank) */
    double probe[3] = {e->stats.probe_us, (double)e->stats.probe_calls, e->stats.probe_spread};
    moe_comm_allreduce(e->ctx.world, probe, probe, 3, MOE_COMM_F64, MOE_COMM_SUM);
    cJSON *o = e->ctx.rank == 0 ? cJSON_CreateObject() : NULL;
    if (o != NULL) {
        cJSON_AddStringToObject(o, "format", "moefold-run");
        cJSON_AddNumberToObject(o, "version", 1);
        cJSON_AddStringToObject(o, "model", e->plan.model.name);
        cJSON_AddStringToObject(o, "cluster", e->plan.cluster);
        cJSON_AddStringToObject(o, "backend", moe_eng_backend_name(e));
        cJSON_AddNumberToObject(o, "num_ranks", n);
        if (e->opts.ranks_per_node > 0) {
            cJSON_AddNumberToObject(o, "ranks_per_node", e->opts.ranks_per_node);
        }
        add_layout(e, o);
        cJSON_AddNumberToObject(o, "steps", e->stats.num_steps);
        cJSON_AddNumberToObject(o, "measured_steps", e->stats.num_measured);
        double tokens = (double)e->plan.layout.gbs * (double)e->d.seq;
        cJSON_AddNumberToObject(o, "tokens_per_step", tokens);
        cJSON_AddNumberToObject(o, "step_time_s", cs[SUM_STEP]);
        cJSON_AddNumberToObject(o, "tokens_per_s", cs[SUM_STEP] > 0 ? tokens / cs[SUM_STEP] : 0.0);
        cJSON_AddNumberToObject(o, "tokens_per_s_per_rank",
                                cs[SUM_STEP] > 0 ? tokens / cs[SUM_STEP] / n : 0.0);
        cJSON_AddNumberToObject(o, "critical_rank", crit);
        cJSON_AddNumberToObject(o, "critical_stage", crit_stage);
        add_phases(o, cs + SUM_PHASES, cs + SUM_WAITS);
        add_host_probe(o, e, probe);
        cJSON_AddBoolToObject(o, "wait_measured", wait_bad == 0);
        add_ran(e, o);
        add_phase_definitions(o);
        cJSON *steps = cJSON_AddArrayToObject(o, "per_step");
        int ns = e->stats.num_steps < e->stats.cap_steps ? e->stats.num_steps : e->stats.cap_steps;
        for (int i = 0; i < ns; i++) {
            cJSON *s = cJSON_CreateObject();
            cJSON_AddNumberToObject(s, "step", e->step - e->stats.num_steps + i + 1);
            cJSON_AddNumberToObject(s, "loss", e->stats.loss[i]);
            cJSON_AddNumberToObject(s, "step_time_s", e->stats.step_s[i]);
            cJSON_AddItemToArray(steps, s);
        }
        add_memory(o, all + (size_t)mem_rank * SUM_LEN + SUM_MEM);
        add_buffer_parts(o, all + (size_t)mem_rank * SUM_LEN + SUM_BUFS);
        cJSON_AddNumberToObject(o, "memory_rank", mem_rank);
        if (e->d.experts > 0) {
            cJSON_AddNumberToObject(o, "expert_rows_factor", rows_factor);
        }
        if (e->d.experts > 0 && active[1] > 0.0) {
            cJSON_AddNumberToObject(o, "expert_active_fraction", active[0] / active[1]);
        }
        cJSON_AddNumberToObject(o, "peak_rss_gib", peak_rss / GIB);
        add_device(e, o);
        cJSON_AddNumberToObject(o, "offload_copy_s", e->stats.offload_s);
        double slots = (double)e->plan.layout.gbs * e->d.seq * e->d.topk *
                       (double)moe_cfg_num_moe_layers(&e->plan.model) *
                       (double)(e->stats.num_steps > 0 ? e->stats.num_steps : 1);
        cJSON_AddNumberToObject(o, "dropped_token_fraction", slots > 0 ? dropped / slots : 0.0);
    }
    add_bytes(e, o);
    add_experts(e, o);
    if (e->opts.trace_step > 0) {
        add_timeline(e, o);
    }
    enum moe_status st = MOE_OK;
    if (e->stats.kernel_s != NULL && add_kernel_profile(e, o, crit_stage) != MOE_OK) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the kernel profile's report");
    }
    if (o != NULL) {
        if (plan_json != NULL) {
            cJSON *p = cJSON_Parse(plan_json);
            if (p != NULL) {
                cJSON_AddItemToObject(o, "plan", p);
            }
        }
        st = st == MOE_OK ? moe_json_write_file(path, o, diag) : st;
        cJSON_Delete(o);
        for (int p = 0; p < MOE_NUM_PHASES && st == MOE_OK; p++) {
            moe_eng_log_debug(&e->ctx.log, "phase %-13s %8.3f ms: %s",
                              moe_phase_name((enum moe_phase)p), cs[SUM_PHASES + p] * 1e3,
                              phase_how[p]);
        }
    }
    moe_eng_heap_free(&e->ctx.heap, all, (size_t)SUM_LEN * (size_t)(n + 1) * sizeof(double));
    int v = -(int)st;
    moe_comm_bcast(e->ctx.world, &v, 1, MOE_COMM_I32, 0);
    if (v != 0 && st == MOE_OK) {
        (void)moe_diag_set(diag, (enum moe_status)(-v), "rank 0 could not write %s", path);
    }
    return (enum moe_status)(-v);
}
