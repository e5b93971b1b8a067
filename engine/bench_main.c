/*
 * moefold-bench: calibration microbenchmarks in the style of nccl-tests, run under mpirun (or as
 * one process): dense GEMM over shapes, grouped expert GEMM against one GEMM of equal FLOPs,
 * memory bandwidth and elementwise kernels, and every collective over message sizes and group
 * sizes, with algbw, busbw and a correctness column. Tables on rank 0 ('#' lines describe host
 * and configuration), or one JSON object with --json ("format": "moefold-bench", "version": 1)
 * for `moefold calibrate`.
 *
 *   mpirun -np N moefold-bench [--only gemm,grouped,mem,attention,quant,coll] [--min-bytes 8]
 *                              [--max-bytes 16M]
 *                              [--iters 20] [--warmup 5] [--passes 3] [--json] [--bind]
 *
 * Compute benchmarks run on every rank at once (as training does) and report the mean over ranks;
 * collectives run in groups of g consecutive ranks for every power of two g <= N (and N).
 * Exit status: 0, 1 when a check fails, 2 on a bad command line.
 */
#include "engine/bench.h"
#include "engine/comm_mpi.h"
#include "topologies/hwloc_host.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Passes over each table of kernel rates (GEMM, grouped GEMM, memory, activation, attention,
 * quantisation); each point keeps its median pass (--keep median, the default) or its least
 * (--keep least). A point's pass is a few milliseconds; on a shared or virtual host the rate of
 * such a window moves by about 5% (sd) from one to the next, with dips of up to 2x for tens of
 * seconds, while a training step averages over hundreds of them: the least of three passes
 * measured each point 5-10% faster than the steps that run it (make validate, 2026-12-02: 18 of
 * 20 plans slower than predicted, step error median -7%), the median of the passes is the rate
 * a step sees and still drops one disturbed pass of three. */
enum { BENCH_MAX_PASSES = 8 };

enum bench_keep { KEEP_MEDIAN, KEEP_LEAST };

struct bench_args {
    bool do_gemm, do_grouped, do_mem, do_attn, do_quant, do_coll;
    size_t min_bytes, max_bytes;
    struct moe_bench_cfg cfg;
    bool is_json;
    bool is_bound;        /* bind each rank to one core (its index among the node's ranks) */
    int passes;           /* passes over the kernel tables */
    enum bench_keep keep; /* which pass of each point is kept */
    long long evict;      /* --evict-bytes, -1: the host's last-level cache per core */
};

/* "16M", "64K", "8" -> bytes; -1 on error. */
static long long parse_size(const char *s)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || v < 0) {
        return -1;
    }
    if (*end == 'K' || *end == 'k') {
        v <<= 10;
        end++;
    } else if (*end == 'M' || *end == 'm') {
        v <<= 20;
        end++;
    } else if (*end == 'G' || *end == 'g') {
        v <<= 30;
        end++;
    }
    return *end == '\0' ? v : -1;
}

static void usage(FILE *f)
{
    (void)fprintf(f, "usage: mpirun -np N moefold-bench [options]\n"
                     "  --only LIST       gemm,grouped,mem,attention,quant,coll (default all)\n"
                     "  --min-bytes SIZE  smallest collective size (default 8; K/M/G suffixes)\n"
                     "  --max-bytes SIZE  largest collective size (default 16M)\n"
                     "  --iters N         timed iterations per point (default 20)\n"
                     "  --warmup N        untimed iterations first (default 5)\n"
                     "  --passes N        passes over the kernel tables (GEMM, grouped GEMM,\n"
                     "                    memory, activation, attention, quantisation)\n"
                     "                    (default 3, at most 8)\n"
                     "  --keep median|least  each point's pass kept: the median time (default:\n"
                     "                    the rate a training step sees) or the least\n"
                     "  --json            one JSON object on stdout instead of tables\n"
                     "  --bind            bind each rank to one core (hwloc) before measuring\n"
                     "  --evict-bytes SIZE  streamed by each rank before each collective of the\n"
                     "                    step(us) column (default: the last-level cache per\n"
                     "                    core; 0 for hot caches); GEMM operands cycle over\n"
                     "                    twice as many bytes\n"
                     "  --help, --version\n");
}

static int parse(int argc, char **argv, struct bench_args *a, bool root)
{
    static const struct option longs[] = {{"only", required_argument, NULL, 'o'},
                                          {"min-bytes", required_argument, NULL, 'a'},
                                          {"max-bytes", required_argument, NULL, 'b'},
                                          {"iters", required_argument, NULL, 'i'},
                                          {"warmup", required_argument, NULL, 'w'},
                                          {"passes", required_argument, NULL, 'p'},
                                          {"keep", required_argument, NULL, 'K'},
                                          {"json", no_argument, NULL, 'j'},
                                          {"bind", no_argument, NULL, 'B'},
                                          {"evict-bytes", required_argument, NULL, 'E'},
                                          {"help", no_argument, NULL, 'h'},
                                          {"version", no_argument, NULL, 'V'},
                                          {NULL, 0, NULL, 0}};
    *a = (struct bench_args){true,      true,       true,  true,  true, true,        8,
                             16u << 20, {20, 5, 0}, false, false, 3,    KEEP_MEDIAN, -1};
    opterr = root ? 1 : 0;
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        long long v = 0;
        switch (c) {
        case 'o':
            a->do_gemm = a->do_grouped = a->do_mem = a->do_attn = a->do_quant = a->do_coll = false;
            char *save = NULL;
            for (char *tok = strtok_r(optarg, ",", &save); tok != NULL;
                 tok = strtok_r(NULL, ",", &save)) {
                if (strcmp(tok, "gemm") == 0) {
                    a->do_gemm = true;
                } else if (strcmp(tok, "grouped") == 0) {
                    a->do_grouped = true;
                } else if (strcmp(tok, "mem") == 0) {
                    a->do_mem = true;
                } else if (strcmp(tok, "attention") == 0) {
                    a->do_attn = true;
                } else if (strcmp(tok, "quant") == 0) {
                    a->do_quant = true;
                } else if (strcmp(tok, "coll") == 0) {
                    a->do_coll = true;
                } else {
                    if (root) {
                        (void)fprintf(stderr,
                                      "moefold-bench: --only: unknown benchmark '%s' (gemm, "
                                      "grouped, mem, coll)\n",
                                      tok);
                    }
                    return 2;
                }
            }
            break;
        case 'a':
        case 'b':
            v = parse_size(optarg);
            if (v < 4) {
                if (root) {
                    (void)fprintf(stderr,
                                  "moefold-bench: bad size '%s' (bytes >= 4, K/M/G suffixes)\n",
                                  optarg);
                }
                return 2;
            }
            *(c == 'a' ? &a->min_bytes : &a->max_bytes) = (size_t)v;
            break;
        case 'i':
        case 'w':
            v = parse_size(optarg);
            if (v < (c == 'i' ? 1 : 0) || v > 1000000) {
                if (root) {
                    (void)fprintf(stderr, "moefold-bench: bad count '%s'\n", optarg);
                }
                return 2;
            }
            *(c == 'i' ? &a->cfg.iters : &a->cfg.warmup) = (int)v;
            break;
        case 'p':
            v = parse_size(optarg);
            if (v < 1 || v > BENCH_MAX_PASSES) {
                if (root) {
                    (void)fprintf(stderr, "moefold-bench: bad --passes '%s' (1 to %d)\n", optarg,
                                  BENCH_MAX_PASSES);
                }
                return 2;
            }
            a->passes = (int)v;
            break;
        case 'K':
            if (strcmp(optarg, "median") == 0 || strcmp(optarg, "least") == 0) {
                a->keep = optarg[0] == 'm' ? KEEP_MEDIAN : KEEP_LEAST;
                break;
            }
            if (root) {
                (void)fprintf(stderr, "moefold-bench: bad --keep '%s' (median or least)\n", optarg);
            }
            return 2;
        case 'E':
            v = parse_size(optarg);
            if (v < 0 || v > (1LL << 30)) {
                if (root) {
                    (void)fprintf(stderr,
                                  "moefold-bench: bad --evict-bytes '%s' (0 to 1G, K/M/G "
                                  "suffixes)\n",
                                  optarg);
                }
                return 2;
            }
            a->evict = v;
            break;
        case 'j':
            a->is_json = true;
            break;
        case 'B':
            a->is_bound = true;
            break;
        case 'h':
            return 3;
        case 'V':
            return 4;
        default:
            return 2;
        }
    }
    if (optind < argc || a->min_bytes > a->max_bytes) {
        if (root) {
            (void)fprintf(stderr,
                          "moefold-bench: unexpected argument or --min-bytes > --max-bytes\n");
        }
        return 2;
    }
    return 0;
}

/* Mean of v over the world. */
static double world_mean(moe_comm_t *w, double v)
{
    moe_comm_allreduce(w, &v, &v, 1, MOE_COMM_F64, MOE_COMM_SUM);
    return v / moe_comm_size(w);
}

/* Largest v over the world. */
static double world_max(moe_comm_t *w, double v)
{
    moe_comm_allreduce(w, &v, &v, 1, MOE_COMM_F64, MOE_COMM_MAX);
    return v;
}

/* The GEMM tables' calls per point: cfg's, cut so that one point times about BENCH_POINT_FLOPS
 * (at least 3 calls, one warm-up call where cut): a 2048^3 GEMM is 17 GFLOP, 20 calls and 5
 * warm-ups of it took 2.3 s, and the tables are timed in --passes. */
#define BENCH_POINT_FLOPS 2e10

/* The pass kept of a point timed t[0..n) in n passes (1 <= n <= BENCH_MAX_PASSES): the median
 * time's (of an even count the faster middle one's) or the least time's. */
static int kept_pass(const double *t, int n, enum bench_keep keep)
{
    int order[BENCH_MAX_PASSES];
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && t[order[j - 1]] > t[i]; j--) {
            order[j] = order[j - 1];
        }
        order[j] = i;
    }
    return keep == KEEP_LEAST ? order[0] : order[(n - 1) / 2];
}
static struct moe_bench_cfg point_cfg(const struct moe_bench_cfg *c, double flops)
{
    struct moe_bench_cfg p = *c;
    double cap = ceil(BENCH_POINT_FLOPS / (flops > 1.0 ? flops : 1.0));
    if (cap < (double)c->iters) {
        p.iters = cap < 3.0 ? 3 : (int)cap;
        p.warmup = 1;
    }
    return p;
}

static int all_ok(moe_comm_t *w, bool ok)
{
    int v = ok ? 0 : 1;
    moe_comm_allreduce(w, &v, &v, 1, MOE_COMM_I32, MOE_COMM_SUM);
    return v;
}

static void header(moe_comm_t *w, const struct bench_args *a, cJSON *js)
{
    if (moe_comm_rank(w) != 0) {
        return;
    }
    struct moe_host_info h;
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    bool have = moe_host_discover(&h, &diag) == MOE_OK;
    if (js != NULL) {
        cJSON *o = cJSON_AddObjectToObject(js, "host");
        cJSON_AddStringToObject(o, "cpu_model", have ? h.cpu_model : "");
        cJSON_AddNumberToObject(o, "cores", have ? h.num_cores : 0);
        cJSON_AddNumberToObject(o, "threads", have ? h.num_pus : 0);
        cJSON_AddNumberToObject(o, "numa_nodes", have ? h.num_numa : 0);
        cJSON_AddNumberToObject(o, "memory_bytes", have ? h.memory_bytes : 0.0);
        cJSON_AddNumberToObject(o, "llc_bytes", have ? h.llc_bytes : 0.0);
        cJSON_AddNumberToObject(js, "ranks", moe_comm_size(w));
        cJSON_AddNumberToObject(js, "iters", a->cfg.iters);
        cJSON_AddNumberToObject(js, "evict_bytes", (double)a->cfg.evict_bytes);
        return;
    }
    (void)printf(
        "# moefold-bench: %d rank(s), OpenBLAS with 1 thread per rank, %d iterations after %d "
        "warm-up\n",
        moe_comm_size(w), a->cfg.iters, a->cfg.warmup);
    if (have) {
        (void)printf(
            "# host: %s, %d package(s), %d cores, %d threads, %d NUMA node(s), %.1f GiB, L%d "
            "%.1f MiB\n",
            h.cpu_model[0] ? h.cpu_model : "unknown CPU", h.num_packages, h.num_cores, h.num_pus,
            h.num_numa, h.memory_bytes / 1073741824.0, h.llc_level, h.llc_bytes / 1048576.0);
    } else {
        (void)printf("# host: hwloc discovery failed: %s\n", diag.message);
    }
    (void)printf("# collectives' step(us): one call at a time after each rank streams %.1f MiB "
                 "(--evict-bytes%s) and rewrites its input, as the kernels before it in a "
                 "step\n",
                 (double)a->cfg.evict_bytes / 1048576.0,
                 a->evict >= 0 ? "" : "; the last-level cache per core");
}

/* --evict-bytes, or the host's last-level cache per core. */
static size_t evict_default(const struct bench_args *a)
{
    return a->evict >= 0 ? (size_t)a->evict : moe_host_evict_bytes();
}

static int bench_gemm(moe_comm_t *w,
                      const struct moe_k_ops *k,
                      moe_k_ctx_t *kc,
                      const struct bench_args *a,
                      cJSON *js)
{
    static const int shapes[][3] = {
        {256, 256, 256},
        {512, 512, 512},
        {1024, 1024, 1024},
        {2048, 2048, 2048},
        {2048, 1024, 4096},
        {2048, 4096, 1024},
        {64, 4096, 1024},
        {16, 1024, 1024},
        /* Shapes of small MoE layers (tokens x hidden x expert/head widths), for calibration. */
        {128, 256, 256},
        {256, 512, 256},
        {512, 256, 512},
        {1024, 768, 256},
        {1024, 256, 768},
        {32, 512, 256},
        {64, 256, 512},
        {4096, 256, 256},
        /* The presets' miniatures (moe_cfg_shrink: hidden 64, heads of 16, experts of 32, 128-256
         * tokens per rank): GEMMs of 0.1-4 MFLOP, below the shapes above. Without them the
         * curve's FLOPs term is an extrapolation there (one fit priced them 2x slow; this host
         * runs them near its peak). */
        {128, 128, 64},
        {128, 64, 64},
        {256, 256, 64},
        {32, 64, 64},
        {64, 32, 64},
        {256, 64, 32},
    };
    bool root = moe_comm_rank(w) == 0;
    cJSON *arr = js != NULL ? cJSON_AddArrayToObject(js, "gemm") : NULL;
    if (root && js == NULL) {
        (void)printf("\n# dense linear of M rows, K in, N out (fp32: forward, backward-data, "
                     "backward-weight in turn, cold operands), mean over ranks\n");
        (void)printf("#%8s %8s %8s %12s %10s %6s\n", "M", "N", "K", "time(us)", "GFLOP/s", "check");
    }
    int bad = 0;
    /* One untimed call first: the first GEMM of a process pays page faults and the BLAS set-up,
     * which would otherwise land on the first shape of the sweep. */
    struct moe_bench_gemm first;
    if (moe_bench_gemm_run(k, kc, &a->cfg, shapes[1][0], shapes[1][1], shapes[1][2], &first) !=
        MOE_OK) {
        bad = 1;
    }
    /* --passes over the table, each shape's kept pass (--keep) of the mean time over the ranks (as
     * the other tables): one pass's rates moved by 5-25% per shape from one run to the next on a
     * shared VM, and the curve fitted to them by up to 8% in peak and 2x in its narrow-dimension
     * term (2026-12-02). */
    enum { NUM_SHAPES = sizeof(shapes) / sizeof(shapes[0]) };
    struct moe_bench_gemm runs[NUM_SHAPES][BENCH_MAX_PASSES];
    double pass_us[NUM_SHAPES][BENCH_MAX_PASSES], pass_max[NUM_SHAPES][BENCH_MAX_PASSES];
    int wrong[NUM_SHAPES];
    for (int pass = 0; pass < a->passes; pass++) {
        for (size_t i = 0; i < NUM_SHAPES; i++) {
            struct moe_bench_gemm g;
            double flops = 2.0 * shapes[i][0] * (double)shapes[i][1] * shapes[i][2];
            struct moe_bench_cfg pc = point_cfg(&a->cfg, flops);
            if (moe_bench_gemm_run(k, kc, &pc, shapes[i][0], shapes[i][1], shapes[i][2], &g) !=
                MOE_OK) {
                g.is_ok = false;
                g.m = shapes[i][0];
                g.n = shapes[i][1];
                g.k = shapes[i][2];
                g.time_us = 0.0;
                g.gflops = 0.0;
            }
            runs[i][pass] = g;
            pass_us[i][pass] = world_mean(w, g.time_us);
            pass_max[i][pass] = world_max(w, g.time_us); /* the slowest rank: a step waits for it */
            int bad_here = all_ok(w, g.is_ok);
            wrong[i] = pass == 0 ? bad_here : (wrong[i] | bad_here);
        }
    }
    for (size_t i = 0; i < NUM_SHAPES; i++) {
        int kp = kept_pass(pass_us[i], a->passes, a->keep);
        const struct moe_bench_gemm *g = &runs[i][kp];
        double us = pass_us[i][kp];
        double gf = us > 0.0 ? 2.0 * g->m * (double)g->n * g->k / (us * 1e3) : 0.0;
        bad += wrong[i];
        if (root && arr != NULL) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "m", g->m);
            cJSON_AddNumberToObject(o, "n", g->n);
            cJSON_AddNumberToObject(o, "k", g->k);
            cJSON_AddNumberToObject(o, "time_us", us);
            cJSON_AddNumberToObject(o, "time_us_max", pass_max[i][kp]);
            cJSON_AddNumberToObject(o, "gflops", gf);
            cJSON_AddBoolToObject(o, "ok", wrong[i] == 0);
            cJSON_AddItemToArray(arr, o);
        } else if (root) {
            (void)printf(" %8d %8d %8d %12.1f %10.2f %6s\n", g->m, g->n, g->k, us, gf,
                         wrong[i] == 0 ? "OK" : "FAIL");
        }
    }
    return bad;
}

static int bench_grouped(moe_comm_t *w,
                         const struct moe_k_ops *k,
                         moe_k_ctx_t *kc,
                         const struct bench_args *a,
                         cJSON *js)
{
    static const int cases[][4] = {
        /* experts, tokens (rows over all experts), in, out; from the seventh: the validate
         * model's expert GEMMs (32 rows per expert; 16 where TP or CP halve a rank's tokens;
         * 64-128 where its router sends a micro-batch to a few experts, as it does after a few
         * steps on the synthetic data: 41-55% of the local experts held rows, 2026-12-04) and
         * the presets' miniatures' (16-128 rows, 32-64 wide: their engine runs 32-128 rows an
         * expert, by the plan's TP, CP and EP). The fitted narrow-row term is only
         * as good as the rows it saw: with 32 rows the fewest, it priced the 16-row GEMMs of the
         * validate suite's tp2 and cp2 plans 14-17% slow. The last two: the miniatures' second
         * expert GEMM (32 in, 64 out) at 16 and 32 rows, so the small-matrix regime's fit
         * (gemm.grouped_small) sees both widths at each end. */
        {8, 512, 1024, 512},   {8, 2048, 1024, 512}, {8, 8192, 1024, 512}, {32, 2048, 1024, 512},
        {32, 8192, 1024, 512}, {64, 8192, 512, 256}, {8, 256, 256, 512},   {8, 256, 256, 256},
        {8, 128, 256, 512},    {8, 128, 256, 256},   {8, 512, 256, 512},   {8, 512, 256, 256},
        {8, 1024, 256, 512},   {8, 1024, 256, 256},  {16, 512, 64, 64},    {16, 1024, 32, 64},
        {16, 256, 64, 64},     {16, 1024, 64, 64},   {16, 2048, 64, 64},   {16, 2048, 32, 64},
        {16, 256, 32, 64},     {16, 512, 32, 64},
    };
    bool root = moe_comm_rank(w) == 0;
    cJSON *arr = js != NULL ? cJSON_AddArrayToObject(js, "grouped_gemm") : NULL;
    if (root && js == NULL) {
        (void)printf("\n# grouped expert GEMM (one sgemm per expert) vs one GEMM of equal FLOPs\n");
        (void)printf("#%7s %8s %6s %6s %7s %12s %10s %12s %7s %10s %10s %6s\n", "experts", "tokens",
                     "in", "out", "rows", "time(us)", "GFLOP/s", "dense GF/s", "ratio",
                     "dgrad GF/s", "wgrad GF/s", "check");
    }
    int bad = 0;
    /* --passes, each point's kept pass of the mean grouped forward time (as the dense table), and
     * the equal-FLOPs dense rate and the backward's two times of the same pass. */
    enum { NUM_CASES = sizeof(cases) / sizeof(cases[0]) };
    struct moe_bench_grouped runs[NUM_CASES][2][BENCH_MAX_PASSES];
    double pass_us[NUM_CASES][2][BENCH_MAX_PASSES], pass_dense[NUM_CASES][2][BENCH_MAX_PASSES];
    double pass_dgrad[NUM_CASES][2][BENCH_MAX_PASSES], pass_wgrad[NUM_CASES][2][BENCH_MAX_PASSES];
    int wrong[NUM_CASES][2];
    for (int pass = 0; pass < a->passes; pass++) {
        for (size_t i = 0; i < NUM_CASES; i++) {
            for (int skew = 0; skew < 2; skew++) {
                struct moe_bench_grouped g;
                double flops = 2.0 * cases[i][1] * (double)cases[i][2] * cases[i][3];
                struct moe_bench_cfg pc = point_cfg(&a->cfg, flops);
                if (moe_bench_grouped_run(k, kc, &pc, cases[i][0], cases[i][1], cases[i][2],
                                          cases[i][3], skew != 0, &g) != MOE_OK) {
                    memset(&g, 0, sizeof(g));
                    g.num_experts = cases[i][0];
                    g.tokens = cases[i][1];
                    g.in = cases[i][2];
                    g.out = cases[i][3];
                    g.is_skewed = skew != 0;
                }
                runs[i][skew][pass] = g;
                pass_us[i][skew][pass] = world_mean(w, g.time_us);
                pass_dense[i][skew][pass] = world_mean(w, g.dense_gflops);
                pass_dgrad[i][skew][pass] = world_mean(w, g.dgrad_time_us);
                pass_wgrad[i][skew][pass] = world_mean(w, g.wgrad_time_us);
                int bad_here = all_ok(w, g.is_ok);
                wrong[i][skew] = pass == 0 ? bad_here : (wrong[i][skew] | bad_here);
            }
        }
    }
    for (size_t i = 0; i < NUM_CASES; i++) {
        for (int skew = 0; skew < 2; skew++) {
            int kp = kept_pass(pass_us[i][skew], a->passes, a->keep);
            const struct moe_bench_grouped *g = &runs[i][skew][kp];
            double us = pass_us[i][skew][kp];
            double mflop = 2.0 * g->tokens * (double)g->in * g->out * 1e-3;
            double gf = us > 0.0 ? mflop / us : 0.0;
            double dg = pass_dense[i][skew][kp];
            double d_us = pass_dgrad[i][skew][kp];
            double w_us = pass_wgrad[i][skew][kp];
            double dgf = d_us > 0.0 ? mflop / d_us : 0.0;
            double wgf = w_us > 0.0 ? mflop / w_us : 0.0;
            int bad_here = wrong[i][skew];
            bad += bad_here;
            if (root && arr != NULL) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "experts", g->num_experts);
                cJSON_AddNumberToObject(o, "tokens", g->tokens);
                cJSON_AddNumberToObject(o, "in", g->in);
                cJSON_AddNumberToObject(o, "out", g->out);
                cJSON_AddBoolToObject(o, "skewed", g->is_skewed);
                cJSON_AddNumberToObject(o, "time_us", us);
                cJSON_AddNumberToObject(o, "gflops", gf);
                cJSON_AddNumberToObject(o, "dense_gflops", dg);
                cJSON_AddNumberToObject(o, "dgrad_time_us", d_us);
                cJSON_AddNumberToObject(o, "dgrad_gflops", dgf);
                cJSON_AddNumberToObject(o, "wgrad_time_us", w_us);
                cJSON_AddNumberToObject(o, "wgrad_gflops", wgf);
                cJSON_AddBoolToObject(o, "ok", bad_here == 0);
                cJSON_AddItemToArray(arr, o);
            } else if (root) {
                (void)printf(" %7d %8d %6d %6d %7s %12.1f %10.2f %12.2f %7.3f %10.2f %10.2f %6s\n",
                             g->num_experts, g->tokens, g->in, g->out, skew ? "zipf" : "even", us,
                             gf, dg, dg > 0.0 ? gf / dg : 0.0, dgf, wgf,
                             bad_here == 0 ? "OK" : "FAIL");
            }
        }
    }
    return bad;
}

static int bench_mem(moe_comm_t *w,
                     const struct moe_k_ops *k,
                     moe_k_ctx_t *kc,
                     const struct bench_args *a,
                     cJSON *js)
{
    static const char *const names[] = {"copy", "axpy",  "rmsnorm",  "swiglu",
                                        "rope", "adamw", "optimizer"};
    static const size_t sizes[] = {1u << 20, 16u << 20, 128u << 20};
    bool root = moe_comm_rank(w) == 0;
    cJSON *arr = js != NULL ? cJSON_AddArrayToObject(js, "memory") : NULL;
    if (root && js == NULL) {
        (void)printf(
            "\n# memory bandwidth and elementwise kernels (bytes read + written), mean over "
            "ranks\n");
        (void)printf("#%9s %12s %12s %10s %6s\n", "kernel", "bytes", "time(us)", "GB/s", "check");
    }
    /* --passes over the table (default 3), each point's kept pass of the per-call median (as the
     * attention bench's): calibrations minutes apart had fitted elementwise efficiencies 0.23-0.44
     * from one pass's means. */
    enum {
        MEM_NAMES = sizeof(names) / sizeof(names[0]),
        MEM_SIZES = sizeof(sizes) / sizeof(sizes[0])
    };
    struct moe_bench_mem passes[MEM_NAMES][MEM_SIZES][BENCH_MAX_PASSES];
    memset(passes, 0, sizeof(passes));
    for (int pass = 0; pass < a->passes; pass++) {
        for (size_t i = 0; i < MEM_NAMES; i++) {
            for (size_t s = 0; s < MEM_SIZES; s++) {
                struct moe_bench_mem *m = &passes[i][s][pass];
                if (moe_bench_mem_run(k, kc, &a->cfg, names[i], sizes[s], m) != MOE_OK) {
                    m->is_ok = false;
                    m->bytes = 0;
                }
            }
        }
    }
    struct moe_bench_mem runs[MEM_NAMES][MEM_SIZES];
    for (size_t i = 0; i < MEM_NAMES; i++) {
        for (size_t s = 0; s < MEM_SIZES; s++) {
            double us[BENCH_MAX_PASSES];
            bool ok = true;
            for (int pass = 0; pass < a->passes; pass++) {
                us[pass] = passes[i][s][pass].time_us;
                ok = ok && passes[i][s][pass].is_ok;
            }
            runs[i][s] = passes[i][s][kept_pass(us, a->passes, a->keep)];
            runs[i][s].is_ok = ok;
        }
    }
    int bad = 0;
    for (size_t i = 0; i < MEM_NAMES; i++) {
        for (size_t s = 0; s < MEM_SIZES; s++) {
            struct moe_bench_mem m = runs[i][s];
            double us = world_mean(w, m.time_us), gb = world_mean(w, m.gbps);
            int wrong = all_ok(w, m.is_ok);
            bad += wrong;
            if (root && arr != NULL) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "kernel", names[i]);
                cJSON_AddNumberToObject(o, "bytes", (double)m.bytes);
                cJSON_AddNumberToObject(o, "time_us", us);
                cJSON_AddNumberToObject(o, "gbps", gb);
                cJSON_AddBoolToObject(o, "ok", wrong == 0);
                cJSON_AddItemToArray(arr, o);
            } else if (root) {
                (void)printf(" %9s %12zu %12.1f %10.2f %6s\n", names[i], m.bytes, us, gb,
                             wrong == 0 ? "OK" : "FAIL");
            }
        }
    }
    return bad;
}

/* A forward / backward table at the engine's row widths and per-call working sets (see
 * bench_act and bench_bias): each (width, size) run --passes times, each direction's kept pass. */
struct act_table {
    const char *key;   /* the JSON array's name */
    const char *title; /* the text table's heading */
    const char *width; /* the width column's name */
    enum moe_status (*run)(const struct moe_k_ops *,
                           moe_k_ctx_t *,
                           const struct moe_bench_cfg *,
                           int,
                           size_t,
                           struct moe_bench_act *);
    int widths[3];
    size_t sizes[2];
};

static int bench_act_table(moe_comm_t *w,
                           const struct moe_k_ops *k,
                           moe_k_ctx_t *kc,
                           const struct bench_args *a,
                           const struct act_table *t,
                           cJSON *js)
{
    bool root = moe_comm_rank(w) == 0;
    cJSON *arr = js != NULL ? cJSON_AddArrayToObject(js, t->key) : NULL;
    if (root && js == NULL) {
        (void)printf("\n# %s, mean over ranks\n", t->title);
        (void)printf("#%6s %6s %10s %10s %9s %10s %10s %9s %6s\n", t->width, "rows", "fwd_bytes",
                     "fwd(us)", "fwd GB/s", "bwd_bytes", "bwd(us)", "bwd GB/s", "check");
    }
    /* --passes, each direction's kept pass of the per-call median (as the memory table's). */
    enum {
        ACT_WIDTHS = sizeof(t->widths) / sizeof(t->widths[0]),
        ACT_SIZES = sizeof(t->sizes) / sizeof(t->sizes[0])
    };
    const int *widths = t->widths;
    struct moe_bench_act passes[ACT_WIDTHS][ACT_SIZES][BENCH_MAX_PASSES];
    memset(passes, 0, sizeof(passes));
    for (int pass = 0; pass < a->passes; pass++) {
        for (size_t i = 0; i < ACT_WIDTHS; i++) {
            for (size_t s = 0; s < ACT_SIZES; s++) {
                struct moe_bench_act *m = &passes[i][s][pass];
                if (t->run(k, kc, &a->cfg, widths[i], t->sizes[s], m) != MOE_OK) {
                    m->is_ok = false;
                }
            }
        }
    }
    struct moe_bench_act runs[ACT_WIDTHS][ACT_SIZES];
    for (size_t i = 0; i < ACT_WIDTHS; i++) {
        for (size_t s = 0; s < ACT_SIZES; s++) {
            const struct moe_bench_act *p = passes[i][s];
            double fus[BENCH_MAX_PASSES], bus[BENCH_MAX_PASSES];
            bool ok = true;
            for (int pass = 0; pass < a->passes; pass++) {
                fus[pass] = p[pass].fwd_us;
                bus[pass] = p[pass].bwd_us;
                ok = ok && p[pass].is_ok;
            }
            int kf = kept_pass(fus, a->passes, a->keep), kb = kept_pass(bus, a->passes, a->keep);
            runs[i][s] = p[kf];
            runs[i][s].bwd_us = p[kb].bwd_us;
            runs[i][s].bwd_gbps = p[kb].bwd_gbps;
            runs[i][s].is_ok = ok;
        }
    }
    int bad = 0;
    for (size_t i = 0; i < ACT_WIDTHS; i++) {
        for (size_t s = 0; s < ACT_SIZES; s++) {
            struct moe_bench_act m = runs[i][s];
            double fus = world_mean(w, m.fwd_us), bus = world_mean(w, m.bwd_us);
            double fgb = world_mean(w, m.fwd_gbps), bgb = world_mean(w, m.bwd_gbps);
            int wrong = all_ok(w, m.is_ok);
            bad += wrong;
            if (root && arr != NULL) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, t->width, m.ffn);
                cJSON_AddNumberToObject(o, "rows", m.rows);
                cJSON_AddNumberToObject(o, "fwd_bytes", (double)m.fwd_bytes);
                cJSON_AddNumberToObject(o, "fwd_us", fus);
                cJSON_AddNumberToObject(o, "fwd_gbps", fgb);
                cJSON_AddNumberToObject(o, "bwd_bytes", (double)m.bwd_bytes);
                cJSON_AddNumberToObject(o, "bwd_us", bus);
                cJSON_AddNumberToObject(o, "bwd_gbps", bgb);
                cJSON_AddBoolToObject(o, "ok", wrong == 0);
                cJSON_AddItemToArray(arr, o);
            } else if (root) {
                (void)printf(" %6d %6d %10zu %10.1f %9.2f %10zu %10.1f %9.2f %6s\n", m.ffn, m.rows,
                             m.fwd_bytes, fus, fgb, m.bwd_bytes, bus, bgb,
                             wrong == 0 ? "OK" : "FAIL");
            }
        }
    }
    return bad;
}

/* SwiGLU forward and backward at the engine's shapes: expert and MLP row widths of the presets'
 * miniatures up to full models' (32-512), at per-call working sets like the engine's (activations
 * of one micro-batch's rows, cache-resident on a CPU host) -- calibrate prices the activation
 * from these rows, not from the streaming sizes of the table above. */
static int bench_act(moe_comm_t *w,
                     const struct moe_k_ops *k,
                     moe_k_ctx_t *kc,
                     const struct bench_args *a,
                     cJSON *js)
{
    static const struct act_table t = {
        "activation",   "SwiGLU forward / backward at the engine's row widths",
        "ffn",          moe_bench_act_run,
        {32, 128, 512}, {512u << 10, 2u << 20}};
    return bench_act_table(w, k, kc, a, &t, js);
}

/* The routed experts' bias ops at the engine's shapes: one call per expert right after its GEMM,
 * over output widths of the miniatures (64: fc1's gate and up, fc2's hidden) up to 1024, on a
 * cache-resident group (one micro-batch's expert rows) -- calibrate prices the bias pass from
 * these rows: at GPT-OSS's miniature the calls ran 4x the streaming elementwise rate. */
static int bench_bias(moe_comm_t *w,
                      const struct moe_k_ops *k,
                      moe_k_ctx_t *kc,
                      const struct bench_args *a,
                      cJSON *js)
{
    static const struct act_table t = {
        "bias",          "expert bias add / bias gradient at the engine's widths (16 experts)",
        "width",         moe_bench_bias_run,
        {64, 256, 1024}, {256u << 10, 2u << 20}};
    return bench_act_table(w, k, kc, a, &t, js);
}

/* n passes of one shape (n >= 1): each direction's kept pass of the per-call median (the rates
 * with it), failed if any pass failed. */
static struct moe_bench_attention
kept_attention(const struct moe_bench_attention *r, int n, enum bench_keep keep)
{
    double fus[BENCH_MAX_PASSES], bus[BENCH_MAX_PASSES];
    bool ok = true;
    for (int i = 0; i < n; i++) {
        fus[i] = r[i].fwd_us;
        bus[i] = r[i].bwd_us;
        ok = ok && r[i].is_ok;
    }
    int kf = kept_pass(fus, n, keep), kb = kept_pass(bus, n, keep);
    struct moe_bench_attention m = r[kf];
    m.bwd_us = r[kb].bwd_us;
    m.bwd_gflops = r[kb].bwd_gflops;
    m.is_ok = ok;
    return m;
}

static int bench_attention(moe_comm_t *w,
                           const struct moe_k_ops *k,
                           moe_k_ctx_t *kc,
                           const struct bench_args *a,
                           cJSON *js)
{
    static const int shapes[][6] = {/* batch, seq, heads, kv heads, head dim, window */
                                    {1, 256, 8, 8, 64, 0},
                                    {1, 512, 8, 2, 64, 0},
                                    {1, 1024, 8, 8, 128, 0},
                                    {2, 512, 16, 4, 64, 0},
                                    /* Narrow heads (small models' 16-32): there the softmax's
                                     * per-score work weighs against the products' 4 d FLOPs
                                     * per score, which calibrate fits as the attention's
                                     * narrow-dimension term. */
                                    {1, 256, 4, 2, 16, 0},
                                    {1, 512, 4, 4, 16, 0},
                                    {1, 256, 8, 4, 32, 0},
                                    {1, 128, 8, 4, 32, 0},
                                    /* Sliding windows shorter than the sequence: the kernel
                                     * takes the queries in tiles of `window` rows, one GEMM
                                     * pair a tile, whose cost beyond the scores calibrate fits
                                     * per tile (the validate suite's GPT-OSS miniature: window
                                     * 16, heads of 16). */
                                    {1, 256, 4, 2, 16, 16},
                                    {1, 512, 4, 2, 16, 32},
                                    {1, 256, 8, 4, 32, 16}};
    bool root = moe_comm_rank(w) == 0;
    cJSON *arr = js != NULL ? cJSON_AddArrayToObject(js, "attention") : NULL;
    if (root && js == NULL) {
        (void)printf("\n# causal GQA attention (scores in a workspace), mean over ranks\n");
        (void)printf("#%4s %6s %5s %5s %4s %5s %12s %12s %10s %10s %6s\n", "B", "T", "Hq", "Hkv",
                     "D", "W", "fwd(us)", "bwd(us)", "fwd GF/s", "bwd GF/s", "check");
    }
    /* --passes over all shapes (default 3), each timing every call and keeping the median; the
     * kept pass's median (--keep) is the shape's figure. A disturbance on a shared host lasts
     * seconds to tens of seconds and hits one pass of a shape, rarely all three (calibrations
     * minutes apart had fitted forward efficiencies 0.43-0.60 from one pass's means). */
    enum { ATTN_SHAPES = sizeof(shapes) / sizeof(shapes[0]) };
    struct moe_bench_attention runs[ATTN_SHAPES][BENCH_MAX_PASSES];
    memset(runs, 0, sizeof(runs));
    for (int round = 0; round < a->passes; round++) {
        for (size_t i = 0; i < ATTN_SHAPES; i++) {
            if (moe_bench_attention_run(k, kc, &a->cfg, shapes[i][0], shapes[i][1], shapes[i][2],
                                        shapes[i][3], shapes[i][4], shapes[i][5],
                                        &runs[i][round]) != MOE_OK) {
                runs[i][round].is_ok = false;
            }
        }
    }
    int bad = 0;
    for (size_t i = 0; i < ATTN_SHAPES; i++) {
        struct moe_bench_attention r = kept_attention(runs[i], a->passes, a->keep);
        double fu = world_mean(w, r.fwd_us), bu = world_mean(w, r.bwd_us);
        double fg = world_mean(w, r.fwd_gflops), bg = world_mean(w, r.bwd_gflops);
        int wrong = all_ok(w, r.is_ok);
        bad += wrong;
        if (root && arr != NULL) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "batch", shapes[i][0]);
            cJSON_AddNumberToObject(o, "seq", shapes[i][1]);
            cJSON_AddNumberToObject(o, "heads", shapes[i][2]);
            cJSON_AddNumberToObject(o, "kv_heads", shapes[i][3]);
            cJSON_AddNumberToObject(o, "head_dim", shapes[i][4]);
            cJSON_AddNumberToObject(o, "window", shapes[i][5]);
            cJSON_AddNumberToObject(o, "fwd_us", fu);
            cJSON_AddNumberToObject(o, "bwd_us", bu);
            cJSON_AddNumberToObject(o, "fwd_gflops", fg);
            cJSON_AddNumberToObject(o, "bwd_gflops", bg);
            cJSON_AddBoolToObject(o, "ok", wrong == 0);
            cJSON_AddItemToArray(arr, o);
        } else if (root) {
            (void)printf(" %4d %6d %5d %5d %4d %5d %12.1f %12.1f %10.2f %10.2f %6s\n", shapes[i][0],
                         shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5], fu,
                         bu, fg, bg, wrong == 0 ? "OK" : "FAIL");
        }
    }
    return bad;
}

static int bench_quant(moe_comm_t *w,
                       const struct moe_k_ops *k,
                       moe_k_ctx_t *kc,
                       const struct bench_args *a,
                       cJSON *js)
{
    static const struct {
        const char *name;
        enum moe_k_qformat f;
        enum moe_k_qrecipe r;
    } recipes[] = {
        {"bf16", MOE_K_QFMT_BF16, MOE_K_QRECIPE_CAST},
        {"fp8-e4m3-tensorwise", MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_TENSORWISE},
        {"fp8-e5m2-tensorwise", MOE_K_QFMT_FP8_E5M2, MOE_K_QRECIPE_TENSORWISE},
        {"fp8-e4m3-1x128", MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_BLOCK_1X128},
        {"fp8-e4m3-128x128", MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_BLOCK_128X128},
        {"mxfp8-e4m3", MOE_K_QFMT_FP8_E4M3, MOE_K_QRECIPE_MX},
        {"nvfp4", MOE_K_QFMT_FP4_E2M1, MOE_K_QRECIPE_NVFP4},
    };
    const int rows = 2048, cols = 1024;
    bool root = moe_comm_rank(w) == 0;
    cJSON *arr = js != NULL ? cJSON_AddArrayToObject(js, "quant") : NULL;
    if (root && js == NULL) {
        (void)printf("\n# quantise -> dequantise of a [%d, %d] fp32 matrix, mean over ranks\n",
                     rows, cols);
        (void)printf("#%20s %12s %12s %10s %6s\n", "recipe", "elements", "time(us)", "GB/s",
                     "check");
    }
    int bad = 0;
    /* --passes, each recipe's kept pass of the mean time (as the GEMM tables), at most 5
     * calls a point (a call is tens of ms on a CPU rank): one pass's figure moved by 27% between
     * calibrations of 2026-12-02 (27.6-36.9 ns per element), and validate's fp8-blockwise step
     * (quantisation is most of it under emulation) with it. */
    enum { NUM_RECIPES = sizeof(recipes) / sizeof(recipes[0]) };
    struct moe_bench_cfg pc = a->cfg;
    if (pc.iters > 5) {
        pc.iters = 5;
        pc.warmup = 1;
    }
    double pass_us[NUM_RECIPES][BENCH_MAX_PASSES];
    int wrong[NUM_RECIPES];
    for (int pass = 0; pass < a->passes; pass++) {
        for (size_t i = 0; i < NUM_RECIPES; i++) {
            struct moe_bench_quant r;
            memset(&r, 0, sizeof(r));
            if (moe_bench_quant_run(k, kc, &pc, rows, cols, recipes[i].f, recipes[i].r, &r) !=
                MOE_OK) {
                r.is_ok = false;
            }
            pass_us[i][pass] = world_mean(w, r.time_us);
            int bad_here = all_ok(w, r.is_ok);
            wrong[i] = pass == 0 ? bad_here : (wrong[i] | bad_here);
        }
    }
    for (size_t i = 0; i < NUM_RECIPES; i++) {
        double us = pass_us[i][kept_pass(pass_us[i], a->passes, a->keep)];
        double gb = us > 0.0 ? 8.0 * (double)rows * cols / (us * 1e3) : 0.0;
        bad += wrong[i];
        if (root && arr != NULL) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "recipe", recipes[i].name);
            cJSON_AddNumberToObject(o, "elements", (double)rows * cols);
            cJSON_AddNumberToObject(o, "time_us", us);
            cJSON_AddNumberToObject(o, "gbps", gb);
            cJSON_AddBoolToObject(o, "ok", wrong[i] == 0);
            cJSON_AddItemToArray(arr, o);
        } else if (root) {
            (void)printf(" %20s %12d %12.1f %10.2f %6s\n", recipes[i].name, rows * cols, us, gb,
                         wrong[i] == 0 ? "OK" : "FAIL");
        }
    }
    return bad;
}

static int bench_coll(moe_comm_t *w, const struct bench_args *a, cJSON *js)
{
    int n = moe_comm_size(w), rank = moe_comm_rank(w);
    bool root = rank == 0;
    cJSON *arr = js != NULL ? cJSON_AddArrayToObject(js, "collectives") : NULL;
    int bad = 0;
    /* Group sizes: the powers of two that divide n, then n itself. */
    for (int gsize = 2; gsize <= n; gsize = gsize * 2 < n ? gsize * 2 : (gsize == n ? n + 1 : n)) {
        if (n % gsize != 0) {
            continue;
        }
        moe_comm_t *g = NULL;
        if (moe_comm_split(w, rank / gsize, rank, "bench", &g) != MOE_OK) {
            return 1;
        }
        for (int op = 0; op < MOE_BENCH_NUM_COLLS; op++) {
            if (root && js == NULL) {
                (void)printf(
                    "\n# %s, groups of %d consecutive ranks (%d group(s) at once), float\n",
                    moe_bench_coll_name((enum moe_bench_coll)op), gsize, n / gsize);
                (void)printf("#%12s %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)",
                             "algbw(GB/s)", "busbw(GB/s)", "step(us)", "#wrong");
            }
            for (size_t bytes = a->min_bytes; bytes <= a->max_bytes; bytes *= 4) {
                struct moe_bench_coll_result r;
                if (moe_bench_coll_run(g, &a->cfg, (enum moe_bench_coll)op, bytes, &r) != MOE_OK) {
                    moe_comm_destroy(g);
                    return 1;
                }
                /* Report group 0 (rank 0's); every group ran at the same time. */
                bad += r.wrong != 0;
                if (root && arr != NULL) {
                    cJSON *o = cJSON_CreateObject();
                    cJSON_AddStringToObject(o, "op", moe_bench_coll_name(r.op));
                    cJSON_AddNumberToObject(o, "group_size", r.group_size);
                    cJSON_AddNumberToObject(o, "bytes", (double)r.bytes);
                    cJSON_AddNumberToObject(o, "time_us", r.time_us);
                    cJSON_AddNumberToObject(o, "step_us", r.step_us);
                    cJSON_AddNumberToObject(o, "algbw_gbps", r.algbw_gbps);
                    cJSON_AddNumberToObject(o, "busbw_gbps", r.busbw_gbps);
                    cJSON_AddNumberToObject(o, "wrong", (double)r.wrong);
                    cJSON_AddItemToArray(arr, o);
                } else if (root) {
                    (void)printf(" %12zu %12zu %12.2f %12.3f %12.3f %12.2f %8ld\n", r.bytes,
                                 r.count, r.time_us, r.algbw_gbps, r.busbw_gbps, r.step_us,
                                 r.wrong);
                }
            }
        }
        moe_comm_destroy(g);
    }
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct bench_args a;
    int rc = parse(argc, argv, &a, rank == 0);
    if (rc != 0) {
        if (rank == 0 && rc == 3) {
            usage(stdout);
        } else if (rank == 0 && rc == 4) {
            (void)printf("moefold-bench 1.0\n");
        } else if (rank == 0) {
            usage(stderr);
        }
        MPI_Finalize();
        return rc >= 3 ? 0 : rc;
    }
    moe_comm_t *w = NULL;
    moe_k_ctx_t *kc = NULL;
    struct moe_k_ctx_desc desc = {.backend = MOE_K_BACKEND_CPU, .num_threads = 1};
    if (moe_comm_mpi_create(MPI_COMM_WORLD, "world", &w) != MOE_OK ||
        moe_k_ctx_create(&desc, &kc) != MOE_OK) {
        (void)fprintf(stderr, "moefold-bench: cannot create the communicator or kernel context\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const struct moe_k_ops *k = moe_k_ctx_ops(kc);
    if (a.is_bound) {
        /* Core = this rank's index among the ranks sharing its node. */
        moe_comm_t *node = NULL;
        struct moe_diag diag;
        memset(&diag, 0, sizeof(diag));
        if (moe_comm_split_shared(w, "node", &node) == MOE_OK &&
            moe_host_bind_core(moe_comm_rank(node), &diag) != MOE_OK) {
            (void)fprintf(stderr, "moefold-bench: rank %d: %s (continuing unbound)\n", rank,
                          diag.message);
        }
        moe_comm_destroy(node);
    }
    cJSON *js = a.is_json ? cJSON_CreateObject() : NULL;
    if (js != NULL) {
        cJSON_AddStringToObject(js, "format", "moefold-bench");
        cJSON_AddNumberToObject(js, "version", 1);
    }
    a.cfg.evict_bytes = evict_default(&a);
    header(w, &a, js);
    int bad = 0;
    if (a.do_gemm) {
        bad += bench_gemm(w, k, kc, &a, js);
    }
    if (a.do_grouped) {
        bad += bench_grouped(w, k, kc, &a, js);
    }
    if (a.do_mem) {
        bad += bench_mem(w, k, kc, &a, js);
        bad += bench_act(w, k, kc, &a, js);
        bad += bench_bias(w, k, kc, &a, js);
    }
    if (a.do_attn) {
        bad += bench_attention(w, k, kc, &a, js);
    }
    if (a.do_quant) {
        bad += bench_quant(w, k, kc, &a, js);
    }
    if (a.do_coll && moe_comm_size(w) > 1) {
        bad += bench_coll(w, &a, js);
    }
    if (js != NULL && rank == 0) {
        char *text = cJSON_Print(js);
        if (text != NULL) {
            (void)printf("%s\n", text);
        }
        free(text);
    } else if (rank == 0) {
        (void)printf("\n# %s\n", bad == 0 ? "all checks passed" : "SOME CHECKS FAILED");
    }
    cJSON_Delete(js);
    moe_k_ctx_destroy(kc);
    moe_comm_destroy(w);
    MPI_Finalize();
    return bad == 0 ? 0 : 1;
}
