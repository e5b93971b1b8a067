/*
 * Megatron-LM training logs (cli/megatron_log.h).
 *
 * One pass over the lines. Each line first loses the prefixes launchers and log collectors put in
 * front of a program's output (skip_prefixes); then it is tried as, in order: the arguments dump's
 * header, a line of the dump (while one is open), an iteration line, a memory report, nvidia-smi
 * output, Megatron's padded-vocabulary line. Anything else is other output and is passed over.
 * After the pass the dump becomes Megatron flags (build_words) and the iteration lines a
 * steady-state step time (steady_state). Nothing here prints; the text is never modified.
 */
#include "cli/megatron_log.h"

#include "cli/log_text.h"
#include "model/megatron_args.h"
#include "topologies/cluster_file.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DUMP_HEADER    "------------------------ arguments ------------------------"
#define DUMP_END       "end of arguments ---"
#define MIB            1048576.0
#define MAX_FILE_BYTES (1L << 30)
#define WARMUP_ITERS   3 /* iterations of a start that never count (start-up, compilation) */

/* One argument of the dump. */
struct arg {
    char *name;
    char *value;
    int line;
};

struct arg_list {
    struct arg *v;
    int n, cap;
};

/* One iteration line. */
struct iter_line {
    long iter;
    double elapsed_ms;
    double tflops; /* NAN when the line has no TFLOP/s field */
    long gbs;      /* -1 when absent */
    long skipped;
    long nans;
    int line;
    bool after_dump; /* an arguments dump came since the previous iteration line: a new start */
};

/* Reader state for one text. */
struct reader {
    const char *source;
    struct moe_megatron_log *log;
    struct moe_diag *diag;
    struct arg_list args;  /* the first dump */
    struct arg_list other; /* a later dump, compared with the first */
    bool in_dump;
    bool dump_done;
    int dump_line; /* header line of the dump being read */
    size_t dump_prefix_len;
    char dump_prefix[64];
    struct arg_list *cur; /* the dump being read */
    struct iter_line *iters;
    int num_iters, cap_iters;
    bool dump_since_iter; /* a dump header since the last iteration line */
    long padded_vocab;    /* orig size from `> padded vocab (size: N)` (0: none) */
    int padded_vocab_line;
    int mem_ranks[256];
    int num_mem_ranks;
    enum moe_status st;
};

static bool arg_flag(const char *name, char *flag, size_t len, bool *store_false, int *arity);

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                        */

static enum moe_status fail(struct reader *r, int line, enum moe_status st, const char *fmt, ...)
    MOE_PRINTF(4, 5);

static enum moe_status fail(struct reader *r, int line, enum moe_status st, const char *fmt, ...)
{
    char msg[448];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    moe_diag_source(r->diag, r->source);
    if (r->diag != NULL) {
        r->diag->line = line;
    }
    if (line > 0) {
        return moe_diag_set(r->diag, st, "%s:%d: %s", r->source, line, msg);
    }
    return moe_diag_set(r->diag, st, "%s: %s", r->source, msg);
}

/* ------------------------------------------------------------------------------------------ */
/* The arguments dump                                                                            */

static char *dup_span(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static void args_free(struct arg_list *a)
{
    for (int i = 0; i < a->n; i++) {
        free(a->v[i].name);
        free(a->v[i].value);
    }
    free(a->v);
    memset(a, 0, sizeof(*a));
}

static const struct arg *args_find(const struct arg_list *a, const char *name)
{
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->v[i].name, name) == 0) {
            return &a->v[i];
        }
    }
    return NULL;
}

static enum moe_status args_add(struct reader *r,
                                struct arg_list *a,
                                const char *name,
                                size_t nn,
                                const char *val,
                                size_t vn,
                                int line)
{
    for (int i = 0; i < a->n; i++) {
        if (strlen(a->v[i].name) == nn && memcmp(a->v[i].name, name, nn) == 0) {
            if (strlen(a->v[i].value) == vn && memcmp(a->v[i].value, val, vn) == 0) {
                return MOE_OK; /* printed twice (two streams of rank 0): the same argument */
            }
            return fail(r, line, MOE_ERR_INVALID,
                        "argument %s is printed twice with different values (line %d and here): "
                        "two runs' output is mixed in this log; give the log of one run",
                        a->v[i].name, a->v[i].line);
        }
    }
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 256;
        struct arg *v = realloc(a->v, (size_t)cap * sizeof(*v));
        if (v == NULL) {
            return fail(r, line, MOE_ERR_NOMEM, "out of memory");
        }
        a->v = v;
        a->cap = cap;
    }
    struct arg *g = &a->v[a->n];
    g->name = dup_span(name, nn);
    g->value = dup_span(val, vn);
    g->line = line;
    if (g->name == NULL || g->value == NULL) {
        free(g->name);
        free(g->value);
        return fail(r, line, MOE_ERR_NOMEM, "out of memory");
    }
    a->n++;
    return MOE_OK;
}

/* "  name ....... value" at s[n] (offset already past any prefix): name and value spans. */
static bool
dump_entry(const char *s, size_t n, const char **name, size_t *nn, const char **val, size_t *vn)
{
    if (n < 4 || s[0] != ' ' || s[1] != ' ' || !(isalpha((unsigned char)s[2]) || s[2] == '_')) {
        return false;
    }
    size_t i = 2;
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) {
        i++;
    }
    *name = s + 2;
    *nn = i - 2;
    if (i >= n || s[i] != ' ') {
        return false;
    }
    i++;
    if (i < n && s[i] == '.') { /* '.' * (48 - len(name)), then a space */
        while (i < n && s[i] == '.') {
            i++;
        }
        if (i < n && s[i] != ' ') {
            return false;
        }
        i = i < n ? i + 1 : n; /* an empty value, its trailing space trimmed by the collector */
    } else if (i < n && s[i] == ' ' && *nn >= 48) { /* no dots: two spaces */
        i++;
    } else {
        return false;
    }
    size_t end = n;
    while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t')) {
        end--;
    }
    *val = s + i;
    *vn = end - i;
    return true;
}

static enum moe_status dump_line(struct reader *r, const char *s, size_t n, int line)
{
    if (moe_log_find(s, n, DUMP_END) != NULL) {
        r->in_dump = false;
        if (r->cur == &r->other) {
            /* A second dump: the same run resumed, or another run in the same file. The runs are
             * the same for moefold when every argument it reads is the same. */
            for (int i = 0; i < r->args.n; i++) {
                const struct arg *a = &r->args.v[i];
                const struct arg *b = args_find(&r->other, a->name);
                char flag[MOE_MLOG_NAME_LEN + 8];
                bool store_false = false;
                bool read = strcmp(a->name, "world_size") == 0 ||
                            arg_flag(a->name, flag, sizeof(flag), &store_false, NULL);
                if (read && b != NULL && strcmp(a->value, b->value) != 0) {
                    return fail(r, b->line, MOE_ERR_INVALID,
                                "a second arguments dump (line %d) differs from the first (line "
                                "%d): %s = %s here, %s there; this file holds two runs, give "
                                "one run's log",
                                r->dump_line, r->log->args_line, a->name, b->value, a->value);
                }
            }
            args_free(&r->other);
        } else {
            r->dump_done = true;
        }
        return MOE_OK;
    }
    size_t cand[3];
    int nc = 0;
    if (r->dump_prefix_len > 0 && n >= r->dump_prefix_len &&
        memcmp(s, r->dump_prefix, r->dump_prefix_len) == 0) {
        cand[nc++] = r->dump_prefix_len;
    }
    cand[nc++] = moe_log_skip_prefixes(s, n);
    if (r->dump_prefix_len > 0 && r->dump_prefix_len < n) {
        cand[nc++] = r->dump_prefix_len; /* a prefix of the same width (a timestamp) */
    }
    for (int c = 0; c < nc; c++) {
        const char *name = NULL;
        const char *val = NULL;
        size_t nn = 0;
        size_t vn = 0;
        if (dump_entry(s + cand[c], n - cand[c], &name, &nn, &val, &vn)) {
            return args_add(r, r->cur, name, nn, val, vn, line);
        }
    }
    if (r->cur == &r->args) {
        r->log->num_noise_in_dump++;
    }
    return MOE_OK;
}

static enum moe_status dump_header(struct reader *r, const char *s, size_t n, int line)
{
    const char *h = moe_log_find(s, n, DUMP_HEADER);
    size_t k = (size_t)(h - s);
    r->in_dump = true;
    r->dump_since_iter = true;
    r->dump_line = line;
    r->dump_prefix_len = k < sizeof(r->dump_prefix) ? k : 0;
    memcpy(r->dump_prefix, s, r->dump_prefix_len);
    if (!r->dump_done && r->args.n == 0) {
        r->cur = &r->args;
        r->log->args_line = line;
    } else {
        args_free(&r->other);
        r->cur = &r->other;
    }
    (void)n;
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Iteration lines, memory reports, GPU names                                                    */

/* " iteration     20/    500 |" in s: the iteration number and where the fields start. */
static bool iteration_token(const char *s, size_t n, long *iter, size_t *fields)
{
    size_t from = 0;
    const char *p = NULL;
    while (from < n && (p = moe_log_find(s + from, n - from, "iteration ")) != NULL) {
        size_t off = (size_t)(p - s) + 10;
        size_t used = 0;
        long it = 0;
        long total = 0;
        if (moe_log_long(s + off, n - off, &it, &used) && off + used < n && s[off + used] == '/') {
            size_t o2 = off + used + 1;
            size_t u2 = 0;
            if (moe_log_long(s + o2, n - o2, &total, &u2) && o2 + u2 + 1 < n && s[o2 + u2] == ' ' &&
                s[o2 + u2 + 1] == '|') {
                *iter = it;
                *fields = o2 + u2 + 2;
                return true;
            }
        }
        from = (size_t)(p - s) + 1;
    }
    return false;
}

static enum moe_status add_iter(struct reader *r, const struct iter_line *it)
{
    /* The same line twice (two streams of the last rank): keep one. */
    for (int i = r->num_iters - 1; i >= 0 && i >= r->num_iters - 4; i--) {
        if (r->iters[i].iter == it->iter && r->iters[i].elapsed_ms == it->elapsed_ms) {
            return MOE_OK;
        }
    }
    if (r->num_iters == r->cap_iters) {
        int cap = r->cap_iters ? r->cap_iters * 2 : 256;
        struct iter_line *v = realloc(r->iters, (size_t)cap * sizeof(*v));
        if (v == NULL) {
            return fail(r, it->line, MOE_ERR_NOMEM, "out of memory");
        }
        r->iters = v;
        r->cap_iters = cap;
    }
    r->iters[r->num_iters++] = *it;
    return MOE_OK;
}

/* An iteration line (joined with its continuation when a collector wrapped it). */
static enum moe_status iteration_line(struct reader *r,
                                      const char *s,
                                      size_t n,
                                      size_t fields,
                                      long iter,
                                      const char *next,
                                      size_t next_n,
                                      int line,
                                      bool *used_next)
{
    *used_next = false;
    const char *f = s + fields;
    size_t fn = n - fields;
    char *joined = NULL;
    long dummy = 0;
    size_t dummy_at = 0;
    if (moe_log_find(f, fn, "elapsed time per iteration (ms):") == NULL && next != NULL &&
        moe_log_find(next, next_n, "elapsed time per iteration (ms):") != NULL &&
        !iteration_token(next, next_n, &dummy, &dummy_at)) {
        size_t skip = moe_log_skip_prefixes(next, next_n);
        joined = malloc(fn + next_n - skip + 1);
        if (joined == NULL) {
            return fail(r, line, MOE_ERR_NOMEM, "out of memory");
        }
        memcpy(joined, f, fn);
        memcpy(joined + fn, next + skip, next_n - skip);
        f = joined;
        fn += next_n - skip;
        *used_next = true;
    }
    struct iter_line it = {.iter = iter,
                           .tflops = (double)NAN,
                           .gbs = -1,
                           .line = line,
                           .after_dump = r->dump_since_iter};
    r->dump_since_iter = false;
    double v = 0.0;
    if (!moe_log_field_number(f, fn, "elapsed time per iteration (ms):", &it.elapsed_ms) ||
        !(it.elapsed_ms > 0.0) || !isfinite(it.elapsed_ms)) {
        r->log->num_cut_short++;
        free(joined);
        return MOE_OK;
    }
    if (moe_log_field_number(f, fn, "throughput per GPU (TFLOP/s/GPU):", &v) && isfinite(v)) {
        it.tflops = v;
    }
    if (moe_log_field_number(f, fn, "global batch size:", &v) && v >= 0.0 && v < 1e12) {
        it.gbs = (long)v;
    }
    if (moe_log_field_number(f, fn, "number of skipped iterations:", &v) && v >= 0.0 && v < 1e12) {
        it.skipped = (long)v;
    }
    if (moe_log_field_number(f, fn, "number of nan iterations:", &v) && v >= 0.0 && v < 1e12) {
        it.nans = (long)v;
    }
    free(joined);
    return add_iter(r, &it);
}

/* "[Rank 3] (after 2 iterations) memory (MB) | allocated: ... | max reserved: X" and the
 * Megatron-Bridge form "memory (GB) | ... | mem-max-reserved-gigabytes: X". */
static void memory_line(struct reader *r, const char *s, size_t n)
{
    const char *rk = moe_log_find(s, n, "[Rank ");
    if (rk == NULL) {
        return;
    }
    size_t off = (size_t)(rk - s) + 6;
    long rank = 0;
    size_t used = 0;
    if (!moe_log_long(s + off, n - off, &rank, &used)) {
        return;
    }
    double reserved = 0.0;
    double allocated = 0.0;
    bool ok = false;
    if (moe_log_find(s, n, "memory (MB)") != NULL) {
        ok = moe_log_field_number(s, n, "| max reserved:", &reserved);
        if (ok && moe_log_field_number(s, n, "| max allocated:", &allocated)) {
            allocated *= MIB;
        }
        reserved *= MIB;
    } else if (moe_log_find(s, n, "memory (GB)") != NULL) {
        ok = moe_log_field_number(s, n, "mem-max-reserved-gigabytes:", &reserved);
        if (ok && moe_log_field_number(s, n, "mem-max-allocated-gigabytes:", &allocated)) {
            allocated *= 1e9;
        }
        reserved *= 1e9;
    }
    if (!ok || !isfinite(reserved) || reserved < 0.0) {
        return;
    }
    struct moe_megatron_log *log = r->log;
    log->has_memory = true;
    if (reserved > log->max_reserved_bytes) {
        log->max_reserved_bytes = reserved;
        log->max_reserved_rank = (int)rank;
    }
    if (isfinite(allocated) && allocated > log->max_allocated_bytes) {
        log->max_allocated_bytes = allocated;
    }
    for (int i = 0; i < r->num_mem_ranks; i++) {
        if (r->mem_ranks[i] == (int)rank) {
            return;
        }
    }
    if (r->num_mem_ranks < (int)(sizeof(r->mem_ranks) / sizeof(r->mem_ranks[0]))) {
        r->mem_ranks[r->num_mem_ranks++] = (int)rank;
    }
    log->num_memory_ranks++;
}

static void set_device(struct reader *r, const char *name, size_t nn)
{
    while (nn > 0 && name[nn - 1] == ' ') {
        nn--;
    }
    if (nn == 0 || nn >= sizeof(r->log->device_name)) {
        return;
    }
    char *d = r->log->device_name;
    if (d[0] == '\0') {
        memcpy(d, name, nn);
        d[nn] = '\0';
    } else if (strlen(d) != nn || memcmp(d, name, nn) != 0) {
        r->log->device_ambiguous = true;
    }
}

/* nvidia-smi -L ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)") or its table
 * ("|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |"). */
static void device_line(struct reader *r, const char *s, size_t n)
{
    if (moe_log_starts_with(s, n, "GPU ")) {
        size_t i = moe_log_skip_digits(s, n, 4);
        const char *uuid = moe_log_find(s, n, " (UUID: ");
        if (i > 4 && i + 2 < n && s[i] == ':' && s[i + 1] == ' ' && uuid != NULL &&
            uuid > s + i + 2) {
            set_device(r, s + i + 2, (size_t)(uuid - (s + i + 2)));
        }
        return;
    }
    if (n > 0 && s[0] == '|') {
        size_t i = 1;
        while (i < n && s[i] == ' ') {
            i++;
        }
        size_t j = moe_log_skip_digits(s, n, i);
        if (j == i || j + 2 >= n || s[j] != ' ' || s[j + 1] != ' ') {
            return;
        }
        while (j < n && s[j] == ' ') {
            j++;
        }
        if (!moe_log_starts_with(s + j, n - j, "NVIDIA ")) {
            return;
        }
        const char *end = moe_log_find(s + j, n - j, "  ");
        if (end != NULL) {
            set_device(r, s + j, (size_t)(end - (s + j)));
        }
    }
}

static void other_line(struct reader *r, const char *s, size_t n, int line)
{
    const char *p = moe_log_find(s, n, "> padded vocab (size: ");
    if (p != NULL && r->padded_vocab == 0) {
        size_t off = (size_t)(p - s) + 22;
        long v = 0;
        if (moe_log_long(s + off, n - off, &v, NULL) && v > 0) {
            r->padded_vocab = v;
            r->padded_vocab_line = line;
        }
        return;
    }
    p = moe_log_find(s, n, "Theoretical memory footprints:");
    if (p != NULL) {
        double total = 0.0;
        if (moe_log_field_number(s, n, "total=", &total) && total > 0.0 && isfinite(total)) {
            r->log->has_theoretical = true;
            r->log->theoretical_bytes = total * MIB;
        }
        return;
    }
    if (moe_log_find(s, n, "memory (MB)") != NULL || moe_log_find(s, n, "memory (GB)") != NULL) {
        memory_line(r, s, n);
        return;
    }
    device_line(r, s, n);
}

/* ------------------------------------------------------------------------------------------ */
/* The pass over the lines                                                                       */

static enum moe_status scan(struct reader *r, const char *text, size_t len)
{
    size_t pos = 0;
    int line_no = 1;
    struct moe_log_span cur;
    struct moe_log_span nxt;
    bool have_next = moe_log_next_line(text, len, &pos, &line_no, &cur);
    while (have_next) {
        bool more = moe_log_next_line(text, len, &pos, &line_no, &nxt);
        const char *s = cur.s;
        size_t n = cur.n;
        long iter = 0;
        size_t fields = 0;
        bool used_next = false;
        if (moe_log_find(s, n, DUMP_HEADER) != NULL) {
            MOE_TRY(dump_header(r, s, n, cur.line));
        } else if (r->in_dump) {
            MOE_TRY(dump_line(r, s, n, cur.line));
        } else if (iteration_token(s, n, &iter, &fields)) {
            MOE_TRY(iteration_line(r, s, n, fields, iter, more ? nxt.s : NULL, more ? nxt.n : 0,
                                   cur.line, &used_next));
        } else {
            size_t k = moe_log_skip_prefixes(s, n);
            other_line(r, s + k, n - k, cur.line);
        }
        if (used_next) {
            more = moe_log_next_line(text, len, &pos, &line_no, &nxt);
        }
        cur = nxt;
        have_next = more;
    }
    if (r->in_dump) {
        return fail(r, r->dump_line, MOE_ERR_PARSE,
                    "the arguments dump that starts here has no '-------------------- end of "
                    "arguments ---------------------' line (the log is cut short?)");
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Arguments -> Megatron flags                                                                   */

/* Arguments whose flag is spelled differently from the attribute ('_' -> '-'). store_false
 * switches (default True) give their flag when the value is False. [arguments.py] */
struct renamed {
    const char *dest;
    const char *flag;
    bool store_false;
};
static const struct renamed renamed_args[] = {
    {"fp8", "--fp8-format", false},
    {"fp4", "--fp4-format", false},
    {"deprecated_use_mcore_models", "--use-mcore-models", false},
    {"use_dist_ckpt_deprecated", "--use-dist-ckpt", false},
    {"nccl_ub", "--use-nccl-ub", false},
    {"overlap_p2p_comm_warmup_flush", "--overlap-p2p-communication-warmup-flush", false},
    {"microbatch_group_size_per_vp_stage", "--microbatch-group-size-per-virtual-pipeline-stage",
     false},
    {"manual_gc_eval", "--no-manual-gc-eval", true},
    {"add_position_embedding", "--no-position-embedding", true},
    {"add_bias_linear", "--disable-bias-linear", true},
    {"check_for_nan_in_loss_and_grad", "--no-check-for-nan-in-loss-and-grad", true},
    {"gradient_accumulation_fusion", "--no-gradient-accumulation-fusion", true},
    {"clone_scatter_output_in_embedding", "--no-clone-scatter-output-in-embedding", true},
    {"mmap_bin_files", "--no-mmap-bin-files", true},
    {"create_attention_mask_in_dataloader", "--no-create-attention-mask-in-dataloader", true},
    {"perform_initialization", "--no-initialization", true},
    {"barrier_with_L1_time", "--no-barrier-with-level-1-timing", true},
    {"enable_one_logger", "--no-one-logger", true},
    {"enable_gloo_process_groups", "--disable-gloo-process-groups", true},
    {"enable_msc", "--disable-msc", true},
    {"fp8_wgrad", "--no-fp8-wgrad", true},
    {"overlap_p2p_comm", "--no-overlap-p2p-communication", true},
    {"align_grad_reduce", "--no-align-grad-reduce", true},
    {"align_param_gather", "--no-align-param-gather", true},
    {"tp_comm_overlap_ag", "--disable-tp-comm-overlap-ag", true},
    {"tp_comm_overlap_rs", "--disable-tp-comm-overlap-rs", true},
    {"tp_comm_bulk_dgrad", "--disable-tp-comm-bulk-dgrad", true},
    {"tp_comm_bulk_wgrad", "--disable-tp-comm-bulk-wgrad", true},
    {"tp_comm_split_ag", "--disable-tp-comm-split-ag", true},
    {"tp_comm_split_rs", "--disable-tp-comm-split-rs", true},
    {"pin_cpu_grads", "--no-pin-cpu-grads", true},
    {"pin_cpu_params", "--no-pin-cpu-params", true},
};

/* Attributes Megatron derives after parsing (checked by the caller or read here, never flags). */
static const char *const derived_args[] = {
    "world_size",
    "rank",
    "data_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "transformer_pipeline_model_parallel_size",
    "padded_vocab_size",
    "vocab_size",
    "params_dtype",
    "log_interval",
    "train_iters",
    "encoder_seq_length",
    "encoder_num_layers",
};

/* Name families of what moefold prices: an unknown argument here with a value set is listed. */
static const char *const priced_prefixes[] = {
    "moe_",
    "recompute",
    "fp8",
    "fp4",
    "cuda_graph",
    "offload",
    "cpu_offload",
    "overlap_",
    "tp_comm",
    "pipeline_model",
    "expert_",
    "context_parallel",
    "sequence_par",
    "num_layers",
    "mtp_",
    "decoder_first",
    "decoder_last",
    "account_for",
    "num_experts",
    "use_distributed",
    "use_precision",
    "fine_grained",
    "use_torch_fsdp",
    "use_megatron_fsdp",
    "multi_latent",
    "kv_lora",
    "q_lora",
    "hybrid_",
};

static bool is_off(const char *v)
{
    return strcmp(v, "None") == 0 || strcmp(v, "False") == 0 || strcmp(v, "[]") == 0 ||
           v[0] == '\0';
}

/* Off, or a zero (an unknown ratio or count at 0 switches nothing on). */
static bool is_off_or_zero(const char *v)
{
    char *end = NULL;
    double x = strtod(v, &end);
    return is_off(v) || (end != v && *end == '\0' && x == 0.0);
}

/* Growable word list: offsets into one text buffer until the end. */
struct words {
    char *text;
    size_t len, cap;
    size_t *off;
    int *line;
    int n, cap_n;
};

static bool words_add(struct words *w, const char *s, size_t n, int line)
{
    if (w->n == w->cap_n) {
        int cap = w->cap_n ? w->cap_n * 2 : 128;
        size_t *off = realloc(w->off, (size_t)cap * sizeof(*off));
        if (off == NULL) {
            return false;
        }
        w->off = off;
        int *ln = realloc(w->line, (size_t)cap * sizeof(*ln));
        if (ln == NULL) {
            return false;
        }
        w->line = ln;
        w->cap_n = cap;
    }
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        while (cap < w->len + n + 1) {
            cap *= 2;
        }
        char *t = realloc(w->text, cap);
        if (t == NULL) {
            return false;
        }
        w->text = t;
        w->cap = cap;
    }
    memcpy(w->text + w->len, s, n);
    w->text[w->len + n] = '\0';
    w->off[w->n] = w->len;
    w->line[w->n] = line;
    w->len += n + 1;
    w->n++;
    return true;
}

static bool words_add_str(struct words *w, const char *s, int line)
{
    return words_add(w, s, strlen(s), line);
}

/* One scalar as the flag parser takes it: torch dtypes by name, Python enums' member names. */
static bool add_scalar(struct words *w, const char *v, size_t n, int line)
{
    static const char *const dtypes[][2] = {{"torch.float32", "fp32"},
                                            {"torch.bfloat16", "bf16"},
                                            {"torch.float16", "fp16"},
                                            {"torch.uint8", "fp8"}};
    char buf[128];
    if (n < sizeof(buf)) {
        memcpy(buf, v, n);
        buf[n] = '\0';
        for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
            if (strcmp(buf, dtypes[i][0]) == 0) {
                return words_add_str(w, dtypes[i][1], line);
            }
        }
        /* <CudaGraphModule.attn: 1> (repr) or CudaGraphModule.attn (str) -> attn */
        const char *p = buf[0] == '<' ? buf + 1 : buf;
        const char *dot = strchr(p, '.');
        if (dot != NULL && isupper((unsigned char)p[0])) {
            bool ident = true;
            for (const char *q = p; q < dot; q++) {
                ident = ident && (isalnum((unsigned char)*q) || *q == '_');
            }
            size_t m = strcspn(dot + 1, ":>");
            if (ident && m > 0) {
                return words_add(w, dot + 1, m, line);
            }
        }
    }
    return words_add(w, v, n, line);
}

/* A Python list as printed ("['core_attn', 'mlp']", "[<X.a: 1>]") -> its items as words. */
static bool add_list(struct words *w, const char *v, int line)
{
    size_t n = strlen(v);
    if (n < 2 || v[0] != '[' || v[n - 1] != ']') {
        return add_scalar(w, v, n, line);
    }
    size_t i = 1;
    while (i < n - 1) {
        while (i < n - 1 && (v[i] == ' ' || v[i] == ',')) {
            i++;
        }
        if (i >= n - 1) {
            break;
        }
        size_t start = i;
        size_t end = i;
        if (v[i] == '\'' || v[i] == '"') {
            char q = v[i];
            start = i + 1;
            end = start;
            while (end < n - 1 && v[end] != q) {
                end++;
            }
            i = end + 1;
        } else if (v[i] == '<') {
            while (end < n - 1 && v[end] != '>') {
                end++;
            }
            end = end < n - 1 ? end + 1 : end;
            i = end;
        } else {
            while (end < n - 1 && v[end] != ',') {
                end++;
            }
            i = end;
            while (end > start && v[end - 1] == ' ') {
                end--;
            }
        }
        if (end > start && !add_scalar(w, v + start, end - start, line)) {
            return false;
        }
    }
    return true;
}

/* "[0, 0, 1]" -> "[0,0,1]" (one word the list-expression grammar reads). */
static bool add_compact(struct words *w, const char *v, int line)
{
    size_t n = strlen(v);
    char *c = malloc(n + 1);
    if (c == NULL) {
        return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] != ' ') {
            c[k++] = v[i];
        }
    }
    bool ok = words_add(w, c, k, line);
    free(c);
    return ok;
}

static void note_unknown(struct moe_megatron_log *log, const struct arg *a)
{
    bool priced = false;
    for (size_t i = 0; i < sizeof(priced_prefixes) / sizeof(priced_prefixes[0]) && !priced; i++) {
        priced = strncmp(a->name, priced_prefixes[i], strlen(priced_prefixes[i])) == 0;
    }
    log->num_args_unread++;
    if (!priced || is_off_or_zero(a->value)) {
        return;
    }
    if (log->num_unknown >= MOE_MLOG_MAX_UNKNOWN) {
        log->num_unknown_more++;
        return;
    }
    struct moe_mlog_unknown *u = &log->unknown[log->num_unknown++];
    (void)snprintf(u->name, sizeof(u->name), "%s", a->name);
    (void)snprintf(u->value, sizeof(u->value), "%s", a->value);
    u->line = a->line;
}

static const char *arg_value(const struct arg_list *a, const char *name)
{
    const struct arg *g = args_find(a, name);
    return g != NULL ? g->value : NULL;
}

static bool arg_true(const struct arg_list *a, const char *name)
{
    const char *v = arg_value(a, name);
    return v != NULL && strcmp(v, "True") == 0;
}

/* Skip rules: arguments Megatron prints with defaults that only matter under another switch. */
static bool skipped_by_context(const struct arg_list *a, const char *name)
{
    static const char *const mla_only[] = {"q_lora_rank", "kv_lora_rank", "qk_head_dim",
                                           "qk_pos_emb_head_dim", "v_head_dim"};
    if (strcmp(name, "num_query_groups") == 0) {
        return !arg_true(a, "group_query_attention");
    }
    if (strcmp(name, "recompute_method") == 0 || strcmp(name, "recompute_num_layers") == 0) {
        const char *g = arg_value(a, "recompute_granularity"); /* defaults printed without it */
        return g == NULL || strcmp(g, "full") != 0;
    }
    for (size_t i = 0; i < sizeof(mla_only) / sizeof(mla_only[0]); i++) {
        if (strcmp(name, mla_only[i]) == 0) {
            return !arg_true(a, "multi_latent_attention");
        }
    }
    if (strncmp(name, "moe_", 4) == 0) { /* a dense model prints MoE defaults */
        const char *e = arg_value(a, "num_experts");
        return e == NULL || is_off(e) || strcmp(e, "0") == 0;
    }
    return false;
}

/* The Megatron flag of attribute `name` into flag[len]; false when moefold's parser does not know
 * it. *store_false: the flag switches a default-True attribute off. *arity as
 * moe_megatron_flag_known. */
static bool arg_flag(const char *name, char *flag, size_t len, bool *store_false, int *arity)
{
    *store_false = false;
    if (strlen(name) >= MOE_MLOG_NAME_LEN) {
        return false;
    }
    (void)snprintf(flag, len, "--%s", name);
    for (char *p = flag + 2; *p != '\0'; p++) {
        *p = *p == '_' ? '-' : *p;
    }
    for (size_t i = 0; i < sizeof(renamed_args) / sizeof(renamed_args[0]); i++) {
        if (strcmp(name, renamed_args[i].dest) == 0) {
            (void)snprintf(flag, len, "%s", renamed_args[i].flag);
            *store_false = renamed_args[i].store_false;
        }
    }
    int a = 0;
    bool known = moe_megatron_flag_known(flag, &a);
    if (arity != NULL) {
        *arity = a;
    }
    return known;
}

/* One argument -> its flag words. */
static enum moe_status arg_words(struct reader *r, struct words *w, const struct arg *a)
{
    struct moe_megatron_log *log = r->log;
    char flag[MOE_MLOG_NAME_LEN + 8];
    bool store_false = false;
    int arity = 0;
    if (!arg_flag(a->name, flag, sizeof(flag), &store_false, &arity)) {
        note_unknown(log, a);
        return MOE_OK;
    }
    log->num_args_read++;
    if (!moe_megatron_flag_priced(flag) || skipped_by_context(&r->args, a->name)) {
        return MOE_OK; /* accepted and without effect (logging, learning rate, ...) */
    }
    const char *v = a->value;
    bool ok = true;
    if (arity == 0) {
        bool is_true = strcmp(v, "True") == 0;
        if (!is_true && strcmp(v, "False") != 0 && strcmp(v, "None") != 0) {
            return fail(r, a->line, MOE_ERR_PARSE,
                        "argument %s = '%s': Megatron prints this switch as True or False", a->name,
                        v);
        }
        if (is_true != store_false) {
            ok = words_add_str(w, flag, a->line);
        }
    } else if (strcmp(v, "None") == 0 || strcmp(v, "[]") == 0 || v[0] == '\0') {
        return MOE_OK;
    } else if (arity == 1) {
        ok = words_add_str(w, flag, a->line) &&
             (v[0] == '[' ? add_compact(w, v, a->line) : add_scalar(w, v, strlen(v), a->line));
    } else {
        ok = words_add_str(w, flag, a->line) && add_list(w, v, a->line);
    }
    return ok ? MOE_OK : fail(r, a->line, MOE_ERR_NOMEM, "out of memory");
}

static enum moe_status read_int_arg(struct reader *r, const char *name, bool required, int *out)
{
    const struct arg *g = args_find(&r->args, name);
    if (g == NULL || strcmp(g->value, "None") == 0) {
        if (required) {
            return fail(r, r->log->args_line, MOE_ERR_INVALID,
                        "the arguments dump has no %s (Megatron prints it in every version "
                        "moefold reads); is the dump cut short?",
                        name);
        }
        return MOE_OK;
    }
    char *end = NULL;
    long v = strtol(g->value, &end, 10);
    if (end == g->value || *end != '\0' || v < 0 || v > 100000000L) {
        return fail(r, g->line, MOE_ERR_PARSE, "argument %s = '%s': expected a whole number", name,
                    g->value);
    }
    *out = (int)v;
    return MOE_OK;
}

static enum moe_status build_words(struct reader *r)
{
    struct moe_megatron_log *log = r->log;
    struct words w;
    memset(&w, 0, sizeof(w));
    enum moe_status st = MOE_OK;
    log->num_args = r->args.n;
    for (int i = 0; i < r->args.n && st == MOE_OK; i++) {
        const struct arg *a = &r->args.v[i];
        bool derived = false;
        for (size_t k = 0; k < sizeof(derived_args) / sizeof(derived_args[0]); k++) {
            derived = derived || strcmp(a->name, derived_args[k]) == 0;
        }
        if (!derived) {
            st = arg_words(r, &w, a);
        }
    }
    /* The vocabulary: the argument, else Megatron's `> padded vocab (size: N)` line (tokenizers
     * built from files leave vocab_size None; moefold pads N itself, as Megatron did). */
    const struct arg *vocab = args_find(&r->args, "vocab_size");
    char num[32];
    if (st == MOE_OK && vocab != NULL && !is_off(vocab->value)) {
        st = words_add_str(&w, "--vocab-size", vocab->line) &&
                     words_add_str(&w, vocab->value, vocab->line)
                 ? MOE_OK
                 : MOE_ERR_NOMEM;
    } else if (st == MOE_OK && r->padded_vocab > 0) {
        (void)snprintf(num, sizeof(num), "%ld", r->padded_vocab);
        log->vocab_from_line = r->padded_vocab_line;
        st = words_add_str(&w, "--vocab-size", r->padded_vocab_line) &&
                     words_add_str(&w, num, r->padded_vocab_line)
                 ? MOE_OK
                 : MOE_ERR_NOMEM;
    }
    if (st == MOE_ERR_NOMEM) {
        st = fail(r, 0, MOE_ERR_NOMEM, "out of memory");
    }
    if (st == MOE_OK) {
        log->words = malloc((size_t)(w.n > 0 ? w.n : 1) * sizeof(*log->words));
        if (log->words == NULL) {
            st = fail(r, 0, MOE_ERR_NOMEM, "out of memory");
        }
    }
    if (st != MOE_OK) {
        free(w.text);
        free(w.off);
        free(w.line);
        return st;
    }
    for (int i = 0; i < w.n; i++) {
        log->words[i] = w.text + w.off[i];
    }
    log->num_words = w.n;
    log->word_line = w.line;
    log->storage_ = w.text;
    free(w.off);
    MOE_TRY(read_int_arg(r, "world_size", true, &log->world_size));
    log->log_interval = 1;
    MOE_TRY(read_int_arg(r, "log_interval", false, &log->log_interval));
    MOE_TRY(read_int_arg(r, "train_iters", false, &log->train_iters));
    if (log->log_interval < 1) {
        log->log_interval = 1;
    }
    MOE_TRY(read_int_arg(r, "data_parallel_size", false, &log->dump_dp));
    const struct arg *vpp = args_find(&r->args, "virtual_pipeline_model_parallel_size");
    if (vpp != NULL) {
        log->dump_vpp = 1;
        log->dump_vpp_line = vpp->line;
        MOE_TRY(read_int_arg(r, "virtual_pipeline_model_parallel_size", false, &log->dump_vpp));
    }
    const struct arg *dp = args_find(&r->args, "data_parallel_size");
    log->dump_dp_line = dp != NULL ? dp->line : 0;
    if (log->world_size < 1) {
        return fail(r, args_find(&r->args, "world_size")->line, MOE_ERR_INVALID, "world_size is %d",
                    log->world_size);
    }
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Steady state                                                                                  */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static enum moe_status steady_state(struct reader *r)
{
    struct moe_megatron_log *log = r->log;
    log->num_iter_lines = r->num_iters;
    if (r->num_iters == 0) {
        return fail(r, 0, MOE_ERR_NOT_FOUND,
                    "no iteration lines ('iteration N/ M | ... | elapsed time per iteration (ms): "
                    "...')%s; Megatron prints them on the last rank (world_size - 1), so the log "
                    "must hold that rank's output",
                    log->num_cut_short > 0 ? " with an elapsed time (all are cut short)" : "");
    }
    /* The run's global batch size: the argument, else the last line's. */
    long gbs = -1;
    const char *g = arg_value(&r->args, "global_batch_size");
    if (g != NULL && !is_off(g)) {
        gbs = strtol(g, NULL, 10);
    }
    if (gbs <= 0) {
        gbs = r->iters[r->num_iters - 1].gbs;
    }
    double *ms = malloc((size_t)r->num_iters * sizeof(*ms));
    double *tf = malloc((size_t)r->num_iters * sizeof(*tf));
    if (ms == NULL || tf == NULL) {
        free(ms);
        free(tf);
        return fail(r, 0, MOE_ERR_NOMEM, "out of memory");
    }
    int used = 0;
    int ntf = 0;
    long start = -1; /* iteration before the first one the current start covers */
    long prev = -1;
    log->num_starts = 0;
    for (int i = 0; i < r->num_iters; i++) {
        const struct iter_line *it = &r->iters[i];
        if (it->iter <= prev || start < 0 || (it->after_dump && i > 0)) { /* a (re)start */
            long back = it->iter - log->log_interval;
            /* A line off the log_interval grid is main's report of a start's first iteration. */
            start = it->iter % log->log_interval != 0 ? it->iter - 1 : back;
            start = start > 0 ? start : 0;
            log->num_starts++;
        }
        prev = it->iter;
        long covers_from = it->iter - log->log_interval + 1;
        if (covers_from <= start + WARMUP_ITERS) {
            log->num_warmup++;
            continue;
        }
        if (it->skipped > 0 || it->nans > 0) {
            log->num_skipped++;
            continue;
        }
        if (gbs > 0 && it->gbs > 0 && it->gbs != gbs) {
            log->num_rampup++;
            continue;
        }
        ms[used] = it->elapsed_ms;
        if (!isnan(it->tflops)) {
            tf[ntf++] = it->tflops;
        }
        if (used == 0) {
            log->first_iter_used = (int)it->iter;
        }
        log->last_iter_used = (int)it->iter;
        used++;
    }
    if (used == 0) {
        free(ms);
        free(tf);
        return fail(r, 0, MOE_ERR_INVALID,
                    "none of the %d iteration lines is steady state: %d cover the first %d "
                    "iterations of a start, %d report skipped or NaN iterations, %d run at another "
                    "global batch size than %ld; a longer log is needed",
                    r->num_iters, log->num_warmup, WARMUP_ITERS, log->num_skipped, log->num_rampup,
                    gbs);
    }
    log->iteration_lines_used = used;
    log->iterations_used = used * log->log_interval;
    log->global_batch_size = (int)gbs;
    log->step_time_s = median_of(ms, used) / 1000.0;
    log->step_time_min_s = ms[0] / 1000.0;
    log->step_time_max_s = ms[used - 1] / 1000.0;
    log->has_megatron_tflops = ntf > 0;
    if (ntf > 0) {
        log->megatron_tflops = median_of(tf, ntf);
    }
    free(ms);
    free(tf);
    return MOE_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Public API                                                                                    */

void moe_mlog_init(struct moe_megatron_log *log)
{
    memset(log, 0, sizeof(*log));
}

void moe_mlog_fini(struct moe_megatron_log *log)
{
    if (log == NULL) {
        return;
    }
    free(log->words);
    free(log->word_line);
    free(log->storage_);
    memset(log, 0, sizeof(*log));
}

enum moe_status moe_mlog_parse(const char *text,
                               size_t len,
                               const char *source,
                               struct moe_megatron_log *log,
                               struct moe_diag *diag)
{
    moe_mlog_fini(log);
    struct reader r;
    memset(&r, 0, sizeof(r));
    r.source = source != NULL ? source : "(log)";
    r.log = log;
    r.diag = diag;
    enum moe_status st = scan(&r, text, len);
    if (st == MOE_OK && r.args.n == 0) {
        st = fail(&r, 0, MOE_ERR_NOT_FOUND,
                  "no Megatron-LM arguments dump ('" DUMP_HEADER
                  "', printed by rank 0 at start-up): moefold rebuilds the model and layout from "
                  "it, so the log must start with the job's first lines");
    }
    if (st == MOE_OK) {
        st = build_words(&r);
    }
    if (st == MOE_OK) {
        st = steady_state(&r);
    }
    args_free(&r.args);
    args_free(&r.other);
    free(r.iters);
    if (st != MOE_OK) {
        moe_mlog_fini(log);
    }
    return st;
}

/* The whole file (regular files up to MAX_FILE_BYTES: logs of long runs pass JSON's limit). */
static enum moe_status read_text(const char *path, char **out, size_t *len, struct moe_diag *diag)
{
    moe_diag_source(diag, path);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return moe_diag_set(diag, MOE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)fclose(f);
        return moe_diag_set(diag, MOE_ERR_IO, "%s is not a regular file", path);
    }
    if (st.st_size > MAX_FILE_BYTES) {
        (void)fclose(f);
        return moe_diag_set(diag, MOE_ERR_IO, "%s is %lld bytes, over the %ld-byte limit", path,
                            (long long)st.st_size, MAX_FILE_BYTES);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        (void)fclose(f);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    int err = ferror(f);
    (void)fclose(f);
    if (err != 0) {
        free(buf);
        return moe_diag_set(diag, MOE_ERR_IO, "error reading %s", path);
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return MOE_OK;
}

enum moe_status
moe_mlog_read_file(const char *path, struct moe_megatron_log *log, struct moe_diag *diag)
{
    char *text = NULL;
    size_t len = 0;
    MOE_TRY(read_text(path, &text, &len, diag));
    enum moe_status st = moe_mlog_parse(text, len, path, log, diag);
    free(text);
    return st;
}

int moe_mlog_flag_line(const struct moe_megatron_log *log, const char *flag)
{
    if (flag == NULL) {
        return 0;
    }
    for (int i = 0; i < log->num_words; i++) {
        if (strcmp(log->words[i], flag) == 0) {
            return log->word_line[i];
        }
    }
    return 0;
}

/* The GPU model in a name: "H100", "GB200", ... ("" when none). */
static void gpu_model(const char *name, char *out, size_t len)
{
    static const char *const models[] = {"GB300", "GB200", "B300", "B200", "H800",
                                         "H200",  "H100",  "H20",  "A100"};
    out[0] = '\0';
    char up[160];
    size_t n = 0;
    for (; name[n] != '\0' && n + 1 < sizeof(up); n++) {
        up[n] = (char)toupper((unsigned char)name[n]);
    }
    up[n] = '\0';
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        const char *p = strstr(up, models[i]);
        size_t m = strlen(models[i]);
        /* whole token: "GB200" must not match "B200", "H200" not "GH200" */
        while (p != NULL &&
               ((p > up && isalnum((unsigned char)p[-1])) || isdigit((unsigned char)p[m]))) {
            p = strstr(p + 1, models[i]);
        }
        if (p != NULL) {
            (void)snprintf(out, len, "%s", models[i]);
            return;
        }
    }
}

bool moe_mlog_cluster_for_device(
    const char *device_name, char *out, size_t len, char *others, size_t others_len)
{
    char want[16];
    gpu_model(device_name, want, sizeof(want));
    if (others != NULL && others_len > 0) {
        others[0] = '\0';
    }
    if (want[0] == '\0') {
        return false;
    }
    char(*names)[MOE_NAME_LEN] = malloc(256 * sizeof(*names));
    if (names == NULL) {
        return false;
    }
    size_t n = 0;
    struct moe_diag d = {0};
    int found = 0;
    if (moe_cluster_list(names, 256, &n, &d) == MOE_OK) {
        for (size_t i = 0; i < n; i++) {
            struct moe_cluster cl;
            char base[MOE_NAME_LEN] = "";
            if (moe_cluster_load(names[i], &cl, &d) != MOE_OK) {
                continue;
            }
            char have[16];
            gpu_model(cl.gpu.name, have, sizeof(have));
            if (strcmp(have, want) != 0) {
                continue;
            }
            bool is_ref = moe_cluster_file_base(names[i], base, sizeof(base), &d) == MOE_OK &&
                          base[0] == '\0';
            if (is_ref) {
                if (found == 0) {
                    (void)snprintf(out, len, "%s", names[i]);
                }
                found++;
            } else if (others != NULL && others_len > 0) {
                size_t used = strlen(others);
                (void)snprintf(others + used, others_len - used, "%s%s", used ? ", " : "",
                               names[i]);
            }
        }
    }
    free(names);
    return found == 1;
}
