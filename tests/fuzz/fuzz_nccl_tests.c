/*
 * libFuzzer target: nccl-tests and DeepEP outputs (cli/nccl_tests.h), as `moefold calibrate
 * --nccl-tests / --deepep` reads them, and the fit of every usable table.
 *
 * Properties: a rejected text has a message naming it ("f.txt") and a known status; every table
 * has ranks >= 0, nodes >= 1, at most MOE_NT_MAX_ROWS rows, and a reason when it is not usable;
 * a usable table's fit either refuses with a message or gives a finite positive bus bandwidth
 * and a finite non-negative latency over at least 3 rows; DeepEP figures are finite and positive.
 *
 * Seeds: tests/fuzz/seeds/nccl_tests/ (the heads of tests/data/nccl_tests/). Dictionary:
 * tests/fuzz/nccl_tests.dict.
 */
#include "cli/nccl_tests.h"
#include "tests/fuzz/fuzz_util.h"

#include <math.h>

static void check_table(const struct moe_nt_table *t)
{
    if (t->ranks < 0 || t->nodes < 1 || t->num_rows < 0 || t->num_rows > MOE_NT_MAX_ROWS) {
        fuzz_fail("table with %d ranks, %d nodes, %d rows", t->ranks, t->nodes, t->num_rows);
    }
    if (!t->usable) {
        if (t->why[0] == '\0' || memchr(t->why, '\0', sizeof(t->why)) == NULL) {
            fuzz_fail("an unusable table without a terminated reason");
        }
        return;
    }
    struct moe_nt_fit fit;
    struct moe_diag diag = {0};
    enum moe_status st = moe_nt_fit_table(t, &fit, &diag);
    if (fuzz_check_status("moe_nt_fit_table", st, &diag, NULL)) {
        if (!(fit.busbw_gbps > 0.0) || !isfinite(fit.busbw_gbps) || !(fit.latency_us >= 0.0) ||
            !isfinite(fit.latency_us) || fit.points < 3) {
            fuzz_fail("fit busbw %g latency %g over %d points", fit.busbw_gbps, fit.latency_us,
                      fit.points);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct moe_nt_file f;
    struct moe_diag diag = {0};
    moe_nt_file_init(&f);
    enum moe_status st = moe_nt_parse((const char *)data, size, "f.txt", &f, &diag);
    if (fuzz_check_status("moe_nt_parse", st, &diag, "f.txt")) {
        for (int i = 0; i < f.num_tables; i++) {
            check_table(&f.tables[i]);
        }
    }
    moe_nt_file_fini(&f);
    struct moe_deepep_run run;
    memset(&diag, 0, sizeof(diag));
    st = moe_deepep_parse((const char *)data, size, "f.txt", &run, &diag);
    if (fuzz_check_status("moe_deepep_parse", st, &diag, "f.txt")) {
        if (!(run.dispatch_nvl_gbps > 0.0) || !(run.combine_nvl_gbps > 0.0) ||
            !isfinite(run.dispatch_nvl_gbps) || !isfinite(run.combine_nvl_gbps) ||
            !(run.dispatch_rdma_gbps >= 0.0) || !(run.combine_rdma_gbps >= 0.0)) {
            fuzz_fail("DeepEP figures %g %g %g %g", run.dispatch_nvl_gbps, run.combine_nvl_gbps,
                      run.dispatch_rdma_gbps, run.combine_rdma_gbps);
        }
    }
    return 0;
}
