/*
 * moefold-bench's building blocks (moe-test-np: 2): nccl-tests bus-bandwidth factors by hand, a
 * GEMM and a grouped GEMM (uniform and Zipf-skewed rows) whose checks pass and whose FLOP counts
 * follow from the shapes, memory kernels with their byte counts, every collective over a few sizes
 * with zero wrong elements and busbw = algbw x factor, hwloc's view of the host (plausible counts,
 * binding accepted or refused cleanly), and the moefold-bench command line (tables, --json, bad
 * flags).
 */
#include "engine/bench.h"
#include "engine/comm_mpi.h"
#include "tests/test_util.h"
#include "topologies/hwloc_host.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <mpi.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* cmocka.h needs setjmp.h, stdarg.h, stddef.h and stdint.h first. */
#include <cmocka.h>

/* moe-test-np: 2 */

static const struct moe_bench_cfg quick = {.iters = 2, .warmup = 1};

static void test_busbw_factors(void **state)
{
    (void)state;
    assert_true(moe_bench_busbw_factor(MOE_BENCH_ALLREDUCE, 8) == 2.0 * 7.0 / 8.0);
    assert_true(moe_bench_busbw_factor(MOE_BENCH_ALLGATHER, 4) == 0.75);
    assert_true(moe_bench_busbw_factor(MOE_BENCH_REDUCESCATTER, 2) == 0.5);
    assert_true(moe_bench_busbw_factor(MOE_BENCH_ALLTOALL, 16) == 15.0 / 16.0);
    assert_true(moe_bench_busbw_factor(MOE_BENCH_SENDRECV, 2) == 1.0);
    assert_string_equal(moe_bench_coll_name(MOE_BENCH_REDUCESCATTER), "reducescatter");
}

static void test_compute_benchmarks(void **state)
{
    (void)state;
    moe_k_ctx_t *kc = NULL;
    struct moe_k_ctx_desc desc = {.backend = MOE_K_BACKEND_CPU, .num_threads = 1};
    assert_int_equal(moe_k_ctx_create(&desc, &kc), MOE_OK);
    const struct moe_k_ops *k = moe_k_ctx_ops(kc);
    struct moe_bench_gemm g;
    assert_int_equal(moe_bench_gemm_run(k, kc, &quick, 96, 64, 80, &g), MOE_OK);
    assert_true(g.is_ok);
    assert_true(fabs(g.gflops * g.time_us * 1e3 - 2.0 * 96 * 64 * 80) < 1e-3 * 2.0 * 96 * 64 * 80);
    for (int skew = 0; skew < 2; skew++) {
        struct moe_bench_grouped gr;
        assert_int_equal(moe_bench_grouped_run(k, kc, &quick, 8, 300, 32, 48, skew, &gr), MOE_OK);
        assert_true(gr.is_ok);
        assert_int_equal(gr.tokens, 300);
        assert_true(gr.ratio > 0.0);
        assert_true(gr.dgrad_time_us > 0.0 && gr.wgrad_time_us > 0.0);
        assert_int_equal(gr.num_sets, 1); /* quick: no eviction, one hot set */
    }
    /* Cold, as a step reads them: sets filling twice the evicted bytes (a set here: x and dx
     * 300 x 32, y 300 x 48, w and dw 8 x 48 x 32 floats = 232,704 bytes; 2 x 1 MiB -> 10 sets),
     * at most 64, and the check still exact on the cycled operands. */
    struct moe_bench_cfg cold = quick;
    cold.evict_bytes = 1u << 20;
    struct moe_bench_grouped gc;
    assert_int_equal(moe_bench_grouped_run(k, kc, &cold, 8, 300, 32, 48, true, &gc), MOE_OK);
    assert_true(gc.is_ok);
    assert_int_equal(gc.num_sets, 10);
    cold.evict_bytes = 64u << 20;
    assert_int_equal(moe_bench_grouped_run(k, kc, &cold, 8, 300, 32, 48, false, &gc), MOE_OK);
    assert_true(gc.is_ok && gc.num_sets == 64);
    const char *names[] = {"copy", "axpy", "rmsnorm", "swiglu", "rope"};
    for (size_t i = 0; i < 5; i++) {
        struct moe_bench_mem m;
        assert_int_equal(moe_bench_mem_run(k, kc, &quick, names[i], 1u << 16, &m), MOE_OK);
        assert_true(m.is_ok);
        assert_true(m.bytes > 0 && m.gbps > 0.0);
    }
    struct moe_bench_mem m;
    assert_int_equal(moe_bench_mem_run(k, kc, &quick, "nope", 1024, &m), MOE_ERR_INVALID);
    /* SwiGLU at an engine row width: rows cover the requested forward bytes, both directions
     * checked against the formula in double, the backward moving 5/3 of the forward's bytes. */
    struct moe_bench_act act;
    assert_int_equal(moe_bench_act_run(k, kc, &quick, 32, 1u << 15, &act), MOE_OK);
    assert_true(act.is_ok && act.ffn == 32 && act.fwd_bytes >= (1u << 15));
    assert_true(act.fwd_bytes == (size_t)act.rows * 32 * 3 * sizeof(float));
    assert_true(act.bwd_bytes * 3 == act.fwd_bytes * 5);
    assert_true(act.fwd_gbps > 0.0 && act.bwd_gbps > 0.0);
    assert_int_equal(moe_bench_act_run(k, kc, &quick, 0, 1024, &act), MOE_ERR_INVALID);
    /* The experts' bias ops: per-expert calls over 16 slices covering the requested forward
     * bytes (rows read and written), checked exactly; the backward reads the rows once. */
    struct moe_bench_act bias;
    assert_int_equal(moe_bench_bias_run(k, kc, &quick, 64, 1u << 15, &bias), MOE_OK);
    assert_true(bias.is_ok && bias.ffn == 64 && bias.fwd_bytes >= (1u << 15));
    assert_true(bias.rows % BENCH_BIAS_EXPERTS == 0);
    assert_true(bias.fwd_bytes == (size_t)bias.rows * 64 * 2 * sizeof(float));
    assert_true(bias.bwd_bytes * 2 == bias.fwd_bytes);
    assert_true(bias.fwd_gbps > 0.0 && bias.bwd_gbps > 0.0);
    assert_int_equal(moe_bench_bias_run(k, kc, &quick, 0, 1024, &bias), MOE_ERR_INVALID);
    struct moe_bench_attention at;
    assert_int_equal(moe_bench_attention_run(k, kc, &quick, 2, 48, 4, 2, 16, 0, &at), MOE_OK);
    assert_true(at.is_ok && at.fwd_gflops > 0.0 && at.bwd_gflops > 0.0 && at.window == 0);
    /* The windowed path: its last row checked against the window's keys alone. */
    assert_int_equal(moe_bench_attention_run(k, kc, &quick, 1, 64, 4, 2, 16, 16, &at), MOE_OK);
    assert_true(at.is_ok && at.window == 16 && at.fwd_gflops > 0.0 && at.bwd_gflops > 0.0);
    struct moe_bench_quant q;
    assert_int_equal(
        moe_bench_quant_run(k, kc, &quick, 64, 256, MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4, &q),
        MOE_OK);
    assert_true(q.is_ok && q.elements == 64.0 * 256.0);
    assert_int_equal(moe_bench_quant_run(k, kc, &quick, 64, 256, MOE_K_QFMT_FP4_E2M1,
                                         MOE_K_QRECIPE_TENSORWISE, &q),
                     MOE_ERR_UNSUPPORTED);
    moe_k_ctx_destroy(kc);
}

static void test_collectives(void **state)
{
    (void)state;
    moe_comm_t *w = NULL;
    assert_int_equal(moe_comm_mpi_create(MPI_COMM_WORLD, "world", &w), MOE_OK);
    for (int op = 0; op < MOE_BENCH_NUM_COLLS; op++) {
        for (size_t bytes = 8; bytes <= 65536; bytes *= 16) {
            struct moe_bench_coll_result r;
            assert_int_equal(moe_bench_coll_run(w, &quick, (enum moe_bench_coll)op, bytes, &r),
                             MOE_OK);
            assert_int_equal(r.wrong, 0);
            assert_int_equal(r.group_size, 2);
            assert_true(r.bytes == bytes || (bytes == 8 && r.bytes >= 4));
            assert_true(fabs(r.busbw_gbps - r.algbw_gbps * moe_bench_busbw_factor(r.op, 2)) <=
                        1e-12 * r.algbw_gbps);
            assert_true(r.step_us > 0.0 && isfinite(r.step_us));
        }
    }
    /* As a step runs them (256 KiB streamed per rank before each call): still exact (the check
     * covers the last step-like call's output too), and a call timed alone after a barrier. */
    struct moe_bench_cfg cold = quick;
    cold.evict_bytes = 256u << 10;
    for (int op = 0; op < MOE_BENCH_NUM_COLLS; op++) {
        struct moe_bench_coll_result r;
        assert_int_equal(moe_bench_coll_run(w, &cold, (enum moe_bench_coll)op, 16384, &r), MOE_OK);
        assert_int_equal(r.wrong, 0);
        assert_true(r.step_us > 0.0 && isfinite(r.step_us));
    }
    moe_comm_destroy(w);
}

static void test_host_discovery(void **state)
{
    (void)state;
    struct moe_host_info h;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    assert_int_equal(moe_host_discover(&h, &diag), MOE_OK);
    assert_true(h.num_cores >= 1 && h.num_pus >= h.num_cores && h.num_numa >= 1);
    assert_true(h.memory_bytes > 1e8); /* more than 100 MB on any machine that runs the tests */
    enum moe_status st = moe_host_bind_core(0, &diag);
    assert_true(st == MOE_OK || st == MOE_ERR_UNSUPPORTED);
}

static void test_cli(void **state)
{
    (void)state;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
        return;
    }
    char path[512], cmd[2048];
    moe_test_bin_path("moefold-bench", path, sizeof(path));
    /* A fresh singleton: drop the MPI environment of this (mpirun-started) process. */
    const char *clean = "for v in $(env | grep -o '^\\(OMPI\\|PMIX\\|PRTE\\)_[A-Za-z0-9_]*'); do "
                        "unset $v; done; ";
    static char out[1 << 16];
    /* The header says what the step-like collectives streamed. */
    (void)snprintf(cmd, sizeof(cmd),
                   "%s%s --only gemm --iters 1 --warmup 0 --passes 1 --evict-bytes 1M", clean,
                   path);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "GFLOP/s"));
    assert_non_null(strstr(out, "all checks passed"));
    assert_non_null(strstr(out, "after each rank streams 1.0 MiB (--evict-bytes)"));
    /* The GEMM and quantisation tables in passes: one record per shape (the 16 larger ones and
     * the presets' miniatures' 6), per grouped case and skew, and per recipe, each with its kept
     * pass's time and rate (operand sets over 2 x 4 MiB: the default, twice this host's cache
     * share, fills hundreds of MiB a point). */
    (void)snprintf(cmd, sizeof(cmd),
                   "%s%s --only gemm,grouped,quant --iters 1 --warmup 0 --passes 2 "
                   "--evict-bytes 4M --json",
                   clean, path);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 0);
    cJSON *g = cJSON_Parse(out);
    assert_non_null(g);
    const char *tables[] = {"gemm", "grouped_gemm", "quant"};
    const int rows[] = {22, 44, 7}; /* grouped: 22 cases x (even, skewed) */
    for (int t = 0; t < 3; t++) {
        const cJSON *arr = cJSON_GetObjectItem(g, tables[t]);
        assert_int_equal(cJSON_GetArraySize(arr), rows[t]);
        const cJSON *it = NULL;
        cJSON_ArrayForEach(it, arr)
        {
            double us = cJSON_GetObjectItem(it, "time_us")->valuedouble;
            const cJSON *rate = cJSON_GetObjectItem(it, t < 2 ? "gflops" : "gbps");
            double gf = rate != NULL ? rate->valuedouble : 0.0;
            assert_true(cJSON_IsTrue(cJSON_GetObjectItem(it, "ok")));
            assert_true(us > 0.0 && gf > 0.0);
            if (t == 1) { /* the backward's two GEMMs, timed in turn with the forward */
                const char *keys[] = {"dgrad_time_us", "dgrad_gflops", "wgrad_time_us",
                                      "wgrad_gflops"};
                for (int b = 0; b < 4; b++) {
                    const cJSON *v = cJSON_GetObjectItem(it, keys[b]);
                    assert_true(cJSON_IsNumber(v) && v->valuedouble > 0.0);
                }
            }
        }
    }
    const cJSON *small = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "gemm"), 16);
    assert_true(cJSON_GetObjectItem(small, "m")->valuedouble == 128.0 &&
                cJSON_GetObjectItem(small, "k")->valuedouble == 64.0);
    cJSON_Delete(g);
    (void)snprintf(cmd, sizeof(cmd), "%s%s --only mem --iters 1 --warmup 0 --passes 1 --json",
                   clean, path);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "format")->valuestring, "moefold-bench");
    assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(j, "memory")) == 21); /* 7 kernels x 3 */
    cJSON_Delete(j);
    (void)snprintf(cmd, sizeof(cmd), "%s%s --only gpu", clean, path);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "unknown benchmark 'gpu'"));
    (void)snprintf(cmd, sizeof(cmd), "%s%s --passes 9 2>&1", clean, path);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "bad --passes '9' (1 to 8)"));
    (void)snprintf(cmd, sizeof(cmd), "%s%s --evict-bytes 2G 2>&1", clean, path);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "bad --evict-bytes '2G' (0 to 1G"));
    (void)snprintf(cmd, sizeof(cmd), "%s%s --evict-bytes -1 2>&1", clean, path);
    assert_int_equal(moe_test_run_capture(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "bad --evict-bytes '-1'"));
}

/* A timing starts on the sets' `first` (moefold-train's host probe moves it on after each probe,
 * so no probe re-reads operands an earlier one left in the cache): one forward call and the
 * check write the output of that set alone, and the timing still checks out. */
static void test_gemm_sets_first(void **state)
{
    (void)state;
    moe_k_ctx_t *kc = NULL;
    struct moe_k_ctx_desc desc = {.backend = MOE_K_BACKEND_CPU, .num_threads = 1};
    assert_int_equal(moe_k_ctx_create(&desc, &kc), MOE_OK);
    const struct moe_k_ops *k = moe_k_ctx_ops(kc);
    const int m = 32, n = 16, kd = 24;
    const struct moe_bench_cfg cfg = {.iters = 1, .warmup = 0, .evict_bytes = 65536};
    struct moe_bench_gemm_sets s;
    assert_int_equal(moe_bench_gemm_sets_init(&s, &cfg, m, n, kd), MOE_OK);
    assert_true(s.first == 0 && s.num_sets >= 4);
    size_t nx = (size_t)m * kd, nw = (size_t)kd * n, ny = (size_t)m * n;
    for (int i = 0; i < s.num_sets; i++) { /* each set's output y (after x, dx, w, dw) zeroed */
        memset(s.buf + (size_t)i * s.set_floats + 2 * nx + 2 * nw, 0, ny * sizeof(float));
    }
    s.first = 3;
    struct moe_bench_gemm g;
    moe_bench_gemm_time(k, kc, &cfg, &s, &g);
    assert_true(g.is_ok && g.time_us > 0.0);
    for (int i = 0; i < s.num_sets; i++) {
        const float *y = s.buf + (size_t)i * s.set_floats + 2 * nx + 2 * nw;
        double sum = 0.0;
        for (size_t j = 0; j < ny; j++) {
            sum += fabs((double)y[j]);
        }
        if (i == 3) {
            assert_true(sum > 0.0);
        } else {
            assert_true(sum == 0.0);
        }
    }
    moe_bench_gemm_sets_fini(&s);
    moe_k_ctx_destroy(kc);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_busbw_factors), cmocka_unit_test(test_compute_benchmarks),
        cmocka_unit_test(test_collectives),   cmocka_unit_test(test_host_discovery),
        cmocka_unit_test(test_cli),           cmocka_unit_test(test_gemm_sets_first),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    int total = 0;
    MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return total;
}
