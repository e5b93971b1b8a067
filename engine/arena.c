/*
 * Bump arenas and the counted heap wrapper (engine/arena.h). Pure pointer arithmetic apart from the
 * two heap calls; an overflow of a real arena means the sizing pass and the carving pass disagree,
 * which is a bug, so it aborts with the sizes.
 */
#include "engine/arena.h"

#include "engine/check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t moe_eng_align(size_t bytes)
{
    return (bytes + MOE_ENG_HOST_ALIGN - 1) / MOE_ENG_HOST_ALIGN * MOE_ENG_HOST_ALIGN;
}

void *moe_eng_heap_alloc(struct moe_eng_heap *heap, size_t bytes)
{
    size_t n = moe_eng_align(bytes > 0 ? bytes : 1);
    void *p = aligned_alloc(MOE_ENG_HOST_ALIGN, n);
    if (p == NULL) {
        return NULL;
    }
    memset(p, 0, n);
    heap->num_allocs++;
    heap->bytes_live += n;
    if (heap->bytes_live > heap->bytes_peak) {
        heap->bytes_peak = heap->bytes_live;
    }
    return p;
}

void moe_eng_heap_free(struct moe_eng_heap *heap, void *p, size_t bytes)
{
    if (p == NULL) {
        return;
    }
    size_t n = moe_eng_align(bytes > 0 ? bytes : 1);
    heap->num_frees++;
    heap->bytes_live = heap->bytes_live >= n ? heap->bytes_live - n : 0;
    free(p);
}

void moe_eng_arena_init_sizing(struct moe_eng_arena *a)
{
    *a = (struct moe_eng_arena){.base = NULL, .capacity = SIZE_MAX, .is_sizing = true};
}

void moe_eng_arena_init(struct moe_eng_arena *a, void *base, size_t capacity)
{
    MOE_ASSERT(base != NULL || capacity == 0);
    MOE_ASSERT(((uintptr_t)base % MOE_ENG_HOST_ALIGN) == 0);
    *a = (struct moe_eng_arena){.base = base, .capacity = capacity, .is_sizing = false};
}

void *moe_eng_arena_take(struct moe_eng_arena *a, size_t bytes)
{
    size_t n = moe_eng_align(bytes);
    if (a->is_sizing) {
        a->used += n;
        if (a->used > a->peak) {
            a->peak = a->used;
        }
        return NULL;
    }
    if (n > a->capacity - a->used) {
        moe_eng_fatal(__FILE__, __LINE__,
                      "arena overflow: %zu bytes wanted, %zu of %zu used (sizing "
                      "pass and carving "
                      "pass disagree)",
                      n, a->used, a->capacity);
    }
    void *p = a->base + a->used;
    a->used += n;
    if (a->used > a->peak) {
        a->peak = a->used;
    }
    return p;
}

float *moe_eng_arena_floats(struct moe_eng_arena *a, size_t n)
{
    return moe_eng_arena_take(a, n * sizeof(float));
}

float *moe_eng_page_offset_like(float *p, const float *ref)
{
    uintptr_t want = (uintptr_t)ref % MOE_ENG_PAGE_BYTES;
    uintptr_t have = (uintptr_t)p % MOE_ENG_PAGE_BYTES;
    return p + (want + MOE_ENG_PAGE_BYTES - have) % MOE_ENG_PAGE_BYTES / sizeof(float);
}

float *moe_eng_arena_floats_like(struct moe_eng_arena *a, size_t n, const float *ref)
{
    float *p = moe_eng_arena_floats(a, n + MOE_ENG_PAGE_FLOATS);
    return p != NULL && ref != NULL ? moe_eng_page_offset_like(p, ref) : p;
}

int *moe_eng_arena_ints(struct moe_eng_arena *a, size_t n)
{
    return moe_eng_arena_take(a, n * sizeof(int));
}

double *moe_eng_arena_doubles(struct moe_eng_arena *a, size_t n)
{
    return moe_eng_arena_take(a, n * sizeof(double));
}

size_t moe_eng_arena_mark(const struct moe_eng_arena *a)
{
    return a->used;
}

void moe_eng_arena_release(struct moe_eng_arena *a, size_t mark)
{
    MOE_ASSERT(mark <= a->used);
    a->used = mark;
}

void moe_eng_arena_reset(struct moe_eng_arena *a)
{
    a->used = 0;
}
