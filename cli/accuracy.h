/*
 * Predictions against published training runs (tests/data/published_runs.json): each run is a
 * model preset, a cluster, a GPU count and the Megatron flags of its configuration; moefold
 * predicts it and reports the error against the published tokens/s/GPU (or TFLOPS/GPU where only
 * that is given). Used by `moefold accuracy` and by the accuracy test.
 */
#ifndef MOE_CLI_ACCURACY_H
#define MOE_CLI_ACCURACY_H

#include "model/cost.h"
#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_ACCURACY_MAX_RUNS 128

struct moe_accuracy_row {
    char id[16];
    char model[64];
    char cluster[64];
    int gpus;
    char metric[32];      /* "tokens_per_s_per_gpu" or "tflops_per_gpu" */
    double published;     /* in the metric's unit */
    double predicted;     /* same unit */
    double err_pct;       /* 100 * (predicted / published - 1) */
    bool complete;        /* the source states the whole configuration */
    char known_miss[320]; /* why the model misses this run, "" if it should not */
    char note[256];
    char layout[160]; /* layout summary */
    double step_time_s;
    double mem_gib;
    bool fits;
    bool ok;         /* predicted without error */
    char error[640]; /* the diagnostic when !ok */
};

/* Default runs file: <topologies>/../tests/data/published_runs.json, written into buf[len]. */
const char *moe_accuracy_default_path(char *buf, size_t len);

/*
 * Read the runs file and predict every run (event-simulated schedule). rows[max] receives one row
 * per run, *n their number. A run whose flags do not parse or resolve gets ok=false and its error;
 * the file itself being unreadable or malformed is MOE_ERR_IO / MOE_ERR_PARSE / MOE_ERR_INVALID.
 */
MOE_NODISCARD enum moe_status moe_accuracy_run(
    const char *path, struct moe_accuracy_row *rows, int max, int *n, struct moe_diag *diag);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_ACCURACY_H */
