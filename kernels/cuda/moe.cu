/*
 * MoE token movement on the GPU, twins of kernels/cpu/moe.c in DeepEP's vocabulary: expert
 * counts, the dispatch layout (slot <-> permuted row, tokens per expert and per rank, optional
 * capacity with Megatron's "position" drop policy), permute, the weighted combine (unpermute),
 * their backward passes, and the chunk sort after an all-to-all. Results are exactly the CPU's: the
 * layout is integer work made order-independent (a slot's position inside its expert is the
 * number of earlier slots routed there, found by one block per expert scanning the slots in
 * order with ballots), integer atomics only count, and the float sums over a token's k copies run
 * in k order without FMA contraction. Only the d_weights dot products (double, tree order) differ
 * from the CPU by rounding order.
 *
 * Indices are trusted as in the CPU backend (callers validate): an expert index outside [0, E)
 * is skipped rather than written out of bounds, and its slot reads as dropped (-1).
 */
#include "kernels/cuda/cuda_common.cuh"

#include <stdint.h>

static __global__ void
expert_counts_kernel(int *counts, const int *topk_idx, size_t num_slots, int num_experts)
{
    for (size_t s = blockIdx.x * (size_t)blockDim.x + threadIdx.x; s < num_slots;
         s += (size_t)gridDim.x * blockDim.x) {
        int e = topk_idx[s];
        if (e >= 0 && e < num_experts) {
            atomicAdd(&counts[e], 1);
        }
    }
}

extern "C" void moe_k_cuda_expert_counts(
    int *counts, const int *topk_idx, int num_tokens, int topk, int num_experts, moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && num_experts > 0);
    cudaStream_t s = moe_k_cuda_stream(ctx);
    MOE_CHECK_CUDA(cudaMemsetAsync(counts, 0, (size_t)num_experts * sizeof(int), s));
    size_t num_slots = (size_t)num_tokens * (size_t)topk;
    if (num_slots == 0) {
        return;
    }
    expert_counts_kernel<<<moe_k_cuda_blocks(num_slots, MOE_K_CUDA_THREADS), MOE_K_CUDA_THREADS, 0,
                           s>>>(counts, topk_idx, num_slots, num_experts);
    MOE_CHECK_LAUNCH();
}

/* ---- Dispatch layout ---------------------------------------------------------------------------
 */

/*
 * Block e: positions of expert e's slots in slot order. slot_to_row[s] = position (or -1 past
 * capacity); raw_counts[e] = number of slots routed to e. blockDim.x = MOE_K_CUDA_THREADS.
 */
static __global__ void expert_positions_kernel(
    int *slot_to_row, int *raw_counts, const int *topk_idx, int num_slots, int capacity)
{
    __shared__ int warp_counts[MOE_K_CUDA_THREADS / 32];
    int e = (int)blockIdx.x;
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int running = 0;
    for (int base = 0; base < num_slots; base += blockDim.x) {
        int s = base + (int)threadIdx.x;
        bool hit = s < num_slots && topk_idx[s] == e;
        unsigned ballot = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) {
            warp_counts[warp] = __popc(ballot);
        }
        __syncthreads();
        int before = running;
        int total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
            before += w < warp ? warp_counts[w] : 0;
            total += warp_counts[w];
        }
        if (hit) {
            int pos = before + __popc(ballot & ((1u << lane) - 1u));
            slot_to_row[s] = (capacity > 0 && pos >= capacity) ? -1 : pos;
        }
        running += total;
        __syncthreads(); /* warp_counts is rewritten next round */
    }
    if (threadIdx.x == 0) {
        raw_counts[e] = running;
    }
}

/* One thread: kept counts (capped) into tokens_per_expert, exclusive offsets into offsets[E + 1].
 */
static __global__ void
expert_offsets_kernel(int *tokens_per_expert, int *offsets, int num_experts, int capacity)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) {
        return;
    }
    int offset = 0;
    for (int e = 0; e < num_experts; e++) {
        int kept = tokens_per_expert[e];
        if (capacity > 0 && kept > capacity) {
            kept = capacity;
        }
        offsets[e] = offset;
        tokens_per_expert[e] = kept;
        offset += kept;
    }
    offsets[num_experts] = offset;
}

/* Thread i: slot i's final row and row_to_slot entry; entries past R read -1. */
static __global__ void scatter_rows_kernel(int *slot_to_row,
                                           int *row_to_slot,
                                           const int *topk_idx,
                                           const int *offsets,
                                           int num_slots,
                                           int num_experts)
{
    int num_rows = offsets[num_experts];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < num_slots;
         i += gridDim.x * blockDim.x) {
        int pos = slot_to_row[i];
        if (pos >= 0) {
            int row = pos + offsets[topk_idx[i]];
            slot_to_row[i] = row;
            row_to_slot[row] = i;
        }
        if (i >= num_rows) {
            row_to_slot[i] = -1;
        }
    }
}

/* Thread t: tokens_per_rank[r] += 1 for each rank r holding one of t's kept slots. */
static __global__ void tokens_per_rank_kernel(int *tokens_per_rank,
                                              const int *slot_to_row,
                                              const int *topk_idx,
                                              int num_tokens,
                                              int topk,
                                              int experts_per_rank,
                                              int num_ranks)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < num_tokens;
         t += gridDim.x * blockDim.x) {
        const int *idx = topk_idx + (size_t)t * (size_t)topk;
        const int *rows = slot_to_row + (size_t)t * (size_t)topk;
        for (int r = 0; r < num_ranks; r++) {
            for (int k = 0; k < topk; k++) {
                if (rows[k] >= 0 && idx[k] / experts_per_rank == r) {
                    atomicAdd(&tokens_per_rank[r], 1);
                    break;
                }
            }
        }
    }
}

extern "C" void moe_k_cuda_dispatch_layout(int *tokens_per_expert,
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
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && num_experts > 0);
    MOE_ASSERT(num_ranks > 0 && num_experts % num_ranks == 0);
    MOE_ASSERT((size_t)(num_experts + 1) * sizeof(int) <= MOE_K_CUDA_SCRATCH_BYTES);
    cudaStream_t s = moe_k_cuda_stream(ctx);
    int *offsets = (int *)moe_k_cuda_state_of(ctx)->scratch;
    int num_slots = num_tokens * topk;
    size_t slot_bytes = (size_t)num_slots * sizeof(int);
    MOE_CHECK_CUDA(cudaMemsetAsync(tokens_per_rank, 0, (size_t)num_ranks * sizeof(int), s));
    if (num_slots > 0) {
        MOE_CHECK_CUDA(cudaMemsetAsync(slot_to_row, 0xFF, slot_bytes, s)); /* -1 */
    }
    expert_positions_kernel<<<(unsigned)num_experts, MOE_K_CUDA_THREADS, 0, s>>>(
        slot_to_row, tokens_per_expert, topk_idx, num_slots, capacity);
    MOE_CHECK_LAUNCH();
    expert_offsets_kernel<<<1, 32, 0, s>>>(tokens_per_expert, offsets, num_experts, capacity);
    MOE_CHECK_LAUNCH();
    if (num_slots == 0) {
        return;
    }
    unsigned blocks = moe_k_cuda_blocks((size_t)num_slots, MOE_K_CUDA_THREADS);
    scatter_rows_kernel<<<blocks, MOE_K_CUDA_THREADS, 0, s>>>(slot_to_row, row_to_slot, topk_idx,
                                                              offsets, num_slots, num_experts);
    MOE_CHECK_LAUNCH();
    tokens_per_rank_kernel<<<moe_k_cuda_blocks((size_t)num_tokens, MOE_K_CUDA_THREADS),
                             MOE_K_CUDA_THREADS, 0, s>>>(tokens_per_rank, slot_to_row, topk_idx,
                                                         num_tokens, topk, num_experts / num_ranks,
                                                         num_ranks);
    MOE_CHECK_LAUNCH();
}

/* ---- Permute and combine ----------------------------------------------------------------------
 */

/* Blocks over rows (grid-stride), threads over the hidden dim. */
static __global__ void permute_kernel(
    float *rows, const float *x, const int *row_to_slot, int num_rows, int topk, int hidden)
{
    for (int p = blockIdx.x; p < num_rows; p += gridDim.x) {
        size_t token = (size_t)(row_to_slot[p] / topk);
        const float *src = x + token * (size_t)hidden;
        float *dst = rows + (size_t)p * (size_t)hidden;
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            dst[c] = src[c];
        }
    }
}

static unsigned row_blocks(int num_rows)
{
    return (unsigned)(num_rows < MOE_K_CUDA_MAX_BLOCKS ? (num_rows > 0 ? num_rows : 1)
                                                       : MOE_K_CUDA_MAX_BLOCKS);
}

extern "C" void moe_k_cuda_permute(float *rows,
                                   const float *x,
                                   const int *row_to_slot,
                                   int num_rows,
                                   int topk,
                                   int hidden,
                                   moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_rows >= 0 && topk > 0 && hidden > 0);
    if (num_rows == 0) {
        return;
    }
    permute_kernel<<<row_blocks(num_rows), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        rows, x, row_to_slot, num_rows, topk, hidden);
    MOE_CHECK_LAUNCH();
}

static __global__ void permute_bwd_kernel(float *dx,
                                          const float *d_rows,
                                          const int *slot_to_row,
                                          int num_tokens,
                                          int topk,
                                          int hidden,
                                          bool accumulate)
{
    for (int t = blockIdx.x; t < num_tokens; t += gridDim.x) {
        const int *slots = slot_to_row + (size_t)t * (size_t)topk;
        float *d = dx + (size_t)t * (size_t)hidden;
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            float acc = accumulate ? d[c] : 0.0f;
            for (int k = 0; k < topk; k++) {
                int row = slots[k];
                if (row >= 0) {
                    acc += d_rows[(size_t)row * (size_t)hidden + (size_t)c];
                }
            }
            d[c] = acc;
        }
    }
}

extern "C" void moe_k_cuda_permute_bwd(float *dx,
                                       const float *d_rows,
                                       const int *slot_to_row,
                                       int num_tokens,
                                       int topk,
                                       int hidden,
                                       bool accumulate,
                                       moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && hidden > 0);
    if (num_tokens == 0) {
        return;
    }
    permute_bwd_kernel<<<row_blocks(num_tokens), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        dx, d_rows, slot_to_row, num_tokens, topk, hidden, accumulate);
    MOE_CHECK_LAUNCH();
}

static __global__ void unpermute_kernel(float *y,
                                        const float *rows,
                                        const float *weights,
                                        const int *slot_to_row,
                                        int num_tokens,
                                        int topk,
                                        int hidden)
{
    for (int t = blockIdx.x; t < num_tokens; t += gridDim.x) {
        float *out = y + (size_t)t * (size_t)hidden;
        for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
            float acc = 0.0f;
            for (int k = 0; k < topk; k++) {
                size_t slot = (size_t)t * (size_t)topk + (size_t)k;
                int row = slot_to_row[slot];
                if (row < 0) {
                    continue;
                }
                float w = weights != NULL ? weights[slot] : 1.0f;
                /* acc += w * src, unfused as on the CPU */
                acc = __fadd_rn(acc, __fmul_rn(w, rows[(size_t)row * (size_t)hidden + (size_t)c]));
            }
            out[c] = acc;
        }
    }
}

extern "C" void moe_k_cuda_unpermute(float *y,
                                     const float *rows,
                                     const float *weights,
                                     const int *slot_to_row,
                                     int num_tokens,
                                     int topk,
                                     int hidden,
                                     moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && hidden > 0);
    if (num_tokens == 0) {
        return;
    }
    unpermute_kernel<<<row_blocks(num_tokens), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        y, rows, weights, slot_to_row, num_tokens, topk, hidden);
    MOE_CHECK_LAUNCH();
}

static __global__ void unpermute_bwd_kernel(float *d_rows,
                                            float *d_weights,
                                            const float *dy,
                                            const float *rows,
                                            const float *weights,
                                            const int *slot_to_row,
                                            int num_tokens,
                                            int topk,
                                            int hidden)
{
    __shared__ double shared[32];
    for (int t = blockIdx.x; t < num_tokens; t += gridDim.x) {
        const float *g = dy + (size_t)t * (size_t)hidden;
        for (int k = 0; k < topk; k++) {
            size_t slot = (size_t)t * (size_t)topk + (size_t)k;
            int row = slot_to_row[slot];
            if (row < 0) {
                if (d_weights != NULL && threadIdx.x == 0) {
                    d_weights[slot] = 0.0f;
                }
                continue;
            }
            float w = weights != NULL ? weights[slot] : 1.0f;
            float *dr = d_rows + (size_t)row * (size_t)hidden;
            const float *r = rows + (size_t)row * (size_t)hidden;
            double dot = 0.0;
            for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
                dr[c] = w * g[c];
                dot += (double)g[c] * (double)r[c];
            }
            if (d_weights != NULL) {
                dot = moe_block_sum(dot, shared);
                if (threadIdx.x == 0) {
                    d_weights[slot] = (float)dot;
                }
            }
        }
    }
}

extern "C" void moe_k_cuda_unpermute_bwd(float *d_rows,
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
    MOE_ASSERT(num_tokens >= 0 && topk > 0 && hidden > 0);
    MOE_ASSERT(weights != NULL || d_weights == NULL);
    if (num_tokens == 0) {
        return;
    }
    unpermute_bwd_kernel<<<row_blocks(num_tokens), MOE_K_CUDA_THREADS, 0, moe_k_cuda_stream(ctx)>>>(
        d_rows, d_weights, dy, rows, weights, slot_to_row, num_tokens, topk, hidden);
    MOE_CHECK_LAUNCH();
}

/* ---- Chunk sort --------------------------------------------------------------------------------
 */

/* Column-split copies per chunk: blockIdx.x = position in chunk_order, blockIdx.y splits the
 * chunk's elements. Each block finds its chunk's offsets in both layouts (O(num_chunks)). The
 * copy moves `vec`-wide elements (float4 when rows and both buffers allow it): on an H200 the
 * scalar copy with 16 splits ran at 77 GB/s (870 us for 67 MB, 17% of a gpu-moe step). */
#define CHUNK_BLOCKS 2048 /* blocks per launch, split evenly over the chunks */

template <typename T>
static __global__ void move_chunks_kernel(T *out,
                                          const T *in,
                                          const int *chunk_rows,
                                          const int *chunk_order,
                                          int row_len, /* in elements of T */
                                          bool to_sorted)
{
    int i = (int)blockIdx.x;
    int c = chunk_order[i];
    size_t orig_row = 0;
    for (int j = 0; j < c; j++) {
        orig_row += (size_t)chunk_rows[j];
    }
    size_t sorted_row = 0;
    for (int j = 0; j < i; j++) {
        sorted_row += (size_t)chunk_rows[chunk_order[j]];
    }
    size_t n = (size_t)chunk_rows[c] * (size_t)row_len;
    const T *src = in + (to_sorted ? orig_row : sorted_row) * (size_t)row_len;
    T *dst = out + (to_sorted ? sorted_row : orig_row) * (size_t)row_len;
    for (size_t e = blockIdx.y * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.y * blockDim.x) {
        dst[e] = src[e];
    }
}

static void move_chunks(float *out,
                        const float *in,
                        const int *chunk_rows,
                        const int *chunk_order,
                        int num_chunks,
                        int hidden,
                        bool to_sorted,
                        moe_k_ctx_t *ctx)
{
    MOE_ASSERT(num_chunks >= 0 && hidden > 0);
    if (num_chunks == 0) {
        return;
    }
    unsigned split = (unsigned)((CHUNK_BLOCKS + num_chunks - 1) / num_chunks);
    dim3 grid((unsigned)num_chunks, split < 65535u ? split : 65535u);
    cudaStream_t s = moe_k_cuda_stream(ctx);
    bool vec4 = hidden % 4 == 0 && ((uintptr_t)out | (uintptr_t)in) % sizeof(float4) == 0;
    if (vec4) {
        move_chunks_kernel<float4><<<grid, MOE_K_CUDA_THREADS, 0, s>>>(
            (float4 *)out, (const float4 *)in, chunk_rows, chunk_order, hidden / 4, to_sorted);
    } else {
        move_chunks_kernel<float><<<grid, MOE_K_CUDA_THREADS, 0, s>>>(
            out, in, chunk_rows, chunk_order, hidden, to_sorted);
    }
    MOE_CHECK_LAUNCH();
}

extern "C" void moe_k_cuda_sort_chunks(float *out,
                                       const float *in,
                                       const int *chunk_rows,
                                       const int *chunk_order,
                                       int num_chunks,
                                       int hidden,
                                       moe_k_ctx_t *ctx)
{
    move_chunks(out, in, chunk_rows, chunk_order, num_chunks, hidden, true, ctx);
}

extern "C" void moe_k_cuda_unsort_chunks(float *out,
                                         const float *in,
                                         const int *chunk_rows,
                                         const int *chunk_order,
                                         int num_chunks,
                                         int hidden,
                                         moe_k_ctx_t *ctx)
{
    move_chunks(out, in, chunk_rows, chunk_order, num_chunks, hidden, false, ctx);
}
