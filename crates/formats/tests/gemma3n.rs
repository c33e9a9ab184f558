//! Gemma 3n (`gemma3n`, `gemma3n_text`): what only Gemma 3n has, held to transformers 5.24 —
//! bad text configs, the audio tower and embedders, and the one-line refusal of the multimodal
//! wrapper. The language model's counts, tensors and `DynamicCache` are checked with Gemma 4's
//! in `gemma_text.rs`.
//!
//! Meta-device counts: `/work/main/.venv-test/bin/python` with
//! `Gemma3nForCausalLM(Gemma3nTextConfig(**cfg))` under `torch.device("meta")`,
//! `sum(p.numel() for p in model.parameters())` (fixtures/gemma3n/README.md).

mod common;

use common::gemma::{assert_named_parameters, by_name, config, wrapped};
use serde_json::{Map, Value};
use vramscope_formats::hf_config::{gemma3n, gemma3n_audio, parse_config_str};

/// The multimodal `gemma3n` config is refused in one line with the language model's count
/// (E2B's, derived in `gemma_text.rs`), naming the towers. (The text configs are read for the
/// estimator in `gemma_text.rs`.)
#[test]
fn gemma3n_full_model_is_refused() {
    let wrapped = wrapped("gemma3n", "gemma3n", "gemma-3n-e2b-text.json");
    let err = parse_config_str(&wrapped, "e2b").unwrap_err().to_string();
    assert!(err.contains("4435182688 parameters"), "{err}");
    // The class-default audio tower and the two embedders (see the audio tests below).
    assert!(err.contains("audio tower 681348640"), "{err}");
    assert!(err.contains("embedders 7805952"), "{err}");
    assert!(
        err.contains("vision tower (timm's mobilenetv5_300m_enc) is not counted"),
        "{err}"
    );
    assert!(
        err.contains("vision and audio towers are not modelled"),
        "{err}"
    );
    assert!(err.contains("gemma3n_text"), "{err}");
    assert!(!err.contains('\n'), "{err}");
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
