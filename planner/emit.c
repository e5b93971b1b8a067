/*
 * Plans out (planner/emit.h): Megatron-LM flags and launch scripts. The script's Megatron flags
 * are the exact words of moe_megatron_format_args, split as a shell would and re-quoted, so
 * what runs is what `moefold predict` reads back.
 */
#include "planner/emit.h"

#include "model/megatron_args.h"
#include "planner/report.h"
#include "topologies/json_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_WORDS 1024

enum moe_status moe_plan_megatron_args(const struct moe_model_cfg *cfg,
                                       const struct moe_layout *lay,
                                       const struct moe_options *opt,
                                       unsigned flags,
                                       char **out,
                                       struct moe_diag *diag)
{
    size_t need = 0;
    *out = NULL;
    /* A size query: the formatter reports the length and refuses the empty buffer. */
    enum moe_status q = moe_megatron_format_args(cfg, lay, opt, flags, NULL, 0, &need, NULL);
    (void)q;
    char *buf = malloc(need + 1);
    if (buf == NULL) {
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory for the Megatron flags");
    }
    enum moe_status st = moe_megatron_format_args(cfg, lay, opt, flags, buf, need + 1, NULL, diag);
    if (st != MOE_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return MOE_OK;
}

/* Write s single-quoted for bash ('it'\''s'). */
static void put_quoted(FILE *f, const char *s)
{
    bool plain = s[0] != '\0';
    for (const char *c = s; *c != '\0' && plain; c++) {
        plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                strchr("-_.,/=:+@%", *c) != NULL;
    }
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *c = s; *c != '\0'; c++) {
        if (*c == '\'') {
            fputs("'\\''", f);
        } else {
            fputc(*c, f);
        }
    }
    fputc('\'', f);
}

static void write_header(FILE *f, const struct moe_plan_launch *l, int nodes, const char *path)
{
    const char *name = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    char lay[320];
    char opt[400];
    moe_plan_layout_str(l->lay, lay, sizeof(lay));
    moe_plan_options_str(l->opt, opt, sizeof(opt));
    fprintf(f,
            "#!/usr/bin/env bash\n"
            "# Launch script written by `moefold plan` for %s on %d x %s (%s): %d nodes x %d "
            "GPUs.\n"
            "# layout:  %s\n"
            "# options: %s\n"
            "# predicted: %.3f s per step, %.0f tokens/s/GPU, %.1f GiB per GPU\n"
            "#\n"
            "# usage:\n"
            "#   ./%s moefold    moefold's engine (moefold-train) under mpirun, from the plan "
            "file\n"
            "#   ./%s megatron   Megatron-LM on this node with torchrun (run it on every node;\n"
            "#                   NODE_RANK or SLURM_NODEID says which node this is)\n"
            "#   ./%s srun       the same on every node of a Slurm allocation\n"
            "# Megatron-LM still needs your data, tokenizer, learning-rate and iteration flags:\n"
            "# put them in MEGATRON_EXTRA_ARGS. MEGATRON_LM is the Megatron-LM checkout.\n"
            "set -euo pipefail\n\n",
            l->cfg->name, l->lay->num_gpus, l->cl->name, l->cl->gpu.name, nodes,
            l->cl->gpus_per_node, lay, opt, l->step_time_s, l->tokens_per_s_per_gpu, l->memory_gib,
            name, name, name);
    fprintf(f,
            "NODES=%d\n"
            "GPUS_PER_NODE=%d\n"
            "WORLD_SIZE=$((NODES * GPUS_PER_NODE))\n"
            "MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames \"${SLURM_JOB_NODELIST:-}\" "
            "2>/dev/null | head -n 1 || true)}\n"
            "MASTER_ADDR=${MASTER_ADDR:-$(hostname)}\n"
            "MASTER_PORT=${MASTER_PORT:-29500}\n"
            "NODE_RANK=${NODE_RANK:-${SLURM_NODEID:-0}}\n"
            "MEGATRON_LM=${MEGATRON_LM:-$HOME/Megatron-LM}\n"
            "read -r -a EXTRA <<< \"${MEGATRON_EXTRA_ARGS:-}\"\n\n",
            nodes, l->cl->gpus_per_node);
}

static enum moe_status
write_body(FILE *f, const struct moe_plan_launch *l, char *args, struct moe_diag *diag)
{
    const char *words[MAX_WORDS];
    int n = 0;
    MOE_TRY(moe_megatron_split_line(args, words, MAX_WORDS, &n, diag));
    fprintf(f, "MEGATRON_ARGS=(");
    for (int i = 0; i < n; i++) {
        fputs(strncmp(words[i], "--", 2) == 0 ? "\n    " : " ", f);
        put_quoted(f, words[i]);
    }
    fprintf(f, "\n)\n\n");
    fprintf(f, "case \"${1:-megatron}\" in\nmoefold)\n");
    if (l->plan_path != NULL) {
        fprintf(f,
                "    exec mpirun -np \"$WORLD_SIZE\" --npernode \"$GPUS_PER_NODE\" --bind-to none "
                "moefold-train --plan ");
        put_quoted(f, l->plan_path);
        fprintf(f, "\n    ;;\n");
    } else {
        fprintf(f, "    echo \"$0: no plan file: rerun moefold plan with --emit plan.json\" >&2\n"
                   "    exit 2\n    ;;\n");
    }
    fprintf(f, "megatron)\n"
               "    exec torchrun --nnodes \"$NODES\" --nproc-per-node \"$GPUS_PER_NODE\" "
               "--node-rank \"$NODE_RANK\" \\\n"
               "        --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \\\n"
               "        \"$MEGATRON_LM/pretrain_gpt.py\" \"${MEGATRON_ARGS[@]}\" "
               "${EXTRA[@]+\"${EXTRA[@]}\"}\n"
               "    ;;\n"
               "srun)\n"
               "    exec srun --nodes \"$NODES\" --ntasks-per-node 1 \"$0\" megatron\n"
               "    ;;\n"
               "*)\n"
               "    echo \"usage: $0 moefold|megatron|srun\" >&2\n"
               "    exit 2\n"
               "    ;;\n"
               "esac\n");
    return MOE_OK;
}

enum moe_status moe_plan_write_launch_script(const char *path,
                                             const struct moe_plan_launch *l,
                                             struct moe_diag *diag)
{
    int per_node = l->cl->gpus_per_node > 0 ? l->cl->gpus_per_node : 1;
    if (l->lay->num_gpus % per_node != 0) {
        return moe_diag_set(diag, MOE_ERR_INVALID,
                            "%d GPUs is not a whole number of %d-GPU nodes of %s", l->lay->num_gpus,
                            per_node, l->cl->name);
    }
    char *args = NULL;
    MOE_TRY(moe_plan_megatron_args(l->cfg, l->lay, l->opt, 0u, &args, diag));
    /* The script is built in memory and written like every other output (temporary name,
     * fsync, rename: an interrupted write never leaves a torn script), then made executable. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) {
        free(args);
        return moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory writing %s", path);
    }
    write_header(f, l, l->lay->num_gpus / per_node, path);
    enum moe_status st = write_body(f, l, args, diag);
    if (fclose(f) != 0 && st == MOE_OK) {
        st = moe_diag_set(diag, MOE_ERR_NOMEM, "out of memory writing %s", path);
    }
    if (st == MOE_OK) {
        st = moe_file_write_atomic(path, text, len, diag);
    }
    if (st == MOE_OK && chmod(path, 0755) != 0) {
        st = moe_diag_set(diag, MOE_ERR_IO, "cannot make %s executable: %s", path, strerror(errno));
    }
    free(text);
    free(args);
    return st;
}
