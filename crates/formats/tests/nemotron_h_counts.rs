//! Nemotron-H / Nemotron-3 (`nemotron_h`): parameter counts derived by hand from the tensor
//! shapes of transformers 5.24 `modeling_nemotron_h.py` and checked against transformers
//! building the model from the same config on the meta device (`/work/main/.venv-test`):
//!
//! ```text
//! d = json.load(open(path)); d.pop("model_type"); d.pop("architectures")
//! cfg = transformers.NemotronHConfig(**d)
//! with torch.device("meta"): m = AutoModelForCausalLM.from_config(cfg)
//! sum(p.numel() for p in m.parameters())
//! ```

mod common;

use vramscope_core::model::{AttentionKind, Mlp};
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    common::fixture_path("hybrid", &format!("{name}.json"))
}

/// One `NemotronHMamba2Mixer` block with its norm: `d = heads · head_dim`, `conv = d + 2·g·n`;
/// `in_proj [d + conv + heads, h]`, `conv1d [conv, 1, k]` + bias `[conv]`, `dt_bias`, `A_log`,
/// `D` `[heads]`, the gated `norm [d]`, `out_proj [h, d]`, the block's `norm [h]`.
fn mamba_block(h: u64, heads: u64, head_dim: u64, g: u64, n: u64, k: u64) -> u64 {
    let d = heads * head_dim;
    let conv = d + 2 * g * n;
    h * (d + conv + heads) + conv * k + conv + 3 * heads + d + d * h + h
}

/// One `NemotronHAttention` block with its norm: q `[heads·hd, h]`, k and v `[kv·hd, h]`, o
/// `[h, heads·hd]`, no biases; the block's `norm [h]`.
fn attention_block(h: u64, heads: u64, kv: u64, hd: u64) -> u64 {
    2 * h * heads * hd + 2 * h * kv * hd + h
}

/// NVIDIA-Nemotron-Nano-9B-v2 (`fixtures/hybrid/nemotron-nano-9b-v2.json`): h 4480, pattern
/// of 27 `M`, 4 `*`, 25 `-`; Mamba 128 heads × 80 = 10240 in 8 groups, n 128, k 4; 40 heads of
/// 128 over 8 KV heads; MLP 15680 (up and down, no gate); vocab 131072, untied.
/// Mamba block 4480·22656 + 12288·5 + 384 + 10240 + 10240·4480 + 4480 = 147,450,624;
/// attention 2·4480·5120 + 2·4480·1024 + 4480 = 55,054,720; MLP 2·4480·15680 + 4480 =
/// 140,497,280; embeddings + head 2·131072·4480 = 1,174,405,120; norm_f 4480.
/// 27·147,450,624 + 4·55,054,720 + 25·140,497,280 + 1,174,405,120 + 4480 = 8,888,227,328
/// (transformers 5.24 on meta: 8888227328; the model page says 8.89B).
#[test]
fn nemotron_nano_9b_v2() {
    let mamba = mamba_block(4480, 128, 80, 8, 128, 4);
    assert_eq!(mamba, 147_450_624);
    let attn = attention_block(4480, 40, 8, 128);
    assert_eq!(attn, 55_054_720);
    let mlp = 2 * 4480 * 15680 + 4480;
    let total = 27 * mamba + 4 * attn + 25 * mlp + 2 * 131072 * 4480 + 4480;
    assert_eq!(total, 8_888_227_328);
    let m = load_model(&fixture("nemotron-nano-9b-v2")).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    let attention: Vec<usize> = spec
        .decoder
        .layers
        .iter()
        .enumerate()
        .filter(|(_, l)| matches!(l.attention.kind, AttentionKind::Standard { heads: 40, .. }))
        .map(|(i, _)| i)
        .collect();
    // "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-": `*` at 14, 21, 30, 39.
    assert_eq!(attention, vec![14, 21, 30, 39]);
    let inv = m.inventory.as_ref().unwrap();
    let shape = |name: &str| {
        inv.tensors
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .shape
            .clone()
    };
    assert_eq!(
        shape("backbone.layers.0.mixer.in_proj.weight"),
        vec![22656, 4480]
    );
    assert_eq!(
        shape("backbone.layers.0.mixer.conv1d.weight"),
        vec![12288, 1, 4]
    );
    assert_eq!(
        shape("backbone.layers.1.mixer.up_proj.weight"),
        vec![15680, 4480]
    );
    assert_eq!(
        shape("backbone.layers.14.mixer.k_proj.weight"),
        vec![1024, 4480]
    );
    assert_eq!(shape("backbone.layers.14.norm.weight"), vec![4480]);
    assert_eq!(shape("backbone.embeddings.weight"), vec![131072, 4480]);
    assert_eq!(shape("backbone.norm_f.weight"), vec![4480]);
    assert_eq!(shape("lm_head.weight"), vec![131072, 4480]);
}

/// NVIDIA-Nemotron-3-Nano-30B-A3B (`fixtures/hybrid/nemotron-3-nano-30b-a3b.json`): h 2688,
/// pattern of 23 `M`, 23 `E`, 6 `*`; Mamba 64 heads × 64 = 4096 in 8 groups, n 128, k 4; 32
/// heads of 128 over 2 KV heads; 128 experts of 1856 (6 per token), shared expert 3712, no
/// latent; vocab 131072, untied.
/// Mamba block 2688·10304 + 6144·5 + 192 + 4096 + 4096·2688 + 2688 = 38,744,896; attention
/// 2·2688·4096 + 2·2688·256 + 2688 = 23,399,040; MoE block router 128·2688 + experts
/// 128·2·2688·1856 + shared 2·2688·3712 + norm 2688 = 1,297,468,032; embeddings + head
/// 2·131072·2688 = 704,643,072; norm_f 2688.
/// 23·38,744,896 + 6·23,399,040 + 23·1,297,468,032 + 704,643,072 + 2688 = 31,577,937,344
/// (transformers 5.24 on meta: 31577937344; the model page says 31.6B total, 3.2B active).
#[test]
fn nemotron_3_nano_30b_a3b() {
    let mamba = mamba_block(2688, 64, 64, 8, 128, 4);
    assert_eq!(mamba, 38_744_896);
    let attn = attention_block(2688, 32, 2, 128);
    assert_eq!(attn, 23_399_040);
    let moe = 128 * 2688 + 128 * 2 * 2688 * 1856 + 2 * 2688 * 3712 + 2688;
    assert_eq!(moe, 1_297_468_032);
    let total = 23 * mamba + 6 * attn + 23 * moe + 2 * 131072 * 2688 + 2688;
    assert_eq!(total, 31_577_937_344);
    let m = load_model(&fixture("nemotron-3-nano-30b-a3b")).unwrap();
    assert_eq!(m.params_total, total);
    let spec = m.spec.as_ref().unwrap();
    let Mlp::Moe(moe) = &spec.decoder.layers[1].mlp else {
        panic!("layer 1 is E");
    };
    assert_eq!((moe.experts, moe.top_k, moe.latent), (128, 6, None));
    let inv = m.inventory.as_ref().unwrap();
    let names: Vec<&str> = inv
        .tensors
        .iter()
        .filter(|t| t.layer == Some(1) && !t.name.contains(".experts."))
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "backbone.layers.1.norm.weight",
            "backbone.layers.1.mixer.gate.weight",
            "backbone.layers.1.mixer.shared_experts.up_proj.weight",
            "backbone.layers.1.mixer.shared_experts.down_proj.weight",
        ]
    );
}

/// Nemotron-3's latent MoE (`moe_latent_size`): a tiny config, by hand from `NemotronHMoE`:
/// h 64, pattern "ME"; Mamba 4 heads × 16 = 64 in 2 groups, n 8, k 4; 4 experts of 32 in a
/// latent of 16, shared 48, `mlp_bias` true; vocab 100, untied.
/// Mamba block 64·(64 + 96 + 4) + 96·5 + 12 + 64 + 64·64 + 64 = 15,212; MoE block: router
/// 4·64, latent projections (16·64 + 16) and (64·16 + 64), experts 4·2·32·16, shared (48·64 +
/// 48) and (64·48 + 64), norm 64: 12,800; embeddings + head 2·100·64 = 12,800; norm_f 64:
/// 40,876 (transformers 5.24 on meta: 40876).
#[test]
fn latent_moe_by_hand() {
    let cfg = r#"{"model_type": "nemotron_h", "hidden_size": 64, "hybrid_override_pattern": "ME",
        "mamba_num_heads": 4, "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 8,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "moe_latent_size": 16, "moe_shared_expert_intermediate_size": 48, "mlp_bias": true,
        "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}"#;
    let mamba = mamba_block(64, 4, 16, 2, 8, 4);
    assert_eq!(mamba, 15_212);
    let moe = 4 * 64
        + (16 * 64 + 16)
        + (64 * 16 + 64)
        + 4 * 2 * 32 * 16
        + (48 * 64 + 48)
        + (64 * 48 + 64)
        + 64;
    assert_eq!(moe, 12_800);
    let total = mamba + moe + 2 * 100 * 64 + 64;
    assert_eq!(total, 40_876);
    let parsed = parse_config_str(cfg, "latent").unwrap();
    let inv = vramscope_core::inventory::build_inventory(&parsed.spec).unwrap();
    assert_eq!(inv.params(), total);
}

/// Layer lists: `layers_block_type` (legacy names too) wins over the pattern; unknown kinds and
/// characters are refused in one line.
#[test]
fn layer_lists_and_refusals() {
    let base = r#""model_type": "nemotron_h", "hidden_size": 64, "mamba_num_heads": 4,
        "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 8, "vocab_size": 100,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16"#;
    let listed = format!(
        r#"{{{base}, "layers_block_type": ["mamba", "attention", "mlp"],
        "hybrid_override_pattern": "MMMMMM"}}"#
    );
    let spec = parse_config_str(&listed, "t").unwrap().spec;
    assert_eq!(spec.decoder.layers.len(), 3);
    assert!(spec.decoder.layers[0]
        .attention
        .kind
        .state_space()
        .is_some());
    assert!(matches!(
        spec.decoder.layers[1].attention.kind,
        AttentionKind::Standard { heads: 4, .. }
    ));
    assert!(spec.decoder.layers[2].attention.is_absent());
    for bad in [
        r#""hybrid_override_pattern": "M?""#,
        r#""layers_block_type": ["mamba", "conv"]"#,
        r#""hybrid_override_pattern": "M", "n_groups": 3"#,
        r#""hybrid_override_pattern": "E", "num_experts_per_tok": 9"#,
        r#""hybrid_override_pattern": """#,
    ] {
        common::refusal(&format!("{{{base}, {bad}}}"));
    }
}

/// The tiny config of the measured CPU steps (`validation/specs/cpu-tiny-nemotron-h-*.json`,
/// "M*-E", h 256, vocab 8192, untied), by hand: Mamba block (8 heads × 64 = 512, one group, n
/// 16, k 4; conv 544) 256·1064 + 544·5 + 24 + 512 + 512·256 + 256 = 406,968; attention (8 heads
/// of 32 over 2) 2·256·256 + 2·256·64 + 256 = 164,096; MLP 2·256·512 + 256 = 262,400; MoE router
/// 4·256 + experts 4·2·256·128 + shared 2·256·256 + norm 256 = 394,496; embeddings + head
/// 2·8192·256 = 4,194,304; norm_f 256: 5,422,520 (`measure.py` printed 5,422,520 from
/// transformers 5.24).
#[test]
fn tiny_nemotron_h_of_the_measured_step() {
    let parsed = common::measured_config("cpu-tiny-nemotron-h-fp32-adamw-eager");
    let mamba = mamba_block(256, 8, 64, 1, 16, 4);
    assert_eq!(mamba, 406_968);
    let attn = attention_block(256, 8, 2, 32);
    assert_eq!(attn, 164_096);
    let total = mamba
        + attn
        + (2 * 256 * 512 + 256)
        + (4 * 256 + 4 * 2 * 256 * 128 + 2 * 256 * 256 + 256)
        + 2 * 8192 * 256
        + 256;
    assert_eq!(total, 5_422_520);
    let inv = vramscope_core::inventory::build_inventory(&parsed.spec).unwrap();
    assert_eq!(inv.params(), total);
}

/// Nemotron-H base models: per case, (fixture; h; Mamba heads, head dim, groups, d_state;
/// attention heads, KV heads; MLP width; layers of `M`, `*`, `-`), the Mamba block, the
/// attention block and the total, each by hand; vocab 131072, untied (embeddings + head
/// `2·131072·h`), norm_f `h`, conv kernel 4, attention head 128.
#[test]
fn nemotron_h_base_models() {
    struct Case {
        fixture: &'static str,
        h: u64,
        mamba: (u64, u64, u64, u64),
        attn: (u64, u64),
        mlp: u64,
        counts: (u64, u64, u64),
        want: (u64, u64, u64),
    }
    let cases = [
        // Nemotron-H-8B-Base-8K (`fixtures/hybrid/nemotron-h-8b-base-8k.json`): h 4096,
        // pattern of 24 `M`, 4 `*`, 24 `-`; Mamba 128 heads × 64 = 8192 in 8 groups, n 128
        // (conv 10240); 32 heads of 128 over 8; MLP 21504. Mamba block 4096·18560 + 10240·5 +
        // 384 + 8192 + 8192·4096 + 4096 = 109,640,064; attention 2·4096·4096 + 2·4096·1024 +
        // 4096 = 41,947,136; MLP 2·4096·21504 + 4096 = 176,164,864; embeddings + head
        // 1,073,741,824; norm_f 4096: 8,100,852,736 (transformers 5.24 on meta: 8100852736; the
        // model page says 8.1B).
        Case {
            fixture: "nemotron-h-8b-base-8k",
            h: 4096,
            mamba: (128, 64, 8, 128),
            attn: (32, 8),
            mlp: 21504,
            counts: (24, 4, 24),
            want: (109_640_064, 41_947_136, 8_100_852_736),
        },
        // Nemotron-H-56B-Base-8K (`fixtures/hybrid/nemotron-h-56b-base-8k.json`, whose
        // `time_step_limit` holds Python's `Infinity`): h 8192, 118 layers, 54 `M`, 10 `*`, 54
        // `-`; Mamba 256 heads × 64 = 16384 in 8 groups, n 256 (conv 20480); 64 heads of 128
        // over 8; MLP 32768. Mamba block 8192·37120 + 20480·5 + 768 + 16384 + 16384·8192 +
        // 8192 = 438,432,512; attention 2·8192·8192 + 2·8192·1024 + 8192 = 151,003,136; MLP
        // 2·8192·32768 + 8192 = 536,879,104; embeddings + head 2,147,483,648; norm_f 8192:
        // 56,324,350,464 (transformers 5.24 on meta: 56324350464; the model page says 56B).
        Case {
            fixture: "nemotron-h-56b-base-8k",
            h: 8192,
            mamba: (256, 64, 8, 256),
            attn: (64, 8),
            mlp: 32768,
            counts: (54, 10, 54),
            want: (438_432_512, 151_003_136, 56_324_350_464),
        },
    ];
    for c in cases {
        let (heads, hd, g, n) = c.mamba;
        let mamba = mamba_block(c.h, heads, hd, g, n, 4);
        assert_eq!(mamba, c.want.0, "{}", c.fixture);
        let attn = attention_block(c.h, c.attn.0, c.attn.1, 128);
        assert_eq!(attn, c.want.1, "{}", c.fixture);
        let mlp = 2 * c.h * c.mlp + c.h;
        let (m, a, f) = c.counts;
        let total = m * mamba + a * attn + f * mlp + 2 * 131072 * c.h + c.h;
        assert_eq!(total, c.want.2, "{}", c.fixture);
        let loaded = load_model(&fixture(c.fixture)).unwrap();
        assert_eq!(loaded.params_total, total, "{}", c.fixture);
    }
}
