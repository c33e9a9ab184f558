//! Hybrid decoders (attention interleaved with a recurrent mixer): parameter counts derived by
//! hand from the tensor shapes (`modeling_jamba.py`) and checked against transformers 5.24
//! building the model from the same real config on the meta device:
//!
//! ```text
//! d = json.load(open(path)); cfg = AutoConfig.for_model(d.pop("model_type"), **d)
//! with torch.device("meta"): m = AutoModelForCausalLM.from_config(cfg)
//! sum(p.numel() for p in m.parameters())
//! ```

mod common;

use vramscope_core::model::{AttentionKind, Mlp, SsmVersion};
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    common::fixture_path("hybrid", &format!("{name}.json"))
}

/// One Jamba Mamba mixer: in_proj `2d·h`, conv1d `d·k + d`, x_proj `(r + 2n)·d`, dt_proj `d·r +
/// d`, A_log `d·n`, D `d`, out_proj `h·d`, and the Δ/B/C norms `r + 2n`.
fn jamba_mixer(h: u64, d: u64, n: u64, k: u64, r: u64) -> u64 {
    2 * d * h + (d * k + d) + (r + 2 * n) * d + (d * r + d) + d * n + d + h * d + (r + 2 * n)
}

/// ai21labs/AI21-Jamba-1.5-Mini (`fixtures/hybrid/ai21-jamba-1.5-mini.json`): h 4096, mixer
/// d 8192, n 16, k 4, r 256; 32 heads of 128 over 8 KV heads; SwiGLU width 14336; 16 experts
/// on odd layers; attention on layers 4, 12, 20, 28 (`i % 8 == 4`); vocab 65536, untied.
/// Mixer 105,308,448 × 28; attention 2·4096² + 2·4096·1024 = 41,943,040 × 4; dense MLP
/// 3·4096·14336 = 176,160,768 × 16; MoE 16·176,160,768 + router 16·4096 = 2,818,637,824 × 16;
/// norms 2·4096 × 32; embeddings and head 2·65536·4096; final norm 4096: 51,570,323,328
/// (transformers 5.24 on meta: 51570323328; the model page says 52B total).
#[test]
fn ai21_jamba_1_5_mini() {
    let mixer = jamba_mixer(4096, 8192, 16, 4, 256);
    assert_eq!(mixer, 105_308_448);
    let attn = 2 * 4096 * 4096 + 2 * 4096 * 1024;
    let dense = 3 * 4096 * 14336;
    let moe = 16 * dense + 16 * 4096;
    let total =
        28 * mixer + 4 * attn + 16 * dense + 16 * moe + 32 * 2 * 4096 + 2 * 65536 * 4096 + 4096;
    assert_eq!(total, 51_570_323_328);
    let m = load_model(&fixture("ai21-jamba-1.5-mini")).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    let attention = common::attention_layers(&m);
    assert_eq!(attention, vec![4, 12, 20, 28]);
    for (i, l) in spec.decoder.layers.iter().enumerate() {
        assert_eq!(matches!(l.mlp, Mlp::Moe(_)), i % 2 == 1, "layer {i}");
    }
    let ssm = common::ssm_of(&m, 0);
    assert_eq!(ssm.version, SsmVersion::Jamba);
    assert_eq!((ssm.d_inner, ssm.d_state, ssm.dt_rank), (8192, 16, 256));
    common::assert_shapes(
        &m,
        &[
            ("model.embed_tokens.weight", vec![65_536, 4_096]),
            ("model.layers.0.mamba.in_proj.weight", vec![16_384, 4_096]),
            ("model.layers.0.mamba.dt_layernorm.weight", vec![256]),
            ("model.layers.0.mamba.b_layernorm.weight", vec![16]),
            (
                "model.layers.0.feed_forward.down_proj.weight",
                vec![4_096, 14_336],
            ),
            ("model.layers.1.feed_forward.router.weight", vec![16, 4_096]),
            (
                "model.layers.1.feed_forward.experts.15.up_proj.weight",
                vec![14_336, 4_096],
            ),
            ("model.layers.4.self_attn.k_proj.weight", vec![1_024, 4_096]),
            ("model.layers.4.pre_ff_layernorm.weight", vec![4_096]),
            ("model.final_layernorm.weight", vec![4_096]),
            ("lm_head.weight", vec![65_536, 4_096]),
        ],
    );
}

/// The tiny Jamba measured on the CPU (`validation/specs/cpu-tiny-jamba-*.json`): h 256, d 512,
/// n 16, k 4, r 16, 8 heads of 32 over 2 KV heads, ffn 512, 4 experts on layers 1 and 3 (which
/// are also the attention layers: period 2, offset 1), vocab 8192 untied.
/// Mixer 2·512·256 + (512·4 + 512) + 48·512 + (512·16 + 512) + 512·16 + 512 + 256·512 + 48 =
/// 262,144 + 2,560 + 24,576 + 8,704 + 8,192 + 512 + 131,072 + 48 = 437,808 (× 2); attention
/// 2·256² + 2·256·64 = 163,840 (× 2); dense 3·256·512 = 393,216 (× 2); MoE 4·393,216 + 4·256
/// = 1,573,888 (× 2); norms 512 × 4; embeddings + head 2·8192·256 = 4,194,304; final 256:
/// 9,334,112 (transformers 5.24 on meta: 9334112; measure.py counted the same).
#[test]
fn tiny_jamba_of_the_measured_step() {
    let p = common::measured_config("cpu-tiny-jamba-fp32-adamw-eager");
    let inv = vramscope_core::inventory::build_inventory(&p.spec).unwrap();
    let mixer = jamba_mixer(256, 512, 16, 4, 16);
    assert_eq!(mixer, 437_808);
    let total = 2 * mixer + 2 * 163_840 + 2 * 393_216 + 2 * 1_573_888 + 4 * 512 + 4_194_304 + 256;
    assert_eq!(total, 9_334_112);
    assert_eq!(inv.params(), total);
    let kinds: Vec<bool> = p
        .spec
        .decoder
        .layers
        .iter()
        .map(|l| matches!(l.attention.kind, AttentionKind::Standard { .. }))
        .collect();
    assert_eq!(kinds, vec![false, true, false, true]);
}

/// Bad Jamba patterns are one-line errors naming the field (`JambaConfig.validate_architecture`).
#[test]
fn jamba_offsets_beyond_their_period_are_refused() {
    for (field, cfg) in [
        (
            "attn_layer_offset",
            r#"{"model_type": "jamba", "attn_layer_period": 4, "attn_layer_offset": 4}"#,
        ),
        (
            "expert_layer_offset",
            r#"{"model_type": "jamba", "expert_layer_period": 2, "expert_layer_offset": 3}"#,
        ),
        (
            "num_experts_per_tok",
            r#"{"model_type": "jamba", "num_experts": 4, "num_experts_per_tok": 5}"#,
        ),
        (
            "mamba_expand",
            r#"{"model_type": "jamba", "mamba_expand": 0}"#,
        ),
    ] {
        common::assert_refused(cfg, field);
    }
}

/// Arbitrary JSON values in every Jamba field never panic: each is read or refused.
#[test]
fn jamba_fields_fuzzed_never_panic() {
    let fields = "hidden_size num_hidden_layers num_attention_heads num_key_value_heads \
         intermediate_size num_experts num_experts_per_tok attn_layer_period \
         attn_layer_offset expert_layer_period expert_layer_offset mamba_d_state \
         mamba_d_conv mamba_expand mamba_dt_rank mamba_conv_bias vocab_size";
    let values = r#"null 0 1 -1 3 1e30 18446744073709551615 2.5 "auto" "x" true [] {}"#;
    let base = "hidden_size=64 num_hidden_layers=4 num_attention_heads=4 num_key_value_heads=2 \
         intermediate_size=32 vocab_size=100";
    common::fuzz_config_fields("jamba", base, (fields, values), 2000, 7);
}

/// One Falcon-H1 layer (`modeling_falcon_h1.py`): attention q `h·nh·hd`, k and v `h·kv·hd`, o
/// `nh·hd·h`; the Mamba2 mixer's in_proj `(d + conv + H)·h` with `conv = d + 2·G·N`, conv1d
/// `conv·k + conv`, dt_bias / A_log / D `3·H`, the gated norm `d` (with `mamba_rms_norm`),
/// out_proj `d·h`; SwiGLU `3·h·ffn`; input_layernorm and pre_ff_layernorm `2·h`.
#[allow(clippy::too_many_arguments)]
fn falcon_h1_layer(
    h: u64,
    (nh, kv, hd): (u64, u64, u64),
    ffn: u64,
    (d, heads, g, n, k): (u64, u64, u64, u64, u64),
    norm: bool,
) -> u64 {
    let attn = h * nh * hd + 2 * h * kv * hd + nh * hd * h;
    let conv = d + 2 * g * n;
    let mixer = (d + conv + heads) * h + conv * k + conv + 3 * heads + d * h;
    attn + mixer + if norm { d } else { 0 } + 3 * h * ffn + 2 * h
}

/// tiiuae/Falcon-H1-0.5B-Instruct (`fixtures/hybrid/falcon-h1-0.5b-instruct.json`): h 1024,
/// 36 layers, 8 heads of 64 over 2 KV heads, ffn 2048, Mamba d 1536 = 24 heads × 64, one
/// group, d_state 128, d_conv 4, no gated norm; vocab 32784 untied.
/// Attention 524,288 + 2·131,072 + 524,288 = 1,310,720; mixer conv 1792, in_proj 3352·1024 =
/// 3,432,448, conv1d 8,960, 72, out_proj 1,572,864 = 5,014,344; MLP 6,291,456; norms 2,048:
/// 12,618,568 per layer × 36 = 454,268,448; embeddings + head 2·32784·1024 = 67,141,632; final
/// norm 1024: 521,411,104 (transformers 5.24 on meta: 521411104; the model page: 0.5B, the
/// Hub's safetensors metadata 521M).
#[test]
fn falcon_h1_0_5b() {
    let layer = falcon_h1_layer(1024, (8, 2, 64), 2048, (1536, 24, 1, 128, 4), false);
    assert_eq!(layer, 12_618_568);
    let total = 36 * layer + 2 * 32_784 * 1_024 + 1_024;
    assert_eq!(total, 521_411_104);
    let m = load_model(&fixture("falcon-h1-0.5b-instruct")).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    for l in &spec.decoder.layers {
        assert!(matches!(l.attention.kind, AttentionKind::Standard { .. }));
        let p = l.parallel_ssm.unwrap();
        assert_eq!((p.ssm.d_inner, p.ssm.heads, p.ssm.d_state), (1536, 24, 128));
        assert!(!p.gated_norm);
    }
    common::assert_shapes(
        &m,
        &[
            ("model.layers.0.mamba.in_proj.weight", vec![3_352, 1_024]),
            ("model.layers.0.mamba.conv1d.weight", vec![1_792, 1, 4]),
            ("model.layers.0.mamba.conv1d.bias", vec![1_792]),
            ("model.layers.0.mamba.A_log", vec![24]),
            ("model.layers.0.mamba.out_proj.weight", vec![1_024, 1_536]),
            ("model.layers.35.self_attn.k_proj.weight", vec![128, 1_024]),
            (
                "model.layers.35.feed_forward.gate_proj.weight",
                vec![2_048, 1_024],
            ),
            ("model.layers.0.pre_ff_layernorm.weight", vec![1_024]),
            ("model.final_layernorm.weight", vec![1_024]),
            ("lm_head.weight", vec![32_784, 1_024]),
        ],
    );
    let inv = m.inventory.as_ref().unwrap();
    assert!(inv.get("model.layers.0.mamba.norm.weight").is_none());
}

/// tiiuae/Falcon-H1-7B-Instruct (`fixtures/hybrid/falcon-h1-7b-instruct.json`): h 3072, 44
/// layers, 12 heads of 128 over 2, ffn 12288, Mamba d 3072 = 24 × 128, one group, d_state 256,
/// gated norm; vocab 130049 untied. Attention 4,718,592 + 2·786,432 + 4,718,592 =
/// 11,010,048; mixer (conv 3584) 6680·3072 = 20,520,960 + 17,920 + 72 + norm 3,072 + out_proj
/// 9,437,184 = 29,979,208; MLP 113,246,208; norms 6,144: 154,241,608 × 44 = 6,786,630,752;
/// embeddings + head 2·130049·3072 = 799,021,056; final norm 3,072: 7,585,654,880
/// (transformers 5.24 on meta: 7585654880; the model page: 7.59B).
#[test]
fn falcon_h1_7b() {
    let layer = falcon_h1_layer(3072, (12, 2, 128), 12288, (3072, 24, 1, 256, 4), true);
    assert_eq!(layer, 154_241_608);
    let total = 44 * layer + 2 * 130_049 * 3_072 + 3_072;
    assert_eq!(total, 7_585_654_880);
    let m = load_model(&fixture("falcon-h1-7b-instruct")).unwrap();
    assert_eq!(m.params_total, total);
    let inv = m.inventory.as_ref().unwrap();
    assert_eq!(
        inv.get("model.layers.43.mamba.norm.weight").unwrap().shape,
        vec![3_072]
    );
}

/// tiiuae/Falcon-H1-34B-Instruct (`fixtures/hybrid/falcon-h1-34b-instruct.json`): h 5120, 72
/// layers, 20 heads of 128 over 4, ffn 21504, Mamba d 4096 = 32 × 128 in 2 groups (conv 5120),
/// d_state 256, gated norm; vocab 261120 untied. Attention 13,107,200 + 2·2,621,440 +
/// 13,107,200 = 31,457,280; mixer 9248·5120 = 47,349,760 + 25,600 + 96 + 4,096 + 20,971,520 =
/// 68,351,072; MLP 330,301,440; norms 10,240: 430,120,032 × 72 = 30,968,642,304; embeddings +
/// head 2·261120·5120 = 2,673,868,800; final norm 5,120: 33,642,516,224 (transformers 5.24 on meta:
/// 33642516224; the model page: 34B).
#[test]
fn falcon_h1_34b() {
    let layer = falcon_h1_layer(5120, (20, 4, 128), 21504, (4096, 32, 2, 256, 4), true);
    assert_eq!(layer, 430_120_032);
    let total = 72 * layer + 2 * 261_120 * 5_120 + 5_120;
    assert_eq!(total, 33_642_516_224);
    let m = load_model(&fixture("falcon-h1-34b-instruct")).unwrap();
    assert_eq!(m.params_total, total);
}

/// The tiny Falcon-H1 measured on the CPU (`validation/specs/cpu-tiny-falcon-h1-*.json`): h 256,
/// 8 heads of 32 over 2, ffn 512, Mamba d 512 = 8 × 64, d_state 16, gated norm, 4 layers,
/// vocab 8192 untied. Attention 163,840; mixer (conv 544) 1064·256 + 2,720 + 24 + 512 +
/// 131,072 = 406,712; MLP 393,216; norms 512: 964,280 × 4 + 2·8192·256 + 256 = 8,051,680
/// (transformers 5.24 on meta: 8051680; measure.py counted the same).
#[test]
fn tiny_falcon_h1_of_the_measured_step() {
    let p = common::measured_config("cpu-tiny-falcon-h1-fp32-adamw-eager");
    let inv = vramscope_core::inventory::build_inventory(&p.spec).unwrap();
    let layer = falcon_h1_layer(256, (8, 2, 32), 512, (512, 8, 1, 16, 4), true);
    assert_eq!(layer, 964_280);
    assert_eq!(inv.params(), 4 * layer + 2 * 8_192 * 256 + 256);
    assert_eq!(inv.params(), 8_051_680);
}

/// Megatron-Bridge's copy of the 0.5B config lacks `mamba_d_ssm`: the inner width is then
/// `mamba_expand · hidden_size` = 2048, which 24 heads of 64 do not tile — transformers 5.24
/// refuses it ("mamba_n_heads must divide mamba_expand * hidden_size"), and so does vramscope,
/// in one line naming the field.
#[test]
fn falcon_h1_heads_that_do_not_tile_the_inner_width_are_refused() {
    let mut v = common::fixture_json("unsupported", "falcon-h1-0.5b-instruct.json");
    // Without mamba_d_ssm the class default (1024) applies, which 24 heads do not divide.
    let e = parse_config_str(&v.to_string(), "c.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("mamba_n_heads"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    // An explicit null: `mamba_expand · hidden_size` = 2048, not a multiple of 24 either.
    v["mamba_d_ssm"] = serde_json::Value::Null;
    let e = parse_config_str(&v.to_string(), "c.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("mamba_n_heads") && e.contains("2048"), "{e}");
    for (field, cfg) in [
        (
            "mamba_n_groups",
            r#"{"model_type": "falcon_h1", "mamba_n_groups": 3}"#,
        ),
        (
            "mamba_d_head",
            r#"{"model_type": "falcon_h1", "mamba_d_head": 16}"#,
        ),
    ] {
        let e = parse_config_str(cfg, "c.json").unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
}

/// Arbitrary JSON values in every Falcon-H1 field never panic: each is read or refused.
#[test]
fn falcon_h1_fields_fuzzed_never_panic() {
    let fields = "hidden_size num_hidden_layers num_attention_heads num_key_value_heads head_dim \
         intermediate_size mamba_d_ssm mamba_n_heads mamba_d_head mamba_n_groups \
         mamba_d_state mamba_d_conv mamba_expand mamba_chunk_size mamba_rms_norm \
         projectors_bias vocab_size";
    let values = r#"null 0 1 -1 3 1e30 18446744073709551615 1099511627776 2.5 "auto" true []"#;
    let base = "hidden_size=64 num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2 \
         intermediate_size=32 vocab_size=100 mamba_d_ssm=64 mamba_n_heads=4 \
         mamba_d_state=8";
    common::fuzz_config_fields("falcon_h1", base, (fields, values), 3000, 11);
}
