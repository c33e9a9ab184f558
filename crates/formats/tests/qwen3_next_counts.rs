//! Qwen3-Next (`qwen3_next`): the parameter count derived by hand from the tensor shapes of
//! `modeling_qwen3_next.py` and checked against transformers 5.24 building
//! `Qwen3NextForCausalLM` from the same real config on the meta device:
//!
//! ```text
//! d = json.load(open(path)); cfg = AutoConfig.for_model(d.pop("model_type"), **d)
//! with torch.device("meta"): m = AutoModelForCausalLM.from_config(cfg)
//! sum(p.numel() for p in m.parameters())   # 79674391296
//! ```

mod common;

use vramscope_core::model::{Mlp, SsmVersion};
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    common::fixture_path("hybrid", &format!("{name}.json"))
}

/// Qwen/Qwen3-Next-80B-A3B-Instruct (`fixtures/hybrid/qwen3-next-80b-a3b-instruct.json`):
/// h 2048, 48 layers, every 4th full attention (layers 3, 7, …, 47: 12), the other 36 gated
/// DeltaNet; 512 experts of 512 plus a shared expert of 512 on every layer; vocab 151936,
/// untied.
/// - DeltaNet (nk 16, nv 32, d_k = d_v 128: key_dim 2048, value_dim 4096): in_proj_qkvz
///   (2·2048 + 2·4096)·2048 = 25,165,824; in_proj_ba 64·2048 = 131,072; conv1d (2·2048 +
///   4096)·4 = 32,768; dt_bias + A_log 64; norm 128; out_proj 2048·4096 = 8,388,608:
///   33,718,464.
/// - Gated attention (16 heads × 256, 2 KV heads): q_proj 2·4096·2048 = 16,777,216; k_proj and
///   v_proj 512·2048 each = 2,097,152; o_proj 2048·4096 = 8,388,608; q/k norms 2·256:
///   27,263,488.
/// - MoE: experts 512·3·512·2048 = 1,610,612,736; router 512·2048 = 1,048,576; shared expert
///   3·512·2048 = 3,145,728; shared_expert_gate 2048: 1,614,809,088.
/// - Norms 2·2048 per layer; embeddings and head 2·151936·2048; final norm 2048.
///
/// 36·33,718,464 + 12·27,263,488 + 48·(1,614,809,088 + 4096) + 622,329,856 + 2048 =
/// 79,674,391,296 (transformers 5.24 on meta: 79674391296; the model page says 80B in total).
#[test]
fn qwen3_next_80b_a3b_instruct() {
    let delta =
        (2 * 2048 + 2 * 4096) * 2048 + 64 * 2048 + (2 * 2048 + 4096) * 4 + 64 + 128 + 2048 * 4096;
    assert_eq!(delta, 33_718_464);
    let attn = 2 * 4096 * 2048 + 2 * 512 * 2048 + 2048 * 4096 + 2 * 256;
    assert_eq!(attn, 27_263_488);
    let moe = 512 * 3 * 512 * 2048 + 512 * 2048 + 3 * 512 * 2048 + 2048;
    assert_eq!(moe, 1_614_809_088);
    let total: u64 = 36 * delta + 12 * attn + 48 * (moe + 2 * 2048) + 2 * 151_936 * 2048 + 2048;
    assert_eq!(total, 79_674_391_296);
    let m = load_model(&fixture("qwen3-next-80b-a3b-instruct")).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    let full = common::attention_layers(&m);
    assert_eq!(full, (0..12).map(|k| 4 * k + 3).collect::<Vec<_>>());
    assert!(spec
        .decoder
        .layers
        .iter()
        .all(|l| matches!(l.mlp, Mlp::Moe(_))));
    let ssm = common::ssm_of(&m, 0);
    assert_eq!(
        (ssm.version, ssm.heads, ssm.groups, ssm.d_state, ssm.d_inner),
        (SsmVersion::GatedDeltaNet, 32, 16, 128, 4096)
    );
    // Shapes as transformers 5.24 names them on the meta device (its experts are fused; the
    // published checkpoint stores them per expert, the names vramscope uses).
    common::assert_shapes(
        &m,
        &[
            (
                "model.layers.0.linear_attn.in_proj_qkvz.weight",
                vec![12_288, 2_048],
            ),
            (
                "model.layers.0.linear_attn.in_proj_ba.weight",
                vec![64, 2_048],
            ),
            (
                "model.layers.0.linear_attn.conv1d.weight",
                vec![8_192, 1, 4],
            ),
            ("model.layers.0.linear_attn.dt_bias", vec![32]),
            ("model.layers.0.linear_attn.A_log", vec![32]),
            ("model.layers.0.linear_attn.norm.weight", vec![128]),
            (
                "model.layers.0.linear_attn.out_proj.weight",
                vec![2_048, 4_096],
            ),
            ("model.layers.3.self_attn.q_proj.weight", vec![8_192, 2_048]),
            ("model.layers.3.self_attn.k_proj.weight", vec![512, 2_048]),
            ("model.layers.3.self_attn.q_norm.weight", vec![256]),
            ("model.layers.0.mlp.gate.weight", vec![512, 2_048]),
            (
                "model.layers.0.mlp.experts.511.down_proj.weight",
                vec![2_048, 512],
            ),
            (
                "model.layers.0.mlp.shared_expert.up_proj.weight",
                vec![512, 2_048],
            ),
            (
                "model.layers.0.mlp.shared_expert_gate.weight",
                vec![1, 2_048],
            ),
        ],
    );
}

/// `layer_types` wins over `full_attention_interval`; `mlp_only_layers` and
/// `decoder_sparse_step` pick dense layers; shapes that transformers cannot build are refused.
#[test]
fn layer_pattern_and_refusals() {
    let cfg = r#"{"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
        "intermediate_size": 128, "vocab_size": 100, "mlp_only_layers": [0],
        "decoder_sparse_step": 1,
        "layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"]}"#;
    let spec = parse_config_str(cfg, "c.json").unwrap().spec;
    let kinds: Vec<bool> = spec
        .decoder
        .layers
        .iter()
        .map(|l| l.attention.kind.state_space().is_some())
        .collect();
    assert_eq!(kinds, vec![false, true, true, false]);
    assert!(matches!(spec.decoder.layers[0].mlp, Mlp::Dense(_)));
    assert!(matches!(spec.decoder.layers[1].mlp, Mlp::Moe(_)));
    for (bad, field) in [
        (
            cfg.replace(
                "\"linear_num_value_heads\": 4",
                "\"linear_num_value_heads\": 3",
            ),
            "linear_num_value_heads",
        ),
        (
            cfg.replace(
                "\"linear_attention\", \"full_attention\"]",
                "\"mamba\", \"full_attention\"]",
            ),
            "layer_types",
        ),
        (
            cfg.replace("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9"),
            "num_experts_per_tok",
        ),
        (
            cfg.replace("\"mlp_only_layers\": [0]", "\"mlp_only_layers\": [\"x\"]"),
            "mlp_only_layers",
        ),
    ] {
        common::assert_refused(&bad, field);
    }
}

/// Hostile values never panic: every field set to odd JSON is a one-line error or a reading.
#[test]
fn odd_values_never_panic() {
    let base: serde_json::Value = common::read_json(&fixture("qwen3-next-80b-a3b-instruct"));
    let odd = [
        serde_json::json!(null),
        serde_json::json!(0),
        serde_json::json!(-1),
        serde_json::json!(1u64 << 62),
        serde_json::json!("x"),
        serde_json::json!([]),
        serde_json::json!({}),
        serde_json::json!(1.5),
    ];
    for key in base.as_object().unwrap().keys() {
        for v in &odd {
            let mut c = base.clone();
            c[key] = v.clone();
            if let Err(e) = parse_config_str(&c.to_string(), "c.json") {
                assert!(!e.to_string().contains('\n'), "{key}={v}: {e}");
            }
        }
    }
}
