//! Gemma 4 without its audio tower (`gemma4` with `audio_config` null, the 26B-A4B and 31B
//! checkpoints' `Gemma4ForConditionalGeneration`) read natively for the estimator: the
//! `gemma4_text` language model, the vision tower and `embed_vision`, each counted to the
//! parameter against transformers; the image tokens of `Gemma4ImageProcessor`; a config with an
//! audio tower (E2B) read with the tower as loaded-only tensors.
//!
//! Meta-device counts: `/work/main/.venv-test/bin/python` with
//! `Gemma4ForConditionalGeneration(Gemma4Config(**cfg))` (`model_type` and `architectures`
//! dropped) under `torch.device("meta")`, the parameters summed by name prefix
//! (`.vision_tower.`, `embed_vision`, the rest). It printed 25,805,933,872 for the 26B-A4B
//! (vision 569,548,080, embed_vision 3,244,032, language 25,233,141,760), 31,273,086,512 for
//! the 31B (569,548,080, 6,193,152, 30,697,345,280) and 8,218,912 for the tiny measured config
//! (369,920, 32,768, 7,816,224). The fixtures' sources are in `fixtures/gemma4/README.md`.

mod common;

use common::vlm::parts_of;
use vramscope_formats::hf_config::parse_config_str;
use vramscope_formats::model_source::load_model;

fn parts(name: &str) -> (u64, u64, u64, u64) {
    let path = common::fixture_path("gemma4", name);
    let m = load_model(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        m.warnings.iter().all(|w| !w.contains("multimodal")),
        "{name}"
    );
    parts_of(&m)
}

crate::parts_tests! {
    gemma_4_26b_a4b: "gemma-4-26b-a4b.json" => (25_805_933_872, 569_548_080, 3_244_032, 25_233_141_760);
    gemma_4_31b: "gemma-4-31b.json" => (31_273_086_512, 569_548_080, 6_193_152, 30_697_345_280);
    tiny_gemma4_vision: "tiny-gemma4-vision.json" => (8_218_912, 369_920, 32_768, 7_816_224);
    // E2B's parts by hand in `gemma4.rs`; the total includes the audio tower and embedder's
    // 304,824,608 + 2,359,296 loaded-only parameters.
    gemma_4_e2b: "gemma-4-e2b.json" => (5_104_297_504, 167_364_608, 1_179_648, 4_628_569_344);
}

/// The 26B/31B tower by hand (`Gemma4VisionModel.__init__`: 1152 wide, 27 layers, 16 heads
/// and 16 KV heads of 72, MLP 4304, patch 16, position table 10240):
/// - `patch_embedder.input_proj` 3·16²·1152 = 884,736; `position_embedding_table`
///   2·10240·1152 = 23,592,960;
/// - a layer: q/k/v/o 4·1152·1152 = 5,308,416, `q_norm`/`k_norm` 2·72 = 144 (`v_norm` has no
///   weight), gate/up/down 3·1152·4304 = 14,874,624, four norms 4·1152 = 4,608: 20,187,792;
///   · 27 = 545,070,384;
/// - 569,548,080 in all. `embed_vision.embedding_projection`: 1152·2816 = 3,244,032 (26B),
///   1152·5376 = 6,193,152 (31B).
///
/// The 31B language model (60 layers of 5376, 32 heads; sliding layers 16 KV heads of 256,
/// every sixth layer full with 4 KV heads of 512 and keys as values: no `v_proj`; MLP 21504;
/// tied head):
/// - `embed_tokens` 262144·5376 = 1,409,286,144;
/// - sliding (50): q 5376·8192, k and v 5376·4096 each, o 8192·5376, q/k norms 2·256:
///   132,121,088 each;
/// - full (10): q 5376·16384, k 5376·2048, o 16384·5376, q/k norms 2·512: 187,171,840 each;
/// - every layer: MLP 3·5376·21504 = 346,816,512, four norms 21,504;
/// - 1,409,286,144 + 6,606,054,400 + 1,871,718,400 + 60·346,838,016 + final norm 5,376
///   = 30,697,345,280.
#[test]
fn tower_and_31b_language_by_hand() {
    let layer: u64 = 4 * 1152 * 1152 + 2 * 72 + 3 * 1152 * 4304 + 4 * 1152;
    assert_eq!(layer, 20_187_792);
    let tower = 3 * 16 * 16 * 1152 + 2 * 10240 * 1152 + 27 * layer;
    assert_eq!(tower, 569_548_080);
    let sliding: u64 = 5376 * 8192 + 2 * 5376 * 4096 + 8192 * 5376 + 512;
    let full: u64 = 5376 * 16384 + 5376 * 2048 + 16384 * 5376 + 1024;
    let each: u64 = 3 * 5376 * 21504 + 4 * 5376;
    let lm = 262_144 * 5376 + 50 * sliding + 10 * full + 60 * each + 5376;
    assert_eq!(lm, 30_697_345_280);
}

/// The image rule (`image_processing_gemma4.py` `get_aspect_ratio_preserving_size`, worked in
/// `vramscope_core::vision::gemma4`'s tests; transformers' own function gives (768, 768) for a
/// 1024 square with patch 16, 2520 patches, pooling 3): the tower always runs over 280·9 = 2520
/// padded patches; a 1024 px square gives 48² / 9 = 256 soft tokens plus `<boi>` and `<eoi>`.
/// A `preprocessor_config.json`'s `max_soft_tokens` 70 gives 630 patches and, for the same
/// image (resized to 384: transformers gives (384, 384)), 64 + 2 tokens.
#[test]
fn image_tokens_per_processor() {
    let path = common::fixture_path("gemma4", "gemma-4-31b.json");
    let mut spec = load_model(&path).unwrap().spec.unwrap();
    let v = spec.vision.as_ref().unwrap();
    let c = v.tokens.cost(1024, 1024).unwrap();
    assert_eq!((c.tokens, c.tower_images, c.tower_seq), (258, 1, 2520));
    vramscope_formats::hf_config::apply_preprocessor(
        &mut spec,
        r#"{"max_soft_tokens": 70}"#,
        "preprocessor_config.json",
    )
    .unwrap();
    let c = spec
        .vision
        .as_ref()
        .unwrap()
        .tokens
        .cost(1024, 1024)
        .unwrap();
    assert_eq!((c.tokens, c.tower_seq), (66, 630));
}

/// A `gemma4` config with an audio tower (E2B) is read: the audio tower and `embed_audio` are
/// its loaded-only tensors, named as `Gemma4ForConditionalGeneration` names them (the first the
/// sub-sampling's first convolution `[128, 1, 3, 3]`, the last `embed_audio`'s projection
/// `[1536, 1536]` from `output_proj_dims` to the text width), and the config without one has
/// none; a budget the processor does not accept is refused naming the field.
#[test]
fn audio_loaded_and_bad_budget_named() {
    let path = common::fixture_path("gemma4", "gemma-4-e2b.json");
    let spec = load_model(&path).unwrap().spec.unwrap();
    let first = &spec.idle_tensors[0];
    assert_eq!(
        (first.0.as_str(), first.1.as_slice()),
        (
            "model.audio_tower.subsample_conv_projection.layer0.conv.weight",
            &[128, 1, 3, 3][..]
        )
    );
    let last = spec.idle_tensors.last().unwrap();
    assert_eq!(
        (last.0.as_str(), last.1.as_slice()),
        (
            "model.embed_audio.embedding_projection.weight",
            &[1536, 1536][..]
        )
    );
    let path = common::fixture_path("gemma4", "gemma-4-31b.json");
    assert!(load_model(&path)
        .unwrap()
        .spec
        .unwrap()
        .idle_tensors
        .is_empty());
    let path = common::fixture_path("gemma4", "tiny-gemma4-vision.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cfg["vision_soft_tokens_per_image"] = 100.into();
    let err = parse_config_str(&cfg.to_string(), "cfg")
        .unwrap_err()
        .to_string();
    assert!(err.contains("vision_soft_tokens_per_image"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}
