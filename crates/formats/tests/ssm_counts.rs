//! Parameter counts of state-space models (Mamba, FalconMamba, Mamba2), each derived by hand
//! from the mixer's tensor shapes (`modeling_mamba.py` MambaMixer, `modeling_mamba2.py`
//! Mamba2Mixer) and checked against transformers 5.24 building the model from the same config
//! on the meta device:
//!
//! ```text
//! cfg = AutoConfig.for_model(**json.load(open(path)))
//! with torch.device("meta"): m = AutoModelForCausalLM.from_config(cfg)
//! sum({id(p): p.numel() for p in m.parameters()}.values())   # unique: tied weights once
//! ```

mod common;

use vramscope_core::model::{AttentionKind, Mlp, SsmVersion};
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/unsupported/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// One Mamba1 layer: in_proj `2d·h`, conv1d `d·k + d`, x_proj `(r + 2n)·d`, dt_proj `d·r + d`,
/// A_log `d·n`, D `d`, out_proj `h·d`, the block's RMSNorm `h`.
fn mamba1_layer(h: u64, d: u64, n: u64, k: u64, r: u64) -> u64 {
    2 * d * h + (d * k + d) + (r + 2 * n) * d + (d * r + d) + d * n + d + h * d + h
}

/// state-spaces/mamba-2.8b-hf (`fixtures/unsupported/mamba-2.8b-hf.json`): h 2560, d 5120,
/// n 16, k 4, r 160, 64 layers, vocab 50280, tied head (MambaConfig's default).
/// Per layer 26,214,400 + 25,600 + 983,040 + 824,320 + 81,920 + 5,120 + 13,107,200 + 2,560 =
/// 41,244,160; × 64 = 2,639,626,240; + embeddings 50280·2560 = 128,716,800; + norm_f 2,560
/// = 2,768,345,600 (transformers on meta: 2768345600).
#[test]
fn mamba_2_8b() {
    let layer = mamba1_layer(2560, 5120, 16, 4, 160);
    assert_eq!(layer, 41_244_160);
    let total = 64 * layer + 50_280 * 2_560 + 2_560;
    assert_eq!(total, 2_768_345_600);
    let m = load_model(&fixture("mamba-2.8b-hf")).unwrap();
    assert_eq!(m.params_total, total);
    let inv = m.inventory.as_ref().unwrap();
    common::assert_shapes(
        &m,
        &[
            ("backbone.embeddings.weight", vec![50_280, 2_560]),
            (
                "backbone.layers.0.mixer.in_proj.weight",
                vec![10_240, 2_560],
            ),
            ("backbone.layers.0.mixer.conv1d.weight", vec![5_120, 1, 4]),
            ("backbone.layers.0.mixer.x_proj.weight", vec![192, 5_120]),
            ("backbone.layers.0.mixer.dt_proj.bias", vec![5_120]),
            ("backbone.layers.63.mixer.A_log", vec![5_120, 16]),
            ("backbone.layers.63.norm.weight", vec![2_560]),
            ("backbone.norm_f.weight", vec![2_560]),
        ],
    );
    assert!(inv.get("lm_head.weight").is_none(), "tied head");
}

/// state-spaces/mamba-130m-hf: the 2.8b config's published sizes for the 130m model (h 768,
/// 24 layers, `intermediate_size` 1536, `time_step_rank` 48; its config.json on the Hub).
/// Per layer 2,359,296 + 7,680 + 122,880 + 75,264 + 24,576 + 1,536 + 1,179,648 + 768 =
/// 3,771,648; × 24 = 90,519,552; + 50280·768 = 38,615,040; + 768 = 129,135,360 — the count a
/// public qualification report gives for the loaded checkpoint ("all 24 layers and
/// 129,135,360 parameters", code-index file id 71027897802).
#[test]
fn mamba_130m() {
    let layer = mamba1_layer(768, 1536, 16, 4, 48);
    assert_eq!(layer, 3_771_648);
    assert_eq!(24 * layer + 50_280 * 768 + 768, 129_135_360);
    let cfg = r#"{"architectures": ["MambaForCausalLM"], "model_type": "mamba",
        "hidden_size": 768, "intermediate_size": 1536, "num_hidden_layers": 24,
        "state_size": 16, "conv_kernel": 4, "expand": 2, "time_step_rank": 48,
        "use_bias": false, "use_conv_bias": true, "vocab_size": 50280,
        "torch_dtype": "float32"}"#;
    let p = parse_config_str(cfg, "mamba-130m.json").unwrap();
    let inv = vramscope_core::inventory::build_inventory(&p.spec).unwrap();
    assert_eq!(inv.params(), 129_135_360);
    // "auto" is ⌈768 / 16⌉ = 48: the same model.
    let auto = cfg.replace("\"time_step_rank\": 48", "\"time_step_rank\": \"auto\"");
    let p = parse_config_str(&auto, "mamba-130m.json").unwrap();
    let inv = vramscope_core::inventory::build_inventory(&p.spec).unwrap();
    assert_eq!(inv.params(), 129_135_360);
}

/// tiiuae/falcon-mamba-7b (`fixtures/unsupported/falcon-mamba-7b.json`): `expand` 16 but
/// `intermediate_size` 8192, which transformers applies (d 8192), h 4096, r 256, 64 layers,
/// vocab 65024, untied. Per layer 67,108,864 + 40,960 + 2,359,296 + 2,105,344 + 131,072 +
/// 8,192 + 33,554,432 + 4,096 = 105,312,256; × 64 = 6,739,984,384; + 2 · 65024·4096 =
/// 532,676,608; + 4,096 = 7,272,665,088 (transformers on meta: 7272665088; the model card's
/// "7.27B").
#[test]
fn falcon_mamba_7b() {
    let layer = mamba1_layer(4096, 8192, 16, 4, 256);
    assert_eq!(layer, 105_312_256);
    let total = 64 * layer + 2 * 65_024 * 4_096 + 4_096;
    assert_eq!(total, 7_272_665_088);
    let m = load_model(&fixture("falcon-mamba-7b")).unwrap();
    assert_eq!(m.params_total, total);
    let ssm = common::ssm_of(&m, 0);
    assert_eq!(ssm.version, SsmVersion::FalconMamba);
    assert_eq!(ssm.d_inner, 8_192);
}

/// Mamba2Config's defaults, which are mistralai/Mamba-Codestral-7B-v0.1's shapes (h 4096,
/// d 8192, 128 heads of 64, n 128, 8 groups, k 4, 64 layers, vocab 32768, untied).
/// conv_dim 8192 + 2·8·128 = 10,240; per layer in_proj (8192 + 10240 + 128)·4096 =
/// 76,021,760, conv1d 10240·4 + 10240 = 51,200, dt_bias/A_log/D 3·128 = 384, gated norm
/// 8,192, out_proj 33,554,432, block norm 4,096 → 109,640,064; × 64 = 7,016,964,096; plus
/// 2 · 32768·4096 = 268,435,456 and 4,096 → 7,285,403,648 (transformers on meta:
/// 7285403648; the model page's "7.29B").
#[test]
fn mamba2_codestral_shapes() {
    let layer: u64 = 76_021_760 + 51_200 + 384 + 8_192 + 33_554_432 + 4_096;
    assert_eq!(layer, 109_640_064);
    let total = 64 * layer + 2 * 32_768 * 4_096 + 4_096;
    assert_eq!(total, 7_285_403_648);
    let p = parse_config_str(
        r#"{"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"],
            "torch_dtype": "bfloat16"}"#,
        "codestral.json",
    )
    .unwrap();
    let inv = vramscope_core::inventory::build_inventory(&p.spec).unwrap();
    assert_eq!(inv.params(), total);
    let t = inv.get("backbone.layers.0.mixer.in_proj.weight").unwrap();
    assert_eq!(t.shape, vec![18_560, 4_096]);
    assert!(inv.get("lm_head.weight").is_some(), "untied head");
}

/// Every layer is a state-space mixer with no MLP and no K/V; the state per sequence is the
/// conv state plus the SSM state. mamba-2.8b: (5120·4 + 5120·16) values per layer =
/// 102,400. In a serving engine's cache, all in bf16: × 64 layers × 2 bytes = 13,107,200
/// bytes per sequence. In transformers' cache the SSM state is fp32 (the scan's final state,
/// `modeling_mamba.py` `selective_scan`): (5120·4·2 + 5120·16·4) = 368,640 bytes per layer,
/// × 64 = 23,592,960.
#[test]
fn state_replaces_kv() {
    let m = load_model(&fixture("mamba-2.8b-hf")).unwrap();
    let spec = m.spec.as_ref().unwrap();
    assert!(spec.decoder.layers.iter().all(|l| {
        matches!(l.attention.kind, AttentionKind::StateSpace(_)) && l.mlp == Mlp::None
    }));
    let (conv, ssm) = spec.decoder.layers[0]
        .attention
        .kind
        .state_space()
        .unwrap()
        .state_values();
    assert_eq!(conv + ssm, 102_400);
    use vramscope_core::estimate::kv::state_bytes_per_sequence;
    use vramscope_core::job::Framework;
    assert_eq!(
        state_bytes_per_sequence(spec, 2, Framework::Vllm),
        13_107_200
    );
    assert_eq!(
        state_bytes_per_sequence(spec, 2, Framework::Pytorch),
        23_592_960
    );
}

/// Malformed Mamba2 head layouts are refused with a one-line error, not a panic.
#[test]
fn mamba2_heads_must_tile_the_inner_width() {
    common::assert_refused(
        r#"{"model_type": "mamba2", "hidden_size": 64, "num_heads": 3, "head_dim": 16}"#,
        "num_heads",
    );
}

/// Mamba2's `chunk_size` (`Mamba2Config`, default 256) reaches the spec: `Mamba2Mixer.forward`
/// passes `self.chunk_size` to `mamba2_chunk_scan`, so the torch path's chunk tensors are sized
/// by it. Mamba1 has no chunked scan (0).
#[test]
fn mamba2_chunk_size_is_read() {
    let chunk = |text: &str| {
        let p = parse_config_str(text, "c.json").unwrap();
        let ssm = *p.spec.decoder.layers[0]
            .attention
            .kind
            .state_space()
            .unwrap();
        ssm.chunk
    };
    assert_eq!(chunk(r#"{"model_type": "mamba2"}"#), 256);
    assert_eq!(
        chunk(r#"{"model_type": "mamba2", "chunk_size": 64, "hidden_size": 256, "num_heads": 8}"#),
        64
    );
    assert_eq!(chunk(r#"{"model_type": "mamba"}"#), 0);
}
