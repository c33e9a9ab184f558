//! Granite-MoE, Granite 4.0-H and Bamba: parameter counts derived by hand from the tensor shapes
//! (`modeling_granitemoe.py`, `modeling_granitemoehybrid.py`, `modeling_bamba.py`, transformers
//! 5.24) and checked against transformers 5.24 building each model from the same config on the
//! meta device (`/work/main/.venv-test/bin/python`):
//!
//! ```text
//! d = json.load(open(path)); d.pop("_name_or_path"); cfg = AutoConfig.for_model(d.pop("model_type"), **d)
//! with torch.device("meta"): m = AutoModelForCausalLM.from_config(cfg)
//! sum(p.numel() for p in m.parameters())
//! ```

mod common;

use common::shape as shape_of;

use vramscope_core::model::{Mlp, Positions, SsmVersion};
use vramscope_formats::model_source::{load_model, LoadedModel};

fn load(name: &str) -> LoadedModel {
    load_model(&format!(
        "{}/tests/fixtures/granite/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// One Mamba2 mixer (`BambaMixer`, `GraniteMoeHybridMambaLayer`) of width h, inner d = 2h,
/// heads n, state s, one group, kernel 4, conv bias, no projection bias: conv_dim c = d + 2s;
/// in_proj (d + c + n)·h, conv1d 4c + c, dt_bias/A_log/D 3n, gated norm d, out_proj h·d.
fn mamba2(h: u64, d: u64, n: u64, s: u64) -> u64 {
    let c = d + 2 * s;
    (d + c + n) * h + 5 * c + 3 * n + d + h * d
}

/// ibm-granite/granite-3.1-3b-a800m-instruct: h 1536, 32 layers, 24 heads of 64 over 8 KV
/// heads; 40 experts of width 512, 8 per token; vocab 49155, tied.
/// Attention 2·1536² + 2·512·1536 = 6,291,456; router 40·1536 = 61,440, input_linear
/// 40·1024·1536 = 62,914,560, output_linear 40·1536·512 = 31,457,280; norms 2·1536:
/// layer 100,727,808 × 32 = 3,223,289,856; embeddings 49155·1536 = 75,502,080; final norm
/// 1536: 3,298,793,472 (transformers 5.24 on meta: 3298793472; the model page says 3.3B).
#[test]
fn granite_3_1_3b_a800m() {
    let layer = 2 * 1536 * 1536
        + 2 * 512 * 1536
        + 40 * 1536
        + 40 * 1024 * 1536
        + 40 * 1536 * 512
        + 2 * 1536;
    assert_eq!(layer, 100_727_808);
    let total = 32 * layer + 49155 * 1536 + 1536;
    assert_eq!(total, 3_298_793_472);
    let m = load("granite-3.1-3b-a800m-instruct");
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    assert_eq!(spec.model_type, "granitemoe");
    assert!(matches!(spec.embedding.positions, Positions::Rotary { .. }));
    common::assert_shapes(
        &m,
        &[
            (
                "model.layers.0.block_sparse_moe.router.layer.weight",
                vec![40, 1536],
            ),
            (
                "model.layers.0.block_sparse_moe.input_linear.weight",
                vec![40, 1024, 1536],
            ),
            (
                "model.layers.31.block_sparse_moe.output_linear.weight",
                vec![40, 1536, 512],
            ),
            ("model.layers.0.self_attn.k_proj.weight", vec![512, 1536]),
            ("model.layers.0.post_attention_layernorm.weight", vec![1536]),
            ("model.norm.weight", vec![1536]),
        ],
    );
}

/// ibm-granite/granite-4.0-h-tiny: h 1536, 40 layers, attention on 5, 15, 25, 35 (12 heads of
/// 128 over 4 KV heads, no positions); Mamba2 d 3072, 48 heads of 64, state 128; 64 experts of
/// width 512, 6 per token, shared MLP 1024; vocab 100352, tied.
/// Mixer: c = 3072 + 256 = 3328; in_proj 6448·1536 = 9,904,128, conv 16,640, 144, norm 3072,
/// out_proj 4,718,592 = 14,642,576 × 36. Attention 2·1536² + 2·512·1536 = 6,291,456 × 4.
/// MoE: router 98,304 + input_linear 64·1024·1536 = 100,663,296 + output_linear 64·1536·512 =
/// 50,331,648; shared 2048·1536 + 1536·1024 = 4,718,592; norms 3072: 155,814,912 × 40.
/// Embeddings 100352·1536 = 154,140,672; final norm 1536: 6,939,037,248 (transformers 5.24 on
/// meta: 6939037248; the model page says 7B).
#[test]
fn granite_4_0_h_tiny() {
    let mixer = mamba2(1536, 3072, 48, 128);
    assert_eq!(mixer, 14_642_576);
    let attn = 2 * 1536 * 1536 + 2 * 512 * 1536;
    let mlp = 64 * 1536 + 64 * 1024 * 1536 + 64 * 1536 * 512 + 2048 * 1536 + 1536 * 1024;
    let total = 36 * mixer + 4 * attn + 40 * (mlp + 2 * 1536) + 100352 * 1536 + 1536;
    assert_eq!(total, 6_939_037_248);
    let m = load("granite-4.0-h-tiny");
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    assert_eq!(spec.embedding.positions, Positions::None);
    assert_eq!(common::attention_layers(&m), vec![5, 15, 25, 35]);
    let ssm = common::ssm_of(&m, 0);
    assert_eq!(ssm.version, SsmVersion::Mamba2);
    assert_eq!((ssm.d_inner, ssm.heads, ssm.d_state), (3072, 48, 128));
    common::assert_shapes(
        &m,
        &[
            ("model.layers.0.mamba.in_proj.weight", vec![6448, 1536]),
            ("model.layers.0.mamba.conv1d.weight", vec![3328, 1, 4]),
            ("model.layers.0.mamba.norm.weight", vec![3072]),
            ("model.layers.0.mamba.out_proj.weight", vec![1536, 3072]),
            ("model.layers.5.self_attn.q_proj.weight", vec![1536, 1536]),
            (
                "model.layers.5.block_sparse_moe.router.layer.weight",
                vec![64, 1536],
            ),
            (
                "model.layers.5.block_sparse_moe.input_linear.weight",
                vec![64, 1024, 1536],
            ),
            (
                "model.layers.5.shared_mlp.input_linear.weight",
                vec![2048, 1536],
            ),
            (
                "model.layers.5.shared_mlp.output_linear.weight",
                vec![1536, 1024],
            ),
            (
                "model.layers.39.post_attention_layernorm.weight",
                vec![1536],
            ),
            ("model.norm.weight", vec![1536]),
        ],
    );
}

/// ibm-granite/granite-4.0-h-1b: the dense branch (`num_local_experts: 0`): every layer the
/// shared MLP alone, 4096 wide: 8192·1536 + 1536·4096 = 18,874,368, norms 3072, × 40 =
/// 755,097,600; mixers and attention as h-tiny's (36 · 14,642,576 + 4 · 6,291,456 =
/// 552,298,560); embeddings 154,140,672; final norm 1536: 1,461,538,368 (transformers 5.24 on
/// meta: 1461538368).
#[test]
fn granite_4_0_h_1b_dense() {
    let mlp = 8192 * 1536 + 1536 * 4096 + 2 * 1536;
    let total = 40 * mlp + 36 * mamba2(1536, 3072, 48, 128) + 4 * 6_291_456 + 154_140_672 + 1536;
    assert_eq!(total, 1_461_538_368);
    let m = load("granite-4.0-h-1b");
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    assert!(spec
        .decoder
        .layers
        .iter()
        .all(|l| matches!(l.mlp, Mlp::Dense(_))));
    assert_eq!(
        shape_of(&m, "model.layers.0.shared_mlp.input_linear.weight"),
        vec![8192, 1536]
    );
}

/// ibm-ai-platform/Bamba-9B: h 4096, 32 layers, attention on 9, 18, 27 (32 heads of 128 over 8
/// KV heads); Mamba2 d 8192, 128 heads of 64, state 128; SwiGLU 14336; vocab 128256, untied.
/// Mixer: c = 8192 + 256 = 8448; in_proj 16768·4096 = 68,681,728, conv 42,240, 384, norm 8192,
/// out_proj 33,554,432 = 102,286,976 × 29; attention 2·4096² + 2·1024·4096 = 41,943,040 × 3;
/// MLP 3·4096·14336 = 176,160,768 and norms 8192, × 32; embeddings and head 2·128256·4096 =
/// 1,050,673,152; final norm 4096: 9,780,235,392 (transformers 5.24 on meta: 9780235392; the
/// model is published as "Bamba-9.8b").
#[test]
fn bamba_9b() {
    let mixer = mamba2(4096, 8192, 128, 128);
    assert_eq!(mixer, 102_286_976);
    let attn = 2 * 4096 * 4096 + 2 * 1024 * 4096;
    let total =
        29 * mixer + 3 * attn + 32 * (3 * 4096 * 14336 + 2 * 4096) + 2 * 128256 * 4096 + 4096;
    assert_eq!(total, 9_780_235_392);
    let m = load("bamba-9b");
    assert_eq!(m.params_total, total);
    common::assert_shapes(
        &m,
        &[
            ("model.layers.0.mamba.in_proj.weight", vec![16768, 4096]),
            ("model.layers.0.mamba.dt_bias", vec![128]),
            ("model.layers.9.self_attn.k_proj.weight", vec![1024, 4096]),
            (
                "model.layers.9.feed_forward.gate_proj.weight",
                vec![14336, 4096],
            ),
            ("model.layers.9.pre_ff_layernorm.weight", vec![4096]),
            ("model.final_layernorm.weight", vec![4096]),
            ("lm_head.weight", vec![128256, 4096]),
        ],
    );
}

/// Bad layer patterns are refused in one line, naming the field.
#[test]
fn bad_patterns_are_refused() {
    for (text, field) in [
        (
            r#"{"model_type": "granitemoehybrid", "num_hidden_layers": 2, "layer_types": ["mamba"]}"#,
            "layer_types",
        ),
        (
            r#"{"model_type": "granitemoehybrid", "num_hidden_layers": 1, "layer_types": ["conv"]}"#,
            "layer_types",
        ),
        (
            r#"{"model_type": "bamba", "mamba_n_heads": 100}"#,
            "mamba_n_heads",
        ),
        (
            r#"{"model_type": "granitemoe", "num_local_experts": 0}"#,
            "num_local_experts",
        ),
    ] {
        common::assert_refused(text, field);
    }
}
