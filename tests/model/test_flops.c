/*
 * Tests for model/flops.c: Megatron-LM's model-FLOPs formula (training.py
 * num_floating_point_operations, transformer path) on tiny models computed by hand — every term is
 * written out — and on the presets against the FLOPs per token implied by published runs
 * (reference/published_runs.md: TFLOPS / tokens per second): DeepSeek-V3 ~260 GFLOP/token with
 * MTP and ~250 without, Qwen3-235B ~148, Qwen3-30B ~23.1, Kimi-K2 ~205 (within 2%); Mixtral-8x22B
 * ~250 is an estimate (6 x active params + attention), so 5%. Plus invariants.
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
#include "model/flops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GFLOP 1e9

#define assert_rel(got, want, rel) assert_rel_impl((got), (want), (rel), #got, __FILE__, __LINE__)
static void
assert_rel_impl(double got, double want, double rel, const char *what, const char *file, int line)
{
    double tol = rel * fabs(want) + 1e-9 * fabs(want);
    if (!(fabs(got - want) <= tol)) {
        print_error("%s:%d: %s = %.9g, want %.9g within %.3g%%\n", file, line, what, got, want,
                    rel * 100.0);
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

/* L=2 dense, h=8, a=2, g=1, d=4 (q = a*d = 8, k = v = g*d = 4), f=16, SwiGLU, V=10 padded to a
 * multiple of 4 (12 at tp=1, 16 at tp=2). */
static struct moe_model_cfg tiny_dense(void)
{
    struct moe_model_cfg c;
    moe_cfg_init(&c);
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

static void test_tiny_dense(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_dense();
    /* Megatron, per token, s = 6 (each term already x3 fwd/bwd x2 FMA = x6):
     *   MLP     6 * h * f * 3 * L         = 6 * 8 * 16 * 3 * 2      = 4608
     *   attn    6 * (h*(q+k+v) + q*s/2*2 + q*h) * L = 6 * (128 + 48 + 64) * 2 = 2880
     *   logits  6 * h * V_padded          = 6 * 8 * 12              = 576
     * total 8064 per token, x6 tokens = 48384 per sequence. */
    assert_rel(moe_flops_per_sequence(&c, 6, 1), 48384, 0);
    assert_rel(moe_flops_per_token(&c, 6, 1), 8064, 0);
    /* tp=2: V_padded = 16, logits 6*8*16 = 768: 8256 per token */
    assert_rel(moe_flops_per_sequence(&c, 6, 2), 8256 * 6, 0);
    /* s = 12: core attention 6*q*s = 6*8*12 = 576 per layer: 6*(128+96+64)*2 = 3456;
     * 4608 + 3456 + 576 = 8640 per token */
    assert_rel(moe_flops_per_token(&c, 12, 1), 8640, 0);
    /* Without SwiGLU the MLP has 2 GEMMs: 6*8*16*2*2 = 3072 instead of 4608 */
    c.is_swiglu = false;
    assert_rel(moe_flops_per_token(&c, 6, 1), 8064 - 4608 + 3072, 0);
    /* MHA (g = a = 2): k = v = 8, qkv 8*24 = 192 instead of 128: +6*64*2 = 768 */
    c = tiny_dense();
    c.num_query_groups = 2;
    assert_rel(moe_flops_per_token(&c, 6, 1), 8064 + 768, 0);
    /* Tied embeddings do not change FLOPs (the logits GEMM runs either way). */
    c = tiny_dense();
    c.is_untied_embeddings = false;
    assert_rel(moe_flops_per_token(&c, 6, 1), 8064, 0);
}

static void test_tiny_dense_breakdown(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_dense();
    struct moe_flops_breakdown b;
    moe_flops_breakdown(&c, 6, 1, &b);
    /* per sequence = per-token forward x 3 x s(6) x layers:
     *   attn_proj  fwd 2*(128 + 64) = 384    -> 384*18*2  = 13824
     *   core_attn  fwd 2*q*s = 96            -> 96*18*2   = 3456
     *   dense_mlp  fwd 2*3*8*16 = 768        -> 768*18*2  = 27648
     *   logits     fwd 2*8*12 = 192          -> 192*18    = 3456 */
    assert_rel(b.attn_proj, 13824, 0);
    assert_rel(b.core_attn, 3456, 0);
    assert_rel(b.dense_mlp, 27648, 0);
    assert_rel(b.logits, 3456, 0);
    assert_rel(b.routed_experts, 0, 0);
    assert_rel(b.shared_experts, 0, 0);
    assert_rel(b.mtp_extra, 0, 0);
    assert_rel(b.total, 48384, 0);
    assert_rel(b.core_attn_exec, b.core_attn, 0); /* no window */
    assert_rel(b.router_exec, 0, 0);

    struct moe_flops_layer l;
    moe_flops_layer_fwd(&c, 6, 1, &l);
    assert_rel(l.attn_proj, 384, 0);
    assert_rel(l.core_attn, 96, 0);
    assert_rel(l.core_attn_window, 96, 0);
    assert_rel(l.dense_mlp, 768, 0);
    assert_rel(l.logits, 192, 0);
}

/* Sliding window w=2 on layer 0 of tiny_dense, s=6. Model FLOPs count it as full (Megatron-LM has
 * no window term); executed core attention uses the area of the band per row, w - w^2/(2s)
 * = 2 - 4/12 = 5/3 keys instead of s/2 = 3. Per key per token: 2 GEMMs x 2 FLOPs x q = 32. */
static void test_window(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_dense();
    c.window_size = 2;
    c.layer_flags[0] = MOE_LAYER_WINDOWED;
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_validate(&c, &diag), MOE_OK);
    assert_rel(moe_flops_per_sequence(&c, 6, 1), 48384, 0);
    struct moe_flops_layer l;
    moe_flops_layer_fwd(&c, 6, 1, &l);
    assert_rel(l.core_attn, 96, 0);
    assert_rel(l.core_attn_window, 32.0 * 5.0 / 3.0, 1e-12);
    struct moe_flops_breakdown b;
    moe_flops_breakdown(&c, 6, 1, &b);
    /* exec = 3 * 6 * (96 + 160/3) = 2688 */
    assert_rel(b.core_attn_exec, 2688, 1e-12);
    assert_rel(b.core_attn, 3456, 0);
    /* A window at least as long as the sequence changes nothing. */
    moe_flops_layer_fwd(&c, 2, 1, &l);
    assert_rel(l.core_attn_window, l.core_attn, 0);
}

/* Tiny MLA MoE with MTP: L=3 (layer 0 dense, 1-2 MoE), h=8, a=2, q_lora 4, kv_lora 3, qk 2,
 * rope 1, v 2, f 16, 4 experts top-2 of fe 6, shared fs 10, 1 MTP layer, V 10 -> 12. */
static struct moe_model_cfg tiny_mla_moe(void)
{
    struct moe_model_cfg c = tiny_dense();
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

static void test_tiny_mla_moe_mtp(void **state)
{
    (void)state;
    struct moe_model_cfg c = tiny_mla_moe();
    struct moe_diag diag = {0};
    assert_int_equal(moe_cfg_validate(&c, &diag), MOE_OK);
    /* Megatron MLA term per layer (inside the x6), s = 4:
     *   q   q_lora*(h + a*(qk+rope) + 1)  = 4*(8 + 6 + 1)  = 60
     *   kv  kv_lora*(h + a*(qk+v) + 1)    = 3*(8 + 8 + 1)  = 51
     *   rope k  h*rope                    = 8
     *   out a*v*h                         = 32
     *   core s*a*(qk+rope)/2 + s*a*v/2    = 12 + 8         = 20      -> 171, x6 = 1026
     * 4 attention layers (3 + MTP): 4104.
     * MLP: last layer MoE, so MTP adds a MoE layer: 1 dense, 3 MoE:
     *   6*h*(f*3*1 + fe*K*3*3 + fs*3*3) = 48*(48 + 108 + 90) = 11808
     * MTP norms + eh proj: 6*(3h + 2h^2) = 6*152 = 912
     * logits, main + MTP: 6*h*12*2 = 1152
     * total 17976 per token; s = 4: 71904 per sequence. */
    assert_rel(moe_flops_per_sequence(&c, 4, 1), 71904, 0);
    struct moe_flops_breakdown b;
    moe_flops_breakdown(&c, 4, 1, &b);
    assert_rel(b.attn_proj, (60 + 51 + 8 + 32) * 6.0 * 4 * 4, 0);
    assert_rel(b.core_attn, 20 * 6.0 * 4 * 4, 0);
    assert_rel(b.dense_mlp, 48.0 * 48 * 4, 0);
    assert_rel(b.routed_experts, 48.0 * 108 * 4, 0);
    assert_rel(b.shared_experts, 48.0 * 90 * 4, 0);
    assert_rel(b.mtp_extra, 912.0 * 4, 0);
    assert_rel(b.logits, 1152.0 * 4, 0);
    /* router: executed only, 2*h*E fwd per MoE layer = 64, x3 x3 layers x4 tokens */
    assert_rel(b.router_exec, 64.0 * 3 * 3 * 4, 0);
    struct moe_flops_layer l;
    moe_flops_layer_fwd(&c, 4, 1, &l);
    assert_rel(l.one_expert, 2.0 * 3 * 8 * 6, 0); /* 288 */
    assert_rel(l.routed_experts, 2 * 288, 0);
    assert_rel(l.shared_experts, 2.0 * 3 * 8 * 10, 0);
    assert_rel(l.mtp_extra, 2.0 * 152, 0);

    /* No MTP: 3 layers 3078; MLP 48*(48 + 72 + 60) = 8640; logits 576: 12294 per token */
    c.mtp_num_layers = 0;
    assert_rel(moe_flops_per_token(&c, 4, 1), 12294, 0);
    /* Last layer dense: the MTP layer counts as dense: 3 dense, 1 MoE:
     * 48*(48*3 + 36 + 30) = 10080; 4104 + 10080 + 912 + 1152 = 16248 */
    c = tiny_mla_moe();
    c.layer_flags[2] = 0;
    assert_rel(moe_flops_per_token(&c, 4, 1), 16248, 0);
    /* Uncompressed queries: q term h*a*(qk+rope) = 48 instead of 60: -6*12*4 layers = -288 */
    c = tiny_mla_moe();
    c.q_lora_rank = 0;
    assert_rel(moe_flops_per_token(&c, 4, 1), 17976 - 288, 0);
}

/* ------------------------------------------------------------------------------------------ */

static double gflop_per_token(const char *name, int mtp_override)
{
    struct moe_model_cfg c = preset(name);
    if (mtp_override >= 0) {
        c.mtp_num_layers = mtp_override;
    }
    return moe_flops_per_token(&c, 4096, 1) / GFLOP;
}

static void test_published_per_token(void **state)
{
    (void)state;
    assert_rel(gflop_per_token("deepseek-v3", -1), 260, 0.02);
    assert_rel(gflop_per_token("deepseek-v3", 0), 250, 0.02);
    assert_rel(gflop_per_token("qwen3-235b-a22b", -1), 148, 0.02);
    assert_rel(gflop_per_token("qwen3-30b-a3b", -1), 23.1, 0.02);
    assert_rel(gflop_per_token("kimi-k2", -1), 205, 0.02);
    assert_rel(gflop_per_token("mixtral-8x22b", -1), 250, 0.05);
}

/* Megatron's count for GPT-OSS-120B at s=4096, computed from the formula with no window term:
 * attention 36 * 6*(2880*(4096+2*512) + 4096*4096 + 4096*2880)
 * (the core term is q*s = 4096*4096), experts 36 * 6*2880*2880*4*3, logits 6*2880*201088. */
static void test_gpt_oss_megatron_count(void **state)
{
    (void)state;
    double h = 2880, q = 4096, kv = 512, s = 4096;
    double attn = 36 * 6 * (h * (q + 2 * kv) + q * s + q * h);
    double moe = 36 * 6 * h * 2880 * 4 * 3;
    double logits = 6 * h * 201088;
    assert_rel(gflop_per_token("gpt-oss-120b", -1) * GFLOP, attn + moe + logits, 1e-12);
    /* Executed core attention is far smaller: half the layers see 128 keys instead of 2048. */
    struct moe_model_cfg c = preset("gpt-oss-120b");
    struct moe_flops_breakdown b;
    moe_flops_breakdown(&c, 4096, 1, &b);
    double keys_window = 128.0 - 128.0 * 128.0 / (2 * 4096.0);
    assert_rel(b.core_attn_exec / b.core_attn, (2048.0 + keys_window) / (2 * 2048.0), 1e-12);
}

/* Megatron's count for DeepSeek-V3 without MTP at s=4096, GBS 2048, as the GB200 ladder (L0,
 * L12) reported TFLOPS: training.py num_floating_point_operations at Megatron-LM eb0783b6d3
 * (2025-11-03, the commit of the ladder's guide), MLA branch with the causal halving, 3 dense and
 * 58 MoE layers (--moe-layer-freq ([0]*3+[1]*58)), the reproduce guide's vocabulary 129280
 * (divisible by its 3232). Per token, inside its 3 x 2 factor: q_term + kv_term + rope k + o proj
 * + core attention per layer; MLP 12 h (f 1.5 x 3 + 2048 x 8 x 1.5 x 58 + 2048 x 1.5 x 58); logits
 * 6 h V. The step is 2.0956e18 FLOPs: a convention mismatch here would bias every TFLOPS run. */
static void test_deepseek_v3_megatron_count(void **state)
{
    (void)state;
    double h = 7168, a = 128, ql = 1536, kvl = 512, qk = 128, rope = 64, vd = 128, s = 4096;
    double q_term = ql * (h + a * (qk + rope) + 1);
    double kv_term = kvl * (h + a * (qk + vd) + 1);
    double core = s * a * (qk + rope) / 2 + s * a * vd / 2;
    double attn = 61 * 6 * (q_term + kv_term + h * rope + a * vd * h + core);
    double mlp = 12 * h * (18432 * 1.5 * 3 + 2048 * 8 * 1.5 * 58 + 2048 * 1.5 * 58);
    double logits = 6 * h * 129280;
    double per_token = attn + mlp + logits;
    assert_rel(gflop_per_token("deepseek-v3", 0) * GFLOP, per_token, 1e-12);
    struct moe_model_cfg c = preset("deepseek-v3");
    c.mtp_num_layers = 0;
    assert_rel(moe_flops_per_step(&c, 4096, 2048, 1), 2048 * s * per_token, 1e-12);
    assert_rel(moe_flops_per_step(&c, 4096, 2048, 1), 2.095575e18, 1e-6);
}

static void test_invariants(void **state)
{
    (void)state;
    for (size_t i = 0; i < moe_cfg_num_presets(); i++) {
        const struct moe_model_cfg *c = moe_cfg_preset_at(i);
        int s = c->seq_length;
        double per_seq = moe_flops_per_sequence(c, s, 1);
        assert_true(per_seq > 0);
        assert_rel(moe_flops_per_step(c, s, 256, 1), 256 * per_seq, 1e-15);
        assert_rel(moe_flops_per_token(c, s, 1) * s, per_seq, 1e-15);
        struct moe_flops_breakdown b;
        moe_flops_breakdown(c, s, 1, &b);
        assert_rel(b.attn_proj + b.core_attn + b.dense_mlp + b.routed_experts + b.shared_experts +
                       b.logits + b.mtp_extra,
                   per_seq, 1e-15);
        assert_rel(b.total, per_seq, 0);
        assert_true(b.core_attn_exec <= b.core_attn);
        /* The _terms forms give the same numbers. */
        struct moe_flops_terms t;
        moe_flops_terms_init(c, &t);
        assert_rel(moe_flops_terms_per_sequence(&t, s, 8), moe_flops_per_sequence(c, s, 8), 0);
        /* Longer sequences cost more per token (attention); padding for TP never lowers FLOPs. */
        assert_true(moe_flops_per_token(c, 2 * s, 1) > moe_flops_per_token(c, s, 1));
        assert_true(moe_flops_per_sequence(c, s, 8) >= per_seq);
        /* Bad sizes give 0, not garbage. */
        assert_rel(moe_flops_per_sequence(c, 0, 1), 0, 0);
        assert_rel(moe_flops_per_step(c, s, 0, 1), 0, 0);
        assert_rel(moe_flops_per_sequence(c, s, 0), per_seq, 0); /* tp < 1 taken as 1 */
    }
}

/* Layer counts in the terms: MTP follows the last decoder layer. */
static void test_terms_counts(void **state)
{
    (void)state;
    struct moe_model_cfg c = preset("deepseek-v3");
    struct moe_flops_terms t;
    moe_flops_terms_init(&c, &t);
    assert_int_equal(t.num_attn_layers, 62);
    assert_int_equal(t.num_moe_mlps, 59);
    assert_int_equal(t.num_dense_mlps, 3);
    assert_int_equal(t.num_windowed, 0);
    assert_int_equal(t.mtp_num_layers, 1);
    c = preset("gpt-oss-120b");
    moe_flops_terms_init(&c, &t);
    assert_int_equal(t.num_windowed, 18);
    assert_int_equal(t.num_moe_mlps, 36);
    c = preset("llama3-70b");
    moe_flops_terms_init(&c, &t);
    assert_int_equal(t.num_dense_mlps, 80);
    assert_int_equal(t.num_moe_mlps, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_dense),
        cmocka_unit_test(test_tiny_dense_breakdown),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_tiny_mla_moe_mtp),
        cmocka_unit_test(test_published_per_token),
        cmocka_unit_test(test_gpt_oss_megatron_count),
        cmocka_unit_test(test_deepseek_v3_megatron_count),
        cmocka_unit_test(test_invariants),
        cmocka_unit_test(test_terms_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
