//! PaliGemma 2 (`paligemma`) and LFM2-VL (`lfm2_vl`) read natively: tower, projector and
//! language model counted to the parameter against transformers 5.24 and by hand, and each
//! family's image tokens worked by hand from its processor's code.
//!
//! Every expected total is transformers 5.24's own, built from the fixture on the meta device
//! (`fixtures/defaults/count_fixtures.py`: `AutoConfig.for_model(**config)`; `with
//! torch.device("meta"): PaliGemmaForConditionalGeneration(cfg)` /
//! `Lfm2VlForConditionalGeneration(cfg)`; unique parameters summed), run as
//! `/work/main/.venv-test/bin/python crates/formats/tests/fixtures/defaults/count_fixtures.py
//! crates/formats/tests/fixtures/vlm/paligemma2-3b-pt-224.json:PaliGemmaForConditionalGeneration
//! ...`: 3,032,242,416 (224 px), 3,033,127,152 (448 px), 1,584,804,000 (LFM2-VL-1.6B),
//! 450,822,656 (LFM2-VL-450M). The configs' sources are in `fixtures/vlm/README.md`.

mod common;

use vramscope_core::vision::{ImageTokens, Part};
use vramscope_formats::model_source::load_model;

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/vlm/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// (total, vision tower, projector, language model) as the inventory counts them.
fn parts(name: &str) -> (u64, u64, u64, u64) {
    let m = load_model(&fixture(name)).unwrap();
    assert!(
        m.warnings.iter().all(|w| !w.contains("multimodal")),
        "{name}: {:?}",
        m.warnings
    );
    let by = m.inventory.as_ref().unwrap().by_part();
    let get = |p: Part| by.get(&p).map_or(0, |t| t.params);
    (
        m.params_total,
        get(Part::Vision),
        get(Part::Projector),
        get(Part::Language),
    )
}

/// One SigLIP / SigLIP2 encoder layer of width `h` and MLP `f` (`SiglipEncoderLayer`): two
/// LayerNorms with biases, q/k/v/out projections with biases, `fc1`/`fc2` with biases.
fn siglip_layer(h: u64, f: u64) -> u64 {
    4 * h + 4 * (h * h + h) + (h * f + f) + (f * h + h)
}

/// PaliGemma 2 3B at 224 px. Tower (`SiglipVisionModel`, so400m: 1152 wide, MLP 4304, 27
/// layers, 14 px patches, no head): patch conv 1152·3·14·14 + 1152 = 678,528; positions
/// (224/14)² = 256 rows · 1152 = 294,912; a layer 4,608 + 5,313,024 + 9,921,872 = 15,239,504,
/// × 27 = 411,466,608; `post_layernorm` 2,304 → 412,442,352. Projector: `linear` 1152 → 2304
/// with bias = 2,656,512. Language model (Gemma 2 2B: 2304 wide, 26 layers, 8 heads × 256,
/// 4 kv heads, MLP 9216, vocab 257,216, tied): embeddings 592,625,664; a layer q 2304·2048 +
/// k, v 2·2304·1024 + o 2048·2304 = 14,155,776, MLP 3·2304·9216 = 63,700,992, four norms
/// 9,216 → 77,865,984, × 26 = 2,024,515,584; final norm 2,304 → 2,617,143,552.
/// Total 3,032,242,416 = transformers'.
#[test]
fn paligemma2_3b_pt_224() {
    assert_eq!(siglip_layer(1152, 4304), 15_239_504);
    let tower = 1152 * 3 * 14 * 14 + 1152 + 256 * 1152 + 27 * 15_239_504 + 2 * 1152;
    assert_eq!(tower, 412_442_352u64);
    let layer = 2304 * 2048 * 2 + 2 * 2304 * 1024 + 3 * 2304 * 9216 + 4 * 2304;
    let lm = 257_216 * 2304 + 26 * layer + 2304;
    assert_eq!(lm, 2_617_143_552u64);
    assert_eq!(
        parts("paligemma2-3b-pt-224.json"),
        (3_032_242_416, 412_442_352, 2_656_512, 2_617_143_552)
    );
}

/// PaliGemma 2 3B at 448 px: the same model with (448/14)² = 1024 position rows, 768 · 1152
/// = 884,736 more than at 224 px: 3,033,127,152 = transformers'. Its image is 1024 tokens
/// (`PaliGemmaConfig.__post_init__`: `(image_size // patch_size) ** 2`), the tower's sequence
/// 1024 patches, no class token.
#[test]
fn paligemma2_3b_pt_448() {
    assert_eq!(3_032_242_416 + 768 * 1152, 3_033_127_152u64);
    let m = load_model(&fixture("paligemma2-3b-pt-448.json")).unwrap();
    assert_eq!(m.params_total, 3_033_127_152);
    let v = m.spec.as_ref().unwrap().vision.clone().unwrap();
    assert_eq!(v.family, "paligemma");
    let cost = v.tokens.cost(640, 480).unwrap();
    assert_eq!(
        (cost.tokens, cost.tower_images, cost.tower_seq),
        (1024, 1, 1024)
    );
    // 224 px: (224/14)² = 256 whatever the image's size.
    let m = load_model(&fixture("paligemma2-3b-pt-224.json")).unwrap();
    let v = m.spec.as_ref().unwrap().vision.clone().unwrap();
    assert_eq!(v.tokens.cost(1920, 1080).unwrap().tokens, 256);
}

/// A PaliGemma whose `projection_dim` is not the language model's width cannot run (the
/// projected features replace token embeddings): refused in one line naming the field.
#[test]
fn paligemma_projection_must_match_the_language_model() {
    let text = std::fs::read_to_string(fixture("paligemma2-3b-pt-224.json")).unwrap();
    let bad = text.replacen("\"projection_dim\": 2304", "\"projection_dim\": 2048", 1);
    common::assert_refused(&bad, "projection_dim");
}

/// LFM2-VL-1.6B. Tower (`Siglip2VisionModel`, 1152 wide, MLP 4304, 26 layers, 16 px patches,
/// 256 positions, no head): `patch_embedding` a linear 3·16·16 = 768 → 1152 with bias
/// = 885,888; positions 256 · 1152 = 294,912; 26 layers × 15,239,504 = 396,227,104;
/// `post_layernorm` 2,304 → 397,410,208. Projector (factor 2: 4 · 1152 = 4608 wide):
/// LayerNorm 9,216, `linear_1` 4608·2560 + 2560 = 11,799,040, `linear_2` 2560·2048 + 2048 =
/// 5,244,928 → 17,053,184. Language model: LFM2-1.2B, 1,170,340,608 (`hybrid_counts.rs`).
/// Total 1,584,804,000 = transformers'.
#[test]
fn lfm2_vl_1_6b() {
    let tower = 768 * 1152 + 1152 + 256 * 1152 + 26 * siglip_layer(1152, 4304) + 2 * 1152;
    assert_eq!(tower, 397_410_208u64);
    let projector = 2 * 4608 + 4608 * 2560 + 2560 + 2560 * 2048 + 2048;
    assert_eq!(projector, 17_053_184u64);
    assert_eq!(tower + projector + 1_170_340_608, 1_584_804_000);
    assert_eq!(
        parts("lfm2-vl-1.6b.json"),
        (1_584_804_000, 397_410_208, 17_053_184, 1_170_340_608)
    );
}

/// LFM2-VL-450M. Tower (SigLIP2 base: 768 wide, MLP 3072, 12 layers): patch linear 768·768 +
/// 768 = 590,592, positions 196,608, a layer 7,087,872 × 12 = 85,054,464, final norm 1,536 →
/// 85,843,200. Projector (3072 wide): 6,144 + 3072·2560 + 2560 + 2560·1024 + 1024 =
/// 10,495,488. Language model (LFM2-350M: 1024 wide, 16 layers, attention on 2, 5, 8, 10, 12,
/// 14; `block_ff_dim` 6656 auto-adjusted to int(2·6656/3) = 4437 → multiple of 256 = 4608):
/// embeddings 65,536 · 1024 = 67,108,864; a conv layer in_proj 1024·3072 + out_proj 1024² +
/// conv 1024·3 + MLP 3·1024·4608 + 2 norms = 18,355,200 (× 10); an attention layer q, o
/// 2·1024² + k, v 2·1024·512 + q/k layernorms 2·64 + MLP + 2 norms = 17,303,680 (× 6); the
/// final norm 1,024 → 354,483,968. Total 450,822,656 = transformers'.
#[test]
fn lfm2_vl_450m() {
    assert_eq!(siglip_layer(768, 3072), 7_087_872);
    let tower = 768 * 768 + 768 + 256 * 768 + 12 * 7_087_872 + 2 * 768;
    assert_eq!(tower, 85_843_200u64);
    let projector = 2 * 3072 + 3072 * 2560 + 2560 + 2560 * 1024 + 1024;
    assert_eq!(projector, 10_495_488u64);
    let mlp = 3 * 1024 * 4608;
    let conv = 1024 * 3072 + 1024 * 1024 + 1024 * 3 + mlp + 2 * 1024;
    let attn = 2 * 1024 * 1024 + 2 * 1024 * 512 + 2 * 64 + mlp + 2 * 1024;
    let lm = 65_536 * 1024 + 10 * conv + 6 * attn + 1024;
    assert_eq!(lm, 354_483_968u64);
    assert_eq!(tower + projector + lm, 450_822_656);
    assert_eq!(
        parts("lfm2-vl-450m.json"),
        (450_822_656, tower, projector, lm)
    );
}

/// LFM2-VL's image tokens by hand from `image_processing_lfm2_vl.py` and
/// `processing_lfm2_vl.py` (defaults: patch 16, factor 2, tiles of 512, 2…10 tiles, thumbnail,
/// 64…256 tokens, tolerance 2; special tokens on). Every tower image is padded to
/// `max_num_patches` = max(256 · 4, (512/16)²) = 1024 rows.
///
/// - 1024 × 768: rounded to 32 px it is 1024 · 768 = 786,432 px > 256 · 16² · 2² · 2 = 524,288:
///   too large, so tiled. Grids of 2…10 tiles: 3 × 2 (aspect 1.5) is closest to 4/3 (diff
///   0.167; 2 × 2 and 3 × 3 are 0.333 off). Thumbnail: `smart_resize` shrinks by √(786,432 /
///   262,144) = √3 to floor(768/√3/32)·32 = 416 by floor(1024/√3/32)·32 = 576, i.e. 13 · 18 =
///   234 tokens. Tokens: start + 6 × (row/col marker + 16² = 256) + thumbnail marker + 234 +
///   end = 1,779; 7 tower images.
/// - 256 × 256: 65,536 px, not too large; `smart_resize` keeps 256 × 256 (exactly the 64-token
///   minimum, 65,536 px): 8 · 8 = 64 tokens + start + end = 66; one tower image.
/// - 2000 × 300 (w × h): rounded 1984 · 288 = 571,392 px > 524,288: tiled. Aspect 6.67: 7 × 1
///   (diff 0.33) is the closest grid of at most 10 tiles. Thumbnail: √(600,000 / 262,144) =
///   1.5129; 300 → floor(6.197)·32 = 192, 2000 → floor(41.31)·32 = 1312: 6 · 41 = 246 tokens.
///   Tokens 1 + 7 × 257 + 1 + 246 + 1 = 2,048; 8 tower images.
#[test]
fn lfm2_vl_image_tokens() {
    let m = load_model(&fixture("lfm2-vl-1.6b.json")).unwrap();
    let v = m.spec.as_ref().unwrap().vision.clone().unwrap();
    assert!(matches!(v.tokens, ImageTokens::Lfm2Vl(_)));
    let c = |w, h| {
        let c = v.tokens.cost(w, h).unwrap();
        (c.tokens, c.tower_images, c.tower_seq)
    };
    assert_eq!(c(1024, 768), (1_779, 7, 1024));
    assert_eq!(c(256, 256), (66, 1, 1024));
    assert_eq!(c(2000, 300), (2_048, 8, 1024));
}

/// A tiny config of `validation/specs/`, read as the job's `hf_config`.
fn spec_config(id: &str) -> u64 {
    let spec: serde_json::Value = common::validation(&format!("specs/{id}.json"));
    let parsed = vramscope_formats::hf_config::parse_config_value(&spec["hf_config"], id).unwrap();
    vramscope_formats::model_source::model_of_config(parsed, id)
        .unwrap()
        .params_total
}

/// The tied head follows the wrapper's `tie_word_embeddings` (default true), not the text
/// config's. The measured tiny LFM2-VL's `text_config` says false, yet transformers built it
/// tied: its record (`validation/results/cpu-tiny-lfm2vl-fp32-adamw-sdpa-b2-1img.json`,
/// `n_params`) counts 3,796,224, one 1024 × 256 head fewer than untied. The tiny PaliGemma
/// (record: 290,240) by hand: tower patch conv 64·3·14·14 + 64 = 37,696, positions 64 · 64 =
/// 4,096, two layers of 49,984 (`siglip_layer(64, 256)`), final norm 128 → 141,888; projector
/// 64 · 64 + 64 = 4,160; Gemma 2 (64 wide, 3 layers, 4 heads × 16, 2 kv heads, MLP 128,
/// vocab 512, tied): 32,768 + 3 · (12,288 + 24,576 + 256) + 64 = 144,192.
#[test]
fn tiny_measured_configs_count_as_their_records() {
    assert_eq!(siglip_layer(64, 256), 49_984);
    assert_eq!(
        37_696 + 4_096 + 2 * 49_984 + 128 + 4_160 + 144_192,
        290_240u64
    );
    assert_eq!(
        spec_config("cpu-tiny-paligemma-fp32-adamw-eager-b2-1img"),
        290_240
    );
    assert_eq!(
        spec_config("cpu-tiny-lfm2vl-fp32-adamw-sdpa-b2-1img"),
        3_796_224
    );
}

/// An LFM2-VL `preprocessor_config.json` overrides the processor keys: `max_image_tokens` 64
/// and no splitting make a 1024 × 768 image one resized image — `smart_resize` shrinks it by
/// √(786,432 / 65,536) = √12 = 3.4641 to floor(768/3.4641/32)·32 = 192 by
/// floor(1024/3.4641/32)·32 = 288, i.e. 6 · 9 = 54 tokens + start + end = 56 — padded to
/// `max_num_patches` = 64 · 2² = 256 (no tile term without splitting).
#[test]
fn lfm2_vl_preprocessor_overrides() {
    let m = load_model(&fixture("lfm2-vl-1.6b.json")).unwrap();
    let mut spec = m.spec.clone().unwrap();
    vramscope_formats::hf_config::apply_preprocessor(
        &mut spec,
        r#"{"max_image_tokens": 64, "do_image_splitting": false}"#,
        "preprocessor_config.json",
    )
    .unwrap();
    let c = spec.vision.unwrap().tokens.cost(1024, 768).unwrap();
    assert_eq!((c.tokens, c.tower_images, c.tower_seq), (56, 1, 256));
}
