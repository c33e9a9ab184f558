//! Gemma 3n (`gemma3n`, `gemma3n_text`): the language model counted tensor by tensor as
//! transformers 5.24 builds `Gemma3nForCausalLM`, its `DynamicCache`, and the one-line refusal
//! of the multimodal wrapper.
//!
//! Meta-device counts: `/work/main/.venv-test/bin/python` with
//! `Gemma3nForCausalLM(Gemma3nTextConfig(**cfg))` under `torch.device("meta")`,
//! `sum(p.numel() for p in model.parameters())` (fixtures/gemma3n/README.md).

mod common;

use common::gemma::{assert_inventory_is_reader, assert_named_parameters, by_name};
use serde_json::{Map, Value};
use vramscope_formats::hf_config::{gemma3n, gemma3n_audio, parse_config_str};

/// The config `tests/fixtures/gemma3n/<name>`.
fn fixture(name: &str) -> Map<String, Value> {
    common::gemma::config("gemma3n", name)
}

/// Gemma-3n-E2B's text config. transformers on the meta device: 4,435,182,688.
/// By hand (`modeling_gemma3n.py`): hidden 2048, 30 layers, 8 heads of 256, 2 kv heads,
/// layers 20–29 reuse kv, MLP 8192, per-layer inputs 256, 4 AltUp streams, LAuReL rank 64.
/// - top: embed 262400·2048 = 537,395,200; per-layer embed 262144·(30·256) = 2,013,265,920;
///   per_layer_model_projection 2048·7680 = 15,728,640; its norm 256; AltUp projections and
///   unembed projections 6·2048² = 25,165,824; final norm 2048 → 2,591,557,888
/// - attention with own kv (20 layers): q and o 2·2048², k and v 2·2048·512, q/k norms 512:
///   10,486,272 each → 209,725,440; shared (10 layers): q, o, q norm 8,388,864 → 83,888,640
/// - every layer: MLP 3·2048·8192 = 50,331,648; four norms 8,192; AltUp scale 2048,
///   correction 16, prediction 64, router 8,192, router norm 2048 (12,368); LAuReL
///   2·2048·64 + 2048 = 264,192; per-layer gate, projection and norm 2·2048·256 + 2048 =
///   1,050,624 → 51,667,024 · 30 = 1,550,010,720
/// - total 2,591,557,888 + 209,725,440 + 83,888,640 + 1,550,010,720 = 4,435,182,688
#[test]
fn gemma3n_e2b_text_counts_as_transformers() {
    let cfg = fixture("gemma-3n-e2b-text.json");
    assert_eq!(gemma3n::text_params(&cfg, "e2b").unwrap(), 4_435_182_688);
}

/// Gemma-3n-E4B's text config. transformers on the meta device: 6,835,235,568.
/// By hand: 35 layers, layers 20–34 reuse kv, MLP 16384.
/// - top: 537,395,200 + 262144·8960 = 2,348,810,240 + 2048·8960 = 18,350,080 + 256 +
///   25,165,824 + 2048 → 2,929,723,648
/// - attention: 20 · 10,486,272 = 209,725,440; 15 · 8,388,864 = 125,832,960
/// - every layer: 3·2048·16384 = 100,663,296 + 8,192 + 12,368 + 264,192 + 1,050,624 =
///   101,998,672 · 35 = 3,569,953,520
/// - total 2,929,723,648 + 209,725,440 + 125,832,960 + 3,569,953,520 = 6,835,235,568 (also
///   `Gemma3nTextConfig()`'s class defaults: the defaults table's `gemma3n_text` row)
#[test]
fn gemma3n_e4b_text_counts_as_transformers() {
    let cfg = fixture("gemma-3n-e4b-text.json");
    assert_eq!(gemma3n::text_params(&cfg, "e4b").unwrap(), 6_835_235_568);
}

/// A tiny config exercising what the published ones do not: per-layer MLP widths (MatFormer),
/// attention biases, three AltUp streams with the active one at 1, a per-layer vocabulary
/// smaller than the token one, an untied head, full layers not on the default pattern.
/// transformers on the meta device: 148,076. By hand (hidden 48, 4 heads of 16, 2 kv heads,
/// layers 3–4 reuse kv):
/// - embed and head 2·300·48 = 28,800; final norm 48; per-layer table 200·40 = 8,000, its
///   projection 48·40 = 1,920 and norm 8; AltUp projections 4·48² = 9,216 → 47,992
/// - own kv (layers 0–2): q 3,136, k 1,568, v 1,568, o 3,120, norms 32: 9,424 · 3 = 28,272;
///   shared (3–4): 3,136 + 3,120 + 16 = 6,272 · 2 = 12,544
/// - MLPs 3·48·(96 + 64 + 96 + 64 + 32) = 50,688
/// - every layer: norms 192, AltUp 48 + 9 + 27 + 144 + 48 = 276, LAuReL 2·48·4 + 48 = 432,
///   per-layer branch 2·48·8 + 48 = 816: 1,716 · 5 = 8,580
/// - total 148,076
#[test]
fn gemma3n_tiny_counts_as_transformers() {
    let cfg = fixture("tiny-bias-untied-text.json");
    assert_eq!(gemma3n::text_params(&cfg, "tiny").unwrap(), 148_076);
}

/// Every tensor name and shape equals `model.named_parameters()` on the meta device
/// (`tiny-bias-untied-tensors.json`, written by transformers 5.24).
#[test]
fn gemma3n_tensor_names_and_shapes_match_transformers() {
    let cfg = fixture("tiny-bias-untied-text.json");
    let ours = by_name(gemma3n::text_tensors(&cfg, "tiny").unwrap());
    assert_named_parameters(&ours, "gemma3n", "tiny-bias-untied-tensors.json");
}

/// The text config is read into a model the estimator takes, whose inventory is the reader's
/// tensor list name by name and shape by shape; the multimodal `gemma3n` config is refused in
/// one line with the language model's count, naming the towers.
#[test]
fn gemma3n_text_is_read_for_the_estimator_and_the_full_model_refused() {
    for (name, count) in [
        ("gemma-3n-e2b-text.json", 4_435_182_688u64),
        ("gemma-3n-e4b-text.json", 6_835_235_568),
        ("tiny-bias-untied-text.json", 148_076),
    ] {
        let cfg = fixture(name);
        let reader = gemma3n::text_tensors(&cfg, name).unwrap();
        assert_inventory_is_reader(&cfg, name, count, reader);
    }
    let text = serde_json::to_string(&fixture("gemma-3n-e2b-text.json")).unwrap();
    let wrapped = format!(r#"{{"model_type": "gemma3n", "text_config": {text}}}"#);
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
        let mut cfg = fixture("tiny-bias-untied-text.json");
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

/// The `DynamicCache` after a prefill, as measured on the CPU with transformers 5.24 (the tiny
/// config, batch 2, 20 tokens, then one more: the cache layers' `keys.numel() +
/// values.numel()` summed, 6,400 then 6,528; layers DynamicSlidingWindowLayer,
/// DynamicLayer, DynamicSlidingWindowLayer, DummyLayer ×2). By hand: sliding owners 0 and 2
/// keep min(20, 16 − 1) = 15 tokens, 2·2·2·15·16 = 1,920 each; the full owner 1 keeps 20,
/// 2·2·2·20·16 = 2,560 → 6,400; a token more: 3,840 + 2·2·2·21·16 = 6,528.
#[test]
fn gemma3n_dynamic_cache_matches_transformers() {
    let cfg = fixture("tiny-bias-untied-text.json");
    let cache = gemma3n::cache_layers(&cfg, "t").unwrap();
    assert_eq!(cache.elements(2, 20).unwrap(), 6_400);
    assert_eq!(cache.elements(2, 21).unwrap(), 6_528);
}

/// E2B, one sequence of 4,096 tokens: only layers 0–19 hold a cache. 16 sliding layers keep
/// 511 tokens of two 256-wide kv heads: 2·2·511·256 = 523,264 each, 8,372,224; 4 full layers
/// keep 4,096: 2·2·4096·256 = 4,194,304 each, 16,777,216 → 25,149,440 elements.
#[test]
fn gemma3n_e2b_cache_by_hand() {
    let cfg = fixture("gemma-3n-e2b-text.json");
    let cache = gemma3n::cache_layers(&cfg, "e2b").unwrap();
    assert_eq!(cache.elements(1, 4096).unwrap(), 25_149_440);
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
    let cfg = fixture("tiny-audio.json");
    let ours = by_name(gemma3n_audio::audio_tensors(&cfg, "tiny").unwrap());
    assert_named_parameters(&ours, "gemma3n", "tiny-audio-tensors.json");
    let count = gemma3n_audio::params(&ours.into_iter().collect::<Vec<_>>(), "tiny").unwrap();
    assert_eq!(count, 199_364);
}

/// Sizes whose product overflows 64 bits are refused, not wrapped or panicked on.
#[test]
fn gemma3n_overflowing_sizes_are_refused() {
    let mut cfg = fixture("tiny-bias-untied-text.json");
    cfg.insert("vocab_size".into(), (1u64 << 40).into());
    cfg.insert("hidden_size".into(), (1u64 << 40).into());
    cfg.insert("num_attention_heads".into(), 1.into());
    let err = gemma3n::text_params(&cfg, "x").unwrap_err().to_string();
    assert!(err.contains("overflows"), "{err}");
}
