/*
 * Tests for model/config.c: presets against their published parameter totals, hand-computed
 * parameter counts on tiny models (the arithmetic is written out next to each expected value),
 * every validation rule, and the layer-pattern helpers.
 *
 * Published totals and where they come from (tolerance: 1% unless the figure is rounded coarser,
 * then the rounding is stated):
 *   DeepSeek-V3: 671B main model, MTP module 11.5B unique parameters, activated 36.6B including the
 *     0.9B output head and excluding the embedding (DeepSeek-V3 README_WEIGHTS.md); 37B (paper).
 *   Kimi-K2: "1T" total / "32B" activated (Moonshot model card, rounded to 1 and 2 digits; the
 *     exact count from its config.json is 1.026T / 32.9B, embedding and output layer included).
 *   Qwen3-235B-A22B 235B / 22B; Qwen3-30B-A3B 30.5B / 3.3B; Qwen2-57B-A14B 57.4B / 14B (Qwen
 *     model cards). Mixtral-8x7B 46.7B / 12.9B, Mixtral-8x22B 141B / 39B (Mistral AI).
 *   GPT-OSS-120B 116.83B total, 5.13B active excluding the embedding (OpenAI model card).
 *   Llama 3 8B 8.03B, 70B 70.6B (Meta; HF listing).
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

#include <math.h>
#include <stdio.h>
#include <string.h>

#define B 1e9

/* Fail (with the numbers) unless |got - want| <= rel * |want|. */
#define assert_rel(got, want, rel) assert_rel_impl((got), (want), (rel), #got, __FILE__, __LINE__)
static void
assert_rel_impl(double got, double want, double rel, const char *what, const char *file, int line)
{
    if (!(fabs(got - want) <= rel * fabs(want))) {
        print_error("%s:%d: %s = %.6g, want %.6g within %.3g%% (off by %.3g%%)\n", file, line, what,
                    got, want, rel * 100.0, (got - want) / want * 100.0);
        _fail(file, line);
    }
}

static struct moe_model_cfg preset(const char *name)
{
    struct moe_model_cfg cfg;
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_preset(name, &cfg, &diag), MOE_OK);
    return cfg;
}

static struct moe_param_counts counts(const char *name)
{
    struct moe_model_cfg cfg = preset(name);
    struct moe_param_counts pc;
    moe_cfg_param_counts(&cfg, 1, &pc);
    return pc;
}

/* ------------------------------------------------------------------------------------------
 */

static void test_preset_list(void **state)
{
    (void)state;
    static const char *const names[] = {
        "deepseek-v3",    "kimi-k2",      "qwen3-235b-a22b", "qwen3-30b-a3b",
        "qwen2-57b-a14b", "mixtral-8x7b", "mixtral-8x22b",   "gpt-oss-120b",
        "llama3-8b",      "llama3-70b",   "tiny-moe",        "tiny-dsv3",
    };
    assert_int_equal(moe_cfg_num_presets(), MOE_ARRAY_LEN(names));
    for (size_t i = 0; i < MOE_ARRAY_LEN(names); i++) {
        const struct moe_model_cfg *cfg = moe_cfg_preset_at(i);
        assert_non_null(cfg);
        assert_string_equal(cfg->name, names[i]);
        struct moe_diag diag = {0};
        if (moe_cfg_validate(cfg, &diag) != MOE_OK) {
            print_error("preset %s invalid: %s\n", cfg->name, diag.message);
            fail();
        }
        /* No flags past the last layer (round trips and memcmp rely on it). */
        for (int l = cfg->num_layers; l < MOE_MAX_LAYERS; l++) {
            assert_int_equal(cfg->layer_flags[l], 0);
        }
    }
    assert_null(moe_cfg_preset_at(MOE_ARRAY_LEN(names)));
}

static void test_preset_lookup(void **state)
{
    (void)state;
    struct moe_model_cfg cfg;
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_preset("DeepSeek-V3", &cfg, &diag), MOE_OK);
    assert_string_equal(cfg.name, "deepseek-v3");
    assert_int_equal(moe_cfg_preset("deepseek-v4", &cfg, &diag), MOE_ERR_NOT_FOUND);
    assert_non_null(strstr(diag.message, "deepseek-v4"));
    assert_non_null(strstr(diag.message, "llama3-70b")); /* lists the presets */
    assert_int_equal(moe_cfg_preset(NULL, &cfg, NULL), MOE_ERR_NOT_FOUND);
}

/* The hyper-parameters the issue names, read back from the presets. */
static void test_preset_shapes(void **state)
{
    (void)state;
    struct moe_model_cfg c = preset("deepseek-v3");
    assert_int_equal(c.num_layers, 61);
    assert_int_equal(moe_cfg_num_moe_layers(&c), 58);
    assert_int_equal(c.layer_flags[2], 0);
    assert_int_equal(c.layer_flags[3], MOE_LAYER_MOE);
    assert_int_equal(c.mtp_num_layers, 1);
    assert_true(c.is_mla);
    assert_int_equal(c.q_lora_rank, 1536);
    assert_int_equal(c.kv_lora_rank, 512);
    assert_int_equal(c.num_experts, 256);
    assert_int_equal(c.moe_shared_expert_intermediate_size, 2048);
    assert_int_equal(c.router_score, MOE_ROUTER_SIGMOID);
    assert_true(c.has_router_expert_bias);
    assert_int_equal(c.moe_router_num_groups, 8);
    assert_int_equal(c.moe_router_group_topk, 4);
    assert_int_equal(c.vocab_size, 129280);
    assert_int_equal(c.seq_length, 4096);

    c = preset("kimi-k2");
    assert_int_equal(moe_cfg_num_moe_layers(&c), 60);
    assert_int_equal(c.num_attention_heads, 64);
    assert_int_equal(c.num_experts, 384);
    assert_int_equal(c.vocab_size, 163840);

    c = preset("gpt-oss-120b");
    int windowed = 0;
    for (int i = 0; i < c.num_layers; i++) {
        windowed += (c.layer_flags[i] & MOE_LAYER_WINDOWED) != 0;
        assert_int_equal((c.layer_flags[i] & MOE_LAYER_WINDOWED) != 0, i % 2 == 0);
    }
    assert_int_equal(windowed, 18);
    assert_int_equal(c.window_size, 128);
    assert_true(c.has_linear_bias);

    c = preset("qwen3-235b-a22b");
    assert_int_equal(moe_cfg_num_moe_layers(&c), 94);
    assert_true(c.has_qk_layernorm);

    c = preset("llama3-8b");
    assert_false(moe_cfg_is_moe(&c));
    assert_int_equal(c.seq_length, 8192);
}

static void test_published_deepseek_v3(void **state)
{
    (void)state;
    struct moe_param_counts pc = counts("deepseek-v3");
    assert_rel(pc.total_no_mtp, 671 * B, 0.01);
    assert_rel(pc.total - pc.total_no_mtp, 11.5 * B, 0.015); /* MTP module, 11.5B "unique" */
    assert_rel(pc.total, (671 + 11.5) * B, 0.01);
    /* 36.6B activated incl. the output head + the 0.93B input embedding */
    assert_rel(pc.active_no_mtp, 36.6 * B + pc.embedding, 0.01);
    assert_rel(pc.active_no_mtp, 37 * B, 0.02); /* the paper's rounded 37B */
    assert_rel(pc.embedding, 129280.0 * 7168.0, 1e-12);
}

static void test_published_moe_totals(void **state)
{
    (void)state;
    struct moe_param_counts pc = counts("kimi-k2");
    assert_rel(pc.total, 1e12, 0.03);
    assert_rel(pc.active, 32 * B, 0.03); /* "32B", two significant digits */
    pc = counts("qwen3-235b-a22b");
    assert_rel(pc.total, 235 * B, 0.01);
    assert_rel(pc.active, 22 * B, 0.01);
    pc = counts("qwen3-30b-a3b");
    assert_rel(pc.total, 30.5 * B, 0.01);
    assert_rel(pc.active, 3.3 * B, 0.02); /* "3.3B": rounding alone is 1.5% */
    pc = counts("qwen2-57b-a14b");
    assert_rel(pc.total, 57.4 * B, 0.01);
    assert_rel(pc.active, 14 * B, 0.02); /* "14B": rounding alone is 3.6% */
    pc = counts("mixtral-8x7b");
    assert_rel(pc.total, 46.7 * B, 0.01);
    assert_rel(pc.active, 12.9 * B, 0.01);
    pc = counts("mixtral-8x22b");
    assert_rel(pc.total, 141 * B, 0.01);
    assert_rel(pc.active, 39 * B, 0.01);
    pc = counts("gpt-oss-120b");
    assert_rel(pc.total, 116.83 * B, 0.005);
    assert_rel(pc.active - pc.embedding, 5.13 * B, 0.01);
}

static void test_published_dense(void **state)
{
    (void)state;
    struct moe_param_counts pc = counts("llama3-8b");
    assert_rel(pc.total, 8.03 * B, 0.005);
    assert_rel(pc.active, pc.total, 1e-12);
    pc = counts("llama3-70b");
    assert_rel(pc.total, 70.6 * B, 0.005);
}

/* ------------------------------------------------------------------------------------------
 */
/* Hand-computed counts on tiny models. */

/* L=2 dense, h=8, a=2 heads, g=1 group, d=4, f=16, V=10 padded to a multiple of
 * 4 (12), SwiGLU, untied. */
static struct moe_model_cfg tiny_dense(void)
{
    struct moe_model_cfg c;
    moe_cfg_init(&c);
    (void)snprintf(c.name, sizeof(c.name), "tiny-dense");
    c.num_layers = 2;
    c.hidden_size = 8;
    c.ffn_hidden_size = 16;
    c.num_attention_heads = 2;
    c.num_query_groups = 1;
    c.kv_channels = 4;
    c.is_swiglu = true;
    c.is_untied_embeddings = true;
    c.vocab_size = 10;
    c.make_vocab_size_divisible_by = 4;
    c.seq_length = 6;
    return c;
}

static void test_counts_tiny_dense(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_dense();
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_validate(&c, &diag), MOE_OK);
    struct moe_param_counts pc;
    moe_cfg_param_counts(&c, 1, &pc);
    /* embedding = output = 12*8 = 96 */
    assert_rel(pc.embedding, 96, 0);
    assert_rel(pc.output, 96, 0);
    /* attention: norm 8 + QKV 8*(2*4 + 2*1*4) = 128 + out 8*8 = 64 -> 200 */
    assert_rel(pc.attn_per_layer, 200, 0);
    /* dense MLP: norm 8 + up/gate 8*32 = 256 + down 16*8 = 128 -> 392 */
    assert_rel(pc.dense_mlp, 392, 0);
    /* total = 96 + 96 + final norm 8 + 2 * (200 + 392) = 1384 */
    assert_rel(pc.total, 1384, 0);
    assert_rel(pc.active, 1384, 0);
    assert_rel(pc.total_no_mtp, 1384, 0);
    /* tp=2 pads V to a multiple of 8: 16 -> embedding/output 128 each: 1384 +
     * 2*32 = 1448 */
    moe_cfg_param_counts(&c, 2, &pc);
    assert_rel(pc.total, 1448, 0);
    /* tied embeddings drop the output layer; no SwiGLU drops the gate (8*16 per
     * MLP) */
    c.is_untied_embeddings = false;
    c.is_swiglu = false;
    moe_cfg_param_counts(&c, 1, &pc);
    assert_rel(pc.output, 0, 0);
    assert_rel(pc.total, 1384 - 96 - 2 * 128, 0);
    /* q/k layernorm adds 2*d = 8 per layer; linear biases q 8 + k,v 8 + out 8 +
     * MLP 16 + 8 */
    c = tiny_dense();
    c.has_qk_layernorm = true;
    moe_cfg_param_counts(&c, 1, &pc);
    assert_rel(pc.attn_per_layer, 208, 0);
    c.has_qk_layernorm = false;
    c.has_linear_bias = true;
    moe_cfg_param_counts(&c, 1, &pc);
    assert_rel(pc.attn_per_layer, 200 + 24, 0);
    assert_rel(pc.dense_mlp, 392 + 32 + 8, 0);
}

/* L=3, layer 0 dense and 1,2 MoE, MLA, 4 experts top-2 of fe=6, shared fs=10, sigmoid router
 * with expert bias, 1 MTP layer; h=8, a=2, q_lora 4, kv_lora 3, qk 2, rope 1, v 2, f 16, V 10->12.
 */
static struct moe_model_cfg tiny_mla_moe(void)
{
    struct moe_model_cfg c = tiny_dense();
    (void)snprintf(c.name, sizeof(c.name), "tiny-mla-moe");
    c.num_layers = 3;
    c.num_query_groups = 2;
    c.is_mla = true;
    c.q_lora_rank = 4;
    c.kv_lora_rank = 3;
    c.qk_head_dim = 2;
    c.qk_pos_emb_head_dim = 1;
    c.v_head_dim = 2;
    c.num_experts = 4;
    c.moe_ffn_hidden_size = 6;
    c.moe_router_topk = 2;
    c.moe_shared_expert_intermediate_size = 10;
    c.router_score = MOE_ROUTER_SIGMOID;
    c.has_router_expert_bias = true;
    c.mtp_num_layers = 1;
    moe_cfg_set_first_dense(&c, 1);
    return c;
}

static void test_counts_tiny_mla_moe(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_mla_moe();
    struct moe_diag diag = {0};
    if (moe_cfg_validate(&c, &diag) != MOE_OK) {
        print_error("%s\n", diag.message);
        fail();
    }
    struct moe_param_counts pc;
    moe_cfg_param_counts(&c, 1, &pc);
    /* attention: norm 8; q: down 8*4 = 32, norm 4, up 4*2*(2+1) = 24 -> 60;
     * kv: down 8*(3+1) = 32, norm 3, up 3*2*(2+2) = 24 -> 59; out 2*2*8 = 32. 8+60+59+32 = 159 */
    assert_rel(pc.attn_per_layer, 159, 0);
    assert_rel(pc.dense_mlp, 392, 0);     /* norm 8 + 8*32 + 16*8 */
    assert_rel(pc.expert, 144, 0);        /* 8*12 + 6*8 */
    assert_rel(pc.shared_expert, 240, 0); /* 8*20 + 10*8 */
    assert_rel(pc.router, 36, 0);         /* 4*8 weights + 4 expert biases */
    assert_rel(pc.mtp_extra, 152, 0);     /* eh_proj 16*8 = 128 + 3 norms of 8 */
    /* MoE layer: norm 8 + router 36 + shared 240 + 4 experts 576 = 860 (2 active: 572).
     * total_no_mtp = (96+96+8) + 3*159 + 392 + 2*860 = 200 + 477 + 392 + 1720 = 2789 */
    assert_rel(pc.total_no_mtp, 2789, 0);
    /* active_no_mtp = 200 + 477 + 392 + 2*572 = 2213 */
    assert_rel(pc.active_no_mtp, 2213, 0);
    /* MTP layer copies the last (MoE) layer: 159 + 152 + 860 = 1171; active 159+152+572 = 883 */
    assert_rel(pc.total, 2789 + 1171, 0);
    assert_rel(pc.active, 2213 + 883, 0);
    /* Uncompressed queries (q_lora 0): q = 8*2*3 = 48 instead of 60 */
    c.q_lora_rank = 0;
    moe_cfg_param_counts(&c, 1, &pc);
    assert_rel(pc.attn_per_layer, 147, 0);
    /* Last layer dense: the MTP layer gets a dense MLP (159 + 152 + 392) */
    c = tiny_mla_moe();
    c.layer_flags[2] = 0;
    moe_cfg_param_counts(&c, 1, &pc);
    assert_rel(pc.total - pc.total_no_mtp, 703, 0);
}

/* ------------------------------------------------------------------------------------------
 */
/* Layer helpers and padding. */

static void test_layer_helpers(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_dense();
    c.num_layers = 7;
    c.num_experts = 4;
    c.moe_ffn_hidden_size = 6;
    c.moe_router_topk = 1;
    moe_cfg_set_moe_every(&c, 2); /* Megatron: i % 2 == 0 -> layers 0, 2, 4, 6 */
    assert_int_equal(moe_cfg_num_moe_layers(&c), 4);
    assert_int_equal(c.layer_flags[0], MOE_LAYER_MOE);
    assert_int_equal(c.layer_flags[1], 0);
    assert_true(moe_cfg_is_moe(&c));
    moe_cfg_set_moe_every(&c, 1);
    assert_int_equal(moe_cfg_num_moe_layers(&c), 7);
    moe_cfg_set_first_dense(&c, 3);
    assert_int_equal(moe_cfg_num_moe_layers(&c), 4);
    assert_int_equal(c.layer_flags[2], 0);
    assert_int_equal(c.layer_flags[3], MOE_LAYER_MOE);
    /* The windowed bit survives; flags past num_layers are cleared. */
    c.layer_flags[4] |= MOE_LAYER_WINDOWED;
    c.layer_flags[9] = MOE_LAYER_MOE;
    moe_cfg_set_moe_every(&c, 3);
    assert_int_equal(c.layer_flags[4], MOE_LAYER_WINDOWED);
    assert_int_equal(c.layer_flags[3], MOE_LAYER_MOE);
    assert_int_equal(c.layer_flags[9], 0);
    moe_cfg_set_moe_every(&c, 0); /* no MoE layer */
    assert_int_equal(moe_cfg_num_moe_layers(&c), 0);
    assert_false(moe_cfg_is_moe(&c));
}

static void test_init_and_padding(void **state)
{
    (void)state;
    struct moe_model_cfg c;
    memset(&c, 0xff, sizeof(c));
    moe_cfg_init(&c);
    assert_int_equal(c.make_vocab_size_divisible_by, 128);
    assert_int_equal(c.num_layers, 0);
    assert_int_equal(c.layer_flags[MOE_MAX_LAYERS - 1], 0);
    c.vocab_size = 129280;
    assert_int_equal(moe_cfg_padded_vocab(&c, 1), 129280); /* 1010 * 128 */
    assert_int_equal(moe_cfg_padded_vocab(&c, 8), 130048); /* 127 * 1024 */
    c.vocab_size = 151936;
    assert_int_equal(moe_cfg_padded_vocab(&c, 2), 152064); /* 594 * 256 */
    assert_int_equal(moe_cfg_padded_vocab(&c, 0), 151936); /* tp < 1 taken as 1 */
}

/* ------------------------------------------------------------------------------------------
 */
/* Validation: one case per rule; the message must name the field. */

static void expect_invalid(const struct moe_model_cfg *c, const char *needle)
{
    struct moe_diag diag = {0};
    enum moe_status st = moe_cfg_validate(c, &diag);
    if (st != MOE_ERR_INVALID || strstr(diag.message, needle) == NULL) {
        print_error("want MOE_ERR_INVALID naming \"%s\", got %d: %s\n", needle, st, diag.message);
        fail();
    }
}

static void test_validate_trunk(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_dense();
    c.num_layers = 0;
    expect_invalid(&c, "num_layers");
    c.num_layers = MOE_MAX_LAYERS + 1;
    expect_invalid(&c, "num_layers");
    c = tiny_dense();
    c.hidden_size = 10000000;
    expect_invalid(&c, "hidden_size");
    c = tiny_dense();
    c.seq_length = 1000000000;
    expect_invalid(&c, "seq_length");
    c = tiny_dense();
    c.seq_length = 0;
    expect_invalid(&c, "seq_length");
    c = tiny_dense();
    c.num_attention_heads = 0;
    expect_invalid(&c, "num_attention_heads");
    c = tiny_dense();
    c.num_attention_heads = 32;
    c.num_query_groups = 3;
    expect_invalid(&c, "num_query_groups = 3 does not divide num_attention_heads = 32");
    c.num_query_groups = 64;
    expect_invalid(&c, "num_query_groups");
    c = tiny_dense();
    c.is_swiglu = false;
    c.is_quick_geglu = true;
    expect_invalid(&c, "is_quick_geglu = true needs is_swiglu = true");
    c = tiny_dense();
    c.vocab_size = 0;
    expect_invalid(&c, "vocab_size");
    c = tiny_dense();
    c.make_vocab_size_divisible_by = 0;
    expect_invalid(&c, "make_vocab_size_divisible_by");
    c = tiny_dense();
    c.kv_channels = 0;
    expect_invalid(&c, "kv_channels");
    c = tiny_dense();
    c.ffn_hidden_size = 0;
    expect_invalid(&c, "ffn_hidden_size");
    c = tiny_dense();
    c.mtp_num_layers = MOE_MAX_MTP + 1;
    expect_invalid(&c, "mtp_num_layers");
    c = tiny_dense();
    memset(c.name, 'x', sizeof(c.name));
    expect_invalid(&c, "name");
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_validate(NULL, &diag), MOE_ERR_INVALID);
}

static void test_validate_moe(void **state)
{
    (void)state;
    struct moe_model_cfg c = preset("deepseek-v3");
    c.moe_router_topk = 300;
    expect_invalid(&c, "moe_router_topk");
    c = preset("deepseek-v3");
    c.num_experts = MOE_MAX_EXPERTS + 1;
    expect_invalid(&c, "num_experts");
    c = preset("deepseek-v3");
    c.moe_ffn_hidden_size = 0;
    expect_invalid(&c, "moe_ffn_hidden_size");
    c = preset("deepseek-v3");
    c.moe_router_num_groups = 7; /* 256 % 7 != 0 */
    expect_invalid(&c, "moe_router_num_groups = 7 does not divide num_experts = 256");
    c = preset("deepseek-v3");
    c.moe_router_group_topk = 9; /* > 8 groups */
    expect_invalid(&c, "moe_router_group_topk");
    c = preset("deepseek-v3");
    c.moe_router_num_groups = 0; /* group top-k without groups */
    expect_invalid(&c, "moe_router_num_groups");
    c = preset("deepseek-v3");
    c.moe_router_num_groups = 128; /* 2 experts per group, 4 groups reach 8: fine */
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_validate(&c, &diag), MOE_OK);
    c.moe_router_group_topk = 3; /* 3 groups x 2 experts = 6 < top-8 */
    expect_invalid(&c, "moe_router_topk = 8 exceeds the 6 experts");
    c = preset("deepseek-v3");
    c.router_score = (enum moe_router_score)5;
    expect_invalid(&c, "router_score");
    c = preset("deepseek-v3");
    moe_cfg_set_moe_every(&c, 0);
    expect_invalid(&c, "no layer is flagged MoE");
    c = preset("llama3-8b");
    c.layer_flags[3] = MOE_LAYER_MOE;
    expect_invalid(&c, "num_experts = 0");
    c = preset("mixtral-8x7b");
    c.moe_shared_expert_intermediate_size = -1;
    expect_invalid(&c, "moe_shared_expert_intermediate_size");
}

static void test_validate_mla_and_layers(void **state)
{
    (void)state;
    struct moe_model_cfg c = preset("deepseek-v3");
    c.kv_lora_rank = 0;
    expect_invalid(&c, "kv_lora_rank");
    c = preset("deepseek-v3");
    c.qk_head_dim = 0;
    expect_invalid(&c, "qk_head_dim");
    c = preset("deepseek-v3");
    c.qk_pos_emb_head_dim = 0;
    expect_invalid(&c, "qk_pos_emb_head_dim");
    c = preset("deepseek-v3");
    c.v_head_dim = 0;
    expect_invalid(&c, "v_head_dim");
    c = preset("deepseek-v3");
    c.q_lora_rank = -1;
    expect_invalid(&c, "q_lora_rank");
    c = preset("deepseek-v3");
    c.num_query_groups = 8;
    expect_invalid(&c, "multi-latent");
    c = preset("gpt-oss-120b");
    c.window_size = 0;
    expect_invalid(&c, "window_size = 0");
    c = preset("llama3-8b");
    c.window_size = 4096;
    expect_invalid(&c, "no layer is flagged windowed");
    c = preset("llama3-8b");
    c.layer_flags[0] = 0x80;
    expect_invalid(&c, "layer_flags[0]");
    c = preset("deepseek-v3");
    c.ffn_hidden_size = 0; /* the 3 dense layers need it */
    expect_invalid(&c, "ffn_hidden_size = 0 but 3 layers have a dense MLP");
    c = preset("qwen3-30b-a3b");
    c.ffn_hidden_size = 0; /* all-MoE: no dense FFN needed */
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_validate(&c, &diag), MOE_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_list),
        cmocka_unit_test(test_preset_lookup),
        cmocka_unit_test(test_preset_shapes),
        cmocka_unit_test(test_published_deepseek_v3),
        cmocka_unit_test(test_published_moe_totals),
        cmocka_unit_test(test_published_dense),
        cmocka_unit_test(test_counts_tiny_dense),
        cmocka_unit_test(test_counts_tiny_mla_moe),
        cmocka_unit_test(test_layer_helpers),
        cmocka_unit_test(test_init_and_padding),
        cmocka_unit_test(test_validate_trunk),
        cmocka_unit_test(test_validate_moe),
        cmocka_unit_test(test_validate_mla_and_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
