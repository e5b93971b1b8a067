/*
 * MoE token movement on the CPU, in DeepEP's vocabulary: the dispatch layout (tokens per expert,
 * tokens per rank, the slot <-> row permutation) computed from top-k indices, the permute that
 * gathers token copies into expert-contiguous rows, the weighted unpermute ("combine") and their
 * backward passes, and the chunk sort that regroups rows after an all-to-all (Megatron-LM's
 * sort_chunks_by_idxs). Counting-sort layout: O(M*K + E), stable, no scratch.
 *
 * Capacity drop follows Megatron-LM's "position" policy without padding: each expert keeps its
 * first `capacity` slots in slot order (token order, then k). Dropped slots contribute nothing
 * forward and receive no gradient.
 */
#include "kernels/cpu/cpu.h"

#include <string.h>

void moe_k_cpu_expert_counts(
    int *counts, const int *topk_idx, int num_tokens, int topk, int num_experts, moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && num_experts > 0);
    memset(counts, 0, (size_t)num_experts * sizeof(*counts));
    size_t num_slots = (size_t)num_tokens * (size_t)topk;
    for (size_t s = 0; s < num_slots; s++) {
        MOE_ASSERT(topk_idx[s] >= 0 && topk_idx[s] < num_experts);
        counts[topk_idx[s]]++;
    }
}

/* tokens_per_rank[N]: tokens with at least one kept slot on rank r's experts (E/N per rank). */
static void count_tokens_per_rank(int *tokens_per_rank,
                                  const int *slot_to_row,
                                  const int *topk_idx,
                                  int num_tokens,
                                  int topk,
                                  int experts_per_rank,
                                  int num_ranks)
{
    memset(tokens_per_rank, 0, (size_t)num_ranks * sizeof(*tokens_per_rank));
    for (int t = 0; t < num_tokens; t++) {
        const int *idx = topk_idx + (size_t)t * (size_t)topk;
        const int *rows = slot_to_row + (size_t)t * (size_t)topk;
        for (int r = 0; r < num_ranks; r++) {
            for (int k = 0; k < topk; k++) {
                if (rows[k] >= 0 && idx[k] / experts_per_rank == r) {
                    tokens_per_rank[r]++;
                    break;
                }
            }
        }
    }
}

void moe_k_cpu_dispatch_layout(int *tokens_per_expert,
                               int *tokens_per_rank,
                               int *slot_to_row,
                               int *row_to_slot,
                               const int *topk_idx,
                               int num_tokens,
                               int topk,
                               int num_experts,
                               int num_ranks,
                               int capacity,
                               moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && num_experts > 0);
    MOE_ASSERT(num_ranks > 0 && num_experts % num_ranks == 0);
    int num_slots = num_tokens * topk;
    /* Pass 1: position of each slot inside its expert; drop past capacity. */
    memset(tokens_per_expert, 0, (size_t)num_experts * sizeof(*tokens_per_expert));
    for (int s = 0; s < num_slots; s++) {
        int e = topk_idx[s];
        MOE_ASSERT(e >= 0 && e < num_experts);
        int pos = tokens_per_expert[e]++;
        slot_to_row[s] = (capacity > 0 && pos >= capacity) ? -1 : pos;
    }
    /* Exclusive prefix of kept counts, in place, so row = offset[e] + position. */
    int offset = 0;
    for (int e = 0; e < num_experts; e++) {
        int kept = tokens_per_expert[e];
        if (capacity > 0 && kept > capacity) {
            kept = capacity;
        }
        tokens_per_expert[e] = offset;
        offset += kept;
    }
    int num_rows = offset;
    for (int s = 0; s < num_slots; s++) {
        if (slot_to_row[s] >= 0) {
            slot_to_row[s] += tokens_per_expert[topk_idx[s]];
        }
    }
    /* Back from offsets to counts. */
    for (int e = 0; e < num_experts; e++) {
        int next = e + 1 < num_experts ? tokens_per_expert[e + 1] : num_rows;
        tokens_per_expert[e] = next - tokens_per_expert[e];
    }
    for (int p = 0; p < num_slots; p++) {
        row_to_slot[p] = -1;
    }
    for (int s = 0; s < num_slots; s++) {
        if (slot_to_row[s] >= 0) {
            row_to_slot[slot_to_row[s]] = s;
        }
    }
    count_tokens_per_rank(tokens_per_rank, slot_to_row, topk_idx, num_tokens, topk,
                          num_experts / num_ranks, num_ranks);
}

void moe_k_cpu_permute(float *rows,
                       const float *x,
                       const int *row_to_slot,
                       int num_rows,
                       int topk,
                       int hidden,
                       moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_rows >= 0 && topk > 0 && hidden > 0);
    size_t row_bytes = (size_t)hidden * sizeof(float);
    for (int p = 0; p < num_rows; p++) {
        int token = row_to_slot[p] / topk;
        MOE_ASSERT(row_to_slot[p] >= 0);
        memcpy(rows + (size_t)p * (size_t)hidden, x + (size_t)token * (size_t)hidden, row_bytes);
    }
}

void moe_k_cpu_permute_bwd(float *dx,
                           const float *d_rows,
                           const int *slot_to_row,
                           int num_tokens,
                           int topk,
                           int hidden,
                           bool accumulate,
                           moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && hidden > 0);
    for (int t = 0; t < num_tokens; t++) {
        float *d = dx + (size_t)t * (size_t)hidden;
        if (!accumulate) {
            memset(d, 0, (size_t)hidden * sizeof(float));
        }
        for (int k = 0; k < topk; k++) {
            int row = slot_to_row[(size_t)t * (size_t)topk + (size_t)k];
            if (row < 0) {
                continue;
            }
            const float *g = d_rows + (size_t)row * (size_t)hidden;
#pragma omp simd
            for (int c = 0; c < hidden; c++) {
                d[c] += g[c];
            }
        }
    }
}

void moe_k_cpu_unpermute(float *y,
                         const float *rows,
                         const float *weights,
                         const int *slot_to_row,
                         int num_tokens,
                         int topk,
                         int hidden,
                         moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && hidden > 0);
    for (int t = 0; t < num_tokens; t++) {
        float *out = y + (size_t)t * (size_t)hidden;
        memset(out, 0, (size_t)hidden * sizeof(float));
        for (int k = 0; k < topk; k++) {
            size_t slot = (size_t)t * (size_t)topk + (size_t)k;
            int row = slot_to_row[slot];
            if (row < 0) {
                continue;
            }
            float w = weights != NULL ? weights[slot] : 1.0f;
            const float *src = rows + (size_t)row * (size_t)hidden;
#pragma omp simd
            for (int c = 0; c < hidden; c++) {
                out[c] += w * src[c];
            }
        }
    }
}

/* sum g[c] r[c] in double over eight lanes (element c into lane c % 8, lanes summed in order):
 * the same on every run and vector width, without the serial add chain of one accumulator, which
 * made this op several times slower than the forward unpermute. */
static double dot_lanes(const float *g, const float *r, int n)
{
    enum { LANES = 8 };
    double acc[LANES] = {0.0};
    int body = n - n % LANES;
    for (int c = 0; c < body; c += LANES) {
#pragma omp simd
        for (int l = 0; l < LANES; l++) {
            acc[l] += (double)g[c + l] * (double)r[c + l];
        }
    }
    for (int c = body; c < n; c++) {
        acc[c - body] += (double)g[c] * (double)r[c];
    }
    double total = 0.0;
    for (int l = 0; l < LANES; l++) {
        total += acc[l];
    }
    return total;
}

void moe_k_cpu_unpermute_bwd(float *d_rows,
                             float *d_weights,
                             const float *dy,
                             const float *rows,
                             const float *weights,
                             const int *slot_to_row,
                             int num_tokens,
                             int topk,
                             int hidden,
                             moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && hidden > 0);
    MOE_ASSERT(weights != NULL || d_weights == NULL);
    for (int t = 0; t < num_tokens; t++) {
        const float *g = dy + (size_t)t * (size_t)hidden;
        for (int k = 0; k < topk; k++) {
            size_t slot = (size_t)t * (size_t)topk + (size_t)k;
            int row = slot_to_row[slot];
            if (row < 0) {
                if (d_weights != NULL) {
                    d_weights[slot] = 0.0f;
                }
                continue;
            }
            float w = weights != NULL ? weights[slot] : 1.0f;
            float *dr = d_rows + (size_t)row * (size_t)hidden;
            const float *r = rows + (size_t)row * (size_t)hidden;
#pragma omp simd
            for (int c = 0; c < hidden; c++) {
                dr[c] = w * g[c];
            }
            if (d_weights != NULL) {
                d_weights[slot] = (float)dot_lanes(g, r, hidden);
            }
        }
    }
}

/* Copy chunks between the original (index-ordered) and sorted layouts. */
static void move_chunks(float *out,
                        const float *in,
                        const int *chunk_rows,
                        const int *chunk_order,
                        int num_chunks,
                        int hidden,
                        bool to_sorted)
{
    size_t sorted_row = 0;
    for (int i = 0; i < num_chunks; i++) {
        int c = chunk_order[i];
        MOE_ASSERT(c >= 0 && c < num_chunks && chunk_rows[c] >= 0);
        size_t orig_row = 0;
        for (int j = 0; j < c; j++) {
            orig_row += (size_t)chunk_rows[j];
        }
        size_t bytes = (size_t)chunk_rows[c] * (size_t)hidden * sizeof(float);
        if (bytes == 0) {
            continue;
        }
        if (to_sorted) {
            memcpy(out + sorted_row * (size_t)hidden, in + orig_row * (size_t)hidden, bytes);
        } else {
            memcpy(out + orig_row * (size_t)hidden, in + sorted_row * (size_t)hidden, bytes);
        }
        sorted_row += (size_t)chunk_rows[c];
    }
}

void moe_k_cpu_sort_chunks(float *out,
                           const float *in,
                           const int *chunk_rows,
                           const int *chunk_order,
                           int num_chunks,
                           int hidden,
                           moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_chunks >= 0 && hidden > 0);
    move_chunks(out, in, chunk_rows, chunk_order, num_chunks, hidden, true);
}

void moe_k_cpu_unsort_chunks(float *out,
                             const float *in,
                             const int *chunk_rows,
                             const int *chunk_order,
                             int num_chunks,
                             int hidden,
                             moe_k_ctx_t *ctx)
{
    (void)ctx;
    MOE_ASSERT(num_chunks >= 0 && hidden > 0);
    move_chunks(out, in, chunk_rows, chunk_order, num_chunks, hidden, false);
}
