/*
 * Memory for the engine (STYLE.md §6): one allocation per category, carved into views by a bump
 * arena, plus a counted heap wrapper pair through which every host allocation of the engine goes.
 *
 * The same carving code runs twice: first on a sizing arena (no memory; it only adds up aligned
 * sizes and returns NULL views), then on a real arena over one block of exactly that size. So the
 * bytes reported per category are the bytes of the tensors the engine really builds. A scratch
 * arena is reset once per step and supports mark/release for per-layer temporaries.
 *
 * Alignment: 64 bytes for host views (a cache line, and AVX-512 loads); a device backend uses 256.
 * Overflowing a real arena is a broken invariant (the sizing pass under-counted) and aborts. This
 * module does no I/O except the abort message.
 */
#ifndef MOE_ENGINE_ARENA_H
#define MOE_ENGINE_ARENA_H

#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_ENG_HOST_ALIGN 64 /* bytes */

/* Counted host heap: every engine allocation goes through moe_eng_heap_alloc/free. */
struct moe_eng_heap {
    size_t num_allocs; /* calls that succeeded */
    size_t num_frees;  /* calls with a non-NULL pointer */
    size_t bytes_live; /* currently allocated */
    size_t bytes_peak; /* high-water mark of bytes_live */
};

/* 64-byte aligned, zero-filled block of bytes (rounded up to the alignment); NULL when out of
 * memory. The pointer must be released with moe_eng_heap_free with the same byte count. */
void *moe_eng_heap_alloc(struct moe_eng_heap *heap, size_t bytes);
void moe_eng_heap_free(struct moe_eng_heap *heap, void *p, size_t bytes);

/* A bump arena over a caller block, or a sizing arena (base NULL, unbounded).
 */
struct moe_eng_arena {
    char *base;      /* block start; NULL while sizing */
    size_t capacity; /* bytes in the block (SIZE_MAX while sizing) */
    size_t used;     /* bytes carved so far (aligned) */
    size_t peak;     /* high-water mark of used */
    bool is_sizing;  /* true: only count, views are NULL */
};

/* A sizing arena: takes return NULL and only advance `used`/`peak`. */
void moe_eng_arena_init_sizing(struct moe_eng_arena *a);
/* A real arena over base[capacity] (base 64-byte aligned). */
void moe_eng_arena_init(struct moe_eng_arena *a, void *base, size_t capacity);

/* Carve `bytes` (rounded up to 64): returns the view, NULL while sizing. Aborts on overflow. */
void *moe_eng_arena_take(struct moe_eng_arena *a, size_t bytes);
/* Typed helpers: n elements. */
float *moe_eng_arena_floats(struct moe_eng_arena *a, size_t n);
/*
 * n floats at the same offset within a 4 KiB page as ref: carves n + MOE_ENG_PAGE_FLOATS floats
 * (in both passes, so sizing and carving agree) and returns the view moved forward to ref's page
 * offset (NULL while sizing; ref NULL: the carved start). Streams that a kernel reads and writes
 * in step run up to a third faster on one CPU when they share a page offset (the optimizer's
 * master, moments and gradient: engine/model.c bucket_close; moefold-bench's "optimizer").
 */
#define MOE_ENG_PAGE_BYTES  4096
#define MOE_ENG_PAGE_FLOATS (MOE_ENG_PAGE_BYTES / sizeof(float))
float *moe_eng_arena_floats_like(struct moe_eng_arena *a, size_t n, const float *ref);
/* p moved forward (less than a page) to ref's offset within a 4 KiB page. */
float *moe_eng_page_offset_like(float *p, const float *ref);
int *moe_eng_arena_ints(struct moe_eng_arena *a, size_t n);
double *moe_eng_arena_doubles(struct moe_eng_arena *a, size_t n);

/* Stack discipline for temporaries: release rolls `used` back to a mark. */
size_t moe_eng_arena_mark(const struct moe_eng_arena *a);
void moe_eng_arena_release(struct moe_eng_arena *a, size_t mark);
/* Forget every view (once per step for scratch). */
void moe_eng_arena_reset(struct moe_eng_arena *a);

/* Round bytes up to the host alignment. */
size_t moe_eng_align(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* MOE_ENGINE_ARENA_H */
