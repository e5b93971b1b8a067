/*
 * libFuzzer target: Megatron-LM command lines, as `moefold predict` and the published-runs file
 * take them: moe_megatron_split_line, moe_megatron_parse_args onto a preset, then
 * moe_layout_resolve on a cluster and a closed-form prediction (the event-simulated one too when
 * its workspace is at most FUZZ_SIM_MAX_BYTES).
 *
 * Input: an optional first line "# <preset> <cluster> <gpus>" (default: deepseek-v3 on 1024 GPUs
 * of dgx-h100), then the flags as pasted from a launch script.
 *
 * Properties: every rejection has a message (split and parse errors name the flag in diag.source
 * or the message); an accepted layout written back with moe_megatron_format_args, split and parsed
 * onto freshly initialised structs and resolved again gives the same model (name and bias flag
 * aside, as megatron_args.h states), layout and options.
 *
 * Seeds: the "args" of tests/data/published_runs.json with their model, cluster and GPU count
 * (tests/fuzz/gen_seeds.c), plus tests/fuzz/seeds/megatron/. Dictionary: tests/fuzz/megatron.dict.
 */
#include "model/cost.h"
#include "model/megatron_args.h"
#include "tests/fuzz/fuzz_util.h"
#include "topologies/cluster_file.h"

#define MAX_ARGV           1024
#define ARGS_BYTES         32768       /* formatted flags; a full DeepSeek-V3 line is ~2 KB */
#define FUZZ_SIM_MAX_BYTES (64u << 20) /* bound on the simulation workspace tried here */

struct problem {
    struct moe_model_cfg cfg;
    struct moe_cluster cl;
    struct moe_layout lay;
    struct moe_options opt;
    struct moe_megatron_result res;
    int num_gpus;
};

/* Split the header line off text; fills preset, cluster and GPU count. Returns the flag text. */
static char *header(char *text, char *preset, char *cluster, int *gpus)
{
    strcpy(preset, "deepseek-v3");
    strcpy(cluster, "dgx-h100");
    *gpus = 1024;
    if (text[0] != '#') {
        return text;
    }
    char *nl = strchr(text, '\n');
    if (nl != NULL) {
        *nl = '\0';
    }
    char p[64];
    char c[64];
    int g = 0;
    if (sscanf(text, "# %63s %63s %d", p, c, &g) == 3) {
        strcpy(preset, p);
        strcpy(cluster, c);
        *gpus = g;
    }
    return nl != NULL ? nl + 1 : text + strlen(text);
}

/* Parse flags onto the problem's starting structs and resolve, as moe_cli_resolve does. */
static enum moe_status parse_and_resolve(struct problem *p, char *flags, struct moe_diag *diag)
{
    const char **argv = malloc(MAX_ARGV * sizeof(*argv));
    if (argv == NULL) {
        fuzz_fail("out of memory");
    }
    int argc = 0;
    enum moe_status st = moe_megatron_split_line(flags, argv, MAX_ARGV, &argc, diag);
    if (fuzz_check_status("moe_megatron_split_line", st, diag, NULL)) {
        p->lay.seq_length = 0;
        st = moe_megatron_parse_args(argc, argv, &p->cfg, &p->lay, &p->opt, &p->res, diag);
        (void)fuzz_check_status("moe_megatron_parse_args", st, diag, NULL);
    }
    free(argv);
    if (st != MOE_OK) {
        return st;
    }
    st = moe_cfg_validate(&p->cfg, diag);
    if (st == MOE_OK) {
        st = moe_cluster_check_gpus(&p->cl, p->num_gpus, diag);
    }
    if (st == MOE_OK) {
        p->lay.num_gpus = p->num_gpus;
        if (p->lay.seq_length <= 0) {
            p->lay.seq_length = p->cfg.seq_length;
        }
        int per_replica = p->lay.tp * p->lay.cp * p->lay.pp;
        if (p->lay.gbs <= 0 && per_replica > 0 && p->num_gpus % per_replica == 0) {
            p->lay.gbs = p->lay.mbs * (p->num_gpus / per_replica);
        }
        st = moe_layout_resolve(&p->cfg, &p->cl, &p->opt, &p->lay, diag);
    }
    (void)fuzz_check_status("validate/resolve", st, diag, NULL);
    return st;
}

static void predict(const struct problem *p, enum moe_schedule_mode mode)
{
    size_t need = moe_cost_workspace_bytes(&p->lay, mode);
    if (need > FUZZ_SIM_MAX_BYTES) {
        return;
    }
    void *ws = malloc(need > 0 ? need : 1);
    if (ws == NULL) {
        fuzz_fail("out of memory");
    }
    struct moe_prediction pred;
    struct moe_diag diag = {0};
    enum moe_status st =
        moe_cost_predict(&p->cfg, &p->cl, &p->lay, &p->opt, NULL, mode, ws, need, &pred, &diag);
    free(ws);
    (void)fuzz_check_status("moe_cost_predict", st, &diag, NULL);
}

/* Format the accepted problem back to flags, parse that onto fresh structs: must be the same. */
static void round_trip(const struct problem *p)
{
    char *text = malloc(ARGS_BYTES);
    struct problem *q = malloc(sizeof(*q));
    if (text == NULL || q == NULL) {
        fuzz_fail("out of memory");
    }
    struct moe_diag diag = {0};
    size_t needed = 0;
    enum moe_status st = moe_megatron_format_args(
        &p->cfg, &p->lay, &p->opt, MOE_MEGATRON_FMT_MOEFOLD, text, ARGS_BYTES, &needed, &diag);
    if (st != MOE_OK) {
        fuzz_fail("moe_megatron_format_args failed (%zu bytes needed): %s", needed, diag.message);
    }
    memset(q, 0, sizeof(*q));
    moe_cfg_init(&q->cfg);
    moe_layout_init(&q->lay);
    moe_options_init(&q->opt);
    q->cl = p->cl;
    q->num_gpus = p->num_gpus;
    st = parse_and_resolve(q, text, &diag);
    if (st != MOE_OK) {
        fuzz_fail("formatted flags do not parse back: %s (%s)", diag.message, diag.source);
    }
    memcpy(q->cfg.name, p->cfg.name, sizeof(q->cfg.name));
    q->cfg.has_linear_bias = p->cfg.has_linear_bias;
    /* Like the bias, attention sinks (Megatron's --softmax-type learnable) are not among the
     * flags moefold reads or writes: they come with the model (preset or config file). */
    q->cfg.has_attention_sinks = p->cfg.has_attention_sinks;
    if (memcmp(&p->cfg, &q->cfg, sizeof(q->cfg)) != 0) {
        fuzz_fail("model changed in a Megatron flags round trip");
    }
    if (memcmp(&p->lay, &q->lay, sizeof(q->lay)) != 0) {
        fuzz_fail("layout changed in a Megatron flags round trip");
    }
    if (memcmp(&p->opt, &q->opt, sizeof(q->opt)) != 0) {
        fuzz_fail("options changed in a Megatron flags round trip");
    }
    free(q);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    struct problem *p = malloc(sizeof(*p));
    if (text == NULL || p == NULL) {
        fuzz_fail("out of memory");
    }
    memset(p, 0, sizeof(*p));
    char preset[64];
    char cluster[64];
    char *flags = header(text, preset, cluster, &p->num_gpus);
    struct moe_diag diag = {0};
    if (strchr(cluster, '/') == NULL && strstr(cluster, ".json") == NULL &&
        moe_cfg_preset(preset, &p->cfg, &diag) == MOE_OK &&
        moe_cluster_load(cluster, &p->cl, &diag) == MOE_OK) {
        moe_layout_init(&p->lay);
        moe_options_init(&p->opt);
        if (parse_and_resolve(p, flags, &diag) == MOE_OK) {
            predict(p, MOE_SCHED_CLOSED_FORM);
            predict(p, MOE_SCHED_SIMULATE);
            round_trip(p);
        }
    }
    free(p);
    free(text);
    return 0;
}
