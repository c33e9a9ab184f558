//! Gemma 3n (`gemma3n`, `gemma3n_text`): what only Gemma 3n has, held to transformers 5.24 —
//! bad text configs, the audio tower and embedders, the vision tower (timm's MobileNetV5) and
//! the whole conditional-generation model. The language model's counts, tensors and `DynamicCache` are checked with Gemma 4's
//! in `gemma_text.rs`.
//!
//! Meta-device counts: `/work/main/.venv-test/bin/python` with
//! `Gemma3nForCausalLM(Gemma3nTextConfig(**cfg))` under `torch.device("meta")`,
//! `sum(p.numel() for p in model.parameters())` (fixtures/gemma3n/README.md).

mod common;

use common::gemma::{assert_named_parameters, by_name, config, wrapped};
use serde_json::{Map, Value};
use vramscope_formats::hf_config::{gemma3n, gemma3n_audio, mobilenetv5, parse_config_str};

/// The whole `gemma3n` (conditional-generation) model is counted: E2B's text config under the
/// class-default vision and audio configs. transformers 5.24 on the meta device,
/// `Gemma3nForConditionalGeneration(Gemma3nConfig(text_config=e2b_text))`,
/// `sum(p.numel() for p in model.parameters())`: 5,418,464,192 — language model 4,435,182,688
/// (`gemma_text.rs`), audio tower 681,348,640 and embedders 7,805,952 (derived below), vision
/// tower 294,126,912 (`mobilenetv5_300m_enc`, derived in
/// `mobilenetv5_300m_counts_as_timm`); the head is tied, so `lm_head` is not counted again.
/// The towers are idle weights (no gradient); the embedders are not. E4B (text 6,835,235,568,
/// the same towers and embedders): 7,818,517,072, as transformers counts it.
#[test]
fn gemma3n_full_model_counts_as_transformers() {
    let e4b = wrapped("gemma3n", "gemma3n", "gemma-3n-e4b-text.json");
    let spec = parse_config_str(&e4b, "e4b").unwrap().spec;
    let inv = vramscope_core::inventory::build_inventory(&spec).unwrap();
    assert_eq!(inv.params(), 7_818_517_072);
    let wrapped = wrapped("gemma3n", "gemma3n", "gemma-3n-e2b-text.json");
    let parsed = parse_config_str(&wrapped, "e2b").unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let spec = parsed.spec;
    assert_eq!(spec.architecture, "Gemma3nForConditionalGeneration");
    let inv = vramscope_core::inventory::build_inventory(&spec).unwrap();
    assert_eq!(inv.params(), 5_418_464_192);
    let idle: u64 = inv
        .tensors
        .iter()
        .filter(|t| t.idle)
        .map(|t| t.elements())
        .sum();
    assert_eq!(idle, 294_126_912 + 681_348_640);
    let embedders: u64 = inv
        .tensors
        .iter()
        .filter(|t| {
            t.name.starts_with("model.embed_vision.") || t.name.starts_with("model.embed_audio.")
        })
        .map(|t| t.elements())
        .sum();
    assert_eq!(embedders, 7_805_952);
}

/// A `gemma3n` config whose vision tower is not `mobilenetv5_300m_enc` as timm builds it by
/// default (another architecture, or `model_args` passed to `timm.create_model`), or that has
/// no `text_config`, is refused in one line naming what is not read.
#[test]
fn gemma3n_unread_vision_configs_are_refused() {
    let text = serde_json::to_string(&config("gemma3n", "gemma-3n-e2b-text.json")).unwrap();
    for (vision, field) in [
        (r#"{"architecture": "mobilenetv5_base"}"#, "architecture"),
        (r#"{"model_args": {"drop_rate": 0.1}}"#, "model_args"),
    ] {
        let cfg = format!(
            r#"{{"model_type": "gemma3n", "text_config": {text}, "vision_config": {vision}}}"#
        );
        let err = parse_config_str(&cfg, "x").unwrap_err().to_string();
        assert!(err.contains(field), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
    let err = parse_config_str(r#"{"model_type": "gemma3n"}"#, "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("without text_config"), "{err}");
}

/// timm's `mobilenetv5_300m_enc` as `TimmWrapperModel` holds it, every tensor name and shape
/// equal to `named_parameters()` (`mobilenetv5-300m-tensors.json`, written by
/// `AutoModel.from_config(Gemma3nVisionConfig())` on the meta device, timm 1.0.31,
/// transformers 5.24): 294,126,912 parameters. By hand, one block of each kind
/// (`_efficientnet_blocks.py`, `attention2d.py`, `mobilenetv5.py`):
/// - stem `ConvNormAct(3, 64, 3, bias=True)` with `RmsNorm2d`: 64·3·9 + 64 + 64 = 1,856
/// - `er_r1_k3_s2_e4_c128` (`EdgeResidual`, 64 → mid 256 → 128): 256·64·9 + 256 + 128·256 +
///   128 = 180,608
/// - `uir_r1_a3_k5_s2_e6_c256` (`UniversalInvertedResidual`, 128 → 768 → 256): dw_start
///   128·9 + 128, pw_exp 768·128 + 768, dw_mid 768·25 + 768, pw_proj 256·768 + 256, layer
///   scale 256: 317,440
/// - `mqa_r1_k3_h12_v2_s1_d64_c640` (`MobileAttention` / `MultiQueryAttention2d`, kv stride
///   2): norm 640, query 768·640, key and value each down_conv 640·9 + norm 640 + proj
///   64·640, output 640·768, layer scale 640 = 1,079,040
/// - the fusion adapter over 640 + 1280 = 1920 channels: pw_exp 3840·1920 + 3840, pw_proj
///   2048·3840 + 2048, norm 2048 = 15,245,056.
#[test]
fn mobilenetv5_300m_counts_as_timm() {
    let ours = by_name(mobilenetv5::tower_tensors("model.vision_tower.timm_model"));
    let sum = |prefix: &str| -> u64 {
        ours.iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(_, s)| s.iter().product::<u64>())
            .sum()
    };
    let p = "model.vision_tower.timm_model";
    assert_eq!(sum(&format!("{p}.conv_stem.")), 1_856);
    assert_eq!(sum(&format!("{p}.blocks.0.0.")), 180_608);
    assert_eq!(sum(&format!("{p}.blocks.1.0.")), 317_440);
    assert_eq!(sum(&format!("{p}.blocks.2.9.")), 1_079_040);
    assert_eq!(sum(&format!("{p}.msfa.")), 15_245_056);
    assert_eq!(sum(p), 294_126_912);
    assert_named_parameters(&ours, "gemma3n", "mobilenetv5-300m-tensors.json");
}

/// Bad input is refused naming the field, where transformers raises: kv sharing that leaves
/// the full layers no producer, a widths list of the wrong length, an active AltUp stream out
/// of range, a sparsity of 1 (the Gaussian quantile is infinite), hidden not divisible by
/// the heads; and sizes too large to build (a head 2^39 wide over 4 heads, 2^21 AltUp streams
/// whose `prediction_coefs` would be 2^42 wide).
#[test]
fn gemma3n_bad_configs_are_refused() {
    let cases: [(&str, Value); 7] = [
        ("head_dim", (1u64 << 39).into()),
        ("altup_num_inputs", (1u64 << 21).into()),
        ("num_kv_shared_layers", 4.into()),
        ("intermediate_size", serde_json::json!([64, 64])),
        ("altup_active_idx", 3.into()),
        (
            "activation_sparsity_pattern",
            serde_json::json!([1.0, 0.0, 0.0, 0.0, 0.0]),
        ),
        ("num_attention_heads", 5.into()),
    ];
    for (key, value) in cases {
        let mut cfg = config("gemma3n", "tiny-bias-untied-text.json");
        cfg.insert(key.into(), value);
        let err = gemma3n::text_params(&cfg, "x").unwrap_err().to_string();
        let field = if key == "num_attention_heads" {
            "hidden_size"
        } else {
            key
        };
        assert!(err.contains(field), "{key}: {err}");
        assert!(!err.contains('\n'), "{err}");
    }
}

/// Gemma 3n's audio tower with `Gemma3nAudioConfig`'s class defaults (what an absent
/// `audio_config` reads as). transformers on the meta device (`Gemma3nAudioEncoder(Gemma3nAudioConfig())`):
/// 681,348,640. By hand (`modeling_gemma3n.py`), hidden 1536, 12 conformer blocks:
/// - subsample: `Conv2d` 1 → 128 (3×3) 1,152 and its norm 128; 128 → 32 (3×3) 36,864 and 32;
///   frequencies 128 → (130 − 3) // 2 + 1 = 64 → 32; `input_proj_linear` 1536 · 32·32 =
///   1,572,864 → 1,611,040
/// - each block: two feed-forwards 2 · (2·1536·6144 + 2·1536) = 37,754,880; attention
///   5·1536² (pos_proj, q, k, v, post) + per_dim_scale 192 + two norms 3,072 = 11,799,744;
///   light conv 1536·3072 + 1536·5 + 1536² + two norms = 7,088,640; norm 1,536 →
///   56,644,800 · 12 = 679,737,600
/// - total 681,348,640. The embedders (`Gemma3nMultimodalEmbedder`, text hidden 2048): audio
///   128·1536 + 2·1536 + 2048·1536 = 3,345,408; vision 128·2048 + 2·2048 + 2048² = 4,460,544;
///   7,805,952 together.
#[test]
fn gemma3n_audio_tower_counts_as_transformers() {
    let empty = Map::new();
    let audio = gemma3n_audio::audio_tensors(&empty, "defaults").unwrap();
    assert_eq!(
        gemma3n_audio::params(&audio, "defaults").unwrap(),
        681_348_640
    );
    let a = gemma3n_audio::embedder_tensors("embed_audio", &empty, "d", (1536, 2048)).unwrap();
    let v = gemma3n_audio::embedder_tensors("embed_vision", &empty, "d", (2048, 2048)).unwrap();
    assert_eq!(gemma3n_audio::params(&a, "d").unwrap(), 3_345_408);
    assert_eq!(gemma3n_audio::params(&v, "d").unwrap(), 4_460_544);
}

/// A tiny audio config with uneven kernels and strides, every tensor name and shape equal to
/// `Gemma3nAudioEncoder.named_parameters()` on the meta device (`tiny-audio-tensors.json`):
/// 199,364 parameters. By hand: frequencies 20 → (22 − 5) // 3 + 1 = 6 → (8 − 3) // 2 + 1 =
/// 3; convolutions 8·1·3·5 + 8 + 4·8·3·3 + 4 = 420, `input_proj_linear` 64 · 4·3 = 768; each
/// of 2 blocks: feed-forwards 2 · (2·64·256 + 128) = 65,792, attention 5·64² + 16 + 128 =
/// 20,624, light conv 64·128 + 64·3 + 64² + 128 = 12,608, norm 64: 99,088.
#[test]
fn gemma3n_tiny_audio_tensors_match_transformers() {
    let cfg = config("gemma3n", "tiny-audio.json");
    let ours = by_name(gemma3n_audio::audio_tensors(&cfg, "tiny").unwrap());
    assert_named_parameters(&ours, "gemma3n", "tiny-audio-tensors.json");
    let count = gemma3n_audio::params(&ours.into_iter().collect::<Vec<_>>(), "tiny").unwrap();
    assert_eq!(count, 199_364);
}

/// Sizes whose product overflows 64 bits are refused, not wrapped or panicked on.
#[test]
fn gemma3n_overflowing_sizes_are_refused() {
    let mut cfg = config("gemma3n", "tiny-bias-untied-text.json");
    cfg.insert("vocab_size".into(), (1u64 << 40).into());
    cfg.insert("hidden_size".into(), (1u64 << 40).into());
    cfg.insert("num_attention_heads".into(), 1.into());
    let err = gemma3n::text_params(&cfg, "x").unwrap_err().to_string();
    assert!(err.contains("overflows"), "{err}");
}

/// The measured tiny whole model (`validation/specs/cpu-tiny-gemma3nfull-fp32-adamw-sdpa.json`)
/// and its head tie. transformers 5.24 on the meta device,
/// `Gemma3nForConditionalGeneration(Gemma3nConfig(text_config=…, audio_config=…,
/// tie_word_embeddings=…))`: 304,345,636 with the top-level tie true (its default) even where
/// the text config says false, 306,442,788 with it false. By hand: the text model 9,211,296
/// (`crates/core/tests/gemma3n.rs`), the vision tower 294,126,912, the tiny audio tower 199,364,
/// the embedders 128·2048 + 2·2048 + 256·2048 = 790,528 and 16·64 + 2·64 + 256·64 = 17,536;
/// untied, `lm_head` 8192·256 = 2,097,152 more.
#[test]
fn gemma3n_tiny_whole_model_and_its_tie() {
    let path = format!(
        "{}/../../validation/specs/cpu-tiny-gemma3nfull-fp32-adamw-sdpa.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (top, text, count) in [(true, false, 304_345_636u64), (false, true, 306_442_788)] {
        let mut cfg = spec["hf_config"].clone();
        cfg["tie_word_embeddings"] = top.into();
        cfg["text_config"]["tie_word_embeddings"] = text.into();
        let parsed = parse_config_str(&cfg.to_string(), "tiny").unwrap();
        let inv = vramscope_core::inventory::build_inventory(&parsed.spec).unwrap();
        assert_eq!(inv.params(), count, "top {top} text {text}");
    }
}
