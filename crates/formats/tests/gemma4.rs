//! Gemma 4 (`gemma4`, `gemma4_text`): the language model counted tensor by tensor as
//! transformers 5.24 builds `Gemma4ForCausalLM`, the whole `Gemma4ForConditionalGeneration`
//! with its vision and audio towers, read for the estimator with the audio tower loaded. The
//! language model's counts, tensors and `DynamicCache` are checked with Gemma 3n's in
//! `gemma_text.rs`.
//!
//! Meta-device counts: `/work/main/.venv-test/bin/python` with
//! `Gemma4ForCausalLM(Gemma4TextConfig(**cfg))` (or
//! `Gemma4ForConditionalGeneration(Gemma4Config(**cfg))` for a `gemma4` config, `model_type`
//! and `architectures` dropped) under `torch.device("meta")`,
//! `sum(p.numel() for p in model.parameters())` (fixtures/gemma4/README.md).

mod common;

use common::gemma::{assert_named_parameters, by_name, config, wrapped, Shapes};
use serde_json::{Map, Value};
use vramscope_formats::hf_config::{gemma4, gemma4_towers, parse_config_str};

/// The multimodal `gemma4` config without towers is the language model alone: E2B's count,
/// derived in `gemma_text.rs` (where the text configs are read for the estimator).
#[test]
fn gemma4_wrapper_without_towers_is_its_language_model() {
    // A `gemma4` wrapper with neither tower (`SubConfigSpec(optional=True)`: none is built) is
    // its language model alone, estimated.
    let wrapped = wrapped("gemma4", "gemma4", "gemma-4-e2b-text.json");
    let spec = parse_config_str(&wrapped, "e2b").unwrap().spec;
    assert!(spec.vision.is_none());
    let inv = vramscope_core::inventory::build_inventory(&spec).unwrap();
    assert_eq!(inv.params(), 4_628_569_344);
}

/// The whole E2B (`google/gemma-4-E2B`, `Gemma4ForConditionalGeneration`; fixture
/// `gemma-4-e2b.json`, its README gives the sources) by hand, from `modeling_gemma4.py`:
/// - language model (tied head): 4,628,569,344 (the text fixture's count, `gemma_text.rs`)
/// - vision tower (hidden 768, MLP 3,072, 16 layers, 12 heads and 12 KV heads of 64, patch
///   16, position table 10,240): `input_proj` 768·3·16² = 589,824; position table
///   2·10,240·768 = 15,728,640; per layer q/k/v/o 4·768·768 = 2,359,296, q/k norms 2·64,
///   MLP 3·768·3,072 = 7,077,888, four norms 4·768: 9,440,384 · 16 = 151,046,144;
///   167,364,608 in all
/// - `embed_vision.embedding_projection` 1,536·768 = 1,179,648
/// - audio tower (hidden 1,024, 12 layers, 8 heads, channels [128, 32], kernel 5, output
///   1,536): sub-sampling 128·9 + 128 + 32·128·9 + 32 + 1,024·(128/4·32) = 1,086,752; per
///   layer two feed-forwards 2·(2·4·1,024² + 2·1,024) = 16,781,312, attention 5·1,024² + 128
///   = 5,243,008, light conv 3·1,024² + 5·1,024 + 2·1,024 = 3,152,896, three norms 3,072:
///   25,180,288 · 12 = 302,163,456; `output_proj` 1,536·1,024 + 1,536 = 1,574,400;
///   304,824,608 in all
/// - `embed_audio.embedding_projection` 1,536·1,536 = 2,359,296
/// - total 5,104,297,504 — transformers on the meta device: 5,104,297,504 (vision_tower
///   167,364,608, audio_tower 304,824,608, embed_vision 1,179,648, embed_audio 2,359,296).
#[test]
fn gemma4_e2b_with_towers_counts_as_transformers() {
    let cfg = config("gemma4", "gemma-4-e2b.json");
    let tensors = gemma4_towers::model_tensors(&cfg, "e2b").unwrap();
    let parts = gemma4_towers::part_counts(&tensors);
    assert_eq!(
        parts,
        [
            4_628_569_344,
            167_364_608 + 1_179_648,
            304_824_608 + 2_359_296
        ]
    );
    // Read for the estimator, the whole model is in the inventory, the audio tower and its
    // embedder as loaded-only tensors (their own part, never run).
    let text = serde_json::to_string(&cfg).unwrap();
    let spec = parse_config_str(&text, "e2b").unwrap().spec;
    let inv = vramscope_core::inventory::build_inventory(&spec).unwrap();
    assert_eq!(inv.params(), 5_104_297_504);
    let audio = inv.by_part()[&vramscope_core::vision::Part::Audio].params;
    assert_eq!(audio, 304_824_608 + 2_359_296);
}

/// A tiny synthetic `gemma4` (`tiny-gemma4.json`: the tiny MoE text model, a vision tower
/// with grouped KV heads, `standardize`, unclipped linears; an audio tower with clipped
/// linears, channels [16, 8], kernel 3; the head untied at the top level) by hand:
/// - language model 518,536 (582,536, `gemma_text.rs`, less its 64,000 head) + `lm_head` 1,000·64 = 64,000
/// - vision (hidden 48, MLP 96, 2 layers, 4 heads over 2 KV heads of 16, patch 4, table 40):
///   48·48 + 2·40·48 = 6,144; per layer q 64·48 + k, v 2·32·48 + o 48·64 = 9,216, norms 32,
///   MLP 3·48·96 = 13,824, four norms 192: 23,264 · 2; 52,672; `embed_vision` 64·48 = 3,072
/// - audio (hidden 32, 2 layers, 4 heads of 8, output 40): sub-sampling 16·9 + 16 + 8·16·9 +
///   8 + 32·(16/4·8) = 2,344; per layer 24·32² + (9 + 3)·32 + 8 = 24,968 · 2; `output_proj`
///   40·32 + 40 = 1,320; 53,600; `embed_audio` 64·40 = 2,560
/// - total 694,440, and every name and shape equal to `named_parameters()` on the meta device
///   (`tiny-gemma4-tensors.json`, written by transformers 5.24; buffers — clipping bounds,
///   `std_bias`/`std_scale` — are not parameters).
#[test]
fn gemma4_tiny_towers_match_transformers_name_by_name() {
    let cfg = config("gemma4", "tiny-gemma4.json");
    let tensors = gemma4_towers::model_tensors(&cfg, "tiny").unwrap();
    assert_eq!(
        gemma4_towers::part_counts(&tensors),
        [518_536 + 64_000, 52_672 + 3_072, 53_600 + 2_560]
    );
    assert_named_parameters(&by_name(tensors), "gemma4", "tiny-gemma4-tensors.json");
}

/// Bad tower configs get one line naming the field: audio heads that do not divide the
/// width, sub-sampling channels that are not two positive counts, a zero vision width.
#[test]
fn gemma4_bad_tower_configs_are_refused() {
    let cases: [(&str, Value, &str); 3] = [
        (
            "audio_config",
            serde_json::json!({"num_attention_heads": 7}),
            "num_attention_heads",
        ),
        (
            "audio_config",
            serde_json::json!({"subsampling_conv_channels": [128]}),
            "subsampling_conv_channels",
        ),
        (
            "vision_config",
            serde_json::json!({"hidden_size": 0}),
            "hidden_size",
        ),
    ];
    for (tower, bad, field) in cases {
        let mut cfg = config("gemma4", "tiny-gemma4.json");
        let sub = cfg.get_mut(tower).unwrap().as_object_mut().unwrap();
        for (k, v) in bad.as_object().unwrap() {
            sub.insert(k.clone(), v.clone());
        }
        let err = gemma4_towers::model_tensors(&cfg, "bad")
            .unwrap_err()
            .to_string();
        assert!(err.contains(field) && err.contains(tower), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}

/// Bad input: sharing every cache-producing full layer away is refused, as transformers
/// raises in `kv_sharing_modes`; an expert block without `num_experts` names the field.
#[test]
fn gemma4_bad_configs_are_refused() {
    let mut cfg = config("gemma4", "tiny-moe-keqv-text.json");
    cfg.insert("num_kv_shared_layers".into(), 4.into());
    let err = gemma4::text_params(&cfg, "x").unwrap_err().to_string();
    assert!(err.contains("num_kv_shared_layers"), "{err}");
    let mut cfg = config("gemma4", "tiny-moe-keqv-text.json");
    cfg.remove("num_experts");
    let err = gemma4::text_params(&cfg, "x").unwrap_err().to_string();
    assert!(err.contains("num_experts"), "{err}");
}

/// The defaults-table row (`fixtures/defaults/transformers-5.24.0.json`, `gemma4_text`, written
/// by `read_defaults.py` from `Gemma4TextConfig()` on the meta device): the class-default count,
/// layer 0's tensors, and each layer's head size — 512 (`global_head_dim`) exactly where
/// transformers builds a layer without a sliding window, 256 elsewhere.
#[test]
fn gemma4_text_class_defaults_match_the_table_row() {
    let table = common::fixture_json("defaults", "transformers-5.24.0.json");
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model_type"] == "gemma4_text")
        .unwrap();
    let empty: Map<String, Value> =
        serde_json::from_str(r#"{"model_type": "gemma4_text"}"#).unwrap();
    let tensors = by_name(gemma4::text_tensors(&empty, "defaults").unwrap());
    let count: u64 = tensors.values().map(|s| s.iter().product::<u64>()).sum();
    assert_eq!(count, row["params"].as_u64().unwrap());
    assert_eq!(row["tie_word_embeddings"], true);
    assert!(!tensors.contains_key("lm_head.weight"));
    let layer0: Shapes = tensors
        .iter()
        .filter_map(|(n, s)| Some((n.strip_prefix("model.layers.0.")?.to_string(), s.clone())))
        .collect();
    let theirs: Shapes = serde_json::from_value(row["layer0"].clone()).unwrap();
    assert_eq!(layer0, theirs);
    for (i, w) in row["layer_windows"].as_array().unwrap().iter().enumerate() {
        let q_norm = &tensors[&format!("model.layers.{i}.self_attn.q_norm.weight")];
        assert_eq!(q_norm[0], if w.is_null() { 512 } else { 256 }, "layer {i}");
    }
}
