/*
 * Megatron-LM training logs read as a measured run: the `arguments` dump rank 0 prints at start-up,
 * the iteration lines, the memory reports and the GPU name when the job printed nvidia-smi's.
 *
 * What the log holds (printing code: megatron/training/arguments.py _print_args, training.py
 * training_log, utils report_memory; looked up for 23.06, core_r0.8.0, core_v0.12.0, core_v0.14.0
 * and main of 2026):
 *
 *   ------------------------ arguments ------------------------
 *     accumulate_allreduce_grads_in_fp32 .............. True
 *     tensor_model_parallel_size ...................... 2          ('.' * (48 - len(name)))
 *   -------------------- end of arguments ---------------------
 *    [2026-03-02 10:11:12.345678] iteration       20/     500 | consumed samples: ... |
 *       elapsed time per iteration (ms): 4123.4 | throughput per GPU (TFLOP/s/GPU): 301.2 | ...
 *       global batch size:  1024 | lm loss: 2.1E+00 | ... | number of skipped iterations:   0 |
 *       number of nan iterations:   0 |
 *   [Rank 3] (after 2 iterations) memory (MB) | allocated: ... | max allocated: ... |
 *       reserved: ... | max reserved: ...
 *
 * 23.06 prints no timestamp and no TFLOP/s field; core_r0.8-v0.15 a `[%Y-%m-%d %H:%M:%S]` stamp
 * and the TFLOP/s field with --log-throughput; main a microsecond stamp. Each iteration line is
 * the mean of the `log_interval` iterations since the previous one. The reader finds these lines
 * among any other output: launcher prefixes (`[default0]:` torchrun, `0: ` srun --label,
 * `[1,0]<stdout>:` mpirun --tag-output, `2026-...Z ` kubectl --timestamps, `[NeMo I ...]`), NCCL
 * INFO/WARN lines and other ranks' output between the lines, lines cut short.
 *
 * The arguments are turned back into Megatron command-line flags (the argument's name with '-'
 * for '_', `fp8` -> --fp8-format, `fp4` -> --fp4-format; True -> the bare switch, False/None ->
 * nothing, Python lists and torch dtypes -> flag values) for every flag moefold's Megatron parser
 * knows (model/megatron_args.h), so the model, layout and options are rebuilt by the same rules
 * as the flag parser (moe_cli_parse_problem). Arguments of other kinds -- Megatron's own
 * bookkeeping, forks' additions, newer versions' -- are counted and not read; those whose name
 * belongs to something moefold prices (moe_*, recompute_*, fp8*, offload*, cuda_graph*, ...) and
 * whose value is set are listed (`unknown[]`), so the caller can say so or refuse (--strict).
 *
 * Steady state: iteration lines are dropped when their interval covers one of the first three
 * iterations after a start (start-up, compilation, NCCL set-up; a resumed run restarts the count),
 * when they report skipped or NaN iterations, or when their global batch size differs from the
 * run's (batch ramp-up). The step time is the median of the remaining lines.
 *
 * Use as a measured run (what `moefold compare --megatron-log` does, cli/cmd_compare_log.c):
 *
 *   struct moe_megatron_log log;
 *   moe_mlog_init(&log);
 *   if (moe_mlog_read_file(path, &log, &diag) != MOE_OK) { print diag.message; }
 *   argv = {"fit", "--gpus", "<log.world_size>", log.words[0..num_words), "--cluster", C};
 *   moe_cli_parse_problem(argc, argv, NULL, NULL, &problem, NULL, &diag);   (cli/common.h)
 *   moe_cli_resolve(&problem, &diag);         measured: log.step_time_s, log.megatron_tflops,
 *   ...                                       log.max_reserved_bytes
 *   moe_mlog_fini(&log);
 *
 * An error of the parser names a flag (diag.source); moe_mlog_flag_line gives the log line of the
 * argument behind it.
 *
 * Does not read: NeMo 2 / PyTorch Lightning progress lines (another format), Megatron-Bridge
 * config YAML (Bridge prints no arguments dump), timers (printed as min/max per timer name, not
 * one figure per step).
 */
#ifndef MOE_CLI_MEGATRON_LOG_H
#define MOE_CLI_MEGATRON_LOG_H

#include "model/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_MLOG_MAX_UNKNOWN 16
#define MOE_MLOG_NAME_LEN    96

/* An argument moefold does not read whose name says it may change what moefold prices. */
struct moe_mlog_unknown {
    char name[MOE_MLOG_NAME_LEN];  /* Megatron's attribute name, e.g. moe_router_fusion_xyz */
    char value[MOE_MLOG_NAME_LEN]; /* as printed (truncated) */
    int line;                      /* 1-based line in the log */
};

struct moe_megatron_log {
    /* The run's Megatron flags rebuilt from the arguments dump, e.g. {"--num-layers", "61", ...}:
     * pass them to moe_cli_parse_problem (with --gpus world_size and --cluster). Owned. */
    int num_words;
    char **words;         /* [num_words] NUL-terminated, in storage owned here (do not modify) */
    int *word_line;       /* [num_words] 1-based log line of the argument each word came from */
    int args_line;        /* line of the `---- arguments ----` header */
    int num_args;         /* arguments in the dump */
    int num_args_read;    /* arguments that are flags moefold's parser knows (words[] holds those
                             that change the prediction and are set; the rest have no effect) */
    int num_args_unread;  /* arguments that are not flags moefold knows (bookkeeping, forks') */
    int num_unknown;      /* entries in unknown[] (at most MOE_MLOG_MAX_UNKNOWN) */
    int num_unknown_more; /* priced-family unknowns beyond unknown[] */
    struct moe_mlog_unknown unknown[MOE_MLOG_MAX_UNKNOWN];
    int num_noise_in_dump; /* lines inside the dump that were not arguments (other output) */

    int world_size;      /* the `world_size` argument */
    int log_interval;    /* iterations per iteration line (`log_interval`, 1 when not printed) */
    int train_iters;     /* the run's planned iterations (0: by samples) */
    int vocab_from_line; /* line of `> padded vocab (size: N)` when the vocabulary came from it */
    int dump_vpp;        /* virtual_pipeline_model_parallel_size as printed (None: 1; 0: absent) */
    int dump_dp;         /* data_parallel_size as printed (0: absent) */
    int dump_vpp_line;   /* their lines */
    int dump_dp_line;

    /* Iteration lines. */
    int num_iter_lines; /* iteration lines found (duplicates removed) */
    int num_cut_short;  /* iteration lines without an elapsed-time field (cut short) */
    int num_warmup;     /* dropped: interval covers one of the first 3 iterations of a start */
    int num_skipped;    /* dropped: skipped or NaN iterations in the interval */
    int num_rampup;     /* dropped: global batch size differs from the run's */
    int num_starts;     /* starts (1 + restarts of the iteration count) */
    int iteration_lines_used; /* lines the median is over */
    int iterations_used;      /* iterations those lines cover (lines x log_interval) */
    int first_iter_used;      /* first and last iteration numbers of the used lines */
    int last_iter_used;
    int global_batch_size;  /* of the used lines */
    double step_time_s;     /* median elapsed time per iteration over the used lines */
    double step_time_min_s; /* smallest and largest of them */
    double step_time_max_s;
    bool has_megatron_tflops; /* the lines print `throughput per GPU (TFLOP/s/GPU)` */
    double megatron_tflops;   /* median of that field over the used lines */

    /* Memory reports ([Rank r] ... memory (MB) | ... | max reserved: X, or Megatron-Bridge's GB).
     */
    bool has_memory;
    int num_memory_ranks;       /* distinct ranks that reported */
    int max_reserved_rank;      /* the rank with the largest max reserved */
    double max_reserved_bytes;  /* largest `max reserved` over ranks and reports */
    double max_allocated_bytes; /* largest `max allocated` */
    bool has_theoretical;       /* `Theoretical memory footprints: ... total=X MB` */
    double theoretical_bytes;

    char device_name[128]; /* GPU name from nvidia-smi output in the log; "" when none */
    bool device_ambiguous; /* the log names several different GPUs (device_name is the first) */

    char *storage_; /* private: words' text */
};

/* Zero a log struct (nothing to free yet). */
void moe_mlog_init(struct moe_megatron_log *log);
/* Free what a successful or failed read allocated; the struct can be read into again. */
void moe_mlog_fini(struct moe_megatron_log *log);

/*
 * Read the log at path (at most 1 GiB). On failure diag names the file, the 1-based line
 * (diag->line) and the problem: MOE_ERR_IO (cannot read), MOE_ERR_NOT_FOUND (no arguments dump,
 * no iteration lines), MOE_ERR_PARSE (a dump without its end line, a value that does not parse,
 * a known flag whose value is not what Megatron prints), MOE_ERR_INVALID (two different runs in
 * one file, no usable iteration line after the filters above, arguments the model needs missing).
 */
MOE_NODISCARD enum moe_status
moe_mlog_read_file(const char *path, struct moe_megatron_log *log, struct moe_diag *diag);

/* The same on text[len] (need not be NUL-terminated); source names it in messages. */
MOE_NODISCARD enum moe_status moe_mlog_parse(const char *text,
                                             size_t len,
                                             const char *source,
                                             struct moe_megatron_log *log,
                                             struct moe_diag *diag);

/* Log line of the argument that produced flag ("--moe-router-topk"), 0 when none did. */
int moe_mlog_flag_line(const struct moe_megatron_log *log, const char *flag);

/*
 * The reference cluster for an nvidia-smi GPU name: the GPU model in the name (H100, H200, H800,
 * B200, B300, GB200, GB300) matched against the cluster files' GPU names, reference systems
 * (files without "extends") only. Writes the cluster name into out[len] and returns true when
 * exactly one matches; *others (may be NULL) gets the other cluster files with that GPU,
 * comma-separated, e.g. the cloud systems built on it.
 */
bool moe_mlog_cluster_for_device(
    const char *device_name, char *out, size_t len, char *others, size_t others_len);

#ifdef __cplusplus
}
#endif

#endif /* MOE_CLI_MEGATRON_LOG_H */
