/*
 * Tests for model/megatron_args.c: a full DeepSeek-V3 launch line against the preset, both value
 * forms, --moe-layer-freq list expressions (Megatron's docstring examples), ignored flags and
 * their reasons, unknown flags with the suggested spelling, bad values, the cross-flag rules
 * Megatron applies after parsing, command-line splitting, and format -> split -> parse round trips
 * over a few hundred generated model/layout/option combinations.
 */
/* cmocka needs these four headers first, in this order. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */
#include "model/config.h"
#include "model/layout.h"
#include "model/megatron_args.h"
#include "tests/test_util.h"

#include <stdio.h>
#include <string.h>

#define MAX_WORDS 512

struct parsed {
    struct moe_model_cfg cfg;
    struct moe_layout lay;
    struct moe_options opt;
    struct moe_megatron_result res;
    struct moe_diag diag;
    char line[16384];
    const char *argv[MAX_WORDS];
    int argc;
};

static void fresh(struct parsed *p)
{
    memset(p, 0, sizeof(*p));
    moe_cfg_init(&p->cfg);
    moe_layout_init(&p->lay);
    moe_options_init(&p->opt);
}

/* Split text into p->argv and parse it onto p's structs (as they are). */
static enum moe_status parse_line(struct parsed *p, const char *text)
{
    (void)snprintf(p->line, sizeof(p->line), "%s", text);
    memset(&p->diag, 0, sizeof(p->diag));
    assert_int_equal(moe_megatron_split_line(p->line, p->argv, MAX_WORDS, &p->argc, &p->diag),
                     MOE_OK);
    return moe_megatron_parse_args(p->argc, p->argv, &p->cfg, &p->lay, &p->opt, &p->res, &p->diag);
}

static void expect_ok(struct parsed *p, const char *text)
{
    if (parse_line(p, text) != MOE_OK) {
        fail_msg("\"%s\": %s (source %s)", text, p->diag.message, p->diag.source);
    }
}

static void expect_error(const char *text, enum moe_status st, const char *substring)
{
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    enum moe_status got = parse_line(p, text);
    if (got != st || strstr(p->diag.message, substring) == NULL) {
        fail_msg("\"%s\": got %s \"%s\", want %s containing \"%s\"", text, moe_status_str(got),
                 p->diag.message, moe_status_str(st), substring);
    }
    test_free(p);
}

static const char *ignored_reason(const struct moe_megatron_result *r, const char *flag)
{
    for (int i = 0; i < r->num_ignored; i++) {
        const struct moe_megatron_ignored *e = &r->ignored[i];
        if ((size_t)e->flag_len == strlen(flag) && strncmp(e->flag, flag, strlen(flag)) == 0) {
            return e->reason;
        }
    }
    return NULL;
}

/* DeepSeek-V3 as Megatron-LM's recipe launches it (plus flags moefold ignores). */
static const char *const deepseek_line =
    "--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 "
    "--kv-channels 128 --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 "
    "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --num-experts 256 "
    "--moe-ffn-hidden-size 2048 --moe-router-topk 8 --moe-layer-freq '([0]*3+[1]*58)' "
    "--moe-shared-expert-intermediate-size 2048 --moe-router-score-function sigmoid "
    "--moe-router-enable-expert-bias --moe-router-num-groups 8 --moe-router-group-topk 4 "
    "--mtp-num-layers 1 --swiglu --untie-embeddings-and-output-weights --vocab-size 129280 "
    "--make-vocab-size-divisible-by 128 --seq-length 4096 --max-position-embeddings 4096 "
    "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 16 "
    "--pipeline-model-parallel-layout 'Et|(tt|)*30mL' --expert-model-parallel-size 64 "
    "--micro-batch-size 1 --global-batch-size 8192 --use-distributed-optimizer "
    "--overlap-grad-reduce --overlap-param-gather --moe-token-dispatcher-type flex "
    "--moe-flex-dispatcher-backend deepep --moe-grouped-gemm --recompute-granularity selective "
    "--recompute-modules mla_up_proj moe_act layernorm --fp8-format e4m3 --fp8-recipe blockwise "
    "--lr 1e-4 --min-lr 1e-5 --data-path 0.5 /data/a 0.5 /data/b --bf16 "
    "--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4 --no-rope-fusion "
    "--log-interval 1 --tensorboard-dir /tb";

static void test_deepseek_v3_line(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    expect_ok(p, deepseek_line);

    struct moe_model_cfg want;
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_cfg_preset("deepseek-v3", &want, &d), MOE_OK);
    (void)snprintf(p->cfg.name, sizeof(p->cfg.name), "%s", want.name);
    p->cfg.has_linear_bias = want.has_linear_bias;
    assert_int_equal(p->cfg.num_query_groups, 128); /* no GQA: one group per head */
    assert_memory_equal(p->cfg.layer_flags, want.layer_flags, sizeof(want.layer_flags));
    assert_memory_equal(&p->cfg, &want, sizeof(want));

    assert_int_equal(p->lay.pp, 16);
    assert_int_equal(p->lay.vpp, 2); /* 32 chunks / pp 16 */
    assert_true(p->lay.has_custom_pp_layout);
    assert_int_equal(p->lay.chunks[31].num_mtp, 1);
    assert_int_equal(p->lay.ep, 64);
    assert_int_equal(p->lay.etp, 1); /* defaults to tp */
    assert_int_equal(p->lay.seq_length, 4096);
    assert_int_equal(p->opt.recipe, MOE_RECIPE_FP8_BLOCKWISE);
    assert_int_equal(p->opt.dispatcher, MOE_DISPATCH_DEEPEP);
    assert_int_equal(p->opt.recompute, MOE_RECOMPUTE_SELECTIVE);
    assert_int_equal(p->opt.recompute_modules,
                     MOE_RC_MLA_UP_PROJ | MOE_RC_MOE_ACT | MOE_RC_LAYERNORM);
    assert_true(p->opt.use_distributed_optimizer && p->opt.overlap_grad_reduce &&
                p->opt.overlap_param_gather && p->opt.moe_grouped_gemm);
    assert_true(p->opt.seq_aux_loss_coeff == 1e-4); /* priced: its counts all-reduce */
    assert_true(p->opt.aux_loss_coeff == 0.0 && p->opt.global_aux_loss_coeff == 0.0);
    assert_true(moe_megatron_is_set(&p->res, MOE_MF_LOAD_BALANCING));

    /* 8 ignored flags, each with its reason and position */
    assert_int_equal(p->res.num_ignored, 8);
    assert_string_equal(ignored_reason(&p->res, "--lr"), "does not affect performance");
    assert_string_equal(ignored_reason(&p->res, "--data-path"), "does not affect performance");
    assert_non_null(ignored_reason(&p->res, "--no-rope-fusion"));
    assert_non_null(ignored_reason(&p->res, "--tensorboard-dir"));
    assert_non_null(ignored_reason(&p->res, "--max-position-embeddings"));
    assert_string_equal(p->argv[p->res.ignored[0].argv_idx], "--max-position-embeddings");

    assert_true(moe_megatron_is_set(&p->res, MOE_MF_PP));
    assert_true(moe_megatron_is_set(&p->res, MOE_MF_PP_LAYOUT));
    assert_true(moe_megatron_is_set(&p->res, MOE_MF_VPP));
    assert_true(moe_megatron_is_set(&p->res, MOE_MF_EP));
    assert_true(moe_megatron_is_set(&p->res, MOE_MF_RECIPE));
    assert_false(moe_megatron_is_set(&p->res, MOE_MF_CP));
    assert_false(moe_megatron_is_set(&p->res, MOE_MF_ETP));
    assert_false(moe_megatron_is_set(&p->res, MOE_MF_SEQUENCE_PARALLEL));

    /* 1024 GPUs: pp 16 x dp 64, ep 64; 8192 / 64 = 128 micro-batches, a multiple of pp. */
    p->lay.num_gpus = 1024;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_layout_resolve(&p->cfg, NULL, &p->opt, &p->lay, &d), MOE_OK);
    assert_int_equal(p->lay.num_microbatches, 128);
    test_free(p);
}

static void test_equals_form_and_lists(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    expect_ok(p, "--num-layers=8 --hidden-size=1024 --num-attention-heads=8 --seq-length=2048 "
                 "--recompute-granularity=selective --recompute-modules=core_attn,mlp "
                 "--offload-modules core_attn attn_proj --fine-grained-activation-offloading "
                 "--moe-expert-capacity-factor=-1 --moe-imbalance=auto");
    assert_int_equal(p->cfg.num_layers, 8);
    assert_int_equal(p->cfg.kv_channels, 128);      /* hidden / heads */
    assert_int_equal(p->cfg.ffn_hidden_size, 4096); /* 4h without SwiGLU */
    assert_int_equal(p->cfg.num_query_groups, 8);
    assert_int_equal(p->opt.recompute_modules, MOE_RC_CORE_ATTN | MOE_RC_MLP);
    assert_int_equal(p->opt.offload_modules, MOE_OFF_CORE_ATTN | MOE_OFF_ATTN_PROJ);
    assert_true(p->opt.fine_grained_offload);
    assert_true(p->opt.capacity_factor == 0.0); /* negative = dropless, as Megatron */
    assert_true(p->opt.moe_imbalance == 0.0);   /* auto */
    test_free(p);
}

/* --moe-router-load-balancing-type and --moe-aux-loss-coeff: Megatron's pairing by position, its
 * defaults (aux_loss; coefficient 0), and each misuse named. */
static void test_load_balancing_losses(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    expect_ok(p, "--num-experts 8 --moe-aux-loss-coeff 1e-2");
    assert_true(p->opt.aux_loss_coeff == 1e-2); /* the type defaults to aux_loss */
    assert_true(p->opt.seq_aux_loss_coeff == 0.0 && p->opt.global_aux_loss_coeff == 0.0);
    assert_int_equal(p->res.num_ignored, 0);

    fresh(p);
    expect_ok(p, "--num-experts 8 --moe-router-load-balancing-type global_aux_loss "
                 "seq_aux_loss --moe-aux-loss-coeff 1e-3 2e-4");
    assert_true(p->opt.global_aux_loss_coeff == 1e-3 && p->opt.seq_aux_loss_coeff == 2e-4);
    assert_true(p->opt.aux_loss_coeff == 0.0);

    /* the last occurrence wins, and given either flag the pair replaces what was there */
    fresh(p);
    p->opt.global_aux_loss_coeff = 0.5;
    expect_ok(p, "--num-experts 8 --moe-aux-loss-coeff 1 --moe-aux-loss-coeff=3e-3");
    assert_true(p->opt.aux_loss_coeff == 3e-3 && p->opt.global_aux_loss_coeff == 0.0);

    /* a type alone keeps Megatron's coefficient 0: no loss, nothing priced */
    fresh(p);
    expect_ok(p, "--num-experts 8 --moe-router-load-balancing-type seq_aux_loss");
    assert_true(p->opt.seq_aux_loss_coeff == 0.0);
    assert_int_equal(p->res.num_ignored, 0);

    /* sinkhorn's and quantile balancing's own cost is not modelled: a note, nothing priced */
    fresh(p);
    expect_ok(p, "--num-experts 8 --moe-router-load-balancing-type sinkhorn");
    assert_non_null(
        strstr(ignored_reason(&p->res, "--moe-router-load-balancing-type"), "not modelled"));
    fresh(p);
    expect_ok(p, "--num-experts 8 --moe-router-load-balancing-type none --moe-aux-loss-coeff 0");
    assert_int_equal(p->res.num_ignored, 0);
    test_free(p);

    expect_error("--num-experts 8 --moe-aux-loss-coeff 1e-2 1e-3", MOE_ERR_INVALID,
                 "has 2 value(s) but --moe-router-load-balancing-type 1");
    expect_error("--num-experts 8 --moe-router-load-balancing-type aux_loss seq_aux_loss",
                 MOE_ERR_INVALID, "has 1 value(s) but --moe-router-load-balancing-type 2");
    expect_error("--num-experts 8 --moe-router-load-balancing-type aux_loss aux_loss "
                 "--moe-aux-loss-coeff 1 1",
                 MOE_ERR_INVALID, "aux_loss is listed twice");
    expect_error("--num-experts 8 --moe-router-load-balancing-type sinkhorn --moe-aux-loss-coeff "
                 "0.1",
                 MOE_ERR_INVALID, "sinkhorn takes no loss coefficient");
    expect_error("--num-experts 8 --moe-aux-loss-coeff -1e-2", MOE_ERR_INVALID,
                 "not a loss coefficient in [0, 1000]");
    expect_error("--num-experts 8 --moe-aux-loss-coeff nan", MOE_ERR_INVALID,
                 "--moe-aux-loss-coeff");
    expect_error("--num-experts 8 --moe-aux-loss-coeff --num-layers 4", MOE_ERR_INVALID,
                 "--moe-aux-loss-coeff needs a value");
    expect_error("--num-experts 8 --moe-router-load-balancing-type switch", MOE_ERR_INVALID,
                 "'switch' is not one of: aux_loss, seq_aux_loss");
    expect_error("--moe-aux-loss-coeff 1 2 3 4 5 6 7", MOE_ERR_INVALID, "7 values (at most 6)");
}

struct freq_case {
    int layers;
    const char *freq;
    const char *bits; /* expected MoE pattern, '1'/'0' per layer */
};

static void test_moe_layer_freq(void **state)
{
    (void)state;
    static const struct freq_case cases[] = {
        {6, "2", "101010"},
        {4, "[1,0,1,0]", "1010"},
        {12, "([1]*3+[0]*1)*3", "111011101110"}, /* Megatron's docstring example */
        {10, "([1]*3+[0]*2)*2", "1110011100"},   /* its second example */
        {4, "3*[1]+[0]", "1110"},
        {24, "'([0]+[1]*23)'", "011111111111111111111111"}, /* quotes kept from a script */
        {5, "([0]*2+[1]*3)", "00111"},
        {3, "1", "111"},
    };
    for (size_t i = 0; i < MOE_ARRAY_LEN(cases); i++) {
        struct parsed *p = test_malloc(sizeof(*p));
        fresh(p);
        char line[256];
        (void)snprintf(line, sizeof(line),
                       "--num-layers %d --hidden-size 64 --num-attention-heads 4 --num-experts 8 "
                       "--moe-layer-freq %s",
                       cases[i].layers, cases[i].freq);
        p->argc = 0;
        const char *argv[16];
        int argc = 0;
        assert_int_equal(moe_megatron_split_line(line, argv, 16, &argc, NULL), MOE_OK);
        argv[argc - 1] = cases[i].freq; /* the pattern as one word, quotes included */
        memset(&p->diag, 0, sizeof(p->diag));
        if (moe_megatron_parse_args(argc, argv, &p->cfg, &p->lay, &p->opt, &p->res, &p->diag) !=
            MOE_OK) {
            fail_msg("%s: %s", cases[i].freq, p->diag.message);
        }
        for (int l = 0; l < cases[i].layers; l++) {
            int want = cases[i].bits[l] == '1';
            if ((p->cfg.layer_flags[l] & MOE_LAYER_MOE) != (want ? MOE_LAYER_MOE : 0)) {
                fail_msg("%s: layer %d is %d, want %d", cases[i].freq, l,
                         p->cfg.layer_flags[l] & MOE_LAYER_MOE, want);
            }
        }
        assert_int_equal(p->cfg.moe_router_topk, 2);          /* Megatron's default */
        assert_int_equal(p->cfg.moe_ffn_hidden_size, 4 * 64); /* = ffn_hidden_size */
        test_free(p);
    }
    expect_error("--num-layers 61 --num-experts 8 --moe-layer-freq ([0]*3+[1]*57)", MOE_ERR_INVALID,
                 "the pattern has 60 entries but the model has 61 layers");
    expect_error("--num-layers 2 --num-experts 8 --moe-layer-freq [2,1]", MOE_ERR_PARSE,
                 "entries must be 0 or 1");
    expect_error("--num-layers 2 --num-experts 8 --moe-layer-freq ([0]*2", MOE_ERR_PARSE,
                 "at character 7: expected ')'");
    expect_error("--num-layers 2 --num-experts 8 --moe-layer-freq [0]*", MOE_ERR_PARSE,
                 "expected a count after '*'");
    expect_error("--num-layers 2 --num-experts 8 --moe-layer-freq abc", MOE_ERR_INVALID,
                 "--moe-layer-freq: 'abc' is not an integer");
    expect_error("--num-layers 2 --num-experts 8 --moe-layer-freq 0", MOE_ERR_INVALID,
                 "--moe-layer-freq: 0 is out of range");
    expect_error("--num-layers 2 --num-experts 8 --moe-layer-freq [1]*600", MOE_ERR_PARSE,
                 "longer than the 512 layers");
}

static void test_ignored_flags(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    expect_ok(p, "--fp16 --wandb-project x --log-throughput --tensorboard-log-interval 1 "
                 "--no-bias-swiglu-fusion --eval-iters 10 --inference-max-seq-length 4 "
                 "--main-params-dtype fp16 --use-torch-fsdp2 --fp8-recipe delayed "
                 "--moe-flex-dispatcher-backend hybridep --recompute-modules moe");
    assert_int_equal(p->res.num_ignored, 12);
    assert_non_null(strstr(ignored_reason(&p->res, "--fp16"), "priced as bf16"));
    assert_string_equal(ignored_reason(&p->res, "--wandb-project"), "does not affect performance");
    assert_non_null(ignored_reason(&p->res, "--log-throughput"));
    assert_non_null(ignored_reason(&p->res, "--no-bias-swiglu-fusion"));
    assert_non_null(strstr(ignored_reason(&p->res, "--main-params-dtype"), "not modelled"));
    assert_non_null(strstr(ignored_reason(&p->res, "--use-torch-fsdp2"), "not modelled"));
    assert_string_equal(ignored_reason(&p->res, "--fp8-recipe"), "no effect without --fp8-format");
    assert_string_equal(ignored_reason(&p->res, "--moe-flex-dispatcher-backend"),
                        "no effect without --moe-token-dispatcher-type flex");
    assert_string_equal(ignored_reason(&p->res, "--recompute-modules"),
                        "no effect without --recompute-granularity selective");
    assert_int_equal(p->opt.recipe, MOE_RECIPE_BF16);
    assert_int_equal(p->opt.dispatcher, MOE_DISPATCH_ALLTOALL);
    assert_int_equal(p->opt.recompute_modules, 0);
    /* "--tensorboard-log-interval 1": the value is consumed with the flag */
    assert_int_equal(p->res.ignored[3].argv_idx, 4);

    /* more than MOE_MEGATRON_MAX_IGNORED are counted, not listed */
    char line[4096] = "";
    for (int i = 0; i < MOE_MEGATRON_MAX_IGNORED + 5; i++) {
        strcat(line, "--bf16 ");
    }
    fresh(p);
    expect_ok(p, line);
    assert_int_equal(p->res.num_ignored, MOE_MEGATRON_MAX_IGNORED);
    assert_int_equal(p->res.num_ignored_dropped, 5);
    test_free(p);
}

static void test_unknown_and_bad_values(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    assert_int_equal(parse_line(p, "--num-layers 4 --tensor-model-paralel-size 2"),
                     MOE_ERR_INVALID);
    assert_string_equal(p->diag.message, "unknown flag --tensor-model-paralel-size; did you mean "
                                         "--tensor-model-parallel-size?");
    assert_string_equal(p->diag.source, "--tensor-model-paralel-size");
    assert_int_equal(p->diag.column, 3); /* third word */
    test_free(p);

    expect_error("--moe-ffn-hiden-size 8", MOE_ERR_INVALID, "did you mean --moe-ffn-hidden-size?");
    expect_error("--zzqqxxyy-wwvvuu-ttsskk", MOE_ERR_INVALID,
                 "unknown flag --zzqqxxyy-wwvvuu-ttsskk (not a Megatron-LM flag");
    expect_error("--num-layers abc", MOE_ERR_INVALID, "--num-layers: 'abc' is not an integer");
    expect_error("--num-layers 0", MOE_ERR_INVALID, "--num-layers: 0 is out of range [1, 512]");
    expect_error("--num-layers 4x", MOE_ERR_INVALID, "'4x' is not an integer");
    expect_error("--num-layers", MOE_ERR_INVALID, "--num-layers needs a value");
    expect_error("--num-layers --swiglu", MOE_ERR_INVALID, "--num-layers needs a value");
    expect_error("--swiglu=yes", MOE_ERR_INVALID, "--swiglu takes no value (got 'yes')");
    expect_error("--swiglu yes", MOE_ERR_INVALID, "unexpected 'yes' after it");
    expect_error("pretrain_gpt.py --num-layers 4", MOE_ERR_INVALID,
                 "unexpected argument 'pretrain_gpt.py'");
    expect_error("--moe-token-dispatcher-type flexy", MOE_ERR_INVALID,
                 "'flexy' is not one of: alltoall, allgather, flex");
    expect_error("--fp8-format e5m2", MOE_ERR_INVALID, "'e5m2' is not one of: e4m3, hybrid");
    expect_error("--fp8-recipe custom", MOE_ERR_UNSUPPORTED, "custom quantizer cannot be priced");
    expect_error("--main-grads-dtype fp8", MOE_ERR_INVALID, "'fp8' is not one of: fp32, bf16");
    expect_error("--moe-imbalance 0.5", MOE_ERR_INVALID, "0.5 is not a max/mean load factor");
    expect_error("--moe-imbalance lots", MOE_ERR_INVALID, "'lots' is not a number");
    expect_error("--optimizer-offload-fraction 2", MOE_ERR_INVALID, "2 is not in [0, 1]");
    expect_error("--recompute-modules core_attn bogus", MOE_ERR_INVALID,
                 "unknown recompute module 'bogus'");
    expect_error("--cuda-graph-modules attn moe_routr", MOE_ERR_INVALID,
                 "unknown CUDA graph module 'moe_routr'");
    expect_error("--account-for-embedding-in-pipeline-split", MOE_ERR_UNSUPPORTED,
                 "--pipeline-model-parallel-layout instead");
    expect_error("--moe-router-score-function sqrtsoftplus", MOE_ERR_INVALID,
                 "not one of: softmax, sigmoid");
}

static void test_cross_flag_rules(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    const char *model = "--num-layers 16 --hidden-size 4096 --num-attention-heads 32 --swiglu ";
    char line[1024];

    fresh(p);
    (void)snprintf(line, sizeof(line), "%s--group-query-attention --tensor-model-parallel-size 4",
                   model);
    expect_ok(p, line);
    assert_int_equal(p->cfg.num_query_groups, 1);    /* Megatron's --num-query-groups default */
    assert_int_equal(p->cfg.ffn_hidden_size, 10880); /* int(4*4096*2/3/64)*64 */
    assert_int_equal(p->lay.etp, 4);                 /* expert TP follows TP */

    fresh(p);
    (void)snprintf(line, sizeof(line),
                   "%s--num-query-groups 8 --tensor-model-parallel-size 4 "
                   "--expert-tensor-parallel-size 1 --pipeline-model-parallel-size 4 "
                   "--num-layers-per-virtual-pipeline-stage 2",
                   model);
    expect_ok(p, line);
    assert_int_equal(p->cfg.num_query_groups, 8);
    assert_int_equal(p->lay.etp, 1);
    assert_int_equal(p->lay.vpp, 2); /* 16 layers / pp 4 / 2 per virtual stage */

    /* --quick-geglu is a gated MLP of its own (arguments.py): the ffn default stays 4h, and the
     * writer never pairs it with --swiglu, which Megatron refuses. */
    fresh(p);
    expect_ok(p, "--num-layers 16 --hidden-size 4096 --num-attention-heads 32 --quick-geglu");
    assert_true(p->cfg.is_quick_geglu);
    assert_true(p->cfg.is_swiglu);
    assert_int_equal(p->cfg.ffn_hidden_size, 16384);
    char written[4096];
    assert_int_equal(moe_megatron_format_args(&p->cfg, &p->lay, &p->opt, 0, written,
                                              sizeof(written), NULL, NULL),
                     MOE_OK);
    assert_non_null(strstr(written, "--quick-geglu"));
    assert_null(strstr(written, "--swiglu"));

    fresh(p);
    expect_ok(p, "--fp8-format hybrid");
    assert_int_equal(p->opt.recipe, MOE_RECIPE_FP8_DELAYED); /* --fp8-recipe default */
    fresh(p);
    expect_ok(p, "--fp4-format e2m1 --fp4-param-gather");
    assert_int_equal(p->opt.recipe, MOE_RECIPE_NVFP4);
    assert_true(p->opt.fp8_param_gather);
    fresh(p);
    expect_ok(p, "--fp8-recipe mxfp8 --fp8-format e4m3 --fp8-param-gather");
    assert_int_equal(p->opt.recipe, MOE_RECIPE_MXFP8);

    fresh(p);
    expect_ok(p, "--moe-token-dispatcher-type flex");
    assert_int_equal(p->opt.dispatcher, MOE_DISPATCH_DEEPEP); /* backend default */
    fresh(p);
    expect_ok(p, "--moe-flex-dispatcher-backend hybridep --moe-token-dispatcher-type flex");
    assert_int_equal(p->opt.dispatcher, MOE_DISPATCH_HYBRIDEP);
    expect_ok(p, "--moe-flex-dispatcher-backend deepep"); /* already flex: the backend applies */
    assert_int_equal(p->opt.dispatcher, MOE_DISPATCH_DEEPEP);
    fresh(p);
    expect_ok(p, "--moe-enable-deepep");
    assert_int_equal(p->opt.dispatcher, MOE_DISPATCH_DEEPEP);

    fresh(p);
    expect_ok(p, "--recompute-granularity selective");
    assert_int_equal(p->opt.recompute_modules, MOE_RC_CORE_ATTN); /* Megatron's default */
    fresh(p);
    expect_ok(p, "--recompute-activations --moe-layer-recompute");
    assert_int_equal(p->opt.recompute, MOE_RECOMPUTE_SELECTIVE);
    assert_int_equal(p->opt.recompute_modules, MOE_RC_CORE_ATTN | MOE_RC_MOE);
    expect_ok(p, "--recompute-granularity full --recompute-method block --recompute-num-layers 2");
    assert_int_equal(p->opt.recompute, MOE_RECOMPUTE_FULL);
    assert_int_equal(p->opt.recompute_method, MOE_RECOMPUTE_BLOCK);
    assert_int_equal(p->opt.recompute_modules, 0); /* full takes no module list */

    fresh(p);
    expect_ok(p, "--enable-cuda-graph");
    assert_int_equal(p->opt.cuda_graph_impl, MOE_CG_LOCAL);
    fresh(p);
    expect_ok(p, "--external-cuda-graph --cuda-graph-scope attn");
    assert_int_equal(p->opt.cuda_graph_impl, MOE_CG_TE);
    assert_int_equal(p->opt.cuda_graph_modules, MOE_CGM_ATTN);
    fresh(p);
    expect_ok(p, "--cuda-graph-impl full_iteration");
    assert_int_equal(p->opt.cuda_graph_impl, MOE_CG_LOCAL);
    assert_int_equal(p->opt.cuda_graph_modules, MOE_CGM_FULL_ITERATION);
    expect_ok(p, "--cuda-graph-impl transformer_engine --cuda-graph-modules moe_router "
                 "moe_preprocess");
    assert_int_equal(p->opt.cuda_graph_modules, MOE_CGM_MOE_ROUTER | MOE_CGM_MOE_PREPROCESS);

    fresh(p);
    expect_ok(p, "--multi-latent-attention --num-layers 2 --hidden-size 512 "
                 "--num-attention-heads 8 --window-size (128,0) --window-attn-skip-freq 2 "
                 "--seq-length 1024");
    assert_int_equal(p->cfg.kv_lora_rank, 32); /* Megatron's MLA defaults */
    assert_int_equal(p->cfg.qk_head_dim, 128);
    assert_int_equal(p->cfg.qk_pos_emb_head_dim, 64);
    assert_int_equal(p->cfg.v_head_dim, 128);
    assert_int_equal(p->cfg.window_size, 128);
    assert_int_equal(p->cfg.layer_flags[0], MOE_LAYER_WINDOWED); /* (i+1) % 2 != 0 */
    assert_int_equal(p->cfg.layer_flags[1], 0);
    assert_int_equal(p->cfg.seq_length, 1024);
    assert_int_equal(p->lay.seq_length, 1024);
    test_free(p);

    expect_error("--num-virtual-stages-per-pipeline-rank 2 --num-layers-per-virtual-pipeline-stage "
                 "2 --num-layers 8",
                 MOE_ERR_INVALID, "give only one of");
    expect_error("--num-layers 8 --pipeline-model-parallel-size 2 "
                 "--decoder-first-pipeline-num-layers 3 --num-layers-per-virtual-pipeline-stage 1",
                 MOE_ERR_INVALID, "--num-virtual-stages-per-pipeline-rank (Megatron's rule)");
    expect_error("--num-layers 9 --pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 2",
                 MOE_ERR_INVALID, "9 layers over pp=2 do not split");
    expect_error("--num-layers 2 --pipeline-model-parallel-size 2 "
                 "--decoder-last-pipeline-num-layers 1 --pipeline-model-parallel-layout Et|tL",
                 MOE_ERR_INVALID, "cannot be combined with --decoder-first/last");
    expect_error("--num-layers 3 --pipeline-model-parallel-size 2 "
                 "--pipeline-model-parallel-layout Et|t|tL",
                 MOE_ERR_INVALID, "the layout has 3 chunks, not a multiple of pp=2");
    expect_error("--num-layers 3 --pipeline-model-parallel-size 2 "
                 "--pipeline-model-parallel-layout Et|tq|tL",
                 MOE_ERR_PARSE, "column 5: invalid character 'q'");
    expect_error("--fp8-format e4m3 --fp4-format e2m1", MOE_ERR_INVALID, "cannot be used together");
    expect_error("--fp4-param-gather", MOE_ERR_INVALID, "must be used together with --fp4-format");
    expect_error("--fp4-format e2m1 --fp8-param-gather", MOE_ERR_INVALID, "use --fp4-param-gather");
    expect_error("--moe-enable-deepep --moe-token-dispatcher-type alltoall", MOE_ERR_INVALID,
                 "DeepEP needs --moe-token-dispatcher-type flex");
    expect_error("--enable-cuda-graph --cuda-graph-impl local", MOE_ERR_INVALID,
                 "do not combine --enable-cuda-graph");
    expect_error("--window-attn-skip-freq 2 --num-layers 2", MOE_ERR_INVALID,
                 "needs --window-size");
    expect_error("--hidden-size 100 --num-attention-heads 3", MOE_ERR_INVALID,
                 "hidden size 100 is not divisible by 3 heads; give --kv-channels");
}

/* Flags on top of a preset override it; untouched fields keep the preset's values. */
static void test_overrides_preset(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_cfg_preset("deepseek-v3", &p->cfg, &d), MOE_OK);
    expect_ok(p, "--num-layers 30 --hidden-size 4096");
    assert_int_equal(p->cfg.num_layers, 30);
    assert_int_equal(moe_cfg_num_moe_layers(&p->cfg), 27); /* first 3 stay dense */
    assert_int_equal(p->cfg.layer_flags[30], 0);
    assert_int_equal(p->cfg.kv_channels, 128); /* not hidden/heads before: kept */
    assert_int_equal(p->cfg.num_experts, 256);
    assert_false(moe_megatron_is_set(&p->res, MOE_MF_NUM_EXPERTS));
    assert_true(moe_megatron_is_set(&p->res, MOE_MF_NUM_LAYERS));

    expect_ok(p, "--num-experts 0");
    assert_false(moe_cfg_is_moe(&p->cfg));
    assert_int_equal(moe_cfg_num_moe_layers(&p->cfg), 0);

    struct moe_model_cfg q;
    assert_int_equal(moe_cfg_preset("qwen3-30b-a3b", &q, &d), MOE_OK);
    p->cfg = q;
    expect_ok(p, "--num-attention-heads 16"); /* GQA preset: groups stay */
    assert_int_equal(p->cfg.num_query_groups, q.num_query_groups);
    assert_int_equal(p->cfg.kv_channels, q.kv_channels);
    test_free(p);
}

static void test_split_line(void **state)
{
    (void)state;
    char line[] = "a 'b c' \"d \\\"e\\\" $\" f\\ g \\\n  h\t--x='(t|)*2'";
    const char *argv[8];
    int argc = 0;
    assert_int_equal(moe_megatron_split_line(line, argv, 8, &argc, NULL), MOE_OK);
    assert_int_equal(argc, 6);
    assert_string_equal(argv[0], "a");
    assert_string_equal(argv[1], "b c");
    assert_string_equal(argv[2], "d \"e\" $");
    assert_string_equal(argv[3], "f g");
    assert_string_equal(argv[4], "h");
    assert_string_equal(argv[5], "--x=(t|)*2");
    char bad[] = "a 'b";
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(moe_megatron_split_line(bad, argv, 8, &argc, &d), MOE_ERR_PARSE);
    assert_non_null(strstr(d.message, "unterminated ' quote"));
    char many[] = "a b c";
    assert_int_equal(moe_megatron_split_line(many, argv, 2, &argc, &d), MOE_ERR_INVALID);
    char empty[] = "   \n ";
    assert_int_equal(moe_megatron_split_line(empty, argv, 2, &argc, &d), MOE_OK);
    assert_int_equal(argc, 0);
}

static void test_flag_known(void **state)
{
    (void)state;
    int arity = 7;
    assert_true(moe_megatron_flag_known("--swiglu", &arity));
    assert_int_equal(arity, 0);
    assert_true(moe_megatron_flag_known("--num-layers", &arity));
    assert_int_equal(arity, 1);
    assert_true(moe_megatron_flag_known("--recompute-modules", &arity));
    assert_int_equal(arity, -1);
    assert_true(moe_megatron_flag_known("--wandb-entity", &arity));
    assert_int_equal(arity, -1);
    assert_false(moe_megatron_flag_known("--gpus", NULL));
    assert_false(moe_megatron_flag_known("--tensor-parallel", NULL));
}

/* ---- round trip: generated structs -> format -> split -> parse -> the same structs ---- */

static int pick(struct moe_test_rng *r, int n)
{
    return (int)(moe_test_rng_uniform(r) * n);
}

static bool coin(struct moe_test_rng *r)
{
    return moe_test_rng_uniform(r) < 0.5;
}

static void gen_model(struct moe_test_rng *r, struct moe_model_cfg *c)
{
    static const int heads[] = {8, 16, 32, 64, 128};
    moe_cfg_init(c);
    c->num_layers = 1 + pick(r, 64);
    c->num_attention_heads = heads[pick(r, 5)];
    c->hidden_size = c->num_attention_heads * (64 + 64 * pick(r, 2));
    c->kv_channels = coin(r) ? c->hidden_size / c->num_attention_heads : 64 + 64 * pick(r, 3);
    c->num_query_groups = coin(r) ? c->num_attention_heads : c->num_attention_heads >> pick(r, 4);
    c->ffn_hidden_size = 256 * (1 + pick(r, 64));
    c->is_swiglu = coin(r);
    c->is_quick_geglu = c->is_swiglu && pick(r, 4) == 0;
    c->is_untied_embeddings = coin(r);
    c->has_qk_layernorm = coin(r);
    c->vocab_size = 1000 + pick(r, 200000);
    c->make_vocab_size_divisible_by = 64 << pick(r, 3);
    c->seq_length = 1024 << pick(r, 4);
    if (pick(r, 3) == 0) {
        c->is_mla = true;
        c->q_lora_rank = coin(r) ? 0 : 1536;
        c->kv_lora_rank = 512;
        c->qk_head_dim = 128;
        c->qk_pos_emb_head_dim = 64;
        c->v_head_dim = 128;
    }
    if (pick(r, 4) == 0) { /* sliding window on some layers */
        c->window_size = 128 << pick(r, 3);
        int period = 1 + pick(r, 4);
        bool any = false;
        for (int i = 0; i < c->num_layers; i++) {
            bool on = coin(r) ? (i % period != 0) : (pick(r, 3) != 0);
            c->layer_flags[i] = on ? MOE_LAYER_WINDOWED : 0;
            any = any || on;
        }
        if (!any) {
            c->layer_flags[0] = MOE_LAYER_WINDOWED;
        }
    }
    if (pick(r, 4) != 0) { /* MoE */
        c->num_experts = 8 << pick(r, 6);
        c->moe_ffn_hidden_size = 128 * (1 + pick(r, 16));
        c->moe_router_topk = 1 + pick(r, 8);
        c->moe_shared_expert_intermediate_size = coin(r) ? 0 : c->moe_ffn_hidden_size;
        c->router_score = coin(r) ? MOE_ROUTER_SIGMOID : MOE_ROUTER_SOFTMAX;
        c->has_router_expert_bias = coin(r);
        if (coin(r)) {
            c->moe_router_num_groups = 8;
            c->moe_router_group_topk = 1 + pick(r, 4);
        }
        int kind = pick(r, 3), dense = pick(r, 4), freq = 1 + pick(r, 3);
        for (int i = 0; i < c->num_layers; i++) {
            bool moe = kind == 0 ? i >= dense : (kind == 1 ? i % freq == 0 : pick(r, 2) == 0);
            c->layer_flags[i] = (uint8_t)(c->layer_flags[i] | (moe ? MOE_LAYER_MOE : 0));
        }
        c->layer_flags[c->num_layers - 1] |= MOE_LAYER_MOE; /* at least one MoE layer */
    }
    c->mtp_num_layers = pick(r, 3);
}

static void gen_layout(struct moe_test_rng *r, const struct moe_model_cfg *c, struct moe_layout *l)
{
    moe_layout_init(l);
    l->tp = 1 << pick(r, 4);
    l->cp = 1 << pick(r, 3);
    l->pp = 1 + pick(r, 8);
    l->ep = 1 << pick(r, 5);
    l->etp = 1 << pick(r, 3);
    l->mbs = 1 + pick(r, 4);
    l->gbs = coin(r) ? 0 : 64 * (1 + pick(r, 64));
    l->sequence_parallel = coin(r);
    l->seq_length = c->seq_length;
    int kind = pick(r, 4);
    if (kind == 1) {
        l->vpp = 2 + pick(r, 3);
    } else if (kind == 2 && l->pp > 1) {
        l->first_stage_layers = 1 + pick(r, 4);
        l->last_stage_layers = coin(r) ? 0 : 1 + pick(r, 4);
    }
}

/* A custom layout for the model: pp*vpp chunks, layers spread at random, MTP with the loss. */
static void gen_custom_layout(struct moe_test_rng *r, struct moe_model_cfg *c, struct moe_layout *l)
{
    l->vpp = 1 + pick(r, 3);
    l->first_stage_layers = 0;
    l->last_stage_layers = 0;
    l->num_chunks = l->pp * l->vpp;
    int left = c->num_layers;
    for (int k = 0; k < l->num_chunks; k++) {
        memset(&l->chunks[k], 0, sizeof(l->chunks[k]));
        int n = (k == l->num_chunks - 1) ? left : pick(r, left + 1);
        l->chunks[k].num_layers = (uint16_t)n;
        left -= n;
    }
    l->chunks[0].has_embedding = 1;
    l->chunks[l->num_chunks - 1].has_loss = 1;
    l->chunks[l->num_chunks - 1].num_mtp = (uint8_t)c->mtp_num_layers;
    int next = 0;
    for (int k = 0; k < l->num_chunks; k++) {
        l->chunks[k].first_layer = (uint16_t)next;
        next += l->chunks[k].num_layers;
    }
    l->has_custom_pp_layout = true;
}

static void
gen_options(struct moe_test_rng *r, const struct moe_model_cfg *c, struct moe_options *o)
{
    moe_options_init(o);
    o->recipe = (enum moe_recipe)pick(r, MOE_NUM_RECIPES);
    o->fp8_param_gather = o->recipe != MOE_RECIPE_BF16 && coin(r);
    o->use_distributed_optimizer = coin(r);
    o->overlap_grad_reduce = coin(r);
    o->overlap_param_gather = coin(r);
    o->tp_comm_overlap = coin(r);
    o->overlap_moe_ep_comm = coin(r);
    o->delay_wgrad_compute = coin(r);
    o->moe_grouped_gemm = coin(r);
    o->force_load_balancing = coin(r);
    o->precision_aware_optimizer = coin(r);
    if (o->precision_aware_optimizer) {
        o->main_grads_dtype = coin(r) ? MOE_DTYPE_BF16 : MOE_DTYPE_FP32;
        o->exp_avg_dtype = (enum moe_dtype)pick(r, 4);
        o->exp_avg_sq_dtype = (enum moe_dtype)pick(r, 4);
    }
    o->optimizer_cpu_offload = coin(r);
    if (o->optimizer_cpu_offload) {
        o->optimizer_offload_fraction = 0.05 * (1 + pick(r, 20));
    }
    o->dispatcher = (enum moe_dispatcher)(c->num_experts > 0 ? pick(r, MOE_NUM_DISPATCHERS) : 0);
    o->capacity_factor = coin(r) ? 0.0 : 1.0 + 0.25 * pick(r, 8);
    o->recompute = (enum moe_recompute_granularity)pick(r, 3);
    if (o->recompute == MOE_RECOMPUTE_SELECTIVE) {
        o->recompute_modules = 1u + (unsigned)pick(r, (int)MOE_RC_ALL);
    } else if (o->recompute == MOE_RECOMPUTE_FULL) {
        o->recompute_method = (enum moe_recompute_method)pick(r, 2);
        o->recompute_num_layers = 1 + pick(r, 4);
    }
    o->cpu_offloading_num_layers = coin(r) ? 0 : 1 + pick(r, 4);
    o->fine_grained_offload = coin(r);
    if (o->fine_grained_offload) {
        o->offload_modules = 1u + (unsigned)pick(r, (int)MOE_OFF_ALL);
    }
    o->cuda_graph_impl = (enum moe_cuda_graph_impl)pick(r, 3);
    if (o->cuda_graph_impl == MOE_CG_LOCAL && coin(r)) {
        o->cuda_graph_modules = MOE_CGM_FULL_ITERATION;
    } else if (o->cuda_graph_impl != MOE_CG_NONE) {
        o->cuda_graph_modules = (unsigned)pick(r, 32); /* attn..moe_preprocess */
    }
    o->moe_imbalance = coin(r) ? 1.0 : (coin(r) ? 0.0 : 1.0 + 0.01 * pick(r, 100));
    o->moe_hot_expert_replicas = pick(r, 3);
    if (c->num_experts > 0) { /* the losses are written for MoE models only */
        o->aux_loss_coeff = coin(r) ? 0.0 : 1e-4 * (1 + pick(r, 100));
        o->seq_aux_loss_coeff = coin(r) ? 0.0 : 3e-5 * (1 + pick(r, 7));
        o->global_aux_loss_coeff = coin(r) ? 0.0 : 0.7 * (1 + pick(r, 3));
    }
}

#define SAME(field)                                                                                \
    do {                                                                                           \
        if ((a)->field != (b)->field) {                                                            \
            fail_msg("iteration %d: " #field " %g != %g\n%s", iter, (double)(a)->field,            \
                     (double)(b)->field, text);                                                    \
        }                                                                                          \
    } while (0)

static void compare_cfg(const struct moe_model_cfg *a,
                        const struct moe_model_cfg *b,
                        int iter,
                        const char *text)
{
    SAME(num_layers);
    SAME(hidden_size);
    SAME(ffn_hidden_size);
    SAME(num_attention_heads);
    SAME(num_query_groups);
    SAME(kv_channels);
    SAME(is_swiglu);
    SAME(is_quick_geglu);
    SAME(is_untied_embeddings);
    SAME(has_qk_layernorm);
    SAME(vocab_size);
    SAME(make_vocab_size_divisible_by);
    SAME(seq_length);
    SAME(is_mla);
    SAME(q_lora_rank);
    SAME(kv_lora_rank);
    SAME(qk_head_dim);
    SAME(qk_pos_emb_head_dim);
    SAME(v_head_dim);
    SAME(window_size);
    SAME(num_experts);
    SAME(moe_ffn_hidden_size);
    SAME(moe_router_topk);
    SAME(moe_shared_expert_intermediate_size);
    SAME(router_score);
    SAME(has_router_expert_bias);
    SAME(moe_router_num_groups);
    SAME(moe_router_group_topk);
    SAME(mtp_num_layers);
    for (int i = 0; i < MOE_MAX_LAYERS; i++) {
        SAME(layer_flags[i]);
    }
}

static void
compare_layout(const struct moe_layout *a, const struct moe_layout *b, int iter, const char *text)
{
    SAME(tp);
    SAME(cp);
    SAME(pp);
    SAME(vpp);
    SAME(ep);
    SAME(etp);
    SAME(mbs);
    SAME(gbs);
    SAME(seq_length);
    SAME(sequence_parallel);
    SAME(first_stage_layers);
    SAME(last_stage_layers);
    SAME(has_custom_pp_layout);
    if (a->has_custom_pp_layout) {
        SAME(num_chunks);
        for (int k = 0; k < a->num_chunks; k++) {
            SAME(chunks[k].num_layers);
            SAME(chunks[k].first_layer);
            SAME(chunks[k].num_mtp);
            SAME(chunks[k].has_embedding);
            SAME(chunks[k].has_loss);
        }
    }
}

static void compare_options(const struct moe_options *a,
                            const struct moe_options *b,
                            int iter,
                            const char *text)
{
    SAME(recipe);
    SAME(fp8_param_gather);
    SAME(use_distributed_optimizer);
    SAME(overlap_grad_reduce);
    SAME(overlap_param_gather);
    SAME(tp_comm_overlap);
    SAME(overlap_moe_ep_comm);
    SAME(delay_wgrad_compute);
    SAME(moe_grouped_gemm);
    SAME(force_load_balancing);
    SAME(precision_aware_optimizer);
    SAME(optimizer_cpu_offload);
    SAME(optimizer_offload_fraction);
    SAME(main_grads_dtype);
    SAME(exp_avg_dtype);
    SAME(exp_avg_sq_dtype);
    SAME(dispatcher);
    SAME(capacity_factor);
    SAME(recompute);
    SAME(recompute_method);
    SAME(recompute_num_layers);
    SAME(recompute_modules);
    SAME(cpu_offloading_num_layers);
    SAME(fine_grained_offload);
    SAME(offload_modules);
    SAME(cuda_graph_impl);
    SAME(cuda_graph_modules);
    SAME(moe_imbalance);
    SAME(moe_hot_expert_replicas);
    SAME(aux_loss_coeff);
    SAME(seq_aux_loss_coeff);
    SAME(global_aux_loss_coeff);
}

static void test_format_round_trip(void **state)
{
    (void)state;
    struct moe_test_rng rng;
    moe_test_rng_seed(&rng, 77);
    struct parsed *p = test_malloc(sizeof(*p));
    struct parsed *orig = test_malloc(sizeof(*orig));
    for (int iter = 0; iter < 400; iter++) {
        fresh(orig);
        gen_model(&rng, &orig->cfg);
        gen_layout(&rng, &orig->cfg, &orig->lay);
        if (pick(&rng, 4) == 0) {
            gen_custom_layout(&rng, &orig->cfg, &orig->lay);
        }
        gen_options(&rng, &orig->cfg, &orig->opt);
        unsigned flags = MOE_MEGATRON_FMT_MOEFOLD | (coin(&rng) ? MOE_MEGATRON_FMT_MULTILINE : 0);
        char text[8192];
        size_t needed = 0;
        struct moe_diag d;
        memset(&d, 0, sizeof(d));
        assert_int_equal(moe_megatron_format_args(&orig->cfg, &orig->lay, &orig->opt, flags, text,
                                                  sizeof(text), &needed, &d),
                         MOE_OK);
        assert_int_equal(needed, strlen(text));
        fresh(p);
        if (parse_line(p, text) != MOE_OK) {
            fail_msg("iteration %d: %s\n%s", iter, p->diag.message, text);
        }
        compare_cfg(&orig->cfg, &p->cfg, iter, text);
        compare_layout(&orig->lay, &p->lay, iter, text);
        compare_options(&orig->opt, &p->opt, iter, text);
        assert_int_equal(p->res.num_ignored, 1); /* --bf16 */
    }
    test_free(orig);
    test_free(p);
}

static void test_format_text(void **state)
{
    (void)state;
    struct parsed *p = test_malloc(sizeof(*p));
    fresh(p);
    expect_ok(p, deepseek_line);
    char text[4096];
    size_t needed = 0;
    assert_int_equal(
        moe_megatron_format_args(&p->cfg, &p->lay, &p->opt, 0, text, sizeof(text), &needed, NULL),
        MOE_OK);
    assert_non_null(strstr(text, "--moe-layer-freq '([0]*3+[1]*58)'"));
    assert_non_null(strstr(text, "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'"));
    assert_non_null(strstr(text, "--recompute-modules moe_act layernorm mla_up_proj"));
    assert_non_null(strstr(text, "--fp8-format e4m3 --fp8-recipe blockwise"));
    assert_non_null(strstr(text, "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend "
                                 "deepep"));
    assert_null(strstr(text, "--moe-imbalance")); /* moefold's own flags only on request */
    /* too small a buffer: truncated, NUL-terminated, the size needed reported */
    char small[32];
    struct moe_diag d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(
        moe_megatron_format_args(&p->cfg, &p->lay, &p->opt, 0, small, sizeof(small), &needed, &d),
        MOE_ERR_INVALID);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_int_equal(needed, strlen(text));
    test_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepseek_v3_line),
        cmocka_unit_test(test_equals_form_and_lists),
        cmocka_unit_test(test_load_balancing_losses),
        cmocka_unit_test(test_moe_layer_freq),
        cmocka_unit_test(test_ignored_flags),
        cmocka_unit_test(test_unknown_and_bad_values),
        cmocka_unit_test(test_cross_flag_rules),
        cmocka_unit_test(test_overrides_preset),
        cmocka_unit_test(test_split_line),
        cmocka_unit_test(test_flag_known),
        cmocka_unit_test(test_format_round_trip),
        cmocka_unit_test(test_format_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
