/*
 * moefold-train: train the model of a plan under exactly its layout, across the MPI ranks it is
 * started on (also as a single process), and write what it measured to run.json.
 *
 *   mpirun -np N moefold-train --plan plan.json [--steps K] [--data FILE |
 * --synthetic]
 *          [--out run.json] [--save DIR] [--load DIR] [--ranks-per-node R]
 * [--seed S] [--verbose] mpirun -np N moefold-train --model tiny-moe [options] -- <Megatron-LM
 * flags>
 *
 * Exit status: 0 on success, 1 when the run fails (bad plan for this world size, missing data,
 * non-finite loss, I/O), 2 on a bad command line. Only rank 0 prints unless --verbose.
 */
#include "engine/comm_mpi.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "model/megatron_args.h"
#include "topologies/hwloc_host.h"
#include "topologies/json_util.h"
#include "topologies/model_file.h"
#include "topologies/plan_file.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOEFOLD_TRAIN_VERSION "moefold-train 1.0"

struct args {
    const char *plan_path;
    const char *model;
    const char *out;
    const char *trace; /* --trace FILE */
    int megatron_argc;
    char **megatron_argv;
    struct moe_eng_run_opts run;
    bool is_help;
    bool is_version;
};

static void usage(FILE *f)
{
    /* clang-format off: one option per line reads better than the formatter's packing */
    static const char text[] =
        "usage: mpirun -np N moefold-train --plan plan.json [options]\n"
        "       mpirun -np N moefold-train --model NAME|model.json [options] -- <Megatron flags>\n"
        "\n"
        "  --plan FILE           plan file (model, layout, options; format moefold-plan v1)\n"
        "  --model NAME|FILE     preset (tiny-moe, tiny-dsv3, ...) or model file; the layout\n"
        "                        and options come from Megatron-LM flags after `--`\n"
        "  --steps K             training steps (default 10)\n"
        "  --data FILE|DIR       byte-level text to train on (default: the files under\n"
        "                        /usr/share/common-licenses)\n"
        "  --synthetic           seeded synthetic corpus instead of text\n"
        "  --out FILE            measurements (default run.json; '-' = none)\n"
        "  --save DIR            write a checkpoint at the end (and every --save-every steps)\n"
        "  --save-every N        steps between checkpoints (default 0: end only)\n"
        "  --load DIR            resume from DIR's latest checkpoint\n"
        "  --ranks-per-node R    treat blocks of R ranks as nodes (default: ranks sharing\n"
        "                        memory form a node)\n"
        "  --seed S              weights, data order and synthetic corpus (default 1234)\n"
        "  --lr X                peak learning rate (default 3e-3); --warmup N steps (0)\n"
        "  --weight-decay X      AdamW decoupled weight decay (default 0.1)\n"
        "  --clip-grad X         global gradient-norm clip (default 1.0; 0 = off)\n"
        "  --aux-loss-coeff X    Switch load-balancing loss (default: the plan's\n"
        "                        --moe-aux-loss-coeff)\n"
        "  --z-loss-coeff X      router z-loss (default 0)\n"
        "  --bias-update-rate X  expert-bias update rate (default 1e-3)\n"
        "  --topk-scaling X      routed scaling factor on top-k weights (default 1)\n"
        "  --moe-router-skew X   measurement setting: random router logits (as\n"
        "                        --moe-router-force-load-balancing) with X added to the experts\n"
        "                        of EP rank 0, a known imbalance (default 0: the plan's router)\n"
        "  --emulate-precision   quantise->dequantise GEMM inputs per the plan's recipe\n"
        "                        (default: plain fp32)\n"
        "  --moe-buffer-factor F expert rows buffer = F x mean load (default 0: worst case)\n"
        "  --dispatcher D        flat (all-to-all) or hierarchical (one copy per remote node,\n"
        "                        forwarded inside it); default: hierarchical for the plan's\n"
        "                        flex dispatchers (deepep, hybridep), else flat\n"
        "  --backend B           cpu (default: host memory, OpenBLAS, MPI) or cuda (one GPU\n"
        "                        per rank: device memory, cuBLAS kernels, NCCL for every\n"
        "                        group); without a usable GPU, cuda notes why and runs on cpu\n"
        "  --gemm-math M         cuda: fp32 (default, IEEE), tf32, or bf16 (BF16 in, FP32\n"
        "                        accumulate) for the fp32-storage GEMMs\n"
        "  --cuda-graphs         cuda: capture each dense layer's forward into a CUDA graph\n"
        "                        once per activation slot and replay it\n"
        "  --trace FILE          write one step (--trace-step) as a Chrome trace (JSON; open it "
        "in\n"
        "                        ui.perfetto.dev or chrome://tracing): one process per rank,\n"
        "                        an event per phase interval from the engine's own clock, the\n"
        "                        collectives' waits for the slowest rank as their own events;\n"
        "                        run.json then also holds it (\"timeline\") for compare --trace\n"
        "  --trace-step K        the step to trace (default: the last)\n"
        "  --profile-kernels     time every kernel op (CPU backend): run.json \"kernel_s\"\n"
        "                        holds each phase's ops, seconds and calls per step;\n"
        "                        moefold compare prints them beside the model's prices\n"
        "  --no-host-probe       CPU backend: skip the host speed probe (after each measured\n"
        "                        step, moefold-bench's 512^3 GEMM; run.json \"host_probe\",\n"
        "                        read by moefold compare --host-speed)\n"
        "  --verbose             details, and every rank may print\n"
        "  --version, --help\n";
    /* clang-format on */
    (void)fputs(text, f);
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        return -1;
    }
    *out = v;
    return 0;
}

enum {
    OPT_SAVE_EVERY = 1000,
    OPT_RPN,
    OPT_LR,
    OPT_WARMUP,
    OPT_WD,
    OPT_CLIP,
    OPT_AUX,
    OPT_ZLOSS,
    OPT_BIAS,
    OPT_TOPK,
    OPT_EMULATE,
    OPT_BUFFER,
    OPT_SYNTH,
    OPT_DISPATCHER,
    OPT_BACKEND,
    OPT_GEMM_MATH,
    OPT_GRAPHS,
    OPT_TRACE,
    OPT_TRACE_STEP,
    OPT_SKEW,
    OPT_PROFILE_KERNELS,
    OPT_NO_HOST_PROBE,
};

/* A numeric option value: returns 0, or prints the problem and returns 2. */
static int
num_opt(const char *name, const char *val, double lo, double hi, double *out, bool is_root)
{
    if (parse_double(val, lo, hi, out) != 0) {
        if (is_root) {
            (void)fprintf(stderr, "moefold-train: --%s %s: expected a number in [%g, %g]\n", name,
                          val, lo, hi);
        }
        return 2;
    }
    return 0;
}

static int int_opt(const char *name, const char *val, long lo, long hi, long *out, bool is_root)
{
    if (parse_long(val, lo, hi, out) != 0) {
        if (is_root) {
            (void)fprintf(stderr, "moefold-train: --%s %s: expected an integer in [%ld, %ld]\n",
                          name, val, lo, hi);
        }
        return 2;
    }
    return 0;
}

/* One of n words: *out = its index; else prints the choices and returns 2. */
static int word_opt(
    const char *name, const char *val, const char *const *words, int n, long *out, bool is_root)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(val, words[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    if (is_root) {
        (void)fprintf(stderr, "moefold-train: --%s %s: expected one of", name, val);
        for (int i = 0; i < n; i++) {
            (void)fprintf(stderr, " %s", words[i]);
        }
        (void)fputc('\n', stderr);
    }
    return 2;
}

static const char *const backend_words[] = {"cpu", "cuda"};
static const char *const math_words[] = {"fp32", "tf32", "bf16"};

static int parse_args(int argc, char **argv, struct args *a, bool is_root)
{
    static const struct option longs[] = {
        {"plan", required_argument, NULL, 'p'},
        {"model", required_argument, NULL, 'm'},
        {"steps", required_argument, NULL, 'n'},
        {"data", required_argument, NULL, 'd'},
        {"synthetic", no_argument, NULL, OPT_SYNTH},
        {"out", required_argument, NULL, 'o'},
        {"save", required_argument, NULL, 's'},
        {"save-every", required_argument, NULL, OPT_SAVE_EVERY},
        {"load", required_argument, NULL, 'l'},
        {"ranks-per-node", required_argument, NULL, OPT_RPN},
        {"seed", required_argument, NULL, 'S'},
        {"lr", required_argument, NULL, OPT_LR},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"weight-decay", required_argument, NULL, OPT_WD},
        {"clip-grad", required_argument, NULL, OPT_CLIP},
        {"aux-loss-coeff", required_argument, NULL, OPT_AUX},
        {"z-loss-coeff", required_argument, NULL, OPT_ZLOSS},
        {"bias-update-rate", required_argument, NULL, OPT_BIAS},
        {"topk-scaling", required_argument, NULL, OPT_TOPK},
        {"emulate-precision", no_argument, NULL, OPT_EMULATE},
        {"moe-buffer-factor", required_argument, NULL, OPT_BUFFER},
        {"dispatcher", required_argument, NULL, OPT_DISPATCHER},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"gemm-math", required_argument, NULL, OPT_GEMM_MATH},
        {"cuda-graphs", no_argument, NULL, OPT_GRAPHS},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"trace-step", required_argument, NULL, OPT_TRACE_STEP},
        {"moe-router-skew", required_argument, NULL, OPT_SKEW},
        {"profile-kernels", no_argument, NULL, OPT_PROFILE_KERNELS},
        {"no-host-probe", no_argument, NULL, OPT_NO_HOST_PROBE},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    moe_eng_run_opts_init(&a->run);
    a->run.probe_evict_bytes = moe_host_evict_bytes();
    a->out = "run.json";
    opterr = is_root ? 1 : 0;
    int c;
    int rc = 0;
    double x = 0.0;
    long n = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "p:m:n:d:o:s:l:S:vVh", longs, NULL)) != -1) {
        switch (c) {
        case 'p':
            a->plan_path = optarg;
            break;
        case 'm':
            a->model = optarg;
            break;
        case 'n':
            rc = int_opt("steps", optarg, 1, 100000000, &n, is_root);
            a->run.num_steps = (int)n;
            break;
        case 'd':
            a->run.data_path = optarg;
            a->run.data_kind = MOE_ENG_DATA_TEXT;
            break;
        case OPT_SYNTH:
            a->run.data_kind = MOE_ENG_DATA_SYNTHETIC;
            break;
        case 'o':
            a->out = strcmp(optarg, "-") == 0 ? NULL : optarg;
            break;
        case 's':
            a->run.save_dir = optarg;
            break;
        case OPT_SAVE_EVERY:
            rc = int_opt("save-every", optarg, 0, 100000000, &n, is_root);
            a->run.save_every = (int)n;
            break;
        case 'l':
            a->run.load_dir = optarg;
            break;
        case OPT_RPN:
            rc = int_opt("ranks-per-node", optarg, 1, 1000000, &n, is_root);
            a->run.ranks_per_node = (int)n;
            break;
        case 'S':
            rc = int_opt("seed", optarg, 0, 0x7fffffffffffffffL, &n, is_root);
            a->run.seed = (uint64_t)n;
            break;
        case OPT_LR:
            rc = num_opt("lr", optarg, 0.0, 10.0, &x, is_root);
            a->run.lr = (float)x;
            break;
        case OPT_WARMUP:
            rc = int_opt("warmup", optarg, 0, 100000000, &n, is_root);
            a->run.warmup_steps = (int)n;
            break;
        case OPT_WD:
            rc = num_opt("weight-decay", optarg, 0.0, 10.0, &x, is_root);
            a->run.weight_decay = (float)x;
            break;
        case OPT_CLIP:
            rc = num_opt("clip-grad", optarg, 0.0, 1e9, &x, is_root);
            a->run.clip_grad = (float)x;
            break;
        case OPT_AUX:
            rc = num_opt("aux-loss-coeff", optarg, 0.0, 1e3, &x, is_root);
            a->run.aux_loss_coeff = (float)x;
            break;
        case OPT_ZLOSS:
            rc = num_opt("z-loss-coeff", optarg, 0.0, 1e3, &x, is_root);
            a->run.z_loss_coeff = (float)x;
            break;
        case OPT_BIAS:
            rc = num_opt("bias-update-rate", optarg, 0.0, 1e3, &x, is_root);
            a->run.bias_update_rate = (float)x;
            break;
        case OPT_TOPK:
            rc = num_opt("topk-scaling", optarg, 1e-6, 1e6, &x, is_root);
            a->run.topk_scaling = (float)x;
            break;
        case OPT_EMULATE:
            a->run.emulate_precision = true;
            break;
        case OPT_BUFFER:
            rc = num_opt("moe-buffer-factor", optarg, 0.0, 1e6, &x, is_root);
            a->run.moe_buffer_factor = x;
            break;
        case OPT_DISPATCHER:
            a->run.has_dispatcher_override = true;
            if (strcmp(optarg, "flat") == 0) {
                a->run.is_hierarchical = false;
            } else if (strcmp(optarg, "hierarchical") == 0) {
                a->run.is_hierarchical = true;
            } else {
                if (is_root) {
                    (void)fprintf(stderr,
                                  "moefold-train: --dispatcher %s: expected flat or "
                                  "hierarchical\n",
                                  optarg);
                }
                rc = 2;
            }
            break;
        case OPT_BACKEND:
            rc = word_opt("backend", optarg, backend_words, 2, &n, is_root);
            a->run.backend = n == 1 ? MOE_K_BACKEND_CUDA : MOE_K_BACKEND_CPU;
            break;
        case OPT_GEMM_MATH:
            rc = word_opt("gemm-math", optarg, math_words, 3, &n, is_root);
            a->run.gemm_math = (enum moe_eng_gemm_math)n;
            break;
        case OPT_GRAPHS:
            a->run.use_cuda_graphs = true;
            break;
        case OPT_TRACE:
            a->trace = optarg;
            break;
        case OPT_SKEW:
            rc = num_opt("moe-router-skew", optarg, -20.0, 20.0, &x, is_root);
            a->run.router_skew = x;
            break;
        case OPT_PROFILE_KERNELS:
            a->run.profile_kernels = true;
            break;
        case OPT_NO_HOST_PROBE:
            a->run.no_host_probe = true;
            break;
        case OPT_TRACE_STEP:
            rc = int_opt("trace-step", optarg, 1, 100000000, &n, is_root);
            a->run.trace_step = (int)n;
            break;
        case 'v':
            a->run.verbosity = 1;
            break;
        case 'V':
            a->is_version = true;
            break;
        case 'h':
            a->is_help = true;
            break;
        default:
            rc = 2;
            break;
        }
    }
    if (rc != 0) {
        return rc;
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0) {
        if (is_root) {
            (void)fprintf(stderr,
                          "moefold-train: unexpected argument '%s' (Megatron-LM flags go after "
                          "`--`)\n",
                          argv[optind]);
        }
        return 2;
    }
    a->megatron_argc = argc - optind;
    a->megatron_argv = argv + optind;
    if (a->is_help || a->is_version) {
        return 0;
    }
    if (a->run.trace_step > 0 && a->trace == NULL) {
        if (is_root) {
            (void)fprintf(stderr, "moefold-train: --trace-step needs --trace FILE\n");
        }
        return 2;
    }
    if (a->trace != NULL && a->run.trace_step == 0) {
        a->run.trace_step = a->run.num_steps; /* the last step: warm caches, settled routing */
    }
    if (a->run.trace_step > a->run.num_steps) {
        if (is_root) {
            (void)fprintf(stderr, "moefold-train: --trace-step %d is past --steps %d\n",
                          a->run.trace_step, a->run.num_steps);
        }
        return 2;
    }
    if ((a->plan_path == NULL) == (a->model == NULL)) {
        if (is_root) {
            (void)fprintf(stderr, "moefold-train: give exactly one of --plan FILE or --model NAME "
                                  "(--help for usage)\n");
        }
        return 2;
    }
    if (a->plan_path != NULL && a->megatron_argc > 0) {
        if (is_root) {
            (void)fprintf(stderr,
                          "moefold-train: Megatron flags after `--` need --model, not --plan "
                          "(the plan fixes the layout)\n");
        }
        return 2;
    }
    return 0;
}

/* The plan from --model NAME|FILE plus Megatron flags (layout resolved later by the engine). */
static enum moe_status
plan_from_flags(const struct args *a, struct moe_plan *plan, struct moe_diag *diag)
{
    moe_plan_init(plan);
    enum moe_status st = moe_cfg_preset(a->model, &plan->model, diag);
    if (st == MOE_ERR_NOT_FOUND) {
        FILE *f = fopen(a->model, "r");
        if (f == NULL) {
            return st; /* diag lists the presets */
        }
        (void)fclose(f);
        memset(diag, 0, sizeof(*diag));
        st = moe_model_file_read(a->model, &plan->model, diag);
    }
    MOE_TRY(st);
    plan->layout.seq_length = plan->model.seq_length;
    struct moe_megatron_result res;
    return moe_megatron_parse_args(a->megatron_argc, (const char *const *)a->megatron_argv,
                                   &plan->model, &plan->layout, &plan->options, &res, diag);
}

static void print_diag(const char *what, const struct moe_diag *diag)
{
    if (diag->source[0] != '\0' && strstr(diag->message, diag->source) == NULL) {
        (void)fprintf(stderr, "moefold-train: %s: %s: %s\n", what, diag->source, diag->message);
    } else {
        (void)fprintf(stderr, "moefold-train: %s: %s\n", what, diag->message);
    }
}

/* The plan that ran, to embed in run.json: the resolved layout, fp32 training (what the engine
 * does on either backend, so a comparison predicts fp32 memory) and the prediction the plan
 * carried. */
static char *
plan_text_from(const struct moe_plan *plan, const cJSON *prediction, const moe_eng_t *e)
{
    struct moe_plan p = *plan;
    p.layout = *moe_eng_layout(e);
    p.options.is_fp32_training = true;
    cJSON *j = moe_plan_to_json(&p, prediction);
    char *text = j != NULL ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return text;
}

/*
 * Collective: the lowest rank whose failure message is its own prints it (a rank that failed only
 * because another one did carries a generic message), so one error reaches the user.
 */
static void report_failure(enum moe_status st, const struct moe_diag *diag, int rank)
{
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bool own =
        st != MOE_OK && diag->message[0] != '\0' && strstr(diag->message, "another rank") == NULL;
    int mine = own ? rank : size;
    int first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == rank || (first == size && rank == 0 && st != MOE_OK)) {
        print_diag("error", diag);
    }
}

/*
 * --backend cuda on a machine (or build) without a usable GPU: one line saying why, then the CPU
 * backend. Every rank falls back together (collective) so the job stays on one backend.
 */
static void pick_backend(struct moe_eng_run_opts *run, int rank)
{
    if (run->backend != MOE_K_BACKEND_CUDA) {
        return;
    }
    char why[256] = "";
    int ok = moe_eng_dev_available(why, sizeof(why)) ? 1 : 0;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_ok) {
        return;
    }
    if (ok) {
        (void)snprintf(why, sizeof(why), "another rank has none");
    }
    int first = ok ? INT_MAX : rank;
    int lowest = 0;
    MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == lowest) {
        (void)printf("moefold-train: no CUDA device (%s); using the CPU backend\n", why);
        (void)fflush(stdout);
    }
    run->backend = MOE_K_BACKEND_CPU;
    run->use_cuda_graphs = false;
}

static int run(struct args *a, int rank)
{
    struct moe_diag diag;
    memset(&diag, 0, sizeof(diag));
    pick_backend(&a->run, rank);
    struct moe_plan plan;
    enum moe_status st;
    char *text = NULL;
    cJSON *prediction = NULL;
    if (a->plan_path != NULL) {
        st = moe_plan_read(a->plan_path, NULL, &plan, &prediction, &diag);
    } else {
        st = plan_from_flags(a, &plan, &diag);
    }
    if (st != MOE_OK) {
        if (rank == 0) { /* every rank read the same input and failed alike */
            print_diag(a->plan_path != NULL ? a->plan_path : "model", &diag);
        }
        cJSON_Delete(prediction);
        return a->plan_path != NULL ? 1 : 2;
    }
    moe_comm_t *world = NULL;
    st = moe_comm_mpi_create(MPI_COMM_WORLD, "world", &world);
    moe_eng_t *e = NULL;
    if (st == MOE_OK) {
        st = moe_eng_create(&plan, &a->run, world, &e, &diag);
    }
    if (st == MOE_OK) {
        text = plan_text_from(&plan, prediction, e);
    }
    if (st == MOE_OK) {
        st = moe_eng_train(e, &diag);
    }
    if (st == MOE_OK && a->out != NULL) {
        st = moe_eng_write_run(e, a->out, text, &diag);
        if (st == MOE_OK && rank == 0) {
            (void)printf("wrote %s\n", a->out);
        }
    }
    if (st == MOE_OK && a->trace != NULL) {
        st = moe_eng_write_trace(e, a->trace, &diag);
        if (st == MOE_OK && rank == 0) {
            (void)printf("wrote %s (step %d; open it in ui.perfetto.dev or chrome://tracing)\n",
                         a->trace, a->run.trace_step);
        }
    }
    report_failure(st, &diag, rank);
    moe_eng_destroy(e);
    moe_comm_destroy(world);
    free(text);
    cJSON_Delete(prediction);
    return st == MOE_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct args a;
    memset(&a, 0, sizeof(a));
    int rc = parse_args(argc, argv, &a, rank == 0);
    if (rc == 0 && a.is_help) {
        if (rank == 0) {
            usage(stdout);
        }
    } else if (rc == 0 && a.is_version) {
        if (rank == 0) {
            (void)printf("%s\n", MOEFOLD_TRAIN_VERSION);
        }
    } else if (rc == 0) {
        a.run.log = rank == 0 || a.run.verbosity > 0 ? stdout : NULL;
        rc = run(&a, rank);
    } else if (rank == 0) {
        usage(stderr);
    }
    MPI_Finalize();
    return rc;
}
