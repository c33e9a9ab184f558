//! Hybrid decoders (attention interleaved with a recurrent mixer): parameter counts derived by
//! hand from the tensor shapes (`modeling_jamba.py`) and checked against transformers 5.24
//! building the model from the same real config on the meta device:
//!
//! ```text
//! d = json.load(open(path)); cfg = AutoConfig.for_model(d.pop("model_type"), **d)
//! with torch.device("meta"): m = AutoModelForCausalLM.from_config(cfg)
//! sum(p.numel() for p in m.parameters())
//! ```

use vramscope_core::model::{AttentionKind, Mlp, SsmVersion};
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/hybrid/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    )
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
    let attention: Vec<usize> = spec
        .decoder
        .layers
        .iter()
        .enumerate()
        .filter(|(_, l)| l.attention.kind.state_space().is_none())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(attention, vec![4, 12, 20, 28]);
    for (i, l) in spec.decoder.layers.iter().enumerate() {
        assert_eq!(matches!(l.mlp, Mlp::Moe(_)), i % 2 == 1, "layer {i}");
    }
    let ssm = spec.decoder.layers[0].attention.kind.state_space().unwrap();
    assert_eq!(ssm.version, SsmVersion::Jamba);
    assert_eq!((ssm.d_inner, ssm.d_state, ssm.dt_rank), (8192, 16, 256));
    let inv = m.inventory.as_ref().unwrap();
    for (name, shape) in [
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
    ] {
        let t = inv.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(t.shape, shape, "{name}");
    }
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
    let text = std::fs::read_to_string(format!(
        "{}/../../validation/specs/cpu-tiny-jamba-fp32-adamw-eager.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cfg = v["hf_config"].to_string();
    let p = parse_config_str(&cfg, "tiny-jamba").unwrap();
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
        let e = parse_config_str(cfg, "c.json").unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

/// Arbitrary JSON values in every Jamba field never panic: each is read or refused.
#[test]
fn jamba_fields_fuzzed_never_panic() {
    let fields = [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "num_experts",
        "num_experts_per_tok",
        "attn_layer_period",
        "attn_layer_offset",
        "expert_layer_period",
        "expert_layer_offset",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_expand",
        "mamba_dt_rank",
        "mamba_conv_bias",
        "vocab_size",
    ];
    let values = [
        "null",
        "0",
        "1",
        "-1",
        "3",
        "1e30",
        "18446744073709551615",
        "2.5",
        "\"auto\"",
        "\"x\"",
        "true",
        "[]",
        "{}",
    ];
    let mut seed = 7u64;
    for _ in 0..2000 {
        let mut obj = serde_json::Map::new();
        obj.insert("model_type".into(), "jamba".into());
        obj.insert("hidden_size".into(), 64.into());
        obj.insert("num_hidden_layers".into(), 4.into());
        obj.insert("num_attention_heads".into(), 4.into());
        obj.insert("num_key_value_heads".into(), 2.into());
        obj.insert("intermediate_size".into(), 32.into());
        obj.insert("vocab_size".into(), 100.into());
        for _ in 0..3 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = fields[(seed >> 33) as usize % fields.len()];
            let v = values[(seed >> 13) as usize % values.len()];
            obj.insert(f.into(), serde_json::from_str(v).unwrap());
        }
        let text = serde_json::Value::Object(obj).to_string();
        if let Ok(p) = parse_config_str(&text, "c.json") {
            let _ = vramscope_core::inventory::build_inventory(&p.spec);
        }
    }
}
