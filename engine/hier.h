/*
 * Private to engine/: the hierarchical (DeepEP-style) token dispatcher. A token crosses the
 * scale-out network once per remote node that holds one of its experts -- to the rank with the
 * same index inside that node (the proxy) -- and is forwarded inside the node to the ranks that
 * own its experts; the combine returns one weighted partial sum per node. Flat all-to-all sends
 * one copy per (token, expert). See engine/hier.c.
 */
#ifndef MOE_ENGINE_HIER_H
#define MOE_ENGINE_HIER_H

#include "engine/internal.h"

/* Dispatch this rank's tokens h[Ms, C] (routing already in a): fills a->xe (expert-major rows),
 * a->gath_counts (rows per forwarding rank and local expert) and the hierarchical metadata. */
void moe_eng_hier_dispatch(struct moe_eng *e, struct moe_eng_layer_act *a, const float *h);
/* Combine expert outputs eout[R, C] (expert-major) into out[Ms, C] (overwritten). */
void moe_eng_hier_combine(struct moe_eng *e,
                          struct moe_eng_layer_act *a,
                          const float *eout,
                          float *out);
/* Backward of the combine: d_eout[R, C] (expert-major) and d_topk_w[Ms, K] from dout[Ms, C]. */
void moe_eng_hier_combine_bwd(struct moe_eng *e,
                              struct moe_eng_layer_act *a,
                              const float *dout,
                              float *d_eout,
                              float *d_topk_w);
/* Backward of the dispatch: dh[Ms, C] += gradient of the tokens from d_xe[R, C]. */
void moe_eng_hier_dispatch_bwd(struct moe_eng *e,
                               struct moe_eng_layer_act *a,
                               const float *d_xe,
                               float *dh);
/* Per-op temporaries the hierarchical paths carve, replayed on a sizing arena. */
void moe_eng_hier_temp_sim(const struct moe_eng *e, struct moe_eng_arena *sim);

#endif /* MOE_ENGINE_HIER_H */
