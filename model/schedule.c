/*
 * Pipeline schedule timing (model/schedule.h). The op order follows Megatron-LM's
 * core/pipeline_parallel/schedules.py: non-interleaved 1F1B runs pp-p-1 warm-up forwards on rank p;
 * interleaved runs (pp-p-1)*2 + (vpp-1)*pp warm-up forwards, and maps the k-th forward to chunk
 * (k / pp) % vpp and micro-batch (k / (pp*vpp)) * pp + k % pp (backward chunks in reverse order).
 */
#include "model/schedule.h"

#include <math.h>
#include <string.h>

void moe_sched_closed_form_sums(double sum_s,
                                double max_s,
                                int pp,
                                int vpp,
                                int num_microbatches,
                                double p2p_s,
                                struct moe_sched_result *out)
{
    double fill = (sum_s - max_s) / (double)vpp;
    /* Each fill and drain hop pays one transfer. */
    double hops = pp > 1 ? 2.0 * (double)(pp - 1) : 0.0;
    out->busy_max_s = (double)num_microbatches * max_s;
    out->total_s = out->busy_max_s + fill + hops * p2p_s;
    out->bubble_s = out->total_s - out->busy_max_s;
}

void moe_sched_closed_form(const struct moe_sched_input *in, struct moe_sched_result *out)
{
    double max_s = 0.0;
    double sum_s = 0.0;
    for (int p = 0; p < in->pp; p++) {
        double s = 0.0;
        for (int v = 0; v < in->vpp; v++) {
            int c = v * in->pp + p;
            s += in->fwd_s[c] + in->bwd_s[c];
        }
        sum_s += s;
        if (s > max_s) {
            max_s = s;
        }
    }
    moe_sched_closed_form_sums(sum_s, max_s, in->pp, in->vpp, in->num_microbatches, in->p2p_s, out);
}

size_t moe_sched_workspace_bytes(int pp, int vpp, int num_microbatches)
{
    size_t chunks = (size_t)pp * (size_t)vpp;
    /* done_f, done_b per (micro-batch, chunk) + per-rank cursors and clocks */
    return 2 * chunks * (size_t)num_microbatches * sizeof(double) +
           2 * (size_t)pp * sizeof(double) + (size_t)pp * sizeof(int) * 2;
}

/* Chunk (global index) and micro-batch of the k-th forward or backward op on rank p. */
static void
op_target(const struct moe_sched_input *in, int p, int k, int backward, int *mb, int *chunk)
{
    int pp = in->pp;
    int vpp = in->vpp;
    if (vpp == 1) {
        *mb = k;
        *chunk = p;
        return;
    }
    int group = pp * vpp;
    int v = (k / pp) % vpp;
    if (backward) {
        v = vpp - 1 - v;
    }
    *mb = (k / group) * pp + k % pp;
    *chunk = v * pp + p;
}

/* Number of warm-up forwards on rank p. */
static int warmup_count(const struct moe_sched_input *in, int p)
{
    int total = in->num_microbatches * in->vpp;
    int w = in->vpp == 1 ? in->pp - p - 1 : (in->pp - p - 1) * 2 + (in->vpp - 1) * in->pp;
    return w < total ? w : total;
}

/* The i-th op of rank p: sets *is_bwd and *k (index among that kind). Returns 0 past the end. */
static int op_at(const struct moe_sched_input *in, int p, int i, int *is_bwd, int *k)
{
    int total = in->num_microbatches * in->vpp;
    int w = warmup_count(in, p);
    if (i >= 2 * total) {
        return 0;
    }
    if (i < w) {
        *is_bwd = 0;
        *k = i;
        return 1;
    }
    int steady = total - w; /* pairs of (forward, backward) */
    int j = i - w;
    if (j < 2 * steady) {
        *is_bwd = j % 2;
        *k = *is_bwd ? j / 2 : w + j / 2;
        return 1;
    }
    *is_bwd = 1;
    *k = steady + (j - 2 * steady);
    return 1;
}

enum moe_status moe_sched_simulate(const struct moe_sched_input *in,
                                   void *ws,
                                   size_t ws_bytes,
                                   struct moe_sched_result *out)
{
    if (in->pp < 1 || in->vpp < 1 || in->num_microbatches < 1) {
        return MOE_ERR_INVALID;
    }
    if (ws == NULL || ws_bytes < moe_sched_workspace_bytes(in->pp, in->vpp, in->num_microbatches)) {
        return MOE_ERR_INVALID;
    }
    int pp = in->pp;
    int chunks = pp * in->vpp;
    int m = in->num_microbatches;
    size_t cells = (size_t)chunks * (size_t)m;
    double *done_f = ws;
    double *done_b = done_f + cells;
    double *clock = done_b + cells;
    double *busy = clock + pp;
    /* The ints follow the doubles (the workspace is double-aligned, so they are aligned too). */
    // cppcheck-suppress invalidPointerCast
    int *cursor = (int *)(busy + pp);
    for (size_t i = 0; i < 2 * cells; i++) {
        done_f[i] = -1.0;
    }
    memset(clock, 0, 2 * (size_t)pp * sizeof(double));
    memset(cursor, 0, (size_t)pp * sizeof(int));
    if (in->start_s != NULL) {
        for (int p = 0; p < pp; p++) {
            clock[p] = in->start_s[p] > 0.0 ? in->start_s[p] : 0.0;
        }
    }

    long remaining = 2L * (long)cells;
    while (remaining > 0) {
        int progressed = 0;
        for (int p = 0; p < pp; p++) {
            for (;;) {
                int is_bwd;
                int k;
                if (!op_at(in, p, cursor[p], &is_bwd, &k)) {
                    break;
                }
                int mb;
                int c;
                op_target(in, p, k, is_bwd, &mb, &c);
                if (mb >= m) {
                    /* m not a multiple of pp with interleaving: skip the missing slot. */
                    cursor[p]++;
                    remaining--;
                    continue;
                }
                double ready;
                size_t cell = (size_t)mb * (size_t)chunks + (size_t)c;
                if (!is_bwd) {
                    ready = 0.0;
                    if (c > 0) {
                        double up = done_f[cell - 1];
                        if (up < 0.0) {
                            break;
                        }
                        ready = up + in->p2p_s;
                    }
                } else {
                    if (c == chunks - 1) {
                        ready = done_f[cell];
                        if (ready < 0.0) {
                            break;
                        }
                    } else {
                        double down = done_b[cell + 1];
                        if (down < 0.0) {
                            break;
                        }
                        ready = down + in->p2p_s;
                    }
                }
                double dur = is_bwd ? in->bwd_s[c] : in->fwd_s[c];
                double start = ready > clock[p] ? ready : clock[p];
                clock[p] = start + dur;
                busy[p] += dur;
                if (is_bwd) {
                    done_b[cell] = clock[p];
                } else {
                    done_f[cell] = clock[p];
                }
                cursor[p]++;
                remaining--;
                progressed = 1;
            }
        }
        if (!progressed) {
            return MOE_ERR_INVALID; /* dependency cycle: an op order Megatron would deadlock on */
        }
    }
    double total = 0.0;
    double busy_max = 0.0;
    for (int p = 0; p < pp; p++) {
        total = clock[p] > total ? clock[p] : total;
        busy_max = busy[p] > busy_max ? busy[p] : busy_max;
    }
    out->total_s = total;
    out->busy_max_s = busy_max;
    out->bubble_s = total - busy_max;
    return MOE_OK;
}

double moe_sched_op_end(const struct moe_sched_input *in, const void *ws, int mb, int c, int is_bwd)
{
    size_t cells = (size_t)in->pp * (size_t)in->vpp * (size_t)in->num_microbatches;
    const double *done = (const double *)ws + (is_bwd ? cells : 0);
    return done[(size_t)mb * (size_t)(in->pp * in->vpp) + (size_t)c];
}

void moe_sched_rank_times(
    const struct moe_sched_input *in, const void *ws, int p, double *end_s, double *busy_s)
{
    size_t cells = (size_t)in->pp * (size_t)in->vpp * (size_t)in->num_microbatches;
    const double *clock = (const double *)ws + 2 * cells;
    *end_s = clock[p];
    *busy_s = clock[in->pp + p];
}

int moe_sched_op(const struct moe_sched_input *in, int p, int i, int *mb, int *chunk, int *is_bwd)
{
    int k = 0;
    if (!op_at(in, p, i, is_bwd, &k)) {
        return 0;
    }
    op_target(in, p, k, *is_bwd, mb, chunk);
    return 1;
}
