/*
 * The nccl-tests / DeepEP readers (cli/nccl_tests.h) and `moefold calibrate --nccl-tests`.
 *
 * The outputs under tests/data/nccl_tests/ follow nccl-tests' printing code of versions 2.13,
 * 2.17 and 2.19 (gen_outputs.py says what each carries) with timings from a known bus bandwidth
 * B per table: the fit must give B within 1% (the generator's truth, not the reader's) and the
 * busbw of the largest size within 5% (the done-when). Noise: mpirun banners and tags,
 * NCCL lines between rows, a wrapped row, a run cut short, N/A columns; refused with a reason:
 * #wrong non-zero, one rank, the same rank twice (no MPI), broadcast.
 */
#include "cli/nccl_tests.h"
#include "tests/test_util.h"
#include "topologies/cluster_file.h"
#include "topologies/json_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define OUT_LEN (1 << 17)

static const char *data_path(const char *name, char *buf, size_t len)
{
    char rel[256];
    (void)snprintf(rel, sizeof(rel), "tests/data/nccl_tests/%s", name);
    return moe_test_root_path(rel, buf, len);
}

static void read_ok(const char *name, struct moe_nt_file *f)
{
    char path[1024];
    struct moe_diag d = {0};
    moe_nt_file_init(f);
    enum moe_status st = moe_nt_read_file(data_path(name, path, sizeof(path)), f, &d);
    if (st != MOE_OK) {
        print_error("%s: %s\n", name, d.message);
    }
    assert_int_equal(st, MOE_OK);
}

struct expect {
    const char *file;
    int table;
    const char *coll;
    int ranks, nodes;
    double truth_gbps; /* the generator's B */
    bool footer;
};

static const struct expect usable[] = {
    {"all_reduce_perf-1node.txt", 0, "all_reduce", 8, 1, 482.0, true},
    {"all_gather-1node.out", 0, "all_gather", 8, 1, 362.0, true},
    {"efa-2node.log", 0, "all_reduce", 16, 2, 486.0, true},
    {"efa-2node.log", 1, "alltoall", 16, 2, 31.5, true},
    {"sendrecv_perf-2node.txt", 0, "sendrecv", 2, 2, 46.8, true},
    {"all_gather_perf-2node-cut.txt", 0, "all_gather", 16, 2, 330.0, false},
};

/* Done-when: the fit recovers the busbw of the largest sizes within 5%. */
static void test_fits(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(usable) / sizeof(usable[0]); i++) {
        const struct expect *e = &usable[i];
        struct moe_nt_file f;
        read_ok(e->file, &f);
        assert_true(e->table < f.num_tables);
        const struct moe_nt_table *t = &f.tables[e->table];
        if (!t->usable) {
            print_error("%s: %s\n", e->file, t->why);
        }
        assert_true(t->usable);
        assert_string_equal(t->collective, e->coll);
        assert_int_equal(t->ranks, e->ranks);
        assert_int_equal(t->nodes, e->nodes);
        assert_int_equal(t->has_footer, e->footer);
        assert_string_equal(t->device, "NVIDIA H100 80GB HBM3");
        struct moe_nt_fit fit;
        struct moe_diag d = {0};
        assert_int_equal(moe_nt_fit_table(t, &fit, &d), MOE_OK);
        double vs_table = fit.busbw_gbps / fit.busbw_at_max - 1.0;
        double vs_truth = fit.busbw_gbps / e->truth_gbps - 1.0;
        print_message("%-30s %-14s fit %7.2f GB/s, table %7.2f at %.3g B (%+.2f%%), truth %.1f "
                      "(%+.2f%%), latency %.1f us\n",
                      e->file, e->coll, fit.busbw_gbps, fit.busbw_at_max, fit.max_bytes,
                      100 * vs_table, e->truth_gbps, 100 * vs_truth, fit.latency_us);
        assert_true(fabs(vs_table) < 0.05);
        assert_true(fabs(vs_truth) < 0.01);
        assert_true(fit.latency_us > 0.0);
        moe_nt_file_fini(&f);
    }
}

static void test_noise_and_refusals(void **state)
{
    (void)state;
    struct moe_nt_file f;
    /* 2.13: 31 sizes, bus ids [0x18], the collective from the command line. */
    read_ok("all_reduce_perf-1node.txt", &f);
    assert_int_equal(f.num_tables, 1);
    assert_int_equal(f.tables[0].num_rows, 31);
    assert_true(fabs(f.tables[0].avg_busbw) > 0.0);
    moe_nt_file_fini(&f);
    /* 2.19 under mpirun --tag-output: two tests, the alltoall row wrapped at column 80 joined. */
    read_ok("efa-2node.log", &f);
    assert_int_equal(f.num_tables, 2);
    assert_int_equal(f.tables[0].num_rows, 31);
    assert_int_equal(f.tables[1].num_rows, 31);
    assert_int_equal(f.tables[1].num_wrapped, 1);
    moe_nt_file_fini(&f);
    /* -c 0: #wrong is N/A. */
    read_ok("sendrecv_perf-2node.txt", &f);
    assert_int_equal(f.tables[0].rows[0].wrong, -1);
    moe_nt_file_fini(&f);
    /* Cut short after 512 MiB: the rows before it are kept, the partial one dropped. */
    read_ok("all_gather_perf-2node-cut.txt", &f);
    assert_int_equal(f.tables[0].num_rows, 27);
    assert_false(f.tables[0].has_footer);
    moe_nt_file_fini(&f);
    /* Refused, each with its reason. */
    read_ok("reduce_scatter_perf-wrong.txt", &f);
    assert_false(f.tables[0].usable);
    assert_non_null(strstr(f.tables[0].why, "#wrong = 8 at 268435456 bytes"));
    moe_nt_file_fini(&f);
    read_ok("all_reduce_perf-nompi.txt", &f);
    assert_int_equal(f.num_tables, 2);
    assert_false(f.tables[0].usable);
    assert_false(f.tables[1].usable);
    assert_non_null(strstr(f.tables[1].why, "listed twice"));
    moe_nt_file_fini(&f);
    read_ok("broadcast_perf.txt", &f);
    assert_false(f.tables[0].usable);
    assert_non_null(strstr(f.tables[0].why, "broadcast_perf"));
    moe_nt_file_fini(&f);
}

static enum moe_status parse_text(const char *text, const char *name, struct moe_nt_file *f)
{
    struct moe_diag d = {0};
    moe_nt_file_init(f);
    return moe_nt_parse(text, strlen(text), name, f, &d);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct moe_nt_file f;
    assert_int_equal(parse_text("", "x.txt", &f), MOE_ERR_NOT_FOUND);
    assert_int_equal(parse_text("hello\n# Avg bus bandwidth : 3\n", "x.txt", &f),
                     MOE_ERR_NOT_FOUND);
    /* A header and no rows; no collective anywhere; the file name as the last hint. */
    const char *hdr = "# nThread 1 nGpus 8 minBytes 8 maxBytes 64 step: 2(factor)\n"
                      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x18] GPU\n"
                      "#  Rank  1 Group  0 Pid 1 on h device  1 [0x19] GPU\n";
    assert_int_equal(parse_text(hdr, "x.txt", &f), MOE_OK);
    assert_false(f.tables[0].usable);
    assert_non_null(strstr(f.tables[0].why, "no result rows"));
    moe_nt_file_fini(&f);
    char text[2048];
    (void)snprintf(text, sizeof(text),
                   "%s        1024  256  float  sum  -1  10.0  0.10  0.18  0  10.0  0.10  0.18  0\n"
                   "        2048  512  float  sum  -1  11.0  0.19  0.33  0  11.0  0.19  0.33  0\n",
                   hdr);
    assert_int_equal(parse_text(text, "x.txt", &f), MOE_OK);
    assert_false(f.tables[0].usable);
    assert_non_null(strstr(f.tables[0].why, "which collective"));
    moe_nt_file_fini(&f);
    assert_int_equal(parse_text(text, "/some/dir/all_reduce_run3.txt", &f), MOE_OK);
    assert_true(f.tables[0].usable);
    assert_string_equal(f.tables[0].collective, "all_reduce");
    struct moe_nt_fit fit;
    struct moe_diag d = {0};
    assert_int_equal(moe_nt_fit_table(&f.tables[0], &fit, &d), MOE_ERR_INVALID); /* 2 sizes */
    moe_nt_file_fini(&f);
}

static void test_deepep(void **state)
{
    (void)state;
    char path[1024];
    char *text = NULL;
    size_t len = 0;
    struct moe_diag d = {0};
    struct moe_deepep_run r;
    assert_int_equal(
        moe_file_read_all(data_path("deepep-intranode.txt", path, sizeof(path)), &text, &len, &d),
        MOE_OK);
    assert_int_equal(moe_deepep_parse(text, len, path, &r, &d), MOE_OK);
    free(text);
    assert_false(r.internode);
    assert_true(fabs(r.dispatch_nvl_gbps - 345.21) < 1e-9); /* BF16, not the FP8 line */
    assert_true(fabs(r.combine_nvl_gbps - 352.40) < 1e-9);
    assert_int_equal(r.hidden, 7168);
    assert_int_equal(moe_file_read_all(data_path("deepep-internode-2node.txt", path, sizeof(path)),
                                       &text, &len, &d),
                     MOE_OK);
    assert_int_equal(moe_deepep_parse(text, len, path, &r, &d), MOE_OK);
    free(text);
    assert_true(r.internode);
    assert_int_equal(r.num_topk_groups, 2);
    assert_true(fabs(r.dispatch_rdma_gbps - 43.20) < 1e-9);
    assert_true(fabs(r.combine_rdma_gbps - 41.90) < 1e-9);
    assert_int_equal(moe_deepep_parse("[tuning] SMs 24\n", 16, "x", &r, &d), MOE_ERR_NOT_FOUND);
}

static int run_cli(const char *args, char *out)
{
    char bin[1024];
    char cmd[9400];
    moe_test_bin_path("moefold", bin, sizeof(bin));
    (void)snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
    return moe_test_run_capture(cmd, out, OUT_LEN);
}

static void test_cli(void **state)
{
    (void)state;
    char *out = malloc(OUT_LEN);
    assert_non_null(out);
    char dir[] = "/tmp/moefold_nt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char data[512];
    char args[8192];
    char outf[512];
    moe_test_root_path("tests/data/nccl_tests", data, sizeof(data));
    (void)snprintf(outf, sizeof(outf), "%s/mine.json", dir);
    (void)snprintf(args, sizeof(args),
                   "calibrate --base dgx-h100 --out %s --json --nccl-tests %s/all_gather-1node.out "
                   "%s/efa-2node.log %s/sendrecv_perf-2node.txt %s/broadcast_perf.txt "
                   "%s/no-such-file.txt --deepep %s/deepep-intranode.txt",
                   outf, data, data, data, data, data, data);
    assert_int_equal(run_cli(args, out), 0);
    /* stderr (the missing file's message) comes first: the JSON object follows it */
    assert_non_null(strstr(out, "no-such-file.txt"));
    cJSON *j = cJSON_Parse(strchr(out, '{'));
    assert_non_null(j);
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(j, "tables");
    assert_int_equal(cJSON_GetArraySize(tables), 4);
    const cJSON *t0 = cJSON_GetArrayItem(tables, 0);
    const char *keys[] = {"file",           "collective",        "ranks", "nodes",
                          "max_size_bytes", "busbw_GBps_at_max", "fit"};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        assert_non_null(cJSON_GetObjectItemCaseSensitive(t0, keys[k]));
    }
    const cJSON *fit = cJSON_GetObjectItemCaseSensitive(t0, "fit");
    assert_non_null(cJSON_GetObjectItemCaseSensitive(fit, "latency_us"));
    double fb = cJSON_GetObjectItemCaseSensitive(fit, "busbw_GBps")->valuedouble;
    double tb = cJSON_GetObjectItemCaseSensitive(t0, "busbw_GBps_at_max")->valuedouble;
    assert_true(fabs(fb / tb - 1.0) < 0.05);
    const cJSON *rej = cJSON_GetObjectItemCaseSensitive(j, "rejected");
    assert_int_equal(cJSON_GetArraySize(rej), 1); /* broadcast; the missing file on stderr */
    assert_non_null(
        strstr(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rej, 0), "why")->valuestring,
               "broadcast"));
    cJSON_Delete(j);
    /* The file loads as a cluster: the base with the measured figures. */
    struct moe_cluster base;
    struct moe_cluster cl;
    struct moe_diag d = {0};
    assert_int_equal(moe_cluster_load("dgx-h100", &base, &d), MOE_OK);
    assert_int_equal(moe_cluster_load(outf, &cl, &d), MOE_OK);
    assert_string_equal(cl.name, "dgx-h100-measured");
    assert_true(fabs(cl.nvlink.eff * cl.nvlink.gbps - 362.0) < 362.0 * 0.01);
    assert_true(fabs(cl.net.eff * cl.net.nic_gbps - 46.8) < 46.8 * 0.01);
    assert_true(fabs(cl.net.a2a_eff - 31.5 * 8 / 15 / 50.0) < 0.01);
    assert_true(fabs(cl.dispatch.deepep_intra_eff - (345.21 + 352.40) / 2 / 450.0) < 1e-6);
    assert_true(cl.gpu.peak_tflops[0] == base.gpu.peak_tflops[0]); /* inherited */
    assert_true(cl.overheads.ep_overlap_eff == base.overheads.ep_overlap_eff);
    /* Text output, then the errors. */
    (void)snprintf(args, sizeof(args),
                   "calibrate --base dgx-h100 --out %s --nccl-tests %s/efa-2node.log", outf, data);
    assert_int_equal(run_cli(args, out), 0);
    assert_non_null(strstr(out, "scaleout.a2a_eff"));
    assert_non_null(strstr(out, "wrote"));
    (void)snprintf(args, sizeof(args), "calibrate --nccl-tests %s/efa-2node.log", data);
    assert_int_equal(run_cli(args, out), 2); /* no --base */
    assert_non_null(strstr(out, "--base"));
    char none[512];
    (void)snprintf(none, sizeof(none), "%s/none.json", dir);
    (void)snprintf(args, sizeof(args),
                   "calibrate --base dgx-h100 --out %s --nccl-tests %s/broadcast_perf.txt "
                   "%s/reduce_scatter_perf-wrong.txt",
                   none, data, data);
    assert_int_equal(run_cli(args, out), 1);
    assert_non_null(strstr(out, "#wrong"));
    assert_non_null(strstr(out, "nothing written"));
    assert_int_not_equal(access(none, F_OK), 0);
    (void)snprintf(args, sizeof(args),
                   "calibrate --base dgx-h100 --out %s --deepep %s/all_gather-1node.out", none,
                   data);
    assert_int_equal(run_cli(args, out), 1);
    assert_non_null(strstr(out, "DeepEP"));
    (void)snprintf(args, sizeof(args), "rm -rf %s", dir);
    assert_int_equal(system(args), 0);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fits),      cmocka_unit_test(test_noise_and_refusals),
        cmocka_unit_test(test_bad_input), cmocka_unit_test(test_deepep),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
