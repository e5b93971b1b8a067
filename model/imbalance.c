/*
 * Monte Carlo of the busiest EP rank's load (model/imbalance.h), on GSL's random distributions
 * and order statistics (gsl_ran_dirichlet, gsl_ran_multinomial,
 * gsl_stats_quantile_from_sorted_data).
 */
#include "model/imbalance.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <stdlib.h>

#define MAX_SAMPLES 100000

enum moe_status moe_imbalance_monte_carlo(const struct moe_imbalance_params *p,
                                          struct moe_load_stats *out,
                                          struct moe_diag *diag)
{
    if (p->num_experts < 1 || p->num_experts > MOE_MAX_EXPERTS || p->topk < 1 ||
        p->topk > p->num_experts || p->ep < 1 || p->num_experts % p->ep != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "imbalance: need 1 <= top-k <= experts and experts (%d) divisible by "
                            "EP (%d)",
                            p->num_experts, p->ep);
    }
    if (!(p->tokens >= 1.0) || p->tokens > 1e12 || !(p->cv >= 0.0) || p->cv > 10.0 ||
        p->num_samples < 16 || p->num_samples > MAX_SAMPLES) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "imbalance: tokens must be in [1, 1e12], cv in [0, 10], samples in "
                            "[16, %d]",
                            MAX_SAMPLES);
    }
    /* The EP ranks' loads are drawn directly: a sum of Dirichlet components is Dirichlet with the
     * summed parameters, and a multinomial's group sums are multinomial over the groups' summed
     * probabilities, so a rank's E/EP experts are one category of parameter (E/EP) alpha -- the
     * same distribution of the busiest rank's load at EP/E of the draws (the planner calls this
     * once per EP size and token count; 2 x 256 draws a sample made it most of `moefold plan`'s
     * time). */
    size_t e = (size_t)p->ep;
    double *alpha = malloc(e * sizeof(double));
    double *prob = malloc(e * sizeof(double));
    unsigned int *counts = malloc(e * sizeof(unsigned int));
    double *factors = malloc((size_t)p->num_samples * sizeof(double));
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    enum moe_status st = MOE_OK;
    if (alpha == NULL || prob == NULL || counts == NULL || factors == NULL || rng == NULL) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "imbalance: out of memory");
        goto out_free;
    }
    gsl_rng_set(rng, p->seed);
    double a = p->cv > 0.0 ? 1.0 / (p->cv * p->cv) : 0.0;
    int per_rank = p->num_experts / p->ep;
    for (size_t i = 0; i < e; i++) {
        alpha[i] = a * per_rank;
        prob[i] = 1.0 / (double)e;
    }
    double draws = p->tokens * p->topk;
    unsigned int n_draws = draws > 4e9 ? 4000000000u : (unsigned int)draws;
    for (int s = 0; s < p->num_samples; s++) {
        if (a > 0.0 && e > 1) {
            gsl_ran_dirichlet(rng, e, alpha, prob);
        }
        gsl_ran_multinomial(rng, e, n_draws, prob, counts);
        double max_load = 0.0;
        for (size_t r = 0; r < e; r++) {
            max_load = counts[r] > max_load ? counts[r] : max_load;
        }
        double mean_load = (double)n_draws / p->ep;
        factors[s] = mean_load > 0.0 ? max_load / mean_load : 1.0;
    }
    gsl_sort(factors, 1, (size_t)p->num_samples);
    out->mean_factor = gsl_stats_mean(factors, 1, (size_t)p->num_samples);
    out->p50_factor = gsl_stats_quantile_from_sorted_data(factors, 1, (size_t)p->num_samples, 0.5);
    out->p99_factor = gsl_stats_quantile_from_sorted_data(factors, 1, (size_t)p->num_samples, 0.99);
out_free:
    gsl_rng_free(rng);
    free(factors);
    free(counts);
    free(prob);
    free(alpha);
    return st;
}

double moe_imbalance_rank_tokens(const struct moe_layout *lay)
{
    return (double)lay->mbs * lay->seq_length / ((double)lay->cp * lay->tp);
}

enum moe_status moe_imbalance_auto(const struct moe_model_cfg *cfg,
                                   const struct moe_layout *lay,
                                   double cv,
                                   struct moe_load_stats *out,
                                   struct moe_diag *diag)
{
    struct moe_imbalance_params ip = {
        .num_experts = cfg->num_experts,
        .topk = cfg->moe_router_topk,
        .ep = lay->ep,
        .tokens = moe_imbalance_rank_tokens(lay) * lay->ep,
        .cv = cv,
        .num_samples = MOE_IMBALANCE_AUTO_SAMPLES,
        .seed = MOE_IMBALANCE_AUTO_SEED,
    };
    return moe_imbalance_monte_carlo(&ip, out, diag);
}
